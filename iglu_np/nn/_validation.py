"""What the estimators accept: X, y, their settings and ``random_state``, each checked with
scikit-learn's messages where it has one."""

from __future__ import annotations

import math

import numpy as np

from . import autodiff as ad
from .autodiff import to_host
from .optim import SCHEDULES


def check_X(est, X, *, reset: bool):
    """Validate X into a 2-d float array of the estimator's dtype (numpy or cupy)."""
    name = type(est).__name__
    if X is None:
        raise ValueError(
            f"{name}: X is None; expected a 2-d array of shape (n_samples, n_features)"
        )
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
            "either using X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for a "
            "single sample"
        )
    if X.shape[0] < 1:
        raise ValueError(
            f"{name}: found array with 0 sample(s) (shape={X.shape}) while a "
            "minimum of 1 is required."
        )
    if X.shape[1] < 1:
        raise ValueError(
            f"{name}: found array with 0 feature(s) (shape={X.shape}) while a "
            "minimum of 1 is required."
        )
    X = xp.asarray(X, dtype=dtype)
    if not bool(xp.isfinite(X).all()):
        raise ValueError(f"{name}: Input X contains NaN or infinity")
    if reset:
        est.n_features_in_ = X.shape[1]
    elif X.shape[1] != est.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but {name} is expecting {est.n_features_in_} "
            "features as input"
        )
    return X


def check_y_present(est, X, y):
    """y on the host, one label (or target row) per row of X."""
    if y is None:
        raise ValueError(f"{type(est).__name__} requires y to be passed, but the target y is None")
    y = to_host(y) if not isinstance(y, (list, tuple)) else np.asarray(y)
    if len(y) != X.shape[0]:
        raise ValueError(f"X and y have inconsistent numbers of samples: {X.shape[0]} != {len(y)}")
    return y


def seed_from_random_state(rs) -> int:
    """The one integer seed every generator of a fit derives from."""
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


def validate_params(est) -> list:
    """Check the estimator's settings; return its hidden layer sizes as a list of ints."""
    name = type(est).__name__
    hs = est.hidden_layer_sizes
    hs = [hs] if isinstance(hs, (int, np.integer)) else list(hs)
    if any(int(h) != h or h < 1 for h in hs):
        raise ValueError(
            f"{name}: hidden_layer_sizes must be positive integers, got {est.hidden_layer_sizes!r}"
        )
    if est.solver not in ("sgd", "adam", "adamw"):
        raise ValueError(f"{name}: solver must be 'sgd', 'adam' or 'adamw', got {est.solver!r}")
    if est.learning_rate not in ("constant", "invscaling", "adaptive", *SCHEDULES):
        raise ValueError(
            f"{name}: learning_rate must be one of constant, invscaling, adaptive, "
            f"{', '.join(k for k in SCHEDULES if k != 'constant')}; got {est.learning_rate!r}"
        )
    for k in ("learning_rate_init", "max_iter"):
        v = getattr(est, k)
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"{name}: {k} must be a finite number > 0, got {v!r}")
    if not (est.alpha >= 0 and math.isfinite(est.alpha)):  # NaN fails both
        raise ValueError(f"{name}: alpha must be a finite number >= 0, got {est.alpha!r}")
    if not (est.tol == est.tol):
        raise ValueError(f"{name}: tol must be a number, got {est.tol!r}")
    if not 0 < est.validation_fraction < 1:
        raise ValueError(
            f"{name}: validation_fraction must be in (0, 1), got {est.validation_fraction}"
        )
    bs = est.batch_size
    if bs != "auto" and not (isinstance(bs, (int, np.integer)) and bs >= 1):
        raise ValueError(f"{name}: batch_size must be 'auto' or a positive int, got {bs!r}")

    try:
        _activation(est.activation)
    except KeyError as e:
        raise ValueError(f"{name}: {e.args[0]}") from None
    return [int(h) for h in hs]


def _activation(name):
    """The activation or gated form named ``name`` (``"swiglu"``, ``"<act>_glu"``): the
    KeyError of :func:`iglu_np.get` listing the known names where it is neither."""
    from .. import get, get_gated

    try:
        return get(name)
    except KeyError as e:
        try:
            return get_gated(name)
        except KeyError:
            raise e from None
