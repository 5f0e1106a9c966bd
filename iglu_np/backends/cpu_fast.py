"""CPU loops: njit loop kernels (single-thread or ``prange``) from the same spec kernels.

The numpy ufuncs of :mod:`iglu_np.backends.cpu` are general (any layout, broadcasting,
casting) but slow where it matters most: a scalar parameter reaches a ``@vectorize``
loop with stride 0, which keeps Numba on its generic scalar loop, and a ufunc runs on one
thread. For contiguous float32/float64 operands (C, Fortran, any transpose of those; see
:func:`axis_order`) the CPU backend (:mod:`iglu_np.backends.cpu_backend`, which decides
when) calls the loops built here instead: an ``@njit`` loop over the flat memory, or its
``@njit(parallel=True)`` block version (the result has ``x``'s layout, as a numpy ufunc's
with ``order='K'``); ``out=x`` and ``out=grad_out`` take in-place variants of each loop,
which LLVM vectorises without a runtime alias check (that check sends ``out[i] = f(x[i])``
with out aliasing x to its scalar copy). The loop body is the *same* compiled scalar
kernel the ufunc calls (rebound with vectorisable math, no fastmath), so the loops and
``.ufunc`` agree bit for bit, and a threaded run agrees bit for bit with a single-thread
one (elementwise work has no order). The backend runs arrays of at least
``cpu_backend.THRESHOLD`` elements on ``numba.get_num_threads()`` threads (Numba's settings: ``NUMBA_NUM_THREADS``,
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
import sys
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

from .. import _forksafe
from .._kinds import BWD_ALL, Kind
from .._spec import REGISTRY
from . import _cache, _wide, cpu

__all__ = ["kernel", "plan", "plans", "launch", "axis_order", "mem_flat", "empty_like_layout"]

_F32 = np.dtype(np.float32)
_CACHE = os.environ.get("IGLU_NP_FAST_NOCACHE", "") == ""
_F64 = np.dtype(np.float64)
# Options of every compiled loop: division by zero gives inf/nan (no branch to raise,
# which would keep the loop scalar), and the GIL is released while it runs.
_JIT = dict(error_model="numpy", nogil=True)

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
    disp = _wide.njit_target()(py_func=fn, locals={},
                               targetoptions=dict(nopython=True, boundscheck=None, **_JIT, **opts))
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


def variant(alias) -> str:
    """The name suffix of the loops writing to input ``alias`` (0: x, 1: g; None: to
    ``out``): ``loop_<kind><suffix>``, ``run_<kind><suffix>``."""
    return "" if alias is None else f"_a{alias}"


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


# --------------------------------------------------------------------------- generation
def _kernel_name(key: str) -> str:
    """The scalar kernel of a spec key: "f", "dx" or a parameter name."""
    return {"f": "_f", "dx": "_dx"}.get(key, "_d_" + key)


def _param_args(spec, pv: str = "p") -> str:
    """The element i of every parameter (``<pv>_<name>``), as trailing call arguments."""
    return "".join(f", _param_at({pv}_{p}, i)" for p in spec.param_names)


def _expr(spec, ins: str, fn: str, sfx: str = "", pv: str = "p") -> str:
    """The per-element expression of a loop over ``ins`` ("x" or "x, g") calling kernel
    ``fn``; arrays are named ``x<sfx>``/``g<sfx>``, parameters ``<pv>_<name>``."""
    call = f"{fn}(x{sfx}[i]{_param_args(spec, pv)})"
    return f"g{sfx}[i] * {call}" if ins == "x, g" else call


def _one_by_one(ind: str, xc: str, at: str, recompute) -> str:
    """Lines recomputing, one by one, the elements of the chunk view ``xc`` outside the
    bulk domain: ``recompute(indent)`` gives the lines for element ``i`` of the chunk. The
    loop's trip count is their number k (not countable: LLVM never vectorises it), so the
    exact kernel runs on those elements alone, not on every lane of a vector
    (``examples/bench_vectorisation.py`` re-measures)."""
    i1, i2 = ind + "    ", ind + "        "
    return (f"{ind}k = 0\n"
            f"{ind}for i in range({xc}.size):\n"
            f"{i1}k += 0 if _b_domain({xc}[i]{at}) else 1\n"
            f"{ind}c -= k\n"
            f"{ind}i = 0\n"
            f"{ind}while k > 0:\n"
            f"{i1}if not _b_domain({xc}[i]{at}):\n"
            f"{recompute(i2)}"
            f"{i2}k -= 1\n"
            f"{i1}i += 1\n")


def _bulk_body(spec, ins: str, key: str, o: str = "out") -> str:
    """The element loop of a kind with a bulk kernel (at most :data:`TASK_BLOCK` elements:
    ``run_`` calls it in such chunks), writing to ``o``: ``out``, or an input for the
    in-place variants. Where ``out`` is not an input, one loop runs the bulk kernel
    (``_b_<key>``, the same bits inside the spec's ``bulk_domain``) and checks the domain
    as it goes; if an element was outside, each :data:`DOMAIN_BLOCK` holding up to
    :data:`MAX_OUTSIDE` such elements has them recomputed by the exact kernel, one with
    more the whole block. In place the domain is checked before anything is written: one
    bulk loop if everything is inside, else per DOMAIN_BLOCK the bulk kernel, the exact
    one, or (up to MAX_OUTSIDE elements outside) per :data:`DOMAIN_CHUNK` either. No allocations: a call in the function
    would sit inside its loops for tools/x86_asm.py."""
    ps = list(spec.param_names)
    ins_l = ins.split(", ")
    arrs = ins_l + ([o] if o not in ins_l else [])

    def views(ind):
        return ("".join(f"{ind}{a}b = {a}[s:e]\n" for a in arrs)
                + "".join(f"{ind}pb_{p} = _param_slice(p_{p}, s, e)\n" for p in ps))

    def cviews(ind):
        return ("".join(f"{ind}{a}c = {a}b[t:te]\n" for a in arrs)
                + "".join(f"{ind}pc_{p} = _param_slice(pb_{p}, t, te)\n" for p in ps))

    at = _param_args(spec, "pb")
    atc = _param_args(spec, "pc")
    expr = _expr(spec, ins, _kernel_name(key))
    exact = _expr(spec, ins, _kernel_name(key), "b", "pb")
    exact_c = _expr(spec, ins, _kernel_name(key), "c", "pc")
    fast = _expr(spec, ins, "_b_" + key, "b", "pb")
    fast_c = _expr(spec, ins, "_b_" + key, "c", "pc")
    at0 = "".join(f", _param_at(p_{p}, 0)" for p in ps)
    at_all = _param_args(spec)
    fast_all = _expr(spec, ins, "_b_" + key)
    # out aliasing an input reaches loop_<kind> only from callers that do not choose the
    # in-place variant: the plain exact loop, correct there (and as slow as LLVM's alias
    # check makes any loop), not a third copy of the kernels to compile
    aliased = "" if o != "out" else "".join(f" or _same(out, {a})" for a in ins_l)
    head = (
        f"    n = {o}.size\n"
        # 0 (with the first element's parameters) is in every domain that is not empty for
        # the dtype and these parameters: else one plain loop (softplus with beta != 1; an
        # empty domain is slower in blocks) and no checks.
        f"    if n == 0 or not _b_domain(_zero({o}){at0}){aliased}:\n"
        f"        for i in range(n):\n"
        f"            {o}[i] = {expr}\n"
        f"        return\n"
    )

    def domain_blocks(ind, after):
        """The loop over DOMAIN_BLOCKs of a range with elements outside the domain.
        ``after`` (mending, out not an input): the bulk loop has written every element, so
        a block all inside is done and in a chunk only the elements outside are recomputed.
        Else (in place, nothing written yet) each block or chunk all inside runs the bulk
        kernel and a chunk holding one the exact kernel throughout."""
        i2, i3, i4, i5 = (ind + " " * k for k in (4, 8, 12, 16))
        ob = f"{o}b"
        clean = (f"{i3}continue\n" if after else
                 f"{i3}for i in range({ob}.size):\n{i4}{ob}[i] = {fast}\n{i3}continue\n")
        # After the bulk loop only the elements outside are recomputed; in place a chunk
        # holding one runs the exact kernel throughout (nothing of it is written yet).
        chunk = (_one_by_one(i3, "xc", atc, lambda i: f"{i}{o}c[i] = {exact_c}\n")
                 + f"{i3}if c == 0:\n{i4}break\n" if after else
                 f"{i3}ok = True\n"
                 f"{i3}for i in range(xc.size):\n"
                 f"{i4}ok &= _b_domain(xc[i]{atc})\n"
                 f"{i3}if ok:\n"
                 f"{i4}for i in range(xc.size):\n{i5}{o}c[i] = {fast_c}\n{i4}continue\n"
                 f"{i3}for i in range(xc.size):\n{i4}{o}c[i] = {exact_c}\n")
        return (
            f"{ind}for s in range(0, n, DOMAIN_BLOCK):\n"
            f"{i2}e = min(s + DOMAIN_BLOCK, n)\n"
            f"{views(i2)}"
            f"{i2}c = 0\n"
            f"{i2}for i in range(xb.size):\n"
            f"{i3}c += 0 if _b_domain(xb[i]{at}) else 1\n"
            f"{i2}if c == 0:\n{clean}"
            f"{i2}if c > MAX_OUTSIDE:\n"
            f"{i3}for i in range({ob}.size):\n"
            f"{i4}{ob}[i] = {exact}\n"
            f"{i3}continue\n"
            f"{i2}for t in range(0, {ob}.size, DOMAIN_CHUNK):\n"
            f"{i3}te = min(t + DOMAIN_CHUNK, {ob}.size)\n"
            f"{cviews(i3)}"
            f"{chunk}"
        )

    if o == "out":
        return head + (
            # The check inside the bulk loop (one more vcmp in it) instead of a pass of
            # its own before it: one read of x fewer. The store before the check: the
            # other order schedules the same instructions worse (gelu_a and tanhshrink
            # float64; examples/bench_vectorisation.py re-measures both choices).
            f"    ok = True\n"
            f"    for i in range(n):\n"
            f"        out[i] = {fast_all}\n"
            f"        ok &= _b_domain(x[i]{at_all})\n"
            f"    if ok:\n"
            f"        return\n"
            # Mending (x is intact): the exact kernel on the elements outside alone,
            # found per DOMAIN_CHUNK, not on the whole DOMAIN_BLOCK holding one (a few
            # scattered elements outside would otherwise cost whole blocks).
            f"{domain_blocks('    ', True)}"
        )
    return head + (
        # In place: the whole range first (at most TASK_BLOCK elements, so the second read
        # hits the cache): one plain bulk loop where everything is inside, the usual case.
        # Blocks of DOMAIN_BLOCK with a loop per block are slower there (block overhead,
        # and constants rematerialised in the nested loop).
        f"    ok = True\n"
        f"    for i in range(n):\n"
        f"        ok &= _b_domain(x[i]{at_all})\n"
        f"    if ok:\n"
        f"        for i in range(n):\n"
        f"            {o}[i] = {fast_all}\n"
        f"        return\n"
        f"{domain_blocks('    ', False)}"
    )


def _indent(code: str) -> str:
    return "".join("    " + line if line else line for line in code.splitlines(True))


def _reduce_exact(spec, outs) -> str:
    """The exact element loop of a reduction block (``_reduce_block_<p>``,
    ``_reduce_block_all``: x and g at most :data:`REDUCE_BLOCK` elements, scalar
    parameters): ``outs`` pairs buffers with spec keys, ``buf[i] = g[i] * kernel(x[i])``."""
    at = _param_args(spec)
    return ("    for i in range(x.size):\n"
            "        xi = x[i]\n"
            "        gi = g[i]\n"
            + "".join(f"        {b}[i] = gi * {_kernel_name(k)}(xi{at})\n" for b, k in outs))


def _reduce_bulk(spec, outs) -> str:
    """:func:`_reduce_exact`'s loop from the bulk kernels of ``outs``' keys, for a domain
    that is not empty: one loop of them checks the domain as it goes and the elements
    outside are then recomputed by the exact kernels (the same bits as the exact loop:
    the bulk kernels are the exact ones inside the domain), found per DOMAIN_BLOCK, then
    per DOMAIN_CHUNK. The exact kernels branch, so a loop of them stays scalar, where the
    bulk loop vectorises (the asv ``BackwardAll`` and ``BackwardParams`` benchmarks
    re-measure)."""
    at = _param_args(spec)

    def recompute(ind):
        return (f"{ind}xi = xc[i]\n"
                f"{ind}gi = g[t + i]\n"
                + "".join(f"{ind}{b}[t + i] = gi * {_kernel_name(k)}(xi{at})\n" for b, k in outs))

    return ("    ok = True\n"
            "    for i in range(x.size):\n"
            "        xi = x[i]\n"
            "        gi = g[i]\n"
            + "".join(f"        {b}[i] = gi * _b_{k}(xi{at})\n" for b, k in outs)
            + f"        ok &= _b_domain(xi{at})\n"
            "    if not ok:\n"
            "        for s in range(0, x.size, DOMAIN_BLOCK):\n"
            "            e = min(s + DOMAIN_BLOCK, x.size)\n"
            "            xb = x[s:e]\n"
            "            c = 0\n"
            "            for i in range(xb.size):\n"
            f"                c += 0 if _b_domain(xb[i]{at}) else 1\n"
            "            if c == 0:\n"
            "                continue\n"
            "            for t in range(s, e, DOMAIN_CHUNK):\n"
            "                xc = x[t:min(t + DOMAIN_CHUNK, e)]\n"
            + _one_by_one("                ", "xc", at, recompute)
            + "                if c == 0:\n"
            "                    break\n")


def _reduce_loop(spec, exact: str, bulk: str) -> str:
    """``bulk`` where the domain is not empty for these parameters and the dtype (0, with
    them, is in every such domain: see _bulk_body), else ``exact``."""
    at0 = "".join(f", _param_at(p_{p}, 0)" for p in spec.param_names)
    return (f"    if x.size == 0 or not _b_domain(_zero(x){at0}):\n"
            + _indent(exact) + "    else:\n" + _indent(bulk))


def _source(spec) -> str:
    ps = list(spec.param_names)
    # Parameters are p_<name> in the generated code: a parameter called b, n or x would
    # otherwise clash with the loop's own names (squareplus has b).
    pa = "".join(", p_" + p for p in ps)
    # kind -> (data inputs, spec key of its kernel)
    calls = {"fwd": ("x", "f"), "dx": ("x", "dx"), "bwd": ("x, g", "dx")}
    for p in ps:
        calls["d_" + p] = ("x", p)
        calls["bwd_" + p] = ("x, g", p)
    out = [f"# generated by iglu_np.backends.cpu_fast from the spec {spec.name!r}; do not edit\n"]
    for kind, (ins, key) in calls.items():
        expr = _expr(spec, ins, _kernel_name(key))
        ins_l = ins.split(", ")
        # The element loop is one function (loop_<kind>) that both the single-thread path
        # and every prange block call: one hot loop to vectorise and to inspect
        # (tools/x86_asm.py, simd_report), compiled without the parfor machinery around it.
        # loop_<kind>_a<j> is the in-place variant writing to input j (out = x, or out =
        # grad_out): given out aliasing an input, LLVM's runtime alias check sends
        # loop_<kind> to its scalar loop, an order of magnitude slower.
        for j, o in [(None, "out"), *enumerate(ins_l)]:
            sfx, oarg = variant(j), (", out" if j is None else "")
            # Views from 0: with i in range(lo, hi) Numba's negative-index wraparound stays
            # in the loop and LLVM vectorises it with gathers/scatters (slower than scalar).
            sl = "".join(f"    {a} = {a}[lo:hi]\n" for a in ins_l + ["out"] * (j is None))
            sl += "".join(f"    p_{p} = _param_slice(p_{p}, lo, hi)\n" for p in ps)
            body = (f"    for i in range({o}.size):\n"
                    f"        {o}[i] = {expr}\n")
            if key in spec.bulk:
                body = _bulk_body(spec, ins, key, o)
            out.append(
                f"def loop_{kind}{sfx}({ins}{oarg}, lo, hi{pa}):\n"
                f"{sl}"
                f"{body}\n"
                f"def run_{kind}{sfx}({ins}{oarg}, par{pa}):\n"
                f"    n = x.size\n"
                f"    if par:\n"
                f"        s = _skew({o}, n)\n"
                f"        nb = (n - s + TASK_BLOCK - 1) // TASK_BLOCK\n"
                f"        for b in prange(nb):\n"
                f"            lo = s + b * TASK_BLOCK\n"
                f"            loop_{kind}{sfx}({ins}{oarg}, 0 if b == 0 else lo,"
                f" min(lo + TASK_BLOCK, n){pa})\n"
                f"    else:\n"
                + (f"        for lo in range(0, n, TASK_BLOCK):\n"
                   f"            loop_{kind}{sfx}({ins}{oarg}, lo, min(lo + TASK_BLOCK, n){pa})\n"
                   if key in spec.bulk else
                   f"        loop_{kind}{sfx}({ins}{oarg}, 0, n{pa})\n")
            )
    for p in ps:
        body = _reduce_exact(spec, [("buf", p)])
        if p in spec.bulk:
            body = _reduce_loop(spec, body, _reduce_bulk(spec, [("buf", p)]))
        out.append(
            f"def _reduce_block_{p}(x, g, b, n{pa}):\n"
            f"    lo = b * REDUCE_BLOCK\n"
            f"    hi = min(lo + REDUCE_BLOCK, n)\n"
            f"    buf = np.empty(REDUCE_BLOCK, np.float64)\n"
            f"    x = x[lo:hi]\n"  # views from 0: see loop_<kind>
            f"    g = g[lo:hi]\n"
            f"{body}"
            f"    return _lanesum(buf, hi - lo)\n\n"
            f"def reduce_{p}(x, g, part, par{pa}):\n"
            f"    n = x.size\n"
            f"    if par:\n"
            f"        for b in prange(part.size):\n"
            f"            part[b] = _reduce_block_{p}(x, g, b, n{pa})\n"
            f"    else:\n"
            f"        for b in range(part.size):\n"
            f"            part[b] = _reduce_block_{p}(x, g, b, n{pa})\n"
        )
    if ps:
        # backward_all: grad_x and every parameter's block sums from one read of x and g,
        # with the same per-element values and block sums as run_bwd and reduce_<p>
        bufs = "".join(f"    b_{p} = np.empty(REDUCE_BLOCK, np.float64)\n" for p in ps)
        sums = "".join(f"    part[{k}, b] = _lanesum(b_{p}, hi - lo)\n" for k, p in enumerate(ps))
        outs = [("o", "dx")] + [(f"b_{p}", p) for p in ps]
        body = _reduce_exact(spec, outs)
        if all(k in spec.bulk for _, k in outs):
            body = _reduce_loop(spec, body, _reduce_bulk(spec, outs))
        elif spec.bulk.keys() & {k for _, k in outs}:
            # Some kernels bulk, some not: a loop each over the block while it is in
            # cache, so the bulk ones keep a vector loop (xsilu). One loop for all is
            # faster where they are alike (elu, squareplus), and where the domain is
            # empty (xielu float64: the one exact loop, as without bulk kernels). The asv
            # BackwardAll benchmark re-measures.
            body = _reduce_loop(spec, body, "".join(
                (_reduce_bulk if k in spec.bulk else _reduce_exact)(spec, [(b, k)])
                for b, k in outs))
        out.append(
            f"def _reduce_block_all(x, g, o, part, b, n{pa}):\n"
            f"    lo = b * REDUCE_BLOCK\n"
            f"    hi = min(lo + REDUCE_BLOCK, n)\n"
            f"    x = x[lo:hi]\n"
            f"    g = g[lo:hi]\n"
            f"    o = o[lo:hi]\n"
            f"{bufs}"
            f"{body}"
            f"{sums}\n"
            f"def reduce_all(x, g, o, part, par{pa}):\n"
            f"    n = x.size\n"
            f"    if par:\n"
            f"        for b in prange(part.shape[1]):\n"
            f"            _reduce_block_all(x, g, o, part, b, n{pa})\n"
            f"    else:\n"
            f"        for b in range(part.shape[1]):\n"
            f"            _reduce_block_all(x, g, o, part, b, n{pa})\n"
        )
    for kind, (ins, key) in calls.items():
        # run_bf16_<kind>(x[, g], out, par, *params): x, g and out bfloat16 bits (uint16),
        # scalar float32 parameters; loop_<kind> on float32 blocks widened from them, the
        # results rounded once into out. A block is read whole before its part of out is
        # written, so out may be x or g itself.
        ins_l = ins.split(", ")
        wide = "".join(f"    {a}w = np.empty(BF16_BLOCK, np.uint32)\n"
                       f"    _widen({a}[lo:hi], {a}w[:m])\n" for a in ins_l)
        fl = ", ".join(f"{a}w.view(np.float32)" for a in ins_l)
        out.append(
            f"def _bf16_block_{kind}({ins}, out, b, n{pa}):\n"
            f"    lo = b * BF16_BLOCK\n"
            f"    hi = min(lo + BF16_BLOCK, n)\n"
            f"    m = hi - lo\n"
            f"{wide}"
            f"    ow = np.empty(BF16_BLOCK, np.uint32)\n"
            f"    loop_{kind}({fl}, ow.view(np.float32), 0, m{pa})\n"
            f"    _narrow(ow[:m], out[lo:hi])\n\n"
            f"def run_bf16_{kind}({ins}, out, par{pa}):\n"
            f"    n = x.size\n"
            f"    nb = (n + BF16_BLOCK - 1) // BF16_BLOCK\n"
            f"    if par:\n"
            f"        for b in prange(nb):\n"
            f"            _bf16_block_{kind}({ins}, out, b, n{pa})\n"
            f"    else:\n"
            f"        for b in range(nb):\n"
            f"            _bf16_block_{kind}({ins}, out, b, n{pa})\n"
        )
    return "\n".join(out)


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
        src = _source(spec)
        h = cpu.kernel_hash(spec, extra=("backends/cpu_fast.py",))
        modname = f"iglu_np._generated_cpu_fast_{spec.name}_{h}"
        path = cpu.write_generated(f"fast_{spec.name}", h, src)
        scalar = cpu._module(spec).__dict__
        mod = types.ModuleType(modname)
        mod.__file__ = str(path)
        ns = mod.__dict__
        ns.update(np=np, prange=numba.prange, _param_at=_param_at, _param_slice=_param_slice,
                  _zero=_zero, _lanesum=_lanesum, _skew=_skew, TASK_BLOCK=TASK_BLOCK,
                  BF16_BLOCK=BF16_BLOCK, _widen=_widen, _narrow=_narrow,
                  REDUCE_BLOCK=REDUCE_BLOCK, DOMAIN_BLOCK=DOMAIN_BLOCK, MAX_OUTSIDE=MAX_OUTSIDE,
                  DOMAIN_CHUNK=DOMAIN_CHUNK, _same=_same, _f=scalar["_f"], _dx=scalar["_dx"])
        ns.update({k: v for k, v in scalar.items() if k.startswith("_b_")})
        for p in spec.param_names:
            ns["_d_" + p] = scalar["_d_" + p]
        sys.modules[modname] = mod
        exec(compile(src, str(path), "exec"), ns)
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
    times more, so it is only built once an array reaches ``cpu_backend.THRESHOLD`` elements."""
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
    g = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial",
                           fn.__defaults__, fn.__closure__)
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
        sig = (*ins, *((arr,) if alias is None else ()), nbt.intp, nbt.intp,
               *([t] * len(spec.param_names)))
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
# clock reads per call of >= cpu_backend.THRESHOLD elements.
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
