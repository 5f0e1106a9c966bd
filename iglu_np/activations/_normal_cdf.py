"""The normal CDF machinery of GELU and GELU_a: x Phi(t) and Phi(t) + t phi(t) for t = a x,
accurate from the bulk to underflow.

The hard part is the x << 0 tail, where Phi and phi(x) = exp(-x^2/2)/sqrt(2 pi) have
condition number ~x^2: rounding the exponent x^2/2 alone costs ~x^2/2 ulp (~180 ulp at
x = -19 in float64). So phi is evaluated from an exactly split x^2 (double-word exponent,
exp(y + e) = exp(y)(1 + e)), and Phi(-|t|) = phi(t) M(|t|) with M the Mills ratio, a smooth
function fitted by polynomials (iglu_np/_coefficients.py). For |a x| <= 12.5 (float32) or
18 (float64), the bulk of any input, one polynomial in q = (u - 2)/(u + 2) does it in the
working precision with first-order corrections, faster than the double-word and
float64-internal forms, which keep the tails. No libm erfc, so CPU and GPU agree.
"""

import math

import numpy as np

from .._coefficients import (
    GELU32_K,
    GELU32_UMAX,
    GELU32N_UMAX,
    GELU64N_UMAX,
    GELU_G32,
    GELU_H32,
    GELU_H32_C0,
    GELU_H64,
    GELU_H64_C0,
    GELU_M0_32,
    GELU_M0_64,
    GELU_M1_32,
    GELU_M1_64,
    GELU_M2_32,
    GELU_M2_64,
    GELU_M3_32,
    GELU_M3_64,
    GELU_S_32,
    GELU_S_64,
)
from .._math import _TWO_M512, exp_normal, fma, horner, is_f32, mul_exp, padded, two_prod
from .._math import NUMBA as numba  # numba.float64(x): a cast, rebound to numba's own
from .._spec import kernel
from ._double_word import split_constant, two_sum

# log(sqrt(2 pi)) as hi + lo pairs.
_LNS2PI = split_constant("0.91893853320467274178032973640561763986139747363778")
LN_64H, LN_64L, LN_32H, LN_32L = _LNS2PI

# The Mills ratio's pieces (GELU_M<k>_*, GELU_S_*) for the double-word tail forms, GELU_G32
# for the float32 tail and GELU_H32/GELU_H64 for the native form, with the ranges they
# cover, come from iglu_np/_coefficients.py, which says what each one fits.
H32_C0_HI, H32_C0_LO = GELU_H32_C0
H64_C0_HI, H64_C0_LO = GELU_H64_C0
GELU_H64_E, GELU_H64_O = GELU_H64[2::2], GELU_H64[3::2]
H64_1, H64_2 = GELU_H64[0], GELU_H64[1]
INV_SQRT_2PI = 0.39894228040143267794

# The Mills pieces at one length: one Horner pass on coefficients chosen by selects.
GELU_M0P_64, GELU_M1P_64, GELU_M2P_64, GELU_M3P_64 = padded(
    GELU_M0_64, GELU_M1_64, GELU_M2_64, GELU_M3_64
)
GELU_M0P_32, GELU_M1P_32, GELU_M2P_32, GELU_M3P_32 = padded(
    GELU_M0_32, GELU_M1_32, GELU_M2_32, GELU_M3_32, dtype=np.float32
)


# The kernels below choose between their cases with selects, not branches: every case is
# computed with safe arguments (clamped, so no discarded lane needs inf or NaN it would not
# otherwise meet) and the result picked, so LLVM if-converts the element loops into SIMD
# code (a branch around a polynomial or exp keeps them scalar). The chosen case computes
# exactly what a branch would.
@kernel
def npdf_exponent(t_hi, t_lo):
    """(under, y, f): phi(t_hi + t_lo) = exp(y + f) with y + f = -t^2/2 - log sqrt(2 pi)
    as a dw pair, unless ``under`` (|t| > 64: phi underflows to 0)."""
    T = type(t_hi)
    if is_f32(t_hi):
        l_hi = T(LN_32H)
        l_lo = T(LN_32L)
    else:
        l_hi = T(LN_64H)
        l_lo = T(LN_64L)
    under = abs(t_hi) > T(64.0)  # underflowed; NaN fails the test and propagates
    t_hi = T(64.0) if under else t_hi  # keeps t^2 finite in the discarded lane
    t_lo = T(0.0) if under else t_lo
    s, e = two_prod(t_hi, t_hi)
    e = e + T(2.0) * t_hi * t_lo
    # The normalising constant goes into the exponent: one rounding fewer than exp()*c.
    y, f = two_sum(T(-0.5) * s, -l_hi)
    f = f + (T(-0.5) * e - l_lo)
    return under, y, f


@kernel
def _mills_poly(a):
    """Mills ratio M(a) = Phi(-a)/phi(a) for 0 <= a < 4 (any a is safe to pass): the
    polynomial of a's unit piece, its coefficients chosen by selects. NaN propagates."""
    T = type(a)
    c1 = a >= T(1.0)
    c2 = a >= T(2.0)
    c3 = a >= T(3.0)
    centre = T(3.5) if c3 else (T(2.5) if c2 else (T(1.5) if c1 else T(0.5)))
    # (one name per dtype: the is_f32 branch is folded by LLVM, after typing)
    if is_f32(a):
        c32 = GELU_M3P_32 if c3 else (GELU_M2P_32 if c2 else (GELU_M1P_32 if c1 else GELU_M0P_32))
        return horner(a - centre, c32)
    c64 = GELU_M3P_64 if c3 else (GELU_M2P_64 if c2 else (GELU_M1P_64 if c1 else GELU_M0P_64))
    return horner(a - centre, c64)


@kernel
def _mills_s(a):
    """S = a M(a) for a >= 4, a polynomial in 1/a^2 (-> 1 at a = inf)."""
    T = type(a)
    v = T(1.0) / (a * a) - T(0.03125)
    if is_f32(a):
        return horner(v, GELU_S_32)
    return horner(v, GELU_S_64)


@kernel
def _mills_both(a):
    """(small, M(a), a4, S(a4)) for a >= 0: small = a < 4; M from the pieces below 4 and
    S(a)/a above; a4 = max(a, 4) (NaN stays NaN and is not small)."""
    T = type(a)
    small = a < T(4.0)
    # a + 2^-100 is a where not small: LLVM turns s/select(c, 4, a) into select(c, s/4,
    # s/a), and s/a at a = 0 made the raw float64 ufunc warn "divide by zero".
    a4 = T(4.0) if small else a + T(7.888609052210118e-31)
    s = _mills_s(a4)
    a_poly = a if small else T(0.0)
    m = _mills_poly(a_poly)
    m = m if small else s / a4
    return small, m, a4, s


# 1024 ln2 and 2048 ln2 as dw pairs (hi + lo), and 2^-512.
K1024_HI, K1024_LO = 709.782712893384, 2.3747039373786107e-14
K2048_HI, K2048_LO = 1419.565425786768, 4.7494078747572215e-14


@kernel
def _npdf_shifted(t_hi, t_lo):
    """(ph, sc) with phi(t) = (ph sc) sc: for t < 0 where phi < e^-700 (|t| > 37.4),
    ph = phi 2^1024 = e^(y + 1024 ln2) and sc = 2^-512, else ph = phi and sc = 1. A value
    phi times a factor is then rounded once, when scaled back last: |t| phi (GELU's
    derivative) and (x/|t|) phi S (GELU_a's value, x/|t| = 1/a) are normal where phi is
    not, and rounding phi into the subnormal range first would cost tens to hundreds of
    ulp."""
    T = type(t_hi)
    under, y, f = npdf_exponent(t_hi, t_lo)
    d = t_hi < T(0.0) and y < T(-700.0)
    k_hi = T(K1024_HI) if d else T(0.0)
    y, g = two_sum(y, k_hi)
    f = f + (g + (T(K1024_LO) if d else T(0.0)))
    ph = math.exp(y)
    ph = T(0.0) if under else ph + ph * f
    s = T(_TWO_M512) if d else T(1.0)
    return ph, s


@kernel
def gelu_core(x, t_hi, t_lo):
    """x * Phi(t) with Phi(-|t|) = phi(t) M(|t|) (no erfc: its own error is ~2 ulp)."""
    T = type(x)
    ph, sc = _npdf_shifted(t_hi, t_lo)
    small, m, a4, s = _mills_both(abs(t_hi))
    # t <= -4: x Phi(t) = (x/|t|) phi S: for GELU x/|t| = -1 exactly, one rounding fewer.
    neg = x * (ph * m) if small else (x / a4) * (ph * s)
    neg = (neg * sc) * sc
    # x = -inf would give -inf*0 (phi = 0); the limit is 0 (from below).
    neg = T(-0.0) if ph == T(0.0) else neg
    # Phi(t) = 1 - Phi(-t) with Phi(-t) <= 1/2: no cancellation.
    pos = x * (T(1.0) - ph * m)
    return neg if t_hi < T(0.0) else pos


@kernel
def gelu_dx_core(t_hi, t_lo):
    """Phi(t) + t phi(t) = phi (M - |t|) for t < 0, 1 + phi (t - M) for t >= 0."""
    T = type(t_hi)
    ph, sc = _npdf_shifted(t_hi, t_lo)
    a = abs(t_hi)
    small, m, a4, s = _mills_both(a)
    neg = t_hi < T(0.0)
    r = ph * (m - a) if neg else T(1.0) + ph * (a - m)
    r = (r * sc) * sc
    # |t| = inf (or phi underflowed): the limits 0 and 1 (not 0*inf).
    lim = T(0.0) if neg else T(1.0)
    return lim if ph == T(0.0) else r


# --------------------------------------------------------------------------- float32 tail
# |a x| > GELU32N_UMAX (the native form below takes the rest; the exact kernels branch
# between the two): computed in float64 and rounded once at the end: t = a x is exact
# (two 24-bit significands), t^2 has a relative error of 2^-53 at most, so the exponent
# of phi needs no double-word steps (its rounding costs |t^2/2| 2^-53 <= 2e-14), float64
# keeps the x << 0 tail normal where float32 goes subnormal (one rounding there, not two),
# and the Mills ratio needs only ~1e-9: one polynomial over the whole range instead of
# four pieces chosen by selects, a polynomial in 1/t^2 and two divisions.
@kernel
def _mills32(u):
    """M(u) in float64 for 0 <= u <= GELU32_UMAX (NaN stays NaN)."""
    D = type(u)
    d = u + D(GELU32_K)
    # 1/d: a float32 division (half the cost of float64's, twice the lanes) and one Newton
    # step in float64 (relative error ~2^-46).
    r0 = numba.float64(numba.float32(1.0) / numba.float32(d))
    r = r0 * (D(2.0) - d * r0)
    return r * horner((u - D(GELU32_K)) * r, GELU_G32)


@kernel
def _gate32(t):
    """(phi(u), M(u), u) in float64 for u = min(|t|, GELU32_UMAX): Phi(-u) = phi M."""
    D = type(t)
    u = abs(t)
    u = D(GELU32_UMAX) if u > D(GELU32_UMAX) else u  # NaN stays NaN
    ph = math.exp(D(-0.5) * (u * u) - D(LN_64H))
    return ph, _mills32(u), u


@kernel
def _gelu32_value(x, t, ph, m):
    """x Phi(t) as float32 from _gate32's phi and M."""
    T = type(x)
    D = type(t)
    q = ph * m  # Phi(-|t|) <= 1/2: 1 - q does not cancel
    g = q if t < D(0.0) else D(1.0) - q
    r = numba.float64(x) * g
    # Beyond the clamp |x| Phi(t) < 3.4e38 Phi(-20) ~ 1e-50 rounds to -0 (and x = -inf
    # would give -inf * tiny).
    r = D(-0.0) if t < D(-GELU32_UMAX) else r
    return T(r)


@kernel
def _gelu32_dx_value(x, t, ph, m, u):
    """Phi(t) + t phi(t) as float32: phi (M - u) for t < 0, 1 + phi (u - M) for t >= 0."""
    T = type(x)
    D = type(t)
    r = ph * (m - u) if t < D(0.0) else D(1.0) + ph * (u - m)
    return T(r)


@kernel
def gelu32_f(x, t):
    """x Phi(t) as float32 for a float32 x and t = a x formed exactly in float64."""
    ph, m, u = _gate32(t)
    return _gelu32_value(x, t, ph, m)


@kernel
def gelu32_dx(x, t):
    ph, m, u = _gate32(t)
    return _gelu32_dx_value(x, t, ph, m, u)


# --------------------------------------------------------------------------- native
# |a x| <= GELU32N_UMAX (float32) or GELU64N_UMAX (float64), the bulk of any input, in the
# working precision, about twice as fast as the float64 (float32) and double-word (float64)
# forms above, which take the tails: the exponent -t^2/2 = y + f with y exact and f from an
# fma, r = 1/(u + 2) with both roundings (u + 2's and the division's) known exactly as res,
# and the two corrections applied once, to first order, as (1 + res + f). The product is
# ordered so that H0 + hl is never rounded, and r exp(y) is rounded once (mul_exp:
# s (1 + p) 2^k with one fma; rounding exp's result before the product takes gelu_a past
# 4 ulp in the far tail). The price is accuracy: the native form uses most of the 4 ulp
# forward bound, the tail forms much less (tests/test_accuracy.py sweeps every float32 of
# the range; python -m tests.accuracy prints the table). N(0, 9) data never leave the
# range; the CPU fast path runs the tail forms for the elements beyond it alone, and a
# block with many of them runs the exact kernels throughout.
@kernel
def _mills_n(u, u_lo):
    """(r, hl, res): M(w)/sqrt(2 pi) = r (1 + res) (H0 + hl) for w = u + u_lo >= 0 (to
    O(eps^2)); u_lo: the low part of |a x| (-0.0 for GELU, which folds away). With
    _exponent_n's y and f, Phi(-w) = r exp(y) (H0 + hl)(1 + res + f)."""
    T = type(u)
    d = u + T(2.0)
    # d + ed = w + 2 exactly. d - 2 is exact for every d >= 2 (2 is a multiple of d's
    # ulp), and u - (d - 2) then by Sterbenz: one form for all u >= 0, with no compare and
    # select as Fast2Sum ordered by size would need (the same bits).
    ed = u - (d - T(2.0))
    ed = ed + u_lo
    r = T(1.0) / d
    res = fma(-d, r, T(1.0)) - ed * r
    # q = 1 - 4/(w + 2) from the corrected r: its error would cost up to 1 ulp otherwise.
    q = fma(-(T(4.0) * r), res, fma(T(-4.0), r, T(1.0)))
    if is_f32(u):
        return r, fma(q, horner(q, GELU_H32), T(H32_C0_LO)), res
    # float64 as H0 + q (h1 + q (h2 + q (E(q^2) + q O(q^2)))): two chains of 12 instead of
    # one of 26, which bounded the loop by its latency; the Horner steps kept last keep its
    # rounding.
    q2 = q * q
    h = fma(q, horner(q2, GELU_H64_O), horner(q2, GELU_H64_E))
    h = fma(q, fma(q, h, T(H64_2)), T(H64_1))
    return r, fma(q, h, T(H64_C0_LO)), res


@kernel
def _h_c0_hi(x):
    T = type(x)
    return T(H32_C0_HI) if is_f32(x) else T(H64_C0_HI)


@kernel
def _exponent_n(t_hi, t_lo):
    """(y, f): -(t_hi + t_lo)^2 / 2 = y + f, y = -t_hi^2/2 rounded once."""
    T = type(t_hi)
    # -t_hi/2 is exact, so y and the fma's exact remainder f come with one multiply fewer
    # than squaring and halving both (the same bits; the loops are bound by multiplies).
    h = T(-0.5) * t_hi
    y = t_hi * h
    f = fma(t_hi, h, -y)
    f = f if t_lo == T(0.0) else f - t_hi * t_lo  # folded away for GELU's 0
    return y, f


@kernel
def _gelu_n_value(x, a, hl, c):
    """x Phi(t) for t = a x, a >= 0: Phi(-|t|) = a (H0 + hl)(1 + c) with a = r exp(y), and
    Phi(t) = 1 - Phi(-|t|) for x >= 0."""
    T = type(x)
    h0 = _h_c0_hi(x)
    hc = fma(h0 + hl, c, hl)
    q = fma(a, h0, a * hc)
    return x * (q if x < T(0.0) else T(1.0) - q)


@kernel
def _gelu_n_dx_value(x, u, r, hl, res, f, ex):
    """Phi(t) + t phi(t) for t = a x, a >= 0: phi(u) (M(u) - u) for x < 0, 1 - phi(u) (M(u)
    - u) for x >= 0 (u = |t|'s high part, phi M = ex G with G = M/sqrt(2 pi))."""
    T = type(x)
    g = r * (_h_c0_hi(x) + hl)
    g = fma(g, res, g)
    v = fma(ex, f, ex) * (g - u * T(INV_SQRT_2PI))
    return v if x < T(0.0) else T(1.0) - v


@kernel
def in_native_range(t_hi):
    """|t_hi| within the native form's range (NaN: not)."""
    T = type(t_hi)
    return abs(t_hi) <= (T(GELU32N_UMAX) if is_f32(t_hi) else T(GELU64N_UMAX))


# The exact kernels branch: a select would compute the tail form on every lane, about
# twice the time of the ufuncs, whose loops are scalar anyway. So they vectorise only where
# a CPU fast-path block holds tail elements; the bulk below is the native branch alone.
@kernel
def gelu_native(x, u, u_lo):
    """x Phi(a x), the native form; u + u_lo = |a x| (a >= 0)."""
    r, hl, res = _mills_n(u, u_lo)
    y, f = _exponent_n(u, u_lo)
    return _gelu_n_value(x, mul_exp(r, y), hl, res + f)


@kernel
def gelu_native_dx(x, u, u_lo):
    r, hl, res = _mills_n(u, u_lo)
    y, f = _exponent_n(u, u_lo)
    return _gelu_n_dx_value(x, u, r, hl, res, f, math.exp(y))


# The CPU's bulk: in_native_range holds for every element (exp_normal: exp's bits there). The
# forward's bulk is gelu_native itself (mul_exp has no range handling to leave out).
@kernel
def gelu_native_dx_bulk(x, u, u_lo):
    r, hl, res = _mills_n(u, u_lo)
    y, f = _exponent_n(u, u_lo)
    return _gelu_n_dx_value(x, u, r, hl, res, f, exp_normal(y))


@kernel
def ax_native_bulk(x, a):
    """(u, u_lo): |a x| = a |x| = u + u_lo, exactly (the fma's error term is exact wherever
    it matters: no 1e30/1e290 guard as in two_prod, so a = 1e31, x = -5e-31 keeps it), for
    finite a x (the bulk). From |x| the low part needs no sign select, as a x's would;
    the native form takes the side from x's sign, so at t = 0 with x < 0 (a = 0 or a |x|
    underflowing) Phi(0) is q, not 1 - q (both within an ulp of 1/2)."""
    w = abs(x)
    u = a * w
    return u, fma(a, w, -u)


@kernel
def ax_native(x, a):
    """ax_native_bulk's values, and a = 0 at x = +-inf gives 0 (never in the bulk: its a x is
    NaN there, so the bulk loops go without these selects)."""
    T = type(x)
    u, u_lo = ax_native_bulk(x, a)
    z = a == T(0.0) and math.isinf(x)
    u = T(0.0) if z else u
    u_lo = T(0.0) if z else u_lo
    return u, u_lo


@kernel
def ax_in_float64(x, a):
    """a x in float64 (exact for float32 a and x); a = 0 gives 0 even at x = +-inf."""
    T = type(x)
    t = numba.float64(a) * numba.float64(x)
    D = type(t)
    return D(0.0) if (a == T(0.0) and math.isinf(x)) else t


@kernel
def gelu32_da(x, a):
    """x^2 phi(a x) as float32, in float64 (the exponent's rounding costs 2^-53 |t^2/2|)."""
    T = type(x)
    t = ax_in_float64(x, a)
    D = type(t)
    xd = numba.float64(x)
    ph = math.exp(D(-0.5) * (t * t) - D(LN_64H))
    r = (xd * ph) * xd
    r = D(0.0) if ph == D(0.0) else r  # |x| = inf with a > 0: the limit 0
    return T(r)
