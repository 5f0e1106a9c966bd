"""Sweep every activation's kernels against mpmath and write docs/data/accuracy.json.

For each registered activation, each kernel kind (``fwd``, ``dx``, ``d_<param>``) and
float32 / float64 it evaluates the compiled ufunc on the test harness's points
(:mod:`tests.accuracy`: ±logspace out to the activation's x range, a linear grid on
[-12, 12], ±0, ±inf, the spec's special points and their neighbours) for each of the
harness's parameter sets, and measures the error in ulp of the output dtype against the
mpmath reference with the harness's own measure (``ulp_errors``, subnormal spacing as the
floor, as ``tests.accuracy.measure`` does). The JSON's schema is documented in
``tools/update_docs.py``, which turns it into ``docs/accuracy.rst``.

    python tools/accuracy_sweep.py --out docs/data/accuracy.json      # all, in parallel
    python tools/accuracy_sweep.py --names iglu,gelu                   # a table, no file
    python tools/accuracy_sweep.py --only swish --out docs/data/accuracy.json  # merge

``--only`` sweeps the named activations with the grid of the existing file's command
(unless ``--n-log``/``--n-lin`` are given) and replaces their rows in it, the other
rows kept; the file's command records the merge (its date and git revision).

The result does not depend on ``--jobs`` (the rows come out in registry order). The exit
status is 1 when any row's worst error exceeds its bound (the JSON is still written, so
the offending rows can be read), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import multiprocessing
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from tests import accuracy as acc  # noqa: E402

DTYPES = ("float32", "float64")
# Points per parameter set: N_LOG magnitudes on each side of zero (1e-30 to the x range's
# end) and N_LIN on [-12, 12]: four times the harness's default density, about 140 s of CPU
# for the whole registry (the sweep prints its wall and CPU time).
N_LOG = 440
N_LIN = 389
# JSON has no infinity: a kernel that returns NaN or inf where the true value is finite
# (an infinite ulp error) is recorded as this, which fails every bound.
INF_ULP = 1e300


def sweep_kind(name: str, kind: str, dtype: str, n_log: int = N_LOG, n_lin: int = N_LIN) -> dict:
    """One row of the schema: ``kind`` of activation ``name`` in ``dtype``, every parameter
    set of the harness, errors measured as ``tests.accuracy.measure`` measures them."""
    import iglu_np

    act = iglu_np.get(name)
    spec = act.spec
    dt = np.dtype(dtype).type
    ufunc = act._ufunc(kind)
    psets = acc.param_sets(spec, dt)
    n = 0
    sq = 0.0
    lo, hi = math.inf, -math.inf
    worst = None
    for params in psets:
        x = acc.x_points(spec, dt, params, n_log=n_log, n_lin=n_lin)
        pv = [dt(params[p]) for p in spec.param_names]
        with np.errstate(all="ignore"):
            got = ufunc(x, *pv)
        if got.dtype != dt:
            raise TypeError(f"{name}.{kind}: {got.dtype} result for {dtype} input")
        true, scale = acc.reference(spec, kind, x, params)
        errs = acc.ulp_errors(got, true, scale, dt, subnormal=True)
        fin = x[np.isfinite(x)]
        if fin.size:
            lo, hi = min(lo, float(fin.min())), max(hi, float(fin.max()))
        n += len(x)
        e = np.minimum(errs, INF_ULP)
        sq += float(np.sum(e * e)) if np.all(np.isfinite(e * e)) else math.inf
        i = int(np.argmax(errs))
        # the first parameter set's worst, then only a strictly larger one (as measure does)
        if worst is None or errs[i] > worst[0]:
            worst = (float(min(errs[i], INF_ULP)), float(x[i]), params)
    rms = math.sqrt(sq / n) if math.isfinite(sq) else INF_ULP
    return {
        "activation": name,
        "kind": kind,
        "dtype": dtype,
        "backend": "cpu",
        "param_sets": len(psets),
        "domain": [lo, hi],
        "points": n,
        "worst_ulp": worst[0],
        "worst_at": {"x": worst[1], "params": dict(worst[2])},
        "rms_ulp": min(rms, INF_ULP),
        "bound": acc.tolerance(spec, kind),
    }


def _task(args):
    name, kind, n_log, n_lin = args
    t = time.process_time()
    rows = [sweep_kind(name, kind, d, n_log, n_lin) for d in DTYPES]
    return rows, time.process_time() - t


def tasks(names) -> list:
    """(activation, kind) pairs in registry order; both dtypes run in one task so that a
    worker loads the kind's ufunc once."""
    import iglu_np

    return [(n, k) for n in names for k in acc.kinds(iglu_np.get(n).spec)]


def machine() -> str:
    from iglu_np.cli._measure import cpu_name

    try:
        import llvmlite.binding as ll

        target = ll.get_host_cpu_name()
    except Exception:  # pragma: no cover
        target = "?"
    return f"{cpu_name()} ({target}), {os.cpu_count()} cores, {platform.system()}"


def git_revision() -> str:
    """The checkout's short commit, with ``-dirty`` when tracked files differ from it."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return rev + ("-dirty" if dirty.strip() else "")


def versions() -> dict:
    import mpmath
    import numba

    import iglu_np

    return {
        "iglu_np": iglu_np.__version__,
        "git": git_revision(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "mpmath": mpmath.__version__,
    }


def command(args) -> str:
    """The command that reproduces the file (``--jobs`` does not change it)."""
    parts = ["python tools/accuracy_sweep.py", f"--n-log {args.n_log}", f"--n-lin {args.n_lin}"]
    if getattr(args, "gated", False):
        parts.append("--gated")
    if getattr(args, "only", None):
        parts.append("--only " + ",".join(args.only))
    elif args.names:
        parts.append("--names " + ",".join(args.names))
    if args.out:
        parts.append(f"--out {args.out}")
    return " ".join(parts)


def run(names, n_log=N_LOG, n_lin=N_LIN, jobs=1, progress=None):
    """The rows for ``names`` in registry order, kinds in spec order, float32 first; and the
    CPU seconds the workers spent."""
    work = [(n, k, n_log, n_lin) for n, k in tasks(names)]
    # the costliest tasks first (the most parameter sets), so that no worker is left
    # with a long one at the end; the results are put back in order below
    import iglu_np

    cost = {w: len(acc.param_sets(iglu_np.get(w[0]).spec, np.float64)) for w in work}
    order = sorted(range(len(work)), key=lambda i: -cost[work[i]])
    results = [None] * len(work)
    cpu = 0.0
    if jobs > 1:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(jobs) as pool:
            it = pool.imap(_task, [work[i] for i in order], chunksize=1)
            for done, (i, (rows, c)) in enumerate(zip(order, it), 1):
                results[i], cpu = rows, cpu + c
                if progress:
                    progress(done, len(work), work[i])
    else:
        for done, i in enumerate(order, 1):
            results[i], c = _task(work[i])
            cpu += c
            if progress:
                progress(done, len(work), work[i])
    return [r for rows in results for r in rows], cpu


def violations(rows) -> list:
    return [r for r in rows if not r["worst_ulp"] <= r["bound"]]


def table(rows) -> str:
    lines = [
        f"{'activation':14s} {'kind':10s} {'dtype':8s} {'points':>7s} {'worst':>8s} "
        f"{'rms':>7s} {'bound':>5s}  worst at"
    ]
    for r in rows:
        flag = "  OVER" if not r["worst_ulp"] <= r["bound"] else ""
        lines.append(
            f"{r['activation']:14s} {r['kind']:10s} {r['dtype']:8s} {r['points']:7d} "
            f"{r['worst_ulp']:8.3f} {r['rms_ulp']:7.3f} {r['bound']:5.1f}  "
            f"x={r['worst_at']['x']!r} {r['worst_at']['params']}{flag}"
        )
    return "\n".join(lines)


def merged(old: dict, new: dict, names) -> dict:
    """``old`` with ``names``' rows replaced by ``new``'s, registry order, and the merge
    recorded in the command."""
    import iglu_np

    if old.get("schema") != new["schema"] or old.get("bounds") != new["bounds"]:
        raise SystemExit(
            "accuracy_sweep: the existing file's schema or bounds differ: rerun the full sweep"
        )
    rows = [r for r in old["rows"] if r["activation"] not in names] + new["rows"]
    order = {n: i for i, n in enumerate(iglu_np.ACTIVATIONS)}
    rows.sort(key=lambda r: order.get(r["activation"], len(order)))  # stable: kinds, dtypes
    git = new["versions"].get("git")
    note = f"{new['command']} ({new['date']}" + (f", git {git})" if git else ")")
    return {**old, "command": f"{old['command']}; then {note}", "rows": rows}


def _header(args, date) -> dict:
    """The fields every sweep file starts with."""
    return {
        "schema": 1,
        "date": date,
        "machine": machine(),
        "command": command(args),
        "versions": versions(),
    }


def _gated(args, names, date) -> int:
    """``--gated``: the gated forms' rows (tests/gated_accuracy.py), written to --out."""
    from tests import gated_accuracy as ga

    t0 = time.perf_counter()
    rows = ga.rows(names, args.n_log, args.n_lin)
    over = [r for r in rows if r["worst"] > r["bound"]]
    if not args.quiet:
        for r in rows:
            print(
                f"{r['form']:18s} {r['kind']:6s} {r['dtype']:8s} {r['worst']:8.3g} / {r['bound']:g}"
            )
        print(f"{len(rows)} rows, {len(over)} over their bound, {time.perf_counter() - t0:.0f} s")
    if args.out:
        data = {**_header(args, date), "rows": rows}
        Path(args.out).write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    return 1 if over else 0


def main(argv=None) -> int:
    import iglu_np

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--names",
        type=lambda s: [v for v in s.split(",") if v],
        default=None,
        metavar="NAME,...",
        help="activations to sweep (default: all registered)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="worker processes (default: one per core)",
    )
    p.add_argument(
        "--n-log",
        type=int,
        default=N_LOG,
        metavar="N",
        help=f"logarithmically spaced |x| per sign (default: {N_LOG})",
    )
    p.add_argument(
        "--n-lin",
        type=int,
        default=N_LIN,
        metavar="N",
        help=f"linearly spaced x on [-12, 12] (default: {N_LIN})",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="PATH",
        help="write the JSON here (docs/data/accuracy.json for the docs); "
        "without it, only the table is printed",
    )
    p.add_argument(
        "--only",
        type=lambda s: [v for v in s.split(",") if v],
        default=None,
        metavar="NAME,...",
        help="sweep these and merge their rows into the existing --out file",
    )
    p.add_argument(
        "--gated",
        action="store_true",
        help="sweep the gated forms (<name>_glu: value, d/dgate, d/dup at the defaults) "
        "instead, into --out (docs/data/accuracy-gated.json for the docs)",
    )
    p.add_argument("--quiet", action="store_true", help="no table, no progress")
    raw = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    old = None
    if args.only is not None:
        if args.names or not args.out or not Path(args.out).exists():
            p.error("--only merges into an existing --out file (and replaces --names)")
        old = json.loads(Path(args.out).read_text())
        args.names = args.only
        for flag, attr in (("--n-log", "n_log"), ("--n-lin", "n_lin")):
            m = re.search(re.escape(flag) + r" (\d+)", old.get("command", ""))
            if m and not any(a == flag or a.startswith(flag + "=") for a in raw):
                setattr(args, attr, int(m.group(1)))
    if args.jobs < 1 or args.n_log < 2 or args.n_lin < 2:
        p.error("--jobs must be >= 1, --n-log and --n-lin >= 2")
    for n in args.names or ():
        try:
            iglu_np.get(n)
        except KeyError as e:
            p.error(str(e.args[0]))
    # registry order whatever the order named: a subset's rows are the full sweep's rows
    names = [n for n in iglu_np.ACTIVATIONS if not args.names or n in args.names]

    def progress(done, total, w):
        if not args.quiet and sys.stderr.isatty():
            sys.stderr.write(f"\r{done}/{total} {w[0]} {w[1]}".ljust(60))
            sys.stderr.flush()

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if args.gated:
        return _gated(args, names, date)
    t0, c0 = time.perf_counter(), time.process_time()
    rows, cpu = run(names, args.n_log, args.n_lin, args.jobs, progress)
    wall = time.perf_counter() - t0
    cpu += time.process_time() - c0 if args.jobs > 1 else 0.0
    if not args.quiet and sys.stderr.isatty():
        sys.stderr.write("\n")
    data = {
        **_header(args, date),
        "bounds": {"fwd": acc.FWD_ULP, "derivative": acc.DER_ULP},
        "rows": rows,
    }
    if old is not None:
        data = merged(old, data, names)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    if not args.quiet:
        print(table(rows))
    bad = violations(rows)
    print(
        f"{len(rows)} rows, {sum(r['points'] for r in rows):,} points; "
        f"{wall:.1f} s wall, {cpu:.1f} s CPU in {args.jobs} process(es)"
        + (f"; {len(bad)} over their bound" if bad else "; all within their bounds"),
        file=sys.stderr,
    )
    for r in bad:
        print(
            f"over the bound: {r['activation']} {r['kind']} {r['dtype']}: "
            f"{r['worst_ulp']:.3g} ulp > {r['bound']} at x={r['worst_at']['x']!r} "
            f"{r['worst_at']['params']}",
            file=sys.stderr,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
