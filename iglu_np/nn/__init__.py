"""``iglu_np.nn``: a minimal numpy autodiff, layers, optimisers and scikit-learn-style
MLP estimators that train with any registered activation (parameters fixed or learnable).

>>> from iglu_np.nn import MLPClassifier
>>> clf = MLPClassifier((64,), activation="iglu", activation_params={"sigma": 0.5},
...                     learnable_activation=True, max_iter=20, random_state=0)

Sub-modules: :mod:`.autodiff` (Tensor and ops), :mod:`.layers` (Linear, ActivationLayer,
MLP), :mod:`.optim` (SGD, Adam, AdamW, schedules, clipping), :mod:`.estimator`
(MLPClassifier, MLPRegressor, save/load), :mod:`.data` (long-tailed subsampling,
digits, balanced metrics), :mod:`.experiments` (the paper's Table 4 in miniature).
"""

from . import autodiff, data, layers, optim
from .autodiff import Tensor, no_grad
from .data import (
    balanced_accuracy,
    load_digits,
    long_tailed_counts,
    long_tailed_subsample,
    per_class_recall,
)
from .layers import MLP, ActivationLayer, Dropout, Linear, Sequential
from .optim import SGD, Adam, AdamW, clip_grad_norm, param_groups

__all__ = [
    "ConvergenceWarning",
    "Tensor",
    "no_grad",
    "MLP",
    "Linear",
    "ActivationLayer",
    "Dropout",
    "Sequential",
    "SGD",
    "Adam",
    "AdamW",
    "clip_grad_norm",
    "param_groups",
    "MLPClassifier",
    "MLPRegressor",
    "NotFittedError",
    "load",
    "balanced_accuracy",
    "per_class_recall",
    "long_tailed_subsample",
    "long_tailed_counts",
    "load_digits",
    "autodiff",
    "layers",
    "optim",
    "data",
]

# The estimators import scikit-learn's base classes (about 0.8 s): loaded on first use, so
# that importing iglu_np.nn (e.g. for `iglu-np train --help`) stays fast.
_LAZY = {
    "MLPClassifier",
    "MLPRegressor",
    "NotFittedError",
    "ConvergenceWarning",
    "load",
    "estimator",
    "experiments",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        mod = importlib.import_module(
            f"{__name__}.estimator" if name != "experiments" else f"{__name__}.experiments"
        )
        return mod if name in ("estimator", "experiments") else getattr(mod, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _LAZY)
