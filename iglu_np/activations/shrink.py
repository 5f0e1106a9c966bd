"""Shrinkage operators: hardshrink (hard thresholding) and softshrink (soft thresholding,
the proximal map of lambda*|x|)."""

import math

from .._spec import Param, define, kernel

_TORCH = "PyTorch torch.nn.functional documentation (hardshrink, softshrink)"


# --------------------------------------------------------------------------- hardshrink
@kernel
def hardshrink_f(x, lam):
    T = type(x)
    # PyTorch: (x >= -lambd && x <= lambd) ? 0 : x. NaN fails the test and stays NaN.
    if abs(x) <= lam:
        return T(0.0)
    return x


@kernel
def hardshrink_dx(x, lam):
    T = type(x)
    if abs(x) > lam:
        return T(1.0)
    if math.isnan(x):
        return x
    return T(0.0)


@kernel
def hardshrink_dlam(x, lam):
    T = type(x)
    if math.isnan(x):
        return x
    return T(0.0)


# --------------------------------------------------------------------------- softshrink
@kernel
def softshrink_f(x, lam):
    T = type(x)
    if abs(x) <= lam:
        return T(0.0)
    # x - lam is exact just above lam (Sterbenz): no loss near the threshold.
    return x - math.copysign(lam, x)


@kernel
def softshrink_dx(x, lam):
    T = type(x)
    if abs(x) > lam:
        return T(1.0)
    if math.isnan(x):
        return x
    return T(0.0)


@kernel
def softshrink_dlam(x, lam):
    T = type(x)
    if abs(x) > lam:
        return -math.copysign(T(1.0), x)
    if math.isnan(x):
        return x
    return T(0.0)


_HARD_LAMBDA = Param(
    "lambd",
    0.5,
    "Threshold: |x| <= lambd maps to 0 (PyTorch's default 0.5).",
    lo=0.0,
    test_values=(0.0, 0.1, 1.0, 2.5, 1e3, 0.83),
)
_SOFT_LAMBDA = Param(
    "lambd",
    0.5,
    "Threshold subtracted from |x| (PyTorch's default 0.5; PyTorch also requires >= 0).",
    lo=0.0,
    test_values=(0.0, 0.1, 1.0, 2.5, 1e3, 0.83),
)

_SPECIAL = (lambda p: p["lambd"], lambda p: -p["lambd"])

define(
    "hardshrink",
    monotonic=True,
    summary="Hard shrinkage: zero inside [-lambd, lambd], identity outside.",
    formula=r"f(x;\lambda) = \begin{cases} x & |x| > \lambda\\ 0 & |x| \le \lambda\end{cases}",
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \mathbb{1}[|x| > \lambda],\quad"
        r"\frac{\partial f}{\partial \lambda} = 0 \text{ for } |x| \ne \lambda"
    ),
    params=[_HARD_LAMBDA],
    f=hardshrink_f,
    dx=hardshrink_dx,
    dparams={"lambd": hardshrink_dlam},
    ref=lambda mp, x, lam: x if abs(x) > lam else mp.zero,
    ref_dx=lambda mp, x, lam: mp.one if abs(x) > lam else mp.zero,
    ref_dparams={"lambd": lambda mp, x, lam: mp.zero},
    notes=(
        "f jumps by lambd at |x| = lambd: the points |x| = lambd map to 0 (PyTorch). "
        "Kink convention: df/dx = 0 at |x| = lambd (PyTorch's hardshrink_backward). "
        "df/dlambd is 0 wherever it exists (everywhere but |x| = lambd, where the jump "
        "moves with lambd and the derivative is a Dirac delta); 0 is returned there too, "
        "so a trainable threshold gets no gradient from this kernel."
    ),
    special_points=_SPECIAL,
    references=(_TORCH,),
    example=(
        ">>> iglu_np.hardshrink(np.array([-1.0, -0.5, 0.2, 0.7]))\n"
        "array([-1. ,  0. ,  0. ,  0.7])\n"
        ">>> iglu_np.hardshrink.dx(np.array([-1.0, -0.5, 0.2, 0.7]))\n"
        "array([1., 0., 0., 1.])"
    ),
)

define(
    "softshrink",
    monotonic=True,
    summary="Soft shrinkage (soft thresholding): |x| reduced by lambd, clipped at 0.",
    formula=r"f(x;\lambda) = \operatorname{sign}(x)\max(|x| - \lambda, 0)",
    derivative_formula=(
        r"\frac{\partial f}{\partial x} = \mathbb{1}[|x| > \lambda],\quad"
        r"\frac{\partial f}{\partial \lambda} = -\operatorname{sign}(x)\,\mathbb{1}[|x| > \lambda]"
    ),
    params=[_SOFT_LAMBDA],
    f=softshrink_f,
    dx=softshrink_dx,
    dparams={"lambd": softshrink_dlam},
    ref=lambda mp, x, lam: (x - mp.sign(x) * lam) if abs(x) > lam else mp.zero,
    ref_dx=lambda mp, x, lam: mp.one if abs(x) > lam else mp.zero,
    ref_dparams={"lambd": lambda mp, x, lam: -mp.sign(x) if abs(x) > lam else mp.zero},
    notes=(
        "Continuous; kink convention: df/dx = 0 at |x| = lambd (PyTorch's "
        "softshrink_backward) and likewise df/dlambd = 0 there (the value on the flat "
        "side, consistent with df/dx). x - lambd is exact near the threshold."
    ),
    special_points=_SPECIAL,
    references=("Donoho, De-noising by soft-thresholding, IEEE Trans. IT 1995", _TORCH),
    example=(
        ">>> iglu_np.softshrink(np.array([-1.0, -0.5, 0.2, 0.75]))\n"
        "array([-0.5 ,  0.  ,  0.  ,  0.25])\n"
        ">>> iglu_np.softshrink.dparams(np.array([-1.0, 0.2, 0.75]))['lambd']\n"
        "array([ 1.,  0., -1.])"
    ),
)
