"""The gated forms for torch: ``iglu_np.torch.swiglu`` ... and ``nn.Module`` layers
(``iglu_np.torch.SwiGLU`` ...), built by :mod:`iglu_np.torch` from its activations.

CPU tensors with number parameters take one custom op, ``torch.ops.iglu_np.gated`` (the
form's name an argument), with its backward ``gated_backward``: iglu_np's fused CPU loops
on the tensors' memory, one opaque node each for ``torch.compile`` (eager calls run its
kernels without the op's dispatch: :mod:`iglu_np._torch_eager`). Otherwise (CUDA
tensors, tensor parameters such as a layer's learnable ones) a function is
:func:`iglu_np._gated.bridge` over the activation's custom op: the split, the clamps and
the product are torch operations around the one opaque activation node, differentiable in
every tensor parameter, and CUDA tensors stay on their device.
"""

from __future__ import annotations

import math

import torch

from . import _params, _torch_eager
from ._api import all_gated, gated_forms, get_gated
from ._gated import _DEFAULT, _cpu_gated, bridge

__all__ = ["Gated", "build"]

_NAMES = {
    "swiglu": "SwiGLU",
    "geglu": "GeGLU",
    "geglu_tanh": "GeGLUTanh",
    "reglu": "ReGLU",
    "glu": "GLU",
    "swiglu_oai": "SwiGLUOAI",
}


def _clamp(a, lo, hi):
    return a.clamp(min=lo, max=hi)


def _narrow(a, dt):
    return a.to(dt)


def _widen(a):
    return a.float()


# --------------------------------------------------------------------------- the fused op
_OP = "(Tensor x, Tensor? up, str form, int axis, str layout, float limit, str rounding, float[] params)"


_THIN = (torch.float32, torch.float64)


def _call(form, x, up, axis, layout, limit, rounding, params, grad=None):
    g = get_gated(form)
    lim = None if math.isinf(limit) else limit
    q = dict(zip(g._p.param_names, params))
    x = x.detach()
    up = up.detach() if up is not None else None
    if (
        up is None
        and rounding == "once"
        and x.dtype in _THIN
        and x.device.type == "cpu"
        and not x.is_neg()
        and (grad is None or (grad.dtype == x.dtype and not grad.is_neg()))
    ):
        # the tensors' memory as numpy arrays (dtypes and views that .numpy() takes as
        # they are), straight to the fused loop where the thin path takes them
        cg = _cpu_gated()
        xn = x.numpy()
        if grad is None:
            r = cg.thin_forward(g, xn, None, axis, layout, lim, q)
        else:
            r = cg.thin_backward(g, xn, grad.numpy(), None, axis, layout, lim, q)
        if r is not None:
            return torch.from_numpy(r)
    kw = dict(axis=axis, layout=layout, limit=lim, rounding=rounding, **q)
    with torch.no_grad():
        if grad is None:
            return g(x, up, **kw)
        return g.backward(x, grad, up, **kw)


def _gated_impl(x, up, form, axis, layout, limit, rounding, params):
    return _call(form, x, up, axis, layout, limit, rounding, params)


def _gated_backward_impl(grad, x, up, form, axis, layout, limit, rounding, params):
    r = _call(form, x, up, axis, layout, limit, rounding, params, grad.detach().contiguous())
    return [r] if up is None else list(r)


_gated_op = torch.library.custom_op(
    "iglu_np::gated", _gated_impl, mutates_args=(), schema=_OP + " -> Tensor"
)
_gated_backward_op = torch.library.custom_op(
    "iglu_np::gated_backward",
    _gated_backward_impl,
    mutates_args=(),
    schema=_OP.replace("(Tensor x", "(Tensor grad, Tensor x") + " -> Tensor[]",
)


@_gated_op.register_fake
def _(x, up, form, axis, layout, limit, rounding, params):
    if up is not None:
        return x.new_empty(torch.broadcast_shapes(x.shape, up.shape))
    shape = list(x.shape)
    shape[axis] //= 2
    return x.new_empty(shape)


@_gated_backward_op.register_fake
def _(grad, x, up, form, axis, layout, limit, rounding, params):
    return [torch.empty_like(x)] if up is None else [torch.empty_like(x), torch.empty_like(up)]


def _setup(ctx, inputs, output):
    x, up, *rest = inputs
    ctx.rest = rest
    ctx.has_up = up is not None
    ctx.save_for_backward(x, *([up] if up is not None else []))


def _backward_through(bwd):
    def backward(ctx, grad):
        x, *up = ctx.saved_tensors
        up = up[0] if ctx.has_up else None
        res = bwd(grad, x, up, *ctx.rest)
        return (res[0], res[1] if ctx.has_up else None, *([None] * len(ctx.rest)))

    return backward


_gated_op.register_autograd(_backward_through(_gated_backward_op), setup_context=_setup)
_GatedFunction = _torch_eager.function(
    "gated_function",
    _gated_impl,
    _setup,
    _backward_through(_gated_backward_impl),
    _backward_through(_gated_backward_op),
)


def _gated(*args):
    """``_gated_op(*args)``, eager calls without its dispatch (:mod:`._torch_eager`)."""
    tensors = args[:2]
    if not _torch_eager.eager(tensors):
        return _gated_op(*args)
    if _torch_eager.needs_grad(tensors):
        return _GatedFunction.apply(*args)
    return _gated_impl(*args)


def _fused(g, composed):
    """``g``'s function: the fused op where it applies, else ``composed``."""

    def fn(x, up=None, /, *, axis=-1, layout=None, limit=_DEFAULT, rounding="once", **params):
        if (
            isinstance(x, torch.Tensor)
            and x.device.type == "cpu"
            and (up is None or (isinstance(up, torch.Tensor) and up.device.type == "cpu"))
            and not any(isinstance(v, torch.Tensor) for v in params.values())
            and x.dtype in Gated._floats
        ):
            q = g._params(params)
            q.pop("backend", None)
            vals = [float(v) for v in _params.values(g._p, q)]
            lim = g._limit(limit)
            # the split's checks now (with up given, axis and layout are not read)
            ax, lay = g._axis(tuple(x.shape), axis, layout) if up is None else (-1, g.layout)
            return _gated(x, up, g.name, ax, lay, lim, g._rounding(rounding), vals)
        return composed(x, up, axis=axis, layout=layout, limit=limit, rounding=rounding, **params)

    for attr in ("__name__", "__qualname__", "__module__", "__doc__"):
        setattr(fn, attr, getattr(composed, attr))
    return fn


def build(functions, activation_module, class_name, module: str, floats):
    """``(gated functions, gated module classes)`` by name; ``floats``: the dtypes the
    torch functions take."""
    Gated._floats = tuple(floats)
    fns = {
        name: _fused(g, bridge(g, functions[g._spec_name], _clamp, _widen, _narrow, module))
        for name, g in all_gated().items()
    }
    Gated._activation = activation_module
    Gated._module = Gated.__module__ = module
    classes = {}
    for name in gated_forms():
        cname = _NAMES.get(name) or class_name(name[: -len("_glu")]) + "GLU"
        classes[name] = type(
            cname,
            (Gated,),
            {
                "__init__": _init(name),
                "__doc__": f"``iglu_np.{name}`` as an ``nn.Module``: {get_gated(name).source}.",
                "__module__": module,
            },
        )
    return fns, classes


def _init(name):
    def __init__(self, **kw):
        Gated.__init__(self, name, **kw)

    return __init__


class Gated(torch.nn.Module):
    """A gated form as a layer: ``forward(x, up=None)`` is ``act(gate) * up``, the
    activation an :class:`iglu_np.torch.Activation` with its parameters fixed or
    learnable (``learnable``, ``num_parameters``, ``channel_dim`` as there)."""

    _activation = None  # iglu_np.torch.Activation (set by build)
    _floats = ()  # the dtypes iglu_np.torch takes (set by build)
    _module = __name__

    def __init__(
        self,
        name,
        *,
        axis=-1,
        layout=None,
        limit=_DEFAULT,
        rounding="once",
        learnable=False,
        num_parameters=1,
        channel_dim=1,
        **params,
    ):
        super().__init__()
        g = get_gated(name)
        self.gated = g.name
        q = {**g._fixed, **{g._rename.get(k, k): v for k, v in params.items()}}
        if learnable not in (True, False, None):
            names = (learnable,) if isinstance(learnable, str) else tuple(learnable)
            learnable = tuple(g._rename.get(k, k) for k in names)
        self.act = Gated._activation(
            g._spec_name,
            learnable=learnable,
            num_parameters=num_parameters,
            channel_dim=channel_dim,
            **q,
        )
        # the form's own limit resolved now: a sentinel would not survive pickling
        limit = g.limit if limit is _DEFAULT else limit
        self._kw = dict(axis=axis, layout=layout, limit=limit, rounding=rounding)
        self._bind()

    def _bind(self):
        g = get_gated(self.gated)
        self._composed = bridge(
            g, lambda a, **_: self.act(a), _clamp, _widen, _narrow, Gated._module
        )
        self._fn = _fused(g, self._composed)

    # the bound functions are closures: pickled as the form's name, rebuilt on load
    def __getstate__(self):
        st = dict(self.__dict__)
        st.pop("_composed", None)
        st.pop("_fn", None)
        return st

    def __setstate__(self, st):
        self.__dict__.update(st)
        self._bind()

    def forward(self, x, up=None):
        vals = self.act._values()
        if all(isinstance(v, float) for v in vals.values()):
            # fixed numbers: the fused op (the activation's values, by its names)
            back = get_gated(self.gated)._back
            return self._fn(x, up, **self._kw, **{back.get(k, k): v for k, v in vals.items()})
        # learnable (tensor) values: the layer's activation between torch's own ops
        return self._composed(x, up, **self._kw)

    def extra_repr(self) -> str:
        kw = {k: v for k, v in self._kw.items() if v is not None}
        return f"{self.gated!r}, " + ", ".join(f"{k}={v!r}" for k, v in kw.items())
