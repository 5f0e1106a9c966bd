"""``iglu-np bench``: the paper's Table 1 (CPU speed) measured on this machine.

Each activation's forward pass ``act(x, out=o)`` and fused backward pass
``act.backward(x, g, out=o)`` on random float32 (or float64, or bfloat16 with ml_dtypes)
arrays of 10,000 and 1,000,000 elements (the paper's sizes) and 16,777,216 elements, timed as medians of
repeats and printed as a Markdown table:

* relative to ``identity`` (the paper's Table 1 convention),
* in ns/element, and
* as a ratio to the memory limit: the faster of ``np.copyto`` and a two-thread copy for
  the forward, the faster of ``np.multiply(x, g, out=o)`` and a two-thread ``x*g -> out``
  for the backward (1.0 = as fast as copying the data),

with torch on the CPU side by side when torch is installed (never required; bfloat16
rows time torch's bfloat16 tensors). The report
says whether the machine was quiet enough for the figures to describe the code: load
average, identity against the copy limit, the spread of repeats, a fixed compute-bound call
timed before the run and after every activation, each limit measured before and after
its block, and the busy-machine guard's one-thread fallbacks during the run
(:func:`quiet_check`). Every activation named (all by default) is measured at 3 sizes,
7 repeats each; ``--quick`` at 2 sizes, 3 repeats.
In Python, :func:`run` returns the data and :func:`markdown` formats it (``iglu-np
reproduce`` uses both).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from ._measure import DRIFT_MAX, SPREAD_MAX, limit_kernels, machine_info  # noqa: F401
from ._measure import SPREADS as _SPREADS
from ._measure import load as _load
from ._measure import median_time as _median_time
from .references import torch_function

SIZES = (10_000, 1_000_000, 16_777_216)
DTYPES = ("float32", "float64", "bfloat16")
QUICK_SIZES = (10_000, 1_000_000)


# A quiet machine: identity within this factor of the copy limit (the rows are relative
# to both), the repeats of a measurement within SPREAD_MAX (p90/p10), and a load average
# below the core count (the bench's own threads excluded: load measured before it starts);
# the CPU's speed steady through the run (CANARY_MAX: a fixed compute-bound call timed
# before the run and after every activation) and the memory's (DRIFT_MAX: the limits
# measured before and after each block): on a shared VM two runs minutes apart can both
# pass the first three checks while an unchanged kernel's time and the copy limit move by
# a third or more between them.
IDENTITY_MAX = 1.5
CANARY_MAX = 1.3
_CANARY_N = 16_384


def _canary_time(c, d) -> float:
    """Median of 101 calls of np.exp on 16,384 float64 elements (L2-resident, one thread,
    compute-bound; ~13 us a call, ~1.5 ms in all on a znver4 core): a yardstick of the
    CPU's speed that does not involve iglu_np. On an idle machine it repeats within ~10%."""
    np.exp(c, out=d)
    ts = []
    for _ in range(101):
        t = time.perf_counter()
        np.exp(c, out=d)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def quiet_check(data) -> dict:
    """``{"quiet": bool, "why": [...], "identity_x_limit": ..., "spread": ...}`` from a
    :func:`run` result: whether its figures describe the code or the machine's load."""
    m = data["machine"]
    why = []
    cores = m.get("cores") or 1
    load = max(m.get("load_before", 0.0), 0.0)
    if load >= cores - 0.5:
        why.append(f"load average {load:.1f} on {cores} cores before the run")
    lims = {(lim["dtype"], lim["n"]): lim for lim in data["limits"]}
    ratios = [
        r["rel_limit"]
        for r in data["rows"]
        if r["activation"] == "identity"
        and r["pass"] == "fwd"
        and r["n"] >= 100_000
        and (r["dtype"], r["n"]) in lims
    ]
    ix = max(ratios) if ratios else None
    if ix is not None and ix > IDENTITY_MAX:
        why.append(f"identity at {ix:.2f}x the copy limit (> {IDENTITY_MAX})")
    spread = data.get("spread")
    if spread is not None and spread > SPREAD_MAX:
        why.append(f"repeats spread up to {spread:.2f}x (p90/p10 > {SPREAD_MAX})")
    canary = data.get("canary")
    cr = max(canary) / min(canary) if canary and min(canary) > 0 else None
    if cr is not None and cr > CANARY_MAX:
        why.append(
            f"the CPU's speed varied during the run (a fixed compute-bound call took "
            f"up to {cr:.2f}x its fastest time; > {CANARY_MAX})"
        )
    trips = data.get("guard_trips") or 0
    if trips:
        why.append(
            f"threaded calls lost to one thread: the busy-machine guard ran kernels on "
            f"one thread for a while ({trips} time{'s' if trips > 1 else ''})"
        )
    drift = max((d for d in map(_drift, data["limits"]) if d is not None), default=None)
    if drift is not None and drift > DRIFT_MAX:
        why.append(
            f"the memory throughput varied during the run (a copy limit moved "
            f"{drift:.2f}x between its measurements; > {DRIFT_MAX})"
        )
    return {
        "quiet": not why,
        "why": why,
        "identity_x_limit": ix,
        "spread": spread,
        "load": load,
        "canary": cr,
        "drift": drift,
        "guard_trips": trips,
    }


def _drift(lim):
    """The larger ratio of a limit's two measurements (before and after its block)."""
    pairs = [lim.get(k) for k in ("copy_runs", "two_in_one_out_runs")]
    rs = [max(p) / min(p) for p in pairs if p and min(p) > 0]
    return max(rs) if rs else None


def _dtype(name: str) -> np.dtype:
    """The numpy dtype called ``name``; bfloat16 is ml_dtypes' (an optional extra)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _bits(a):
    """``a`` as the unsigned integers of its bits, for the memory limits' Numba loops (which
    do not type bfloat16) and numpy's copies; the same bytes move."""
    return a.view(np.uint16) if a.dtype.itemsize == 2 and a.dtype.kind not in "fiu" else a


def _torch_tensor(th, a):
    """A torch tensor over ``a``'s memory; bfloat16 through its bits (torch does not take
    ml_dtypes' arrays)."""
    if a.dtype.kind not in "fiu":
        return th.from_numpy(a.view(np.int16)).view(th.bfloat16)
    return th.from_numpy(a)


def run(
    names=None,
    sizes=SIZES,
    dtypes=("float32",),
    repeats=7,
    min_time=0.05,
    torch=None,
    progress=None,
) -> dict:
    """Measure and return ``{"machine": ..., "rows": [...], "limits": [...]}``.

    Each row: activation, dtype, n, pass ("fwd"/"bwd"), seconds, ns_per_element,
    rel_identity, rel_limit, and torch seconds (None without torch or a native kernel).
    ``torch=None`` uses torch when importable; ``progress(done, total, label)`` is called
    after each measurement.
    """
    import iglu_np

    load_before = _load()
    del _SPREADS[:]
    acts = iglu_np.ACTIVATIONS
    names = list(names or acts)
    for n in names:
        a = iglu_np.get(n)  # KeyError naming the closest registered names
        if n not in acts:
            raise KeyError(
                f"{n!r} is an alias of {a.spec.name!r}, which the benchmark times "
                "(it times each activation once, by its own name)"
            )
    if "identity" in acts:  # first: the other rows are relative to it
        names = ["identity"] + [n for n in names if n != "identity"]
    th = None
    if torch is not False:
        try:
            import torch as th
        except ImportError:
            th = None
            if torch:
                raise
    pcopy, pmul, _ = limit_kernels()
    from ..backends.cpu import loops as cpu_fast

    trips0 = cpu_fast.guard_trips
    cc = np.linspace(-5.0, 5.0, _CANARY_N)
    cd = np.empty_like(cc)
    canary = [_canary_time(cc, cd)]
    rows, limits = [], []
    total = len(dtypes) * len(sizes) * (len(names) + 1)
    done = 0
    rng = np.random.default_rng(0)
    for dts in dtypes:
        dt = _dtype(dts)
        for n in sizes:
            x = (rng.standard_normal(n) * 3).astype(dt)
            g = rng.standard_normal(n).astype(dt)
            o = np.empty_like(x)
            bx, bg, bo = _bits(x), _bits(g), _bits(o)

            def measure_limits():
                return (
                    min(
                        _median_time(lambda: np.copyto(bo, bx), repeats, min_time),
                        _median_time(lambda: pcopy(bx, bo), repeats, min_time),
                    ),
                    min(
                        _median_time(lambda: np.multiply(bx, bg, out=bo), repeats, min_time),
                        _median_time(lambda: pmul(bx, bg, bo), repeats, min_time),
                    ),
                )

            t_copy, t_two = measure_limits()
            first_row = len(rows)
            done += 1
            if progress:
                progress(done, total, f"{dts} n={n} limits")
            ident = {}
            tx = tg = to = None
            if th is not None:
                tx, tg, to = (_torch_tensor(th, a) for a in (x, g, o))
            for name in names:
                a = acts[name]
                tf = _median_time(lambda: a(x, out=o), repeats, min_time)
                tb = _median_time(lambda: a.backward(x, g, out=o), repeats, min_time)
                if name == "identity":
                    ident = {"fwd": tf, "bwd": tb}
                torch_f = torch_b = None
                if th is not None:
                    torch_f, torch_b = _torch_times(th, name, tx, tg, to, repeats, min_time)
                for ps, t, tt in (("fwd", tf, torch_f), ("bwd", tb, torch_b)):
                    rows.append(
                        {
                            "activation": name,
                            "dtype": dts,
                            "n": n,
                            "pass": ps,
                            "seconds": t,
                            "ns_per_element": t / n * 1e9,
                            "rel_identity": t / ident[ps] if ident else None,
                            "torch_seconds": tt,
                            "torch_rel": (tt / t) if tt else None,
                        }
                    )
                canary.append(_canary_time(cc, cd))
                done += 1
                if progress:
                    progress(done, total, f"{dts} n={n} {name}")
            # The limits again after the activations, keeping the faster: measured once,
            # they were sometimes slower than identity itself (a cold first measurement).
            t_copy2, t_two2 = measure_limits()
            limits.append(
                {
                    "dtype": dts,
                    "n": n,
                    "copy": min(t_copy, t_copy2),
                    "two_in_one_out": min(t_two, t_two2),
                    "copy_runs": [t_copy, t_copy2],
                    "two_in_one_out_runs": [t_two, t_two2],
                }
            )
            t_copy, t_two = limits[-1]["copy"], limits[-1]["two_in_one_out"]
            for r in rows[first_row:]:
                r["rel_limit"] = r["seconds"] / (t_copy if r["pass"] == "fwd" else t_two)
    m = machine_info()
    m["load_before"], m["load_after"] = load_before, _load()
    spreads = sorted(_SPREADS)
    # the 90th percentile of the measurements' spreads: one hiccup does not flag a run
    data = {
        "machine": m,
        "rows": rows,
        "limits": limits,
        "spread": spreads[int(0.9 * (len(spreads) - 1))] if spreads else None,
        "canary": canary,
        "guard_trips": cpu_fast.guard_trips - trips0,
    }
    data["quiet"] = quiet_check(data)
    return data


def _torch_times(th, name, tx, tg, to, repeats, min_time):
    """torch forward (out= where the op has an out variant) and autograd fwd+bwd."""
    import iglu_np

    act = iglu_np.get(name)
    op = act.spec.torch  # a torch.nn.functional name or an expression
    fn = torch_function(th, act)
    if fn is None:
        return None, None
    if callable(op):

        def fwd():
            return fn(tx)
    else:
        aten = getattr(th.ops.aten, op, None)
        outv = getattr(aten, "out", None) if aten is not None else None
        if outv is not None:

            def fwd():
                return outv(tx, out=to)

            try:
                fwd()
            except Exception:

                def fwd():
                    return fn(tx)
        else:

            def fwd():
                return fn(tx)

    with th.no_grad():
        tf = _median_time(fwd, repeats, min_time)
    xr = tx.clone().requires_grad_(True)

    def fb():
        y = fn(xr)
        y.backward(tg)
        xr.grad = None

    tb = _median_time(fb, repeats, min_time)
    return tf, tb


def markdown(data, heading: bool = True) -> str:
    """The measurements as Markdown; ``heading=False`` leaves out the top-level title (for
    embedding the table in another document)."""
    m = data["machine"]
    has_torch = bool(m.get("torch"))
    lines = (["# iglu-np bench (CPU)", ""] if heading else []) + [
        f"CPU: {m['cpu']} ({m['cores']} cores, LLVM target {m.get('llvm_cpu', '?')}); "
        f"Numba {m['numba']} threads={m['numba_threads']} layer={m['threading_layer']}; "
        f"parallel threshold {m['parallel_threshold']} elements; numpy {m['numpy']}; "
        f"torch {m['torch'] or 'not installed'}"
        + (f" (threads={m['torch_threads']})" if m.get("torch") else ""),
        "",
        "Times are medians; `rel id.` is relative to identity (the paper's Table 1), `× limit` "
        "to the memory limit (copy for fwd, x*g->out on all threads for bwd)"
        + (
            "; `torch/ours` > 1 means we are faster (torch bwd = autograd forward+backward)."
            if has_torch
            else "."
        ),
        "",
    ]
    q = data.get("quiet") or quiet_check(data)
    if q["quiet"]:
        lines.append(
            f"Machine quiet: load {q['load']:.1f}, identity at "
            + (f"{q['identity_x_limit']:.2f}x" if q["identity_x_limit"] else "-")
            + " the copy limit, repeats within "
            + (f"{q['spread']:.2f}x" if q["spread"] else "-")
            + (f", CPU speed steady within {q['canary']:.2f}x" if q.get("canary") else "")
            + (f", copy limits within {q['drift']:.2f}x" if q.get("drift") else "")
            + "."
        )
    else:
        lines.append(
            "**Machine not quiet: " + "; ".join(q["why"]) + ". These figures "
            "measure the machine's load as much as the code: rerun on an idle machine.**"
        )
    lines.append("")
    for lim in data["limits"]:
        lines.append(
            f"- {lim['dtype']} n={lim['n']}: copy limit "
            f"{lim['copy'] / lim['n'] * 1e9:.3f} ns/el, two-in-one-out "
            f"{lim['two_in_one_out'] / lim['n'] * 1e9:.3f} ns/el"
        )
    lines.append("")
    keys = sorted({(r["dtype"], r["n"]) for r in data["rows"]}, key=lambda k: (k[0], k[1]))
    hdr = (
        "| activation | pass | "
        + " | ".join(
            f"{dt} n={n}: rel id. / ns/el / × limit" + (" / torch/ours" if has_torch else "")
            for dt, n in keys
        )
        + " |"
    )
    lines.append(hdr)
    lines.append("|---|---|" + "---|" * len(keys))
    by = {}
    for r in data["rows"]:
        by.setdefault((r["activation"], r["pass"]), {})[(r["dtype"], r["n"])] = r
    for (name, ps), d in by.items():
        cells = []
        for k in keys:
            r = d.get(k)
            if r is None:
                cells.append("")
                continue
            rid = f"{r['rel_identity']:.2f}" if r["rel_identity"] else "-"
            tr = f"{r['torch_rel']:.2f}" if r["torch_rel"] else "-"
            cells.append(
                f"{rid} / {r['ns_per_element']:.3f} / {r['rel_limit']:.2f}"
                + (f" / {tr}" if has_torch else "")
            )
        lines.append(f"| {name} | {ps} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_arguments(parser):
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="activations to measure (default: all; 'iglu-np info' lists them)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="sizes 10,000 and 1,000,000 only and 3 repeats"
    )
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(float(v)) for v in s.split(",")],
        metavar="N,N,...",
        help="comma-separated array sizes, 1e6 notation allowed (default: 10000,1000000,16777216)",
    )
    parser.add_argument(
        "--dtype",
        default="float32",
        metavar="DTYPES",
        help="float32, float64, bfloat16 (needs ml_dtypes) or several "
        "comma-separated (default: float32); --device gpu also takes float16",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        metavar="N",
        help="timed calls per measurement, of which the median is reported "
        "(default: 7, or 3 with --quick; fast calls are repeated for at least "
        "0.1 s, up to 10 times as many)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the raw measurements as JSON instead of the Markdown table",
    )
    parser.add_argument(
        "--no-torch",
        action="store_true",
        help="skip the torch comparison even when torch is installed",
    )
    parser.add_argument(
        "--gated",
        action="store_true",
        help="the gated forms (swiglu, glu, ...; NAME selects them) against their "
        "two-in-one-out and three-in-two-out limits and torch, at the last --sizes "
        "(default 16777216 outputs)",
    )
    parser.add_argument(
        "--frameworks",
        action="store_true",
        help="the torch and JAX bridges against the frameworks' own activations (gelu, "
        "silu, iglu; NAME selects others), forward and forward+backward, at --sizes "
        "(default 1024,65536,4194304)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "gpu"),
        default="cpu",
        help="cpu (default): the Numba ufuncs against the CPU's copy limit and "
        "torch; gpu: the CuPy and Numba CUDA kernels against the GPU's copy "
        "limit, cupy.negative, torch and JAX (needs cupy and a GPU)",
    )
    parser.add_argument(
        "--gpu-size",
        type=lambda s: int(float(s)),
        default=2**26,
        metavar="N",
        help="elements per array for --device gpu (default: 2**26)",
    )


def main(args) -> int:
    if getattr(args, "gated", False):
        from . import bench_gated

        return bench_gated.main(args)
    if getattr(args, "frameworks", False):
        from . import bench_frameworks

        return bench_frameworks.main(args)
    if args.device == "gpu":
        from . import bench_gpu

        return bench_gpu.main(args)
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    repeats = args.repeats or (3 if args.quick else 7)
    dtypes = [d.strip() for d in args.dtype.split(",")]

    def progress(done, total, label):
        if sys.stderr.isatty() or os.environ.get("IGLU_NP_PROGRESS"):
            w = 30
            f = int(w * done / total)
            sys.stderr.write(f"\r[{'#' * f}{'.' * (w - f)}] {done}/{total} {label[:40]:40s}")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()

    import iglu_np

    for name in args.names:
        try:
            iglu_np.get(name)
        except KeyError as e:
            print(f"iglu-np bench: {e.args[0]}", file=sys.stderr)
            return 2
    for dt in dtypes:
        if dt not in DTYPES:
            print(
                f"iglu-np bench: --dtype {dt!r}: expected {', '.join(DTYPES)} or several "
                "comma-separated",
                file=sys.stderr,
            )
            return 2
        if dt == "bfloat16":
            try:
                _dtype(dt)
            except ImportError:
                print(
                    "iglu-np bench: --dtype bfloat16 needs ml_dtypes (pip install 'iglu-np[bf16]')",
                    file=sys.stderr,
                )
                return 2
    data = run(
        args.names or None,
        sizes=sizes,
        dtypes=dtypes,
        repeats=repeats,
        min_time=0.02 if args.quick else 0.1,
        torch=False if args.no_torch else None,
        progress=progress,
    )
    print(json.dumps(data, indent=1) if args.json else markdown(data))
    return 0
