"""Throughput of iglu_np activations on a large Dask array, on a local dask.distributed cluster.

A 2^30-element float32 array (4 GiB) in chunks of 2^24 elements is generated lazily, chunk
by chunk, on the workers and never held in memory as a whole: each measurement reduces its
result with ``.sum()``, so at most a few chunks per worker are alive at once. Measured, in
the same run and on the same cluster:

* ``copy``      the chunked pipeline alone: generate, copy each chunk, sum (the baseline),
* ``forward``   generate, ``act(x)``, sum,
* ``backward``  generate x and grad_out, ``act.backward(x, g)``, sum,
* ``backward_params`` generate x and g, ``act.backward_params(x, g)`` (reduced on the cluster).

Reported: wall time, ns per element, and ns per element above the copy baseline (the
activation's own cost through Dask). Also the single-process cost of the raw ufunc on one
chunk in this process, for scale. Timings on a shared machine vary: take the minimum of
several repeats and compare numbers from the same run only.

    python examples/dask_throughput.py                    # 2^30 elements, 2 workers
    python examples/dask_throughput.py --log2n 26 --repeat 2   # quick smoke run
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time

import numpy as np

try:
    import iglu_np  # noqa: F401
except ImportError:  # run from a source checkout without installing: use the checkout
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))


def _block(block_info=None, *, seed_offset=0):
    """One chunk of the input, made on the worker (cheap, deterministic, covers both tails)."""
    loc = block_info[None]["chunk-location"][0]
    n = block_info[None]["chunk-shape"][0]
    a = np.linspace(-8.0, 8.0, n, dtype=np.float32)
    # a per-chunk shift so chunks differ without an RNG's cost
    a += np.float32(((loc + seed_offset) % 17) / 17.0 - 0.5)
    return a


def lazy_input(da, n, chunk, seed_offset=0):
    import functools

    chunks = ((chunk,) * (n // chunk) + ((n % chunk,) if n % chunk else ()),)
    return da.map_blocks(
        functools.partial(_block, seed_offset=seed_offset),
        chunks=chunks,
        dtype=np.float32,
        meta=np.empty((0,), np.float32),
    )


def _copy(a):
    return a.copy()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log2n", type=int, default=30, help="log2 of the element count (30)")
    ap.add_argument("--log2chunk", type=int, default=24, help="log2 of the chunk size (24)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    ap.add_argument("--threads", type=int, default=1, help="threads per worker (1)")
    ap.add_argument("--activation", default="iglu", help="activation to apply (default: iglu)")
    ap.add_argument("--repeat", type=int, default=3, help="repeats per measurement (3)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args(argv)

    import dask
    import dask.array as da
    from distributed import Client, LocalCluster

    import iglu_np

    act = iglu_np.get(args.activation)
    n, chunk = 1 << args.log2n, 1 << args.log2chunk
    host = {}
    xs = np.asarray(_block({None: {"chunk-location": (0,), "chunk-shape": (chunk,)}}))
    act(xs[:16]), act.backward(xs[:16], xs[:16])  # compile / load before timing
    for label, fn in [
        ("forward", lambda: act(xs)),
        ("backward", lambda: act.backward(xs, xs)),
        ("copy", lambda: xs.copy()),
    ]:
        ts = []
        for _ in range(max(3, args.repeat)):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        host[label] = min(ts) / chunk * 1e9

    with (
        LocalCluster(
            n_workers=args.workers,
            threads_per_worker=args.threads,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):

        def warm():
            import iglu_np as m

            a = m.get(args.activation)
            z = np.linspace(-1, 1, 64, dtype=np.float32)
            a(z), a.dx(z), a.backward(z, z), a.backward_params(z, z)
            return os.getpid()

        t0 = time.perf_counter()
        client.run(warm)  # kernels compile, or load from Numba's cache, on every worker
        warm_s = time.perf_counter() - t0

        x = lazy_input(da, n, chunk)
        g = lazy_input(da, n, chunk, seed_offset=5)
        graphs = {
            "copy": lambda: x.map_blocks(_copy, dtype=np.float32).sum(),
            "forward": lambda: act(x).sum(),
            "backward": lambda: act.backward(x, g).sum(),
            "backward_params": lambda: list(act.backward_params(x, g).values()),
        }
        results = {}
        for label, build in graphs.items():
            times = []
            value = None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                lazy = build()  # building the graph is part of the cost a user pays
                value = client.compute(lazy, sync=True)
                times.append(time.perf_counter() - t0)
            results[label] = {
                "min_s": min(times),
                "median_s": statistics.median(times),
                "ns_per_element": min(times) / n * 1e9,
                "value": np.asarray(value, dtype=np.float64).tolist(),
            }
        base = results["copy"]["ns_per_element"]
        for r in results.values():
            r["ns_per_element_over_copy"] = r["ns_per_element"] - base

    print(
        f"iglu_np {iglu_np.__version__}, dask {dask.__version__}: {args.activation} on "
        f"2^{args.log2n} float32 elements ({n * 4 / 2**30:.2f} GiB) in chunks of "
        f"2^{args.log2chunk}, {args.workers} worker processes x {args.threads} thread(s), "
        f"{os.cpu_count()} CPUs; worker warm-up {warm_s:.2f} s"
    )
    print(f"{'measurement':<16} {'min s':>8} {'median s':>9} {'ns/elem':>8} {'over copy':>10}")
    for label, r in results.items():
        print(
            f"{label:<16} {r['min_s']:>8.2f} {r['median_s']:>9.2f} {r['ns_per_element']:>8.2f} "
            f"{r['ns_per_element_over_copy']:>10.2f}"
        )
    print(
        "single process, one in-memory chunk, no Dask (ns/element): "
        + ", ".join(f"{k} {v:.2f}" for k, v in host.items())
    )
    print(
        "Timings are wall clock on whatever else the machine is running; "
        "compare rows of the same run."
    )
    if args.json:
        print(
            json.dumps(
                {
                    "args": vars(args),
                    "cluster": results,
                    "single_process": host,
                    "warmup_s": warm_s,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
