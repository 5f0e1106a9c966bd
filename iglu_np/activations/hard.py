"""Hard (piecewise-linear/quadratic) activations: hardtanh, hardsigmoid, hardswish.

Kink conventions follow PyTorch 2.13's autograd (checked with torch): the derivative at a
breakpoint is the value of the *outer* (flat) piece, except hardswish at x = +3 where
PyTorch's hardswish_backward returns 1.
"""

import math

from .._spec import Param, any_at_least, define, kernel

_TORCH = "PyTorch torch.nn.functional documentation (hardtanh, hardsigmoid, hardswish)"


# --------------------------------------------------------------------------- hardtanh
@kernel
def hardtanh_f(x, lo, hi):
    # Comparisons are False for NaN, so NaN falls through to `return x`.
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


@kernel
def hardtanh_dx(x, lo, hi):
    T = type(x)
    if x > lo and x < hi:
        return T(1.0)
    if math.isnan(x):
        return x
    return T(0.0)


@kernel
def hardtanh_dlo(x, lo, hi):
    T = type(x)
    if x <= lo:
        return T(1.0)
    if math.isnan(x):
        return x
    return T(0.0)


@kernel
def hardtanh_dhi(x, lo, hi):
    T = type(x)
    if x >= hi:
        return T(1.0)
    if math.isnan(x):
        return x
    return T(0.0)


def _hardtanh_check(min_val, max_val):
    if any_at_least(min_val, max_val):
        return "min_val must be smaller than max_val"
    return None


def _ref_hardtanh(mp, x, lo, hi):
    return min(max(x, lo), hi)


_MIN = Param(
    "min_val",
    -1.0,
    "Lower clamp bound (must be below max_val).",
    test_values=(-2.0, -0.5, 0.0, 0.25, -1e3, -3.7),
)
_MAX = Param(
    "max_val",
    1.0,
    "Upper clamp bound (must be above min_val).",
    test_values=(2.0, 0.5, 0.0, -0.25, 1e3, 6.0),
)

define(
    "hardtanh",
    torch="hardtanh",
    jax="hard_tanh",
    monotonic=True,
    summary="Hard tanh: the input clamped to [min_val, max_val].",
    formula=r"f(x;a,b) = \min(\max(x, a), b)",
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \mathbb{1}[a < x < b],\quad"
        r"\frac{\partial f}{\partial a} = \mathbb{1}[x \le a],\quad"
        r"\frac{\partial f}{\partial b} = \mathbb{1}[x \ge b]"
    ),
    params=[_MIN, _MAX],
    check=_hardtanh_check,
    f=hardtanh_f,
    dx=hardtanh_dx,
    dparams={"min_val": hardtanh_dlo, "max_val": hardtanh_dhi},
    ref=_ref_hardtanh,
    ref_dx=lambda mp, x, a, b: mp.one if a < x < b else mp.zero,
    ref_dparams={
        "min_val": lambda mp, x, a, b: mp.one if x <= a else mp.zero,
        "max_val": lambda mp, x, a, b: mp.one if x >= b else mp.zero,
    },
    notes=(
        "Kink convention: df/dx = 0 at x = min_val and x = max_val (PyTorch's "
        "hardtanh_backward). The bound derivatives take the complementary value there "
        "(df/dmin_val = 1 at x = min_val, df/dmax_val = 1 at x = max_val), so "
        "df/dx + df/dmin_val + df/dmax_val = 1 everywhere, as the shift invariance "
        "f(x + c; a + c, b + c) = f(x; a, b) + c requires. PyTorch does not differentiate "
        "F.hardtanh's bounds. min_val < max_val is checked."
    ),
    special_points=(lambda p: p["min_val"], lambda p: p["max_val"]),
    references=(_TORCH,),
    example=(
        ">>> iglu_np.hardtanh(np.array([-3.0, -0.5, 2.0]))\narray([-1. , -0.5,  1. ])\n"
        ">>> iglu_np.hardtanh.dx(np.array([-1.0, 0.0, 1.0]))\narray([0., 1., 0.])"
    ),
)


# --------------------------------------------------------------------------- hardsigmoid
@kernel
def hardsigmoid_f(x):
    T = type(x)
    # (x + 3)/6, not x/6 + 1/2: x + 3 is exact near -3 (Sterbenz), so the small values
    # just above -3 keep full relative accuracy. Selects, not early returns (the float64
    # loop stayed scalar); NaN fails both tests and stays NaN.
    r = (x + T(3.0)) / T(6.0)
    r = T(1.0) if x >= T(3.0) else r
    return T(0.0) if x <= T(-3.0) else r


@kernel
def hardsigmoid_dx(x):
    T = type(x)
    if x > T(-3.0) and x < T(3.0):
        return T(1.0) / T(6.0)
    if math.isnan(x):
        return x
    return T(0.0)


define(
    "hardsigmoid",
    torch="hardsigmoid",
    jax="hard_sigmoid",
    monotonic=True,
    summary="Hard sigmoid: relu6(x + 3)/6, a piecewise-linear logistic.",
    formula=r"f(x) = \frac{\min(\max(x + 3, 0), 6)}{6}",
    derivative_formula=r"f'(x) = \tfrac{1}{6}\,\mathbb{1}[-3 < x < 3]",
    f=hardsigmoid_f,
    dx=hardsigmoid_dx,
    ref=lambda mp, x: min(max(x + 3, mp.zero), mp.mpf(6)) / 6,
    ref_dx=lambda mp, x: mp.one / 6 if -3 < x < 3 else mp.zero,
    notes=(
        "Kink convention: f' = 1/6 only strictly inside (-3, 3) and 0 at x = +-3 "
        "(PyTorch's hardsigmoid_backward). Computed as (x + 3)/6, exact in x + 3 near -3."
    ),
    special_points=(-3.0, 3.0),
    references=("Howard et al., Searching for MobileNetV3, ICCV 2019", _TORCH),
    example=(
        ">>> iglu_np.hardsigmoid(np.array([-4.0, 0.0, 1.5, 3.0]))\n"
        "array([0.  , 0.5 , 0.75, 1.  ])\n"
        ">>> iglu_np.hardsigmoid.dx(np.array([-3.0, 0.0, 3.0])).round(6)\n"
        "array([0.      , 0.166667, 0.      ])"
    ),
)


# --------------------------------------------------------------------------- hardswish
@kernel
def hardswish_f(x):
    T = type(x)
    # x + 3 is exact near -3 and the rest are single roundings: <= 1.5 ulp, zero at -3.
    # Selects, not early returns: the float64 loop stayed scalar with the branches.
    r = x * (x + T(3.0)) / T(6.0)
    r = x if x >= T(3.0) else r
    return T(0.0) if x <= T(-3.0) else r  # NaN fails both tests and stays NaN


@kernel
def hardswish_dx(x):
    T = type(x)
    # x/3 + 1/2 written as (2x + 3)/6: 2x is exact and 2x + 3 is exact near the zero
    # crossing at x = -1.5 (Sterbenz), so the derivative keeps its relative accuracy
    # there instead of cancelling. NaN fails both tests below and stays NaN.
    r = (x + x + T(3.0)) / T(6.0)
    r = T(1.0) if x >= T(3.0) else r
    return T(0.0) if x <= T(-3.0) else r


define(
    "hardswish",
    paper_table=True,
    torch="hardswish",
    jax="hard_swish",
    summary="Hard swish: x * relu6(x + 3)/6 (MobileNetV3).",
    formula=r"f(x) = x\,\frac{\min(\max(x + 3, 0), 6)}{6}",
    derivative_formula=(
        r"f'(x) = \begin{cases} 0 & x \le -3\\ \frac{2x + 3}{6} & -3 < x < 3\\"
        r" 1 & x \ge 3\end{cases}"
    ),
    f=hardswish_f,
    dx=hardswish_dx,
    ref=lambda mp, x: (
        x * min(max(x + 3, mp.zero), mp.mpf(6)) / 6 if mp.isfinite(x) else max(x, mp.zero)
    ),
    ref_dx=lambda mp, x: mp.zero if x <= -3 else (mp.one if x >= 3 else (2 * x + 3) / 6),
    notes=(
        "Kink convention (PyTorch 2.13's hardswish_backward, checked with torch): f' = 0 "
        "for x <= -3, (2x + 3)/6 = x/3 + 1/2 strictly inside (-3, 3), and 1 for x >= 3 "
        "(the one-sided value, not the 3/3 + 1/2 = 1.5 of the quadratic piece). The "
        "derivative crosses zero at x = -1.5; it is evaluated as (2x + 3)/6, exact in "
        "2x + 3 there, so it keeps full relative accuracy (no scale needed)."
    ),
    special_points=(-3.0, -1.5, 3.0),
    references=("Howard et al., Searching for MobileNetV3, ICCV 2019", _TORCH),
    example=(
        ">>> iglu_np.hardswish(np.array([-4.0, -1.5, 0.0, 3.0]))\n"
        "array([ 0.   , -0.375,  0.   ,  3.   ])\n"
        ">>> iglu_np.hardswish.dx(np.array([-3.0, -1.5, 0.0, 3.0]))\n"
        "array([0. , 0. , 0.5, 1. ])"
    ),
)
