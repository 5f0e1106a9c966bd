"""IGLU: the Cauchy-gated linear unit and its rational approximation (Kang, Yang & Rocha
Neto, ECML-PKDD 2026, arXiv 2603.06861, eqs. 4, 8, 10, 11)."""
import math

from .._math import PIO2_HI32, PIO2_HI64, PIO2_LO32, PIO2_LO64, fma, horner, is_f32
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

# (atan(u) - u/(1+u^2)) / u^3 as a polynomial in v = u^2, from tools/derive_coefficients.py
# (relative error < 1e-18; Horner condition < 2 on each piece).
IGLU_TAIL_LO = (
    6.6666666666666666665e-1, -7.9999999999999996565e-1, 8.5714285714284543643e-1,
    -8.8888888888730844077e-1, 9.090909089786188593e-1, -9.2307691824092982633e-1,
    9.3333319623043344591e-1, -9.4117377527337731838e-1, 9.4733042089161708277e-1,
    -9.5198849862203374545e-1, 9.5351731110126318839e-1, -9.42882479872576559e-1,
    8.9061040831591317459e-1, -7.4084010953772010059e-1, 4.6243048447514447137e-1,
    -1.5427107261087241055e-1,
)
IGLU_TAIL_HI = (  # in (v - 0.625), for v in [0.25, 1]
    3.6927270979370622299e-1, -2.803373437415813262e-1, 1.8780258916727774213e-1,
    -1.2110508030247573268e-1, 7.6783142815272413672e-2, -4.8242330290926293306e-2,
    3.0145576986015425929e-2, -1.8770770617271406003e-2, 1.1659625753631954547e-2,
    -7.2298534633340730871e-3, 4.4772661797707055957e-3, -2.76991278964308275e-3,
    1.7121525470668809468e-3, -1.0577761449271086291e-3, 6.5481690399099988377e-4,
    -4.0418154447898258859e-4, 2.3946619236311259666e-4, -1.4772211199875048214e-4,
    1.243270939215465332e-4, -7.6651285572709229656e-5,
)

# The same pieces for float32 (degrees 6 and 8, relative error 4.9e-9 and 1.3e-8): with the
# float64 degrees (both pieces run on every lane: selects) the float32 fused backward took
# 1.22 ns/element against 0.89 with these (16.8M elements, 2 threads, this 2-core machine).
IGLU_TAIL_LO32 = (
    6.666666635412708236e-1, -7.9999877169547094229e-1, 8.5706320949488472597e-1,
    -8.8692679420282675887e-1, 8.8560717587703849443e-1, -7.7324359239752584472e-1,
    4.1534306830366052527e-1,
)
IGLU_TAIL_HI32 = (
    3.6927270979370622326e-1, -2.8033723125243805555e-1, 1.8780251952074609679e-1,
    -1.2111570285943679436e-1, 7.6789719710367167234e-2, -4.7973358180545751602e-2,
    2.9979041358650294974e-2, -2.1256583522486567857e-2, 1.3198798499329941418e-2,
)


# 1/pi = hi + lo per dtype: s/pi as fma(s, hi, s lo) rounds once, as the division did
# (within 2^-24 ulp of it), at the cost of a multiply and an fma instead of a division.
INV_PI_HI64, INV_PI_LO64 = 0.3183098861837907, -1.9678676675182486e-17
INV_PI_HI32, INV_PI_LO32 = 0.31830987334251404, 1.2841276486597053e-08


# --------------------------------------------------------------------------- Z gate
@kernel
def z_gate_f(x, sigma):
    T = type(x)
    t = sigma * x
    neg = t < T(0.0)
    # One atan on a selected argument, then selects: branch-free, so the element loop
    # vectorises (an atan per branch is computed on every lane once if-converted).
    # 1/2 + atan(t)/pi cancels for t << 0; reflect: atan(1/|t|)/pi.
    # Each select's discarded side gets a harmless argument, so no lane raises FP flags
    # that the raw ufunc would report as warnings (here: -1/0 for t = 0).
    # (The safe value is not a constant: LLVM would fold -1/select(c, t, K) back into
    # select(c, -1/t, -1/K) and divide by t = 0 anyway.)
    tn = t if neg else -abs(t) - T(1.0)
    a = math.atan(T(-1.0) / tn if neg else t)
    return a / T(math.pi) if neg else T(0.5) + a / T(math.pi)


@kernel
def z_gate_dx(x, sigma):
    T = type(x)
    t = sigma * x
    if abs(t) > T(1.0):
        r = T(1.0) / t
        return (sigma * r) * r / (T(math.pi) * (T(1.0) + r * r))
    return sigma / (T(math.pi) * (T(1.0) + t * t))


@kernel
def z_gate_dsigma(x, sigma):
    T = type(x)
    t = sigma * x
    if abs(t) > T(1.0):
        r = T(1.0) / t
        # x/(1+t^2) = (r/sigma)/(1 + r^2): no overflow of t^2 for huge x.
        return (r / sigma) / (T(math.pi) * (T(1.0) + r * r))
    return x / (T(math.pi) * (T(1.0) + t * t))


# --------------------------------------------------------------------------- IGLU
@kernel
def iglu_f(x, sigma):
    T = type(x)
    t = sigma * x
    neg = t < T(0.0)
    # One atan on the selected argument and selects instead of branches: the element
    # loop vectorises (see z_gate_f). Each case computes exactly what it did as a branch;
    # the arguments of the discarded cases are clamped so that no lane raises FP flags.
    u = T(-1.0) / (t if neg else -abs(t) - T(1.0))  # 1/|t| where t < 0 (see z_gate_f)
    a = math.atan(u if neg else t)
    pos = x * (T(0.5) + a / T(math.pi))
    # u < 1: x*atan(u)/pi = -(atan(u)/u)/(pi*sigma): exact limit -1/(pi*sigma) at -inf,
    # and atan(u)/u is insensitive to the rounding of u.
    ratio = a / (u if u > T(0.0) else T(1.0)) if u > T(0.0) else T(1.0)
    near = -ratio / (T(math.pi) * sigma)
    far = (x if u >= T(1.0) else T(0.0)) * (a / T(math.pi))
    return (near if u < T(1.0) else far) if neg else pos


@kernel
def iglu_dx(x, sigma):
    T = type(x)
    t = sigma * x
    neg = t < T(0.0)
    # Everything from v = min(|t|, 1/|t|) in [0, 1] with 3 divisions (1/|t|, h and atan's
    # own) and a product with 1/pi: division is what bounds this kernel's vector throughput;
    # the form with 1/t, atan(1/|t|), 1/(t + 1/t) and a /pi per case took 9.
    w = abs(t)
    big = w > T(1.0)
    # LLVM turns 1/select(c, w, K) into select(c, 1/w, 1/K), dividing every lane by w: w +
    # 2^-100 (= w wherever big; 0 and subnormals become 2^-100) keeps that division free of
    # FP flags (divide by zero, overflow), which the raw ufunc reports as warnings.
    r = T(1.0) / ((w + T(7.888609052210118e-31)) if big else T(1.0))
    v = r if big else w
    h = v / (T(1.0) + v * v)  # = |t|/(1 + t^2) for either v, without overflow
    a = math.atan(v)
    # pi/2 and 1/pi as hi + lo per dtype
    if is_f32(x):
        c_hi = T(PIO2_HI32)
        c_lo = T(PIO2_LO32)
        ip_hi = T(INV_PI_HI32)
        ip_lo = T(INV_PI_LO32)
    else:
        c_hi = T(PIO2_HI64)
        c_lo = T(PIO2_LO64)
        ip_hi = T(INV_PI_HI64)
        ip_lo = T(INV_PI_LO64)
    ac = (c_hi - a) + c_lo  # atan(1/v) = pi/2 - atan(v)
    # t < 0, |t| <= 1: Z + t/(pi(1+t^2)) = (atan(1/|t|) - |t|/(1+t^2))/pi loses < 2 bits.
    far = ac - h
    # t < 0, |t| > 1: the two terms cancel to ~ 2u^3/(3pi) in u = 1/|t| = v: u^3 P(u^2).
    vv = v * v
    if is_f32(x):
        p = horner(vv, IGLU_TAIL_LO32) if vv <= T(0.25) else horner(vv - T(0.625), IGLU_TAIL_HI32)
    else:
        p = horner(vv, IGLU_TAIL_LO) if vv <= T(0.25) else horner(vv - T(0.625), IGLU_TAIL_HI)
    near = (v * vv) * p
    # t >= 0: 1/2 + (atan(t) + t/(1+t^2))/pi.
    pos = (ac if big else a) + h
    # One product with 1/pi (hi + lo) for the selected case: a division here was the
    # fourth of the loop's divisions (float32 fused backward 1.16 -> 1.06 ns/el, one thread).
    s = (near if big else far) if neg else pos
    q = fma(s, ip_hi, s * ip_lo)
    return q if neg else T(0.5) + q


@kernel
def iglu_dsigma(x, sigma):
    T = type(x)
    t = sigma * x
    if abs(t) > T(1.0):
        r = T(1.0) / t
        # x^2/(1+t^2) = 1/(sigma^2 (1 + r^2)): finite limit 1/(pi sigma^2) at |x| -> inf.
        return T(1.0) / ((T(math.pi) * sigma) * sigma * (T(1.0) + r * r))
    return x * x / (T(math.pi) * (T(1.0) + t * t))


# --------------------------------------------------------------------------- Z approx
@kernel
def z_approx_f(x, sigma):
    T = type(x)
    t = sigma * x
    if t < T(0.0):
        return T(0.5) / (T(1.0) - t)
    return T(1.0) - T(0.5) / (T(1.0) + t)


@kernel
def z_approx_dx(x, sigma):
    T = type(x)
    w = T(1.0) / (T(1.0) + abs(sigma * x))
    return (sigma * w) * w * T(0.5)


@kernel
def z_approx_dsigma(x, sigma):
    T = type(x)
    w = T(1.0) / (T(1.0) + abs(sigma * x))
    # x*w = x/(1+sigma|x|) as 1/(1/x +- sigma) for |x| > 1: finite where x*w is inf*0.
    if abs(x) <= T(1.0):
        xw = x * w
    elif x < T(0.0):
        xw = T(1.0) / (T(1.0) / x - sigma)
    else:
        xw = T(1.0) / (T(1.0) / x + sigma)
    return xw * w * T(0.5)


# --------------------------------------------------------------------------- IGLU approx
@kernel
def iglu_approx_f(x, sigma):
    T = type(x)
    # Four cases, each h = num/den with the result h or x - h: one division and selects,
    # so the float64 loop vectorises too. Every case computes what its branch did.
    big = abs(x) > T(1.0)
    # |x| > 1: x/(2(1+sigma|x|)) as 0.5/(1/x -+ sigma): exact limits at +-inf, no inf/inf.
    q = T(1.0) / (x if big else abs(x) + T(1.0))  # safe, non-constant divisor (see z_gate_f)
    xs = q if big else x  # |xs| <= 1: sigma*xs cannot overflow in the discarded case
    t = sigma * xs
    neg = x < T(0.0) if big else t < T(0.0)
    num = T(0.5) if big else T(0.5) * x
    den = (q - sigma if neg else q + sigma) if big else (T(1.0) - t if neg else T(1.0) + t)
    h = num / den
    return h if neg else x - h


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


define(
    "iglu",
    paper_table=True,
    torch=_torch_iglu,
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
