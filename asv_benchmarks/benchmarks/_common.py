"""Shared pieces of the asv suite: the parameter grids, deterministic inputs, GPU
backends and the registry-coverage guard.

Every activation benchmark takes its activation names from ``iglu_np.ACTIVATIONS`` at
import, so a newly registered activation is benchmarked without editing this suite.
:func:`coverage_gaps` double-checks that (in the spirit of numpy's ``bench_ufunc``
"missing ufunc" check): it is run when the benchmark modules are imported, so
``asv check`` / discovery fails loudly if something registered has no benchmark.
"""
from __future__ import annotations

import os
import time

import numpy as np

import iglu_np

# Sorted, so the parameter grid (which asv stores results by) does not depend on the
# order in which activation modules happen to be discovered.
NAMES = tuple(sorted(iglu_np.ACTIVATIONS))
DTYPES = ("float32", "float64")
# 16,777,216 = 2**24: 64 MiB (float32) / 128 MiB (float64) per array, far beyond any
# cache. Only forward/backward, the copy ratio and the peak-memory benchmarks use it;
# dx and parameter gradients stop at 1e6.
SIZES = (10_000, 1_000_000, 16_777_216)
SMALL_SIZES = (10_000, 1_000_000)
LARGE = 16_777_216
# Size of the temporaries `track_` benchmark (deterministic: any size shows a hidden
# full-size temporary; this one allocates quickly).
TRACK_SIZE = 1_000_000
BACKENDS = ("cpu", "numba_cuda", "cupy")

SEED = 20260301

# What a registered activation must be covered by: aspect -> benchmark classes.
ASPECTS = (
    "forward", "dx", "backward", "backward_params", "overhead", "peakmem",
    "temporaries", "copy_ratio", "accuracy", "trainer",
)
REGISTRY_DRIVEN: list = []


def registry_driven(*aspects):
    """Class decorator: the class's first parameter is the activation name and it
    benchmarks the given aspects for every one of them."""
    unknown = set(aspects) - set(ASPECTS)
    if unknown:
        raise ValueError(f"unknown benchmark aspect(s) {sorted(unknown)}")

    def deco(cls):
        cls.aspects = tuple(aspects)
        REGISTRY_DRIVEN.append(cls)
        return cls

    return deco


def coverage_gaps(names=None, classes=None) -> dict:
    """``{activation: [aspects without a benchmark]}`` for every registered activation
    (or ``names``) that some aspect does not cover; empty when coverage is complete."""
    names = list(iglu_np.ACTIVATIONS) if names is None else list(names)
    classes = REGISTRY_DRIVEN if classes is None else classes
    covered = {a: set() for a in ASPECTS}
    for cls in classes:
        acts = set(cls.params[0])
        for a in cls.aspects:
            covered[a] |= acts
    gaps = {}
    for n in names:
        miss = [a for a in ASPECTS if n not in covered[a]]
        if miss:
            gaps[n] = miss
    return gaps


def check_coverage(classes=None, aspects=ASPECTS):
    """Raise if a registered activation lacks a benchmark for one of ``aspects``."""
    gaps = {
        n: [a for a in miss if a in aspects]
        for n, miss in coverage_gaps(classes=classes).items()
    }
    gaps = {n: m for n, m in gaps.items() if m}
    if gaps:
        lines = "; ".join(f"{n}: {', '.join(m)}" for n, m in sorted(gaps.items()))
        raise RuntimeError(
            "registered activations without benchmarks (the asv suite builds its grids "
            f"from iglu_np.ACTIVATIONS; something bypassed that): {lines}"
        )


# --------------------------------------------------------------------------- inputs
def get_act(name):
    """The activation, or an asv skip when this commit does not have it yet."""
    try:
        return iglu_np.get(name)
    except KeyError:
        raise NotImplementedError(f"{name} is not registered at this commit") from None


def make_x(act, dtype, n, seed=SEED) -> np.ndarray:
    """Deterministic inputs ~ 3·N(0, 1) (the range activations see in practice, both
    branches of every kink), clipped to the activation's declared domain."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n, dtype=np.dtype(dtype).type)
    x *= 3
    lo, hi = getattr(act.spec, "x_range", (-np.inf, np.inf))
    if lo > -3e30 or hi < 3e30:
        np.clip(x, lo, hi, out=x)
    return x


def make_grad(dtype, n, seed=SEED + 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n, dtype=np.dtype(dtype).type)


# --------------------------------------------------------------------------- backends
def _no_cuda_device() -> bool:
    """Cheap check that needs no CUDA initialisation: asv forks its benchmark processes
    from one server, and a CUDA context created before a fork is unusable after it."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return True
    if os.name == "posix" and not os.path.exists("/proc/driver/nvidia") and not any(
        os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")
    ):
        return True
    return False


class Device:
    """Moves inputs to a backend and waits for its queued work.

    ``sync()`` is called inside every timed GPU call: kernel launches are asynchronous,
    so without it asv would time the launch, not the work.
    """

    def __init__(self, backend: str):
        self.name = backend
        if backend == "cpu":
            self.to = lambda a: a
            self.sync = lambda: None
            return
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}")
        if backend not in getattr(iglu_np.backends, "BACKENDS", {}):
            raise NotImplementedError(f"backend {backend} does not exist at this commit")
        if _no_cuda_device():
            raise NotImplementedError("no GPU on this machine")
        try:
            iglu_np.backends._module(backend)
        except ImportError as e:
            raise NotImplementedError(f"backend {backend} unavailable: {e}") from None
        if backend == "numba_cuda":
            try:
                from numba import cuda
            except ImportError:
                raise NotImplementedError("numba.cuda is not installed") from None
            if not cuda.is_available():
                raise NotImplementedError("numba.cuda sees no GPU")
            self.to = cuda.to_device
            self.sync = cuda.synchronize
        else:
            try:
                import cupy
            except ImportError:
                raise NotImplementedError("cupy is not installed") from None
            try:
                if cupy.cuda.runtime.getDeviceCount() < 1:
                    raise NotImplementedError("cupy sees no GPU")
            except cupy.cuda.runtime.CUDARuntimeError as e:
                raise NotImplementedError(f"cupy sees no GPU: {e}") from None
            self.to = cupy.asarray
            self.sync = lambda: cupy.cuda.get_current_stream().synchronize()


def _prewarm():
    """Initialise Numba (LLVM, the on-disk kernel cache) once, at import.

    asv imports the suite in a server process and forks one process per benchmark and
    parameter set (~2000 for the full grid): without this each of them pays ~1 s of CPU
    to start Numba; with it ~0.15 s. Only a raw ufunc is called: it is single-threaded,
    and no thread pool or GPU context may exist before a fork.
    """
    try:
        act = iglu_np.get(NAMES[0])
        act.ufunc(0.5, *act.defaults.values())
    except Exception:  # noqa: BLE001 - the benchmarks themselves report real failures
        pass


_prewarm()


# --------------------------------------------------------------------------- timing
# On a shared machine (other jobs, more runnable threads than cores) wall time mostly
# measures how often the benchmark was descheduled: asv continuous flagged 1.6-2.9x
# "regressions" between two builds of identical code. Process CPU time (all threads,
# user + sys) does not count time spent waiting for a core, so host-side benchmarks use
# it by default: for a multi-threaded (prange) kernel it is the total CPU work, not the
# elapsed time. IGLU_ASV_CLOCK=wall switches to wall time on a quiet, dedicated machine
# (keep one choice per machine: asv compares results of the same machine only).
# GPU benchmarks always use wall time (the host mostly waits for the device).
CPU_CLOCK = time.perf_counter if os.environ.get("IGLU_ASV_CLOCK") == "wall" else time.process_time
_clock_now = [CPU_CLOCK]

# Processes per time_ result (asv `rounds`; continuous interleaves them across the two
# commits). Measured on this project's 2-vCPU VMs: each vCPU has episodes of 0.25-3 s,
# independently, in which all code runs 1.7-2.0x slower (a 12 us Python loop included:
# the host shares the core; CPU time counts it too), and a benchmark process's samples
# all fall in one machine state, so only the number of processes averages it out. With
# asv's default 2 rounds one slow process moved a median by 1.3-3x. 6 keeps the trainer
# and throughput benchmarks within -f 1.2 on an unchanged tree; the microsecond Overhead
# ones still swing up to 2x (README, "Noise"). `-a rounds=2` for a quick look.
ROUNDS = 6


def use_clock(backend: str):
    _clock_now[0] = CPU_CLOCK if backend == "cpu" else time.perf_counter


def clock() -> float:
    """asv ``timer``: the clock chosen by :func:`use_clock` in the current setup."""
    return _clock_now[0]()


# --------------------------------------------------------------------------- state
# asv_runner re-runs setup before every sample (asv#966): memoise what setup builds (the
# 16.8M-element inputs, a model) for the one parameter set a benchmark process runs, so a
# re-setup is a dictionary lookup and every sample times a warm call.
_memo: dict = {}


def memo(key, build):
    """``build()`` once per ``key`` in this process; the previous key's state is dropped."""
    if key not in _memo:
        _memo.clear()
        _memo[key] = build()
    return _memo[key]


def best_of(fn, repeats: int, timer=CPU_CLOCK) -> float:
    """Minimum time of ``repeats`` calls: the least-disturbed run."""
    best = float("inf")
    for _ in range(repeats):
        t0 = timer()
        fn()
        best = min(best, timer() - t0)
    return best


def ratio_to(fn, ref, rounds: int = 5, repeats: int = 3, timer=CPU_CLOCK) -> float:
    """``best time of fn / best time of ref``, interleaved in rounds so a burst of
    load elsewhere on the machine hits both sides alike."""
    tf = tr = float("inf")
    for _ in range(rounds):
        tf = min(tf, best_of(fn, repeats, timer))
        tr = min(tr, best_of(ref, repeats, timer))
    return tf / tr
