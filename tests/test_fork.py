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
    r = subprocess.run(
        [sys.executable, "-m", "tests.forkcheck", *methods],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
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


# A thread that holds the CPU backend's build lock when another forks: the child must not
# wait for a lock whose owner does not exist there.
_LOCK_HELD_AT_FORK = """
import os, sys, threading, time
import numpy as np, iglu_np
from iglu_np.backends.cpu import ufuncs as cpu
held, release = threading.Event(), threading.Event()
def holder():
    with cpu._lock:
        held.set()
        release.wait()
t = threading.Thread(target=holder)
t.start()
held.wait()
pid = os.fork()
if pid == 0:
    x = np.linspace(-2, 2, 5)
    os._exit(0 if np.array_equal(iglu_np.softsign(x), x / (1 + abs(x))) else 3)
release.set()
t.join()
for _ in range(1200):
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status))
    time.sleep(0.1)
os.kill(pid, 9)
sys.exit("the forked child hung on the build lock")
"""


def test_child_forked_while_a_thread_builds_kernels_does_not_wait_for_that_thread():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    r = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", _LOCK_HELD_AT_FORK],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
