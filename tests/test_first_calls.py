"""No call after the first of an activation kind, dtype and size class compiles anything:
a run of small calls never stalls on a loop compile (0.6 s for gelu's), and the second
large call never compiles the threaded build (1.2 s for gelu's on 10^6 elements).
Each case in a fresh process with an empty cache, counting Numba's compiles (every
compile goes through numba.core.compiler.compile_extra; a cache hit does not)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from .compile_counter import COUNT_COMPILES

CHILD = (
    textwrap.dedent("""
    import sys
    import numpy as np
""")
    + COUNT_COMPILES
    + textwrap.dedent("""
    import iglu_np
    name, op, size, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    act = iglu_np.get(name)
    x = np.linspace(-4, 4, size).astype(np.float32)
    fn = {"fwd": lambda: act(x), "bwd": lambda: act.backward(x, x),
          "params": lambda: act.backward_params(x, x),
          "all": lambda: act.backward_all(x, x)[0]}[op]
    first = fn()
    counts = [n[0]]
    for _ in range(calls - 1):
        r = fn()
        counts.append(n[0])
    same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
               [(first, r)] if not isinstance(first, dict)) if calls > 1 else True
    print(counts, same)
""")
)


def _counts(tmp_path, name, op, size, calls, **env):
    e = dict(os.environ, IGLU_NP_CACHE_DIR=str(tmp_path / "cache"), NUMBA_NUM_THREADS="2", **env)
    e.pop("IGLU_NP_FAST_NOCACHE", None)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, name, op, str(size), str(calls)],
        env=e,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    counts, same = r.stdout.split("]")
    return [int(c) for c in counts.strip("[ ").split(",")], same.strip() == "True"


def test_small_calls_never_compile_after_the_first(tmp_path):
    counts, same = _counts(tmp_path, "relu", "fwd", 10, 12)
    assert counts[0] > 0 and set(counts) == {counts[0]}, counts
    assert same


@pytest.mark.parametrize("op", ["fwd", "params"])
def test_large_calls_never_compile_after_the_first(tmp_path, op):
    counts, same = _counts(
        tmp_path, "leaky_relu", op, 1 << 17, 4, IGLU_NP_PARALLEL_THRESHOLD="65536"
    )
    assert counts[0] > 0 and set(counts) == {counts[0]}, counts
    assert same


HOT_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import iglu_np
    from iglu_np.backends.cpu import ufuncs as cpu
    from iglu_np.backends.cpu import tiers
    x = np.linspace(-4, 4, 10).astype(np.float32)
    first = iglu_np.relu(x)
    for _ in range(tiers.WARM_CALLS - 1):
        iglu_np.relu(x)
    numba_before = "numba" in sys.modules
    hot = iglu_np.relu(x)
    from iglu_np.backends.cpu import loops as cpu_fast
    loop = cpu_fast._module(iglu_np.relu.spec).loop_fwd
    def no_ufunc(*a, **k):
        raise AssertionError("a hot small call took the ufunc")
    cpu.get_ufunc = no_ufunc
    later = iglu_np.relu(x)
    print(numba_before, ("relu", "fwd", "f", None) in cpu_fast.plans,
          sum(loop.stats.cache_hits.values()), sum(loop.stats.cache_misses.values()),
          np.array_equal(first, hot) and np.array_equal(first, later))
""")


def test_a_process_of_small_calls_alone_moves_to_the_cached_loop(tmp_path):
    """The steady state of small calls does not depend on what else the process called
    (issue 54): with the loop in the disk cache, the first WARM_CALLS small calls take the
    ufunc without importing Numba, the next loads the loop from the cache (a hit, no
    compile) and later calls run it, with the same bits."""
    env = dict(os.environ, IGLU_NP_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("IGLU_NP_FAST_NOCACHE", None)
    env.pop("IGLU_NP_FAST_WARM_CALLS", None)
    fill = (
        "import numpy as np, iglu_np\nfrom iglu_np.backends.cpu import loops as cpu_fast\n"
        "iglu_np.relu(np.ones(3, np.float32))\n"
        "cpu_fast.plan('relu', 'fwd', np.dtype(np.float32))"
    )
    for code in (fill, HOT_CHILD):
        r = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["False", "True", "1", "0", "True"], r.stdout
