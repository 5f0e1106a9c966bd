"""Backends and dispatch by array type.

``cpu`` (Numba ufuncs, always available) is handled inline by :mod:`iglu_np._api`. Other
backends register here by name with the module that implements them; each module
provides

* ``handles(array) -> bool``: whether an input array belongs to this backend, and
* ``run(act, kind, data, params, out)``: compute kernel ``kind`` ("fwd", "dx", "bwd",
  "d_<param>", or "backward_params") of activation ``act`` (an
  :class:`iglu_np.Activation`) on the tuple ``data`` (x, or x and grad_out) with the
  keyword ``params`` (unvalidated: call ``act._param_values(params)``);
* optionally ``backward_all(act, data, params, out)``: grad_x and the parameter gradients
  from one pass, or None where that does not apply.

Modules are imported only when an array that is not a host array shows up, so importing
iglu_np never imports cupy, numba.cuda or dask.
"""
from __future__ import annotations

import importlib

# name -> module; order matters for detection (first match wins).
BACKENDS = {
    "cupy": "iglu_np.backends.cupy_backend",
    # torch/JAX/... CUDA arrays through the CuPy kernels when cupy is there, else Numba CUDA
    "cuda_array": "iglu_np.backends.cuda_array",
    "numba_cuda": "iglu_np.backends.numba_cuda",
    "dask": "iglu_np.backends.dask_backend",
    "xarray": "iglu_np.backends.xarray_backend",
}


def _module(name):
    try:
        path = BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"unknown backend {name!r}; expected 'cpu' or one of {', '.join(BACKENDS)}"
        ) from None
    return importlib.import_module(path)


def detect(array) -> str:
    """Name of the backend for a non-numpy ``array`` (TypeError when none handles it)."""
    for name in BACKENDS:
        try:
            m = _module(name)
        except ImportError:
            continue
        if m.handles(array):
            return name
    raise TypeError(
        f"unsupported input type {type(array).__module__}.{type(array).__name__}"
        "; expected a numpy array, a scalar, or an array type of a GPU/dask backend"
    )


def run(name, act, kind, data, params, out):
    return _module(name).run(act, kind, data, params, out)


def run_backward_all(name, act, data, params, out):
    """The backend's one-pass ``(grad_x, grads)`` (``backward_all(act, data, params,
    out)``), or None where it has none or it does not apply (the caller then runs
    ``bwd`` and ``backward_params``)."""
    fn = getattr(_module(name), "backward_all", None)
    return None if fn is None else fn(act, data, params, out)
