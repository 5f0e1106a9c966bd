"""Gated forms of every activation: ``act(gate) * up``, generated from the spec.

``iglu_np.<name>.glu`` and the named forms of :mod:`iglu_np._gated_forms`
(``iglu_np.swiglu``, ``geglu``, ``glu``, ``swiglu_oai`` ...) are :class:`Gated` objects.
With ``up=None`` the input is split along ``axis``: ``layout="halves"`` takes the first
half as the gate (vLLM's ``*_and_mul``), ``"interleaved"`` even positions (gpt-oss);
``glu`` gates with the second half, as torch's and JAX's ``glu``. ``limit`` clamps the
gate above at ``limit`` and up to ``[-limit, limit]``, with zero gradient where a clamp is
active (``torch.clamp``'s convention: the bound itself passes the gradient).

Numerics: float32 and float64 evaluate ``act(gate)`` with the activation's kernel and
multiply once, so a value is within the activation's bound plus one rounding. float16
and bfloat16 compute in float32 and round once; ``rounding="twice"`` instead rounds the
activation to the input's dtype before the product, as an unfused ``act(a) * b`` does
(torch's ``F.silu(a) * b`` in bfloat16), and reproduces that result bit for bit.

numpy arrays of float32/float64 with scalar parameters take the CPU's fused loops
(:mod:`iglu_np.backends.cpu.gated`), CuPy arrays one ElementwiseKernel per forward or
backward (:mod:`iglu_np.backends.cuda.cupy_gated`); every other input (other dtypes, array parameters,
broadcast operands, CuPy and Dask arrays) is composed from the activation's own kernels
on its backend and numpy's functions (which CuPy and Dask arrays implement), with the
same bits where both apply. torch and JAX host arrays are viewed as numpy arrays and
returned as their type. Numba CUDA device arrays take their own fused kernels
(:mod:`iglu_np.backends.cuda.numba_cuda._gated`) for the forward and the input gradients
of C-contiguous operands; the rest is refused with a TypeError (device arrays have no
array operations to compose with).
"""

from __future__ import annotations

import math

import numpy as np

from . import _params
from ._dtypes import F32, is_bf16, unbroadcast

__all__ = ["Gated", "bridge"]

_LAYOUTS = ("halves", "interleaved")
_ROUNDINGS = ("once", "twice")
_DEFAULT = object()  # the form's own limit


def _host_arrays():
    from .backends import host_arrays

    return host_arrays


_CPU_GATED = None


def _cpu_gated():
    """The CPU gated loops' module (:mod:`.backends.cpu.gated`: its thin path takes a
    numpy input split along its last axis, with number parameters, without the general
    preparation)."""
    global _CPU_GATED
    if _CPU_GATED is None:
        from .backends.cpu import gated

        _CPU_GATED = gated
    return _CPU_GATED


class Gated:
    """The gated form ``act(gate; params) * up`` of an activation; see
    ``help(iglu_np.swiglu)`` and :mod:`iglu_np._gated`."""

    def __init__(
        self,
        name,
        act,
        target=None,
        *,
        fixed=None,
        rename=None,
        layout="halves",
        gate_first=True,
        shift=0.0,
        limit=None,
        source="",
    ):
        # act: the activation (or alias) named; target: the activation computing it (an
        # alias's target, which takes the alias's values as parameters)
        self.name = self.__name__ = self.__qualname__ = name
        self.__module__ = "iglu_np"
        self.activation = act
        self._target = target if target is not None else act
        self._spec_name = self._target.name
        self._fixed = {**dict(getattr(act, "fixed", {})), **dict(fixed or {})}
        self._rename = dict(rename or {})
        self._back = {v: k for k, v in self._rename.items()}
        self.layout = layout
        self.gate_first = gate_first
        self.shift = float(shift)
        self.limit = limit
        self.source = source
        self._p = _params.of(self._spec_name)
        self.defaults = {
            self._back.get(p.name, p.name): self._fixed.get(p.name, p.default) for p in act.params
        }
        self.__doc__ = _doc(self)

    # ------------------------------------------------------------------ operands
    def _params(self, params):
        q = {self._rename.get(k, k): v for k, v in params.items()}
        for k in q:
            if k != "backend" and k not in self._p.index:
                names = ", ".join(self.defaults) or "none"
                raise TypeError(
                    f"{self.name}() got an unexpected keyword argument {self._back.get(k, k)!r}"
                    f"; its parameters: {names}"
                )
        return {**self._fixed, **q}

    def _limit(self, limit):
        lim = self.limit if limit is _DEFAULT else limit
        if lim is None:
            return math.inf
        if isinstance(lim, bool) or not isinstance(lim, (int, float, np.integer, np.floating)):
            raise TypeError(f"{self.name}: limit must be a number or None, got {lim!r}")
        v = float(lim)
        if not v > 0:
            raise ValueError(f"{self.name}: limit must be > 0 (or None), got {lim!r}")
        return v

    def _rounding(self, rounding):
        if rounding not in _ROUNDINGS:
            raise ValueError(f"{self.name}: rounding must be 'once' or 'twice', got {rounding!r}")
        return rounding

    def _axis(self, shape, axis, layout):
        """``(axis, layout)`` of splitting an input of ``shape``: the axis in
        ``range(ndim)``, the layout (the form's by default), each checked, and the axis's
        length even."""
        layout = self.layout if layout is None else layout
        if layout not in _LAYOUTS:
            raise ValueError(
                f"{self.name}: layout must be 'halves' or 'interleaved', got {layout!r}"
            )
        nd = len(shape)
        if nd == 0:
            raise ValueError(f"{self.name}: x must have an axis to split, got a 0-d input")
        try:
            ax = _axis(axis, nd)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{self.name}: {e}") from None
        if shape[ax] % 2:
            raise ValueError(
                f"{self.name}: axis {axis} has length {shape[ax]}; splitting into gate and up "
                "needs an even length"
            )
        return ax, layout

    def _split(self, x, axis, layout):
        """``(gate, up, axis, layout)`` of a split input."""
        ax, layout = self._axis(x.shape, axis, layout)
        n = x.shape[ax]
        if layout == "halves":
            a, b = slice(0, n // 2), slice(n // 2, n)
        else:
            a, b = slice(0, n, 2), slice(1, n, 2)
        pre = (slice(None),) * ax
        first, second = x[(*pre, a)], x[(*pre, b)]
        return (first, second, ax, layout) if self.gate_first else (second, first, ax, layout)

    def _join(self, dg, du, ax, layout):
        """The gradient shaped like the split input from the gate's and up's."""
        first, second = (dg, du) if self.gate_first else (du, dg)
        if layout == "halves":
            return np.concatenate([first, second], axis=ax)
        st = np.stack([first, second], axis=ax + 1)
        shape = (*first.shape[:ax], 2 * first.shape[ax], *first.shape[ax + 1 :])
        return st.reshape(shape)

    # ------------------------------------------------------------------ public
    def __call__(
        self,
        x,
        up=None,
        /,
        *,
        axis=-1,
        layout=None,
        limit=_DEFAULT,
        rounding="once",
        out=None,
        **params,
    ):
        if type(x) is np.ndarray and up is None and rounding == "once":
            lim = self.limit if limit is _DEFAULT else limit
            r = _cpu_gated().thin_forward(self, x, out, axis, layout, lim, params)
            if r is not None:
                return r
        return _host(self, "fwd", x, up, None, axis, layout, limit, rounding, out, params)

    def backward(
        self,
        x,
        grad_out,
        up=None,
        /,
        *,
        axis=-1,
        layout=None,
        limit=_DEFAULT,
        rounding="once",
        out=None,
        **params,
    ):
        """The gradient of ``sum(grad_out * self(x, up))``: shaped like ``x`` with
        ``up=None``, else the pair ``(d_gate, d_up)`` shaped like ``x`` and ``up``."""
        if type(x) is np.ndarray and up is None and rounding == "once":
            lim = self.limit if limit is _DEFAULT else limit
            r = _cpu_gated().thin_backward(self, x, grad_out, out, axis, layout, lim, params)
            if r is not None:
                return r
        return _host(self, "bwd", x, up, grad_out, axis, layout, limit, rounding, out, params)

    def backward_params(
        self,
        x,
        grad_out,
        up=None,
        /,
        *,
        axis=-1,
        layout=None,
        limit=_DEFAULT,
        rounding="once",
        **params,
    ) -> dict:
        """Each parameter's gradient of ``sum(grad_out * self(x, up))``, reduced to its
        shape (a 0-d array for a scalar)."""
        return _host(self, "params", x, up, grad_out, axis, layout, limit, rounding, None, params)

    def backward_all(
        self,
        x,
        grad_out,
        up=None,
        /,
        *,
        axis=-1,
        layout=None,
        limit=_DEFAULT,
        rounding="once",
        out=None,
        **params,
    ) -> tuple:
        """``(backward, backward_params)`` from one pass where the fused loops apply."""
        return _host(self, "all", x, up, grad_out, axis, layout, limit, rounding, out, params)

    def dx(self, x, up=None, /, *, axis=-1, layout=None, limit=_DEFAULT, **params) -> tuple:
        """The elementwise partial derivatives ``(d/d gate, d/d up)``: ``up * act'(gate)``
        and ``act(gate)`` (clamped where ``limit`` is active), shaped like the output."""
        return _host(self, "dx", x, up, None, axis, layout, limit, "once", None, params)

    def __reduce__(self):
        # by name: iglu_np.<form>, or iglu_np.<activation>.glu (pickle's dotted lookup)
        return self.__qualname__

    def __repr__(self):
        ps = ", ".join(f"{k}={v!r}" for k, v in self.defaults.items())
        return f"<iglu_np gated {self.name}: {self.activation.name}({ps}) gate>"


# --------------------------------------------------------------------------- bridges
def bridge(g, act_fn, clamp, widen, narrow, module: str):
    """``g`` as a function of a framework's arrays (:mod:`iglu_np.torch`,
    :mod:`iglu_np.jax`): the split, the clamps and the product in the framework's own
    differentiable operations around ``act_fn``, its bridge of the activation.
    ``clamp(a, lo, hi)`` (either bound None; the gradient passes where ``lo <= a <= hi``,
    as ``torch.clamp``'s), ``widen(a)`` (to float32) and ``narrow(a, dtype)``."""

    def fn(x, up=None, /, *, axis=-1, layout=None, limit=_DEFAULT, rounding="once", **params):
        g._rounding(rounding)
        q = g._params(params)
        q.pop("backend", None)
        lim = g._limit(limit)
        gate, upv = (x, up) if up is not None else g._split(x, axis, layout)[:2]
        if lim != math.inf:
            gate, upv = clamp(gate, None, lim), clamp(upv, -lim, lim)
        if g.shift:
            upv = upv + g.shift
        dt = x.dtype
        if rounding == "once" and str(dt).endswith(("float16", "bfloat16")):
            return narrow(act_fn(widen(gate), **q) * widen(upv), dt)
        return act_fn(gate, **q) * upv

    fn.__name__ = fn.__qualname__ = g.name
    fn.__module__ = module
    fn.__doc__ = (
        f"``iglu_np.{g.name}`` for {module.split('.')[-1]} arrays, differentiable in x, up "
        f"and every array parameter: {g.source}. The activation is "
        f"``{module}.{g._spec_name}``; the split, clamps and product are the framework's "
        "own operations (float16/bfloat16 compute in float32 and round once unless "
        "rounding='twice')."
    )
    return fn


# --------------------------------------------------------------------------- helpers
def _axis(axis, nd):
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an integer, got {axis!r}")
    ax = int(axis)
    if not -nd <= ax < nd:
        raise ValueError(f"axis {axis} is out of bounds for an input with {nd} dimension(s)")
    return ax % nd


def _asarray(v):
    if isinstance(v, (list, tuple, float, int)):
        return np.asarray(v, dtype=np.float64 if isinstance(v, (float, int)) else None)
    return v


def _half(*arrays):
    """The 16-bit dtype of the operands (float16 or bfloat16), or None."""
    for a in arrays:
        dt = getattr(a, "dtype", None)
        if dt is not None and np.dtype(dt).itemsize == 2 and (dt == np.float16 or is_bf16(dt)):
            return np.dtype(dt)
    return None


def _host(g, op, x, up, go, axis, layout, limit, rounding, out, params):
    """Foreign host arrays (torch, JAX, DLPack) as numpy views, the result as their type."""
    ha = _host_arrays()
    like = next((a for a in (x, up, go) if a is not None and ha.kind_of(a) is not None), None)
    if like is None:
        return _gated(g, op, x, up, go, axis, layout, limit, rounding, out, params)
    x, up, go = (
        ha.to_numpy(g, w, a) if a is not None else None
        for w, a in (("x", x), ("up", up), ("grad_out", go))
    )
    params = {k: ha.to_numpy(g, k, v) for k, v in params.items()}
    if out is not None:
        o = out if isinstance(out, tuple) else (out,)
        r = _gated(
            g,
            op,
            x,
            up,
            go,
            axis,
            layout,
            limit,
            rounding,
            tuple(ha.to_numpy(g, "out", a) for a in o),
            params,
        )
        return out if op != "all" else (out, {k: ha.to_like(like, v) for k, v in r[1].items()})
    r = _gated(g, op, x, up, go, axis, layout, limit, rounding, None, params)

    def back(v):
        if isinstance(v, dict):
            return {k: ha.to_like(like, w) for k, w in v.items()}
        if isinstance(v, tuple):
            return tuple(back(w) for w in v)
        return ha.to_like(like, v)

    return back(r)


def _numba_cuda(g, op, x, up, go, ax, lay, lim, rounding, out, params):
    """Numba CUDA device arrays: the fused kernels of
    :mod:`iglu_np.backends.cuda.numba_cuda._gated` (C-contiguous float32/float64
    operands, scalar parameters, the forward and the input gradients), else a TypeError:
    device arrays have no array operations to compose the rest from."""
    if op not in ("fwd", "bwd"):
        why = "the parameters' gradients"
    elif out is not None or rounding != "once" or "backend" in params:
        why = "out=, rounding='twice' and backend="
    else:
        from .backends.cuda.numba_cuda import _gated as ng

        vals = _params.values(g._p, params)
        if op == "fwd":
            r = ng.forward(g._spec_name, x, up, ax, lay, g.gate_first, lim, g.shift, vals)
        else:
            r = ng.backward(g._spec_name, x, up, go, ax, lay, g.gate_first, lim, g.shift, vals)
        if r is not None:
            return r
        why = (
            "these operands (C-contiguous float32/float64 of one shape, parameters within "
            "the dtype's range)"
        )
    raise TypeError(
        f"{g.name}: Numba CUDA device arrays take the forward and the input gradients of "
        f"C-contiguous float32/float64 operands with scalar parameters, not {why}; pass "
        "cupy.asarray(x) (CuPy arrays take every case) or a torch CUDA tensor through "
        "iglu_np.torch"
    )


def _numba_device(a) -> bool:
    m = type(a).__module__
    return m.startswith(("numba.cuda", "numba_cuda")) and hasattr(a, "copy_to_host")


def _gated(g, op, x, up, go, axis, layout, limit, rounding, out, params):
    g._rounding(rounding)
    params = g._params(params)
    lim = g._limit(limit)
    x = _asarray(x)
    up = _asarray(up)
    go = _asarray(go)
    if isinstance(out, tuple) and (op == "fwd" or up is None):
        if len(out) != 1:
            raise ValueError(f"{g.name}: out= must be one array")
        out = out[0]
    elif out is not None and up is not None and op in ("bwd", "all"):
        if not isinstance(out, tuple) or len(out) != 2:
            raise TypeError(f"{g.name}: out= with up given must be a pair (d_gate, d_up)")
    if up is None:
        gate, upv, ax, lay = g._split(x, axis, layout)
    else:
        gate, upv, ax, lay = x, up, None, None
    if any(_numba_device(a) for a in (x, up, go)):
        return _numba_cuda(g, op, x, up, go, ax, lay, lim, rounding, out, params)
    if op in ("fwd", "bwd", "all", "params") and rounding == "once" and "backend" not in params:
        if _on_cupy(x, up, go):
            r = _cupy_fused(g, op, x, gate, upv, go, ax, lay, lim, params, out)
        else:
            r = _fused(g, op, x, up, go, ax, lay, lim, params, out)
        if r is not None:
            return r
    return _composed(g, op, x, gate, upv, go, ax, lay, lim, rounding, params, out)


def _on_cupy(*arrays) -> bool:
    return any(type(a).__module__.split(".")[0] == "cupy" for a in arrays if a is not None)


def _cupy_fused(g, op, x, gate, upv, go, ax, lay, lim, params, out):
    """The CuPy elementwise kernels of the gated form, or None where they do not apply
    (16-bit data, array parameters, the parameters' gradients: composed instead)."""
    if op not in ("fwd", "bwd") or out is not None or _half(gate, upv, go) is not None:
        return None
    from .backends.cuda import cupy_gated as cg

    vals = _params.values(g._p, params)
    if op == "fwd":
        return cg.forward(g._spec_name, gate, upv, lim, g.shift, vals)
    import cupy

    shape = np.broadcast_shapes(gate.shape, upv.shape, go.shape)
    if ax is not None:
        if shape != gate.shape:
            return None
        dx = cupy.empty(x.shape, x.dtype)
        dg, du, _, _ = g._split(dx, ax, lay)
        return dx if cg.backward(g._spec_name, gate, upv, go, lim, g.shift, vals, dg, du) else None
    dg, du = cupy.empty(shape, gate.dtype), cupy.empty(shape, upv.dtype)
    if not cg.backward(g._spec_name, gate, upv, go, lim, g.shift, vals, dg, du):
        return None
    return unbroadcast(dg, tuple(gate.shape)), unbroadcast(du, tuple(upv.shape))


def _fused(g, op, x, up, go, ax, lay, lim, params, out):
    """The CPU's fused loops on numpy operands, or None where they do not apply."""
    if type(x) is not np.ndarray or (up is not None and type(up) is not np.ndarray):
        return None
    half = _half(x, up, go)
    if half is not None and out is not None:  # the composition writes 16-bit out=
        return None
    from .backends.cpu import gated as cg

    vals = _params.values(g._p, params)
    if half is not None:
        x = x.astype(F32)
        up = None if up is None else up.astype(F32)
        go = None if go is None else go.astype(F32)
    first = (g._spec_name, x, up)
    if op == "fwd":
        r = cg.forward(*first, ax, lay, g.gate_first, lim, g.shift, vals, out)
        if r is not None and half is not None:
            r = _narrow(r, half)
        return r
    if type(go) is not np.ndarray:
        return None
    got = cg.backward(*first, go, ax, lay, g.gate_first, lim, g.shift, vals, op != "bwd", out)
    if got is None:
        return None
    grad, totals = got
    if half is not None:
        grad = _narrow(grad, half) if up is None else tuple(_narrow(a, half) for a in grad)
    if op == "bwd":
        return grad
    cdt = x.dtype
    grads = {g._back.get(p, p): np.asarray(totals[p], dtype=cdt) for p in g._p.param_names}
    return grads if op == "params" else (grad, grads)


def _narrow(a, dt):
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(dt)


def _lazy(*arrays) -> bool:
    return any(type(a).__module__.startswith("dask") for a in arrays)


def _silent_mul(a, b):
    with np.errstate(all="ignore"):
        return a * b


def _mul(a, b):
    """``a * b``, silent as the activations are: inf * 0 is NaN without a warning, also
    inside a Dask task (which runs outside the caller's errstate)."""
    if _lazy(a, b):
        import dask.array as da

        return da.map_blocks(_silent_mul, a, b, dtype=np.result_type(a.dtype, b.dtype))
    return a * b


def _clamped(gate, upv, lim, shift):
    if lim != math.inf:
        gate = np.minimum(gate, lim)  # NaN stays NaN
        upv = np.clip(upv, -lim, lim)
    if shift:
        upv = upv + shift
    return gate, upv


def _composed(g, op, x, gate, upv, go, ax, lay, lim, rounding, params, out):
    """The gated op from the activation's own kernels (any backend the dispatcher has);
    silent as the activations are (inf * 0 in a product is the NaN it should be)."""
    with np.errstate(all="ignore"):
        return _compose(g, op, x, gate, upv, go, ax, lay, lim, rounding, params, out)


def _compose(g, op, x, gate, upv, go, ax, lay, lim, rounding, params, out):
    act = g._target
    half = _half(gate, upv, go)
    gc, uc = _clamped(gate, upv, lim, g.shift)
    twice = rounding == "twice" and half is not None
    if half is not None:
        uc = uc.astype(F32)
        if not twice:
            gc = gc.astype(F32)
        if go is not None:
            go = go.astype(F32)
    if op == "fwd":
        a = act(gc, **params)
        if twice:
            a = a.astype(F32)
        r = _mul(a, uc)
        if half is not None:
            r = _narrow(r, half)
        return _into(g, r, out)
    if op == "dx":
        a = act(gc, **params)
        d = _mul(act.dx(gc, **params), uc)
        return _masked(d, gate, lim, None), _masked(_mul(a, np.ones_like(uc)), None, lim, upv)
    gu = _mul(go, uc)
    if twice:
        gu = _narrow(gu, half)
    shape = np.broadcast_shapes(np.shape(gc), np.shape(gu))
    res = []
    if op in ("bwd", "all"):
        a = act(gc, **params)
        if twice:
            a = a.astype(F32)
        dg = _masked(act.backward(gc, gu, **params), gate, lim, None)
        du = _masked(_mul(go, a), None, lim, upv)
        if half is not None:
            dg, du = _narrow(dg, half), _narrow(du, half)
        if ax is None:
            grad = (unbroadcast(dg, np.shape(gate)), unbroadcast(du, np.shape(upv)))
            if out is not None:
                grad = (_into(g, grad[0], out[0]), _into(g, grad[1], out[1]))
        else:
            grad = _into(g, g._join(dg, du, ax, lay), out)
        res.append(grad)
    if op in ("params", "all"):
        gcb = gc if np.shape(gc) == shape else np.broadcast_to(gc, shape)
        gp = act.backward_params(gcb, gu, **params)
        grads = {g._back.get(k, k): v for k, v in gp.items()}
        res.append(grads)
    return res[0] if len(res) == 1 else tuple(res)


def _masked(d, gate, lim, upv):
    """``d`` with 0 where the gate's (or up's) clamp is active."""
    if lim == math.inf:
        return d
    cond = (gate > lim) if gate is not None else (np.abs(upv) > lim)
    return np.where(cond, np.zeros((), d.dtype), d)


def _into(g, r, out):
    if out is None:
        return r
    if np.shape(out) != np.shape(r):
        raise ValueError(f"{g.name}: out= has shape {np.shape(out)}, expected {np.shape(r)}")
    np.copyto(out, r, casting="same_kind")
    return out


def _doc(g) -> str:
    act = g.activation
    ps = ", ".join(f"{k}={v!r}" for k, v in g.defaults.items())
    lim = "" if g.limit is None else f"; limit={g.limit!r} by default"
    gate = "first" if g.gate_first else "second"
    return (
        f"``{g.name}(x, up=None, *, axis=-1, layout={g.layout!r}, limit={g.limit!r}, "
        f"rounding='once', out=None{', ' + ps if ps else ''})``: the gated form "
        f"``{act.name}(gate) * {'(up + 1)' if g.shift else 'up'}``.\n\n"
        f"With ``up=None`` the gate is the {gate} "
        f"{'half' if g.layout == 'halves' else 'of each pair'} of ``x`` along ``axis``"
        f"{lim}. {g.source}.\n\n"
        "``.backward(x, grad_out, up=None)`` gives the input gradient (a pair with ``up``), "
        "``.backward_params`` / ``.backward_all`` the parameters' gradients reduced to "
        "their shapes, ``.dx`` the elementwise partials. See :mod:`iglu_np._gated` for "
        "layouts, clamps and rounding."
    )
