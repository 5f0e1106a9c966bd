"""iglu_np's activations as differentiable JAX functions.

``iglu_np.jax.<name>(x, **params)`` is a :func:`jax.custom_vjp` function for every
activation in :data:`iglu_np.ACTIVATIONS` (generated from the registry, so a new
activation appears here with no edit). It works under :func:`jax.jit`, :func:`jax.grad`
and :func:`jax.vmap`:

* on the CPU each pass is a compiled XLA custom call (:mod:`iglu_np._jax_ffi`): the
  activation's CPU loops run on XLA's own buffers, threaded on XLA's thread pool, with no
  Python, no copy and the bits of ``iglu_np.<name>``; the backward pass is one call for
  ``grad_x`` and one per differentiated parameter;
* elsewhere, and for the few calls the compiled route does not take (see
  :func:`iglu_np._jax_ffi.route`), each pass is one :func:`jax.pure_callback` to the
  activation (forward) and to :meth:`~iglu_np.Activation.backward_all` (backward).

:func:`jax.export.export` serialises a function over the compiled route with
``disabled_checks=iglu_np.jax.export_checks()``; the process that deserialises it calls
:func:`register_exported` first.

Derivatives are first-order reverse mode (``grad``, ``vjp``): ``jax.jvp`` and second
derivatives raise JAX's error for a ``custom_vjp`` function or a callback.

Parameters are keyword-only, as in ``iglu_np``. A Python number (or numpy scalar) is a
constant: it is checked against its domain when the function is called (a ``ValueError``
names it, under ``jit`` too) and gets no cotangent. A JAX array (or numpy array) is
differentiable: it broadcasts against ``x`` (a scalar, one value per channel, ...) and its
cotangent has its own shape and dtype (on the compiled route a sum in XLA in the data's compute
dtype, which may differ from ``backward_all``'s float64 sum in the last bits). A traced array's values
are only known when the call runs; a value outside the domain then fails there, and JAX
raises iglu_np's message (``JaxRuntimeError``).

The result has ``x``'s dtype (float16, bfloat16, float32, float64; an integer ``x`` is
promoted to JAX's default float), shaped as ``x`` broadcast with the parameters.

The callbacks compute on the host: :func:`jax.pure_callback` runs its Python function
there, so an ``x`` on a GPU is copied to the host, iglu_np's CPU kernels compute, and the
result is copied back. This is correct on any device but pays two transfers per pass;
GPU handlers for the same custom calls are not built yet.

``import iglu_np`` never imports JAX; this module needs it (``pip install '.[jax]'`` in the
iglu_np checkout).
"""

from __future__ import annotations

import inspect
from functools import partial
from types import MappingProxyType

try:
    import jax
    import jax.numpy as jnp
except ImportError as e:  # pragma: no cover - exercised in a subprocess without jax
    raise ImportError(
        "iglu_np.jax needs JAX: install the extra with pip install '.[jax]' from the "
        "iglu_np checkout (or pip install jax)"
    ) from e

import numpy as np

from . import _aliases, _api, _gated, _jax_ffi, _params
from ._api import _acts
from ._dtypes import is_bf16

__all__ = ["ACTIVATIONS", "ALIASES", *_acts(), *_aliases.ALIASES]

_VMAP = "broadcast_all"
"""Elementwise kernels batch by broadcasting: every operand gets the batch axes (an
unbatched parameter is tiled), so each batch element's parameter gradient is reduced
separately by ``backward_all`` and comes back with the batch axes JAX expects.
``expand_dims`` would give an unbatched parameter size-1 batch axes, over which
``backward_all`` would sum the batch elements' gradients into one."""


def _is_constant(v) -> bool:
    """A Python or numpy scalar: a constant, validated now and never differentiated."""
    return isinstance(v, (int, float, np.generic)) and not isinstance(v, jax.Array)


def _float_dtype(name, x):
    dt = x.dtype
    if jnp.issubdtype(dt, jnp.floating):
        return dt
    if jnp.issubdtype(dt, jnp.integer) or dt == jnp.bool_:
        return jnp.dtype(jax.dtypes.canonicalize_dtype(jnp.float64))
    raise TypeError(
        f"iglu_np.jax.{name}: unsupported dtype {dt} for x; expected a real floating, "
        "integer or boolean array"
    )


def _align(v, nbatch: int, ndim: int):
    """``v`` (whose first ``nbatch`` axes are vmap's batch axes) with size-1 axes
    inserted after them so that its own axes line up with x's ``ndim`` trailing axes.
    Outside vmap numpy's broadcasting lines them up already, and a 0-d parameter stays
    0-d: iglu_np's one-pass backward takes scalar parameters."""
    if nbatch == 0:
        return v
    core = v.shape[nbatch:]
    return v.reshape(v.shape[:nbatch] + (1,) * (ndim - len(core)) + core)


def _param_array(v):
    """A parameter array on the host; bfloat16 as float32, which holds it exactly (the
    parameter checks know numpy's real kinds, and ml_dtypes' bfloat16 is not one)."""
    a = np.asarray(v)
    return a.astype(np.float32) if is_bf16(a.dtype) else a


def _host_params(static, dyn, nbatch, ndim):
    """The keyword parameters of one host call: constants as given, arrays aligned."""
    out, it = {}, iter(dyn)
    for k, v in static:
        out[k] = _align(_param_array(next(it)), nbatch, ndim) if v is None else v
    return out


def _forward_host(act, static, ndim, dtype, x, *dyn):
    x = np.asarray(x)
    y = act(x, **_host_params(static, dyn, x.ndim - ndim, ndim))
    return np.asarray(y, dtype=dtype)


def _backward_host(act, static, ndim, x, g, *dyn):
    x, g = np.asarray(x), np.asarray(g)
    nbatch = x.ndim - ndim
    params = _host_params(static, dyn, nbatch, ndim)
    if not dyn:  # constants only: their gradients are not wanted
        return (np.asarray(act.backward(x, g, **params), dtype=x.dtype),)
    gx, gp = act.backward_all(x, g, **params)
    res = [np.asarray(gx, dtype=x.dtype)]
    it = iter(dyn)
    for k, v in static:
        if v is None:
            d = np.asarray(next(it))
            res.append(np.asarray(gp[k], dtype=d.dtype).reshape(d.shape))
    return tuple(res)


@partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _apply(name, static, x, *dyn):
    return _fwd(name, static, x, *dyn)[0]


def _fwd(name, static, x, *dyn):
    act = _acts()[name]
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    y = jax.pure_callback(
        partial(_forward_host, act, static, x.ndim, x.dtype), out, x, *dyn, vmap_method=_VMAP
    )
    return y, (x, dyn)


def _bwd(name, static, res, g):
    x, dyn = res
    act = _acts()[name]
    shapes = (
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        *(jax.ShapeDtypeStruct(d.shape, d.dtype) for d in dyn),
    )
    grads = jax.pure_callback(
        partial(_backward_host, act, static, x.ndim),
        shapes,
        x,
        g.astype(x.dtype),
        *dyn,
        vmap_method=_VMAP,
    )
    return tuple(grads)


_apply.defvjp(_fwd, _bwd)
_jit_apply = jax.jit(_apply, static_argnums=(0, 1))


def _call(act, x, params):
    name, p = act.name, act._p
    for k in params:
        if k not in p.index:
            raise _params.unexpected(p, k)
    x = jnp.asarray(x)
    dt = _float_dtype(name, x)
    if x.dtype != dt:
        x = x.astype(dt)
    static, dyn, known = [], [], {}
    for k in p.param_names:
        if k not in params:
            continue
        v = params[k]
        if _is_constant(v):
            static.append((k, v))
            known[k] = v
            continue
        if not isinstance(v, jax.core.Tracer):
            known[k] = _param_array(v)  # a concrete array: its values are known now
        v = jnp.asarray(v)
        if not jnp.issubdtype(v.dtype, jnp.floating):
            v = v.astype(dt)  # an integer parameter array: differentiable as x's dtype
        static.append((k, None))
        dyn.append(v)
    # iglu_np's own checks on what is known now (domains; the cross-parameter check
    # only once every given parameter is known), so that a bad value raises its
    # ValueError here, under jit too, rather than from inside the callback
    if len(known) == len(static):
        _params.values(p, known)
    else:
        for k, v in known.items():
            _params.check(p, p.by_name[k], v)
    try:
        shape = jnp.broadcast_shapes(x.shape, *(d.shape for d in dyn))
    except ValueError:
        shapes = ", ".join(
            f"{k} {d.shape}" for (k, _), d in zip([s for s in static if s[1] is None], dyn)
        )
        raise ValueError(
            f"iglu_np.jax.{name}: parameters ({shapes}) do not broadcast against x of "
            f"shape {x.shape}"
        ) from None
    if shape != x.shape:
        x = jnp.broadcast_to(x, shape)
    compiled = _jax_ffi.route(act, x, static, dyn)
    if compiled is not None:
        return compiled()
    return _jit_apply(name, tuple(static), x, *dyn)


def _make(act):
    def fn(x, /, **params):
        return _call(act, x, params)

    fn.__name__ = fn.__qualname__ = act.name
    fn.__module__ = __name__
    sig = [inspect.Parameter("x", inspect.Parameter.POSITIONAL_ONLY)]
    sig += [
        inspect.Parameter(q.name, inspect.Parameter.KEYWORD_ONLY, default=q.default)
        for q in act.params
    ]
    fn.__signature__ = inspect.Signature(sig)
    ps = ", ".join(act.param_names)
    fn.__doc__ = (
        f"``iglu_np.{act.name}`` as a differentiable JAX function (:func:`jax.custom_vjp`).\n\n"
        f"{act.spec.summary}\n\n"
        + (
            f"Parameters ({ps}) are keyword-only: a Python number is a constant, a JAX "
            "array broadcastable to ``x`` is differentiated (its cotangent has its shape "
            "and dtype).\n\n"
            if act.params
            else ""
        )
        + "The result has ``x``'s dtype. On the CPU both passes are compiled XLA custom "
        "calls over iglu_np's CPU loops; elsewhere through :func:`jax.pure_callback`, "
        "which copies an array on a GPU to the host and back (see :mod:`iglu_np.jax`)."
    )
    return fn


ACTIVATIONS = MappingProxyType({name: _make(act) for name, act in _acts().items()})
"""A read-only mapping from each activation's name to its JAX function, in the registry's
order (``iglu_np.jax.ACTIVATIONS["iglu"] is iglu_np.jax.iglu``)."""
ALIASES = MappingProxyType(
    {a: _aliases.wrap(a, ACTIVATIONS[t], __name__) for a, (t, _) in _aliases.ALIASES.items()}
)
"""Alias name -> JAX function: Hugging Face's activation names (``iglu_np.ALIASES``) as
functions of their target, the alias's parameter values as defaults
(``iglu_np.jax.quick_gelu(x)`` is ``iglu_np.jax.swish(x, beta=1.702)``)."""


def export_checks() -> list:
    """The ``disabled_checks`` that let :func:`jax.export.export` serialise a function
    calling iglu_np's compiled route::

        exp = jax.export.export(jax.jit(f), disabled_checks=iglu_np.jax.export_checks())(x)

    JAX refuses custom calls that have no compatibility guarantee unless told which to
    accept; these are iglu_np's targets (and only those). A function whose calls take the
    callbacks instead cannot be exported (JAX refuses host callbacks)."""
    return _jax_ffi.export_checks()


def register_exported(exported) -> list:
    """Register, in this process, the custom-call targets that a deserialised
    :class:`jax.export.Exported` calls, before ``exported.call(...)``; returns their names.
    The handlers are this installation's (compiled, or loaded from the kernel cache): an
    export runs with the iglu_np of the process that calls it, and one calling a target
    this iglu_np lacks raises a ``ValueError`` naming it."""
    return _jax_ffi.register_exported(exported)


# The gated forms with number parameters: on the CPU one custom call each way over the
# fused CPU loops (iglu_np._jax_ffi.gated_route), else one custom_vjp with a
# pure_callback each way (below); array parameters compose the activation's function
# with jax.numpy's split, clamps and product instead.
def _gated_kw(static) -> dict:
    axis, layout, limit, rounding, params = static
    return dict(axis=axis, layout=layout, limit=limit, rounding=rounding, **dict(params))


def _gated_fwd_host(form, static, x, up):
    up = None if up is None else np.asarray(up)
    r = _api.get_gated(form)(np.asarray(x), up, **_gated_kw(static))
    return np.asarray(r, dtype=np.asarray(x).dtype)


def _gated_bwd_host(form, static, x, up, ct):
    x = np.asarray(x)
    up = None if up is None else np.asarray(up)
    r = _api.get_gated(form).backward(x, np.asarray(ct), up, **_gated_kw(static))
    if up is None:
        return (np.asarray(r, dtype=x.dtype),)
    return np.asarray(r[0], dtype=x.dtype), np.asarray(r[1], dtype=np.asarray(up).dtype)


def _gated_shape(static, x, up):
    if up is not None:
        return jnp.broadcast_shapes(x.shape, up.shape)
    shape = list(x.shape)
    shape[static[0]] //= 2
    return tuple(shape)


@partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _gated_apply(form, static, x, up):
    return _gated_fwd(form, static, x, up)[0]


def _gated_fwd(form, static, x, up):
    out = jax.ShapeDtypeStruct(_gated_shape(static, x, up), x.dtype)
    args = (x,) if up is None else (x, up)
    y = jax.pure_callback(
        lambda x, up=None: _gated_fwd_host(form, static, x, up), out, *args, vmap_method=_VMAP
    )
    return y, (x, up)


def _gated_bwd(form, static, res, ct):
    x, up = res
    shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype)]
    if up is not None:
        shapes.append(jax.ShapeDtypeStruct(up.shape, up.dtype))
    args = (x, ct.astype(x.dtype)) if up is None else (x, up, ct.astype(x.dtype))

    def host(*a):
        if up is None:
            return _gated_bwd_host(form, static, a[0], None, a[1])
        return _gated_bwd_host(form, static, a[0], a[1], a[2])

    grads = jax.pure_callback(host, tuple(shapes), *args, vmap_method=_VMAP)
    return (grads[0], None) if up is None else (grads[0], grads[1])


_gated_apply.defvjp(_gated_fwd, _gated_bwd)


def _clamp(a, lo, hi):
    # where, not minimum/clip: the gradient passes at the bound itself (torch.clamp's
    # convention; lax.min splits it between the operands at a tie)
    if hi is not None:
        a = jnp.where(a > hi, jnp.asarray(hi, a.dtype), a)
    if lo is not None:
        a = jnp.where(a < lo, jnp.asarray(lo, a.dtype), a)
    return a


def _gated_function(g, composed):
    def fn(
        x, up=None, /, *, axis=-1, layout=None, limit=_gated._DEFAULT, rounding="once", **params
    ):
        if not all(_is_constant(v) for v in params.values()):
            return composed(
                x, up, axis=axis, layout=layout, limit=limit, rounding=rounding, **params
            )
        q = g._params(params)
        q.pop("backend", None)
        vals = _params.values(g._p, q)  # iglu_np's domain checks, now
        lim = g._limit(limit)
        x = jnp.asarray(x)
        if up is not None:
            up = jnp.asarray(up)
            ax, lay = -1, g.layout  # not read with up given
        else:
            ax, lay = g._axis(x.shape, axis, layout)
            ax -= x.ndim  # from the end: vmap's batch axes come first
        rounding = g._rounding(rounding)
        compiled = _jax_ffi.gated_route(g, x, up, ax, lay, lim, rounding, vals)
        if compiled is not None:
            return compiled()
        static = (
            ax,
            lay,
            None if lim == float("inf") else lim,
            rounding,
            tuple((k, float(v)) for k, v in zip(g._p.param_names, vals)),
        )
        return _gated_apply(g.name, static, x, up)

    for attr in ("__name__", "__qualname__", "__module__", "__doc__"):
        setattr(fn, attr, getattr(composed, attr))
    return fn


GATED = MappingProxyType(
    {
        n: _gated_function(
            g,
            _gated.bridge(
                g,
                ACTIVATIONS[g._spec_name],
                _clamp,
                lambda a: a.astype(jnp.float32),
                lambda a, dt: a.astype(dt),
                __name__,
            ),
        )
        for n, g in _api.all_gated().items()
    }
)
"""Gated form name -> JAX function (``iglu_np.jax.swiglu`` ...): the named forms and
``<activation>_glu`` for every activation. With number parameters, one custom_vjp over
iglu_np's fused CPU loops (an XLA custom call each way on the CPU, as the activations';
a pure_callback each way elsewhere and with ``rounding="twice"``); with array parameters, the
activation's function between jax.numpy's split, clamps and product
(:mod:`iglu_np._gated`)."""
globals().update(ACTIVATIONS)
globals().update(ALIASES)
globals().update(GATED)
__all__ += ["GATED", *GATED, "export_checks", "register_exported"]
