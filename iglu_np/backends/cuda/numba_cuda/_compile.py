"""Kernels compiled from the generated source: cuda.jit per signature, the raw-pointer
vector kernels of the thin path, PTX for a target with no GPU, the cast kernel."""

from __future__ import annotations

import numpy as np

from ...._kinds import BWD_ALL, Kind
from ...._spec import REGISTRY
from . import _discovery
from ._discovery import SIM_THREADS, THREADS, _lock, _state
from ._sources import _bind, _source_all, kernel_python


def _kernel_all(name, compute, ndim):
    """The jitted one-pass backward kernel (:func:`_source_all`)."""
    key = (BWD_ALL, name, np.dtype(compute).name, ndim)
    k = _state.get(key)
    if k is None:
        with _lock:
            k = _state.get(key)
            if k is None:
                spec = REGISTRY[name]
                cuda = _discovery._cuda()
                fname, src = _source_all(spec, ndim)
                g = {
                    "cuda": cuda,
                    "_COMPUTE": np.dtype(compute).type,
                    "_ACC": np.float64,
                    "_BLOCK": SIM_THREADS if _discovery.simulator() else THREADS,
                }
                scal = (False,) * len(spec.params)
                _bind(g, spec, "dx", scal, "_fn", "_prep")
                for j, p in enumerate(spec.param_names):
                    _bind(g, spec, "d" + p, scal, f"_fd{j}", f"_prepd{j}")
                exec(compile(src, f"<iglu_np.backends.cuda.numba_cuda {fname}>", "exec"), g)
                g[fname].__iglu_np_source__ = src
                k = _state[key] = cuda.jit(g[fname])
    return k


def _kernel(name, kind, compute, arrays, ndim, scalar_sum=None, vector=None):
    key = ("jit", name, kind, np.dtype(compute).name, tuple(arrays), ndim, scalar_sum, vector)
    k = _state.get(key)
    if k is None:
        with _lock:
            k = _state.get(key)
            if k is None:
                py = kernel_python(name, kind, compute, arrays, ndim, scalar_sum, vector)
                k = _state[key] = _discovery._cuda().jit(py)
    return k


def _types():
    """The toolchain's type module (numba-cuda-mlir has its own type objects)."""
    if _discovery._mlir():
        return _discovery._cuda().types
    from numba.core import types

    return types


def pointer_signature(name, kind, compute, data_dtype=None):
    """Signature of the vector form on raw pointers: ``(n, x[, g], *params, out)`` with
    ``n`` int64, data and output pointers of ``data_dtype`` (default: the compute dtype)
    and compute-dtype scalar parameters, in the toolchain's own types."""
    types = _types()
    spec = REGISTRY[name]
    ct = getattr(types, np.dtype(compute).name)
    ptr = types.CPointer(getattr(types, np.dtype(data_dtype or compute).name))
    data = [ptr, ptr] if Kind.parse(kind).times_grad else [ptr]
    return types.void(types.int64, *data, *([ct] * len(spec.params)), ptr)


def _pointer_kernel(name, kind, compute, data_dtype):
    """The vector form compiled for :func:`pointer_signature` alone: a launch passes
    integers for the arrays and the dispatcher has no types to resolve (one signature
    makes it a specialised dispatcher in numba-cuda and numba-cuda-mlir)."""
    key = ("ptr", name, kind, np.dtype(compute).name, np.dtype(data_dtype).name)
    k = _state.get(key)
    if k is None:
        with _lock:
            k = _state.get(key)
            if k is None:
                spec = REGISTRY[name]
                py = kernel_python(
                    name, kind, compute, (False,) * len(spec.params), 1, None, data_dtype
                )
                k = _state[key] = _discovery._cuda().jit(
                    pointer_signature(name, kind, compute, data_dtype)
                )(py)
    return k


def signature(name, kind, dtype, arrays=None, ndim=1, data_dtype=None, scalar_sum=None):
    """Numba signature of a kernel for :func:`compile_ptx`: contiguous data and output of
    ``data_dtype`` (default: the compute dtype), broadcast ('A') parameter arrays."""
    from numba.core import types
    from numba.np.numpy_support import from_dtype

    spec = REGISTRY[name]
    cdt = np.dtype(dtype)
    ddt = np.dtype(data_dtype or cdt)
    arrays = tuple(arrays or (False,) * len(spec.params))
    ct = from_dtype(cdt)
    dt = from_dtype(ddt)
    lay = "C" if ndim == 1 else "A"
    args = [types.int64, types.Array(dt, ndim, lay)]
    kd = Kind.parse(kind)
    if kd.times_grad:
        args.append(types.Array(dt, ndim, lay))
    args += [types.Array(ct, ndim, "A") if a else ct for a in arrays]
    if kd.op == "sum":
        k = spec.param_names.index(kd.param)
        ss = (not arrays[k]) if scalar_sum is None else scalar_sum
        args.append(
            types.Array(types.float64, 1, "C") if ss else types.Array(types.float64, ndim, "A")
        )
    else:
        args.append(types.Array(dt, ndim, lay))
    return types.void(*args)


def compile_ptx(
    name, kind, dtype, cc=(9, 0), arrays=None, ndim=1, data_dtype=None, vector=False, pointers=False
):
    """PTX of a kernel for compute capability ``cc``; works without a GPU with numba-cuda
    (and its NVVM wheel, e.g. ``numba-cuda[cu13]``). Its signatures are Numba-core types,
    which numba-cuda-mlir does not take (and 0.6 needs a GPU to compile anyway).
    ``vector``: the vector form (1-D C-contiguous arrays, or raw pointers with
    ``pointers``: what a launch of :func:`_pointer_kernel` runs)."""
    if _discovery._mlir():
        raise RuntimeError(
            "compile_ptx needs numba-cuda (IGLU_NP_CUDA_TOOLCHAIN=numba-cuda): "
            "numba-cuda-mlir takes its own signature types and needs a GPU"
        )
    cuda = _discovery._cuda()
    if vector:
        ddt = np.dtype(data_dtype or dtype)
        py = kernel_python(name, kind, dtype, arrays, 1, None, ddt)
        sig = (
            pointer_signature(name, kind, dtype, ddt)
            if pointers
            else signature(name, kind, dtype, arrays, 1, ddt)
        )
    else:
        py = kernel_python(name, kind, dtype, arrays, ndim)
        sig = signature(name, kind, dtype, arrays, ndim, data_dtype)
    with offline_device(cc):
        ptx, _ = cuda.compile_ptx(py, sig, cc=cc)
    return ptx


class offline_device:
    """Device functions compile on first call for the current device's compute capability
    (numba-cuda's ``compile_device``); without a GPU there is none, so for an offline
    :func:`compile_ptx` the dispatcher module sees a stand-in with ``cc``."""

    def __init__(self, cc):
        self.cc = tuple(cc)

    def __enter__(self):
        from numba.cuda import dispatcher

        self._mod, self._orig = dispatcher, dispatcher.get_current_device
        cc = self.cc

        def current():
            try:
                return self._orig()
            except Exception:
                return type("OfflineDevice", (), {"compute_capability": cc})()

        dispatcher.get_current_device = current

    def __exit__(self, *exc):
        self._mod.get_current_device = self._orig


_CAST_SRC = """
def iglu_np_cast(src, dst):
    i = cuda.grid(1)
    while i < src.shape[0]:
        dst[i] = src[i]
        i += cuda.gridsize(1)
"""


def _cast_kernel():
    k = _state.get("cast")
    if k is None:
        cuda = _discovery._cuda()
        # ``cuda`` must be a module global (not a closure cell) for the simulator to swap it.
        g = {"cuda": cuda}
        exec(compile(_CAST_SRC, "<iglu_np.backends.cuda.numba_cuda cast>", "exec"), g)
        k = _state["cast"] = cuda.jit(g["iglu_np_cast"])
    return k
