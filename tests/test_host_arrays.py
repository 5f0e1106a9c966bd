"""Host arrays of other libraries (torch CPU tensors, JAX CPU arrays, __dlpack__ arrays on
the CPU) go through the CPU kernels on their own memory and come back as their own type,
with the numpy call's bits (iglu_np/backends/host_arrays.py; issue 54)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import iglu_np
from iglu_np import backends
from iglu_np.backends import host_arrays

from .bitwise import assert_same_bits


def _torch():
    return pytest.importorskip("torch", reason="the torch comparisons need torch (CI installs it)")


def _jnp():
    pytest.importorskip("jax", reason="the JAX comparisons need jax (the test extra has it)")
    import jax.numpy as jnp

    return jnp


def _xps():
    return pytest.importorskip(
        "array_api_strict",
        reason="the generic DLPack route is tested with array-api-strict (the test extra has it)",
    )


def _same(a, b):
    assert_same_bits(a, b)


def _calls(act, x, g, **params):
    """Every public kernel of ``act`` on (x, g): name -> result or dict of results."""
    return {
        "fwd": act(x, **params),
        "dx": act.dx(x, **params),
        "bwd": act.backward(x, g, **params),
        "dparams": act.dparams(x, **params),
        "params": act.backward_params(x, g, **params),
        "all": act.backward_all(x, g, **params),
    }


def _check_like(kind, res, want, is_type):
    if isinstance(want, dict):
        assert res.keys() == want.keys(), kind
        for k in want:
            _check_like(kind, res[k], want[k], is_type)
    elif isinstance(want, tuple):
        for r, w in zip(res, want):
            _check_like(kind, r, w, is_type)
    else:
        assert is_type(res), (kind, type(res))
        _same(res, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_cpu_tensors_come_back_as_tensors_with_the_numpy_bits(dtype):
    torch = _torch()
    x = torch.randn(2, 37, dtype=getattr(torch, dtype)) * 4
    g = torch.randn(2, 37, dtype=getattr(torch, dtype))
    assert isinstance(iglu_np.gelu(torch.randn(5)), torch.Tensor)
    _same(iglu_np.gelu(x), iglu_np.gelu(x.numpy()))
    want = _calls(iglu_np.iglu, x.numpy(), g.numpy(), sigma=0.7)
    got = _calls(iglu_np.iglu, x, g, sigma=0.7)
    for kind in want:
        _check_like(kind, got[kind], want[kind], lambda r: isinstance(r, torch.Tensor))


def test_jax_cpu_arrays_come_back_as_jax_arrays_with_the_numpy_bits():
    jnp = _jnp()
    import jax

    r = iglu_np.gelu(jnp.ones(5))
    assert isinstance(r, jax.Array)
    _same(r, iglu_np.gelu(np.ones(5, np.float32)))
    x = jnp.linspace(-6, 6, 41)
    g = jnp.cos(x)
    want = _calls(iglu_np.iglu, np.asarray(x), np.asarray(g), sigma=1.3)
    got = _calls(iglu_np.iglu, x, g, sigma=1.3)
    for kind in want:
        _check_like(kind, got[kind], want[kind], lambda r: isinstance(r, jax.Array))


def test_dlpack_arrays_come_back_through_their_namespace():
    xps = _xps()
    x = xps.asarray(np.linspace(-5, 5, 23), dtype=xps.float64)
    g = xps.ones_like(x)
    want = _calls(iglu_np.softplus, np.from_dlpack(x), np.ones(23), beta=2.0)
    got = _calls(iglu_np.softplus, x, g, beta=2.0)
    for kind in want:
        _check_like(kind, got[kind], want[kind], lambda r: type(r) is type(x))
    o = xps.empty_like(x)
    if not np.from_dlpack(o).flags.writeable:
        # numpy < 2.1 views every DLPack capsule read-only: out= is refused, not ignored
        with pytest.raises(ValueError, match="out= is read-only"):
            iglu_np.softplus(x, out=o, beta=2.0)
        return
    assert iglu_np.softplus(x, out=o, beta=2.0) is o
    _same(np.from_dlpack(o), want["fwd"])


def test_torch_operands_are_viewed_and_results_adopted_without_a_copy(monkeypatch):
    torch = _torch()
    seen = []
    real = host_arrays._dispatch

    def spy(act, kind, data, params, out):
        r = real(act, kind, data, params, out)
        seen.append(([d.ctypes.data for d in data], r.ctypes.data))
        return r

    monkeypatch.setattr(host_arrays, "_dispatch", spy)
    x = torch.randn(3000)
    g = torch.randn(3000)
    r = iglu_np.silu.backward(x, g)
    ((ins, res),) = seen
    assert ins == [x.data_ptr(), g.data_ptr()] and res == r.data_ptr()
    o = torch.empty(3000)
    p = o.data_ptr()
    assert iglu_np.silu(x, out=o) is o and o.data_ptr() == p
    _same(o, iglu_np.silu(x.numpy()))
    want = iglu_np.silu(x.numpy())
    assert iglu_np.silu(x, out=x) is x  # in place
    _same(x, want)


def test_jax_results_adopt_the_computed_buffer(monkeypatch):
    jnp = _jnp()
    made = []
    real = host_arrays._aligned_empty

    def spy(shape, dt):
        a = real(shape, dt)
        made.append(a.ctypes.data)
        return a

    monkeypatch.setattr(host_arrays, "_aligned_empty", spy)
    r = iglu_np.gelu(jnp.linspace(-3, 3, 1 << 12))
    assert made == [r.unsafe_buffer_pointer()]


def test_parameters_may_be_tensors_and_their_gradients_come_back_as_tensors():
    torch = _torch()
    x = torch.randn(4, 3, 5, dtype=torch.float64)
    g = torch.randn(4, 3, 5, dtype=torch.float64)
    sigma = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64).reshape(1, 3, 1)
    ns = sigma.numpy()
    _same(iglu_np.iglu(x, sigma=sigma), iglu_np.iglu(x.numpy(), sigma=ns))
    s = torch.tensor(0.3)  # a 0-d float32 tensor: float32(0.3), as np.float32(0.3)
    _same(iglu_np.iglu(x, sigma=s), iglu_np.iglu(x.numpy(), sigma=np.float32(0.3)))
    grads = iglu_np.iglu.backward_params(x, g, sigma=sigma)
    assert isinstance(grads["sigma"], torch.Tensor) and grads["sigma"].shape == sigma.shape
    _same(grads["sigma"], iglu_np.iglu.backward_params(x.numpy(), g.numpy(), sigma=ns)["sigma"])
    gx, gp = iglu_np.iglu.backward_all(x, g, sigma=sigma)
    assert isinstance(gx, torch.Tensor) and isinstance(gp["sigma"], torch.Tensor)


def test_torch_layouts_shapes_and_dtypes_follow_numpy():
    torch = _torch()
    x = torch.randn(6, 8, 5)
    for t in (
        x[:, ::2],
        x.permute(2, 0, 1),
        torch.tensor(0.25),
        x.to(torch.float16),
        torch.arange(-3, 4),
    ):
        r = iglu_np.elu(t)
        assert isinstance(r, torch.Tensor)
        _same(r, iglu_np.elu(t.numpy()))


def test_bfloat16_tensors_cross_as_bfloat16():
    torch = _torch()
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes (the bf16 extra)")
    x = torch.randn(300).to(torch.bfloat16)
    r = iglu_np.gelu(x)
    assert r.dtype == torch.bfloat16
    want = iglu_np.gelu(x.view(torch.int16).numpy().view(ml_dtypes.bfloat16))
    _same(r.view(torch.int16), want.view(np.int16))
    jnp = _jnp()
    j = jnp.asarray(np.asarray(want))
    rj = iglu_np.gelu(j)
    assert rj.dtype == jnp.bfloat16
    _same(rj, iglu_np.gelu(np.asarray(want)))


def test_refusals_say_why():
    torch = _torch()
    with pytest.raises(TypeError, match=r"requires grad.*iglu_np\.torch\.gelu"):
        iglu_np.gelu(torch.randn(3, requires_grad=True))
    with pytest.raises(TypeError, match="sigma is a torch tensor that requires grad"):
        iglu_np.iglu(torch.randn(3), sigma=torch.tensor(1.0, requires_grad=True))
    with pytest.raises(TypeError, match="grad_out is a torch array on meta"):
        iglu_np.gelu.backward(torch.randn(3), torch.empty(3, device="meta"))
    with pytest.raises(TypeError, match="unsupported input type"):
        iglu_np.gelu(torch.empty(3, device="meta"))
    with pytest.raises(ValueError, match="sigma"):
        iglu_np.iglu(torch.randn(3), sigma=torch.tensor(-1.0))
    jnp = _jnp()
    import jax

    x = jnp.ones(3)
    with pytest.raises(TypeError, match="JAX arrays are immutable"):
        iglu_np.gelu(x, out=x)
    with pytest.raises(TypeError, match="JAX arrays are immutable"):
        iglu_np.iglu.backward_all(x, x, out=x)
    with pytest.raises(TypeError, match=r"JAX tracer.*iglu_np\.jax"):
        jax.jit(iglu_np.gelu)(x)


def test_array_types_name_registered_backends_and_info_lists_them():
    listed = backends.array_types()
    routes = " ".join(b for _, b in listed)
    assert all(name in routes for name in backends.BACKENDS)
    r = subprocess.run(
        [sys.executable, "-m", "iglu_np", "info", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    info = json.loads(r.stdout)
    assert [(d["types"], d["backend"]) for d in info["array_types"]] == listed
    assert info["backends"]["host_array"]["usable"]


def test_host_arrays_import_neither_torch_nor_jax():
    _xps()
    code = (
        "import sys, numpy as np, array_api_strict as xps, iglu_np\n"
        "r = iglu_np.gelu(xps.asarray([1.0, -1.0]))\n"
        "assert type(r).__module__.startswith('array_api_strict'), type(r)\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m.split('.')[0] in ('torch', 'jax', 'jaxlib')))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]"
