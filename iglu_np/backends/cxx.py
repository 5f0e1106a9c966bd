"""The C++ side of the specs: CuPy kernel sources, built as plain strings.

Nothing here imports cupy or CUDA: the CuPy backend, the NVRTC compile checks and the
host (g++) tests all take the *same* strings from :func:`kernel_source`, so what CI
compiles and tests without a GPU is exactly what CuPy compiles on one.

A kernel is ``preamble`` (the prelude header ``iglu_np/include/iglu_np/iglu_np.cuh`` plus
the C++ that :mod:`iglu_np.backends.cxx_gen` generates from the spec's Python kernels) and
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
]

HEADER = Path(__file__).resolve().parent.parent / "include" / "iglu_np" / "iglu_np.cuh"

# NVRTC options of every kernel: the C++ is the Numba CPU code operation for operation, so
# with no FMA contraction (Numba does not contract), no flush of subnormals and IEEE
# division and square root, the GPU computes the CPU's results bit for bit. The cost is
# a few instructions per element in kernels that are memory-bound anyway.
NVRTC_OPTIONS = ("--std=c++17", "--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true")

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


def _wrapper(spec, which: str, fn) -> str:
    from .cxx_gen import function_name

    ps = spec.param_names
    sig = ", ".join(["T x", *(f"T {p}" for p in ps)])
    call = ", ".join(["x", *ps])
    return (
        f"template <class T> IGLU_NP_HOST_DEVICE T {spec.name}_{which}({sig}) {{\n"
        f"  return T({function_name(fn)}({call}));\n}}"
    )


@lru_cache(maxsize=None)
def _spec_cxx(name: str, fns: tuple) -> str:
    from .cxx_gen import TranslationError, translate

    from .._spec import REGISTRY

    spec = REGISTRY[name]
    try:
        body = translate([fn for _, fn in fns])
    except TranslationError as e:
        raise NoCxxError(f"{spec.name}: its kernels do not translate to C++ ({e})") from None
    entry = [_wrapper(spec, which, fn) for which, fn in fns]
    return (
        "namespace iglu_np {\n\n" + body + "\n\n// entry points\n" + "\n\n".join(entry)
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
    return prelude() + "\n// ---- " + spec.name + " (generated from " + spec.module + ")\n" + spec_cxx(spec)


def kernel_kinds(spec) -> list:
    """Kinds with a CuPy kernel: fwd, dx, bwd and, per parameter, d_<p> and bwd_<p>."""
    kinds = ["fwd", "dx", "bwd"]
    for p in spec.param_names:
        kinds += ["d_" + p, "bwd_" + p]
    return kinds


def _cxx_function(spec, kind: str) -> str:
    if kind in ("fwd",):
        return f"{spec.name}_fwd"
    if kind in ("dx", "bwd"):
        return f"{spec.name}_dx"
    p = kind.split("_", 1)[1]
    if p not in spec.param_names:
        raise KeyError(f"{spec.name}: no kernel kind {kind!r}")
    return f"{spec.name}_d{p}"


def kernel_name(spec, kind: str) -> str:
    """``iglu_np_<name>_<fwd|dx|d<p>|bwd|bwd<p>>`` (C linkage, so one per kind)."""
    return f"iglu_np_{spec.name}_{kind.replace('_', '')}"


def kernel_source(spec, kind: str, compute) -> KernelSource:
    """The CuPy elementwise kernel of ``kind`` computing in dtype ``compute``."""
    compute = np.dtype(compute)
    try:
        ctype = C_TYPES[compute]
    except KeyError:
        raise TypeError(f"compute dtype must be float32 or float64, got {compute}") from None
    if kind not in kernel_kinds(spec):
        raise KeyError(f"{spec.name}: no kernel kind {kind!r}; expected one of {kernel_kinds(spec)}")
    fn = _cxx_function(spec, kind)
    pnames = tuple("p_" + p for p in spec.param_names)
    data = ("x", "g") if kind.startswith("bwd") else ("x",)
    in_params = ", ".join([f"X {d}" for d in data] + [f"{compute.name} {p}" for p in pnames])
    call = f"iglu_np::{fn}<{ctype}>(" + ", ".join([f"({ctype})x", *pnames]) + ")"
    if kind.startswith("bwd"):
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
