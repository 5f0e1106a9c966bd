"""What a fresh process pays before its first result: the cold cost of each activation
(its first call with an empty kernel cache: compiling), the warm first call (the same
with the cache filled: loading), and ``iglu-np warmup`` of every activation into an empty
cache. Each is timed inside a child process of its own with its own cache directory
(``track_`` benchmarks in seconds, one sample each: a compile does not repeat in a
process, so asv's timing loop has nothing to repeat). Not a timed test: the figures
depend on the machine (README, "Kernel cache")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

from ._common import NAMES

_FIRST = textwrap.dedent("""
    import json, sys, time
    t0, c0 = time.perf_counter(), time.process_time()
    import numpy as np
    import iglu_np
    t1, c1 = time.perf_counter(), time.process_time()
    getattr(iglu_np, sys.argv[1])(np.linspace(-3, 3, 10, dtype=np.float32))
    t2, c2 = time.perf_counter(), time.process_time()
    print(json.dumps({"import": t1 - t0, "import_cpu": c1 - c0,
                      "first_call": t2 - t1, "first_call_cpu": c2 - c1}))
""")


def _env(cache):
    env = dict(os.environ, IGLU_NP_CACHE_DIR=cache)
    env.pop("IGLU_NP_FAST_NOCACHE", None)
    return env


def first_call(name: str, cache: str) -> dict:
    """The import and first-call times (wall and CPU, seconds) of a fresh process calling
    activation ``name`` on 10 float32 elements with the kernel cache ``cache``."""
    r = subprocess.run(
        [sys.executable, "-c", _FIRST, name],
        env=_env(cache),
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


def warmup_all(cache: str, jobs: int = 0) -> dict:
    """``iglu-np warmup --json`` of every activation into ``cache`` (its report)."""
    r = subprocess.run(
        [sys.executable, "-m", "iglu_np", "warmup", "--json", "--jobs", str(jobs)],
        env=_env(cache),
        capture_output=True,
        text=True,
        timeout=7200,
        check=True,
    )
    return json.loads(r.stdout)


class FirstCall:
    params = (NAMES,)
    param_names = ("activation",)
    number = repeat = 1
    timeout = 900.0

    def setup(self, name):
        self.tmp = tempfile.mkdtemp(prefix="iglu-np-cold-")
        self.cold = first_call(name, self.tmp)
        self.warm = first_call(name, self.tmp)

    def teardown(self, name):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def track_cold_first_call(self, name):
        return self.cold["first_call"]

    def track_warm_first_call(self, name):
        return self.warm["first_call"]

    def track_warm_import(self, name):
        return self.warm["import"]

    track_cold_first_call.unit = track_warm_first_call.unit = track_warm_import.unit = "seconds"


class Warmup:
    number = repeat = 1
    timeout = 7200.0

    def setup(self):
        self.tmp = tempfile.mkdtemp(prefix="iglu-np-warmup-")

    def teardown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def track_warmup_every_activation(self):
        return warmup_all(self.tmp)["seconds"]

    track_warmup_every_activation.unit = "seconds"
