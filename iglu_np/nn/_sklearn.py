"""The estimators' scikit-learn side: its base classes and exceptions when it is installed,
stand-ins with the same names and contract when it is not.

``Base`` is scikit-learn's ``BaseEstimator`` or :class:`ParamsMixin` (``get_params``,
``set_params`` and ``repr`` read from the ``__init__`` signature); ``ClassifierMixin`` and
``RegressorMixin`` are ``None`` without scikit-learn.
"""

from __future__ import annotations

import inspect

try:  # optional: only for interoperability
    from sklearn.base import BaseEstimator as SkBase
    from sklearn.base import ClassifierMixin, RegressorMixin
    from sklearn.exceptions import (
        ConvergenceWarning,
        DataConversionWarning,
        NotFittedError,
    )
except ImportError:  # pragma: no cover - exercised in environments without scikit-learn
    SkBase = ClassifierMixin = RegressorMixin = None

    class NotFittedError(ValueError, AttributeError):
        """Raised when predicting with an estimator that has not been fitted."""

    class DataConversionWarning(UserWarning):
        pass

    class ConvergenceWarning(UserWarning):
        """The optimisation reached max_iter before it converged (scikit-learn's name)."""


def store_init_args(est, args: dict) -> None:
    """scikit-learn convention: ``__init__`` stores every argument unchanged under its own
    name (``get_params`` reads them back through the signature)."""
    for k, v in args.items():
        if k != "self" and k != "__class__":
            setattr(est, k, v)


class ParamsMixin:
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
                raise ValueError(
                    f"invalid parameter {k!r} for {type(self).__name__}; valid: {valid}"
                )
            setattr(self, k, v)
        return self

    def __repr__(self):
        sig = inspect.signature(type(self).__init__)
        changed = [
            f"{k}={getattr(self, k)!r}"
            for k, p in sig.parameters.items()
            if k != "self"
            and getattr(self, k) is not p.default
            and not _equal(getattr(self, k), p.default)
        ]
        return f"{type(self).__name__}({', '.join(changed)})"


def _equal(a, b):
    try:
        return bool(a == b)
    except Exception:
        return False


Base = SkBase if SkBase is not None else ParamsMixin
