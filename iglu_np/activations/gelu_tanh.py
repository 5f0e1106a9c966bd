"""GELU with PyTorch's tanh approximation of the gate, x sigmoid(2u), u = sqrt(2/pi)(x +
0.044715 x^3). Its cubic 2u is carried as a double-word pair: exp(2u) has condition |2u|
(up to ~745) in the x << 0 tail.
"""

from .._math import exp_normal, exp_scaled, fma, is_f32
from .._spec import define, kernel
from ._double_word import split_constant, two_sum
from .gelu import _HG

# 2*sqrt(2/pi) and 2*sqrt(2/pi)*0.044715 as hi + lo pairs.
_K1 = split_constant("1.5957691216057307117597842397375274739034345246597")
_K3 = split_constant("0.07135481627260024877633875227986354099559207477016")
K1_64H, K1_64L, K1_32H, K1_32L = _K1
K3_64H, K3_64L, K3_32H, K3_32L = _K3
THREE_K3 = 0.21406444881780074632901625683959062298677622431048  # d(2u)/dx = k1 + 3 k3 x^2

# The root of the x-derivative (it crosses zero once, on the negative side).
GELU_TANH_DX_ROOT = -0.75246142207101625848795444328891609060539217803763


# --------------------------------------------------------------------------- GELU tanh
@kernel
def _tanh_arg(x):
    """2u = k1 x + k3 x^3 (u = sqrt(2/pi)(x + 0.044715 x^3)) as an unnormalised dw pair,
    as x c with c = k1 + k3 x^2: x^2 and k3 x^2 are exact pairs (fma), k1 + k3 x^2 a two_sum,
    the low parts (and the constants' lo halves) summed into c_lo, and x (c + c_lo) one
    product pair plus x c_lo. The terms left out (k3_lo e2, the roundings of c_lo's sum)
    are below 2^-46 of 2u: exp(2u) with |2u| < 128 sees under 2^-39 of them."""
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
    p2 = x * x
    e2 = fma(x, x, -p2)
    t = k3h * p2
    te = fma(k3h, p2, -t)
    c, ce = two_sum(k1h, t)
    c_lo = ce + (te + fma(k3h, e2, fma(k3l, p2, k1l)))
    s = x * c
    return s, fma(x, c_lo, fma(x, c, -s))


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
    and the fma's reach the value (x (m r), rounded three times and 1 + m once, and
    x m/(1 + m) both exceed the 4 ulp bound at some float32 x in [-4, -1])."""
    T = type(x)
    r = T(1.0) / (T(1.0) + m)
    if not is_f32(x):  # float64 keeps x (m r): well within the bound, and faster
        return x * (m * r if s < T(0.0) else r)
    # Below m = 2^-30 the correction is under 2^-30 of x m, and x m t would go subnormal
    # (from x ~ -6.3), costing a microcode assist per lane.
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
    larger and the value scaled back last, so it is rounded once: x times a gate already
    rounded to a subnormal would be tens of subnormal spacings off, the derivative
    thousands; sc = 1 for x > 0)."""
    T = type(x)
    s, h = _tanh_arg(x)
    h = h if abs(s) < T(1024.0) else T(0.0)  # beyond, m is 0 (h may be inf/NaN: x^3 overflow)
    neg = s < T(0.0)
    # m (1 + lo) as one fma: m + m lo goes subnormal in m lo for 2u below about -75,
    # which costs the bulk loop (the same bits) a microcode assist per lane
    m, sc = exp_scaled(-abs(s), T(0.0))
    m = fma(m, h if neg else -h, m)
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


# The bulk: |x| <= 21 float64 (|2u| <= 694, short of exp_scaled's tail, so exp(-|2u|) is
# normal and the guards above are off), -9.6 <= x <= 1e6 float32 (2u >= -79); for x > 9.6
# (2u > 79) m is 0, where the exact kernels' m sc is below e^-79: the gate 1/(1 + m) is 1
# either way and x d2u(x) m below 2^-25, so both give the same bits. exp_normal instead
# of exp, the same bits (see define's bulk). Only _gate_of and _d2u are shared with the
# exact kernels: taking their guards along slows the bulk loops (tools/ab_speed.py times
# them).
@kernel
def _gelu_tanh_bulk_domain(x):
    T = type(x)
    # one compare (NaN outside): -9.6 <= x <= 1e6 to within float32's spacing there (1/32)
    if is_f32(x):
        return abs(x - T(499995.2)) <= T(500004.8)
    return abs(x) <= T(21.0)


@kernel
def _tanh_gate_bulk(x):
    T = type(x)
    s, h = _tanh_arg(x)
    neg = s < T(0.0)
    if not is_f32(x):
        m = exp_normal(-abs(s))
        return s, fma(m, h if neg else -h, m)
    # clamped: exp_normal's garbage beyond its range may be subnormal (an assist per lane)
    m = exp_normal(max(-abs(s), T(-87.0)))
    m = fma(m, h if neg else -h, m)
    return s, m if (neg or s <= T(79.5)) else T(0.0)


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
        "is formed as a double-word pair x (c + c_lo), c = k1 + k3 x^2 (hi+lo constants "
        "k1 = 2 sqrt(2/pi), k3 = k1 0.044715; x^2, k3 x^2 and their sum exact pairs, the "
        "terms left out below 2^-46 of 2u) and exp(2u) corrected by one fma, m (1 + lo). "
        "float32 stays in float32 lanes: m = exp(-|2u|) carries exp's error (under one "
        "ulp), the gate 1/(1 + m) for 2u >= 0 one rounding more, x m - (x m) m/(1 + m) "
        "for 2u < 0 (one fma) m's error and two roundings, so the value stays within "
        "4 ulp: every 4th float32 with |x| <= 12 is within 3.12 ulp (x < 0; 2.36 for "
        "x > 0) of the float64 value, the derivative within 7.47 (2.89) of its "
        "scale max(sigma, |x (2u)' sigma'|). sigma(1 - sigma) in the "
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
