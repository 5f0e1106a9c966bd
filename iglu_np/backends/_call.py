"""One call's operands, prepared once for every backend (:func:`prepare`).

The dtype rules (:mod:`iglu_np._dtypes`), the parameters' domain checks
(:func:`iglu_np._params.values`), the float32 split, the broadcast shape and the ``out=``
checks are the same on every target; what differs is how an operand is taken (numpy
values on the CPU, CuPy or Numba device arrays on a GPU), which a :class:`Target` says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .._dtypes import (
    F32,
    F64,
    dtype_of,
    f32_range_error,
    f32_split,
    is_bf16,
    narrow_result,
    widened,
)
from .._params import values as _values

__all__ = ["DATA_NAMES", "Call", "Target", "prepare", "unwrap_out"]

DATA_NAMES = ("x", "grad_out")
_WEAK = (float, int, bool)


class Target(NamedTuple):
    """How a backend takes a call's operands (the hooks :func:`prepare` calls)."""

    name: str  # the backend's name in messages
    data: Callable | None = None  # operand -> the backend's data operand; None: as given
    device: Callable | None = None  # an operand on this device? (data must be; None: host)
    host_hint: str = ""  # how to move host data there (in the error for host data)
    device_param: Callable | None = None  # device parameter -> (operand, host copy)
    param: Callable | None = None  # (value, device operand or None, dtype) -> kernel argument
    out: Callable | None = None  # out= -> its operand form (None: out= as given)
    out_what: str = "a numpy array"  # what out= must be (in its TypeError)
    widen: bool = True  # float32 with a parameter beyond float32 computes in float64
    broadcast: bool = True  # compute the broadcast shape and check out='s shape


class Call(NamedTuple):
    """A call's operands: built once by :func:`prepare`, read by the backend."""

    data: tuple  # x (and grad_out) as the target takes them
    result: np.dtype  # the dtype the data promote to (float32 for 16-bit data)
    compute: np.dtype  # result, or float64 for a parameter beyond float32 (widened)
    output: np.dtype  # the returned dtype: float16/bfloat16 for 16-bit data, else result
    values: list  # the validated parameter values (host scalars or numpy arrays)
    params: tuple  # the parameters as kernel arguments, in the compute dtype
    arrays: tuple  # per parameter, whether its argument is an array
    shape: tuple | None  # the broadcast shape (None: the target's ufuncs broadcast)
    split: Any  # _dtypes.f32_split's (mask, safe) where compute != result, else None
    out: Any  # out= unwrapped from its 1-tuple and checked, or None
    out_operand: Any  # out= as the target takes it, or None


def unwrap_out(name: str, out):
    """``out=`` as one array: a 1-tuple unwrapped (numpy's ufunc form), ValueError for a
    longer tuple."""
    if isinstance(out, tuple):
        if len(out) != 1:
            raise ValueError(f"{name}: out= must be one array")
        out = out[0]
    return out


_HOST = Target("cpu")


def prepare(act, data, params, out=None, target: Target = _HOST) -> Call:
    """The :class:`Call` of ``act`` on ``data`` (x, or x and grad_out) with ``params``
    (name -> value) and ``out``, or the error a bad operand gets: host data on a device
    target (TypeError), an unsupported dtype (TypeError), a parameter outside its domain
    (ValueError), operands that do not broadcast (ValueError), an out= that is not one
    writable floating array of the target's kind and of the broadcast shape."""
    name = act.name
    dev = target.device
    if dev is not None:
        for nm, d in zip(DATA_NAMES, data):
            if not dev(d):
                raise TypeError(
                    f"{name}: {nm} is a host {type(d).__name__} but the {target.name} backend "
                    f"needs device arrays for x and grad_out ({target.host_hint}); parameters "
                    "may be host values"
                )
    if target.data is not None:
        data = tuple(target.data(d) for d in data)
    dev_params = {}
    if dev is not None and target.device_param is not None:
        host = {}
        for k, v in params.items():
            if dev(v):
                dev_params[k], host[k] = target.device_param(v)
            else:
                host[k] = v
        params = host
    vals = _values(act, params)
    rdt = None
    for nm, d in zip(DATA_NAMES, data):
        # NEP 50: a Python float/int/bool is "weak" and takes the other operand's dtype
        # (backward(x_f32, 2.0) stays float32); alone, it computes in float64.
        if type(d) in _WEAK:
            continue
        dt = dtype_of(name, nm, d)
        rdt = dt if rdt is None or rdt is dt else np.promote_types(rdt, dt)
    if rdt is None:
        rdt = F64
    odt = cdt = rdt
    if rdt == F32:
        if target.widen:
            cdt = widened(rdt, vals)
        else:
            f32_range_error(act, vals, target.name)
        # 16-bit data (2-byte items) are returned in their dtype
        for d in data:
            if getattr(getattr(d, "dtype", None), "itemsize", 0) == 2:
                narrow = narrow_result(data)
                if narrow is not None:
                    odt = narrow
                break
    # _params.values gives Python numbers, numpy scalars or numpy arrays
    arrays = tuple([type(v) is np.ndarray and v.ndim != 0 for v in vals])
    conv = target.param
    if dev_params:
        arrays = tuple(a or p in dev_params for a, p in zip(arrays, act.param_names))
    if conv is None:
        pargs = vals
    else:
        pargs = [conv(v, dev_params.get(p), cdt) for p, v in zip(act.param_names, vals)]
    shape = None
    if target.broadcast:
        shapes = [np.shape(d) for d in data] + [
            np.shape(a) for a, isarr in zip(pargs, arrays) if isarr
        ]
        try:
            shape = np.broadcast_shapes(*shapes)
        except ValueError:
            raise ValueError(
                f"{name}: operands with shapes {shapes} do not broadcast together"
            ) from None
    split = f32_split(vals, act.defaults) if cdt is not rdt else None
    o = None
    if out is not None:
        out = unwrap_out(name, out)
        ok = dev(out) if dev is not None else isinstance(out, np.ndarray)
        if not ok:
            raise TypeError(f"{name}: out= must be {target.out_what}, got {type(out).__name__}")
        o = target.out(out) if target.out is not None else out
        if dev is None and not o.flags.writeable:
            raise ValueError(f"{name}: out= is read-only")
        if shape is not None:
            if tuple(o.shape) != shape:
                raise ValueError(f"{name}: out= has shape {tuple(o.shape)}, expected {shape}")
            odt_ = np.dtype(o.dtype)
            if odt_.kind != "f" and not is_bf16(odt_):
                raise TypeError(f"{name}: out= must be a floating array, got {o.dtype}")
    return Call(tuple(data), rdt, cdt, odt, vals, tuple(pargs), arrays, shape, split, out, o)
