"""Child process for the CUDA-simulator tests (``NUMBA_ENABLE_CUDASIM=1`` must be set
before numba.cuda is imported, so this runs in its own interpreter).

``python tests/gpu_helpers_sim.py OUT.npz [name ...]`` runs the Numba CUDA kernels of the
named activations (default: all) through the public API on simulator device arrays and
saves inputs and outputs; the parent test recomputes everything with the CPU ufuncs and
compares. Cases: odd-sized 1-D input with scalar parameters, a non-contiguous 2-D input
with a broadcast per-column parameter array, float16 data, ``out=``, and
``backward_params`` with scalar and array parameters.
"""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np


def param_values(p, n):
    """n in-domain values for parameter p: the default and its test values, cycled."""
    vals = [p.default] + [v for v in p.test_values if p.contains(v)]
    return np.array([vals[k % len(vals)] for k in range(n)], dtype=np.float64)


def x_points(n, seed):
    """n points mixing log-spaced magnitudes of both signs, +-0, +-inf and nan."""
    rng = np.random.default_rng(seed)
    mags = 10.0 ** rng.uniform(-30, 6, n)
    x = mags * rng.choice([-1.0, 1.0], n)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -3.19, 2.0]
    x[: min(n, len(special))] = special[: min(n, len(special))]
    return x


def cases(act):
    """(case id, callable(cuda) -> dict of arrays) for one activation."""
    names = act.param_names
    out = []

    def host(a):
        return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)

    for dt in (np.float32, np.float64):
        tag = np.dtype(dt).name
        # 101 > 4 x the simulator grid (3 blocks x 8 threads): the 1-D kernels run their
        # four-elements-per-thread loop and their remainder loop
        x1 = x_points(101, 1).astype(dt)
        g1 = np.linspace(-2.0, 3.0, 101).astype(dt)
        ps = {p.name: float(param_values(p, 2)[-1]) for p in act.params}
        if act.spec.check is not None and act.spec.check(**ps):
            ps = dict(act.defaults)  # a combination the spec rejects (e.g. min > max)

        def c1d(cuda, x1=x1, g1=g1, ps=ps, dt=dt):
            dx = cuda.to_device(x1)
            dg = cuda.to_device(g1)
            r = {"x": x1, "g": g1}
            r["fwd"] = host(act(dx, **ps))
            r["dx"] = host(act.dx(dx, **ps))
            r["bwd"] = host(act.backward(dx, dg, **ps))
            for p, v in act.dparams(dx, **ps).items():
                r["d_" + p] = host(v)
            for p, v in act.backward_params(dx, dg, **ps).items():
                r["sum_" + p] = host(v)
            o = cuda.device_array(x1.shape, dtype=dt)
            act(dx, out=o, **ps)
            r["fwd_out"] = host(o)
            gx, gp = act.backward_all(dx, dg, **ps)  # the one-pass kernel (scalar params)
            r["all_bwd"] = host(gx)
            for p, v in gp.items():
                r["all_sum_" + p] = host(v)
            for p in names:
                r["param_" + p] = np.asarray(ps[p])
            return r

        out.append((f"1d_{tag}", c1d))

        # 2-D, non-contiguous (every other column), per-column parameter arrays.
        base = x_points(5 * 14, 2).reshape(5, 14).astype(dt)
        gbase = np.linspace(-1.0, 1.0, 5 * 14).reshape(5, 14).astype(dt)
        pa = {p.name: param_values(p, 7).reshape(1, 7) for p in act.params}
        if act.spec.check is not None and any(
            act.spec.check(**{k: float(v[0, j]) for k, v in pa.items()}) for j in range(7)
        ):
            pa = {p.name: np.full((1, 7), p.default) for p in act.params}

        def c2d(cuda, base=base, gbase=gbase, pa=pa, dt=dt):
            dbase = cuda.to_device(base)
            dgb = cuda.to_device(gbase)
            dx = dbase[:, ::2]
            dg = dgb[:, 1::2]
            dps = {k: cuda.to_device(v.astype(dt)) for k, v in pa.items()}
            r = {"x": base[:, ::2], "g": gbase[:, 1::2]}
            r["fwd"] = host(act(dx, **dps))
            r["dx"] = host(act.dx(dx, **pa))  # host parameter arrays: moved to the device
            r["bwd"] = host(act.backward(dx, dg, **dps))
            for p, v in act.dparams(dx, **dps).items():
                r["d_" + p] = host(v)
            for p, v in act.backward_params(dx, dg, **dps).items():
                r["sum_" + p] = host(v)
            for p in names:
                r["param_" + p] = pa[p].astype(dt)
            return r

        out.append((f"2d_{tag}", c2d))

    x16 = x_points(23, 3)
    with np.errstate(over="ignore", under="ignore"):
        x16 = x16.clip(-6e4, 6e4).astype(np.float16)

    def c16(cuda, x16=x16):
        dx = cuda.to_device(x16)
        r = {"x": x16, "fwd": host(act(dx)), "dx": host(act.dx(dx))}
        return r

    out.append(("1d_float16", c16))
    return out


def main(argv):
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        raise SystemExit("run with NUMBA_ENABLE_CUDASIM=1")
    warnings.simplefilter("ignore")  # FP warnings from numpy scalars in discarded branches
    np.seterr(all="ignore")
    from numba import cuda

    import iglu_np

    path = argv[0]
    names = argv[1:] or sorted(iglu_np.ACTIVATIONS)
    res = {}
    for name in names:
        act = iglu_np.get(name)
        for cid, fn in cases(act):
            try:
                r = fn(cuda)
            except Exception as e:  # reported per case by the parent test
                res[f"{name}/{cid}/error"] = np.array(f"{type(e).__name__}: {e}")
                continue
            for k, v in r.items():
                res[f"{name}/{cid}/{k}"] = np.asarray(v)
    np.savez(path, **res)


if __name__ == "__main__":
    main(sys.argv[1:])
