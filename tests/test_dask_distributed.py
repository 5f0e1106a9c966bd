"""dask.distributed with two worker processes on loopback: same results as one machine."""

import logging
import os

import numpy as np
import pytest

pytestmark = pytest.mark.xdist_group("dask_distributed")  # module fixtures: run once, on one worker

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import iglu_np  # noqa: E402

from .bitwise import assert_same_bits  # noqa: E402


@pytest.fixture(scope="module")
def cluster_client():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield cluster, client
    assert cluster.status.name == "closed"


def _inputs():
    rng = np.random.default_rng(7)
    xn = (rng.standard_normal((64, 40)) * 4).astype(np.float32)
    xn[0, :4] = [np.inf, -np.inf, np.nan, -0.0]
    gn = rng.standard_normal((64, 40)).astype(np.float32)
    sig = np.resize(np.array([0.1, 0.5, 1.0, 3.0, 10.0]), (64, 1))
    x = da.from_array(xn, chunks=(16, 15))  # ragged columns
    g = da.from_array(gn, chunks=(16, 15))
    s = da.from_array(sig, chunks=(8, 1))
    return xn, gn, sig, x, g, s


@pytest.mark.slow  # ~20-25 s with a warm Numba cache on 2 shared cores (spawns 2 workers)
def test_forward_backward_and_param_sums_on_worker_processes(cluster_client):
    cluster, client = cluster_client
    worker_pids = set(client.run(os.getpid).values())
    assert len(worker_pids) == 2 and os.getpid() not in worker_pids

    xn, gn, sig, x, g, s = _inputs()
    act = iglu_np.iglu
    lazy = {
        "fwd": act(x, sigma=s),
        "dx": act.dx(x, sigma=0.5),
        "bwd": act.backward(x, g, sigma=s),
        "dsigma": act.dparams(x, sigma=s)["sigma"],
        "raw_ufunc": act.backward.ufunc(x, g, 2.0),  # numpy ufunc protocol; pickled by name
        "approx": iglu_np.iglu_approx(x, sigma=s),
        "gsum_row": act.backward_params(x, g, sigma=s)["sigma"],
        "gsum_scalar": act.backward_params(x, g, sigma=0.5)["sigma"],
    }
    with distributed.get_task_stream(client) as ts:
        remote = dict(zip(lazy, client.compute(list(lazy.values()), sync=True)))
    with np.errstate(all="ignore"):  # the raw ufunc meets inf/nan and does not silence flags
        local = dict(zip(lazy, dask.compute(*lazy.values(), scheduler="sync")))
    ran_on = {t["worker"] for t in ts.data}
    assert len(ran_on) == 2  # both workers took chunks

    with np.errstate(all="ignore"):
        ref = {
            "fwd": act(xn, sigma=sig),
            "dx": act.dx(xn, sigma=0.5),
            "bwd": act.backward(xn, gn, sigma=sig),
            "dsigma": act.dparams(xn, sigma=sig)["sigma"],
            "raw_ufunc": act.backward.ufunc(xn, gn, 2.0),
            "approx": iglu_np.iglu_approx(xn, sigma=sig),
        }
    for k, r in ref.items():
        assert_same_bits(remote[k], r, err_msg=k)
    for k in ("gsum_row", "gsum_scalar"):
        # same graph, same reduction tree: bit for bit equal to the local scheduler
        assert remote[k].dtype == local[k].dtype
        np.testing.assert_array_equal(remote[k], local[k], err_msg=k)
    np.testing.assert_allclose(
        remote["gsum_row"], act.backward_params(xn, gn, sigma=sig)["sigma"], rtol=1e-5, atol=1e-5
    )

    # every worker built (or loaded from Numba's cache) the kernels its tasks used
    def loaded():
        from iglu_np.backends.cpu import ufuncs as cpu

        return sorted(k[1:] for k in cpu._state if k[0] == "ufunc")

    for kernels in client.run(loaded).values():
        assert ("iglu", "fwd") in kernels or ("iglu", "bwd") in kernels
