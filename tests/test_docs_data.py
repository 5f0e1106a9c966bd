"""The docs' Accuracy and Performance pages are generated from docs/data/ and must match it
(``python tools/update_docs.py`` regenerates them); the accuracy data must cover every
registered activation's kernels in float32 and float64, each within its bound."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import iglu_np
from tests import accuracy as acc

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "update_docs.py"
DATA = ROOT / "docs" / "data"

sys.path.insert(0, str(ROOT / "tools"))
import update_docs  # noqa: E402


def _check(*args):
    return subprocess.run(
        [sys.executable, str(TOOL), *args, "--check"], capture_output=True, text=True, cwd=ROOT
    )


@pytest.fixture(scope="module")
def accuracy():
    return json.loads((DATA / "accuracy.json").read_text())


def test_generated_pages_match_the_committed_data():
    r = _check()
    assert r.returncode == 0, "run python tools/update_docs.py\n" + r.stdout + r.stderr


def test_accuracy_data_cover_every_activation_kind_and_dtype(accuracy):
    assert accuracy["schema"] == 1
    for key in ("date", "machine", "command", "versions", "bounds", "rows"):
        assert accuracy[key], key
    have = {
        (r["activation"], r["kind"], r["dtype"]) for r in accuracy["rows"] if r["backend"] == "cpu"
    }
    want = {
        (name, k, dt)
        for name, a in iglu_np.ACTIVATIONS.items()
        for k in acc.kinds(a.spec)
        for dt in ("float32", "float64")
    }
    assert not want - have, f"missing rows (rerun tools/accuracy_sweep.py): {sorted(want - have)}"
    assert not have - want, f"rows for kernels that do not exist: {sorted(have - want)}"
    assert len(accuracy["rows"]) == len(have), "duplicate rows"


def test_accuracy_rows_are_within_their_bounds(accuracy):
    fields = {
        "activation",
        "kind",
        "dtype",
        "backend",
        "param_sets",
        "domain",
        "points",
        "worst_ulp",
        "worst_at",
        "rms_ulp",
        "bound",
    }
    for r in accuracy["rows"]:
        where = f"{r['activation']} {r['kind']} {r['dtype']}"
        assert fields <= set(r), where
        assert r["bound"] == acc.tolerance(iglu_np.get(r["activation"]).spec, r["kind"]), where
        assert 0 <= r["rms_ulp"] <= r["worst_ulp"] <= r["bound"], where
        assert r["points"] > 0 and r["param_sets"] > 0 and r["domain"][0] < r["domain"][1], where


def test_load_accuracy_groups_the_rows_by_activation(accuracy):
    by = update_docs.load_accuracy()
    assert list(by) == list(dict.fromkeys(r["activation"] for r in accuracy["rows"]))
    assert [r["kind"] for r in by["iglu"] if r["dtype"] == "float32"] == ["fwd", "dx", "d_sigma"]
    table = update_docs.accuracy_table(by["iglu"])
    assert "points per row" in table and "``d_sigma``" in table and "domain (x)" not in table
    rows = [dict(r) for r in by["iglu"]]
    rows[0]["points"] += 1  # rows that differ show their domain and points in the table
    table = update_docs.accuracy_table(rows)
    assert table.startswith(".. list-table::") and "domain (x)" in table


@pytest.fixture
def copies(tmp_path):
    data, docs = tmp_path / "data", tmp_path / "docs"
    shutil.copytree(DATA, data)
    docs.mkdir()
    for page in ("accuracy.rst", "performance.rst"):
        shutil.copy(ROOT / "docs" / page, docs / page)
    shutil.copytree(ROOT / "docs" / "images", docs / "images")
    assert _check("--data", str(data), "--docs", str(docs)).returncode == 0
    return data, docs


def test_check_fails_when_an_accuracy_figure_changes(copies):
    data, docs = copies
    a = json.loads((data / "accuracy.json").read_text())
    a["rows"][0]["rms_ulp"] += 0.25
    (data / "accuracy.json").write_text(json.dumps(a))
    r = _check("--data", str(data), "--docs", str(docs))
    assert r.returncode == 1
    assert "accuracy.rst differs" in r.stdout and "performance.rst" not in r.stdout


def test_check_fails_when_a_row_exceeds_its_bound(copies):
    data, docs = copies
    a = json.loads((data / "accuracy.json").read_text())
    row = a["rows"][-1]
    row["worst_ulp"] = row["bound"] + 1
    (data / "accuracy.json").write_text(json.dumps(a))
    subprocess.run(
        [sys.executable, str(TOOL), "--data", str(data), "--docs", str(docs)],
        capture_output=True,
        check=True,
        cwd=ROOT,
    )
    r = _check("--data", str(data), "--docs", str(docs))
    assert r.returncode == 1 and "over its bound" in r.stdout, r.stdout


def test_check_fails_when_a_bench_figure_changes_or_a_plot_is_missing(copies):
    data, docs = copies
    b = json.loads((data / "bench-cpu.json").read_text())
    b["rows"][-1]["seconds"] *= 2
    b["rows"][-1]["ns_per_element"] *= 2
    (data / "bench-cpu.json").write_text(json.dumps(b))
    r = _check("--data", str(data), "--docs", str(docs))
    assert r.returncode == 1 and "performance.rst differs" in r.stdout, r.stdout
    (docs / "images" / "performance-cpu.png").unlink()
    r = _check("--data", str(data), "--docs", str(docs))
    assert "performance-cpu.png (the cpu plot) is missing" in r.stdout, r.stdout


def test_a_gpu_bench_file_gets_its_own_section_and_plot(copies):
    # the shape `iglu-np bench --device gpu --json` writes (iglu_np/cli/bench_gpu.py), with the
    # provenance record-bench adds; the figures are made up for the test
    data, docs = copies
    names = list(iglu_np.ACTIVATIONS)
    rows = [
        {"dtype": "float32", "name": "(copy limit)", "fwd_ms": 0.12, "bwd_ms": 0.18},
        {"dtype": "float32", "name": "(cupy.negative)", "fwd_ms": 0.13},
    ]
    rows += [
        {"dtype": "float32", "name": n, "fwd_ms": 0.125, "bwd_ms": 0.19, "torch_fwd_ms": 0.3}
        for n in names
    ]
    gpu = {
        "date": "2026-01-01T00:00:00Z",
        "command": "iglu-np bench --json --device gpu",
        "git": "0000000",
        "versions": {"iglu_np": "0", "python": "3"},
        "device": "Test GPU",
        "cupy": "13",
        "size": 2**26,
        "numba_cuda": "unavailable: test",
        "torch": "2",
        "jax": None,
        "rows": rows,
        "small": {"iglu_us": 5.0, "cupy_negative_us": 4.0},
    }
    (data / "bench-gpu-test-gpu.json").write_text(json.dumps(gpu))
    assert "performance.rst differs" in _check("--data", str(data), "--docs", str(docs)).stdout
    subprocess.run(
        [sys.executable, str(TOOL), "--data", str(data), "--docs", str(docs)],
        capture_output=True,
        check=True,
        cwd=ROOT,
    )
    assert _check("--data", str(data), "--docs", str(docs)).returncode == 0
    page = (docs / "performance.rst").read_text()
    assert "GPU: Test GPU" in page and "No GPU run is recorded" not in page
    assert page.index("CPU: ") < page.index("GPU: Test GPU")
    assert (docs / "images" / "performance-gpu-test-gpu.png").stat().st_size > 10_000
