"""Speed, memory and accuracy of every registered activation.

Grids are built from ``iglu_np.ACTIVATIONS`` (see ``_common``): nothing here names an
activation. JIT compilation happens in ``setup`` (a warm-up call), never in a timed call.
The "cpu" throughput calls write into preallocated outputs so they time the kernel, not
first-touch page faults of a fresh 128 MiB array; the allocating path is what
``Overhead`` and the ``peakmem_`` benchmarks measure.
"""

from __future__ import annotations

import math
import time
import tracemalloc

import numba
import numpy as np

from ._common import (
    CPU_BACKENDS,
    CPU_CLOCK,
    DTYPES,
    LARGE,
    NAMES,
    PARAM_NAMES,
    ROUNDS,
    SIZES,
    TRACK_SIZE,
    Device,
    best_of,
    calls_per_sample,
    check_coverage,
    clock,
    get_act,
    gpu_twin,
    make_grad,
    make_x,
    memo,
    registry_driven,
    use_clock,
    warm_up,
)

_WARM = 64  # elements in a warm-up call: compiles every loop without touching big memory


class _Throughput:
    """Shared setup of the throughput benchmarks: activation × dtype × size × backend."""

    param_names = ("activation", "dtype", "size", "backend")
    # One sample per process, 8 processes (see _common.ROUNDS); setup has warmed up.
    rounds = ROUNDS
    repeat = 1
    warmup_time = 0.0
    timeout = 300.0  # a cold numba cache compiles every kernel kind in setup
    timer = staticmethod(clock)  # CPU time for one host thread, else wall (see _common.use_clock)
    kind = None  # "fwd", "dx", "bwd" or "backward_params"

    def setup(self, name, dtype, size, backend):
        use_clock(backend, size)
        state = memo(
            (type(self).__name__, name, dtype, size, backend),
            lambda: self._build(name, dtype, size, backend),
        )
        self.act, self.dev, self.call = state
        # asv reads `number` from the instance after setup (its attribute lookup is the
        # method, then the instance): a sample is the mean of this many calls, each timed
        # on its own between cheap re-setups.
        self.number = calls_per_sample(size)

    def _build(self, name, dtype, size, backend):
        act = get_act(name)
        if self.kind in ("backward_params", "backward_all") and not act.param_names:
            raise NotImplementedError(f"{name} has no parameters")
        dev = Device(backend)
        self.act, self.dev = act, dev
        x = make_x(act, dtype, size)
        g = (
            make_grad(dtype, size)
            if self.kind in ("bwd", "backward_params", "backward_all", "bwd_in_place")
            else None
        )
        self.x = dev.to(x)
        self.g = dev.to(g) if g is not None else None
        self.out = dev.to(np.empty_like(x)) if self.kind != "backward_params" else None
        self.kw = {} if backend == "cpu" else {"backend": backend}
        self.call = self._bind()
        try:
            warm_up(self.run, size)  # JIT compile, device context, first touch of out
        except TypeError:
            if self.out is None:
                raise
            self.out = None  # a backend without out= support: time the allocating call
            self.call = self._bind()
            warm_up(self.run, size)
        return act, dev, self.call

    def _bind(self):
        act, x, g, out, kw = self.act, self.x, self.g, self.out, self.kw
        okw = dict(kw) if out is None else dict(kw, out=out)
        if self.kind == "fwd":
            return lambda: act(x, **okw)
        if self.kind == "dx":
            return lambda: act.dx(x, **okw)
        if self.kind == "bwd":
            return lambda: act.backward(x, g, **okw)
        if self.kind == "backward_all":
            return lambda: act.backward_all(x, g, **okw)
        if self.kind == "fwd_in_place":
            return lambda: (np.copyto(out, x), act(out, out=out, **kw))
        if self.kind == "bwd_in_place":
            return lambda: (np.copyto(out, g), act.backward(x, out, out=out, **kw))
        return lambda: act.backward_params(x, g, **kw)

    def run(self):
        self.call()
        self.dev.sync()


@registry_driven("forward")
class Forward(_Throughput):
    params = (NAMES, DTYPES, SIZES, CPU_BACKENDS)
    kind = "fwd"

    def time_forward(self, name, dtype, size, backend):
        self.run()


@registry_driven("backward")
class Backward(_Throughput):
    """The fused ``grad_out * f'(x)`` kernel (what a training step calls)."""

    params = (NAMES, DTYPES, SIZES, CPU_BACKENDS)
    kind = "bwd"

    def time_backward(self, name, dtype, size, backend):
        self.run()


@registry_driven("dx")
class Dx(_Throughput):
    params = (NAMES, DTYPES, SIZES, CPU_BACKENDS)
    kind = "dx"

    def time_dx(self, name, dtype, size, backend):
        self.run()


@registry_driven("backward_params")
class BackwardParams(_Throughput):
    """Gradients summed to each parameter's shape (activations with parameters)."""

    params = (PARAM_NAMES, DTYPES, SIZES, CPU_BACKENDS)
    kind = "backward_params"

    def time_backward_params(self, name, dtype, size, backend):
        self.run()


@registry_driven("backward_all")
class BackwardAll(_Throughput):
    """grad_x and the parameter gradients from one pass (``backward_all``): against
    Backward + BackwardParams, what the fused pass saves."""

    params = (PARAM_NAMES, DTYPES, SIZES, CPU_BACKENDS)
    kind = "backward_all"

    def time_backward_all(self, name, dtype, size, backend):
        self.run()


@registry_driven("in_place")
class ForwardInPlace(_Throughput):
    """``act(x, out=x)`` on a copy refreshed inside the timed call (an ``np.copyto`` of the
    kept input, the same cost at every commit, so every call sees the same data): without
    the loops' in-place variants, out aliasing an input runs the scalar copy of every
    loop, 10-16x slower than out= a separate array."""

    params = (NAMES, DTYPES, (10_000, 1_000_000), CPU_BACKENDS)
    kind = "fwd_in_place"

    def time_forward_in_place(self, name, dtype, size, backend):
        self.run()


@registry_driven("in_place")
class BackwardInPlace(_Throughput):
    """``act.backward(x, g, out=g)`` (what a training step may write), as ForwardInPlace."""

    params = (NAMES, DTYPES, (10_000, 1_000_000), CPU_BACKENDS)
    kind = "bwd_in_place"

    def time_backward_in_place(self, name, dtype, size, backend):
        self.run()


class ForwardBF16:
    """The forward on ``ml_dtypes.bfloat16`` arrays on the CPU (float32 loops on blocks
    widened from the bfloat16 bits, rounded once into ``out``): beside Forward's float32
    row of the same size, the cost of the conversion. Skipped without ml_dtypes."""

    params = (NAMES, (10_000, 1_000_000))
    param_names = ("activation", "size")
    rounds = ROUNDS
    repeat = 1
    warmup_time = 0.0
    timeout = 300.0
    timer = staticmethod(clock)

    def setup(self, name, size):
        try:
            import ml_dtypes
        except ImportError:
            raise NotImplementedError("bfloat16 needs ml_dtypes (pip install '.[bf16]')") from None
        use_clock("cpu", size)

        def build():
            act = get_act(name)
            x = make_x(act, "float32", size).astype(ml_dtypes.bfloat16)
            out = np.empty_like(x)
            warm_up(lambda: act(x, out=out), size)
            return act, x, out

        self.act, self.x, self.out = memo(("ForwardBF16", name, size), build)
        self.number = calls_per_sample(size)

    def time_forward_bf16(self, name, size):
        self.act(self.x, out=self.out)


# The same on numba_cuda and cupy, stream synchronised inside the timed call; left out at
# discovery on a machine without an NVIDIA GPU (asv's skip_benchmark_if).
ForwardGPU = gpu_twin(Forward)
BackwardGPU = gpu_twin(Backward)
DxGPU = gpu_twin(Dx)
BackwardParamsGPU = gpu_twin(BackwardParams)
BackwardAllGPU = gpu_twin(BackwardAll)


# --------------------------------------------------------------------------- overhead
@registry_driven("overhead")
class Overhead:
    """Per-call cost on tiny inputs (argument parsing, dtype resolution, dispatch):
    what an autodiff graph of small tensors pays on every node."""

    params = (NAMES, ("scalar", "5 elements"), ("forward", "dx", "backward", "backward_params"))
    param_names = ("activation", "input", "op")
    # A sample is the mean of 100 calls, each timed on its own (asv re-runs the cheap,
    # memoised setup between them), one sample per process (see _common.ROUNDS). Wall
    # time: reading the process CPU clock is a system call (~0.5 us, ~10% of what is
    # measured here); these calls are single-threaded.
    number = 100
    repeat = 1
    warmup_time = 0.0
    rounds = ROUNDS
    timeout = 300.0
    timer = staticmethod(time.perf_counter)

    def setup(self, name, inp, op):
        self.call = memo(("Overhead", name, inp, op), lambda: self._build(name, inp, op))

    @staticmethod
    def _build(name, inp, op):
        act = get_act(name)
        if op == "backward_params" and not act.param_names:
            raise NotImplementedError(f"{name} has no parameters")
        if inp == "scalar":
            x, g = 0.75, 1.0  # a Python float: the most common "tiny" call
        else:
            x = np.linspace(-2.0, 2.0, 5)
            g = np.ones(5)
        call = {
            "forward": lambda: act(x),
            "dx": lambda: act.dx(x),
            "backward": lambda: act.backward(x, g),
            "backward_params": lambda: act.backward_params(x, g),
        }[op]
        warm_up(call)
        return call

    def time_overhead(self, name, inp, op):
        self.call()


# --------------------------------------------------------------------------- memory
@registry_driven("peakmem")
class PeakMem:
    """Peak resident memory of one allocating call on 16.8M elements.

    ``peakmem_copy`` (``x.copy()`` after the same setup, so the same inputs and the
    same loaded kernels are resident) is the floor: forward or backward equal to it
    means the kernel allocates its output and nothing else; each hidden full-size
    temporary adds 64 MiB (float32) / 128 MiB (float64).
    """

    params = (NAMES, DTYPES)
    param_names = ("activation", "dtype")
    rounds = 1  # peak RSS does not depend on the machine's speed
    timeout = 300.0

    def setup(self, name, dtype):
        act = get_act(name)
        self.act = act
        self.x = make_x(act, dtype, LARGE)
        self.g = make_grad(dtype, LARGE)
        # Compile on a small input: a large warm-up would itself set the peak.
        w = self.x[:_WARM].copy()
        act(w)
        act.backward(w, w)

    def peakmem_forward(self, name, dtype):
        self.act(self.x)

    def peakmem_backward(self, name, dtype):
        self.act.backward(self.x, self.g)

    def peakmem_copy(self, name, dtype):
        self.x.copy()


@registry_driven("temporaries")
class Temporaries:
    """Bytes a call allocates, in units of the input array (numpy reports its array
    allocations to tracemalloc). 1.0 = just the output; each hidden full-size
    temporary adds 1.0. Deterministic, so any change is a real change."""

    params = (NAMES, ("forward", "backward", "backward_params"), DTYPES)
    param_names = ("activation", "op", "dtype")
    unit = "input arrays"
    rounds = 1  # deterministic
    timeout = 300.0

    def setup(self, name, op, dtype):
        act = get_act(name)
        if op == "backward_params" and not act.param_names:
            raise NotImplementedError(f"{name} has no parameters")
        x = make_x(act, dtype, TRACK_SIZE)
        g = make_grad(dtype, TRACK_SIZE)
        self.call = {
            "forward": lambda: act(x),
            "backward": lambda: act.backward(x, g),
            "backward_params": lambda: act.backward_params(x, g),
        }[op]
        self.nbytes = x.nbytes
        self.call()

    def track_allocated(self, name, op, dtype):
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            r = self.call()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        del r
        return (peak - base) / self.nbytes


# --------------------------------------------------------------------------- ratios
_copy_time = [1.0]


def copy_clock() -> float:
    """Process CPU time in units of this process's copy time (see :class:`CopyRatio`)."""
    return CPU_CLOCK() / _copy_time[0]


@registry_driven("copy_ratio")
class CopyRatio:
    """Kernel time / time of numpy's cheapest op moving the same bytes, on 16.8M elements
    and one core (``iglu-np bench`` gives the all-core ratio): 1.0 is the memory limit, a
    regression shows as a higher ratio.

    forward is compared with ``np.copyto(out, x)`` (read one array, write one), backward
    with ``np.add(x, g, out=out)`` (read two, write one), both on one thread (with the
    kernel on two cores and the copy on one, a slow episode on either core moved the ratio
    1.7x). setup times the reference (best of 3); the timed call is the kernel and the
    asv ``timer`` counts in units of that reference, so asv prints a ratio of 3.5 as
    "3.5s". It is a time_ benchmark, not a track_, for asv's statistics: measured here, one
    process cannot give this ratio to better than +-10% (the copy's speed moves 10-15% for
    seconds at a time with other tenants' memory traffic while a compute-bound kernel's
    does not; the kernel has its slow episodes), and asv compares track_ values by the
    factor alone, one process per commit; as a time_ it has one sample in each of 8
    processes and asv's Mann-Whitney test, like the other timings (_common.ROUNDS).
    """

    params = (NAMES, ("forward", "backward"), DTYPES)
    param_names = ("activation", "op", "dtype")
    rounds = ROUNDS
    repeat = 1
    number = 1
    warmup_time = 0.0
    timeout = 300.0
    timer = staticmethod(copy_clock)

    def setup(self, name, op, dtype):
        self.fn, _copy_time[0] = memo(
            ("CopyRatio", name, op, dtype), lambda: self._build(name, op, dtype)
        )

    @staticmethod
    def _build(name, op, dtype):
        act = get_act(name)
        numba.set_num_threads(1)
        x = make_x(act, dtype, LARGE)
        out = np.empty_like(x)
        if op == "forward":
            fn = lambda: act(x, out=out)  # noqa: E731
            ref = lambda: np.copyto(out, x)  # noqa: E731
        else:
            g = make_grad(dtype, LARGE)
            fn = lambda: act.backward(x, g, out=out)  # noqa: E731
            ref = lambda: np.add(x, g, out=out)  # noqa: E731
        warm_up(fn, LARGE)
        return fn, best_of(ref, 3)

    def time_copy_ratio(self, name, op, dtype):
        self.fn()


# --------------------------------------------------------------------------- accuracy
def _points(act, dtype) -> np.ndarray:
    """Fixed point set: a dense grid on [-10, 10] plus ±logspace(1e-8, 1e3) (tiny
    inputs and tails), inside the activation's domain, rounded to ``dtype``."""
    mags = np.logspace(-8, 3, 23)
    x = np.concatenate([np.linspace(-10.0, 10.0, 161), mags, -mags]).astype(dtype)
    lo, hi = getattr(act.spec, "x_range", (-np.inf, np.inf))
    x = x[(x >= lo) & (x <= hi)]
    return np.unique(x)


@registry_driven("accuracy")
class Accuracy:
    """Worst error in ulp of the output dtype over a fixed point set at the default
    parameters, against the activation's own mpmath reference (``spec.ref*``, shipped
    in the package; tests/accuracy.py is not installed, so its sweep is not used here).

    Units as in the test harness: where the spec declares a scale (kinds whose exact
    value cancels towards 0) the error is measured in ulp of that scale. Without mpmath
    it falls back to the float32-vs-float64 proxy (float32 only, float64 kernel taken
    as truth) and says so in the skip message of float64.
    """

    params = (NAMES, ("forward", "dx", "dparams"), DTYPES)
    param_names = ("activation", "kind", "dtype")
    unit = "ulp"
    rounds = 1  # deterministic
    timeout = 300.0

    def setup(self, name, kind, dtype):
        act = get_act(name)
        if kind == "dparams" and not act.param_names:
            raise NotImplementedError(f"{name} has no parameters")
        try:
            import mpmath  # noqa: F401

            self.mp = True
        except ImportError:
            self.mp = False
            if dtype == "float64":
                raise NotImplementedError("mpmath missing: float32-vs-float64 proxy only")
        self.act = act
        self.x = _points(act, np.dtype(dtype))
        spec = act.spec
        self.kinds = {
            "forward": [("fwd", spec.ref, "f")],
            "dx": [("dx", spec.ref_dx, "dx")],
            "dparams": [("d_" + p, spec.ref_dparams[p], p) for p in act.param_names],
        }[kind]

    def track_ulp(self, name, kind, dtype):
        act, x = self.act, self.x
        dt = x.dtype
        pv = [dt.type(act.defaults[p]) for p in act.param_names]
        worst = 0.0
        for k, ref, skey in self.kinds:
            with np.errstate(all="ignore"):
                got = act._ufunc(k)(x, *pv)
                if not self.mp:
                    true64 = act._ufunc(k)(x.astype(np.float64), *map(np.float64, pv))
            if self.mp:
                errs = _ulp_vs_mpmath(act.spec, ref, skey, x, pv, got)
            else:
                errs = _ulp_vs_float64(got, true64)
            worst = max(worst, float(np.max(errs)))
        return worst


def _ulp_vs_mpmath(spec, ref, skey, x, pv, got) -> np.ndarray:
    import mpmath

    dt = x.dtype.type
    fi = np.finfo(dt)
    big = float(fi.max)
    sfn = getattr(spec, "scales", {}).get(skey)
    errs = np.zeros(len(x))
    with mpmath.workdps(40):
        mp = mpmath.mp
        pm = [mpmath.mpf(float(p)) for p in pv]
        for i, (xi, gi) in enumerate(zip(x, got)):
            xm = mpmath.mpf(float(xi))
            t = ref(mp, xm, *pm)
            g = float(gi)
            if mpmath.isnan(t) or math.isnan(g):
                errs[i] = 0.0 if (mpmath.isnan(t) and math.isnan(g)) else math.inf
                continue
            tf = float(t) if abs(t) <= big else math.copysign(math.inf, float(t))
            if math.isinf(tf) or math.isinf(g):
                errs[i] = 0.0 if g == tf else math.inf
                continue
            unit = max(float(np.spacing(dt(abs(tf)))), float(fi.tiny))
            if sfn is not None:
                s = abs(float(sfn(mp, xm, *pm)))
                if math.isfinite(s):
                    unit = max(unit, float(np.spacing(dt(min(s, big)))))
            errs[i] = float(abs(mpmath.mpf(g) - t) / unit)
    return errs


def _ulp_vs_float64(got, true64) -> np.ndarray:
    dt = got.dtype.type
    t = true64.astype(dt)  # correctly rounded float32 of the float64 value
    unit = np.maximum(np.spacing(np.abs(t)), np.finfo(dt).tiny).astype(np.float64)
    with np.errstate(all="ignore"):
        e = np.abs(got.astype(np.float64) - true64) / unit
    same = (got == t) | (np.isnan(got) & np.isnan(t))
    return np.where(same, 0.0, np.where(np.isnan(e), np.inf, e))


# The suite is generated from the registry; fail discovery if something slipped through.
# The trainer aspect lives in bench_trainer and is checked there.
check_coverage(
    aspects=tuple(
        a
        for a in (
            "forward",
            "dx",
            "backward",
            "backward_params",
            "overhead",
            "peakmem",
            "temporaries",
            "copy_ratio",
            "accuracy",
        )
    )
)
