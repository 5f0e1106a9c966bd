"""The paper's Table 4 in miniature: long-tailed digits.

Kang, Yang & Rocha Neto (2026) train on long-tailed CIFAR (eq. 12, imbalance ratio rho)
with class-weighted cross-entropy and compare IGLU / IGLU-Approx at several sigma with
ReLU, GELU, SiLU, Hardswish and Mish. Here: scikit-learn's 8x8 digits, a balanced
stratified test split, the training split made long-tailed with eq. 12
(``n_k = n_max * (1/rho)**(k/(K-1))``), an MLP trained with class-weighted cross-entropy,
several seeds; we report mean ± std of the balanced test accuracy and of the test
cross-entropy.

:func:`long_tailed_digits` runs it (by default 4 ratios x 15 configurations: 120 training
runs of 40 epochs with ``quick=True``, 300 of 120 epochs in the full setting, on all cores)
and, given ``out_dir``, writes ``table4_digits.md``,
``table4_digits.csv`` and ``table4_digits.png`` (plot needs matplotlib).
"""

from __future__ import annotations

import contextlib
import csv
import multiprocessing
import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np

__all__ = ["long_tailed_digits", "SETTINGS", "PAPER_SIGMAS", "BASELINES"]

PAPER_SIGMAS = (0.1, 0.5, 1.0, 5.0, 10.0)
BASELINES = ("relu", "gelu", "silu", "hardswish", "mish")
RHOS = (10, 20, 50, 100)

# quick: the smoke version (2 seeds, a small MLP); full: the report's setting.
SETTINGS = {
    "quick": dict(seeds=(0, 1), epochs=40, hidden=(64,)),
    "full": dict(seeds=(0, 1, 2, 3, 4), epochs=120, hidden=(128, 64)),
}


def _configs(activations, sigmas):
    import iglu_np

    out, missing = [], []
    for name in activations:
        if name not in iglu_np.ACTIVATIONS:
            missing.append(name)
            continue
        if "sigma" in iglu_np.get(name).param_names:
            out.extend((name, float(s)) for s in sigmas)
        else:
            out.append((name, None))
    return out, missing


@contextlib.contextmanager
def fixed_budget():
    """The paper's protocol trains every configuration for the same number of epochs, by
    design: the estimator's ConvergenceWarning at max_iter says nothing there."""
    from .estimator import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def _one_blas_thread():
    """Small matmuls run faster on one BLAS thread, and the runs are already parallel
    across processes; threadpoolctl (a scikit-learn dependency) is optional."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def pool_context(method=None):
    """The ``multiprocessing`` context of the training processes: ``method`` if given,
    else ``forkserver`` where the platform has it, else ``spawn``; never ``fork`` by
    default. The parent has usually run threaded work by then (the report's full-size
    figures, a BLAS call), and a child forked from a threaded process inherits locks held
    by threads that it does not have: iglu_np's loops run on one thread there
    (:mod:`iglu_np._forksafe`), other libraries may hang or end it. The forkserver imports
    the training code once (its preload list, when this starts it) and forks every worker
    from that clean process; spawned workers import it themselves."""
    if method is None:
        have = multiprocessing.get_all_start_methods()
        method = "forkserver" if "forkserver" in have else "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        from multiprocessing import forkserver

        # added to the preload list already set (default: ["__main__"]), not replacing it
        have = list(
            getattr(getattr(forkserver, "_forkserver", None), "_preload_modules", None)
            or ["__main__"]
        )
        ours = ["iglu_np.nn.estimator", "iglu_np.nn.data", __name__]
        ctx.set_forkserver_preload(have + [m for m in ours if m not in have])
    return ctx


def _one_run(job):
    """Train and evaluate one (rho, activation, sigma, seed); module-level for pickling."""
    (rho, name, sigma, seed, epochs, hidden, lr, batch_size, test_size) = job
    from .data import balanced_accuracy, load_digits, long_tailed_subsample, stratified_split
    from .estimator import MLPClassifier

    X, y = load_digits()
    tr, te = stratified_split(y, test_size, random_state=seed)
    Xtr, ytr, _ = long_tailed_subsample(X[tr], y[tr], rho, random_state=seed)
    clf = MLPClassifier(
        hidden_layer_sizes=hidden,
        activation=name,
        activation_params=None if sigma is None else {"sigma": sigma},
        class_weight="balanced",
        max_iter=epochs,
        learning_rate_init=lr,
        batch_size=batch_size,
        tol=0.0,
        n_iter_no_change=epochs + 1,
        random_state=seed,
        verbose=0,
    )
    t0 = time.perf_counter()
    with _one_blas_thread(), fixed_budget():
        clf.fit(Xtr, ytr)
    secs = time.perf_counter() - t0
    proba = np.asarray(clf.predict_proba(X[te]), dtype=np.float64)
    pos = np.searchsorted(clf.classes_, y[te])
    loss = float(-np.mean(np.log(np.maximum(proba[np.arange(len(pos)), pos], 1e-300))))
    pred = clf.classes_[np.argmax(proba, axis=1)]
    return {
        "rho": rho,
        "activation": name,
        "sigma": sigma,
        "seed": seed,
        "balanced_accuracy": balanced_accuracy(y[te], pred),
        "test_loss": loss,
        "train_samples": int(len(ytr)),
        "seconds": secs,
    }


def long_tailed_digits(
    *,
    quick: bool = False,
    rhos=RHOS,
    activations=None,
    sigmas=PAPER_SIGMAS,
    seeds=None,
    epochs=None,
    hidden=None,
    learning_rate_init=3e-3,
    batch_size=64,
    test_size=0.3,
    n_jobs=None,
    start_method=None,
    out_dir=None,
    progress: bool = False,
) -> dict:
    """Run the miniature Table 4 and return ``{"summary": [...], "runs": [...], ...}``.

    ``summary`` has one row per (activation, sigma, rho) with mean and std over seeds of
    balanced test accuracy and test loss. ``activations`` defaults to IGLU, IGLU-Approx
    and the paper's baselines; names not registered are skipped (listed in ``missing``).
    ``n_jobs`` worker processes (default: all cores), started with ``start_method``
    (default: see :func:`pool_context`).
    """
    setting = SETTINGS["quick" if quick else "full"]
    seeds = tuple(setting["seeds"] if seeds is None else seeds)
    epochs = int(setting["epochs"] if epochs is None else epochs)
    hidden = tuple(setting["hidden"] if hidden is None else hidden)
    activations = ("iglu", "iglu_approx", *BASELINES) if activations is None else tuple(activations)
    configs, missing = _configs(activations, sigmas)
    jobs = [
        (float(r), n, s, int(sd), epochs, hidden, learning_rate_init, batch_size, test_size)
        for r in rhos
        for (n, s) in configs
        for sd in seeds
    ]
    n_jobs = (os.cpu_count() or 1) if n_jobs is None else int(n_jobs)
    t0 = time.perf_counter()
    runs = []
    every = max(1, len(jobs) // 10)

    def report(i):  # about ten lines per table, with an estimate of the time left
        if progress and ((i + 1) % every == 0 or i + 1 == len(jobs)):
            el = time.perf_counter() - t0
            left = el / (i + 1) * (len(jobs) - i - 1)
            print(
                f"  {i + 1}/{len(jobs)} training runs, {el:.0f} s"
                + (f", about {left:.0f} s left" if i + 1 < len(jobs) else ""),
                flush=True,
            )

    if n_jobs > 1 and len(jobs) > 1:
        ctx = pool_context(start_method)
        with ProcessPoolExecutor(max_workers=n_jobs, mp_context=ctx) as ex:
            for i, r in enumerate(
                ex.map(_one_run, jobs, chunksize=max(1, len(jobs) // (8 * n_jobs)))
            ):
                runs.append(r)
                report(i)
    else:
        for i, job in enumerate(jobs):
            runs.append(_one_run(job))
            report(i)
    summary = _summarise(runs)
    result = {
        "summary": summary,
        "runs": runs,
        "missing": missing,
        "seconds": time.perf_counter() - t0,
        "setting": {
            "quick": quick,
            "seeds": list(seeds),
            "epochs": epochs,
            "hidden": list(hidden),
            "rhos": [float(r) for r in rhos],
            "learning_rate_init": learning_rate_init,
            "batch_size": batch_size,
            "n_jobs": n_jobs,
        },
    }
    if out_dir is not None:
        result["files"] = write_outputs(result, out_dir)
    return result


def _summarise(runs):
    groups = {}
    for r in runs:
        groups.setdefault((r["activation"], r["sigma"], r["rho"]), []).append(r)
    out = []
    for (name, sigma, rho), rs in groups.items():
        acc = np.array([r["balanced_accuracy"] for r in rs])
        loss = np.array([r["test_loss"] for r in rs])
        out.append(
            {
                "activation": name,
                "sigma": sigma,
                "rho": rho,
                "n_seeds": len(rs),
                "bal_acc_mean": float(acc.mean()),
                "bal_acc_std": float(acc.std(ddof=1)) if len(rs) > 1 else 0.0,
                "loss_mean": float(loss.mean()),
                "loss_std": float(loss.std(ddof=1)) if len(rs) > 1 else 0.0,
                "train_samples": rs[0]["train_samples"],
            }
        )
    return out


def _label(name, sigma):
    pretty = {
        "iglu": "IGLU",
        "iglu_approx": "IGLU-Approx",
        "relu": "ReLU",
        "gelu": "GELU",
        "silu": "SiLU",
        "hardswish": "Hardswish",
        "mish": "Mish",
    }.get(name, name)
    return pretty if sigma is None else f"{pretty} (σ={sigma:g})"


def markdown_table(result) -> str:
    summ = result["summary"]
    rhos = sorted({r["rho"] for r in summ})
    rows = []
    for r in summ:
        key = (r["activation"], r["sigma"])
        if key not in rows:
            rows.append(key)
    cell = {(r["activation"], r["sigma"], r["rho"]): r for r in summ}
    best = {rho: max(r["bal_acc_mean"] for r in summ if r["rho"] == rho) for rho in rhos}
    st = result["setting"]
    lines = [
        f"Balanced test accuracy (%) and test loss on long-tailed digits, mean ± std over "
        f"{len(st['seeds'])} seeds ({st['epochs']} epochs, MLP {tuple(st['hidden'])}, class-weighted "
        "cross-entropy); best accuracy per ρ in bold.",
        "",
        "| activation | "
        + " | ".join(f"ρ={rho:g} acc" for rho in rhos)
        + " | "
        + " | ".join(f"ρ={rho:g} loss" for rho in rhos)
        + " |",
        "|---|" + "---:|" * (2 * len(rhos)),
    ]
    for name, sigma in rows:
        accs, losses = [], []
        for rho in rhos:
            c = cell.get((name, sigma, rho))
            if c is None:
                accs.append("")
                losses.append("")
                continue
            a = f"{100 * c['bal_acc_mean']:.1f} ± {100 * c['bal_acc_std']:.1f}"
            accs.append(f"**{a}**" if c["bal_acc_mean"] == best[rho] else a)
            losses.append(f"{c['loss_mean']:.3f} ± {c['loss_std']:.3f}")
        lines.append(
            f"| {_label(name, sigma)} | " + " | ".join(accs) + " | " + " | ".join(losses) + " |"
        )
    if result.get("missing"):
        lines += ["", f"Not registered (skipped): {', '.join(result['missing'])}."]
    return "\n".join(lines) + "\n"


def write_outputs(result, out_dir) -> list:
    os.makedirs(out_dir, exist_ok=True)
    files = []
    md = os.path.join(out_dir, "table4_digits.md")
    with open(md, "w") as f:
        f.write(markdown_table(result))
    files.append(md)
    path = os.path.join(out_dir, "table4_digits.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(result["summary"][0]))
        w.writeheader()
        w.writerows(result["summary"])
    files.append(path)
    png = plot(result, os.path.join(out_dir, "table4_digits.png"))
    if png:
        files.append(png)
    return files


# Baselines as horizontal lines: each its own colour and dash pattern (they often lie
# within a point of each other).
_BASELINE_STYLES = (":", "--", "-.", (0, (6, 2)), (0, (3, 1, 1, 1, 1, 1)))


def plot(result, path):
    """Balanced accuracy vs sigma for IGLU / IGLU-Approx (drawn 5 % left and right of
    each sigma, so that their error bars do not overlap), baselines as horizontal lines,
    one panel per rho, each with its own y-range (the ratios differ by up to 15 points,
    the activations within one by about 1). Returns the path, or None without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    summ = result["summary"]
    rhos = sorted({r["rho"] for r in summ})
    fig, axes = plt.subplots(
        1, len(rhos), figsize=(3.6 * len(rhos), 3.9), squeeze=False, layout="constrained"
    )
    for ax, rho in zip(axes[0], rhos):
        rs = [r for r in summ if r["rho"] == rho]
        for name, style, dodge in (("iglu", "o-", 0.95), ("iglu_approx", "s--", 1.05)):
            pts = sorted(
                (r["sigma"], r["bal_acc_mean"], r["bal_acc_std"])
                for r in rs
                if r["activation"] == name and r["sigma"] is not None
            )
            if pts:
                s, m, e = map(np.array, zip(*pts))
                ax.errorbar(
                    s * dodge, 100 * m, yerr=100 * e, fmt=style, capsize=2, label=_label(name, None)
                )
        for i, r in enumerate(x for x in rs if x["sigma"] is None):
            ax.axhline(
                100 * r["bal_acc_mean"],
                color=f"C{i + 2}",
                lw=1.4,
                ls=_BASELINE_STYLES[i % len(_BASELINE_STYLES)],
                label=_label(r["activation"], None),
            )
        ax.set_xscale("log")
        ax.set_title(f"ρ = {rho:g}")
        ax.set_xlabel("σ")
        ax.set_ylabel("balanced test accuracy (%)")
        ax.grid(alpha=0.3)
    # one legend for all panels, below them: inside a panel it covered data points
    handles, labels = axes[0][-1].get_legend_handles_labels()
    first = [i for i, lb in enumerate(labels) if lb.startswith("IGLU")]  # IGLU before baselines
    order = first + [i for i in range(len(labels)) if i not in first]
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    fig.legend(
        handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8, handlelength=3.5
    )
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _fmt_time(s):
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


if __name__ == "__main__":  # pragma: no cover
    import sys

    res = long_tailed_digits(quick="--full" not in sys.argv, out_dir="table4_out", progress=True)
    print(markdown_table(res))
    print(f"done in {_fmt_time(res['seconds'])}")
