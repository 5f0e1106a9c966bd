"""bfloat16 on the GPU (the CuPy backend), verified without a GPU; the runs on one are
marked gpu.

bfloat16 data is read as ``__nv_bfloat16``, widened exactly to float, computed by the
float32 kernels and rounded once to nearest even (``__float2bfloat16_rn`` in the vector
kernels, CuPy's ``bfloat16`` constructor in ElementwiseKernels). The CPU's bfloat16 is its
float32 result cast by ml_dtypes, so the bits agree; a NaN stays NaN (its payload and sign
are not part of the contract, as for float16).

* NVRTC compiles, per activation, one program holding every kind's vector kernel, the
  fused backward and the ElementwiseKernel bodies wrapped as CuPy wraps them for bfloat16
  operands (scalar and array parameters), with an empty log, for sm_80 (the first arch
  whose hardware converts to bfloat16). Every entry: no local memory, no flush to zero, no
  FMA contraction, no approximate math, no float64 in the float32 kernels; every narrowing
  is ``cvt.rn.bf16.f32``, or ``cvt.rn.bf16x2.f32`` (two lanes, each so rounded) in the
  vector kernels' loops; vector kernels move 16-byte vectors. A sample of activations
  (and one sm_90 compile) by default, all with ``-m slow``;
* the narrowing, host-compiled from cuda_bf16.h with g++ (its exact integer version,
  which devices below sm_80 run), equals ml_dtypes and a bit-level reference on every
  bfloat16 value's float32 neighbours and midpoints (ties both ways, subnormals, overflow
  to inf), random patterns and NaN payloads, one value at a time and in pairs (the
  first into the low half); the widening is exact for all 65,536 values, in pairs too;
* the bfloat16 vector kernels, the fused backward and the ElementwiseKernel bodies,
  host-compiled with g++, equal the CPU's definition bit for bit, every kind;
* dispatch without a GPU: the vector plan takes bfloat16, the Numba CUDA backend refuses it
  naming CuPy, torch.bfloat16 is recognised; the GPU bench takes ``--dtype bfloat16``.
"""

from __future__ import annotations

import ctypes
import math
import re
import subprocess

import numpy as np
import pytest

import iglu_np
from iglu_np._spec import REGISTRY
from iglu_np.backends.codegen import cxx

from . import gpu_helpers as H

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 is ml_dtypes' dtype (the bf16 extra)")
BF16 = np.dtype(ml_dtypes.bfloat16)

NAMES = sorted(REGISTRY)
# the vector kernels and bodies are one template for every activation; these cover
# parameters, prepared parts, bulk kernels and float64-asking specs. All with -m slow.
SAMPLE = ("iglu", "gelu", "silu", "xielu", "hardswish", "softplus", "prelu")
NO_EXPLICIT_FMA = ("-DIGLU_NP_NO_EXPLICIT_FMA",)
_NARROW = re.compile(r"cvt(?:\.\w+)*?\.bf16(?:x2)?\.f(?:32|64)")


def _cases():
    for n in NAMES:
        yield pytest.param(n, marks=() if n in SAMPLE else (pytest.mark.slow,))


def _to_bf16(a):
    """ml_dtypes' cast (NaN inputs warn in numpy's cast machinery: expected here)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(a).astype(BF16)


def _rne_reference(u32):
    """float32 bit patterns -> bfloat16 bit patterns, round to nearest even, from the
    definition (NaN inputs: any NaN, returned as 0x7fc0 here)."""
    u = u32.astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, np.uint16(0x7FC0), r)


def _same_bf16(got, want, what):
    got, want = np.asarray(got).ravel(), np.asarray(want).ravel()
    assert got.dtype == BF16 and want.dtype == BF16, (what, got.dtype, want.dtype)
    H.assert_same_bits(got, want, what)


# --------------------------------------------------------------------------- NVRTC
def _program(spec):
    """(source, ElementwiseKernel entries, vector kernel sources) of one bfloat16 program."""
    ew = []
    for kind in cxx.kernel_kinds(spec):
        ks = cxx.kernel_source(spec, kind, "float32")
        for pa in (False, True) if spec.params else (False,):
            ew.append(
                H.ProgramKernel(
                    ks, "bfloat16", "bfloat16", pa, f"{ks.name}__bf16" + ("_parr" if pa else "")
                )
            )
    for kind in ("fwd", "bwd"):  # a parameter float32 cannot hold: float64 data, bfloat16 out
        ks = cxx.kernel_source(spec, kind, "float64")
        ew.append(H.ProgramKernel(ks, "float64", "bfloat16", False, f"{ks.name}__f64_to_bf16"))
    vec = [cxx.vector_kernel_source(spec, k, "bfloat16") for k in cxx.kernel_kinds(spec)]
    if spec.params:
        vec.append(cxx.fused_backward_source(spec, "bfloat16"))
    src = H.CUPY_BF16 + cxx.vector_preamble(spec, "bfloat16") + H.cupy_like_kernels(ew)
    return src + "".join(v.body for v in vec), ew, vec


def _check_program(spec, cc):
    src, ew, vec = _program(spec)
    ptx, log = H.nvrtc_compile(src, cc)
    assert log == "", (
        f"{spec.name} (bfloat16 program, sm_{cc[0]}{cc[1]}): NVRTC log not empty:\n{log}"
    )
    plain, _ = H.nvrtc_compile(src, cc, options=NO_EXPLICIT_FMA)
    vec_names = {v.name for v in vec}
    entries = [k.entry for k in ew] + [v.name for v in vec]
    assert ptx.count(".entry ") == len(entries), (spec.name, ptx.count(".entry "), len(entries))
    explicit_f64 = cxx.asks_float64(spec)
    for e in entries:
        st = H.ptx_stats(ptx, e)
        text = H.entry_text(ptx, e)
        assert st["local"] == 0 and ".local" not in text, f"{e}: local memory"
        assert st["ftz"] == 0 and ".ftz" not in text, f"{e}: flush-to-zero instructions"
        assert st["mufu"] == 0, f"{e}: approximate hardware math"
        assert H.ptx_stats(plain, e)["fma"] == 0, f"{e}: FMA contraction"
        # to nearest even, for every bfloat16 result (never .rz, .relu, .satfinite); from
        # float32 only (float64 values round to float32 first, as on the CPU)
        narrows = set(_NARROW.findall(text))
        # the vector kernels narrow pairs in their loops, the tail's one element alone
        pairs = {"cvt.rn.bf16x2.f32"} if e in vec_names else set()
        assert narrows == {"cvt.rn.bf16.f32"} | pairs, f"{e}: bfloat16 narrowing {narrows}"
        if e.endswith("__f64_to_bf16"):
            assert "cvt.rn.f32.f64" in text, f"{e}: float64 to float32 first"
        elif not explicit_f64 and "_bwdall_" not in e:  # the fused backward sums in float64
            assert st["f64_ops"] == 0, f"{e}: float64 instructions in a float32 kernel"
    for v in vec:
        ops = H.ptx_instructions(ptx, v.name)
        loads = [o for o in ops if o.startswith("ld.global")]
        stores = [o for o in ops if o.startswith("st.global")]
        vl, vs = sum(".v4.u32" in o for o in loads), sum(".v4.u32" in o for o in stores)
        # 8 bfloat16 per 128-bit access; the tail's one 16-bit load per input and one store
        # (and the fused backward's one float64 partial per parameter)
        extra = len(spec.params) if "_bwdall_" in v.name else 0
        assert v.lanes == 8 and vl >= v.n_data and vs >= 1, (v.name, loads, stores)
        assert len(loads) - vl == v.n_data and len(stores) - vs == 1 + extra, (
            v.name,
            loads,
            stores,
        )
        assert all(".u16" in o for o in loads + stores if ".v4." not in o and ".f64" not in o), (
            v.name,
            loads,
            stores,
        )


@pytest.mark.parametrize("name", list(_cases()))
def test_bf16_programs_compile_for_sm80_rounding_once_to_nearest_even(nvrtc, name):
    _check_program(REGISTRY[name], (8, 0))


def test_bf16_program_compiles_for_sm90(nvrtc):
    # sm_90 widens with cvt.f32.bf16 (sm_80 with a 16-bit shift): both exact
    _check_program(REGISTRY["xielu"], (9, 0))


def test_bf16_sources_name_their_types():
    spec = REGISTRY["iglu"]
    v = cxx.vector_kernel_source(spec, "fwd", BF16)
    assert v.name == "iglu_np_iglu_fwd_vec_bfloat16" and v.lanes == 8 and v.compute == "float"
    assert v.source.startswith("#include <cuda_bf16.h>\n")
    assert "typedef __nv_bfloat16 D;" in v.body
    assert (
        "typedef __nv_bfloat162 D2;" in v.body
        and "const float2 x2 = __bfloat1622float2(xv.v[k]);" in v.body
    )
    assert (
        "__floats2bfloat162_rn(iglu_np::iglu_fwd<float>(x2.x, p_sigma), iglu_np::iglu_fwd<float>(x2.y, p_sigma))"
        in v.body
    )
    assert (
        "y[t] = __float2bfloat16_rn(iglu_np::iglu_fwd<float>(__bfloat162float(x[t]), p_sigma));"
        in v.body
    )
    assert cxx.vector_kernel_source(spec, "fwd", "bfloat16").source == v.source
    assert cxx.data_dtype_name(BF16) == "bfloat16" and cxx.data_dtype_name(np.dtype("V2")) is None
    with pytest.raises(TypeError, match="bfloat16"):
        cxx.vector_kernel_source(spec, "fwd", np.int16)


# --------------------------------------------------------------------------- host: narrowing
_CONVERSIONS = (
    H.CUPY_BF16
    + r"""
extern "C" void narrow_rn(const float* x, unsigned short* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}
// the vector kernels' pair narrowing (n even)
extern "C" void narrow_pairs(const float* x, unsigned short* y, long n) {
  for (long i = 0; i < n; i += 2) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x[i], x[i + 1]);
    __builtin_memcpy(y + i, (const void*)&h, 4);
  }
}
extern "C" void widen_pairs(const unsigned short* x, float* y, long n) {
  for (long i = 0; i < n; i += 2) {
    __nv_bfloat162 h;
    __builtin_memcpy((void*)&h, x + i, 4);
    const float2 f = __bfloat1622float2(h);
    y[i] = f.x;
    y[i + 1] = f.y;
  }
}
// CuPy's ElementwiseKernel store: (Y)(float) and (Y)(double) into its bfloat16
extern "C" void narrow_cupy(const float* x, unsigned short* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = ((bfloat16)(x[i])).to_bits();
}
extern "C" void narrow_cupy_double(const double* x, unsigned short* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = ((bfloat16)(x[i])).to_bits();
}
extern "C" void widen(const unsigned short* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = __bfloat162float(__ushort_as_bfloat16(x[i]));
}
// CuPy's ElementwiseKernel load: (float)x of its bfloat16
extern "C" void widen_cupy(const unsigned short* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = (float)bfloat16(__ushort_as_bfloat16(x[i]));
}
"""
)


@pytest.fixture(scope="module")
def bf16_host(tmp_path_factory):
    ok, why = H.gxx_status()
    if not ok:
        pytest.skip(why)
    inc = H.cuda_include_dir()
    assert inc is not None, (
        "cuda_bf16.h not found: pip install nvidia-cuda-runtime (the gpu-verify extra)"
    )
    flags = ("-O2", "-ffp-contract=off", "-Wno-unknown-pragmas", f"-I{inc}")
    return {"dir": tmp_path_factory.mktemp("bf16_host"), "flags": flags}


def _compile(bf16_host, src, stem):
    lib, log = H.compile_host(src, stem, bf16_host["flags"], bf16_host["dir"])
    assert log == "", f"g++ warnings:\n{log}"
    return lib


def _call(fn, a, out_dtype):
    a = np.ascontiguousarray(a)
    out = np.empty(a.shape, out_dtype)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    fn(a.ctypes.data, out.ctypes.data, a.size)
    return out


def _narrowing_inputs():
    b = np.arange(1 << 16, dtype=np.uint32) << 16  # every bfloat16 value, as float32
    mid = b | 0x8000  # the midpoints to the next value up: ties to even both ways
    u = np.concatenate(
        [
            b,
            b + 1,
            b - 1,
            mid,
            mid + 1,
            mid - 1,
            np.random.default_rng(7)
            .integers(0, 1 << 32, 200_000, dtype=np.uint64)
            .astype(np.uint32),
            np.array(
                [
                    0x7F7F7FFF,
                    0x7F7F8000,
                    0x7F7F8001,
                    0x7F7FFFFF,  # overflow edge
                    0x00000001,
                    0x00008000,
                    0x00018000,
                    0x007FFFFF,  # subnormals, ties
                    0x7F800001,
                    0xFF800001,
                    0x7F80FFFF,
                    0x7FC00000,
                    0x7FFFFFFF,
                    0xFFC00001,
                ],
                dtype=np.uint32,
            ),
        ]
    )
    return u


def test_bf16_narrowing_is_ml_dtypes_round_to_nearest_even(bf16_host):
    lib = _compile(bf16_host, _CONVERSIONS, "bf16_conv")
    u = _narrowing_inputs()
    x = u.view(np.float32)
    want = _to_bf16(x).view(np.uint16)
    ref = _rne_reference(u)
    nan_in = np.isnan(x)
    assert nan_in.sum() > 1000  # NaN payloads in the low and the high half
    # the bit-level definition and ml_dtypes agree: ml_dtypes is IEEE round to nearest even
    assert np.array_equal(want[~nan_in], ref[~nan_in])
    assert np.isnan(want.view(BF16)[nan_in]).all()
    assert u.size % 2 == 0
    for fn in ("narrow_rn", "narrow_cupy", "narrow_pairs"):
        got = _call(getattr(lib, fn), x, np.uint16)
        bad = np.nonzero((got != want) & ~nan_in)[0]
        assert bad.size == 0, (fn, [(hex(u[i]), hex(got[i]), hex(want[i])) for i in bad[:5]])
        # NaN stays NaN, never inf (a NaN whose payload is in the low half truncates to inf)
        assert np.isnan(got.view(BF16)[nan_in]).all(), fn
    # the cases named above, spelled out
    got = _call(
        lib.narrow_rn,
        np.array([0x3F808000, 0x3F818000, 0x7F7F8000, 0x00008000, 0x80018000], np.uint32).view(
            np.float32
        ),
        np.uint16,
    )
    assert [hex(v) for v in got] == ["0x3f80", "0x3f82", "0x7f80", "0x0", "0x8002"]
    got = _call(lib.narrow_pairs, np.array([1.0, 2.0], np.float32), np.uint16)
    assert [hex(v) for v in got] == ["0x3f80", "0x4000"]  # the first float in the low half


def test_bf16_from_float64_rounds_through_float32_as_the_cpu(bf16_host):
    """The ElementwiseKernel of a call that computes in float64 (a parameter float32
    cannot hold) stores float64 into bfloat16: to float32 first, then to bfloat16, as the
    CPU's bfloat16 (its float32 result, rounded) does; directly it would differ."""
    lib = _compile(bf16_host, _CONVERSIONS, "bf16_conv")
    rng = np.random.default_rng(3)
    f = np.abs(rng.standard_normal(20_000)).astype(np.float32)
    # doubles a hair above and below a bfloat16 midpoint: float32 rounds them onto the
    # midpoint, which then goes to even; rounded directly they go up and down
    u = (f.view(np.uint32) & 0xFFFF0000) | 0x8000
    tie = u.view(np.float32).astype(np.float64)
    d = np.concatenate(
        [tie + np.spacing(tie) * 4, tie - np.spacing(tie) * 4, rng.standard_normal(20_000) * 1e3]
    )
    got = _call(lib.narrow_cupy_double, d, np.uint16)
    want = _to_bf16(d.astype(np.float32)).view(np.uint16)
    assert np.array_equal(got, want)
    hi = (u >> 16).astype(np.uint16)
    direct = np.concatenate([hi + 1, hi])  # the midpoints' neighbours, rounded directly
    assert np.count_nonzero(got[: direct.size] != direct) > 10_000  # the test tells them apart


def test_bf16_widening_is_exact_for_every_value(bf16_host):
    lib = _compile(bf16_host, _CONVERSIONS, "bf16_conv")
    b = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    want = b.view(BF16).astype(np.float32)
    nan = np.isnan(want)
    assert nan.sum() == 2 * 127  # every NaN payload, both signs
    for fn in (lib.widen, lib.widen_cupy, lib.widen_pairs):
        got = _call(fn, b, np.float32)
        assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
        assert np.isnan(got[nan]).all()


# --------------------------------------------------------------------------- host: kernels
_SIM_HEAD = """
struct iglu_np_dim3 { unsigned x, y, z; };
static iglu_np_dim3 blockIdx, threadIdx, blockDim, gridDim;
"""


def _cpu_def(act, kind, x, g, pv):
    """The CPU's bfloat16: the float32 kernel, its result cast by ml_dtypes."""
    with np.errstate(all="ignore"):
        args = [x.astype(np.float32)] + ([g.astype(np.float32)] if g is not None else [])
        return _to_bf16(act._ufunc(kind)(*args, *(np.float32(p) for p in pv)))


def _sim(spec, kinds, bf16_host):
    """The bfloat16 vector kernels (exactly the source NVRTC compiles) and the
    ElementwiseKernel bodies (X = Y = CuPy's bfloat16) in one host library; the vector
    kernels run a simulated grid of 2 blocks x 4 threads (the tail's n % 8 elements take
    one thread each, as a launch of at least 256 threads has)."""
    pn = [f"p{k}" for k in range(len(spec.params))]
    # (cuda_bf16.h defines __global__ away on the host)
    parts = [cxx.vector_preamble(spec, "bfloat16"), H.CUPY_BF16, _SIM_HEAD]
    for kind in kinds:
        v = cxx.vector_kernel_source(spec, kind, "bfloat16")
        body = v.body
        data = ["x", "g"][: v.n_data]
        args = [f"const __nv_bfloat16* {d}" for d in data] + ["__nv_bfloat16* y", "long long n"]
        args += [f"float {p}" for p in pn]
        parts.append(body)
        parts.append(
            f'extern "C" void sim_{v.name}({", ".join(args)}) {{\n'
            "  blockDim.x = 4; gridDim.x = 2;\n"
            "  for (unsigned b = 0; b < 2; ++b)\n"
            "    for (unsigned t = 0; t < 4; ++t) {\n"
            f"      blockIdx.x = b; threadIdx.x = t;\n"
            f"      iglu_np_vec_{v.name}::{v.name}({', '.join([*data, 'y', 'n', *pn])});\n"
            "    }\n}\n"
        )
        ks = cxx.kernel_source(spec, kind, "float32")
        dnames = [a for a in ks.args if not a.startswith("p_")]
        pnames = [a for a in ks.args if a.startswith("p_")]
        eargs = [f"const bfloat16* _raw_{d}" for d in dnames] + [f"float {p}" for p in pnames]
        eargs += ["bfloat16* _raw_y", "long _n"]
        loads = " ".join(f"const X {d} = _raw_{d}[_i];" for d in dnames)
        parts.append(
            f"namespace ew_{ks.name} {{\ntypedef bfloat16 X;\ntypedef bfloat16 Y;\n"
            f'extern "C" void ew_{ks.name}({", ".join(eargs)}) {{\n'
            f"  for (long _i = 0; _i < _n; ++_i) {{ {loads} Y y; {ks.body} _raw_y[_i] = y; }}\n}}\n}}\n"
        )
    src = "\n".join(parts)
    return _compile(bf16_host, src, f"bf16_sim_{spec.name}")


def _run(fn, data, n_out, pv):
    y = np.full(n_out + 1, 7.0, dtype=np.float32).astype(BF16)  # one guard element past the end
    fn.restype = None
    fn.argtypes = None
    ptrs = [ctypes.c_void_p(d.ctypes.data) for d in data]
    fn(
        *ptrs,
        ctypes.c_void_p(y.ctypes.data),
        ctypes.c_longlong(n_out),
        *(ctypes.c_float(p) for p in pv),
    )
    assert y[-1] == 7.0, "wrote past the end"
    return y[:-1]


def _run_ew(fn, data, n_out, pv):
    y = np.empty(n_out, BF16)
    fn.restype = None
    ptrs = [ctypes.c_void_p(d.ctypes.data) for d in data]
    fn(
        *ptrs,
        *(ctypes.c_float(p) for p in pv),
        ctypes.c_void_p(y.ctypes.data),
        ctypes.c_long(n_out),
    )
    return y


@pytest.mark.parametrize("name", ["iglu", "xielu", "softplus", "gelu", "hardswish"])
def test_bf16_kernels_on_the_host_equal_the_cpu_definition(bf16_host, name):
    spec = REGISTRY[name]
    act = iglu_np.get(name)
    kinds = cxx.kernel_kinds(spec)
    lib = _sim(spec, kinds, bf16_host)
    pv = [float(np.float32(spec.defaults[p])) for p in spec.param_names]
    pts = _to_bf16(H.sweep_points(np.float32))  # tails, subnormals, +-0, +-inf, nan
    rng = np.random.default_rng(5)
    pts = np.concatenate([pts, _to_bf16(rng.standard_normal(3001).astype(np.float32) * 4)])
    for n in (1, 7, 8, 9, 8 * 6 + 3, pts.size):
        x = np.ascontiguousarray(pts[:n])
        g = _to_bf16(np.linspace(-3.0, 3.0, n).astype(np.float32))
        for kind in kinds:
            v = cxx.vector_kernel_source(spec, kind, "bfloat16")
            data = [x, g][: v.n_data]
            want = _cpu_def(act, kind, x, g if v.n_data == 2 else None, pv)
            _same_bf16(
                _run(getattr(lib, f"sim_{v.name}"), data, n, pv),
                want,
                f"{name} {kind} vector n={n}",
            )
            ks = cxx.kernel_source(spec, kind, "float32")
            _same_bf16(
                _run_ew(getattr(lib, f"ew_{ks.name}"), data, n, pv),
                want,
                f"{name} {kind} ElementwiseKernel n={n}",
            )


def test_bf16_fused_backward_on_the_host_equals_the_cpu_definition(bf16_host):
    spec = REGISTRY["iglu"]
    act = iglu_np.get("iglu")
    v = cxx.fused_backward_source(spec, "bfloat16")
    assert v.source == cxx.vector_preamble(spec, "bfloat16") + v.body
    src = (
        cxx.vector_preamble(spec, "bfloat16")
        + _SIM_HEAD
        + v.body
        + (
            'extern "C" void sim(const __nv_bfloat16* x, const __nv_bfloat16* g, __nv_bfloat16* y, '
            "double* part, long long n, float p0) {\n"
            "  blockDim.x = 4; gridDim.x = 2;\n"
            "  for (unsigned b = 0; b < 2; ++b) for (unsigned t = 0; t < 4; ++t) {\n"
            f"    blockIdx.x = b; threadIdx.x = t; iglu_np_vec_{v.name}::{v.name}(x, g, y, part, n, p0);\n"
            "  }\n}\n"
        )
    )
    lib = _compile(bf16_host, src, "bf16_fused")
    rng = np.random.default_rng(11)
    sigma = float(np.float32(spec.defaults["sigma"]))
    for n in (1, 9, 8 * 6 + 5, 1001):
        x = _to_bf16(rng.standard_normal(n).astype(np.float32) * 4)
        g = _to_bf16(rng.standard_normal(n).astype(np.float32))
        y = np.empty(n, BF16)
        part = np.zeros(8)
        lib.sim.restype = None
        lib.sim(
            *(ctypes.c_void_p(a.ctypes.data) for a in (x, g, y, part)),
            ctypes.c_longlong(n),
            ctypes.c_float(sigma),
        )
        _same_bf16(y, _cpu_def(act, "bwd", x, g, [sigma]), f"fused grad_x n={n}")
        terms = act._ufunc("bwd_sigma")(
            x.astype(np.float32), g.astype(np.float32), np.float32(sigma)
        )
        terms = terms.astype(np.float64)
        exact = math.fsum(terms)
        assert abs(part.sum() - exact) <= 4 * n * np.finfo(np.float64).eps * np.abs(terms).sum(), (
            n,
            part.sum(),
            exact,
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


def _aligned(n, dt):
    dt = np.dtype(dt)
    buf = np.empty(n * dt.itemsize + 64, dtype=np.uint8)
    off = (-buf.ctypes.data) % 16
    return buf[off : off + n * dt.itemsize].view(dt)


def test_vector_plan_takes_bf16_and_keeps_the_result_dtype():
    from iglu_np.backends.cuda.cupy import vector_plan

    f32, f64, f16 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)
    x = _aligned(1024, BF16)
    assert vector_plan([_Fake(x)], [np.float32(1.0)], None, f32) == BF16
    assert (
        vector_plan(
            [_Fake(x), _Fake(_aligned(1024, BF16))], [], _Fake(_aligned(1024, BF16)), f32, BF16
        )
        == BF16
    )
    assert vector_plan([_Fake(x[1:1001])], [], None, f32) is None  # 2-byte offset: unaligned
    assert vector_plan([_Fake(x[::2])], [], None, f32) is None  # strided: ElementwiseKernel
    assert vector_plan([_Fake(x)], [], None, f64) is None  # bfloat16 computes in float32
    assert vector_plan([_Fake(x), _Fake(_aligned(1024, f16))], [], None, f32) is None  # mixed
    # data widened to float64 (a parameter float32 cannot hold) whose result is 16-bit:
    # the vector kernel would write float64, so the ElementwiseKernel rounds instead
    w = _aligned(1024, f64)
    assert vector_plan([_Fake(w)], [], None, f64, BF16) is None
    assert vector_plan([_Fake(w)], [], None, f64, f16) is None
    assert vector_plan([_Fake(w)], [], None, f64, f64) == f64


class _DeviceLike:
    """A device array as the dispatcher sees one (never touched: the refusal comes first)."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.shape = (8,)
        self.__cuda_array_interface__ = {
            "shape": (8,),
            "typestr": "<V2",
            "data": (0, False),
            "version": 2,
        }


def test_numba_cuda_refuses_bf16_naming_the_cupy_backend():
    torch = pytest.importorskip("torch", reason="torch.bfloat16 operands (the torch extra)")
    for dt in (BF16, torch.bfloat16):
        x = _DeviceLike(dt)
        for call in (
            lambda: iglu_np.iglu(x, backend="numba_cuda"),
            lambda: iglu_np.iglu.backward(x, x, backend="numba_cuda"),
            lambda: iglu_np.iglu.backward_params(x, x, backend="numba_cuda"),
            lambda: iglu_np.iglu.backward_all(x, x, backend="numba_cuda"),
        ):
            with pytest.raises(TypeError, match=r"iglu: x is bfloat16.*numba_cuda.*cupy backend"):
                call()
    f = _DeviceLike(np.dtype(np.float32))
    with pytest.raises(TypeError, match=r"iglu: out is bfloat16"):
        iglu_np.iglu(f, out=_DeviceLike(BF16), backend="numba_cuda")


def test_bf16_arrays_are_recognised_by_name():
    from iglu_np.backends.cuda._interop import _Bits16, is_bf16_array

    torch = pytest.importorskip("torch", reason="torch.bfloat16 operands (the torch extra)")
    assert is_bf16_array(np.zeros(3, BF16)) and is_bf16_array(torch.zeros(3, dtype=torch.bfloat16))
    assert not is_bf16_array(np.zeros(3, np.float16)) and not is_bf16_array(torch.zeros(3))
    assert not is_bf16_array(np.zeros(3, "V2")) and not is_bf16_array(3.0)
    t = torch.zeros(3, dtype=torch.bfloat16)
    cai = {"shape": (3,), "typestr": "<V2", "data": (1234, False), "version": 2, "strides": None}
    b = _Bits16(cai, t)
    assert b.__cuda_array_interface__ == dict(cai, typestr="<u2") and b.base is t
    assert cai["typestr"] == "<V2"  # the producer's dict is left alone


def test_gpu_bench_takes_bf16():
    from iglu_np.cli import bench_gpu

    assert (
        bench_gpu.data_dtype("bfloat16") == BF16 and bench_gpu.data_dtype("float16") == np.float16
    )
    with pytest.raises(ValueError, match="bfloat16"):
        bench_gpu.data_dtype("int8")
    data = {
        "device": "Test GPU",
        "cupy": "14",
        "numba_cuda": "n/a",
        "torch": "2",
        "jax": None,
        "size": 1024,
        "rows": [
            {"dtype": "bfloat16", "name": "(copy limit)", "fwd_ms": 0.1, "bwd_ms": 0.15},
            {
                "dtype": "bfloat16",
                "name": "gelu",
                "fwd_ms": 0.11,
                "bwd_ms": 0.3,
                "torch_fwd_ms": 0.2,
            },
        ],
    }
    assert (
        "| bfloat16 | gelu | 0.110 (1.10x) | 0.300 (2.00x) | 0.200 (2.00x) |"
        in bench_gpu.markdown(data)
    )


def test_gpu_bench_cli_names_the_dtypes():
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "iglu_np.cli",
            "bench",
            "--device",
            "gpu",
            "--dtype",
            "bfloat17",
            "iglu",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "bfloat16" in r.stderr and "'bfloat17'" in r.stderr, r.stderr


# --------------------------------------------------------------------------- on a GPU
def _points(n=4099):
    x = H.sweep_points(np.float64)
    x = np.concatenate([x, np.random.default_rng(0).standard_normal(n) * 4])
    return _to_bf16(x)


def _params(act):
    ps = {}
    for p in act.params:
        vals = [v for v in p.test_values if p.contains(v)]
        ps[p.name] = vals[0] if vals else p.default
    if act.spec.check is not None and act.spec.check(**ps):
        ps = dict(act.defaults)
    return ps


def _f32(a):
    return np.asarray(a).astype(np.float32)


def _close_sum(got, want, terms, what):
    """A float64 sum of the same float32 terms in another order, rounded to float32."""
    scale = float(np.sum(np.abs(terms.astype(np.float64)))) or 1.0
    got, want = float(got), float(want)
    assert got == want or abs(got - want) <= 1e-10 * scale + 2 * float(
        np.spacing(np.float32(abs(want)))
    ), f"{what}: gpu {got!r} cpu {want!r} (scale {scale:.3g})"


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_cupy_bf16_matches_the_cpu_definition(name):
    cupy = pytest.importorskip("cupy")
    act = iglu_np.get(name)
    ps = _params(act)
    x = _points()
    g = _to_bf16(np.linspace(-2, 2, x.size))
    xd, gd = cupy.asarray(x), cupy.asarray(g)
    with np.errstate(all="ignore"):
        want = {
            "fwd": _to_bf16(act(_f32(x), **ps)),
            "dx": _to_bf16(act.dx(_f32(x), **ps)),
            "bwd": _to_bf16(act.backward(_f32(x), _f32(g), **ps)),
        }
        want_dp = {p: _to_bf16(v) for p, v in act.dparams(_f32(x), **ps).items()}
    y = act(xd, **ps)
    assert isinstance(y, cupy.ndarray) and y.dtype == BF16
    _same_bf16(cupy.asnumpy(y), want["fwd"], f"{name} fwd")
    _same_bf16(cupy.asnumpy(act.dx(xd, **ps)), want["dx"], f"{name} dx")
    _same_bf16(cupy.asnumpy(act.backward(xd, gd, **ps)), want["bwd"], f"{name} bwd")
    for p, v in act.dparams(xd, **ps).items():
        _same_bf16(cupy.asnumpy(v), want_dp[p], f"{name} d_{p}")
    # the ElementwiseKernel (strided views) gives the same bits as the vector kernels
    _same_bf16(cupy.asnumpy(act(xd[::2], **ps)), want["fwd"][::2], f"{name} fwd strided")
    _same_bf16(
        cupy.asnumpy(act.backward(xd[::2], gd[::2], **ps)), want["bwd"][::2], f"{name} bwd strided"
    )
    o = cupy.empty_like(xd)
    assert act(xd, out=o, **ps) is o
    _same_bf16(cupy.asnumpy(o), want["fwd"], f"{name} fwd out=")
    if act.param_names:
        fin = np.isfinite(_f32(x)) & (np.abs(_f32(x)) <= 1000)
        xf, gf = cupy.asarray(x[fin]), cupy.asarray(g[fin])
        with np.errstate(all="ignore"):
            want_bp = act.backward_params(_f32(x[fin]), _f32(g[fin]), **ps)
            want_x = _to_bf16(act.backward(_f32(x[fin]), _f32(g[fin]), **ps))
            terms = {p: _f32(g[fin]) * v for p, v in act.dparams(_f32(x[fin]), **ps).items()}
        bp = act.backward_params(xf, gf, **ps)
        gx, ga = act.backward_all(xf, gf, **ps)
        _same_bf16(cupy.asnumpy(gx), want_x, f"{name} backward_all grad_x")
        for p in act.param_names:
            assert bp[p].dtype == np.float32 and ga[p].dtype == np.float32, (
                bp[p].dtype,
                ga[p].dtype,
            )
            _close_sum(cupy.asnumpy(bp[p]), want_bp[p], terms[p], f"{name} backward_params {p}")
            _close_sum(cupy.asnumpy(ga[p]), want_bp[p], terms[p], f"{name} backward_all {p}")


@pytest.mark.gpu
def test_cupy_bf16_beside_float32_computes_float32():
    cupy = pytest.importorskip("cupy")
    x = _points()
    g = np.linspace(-2, 2, x.size).astype(np.float32)
    r = iglu_np.iglu.backward(cupy.asarray(x), cupy.asarray(g))
    assert r.dtype == np.float32
    H.assert_same_bits(
        cupy.asnumpy(r), iglu_np.iglu.backward(_f32(x), g), "iglu bwd bf16 x, float32 g"
    )


@pytest.mark.gpu
def test_cupy_bf16_with_a_parameter_beyond_float32_rounds_through_float32():
    cupy = pytest.importorskip("cupy")
    x = _points()
    with np.errstate(all="ignore"):
        want = _to_bf16(iglu_np.iglu(_f32(x), sigma=1e39))
    _same_bf16(cupy.asnumpy(iglu_np.iglu(cupy.asarray(x), sigma=1e39)), want, "iglu sigma=1e39")


@pytest.mark.gpu
def test_cupy_float16_with_a_parameter_beyond_float32_stays_float16():
    cupy = pytest.importorskip("cupy")
    x = np.linspace(-4, 4, 4096).astype(np.float16)  # contiguous: the vector kernels' shape
    for f in (
        lambda a: iglu_np.iglu(a, sigma=1e39),
        lambda a: iglu_np.iglu.backward(a, a, sigma=1e39),
    ):
        got, want = f(cupy.asarray(x)), f(x)
        assert got.dtype == want.dtype == np.float16
        assert H.ulp_diff(cupy.asnumpy(got), want).max() <= 1


def _torch_bf16(torch, a):
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).cuda().view(torch.bfloat16)


def _from_torch(t):
    import torch

    return t.detach().cpu().contiguous().view(torch.int16).numpy().view(BF16)


@pytest.mark.gpu
def test_torch_bf16_cuda_tensors_run_zero_copy_and_come_back_as_torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("cupy")
    act = iglu_np.xielu
    ps = _params(act)
    x = _points()
    g = _to_bf16(np.linspace(-2, 2, x.size))
    tx, tg = _torch_bf16(torch, x), _torch_bf16(torch, g)
    with np.errstate(all="ignore"):
        want = _to_bf16(act(_f32(x), **ps))
        want_b = _to_bf16(act.backward(_f32(x), _f32(g), **ps))
    y = act(tx, **ps)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and y.device == tx.device
    _same_bf16(_from_torch(y), want, "xielu fwd torch")
    _same_bf16(_from_torch(act(tx[::2], **ps)), want[::2], "xielu fwd torch strided")
    out = torch.empty_like(tx)
    assert act.backward(tx, tg, out=out, **ps) is out
    _same_bf16(_from_torch(out), want_b, "xielu bwd torch out=")
    gx, gp = act.backward_all(tx, tg, **ps)
    assert isinstance(gx, torch.Tensor) and gx.dtype == torch.bfloat16
    _same_bf16(_from_torch(gx), want_b, "xielu backward_all torch")
    assert all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in gp.values())


@pytest.mark.gpu
def test_numba_cuda_refuses_cupy_bf16_on_a_gpu():
    cupy = pytest.importorskip("cupy")
    with pytest.raises(TypeError, match="cupy backend"):
        iglu_np.iglu(cupy.asarray(_points()), backend="numba_cuda")
