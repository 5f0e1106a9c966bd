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
    BACKENDS, DTYPES, LARGE, NAMES, ROUNDS, SIZES, SMALL_SIZES, TRACK_SIZE,
    Device, check_coverage, clock, get_act, make_grad, make_x, memo, ratio_to,
    registry_driven, use_clock,
)

_WARM = 64  # elements in a warm-up call: compiles every loop without touching big memory


class _Throughput:
    """Shared setup of the throughput benchmarks: activation × dtype × size × backend."""

    param_names = ("activation", "dtype", "size", "backend")
    # Many short processes rather than a few long ones: this VM's cores have 1.7-2x slow
    # episodes lasting seconds (see _common.ROUNDS), so a process's samples share one
    # machine state and only the number of processes averages it out. 3-5 samples each
    # (a 16.8M-element float64 call takes ~0.1 s).
    rounds = ROUNDS
    repeat = (3, 5, 1.0)
    timeout = 300.0  # a cold numba cache compiles every kernel kind in setup
    timer = staticmethod(clock)  # CPU time on the host, wall time on a GPU (see _common)
    kind = None  # "fwd", "dx", "bwd" or "backward_params"

    def setup(self, name, dtype, size, backend):
        use_clock(backend)
        state = memo((type(self).__name__, name, dtype, size, backend),
                     lambda: self._build(name, dtype, size, backend))
        self.act, self.dev, self.call = state

    def _build(self, name, dtype, size, backend):
        act = get_act(name)
        if self.kind == "backward_params" and not act.param_names:
            raise NotImplementedError(f"{name} has no parameters")
        dev = Device(backend)
        self.act, self.dev = act, dev
        x = make_x(act, dtype, size)
        g = make_grad(dtype, size) if self.kind in ("bwd", "backward_params") else None
        self.x = dev.to(x)
        self.g = dev.to(g) if g is not None else None
        self.out = dev.to(np.empty_like(x)) if self.kind != "backward_params" else None
        self.kw = {} if backend == "cpu" else {"backend": backend}
        self.call = self._bind()
        try:
            self.run()  # warm-up: JIT compile, device context, first touch of out
        except TypeError:
            if self.out is None:
                raise
            self.out = None  # a backend without out= support: time the allocating call
            self.call = self._bind()
            self.run()
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
        return lambda: act.backward_params(x, g, **kw)

    def run(self):
        self.call()
        self.dev.sync()


@registry_driven("forward")
class Forward(_Throughput):
    params = (NAMES, DTYPES, SIZES, BACKENDS)
    kind = "fwd"

    def time_forward(self, name, dtype, size, backend):
        self.run()


@registry_driven("backward")
class Backward(_Throughput):
    """The fused ``grad_out * f'(x)`` kernel (what a training step calls)."""

    params = (NAMES, DTYPES, SIZES, BACKENDS)
    kind = "bwd"

    def time_backward(self, name, dtype, size, backend):
        self.run()


@registry_driven("dx")
class Dx(_Throughput):
    params = (NAMES, DTYPES, SMALL_SIZES, BACKENDS)
    kind = "dx"

    def time_dx(self, name, dtype, size, backend):
        self.run()


@registry_driven("backward_params")
class BackwardParams(_Throughput):
    """Gradients summed to each parameter's shape (skipped for parameter-free ones)."""

    params = (NAMES, DTYPES, SMALL_SIZES, BACKENDS)
    kind = "backward_params"

    def time_backward_params(self, name, dtype, size, backend):
        self.run()


# --------------------------------------------------------------------------- overhead
@registry_driven("overhead")
class Overhead:
    """Per-call cost on tiny inputs (argument parsing, dtype resolution, dispatch):
    what an autodiff graph of small tensors pays on every node."""

    params = (NAMES, ("scalar", "5 elements"), ("forward", "dx", "backward", "backward_params"))
    param_names = ("activation", "input", "op")
    # A sample is the mean of 100 calls, each timed on its own (asv re-runs the cheap,
    # memoised setup between them); without `number` asv_runner takes one call per sample
    # when a class has a setup, a few us against the clock's own jitter. Wall time:
    # reading the process CPU clock is a system call (~0.5 us, ~10% of what is measured
    # here); these calls are single-threaded. Their level still differs up to 2x between
    # processes on a shared VM (README, "Noise").
    number = 100
    repeat = (5, 10, 0.5)
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
        call()
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
@registry_driven("copy_ratio")
class CopyRatio:
    """Kernel time / time of numpy's cheapest op moving the same bytes, on 16.8M elements.

    forward vs ``np.copyto(out, x)`` (read one array, write one); backward vs
    ``np.add(x, g, out=out)`` (read two, write one). Both sides are timed interleaved in
    the same process and the best of each is kept, so machine-wide slowdowns (other jobs,
    the VM's slow episodes) largely cancel: a regression shows as a higher ratio. Both
    sides run on one thread (``numba.set_num_threads(1)``): with the kernel on two cores
    and the reference on one, a slow episode on either core moved the ratio by up to 1.7x.
    So this is the single-core ratio (``iglu-np bench`` gives the all-core one). At 1e6
    elements the arrays sit partly in the shared L3 and the copy's speed varied 1.4x
    between processes; at 16.8M both sides stream from DRAM and the ratio repeats within
    +-8% (measured here).
    """

    params = (NAMES, ("forward", "backward"), DTYPES)
    param_names = ("activation", "op", "dtype")
    unit = "x copy time"
    timeout = 300.0

    def setup(self, name, op, dtype):
        self.fn, self.ref = memo(("CopyRatio", name, op, dtype),
                                 lambda: self._build(name, op, dtype))

    @staticmethod
    def _build(name, op, dtype):
        act = get_act(name)
        numba.set_num_threads(1)
        x = make_x(act, dtype, LARGE)
        g = make_grad(dtype, LARGE)
        out = np.empty_like(x)
        if op == "forward":
            fn = lambda: act(x, out=out)  # noqa: E731
            ref = lambda: np.copyto(out, x)  # noqa: E731
        else:
            fn = lambda: act.backward(x, g, out=out)  # noqa: E731
            ref = lambda: np.add(x, g, out=out)  # noqa: E731
        fn()
        ref()
        return fn, ref

    def track_copy_ratio(self, name, op, dtype):
        return ratio_to(self.fn, self.ref, rounds=4, repeats=2)


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
check_coverage(aspects=tuple(a for a in
               ("forward", "dx", "backward", "backward_params", "overhead", "peakmem",
                "temporaries", "copy_ratio", "accuracy")))
