"""scikit-learn-style estimators: :class:`MLPClassifier` and :class:`MLPRegressor`.

Option names follow scikit-learn's ``MLPClassifier`` where the meaning is the same;
the additions are ``activation=`` (any registered iglu_np activation),
``activation_params=``, ``learnable_activation=``, ``per_unit=``, ``solver="adamw"``
with ``weight_decay=``, ``learning_rate="cosine"|"warmup"`` with ``warmup_epochs=``,
``clip_grad_norm=``, ``dropout=``, ``init=``, ``class_weight=`` and ``dtype=``.

Works without scikit-learn; when it is installed the estimators derive from its
``BaseEstimator`` and mixins (cloning, tags, pipelines, ``check_estimator``).
"""
from __future__ import annotations

import inspect
import json
import math
import os
import sys
import tempfile
import time
import warnings
import zipfile

import numpy as np

from . import autodiff as ad
from .autodiff import Tensor, to_host
from .data import class_weights as _class_weights
from .data import stratified_split
from .layers import MLP, ActivationLayer, Dropout, Linear
from .optim import SCHEDULES, clip_grad_norm, make_optimizer, param_groups

try:  # optional: only for interoperability
    from sklearn.base import BaseEstimator as _SkBase
    from sklearn.base import ClassifierMixin as _SkClf
    from sklearn.base import RegressorMixin as _SkReg
    from sklearn.exceptions import DataConversionWarning as _DataConversionWarning
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.exceptions import NotFittedError
except ImportError:  # pragma: no cover - exercised in environments without scikit-learn
    _SkBase = _SkClf = _SkReg = None

    class NotFittedError(ValueError, AttributeError):
        """Raised when predicting with an estimator that has not been fitted."""

    class _DataConversionWarning(UserWarning):
        pass

    class ConvergenceWarning(UserWarning):
        """The optimisation reached max_iter before it converged (scikit-learn's name)."""


__all__ = ["MLPClassifier", "MLPRegressor", "NotFittedError", "ConvergenceWarning", "load"]

FORMAT = "iglu_np.nn.mlp/1"
_LOSS_MAX = float(np.finfo(np.float32).max)


def _store_init_args(est, args: dict) -> None:
    """scikit-learn convention: ``__init__`` stores every argument unchanged under its own
    name (``get_params`` reads them back through the signature)."""
    for k, v in args.items():
        if k != "self" and k != "__class__":
            setattr(est, k, v)


class _ParamsMixin:
    """get_params/set_params/repr from the ``__init__`` signature (scikit-learn's contract)."""

    @classmethod
    def _get_param_names(cls):
        sig = inspect.signature(cls.__init__)
        return sorted(p.name for p in sig.parameters.values() if p.name != "self")

    def get_params(self, deep=True):
        return {k: getattr(self, k) for k in self._get_param_names()}

    def set_params(self, **params):
        valid = self._get_param_names()
        for k, v in params.items():
            if k not in valid:
                raise ValueError(f"invalid parameter {k!r} for {type(self).__name__}; valid: {valid}")
            setattr(self, k, v)
        return self

    def __repr__(self):
        sig = inspect.signature(type(self).__init__)
        changed = [
            f"{k}={getattr(self, k)!r}"
            for k, p in sig.parameters.items()
            if k != "self" and getattr(self, k) is not p.default
            and not _equal(getattr(self, k), p.default)
        ]
        return f"{type(self).__name__}({', '.join(changed)})"


def _equal(a, b):
    try:
        return bool(a == b)
    except Exception:
        return False


_Base = _SkBase if _SkBase is not None else _ParamsMixin


def _check_X(est, X, *, reset: bool):
    """Validate X into a 2-d float array of the estimator's dtype (numpy or cupy)."""
    name = type(est).__name__
    if X is None:
        raise ValueError(f"{name}: X is None; expected a 2-d array of shape (n_samples, n_features)")
    if hasattr(X, "toarray"):  # scipy.sparse: the MLP is dense anyway
        X = X.toarray()
    xp = ad.array_module(X)
    dtype = np.dtype(est.dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"{name}: dtype must be 'float32' or 'float64', got {est.dtype!r}")
    if xp is np:
        X = np.asarray(X)
        if X.dtype.kind == "c":
            raise ValueError(f"{name}: Complex data not supported")
        if X.dtype.kind in "OUS":
            X = X.astype(np.float64)
        if X.dtype.kind not in "fiub":
            raise ValueError(f"{name}: X must be numeric, got dtype {X.dtype}")
    if X.ndim != 2:
        raise ValueError(
            f"{name}: expected a 2D array, got {X.ndim}D array instead. Reshape your data "
            "either using X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for a single sample"
        )
    if X.shape[0] < 1:
        raise ValueError(f"{name}: found array with 0 sample(s) (shape={X.shape}) while a minimum of 1 is required.")
    if X.shape[1] < 1:
        raise ValueError(f"{name}: found array with 0 feature(s) (shape={X.shape}) while a minimum of 1 is required.")
    X = xp.asarray(X, dtype=dtype)
    if not bool(xp.isfinite(X).all()):
        raise ValueError(f"{name}: Input X contains NaN or infinity")
    if reset:
        est.n_features_in_ = X.shape[1]
    elif X.shape[1] != est.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but {name} is expecting {est.n_features_in_} features as input"
        )
    return X


def _check_y_present(est, X, y):
    if y is None:
        raise ValueError(f"{type(est).__name__} requires y to be passed, but the target y is None")
    y = to_host(y) if not isinstance(y, (list, tuple)) else np.asarray(y)
    if len(y) != X.shape[0]:
        raise ValueError(f"X and y have inconsistent numbers of samples: {X.shape[0]} != {len(y)}")
    return y


class _BaseMLP(_Base):
    """Shared training machinery of the classifier and the regressor."""

    _is_classifier = False

    # ------------------------------------------------------------------ public API
    def fit(self, X, y, *, resume: bool = False, n_epochs: int | None = None,
            checkpoint: str | os.PathLike | None = None):
        """Train on (X, y).

        ``resume=True`` continues an interrupted run (after :meth:`load` or a previous
        ``fit(..., n_epochs=k)``) from its saved epoch, optimiser, RNG and early-stopping
        state, giving the same result as an uninterrupted run. ``n_epochs`` stops after
        that many epochs *of this call* (the schedule still spans ``max_iter``).
        ``checkpoint``: path saved (atomically) after every epoch.
        """
        X = _check_X(self, X, reset=not (resume and self._fitted()))
        self._xp = ad.array_module(X)
        y = _check_y_present(self, X, y)
        y_enc = self._encode_y(y, fitting=not (resume and self._fitted()))
        if not (resume and self._fitted() and hasattr(self, "_optimizer")):
            if not (self.warm_start and self._fitted() and hasattr(self, "model_")):
                self._init_model()
            self._init_training()
        self._train(X, y_enc, n_epochs=n_epochs, checkpoint=checkpoint)
        return self

    def partial_fit(self, X, y, classes=None):
        """One epoch over (X, y) from the current state (no early stopping).

        The classifier needs ``classes`` (every label it will ever see) on the first call.
        """
        first = not self._fitted()
        X = _check_X(self, X, reset=first)
        self._xp = ad.array_module(X)
        y = _check_y_present(self, X, y)
        if first:
            if self._is_classifier:
                if classes is None:
                    raise ValueError("classes must be passed on the first call to partial_fit")
                classes_ = np.unique(np.asarray(classes))
                if len(classes_) < 2:
                    raise ValueError(
                        f"MLPClassifier needs at least 2 classes in partial_fit's classes=, "
                        f"got {list(classes_)!r}"
                    )
                self.classes_ = classes_
            y_enc = self._encode_y(y, fitting=not self._is_classifier)
            self._init_model()
            self._init_training()
        else:
            if self._is_classifier and classes is not None and not np.array_equal(
                np.unique(np.asarray(classes)), self.classes_
            ):
                raise ValueError(f"classes={classes!r} differs from the classes of the first call {self.classes_!r}")
            y_enc = self._encode_y(y, fitting=False)
        if not hasattr(self, "_optimizer"):
            self._init_training()
        weight = self._class_weight_arr(y_enc)
        if ad.array_module(X) is np:
            loss = self._run_epoch(X, self._to_device(y_enc, X), weight, total_steps=None)
        else:
            # a device epoch checks its steps at its end: a diverged one leaves the state
            # of the epoch's start (as fit does), not that of the steps before the bad one
            snap = self._epoch_snapshot()
            try:
                loss = self._run_epoch(X, self._to_device(y_enc, X), weight, total_steps=None)
            except BaseException:
                self._epoch_restore(snap)
                raise
        self.n_iter_ += 1
        self.loss_curve_.append(loss)
        return self

    def save(self, path):
        """Write the model and its full training state to ``path`` (.npz) atomically."""
        self._require_fitted()
        arrays = {"__format__": np.asarray(FORMAT), "__class__": np.asarray(type(self).__name__)}
        arrays["params_json"] = np.asarray(json.dumps(_jsonable(self.get_params())))
        meta = {
            "n_features_in_": int(self.n_features_in_),
            "n_outputs_": int(self.n_outputs_),
            "n_iter_": int(self.n_iter_),
            "t_": int(self.t_),
            "loss_curve_": [float(v) for v in self.loss_curve_],
            "validation_scores_": [float(v) for v in (getattr(self, "validation_scores_", None) or [])],
            "best_loss_": _f(getattr(self, "best_loss_", None)),
            "best_validation_score_": _f(getattr(self, "best_validation_score_", None)),
            "no_improvement": int(getattr(self, "_no_improvement_count", 0)),
            "seed": int(self._seed),
            "stopped": bool(getattr(self, "_stopped", False)),
            "lr_factor": float(getattr(self, "_lr_factor", 1.0)),
            "rng": self._rng.bit_generator.state if hasattr(self, "_rng") else None,
            "y_1d": bool(getattr(self, "_y_1d", True)),
            "has_optimizer": hasattr(self, "_optimizer"),
            "has_best": getattr(self, "_best_state", None) is not None,
        }
        arrays["meta_json"] = np.asarray(json.dumps(meta))
        if self._is_classifier:
            c = np.asarray(self.classes_)
            if c.dtype.kind == "O":
                c = c.astype(str)
            arrays["classes"] = c
        for k, v in self.model_.state_dict().items():
            arrays["model/" + k] = v
        if hasattr(self, "_optimizer"):
            for k, v in self._optimizer.state_dict().items():
                arrays["optim/" + k] = v
        if getattr(self, "_best_state", None) is not None:
            for k, v in self._best_state.items():
                arrays["best/" + k] = to_host(v)
        _atomic_savez(path, arrays)
        return path

    @classmethod
    def load(cls, path):
        """Load an estimator saved by :meth:`save` (raises ``ValueError`` on a corrupt or
        mismatched file)."""
        return _load(path, expected=cls)

    # ------------------------------------------------------------------ fitted attributes
    @property
    def coefs_(self):
        self._require_fitted(AttributeError)
        return [to_host(m.weight.data) for m in self.model_.layers if isinstance(m, Linear)]

    @property
    def intercepts_(self):
        self._require_fitted(AttributeError)
        return [to_host(m.bias.data) for m in self.model_.layers if isinstance(m, Linear)]

    @property
    def activation_params_(self):
        """Per hidden layer, the current activation parameter values (after training)."""
        self._require_fitted(AttributeError)
        return self.model_.activation_values()

    # ------------------------------------------------------------------ internals
    def _fitted(self):
        return hasattr(self, "model_")

    def _require_fitted(self, exc=None):
        if not self._fitted():
            msg = (f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                   "appropriate arguments before using this estimator.")
            raise (exc or NotFittedError)(msg)

    def _seed_from_random_state(self):
        rs = self.random_state
        if rs is None:
            return int(np.random.SeedSequence().entropy % (2**63))
        if isinstance(rs, (int, np.integer)):
            if rs < 0:
                raise ValueError(f"random_state must be non-negative, got {rs}")
            return int(rs)
        if isinstance(rs, np.random.RandomState):
            return int(rs.randint(0, 2**31 - 1))
        if isinstance(rs, np.random.Generator):
            return int(rs.integers(0, 2**63 - 1))
        raise ValueError(f"random_state must be None, an int, a RandomState or a Generator; got {rs!r}")

    def _validate_params(self):
        name = type(self).__name__
        hs = self.hidden_layer_sizes
        hs = [hs] if isinstance(hs, (int, np.integer)) else list(hs)
        if any(int(h) != h or h < 1 for h in hs):
            raise ValueError(f"{name}: hidden_layer_sizes must be positive integers, got {self.hidden_layer_sizes!r}")
        if self.solver not in ("sgd", "adam", "adamw"):
            raise ValueError(f"{name}: solver must be 'sgd', 'adam' or 'adamw', got {self.solver!r}")
        if self.learning_rate not in ("constant", "invscaling", "adaptive", *SCHEDULES):
            raise ValueError(
                f"{name}: learning_rate must be one of constant, invscaling, adaptive, "
                f"{', '.join(k for k in SCHEDULES if k != 'constant')}; got {self.learning_rate!r}"
            )
        for k in ("learning_rate_init", "max_iter"):
            v = getattr(self, k)
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{name}: {k} must be a finite number > 0, got {v!r}")
        if not (self.alpha >= 0 and math.isfinite(self.alpha)):  # NaN fails both
            raise ValueError(f"{name}: alpha must be a finite number >= 0, got {self.alpha!r}")
        if not (self.tol == self.tol):
            raise ValueError(f"{name}: tol must be a number, got {self.tol!r}")
        if not 0 < self.validation_fraction < 1:
            raise ValueError(f"{name}: validation_fraction must be in (0, 1), got {self.validation_fraction}")
        if self.batch_size != "auto" and not (isinstance(self.batch_size, (int, np.integer)) and self.batch_size >= 1):
            raise ValueError(f"{name}: batch_size must be 'auto' or a positive int, got {self.batch_size!r}")
        from .. import get

        try:
            get(self.activation)
        except KeyError as e:
            raise ValueError(f"{name}: {e.args[0]}") from None
        return [int(h) for h in hs]

    def _init_model(self):
        hs = self._validate_params()
        self._seed = self._seed_from_random_state()
        init_rng = np.random.default_rng([self._seed, 0])
        self.n_outputs_ = self._n_outputs()
        self.model_ = MLP(
            self.n_features_in_, hs, self.n_outputs_,
            activation=self.activation, activation_params=self.activation_params,
            learnable=self.learnable_activation, per_unit=self.per_unit, dropout=self.dropout,
            init=self.init, dtype=np.dtype(self.dtype), rng=init_rng, xp=self._xp_for_init(),
        )

    def _xp_for_init(self):
        xp = getattr(self, "_xp", None)
        if xp is None:
            xp = ad.array_module(*self.model_.parameters()) if hasattr(self, "model_") else np
        return xp

    def _init_training(self):
        self._validate_params()
        if not hasattr(self, "_seed"):
            self._seed = self._seed_from_random_state()
        self._rng = np.random.default_rng([self._seed, 2])
        self._bind_dropout_rng()
        hyper = {"lr": float(self.learning_rate_init)}
        wd = 0.0
        if self.solver == "sgd":
            hyper.update(momentum=float(self.momentum), nesterov=bool(self.nesterovs_momentum))
        else:
            hyper.update(betas=(float(self.beta_1), float(self.beta_2)), eps=float(self.epsilon))
        if self.solver == "adamw":
            wd = float(self.weight_decay)
        groups = param_groups(self.model_.parameters(), wd)
        self._optimizer = make_optimizer(self.solver, groups, **hyper)
        self.n_iter_ = 0
        self.t_ = 0
        self.loss_curve_ = []
        self.best_loss_ = math.inf
        self._no_improvement_count = 0
        self._stopped = False
        self._lr_factor = 1.0
        self._best_state = None
        if self.early_stopping:
            self.validation_scores_ = []
            self.best_validation_score_ = -math.inf
        else:
            self.validation_scores_ = None
            self.best_validation_score_ = None

    def _bind_dropout_rng(self):
        # One generator drives shuffling and dropout, so saving its state suffices to resume.
        for m in self.model_.layers:
            if isinstance(m, Dropout):
                m._rng = self._rng

    def _batch_size(self, n):
        return min(200, n) if self.batch_size == "auto" else min(int(self.batch_size), n)

    def _class_weight_arr(self, y_enc):
        return None

    def _to_device(self, a, like):
        xp = ad.array_module(like)
        return a if xp is np else xp.asarray(a)

    def _lr_factor_at(self, step, total_steps, steps_per_epoch):
        lr = self.learning_rate
        if lr == "invscaling":
            return 1.0 / (step + 1) ** self.power_t
        if lr == "adaptive":
            return self._lr_factor
        if lr in SCHEDULES:
            warm = int(round(self.warmup_epochs * steps_per_epoch))
            return SCHEDULES[lr](step, total_steps or 1, warm)
        return 1.0

    def _run_epoch(self, X, y, weight, total_steps):
        xp = ad.array_module(X)
        if xp is not np:
            return self._run_device_epoch(X, y, weight, total_steps, xp)
        n = X.shape[0]
        bs = self._batch_size(n)
        idx = self._rng.permutation(n) if self.shuffle else np.arange(n)
        model, opt = self.model_, self._optimizer
        model.train()
        weights = [m.weight for m in model.layers if isinstance(m, Linear)]
        n_batches = (n + bs - 1) // bs
        total = 0.0
        for b in range(n_batches):
            sel = idx[b * bs:(b + 1) * bs]
            if xp is not np:
                sel = xp.asarray(sel)
            xb, yb = X[sel], y[sel]
            opt.set_lr_factor(self._lr_factor_at(self.t_, total_steps, n_batches))
            out = model(Tensor(xb))
            loss = self._loss(out, yb, weight)
            for p in opt.params():
                p.grad = None
            loss.backward()
            lv = float(loss.data)
            m = len(sel)
            if self.alpha:
                # scikit-learn's L2 term: 0.5*alpha*||W||^2 / batch_size, weights only.
                sq = 0.0
                for w in weights:
                    w.grad = w.grad + (self.alpha / m) * w.data
                    sq += float((w.data * w.data).sum())
                lv += 0.5 * self.alpha * sq / m
            # Beyond float32's range counts as diverged in float64 too (lr=1e10 SGD gave a
            # loss of 4.8e213 and below-chance accuracy, silently, where float32 raised).
            if not (abs(lv) <= _LOSS_MAX):
                raise FloatingPointError(
                    f"{type(self).__name__}: training diverged, loss is {lv} at epoch "
                    f"{self.n_iter_ + 1}, step {self.t_ + 1} (batch {b + 1} of {n_batches}); "
                    "lower learning_rate_init or set clip_grad_norm"
                )
            if self.clip_grad_norm is not None:
                gn = clip_grad_norm(opt.params(), float(self.clip_grad_norm))
                if not math.isfinite(gn):
                    raise FloatingPointError(
                        f"{type(self).__name__}: non-finite gradient norm at epoch "
                        f"{self.n_iter_ + 1}, step {self.t_ + 1}"
                    )
            opt.step()
            self.t_ += 1
            total += lv * m
        return total / n

    def _run_device_epoch(self, X, y, weight, total_steps, xp):
        """:meth:`_run_epoch` on a device array module (cupy) with no host transfer per
        step: the shuffled order (drawn by the host generator, as on the CPU) moves to the
        device once, every step's loss, L2 term and gradient norm stay there, and the
        divergence checks run once, at the end of the epoch, naming the first bad step
        (``_train`` then rolls the epoch back, as it does for an error mid-epoch). The
        numbers are the CPU loop's: float64 losses from the float32 ones, the same sums in
        the same order. A dropout mask is still drawn on the host (one copy per dropout
        layer and step) so that runs are reproducible on any device."""
        n = X.shape[0]
        bs = self._batch_size(n)
        idx = xp.asarray(self._rng.permutation(n) if self.shuffle else np.arange(n))
        model, opt = self.model_, self._optimizer
        model.train()
        weights = [m.weight for m in model.layers if isinstance(m, Linear)]
        n_batches = (n + bs - 1) // bs
        t0 = self.t_
        losses, norms, sizes = [], [], []
        for b in range(n_batches):
            sel = idx[b * bs:(b + 1) * bs]
            m = min(bs, n - b * bs)
            xb, yb = X[sel], y[sel]
            opt.set_lr_factor(self._lr_factor_at(self.t_, total_steps, n_batches))
            out = model(Tensor(xb))
            loss = self._loss(out, yb, weight)
            for p in opt.params():
                p.grad = None
            loss.backward()
            lv = loss.data.astype(xp.float64)
            if self.alpha:
                sq = None
                for w in weights:
                    w.grad = w.grad + (self.alpha / m) * w.data
                    s = (w.data * w.data).sum().astype(xp.float64)
                    sq = s if sq is None else sq + s
                lv = lv + 0.5 * self.alpha * sq / m
            if self.clip_grad_norm is not None:
                norms.append(clip_grad_norm(opt.params(), float(self.clip_grad_norm), sync=False))
            opt.step()
            self.t_ += 1
            losses.append(lv)
            sizes.append(m)
        # the estimator decides here: one transfer of the epoch's losses (and norms)
        lvs = to_host(xp.stack(losses)).tolist()
        gns = to_host(xp.stack(norms)).tolist() if norms else None
        total = 0.0
        for b, (lv, m) in enumerate(zip(lvs, sizes)):
            if not (abs(lv) <= _LOSS_MAX):
                self.t_ = t0 + b
                raise FloatingPointError(
                    f"{type(self).__name__}: training diverged, loss is {lv} at epoch "
                    f"{self.n_iter_ + 1}, step {t0 + b + 1} (batch {b + 1} of {n_batches}); "
                    "lower learning_rate_init or set clip_grad_norm"
                )
            if gns is not None and not math.isfinite(gns[b]):
                self.t_ = t0 + b
                raise FloatingPointError(
                    f"{type(self).__name__}: non-finite gradient norm at epoch "
                    f"{self.n_iter_ + 1}, step {t0 + b + 1}"
                )
            total += lv * m
        return total / n

    def _train(self, X, y, *, n_epochs=None, checkpoint=None):
        # y arrives encoded, on the host; it moves to X's device once, after the split.
        X_val = y_val = None
        if self.early_stopping:
            tr, va = self._validation_split(y)
            if len(va) == 0 or len(tr) == 0:
                raise ValueError(f"{type(self).__name__}: too few samples for early_stopping's validation split")
            X_val, y_val = X[_idx(X, va)], y[va]
            X, y = X[_idx(X, tr)], y[tr]
            y_val = self._to_device(y_val, X)
        weight = self._class_weight_arr(y)
        y = self._to_device(y, X)
        n = X.shape[0]
        steps_per_epoch = (n + self._batch_size(n) - 1) // self._batch_size(n)
        total_steps = int(self.max_iter) * steps_per_epoch
        remaining = int(self.max_iter) - self.n_iter_
        if n_epochs is not None:
            remaining = min(remaining, int(n_epochs))
        bar = _progress(self.verbose, remaining, type(self).__name__)
        try:
            for _ in range(max(0, remaining)):
                if self._stopped:
                    break
                t0 = time.perf_counter()
                snap = self._epoch_snapshot()
                try:
                    loss = self._run_epoch(X, y, weight, total_steps)
                except BaseException:
                    # Ctrl-C (or an error) mid-epoch: roll back to the last completed
                    # epoch, so that fit(resume=True) repeats this epoch from its start and
                    # ends where an uninterrupted run does.
                    self._epoch_restore(snap)
                    raise
                self.n_iter_ += 1
                self.loss_curve_.append(loss)
                info = {"loss": f"{loss:.4f}"}
                if self.early_stopping:
                    score = self._val_score(X_val, y_val)
                    self.validation_scores_.append(score)
                    info["val"] = f"{score:.4f}"
                self._update_stopping()
                _report(bar, self.verbose, self.n_iter_, info, time.perf_counter() - t0)
                if checkpoint is not None:
                    self.save(checkpoint)
        finally:
            if bar is not None:
                bar.close()
        if self.early_stopping and (self._stopped or self.n_iter_ >= self.max_iter) and self._best_state is not None:
            self.model_.load_state_dict(self._best_state)
        if remaining > 0 and not self._stopped and self.n_iter_ >= self.max_iter:
            warnings.warn(
                f"{type(self).__name__}: stochastic optimizer: maximum iterations "
                f"({self.max_iter}) reached and the optimization hasn't converged yet.",
                ConvergenceWarning, stacklevel=3,
            )

    def _model_state(self):
        """The model's parameters, copied where they live: a device model's snapshots
        (each epoch's, the best one) never cross to the host."""
        params = [t.data for t in self.model_.parameters()]
        if ad.array_module(*params) is np:
            return self.model_.state_dict()
        return {n: t.data.copy() for n, t in self.model_.named_parameters()}

    def _epoch_snapshot(self):
        on_host = ad.array_module(*[t.data for t in self.model_.parameters()]) is np
        return (self._model_state(), self._optimizer.state_dict(host=on_host),
                self._rng.bit_generator.state, self.t_)

    def _epoch_restore(self, snap):
        model, optim, rng, t = snap
        self.model_.load_state_dict(model)
        self._optimizer.load_state_dict(optim)
        self._rng.bit_generator.state = rng
        self.t_ = t

    def _update_stopping(self):
        tol = self.tol
        if self.early_stopping:
            score = self.validation_scores_[-1]
            if score < self.best_validation_score_ + tol:
                self._no_improvement_count += 1
            else:
                self._no_improvement_count = 0
            if score > self.best_validation_score_:
                self.best_validation_score_ = score
                self._best_state = self._model_state()
        else:
            loss = self.loss_curve_[-1]
            if loss > self.best_loss_ - tol:
                self._no_improvement_count += 1
            else:
                self._no_improvement_count = 0
            if loss < self.best_loss_:
                self.best_loss_ = loss
        if self._no_improvement_count > self.n_iter_no_change:
            if self.learning_rate == "adaptive" and self._lr_factor * self.learning_rate_init > 1e-6:
                self._lr_factor /= 5.0
                self._no_improvement_count = 0
            else:
                self._stopped = True

    def _predict_raw(self, X):
        self._require_fitted()
        X = _check_X(self, X, reset=False)
        self.model_.eval()
        outs = []
        with ad.no_grad():
            for s in range(0, X.shape[0], 8192):
                outs.append(self.model_(Tensor(X[s:s + 8192])).data)
        xp = ad.array_module(X)
        return outs[0] if len(outs) == 1 else xp.concatenate(outs)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        tags.input_tags.sparse = True  # densified: the network is dense anyway
        return tags

    def __getstate__(self):
        st = dict(getattr(super(), "__getstate__", lambda: vars(self))())
        st.pop("_xp", None)  # a module object; rebuilt from the parameters' arrays
        return st


def _idx(a, i):
    xp = ad.array_module(a)
    return i if xp is np else xp.asarray(i)


def _f(v):
    return None if v is None or not math.isfinite(v) else float(v)


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (np.random.RandomState, np.random.Generator)):
        return None  # only the derived seed is saved (in meta)
    return v


_PARAMS_AS_TUPLE = ("hidden_layer_sizes",)


def _progress(verbose, total, desc):
    if not verbose or total <= 0:
        return None
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="epoch", leave=False)


def _report(bar, verbose, epoch, info, seconds):
    if bar is not None:
        bar.set_postfix(info, refresh=False)
        bar.update(1)
    elif verbose:
        items = ", ".join(f"{k} = {v}" for k, v in info.items())
        print(f"Iteration {epoch}, {items} ({seconds:.3f} s)")


def _atomic_savez(path, arrays):
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX and Windows: readers never see half a file
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _load(path, expected=None):
    path = os.fspath(path)
    try:
        # our own file object: np.load leaves the file it opened open when it is not a zip
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as e:
        raise ValueError(f"{path}: not a readable iglu_np model file ({type(e).__name__}: {e})") from None
    fmt = str(data.get("__format__", ""))
    if fmt != FORMAT:
        raise ValueError(f"{path}: not an iglu_np model file (format {fmt or 'missing'!r}, expected {FORMAT!r})")
    clsname = str(data["__class__"])
    classes = {"MLPClassifier": MLPClassifier, "MLPRegressor": MLPRegressor}
    if clsname not in classes:
        raise ValueError(f"{path}: unknown estimator class {clsname!r}")
    cls = classes[clsname]
    if expected is not None and not issubclass(cls, expected):
        raise ValueError(f"{path} holds a {clsname}, not a {expected.__name__}")
    try:
        params = json.loads(str(data["params_json"]))
        meta = json.loads(str(data["meta_json"]))
        for k in _PARAMS_AS_TUPLE:
            if isinstance(params.get(k), list):
                params[k] = tuple(params[k])
        valid = set(cls._get_param_names())
        est = cls(**{k: v for k, v in params.items() if k in valid})
        est.n_features_in_ = meta["n_features_in_"]
        if clsname == "MLPClassifier":
            est.classes_ = data["classes"]
        else:
            est._n_targets = meta["n_outputs_"]
        est._y_1d = meta["y_1d"]
        saved_seed = meta["seed"]
        est.random_state = params.get("random_state")
        est._init_model()
        est._seed = saved_seed
        model_state = {k[6:]: v for k, v in data.items() if k.startswith("model/")}
        est.model_.load_state_dict(model_state)
        if meta["n_outputs_"] != est.n_outputs_:
            raise ValueError(f"saved n_outputs {meta['n_outputs_']} != {est.n_outputs_}")
        if meta["has_optimizer"]:
            est._init_training()
            est._optimizer.load_state_dict({k[6:]: v for k, v in data.items() if k.startswith("optim/")})
            est._rng.bit_generator.state = meta["rng"]
            est.n_iter_ = meta["n_iter_"]
            est.t_ = meta["t_"]
            est.loss_curve_ = list(meta["loss_curve_"])
            est.best_loss_ = math.inf if meta["best_loss_"] is None else meta["best_loss_"]
            est._no_improvement_count = meta["no_improvement"]
            est._stopped = meta["stopped"]
            est._lr_factor = meta["lr_factor"]
            if est.early_stopping:
                est.validation_scores_ = list(meta["validation_scores_"])
                b = meta["best_validation_score_"]
                est.best_validation_score_ = -math.inf if b is None else b
            if meta["has_best"]:
                est._best_state = {k[5:]: v for k, v in data.items() if k.startswith("best/")}
        else:
            est.n_iter_ = meta["n_iter_"]
            est.t_ = meta["t_"]
            est.loss_curve_ = list(meta["loss_curve_"])
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: incomplete or mismatched iglu_np model file ({type(e).__name__}: {e})") from None
    except ValueError as e:
        raise ValueError(f"{path}: model file does not match its settings: {e}") from None
    return est


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


class MLPClassifier(*((_SkClf,) if _SkClf is not None else ()), _BaseMLP):
    __doc__ = ("Multi-layer perceptron classifier (softmax output, cross-entropy loss) with any "
               "registered activation.\n" + _COMMON_DOC + """    class_weight : None, "balanced" or dict label -> weight
        Per-class weights of the cross-entropy (weighted mean, as PyTorch's
        ``cross_entropy(weight=)``).

    Notes
    -----
    Unlike scikit-learn, binary problems also use a 2-unit softmax output.
    """)

    _is_classifier = True

    def __init__(self, hidden_layer_sizes=(100,), activation="iglu", *, activation_params=None,
                 learnable_activation=False, per_unit=False, solver="adam", alpha=0.0001,
                 batch_size="auto", learning_rate="constant", learning_rate_init=0.001,
                 power_t=0.5, max_iter=200, shuffle=True, random_state=None, tol=1e-4,
                 verbose=0, warm_start=False, momentum=0.9, nesterovs_momentum=True,
                 early_stopping=False, validation_fraction=0.1, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-8, n_iter_no_change=10, weight_decay=0.01, warmup_epochs=0,
                 clip_grad_norm=None, dropout=0.0, init="glorot", class_weight=None,
                 dtype="float32"):
        _store_init_args(self, locals())

    if _SkBase is None:
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
                _DataConversionWarning, stacklevel=3,
            )
            y = y.ravel()
        if y.ndim != 1:
            raise ValueError(f"{type(self).__name__}: y should be a 1d array, got shape {y.shape} (multilabel is not supported)")
        if y.dtype.kind == "f":
            if not np.isfinite(y).all():
                raise ValueError("Input y contains NaN or infinity.")
            if np.any(y != np.round(y)):
                raise ValueError("Unknown label type: continuous. MLPClassifier needs class labels; use MLPRegressor for continuous targets")
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
            raise ValueError(f"y contains labels not seen in classes_ {self.classes_!r}: {np.unique(y[bad])!r}")
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
                raise ValueError(f"class_weight has labels {unknown!r} that are not in classes_ {self.classes_!r}")
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


class MLPRegressor(*((_SkReg,) if _SkReg is not None else ()), _BaseMLP):
    __doc__ = ("Multi-layer perceptron regressor (identity output, squared loss "
               "``0.5*mean((y - f(X))**2)`` as scikit-learn) with any registered activation.\n"
               + _COMMON_DOC)

    def __init__(self, hidden_layer_sizes=(100,), activation="iglu", *, activation_params=None,
                 learnable_activation=False, per_unit=False, solver="adam", alpha=0.0001,
                 batch_size="auto", learning_rate="constant", learning_rate_init=0.001,
                 power_t=0.5, max_iter=200, shuffle=True, random_state=None, tol=1e-4,
                 verbose=0, warm_start=False, momentum=0.9, nesterovs_momentum=True,
                 early_stopping=False, validation_fraction=0.1, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-8, n_iter_no_change=10, weight_decay=0.01, warmup_epochs=0,
                 clip_grad_norm=None, dropout=0.0, init="glorot", dtype="float32"):
        _store_init_args(self, locals())

    if _SkBase is None:
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
            raise ValueError(f"y has {y2.shape[1]} targets, the model was fitted with {self._n_targets}")
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
