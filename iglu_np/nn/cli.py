"""``iglu-np train``: one training run of the numpy MLP, printed as a small report.

Data: scikit-learn's digits (default; optional extra) or an ``.npz`` with arrays ``X``
and ``y``; a stratified test split; optionally made long-tailed (paper's eq. 12) with
``--rho``. Examples::

    iglu-np train --activation iglu --param sigma=0.5 --learnable sigma --epochs 30
    iglu-np train --rho 50 --class-weight balanced --save model.npz
    iglu-np train --checkpoint run.npz --epochs 100        # interrupt, then:
    iglu-np train --checkpoint run.npz --resume
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def add_arguments(p: argparse.ArgumentParser):
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = __doc__.split("Examples::", 1)[1]
    p.add_argument("--data", default="digits", help="'digits' or a .npz file with arrays X and y")
    p.add_argument("--activation", default="iglu", help="any registered activation (iglu-np info)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="activation parameter, repeatable (e.g. sigma=0.5)")
    p.add_argument("--learnable", default="", metavar="NAMES",
                   help="comma-separated activation parameters to train ('all' for every one)")
    p.add_argument("--per-unit", action="store_true", help="learnable parameters per hidden unit")
    p.add_argument("--hidden", default="100", help="hidden layer sizes, comma-separated (default 100)")
    p.add_argument("--epochs", type=int, default=50, help="max_iter (default 50)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=1e-3, help="learning_rate_init")
    p.add_argument("--solver", default="adam", choices=["adam", "adamw", "sgd"])
    p.add_argument("--schedule", default="constant",
                   choices=["constant", "invscaling", "adaptive", "cosine", "warmup"])
    p.add_argument("--warmup-epochs", type=float, default=0.0)
    p.add_argument("--alpha", type=float, default=1e-4, help="L2 penalty (scikit-learn's alpha)")
    p.add_argument("--weight-decay", type=float, default=0.01, help="AdamW decoupled decay")
    p.add_argument("--clip", type=float, default=None, help="clip the global gradient norm")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--early-stopping", action="store_true")
    p.add_argument("--rho", type=float, default=None, help="make the training split long-tailed with this imbalance ratio")
    p.add_argument("--class-weight", choices=["none", "balanced"], default="none")
    p.add_argument("--test-size", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--save", default=None, help="write the trained model (.npz)")
    p.add_argument("--checkpoint", default=None, help="save the training state here after every epoch")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--json", default=None, help="write the metrics as JSON here")
    p.add_argument("--verbose", type=int, default=1)


def _parse_params(items):
    out = {}
    for it in items:
        if "=" not in it:
            raise SystemExit(f"iglu-np train: --param expects NAME=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        try:
            out[k.strip()] = float(v)
        except ValueError:
            raise SystemExit(f"iglu-np train: --param {k}: {v!r} is not a number") from None
    return out


def load_data(spec: str):
    if spec == "digits":
        from .data import load_digits

        return load_digits()
    if not os.path.exists(spec):
        raise SystemExit(f"iglu-np train: --data {spec!r}: no such file (expected 'digits' or an .npz)")
    with np.load(spec, allow_pickle=False) as z:
        if "X" not in z.files or "y" not in z.files:
            raise SystemExit(f"iglu-np train: {spec} must contain arrays 'X' and 'y' (has {z.files})")
        return z["X"].astype(np.float32), z["y"]


def main(args) -> int:
    from .data import balanced_accuracy, long_tailed_subsample, per_class_recall, stratified_split
    from .estimator import MLPClassifier

    X, y = load_data(args.data)
    tr, te = stratified_split(y, args.test_size, random_state=args.seed)
    Xtr, ytr, Xte, yte = X[tr], y[tr], X[te], y[te]
    if args.rho:
        Xtr, ytr, _ = long_tailed_subsample(Xtr, ytr, args.rho, random_state=args.seed)
    learn = [s for s in args.learnable.split(",") if s]
    learnable = True if learn == ["all"] else learn
    est_kw = dict(
        hidden_layer_sizes=tuple(int(h) for h in args.hidden.split(",") if h),
        activation=args.activation, activation_params=_parse_params(args.param) or None,
        learnable_activation=learnable, per_unit=args.per_unit, solver=args.solver,
        alpha=args.alpha, batch_size=args.batch_size or "auto", learning_rate=args.schedule,
        learning_rate_init=args.lr, max_iter=args.epochs, random_state=args.seed,
        verbose=args.verbose, early_stopping=args.early_stopping, weight_decay=args.weight_decay,
        warmup_epochs=args.warmup_epochs, clip_grad_norm=args.clip, dropout=args.dropout,
        class_weight=None if args.class_weight == "none" else "balanced", dtype=args.dtype,
    )
    if args.resume:
        if not args.checkpoint or not os.path.exists(args.checkpoint):
            raise SystemExit("iglu-np train: --resume needs an existing --checkpoint file")
        clf = MLPClassifier.load(args.checkpoint)
        clf.set_params(max_iter=args.epochs, verbose=args.verbose)
        print(f"resuming {args.checkpoint} at epoch {clf.n_iter_}")
    else:
        try:
            clf = MLPClassifier(**est_kw)
        except ValueError as e:
            raise SystemExit(f"iglu-np train: {e}") from None
    t0 = time.perf_counter()
    try:
        clf.fit(Xtr, ytr, resume=args.resume, checkpoint=args.checkpoint)
    except (ValueError, FloatingPointError) as e:
        print(f"iglu-np train: {e}", file=sys.stderr)
        return 1
    secs = time.perf_counter() - t0
    pred = clf.predict(Xte)
    rec = per_class_recall(yte, pred, labels=clf.classes_)
    res = {
        "activation": clf.activation, "epochs": clf.n_iter_, "train_samples": int(len(ytr)),
        "test_accuracy": float(np.mean(pred == yte)),
        "balanced_accuracy": balanced_accuracy(yte, pred),
        "per_class_recall": [float(r) for r in rec],
        "final_loss": float(clf.loss_curve_[-1]) if clf.loss_curve_ else None,
        "seconds": secs,
        "activation_params": [{k: np.asarray(v).round(4).tolist() for k, v in d.items()}
                              for d in clf.activation_params_],
    }
    print(f"{clf.activation}: {res['epochs']} epochs on {res['train_samples']} samples in {secs:.2f} s")
    print(f"  test accuracy {res['test_accuracy']:.4f}, balanced accuracy {res['balanced_accuracy']:.4f}, "
          f"final training loss {res['final_loss']:.4f}")
    print("  per-class recall: " + " ".join(f"{c}:{r:.2f}" for c, r in zip(clf.classes_.tolist(), rec)))
    if learnable:
        print(f"  learned activation parameters: {res['activation_params']}")
    if args.save:
        clf.save(args.save)
        print(f"  saved {args.save}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0
