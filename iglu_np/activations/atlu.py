"""ATLU and xATLU: the arctan-gated linear unit and its expanded-gating-range version
(Huang, "Expanded Gating Ranges Improve Activation Functions", arXiv:2405.20768).

ATLU's gate (arctan(x) + pi/2)/pi is the Cauchy CDF, so ATLU is IGLU with sigma = 1 and
reuses IGLU's kernels (reflected gate for x << 0, cancellation-free tail derivative).
"""

import math

from .._math import fma
from .._spec import Param, define, kernel
from .iglu import atan_pi, iglu_dx, iglu_f

_PAPER = "Huang, Expanded Gating Ranges Improve Activation Functions, arXiv:2405.20768"
_CODE = "reference implementation: the paper's x_gate package (alpha initialised to 0)"


@kernel
def atlu_f(x):
    T = type(x)
    return iglu_f(x, T(1.0))


@kernel
def atlu_dx(x):
    T = type(x)
    return iglu_dx(x, T(1.0))


def _ref_gate(mp, x):
    """(arctan(x) + pi/2)/pi, reflected for x < 0 so it keeps its digits in the tail."""
    if x < 0:
        return mp.atan(-1 / x) / mp.pi if mp.isfinite(x) else mp.zero
    return mp.mpf(1) / 2 + mp.atan(x) / mp.pi


def _ref_gate_dx(mp, x):
    return 1 / (mp.pi * (1 + x * x)) if mp.isfinite(x) else mp.zero


def _ref_atlu(mp, x):
    if mp.isinf(x):
        return x if x > 0 else -1 / mp.pi
    return x * _ref_gate(mp, x)


def _ref_atlu_dx(mp, x):
    if mp.isinf(x):
        return mp.one if x > 0 else mp.zero
    return _ref_gate(mp, x) + x * _ref_gate_dx(mp, x)


define(
    "atlu",
    summary="ATLU: the input gated by the arctan (Cauchy CDF) gate; IGLU with sigma = 1.",
    formula=r"\mathrm{ATLU}(x) = x\,\frac{\arctan(x) + \pi/2}{\pi}",
    derivative_formula=r"f'(x) = \frac{\arctan(x) + \pi/2}{\pi} + \frac{x}{\pi(1+x^2)}",
    f=atlu_f,
    dx=atlu_dx,
    ref=_ref_atlu,
    ref_dx=_ref_atlu_dx,
    notes=(
        "Identical to iglu(x, sigma=1) and computed by its kernels: for x < 0 the gate "
        "is atan(1/|x|)/pi (the textbook form cancels), f(-inf) = -1/pi, and the "
        "derivative's tail ~ 2/(3 pi |x|^3) is a cancellation-free polynomial, positive "
        "in float32 too."
    ),
    references=(_PAPER,),
    example=(
        ">>> iglu_np.atlu(np.array([-1.0, 0.0, 1.0])).round(6)\narray([-0.25,  0.  ,  0.75])\n"
        ">>> float(iglu_np.atlu(-np.inf))  # -1/pi\n-0.3183098861837907"
    ),
)


# --------------------------------------------------------------------------- xATLU
@kernel
def xatlu_f(x, alpha):
    T = type(x)
    # 1 + 2a as 2h, h = a + 1/2, the 2 on the bounded factor: 1 + 2a overflowed for
    # a > max/2 (float64 a = max, x = -1.1e-13: inf for 1.4e282; float32 x = -4.4e33:
    # NaN for inf). The same bits elsewhere.
    h = alpha + T(0.5)
    # Both sides computed and one chosen by a select (a branch kept the float64 loop
    # scalar), from one atan_pi (IGLU's polynomial in u^2: no atan call, one division).
    neg, big, k, nap = atan_pi(x)
    k2 = k + k
    # x < -1: x((1+2a)Z - a) as (1+2a) ATLU(x) - a x: ATLU = nap carries the reflected
    # gate and the finite limit -1/pi at -inf, where x*Z would be inf*0 (and so would
    # alpha*x for alpha = 0, hence the test).
    # As a (2 ATLU(x) - x) + ATLU(x): a x overflowed for a > max/|x| where the value does
    # not (float32 a = max, x = -1.01: inf for 1.7e38); 2 ATLU(x) - x >= |x|/2, no
    # cancellation.
    rb = nap if alpha == T(0.0) else alpha * (nap + nap - x) + nap
    # -1 <= x < 0: Z = 1/2 - k and (1+2a)(1/2 - k) - a = 1/2 - (1+2a) k: the terms
    # (1+2a) x Z and a x do not cancel. Rounding x Z first would make, for a subnormal x,
    # its half-unit error 2a + 1 times larger (alpha = 10, x = -2^-149: +1.4e-44 for -0).
    rn = rb if big else x * (T(0.5) - h * k2)
    # x >= 0: (1+2a) Z - a = 1/2 + (1+2a) atan(x)/pi: for 1+2a > 0 a sum of non-negative
    # terms, so no cancellation on this side.
    # As x/2 + x (h s), one rounding: x times the gate rounded first stayed max where the
    # truth lies above the overflow threshold (float32 x = max, a = 4e-8: max for inf).
    rp = fma(x, h * (T(1.0) - k2 if big else k2), T(0.5) * x)
    return rn if neg else rp


@kernel
def xatlu_dx(x, alpha):
    T = type(x)
    d = atlu_dx(x)
    # d/dx x g(x) = (1+2a) ATLU'(x) - a, with ATLU' accurate and positive everywhere,
    # as a(2d - 1) + d (2d - 1 exact for d in [1/4, 1]): (1+2a) d overflowed for
    # a > max/2 (float64 a = max, x = -1e-13: inf for -2.5e295).
    return alpha * (d + d - T(1.0)) + d


@kernel
def xatlu_dalpha(x, alpha):
    T = type(x)
    # x (2Z - 1) = (2/pi) x atan(x) >= 0: no cancellation, +inf at +-inf. The factor
    # (2/pi) atan(x) <= 1 is applied first: x atan(x) overflows from |x| ~ 0.64 max.
    # (math.atan, not atan_pi: its polynomial is half the degree, and without the u
    # division this one has none to share, so backward_params is faster this way.)
    return x * (math.atan(x) * T(2.0 / math.pi))


def _ref_xatlu(mp, x, a):
    if mp.isinf(x):
        if x > 0:
            return mp.inf
        return -1 / mp.pi if a == 0 else (mp.inf if a > 0 else mp.ninf)
    return x * ((1 + 2 * a) * _ref_gate(mp, x) - a)


def _ref_xatlu_dx(mp, x, a):
    return (1 + 2 * a) * _ref_atlu_dx(mp, x) - a


def _ref_xatlu_da(mp, x, a):
    if mp.isinf(x):
        return mp.inf
    return 2 * x * mp.atan(x) / mp.pi


def _scale_xatlu_f(mp, x, a):
    # The published form x((1+2a) Z - a): its two terms cancel where the gate crosses 0.
    if mp.isinf(x):
        return mp.inf
    return abs(x) * (abs(1 + 2 * a) * _ref_gate(mp, x) + abs(a))


def _scale_xatlu_dx(mp, x, a):
    return abs(1 + 2 * a) * _ref_atlu_dx(mp, x) + abs(a)


_ALPHA = Param(
    "alpha",
    0.0,
    "Gate expansion: the gate ranges over (-alpha, 1 + alpha). The reference code "
    "initialises it to 0 (plain ATLU) and trains it per MLP block; alpha > -1/2 keeps "
    "the gate increasing.",
    lo=-0.5,
    lo_open=True,
    test_values=(0.05, 0.3, 1.0, 3.0, 10.0, -0.25, 0.61),
)

define(
    "xatlu",
    summary="xATLU: ATLU with a trainable gate range (-alpha, 1 + alpha).",
    formula=(
        r"\mathrm{xATLU}(x;\alpha) = x\left((1+2\alpha)\,\frac{\arctan(x) + \pi/2}{\pi}"
        r" - \alpha\right)"
    ),
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = (1+2\alpha)\,\mathrm{ATLU}'(x) - \alpha,\quad"
        r"\frac{\partial f}{\partial \alpha} = \frac{2}{\pi}\,x\arctan(x)"
    ),
    params=[_ALPHA],
    f=xatlu_f,
    dx=xatlu_dx,
    dparams={"alpha": xatlu_dalpha},
    ref=_ref_xatlu,
    ref_dx=_ref_xatlu_dx,
    ref_dparams={"alpha": _ref_xatlu_da},
    scales={"f": _scale_xatlu_f, "dx": _scale_xatlu_dx},
    notes=(
        "Default alpha = 0 (ATLU), the reference code's initial value; domain "
        "alpha > -1/2 (at -1/2 the gate is the constant 1/2, below it decreases). "
        "For x < 0 it is computed as (1+2 alpha) ATLU(x) - alpha x with ATLU's reflected "
        "gate, giving the limits f(-inf) = -1/pi (alpha = 0), +inf (alpha > 0), -inf "
        "(alpha < 0); for x >= 0 the gate 1/2 + (1+2 alpha) atan(x)/pi is a sum of non-negative terms. For alpha > 0 "
        "the gate crosses zero at x = -cot(pi alpha/(1+2 alpha)) and f' crosses zero too: "
        "errors there are measured against the terms' magnitudes "
        "|x|(|1+2 alpha| Z + |alpha|) and |1+2 alpha| ATLU'(x) + |alpha|."
    ),
    special_points=(
        0.0,
        lambda p: (
            -1.0 / math.tan(math.pi * p["alpha"] / (1 + 2 * p["alpha"])) if p["alpha"] > 0 else None
        ),
    ),
    references=(_PAPER, _CODE),
    example=(
        ">>> x = np.array([-2.0, 0.0, 1.0])\n"
        ">>> iglu_np.xatlu(x, alpha=0.5).round(6)\narray([0.409666, 0.      , 1.      ])\n"
        ">>> iglu_np.xatlu.dparams(x, alpha=0.5)['alpha'].round(6)\n"
        "array([1.409666, 0.      , 0.5     ])"
    ),
)
