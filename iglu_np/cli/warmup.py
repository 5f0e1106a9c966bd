"""``iglu-np warmup``: compile activations into the kernel cache ahead of their first call.

Compiles, for each activation named (all by default), what its calls would compile: the
numpy ufunc of every kernel kind (forward, ``dx``, ``backward``, each parameter's
``d_<p>`` and ``bwd_<p>``; float32 and float64 together), and for each ``--dtype`` the
fast path's loops of the forward, ``dx`` and ``backward`` (single-thread and threaded)
and the threaded and single-thread reductions of ``backward_params`` and
``backward_all``; with ``--gated`` the gated forms' fused CPU loops too, and with
``--jax`` the XLA handlers that ``iglu_np.jax`` calls on the CPU (of the gated forms as
well with ``--gated``; JAX itself is not needed to build them). Activations
compile in parallel processes (``--jobs``), one progress
line each (a bar with tqdm on a terminal).

The cache goes where calls look for it (``IGLU_NP_CACHE_DIR``; ``iglu-np cache`` says
where): build it once in a container image or a CI step, and every later process loads
instead of compiling, also from a read-only copy and as another user.

Examples::

    iglu-np warmup                      every activation, float32 and float64
    iglu-np warmup iglu gelu --dtype float32
    iglu-np warmup silu iglu --gated    with swiglu's and iglu_glu's fused loops
    iglu-np warmup gelu --jax           with the handlers of iglu_np.jax.gelu
    IGLU_NP_CACHE_DIR=/opt/iglu-cache iglu-np warmup --jobs 4
"""

from __future__ import annotations

import os
import sys
import time

DTYPES = ("float32", "float64")


def add_arguments(p):
    p.add_argument(
        "names", nargs="*", metavar="NAME", help="activations to compile (default: every one)"
    )
    p.add_argument(
        "--dtype",
        nargs="+",
        choices=DTYPES,
        default=list(DTYPES),
        help="dtypes of the fast-path loops (default: float32 float64)",
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=0,
        help="parallel processes (default 0: one per CPU, at most one per activation)",
    )
    p.add_argument(
        "--gated",
        action="store_true",
        help="also the gated forms' fused CPU loops (<name>.glu, swiglu ...: every layout, "
        "single-thread and threaded)",
    )
    p.add_argument(
        "--jax",
        action="store_true",
        help="also the XLA handlers of iglu_np.jax on the CPU (every pass and parameter "
        "form; with --gated the gated forms' too)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the seconds per activation and in all as JSON"
    )


def warm(name: str, dtypes=DTYPES, gated: bool = False, jax: bool = False) -> dict:
    """Compile (or load) every kernel of activation ``name`` listed above (with ``gated``,
    its gated loops too: :func:`iglu_np.backends.cpu.gated.ready`; with ``jax``, its XLA
    handlers); returns ``{"seconds": ..., "cpu_seconds": ...}`` spent in this process."""
    import numpy as np

    t, c = time.perf_counter(), time.process_time()
    from .. import get
    from .._kinds import BWD_ALL, Kind
    from ..backends.cpu import loops as cpu_fast
    from ..backends.cpu import tiers
    from ..backends.cpu import ufuncs as cpu

    act = get(name)
    for kind in cpu.kernel_kinds(act.spec):
        cpu.get_ufunc(name, kind)
    ready = tiers._ready
    for dn in dtypes:
        dt = np.dtype(dn)
        x = np.linspace(-3, 3, 64).astype(dt)
        out = np.empty_like(x)
        ps = [dt.type(v) for v in act.defaults.values()]
        for kind in ("fwd", "dx", "bwd"):
            ins = (x,) * Kind.parse(kind).n_data
            _, par = cpu_fast.plan(name, kind, dt)
            ready(par, (*ins, out, True, *ps))
        if act.param_names:
            part1 = np.empty(1, np.float64)
            part2 = np.empty((len(ps), 1), np.float64)
            for par in (False, True):
                for p in act.param_names:
                    ready(cpu_fast.kernel(name, "sum_" + p, par), (x, x, part1, par, *ps))
                ready(cpu_fast.kernel(name, BWD_ALL, par), (x, x, out, part2, par, *ps))
        if gated:
            from ..backends.cpu import gated as cpu_gated

            cpu_gated.ready(name, dt)
        if jax:
            from ..backends.xla import cpu as xla_cpu
            from ..backends.xla import gated as xla_gated

            for kind, form in xla_cpu.variants(act.spec):
                xla_cpu.handler(name, kind, dt, form)
            for op, lay, nd in xla_gated.variants() if gated else ():
                xla_gated.handler(name, op, lay, nd, dt)
    return {"seconds": time.perf_counter() - t, "cpu_seconds": time.process_time() - c}


def _job(name, dtypes, gated=False, jax=False):
    return name, warm(name, dtypes, gated, jax)


def _reporter(total: int):
    """A callable ``(done, name, seconds)`` printing progress to stderr: tqdm's bar on a
    terminal where tqdm is installed, else one plain line per activation."""
    if sys.stderr.isatty():
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            bar = tqdm(total=total, unit="activation", file=sys.stderr)

            def tick(done, name, secs):
                bar.set_postfix_str(f"{name} {secs:.1f} s")
                bar.update(1)
                if done == total:
                    bar.close()

            return tick

    def line(done, name, secs):
        print(f"[{done}/{total}] {name} {secs:.1f} s", file=sys.stderr, flush=True)

    return line


def main(args) -> int:
    import json
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    from .. import ACTIVATIONS, get
    from ..backends.cpu import ufuncs as cpu

    names = list(dict.fromkeys(args.names)) or list(ACTIVATIONS)
    for n in names:
        try:
            get(n)
        except KeyError as e:
            print(f"iglu-np warmup: {e.args[0]}", file=sys.stderr)
            return 2
    # an alias runs its activation's kernels
    names = list(dict.fromkeys(get(n).spec.name for n in names))
    if args.jobs < 0:
        print("iglu-np warmup: --jobs must be 0 (one per CPU) or more", file=sys.stderr)
        return 2
    jobs = min(args.jobs or os.cpu_count() or 1, len(names))
    root = cpu.cache_root()
    if not cpu._state.get("writable", True):
        print(
            f"iglu-np warmup: the cache {root} cannot be written (set IGLU_NP_CACHE_DIR "
            "to a writable directory)",
            file=sys.stderr,
        )
        return 1
    tick = _reporter(len(names))
    res = {}
    t = time.perf_counter()
    # spawn: a fresh interpreter per worker (safe whatever threads this process runs);
    # each worker finds the cache through the same environment
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        futs = [pool.submit(_job, n, tuple(args.dtype), args.gated, args.jax) for n in names]
        for f in as_completed(futs):
            name, r = f.result()
            res[name] = r
            tick(len(res), name, r["seconds"])
    total = time.perf_counter() - t
    size, files = cpu.cache_size(root)
    if args.json:
        print(
            json.dumps(
                {
                    "cache": str(root),
                    "jobs": jobs,
                    "seconds": total,
                    "activations": {n: res[n] for n in names},
                },
                indent=2,
            )
        )
    else:
        print(
            f"compiled {len(names)} activation(s) ({', '.join(args.dtype)}) into {root} "
            f"in {total:.1f} s with {jobs} process(es); cache now {size / 2**20:.1f} MiB "
            f"in {files} files"
        )
    return 0
