"""Dask backend: lazy, chunk-by-chunk results equal to numpy bit for bit."""

import pickle

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
import dask  # noqa: E402
from dask.callbacks import Callback  # noqa: E402

import iglu_np  # noqa: E402
from iglu_np import _params  # noqa: E402

from .bitwise import assert_same_bits  # noqa: E402

NAMES = list(iglu_np.ACTIVATIONS)
WITH_PARAMS = [n for n in NAMES if iglu_np.ACTIVATIONS[n].params]
# The backend is generic: iglu (one parameter) and the activation with the most parameters
# run by default; the sweeps over every activation are opt-in (-m slow), as they mostly
# measure Numba compile time (the kernels themselves are tested in test_api/test_accuracy).
_MOST = max(WITH_PARAMS, key=lambda n: len(iglu_np.ACTIVATIONS[n].params))
REPRESENTATIVE = ["iglu"] + ([_MOST] if _MOST != "iglu" else [])


def _sweep(names):
    return [n if n in REPRESENTATIVE else pytest.param(n, marks=pytest.mark.slow) for n in names]


SPECIALS = [
    -np.inf,
    -1e30,
    -50.0,
    -3.0,
    -1.0,
    -1e-30,
    -0.0,
    0.0,
    1e-30,
    0.5,
    1.0,
    3.0,
    50.0,
    1e30,
    np.inf,
    np.nan,
]


def _x(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    v = np.concatenate([SPECIALS, rng.standard_normal(n - len(SPECIALS)) * 4])
    with np.errstate(over="ignore"):  # 1e30 -> inf in float16, deliberately
        return rng.permutation(v).astype(dtype)


def assert_bitwise(lazy, ref):
    assert isinstance(lazy, da.Array)
    got = lazy.compute(scheduler="sync")
    assert got.dtype == lazy.dtype and got.shape == lazy.shape
    assert_same_bits(got, ref)


class CountTasks(Callback):
    """Counts tasks run by dask's local schedulers while active."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def _pretask(self, key, dsk, state):
        self.n += 1


def _valid_values(act, pname):
    """In-domain values of one parameter (others at their defaults)."""
    p = act._p.by_name[pname]
    out = []
    for v in (p.default, *p.test_values):
        try:
            _params.values(act._p, {pname: float(v)})
        except (ValueError, TypeError):
            continue
        out.append(float(v))
    return out


# ------------------------------------------------------------------ elementwise kinds
@pytest.mark.parametrize("name", _sweep(NAMES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_kinds_equal_numpy_bitwise(name, dtype):
    _check_all_kinds(name, dtype, 128)  # ragged last chunk


@pytest.mark.parametrize("name", _sweep(NAMES))
@pytest.mark.parametrize("chunks", [1000, 333])  # one chunk; another ragged split
def test_all_kinds_other_chunkings(name, chunks):
    _check_all_kinds(name, np.float32, chunks)


def _check_all_kinds(name, dtype, chunks):
    act = iglu_np.ACTIVATIONS[name]
    xn = _x(1000, dtype)
    gn = _x(1000, dtype, seed=1)
    x, g = da.from_array(xn, chunks=chunks), da.from_array(gn, chunks=chunks)
    assert_bitwise(act(x), act(xn))
    assert_bitwise(act.dx(x), act.dx(xn))
    assert_bitwise(act.backward(x, g), act.backward(xn, gn))
    dp, dpn = act.dparams(x), act.dparams(xn)
    assert dp.keys() == dpn.keys() == set(act.param_names)
    for p in dp:
        assert_bitwise(dp[p], dpn[p])
    r = act(x)
    assert r.chunks == x.chunks


def test_chunks_equal_the_whole_array_whichever_cpu_loop_runs_each(monkeypatch):
    """float32 softplus d_beta at x = NaN: the ufunc (chunks) gives +NaN, the njit loop
    (whole array) -NaN (bitwise.py says why); every other bit is the same."""
    from iglu_np.backends.cpu import tiers

    xn = _x(1000, np.float32)
    run = lambda x: iglu_np.softplus.dparams(x)["beta"]  # noqa: E731
    loops = tiers._loops()
    monkeypatch.setattr(loops, "plans", {})  # no loop planned yet: small calls take the ufunc
    monkeypatch.setattr(tiers, "_calls", {})
    monkeypatch.setattr(tiers, "MIN_SIZE", 1 << 62)
    chunked = run(da.from_array(xn, chunks=128))
    got = chunked.compute(scheduler="sync")
    assert not loops.plans
    monkeypatch.setattr(tiers, "MIN_SIZE", 0)  # the whole array: the njit loop
    whole = run(xn)
    assert loops.plans
    assert_same_bits(got, whole)


def test_one_element_chunks():
    xn = _x(40, np.float64)
    x = da.from_array(xn, chunks=1)
    assert_bitwise(iglu_np.iglu(x, sigma=0.3), iglu_np.iglu(xn, sigma=0.3))
    assert_bitwise(iglu_np.iglu.backward(x, x), iglu_np.iglu.backward(xn, xn))


@pytest.mark.parametrize("name", _sweep(WITH_PARAMS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_2d_chunks_per_row_params(name, dtype):
    act = iglu_np.ACTIVATIONS[name]
    rows, cols = 37, 23
    xn = _x(rows * cols, dtype).reshape(rows, cols)
    gn = _x(rows * cols, dtype, seed=2).reshape(rows, cols)
    x = da.from_array(xn, chunks=(10, 7))  # ragged in both axes
    g = da.from_array(gn, chunks=(10, 7))
    for p in act.param_names:
        vals = _valid_values(act, p)
        col = np.resize(np.array(vals, dtype=np.float64), (rows, 1))
        for pv in (col, da.from_array(col, chunks=(6, 1))):  # numpy, and dask chunked otherwise
            kw = {p: pv}
            knp = {p: col}
            assert_bitwise(act(x, **kw), act(xn, **knp))
            assert_bitwise(act.dx(x, **kw), act.dx(xn, **knp))
            assert_bitwise(act.backward(x, g, **kw), act.backward(xn, gn, **knp))
            for q, v in act.dparams(x, **kw).items():
                assert_bitwise(v, act.dparams(xn, **knp)[q])
            r = act.backward(x, g, **kw)
            assert r.chunks == x.chunks  # x's chunking wins over the parameter's


def test_params_broadcast_to_more_dims_than_x():
    xn = _x(50, np.float64)
    sig = np.array([[0.1], [1.0], [7.0]])
    x = da.from_array(xn, chunks=16)
    r = iglu_np.iglu(x, sigma=sig)
    assert r.shape == (3, 50)
    assert_bitwise(r, iglu_np.iglu(xn, sigma=sig))
    s = da.from_array(sig, chunks=(2, 1))
    assert_bitwise(iglu_np.iglu.dx(x, sigma=s), iglu_np.iglu.dx(xn, sigma=sig))


def test_numpy_grad_with_dask_x_and_dask_grad_with_numpy_x():
    xn, gn = _x(300, np.float32), _x(300, np.float32, seed=3)
    x, g = da.from_array(xn, chunks=64), da.from_array(gn, chunks=100)
    ref = iglu_np.iglu.backward(xn, gn, sigma=2.0)
    assert_bitwise(iglu_np.iglu.backward(x, gn, sigma=2.0), ref)
    r = iglu_np.iglu.backward(xn, g, sigma=2.0)
    assert_bitwise(r, ref)
    assert_bitwise(iglu_np.iglu.backward(x, g, sigma=2.0), ref)
    assert iglu_np.iglu.backward(x, g).chunks == x.chunks


# ------------------------------------------------------------------ dtype rules
@pytest.mark.parametrize(
    "dt, expect",
    [
        (np.float16, np.float16),
        (np.float32, np.float32),
        (np.float64, np.float64),
        (np.int32, np.float64),
        (np.bool_, np.float64),
    ],
)
def test_dtype_rules_match_numpy(dt, expect):
    with np.errstate(over="ignore"):  # 1e30 -> inf in float16, deliberately
        xn = (_x(200, np.float64) if np.dtype(dt).kind == "f" else np.arange(-100, 100)).astype(dt)
    x = da.from_array(xn, chunks=64)
    for lazy, ref in [
        (iglu_np.iglu(x), iglu_np.iglu(xn)),
        (iglu_np.iglu.backward(x, x), iglu_np.iglu.backward(xn, xn)),
        (iglu_np.iglu.dparams(x)["sigma"], iglu_np.iglu.dparams(xn)["sigma"]),
    ]:
        assert lazy.dtype == np.dtype(expect)
        assert_bitwise(lazy, ref)


def test_mixed_precision_grad_promotes():
    xn = _x(100, np.float32)
    gn = _x(100, np.float64, seed=4)
    r = iglu_np.iglu.backward(da.from_array(xn, chunks=30), da.from_array(gn, chunks=30))
    assert r.dtype == np.float64
    assert_bitwise(r, iglu_np.iglu.backward(xn, gn))


# ------------------------------------------------------------------ parameter gradients
@pytest.mark.parametrize("name", _sweep(WITH_PARAMS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_backward_params_reduce_across_chunks(name, dtype):
    act = iglu_np.ACTIVATIONS[name]
    rng = np.random.default_rng(5)
    rows, cols = 37, 23
    xn = (rng.standard_normal((rows, cols)) * 3).astype(dtype)
    gn = rng.standard_normal((rows, cols)).astype(dtype)
    x, g = da.from_array(xn, chunks=(10, 7)), da.from_array(gn, chunks=(10, 7))
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)

    res = act.backward_params(x, g)
    ref = act.backward_params(xn, gn)
    assert res.keys() == ref.keys()
    for p in res:
        assert isinstance(res[p], da.Array)
        assert res[p].shape == ref[p].shape == ()
        assert res[p].dtype == ref[p].dtype
        np.testing.assert_allclose(res[p].compute(), ref[p], **tol)

    for p in act.param_names:
        col = np.resize(np.array(_valid_values(act, p)), (rows, 1))
        ref = act.backward_params(xn, gn, **{p: col})
        for pv in (col, da.from_array(col, chunks=(4, 1))):
            res = act.backward_params(x, g, **{p: pv})
            for q in res:
                assert res[q].dtype == ref[q].dtype
                assert res[q].shape == ref[q].shape == ((rows, 1) if q == p else ())
                np.testing.assert_allclose(res[q].compute(), ref[q], **tol)


def test_backward_params_float16_sums_in_float32():
    xn = _x(500, np.float16)
    xn[np.isnan(xn) | np.isinf(xn)] = 1.0
    x = da.from_array(xn, chunks=100)
    res = iglu_np.iglu.backward_params(x, x)["sigma"]
    ref = iglu_np.iglu.backward_params(xn, xn)["sigma"]
    assert res.dtype == ref.dtype == np.float32
    np.testing.assert_allclose(res.compute(), ref, rtol=1e-5)


def test_backward_params_no_params_is_empty():
    act = next((iglu_np.ACTIVATIONS[n] for n in NAMES if not iglu_np.ACTIVATIONS[n].params), None)
    if act is None:
        pytest.skip("every registered activation has parameters")
    x = da.ones(10, chunks=3)
    assert act.backward_params(x, x) == {}


# ------------------------------------------------------------------ laziness
def _counting_source(n, chunks, counter):
    def block(b, block_info=None):
        counter.append(block_info[None]["chunk-location"])
        return b

    return da.map_blocks(block, da.from_array(_x(n, np.float64), chunks=chunks), dtype=np.float64)


def test_calls_trigger_no_compute():
    loads = []
    x = _counting_source(1000, 100, loads)
    s = da.from_array(np.full((1000,), 0.7), chunks=300)
    with CountTasks() as cb:
        outs = [
            iglu_np.iglu(x, sigma=s),
            iglu_np.iglu.dx(x),
            iglu_np.iglu.backward(x, x, sigma=s),
            iglu_np.iglu.dparams(x, sigma=s)["sigma"],
            *iglu_np.iglu.backward_params(x, x, sigma=s).values(),
            *iglu_np.iglu.backward_params(x, x, sigma=0.5).values(),
            iglu_np.iglu.ufunc(x, 0.5),
            iglu_np.iglu.backward.ufunc(x, x, 0.5),
        ]
        assert cb.n == 0 and loads == []
        assert all(isinstance(o, da.Array) for o in outs)
        with np.errstate(all="ignore"):  # the raw ufuncs do not silence FP flags themselves
            dask.compute(*outs, scheduler="sync")
        assert cb.n > 0 and len(loads) >= 10  # the counters do count


def test_metadata_without_compute():
    x = da.zeros((1000, 30), chunks=(333, 7), dtype=np.float32)
    r = iglu_np.iglu.backward(x, x, sigma=da.ones((1000, 1), chunks=(500, 1)))
    assert r.shape == (1000, 30) and r.dtype == np.float32
    assert r.chunks == x.chunks
    assert type(r._meta) is np.ndarray and r._meta.dtype == np.float32 and r._meta.ndim == 2


# ------------------------------------------------------------------ raw ufunc protocol
@pytest.mark.parametrize("name", _sweep(NAMES))
def test_raw_ufuncs_compose_with_dask_array_ufunc(name):
    act = iglu_np.ACTIVATIONS[name]
    xn = _x(300, np.float64)
    x = da.from_array(xn, chunks=64)
    ps = list(act.defaults.values())
    for u, args in [
        (act.ufunc, (xn,)),
        (act.dx.ufunc, (xn,)),
        (act.backward.ufunc, (xn, xn)),
        *((v, (xn,)) for v in act.dparams.ufuncs.values()),
    ]:
        lazy = u(*(x for _ in args), *ps)
        assert isinstance(lazy, da.Array)
        with np.errstate(all="ignore"):
            assert_bitwise(lazy, u(*args, *ps))


def test_activations_and_raw_ufuncs_pickle_by_name():
    for act in iglu_np.ACTIVATIONS.values():
        assert pickle.loads(pickle.dumps(act)) is act
    for act in map(iglu_np.get, REPRESENTATIVE):  # the ufuncs compile: keep it short
        for u in [act.ufunc, act.dx.ufunc, act.backward.ufunc, *act.dparams.ufuncs.values()]:
            assert pickle.loads(pickle.dumps(u)) is u


def test_graph_pickles():
    cloudpickle = pytest.importorskip("cloudpickle")
    x = da.from_array(_x(100, np.float32), chunks=30)
    r = iglu_np.iglu.backward(x, x, sigma=da.full((100,), 0.5, chunks=50))
    g = dict(r.__dask_graph__())
    back = pickle.loads(cloudpickle.dumps(g))
    assert set(back) == set(g)
    # the task functions are importable by reference, not serialised by value
    pickle.dumps(g)


# ------------------------------------------------------------------ errors and out=
def test_bad_inputs_raise_clear_errors():
    x = da.ones((10, 4), chunks=3)
    with pytest.raises(ValueError, match="domain"):
        iglu_np.iglu(x, sigma=-1.0)
    with pytest.raises(ValueError, match="domain"):
        iglu_np.iglu(x, sigma=np.array([1.0, 0.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="unexpected keyword"):
        iglu_np.iglu(x, beta=1.0)
    with pytest.raises(ValueError, match="broadcast"):
        iglu_np.iglu(x, sigma=np.ones(5))
    with pytest.raises(TypeError, match="dtype"):
        iglu_np.iglu(da.ones(4, chunks=2, dtype=np.complex128))
    with pytest.raises(TypeError, match="dask array"):
        iglu_np.iglu(x, out=np.empty((10, 4)))
    # a lazy parameter is checked where its values are: in the tasks
    lazy_bad = iglu_np.iglu(x, sigma=da.from_array(np.array([1.0, -2.0, 1.0, 1.0]), chunks=2))
    with pytest.raises(ValueError, match="domain"):
        lazy_bad.compute(scheduler="sync")


def test_out_dask_array():
    xn = _x(100, np.float64)
    x = da.from_array(xn, chunks=30)
    out = da.empty(100, chunks=30)
    r = iglu_np.iglu(x, out=out)
    assert r is out
    assert_bitwise(out, iglu_np.iglu(xn))


def test_backend_keyword_forces_dask():
    xn = _x(100, np.float64)
    r = iglu_np.iglu(xn, backend="dask")
    assert isinstance(r, da.Array)
    assert_bitwise(r, iglu_np.iglu(xn))


def test_info_reports_dask():
    from iglu_np.cli.info import backend_status

    usable, detail = backend_status()["dask"]
    assert usable and "dask" in detail
