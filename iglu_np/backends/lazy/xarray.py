"""xarray backend: ``DataArray`` in, ``DataArray`` out, coordinates and attributes kept.

Inputs are aligned and broadcast by dimension name through ``xr.apply_ufunc`` (with
``join="exact"``: mismatched indexes are an error, never a silent reindex). The wrapped
function receives the underlying arrays and calls the activation on them, so a
dask-backed ``DataArray`` stays lazy (iglu_np's dask backend builds the graph) and a
numpy-backed one runs the Numba ufuncs directly.

Parameters may be scalars, numpy arrays (broadcast positionally against ``x.data``) or
``DataArray`` (broadcast by dimension name). ``backward_params`` returns, for a
``DataArray`` parameter, a ``DataArray`` with that parameter's dims and coords; for other
parameters, an array of the parameter's shape (numpy, or dask if the data is lazy).
"""

from __future__ import annotations

import functools

import numpy as np
import xarray as xr

from ..._dtypes import unbroadcast as _unbroadcast
from .. import backward_params as _dispatch_backward_params
from .. import run as _dispatch

__all__ = ["handles", "run", "backward_params", "status"]


def handles(array) -> bool:
    return isinstance(array, xr.DataArray)


def status():
    return True, f"xarray {xr.__version__}"


def _call(act, kind, n_data, labelled, plain, *arrays):
    params = dict(plain)
    params.update(zip(labelled, arrays[n_data:]))
    return _dispatch(act, kind, arrays[:n_data], params, None)


def _apply(act, kind, data, labelled, plain):
    fn = functools.partial(_call, act, kind, len(data), tuple(labelled), plain)
    return xr.apply_ufunc(
        fn, *data, *labelled.values(), dask="allowed", keep_attrs=True, join="exact"
    )


def _split(params):
    labelled = {k: v for k, v in params.items() if isinstance(v, xr.DataArray)}
    plain = {k: v for k, v in params.items() if k not in labelled}
    return labelled, plain


def run(act, kind, data, params, out):
    if out is not None:
        raise TypeError(f"{act.name}: out= is not supported for xarray inputs")
    labelled, plain = _split(dict(params))
    return _apply(act, kind, data, labelled, plain)


def backward_params(act, data, params) -> dict:
    """Each parameter's gradient: a ``DataArray`` with a labelled parameter's dims and
    coords, else an array of the parameter's shape."""
    labelled, plain = _split(dict(params))
    if not labelled:
        # Nothing to align by name: line x and grad_out up and use the array backend's
        # own reduction (numpy or dask), which returns arrays of the parameters' shapes.
        arrs = [d for d in data if isinstance(d, xr.DataArray)]
        arrs = xr.broadcast(*xr.align(*arrs, join="exact"))
        dims = arrs[0].dims
        it = iter(a.transpose(*dims).data for a in arrs)
        plain_data = [next(it) if isinstance(d, xr.DataArray) else d for d in data]
        return _dispatch_backward_params(act, tuple(plain_data), dict(plain))
    # float16 data gives float32 gradients on numpy: sum before rounding to float16.
    data = tuple(
        d.astype(np.float32) if getattr(d, "dtype", None) == np.float16 else d for d in data
    )
    res = {}
    for p in act.param_names:
        full = _apply(act, "bwd_" + p, data, labelled, plain)
        if not isinstance(full, xr.DataArray):  # x and grad_out both unlabelled
            full = xr.DataArray(full)
        if p in labelled:
            pv = labelled[p]
            # skipna=False: a NaN gradient must propagate, as on numpy.
            # Accumulated in float64 as on numpy (a float32 sum overflows where the
            # gradient is finite), then rounded once to the compute dtype.
            with np.errstate(over="ignore"):  # beyond float32's range rounds to inf
                red = full.sum(
                    dim=[d for d in full.dims if d not in pv.dims], skipna=False, dtype=np.float64
                ).astype(full.dtype)
            red = red.transpose(*pv.dims).rename(p)
            red.attrs = {}  # x's attributes (units ...) do not describe a gradient in p
            res[p] = red
        else:
            red = _unbroadcast(full.data, np.shape(plain[p]) if p in plain else (), np.float64)
            with np.errstate(over="ignore"):
                res[p] = red.astype(full.dtype)
    return res
