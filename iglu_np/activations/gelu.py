"""GELU family: exact GELU x*Phi(x), PyTorch's tanh approximation, and the IGLU paper's
parametric GELU_a(x) = x*Phi(a x) (Hendrycks & Gimpel 2016; Kang, Yang & Rocha Neto 2026).

The hard part is the x << 0 tail. Phi(x) = erfc(-x/sqrt2)/2 and phi(x) = exp(-x^2/2)/sqrt(2 pi)
have condition number ~x^2 there, so the *arguments* -x/sqrt2 and x^2/2 (and, for gelu_tanh,
the cubic 2u = k1 x + k3 x^3 fed to exp) are carried as double-word pairs; the low word
enters through a first-order correction (erfc(z + e) = erfc(z) - e (2/sqrt pi) exp(-z^2),
exp(y + e) = exp(y)(1 + e)). Without it the error grows to ~x^2/2 ulp (~140 ulp at x = -17
in float64). Numba's math.erfc (C erfc/erfcf) measures <= 2.3 ulp in both dtypes on its own.
"""
import math
from decimal import Decimal, getcontext
import struct

from .._math import is_f32, two_prod
from .._spec import Param, define, kernel

getcontext().prec = 60


def _f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def _dw(digits: str):
    """(hi64, lo64, hi32, lo32): a constant split into hi + lo pairs for both dtypes."""
    d = Decimal(digits)
    hi64 = float(d)
    hi32 = _f32(hi64)
    return hi64, float(d - Decimal(hi64)), hi32, _f32(float(d - Decimal(hi32)))


# 1/sqrt(2), log(sqrt(2 pi)), and gelu_tanh's 2*sqrt(2/pi) and 2*sqrt(2/pi)*0.044715.
_R2 = _dw("0.70710678118654752440084436210484903928483593768847")
_LNS2PI = _dw("0.91893853320467274178032973640561763986139747363778")
_K1 = _dw("1.5957691216057307117597842397375274739034345246597")
_K3 = _dw("0.07135481627260024877633875227986354099559207477016")
R2_64H, R2_64L, R2_32H, R2_32L = _R2
LN_64H, LN_64L, LN_32H, LN_32L = _LNS2PI
K1_64H, K1_64L, K1_32H, K1_32L = _K1
K3_64H, K3_64L, K3_32H, K3_32L = _K3
TWO_RSQRTPI = 1.1283791670955125738961589031215451716881012586580  # 2/sqrt(pi)
THREE_K3 = 0.21406444881780074632901625683959062298677622431048  # d(2u)/dx = k1 + 3 k3 x^2

# Roots of the x-derivatives (they cross zero once, on the negative side).
GELU_DX_ROOT = -0.75179152469356445745790494677952403966447115342345
GELU_TANH_DX_ROOT = -0.75246142207101625848795444328891609060539217803763

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


@kernel
def _ncdf_dw(t_hi, t_lo):
    """Phi(t_hi + t_lo), the standard normal CDF, for a dw argument."""
    T = type(t_hi)
    if is_f32(t_hi):
        c_hi = T(R2_32H)
        c_lo = T(R2_32L)
    else:
        c_hi = T(R2_64H)
        c_lo = T(R2_64L)
    # z + e = t/sqrt2 beyond working precision: erfc(-z) alone would cost ~z^2 ulp.
    z, e = two_prod(t_hi, c_hi)
    p = math.erfc(-z)
    if abs(z) < T(64.0):  # beyond, erfc is saturated (and t_hi*c_lo may be inf)
        e = e + (t_hi * c_lo + t_lo * c_hi)
        p = p + e * T(TWO_RSQRTPI) * math.exp(-z * z)
    return T(0.5) * p


@kernel
def _npdf_dw(t_hi, t_lo):
    """phi(t_hi + t_lo) = exp(-t^2/2 - log sqrt(2 pi)), exponent as a dw pair."""
    T = type(t_hi)
    if abs(t_hi) > T(64.0):  # underflowed; NaN falls through and propagates
        return T(0.0)
    if is_f32(t_hi):
        l_hi = T(LN_32H)
        l_lo = T(LN_32L)
    else:
        l_hi = T(LN_64H)
        l_lo = T(LN_64L)
    s, e = two_prod(t_hi, t_hi)
    e = e + T(2.0) * t_hi * t_lo
    # The normalising constant goes into the exponent: one rounding fewer than exp()*c.
    y, f = _two_sum(T(-0.5) * s, -l_hi)
    f = f + (T(-0.5) * e - l_lo)
    r = math.exp(y)
    return r + r * f


@kernel
def _gelu_core(x, t_hi, t_lo):
    """x * Phi(t)."""
    T = type(x)
    p = _ncdf_dw(t_hi, t_lo)
    if p == T(0.0):  # x = -inf would give -inf*0; the limit is 0 (from below)
        return T(-0.0)
    return x * p


@kernel
def _gelu_dx_core(t_hi, t_lo):
    """Phi(t) + t phi(t)."""
    T = type(t_hi)
    ph = _npdf_dw(t_hi, t_lo)
    q = T(0.0)
    if ph != T(0.0):  # t = +-inf: t*phi -> 0
        q = t_hi * ph
    return _ncdf_dw(t_hi, t_lo) + q


# --------------------------------------------------------------------------- GELU
@kernel
def gelu_f(x):
    T = type(x)
    return _gelu_core(x, x, T(0.0))


@kernel
def gelu_dx(x):
    T = type(x)
    return _gelu_dx_core(x, T(0.0))


# --------------------------------------------------------------------------- GELU_a
@kernel
def _ax(x, a):
    """a*x as an exact dw pair; a = 0 gives 0 even at x = +-inf (the gate is then 1/2)."""
    T = type(x)
    t_hi, t_lo = two_prod(a, x)
    if a == T(0.0) and math.isinf(x):
        t_hi = T(0.0)
        t_lo = T(0.0)
    return t_hi, t_lo


@kernel
def gelu_a_f(x, a):
    t_hi, t_lo = _ax(x, a)
    return _gelu_core(x, t_hi, t_lo)


@kernel
def gelu_a_dx(x, a):
    t_hi, t_lo = _ax(x, a)
    return _gelu_dx_core(t_hi, t_lo)


@kernel
def gelu_a_da(x, a):
    T = type(x)
    t_hi, t_lo = _ax(x, a)
    ph = _npdf_dw(t_hi, t_lo)
    if ph == T(0.0):  # |x| = inf with a > 0: x^2 phi(ax) -> 0, not inf*0
        return T(0.0)
    # (x phi) x: x^2 alone may overflow where x^2 phi does not.
    return (x * ph) * x


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
def _tanh_gate(x):
    """(sigmoid(2u), m = exp(-|2u|), 1/(1 + m)): sigmoid(1 - sigmoid) = m/(1+m)^2."""
    T = type(x)
    s, h = _tanh_arg(x)
    m = math.exp(-abs(s))
    if abs(s) < T(1024.0):  # beyond, m is 0 (and h may be inf/NaN from x^3 overflow)
        if s < T(0.0):
            m = m + m * h
        else:
            m = m - m * h
    r = T(1.0) / (T(1.0) + m)
    if s < T(0.0):
        return m * r, m, r
    return r, m, r


@kernel
def gelu_tanh_f(x):
    T = type(x)
    sig, m, r = _tanh_gate(x)
    if sig == T(0.0):  # x = -inf: limit 0, not -inf*0
        return T(-0.0)
    return x * sig


@kernel
def gelu_tanh_dx(x):
    T = type(x)
    sig, m, r = _tanh_gate(x)
    q = m * r * r
    if q == T(0.0):  # |x| = inf (or the gate saturated): the second term is 0
        return sig
    d = T(K1_64H) + T(THREE_K3) * (x * x)
    return sig + (x * d) * q


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
    "For x << 0 the gate Phi(x) = erfc(-x/sqrt2)/2 is evaluated with -x/sqrt2 carried as a "
    "double-word pair (exact product with a hi+lo 1/sqrt2) and corrected to first order, "
    "erfc(z + e) = erfc(z) - e (2/sqrt pi) exp(-z^2); phi(x) uses an exactly split x^2 and "
    "log sqrt(2 pi) inside the exponent. Otherwise rounding the argument alone would cost "
    "~x^2/2 ulp in the tail. Limits: 0 at -inf, x at +inf; NaN propagates."
)

define(
    "gelu",
    summary="Gaussian Error Linear Unit (exact): the input weighted by the normal CDF.",
    formula=r"\mathrm{GELU}(x) = x\,\Phi(x) = \frac{x}{2}\,\mathrm{erfc}\!\left(-\frac{x}{\sqrt{2}}\right)",
    derivative_formula=r"\frac{d}{dx}\mathrm{GELU}(x) = \Phi(x) + x\,\varphi(x),\quad"
    r"\varphi(x) = \frac{e^{-x^2/2}}{\sqrt{2\pi}}",
    f=gelu_f,
    dx=gelu_dx,
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
        "-1.4720141781444563e-196"
    ),
)

_A = Param(
    "a",
    1.0,
    "Gate sharpness: the gate is the CDF of N(0, 1/a^2). a = 1 is GELU, a = 0 gives x/2, "
    "a -> inf tends to ReLU.",
    lo=0.0,
    symbol="a",
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
