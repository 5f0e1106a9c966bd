"""The numpy trainer (``iglu_np.nn``): one optimisation step and one epoch of an MLP
on a fixed synthetic problem, for every registered activation (all its parameters
learnable, so the fused ``backward_params`` path is exercised too).

Skipped (asv's NotImplementedError) at commits where ``iglu_np.nn`` does not import.

BLAS runs on one thread here (threadpoolctl, in the asv environment): the step's
128x64 matmuls gain nothing from OpenBLAS's pool, whose threads keep spinning after each
call and would be counted by the CPU-time clock (up to 1.7x the step's time, varying
between processes). The activations' own kernels stay single-threaded below 65,536 elements.
"""

from __future__ import annotations

import numpy as np

from ._common import (
    CPU_CLOCK,
    NAMES,
    ROUNDS,
    SEED,
    check_coverage,
    get_act,
    memo,
    registry_driven,
    warm_up,
)

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # then BLAS runs as configured (OPENBLAS_NUM_THREADS=1 does the same)
    threadpool_limits = None

N_SAMPLES, N_FEATURES, N_CLASSES, BATCH = 2048, 32, 10, 128
HIDDEN = (64, 64)


def _problem():
    """Classes from a fixed random linear teacher on Gaussian features."""
    rng = np.random.default_rng(SEED)
    X = rng.standard_normal((N_SAMPLES, N_FEATURES)).astype(np.float32)
    W = rng.standard_normal((N_FEATURES, N_CLASSES))
    y = np.argmax(X @ W + 0.5 * rng.standard_normal((N_SAMPLES, N_CLASSES)), axis=1)
    return X, y.astype(np.int64)


@registry_driven("trainer")
class Trainer:
    params = (NAMES,)
    param_names = ("activation",)
    # One sample per process, 8 processes (see _common.ROUNDS); setup has warmed up.
    repeat = 1
    warmup_time = 0.0
    rounds = ROUNDS
    timeout = 300.0
    timer = staticmethod(CPU_CLOCK)

    def setup(self, name):
        self.ad, self.X, self.y, self.model, self.opt = memo(
            ("Trainer", name), lambda: self._build(name)
        )

    def _build(self, name):
        act = get_act(name)
        if threadpool_limits is not None:  # process-global, and a process runs one name
            threadpool_limits(limits=1, user_api="blas")
        try:
            from iglu_np.nn import autodiff as ad
            from iglu_np.nn.layers import MLP
            from iglu_np.nn.optim import Adam
        except (ImportError, AttributeError) as e:
            raise NotImplementedError(f"iglu_np.nn unavailable at this commit: {e}") from None
        self.ad = ad
        self.X, self.y = _problem()
        self.model = MLP(
            N_FEATURES, HIDDEN, N_CLASSES, activation=act.name, learnable=True, rng=SEED
        )
        self.opt = Adam(self.model.parameters(), lr=1e-3)
        warm_up(lambda: self.step(0))  # compiles/loads every kernel kind the step uses
        return self.ad, self.X, self.y, self.model, self.opt

    def step(self, start):
        ad, model, opt = self.ad, self.model, self.opt
        xb = ad.Tensor(self.X[start : start + BATCH])
        opt.zero_grad()
        loss = ad.cross_entropy(model(xb), self.y[start : start + BATCH])
        loss.backward()
        opt.step()
        return loss

    def time_step(self, name):
        self.step(0)

    time_step.number = 16  # a sample: 16 steps of ~0.5 ms, each timed on its own

    def time_epoch(self, name):
        for start in range(0, N_SAMPLES, BATCH):
            self.step(start)


check_coverage(aspects=("trainer",))
