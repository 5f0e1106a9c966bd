"""mpmath accuracy of the gated forms (:mod:`tests.accuracy` for ``act(gate) * up``).

The gate runs over the activation's test points and up over a few exact values of
several magnitudes and both signs; the reference is the spec's mpmath value (or
derivative) times up, exactly. The error is in units of the gated value's own scale:
``ulp(act(gate)) * |up|``, the unit in which the activation's bound holds, so that the
product's one rounding (at most half an ulp of the product, at most one such unit) adds
one: the bound is the activation's plus one.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np

from tests import accuracy as acc

KINDS = ("fwd", "dgate", "dup")
UPS = (1.0, -1.5, 0.75, 3.0, -0.3125, 1e-3, -40.0)


def _points(spec, dt, params, quick, npts=None):
    if npts is None:
        npts = dict(n_log=acc.QUICK["n_log"], n_lin=acc.QUICK["n_lin"]) if quick else {}
    gate = acc.x_points(spec, dt, params, **npts)
    gate = gate[np.isfinite(gate)]
    up = np.resize(np.asarray(UPS, dtype=dt), gate.shape)
    return gate, up


def errors(name: str, kind: str, dt, quick: bool = True, npts=None) -> tuple:
    """``(worst error, its gate, its up, bound)`` of ``kind`` ("fwd": the value, "dgate":
    ``up * act'(gate)``, "dup": ``act(gate)``) of ``<name>_glu`` in dtype ``dt`` at the
    activation's default parameters as ``dt`` holds them, from the fused loops (gate and
    up given)."""
    import iglu_np

    act = iglu_np.get(name)
    spec = act.spec
    g = act.glu
    params = acc.param_sets(spec, dt)[0]  # the defaults, rounded to dt
    gate, up = _points(spec, dt, params, quick, npts)
    kw = {p: dt(v) for p, v in params.items()}
    with np.errstate(all="ignore"):
        if kind == "fwd":
            got = g(gate, up, **kw)
        else:
            dg, du = g.backward(gate, np.ones_like(gate), up, **kw)
            got = dg if kind == "dgate" else du
    ref_kind = "dx" if kind == "dgate" else "fwd"
    true, scale = acc.reference(spec, ref_kind, gate, params)
    fi = np.finfo(dt)
    worst = (0.0, 0.0, 0.0)
    for i, (gv, t) in enumerate(zip(got, true)):
        u = 1.0 if kind == "dup" else float(up[i])
        want = t * mpmath.mpf(u)
        gf = float(gv)
        if mpmath.isnan(want) or mpmath.isinf(want):
            e = 0.0 if (math.isnan(gf) and mpmath.isnan(want)) or gf == float(want) else math.inf
        elif math.isnan(gf) or math.isinf(gf):
            e = math.inf
        else:
            s = abs(float(t)) if scale is None else max(abs(float(t)), abs(float(scale[i])))
            unit = max(acc._ulp(min(s, float(fi.max)), fi) * abs(u), float(fi.smallest_subnormal))
            e = float(abs(mpmath.mpf(gf) - want) / unit)
        if e > worst[0]:
            worst = (e, float(gate[i]), float(up[i]))
    bound = acc.tolerance(spec, "fwd" if kind != "dgate" else "dx") + 1.0
    return (*worst, bound)


def rows(names, n_log: int, n_lin: int) -> list:
    """The sweep's rows (``tools/accuracy_sweep.py --gated``): per activation, kind and
    dtype the worst error, where, and the bound."""
    out = []
    for name in names:
        for kind in KINDS:
            for dt in (np.float32, np.float64):
                e, g, u, b = errors(name, kind, dt, npts=dict(n_log=n_log, n_lin=n_lin))
                out.append(
                    {
                        "form": f"{name}_glu",
                        "kind": kind,
                        "dtype": np.dtype(dt).name,
                        "worst": min(e, 1e300),
                        "gate": g,
                        "up": u,
                        "bound": b,
                    }
                )
    return out
