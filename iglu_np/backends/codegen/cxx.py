"""The C++ side of the specs: CuPy kernel sources, built as plain strings.

Nothing here imports cupy or CUDA: the CuPy backend, the NVRTC compile checks and the
host (g++) tests all take the *same* strings from :func:`kernel_source`, so what CI
compiles and tests without a GPU is exactly what CuPy compiles on one.

A kernel is ``preamble`` (the prelude header ``iglu_np/include/iglu_np/iglu_np.cuh`` plus
the C++ that :mod:`iglu_np.backends.codegen.cxx_translate` generates from the spec's Python kernels) and
a one-line elementwise ``body`` such as::

    y = (Y)(iglu_np::iglu_fwd<float>((float)x, p_sigma));

with the CuPy parameter lists ``"X x, float32 p_sigma"`` / ``"Y y"``: data arrays keep
their dtype (``X``, so float16 is read as float16 and converted), parameters are passed
in the compute dtype, and the output type ``Y`` is whatever array receives the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..._kinds import BWD_ALL, Kind, kinds

__all__ = [
    "HEADER",
    "KernelSource",
    "NoCxxError",
    "prelude",
    "preamble",
    "has_cxx",
    "spec_cxx",
    "asks_float64",
    "kernel_kinds",
    "kernel_source",
    "C_TYPES",
    "NVRTC_OPTIONS",
    "vector_kernel_source",
    "fused_backward_source",
    "vector_preamble",
]

HEADER = Path(__file__).resolve().parents[2] / "include" / "iglu_np" / "iglu_np.cuh"

# NVRTC options of every kernel: the C++ is the Numba CPU code operation for operation, so
# with no FMA contraction (Numba does not contract), no flush of subnormals and IEEE
# division and square root, the GPU computes the CPU's results bit for bit. The cost is
# a few instructions per element in kernels that are memory-bound anyway.
NVRTC_OPTIONS = (
    "--std=c++17",
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
)

# numpy compute dtype -> C++ type of the template argument.
C_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


class NoCxxError(NotImplementedError):
    """The spec's Python kernels use something the C++ translator does not know."""


@dataclass(frozen=True)
class KernelSource:
    """Everything ``cupy.ElementwiseKernel(in_params, out_params, body, name, preamble=...)``
    needs, plus the parameter names in call order (``x``, optionally ``g``, then
    ``p_<param>``)."""

    name: str
    in_params: str
    out_params: str
    body: str
    preamble: str
    args: tuple
    compute: str


@lru_cache(maxsize=1)
def prelude() -> str:
    return HEADER.read_text()


def has_cxx(spec) -> bool:
    """Whether the spec's kernels translate to C++ (they all must; a test checks it)."""
    try:
        spec_cxx(spec)
    except NoCxxError:
        return False
    return True


def _wrapper(spec, which: str, fn, bulk=None) -> str:
    """``<name>_<which>``: the exact kernel, or the bulk kernel where the spec's
    ``bulk_domain`` holds (same bits there, by the spec's contract; tests/test_bulk.py)."""
    from .cxx_translate import function_name

    ps = spec.param_names
    sig = ", ".join(["T x", *(f"T {p}" for p in ps)])
    call = ", ".join(["x", *ps])
    return (
        f"template <class T> IGLU_NP_HOST_DEVICE T {spec.name}_{which}({sig}) {{\n"
        f"{_take_bulk(spec, bulk, call)}  return T({function_name(fn)}({call}));\n}}"
    )


def _take_bulk(spec, bulk, call: str) -> str:
    """The entry points' first line: the bulk kernel where ``bulk_domain`` holds ('' without)."""
    from .cxx_translate import function_name

    if bulk is None:
        return ""
    return (
        f"  if ({function_name(spec.bulk_domain)}({call})) "
        f"return T({function_name(bulk)}({call}));\n"
    )


def _prepared_wrappers(spec, which: str, prep, fn, n: int, bulk=None) -> str:
    """``<name>_<which>_prep`` (the parameter-only part, once per thread) and
    ``<name>_<which>_at`` (the kernel given it; the bulk kernel first, as ``_wrapper``)."""
    from .cxx_translate import _FIELDS, function_name

    ps = spec.param_names
    psig = ", ".join(f"T {p}" for p in ps)
    pcall = ", ".join(ps)
    call = ", ".join(["x", *ps])
    fields = ", ".join(f"pre.{_FIELDS[k]}" for k in range(n)) if n > 1 else "pre"
    return (
        f"template <class T> IGLU_NP_HOST_DEVICE auto {spec.name}_{which}_prep({psig}) {{\n"
        f"  return {function_name(prep)}({pcall});\n}}\n\n"
        f"template <class T, class P> IGLU_NP_HOST_DEVICE T {spec.name}_{which}_at("
        f"T x, {psig}, const P& pre) {{\n"
        f"{_take_bulk(spec, bulk, call)}  return T({function_name(fn)}({call}, {fields}));\n}}"
    )


def entry_suffix(which: str) -> str:
    """The C++ entry point's suffix (``<name>_fwd``, ``_dx``, ``_d<p>``) of the spec's
    kernel ``which`` (``f``, ``dx``, ``d<p>``)."""
    return "fwd" if which == "f" else which


def _kernel_key(suffix: str) -> str:
    """entry_suffix's inverse."""
    return "f" if suffix == "fwd" else suffix


def _bulk_of(spec, which: str):
    """The bulk kernel standing in for ``<name>_<which>`` (fwd, dx, d<p>), or None."""
    key = _kernel_key(which)
    return spec.bulk.get(key if key in ("f", "dx") else key[1:])


@lru_cache(maxsize=None)
def _spec_cxx(name: str, fns: tuple) -> str:
    from ..._spec import REGISTRY
    from .cxx_translate import TranslationError, translate

    spec = REGISTRY[name]
    # The bulk kernels too: on a GPU a warp whose elements are all in the bulk domain runs
    # the cheaper form alone (softplus' exact float32 forward is branch-free for the CPU's
    # SIMD, two double-word steps on every element: 3.1x the copy limit on an H200).
    bulk = [_bulk_of(spec, which) for which, _ in fns]
    extra = [b for b in bulk if b is not None] + (
        [spec.bulk_domain] if any(b is not None for b in bulk) else []
    )
    prepared = [spec.prepared_for(_kernel_key(which)) for which, _ in fns]
    extra += [g for pr in prepared if pr is not None for g in pr[:2]]
    try:
        body = translate([fn for _, fn in fns] + extra)
    except TranslationError as e:
        raise NoCxxError(f"{spec.name}: its kernels do not translate to C++ ({e})") from None
    entry = [_wrapper(spec, which, fn, b) for (which, fn), b in zip(fns, bulk)]
    entry += [
        _prepared_wrappers(spec, which, *pr, bulk=b)
        for (which, _), b, pr in zip(fns, bulk, prepared)
        if pr is not None
    ]
    return (
        "namespace iglu_np {\n\n"
        + body
        + "\n\n// entry points\n"
        + "\n\n".join(entry)
        + "\n\n}  // namespace iglu_np\n"
    )


def spec_cxx(spec) -> str:
    """The C++ generated from the spec's kernels: every function they call (translated
    from the same Python), then ``<name>_fwd``, ``<name>_dx`` and ``<name>_d<p>``."""
    k = spec.kernels()
    fns = (("fwd", k["f"]), ("dx", k["dx"]), *((f"d{p}", k["d" + p]) for p in spec.param_names))
    return _spec_cxx(spec.name, fns)


def asks_float64(spec) -> bool:
    """Whether the spec's float32 code computes in float64 on purpose (``numba.float64`` in
    its Python: the float32 hypot sums exact squares in float64 and rounds once); float32
    kernels of every other spec must hold no float64 instruction."""
    return "((double)(" in spec_cxx(spec)


def preamble(spec) -> str:
    """The prelude header followed by the spec's generated C++."""
    return (
        prelude()
        + "\n// ---- "
        + spec.name
        + " (generated from "
        + spec.module
        + ")\n"
        + spec_cxx(spec)
    )


def kernel_kinds(spec) -> list:
    """Kinds with a CuPy kernel: fwd, dx, bwd and, per parameter, d_<p> and bwd_<p>."""
    return kinds(spec.param_names)


def _cxx_function(spec, kind: str) -> str:
    try:
        k = Kind.parse(kind)
    except ValueError:
        k = None
    if k is None or (k.param is not None and k.param not in spec.param_names):
        raise KeyError(f"{spec.name}: no kernel kind {kind!r}")
    # the C++ of spec_cxx: <name>_fwd, <name>_dx, <name>_d<p>
    return f"{spec.name}_{'fwd' if k.op == 'fwd' else k.scalar}"


def kernel_name(spec, kind: str) -> str:
    """``iglu_np_<name>_<fwd|dx|d<p>|bwd|bwd<p>>`` (C linkage, so one per kind)."""
    return f"iglu_np_{spec.name}_{Kind.parse(kind).compact}"


def kernel_source(spec, kind: str, compute) -> KernelSource:
    """The CuPy elementwise kernel of ``kind`` computing in dtype ``compute``."""
    compute = np.dtype(compute)
    try:
        ctype = C_TYPES[compute]
    except KeyError:
        raise TypeError(f"compute dtype must be float32 or float64, got {compute}") from None
    if kind not in kernel_kinds(spec):
        raise KeyError(
            f"{spec.name}: no kernel kind {kind!r}; expected one of {kernel_kinds(spec)}"
        )
    fn = _cxx_function(spec, kind)
    pnames = tuple("p_" + p for p in spec.param_names)
    times_grad = Kind.parse(kind).times_grad
    data = ("x", "g") if times_grad else ("x",)
    in_params = ", ".join([f"X {d}" for d in data] + [f"{compute.name} {p}" for p in pnames])
    call = f"iglu_np::{fn}<{ctype}>(" + ", ".join([f"({ctype})x", *pnames]) + ")"
    if times_grad:
        # Same order as the CPU kernel: g * (df/dx), rounded once more.
        call = f"({ctype})g * {call}"
    return KernelSource(
        name=kernel_name(spec, kind),
        in_params=in_params,
        out_params="Y y",
        body=f"y = (Y)({call});",
        preamble=preamble(spec),
        args=data + pnames,
        compute=ctype,
    )


# --------------------------------------------------------------------------- vector kernels
# Contiguous operands with scalar parameters take a RawKernel that moves 16-byte vectors:
# an ElementwiseKernel (one element per thread, 64-bit index arithmetic per operand) runs
# at 1.7x the copy time on an H100, a float4 RawKernel at the copy time (``iglu-np bench
# --device gpu`` re-measures). Same device function and options as the ElementwiseKernel:
# same results.
VECTOR_BYTES = 16
# data dtype name -> (C++ type of the data, C++ type computed in). float16 and bfloat16
# are read, widened exactly to float, computed in float and rounded once to nearest even
# on the store (bfloat16 needs sm_80 for the one-instruction conversion; older devices
# run the header's exact integer version).
DATA_TYPES = {
    "float16": ("__half", "float"),
    "bfloat16": ("__nv_bfloat16", "float"),
    "float32": ("float", "float"),
    "float64": ("double", "double"),
}
_ITEMSIZE = {"__half": 2, "__nv_bfloat16": 2, "float": 4, "double": 8}
# the header each 16-bit data type needs
_DATA_HEADERS = {"float16": "cuda_fp16.h", "bfloat16": "cuda_bf16.h"}
# 16-bit data moves in pairs: (pair type, pair -> float2 (exact), two floats -> pair).
# The pair narrowing is cvt.rn.{f16,bf16}x2.f32 on sm_80+ (the headers' per-lane
# cvt.rn on older devices and on the host): each lane rounded to nearest even on its
# own, the first float into the low half (the lower address), as the scalar narrowing
# rounds it. Pairs keep the 128-bit vector four 32-bit registers in the PTX, so no
# build of it depends on ptxas fusing per-element conversions and halfword moves.
_PAIRS = {
    "float16": ("__half2", "__half22float2", "__floats2half2_rn"),
    "bfloat16": ("__nv_bfloat162", "__bfloat1622float2", "__floats2bfloat162_rn"),
}


def data_dtype_name(dtype):
    """The :data:`DATA_TYPES` key of a data dtype (a dtype, a type or its name:
    ``"bfloat16"`` is known by name, so ``ml_dtypes`` need not be imported), else None."""
    if isinstance(dtype, str) and dtype in DATA_TYPES:
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return None
    if dt.byteorder not in "=|":
        return None
    if dt.kind == "V" and not (dt.name == "bfloat16" and dt.itemsize == 2):
        return None
    return dt.name if dt.name in DATA_TYPES else None


def _data_types(dtype) -> tuple:
    """(name, C++ data type, C++ compute type) of a data dtype; TypeError for others."""
    name = data_dtype_name(dtype)
    if name is None:
        raise TypeError(f"data dtype must be float16, bfloat16, float32 or float64, got {dtype}")
    return (name, *DATA_TYPES[name])


def _load(name: str, ctype: str, expr: str) -> str:
    """``expr`` (one data element) as the compute type: exact for every data type."""
    if name == "bfloat16":
        return f"__bfloat162float({expr})"
    return f"({ctype}){expr}"


def _store(name: str, expr: str) -> str:
    """The compute-type value ``expr`` as the data type ``D``: one rounding to nearest
    even (``__float2bfloat16_rn`` keeps NaN NaN, +-inf and subnormals; the CPU rounds
    bfloat16 so: its float32 result cast by ml_dtypes)."""
    if name == "bfloat16":
        return f"__float2bfloat16_rn({expr})"
    return f"(D)({expr})"


@dataclass(frozen=True)
class VectorKernelSource:
    """``cupy.RawKernel(source, name, options=NVRTC_OPTIONS)``, launched as
    ``k((blocks,), (threads,), (*data, y, n, *params))`` with ``n`` an int64 and each
    parameter in the compute dtype. Every data pointer must be 16-byte aligned."""

    name: str
    source: str
    lanes: int
    n_data: int
    compute: str
    body: str  # the kernel alone: a program may hold several after one preamble


def vector_preamble(spec, data_dtype) -> str:
    """What precedes vector kernels' bodies: cuda_fp16.h for float16, cuda_bf16.h for
    bfloat16, the spec's preamble and the 16-byte vector type."""
    h = _DATA_HEADERS.get(_data_types(data_dtype)[0])
    head = f"#include <{h}>\n" if h else ""
    return head + preamble(spec) + _VEC_STRUCT


def vector_kernel_name(spec, kind: str, data_dtype) -> str:
    return f"{kernel_name(spec, kind)}_vec_{_data_types(data_dtype)[0]}"


def vector_kernel_source(spec, kind: str, data_dtype) -> VectorKernelSource:
    """The 16-byte-vector RawKernel of ``kind`` for contiguous data of ``data_dtype``
    (float16 and bfloat16 compute in float32, as the ElementwiseKernel does, and move as
    four 32-bit pairs: see :data:`_PAIRS`)."""
    ddt, dtype_c, ctype = _data_types(data_dtype)
    if kind not in kernel_kinds(spec):
        raise KeyError(
            f"{spec.name}: no kernel kind {kind!r}; expected one of {kernel_kinds(spec)}"
        )
    lanes = VECTOR_BYTES // _ITEMSIZE[dtype_c]
    fn = _cxx_function(spec, kind)
    times_grad = Kind.parse(kind).times_grad
    data = ("x", "g") if times_grad else ("x",)
    pnames = tuple("p_" + p for p in spec.param_names)
    name = vector_kernel_name(spec, kind, ddt)

    which = Kind.parse(kind).scalar
    prep = _prep_line(spec, which, ctype, pnames, "  ")

    def result(xe, ge):
        """One element's result in the compute type, its operands given in it."""
        args = [xe, *pnames]
        call = f"iglu_np::{fn}<{ctype}>(" + ", ".join(args) + ")"
        if prep:  # the parameter-only part once per thread (the spec's ``prepared``)
            call = f"iglu_np::{fn}_at<{ctype}>(" + ", ".join([*args, "pre"]) + ")"
        if times_grad:
            call = f"{ge} * {call}"
        return call

    def value(ix):
        return _store(ddt, result(_load(ddt, ctype, f"x[{ix}]"), _load(ddt, ctype, f"g[{ix}]")))

    args = [f"const D* __restrict__ {d}" for d in data] + ["D* __restrict__ y", "const long long n"]
    args += [f"const {ctype} {p}" for p in pnames]
    vloads = "".join(f"    const V {d}v = reinterpret_cast<const V*>({d})[i];\n" for d in data)
    store = "    reinterpret_cast<V*>(y)[i] = r;\n"
    if ddt in _PAIRS:
        # two elements per 32-bit pair: widened together, computed apart, narrowed together
        pair, widen, narrow = _PAIRS[ddt]
        vtype = f"typedef {pair} D2;\ntypedef iglu_np::vec<D2, {lanes // 2}> V;\n"
        vloads = "".join(_pair_load(d) for d in data)
        store = _PAIR_STORE
        wide = "".join(f"      const float2 {d}2 = {widen}({d}v.v[k]);\n" for d in data)
        loop = (
            f"    for (int k = 0; k < {lanes // 2}; ++k) {{\n{wide}"
            f"      r.v[k] = {narrow}({result('x2.x', 'g2.x')}, {result('x2.y', 'g2.y')});\n    }}\n"
        )
    else:
        lane = value("k").replace("x[k]", "xv.v[k]").replace("g[k]", "gv.v[k]")
        vtype = f"typedef iglu_np::vec<D, {lanes}> V;\n"
        loop = f"    for (int k = 0; k < {lanes}; ++k) r.v[k] = {lane};\n"
    body = (
        f"typedef {dtype_c} D;\n"
        f"{vtype}"
        f'extern "C" __global__ void {name}({", ".join(args)}) {{\n'
        f"  const long long nvec = n / {lanes};\n"
        "  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  const long long stride = (long long)blockDim.x * gridDim.x;\n"
        f"{prep}"
        "  for (long long i = tid; i < nvec; i += stride) {\n"
        f"{vloads}"
        "    V r;\n"
        "#pragma unroll\n"
        f"{loop}"
        f"{store}"
        "  }\n"
        f"  const long long t = nvec * {lanes} + tid;  // the last n % {lanes} elements\n"
        f"  if (t < n) y[t] = {value('t')};\n"
        "}\n"
    )
    body = f"\nnamespace iglu_np_vec_{name} {{\n{body}}}\n"
    src = vector_preamble(spec, ddt) + body
    return VectorKernelSource(
        name=name, source=src, lanes=lanes, n_data=len(data), compute=ctype, body=body
    )


# A vector of pairs moves as the built-in uint4 (a <4 x i32> to NVVM: one 128-bit access
# whatever the loop does; a struct of pairs may be copied field by field, as four 32-bit
# accesses) and is bit-copied to and from the pairs (register moves once compiled).
def _pair_load(d: str) -> str:
    return (
        f"    const uint4 {d}w = reinterpret_cast<const uint4*>({d})[i];\n"
        f"    V {d}v;\n"
        f"    memcpy((void*)&{d}v, &{d}w, sizeof {d}v);\n"
    )


_PAIR_STORE = (
    "    uint4 rw;\n"
    "    memcpy(&rw, (const void*)&r, sizeof rw);\n"
    "    reinterpret_cast<uint4*>(y)[i] = rw;\n"
)


def _prep_line(spec, which: str, ctype: str, pnames, ind: str, var: str = "pre") -> str:
    """The declaration of ``var`` (the spec's ``prepared`` part of kernel ``which``) for a
    kernel whose parameters are the scalars ``pnames``, or ''."""
    if spec.prepared_for(which) is None:
        return ""
    return (
        f"{ind}const auto {var} = iglu_np::{spec.name}_{entry_suffix(which)}_prep<{ctype}>"
        f"({', '.join(pnames)});\n"
    )


_VEC_STRUCT = """
namespace iglu_np {
// 16 bytes of one dtype: loaded and stored as one 128-bit access.
template <class D, int N> struct alignas(16) vec { D v[N]; };
}  // namespace iglu_np
"""


def fused_backward_source(spec, data_dtype) -> VectorKernelSource:
    """``grad_x = g * f'(x)`` and every parameter's per-thread float64 partial sum of
    ``g * df/dp`` from one read of x and g (16-byte vectors, as
    :func:`vector_kernel_source`). Launched as ``k((blocks,), (threads,), (x, g, y,
    partials, n, *params))``; ``partials`` has ``n_params * blocks * threads`` float64
    slots (parameter-major), each written once: no atomics, the same sums on every run."""
    ddt, dtype_c, ctype = _data_types(data_dtype)
    ps = spec.param_names
    if not ps:
        raise KeyError(f"{spec.name} has no parameters")
    lanes = VECTOR_BYTES // _ITEMSIZE[dtype_c]
    pnames = [f"p_{p}" for p in ps]
    name = f"iglu_np_{spec.name}_{BWD_ALL}_vec_{ddt}"

    preps = {
        w: _prep_line(spec, w, ctype, pnames, "  ", f"pre_{w}")
        for w in ("dx", *(f"d{p}" for p in ps))
    }

    def call(w, args):
        if preps[w]:  # the parameter-only part once per thread (the spec's ``prepared``)
            return f"iglu_np::{spec.name}_{w}_at<{ctype}>({args}, pre_{w})"
        return f"iglu_np::{spec.name}_{w}<{ctype}>({args})"

    def step(xv, gv, ind, j="", wide=False):
        """One element: its partials added, its grad_x as ``yi<j>`` (the data type, or
        the compute type where the operands come ``wide``, narrowed in pairs)."""
        xi, gi = f"xi{j}", f"gi{j}"
        args = ", ".join([xi, *pnames])
        lines = [
            f"{ind}const {ctype} {xi} = {xv if wide else _load(ddt, ctype, xv)};",
            f"{ind}const {ctype} {gi} = {gv if wide else _load(ddt, ctype, gv)};",
        ]
        lines += [f"{ind}acc_{p} += (double)({gi} * {call('d' + p, args)});" for p in ps]
        yi = f"{gi} * " + call("dx", args)
        lines.append(
            f"{ind}const {ctype} yi{j} = {yi};"
            if wide
            else f"{ind}const D yi{j} = {_store(ddt, yi)};"
        )
        return lines

    if ddt in _PAIRS:  # two elements per 32-bit pair, in order (see _PAIRS)
        pair, widen, narrow = _PAIRS[ddt]
        vtype = [f"typedef {pair} D2;", f"typedef iglu_np::vec<D2, {lanes // 2}> V;"]
        loop = [
            f"    for (int k = 0; k < {lanes // 2}; ++k) {{",
            f"      const float2 x2 = {widen}(xv.v[k]);",
            f"      const float2 g2 = {widen}(gv.v[k]);",
            *step("x2.x", "g2.x", "      ", "0", wide=True),
            *step("x2.y", "g2.y", "      ", "1", wide=True),
            f"      r.v[k] = {narrow}(yi0, yi1);",
            "    }",
        ]
        moves = ((_pair_load("x") + _pair_load("g")).splitlines(), _PAIR_STORE.splitlines())
    else:
        vtype = [f"typedef iglu_np::vec<D, {lanes}> V;"]
        loop = [
            f"    for (int k = 0; k < {lanes}; ++k) {{",
            *step("xv.v[k]", "gv.v[k]", "      "),
            "      r.v[k] = yi;",
            "    }",
        ]
        moves = (
            [
                "    const V xv = reinterpret_cast<const V*>(x)[i];",
                "    const V gv = reinterpret_cast<const V*>(g)[i];",
            ],
            ["    reinterpret_cast<V*>(y)[i] = r;"],
        )

    args = [
        "const D* __restrict__ x",
        "const D* __restrict__ g",
        "D* __restrict__ y",
        "double* __restrict__ partials",
        "const long long n",
        *(f"const {ctype} {p}" for p in pnames),
    ]
    body = [
        f"typedef {dtype_c} D;",
        *vtype,
        f'extern "C" __global__ void {name}({", ".join(args)}) {{',
        f"  const long long nvec = n / {lanes};",
        "  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
        "  const long long stride = (long long)blockDim.x * gridDim.x;",
        *(f"  double acc_{p} = 0.0;" for p in ps),
        *(line.rstrip("\n") for line in preps.values() if line),
        "  for (long long i = tid; i < nvec; i += stride) {",
        *moves[0],
        "    V r;",
        "#pragma unroll",
        *loop,
        *moves[1],
        "  }",
        f"  const long long t = nvec * {lanes} + tid;  // the last n % {lanes} elements",
        "  if (t < n) {",
        *step("x[t]", "g[t]", "    "),
        "    y[t] = yi;",
        "  }",
        *(f"  partials[{k} * stride + tid] = acc_{p};" for k, p in enumerate(ps)),
        "}",
    ]
    body = f"\nnamespace iglu_np_vec_{name} {{\n" + "\n".join(body) + "\n}\n"
    return VectorKernelSource(
        name=name,
        source=vector_preamble(spec, ddt) + body,
        lanes=lanes,
        n_data=2,
        compute=ctype,
        body=body,
    )
