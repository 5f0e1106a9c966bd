"""tools/accuracy_search.py: the random search flags points above the tolerance, a short
run over one activation writes its worst points and a report, and --compare scores the
same draws at a git revision and here."""

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import accuracy_search as search  # noqa: E402  (a development tool, not in the package)

from iglu_np._spec import REGISTRY  # noqa: E402


def test_score_flags_a_value_off_by_more_than_the_tolerance():
    spec = REGISTRY["iglu"]
    x = np.array([-1e6, -3.0, -1.0, 0.5, 7.0])
    ps = {"sigma": 1.0}
    good = search.evaluate(spec, np.float64, "fwd", x, ps)
    err, true, bad = search.score(spec, np.float64, "fwd", x, ps, good)
    assert bad == [] and float(np.max(err)) <= 4
    # 1e-13 relative is ~450 ulp: every point is reported, with its place and values
    off = good * (1 + 1e-13)
    _, _, bad = search.score(spec, np.float64, "fwd", x, ps, off)
    assert [float(r["x"]) for r in bad] == list(x)
    assert all(r["err"] > 100 and r["act"] == "iglu" and r["kind"] == "fwd" for r in bad)


def test_samples_stay_inside_the_domains():
    rng = np.random.default_rng(3)
    for name in ("softplus", "xielu", "hardtanh", "gelu_a"):
        spec = REGISTRY[name]
        for dt in (np.float32, np.float64):
            for _ in range(20):
                ps = search.sample_params(rng, spec, dt)
                assert ps is not None
                assert all(p.contains(ps[p.name]) for p in spec.params), (name, ps)
                assert spec.check is None or not spec.check(**ps)
                x = search.sample_x(rng, spec, dt, ps)
                assert x.dtype == dt and len(x) > 0 and not np.isnan(x).any()


def test_short_search_writes_worst_points_and_a_report(tmp_path):
    buf = io.StringIO()
    totals = search.search(1.0, ["leaky_relu"], seed=2, fout=buf, log=lambda s: None)
    recs = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert totals["points"] > 0 and totals.get("violations", 0) == 0
    worst = {(r["dtype"], r["kind"]) for r in recs if r["type"] == "worst"}
    assert worst == {
        (d, k) for d in ("float32", "float64") for k in ("fwd", "dx", "d_negative_slope")
    }
    p = tmp_path / "s.jsonl"
    p.write_text(buf.getvalue())
    text = search.report(p)
    assert "leaky_relu" in text and "violations: 0 points" in text


def _git_ok() -> bool:
    import shutil
    import subprocess

    root = Path(__file__).resolve().parent.parent
    return (
        shutil.which("git") is not None
        and subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True).returncode
        == 0
    )


@pytest.mark.skipif(not _git_ok(), reason="needs git and a checkout with history")
def test_compare_scores_the_same_draws_at_a_revision(monkeypatch, tmp_path):
    monkeypatch.setenv("IGLU_NP_CACHE_DIR", str(tmp_path / "cache"))
    text = search._compare("HEAD", ["leaky_relu"], seed=4, draws=3, kinds=["fwd"])
    lines = text.splitlines()[1:]
    assert [ln.split()[:3] for ln in lines] == [
        ["leaky_relu", d, "fwd"] for d in ("float32", "float64")
    ]
    for ln in lines:
        # leaky_relu is the same at HEAD and here: the same points, the same errors
        old = ln.split(" old ")[1].split("  new ")[0]
        new = ln.split("  new ")[1].split("  (")[0]
        assert old == new, ln
