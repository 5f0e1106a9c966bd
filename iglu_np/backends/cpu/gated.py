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

from ... import _params
from ..._dtypes import F32, F64, fused_dtype, typed
from ..._spec import REGISTRY
from . import tiers
from .gated_source import source as _source

__all__ = ["GLU_BLOCK", "forward", "backward", "geometry", "ready", "thin_forward", "thin_backward"]

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
    ):
        return None
    # arrays that own their memory overlap only when they are the same object
    if out.base is None and all(a.base is None and a is not out for a in inputs):
        return out
    return None if any(np.may_share_memory(out, a) for a in inputs) else out


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
    _run_typed(spec, name, dt, arrays, geo, typed(dt, lim, shift, *vals))


def _run_typed(spec, name, dt, arrays, geo, tail):
    """Task function ``name`` over ``arrays`` of ``geo``, threaded from the threshold on;
    ``tail``: the typed limit, shift and parameters."""
    r, c = geo[0], geo[1]
    single = (*arrays, *geo, 0, _tasks(r, c), *tail)
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


# --------------------------------------------------------------------------- thin path
# (form name, dtype char, limit, parameters) -> the loops' typed (lim, shift, *params):
# the values of recent calls with number parameters (a bounded memo)
_thin_args: dict = {}
_THIN_MEMO = 256


def _thin_tail(g, dt, limit, params):
    """The loops' typed (limit, shift, parameters) of form ``g`` for dtype ``dt``, or None
    where the fused loops do not take them (an array parameter, float32 beyond its
    range). Invalid values raise the general path's errors (and are not remembered)."""
    try:
        key = (g.name, dt.char, _memo_key(limit), *((k, _memo_key(v)) for k, v in params.items()))
    except TypeError:  # not a plain number: computed (and validated) each call
        return _thin_tail_of(g, dt, limit, params)
    tail = _thin_args.get(key, False)
    if tail is False:
        tail = _thin_tail_of(g, dt, limit, params)
        if len(_thin_args) >= _THIN_MEMO:
            _thin_args.clear()
        _thin_args[key] = tail
    return tail


def _memo_key(v):
    """A key that tells apart what validation tells apart (True from 1, -0.0 from 0.0);
    TypeError for anything but a Python number or None."""
    t = type(v)
    if t is float:
        return t, v, math.copysign(1.0, v)
    if t is int or v is None:
        return t, v
    raise TypeError


def _thin_tail_of(g, dt, limit, params):
    q = g._params(params)
    lim = g._limit(limit)  # validated in the general path's order
    if "backend" in q:
        return None
    vals = _params.values(g._p, q)
    if fused_dtype([dt], vals) != dt:
        return None
    return typed(dt, lim, g.shift, *vals)


def _thin_geometry(g, shape, axis, layout):
    """:func:`geometry` of splitting a C-contiguous input of ``shape`` along its last axis
    (``axis`` -1 or ndim - 1) in ``layout`` (None: the form's), or None for anything else
    (an odd or empty axis, an unknown layout: the general path says why)."""
    nd = len(shape)
    if type(axis) is not int or (axis != -1 and axis != nd - 1):
        return None
    layout = g.layout if layout is None else layout
    if shape[-1] % 2 or shape[-1] == 0 or layout not in ("halves", "interleaved"):
        return None
    return geometry(shape, nd - 1, layout, g.gate_first)


def _thin_operand(a, dt):
    return type(a) is np.ndarray and a.dtype is dt and a.flags.c_contiguous and a.ndim > 0


def thin_forward(g, x, out, axis, layout, limit, params):
    """``g(x, out=out, axis=axis, layout=layout, limit=limit, **params)`` (``limit``
    resolved: a number, or None for none; not the form's default marker) for a
    C-contiguous float32/float64 numpy ``x`` split along its last axis with scalar
    parameters: the fused loop without the general preparation, or None for the general
    path (which takes every other call). The same loop and arguments as :func:`forward`,
    so the same bits."""
    dt = x.dtype
    if (dt is not F32 and dt is not F64) or not _thin_operand(x, dt):
        return None
    geo = _thin_geometry(g, x.shape, axis, layout)
    if geo is None:
        return None
    tail = _thin_tail(g, dt, limit, params)
    if tail is None:
        return None
    o = _free(out, geo[6], dt, (x,))
    if o is None:
        return None
    xf = x.reshape(-1)
    spec = REGISTRY[g._spec_name]
    _run_typed(spec, "glu_fwd_" + geo[5], dt, (xf, xf, o.reshape(-1)), geo[:5], tail)
    return o


def thin_backward(g, x, go, out, axis, layout, limit, params):
    """``g.backward(x, go, out=out, ...)`` as :func:`thin_forward`."""
    dt = x.dtype
    if (dt is not F32 and dt is not F64) or not _thin_operand(x, dt) or not _thin_operand(go, dt):
        return None
    geo = _thin_geometry(g, x.shape, axis, layout)
    if geo is None or go.shape != geo[6]:
        return None
    tail = _thin_tail(g, dt, limit, params)
    if tail is None:
        return None
    o = _free(out, x.shape, dt, (x, go))
    if o is None:
        return None
    xf, of = x.reshape(-1), o.reshape(-1)
    flat = (xf, xf, go.reshape(-1), of, of)
    _run_typed(REGISTRY[g._spec_name], "glu_bwd_" + geo[5], dt, flat, geo[:5], tail)
    return o
