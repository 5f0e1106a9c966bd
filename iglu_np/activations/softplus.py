"""Softplus with PyTorch's semantics: (1/beta) log(1 + exp(beta x)), reverting to the
identity where beta x > threshold."""
import math

from .._math import exp_dw, two_prod
from .._spec import Param, define, kernel


@kernel
def _beta_x(x, beta, threshold):
    """(yh, yl, linear): y = beta x as an exact dw pair, and PyTorch's branch test
    beta x > threshold decided on the exact product (a rounded product flips the branch,
    and with it a jump of log1p(exp(-threshold))/beta, right at the boundary)."""
    T = type(x)
    yh, yl = two_prod(beta, x)
    linear = yh > threshold or (yh == threshold and yl > T(0.0))
    return yh, yl, linear


@kernel
def softplus_f(x, beta, threshold):
    T = type(x)
    yh, yl, linear = _beta_x(x, beta, threshold)
    if linear:
        return x
    if yh > T(0.0):
        # y + log1p(exp(-y)): no overflow; the low part of y enters additively.
        return (yh + (yl + math.log1p(math.exp(-yh)))) / beta
    # For y << 0 the result is ~exp(y)/beta and exp has condition |y|: use the dw y.
    return math.log1p(exp_dw(yh, yl)) / beta


@kernel
def softplus_dx(x, beta, threshold):
    T = type(x)
    yh, yl, linear = _beta_x(x, beta, threshold)
    if linear:
        return T(1.0)
    if yh > T(0.0):
        return T(1.0) / (T(1.0) + exp_dw(-yh, -yl))
    e = exp_dw(yh, yl)
    return e / (T(1.0) + e)


@kernel
def softplus_dbeta(x, beta, threshold):
    T = type(x)
    yh, yl, linear = _beta_x(x, beta, threshold)
    if linear:
        return T(0.0)
    # (y sigma(y) - softplus(y))/beta^2. The bracket h is even in y and equals
    # -(|y| u/(1 + u) + log1p(u)) with u = exp(-|y|): two terms of one sign, where the
    # textbook form cancels to ~(1 + y) e^-y for y >> 0.
    if yh > T(0.0):
        u = exp_dw(-yh, -yl)
    else:
        u = exp_dw(yh, yl)
    t = T(0.0)
    if u > T(0.0):  # u = 0 at y = -inf, where |y| u would be NaN
        t = abs(yh) * (u / (T(1.0) + u))
    h = -(t + math.log1p(u))
    return h / beta / beta


@kernel
def softplus_dthreshold(x, beta, threshold):
    T = type(x)
    if x != x:
        return x
    # The threshold only moves a jump discontinuity: the derivative is 0 almost everywhere.
    return T(0.0)


# --------------------------------------------------------------------------- C++ (GPU)
# The same kernels for CuPy (NVRTC) and the host g++ build, operation for operation; the
# conventions are in iglu_np/include/iglu_np/iglu_np.cuh.
_CXX = r"""
namespace iglu_np {

// _beta_x: y = beta x as an exact dw pair, and beta x > threshold decided on the exact
// product (a rounded product would move PyTorch's jump off the boundary).
template <class T> struct softplus_y_t { T hi, lo; bool linear; };

template <class T> IGLU_NP_HOST_DEVICE softplus_y_t<T> softplus_beta_x(T x, T beta, T threshold) {
  const dw<T> y = two_prod(beta, x);
  softplus_y_t<T> r = {y.hi, y.lo, y.hi > threshold || (y.hi == threshold && y.lo > T(0))};
  return r;
}

template <class T> IGLU_NP_HOST_DEVICE T softplus_fwd(T x, T beta, T threshold) {
  const softplus_y_t<T> y = softplus_beta_x(x, beta, threshold);
  if (y.linear) return x;
  // y + log1p(exp(-y)): no overflow; the low part of y enters additively.
  if (y.hi > T(0)) return (y.hi + (y.lo + log1p(exp(-y.hi)))) / beta;
  // ~exp(y)/beta for y << 0, and exp has condition |y|: the dw y.
  return log1p(exp_dw(y.hi, y.lo)) / beta;
}

template <class T> IGLU_NP_HOST_DEVICE T softplus_dx(T x, T beta, T threshold) {
  const softplus_y_t<T> y = softplus_beta_x(x, beta, threshold);
  if (y.linear) return T(1);
  if (y.hi > T(0)) return T(1) / (T(1) + exp_dw(-y.hi, -y.lo));
  const T e = exp_dw(y.hi, y.lo);
  return e / (T(1) + e);
}

template <class T> IGLU_NP_HOST_DEVICE T softplus_dbeta(T x, T beta, T threshold) {
  const softplus_y_t<T> y = softplus_beta_x(x, beta, threshold);
  if (y.linear) return T(0);
  // -(|y| u/(1 + u) + log1p(u))/beta^2, u = exp(-|y|): two terms of one sign.
  T u;
  if (y.hi > T(0)) {
    u = exp_dw(-y.hi, -y.lo);
  } else {
    u = exp_dw(y.hi, y.lo);
  }
  T t = T(0);
  if (u > T(0)) t = fabs(y.hi) * (u / (T(1) + u));  // u = 0 at y = -inf: |y| u is NaN
  const T h = -(t + log1p(u));
  return h / beta / beta;
}

template <class T> IGLU_NP_HOST_DEVICE T softplus_dthreshold(T x, T, T) {
  if (x != x) return x;
  return T(0);  // the threshold only moves a jump: 0 almost everywhere
}

}  // namespace iglu_np
"""


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
            symbol=r"\beta",
            test_values=(10.0, 0.5, 2.0, 100.0, 1e3, 0.37),
        ),
        Param(
            "threshold",
            20.0,
            "Above beta*x > threshold the identity is returned (PyTorch's cut-off for speed; "
            "it makes a jump of log1p(exp(-threshold))/beta there).",
            lo=-math.inf,
            symbol=r"\tau",
            test_values=(50.0, 0.0, 5.0, 1e3, -2.0, 13.7),
        ),
    ],
    f=softplus_f,
    dx=softplus_dx,
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
    cxx=_CXX,
    example=(
        ">>> iglu_np.softplus(np.array([-1.0, 0.0, 1.0])).round(6)\n"
        "array([0.313262, 0.693147, 1.313262])\n"
        ">>> iglu_np.softplus(np.array([2.0, 30.0]), beta=2.0, threshold=4.0)  # 2*2 = 4 is not > 4\n"
        "array([ 2.00907496, 30.        ])"
    ),
)
