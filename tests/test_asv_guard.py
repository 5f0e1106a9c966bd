"""The asv suite (asv_benchmarks/) covers every registered activation, and its guard and
helpers work. Cheap: imports the benchmark modules and runs a few tiny benchmarks
directly (asv itself is not needed)."""

import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import iglu_np

_ASV_DIR = Path(__file__).resolve().parent.parent / "asv_benchmarks"
sys.path.insert(0, str(_ASV_DIR))
try:
    from benchmarks import _common, bench_activations, bench_trainer  # noqa: E402
finally:
    sys.path.remove(str(_ASV_DIR))

ACT = "iglu" if "iglu" in iglu_np.ACTIVATIONS else sorted(iglu_np.ACTIVATIONS)[0]


def test_every_registered_activation_has_every_benchmark():
    assert _common.coverage_gaps() == {}
    aspects = {a for cls in _common.REGISTRY_DRIVEN for a in cls.aspects}
    assert aspects == set(_common.ASPECTS)


def test_grids_are_the_registry():
    names = tuple(sorted(iglu_np.ACTIVATIONS))
    assert _common.NAMES == names
    with_params = tuple(n for n in names if iglu_np.get(n).param_names)
    assert _common.PARAM_NAMES == with_params and 0 < len(with_params) < len(names)
    for cls in _common.REGISTRY_DRIVEN:
        expect = with_params if set(cls.aspects) <= set(_common.PARAM_ONLY) else names
        assert tuple(cls.params[0]) == expect, cls.__name__
        assert cls.param_names[0] == "activation", cls.__name__
        assert len(cls.params) == len(cls.param_names), cls.__name__


def test_guard_reports_an_unbenchmarked_activation():
    gaps = _common.coverage_gaps(names=[*iglu_np.ACTIVATIONS, "not_benchmarked"])
    assert gaps == {"not_benchmarked": list(_common.ASPECTS)}
    # parameter gradients are required of the activations with parameters, only of them
    bp = bench_activations.BackwardParams
    without_iglu = type(
        "BP",
        (),
        {"params": (tuple(n for n in bp.params[0] if n != "iglu"),), "aspects": bp.aspects},
    )
    classes = [without_iglu if c is bp else c for c in _common.REGISTRY_DRIVEN]
    assert _common.coverage_gaps(classes=classes) == {"iglu": ["backward_params"]}
    assert "relu" not in bp.params[0] and not iglu_np.get("relu").param_names
    without_forward = [c for c in _common.REGISTRY_DRIVEN if c is not bench_activations.Forward]
    with pytest.raises(RuntimeError, match="forward"):
        _common.check_coverage(classes=without_forward)


def test_benchmark_methods_exist_for_each_class():
    for cls in _common.REGISTRY_DRIVEN:
        methods = [m for m in dir(cls) if m.startswith(("time_", "peakmem_", "track_"))]
        assert methods, cls.__name__


def test_inputs_are_deterministic_and_in_domain():
    act = iglu_np.get(ACT)
    a = _common.make_x(act, "float32", 1000)
    b = _common.make_x(act, "float32", 1000)
    assert a.dtype == np.float32 and np.array_equal(a, b)
    lo, hi = act.spec.x_range
    assert a.min() >= lo and a.max() <= hi
    # beyond 2**20 elements the inputs repeat their first 2**20
    n = 1 << 20
    big = _common.make_x(act, "float64", 2 * n + 5)
    assert np.array_equal(big[:n], _common.make_x(act, "float64", n))
    assert np.array_equal(big[n : 2 * n], big[:n]) and np.array_equal(big[2 * n :], big[:5])


def test_gpu_backends_skip_cleanly_without_gpu():
    if not _common.NO_GPU:
        pytest.skip("a GPU may be present: the skip path is not taken")
    b = bench_activations.Forward()
    for backend in _common.GPU_BACKENDS:
        with pytest.raises(NotImplementedError):
            b.setup(ACT, "float32", 10_000, backend)


def test_gpu_twins_mirror_the_cpu_benchmarks():
    twins = {
        bench_activations.ForwardGPU: bench_activations.Forward,
        bench_activations.BackwardGPU: bench_activations.Backward,
        bench_activations.DxGPU: bench_activations.Dx,
        bench_activations.BackwardParamsGPU: bench_activations.BackwardParams,
    }
    for twin, cls in twins.items():
        assert issubclass(twin, cls) and twin.__name__ == cls.__name__ + "GPU"
        assert twin.params[:-1] == cls.params[:-1]
        assert cls.params[-1] == _common.CPU_BACKENDS
        assert twin.params[-1] == _common.GPU_BACKENDS
        meth = next(m for m in vars(cls) if m.startswith("time_"))
        # asv_runner leaves a benchmark out at discovery when this is set
        assert getattr(getattr(twin, meth), "skip_benchmark", False) == _common.NO_GPU
        assert not getattr(getattr(cls, meth), "skip_benchmark", False)


def test_rounds_allow_a_significant_difference():
    """asv flags a change only if its Mann-Whitney test gives p < 0.002 over the samples of
    the two commits (one per benchmark process here): 6 rounds can never get there, 7 only
    with at most one inversion between the two commits' samples, 8 with up to four."""
    stats = pytest.importorskip("asv._stats")
    r = _common.ROUNDS
    a = [float(i) for i in range(r)]
    b = [i + r - 2.5 for i in range(r)]  # three inversions: 6, 7 > b[0]; 7 > b[1]
    assert stats.mann_whitney_u(a, b)[1] < 0.002
    assert bench_activations.Forward.repeat == 1 and bench_activations.Forward.rounds == r


def test_a_sample_times_enough_calls():
    b = bench_activations.Forward()
    for size in (10_000, 1_000_000):
        b.setup(ACT, "float32", size, "cpu")
        assert b.number == _common.calls_per_sample(size)
        assert b.number * size >= min(_common.SAMPLE_ELEMENTS, size)
    assert _common.calls_per_sample(10_000) > 100 and _common.calls_per_sample(_common.LARGE) == 1


def test_unknown_activation_is_an_asv_skip():
    with pytest.raises(NotImplementedError, match="not registered"):
        _common.get_act("no_such_activation")


def test_throughput_and_overhead_benchmarks_run():
    for cls, meth in (
        (bench_activations.Forward, "time_forward"),
        (bench_activations.Backward, "time_backward"),
    ):
        b = cls()
        b.setup(ACT, "float64", 10_000, "cpu")
        getattr(b, meth)(ACT, "float64", 10_000, "cpu")
        act = iglu_np.get(ACT)
        expect = act(b.x) if cls is bench_activations.Forward else act.backward(b.x, b.g)
        np.testing.assert_array_equal(b.out, expect)  # the timed call did the real work
    o = bench_activations.Overhead()
    o.setup(ACT, "5 elements", "forward")
    o.time_overhead(ACT, "5 elements", "forward")


def test_temporaries_counts_the_output():
    t = bench_activations.Temporaries()
    t.setup(ACT, "forward", "float64")
    r = t.track_allocated(ACT, "forward", "float64")
    # The output is one input-sized array: tracemalloc must see numpy's allocation.
    assert r >= 0.99


def test_copy_ratio_is_timed_in_copies():
    c = bench_activations.CopyRatio()
    c.setup(ACT, "forward", "float32")
    unit = bench_activations._copy_time[0]
    assert 0 < unit < 10  # seconds: one single-core copy of 16.8M float32
    t0 = c.timer()
    c.time_copy_ratio(ACT, "forward", "float32")
    r = c.timer() - t0
    assert math.isfinite(r) and r > 0
    np.testing.assert_allclose(c.timer(), _common.CPU_CLOCK() / unit, rtol=1e-3)


def test_ulp_helpers():
    true = np.array([1.0, 1e-3, -2.5, np.inf, np.nan])
    got = true.astype(np.float32)
    assert np.all(bench_activations._ulp_vs_float64(got, true) == 0)
    bumped = got.copy()
    bumped[0] = np.nextafter(np.float32(1.0), np.float32(2.0))
    e = bench_activations._ulp_vs_float64(bumped, true)
    assert e[0] == pytest.approx(1.0) and np.all(e[1:] == 0)
    bumped[4] = 1.0  # a number where NaN is due
    assert bench_activations._ulp_vs_float64(bumped, true)[4] == np.inf


def test_accuracy_against_mpmath():
    pytest.importorskip("mpmath")
    a = bench_activations.Accuracy()
    a.setup(ACT, "forward", "float64")
    assert a.mp
    r = a.track_ulp(ACT, "forward", "float64")
    tol = float(a.act.spec.tolerances.get("fwd", 4.0))
    assert 0.0 <= r <= tol

    # an exact kernel compared with a perturbed reference is off by about that much
    spec = a.act.spec
    x = np.array([0.5, 1.5], dtype=np.float64)
    pv = [np.float64(a.act.defaults[p]) for p in a.act.param_names]
    got = a.act._ufunc("fwd")(x, *pv)
    off = bench_activations._ulp_vs_mpmath(
        spec, lambda mp, xm, *p: spec.ref(mp, xm, *p) * (1 + mp.mpf(2) ** -50), "f", x, pv, got
    )
    assert np.all((off > 0.5) & (off < 8))


def test_trainer_skips_or_runs():
    t = bench_trainer.Trainer()
    try:
        t.setup(ACT)
    except NotImplementedError:
        pytest.skip("iglu_np.nn not importable at this commit")
    loss = t.step(0)
    assert np.isfinite(float(np.asarray(loss.data)))


def test_setup_warms_past_the_tiered_dispatch(monkeypatch):
    """Small inputs run through the ufunc for the first IGLU_NP_FAST_WARM_CALLS calls of a
    kind (README, default 8) and then switch to a compiled loop: setup must call past that
    switch, or the loop's ~20 ms load is timed. Counted through the benchmark's own
    warm-up, not iglu_np's caches."""
    tier = int(os.environ.get("IGLU_NP_FAST_WARM_CALLS", "").strip() or 8)
    calls = [0]
    real = bench_activations.warm_up

    def counting(fn, *a, **k):
        def counted():
            calls[0] += 1
            return fn()

        return real(counted, *a, **k)

    monkeypatch.setattr(bench_activations, "warm_up", counting)
    _common._memo.clear()
    bench_activations.Overhead().setup(ACT, "5 elements", "forward")
    assert calls[0] > tier
    monkeypatch.setattr(_common, "WARM_CALLS", 1)  # what setup did before: one call
    calls[0] = 0
    _common._memo.clear()
    bench_activations.Overhead().setup(ACT, "5 elements", "forward")
    assert calls[0] <= tier


def test_multithreaded_calls_are_timed_in_wall_time():
    """Process CPU time takes a worker thread's share only at a switch or a tick: at the
    sizes that run on all threads the throughput benchmarks must use wall time."""
    b = bench_activations.Forward()
    small, big = 10_000, _common.PARALLEL_THRESHOLD
    assert small < big <= 1_000_000
    b.setup(ACT, "float32", small, "cpu")
    assert _common._clock_now[0] is _common.CPU_CLOCK
    b.setup(ACT, "float32", 1_000_000, "cpu")
    assert _common._clock_now[0] is time.perf_counter
    _common.use_clock("cupy", small)
    assert _common._clock_now[0] is time.perf_counter
    _common.use_clock("cpu", small)
