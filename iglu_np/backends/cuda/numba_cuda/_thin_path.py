"""The thin per-call path: plans cached per (activation, kind, dtypes, parameter values)
that launch the raw-pointer vector kernel on a new or given output with no per-call
type resolution."""

from __future__ import annotations

import math

import numpy as np

from ...._dtypes import compute_dtype as _compute_dtype
from ...._dtypes import f32_range_error as _f32_range_error
from ...._kinds import Kind
from ...._params import values as _values
from . import _compile, _discovery
from ._arrays import _DATA_NAMES, _launch_dims, _pointer
from ._discovery import SIM_THREADS, THREADS, _state
from ._sources import VECTOR_BYTES, _kinds, lanes

# --------------------------------------------------------------------------- thin per-call path
# The common call (C-contiguous data of one float dtype, aligned, scalar parameters, out=
# absent, or contiguous and of the same dtype) skips the general path's per-call work
# (wrapping each operand as a Numba device array and again as a view, the dispatcher's
# type resolution, a fresh external-stream object and launch configuration): a plan per
# (activation, kind, dtypes, array type, parameter values) holds the validated
# compute-dtype parameters and the vector kernel compiled for raw pointers, and a launch
# passes integers. Everything else goes through the general path; invalid parameters
# raise the general path's errors (the same validation, whose result alone is cached).
_FLOATS = {np.dtype(t).str: np.dtype(t) for t in (np.float16, np.float32, np.float64)}
_SCALARS = frozenset({float, int, np.float16, np.float32, np.float64, np.int32, np.int64})
_plans: dict = {}
PLAN_LIMIT = 1024  # distinct (activation, kind, dtypes, parameter values) kept


class _Plan:
    __slots__ = ("kernel", "pargs", "lanes", "alloc", "dims", "launches")

    def __init__(self, kernel, pargs, nlanes, alloc):
        self.kernel, self.pargs, self.lanes, self.alloc = kernel, pargs, nlanes, alloc
        self.dims: dict = {}
        self.launches: dict = {}


def _c_contiguous(shape, strides, itemsize) -> bool:
    if strides is None:  # the interface's way of saying C-contiguous
        return True
    want = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != want:
            return False
        want *= n
    return True


def _flat(a):
    """(address, shape, dtype, stream) of a C-contiguous float16/32/64 device array, else
    None. ``stream``: a Numba array's stream object, or the interface's stream pointer
    (None: the default stream)."""
    if getattr(type(a), "__cuda_ndarray__", False):
        dt = _FLOATS.get(np.dtype(a.dtype).str)
        if dt is None or not a.is_c_contiguous():
            return None
        return _pointer(a), tuple(a.shape), dt, (a.stream or None)
    try:
        cai = a.__cuda_array_interface__
    except Exception:  # not a device array: the general path names the problem
        return None
    dt = _FLOATS.get(cai.get("typestr"))
    if dt is None or cai.get("mask") is not None:
        return None
    shape = tuple(cai["shape"])
    if not _c_contiguous(shape, cai.get("strides"), dt.itemsize):
        return None
    return cai["data"][0], shape, dt, cai.get("stream")


def _launch_stream(cuda, s):
    """The Numba stream for ``s`` (see :func:`_flat`), one object per pointer, so that a
    launch configuration can be reused."""
    if _discovery.simulator():
        s = None
    if s is None or isinstance(s, int):
        key = ("stream", s)
        obj = _state.get(key)
        if obj is None:
            obj = _state[key] = cuda.default_stream() if s is None else cuda.external_stream(s)
        return obj
    return s


def _allocator(cuda, template, odt):
    """``alloc(shape, template, stream) -> (array, kernel argument)`` for a new output of
    the input's array type, from that library's own memory pool (CuPy's, torch's caching
    allocator; Numba's device_array for Numba arrays and any other interface object,
    which the general path returns as Numba arrays too)."""
    mod = type(template).__module__.split(".")[0]
    if mod == "cupy":
        import cupy

        def alloc(shape, x, stream):
            y = cupy.empty(shape, odt)
            return y, y.data.ptr
    elif mod == "torch":
        import torch

        tdt = {2: torch.float16, 4: torch.float32, 8: torch.float64}[odt.itemsize]

        def alloc(shape, x, stream):
            y = torch.empty(shape, dtype=tdt, device=x.device)
            return y, y.data_ptr()
    else:
        sim = _discovery.simulator()

        def alloc(shape, x, stream):
            y = cuda.device_array(shape, dtype=odt, stream=stream)
            return y, (y if sim else _pointer(y))

    return alloc


def _one_gpu(cuda) -> bool:
    n = _state.get("gpus")
    if n is None:
        n = _state["gpus"] = len(cuda.gpus)
    return n == 1


def _make_plan(act, kind, dts, template, out_dt, params):
    """The plan for :func:`_thin`, or None where the general path must run. Invalid
    parameters raise here with the general path's errors (nothing is cached then)."""
    kd = Kind.parse(kind)
    if kd.op == "sum" or kind not in _kinds(act.spec):
        return None
    cuda = _discovery._cuda()
    mod = type(template).__module__.split(".")[0]
    if mod in ("cupy", "torch") and not _discovery.simulator() and not _one_gpu(cuda):
        return None  # the general path selects the input's device
    cdt = None
    for nm, dt in zip(_DATA_NAMES, dts):
        c = _compute_dtype(act.name, nm, dt)
        cdt = c if cdt is None else np.promote_types(cdt, c)
    odt = np.dtype(np.float16) if (cdt == np.float32 and all(d.itemsize == 2 for d in dts)) else cdt
    ddt = dts[0]
    if any(d != ddt for d in dts) or (out_dt if out_dt is not None else odt) != ddt:
        return None  # the vector form loads and stores one dtype
    vals = _values(act, params)
    if cdt == np.float32:
        _f32_range_error(act, vals, "numba_cuda")
    if any(np.ndim(v) != 0 for v in vals):
        return None
    kernel = _compile._pointer_kernel(act.name, kind, cdt, ddt)
    return _Plan(
        kernel, tuple(cdt.type(v) for v in vals), lanes(ddt), _allocator(cuda, template, odt)
    )


def _thin(act, kind, data, params, out):
    """``run`` for the common call (see the comment above), or None."""
    for v in params.values():
        if type(v) not in _SCALARS:
            return None
    if isinstance(out, tuple):
        if len(out) != 1:
            return None
        out = out[0]
    fx = _flat(data[0])
    if fx is None:
        return None
    ptr, shape, ddt, s = fx
    ptrs = [ptr]
    if len(data) == 2:
        fg = _flat(data[1])
        if fg is None or fg[1] != shape:
            return None
        ptrs.append(fg[0])
        dts = (ddt, fg[2])
        if s is None:
            s = fg[3]
    else:
        dts = (ddt,)
    fo = None
    if out is not None:
        fo = _flat(out)
        if fo is None or fo[1] != shape:
            return None
    n = math.prod(shape)
    if not n:
        return None
    key = (act.name, kind, dts, type(data[0]), None if fo is None else fo[2], tuple(params.items()))
    plan = _plans.get(key)
    if plan is None:
        plan = _make_plan(act, kind, dts, data[0], None if fo is None else fo[2], params)
        if plan is None:
            return None
        if len(_plans) >= PLAN_LIMIT:
            _plans.clear()
        _plans[key] = plan
    if fo is not None:
        op = fo[0]
        nbytes = n * ddt.itemsize
        for p in ptrs:
            if p != op and p < op + nbytes and op < p + nbytes:
                return None  # out= overlapping an input other than exactly: buffered there
        ptrs.append(op)
    for p in ptrs:
        if p % VECTOR_BYTES:
            return None  # a view that starts mid-vector: the general form
    cuda = _discovery._cuda()
    sim = _discovery.simulator()
    stream = _launch_stream(cuda, s)
    if out is None:
        result, oarg = plan.alloc(shape, data[0], stream)
        if not sim and oarg % VECTOR_BYTES:
            return None  # (allocators align to far more than 16 bytes)
    else:
        result, oarg = out, op
    if sim:  # the simulator's kernels index the arrays themselves
        args, oarg = data, result
    else:
        args = ptrs[: len(data)]
    blocks = plan.dims.get(n)
    if blocks is None:
        blocks = _launch_dims(cuda, -(-n // plan.lanes))[0]
        if len(plan.dims) < 64:
            plan.dims[n] = blocks
    lk = (blocks, stream)
    launch = plan.launches.get(lk)
    if launch is None:
        launch = plan.kernel[blocks, SIM_THREADS if sim else THREADS, stream]
        if len(plan.launches) < 64:
            plan.launches[lk] = launch
    launch(n, *args, *plan.pargs, oarg)
    return result
