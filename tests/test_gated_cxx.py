"""The gated forms' CuPy kernels verified without a GPU: the ElementwiseKernel bodies of
:mod:`iglu_np.backends.codegen.gated_cxx` compile with NVRTC (wrapped as CuPy wraps them,
no warnings, no flush-to-zero, no local memory) and, host-compiled with g++ with FMA
contraction off, equal the CPU's fused loops bit for bit."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import iglu_np
import iglu_np.backends.cpu.gated
from iglu_np._spec import REGISTRY
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
