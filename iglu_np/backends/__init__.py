"""The dispatcher: every call of an activation reaches a backend through here.

:func:`run` (a kernel kind: "fwd", "dx", "bwd", "d_<param>", "bwd_<param>"),
:func:`backward_params` and :func:`backward_all` take the activation's
:class:`iglu_np._params.Params`, the data (x, or x and grad_out), the keyword parameters
(unvalidated, ``backend=`` among them) and ``out``. They try the thin path registered
for the first operand's type first (numpy arrays' is the CPU's: the common case), then
turn memoryviews and pandas objects into arrays (a pandas result gets its index back), pick the backend (the ``backend=`` keyword,
else the first operand that is not a host value: :func:`detect`) and hand it the call.

Backends register in :data:`BACKENDS` by name with the module that implements them; each
module provides

* ``handles(array) -> bool``: whether an input array belongs to this backend;
* ``run(act, kind, data, params, out)``: compute kernel ``kind`` of ``act`` (a
  :class:`~iglu_np._params.Params`) on the tuple ``data`` with the keyword ``params``
  (validated by the backend: :func:`iglu_np._params.values`);
* ``backward_params(act, data, params) -> dict``: each parameter's gradient of
  ``sum(grad_out * f(x))``, reduced to the parameter's shape;
* optionally ``backward_all(act, data, params, out)``: grad_x and the parameter gradients
  from one pass, or None where that does not apply;
* optionally ``fast_path(array)``: a thin per-call path for arrays of ``type(array)``,
  ``(run, backward_all)`` (either may be None) with the signatures above, each returning
  None where the backend's general ``run`` / ``backward_all`` must decide; or None. The
  dispatcher asks once per array type (numpy arrays' at import, any other type at the
  first call the backend handles) and then tries it before anything else for a first
  operand of that type (:data:`_FAST`);
* ``status() -> (usable, detail)`` for ``iglu-np info``.

Backends import neither :mod:`iglu_np._api` nor one another's privates; dask and xarray
call back into this dispatcher for their chunks. Modules other than the CPU's are imported
only when an array that is not a host array shows up (or ``backend=`` names them), so
importing iglu_np never imports cupy, numba.cuda or dask.
"""

from __future__ import annotations

import importlib

import numpy as np

from .cpu import backend as cpu_backend
from .cpu.backend import HOST_TYPES as _HOST_TYPES

# name -> module; order matters for detection (first match wins).
BACKENDS = {
    "cpu": "iglu_np.backends.cpu.backend",
    # torch/JAX/__dlpack__ arrays on the CPU through the CPU kernels, returned as their type
    "host_array": "iglu_np.backends.host_arrays",
    "cupy": "iglu_np.backends.cuda.cupy",
    # torch/JAX/... CUDA arrays through the CuPy kernels when cupy is there, else Numba CUDA
    "cuda_array": "iglu_np.backends.cuda.device_arrays",
    "numba_cuda": "iglu_np.backends.cuda.numba_cuda",
    "dask": "iglu_np.backends.lazy.dask",
    "xarray": "iglu_np.backends.lazy.xarray",
}

# What each route takes, for ``iglu-np info`` (:func:`array_types`).
_ARRAY_TYPES = (
    (
        (
            "numpy arrays and scalars, Python numbers, lists, memoryviews; pandas Series and "
            "DataFrames (returned with their index)"
        ),
        "cpu",
    ),
    (
        (
            "torch CPU tensors, JAX CPU arrays, any __dlpack__ array on the CPU (array-api-strict, "
            "...): zero-copy, returned as their own type"
        ),
        "host_array",
    ),
    ("CuPy arrays", "cupy"),
    (
        "torch/JAX CUDA arrays, __cuda_array_interface__ or CUDA __dlpack__ arrays",
        "cuda_array with CuPy, else numba_cuda",
    ),
    ("Numba CUDA device arrays", "numba_cuda"),
    ("dask arrays (lazy, per chunk)", "dask"),
    ("xarray DataArrays (coordinates kept)", "xarray"),
)

_loaded = {"cpu": cpu_backend}
# type of the first operand -> (backend name, thin run or None, thin backward_all or None),
# from the backend's fast_path; a type whose backend has none maps to (name, None, None).
_FAST: dict = {np.ndarray: ("cpu", *cpu_backend.fast_path(np.empty(0)))}


def _module(name):
    m = _loaded.get(name)
    if m is None:
        try:
            path = BACKENDS[name]
        except KeyError:
            raise ValueError(
                f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}"
            ) from None
        m = _loaded[name] = importlib.import_module(path)
    return m


def detect(array) -> str:
    """Name of the backend for ``array`` (TypeError when none handles it)."""
    for name in BACKENDS:
        try:
            m = _module(name)
        except ImportError:
            continue
        if m.handles(array):
            return name
    raise TypeError(
        f"unsupported input type {type(array).__module__}.{type(array).__name__}"
        "; expected a numpy array, a scalar, a CPU array with __dlpack__ (torch, JAX, ...) "
        "or an array type of a GPU/dask backend (iglu-np info lists them)"
    )


def array_types() -> list:
    """``[(array types, backend)]``: the inputs a call accepts and the backend that computes
    each (the first operand that is not a host value chooses)."""
    return list(_ARRAY_TYPES)


def ufunc(name: str, kind: str) -> np.ufunc:
    """The raw numpy ufunc of kernel ``kind`` of activation ``name`` (the CPU backend's)."""
    return cpu_backend.ufunc(name, kind)


# --------------------------------------------------------------------------- operands
def _pandas_kind(v):
    """'series' / 'frame' for a pandas Series / DataFrame (pandas is never imported)."""
    t = type(v)
    if not t.__module__.startswith("pandas"):
        return None
    for c in t.__mro__:
        if c.__name__ == "Series":
            return "series"
        if c.__name__ == "DataFrame":
            return "frame"
    return None


def _array_like(d) -> bool:
    return type(d) is memoryview or _pandas_kind(d) is not None


def _rewrap(like, r):
    pd = __import__(type(like).__module__.split(".")[0])
    if _pandas_kind(like) == "series":
        return pd.Series(r, index=like.index, name=like.name)
    return pd.DataFrame(r, index=like.index, columns=like.columns)


def _choose(act, data, params) -> str:
    """The backend= keyword (popped from ``params``, checked, named in the error) or the
    backend of the first operand that is not a host value (the CPU when all are)."""
    b = params.pop("backend", None)
    if b is not None:
        if b not in BACKENDS:
            raise ValueError(
                f"{act.name}: unknown backend={b!r}; expected one of {', '.join(BACKENDS)}"
            )
        return b
    for d in data:
        if not isinstance(d, _HOST_TYPES):
            try:
                return detect(d)
            except TypeError as e:
                raise TypeError(f"{act.name}: {e}") from None
    return "cpu"


# --------------------------------------------------------------------------- dispatch
def run(act, kind, data, params, out):
    """Kernel ``kind`` of ``act`` on ``data`` on the backend the operands (or
    ``backend=``) choose."""
    f = _FAST.get(type(data[0]))
    if f is not None and f[1] is not None:
        if "backend" not in params:
            r = f[1](act, kind, data, params, out)
            if r is not None:
                return r
        elif params["backend"] == f[0]:
            q = dict(params)
            del q["backend"]
            r = f[1](act, kind, data, q, out)
            if r is not None:
                return r
    if type(data[0]) is memoryview or (len(data) == 2 and type(data[1]) is memoryview):
        data = tuple(np.asarray(d) if type(d) is memoryview else d for d in data)
    like = None
    for d in data:
        if _pandas_kind(d) is not None:
            like = d
            break
    if like is not None:
        # numpy's ufuncs on pandas objects: compute on the values, return the same
        # type with the first pandas operand's index (and name / columns).
        data = tuple(np.asarray(d) if _pandas_kind(d) else d for d in data)
        r = run(act, kind, data, params, out)
        return out if out is not None else _rewrap(like, r)
    return _backend(act, data, params).run(act, kind, data, params, out)


def _backend(act, data, params):
    """The module of the backend :func:`_choose` picks; the first operand's type gets its
    entry in :data:`_FAST` on the way."""
    m = _module(_choose(act, data, params))
    d = data[0]
    if type(d) not in _FAST and not isinstance(d, _HOST_TYPES):
        _note_fast(d)
    return m


def _note_fast(d):
    """``_FAST[type(d)]``: the thin paths of the backend :func:`detect` gives ``d`` (not the
    ``backend=`` keyword's: the entry serves every later call on that type)."""
    try:
        name = detect(d)
    except TypeError:
        return
    fp = getattr(_module(name), "fast_path", None)
    paths = fp(d) if fp is not None else None
    _FAST[type(d)] = (name, *(paths or (None, None)))


def backward_params(act, data, params) -> dict:
    """Each parameter's gradient of ``sum(grad_out * f(x))``, reduced to its shape."""
    if type(data[0]) is not np.ndarray or type(data[1]) is not np.ndarray:
        # memoryviews and pandas objects: their values (the result is shaped like the
        # parameters, so there is no index to keep)
        data = tuple(np.asarray(d) if _array_like(d) else d for d in data)
    return _module(_choose(act, data, params)).backward_params(act, data, params)


def backward_all(act, data, params, out) -> tuple:
    """``(grad_x, grads)``: the backend's one-pass version where it has one and it
    applies, else :func:`run` of "bwd" and :func:`backward_params`, with the same
    results."""
    f = _FAST.get(type(data[0]))
    if f is not None and f[2] is not None:
        b = params.get("backend")
        if b is None or b == f[0]:
            q = dict(params)
            q.pop("backend", None)
            r = f[2](act, data, q, out)
            if r is not None:
                return r
    if not any(_array_like(d) for d in data):  # array-likes: two passes (pandas keeps its index)
        q = dict(params)
        fused = getattr(_backend(act, data, q), "backward_all", None)
        if fused is not None:
            res = fused(act, data, q, out)
            if res is not None:
                return res
    # numpy's semantics: every operand is read before out is written, so the parameter
    # gradients come first (out may be grad_out itself, also in memory no overlap check
    # sees: torch or Numba device arrays).
    gp = backward_params(act, data, dict(params))
    return run(act, "bwd", data, dict(params), out), gp
