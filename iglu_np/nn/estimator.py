"""scikit-learn-style estimators: :class:`MLPClassifier` and :class:`MLPRegressor`.

Option names follow scikit-learn's ``MLPClassifier`` where the meaning is the same;
the additions are ``activation=`` (any registered iglu_np activation),
``activation_params=``, ``learnable_activation=``, ``per_unit=``, ``solver="adamw"``
with ``weight_decay=``, ``learning_rate="cosine"|"warmup"`` with ``warmup_epochs=``,
``clip_grad_norm=``, ``dropout=``, ``init=``, ``class_weight=`` and ``dtype=``.

Works without scikit-learn; when it is installed the estimators derive from its
``BaseEstimator`` and mixins (cloning, tags, pipelines, ``check_estimator``).

This module holds the output side of each estimator (labels or targets, loss, score,
prediction); what they share is in ``_base`` (fitting, stopping), ``_epochs`` (one epoch's
steps), ``_validation``, ``_persistence`` (save and load), ``_progress`` and ``_sklearn``.
"""

from __future__ import annotations

import warnings

import numpy as np

from . import autodiff as ad
from ._base import _BaseMLP
from ._persistence import load as _load
from ._persistence import model_class
from ._sklearn import (
    ClassifierMixin,
    ConvergenceWarning,
    DataConversionWarning,
    NotFittedError,
    RegressorMixin,
    SkBase,
    store_init_args,
)
from .autodiff import Tensor, to_host
from .data import class_weights as _class_weights
from .data import stratified_split

__all__ = ["MLPClassifier", "MLPRegressor", "NotFittedError", "ConvergenceWarning", "load"]


def load(path):
    """Load an :class:`MLPClassifier` or :class:`MLPRegressor` saved with ``.save``."""
    return _load(path)


_COMMON_DOC = """
    Parameter names and meanings follow scikit-learn's MLP estimators unless noted.

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default (100,)
        Units per hidden layer.
    activation : str, default "iglu"
        Any name in ``iglu_np.ACTIVATIONS``.
    activation_params : dict, optional
        Initial (or fixed) activation parameters, e.g. ``{"sigma": 0.5}``.
    learnable_activation : bool or list of str, default False
        Train these activation parameters (True: all). They stay in their domain through a
        reparameterisation (softplus above a lower bound, sigmoid in an interval; xIELU's
        alpha_p/alpha_n as in its paper), see :mod:`iglu_np.nn.layers`.
    per_unit : bool, default False
        Learnable parameters per hidden unit, not per layer.
    solver : {"adam", "sgd", "adamw"}, default "adam"
    alpha : float, default 1e-4
        L2 penalty on the weights, as scikit-learn (``0.5*alpha*||W||^2/batch_size`` added
        to the loss).
    weight_decay : float, default 0.01
        Decoupled decay, used by ``solver="adamw"``; biases and activation parameters are
        never decayed.
    learning_rate : {"constant", "invscaling", "adaptive", "cosine", "warmup"}
        Applied to every solver (scikit-learn applies it to SGD only); "cosine" is linear
        warmup over ``warmup_epochs`` then cosine decay to 0 at ``max_iter``; "warmup" is
        linear warmup then constant.
    warmup_epochs : int, default 0
        Epochs of linear warmup for ``learning_rate="cosine"`` or ``"warmup"``.
    clip_grad_norm : float or None
        Clip the global gradient norm per step.
    dropout : float in [0, 1)
        After every hidden activation.
    init : {"glorot", "kaiming"}
        "glorot" is scikit-learn's.
    dtype : {"float32", "float64"}
        "float32" (the default) is faster.
    batch_size, learning_rate_init, power_t, max_iter, shuffle
        As scikit-learn.
    random_state, tol, verbose, warm_start, momentum, nesterovs_momentum
        As scikit-learn.
    early_stopping, validation_fraction, beta_1, beta_2, epsilon, n_iter_no_change
        As scikit-learn.
"""


@model_class
class MLPClassifier(*((ClassifierMixin,) if ClassifierMixin is not None else ()), _BaseMLP):
    __doc__ = (
        "Multi-layer perceptron classifier (softmax output, cross-entropy loss) with any "
        "registered activation.\n"
        + _COMMON_DOC
        + """    class_weight : None, "balanced" or dict label -> weight
        Per-class weights of the cross-entropy (weighted mean, as PyTorch's
        ``cross_entropy(weight=)``).

    Notes
    -----
    Unlike scikit-learn, binary problems also use a 2-unit softmax output.
    """
    )

    _is_classifier = True

    def __init__(
        self,
        hidden_layer_sizes=(100,),
        activation="iglu",
        *,
        activation_params=None,
        learnable_activation=False,
        per_unit=False,
        solver="adam",
        alpha=0.0001,
        batch_size="auto",
        learning_rate="constant",
        learning_rate_init=0.001,
        power_t=0.5,
        max_iter=200,
        shuffle=True,
        random_state=None,
        tol=1e-4,
        verbose=0,
        warm_start=False,
        momentum=0.9,
        nesterovs_momentum=True,
        early_stopping=False,
        validation_fraction=0.1,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        n_iter_no_change=10,
        weight_decay=0.01,
        warmup_epochs=0,
        clip_grad_norm=None,
        dropout=0.0,
        init="glorot",
        class_weight=None,
        dtype="float32",
    ):
        store_init_args(self, locals())

    if SkBase is None:

        def score(self, X, y, sample_weight=None):
            """Mean accuracy of ``predict(X)`` against ``y``."""
            y = np.asarray(y)
            ok = (self.predict(X) == y).astype(np.float64)
            return float(np.average(ok, weights=sample_weight))

    def _n_outputs(self):
        return len(self.classes_)

    def _encode_y(self, y, fitting):
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            warnings.warn(
                "A column-vector y was passed when a 1d array was expected. Please change the "
                "shape of y to (n_samples,), for example using ravel().",
                DataConversionWarning,
                stacklevel=3,
            )
            y = y.ravel()
        if y.ndim != 1:
            raise ValueError(
                f"{type(self).__name__}: y should be a 1d array, got shape {y.shape} (multilabel is not supported)"
            )
        if y.dtype.kind == "f":
            if not np.isfinite(y).all():
                raise ValueError("Input y contains NaN or infinity.")
            if np.any(y != np.round(y)):
                raise ValueError(
                    "Unknown label type: continuous. MLPClassifier needs class labels; use MLPRegressor for continuous targets"
                )
        if y.dtype.kind == "O":
            try:
                y = y.astype(str) if all(isinstance(v, str) for v in y) else y
            except Exception:
                pass
        if fitting:
            self.classes_ = np.unique(y)
            if len(self.classes_) < 2:
                raise ValueError(
                    f"MLPClassifier needs samples of at least 2 classes in the data, but the data "
                    f"contains only one class: {self.classes_[0]!r}"
                )
        pos = np.searchsorted(self.classes_, y)
        pos = np.clip(pos, 0, len(self.classes_) - 1)
        bad = self.classes_[pos] != y
        if np.any(bad):
            raise ValueError(
                f"y contains labels not seen in classes_ {self.classes_!r}: {np.unique(y[bad])!r}"
            )
        return pos.astype(np.int64)

    def _class_weight_arr(self, y_enc):
        """Per-class cross-entropy weights from the (host, encoded) training labels."""
        cw = self.class_weight
        if cw is None:
            return None
        if isinstance(cw, dict):
            known = set(self.classes_.tolist())
            unknown = [k for k in cw if k not in known]
            if unknown:
                raise ValueError(
                    f"class_weight has labels {unknown!r} that are not in classes_ {self.classes_!r}"
                )
            cw = {int(np.searchsorted(self.classes_, k)): v for k, v in cw.items()}
        w = _class_weights(np.asarray(y_enc), len(self.classes_), cw)
        return self._xp_for_init().asarray(w.astype(np.dtype(self.dtype)))

    def _validation_split(self, y):
        return stratified_split(y, self.validation_fraction, random_state=[self._seed, 1])

    def _val_score(self, X_val, y_val_enc):
        # reduced where the data lives: one scalar crosses to the host
        xp = ad.array_module(X_val)
        pred = xp.argmax(self._predict_raw_checked(X_val), axis=1)
        return float(xp.mean(pred == y_val_enc))

    def _predict_raw_checked(self, X):  # X already validated (validation split)
        self.model_.eval()
        with ad.no_grad():
            out = self.model_(Tensor(X)).data
        return out

    def _loss(self, out, yb, weight):
        return ad.cross_entropy(out, yb, weight)

    def predict_proba(self, X):
        """Class probabilities, shape (n_samples, n_classes), rows summing to 1."""
        z = self._predict_raw(X)
        xp = ad.array_module(z)
        z = z - z.max(axis=1, keepdims=True)
        e = xp.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X):
        z = self._predict_raw(X)
        xp = ad.array_module(z)
        return ad._log_softmax(z, xp)

    def predict(self, X):
        """Most probable class label for each row."""
        z = to_host(self._predict_raw(X))
        return self.classes_[np.argmax(z, axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = False
        return tags


@model_class
class MLPRegressor(*((RegressorMixin,) if RegressorMixin is not None else ()), _BaseMLP):
    __doc__ = (
        "Multi-layer perceptron regressor (identity output, squared loss "
        "``0.5*mean((y - f(X))**2)`` as scikit-learn) with any registered activation.\n"
        + _COMMON_DOC
    )

    def __init__(
        self,
        hidden_layer_sizes=(100,),
        activation="iglu",
        *,
        activation_params=None,
        learnable_activation=False,
        per_unit=False,
        solver="adam",
        alpha=0.0001,
        batch_size="auto",
        learning_rate="constant",
        learning_rate_init=0.001,
        power_t=0.5,
        max_iter=200,
        shuffle=True,
        random_state=None,
        tol=1e-4,
        verbose=0,
        warm_start=False,
        momentum=0.9,
        nesterovs_momentum=True,
        early_stopping=False,
        validation_fraction=0.1,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        n_iter_no_change=10,
        weight_decay=0.01,
        warmup_epochs=0,
        clip_grad_norm=None,
        dropout=0.0,
        init="glorot",
        dtype="float32",
    ):
        store_init_args(self, locals())

    if SkBase is None:

        def score(self, X, y, sample_weight=None):
            """Coefficient of determination R^2 of ``predict(X)``."""
            y = np.asarray(y, dtype=np.float64)
            p = np.asarray(self.predict(X), dtype=np.float64).reshape(y.shape)
            w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
            ybar = np.average(y, axis=0, weights=w)
            ss_res = np.average((y - p) ** 2, axis=0, weights=w)
            ss_tot = np.average((y - ybar) ** 2, axis=0, weights=w)
            r2 = np.where(ss_tot > 0, 1 - ss_res / np.where(ss_tot > 0, ss_tot, 1), 0.0)
            return float(np.mean(r2))

    def _n_outputs(self):
        return self._n_targets

    def _encode_y(self, y, fitting):
        y = np.asarray(y)
        if y.dtype.kind not in "fiub":
            try:
                y = y.astype(np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"MLPRegressor: y must be numeric, got dtype {y.dtype}") from None
        if y.ndim not in (1, 2):
            raise ValueError(f"MLPRegressor: y must be 1-d or 2-d, got shape {y.shape}")
        if not np.isfinite(y).all():
            raise ValueError("Input y contains NaN or infinity.")
        if fitting:
            self._y_1d = y.ndim == 1
            self._n_targets = 1 if y.ndim == 1 else y.shape[1]
        y2 = y.reshape(len(y), -1).astype(np.dtype(self.dtype))
        if y2.shape[1] != getattr(self, "_n_targets", y2.shape[1]):
            raise ValueError(
                f"y has {y2.shape[1]} targets, the model was fitted with {self._n_targets}"
            )
        return y2

    def _init_model(self):
        if not hasattr(self, "_n_targets"):
            self._n_targets = getattr(self, "n_outputs_", 1)
        super()._init_model()

    def _validation_split(self, y):
        rng = np.random.default_rng([self._seed, 1])
        n = len(y)
        perm = rng.permutation(n)
        n_val = max(1, int(round(n * self.validation_fraction)))
        return np.sort(perm[n_val:]), np.sort(perm[:n_val])

    def _val_score(self, X_val, y_val):
        # reduced where the data lives: one scalar crosses to the host
        xp = ad.array_module(X_val)
        self.model_.eval()
        with ad.no_grad():
            p = self.model_(Tensor(X_val)).data.astype(np.float64)
        y = xp.asarray(y_val, dtype=np.float64)
        ss_res = ((y - p) ** 2).sum(axis=0)
        ss_tot = ((y - y.mean(axis=0)) ** 2).sum(axis=0)
        return float(xp.mean(1 - ss_res / xp.where(ss_tot > 0, ss_tot, 1)))

    def _loss(self, out, yb, weight):
        return ad.mul(ad.mse_loss(out, yb), 0.5)

    def predict(self, X):
        """Predicted targets, shape (n_samples,) or (n_samples, n_targets) as fitted."""
        z = self._predict_raw(X)
        if ad.array_module(z) is np:
            z = z.astype(np.float64)  # scikit-learn's regressors predict in float64
        return z[:, 0] if getattr(self, "_y_1d", True) else z

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags
