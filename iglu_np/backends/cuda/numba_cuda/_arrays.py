"""Device operands: CUDA array interface views at the broadcast shape, their streams and
devices, the collapse of dimensions contiguous in every operand, launch sizes."""

from __future__ import annotations

import numpy as np

from . import _discovery
from ._discovery import BLOCKS_PER_SM, MIN_BLOCKS, SIM_THREADS, THREADS, _state


def _extent(dev):
    """(first byte, one past the last byte) that a device array's elements span."""
    cai = getattr(dev, "__cuda_array_interface__", None)
    if cai is None:  # the simulator's arrays wrap a host array
        cai = dev._ary.__array_interface__
    lo = hi = int(cai["data"][0])
    item = np.dtype(dev.dtype).itemsize
    for n, st in zip(dev.shape, dev.strides):
        if n > 1:
            lo += min(0, (n - 1) * st)
            hi += max(0, (n - 1) * st)
    return lo, hi + item


def _overlap(a, b) -> bool:
    """Whether two device arrays share memory other than as exactly the same view."""
    (la, ha), (lb, hb) = _extent(a), _extent(b)
    if la == lb and tuple(a.strides) == tuple(b.strides) and tuple(a.shape) == tuple(b.shape):
        return False
    return la < hb and lb < ha


# --------------------------------------------------------------------------- arrays
def _as_device(cuda, obj):
    if getattr(type(obj), "__cuda_ndarray__", False):
        return obj
    # sync=False: we launch on the stream the producer named (see _stream), so ordering holds
    return cuda.as_cuda_array(obj, sync=False)


def _stream(cuda, objs):
    if _discovery.simulator():
        return cuda.default_stream()
    for o in objs:
        if getattr(type(o), "__cuda_ndarray__", False):
            if o.stream:
                return o.stream
            continue
        ptr = o.__cuda_array_interface__.get("stream")
        if ptr is not None:
            return cuda.external_stream(ptr)
    return cuda.default_stream()


def _view(dev, shape, strides):
    """A view of ``dev`` with new shape/strides over the same memory (stride 0 = broadcast)."""
    if _discovery.simulator():
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        a = np.lib.stride_tricks.as_strided(dev._ary, shape, strides)
        return FakeCUDAArray(a, stream=dev.stream)
    # Through the CUDA array interface, the toolchains' public way in: on an H200 with
    # numba-cuda-mlir 0.6, DeviceNDArray(shape, strides, ..., gpu_data=dev.gpu_data) gave
    # wrong values for strided views and "Unsupported argument type" for to_device arrays.
    return _discovery._cuda().as_cuda_array(_described(dev, shape, strides), sync=False)


def _described(dev, shape=None, strides=None):
    """A CUDA-array-interface description of ``dev``'s memory (its own shape and strides
    unless given). The pointer and dtype are read directly: numba-cuda-mlir 0.6's own
    interface property warns on Python 3.12 (int() of a CUstream_flags)."""
    shape = tuple(dev.shape) if shape is None else tuple(shape)
    strides = tuple(dev.strides) if strides is None else tuple(strides)
    desc = {
        "shape": shape,
        "strides": strides,
        "typestr": np.dtype(dev.dtype).str,
        "data": (dev.device_ctypes_pointer.value or 0, False),
        "version": 3,
        "stream": None,
    }
    return _Described(desc, dev)


class _Described:
    """An object that only describes memory of ``base`` (which it keeps alive)."""

    __slots__ = ("__cuda_array_interface__", "base")

    def __init__(self, desc, base):
        self.__cuda_array_interface__ = desc
        self.base = base


def _broadcast_strides(what, dev, shape):
    nd = len(shape)
    if dev.ndim > nd:
        raise ValueError(f"{what} has more dimensions than the result {shape}")
    dshape = (1,) * (nd - dev.ndim) + tuple(dev.shape)
    dstr = (0,) * (nd - dev.ndim) + tuple(dev.strides)
    if any(s < 0 for s in dstr):
        raise ValueError(
            f"{what} has negative strides, which the numba_cuda backend does not index; "
            "pass a contiguous copy"
        )
    out = []
    for n, dn, s in zip(shape, dshape, dstr):
        if dn == n:
            out.append(s if n != 1 else 0)
        elif dn == 1:
            out.append(0)
        else:
            raise ValueError(f"{what} of shape {tuple(dev.shape)} does not broadcast to {shape}")
    return out


def collapse(shape, strides_list):
    """Merge adjacent dims contiguous in every operand; drop length-1 dims. Returns
    (shape, strides_list) with at least one dim."""
    keep = [k for k, n in enumerate(shape) if n != 1]
    shape = [shape[k] for k in keep]
    strides_list = [[s[k] for k in keep] for s in strides_list]
    if not shape:
        return (1,), [(0,) for _ in strides_list]
    cs, cst = [shape[-1]], [[s[-1]] for s in strides_list]
    for k in range(len(shape) - 2, -1, -1):
        if all(s[k] == c[0] * cs[0] for s, c in zip(strides_list, cst)):
            cs[0] *= shape[k]
        else:
            cs.insert(0, shape[k])
            for s, c in zip(strides_list, cst):
                c.insert(0, s[k])
    return tuple(cs), [tuple(c) for c in cst]


def _launch_dims(cuda, n, reduction=False):
    if _discovery.simulator():
        threads = SIM_THREADS
        return max(1, min(3, -(-n // threads))), threads
    sms = _state.get("sms")
    if sms is None:
        sms = _state["sms"] = cuda.get_current_device().MULTIPROCESSOR_COUNT
    # At least MIN_BLOCKS: numba-cuda(-mlir) warns of low occupancy (NumbaPerformanceWarning)
    # for smaller grids, and blocks past the data exit at once.
    return max(MIN_BLOCKS, min(-(-n // THREADS), sms * BLOCKS_PER_SM)), THREADS


def _like(template, dev):
    mod = type(template).__module__.split(".")[0]
    if mod == "cupy":
        import cupy

        return cupy.asarray(dev)
    if mod == "torch":
        import torch

        return torch.as_tensor(dev, device=template.device)
    return dev


def _device_index(obj):
    """The device ordinal of a CuPy or torch array, else None."""
    mod = type(obj).__module__.split(".")[0]
    if mod == "cupy":
        return obj.device.id
    if mod == "torch":
        return obj.device.index
    return None


def _device_ctx(cuda, obj):
    """Context manager selecting the device of a CuPy/torch input (no-op otherwise)."""
    import contextlib

    idx = _device_index(obj)
    if idx is None or _discovery.simulator():
        return contextlib.nullcontext()
    return cuda.gpus[idx]


# --------------------------------------------------------------------------- run
_DATA_NAMES = ("x", "grad_out")


def _pointer(dev) -> int:
    """The address of a device array's first element (the simulator's host copy)."""
    if _discovery.simulator():
        return dev._ary.ctypes.data
    return dev.device_ctypes_pointer.value or 0
