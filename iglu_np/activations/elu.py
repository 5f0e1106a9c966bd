"""Exponential linear units: ELU, CELU and SELU (PyTorch's definitions and kink conventions)."""

import math

from .._coefficients import CELU_DALPHA_32, CELU_DALPHA_64
from .._math import (
    _TWO_64,
    _TWO_512,
    _TWO_M32,
    _TWO_M60,
    _TWO_M64,
    _TWO_M500,
    BIG,
    exp_dw,
    exp_expm1_neg,
    exp_normal,
    exp_scaled_times,
    fma,
    horner,
    is_f32,
    neg_side,
    two_prod,
)
from .._spec import Param, define, kernel

# SELU's constants (Klambauer et al. 2017, as PyTorch spells them) and their product, each
# split hi + lo per dtype: a float32 constant alone is off by up to 0.5 ulp before any
# arithmetic. lo = round(c - hi); computed with mpmath at 50 digits.
SELU_SCALE = "1.0507009873554804934193349852946"
SELU_ALPHA = "1.6732632423543772848170429916717"
SELU_L_HI64, SELU_L_LO64 = 1.0507009873554805, 3.9874847667154144e-17
SELU_L_HI32, SELU_L_LO32 = 1.0507010221481323, -3.479265231476347e-08
SELU_LA_HI64, SELU_LA_LO64 = 1.7580993408473768, 1.41535193800845e-17
SELU_LA_HI32, SELU_LA_LO32 = 1.7580993175506592, 2.3296717444054593e-08

_ALPHA_DOC = "Saturation value -alpha of the negative branch."


def _alpha_param(doc):
    return Param(
        "alpha",
        1.0,
        doc,
        lo=0.0,
        lo_open=True,
        test_values=(0.1, 0.5, 2.0, 10.0, 1e3, 0.37),
    )


# --------------------------------------------------------------------------- ELU
@kernel
def elu_f(x, alpha):
    T = type(x)
    if x > T(0.0):
        return x
    return alpha * math.expm1(x)


@kernel
def elu_dx(x, alpha):
    T = type(x)
    if x > T(0.0):
        return T(1.0)
    # alpha e^x as (a m) sc: rounded once where e^x is subnormal and alpha large (e^x
    # rounded first, then multiplied by alpha = 1000, is hundreds of subnormal steps off).
    a, m, sc = exp_scaled_times(x, alpha)
    return (a * m) * sc


@kernel
def elu_dalpha(x, alpha):
    T = type(x)
    if x > T(0.0):
        return T(0.0)
    return math.expm1(x)


# The bulk of ELU (x >= -700 float64, -80 float32: short of exp_scaled's tail, which
# elu_dx takes) and SELU (x >= -708 / -87: exp normal): exp and expm1 of the non-positive
# side without range handling (the exact kernels, vectorised, clamp and scale twice for
# every lane, the positive ones included); the same bits (see define's bulk), in less
# time (tools/ab_speed.py times the loops).
@kernel
def _elu_bulk_domain(x, alpha):
    T = type(x)
    return x >= (T(-80.0) if is_f32(x) else T(-700.0)) and x < T(math.inf)


@kernel
def _expm1_neg(x):
    e, m = exp_expm1_neg(neg_side(x))
    return m


@kernel
def elu_f_bulk(x, alpha):
    T = type(x)
    return x if x > T(0.0) else alpha * _expm1_neg(x)


@kernel
def elu_dx_bulk(x, alpha):
    T = type(x)
    return T(1.0) if x > T(0.0) else alpha * exp_normal(neg_side(x))


@kernel
def elu_dalpha_bulk(x, alpha):
    T = type(x)
    return T(0.0) if x > T(0.0) else _expm1_neg(x)


# --------------------------------------------------------------------------- CELU
# x/a = (x c)/(a c) for the remainder: c a power of two chosen on a alone (see _div_dw)


@kernel
def _dw_scale(a):
    """2^-32 (float64 2^-64) for |a| >= 1, 2^64 (2^512) for |a| < 2^-60 (2^-500), else 1."""
    T = type(a)
    if is_f32(a):
        return T(_TWO_M32) if abs(a) >= T(1.0) else (T(_TWO_64) if abs(a) < T(_TWO_M60) else T(1.0))
    return T(_TWO_M64) if abs(a) >= T(1.0) else (T(_TWO_512) if abs(a) < T(_TWO_M500) else T(1.0))


@kernel
def _div_dw(x, a):
    """x/a as a dw pair (q, ql): the remainder x - q a is exact (Dekker product, and
    x - p is exact because p is within an ulp or two of x). It is formed from x c and a c
    (_dw_scale, exact): q a beyond two_prod's range would lose q's low part (float64
    x = -1e296, alpha = 1.5e293) or round to -inf (float32 x = -max, alpha = 2e11: NaN),
    and below the normal range its error term would be inexact (x, alpha both
    subnormal). Where |q| >= 2^-30 the scaled x c and q (a c) stay normal and in range."""
    T = type(x)
    q = x / a
    if not (abs(q) < T(BIG)):
        return q, T(0.0)  # inf (or a huge tail where q's low part is irrelevant)
    c = _dw_scale(a)
    ac = a * c
    p, e = two_prod(q, ac)
    return q, ((x * c - p) - e) / ac


@kernel
def celu_f(x, alpha):
    T = type(x)
    q, ql = _div_dw(x, alpha)
    m = math.expm1(neg_side(q))  # (x > 0 unused: no overflow, which the CUDA simulator raises)
    # alpha expm1(x/alpha) = x (1 + q/2 + O(q^2)) for |q| < 2^-30: where q is subnormal
    # (float32 alpha = 1e20, x = -1e-20) alpha q would be tens of ulp off, or 0 below.
    tiny = fma(x, T(0.5) * q, x)
    # expm1(q + ql) = m + e^q ql: q's rounding would cost up to 1/2 ulp near q = 0.
    # -alpha where m = -1, also at x = -inf, where the correction would be 0 * inf.
    r = -alpha if m == T(-1.0) else alpha * (m + (T(1.0) + m) * ql)
    r = tiny if abs(q) < T(9.313225746154785e-10) else r
    # x >= 0: both branches give x = +-0 at 0; this keeps celu(-0.0) = -0.0. Every piece
    # computed and one selected: with branches LLVM kept the float64 loop scalar for Intel's
    # AVX-512 targets (skylake-avx512 to emeraldrapids).
    return x if x >= T(0.0) else r


@kernel
def celu_dx(x, alpha):
    T = type(x)
    if x > T(0.0):
        return T(1.0)
    q, ql = _div_dw(x, alpha)
    # exp(x/alpha) has condition |x/alpha|: the dw quotient keeps it exact in the tail.
    return exp_dw(q, ql)


# The bulk of CELU (finite x >= -80 alpha: q = x/alpha >= -80 (+ rounding), exp(q)
# normal; -80 alpha is -inf for float32 alpha > 4.25e36, hence the test on |x|): expm1 and
# exp of the non-positive side without range handling, the same bits (see define's bulk).
@kernel
def _celu_bulk_domain(x, alpha):
    T = type(x)
    return x >= T(-80.0) * alpha and abs(x) < T(math.inf)


@kernel
def celu_f_bulk(x, alpha):
    T = type(x)
    q, ql = _div_dw(x, alpha)
    e, m = exp_expm1_neg(neg_side(q))
    tiny = fma(x, T(0.5) * q, x)
    r = -alpha if m == T(-1.0) else alpha * (m + (T(1.0) + m) * ql)
    r = tiny if abs(q) < T(9.313225746154785e-10) else r
    return x if x >= T(0.0) else r


@kernel
def celu_dx_bulk(x, alpha):
    T = type(x)
    q, ql = _div_dw(x, alpha)
    e = exp_normal(neg_side(q))
    return T(1.0) if x > T(0.0) else e + e * ql


@kernel
def celu_dalpha(x, alpha):
    T = type(x)
    if x > T(0.0):
        return T(0.0)
    q, ql = _div_dw(x, alpha)
    if q >= T(-2.0):
        # expm1(q) - q e^q ~ -q^2/2 cancels: q^2 P(q + 1) instead (q + 1 exact for q <= -1/2).
        qq, qe = two_prod(q, q)
        q2 = qq + (qe + T(2.0) * q * ql)
        if is_f32(x):
            p = horner(q + T(1.0), CELU_DALPHA_32)
        else:
            p = horner(q + T(1.0), CELU_DALPHA_64)
        return q2 * p
    m = math.expm1(q)
    e = math.exp(q)
    if e == T(0.0):
        return m  # q e^q -> 0, but -inf * 0 would be NaN
    # k(q + ql) = k(q) + k'(q) ql with k' = -q e^q.
    return m - (q * e) * (T(1.0) + ql)


# --------------------------------------------------------------------------- SELU
@kernel
def _selu_of(x, m):
    """SELU from m = expm1 of min(x, 0) (x > 0 lanes get expm1(0): expm1(+inf) would be
    inf in the unused lane)."""
    T = type(x)
    # One product lambda*v + its low part for both signs, v = x or expm1(x), and selects:
    # branches around expm1 kept the float64 loop scalar.
    pos = x > T(0.0)
    if is_f32(x):
        hi = T(SELU_L_HI32) if pos else T(SELU_LA_HI32)
        lo = T(SELU_L_LO32) if pos else T(SELU_LA_LO32)
    else:
        hi = T(SELU_L_HI64) if pos else T(SELU_LA_HI64)
        lo = T(SELU_L_LO64) if pos else T(SELU_LA_LO64)
    v = x if pos else m
    p, e = two_prod(v, hi)
    r = p + (e + v * lo)
    # x = 0: the Dekker product's low part is +0 and would turn -0 into +0; x = +inf: x.
    return x if (x == T(0.0) or (pos and math.isinf(x))) else r


@kernel
def _selu_dx_of(x, e):
    """SELU's derivative from e = exp of min(x, 0)."""
    T = type(x)
    if is_f32(x):
        hi, lo = T(SELU_LA_HI32), T(SELU_LA_LO32)
        lam = T(SELU_L_HI32)
    else:
        hi, lo = T(SELU_LA_HI64), T(SELU_LA_LO64)
        lam = T(SELU_L_HI64)
    p, r = two_prod(e, hi)
    return lam if x > T(0.0) else p + (r + e * lo)


@kernel
def selu_f(x):
    return _selu_of(x, math.expm1(neg_side(x)))


@kernel
def selu_dx(x):
    # Selects, no branch: behind an `if x > 0: return` LLVM takes exp of x itself on every
    # lane of the if-converted .ufunc loop (an overflow flag, a warning, for large x).
    return _selu_dx_of(x, math.exp(neg_side(x)))


@kernel
def _selu_bulk_domain(x):
    T = type(x)
    return x >= (T(-87.0) if is_f32(x) else T(-708.0)) and x < T(math.inf)


@kernel
def selu_f_bulk(x):
    return _selu_of(x, _expm1_neg(x))


@kernel
def selu_dx_bulk(x):
    return _selu_dx_of(x, exp_normal(neg_side(x)))


# --------------------------------------------------------------------------- references
def _ref_elu(mp, x, a):
    if x > 0:
        return x
    return -a if mp.isinf(x) else a * mp.expm1(x)


def _ref_elu_dx(mp, x, a):
    return mp.one if x > 0 else a * mp.exp(x)


def _ref_elu_da(mp, x, a):
    if x > 0:
        return mp.zero
    return -mp.one if mp.isinf(x) else mp.expm1(x)


def _ref_celu(mp, x, a):
    if x > 0:
        return x
    return -a if mp.isinf(x) else a * mp.expm1(x / a)


def _ref_celu_dx(mp, x, a):
    return mp.one if x > 0 else mp.exp(x / a)


def _ref_celu_da(mp, x, a):
    if x > 0 or x == 0:
        return mp.zero
    if mp.isinf(x):
        return -mp.one
    q = x / a
    # expm1(q) - q e^q ~ -q^2/2 loses 2 log10(1/|q|) digits near 0: work with that many more.
    extra = max(0, int(-2 * mp.log10(abs(q)))) + 10
    with mp.extradps(extra):
        return +(mp.expm1(q) - q * mp.exp(q))


def _selu_consts(mp):
    return mp.mpf(SELU_SCALE), mp.mpf(SELU_ALPHA)


def _ref_selu(mp, x):
    lam, al = _selu_consts(mp)
    if x > 0:
        return lam * x
    return -lam * al if mp.isinf(x) else lam * al * mp.expm1(x)


def _ref_selu_dx(mp, x):
    lam, al = _selu_consts(mp)
    return lam if x > 0 else lam * al * mp.exp(x)


_KINK_NOTE = (
    "At the kink x = 0 the derivatives take the negative branch, as PyTorch's "
    "elu_backward does (it tests x <= 0)"
)

define(
    "elu",
    paper_table=True,
    torch="elu",
    jax="elu",
    monotonic=True,
    summary="Exponential Linear Unit.",
    formula=r"\mathrm{ELU}(x;\alpha) = \begin{cases} x & x > 0\\ \alpha\,(e^{x} - 1) & x \le 0\end{cases}",
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \begin{cases} 1 & x > 0\\ \alpha e^{x} & x \le 0\end{cases},\quad"
        r"\frac{\partial f}{\partial \alpha} = \begin{cases} 0 & x > 0\\ e^{x} - 1 & x \le 0\end{cases}"
    ),
    params=[_alpha_param(_ALPHA_DOC)],
    f=elu_f,
    dx=elu_dx,
    dparams={"alpha": elu_dalpha},
    bulk={"f": elu_f_bulk, "dx": elu_dx_bulk, "alpha": elu_dalpha_bulk},
    bulk_domain=_elu_bulk_domain,
    ref=_ref_elu,
    ref_dx=_ref_elu_dx,
    ref_dparams={"alpha": _ref_elu_da},
    special_points=(0.0,),
    notes=(
        "The negative branch uses expm1, exact near 0 where exp(x) - 1 cancels. "
        + _KINK_NOTE
        + ": elu'(0) = alpha, d/dalpha elu(0) = 0. elu(-0.0) = -0.0. "
        "alpha > 0 here (PyTorch accepts any alpha; a negative one is not an ELU)."
    ),
    references=(
        "Clevert, Unterthiner & Hochreiter, Fast and Accurate Deep Network Learning by "
        "Exponential Linear Units (ELUs), arXiv:1511.07289",
    ),
    example=(
        ">>> iglu_np.elu(np.array([-1.0, 0.0, 1.0])).round(6)\narray([-0.632121,  0.      ,  1.      ])\n"
        ">>> iglu_np.elu.dx(np.array([0.0]), alpha=2.0)  # PyTorch's kink convention\narray([2.])"
    ),
)

define(
    "celu",
    paper_table=True,
    torch="celu",
    jax="celu",
    monotonic=True,
    summary="Continuously differentiable ELU: ELU with the input scaled by 1/alpha.",
    formula=(
        r"\mathrm{CELU}(x;\alpha) = \max(0, x) + \min\bigl(0, \alpha\,(e^{x/\alpha} - 1)\bigr)"
    ),
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \begin{cases} 1 & x > 0\\ e^{x/\alpha} & x \le 0\end{cases},\quad"
        r"\frac{\partial f}{\partial \alpha} = \begin{cases} 0 & x > 0\\"
        r" e^{x/\alpha} - 1 - \frac{x}{\alpha} e^{x/\alpha} & x \le 0\end{cases}"
    ),
    params=[_alpha_param(_ALPHA_DOC + " Also the inverse input scale of that branch.")],
    f=celu_f,
    dx=celu_dx,
    bulk={"f": celu_f_bulk, "dx": celu_dx_bulk},
    bulk_domain=_celu_bulk_domain,
    dparams={"alpha": celu_dalpha},
    ref=_ref_celu,
    ref_dx=_ref_celu_dx,
    ref_dparams={"alpha": _ref_celu_da},
    special_points=(0.0,),
    notes=(
        "q = x/alpha is carried as a double-word pair (Dekker remainder): exp(x/alpha) in the "
        "derivative has condition |x/alpha|, and expm1 is corrected by e^q times the low "
        "part. The alpha-derivative expm1(q) - q e^q ~ -q^2/2 cancels for |q| <= 2; there it "
        "is q^2 P(q + 1) with a fitted polynomial (tools/derive_coefficients.py). "
        + _KINK_NOTE
        + " (PyTorch implements CELU as ELU with input scale 1/alpha): "
        "celu'(0) = 1 from both sides."
    ),
    references=("Barron, Continuously Differentiable Exponential Linear Units, arXiv:1704.07483",),
    example=(
        ">>> iglu_np.celu(np.array([-1.0, 0.0, 1.0]), alpha=2.0).round(6)\n"
        "array([-0.786939,  0.      ,  1.      ])\n"
        ">>> iglu_np.celu.dparams(np.array([-1.0]), alpha=2.0)['alpha'].round(6)\n"
        "array([-0.090204])"
    ),
)

define(
    "selu",
    paper_table=True,
    torch="selu",
    jax="selu",
    monotonic=True,
    summary="Scaled ELU, the self-normalising activation.",
    formula=(
        r"\mathrm{SELU}(x) = \lambda\begin{cases} x & x > 0\\ \alpha\,(e^{x} - 1) & x \le 0\end{cases},"
        r"\quad \lambda = 1.0507009873554804934\ldots,\ \alpha = 1.6732632423543772848\ldots"
    ),
    derivative_formula=(
        r"\mathrm{SELU}'(x) = \begin{cases} \lambda & x > 0\\ \lambda\alpha e^{x} & x \le 0\end{cases}"
    ),
    f=selu_f,
    dx=selu_dx,
    bulk={"f": selu_f_bulk, "dx": selu_dx_bulk},
    bulk_domain=_selu_bulk_domain,
    ref=lambda mp, x: _ref_selu(mp, x),
    ref_dx=lambda mp, x: _ref_selu_dx(mp, x),
    special_points=(0.0,),
    notes=(
        "PyTorch's constants scale = " + SELU_SCALE + " and alpha = " + SELU_ALPHA + " "
        "are used to all their digits: lambda and lambda*alpha are each a hi + lo pair per "
        "dtype, multiplied in with a Dekker product, so float32 results are not off by the "
        "float32 rounding of the constants. " + _KINK_NOTE + ": selu'(0) = lambda*alpha "
        "= 1.7580993408473768... (PyTorch's float64 product of the rounded constants is "
        "1 ulp lower)."
    ),
    references=(
        "Klambauer, Unterthiner, Mayr & Hochreiter, Self-Normalizing Neural Networks, "
        "arXiv:1706.02515",
    ),
    example=(
        ">>> iglu_np.selu(np.array([-1.0, 0.0, 1.0])).round(6)\narray([-1.111331,  0.      ,  1.050701])\n"
        ">>> iglu_np.selu.dx(np.array([0.0, 1.0])).round(6)\narray([1.758099, 1.050701])"
    ),
)
