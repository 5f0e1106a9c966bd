"""The Numba CUDA backend's calls: run, backward_params and backward_all, on the thin
path where it applies, else through the general kernels (CuPy's where numba-cuda-mlir
cannot compile the launch)."""

from __future__ import annotations

import math

import numpy as np

from ..._call import Target, prepare, unwrap_out
from .._interop import is_bf16_array
from . import _discovery
from ._arrays import (
    _DATA_NAMES,
    _as_device,
    _broadcast_strides,
    _described,
    _device_ctx,
    _device_index,
    _launch_dims,
    _like,
    _overlap,
    _pointer,
    _stream,
    _view,
    collapse,
)
from ._compile import _cast_kernel, _kernel, _kernel_all
from ._discovery import MIN_BLOCKS, handles
from ._sources import VECTOR_BYTES, lanes
from ._thin_path import _thin


def backward_all(act, data, params, out):
    """grad_x and every scalar parameter's gradient in one pass over x and grad_out (same
    shape, any strides), or None (array parameters, broadcasting, an out= that overlaps:
    two passes then)."""
    if not act.param_names or len(data) != 2 or not all(handles(d) for d in data):
        return None
    _refuse_bf16(act, *zip(_DATA_NAMES, data), *params.items(), ("out", out))
    if any(handles(v) or np.ndim(v) != 0 for v in params.values()):
        return None
    cuda = _discovery._cuda()
    # (float32 data with a parameter beyond float32 raise here what the two passes raise)
    stream, c = _operands(cuda, act, data, params)
    devs, cdt, vals = c.data, c.compute, c.values
    if tuple(devs[0].shape) != tuple(devs[1].shape) or devs[0].dtype != devs[1].dtype:
        return None
    shape = tuple(devs[0].shape)
    with _device_ctx(cuda, data[0]):
        if out is not None:
            out = unwrap_out(act.name, out)
            if not handles(out):
                return None
            odev = _as_device(cuda, out)
            if tuple(odev.shape) != shape or odev.dtype != devs[0].dtype:
                return None
            if any(_overlap(d, odev) for d in devs):
                return None  # out= overlapping x or g other than exactly: two passes
        if math.prod(shape) and _needs_cupy([*devs] + ([odev] if out is not None else []), shape):
            return None  # two passes, which take the CuPy kernels (see _needs_cupy)
        if out is None:
            odev = cuda.device_array(shape, dtype=devs[0].dtype, stream=stream)
        acc = cuda.to_device(np.zeros(len(vals), np.float64), stream=stream)
        n = math.prod(shape)
        if n:
            strides = [
                _broadcast_strides(w, d, shape)
                for w, d in zip(("x", "grad_out", "out"), [*devs, odev])
            ]
            cshape, cstr = collapse(shape, strides)
            views = [_view(d, cshape, st) for d, st in zip([*devs, odev], cstr)]
            kern = _kernel_all(act.name, cdt, len(cshape))
            blocks, threads = _launch_dims(cuda, n)
            kern[blocks, threads, stream](
                n, views[0], views[1], *(cdt.type(v) for v in vals), views[2], acc
            )
        sums = acc.copy_to_host(stream=stream)
        if stream is not None and hasattr(stream, "synchronize"):
            stream.synchronize()
        grads = {
            p: _like(data[0], cuda.to_device(np.asarray(cdt.type(sums[k])), stream=stream))
            for k, p in enumerate(act.param_names)
        }
        return (out if out is not None else _like(data[0], odev)), grads


def _needs_cupy(ops, shape) -> bool:
    """Whether a launch leaves what numba-cuda-mlir was seen to compute right.

    On an H200 (numba-cuda-mlir 0.6), iglu with a per-channel sigma (a stride-0 view) over
    a strided 3-d x gave wrong values (25 million ulp), while contiguous operands of the
    result's shape and a strided 2-d x were right; the same kernels are right in
    numba-cuda's simulator, and the cause is unknown. So launches other than that plain
    case run the CuPy kernels (right on the H200 in every layout)."""
    if not _discovery._mlir() or _discovery.simulator():
        return False
    return not all(tuple(d.shape) == tuple(shape) and d.is_c_contiguous() for d in ops)


def _via_cupy(act, what, data, params, out=None, kind=None):
    """``what`` of the CuPy backend on zero-copy CuPy views of the operands, the results
    handed back as the caller's array type (see :func:`_needs_cupy`); ``out`` is one
    array (run has unwrapped a tuple)."""
    try:
        import cupy
    except ImportError:
        raise NotImplementedError(
            f"{act.name}: with numba-cuda-mlir, the numba_cuda backend runs only C-contiguous "
            "operands of the result's shape (broadcast parameters and strided arrays gave wrong "
            "values with numba-cuda-mlir 0.6 on an H200): install cupy, which then runs them, "
            "or pass contiguous arrays of the result's shape"
        ) from None
    from .. import cupy as cupy_backend

    def dev(a):
        return cupy.asarray(_described(a) if getattr(type(a), "__cuda_ndarray__", False) else a)

    cdata = [dev(d) for d in data]
    cparams = {k: dev(v) if handles(v) else v for k, v in params.items()}
    with _cupy_context(cupy, data):
        if what == "backward_params":
            return {
                k: _back(data[0], v)
                for k, v in cupy_backend.backward_params(act, cdata, cparams).items()
            }
        res = cupy_backend.run(act, kind, cdata, cparams, None if out is None else dev(out))
        # (inside: a Numba view of res syncs on the stream the kernel ran on)
        return out if out is not None else _back(data[0], res)


def _cupy_context(cupy, data):
    """CuPy's device and stream for a hand-off: the data's device, and the stream its
    producer named in its CUDA array interface, which the direct path launches on (Numba
    device arrays name none: CuPy's current stream then)."""
    import contextlib

    stack = contextlib.ExitStack()
    idx = _device_index(data[0])
    if idx is not None:
        stack.enter_context(cupy.cuda.Device(idx))
    for o in data:
        if getattr(type(o), "__cuda_ndarray__", False):
            continue
        ptr = o.__cuda_array_interface__.get("stream")
        if ptr:
            stack.enter_context(_external_stream(cupy, ptr))
            break
    return stack


class _StreamPtr:
    """A raw ``cudaStream_t`` as an object of the CUDA stream protocol."""

    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = int(ptr)

    def __cuda_stream__(self):
        return (0, self.ptr)


def _external_stream(cupy, ptr):
    """CuPy's stream for a raw pointer: ``Stream.from_external`` (CuPy >= 14 deprecates
    ``ExternalStream``, whose warning failed the hand-off under -W error on an H200)."""
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(_StreamPtr(ptr))
    return cupy.cuda.ExternalStream(ptr)


def _back(template, arr):
    """A CuPy result as the type of ``template`` (zero-copy): CuPy and torch as
    themselves, anything else as the toolchain's device array, as the direct path returns."""
    mod = type(template).__module__.split(".")[0]
    if mod == "cupy":
        return arr
    if mod == "torch":
        return _like(template, arr)
    return _discovery._cuda().as_cuda_array(arr)


def _refuse_bf16(act, *operands):
    """TypeError for bfloat16 operands: these kernels are typed for float16/32/64 only
    (Numba has no bfloat16 type to load and store); the CuPy backend computes bfloat16."""
    for what, v in operands:
        for a in v if isinstance(v, tuple) else (v,):
            if is_bf16_array(a):
                raise TypeError(
                    f"{act.name}: {what} is bfloat16, which the numba_cuda backend does not "
                    "compute; use the cupy backend (install cupy >= 14 and ml_dtypes: CuPy, torch "
                    "and JAX bfloat16 arrays then run there, or pass backend='cupy'), or pass "
                    "float16/float32 data"
                )


def _target(cuda, stream) -> Target:
    def as_device(v):
        return _as_device(cuda, v)

    def device_param(v):
        d = _as_device(cuda, v)
        return d, d.copy_to_host()  # validated on the host: a small copy, which synchronises

    def param(v, dev, cdt):
        if dev is not None:
            return dev
        if np.ndim(v) == 0:
            return cdt.type(v)
        return cuda.to_device(np.ascontiguousarray(v, dtype=cdt), stream=stream)

    return Target(
        "numba_cuda",
        data=as_device,
        device=handles,
        host_hint="move it with numba.cuda.to_device or cupy.asarray",
        device_param=device_param,
        param=param,
        out=as_device,
        out_what="a device array for the numba_cuda backend",
        widen=False,
    )


def _operands(cuda, act, data, params, out=None):
    """``(stream, call)``: the stream the data name and the :class:`~._call.Call` (device
    views of the data; parameters as compute-dtype scalars or device arrays, ``arrays``
    saying which; float32 data refuse parameters beyond float32)."""
    stream = _stream(cuda, [*data]) if all(handles(d) for d in data) else None
    return stream, prepare(act, data, params, out, _target(cuda, stream))


def backward_params(act, data, params) -> dict:
    """Each parameter's gradient on device arrays, reduced to its shape (one fused
    pass per parameter, accumulated in float64)."""
    _refuse_bf16(act, *zip(_DATA_NAMES, data), *params.items())
    cuda = _discovery._cuda()
    stream, c = _operands(cuda, act, data, params)
    devs, cdt, pargs, arrays, shape = c.data, c.compute, c.params, c.arrays, c.shape
    if math.prod(shape) and _needs_cupy(
        [*devs, *(a for a, isarr in zip(pargs, arrays) if isarr)], shape
    ):
        return _via_cupy(act, "backward_params", data, params)
    with _device_ctx(cuda, data[0]):
        return {
            p: _like(data[0], _sum_param(cuda, act, k, devs, pargs, arrays, cdt, shape, stream))
            for k, p in enumerate(act.param_names)
        }


def _vector_ok(ops, cshape, cstr, arrays) -> bool:
    """Whether a launch can take the vector form: one collapsed dimension, scalar
    parameters, every operand (data and output) of one dtype, contiguous and 16-byte
    aligned (a view that starts mid-vector takes the general form)."""
    if len(cshape) != 1 or any(arrays):
        return False
    dt = np.dtype(ops[0].dtype)
    if any(np.dtype(d.dtype) != dt for d in ops):
        return False
    return all(s == (dt.itemsize,) and _pointer(d) % VECTOR_BYTES == 0 for d, s in zip(ops, cstr))


def run(act, kind, data, params, out):
    """Compute ``kind`` of ``act`` on device arrays (see iglu_np.backends)."""
    r = _thin(act, kind, data, params, out)
    if r is not None:
        return r
    name = act.name
    _refuse_bf16(act, *zip(_DATA_NAMES, data), *params.items(), ("out", out))
    cuda = _discovery._cuda()
    with _device_ctx(cuda, data[0]):
        stream, c = _operands(cuda, act, data, params, out)
        devs, cdt, odt, pargs, arrays, shape = (
            c.data,
            c.compute,
            c.output,
            c.params,
            c.arrays,
            c.shape,
        )
        if out is not None:
            out, odev = c.out, c.out_operand
            if any(
                _overlap(d, odev) for d in [*devs, *(a for a, isarr in zip(pargs, arrays) if isarr)]
            ):
                # out= shares memory with an operand other than as the very same view: the
                # kernel reads and writes in any order, so compute into a temporary and copy
                # (numpy's buffered semantics)
                tmp = run(act, kind, data, params, None)
                # copied by identity's kernel: any strides of out= and a cast to its dtype
                # (copy_to_device wants both contiguous and of one dtype)
                from .... import _params

                run(_params.of("identity"), "fwd", (tmp,), {}, out)
                return out
            result = out
        n = math.prod(shape)
        arr_ops = [*devs, *(a for a, isarr in zip(pargs, arrays) if isarr)]
        if n and _needs_cupy(arr_ops + ([odev] if out is not None else []), shape):
            return _via_cupy(act, "run", data, params, out, kind)
        if out is None:
            odev = cuda.device_array(shape, dtype=odt, stream=stream)
            result = None
        if n:
            ops = [*arr_ops, odev]
            what = [
                *_DATA_NAMES[: len(devs)],
                *(p for p, a in zip(act.param_names, arrays) if a),
                "out",
            ]
            strides = [_broadcast_strides(w, d, shape) for w, d in zip(what, ops)]
            cshape, cstr = collapse(shape, strides)
            views = [_view(d, cshape, s) for d, s in zip(ops, cstr)]
            it = iter(views[len(devs) : -1])
            pv = [next(it) if isarr else a for a, isarr in zip(pargs, arrays)]
            if _vector_ok(ops, cshape, cstr, arrays):
                ddt = np.dtype(odev.dtype)
                kern = _kernel(name, kind, cdt, arrays, 1, None, ddt)
                blocks, threads = _launch_dims(cuda, -(-n // lanes(ddt)))
            else:
                kern = _kernel(name, kind, cdt, arrays, len(cshape))
                blocks, threads = _launch_dims(cuda, n)
            kern[blocks, threads, stream](n, *views[: len(devs)], *pv, views[-1])
        return result if result is not None else _like(data[0], odev)


def _sum_param(cuda, act, k, devs, pargs, arrays, cdt, shape, stream):
    """sum over broadcast axes of g * df/dp_k, shaped like parameter k, dtype cdt."""
    p = act.param_names[k]
    pshape = tuple(pargs[k].shape) if arrays[k] else ()
    acc = cuda.to_device(np.zeros(pshape if arrays[k] else (1,), np.float64), stream=stream)
    n = math.prod(shape)
    if n:
        arr_ops = [a for a, isarr in zip(pargs, arrays) if isarr]
        ops = [*devs, *arr_ops] + ([acc] if arrays[k] else [])
        what = ["x", "grad_out", *(q for q, a in zip(act.param_names, arrays) if a)] + (
            ["acc"] if arrays[k] else []
        )
        strides = [_broadcast_strides(w, d, shape) for w, d in zip(what, ops)]
        cshape, cstr = collapse(shape, strides)
        views = [_view(d, cshape, s) for d, s in zip(ops, cstr)]
        it = iter(views[2 : 2 + len(arr_ops)])
        pv = [next(it) if isarr else a for a, isarr in zip(pargs, arrays)]
        scalar_sum = not arrays[k]
        kern = _kernel(act.name, "sum_" + p, cdt, arrays, len(cshape), scalar_sum)
        blocks, threads = _launch_dims(cuda, n)
        kern[blocks, threads, stream](n, views[0], views[1], *pv, acc if scalar_sum else views[-1])
    res = cuda.device_array(pshape, dtype=cdt, stream=stream)
    flat_src = _view(acc, (max(1, math.prod(pshape)),), (8,))
    flat_dst = _view(res, (max(1, math.prod(pshape)),), (np.dtype(cdt).itemsize,))
    _cast_kernel()[
        1 if _discovery.simulator() else MIN_BLOCKS, 1 if _discovery.simulator() else 32, stream
    ](flat_src, flat_dst)
    return res
