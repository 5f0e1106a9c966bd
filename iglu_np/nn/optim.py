"""Optimisers, parameter groups, gradient clipping and learning-rate schedules.

Update rules follow scikit-learn's MLP optimisers (so the estimator can be compared
with it step for step): SGD keeps the velocity in units of the step
(``v = momentum*v - lr*g``), Adam uses the bias-corrected step size
``lr*sqrt(1-b2^t)/(1-b1^t)`` with ``eps`` added to ``sqrt(v)``. AdamW decays weights
decoupled from the gradient (Loshchilov & Hutter), before the Adam step.

Optimisers take a list of parameters or a list of *groups*, dicts with a ``"params"``
list and per-group overrides (``lr``, ``weight_decay``...). :func:`param_groups` builds
the usual two groups: weights with weight decay, biases and activation parameters without.
"""

from __future__ import annotations

import math

import numpy as np

from .autodiff import array_module, to_host

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "param_groups",
    "clip_grad_norm",
    "cosine_warmup",
    "linear_warmup",
    "constant_schedule",
    "SCHEDULES",
    "make_optimizer",
]


def param_groups(
    params, weight_decay: float, *, decay_activation: bool = False, decay_bias: bool = False
) -> list:
    """Split parameters into a decayed group (weights) and an undecayed one.

    Activation parameters (group ``"activation"``) are excluded from weight decay by
    default: shrinking IGLU's sigma towards 0 is not a regulariser, it changes the
    function's shape. Biases are excluded too, as usual.
    """
    decay, no_decay = [], []
    for p in params:
        g = getattr(p, "group", "weight")
        if (
            g == "weight"
            or (g == "activation" and decay_activation)
            or (g == "bias" and decay_bias)
        ):
            decay.append(p)
        else:
            no_decay.append(p)
    groups = []
    if decay:
        groups.append({"params": decay, "weight_decay": weight_decay})
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


class Optimizer:
    defaults: dict = {}

    def __init__(self, params, **hyper):
        unknown = set(hyper) - set(self.defaults)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown option(s) {sorted(unknown)}")
        params = list(params)
        if not params:
            raise ValueError("optimiser got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        self.param_groups = []
        for g in params:
            g = {**self.defaults, **hyper, **g}
            g["params"] = list(g["params"])
            if g["lr"] <= 0 or not math.isfinite(g["lr"]):
                raise ValueError(f"learning rate must be positive and finite, got {g['lr']}")
            g["base_lr"] = g["lr"]
            self.param_groups.append(g)
        self.t = 0
        # Keyed by the parameter's position in params(): stable across pickling and saving.
        self.state = {}

    def params(self):
        return [p for g in self.param_groups for p in g["params"]]

    def zero_grad(self):
        for p in self.params():
            p.grad = None

    def set_lr_factor(self, factor: float):
        """Scale every group's base learning rate (used by the schedules)."""
        for g in self.param_groups:
            g["lr"] = g["base_lr"] * factor

    def step(self):
        self.t += 1
        i = 0
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    st = self.state.get(i)
                    if st is None:
                        st = self.state[i] = self._init_state(p)
                    self._update(p, p.grad, st, g)
                i += 1

    def state_dict(self, host: bool = True) -> dict:
        """Flat dict of host arrays (step count, current learning rates, moments);
        ``host=False`` copies the moments where they live (a device snapshot)."""
        out = {"t": np.asarray(self.t), "lr": np.asarray([g["lr"] for g in self.param_groups])}
        for i in range(len(self.params())):
            for k, v in self.state.get(i, {}).items():
                out[f"{i}.{k}"] = to_host(v).copy() if host else v.copy()
        return out

    def load_state_dict(self, sd: dict):
        self.t = int(sd["t"])
        lrs = np.asarray(sd["lr"]).ravel()
        if len(lrs) != len(self.param_groups):
            raise ValueError("optimiser state has a different number of parameter groups")
        for g, lr in zip(self.param_groups, lrs):
            g["lr"] = float(lr)
        self.state = {}
        for i, p in enumerate(self.params()):
            st = {}
            for k in self._state_keys:
                key = f"{i}.{k}"
                if key in sd:
                    a = sd[key]
                    if array_module(a) is np:  # host arrays as given; device ones stay there
                        a = np.asarray(a)
                    if a.shape != p.data.shape:
                        raise ValueError(
                            f"optimiser state {key}: shape {a.shape} != {p.data.shape}"
                        )
                    st[k] = array_module(p.data).asarray(a.astype(p.data.dtype))
            if st:
                self.state[i] = st
        return self

    _state_keys: tuple = ()

    def _init_state(self, p):
        xp = array_module(p.data)
        return {k: xp.zeros_like(p.data) for k in self._state_keys}


class SGD(Optimizer):
    """SGD with (Nesterov) momentum and L2 weight decay added to the gradient."""

    defaults = {"lr": 0.01, "momentum": 0.0, "nesterov": False, "weight_decay": 0.0}
    _state_keys = ("velocity",)

    def _update(self, p, grad, st, g):
        lr, mom, wd = g["lr"], g["momentum"], g["weight_decay"]
        if wd:
            grad = grad + wd * p.data
        if not mom:
            p.data -= lr * grad
            return
        v = st["velocity"]
        v *= mom
        v -= lr * grad
        if g["nesterov"]:
            p.data += mom * v - lr * grad
        else:
            p.data += v


class Adam(Optimizer):
    """Adam (Kingma & Ba) with optional L2 weight decay added to the gradient."""

    defaults = {"lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}
    _state_keys = ("m", "v")
    _decoupled = False

    def _update(self, p, grad, st, g):
        b1, b2 = g["betas"]
        lr, wd = g["lr"], g["weight_decay"]
        if wd and not self._decoupled:
            grad = grad + wd * p.data
        if wd and self._decoupled:
            p.data *= 1.0 - lr * wd
        m, v = st["m"], st["v"]
        m *= b1
        m += (1.0 - b1) * grad
        v *= b2
        v += (1.0 - b2) * (grad * grad)
        t = self.t
        step = lr * math.sqrt(1.0 - b2**t) / (1.0 - b1**t)
        xp = array_module(v)
        p.data -= step * m / (xp.sqrt(v) + g["eps"])


class AdamW(Adam):
    """Adam with decoupled weight decay (``p *= 1 - lr*wd`` before the Adam step)."""

    defaults = {"lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
    _decoupled = True


_OPTIMISERS = {"sgd": SGD, "adam": Adam, "adamw": AdamW}


def make_optimizer(name: str, groups, **hyper):
    try:
        cls = _OPTIMISERS[name]
    except KeyError:
        raise ValueError(
            f"unknown solver {name!r}; expected one of {', '.join(_OPTIMISERS)}"
        ) from None
    return cls(groups, **hyper)


def clip_grad_norm(params, max_norm: float, *, sync: bool = True):
    """Scale all gradients so that their global L2 norm is at most ``max_norm``.

    Returns the norm before clipping (inf/nan propagate, so a caller can detect them): a
    float, or with ``sync=False`` a 0-d float64 array of the gradients' array module,
    computed and applied without a host transfer (the same numbers: float64 sums of the
    per-array sums in the same order, an unclipped gradient multiplied by exactly 1).
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    if not sync:
        xp = array_module(*grads)
        sq = None
        for g in grads:
            s = (g * g).sum().astype(xp.float64)
            sq = s if sq is None else sq + s
        total = xp.sqrt(sq)
        scale = xp.where((total > max_norm) & xp.isfinite(total), max_norm / (total + 1e-12), 1.0)
        for p in params:
            if p.grad is not None:
                p.grad = p.grad * scale.astype(p.grad.dtype)
        return total
    total = math.sqrt(sum(float((g * g).sum()) for g in grads))
    if total > max_norm and math.isfinite(total):
        scale = max_norm / (total + 1e-12)
        for p in params:
            if p.grad is not None:
                p.grad = p.grad * scale  # not in place: grads may share buffers
    return total


# ---------------------------------------------------------------- schedules: step -> factor
def constant_schedule(step: int, total: int, warmup: int = 0) -> float:
    return 1.0


def linear_warmup(step: int, total: int, warmup: int = 0) -> float:
    """Ramp linearly from 1/warmup to 1 over ``warmup`` steps, then constant."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    return 1.0


def cosine_warmup(step: int, total: int, warmup: int = 0) -> float:
    """Linear warmup, then cosine decay from 1 to 0 at step ``total``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    frac = min(1.0, (step - warmup) / span)
    return 0.5 * (1.0 + math.cos(math.pi * frac))


SCHEDULES = {"constant": constant_schedule, "warmup": linear_warmup, "cosine": cosine_warmup}
