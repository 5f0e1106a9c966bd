"""Dask backend: activations on ``dask.array.Array`` inputs, lazily, chunk by chunk.

Every call builds one ``blockwise`` layer whose tasks call the activation itself on each
chunk, so a chunk goes through the same dispatch as a plain array: numpy chunks run the
Numba ufuncs, cupy chunks the GPU backend. Nothing is computed when the graph is built;
dtype, shape, chunks and the array type of the chunks (``_meta``) are derived from the
inputs.

* Parameters may be scalars, numpy arrays or dask arrays; arrays broadcast against the
  data like numpy arrays and are rechunked to line up with it (a per-row ``sigma`` of
  shape ``(n, 1)`` is split along the row chunks of ``x``).
* Scalar and numpy parameters are validated when the graph is built; dask parameters
  cannot be inspected without computing them, so their domain check runs inside each
  task (and raises when the result is computed).
* ``backward_params`` sums the elementwise gradients with dask reductions (in float64,
  rounded once to the result dtype), so the result is a lazy array of each parameter's
  shape.
* Each task runs its kernel on one Numba thread (:data:`CHUNK_THREADS`): the parallelism
  comes from Dask's workers and threads, not from nested thread pools.

Everything a task carries pickles (activations pickle by name, the chunk function is a
module-level function), so graphs run on ``dask.distributed`` worker processes; each
worker compiles the kernels or loads them from Numba's on-disk cache.
"""

from __future__ import annotations

import functools
import numbers

import dask
import dask.array as da
import numba
import numpy as np
from dask.array.core import broadcast_shapes, handle_out
from dask.array.utils import meta_from_array
from dask.base import tokenize

from ..._dtypes import F16 as _F16
from ..._dtypes import F32 as _F32
from ..._dtypes import F64 as _F64
from ..._dtypes import all_half as _all_half
from ..._dtypes import dtype_of as _dtype_of
from ..._params import check as _check
from ..._params import unexpected as _unexpected
from ..._params import values as _values
from .. import run as _dispatch
from .._call import unwrap_out

__all__ = ["handles", "run", "backward_params", "status", "CHUNK_THREADS"]

#: Numba threads per chunk task (raise it for a scheduler with fewer threads than cores).
CHUNK_THREADS = 1


def handles(array) -> bool:
    return isinstance(array, da.Array)


def status():
    detail = f"dask {dask.__version__}"
    try:
        import distributed

        detail += f", distributed {distributed.__version__}"
    except ImportError:
        detail += " (distributed not installed: local schedulers only)"
    return True, detail


def _chunk(act, kind, n_data, array_names, scalars, *blocks):
    """One task: the activation on one chunk of each input (module level so it pickles)."""
    params = dict(scalars)
    params.update(zip(array_names, blocks[n_data:]))
    # Dask already runs one task per core: the CPU fast path's own prange threads would
    # oversubscribe the cores, so each task runs its kernel on its own thread
    # (numba's thread count is thread-local; restored afterwards).
    prev = numba.get_num_threads()
    if prev != CHUNK_THREADS:
        numba.set_num_threads(CHUNK_THREADS)
    try:
        return _dispatch(act, kind, blocks[:n_data], params, None)
    finally:
        if prev != CHUNK_THREADS:
            numba.set_num_threads(prev)


def _as_dask(v):
    return v if isinstance(v, da.Array) else da.asarray(v)


def _split_params(act, params: dict):
    """Validate what can be validated now; split into scalars (bound into every task) and
    arrays (chunked alongside the data)."""
    names = act.param_names
    for k in params:
        if k not in names:
            raise _unexpected(act, k)
    lazy = {k: v for k, v in params.items() if isinstance(v, da.Array)}
    eager = {k: v for k, v in params.items() if k not in lazy}
    for k, v in lazy.items():
        if v.dtype.kind not in "fiub":
            raise TypeError(
                f"{act.name}: parameter {k} must be a real number or real array, got dtype {v.dtype}"
            )
    if lazy:
        # The cross-parameter check needs every value; with a lazy one it runs per task.
        eager = {k: _check(act, act.by_name[k], v) for k, v in eager.items()}
    elif eager:
        vals = _values(act, eager)
        eager = {k: vals[names.index(k)] for k in eager}
    scalars, arrays = {}, {}
    for k, v in eager.items():
        if isinstance(v, numbers.Number) or np.ndim(v) == 0:
            scalars[k] = v
        else:
            arrays[k] = da.asarray(v)
    arrays.update(lazy)
    return scalars, arrays


def _out_dtype(act, data, upcast_half: bool) -> np.dtype:
    cdt = None
    for nm, d in zip(("x", "grad_out"), data):
        dt = _dtype_of(act.name, nm, d)
        cdt = dt if cdt is None else np.promote_types(cdt, dt)
    if not upcast_half and cdt == _F32 and _all_half(data):
        return _F16
    return cdt


def _align(a, ref):
    """Rechunk ``a`` to ``ref``'s chunks along the axes they share, so the chunking of x
    wins (blockwise would otherwise refine both to the common, smaller chunks)."""
    if a is ref:
        return a
    chunks = list(a.chunks)
    for i in range(a.ndim):
        j = ref.ndim - a.ndim + i
        if j >= 0 and a.shape[i] == ref.shape[j] and a.shape[i] != 1:
            chunks[i] = ref.chunks[j]
    chunks = tuple(chunks)
    return a if chunks == a.chunks else a.rechunk(chunks)


def _elementwise(act, kind, data, scalars, arrays, dtype):
    args = [_align(a, data[0]) for a in list(data) + list(arrays.values())]
    try:
        shape = broadcast_shapes(*(a.shape for a in args))
    except ValueError:
        raise ValueError(
            f"{act.name}: shapes do not broadcast: "
            + ", ".join(f"{n}{tuple(a.shape)}" for n, a in zip(_arg_names(data, arrays), args))
        ) from None
    ndim = len(shape)
    out_ind = tuple(range(ndim))[::-1]
    pairs = []
    for a in args:
        pairs += [a, tuple(range(a.ndim))[::-1]]
    fn = functools.partial(_chunk, act, kind, len(data), tuple(arrays), scalars)
    token = tokenize(act.name, kind, scalars, *args)
    return da.blockwise(
        fn,
        out_ind,
        *pairs,
        dtype=dtype,
        meta=meta_from_array(data[0], ndim=ndim, dtype=dtype),
        name=f"iglu_np-{act.name}-{kind}-{token}",
    )


def _arg_names(data, arrays):
    return ["x", "grad_out"][: len(data)] + list(arrays)


def run(act, kind, data, params, out):
    data = tuple(_as_dask(d) for d in data)
    scalars, arrays = _split_params(act, dict(params))
    res = _elementwise(act, kind, data, scalars, arrays, _out_dtype(act, data, False))
    if out is None:
        return res
    out = unwrap_out(act.name, out)
    if not isinstance(out, da.Array):
        # Writing into a host array would force a compute; keep the call lazy.
        raise TypeError(
            f"{act.name}: with dask inputs out= must be a dask array, got {type(out).__name__}"
        )
    return handle_out(out, res)


def backward_params(act, data, params) -> dict:
    """Each parameter's gradient as a lazy dask array of the parameter's shape."""
    data = tuple(_as_dask(d) for d in data)
    scalars, arrays = _split_params(act, dict(params))
    # Same precision as the numpy path: float16 inputs give float32 gradients there,
    # because the elementwise products are summed before any rounding back to float16.
    dtype = _out_dtype(act, data, True)
    if dtype == _F32:
        data = tuple(d.astype(_F32) if d.dtype == _F16 else d for d in data)
    res = {}
    for p in act.param_names:
        full = _elementwise(act, "bwd_" + p, data, scalars, arrays, dtype)
        pshape = arrays[p].shape if p in arrays else ()
        res[p] = _reduce_to(full, tuple(pshape), dtype)
    return res


def _reduce_to(a, shape, dtype):
    """Sum ``a`` down to ``shape`` (undo broadcasting), accumulating in float64 like the
    CPU path's scalar reductions, then round once to ``dtype``."""
    nlead = a.ndim - len(shape)
    axes = list(range(nlead))
    axes += [nlead + i for i, n in enumerate(shape) if n == 1 and a.shape[nlead + i] != 1]
    if not axes:
        return a.reshape(shape)
    r = a.sum(axis=tuple(axes), keepdims=True, dtype=_F64)
    return r.reshape(shape).astype(dtype)
