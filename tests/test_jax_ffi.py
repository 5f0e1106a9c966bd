"""The JAX bridge's compiled route (XLA FFI custom calls over iglu_np's CPU loops):
iglu_np's own bits, no Python in the compiled call, threads on XLA's pool."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import iglu_np

jax = pytest.importorskip("jax", reason="the JAX bridge needs jax (pip install '.[jax]')")
import jax.numpy as jnp  # noqa: E402

import iglu_np.jax as ij  # noqa: E402
from iglu_np import _jax_ffi  # noqa: E402

pytestmark = pytest.mark.skipif(not _jax_ffi.usable(), reason="this JAX has no jax.ffi")

NAMES = ["gelu", "silu", "iglu", "xielu", "softplus", "mish", "hardtanh", "elu"]


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 6).astype(np.float32)
    x[:4] = [0.0, -0.0, 1e-40, -200.0]  # a subnormal input; a tail far out
    return x, rng.standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("name", NAMES)
def test_value_and_gradient_are_iglu_np_bits_with_no_callback(name):
    x, g = _data(3001)
    f = ij.ACTIVATIONS[name]
    act = iglu_np.get(name)
    y = jax.jit(f)(x)
    np.testing.assert_array_equal(np.asarray(y), act(x))
    _, vjp = jax.vjp(f, jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(vjp(jnp.asarray(g))[0]), act.backward(x, g))
    hlo = jax.jit(jax.grad(lambda v: f(v).sum())).lower(x).compile().as_text()
    assert "python_cpu_callback" not in hlo and 'custom_call_target="iglu_np_' in hlo


def test_subnormal_results_are_kept_though_xla_flushes_them():
    # XLA's CPU code runs with flush-to-zero set; the handlers clear it while they compute
    x = np.float32([-13.181588, -14.0, 1e-40, -1e-40])
    got = np.asarray(jax.jit(ij.gelu)(x))
    np.testing.assert_array_equal(got, iglu_np.gelu(x))
    assert got[0] != 0 and np.abs(got[0]) < np.finfo(np.float32).tiny


def test_threaded_call_on_xlas_pool_gives_the_single_thread_bits():
    from iglu_np.backends.cpu import tiers

    x, g = _data(4 * tiers.THRESHOLD + 123, seed=1)
    for f, act in ((ij.iglu, iglu_np.iglu), (ij.gelu, iglu_np.gelu)):
        np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)), act(x))
        _, vjp = jax.vjp(f, jnp.asarray(x))
        np.testing.assert_array_equal(np.asarray(vjp(jnp.asarray(g))[0]), act.backward(x, g))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_data_is_computed_in_float32_and_rounded_once(dtype):
    x, _ = _data(1000)
    xh = jnp.asarray(x).astype(dtype)
    want = iglu_np.silu(np.asarray(xh).astype(np.float32)).astype(np.asarray(xh).dtype)
    got = jax.jit(ij.silu)(xh)
    assert got.dtype == xh.dtype
    np.testing.assert_array_equal(np.asarray(got).view(np.uint16), want.view(np.uint16))


def test_learnable_scalar_and_per_element_parameters_match_backward_all():
    x, g = _data(2000, seed=2)
    for s in (np.float32(1.7), np.linspace(0.5, 2.0, 2000, dtype=np.float32)):
        y, vjp = jax.vjp(lambda v, s: ij.iglu(v, sigma=s), jnp.asarray(x), jnp.asarray(s))
        gx, gs = vjp(jnp.asarray(g))
        wx, wp = iglu_np.iglu.backward_all(x, g, sigma=s)
        np.testing.assert_array_equal(np.asarray(y), iglu_np.iglu(x, sigma=s))
        np.testing.assert_array_equal(np.asarray(gx), wx)
        assert gs.shape == np.shape(s) and gs.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(gs), wp["sigma"], rtol=2e-6, atol=1e-6)


def test_a_float32_constant_float32_cannot_hold_takes_the_callbacks():
    x = jnp.ones(4, jnp.float32)
    hlo = jax.jit(lambda v: ij.iglu(v, sigma=1e39)).lower(x).compile().as_text()
    assert "python_cpu_callback" in hlo
    np.testing.assert_array_equal(
        np.asarray(ij.iglu(x, sigma=1e39)), iglu_np.iglu(np.ones(4, np.float32), sigma=1e39)
    )


def test_domains_in_the_handlers_follow_the_specs():
    # the handlers check what the spec declares: every bound, and `above` for the one
    # cross-parameter check it describes (xielu's); the other checked spec takes the callbacks
    x = jnp.ones(3, jnp.float32)
    hlo = jax.jit(lambda v, lo: ij.hardtanh(v, min_val=lo)).lower(x, jnp.float32(-2)).compile()
    assert "python_cpu_callback" in hlo.as_text()
    a = iglu_np.ACTIVATIONS["xielu"].spec
    for an, b in ((1.0, 0.5), (0.5, 1.0), (1.0, 1.0)):
        flagged = a.check(1.0, an, b, -1e-6) is not None
        assert flagged == (not an > b)


def test_a_parameter_operand_of_another_size_is_an_error_not_a_read_past_it():
    t = _jax_ffi._target("iglu", "fwd", np.dtype(np.float32), "operands")
    call = jax.ffi.ffi_call(t, jax.ShapeDtypeStruct((8,), jnp.float32))
    with pytest.raises(jax.errors.JaxRuntimeError, match="one element or the data's size"):
        call(jnp.ones(8, jnp.float32), jnp.ones(3, jnp.float32)).block_until_ready()


_CHILD = """
import jax, numpy as np
import iglu_np, iglu_np.jax as ij
from iglu_np.backends.xla import cpu
x = np.linspace(-6, 6, 70001, dtype=np.float32)  # past the threshold: tasks on XLA's pool
np.testing.assert_array_equal(np.asarray(jax.jit(ij.iglu)(x)), iglu_np.iglu(x))
print(sum(f.cache_hits for f in cpu._module(iglu_np.iglu.spec)._keep))
"""


def test_a_handler_compiled_once_is_loaded_from_the_disk_cache_by_later_processes(tmp_path):
    env = {**os.environ, "IGLU_NP_CACHE_DIR": str(tmp_path), "IGLU_NP_PARALLEL_THRESHOLD": ""}
    hits = []
    for _ in range(2):
        r = subprocess.run(
            [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=600
        )
        assert r.returncode == 0, r.stderr[-3000:]
        hits.append(int(r.stdout.split()[-1]))
    assert hits == [0, 1]


def _export():
    # a submodule JAX 0.5 does not import with jax, and whose import needs absl there
    return pytest.importorskip("jax.export", reason="this JAX's jax.export does not import")


def test_export_accepts_the_targets_export_checks_names():
    jexport = _export()
    x, _ = _data(257)
    s = jnp.full(x.shape, 0.7, jnp.float32)
    f = jax.jit(jax.grad(lambda x, s: ij.iglu(x, sigma=s).sum(), argnums=(0, 1)))
    with pytest.raises(ValueError, match="compatibility guarantees"):
        jexport.export(f)(x, s)
    exp = jexport.export(f, disabled_checks=ij.export_checks())(x, s)
    assert "iglu_np_iglu_d_sigma_f4_operands" in exp.mlir_module()
    for got, want in zip(exp.call(x, s), f(x, s)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


_DESERIALISE = """
import sys, numpy as np, jax, jax.numpy as jnp
import iglu_np.jax as ij
from jax import export
exp = export.deserialize(bytearray(open(sys.argv[1], "rb").read()))
print(",".join(ij.register_exported(exp)))
x = jnp.asarray(np.load(sys.argv[2]))
gx, gs = exp.call(x, jnp.full(x.shape, 0.7, jnp.float32))
np.save(sys.argv[3], np.stack([np.asarray(gx), np.asarray(gs)]))
"""


def test_a_serialised_export_runs_in_a_fresh_process_after_register_exported(tmp_path):
    jexport = _export()
    pytest.importorskip("flatbuffers", reason="jax.export serialisation needs flatbuffers")
    x, _ = _data(257)
    s = jnp.full(x.shape, 0.7, jnp.float32)
    f = jax.jit(jax.grad(lambda x, s: ij.iglu(x, sigma=s).sum(), argnums=(0, 1)))
    exp = jexport.export(f, disabled_checks=ij.export_checks())(x, s)
    (tmp_path / "f.bin").write_bytes(exp.serialize())
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            _DESERIALISE,
            *(str(tmp_path / n) for n in ("f.bin", "x.npy", "g.npy")),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-1] == "iglu_np_iglu_bwd_f4_operands,iglu_np_iglu_d_sigma_f4_operands"
    got = np.load(tmp_path / "g.npy")
    for a, b in zip(got, f(x, s)):
        np.testing.assert_array_equal(a, np.asarray(b))


def test_register_exported_names_a_target_this_version_lacks():
    class Foreign:
        def mlir_module(self):
            return "stablehlo.custom_call @iglu_np_gelu_fwd_f4_attrs(%0)\n" + (
                "stablehlo.custom_call @iglu_np_gelu_wobble_f4_attrs(%0)"
            )

    with pytest.raises(ValueError, match="iglu_np_gelu_wobble_f4_attrs"):
        ij.register_exported(Foreign())


# ------------------------------------------------------------------ gated forms
_GATED_CASES = [
    # form, params, shape, axis, layout: the loops' layouts s1 (halves; pairs along an
    # inner axis), s2 (interleaved, gate first) and s2r (up first: glu)
    ("swiglu", {}, (5, 24), -1, None),
    ("swiglu_oai", {"alpha": 1.3}, (5, 24), -1, None),
    ("geglu", {}, (3, 10, 4), 1, "interleaved"),
    ("glu", {}, (4, 18), -1, "interleaved"),
    ("xielu_glu", {"alpha_p": 0.9, "alpha_n": 0.7, "beta": 0.4}, (6, 16), 0, None),
    ("leaky_relu_glu", {"negative_slope": 0.02}, (7, 12), -1, "interleaved"),
]


@pytest.mark.parametrize("form, params, shape, axis, layout", _GATED_CASES)
def test_gated_forms_are_one_custom_call_each_way_with_iglu_np_bits(
    form, params, shape, axis, layout
):
    g = iglu_np.get_gated(form)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    kw = dict(axis=axis, layout=layout, **params)
    f = ij.GATED[form]
    jf = jax.jit(lambda v: f(v, **kw))
    hlo = jf.lower(x).compile().as_text()
    assert "callback" not in hlo and hlo.count(f"iglu_np_glu_{g._spec_name}_fwd") == 1
    y = jf(x)
    np.testing.assert_array_equal(np.asarray(y), g(x, **kw))
    ct = rng.standard_normal(y.shape).astype(np.float32)
    _, vjp = jax.vjp(lambda v: f(v, **kw), jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(jax.jit(vjp)(ct)[0]), g.backward(x, ct, **kw))


def test_gated_gate_and_up_apart_broadcast_and_reduce_their_gradients():
    rng = np.random.default_rng(4)
    gate = (rng.standard_normal((4, 6)) * 4).astype(np.float32)
    up = rng.standard_normal((4, 6)).astype(np.float32)
    f = jax.jit(lambda a, b: ij.swiglu(a, b))
    np.testing.assert_array_equal(np.asarray(f(gate, up)), iglu_np.swiglu(gate, up))
    ct = rng.standard_normal((4, 6)).astype(np.float32)
    _, vjp = jax.vjp(lambda a, b: ij.swiglu(a, b), jnp.asarray(gate), jnp.asarray(up))
    for got, want in zip(vjp(ct), iglu_np.swiglu.backward(gate, ct, up)):
        np.testing.assert_array_equal(np.asarray(got), want)
    row = up[:1]  # up broadcast along the rows: its gradient sums over them
    dg, du = jax.grad(lambda a, b: jnp.sum(ij.swiglu(a, b) * ct), argnums=(0, 1))(gate, row)
    np.testing.assert_allclose(np.asarray(du), iglu_np.swiglu.backward(gate, ct, row)[1], 1e-6)


def test_gated_vmap_and_a_threaded_call_give_the_single_call_bits():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 96, 2048)) * 4).astype(np.float32)  # past the threshold
    want = iglu_np.geglu(x)
    np.testing.assert_array_equal(np.asarray(jax.jit(ij.geglu)(x)), want)
    np.testing.assert_array_equal(np.asarray(jax.vmap(ij.geglu)(x)), want)
    ct = rng.standard_normal(want.shape).astype(np.float32)
    gx = jax.vmap(lambda v, c: jax.vjp(ij.geglu, v)[1](c)[0])(jnp.asarray(x), ct)
    np.testing.assert_array_equal(np.asarray(gx), iglu_np.geglu.backward(x, ct))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gated_16_bit_data_rounds_once_and_twice_takes_the_callbacks(dtype):
    x = jnp.asarray(np.linspace(-6, 6, 64, dtype=np.float32).reshape(4, 16)).astype(dtype)
    xn = np.asarray(x)
    np.testing.assert_array_equal(np.asarray(jax.jit(ij.swiglu)(x)), iglu_np.swiglu(xn))
    twice = jax.jit(lambda v: ij.swiglu(v, rounding="twice"))
    assert "callback" in twice.lower(x).as_text()
    np.testing.assert_array_equal(np.asarray(twice(x)), iglu_np.swiglu(xn, rounding="twice"))


def test_gated_forms_export_and_register_like_the_activations():
    jexport = _export()
    x = np.linspace(-4, 4, 48, dtype=np.float32).reshape(3, 16)
    f = jax.jit(jax.grad(lambda v: ij.swiglu_oai(v, alpha=1.3).sum()))
    exp = jexport.export(f, disabled_checks=ij.export_checks())(x)
    assert ij.register_exported(exp) == ["iglu_np_glu_swish_bwd_s2_1_f4"]
    np.testing.assert_array_equal(np.asarray(exp.call(x)), np.asarray(f(x)))
