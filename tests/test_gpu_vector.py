"""The CuPy backend's 16-byte-vector RawKernels, verified without a GPU.

Contiguous operands with scalar parameters run a RawKernel that loads and stores 128-bit
vectors (float4, double2, 8 x half) and finishes the last ``n % lanes`` elements in the
same launch (iglu_np.backends.codegen.cxx.vector_kernel_source). Here:

* NVRTC compiles every activation's vector kernels (every kind; float16/32/64 data) with
  the backend's options, and each entry's PTX moves its data with 128-bit accesses only
  (but one scalar load per input and one scalar store for the tail), uses no local
  memory, no flush-to-zero, no FMA and no approximate math; float16 narrows in pairs
  (``cvt.rn.f16x2.f32``) but the tail's one element;
* the pair narrowing, host-compiled from cuda_fp16.h, rounds each lane as the scalar
  narrowing and numpy's float32 -> float16 cast do (to nearest even), the first float
  into the low half;
* the same source runs on the host (g++, a simulated grid: every block and thread of a
  small launch, so the grid-stride loop and the tail both run) and equals the CPU ufuncs
  bit for bit for sizes around the vector width (float16 too: its float32 result, cast).
"""

from __future__ import annotations

import ctypes
import re
import subprocess

import numpy as np
import pytest

import iglu_np
from iglu_np._spec import REGISTRY
from iglu_np.backends.codegen import cxx

from . import gpu_helpers as H

NAMES = sorted(REGISTRY)
_VEC = {"float16": ".v4.u32", "float32": ".v4.f32", "float64": ".v2.f64"}
# Horner's steps and two_prod are explicit fma (as on the CPU); built without them, no
# fma may remain
NO_EXPLICIT_FMA = ("-DIGLU_NP_NO_EXPLICIT_FMA",)
_F16_NARROW = re.compile(r"cvt(?:\.\w+)*?\.f16(?:x2)?\.f(?:32|64)")


def _assert_f16_narrows_in_pairs(ptx, v):
    """float16 results round to nearest even, in pairs in the vector loop, one scalar
    for the tail (NVVM may duplicate a pair narrowing into branches)."""
    found = _F16_NARROW.findall(H.entry_text(ptx, v.name))
    assert set(found) == {"cvt.rn.f16x2.f32", "cvt.rn.f16.f32"}, (v.name, found)
    assert found.count("cvt.rn.f16.f32") == 1 and found.count("cvt.rn.f16x2.f32") >= v.lanes // 2, (
        v.name,
        found,
    )


@pytest.mark.parametrize("name", H.default_or_slow(NAMES))
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
            if ddt == "float16":
                _assert_f16_narrows_in_pairs(ptx, v)


# --------------------------------------------------------------------------- host simulation
_SIM_HEAD = """
#define __global__
struct iglu_np_dim3 { unsigned x, y, z; };
static iglu_np_dim3 blockIdx, threadIdx, blockDim, gridDim;
"""


def _sim_source(spec, ddt):
    ct = cxx.DATA_TYPES[np.dtype(ddt).name][0]
    if ddt == "float16":  # cuda_fp16.h defines __global__ away on the host
        parts = [cxx.vector_preamble(spec, ddt), _SIM_HEAD.replace("#define __global__\n", "")]
    else:
        parts = [_SIM_HEAD, cxx.vector_preamble(spec, ddt)]
    for kind in cxx.kernel_kinds(spec):
        v = cxx.vector_kernel_source(spec, kind, ddt)
        parts.append(v.body)
        data = ["x", "g"][: v.n_data]
        pn = [f"p{k}" for k in range(len(spec.params))]
        args = [f"const {ct}* {d}" for d in data] + [f"{ct}* y", "long long n"]
        args += [f"{v.compute} {p}" for p in pn] + ["unsigned blocks", "unsigned threads"]
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
    inc = [f"-I{H.cuda_include_dir()}"] if ddt == "float16" else []
    r = subprocess.run(
        [
            gxx,
            "-std=c++17",
            "-shared",
            "-fPIC",
            "-O1",
            "-ffp-contract=off",
            "-Wall",
            "-Wno-unknown-pragmas",
            *inc,
            str(cpp),
            "-o",
            str(so),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
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
                fn.argtypes = (
                    [ptr] * (v.n_data + 1)
                    + [ctypes.c_longlong]
                    + [cval] * len(pv)
                    + [ctypes.c_uint] * 2
                )
                fn(*[d.ctypes.data_as(ptr) for d in data], y.ctypes.data_as(ptr), x.size, *pv, 2, 3)
                with np.errstate(all="ignore"):
                    want = act._ufunc(kind)(*data, *pv)
                assert y[-1] == 7.0, f"{name} {kind}: wrote past the end"
                got = y[:-1]
                same = got.view(f"u{got.itemsize}") == np.asarray(want).view(f"u{got.itemsize}")
                same |= np.isnan(got) & np.isnan(want)
                bad = np.nonzero(~same)[0]
                assert bad.size == 0, (
                    name,
                    kind,
                    np.dtype(ddt).name,
                    n,
                    [(x[i], got[i], want[i]) for i in bad[:3]],
                )


@pytest.fixture(scope="module")
def fp16_headers():
    ok, why = H.gxx_status()
    if not ok:
        pytest.skip(why)
    assert H.cuda_include_dir() is not None, (
        "cuda_fp16.h not found: pip install nvidia-cuda-runtime (the gpu-verify extra)"
    )


@pytest.mark.parametrize("name", list(_sim_cases()))
def test_float16_vector_kernels_on_the_host_equal_the_cpu(tmp_path, fp16_headers, name):
    """The pair loads, widenings and narrowings of the float16 kernels: each element the
    CPU's float16 result (its float32 result rounded once), in place, tail included."""
    spec = REGISTRY[name]
    act = iglu_np.get(name)
    lib = _sim_lib(spec, "float16", tmp_path)
    u16 = ctypes.POINTER(ctypes.c_uint16)
    pv = [float(np.float32(spec.defaults[p])) for p in spec.param_names]
    with np.errstate(all="ignore"):
        pts = H.sweep_points(np.float32).astype(np.float16)
    rng = np.random.default_rng(5)
    pts = np.concatenate([pts, (rng.standard_normal(3001) * 4).astype(np.float16)])
    for n in (1, 7, 8, 9, 8 * 6 + 3, pts.size):
        x = np.ascontiguousarray(pts[:n])
        g = np.linspace(-3.0, 3.0, n).astype(np.float16)
        for kind in cxx.kernel_kinds(spec):
            v = cxx.vector_kernel_source(spec, kind, "float16")
            data = [x, g][: v.n_data]
            y = np.full(n + 1, 7.0, dtype=np.float16)  # one guard element past the end
            fn = getattr(lib, f"sim_{v.name}")
            fn.argtypes = (
                [u16] * (v.n_data + 1)
                + [ctypes.c_longlong]
                + [ctypes.c_float] * len(pv)
                + [ctypes.c_uint] * 2
            )
            fn(*[d.ctypes.data_as(u16) for d in data], y.ctypes.data_as(u16), n, *pv, 2, 4)
            with np.errstate(all="ignore"):
                want = act._ufunc(kind)(
                    *(d.astype(np.float32) for d in data), *map(np.float32, pv)
                ).astype(np.float16)
            assert y[-1] == 7.0, f"{name} {kind}: wrote past the end"
            H.assert_same_bits(y[:-1], want, f"{name} {kind} float16 n={n}")


_FP16_NARROWING = r"""
#include <cuda_fp16.h>
extern "C" void narrow_pairs(const float* x, unsigned short* y, long n) {  // n even
  for (long i = 0; i < n; i += 2) {
    const __half2 h = __floats2half2_rn(x[i], x[i + 1]);
    __builtin_memcpy(y + i, (const void*)&h, 4);
  }
}
extern "C" void narrow_one(const float* x, unsigned short* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = __half_as_ushort(__float2half_rn(x[i]));
}
extern "C" void widen_pairs(const unsigned short* x, float* y, long n) {  // n even
  for (long i = 0; i < n; i += 2) {
    __half2 h;
    __builtin_memcpy((void*)&h, x + i, 4);
    const float2 f = __half22float2(h);
    y[i] = f.x;
    y[i + 1] = f.y;
  }
}
"""


def test_float16_pair_conversions_round_each_lane_as_the_scalar_and_numpy(tmp_path, fp16_headers):
    """``__floats2half2_rn`` (the vector kernels' narrowing) gives each lane the bits of
    ``__float2half_rn`` and of numpy's cast, to nearest even: every float16 value's
    float32 neighbours and midpoints (ties both ways), subnormals, overflow to inf,
    random patterns; the first float lands in the low half. ``__half22float2`` is exact
    for all 65,536 values."""
    lib, log = H.compile_host(
        _FP16_NARROWING,
        "fp16_pairs",
        ("-O2", "-ffp-contract=off", "-Wall", f"-I{H.cuda_include_dir()}"),
        tmp_path,
    )
    assert log == "", log
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    f = h.view(np.float16).astype(np.float32).view(np.uint32)
    fin = np.isfinite(h.view(np.float16))
    f = f[fin]
    with np.errstate(over="ignore"):  # 65504's next is inf
        nxt = (
            np.nextafter(h.view(np.float16)[fin], np.float16(np.inf))
            .astype(np.float32)
            .view(np.uint32)
        )
    mid = ((f.astype(np.uint64) + nxt) // 2).astype(np.uint32)  # same sign: the float32 midpoint
    u = np.concatenate(
        [
            f,
            f + 1,
            f - 1,
            mid,
            mid + 1,
            mid - 1,
            np.random.default_rng(7)
            .integers(0, 1 << 32, 200_000, dtype=np.uint64)
            .astype(np.uint32),
            np.array(
                [
                    0x477FEFFF,
                    0x477FF000,
                    0x477FF001,
                    0x33000000,
                    0x33000001,
                    0x337FFFFF,
                    0x7F800000,
                    0xFF800000,
                    0x00000001,
                    0x80000001,
                ],
                np.uint32,
            ),
        ]
    )
    u = u[: u.size // 2 * 2]
    x = u.view(np.float32)
    nan = np.isnan(x)
    with np.errstate(all="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    with np.errstate(all="ignore"):  # exact halfway cases between two finite float16
        r = want.view(np.float16)
        x64, r64 = x.astype(np.float64), r.astype(np.float64)
        a = np.where(r64 <= x64, r, np.nextafter(r, np.float16(-np.inf)))
        b = np.nextafter(a, np.float16(np.inf))
        tie = (
            np.isfinite(a)
            & np.isfinite(b)
            & (x64 - a.astype(np.float64) == b.astype(np.float64) - x64)
        )
    assert np.count_nonzero(tie) > 50_000  # round half to even is exercised, both ways
    assert np.count_nonzero(tie & (want % 2 == 0) & (r64 > x64)) > 10_000
    assert np.count_nonzero(tie & (want % 2 == 0) & (r64 < x64)) > 10_000
    for fn in (lib.narrow_pairs, lib.narrow_one):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
        got = np.empty(u.size, np.uint16)
        fn(x.ctypes.data, got.ctypes.data, x.size)
        bad = np.nonzero((got != want) & ~nan)[0]
        assert bad.size == 0, [(hex(u[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]
        assert np.isnan(got.view(np.float16)[nan]).all()
    # lane order, spelled out: (1, 2) -> 0x3c00 at the lower address, 0x4000 above
    two = np.array([1.0, 2.0], np.float32)
    got = np.empty(2, np.uint16)
    lib.narrow_pairs(two.ctypes.data, got.ctypes.data, 2)
    assert [hex(v) for v in got] == ["0x3c00", "0x4000"]
    lib.widen_pairs.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    wide = np.empty(h.size, np.float32)
    lib.widen_pairs(h.ctypes.data, wide.ctypes.data, h.size)
    ref = h.view(np.float16).astype(np.float32)
    ok = np.isnan(ref)
    assert (
        np.array_equal(wide.view(np.uint32)[~ok], ref.view(np.uint32)[~ok])
        and np.isnan(wide[ok]).all()
    )


# --------------------------------------------------------------------------- dispatch
class _Fake:
    """What vector_plan reads of a CuPy array, over a numpy array."""

    def __init__(self, a):
        self.shape, self.dtype, self.flags, self.size, self.ndim = (
            a.shape,
            a.dtype,
            a.flags,
            a.size,
            a.ndim,
        )

        class _D:
            ptr = a.ctypes.data

        self.data = _D


def _aligned(n, dt, order="C", shape=None):
    buf = np.empty(n * np.dtype(dt).itemsize + 64, dtype=np.uint8)
    off = (-buf.ctypes.data) % 16
    a = buf[off : off + n * np.dtype(dt).itemsize].view(dt)
    return a.reshape(shape, order=order) if shape else a


def test_vector_plan_takes_only_contiguous_aligned_same_layout():
    from iglu_np.backends.cuda.cupy import vector_plan

    f32, f64, f16 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)
    x = _aligned(1024, f32)
    assert vector_plan([_Fake(x)], [1.0], None, f32) == f32
    assert (
        vector_plan([_Fake(x), _Fake(_aligned(1024, f32))], [], _Fake(_aligned(1024, f32)), f32)
        == f32
    )
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


@pytest.mark.parametrize("name", H.default_or_slow(WITH_PARAMS))
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
        if ddt == "float16":
            _assert_f16_narrows_in_pairs(ptx, v)


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
        src = (
            _SIM_HEAD
            + v.source
            + (
                f'extern "C" void sim({", ".join(args)}) {{\n'
                f"  blockDim.x = {threads}; gridDim.x = {blocks};\n"
                f"  for (unsigned b = 0; b < {blocks}; ++b)\n"
                f"    for (unsigned t = 0; t < {threads}; ++t) {{\n"
                f"      blockIdx.x = b; threadIdx.x = t;\n"
                f"      iglu_np_vec_{v.name}::{v.name}({', '.join(['x', 'g', 'y', 'part', 'n', *pn])});\n"
                "    }\n}\n"
            )
        )
        cpp, so = tmp_path / f"f_{np.dtype(ddt).name}.cpp", tmp_path / f"f_{np.dtype(ddt).name}.so"
        cpp.write_text(src)
        r = subprocess.run(
            [
                gxx,
                "-std=c++17",
                "-shared",
                "-fPIC",
                "-O1",
                "-ffp-contract=off",
                "-Wno-unknown-pragmas",
                str(cpp),
                "-o",
                str(so),
            ],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        lib = ctypes.CDLL(str(so))
        ptr = ctypes.POINTER(ctypes.c_float if ddt == np.float32 else ctypes.c_double)
        cval = ctypes.c_float if ddt == np.float32 else ctypes.c_double
        lib.sim.argtypes = [ptr, ptr, ptr, ctypes.POINTER(ctypes.c_double), ctypes.c_longlong] + [
            cval
        ] * len(pn)
        pv = [ddt(spec.defaults[p]) for p in spec.param_names]
        rng = np.random.default_rng(1)
        for n in (1, v.lanes + 1, 6 * v.lanes + 5, 1001):
            x = (rng.standard_normal(n) * 4).astype(ddt)
            g = rng.standard_normal(n).astype(ddt)
            y = np.empty(n, ddt)
            part = np.zeros((len(pn), blocks * threads))
            lib.sim(
                x.ctypes.data_as(ptr),
                g.ctypes.data_as(ptr),
                y.ctypes.data_as(ptr),
                part.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                n,
                *pv,
            )
            with np.errstate(all="ignore"):
                assert np.array_equal(y, act._ufunc("bwd")(x, g, *pv), equal_nan=True), (name, n)
                for k, p in enumerate(spec.param_names):
                    terms = act._ufunc("bwd_" + p)(x, g, *pv).astype(np.float64)
                    exact = _m.fsum(terms)
                    # float64 sums of the same terms in another order
                    tol = 4 * n * np.finfo(np.float64).eps * np.abs(terms).sum()
                    assert abs(part[k].sum() - exact) <= tol, (name, p, n, part[k].sum(), exact)
