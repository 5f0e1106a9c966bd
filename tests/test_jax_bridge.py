"""iglu_np.jax: the activations as jax.custom_vjp functions (XLA FFI custom calls on the
CPU, pure_callback elsewhere), under grad, jit and vmap, with constant and
differentiable parameters."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import iglu_np

jax = pytest.importorskip("jax", reason="the JAX bridge needs jax (pip install '.[jax]')")
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import iglu_np.jax as ij  # noqa: E402

NAMES = list(iglu_np.ACTIVATIONS)
# The default run checks the gradients of these (no parameter, one, two with a check, four
# with an ``above``, kinks); `-m slow` every activation. The handlers are one template.
FEW = ["gelu", "silu", "iglu", "xielu", "softplus", "mish", "hardtanh", "elu", "relu"]
EVERY = [pytest.param(n, marks=() if n in FEW else pytest.mark.slow) for n in NAMES]


def _x64():
    """64-bit JAX inside a ``with`` block (``jax.enable_x64`` from JAX 0.6 on)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # older JAX

    return enable_x64()


def _grad_params(spec) -> dict:
    """Each parameter's value for the gradient check: its default, or where that lies
    within the finite differences' reach of the domain's edge (xielu's eps=-1e-6 <= 0),
    the first test value well inside."""
    out = {}
    for p in spec.params:

        def inside(v):
            return all(p.contains(v + d) for d in (-0.02, 0.02))

        out[p.name] = (
            p.default if inside(p.default) else next(v for v in p.test_values if inside(v))
        )
    assert spec.check is None or not spec.check(**out)
    return out


def _grad_points(spec, params) -> np.ndarray:
    """x in [-3.9, 3.9] at least 0.05 from the spec's kinks and thresholds (evaluated at
    ``params``) and from 0, where the value or a derivative may jump."""
    x = np.linspace(-3.9, 3.9, 14) + 0.0123
    kinks = [0.0] + [
        v for v in ((s(params) if callable(s) else s) for s in spec.special_points) if v is not None
    ]
    far = np.all(np.abs(x[:, None] - np.array(kinks, dtype=np.float64)[None, :]) > 0.05, axis=1)
    return x[far]


# --------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("name", EVERY)
def test_grads_match_finite_differences_in_x_and_every_parameter(name):
    act = iglu_np.get(name)
    params = _grad_params(act.spec)
    names = list(params)
    with _x64():
        x = jnp.asarray(_grad_points(act.spec, params))
        pvals = [jnp.asarray(params[k], dtype=jnp.float64) for k in names]

        def f(x, *pv):
            return ij.ACTIVATIONS[name](x, **dict(zip(names, pv)))

        check_grads(f, (x, *pvals), order=1, modes=("rev",))
        # the values and gradients are iglu_np's own
        y = f(x, *pvals)
        assert y.dtype == jnp.float64
        np.testing.assert_array_equal(np.asarray(y), act(np.asarray(x), **params))
        g = np.linspace(0.5, 1.5, x.size)
        grads = jax.vjp(f, x, *pvals)[1](jnp.asarray(g))
        gx, gp = act.backward_all(np.asarray(x), g, **params)
        np.testing.assert_array_equal(np.asarray(grads[0]), gx)
        for k, gk in zip(names, grads[1:]):
            assert gk.shape == () and gk.dtype == jnp.float64
            np.testing.assert_allclose(float(gk), float(gp[k]), rtol=1e-12, atol=1e-300)


def test_constant_parameters_get_no_cotangent_work():
    x = jnp.linspace(-2.0, 2.0, 7)

    def kernels(f, *args):  # the kernels the compiled custom calls run, by kind
        hlo = jax.jit(f).lower(*args).compile().as_text()
        assert "python_cpu_callback" not in hlo
        return sorted(
            set(re.findall(r'custom_call_target="iglu_np_[a-z_]+?_((?:fwd|bwd|d_[a-z_]+))_f', hlo))
        )

    # a Python float: the backward computes grad_x alone
    assert kernels(jax.grad(lambda x: ij.iglu(x, sigma=2.0).sum()), x) == ["bwd"]
    # an array: grad_x and its cotangent
    assert kernels(
        jax.grad(lambda x, s: ij.iglu(x, sigma=s).sum(), (0, 1)), x, jnp.float32(2.0)
    ) == [
        "bwd",
        "d_sigma",
    ]
    # the mix: one cotangent, for the array
    assert kernels(
        jax.grad(lambda x, b: ij.softplus(x, beta=b, threshold=15.0).sum(), (0, 1)),
        x,
        jnp.float32(2.0),
    ) == ["bwd", "d_beta"]


def test_jit_gives_the_eager_results():
    x = jnp.linspace(-3.0, 3.0, 11, dtype=jnp.float32)
    s = jnp.float32(0.7)

    def loss(x, s):
        return (ij.iglu(x, sigma=s) ** 2).sum()

    eager = jax.grad(loss, argnums=(0, 1))(x, s)
    jitted = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, s)
    for a, b in zip(eager, jitted):
        assert a.dtype == b.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(eager[0]), np.asarray(jitted[0]))
    # the parameter's cotangent is a float32 sum in XLA: its order may differ under jit
    np.testing.assert_allclose(np.asarray(eager[1]), np.asarray(jitted[1]), rtol=1e-6)
    y = np.asarray(iglu_np.iglu(np.asarray(x), sigma=0.7))
    gx, gp = iglu_np.iglu.backward_all(np.asarray(x), 2 * y, sigma=np.float32(0.7))
    np.testing.assert_allclose(np.asarray(eager[0]), gx, rtol=1e-6)
    np.testing.assert_allclose(float(eager[1]), float(gp["sigma"]), rtol=1e-5)


def test_per_channel_parameter_gradient_has_the_parameter_shape_and_dtype():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    g = rng.standard_normal((4, 3, 5)).astype(np.float32)
    sigma = np.array([0.5, 1.0, 2.0], np.float32).reshape(3, 1)  # one per channel
    y, vjp = jax.vjp(lambda x, s: ij.iglu(x, sigma=s), jnp.asarray(x), jnp.asarray(sigma))
    gx, gs = vjp(jnp.asarray(g))
    assert gs.shape == (3, 1) and gs.dtype == jnp.float32
    want_x, want = iglu_np.iglu.backward_all(x, g, sigma=sigma)
    np.testing.assert_allclose(np.asarray(gs), want["sigma"], rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(gx), want_x)
    np.testing.assert_array_equal(np.asarray(y), iglu_np.iglu(x, sigma=sigma))


def test_parameter_wider_than_x_broadcasts_and_reduces_grad_x():
    x = jnp.linspace(-2.0, 2.0, 5, dtype=jnp.float32)
    s = jnp.array([[0.5], [1.0], [3.0]], jnp.float32)
    y = ij.iglu(x, sigma=s)
    assert y.shape == (3, 5)
    gx, gs = jax.grad(lambda x, s: ij.iglu(x, sigma=s).sum(), argnums=(0, 1))(x, s)
    assert gx.shape == (5,) and gs.shape == (3, 1)
    xb = np.broadcast_to(np.asarray(x), (3, 5))
    want_x, want = iglu_np.iglu.backward_all(xb, np.ones((3, 5), np.float32), sigma=np.asarray(s))
    np.testing.assert_allclose(np.asarray(gx), want_x.sum(0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gs), want["sigma"], rtol=1e-6)


# --------------------------------------------------------------------------- vmap
def test_vmap_over_x_and_a_per_example_parameter_matches_a_loop():
    rng = np.random.default_rng(1)
    X = jnp.asarray(rng.standard_normal((6, 3, 4)).astype(np.float32))
    S = jnp.asarray(rng.uniform(0.3, 3.0, (6, 3, 1)).astype(np.float32))  # per example, per row

    def loss(x, s):
        return (ij.iglu(x, sigma=s) * jnp.arange(4.0)).sum()

    got = jax.vmap(jax.grad(loss, argnums=(0, 1)))(X, S)
    got_jit = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1))))(X, S)
    for i in range(6):
        want = jax.grad(loss, argnums=(0, 1))(X[i], S[i])
        np.testing.assert_array_equal(np.asarray(got[0][i]), np.asarray(want[0]))
        np.testing.assert_array_equal(np.asarray(got_jit[0][i]), np.asarray(want[0]))
        for a in (got[1], got_jit[1]):  # float32 sums, in XLA's order
            np.testing.assert_allclose(np.asarray(a[i]), np.asarray(want[1]), rtol=1e-6)
    assert got[1].shape == S.shape


def test_vmap_with_a_shared_parameter_gives_each_example_its_gradient():
    # the parameter is not batched: each example's cotangent is its own, not the batch sum
    rng = np.random.default_rng(2)
    X = jnp.asarray(rng.standard_normal((5, 7)).astype(np.float32))
    s = jnp.asarray(np.linspace(0.5, 2.0, 7, dtype=np.float32))
    per_example = jax.vmap(
        jax.grad(lambda x, s: ij.iglu(x, sigma=s).sum(), argnums=1), in_axes=(0, None)
    )(X, s)
    assert per_example.shape == (5, 7)
    for i in range(5):
        _, want = iglu_np.iglu.backward_all(
            np.asarray(X[i]), np.ones(7, np.float32), sigma=np.asarray(s)
        )
        np.testing.assert_allclose(np.asarray(per_example[i]), want["sigma"], rtol=1e-6)


def test_nested_vmap_over_other_axes_matches_the_direct_call():
    rng = np.random.default_rng(3)
    X = jnp.asarray(rng.standard_normal((3, 4, 5)))
    S = jnp.asarray(rng.uniform(0.5, 2.0, (4,)))
    f = jax.vmap(
        jax.vmap(lambda x, s: ij.softplus(x, beta=s), in_axes=(1, None)), in_axes=(1, 0), out_axes=1
    )
    got = f(X, S)  # got[i, j, k] = softplus(X[k, j, i], beta=S[j])
    want = iglu_np.softplus(np.asarray(X), beta=np.asarray(S)[None, :, None])
    np.testing.assert_allclose(np.asarray(got), np.transpose(want, (2, 1, 0)), rtol=1e-6)


# --------------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("dtype", ["float16", "float32", "bfloat16"])
def test_dtype_is_preserved_in_value_and_gradients(dtype):
    import ml_dtypes

    if dtype == "bfloat16":
        try:
            iglu_np.gelu(np.zeros(1, ml_dtypes.bfloat16))
        except TypeError:
            pytest.skip("iglu_np's CPU backend refuses bfloat16 arrays in this build")
    dt = jnp.dtype(dtype)
    x32 = np.linspace(-3.0, 3.0, 13, dtype=np.float32)
    x = jnp.asarray(x32).astype(dt)
    s = jnp.asarray(np.array([0.5, 1.5], np.float32)).astype(dt).reshape(2, 1)
    y = ij.iglu(x, sigma=s)
    gx, gs = jax.grad(lambda x, s: ij.iglu(x, sigma=s).sum(), argnums=(0, 1))(x, s)
    assert (y.dtype, gx.dtype, gs.dtype) == (dt, dt, dt)
    assert y.shape == (2, 13) and gs.shape == (2, 1)
    xs = np.asarray(x).astype(np.float32)  # the rounded inputs, computed in float32
    ss = np.asarray(s).astype(np.float32)
    want = iglu_np.iglu(xs, sigma=ss)
    tol = float(jnp.finfo(dt).eps)
    np.testing.assert_allclose(np.asarray(y).astype(np.float32), want, rtol=tol, atol=tol)
    _, gp = iglu_np.iglu.backward_all(
        np.broadcast_to(xs, (2, 13)), np.ones((2, 13), np.float32), sigma=ss
    )
    np.testing.assert_allclose(np.asarray(gs).astype(np.float32), gp["sigma"], rtol=tol)


def test_float64_under_x64_and_integer_x_promoted_to_the_default_float():
    with _x64():
        x = jnp.linspace(-1.0, 1.0, 5)
        assert x.dtype == jnp.float64
        assert ij.gelu(x).dtype == jnp.float64
        assert jax.grad(lambda x: ij.gelu(x).sum())(x).dtype == jnp.float64
        assert ij.gelu(jnp.arange(3)).dtype == jnp.float64
    y = ij.gelu(jnp.arange(3))
    assert y.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(y), iglu_np.gelu(np.arange(3.0)), rtol=1e-6)


# --------------------------------------------------------------------------- errors
def test_bad_constant_parameter_raises_iglu_np_value_error_eagerly_and_under_jit():
    x = jnp.ones(3)
    with pytest.raises(ValueError, match=r"iglu: parameter sigma=-1.0 is outside its domain"):
        ij.iglu(x, sigma=-1.0)
    with pytest.raises(ValueError, match=r"iglu: parameter sigma=-1.0 is outside its domain"):
        jax.jit(lambda x: ij.iglu(x, sigma=-1.0))(x)
    with pytest.raises(ValueError, match="has a value -2.0 outside its domain"):
        ij.iglu(x, sigma=jnp.array([1.0, -2.0, 1.0]))  # a concrete array is checked too
    with pytest.raises(ValueError, match="min_val must be smaller than max_val"):
        ij.hardtanh(x, min_val=jnp.array(2.0), max_val=1.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sigm'"):
        ij.iglu(x, sigm=1.0)
    with pytest.raises(ValueError, match=r"do not broadcast against x of shape \(3,\)"):
        ij.iglu(x, sigma=jnp.ones(4))
    with pytest.raises(TypeError, match="unsupported dtype complex64"):
        ij.gelu(jnp.ones(2, jnp.complex64))


def test_bad_traced_parameter_fails_at_run_time_with_iglu_np_message():
    f = jax.jit(lambda x, s: ij.iglu(x, sigma=s))
    with pytest.raises(
        jax.errors.JaxRuntimeError, match="sigma has a value outside its domain sigma > 0"
    ):
        f(jnp.ones(3), jnp.float32(-1.0)).block_until_ready()
    # per element too, and for the cross-parameter constraint the spec declares
    with pytest.raises(jax.errors.JaxRuntimeError, match="sigma has a value outside"):
        f(jnp.ones(3), jnp.asarray([1.0, jnp.nan, 2.0])).block_until_ready()
    g = jax.jit(lambda x, b: ij.xielu(x, beta=b))
    with pytest.raises(jax.errors.JaxRuntimeError, match="alpha_n must be greater than beta"):
        g(jnp.ones(3), jnp.float32(1e3)).block_until_ready()


# --------------------------------------------------------------------------- the module
def test_every_activation_is_a_jax_function_with_its_signature():
    assert ij.__all__ == [
        "ACTIVATIONS",
        "ALIASES",
        *NAMES,
        *iglu_np.ALIASES,
        "GATED",
        *ij.GATED,
        "export_checks",
        "register_exported",
    ]
    for name in NAMES:
        fn = getattr(ij, name)
        assert ij.ACTIVATIONS[name] is fn
        act = iglu_np.get(name)
        sig = inspect.signature(fn)
        assert list(sig.parameters) == ["x", *act.param_names]
        assert all(sig.parameters[p.name].default == p.default for p in act.params)
        assert "pure_callback" in fn.__doc__ and "host" in fn.__doc__


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_import_iglu_np_does_not_import_jax():
    r = _run("""
        import sys, iglu_np
        iglu_np.gelu.defaults
        print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_import_iglu_np_jax_without_jax_names_the_extra():
    r = _run("""
        import sys
        sys.modules['jax'] = None  # as if jax were not installed
        try:
            import iglu_np.jax
        except ImportError as e:
            print(e)
    """)
    assert r.returncode == 0, r.stderr
    assert "pip install '.[jax]'" in r.stdout


def test_aliases_are_their_target_with_the_alias_parameters():
    # Hugging Face's names (iglu_np.ALIASES) as JAX functions, e.g. quick_gelu
    x = np.linspace(-4, 4, 33, dtype=np.float32)
    assert set(ij.ALIASES) == set(iglu_np.ALIASES)
    for alias, (target, fixed) in iglu_np.ALIASES.items():
        fn = getattr(ij, alias)
        assert fn is ij.ALIASES[alias]
        np.testing.assert_array_equal(np.asarray(fn(jnp.asarray(x))), getattr(iglu_np, alias)(x))
    g = jax.grad(lambda b: ij.quick_gelu(jnp.asarray(x), beta=b).sum())(jnp.float32(1.702))
    want = iglu_np.swish.backward_params(x, np.ones_like(x), beta=np.float32(1.702))["beta"]
    np.testing.assert_allclose(float(g), float(want), rtol=1e-6)
