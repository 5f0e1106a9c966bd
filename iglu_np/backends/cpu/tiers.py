"""Which compiled code a CPU call takes, and the thin per-call path of the common case.

Two kinds of compiled code, both from the spec's scalar kernels and bit-identical (a NaN
result's sign aside: a vectorised loop may take the other operand's NaN where two meet):
the numpy ufuncs of :mod:`.ufuncs` (any layout, one thread) and the njit loops of
:mod:`.loops` (contiguous operands, vectorised, threaded from :data:`THRESHOLD`
elements). :func:`fast` is the CPU backend's thin path (its ``fast_path``): aligned
float32/64 numpy arrays of one shape and memory layout with scalar parameters, without
the general machinery of :mod:`.backend`.

Small arrays are tiered: below :data:`MIN_SIZE` elements the first :data:`WARM_CALLS`
calls of an activation/kind/dtype run the ufunc, so code that calls a few times never
imports Numba or pays the seconds of an njit compile; the next one loads the loops'
module (importing Numba) and takes the loop where it is compiled (in this process, or on
disk), never compiling it, so the steady state of small calls does not depend on what
else the process called. From :data:`THRESHOLD` elements the loops run on all Numba
threads; the threaded build is compiled by the first such call, with the single-thread
one. No call after the first of its kind, dtype and size class compiles. This module is
not part of the on-disk kernel cache key: editing it recompiles nothing.
"""

from __future__ import annotations

import os

import numpy as np

from ..._dtypes import F32 as _F32
from ..._dtypes import F64 as _F64
from ..._dtypes import beyond_f32 as _beyond_f32
from ..._params import of as _of
from ..._params import values as _values
from . import ufuncs as cpu

__all__ = ["THRESHOLD", "MIN_SIZE", "WARM_CALLS", "set_threshold", "set_min_size", "fast"]


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


# The kinds whose kernels depend on the parameters through f and dx alone: where a spec's
# same_as holds, they run the other activation's loops.
_PLAIN_KINDS = frozenset(("fwd", "dx", "bwd"))
_LOOPS = None  # iglu_np.backends.cpu.loops once loaded: it imports numba
_calls: dict = {}  # plan key -> small calls served by the ufunc (> WARM_CALLS: for good)
_threaded: set = set()  # plan keys whose threaded kernel is compiled for the fast path
_ready_sigs: set = set()  # (kernel id, argument types) compiled for the general path


def _loops():
    """The loops' module, imported (with Numba) on first use."""
    global _LOOPS
    if _LOOPS is None:
        from . import loops as cpu_fast

        _LOOPS = cpu_fast
    return _LOOPS


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Two arrays over exactly the same elements in the same order (elementwise aliasing
    is safe then; any other overlap needs numpy's buffering)."""
    return (
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        and a.strides == b.strides
        and a.shape == b.shape
    )


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
        if _LOOPS is None and x.size < MIN_SIZE:
            return None  # the ufunc, without importing the loops' module (and Numba)
        order = (_LOOPS or _loops()).axis_order(x)
        if order is None:
            return None
    shape = x.shape
    g = None
    if len(data) == 2:
        g = data[1]
        if type(g) is not np.ndarray or g.dtype is not dt or g.shape != shape:
            return None
        fl = g.flags
        if not (
            (fl.c_contiguous and fl.aligned)
            if order is None
            else (fl.aligned and _LOOPS.mem_flat(g, order) is not None)
        ):
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
    name = act.name
    same = act.same_as
    if same is not None and kind in _PLAIN_KINDS and tuple(vals) == same[1]:
        # the spec's same_as: these parameter values give another activation's bits
        name = same[0]
        vals = _of(name).defaults
    alias = None  # out is input j: the loops' in-place variant (see loop_source.source)
    if out is None:
        o = np.empty(shape, dt) if order is None else _LOOPS.empty_like_layout(shape, dt, order)
    else:
        if type(out) is not np.ndarray or out.dtype is not dt or out.shape != shape:
            return None
        fl = out.flags
        if not (
            (fl.c_contiguous and fl.aligned and fl.writeable)
            if order is None
            else (fl.aligned and fl.writeable and _LOOPS.mem_flat(out, order) is not None)
        ):
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
                # may_share_memory (bounds only) before _same_view: views of separate
                # buffers (a torch tensor's and its result's) are the common case
                if a is not out and not np.may_share_memory(out, a):
                    continue
                if a is out or _same_view(out, a):
                    alias = j if alias is None else alias
                else:
                    return None
        o = out
    n = x.size
    key = (name, kind, dt.char, alias)
    # the loops' module imports Numba: small calls through the ufunc do without it
    p = None if _LOOPS is None else _LOOPS.plans.get(key)
    if p is None:
        if n < MIN_SIZE:
            # Tiered: the first few small calls of a kind/dtype take the compiled ufunc
            # (bit-identical); hot ones the njit loop where it loads without a compile.
            c = _calls.get(key, 0)
            if c < WARM_CALLS:
                _calls[key] = c + 1
            elif c == WARM_CALLS:
                # hot: the loop where it loads without a compile (this process, the disk)
                p = (_LOOPS or _loops()).plan(name, kind, dt, alias, cached_only=True)
                if p is None:
                    _calls[key] = c + 1  # not compiled: the ufunc until a call builds it
            if p is None:
                ins = (x,) if g is None else (x, g)
                with np.errstate(all="ignore"):  # FP flags of discarded branches
                    cpu.get_ufunc(name, kind)(*ins, *[dt.type(v) for v in vals], out=o)
                return o
        else:
            p = (_LOOPS or _loops()).plan(name, kind, dt, alias)
    fast = _LOOPS
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
    fast.launch(
        par_kernel, n, lambda: par_kernel(*ins, True, *tv), lambda: loop(*ins, 0, n, *vals), dt.char
    )
    return o


# --------------------------------------------------------------------------- threads
def _parallel(n: int) -> bool:
    fast = _LOOPS or _loops()
    return n >= THRESHOLD and fast.numba.get_num_threads() > 1


def _ready(k, args) -> None:
    """Compile (or load) threaded kernel ``k`` for ``args`` now. The busy-machine guard
    (cpu_fast.launch) runs a kernel's first large call on one thread, so the threaded
    build would otherwise compile inside the second call (gelu, 10^6 elements: 1.2 s)."""
    typeof = (_LOOPS or _loops()).numba.typeof
    sig = tuple(typeof(a) for a in args)
    if (id(k), sig) not in _ready_sigs:
        k.compile(sig)
        _ready_sigs.add((id(k), sig))
