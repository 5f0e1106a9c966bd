"""iglu_np._math's exact products in Python (the CUDA simulator runs them so): two_prod's
error term is exact, dropped beyond the BIG bounds, and inf/NaN pass through fma."""

import math
from fractions import Fraction

import numpy as np
import pytest

from iglu_np import _math


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_two_prod_is_exact(dt):
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(300) * 10.0 ** rng.integers(-15, 15, 300)).astype(dt)
    b = (rng.standard_normal(300) * 10.0 ** rng.integers(-15, 15, 300)).astype(dt)
    inexact = 0
    for u, v in zip(a, b):
        p, e = _math.two_prod(u, v)
        assert type(p) is dt and type(e) is dt
        assert Fraction(float(p)) + Fraction(float(e)) == Fraction(float(u)) * Fraction(float(v))
        inexact += e != 0
    assert inexact > 250  # the error term is not trivially zero


@pytest.mark.parametrize("dt, big", [(np.float32, _math.BIG), (np.float64, _math.BIG64)])
def test_two_prod_drops_the_term_beyond_big(dt, big):
    u = dt(big) * dt(1.5)
    p, e = _math.two_prod(u, dt(1.0 + 2.0**-20))
    assert e == 0 and p == u * dt(1.0 + 2.0**-20)
    with np.errstate(over="ignore", invalid="ignore"):  # as compiled: inf*10 - inf
        p, e = _math.two_prod(dt(3e38) if dt is np.float32 else dt(1e308), dt(10.0))
    assert math.isinf(p) and e == 0


def test_fma_rounds_once_and_passes_inf_nan():
    a = 1.0 + 2.0**-30
    assert _math.fma(a, a, -1.0) == 2.0**-29 + 2.0**-60  # a*a-1 needs more than 53 bits
    assert math.isnan(_math.fma(math.inf, 0.0, 1.0))
    assert _math.fma(math.inf, 2.0, 1.0) == math.inf
    assert math.isnan(_math.fma(math.nan, 1.0, 1.0))
    assert _math.fma(1e300, 1e300, -1e300) == math.inf
    assert type(_math.fma(np.float32(1.5), np.float32(2.0), np.float32(0.25))) is np.float32
