"""Two processes saving different signatures of one cached CPU loop at once (pytest -n 2,
a process pool; a cold cache) leave Numba's on-disk index consistent: each signature names
its own machine code. Each child widens Numba's read-modify-write of the index to 2 s, so
without the lock (cpu_fast._serialised_saves) both take data file 1 every time."""

import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    from iglu_np._spec import REGISTRY
    from iglu_np.backends.cpu import loops as cpu_fast
    if sys.argv[2] == "unlocked":
        cpu_fast.fcntl = None
    loop = cpu_fast._module(REGISTRY["relu"]).loop_fwd
    cf = loop._cache._cache_file
    load = cf._load_index
    def slow_load():
        d = load()
        time.sleep(2.0)
        return d
    cf._load_index = slow_load
    cpu_fast.plan("relu", "fwd", np.dtype(sys.argv[1]))
""")

CHECK = textwrap.dedent("""
    import numpy as np, numba
    from numba import types as nbt
    from iglu_np._spec import REGISTRY
    from iglu_np.backends.cpu import loops as cpu_fast
    loop = cpu_fast._module(REGISTRY["relu"]).loop_fwd
    index = loop._cache._cache_file._load_index()
    names = sorted(index.values())
    bad = []
    for dt in ("float32", "float64"):
        t = numba.from_dtype(np.dtype(dt))
        arr = nbt.Array(t, 1, "C")
        sig = (arr, arr, nbt.intp, nbt.intp)
        cres = loop._cache.load_overload(sig, loop.targetctx)
        if cres is None or tuple(cres.signature.args) != sig:
            bad.append((dt, None if cres is None else str(cres.signature)))
    print(len(index), len(set(names)), bad)
""")


def _run(tmp_path, mode):
    env = dict(os.environ, IGLU_NP_CACHE_DIR=str(tmp_path / mode))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, dt, mode], env=env, stderr=subprocess.PIPE, text=True
        )
        for dt in ("float32", "float64")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    out = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split(None, 2)


def test_concurrent_saves_of_two_signatures_keep_the_index_consistent(tmp_path):
    n_entries, n_files, bad = _run(tmp_path, "locked")
    assert (n_entries, n_files, bad.strip()) == ("2", "2", "[]")
