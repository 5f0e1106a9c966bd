"""The CuPy backend's 16-byte-vector RawKernels, verified without a GPU.

Contiguous operands with scalar parameters run a RawKernel that loads and stores 128-bit
vectors (float4, double2, 8 x half) and finishes the last ``n % lanes`` elements in the
same launch (iglu_np.backends.cxx.vector_kernel_source). Here:

* NVRTC compiles every activation's vector kernels (every kind; float16/32/64 data) with
  the backend's options, and each entry's PTX moves its data with 128-bit accesses only
  (but one scalar load per input and one scalar store for the tail), uses no local
  memory, no flush-to-zero, no FMA and no approximate math;
* the same source runs on the host (g++, a simulated grid: every block and thread of a
  small launch, so the grid-stride loop and the tail both run) and equals the CPU ufuncs
  bit for bit for sizes around the vector width.
"""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

import iglu_np
from iglu_np._spec import REGISTRY
from iglu_np.backends import cxx

from . import gpu_helpers as H

NAMES = sorted(REGISTRY)
_VEC = {"float16": ".v4.u32", "float32": ".v4.f32", "float64": ".v2.f64"}
# Horner's steps and two_prod are explicit fma (as on the CPU); built without them, no
# fma may remain
NO_EXPLICIT_FMA = ("-DIGLU_NP_NO_EXPLICIT_FMA",)


@pytest.mark.parametrize("name", NAMES)
def test_vector_kernels_compile_to_128_bit_accesses(nvrtc, name):
    spec = REGISTRY[name]
    for ddt in ("float16", "float32", "float64"):
        kinds = cxx.kernel_kinds(spec)
        vks = [cxx.vector_kernel_source(spec, k, ddt) for k in kinds]
        src = cxx.vector_preamble(spec, ddt) + "".join(v.body for v in vks)
        ptx, log = H.nvrtc_compile(src, (9, 0))
        assert log == "", f"{name} ({ddt}): NVRTC log not empty:\n{log}"
        plain, _ = H.nvrtc_compile(src, (9, 0), options=NO_EXPLICIT_FMA)
        for v in vks:
            ops = H.ptx_instructions(ptx, v.name)
            loads = [o.split()[0] for o in ops if o.startswith("ld.global")]
            stores = [o.split()[0] for o in ops if o.startswith("st.global")]
            vec = _VEC[ddt]
            # every access is a 128-bit vector but the tail's one scalar load per input and
            # one scalar store (NVVM may unroll the grid-stride loop or duplicate a store
            # into branches, so the vector counts vary)
            vl, vs = sum(vec in o for o in loads), sum(vec in o for o in stores)
            assert vl >= v.n_data and vs >= 1, (v.name, loads, stores)
            assert len(loads) - vl == v.n_data and len(stores) - vs == 1, (v.name, loads, stores)
            st = H.ptx_stats(ptx, v.name)
            assert st["local"] == 0 and st["ftz"] == 0 and st["mufu"] == 0, (v.name, st)
            assert H.ptx_stats(plain, v.name)["fma"] == 0, v.name


# --------------------------------------------------------------------------- host simulation
_SIM_HEAD = """
#define __global__
struct iglu_np_dim3 { unsigned x, y, z; };
static iglu_np_dim3 blockIdx, threadIdx, blockDim, gridDim;
"""


def _sim_source(spec, ddt):
    ct = cxx.DATA_TYPES[np.dtype(ddt).name][0]
    parts = [_SIM_HEAD, cxx.vector_preamble(spec, ddt)]
    for kind in cxx.kernel_kinds(spec):
        v = cxx.vector_kernel_source(spec, kind, ddt)
        parts.append(v.body)
        data = ["x", "g"][: v.n_data]
        pn = [f"p{k}" for k in range(len(spec.params))]
        args = [f"const {ct}* {d}" for d in data] + [f"{ct}* y", "long long n"]
        args += [f"{ct} {p}" for p in pn] + ["unsigned blocks", "unsigned threads"]
        call = ", ".join([*data, "y", "n", *pn])
        parts.append(
            f'extern "C" void sim_{v.name}({", ".join(args)}) {{\n'
            "  blockDim.x = threads; gridDim.x = blocks;\n"
            "  for (unsigned b = 0; b < blocks; ++b)\n"
            "    for (unsigned t = 0; t < threads; ++t) {\n"
            f"      blockIdx.x = b; threadIdx.x = t; iglu_np_vec_{v.name}::{v.name}({call});\n"
            "    }\n}\n"
        )
    return "\n".join(parts)


def _sim_lib(spec, ddt, tmp_path):
    ok, gxx = H.gxx_status()
    if not ok:
        pytest.skip(gxx)
    cpp, so = tmp_path / f"{spec.name}_{ddt}.cpp", tmp_path / f"{spec.name}_{ddt}.so"
    cpp.write_text(_sim_source(spec, ddt))
    r = subprocess.run(
        [gxx, "-std=c++17", "-shared", "-fPIC", "-O1", "-ffp-contract=off", "-Wall",
         "-Wno-unknown-pragmas", str(cpp), "-o", str(so)],
        capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stderr
    return ctypes.CDLL(str(so))


# A sample by default (the vector kernel is the same template for every activation);
# every activation under -m slow.
_SAMPLE = ("iglu", "gelu", "silu", "xielu", "hardswish", "softplus", "squareplus")


def _sim_cases():
    for n in NAMES:
        yield pytest.param(n, marks=() if n in _SAMPLE else (pytest.mark.slow,))


@pytest.mark.parametrize("name", list(_sim_cases()))
def test_vector_kernels_on_the_host_equal_the_cpu(tmp_path, name):
    spec = REGISTRY[name]
    act = iglu_np.get(name)
    for ddt in (np.float32, np.float64):
        lib = _sim_lib(spec, np.dtype(ddt).name, tmp_path)
        ptr = ctypes.POINTER(ctypes.c_float if ddt == np.float32 else ctypes.c_double)
        cval = ctypes.c_float if ddt == np.float32 else ctypes.c_double
        pv = [ddt(spec.defaults[p]) for p in spec.param_names]
        lanes = 16 // np.dtype(ddt).itemsize
        pts = H.sweep_points(ddt)
        # sizes around the vector width; 2 blocks x 3 threads: the grid-stride loop runs
        # several rounds and the tail is done by the first threads
        for n in (0, 1, lanes - 1, lanes, lanes + 1, 2 * lanes + 3, 6 * lanes, pts.size):
            x = np.ascontiguousarray(pts[:n] if n <= pts.size else pts)
            g = np.linspace(-3.0, 3.0, x.size).astype(ddt)
            for kind in cxx.kernel_kinds(spec):
                v = cxx.vector_kernel_source(spec, kind, ddt)
                data = [x, g][: v.n_data]
                y = np.full(x.size + 1, 7.0, dtype=ddt)  # one guard element past the end
                fn = getattr(lib, f"sim_{v.name}")
                fn.argtypes = [ptr] * (v.n_data + 1) + [ctypes.c_longlong] + [cval] * len(pv) + [ctypes.c_uint] * 2
                fn(*[d.ctypes.data_as(ptr) for d in data], y.ctypes.data_as(ptr), x.size, *pv, 2, 3)
                with np.errstate(all="ignore"):
                    want = act._ufunc(kind)(*data, *pv)
                assert y[-1] == 7.0, f"{name} {kind}: wrote past the end"
                got = y[:-1]
                same = (got.view(f"u{got.itemsize}") == np.asarray(want).view(f"u{got.itemsize}"))
                same |= np.isnan(got) & np.isnan(want)
                bad = np.nonzero(~same)[0]
                assert bad.size == 0, (name, kind, np.dtype(ddt).name, n, [(x[i], got[i], want[i]) for i in bad[:3]])


# --------------------------------------------------------------------------- dispatch
class _Fake:
    """What vector_plan reads of a CuPy array, over a numpy array."""

    def __init__(self, a):
        self.shape, self.dtype, self.flags, self.size, self.ndim = a.shape, a.dtype, a.flags, a.size, a.ndim

        class _D:
            ptr = a.ctypes.data

        self.data = _D


def _aligned(n, dt, order="C", shape=None):
    buf = np.empty(n * np.dtype(dt).itemsize + 64, dtype=np.uint8)
    off = (-buf.ctypes.data) % 16
    a = buf[off : off + n * np.dtype(dt).itemsize].view(dt)
    return a.reshape(shape, order=order) if shape else a


def test_vector_plan_takes_only_contiguous_aligned_same_layout():
    from iglu_np.backends.cupy_backend import vector_plan

    f32, f64, f16 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)
    x = _aligned(1024, f32)
    assert vector_plan([_Fake(x)], [1.0], None, f32) == f32
    assert vector_plan([_Fake(x), _Fake(_aligned(1024, f32))], [], _Fake(_aligned(1024, f32)), f32) == f32
    assert vector_plan([_Fake(_aligned(1024, f16))], [np.float32(2.0)], None, f32) == f16
    assert vector_plan([_Fake(_aligned(1024, f64))], [], None, f64) == f64
    F = _aligned(1024, f32, "F", (32, 32))
    assert vector_plan([_Fake(F), _Fake(_aligned(1024, f32, "F", (32, 32)))], [], None, f32) == f32
    # each of these keeps the general ElementwiseKernel
    assert vector_plan([_Fake(x[1:1001])], [], None, f32) is None  # 4-byte offset: unaligned
    assert vector_plan([_Fake(x[::2])], [], None, f32) is None  # strided
    assert vector_plan([_Fake(F), _Fake(_aligned(1024, f32, "C", (32, 32)))], [], None, f32) is None
    assert vector_plan([_Fake(x)], [np.ones(3, f32)], None, f32) is None  # array parameter
    assert vector_plan([_Fake(x), _Fake(_aligned(512, f32))], [], None, f32) is None  # broadcast
    assert vector_plan([_Fake(x)], [], _Fake(_aligned(1024, f64)), f32) is None  # out casts
    assert vector_plan([_Fake(x)], [], None, f64) is None  # data computed in another dtype
    assert vector_plan([_Fake(_aligned(1024, np.int32))], [], None, f64) is None


# --------------------------------------------------------------------------- fused backward
WITH_PARAMS = sorted(n for n, s in REGISTRY.items() if s.params)


@pytest.mark.parametrize("name", WITH_PARAMS)
def test_fused_backward_compiles_to_128_bit_accesses(nvrtc, name):
    spec = REGISTRY[name]
    for ddt in ("float16", "float32", "float64"):
        v = cxx.fused_backward_source(spec, ddt)
        ptx, log = H.nvrtc_compile(v.source, (9, 0))
        assert log == "", f"{name} ({ddt}): NVRTC log not empty:\n{log}"
        plain, _ = H.nvrtc_compile(v.source, (9, 0), options=NO_EXPLICIT_FMA)
        ops = H.ptx_instructions(ptx, v.name)
        loads = [o.split()[0] for o in ops if o.startswith("ld.global")]
        stores = [o.split()[0] for o in ops if o.startswith("st.global")]
        vec = _VEC[ddt]
        vl, vs = sum(vec in o for o in loads), sum(vec in o for o in stores)
        # x and g as vectors (+ the tail's scalars); grad_x as vectors (+ the tail's one
        # scalar store) and one float64 partial per parameter
        assert vl >= 2 and len(loads) - vl == 2, loads
        n_p = len(spec.params)
        assert vs >= 1 and len(stores) - vs == 1 + n_p, stores
        st = H.ptx_stats(ptx, v.name)
        assert st["local"] == 0 and st["ftz"] == 0 and st["mufu"] == 0, st
        assert H.ptx_stats(plain, v.name)["fma"] == 0


@pytest.mark.parametrize("name", ["iglu", "xielu", "softplus", "prelu", "gelu_a"])
def test_fused_backward_on_the_host_equals_the_cpu(tmp_path, name):
    import math as _m

    ok, gxx = H.gxx_status()
    if not ok:
        pytest.skip(gxx)
    spec = REGISTRY[name]
    act = iglu_np.get(name)
    blocks, threads = 2, 3
    for ddt in (np.float32, np.float64):
        ct = cxx.DATA_TYPES[np.dtype(ddt).name][0]
        v = cxx.fused_backward_source(spec, ddt)
        pn = [f"p{k}" for k in range(len(spec.params))]
        args = [f"const {ct}* x", f"const {ct}* g", f"{ct}* y", "double* part", "long long n"]
        args += [f"{ct} {p}" for p in pn]
        src = _SIM_HEAD + v.source + (
            f'extern "C" void sim({", ".join(args)}) {{\n'
            f"  blockDim.x = {threads}; gridDim.x = {blocks};\n"
            f"  for (unsigned b = 0; b < {blocks}; ++b)\n"
            f"    for (unsigned t = 0; t < {threads}; ++t) {{\n"
            f"      blockIdx.x = b; threadIdx.x = t;\n"
            f"      iglu_np_vec_{v.name}::{v.name}({', '.join(['x', 'g', 'y', 'part', 'n', *pn])});\n"
            "    }\n}\n"
        )
        cpp, so = tmp_path / f"f_{np.dtype(ddt).name}.cpp", tmp_path / f"f_{np.dtype(ddt).name}.so"
        cpp.write_text(src)
        r = subprocess.run([gxx, "-std=c++17", "-shared", "-fPIC", "-O1", "-ffp-contract=off",
                            "-Wno-unknown-pragmas", str(cpp), "-o", str(so)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        lib = ctypes.CDLL(str(so))
        ptr = ctypes.POINTER(ctypes.c_float if ddt == np.float32 else ctypes.c_double)
        cval = ctypes.c_float if ddt == np.float32 else ctypes.c_double
        lib.sim.argtypes = [ptr, ptr, ptr, ctypes.POINTER(ctypes.c_double), ctypes.c_longlong] + [cval] * len(pn)
        pv = [ddt(spec.defaults[p]) for p in spec.param_names]
        rng = np.random.default_rng(1)
        for n in (1, v.lanes + 1, 6 * v.lanes + 5, 1001):
            x = (rng.standard_normal(n) * 4).astype(ddt)
            g = rng.standard_normal(n).astype(ddt)
            y = np.empty(n, ddt)
            part = np.zeros((len(pn), blocks * threads))
            lib.sim(x.ctypes.data_as(ptr), g.ctypes.data_as(ptr), y.ctypes.data_as(ptr),
                    part.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), n, *pv)
            with np.errstate(all="ignore"):
                assert np.array_equal(y, act._ufunc("bwd")(x, g, *pv), equal_nan=True), (name, n)
                for k, p in enumerate(spec.param_names):
                    terms = act._ufunc("bwd_" + p)(x, g, *pv).astype(np.float64)
                    exact = _m.fsum(terms)
                    # float64 sums of the same terms in another order
                    tol = 4 * n * np.finfo(np.float64).eps * np.abs(terms).sum()
                    assert abs(part[k].sum() - exact) <= tol, (name, p, n, part[k].sum(), exact)
