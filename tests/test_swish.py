"""Swish x sigma(beta x): its symmetries and accuracy over the whole float range of x and
beta (the registry sweep keeps |x| <= 1e6; SiLU at beta = 1: tests/test_same_as.py)."""

import mpmath
import numpy as np
import pytest

import iglu_np

from . import accuracy as acc
from .bitwise import full_range

DT = [np.float32, np.float64]
IDS = ["f32", "f64"]


def _grid(dtype):
    return full_range(dtype)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_negative_beta_mirrors_and_zero_beta_halves(dtype):
    x = _grid(dtype)
    w = iglu_np.swish
    for b in (1.0, 1.702, 0.37, 25.0, 1e-20):
        np.testing.assert_array_equal(w(x, beta=-b), -w(-x, beta=b))
        np.testing.assert_array_equal(w.dx(x, beta=-b), w.dx(-x, beta=b))
        np.testing.assert_array_equal(w.dparams(x, beta=-b)["beta"], w.dparams(-x, beta=b)["beta"])
    np.testing.assert_array_equal(w(x, beta=0.0), x / dtype(2))
    np.testing.assert_array_equal(w.dx(x, beta=0.0)[~np.isnan(x)], dtype(0.5))
    # x^2/4 where x^2 neither overflows nor rounds into the subnormal range
    mid = (np.abs(x) > np.sqrt(np.finfo(dtype).tiny) * 4) & (
        np.abs(x) < np.sqrt(np.finfo(dtype).max)
    )
    np.testing.assert_array_equal(w.dparams(x[mid], beta=0.0)["beta"], (x[mid] * x[mid]) / dtype(4))


# Where the gate underflows and a huge |x| keeps the value normal: x e^(beta x) for
# x = 1e300, beta = -1.2e-297 is 1e300 e^-1200 = 6.6e-222 (with exp alone: 0); the
# beta-derivative's x^2 overflows where x^2 e^(beta x) does not.
_EXTREME = [
    (np.float64, [1e300, -1e300, 1.7e308, -1.7e308, 3e299], -1.2e-297),
    (np.float64, [1e300, -1e300, 1.7e308, 6e298], 7.4e-298),
    (np.float64, [1e154, -1e200, 1e-160, -1e-170], 1e-150),
    (np.float64, [1e-300, -1e-310, 5e-324, 700.0, -745.0], 1e300),
    (np.float32, [3e38, -3e38, 1e37, -2e36], -1.07e-36),
    (np.float32, [3e38, -3e38, 1e30], 4e-37),
    (np.float32, [1e-40, -1e-44, 80.0, -104.0], 1e38),
]


@pytest.mark.parametrize(
    "dtype,xs,beta", _EXTREME, ids=[f"{d.__name__}-{b}" for d, _, b in _EXTREME]
)
def test_extreme_x_and_beta_within_the_bounds(dtype, xs, beta):
    spec = iglu_np.swish.spec
    x = np.array(xs, dtype)
    params = {"beta": float(dtype(beta))}
    for kind in acc.kinds(spec):
        with np.errstate(all="ignore"):
            got = iglu_np.swish._ufunc(kind)(x, dtype(beta))
        true, scale = acc.reference(spec, kind, x, params)
        err = acc.ulp_errors(got, true, scale, dtype, subnormal=True)
        assert err.max() <= acc.tolerance(spec, kind), (kind, float(err.max()), got, true)


def _log_uniform(rng, n, dtype):
    fi = np.finfo(dtype)
    lo, hi = np.log10(float(fi.smallest_subnormal)), np.log10(float(fi.max))
    return np.where(rng.random(n) < 0.5, -1, 1) * 10 ** rng.uniform(lo, hi, n)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_random_x_and_beta_over_the_float_range(dtype):
    """x log-uniform over every magnitude, beta either log-uniform too or such that
    |beta x| falls where the gate underflows (up to 1500, float32 200)."""
    spec = iglu_np.swish.spec
    rng = np.random.default_rng(11)
    n = 150
    x = _log_uniform(rng, 2 * n, dtype)
    ymax = 200.0 if dtype == np.float32 else 1500.0
    with np.errstate(over="ignore"):  # a subnormal x: an infinite beta, dropped below
        beta = np.concatenate([_log_uniform(rng, n, dtype), rng.uniform(-ymax, ymax, n) / x[n:]])
    with np.errstate(all="ignore"):
        x, beta = x.astype(dtype), beta.astype(dtype)
    ok = np.isfinite(beta) & (beta != 0)
    x, beta = x[ok], beta[ok]
    fns = {"fwd": spec.ref, "dx": spec.ref_dx, "d_beta": spec.ref_dparams["beta"]}
    for kind in acc.kinds(spec):
        with np.errstate(all="ignore"):
            got = iglu_np.swish._ufunc(kind)(x, beta)
        sfn = spec.scales.get("dx") if kind == "dx" else None
        true, scale = [], ([] if sfn else None)
        with mpmath.workdps(acc.DPS):
            for xi, bi in zip(x, beta):
                xm, bm = mpmath.mpf(float(xi)), mpmath.mpf(float(bi))
                true.append(fns[kind](mpmath.mp, xm, bm))
                if sfn:
                    scale.append(sfn(mpmath.mp, xm, bm))
        err = acc.ulp_errors(got, true, scale, dtype, subnormal=True)
        i = int(np.argmax(err))
        assert err[i] <= acc.tolerance(spec, kind), (
            kind,
            float(err[i]),
            float(x[i]),
            float(beta[i]),
        )
