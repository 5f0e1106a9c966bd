"""xarray: DataArray in, DataArray out, coords and attrs kept; lazy when dask-backed."""

import contextlib

import numpy as np
import pytest

xr = pytest.importorskip("xarray")

import iglu_np  # noqa: E402

from .bitwise import assert_same_bits  # noqa: E402


def _da(dtype=np.float64):
    rng = np.random.default_rng(0)
    v = (rng.standard_normal((5, 8)) * 3).astype(dtype)
    v[0, :3] = [np.inf, -np.inf, np.nan]
    return xr.DataArray(
        v,
        dims=("time", "channel"),
        coords={
            "time": np.arange(5) * 0.5,
            "channel": [f"c{i}" for i in range(8)],
            "label": ("channel", list("abcdefgh")),
        },
        attrs={"units": "mV", "source": "probe-3"},
        name="signal",
    )


def _same_labels(r, x):
    assert isinstance(r, xr.DataArray)
    assert r.dims == x.dims
    assert r.attrs == x.attrs and r.name == x.name
    for k in x.coords:
        assert r.coords[k].identical(x.coords[k])


def _bits_equal(a, b):
    assert_same_bits(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("chunked", [False, True])
def test_round_trip_keeps_coords_and_attrs(dtype, chunked):
    pytest.importorskip("dask.array") if chunked else None
    x = _da(dtype)
    xi = x.chunk({"time": 2, "channel": 3}) if chunked else x
    v = x.values
    # The raw ufunc (last case) meets inf/nan and does not silence FP flags itself; the
    # errstate only reaches tasks run on this thread, hence the synchronous scheduler.
    sync = contextlib.nullcontext()
    if chunked:
        import dask

        sync = dask.config.set(scheduler="sync")
    with np.errstate(all="ignore"), sync:
        for r, ref in [
            (iglu_np.iglu(xi, sigma=0.7), iglu_np.iglu(v, sigma=0.7)),
            (iglu_np.iglu.dx(xi), iglu_np.iglu.dx(v)),
            (iglu_np.iglu.backward(xi, xi), iglu_np.iglu.backward(v, v)),
            (iglu_np.iglu.dparams(xi)["sigma"], iglu_np.iglu.dparams(v)["sigma"]),
            (iglu_np.iglu.ufunc(xi, 0.7), iglu_np.iglu(v, sigma=0.7)),  # ufunc protocol too
        ]:
            _same_labels(r, x)
            if chunked:
                import dask.array as da

                assert isinstance(r.data, da.Array)  # still lazy
                assert r.chunks == xi.chunks
            _bits_equal(r.values, ref)


def test_labelled_parameter_broadcasts_by_dimension_name():
    x = _da()
    # sigma per channel, given as a DataArray: aligned by name although channel is axis 1
    sig = xr.DataArray(
        np.linspace(0.2, 3.0, 8), dims="channel", coords={"channel": x.channel.values}
    )
    r = iglu_np.iglu(x, sigma=sig)
    _same_labels(r, x)
    _bits_equal(r.values, iglu_np.iglu(x.values, sigma=sig.values[None, :]))

    g = xr.ones_like(x)
    gp = iglu_np.iglu.backward_params(x, g, sigma=sig)["sigma"]
    assert gp.dims == ("channel",)
    assert gp.indexes["channel"].equals(sig.indexes["channel"])
    assert gp.name == "sigma" and gp.attrs == {}  # x's units do not describe d/dsigma
    ref = iglu_np.iglu.backward_params(x.values, g.values, sigma=sig.values[None, :])["sigma"]
    np.testing.assert_allclose(gp.values, ref[0], rtol=1e-12)  # NaN in column 2 propagates
    assert np.isnan(gp.values[2])


def test_backward_params_scalar_and_lazy():
    da = pytest.importorskip("dask.array")
    x = _da()
    x[0, :3] = 1.0
    g = xr.full_like(x, 0.5)
    xc, gc = x.chunk({"time": 2}), g.chunk({"time": 2})
    ref = iglu_np.iglu.backward_params(x.values, g.values, sigma=1.5)["sigma"]
    got = iglu_np.iglu.backward_params(xc, gc, sigma=1.5)["sigma"]
    assert isinstance(got, da.Array) and got.shape == ()
    np.testing.assert_allclose(got.compute(), ref, rtol=1e-12)
    eager = iglu_np.iglu.backward_params(x, g, sigma=1.5)["sigma"]
    np.testing.assert_allclose(eager, ref, rtol=0, atol=0)


def test_mismatched_index_is_an_error():
    x = _da()
    sig = xr.DataArray(np.ones(8), dims="channel", coords={"channel": np.arange(8)})
    with pytest.raises(ValueError):
        iglu_np.iglu(x, sigma=sig)


def test_out_is_rejected():
    x = _da()
    with pytest.raises(TypeError, match="out="):
        iglu_np.iglu(x, out=np.empty(x.shape))
