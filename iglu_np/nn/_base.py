"""What the classifier and the regressor share: fitting (whole runs, resumable, and one
epoch at a time), the stopping rule, the fitted attributes and prediction.

A subclass supplies the output side: ``_n_outputs``, ``_encode_y``, ``_loss``,
``_validation_split``, ``_val_score`` and ``predict``.
"""

from __future__ import annotations

import math
import os
import time
import warnings

import numpy as np

from . import _epochs, _persistence
from . import autodiff as ad
from ._progress import progress, report
from ._sklearn import Base, ConvergenceWarning, NotFittedError
from ._validation import (
    check_X,
    check_y_present,
    seed_from_random_state,
    validate_params,
)
from .autodiff import Tensor, to_host
from .layers import MLP, Dropout, Linear
from .optim import make_optimizer, param_groups


class _BaseMLP(Base):
    """Shared training machinery of the classifier and the regressor."""

    _is_classifier = False

    # ------------------------------------------------------------------ public API
    def fit(
        self,
        X,
        y,
        *,
        resume: bool = False,
        n_epochs: int | None = None,
        checkpoint: str | os.PathLike | None = None,
    ):
        """Train on (X, y).

        ``resume=True`` continues an interrupted run (after :meth:`load` or a previous
        ``fit(..., n_epochs=k)``) from its saved epoch, optimiser, RNG and early-stopping
        state, giving the same result as an uninterrupted run. ``n_epochs`` stops after
        that many epochs *of this call* (the schedule still spans ``max_iter``).
        ``checkpoint``: path saved (atomically) after every epoch.
        """
        X = check_X(self, X, reset=not (resume and self._fitted()))
        self._xp = ad.array_module(X)
        y = check_y_present(self, X, y)
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
        X = check_X(self, X, reset=first)
        self._xp = ad.array_module(X)
        y = check_y_present(self, X, y)
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
            if (
                self._is_classifier
                and classes is not None
                and not np.array_equal(np.unique(np.asarray(classes)), self.classes_)
            ):
                raise ValueError(
                    f"classes={classes!r} differs from the classes of the first "
                    f"call {self.classes_!r}"
                )
            y_enc = self._encode_y(y, fitting=False)
        if not hasattr(self, "_optimizer"):
            self._init_training()
        weight = self._class_weight_arr(y_enc)
        # an epoch that checks its steps at its end leaves, when it diverges, the state of
        # its start (as fit does), not that of the steps before the bad one
        snap = self._epoch_snapshot() if _epochs.needs_rollback(X) else None
        try:
            loss = _epochs.run_epoch(self, X, self._to_device(y_enc, X), weight, total_steps=None)
        except BaseException:
            if snap is not None:
                self._epoch_restore(snap)
            raise
        self.n_iter_ += 1
        self.loss_curve_.append(loss)
        return self

    def save(self, path):
        """Write the model and its full training state to ``path`` (.npz) atomically."""
        self._require_fitted()
        return _persistence.save(self, path)

    @classmethod
    def load(cls, path):
        """Load an estimator saved by :meth:`save` (raises ``ValueError`` on a corrupt or
        mismatched file)."""
        return _persistence.load(path, expected=cls)

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
            msg = (
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                "appropriate arguments before using this estimator."
            )
            raise (exc or NotFittedError)(msg)

    def _init_model(self):
        hs = validate_params(self)
        self._seed = seed_from_random_state(self.random_state)
        init_rng = np.random.default_rng([self._seed, 0])
        self.n_outputs_ = self._n_outputs()
        self.model_ = MLP(
            self.n_features_in_,
            hs,
            self.n_outputs_,
            activation=self.activation,
            activation_params=self.activation_params,
            learnable=self.learnable_activation,
            per_unit=self.per_unit,
            dropout=self.dropout,
            init=self.init,
            dtype=np.dtype(self.dtype),
            rng=init_rng,
            xp=self._xp_for_init(),
        )

    def _xp_for_init(self):
        xp = getattr(self, "_xp", None)
        if xp is None:
            xp = ad.array_module(*self.model_.parameters()) if hasattr(self, "model_") else np
        return xp

    def _init_training(self):
        validate_params(self)
        if not hasattr(self, "_seed"):
            self._seed = seed_from_random_state(self.random_state)
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

    def _train(self, X, y, *, n_epochs=None, checkpoint=None):
        # y arrives encoded, on the host; it moves to X's device once, after the split.
        X_val = y_val = None
        if self.early_stopping:
            tr, va = self._validation_split(y)
            if len(va) == 0 or len(tr) == 0:
                raise ValueError(
                    f"{type(self).__name__}: too few samples for early_stopping's validation split"
                )
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
        bar = progress(self.verbose, remaining, type(self).__name__)
        try:
            for _ in range(max(0, remaining)):
                if self._stopped:
                    break
                t0 = time.perf_counter()
                snap = self._epoch_snapshot()
                try:
                    loss = _epochs.run_epoch(self, X, y, weight, total_steps)
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
                report(bar, self.verbose, self.n_iter_, info, time.perf_counter() - t0)
                if checkpoint is not None:
                    self.save(checkpoint)
        finally:
            if bar is not None:
                bar.close()
        if (
            self.early_stopping
            and (self._stopped or self.n_iter_ >= self.max_iter)
            and self._best_state is not None
        ):
            self.model_.load_state_dict(self._best_state)
        if remaining > 0 and not self._stopped and self.n_iter_ >= self.max_iter:
            warnings.warn(
                f"{type(self).__name__}: stochastic optimizer: maximum iterations "
                f"({self.max_iter}) reached and the optimization hasn't converged yet.",
                ConvergenceWarning,
                stacklevel=3,
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
        return (
            self._model_state(),
            self._optimizer.state_dict(host=on_host),
            self._rng.bit_generator.state,
            self.t_,
        )

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
            adaptive = self.learning_rate == "adaptive"
            if adaptive and self._lr_factor * self.learning_rate_init > 1e-6:
                self._lr_factor /= 5.0
                self._no_improvement_count = 0
            else:
                self._stopped = True

    def _predict_raw(self, X):
        self._require_fitted()
        X = check_X(self, X, reset=False)
        self.model_.eval()
        outs = []
        with ad.no_grad():
            for s in range(0, X.shape[0], 8192):
                outs.append(self.model_(Tensor(X[s : s + 8192])).data)
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
