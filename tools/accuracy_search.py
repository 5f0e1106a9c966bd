"""Random accuracy search: every activation's ufuncs against mpmath, for a time budget.

    python tools/accuracy_search.py [--seconds 600] [--names gelu,iglu] [--seed 1]
                                    [--out search.jsonl]
    python tools/accuracy_search.py --report search.jsonl
    python tools/accuracy_search.py --compare REV --names xatlu [--draws 300] [--kinds fwd]

tests/test_accuracy.py checks fixed grids (``tests.accuracy.x_points`` over the test
parameter sets); this draws what those grids do not: parameters log-uniform over their
whole domains, at and a few ulps off their edges, at the extremes of the dtype, and x near
the places where a form changes (exp's underflow edge, the parameters' own scales and
reciprocals, the spec's special values), with errors counted down to the subnormal spacing
(``tests.accuracy.ulp_errors(..., subnormal=True)``). Each point above the README's
tolerance is recomputed at ``DPS + 500`` digits (``recheck_err``) before it is written,
so a reference that lost its precision is told apart from a kernel that did.

It finds tail bugs the fixed grids miss (softplus's d_beta at beta = 0.001, ELU's
derivative with alpha = 3.7e272, xIELU's expm1 cancellation); its runs take
minutes to hours, so it is a development tool, not a test. Output: one JSON line per
violation (``type: viol``), per reference exception (``exc``) and, per activation, dtype
and kind, the worst point seen (``worst``, with the counts); ``--report`` groups them.
Run from the repository root (it imports ``tests.accuracy``).

``--compare REV`` scores the same draws (``--draws`` parameter sets of ``--seed``, each with
its x and |x|) at git revision REV, in a temporary worktree with this file copied in, and in
the working tree, and prints worst, mean and 99th-percentile error side by side: a kernel
change's accuracy, paired point for point.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mpmath
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import iglu_np  # noqa: E402
from iglu_np._spec import REGISTRY  # noqa: E402
from tests import accuracy as acc  # noqa: E402

NX = 24  # x points per parameter draw
DTYPES = {np.float32: "float32", np.float64: "float64"}


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout()


def _rd(dt, v) -> float:
    with np.errstate(all="ignore"):
        return float(dt(v))


def _loguni(rng, dt, lo=None, hi=None) -> float:
    fi = np.finfo(dt)
    a = math.log10(float(fi.smallest_subnormal) if lo is None else lo)
    b = math.log10(float(fi.max) if hi is None else hi)
    return 10 ** rng.uniform(a, b)


def _near(rng, dt, e: float, up: bool) -> float:
    """e itself, or a value a little or a few ulps inside the domain from the edge e."""
    fi = np.finfo(dt)
    k = rng.random()
    if k < 0.3:
        return e
    if k < 0.5:
        v = e
        for _ in range(int(rng.integers(1, 5))):
            v = float(np.nextafter(dt(v), dt(np.inf if up else -np.inf)))
        return v
    d = (
        10 ** rng.uniform(math.log10(float(fi.smallest_subnormal)), 0)
        if rng.random() < 0.5
        else 10 ** rng.uniform(-20, 0)
    )
    if e != 0 and rng.random() < 0.7:
        d *= abs(e)
    return e + d if up else e - d


def sample_param(rng, p, dt) -> float:
    """One value of parameter ``p`` inside its domain."""
    fi = np.finfo(dt)
    for _ in range(200):
        r = rng.random()
        if r < 0.40:  # magnitude log-uniform over the whole dtype, signs the domain allows
            signs = ([1] if p.hi > 0 else []) + ([-1] if p.lo < 0 else [])
            s = rng.choice(signs)
            v = s * _loguni(rng, dt)
            if s < 0 and math.isfinite(p.lo):
                v = -_loguni(rng, dt, float(fi.smallest_subnormal), abs(p.lo))
        elif r < 0.60:  # everyday magnitudes
            pos = p.hi > 0 and (p.lo >= 0 or rng.random() < 0.5)
            v = 10 ** rng.uniform(-3, 3) * (1 if pos else -1)
            if v < p.lo:
                v = p.lo * rng.random()
        elif r < 0.68:
            v = 0.0
        elif r < 0.85:  # at or near a finite edge of the domain
            edges = [e for e in (p.lo, p.hi) if math.isfinite(e)]
            if edges:
                e = float(rng.choice(edges))
                v = _near(rng, dt, e, e == p.lo)
            else:
                v = rng.choice([-1, 1]) * _loguni(rng, dt, 1e-3, 1e3)
        elif r < 0.93:
            v = float(rng.choice(list(p.test_values) + [p.default]))
        else:  # extremes of the dtype
            v = rng.choice(
                [
                    float(fi.max),
                    float(fi.tiny),
                    float(fi.smallest_subnormal),
                    2.0**64,
                    2.0**-64,
                    1e35,
                    1e-35,
                    1e155,
                    1e-155,
                    1e305,
                    1e-305,
                ]
            ) * rng.choice([-1, 1])
        v = _rd(dt, v)
        if p.contains(v):
            return v
    return _rd(dt, p.default)


def sample_params(rng, spec, dt):
    """A parameter set inside every domain and the spec's joint check (None: none found)."""
    for _ in range(500):
        ps = {p.name: sample_param(rng, p, dt) for p in spec.params}
        for p in spec.params:  # p > another parameter: often just above it
            if p.above and (ps[p.name] <= ps[p.above] or rng.random() < 0.4):
                o = ps[p.above]
                k = rng.random()
                if k < 0.4:
                    v = o * (1 + 10 ** rng.uniform(-8, 2)) + (0 if o != 0 else _loguni(rng, dt))
                elif k < 0.7:
                    v = o + 10 ** rng.uniform(-3, 3)
                else:
                    v = _near(rng, dt, o, True)
                ps[p.name] = _rd(dt, v)
        if not all(p.contains(ps[p.name]) for p in spec.params):
            continue
        if spec.check is not None and spec.check(**ps):
            continue
        return ps
    return None


def sample_x(rng, spec, dt, ps, n: int = NX) -> np.ndarray:
    """x over all magnitudes, around exp's underflow edge (scaled by the parameters), and
    near the regime points of the spec and its parameters."""
    fi = np.finfo(dt)
    out = [rng.choice([-1, 1]) * _loguni(rng, dt) for _ in range(7)]
    out += [rng.uniform(-100, 100) for _ in range(4)]
    elo, ehi = (-110, -80) if dt == np.float32 else (-760, -700)
    pvals = [abs(v) for v in ps.values() if v != 0 and math.isfinite(v)]
    for _ in range(3):
        u = rng.uniform(elo, ehi)
        if pvals and rng.random() < 0.6:
            pv = float(rng.choice(pvals))
            u = u * pv if rng.random() < 0.5 else u / pv
        out.append(u * (1 if rng.random() < 0.85 else -1))
    big, sub, tiny = float(fi.max), float(fi.smallest_subnormal), float(fi.tiny)
    cands = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0**64,
        -(2.0**64),
        2.0**-64,
        -(2.0**-64),
        big,
        -big,
        sub,
        -sub,
        tiny,
        -tiny,
        math.inf,
        -math.inf,
    ]
    cands += acc.special_values(spec, ps)
    for v in pvals:
        for s in (1.0, -1.0):
            cands += [
                s * v,
                s / v,
                s * 2.0**64 / v,
                s * 2.0**-64 / v,
                s * v * 2.0**64,
                s * v * 2.0**-64,
            ]
        for c in (20.0, 745.0, 88.0, 104.0, 37.0):  # exp's edges and GELU's, in units of v
            cands += [c * v, -c * v, c / v, -c / v]
        cands += [0.5 / v, -0.5 / v]
    # the parameters' own regime changes (softplus's threshold, IGLU's |sigma x| = 1,
    # xIELU's eps and the root of its negative branch)
    if ps.get("beta", 0) > 0 and "threshold" in ps:
        cands += [ps["threshold"] / ps["beta"]] * 3
    if "sigma" in ps:
        cands += [-1 / ps["sigma"]] * 3 + [1 / ps["sigma"]]
    if "eps" in ps:
        cands += [ps["eps"]] * 2
    if "alpha_n" in ps and "beta" in ps and ps["alpha_n"] != 0:
        with np.errstate(all="ignore"):
            r = -ps["beta"] / ps["alpha_n"]
        if r > -1:
            cands += [math.log1p(r)] * 2
    for _ in range(n - len(out)):
        c = float(rng.choice(cands))
        k = rng.random()
        with np.errstate(all="ignore"):
            if k < 0.35:
                c = _rd(dt, c)
                for _ in range(int(rng.integers(0, 4))):
                    c = float(np.nextafter(dt(c), dt(rng.choice([-np.inf, np.inf]))))
            elif k < 0.7:
                c = c * (
                    1 + rng.choice([-1, 1]) * 10 ** rng.uniform(-16 if dt == np.float64 else -7, -1)
                )
            else:
                c = c * 10 ** rng.uniform(-3, 3) * rng.choice([-1, 1])
        out.append(c)
    with np.errstate(all="ignore"):
        x = np.array(out, dtype=np.float64).astype(dt)
    return x[~np.isnan(x)]


def score(spec, dt, kind: str, x: np.ndarray, ps: dict, got: np.ndarray):
    """(errors in ulp, true values, records of the points above the tolerance)."""
    true, scale = acc.reference(spec, kind, x, ps, adaptive=True)
    err = acc.ulp_errors(got, true, scale, dt, subnormal=True)
    tol = acc.tolerance(spec, kind)
    bad = []
    for i, e in enumerate(err):
        if true[i] is not None and (e > tol or math.isnan(e)):
            bad.append(_record(spec, dt, kind, x[i], ps, got[i], true[i], e, scale, i))
    return err, true, bad


def _record(spec, dt, kind, xi, ps, gi, ti, e, scale, i) -> dict:
    return dict(
        act=spec.name,
        dtype=DTYPES[dt],
        kind=kind,
        x=repr(float(xi)),
        params=ps,
        got=repr(float(gi)),
        true=mpmath.nstr(ti, 20),
        err=float(e),
        scale=None if scale is None or scale[i] is None else mpmath.nstr(scale[i], 6),
    )


def evaluate(spec, dt, kind: str, x: np.ndarray, ps: dict) -> np.ndarray:
    """The activation's raw ufunc for ``kind`` at x, parameters cast to dt, FP warnings off."""
    with np.errstate(all="ignore"):
        return iglu_np.get(spec.name)._ufunc(kind)(x, *[dt(ps[p]) for p in spec.param_names])


def recheck(spec, dt, kind: str, xi, ps: dict):
    """The error at one point against a reference with 500 more digits."""
    x = np.array([xi], dtype=dt)
    got = evaluate(spec, dt, kind, x, ps)
    true, scale = acc.reference(spec, kind, x, ps, dps=acc.DPS + 500, adaptive=True)
    err = acc.ulp_errors(got, true, scale, dt, subnormal=True)
    return float(err[0]), (None if true[0] is None else mpmath.nstr(true[0], 20))


def _with_alarm(seconds, fn, *args):
    signal.alarm(seconds)
    try:
        return fn(*args)
    finally:
        signal.alarm(0)


def search(seconds: float, names, seed: int, fout, log=print) -> dict:
    """Draw and score points for ``seconds`` in all, shared among ``names`` (activations
    with parameters get more), writing JSON lines to ``fout``; returns the totals."""
    rng = np.random.default_rng(seed)
    signal.signal(signal.SIGALRM, _alarm)
    weights = {
        n: 1.0 if not REGISTRY[n].params else 2.0 + 0.5 * len(REGISTRY[n].params) for n in names
    }
    total_w = 2 * sum(weights.values())
    totals = collections.Counter()
    for name in names:
        spec = REGISTRY[name]
        for dt in DTYPES:
            budget = seconds * weights[name] / total_w
            t0 = time.time()
            worst, c = {}, collections.Counter()
            while time.time() - t0 < budget:
                ps = sample_params(rng, spec, dt) if spec.params else {}
                if ps is None:
                    continue
                x = sample_x(rng, spec, dt, ps)
                c["batches"] += 1
                for kind in acc.kinds(spec):
                    try:
                        got = evaluate(spec, dt, kind, x, ps)
                        err, true, bad = _with_alarm(8, score, spec, dt, kind, x, ps, got)
                    except _Timeout:
                        c["timeouts"] += 1
                        continue
                    except Exception as e:  # noqa: BLE001 (reported, not hidden)
                        c["exceptions"] += 1
                        fout.write(
                            json.dumps(
                                dict(
                                    type="exc",
                                    act=name,
                                    dtype=DTYPES[dt],
                                    kind=kind,
                                    params=ps,
                                    x=[repr(float(v)) for v in x],
                                    err=repr(e)[:300],
                                )
                            )
                            + "\n"
                        )
                        continue
                    c["points"] += len(x)
                    ok = [
                        i for i in range(len(x)) if true[i] is not None and not math.isnan(err[i])
                    ]
                    if ok:
                        i = max(ok, key=lambda j: err[j])
                        if err[i] > worst.get(kind, {"err": -1.0})["err"]:
                            worst[kind] = _record(
                                spec, dt, kind, x[i], ps, got[i], true[i], err[i], None, i
                            )
                    for rec in bad:
                        c["violations"] += 1
                        try:
                            rec["recheck_err"], rec["recheck_true"] = _with_alarm(
                                20, recheck, spec, dt, kind, float(rec["x"]), ps
                            )
                        except Exception as e:  # noqa: BLE001
                            rec["recheck_err"] = "failed: " + repr(e)[:100]
                        rec["type"] = "viol"
                        fout.write(json.dumps(rec) + "\n")
                fout.flush()
            for kind, rec in worst.items():
                fout.write(json.dumps(dict(rec, type="worst", **c)) + "\n")
            fout.flush()
            totals.update(c)
            log(
                f"{name:12s} {DTYPES[dt]} "
                + " ".join(f"{k}={v}" for k, v in sorted(c.items()))
                + " | "
                + " ".join(f"{k}:{v['err']:.3g}" for k, v in worst.items())
            )
    return dict(totals)


def _category(r) -> str:
    g, t = float(r["got"]), float(r["true"])
    if math.isnan(g) and not math.isnan(t):
        return "got_nan"
    if math.isinf(g) and not math.isinf(t):
        return "got_inf"
    if math.isinf(t) and not math.isinf(g):
        return "true_inf"
    if g == 0 and t != 0:
        return "got_zero"
    if g != 0 and t != 0 and math.copysign(1, g) != math.copysign(1, t):
        return "wrong_sign"
    return "inexact"


def report(path) -> str:
    """The worst point per (activation, dtype, kind) and the violations grouped by kind of
    error and the decade of x."""
    with open(path) as f:
        recs = [json.loads(line) for line in f]
    out = ["worst error per (activation, dtype, kind):"]
    for r in (r for r in recs if r["type"] == "worst"):
        tol = acc.tolerance(REGISTRY[r["act"]], r["kind"])
        flag = "ok " if r["err"] <= tol else "BAD"
        out.append(
            f"{flag} {r['act']:12s} {r['dtype']} {r['kind']:10s} {r['err']:.4g} ulp (tol {tol:g}) "
            f"x={r['x']} params={r['params']} got={r['got']} true={r['true']} "
            f"[points={r.get('points', 0)} violations={r.get('violations', 0)}]"
        )
    groups = collections.defaultdict(list)
    for r in (r for r in recs if r["type"] == "viol"):
        x = float(r["x"])
        dec = (
            "x=0"
            if x == 0
            else f"|x|~1e{10 * round(math.log10(abs(x)) / 10):d}"
            if math.isfinite(x)
            else "x=" + r["x"]
        )
        groups[(r["act"], r["dtype"], r["kind"], _category(r), dec)].append(r)
    out.append(f"\nviolations: {sum(map(len, groups.values()))} points in {len(groups)} groups")
    for k in sorted(groups):
        rs = sorted(groups[k], key=lambda r: -r["err"] if math.isfinite(r["err"]) else -1e308)
        out.append(f"{k} n={len(rs)} max={rs[0]['err']:.4g} recheck={rs[0].get('recheck_err')}")
        out += [
            f"    x={r['x']} params={r['params']} got={r['got']} true={r['true']}" for r in rs[:3]
        ]
    exc = collections.Counter(
        (r["act"], r["dtype"], r["kind"], r["err"][:80]) for r in recs if r["type"] == "exc"
    )
    out.append(f"\nexceptions: {sum(exc.values())}")
    out += [f"{v} {k}" for k, v in exc.most_common()]
    return "\n".join(out)


def fixed(names, seed: int, draws: int, kinds=None) -> list:
    """Scores of ``draws`` parameter sets (and their x, and |x|) per activation and dtype
    from ``seed``: rows of (name, dtype, kind, worst, mean, p99, violations, points)."""
    rows = []
    for name in names:
        spec = REGISTRY[name]
        rng = np.random.default_rng(seed)
        for dt in DTYPES:
            errs = collections.defaultdict(list)
            bad = collections.Counter()
            for _ in range(draws):
                ps = sample_params(rng, spec, dt) if spec.params else {}
                if ps is None:
                    continue
                x = sample_x(rng, spec, dt, ps)
                x = np.concatenate([x, np.abs(x)]).astype(dt)
                for kind in kinds or acc.kinds(spec):
                    got = evaluate(spec, dt, kind, x, ps)
                    err, true, b = score(spec, dt, kind, x, ps, got)
                    errs[kind] += [
                        e for e, t in zip(err, true) if t is not None and not math.isnan(e)
                    ]
                    bad[kind] += len(b)
            for kind, e in errs.items():
                e = np.asarray(e)
                rows.append(
                    (
                        name,
                        DTYPES[dt],
                        kind,
                        float(e.max()),
                        float(e.mean()),
                        float(np.quantile(e, 0.99)),
                        bad[kind],
                        e.size,
                    )
                )
    return rows


def _compare(rev: str, names, seed: int, draws: int, kinds) -> str:
    """``fixed`` at git revision ``rev`` (a temporary worktree, this file copied in) and
    in the working tree, side by side."""
    tmp = tempfile.mkdtemp(prefix="iglu_np_acc_")
    wt = os.path.join(tmp, "wt")
    subprocess.run(["git", "worktree", "add", "--detach", "-q", wt, rev], cwd=ROOT, check=True)
    try:
        os.makedirs(os.path.join(wt, "tools"), exist_ok=True)
        shutil.copy(__file__, os.path.join(wt, "tools", "accuracy_search.py"))
        args = [
            "--fixed-json",
            "--names",
            ",".join(names),
            "--seed",
            str(seed),
            "--draws",
            str(draws),
        ]
        if kinds:
            args += ["--kinds", ",".join(kinds)]
        env = dict(os.environ, IGLU_NP_CACHE_DIR=os.path.join(tmp, "cache"))
        r = subprocess.run(
            [sys.executable, os.path.join(wt, "tools", "accuracy_search.py"), *args],
            cwd=wt,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        old = {tuple(row[:3]): row for row in json.loads(r.stdout.splitlines()[-1])}
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", wt], cwd=ROOT)
        shutil.rmtree(tmp, ignore_errors=True)
    out = [
        f"{rev} (old) against the working tree (new): {draws} draws per dtype, seed {seed}; "
        "ulp: worst / mean / p99, violations"
    ]
    for row in fixed(names, seed, draws, kinds):
        o = old.get(tuple(row[:3]))
        ostr = "-" if o is None else f"{o[3]:.3g} / {o[4]:.3g} / {o[5]:.3g}, {o[6]}"
        out.append(
            f"{row[0]:12s} {row[1]} {row[2]:10s} old {ostr}  new {row[3]:.3g} / {row[4]:.3g} / "
            f"{row[5]:.3g}, {row[6]}  ({row[7]} points)"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600.0, help="time for the whole search")
    ap.add_argument("--names", default="", help="activations (comma-separated; default: all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="accuracy_search.jsonl", help="JSON lines, appended to")
    ap.add_argument("--report", metavar="JSONL", help="summarise a search's output and exit")
    ap.add_argument("--compare", metavar="REV", help="the same draws at REV and here, side by side")
    ap.add_argument("--draws", type=int, default=300, help="parameter sets per dtype (--compare)")
    ap.add_argument("--kinds", default="", help="kinds for --compare (default: all)")
    ap.add_argument("--fixed-json", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.report:
        print(report(a.report))
        return 0
    names = [n for n in a.names.split(",") if n] or list(iglu_np.ACTIVATIONS)
    unknown = sorted(set(names) - set(REGISTRY))
    if unknown:
        ap.error(f"unknown activations: {', '.join(unknown)}")
    kinds = [k for k in a.kinds.split(",") if k] or None
    if a.fixed_json:  # the other side of --compare
        print(json.dumps(fixed(names, a.seed, a.draws, kinds)))
        return 0
    if a.compare:
        print(_compare(a.compare, names, a.seed, a.draws, kinds))
        return 0
    t0 = time.time()
    with open(a.out, "a") as f:
        totals = search(a.seconds, names, a.seed, f)
    print(f"{totals} in {time.time() - t0:.0f} s; --report {a.out} for the summary")
    return 0


if __name__ == "__main__":
    sys.exit(main())
