"""Algebraic activations built from rational functions and square roots: softsign and
squareplus (Barron 2021)."""

import math

from .._math import (
    _TWO_60,
    _TWO_64,
    _TWO_120,
    _TWO_500,
    _TWO_512,
    _TWO_1000,
    _TWO_M60,
    _TWO_M64,
    _TWO_M120,
    _TWO_M500,
    _TWO_M512,
    _TWO_M1000,
    fma,
    is_f32,
)
from .._spec import Param, define, kernel


# --------------------------------------------------------------------------- softsign
@kernel
def softsign_f(x):
    T = type(x)
    if abs(x) > T(1.0):
        # 1/(1/x + sign(x)): the limits +-1 at +-inf without inf/inf.
        return T(1.0) / (T(1.0) / x + math.copysign(T(1.0), x))
    return x / (T(1.0) + abs(x))  # keeps -0.0 and NaN


@kernel
def softsign_dx(x):
    T = type(x)
    w = T(1.0) / (T(1.0) + abs(x))  # squaring w, not (1+|x|), cannot overflow
    return w * w


define(
    "softsign",
    torch="softsign",
    jax="soft_sign",
    monotonic=True,
    summary="Softsign: x/(1 + |x|), a rational sigmoid-shaped squashing function.",
    formula=r"f(x) = \frac{x}{1 + |x|}",
    derivative_formula=r"f'(x) = \frac{1}{(1 + |x|)^2}",
    f=softsign_f,
    dx=softsign_dx,
    ref=lambda mp, x: x / (1 + abs(x)) if mp.isfinite(x) else mp.sign(x),
    ref_dx=lambda mp, x: 1 / (1 + abs(x)) ** 2 if mp.isfinite(x) else mp.zero,
    notes=(
        "For |x| > 1 evaluated as 1/(1/x + sign(x)) so that +-inf give +-1 exactly; the "
        "derivative as w*w with w = 1/(1 + |x|), which underflows gracefully "
        "instead of overflowing. Smooth at 0: f'(0) = 1."
    ),
    special_points=(0.0,),
    references=("Turian, Bergstra & Bengio, 2009", "torch.nn.functional.softsign"),
    example=(
        ">>> iglu_np.softsign(np.array([-3.0, 0.0, 1.0, np.inf]))\n"
        "array([-0.75,  0.  ,  0.5 ,  1.  ])\n"
        ">>> iglu_np.softsign.dx(np.array([-3.0, 0.0, 1.0]))\n"
        "array([0.0625, 1.    , 0.25  ])"
    ),
)


# --------------------------------------------------------------------------- squareplus
@kernel
def _sp_big(x):
    """|x| > max/4: x + s and s + |x| (s >= |x|) would overflow from max/2, so the halves
    are summed there (exact halvings at that magnitude)."""
    T = type(x)
    return abs(x) > (T(8.5e37) if is_f32(x) else T(4.4e307))


@kernel
def _sp_root(x, b):
    """sqrt(x^2 + b) without overflow of x^2 or underflow of a tiny x^2 (hypot)."""
    return math.hypot(x, math.sqrt(b))


# The bulk: |x| <= 2^60 (2^500) and b <= 2^120 (2^1000), with x^2 or b >= 2^-120 (2^-1000),
# where x^2 + b neither overflows nor goes subnormal: s = sqrt(fma(x, x, b)) rounds the sum
# once, and one division (x < 0) or none remains, where hypot's double-word steps take two
# (about half the time; tools/ab_speed.py times the loops). The exact kernels take it there
# too (the same bits; see define's bulk).
@kernel
def _squareplus_bulk_domain(x, b):
    T = type(x)
    a = abs(x)
    if is_f32(x):
        return a <= T(_TWO_60) and b <= T(_TWO_120) and (b >= T(_TWO_M120) or a >= T(_TWO_M60))
    return a <= T(_TWO_500) and b <= T(_TWO_1000) and (b >= T(_TWO_M1000) or a >= T(_TWO_M500))


@kernel
def squareplus_f_bulk(x, b):
    T = type(x)
    s = math.sqrt(fma(x, x, b))
    d = s - x  # s + |x| for x < 0: no cancellation
    return b / (d + d) if x < T(0.0) else T(0.5) * (x + s)


@kernel
def squareplus_f(x, b):
    T = type(x)
    if _squareplus_bulk_domain(x, b):
        return squareplus_f_bulk(x, b)
    s = _sp_root(x, b)
    # Selects, not branches (the loops vectorise); each case's denominator is safe.
    neg = x < T(0.0)
    # x + s and s - x overflow once |x| > max/2: _sp_big. Below, the halving after the
    # sum keeps subnormal x exact.
    big = _sp_big(x)
    # (x + s)/2 cancels for x << 0; rationalised it is b/(2(s + |x|)), -> 0 at -inf.
    # The 2 on the denominator: b/2 rounded a subnormal b (float32 b = 2^-149,
    # x = -5.4e-20: 0 for 6.5e-27).
    dn = (s - x) if neg else T(1.0)
    rn = (b / (dn + dn)) if not big else ((T(0.25) * b) / (T(0.5) * s - T(0.5) * x))
    rp = (T(0.5) * (x + s)) if not big else (T(0.5) * x + T(0.5) * s)
    return rn if neg else rp


@kernel
def _sp_q(x, b):
    """(1 - |x|/s)/2 = b/(2 s (s + |x|)): the distance of f' from 0 or 1, cancellation-free."""
    T = type(x)
    s = _sp_root(x, b)
    zero = s == T(0.0)
    sd = T(1.0) if zero else s
    # Halves where _sp_big: s + |x| overflowed for |x| > max/2 (float32 b = max,
    # x = -1.7e38: 0 for 2.8e-39). Not everywhere: they round to 0 for a subnormal x with
    # b = 0 (0/0).
    g = T(0.5) if _sp_big(x) else T(1.0)
    # A tiny b scaled up by cb (b alone): b/s would be subnormal, its rounding then
    # magnified by 1/(s + |x|) (hundreds of ulp at float32 b = 2^-149, x = -1.4e-4).
    if is_f32(x):
        tiny = b < T(_TWO_M60)
        cb = T(_TWO_64) if tiny else T(1.0)
        ci = T(_TWO_M64) if tiny else T(1.0)
    else:
        tiny = b < T(_TWO_M500)
        cb = T(_TWO_512) if tiny else T(1.0)
        ci = T(_TWO_M512) if tiny else T(1.0)
    q = ((T(0.5) * g) * ci) * (((b * cb) / sd) / (g * sd + g * abs(x)))
    # x = 0 and b = 0 (ReLU): the convention f'(0) = 1/2, the value for every b > 0.
    return T(0.5) if zero else q


@kernel
def _sp_q_bulk(x, b):
    """_sp_q in the bulk domain with one division: b/(2 s (s + |x|)) = b/(2 (t + s |x|)),
    t = fma(x, x, b) and s = sqrt(t). There t + s |x| stays within [2^-120, 2^122]
    (float32; [2^-1000, 2^1002] float64), so nothing overflows or underflows before the
    quotient, which rounds once (a tiny b keeps its bits: no b/2). Relative errors in
    units of the rounding u: t 1, s 3/2, t + s |x| in one fma at most 3/2 + 1 (its terms
    are positive, so their errors weigh by their shares), q 7/2, and 1 - q (q <= 1/2) at
    most 7/2 + 1 of the derivative."""
    t = fma(x, x, b)
    d = fma(math.sqrt(t), abs(x), t)
    return b / (d + d)


@kernel
def squareplus_dx_bulk(x, b):
    T = type(x)
    q = _sp_q_bulk(x, b)
    return q if x < T(0.0) else T(1.0) - q


@kernel
def squareplus_dx(x, b):
    T = type(x)
    if _squareplus_bulk_domain(x, b):
        return squareplus_dx_bulk(x, b)
    q = _sp_q(x, b)
    return q if x < T(0.0) else T(1.0) - q  # q <= 1/2 for x >= 0: no cancellation


@kernel
def squareplus_db(x, b):
    T = type(x)
    return T(0.25) / _sp_root(x, b)  # +inf at x = b = 0, the true limit


# --------------------------------------------------------------------------- references


def _ref_sp_root(mp, x, b):
    return mp.sqrt(x * x + b)


def _ref_squareplus(mp, x, b):
    if mp.isinf(x):
        return x if x > 0 else mp.zero
    s = _ref_sp_root(mp, x, b)
    if x < 0:
        return b / (2 * (s - x))
    return (x + s) / 2


def _ref_squareplus_dx(mp, x, b):
    if mp.isinf(x):
        return mp.one if x > 0 else mp.zero
    s = _ref_sp_root(mp, x, b)
    if s == 0:
        return mp.one / 2
    q = b / (2 * s * (s + abs(x)))
    return q if x < 0 else 1 - q


def _ref_squareplus_db(mp, x, b):
    if mp.isinf(x):
        return mp.zero
    s = _ref_sp_root(mp, x, b)
    return mp.inf if s == 0 else 1 / (4 * s)


_B = Param(
    "b",
    4.0,
    "Curvature near 0: f(0) = sqrt(b)/2; b = 0 is ReLU (jax.nn.squareplus's default 4).",
    lo=0.0,
    test_values=(0.0, 1e-4, 1.0, 16.0, 1e4, 2.3),
)

define(
    "squareplus",
    monotonic=True,
    summary="Squareplus: an algebraic softplus, (x + sqrt(x^2 + b))/2.",
    formula=r"f(x;b) = \frac{x + \sqrt{x^2 + b}}{2}",
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \frac{1}{2}\left(1 + \frac{x}{\sqrt{x^2+b}}\right),\quad"
        r"\frac{\partial f}{\partial b} = \frac{1}{4\sqrt{x^2+b}}"
    ),
    params=[_B],
    f=squareplus_f,
    dx=squareplus_dx,
    dparams={"b": squareplus_db},
    bulk={"f": squareplus_f_bulk, "dx": squareplus_dx_bulk},
    bulk_domain=_squareplus_bulk_domain,
    ref=_ref_squareplus,
    ref_dx=_ref_squareplus_dx,
    ref_dparams={"b": _ref_squareplus_db},
    notes=(
        "Where x^2 + b neither overflows nor goes subnormal (|x| <= 2^60 and b <= 2^120 in "
        "float32, 2^500 and 2^1000 in float64) sqrt(x^2 + b) is sqrt(fma(x, x, b)), rounded "
        "twice; beyond, hypot(x, sqrt(b)): no overflow of x^2 for huge |x| and no underflow "
        "for tiny x. For x < 0 the value is rationalised to "
        "b/(2(sqrt(x^2+b) - x)) and the derivative to b/(2s(s + |x|)), so the negative "
        "tail (~ b/(4|x|) and b/(4x^2)) keeps full relative accuracy instead of "
        "cancelling. With b = 0 it is ReLU; the derivative at x = 0 is then 1/2 (its "
        "value for every b > 0) and df/db(0) = +inf."
    ),
    special_points=(0.0,),
    references=(
        "Barron, Squareplus: A Softplus-Like Algebraic Rectifier, arXiv:2112.11687",
        "jax.nn.squareplus",
    ),
    example=(
        ">>> iglu_np.squareplus(np.array([-1.5, 0.0, 1.5]))\narray([0.5, 1. , 2. ])\n"
        ">>> iglu_np.squareplus(np.array([-1e8]))  # b/(4|x|), no cancellation\n"
        "array([1.e-08])\n"
        ">>> iglu_np.squareplus.dx(np.array([0.0, 1e8])).round(6)\narray([0.5, 1. ])"
    ),
)
