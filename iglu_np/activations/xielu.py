"""xIELU and xIPReLU: activations derived by integrating a designed gradient (Huang &
Schlag, "Deriving Activation Functions Using Integration", arXiv:2411.13010).

The parameters here are the *effective* values. The paper's trainer reparameterises them
as alpha_p = softplus(a_p) and alpha_n = beta + softplus(a_n); that belongs to the trainer,
so the domains below are the images of those maps (alpha_p > 0, alpha_n > beta).
"""

import math

from .._math import (
    _TWO_200,
    _TWO_M200,
    _TWO_M960,
    BIG,
    exp_expm1_neg,
    exp_scaled_times,
    fma,
    horner,
    is_f32,
    neg_side,
    two_prod,
    two_sum,
)
from .._math import NUMBA as numba  # numba.float64(x): a cast, rebound to numba's own
from .._spec import Param, any_at_least, define, kernel

_PAPER = "Huang & Schlag, Deriving Activation Functions Using Integration, arXiv:2411.13010"
_CODE = "reference implementation: github.com/rubber-duck-debug/xielu (xielu/ops/wrappers.py)"

# expm1(m) - m = m^2 * sum_k m^k/(k+2)!: Taylor coefficients, used on [-1, 0] where the
# series alternates with Horner condition number < 2. Float32 needs far fewer terms.
_EM1MX_F64 = tuple(1.0 / math.factorial(k + 2) for k in range(18))
_EM1MX_F32 = tuple(1.0 / math.factorial(k + 2) for k in range(11))


@kernel
def expm1_minus_x_times(m, a):
    """``a (expm1(m) - m)`` for ``m <= 0`` with full relative accuracy (it is ~ a m^2/2
    near 0, where the plain difference loses everything). a goes into m^2 first, as
    (a m) m: m^2 alone underflows (float32 |m| < 1e-19) where a m^2 need not (xIELU with
    alpha_n = 1e20 at x = -1e-22 would be 1.9e4 ulp off; with alpha_n = 2.8e31, of the
    wrong sign); |a m| <= |a| there, so it cannot overflow either."""
    T = type(m)
    if m < T(-1.0):
        # |expm1(m)| < 0.64 |m|: the difference loses less than 1.5 bits; +inf at -inf.
        return a * (math.expm1(m) - m)
    if is_f32(m):
        p = horner(m, _EM1MX_F32)
    else:
        p = horner(m, _EM1MX_F64)
    return ((a * m) * m) * p


@kernel
def expm1_minus_x(m):
    """``expm1(m) - m`` for ``m <= 0`` (:func:`expm1_minus_x_times` with a = 1)."""
    return expm1_minus_x_times(m, type(m)(1.0))


@kernel
def _em1_eps_minus_x(x, eh, el):
    """expm1(eps) - x for eps < x <= 0 (and NaN), given expm1(eps) = eh + el
    (_em1_eps_dw), as (eh - x) + el: eh - x is exact near eh (Sterbenz), where the value
    cancels; elsewhere nothing cancels. (expm1(eps) - eps) + (eps - x) would keep
    expm1(eps) - eps's rounding, which the sum cancels near x = expm1(eps) (alpha_n = 1,
    beta ~ 0, eps = -0.85: 21 ulp of the value in float32; eps = -2 with the rounded
    expm1(eps): 18 ulp float32, 6.4 float64)."""
    return (eh - x) + el


# x (a x + beta) (xIPReLU; xIELU for x > 0) with a x + beta as one fma. float32 computes it
# in float64 (_quad), where nothing below overflows or goes subnormal. In float64, where a
# and beta are so small that a x + beta is subnormal, its rounding (half a subnormal
# spacing) comes out |x| times larger (xIPReLU alpha_p = 2e-323, x = 3.4e7: 6.2e6 ulp;
# float32 in its own precision, alpha_p = 2.8e-45, x = 2063: 137 ulp). For |x| > 8 that
# needs |a|, |beta| below 2^-960; there a and beta are scaled by 2^200, exactly, and x by
# the inverse: x 2^-200 is exact for |x| >= 2^-26 (below, its error times the scaled
# factor, at most ~1, is under half a subnormal spacing), and the scaled factor cannot
# overflow. The choice depends on the parameters alone (hoisted out of the CPU loops; the
# GPU kernels' prepared part), as an |x| test per element would slow xIELU's forward
# (tools/ab_speed.py). At the other end, with |a| or |beta| above max/2 the factor
# overflows where x (a x + beta) need not (|x| < 1; float32 alpha_n = 2.2e37, beta = -max,
# x = -1.3e-4: inf for 4.5e34): there a and beta are halved and the product doubled last
# (x doubled first would overflow for |x| > max/2, where the factor may cancel to 0: NaN).
# Not for |a| <= 1 (then |a x| < 1 for |x| < 1, far below beta's spacing): a subnormal a
# halved to 0, and fma(0, +-inf, beta) gave NaN at x = +-inf (alpha_n = 5e-324, beta = max).
_Q64_BIG = 8.988465674311579e307  # max/2


@kernel
def _quad_scale(a, beta):
    """(a s, beta s, si, so) with x (a x + beta) = ((x si) fma(a s, x, beta s)) so: the
    scaling above, from the parameters alone."""
    T = type(a)
    if is_f32(a):  # float32 takes float64 instead (_quad), with no need of it
        return a, beta, T(1.0), T(1.0)
    small = abs(a) < T(_TWO_M960) and abs(beta) < T(_TWO_M960)
    big = abs(a) > T(_Q64_BIG) or (abs(beta) > T(_Q64_BIG) and abs(a) > T(1.0))
    s = T(_TWO_200) if small else (T(0.5) if big else T(1.0))
    si = T(_TWO_M200) if small else T(1.0)
    so = T(2.0) if big else T(1.0)
    return a * s, beta * s, si, so


@kernel
def _quad(x, a, beta, a_s, b_s, si, so):
    """x (a x + beta) from _quad_scale(a, beta) = (a_s, b_s, si, so), the factor rounded
    once. float32 in float64 instead: a x is exact there, and neither the factor nor the
    product can overflow or go subnormal, so the two float64 roundings (2^-52 at most)
    leave the float32 result correctly rounded but for near-ties, the overflow threshold
    included: a float32 factor rounded up would put x (a x + beta) over it where the exact
    value rounds to the maximum (alpha_p = 1.72, beta = 0.018, x = 1.405e19). float64 keeps that double
    rounding there: a product of two float64 roundings has no wider type to go to."""
    T = type(x)
    if is_f32(x):
        xd = numba.float64(x)
        return T(xd * fma(numba.float64(a), xd, numba.float64(beta)))
    return ((x * si) * fma(a_s, x, b_s)) * so


# --------------------------------------------------------------------------- xIELU
@kernel
def _xielu_far(x, an, beta, e):
    """alpha_n (e - x) + beta x as alpha_n e + (beta - alpha_n) x, e = expm1(min(x, eps)),
    for x < -1 (or |x| so large that the plain form overflows): finite operands at
    x = -inf, where the plain form would be inf - inf. One fma: (beta - alpha_n) x may
    exceed the maximum by up to alpha_n, who brings it back (float32 alpha_n = 3e38,
    beta = 0, x = -1.2: inf for 1.5e38)."""
    return fma(beta - an, x, an * e)


@kernel
def _xielu_f_mid(x, an, beta, eh, el):
    """xielu_f for eps < x <= 0, given _em1_eps_dw(eps) = (eh, el)."""
    T = type(x)
    r = an * _em1_eps_minus_x(x, eh, el) + beta * x
    # Both terms overflow with opposite signs for a huge |x| > |eps| > 1 (alpha_n = beta =
    # 8e19 in float32, eps = -7.7e26, x = -1e20: NaN for 8.8e32); there x << e, and
    # _xielu_far's form (the same function) does not cancel. Only where r is not finite:
    # near x = e its alpha_n e and -alpha_n x would.
    return r if abs(r) < T(math.inf) else _xielu_far(x, an, beta, eh)


@kernel
def _xielu_f_side_q(x, ap, an, beta, a_s, b_s, si, so):
    """xielu_f outside eps < x <= 0 (and NaN), given _quad_scale(alpha_p, beta)."""
    T = type(x)
    if x > T(0.0):
        return _quad(x, ap, beta, a_s, b_s, si, so)  # both terms >= 0: no cancellation
    if x < T(-1.0):
        return _xielu_far(x, an, beta, math.expm1(x))
    return expm1_minus_x_times(x, an) + beta * x


# expm1(eps) depends on the parameters alone: GPU kernels with scalar parameters compute
# its double-word once per thread (the spec's ``prepared``, for the value and d_alpha_n),
# not in every thread between eps and 0 (most of them for eps < -1); the CPU loops hoist it.
# So for the value's (float64) _quad_scale: NVVM would leave it in the loop, per element,
# behind the x > 0 branch (its compares are short-circuit branches), well above the copy
# limit on the GPU (iglu-np bench measures it).
@kernel
def xielu_eps_prep(ap, an, beta, eps):
    return _em1_eps_dw(eps)


@kernel
def xielu_f_prep(ap, an, beta, eps):
    eh, el = _em1_eps_dw(eps)
    a_s, b_s, si, so = _quad_scale(ap, beta)
    return eh, el, a_s, b_s, si, so


@kernel
def xielu_f_prepared(x, ap, an, beta, eps, eh, el, a_s, b_s, si, so):
    """xielu_f(x, ap, an, beta, eps), bit for bit, given xielu_f_prep(...)."""
    T = type(x)
    if x > T(0.0) or not (x > eps):
        return _xielu_f_side_q(x, ap, an, beta, a_s, b_s, si, so)
    return _xielu_f_mid(x, an, beta, eh, el)


@kernel
def xielu_f(x, ap, an, beta, eps):
    T = type(x)
    eh, el, a_s, b_s, si, so = xielu_f_prep(ap, an, beta, eps)  # hoisted out of the CPU loops
    if is_f32(x):
        return xielu_f_prepared(x, ap, an, beta, eps, eh, el, a_s, b_s, si, so)
    # float64: every piece computed and one selected. With branches, LLVM's cost model for
    # Intel's AVX-512 targets (skylake-avx512 to emeraldrapids, not znver4 or haswell)
    # keeps the loop scalar, its branches mispredicted on mixed signs, about 3x the time
    # (float32's branches vectorise there, and selects would cost it more).
    pos = _quad(x, ap, beta, a_s, b_s, si, so)
    far = _xielu_far(x, an, beta, math.expm1(neg_side(x)))  # (x > 0 unused; see celu_f)
    near = expm1_minus_x_times(x, an) + beta * x
    mid = _xielu_f_mid(x, an, beta, eh, el)
    side = pos if x > T(0.0) else (far if x < T(-1.0) else near)
    return side if (x > T(0.0) or not (x > eps)) else mid


# 1/6 as a double-word and the Taylor tail 1/k!, k = 4..8, of expm1 at |r| <= 6.1e-4.
_INV6_HI, _INV6_LO = 0.16666666666666666, 9.25185853854297e-18
_EXPM1_TAIL = tuple(1.0 / math.factorial(k) for k in range(4, 9))


@kernel
def _expm1_twice(uh, ul):
    """expm1(2a) = 2u + u^2 for u = expm1(a) = uh + ul, as a double-word."""
    q, f = two_prod(uh, uh)
    s, g = two_sum(uh + uh, q)
    lo = g + (f + (uh + uh) * ul + (ul + ul))
    h = s + lo
    return h, lo - (h - s)


@kernel
def _expm1_twice4(uh, ul):
    uh, ul = _expm1_twice(uh, ul)
    uh, ul = _expm1_twice(uh, ul)
    uh, ul = _expm1_twice(uh, ul)
    return _expm1_twice(uh, ul)


@kernel
def _expm1_dw(v):
    """expm1(v) = uh + ul to ~2^-80 for float64 |v| <= 40: a short Taylor series at
    v 2^-16 (exact scaling) and 16 doublings."""
    T = type(v)
    r = v * T(1.52587890625e-05)  # 2^-16
    a, b = two_prod(r, r)
    c, d = two_prod(a, r)
    d = d + b * r
    p, e = two_prod(c, T(_INV6_HI))
    e = e + (c * T(_INV6_LO) + d * T(_INV6_HI))
    s, e1 = two_sum(r, a * T(0.5))
    s, e2 = two_sum(s, p)
    lo = (e1 + b * T(0.5)) + (e2 + e + (a * a) * horner(r, _EXPM1_TAIL))
    uh = s + lo
    ul = lo - (uh - s)
    uh, ul = _expm1_twice4(uh, ul)
    uh, ul = _expm1_twice4(uh, ul)
    uh, ul = _expm1_twice4(uh, ul)
    return _expm1_twice4(uh, ul)


@kernel
def _em1_eps_dw(eps):
    """(eh, el): expm1(eps) = eh + el as a double-word, eps <= 0 (float32: float64's
    expm1 split, or -1 + e^eps below -20; float64: _expm1_dw, -1 + e^eps below -40, where
    e^eps < 2^-57, and eps + eps^2 (1/2 + eps/6) above -2^-30, where _expm1_dw's eps 2^-16
    would underflow for a subnormal eps)."""
    T = type(eps)
    if is_f32(eps):
        ed = numba.float64(eps)
        if eps < T(-20.0):
            # e^eps < 2^-28: float64's expm1 would round it away (eps = -47: 0 for the
            # value 3.9e-21 at x = -1)
            return T(-1.0), T(math.exp(ed))
        e = math.expm1(ed)
        eh = T(e)
        return eh, T(e - numba.float64(eh))
    if eps < T(-40.0):
        return T(-1.0), math.exp(eps)
    if eps > T(-9.313225746154785e-10):  # -2^-30
        return eps, (eps * eps) * (T(0.5) + eps * T(_INV6_HI))
    return _expm1_dw(eps)


@kernel
def xielu_root_lo(an, beta, hi):
    """The low part of the root x0 = hi + lo of alpha_n expm1(x) + beta, for
    hi = log(1 - beta/alpha_n) (_xielu_root_hi; float64; 0 < -hi <= 40 and alpha_n < 1e30). ``lo`` is one
    Newton step, log(c e^-hi) ~ c e^-hi - 1 with c = (alpha_n - beta)/alpha_n, which needs
    e^-hi to ~2^-80: expm1(-hi) is built as a double-word from a short Taylor series at
    -hi 2^-16 (exact scaling) and 16 doublings. It depends on the parameters only, so the
    CPU loops hoist it out of the element loop; on a GPU only threads near the root run it."""
    T = type(an)  # noqa: F841  (every kernel names its dtype T)
    uh, ul = _expm1_dw(-hi)
    # (alpha_n - beta)(1 + u) - alpha_n = (alpha_n - beta) u - beta, with p - beta exact
    # (Sterbenz) and alpha_n - beta carried exactly as sh + st.
    sh, st = two_sum(an, -beta)
    p, e = two_prod(sh, uh)
    n = (p - beta) + (e + sh * ul + st * uh)
    return n / an


@kernel
def _xielu_root_form(x, an, beta, hi):
    """(k, c, arg) with alpha_n expm1(x) + beta = k expm1(arg) + c near the root
    x0 = hi + lo: (alpha_n - beta, 0, (x - hi) - lo)."""
    T = type(x)
    return an - beta, T(0.0), (x - hi) - xielu_root_lo(an, beta, hi)


@kernel
def _xielu_root_hi(an, beta):
    """hi = log(1 - beta/alpha_n), the float64 root's leading part; for beta > alpha_n/2
    as log(d/alpha_n) with d = alpha_n - beta exact (Sterbenz): log1p(-beta/alpha_n)
    keeps beta/alpha_n's rounding, which 1 - beta/alpha_n magnifies (alpha_n - beta of two
    ulps: hi 0.15 off, beyond one Newton step, dx 58,560 ulp at x = -18.7)."""
    T = type(an)
    if beta > T(0.5) * an:
        return math.log((an - beta) / an)
    return math.log1p(-beta / an)


@kernel
def _xielu_root_applies(an, beta, hi):
    """_xielu_dx_neg's parameter test (written out there: as a call, its float64 loop is
    a few percent slower; tools/ab_speed.py times it)."""
    T = type(an)
    return beta > T(0.0) and an < T(BIG) and hi >= T(-40.0)


@kernel
def _xielu_dx_neg(x, an, beta):
    """alpha_n expm1(x) + beta for x <= eps. Near the root (69 ulp at x = -1 in float64
    with the defaults) the same function is (alpha_n - beta) expm1(x - x0): with x0 a
    double-word and x - hi exact (Sterbenz, x within a factor 2 of hi) nothing cancels.
    One expm1 either way."""
    T = type(x)
    k = an
    c = beta
    arg = x
    hi = _xielu_root_hi(an, beta)
    if beta > T(0.0) and an < T(BIG) and hi >= T(-40.0) and T(2.0) * hi <= x and x <= T(0.5) * hi:
        k, c, arg = _xielu_root_form(x, an, beta, hi)
    return k * math.expm1(arg) + c


# The float64 root x0 = hi + lo depends on the parameters alone. A GPU thread that runs
# xielu_root_lo (about 250 float64 operations) for each element between 2 x0 and x0/2
# holds up its warp for every such lane, which makes the float64 backward compute-bound;
# computed once, lo costs nothing and gives the same bits. Kernels whose parameters are
# scalars compute (hi, lo) once per thread (the spec's ``prepared``) and take the
# derivative below.
@kernel
def xielu_dx_prep(ap, an, beta, eps):
    """(hi, lo) of xielu_dx's float64 root x0 = hi + lo (lo = 0 where its root form does
    not apply; both 0 in float32, whose derivative runs its own narrow root band)."""
    T = type(an)
    hi = T(0.0)
    lo = T(0.0)
    if not is_f32(an):
        hi = _xielu_root_hi(an, beta)
        if _xielu_root_applies(an, beta, hi):
            lo = xielu_root_lo(an, beta, hi)
    return hi, lo


@kernel
def xielu_dx_prepared(x, ap, an, beta, eps, hi, lo):
    """xielu_dx(x, ap, an, beta, eps), bit for bit, given (hi, lo) = xielu_dx_prep(...)."""
    T = type(x)
    if is_f32(x) or not (x <= eps):
        return xielu_dx(x, ap, an, beta, eps)
    k = an
    c = beta
    arg = x
    if _xielu_root_applies(an, beta, hi) and T(2.0) * hi <= x and x <= T(0.5) * hi:
        k, c, arg = an - beta, T(0.0), (x - hi) - lo
    return k * math.expm1(arg) + c


@kernel
def _xielu_near_root32(x, an, beta):
    """The float32 derivative takes its root form here (x within w of x0; see
    _xielu_dx_neg32, whose test this is, the same operations)."""
    T = type(x)
    x0 = math.log1p(-beta / an)
    w = T(3.814697265625e-06) * beta / (an - beta) + T(4.76837158203125e-07) * abs(x0)
    return beta > T(0.0) and an < T(BIG) and x0 >= T(-40.0) and abs(x - x0) < w


@kernel
def _xielu_dx_neg32(x, an, beta):
    """_xielu_dx_neg for float32 data, in float64 (float32 parameters are exact there)
    and rounded once. Outside a width w = 2^-18 beta/(alpha_n - beta) around the root the
    plain alpha_n expm1(x) + beta is at least ~2^-18 beta, while its float64 roundings are
    ~2^-51 beta: 2^-33 of it, far below float32's 2^-24. So the root form runs only
    within w of a float32 estimate x0 of the root (w widened by x0's error), not across
    2 x0 <= x <= x0/2: on a GPU its double-word steps would run in every warp that holds
    one such element (most warps, for data ~ N(0, 1)), which makes the float32 backward
    compute-bound. The CPU hoists hi and the root's low part out of the loop (x0's
    log1p in the test it does not: see the bulk below)."""
    T = type(x)
    xd = numba.float64(x)
    k = numba.float64(an)
    c = numba.float64(beta)
    arg = xd
    if _xielu_near_root32(x, an, beta):
        hi = math.log1p(-c / k)
        if hi >= numba.float64(-40.0):
            k, c, arg = _xielu_root_form(xd, k, c, hi)
    return T(k * math.expm1(arg) + c)


@kernel
def xielu_dx(x, ap, an, beta, eps):
    T = type(x)
    if x > T(0.0):
        # 2 (ap x), not (2 ap) x: 2 ap overflowed for ap > max/2 (float32 ap = max,
        # x = 6.6e-23: inf for 4.5e16)
        return T(2.0) * (ap * x) + beta
    if x <= eps:
        if is_f32(x):
            return _xielu_dx_neg32(x, an, beta)
        return _xielu_dx_neg(x, an, beta)
    if math.isnan(x):
        return x
    return beta - an


# The float32 derivative's bulk (the exact kernel calls expm1 in a branch, in float64:
# its loop stays scalar): the branches as selects, expm1 from exp_expm1_neg (expm1's
# bits for x <= 0 down to -708, without its range handling), the same bits as the exact
# kernel (see define's bulk). The domain's root test runs before its branches,
# unconditionally: testing the value alpha_n expm1(x) + beta instead would put the domain
# check after the store and compute the float64 expm1 twice (tools/ab_speed.py times
# both). Not in the domain: float64 (its derivative takes the double-word root form across
# 2 x0 <= x <= x0/2), x < -708, +inf, NaN and the root band of _xielu_near_root32. There
# is no forward bulk (the exact forward loop vectorises, and a bulk form is slower) and
# none for alpha_n (slower too).
@kernel
def _xielu_expm1_64(x):
    """expm1(x) in float64 for float32 x <= 0 (0 for x > 0)."""
    e, m = exp_expm1_neg(numba.float64(neg_side(x)))
    return m


@kernel
def _xielu_bulk_domain(x, ap, an, beta, eps):
    T = type(x)
    if not is_f32(x):
        return False
    near = _xielu_near_root32(x, an, beta)
    if x > T(0.0):
        return x < T(math.inf)
    return x >= T(-708.0) and not near


@kernel
def xielu_dx_bulk(x, ap, an, beta, eps):
    T = type(x)
    neg = T(numba.float64(an) * _xielu_expm1_64(x) + numba.float64(beta))
    return T(2.0) * (ap * x) + beta if x > T(0.0) else (neg if x <= eps else beta - an)


@kernel
def xielu_dap(x, ap, an, beta, eps):
    T = type(x)
    if x > T(0.0):
        return x * x
    if math.isnan(x):
        return x
    return T(0.0)


@kernel
def _xielu_dan_side(x):
    """xielu_dan outside eps < x <= 0 (and NaN)."""
    T = type(x)
    if x > T(0.0):
        return T(0.0)
    return expm1_minus_x(x)


@kernel
def xielu_dan(x, ap, an, beta, eps):
    T = type(x)
    if x > T(0.0) or not (x > eps):
        return _xielu_dan_side(x)
    eh, el = _em1_eps_dw(eps)
    return _em1_eps_minus_x(x, eh, el)


@kernel
def xielu_dan_prepared(x, ap, an, beta, eps, eh, el):
    """xielu_dan(x, ap, an, beta, eps), bit for bit, given (eh, el) = xielu_eps_prep(...)."""
    T = type(x)
    if x > T(0.0) or not (x > eps):
        return _xielu_dan_side(x)
    return _em1_eps_minus_x(x, eh, el)


@kernel
def xielu_dbeta(x, ap, an, beta, eps):
    return x


@kernel
def xielu_deps(x, ap, an, beta, eps):
    T = type(x)
    if x > eps and x <= T(0.0):
        # exp_scaled_times: e^eps subnormal or 0 where alpha_n e^eps is normal (float32
        # alpha_n = 5e23, eps = -115.7: 0 for 2.9e-27; alpha_n = 1.1e7, eps = -99.7:
        # 1.5e5 ulp). eps <= 0 is the domain.
        a, m, s = exp_scaled_times(eps, an)
        return (a * m) * s
    if math.isnan(x):
        return x
    return T(0.0)


def _xielu_check(alpha_p, alpha_n, beta, eps):
    if any_at_least(beta, alpha_n):
        return (
            "alpha_n must be greater than beta (the reference parameterisation is "
            "alpha_n = beta + softplus(.))"
        )
    return None


def _ref_em1mx(mp, m, x):
    """expm1(m) - x at extra precision: it is ~ m^2/2 when m = x is tiny."""
    with mp.extradps(mp.dps):
        return mp.expm1(m) - x


def _ref_xielu(mp, x, ap, an, b, eps):
    if mp.isinf(x):
        return mp.inf  # at -inf alpha_n > beta: the (beta - alpha_n) x term wins
    if x > 0:
        return ap * x * x + b * x
    return an * _ref_em1mx(mp, min(x, eps), x) + b * x


def _ref_xielu_dx(mp, x, ap, an, b, eps):
    if x > 0:
        return 2 * ap * x + b
    if x <= eps:
        return an * mp.expm1(x) + b
    return b - an


def _ref_xielu_dan(mp, x, ap, an, b, eps):
    if x > 0:
        return mp.zero
    if mp.isinf(x):
        return mp.inf
    return _ref_em1mx(mp, min(x, eps), x)


def _scale_xielu_f(mp, x, ap, an, b, eps):
    # The cancelling terms are alpha_n (expm1(m) - x) >= 0 and beta x <= 0.
    if x > 0 or mp.isinf(x):
        return abs(_ref_xielu(mp, x, ap, an, b, eps))
    return an * abs(_ref_em1mx(mp, min(x, eps), x)) + b * abs(x)


def _scale_xielu_dx(mp, x, ap, an, b, eps):
    if x > 0:
        return 2 * ap * x + b
    if x <= eps:
        return an * abs(mp.expm1(x)) + b
    return an + b


def _scale_xielu_dan(mp, x, ap, an, b, eps):
    # expm1(eps) - x crosses zero just above x = eps; below eps it is positive.
    if eps < x <= 0:
        return abs(mp.expm1(eps)) + abs(x)
    return abs(_ref_xielu_dan(mp, x, ap, an, b, eps))


_AP = Param(
    "alpha_p",
    0.8,
    "Effective curvature of the positive branch alpha_p x^2 (softplus of the trained "
    "value; the paper's init 0.8).",
    lo=0.0,
    lo_open=True,
    test_values=(0.01, 0.5, 2.0, 10.0, 0.37),
)
_AN = Param(
    "alpha_n",
    0.8,
    "Effective scale of the negative branch (beta + softplus of the trained value; the "
    "paper's init 0.8). Must exceed beta.",
    lo=0.0,
    lo_open=True,
    above="beta",
    test_values=(0.55, 1.0, 3.0, 10.0, 0.93),
)
_BETA = Param(
    "beta",
    0.5,
    "Slope at the origin (fixed to 0.5 in the paper).",
    lo=0.0,
    test_values=(0.0, 0.1, 0.7, 0.25),
)
_EPS = Param(
    "eps",
    -1e-6,
    "The negative branch evaluates expm1(min(x, eps)); the reference code's -1e-6. "
    "eps = 0 gives the smooth function.",
    hi=0.0,
    test_values=(0.0, -1e-12, -1e-3, -0.1, -1.0, -2.5),
)

define(
    "xielu",
    summary="xIELU: a trainable quadratic-positive, ELU-integral-negative activation.",
    formula=(
        r"\mathrm{xIELU}(x) = \begin{cases} \alpha_p x^2 + \beta x & x > 0\\"
        r" \alpha_n\left(e^{\min(x,\epsilon)} - 1\right) - \alpha_n x + \beta x & x \le 0\end{cases}"
    ),
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \begin{cases} 2\alpha_p x + \beta & x > 0\\"
        r" \alpha_n (e^{x} - 1) + \beta & x \le \epsilon\\ \beta - \alpha_n & \epsilon < x \le 0"
        r"\end{cases}"
    ),
    params=[_AP, _AN, _BETA, _EPS],
    check=_xielu_check,
    f=xielu_f,
    dx=xielu_dx,
    dparams={"alpha_p": xielu_dap, "alpha_n": xielu_dan, "beta": xielu_dbeta, "eps": xielu_deps},
    bulk={"dx": xielu_dx_bulk},
    bulk_domain=_xielu_bulk_domain,
    prepared={
        "f": (xielu_f_prep, xielu_f_prepared),
        "dx": (xielu_dx_prep, xielu_dx_prepared),
        "alpha_n": (xielu_eps_prep, xielu_dan_prepared),
    },
    ref=_ref_xielu,
    ref_dx=_ref_xielu_dx,
    ref_dparams={
        "alpha_p": lambda mp, x, ap, an, b, eps: x * x if x > 0 else mp.zero,
        "alpha_n": _ref_xielu_dan,
        "beta": lambda mp, x, ap, an, b, eps: x,
        "eps": lambda mp, x, ap, an, b, eps: an * mp.exp(eps) if eps < x <= 0 else mp.zero,
    },
    scales={"f": _scale_xielu_f, "dx": _scale_xielu_dx, "alpha_n": _scale_xielu_dan},
    notes=(
        "Branches as the reference code: x > 0 is positive, x <= 0 (also -0.0) takes "
        "alpha_n expm1(min(x, eps)) - alpha_n x + beta x, so f(0) = alpha_n expm1(eps) "
        "(a jump of ~alpha_n |eps| at 0). Derivatives are those of this function: on "
        "eps < x <= 0 the x-derivative is beta - alpha_n (PyTorch autograd of the "
        "reference XIELUPy module gives the same); the reference CUDA kernel and its "
        "autograd.Function instead return alpha_n expm1(min(x, eps)) + beta there, the "
        "derivative of the smooth (eps = 0) function; use eps=0 for that. At x = eps the "
        "value of the x < eps side is used (df/dx = alpha_n expm1(eps) + beta, "
        "df/deps = 0; torch.min's autograd would split the tie in half). "
        "Stability: expm1(x) - x is evaluated as x^2 P(x) on [-1, 0] (it is ~ x^2/2 and "
        "the plain difference cancels), the linear piece as (e_hi - x) + e_lo with "
        "expm1(eps) = e_hi + e_lo a double-word (e_hi - x exact where it cancels), the "
        "positive side's alpha_p x + beta as one fma (rescaled where it would be "
        "subnormal), and for x < -1 as "
        "alpha_n expm1(x) + (beta - alpha_n) x in one fma, which stays finite at -inf "
        "(f -> +inf since alpha_n > beta) and where (beta - alpha_n) x alone overflows. "
        "The value crosses zero for "
        "x < 0, where its error is measured against the magnitude of the terms "
        "alpha_n|expm1(min(x,eps)) - x| + beta|x|. df/dx crosses zero at "
        "x0 = log1p(-beta/alpha_n); within a factor 2 of x0 it is computed as "
        "(alpha_n - beta) expm1(x - x0) with x0 a double-word, so it keeps a few ulp of "
        "its own value there (the scale alpha_n|expm1(x)| + beta is for the doubles "
        "next to x0)."
    ),
    special_points=(
        0.0,
        lambda p: p["eps"],
        lambda p: math.log1p(-p["beta"] / p["alpha_n"]),
    ),
    references=(_PAPER, _CODE),
    example=(
        ">>> x = np.array([-3.0, -1.0, 0.0, 1.0])\n"
        ">>> iglu_np.xielu(x, eps=0.0).round(6)\n"
        "array([ 0.13983 , -0.205696,  0.      ,  1.3     ])\n"
        ">>> iglu_np.xielu.dx(x, eps=0.0).round(6)\n"
        "array([-0.26017 , -0.005696,  0.5     ,  2.1     ])"
    ),
)


# --------------------------------------------------------------------------- xIPReLU
# a x + beta as one fma (_quad): exact before its one rounding, so it neither cancels where
# the two terms nearly meet nor overflows where a x does and beta = -+max brings it back
# (float32 alpha_p = max, x = 1.0000001, beta = -max: inf for 4e31). It replaced a
# two_prod pair, whose error term is dropped beyond 1e30 (float32 alpha_p = 1e35,
# x = 1.0000001, beta = -1e35: 0.2 relative error), in fewer operations.
@kernel
def xiprelu_f_prep(ap, an, beta):
    pa, pb, pi, po = _quad_scale(ap, beta)
    na, nb, ni, no = _quad_scale(an, beta)
    return pa, pb, pi, po, na, nb, ni, no


@kernel
def xiprelu_f_prepared(x, ap, an, beta, pa, pb, pi, po, na, nb, ni, no):
    """xiprelu_f(x, ap, an, beta), bit for bit, given xiprelu_f_prep(...)."""
    T = type(x)
    pos = x > T(0.0)
    a = ap if pos else an
    a_s = pa if pos else na
    b_s = pb if pos else nb
    si = pi if pos else ni
    so = po if pos else no
    return _quad(x, a, beta, a_s, b_s, si, so)


# Each side's scaling from its parameters alone: the CPU loops hoist it; GPU kernels with
# scalar parameters take it from the prepared part once per thread (NVVM left it in the
# loop, per element, as for xIELU's value).
@kernel
def xiprelu_f(x, ap, an, beta):
    pa, pb, pi, po, na, nb, ni, no = xiprelu_f_prep(ap, an, beta)
    return xiprelu_f_prepared(x, ap, an, beta, pa, pb, pi, po, na, nb, ni, no)


@kernel
def xiprelu_dx(x, ap, an, beta):
    T = type(x)
    a = an
    if x > T(0.0):
        a = ap
    # 2 (a x + beta/2): 2 a and 2 x overflow where 2 a x + beta need not (float32
    # x = 3.4e38, alpha_p = 0.01: inf for 6.8e36; alpha_p = max/2, beta = -max). beta/2
    # rounds only for a subnormal beta.
    return T(2.0) * fma(a, x, T(0.5) * beta)


@kernel
def xiprelu_dap(x, ap, an, beta):
    T = type(x)
    if x > T(0.0):
        return x * x
    if math.isnan(x):
        return x
    return T(0.0)


@kernel
def xiprelu_dan(x, ap, an, beta):
    T = type(x)
    if x > T(0.0):
        return T(0.0)
    return x * x


@kernel
def xiprelu_dbeta(x, ap, an, beta):
    return x


def _ref_xiprelu(mp, x, ap, an, b):
    if mp.isinf(x):
        return mp.inf
    a = ap if x > 0 else an
    return a * x * x + b * x


def _ref_xiprelu_dx(mp, x, ap, an, b):
    a = ap if x > 0 else an
    return 2 * a * x + b


def _root(p, name, k):
    """-beta/(k alpha) when it lies on that alpha's side of 0, else None."""
    a = p[name]
    r = -p["beta"] / (k * a)
    if (name == "alpha_p") == (r > 0):
        return r
    return None


_XAP = Param(
    "alpha_p",
    0.8,
    "Curvature of the positive branch alpha_p x^2 (effective value, > 0).",
    lo=0.0,
    lo_open=True,
    test_values=(0.01, 0.5, 2.0, 10.0, 0.37),
)
_XAN = Param(
    "alpha_n",
    0.8,
    "Curvature of the negative branch alpha_n x^2 (effective value, > 0).",
    lo=0.0,
    lo_open=True,
    test_values=(0.01, 0.5, 2.0, 10.0, 0.37),
)
_XBETA = Param(
    "beta",
    0.5,
    "Slope at the origin (0.5 as in xIELU); any finite value.",
    test_values=(0.0, 0.1, 2.0, -0.5, 0.3),
)

define(
    "xiprelu",
    summary="xIPReLU: the integral of a PReLU-shaped gradient, quadratic on both sides.",
    formula=(
        r"\mathrm{xIPReLU}(x) = \begin{cases} \alpha_p x^2 + \beta x & x > 0\\"
        r" \alpha_n x^2 + \beta x & x \le 0\end{cases}"
    ),
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = 2\alpha x + \beta,\quad"
        r"\frac{\partial f}{\partial \alpha_{p}} = x^2\,\mathbb{1}[x>0],\quad"
        r"\frac{\partial f}{\partial \alpha_{n}} = x^2\,\mathbb{1}[x\le 0],\quad"
        r"\frac{\partial f}{\partial \beta} = x"
    ),
    params=[_XAP, _XAN, _XBETA],
    f=xiprelu_f,
    dx=xiprelu_dx,
    dparams={"alpha_p": xiprelu_dap, "alpha_n": xiprelu_dan, "beta": xiprelu_dbeta},
    prepared={"f": (xiprelu_f_prep, xiprelu_f_prepared)},
    ref=_ref_xiprelu,
    ref_dx=_ref_xiprelu_dx,
    ref_dparams={
        "alpha_p": lambda mp, x, ap, an, b: x * x if x > 0 else mp.zero,
        "alpha_n": lambda mp, x, ap, an, b: mp.zero if x > 0 else x * x,
        "beta": lambda mp, x, ap, an, b: x,
    },
    notes=(
        "f and f' are continuous (f'(0) = beta from both sides); the second derivative "
        "jumps at 0. Both cross zero (f at -beta/alpha_n, f' at -beta/(2 alpha_n) for "
        "beta > 0): alpha x + beta is one fma, rounded once, so f and f' keep full "
        "relative accuracy through their zeros."
    ),
    special_points=(
        0.0,
        lambda p: _root(p, "alpha_n", 1.0),
        lambda p: _root(p, "alpha_n", 2.0),
        lambda p: _root(p, "alpha_p", 1.0),
        lambda p: _root(p, "alpha_p", 2.0),
    ),
    references=(_PAPER,),
    example=(
        ">>> x = np.array([-2.0, -0.5, 0.0, 1.0])\n"
        ">>> iglu_np.xiprelu(x, alpha_n=0.5)\narray([ 1.   , -0.125,  0.   ,  1.3  ])\n"
        ">>> iglu_np.xiprelu.dx(x, alpha_n=0.5)  # zero crossing at -beta/(2 alpha_n)\n"
        "array([-1.5,  0. ,  0.5,  2.1])"
    ),
)
