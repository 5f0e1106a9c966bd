"""XLA FFI handlers for the gated forms on the CPU: the fused gated loops as custom calls.

:func:`handler` gives the address of the handler of one activation's gated ``op``
(``"fwd"``: ``act(gate) * up``; ``"bwd"``: the gradients of gate and up) in one loop
layout (:data:`iglu_np.backends.cpu.gated_source.LAYOUTS`), for ``x`` holding both halves
(``operands=1``) or gate and up given apart (``operands=2``), in one dtype. Its operands
are the data (``x``; or ``gate, up``; then ``grad_out`` for the backward) and its results
the output (or ``grad_x``; or ``d_gate, d_up``). The geometry and the scalars are float64
attributes, sorted by name ``a00``, ``a01``, ...: rows, columns, the gate's and up's
offsets, the row stride (:func:`iglu_np.backends.cpu.gated.geometry`), the clamp limit,
up's shift and the activation's parameters in the spec's order. Each task of the loops
(a row, at most ``GLU_BLOCK`` columns) is the same call of the same compiled function as
for ``iglu_np.<form>`` on numpy arrays, so the bits are the same.

From :data:`iglu_np.backends.cpu.tiers.THRESHOLD` outputs on, the tasks are shared with
XLA's intra-op pool as :mod:`.cpu` shares chunks (an atomic counter, a heap descriptor
released by the last user, the handler working too). The handlers are generated per
activation (``<cache>/xla_gated_<name>_<hash>.py``) and kept in Numba's disk cache.
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np

from ..._spec import REGISTRY
from ..cpu import gated as cpu_gated
from ..cpu import loops, tiers
from ..cpu import ufuncs as cpu
from ..cpu.gated_source import LAYOUTS
from .cpu import DTYPES

__all__ = ["OPS", "handler", "source"]

OPS = ("fwd", "bwd")
KEY_FILES = (*cpu_gated.KEY_FILES, "backends/xla/gated.py", "backends/xla/_abi.py")
GEOMETRY = 5  # rows, columns, gate offset, up offset, row stride

_REFS, _NEXT, _DONE, _NCHUNK, _N, _CHUNK, _DATA = range(7)
_lock = threading.Lock()
_mods: dict = {}
_handlers: dict = {}


def _slots(op: str, operands: int):
    """The loop's array arguments as ``(buffer index, is a result)``."""
    gate, up = (0, False), ((0 if operands == 1 else 1), False)
    if op == "fwd":
        return [gate, up, (0, True)]
    go = (operands, False)
    og = (0, True)
    ou = (0 if operands == 1 else 1, True)
    return [gate, up, go, og, ou]


def _body(spec, op: str, lay: str, operands: int, c: str) -> str:
    k = len(spec.param_names)
    tag = f"{op}_{lay}_{operands}_{c}"
    T = f"T_{c}"
    slots = _slots(op, operands)
    ns = len(slots)
    wg = _DATA + 2 * ns  # geometry words
    wf = wg + GEOMETRY  # float64 words: lim, shift, the parameters
    nw = wf + 2 + k
    arrays = "".join(
        f"    s{j} = carray(_ptr(w[{_DATA + 2 * j}]), (w[{_DATA + 2 * j + 1}],), {T})\n"
        for j in range(ns)
    )
    scal = ", ".join(f"{T}(get_f64(d, {wf + j}))" for j in range(2 + k))
    geo = ", ".join(f"w[{wg + j}]" for j in range(GEOMETRY))
    args = ", ".join(f"s{j}" for j in range(ns))
    store = "".join(
        f"    w[{_DATA + 2 * j}] = buffer_data(frame, {i}, {ret})\n"
        f"    w[{_DATA + 2 * j + 1}] = {'result_size' if ret else 'buffer_size'}(frame, {i})\n"
        for j, (i, ret) in enumerate(slots)
    )
    store += "".join(f"    w[{wg + j}] = np.int64(attr_f64(frame, {j}))\n" for j in range(GEOMETRY))
    store += "".join(
        f"    put_f64(d, {wf + j}, attr_f64(frame, {GEOMETRY + j}))\n" for j in range(2 + k)
    )
    return f"""

def _work_{tag}(d):
    w = words(d, {nw})
    nt, cs, nc = w[{_N}], w[{_CHUNK}], w[{_NCHUNK}]
{arrays}    while True:
        c = fetch_add(d + {8 * _NEXT}, 1)
        if c >= nc:
            break
        lo = c * cs
        glu_{op}_{lay}({args}, {geo}, lo, min(lo + cs, nt), {scal})
        fetch_add(d + {8 * _DONE}, 1)


def task_{tag}(d):
    env = ieee_env()
    _work_{tag}(d)
    restore_env(env)
    if fetch_add(d + {8 * _REFS}, -1) == 1:
        free(d)


def handler_{tag}(frame):
    if stage(frame) != EXECUTE:
        return 0
    rows = np.int64(attr_f64(frame, 0))
    cols = np.int64(attr_f64(frame, 1))
    nt = rows * ((cols + GLU_BLOCK - 1) // GLU_BLOCK)
    nth = 0
    if rows * cols >= THRESHOLD and nt > 1:
        nth = min(pool_threads(frame) - 1, nt - 1)
    d = malloc({8 * nw}) if nth > 0 else 0
    if d == 0:
        nth = 0
        d = stack_words({nw})
    cs = 1 if nth > 0 else max(nt, 1)
    nc = (nt + cs - 1) // cs
    w = words(d, {nw})
    w[{_REFS}], w[{_NEXT}], w[{_DONE}] = 1 + nth, 0, 0
    w[{_NCHUNK}], w[{_N}], w[{_CHUNK}] = nc, nt, cs
{store}    env = ieee_env()
    for t in range(nth):
        if not schedule(frame, c_callback(task_{tag}), d):
            fetch_add(d + {8 * _REFS}, -1)
    _work_{tag}(d)
    while load(d + {8 * _DONE}) < nc:
        sched_yield()
    restore_env(env)
    if nth > 0 and fetch_add(d + {8 * _REFS}, -1) == 1:
        free(d)
    return 0
"""


def source(spec) -> str:
    """The generated module of one activation's gated handlers: every op, layout, operand
    count and dtype."""
    parts = [
        f"# generated by iglu_np.backends.xla.gated from the spec {spec.name!r}; do not edit\n"
    ]
    for op in OPS:
        for lay in LAYOUTS:
            for operands in (1, 2):
                if operands == 2 and lay != "s1":
                    continue  # gate and up apart are always elementwise
                for c in DTYPES.values():
                    parts.append(_body(spec, op, lay, operands, c))
    return "".join(parts)


def _module(spec):
    mod = _mods.get(spec.name)
    if mod is not None:
        return mod
    with _lock:
        mod = _mods.get(spec.name)
        if mod is not None:
            return mod
        from numba import carray, njit, types

        from . import _abi

        glu = cpu_gated._module(spec).__dict__
        ns = {k: getattr(_abi, k) for k in _abi.__all__}
        ns.update(
            carray=carray,
            _ptr=_abi._ptr,
            EXECUTE=_abi.EXECUTE,
            THRESHOLD=tiers.THRESHOLD,
            GLU_BLOCK=cpu_gated.GLU_BLOCK,
            T_f4=types.float32,
            T_f8=types.float64,
            np=np,
        )
        ns.update({k: v for k, v in glu.items() if k.startswith("glu_")})
        key = f"{cpu.kernel_hash(spec, extra=KEY_FILES)}\0threshold {tiers.THRESHOLD}"
        h = hashlib.sha256(key.encode()).hexdigest()[:16]
        mod = cpu.generated_module("xla_gated", spec, h, source(spec), ns)
        for name in list(mod.__dict__):
            if name.startswith(("_work_", "task_")):
                mod.__dict__[name] = njit(mod.__dict__[name], nogil=True)
        _mods[spec.name] = mod
        return mod


def handler(name: str, op: str, layout: str, operands: int, dtype) -> int:
    """The address of the handler of activation ``name``'s gated ``op`` in loop
    ``layout`` with ``operands`` data operands (1: x; 2: gate and up) on float32 or
    float64 data. Built on first use."""
    c = DTYPES[np.dtype(dtype)]
    key = (name, op, layout, operands, c)
    addr = _handlers.get(key)
    if addr is not None:
        return addr
    from numba import types
    from numba.core.ccallback import CFunc

    from ..cpu import _cache

    mod = _module(REGISTRY[name])
    with _lock:
        addr = _handlers.get(key)
        if addr is not None:
            return addr
        sig = ((types.intp,), types.intp)
        fn = CFunc(mod.__dict__[f"handler_{op}_{layout}_{operands}_{c}"], sig, {}, {"nogil": True})
        if loops._CACHE:
            loops._serialised_saves(_cache.enable(fn))
        fn.compile()
        mod.__dict__.setdefault("_keep", []).append(fn)
        _handlers[key] = addr = fn.address
    return addr
