"""GELU family: exact GELU x*Phi(x), PyTorch's tanh approximation, and the IGLU paper's
parametric GELU_a(x) = x*Phi(a x) (Hendrycks & Gimpel 2016; Kang, Yang & Rocha Neto 2026).

The hard part is the x << 0 tail, where Phi and phi(x) = exp(-x^2/2)/sqrt(2 pi) have
condition number ~x^2: rounding the exponent x^2/2 alone costs ~x^2/2 ulp (~180 ulp at
x = -19 in float64). So phi is evaluated from an exactly split x^2 (double-word exponent,
exp(y + e) = exp(y)(1 + e)), and Phi(-|t|) = phi(t) M(|t|) with M the Mills ratio, a smooth
function fitted by polynomials (tools/derive_coefficients.py). For |a x| <= 12.5 (float32)
or 18 (float64), the bulk of any input, one polynomial in q = (u - 2)/(u + 2) does it in the
working precision with first-order corrections (<= 3.3 ulp measured, 2-2.5x faster than the
double-word/float64-internal forms, which keep the tails); no libm erfc, so CPU and GPU
agree. gelu_tanh carries its cubic 2u = k1 x + k3 x^3 as a double-word pair for the same
reason.
"""
import math
from decimal import Decimal, localcontext
import struct

import numpy as np

from .._math import NUMBA as numba  # numba.float64(x): a cast, rebound to numba's own
from .._math import _TWO_M512, exp_dw, exp_normal, exp_scaled, fma, horner, is_f32, mul_exp, padded, two_prod
from .._spec import Param, define, kernel

def _f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def _dw(digits: str):
    """(hi64, lo64, hi32, lo32): a constant split into hi + lo pairs for both dtypes."""
    with localcontext() as ctx:
        ctx.prec = 60
        d = Decimal(digits)
        hi64 = float(d)
        hi32 = _f32(hi64)
        return hi64, float(d - Decimal(hi64)), hi32, _f32(float(d - Decimal(hi32)))


# log(sqrt(2 pi)), and gelu_tanh's 2*sqrt(2/pi) and 2*sqrt(2/pi)*0.044715.
_LNS2PI = _dw("0.91893853320467274178032973640561763986139747363778")
_K1 = _dw("1.5957691216057307117597842397375274739034345246597")
_K3 = _dw("0.07135481627260024877633875227986354099559207477016")
LN_64H, LN_64L, LN_32H, LN_32L = _LNS2PI
K1_64H, K1_64L, K1_32H, K1_32L = _K1
K3_64H, K3_64L, K3_32H, K3_32L = _K3
THREE_K3 = 0.21406444881780074632901625683959062298677622431048  # d(2u)/dx = k1 + 3 k3 x^2

# Roots of the x-derivatives (they cross zero once, on the negative side).
GELU_DX_ROOT = -0.75179152469356445745790494677952403966447115342345
GELU_TANH_DX_ROOT = -0.75246142207101625848795444328891609060539217803763

# Mills ratio M(t) = Phi(-t)/phi(t) on t in [0, 4] (four pieces, in t - centre) and
# S(v) = t M(t) in v = 1/t^2 for t >= 4 (in v - 1/32), from tools/derive_coefficients.py
# (gelu_fits). The comment lines give each fit's own relative error.
# GELU_M0_64: degree 16 in (v - 0.5) on [0, 1], max rel error 6.4e-19, Horner condition <= 1.91
GELU_M0_64 = (
    8.7636445645369234673e-1,
    -5.6181777177315381081e-1,
    2.9772778528355771324e-1,
    -1.3765129304379469474e-1,
    5.7225534690416136605e-2,
    -2.180770513954672033e-2,
    7.7202803533889923113e-3,
    -2.5639378561291869049e-3,
    8.0478892937126255023e-4,
    -2.4017143065542277406e-4,
    6.8470306032846513495e-5,
    -1.872191331180475033e-5,
    4.9258918384094709508e-6,
    -1.2488213383752705238e-6,
    3.0677393507996970679e-7,
    -7.730163378357871368e-8,
    1.7824210898311749839e-8,
)
# GELU_M1_64: degree 15 in (v - 1.5) on [1, 2], max rel error 4.81e-19, Horner condition <= 1.56
GELU_M1_64 = (
    5.158156382179633548e-1,
    -2.2627654267305496742e-1,
    8.8200412104190566072e-2,
    -3.1325308172256452603e-2,
    1.0303112461441866543e-2,
    -3.174127896013940846e-3,
    9.2365343654444347334e-4,
    -2.5552110601233897464e-4,
    6.7546467353539243127e-5,
    -1.713348767553033059e-5,
    4.1846648843405164981e-6,
    -9.8696750327758477565e-7,
    2.2515580646752384923e-7,
    -4.9879721332713906677e-8,
    1.1219305425332042897e-8,
    -2.3470458044710491693e-9,
)
# GELU_M2_64: degree 14 in (v - 2.5) on [2, 3], max rel error 5.98e-19, Horner condition <= 1.38
GELU_M2_64 = (
    3.5426511132979366678e-1,
    -1.14337221675515839e-1,
    3.4211028570502043171e-2,
    -9.6032167497526857919e-3,
    2.5507466740293644348e-3,
    -6.4527001297438635615e-4,
    1.5626194028856460988e-4,
    -3.6373593873176239229e-5,
    8.1659940888773898903e-6,
    -1.7731859233970181113e-6,
    3.7330601882824902012e-7,
    -7.6318807106579988317e-8,
    1.5194458964645026715e-8,
    -3.0490655945349444085e-9,
    5.7687060879484729544e-10,
)
# GELU_M3_64: degree 13 in (v - 3.5) on [3, 4], max rel error 1.21e-18, Horner condition <= 1.29
GELU_M3_64 = (
    2.6656776896822375746e-1,
    -6.7012808611216850018e-2,
    1.6011469414482269221e-2,
    -3.6575552201761403047e-3,
    8.0250653597425727903e-4,
    -1.6975646885999312973e-4,
    3.4726482306428626898e-5,
    -6.8876828451949949914e-6,
    1.3274511887685150707e-6,
    -2.4906826066449264847e-7,
    4.5558637307879881165e-8,
    -8.1405764009295169148e-9,
    1.4588567424058396132e-9,
    -2.4927993734884620813e-10,
)
# GELU_S_64: degree 20 in (v - 0.03125) on [0, mpf('0.0625')], max rel error 4.02e-19, Horner condition <= 1.06
GELU_S_64 = (
    9.7130086495802848643e-1,
    -8.4685669783904068438e-1,
    2.0165611311007919403,
    -7.3640713737958579296,
    3.4933723376900556385e+1,
    -1.9904146449972024133e+2,
    1.302094127054698753e+3,
    -9.5011906826373992396e+3,
    7.5802682123608030778e+4,
    -6.5172294165237715999e+5,
    5.9728834292495430464e+6,
    -5.7903948496461140772e+7,
    5.890342156757091807e+8,
    -6.1585145538935419893e+9,
    6.7689558959150904101e+10,
    -9.0013571916325400368e+11,
    1.0879249175580646641e+13,
    -2.9645161009797292297e+13,
    2.3502949654947524439e+14,
    -4.9413374560288744482e+16,
    6.7505284280092444286e+17,
)
# GELU_M0_32: degree 8 in (v - 0.5) on [0, 1], max rel error 2.56e-9, Horner condition <= 1.91
GELU_M0_32 = (
    8.7636445645369234673e-1,
    -5.6181773730752055554e-1,
    2.977277754910289535e-1,
    -1.3765312854113031955e-1,
    5.722605625793445963e-2,
    -2.1781377743537741109e-2,
    7.7127970175123825432e-3,
    -2.7030681600990429305e-3,
    8.443633211166114818e-4,
)
# GELU_M1_32: degree 7 in (v - 1.5) on [1, 2], max rel error 4.48e-9, Horner condition <= 1.56
GELU_M1_32 = (
    5.1581563609155746529e-1,
    -2.2627654213485722292e-1,
    8.8200684152944105269e-2,
    -3.1325377030674469638e-2,
    1.0297685648960009315e-2,
    -3.1727540625690389404e-3,
    9.5815749897714987085e-4,
    -2.6426005043422883561e-4,
)
# GELU_M2_32: degree 7 in (v - 2.5) on [2, 3], max rel error 7.55e-10, Horner condition <= 1.38
GELU_M2_32 = (
    3.5426511107481051431e-1,
    -1.1433722162022197309e-1,
    3.4211061196718288813e-2,
    -9.6032238249918811166e-3,
    2.5500954049771577985e-3,
    -6.451287646611718695e-4,
    1.6040987890874442016e-4,
    -3.7273458965208414187e-5,
)
# GELU_M3_32: degree 6 in (v - 3.5) on [3, 4], max rel error 3.29e-9, Horner condition <= 1.29
GELU_M3_32 = (
    2.6656776896822375715e-1,
    -6.7012820570300799441e-2,
    1.601147171747978377e-2,
    -3.6571729612883187749e-3,
    8.0243291900354972829e-4,
    -1.7280419089558512085e-4,
    3.5313525771053607909e-5,
)
# GELU_S_32: degree 9 in (v - 0.03125) on [0, mpf('0.0625')], max rel error 1.97e-11, Horner condition <= 1.06
GELU_S_32 = (
    9.7130086497144583231e-1,
    -8.4685669797239963917e-1,
    2.0165604455234374178,
    -7.3640645609483715192,
    3.4939279984049771792e+1,
    -1.990966265958201251e+2,
    1.2865331416384043768e+3,
    -9.347057850499372513e+3,
    9.308390272619657734e+4,
    -8.2204578302219779837e+5,
)

# float32 GELU/GELU_a beyond GELU32N_UMAX: computed in float64 and rounded once (see
# _gate32). M(u) = r G(s) with r = 1/(u + K), s = (u - K) r on u in [0, GELU32_UMAX], from
# tools/derive_coefficients.py (gelu32_fits).
GELU32_K = 3.0
GELU32_UMAX = 20.0
# GELU_G32: degree 10 in (v - 0) on [-1, 17/23], max rel error 3.71e-9, Horner condition <= 3.36
GELU_G32 = (
    1.8275417928229525411,
    -1.276705953513799087,
    5.7656887908436838412e-1,
    -1.1847034455761986301e-1,
    -2.6225850195450887377e-2,
    1.7471423159199984875e-2,
    2.5700378658700148366e-3,
    -2.5922216586860461417e-3,
    -6.1649133284365421654e-4,
    3.3181831736755818292e-4,
    1.3876986563199198343e-4,
)


# GELU/GELU_a for |a x| <= GELU32N_UMAX (float32) or GELU64N_UMAX (float64), in the
# working precision: Phi(-u) =
# exp(-u^2/2) r (H0 + q H(q)) with r = 1/(u + 2) and q = (u - 2)/(u + 2), from
# tools/derive_coefficients.py (gelu32n_fits); H0 = hi + lo.
GELU32N_UMAX = 12.5  # exp(-u^2/2) >= e^-78: normal, with room for the e^(f) correction
# GELU_H32: degree 11 in q on [-1.0, 0.724138], c0 = hi + lo, max rel error 4.47e-9
GELU_H32_C0 = (0.6724079847335815, 1.944851213409038e-08)
GELU_H32 = (
    -0.3314044773578644,
    0.028797408565878868,
    0.03671938553452492,
    -0.00047022182843647897,
    -0.0067343092523515224,
    -0.0019492075080052018,
    0.0008234144188463688,
    0.0008314763545058668,
    0.0001315550325671211,
    -0.00014523013669531792,
    -6.33409435977228e-05,
)
H32_C0_HI, H32_C0_LO = GELU_H32_C0
# float64: the same form for |a x| <= GELU64N_UMAX (exp(-u^2/2) >= e^-162). Up to 26,
# H needed degree 28 (5.8e-18); to 18 degree 26 does (two fmas fewer: gelu float64 3%
# faster on one znver4 core, about 0.1 ulp more error). N(0, 9) data never reach 18;
# beyond it the double-word forms run: on the CPU fast path for those elements alone, up
# to 16 per 256-element block; with more, the block runs the exact kernel, 5x slower
# (12.6 against 2.5 ns/el on one core for x in [18, 26]). Keeping the form for t > 0 to
# 37.5, where it gives x and 1 exactly, cost the bulk loops a second compare (1-1.5%).
GELU64N_UMAX = 18.0
# GELU_H64: degree 26 in q on [-1.0, 0.8], c0 = hi + lo, max rel error 1.09e-17
GELU_H64_C0 = (0.6724080048926824, 4.962777556419479e-17)
GELU_H64 = (
    -0.33140444238878103,
    0.028797360345360002,
    0.0367183609689188,
    -0.00046959683414391856,
    -0.00672490707790767,
    -0.0019511241687853844,
    0.0007851181489691824,
    0.000827199072625018,
    0.00020699185549681787,
    -0.00011569386486043745,
    -0.0001285531462847488,
    -4.6049994838299975e-05,
    9.689658956980138e-06,
    2.1687658752389573e-05,
    1.2535084384940981e-05,
    2.0686871265338144e-06,
    -2.742969985815008e-06,
    -3.0247400303576234e-06,
    -1.5924514977500692e-06,
    -1.2604649603782064e-07,
    6.410577433299376e-07,
    5.5523048032415e-07,
    1.1538031899512409e-07,
    -1.0576002856585271e-07,
    -7.404806601863212e-08,
    -1.440557767862548e-08,
)
H64_C0_HI, H64_C0_LO = GELU_H64_C0
GELU_H64_E, GELU_H64_O = GELU_H64[2::2], GELU_H64[3::2]
H64_1, H64_2 = GELU_H64[0], GELU_H64[1]
INV_SQRT_2PI = 0.39894228040143267794

# The Mills pieces at one length: one Horner pass on coefficients chosen by selects.
GELU_M0P_64, GELU_M1P_64, GELU_M2P_64, GELU_M3P_64 = padded(
    GELU_M0_64, GELU_M1_64, GELU_M2_64, GELU_M3_64)
GELU_M0P_32, GELU_M1P_32, GELU_M2P_32, GELU_M3P_32 = padded(
    GELU_M0_32, GELU_M1_32, GELU_M2_32, GELU_M3_32, dtype=np.float32)


_PAPER = "Kang, Yang & Rocha Neto, IGLU, ECML-PKDD 2026, arXiv:2603.06861"
_HG = "Hendrycks & Gimpel, Gaussian Error Linear Units (GELUs), arXiv:1606.08415 (2016)"


# --------------------------------------------------------------------------- dw helpers
@kernel
def _two_sum(a, b):
    """``a + b = s + e`` exactly (Knuth; no ordering assumption)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


# The kernels below choose between their cases with selects, not branches: every case is
# computed with safe arguments (clamped, so no discarded lane needs inf or NaN it would not
# otherwise meet) and the result picked, so LLVM if-converts the element loops into SIMD
# code (a branch around a polynomial or exp keeps them scalar). The chosen case computes
# exactly what the branch did.
@kernel
def _npdf_exponent(t_hi, t_lo):
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
    y, f = _two_sum(T(-0.5) * s, -l_hi)
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
_K1024_HI, _K1024_LO = 709.782712893384, 2.3747039373786107e-14
_K2048_HI, _K2048_LO = 1419.565425786768, 4.7494078747572215e-14


@kernel
def _npdf_shifted(t_hi, t_lo):
    """(ph, sc) with phi(t) = (ph sc) sc: for t < 0 where phi < e^-700 (|t| > 37.4),
    ph = phi 2^1024 = e^(y + 1024 ln2) and sc = 2^-512, else ph = phi and sc = 1. A value
    phi times a factor is then rounded once, when scaled back last: |t| phi (GELU's
    derivative) and (x/|t|) phi S (GELU_a's value, x/|t| = 1/a) are normal where phi is
    not, and rounding phi into the subnormal range first had cost 28 and 849 ulp."""
    T = type(t_hi)
    under, y, f = _npdf_exponent(t_hi, t_lo)
    d = t_hi < T(0.0) and y < T(-700.0)
    k_hi = T(_K1024_HI) if d else T(0.0)
    y, g = _two_sum(y, k_hi)
    f = f + (g + (T(_K1024_LO) if d else T(0.0)))
    ph = math.exp(y)
    ph = T(0.0) if under else ph + ph * f
    s = T(_TWO_M512) if d else T(1.0)
    return ph, s


@kernel
def _gelu_core(x, t_hi, t_lo):
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
def _gelu_dx_core(t_hi, t_lo):
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
def _gelu32_f(x, t):
    """x Phi(t) as float32 for a float32 x and t = a x formed exactly in float64."""
    ph, m, u = _gate32(t)
    return _gelu32_value(x, t, ph, m)


@kernel
def _gelu32_dx(x, t):
    ph, m, u = _gate32(t)
    return _gelu32_dx_value(x, t, ph, m, u)


# --------------------------------------------------------------------------- native
# |a x| <= GELU32N_UMAX (float32) or GELU64N_UMAX (float64), the bulk of any input, in the
# working precision (float32: 2.1x faster than the float64 form above, which takes the
# tail; float64: 2x faster than the double-word form, which takes the tail): the exponent
# -t^2/2 = y + f with y exact and f from an fma, r = 1/(u + 2) with both roundings (u +
# 2's and the division's) known exactly as res, and the two corrections applied once, to
# first order, as (1 + res + f). The product is ordered so that H0 + hl is never rounded,
# and r exp(y) is rounded once (mul_exp: s (1 + p) 2^k with one fma; r times exp's result
# rounded twice, and gelu_a reached 4.01 ulp at a = 0.001, x = -12158.9). Worst error of
# the value, every float32 with |x| <= 12.5: 3.30 ulp (gelu; gelu_a <= 3.24 at a = 0.001,
# 0.5, 1.702, 3, 1000, every fourth float32), against 0.5 (float32) and 2.4 (float64) for
# the tail forms: the accuracy spent for the speed of issue #22.
@kernel
def _mills_n(u, u_lo):
    """(r, hl, res): M(w)/sqrt(2 pi) = r (1 + res) (H0 + hl) for w = u + u_lo >= 0 (to
    O(eps^2)); u_lo: the low part of |a x| (-0.0 for GELU, which folds away). With
    _exponent_n's y and f, Phi(-w) = r exp(y) (H0 + hl)(1 + res + f)."""
    T = type(u)
    d = u + T(2.0)
    # d + ed = w + 2 exactly. d - 2 is exact for every d >= 2 (2 is a multiple of d's
    # ulp), and u - (d - 2) then by Sterbenz: one form for all u >= 0, where Fast2Sum
    # ordered by size needed a compare and a select (the same bits over 10^6 points per
    # dtype, tiny u and u near 2 included; the bulk loops 2 (float64) and 3 (float32)
    # instructions shorter per vector, 0-3% faster on one core).
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
def _h0(x):
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
    h0 = _h0(x)
    hc = fma(h0 + hl, c, hl)
    q = fma(a, h0, a * hc)
    return x * (q if x < T(0.0) else T(1.0) - q)


@kernel
def _gelu_n_dx_value(x, u, r, hl, res, f, ex):
    """Phi(t) + t phi(t) for t = a x, a >= 0: phi(u) (M(u) - u) for x < 0, 1 - phi(u) (M(u)
    - u) for x >= 0 (u = |t|'s high part, phi M = ex G with G = M/sqrt(2 pi))."""
    T = type(x)
    g = r * (_h0(x) + hl)
    g = fma(g, res, g)
    v = fma(ex, f, ex) * (g - u * T(INV_SQRT_2PI))
    return v if x < T(0.0) else T(1.0) - v


@kernel
def _native(t_hi):
    """|t_hi| within the native form's range (NaN: not)."""
    T = type(t_hi)
    return abs(t_hi) <= (T(GELU32N_UMAX) if is_f32(t_hi) else T(GELU64N_UMAX))


# The exact kernels branch (a select would compute the tail form on every lane: the
# ufuncs, whose loops are scalar, ran 1.7x (float32) and 2.2x (float64) slower that way),
# so they vectorise only where a CPU fast-path block holds tail elements; the bulk below is
# the native branch alone.
@kernel
def _gelu_n(x, u, u_lo):
    """x Phi(a x), the native form; u + u_lo = |a x| (a >= 0)."""
    r, hl, res = _mills_n(u, u_lo)
    y, f = _exponent_n(u, u_lo)
    return _gelu_n_value(x, mul_exp(r, y), hl, res + f)


@kernel
def _gelu_n_dx(x, u, u_lo):
    r, hl, res = _mills_n(u, u_lo)
    y, f = _exponent_n(u, u_lo)
    return _gelu_n_dx_value(x, u, r, hl, res, f, math.exp(y))


# The CPU's bulk: _native holds for every element (exp_normal: exp's bits there). The
# forward's bulk is _gelu_n itself (mul_exp has no range handling to leave out).
@kernel
def _gelu_n_dx_bulk(x, u, u_lo):
    r, hl, res = _mills_n(u, u_lo)
    y, f = _exponent_n(u, u_lo)
    return _gelu_n_dx_value(x, u, r, hl, res, f, exp_normal(y))


@kernel
def _axn_bulk(x, a):
    """(u, u_lo): |a x| = a |x| = u + u_lo, exactly (the fma's error term is exact wherever
    it matters: no 1e30/1e290 guard as in two_prod, so a = 1e31, x = -5e-31 keeps it), for
    finite a x (the bulk). From |x| the low part needs no sign select, as a x's did
    (gelu_a forward and backward 1-5% faster on one znver4 core); the native form takes
    the side from x's sign, the same bits but at t = 0 with x < 0 (a = 0 or a |x|
    underflowing), where Phi(0) is now q, not 1 - q (both within an ulp of 1/2)."""
    w = abs(x)
    u = a * w
    return u, fma(a, w, -u)


@kernel
def _axn(x, a):
    """_axn_bulk's values, and a = 0 at x = +-inf gives 0 (never in the bulk: its a x is
    NaN there; these selects left out of the bulk loops: gelu_a float64's forward 116 ->
    104 instructions per vector)."""
    T = type(x)
    u, u_lo = _axn_bulk(x, a)
    z = a == T(0.0) and math.isinf(x)
    u = T(0.0) if z else u
    u_lo = T(0.0) if z else u_lo
    return u, u_lo


@kernel
def _ax32(x, a):
    """a x in float64 (exact for float32 a and x); a = 0 gives 0 even at x = +-inf."""
    T = type(x)
    t = numba.float64(a) * numba.float64(x)
    D = type(t)
    return D(0.0) if (a == T(0.0) and math.isinf(x)) else t


@kernel
def _gelu32_da(x, a):
    """x^2 phi(a x) as float32, in float64 (the exponent's rounding costs 2^-53 |t^2/2|)."""
    T = type(x)
    t = _ax32(x, a)
    D = type(t)
    xd = numba.float64(x)
    ph = math.exp(D(-0.5) * (t * t) - D(LN_64H))
    r = (xd * ph) * xd
    r = D(0.0) if ph == D(0.0) else r  # |x| = inf with a > 0: the limit 0
    return T(r)


# --------------------------------------------------------------------------- GELU
@kernel
def gelu_f(x):
    T = type(x)
    if _native(x):
        return _gelu_n(x, abs(x), T(-0.0))
    if is_f32(x):
        return _gelu32_f(x, numba.float64(x))
    return _gelu_core(x, x, T(0.0))


@kernel
def gelu_dx(x):
    T = type(x)
    if _native(x):
        return _gelu_n_dx(x, abs(x), T(-0.0))
    if is_f32(x):
        return _gelu32_dx(x, numba.float64(x))
    return _gelu_dx_core(x, T(0.0))


# The bulk: |x| within the native form's range, which alone runs there (the same bits as
# the kernels above: see define's bulk).
@kernel
def _gelu_bulk_domain(x):
    return _native(x)


@kernel
def gelu_f_bulk(x):
    T = type(x)
    return _gelu_n(x, abs(x), T(-0.0))


@kernel
def gelu_dx_bulk(x):
    T = type(x)
    return _gelu_n_dx_bulk(x, abs(x), T(-0.0))


# --------------------------------------------------------------------------- GELU_a
@kernel
def _ax(x, a):
    """a*x as an exact dw pair; a = 0 gives 0 even at x = +-inf (the gate is then 1/2)."""
    T = type(x)
    t_hi, t_lo = two_prod(a, x)  # exact below 1e290 (t_lo is 0 beyond)
    zero = a == T(0.0) and math.isinf(x)
    t_hi = T(0.0) if zero else t_hi
    t_lo = T(0.0) if zero else t_lo
    return t_hi, t_lo


@kernel
def gelu_a_f(x, a):
    u, u_lo = _axn(x, a)
    if _native(u):
        return _gelu_n(x, u, u_lo)
    if is_f32(x):
        return _gelu32_f(x, _ax32(x, a))
    t_hi, t_lo = _ax(x, a)
    return _gelu_core(x, t_hi, t_lo)


@kernel
def gelu_a_dx(x, a):
    u, u_lo = _axn(x, a)
    if _native(u):
        return _gelu_n_dx(x, u, u_lo)
    if is_f32(x):
        return _gelu32_dx(x, _ax32(x, a))
    t_hi, t_lo = _ax(x, a)
    return _gelu_dx_core(t_hi, t_lo)


# The bulk of GELU_a: a x (rounded: |a x| is _axn's u) within the native range (a = 0 at
# x = +-inf gives NaN here: not bulk), as for GELU.
@kernel
def _gelu_a_bulk_domain(x, a):
    return _native(a * x)


@kernel
def gelu_a_f_bulk(x, a):
    u, u_lo = _axn_bulk(x, a)
    return _gelu_n(x, u, u_lo)


@kernel
def gelu_a_dx_bulk(x, a):
    u, u_lo = _axn_bulk(x, a)
    return _gelu_n_dx_bulk(x, u, u_lo)


@kernel
def gelu_a_da_bulk(x, a):
    T = type(x)
    if is_f32(x):
        t = numba.float64(a) * numba.float64(x)
        xd = numba.float64(x)
        ph = exp_normal(numba.float64(-0.5) * (t * t) - numba.float64(LN_64H))
        return T((xd * ph) * xd)
    return gelu_a_da(x, a)


@kernel
def _shift_ln2(x, y, f):
    """(x', y', f') with x^2 e^(y+f) = x'^2 e^(y'+f'): x' = x 2^-512j and y' = y + 1024 j
    ln2 for j = 0, 1, 2 chosen so that y' >= -700 (y >= -2049 here)."""
    T = type(x)
    d1 = y < T(-700.0)
    d2 = y < T(-1409.0)
    k_hi = T(_K2048_HI) if d2 else (T(_K1024_HI) if d1 else T(0.0))
    k_lo = T(_K2048_LO) if d2 else (T(_K1024_LO) if d1 else T(0.0))
    y2, g = _two_sum(y, k_hi)
    s1 = T(_TWO_M512) if d1 else T(1.0)
    s2 = T(_TWO_M512) if d2 else T(1.0)
    return (x * s1) * s2, y2, f + (g + k_lo)


@kernel
def gelu_a_da(x, a):
    T = type(x)
    if is_f32(x):
        return _gelu32_da(x, a)
    t_hi, t_lo = _ax(x, a)
    under, y, f = _npdf_exponent(t_hi, t_lo)
    # x^2 phi can be a normal number where phi is subnormal or zero (|a x| > 37.5 and
    # |x| large: x^2 times the subnormal phi was 24,011 ulp off, and 0 below e^-745):
    # x^2 e^y = (x 2^-512j)^2 e^(y + 1024j ln2), j = 0, 1, 2 (y >= -2049 for |t| <= 64)
    # so that the exponent is >= -700. x 2^-512 is exact wherever the result
    # is not zero, and (x m) x rounds once into the subnormal range.
    x, y, f = _shift_ln2(x, y, f)
    m = exp_dw(y, f)
    r = (x * m) * x  # x^2 alone may overflow where x^2 phi does not
    return T(0.0) if under else r  # |x| = inf with a > 0: the limit 0


# --------------------------------------------------------------------------- GELU tanh
@kernel
def _tanh_arg(x):
    """2u = k1 x + k3 x^3 (u = sqrt(2/pi)(x + 0.044715 x^3)) as an unnormalised dw pair."""
    T = type(x)
    if is_f32(x):
        k1h = T(K1_32H)
        k1l = T(K1_32L)
        k3h = T(K3_32H)
        k3l = T(K3_32L)
    else:
        k1h = T(K1_64H)
        k1l = T(K1_64L)
        k3h = T(K3_64H)
        k3l = T(K3_64L)
    p2, e2 = two_prod(x, x)
    p3, e3 = two_prod(p2, x)
    e3 = e3 + e2 * x
    q, f = two_prod(p3, k3h)
    f = f + (p3 * k3l + e3 * k3h)
    r, g = two_prod(x, k1h)
    g = g + x * k1l
    s, h = _two_sum(q, r)
    return s, h + (f + g)


@kernel
def _gate_of(s, m):
    """(sigmoid(2u), m, r = 1/(1 + m)) from m = exp(-|2u|) (2u ~ s): sigmoid(1 - sigmoid) =
    m r^2."""
    T = type(s)
    r = T(1.0) / (T(1.0) + m)
    g = m * r if s < T(0.0) else r
    return g, m, r


@kernel
def _gelu_tanh_value(x, s, m):
    """x sigmoid(2u) from m = exp(-|2u|) (2u ~ s): x r for s >= 0, r = 1/(1 + m); for s < 0
    in float32 x m - (x m) t with t = m r = m/(1 + m), one fma, so that only m's rounding
    and the fma's reach the value (x (m r), rounded three times and 1 + m once, reached
    4.14 ulp at x = -1.832; m/(1 + m) still 4.10 at x = -3.887)."""
    T = type(x)
    r = T(1.0) / (T(1.0) + m)
    if not is_f32(x):  # float64 keeps x (m r): 1.72 ulp at worst, and 14% faster
        return x * (m * r if s < T(0.0) else r)
    # Below m = 2^-30 the correction is under 2^-30 of x m, and x m t would go subnormal
    # (from x ~ -6.3: a microcode assist per lane, 1.5x the time on N(0, 9) data).
    t = m * r if m > T(9.313225746154785e-10) else T(0.0)
    v = fma(x, m, -((x * m) * t))
    return v if s < T(0.0) else x * r


@kernel
def _d2u(x):
    """d(2u)/dx = k1 + 3 k3 x^2."""
    T = type(x)
    return T(K1_64H) + T(THREE_K3) * (x * x)


@kernel
def _tanh_gate(x):
    """(s, m, sc): 2u ~ s, m = exp(-|2u|), the gate sigmoid(2u) sc (exp_scaled: where
    exp(2u) nears the subnormal range, 2u < -80 float32 / -700 float64, m is kept 2^64
    larger and the value scaled back last, so it is rounded once: x times a subnormal gate
    was 20 ulp off in float64, the derivative 1,072, measured in subnormal spacings across
    the underflow; sc = 1 for x > 0)."""
    T = type(x)
    s, h = _tanh_arg(x)
    h = h if abs(s) < T(1024.0) else T(0.0)  # beyond, m is 0 (h may be inf/NaN: x^3 overflow)
    neg = s < T(0.0)
    h_neg = h if neg else -h
    m, sc = exp_scaled(-abs(s), h_neg)
    # (x > 0: the gate is 1/(1 + m) = 1 in the tail, where only the true m may enter)
    m = m if neg else m * sc
    sc = sc if neg else T(1.0)
    return s, m, sc


@kernel
def gelu_tanh_f(x):
    T = type(x)
    s, m, sc = _tanh_gate(x)
    if m == T(0.0) and s < T(0.0):  # x = -inf: limit 0, not -inf*0
        return T(-0.0)
    return _gelu_tanh_value(x, s, m) * sc


@kernel
def gelu_tanh_dx(x):
    T = type(x)
    s, m, sc = _tanh_gate(x)
    sig, m, r = _gate_of(s, m)
    q = m * r * r
    if q == T(0.0):  # |x| = inf (or the gate saturated): the second term is 0
        return sig * sc
    return (sig + (x * _d2u(x)) * q) * sc


# The bulk (|x| <= 21 float64, 9.6 float32: |2u| <= 694 / 79, short of exp_scaled's tail,
# so exp(-|2u|) is normal and the guards above are off): exp_normal instead of exp, the
# same bits (see define's bulk).
# One znver4 core, float64 forward 2.48 -> 1.90 ns/el, backward 2.62 -> 2.29 (taking the
# exact kernels' guards along cost 5-8%, so only _gate_of and _d2u are shared).
@kernel
def _gelu_tanh_bulk_domain(x):
    T = type(x)
    return abs(x) <= (T(9.6) if is_f32(x) else T(21.0))


@kernel
def _tanh_gate_bulk(x):
    T = type(x)
    s, h = _tanh_arg(x)
    m = exp_normal(-abs(s))
    mh = m + m * h if s < T(0.0) else m - m * h
    return s, mh


@kernel
def gelu_tanh_f_bulk(x):
    s, m = _tanh_gate_bulk(x)
    return _gelu_tanh_value(x, s, m)


@kernel
def gelu_tanh_dx_bulk(x):
    s, m = _tanh_gate_bulk(x)
    sig, m, r = _gate_of(s, m)
    return sig + (x * _d2u(x)) * (m * r * r)


# --------------------------------------------------------------------------- references
def _ncdf(mp, t):
    return mp.erfc(-t / mp.sqrt(2)) / 2


def _npdf(mp, t):
    return mp.exp(-t * t / 2) / mp.sqrt(2 * mp.pi)


def _ref_gelu_a(mp, x, a):
    if mp.isinf(x):
        if a == 0:
            return x / 2
        return x if x > 0 else mp.zero
    return x * _ncdf(mp, a * x)


def _ref_gelu_a_dx(mp, x, a):
    if mp.isinf(x):
        if a == 0:
            return mp.mpf(1) / 2
        return mp.one if x > 0 else mp.zero
    t = a * x
    return _ncdf(mp, t) + t * _npdf(mp, t)


def _ref_gelu_a_scale_dx(mp, x, a):
    if mp.isinf(x):
        return _ref_gelu_a_dx(mp, x, a)
    t = a * x
    return max(_ncdf(mp, t), abs(t) * _npdf(mp, t))


def _ref_gelu_a_da(mp, x, a):
    if mp.isinf(x):
        return mp.inf if a == 0 else mp.zero
    return x * x * _npdf(mp, a * x)


_TANH_C = "0.044715"


def _ref_2u(mp, x):
    return 2 * mp.sqrt(2 / mp.pi) * (x + mp.mpf(_TANH_C) * x**3)


def _ref_sig(mp, y):
    if y < 0:
        e = mp.exp(y)
        return e / (1 + e)
    return 1 / (1 + mp.exp(-y))


def _ref_sig_prime(mp, y):
    # sigmoid(1 - sigmoid) = e/(1+e)^2 with e = exp(-|y|): no 1 - s cancellation.
    e = mp.exp(-abs(y))
    return e / (1 + e) ** 2


def _ref_gelu_tanh(mp, x):
    if mp.isinf(x):
        return x if x > 0 else mp.zero
    return x * _ref_sig(mp, _ref_2u(mp, x))


def _ref_gelu_tanh_terms(mp, x):
    y = _ref_2u(mp, x)
    dy = 2 * mp.sqrt(2 / mp.pi) * (1 + 3 * mp.mpf(_TANH_C) * x * x)
    return _ref_sig(mp, y), x * dy * _ref_sig_prime(mp, y)


def _ref_gelu_tanh_dx(mp, x):
    if mp.isinf(x):
        return mp.one if x > 0 else mp.zero
    a, b = _ref_gelu_tanh_terms(mp, x)
    return a + b


def _ref_gelu_tanh_scale(mp, x):
    if mp.isinf(x):
        return _ref_gelu_tanh_dx(mp, x)
    a, b = _ref_gelu_tanh_terms(mp, x)
    return max(abs(a), abs(b))


_TAIL_NOTE = (
    "The gate is evaluated as Phi(-|t|) = phi(t) M(|t|), M the Mills ratio, and "
    "Phi(t) = 1 - Phi(-t) for t >= 0, with t^2 split exactly in phi's exponent (rounding "
    "it alone would cost ~t^2/2 ulp in the x << 0 tail). For |t| <= 12.5 (float32) or 18 "
    "(float64) M(u)/sqrt(2 pi) = H(q)/(u + 2), q = (u - 2)/(u + 2), one polynomial in the "
    "working precision (<= 3.3 ulp measured); beyond, float32 computes in float64 and "
    "float64 with double-word steps and piecewise polynomials, so the tail stays within a "
    "few ulp down to underflow. No libm erfc: CPU and GPU give the same tail. "
    "Limits: 0 at -inf, x at +inf; NaN propagates."
)

define(
    "gelu",
    paper_table=True,
    torch="gelu",
    jax="gelu",
    summary="Gaussian Error Linear Unit (exact): the input weighted by the normal CDF.",
    formula=r"\mathrm{GELU}(x) = x\,\Phi(x) = \frac{x}{2}\,\mathrm{erfc}\!\left(-\frac{x}{\sqrt{2}}\right)",
    derivative_formula=r"\frac{d}{dx}\mathrm{GELU}(x) = \Phi(x) + x\,\varphi(x),\quad"
    r"\varphi(x) = \frac{e^{-x^2/2}}{\sqrt{2\pi}}",
    f=gelu_f,
    dx=gelu_dx,
    bulk={"f": gelu_f_bulk, "dx": gelu_dx_bulk},
    bulk_domain=_gelu_bulk_domain,
    ref=lambda mp, x: _ref_gelu_a(mp, x, mp.one),
    ref_dx=lambda mp, x: _ref_gelu_a_dx(mp, x, mp.one),
    scales={"dx": lambda mp, x: _ref_gelu_a_scale_dx(mp, x, mp.one)},
    special_points=(GELU_DX_ROOT,),
    notes=(
        _TAIL_NOTE + " Matches torch.nn.functional.gelu(approximate='none'). The derivative "
        "crosses zero at x = -0.75179152469356...; near it the error is measured against "
        "the larger of its two terms. GELU is smooth: no kink conventions."
    ),
    references=(_HG, _PAPER + ", eq. 4"),
    example=(
        ">>> iglu_np.gelu(np.array([-1.0, 0.0, 1.0])).round(6)\n"
        "array([-0.158655,  0.      ,  0.841345])\n"
        ">>> float(iglu_np.gelu(-30.0))  # 0.5*x*(1 + erf(x/sqrt2)) would give -0.0\n"
        "-1.472014178144456e-196"
    ),
)

_A = Param(
    "a",
    1.0,
    "Gate sharpness: the gate is the CDF of N(0, 1/a^2). a = 1 is GELU, a = 0 gives x/2, "
    "a -> inf tends to ReLU.",
    lo=0.0,
    test_values=(1e-3, 0.25, 0.5, 0.61, 1.702, 2.0, 10.0, 1e3),
)

define(
    "gelu_a",
    summary="Parametric GELU of the IGLU paper: the input gated by the normal CDF of a*x.",
    formula=r"\mathrm{GELU}_a(x) = x\,\Phi(a x)",
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \Phi(ax) + a x\,\varphi(ax),\quad"
        r"\frac{\partial f}{\partial a} = x^2\,\varphi(ax)"
    ),
    params=[_A],
    f=gelu_a_f,
    dx=gelu_a_dx,
    bulk={"f": gelu_a_f_bulk, "dx": gelu_a_dx_bulk, "a": gelu_a_da_bulk},
    bulk_domain=_gelu_a_bulk_domain,
    dparams={"a": gelu_a_da},
    ref=_ref_gelu_a,
    ref_dx=_ref_gelu_a_dx,
    ref_dparams={"a": _ref_gelu_a_da},
    scales={"dx": _ref_gelu_a_scale_dx},
    special_points=(lambda p: GELU_DX_ROOT / p["a"] if p["a"] > 0 else None, 0.0),
    notes=(
        _TAIL_NOTE + " The product a*x is formed exactly (two_prod) before it enters the gate. "
        "a = 0 is allowed and gives x/2 (also at x = +-inf), derivative 1/2 and "
        "d/da = x^2/sqrt(2 pi). The x-derivative crosses zero at x = -0.75179.../a."
    ),
    references=(_PAPER + ", eq. 4", _HG),
    example=(
        ">>> iglu_np.gelu_a(np.array([-1.0, 0.0, 1.0]), a=2.0).round(6)\n"
        "array([-0.02275,  0.     ,  0.97725])"
    ),
)

define(
    "gelu_tanh",
    paper_table=True,
    summary="GELU with PyTorch's tanh approximation of the gate (approximate='tanh').",
    formula=(
        r"f(x) = \frac{x}{2}\left(1 + \tanh u\right) = x\,\sigma(2u),\quad "
        r"u = \sqrt{2/\pi}\,(x + 0.044715\,x^3)"
    ),
    derivative_formula=(
        r"\frac{df}{dx} = \sigma(2u) + 2x\,u'\,\sigma(2u)\bigl(1-\sigma(2u)\bigr),\quad "
        r"u' = \sqrt{2/\pi}\,(1 + 3\cdot 0.044715\,x^2)"
    ),
    f=gelu_tanh_f,
    dx=gelu_tanh_dx,
    bulk={"f": gelu_tanh_f_bulk, "dx": gelu_tanh_dx_bulk},
    bulk_domain=_gelu_tanh_bulk_domain,
    ref=_ref_gelu_tanh,
    ref_dx=_ref_gelu_tanh_dx,
    scales={"dx": _ref_gelu_tanh_scale},
    special_points=(GELU_TANH_DX_ROOT,),
    notes=(
        "Computed as x*sigmoid(2u): (1 + tanh u)/2 cancels to nothing for x << 0, where the "
        "gate is ~exp(2u) with 2u ~ -0.0714 x^3. exp has condition |2u| (up to ~745), so 2u "
        "is formed as a double-word pair (exact x^3, hi+lo constants 2 sqrt(2/pi) and "
        "2 sqrt(2/pi) 0.044715) and exp(2u) corrected by (1 + lo). sigma(1 - sigma) in the "
        "derivative is m/(1+m)^2 with m = exp(-|2u|). The constants are the exact decimal "
        "0.044715 and sqrt(2/pi) (PyTorch rounds them to the tensor dtype). The derivative "
        "crosses zero at x = -0.75246142207...; limits 0 at -inf, x at +inf."
    ),
    references=(_HG, "PyTorch torch.nn.GELU(approximate='tanh')"),
    example=(
        ">>> iglu_np.gelu_tanh(np.array([-1.0, 0.0, 1.0])).round(6)\n"
        "array([-0.158808,  0.      ,  0.841192])"
    ),
)
