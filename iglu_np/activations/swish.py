"""Swish with a gate sharpness beta: x * sigmoid(beta x) (Ramachandran, Zoph & Le 2017;
beta = 1 is SiLU, Elfwing, Uchibe & Doya 2018; beta = 1.702 is the QuickGELU
approximation of GELU)."""

import math

from .._math import (
    _K64_HI32,
    _K64_HI64,
    _K64_LO32,
    _K64_LO64,
    _K128_HI32,
    _K128_LO32,
    _K1024_HI64,
    _K1024_LO64,
    _TWO_64,
    _TWO_M64,
    _TWO_M960,
    exp_normal,
    fma,
    is_f32,
    two_prod,
)
from .._spec import Param, define, kernel


@kernel
def _neg_abs_beta_x(x, beta):
    """(nh, nl, neg, y): -|beta x| as an exact dw pair, whether beta x < 0, and beta x
    rounded. exp(-|y|) has
    condition |y|: rounding y alone would cost |y|/2 ulp in the gate's tail. beta = 0
    gives y = 0 at x = +-inf too (the gate is then 1/2)."""
    T = type(x)
    yh, yl = two_prod(beta, x)  # yl = 0 beyond 1e30 / 1e290, where exp(-|y|) is 0
    zero = beta == T(0.0) and math.isinf(x)
    yh = T(0.0) if zero else yh
    yl = T(0.0) if zero else yl
    neg = yh < T(0.0)
    nh = yh if neg else -yh
    nl = yl if neg else -yl
    return nh, nl, neg, yh


@kernel
def _exp_times(nh, nl, a):
    """(a', m, s) with a exp(nh + nl) = (a' m) s, for nh <= 0 and a = |x| >= 0.

    :func:`iglu_np._math.exp_scaled_times` with a dw argument: s = 2^-64 in exp's tail
    (nh < -80 float32, -700 float64), else 1 (a' = a, m = exp(nh + nl)). In the tail m
    is exp of the argument moved by 64 ln2, or by 128 ln2 (float32) / 1024 ln2 (float64)
    with a' = a 2^-64 / a 2^-960 where a >= 2^64: x e^(beta x) is a normal number for a
    huge x and a tiny beta where e^(beta x) underflows (float64 x = 1e300,
    beta = -1e-297: 5e-135). nh plus the shift is exact (both on the tail's grid) wherever
    the result is not 0. Selects only."""
    T = type(nh)
    big = a >= T(_TWO_64)
    if is_f32(nh):
        tail = nh < T(-80.0)
        a_s = a * T(_TWO_M64) if big else a
        kh = T(_K128_HI32) if big else T(_K64_HI32)
        kl = T(_K128_LO32) if big else T(_K64_LO32)
    else:
        tail = nh < T(-700.0)
        a_s = a * T(_TWO_M960) if big else a
        kh = T(_K1024_HI64) if big else T(_K64_HI64)
        kl = T(_K1024_LO64) if big else T(_K64_LO64)
    hi = nh + (kh if tail else T(0.0))
    lo = nl + (kl if tail else T(0.0))
    e = math.exp(hi)
    a_out = a_s if tail else a
    s = T(_TWO_M64) if tail else T(1.0)
    return a_out, e + e * lo, s


@kernel
def _exp_dw_normal(nh, nl):
    """exp(nh + nl) for -|y| whose exp is normal (the bulk): _exp_times' m off its tail."""
    e = exp_normal(nh)
    return e + e * nl


# --------------------------------------------------------------------------- value
@kernel
def _f_of(x, neg, a2, m, s):
    """x sigma(y) from (a', m, s) of a = |x| and -|y| (see _exp_times). sigma(y) = r for
    y >= 0 and e r for y < 0 with e = exp(-|y|) and r = 1/(1 + e): no 1 - sigma anywhere.
    In the tail e < e^-700: r = 1, and the product rounds once into the subnormal range."""
    T = type(x)
    e = m if s == T(1.0) else T(0.0)
    r = T(1.0) / (T(1.0) + e)
    # x e r with its sign from x (sigma > 0); m = 0 is exp(-inf) at x = +-inf, where
    # inf * 0 would be NaN: the limit is a zero of x's sign
    t = math.copysign((a2 * (m * r)) * s, x)
    t = math.copysign(T(0.0), x) if m == T(0.0) else t
    return t if neg else x * r


@kernel
def swish_f(x, beta):
    nh, nl, neg, y = _neg_abs_beta_x(x, beta)
    a2, m, s = _exp_times(nh, nl, abs(x))
    return _f_of(x, neg, a2, m, s)


# --------------------------------------------------------------------------- d/dx
@kernel
def _dx_of(y, neg, m, s):
    """sigma(y)(1 + y(1 - sigma(y))), a function of y alone, as SiLU's derivative at y:
    r (1 + y e r) for y >= 0 and e r (1 + y r) for y < 0 (e = m s, kept 2^64 larger in
    the tail). The low part of y only moves y's products by under an ulp of the
    yardstick sigma + |y| sigma (1 - sigma) (the root at y = -1.2785)."""
    T = type(y)
    e = m * s
    r = T(1.0) / (T(1.0) + e)
    vn = ((m * r) * (T(1.0) + y * r)) * s
    vn = T(0.0) if m == T(0.0) else vn
    vp = r * (T(1.0) + y * (e * r))
    vp = T(1.0) if e == T(0.0) else vp  # y e -> 0, but inf * 0 would be NaN
    return vn if neg else vp


@kernel
def swish_dx(x, beta):
    T = type(x)
    nh, nl, neg, y = _neg_abs_beta_x(x, beta)
    # exp(-|y|) alone (a = 1): the derivative is bounded, no huge factor to scale
    a2, m, s = _exp_times(nh, nl, T(1.0))
    return _dx_of(y, neg, m, s)


# --------------------------------------------------------------------------- d/dbeta
@kernel
def _dbeta_arg(nh, nl):
    """(h, hl, half): the exp argument of d/dbeta: -|y| where exp(-|y|) is normal, else
    -|y|/2 (the square root of the gate's tail, see _dbeta_of)."""
    T = type(nh)
    half = nh < (T(-80.0) if is_f32(nh) else T(-700.0))
    k = T(0.5) if half else T(1.0)
    return k * nh, k * nl, half


@kernel
def _dbeta_near(x, m):
    """x^2 e r^2 from m = e = exp(-|y|), normal: (|x| (e r r)) |x|, rounded once into the
    subnormal range for a tiny x."""
    T = type(x)
    a = abs(x)
    r = T(1.0) / (T(1.0) + m)
    return (a * (m * r * r)) * a


@kernel
def _dbeta_of(x, half, a2, m, s):
    """x^2 sigma'(y) = x^2 e r^2 with e = exp(-|y|) and r = 1/(1 + e), from (a', m, s) of
    a = |x| and _dbeta_arg's argument. Where e is normal: _dbeta_near. Beyond (r = 1):
    the square of t = |x| e^(-|y|/2) = (a' m) s, which stays finite where x^2 (above 1.3e154) and
    a' m times |x| overflow and the result does not (float64 x = 1e300,
    beta = -1.2e-297). A subnormal t squares to 0, as the result rounds."""
    T = type(x)
    t = (a2 * m) * s
    v = t * t if half else _dbeta_near(x, m)
    return T(0.0) if m == T(0.0) else v  # x = +-inf, beta != 0: the limit 0


@kernel
def swish_dbeta(x, beta):
    nh, nl, neg, y = _neg_abs_beta_x(x, beta)
    h, hl, half = _dbeta_arg(nh, nl)
    a2, m, s = _exp_times(h, hl, abs(x))
    return _dbeta_of(x, half, a2, m, s)


# --------------------------------------------------------------------------- bulk
# Where beta x (rounded) is within +-700 (80 float32): _exp_times is off its tail there
# (a' = |x|, s = 1, the same exp argument), so these are the kernels above with exp by
# exp_normal: the same bits (see define's bulk). NaN, and beta = 0 at x = +-inf, are outside.
# The forward and x-derivative leave out the selects that only the tail and x = +-inf
# reach (m = 0, beta = 0 at infinity, two_prod's 1e30 guard), which the bulk loops would
# otherwise run on every lane.
@kernel
def _swish_bulk_domain(x, beta):
    T = type(x)
    return abs(beta * x) <= (T(80.0) if is_f32(x) else T(700.0))


@kernel
def _bulk_gate(x, beta):
    """(neg, y, m): _neg_abs_beta_x's and _exp_times' values in the bulk, without what the
    domain leaves out: beta x is finite (beta = 0 at x = +-inf is outside), within 1e30,
    so the fma's error term needs no guard, and m = exp(-|y|) is normal."""
    T = type(x)
    y = beta * x
    yl = fma(beta, x, -y)
    neg = y < T(0.0)
    e = exp_normal(y if neg else -y)
    return neg, y, e + e * (yl if neg else -yl)


@kernel
def swish_f_bulk(x, beta):
    T = type(x)
    neg, y, m = _bulk_gate(x, beta)
    r = T(1.0) / (T(1.0) + m)
    # _f_of's copysign(|x| (m r), x) is x (m r): a product's sign is separate from its bits
    return x * (m * r) if neg else x * r


@kernel
def swish_dx_bulk(x, beta):
    T = type(x)
    neg, y, m = _bulk_gate(x, beta)
    r = T(1.0) / (T(1.0) + m)
    return (m * r) * (T(1.0) + y * r) if neg else r * (T(1.0) + y * (m * r))


@kernel
def swish_dbeta_bulk(x, beta):
    nh, nl, neg, y = _neg_abs_beta_x(x, beta)
    return _dbeta_near(x, _exp_dw_normal(nh, nl))


# --------------------------------------------------------------------------- references
def _sig(mp, y):
    if mp.isinf(y):
        return mp.one if y > 0 else mp.zero
    return 1 / (1 + mp.exp(-y))


def _dsig(mp, y):
    if mp.isinf(y):
        return mp.zero
    e = mp.exp(-abs(y))
    return e / (1 + e) ** 2


def _ref_swish(mp, x, b):
    if mp.isinf(x):
        if b == 0:
            return x / 2
        return x if b * x > 0 else mp.zero
    return x * _sig(mp, b * x)


def _ref_swish_dx(mp, x, b):
    if mp.isinf(x):
        if b == 0:
            return mp.mpf(1) / 2
        return mp.one if b * x > 0 else mp.zero
    y = b * x
    return _sig(mp, y) + y * _dsig(mp, y)


def _swish_dx_scale(mp, x, b):
    # sigma(y) and |y| sigma'(y): the two terms that cancel at the root y = -1.2785
    if mp.isinf(x):
        return _ref_swish_dx(mp, x, b)
    y = b * x
    return _sig(mp, y) + abs(y) * _dsig(mp, y)


def _ref_swish_db(mp, x, b):
    if mp.isinf(x):
        return mp.inf if b == 0 else mp.zero
    return x * x * _dsig(mp, b * x)


# The root of SiLU's derivative, sigma(y)(1 + y(1 - sigma(y))) = 0, at y = beta x.
SILU_DX_ROOT = -1.2784645427610737951


define(
    "swish",
    torch="silu",
    jax="silu",
    summary="Swish: the input gated by the logistic sigmoid of beta*x (beta = 1: SiLU).",
    formula=r"\mathrm{Swish}(x;\beta) = x\,\sigma(\beta x) = \frac{x}{1 + e^{-\beta x}}",
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \sigma(\beta x)\bigl(1 + \beta x\,(1 - \sigma(\beta x))\bigr),"
        r"\quad \frac{\partial f}{\partial \beta} = x^2\,\sigma(\beta x)\,(1 - \sigma(\beta x))"
    ),
    params=[
        Param(
            "beta",
            1.0,
            "Gate sharpness, any real number: trainable Swish learns it. beta = 1 is SiLU, "
            "1.702 QuickGELU; beta = 0 gives x/2, beta -> inf tends to ReLU, and a "
            "negative beta gates by sigma(-|beta| x) (the mirror image, -Swish(-x; |beta|)).",
            # first value: the quick test run's pick; the last, its other one
            test_values=(
                1.702,
                0.0,
                -1.0,
                0.5,
                4.0,
                -0.37,
                1e-3,
                1e3,
                1e-300,
                1e300,
                -1e-30,
                1e30,
                -1e30,
            ),
        )
    ],
    f=swish_f,
    dx=swish_dx,
    dparams={"beta": swish_dbeta},
    bulk={"f": swish_f_bulk, "dx": swish_dx_bulk, "beta": swish_dbeta_bulk},
    bulk_domain=_swish_bulk_domain,
    same_as=("silu", {"beta": 1.0}),
    ref=_ref_swish,
    ref_dx=_ref_swish_dx,
    ref_dparams={"beta": _ref_swish_db},
    scales={"dx": _swish_dx_scale},
    special_points=(0.0, lambda p: SILU_DX_ROOT / p["beta"] if p["beta"] != 0 else None),
    notes=(
        "y = beta x is formed as an exact double-word product: exp(-|y|) has condition "
        "number |y|, and the gate's tail would otherwise lose |y|/2 ulp. With e = exp(-|y|) "
        "and r = 1/(1 + e), sigma(y) is r for y >= 0 and e r for y < 0, so 1 - sigma is "
        "never formed. In exp's tail the result is kept normal by exact powers of two, "
        "also where a huge |x| makes x e^(beta x) normal while e^(beta x) underflows; the "
        "beta-derivative x^2 sigma'(y) is x^2 e r^2 where e = exp(-|y|) is normal and the "
        "square of |x| e^(-|y|/2) beyond, which does not overflow before the result does. "
        "At beta = 1 the kernels are SiLU's, bit for bit. beta = 0 gives x/2 (also at x = +-inf), derivative 1/2 and "
        "d/dbeta = x^2/4. The x-derivative crosses zero at x = -1.2785/beta; its error "
        "there is measured against sigma(y) + |y| sigma(y)(1 - sigma(y))."
    ),
    references=(
        "Ramachandran, Zoph & Le, Searching for Activation Functions, arXiv:1710.05941",
        "Elfwing, Uchibe & Doya, Sigmoid-Weighted Linear Units for Neural Network Function "
        "Approximation in Reinforcement Learning, Neural Networks 107 (2018), arXiv:1702.03118",
        "Hendrycks & Gimpel, Gaussian Error Linear Units, arXiv:1606.08415 (the 1.702 "
        "sigmoid approximation of GELU)",
    ),
    example=(
        ">>> iglu_np.swish(np.array([-1.0, 0.0, 1.0])).round(6)  # beta = 1: SiLU\n"
        "array([-0.268941,  0.      ,  0.731059])\n"
        ">>> iglu_np.swish(np.array([-1.0, 0.0, 1.0]), beta=1.702).round(6)\n"
        "array([-0.154204,  0.      ,  0.845796])"
    ),
)
