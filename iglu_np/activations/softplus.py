"""Softplus with PyTorch's semantics: (1/beta) log(1 + exp(beta x)), reverting to the
identity where beta x > threshold."""

import math

from .._math import (
    _TWO_16,
    _TWO_32,
    _TWO_64,
    _TWO_128,
    _TWO_256,
    _TWO_512,
    _TWO_M16,
    _TWO_M32,
    _TWO_M64,
    _TWO_M90,
    _TWO_M128,
    _TWO_M256,
    _TWO_M512,
    _TWO_M900,
    exp_dw,
    exp_normal,
    exp_scaled_over,
    fma,
    is_f32,
    log1p_unit,
    two_prod,
)
from .._math import NUMBA as numba  # numba.float64(x): a cast, rebound to numba's own
from .._spec import Param, define, kernel


@kernel
def _beta_x(x, beta, threshold):
    """(yh, yl, linear): y = beta x as an exact dw pair, and PyTorch's branch test
    beta x > threshold decided on the exact product (a rounded product flips the branch,
    and with it a jump of log1p(exp(-threshold))/beta, right at the boundary)."""
    T = type(x)
    # The kernels take two_prod's pair (yl = 0 from |y| >= 1e30, where exp's tail no
    # longer needs it); the test takes fma's residual at every magnitude: a rounded
    # product would take the wrong branch at y = threshold
    # (float32 beta = 1.5e30, x = 1.33e-30, threshold = 2: 9e5 ulp; beta = 1.1e21,
    # x = -1.7e9, threshold = -1.92e30: dx 0 for 1).
    yh, yl = two_prod(beta, x)
    # yh = threshold below 2^-90 (2^-900), where the residual may underflow, needs a
    # threshold that small: the residual is then taken 2^64 (2^128) larger (exact; beta
    # 2^k cannot overflow where yh can equal such a threshold), a choice on the parameter
    # alone (hoisted). A subnormal threshold takes the wrong branch (float32 beta = 3e-13,
    # x = 4.8e-33, threshold = 1.4e-45: 2.3e12 for 4.8e-33; float64 beta = 0.37,
    # x = -1.2e-318: 1.87 for -1.2e-318).
    if is_f32(x):
        sc = T(_TWO_64) if abs(threshold) < T(_TWO_M90) else T(1.0)
    else:
        sc = T(_TWO_128) if abs(threshold) < T(_TWO_M900) else T(1.0)
    ye = fma(beta * sc, x, -(yh * sc))
    # y = 0 with x > 0 is an underflowed product, positive (beta > 0): threshold = 0,
    # beta = x = 1e-25 (float32) would return log(2)/beta = 6.9e24 instead of x.
    linear = yh > threshold or (yh == threshold and (ye > T(0.0) or (yh == T(0.0) and x > T(0.0))))
    return yh, yl, linear


@kernel
def _neg_abs_y(yh, yl):
    """(-|y| as a dw pair, y > 0): the argument of the one exp both signs share."""
    T = type(yh)
    pos = yh > T(0.0)
    nh = -yh if pos else yh
    nl = -yl if pos else yl
    return nh, nl, pos


# Branch-free: both signs go through one exp and one log1p and the results are chosen
# by selects, so the element loops if-convert into SIMD code (a branch around the calls
# keeps them scalar).
@kernel
def softplus_f(x, beta, threshold):
    T = type(x)
    yh, yl, linear = _beta_x(x, beta, threshold)
    nh, nl, pos = _neg_abs_y(yh, yl)
    # log1p(exp(-|y|)) with the dw -|y|: for y << 0 the result is ~exp(y)/beta and exp
    # has condition |y|; for y > 0, x + log1p(exp(-y))/beta (no overflow: (y +
    # log1p(exp(-y)))/beta rounds y's sum and then the quotient, and goes to inf at x =
    # max where the truth rounds to max, e.g. float32 beta = 4.76e-38).
    # exp(-|y|) = m sc (exp_scaled): in its tail log1p(u) = u, kept 2^64 larger and
    # scaled last, so u/beta rounds once (with u rounded first, beta = 0.001 would be
    # hundreds of subnormal steps off); exp_scaled_over keeps it normal for a tiny beta too, where
    # u/beta is normal. For y > 0 in that tail u/beta is below x's rounding.
    m, b, sc = exp_scaled_over(nh, nl, beta)
    near = sc == T(1.0)
    l = log1p_unit(m) if near else m  # noqa: E741  (the kernels' C++ keeps the name)
    r = x + (l if near else T(0.0)) / beta if pos else (l / b) * sc
    return x if linear else r


@kernel
def softplus_dx(x, beta, threshold):
    T = type(x)
    yh, yl, linear = _beta_x(x, beta, threshold)
    nh, nl, pos = _neg_abs_y(yh, yl)
    # sigma(y) = 1/(1 + e) for y > 0 and e/(1 + e) otherwise, e = exp(-|y|).
    e = exp_dw(nh, nl)
    num = T(1.0) if pos else e
    r = num / (T(1.0) + e)
    return T(1.0) if linear else r


# The bulk: beta = 1 (the default: y = x exactly, no dw low part) and exp(-|x|) normal.
# The same bits as the kernels above there (see define's bulk).
@kernel
def _softplus_bulk_domain(x, beta, threshold):
    T = type(x)
    return beta == T(1.0) and abs(x) <= (
        T(80.0) if is_f32(x) else T(700.0)
    )  # short of exp_scaled's tail


@kernel
def softplus_f_bulk(x, beta, threshold):
    T = type(x)
    l = log1p_unit(exp_normal(-abs(x)))  # noqa: E741  exp(-|x|) is in (0, 1]
    r = x + l if x > T(0.0) else l
    return x if x > threshold else r


@kernel
def softplus_dx_bulk(x, beta, threshold):
    T = type(x)
    e = exp_normal(-abs(x))
    num = T(1.0) if x > T(0.0) else e
    r = num / (T(1.0) + e)
    return T(1.0) if x > threshold else r


@kernel
def _softplus_dbeta32(x, beta, threshold):
    """float32's d_beta in float64, rounded once: y = beta x is exact there (the branch
    test too), and e^-|y| and beta^2 are normal wherever the float32 result is not 0
    (|y| < 745, beta^2 >= 2^-298), so it needs no scaling (float32's own exp, scaled by
    2^64, underflowed where the result is normal: beta = 3.8e-31, x = -4e32 gave 0 for
    -1.6e-3; one scale cannot cover it, the result's range being twice beta's)."""
    T = type(x)
    bd = numba.float64(beta)
    y = bd * numba.float64(x)
    D = type(y)
    a = abs(y)
    u = math.exp(-a)
    t = D(0.0) if u == D(0.0) else a * (u / (D(1.0) + u))  # y = -inf: no inf * 0
    r = -(t + log1p_unit(u)) / (bd * bd)
    return T(0.0) if y > numba.float64(threshold) else T(r)


# float64 beta < 1: the tail's e^y is taken as m 2^-S with S = 2n or 2n + 64, beta 2^n
# in [2^-16, 1) (n a multiple of 16, by a ladder of exact scalings), and the result as
# h / (beta^2 2^S): beta^2 2^S is then in [2^-32, 1) or [2^32, 2^64), m stays normal where
# the result is (the +64 for y below about -S ln2 - 7, where the result falls below ~1)
# and never overflows where it is finite. One shift for all y cannot do it: beta^2 spans
# twice beta's exponent range (float64 beta = 1e-300, x = -8e302: 0 for -2.9e255).
_K32_HI64, _K32_LO64 = 22.18070977791831, -5.96540375591777e-14  # 32 ln2, hi on 2^-41


@kernel
def _ladder(v, n, up, down, s):
    """(v up, n + s) where v < down (= 1/up, up = 2^s exactly), else (v, n)."""
    T = type(v)  # noqa: F841  (every kernel names its dtype T)
    low = v < down
    v = v * up if low else v
    n = n + s if low else n
    return v, n


@kernel
def softplus_db_prep(beta, threshold):
    """(k, d, b2, ysplit): in exp's tail the shift is 32 k ln2 (32 (k + 2) ln2 below
    ysplit) and h/beta^2 is (h/d)/b2 (d 2^64 below ysplit). beta >= 1 (and float32,
    which takes _softplus_dbeta32): exp_scaled's one shift of 64 ln2 and
    (h/beta)/(beta 2^64)."""
    T = type(beta)
    if is_f32(beta):
        z = T(0.0)
        return z, z, z, z
    if not beta < T(1.0):
        return T(2.0), beta, beta * T(_TWO_64), T(-math.inf)
    # each step keeps v exact and ends with v >= 2^-s (v >= 2^-2s before it)
    v, n = _ladder(beta, T(0.0), T(_TWO_512), T(_TWO_M512), T(512.0))
    v, n = _ladder(v, n, T(_TWO_512), T(_TWO_M512), T(512.0))
    v, n = _ladder(v, n, T(_TWO_256), T(_TWO_M256), T(256.0))
    v, n = _ladder(v, n, T(_TWO_128), T(_TWO_M128), T(128.0))
    v, n = _ladder(v, n, T(_TWO_64), T(_TWO_M64), T(64.0))
    v, n = _ladder(v, n, T(_TWO_32), T(_TWO_M32), T(32.0))
    v, n = _ladder(v, n, T(_TWO_16), T(_TWO_M16), T(16.0))
    k = n / T(16.0)  # S = 2n = 32 k
    return k, v * v, T(1.0), -(k * T(_K32_HI64)) - T(7.0)


@kernel
def softplus_dbeta_prepared(x, beta, threshold, k, d, b2, ysplit):
    """softplus_dbeta(x, beta, threshold), bit for bit, given softplus_db_prep(...)."""
    T = type(x)
    if is_f32(x):
        return _softplus_dbeta32(x, beta, threshold)
    yh, yl, linear = _beta_x(x, beta, threshold)
    # (y sigma(y) - softplus(y))/beta^2. The bracket h is even in y and equals
    # -(|y| u/(1 + u) + log1p(u)) with u = exp(-|y|): two terms of one sign, where the
    # textbook form cancels to ~(1 + y) e^-y for y >> 0.
    nh, nl, pos = _neg_abs_y(yh, yl)
    tail = nh < T(-700.0)
    deep = nh < ysplit
    kk = (k + T(2.0) if deep else k) if tail else T(0.0)
    m = exp_dw(nh + kk * T(_K32_HI64), nl + kk * T(_K32_LO64))  # kk 32 ln2's hi: exact
    # in the tail u = m 2^-S is below e^-700: 1 + u = 1 and log1p(u) = u, kept as m
    u = T(0.0) if tail else m
    a = T(0.0) if m == T(0.0) else abs(yh)  # u = 0 at y = -inf, where |y| u would be NaN
    t = a * (m / (T(1.0) + u))
    h = -(t + (m if tail else log1p_unit(u)))
    r = (h / ((d * T(_TWO_64) if deep else d) if tail else beta)) / (b2 if tail else beta)
    return T(0.0) if linear else r


@kernel
def softplus_dbeta(x, beta, threshold):
    k, d, b2, ysplit = softplus_db_prep(beta, threshold)
    return softplus_dbeta_prepared(x, beta, threshold, k, d, b2, ysplit)


@kernel
def softplus_dthreshold(x, beta, threshold):
    T = type(x)
    if math.isnan(x):
        return x
    # The threshold only moves a jump discontinuity: the derivative is 0 almost everywhere.
    return T(0.0)


# --------------------------------------------------------------------------- references
def _ref_softplus(mp, x, b, t):
    y = b * x  # exact at 60 digits: two doubles' product has <= 106 bits
    if y > t:
        return x
    if mp.isinf(x):
        return mp.zero
    return mp.log1p(mp.exp(y)) / b


def _ref_softplus_dx(mp, x, b, t):
    y = b * x
    if y > t:
        return mp.one
    if mp.isinf(x):
        return mp.zero
    return 1 / (1 + mp.exp(-y))


def _ref_softplus_db(mp, x, b, t):
    y = b * x
    if y > t or mp.isinf(x):
        return mp.zero
    u = mp.exp(-abs(y))
    return -(abs(y) * u / (1 + u) + mp.log1p(u)) / b**2


def _ref_softplus_dt(mp, x, b, t):
    return mp.zero


define(
    "softplus",
    paper_table=True,
    torch="softplus",
    jax="softplus",
    summary="Softplus, a smooth ReLU; PyTorch's beta/threshold semantics.",
    formula=(
        r"\mathrm{Softplus}(x;\beta,\tau) = \begin{cases} x & \beta x > \tau\\"
        r" \frac{1}{\beta}\log\left(1 + e^{\beta x}\right) & \text{otherwise}\end{cases}"
    ),
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \sigma(\beta x),\quad"
        r"\frac{\partial f}{\partial \beta} = \frac{\beta x\,\sigma(\beta x) - \log(1+e^{\beta x})}{\beta^2}"
        r"\quad(\beta x \le \tau;\ 1\text{ and }0\text{ beyond}),\quad"
        r"\frac{\partial f}{\partial \tau} = 0"
    ),
    params=[
        Param(
            "beta",
            1.0,
            "Sharpness: larger beta is closer to ReLU.",
            lo=0.0,
            lo_open=True,
            test_values=(10.0, 0.5, 2.0, 100.0, 1e3, 0.37),
        ),
        Param(
            "threshold",
            20.0,
            "Above beta*x > threshold the identity is returned (PyTorch's cut-off for speed; "
            "it makes a jump of log1p(exp(-threshold))/beta there).",
            lo=-math.inf,
            test_values=(50.0, 0.0, 5.0, 1e3, -2.0, 13.7),
        ),
    ],
    f=softplus_f,
    dx=softplus_dx,
    bulk={"f": softplus_f_bulk, "dx": softplus_dx_bulk},
    bulk_domain=_softplus_bulk_domain,
    dparams={"beta": softplus_dbeta, "threshold": softplus_dthreshold},
    prepared={"beta": (softplus_db_prep, softplus_dbeta_prepared)},
    ref=_ref_softplus,
    ref_dx=_ref_softplus_dx,
    ref_dparams={"beta": _ref_softplus_db, "threshold": _ref_softplus_dt},
    special_points=(0.0, lambda p: p["threshold"] / p["beta"]),
    notes=(
        "Exactly PyTorch's definition, with the branch test beta x > threshold decided on "
        "the exact product (a Dekker two-product), so the jump at the threshold sits where "
        "the formula says. y = beta x is carried as a double-word pair: in the x << 0 tail "
        "the result is ~exp(beta x)/beta and exp's condition number |beta x| would "
        "otherwise cost |beta x|/2 ulp. For y > 0 it is y + log1p(exp(-y)) (no overflow). "
        "The beta-derivative (y sigma(y) - softplus(y))/beta^2 cancels for y >> 0 in that "
        "form; it is computed as -(|y| u/(1+u) + log1p(u))/beta^2 with u = exp(-|y|) "
        "(the bracket is even in y). In exp's tail the results are kept normal by exact "
        "powers of two, for a tiny beta too (e^(beta x)/beta is normal where e^(beta x) is "
        "not; float32's beta-derivative is computed in float64). The derivatives follow "
        "PyTorch at the threshold: "
        "df/dx = 1 and df/dbeta = 0 where beta x > threshold, sigma(beta x) and the smooth "
        "formula at equality. df/dthreshold = 0 almost everywhere (a jump's location)."
    ),
    references=(
        "Dugas et al., Incorporating Second-Order Functional Knowledge for Better Option "
        "Pricing, NIPS 2000",
        "PyTorch torch.nn.Softplus",
    ),
    example=(
        ">>> iglu_np.softplus(np.array([-1.0, 0.0, 1.0])).round(6)\n"
        "array([0.313262, 0.693147, 1.313262])\n"
        ">>> iglu_np.softplus(np.array([2.0, 30.0]), beta=2.0, threshold=4.0)  # 2*2 = 4 is not > 4\n"
        "array([ 2.00907496, 30.        ])"
    ),
)
