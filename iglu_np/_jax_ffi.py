"""The JAX bridge's compiled route: each activation as XLA FFI custom calls on the CPU.

The handlers (:mod:`iglu_np.backends.xla.cpu`) run iglu_np's CPU loops on XLA's own
buffers, threaded on XLA's pool, so a jitted call holds no Python callback and copies
nothing. A function here is a :func:`jax.custom_vjp` whose forward is one custom call and
whose backward is one for ``grad_x`` plus one per differentiated parameter
(``df/dparam`` elementwise, then ``sum(cotangent * df/dparam)`` reduced to the
parameter's shape by XLA).

Parameters reach a handler as float64 attributes when they are all numbers
(:func:`constant`), else as operands (:func:`traced`): each of one element (scalars,
learnable or not) or, when any parameter has more elements, each broadcast to the data's
shape. A handler checks operand parameters against their domains and returns XLA an
error naming the parameter, which JAX raises where the result is read.

The gated forms with number parameters (:func:`gated_route`) are a custom call each way
too, over the fused gated loops (:mod:`iglu_np.backends.xla.gated`): two elements in and
one out forward, three in and two out backward.

float16 and bfloat16 compute in float32 and round once, as iglu_np does.
"""

from __future__ import annotations

import sys
import threading
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "constant",
    "export_checks",
    "gated_route",
    "register_exported",
    "route",
    "targets",
    "traced",
    "usable",
]

_ffi = getattr(jax, "ffi", None)
_lock = threading.Lock()
_targets: set = set()
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def usable() -> bool:
    """Whether this JAX has the FFI the handlers need (``jax.ffi``, JAX 0.5 and later) on
    a system whose C library the handlers call (malloc, free, sched_yield: Linux, macOS)."""
    return (
        _ffi is not None
        and hasattr(_ffi, "ffi_call")
        and sys.platform.startswith(("linux", "darwin"))
    )


def compute_dtype(dt):
    """The dtype a handler computes ``dt`` in: float16 and bfloat16 in float32."""
    dt = np.dtype(dt)
    return dt if dt in (_F32, _F64) else _F32


def fits(v, cdt) -> bool:
    """Whether the number ``v`` is one the compute dtype holds as a parameter (float32:
    zero or a normal magnitude; beyond it iglu_np computes in float64)."""
    if cdt == _F64:
        return True
    a = abs(float(v))
    f = np.finfo(np.float32)
    return a == 0.0 or float(f.tiny) <= a <= float(f.max)


def _target_name(name: str, kind: str, cdt, form: str) -> str:
    from .backends.xla import cpu

    return f"iglu_np_{name}_{kind}_{cpu.DTYPES[np.dtype(cdt)]}_{form}"


def _registered(t: str, address) -> str:
    """Target ``t``, registered with XLA the first time (its handler at ``address()``)."""
    if t not in _targets:
        with _lock:
            if t not in _targets:
                _ffi.register_ffi_target(t, _ffi.pycapsule(address()), platform="cpu")
                _targets.add(t)
    return t


def _target(name: str, kind: str, cdt, form: str) -> str:
    from .backends.xla import cpu

    return _registered(
        _target_name(name, kind, cdt, form), lambda: cpu.handler(name, kind, cdt, form)
    )


# --------------------------------------------------------------------------- export
def targets() -> dict:
    """Every custom-call target the compiled route may emit: name -> the arguments that
    register it, ``("act", activation, kind, compute dtype, parameter form)`` or
    ``("glu", activation, op, loop layout, data operands, compute dtype)``. An
    activation's attributes form serves the forward and the backward, its operands form
    those and each parameter's derivative; a gated form has a forward and a backward per
    layout, with gate and up in one operand or (elementwise layout) two."""
    from ._spec import REGISTRY
    from .backends.xla import cpu, gated

    out = {}
    for name, spec in REGISTRY.items():
        for cdt in cpu.DTYPES:
            for kind, form in cpu.variants(spec):
                out[_target_name(name, kind, cdt, form)] = ("act", name, kind, cdt, form)
            for op, lay, nd in gated.variants():
                out[_gated_target_name(name, op, lay, nd, cdt)] = ("glu", name, op, lay, nd, cdt)
    return out


def export_checks() -> list:
    """The :class:`jax.export.DisabledSafetyCheck` entries that let :func:`jax.export.export`
    serialise a function calling these targets (JAX refuses custom calls without a
    compatibility guarantee unless told which ones to accept)."""
    try:
        from jax import export  # a submodule JAX 0.5 does not import with jax
    except ImportError as e:
        raise ImportError(
            f"jax.export does not import here ({e}); JAX 0.5's needs absl-py (pip install absl-py)"
        ) from e

    check = export.DisabledSafetyCheck.custom_call
    return [check(t) for t in targets()]


def register_exported(exported) -> list:
    """Register, in this process, the targets a :class:`jax.export.Exported` calls (its
    handlers compiled or loaded from the kernel cache), so that ``exported.call`` runs;
    returns their names. The handlers are this installation's: an export runs with the
    iglu_np that deserialises it."""
    import re

    known = targets()
    names = sorted(set(re.findall(r"@(iglu_np_\w+)", exported.mlir_module())))
    unknown = [t for t in names if t not in known]
    if unknown:
        raise ValueError(
            f"the exported module calls {', '.join(unknown)}, which this iglu_np does not "
            "provide (exported by another version?)"
        )
    for t in names:
        what, *args = known[t]
        (_target if what == "act" else _gated_target)(*args)
    return names


def _call_attrs(name, kind, cdt, vals, *data):
    t = _target(name, kind, cdt, "attrs")
    out = jax.ShapeDtypeStruct(data[0].shape, cdt)
    attrs = {f"p{j}": np.float64(v) for j, v in enumerate(vals)}
    return _ffi.ffi_call(t, out, vmap_method="broadcast_all")(*data, **attrs)


def _raw_operands(name, kind, cdt, nd, *ops):
    t = _target(name, kind, cdt, "operands")
    return _ffi.ffi_call(t, jax.ShapeDtypeStruct(ops[0].shape, cdt))(*ops)


def _operands_fn(name, kind, cdt, nd):
    """The operands-form custom call of ``kind`` with its batching rule: the batched
    data and parameters all broadcast to the batched data's shape (unbatched scalars stay
    scalars), the one layout the handler reads besides scalars."""

    raw = partial(_raw_operands, name, kind, cdt, nd)

    @jax.custom_batching.custom_vmap
    def f(*ops):
        return raw(*ops)

    @f.def_vmap
    def _rule(axis_size, in_batched, *ops):
        def full(a, batched, shape):
            # a batched operand's own axes line up with the trailing axes of shape
            if batched:
                a = a.reshape(a.shape[:1] + (1,) * (len(shape) - a.ndim + 1) + a.shape[1:])
            else:
                a = a[None]
            return jnp.broadcast_to(a, (axis_size, *shape))

        shape = next(o.shape[1:] if b else o.shape for o, b in zip(ops[:nd], in_batched))
        data = [full(o, b, shape) for o, b in zip(ops[:nd], in_batched[:nd])]
        ps, pb = ops[nd:], in_batched[nd:]
        if any(pb) or any(p.size != 1 for p in ps):
            ps = [full(p, b, shape) for p, b in zip(ps, pb)]
        return f(*data, *ps), True  # through f again: an outer vmap gets this rule too

    return f


_fns: dict = {}  # the batching-rule wrappers by what they call: built once each


def _memo(key, build):
    f = _fns.get(key)
    if f is None:
        f = _fns[key] = build()
    return f


def _operands(name, kind, cdt, nd, *ops):
    return _memo((name, kind, cdt, nd), lambda: _operands_fn(name, kind, cdt, nd))(*ops)


# --------------------------------------------------------------------------- constants
@partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _constant(name, vals, x):
    return _constant_fwd(name, vals, x)[0]


def _constant_fwd(name, vals, x):
    cdt = compute_dtype(x.dtype)
    y = _call_attrs(name, "fwd", cdt, vals, x.astype(cdt))
    return y.astype(x.dtype), x


def _constant_bwd(name, vals, x, g):
    cdt = compute_dtype(x.dtype)
    gx = _call_attrs(name, "bwd", cdt, vals, x.astype(cdt), g.astype(cdt))
    return (gx.astype(x.dtype),)


_constant.defvjp(_constant_fwd, _constant_bwd)


def constant(name: str, vals: tuple, x):
    """``iglu_np.<name>(x, *vals)`` with every parameter a number (``vals``: all of them,
    in the spec's order, checked)."""
    return _constant(name, tuple(float(v) for v in vals), x)


# --------------------------------------------------------------------------- traced
def _param_ops(x, cdt, static, dyn):
    """The parameter operands: scalars where every parameter has one element, else each
    broadcast to x's shape."""
    it = iter(dyn)
    ps = [jnp.asarray(v, cdt) if v is not None else next(it).astype(cdt) for _, v in static]
    if all(p.size == 1 for p in ps):
        return [p.reshape(()) for p in ps]
    return [jnp.broadcast_to(p, x.shape) for p in ps]


def _reduce_to(a, shape):
    """``a`` summed down to ``shape`` (numpy broadcasting's reverse)."""
    lead = a.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(shape) if s == 1 and a.shape[lead + i] != 1
    )
    return jnp.sum(a, axis=axes, keepdims=False).reshape(shape) if axes else a.reshape(shape)


@partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _traced(name, static, x, *dyn):
    return _traced_fwd(name, static, x, *dyn)[0]


def _traced_fwd(name, static, x, *dyn):
    cdt = compute_dtype(x.dtype)
    ps = _param_ops(x, cdt, static, dyn)
    y = _operands(name, "fwd", cdt, 1, x.astype(cdt), *ps)
    return y.astype(x.dtype), (x, dyn)


def _traced_bwd(name, static, res, g):
    x, dyn = res
    cdt = compute_dtype(x.dtype)
    xc, gc = x.astype(cdt), g.astype(cdt)
    ps = _param_ops(x, cdt, static, dyn)
    out = [_operands(name, "bwd", cdt, 2, xc, gc, *ps).astype(x.dtype)]
    it = iter(dyn)
    for k, v in static:
        if v is not None:
            continue
        d = next(it)
        dp = _operands(name, f"d_{k}", cdt, 1, xc, *ps)
        out.append(_reduce_to(gc * dp, d.shape).astype(d.dtype))
    return tuple(out)


_traced.defvjp(_traced_fwd, _traced_bwd)


def route(act, x, static, dyn):
    """The compiled call of ``act`` on ``x`` with :mod:`iglu_np.jax`'s ``static`` and
    ``dyn`` (checked, broadcast), or None where the callbacks compute instead: no
    ``jax.ffi``, a default device other than the CPU, a float32 constant float32 cannot
    hold (iglu_np computes those in float64), a parameter array wider than the data, or
    traced parameters of a spec whose cross-parameter check is not its parameters'
    ``above`` (the handler checks only what the spec declares as data)."""
    if not usable() or jax.default_backend() != "cpu":
        return None
    spec = act.spec
    cdt = compute_dtype(x.dtype)
    given = dict(static)
    for k, v in static:
        if v is not None and not fits(v, cdt):
            return None
    if not dyn:
        vals = [given.get(p.name, p.default) for p in spec.params]
        return lambda: constant(act.name, tuple(vals), x)
    if spec.check is not None and not any(p.above for p in spec.params):
        return None
    for d in dyn:
        if not jnp.issubdtype(d.dtype, jnp.floating) or np.dtype(d.dtype).itemsize > cdt.itemsize:
            return None
    full = tuple((p.name, given[p.name] if p.name in given else p.default) for p in spec.params)
    return lambda: traced(act.name, full, x, *dyn)


def traced(name: str, static: tuple, x, *dyn):
    """``iglu_np.<name>`` with array parameters: ``static`` as :mod:`iglu_np.jax` builds
    it (``(name, number)`` for a constant, ``(name, None)`` for the next of ``dyn``), every
    parameter of the spec present, x already broadcast against ``dyn``."""
    return _traced(name, static, x, *dyn)


# --------------------------------------------------------------------------- gated forms
def _gated_target_name(name, op, lay, operands, cdt) -> str:
    from .backends.xla import cpu

    return f"iglu_np_glu_{name}_{op}_{lay}_{operands}_{cpu.DTYPES[np.dtype(cdt)]}"


def _gated_target(name, op, lay, operands, cdt) -> str:
    from .backends.xla import gated

    return _registered(
        _gated_target_name(name, op, lay, operands, cdt),
        lambda: gated.handler(name, op, lay, operands, cdt),
    )


def _gated_raw(static, op, *ops):
    """One gated custom call on ``ops`` (x, or gate and up of one shape; then grad_out
    for the backward), the loops' geometry computed from the operands' shapes."""
    from .backends.cpu.gated import geometry

    name, gate_first, axis, layout, lim, shift, vals = static
    x = ops[0]
    cdt = np.dtype(x.dtype)
    nd = len(ops) - (op == "bwd")
    if nd == 1:
        r, c, goff, uoff, rs, lay, oshape = geometry(x.shape, axis % x.ndim, layout, gate_first)
    else:
        r, c, goff, uoff, rs, lay, oshape = 1, x.size, 0, 0, 0, "s1", x.shape
    if op == "fwd":
        outs = jax.ShapeDtypeStruct(oshape, cdt)
    else:
        outs = tuple(jax.ShapeDtypeStruct(x.shape, cdt) for _ in range(nd))
    scalars = (r, c, goff, uoff, rs, lim, shift, *vals)
    attrs = {f"a{j:02d}": np.float64(v) for j, v in enumerate(scalars)}
    t = _gated_target(name, op, lay, nd, cdt)
    r = _ffi.ffi_call(t, outs)(*ops, **attrs)
    return r if op == "fwd" else tuple(r)


def _gated_fn(static, op):
    """:func:`_gated_raw` with its batching rule: every operand given the batch axis
    (the geometry is then that of the batched shapes; ``axis`` counts from the end)."""

    @jax.custom_batching.custom_vmap
    def f(*ops):
        return _gated_raw(static, op, *ops)

    @f.def_vmap
    def _rule(axis_size, in_batched, *ops):
        full = [
            o if b else jnp.broadcast_to(o[None], (axis_size, *o.shape))
            for o, b in zip(ops, in_batched)
        ]
        out = f(*full)
        return out, (True if op == "fwd" else tuple(True for _ in out))

    return f


def _gated_call(static, op, *ops):
    return _memo(("glu", static, op), lambda: _gated_fn(static, op))(*ops)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _glu(static, *data):
    return _gated_call(static, "fwd", *data)


def _glu_fwd(static, *data):
    return _gated_call(static, "fwd", *data), data


def _glu_bwd(static, data, ct):
    return tuple(_gated_call(static, "bwd", *data, ct))


_glu.defvjp(_glu_fwd, _glu_bwd)


def gated_route(g, x, up, axis, layout, lim, rounding, vals):
    """The compiled call of gated form ``g`` (number parameters ``vals``, checked; ``axis``
    from the end), or None where the callbacks compute instead: no ``jax.ffi``, a default
    device other than the CPU, ``rounding="twice"``, data that is not floating, or a
    float32 computation with a value float32 cannot hold. 16-bit data computes in float32
    and rounds once, as iglu_np does; with ``up`` given, x and up broadcast first."""
    if not usable() or jax.default_backend() != "cpu" or rounding != "once":
        return None
    dts = [x.dtype] + ([up.dtype] if up is not None else [])
    if not all(jnp.issubdtype(d, jnp.floating) for d in dts):
        return None
    dt = jnp.result_type(*dts)
    cdt = compute_dtype(dt)
    if not all(fits(v, cdt) for v in vals):
        return None
    static = (
        g._spec_name,
        bool(g.gate_first),
        int(axis),
        layout,
        float(lim),
        float(g.shift),
        tuple(float(v) for v in vals),
    )
    if up is None:
        return lambda: _glu(static, x.astype(cdt)).astype(dt)
    return lambda: _glu(static, *(a.astype(cdt) for a in jnp.broadcast_arrays(x, up))).astype(dt)
