import numpy as np
import pytest

import iglu_np
from iglu_np.cli import reproduce


def test_naive_float32_gradient_loses_sign_and_ours_does_not():
    x = -np.logspace(2, 5, 200).astype(np.float32)
    truth = iglu_np.iglu.dx(x.astype(np.float64))
    naive = reproduce.naive_iglu_dx_float32(x)
    ours = iglu_np.iglu.dx(x)
    assert (naive <= 0).any()  # the textbook formula cancels to garbage
    assert (ours > 0).all()
    np.testing.assert_allclose(ours, truth, rtol=1e-6)


def test_gate_gap():
    g, x = reproduce.gate_gap(1.0)
    assert 0.02263 < g < 0.02265 and abs(abs(x) - 3.19) < 0.01


def test_naive_float32_gradient_does_not_depend_on_the_cpu():
    """The report's naive-gradient numbers use a correctly rounded float32 arctan, not
    numpy's (SVML on AVX-512, the C library's atanf elsewhere: their last bits differ)."""
    mpmath = pytest.importorskip("mpmath")
    x32 = (-np.logspace(0, 5, 300)).astype(np.float32)
    with mpmath.workdps(40):
        exact = np.array([float(mpmath.atan(mpmath.mpf(float(v)))) for v in x32])
    # float(mpf) rounds to double; the float32 rounding of that is correct unless it is
    # within 2**-29 ulp of a tie, which none of these arguments is
    np.testing.assert_array_equal(reproduce.atan_float32(x32), exact.astype(np.float32))
    truth = iglu_np.iglu.dx(x32.astype(np.float64))
    err, bad = reproduce._naive_stats(reproduce.naive_iglu_dx_float32(x32), truth)
    assert bad == 19 and 1.2e8 < err < 1.3e8  # the numbers the README quotes


def test_figures_and_report(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import argparse

    import matplotlib.figure

    from .figcheck import checking_savefig

    problems = {}
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", checking_savefig(problems))
    args = argparse.Namespace(quick=True, out=str(tmp_path), skip="speed,table4,tails")
    assert reproduce.main(args) == 0
    report = (tmp_path / "report.md").read_text()
    for fig in (
        "fig1_activations.png",
        "fig2_iglu_sigma.png",
        "fig3_gate_gap.png",
        "fig4_tails.png",
    ):
        assert fig in report and (tmp_path / fig).stat().st_size > 10_000
    assert len(problems) == 4
    assert {k: v for k, v in problems.items() if v} == {}  # no text outside, no legend on data
    assert "0.0226" in report
    assert [ln for ln in report.splitlines() if ln.startswith("# ")] == [
        "# IGLU reproduction report"
    ]


def _table4_result():
    """A Table 4 result shaped like the quick run's, with accuracies like its README table."""
    from iglu_np.nn import experiments

    rng = np.random.default_rng(0)
    base = {10: 0.936, 20: 0.904, 50: 0.848, 100: 0.797}
    summary = []
    configs = (
        [("iglu", s) for s in experiments.PAPER_SIGMAS]
        + [("iglu_approx", s) for s in experiments.PAPER_SIGMAS]
        + [(b, None) for b in experiments.BASELINES]
    )
    for rho, acc in base.items():
        for name, sigma in configs:
            summary.append(
                {
                    "activation": name,
                    "sigma": sigma,
                    "rho": float(rho),
                    "n_seeds": 2,
                    "bal_acc_mean": acc + 0.004 * rng.standard_normal(),
                    "bal_acc_std": 0.012,
                    "loss_mean": 0.5,
                    "loss_std": 0.02,
                    "train_samples": 500,
                }
            )
    return {
        "summary": summary,
        "runs": [],
        "missing": [],
        "seconds": 1.0,
        "setting": {
            "quick": True,
            "seeds": [0, 1],
            "epochs": 40,
            "hidden": [64],
            "rhos": [float(r) for r in base],
            "learning_rate_init": 3e-3,
            "batch_size": 64,
            "n_jobs": 1,
        },
    }


def test_table4_plot_layout(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.figure

    from iglu_np.nn import experiments

    from .figcheck import checking_savefig

    problems = {}
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", checking_savefig(problems))
    path = experiments.plot(_table4_result(), str(tmp_path / "t4.png"))
    assert path and problems == {path: []}


def test_figure_check_finds_what_it_should():
    """The layout check itself: an annotation past the edge and a legend over points; an
    arrow across a curve, axes without a y-label, a log axis over 300 decades."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .figcheck import layout_problems

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(np.linspace(0, 1, 50), np.linspace(0, 1, 50), "o", label="points")
    ax.annotate("a long annotation that runs past the right edge", (0.9, 0.5))
    ax.legend(loc="center")
    found = layout_problems(fig)
    plt.close(fig)
    assert any("runs past the figure" in p for p in found)
    assert any("leaves its axes" in p for p in found)
    assert any("legend" in p and "covers" in p for p in found)
    assert any("has no y-label" in p for p in found)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3))
    x = np.linspace(-1, 1, 101)
    a1.plot(x, x, x, -x)
    a1.plot([0.5], [0.5], "ko")
    a1.annotate("crossing", (0.5, 0.5), xytext=(-0.9, 0.0), arrowprops=dict(arrowstyle="->"))
    a1.annotate("clear", (0.5, 0.5), xytext=(0.5, 0.9), arrowprops=dict(arrowstyle="->"))
    a2.semilogy(np.logspace(-1, 1, 20), np.logspace(-1, 1, 20))
    a2.set_ylim(1e-300, 2)
    a1.set_ylabel("y")
    a2.set_ylabel("y")
    found = layout_problems(fig)
    plt.close(fig)
    assert [p for p in found if "arrow" in p] == ["the arrow of 'crossing' crosses a curve ('')"]
    assert any("spans 300 decades" in p for p in found)
    assert not any("y-label" in p for p in found)


def test_unknown_skip_section_is_an_error_listing_the_valid_ones(capsys):
    from iglu_np import cli

    with pytest.raises(SystemExit) as e:
        cli.main(["reproduce", "--skip", "speed,table5"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown section 'table5'; choose from speed, table4, tails" in err
    with pytest.raises(ValueError, match="sections 'a', 'b'; choose from speed, table4, tails"):
        reproduce.parse_skip("b,tails,a")
    assert reproduce.parse_skip(" speed, table4 ,") == {"speed", "table4"}
    assert reproduce.parse_skip("") == set()


def test_quick_help_says_what_the_runs_do_not_how_long_they_take():
    import argparse
    import re

    from iglu_np import cli
    from iglu_np.cli import bench
    from iglu_np.nn.experiments import SETTINGS

    def quick_help(module):
        p = argparse.ArgumentParser()
        module.add_arguments(p)
        return " ".join(next(a.help for a in p._actions if "--quick" in a.option_strings).split())

    text = quick_help(reproduce)
    for setting in SETTINGS.values():
        assert f"{len(setting['seeds'])} seeds x {setting['epochs']} epochs" in text
    for t in (text, quick_help(bench), cli.EPILOG, bench.__doc__):
        assert not re.search(r"about \d|\d\s*(s|min|minutes?)\b", t), t


def test_training_pool_never_forks_by_default():
    from iglu_np.nn import experiments

    assert experiments.pool_context().get_start_method() in ("forkserver", "spawn")
    assert experiments.pool_context("spawn").get_start_method() == "spawn"


@pytest.mark.slow
def test_table4_pool_runs_after_threaded_work_in_the_parent():
    """The full report computes large arrays (the threaded loops) before Table 4; its
    worker processes must still start and return (a forked pool died there)."""
    import json
    import subprocess
    import sys

    code = (
        "import json, numpy as np, iglu_np\n"
        "from iglu_np.nn import experiments\n"
        "x = np.ones(1 << 20, np.float32)\n"
        "iglu_np.iglu(x); iglu_np.iglu(x)\n"  # the second call runs threaded
        "r = experiments.long_tailed_digits(rhos=(10,), activations=('relu', 'iglu'),\n"
        "    sigmas=(1.0,), seeds=(0, 1), epochs=2, hidden=(8,), n_jobs=2)\n"
        "print(json.dumps([len(r['runs']), r['setting']['n_jobs']]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [4, 2]
