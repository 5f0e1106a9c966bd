"""``iglu-np bench --frameworks``: the torch and JAX bridges against the frameworks' own
activations.

For each framework that is installed, each activation (``gelu``, ``silu`` and ``iglu`` by
default; any with a torch or JAX form in its spec, :mod:`iglu_np.cli.references`) and
each size (1,024, 65,536 and 4,194,304 float32 elements by default), two passes:

* torch: the forward ``f(x)`` on a tensor that does not require grad, and forward plus
  ``y.backward(g)`` through autograd, eager;
* JAX: ``jit(f)(x)``, and ``jit(grad(lambda x: f(x).sum()))(x)``, each waited for with
  ``block_until_ready``;

``f`` is ``iglu_np.torch.<name>`` / ``iglu_np.jax.<name>`` ("ours") or the framework's
own ("native": ``torch.nn.functional.gelu``, ``jax.nn.gelu(approximate=False)``, the
paper's ``x * (0.5 + atan(x) / pi)`` for IGLU). Each is the median of repeats (each
repeat a batch of calls of about 2 ms, divided by its count), measured twice with ours
and native alternating, and the faster of the two kept: the pair shares the machine's
state. The report states the load average and the repeats' spread (the
checks of :func:`iglu_np.cli.bench.quiet_check` that apply here).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from . import _measure as m
from .references import jax_function, torch_function

NAMES = ("gelu", "silu", "iglu")
SIZES = (1024, 65536, 4194304)
PASSES = ("fwd", "fwd+bwd")


def _torch_pair(th, act, n, pas):
    import iglu_np.torch as it

    native = torch_function(th, act)
    if native is None:
        return None
    ours = it.FUNCTIONS[act.name]
    gen = th.Generator().manual_seed(0)
    x = th.randn(n, generator=gen)
    g = th.randn(n, generator=gen)
    if pas == "fwd":
        return (lambda: ours(x)), (lambda: native(x))
    xr = x.clone().requires_grad_(True)

    def fb(f):
        def call():
            f(xr).backward(g)
            xr.grad = None

        return call

    return fb(ours), fb(native)


def _jax_pair(jax, act, n, pas):
    import iglu_np.jax as ij

    native = jax_function(jax, act)
    if native is None:
        return None
    ours = getattr(ij, act.name)
    x = jax.numpy.asarray(np.random.default_rng(0).standard_normal(n).astype(np.float32))

    def compiled(f):
        if pas == "fwd":
            c = jax.jit(f)
        else:
            c = jax.jit(jax.grad(lambda v: f(v).sum()))
        return lambda: c(x).block_until_ready()

    return compiled(ours), compiled(native)


def _per_call(fn, repeats, min_time):
    """The median time of one call of ``fn``, each repeat a batch of calls of at least
    about 2 ms: a single call of a few microseconds is below the clock's and the
    scheduler's noise."""
    fn()
    t = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t, 1e-7)
    k = max(1, min(10_000, int(2e-3 / one)))

    def batch():
        for _ in range(k):
            fn()

    return m.median_time(batch, repeats, min_time) / k


def _frameworks(torch=None, jax=None):
    """``{name: module}`` of the frameworks to time (False: skipped)."""
    out = {}
    for name, flag in (("torch", torch), ("jax", jax)):
        if flag is False:
            continue
        try:
            out[name] = __import__(name)
        except ImportError:
            continue
    return out


def run(names=None, sizes=SIZES, repeats=7, min_time=0.1, torch=None, jax=None):
    """The measurements as a dict (``rows``, ``machine``, ``quiet``); ``torch=False`` /
    ``jax=False`` skip a framework (one not installed is skipped too)."""
    import iglu_np

    names = list(names or NAMES)
    fws = _frameworks(torch, jax)
    m.SPREADS.clear()
    load = m.load()
    rows = []
    for fw, mod in fws.items():
        pair = _torch_pair if fw == "torch" else _jax_pair
        for n in sizes:
            for name in names:
                act = iglu_np.get(name)
                for pas in PASSES:
                    fns = pair(mod, act, n, pas)
                    if fns is None:
                        continue
                    ours, native = fns
                    t = {"ours": [], "native": []}
                    first = len(m.SPREADS)
                    for _ in range(2):
                        t["ours"].append(_per_call(ours, repeats, min_time))
                        t["native"].append(_per_call(native, repeats, min_time))
                    to, tn = min(t["ours"]), min(t["native"])
                    rows.append(
                        {
                            "framework": fw,
                            "name": name,
                            "n": n,
                            "pass": pas,
                            "ours_s": to,
                            "native_s": tn,
                            "native_x": tn / to,
                            "spread": max(m.SPREADS[first:]),
                        }
                    )
    info = m.machine_info()
    if "jax" in fws:
        info["jax"] = fws["jax"].__version__
    spread = max(m.SPREADS) if m.SPREADS else None
    why = []
    if load >= (info.get("cores") or 1) - 0.5:
        why.append(f"load average {load:.1f} before the run")
    if spread is not None and spread > m.SPREAD_MAX:
        why.append(f"repeats spread up to {spread:.2f}x")
    return {
        "dtype": "float32",
        "frameworks": list(fws),
        "rows": rows,
        "machine": {**info, "load_before": load},
        "quiet": {"quiet": not why, "why": why, "load": load, "spread": spread},
    }


def _us(s: float) -> str:
    us = s * 1e6
    return f"{us:.1f}" if us < 1000 else f"{us:,.0f}"


def markdown(data) -> str:
    q = data["quiet"]
    mach = data["machine"]
    lines = [
        f"The torch and JAX bridges against the frameworks' own activations, float32, "
        f"torch {mach.get('torch') or '-'} ({mach.get('torch_threads', '?')} threads), "
        f"JAX {mach.get('jax') or '-'}; µs per call, the faster of two medians. "
        + ("Quiet machine." if q["quiet"] else "NOT quiet: " + "; ".join(q["why"]) + "."),
        "",
        "| framework | activation | elements | pass | ours µs | native µs | native / ours |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        lines.append(
            f"| {r['framework']} | {r['name']} | {r['n']:,} | {r['pass']} | "
            f"{_us(r['ours_s'])} | {_us(r['native_s'])} | {r['native_x']:.2f} |"
        )
    if not data["rows"]:
        lines.append("| (neither torch nor JAX is installed) | | | | | | |")
    return "\n".join(lines)


def main(args) -> int:
    import iglu_np

    for name in args.names:
        try:
            iglu_np.get(name)
        except KeyError as e:
            print(f"iglu-np bench --frameworks: {e.args[0]}", file=sys.stderr)
            return 2
    if args.dtype != "float32":
        print("iglu-np bench --frameworks: float32 only", file=sys.stderr)
        return 2
    data = run(
        args.names or None,
        sizes=args.sizes or SIZES,
        repeats=args.repeats or (3 if args.quick else 7),
        min_time=0.02 if args.quick else 0.1,
        torch=False if args.no_torch else None,
    )
    print(json.dumps(data, indent=1) if args.json else markdown(data))
    return 0
