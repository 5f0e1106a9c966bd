"""CPU backend: numpy arrays, numpy scalars, Python numbers and lists, through Numba.

Two kinds of compiled code, both from the spec's scalar kernels and bit-identical (a NaN
result's sign aside: a vectorised loop may take the other operand's NaN where two meet):

* numpy ufuncs (:mod:`iglu_np.backends.cpu`): any layout, broadcasting, casting, ``out=``
  with numpy's semantics; one thread;
* njit loops over flat memory (:mod:`iglu_np.backends.cpu_fast`): contiguous float32/64
  operands of one shape; vectorised with scalar parameters, threaded from
  :data:`THRESHOLD` elements. Contiguous bfloat16 operands take the float32 loops on
  blocks widened from their bits and rounded back once (``run_bf16_<kind>``).

float16 and bfloat16 inputs compute in float32 and are returned as their own dtype
(:func:`iglu_np._dtypes.narrow_result`), rounded once; the parameter gradients of
:func:`backward_params` / :func:`backward_all` stay float32 (the compute dtype) for both.

Which one runs is decided here, on three paths:

* :func:`fast`: the warm common case, tried by the dispatcher before anything else;
* :func:`run`, :func:`backward_params`, :func:`backward_all`: the general path (every
  operand kind, every error message), which still takes the loops where the operands fit.

Small arrays are tiered: below :data:`MIN_SIZE` elements the first :data:`WARM_CALLS`
calls of an activation/kind/dtype run the ufunc, so code that calls a few times never
imports Numba or pays the seconds of an njit compile; the next one loads the loops'
module (importing Numba) and takes the loop where it is compiled (in this process, or on
disk), never compiling it, so the steady state of small calls does not depend on what
else the process called. From :data:`THRESHOLD` elements the loops run on all Numba threads; the
threaded build is compiled by the first such call, with the single-thread one. No call
after the first of its kind, dtype and size class compiles. This module is not part of
the on-disk kernel cache key: editing it recompiles nothing.
"""
from __future__ import annotations

import os

import numpy as np

from .._dtypes import F32 as _F32
from .._dtypes import F64 as _F64
from .._dtypes import beyond_f32 as _beyond_f32
from .._dtypes import is_bf16 as _is_bf16
from .._dtypes import narrow_result as _narrow_result
from .._dtypes import unbroadcast as _unbroadcast
from .._kinds import BWD_ALL
from .._params import values as _values
from . import cpu
from ._call import Target, prepare

__all__ = ["HOST_TYPES", "THRESHOLD", "MIN_SIZE", "WARM_CALLS", "set_threshold",
           "set_min_size", "handles", "status", "ufunc", "fast", "run", "backward_params",
           "backward_all"]

#: Operands this backend takes (memoryviews and pandas objects are unwrapped before).
HOST_TYPES = (np.ndarray, np.generic, float, int, list, tuple)


def _env_int(name: str, default: int) -> int:
    """A non-negative integer from the environment; a clear error naming the variable."""
    v = os.environ.get(name, "").strip()
    if not v:
        return default
    try:
        n = int(v.replace("_", ""))
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(
            f"iglu_np: environment variable {name}={v!r} is not a non-negative integer "
            f"(a count of elements or calls in decimal digits, e.g. {name}={default})"
        ) from None
    return n


def _threshold_default() -> int:
    v = os.environ.get("IGLU_NP_PARALLEL_THRESHOLD")
    if v:
        return _env_int("IGLU_NP_PARALLEL_THRESHOLD", 1 << 16)
    # Below ~2**16 elements the prange launch costs more than a second core saves; see the
    # idle rows of examples/bench_threading.py (1e4 elements: one thread as fast as two;
    # 1e5: two faster). Re-measure there on a new machine; the variable above overrides it.
    return 1 << 16


THRESHOLD = _threshold_default()


def _min_size_default() -> int:
    return _env_int("IGLU_NP_FAST_MIN_SIZE", 2048)


# Below MIN_SIZE elements the first WARM_CALLS calls of an activation/kind/dtype run the
# compiled numpy ufunc instead of the njit loop (same scalar kernel, bit-identical
# results). Its scalar-parameter loop is not vectorised and pays for numpy's errstate, so
# it is slower than the njit loop, but compiling the njit loop takes a good part of a
# second per activation x kind x dtype, and a compile in the middle
# of a run of small calls is a stall nobody asked for. Importing Numba and its target (the
# ufuncs load without it: cpu._direct) is left to the call after WARM_CALLS, which then
# loads the loop where it is cached, once per process; a loop cached nowhere leaves the
# ufunc in place until a large call or ``iglu-np warmup`` builds it. Calls with array
# parameters or reductions below MIN_SIZE always take the ufunc.
MIN_SIZE = _min_size_default()
WARM_CALLS = _env_int("IGLU_NP_FAST_WARM_CALLS", 8)


def set_min_size(n: int) -> None:
    """Arrays with fewer than ``n`` elements use the numpy ufunc, not the njit loop."""
    global MIN_SIZE
    MIN_SIZE = int(n)


def set_threshold(n: int) -> None:
    """Arrays with at least ``n`` elements use all Numba threads (0: always, huge: never)."""
    global THRESHOLD
    THRESHOLD = int(n)


_FAST = None  # iglu_np.backends.cpu_fast once loaded: it imports numba
_calls: dict = {}  # plan key -> small calls served by the ufunc (> WARM_CALLS: for good)
_threaded: set = set()  # plan keys whose threaded kernel is compiled for the fast path
_ready_sigs: set = set()  # (kernel id, argument types) compiled for the general path


def _loops():
    global _FAST
    if _FAST is None:
        from . import cpu_fast

        _FAST = cpu_fast
    return _FAST


def handles(array) -> bool:
    return isinstance(array, HOST_TYPES)


def status():
    """(usable, detail) for ``iglu-np info``."""
    import numba

    fast = _FAST or _loops()
    return True, (f"Numba {numba.__version__} ufuncs and loops, {numba.get_num_threads()} "
                  f"thread(s) from {THRESHOLD:,} elements, "
                  f"{len(fast.plans)} loop(s) loaded, cache {cpu._gen_dir()}")


def ufunc(name: str, kind: str) -> np.ufunc:
    """The raw numpy ufunc of kernel ``kind`` of activation ``name``."""
    return cpu.get_ufunc(name, kind)


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Two arrays over exactly the same elements in the same order (elementwise aliasing
    is safe then; any other overlap needs numpy's buffering)."""
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.strides == b.strides and a.shape == b.shape)


# --------------------------------------------------------------------------- fast path
def fast(act, kind, data, params, out):
    """The common case without the general machinery: aligned float32/64 numpy arrays
    of one dtype and shape whose memory is contiguous (C order; or Fortran/transposed,
    then all laid out alike), scalar parameters, ``out`` None or a matching array (or
    x/grad_out itself). Returns None to fall back to the general path, which also
    produces every error message but the parameters' (validated here)."""
    x = data[0]
    if type(x) is not np.ndarray:
        return None
    dt = x.dtype
    if (dt is not _F32 and dt is not _F64) or x.ndim == 0:
        return None
    fl = x.flags
    if not fl.aligned:
        return None
    order = None  # C order; else the axis order of x's memory (cpu_fast.axis_order)
    if not fl.c_contiguous:
        if _FAST is None and x.size < MIN_SIZE:
            return None  # the ufunc, without importing the loops' module (and Numba)
        order = (_FAST or _loops()).axis_order(x)
        if order is None:
            return None
    shape = x.shape
    g = None
    if len(data) == 2:
        g = data[1]
        if type(g) is not np.ndarray or g.dtype is not dt or g.shape != shape:
            return None
        fl = g.flags
        if not ((fl.c_contiguous and fl.aligned) if order is None else
                (fl.aligned and _FAST.mem_flat(g, order) is not None)):
            return None
    if params:
        vals = _values(act, params)  # validates; raises the usual errors
        if dt is _F32 and _beyond_f32(vals) is not None:
            return None  # computed in float64 by the general path
        for v in vals:
            tv = type(v)
            if tv is not float and tv is not int and not isinstance(v, np.floating):
                return None
    else:
        vals = act.defaults
    alias = None  # out is input j: the loops' in-place variant (see cpu_fast._source)
    if out is None:
        o = np.empty(shape, dt) if order is None else _FAST.empty_like_layout(shape, dt, order)
    else:
        if type(out) is not np.ndarray or out.dtype is not dt or out.shape != shape:
            return None
        fl = out.flags
        if not ((fl.c_contiguous and fl.aligned and fl.writeable) if order is None else
                (fl.aligned and fl.writeable and _FAST.mem_flat(out, order) is not None)):
            return None
        # Each operand on its own: out may be exactly x (or g), elementwise that is
        # safe; any other overlap (a shifted view) goes to numpy's buffered path. Arrays
        # that own their memory cannot overlap unless they are the same object: the usual
        # preallocated buffers skip may_share_memory, the costliest check of a small call.
        if out.base is None and x.base is None and (g is None or g.base is None):
            alias = 0 if out is x else (1 if out is g else None)
        else:
            for j, a in enumerate((x, g)):
                if a is None or (out.base is None and a.base is None and a is not out):
                    continue
                if a is out or _same_view(out, a):
                    alias = j if alias is None else alias
                elif np.may_share_memory(out, a):
                    return None
        o = out
    n = x.size
    key = (act.name, kind, dt.char, alias)
    # the loops' module imports Numba: small calls through the ufunc do without it
    p = None if _FAST is None else _FAST.plans.get(key)
    if p is None:
        if n < MIN_SIZE:
            # Tiered: the first few small calls of a kind/dtype take the compiled ufunc
            # (bit-identical); hot ones the njit loop where it loads without a compile.
            c = _calls.get(key, 0)
            if c < WARM_CALLS:
                _calls[key] = c + 1
            elif c == WARM_CALLS:
                # hot: the loop where it loads without a compile (this process, the disk)
                p = (_FAST or _loops()).plan(act.name, kind, dt, alias, cached_only=True)
                if p is None:
                    _calls[key] = c + 1  # not compiled: the ufunc until a call builds it
            if p is None:
                ins = (x,) if g is None else (x, g)
                with np.errstate(all="ignore"):  # FP flags of discarded branches
                    cpu.get_ufunc(act.name, kind)(*ins, *[dt.type(v) for v in vals], out=o)
                return o
        else:
            p = (_FAST or _loops()).plan(act.name, kind, dt, alias)
    fast = _FAST
    loop, par_kernel = p
    if order is not None:  # the 1-d loop runs over the memory; o keeps x's layout
        x = fast.mem_flat(x, order)
        o1 = fast.mem_flat(o, order)
        if g is not None:
            g = fast.mem_flat(g, order)
    elif x.ndim != 1:
        x = x.reshape(-1)
        o1 = o.reshape(-1)
        if g is not None:
            g = g.reshape(-1)
    else:
        o1 = o
    if n < THRESHOLD or fast.numba.get_num_threads() == 1:
        # the operands spelled out: packing them into tuples is a cost on every small call
        if g is None:
            if alias is None:
                loop(x, o1, 0, n, *vals)
            else:
                loop(x, 0, n, *vals)
        elif alias is None:
            loop(x, g, o1, 0, n, *vals)
        else:
            loop(x, g, 0, n, *vals)
        return o
    ins = (x,) if g is None else (x, g)
    if alias is None:
        ins = (*ins, o1)
    # typed parameters: the dispatcher would type a Python float as float64
    tv = [dt.type(v) for v in vals]
    if key not in _threaded:
        _ready(par_kernel, (*ins, True, *tv))
        _threaded.add(key)
    fast.launch(par_kernel, n, lambda: par_kernel(*ins, True, *tv),
                lambda: loop(*ins, 0, n, *vals), dt.char)
    return o


# --------------------------------------------------------------------------- general path
# numpy's ufuncs broadcast (and name what does not) and cast into out=
_TARGET = Target("cpu", broadcast=False)


def _call_ufunc(act, kind, vals, cdt, out):
    # Kernels may raise FP flags in branches they discard (inf*0, overflow in a tail
    # that is then replaced by its limit): numpy would turn them into warnings.
    try:
        with np.errstate(all="ignore"):
            if out is not None and out.dtype.kind == "c":
                # Numba's ufuncs warn (ComplexWarning) casting into a complex out, which
                # numpy's own take silently: computed, then cast as numpy would.
                np.copyto(out, cpu.get_ufunc(act.name, kind)(*vals, dtype=cdt), casting="same_kind")
                return out
            return cpu.get_ufunc(act.name, kind)(*vals, out=out, dtype=cdt)
    except ValueError as e:
        raise ValueError(f"{act.name}: {e}") from None
    except TypeError as e:
        raise TypeError(f"{act.name}: {e}") from None


def _call_split(act, kind, vals, n_data, split):
    """Kernel ``kind`` in float64 where :func:`iglu_np._dtypes.f32_split`'s mask says (a
    parameter element beyond float32), in float32 elsewhere: float64 values, each element
    as it computes alone."""
    mask, safe = split
    wide = _call_ufunc(act, kind, vals, _F64, None)
    narrow = _call_ufunc(act, kind, [*vals[:n_data], *safe], _F32, None)
    return np.where(mask, wide, narrow)


def run(act, kind, data, params, out):
    """Kernel ``kind`` with numpy's ufunc semantics (see iglu_np.backends)."""
    c = prepare(act, data, params, out, _TARGET)
    vals, cdt, wdt, out = [*c.data, *c.values], c.result, c.compute, c.out
    r = None
    if wdt == cdt:
        if cdt == _F32 and _is_bf16(getattr(data[0], "dtype", None)):
            r = _run_bf16(act, kind, vals, out, len(data))
        if r is None:
            r = _run_loops(act, kind, vals, cdt, out, len(data))
        if r is None:
            r = _run_buffered(act, kind, vals, cdt, out, len(data))
    if r is None:
        if c.split is not None:
            r = _call_split(act, kind, vals, len(data), c.split)
            if out is not None:
                np.copyto(out, r, casting="same_kind")
                r = out
        else:
            r = _call_ufunc(act, kind, vals, wdt, out)
        if out is None and wdt != cdt:
            with np.errstate(over="ignore"):  # beyond float32's range rounds to inf
                r = r.astype(cdt)
    if out is None and c.output != cdt:
        nd = c.output
        if r.dtype != nd:
            # float16/bfloat16 in: computed in float32, returned as the input's dtype
            # (beyond 65504 rounds to inf in float16, as it should; ml_dtypes flags NaN)
            with np.errstate(over="ignore", invalid="ignore"):
                r = r.astype(nd)
    return r


def backward_params(act, data, params) -> dict:
    """Each parameter's gradient reduced to its shape (see Activation.backward_params)."""
    c = prepare(act, data, params, None, _TARGET)
    vals, cdt, wdt = [*c.data, *c.values], c.result, c.compute
    if wdt == cdt:
        vals[:2] = [_widen_bf16(d) for d in vals[:2]]  # the float32 reductions on exact copies
        res = _reduce_params(act, vals, cdt)
        if res is None:
            copied = _laid_out_alike(vals, cdt)
            res = _reduce_params(act, copied, cdt) if copied is not None else None
        if res is not None:
            return res
    res = {}
    split = c.split
    for i, p in enumerate(act.param_names):
        if split is not None:
            full = _call_split(act, "bwd_" + p, vals, 2, split)
        else:
            full = _call_ufunc(act, "bwd_" + p, vals, wdt, None)
        pshape = np.shape(vals[2 + i])
        # Summed in float64 as the loops' block sums are: a float32 sum overflowed where
        # the gradient is finite (-3e38 - 3e38 + 3e38 gave -inf).
        with np.errstate(over="ignore"):
            res[p] = np.asarray(_unbroadcast(np.asarray(full), pshape, _F64)).astype(cdt, copy=False)
    return res


def backward_all(act, data, params, out):
    """``(grad_x, grads)`` from one pass of the loops, or None where they do not apply
    (no parameters, array parameters, layouts or sizes they do not take, overlap)."""
    if not act.param_names:
        return None
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        # run's error; the one-pass loop would be typed for a read-only out and fail
        raise ValueError(f"{act.name}: out= is read-only")
    c = prepare(act, data, params, None, _TARGET)
    vals, cdt = [*c.data, *c.values], c.result
    if c.compute != cdt:
        return None
    if any(_is_bf16(getattr(d, "dtype", None)) for d in data):
        return _backward_all_bf16(act, data, vals, cdt, out)
    res = _fused_backward(act, vals, cdt, out)
    if res is not None or not (out is None or (type(out) is np.ndarray and out.dtype == cdt
                                               and out.shape == np.shape(vals[0]))):
        return res
    # Strided or broadcast operands: one pass over copies (several times faster than the
    # ufunc's scalar loop and numpy's sum on them), then out written from the result (x
    # and grad_out were read into the copies first, so out may overlap them).
    copied = _laid_out_alike(vals, cdt)
    res = _fused_backward(act, copied, cdt, None) if copied is not None else None
    if res is None or out is None:
        return res
    np.copyto(out, res[0])
    return out, res[1]


# --------------------------------------------------------------------------- loops
# The general path's use of the njit loops: parameters may also be arrays of x's shape
# (elementwise kinds), operands are checked the slow, thorough way.
def _parallel(n: int) -> bool:
    fast = _FAST or _loops()
    return n >= THRESHOLD and fast.numba.get_num_threads() > 1


def _ready(k, args) -> None:
    """Compile (or load) threaded kernel ``k`` for ``args`` now. The busy-machine guard
    (cpu_fast.launch) runs a kernel's first large call on one thread, so the threaded
    build would otherwise compile inside the second call (gelu, 10^6 elements: 1.2 s)."""
    typeof = (_FAST or _loops()).numba.typeof
    sig = tuple(typeof(a) for a in args)
    if (id(k), sig) not in _ready_sigs:
        k.compile(sig)
        _ready_sigs.add((id(k), sig))


def _param(v, dt, shape, order=None):
    """A parameter as the loop takes it: a numpy scalar of dtype ``dt``, a flat
    contiguous array of x's shape (in x's memory order ``order``), or None when the loops
    do not apply."""
    tv = type(v)
    if tv is float or tv is int:
        return dt.type(v)
    if isinstance(v, np.generic):
        return dt.type(v)
    if isinstance(v, np.ndarray):
        if v.ndim == 0:
            return dt.type(v[()])
        if v.shape == shape:
            if order is not None and order != tuple(range(len(shape))):
                v = v.transpose(order)
            return np.ascontiguousarray(v, dtype=dt).reshape(-1)
    return None


def _flat_in(a, dt, shape, order=None):
    """``a`` as a 1-d view over its memory when it is a ``dt`` array of ``shape`` laid out
    in the axis ``order`` (default: its own, if it has one), else None."""
    if type(a) is not np.ndarray or a.dtype != dt or a.shape != shape:
        return None
    fast = _FAST or _loops()
    if order is None:
        order = fast.axis_order(a)
        if order is None:
            return None
    return fast.mem_flat(a, order)


def _run_loops(act, kind: str, vals: list, cdt, out, n_data: int):
    """Compute ``kind`` through the loops, or return None when they do not apply."""
    if cdt is not _F32 and cdt is not _F64 and cdt != _F32 and cdt != _F64:
        return None
    x = vals[0]
    if type(x) is not np.ndarray or x.ndim == 0 or x.size < MIN_SIZE:
        return None  # (before importing the loops' module: it imports Numba)
    fast = _FAST or _loops()
    shape = x.shape
    order = fast.axis_order(x)
    if order is None:
        return None
    xf = _flat_in(x, cdt, shape, order)
    if xf is None or xf.size < MIN_SIZE:
        return None
    ins = [xf]
    if n_data == 2:
        gf = _flat_in(vals[1], cdt, shape, order)
        if gf is None:
            return None
        ins.append(gf)
    ps = []
    for v in vals[n_data:]:
        pv = _param(v, cdt, shape, order)
        if pv is None:
            return None
        ps.append(pv)
    alias = None
    if out is None:
        o = fast.empty_like_layout(shape, cdt, order)
    else:
        if out.dtype != cdt or out.shape != shape or fast.mem_flat(out, order) is None:
            return None
        # Exact aliasing (out is x) is safe elementwise (the in-place loops run it);
        # partial overlap is left to numpy, which buffers it.
        for j, a in enumerate(vals[:n_data]):
            if a is not out and not np.may_share_memory(a, out):
                continue
            if a is not out and (a.__array_interface__["data"][0]
                                 != out.__array_interface__["data"][0]):
                return None
            alias = j if alias is None else alias
        for p in ps:
            if isinstance(p, np.ndarray) and np.may_share_memory(p, out):
                return None
        o = out
    if alias is None:
        ins.append(fast.mem_flat(o, order))
    if _parallel(xf.size):
        k = fast.kernel(act.name, kind, True, alias)
        _ready(k, (*ins, True, *ps))
        fast.launch(k, xf.size, lambda: k(*ins, True, *ps),
                    lambda: fast.kernel(act.name, kind, False, alias)(*ins, False, *ps), xf.dtype.char)
    else:
        fast.kernel(act.name, kind, False, alias)(*ins, False, *ps)
    return o


# Elements per chunk of _run_buffered: numpy's buffers, and one loop call per chunk.
BUFFER = 1 << 16


def _run_buffered(act, kind: str, vals: list, cdt, out, n_data: int):
    """Operands the loops cannot take in place (strided or reversed x, a grad_out that
    broadcasts, an out= laid out unlike x, overlap) but of one float dtype with scalar
    parameters: numpy's buffered iterator hands the single-thread loop contiguous chunks
    (copies where needed, numpy's own overlap handling and result layout), instead of the
    ufunc's scalar loop, which is several times slower on reversed or strided x, a
    broadcast grad_out, an out= in another order, float16 (cast in the buffers) or mixed
    dtypes. Single-threaded. None where it does not apply."""
    if cdt != _F32 and cdt != _F64:
        return None
    data = list(vals[:n_data])
    for i, d in enumerate(data):
        if isinstance(d, np.generic):
            data[i] = d = np.asarray(d)
        # float16, bfloat16 (or float32 beside float64) are cast in the buffers, as the
        # ufunc casts them
        if (type(d) is not np.ndarray or (d.dtype.kind != "f" and not _is_bf16(d.dtype))
                or not np.can_cast(d.dtype, cdt)):
            return None
    x = data[0]
    if x.ndim == 0 or x.size < MIN_SIZE:
        return None
    ps = []
    for v in vals[n_data:]:
        pv = _param(v, cdt, ())  # None for an array with dimensions
        if pv is None:
            return None
        ps.append(pv)
    try:
        shape = np.broadcast_shapes(*(d.shape for d in data))
    except ValueError:
        return None  # the ufunc's error
    if out is not None and ((out.dtype.kind != "f" and not _is_bf16(out.dtype))
                            or not np.can_cast(cdt, out.dtype, "same_kind")
                            or out.shape != shape):
        return None  # the ufunc's errors and casting rules
    fast = _FAST or _loops()
    loop = fast.plan(act.name, kind, cdt)[0]
    it = np.nditer(
        [*data, out],
        flags=["external_loop", "buffered", "zerosize_ok", "copy_if_overlap"],
        op_flags=[["readonly", "contig", "aligned"]] * n_data
        + [["writeonly", "allocate", "no_broadcast", "contig", "aligned"]],
        op_dtypes=[cdt] * (n_data + 1), casting="same_kind", order="K", buffersize=BUFFER)
    # a float16/bfloat16 out is cast from the buffers (ml_dtypes flags a NaN's cast)
    with it, np.errstate(over="ignore", invalid="ignore"):
        for ch in it:
            if all(c.flags.c_contiguous for c in ch):  # what "contig" promises
                loop(*ch, 0, ch[0].size, *ps)
            else:
                _call_ufunc(act, kind, [*ch[:-1], *ps], cdt, ch[-1])
        res = it.operands[-1]
    # out itself, as numpy returns it: where out overlaps an input, the iterator's operand
    # is a temporary, written back into out as the iterator closes
    return res if out is None else out


# --------------------------------------------------------------------------- bfloat16
def _bf16_flat(a, dt, shape, order):
    """The bfloat16 array ``a`` (dtype ``dt``, ``shape``) as its bits (a 1-d uint16 view
    over its memory in the axis ``order``), else None."""
    if type(a) is not np.ndarray or a.dtype != dt or a.shape != shape:
        return None
    f = (_FAST or _loops()).mem_flat(a, order)
    return None if f is None else f.view(np.uint16)


def _run_bf16(act, kind: str, vals: list, out, n_data: int):
    """bfloat16 x (and grad_out) of one shape laid out alike, scalar parameters, ``out``
    None or bfloat16 laid out alike: ``run_bf16_<kind>`` (the float32 loop on widened
    blocks, rounded once into the result), threaded like the loops. None otherwise."""
    x = vals[0]
    if type(x) is not np.ndarray or x.ndim == 0 or x.size < MIN_SIZE:
        return None  # small: the ufunc through numpy's casts, then rounded (run)
    fast = _FAST or _loops()
    dt, shape = x.dtype, x.shape
    order = fast.axis_order(x)
    if order is None:
        return None
    ins = [_bf16_flat(d, dt, shape, order) for d in vals[:n_data]]
    if any(f is None for f in ins):
        return None
    ps = []
    for v in vals[n_data:]:
        if isinstance(v, np.ndarray) and v.ndim > 0:
            return None
        ps.append(_param(v, _F32, ()))
    if out is None:
        o = fast.empty_like_layout(shape, dt, order)
    else:
        of = _bf16_flat(out, dt, shape, order)
        if of is None:
            return None
        # a block is read whole before its part of out is written: out may be an input
        # itself, but not a shifted view of one (numpy's buffered path takes that)
        for a in vals[:n_data]:
            if a is not out and np.may_share_memory(a, out) and not _same_view(a, out):
                return None
        o = out
    ins.append(_bf16_flat(o, dt, shape, order))
    n = x.size
    name = "bf16_" + kind
    if _parallel(n):
        k = fast.kernel(act.name, name, True)
        _ready(k, (*ins, True, *ps))
        fast.launch(k, n, lambda: k(*ins, True, *ps),
                    lambda: fast.kernel(act.name, name, False)(*ins, False, *ps), dt.char)
    else:
        fast.kernel(act.name, name, False)(*ins, False, *ps)
    return o


def _convert(which: str, src, dst) -> None:
    """``dst`` (uint32 or uint16 view) from ``src``'s bits: ``which`` "widen" or "narrow"."""
    fast = _FAST or _loops()
    n = src.size
    if _parallel(n):
        k = fast.converter(which, True)
        _ready(k, (src, dst))
        fast.launch(k, n, lambda: k(src, dst), lambda: fast.converter(which, False)(src, dst),
                    which)
    else:
        fast.converter(which, False)(src, dst)


def _widen_bf16(a):
    """A float32 copy of a bfloat16 array or scalar ``a`` (exact; its layout kept), else
    ``a`` itself."""
    if not _is_bf16(getattr(a, "dtype", None)):
        return a
    if type(a) is np.ndarray and a.size >= MIN_SIZE:
        fast = _FAST or _loops()
        order = fast.axis_order(a)
        if order is not None:
            w = fast.empty_like_layout(a.shape, _F32, order)
            _convert("widen", fast.mem_flat(a, order).view(np.uint16),
                     fast.mem_flat(w, order).view(np.uint32))
            return w
    return a.astype(_F32)


def _narrow_into(r, out):
    """The float32 array ``r`` rounded into ``out`` (of r's shape): the loops' rounding
    where both are laid out alike, else numpy's cast (the same rounding, ml_dtypes')."""
    fast = _FAST or _loops()
    if _is_bf16(out.dtype) and r.dtype == _F32 and r.size >= MIN_SIZE:
        order = fast.axis_order(r)
        if order is not None:
            of = fast.mem_flat(out, order)
            if of is not None:
                _convert("narrow", fast.mem_flat(r, order).view(np.uint32), of.view(np.uint16))
                return out
    with np.errstate(over="ignore", invalid="ignore"):
        np.copyto(out, r, casting="same_kind")
    return out


def _backward_all_bf16(act, data, vals: list, cdt, out):
    """:func:`backward_all` with a bfloat16 operand: the float32 one-pass loops on exact
    float32 copies of x and grad_out; grad_x rounded once into bfloat16 when every
    floating operand is bfloat16 (float32 beside a float32 or float16 operand, as
    :func:`run`) or into ``out``; the parameter gradients float32. None where the loops
    do not apply (the dispatcher's two-pass path then gives the same results)."""
    if out is not None and not (type(out) is np.ndarray and out.shape == np.shape(vals[0])
                                and (out.dtype == _F32 or _is_bf16(out.dtype))):
        return None  # run's errors and casting rules
    wide = [_widen_bf16(d) for d in vals[:2]] + vals[2:]
    res = _fused_backward(act, wide, cdt, None)
    if res is None:
        copied = _laid_out_alike(wide, cdt)
        res = _fused_backward(act, copied, cdt, None) if copied is not None else None
    if res is None:
        return None
    gx, grads = res
    if out is None:
        nd = _narrow_result(data)
        if nd is None or not _is_bf16(nd):
            return gx, grads
        out = np.empty_like(gx, dtype=nd)
    return _narrow_into(gx, out), grads


def _reduction_operands(vals: list, cdt):
    """``(x, grad_out, params, shape, order)`` flat over x's memory for the reductions
    (every parameter a scalar, x and grad_out laid out alike), else None. Summed in
    memory order (like numpy's order='K' reductions): a Fortran-ordered x may round
    differently from its C-ordered copy."""
    if cdt != _F32 and cdt != _F64:
        return None
    x = vals[0]
    if type(x) is not np.ndarray:
        return None
    shape = x.shape
    order = (_FAST or _loops()).axis_order(x)
    if order is None:
        return None
    xf = _flat_in(x, cdt, shape, order)
    gf = _flat_in(vals[1], cdt, shape, order)
    if xf is None or gf is None:
        return None
    ps = []
    for v in vals[2:]:
        if isinstance(v, np.ndarray) and v.ndim > 0:
            return None
        pv = _param(v, cdt, ())
        if pv is None:
            return None
        ps.append(pv)
    return xf, gf, ps, shape, order


def _laid_out_alike(vals: list, cdt):
    """``vals`` with x (strided, reversed) copied to a contiguous array in its own axis
    order and grad_out (strided, broadcast, another layout) copied to x's layout, for
    the reductions; None where they would not take the copies (an array parameter, a
    grad_out that does not broadcast to x's shape, few elements). The copies cost ~0.5-1
    ns/el, several times less than the ufunc and numpy's sum on such operands; the sum is
    then the loops' (float64 blocks in memory order), where numpy's sums float32 in
    float32."""
    x, g = vals[0], vals[1]
    if (type(x) is not np.ndarray or x.dtype != cdt or x.size < MIN_SIZE
            or not isinstance(g, (np.ndarray, np.generic, float, int))
            or any(isinstance(v, np.ndarray) and v.ndim > 0 for v in vals[2:])):
        return None
    try:
        shape = np.broadcast_shapes(np.shape(g), x.shape)
    except ValueError:
        return None
    if shape != x.shape:
        return None
    fast = _FAST or _loops()
    xc = x if fast.axis_order(x) is not None else np.copy(x, order="K")
    gc = np.empty_like(xc)
    np.copyto(gc, g, casting="same_kind")
    return [xc, gc, *vals[2:]]


def _reduce_params(act, vals: list, cdt):
    """dict param -> 0-d gradient when every parameter is a scalar (else None): fixed
    blocks of ``cpu_fast.REDUCE_BLOCK`` elements summed in float64 (see cpu_fast), so the
    result does not depend on the thread count."""
    ops = _reduction_operands(vals, cdt)
    if ops is None:
        return None
    fast = _FAST or _loops()
    xf, gf, ps, shape, order = ops
    n = xf.size
    if n < MIN_SIZE:
        # small: the ufunc's elementwise gradient, summed in float64 like the blocks below
        res = {}
        with np.errstate(all="ignore"):
            for p in act.param_names:
                full = cpu.get_ufunc(act.name, "bwd_" + p)(xf, gf, *ps)
                res[p] = np.asarray(cdt.type(np.sum(full, dtype=np.float64)))
        return res
    part = np.empty(max(1, -(-n // fast.REDUCE_BLOCK)), np.float64)
    res = {}
    for p in act.param_names:
        if n == 0:
            part[:] = 0.0
        elif _parallel(n):
            k = fast.kernel(act.name, "sum_" + p, True)
            _ready(k, (xf, gf, part, True, *ps))
            fast.launch(k, n, lambda: k(xf, gf, part, True, *ps),
                        lambda: fast.kernel(act.name, "sum_" + p, False)(xf, gf, part, False, *ps),
                        xf.dtype.char)
        else:
            fast.kernel(act.name, "sum_" + p, False)(xf, gf, part, False, *ps)
        res[p] = np.asarray(cdt.type(part.sum()))
    return res


def _fused_backward(act, vals: list, cdt, out):
    """``(grad_x, {param: 0-d gradient})`` from one pass over x and grad_out when every
    parameter is a scalar and the operands fit the loops, else None. grad_x and the
    gradients equal those of the ``bwd`` loop and :func:`_reduce_params` bit for bit
    (the same per-element values, block sums and order)."""
    ops = _reduction_operands(vals, cdt)
    fast = _FAST or _loops()
    if ops is None or ops[0].size < MIN_SIZE:
        return None
    xf, gf, ps, shape, order = ops
    if out is None:
        o = fast.empty_like_layout(shape, cdt, order)
    else:
        if type(out) is not np.ndarray or out.dtype != cdt or out.shape != shape:
            return None
        if fast.mem_flat(out, order) is None or any(np.may_share_memory(a, out) for a in vals[:2]):
            return None  # overlap: the two-pass path buffers it
        o = out
    n = xf.size
    part = np.empty((len(ps), max(1, -(-n // fast.REDUCE_BLOCK))), np.float64)
    of = fast.mem_flat(o, order)
    if _parallel(n):
        k = fast.kernel(act.name, BWD_ALL, True)
        _ready(k, (xf, gf, of, part, True, *ps))
        fast.launch(k, n, lambda: k(xf, gf, of, part, True, *ps),
                    lambda: fast.kernel(act.name, BWD_ALL, False)(xf, gf, of, part, False, *ps),
                    xf.dtype.char)
    else:
        fast.kernel(act.name, BWD_ALL, False)(xf, gf, of, part, False, *ps)
    grads = {p: np.asarray(cdt.type(part[i].sum())) for i, p in enumerate(act.param_names)}
    return o, grads
