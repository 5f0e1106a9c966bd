"""Sigmoidal gates and the self-gated units built on them: sigmoid, tanh, SiLU, Tanhshrink,
Mish and xSiLU (Huang 2024, expanded gating range)."""

import math

from .._coefficients import TANHSHRINK_32, TANHSHRINK_64
from .._math import NUMBA as numba  # numba.float64(x): a cast, rebound to numba's own
from .._math import (
    exp_expm1_neg,
    exp_normal,
    exp_scaled,
    fma,
    horner,
    is_f32,
    mul_exp,
    sigmoid,
    tanh_small,
)
from .._spec import Param, define, kernel

_XSILU_PAPER = (
    "A. H. Huang, Expanded Gating Ranges Improve Activation Functions, arXiv:2405.20768 (2024)"
)


# --------------------------------------------------------------------------- sigmoid
@kernel
def sigmoid_f(x):
    return sigmoid(x)


@kernel
def sigmoid_dx(x):
    T = type(x)
    # sigma(1 - sigma) = e/(1+e)^2 with e = exp(-|x|): even in x, no 1 - sigma cancellation.
    e = math.exp(-abs(x))
    r = T(1.0) / (T(1.0) + e)
    return e * r * r


# The bulk (|x| <= 708 float64, 87 float32, where exp(-|x|) is normal): the same bits as
# the kernels above without their tail handling (see define's bulk).
@kernel
def _logistic_bulk(x):
    """(e, r): e = exp(-|x|) (normal: the bulk), r = 1/(1 + e)."""
    T = type(x)
    e = exp_normal(-abs(x))
    return e, T(1.0) / (T(1.0) + e)


@kernel
def _sigmoid_bulk_domain(x):
    T = type(x)
    return abs(x) <= (T(87.0) if is_f32(x) else T(708.0))


@kernel
def sigmoid_f_bulk(x):
    T = type(x)
    e, r = _logistic_bulk(x)
    return e * r if x < T(0.0) else r


@kernel
def sigmoid_dx_bulk(x):
    e, r = _logistic_bulk(x)
    return e * r * r


# --------------------------------------------------------------------------- tanh
@kernel
def tanh_f(x):
    return math.tanh(x)


@kernel
def tanh_dx(x):
    T = type(x)
    if abs(x) < T(0.5):
        t = math.tanh(x)
        return (T(1.0) - t) * (T(1.0) + t)
    # 1 - tanh^2 cancels as |x| grows; sech^2 = 4e/(1+e)^2 with e = exp(-2|x|) does not.
    e = math.exp(T(-2.0) * abs(x))
    r = T(1.0) / (T(1.0) + e)
    return T(4.0) * e * r * r


# The bulk (|x| <= 354 float64, 43 float32: exp(-2|x|) normal): each side computes only
# what it returns where the exact kernel, vectorised, computes tanh (its polynomial, an exp
# and a division) and a second exp and division. The same bits (see define's bulk).
@kernel
def _tanh_bulk_domain(x):
    T = type(x)
    return abs(x) <= (T(43.0) if is_f32(x) else T(354.0))


@kernel
def tanh_f_bulk(x):
    T = type(x)
    a = abs(x)
    # tanh's own two forms with exp_normal for its exp (no clamps, one scaling step).
    q = T(1.0) - T(2.0) / (exp_normal(a + a) + T(1.0))
    return tanh_small(x) if a < T(0.625) else math.copysign(q, x)


@kernel
def tanh_dx_bulk(x):
    T = type(x)
    t = tanh_small(x)  # read where |x| < 1/2 only
    e = exp_normal(T(-2.0) * abs(x))
    r = T(1.0) / (T(1.0) + e)
    return (T(1.0) - t) * (T(1.0) + t) if abs(x) < T(0.5) else T(4.0) * e * r * r


# --------------------------------------------------------------------------- SiLU
@kernel
def silu_f(x):
    T = type(x)
    # e = m sc: m stays normal in the far tail, sc is applied last (one rounding there)
    m, sc = exp_scaled(-abs(x), T(0.0))
    e = m * sc
    r = T(1.0) / (T(1.0) + e)
    if x < T(0.0):
        if m == T(0.0):
            return T(-0.0)  # limit at x -> -inf, where x * 0 would be NaN
        return (x * (m * r)) * sc
    return x * r


@kernel
def silu_dx(x):
    T = type(x)
    m, sc = exp_scaled(-abs(x), T(0.0))  # e = m sc, as in silu_f
    e = m * sc
    r = T(1.0) / (T(1.0) + e)
    if x < T(0.0):
        if m == T(0.0):
            return T(0.0)
        # sigma = e r, 1 - sigma = r: sigma (1 + x (1 - sigma)) without 1 - sigma.
        return ((m * r) * (T(1.0) + x * r)) * sc
    if e == T(0.0):
        return T(1.0)  # x e -> 0, but inf * 0 would be NaN
    return r * (T(1.0) + x * (e * r))


# Where exp_scaled's tail is off (|x| <= 700 float64, 80 float32): m = e, sc = 1.
@kernel
def _silu_bulk_domain(x):
    T = type(x)
    return abs(x) <= (T(80.0) if is_f32(x) else T(700.0))


@kernel
def silu_f_bulk(x):
    T = type(x)
    e, r = _logistic_bulk(x)
    return x * (e * r) if x < T(0.0) else x * r


@kernel
def silu_dx_bulk(x):
    T = type(x)
    e, r = _logistic_bulk(x)
    if x < T(0.0):
        return (e * r) * (T(1.0) + x * r)
    return r * (T(1.0) + x * (e * r))


# --------------------------------------------------------------------------- Tanhshrink
@kernel
def _tanhshrink_cubic(x):
    """x - tanh(x) for |x| < 1.5: ~x^3/3 cancels near 0, x^3 P(x^2) has no subtraction."""
    T = type(x)
    v = x * x
    if is_f32(x):
        p = horner(v - T(1.125), TANHSHRINK_32)
    else:
        p = horner(v - T(1.125), TANHSHRINK_64)
    return x * (v * p)


@kernel
def tanhshrink_f(x):
    T = type(x)
    if abs(x) < T(1.5):
        return _tanhshrink_cubic(x)
    return x - math.tanh(x)


# The bulk (|x| <= 354 float64, 44 float32: exp(2|x|) normal): the cubic for |x| < 1.5 and
# beyond it tanh's exp form (what tanh returns for |x| >= 0.625) without tanh's polynomial;
# the derivative tanh^2 with tanh's own bulk form. The same bits (see define's bulk).
@kernel
def _tanhshrink_bulk_domain(x):
    T = type(x)
    return abs(x) <= (T(44.0) if is_f32(x) else T(354.0))


@kernel
def tanhshrink_f_bulk(x):
    T = type(x)
    a = abs(x)
    t = math.copysign(T(1.0) - T(2.0) / (exp_normal(a + a) + T(1.0)), x)
    return _tanhshrink_cubic(x) if a < T(1.5) else x - t


@kernel
def tanhshrink_dx(x):
    # 1 - sech^2 = tanh^2: no cancellation at all.
    t = math.tanh(x)
    return t * t


@kernel
def tanhshrink_dx_bulk(x):
    # tanh by tanh's bulk form: its bits wherever exp(2|x|) is normal (this domain)
    t = tanh_f_bulk(x)
    return t * t


# --------------------------------------------------------------------------- Mish
@kernel
def _mish_gate(x):
    """(g, q, s, sc): g sc = tanh(softplus(x)), q = 1 - g sc, s sc = sigmoid(x), all without
    cancellation; sc is 1 but in the far negative tail, where g and s would be subnormal:
    there g and s are kept 2^64 larger and sc = 2^-64 is applied last (one rounding).

    With n = e^x (e^x + 2), g = n/(n + 2). For x > 0 it is rewritten in e = exp(-x) as
    g = 1 - 2e^2/(1 + 2e + 2e^2), which never overflows.
    """
    T = type(x)
    if x > T(0.0):
        g, q, s = _mish_gate_pos(math.exp(-x))
        return g, q, s, T(1.0)
    m, sc = exp_scaled(x, T(0.0))  # e^x = m sc
    g, q, s = _mish_gate_neg(m, m * sc)
    return g, q, s, sc


@kernel
def _mish_gate_pos(e):
    """(g, q, s) for x > 0 from e = exp(-x)."""
    T = type(e)
    d = T(1.0) + T(2.0) * e * (T(1.0) + e)
    q = T(2.0) * e * e / d
    return T(1.0) - q, q, T(1.0) / (T(1.0) + e)


@kernel
def _mish_gate_neg(m, e):
    """(g, q, s) (g and s scaled as m) for x <= 0 from e = exp(x) = m sc."""
    T = type(e)
    d = e * (e + T(2.0)) + T(2.0)
    return (m * (e + T(2.0))) / d, T(2.0) / d, m / (T(1.0) + e)


@kernel
def _mish_value(x):
    T = type(x)
    g, q, s, sc = _mish_gate(x)
    if math.isinf(x):
        return x if x > T(0.0) else T(-0.0)
    return (x * g) * sc


@kernel
def _mish_f32(x):
    """Mish in float32 lanes for |x| <= 80 (exp(-|x|) normal); the error analysis is in the
    spec's notes. With e = exp(-|x|) and s = x (x > 0) or x e (x <= 0), Mish = s - s q:
    q = 2e^2/(1 + 2e(1 + e)) for x > 0 (g = 1 - q), q = e(1 + e)/((1 + e)^2 + 1) for
    x <= 0 (g = e(1 - q)); q <= 2/5, so its rounding errors reach the result scaled by
    q/(1 - q) <= 2/3, and s - s q is one fma."""
    T = type(x)
    e = exp_normal(-abs(x))
    a = T(1.0) + e
    pos = x > T(0.0)
    num = T(2.0) * e * e if pos else e * a
    den = fma(T(2.0) * e, a, T(1.0)) if pos else fma(a, a, T(1.0))
    s = x if pos else mul_exp(x, -abs(x))  # x e rounded once
    r = fma(-s, num / den, s)
    return x if x == T(0.0) else r  # -0.0 kept (s - s q gives +0.0 there)


# float32's value from float32 lanes in the bulk; the tails (|x| > 80, where exp(-|x|)
# leaves the normal range, and inf, NaN) in float64, rounded once.
@kernel
def mish_f(x):
    T = type(x)
    if is_f32(x):
        if abs(x) <= T(80.0):
            return _mish_f32(x)
        return T(_mish_value(numba.float64(x)))
    return _mish_value(x)


@kernel
def mish_dx(x):
    T = type(x)
    g, q, s, sc = _mish_gate(x)
    if math.isinf(x):
        return T(1.0) if x > T(0.0) else T(0.0)
    # g' = (1 - g^2) sigma(x) and 1 - g^2 = q (2 - q), with q = 1 - g computed directly.
    return (g + x * (q * (T(2.0) - q) * s)) * sc


# The bulk of Mish (|x| <= 700 float64, 80 float32: exp_scaled's tail off, sc = 1): one
# exp(-|x|) serves both signs, where the exact gate computes exp(-x) and exp_scaled(x) on
# every lane. The same bits (see define's bulk).
@kernel
def _mish_gate_bulk(x):
    T = type(x)
    e = exp_normal(-abs(x))
    if x > T(0.0):
        return _mish_gate_pos(e)
    return _mish_gate_neg(e, e)


@kernel
def _mish_bulk_value(x):
    g, q, s = _mish_gate_bulk(x)
    return x * g


@kernel
def mish_f_bulk(x):
    return _mish_f32(x) if is_f32(x) else _mish_bulk_value(x)


@kernel
def mish_dx_bulk(x):
    T = type(x)
    g, q, s = _mish_gate_bulk(x)
    return g + x * (q * (T(2.0) - q) * s)


# --------------------------------------------------------------------------- xSiLU
@kernel
def _xsilu_gate(x, alpha):
    """sigma(x)(1 + 2 alpha) - alpha, e = exp(-|x|) and e as me * sc (exp_scaled).

    Written as (1 - alpha expm1(-x))/(1 + e) for x >= 0 and (e + alpha expm1(x))/(1 + e)
    for x < 0: for alpha in [-1/2, 0] no term cancels anywhere; for alpha > 0 the only
    cancellation left is at the gate's root x0 = log(alpha/(1 + alpha)) < 0.
    """
    T = type(x)
    m = math.expm1(-abs(x))
    me, sc = exp_scaled(-abs(x), T(0.0))  # e = me sc (me normal in the far tail, see _tail)
    e = me * sc  # not m + 1, which is 0 once m rounds to -1
    return _xsilu_gate_of(x, alpha, m, e), e, me, sc


@kernel
def _xsilu_gate_of(x, alpha, m, e):
    """The gate from m = expm1(-|x|) and e = exp(-|x|)."""
    T = type(x)
    if x < T(0.0):
        num = e + alpha * m
    else:
        num = T(1.0) - alpha * m
    return num / (T(2.0) + m)


@kernel
def xsilu_f(x, alpha):
    T = type(x)
    gate, e, me, sc = _xsilu_gate(x, alpha)
    if math.isinf(x):
        if gate == T(0.0):
            return T(-0.0)  # -inf * 0 at alpha = 0 (x = +inf has gate 1 + alpha): SiLU's limit
        return x * gate
    if sc < T(1.0) and x < T(0.0):
        # far tail: (1 + 2 alpha) x sigma(x) - alpha x with SiLU's part rounded once (at
        # alpha = 0 it is SiLU's subnormal tail; otherwise -alpha x dominates)
        # (1 + 2 alpha) y as (alpha + 1/2)(2 y) here and below: the same bits, and no
        # overflow of 1 + 2 alpha for alpha > max/2 (float32 alpha = max: NaN for inf).
        r = T(1.0) / (T(1.0) + e)
        return (alpha + T(0.5)) * (T(2.0) * ((x * (me * r)) * sc)) - alpha * x
    if not _silu_bulk_domain(x) and x > T(0.0):
        # e < 2^-115 (float32) / 2^-1009: the gate is 1 + alpha to far below an ulp, and
        # x + alpha x is rounded once. x times the rounded gate would miss the overflow
        # threshold: float32 x = max, alpha = 3.37e-8 would give max for the true
        # 3.4028235809e38 (inf, correctly rounded), 1 + alpha rounding to 1. (The bulk
        # keeps x gate.)
        return fma(x, alpha, x)
    return x * gate


@kernel
def xsilu_dx(x, alpha):
    T = type(x)
    gate, e, me, sc = _xsilu_gate(x, alpha)
    if math.isinf(x):
        return gate  # x sigma'(x) -> 0
    r = T(1.0) / (T(1.0) + e)
    if sc < T(1.0) and x < T(0.0):
        # far tail: (1 + 2 alpha) sigma (1 + x (1 - sigma)) - alpha, sigma's part rounded once
        return (alpha + T(0.5)) * (T(2.0) * (((me * r) * (T(1.0) + x * r)) * sc)) - alpha
    # x sigma'(x) first (bounded by 0.23): x (1 + 2 alpha) overflowed for a large alpha
    # and then met sigma' = 0 (x = -1e20, alpha = 2e18 in float32 gave NaN, truth -2e18).
    return gate + (T(2.0) * (x * (e * r * r))) * (alpha + T(0.5))


@kernel
def _xsilu_bulk_domain(x, alpha):
    return _silu_bulk_domain(x)


# The bulk of xSiLU (|x| <= 700 float64, 80 float32: exp_scaled's tail off, e exact
# exp(-|x|)): the same bits as the kernels above (see define's bulk).
@kernel
def _xsilu_gate_bulk(x, alpha):
    e, m = exp_expm1_neg(-abs(x))
    return _xsilu_gate_of(x, alpha, m, e), e


@kernel
def xsilu_f_bulk(x, alpha):
    gate, e = _xsilu_gate_bulk(x, alpha)
    return x * gate


@kernel
def xsilu_dx_bulk(x, alpha):
    T = type(x)
    gate, e = _xsilu_gate_bulk(x, alpha)
    r = T(1.0) / (T(1.0) + e)
    return gate + (T(2.0) * (x * (e * r * r))) * (alpha + T(0.5))


@kernel
def xsilu_dalpha(x, alpha):
    T = type(x)
    # x (2 sigma(x) - 1) = x tanh(x/2) >= 0.
    return x * math.tanh(T(0.5) * x)


# --------------------------------------------------------------------------- references
def _sig(mp, x):
    if mp.isinf(x):
        return mp.one if x > 0 else mp.zero
    return 1 / (1 + mp.exp(-x))


def _dsig(mp, x):
    if mp.isinf(x):
        return mp.zero
    e = mp.exp(-abs(x))
    return e / (1 + e) ** 2


def _sech2(mp, x):
    if mp.isinf(x):
        return mp.zero
    return mp.sech(x) ** 2


def _ref_silu(mp, x):
    if mp.isinf(x):
        return x if x > 0 else mp.zero
    return x * _sig(mp, x)


def _ref_silu_dx(mp, x):
    if mp.isinf(x):
        return mp.one if x > 0 else mp.zero
    return _sig(mp, x) + x * _dsig(mp, x)


def _ref_tanhshrink(mp, x):
    if mp.isinf(x):
        return x
    if x == 0:
        return x
    # x - tanh x ~ x^3/3 loses 2 log10(1/|x|) digits: work with that many more.
    extra = max(0, int(-2 * mp.log10(abs(x)))) + 10
    with mp.extradps(extra):
        return +(x - mp.tanh(x))


def _ref_tanhshrink_dx(mp, x):
    if mp.isinf(x):
        return mp.one
    return mp.tanh(x) ** 2


def _ref_softplus1(mp, x):
    return mp.log1p(mp.exp(x))


def _ref_mish(mp, x):
    if mp.isinf(x):
        return x if x > 0 else mp.zero
    return x * mp.tanh(_ref_softplus1(mp, x))


def _ref_mish_dx(mp, x):
    if mp.isinf(x):
        return mp.one if x > 0 else mp.zero
    sp = _ref_softplus1(mp, x)
    return mp.tanh(sp) + x * mp.sech(sp) ** 2 * _sig(mp, x)


def _mish_dx_scale(mp, x):
    if mp.isinf(x):
        return mp.one
    sp = _ref_softplus1(mp, x)
    return abs(mp.tanh(sp)) + abs(x) * mp.sech(sp) ** 2 * _sig(mp, x)


def _ref_xsilu(mp, x, a):
    if mp.isinf(x):
        if x > 0:
            return x
        return -x * a if a != 0 else mp.zero  # gate -> -alpha
    return x * (_sig(mp, x) * (1 + 2 * a) - a)


def _ref_xsilu_dx(mp, x, a):
    if mp.isinf(x):
        return 1 + a if x > 0 else -a
    return _sig(mp, x) * (1 + 2 * a) - a + x * (1 + 2 * a) * _dsig(mp, x)


def _ref_xsilu_da(mp, x, a):
    if mp.isinf(x):
        return mp.inf
    return x * (2 * _sig(mp, x) - 1)


def _xsilu_scale(mp, x, a):
    # The gate's two terms: the yardstick where x sigma(x)(1 + 2a) and x a cancel.
    if mp.isinf(x):
        return mp.inf
    return abs(x) * (_sig(mp, x) * abs(1 + 2 * a) + abs(a))


def _xsilu_dx_scale(mp, x, a):
    if mp.isinf(x):
        return abs(a) + abs(1 + a)
    return _sig(mp, x) * abs(1 + 2 * a) + abs(a) + abs(x * (1 + 2 * a)) * _dsig(mp, x)


# --------------------------------------------------------------------------- specs
define(
    "sigmoid",
    paper_table=True,
    torch="sigmoid",
    jax="sigmoid",
    monotonic=True,
    summary="Logistic sigmoid.",
    formula=r"\sigma(x) = \frac{1}{1 + e^{-x}}",
    derivative_formula=r"\sigma'(x) = \sigma(x)\,(1 - \sigma(x)) = \frac{e^{-|x|}}{(1 + e^{-|x|})^2}",
    f=sigmoid_f,
    dx=sigmoid_dx,
    bulk={"f": sigmoid_f_bulk, "dx": sigmoid_dx_bulk},
    bulk_domain=_sigmoid_bulk_domain,
    ref=lambda mp, x: _sig(mp, x),
    ref_dx=lambda mp, x: _dsig(mp, x),
    notes=(
        "Evaluated from e = exp(-|x|) on both sides (e/(1+e) for x < 0), so the negative "
        "tail keeps full relative accuracy down to the underflow threshold instead of "
        "cancelling in 1 - 1/(1+e^x). The derivative e/(1+e)^2 is even in x and has no "
        "1 - sigma cancellation."
    ),
    example=(
        ">>> iglu_np.sigmoid(np.array([-1.0, 0.0, 1.0])).round(6)\n"
        "array([0.268941, 0.5     , 0.731059])\n"
        '>>> print(f"{float(iglu_np.sigmoid(-100.0)):.6e}")  # exp(-100), not 0\n3.720076e-44'
    ),
)

define(
    "tanh",
    paper_table=True,
    torch="tanh",
    jax="tanh",
    monotonic=True,
    summary="Hyperbolic tangent.",
    formula=r"\tanh(x) = \frac{e^{x} - e^{-x}}{e^{x} + e^{-x}}",
    derivative_formula=r"\tanh'(x) = 1 - \tanh^2(x) = \frac{4e^{-2|x|}}{(1 + e^{-2|x|})^2}",
    f=tanh_f,
    dx=tanh_dx,
    bulk={"f": tanh_f_bulk, "dx": tanh_dx_bulk},
    bulk_domain=_tanh_bulk_domain,
    ref=lambda mp, x: mp.tanh(x) if mp.isfinite(x) else mp.sign(x),
    ref_dx=lambda mp, x: _sech2(mp, x),
    notes=(
        "The derivative is (1 - t)(1 + t) for |x| < 1/2 and 4e/(1 + e)^2 with "
        "e = exp(-2|x|) beyond, which keeps full relative accuracy in the tails where "
        "1 - tanh^2 would round to 0."
    ),
    example=">>> iglu_np.tanh(np.array([-1.0, 0.0, 1.0])).round(6)\narray([-0.761594,  0.      ,  0.761594])",
)

define(
    "silu",
    paper_table=True,
    torch="silu",
    jax="silu",
    summary="SiLU / Swish-1: the input gated by the logistic sigmoid.",
    formula=r"\mathrm{SiLU}(x) = x\,\sigma(x)",
    derivative_formula=r"\mathrm{SiLU}'(x) = \sigma(x)\,\bigl(1 + x(1 - \sigma(x))\bigr)",
    f=silu_f,
    dx=silu_dx,
    bulk={"f": silu_f_bulk, "dx": silu_dx_bulk},
    bulk_domain=_silu_bulk_domain,
    ref=lambda mp, x: _ref_silu(mp, x),
    ref_dx=lambda mp, x: _ref_silu_dx(mp, x),
    scales={
        "dx": lambda mp, x: mp.one if mp.isinf(x) else _sig(mp, x) + abs(x) * _dsig(mp, x),
    },
    notes=(
        "1 - sigma(x) is never formed: with e = exp(-|x|) and r = 1/(1+e), sigma = r and "
        "1 - sigma = e r for x >= 0 (swapped for x < 0). silu(-inf) = -0. The derivative "
        "crosses zero at x = -1.2785; its error there is measured against "
        "sigma + |x| sigma (1 - sigma)."
    ),
    references=(
        "Hendrycks & Gimpel, Gaussian Error Linear Units, arXiv:1606.08415",
        "Elfwing, Uchibe & Doya, Sigmoid-Weighted Linear Units, arXiv:1702.03118",
        "Ramachandran, Zoph & Le, Searching for Activation Functions, arXiv:1710.05941",
    ),
    example=">>> iglu_np.silu(np.array([-1.0, 0.0, 1.0])).round(6)\narray([-0.268941,  0.      ,  0.731059])",
)

define(
    "tanhshrink",
    torch="tanhshrink",
    monotonic=True,
    summary="Tanhshrink: the input minus its tanh.",
    formula=r"\mathrm{Tanhshrink}(x) = x - \tanh(x)",
    derivative_formula=r"\mathrm{Tanhshrink}'(x) = \tanh^2(x)",
    f=tanhshrink_f,
    dx=tanhshrink_dx,
    bulk={"f": tanhshrink_f_bulk, "dx": tanhshrink_dx_bulk},
    bulk_domain=_tanhshrink_bulk_domain,
    ref=lambda mp, x: _ref_tanhshrink(mp, x),
    ref_dx=lambda mp, x: _ref_tanhshrink_dx(mp, x),
    special_points=(1.5,),
    notes=(
        "x - tanh(x) ~ x^3/3 cancels catastrophically near 0 (PyTorch's form returns 0 "
        "below about 1e-8 in float32). For |x| < 1.5 it is x^3 P(x^2) with a fitted "
        "polynomial (tools/derive_coefficients.py); beyond, the subtraction loses "
        "under one ulp. The derivative 1 - sech^2 = tanh^2 needs no subtraction."
    ),
    example=(
        ">>> iglu_np.tanhshrink(np.array([-2.0, 0.0, 2.0])).round(6)\n"
        "array([-1.035972,  0.      ,  1.035972])\n"
        '>>> print(f"{float(iglu_np.tanhshrink(1e-3)):.6e}")  # x^3/3, not 0\n3.333332e-10'
    ),
)

define(
    "mish",
    paper_table=True,
    torch="mish",
    jax="mish",
    summary="Mish: the input gated by tanh(softplus(x)).",
    formula=r"\mathrm{Mish}(x) = x\tanh(\mathrm{softplus}(x)) = x\,\frac{e^{2x} + 2e^{x}}{e^{2x} + 2e^{x} + 2}",
    derivative_formula=(
        r"\mathrm{Mish}'(x) = \tanh(\mathrm{sp}(x)) + x\,\mathrm{sech}^2(\mathrm{sp}(x))\,\sigma(x)"
    ),
    f=mish_f,
    dx=mish_dx,
    bulk={"f": mish_f_bulk, "dx": mish_dx_bulk},
    bulk_domain=_silu_bulk_domain,
    ref=lambda mp, x: _ref_mish(mp, x),
    ref_dx=lambda mp, x: _ref_mish_dx(mp, x),
    scales={"dx": lambda mp, x: _mish_dx_scale(mp, x)},
    notes=(
        "The gate is the rational function n/(n + 2) of n = e^x(e^x + 2) for x <= 0 and "
        "1 - 2e^2/(1 + 2e + 2e^2) in e = exp(-x) for x > 0: no log, no tanh, no overflow, "
        "and 1 - g (needed for sech^2 = (1 - g)(1 + g)) is computed directly, never by "
        "subtraction. The derivative crosses zero at x = -1.1924; its error there is "
        "measured against |g| + |x| sech^2 sigma. float32 stays in float32 lanes for "
        "|x| <= 80: with e = exp(-|x|), s = x (x > 0) or x e (x <= 0, exp's polynomial "
        "scaled by x and rounded once), the value is s - s q as one fma, with "
        "q = 2e^2/(1 + 2e(1 + e)) for x > 0 and e(1 + e)/((1 + e)^2 + 1) for x <= 0. "
        "q <= 2/5, so q's relative error (exp's, at most doubled by e^2, and four "
        "roundings) reaches the value scaled by q/(1 - q) <= 2/3; with s's error (about "
        "one rounding) and the fma's, the bound of 4 ulp holds: every float32 with "
        "|x| <= 80 is within 2.53 ulp (x < 0; 2.15 for x > 0) of the float64 value. "
        "Beyond |x| = 80, where exp(-|x|) leaves float32's normal range, the float32 "
        "value is computed in float64 and rounded once."
    ),
    references=(
        "Misra, Mish: A Self Regularized Non-Monotonic Activation Function, arXiv:1908.08681",
    ),
    example=">>> iglu_np.mish(np.array([-1.0, 0.0, 1.0])).round(6)\narray([-0.303401,  0.      ,  0.865098])",
)

define(
    "xsilu",
    summary="Expanded SiLU: SiLU with the gate's range stretched from (0, 1) to (-alpha, 1 + alpha).",
    formula=r"\mathrm{xSiLU}(x;\alpha) = x\bigl(\sigma(x)(1 + 2\alpha) - \alpha\bigr)",
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \sigma(x)(1+2\alpha) - \alpha + x(1+2\alpha)\sigma(x)(1-\sigma(x)),"
        r"\quad \frac{\partial f}{\partial \alpha} = x\,(2\sigma(x) - 1) = x\tanh(x/2)"
    ),
    params=[
        Param(
            "alpha",
            0.0,
            "Gate range expansion: the gate runs from -alpha to 1 + alpha. Trainable in the "
            "paper (one per MLP block); 0 gives SiLU. alpha >= -1/2 (at -1/2 the gate is "
            "the constant 1/2).",
            lo=-0.5,
            # first value: the quick test run's pick (a gate root at x0 = -log 2)
            test_values=(1.0, -0.25, 0.1, 0.5, 3.0, 10.0, 0.731),
        )
    ],
    f=xsilu_f,
    dx=xsilu_dx,
    bulk={"f": xsilu_f_bulk, "dx": xsilu_dx_bulk},
    bulk_domain=_xsilu_bulk_domain,
    dparams={"alpha": xsilu_dalpha},
    ref=_ref_xsilu,
    ref_dx=_ref_xsilu_dx,
    ref_dparams={"alpha": _ref_xsilu_da},
    scales={"f": _xsilu_scale, "dx": _xsilu_dx_scale},
    notes=(
        "The gate is computed as (1 - alpha expm1(-x))/(2 + expm1(-x)) for x >= 0 and "
        "(e^x + alpha expm1(x))/(2 + expm1(-|x|)) for x < 0: for -1/2 <= alpha <= 0 no "
        "term cancels and the value is accurate to a few ulp everywhere. For alpha > 0 the "
        "gate has a root at x0 = log(alpha/(1 + alpha)) < 0 where f changes sign; there "
        "(and where the derivative crosses zero) the error is measured against the "
        "magnitude of the gate's terms |x|(sigma(x)|1 + 2 alpha| + |alpha|), since x0 "
        "itself is not representable. Limits: f(-inf) = +inf for alpha > 0 (the gate "
        "tends to -alpha), -0 for alpha = 0. The default alpha = 0 (plain SiLU) is the "
        "neutral starting point; the paper trains alpha per MLP block."
    ),
    references=(_XSILU_PAPER,),
    example=(
        ">>> iglu_np.xsilu(np.array([-1.0, 0.0, 1.0]), alpha=0.5).round(6)\n"
        "array([-0.037883,  0.      ,  0.962117])"
    ),
)
