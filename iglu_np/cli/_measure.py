"""What every ``iglu-np bench`` measurement shares: the median of repeats (and their
spread, for the quiet-machine check), the load average and the machine's description."""

from __future__ import annotations

import os
import platform
import time

import numpy as np

__all__ = [
    "DRIFT_MAX",
    "SPREADS",
    "SPREAD_MAX",
    "cpu_name",
    "limit_kernels",
    "load",
    "machine_info",
    "median_time",
]

SPREADS: list = []  # p90/p10 of each measurement's repeats (the quiet-machine check)
# The repeats of a measurement within SPREAD_MAX (p90/p10); a limit's two measurements
# (before and after its block) within DRIFT_MAX (see iglu_np.cli.bench.quiet_check).
SPREAD_MAX = 1.5
DRIFT_MAX = 1.4


def median_time(fn, repeats, min_time):
    # warm-up: compiles; a kernel's first large call runs on one thread (the busy-machine
    # guard's baseline, iglu_np.backends.cpu.loops), the second compiles the threaded one
    fn()
    fn()
    ts = []
    t_end = time.perf_counter() + min_time
    while len(ts) < repeats or (time.perf_counter() < t_end and len(ts) < 10 * repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    lo, hi = np.percentile(ts, [10, 90])
    SPREADS.append(float(hi / lo) if lo > 0 else 1.0)
    return float(np.median(ts))


def limit_kernels():
    """The threaded memory limits' kernels: ``copy(x, o)``, ``mul(x, g, o)`` (two in, one
    out) and ``mul2(a, b, g, p, q)`` (three in, two out)."""
    import numba

    @numba.njit(parallel=True, cache=True)
    def pcopy(x, o):
        for i in numba.prange(x.size):
            o[i] = x[i]

    @numba.njit(parallel=True, cache=True)
    def pmul(x, g, o):
        for i in numba.prange(x.size):
            o[i] = x[i] * g[i]

    @numba.njit(parallel=True, cache=True)
    def pmul2(a, b, g, p, q):
        for i in numba.prange(a.size):
            p[i] = a[i] * g[i]
            q[i] = b[i] * g[i]

    return pcopy, pmul, pmul2


def load() -> float:
    try:
        return float(os.getloadavg()[0])
    except OSError:
        return 0.0


def machine_info() -> dict:
    import numba

    import iglu_np

    from ..backends.cpu import tiers

    info = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "iglu_np": getattr(iglu_np, "__version__", "?"),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "numba_threads": numba.get_num_threads(),
        "threading_layer": _threading_layer(),
        "parallel_threshold": tiers.THRESHOLD,
        "platform": platform.platform(),
    }
    try:
        import llvmlite.binding as ll

        info["llvm_cpu"] = ll.get_host_cpu_name()
    except Exception:  # pragma: no cover
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        info["torch"] = None
    return info


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _threading_layer():
    import numba

    try:
        return numba.threading_layer()
    except ValueError:
        return "not yet initialised"
