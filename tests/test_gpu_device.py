"""On a real NVIDIA GPU: CuPy and Numba CUDA results vs the CPU ufuncs, every activation,
float16/32/64, scalar and broadcast parameters, out=, backward_params, dispatch rules.

Every test is ``@pytest.mark.gpu``: conftest skips them with the reason when no GPU is
present (CI has none; the GPU code is verified there by test_gpu_cxx.py and
test_gpu_numba_cuda.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import iglu_np

from . import gpu_helpers as H

pytestmark = [pytest.mark.gpu, pytest.mark.xdist_group("gpu_device")]

NAMES = sorted(iglu_np.ACTIVATIONS)
# CuPy runs C++ translated from the CPU's Python, elementary functions included, with no
# FMA contraction and no flush to zero: bit for bit. Numba CUDA compiles the same Python
# (and _vmath's functions) but NVVM contracts a*b+c into FMAs: within CROSS_ULP, in ulp of
# the spec's scale where the value cancels (gpu_helpers.in_scale_units), subnormal
# results counted too. float16 results round a float32 value once more: 1 ulp.
CROSS_ULP = 8


def _points(dt, n=4099):
    x = H.sweep_points(np.float64)
    rng = np.random.default_rng(0)
    x = np.concatenate([x, rng.standard_normal(n) * 4])
    with np.errstate(over="ignore"):
        return x.astype(dt)


_same = H.assert_same_bits  # got: the GPU's, want: the CPU's


def _close(got, want, dt, what, spec=None, kind=None, x=None, g=None, ps=None):
    """Within CROSS_ULP (1 for float16), in the spec's scale units where the value cancels."""
    got = np.asarray(got).ravel()
    want = np.asarray(want).astype(got.dtype).ravel()
    d = H.ulp_diff(got, want)
    lim = 1 if got.dtype == np.float16 else CROSS_ULP
    if spec is not None and got.dtype != np.float16:
        d = H.in_scale_units(
            spec,
            kind,
            got.dtype.type,
            np.asarray(x).ravel(),
            None if g is None else np.asarray(g).ravel(),
            ps,
            got,
            want,
            d,
            lim,
        )
    i = int(np.argmax(d))
    assert d[i] <= lim, f"{what}: {d[i]} ulp at {i}: gpu {got[i]!r} cpu {want[i]!r}"


def _params(act):
    ps = {}
    for p in act.params:
        vals = [v for v in p.test_values if p.contains(v)]
        ps[p.name] = vals[0] if vals else p.default
    if act.spec.check is not None and act.spec.check(**ps):
        ps = dict(act.defaults)
    return ps


@pytest.fixture(scope="module")
def cupy():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def cuda():
    """The ``numba_cuda`` backend's own toolchain module (numba-cuda-mlir where installed):
    on a GPU machine a toolchain that cannot run is a failure, not a skip."""
    from iglu_np.backends.cuda import numba_cuda

    ok, why = numba_cuda.status()
    assert ok, why
    return numba_cuda._discovery._cuda()


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", NAMES)
def test_cupy_matches_cpu(cupy, name, dt):
    act = iglu_np.get(name)
    ps = _params(act)
    x = _points(dt)
    g = np.linspace(-2, 2, x.size).astype(dt)
    xd, gd = cupy.asarray(x), cupy.asarray(g)
    y = act(xd, **ps)
    assert isinstance(y, cupy.ndarray) and y.dtype == act(x, **ps).dtype
    _same(cupy.asnumpy(y), act(x, **ps), f"{name} fwd")
    _same(cupy.asnumpy(act.dx(xd, **ps)), act.dx(x, **ps), f"{name} dx")
    _same(cupy.asnumpy(act.backward(xd, gd, **ps)), act.backward(x, g, **ps), f"{name} bwd")
    for p, v in act.dparams(xd, **ps).items():
        _same(cupy.asnumpy(v), act.dparams(x, **ps)[p], f"{name} d_{p}")
    # the general ElementwiseKernel path (a strided view) gives the same bits as the
    # vector path and the CPU
    _same(cupy.asnumpy(act(xd[::2], **ps)), act(x[::2], **ps), f"{name} fwd strided")


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", NAMES)
def test_numba_cuda_matches_cpu(cuda, name, dt):
    act = iglu_np.get(name)
    ps = _params(act)
    x = _points(dt)
    g = np.linspace(-2, 2, x.size).astype(dt)
    xd, gd = cuda.to_device(x), cuda.to_device(g)
    spec = act.spec
    _close(act(xd, **ps).copy_to_host(), act(x, **ps), dt, f"{name} fwd", spec, "fwd", x, None, ps)
    _close(
        act.dx(xd, **ps).copy_to_host(), act.dx(x, **ps), dt, f"{name} dx", spec, "dx", x, None, ps
    )
    _close(
        act.backward(xd, gd, **ps).copy_to_host(),
        act.backward(x, g, **ps),
        dt,
        f"{name} bwd",
        spec,
        "bwd",
        x,
        g,
        ps,
    )
    for p, v in act.dparams(xd, **ps).items():
        _close(
            v.copy_to_host(),
            act.dparams(x, **ps)[p],
            dt,
            f"{name} d_{p}",
            spec,
            "d_" + p,
            x,
            None,
            ps,
        )


@pytest.mark.parametrize("backend", ["cupy", "numba_cuda"])
def test_broadcast_params_strided_out_and_backward_params(cupy, backend):
    act = iglu_np.iglu
    x = np.random.default_rng(1).standard_normal((4, 6, 10)).astype(np.float32)
    g = np.random.default_rng(2).standard_normal((4, 6, 10)).astype(np.float32)
    sigma = np.linspace(0.5, 3.0, 6).astype(np.float32).reshape(1, 6, 1)
    xd, gd, sd = cupy.asarray(x), cupy.asarray(g), cupy.asarray(sigma)
    xs = xd[:, :, ::2]  # non-contiguous
    out = cupy.empty(xs.shape, np.float32)
    r = act(xs, sigma=sd, out=out, backend=backend)
    assert r is out or getattr(r, "data", None) is not None
    _close(cupy.asnumpy(out), act(x[:, :, ::2], sigma=sigma), np.float32, "strided fwd")
    bp = act.backward_params(xd, gd, sigma=sd, backend=backend)["sigma"]
    want = act.backward_params(
        x.astype(np.float64), g.astype(np.float64), sigma=sigma.astype(np.float64)
    )["sigma"]
    np.testing.assert_allclose(cupy.asnumpy(bp), want, rtol=1e-5, atol=1e-6)
    bps = act.backward_params(xd, gd, sigma=1.5, backend=backend)["sigma"]
    want = act.backward_params(x.astype(np.float64), g.astype(np.float64), sigma=1.5)["sigma"]
    np.testing.assert_allclose(float(cupy.asnumpy(bps)), float(want), rtol=1e-5)


def test_cupy_float32_parameter_array_partly_beyond_range_is_cpus_bits(cupy):
    """Only the elements whose parameter float32 cannot hold compute in float64, on CuPy
    as on the CPU (cupy_backend._split)."""
    act = iglu_np.swish
    x = np.random.default_rng(4).standard_normal((6, 9)).astype(np.float32) * 3
    g = np.random.default_rng(5).standard_normal((6, 9)).astype(np.float32)
    beta = np.resize(np.array([1.0, -1.0, 1.702, 0.5, -1e300, 4.0]), 9)
    xd, gd = cupy.asarray(x), cupy.asarray(g)
    for b in (beta, cupy.asarray(beta)):
        _same(cupy.asnumpy(act(xd, beta=b)), act(x, beta=beta), "fwd")
        _same(cupy.asnumpy(act.dx(xd, beta=b)), act.dx(x, beta=beta), "dx")
        _same(cupy.asnumpy(act.backward(xd, gd, beta=b)), act.backward(x, g, beta=beta), "bwd")
        _same(
            cupy.asnumpy(act.dparams(xd, beta=b)["beta"]),
            act.dparams(x, beta=beta)["beta"],
            "d_beta",
        )
        out = cupy.empty_like(xd)
        act(xd, beta=b, out=out)
        _same(cupy.asnumpy(out), act(x, beta=beta), "fwd out=")
        np.testing.assert_allclose(
            cupy.asnumpy(act.backward_params(xd, gd, beta=b)["beta"]),
            act.backward_params(x, g, beta=beta)["beta"],
            rtol=1e-6,
        )


def test_dispatch_and_mixing(cupy, cuda):
    x = cupy.linspace(-3, 3, 101, dtype=np.float32)
    assert isinstance(iglu_np.iglu(x), cupy.ndarray)
    dx = cuda.to_device(np.linspace(-3, 3, 101, dtype=np.float32))
    assert not isinstance(iglu_np.iglu(dx), cupy.ndarray) and hasattr(
        iglu_np.iglu(dx), "copy_to_host"
    )
    # host parameter array with a device x: moved to the device
    s = np.full(101, 2.0, np.float32)
    np.testing.assert_allclose(
        cupy.asnumpy(iglu_np.iglu(x, sigma=s)), iglu_np.iglu(cupy.asnumpy(x), sigma=s), rtol=1e-6
    )
    # a host grad_out with a device x: refused
    with pytest.raises(TypeError, match="host"):
        iglu_np.iglu.backward(x, np.ones(101, np.float32))
    with pytest.raises(ValueError, match="domain"):
        iglu_np.iglu(x, sigma=cupy.asarray([-1.0]))


def test_info_reports_gpu_backends_usable(cupy, cuda):
    from iglu_np.cli.info import backend_status

    st = backend_status()
    assert st["cupy"][0] and st["numba_cuda"][0], st


PARAMETRISED = [n for n in NAMES if iglu_np.get(n).param_names]


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", PARAMETRISED)
def test_backward_all_matches_cpu(cupy, name, dt):
    """The fused one-pass backward (CuPy's vector kernel, which computes a spec's
    ``prepared`` part once per thread): grad_x bit for bit with the CPU, each parameter's
    gradient (a float64 sum in another order) to 1e-10 relative of the sum of |terms|."""
    act = iglu_np.get(name)
    ps = _params(act)
    x = _points(dt)
    x = x[np.abs(x) <= 1000]  # the tails, without sums that overflow
    g = np.linspace(-2, 2, x.size).astype(dt)
    gx, gp = act.backward_all(cupy.asarray(x), cupy.asarray(g), **ps)
    want_x, want_p = act.backward_all(x, g, **ps)
    _same(cupy.asnumpy(gx), want_x, f"{name} backward_all grad_x")
    terms = act.dparams(x, **ps)
    for p, v in want_p.items():
        scale = float(np.sum(np.abs(g.astype(np.float64) * terms[p].astype(np.float64)))) or 1.0
        got = float(cupy.asnumpy(gp[p]))
        assert got == float(v) or abs(got - float(v)) <= 1e-10 * scale + 2 * float(
            np.spacing(np.abs(v).astype(dt))
        ), f"{name} d_{p}: gpu {got!r} cpu {float(v)!r} (scale {scale:.3g})"


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", ["relu", "iglu", "gelu_tanh", "silu", "xielu"])
def test_numba_cuda_thin_path_gives_the_general_forms_bits(cupy, cuda, name, dt):
    """Contiguous aligned CuPy and Numba arrays take the thin path (the vector kernel on
    raw pointers); the same values one element into a buffer take the general scalar
    form: the same bits (the same device function), at sizes with every tail length; relu
    gives the CPU's bits, the rest are within CROSS_ULP of the CPU."""
    from iglu_np.backends.cuda import numba_cuda as nc

    act = iglu_np.get(name)
    ps = _params(act)
    pts = _points(dt)
    for n in (1, 3, 7, 9, 1024, 4099, pts.size):
        x = pts[:n]
        g = np.linspace(-2, 2, n).astype(dt)
        xd, gd = cupy.asarray(x), cupy.asarray(g)
        xm = cupy.empty(n + 1, dt)[1:]
        xm[...] = xd
        for kind, fn, args, margs in (
            ("fwd", act, (xd,), (xm,)),
            ("dx", act.dx, (xd,), (xm,)),
            ("bwd", act.backward, (xd, gd), (xm, gd)),
        ):
            got = cupy.asnumpy(fn(*args, backend="numba_cuda", **ps))
            ref = cupy.asnumpy(fn(*margs, backend="numba_cuda", **ps))
            want = fn(*(cupy.asnumpy(a) for a in args), **ps)
            _same(got, ref, f"{name} {kind} n={n} thin vs general")
            if name == "relu":
                _same(got, want, f"{name} {kind} n={n}")
            else:
                _close(
                    got,
                    want,
                    dt,
                    f"{name} {kind} n={n}",
                    act.spec,
                    kind,
                    x,
                    g if kind == "bwd" else None,
                    ps,
                )
        ran = {
            k[1]
            for k in nc._thin_path._plans
            if k[0] == name and k[2][0] == np.dtype(dt) and k[3] is cupy.ndarray
        }
        assert ran >= {"fwd", "dx", "bwd"}, ran  # the thin path ran
        # Numba device arrays, out= and in place
        dx = cuda.to_device(x)
        o = cuda.device_array(n, dt)
        assert act(dx, out=o, **ps) is o
        _same(
            o.copy_to_host(),
            cupy.asnumpy(act(xm, backend="numba_cuda", **ps)),
            f"{name} numba out=",
        )
        act(dx, out=dx, **ps)
        _same(dx.copy_to_host(), o.copy_to_host(), f"{name} in place")
