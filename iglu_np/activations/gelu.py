"""GELU x*Phi(x) and the IGLU paper's parametric GELU_a(x) = x*Phi(a x) (Hendrycks & Gimpel
2016; Kang, Yang & Rocha Neto 2026). The normal CDF machinery they share, accurate down to
underflow, is in _normal_cdf.py; PyTorch's tanh approximation is gelu_tanh.py.
"""

import math

from .._math import _TWO_M512, exp_dw, exp_normal, is_f32, two_prod
from .._math import NUMBA as numba  # numba.float64(x): a cast, rebound to numba's own
from .._spec import Param, define, kernel
from ._double_word import two_sum
from ._normal_cdf import (
    K1024_HI,
    K1024_LO,
    K2048_HI,
    K2048_LO,
    LN_64H,
    ax_in_float64,
    ax_native,
    ax_native_bulk,
    gelu32_da,
    gelu32_dx,
    gelu32_f,
    gelu_core,
    gelu_dx_core,
    gelu_native,
    gelu_native_dx,
    gelu_native_dx_bulk,
    in_native_range,
    npdf_exponent,
)

# The root of GELU's x-derivative (it crosses zero once, on the negative side).
GELU_DX_ROOT = -0.75179152469356445745790494677952403966447115342345

_PAPER = "Kang, Yang & Rocha Neto, IGLU, ECML-PKDD 2026, arXiv:2603.06861"
_HG = "Hendrycks & Gimpel, Gaussian Error Linear Units (GELUs), arXiv:1606.08415 (2016)"


# --------------------------------------------------------------------------- GELU
@kernel
def gelu_f(x):
    T = type(x)
    if in_native_range(x):
        return gelu_native(x, abs(x), T(-0.0))
    if is_f32(x):
        return gelu32_f(x, numba.float64(x))
    return gelu_core(x, x, T(0.0))


@kernel
def gelu_dx(x):
    T = type(x)
    if in_native_range(x):
        return gelu_native_dx(x, abs(x), T(-0.0))
    if is_f32(x):
        return gelu32_dx(x, numba.float64(x))
    return gelu_dx_core(x, T(0.0))


# The bulk: |x| within the native form's range, which alone runs there (the same bits as
# the kernels above: see define's bulk).
@kernel
def _gelu_bulk_domain(x):
    return in_native_range(x)


@kernel
def gelu_f_bulk(x):
    T = type(x)
    return gelu_native(x, abs(x), T(-0.0))


@kernel
def gelu_dx_bulk(x):
    T = type(x)
    return gelu_native_dx_bulk(x, abs(x), T(-0.0))


# --------------------------------------------------------------------------- GELU_a
@kernel
def _ax_dw(x, a):
    """a*x as an exact dw pair; a = 0 gives 0 even at x = +-inf (the gate is then 1/2)."""
    T = type(x)
    t_hi, t_lo = two_prod(a, x)  # exact below 1e290 (t_lo is 0 beyond)
    zero = a == T(0.0) and math.isinf(x)
    t_hi = T(0.0) if zero else t_hi
    t_lo = T(0.0) if zero else t_lo
    return t_hi, t_lo


@kernel
def gelu_a_f(x, a):
    u, u_lo = ax_native(x, a)
    if in_native_range(u):
        return gelu_native(x, u, u_lo)
    if is_f32(x):
        return gelu32_f(x, ax_in_float64(x, a))
    t_hi, t_lo = _ax_dw(x, a)
    return gelu_core(x, t_hi, t_lo)


@kernel
def gelu_a_dx(x, a):
    u, u_lo = ax_native(x, a)
    if in_native_range(u):
        return gelu_native_dx(x, u, u_lo)
    if is_f32(x):
        return gelu32_dx(x, ax_in_float64(x, a))
    t_hi, t_lo = _ax_dw(x, a)
    return gelu_dx_core(t_hi, t_lo)


# The bulk of GELU_a: a x (rounded: |a x| is ax_native's u) within the native range (a = 0 at
# x = +-inf gives NaN here: not bulk), as for GELU.
@kernel
def _gelu_a_bulk_domain(x, a):
    return in_native_range(a * x)


@kernel
def gelu_a_f_bulk(x, a):
    u, u_lo = ax_native_bulk(x, a)
    return gelu_native(x, u, u_lo)


@kernel
def gelu_a_dx_bulk(x, a):
    u, u_lo = ax_native_bulk(x, a)
    return gelu_native_dx_bulk(x, u, u_lo)


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
    k_hi = T(K2048_HI) if d2 else (T(K1024_HI) if d1 else T(0.0))
    k_lo = T(K2048_LO) if d2 else (T(K1024_LO) if d1 else T(0.0))
    y2, g = two_sum(y, k_hi)
    s1 = T(_TWO_M512) if d1 else T(1.0)
    s2 = T(_TWO_M512) if d2 else T(1.0)
    return (x * s1) * s2, y2, f + (g + k_lo)


@kernel
def gelu_a_da(x, a):
    T = type(x)
    if is_f32(x):
        return gelu32_da(x, a)
    t_hi, t_lo = _ax_dw(x, a)
    under, y, f = npdf_exponent(t_hi, t_lo)
    # x^2 phi can be a normal number where phi is subnormal or zero (|a x| > 37.5 and
    # |x| large: x^2 times a subnormal phi would carry phi's absolute rounding error, and
    # give 0 below e^-745):
    # x^2 e^y = (x 2^-512j)^2 e^(y + 1024j ln2), j = 0, 1, 2 (y >= -2049 for |t| <= 64)
    # so that the exponent is >= -700. x 2^-512 is exact wherever the result
    # is not zero, and (x m) x rounds once into the subnormal range.
    x, y, f = _shift_ln2(x, y, f)
    m = exp_dw(y, f)
    r = (x * m) * x  # x^2 alone may overflow where x^2 phi does not
    return T(0.0) if under else r  # |x| = inf with a > 0: the limit 0


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


_TAIL_NOTE = (
    "The gate is evaluated as Phi(-|t|) = phi(t) M(|t|), M the Mills ratio, and "
    "Phi(t) = 1 - Phi(-t) for t >= 0, with t^2 split exactly in phi's exponent (rounding "
    "it alone would cost ~t^2/2 ulp in the x << 0 tail). For |t| <= 12.5 (float32) or 18 "
    "(float64) M(u)/sqrt(2 pi) = H(q)/(u + 2), q = (u - 2)/(u + 2), one polynomial in the "
    "working precision; beyond, float32 computes in float64 and "
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
    same_as=("gelu", {"a": 1.0}),
    dparams={"a": gelu_a_da},
    ref=_ref_gelu_a,
    ref_dx=_ref_gelu_a_dx,
    ref_dparams={"a": _ref_gelu_a_da},
    scales={"dx": _ref_gelu_a_scale_dx},
    special_points=(lambda p: GELU_DX_ROOT / p["a"] if p["a"] > 0 else None, 0.0),
    notes=(
        _TAIL_NOTE + " The product a*x is formed exactly (two_prod) before it enters the gate. "
        "At a = 1 the kernels are GELU's, bit for bit (a x = x exactly, with a zero low "
        "part). a = 0 is allowed and gives x/2 (also at x = +-inf), derivative 1/2 and "
        "d/da = x^2/sqrt(2 pi). The x-derivative crosses zero at x = -0.75179.../a."
    ),
    references=(_PAPER + ", eq. 4", _HG),
    example=(
        ">>> iglu_np.gelu_a(np.array([-1.0, 0.0, 1.0]), a=2.0).round(6)\n"
        "array([-0.02275,  0.     ,  0.97725])"
    ),
)
