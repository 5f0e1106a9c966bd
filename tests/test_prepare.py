"""One call preparation (``iglu_np.backends._call.prepare``) for every backend: the dtype
rules, the parameters' checks, the float32 split and the out= checks, decided once."""

from __future__ import annotations

import numpy as np
import pytest

from iglu_np import _params
from iglu_np.backends import _call
from iglu_np.backends.cpu import backend as cpu_backend
from iglu_np.backends.cuda import cupy as cupy_backend
from iglu_np.backends.cuda import numba_cuda
from iglu_np.backends.lazy import dask as dask_backend

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
IGLU = _params.of("iglu")


def test_every_backend_prepares_its_calls_with_the_one_function():
    assert cpu_backend.prepare is cupy_backend.prepare is numba_cuda._run.prepare is _call.prepare
    assert numba_cuda._run.unwrap_out is dask_backend.unwrap_out is _call.unwrap_out


@pytest.mark.parametrize(
    "data, params, want",
    [
        ((np.ones(3, F16),), {}, (F32, F32, F16)),
        ((np.ones(3, F32), 2.0), {}, (F32, F32, F32)),  # a Python float is weak (NEP 50)
        ((2.0,), {}, (F64, F64, F64)),
        ((np.ones(3, F16), np.ones(3, F32)), {}, (F32, F32, F32)),
        ((np.ones(3, F32),), {"sigma": 1e39}, (F32, F64, F32)),
        ((np.ones(3, np.int32),), {}, (F64, F64, F64)),
    ],
    ids=[
        "float16",
        "weak grad",
        "python float",
        "float16 and float32",
        "sigma beyond float32",
        "int32",
    ],
)
def test_result_compute_and_output_dtypes(data, params, want):
    c = _call.prepare(IGLU, data, params)
    assert (c.result, c.compute, c.output) == want


def test_a_parameter_partly_beyond_float32_splits_by_element():
    sigma = np.array([1.0, 1e39, 2.0])
    c = _call.prepare(IGLU, (np.ones(3, F32),), {"sigma": sigma})
    mask, safe = c.split
    assert c.compute == F64 and mask.tolist() == [False, True, False]
    assert safe[0].tolist() == [1.0, 1.0, 2.0]  # the default where beyond
    assert c.arrays == (True,)
    assert _call.prepare(IGLU, (np.ones(3, F32),), {"sigma": 2.0}).split is None


def test_a_target_that_does_not_widen_refuses_a_parameter_beyond_float32():
    t = _call.Target("numba_cuda", widen=False)
    with pytest.raises(ValueError, match="outside float32's range .* numba_cuda backend"):
        _call.prepare(IGLU, (np.ones(3, F32),), {"sigma": 1e39}, target=t)
    assert _call.prepare(IGLU, (np.ones(3, F64),), {"sigma": 1e39}, target=t).compute == F64


def test_broadcast_shape_and_its_error():
    c = _call.prepare(IGLU, (np.ones((2, 1)), np.ones(3)), {"sigma": np.ones(3)})
    assert c.shape == (2, 3)
    with pytest.raises(ValueError, match=r"iglu: operands with shapes \[\(2,\), \(3,\)\] do not"):
        _call.prepare(IGLU, (np.ones(2), np.ones(3)), {})


@pytest.mark.parametrize(
    "out, error, match",
    [
        ((np.empty(3), np.empty(3)), ValueError, "out= must be one array"),
        ([0.0, 0.0, 0.0], TypeError, "out= must be a numpy array, got list"),
        (np.empty(4), ValueError, r"out= has shape \(4,\), expected \(3,\)"),
        (np.empty(3, np.int32), TypeError, "out= must be a floating array, got int32"),
    ],
    ids=["two arrays", "a list", "another shape", "integers"],
)
def test_out_checks(out, error, match):
    with pytest.raises(error, match=f"iglu: {match}"):
        _call.prepare(IGLU, (np.ones(3),), {}, out)


def test_a_one_tuple_out_is_its_array_and_a_read_only_one_is_refused():
    o = np.empty(3)
    c = _call.prepare(IGLU, (np.ones(3),), {}, (o,))
    assert c.out is o and c.out_operand is o
    o.flags.writeable = False
    with pytest.raises(ValueError, match="iglu: out= is read-only"):
        _call.prepare(IGLU, (np.ones(3),), {}, o)


def test_parameters_are_checked_before_anything_is_computed():
    with pytest.raises(ValueError, match="sigma"):
        _call.prepare(IGLU, (np.ones(3),), {"sigma": -1.0})
