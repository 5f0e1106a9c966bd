"""The bench reports without a GPU: ``--device gpu`` exits 2 with a clear message; the
report's table from synthetic data (the measurement itself needs a GPU: tests marked gpu
and the device runs)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from iglu_np.cli import bench_gpu


def test_without_cupy_or_gpu_the_cli_says_why():
    try:
        import cupy  # noqa: F401

        pytest.skip("cupy is installed: the GPU path is exercised by the gpu tests")
    except ImportError:
        pass
    r = subprocess.run(
        [sys.executable, "-m", "iglu_np.cli", "bench", "--device", "gpu", "iglu"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "needs cupy" in r.stderr and ".[cuda12]" in r.stderr


def test_markdown_ratios_to_the_limits():
    data = {
        "device": "Test GPU",
        "cupy": "14",
        "numba_cuda": "n/a",
        "torch": None,
        "jax": None,
        "size": 1024,
        "rows": [
            {"dtype": "float32", "name": "(copy limit)", "fwd_ms": 0.2, "bwd_ms": 0.3},
            {
                "dtype": "float32",
                "name": "iglu",
                "fwd_ms": 0.22,
                "bwd_ms": 0.33,
                "torch_fwd_ms": 0.4,
            },
        ],
        "small": {"iglu_us": 12.0, "cupy_negative_us": 10.0},
    }
    md = bench_gpu.markdown(data)
    assert "| float32 | iglu | 0.220 (1.10x) | 0.330 (1.10x) | 0.400 (2.00x) |" in md
    assert "| float32 | (copy limit) | 0.200 | 0.300 |  |" in md
    assert "(1.20x)" in md and "Test GPU" in md


def _per_call_rows():
    rows = []
    for n, neg in ((1024, 8.0), (65536, 9.0)):
        rows.append({"n": n, "name": "(cupy.negative)", "ours_us": neg, "ours_out_us": neg - 1})
        rows.append(
            {
                "n": n,
                "name": "gelu",
                "ours_us": 12.0,
                "ours_out_us": 10.5,
                "torch_us": 10.0,
                "jax_us": 24.0,
                "ours_torch_us": 40.0,
            }
        )
        rows.append({"n": n, "name": "iglu", "ours_us": 11.0, "ours_out_us": 10.0})
    return rows


def test_per_call_table_compares_like_with_like():
    md = bench_gpu.per_call_markdown(_per_call_rows(), numba_iglu_us=77.0)
    # a new result against cupy.negative(x), out= against cupy.negative(x, out=o)
    assert (
        "| 1,024 | gelu | 12.0 | 10.5 | 1.50x | 1.50x | 10.0 | 1.20x | 24.0 | 0.50x | 40.0 |" in md
    )
    assert "| 65,536 | iglu | 11.0 | 10.0 | 1.22x | 1.25x |  |  |  |  |  |" in md
    assert "| 1,024 | (cupy.negative) | 8.0 | 7.0 |  |  |" in md
    assert "77.0 us per call" in md
    data = {
        "device": "Test GPU",
        "cupy": "14",
        "numba_cuda": "n/a",
        "torch": "2",
        "jax": None,
        "size": 1024,
        "rows": [],
        "per_call": _per_call_rows(),
    }
    assert "| 65,536 | gelu |" in bench_gpu.markdown(data)


def test_per_call_times_our_calls_and_cupy_negative(monkeypatch):
    # the measurement loop with the fake cupy (nothing runs on a device): one negative
    # row and one row per activation for each size, our calls through the thin path
    from iglu_np import backends
    from iglu_np.backends.cuda import cupy as cb

    from . import fake_cupy

    fc = fake_cupy.install(monkeypatch)
    general = []
    orig = cb._prepare
    monkeypatch.setattr(cb, "_prepare", lambda *a, **k: general.append(1) or orig(*a, **k))
    rows = bench_gpu.per_call(fc, sizes=(1024, 65536), names=("iglu", "silu"), calls=3)
    assert [(r["n"], r["name"]) for r in rows] == [
        (1024, "(cupy.negative)"),
        (1024, "iglu"),
        (1024, "silu"),
        (65536, "(cupy.negative)"),
        (65536, "iglu"),
        (65536, "silu"),
    ]
    assert all(r["ours_us"] > 0 and r["ours_out_us"] > 0 for r in rows)
    assert not any("torch_us" in r or "jax_us" in r for r in rows)
    # the first call on a CuPy array notes the thin path; every later one takes it
    assert len(general) == 1 and backends._FAST[fake_cupy.ndarray][1] is not None
    grids = {L.args[2]: L.grid for L in fc.STATE.launches}
    assert grids[1024] == (1,) and grids[65536] == (64,)  # 4 float32 per vector, 256 per block


@pytest.mark.gpu
def test_gpu_bench_runs_on_a_gpu():
    data = bench_gpu.run(["iglu", "relu"], size=2**20, repeats=3, peers=False)
    names = [r["name"] for r in data["rows"]]
    assert names[:2] == ["(copy limit)", "(cupy.negative)"] and "iglu" in names
    assert all(r["fwd_ms"] > 0 for r in data["rows"])
    pc = data["per_call"]
    assert {(r["n"], r["name"]) for r in pc} >= {
        (1024, "gelu"),
        (65536, "silu"),
        (1024, "(cupy.negative)"),
    }
    assert all(r["ours_us"] > 0 for r in pc)
    assert "| 65,536 | silu |" in bench_gpu.markdown(data)


def test_cpu_bench_says_when_the_machine_is_not_quiet():
    from iglu_np.cli import bench

    data = {
        "machine": {"cores": 2, "load_before": 0.2},
        "limits": [{"dtype": "float32", "n": 10**6}],
        "rows": [
            {
                "activation": "identity",
                "pass": "fwd",
                "dtype": "float32",
                "n": 10**6,
                "rel_limit": 1.05,
            }
        ],
        "spread": 1.1,
    }
    assert bench.quiet_check(data)["quiet"]
    data["rows"][0]["rel_limit"] = 3.0
    data["spread"] = 2.5
    data["machine"]["load_before"] = 3.0
    q = bench.quiet_check(data)
    assert not q["quiet"] and len(q["why"]) == 3
    assert "identity at 3.00x the copy limit" in q["why"][1]


def test_cpu_bench_says_when_the_guard_sent_kernels_to_one_thread():
    # threaded figures that include one-thread calls describe the machine's load
    from iglu_np.cli import bench

    data = {
        "machine": {"cores": 2, "load_before": 0.2},
        "limits": [],
        "rows": [],
        "spread": 1.1,
        "guard_trips": 0,
    }
    assert bench.quiet_check(data)["quiet"]
    data["guard_trips"] = 3
    q = bench.quiet_check(data)
    assert not q["quiet"] and q["guard_trips"] == 3
    assert "busy-machine guard" in q["why"][0] and "(3 times)" in q["why"][0]


def test_the_gpu_backward_limit_kernel_compiles(nvrtc):
    # the 16-byte-vector x ^ g kernel the GPU bench divides backward times by
    from . import gpu_helpers as H

    ptx, _ = H.nvrtc_compile(bench_gpu._TWO_IN_ONE)
    assert ".entry iglu_np_bench_two_in_one" in ptx
    assert "ld.global.nc.v4.u32" in ptx and "st.global.v4.u32" in ptx


def test_cpu_bench_flags_cpu_speed_and_memory_drift_during_the_run():
    from iglu_np.cli import bench

    lim = {
        "dtype": "float64",
        "n": 10**6,
        "copy_runs": [1.0, 1.1],
        "two_in_one_out_runs": [2.0, 2.1],
    }
    data = {
        "machine": {"cores": 2, "load_before": 0.2},
        "limits": [lim],
        "rows": [
            {
                "activation": "identity",
                "pass": "fwd",
                "dtype": "float64",
                "n": 10**6,
                "rel_limit": 1.0,
            }
        ],
        "spread": 1.1,
        "canary": [1.0, 1.05, 1.1],
    }
    q = bench.quiet_check(data)
    assert q["quiet"] and abs(q["canary"] - 1.1) < 1e-12 and abs(q["drift"] - 1.1) < 1e-12
    data["canary"].append(1.7)  # a neighbour took the CPU for part of the run
    lim["two_in_one_out_runs"] = [2.0, 3.0]  # and the memory throughput changed
    q = bench.quiet_check(data)
    assert not q["quiet"] and len(q["why"]) == 2
    assert "1.70x its fastest" in q["why"][0] and "moved 1.50x" in q["why"][1]
    assert bench.CANARY_MAX < 1.7 and bench.DRIFT_MAX < 1.5


def test_cpu_bench_run_records_the_canary_and_both_limit_measurements():
    from iglu_np.cli import bench

    data = bench.run(["relu"], sizes=(20_000,), repeats=2, min_time=0.0, torch=False)
    assert len(data["canary"]) == 3 and min(data["canary"]) > 0  # before, identity, relu
    assert data["guard_trips"] >= 0 and data["quiet"]["guard_trips"] == data["guard_trips"]
    lim = data["limits"][0]
    assert lim["copy"] == min(lim["copy_runs"]) and len(lim["two_in_one_out_runs"]) == 2
    assert "CPU speed" in bench.markdown(data) or "not quiet" in bench.markdown(data)


def test_quiet_check_takes_limits_without_both_measurements():
    # JSON written without the drift check (no *_runs), mixed with limits that have it: no
    # drift figure from the former, and no comparison of None
    from iglu_np.cli import bench

    old = {"dtype": "float32", "n": 10**4, "copy": 1.0, "two_in_one_out": 2.0}
    new = dict(old, n=10**6, copy_runs=[1.0, 1.2], two_in_one_out_runs=[2.0, 2.0])
    base = {"machine": {"cores": 2}, "rows": [], "spread": 1.1}
    assert bench.quiet_check(dict(base, limits=[old, dict(old, n=10**6)]))["drift"] is None
    assert abs(bench.quiet_check(dict(base, limits=[old, new]))["drift"] - 1.2) < 1e-12
