"""The numba_cuda backend under numba-cuda-mlir hands launches it was not seen to compute
right (broadcast parameters, strided operands: wrong values on an H200) to the CuPy
kernels, or refuses them without cupy. Fakes stand in for the GPU arrays here."""
from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest

import iglu_np
from iglu_np.backends import numba_cuda as nc


class _Dev:
    __cuda_ndarray__ = True

    def __init__(self, shape, contiguous=True, dtype=np.float32):
        self.shape, self.dtype, self._c = tuple(shape), np.dtype(dtype), contiguous
        self.strides = tuple(int(np.prod(self.shape[i + 1:])) * self.dtype.itemsize for i in range(len(self.shape)))
        self.device_ctypes_pointer = ctypes.c_void_p(4096)

    def is_c_contiguous(self):
        return self._c


@pytest.fixture
def mlir(monkeypatch):
    monkeypatch.setattr(nc, "_mlir", lambda: True)
    monkeypatch.setattr(nc, "simulator", lambda: False)


def test_only_plain_launches_stay_on_mlir(mlir):
    shape = (4, 6, 5)
    assert not nc._needs_cupy([_Dev(shape), _Dev(shape)], shape)
    assert nc._needs_cupy([_Dev(shape), _Dev((1, 6, 1))], shape)        # per-channel parameter
    assert nc._needs_cupy([_Dev(shape, contiguous=False), _Dev(shape)], shape)  # strided x


def test_numba_cuda_and_the_simulator_keep_every_layout(monkeypatch):
    monkeypatch.setattr(nc, "_mlir", lambda: False)
    assert not nc._needs_cupy([_Dev((4, 6, 5)), _Dev((1, 6, 1))], (4, 6, 5))


def test_without_cupy_it_is_refused_not_wrong(mlir, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(NotImplementedError, match="contiguous"):
        nc._via_cupy(iglu_np.iglu, "run", [_Dev((4, 6, 5))], {"sigma": _Dev((1, 6, 1))}, None, "fwd")


def test_described_views_keep_the_pointer_shape_and_dtype():
    dev = _Dev((3, 4), dtype=np.float64)
    d = nc._described(dev, (3, 2), (32, 16))
    cai = d.__cuda_array_interface__
    assert cai["shape"] == (3, 2) and cai["strides"] == (32, 16) and cai["typestr"] == "<f8"
    assert cai["data"] == (4096, False) and cai["stream"] is None and d.base is dev
    whole = nc._described(dev).__cuda_array_interface__
    assert whole["shape"] == (3, 4) and whole["strides"] == (32, 8)


def test_small_launches_ask_for_enough_blocks_not_to_be_warned(monkeypatch):
    # numba-cuda(-mlir) warns (NumbaPerformanceWarning) below 128 blocks; pytest makes
    # warnings errors, and a library should not warn for a small array
    monkeypatch.setattr(nc, "simulator", lambda: False)
    monkeypatch.setitem(nc._state, "sms", 132)
    assert nc._launch_dims(None, 10)[0] >= 128
    assert nc._launch_dims(None, 10**9) == (132 * nc.BLOCKS_PER_SM, nc.THREADS)
