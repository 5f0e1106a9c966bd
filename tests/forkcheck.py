"""Pool workers started after threaded use: do they return, and the parent's bits?

``python -m tests.forkcheck METHOD...`` (from the repository root) runs a few
activations on arrays large enough for the threaded loops, then, for each
``multiprocessing`` start method named, the same work in a one-process pool started
afterwards, with a timeout (a hung pool is terminated). It prints one JSON line:
``{"layer": ..., "fork_unsafe": ..., "results": {method: {"ok", "same", "threads_lost",
"error"}}}``,
or ``{"layer": null, "error": ...}`` when ``NUMBA_THREADING_LAYER`` names a layer that
cannot load here. Runs in a process of its own: Numba picks its threading layer once per
process.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import sys

import numpy as np

N = 1 << 18  # at least tiers.THRESHOLD's default: the threaded loops
TIMEOUT = 120.0  # s per pool; a child that works takes a few


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def work(seed: int = 0) -> dict:
    """Digests of forward, backward, fused backward and parameter gradients (the
    prange loops, their reductions included), and whether threads were given up."""
    import iglu_np
    from iglu_np import _forksafe

    rng = np.random.default_rng(seed)
    x32 = (4 * rng.standard_normal(N)).astype(np.float32)
    g32 = rng.standard_normal(N).astype(np.float32)
    x64 = 4 * rng.standard_normal(N)
    gx, gp = iglu_np.iglu.backward_all(x32, g32)
    bp = iglu_np.iglu.backward_params(x64, x64)
    return {
        "iglu f32": _digest(iglu_np.iglu(x32)),
        "iglu bwd f32": _digest(iglu_np.iglu.backward(x32, g32)),
        "iglu backward_all f32": _digest(gx, *(gp[k] for k in sorted(gp))),
        "iglu backward_params f64": _digest(*(bp[k] for k in sorted(bp))),
        "gelu f64": _digest(iglu_np.gelu(x64)),
        "threads_lost": _forksafe.threads_lost,
    }


def _in_pool(method: str, want: dict) -> dict:
    ctx = mp.get_context(method)
    pool = ctx.Pool(1)
    try:
        got = pool.apply_async(work, (0,)).get(timeout=TIMEOUT)
    except mp.TimeoutError:
        pool.terminate()
        pool.join()
        return {"ok": False, "error": f"no result in {TIMEOUT:.0f} s"}
    except Exception as e:  # a worker that died or raised
        pool.terminate()
        pool.join()
        return {"ok": False, "error": repr(e)}
    pool.close()
    pool.join()
    lost = got.pop("threads_lost")
    return {
        "ok": True,
        "same": got == want,
        "threads_lost": lost,
        "differ": sorted(k for k in got if got[k] != want.get(k)),
    }


def main(methods) -> dict:
    import numba

    try:
        numba.get_num_threads()  # loads the layer NUMBA_THREADING_LAYER asks for
    except ValueError as e:
        return {"layer": None, "error": str(e)}
    work(1)  # the busy-machine guard's one-thread baseline; the calls below thread
    want = work(0)
    want.pop("threads_lost")
    from iglu_np import _forksafe
    from iglu_np.backends.cpu import loops as cpu_fast

    layer = numba.threading_layer()
    vendor = None
    if layer == "omp":
        from numba.np.ufunc import omppool

        vendor = omppool.openmp_vendor
    return {
        "layer": layer,
        "openmp": vendor,
        "fork_unsafe": _forksafe.unsafe_layer_loaded(),
        "threads": numba.get_num_threads(),
        "guard_trips": cpu_fast.guard_trips,
        "results": {m: _in_pool(m, want) for m in methods},
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:] or ["fork", "forkserver", "spawn"])), flush=True)
    sys.stdout.flush()
    os._exit(0)  # a hung pool's threads must not keep this process alive
