"""``iglu-np reproduce``: the paper's figures and tables regenerated on this machine.

Writes ``report.md`` into the output directory, with the PNG figures, ``summary.json`` and
the Table 4 data beside it: Figures 1-3 (the activations, IGLU for several sigma, the gap
between IGLU's gate and its approximation), a figure of the tails and of float32
gradients, Table 1 (speed, as ``iglu-np bench``), Table 4 in miniature (long-tailed
digits) and the tail index of trained networks' pre-activations. Everything in the report
is measured or computed in the run that writes it; nothing is copied from the paper. Each
step prints a line with the elapsed time when it starts, long steps their progress.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

SIGMAS = (0.1, 0.5, 1.0, 5.0, 10.0)


#: the sections ``--skip`` can leave out (the figures are always made)
SECTIONS = ("speed", "table4", "tails")


def parse_skip(text: str) -> set:
    """The section names of a comma-separated ``--skip`` value; ValueError naming the
    valid ones for any other name."""
    names = {s.strip() for s in text.split(",") if s.strip()}
    bad = sorted(names - set(SECTIONS))
    if bad:
        raise ValueError(
            f"unknown section{'s' if len(bad) > 1 else ''} "
            f"{', '.join(map(repr, bad))}; choose from {', '.join(SECTIONS)}"
        )
    return names


def _skip_arg(text: str) -> str:
    import argparse

    try:
        parse_skip(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_arguments(p):
    from .bench import QUICK_SIZES, SIZES

    p.add_argument(
        "--quick",
        action="store_true",
        help=f"the paper's {len(PAPER_TABLE)} speed-table rows at {len(QUICK_SIZES)} "
        "sizes, Table 4 with 2 seeds x 40 epochs (without it: every activation "
        f"at {len(SIZES)} sizes, 5 seeds x 120 epochs); each step prints its "
        "elapsed time",
    )
    p.add_argument(
        "--out",
        default="reproduce_out",
        metavar="DIR",
        help="output directory, created if needed (default: %(default)s)",
    )
    p.add_argument(
        "--skip",
        default="",
        metavar="SECTIONS",
        type=_skip_arg,
        help="comma-separated sections to leave out: speed (Table 1), table4, "
        "tails (tail index); the figures are always made",
    )


# --------------------------------------------------------------------------- helpers
def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - exercised without the extra
        raise SystemExit(
            "iglu-np reproduce needs matplotlib: pip install '.[examples]' in the iglu_np checkout"
        ) from e
    return plt


class _Progress:
    """One line per step with elapsed time (tqdm-free so it works everywhere)."""

    def __init__(self, steps):
        self.steps, self.i, self.t0 = steps, 0, time.perf_counter()

    def __call__(self, what):
        self.i += 1
        print(f"[{self.i}/{self.steps} {time.perf_counter() - self.t0:6.1f}s] {what}", flush=True)


def _act(name):
    import iglu_np

    return iglu_np.ACTIVATIONS.get(name)


# --------------------------------------------------------------------------- figures
def figure_shapes(out: Path) -> str:
    """Figure 1: ReLU, GELU, SiLU, IGLU, IGLU-Approx; and the GELU_a family."""
    plt = _plt()
    x = np.linspace(-5, 3, 801)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, label in [
        ("relu", "ReLU"),
        ("gelu", "GELU"),
        ("silu", "SiLU"),
        ("iglu", "IGLU (σ=1)"),
        ("iglu_approx", "IGLU-Approx (σ=1)"),
    ]:
        a = _act(name)
        if a is not None:
            axes[0].plot(x, a(x), label=label)
    axes[0].set(title="Activations", xlabel="x", ylabel="f(x)")
    ga = _act("gelu_a")
    if ga is not None:
        for a_ in (0.25, 0.5, 1.0, 2.0, 4.0):
            axes[1].plot(x, ga(x, a=a_), label=f"a = {a_}")
    axes[1].set(title="GELU_a(x) = x Φ(a x)", xlabel="x", ylabel="GELU_a(x)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    p = out / "fig1_activations.png"
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p.name


def figure_sigma(out: Path) -> str:
    """Figure 2: IGLU for sigma in the paper's grid, and its derivative."""
    import iglu_np

    plt = _plt()
    x = np.linspace(-6, 4, 1001)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for s in SIGMAS:
        axes[0].plot(x, iglu_np.iglu(x, sigma=s), label=f"σ = {s}")
        axes[1].plot(x, iglu_np.iglu.dx(x, sigma=s), label=f"σ = {s}")
    axes[0].set(title="IGLU(x; σ)", xlabel="x", ylabel="IGLU(x; σ)")
    axes[1].set(title="∂IGLU/∂x", xlabel="x", ylabel="∂IGLU/∂x")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    p = out / "fig2_iglu_sigma.png"
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p.name


def gate_gap(sigma: float = 1.0):
    """(max |Z - Z_approx|, x where it occurs), on a fine grid."""
    import iglu_np

    x = np.linspace(-60 / sigma, 60 / sigma, 2_400_001)
    d = np.abs(iglu_np.z_gate(x, sigma=sigma) - iglu_np.z_approx(x, sigma=sigma))
    i = int(np.argmax(d))
    return float(d[i]), float(x[i])


def figure_gap(out: Path):
    """Figure 3: Z - Z_approx for several sigma, with the measured maximum marked."""
    import iglu_np

    plt = _plt()
    x = np.linspace(-12, 12, 4001)
    fig, ax = plt.subplots(figsize=(7, 4))
    for s in (0.5, 1.0, 2.0):
        ax.plot(x, iglu_np.z_gate(x, sigma=s) - iglu_np.z_approx(x, sigma=s), label=f"σ = {s}")
    gmax, xmax = gate_gap(1.0)
    ax.axhline(gmax, color="k", ls=":", lw=1)
    ax.axhline(-gmax, color="k", ls=":", lw=1)
    ymax = float(iglu_np.z_gate(xmax) - iglu_np.z_approx(xmax))
    ax.plot([xmax], [ymax], "ko")
    # The curves fill the band ±gmax and the point lies on its edge: the label goes in the
    # free strip beyond that edge, straight above (below) the point, so that its short
    # arrow crosses no curve; the legend, in one row, in the strip on the other side.
    up = ymax > 0
    side = 1 if up else -1
    ax.annotate(
        f"max |Z − Z_a| = {gmax:.5f} at σx = ±{abs(xmax):.3f} (σ = 1)",
        (xmax, ymax),
        xytext=(xmax, side * 1.45 * gmax),
        ha="center",
        va="center",
        fontsize=9,
        arrowprops=dict(arrowstyle="->", lw=0.8),
    )
    ax.set(
        title="Z(x; σ) − Z_approx(x; σ)",
        xlabel="x",
        ylabel="Z − Z_approx",
        ylim=(-2 * gmax, 2 * gmax),
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="lower center" if up else "upper center", ncol=3, fontsize=9)
    p = out / "fig3_gate_gap.png"
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p.name, gmax, xmax


def atan_float32(t):
    """The correctly rounded float32 arctan, the same on every CPU: ``math.atan`` in double
    precision (within 1 ulp of double in every common libm) rounded once to float32, which
    can differ from correct rounding only for arguments within 2**-29 ulp of a tie.

    numpy's own float32 arctan is not CPU-independent: numpy uses Intel's SVML on AVX-512
    CPUs and the C library's atanf elsewhere, and they round some arguments differently in
    the last bit."""
    import math

    t = np.asarray(t, np.float32)
    return (
        np.array([math.atan(v) for v in t.astype(np.float64).ravel()], np.float64)
        .astype(np.float32)
        .reshape(t.shape)
    )


def naive_iglu_dx_float32(x, sigma=1.0, atan=atan_float32):
    """The textbook derivative Z + σx/(π(1+σ²x²)) in float32, as a naive implementation
    (the paper's reference code, torch autograd of x*(0.5 + atan(s*x)/pi)) computes it.

    In the negative tail 0.5 + atan(σx)/π cancels: the result is decided by the last bits
    of the float32 arctan, so the arctan is a parameter. The default rounds a double
    precision arctan (:func:`atan_float32`), which makes the result the same on every CPU;
    ``atan=np.arctan`` gives what numpy computes on this machine."""
    x = np.asarray(x, np.float32)
    s = np.float32(sigma)
    pi = np.float32(np.pi)
    with np.errstate(all="ignore"):
        t = s * x
        return np.float32(0.5) + atan(t) / pi + t / (pi * (np.float32(1) + t * t))


def _naive_stats(naive, truth):
    with np.errstate(all="ignore"):
        rel = np.abs(naive - truth) / truth
    return float(rel.max()), int((naive <= 0).sum())


def figure_tails(out: Path) -> dict:
    """Figure 4: tails on log scales, and the naive float32 gradient against ours."""
    import iglu_np

    plt = _plt()
    mags = np.logspace(-1, 6, 400)
    x = -mags
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    ax = axes[0]
    # Gates dashed, gradients solid; IGLU blue, GELU red. The axis stops at 1e-30: GELU's
    # curves leave it near |x| = 11 (they reach 1e-300 by 37) while IGLU's stay above it,
    # so neither family is pressed into a strip of the panel.
    floor = 1e-30
    ax.loglog(mags, iglu_np.z_gate(x), "C0--", label="IGLU gate Z(−|x|)")
    ax.loglog(mags, iglu_np.iglu.dx(x), "C0-", label="IGLU ∂f/∂x at −|x|")
    g = _act("gelu")
    if g is not None:
        with np.errstate(all="ignore"):
            gv = np.abs(g.dx(x))
            gz = g(x) / x
        ax.loglog(mags, np.where(gz > 0, gz, np.nan), "C3--", label="GELU gate Φ(−|x|)")
        ax.loglog(mags, np.where(gv > 0, gv, np.nan), "C3-", label="|GELU ∂f/∂x| at −|x|")
    ax.set(
        title="Negative tails (float64)", xlabel="|x|", ylabel="value at x = −|x|", ylim=(floor, 3)
    )
    ax.grid(alpha=0.3, which="major")
    ax.legend(fontsize=8, loc="lower right")

    ax = axes[1]
    x32 = (-np.logspace(0, 5, 300)).astype(np.float32)
    ours = iglu_np.iglu.dx(x32)
    naive = naive_iglu_dx_float32(x32)
    truth = iglu_np.iglu.dx(x32.astype(np.float64))
    ax.loglog(-x32, truth, "k-", lw=2, label="true (float64 reference)")
    ax.loglog(-x32, np.where(ours > 0, ours, np.nan), "C0--", label="iglu_np float32")
    pos = naive > 0
    ax.loglog(-x32[pos], naive[pos], "C3.", ms=3, label="naive float32, > 0")
    neg = naive < 0
    ax.loglog(-x32[neg], -naive[neg], "C1x", ms=3, label="naive float32, < 0 (sign lost)")
    zero = naive == 0
    if zero.any():
        ax.loglog(-x32[zero], np.full(zero.sum(), 1e-16), "C4|", ms=6, label="naive float32 == 0")
    ax.set(
        title="IGLU gradient in the negative tail, float32",
        xlabel="|x|",
        ylabel="∂IGLU/∂x at x = −|x|",
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    p = out / "fig4_tails.png"
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    with np.errstate(all="ignore"):
        rel_ours = np.abs(ours - truth) / truth
        rel_naive = np.abs(naive - truth) / truth
    first_bad = float(-x32[np.argmax(rel_naive > 0.5)]) if (rel_naive > 0.5).any() else None
    np_err, np_bad = _naive_stats(naive_iglu_dx_float32(x32, atan=np.arctan), truth)
    return {
        "figure": p.name,
        "max_rel_err_ours": float(rel_ours.max()),
        "max_rel_err_naive": float(rel_naive.max()),
        "naive_wrong_sign_or_zero": int((naive <= 0).sum()),
        "points": int(x32.size),
        "naive_first_50pct_error_at": first_bad,
        # the same formula with numpy's float32 arctan on this CPU (varies between CPUs)
        "max_rel_err_naive_numpy_atan": np_err,
        "naive_numpy_atan_wrong_sign_or_zero": np_bad,
    }


# --------------------------------------------------------------------------- tables
# The paper's Table 1 rows; --quick measures only these, the full run every activation.
PAPER_TABLE = (
    "identity",
    "relu",
    "gelu",
    "gelu_tanh",
    "silu",
    "mish",
    "elu",
    "celu",
    "selu",
    "softplus",
    "hardswish",
    "hardsigmoid",
    "sigmoid",
    "tanh",
    "iglu",
    "iglu_approx",
)


def speed_section(quick: bool) -> str:
    import iglu_np

    from . import bench

    names = [n for n in PAPER_TABLE if n in iglu_np.ACTIVATIONS] if quick else None
    sizes = bench.QUICK_SIZES if quick else bench.SIZES
    last = [0.0]
    t0 = time.perf_counter()

    def progress(done, total, label):  # a line every 5 s at most, and the last one
        now = time.perf_counter()
        if now - last[0] >= 5 or done == total:
            last[0] = now
            print(f"  {done}/{total} measurements ({label}), {now - t0:.0f} s", flush=True)

    data = bench.run(
        names=names,
        sizes=sizes,
        repeats=3 if quick else 7,
        min_time=0.02 if quick else 0.05,
        progress=progress,
    )
    return bench.markdown(data, heading=False)


def table4_section(quick: bool, out: Path):
    from ..nn import experiments

    res = experiments.long_tailed_digits(quick=quick, out_dir=str(out), progress=True)
    return experiments.markdown_table(res), res


def tail_index_section(t4: dict | None, quick: bool) -> str:
    """Hill tail index of each hidden layer's pre-activations of trained IGLU MLPs, one per
    sigma of the paper's grid, on the most imbalanced digits split, beside its accuracy."""
    from ..nn import MLPClassifier, Tensor, no_grad
    from ..nn.data import balanced_accuracy, load_digits, long_tailed_subsample, stratified_split
    from ..nn.experiments import fixed_budget
    from ..nn.layers import Linear
    from ..stats import tail_index

    rho = 100.0
    setting = (t4 or {}).get("setting", {})
    hidden = tuple(setting.get("hidden", (64,) if quick else (128, 64)))
    epochs = int(setting.get("epochs", 40 if quick else 120))
    X, y = load_digits()
    tr, te = stratified_split(y, 0.3, random_state=0)
    Xtr, ytr, _ = long_tailed_subsample(X[tr], y[tr], rho, random_state=0)
    rows = []
    t0 = time.perf_counter()
    for i, s in enumerate(SIGMAS):
        clf = MLPClassifier(
            hidden_layer_sizes=hidden,
            activation="iglu",
            activation_params={"sigma": s},
            class_weight="balanced",
            max_iter=epochs,
            learning_rate_init=3e-3,
            batch_size=64,
            tol=0.0,
            n_iter_no_change=epochs + 1,
            random_state=0,
            verbose=0,
        )
        with fixed_budget():
            clf.fit(Xtr, ytr)
        acc = balanced_accuracy(y[te], clf.predict(X[te]))
        h = Tensor(np.asarray(X, dtype=np.float32))
        clf.model_.eval()
        alphas = []
        with no_grad():
            for layer in clf.model_.layers[:-1]:
                h = layer(h)
                if isinstance(layer, Linear):
                    # pre-activations of this hidden layer, standardised per unit so that
                    # the pooled sample measures tail shape, not differences in unit scale
                    z = np.asarray(h.data, dtype=np.float64)
                    z = (z - np.median(z, axis=0)) / (
                        np.median(np.abs(z - np.median(z, axis=0)), axis=0) + 1e-12
                    )
                    alphas.append(tail_index(z))
        rows.append((s, acc, alphas))
        print(
            f"  {i + 1}/{len(SIGMAS)} networks trained (σ = {s:g}), "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
    best = max(rows, key=lambda r: r[1])[0]
    nl = len(rows[0][2])
    lines = [
        f"IGLU MLPs {hidden} trained on digits made long-tailed at ρ = {rho:g} ({epochs} epochs, "
        "seed 0), one per σ. Tail index α (Hill estimator, k = ⌊√n⌋ upper order statistics of "
        "|z| pooled over the layer's units after per-unit median/MAD standardisation, n = "
        "samples × units; ± asymptotic standard error α/√k) of each hidden layer's "
        "pre-activations over the full digits set. Smaller α = heavier tails; a Cauchy gate "
        "has α = 1, a Gaussian has no finite α (Hill values grow with n).",
        "",
        "| σ | balanced acc (%) | " + " | ".join(f"layer {i + 1} α" for i in range(nl)) + " |",
        "|---:|---:|" + "---:|" * nl,
    ]
    for s, acc, alphas in rows:
        mark = " (best)" if s == best else ""
        lines.append(
            f"| {s:g}{mark} | {100 * acc:.1f} | "
            + " | ".join(f"{a.alpha:.2f} ± {a.stderr:.2f}" for a in alphas)
            + " |"
        )
    return "\n".join(lines) + "\n"


def _machine() -> str:
    import numba

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, Numba threads {numba.get_num_threads()}, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )


# --------------------------------------------------------------------------- main
def main(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    skip = parse_skip(args.skip)
    prog = _Progress(4 + len(set(SECTIONS) - skip))
    t0 = time.perf_counter()
    md = [
        "# IGLU reproduction report",
        "",
        f"Generated by `iglu-np reproduce{' --quick' if args.quick else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}; machine: {_machine()}.",
        "",
    ]
    prog("Figure 1: activation shapes")
    md += ["## Figure 1: activations", "", f"![Figure 1]({figure_shapes(out)})", ""]
    prog("Figure 2: IGLU for several sigma")
    md += [
        "## Figure 2: IGLU for σ ∈ {0.1, 0.5, 1, 5, 10} and its derivative",
        "",
        f"![Figure 2]({figure_sigma(out)})",
        "",
    ]
    prog("Figure 3: gate approximation gap")
    name, gmax, xmax = figure_gap(out)
    md += [
        "## Figure 3: Z − Z_approx",
        "",
        f"Measured max |Z − Z_approx| = **{gmax:.5f}** at σx = {xmax:.3f} "
        f"(the paper states < 0.025; the gap is odd in σx, so ±{abs(xmax):.3f} both attain it).",
        "",
        f"![Figure 3]({name})",
        "",
    ]
    prog("Figure 4: tails and float32 gradients")
    tails = figure_tails(out)
    md += [
        "## Figure 4: tails (beyond the paper)",
        "",
        "IGLU's gate and gradient decay polynomially (the gradient like 2/(3πσ³|x|³)); GELU's "
        "decay like exp(−x²/2). Right: the IGLU gradient in float32 in the negative tail.",
        "",
        f"- iglu_np float32: max relative error {tails['max_rel_err_ours']:.2e} over "
        f"{tails['points']} points in [−1e5, −1].",
        f"- naive float32 formula 0.5 + atan(x)/π + x/(π(1 + x²)), with a correctly rounded "
        f"float32 arctan: max relative error {tails['max_rel_err_naive']:.2e}; "
        f"{tails['naive_wrong_sign_or_zero']} points with a zero or negative gradient"
        + (
            f"; error above 50% from |x| ≈ {tails['naive_first_50pct_error_at']:.3g}."
            if tails["naive_first_50pct_error_at"]
            else "."
        ),
        f"- the same formula with numpy's float32 arctan on this CPU: max relative error "
        f"{tails['max_rel_err_naive_numpy_atan']:.2e}, "
        f"{tails['naive_numpy_atan_wrong_sign_or_zero']} zero or negative. In the tail "
        "0.5 + atan(x)/π cancels, so these counts follow the last bit of the arctan, which "
        "numpy computes differently on different CPUs (Intel's SVML on AVX-512, the C "
        "library's atanf elsewhere; they round some arguments differently); the line above "
        "does not depend on the CPU.",
        "",
        f"![Figure 4]({tails['figure']})",
        "",
    ]
    summary = {"gate_gap": gmax, "gate_gap_at": xmax, "tails": tails}
    if "speed" not in skip:
        prog("Table 1: speed (iglu-np bench)")
        md += ["## Table 1: speed on this machine", "", speed_section(args.quick), ""]
    res = None
    if "table4" not in skip:
        prog("Table 4 (miniature): long-tailed digits")
        t4, res = table4_section(args.quick, out)
        md += [
            "## Table 4 in miniature: long-tailed digits",
            "",
            t4,
            "",
            "![Table 4 plot](table4_digits.png)",
            "",
        ]
        summary["table4_seconds"] = res.get("seconds")
    if "tails" not in skip:
        prog("Tail index of hidden pre-activations")
        md += [
            "## Tail index of hidden pre-activations (beyond the paper)",
            "",
            tail_index_section(res, args.quick),
            "",
        ]
    md += [f"_Total time: {time.perf_counter() - t0:.0f} s._", ""]
    (out / "report.md").write_text("\n".join(md))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(f"wrote {out / 'report.md'} (figures beside it)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    import argparse

    ap = argparse.ArgumentParser()
    add_arguments(ap)
    sys.exit(main(ap.parse_args()))
