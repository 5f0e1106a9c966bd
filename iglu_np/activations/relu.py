"""Piecewise-linear rectifiers: identity, ReLU, squared ReLU, leaky ReLU and PReLU.

Every value here is one exact operation (or one rounding), so the interest is in the
conventions: the derivative at the kink follows PyTorch's autograd (checked against
torch 2.13), NaN is never turned into a number by a comparison, and the limits at
+-inf come out without inf*0.
"""

import math

from .._spec import Param, define, kernel

_TORCH = "PyTorch torch.nn.functional documentation (relu, leaky_relu, prelu)"


# --------------------------------------------------------------------------- identity
@kernel
def identity_f(x):
    return x


@kernel
def identity_dx(x):
    T = type(x)
    if math.isnan(x):  # 0*x + 1 would also turn +-inf into NaN
        return x
    return T(1.0)


# --------------------------------------------------------------------------- relu
@kernel
def relu_f(x):
    T = type(x)
    # `x <= 0` is False for NaN, so NaN falls through; -0.0 gives +0.0 like torch.
    if x <= T(0.0):
        return T(0.0)
    return x


@kernel
def relu_dx(x):
    T = type(x)
    if x > T(0.0):
        return T(1.0)
    if math.isnan(x):
        return x
    return T(0.0)  # relu'(0) = 0, PyTorch's convention


@kernel
def relu2_f(x):
    T = type(x)
    if x <= T(0.0):
        return T(0.0)
    return x * x


@kernel
def relu2_dx(x):
    T = type(x)
    if x <= T(0.0):
        return T(0.0)
    return x + x


# --------------------------------------------------------------------------- leaky / PReLU
@kernel
def leaky_f(x, a):
    T = type(x)
    if x > T(0.0):
        return x
    if a == T(0.0) and x == x:
        return T(0.0)  # slope 0 is ReLU: 0 at x = -inf, where a*x would be 0*inf = NaN
    return a * x  # NaN stays NaN


@kernel
def leaky_dx(x, a):
    T = type(x)
    if x > T(0.0):
        return T(1.0)
    if math.isnan(x):
        return x
    return a  # f'(0) = slope (PyTorch: x > 0 ? 1 : slope)


@kernel
def leaky_da(x, a):
    T = type(x)
    if x > T(0.0):
        return T(0.0)
    return x  # 0 at x = 0 either way; NaN passes through


# --------------------------------------------------------------------------- references
def _ref_relu(mp, x):
    return x if x > 0 else mp.zero


def _ref_leaky(mp, x, a):
    if x > 0:
        return x
    return mp.zero if a == 0 else a * x


define(
    "identity",
    monotonic=True,
    summary="The identity map (a linear layer's missing activation), with its derivatives.",
    formula=r"f(x) = x",
    derivative_formula=r"f'(x) = 1",
    f=identity_f,
    dx=identity_dx,
    ref=lambda mp, x: x,
    ref_dx=lambda mp, x: mp.one,
    notes="dx is 1 everywhere, +-inf included; NaN gives NaN.",
    references=("torch.nn.Identity",),
    example=(
        ">>> iglu_np.identity(np.array([-2.0, 0.0, 3.5]))\narray([-2. ,  0. ,  3.5])\n"
        ">>> iglu_np.identity.dx(np.array([-np.inf, 0.0]))\narray([1., 1.])"
    ),
)

define(
    "relu",
    paper_table=True,
    torch="relu",
    jax="relu",
    monotonic=True,
    summary="Rectified linear unit.",
    formula=r"\mathrm{ReLU}(x) = \max(0, x)",
    derivative_formula=r"\mathrm{ReLU}'(x) = \begin{cases} 1 & x > 0\\ 0 & x \le 0\end{cases}",
    f=relu_f,
    dx=relu_dx,
    ref=_ref_relu,
    ref_dx=lambda mp, x: mp.one if x > 0 else mp.zero,
    notes=(
        "Kink convention: relu'(0) = 0, as PyTorch's autograd (also at -0.0). "
        "relu(-0.0) is +0.0. NaN propagates (max(0, NaN) is not used)."
    ),
    special_points=(0.0,),
    references=("Nair & Hinton, ICML 2010", _TORCH),
    example=(
        ">>> iglu_np.relu(np.array([-2.0, 0.0, 3.5]))\narray([0. , 0. , 3.5])\n"
        ">>> iglu_np.relu.dx(np.array([-1.0, 0.0, 1.0]))\narray([0., 0., 1.])"
    ),
)

define(
    "relu2",
    monotonic=True,
    summary="Squared ReLU (Primer, So et al. 2021).",
    formula=r"f(x) = \max(0, x)^2",
    derivative_formula=r"f'(x) = 2\max(0, x)",
    f=relu2_f,
    dx=relu2_dx,
    ref=lambda mp, x: x * x if x > 0 else mp.zero,
    ref_dx=lambda mp, x: 2 * x if x > 0 else mp.zero,
    notes=(
        "Continuously differentiable: f'(0) = 0 from both sides. x^2 overflows to +inf "
        "for x > sqrt(max float), which is the correctly rounded value."
    ),
    special_points=(0.0,),
    references=("So et al., Primer: Searching for Efficient Transformers, NeurIPS 2021",),
    example=(
        ">>> iglu_np.relu2(np.array([-2.0, 0.0, 3.0]))\narray([0., 0., 9.])\n"
        ">>> iglu_np.relu2.dx(np.array([-2.0, 0.0, 3.0]))\narray([0., 0., 6.])"
    ),
)

_SLOPE = Param(
    "negative_slope",
    0.01,
    "Slope for x <= 0 (PyTorch's default 0.01; any finite value is accepted).",
    test_values=(0.0, 0.2, 1.0, -0.5, 3.0, 0.37),
)

define(
    "leaky_relu",
    torch="leaky_relu",
    jax="leaky_relu",
    monotonic=True,
    summary="Leaky ReLU: a small fixed slope for negative inputs.",
    formula=r"f(x;a) = \begin{cases} x & x > 0\\ a x & x \le 0\end{cases}",
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \begin{cases} 1 & x > 0\\ a & x \le 0\end{cases},\quad"
        r"\frac{\partial f}{\partial a} = \min(x, 0)"
    ),
    params=[_SLOPE],
    f=leaky_f,
    dx=leaky_dx,
    dparams={"negative_slope": leaky_da},
    ref=_ref_leaky,
    ref_dx=lambda mp, x, a: mp.one if x > 0 else a,
    ref_dparams={"negative_slope": lambda mp, x, a: mp.zero if x > 0 else x},
    notes=(
        "Kink convention: f'(0) = negative_slope, as PyTorch's autograd "
        "(leaky_relu_backward uses x > 0 ? 1 : slope)."
    ),
    special_points=(0.0,),
    references=("Maas, Hannun & Ng, ICML 2013 workshop", _TORCH),
    example=(
        ">>> iglu_np.leaky_relu(np.array([-2.0, 0.0, 3.0]))\narray([-0.02,  0.  ,  3.  ])\n"
        ">>> iglu_np.leaky_relu.dx(np.array([-2.0, 0.0, 3.0]), negative_slope=0.2)\n"
        "array([0.2, 0.2, 1. ])"
    ),
)

_WEIGHT = Param(
    "weight",
    0.25,
    "Learnable slope for x <= 0 (PyTorch's init 0.25). A per-channel weight broadcasts "
    "numpy-style: for NCHW input pass weight.reshape(C, 1, 1).",
    test_values=(0.0, 0.01, 1.0, -0.3, 2.5, 0.61),
)

define(
    "prelu",
    monotonic=True,
    summary="Parametric ReLU: leaky ReLU with a learnable (scalar or per-channel) slope.",
    formula=r"f(x;w) = \begin{cases} x & x > 0\\ w x & x \le 0\end{cases}",
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \begin{cases} 1 & x > 0\\ w & x \le 0\end{cases},\quad"
        r"\frac{\partial f}{\partial w} = \min(x, 0)"
    ),
    params=[_WEIGHT],
    f=leaky_f,
    dx=leaky_dx,
    dparams={"weight": leaky_da},
    ref=_ref_leaky,
    ref_dx=lambda mp, x, w: mp.one if x > 0 else w,
    ref_dparams={"weight": lambda mp, x, w: mp.zero if x > 0 else x},
    notes=(
        "Kink convention: f'(0) = weight, as PyTorch's autograd for F.prelu; "
        "df/dweight = min(x, 0) (0 at x = 0). backward_params sums the weight gradient "
        "over the broadcast axes, so a per-channel weight gets a per-channel gradient."
    ),
    special_points=(0.0,),
    references=("He et al., Delving Deep into Rectifiers, ICCV 2015", _TORCH),
    example=(
        ">>> x = np.array([[-2.0, 1.0], [-4.0, 3.0]])\n"
        ">>> iglu_np.prelu(x, weight=np.array([[0.1], [0.5]]))\n"
        "array([[-0.2,  1. ],\n       [-2. ,  3. ]])\n"
        ">>> iglu_np.prelu.backward_params(x, np.ones_like(x), weight=np.array([[0.1], [0.5]]))"
        "['weight']\narray([[-2.],\n       [-4.]])"
    ),
)
