"""CPU fast path: njit loop kernels (single-thread or ``prange``) from the same spec kernels.

The numpy ufuncs of :mod:`iglu_np.backends.cpu` are general (any layout, broadcasting,
casting) but slow where it matters most: a scalar parameter reaches a ``@vectorize``
loop with stride 0, which keeps Numba on its generic scalar loop, and a ufunc runs on one
thread. For the common case

* ``x`` (and ``grad_out``) a C-contiguous float32/float64 ``numpy.ndarray``, same dtype,
* every parameter a scalar or an array of ``x``'s shape,
* ``out`` None or a C-contiguous array of ``x``'s dtype and shape (``out is x`` is fine),

:func:`run` calls an ``@njit(parallel=True)`` loop over the flat arrays instead. The loop
body is the *same* compiled scalar kernel the ufunc calls (rebound with vectorisable math,
no fastmath), so the fast path and ``.ufunc`` agree bit for bit, and a threaded run agrees
bit for bit with a single-thread one (elementwise work has no order). Arrays of at least
:data:`THRESHOLD` elements run on ``numba.get_num_threads()`` threads (Numba's settings:
``NUMBA_NUM_THREADS``, ``numba.set_num_threads``); smaller ones stay on the calling thread,
where a thread launch would cost more than it saves.

Parameter gradients (``backward_params``) with scalar parameters are reduced in the loop:
fixed blocks of :data:`RBLOCK` elements are summed in float64 with 8 interleaved partial
sums into a per-block slot, and the block sums are added in order at the end. The block
layout does not depend on the thread count, so the result does not either, and no
elementwise temporary is allocated.
"""
from __future__ import annotations

import os
import sys
import types

import numba
import numpy as np
from numba import types as nbt
from numba.extending import overload

from .._spec import REGISTRY
from . import cpu

__all__ = ["run", "backward_params", "THRESHOLD", "kernel"]

_F32 = np.dtype(np.float32)
_CACHE = os.environ.get("IGLU_NP_FAST_NOCACHE", "") == ""
_F64 = np.dtype(np.float64)

# Elements per thread task in parallel loops (multiple of 64: whole cache lines and SIMD
# vectors per block) and per reduction block.
BLOCK = 1 << 15
RBLOCK = 1 << 12


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
    # Measured with examples/bench_threshold.py (2 cores, AVX-512): below ~2**16 elements
    # the prange launch (~10-20 us) costs more than the second core saves.
    return 1 << 16


THRESHOLD = _threshold_default()


def _min_size_default() -> int:
    return _env_int("IGLU_NP_FAST_MIN_SIZE", 2048)


# Below MIN_SIZE elements the first WARM_CALLS calls of an activation/kind/dtype run the
# compiled numpy ufunc instead of the njit loop (same scalar kernel, bit-identical
# results). Its scalar-parameter loop is not vectorised (iglu: ~15 us at 1,000 elements
# against ~6 through the loop, plus ~3 us of errstate), but compiling the njit loop costs
# seconds per activation x kind x dtype: code that calls once (tests, one-off use) never
# pays it, hot code pays it once. Calls with array parameters or reductions below
# MIN_SIZE always take the ufunc.
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


# --------------------------------------------------------------------------- helpers
def _at(p, i):
    """``p[i]`` for an array parameter, ``p`` for a scalar (resolved at compile time)."""
    raise NotImplementedError  # only called from compiled code


@overload(_at, inline="always")
def _ov_at(p, i):
    if isinstance(p, nbt.Array):
        return lambda p, i: p[i]
    return lambda p, i: p


def _sl(p, lo, hi):
    """``p[lo:hi]`` for an array parameter, ``p`` for a scalar (resolved at compile time)."""
    raise NotImplementedError  # only called from compiled code


@overload(_sl, inline="always")
def _ov_sl(p, lo, hi):
    if isinstance(p, nbt.Array):
        return lambda p, lo, hi: p[lo:hi]
    return lambda p, lo, hi: p


@numba.njit(inline="always", error_model="numpy", cache=True)
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


# --------------------------------------------------------------------------- generation
def _source(spec) -> str:
    ps = list(spec.param_names)
    # Parameters are p_<name> in the generated code: a parameter called b, n or x would
    # otherwise clash with the loop's own names (squareplus has b).
    pa = "".join(", p_" + p for p in ps)
    at = "".join(f", _at(p_{p}, i)" for p in ps)
    calls = {"fwd": ("x", f"_f(x[i]{at})"), "dx": ("x", f"_dx(x[i]{at})"),
             "bwd": ("x, g", f"g[i] * _dx(x[i]{at})")}
    for p in ps:
        calls["d_" + p] = ("x", f"_d_{p}(x[i]{at})")
        calls["bwd_" + p] = ("x, g", f"g[i] * _d_{p}(x[i]{at})")
    out = [f"# generated by iglu_np.backends.cpu_fast from the spec {spec.name!r}; do not edit\n"]
    for kind, (ins, expr) in calls.items():
        # The element loop is one function (l_<kind>) that both the single-thread path
        # and every prange block call: one hot loop to vectorise and to inspect
        # (simd_report), compiled without the parfor machinery around it.
        # Views from 0: with i in range(lo, hi) Numba's negative-index wraparound stays
        # in the loop and LLVM vectorises it with gathers/scatters (slower than scalar).
        sl = "".join(f"    {a} = {a}[lo:hi]\n" for a in ins.split(", ") + ["out"])
        sl += "".join(f"    p_{p} = _sl(p_{p}, lo, hi)\n" for p in ps)
        out.append(
            f"def l_{kind}({ins}, out, lo, hi{pa}):\n"
            f"{sl}"
            f"    for i in range(out.size):\n"
            f"        out[i] = {expr}\n\n"
            f"def k_{kind}({ins}, out, par{pa}):\n"
            f"    n = x.size\n"
            f"    if par:\n"
            f"        nb = (n + BLOCK - 1) // BLOCK\n"
            f"        for b in prange(nb):\n"
            f"            lo = b * BLOCK\n"
            f"            l_{kind}({ins}, out, lo, min(lo + BLOCK, n){pa})\n"
            f"    else:\n"
            f"        l_{kind}({ins}, out, 0, n{pa})\n"
        )
    for p in ps:
        expr = f"g[i] * _d_{p}(x[i]{at})"
        out.append(
            f"def _blk_{p}(x, g, b, n{pa}):\n"
            f"    lo = b * RBLOCK\n"
            f"    hi = min(lo + RBLOCK, n)\n"
            f"    buf = np.empty(RBLOCK, np.float64)\n"
            f"    x = x[lo:hi]\n"  # views from 0: see l_<kind>
            f"    g = g[lo:hi]\n"
            f"    for i in range(x.size):\n"
            f"        buf[i] = {expr}\n"
            f"    return _lanesum(buf, hi - lo)\n\n"
            f"def r_{p}(x, g, part, par{pa}):\n"
            f"    n = x.size\n"
            f"    if par:\n"
            f"        for b in prange(part.size):\n"
            f"            part[b] = _blk_{p}(x, g, b, n{pa})\n"
            f"    else:\n"
            f"        for b in range(part.size):\n"
            f"            part[b] = _blk_{p}(x, g, b, n{pa})\n"
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
        h = cpu.source_hash()
        modname = f"iglu_np._generated_cpu_fast_{spec.name}_{h}"
        path = cpu._gen_dir() / f"fast_{spec.name}_{h}.py"
        if not path.exists() or path.read_text() != src:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(src)
            os.replace(tmp, path)
        scalar = cpu._module(spec).__dict__
        mod = types.ModuleType(modname)
        mod.__file__ = str(path)
        ns = mod.__dict__
        ns.update(np=np, prange=numba.prange, _at=_at, _sl=_sl, _lanesum=_lanesum, BLOCK=BLOCK,
                  RBLOCK=RBLOCK, _f=scalar["_f"], _dx=scalar["_dx"])
        for p in spec.param_names:
            ns["_d_" + p] = scalar["_d_" + p]
        sys.modules[modname] = mod
        exec(compile(src, str(path), "exec"), ns)
        for kind in cpu.kernel_kinds(spec):
            ns["l_" + kind] = numba.njit(error_model="numpy", cache=_CACHE)(ns["l_" + kind])
        for p in spec.param_names:
            ns[f"_blk_{p}"] = numba.njit(inline="always", error_model="numpy", cache=True)(
                ns[f"_blk_{p}"])
        _mods[spec.name] = mod
        return mod


def kernel(name: str, kind: str, parallel: bool = True):
    """The njit loop kernel ``k_<kind>(x[, g], out, par, *params)`` or, for
    ``kind = "r_<param>"``, the block reduction ``r_<param>(x, g, part, par, *params)``.

    ``parallel=False`` gives the single-thread build of the same function (``prange`` is
    ``range``; call it with ``par=False``): compiling the parfor version costs several
    times more, so it is only built once an array reaches :data:`THRESHOLD` elements."""
    key = (name, kind, parallel)
    k = _kernels.get(key)
    if k is None:
        mod = _module(REGISTRY[name])
        fn = getattr(mod, kind if kind.startswith("r_") else "k_" + kind)
        k = numba.njit(parallel=parallel, error_model="numpy", cache=_CACHE)(fn)
        _kernels[key] = k
    return k


# --------------------------------------------------------------------------- plans
_plans: dict = {}


def plan(name: str, kind: str, dt: np.dtype):
    """``(loop, kernel)`` for ``kind`` on 1-D C-contiguous arrays of ``dt`` with scalar
    parameters: ``loop`` is the compiled entry point of ``l_<kind>(x[, g], out, lo, hi,
    *params)`` (no type dispatch: ~0.2 us cheaper per call than the dispatcher) and
    ``kernel`` the ``k_<kind>`` dispatcher for threaded runs. The caller guarantees the
    argument types; parameters may be Python floats or numpy scalars."""
    key = (name, kind, dt.char)
    p = _plans.get(key)
    if p is None:
        spec = REGISTRY[name]
        t = numba.from_dtype(dt)
        arr = nbt.Array(t, 1, "C")
        ins = (arr, arr) if kind.startswith("bwd") else (arr,)
        sig = (*ins, arr, nbt.intp, nbt.intp, *([t] * len(spec.param_names)))
        loop = getattr(_module(spec), "l_" + kind)
        loop.compile(sig)
        p = _plans[key] = (loop.overloads[sig].entry_point, kernel(name, kind))
    return p


# --------------------------------------------------------------------------- dispatch
def _param(v, dt, shape):
    """A parameter as the kernel takes it: a numpy scalar of dtype ``dt``, a flat
    contiguous array of x's shape, or None when the fast path does not apply."""
    tv = type(v)
    if tv is float or tv is int:
        return dt.type(v)
    if isinstance(v, np.generic):
        return dt.type(v)
    if isinstance(v, np.ndarray):
        if v.ndim == 0:
            return dt.type(v[()])
        if v.shape == shape:
            return np.ascontiguousarray(v, dtype=dt).reshape(-1)
    return None


def _flat_in(a, dt, shape):
    if type(a) is not np.ndarray or a.dtype != dt or a.shape != shape or not a.flags.c_contiguous:
        return None
    return a.reshape(-1)


def _parallel(n: int) -> bool:
    return n >= THRESHOLD and numba.get_num_threads() > 1


def run(act, kind: str, vals: list, cdt, out, n_data: int):
    """Compute ``kind`` through the fast path, or return None when it does not apply."""
    if cdt is not _F32 and cdt is not _F64 and cdt != _F32 and cdt != _F64:
        return None
    x = vals[0]
    if type(x) is not np.ndarray or x.ndim == 0:
        return None
    shape = x.shape
    xf = _flat_in(x, cdt, shape)
    if xf is None or xf.size < MIN_SIZE:
        return None
    ins = [xf]
    if n_data == 2:
        gf = _flat_in(vals[1], cdt, shape)
        if gf is None:
            return None
        ins.append(gf)
    ps = []
    for v in vals[n_data:]:
        pv = _param(v, cdt, shape)
        if pv is None:
            return None
        ps.append(pv)
    if out is None:
        o = np.empty(shape, cdt)
    else:
        if out.dtype != cdt or out.shape != shape or not out.flags.c_contiguous:
            return None
        # Exact aliasing (out is x) is safe elementwise; partial overlap is left to numpy,
        # which buffers it.
        for a in vals[:n_data]:
            if a is not out and np.may_share_memory(a, out) and (
                a.__array_interface__["data"][0] != out.__array_interface__["data"][0]
            ):
                return None
        for p in ps:
            if isinstance(p, np.ndarray) and np.may_share_memory(p, out):
                return None
        o = out
    par = _parallel(xf.size)
    kernel(act.name, kind, par)(*ins, o.reshape(-1), par, *ps)
    return o


def backward_params(act, vals: list, cdt):
    """dict param -> 0-d gradient when every parameter is a scalar (else None)."""
    if cdt != _F32 and cdt != _F64:
        return None
    x = vals[0]
    if type(x) is not np.ndarray:
        return None
    shape = x.shape
    xf = _flat_in(x, cdt, shape)
    gf = _flat_in(vals[1], cdt, shape)
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
    n = xf.size
    if n < MIN_SIZE:
        # small: the ufunc's elementwise gradient, summed in float64 like the blocks below
        res = {}
        with np.errstate(all="ignore"):
            for p in act.param_names:
                full = act._ufunc("bwd_" + p)(xf, gf, *ps)
                res[p] = np.asarray(cdt.type(np.sum(full, dtype=np.float64)))
        return res
    part = np.empty(max(1, -(-n // RBLOCK)), np.float64)
    par = _parallel(n)
    res = {}
    for p in act.param_names:
        if n == 0:
            part[:] = 0.0
        else:
            kernel(act.name, "r_" + p, par)(xf, gf, part, par, *ps)
        res[p] = np.asarray(cdt.type(part.sum()))
    return res


# --------------------------------------------------------------------------- diagnostics
import re as _re

# Calls into Numba's own runtime (thread pool, NRT, GIL, error printing) are not part of
# the element loop; anything else called from a kernel is a libm/external function.
_RUNTIME = _re.compile(
    r"^(get_num_threads|set_num_threads|get_parallel_chunksize|set_parallel_chunksize|"
    r"get_sched_size|allocate_sched|deallocate_sched|do_scheduling_(un)?signed|"
    r"numba_\w+|NRT_\w+|Py\w+|_Py\w+|printf|__gufunc__\.\S+|get_thread_id|memset|memcpy|"
    r"memmove)$"
)
# Packed floating-point arithmetic on 256/512-bit registers (moves, shuffles and
# broadcasts excluded: they appear in scalar code too).
_PACKED = _re.compile(
    r"^\s*(v(?:fn?m(?:add|sub)\w*|add|sub|mul|div|max|min|sqrt|rcp14|rsqrt14|cmp\w*|blendm|"
    r"blendv|fixupimm|rndscale|getexp|getmant|scalef|range|and|andn|or|xor|cvt\w+)p[sd])\s+(.*)$"
)
_GATHER = _re.compile(r"^\s*v(p?gather|p?scatter)\w*\s")
_LABEL = _re.compile(r"^(\.?[\w.$]+):")
_JUMP = _re.compile(r"^\s*j\w+\s+(\.\w+)")
_CALL_REG = _re.compile(r"^\s*callq?\s+\*%(\w+)")
_CALL_SYM = _re.compile(r"^\s*callq?\s+([\w.$@]+)")
_MOVABS = _re.compile(r"^\s*movabsq\s+\$([\w.$@]+),\s*%(\w+)")


def _functions(asm: str) -> dict:
    """Split an assembly listing into ``{function label: [lines]}``."""
    funcs, cur = {}, None
    for line in asm.splitlines():
        m = _LABEL.match(line)
        if m and not m.group(1).startswith(".") and not line.startswith("\t"):
            cur = m.group(1)
            funcs[cur] = []
        elif cur is not None:
            funcs[cur].append(line)
    return funcs


def _loops(lines: list) -> list:
    """(start, end) line ranges of loops: a label and the last backward jump to it."""
    where = {}
    spans = {}
    for i, line in enumerate(lines):
        m = _LABEL.match(line)
        if m:
            where[m.group(1)] = i
            continue
        m = _JUMP.match(line)
        if m and m.group(1) in where:
            spans[m.group(1)] = (where[m.group(1)], i)
    return sorted(spans.values())


def _calls(lines: list) -> list:
    regs, out = {}, []
    for line in lines:
        m = _MOVABS.match(line)
        if m:
            regs[m.group(2)] = m.group(1)
            continue
        m = _CALL_REG.match(line)
        if m:
            out.append(regs.get(m.group(1), "*%" + m.group(1)))
            continue
        m = _CALL_SYM.match(line)
        if m:
            out.append(m.group(1))
    return out


def _loop_stats(lines: list) -> dict:
    """Packed-SIMD and external-call facts of the loops of one function."""
    best_packed, vec_loops, ext = 0, 0, set()
    for a, b in _loops(lines):
        body = lines[a:b + 1]
        packed = 0
        for line in body:
            m = _PACKED.match(line)
            if m and ("%ymm" in m.group(2) or "%zmm" in m.group(2)):
                packed += 1
        calls = [c for c in _calls(body) if not _RUNTIME.match(c)]
        ext.update(calls)
        # gathers/scatters: vectorised addressing that is slower than scalar code
        gather = any(_GATHER.match(line) for line in body)
        if packed and not calls and not gather:
            vec_loops += 1
        best_packed = max(best_packed, packed)
    return {"packed": best_packed, "simd": vec_loops > 0, "calls": sorted(ext)}


def simd_report(name: str, kind: str, dtype) -> dict:
    """Whether the fast-path loops of ``kind`` vectorise, from the compiled assembly.

    Inspects ``l_<kind>``, the element loop that the single-thread path and every prange
    block of ``k_<kind>`` call, compiled for ``dtype`` with scalar parameters. Returns
    ``{"simd": bool, "packed": int, "libm": [symbols]}``: ``simd`` is true when a loop
    contains packed floating-point arithmetic on ymm/zmm registers and calls nothing;
    ``packed`` is the largest count of such instructions in one loop; ``libm`` lists the
    non-runtime functions called from inside any loop (libm's ``atanf``...).
    """
    dt = np.dtype(dtype)
    nbt_dt = numba.from_dtype(dt)
    arr = nbt.Array(nbt_dt, 1, "C")
    spec = REGISTRY[name]
    ins = [arr, arr] if kind.startswith("bwd") else [arr]
    sig = (*ins, arr, nbt.intp, nbt.intp, *([nbt_dt] * len(spec.param_names)))
    # A fresh, uncached compile: code loaded from Numba's disk cache has no assembly.
    loop = numba.njit(error_model="numpy", cache=False)(getattr(_module(spec), "l_" + kind).py_func)
    loop.compile(sig)
    st = {"packed": 0, "simd": False, "calls": []}
    for fname, lines in _functions(loop.inspect_asm(sig)).items():
        # skip the Python and C-callable wrappers around the function itself
        if "l_" + kind in fname and not fname.startswith(("_ZN7cpython", "cfunc.")):
            st = _loop_stats(lines)
            break
    else:
        raise RuntimeError(f"simd_report: no assembly for {name}.l_{kind}")
    return {"simd": st["simd"], "packed": st["packed"], "libm": st["calls"]}

