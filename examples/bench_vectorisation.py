"""ns/element of the CPU fast path against the memory (copy) limit, measured in one run.

    python examples/bench_vectorisation.py [names...] [--n 16777216] [--repeat 9]
        [--threads 1,2] [--dtypes float32,float64] [--overhead]

For each activation, dtype and thread count it times the forward ``f(x, out=o)`` and the
fused backward ``f.backward(x, g, out=o)`` on preallocated buffers, interleaved with the
two memory limits they compete with at the same thread count: one input one output (the
``identity`` activation through the same njit/prange path, and ``np.copyto``) and two
inputs one output (``identity.backward``: g * 1). Each figure is the median of
``--repeat`` wall-clock runs; the interleaving puts a shared, loaded machine's noise on
both sides of each ratio. The load average (``os.getloadavg``) is printed before and after.
``--overhead`` adds per-call times on a 64-element array (process time, medians).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numba  # noqa: E402
import numpy as np  # noqa: E402

import iglu_np  # noqa: E402

# the paper's comparison table: the specs declared with define(paper_table=True)
PAPER = [n for n, a in iglu_np.ACTIVATIONS.items() if a.spec.paper_table]


def _median_ns(fn, n, repeat):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2] / n * 1e9


def overhead(repeat=15, number=2000):
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    o, g = np.empty_like(x), np.ones_like(x)
    a = iglu_np.iglu
    s1 = np.float32(1.0)
    cases = {
        "np.negative(x, out=o)": lambda: np.negative(x, out=o),
        "iglu.ufunc(x, 1, out=o) (raw)": lambda: a.ufunc(x, s1, out=o),
        "iglu(x, out=o)": lambda: a(x, out=o),
        "iglu(x)": lambda: a(x),
        "iglu(x, sigma=0.5, out=o)": lambda: a(x, sigma=0.5, out=o),
        "iglu.backward(x, g, out=o)": lambda: a.backward(x, g, out=o),
    }
    print("\n| call (64 float32) | us/call (process time, median) |\n|---|---|")
    for label, fn in cases.items():
        fn()
        ts = timeit.repeat(fn, number=number, repeat=repeat, timer=time.process_time)
        print(f"| `{label}` | {sorted(ts)[len(ts) // 2] / number * 1e6:.2f} |")


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="activations to measure (default: the paper's Table 1 rows)",
    )
    ap.add_argument("--n", type=int, default=1 << 24, help="elements per array (default: 16777216)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=9,
        help="wall-clock runs per figure, of which the median is shown (default: 9)",
    )
    ap.add_argument(
        "--threads",
        default="1,2",
        metavar="T,T,...",
        help="comma-separated Numba thread counts to measure (default: 1,2)",
    )
    ap.add_argument(
        "--dtypes",
        default="float32,float64",
        help="comma-separated dtypes (default: float32,float64)",
    )
    ap.add_argument(
        "--overhead",
        action="store_true",
        help="also time calls on a 64-element array (per-call overhead)",
    )
    return ap


def main(argv=None):
    a = build_parser().parse_args(argv)
    names = a.names or PAPER
    n = a.n
    print(f"load average before: {os.getloadavg()}  ({os.cpu_count()} CPUs), n = {n}")
    print(
        "\n| activation | dtype | threads | fwd ns/el | fwd / copy | bwd ns/el | bwd / copy2 |"
        "\n|---|---|---|---|---|---|---|"
    )
    rng = np.random.default_rng(0)
    ident = iglu_np.identity
    for dname in a.dtypes.split(","):
        dt = np.dtype(dname)
        x = (rng.standard_normal(n) * 3).astype(dt)
        g = rng.standard_normal(n).astype(dt)
        o = np.empty_like(x)
        for th in [int(t) for t in a.threads.split(",")]:
            numba.set_num_threads(min(th, numba.config.NUMBA_NUM_THREADS))
            # warm up (compiles, first-touch) outside the timing
            ident(x, out=o)
            ident.backward(x, g, out=o)
            cp = _median_ns(lambda: ident(x, out=o), n, a.repeat)
            cp2 = _median_ns(lambda: ident.backward(x, g, out=o), n, a.repeat)
            npc = _median_ns(lambda: np.copyto(o, x), n, a.repeat)
            print(
                f"| (copy limit: identity / np.copyto / identity.backward) | {dt.name} | {th} "
                f"| {cp:.3f} | {npc:.3f} | {cp2:.3f} | |",
                flush=True,
            )
            for name in names:
                act = iglu_np.get(name)
                act(x, out=o)
                act.backward(x, g, out=o)
                f_ns, c_ns, b_ns, c2_ns = [], [], [], []
                for _ in range(a.repeat):  # interleaved: load noise hits both sides
                    c_ns.append(_median_ns(lambda: ident(x, out=o), n, 1))
                    f_ns.append(_median_ns(lambda: act(x, out=o), n, 1))
                    c2_ns.append(_median_ns(lambda: ident.backward(x, g, out=o), n, 1))
                    b_ns.append(_median_ns(lambda: act.backward(x, g, out=o), n, 1))
                med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
                rf = med([f / c for f, c in zip(f_ns, c_ns)])
                rb = med([b / c for b, c in zip(b_ns, c2_ns)])
                print(
                    f"| {name} | {dt.name} | {th} | {med(f_ns):.3f} | {rf:.2f} | "
                    f"{med(b_ns):.3f} | {rb:.2f} |",
                    flush=True,
                )
    print(f"\nload average after: {os.getloadavg()}")
    if a.overhead:
        overhead()
    return 0


if __name__ == "__main__":
    sys.exit(main())
