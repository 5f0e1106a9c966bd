"""The real-GPU tests' comparisons, checked without a GPU: they take N-d arrays (the old
``_close`` indexed an N-d array with a flat index and could never pass), fail where they
should, and count ulp of the spec's scale only where the value cancels."""

from __future__ import annotations

import numpy as np
import pytest

import iglu_np

from . import test_gpu_device as D


def test_same_and_close_take_nd_arrays():
    x = np.linspace(-3, 3, 240).reshape(4, 6, 10).astype(np.float32)
    y = iglu_np.iglu(x)
    D._same(y, iglu_np.iglu(x), "nd")
    D._close(y, y.copy(), np.float32, "nd")
    z = y.copy()
    z[3, 5, 9] = np.nextafter(z[3, 5, 9], np.float32(np.inf))
    with pytest.raises(AssertionError, match="1 differ"):
        D._same(z, y, "nd")
    D._close(z, y, np.float32, "nd")  # 1 ulp
    z[2, 1, 3] = z[2, 1, 3] * np.float32(1.001)
    with pytest.raises(AssertionError, match="ulp at"):
        D._close(z, y, np.float32, "nd")
    neg = np.float32(-0.0)
    with pytest.raises(AssertionError):
        D._same(np.array([neg]), np.array([0.0], np.float32), "sign of zero")


def test_close_counts_scale_ulp_where_the_value_cancels():
    # xielu's derivative cancels near its zero crossing: 20 ulp of the small value is
    # within a few ulp of the terms' scale, while away from it 20 ulp fails
    act = iglu_np.xielu
    x = np.array([-1.0, 2.0], np.float32)
    want = act.dx(x)
    got = want.copy()
    got[0] = want[0] + np.float32(20) * np.spacing(want[0])
    spec, ps = act.spec, dict(act.defaults)
    if spec.scales.get("dx") is None:
        pytest.fail("xielu declares no scale for dx: the case is not exercised")
    D._close(got, want, np.float32, "cancel", spec, "dx", x, None, ps)
    got = want.copy()
    got[1] = want[1] + np.float32(20) * np.spacing(want[1])
    with pytest.raises(AssertionError):
        D._close(got, want, np.float32, "no cancellation", spec, "dx", x, None, ps)
