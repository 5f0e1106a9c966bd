"""XLA FFI handlers for the CPU: each activation's loops as compiled XLA custom calls.

:func:`handler` gives the address of a C function that XLA's typed FFI calls on its own
buffers (no copy, no Python, no GIL): kernel ``kind`` (``"fwd"``: ``y = f(x)``,
``"bwd"``: ``grad_x = grad_out * f'(x)``, ``"d_<param>"``: ``df/dparam`` elementwise) of
one activation in one dtype, its parameters given either as float64 scalar attributes
named ``p0``, ``p1``, ... in the spec's order (``"attrs"``) or as operands after the
data, each of one element or each of the data's size (``"operands"``, checked against
the parameters' domains and ``above``). The loop body is the same
compiled scalar kernel the numpy ufuncs and :mod:`iglu_np.backends.cpu.loops` call, so
the results are those of ``iglu_np.<name>`` bit for bit.

From :data:`iglu_np.backends.cpu.tiers.THRESHOLD` elements on, the work is split into
:data:`~iglu_np.backends.cpu.loops.TASK_BLOCK` chunks over XLA's intra-op thread pool:
the handler schedules a task for each other pool thread, then claims chunks itself from the
same atomic counter, and returns once every chunk is done. A task that starts late finds
no chunk left and only releases the heap descriptor it shares with the handler (the last
one out frees it), so nothing waits on a task that XLA has not started, and a pool of
size 1 or none (the API without it) leaves the handler doing the work alone, on a
descriptor on its own stack. The loop's code is in the worker only, which the handler
and its tasks share.

The handlers are generated per activation (``<cache>/xla_<name>_<hash>.py``) and kept
in Numba's on-disk cache beside the loops: a handler holds no address of the process
that compiled it (its tasks are functions of its own object code, the C library's
functions are linked by name), so a later process loads it instead of compiling it.
This module imports neither JAX nor XLA: the bridge (:mod:`iglu_np._jax_ffi`) registers
the addresses.
"""

from __future__ import annotations

import hashlib
import math
import threading

import numpy as np

from ..._kinds import Kind
from ..._spec import REGISTRY
from ..cpu import loops, tiers
from ..cpu import ufuncs as cpu

__all__ = [
    "DTYPES",
    "KINDS",
    "compile_handler",
    "generated",
    "handler",
    "namespace",
    "once",
    "source",
    "threaded",
]

KINDS = ("fwd", "bwd")
"""The kernel kinds with handlers, besides each parameter's ``d_<param>``."""
DTYPES = {np.dtype(np.float32): "f4", np.dtype(np.float64): "f8"}
"""The dtypes with handlers (float16 and bfloat16 are computed in float32 by the bridge,
as iglu_np computes them)."""

KEY_FILES = (*loops.KEY_FILES, "backends/xla/cpu.py", "backends/xla/_abi.py")

# the descriptor shared by a threaded handler and its tasks: int64 words
_REFS, _NEXT, _DONE, _NCHUNK, _N, _CHUNK, _DATA = range(7)  # _DATA: operand pointers

_lock = threading.RLock()
_mods: dict = {}
_handlers: dict = {}


def _kinds(spec) -> tuple:
    return (*KINDS, *(f"d_{p}" for p in spec.param_names))


def _domain_test(spec, j: int, v: str) -> str:
    """The condition that parameter ``j``'s value ``v`` is inside its domain (finite,
    within its bounds, above the parameter it must exceed): :func:`iglu_np._params.check`
    and the spec's ``above`` as compiled code."""
    p = spec.params[j]
    t = [f"np.isfinite({v})"]
    if p.lo > -math.inf:
        t.append(f"{v} {'>' if p.lo_open else '>='} {p.lo!r}")
    if p.hi < math.inf:
        t.append(f"{v} {'<' if p.hi_open else '<='} {p.hi!r}")
    return " and ".join(t)


def _checks(spec, ind: str, scalar: bool) -> str:
    """Lines returning an XLA error where a parameter operand is outside its domain."""
    out = []
    names = spec.param_names
    for j in range(len(names)):
        v = f"q{j}" if scalar else f"b{j}[i]"
        out.append(
            f"{ind}if not ({_domain_test(spec, j, v)}):\n{ind}    return error(frame, MSG_{j})\n"
        )
    for j, p in enumerate(spec.params):
        if p.above:
            k = names.index(p.above)
            v, w = (f"q{j}", f"q{k}") if scalar else (f"b{j}[i]", f"b{k}[i]")
            out.append(f"{ind}if not ({v} > {w}):\n{ind}    return error(frame, MSG_ABOVE_{j})\n")
    if scalar or not out:
        return "".join(out)
    body = "".join(
        "    " + line if line.strip() else line for line in "".join(out).splitlines(True)
    )
    return f"{ind}for i in range(n):\n{body}"


def _body(spec, kind: str, c: str, form: str) -> str:
    """The source of one kernel's worker, task and handler. ``form`` "attrs": the
    parameters are float64 attributes; "operands": operands after the data, all of one
    element (a scalar each) or all of the data's size. The loop is called in the worker
    only (one copy of its code per handler): the handler runs the worker on a descriptor
    of its own stack when it works alone."""
    nd = Kind.parse(kind).n_data
    k = len(spec.param_names)
    ops = nd + (k if form == "operands" else 0)
    tag = f"{kind}_{c}_{form}"
    T = f"T_{c}"
    ins = ", ".join(f"a{i}" for i in range(nd))
    # descriptor words: the operand pointers, out's, then the scalar parameters and mode
    wp, wm = _DATA + ops + 1, _DATA + ops + 1 + k
    nw = wm + 1
    scal = "".join(f", {T}(get_f64(d, {wp + j}))" for j in range(k))
    arrs = "".join(f", b{j}" for j in range(k))
    w_arr = "".join(f"    a{i} = carray(_ptr(w[{_DATA + i}]), (n,), {T})\n" for i in range(nd))
    w_arr += f"    o = carray(_ptr(w[{_DATA + ops}]), (n,), {T})\n"
    if form == "operands" and k:
        w_arr += "".join(
            f"    b{j} = carray(_ptr(w[{_DATA + nd + j}]), (n,), {T})\n" for j in range(k)
        )
        loop = (
            f"        if w[{wm}]:\n"
            f"            loop_{kind}({ins}, o, lo, min(lo + cs, n){scal})\n"
            f"        else:\n"
            f"            loop_{kind}({ins}, o, lo, min(lo + cs, n){arrs})\n"
        )
    else:
        loop = f"        loop_{kind}({ins}, o, lo, min(lo + cs, n){scal})\n"
    # the handler: the parameters (attributes, or scalar / array operands, checked)
    h = ""
    if form == "attrs":
        h += "".join(f"    q{j} = attr_f64(frame, {j})\n" for j in range(k))
        scalar = "1"
    else:
        h += f"    scalar = buffer_size(frame, {nd}) == 1\n" if k else "    scalar = True\n"
        h += "".join(
            f"    if buffer_size(frame, {nd + j}) != (1 if scalar else n):\n"
            "        return error(frame, MSG_SIZE)\n"
            for j in range(k)
        )
        h += "".join(
            f"    b{j} = carray(_ptr(buffer_data(frame, {nd + j}, False)), (n,), {T})\n"
            f"    q{j} = np.float64(b{j}[0]) if scalar else 0.0\n"
            for j in range(k)
        )
        if k:
            h += "    if scalar:\n" + _checks(spec, "        ", True)
            chk = _checks(spec, "        ", False)
            h += "    else:\n" + chk if chk else ""
        scalar = "scalar"
    store = "".join(f"    w[{_DATA + i}] = buffer_data(frame, {i}, False)\n" for i in range(ops))
    store += f"    w[{_DATA + ops}] = buffer_data(frame, 0, True)\n"
    store += "".join(f"    put_f64(d, {wp + j}, q{j})\n" for j in range(k))
    store += f"    w[{wm}] = 1 if {scalar} else 0\n"
    head = (
        f"{h}    nt = 0\n"
        "    if n >= THRESHOLD:\n"
        "        nt = min(pool_threads(frame) - 1, (n - 1) // TASK_BLOCK)\n"
    )
    count = "n = buffer_size(frame, 0)"
    return threaded(tag, nw, w_arr, loop, head, count, "n", "TASK_BLOCK", store)


def threaded(tag, nw, arrays, loop, head, count, n, chunk, store) -> str:
    """The source of ``_work_<tag>``, ``task_<tag>`` and ``handler_<tag>``: the handler
    shares the work with XLA's pool through a descriptor of ``nw`` words. ``count`` (a
    line) sets the handler's number of work items, named ``n``; ``head`` (lines) its other
    values and ``nt``, the pool threads to ask for; ``store`` (lines) writes the operands
    into the descriptor. The items go in chunks of ``chunk`` (threaded) or all in one; the
    worker views its arrays (``arrays``, lines) and runs ``loop`` (lines, indented 8) on
    the items ``lo`` to ``min(lo + cs, n)`` of each chunk it claims."""
    return f"""

def _work_{tag}(d):
    w = words(d, {nw})
    {n}, cs, nc = w[{_N}], w[{_CHUNK}], w[{_NCHUNK}]
{arrays}    while True:
        c = fetch_add(d + {8 * _NEXT}, 1)
        if c >= nc:
            break
        lo = c * cs
{loop}        fetch_add(d + {8 * _DONE}, 1)


def task_{tag}(d):
    env = ieee_env()
    _work_{tag}(d)
    restore_env(env)
    if fetch_add(d + {8 * _REFS}, -1) == 1:
        free(d)


def handler_{tag}(frame):
    if stage(frame) != EXECUTE:
        return 0
    {count}
{head}    d = malloc({8 * nw}) if nt > 0 else 0
    if d == 0:  # alone (small data, no pool, or no memory): the descriptor on the stack
        nt = 0
        d = stack_words({nw})
    cs = {chunk} if nt > 0 else max({n}, 1)
    nc = ({n} + cs - 1) // cs
    w = words(d, {nw})
    w[{_REFS}], w[{_NEXT}], w[{_DONE}] = 1 + nt, 0, 0
    w[{_NCHUNK}], w[{_N}], w[{_CHUNK}] = nc, {n}, cs
{store}    env = ieee_env()
    for t in range(nt):
        if not schedule(frame, c_callback(task_{tag}), d):
            fetch_add(d + {8 * _REFS}, -1)
    _work_{tag}(d)
    while load(d + {8 * _DONE}) < nc:
        sched_yield()
    restore_env(env)
    if nt > 0 and fetch_add(d + {8 * _REFS}, -1) == 1:
        free(d)
    return 0
"""


def source(spec) -> str:
    """The generated module of one activation: every kind, dtype and parameter form."""
    parts = [f"# generated by iglu_np.backends.xla.cpu from the spec {spec.name!r}; do not edit\n"]
    forms = ("attrs", "operands") if spec.param_names else ("attrs",)
    for kind in _kinds(spec):
        for c in DTYPES.values():
            for form in forms:
                parts.append(_body(spec, kind, c, form))
    return "".join(parts)


def _messages(spec) -> dict:
    out = {}
    for j, p in enumerate(spec.params):
        out[f"MSG_{j}"] = (
            f"{spec.name}: parameter {p.name} has a value outside its domain {p.domain}"
        )
        if p.above:
            out[f"MSG_ABOVE_{j}"] = f"{spec.name}: {p.name} must be greater than {p.above}"
    out["MSG_SIZE"] = (
        f"{spec.name}: each parameter operand must have one element or the data's size"
    )
    return out


def namespace(**names) -> dict:
    """The globals of a generated handler module: the FFI ABI's helpers, Numba's carray,
    the threading constants and ``names`` (the loops the handlers call)."""
    from numba import carray, types

    from . import _abi

    ns = {k: getattr(_abi, k) for k in _abi.__all__}
    ns.update(
        carray=carray,
        _ptr=_abi._ptr,
        EXECUTE=_abi.EXECUTE,
        THRESHOLD=tiers.THRESHOLD,
        TASK_BLOCK=loops.TASK_BLOCK,
        T_f4=types.float32,
        T_f8=types.float64,
        np=np,
    )
    ns.update(names)
    return ns


def generated(kind: str, spec, key_files, src: str, ns: dict):
    """The handler module ``src`` of ``spec`` (``<cache>/<kind>_<name>_<hash>.py``) with
    its workers and tasks compiled. The threshold is compiled in: a process that sets
    another one compiles apart."""
    from numba import njit

    key = f"{cpu.kernel_hash(spec, extra=key_files)}\0threshold {tiers.THRESHOLD}"
    h = hashlib.sha256(key.encode()).hexdigest()[:16]
    mod = cpu.generated_module(kind, spec, h, src, ns)
    for k in list(mod.__dict__):
        if k.startswith(("_work_", "task_")):
            mod.__dict__[k] = njit(mod.__dict__[k], nogil=True)
    return mod


def compile_handler(mod, fname: str) -> int:
    """The address of handler ``fname`` of the generated module ``mod``, compiled as
    ``numba.cfunc(intp(intp), nogil=True)`` with the cache that survives damage (it
    holds no address of this process, so Numba's disk cache keeps it)."""
    from numba import types
    from numba.core.ccallback import CFunc

    from ..cpu import _cache

    fn = CFunc(mod.__dict__[fname], ((types.intp,), types.intp), {}, {"nogil": True})
    if loops._CACHE:
        loops._serialised_saves(_cache.enable(fn))
    fn.compile()
    mod.__dict__.setdefault("_keep", []).append(fn)
    return fn.address


def once(table: dict, key, build):
    """``table[key]``, made by ``build()`` the first time, under the handlers' lock (one
    for every generated handler module: building one may build the modules it calls)."""
    v = table.get(key)
    if v is None:
        with _lock:
            v = table.get(key)
            if v is None:
                v = table[key] = build()
    return v


def _module(spec):
    def build():
        from . import _abi

        fast = loops._module(spec).__dict__
        ns = namespace(**{k: v for k, v in fast.items() if k.startswith("loop_")})
        ns.update({k: _abi.message(v) for k, v in _messages(spec).items()})
        return generated("xla", spec, KEY_FILES, source(spec), ns)

    return once(_mods, spec.name, build)


def variants(spec) -> tuple:
    """Every ``(kind, params)`` handler of ``spec`` a JAX call may take: the attributes form
    serves the forward and the backward, the operands form those and each parameter's
    derivative."""
    attrs = tuple((k, "attrs") for k in KINDS)
    return attrs + tuple((k, "operands") for k in (*KINDS, *(f"d_{p}" for p in spec.param_names)))


def handler(name: str, kind: str, dtype, params: str = "attrs") -> int:
    """The address of the XLA FFI handler of kernel ``kind`` of activation ``name`` on
    ``dtype`` (float32 or float64) data, parameters as ``"attrs"`` (float64 scalars
    ``p0``, ``p1``, ... in the spec's order) or ``"operands"`` (after the data, each of
    one element or each of the data's size; values outside a parameter's domain return
    XLA an error naming it). Built on first use."""
    c = DTYPES[np.dtype(dtype)]
    return once(
        _handlers,
        (name, kind, c, params),
        lambda: compile_handler(_module(REGISTRY[name]), f"handler_{kind}_{c}_{params}"),
    )
