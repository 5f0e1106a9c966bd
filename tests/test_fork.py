"""Worker processes started after threaded use return the parent's results.

Each case runs tests/forkcheck.py in a fresh interpreter (Numba loads one threading
layer per process; forking inside pytest would also fork its threads) with a timeout:
a child that dies or hangs is a failure, never a hung test run.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
METHODS = ["fork", "forkserver", "spawn"]


def _forkcheck(layer: str, methods=METHODS) -> dict:
    env = dict(os.environ, NUMBA_THREADING_LAYER=layer)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-m", "tests.forkcheck", *methods], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _check(rep: dict, methods=METHODS) -> None:
    # GNU OpenMP is the one layer a forked child cannot use; Intel's OpenMP, tbb and
    # workqueue are fork-safe
    assert rep["fork_unsafe"] is (rep["layer"] == "omp" and rep["openmp"] == "GNU"), rep
    for m in methods:
        res = rep["results"][m]
        assert res["ok"], (rep["layer"], m, res)
        assert res["same"], (rep["layer"], m, res["differ"])
        # only a forked child of an unsafe parent gives up its threads
        assert res["threads_lost"] is (m == "fork" and rep["fork_unsafe"]), (rep, m)


def test_pool_children_after_threaded_use_return_the_same_bits_on_the_default_layer():
    rep = _forkcheck("default")
    assert rep["layer"] is not None, rep
    _check(rep)


@pytest.mark.slow
def test_pool_children_after_threaded_use_on_every_layer_that_loads_here():
    # workqueue always loads; omp needs an OpenMP runtime, tbb `pip install tbb`
    ran = []
    for layer in ("omp", "tbb", "workqueue"):
        rep = _forkcheck(layer)
        if rep["layer"] is None:
            assert layer != "workqueue", rep
            continue
        _check(rep)
        ran.append(layer)
    assert "workqueue" in ran
