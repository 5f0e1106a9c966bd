"""mpmath accuracy harness (scipy.special's ``FuncData`` idea, for activation specs).

For a spec, a kernel kind (``fwd``, ``dx`` or ``d_<param>``) and a dtype it evaluates the
compiled ufunc and the spec's mpmath reference at the same exact inputs (x and parameters
as represented in that dtype) and reports the error in ulp of the output dtype:

    err = |got - true| / max(ulp(true), ulp(scale), tiny)

``scale`` is the spec's "largest term" yardstick for kinds whose true value cancels to
(near) zero; ``tiny`` is the absolute floor where the true value underflows: in
:func:`measure` (the sweep) the subnormal spacing, so a subnormal result counts its
spacings like the README's bounds (a 0 for 3e-41 is 2e4 ulp, not 0.003 of the smallest
normal number); ``ulp_errors``' default is the smallest normal number. NaN must give NaN;
infinite true values must be hit exactly. Run ``python -m tests.accuracy`` for the per-activation table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mpmath
import numpy as np

DPS = 60
FWD_ULP = 4.0
DER_ULP = 8.0


def tolerance(spec, kind: str) -> float:
    default = FWD_ULP if kind == "fwd" else DER_ULP
    return float(spec.tolerances.get(kind, default))


def special_values(spec, params: dict) -> list:
    """The spec's special points (kinks, thresholds, roots), the callable ones evaluated at
    ``params``; those that do not exist for these parameters (None) left out."""
    vals = (s(params) if callable(s) else s for s in spec.special_points)
    return [v for v in vals if v is not None]


def x_points(spec, dtype, params: dict, n_log: int = 110, n_lin: int = 97) -> np.ndarray:
    """±logspace(1e-30, x_max), a linear grid on [-12, 12], ±0, ±inf, NaN-free, and the
    spec's special points with their neighbours (kinks, thresholds)."""
    lo, hi = spec.x_range
    xmax = min(abs(lo), abs(hi), float(np.finfo(dtype).max))
    mags = np.logspace(-30, math.log10(xmax), n_log)
    pts = [mags, -mags, np.linspace(-12, 12, n_lin), [0.0, -0.0, np.inf, -np.inf]]
    sp = []
    for v in map(dtype, special_values(spec, params)):
        sp += [v, np.nextafter(v, dtype(np.inf)), np.nextafter(v, dtype(-np.inf))]
    pts.append(np.array(sp, dtype=np.float64))
    x = np.concatenate([np.asarray(p, dtype=np.float64).ravel() for p in pts]).astype(dtype)
    x = x[np.isinf(x) | ((x >= lo) & (x <= hi))]
    # distinct by bit pattern (keeps both signed zeros)
    _, idx = np.unique(x.view(np.uint32 if dtype == np.float32 else np.uint64), return_index=True)
    return x[np.sort(idx)]


def param_sets(spec, dtype) -> list:
    """Defaults, each parameter's test values (others at default) and its domain edges,
    keeping only valid combinations; values rounded to ``dtype``."""
    base = spec.defaults
    sets = [dict(base)]
    for p in spec.params:
        vals = list(p.test_values)
        if math.isfinite(p.lo):
            vals.append(p.lo + (max(1e-3, abs(p.lo) * 1e-3) if p.lo_open else 0.0))
        if math.isfinite(p.hi):
            vals.append(p.hi - (max(1e-3, abs(p.hi) * 1e-3) if p.hi_open else 0.0))
        for v in vals:
            d = dict(base)
            with np.errstate(over="ignore"):  # a test value beyond float32's range: inf
                d[p.name] = float(dtype(v))
            if not p.contains(d[p.name]):
                continue
            if spec.check is not None and spec.check(**d):
                continue
            if d not in sets:
                sets.append(d)
    return [{k: float(dtype(v)) for k, v in s.items()} for s in sets]


def _thin(spec, psets, k):
    """The default set plus, per parameter, its first k varied values (edges come last in
    param_sets, so keep the last one too)."""
    base = psets[0]
    keep = [base]
    for p in spec.param_names:
        varied = [s for s in psets[1:] if s[p] != base[p]]
        for s in varied[: k - 1] + varied[-1:]:
            if s not in keep:
                keep.append(s)
    return keep


def _mpf(v):
    return mpmath.mpf(float(v))


def reference(spec, kind: str, x: np.ndarray, params: dict, dps: int = DPS, adaptive: bool = False):
    """(true values as mpf list, scale as mpf list or None).

    ``adaptive`` adds 3 digits per decade of |x| away from 1 (and of each parameter), for
    sweeps out to the dtype's extremes, where a reference such as 1/2 + atan(x)/pi cancels
    to ~1/x and needs more than 60 digits."""
    if kind == "fwd":
        fn, skey = spec.ref, "f"
    elif kind == "dx":
        fn, skey = spec.ref_dx, "dx"
    else:
        pname = kind[2:]
        fn, skey = spec.ref_dparams[pname], pname
    sfn = spec.scales.get(skey)
    pv = [_mpf(params[p]) for p in spec.param_names]
    vals, scales = [], [] if sfn else None

    def _decades(v):
        v = abs(float(v))
        return 0 if v == 0 or math.isinf(v) else int(abs(math.log10(v)))

    extra_p = sum(_decades(params[p]) for p in spec.param_names)
    for xi in x:
        d = dps + 3 * (_decades(xi) + extra_p) if adaptive else dps
        with mpmath.workdps(d):
            mp = mpmath.mp
            if np.isnan(xi):
                vals.append(mpmath.nan)
                continue
            xm = _mpf(xi)
            pv = [_mpf(params[p]) for p in spec.param_names]
            try:
                vals.append(fn(mp, xm, *pv))
                if sfn:
                    scales.append(sfn(mp, xm, *pv))
            except OverflowError:
                if not adaptive:
                    raise
                # mpmath's erfc series check overflows beyond |x| ~ 1e154: no reference
                vals.append(None)
                if sfn:
                    scales.append(None)
    return vals, scales


@dataclass
class Result:
    worst: float
    x: float
    got: float
    true: float
    n: int

    def __str__(self):
        return f"{self.worst:.3g} ulp at x={self.x!r} (got {self.got!r}, true {self.true!r}, n={self.n})"


def _ulp(v: float, fi) -> float:
    """The spacing of ``fi``'s dtype at magnitude ``v`` (finite, up to the dtype's max;
    ``np.spacing`` overflows at the largest binade's top)."""
    if v == 0.0:
        return float(fi.smallest_subnormal)
    e = math.frexp(v)[1]  # v = m * 2**e, 0.5 <= m < 1
    return max(math.ldexp(1.0, e - 1 - fi.nmant), float(fi.smallest_subnormal))


def ulp_errors(got: np.ndarray, true: list, scale, dtype, subnormal: bool = False) -> np.ndarray:
    """Errors in ulp of ``dtype`` (or of the ``np.finfo`` given, e.g. ``ml_dtypes.finfo``
    of bfloat16); the absolute floor is the smallest normal number, or with
    ``subnormal=True`` the subnormal spacing (true ulp down to the smallest subnormal)."""
    fi = dtype if isinstance(dtype, np.finfo) else np.finfo(dtype)
    # the overflow threshold, max + ulp(max)/2 (exact: mpf's default 53 bits rounded the
    # old max * (1 + eps/2) to max itself, so that max counted as an overflow)
    big = mpmath.ldexp(1, int(fi.maxexp)) - mpmath.ldexp(1, int(fi.maxexp) - int(fi.nmant) - 2)
    errs = np.zeros(len(true))
    for i, (g, t) in enumerate(zip(got, true)):
        g = float(g)
        if t is None:  # no reference at this point (see reference(adaptive=True))
            continue
        if mpmath.isnan(t):
            errs[i] = 0.0 if math.isnan(g) else math.inf
            continue
        if math.isnan(g):
            errs[i] = math.inf
            continue
        tf = float(t) if abs(t) < big else math.copysign(math.inf, float(t))
        if math.isinf(tf):
            errs[i] = 0.0 if g == tf else math.inf
            continue
        if math.isinf(g):
            errs[i] = math.inf
            continue
        unit = max(_ulp(abs(tf), fi), float(fi.smallest_subnormal if subnormal else fi.tiny))
        if scale is not None:
            s = abs(float(scale[i]))
            if math.isfinite(s):
                unit = max(unit, _ulp(min(s, float(fi.max)), fi))
            elif mpmath.isfinite(scale[i]):
                # terms beyond the dtype's range (xatlu dx, alpha = max): their spacing
                # continued past the largest binade, not max's
                e = int(mpmath.floor(mpmath.log(abs(scale[i]), 2)))
                unit = max(unit, float(mpmath.ldexp(1, e - int(fi.nmant))))
        errs[i] = float(abs(mpmath.mpf(g) - t) / unit)
    return errs


# The default test run samples fewer points and parameter sets (every tenth-ish point of
# the full grid, the defaults, each parameter's first test value and its domain edges);
# `pytest -m slow` and `python -m tests.accuracy` run the full sweep.
QUICK = dict(n_log=37, n_lin=33, max_values_per_param=2)


def measure(spec, kind: str, dtype, ufunc=None, quick: bool = False) -> Result:
    """Worst ulp error of ``kind`` over all test points and parameter sets."""
    import iglu_np

    act = iglu_np.get(spec.name)
    if ufunc is None:
        ufunc = act._ufunc(kind)
    worst = Result(0.0, 0.0, 0.0, 0.0, 0)
    n = 0
    psets = param_sets(spec, dtype)
    npts = {}
    if quick:
        npts = dict(n_log=QUICK["n_log"], n_lin=QUICK["n_lin"])
        psets = _thin(spec, psets, QUICK["max_values_per_param"])
    for params in psets:
        x = x_points(spec, dtype, params, **npts)
        pv = [dtype(params[p]) for p in spec.param_names]
        with np.errstate(all="ignore"):
            got = ufunc(x, *pv)
        assert got.dtype == dtype, f"{spec.name}.{kind}: {got.dtype} != {dtype}"
        true, scale = reference(spec, kind, x, params)
        errs = ulp_errors(got, true, scale, dtype, subnormal=True)
        n += len(x)
        i = int(np.argmax(errs))
        if errs[i] > worst.worst or n == len(x):  # first parameter set, or a new worst
            worst = Result(float(errs[i]), float(x[i]), float(got[i]), float(true[i]), 0)
            worst.params = params
    worst.n = n
    return worst


def kinds(spec) -> list:
    return ["fwd", "dx"] + ["d_" + p for p in spec.param_names]


def table(names=None) -> str:
    """Markdown table of worst-case ulp per activation and kind, float32 and float64."""
    import iglu_np

    rows = ["| activation | kind | float32 ulp | float64 ulp |", "|---|---|---|---|"]
    for name, act in iglu_np.ACTIVATIONS.items():
        if names and name not in names:
            continue
        for k in kinds(act.spec):
            r32 = measure(act.spec, k, np.float32)
            r64 = measure(act.spec, k, np.float64)
            rows.append(f"| {name} | {k} | {r32.worst:.2f} | {r64.worst:.2f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    import sys

    print(table(sys.argv[1:] or None))
