"""Which Numba CUDA compiler the ``numba_cuda`` backend uses.

* **numba-cuda-mlir** (``from numba_cuda_mlir import cuda``), NVIDIA's maintained successor,
  when it is installed (the ``cuda12``/``cuda13`` extras install it). It compiles plain
  ``@cuda.jit`` kernels and device functions; Numba-core extensions (intrinsics) do not
  reach it, so the backend compiles the kernels with Horner loops and CUDA's libdevice
  math there. It has no simulator and cannot compile without a GPU (version 0.6).
* **numba-cuda** (``from numba import cuda``) otherwise. In maintenance mode, and it fails
  at its first kernel compile on numpy >= 2.5 (it overloads ``numpy.row_stack``, which
  numpy 2.5 removed): :func:`check` turns that into a clear error naming the fix. It is
  what CI's no-GPU proofs use (PTX of every kernel, the CUDA simulator).

``IGLU_NP_CUDA_TOOLCHAIN=numba-cuda`` or ``=numba-cuda-mlir`` forces one.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

__all__ = ["MLIR", "NUMBA_CUDA", "choose", "check", "problem", "cuda_module"]

MLIR = "numba-cuda-mlir"
NUMBA_CUDA = "numba-cuda"
_ENV = "IGLU_NP_CUDA_TOOLCHAIN"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def choose() -> str:
    """The toolchain to use: the environment's choice, else numba-cuda-mlir where
    installed (numba-cuda under ``NUMBA_ENABLE_CUDASIM=1`` where both are: mlir has no
    simulator), else numba-cuda."""
    v = os.environ.get(_ENV, "").strip().lower()
    if v:
        if v not in (MLIR, NUMBA_CUDA):
            raise ValueError(f"{_ENV}={v!r}: expected {NUMBA_CUDA!r} or {MLIR!r}")
        return v
    if _simulator_requested() and _installed("numba_cuda"):
        return NUMBA_CUDA
    return MLIR if _installed("numba_cuda_mlir") else NUMBA_CUDA


def problem(toolchain: str | None = None) -> str | None:
    """Why the toolchain cannot compile here (a sentence naming the fix), or None."""
    toolchain = toolchain or choose()
    if toolchain == MLIR:
        if not _installed("numba_cuda_mlir"):
            return (
                f"{_ENV}={MLIR} but numba-cuda-mlir is not installed: "
                "pip install '.[cuda13]' (or '.[cuda12]') in the iglu_np checkout"
            )
        return None
    if not _installed("numba_cuda"):
        return "neither numba-cuda-mlir nor numba-cuda is installed: pip install '.[cuda13]' (or '.[cuda12]') in the iglu_np checkout"
    if not hasattr(np, "row_stack") and not _simulator_requested():
        from importlib.metadata import PackageNotFoundError, version

        try:
            ver = version("numba-cuda")
        except PackageNotFoundError:
            ver = "?"
        return (
            f"numba-cuda {ver} cannot compile kernels on numpy {np.__version__}: it overloads "
            "numpy.row_stack, which numpy 2.5 removed, and is in maintenance mode. Install its "
            "successor numba-cuda-mlir (pip install '.[cuda13]' or '.[cuda12]' in the iglu_np checkout), or use numpy<2.5"
        )
    return None


def _simulator_requested() -> bool:
    # The simulator runs kernels as Python: no compile, so no row_stack overload needed.
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def check(toolchain: str | None = None) -> str:
    """The usable toolchain, or a RuntimeError saying why not and what to install."""
    toolchain = toolchain or choose()
    why = problem(toolchain)
    if why is not None:
        raise RuntimeError(f"iglu_np numba_cuda backend: {why}")
    return toolchain


def cuda_module(toolchain: str | None = None):
    """The ``cuda`` module of the toolchain (after :func:`check`)."""
    toolchain = check(toolchain)
    if toolchain == MLIR:
        from numba_cuda_mlir import cuda

        _mlir_lower_type_call()
    else:
        from numba import cuda
    return cuda


def _mlir_lower_type_call():
    """Teach numba-cuda-mlir to lower ``T = type(x)`` for a number ``x`` (checked with
    numba-cuda-mlir 0.6: tools/mlir_ptx_check.py compiles every kernel to PTX with it).

    The kernels use ``T = type(x)`` then ``T(0.5)``. numba-cuda-mlir 0.6 types ``type(x)``
    as ``class(float32)`` and lowers ``T(...)`` from that type alone, but has no lowering
    for the ``type(x)`` call itself ("NotImplemented lowering call to <class 'type'>"). The
    value of ``T`` is never used at run time, so the lowering stores a zero of the class's
    dtype; it is dead code after MLIR's cleanup. Registered in numba-cuda-mlir's builtins
    lowering registry (an internal API: once per process, and skipped where it is gone)."""
    try:
        from numba_cuda_mlir._mlir.dialects import arith
        from numba_cuda_mlir.lowering import builtins as mlir_builtins
        from numba_cuda_mlir.numba_cuda import types
    except ImportError:
        return
    if getattr(mlir_builtins, "_iglu_np_type_call", False):
        return

    def lower_type_call(builder, target, args, kwargs):
        dtype = builder.get_numba_type(target.name).dtype
        zero = 0.0 if isinstance(dtype, types.Float) else 0
        builder.store_var(target, arith.constant(result=builder.get_mlir_type(dtype), value=zero))

    mlir_builtins.lower(type, types.Number)(lower_type_call)
    mlir_builtins._iglu_np_type_call = True
