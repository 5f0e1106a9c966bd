"""CPU gated loops: ``act(gate) * up`` and its backward in one pass over numpy arrays.

The loops (:mod:`.gated_source`) read the gate and up halves where they lie in ``x`` (or
in two arrays of one shape), so a forward moves two elements in and one out and a
backward three in and two out, and they run on Numba's threads from ``tiers.THRESHOLD``
output elements under the busy-machine guard of :mod:`.loops`. They take C-contiguous
float32/float64 operands and scalar parameters within float32's range; :func:`forward`
and :func:`backward` return None for anything else, and :mod:`iglu_np._gated` composes
the result from the activation's own kernels instead (the same bits: the fused loops
evaluate the same scalar kernels and the same products).
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..._dtypes import F64, fused_dtype, typed
from ..._spec import REGISTRY
from . import tiers
from .gated_source import source as _source

__all__ = ["GLU_BLOCK", "forward", "backward", "geometry", "ready"]

#: Columns per task: a task's float64 parameter-gradient buffers stay in L2.
GLU_BLOCK = 1 << 12
KEY_FILES = ("backends/cpu/loops.py", "backends/cpu/gated_source.py", "backends/cpu/gated.py")

_lock = threading.RLock()
_mods: dict = {}
_par: dict = {}


def _helpers():
    import numba

    from . import loops

    jit = dict(inline="always", cache=loops._CACHE, **loops._JIT)

    @numba.njit(**jit)
    def _gclamp(g, lim):
        # NaN stays NaN: the comparison is false for it
        return lim if g > lim else g

    @numba.njit(**jit)
    def _uclamp(u, lim, shift):
        v = lim if u > lim else u
        v = -lim if v < -lim else v
        # shift 0 leaves up as it is: -0.0 + 0.0 would be +0.0 (the product's sign)
        return v + shift if shift != 0 else v

    @numba.njit(**jit)
    def _unless(cond, v):
        return type(v)(0.0) if cond else v

    return dict(_gclamp=_gclamp, _uclamp=_uclamp, _unless=_unless, _lanesum=loops._lanesum)


def _module(spec):
    mod = _mods.get(spec.name)
    if mod is not None:
        return mod
    from . import loops
    from . import ufuncs as cpu

    with _lock:
        mod = _mods.get(spec.name)
        if mod is not None:
            return mod
        import numba

        scalar = cpu._module(spec).__dict__
        ns = dict(np=np, prange=numba.prange, GLU_BLOCK=GLU_BLOCK, **_helpers())
        ns.update({k: v for k, v in scalar.items() if k.startswith(("_f", "_dx", "_d_", "_b_"))})
        h = cpu.kernel_hash(spec, extra=KEY_FILES)
        mod = cpu.generated_module("gated", spec, h, _source(spec), ns)
        ns = mod.__dict__
        for name in list(ns):
            if name.startswith("glu_"):
                ns[name] = loops._njit(ns[name])
        _mods[spec.name] = mod
        return mod


def _kernel(spec, name: str, parallel: bool):
    """The task function ``name`` (one thread: call it with the whole task range) or its
    threaded launcher ``run_<name>``."""
    mod = _module(spec)
    if not parallel:
        return getattr(mod, name)
    key = (spec.name, name)
    k = _par.get(key)
    if k is None:
        from . import loops

        k = _par[key] = loops._njit(getattr(mod, "run_" + name), parallel=True)
    return k


def geometry(shape, axis, layout, gate_first):
    """``(R, C, goff, uoff, rs, layout, out_shape)`` of the gate and up halves of a
    C-contiguous ``x`` of ``shape`` split along ``axis``; ``layout`` names the loops'
    (:data:`.gated_source.LAYOUTS`)."""
    n = shape[axis]
    h = n // 2
    a = math.prod(shape[:axis])
    b = math.prod(shape[axis + 1 :])
    out_shape = (*shape[:axis], h, *shape[axis + 1 :])
    if layout == "halves":
        r, c, first, second, rs, lay = a, h * b, 0, h * b, 2 * h * b, "s1"
    elif b > 1:
        r, c, first, second, rs, lay = a * h, b, 0, b, 2 * b, "s1"
    else:
        return 1, a * h, 0, 0, 0, "s2" if gate_first else "s2r", out_shape
    goff, uoff = (first, second) if gate_first else (second, first)
    return r, c, goff, uoff, rs, lay, out_shape


def _fits(arrays, vals):
    """The dtype the loops compute in for these operands (numpy arrays, C-contiguous), or
    None where they do not apply."""
    for a in arrays:
        if type(a) is not np.ndarray or not a.flags.c_contiguous:
            return None
    return fused_dtype([a.dtype for a in arrays], vals)


def _layout(x, up, axis, layout, gate_first):
    if up is None:
        return geometry(x.shape, axis, layout, gate_first)
    return 1, x.size, 0, 0, 0, "s1", x.shape


def _free(out, shape, dt, inputs):
    """``out`` when the loops may write it (C-contiguous, of ``shape`` and ``dt``, sharing
    no memory with an input), a new array when out is None, else None."""
    if out is None:
        return np.empty(shape, dt)
    if (
        type(out) is not np.ndarray
        or out.dtype != dt
        or out.shape != tuple(shape)
        or not out.flags.c_contiguous
        or not out.flags.writeable
        or any(np.may_share_memory(out, a) for a in inputs)
    ):
        return None
    return out


def forward(act_name, x, up, axis, layout, gate_first, lim, shift, vals, out):
    """``act(gate) * up`` from the fused loop, or None where it does not apply."""
    spec = REGISTRY[act_name]
    dt = _fits((x,) if up is None else (x, up), vals)
    if dt is None or (up is not None and up.shape != x.shape):
        return None
    r, c, goff, uoff, rs, lay, oshape = _layout(x, up, axis, layout, gate_first)
    o = _free(out, oshape, dt, (x,) if up is None else (x, up))
    if o is None:
        return None
    xf = x.reshape(-1)
    uf = xf if up is None else up.reshape(-1)
    _run(
        spec,
        f"glu_fwd_{lay}",
        dt,
        (xf, uf, o.reshape(-1)),
        (r, c, goff, uoff, rs),
        lim,
        shift,
        vals,
    )
    return o


def backward(act_name, x, up, go, axis, layout, gate_first, lim, shift, vals, params: bool, out):
    """``(grad, grads)``: the gradient of ``sum(go * act(gate) * up)`` for x (or the pair
    for gate and up, with ``up`` given) and, with ``params``, each parameter's as a
    float64 total (None without); None where the fused loop does not apply."""
    spec = REGISTRY[act_name]
    ins = (x,) if up is None else (x, up)
    dt = _fits((*ins, go), vals)
    if dt is None or (up is not None and up.shape != x.shape):
        return None
    r, c, goff, uoff, rs, lay, oshape = _layout(x, up, axis, layout, gate_first)
    if go.shape != tuple(oshape):
        return None
    if up is None:
        og = _free(out, x.shape, dt, (x, go))
        if og is None:
            return None
        ou = og
    else:
        pair = out if out is not None else (None, None)
        og = _free(pair[0], x.shape, dt, (x, up, go))
        ou = _free(pair[1], x.shape, dt, (x, up, go))
        if og is None or ou is None or (out is not None and np.may_share_memory(og, ou)):
            return None
    xf = x.reshape(-1)
    uf = xf if up is None else up.reshape(-1)
    flat = (xf, uf, go.reshape(-1), og.reshape(-1), ou.reshape(-1))
    geo = (r, c, goff, uoff, rs)
    names = spec.param_names
    grads = None
    if params and names:
        part = np.zeros((len(names), _tasks(r, c)), F64)
        _run(spec, f"glu_all_{lay}", dt, (*flat, part), geo, lim, shift, vals)
        grads = dict(zip(names, part.sum(axis=1)))
    else:
        _run(spec, f"glu_bwd_{lay}", dt, flat, geo, lim, shift, vals)
    return (og if up is None else (og, ou)), grads


def ready(act_name, dt) -> None:
    """Compile (or load) every loop of ``act_name``'s gated form for dtype ``dt`` (forward,
    backward and with parameters the one-pass backward, in every layout), each as its
    single-thread task function and its threaded launcher, with :func:`_run`'s signatures
    (``iglu-np warmup --gated``)."""
    from .gated_source import LAYOUTS

    spec = REGISTRY[act_name]
    dt = np.dtype(dt)
    a = np.zeros(8, dt)
    part = np.zeros((len(spec.param_names), 1), F64)
    tail = typed(dt, np.inf, 0.0, *spec.defaults.values())
    geo = (1, 4, 0, 4, 0, 0, _tasks(1, 4))
    ops = [("fwd", (a,) * 3), ("bwd", (a,) * 5)]
    if spec.param_names:
        ops.append(("all", (*(a,) * 5, part)))
    for lay in LAYOUTS:
        for op, arrays in ops:
            args = (*arrays, *geo, *tail)
            tiers._ready(_kernel(spec, f"glu_{op}_{lay}", False), args)
            tiers._ready(_kernel(spec, f"glu_{op}_{lay}", True), (*args, True))


def _tasks(r, c) -> int:
    """Tasks of ``r`` rows of ``c`` columns: each row in blocks of GLU_BLOCK columns."""
    return r * -(-c // GLU_BLOCK)


def _run(spec, name, dt, arrays, geo, lim, shift, vals):
    r, c = geo[0], geo[1]
    single = (*arrays, *geo, 0, _tasks(r, c), *typed(dt, lim, shift, *vals))
    k = _kernel(spec, name, False)
    n = r * c
    if tiers._parallel(n):
        from . import loops

        kp = _kernel(spec, name, True)
        par = (*single, True)
        # compiled now, not inside the guard's first threaded call (as the plain loops')
        tiers._ready(kp, par)
        loops.launch(kp, n, lambda: kp(*par), lambda: k(*single), dt.char)
    else:
        k(*single)
