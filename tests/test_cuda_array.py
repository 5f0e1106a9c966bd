"""Foreign CUDA arrays (torch, JAX, any __cuda_array_interface__ / CUDA DLPack object) are
recognised without a GPU and go through the CuPy kernels zero-copy where cupy is installed
(the run itself: tests marked gpu)."""

from __future__ import annotations

import numpy as np
import pytest

from iglu_np.backends.cuda import device_arrays as cuda_array


class _CAI:
    __cuda_array_interface__ = {"shape": (3,), "typestr": "<f4", "data": (0, False), "version": 3}


class _DL:
    def __init__(self, dev):
        self.dev = dev

    def __dlpack__(self, stream=None):
        raise AssertionError("not called by the probe")

    def __dlpack_device__(self):
        return self.dev


class _Raises:
    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("host tensor")


def test_what_counts_as_a_foreign_cuda_array():
    assert cuda_array.is_cuda_array(_CAI())
    assert cuda_array.is_cuda_array(_DL((2, 0)))  # kDLCUDA
    assert cuda_array.is_cuda_array(_DL((13, 0)))  # managed
    assert not cuda_array.is_cuda_array(_DL((1, 0)))  # kDLCPU
    assert not cuda_array.is_cuda_array(np.ones(3))
    assert not cuda_array.is_cuda_array(_Raises())
    assert not cuda_array.is_cuda_array(3.0)


def test_without_cupy_they_are_left_to_numba_cuda():
    try:
        import cupy  # noqa: F401

        pytest.skip("cupy is installed")
    except ImportError:
        pass
    assert not cuda_array.handles(_CAI())
    ok, why = cuda_array.status()
    assert not ok and "numba_cuda" in why


@pytest.mark.gpu
def test_torch_cuda_tensors_run_zero_copy_and_come_back_as_torch():
    torch = pytest.importorskip("torch")
    import iglu_np

    x = torch.linspace(-5, 5, 1027, device="cuda", dtype=torch.float32)
    g = torch.ones_like(x)
    y = iglu_np.iglu(x)
    assert isinstance(y, torch.Tensor) and y.device == x.device
    np.testing.assert_array_equal(y.cpu().numpy(), iglu_np.iglu(x.cpu().numpy()))
    out = torch.empty_like(x)
    assert iglu_np.iglu.backward(x, g, out=out) is out
    gx, gp = iglu_np.iglu.backward_all(x, g)
    assert isinstance(gx, torch.Tensor) and isinstance(gp["sigma"], torch.Tensor)
