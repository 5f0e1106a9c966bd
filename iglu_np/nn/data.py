"""Datasets, the long-tailed subsampler and class-balanced metrics (numpy only)."""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "long_tailed_counts",
    "long_tailed_subsample",
    "load_digits",
    "stratified_split",
    "balanced_accuracy",
    "per_class_recall",
    "confusion_matrix",
    "class_weights",
]


def long_tailed_counts(n_max: int, n_classes: int, rho: float) -> np.ndarray:
    """Per-class sizes of the paper's eq. 12: ``n_k = n_max * mu**(k/(K-1))``, ``mu = 1/rho``.

    Class 0 keeps ``n_max`` samples and class ``K-1`` keeps ``n_max/rho``; sizes are
    rounded to the nearest integer and never below 1.
    """
    if rho < 1 or not math.isfinite(rho):
        raise ValueError(f"imbalance ratio rho must be a finite number >= 1, got {rho}")
    if n_classes < 1 or n_max < 1:
        raise ValueError("need at least one class and n_max >= 1")
    if n_classes == 1:
        return np.array([n_max])
    mu = 1.0 / rho
    k = np.arange(n_classes)
    n = np.floor(n_max * mu ** (k / (n_classes - 1)) + 0.5).astype(np.int64)
    return np.maximum(n, 1)


def long_tailed_subsample(X, y, rho: float, *, n_max=None, order=None, random_state=None):
    """Subsample a labelled dataset into a long-tailed one with imbalance ratio ``rho``.

    Classes are ranked by ``order`` (default: sorted labels, as in CIFAR-LT) and the
    k-th class keeps ``n_k = n_max * (1/rho)**(k/(K-1))`` samples drawn without
    replacement; ``n_max`` defaults to the size of the smallest class, so every class
    can supply its quota. Returns ``(X_lt, y_lt, indices)`` (indices into the input, in
    their original order).
    """
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != len(X):
        raise ValueError(
            f"y must be 1-d with one label per row of X; got {y.shape} for {len(X)} rows"
        )
    classes, counts = np.unique(y, return_counts=True)
    if order is not None:
        order = list(order)
        if sorted(map(str, order)) != sorted(map(str, classes)) or len(order) != len(classes):
            raise ValueError("order must list every class label exactly once")
        pos = {c: i for i, c in enumerate(classes.tolist())}
        idx = [pos[c] for c in order]
        classes, counts = classes[idx], counts[idx]
    if n_max is None:
        n_max = int(counts.min())
    quotas = long_tailed_counts(int(n_max), len(classes), rho)
    short = [(c, q, n) for c, q, n in zip(classes, quotas, counts) if q > n]
    if short:
        c, q, n = short[0]
        raise ValueError(
            f"class {c!r} has {n} samples but the long-tailed profile needs {q}; lower n_max"
        )
    rng = np.random.default_rng(random_state)
    keep = []
    for c, q in zip(classes, quotas):
        members = np.flatnonzero(y == c)
        keep.append(rng.choice(members, size=int(q), replace=False))
    keep = np.sort(np.concatenate(keep))
    return X[keep], y[keep], keep


def stratified_split(y, test_size: float, random_state=None):
    """Indices (train, test) with each class split in the same proportion."""
    y = np.asarray(y)
    if not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size must be in (0, 1), got {test_size}")
    rng = np.random.default_rng(random_state)
    tr, te = [], []
    for c in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == c))
        n_te = int(round(len(members) * test_size))
        if len(members) > 1:
            n_te = min(max(n_te, 1), len(members) - 1)
        te.append(members[:n_te])
        tr.append(members[n_te:])
    return np.sort(np.concatenate(tr)), np.sort(np.concatenate(te))


def load_digits(dtype=np.float32):
    """scikit-learn's bundled 8x8 digits (1797 images, 10 classes; offline), pixels in [0, 1].

    Needs the optional ``scikit-learn`` dependency (``pip install ".[examples]"`` in the checkout).
    """
    try:
        from sklearn.datasets import load_digits as _ld
    except ImportError as e:
        raise ImportError(
            "the digits dataset ships with scikit-learn: pip install '.[examples]' in the iglu_np checkout "
            "(or pip install scikit-learn)"
        ) from e
    d = _ld()
    return (d.data / 16.0).astype(dtype), d.target.astype(np.int64)


def confusion_matrix(y_true, y_pred, labels=None) -> np.ndarray:
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    labels = np.unique(np.concatenate([y_true, y_pred])) if labels is None else np.asarray(labels)
    pos = {c: i for i, c in enumerate(labels.tolist())}
    cm = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for t, p in zip(y_true.tolist(), y_pred.tolist()):
        cm[pos[t], pos[p]] += 1
    return cm


def per_class_recall(y_true, y_pred, labels=None) -> np.ndarray:
    """Recall of each class in ``labels`` (default: classes present in ``y_true``)."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    labels = np.unique(y_true) if labels is None else np.asarray(labels)
    out = np.empty(len(labels))
    for i, c in enumerate(labels):
        m = y_true == c
        out[i] = np.mean(y_pred[m] == c) if m.any() else np.nan
    return out


def balanced_accuracy(y_true, y_pred) -> float:
    """Mean per-class recall over the classes present in ``y_true``."""
    r = per_class_recall(y_true, y_pred)
    return float(np.mean(r))


def class_weights(y_encoded, n_classes: int, class_weight) -> np.ndarray | None:
    """Per-class loss weights: ``None``, ``"balanced"`` (``n / (K * n_k)``, as scikit-learn)
    or a dict index -> weight (missing classes get 1)."""
    if class_weight is None:
        return None
    if isinstance(class_weight, str):
        if class_weight != "balanced":
            raise ValueError(
                f"class_weight must be None, 'balanced' or a dict, got {class_weight!r}"
            )
        counts = np.bincount(y_encoded, minlength=n_classes).astype(np.float64)
        w = np.where(counts > 0, len(y_encoded) / (n_classes * np.maximum(counts, 1)), 0.0)
        return w
    if isinstance(class_weight, dict):
        w = np.ones(n_classes)
        for k, v in class_weight.items():
            w[k] = float(v)
        return w
    raise ValueError(f"class_weight must be None, 'balanced' or a dict, got {class_weight!r}")
