"""Shared pieces of the asv suite: the parameter grids, deterministic inputs, GPU
backends and the registry-coverage guard.

Every activation benchmark takes its activation names from ``iglu_np.ACTIVATIONS`` at
import, so a newly registered activation is benchmarked without editing this suite.
:func:`coverage_gaps` double-checks that (in the spirit of numpy's ``bench_ufunc``
"missing ufunc" check): it is run when the benchmark modules are imported, so
``asv check`` / discovery fails loudly if something registered has no benchmark.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import time

import numpy as np

import iglu_np

# Sorted, so the parameter grid (which asv stores results by) does not depend on the
# order in which activation modules happen to be discovered.
NAMES = tuple(sorted(iglu_np.ACTIVATIONS))
# Parameter gradients exist only for these: a grid over NAMES would fork a benchmark
# process per round just to skip each parameter-free activation.
PARAM_NAMES = tuple(n for n in NAMES if iglu_np.get(n).param_names)
DTYPES = ("float32", "float64")
# 16,777,216 = 2**24: 64 MiB (float32) / 128 MiB (float64) per array, far beyond any
# cache (the memory-bound regime); 10,000 runs on one thread, 1e6 on all of them.
SIZES = (10_000, 1_000_000, 16_777_216)
LARGE = 16_777_216
# Size of the temporaries `track_` benchmark (deterministic: any size shows a hidden
# full-size temporary; this one allocates quickly).
TRACK_SIZE = 1_000_000
CPU_BACKENDS = ("cpu",)
GPU_BACKENDS = ("numba_cuda", "cupy")
BACKENDS = CPU_BACKENDS + GPU_BACKENDS

SEED = 20260301

# What a registered activation must be covered by: aspect -> benchmark classes.
# "backward_params" and "backward_all" are required of activations with parameters only.
ASPECTS = (
    "forward",
    "dx",
    "backward",
    "backward_params",
    "backward_all",
    "overhead",
    "peakmem",
    "temporaries",
    "copy_ratio",
    "accuracy",
    "trainer",
    "in_place",
)
PARAM_ONLY = ("backward_params", "backward_all")
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
        act = iglu_np.ACTIVATIONS.get(n)
        need = [
            a for a in ASPECTS if not (a in PARAM_ONLY and act is not None and not act.param_names)
        ]
        miss = [a for a in need if n not in covered[a]]
        if miss:
            gaps[n] = miss
    return gaps


def check_coverage(classes=None, aspects=ASPECTS):
    """Raise if a registered activation lacks a benchmark for one of ``aspects``."""
    gaps = {
        n: [a for a in miss if a in aspects] for n, miss in coverage_gaps(classes=classes).items()
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


# Inputs beyond this many elements repeat a block of it: generating 16.8M normals took
# 0.2-0.3 s per benchmark process (a third of its time); a 2**20-element period is far
# beyond what a branch predictor or a cache can exploit.
_BLOCK = 1 << 20


def _normal(dtype, n, seed, scale=1.0, lo=-np.inf, hi=np.inf) -> np.ndarray:
    m = min(n, _BLOCK)
    x = np.random.default_rng(seed).standard_normal(m, dtype=np.dtype(dtype).type)
    if scale != 1.0:
        x *= scale
    if lo > -3e30 or hi < 3e30:
        np.clip(x, lo, hi, out=x)
    return x if m == n else np.resize(x, n)


def make_x(act, dtype, n, seed=SEED) -> np.ndarray:
    """Deterministic inputs ~ 3·N(0, 1) (the range activations see in practice, both
    branches of every kink), clipped to the activation's declared domain."""
    lo, hi = getattr(act.spec, "x_range", (-np.inf, np.inf))
    return _normal(dtype, n, seed, 3.0, lo, hi)


def make_grad(dtype, n, seed=SEED + 1) -> np.ndarray:
    return _normal(dtype, n, seed)


# --------------------------------------------------------------------------- backends
def _no_cuda_device() -> bool:
    """Cheap check that needs no CUDA initialisation: asv forks its benchmark processes
    from one server, and a CUDA context created before a fork is unusable after it."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return True
    if (
        os.name == "posix"
        and not os.path.exists("/proc/driver/nvidia")
        and not any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg"))
    ):
        return True
    return False


NO_GPU = _no_cuda_device()

try:
    from asv_runner.benchmarks.mark import skip_benchmark_if
except ImportError:  # the suite imported without asv (tests), or an asv_runner before 0.1

    def skip_benchmark_if(condition):
        """asv_runner's decorator: a benchmark marked ``skip_benchmark`` is left out at
        discovery."""

        def deco(func):
            @functools.wraps(func)
            def wrapper(*args, **kwargs):
                return func(*args, **kwargs)

            if condition:
                wrapper.skip_benchmark = True
            return wrapper

        return deco


def gpu_twin(cls):
    """``cls`` (whose last parameter is the backend, ``("cpu",)``) on the GPU backends,
    as its own class whose ``time_`` method carries asv's ``skip_benchmark_if(NO_GPU)``.

    Without a GPU the twin is dropped at discovery. Skipping per parameter set instead
    (NotImplementedError in setup, or ``skip_params``) still costs asv a forked process
    for every GPU parameter set in every round: 1320 per round and commit for this grid,
    ~18 ms each, measured here (~6 min of an 8-round ``asv continuous``).
    """
    meths = [m for m in vars(cls) if m.startswith("time_")]
    ns = {m: skip_benchmark_if(NO_GPU)(getattr(cls, m)) for m in meths}
    ns["params"] = tuple(cls.params[:-1]) + (GPU_BACKENDS,)
    ns["__doc__"] = f"``{cls.__name__}`` on the GPU backends (skipped without a GPU)."
    ns["__module__"] = cls.__module__
    return type(cls.__name__ + "GPU", (cls,), ns)


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
        if NO_GPU:
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


def _cpu_fast_setting(attr: str, default: int) -> int:
    """An integer setting of iglu_np's CPU fast path (in ``backends.cpu.backend``, or
    ``backends.cpu.loops`` at older commits), or ``default`` at a commit without it."""
    import importlib

    for mod in ("iglu_np.backends.cpu.backend", "iglu_np.backends.cpu.loops"):
        try:
            return int(getattr(importlib.import_module(mod), attr))
        except (ImportError, AttributeError, ValueError):
            continue
    return default


def _warm_calls() -> int:
    n = _cpu_fast_setting("WARM_CALLS", -1)
    return 2 * n + 1 if n >= 0 else 20


# Warm-up calls that reach the steady state. iglu_np runs the first calls of a kind on a
# small input (< 2048 elements) through its ufunc and only then loads a compiled loop
# (IGLU_NP_FAST_WARM_CALLS, default 8): with a one-call warm-up that load (milliseconds)
# landed in the first timed sample, which then dwarfed the microseconds of a small call.
WARM_CALLS = _warm_calls()


def warm_up(fn, size: int = 1):
    """Call ``fn`` until timing it measures the steady state: twice from 65,536 elements
    (the first large call of a kernel runs on one thread as the busy-machine guard's
    baseline, the second compiles or loads the threaded kernel), :data:`WARM_CALLS` times
    below (cheap there)."""
    for _ in range(WARM_CALLS if size < 65_536 else 2):
        fn()


def _prewarm():
    """Load Numba and the kernels once, in the process that asv forks from.

    asv imports the suite in a server process and forks one process per benchmark,
    parameter set and round (on the order of a thousand per round and commit). Without
    prewarming each would start Numba, load its activation's kernels from the on-disk
    cache and import ``iglu_np.nn`` (the trainer): each of these costs far more than the
    milliseconds of timed work. So the server loads every activation's small-input
    kernels (float32, float64, a Python float: the serial paths, which also serve 10,000
    elements and the trainer's 128x64 batches) and imports the trainer, once per server.
    Only in the server (``asv_runner run_server``): discovery and ``asv check`` import the suite too and need none of it. Nothing here
    may start a thread pool or a GPU context, which do not survive a fork: the calls stay
    below the parallel kernels' threshold.
    """
    try:
        act = iglu_np.get(NAMES[0])
        act.ufunc(0.5, *act.defaults.values())
    except Exception:  # noqa: BLE001 - the benchmarks themselves report real failures
        pass
    if sys.argv[1:2] != ["run_server"]:
        return
    try:
        # (``import iglu_np.nn.x`` here would make iglu_np a local name of the whole
        # function, unbound at the first line above)
        for mod in ("autodiff", "layers", "optim"):
            importlib.import_module(f"iglu_np.nn.{mod}")
    except Exception:  # noqa: BLE001 - no trainer at this commit
        pass
    for name in NAMES:
        try:
            act = iglu_np.get(name)
            for x in (0.75, *(np.linspace(-2, 2, 5, dtype=dt) for dt in DTYPES)):
                for _ in range(WARM_CALLS):  # past the ufunc tier: the loops load too
                    act(x)
                    act.dx(x)
                    act.backward(x, x)
                    if act.param_names:
                        act.backward_params(x, x)
        except Exception:  # noqa: BLE001
            pass


_prewarm()


# --------------------------------------------------------------------------- timing
# Single-threaded host code is timed in process CPU time: it does not count time spent
# waiting for a core while another job runs (on a shared machine wall time flagged
# "regressions" between two builds of identical code). IGLU_ASV_CLOCK=wall
# switches to wall time (keep one choice per machine: asv compares results of the same
# machine only).
CPU_CLOCK = time.perf_counter if os.environ.get("IGLU_ASV_CLOCK") == "wall" else time.process_time
_clock_now = [CPU_CLOCK]


# Calls of this many elements or more run on all Numba threads, and those are timed in
# wall time (so are the GPU's: the host mostly waits for the device). Linux adds a
# running thread's CPU time to the process clock only when that thread is switched or
# at a scheduler tick (a few ms), so the worker thread's share of a sub-millisecond call
# lands in lumps: process CPU time of a threaded call scatters far more than its wall
# time, enough for `asv continuous` to flag an unchanged tree as several times slower.
PARALLEL_THRESHOLD = _cpu_fast_setting("THRESHOLD", 1 << 16)

# One sample per benchmark process, in 8 processes (asv `rounds`; `asv continuous`
# interleaves them across the two commits).
#
# On shared virtual machines a vCPU can have episodes (up to seconds) in which all code,
# a pure Python loop included, runs markedly slower (the host shares the core; CPU time
# counts it too). A benchmark process lasts well under a second, so all its samples fall
# in one machine state: they are not independent, and asv's Mann-Whitney test
# (p < 0.002) over a few processes with several samples each declared "significant"
# differences whenever a few of one commit's processes were slow (benchmarks were
# flagged on an unchanged tree). With one sample per process the samples are independent
# and identically distributed when the code is the same, so the test's false-alarm rate
# is what it says. With 6 rounds p < 0.002 is out of reach, with 7 it takes at most one
# inversion between the two commits' samples, with 8 up to four (tests/test_asv_guard.py).
# `-a rounds=2` for a quick look (asv then falls back on non-overlapping confidence
# intervals, which two samples rarely give).
ROUNDS = 8
# A time_ sample is the mean of enough calls to process about this many elements (~10 ms
# of work; 419 calls at 1e4, 4 at 1e6, 1 at 16.8M): one call of 10,000 elements is a few us.
SAMPLE_ELEMENTS = 1 << 22


def calls_per_sample(size: int) -> int:
    return max(1, SAMPLE_ELEMENTS // size)


def use_clock(backend: str, size: int = 0):
    """CPU time for a single-threaded host call, wall time for a multi-threaded or GPU one."""
    host_serial = backend == "cpu" and size < PARALLEL_THRESHOLD
    _clock_now[0] = CPU_CLOCK if host_serial else time.perf_counter


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
