"""Softplus with PyTorch's semantics: (1/beta) log(1 + exp(beta x)), reverting to the
identity where beta x > threshold."""
import math

from .._math import _TWO_64, exp_dw, exp_normal, exp_scaled, fma, is_f32, log1p_unit, two_prod
from .._spec import Param, define, kernel


@kernel
def _beta_x(x, beta, threshold):
    """(yh, yl, linear): y = beta x as an exact dw pair, and PyTorch's branch test
    beta x > threshold decided on the exact product (a rounded product flips the branch,
    and with it a jump of log1p(exp(-threshold))/beta, right at the boundary)."""
    T = type(x)
    # The kernels take two_prod's pair (yl = 0 from |y| >= 1e30, where exp's tail no
    # longer needs it); the test takes fma's residual at every magnitude (the same fma: the
    # compilers share it): a rounded product took the wrong branch at y = threshold
    # (float32 beta = 1.5e30, x = 1.33e-30, threshold = 2: 9e5 ulp; beta = 1.1e21,
    # x = -1.7e9, threshold = -1.92e30: dx 0 for 1).
    yh, yl = two_prod(beta, x)
    ye = fma(beta, x, -yh)
    # y = 0 with x > 0 is an underflowed product, positive (beta > 0): threshold = 0,
    # beta = x = 1e-25 (float32) returned log(2)/beta = 6.9e24 instead of x.
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
    # has condition |y|; for y > 0, y + log1p(exp(-y)) (no overflow), the low part of y
    # entering additively. exp(-|y|) = m sc (exp_scaled): in its tail log1p(u) = u, kept
    # 2^64 larger and scaled last, so u/beta rounds once (beta = 0.001: 496 subnormal
    # steps off when u was rounded first).
    m, sc = exp_scaled(nh, nl)
    l = log1p_unit(m) if sc == T(1.0) else m
    r = (yh + (yl + l * sc)) / beta if pos else (l / beta) * sc
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
    return beta == T(1.0) and abs(x) <= (T(80.0) if is_f32(x) else T(700.0))  # short of exp_scaled's tail


@kernel
def softplus_f_bulk(x, beta, threshold):
    T = type(x)
    l = log1p_unit(exp_normal(-abs(x)))  # exp(-|x|) is in (0, 1]
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
def softplus_dbeta(x, beta, threshold):
    T = type(x)
    yh, yl, linear = _beta_x(x, beta, threshold)
    # (y sigma(y) - softplus(y))/beta^2. The bracket h is even in y and equals
    # -(|y| u/(1 + u) + log1p(u)) with u = exp(-|y|): two terms of one sign, where the
    # textbook form cancels to ~(1 + y) e^-y for y >> 0.
    nh, nl, pos = _neg_abs_y(yh, yl)
    # u = m sc (exp_scaled): in the far tail, where u is subnormal, the bracket is kept
    # 2^64 larger (log1p(u) = u there) and sc is applied in the last division, one rounding.
    m, sc = exp_scaled(nh, nl)
    u = m * sc
    a = T(0.0) if m == T(0.0) else abs(yh)  # u = 0 at y = -inf, where |y| u would be NaN
    t = a * (m / (T(1.0) + u))
    h = -(t + (math.log1p(u) if sc == T(1.0) else m))
    # sc on the second beta, as beta 2^64 (exact; exp_scaled's sc is 2^-64 or 1): applied
    # last, h/beta^2 (kept 2^64 larger in exp's tail) overflowed first for a tiny beta
    # (float32 beta = 6.3e-32, x = -1.6e33: -inf for -5.7e21). The same roundings.
    bs = beta * (T(_TWO_64) if sc < T(1.0) else T(1.0))
    r = (h / beta) / bs
    return T(0.0) if linear else r


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
        "(the bracket is even in y). The derivatives follow PyTorch at the threshold: "
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
