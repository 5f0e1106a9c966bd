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
# GPU libm (CUDA math library) is within 1-2 ulp for atan/exp/log/erf..., and NVCC/NVVM
# contract a*b+c into FMAs; the kernels are the stable forms, so a few ulp in all.
ULP = {np.float32: 8, np.float64: 8, np.float16: 1}


def _points(dt, n=4099):
    x = H.sweep_points(np.float64)
    rng = np.random.default_rng(0)
    x = np.concatenate([x, rng.standard_normal(n) * 4])
    with np.errstate(over="ignore"):
        return x.astype(dt)


def _close(got, want, dt, what):
    got = np.asarray(got)
    want = np.asarray(want).astype(got.dtype)
    d = H.ulp_diff(got, want)
    with np.errstate(all="ignore"):
        d = np.where(np.abs(got - want) <= 4 * np.finfo(got.dtype).tiny, 0.0, d)
    i = int(np.argmax(d))
    assert d[i] <= ULP[dt], f"{what}: {d[i]} ulp at {i}: gpu {got.ravel()[i]!r} cpu {want.ravel()[i]!r}"


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
    pytest.importorskip("numba_cuda")
    from numba import cuda

    return cuda


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
    _close(cupy.asnumpy(y), act(x, **ps), dt, f"{name} fwd")
    _close(cupy.asnumpy(act.dx(xd, **ps)), act.dx(x, **ps), dt, f"{name} dx")
    _close(cupy.asnumpy(act.backward(xd, gd, **ps)), act.backward(x, g, **ps), dt, f"{name} bwd")
    for p, v in act.dparams(xd, **ps).items():
        _close(cupy.asnumpy(v), act.dparams(x, **ps)[p], dt, f"{name} d_{p}")


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", NAMES)
def test_numba_cuda_matches_cpu(cuda, name, dt):
    act = iglu_np.get(name)
    ps = _params(act)
    x = _points(dt)
    g = np.linspace(-2, 2, x.size).astype(dt)
    xd, gd = cuda.to_device(x), cuda.to_device(g)
    _close(act(xd, **ps).copy_to_host(), act(x, **ps), dt, f"{name} fwd")
    _close(act.dx(xd, **ps).copy_to_host(), act.dx(x, **ps), dt, f"{name} dx")
    _close(act.backward(xd, gd, **ps).copy_to_host(), act.backward(x, g, **ps), dt, f"{name} bwd")
    for p, v in act.dparams(xd, **ps).items():
        _close(v.copy_to_host(), act.dparams(x, **ps)[p], dt, f"{name} d_{p}")


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
    want = act.backward_params(x.astype(np.float64), g.astype(np.float64), sigma=sigma.astype(np.float64))["sigma"]
    np.testing.assert_allclose(cupy.asnumpy(bp), want, rtol=1e-5, atol=1e-6)
    bps = act.backward_params(xd, gd, sigma=1.5, backend=backend)["sigma"]
    want = act.backward_params(x.astype(np.float64), g.astype(np.float64), sigma=1.5)["sigma"]
    np.testing.assert_allclose(float(cupy.asnumpy(bps)), float(want), rtol=1e-5)


def test_dispatch_and_mixing(cupy, cuda):
    x = cupy.linspace(-3, 3, 101, dtype=np.float32)
    assert isinstance(iglu_np.iglu(x), cupy.ndarray)
    dx = cuda.to_device(np.linspace(-3, 3, 101, dtype=np.float32))
    assert not isinstance(iglu_np.iglu(dx), cupy.ndarray) and hasattr(iglu_np.iglu(dx), "copy_to_host")
    # host parameter array with a device x: moved to the device
    s = np.full(101, 2.0, np.float32)
    np.testing.assert_allclose(cupy.asnumpy(iglu_np.iglu(x, sigma=s)), iglu_np.iglu(cupy.asnumpy(x), sigma=s), rtol=1e-6)
    # a host grad_out with a device x: refused
    with pytest.raises(TypeError, match="host"):
        iglu_np.iglu.backward(x, np.ones(101, np.float32))
    with pytest.raises(ValueError, match="domain"):
        iglu_np.iglu(x, sigma=cupy.asarray([-1.0]))


def test_info_reports_gpu_backends_usable(cupy, cuda):
    from iglu_np._info import backend_status

    st = backend_status()
    assert st["cupy"][0] and st["numba_cuda"][0], st
