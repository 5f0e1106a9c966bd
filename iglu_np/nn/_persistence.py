"""Saving and loading an estimator with its full training state, as one ``.npz`` file.

The file holds no pickle: the estimator's class by name (``__class__``, one of the classes
registered with :func:`model_class`), its settings and counters as JSON, and the arrays of
the model (``model/...``), the optimiser (``optim/...``) and the best early-stopping
weights (``best/...``). A file is written to a temporary name and renamed into place, so
that a reader never sees half a file.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import zipfile

import numpy as np

from .autodiff import to_host

FORMAT = "iglu_np.nn.mlp/1"
_PARAMS_AS_TUPLE = ("hidden_layer_sizes",)
_CLASSES: dict = {}


def model_class(cls):
    """Class decorator: a file whose ``__class__`` is ``cls.__name__`` loads as ``cls``."""
    _CLASSES[cls.__name__] = cls
    return cls


def save(est, path):
    """Write ``est`` (fitted) and its training state to ``path`` atomically."""
    arrays = {"__format__": np.asarray(FORMAT), "__class__": np.asarray(type(est).__name__)}
    arrays["params_json"] = np.asarray(json.dumps(_jsonable(est.get_params())))
    meta = {
        "n_features_in_": int(est.n_features_in_),
        "n_outputs_": int(est.n_outputs_),
        "n_iter_": int(est.n_iter_),
        "t_": int(est.t_),
        "loss_curve_": [float(v) for v in est.loss_curve_],
        "validation_scores_": [float(v) for v in (getattr(est, "validation_scores_", None) or [])],
        "best_loss_": _f(getattr(est, "best_loss_", None)),
        "best_validation_score_": _f(getattr(est, "best_validation_score_", None)),
        "no_improvement": int(getattr(est, "_no_improvement_count", 0)),
        "seed": int(est._seed),
        "stopped": bool(getattr(est, "_stopped", False)),
        "lr_factor": float(getattr(est, "_lr_factor", 1.0)),
        "rng": est._rng.bit_generator.state if hasattr(est, "_rng") else None,
        "y_1d": bool(getattr(est, "_y_1d", True)),
        "has_optimizer": hasattr(est, "_optimizer"),
        "has_best": getattr(est, "_best_state", None) is not None,
    }
    arrays["meta_json"] = np.asarray(json.dumps(meta))
    if est._is_classifier:
        c = np.asarray(est.classes_)
        if c.dtype.kind == "O":
            c = c.astype(str)
        arrays["classes"] = c
    for k, v in est.model_.state_dict().items():
        arrays["model/" + k] = v
    if hasattr(est, "_optimizer"):
        for k, v in est._optimizer.state_dict().items():
            arrays["optim/" + k] = v
    if getattr(est, "_best_state", None) is not None:
        for k, v in est._best_state.items():
            arrays["best/" + k] = to_host(v)
    _atomic_savez(path, arrays)
    return path


def load(path, expected=None):
    """The estimator saved in ``path``; ``expected``: the class (or a base) it must be.
    ``ValueError`` on a corrupt or mismatched file."""
    path = os.fspath(path)
    try:
        # our own file object: np.load leaves the file it opened open when it is not a zip
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as e:
        raise ValueError(
            f"{path}: not a readable iglu_np model file ({type(e).__name__}: {e})"
        ) from None
    fmt = str(data.get("__format__", ""))
    if fmt != FORMAT:
        raise ValueError(
            f"{path}: not an iglu_np model file (format {fmt or 'missing'!r}, expected {FORMAT!r})"
        )
    clsname = str(data["__class__"])
    if clsname not in _CLASSES:
        raise ValueError(f"{path}: unknown estimator class {clsname!r}")
    cls = _CLASSES[clsname]
    if expected is not None and not issubclass(cls, expected):
        raise ValueError(f"{path} holds a {clsname}, not a {expected.__name__}")
    try:
        return _restore(cls, data)
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(
            f"{path}: incomplete or mismatched iglu_np model file ({type(e).__name__}: {e})"
        ) from None
    except ValueError as e:
        raise ValueError(f"{path}: model file does not match its settings: {e}") from None


def _restore(cls, data):
    params = json.loads(str(data["params_json"]))
    meta = json.loads(str(data["meta_json"]))
    for k in _PARAMS_AS_TUPLE:
        if isinstance(params.get(k), list):
            params[k] = tuple(params[k])
    valid = set(cls._get_param_names())
    est = cls(**{k: v for k, v in params.items() if k in valid})
    est.n_features_in_ = meta["n_features_in_"]
    if est._is_classifier:
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
        est._optimizer.load_state_dict(
            {k[6:]: v for k, v in data.items() if k.startswith("optim/")}
        )
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
    return est


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
