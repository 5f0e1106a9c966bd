"""Speed of the named gated forms (``iglu_np.GATED``) and of their memory limits.

``x`` has shape ``(size // WIDTH, 2 * WIDTH)`` (halves along the last axis): a forward
reads two elements and writes one, a backward reads three and writes two. The limits
time the same traffic with nothing computed: ``np.multiply`` for the forward, a
two-output Numba loop for the backward. Names come from ``iglu_np.GATED``.
"""

from __future__ import annotations

import numba
import numpy as np

import iglu_np

from ._common import DTYPES, ROUNDS, calls_per_sample, clock, memo, use_clock, warm_up

FORMS = tuple(sorted(iglu_np.GATED))
SIZES = (65_536, 16_777_216)  # outputs: one thread, then every thread
WIDTH = 4096


def _inputs(dtype, size):
    rng = np.random.default_rng(55)
    rows = max(1, size // WIDTH)
    x = rng.standard_normal((rows, 2 * WIDTH)).astype(dtype)
    g = rng.standard_normal((rows, WIDTH)).astype(dtype)
    return x, g, np.empty_like(g), np.empty_like(x)


class _Gated:
    rounds = ROUNDS
    repeat = 1
    warmup_time = 0.0
    timeout = 300.0
    timer = staticmethod(clock)

    def setup(self, name, dtype, size):
        use_clock("cpu", size)
        try:
            form = iglu_np.get_gated(name)
        except (AttributeError, KeyError):
            raise NotImplementedError(f"{name} has no gated form at this commit") from None
        self.form = form
        self.x, self.g, self.out, self.dx = memo((name, dtype, size), lambda: _inputs(dtype, size))
        warm_up(self.run, size)
        self.number = calls_per_sample(size)


class GatedForward(_Gated):
    params = (FORMS, DTYPES, SIZES)
    param_names = ("form", "dtype", "size")

    def run(self):
        self.form(self.x, out=self.out)

    def time_gated_forward(self, name, dtype, size):
        self.run()


class GatedBackward(_Gated):
    params = (FORMS, DTYPES, SIZES)
    param_names = ("form", "dtype", "size")

    def run(self):
        self.form.backward(self.x, self.g, out=self.dx)

    def time_gated_backward(self, name, dtype, size):
        self.run()


@numba.njit(parallel=True, cache=True)
def _two_out(a, b, g, p, q):
    for i in numba.prange(a.size):
        p[i] = a[i] * g[i]
        q[i] = b[i] * g[i]


class GatedLimits:
    """The forward's limit (2 in, 1 out) and the backward's (3 in, 2 out)."""

    params = (DTYPES, SIZES)
    param_names = ("dtype", "size")
    rounds = ROUNDS
    repeat = 1
    timer = staticmethod(clock)

    def setup(self, dtype, size):
        use_clock("cpu", size)
        rng = np.random.default_rng(1)
        self.a, self.b, self.g = (rng.standard_normal(size).astype(dtype) for _ in range(3))
        self.o, self.p, self.q = (np.empty(size, dtype) for _ in range(3))
        _two_out(self.a, self.b, self.g, self.p, self.q)
        self.number = calls_per_sample(size)

    def time_two_in_one_out(self, dtype, size):
        np.multiply(self.a, self.b, out=self.o)

    def time_three_in_two_out(self, dtype, size):
        _two_out(self.a, self.b, self.g, self.p, self.q)
