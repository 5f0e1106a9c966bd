"""Activation.backward_all: grad_x and the parameter gradients from one read of x and
grad_out, equal to backward() and backward_params() (the CPU's fused loop uses the same
per-element values and block sums, so bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest

import iglu_np
from iglu_np._spec import REGISTRY

WITH_PARAMS = sorted(n for n, s in REGISTRY.items() if s.params)
# By default one activation without a bulk domain (iglu, both dtypes), one with (gelu_a,
# whose loops the tests below compile too) and one with two parameters (hardtanh), one
# dtype each: each case compiles an activation's fused and two-pass loops, one-thread and
# threaded, on a cold cache (softplus's: 20 s a dtype, xielu's over 30 s); the rest are slow.
REPRESENTATIVE = {
    ("iglu", "float32"),
    ("iglu", "float64"),
    ("gelu_a", "float32"),
    ("hardtanh", "float64"),
}


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize(
    "name,dtype",
    [
        (n, d) if (n, d) in REPRESENTATIVE else pytest.param(n, d, marks=pytest.mark.slow)
        for n in WITH_PARAMS
        for d in ("float32", "float64")
    ],
)
def test_backward_all_equals_two_passes(name, dtype):
    act = iglu_np.get(name)
    rng = np.random.default_rng(7)
    dt = np.dtype(dtype).type
    # below the fast path's minimum, single-thread loop, threaded loop; Fortran order
    for shape, order in (((37,), "C"), ((5000,), "C"), ((300, 700), "C"), ((64, 80), "F")):
        x = np.asarray(rng.standard_normal(shape) * 4, dtype=dt, order=order)
        g = np.asarray(rng.standard_normal(shape), dtype=dt, order=order)
        gx, gp = act.backward_all(x, g)
        assert _same(gx, act.backward(x, g)), (name, dt, shape)
        want = act.backward_params(x, g)
        assert set(gp) == set(want)
        for p in want:
            assert _same(gp[p], want[p]), (name, p, dt, shape, gp[p], want[p])


def test_backward_all_out_params_and_fallbacks():
    act = iglu_np.get("iglu")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3000)).astype(np.float32)
    g = rng.standard_normal((4, 3000)).astype(np.float32)
    out = np.empty_like(x)
    gx, gp = act.backward_all(x, g, out=out, sigma=2.5)
    assert gx is out and _same(out, act.backward(x, g, sigma=2.5))
    assert _same(gp["sigma"], act.backward_params(x, g, sigma=2.5)["sigma"])
    # a per-row parameter takes the two-pass path: same results, parameter-shaped gradient
    s = np.linspace(0.5, 2.0, 4, dtype=np.float32).reshape(4, 1)
    gx, gp = act.backward_all(x, g, sigma=s)
    assert _same(gx, act.backward(x, g, sigma=s)) and gp["sigma"].shape == (4, 1)
    assert _same(gp["sigma"], act.backward_params(x, g, sigma=s)["sigma"])
    # out overlapping grad_out: the buffered two-pass path gives numpy's answer
    b = rng.standard_normal(6001)
    gx, _ = act.backward_all(b[:-1], b[1:], out=b[1:])
    assert np.isfinite(gx).all()
    # no parameters: an empty dict
    gx, gp = iglu_np.relu.backward_all(x, g)
    assert gp == {} and _same(gx, iglu_np.relu.backward(x, g))
    with pytest.raises(ValueError, match="sigma"):
        act.backward_all(x, g, sigma=-1.0)


def test_two_passes_read_every_operand_before_out_is_written(monkeypatch):
    # out may be grad_out itself in memory no check can see (torch, Numba device arrays),
    # so the parameter gradients are taken before the backward pass writes out
    from iglu_np import backends

    order = []
    real_run, real_bp = backends.run, backends.backward_params
    monkeypatch.setattr(backends, "run", lambda *a, **k: order.append("bwd") or real_run(*a, **k))
    monkeypatch.setattr(
        backends, "backward_params", lambda *a, **k: order.append("params") or real_bp(*a, **k)
    )
    x = np.linspace(-3, 3, 64)
    g = np.cos(x)
    want = iglu_np.iglu.backward_params(x, g, sigma=1.5)["sigma"]
    out = g.copy()
    gx, gp = backends.backward_all(
        iglu_np.iglu._p, (memoryview(x), memoryview(out)), {"sigma": 1.5}, out
    )
    assert order == ["params", "bwd"]
    np.testing.assert_allclose(gp["sigma"], want, rtol=1e-12)
    np.testing.assert_array_equal(gx, iglu_np.iglu.backward(x, g, sigma=1.5))


BULK_PARAMS = sorted(
    n for n, s in REGISTRY.items() if s.params and set(s.param_names) <= set(s.bulk)
)


# One activation by default (each compiles its reductions on a cold cache), all with -m slow.
@pytest.mark.parametrize(
    "name", [n if n == "gelu_a" else pytest.param(n, marks=pytest.mark.slow) for n in BULK_PARAMS]
)
def test_reductions_mend_elements_outside_the_bulk_domain(name):
    """The reductions run the bulk kernels and recompute the elements outside their
    domain with the exact ones (one by one, per DOMAIN_CHUNK): here far tails and infinities
    sit in several DOMAIN_BLOCKs and DOMAIN_CHUNKs of both reduction blocks, alone and in runs. The
    references are the exact ufuncs (grad_x) and a float64 sum of grad_out times the
    exact elementwise derivative (the gradients), not the fused loops themselves."""
    act = iglu_np.get(name)
    spec = REGISTRY[name]
    rng = np.random.default_rng(3)
    n = 20000  # > REDUCE_BLOCK: two reduction blocks and a partial one
    for dt in (np.float32, np.float64):
        x = (rng.standard_normal(n) * 4).astype(dt)
        far = np.array([-1e30, 1e30, -np.inf, np.inf, -60.0, 40.0, -700.0, 1e4], dtype=dt)
        pos = np.r_[5, 17, 18, 19, 300, 4095, 4096, 4100, 9000, 9001, 9016, 12288, 19999]
        # a run: more than MAX_OUTSIDE in a DOMAIN_BLOCK
        pos = np.r_[pos, np.arange(600, 600 + 20)]
        x[pos] = far[np.arange(pos.size) % far.size]
        g = rng.standard_normal(n).astype(dt)
        params = {p: spec.defaults[p] for p in spec.param_names}
        gx, gp = act.backward_all(x, g, **params)
        with np.errstate(all="ignore"):
            want_x = g * act._ufunc("dx")(x, *[dt(v) for v in params.values()])
        assert np.array_equal(gx, want_x, equal_nan=True), name
        bp = act.backward_params(x, g, **params)
        for p in spec.param_names:
            with np.errstate(all="ignore"):
                d = act._ufunc("d_" + p)(x, *[dt(v) for v in params.values()])
                terms = (g * d).astype(np.float64)
            want = terms.sum()
            tol = 1e-6 * np.abs(terms).sum() + 1e-300
            assert gp[p] == bp[p], (name, p, gp[p], bp[p])
            assert np.isfinite(want) == np.isfinite(float(gp[p])), (name, p, gp[p], want)
            if np.isfinite(want):
                assert abs(float(gp[p]) - want) <= tol, (name, p, dt, float(gp[p]), want)


@pytest.mark.parametrize("name", ["gelu_a", "iglu", pytest.param("xielu", marks=pytest.mark.slow)])
def test_strided_and_broadcast_operands_take_the_reductions(name, monkeypatch):
    """Strided, reversed and broadcast operands are copied to one layout and reduced by
    the loops (the ufunc + numpy sum path is several times slower): the same gradients as
    the loops give on those copies, close to a float64 sum of the exact elementwise terms;
    backward_all with out= a strided view of grad_out itself reads grad_out first."""
    from iglu_np.backends.cpu import backend as cpu_backend

    act = iglu_np.get(name)
    rng = np.random.default_rng(11)
    for dt in (np.float32, np.float64):
        X = (rng.standard_normal((64, 200)) * 3).astype(dt)
        G = rng.standard_normal((64, 200)).astype(dt)
        cases = [
            (X[:, ::2], G[:, ::2]),
            (X[::-1, ::-1], G[::-1, ::-1]),
            (X, np.asfortranarray(G)),
            (X, G[:1]),
            (X[:, ::2], np.asarray(G[0, 0])),
        ]
        for x, g in cases:
            xr = np.copy(x, order="K")
            gr = np.empty_like(xr)
            gr[...] = g
            want = act.backward_params(xr, gr)
            want_x = act.backward(xr, gr)
            with monkeypatch.context() as m:

                def boom(*a, **k):
                    raise AssertionError("took the ufunc path")

                m.setattr(cpu_backend, "_call_ufunc", boom)
                got = act.backward_params(x, g)
                gx, gp = act.backward_all(x, g)
            with np.errstate(all="ignore"):
                d = act.dparams(xr)
            for p in want:
                assert got[p] == want[p] and gp[p] == want[p], (name, p, got[p], gp[p], want[p])
                terms = (gr * d[p]).astype(np.float64)
                assert abs(float(got[p]) - terms.sum()) <= 1e-5 * np.abs(terms).sum(), (name, p)
            assert np.array_equal(gx, want_x), name
        # out= a strided view of grad_out: the gradients of the original grad_out
        G2 = G.copy()
        x, g = X[:, ::2], G2[:, ::2]
        want_x = act.backward(x.copy(), g.copy())
        want = act.backward_params(x.copy(), g.copy())
        gx, gp = act.backward_all(x, g, out=g)
        assert gx is g and np.array_equal(g, want_x), name
        assert all(gp[p] == want[p] for p in want), name
