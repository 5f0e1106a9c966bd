"""The gated forms' GPU kernels verified without a GPU.

* CuPy: the ElementwiseKernel bodies of :mod:`iglu_np.backends.codegen.gated_cxx` compile
  with NVRTC (wrapped as CuPy wraps them: no warnings, no flush-to-zero, no local memory)
  and, host-compiled with g++ with FMA contraction off, equal the CPU's fused loops bit
  for bit; the fake cupy shows one launch over the halves of x;
* Numba CUDA: the kernels of :mod:`iglu_np.backends.cuda.numba_cuda._gated` compile to PTX
  for sm_90 (no local memory, no float64 in float32 kernels) and, run by the CUDA
  simulator through the public calls, agree with the CPU within the simulator's 8 ulp
  (it evaluates math.* with libm, the CPU iglu_np's vectorised math).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import iglu_np
import iglu_np.backends.cpu.gated
from iglu_np._spec import REGISTRY
from iglu_np.backends.codegen import cxx
from iglu_np.backends.codegen.gated_cxx import gated_kernel_source
from tests.bitwise import assert_same_bits

from . import gpu_helpers as H

FEW = ["silu", "gelu", "iglu", "xielu", "relu", "sigmoid", "swish", "softplus"]
CASES = [pytest.param(n, marks=() if n in FEW else (pytest.mark.slow,)) for n in sorted(REGISTRY)]
_TYPES = {"g": "G", "u": "U", "go": "O", "y": "Y", "dg": "DG", "du": "DU"}


def _wrap(ks, ct: str, entry: str, device: bool) -> str:
    """The kernel as CuPy wraps an ElementwiseKernel body (device) or a host loop."""
    typedefs = "".join(f"typedef {ct} {_TYPES[a]};\n" for a in (*ks.data, *ks.outs))
    args = [f"const {ct}* __restrict__ _raw_{d}" for d in ks.data]
    args += [f"const {ct} {s}" for s in ks.params]
    args += [f"{ct}* __restrict__ _raw_{o}" for o in ks.outs] + ["const long long _n"]
    loop = (
        "for (long long _i = (long long)blockIdx.x * blockDim.x + threadIdx.x; _i < _n; "
        "_i += (long long)blockDim.x * gridDim.x)"
        if device
        else "for (long long _i = 0; _i < _n; ++_i)"
    )
    head = "__global__ void" if device else "void"
    body = (
        " ".join(f"const {_TYPES[d]} {d} = _raw_{d}[_i];" for d in ks.data)
        + " "
        + " ".join(f"{_TYPES[o]} {o};" for o in ks.outs)
        + f" {ks.body} "
        + " ".join(f"_raw_{o}[_i] = {o};" for o in ks.outs)
    )
    return f'{typedefs}extern "C" {head} {entry}({", ".join(args)}) {{\n  {loop} {{ {body} }}\n}}\n'


def _program(spec, device: bool) -> str:
    parts = [gated_kernel_source(spec, "fwd", np.float32).preamble]
    for i, (op, dt, ct) in enumerate(
        (op, dt, ct)
        for op in ("fwd", "bwd")
        for dt, ct in ((np.float32, "float"), (np.float64, "double"))
    ):
        ks = gated_kernel_source(spec, op, dt)
        parts.append(f"namespace k{i} {{\n" + _wrap(ks, ct, f"{ks.name}_{ct}", device) + "}\n")
    return "\n".join(parts)


@pytest.mark.parametrize("name", CASES)
def test_gated_kernels_compile_with_nvrtc_without_warnings(nvrtc, name):
    ptx, log = H.nvrtc_compile(_program(REGISTRY[name], True), (8, 0))
    assert log == "", log
    assert ptx.count(".entry ") == 4
    for op in ("fwd", "bwd"):
        for ct in ("float", "double"):
            entry = f"iglu_np_{name}_glu{op}_{ct}"
            st = H.ptx_stats(ptx, entry)
            assert st["local"] == 0 and st["ftz"] == 0 and st["mufu"] == 0, (entry, st)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    ok, why = H.gxx_status()
    if not ok:
        pytest.skip(why)
    return tmp_path_factory.mktemp("gated_cxx")


def _call(lib, entry, ct, arrays, scalars, n_out):
    dt = np.float32 if ct == "float" else np.float64
    c = ctypes.c_float if ct == "float" else ctypes.c_double
    ptr = ctypes.POINTER(c)
    outs = [np.empty_like(arrays[0]) for _ in range(n_out)]
    fn = getattr(lib, entry)
    fn.argtypes = [ptr] * len(arrays) + [c] * len(scalars) + [ptr] * n_out + [ctypes.c_longlong]
    fn.restype = None
    fn(
        *[np.ascontiguousarray(a, dt).ctypes.data_as(ptr) for a in arrays],
        *[c(float(s)) for s in scalars],
        *[o.ctypes.data_as(ptr) for o in outs],
        arrays[0].size,
    )
    return outs


@pytest.mark.parametrize("name", CASES)
def test_host_build_equals_the_cpu_loops_bit_for_bit(workdir, name):
    spec = REGISTRY[name]
    lib, log = H.compile_host(
        _program(spec, False).replace("__global__ ", ""), f"gated_{name}", workdir=workdir
    )
    assert log == "", log
    rng = np.random.default_rng(3)
    for dt, ct in ((np.float32, "float"), (np.float64, "double")):
        gate = (rng.standard_normal(4096) * 4).astype(dt)
        gate[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40 if dt == np.float32 else 1e-310]
        up = (rng.standard_normal(4096) * 4).astype(dt)
        go = rng.standard_normal(4096).astype(dt)
        vals = [dt(v) for v in spec.defaults.values()]
        for lim, shift in ((np.inf, 0.0), (2.5, 0.0), (7.0, 1.0)):
            scal = (lim, shift, *vals)
            (y,) = _call(lib, f"iglu_np_{name}_glufwd_{ct}", ct, (gate, up), scal, 1)
            dg, du = _call(lib, f"iglu_np_{name}_glubwd_{ct}", ct, (gate, up, go), scal, 2)
            cpu = iglu_np.backends.cpu.gated
            want = cpu.forward(name, gate, up, None, None, True, lim, shift, vals, None)
            (wg, wu), _ = cpu.backward(
                name, gate, up, go, None, None, True, lim, shift, vals, False, None
            )
            assert_same_bits(y, want, f"{name} {ct} fwd lim={lim}")
            assert_same_bits(dg, wg, f"{name} {ct} d_gate lim={lim}")
            assert_same_bits(du, wu, f"{name} {ct} d_up lim={lim}")


def test_cupy_arrays_take_one_elementwise_kernel_over_the_halves(monkeypatch):
    from tests import fake_cupy

    cp = fake_cupy.install(monkeypatch)
    x = cp.asarray(np.arange(16, dtype=np.float32))
    y = iglu_np.swiglu(x)
    (launch,) = fake_cupy.STATE.launches
    assert launch.kernel.name == "iglu_np_silu_glufwd"
    gate, up = launch.args[:2]
    assert gate.shape == up.shape == (8,) and launch.args[-1] is y
    assert up.data.ptr - gate.data.ptr == 8 * 4  # the halves of x, read where they lie
    fake_cupy.reset()
    iglu_np.swiglu.backward(x, cp.asarray(np.ones(8, np.float32)))
    (launch,) = fake_cupy.STATE.launches
    assert launch.kernel.name == "iglu_np_silu_glubwd"
    dg, du = launch.args[-2:]
    assert du.data.ptr - dg.data.ptr == 8 * 4  # written to their positions of dx


# --------------------------------------------------------------------------- Numba CUDA
def _numba_cuda_ptx():
    from iglu_np.backends.cuda.numba_cuda import _discovery

    if _discovery.simulator():
        pytest.skip("this process runs the CUDA simulator; PTX needs the real target")
    H.skip_where_numba_cuda_cannot_compile()
    return _discovery._cuda()


@pytest.mark.parametrize("name", CASES)
def test_numba_cuda_gated_kernels_compile_to_ptx(name):
    cuda = _numba_cuda_ptx()
    from numba.core import types as t

    from iglu_np.backends.cuda.numba_cuda import _gated as ng
    from iglu_np.backends.cuda.numba_cuda._compile import offline_device

    n_params = len(REGISTRY[name].param_names)
    for dt, nt in ((np.float32, t.float32), (np.float64, t.float64)):
        arr = t.Array(nt, 1, "C")
        for op, n_arr in (("fwd", 3), ("bwd", 5)):
            for lay in ("s1", "s2", "s2r"):
                sig = (t.int64,) * 5 + (arr,) * n_arr + (nt,) * (2 + n_params)
                with offline_device((9, 0)):
                    ptx, _ = cuda.compile_ptx(ng.python(name, op, lay, dt), sig, cc=(9, 0))
                st = H.ptx_stats(ptx)
                assert st["local"] == 0 and st["ftz"] == 0 and st["mufu"] == 0, (op, lay, st)
                if dt == np.float32 and not cxx.asks_float64(REGISTRY[name]):
                    assert st["f64_ops"] == 0, (op, lay, "float64 in a float32 kernel")


_SIM_CHILD = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from numba import cuda
import iglu_np
from iglu_np._spec import REGISTRY
from tests import gpu_helpers as H

def close(got, want, what, cancels=None):
    # cancels = (gate, factor): d_gate = act'(gate) * factor, measured where act' cancels
    # (silu' near its zero) in the spec's scale units, as every GPU cross-check does
    d = H.ulp_diff(np.asarray(got), np.asarray(want))
    with np.errstate(all="ignore"):
        d = np.where(np.abs(got - want) <= 4 * np.finfo(got.dtype).tiny, 0.0, d)
    if cancels is not None:
        spec = REGISTRY[g._spec_name]
        ps = {p.name: g._fixed.get(p.name, p.default) for p in g.activation.params}
        gate, factor = (np.ravel(v) for v in cancels)
        d = H.in_scale_units(spec, "dx", got.dtype.type, gate, factor, ps,
                             np.ravel(got), np.ravel(want), np.ravel(d), 8)
    assert np.nanmax(d) <= 8, (what, np.nanmax(d))
    assert (np.isnan(got) == np.isnan(want)).all(), what

rng = np.random.default_rng(0)
for name in sys.argv[2:]:
    g = iglu_np.GATED[name]
    lim = np.inf if g.limit is None else g.limit
    for dt in (np.float32, np.float64):
        x = (rng.standard_normal((3, 10)) * 4).astype(dt)
        x[0, 0], x[1, 1] = np.nan, 9.0
        go = rng.standard_normal((3, 5)).astype(dt)
        close(g(cuda.to_device(x)).copy_to_host(), g(x), (name, "fwd"))
        got = g.backward(cuda.to_device(x), cuda.to_device(go)).copy_to_host()
        (gdg, gdu, _, _), (wdg, wdu, _, _) = (g._split(v, -1, None) for v in (got, g.backward(x, go)))
        gate, upx, _, _ = g._split(x, -1, None)
        close(gdg, wdg, (name, "bwd d_gate"), (gate, go * (np.clip(upx, -lim, lim) + g.shift)))
        close(gdu, wdu, (name, "bwd d_up"))
        up = rng.standard_normal((3, 10)).astype(dt)
        go2 = rng.standard_normal((3, 10)).astype(dt)
        a, b = g.backward(cuda.to_device(x), cuda.to_device(go2), cuda.to_device(up))
        wa, wb = g.backward(x, go2, up)
        close(a.copy_to_host(), wa, (name, "d_gate"), (x, go2 * (np.clip(up, -lim, lim) + g.shift)))
        close(b.copy_to_host(), wb, (name, "d_up"))
    if g.defaults and name == "iglu_glu":
        # float32 cannot hold sigma = 1e39: refused, not computed with an infinite sigma
        x32 = cuda.to_device(np.ones((2, 4), np.float32))
        try:
            g(x32, sigma=1e39)
        except TypeError as e:
            assert "range" in str(e), e
        else:
            raise AssertionError("sigma beyond float32 on a float32 device array did not raise")
    try:
        g.backward_params(cuda.to_device(x), cuda.to_device(go))
    except TypeError as e:
        assert "cupy.asarray" in str(e)
    else:
        raise AssertionError("backward_params on device arrays did not raise")
print("ok")
"""


def test_numba_cuda_gated_kernels_in_the_simulator_match_the_cpu():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", IGLU_NP_CUDA_TOOLCHAIN="numba-cuda")
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    r = subprocess.run(
        [sys.executable, "-c", _SIM_CHILD, str(root), "swiglu", "swiglu_oai", "iglu_glu", "glu"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
