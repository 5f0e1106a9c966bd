"""tools/ab_speed.py: an activation's spec file at a git revision against the working
tree, both through the fast path's own loops in one process."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _git_ok() -> bool:
    return (
        shutil.which("git") is not None
        and subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode
        == 0
    )


@pytest.mark.skipif(not _git_ok(), reason="needs git and a checkout with history")
def test_ab_speed_runs_old_spec_through_fast_path(tmp_path):
    env = dict(os.environ, IGLU_NP_CACHE_DIR=str(tmp_path / "user-cache"))
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "ab_speed.py"),
            "HEAD",
            "leaky_relu",
            "--kinds",
            "fwd,bwd",
            "--dtypes",
            "float32",
            "--n",
            "4096",
            "--rounds",
            "2",
            "--params",
            "negative_slope=0.25",
            "--old-vector-bits",
            "256",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("float32 ")]
    assert [ln.split(":")[0] for ln in lines] == ["float32 fwd", "float32 bwd"]
    # HEAD's spec file and the working tree's give the same loops here (the test does not
    # edit leaky_relu), hence the same bits, at either vector width (the old side's loops
    # are 256-bit ones); and the parameter reached both.
    assert all(ln.endswith("outputs identical") for ln in lines), r.stdout
    assert "'negative_slope': 0.25" in r.stdout
    # it compiles in a cache of its own: nothing reaches the user's (where a loop of the
    # spec defined at run time could not be loaded back)
    assert not (tmp_path / "user-cache").exists()
