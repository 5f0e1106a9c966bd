"""IGLU: the Cauchy-gated linear unit and its rational approximation (Kang, Yang & Rocha
Neto, ECML-PKDD 2026, arXiv 2603.06861, eqs. 4, 8, 10, 11)."""

import math

import numpy as np

from .._coefficients import IGLU_A32, IGLU_A64, IGLU_D32, IGLU_D64, IGLU_R32
from .._math import (
    _TWO_32,
    _TWO_64,
    _TWO_256,
    _TWO_512,
    _TWO_M32,
    _TWO_M64,
    _TWO_M256,
    _TWO_M512,
    PIO2_HI32,
    PIO2_HI64,
    PIO2_LO32,
    PIO2_LO64,
    fma,
    horner,
    is_f32,
    padded,
)
from .._spec import Param, define, kernel

_PAPER = "Kang, Yang & Rocha Neto, IGLU, ECML-PKDD 2026, arXiv:2603.06861"

_SIGMA = Param(
    "sigma",
    1.0,
    "Scale of the Cauchy gate; small sigma gives a wide, heavy-tailed gate.",
    lo=0.0,
    lo_open=True,
    test_values=(1e-3, 0.1, 0.5, 5.0, 10.0, 1e3, 0.73),
)

# IGLU from u = min(|t|, 1/|t|) in [0, 1]: the forward needs atan(u) = u A(u^2), the
# derivative S(u) = atan(u) + u/(1+u^2) = 2u + u^3 R(u^2) and D(u) = atan(u) - u/(1+u^2) =
# u^3 P(u^2) (the tail, where the two terms cancel), each one polynomial in (u^2 - 1/2)
# (IGLU_A, IGLU_R, IGLU_D from iglu_np/_coefficients.py). Each derivative element needs one
# of R and P: float32 runs one Horner pass on coefficients chosen by a select, float64
# derives R from P (see _iglu_dx_s64). So an element costs one division, where atan and
# u/(1+u^2) would cost three and a libm call (tools/ab_speed.py times the loops).
IGLU_R32P, IGLU_D32P = padded(IGLU_R32, IGLU_D32, dtype=np.float32)
# float64 as c0 + w (c1 + w (E(w^2) + w O(w^2))): two chains of ~10 instead of one of 21-23,
# which bounded the loop by its latency; the two Horner steps kept last keep its rounding.
IGLU_A64E, IGLU_A64O = IGLU_A64[2::2], IGLU_A64[3::2]
IGLU_D64E, IGLU_D64O = IGLU_D64[2::2], IGLU_D64[3::2]
A64_0, A64_1 = IGLU_A64[0], IGLU_A64[1]
D64_0, D64_1 = IGLU_D64[0], IGLU_D64[1]


# 1/pi = hi + lo per dtype: s/pi as fma(s, hi, s lo) rounds once, as a division would
# (within 2^-24 ulp of it), at the cost of a multiply and an fma instead of a division.
INV_PI_HI64, INV_PI_LO64 = 0.3183098861837907, -1.9678676675182486e-17
INV_PI_HI32, INV_PI_LO32 = 0.31830987334251404, 1.2841276486597053e-08


# --------------------------------------------------------------------------- Z gate
@kernel
def sigma_scaled(sigma):
    """(sigma c, c) with c = 2^-64 for sigma >= 1, else 1 (a power of two: sigma c is
    exact). The gate's tail 1/|t|, t = sigma x, is subnormal where t overflows, and would
    come out 0 (z_gate float32, sigma = 1e35, x = -1e5: 0 for 3.2e-41); t' = (sigma c) x
    cannot overflow unless the result underflows, and 1/t = (1/t') c with the same bits
    wherever t' is normal. A function of sigma alone (the loops hoist it): per element one
    product more (t') and the scaling, cheaper than selecting t' only where t overflowed
    (three more operations; tools/ab_speed.py times both)."""
    T = type(sigma)
    big = sigma >= T(1.0)
    c = T(_TWO_M64) if big else T(1.0)
    return sigma * c, c


@kernel
def z_gate_f(x, sigma):
    T = type(x)
    t = sigma * x
    neg = t < T(0.0)
    sp, c = sigma_scaled(sigma)
    tp = sp * x
    # One atan on a selected argument, then selects: branch-free, so the element loop
    # vectorises (an atan per branch is computed on every lane once if-converted).
    # 1/2 + atan(t)/pi cancels for t << 0; reflect: atan(1/|t|)/pi.
    # Each select's discarded side gets a harmless argument, so no lane raises FP flags
    # that the raw ufunc would report as warnings (here: -1/0 for t = 0).
    # (The safe value is not a constant: LLVM would fold -1/select(c, t, K) back into
    # select(c, -1/t, -1/K) and divide by t = 0 anyway.)
    # Where tp is subnormal (sigma |x| < 2^-62) u = -1/t > 2^62 and its rounding is
    # below 2^-86 in atan(u).
    tn = tp if neg else -abs(tp) - T(1.0)
    u = (T(-1.0) / tn) * c if neg else t
    a = math.atan(u)
    return a / T(math.pi) if neg else T(0.5) + a / T(math.pi)


@kernel
def z_gate_dx(x, sigma):
    T = type(x)
    t = sigma * x
    if abs(t) > T(1.0):
        sp, c = sigma_scaled(sigma)
        r = (T(1.0) / (sp * x)) * c
        return (sigma * r) * r / (T(math.pi) * (T(1.0) + r * r))
    return sigma / (T(math.pi) * (T(1.0) + t * t))


@kernel
def z_gate_dsigma(x, sigma):
    T = type(x)
    t = sigma * x
    if abs(t) > T(1.0):
        sp, c = sigma_scaled(sigma)
        r = (T(1.0) / (sp * x)) * c
        # x/(1+t^2) = (r/sigma)/(1 + r^2): no overflow of t^2 for huge x.
        return (r / sigma) / (T(math.pi) * (T(1.0) + r * r))
    return x / (T(math.pi) * (T(1.0) + t * t))


# --------------------------------------------------------------------------- IGLU
@kernel
def _inv_min(t):
    """(neg, big, u): t < 0, |t| > 1 and u = min(|t|, 1/|t|) in [0, 1] (NaN for NaN)."""
    T = type(t)
    w = abs(t)
    big = w > T(1.0)
    # LLVM turns 1/select(c, w, K) into select(c, 1/w, 1/K), dividing every lane by w: w +
    # 2^-100 (= w wherever big; 0 and subnormals become 2^-100) keeps that division free of
    # FP flags (divide by zero, overflow), which the raw ufunc reports as warnings.
    r = T(1.0) / ((w + T(7.888609052210118e-31)) if big else T(1.0))
    r = r if big else w
    return t < T(0.0), big, r


@kernel
def atan_pi(t):
    """(neg, big, k, nap) for the Cauchy gate: t < 0, |t| > 1, k = atan(u)/pi and nap =
    -atan(u)/(u pi) for u = min(|t|, 1/|t|). One division (u) and one polynomial, no atan
    (whose reduction divides again) and no division by pi (1/pi as hi + lo)."""
    T = type(t)
    neg, big, u = _inv_min(t)
    if is_f32(t):
        a = horner(u * u - T(0.5), IGLU_A32)
        ip_hi = T(INV_PI_HI32)
        ip_lo = T(INV_PI_LO32)
    else:
        w = u * u - T(0.5)
        w2 = w * w
        a = fma(w, horner(w2, IGLU_A64O), horner(w2, IGLU_A64E))
        a = fma(w, fma(w, a, T(A64_1)), T(A64_0))
        ip_hi = T(INV_PI_HI64)
        ip_lo = T(INV_PI_LO64)
    au = u * a
    return neg, big, fma(au, ip_hi, au * ip_lo), -fma(a, ip_hi, a * ip_lo)


@kernel
def cauchy_z(neg, big, k):
    """Z(t) = 1/2 + atan(t)/pi from atan_pi: with atan(1/u) = pi/2 - atan(u) it is 1/2 + k,
    1 - k (t >= 0, |t| <= 1 or > 1), 1/2 - k, k (t < 0)."""
    T = type(k)
    return (k if big else T(0.5) - k) if neg else (T(1.0) - k if big else T(0.5) + k)


@kernel
def iglu_f(x, sigma):
    neg, big, k, nap = atan_pi(sigma * x)
    # t < -1: x atan(u)/pi = -(atan(u)/u)/(pi sigma) = nap/sigma: exact limit
    # -1/(pi sigma) at -inf, and insensitive to the rounding of t and u.
    near = nap / sigma
    z = cauchy_z(neg, big, k)
    return near if (neg and big) else x * z


@kernel
def _iglu_dx_s64(neg, big, u):
    """pi (Z + t/(pi(1+t^2))) - [t >= 0] pi/2 in float64 (see iglu_dx) from D's polynomial
    alone: R(v) = P(v) - 2/(1 + v), as S - D = 2u/(1+u^2). Selecting R's or P's 23
    coefficients per lane costs 22 blends per vector, more than this division and the
    error terms below (tools/ab_speed.py compares the fused backward). Rounding errors of
    u^3 and of P - 2/(1+u^2) go into a low part, so S - pi/2 (cancelling by up to 4.5x
    near t = -1) is more accurate than from R's polynomial (python -m tests.accuracy
    measures it). float32 keeps the select: there the division costs as much."""
    T = type(u)
    uu = u * u
    u3 = u * uu
    w = uu - T(0.5)
    w2 = w * w
    p = fma(w, horner(w2, IGLU_D64O), horner(w2, IGLU_D64E))
    p = fma(w, p, T(D64_1))
    p = fma(w, p, T(D64_0))
    # u^3 = u3 + e3 and 1/(1 + u^2) = r (1 + res), both to O(eps^2)
    eu = fma(u, u, -uu)
    e3 = fma(u, eu, fma(u, uu, -u3))
    d = T(1.0) + uu
    ed = (T(1.0) - d) + uu  # exact: 1 >= uu
    r = T(1.0) / d
    res = fma(-d, r, T(1.0)) - (ed + eu) * r
    # R = rh + rl: P - 2r by Fast2Sum (2r >= 1 > P), then -2r res
    r2 = r + r
    rh = p - r2
    rl = (p - (rh + r2)) - r2 * res
    rh = p if big else rh
    rl = T(0.0) if big else rl
    lo = fma(u3, rl, e3 * rh)
    base = T(0.0) if big else u + u
    f = fma(u3, rh, base) + lo
    g = fma(-u3, rh, T(PIO2_HI64) - base) + (T(PIO2_LO64) - lo)
    return f if neg == big else g


@kernel
def iglu_dx(x, sigma):
    T = type(x)
    neg, big, u = _inv_min(sigma * x)
    # pi (Z + t/(pi(1+t^2))) - [t >= 0] pi/2, with atan(1/u) = pi/2 - atan(u), is F or
    # pi/2 - F for F = D(u) (|t| > 1) or S(u) (|t| <= 1): t >= 0 takes S and pi/2 - D,
    # t < 0 takes pi/2 - S and D. pi/2 - F as (c_hi - 2u) - u^3 R: c_hi - 2u is exact for
    # u >= 0.4, where S cancels against pi/2 by up to 4.5x.
    if is_f32(x):
        uu = u * u
        u3 = u * uu
        pp = horner(uu - T(0.5), IGLU_D32P if big else IGLU_R32P)
        base = T(0.0) if big else u + u
        f = fma(u3, pp, base)
        g = fma(-u3, pp, T(PIO2_HI32) - base) + T(PIO2_LO32)
        s = f if neg == big else g
        ip_hi = T(INV_PI_HI32)
        ip_lo = T(INV_PI_LO32)
    else:
        s = _iglu_dx_s64(neg, big, u)
        ip_hi = T(INV_PI_HI64)
        ip_lo = T(INV_PI_LO64)
    # One product with 1/pi (hi + lo): a division here would be a fourth per element.
    q = fma(s, ip_hi, s * ip_lo)
    return q if neg else T(0.5) + q


@kernel
def iglu_dsigma(x, sigma):
    T = type(x)
    t = sigma * x
    if abs(t) > T(1.0):
        r = T(1.0) / t
        # x^2/(1+t^2) = 1/(sigma^2 (1 + r^2)): finite limit 1/(pi sigma^2) at |x| -> inf.
        # (pi sigma) sigma overflows (sigma = 1e20 float32, 1e155 float64) and would give 0
        # where the value is subnormal: sigma >= 2^32 (2^256) is scaled by c = 2^-64
        # (2^-512) and the quotient by c twice. A small sigma makes (pi sigma) sigma
        # subnormal where the value is near the maximum (float32 sigma = 2.17e-20,
        # x = -4.6e19: 10 ulp): sigma < 2^-32 (2^-256) is scaled by 2^64 (2^512).
        if is_f32(x):
            c = T(_TWO_M64) if sigma >= T(_TWO_32) else T(1.0)
            c = T(_TWO_64) if sigma < T(_TWO_M32) else c
        else:
            c = T(_TWO_M512) if sigma >= T(_TWO_256) else T(1.0)
            c = T(_TWO_512) if sigma < T(_TWO_M256) else c
        sc = sigma * c
        return ((T(1.0) / ((T(math.pi) * sc) * sc * (T(1.0) + r * r))) * c) * c
    # x (x/(...)): x^2 overflowed where the quotient does not (float32 x = 3e19, sigma = 1e-30)
    return x * (x / (T(math.pi) * (T(1.0) + t * t)))


# --------------------------------------------------------------------------- Z approx
@kernel
def z_approx_f(x, sigma):
    T = type(x)
    t = sigma * x
    if t < T(0.0):
        # 0.5/(1 - t) = (0.5/(c - t')) c (sigma_scaled): 1 - t overflowed with t, to a 0
        # where the value is subnormal.
        sp, c = sigma_scaled(sigma)
        return (T(0.5) / (c - sp * x)) * c
    return T(1.0) - T(0.5) / (T(1.0) + t)


@kernel
def _z_approx_w(x, sigma):
    """1/(1 + |sigma x|) as (1/(c + |t'|)) c (sigma_scaled): 1 + |sigma x| overflowed with
    sigma x, to a 0 where the results that take it are subnormal."""
    T = type(x)
    sp, c = sigma_scaled(sigma)
    return (T(1.0) / (c + abs(sp * x))) * c


@kernel
def z_approx_dx(x, sigma):
    T = type(x)
    w = _z_approx_w(x, sigma)
    return (sigma * w) * w * T(0.5)


@kernel
def z_approx_dsigma(x, sigma):
    T = type(x)
    w = _z_approx_w(x, sigma)
    # x*w = x/(1+sigma|x|) as 1/(1/x +- sigma) for |x| > 1: finite where x*w is inf*0.
    if abs(x) <= T(1.0):
        xw = x * w
    elif x < T(0.0):
        xw = T(1.0) / (T(1.0) / x - sigma)
    else:
        xw = T(1.0) / (T(1.0) / x + sigma)
    # At x = +-inf, xw = -+1/sigma overflows for sigma < 1/max and w = 0: inf*0. w is 0
    # only where the result underflows too.
    if w == T(0.0):
        xw = -T(0.0) if x < T(0.0) else T(0.0)
    return xw * w * T(0.5)


# --------------------------------------------------------------------------- IGLU approx
@kernel
def iglu_approx_f(x, sigma):
    T = type(x)
    # Four cases, each h = num/den with the result h or x - h: one division and selects,
    # so the float64 loop vectorises too. Every case computes what a branch would.
    big = abs(x) > T(1.0)
    # |x| > 1: x/(2(1+sigma|x|)) as 0.5/(1/x -+ sigma): exact limits at +-inf, no inf/inf.
    # Beyond 2^64 with sigma < 1 both parts are taken 2^64 larger, so that 1/x is never
    # subnormal where sigma is no larger (float32 x = -3.4e38, sigma = 2.8e-45: 4.0 ulp).
    s = T(_TWO_64) if (abs(x) > T(_TWO_64) and sigma < T(1.0)) else T(1.0)
    q = s / (x if big else abs(x) + T(1.0))  # safe, non-constant divisor (see z_gate_f)
    xs = q if big else x  # |xs| <= 1: sigma*xs cannot overflow in the discarded case
    t = sigma * xs
    neg = x < T(0.0) if big else t < T(0.0)
    num = T(0.5) * s if big else T(0.5) * x
    ss = sigma * s
    den = (q - ss if neg else q + ss) if big else (T(1.0) - t if neg else T(1.0) + t)
    h = num / den
    # x = +inf with sigma < 1/(2 max): h = 0.5/sigma overflowed, inf - inf. Elsewhere
    # h < x for x > 0 (h = x = 0 at 0).
    return h if neg else x - (T(0.0) if h == x else h)


@kernel
def iglu_approx_dx(x, sigma):
    T = type(x)
    w = T(1.0) / (T(1.0) + abs(sigma * x))
    h = T(0.5) * w * w  # Z + t Z' simplifies to this: no cancellation left
    if x < T(0.0):
        return h
    return T(1.0) - h


@kernel
def iglu_approx_dsigma(x, sigma):
    T = type(x)
    if abs(x) > T(1.0):
        m = T(1.0) / (T(1.0) / abs(x) + sigma)  # |x|/(1+sigma|x|), finite at |x| = inf
    else:
        m = abs(x) / (T(1.0) + sigma * abs(x))
    return T(0.5) * m * m


# --------------------------------------------------------------------------- references
def _ref_z(mp, x, s):
    return mp.mpf(1) / 2 + mp.atan(s * x) / mp.pi


def _ref_z_dx(mp, x, s):
    return s / (mp.pi * (1 + (s * x) ** 2)) if mp.isfinite(x) else mp.zero


def _ref_z_ds(mp, x, s):
    return x / (mp.pi * (1 + (s * x) ** 2)) if mp.isfinite(x) else mp.zero


def _ref_iglu(mp, x, s):
    if mp.isinf(x):
        return x if x > 0 else -1 / (mp.pi * s)
    return x * _ref_z(mp, x, s)


def _ref_iglu_dx(mp, x, s):
    if mp.isinf(x):
        return mp.one if x > 0 else mp.zero
    return _ref_z(mp, x, s) + x * _ref_z_dx(mp, x, s)


def _ref_iglu_ds(mp, x, s):
    if mp.isinf(x):
        return 1 / (mp.pi * s**2)
    return x * _ref_z_ds(mp, x, s)


def _ref_za(mp, x, s):
    t = s * x
    if t < 0:
        return 1 / (2 * (1 - t))
    if mp.isinf(t):
        return mp.one
    return (1 + 2 * t) / (2 * (1 + t))


def _ref_za_prime(mp, t):
    return 1 / (2 * (1 + abs(t)) ** 2)


def _ref_iglu_approx(mp, x, s):
    if mp.isinf(x):
        return x if x > 0 else -1 / (2 * s)
    return x * _ref_za(mp, x, s)


def _ref_iglu_approx_dx(mp, x, s):
    if mp.isinf(x):
        return mp.one if x > 0 else mp.zero
    return _ref_za(mp, x, s) + s * x * _ref_za_prime(mp, s * x)


def _ref_iglu_approx_ds(mp, x, s):
    if mp.isinf(x):
        return 1 / (2 * s**2)
    return x * x * _ref_za_prime(mp, s * x)


_GATE_NOTE = (
    "The gate is the CDF of a Cauchy distribution with scale 1/sigma. For x < 0 it is "
    "evaluated as atan(1/|sigma x|)/pi: the textbook 1/2 + atan(sigma x)/pi cancels to "
    "zero relative accuracy in the negative tail."
)

define(
    "z_gate",
    monotonic=True,
    summary="Cauchy CDF gate of IGLU.",
    formula=r"Z(x;\sigma) = \frac{1}{2} + \frac{1}{\pi}\arctan(\sigma x)",
    derivative_formula=r"\frac{\partial Z}{\partial x} = \frac{\sigma}{\pi(1+\sigma^2x^2)}",
    params=[_SIGMA],
    f=z_gate_f,
    dx=z_gate_dx,
    dparams={"sigma": z_gate_dsigma},
    ref=_ref_z,
    ref_dx=_ref_z_dx,
    ref_dparams={"sigma": _ref_z_ds},
    notes=_GATE_NOTE,
    references=(_PAPER + ", eq. 8",),
    example=">>> iglu_np.z_gate(np.array([-1.0, 0.0, 1.0])).round(6)\narray([0.25, 0.5 , 0.75])",
)


def _torch_iglu(th, x):
    """The paper's reference expression in torch (``iglu-np bench`` times it)."""
    return x * (0.5 + th.atan(x) / math.pi)


def _jax_iglu(jnp, x):
    """The paper's reference expression in jax.numpy (``iglu-np bench --frameworks``)."""
    return x * (0.5 + jnp.arctan(x) / math.pi)


define(
    "iglu",
    paper_table=True,
    torch=_torch_iglu,
    jax=_jax_iglu,
    summary="Integrated Gaussian Linear Unit: the input gated by a Cauchy CDF.",
    formula=r"\mathrm{IGLU}(x;\sigma) = x\left(\frac{1}{2} + \frac{1}{\pi}\arctan(\sigma x)\right)",
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = Z(x;\sigma) + \frac{\sigma x}{\pi(1+\sigma^2x^2)},\quad"
        r"\frac{\partial f}{\partial \sigma} = \frac{x^2}{\pi(1+\sigma^2x^2)}"
    ),
    params=[_SIGMA],
    f=iglu_f,
    dx=iglu_dx,
    dparams={"sigma": iglu_dsigma},
    ref=_ref_iglu,
    ref_dx=_ref_iglu_dx,
    ref_dparams={"sigma": _ref_iglu_ds},
    notes=(
        _GATE_NOTE + " The limits are iglu(-inf) = -1/(pi sigma) and iglu(+inf) = +inf. "
        "In the negative tail the derivative's two terms cancel to 2/(3 pi sigma^3 |x|^3); "
        "it is computed as u^3 P(u^2) with u = 1/(sigma|x|), so it stays positive and "
        "accurate to the last bits (the paper's non-vanishing-gradient property holds "
        "numerically, in float32 too)."
    ),
    references=(_PAPER + ", eqs. 4, 10",),
    example=(
        ">>> iglu_np.iglu(np.array([-1.0, 0.0, 1.0])).round(6)\narray([-0.25,  0.  ,  0.75])\n"
        ">>> float(iglu_np.iglu(-np.inf, sigma=2.0))  # -1/(2 pi)\n-0.15915494309189535"
    ),
)

define(
    "z_approx",
    monotonic=True,
    summary="Rational approximation of the IGLU gate (IGLU-Approx's gate).",
    formula=r"Z_a(x;\sigma) = \frac{1 + 2\max(0,\sigma x)}{2(1+|\sigma x|)}",
    derivative_formula=r"\frac{\partial Z_a}{\partial x} = \frac{\sigma}{2(1+|\sigma x|)^2}",
    params=[_SIGMA],
    f=z_approx_f,
    dx=z_approx_dx,
    dparams={"sigma": z_approx_dsigma},
    ref=_ref_za,
    ref_dx=lambda mp, x, s: s * _ref_za_prime(mp, s * x) if mp.isfinite(x) else mp.zero,
    ref_dparams={
        "sigma": lambda mp, x, s: x * _ref_za_prime(mp, s * x) if mp.isfinite(x) else mp.zero
    },
    notes="max |Z - Z_a| is about 0.02264, at sigma x = -3.19 (the paper states < 0.025).",
    references=(_PAPER + ", eq. 11",),
    example=">>> iglu_np.z_approx(np.array([-1.0, 0.0, 1.0]))\narray([0.25, 0.5 , 0.75])",
)

define(
    "iglu_approx",
    paper_table=True,
    summary="IGLU-Approx: IGLU with the rational gate, no transcendental functions.",
    formula=r"f(x;\sigma) = x\,\frac{1 + 2\max(0,\sigma x)}{2(1+|\sigma x|)}",
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \begin{cases} \frac{1}{2(1+|\sigma x|)^2} & x<0\\"
        r" 1 - \frac{1}{2(1+\sigma x)^2} & x \ge 0\end{cases}"
    ),
    params=[_SIGMA],
    f=iglu_approx_f,
    dx=iglu_approx_dx,
    dparams={"sigma": iglu_approx_dsigma},
    ref=_ref_iglu_approx,
    ref_dx=_ref_iglu_approx_dx,
    ref_dparams={"sigma": _ref_iglu_approx_ds},
    notes=(
        "Limits: -1/(2 sigma) at -inf. |IGLU - IGLU-Approx| tends to (1/2 - 1/pi)/sigma as "
        "|x| grows: the approximation is close in the gate, not in absolute value."
    ),
    references=(_PAPER + ", eq. 11",),
    example=">>> iglu_np.iglu_approx(np.array([-1.0, 0.0, 1.0]))\narray([-0.25,  0.  ,  0.75])",
)
