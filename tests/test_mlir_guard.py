"""The numba_cuda backend under numba-cuda-mlir hands launches it was not seen to compute
right (broadcast parameters, strided operands: wrong values on an H200) to the CuPy
kernels, or refuses them without cupy. Fakes stand in for the GPU arrays here."""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest

import iglu_np
from iglu_np.backends.cuda import numba_cuda as nc


class _Dev:
    __cuda_ndarray__ = True

    def __init__(self, shape, contiguous=True, dtype=np.float32):
        self.shape, self.dtype, self._c = tuple(shape), np.dtype(dtype), contiguous
        self.strides = tuple(
            int(np.prod(self.shape[i + 1 :])) * self.dtype.itemsize for i in range(len(self.shape))
        )
        self.device_ctypes_pointer = ctypes.c_void_p(4096)

    def is_c_contiguous(self):
        return self._c


@pytest.fixture
def mlir(monkeypatch):
    monkeypatch.setattr(nc._discovery, "_mlir", lambda: True)
    monkeypatch.setattr(nc._discovery, "simulator", lambda: False)


def test_only_plain_launches_stay_on_mlir(mlir):
    shape = (4, 6, 5)
    assert not nc._run._needs_cupy([_Dev(shape), _Dev(shape)], shape)
    assert nc._run._needs_cupy([_Dev(shape), _Dev((1, 6, 1))], shape)  # per-channel parameter
    assert nc._run._needs_cupy([_Dev(shape, contiguous=False), _Dev(shape)], shape)  # strided x


def test_numba_cuda_and_the_simulator_keep_every_layout(monkeypatch):
    monkeypatch.setattr(nc._discovery, "_mlir", lambda: False)
    assert not nc._run._needs_cupy([_Dev((4, 6, 5)), _Dev((1, 6, 1))], (4, 6, 5))


def test_without_cupy_it_is_refused_not_wrong(mlir, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(NotImplementedError, match="contiguous"):
        nc._run._via_cupy(
            iglu_np.iglu, "run", [_Dev((4, 6, 5))], {"sigma": _Dev((1, 6, 1))}, None, "fwd"
        )


def test_described_views_keep_the_pointer_shape_and_dtype():
    dev = _Dev((3, 4), dtype=np.float64)
    d = nc._arrays._described(dev, (3, 2), (32, 16))
    cai = d.__cuda_array_interface__
    assert cai["shape"] == (3, 2) and cai["strides"] == (32, 16) and cai["typestr"] == "<f8"
    assert cai["data"] == (4096, False) and cai["stream"] is None and d.base is dev
    whole = nc._arrays._described(dev).__cuda_array_interface__
    assert whole["shape"] == (3, 4) and whole["strides"] == (32, 8)


def test_small_launches_ask_for_enough_blocks_not_to_be_warned(monkeypatch):
    # numba-cuda(-mlir) warns (NumbaPerformanceWarning) below 128 blocks; pytest makes
    # warnings errors, and a library should not warn for a small array
    monkeypatch.setattr(nc._discovery, "simulator", lambda: False)
    monkeypatch.setitem(nc._discovery._state, "sms", 132)
    assert nc._arrays._launch_dims(None, 10)[0] >= 128
    assert nc._arrays._launch_dims(None, 10**9) == (132 * nc.BLOCKS_PER_SM, nc.THREADS)


def test_kernels_test_nan_with_isnan_not_ne():
    """numba-cuda-mlir 0.6 lowers a float ``!=`` to an ordered compare (arith.cmpf one:
    False for NaN), so ``x != x`` never saw a NaN on an H200 and relu's derivative of NaN
    came back 0. Kernels use ``math.isnan`` (or ``==`` with the branches swapped)."""
    import ast
    import inspect
    import textwrap

    from iglu_np import _spec

    bad = []
    for fn in _spec._KERNELS:
        if not (getattr(fn, "__module__", None) or "").startswith("iglu_np."):
            continue  # kernels other tests define on the fly (no source file, maybe no module)
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(isinstance(op, ast.NotEq) for op in node.ops):
                bad.append(f"{fn.__module__}.{fn.__name__}: {ast.unparse(node)}")
    assert len(_spec._KERNELS) > 100
    assert not bad, bad


def test_hand_off_stream_uses_the_stream_protocol_not_external_stream():
    """CuPy 14 deprecates ExternalStream (its DeprecationWarning failed the hand-off test
    on an H200): a raw stream pointer goes through Stream.from_external as a CUDA stream
    protocol object; older CuPy keeps ExternalStream."""
    import types

    seen = []

    class Stream:
        @classmethod
        def from_external(cls, obj):
            seen.append(obj.__cuda_stream__())
            return "from_external"

    class Old:
        pass

    new = types.SimpleNamespace(cuda=types.SimpleNamespace(Stream=Stream))
    assert nc._run._external_stream(new, 0x7F00) == "from_external" and seen == [(0, 0x7F00)]
    old = types.SimpleNamespace(
        cuda=types.SimpleNamespace(Stream=Old, ExternalStream=lambda p: ("ext", p))
    )
    assert nc._run._external_stream(old, 5) == ("ext", 5)
