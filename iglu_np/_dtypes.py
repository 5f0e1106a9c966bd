"""The dtype and promotion rules every backend applies (one home for them).

* A float16 / bfloat16 / float32 input computes in float32, float64 in float64; integers
  and booleans compute in float64 (:func:`compute_dtype`); inputs promote together as
  numpy's ``promote_types`` says.
* When some input is float16 and none is a wider float, the result is returned as
  float16 (:func:`all_half`); likewise bfloat16 (:func:`narrow_result` names either).
  float16 beside bfloat16 returns float32, as ``ml_dtypes`` promotes them.
* bfloat16 is ``ml_dtypes.bfloat16`` (an optional extra), recognised by its name
  (:func:`is_bf16`) so that this module never imports ``ml_dtypes``.
* A float32 computation whose parameter float32 cannot hold computes in float64 and
  rounds once at the end (:func:`widened`); backends that cannot do that refuse the call
  (:func:`f32_range_error`). The choice is made element by element: where an array
  parameter holds both kinds of values, only its elements beyond float32 compute in
  float64 (:func:`f32_split`), so an element's result never depends on the other
  elements of the call (a Dask chunk gives the bits of the whole array).

This module imports numpy only: :mod:`iglu_np._api` and every backend import it, and it
imports neither.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "F16",
    "F32",
    "F64",
    "is_bf16",
    "compute_dtype",
    "dtype_of",
    "all_half",
    "narrow_result",
    "beyond_f32",
    "f32_split",
    "widened",
    "f32_range_error",
    "unbroadcast",
]

F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
_COMPUTE = {F16: F32, F32: F32, F64: F64}


def is_bf16(dt) -> bool:
    """``dt`` is ``ml_dtypes.bfloat16`` (known by name: ``ml_dtypes`` is not imported)."""
    return isinstance(dt, np.dtype) and dt.name == "bfloat16" and dt.itemsize == 2


def compute_dtype(name: str, what: str, dt: np.dtype) -> np.dtype:
    """The dtype that input ``what`` of activation ``name`` (of dtype ``dt``) computes in;
    TypeError, naming both, for a dtype that is not real."""
    if dt.byteorder not in "=|":  # a byte-swapped float32 is float32 (numpy casts it)
        dt = dt.newbyteorder("=")
    c = _COMPUTE.get(dt)
    if c is not None:
        return c
    if dt.kind in "biu":
        return F64
    if is_bf16(dt):
        return F32
    raise TypeError(
        f"{name}: unsupported dtype {dt} for {what}; expected a real floating "
        "(float16/32/64, bfloat16), integer or boolean array"
    )


def dtype_of(name, what, v):
    """:func:`compute_dtype` of any operand (array, numpy scalar, Python number, list)."""
    dt = getattr(v, "dtype", None)
    if not isinstance(dt, np.dtype):
        if isinstance(v, (float, int)):  # Python scalars (bool is an int)
            return F64
        dt = np.asarray(v).dtype
    return compute_dtype(name, what, dt)


def all_half(data) -> bool:
    """True when the float16 rule applies: some input is float16 and none is wider."""
    half = False
    for d in data:
        dt = getattr(d, "dtype", None)
        if dt == F16:
            half = True
        elif dt is not None and dt.kind == "f":
            return False
    return half


def narrow_result(data):
    """The 16-bit float dtype (float16 or bfloat16) a result is returned as: the one
    every floating input has, when some input is floating and all of those share it;
    else None (a wider float, or float16 beside bfloat16: float32)."""
    narrow = None
    for d in data:
        dt = getattr(d, "dtype", None)
        if not isinstance(dt, np.dtype):
            continue
        if dt == F16 or is_bf16(dt):
            if narrow is not None and narrow != dt:
                return None
            narrow = dt
        elif dt.kind == "f":
            return None
    return narrow


F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = float(np.finfo(np.float32).tiny)


def beyond_f32(vals) -> int | None:
    """The first parameter value that float32 cannot hold (|v| > max, or a nonzero |v|
    below the smallest normal, where it would round to inf, 0 or a subnormal); its
    index, or None. On the CPU such parameters compute in float64 (then cast back)."""
    for i, v in enumerate(vals):
        if type(v) is float or type(v) is int:
            a = abs(v)
            if a > F32_MAX or (a != 0 and a < F32_TINY):
                return i
            continue
        if _beyond_mask(v).any():
            return i
    return None


def _beyond_mask(v):
    """Which elements of ``v`` float32 cannot hold (as :func:`beyond_f32` decides)."""
    a = np.abs(np.asarray(v, dtype=np.float64))
    return (a > F32_MAX) | ((a != 0) & (a < F32_TINY))


def f32_split(params, defaults):
    """For a float32 call that :func:`widened` sends to float64: ``(mask, safe)`` where
    array parameters hold values both within and beyond float32's range, else None (every
    element computes in float64). ``mask`` (the parameters' broadcast shape) marks the
    elements to compute in float64; ``safe`` is ``params`` with the values beyond float32
    replaced by their defaults, for computing the other elements in float32."""
    bad = []
    for i, v in enumerate(params):
        if np.ndim(v) == 0:
            if beyond_f32([v]) is not None:
                return None  # a scalar beyond float32: every element is beyond
            continue
        m = _beyond_mask(v)
        if m.any():
            bad.append((i, m))
    if not bad:
        return None
    mask = bad[0][1]
    for _, m in bad[1:]:
        mask = mask | m
    if mask.all():
        return None
    safe = list(params)
    for i, m in bad:
        safe[i] = np.where(m, defaults[i], np.asarray(params[i], dtype=np.float64))
    return mask, safe


def f32_range_error(act, vals, backend: str) -> None:
    """The Numba CUDA backend computes float32 in float32: refuse a parameter it cannot
    hold (the CPU and CuPy compute such calls in float64, :func:`widened`)."""
    i = beyond_f32(vals)
    if i is not None:
        p = act.param_names[i]
        raise ValueError(
            f"{act.name}: parameter {p} has a value outside float32's range for a float32 "
            f"input on the {backend} backend (|{p}| must be 0 or within "
            f"[{F32_TINY:.7g}, {F32_MAX:.7g}]); pass float64 data, or compute on the CPU or "
            "with CuPy, which promote such a parameter to float64"
        )


def widened(cdt, params) -> np.dtype:
    """The dtype to compute in: ``cdt``, or float64 where ``cdt`` is float32 and a
    parameter value lies outside float32's range (sigma=1e39 is valid and its results are
    finite, but float32(1e39) is inf). The result is rounded to ``cdt`` once at the end."""
    if cdt == F32 and beyond_f32(params) is not None:
        return F64
    return cdt


def typed(dt, *values) -> tuple:
    """``values`` as scalars of dtype ``dt`` (a compiled kernel's typed arguments)."""
    t = np.dtype(dt).type
    return tuple(t(v) for v in values)


def fused_dtype(dtypes, params):
    """The dtype a fused gated kernel computes operands of ``dtypes`` in: their one dtype
    where it is float32 or float64, every parameter a scalar and, in float32, within
    float32's range (:func:`widened`); None otherwise (the form is composed instead)."""
    dts = {np.dtype(d) for d in dtypes}
    if len(dts) != 1:
        return None
    dt = dts.pop()
    if (dt != F32 and dt != F64) or any(np.ndim(v) for v in params):
        return None
    return dt if widened(dt, params) == dt else None


def unbroadcast(a, shape: tuple, dtype=None):
    """Sum ``a`` down to ``shape`` (the inverse of broadcasting ``shape`` to a.shape): the
    gradient of a parameter that was broadcast against x; ``dtype``: the accumulator."""
    if a.shape == shape:
        return a
    nlead = a.ndim - len(shape)
    axes = list(range(nlead))
    axes += [nlead + i for i, n in enumerate(shape) if n == 1 and a.shape[nlead + i] != 1]
    r = a.sum(axis=tuple(axes), keepdims=True, dtype=dtype) if axes else a
    return r.reshape(shape)
