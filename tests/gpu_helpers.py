"""Helpers for verifying the GPU code on machines without a GPU.

* NVRTC (``cuda-bindings`` + the ``nvidia-cuda-nvrtc`` wheel) compiles the CuPy kernels'
  C++ to PTX; nvJitLink assembles PTX (from NVRTC or Numba) to CUBIN and reports what
  ptxas reports (registers, spills, local memory), no driver needed.
* ``cupy_like_source`` wraps a :class:`iglu_np.backends.codegen.cxx.KernelSource` the way CuPy's
  ElementwiseKernel does (typedefs for the type placeholders, one element per iteration
  of a grid-stride loop, the body line verbatim), so NVRTC sees what CuPy would compile.
* ``host_library`` builds the same preamble and body with g++ into a shared library
  (IGLU_NP_HOST_DEVICE -> ``inline``) for numerical comparison with the CPU ufuncs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from iglu_np.backends.codegen import cxx

ARCHS = ((8, 0), (9, 0))

# The activations whose GPU code the default run compiles and compares offline (PTX, NVRTC,
# host C++): one for each kind of code the translation meets. atan (iglu, iglu_approx),
# erf and float64 helpers (gelu), exp (silu, swish), expm1 with a parameter (elu), log1p
# with two parameters (softplus), hypot in float64 (squareplus), four parameters (xielu),
# two piecewise parameters (hardtanh), piecewise without (hardswish). `-m slow` (CI runs
# it too) checks every activation.
GPU_DEFAULT = (
    "iglu",
    "iglu_approx",
    "gelu",
    "silu",
    "swish",
    "elu",
    "softplus",
    "squareplus",
    "xielu",
    "hardtanh",
    "hardswish",
)


def default_or_slow(names, default=GPU_DEFAULT):
    """``names`` as pytest parameters, those outside ``default`` marked slow."""
    import pytest

    return [n if n in default else pytest.param(n, marks=pytest.mark.slow) for n in names]


# numba-cuda 0.30 overloads numpy.row_stack, which numpy 2.5 removed: there it cannot
# compile a kernel (iglu_np.backends.cuda.toolchain says so to users), so its offline PTX
# checks cannot run; tests/test_mlir_ptx.py compiles the kernels through numba-cuda-mlir,
# the default toolchain, on every numpy. conftest.py accepts this skip under
# IGLU_NP_STRICT_SKIPS=1 only where numpy has no row_stack.
NUMBA_CUDA_WITHOUT_ROW_STACK = (
    "numba-cuda cannot compile kernels on numpy >= 2.5 (no numpy.row_stack); "
    "tests/test_mlir_ptx.py compiles them through numba-cuda-mlir here"
)


def skip_where_numba_cuda_cannot_compile():
    """Skip, saying why, where numpy has no ``row_stack`` (numpy >= 2.5) and numba-cuda is
    the compiler asked for."""
    if not hasattr(np, "row_stack"):
        import pytest

        pytest.skip(NUMBA_CUDA_WITHOUT_ROW_STACK)


# --------------------------------------------------------------------------- NVRTC
@lru_cache(maxsize=1)
def nvrtc_status():
    """(usable, reason) for NVRTC through cuda-bindings."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        return False, f"cuda-bindings not installed ({e}); pip install -e .[gpu-verify]"
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # the bindings import but the NVRTC library does not load
        return False, f"NVRTC library not loadable ({e}); pip install nvidia-cuda-nvrtc"
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return False, f"nvrtcVersion failed: {err}"
    return True, f"NVRTC {major}.{minor}"


@lru_cache(maxsize=1)
def cuda_include_dir():
    """Directory with cuda_fp16.h (the CUDA runtime headers wheel), or None."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        return find_nvidia_header_directory("cudart")
    except Exception:
        return None


def _check(res, what):
    err = res[0]
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err!r}")
    return res[1:] if len(res) > 2 else (res[1] if len(res) == 2 else None)


def nvrtc_compile(source: str, cc=(9, 0), name="iglu_np_test.cu", options=()):
    """Compile CUDA C++ to PTX with NVRTC; returns (ptx, log). Raises on errors (with log)."""
    from cuda.bindings import nvrtc

    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "create")
    # the options CuPy compiles with (no FMA contraction, no flush to zero: see cxx.py)
    opts = [
        f"--gpu-architecture=compute_{cc[0]}{cc[1]}".encode(),
        *(o.encode() for o in cxx.NVRTC_OPTIONS),
    ]
    inc = cuda_include_dir()
    if inc:
        opts.append(f"--include-path={inc}".encode())
    opts += [o.encode() for o in options]
    try:
        res = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        # NVRTC writes into the buffer: a bytearray, never bytes (b" " * 1 is the
        # interpreter's shared b" ", and a 1-byte log, the bare NUL, would zero it)
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        buf = bytearray(size)
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.decode(errors="replace").rstrip("\x00").strip()
        if int(res[0]) != 0:
            raise RuntimeError(f"NVRTC compile failed:\n{log}")
        size = _check(nvrtc.nvrtcGetPTXSize(prog), "ptx size")
        buf = bytearray(size)
        nvrtc.nvrtcGetPTX(prog, buf)
        return buf.decode().rstrip("\x00"), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@lru_cache(maxsize=1)
def nvjitlink_status():
    try:
        from cuda.bindings import nvjitlink

        nvjitlink.version()
    except Exception as e:
        return False, f"nvJitLink not available ({e}); pip install nvidia-nvjitlink"
    return True, "nvJitLink"


def ptxas_info(ptx: str, cc=(9, 0)) -> str:
    """Assemble PTX to CUBIN with nvJitLink (-verbose) and return ptxas' info log."""
    from cuda.bindings import nvjitlink

    h = nvjitlink.create(2, [f"-arch=sm_{cc[0]}{cc[1]}", "-verbose"])
    try:
        data = ptx.encode()
        nvjitlink.add_data(h, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
        try:
            nvjitlink.complete(h)
        except Exception:
            n = nvjitlink.get_error_log_size(h)
            buf = bytearray(n)
            nvjitlink.get_error_log(h, buf)
            raise RuntimeError("nvJitLink failed:\n" + buf.decode(errors="replace"))
        n = nvjitlink.get_info_log_size(h)
        buf = bytearray(n)
        nvjitlink.get_info_log(h, buf)
        return buf.decode(errors="replace").rstrip("\x00")
    finally:
        nvjitlink.destroy(h)


def spill_summary(info: str):
    """(spill store bytes, spill load bytes, stack frame bytes) summed over the log."""
    st = sum(int(v) for v in re.findall(r"(\d+) bytes spill stores", info))
    ld = sum(int(v) for v in re.findall(r"(\d+) bytes spill loads", info))
    fr = sum(int(v) for v in re.findall(r"(\d+) bytes stack frame", info))
    return st, ld, fr


# --------------------------------------------------------------------------- PTX
_INSTR = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)", re.M)
_DIRECTIVE_OR_LABEL = re.compile(r"^\s*(?:\.|\$|//|\{|\}|\)|$)")


def ptx_instructions(ptx: str, entry: str | None = None) -> list:
    """Opcodes of the instructions in the (first, or named) ``.entry`` of a PTX module."""
    lines = ptx.splitlines()
    start = None
    for i, ln in enumerate(lines):
        if ln.lstrip().startswith(".visible .entry") or ln.lstrip().startswith(".entry"):
            # the exact name: in a program of several kernels one entry's name may be a
            # prefix of another's
            if entry is None or re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(", ln):
                start = i
                break
    if start is None:
        raise ValueError(f"no .entry {entry or ''} in PTX")
    depth, ops, began = 0, [], False
    for ln in lines[start:]:
        s = ln.strip()
        # braces on every line: a one-line inline-asm block ``{  cvt.f32.f16 %f1, %rs1;}``
        # opens and closes, also with a vector operand (``{ mov.b32 %f2, {0,%rs1};}``,
        # bfloat16 on sm_80); a multi-line one (``__half22float2``) closes on the line of
        # its last instruction (``cvt.f32.f16 %f1, low;}``); vector operands balance
        outer = depth
        depth += s.count("{") - s.count("}")
        if not began:
            began = depth > 0
            continue
        if depth == 0:
            break
        if outer != 1 or s.startswith(("{", "}")):
            continue  # the entry's braces, or inside an inline-asm block
        if not s or s.startswith((".", "$", "//", "(", ")")) or s.endswith(":"):
            continue
        m = _INSTR.match(s)
        if m:
            ops.append(m.group(1))
    return ops


def entry_text(ptx: str, entry: str) -> str:
    """The PTX text of one ``.entry`` (its inline-asm blocks included, which
    :func:`ptx_instructions` leaves out)."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(", ptx)
    if m is None:
        raise ValueError(f"no .entry {entry} in PTX")
    nxt = re.search(r"\.entry\s+\w+\s*\(", ptx[m.end() :])
    return ptx[m.start() : m.end() + nxt.start() if nxt else len(ptx)]


def ptx_stats(ptx: str, entry: str | None = None) -> dict:
    ops = ptx_instructions(ptx, entry)
    return {
        "instructions": len(ops),
        "ld_global": sum(o.startswith("ld.global") for o in ops),
        "st_global": sum(o.startswith("st.global") for o in ops),
        "f64_ops": sum(".f64" in o for o in ops),
        "local": sum(".local" in o for o in ops) + ptx.count(".local "),
        "mufu": sum(
            o.split(".")[0] in ("ex2", "lg2", "rcp", "rsqrt", "sqrt", "sin", "cos", "tanh")
            and "approx" in o
            for o in ops
        ),
        "div": sum(o.startswith("div") for o in ops),
        "ftz": sum(".ftz" in o for o in ops),
        "fma": sum(o.startswith("fma") for o in ops),
    }


# --------------------------------------------------------------------------- CuPy-like
_NV_TYPES = {"float16": "__half", "bfloat16": "bfloat16", "float32": "float", "float64": "double"}

# CuPy >= 14 types a bfloat16 ElementwiseKernel operand as its class ``bfloat16``
# (cupy/_core/include/cupy/bfloat16.cuh, included when an operand is bfloat16), a wrapper
# of __nv_bfloat16. The conversions the kernel bodies use, as CuPy defines them: from
# float, __nv_bfloat16's constructor (round to nearest even); from double, to float first
# (the CPU's bfloat16 is its float32 result rounded); to float, exact. cuda_bf16.h also
# host-compiles with g++ (``__device__`` is empty there), so g++ runs the same bodies.
CUPY_BF16 = r"""
#include <cuda_bf16.h>
class bfloat16 {
  __nv_bfloat16 data_;
 public:
  __device__ bfloat16() : data_() {}
  __device__ bfloat16(const __nv_bfloat16& v) : data_(v) {}
  __device__ bfloat16(float v) : data_(v) {}
  explicit __device__ bfloat16(double v) : data_(float(v)) {}
  __device__ operator float() const { return float(data_); }
  __device__ unsigned short to_bits() const { return __bfloat16_as_ushort(data_); }
};
"""


def _cupy_like_kernel(ks, data_dtype: str, out_dtype: str, param_arrays=False, entry=None) -> str:
    """The typedefs and ``extern "C"`` kernel CuPy generates around ``ks.body`` (no preamble)."""
    X, Y = _NV_TYPES[data_dtype], _NV_TYPES[out_dtype]
    data = [a for a in ks.args if not a.startswith("p_")]
    params = [a for a in ks.args if a.startswith("p_")]
    C = ks.compute
    args = [f"const X* __restrict__ _raw_{d}" for d in data]
    args += [
        f"const {C}* __restrict__ _raw_{p}" if param_arrays else f"const {C} {p}" for p in params
    ]
    args += ["Y* __restrict__ _raw_y", "const long long _n"]
    loads = [f"const X {d} = _raw_{d}[_i];" for d in data]
    if param_arrays:
        loads += [f"const {C} {p} = _raw_{p}[_i];" for p in params]
    return (
        f"\ntypedef {X} X;\ntypedef {Y} Y;\n"
        + f'extern "C" __global__ void {entry or ks.name}({", ".join(args)}) {{\n'
        + "  for (long long _i = (long long)blockIdx.x * blockDim.x + threadIdx.x; _i < _n;\n"
        + "       _i += (long long)blockDim.x * gridDim.x) {\n"
        + "    "
        + "\n    ".join(loads)
        + "\n"
        + "    Y y;\n"
        + f"    {ks.body}\n"
        + "    _raw_y[_i] = y;\n"
        + "  }\n}\n"
    )


def _fp16_head(*dtypes) -> str:
    return ("#include <cuda_fp16.h>\n" if "float16" in dtypes else "") + (
        CUPY_BF16 if "bfloat16" in dtypes else ""
    )


def cupy_like_source(ks, data_dtype: str, out_dtype: str, param_arrays=False) -> str:
    """``ks`` wrapped as CuPy wraps an ElementwiseKernel body (1-D, grid-stride, 64-bit)."""
    return (
        _fp16_head(data_dtype, out_dtype)
        + ks.preamble
        + _cupy_like_kernel(ks, data_dtype, out_dtype, param_arrays=param_arrays)
    )


@dataclass(frozen=True)
class ProgramKernel:
    """One kernel of :func:`cupy_like_program`: what CuPy would compile for ``ks`` with data
    of ``data_dtype``, output ``out_dtype`` and (optionally) array parameters, under the
    distinct entry name ``entry``."""

    ks: object
    data_dtype: str
    out_dtype: str
    param_arrays: bool
    entry: str


def cupy_like_program(kernels) -> str:
    """Several CuPy-wrapped kernels of one preamble as ONE NVRTC program: the preamble once,
    then each kernel exactly as :func:`cupy_like_source` wraps it (its own ``X``/``Y``
    typedefs, inside a namespace of its own so the typedefs never meet) under its distinct
    ``entry`` name. One compile instead of one per kernel: NVRTC's cost is mostly per
    program (front end, the preamble's templates, cuda_fp16.h)."""
    kernels = list(kernels)
    pre = {k.ks.preamble for k in kernels}
    assert len(pre) == 1, "cupy_like_program: kernels of different preambles"
    entries = [k.entry for k in kernels]
    assert len(set(entries)) == len(entries), "cupy_like_program: entry names must be distinct"
    dts = [d for k in kernels for d in (k.data_dtype, k.out_dtype)]
    return _fp16_head(*dts) + pre.pop() + cupy_like_kernels(kernels)


def cupy_like_kernels(kernels) -> str:
    """The kernels of :func:`cupy_like_program` without the headers and the preamble (for a
    program that holds other kernels of the same preamble too)."""
    parts = []
    for i, k in enumerate(kernels):
        parts.append(
            f"\nnamespace iglu_np_kernel_{i} {{"
            + _cupy_like_kernel(k.ks, k.data_dtype, k.out_dtype, k.param_arrays, entry=k.entry)
            + f"}}  // namespace iglu_np_kernel_{i}\n"
        )
    return "".join(parts)


# --------------------------------------------------------------------------- host g++
def gxx_status():
    gxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if gxx is None:
        return False, "no C++ compiler (g++) on PATH"
    return True, gxx


def _host_function(ks, ctype: str) -> str:
    data = [a for a in ks.args if not a.startswith("p_")]
    params = [a for a in ks.args if a.startswith("p_")]
    cname = f"{ks.name}_{ctype}"
    args = [f"const {ctype}* _raw_{a}" for a in data + params] + [f"{ctype}* _raw_y", "long _n"]
    loads = [f"const X {d} = _raw_{d}[_i];" for d in data]
    loads += [f"const {ks.compute} {p} = _raw_{p}[_i];" for p in params]
    return (
        f'extern "C" void {cname}({", ".join(args)}) {{\n'
        + "  for (long _i = 0; _i < _n; ++_i) {\n"
        + "    "
        + "\n    ".join(loads)
        + "\n"
        + "    Y y;\n"
        + f"    {ks.body}\n"
        + "    _raw_y[_i] = y;\n"
        + "  }\n}\n"
    )


def host_source(spec) -> str:
    """One translation unit: the preamble once, then per compute type and kernel kind an
    ``extern "C"`` loop around the exact CuPy body (X = Y = the compute type)."""
    parts = [cxx.preamble(spec)]
    for ct, dt in (("float", np.float32), ("double", np.float64)):
        parts.append(f"namespace host_{ct} {{\ntypedef {ct} X;\ntypedef {ct} Y;\n")
        for kind in cxx.kernel_kinds(spec):
            ks = cxx.kernel_source(spec, kind, dt)
            parts.append(_host_function(ks, ct))
        parts.append("}\n")
    return "\n".join(parts)


def host_library(spec, flags=("-O2", "-ffp-contract=off"), workdir=None):
    """Compile :func:`host_source` with g++ and load it; returns (ctypes.CDLL, compile log)."""
    return compile_host(host_source(spec), spec.name, flags, workdir)


def compile_host(src: str, stem: str, flags=("-O2", "-ffp-contract=off"), workdir=None):
    """Compile the C++ ``src`` into a shared library with g++ and load it; returns
    (ctypes.CDLL, compile log)."""
    ok, gxx = gxx_status()
    if not ok:
        raise RuntimeError(gxx)
    key = hashlib.sha256((src + repr(flags)).encode()).hexdigest()[:16]
    d = Path(workdir or tempfile.mkdtemp(prefix="iglu_np_host_"))
    cpp, so = d / f"{stem}_{key}.cpp", d / f"{stem}_{key}.so"
    cpp.write_text(src)
    r = subprocess.run(
        [
            gxx,
            "-std=c++17",
            "-shared",
            "-fPIC",
            "-Wall",
            "-Wextra",
            *flags,
            str(cpp),
            "-o",
            str(so),
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise RuntimeError(f"g++ failed:\n{r.stderr}")
    return ctypes.CDLL(str(so)), r.stderr.strip()


def host_call(lib, spec, kind, dtype, x, g=None, params=()):
    """Run the host build of kernel ``kind``: arrays broadcast to x's shape, result array."""
    dt = np.dtype(dtype)
    ct = cxx.C_TYPES[dt]
    ks = cxx.kernel_source(spec, kind, dt)
    fn = getattr(lib, f"{ks.name}_{ct}")
    x = np.ascontiguousarray(x, dtype=dt)
    arrs = [x] + (
        [np.ascontiguousarray(np.broadcast_to(g, x.shape), dtype=dt)] if g is not None else []
    )
    arrs += [
        np.ascontiguousarray(np.broadcast_to(np.asarray(p, dtype=dt), x.shape)) for p in params
    ]
    out = np.empty_like(x)
    ptr = ctypes.POINTER(ctypes.c_float if dt == np.float32 else ctypes.c_double)
    fn.argtypes = [ptr] * (len(arrs) + 1) + [ctypes.c_long]
    fn.restype = None
    fn(*[a.ctypes.data_as(ptr) for a in arrs], out.ctypes.data_as(ptr), x.size)
    return out


def assert_same_bits(got, want, what):
    """Bit for bit (NaN == NaN; the sign of zero counts)."""
    got, want = np.asarray(got).ravel(), np.asarray(want).ravel()
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    u = f"u{got.itemsize}"
    bad = np.nonzero((got.view(u) != want.view(u)) & ~(np.isnan(got) & np.isnan(want)))[0]
    assert bad.size == 0, (
        f"{what}: {bad.size} differ, first at {bad[0]}: got {got[bad[0]]!r} want {want[bad[0]]!r}"
    )


def ulp_diff(a, b) -> np.ndarray:
    """|a - b| in units of the last place of the dtype (NaN == NaN, same-sign inf == inf)."""
    a = np.asarray(a)
    b = np.asarray(b).astype(a.dtype)
    both_nan = np.isnan(a) & np.isnan(b)
    same = (a == b) | both_nan
    bits = {2: (np.int16, 0x7FFF), 4: (np.int32, 0x7FFFFFFF), 8: (np.int64, 0x7FFFFFFFFFFFFFFF)}
    ity, m = bits[a.dtype.itemsize]
    mask = np.int64(m)
    ia = a.view(ity).astype(np.int64)
    ib = b.view(ity).astype(np.int64)
    # sign-magnitude -> a monotone integer line, so differences count ulps across zero
    ia = np.where(ia < 0, -(ia & mask), ia)
    ib = np.where(ib < 0, -(ib & mask), ib)
    d = np.abs(ia - ib).astype(np.float64)
    d[same] = 0.0
    d[np.isnan(a) ^ np.isnan(b)] = np.inf
    return d


# --------------------------------------------------------------------------- cross-implementation ulp
# Where the value cancels (near a zero crossing) one rounding of a term (an FMA, a 1-ulp
# different exp) is many ulp of the small result: there the yardstick is the spec's scale
# (the magnitude of the largest term, the accuracy harness's unit), written down once per
# spec (``scales=``), not raised per activation.
def _scale_key(kind):
    if kind == "fwd":
        return "f"
    if kind in ("dx", "bwd"):
        return "dx"
    return kind.split("_", 1)[1]


def in_scale_units(spec, kind, dt, x, g, ps, got, want, d, max_ulp):
    """Where the value cancels (near a zero crossing), measure in the accuracy harness's
    unit: ulp of the spec's scale (the magnitude of the largest term), times |g| for the
    fused backward. Each implementation is within a few such ulp of the truth (that is
    what tests/accuracy.py proves), so they are within CROSS_ULP of each other, while one
    rounding of a term (an FMA, a 1-ulp different exp) is many ulp of the cancelled value.
    Only the points beyond max_ulp are re-measured (mpmath, a handful of points)."""
    sfn = spec.scales.get(_scale_key(kind))
    bad = np.nonzero(d > max_ulp)[0]
    if sfn is None or bad.size == 0:
        return d
    import mpmath

    d = d.copy()
    fmax = float(np.finfo(dt).max)
    with mpmath.workdps(40):
        pv = [mpmath.mpf(float(dt(ps[p]))) for p in spec.param_names]
        for i in bad:
            if not (np.isfinite(got[i]) and np.isfinite(want[i]) and np.isfinite(x[i])):
                continue
            sc = abs(float(sfn(mpmath.mp, mpmath.mpf(float(x[i])), *pv)))
            if g is not None:
                sc *= abs(float(g[i]))
            if not np.isfinite(sc):
                continue
            unit = max(float(np.spacing(dt(abs(want[i])))), float(np.spacing(dt(min(sc, fmax)))))
            diff = abs(mpmath.mpf(float(got[i])) - mpmath.mpf(float(want[i])))
            d[i] = min(d[i], float(diff / unit))
    return d


def sweep_points(dtype) -> np.ndarray:
    """Log-spaced +-[1e-30, 1e6], +-0, +-inf, nan, the branch edges near |x| = 1, the tails
    where exp-gated values become subnormal and then zero (|x| from 1 to 800, densely:
    float32 underflows near 87-104, float64 near 708-745), the dtype's largest values and
    subnormal inputs."""
    dt = np.dtype(dtype)
    fi = np.finfo(dt)
    mags = np.logspace(-30, 6, 2001)
    near = np.array([0.25, 0.5, 0.999, 1.0, 1.001, 2.0, 3.19, 4.0])
    tails = np.concatenate([np.linspace(1.0, 120.0, 1191), np.linspace(120.0, 800.0, 681)])
    edges = np.array(
        [
            float(fi.max),
            0.75 * float(fi.max),
            0.5 * float(fi.max),
            float(fi.tiny),
            float(fi.tiny) / 2,
            float(fi.smallest_subnormal),
        ]
    )
    pts = np.concatenate(
        [
            mags,
            -mags,
            near,
            -near,
            tails,
            -tails,
            edges,
            -edges,
            [0.0, -0.0, np.inf, -np.inf, np.nan],
        ]
    )
    with np.errstate(under="ignore"):
        return pts.astype(dt)


def global_loads_stores(ptx: str, entry: str | None = None):
    """(loads, stores) of array data in a kernel: global or generic (not param/shared/local)."""
    ops = ptx_instructions(ptx, entry)
    loads = sum(
        1
        for o in ops
        if o.startswith("ld.")
        and not o.startswith(("ld.param", "ld.local", "ld.shared", "ld.const"))
    )
    stores = sum(
        1
        for o in ops
        if o.startswith("st.") and not o.startswith(("st.param", "st.local", "st.shared"))
    )
    return loads, stores


def assert_single_pass(
    ptx: str, n_inputs: int, what: str, entry: str | None = None, n_always: int | None = None
):
    """One load per input and one store per element. The compiler may unroll the
    grid-stride loop (k copies of the body, plus a remainder), so the static counts are
    k*n_inputs loads for k stores. ``n_always``: the static counts cannot be exact (a
    parameter array read in one branch only, e.g. xIPReLU's alpha_p for x > 0; a store
    NVVM duplicates into branches, as in squareplus's d_b): then at least ``n_always``
    loads and at most ``n_inputs`` per store, which still catches a second pass over x."""
    loads, stores = global_loads_stores(ptx, entry)
    lo = n_inputs * stores if n_always is None else n_always
    assert stores >= 1 and lo <= loads <= n_inputs * stores, (
        f"{what}: {loads} loads for {stores} stores, expected {n_inputs} per store"
        + ("" if n_always is None else f" (at least {n_always})")
    )
