"""Layers and the MLP builder.

Parameters are :class:`~iglu_np.nn.autodiff.Tensor` leaves with ``requires_grad=True``
and a ``name`` such as ``"layers.0.weight"``; each has a *group* (``"weight"``,
``"bias"`` or ``"activation"``) that optimisers use to decide weight decay.

Learnable activation parameters are stored unconstrained ("raw") and mapped into their
domain on every forward pass, so no optimiser step can leave the domain:

* domain ``p > lo`` (or ``>=``):  ``p = lo + softplus(raw)``  (e.g. IGLU's ``sigma > 0``)
* domain ``p < hi``:              ``p = hi - softplus(raw)``
* domain ``lo <= p <= hi``:       ``p = lo + (hi - lo) * sigmoid(raw)``
* unbounded:                      ``p = raw``
* xIELU (Huang & Schlag 2024):    ``alpha_p = softplus(a_p)``, ``alpha_n = beta + softplus(a_n)``

Gradients flow through the map by the autodiff itself (softplus/sigmoid ops), and the
activation's own gradient in the parameter comes from its fused ``backward_params``
kernel. A learnable parameter is either shared by the layer (shape ``()``) or one per
unit (shape ``(units,)``, broadcast over the batch).
"""

from __future__ import annotations

import math

import numpy as np

from .. import _params
from . import autodiff as ad
from .autodiff import Tensor

__all__ = ["Module", "Linear", "ActivationLayer", "Dropout", "Sequential", "MLP", "param_transform"]


class Module:
    """Base class: parameters are found by walking attributes (Tensors, Modules, lists)."""

    training = True

    def named_parameters(self, prefix: str = ""):
        out = []
        for k, v in vars(self).items():
            if k.startswith("_"):
                continue
            out.extend(_walk(v, prefix + k))
        return out

    def parameters(self):
        return [t for _, t in self.named_parameters()]

    def train(self, mode: bool = True):
        for m in self.modules():
            m.training = mode
        return self

    def eval(self):
        return self.train(False)

    def modules(self):
        out = [self]
        for k, v in vars(self).items():
            if k.startswith("_"):
                continue
            for m in _iter_modules(v):
                out.extend(m.modules())
        return out

    def zero_grad(self):
        for p in self.parameters():
            p.grad = None

    def state_dict(self) -> dict:
        """name -> host (numpy) array of every parameter (raw values for activations)."""
        return {n: ad.to_host(t.data).copy() for n, t in self.named_parameters()}

    def load_state_dict(self, state: dict):
        own = dict(self.named_parameters())
        missing = sorted(set(own) - set(state))
        extra = sorted(set(state) - set(own))
        if missing or extra:
            raise ValueError(
                f"state does not match the model: missing {missing or 'nothing'}, "
                f"unexpected {extra or 'nothing'}"
            )
        for n, t in own.items():
            a = state[n]
            if ad.array_module(a) is np:  # host arrays as given; device ones stay there
                a = np.asarray(a)
            if a.shape != t.data.shape:
                raise ValueError(
                    f"parameter {n}: saved shape {a.shape} != model shape {t.data.shape}"
                )
            xp = ad.array_module(t.data)
            t.data = xp.asarray(a.astype(t.data.dtype, copy=True))
        return self

    def __call__(self, x):
        return self.forward(x)


def _walk(v, name):
    if isinstance(v, Tensor):
        return [(name, v)] if v.requires_grad else []
    if isinstance(v, Module):
        return v.named_parameters(name + ".")
    if isinstance(v, (list, tuple)):
        out = []
        for i, e in enumerate(v):
            out.extend(_walk(e, f"{name}.{i}"))
        return out
    if isinstance(v, dict):
        out = []
        for k in v:
            out.extend(_walk(v[k], f"{name}.{k}"))
        return out
    return []


def _iter_modules(v):
    if isinstance(v, Module):
        yield v
    elif isinstance(v, (list, tuple)):
        for e in v:
            yield from _iter_modules(e)
    elif isinstance(v, dict):
        for e in v.values():
            yield from _iter_modules(e)


# Tensor has __slots__; parameters need a group tag, so parameters are a tiny subclass.
class Parameter(Tensor):
    __slots__ = ("group",)

    def __init__(self, data, name="", group="weight"):
        super().__init__(data, requires_grad=True, name=name)
        self.group = group


class Linear(Module):
    """``y = x @ weight + bias`` with weight of shape (in, out).

    ``init="glorot"``: weight and bias uniform in ``±sqrt(6/(in+out))`` (scikit-learn's
    MLP initialisation); ``init="kaiming"``: weight uniform in ``±sqrt(6/in)`` (He, for
    ReLU-like units), bias zero.
    """

    def __init__(self, n_in, n_out, *, init="glorot", rng=None, dtype=np.float32, xp=np, name=""):
        rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
        if init == "glorot":
            bound = math.sqrt(6.0 / (n_in + n_out))
            w = rng.uniform(-bound, bound, (n_in, n_out))
            b = rng.uniform(-bound, bound, n_out)
        elif init == "kaiming":
            bound = math.sqrt(6.0 / n_in)
            w = rng.uniform(-bound, bound, (n_in, n_out))
            b = np.zeros(n_out)
        else:
            raise ValueError(f"unknown init {init!r}; expected 'glorot' or 'kaiming'")
        self.weight = Parameter(xp.asarray(w.astype(dtype)), name + "weight", "weight")
        self.bias = Parameter(xp.asarray(b.astype(dtype)), name + "bias", "bias")
        self.n_in, self.n_out = n_in, n_out

    def forward(self, x):
        return ad.linear(x, self.weight, self.bias)


def param_transform(act, pname: str):
    """(forward, inverse) maps between a raw unconstrained value and parameter ``pname``.

    ``forward(raw_tensor, values) -> Tensor`` and ``inverse(value, values) -> raw array``,
    where ``values`` holds the other parameters' current values (a parameter declared
    ``Param(above=other)`` needs ``other``'s).
    """
    p = act.spec.param(pname)
    if p.above and p.above in act.param_names:
        # e.g. xIELU (Huang & Schlag 2024): alpha_n = beta + softplus(a_n) keeps the
        # negative branch gradient-friendly (alpha_n > beta).
        other = p.above
        return (
            lambda raw, vals: _above(_as_tensor(vals[other], raw), raw),
            lambda v, vals: _inv_softplus(np.asarray(v) - _host_val(vals[other])),
        )
    lo, hi = p.lo, p.hi
    if math.isfinite(lo) and math.isfinite(hi):
        return (
            lambda raw, vals: ad.add(
                _const(lo, raw), ad.mul(_const(hi - lo, raw), ad.sigmoid(raw))
            ),
            lambda v, vals: _logit((np.asarray(v) - lo) / (hi - lo)),
        )
    if math.isfinite(lo):
        return (
            lambda raw, vals: ad.add(_const(lo, raw), ad.softplus(raw)) if lo else ad.softplus(raw),
            lambda v, vals: _inv_softplus(np.asarray(v) - lo),
        )
    if math.isfinite(hi):
        return (
            lambda raw, vals: ad.add(_const(hi, raw), ad.mul(_const(-1.0, raw), ad.softplus(raw))),
            lambda v, vals: _inv_softplus(hi - np.asarray(v)),
        )
    return (lambda raw, vals: raw, lambda v, vals: np.asarray(v, dtype=np.float64))


def _const(v, like):
    xp = ad.array_module(like.data)
    return Tensor(xp.asarray(v, dtype=like.data.dtype))


def _above(base, raw):
    """``base + softplus(raw)``, strictly above ``base`` even in floating point."""
    xp = ad.array_module(raw.data)
    floor = 2 * xp.spacing(xp.abs(base.data).astype(raw.data.dtype)).max()
    return ad.add(base, ad.softplus(raw, floor=floor))


def _as_tensor(v, like):
    return v if isinstance(v, Tensor) else _const(v, like)


def _host_val(v):
    return ad.to_host(v.data) if isinstance(v, Tensor) else np.asarray(v)


def _inv_softplus(y):
    y = np.asarray(y, dtype=np.float64)
    if np.any(y <= 0):
        raise ValueError("initial value lies on (or outside) the boundary of its domain")
    # log(expm1(y)) = y + log1p(-exp(-y)): no overflow for large y.
    return y + np.log(-np.expm1(-y))


def _logit(u):
    u = np.asarray(u, dtype=np.float64)
    if np.any((u <= 0) | (u >= 1)):
        raise ValueError("initial value lies on (or outside) the boundary of its domain")
    return np.log(u) - np.log1p(-u)


class ActivationLayer(Module):
    """A registered activation with fixed and/or learnable parameters.

    ``params``: initial/fixed values (defaults from the activation). ``learnable``: names
    of parameters to train (``True`` = all). ``per_unit``: learnable parameters get one
    value per unit (shape ``(units,)``) instead of one per layer.

    ``activation`` may name a gated form (``"swiglu"``, ``"<act>_glu"``:
    :func:`iglu_np.get_gated`): the layer then takes ``2 * units`` inputs (gate and up
    halves, as the form splits them) and its parameters are the gate activation's.
    """

    def __init__(
        self,
        activation,
        units=None,
        *,
        params=None,
        learnable=(),
        per_unit=False,
        dtype=np.float32,
        xp=np,
        name="",
    ):
        from .._gated import Gated
        from ._validation import _activation

        found = _activation(activation) if isinstance(activation, str) else activation
        self._gated = found if isinstance(found, Gated) else None
        if self._gated is not None:
            from .. import get

            found = get(self._gated._spec_name)
        self._act = found
        act = self._act
        params = {**(self._gated._fixed if self._gated else {}), **dict(params or {})}
        unknown = sorted(set(params) - set(act.param_names))
        if unknown:
            raise ValueError(
                f"{act.name} has no parameter(s) {', '.join(unknown)}; "
                f"its parameters are {', '.join(act.param_names) or 'none'}"
            )
        if learnable is True:
            learnable = tuple(act.param_names)
        elif learnable in (False, None):
            learnable = ()
        elif isinstance(learnable, str):
            learnable = (learnable,)
        learnable = tuple(learnable)
        bad = sorted(set(learnable) - set(act.param_names))
        if bad:
            raise ValueError(
                f"cannot learn {', '.join(bad)}: {act.name} has parameters "
                f"{', '.join(act.param_names) or 'none'}"
            )
        if per_unit and learnable and units is None:
            raise ValueError("per_unit learnable parameters need the layer width (units)")
        values = {**act.defaults, **params}
        _params.values(act._p, values)  # domains and combinations now, with a clear error
        self._fixed = {k: v for k, v in values.items() if k not in learnable}
        self._learnable = learnable
        self._transforms = {n: param_transform(act, n) for n in learnable}
        # Order so that a parameter another one depends on (xIELU's beta) comes first.
        self._order = sorted(learnable, key=lambda n: 0 if n == "beta" else 1)
        shape = (units,) if per_unit else ()
        self.raw = {}
        host_vals = dict(self._fixed)
        for n in self._order:
            v = np.broadcast_to(np.asarray(values[n], dtype=np.float64), shape)
            raw = self._transforms[n][1](v, host_vals)
            host_vals[n] = v
            self.raw[n] = Parameter(
                xp.asarray(np.array(raw, dtype=dtype)), f"{name}raw.{n}", "activation"
            )
        self.units, self.per_unit = units, per_unit

    @property
    def activation(self):
        return self._act

    # Activation objects (compiled ufuncs) and the transform closures do not pickle:
    # store the name and rebuild them.
    def __getstate__(self):
        st = dict(vars(self))
        st["_act"] = self._act.name
        st["_gated"] = self._gated.name if self._gated is not None else None
        del st["_transforms"]
        return st

    def __setstate__(self, st):
        from .. import get, get_gated

        vars(self).update(st)
        self._act = get(st["_act"])
        g = st.get("_gated")
        self._gated = get_gated(g) if g is not None else None
        self._transforms = {n: param_transform(self._act, n) for n in self._learnable}

    def param_tensors(self) -> dict:
        vals = dict(self._fixed)
        for n in self._order:
            vals[n] = self._transforms[n][0](self.raw[n], vals)
        return vals

    def param_values(self) -> dict:
        """Current parameter values in the activation's domain, as host arrays/floats."""
        with ad.no_grad():
            vals = self.param_tensors()
        return {
            k: (ad.to_host(v.data).copy() if isinstance(v, Tensor) else v) for k, v in vals.items()
        }

    @property
    def gated(self):
        """The gated form (:class:`iglu_np.Gated`) or None."""
        return self._gated

    def forward(self, x):
        params = self.param_tensors()
        if self._gated is not None:  # by the form's names (swiglu_oai's alpha is beta)
            back = self._gated._back
            return ad.activation(self._gated, x, **{back.get(k, k): v for k, v in params.items()})
        return ad.activation(self._act, x, **params)


class Dropout(Module):
    def __init__(self, p=0.0, rng=None):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self._rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)

    def forward(self, x):
        return ad.dropout(x, self.p, self._rng, training=self.training)


class Sequential(Module):
    def __init__(self, *layers):
        self.layers = list(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class MLP(Sequential):
    """Linear → activation (→ dropout) per hidden size, then a linear output layer.

    ``activation`` is any registered name or gated form (whose linear layer then gives
    twice the hidden size: gate and up); ``activation_params`` initial/fixed values;
    ``learnable`` names of activation parameters to train (``True`` = all);
    ``per_unit`` one value per hidden unit instead of one per layer.
    """

    def __init__(
        self,
        n_in,
        hidden_sizes,
        n_out,
        *,
        activation="iglu",
        activation_params=None,
        learnable=(),
        per_unit=False,
        dropout=0.0,
        init="glorot",
        dtype=np.float32,
        rng=None,
        xp=np,
    ):
        rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        hidden_sizes = list(hidden_sizes)
        for h in hidden_sizes:
            if int(h) != h or h < 1:
                raise ValueError(
                    f"hidden layer sizes must be positive integers, got {hidden_sizes}"
                )
        layers = []
        sizes = [n_in, *hidden_sizes]
        from .._gated import Gated
        from ._validation import _activation

        found = _activation(activation) if isinstance(activation, str) else activation
        width = 2 if isinstance(found, Gated) else 1  # a gated layer reads gate and up
        for i in range(len(hidden_sizes)):
            layers.append(
                Linear(
                    sizes[i],
                    width * sizes[i + 1],
                    init=init,
                    rng=rng,
                    dtype=dtype,
                    xp=xp,
                    name=f"layers.{len(layers)}.",
                )
            )
            layers.append(
                ActivationLayer(
                    activation,
                    sizes[i + 1],
                    params=activation_params,
                    learnable=learnable,
                    per_unit=per_unit,
                    dtype=dtype,
                    xp=xp,
                    name=f"layers.{len(layers)}.",
                )
            )
            if dropout:
                layers.append(Dropout(dropout, rng=np.random.default_rng(rng.integers(2**63))))
        # The output layer always uses Glorot: its input is not rectified.
        layers.append(
            Linear(
                sizes[-1],
                n_out,
                init="glorot" if init == "kaiming" else init,
                rng=rng,
                dtype=dtype,
                xp=xp,
                name=f"layers.{len(layers)}.",
            )
        )
        super().__init__(*layers)

    def activation_values(self) -> list:
        """Per hidden layer: dict of current activation parameter values."""
        return [m.param_values() for m in self.layers if isinstance(m, ActivationLayer)]
