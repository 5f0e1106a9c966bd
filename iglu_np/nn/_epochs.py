"""One epoch of minibatch training, on the host (numpy) or on a device array module (cupy).

There is one loop; where the per-step numbers (loss, L2 term, gradient norm) are looked
at is its synchronisation policy:

* :class:`HostSteps` (numpy) reads each step's numbers as Python floats and checks them
  at once: a diverged step raises before the optimiser takes it, the model as the steps
  before it left it.
* :class:`DeviceSteps` keeps them on the device (no host transfer per step: the shuffled
  order moves to the device once) and checks them once, at the end of the epoch, naming
  the first bad step; the caller rolls the epoch back (:meth:`needs_rollback`), as it does
  for any error mid-epoch. A dropout mask is still drawn on the host (one copy per dropout
  layer and step) so that runs are reproducible on any device.

Both give the same numbers: float64 losses from the float32 ones, the same sums in the
same order.
"""

from __future__ import annotations

import math

import numpy as np

from . import autodiff as ad
from .autodiff import Tensor, to_host
from .layers import Linear
from .optim import SCHEDULES, clip_grad_norm

# Beyond float32's range counts as diverged in float64 too (lr=1e10 SGD gave a loss of
# 4.8e213 and below-chance accuracy, silently, where float32 raised).
LOSS_MAX = float(np.finfo(np.float32).max)


class HostSteps:
    """Per-step numbers read as they come; checked at once."""

    sync = True  # clip_grad_norm returns a float

    def __init__(self, est, xp, n_batches):
        self.est, self.xp, self.n_batches = est, xp, n_batches
        self.t0 = est.t_
        self.losses = []

    def order(self, perm):
        return perm

    def scalar(self, a):
        return float(a)

    def loss(self, b, lv):
        _check_loss(self, b, lv)
        self.losses.append(lv)

    def grad_norm(self, b, gn):
        _check_grad_norm(self, b, gn)

    def finish(self):
        return self.losses


class DeviceSteps:
    """Per-step numbers kept on the device; one transfer and the checks at the epoch's end."""

    sync = False  # clip_grad_norm returns a 0-d device array

    def __init__(self, est, xp, n_batches):
        self.est, self.xp, self.n_batches = est, xp, n_batches
        self.t0 = est.t_
        self.losses, self.norms = [], []

    def order(self, perm):
        return self.xp.asarray(perm)

    def scalar(self, a):
        return a.astype(self.xp.float64)

    def loss(self, b, lv):
        self.losses.append(lv)

    def grad_norm(self, b, gn):
        self.norms.append(gn)

    def finish(self):
        xp = self.xp
        lvs = to_host(xp.stack(self.losses)).tolist()
        gns = to_host(xp.stack(self.norms)).tolist() if self.norms else None
        for b, lv in enumerate(lvs):
            _check_loss(self, b, lv)
            if gns is not None:
                _check_grad_norm(self, b, gns[b])
        return lvs


def needs_rollback(X) -> bool:
    """Whether an epoch on X checks its steps only at its end, so that a diverged epoch
    must be rolled back to its start by the caller."""
    return ad.array_module(X) is not np


def _check_loss(steps, b, lv):
    if not (abs(lv) <= LOSS_MAX):
        est = steps.est
        est.t_ = steps.t0 + b
        raise FloatingPointError(
            f"{type(est).__name__}: training diverged, loss is {lv} at epoch "
            f"{est.n_iter_ + 1}, step {est.t_ + 1} (batch {b + 1} of {steps.n_batches}); "
            "lower learning_rate_init or set clip_grad_norm"
        )


def _check_grad_norm(steps, b, gn):
    if not math.isfinite(gn):
        est = steps.est
        est.t_ = steps.t0 + b
        raise FloatingPointError(
            f"{type(est).__name__}: non-finite gradient norm at epoch "
            f"{est.n_iter_ + 1}, step {est.t_ + 1}"
        )


def lr_factor_at(est, step, total_steps, steps_per_epoch):
    """The learning-rate multiplier of ``step`` under the estimator's schedule."""
    lr = est.learning_rate
    if lr == "invscaling":
        return 1.0 / (step + 1) ** est.power_t
    if lr == "adaptive":
        return est._lr_factor
    if lr in SCHEDULES:
        warm = int(round(est.warmup_epochs * steps_per_epoch))
        return SCHEDULES[lr](step, total_steps or 1, warm)
    return 1.0


def run_epoch(est, X, y, weight, total_steps):
    """One pass over (X, y) in minibatches; the epoch's mean loss (a float)."""
    xp = ad.array_module(X)
    n = X.shape[0]
    bs = est._batch_size(n)
    n_batches = (n + bs - 1) // bs
    steps = (HostSteps if xp is np else DeviceSteps)(est, xp, n_batches)
    idx = steps.order(est._rng.permutation(n) if est.shuffle else np.arange(n))
    model, opt = est.model_, est._optimizer
    model.train()
    weights = [m.weight for m in model.layers if isinstance(m, Linear)]
    sizes = []
    for b in range(n_batches):
        sel = idx[b * bs : (b + 1) * bs]
        m = min(bs, n - b * bs)
        xb, yb = X[sel], y[sel]
        opt.set_lr_factor(lr_factor_at(est, est.t_, total_steps, n_batches))
        out = model(Tensor(xb))
        loss = est._loss(out, yb, weight)
        for p in opt.params():
            p.grad = None
        loss.backward()
        lv = steps.scalar(loss.data)
        if est.alpha:
            # scikit-learn's L2 term: 0.5*alpha*||W||^2 / batch_size, weights only.
            sq = None
            for w in weights:
                w.grad = w.grad + (est.alpha / m) * w.data
                s = steps.scalar((w.data * w.data).sum())
                sq = s if sq is None else sq + s
            lv = lv + 0.5 * est.alpha * sq / m
        steps.loss(b, lv)
        if est.clip_grad_norm is not None:
            gn = clip_grad_norm(opt.params(), float(est.clip_grad_norm), sync=steps.sync)
            steps.grad_norm(b, gn)
        opt.step()
        est.t_ += 1
        sizes.append(m)
    total = 0.0
    for lv, m in zip(steps.finish(), sizes):
        total += lv * m
    return total / n
