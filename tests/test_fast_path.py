"""The CPU fast path (njit/prange loops, iglu_np.backends.cpu_fast) against the ufuncs.

Both compile the same scalar kernels without fastmath, so results must agree bit for bit:
on the accuracy sweep's points (so tests/accuracy.py's bounds carry over), threaded vs
single-thread, odd sizes, and out= aliasing. Layouts the fast path does not take
(strides, broadcasting, float16, partial overlap) must still give the ufunc's answer.
"""
import numpy as np
import pytest

import iglu_np
from iglu_np.backends import cpu_fast

from . import accuracy as acc

QUICK = ["iglu", "iglu_approx", "z_gate"]
ALL = list(iglu_np.ACTIVATIONS)
DT = [np.float32, np.float64]
IDS = ["f32", "f64"]


@pytest.fixture(autouse=True)
def fast_path_at_every_size():
    # small arrays normally take the ufunc (no njit compile); here the loops are under test
    old = cpu_fast.MIN_SIZE
    cpu_fast.set_min_size(0)
    yield
    cpu_fast.set_min_size(old)


@pytest.fixture
def threads_always():
    old = cpu_fast.THRESHOLD
    cpu_fast.set_threshold(0)
    yield
    cpu_fast.set_threshold(old)


@pytest.fixture
def threads_never():
    old = cpu_fast.THRESHOLD
    cpu_fast.set_threshold(1 << 62)
    yield
    cpu_fast.set_threshold(old)


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    it = np.uint32 if a.dtype == np.float32 else np.uint64
    # identical bits (so +0/-0 differ), except any NaN payload
    diff = (a.view(it) != b.view(it)) & ~(np.isnan(a) & np.isnan(b))
    assert not diff.any(), f"first mismatch at {np.argwhere(diff)[0]}: {a[diff][:3]} vs {b[diff][:3]}"


def _fast_as_ufunc(act, kind):
    """A ufunc-like callable that goes through the public (fast) path."""

    def f(x, *pv):
        params = dict(zip(act.param_names, pv))
        if kind == "fwd":
            return act(x, **params)
        if kind == "dx":
            return act.dx(x, **params)
        return act._run(kind, (x,), params, None)

    return f


def _check_sweep(name, dtype):
    act = iglu_np.get(name)
    spec = act.spec
    for kind in acc.kinds(spec):
        fast = _fast_as_ufunc(act, kind)
        for params in acc.param_sets(spec, dtype):
            x = acc.x_points(spec, dtype, params)
            pv = [dtype(params[p]) for p in spec.param_names]
            with np.errstate(all="ignore"):
                want = act._ufunc(kind)(x, *pv)
            got = fast(x, *pv)
            _same(got, want)
            assert cpu_fast._flat_in(x, np.dtype(dtype), x.shape) is not None  # took fast path


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("name", QUICK)
def test_sweep_points_match_ufunc(name, dtype):
    _check_sweep(name, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("name", ALL)
def test_sweep_points_match_ufunc_all(name, dtype):
    _check_sweep(name, dtype)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_iglu_accuracy_through_fast_path(dtype):
    spec = iglu_np.ACTIVATIONS["iglu"].spec
    for kind in acc.kinds(spec):
        r = acc.measure(spec, kind, dtype, ufunc=_fast_as_ufunc(iglu_np.iglu, kind))
        assert r.worst <= acc.tolerance(spec, kind), (kind, str(r))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("n", [1, 7, 63, 64, 65, 4095, 4097, 100_003])
def test_threaded_equals_single_thread(n, dtype, request):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 10).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    a = iglu_np.iglu
    res = []
    for fix in ("threads_never", "threads_always"):
        request.getfixturevalue(fix)
        res.append((a(x, sigma=0.7), a.dx(x, sigma=0.7), a.backward(x, g, sigma=0.7),
                    a.backward_params(x, g, sigma=0.7)["sigma"]))
    for u, v in zip(*res):
        _same(u, v)
    _same(res[0][0], a.ufunc(x, dtype(0.7)))
    _same(res[0][2], a.backward.ufunc(x, g, dtype(0.7)))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_backward_params_matches_ufunc_sum(dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((37, 129)) * 3).astype(dtype)
    g = rng.standard_normal(x.shape).astype(dtype)
    got = iglu_np.iglu.backward_params(x, g, sigma=1.3)["sigma"]
    full = iglu_np.iglu.dparams.ufuncs["sigma"](x.astype(np.float64), 1.3) * g
    assert got.shape == () and got.dtype == dtype
    np.testing.assert_allclose(float(got), full.sum(), rtol=1e-5 if dtype == np.float32 else 1e-12)
    # an empty array reduces to 0
    e = np.empty(0, dtype)
    assert float(iglu_np.iglu.backward_params(e, e)["sigma"]) == 0.0


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_layouts_outside_the_fast_path(dtype):
    rng = np.random.default_rng(2)
    base = (rng.standard_normal((64, 33)) * 4).astype(dtype)
    u = iglu_np.iglu.ufunc
    strided = base[:, ::2]
    _same(iglu_np.iglu(strided, sigma=0.5), u(strided, dtype(0.5)))
    fortran = np.asfortranarray(base)
    _same(iglu_np.iglu(fortran), u(fortran, dtype(1.0)))
    col = (np.abs(rng.standard_normal((64, 1))) + 0.1).astype(dtype)  # broadcast parameter
    _same(iglu_np.iglu(base, sigma=col), u(base, col))
    full = (np.abs(rng.standard_normal(base.shape)) + 0.1).astype(dtype)  # same-shape parameter
    _same(iglu_np.iglu(base, sigma=full), u(base, full))
    _same(iglu_np.iglu(base, sigma=full.astype(np.float64)), u(base, full.astype(np.float64), dtype=dtype))
    bp = iglu_np.iglu.backward_params(base, base, sigma=col)["sigma"]
    assert bp.shape == col.shape
    h = base.astype(np.float16)
    assert iglu_np.iglu(h).dtype == np.float16
    _same(iglu_np.iglu(base[0, 0]), u(base[0, 0], dtype(1.0)))  # 0-d


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_out_and_aliasing(dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(1000) * 4).astype(dtype)
    want = iglu_np.iglu.ufunc(x, dtype(2.0))
    o = np.empty_like(x)
    r = iglu_np.iglu(x, sigma=2.0, out=o)
    assert r is o
    _same(o, want)
    y = x.copy()
    assert iglu_np.iglu(y, sigma=2.0, out=y) is y  # in place
    _same(y, want)
    # partial overlap: numpy's buffered semantics, like the ufunc
    z = x.copy()
    zz = x.copy()
    iglu_np.iglu(z[:-1], out=z[1:])
    iglu_np.iglu.ufunc(zz[:-1], dtype(1.0), out=zz[1:])
    _same(z, zz)
    g = rng.standard_normal(1000).astype(dtype)
    gg = g.copy()
    iglu_np.iglu.backward(x, gg, out=gg)
    _same(gg, iglu_np.iglu.backward.ufunc(x, g, dtype(1.0)))
    with pytest.raises(ValueError):
        iglu_np.iglu(x, out=np.empty(999, dtype))
    with pytest.raises(TypeError):
        iglu_np.iglu(x, out=np.empty(1000, np.int32))


def test_nd_shapes_and_params_as_numpy_scalars():
    x = np.linspace(-5, 5, 2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    r = iglu_np.iglu(x, sigma=np.float64(0.3))
    assert r.shape == x.shape and r.dtype == np.float32
    _same(r, iglu_np.iglu.ufunc(x, np.float32(0.3)))
    _same(iglu_np.iglu(x, sigma=np.array(0.3)), r)


def test_small_calls_are_tiered():
    """Small arrays: the first WARM_CALLS calls run the ufunc (no njit compile), later
    ones the compiled loop; both give the same bits."""
    act = iglu_np.get("iglu")
    old = cpu_fast.MIN_SIZE
    cpu_fast.set_min_size(1 << 20)
    try:
        act._plans.pop("dxf", None)
        act._calls.pop("dxf", None)
        x = np.linspace(-50, 50, 301).astype(np.float32)
        first = act.dx(x, sigma=0.7)
        for _ in range(cpu_fast.WARM_CALLS - 1):
            act.dx(x, sigma=0.7)
        assert "dxf" not in act._plans
        hot = act.dx(x, sigma=0.7)
        assert "dxf" in act._plans
        _same(first, hot)
        _same(hot, act.dx.ufunc(x, np.float32(0.7)))
    finally:
        cpu_fast.set_min_size(old)
