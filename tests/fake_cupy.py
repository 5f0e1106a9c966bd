"""A stand-in for ``cupy`` on machines without a GPU: enough of its surface to drive
:mod:`iglu_np.backends.cuda.cupy` through the public calls (``iglu_np.iglu(x)`` on a
fake array), with every kernel launch recorded instead of run.

* :class:`ndarray` is a descriptor: shape, dtype, strides, contiguity flags, a fake device
  address (``data.ptr``, 256-byte aligned for new arrays, as CuPy's allocator) and the
  device it was made on; 1-d slices, ``.T`` and ``reshape`` make views. It holds no
  values (``asnumpy`` gives back what ``asarray`` was given, else zeros).
* :class:`RawKernel` and :class:`ElementwiseKernel` append a :class:`Launch` (the kernel,
  grid, block, arguments, current device and stream) to :data:`STATE.launches`; array
  operations the backend uses (``empty``, ``astype``, ``sum``, ``__setitem__``) append
  what they did to :data:`STATE.ops`.
* ``cuda.runtime.getDevice``, ``cuda.Device`` (a context manager, as CuPy's) and
  ``cuda.get_current_stream`` / ``cuda.Stream`` follow :data:`STATE`.

:func:`install` puts the module into ``sys.modules`` (a pytest ``monkeypatch``, so it is
undone after the test) and clears the backend's caches, which hold kernels of whichever
cupy they were made with.
"""

from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass, field

import numpy as np

__version__ = "14.0.0"
SM_COUNT = 132


@dataclass
class Launch:
    kernel: object
    grid: tuple
    block: tuple
    args: tuple
    device: int
    stream: object


@dataclass
class _State:
    record: bool = True  # False: launches and array operations are not recorded (timing)
    device: int = 0
    stream: object = None
    next_ptr: int = 0x7F00_0000_0000
    launches: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    compiled: list = field(default_factory=list)

    def alloc(self, nbytes):
        p = self.next_ptr
        self.next_ptr += -(-max(nbytes, 1) // 256) * 256 + 256
        return p


STATE = _State()


class _MemoryPointer:
    __slots__ = ("ptr", "device_id")

    def __init__(self, ptr, device_id):
        self.ptr, self.device_id = ptr, device_id


class _Flags:
    __slots__ = ("c_contiguous", "f_contiguous")

    def __init__(self, c, f):
        self.c_contiguous, self.f_contiguous = c, f


def _contiguous(shape, strides, itemsize, order):
    want = itemsize
    axes = range(len(shape) - 1, -1, -1) if order == "C" else range(len(shape))
    for i in axes:
        if shape[i] == 1:
            continue
        if strides[i] != want:
            return False
        want *= shape[i]
    return True


def _c_strides(shape, itemsize, order="C"):
    strides, s = [0] * len(shape), itemsize
    for i in range(len(shape) - 1, -1, -1) if order == "C" else range(len(shape)):
        strides[i] = s
        s *= shape[i]
    return tuple(strides)


class ndarray:
    """What the backend reads of a CuPy array: plain attributes, as CuPy's Cython ones."""

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
        dt = np.dtype(dtype)
        self.dtype, self.itemsize, self.shape, self.ndim = dt, dt.itemsize, shape, len(shape)
        self.size = math.prod(shape)
        self.nbytes = self.size * dt.itemsize
        self.strides = (
            tuple(strides) if strides is not None else _c_strides(shape, dt.itemsize, order)
        )
        self.data = (
            memptr if memptr is not None else _MemoryPointer(STATE.alloc(self.nbytes), STATE.device)
        )
        self.base = None
        self._c_contiguous = _contiguous(shape, self.strides, dt.itemsize, "C")
        self._f_contiguous = _contiguous(shape, self.strides, dt.itemsize, "F")
        self._host = None

    @property
    def flags(self):
        return _Flags(self._c_contiguous, self._f_contiguous)

    @property
    def device(self):
        return cuda.Device(self.data.device_id)

    def _view(self, offset, shape, strides):
        v = ndarray(
            shape, self.dtype, _MemoryPointer(self.data.ptr + offset, self.data.device_id), strides
        )
        v.base = self if self.base is None else self.base
        return v

    def __getitem__(self, key):
        if isinstance(key, tuple) and len(key) == 1:  # x[(s,)], as x[s]
            key = key[0]
        if key is Ellipsis:
            return self._view(0, self.shape, self.strides)
        if isinstance(key, (int, np.integer)):
            return self._view(int(key) * self.strides[0], self.shape[1:], self.strides[1:])
        if not isinstance(key, slice):
            raise NotImplementedError("the fake takes an integer or a slice of the first axis")
        start, stop, step = key.indices(self.shape[0])
        n = len(range(start, stop, step))
        return self._view(
            start * self.strides[0],
            (n, *self.shape[1:]),
            (self.strides[0] * step, *self.strides[1:]),
        )

    def __setitem__(self, key, value):
        if STATE.record:
            STATE.ops.append(("setitem", self, value))

    @property
    def T(self):
        return self._view(0, self.shape[::-1], self.strides[::-1])

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        if -1 in shape:
            known = math.prod(n for n in shape if n != -1)
            shape = tuple(self.size // known if n == -1 else n for n in shape)
        assert math.prod(shape) == self.size and self._c_contiguous
        return self._view(0, tuple(shape), _c_strides(tuple(shape), self.itemsize))

    def astype(self, dtype, copy=True):
        dt = np.dtype(dtype)
        if dt == self.dtype and not copy:
            return self
        r = ndarray(self.shape, dt)
        if STATE.record:
            STATE.ops.append(("astype", self, dt))
        return r

    def view(self, dtype):
        return self._view(0, self.shape, self.strides)

    def sum(self, axis=None, dtype=None, keepdims=False):
        axes = (
            tuple(range(self.ndim))
            if axis is None
            else ((axis,) if isinstance(axis, int) else tuple(axis))
        )
        shape = (
            tuple(1 if i in axes else n for i, n in enumerate(self.shape))
            if keepdims
            else tuple(n for i, n in enumerate(self.shape) if i not in axes)
        )
        r = ndarray(shape, dtype or self.dtype)
        if STATE.record:
            STATE.ops.append(("sum", self, axes))
        return r

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"<fake cupy array {self.shape} {self.dtype} at {self.data.ptr:#x}>"


ndarray.__module__ = "cupy"  # what iglu_np's backend detection reads


def empty(shape, dtype=float, order="C"):
    r = ndarray(shape, dtype, order=order)
    if STATE.record:
        STATE.ops.append(("empty", r))
    return r


def empty_like(a, dtype=None):
    f = a.flags
    order = "F" if (f.f_contiguous and not f.c_contiguous) else "C"
    r = ndarray(a.shape, a.dtype if dtype is None else dtype, order=order)
    if STATE.record:
        STATE.ops.append(("empty_like", r))
    return r


def linspace(start, stop, num, dtype=float):
    return ndarray(num, dtype)


def negative(x, out=None):
    """CuPy's ufunc, recorded as an op (it is no kernel of iglu_np's)."""
    r = out if out is not None else ndarray(x.shape, x.dtype)
    if STATE.record:
        STATE.ops.append(("negative", x, r))
    return r


def asarray(a, dtype=None):
    if isinstance(a, ndarray):
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
    h = np.asarray(a, dtype=dtype)
    r = ndarray(h.shape, h.dtype)
    r._host = h.copy()
    return r


def asnumpy(a):
    return a._host if a._host is not None else np.zeros(a.shape, a.dtype)


def _span(a):
    lo = hi = a.data.ptr
    for n, s in zip(a.shape, a.strides):
        if n == 0:
            return a.data.ptr, a.data.ptr
        (lo, hi) = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
    return lo, hi + a.itemsize


def may_share_memory(a, b):
    (la, ha), (lb, hb) = _span(a), _span(b)
    return la < hb and lb < ha


class RawKernel:
    def __init__(self, code, name, options=(), backend="nvrtc", **kwargs):
        self.code, self.name, self.options = code, name, tuple(options)
        STATE.compiled.append(self)

    def __call__(self, grid, block, args, *, shared_mem=0, enable_cooperative_groups=False):
        if STATE.record:
            STATE.launches.append(
                Launch(
                    self,
                    tuple(grid),
                    tuple(block),
                    tuple(args),
                    STATE.device,
                    cuda.get_current_stream(),
                )
            )

    def __repr__(self):
        return f"<fake RawKernel {self.name}>"


class ElementwiseKernel:
    def __init__(
        self, in_params, out_params, operation, name="kernel", preamble="", options=(), **kw
    ):
        self.in_params, self.out_params, self.operation, self.name = (
            in_params,
            out_params,
            operation,
            name,
        )
        self.preamble, self.options = preamble, tuple(options)
        STATE.compiled.append(self)

    def __call__(self, *args, **kwargs):
        if STATE.record:
            STATE.launches.append(
                Launch(self, (), (), tuple(args), STATE.device, cuda.get_current_stream())
            )

    def __repr__(self):
        return f"<fake ElementwiseKernel {self.name}>"


# --------------------------------------------------------------------------- cupy.cuda
class Stream:
    null = None

    def __init__(self, name="stream"):
        self.name = name
        self._prev = []

    def __enter__(self):
        self._prev.append(STATE.stream)
        STATE.stream = self
        return self

    def __exit__(self, *exc):
        STATE.stream = self._prev.pop()

    def synchronize(self):
        pass

    def __repr__(self):
        return f"<fake Stream {self.name}>"


Stream.null = Stream("null")
STATE.stream = Stream.null


class Device:
    def __init__(self, device=None):
        self.id = STATE.device if device is None else int(device)
        self.attributes = {"MultiProcessorCount": SM_COUNT}
        self._prev = []

    def __enter__(self):
        self._prev.append(STATE.device)
        STATE.device = self.id
        return self

    def __exit__(self, *exc):
        STATE.device = self._prev.pop()

    def synchronize(self):
        pass


class _NVRTCProgram:
    def compile(self, options=(), log_stream=None):
        return options


def _get_current_stream():
    return STATE.stream


runtime = types.SimpleNamespace(
    getDevice=lambda: STATE.device,
    getDeviceCount=lambda: 2,
    getDeviceProperties=lambda i: {"name": b"Fake GPU"},
)
compiler = types.ModuleType("cupy.cuda.compiler")
compiler._NVRTCProgram = _NVRTCProgram
cuda = types.ModuleType("cupy.cuda")
cuda.runtime, cuda.compiler, cuda.Device, cuda.Stream = runtime, compiler, Device, Stream
cuda.get_current_stream = _get_current_stream
cuda.nvrtc = types.SimpleNamespace(getVersion=lambda: (13, 0))


def module() -> types.ModuleType:
    """This file as the ``cupy`` module (one per process: the dispatcher keys its thin
    paths by the array type)."""
    return sys.modules[__name__]


def reset():
    """A fresh device state: device 0, the null stream, recording, nothing recorded yet."""
    STATE.record, STATE.device, STATE.stream = True, 0, Stream.null
    STATE.launches.clear()
    STATE.ops.clear()
    STATE.compiled.clear()


def install(monkeypatch):
    """``sys.modules['cupy']`` is this module for the test, and the backend's caches
    (kernels, launch plans, the dispatcher's per-type thin paths) start empty."""
    from iglu_np import backends
    from iglu_np.backends.cuda import cupy as cb

    me = module()
    monkeypatch.setitem(sys.modules, "cupy", me)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.compiler", compiler)
    monkeypatch.setattr(cb, "_kernels", {})
    monkeypatch.setattr(cb, "_plans", {})
    monkeypatch.setattr(backends, "_FAST", {})
    reset()
    return me
