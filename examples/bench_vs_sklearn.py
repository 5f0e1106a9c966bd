"""iglu_np.nn.MLPClassifier against scikit-learn's MLPClassifier on digits.

Same architecture, initialisation scheme (Glorot uniform), solver (Adam, lr 1e-3, betas
0.9/0.999, eps 1e-8), L2 alpha 1e-4, batch size 200, number of epochs (no early stop),
activation ReLU; several seeds. Reports test accuracy (mean ± std over seeds) and
seconds per epoch (median over seeds of fit time / epochs; runs interleaved so machine
load hits both alike).

    python examples/bench_vs_sklearn.py [--epochs 100] [--seeds 5] [--blas-threads 1]

Needs scikit-learn (``pip install ".[examples]"`` in the checkout).
"""

import argparse
import contextlib
import statistics
import time
import warnings

import numpy as np


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--epochs",
        type=int,
        default=100,
        help="training epochs for every model, no early stopping (default: 100)",
    )
    ap.add_argument(
        "--seeds", type=int, default=5, help="number of random seeds per variant (default: 5)"
    )
    ap.add_argument(
        "--hidden",
        default="100",
        metavar="SIZES",
        help="hidden layer sizes, comma-separated (default: 100)",
    )
    ap.add_argument(
        "--activation",
        default="relu",
        help="activation for iglu_np; scikit-learn runs only for relu, tanh, "
        "logistic and identity (default: relu)",
    )
    ap.add_argument(
        "--blas-threads",
        type=int,
        default=None,
        metavar="N",
        help="limit BLAS threads for both (threadpoolctl); small matmuls are often "
        "faster on 1 (default: no limit)",
    )
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)

    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier as SkMLP

    import iglu_np
    from iglu_np.nn import MLPClassifier

    if args.activation not in iglu_np.ACTIVATIONS:
        raise SystemExit(f"{args.activation} is not registered in iglu_np")
    hidden = tuple(int(h) for h in args.hidden.split(","))
    d = load_digits()
    X = d.data / 16.0
    Xtr, Xte, ytr, yte = train_test_split(
        X, d.target, test_size=0.3, random_state=0, stratify=d.target
    )
    common = dict(
        hidden_layer_sizes=hidden,
        solver="adam",
        alpha=1e-4,
        batch_size=200,
        learning_rate_init=1e-3,
        max_iter=args.epochs,
        tol=0.0,
        n_iter_no_change=args.epochs + 1,
        shuffle=True,
    )
    sk_act = {"relu": "relu", "tanh": "tanh", "logistic": "logistic", "identity": "identity"}.get(
        args.activation
    )
    variants = {
        "iglu_np float32": lambda s: (
            MLPClassifier(activation=args.activation, random_state=s, **common),
            np.float32,
        ),
        "iglu_np float64": lambda s: (
            MLPClassifier(activation=args.activation, random_state=s, dtype="float64", **common),
            np.float64,
        ),
    }
    if sk_act:
        variants["sklearn float64"] = lambda s: (
            SkMLP(activation=sk_act, random_state=s, **common),
            np.float64,
        )
        variants["sklearn float32"] = lambda s: (
            SkMLP(activation=sk_act, random_state=s, **common),
            np.float32,
        )

    limiter = contextlib.nullcontext()
    if args.blas_threads:
        from threadpoolctl import threadpool_limits

        limiter = threadpool_limits(limits=args.blas_threads, user_api="blas")

    # Warm-up: compile/load the activation ufuncs outside the timings.
    MLPClassifier((8,), activation=args.activation, max_iter=1).fit(Xtr[:50], ytr[:50])
    res = {k: {"acc": [], "spe": []} for k in variants}
    with limiter, warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for seed in range(args.seeds):
            for name, make in variants.items():
                est, dt = make(seed)
                t0 = time.perf_counter()
                est.fit(Xtr.astype(dt), ytr)
                secs = time.perf_counter() - t0
                res[name]["acc"].append(est.score(Xte.astype(dt), yte))
                res[name]["spe"].append(secs / est.n_iter_)
    print(
        f"digits: {len(ytr)} train / {len(yte)} test, MLP {hidden}, {args.activation}, adam, "
        f"{args.epochs} epochs, batch 200, {args.seeds} seeds"
        + (f", BLAS threads {args.blas_threads}" if args.blas_threads else "")
    )
    print(f"{'':18s} {'test accuracy':>18s} {'ms / epoch (median)':>20s}")
    for name, r in res.items():
        acc = np.array(r["acc"]) * 100
        print(
            f"{name:18s} {acc.mean():9.2f} ± {acc.std():5.2f}   {1e3 * statistics.median(r['spe']):12.2f}"
        )


if __name__ == "__main__":
    main()
