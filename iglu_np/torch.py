"""iglu_np's activations as differentiable torch operations and ``nn.Module`` layers.

``iglu_np.torch.<name>(x, **params)`` is every activation of :data:`iglu_np.ACTIVATIONS`
for torch tensors: ``x`` and tensor parameters may require grad, and the backward pass
runs iglu_np's fused backward kernel (``backward_all``: the gradient in x and in every
parameter from one read of x and the incoming gradient). Parameters are Python numbers or
tensors that broadcast to ``x``'s shape (e.g. one value per channel, shape ``(C, 1, 1)``
for ``(N, C, H, W)`` input); a parameter tensor's gradient has the parameter's shape.

Each activation is one ``torch.library.custom_op``, ``torch.ops.iglu_np.<name>``, with its
backward ``torch.ops.iglu_np.<name>_backward``: ``torch.compile`` (``fullgraph=True``
too) keeps each as one opaque node of the graph, forward and backward. An eager call on
plain CPU or CUDA tensors runs the same kernels without the op's dispatch (an
``autograd.Function``, or no autograd node where nothing requires grad): the same bits at
a fraction of a small call's cost. Under ``torch.compile``, ``torch.func`` transforms, for
tensor subclasses and other devices (``meta``) the function calls the op.

The kernels run on the tensors' own memory. CPU tensors are viewed as numpy arrays (no
copy; bfloat16 through ``ml_dtypes``); results go into tensors torch allocates, through
``out=``. CUDA tensors go to the CuPy kernels through DLPack, on torch's current stream
(bfloat16 there computes on a float32 copy, which needs no bfloat16 support from CuPy's
DLPack and gives the same bits: float32 math rounded once to nearest even).

Dtypes: float16, bfloat16, float32 and float64; the result has x's dtype. Tensor
parameters compute in x's compute dtype (float32 for 16-bit x) and their gradients come
back in their own dtype. A parameter outside its domain raises iglu_np's ValueError when
the operation runs. Only first derivatives are implemented (no double backward).

:class:`Activation` is the ``nn.Module`` form, with learnable parameters; every
activation has a named subclass (``IGLU``, ``GELU``, ``LeakyReLU``, ``XIELU``, ...;
:data:`MODULES` maps each activation's name to its class).

The gated forms (:mod:`iglu_np._gated`) are functions too: ``iglu_np.torch.swiglu``,
``glu``, ``swiglu_oai``, ``iglu_glu``, ... and ``<activation>_glu`` for every activation
(:data:`GATED`; CPU tensors with number parameters through the fused op
``torch.ops.iglu_np.gated``), with layers ``SwiGLU``, ``GeGLU``, ``ReGLU``, ``GLU``, ``SwiGLUOAI``,
``IGLUGLU``, ``XIELUGLU``, ``GeGLUTanh`` (:data:`GATED_MODULES`, :class:`Gated`).

Importing ``iglu_np`` never imports torch; this module needs it
(``pip install '.[torch]'`` in the iglu_np checkout).
"""

from __future__ import annotations

try:
    import torch
except ImportError as e:  # ModuleNotFoundError, or a broken torch install
    raise ImportError(
        "iglu_np.torch needs PyTorch, which is not importable here "
        f"({type(e).__name__}: {e}); install it with pip install '.[torch]' in the "
        "iglu_np checkout (or pip install torch)"
    ) from e

import inspect
import math
from types import MappingProxyType

import numpy as np

from . import _aliases, _params, _torch_eager
from ._api import Activation as _Act
from ._api import _acts

__all__ = ["Activation", "ALIASES", "FUNCTIONS", "MODULES", "class_name"]  # + generated names

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# --------------------------------------------------------------------------- tensors
def _compute_dtype(dt: torch.dtype) -> torch.dtype:
    return torch.float64 if dt == torch.float64 else torch.float32


def _np(t: torch.Tensor):
    """A CPU tensor as a numpy array over the same memory."""
    if t.requires_grad:
        t = t.detach()
    if t.dtype is torch.bfloat16:
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError(
                "iglu_np.torch: bfloat16 CPU tensors need ml_dtypes (pip install ml_dtypes)"
            ) from None
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _from_np(a, dtype: torch.dtype, shape) -> torch.Tensor:
    """A numpy result (a parameter's gradient, parameter-sized) as a tensor."""
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        t = torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(a))
    return t.to(dtype).reshape(shape).contiguous()


def _params_of(act, args):
    """``{name: value}`` from the ops' flat (value, tensor or None) argument pairs."""
    out = {}
    for i, n in enumerate(act.param_names):
        v, t = args[2 * i], args[2 * i + 1]
        out[n] = v if t is None else t
    return out


# --------------------------------------------------------------------------- CPU
def _forward_cpu(act, x, params):
    y = torch.empty_like(x)
    host = {k: (_np(v) if isinstance(v, torch.Tensor) else v) for k, v in params.items()}
    act(_np(x), out=_np(y), **host)
    return y


def _backward_cpu(act, grad, x, params, needs):
    host = {k: (_np(v) if isinstance(v, torch.Tensor) else v) for k, v in params.items()}
    xn, gn = _np(x), _np(grad)
    want = [n for n, need in zip(act.param_names, needs[1:]) if need]
    gx = torch.empty_like(x) if needs[0] else None
    grads = {}
    if gx is not None and want:
        _, grads = act.backward_all(xn, gn, out=_np(gx), **host)
    elif gx is not None:
        act.backward(xn, gn, out=_np(gx), **host)
    elif want:
        grads = act.backward_params(xn, gn, **host)
    return gx, {n: _from_np(grads[n], params[n].dtype, params[n].shape) for n in want}


# --------------------------------------------------------------------------- CUDA
def _cupy():
    try:
        import cupy
    except ImportError:
        raise RuntimeError(
            "iglu_np.torch: CUDA tensors run on iglu_np's CuPy kernels, and cupy is not "
            "installed; pip install '.[cuda12]' (or '.[cuda13]') in the iglu_np checkout"
        ) from None
    return cupy


def _on_gpu(x, fn):
    """``fn(cupy, as_cupy)`` on x's device and torch's current stream there."""
    cupy = _cupy()
    stream = torch.cuda.current_stream(x.device)
    with cupy.cuda.Device(x.device.index), cupy.cuda.ExternalStream(stream.cuda_stream):
        return fn(cupy, lambda t: cupy.from_dlpack(t.detach()))


def _widen_bf16(x):
    # A float32 copy: independent of CuPy's bfloat16 DLPack support, and the same bits
    # (the kernels compute bfloat16 in float32; .to(bfloat16) rounds to nearest even).
    return x.float() if x.dtype == torch.bfloat16 else x


def _forward_cuda(act, x, params):
    xc = _widen_bf16(x)
    y = torch.empty_like(xc)

    def run(cupy, cp):
        dev = {k: (cp(v) if isinstance(v, torch.Tensor) else v) for k, v in params.items()}
        act(cp(xc), out=cp(y), **dev)

    _on_gpu(x, run)
    return y.to(x.dtype) if y.dtype != x.dtype else y


def _backward_cuda(act, grad, x, params, needs):
    xc, gc = _widen_bf16(x), _widen_bf16(grad)
    want = [n for n, need in zip(act.param_names, needs[1:]) if need]
    gx = torch.empty_like(xc) if needs[0] else None

    def run(cupy, cp):
        dev = {k: (cp(v) if isinstance(v, torch.Tensor) else v) for k, v in params.items()}
        cx, cg = cp(xc), cp(gc)
        if gx is not None and want:
            return act.backward_all(cx, cg, out=cp(gx), **dev)[1]
        if gx is not None:
            act.backward(cx, cg, out=cp(gx), **dev)
            return {}
        return act.backward_params(cx, cg, **dev) if want else {}

    grads = _on_gpu(x, run)
    if gx is not None and gx.dtype != x.dtype:
        gx = gx.to(x.dtype)
    return gx, {
        n: torch.from_dlpack(grads[n]).to(params[n].dtype).reshape(params[n].shape).contiguous()
        for n in want
    }


# --------------------------------------------------------------------------- the ops
def _schema_params(act) -> str:
    return "".join(f", float {n}, Tensor? {n}_tensor" for n in act.param_names)


def _kernels(act):
    """``(forward, backward)``: the activation's computation on the ops' flat arguments,
    ``forward(x, *args) -> Tensor`` and ``backward(grad, x, *args, needs) -> [Tensor]``,
    shared by the registered ops and the eager autograd path."""
    name = act.name

    def forward(x, *args):
        params = _params_of(act, args)
        if x.device.type == "cpu":
            return _forward_cpu(act, x, params)
        if x.device.type == "cuda":
            return _forward_cuda(act, x, params)
        raise TypeError(
            f"iglu_np.torch.{name}: unsupported device {x.device}; expected a CPU or CUDA tensor"
        )

    def backward(grad, x, *args):
        *args, needs = args
        params = _params_of(act, args)
        if x.device.type == "cuda":
            gx, grads = _backward_cuda(act, grad, x, params, needs)
        else:
            gx, grads = _backward_cpu(act, grad, x, params, needs)
        return ([gx] if gx is not None else []) + list(grads.values())

    return forward, backward


def _autograd(bwd):
    """``(setup_context, backward)`` of an op whose backward is ``bwd`` (the registered
    backward op, or its kernel directly)."""

    def setup_context(ctx, inputs, output):
        x, *args = inputs
        ctx.values = args[0::2]
        ctx.has_tensor = [t is not None for t in args[1::2]]
        ctx.save_for_backward(x, *(t for t in args[1::2] if t is not None))

    def backward(ctx, grad):
        x, *saved = ctx.saved_tensors
        it = iter(saved)
        tensors = [next(it) if has else None for has in ctx.has_tensor]
        needs = [bool(ctx.needs_input_grad[0])]
        needs += [bool(ctx.needs_input_grad[2 + 2 * i]) for i in range(len(tensors))]
        flat = []
        for v, t in zip(ctx.values, tensors):
            flat += [v, t]
        res = iter(bwd(grad, x, *flat, needs) if any(needs) else [])
        out = [next(res) if needs[0] else None]
        for need in needs[1:]:
            out += [None, next(res) if need else None]
        return tuple(out)

    return setup_context, backward


def _define_ops(act, forward, backward):
    """``torch.ops.iglu_np.<name>`` and its backward, ``<name>_backward``, for ``act``.

    Every parameter is two arguments, a float and an optional tensor (the tensor, when
    given, is the value): torch's operator schemas have no float-or-tensor type, and a
    single optional tensor is what custom_op's autograd differentiates."""
    name = act.name
    ps = _schema_params(act)
    fwd = torch.library.custom_op(
        f"iglu_np::{name}", forward, mutates_args=(), schema=f"(Tensor x{ps}) -> Tensor"
    )
    bwd = torch.library.custom_op(
        f"iglu_np::{name}_backward",
        backward,
        mutates_args=(),
        schema=f"(Tensor grad, Tensor x{ps}, bool[] needs) -> Tensor[]",
    )

    @fwd.register_fake
    def _(x, *args):
        return torch.empty_like(x)

    @bwd.register_fake
    def _(grad, x, *args):
        *args, needs = args
        tensors = args[1::2]
        out = [torch.empty_like(x)] if needs[0] else []
        # parameter gradients come back contiguous (_from_np), whatever the parameter's strides
        return out + [t.new_empty(t.shape) for t, need in zip(tensors, needs[1:]) if need]

    setup_context, autograd_backward = _autograd(bwd)
    fwd.register_autograd(autograd_backward, setup_context=setup_context)
    return fwd, bwd


def _eager_function(act, forward, backward, backward_op):
    """The eager calls' ``autograd.Function`` over the op's kernels (:mod:`._torch_eager`)."""
    setup_context, direct = _autograd(backward)
    _, recorded = _autograd(backward_op)
    return _torch_eager.function(f"{act.name}_function", forward, setup_context, direct, recorded)


# --------------------------------------------------------------------------- functions
def _param_arg(act, fname, x, p, v):
    """The (float, tensor or None) pair that carries parameter ``p``'s value ``v``."""
    if isinstance(v, torch.Tensor):
        if not v.is_floating_point():
            v = v.to(torch.get_default_dtype())
        if v.device != x.device:
            if v.dim() != 0:
                raise ValueError(
                    f"{fname}: parameter {p.name} is on {v.device} and x on {x.device}; "
                    "move them to one device"
                )
            v = v.to(x.device)
        if v.dim() and torch.broadcast_shapes(v.shape, x.shape) != x.shape:
            raise ValueError(
                f"{fname}: parameter {p.name} of shape {tuple(v.shape)} does not broadcast "
                f"to x's shape {tuple(x.shape)}"
            )
        return p.default, v.to(_compute_dtype(x.dtype))
    if isinstance(v, (bool, int, float, np.generic)):
        return float(v), None
    if isinstance(v, np.ndarray):
        return _param_arg(act, fname, x, p, torch.as_tensor(v, device=x.device))
    raise TypeError(
        f"{fname}: parameter {p.name} must be a real number or a tensor, got {type(v).__name__}"
    )


def _make_function(act, op, function, forward):
    name = act.name
    fname = f"iglu_np.torch.{name}"
    by_name = {p.name: p for p in act.params}
    spec_params = act.params

    def fn(x, /, **params):
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"{fname}: x must be a torch.Tensor, got {type(x).__name__}; "
                f"iglu_np.{name} takes numpy arrays"
            )
        if x.dtype not in _FLOATS:
            raise TypeError(
                f"{fname}: unsupported dtype {x.dtype}; expected float16, "
                "bfloat16, float32 or float64 (convert with x.float())"
            )
        for k in params:
            if k not in by_name:
                raise _params.unexpected(act._p, k)
        args = []
        for p in spec_params:
            if p.name in params:
                args += _param_arg(act, fname, x, p, params[p.name])
            else:
                args += [p.default, None]
        tensors = (x, *args[1::2])
        if not _torch_eager.eager(tensors):
            return op(x, *args)
        if _torch_eager.needs_grad(tensors):
            return function.apply(x, *args)
        return forward(x, *args)

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    sig = [inspect.Parameter("x", inspect.Parameter.POSITIONAL_ONLY)]
    sig += [
        inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default)
        for p in act.params
    ]
    fn.__signature__ = inspect.Signature(sig)
    doms = "; ".join(f"{p.name}={p.default!r} ({p.domain})" for p in act.params)
    fn.__doc__ = (
        f"{act.spec.summary}\n\n"
        f"``iglu_np.{name}`` for torch tensors, differentiable in x and in every tensor "
        f"parameter (parameters: {doms or 'none'}); see ``help(iglu_np.{name})`` for the "
        "formula and :mod:`iglu_np.torch` for dtypes and devices."
    )
    return fn


# --------------------------------------------------------------------------- modules
_TOKENS = {
    "relu": "ReLU",
    "prelu": "PReLU",
    "elu": "ELU",
    "celu": "CELU",
    "selu": "SELU",
    "gelu": "GELU",
    "silu": "SiLU",
    "iglu": "IGLU",
    "atlu": "ATLU",
}


def class_name(name: str) -> str:
    """The ``nn.Module`` class name of activation ``name``: torch's spelling of the units
    (``ReLU``, ``GELU``, ``SiLU``, ``Hardtanh``), an ``x`` or ``xi`` prefix in capitals
    (``XSiLU``, ``XIELU``), a trailing number kept (``relu2`` -> ``ReLU2``), a one-letter
    word after the first kept as a subscript (``gelu_a`` -> ``GELUa``), other words
    capitalised (``leaky_relu`` -> ``LeakyReLU``, ``z_gate`` -> ``ZGate``)."""
    parts = []
    for i, w in enumerate(name.split("_")):
        stem = w.rstrip("0123456789")
        num = w[len(stem) :]
        if stem in _TOKENS:
            parts.append(_TOKENS[stem] + num)
        elif stem[:1] == "x" and stem[1:] in _TOKENS:
            parts.append("X" + _TOKENS[stem[1:]] + num)
        elif stem[:2] == "xi" and stem[2:] in _TOKENS:
            parts.append("XI" + _TOKENS[stem[2:]] + num)
        elif i and len(w) == 1:
            parts.append(w)
        else:
            parts.append(w[:1].upper() + w[1:])
    return "".join(parts)


def _softplus_floored(raw):
    """softplus(raw), at least the dtype's smallest normal (so a bound stays strict in
    floating point); the gradient passes straight through the floor."""
    sp = torch.nn.functional.softplus(raw)
    return sp + (sp.clamp_min(torch.finfo(raw.dtype).tiny) - sp).detach()


def _above(base, raw):
    """``base + softplus(raw)``, strictly above ``base`` in floating point: softplus is
    floored at two ulps of the largest ``|base|`` (straight-through, as above)."""
    sp = torch.nn.functional.softplus(raw)
    fi = torch.finfo(raw.dtype)
    b = torch.as_tensor(base, dtype=raw.dtype, device=raw.device).detach()
    floor = (2 * fi.eps * b.abs().max()).clamp_min(fi.tiny)
    return base + (sp + (torch.maximum(sp, floor) - sp).detach())


def _constrain(p, raw, vals):
    """Parameter ``p``'s value from its unconstrained raw tensor (the same maps as
    :func:`iglu_np.nn.layers.param_transform`)."""
    if p.above and p.above in vals:
        return _above(vals[p.above], raw)
    lo, hi = p.lo, p.hi
    if math.isfinite(lo) and math.isfinite(hi):
        return lo + (hi - lo) * torch.sigmoid(raw)
    if math.isfinite(lo):
        return lo + _softplus_floored(raw)
    if math.isfinite(hi):
        return hi - _softplus_floored(raw)
    return raw


def _constrained(p) -> bool:
    return bool(p.above) or math.isfinite(p.lo) or math.isfinite(p.hi)


class Activation(torch.nn.Module):
    """An iglu_np activation as a layer, its parameters fixed or learnable.

    Parameters
    ----------
    name : str
        The activation (a key of :data:`iglu_np.ACTIVATIONS`). The named subclasses
        (``IGLU``, ``GELU``, ...) fix it.
    learnable : bool, str or sequence of str
        The parameters to train (``True``: all of them). Each is an ``nn.Parameter``; one
        with a bounded domain (IGLU's ``sigma > 0``, xIELU's ``alpha_n > beta``) is stored
        unconstrained as ``raw_<param>`` and mapped into its domain on every call, as
        iglu_np's own trainer does (:func:`iglu_np.nn.layers.param_transform`), so that no
        optimiser step leaves it; ``module.<param>`` is the value in the domain.
        An unbounded one (``negative_slope``, ``weight``) is the ``nn.Parameter`` itself.
    num_parameters : int
        1 (one value per layer), or the number of channels: one value per channel along
        ``channel_dim``, as ``torch.nn.PReLU``.
    channel_dim : int
        The channel axis of the input (1, as for ``torch.nn.PReLU``: ``(N, C, ...)``).
    **params
        Initial (learnable) or fixed values, defaults from the activation. A fixed
        tensor value is a buffer and must broadcast to the input.

    Examples
    --------
    >>> import torch, iglu_np.torch as it
    >>> layer = it.IGLU(sigma=0.5, learnable=True, num_parameters=3)
    >>> layer(torch.zeros(2, 3)).shape
    torch.Size([2, 3])
    >>> [n for n, _ in layer.named_parameters()]
    ['raw_sigma']
    >>> layer.sigma
    tensor([0.5000, 0.5000, 0.5000], grad_fn=<AddBackward0>)
    """

    def __init__(
        self, name: str, *, learnable=False, num_parameters: int = 1, channel_dim: int = 1, **params
    ):
        super().__init__()
        act = _acts().get(name.name if isinstance(name, _Act) else name)
        if act is None:
            from . import get

            act = get(name)  # the KeyError listing the known names
        self.activation = act.name
        self._fn = FUNCTIONS[act.name]
        for k in params:
            if k not in act.param_names:
                raise _params.unexpected(act._p, k)
        if learnable is True:
            learnable = act.param_names
        elif learnable is False or learnable is None:
            learnable = ()
        elif isinstance(learnable, str):
            learnable = (learnable,)
        learnable = tuple(learnable)
        bad = [n for n in learnable if n not in act.param_names]
        if bad:
            raise ValueError(
                f"{class_name(act.name)}: cannot learn {', '.join(bad)}; its parameters are "
                f"{', '.join(act.param_names) or 'none'}"
            )
        if int(num_parameters) != num_parameters or num_parameters < 1:
            raise ValueError(f"num_parameters must be a positive integer, got {num_parameters!r}")
        self.num_parameters = int(num_parameters)
        self.channel_dim = int(channel_dim)
        host = {
            k: (v.detach().cpu().double().numpy() if isinstance(v, torch.Tensor) else v)
            for k, v in params.items()
        }
        values = {**act.defaults, **host}
        _params.values(act._p, values)  # domains and combinations: iglu_np's ValueError
        self.learnable = learnable
        shape = () if self.num_parameters == 1 else (self.num_parameters,)
        dtype = torch.get_default_dtype()
        # A parameter another one must exceed (xIELU's beta) comes first.
        deps = {p.above for p in act.params if p.above}
        self._order = sorted(learnable, key=lambda n: 0 if n in deps else 1)
        self._fixed = {}
        init = {}
        for p in act.params:
            v = params.get(p.name, p.default)
            if p.name in learnable:
                continue
            if isinstance(v, (torch.Tensor, np.ndarray)):
                self.register_buffer(p.name, torch.as_tensor(v, dtype=dtype))
                self._fixed[p.name] = None  # the buffer
            else:
                self._fixed[p.name] = float(v)
        from .nn.layers import param_transform

        for n in self._order:
            p = act.spec.param(n)
            v = np.broadcast_to(np.asarray(values[n], dtype=np.float64), shape)
            if _constrained(p):
                raw = param_transform(act, n)[1](v, {**values, **init})
                self.register_parameter(
                    "raw_" + n, torch.nn.Parameter(torch.tensor(np.array(raw), dtype=dtype))
                )
            else:
                self.register_parameter(
                    n, torch.nn.Parameter(torch.tensor(np.array(v), dtype=dtype))
                )
            init[n] = v

    def _values(self) -> dict:
        act = _acts()[self.activation]
        vals = {n: (getattr(self, n) if v is None else v) for n, v in self._fixed.items()}
        for n in self._order:
            p = act.spec.param(n)
            if _constrained(p):
                vals[n] = _constrain(p, getattr(self, "raw_" + n), vals)
            else:
                vals[n] = getattr(self, n)
        return vals

    def __getattr__(self, attr):
        if attr != "_order" and attr in self.__dict__.get("_order", ()):
            if "raw_" + attr in self._parameters:
                return self._values()[attr]
        return super().__getattr__(attr)

    def _shaped(self, v, x):
        """A per-channel learnable value as a tensor broadcasting along the channel axis."""
        if not isinstance(v, torch.Tensor) or v.dim() != 1 or self.num_parameters == 1:
            return v
        if x.dim() < 2:
            raise ValueError(
                f"{type(self).__name__}: {self.num_parameters} parameters per channel need an "
                f"input with a channel axis; got shape {tuple(x.shape)}"
            )
        d = self.channel_dim % x.dim()
        return v.reshape((-1,) + (1,) * (x.dim() - 1 - d))

    def forward(self, x):
        learn = set(self.learnable)
        return self._fn(
            x, **{k: (self._shaped(v, x) if k in learn else v) for k, v in self._values().items()}
        )

    def extra_repr(self) -> str:
        act = _acts()[self.activation]
        parts = [] if type(self) is not Activation else [repr(self.activation)]
        for p in act.params:
            if p.name in self.learnable:
                v = self._values()[p.name].detach()
                v = f"{v.item():.6g}" if v.numel() == 1 else f"<{v.numel()} values>"
                parts.append(f"{p.name}={v} (learnable)")
            elif self._fixed[p.name] is None:
                parts.append(f"{p.name}=<tensor>")
            else:
                parts.append(f"{p.name}={self._fixed[p.name]!r}")
        if self.num_parameters != 1:
            parts.append(f"num_parameters={self.num_parameters}")
        return ", ".join(parts)


def _make_module(act):
    cname = class_name(act.name)

    def __init__(self, *, learnable=False, num_parameters=1, channel_dim=1, **params):
        Activation.__init__(
            self,
            act.name,
            learnable=learnable,
            num_parameters=num_parameters,
            channel_dim=channel_dim,
            **params,
        )

    ps = ", ".join(f"{p.name}={p.default!r} ({p.domain})" for p in act.params)
    sig = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    sig += [
        inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default)
        for p in act.params
    ]
    sig += [
        inspect.Parameter("learnable", inspect.Parameter.KEYWORD_ONLY, default=False),
        inspect.Parameter("num_parameters", inspect.Parameter.KEYWORD_ONLY, default=1),
        inspect.Parameter("channel_dim", inspect.Parameter.KEYWORD_ONLY, default=1),
    ]
    __init__.__signature__ = inspect.Signature(sig)
    doc = (
        f"{act.spec.summary}\n\n``iglu_np.{act.name}`` as an ``nn.Module`` "
        f"(parameters: {ps or 'none'}); see :class:`iglu_np.torch.Activation`."
    )
    return type(
        cname, (Activation,), {"__init__": __init__, "__doc__": doc, "__module__": __name__}
    )


# --------------------------------------------------------------------------- generate
_FUNCTIONS = {}
_MODULES = {}
for _name, _act in _acts().items():
    _fwd, _bwd = _kernels(_act)
    _op, _bwd_op = _define_ops(_act, _fwd, _bwd)
    _FUNCTIONS[_name] = _make_function(_act, _op, _eager_function(_act, _fwd, _bwd, _bwd_op), _fwd)
FUNCTIONS = MappingProxyType(_FUNCTIONS)
"""Activation name -> ``iglu_np.torch`` function, in the registry's order."""
for _name, _act in _acts().items():
    _MODULES[_name] = _make_module(_act)
MODULES = MappingProxyType(_MODULES)
"""Activation name -> its ``nn.Module`` class (``MODULES["iglu"] is IGLU``)."""

ALIASES = MappingProxyType(
    {a: _aliases.wrap(a, _FUNCTIONS[t], __name__) for a, (t, _) in _aliases.ALIASES.items()}
)
"""Alias name -> function: Hugging Face's activation names (``iglu_np.ALIASES``) as
functions of their target, the alias's parameter values as defaults
(``iglu_np.torch.quick_gelu(x)`` is ``iglu_np.torch.swish(x, beta=1.702)``)."""

from ._torch_gated import build as _build_gated  # noqa: E402

_GATED_FNS, _GATED_MODULES = _build_gated(_FUNCTIONS, Activation, class_name, __name__, _FLOATS)
from ._torch_gated import Gated  # noqa: E402

GATED = MappingProxyType(_GATED_FNS)
"""Gated form name -> function: the named forms (``swiglu``, ``glu``, ``swiglu_oai`` ...)
and ``<activation>_glu`` for every activation; :mod:`iglu_np._gated` for the arguments."""
GATED_MODULES = MappingProxyType(_GATED_MODULES)
"""Named gated form -> its ``nn.Module`` class (``GATED_MODULES["swiglu"] is SwiGLU``);
:class:`Gated` takes any gated form's name."""

globals().update(_FUNCTIONS)
globals().update(ALIASES)
globals().update(_GATED_FNS)
globals().update({cls.__name__: cls for cls in _MODULES.values()})
globals().update({cls.__name__: cls for cls in _GATED_MODULES.values()})
__all__ += [*_FUNCTIONS, *ALIASES, *(cls.__name__ for cls in _MODULES.values())]
__all__ += ["GATED", "GATED_MODULES", "Gated", *_GATED_FNS]
__all__ += [cls.__name__ for cls in _GATED_MODULES.values()]
del _name, _act, _fwd, _bwd, _op, _bwd_op
