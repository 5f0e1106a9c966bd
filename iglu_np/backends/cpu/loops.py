"""CPU loops: njit loop kernels (single-thread or ``prange``) from the same spec kernels.

The numpy ufuncs of :mod:`iglu_np.backends.cpu.ufuncs` are general (any layout, broadcasting,
casting) but slow where it matters most: a scalar parameter reaches a ``@vectorize``
loop with stride 0, which keeps Numba on its generic scalar loop, and a ufunc runs on one
thread. For contiguous float32/float64 operands (C, Fortran, any transpose of those; see
:func:`axis_order`) the CPU backend (:mod:`iglu_np.backends.cpu.backend`, which decides
when) calls the loops built here instead: an ``@njit`` loop over the flat memory, or its
``@njit(parallel=True)`` block version (the result has ``x``'s layout, as a numpy ufunc's
with ``order='K'``); ``out=x`` and ``out=grad_out`` take in-place variants of each loop,
which LLVM vectorises without a runtime alias check (that check sends ``out[i] = f(x[i])``
with out aliasing x to its scalar copy). The loop body is the *same* compiled scalar
kernel the ufunc calls (rebound with vectorisable math, no fastmath), so the loops and
``.ufunc`` agree bit for bit, and a threaded run agrees bit for bit with a single-thread
one (elementwise work has no order). The backend runs arrays of at least
``tiers.THRESHOLD`` elements on ``numba.get_num_threads()`` threads (Numba's settings: ``NUMBA_NUM_THREADS``,
``numba.set_num_threads``) as the busy-machine guard (:func:`launch`) allows; smaller ones
on the calling thread, where a thread launch would cost more than it saves. Every
compiled loop releases the GIL (``nogil=True``): Python threads calling activations on
different arrays run at once.

Parameter gradients (``backward_params``) with scalar parameters are reduced in the loop:
fixed blocks of :data:`REDUCE_BLOCK` elements are summed in float64 with 8 interleaved partial
sums into a per-block slot, and the block sums are added in order at the end. The block
layout does not depend on the thread count, so the result does not either, and no
elementwise temporary is allocated.
"""

from __future__ import annotations

import os
import threading
import time
import types

try:
    import fcntl
except ImportError:  # Windows: Numba's own behaviour, unlocked
    fcntl = None

import numba
import numpy as np
from numba import types as nbt
from numba.extending import overload

from ... import _forksafe
from ..._kinds import BWD_ALL, Kind
from ..._spec import REGISTRY
from . import _cache, _wide
from . import ufuncs as cpu
from .loop_source import source as _source
from .loop_source import variant

__all__ = ["kernel", "plan", "plans", "launch", "axis_order", "mem_flat", "empty_like_layout"]

_F32 = np.dtype(np.float32)
_CACHE = os.environ.get("IGLU_NP_FAST_NOCACHE", "") == ""
_F64 = np.dtype(np.float64)
# Options of every compiled loop: division by zero gives inf/nan (no branch to raise,
# which would keep the loop scalar), and the GIL is released while it runs.
_JIT = dict(error_model="numpy", nogil=True)

# The files of the loops' cache key beside the ufuncs' (package-relative): the module's
# text and its runtime helpers.
KEY_FILES = ("backends/cpu/loops.py", "backends/cpu/loop_source.py")

# Elements per thread task in parallel loops (multiple of 64: whole cache lines and SIMD
# vectors per block) and per reduction block.
TASK_BLOCK = 1 << 15
REDUCE_BLOCK = 1 << 12
# Elements per bulk/exact decision (spec.bulk): L1-resident between the domain check and
# the computation.
DOMAIN_BLOCK = 256
# At most this many elements outside the domain in a DOMAIN_BLOCK are mended on their own
# (more: the whole DOMAIN_BLOCK takes the exact kernel), found DOMAIN_CHUNK elements at a
# time.
MAX_OUTSIDE = 16
DOMAIN_CHUNK = 16


# --------------------------------------------------------------------------- cache
def _serialised_saves(disp):
    """``disp`` with its on-disk cache saves under an exclusive file lock (POSIX).

    Numba's cache index is read-modify-write: two processes saving different signatures
    of one function at once (pytest -n 2, a process pool; a cold cache) can both take
    data file 1, and the index then names the other signature's machine code. Seen: the
    float32 loop's entry pointing at float64 code (plan's check caught it; a dispatcher
    call would have run it). Serialised, every save reads the other's index entry."""
    cf = getattr(getattr(disp, "_cache", None), "_cache_file", None)
    if cf is None or fcntl is None:
        return disp
    save, lock = cf.save, cf._index_path + ".lock"

    def locked_save(key, data):
        with open(lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # released when f closes
            save(key, data)

    cf.save = locked_save
    return disp


def _njit(fn, cache=_CACHE, **opts):
    # numba.njit(fn, cache=cache, **_JIT, **opts), on the loops' own target (_wide)
    disp = _wide.njit_target()(
        py_func=fn, locals={}, targetoptions=dict(nopython=True, boundscheck=None, **_JIT, **opts)
    )
    if cache:
        _cache.enable(disp)  # Numba's on-disk cache, surviving damaged entries
    return _serialised_saves(disp)


# --------------------------------------------------------------------------- helpers
def _param_at(p, i):
    """``p[i]`` for an array parameter, ``p`` for a scalar (resolved at compile time)."""
    raise NotImplementedError  # only called from compiled code


@overload(_param_at, inline="always")
def _ov_param_at(p, i):
    if isinstance(p, nbt.Array):
        return lambda p, i: p[i]
    return lambda p, i: p


def _param_slice(p, lo, hi):
    """``p[lo:hi]`` for an array parameter, ``p`` for a scalar (resolved at compile time)."""
    raise NotImplementedError  # only called from compiled code


@overload(_param_slice, inline="always")
def _ov_param_slice(p, lo, hi):
    if isinstance(p, nbt.Array):
        return lambda p, lo, hi: p[lo:hi]
    return lambda p, lo, hi: p


def _zero(a):
    """0 of the array's dtype."""
    raise NotImplementedError  # only called from compiled code


@overload(_zero, inline="always")
def _ov_zero(a):
    dt = a.dtype
    return lambda a: dt(0.0)


@numba.njit(inline="always", cache=_CACHE, **_JIT)
def _same(a, b):
    """The two flat views start at the same address (the backend passes out either
    exactly aliasing an input or not overlapping it)."""
    return a.ctypes.data == b.ctypes.data


@numba.njit(inline="always", cache=_CACHE, **_JIT)
def _skew(a, n):
    """Elements of ``a`` before its first 64-byte boundary (0 below two blocks): threaded
    blocks after the first then start on a cache line. numpy's large arrays start 16 bytes
    past one, so without the skew every 512-bit access (every other 256-bit one) would
    straddle two lines, enough to make the memory-bound 512-bit loops slower than 256-bit
    ones (``examples/bench_vectorisation.py --threads 2`` re-measures)."""
    if n < 2 * TASK_BLOCK:
        return 0
    return ((64 - a.ctypes.data % 64) % 64) // a.itemsize


@numba.njit(inline="always", cache=_CACHE, **_JIT)
def _lanesum(buf, m):
    # Eight interleaved sums in a fixed order: SLP/loop vectorisable without fastmath,
    # and the same result on every run and thread count.
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    m8 = m - m % 8
    for j in range(0, m8, 8):
        s0 += buf[j]
        s1 += buf[j + 1]
        s2 += buf[j + 2]
        s3 += buf[j + 3]
        s4 += buf[j + 4]
        s5 += buf[j + 5]
        s6 += buf[j + 6]
        s7 += buf[j + 7]
    r = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    for j in range(m8, m):
        r += buf[j]
    return r


# --------------------------------------------------------------------------- bfloat16
# bfloat16 is the upper half of a float32: the loops run float32 on blocks widened from
# the bfloat16 bits (viewed as uint16; Numba does not type ml_dtypes' arrays) and round
# the float32 results back. Integer code throughout: LLVM vectorises it, it raises no
# floating-point flags, and it needs no ml_dtypes.
BF16_BLOCK = 1 << 11  # elements per block: x, grad_out and out buffers stay in L1/L2


@numba.njit(inline="always", cache=_CACHE, **_JIT)
def _widen(src, dst):
    """bfloat16 bits ``src`` (uint16) -> float32 bits ``dst`` (uint32): exact."""
    for i in range(src.size):
        dst[i] = np.uint32(src[i]) << np.uint32(16)


@numba.njit(inline="always", cache=_CACHE, **_JIT)
def _narrow(src, dst):
    """float32 bits ``src`` (uint32) -> bfloat16 bits ``dst`` (uint16), rounded to
    nearest, ties to even (exact for subnormals; overflow rounds to inf); a NaN becomes
    the quiet NaN of its sign, as ml_dtypes rounds it."""
    # Numba widens uint32 arithmetic to 64 bits; the truncations keep 32-bit vector lanes
    # (twice as many per instruction). The sum wraps only for NaNs, which take q.
    for i in range(dst.size):
        u = src[i]
        h = np.uint32(u >> np.uint32(16))
        r = np.uint32(np.uint32(u + np.uint32(0x7FFF)) + (h & np.uint32(1))) >> np.uint32(16)
        q = (h & np.uint32(0x8000)) | np.uint32(0x7FC0)
        dst[i] = np.uint16(q if np.uint32(u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000) else r)


def widen_all(src, dst):
    """Every element of ``src`` (bfloat16 bits, uint16) widened into ``dst`` (uint32)."""
    n = src.size
    nb = (n + TASK_BLOCK - 1) // TASK_BLOCK
    for b in numba.prange(nb):
        lo = b * TASK_BLOCK
        hi = min(lo + TASK_BLOCK, n)
        _widen(src[lo:hi], dst[lo:hi])


def narrow_all(src, dst):
    """Every element of ``src`` (float32 bits, uint32) rounded into ``dst`` (uint16)."""
    n = src.size
    nb = (n + TASK_BLOCK - 1) // TASK_BLOCK
    for b in numba.prange(nb):
        lo = b * TASK_BLOCK
        hi = min(lo + TASK_BLOCK, n)
        _narrow(src[lo:hi], dst[lo:hi])


_converters: dict = {}


def converter(which: str, parallel: bool):
    """The compiled :func:`widen_all` (``which="widen"``) or :func:`narrow_all`
    (``"narrow"``): ``parallel`` its prange build, else the single-thread one."""
    key = (which, parallel)
    k = _converters.get(key)
    if k is None:
        fn = {"widen": widen_all, "narrow": narrow_all}[which]
        k = _converters[key] = _njit(fn if parallel else _serial_copy(fn), parallel=parallel)
    return k


_mods: dict = {}
_kernels: dict = {}


def _module(spec):
    mod = _mods.get(spec.name)
    if mod is not None:
        return mod
    with cpu._lock:
        mod = _mods.get(spec.name)
        if mod is not None:
            return mod
        scalar = cpu._module(spec).__dict__
        ns = dict(
            np=np,
            prange=numba.prange,
            _param_at=_param_at,
            _param_slice=_param_slice,
            _zero=_zero,
            _lanesum=_lanesum,
            _skew=_skew,
            TASK_BLOCK=TASK_BLOCK,
            BF16_BLOCK=BF16_BLOCK,
            _widen=_widen,
            _narrow=_narrow,
            REDUCE_BLOCK=REDUCE_BLOCK,
            DOMAIN_BLOCK=DOMAIN_BLOCK,
            MAX_OUTSIDE=MAX_OUTSIDE,
            DOMAIN_CHUNK=DOMAIN_CHUNK,
            _same=_same,
            _f=scalar["_f"],
            _dx=scalar["_dx"],
        )
        ns.update({k: v for k, v in scalar.items() if k.startswith("_b_")})
        for p in spec.param_names:
            ns["_d_" + p] = scalar["_d_" + p]
        h = cpu.kernel_hash(spec, extra=KEY_FILES)
        mod = cpu.generated_module("fast", spec, h, _source(spec), ns)
        ns = mod.__dict__
        for kind in cpu.kernel_kinds(spec):
            for j in (None, *range(Kind.parse(kind).n_data)):
                ns[f"loop_{kind}{variant(j)}"] = _njit(ns[f"loop_{kind}{variant(j)}"])
        for p in spec.param_names:
            ns[f"_reduce_block_{p}"] = _njit(ns[f"_reduce_block_{p}"], inline="always")
        if spec.param_names:
            ns["_reduce_block_all"] = _njit(ns["_reduce_block_all"], inline="always")
        for kind in cpu.kernel_kinds(spec):
            ns[f"_bf16_block_{kind}"] = _njit(ns[f"_bf16_block_{kind}"])
        _mods[spec.name] = mod
        return mod


def kernel(name: str, kind: str, parallel: bool = True, alias=None):
    """The njit loop kernel ``run_<kind>(x[, g], out, par, *params)`` or, for
    ``kind = "sum_<param>"``, the block reduction ``reduce_<param>(x, g, part, par,
    *params)``, or for ``kind = "bwdall"`` (:data:`iglu_np._kinds.BWD_ALL`) the fused
    backward ``reduce_all(x, g, out, part, par, *params)`` (part of shape (n_params,
    n_blocks)). ``alias = j`` gives the in-place variant
    ``run_<kind>_a<j>(x[, g], par, *params)`` that writes to input j (0: x, 1: g).

    ``parallel=False`` gives the single-thread build of the same function (``prange`` is
    ``range``; call it with ``par=False``): compiling the parfor version costs several
    times more, so it is only built once an array reaches ``tiers.THRESHOLD`` elements."""
    key = (name, kind, parallel, alias)
    k = _kernels.get(key)
    if k is None:
        mod = _module(REGISTRY[name])
        # the reductions' loops are reduce_<p> and reduce_all; run_<kind> takes the alias suffix
        if kind == BWD_ALL:
            fn = mod.reduce_all
        elif kind.startswith("sum_"):
            fn = getattr(mod, "reduce_" + kind[4:])
        else:
            fn = getattr(mod, f"run_{kind}{variant(alias)}")
        if not parallel:
            fn = _serial_copy(fn)
        k = _njit(fn, parallel=parallel)
        _kernels[key] = k
    return k


def _serial_copy(fn):
    """``fn`` under another name for its single-thread build. Numba's cache keys a
    function by its name, signature, CPU and bytecode, not by ``parallel``: under one
    name both builds would share an index, and whichever was saved first would be loaded
    for the other. A process whose first call took the single-thread build (a small
    array through cpu_backend._run_loops, or the busy-machine guard's fallback) would
    leave every later process a serial "threaded" kernel, about half as fast on two
    threads (tests/test_cache_key.py checks that the two builds stay apart)."""
    g = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__ + "_serial", fn.__defaults__, fn.__closure__
    )
    g.__qualname__ = fn.__qualname__ + "_serial"
    g.__module__ = fn.__module__
    return g


# --------------------------------------------------------------------------- plans
#: (name, kind, dtype char, alias) -> (loop, kernel) built by :func:`plan`, the backend's
#: one cache of them (a hit is what makes a call warm).
plans: dict = {}


def plan(name: str, kind: str, dt: np.dtype, alias=None, cached_only: bool = False):
    """``(loop, kernel)`` for ``kind`` on 1-D C-contiguous arrays of ``dt`` with scalar
    parameters: ``loop`` is the compiled entry point of ``loop_<kind>(x[, g], out, lo, hi,
    *params)`` (no type dispatch: ~0.2 us cheaper per call than the dispatcher) and
    ``kernel`` the ``run_<kind>`` dispatcher for threaded runs; with ``alias = j`` the
    in-place variants, without ``out`` (see :func:`kernel`). The caller guarantees the
    argument types; parameters may be Python floats or numpy scalars. ``cached_only``:
    None unless the loop is compiled in this process or in the on-disk cache (a load,
    milliseconds, instead of a compile, seconds)."""
    key = (name, kind, dt.char, alias)
    p = plans.get(key)
    if p is None:
        spec = REGISTRY[name]
        t = numba.from_dtype(dt)
        arr = nbt.Array(t, 1, "C")
        ins = (arr,) * Kind.parse(kind).n_data
        sig = (
            *ins,
            *((arr,) if alias is None else ()),
            nbt.intp,
            nbt.intp,
            *([t] * len(spec.param_names)),
        )
        loop = getattr(_module(spec), f"loop_{kind}{variant(alias)}")
        if cached_only and sig not in loop.overloads and not _on_disk(loop, sig):
            return None
        loop.compile(sig)
        cres = loop.overloads.get(sig)
        if cres is None:
            # the cache's index named another signature's code (a concurrent save before
            # _serialised_saves, or a foreign writer): compile this one afresh, uncached
            from numba.core.caching import NullCache

            loop._cache = NullCache()
            loop.compile(sig)
            cres = loop.overloads[sig]
        p = plans[key] = (cres.entry_point, kernel(name, kind, alias=alias))
    return p


def _on_disk(disp, sig) -> bool:
    """Whether ``disp``'s on-disk cache index lists ``sig`` for this CPU (the index alone
    is read: a few hundred bytes)."""
    cache = getattr(disp, "_cache", None)
    cf = getattr(cache, "_cache_file", None)
    if cf is None:
        return False
    return cache._index_key(sig, disp.targetctx.codegen()) in cf._load_index()


# --------------------------------------------------------------------------- layouts
def axis_order(a: np.ndarray):
    """The axes of ``a`` from outermost to innermost in memory when its elements fill one
    contiguous block with positive strides (``a.transpose(order)`` is C-contiguous):
    ``(0, 1, ...)`` for C order, reversed for Fortran order, any permutation for a
    transpose of either. None otherwise (gaps, negative strides, broadcast axes)."""
    if a.flags.c_contiguous:
        return tuple(range(a.ndim))
    if a.flags.f_contiguous:
        return tuple(range(a.ndim - 1, -1, -1))
    shape, st = a.shape, a.strides
    # size-1 axes first: their stride is meaningless; then by decreasing stride
    order = tuple(sorted(range(a.ndim), key=lambda i: (shape[i] != 1, -st[i])))
    return order if a.transpose(order).flags.c_contiguous else None


def mem_flat(a: np.ndarray, order):
    """The 1-d view of ``a``'s elements in the memory order given by ``order`` (from
    :func:`axis_order` of ``x``), or None when ``a`` is not laid out that way."""
    if a.flags.c_contiguous and order == tuple(range(a.ndim)):
        return a.reshape(-1)
    t = a.transpose(order)
    return t.reshape(-1) if t.flags.c_contiguous else None


def empty_like_layout(shape, dt, order):
    """An uninitialised array of ``shape`` laid out in the axis ``order``."""
    if order == tuple(range(len(shape))):
        return np.empty(shape, dt)
    inv = [0] * len(order)
    for k, ax in enumerate(order):
        inv[ax] = k
    return np.empty(tuple(shape[ax] for ax in order), dt).transpose(inv)


_par_lock = threading.Lock()
_par_threadsafe = False


def _new_par_lock():
    # a thread of the parent may hold the lock at fork; that thread does not exist in the child
    global _par_lock
    _par_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_par_lock)


# Busy-machine guard. A threaded call needs every core: while other processes hold them,
# it waits for the scheduler and OpenMP's spinning workers, and takes many times as long
# as the same call on one thread (examples/bench_threading.py shows it: omp, with busy
# processes on every core). The workqueue layer does not collapse but is slower on an idle
# machine, so omp stays and each kernel is watched instead: its first large call runs on
# one thread (the baseline: per-element time, the best seen); threaded calls must not lose
# to it (LOSS); two that do in a row send the kernel's calls to one thread for a cooldown
# that doubles while the probe after it is still slow (COOL_MIN to COOL_MAX s). Costs two
# clock reads per call of >= tiers.THRESHOLD elements.
# Baselines are kept per kernel, dtype and size class (a factor of 4 in elements): one
# dispatcher serves float32 and float64, and a cache-resident call's time per element is
# no yardstick for a memory-bound one (a float32 baseline would send float64 calls to one
# thread).
# A threaded call loses when it takes more than LOSS times the baseline. Uncontended,
# threaded calls take well under the baseline, but memory-bound kernels (identity,
# hardtanh, relu float64) come close to it and can cross it in a slow-memory second
# (against the best one-thread time ever seen); contention makes them several times
# slower. 1.25 keeps a threaded call from ever being twice as slow as one thread, with
# room for that noise (``iglu-np bench`` reports the guard's trips).
LOSS = 1.25
COOL_MIN, COOL_MAX = 0.125, 4.0
_guard: dict = {}  # (kernel, dtype, size class) -> [single s/element, slow calls, until, period]
#: cooldowns begun so far (``iglu-np bench`` reports those during its run: its threaded
#: figures then include one-thread calls)
guard_trips = 0


def _gkey(k, n, dt):
    return (k, dt, max(1, n).bit_length() // 2)


def busy(k, n, dt) -> bool:
    """Whether calls of threaded kernel ``k`` on ``n`` elements of ``dt`` run on one
    thread now: no single-thread baseline yet, or cooling down after threaded calls that
    lost to it."""
    g = _guard.get(_gkey(k, n, dt))
    return g is None or time.perf_counter() < g[2]


def launch(k, n, threaded, single, dt=None):
    """Run ``threaded()`` (a call of the parallel kernel ``k``) or ``single()`` (the same
    work on one thread) for ``n`` elements of dtype ``dt``, as the busy-machine guard
    says; on one thread in a child forked after a threading layer that does not survive
    fork (:mod:`iglu_np._forksafe`)."""
    if _forksafe.threads_lost:
        return single()
    key = _gkey(k, n, dt)
    g = _guard.get(key)
    t = time.perf_counter()
    if g is None or t < g[2]:
        r = single()
        per = (time.perf_counter() - t) / max(1, n)
        if g is None:
            _guard[key] = [per, 0, 0.0, 0.0]
        elif per < g[0]:
            g[0] = per
        return r
    r = par_call(k, threaded)
    now = time.perf_counter()
    if (now - t) / max(1, n) > LOSS * g[0]:  # threading lost to one thread
        g[1] += 1
        if g[1] >= 2 or g[3] > 0.0:  # twice in a row, or the probe after a cooldown
            global guard_trips
            guard_trips += 1
            g[3] = COOL_MIN if g[3] == 0.0 else min(2.0 * g[3], COOL_MAX)
            g[2] = now + g[3]
            g[1] = 0
    else:
        g[1], g[3] = 0, 0.0
    return r


def par_call(k, call):
    """Run ``call()``, a launch of the parallel (``prange``) kernel ``k``. The loops
    release the GIL, so two Python threads can launch at once; Numba's ``workqueue``
    threading layer (the one left when neither OpenMP nor TBB is available) aborts the
    process on concurrent launches, so launches are serialised until the layer is known
    to be thread-safe (``omp``, ``tbb``). Each launch uses every Numba thread anyway."""
    global _par_threadsafe
    if _par_threadsafe:
        return call()
    with _par_lock:
        r = call()
        _par_threadsafe = numba.threading_layer() in ("omp", "tbb")
    return r
