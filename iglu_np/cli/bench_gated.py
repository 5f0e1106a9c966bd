"""``iglu-np bench --gated``: the gated forms against their memory limits and torch.

Each form's forward ``form(x, out=o)`` (x of shape ``(rows, 2 * h)``, halves along the
last axis, ``o`` of ``rows * h`` elements) and backward ``form.backward(x, g, out=d)``
are timed as medians of repeats beside

* the forward's limit, two arrays in and one out: the faster of ``np.multiply(a, b,
  out=o)`` and a two-thread ``a * b -> o``;
* the backward's limit, three in and two out: a two-thread ``(x1 * g, x2 * g)``;
* torch eager on the same data where torch is installed: ``F.silu(a) * b`` (``F.gelu``,
  ``F.relu``, ``F.glu`` ...) forward, and forward plus ``backward`` through autograd.

Each form's ratios are to the limits measured just before it. The report states the
load average, the repeats' spread, how far the limits moved and the busy-machine guard's
fallbacks, as ``iglu-np bench`` does (the checks of :func:`iglu_np.cli.bench.quiet_check` that apply).
"""

from __future__ import annotations

import json
import sys

import numpy as np

from . import _measure as m

FORMS = ("swiglu", "reglu", "glu", "geglu", "geglu_tanh", "iglu_glu", "xielu_glu", "swiglu_oai")
N = 1 << 24
WIDTH = 4096  # h: LLaMA-7B's intermediate size is 11,008; 4,096 keeps rows whole tasks

# torch's unfused equivalent of each form on (a, b) halves of its input
_TORCH = {
    "swiglu": lambda F, a, b, x: F.silu(a) * b,
    "reglu": lambda F, a, b, x: F.relu(a) * b,
    "glu": lambda F, a, b, x: F.glu(x, dim=-1),
    "geglu": lambda F, a, b, x: F.gelu(a) * b,
    "geglu_tanh": lambda F, a, b, x: F.gelu(a, approximate="tanh") * b,
    "swiglu_oai": lambda F, a, b, x: _oai(a.clamp(max=7.0), b.clamp(-7.0, 7.0)),
}


def _oai(gate, up):
    # modeling_gpt_oss.py's GptOssExperts
    return (up + 1) * (gate * (gate * 1.702).sigmoid())


def _limits(n, dt):
    _, pmul, pmul2 = m.limit_kernels()
    rng = np.random.default_rng(0)
    a, b, g = (rng.standard_normal(n).astype(dt) for _ in range(3))
    o, p, q = (np.empty(n, dt) for _ in range(3))
    return a, b, g, o, p, q, pmul, pmul2


def run(names=None, n=N, dtype="float32", repeats=7, min_time=0.1, torch=None):
    """The measurements as a dict (``rows``, ``limits``, ``machine``, ``quiet``)."""
    import iglu_np

    dt = np.dtype(dtype)
    names = list(names or FORMS)
    m.SPREADS.clear()
    load = m.load()
    a, b, g1, o, p, q, pmul, pmul2 = _limits(n, dt)

    def limits():
        fwd = min(m.median_time(lambda: np.multiply(a, b, out=o), repeats, min_time),
                  m.median_time(lambda: pmul(a, b, o), repeats, min_time))  # fmt: skip
        bwd = m.median_time(lambda: pmul2(a, b, g1, p, q), repeats, min_time)
        return fwd, bwd

    h = WIDTH
    rows_n = max(1, n // h)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((rows_n, 2 * h)).astype(dt)
    go = rng.standard_normal((rows_n, h)).astype(dt)
    out = np.empty((rows_n, h), dt)
    dx = np.empty_like(x)
    th = _torch() if torch is not False else None
    from ..backends.cpu import loops

    trips0 = loops.guard_trips
    rows = []
    runs = []
    for name in names:
        # each form against the limits measured just before it: a shared VM's memory
        # throughput moves by half within a run, more than the ratios' margins
        lf, lb = limits()
        runs.append((lf, lb))
        form = iglu_np.get_gated(name)
        tf = m.median_time(lambda: form(x, out=out), repeats, min_time)
        tb = m.median_time(lambda: form.backward(x, go, out=dx), repeats, min_time)
        row = {"form": name, "n": rows_n * h, "fwd_s": tf, "bwd_s": tb}
        row.update(fwd_limit_s=lf, bwd_limit_s=lb, fwd_x_limit=tf / lf, bwd_x_limit=tb / lb)
        if th is not None and name in _TORCH:
            row.update(_torch_times(th, name, x, go, repeats, min_time))
            row["torch_fwd_x"] = row["torch_fwd_s"] / tf
            row["torch_fwdbwd_x"] = row["torch_fwdbwd_s"] / (tf + tb)
        rows.append(row)
    runs.append(limits())
    lim = {
        "fwd_s": min(r[0] for r in runs),
        "bwd_s": min(r[1] for r in runs),
        "fwd_runs": [r[0] for r in runs],
        "bwd_runs": [r[1] for r in runs],
    }
    spread = max(m.SPREADS) if m.SPREADS else None
    info = m.machine_info()
    why = []
    if load >= (info.get("cores") or 1) - 0.5:
        why.append(f"load average {load:.1f} before the run")
    if spread is not None and spread > m.SPREAD_MAX:
        why.append(f"repeats spread up to {spread:.2f}x")
    # how far a limit moved across one form's measurements (before it, and before the next)
    drift = max(
        max(v[i], v[i + 1]) / min(v[i], v[i + 1])
        for v in (lim["fwd_runs"], lim["bwd_runs"])
        for i in range(len(v) - 1)
    )
    if drift > m.DRIFT_MAX:
        why.append(f"a limit moved {drift:.2f}x across a form's measurements")
    trips = loops.guard_trips - trips0
    if trips:
        why.append(f"the busy-machine guard ran kernels on one thread ({trips} times)")
    return {
        "dtype": dtype,
        "shape": [rows_n, 2 * h],
        "rows": rows,
        "limits": lim,
        "machine": {**info, "load_before": load},
        "quiet": {"quiet": not why, "why": why, "load": load, "spread": spread, "drift": drift},
    }


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_times(th, name, x, go, repeats, min_time):
    F = th.nn.functional
    fn = _TORCH[name]
    tx = th.from_numpy(x)
    h = x.shape[-1] // 2
    tg = th.from_numpy(go)
    with th.no_grad():
        tf = m.median_time(lambda: fn(F, tx[:, :h], tx[:, h:], tx), repeats, min_time)
    xr = tx.clone().requires_grad_(True)

    def fb():
        y = fn(F, xr[:, :h], xr[:, h:], xr)
        y.backward(tg)
        xr.grad = None

    tb = m.median_time(fb, repeats, min_time)
    return {"torch_fwd_s": tf, "torch_fwdbwd_s": tb}


def markdown(data) -> str:
    q = data["quiet"]
    lim = data["limits"]
    lines = [
        f"Gated forms, {data['dtype']}, x of shape {tuple(data['shape'])} (halves), "
        f"{data['machine'].get('numba_threads', '?')} thread(s); each form against the limits measured "
        f"just before it (fastest: forward, 2 in and 1 out, {lim['fwd_s'] * 1e3:.2f} ms; "
        f"backward, 3 in and 2 out, {lim['bwd_s'] * 1e3:.2f} ms). "
        + ("Quiet machine." if q["quiet"] else "NOT quiet: " + "; ".join(q["why"]) + "."),
        "",
        "| form | fwd ms | fwd x limit | bwd ms | bwd x limit | torch fwd ms | torch fwd+bwd ms "
        "| faster than torch, fwd | fwd+bwd |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        t = (
            f"{r['torch_fwd_s'] * 1e3:.2f} | {r['torch_fwdbwd_s'] * 1e3:.2f} | "
            f"{r['torch_fwd_x']:.2f}x | {r['torch_fwdbwd_x']:.2f}x"
            if "torch_fwd_s" in r
            else "- | - | - | -"
        )
        lines.append(
            f"| {r['form']} | {r['fwd_s'] * 1e3:.2f} | {r['fwd_x_limit']:.2f} | "
            f"{r['bwd_s'] * 1e3:.2f} | {r['bwd_x_limit']:.2f} | {t} |"
        )
    return "\n".join(lines)


def main(args) -> int:
    import iglu_np

    for name in args.names:
        try:
            iglu_np.get_gated(name)
        except KeyError as e:
            print(f"iglu-np bench --gated: {e.args[0]}", file=sys.stderr)
            return 2
    dt = args.dtype
    if dt not in ("float32", "float64"):
        print("iglu-np bench --gated: --dtype float32 or float64", file=sys.stderr)
        return 2
    n = (args.sizes or [N])[-1]
    data = run(
        args.names or None,
        n=n,
        dtype=dt,
        repeats=args.repeats or (3 if args.quick else 7),
        min_time=0.02 if args.quick else 0.1,
        torch=False if args.no_torch else None,
    )
    print(json.dumps(data, indent=1) if args.json else markdown(data))
    return 0
