"""``iglu-np train``: train the numpy MLP once and print its test accuracy.

The data (scikit-learn's digits by default, or an ``.npz`` file with arrays ``X`` and
``y``) is split per class into training and test sets; ``--rho`` makes the training split
long-tailed as in the paper's Table 4. The report gives test accuracy, balanced accuracy,
per-class recall and, with ``--learnable``, the learned activation parameters.

Examples::

    iglu-np train --activation iglu --param sigma=0.5 --learnable sigma
    iglu-np train --rho 50 --class-weight balanced --save model.npz
    iglu-np train --checkpoint run.npz --epochs 300     # interrupt, then:
    iglu-np train --checkpoint run.npz --epochs 300 --resume
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
import warnings

import numpy as np

# On digits the default model (100 IGLU units, Adam 1e-3) stops by itself after about 340
# epochs (10 epochs without a 1e-4 loss improvement); scikit-learn's 200 would cut it short.
EPOCHS = 400


def add_arguments(p: argparse.ArgumentParser):
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "examples:\n" + textwrap.indent(
        textwrap.dedent(__doc__.split("Examples::", 1)[1]).strip("\n"), "  "
    )
    d = p.add_argument_group("data")
    d.add_argument(
        "--data",
        default="digits",
        help="'digits' (scikit-learn's 8x8 digits, 1,797 images) or an .npz file with "
        "arrays X (samples x features) and y (labels) (default: digits)",
    )
    d.add_argument(
        "--test-size",
        type=float,
        default=0.3,
        metavar="FRACTION",
        help="fraction of each class held out for testing (default: 0.3)",
    )
    d.add_argument(
        "--rho",
        type=float,
        default=None,
        help="make the training split long-tailed with this imbalance ratio "
        "(largest/smallest class, the paper's eq. 12; default: balanced)",
    )
    m = p.add_argument_group("model")
    m.add_argument(
        "--activation",
        default="iglu",
        help="any registered activation, see 'iglu-np info' (default: iglu)",
    )
    m.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="activation parameter, repeatable (e.g. sigma=0.5; default: the "
        "activation's defaults)",
    )
    m.add_argument(
        "--learnable",
        default="",
        metavar="NAMES",
        help="comma-separated activation parameters to train, or 'all' "
        "(default: none, parameters stay fixed)",
    )
    m.add_argument(
        "--per-unit",
        action="store_true",
        help="one learnable parameter per hidden unit instead of one per layer",
    )
    m.add_argument(
        "--hidden",
        default="100",
        metavar="SIZES",
        help="hidden layer sizes, comma-separated (default: 100)",
    )
    m.add_argument(
        "--dropout",
        type=float,
        default=0.0,
        metavar="P",
        help="dropout probability after each hidden activation (default: 0, none)",
    )
    m.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default="float32",
        help="precision of weights and activations (default: float32)",
    )
    t = p.add_argument_group("training")
    t.add_argument(
        "--epochs",
        type=int,
        default=EPOCHS,
        help=f"maximum number of epochs (default: {EPOCHS}); training stops earlier "
        "once the training loss has not improved by 1e-4 for more than 10 epochs",
    )
    t.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="minibatch size (default: min(200, number of training samples))",
    )
    t.add_argument(
        "--solver",
        default="adam",
        choices=["adam", "adamw", "sgd"],
        help="optimiser (default: adam)",
    )
    t.add_argument("--lr", type=float, default=1e-3, help="initial learning rate (default: 0.001)")
    t.add_argument(
        "--schedule",
        default="constant",
        choices=["constant", "invscaling", "adaptive", "cosine", "warmup"],
        help="learning-rate schedule (default: constant)",
    )
    t.add_argument(
        "--warmup-epochs",
        type=float,
        default=0.0,
        help="linear warm-up length for --schedule cosine/warmup (default: 0)",
    )
    t.add_argument(
        "--alpha",
        type=float,
        default=1e-4,
        help="L2 penalty, scikit-learn's alpha (default: 0.0001)",
    )
    t.add_argument(
        "--weight-decay",
        type=float,
        default=0.01,
        help="decoupled weight decay of --solver adamw (default: 0.01)",
    )
    t.add_argument(
        "--clip",
        type=float,
        default=None,
        metavar="NORM",
        help="clip the global gradient norm to this value (default: no clipping)",
    )
    t.add_argument(
        "--early-stopping",
        action="store_true",
        help="hold out 10%% of the training split and stop when its score stops "
        "improving; keep the best epoch's weights",
    )
    t.add_argument(
        "--class-weight",
        choices=["none", "balanced"],
        default="none",
        help="'balanced' weights the loss by inverse class frequency (default: none)",
    )
    t.add_argument(
        "--seed",
        type=int,
        default=0,
        help="random seed for the split, initialisation and shuffling (default: 0)",
    )
    o = p.add_argument_group("output")
    o.add_argument(
        "--verbose",
        type=int,
        default=1,
        metavar="LEVEL",
        help="1: a progress bar on a terminal, one line per epoch otherwise; "
        "0: only the final report (default: 1)",
    )
    o.add_argument("--save", default=None, metavar="FILE", help="write the trained model (.npz)")
    o.add_argument(
        "--checkpoint",
        default=None,
        metavar="FILE",
        help="save the training state to FILE after every epoch",
    )
    o.add_argument("--resume", action="store_true", help="continue training from --checkpoint")
    o.add_argument(
        "--json", default=None, metavar="FILE", help="also write the metrics as JSON to FILE"
    )


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
        from ..nn.data import load_digits

        return load_digits()
    if not os.path.exists(spec):
        raise SystemExit(
            f"iglu-np train: --data {spec!r}: no such file (expected 'digits' or an .npz)"
        )
    with np.load(spec, allow_pickle=False) as z:
        if "X" not in z.files or "y" not in z.files:
            raise SystemExit(
                f"iglu-np train: {spec} must contain arrays 'X' and 'y' (has {z.files})"
            )
        return z["X"].astype(np.float32), z["y"]


def not_converged_note(clf) -> str | None:
    """A note when training ran into max_iter while the loss was still falling, else None."""
    curve = list(clf.loss_curve_ or [])
    if getattr(clf, "_stopped", False) or clf.n_iter_ < clf.max_iter or len(curve) < 2:
        return None
    k = min(int(clf.n_iter_no_change), len(curve) - 1)
    if curve[-1 - k] - curve[-1] <= clf.tol:
        return None
    return (
        f"  note: not converged: stopped at the --epochs limit ({clf.max_iter}) while the "
        f"training loss was still falling ({curve[-1 - k]:.4f} -> {curve[-1]:.4f} over the "
        f"last {k} epochs); raise --epochs, or add --early-stopping to stop on a held-out "
        "score"
    )


def main(args) -> int:
    from ..nn.data import (
        balanced_accuracy,
        long_tailed_subsample,
        per_class_recall,
        stratified_split,
    )
    from ..nn.estimator import MLPClassifier

    X, y = load_data(args.data)
    tr, te = stratified_split(y, args.test_size, random_state=args.seed)
    Xtr, ytr, Xte, yte = X[tr], y[tr], X[te], y[te]
    if args.rho:
        Xtr, ytr, _ = long_tailed_subsample(Xtr, ytr, args.rho, random_state=args.seed)
    learn = [s for s in args.learnable.split(",") if s]
    learnable = True if learn == ["all"] else learn
    est_kw = dict(
        hidden_layer_sizes=tuple(int(h) for h in args.hidden.split(",") if h),
        activation=args.activation,
        activation_params=_parse_params(args.param) or None,
        learnable_activation=learnable,
        per_unit=args.per_unit,
        solver=args.solver,
        alpha=args.alpha,
        batch_size=args.batch_size or "auto",
        learning_rate=args.schedule,
        learning_rate_init=args.lr,
        max_iter=args.epochs,
        random_state=args.seed,
        verbose=args.verbose,
        early_stopping=args.early_stopping,
        weight_decay=args.weight_decay,
        warmup_epochs=args.warmup_epochs,
        clip_grad_norm=args.clip,
        dropout=args.dropout,
        class_weight=None if args.class_weight == "none" else "balanced",
        dtype=args.dtype,
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
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            clf.fit(Xtr, ytr, resume=args.resume, checkpoint=args.checkpoint)
    except (ValueError, FloatingPointError) as e:
        print(f"iglu-np train: {e}", file=sys.stderr)
        return 1
    secs = time.perf_counter() - t0
    for w in caught:  # the estimator's ConvergenceWarning is replaced by the note below
        if type(w.message).__name__ != "ConvergenceWarning":
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    pred = clf.predict(Xte)
    rec = per_class_recall(yte, pred, labels=clf.classes_)
    res = {
        "activation": clf.activation,
        "epochs": clf.n_iter_,
        "train_samples": int(len(ytr)),
        "test_accuracy": float(np.mean(pred == yte)),
        "balanced_accuracy": balanced_accuracy(yte, pred),
        "per_class_recall": [float(r) for r in rec],
        "final_loss": float(clf.loss_curve_[-1]) if clf.loss_curve_ else None,
        "seconds": secs,
        "activation_params": [
            {k: np.asarray(v).round(4).tolist() for k, v in d.items()}
            for d in clf.activation_params_
        ],
    }
    print(
        f"{clf.activation}: {res['epochs']} epochs on {res['train_samples']} samples in {secs:.2f} s"
    )
    print(
        f"  test accuracy {res['test_accuracy']:.4f}, balanced accuracy {res['balanced_accuracy']:.4f}, "
        f"final training loss {res['final_loss']:.4f}"
    )
    print(
        "  per-class recall: "
        + " ".join(f"{c}:{r:.2f}" for c, r in zip(clf.classes_.tolist(), rec))
    )
    if learnable:
        print(f"  learned activation parameters: {res['activation_params']}")
    note = not_converged_note(clf)
    if note:
        res["converged"] = False
        print(note)
    if args.save:
        clf.save(args.save)
        print(f"  saved {args.save}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0
