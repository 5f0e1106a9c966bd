"""CuPy backend: one ``cupy.ElementwiseKernel`` per activation and kernel kind.

The math is the C++ generated from the spec's Python kernels (the same code the CPU ufuncs
compile, elementary functions included) after the prelude header, used as the kernel
preamble; the body is one line (see :mod:`iglu_np.backends.codegen.cxx`, which builds the exact
strings CI compiles with NVRTC and tests through g++), compiled with
:data:`~iglu_np.backends.codegen.cxx.NVRTC_OPTIONS` (no FMA contraction, no flush to zero), so the
results equal the CPU's bit for bit. Kernels are named
``iglu_np_<name>_<fwd|dx|d<param>|bwd|bwd<param>>``, built on first use and memoised per
device and compute dtype. CuPy itself handles broadcasting, strided inputs and the
current stream.

Contiguous operands of one shape, dtype and memory order (C or F), 16-byte aligned, with
scalar parameters (the common case) take a RawKernel instead that loads and stores
128-bit vectors (:func:`~iglu_np.backends.codegen.cxx.vector_kernel_source`, the same device
function): an ElementwiseKernel does not reach the copy bandwidth on an H100 (1.7x the copy
time for float32, 3x for float16), a vector RawKernel does.

* float16 and bfloat16 (``ml_dtypes.bfloat16``: CuPy >= 14 knows it when ml_dtypes is
  installed) data is read as such, computed in float32 and written as such, rounded once
  to nearest even: bfloat16 results are the CPU's float32 result cast by ml_dtypes, bit
  for bit (NaN stays NaN, its payload is not kept); parameter gradients are float32;
* integer/bool data computes in float64 (as on the CPU);
* parameters: Python/numpy scalars are passed by value, host arrays are copied to the
  device (they are parameter-sized), device arrays are used in place. Device parameter
  arrays are validated against the domain through a host copy (a synchronisation);
* a kernel that uses Python the C++ translator does not know raises
  :class:`~iglu_np.backends.codegen.cxx.NoCxxError` naming the function and line.

cupy is imported only when a CuPy array shows up (or ``backend="cupy"`` is asked for).
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..._dtypes import F32, F64
from ..._dtypes import F32_MAX as _F32_MAX
from ..._dtypes import F32_TINY as _F32_TINY
from ..._dtypes import beyond_f32 as _beyond_f32
from ..._dtypes import is_bf16 as _is_bf16
from ..._kinds import BWD_ALL
from ..._params import values as _values
from .._call import Target, prepare
from ..codegen import cxx
from . import _interop

__all__ = [
    "handles",
    "status",
    "run",
    "backward_params",
    "backward_all",
    "fast_path",
    "get_kernel",
    "get_vector_kernel",
    "vector_plan",
]

THREADS = 256
BLOCKS_PER_SM = 32
FUSED_BLOCKS_PER_SM = 4  # the fused backward: one float64 partial per thread and parameter

_lock = threading.RLock()
_kernels: dict = {}


def handles(array) -> bool:
    return type(array).__module__.split(".")[0] == "cupy"


def status():
    """(usable, reason) for ``iglu-np info``."""
    try:
        import cupy
    except ImportError:
        return (
            False,
            "cupy not installed (pip install '.[cuda12]' or '.[cuda13]' in the iglu_np checkout)",
        )
    except Exception as e:  # a broken install (wrong CUDA major) raises other errors
        return False, f"cupy fails to import ({type(e).__name__}: {e})"
    ver = cupy.__version__
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return False, f"cupy {ver} installed, but no usable CUDA GPU/driver ({msg})"
    if n == 0:
        return False, f"cupy {ver} installed, but no CUDA device"
    try:
        major, minor = cupy.cuda.nvrtc.getVersion()
    except Exception as e:
        return False, f"cupy {ver}: NVRTC not loadable ({e}); install the CUDA runtime wheels"
    return True, f"cupy {ver}, {n} device(s), NVRTC {major}.{minor}"


def get_kernel(name: str, kind: str, compute):
    """The memoised ElementwiseKernel of ``kind`` for the current device."""
    import cupy

    from ..._spec import REGISTRY

    compute = np.dtype(compute)

    def build():
        ks = cxx.kernel_source(REGISTRY[name], kind, compute)
        _keep_subnormals()
        return cupy.ElementwiseKernel(
            ks.in_params, ks.out_params, ks.body, ks.name, preamble=ks.preamble, options=OPTIONS
        )

    return _memo((cupy.cuda.Device().id, name, kind, compute.name), build)


def _memo(key, build):
    """``_kernels[key]``, built once (per device: the key holds the device id)."""
    k = _kernels.get(key)
    if k is None:
        with _lock:
            k = _kernels.get(key)
            if k is None:
                k = _kernels[key] = build()
    return k


def get_vector_kernel(name: str, kind: str, data_dtype):
    """The memoised 16-byte-vector RawKernel (:func:`cxx.vector_kernel_source`) for the
    current device."""
    import cupy

    from ..._spec import REGISTRY

    ddt = np.dtype(data_dtype)
    return _memo(
        ("vec", cupy.cuda.Device().id, name, kind, ddt.name),
        lambda: _raw(cupy, cxx.vector_kernel_source(REGISTRY[name], kind, ddt)),
    )


def _raw(cupy, vs):
    """(RawKernel, lanes) of a :class:`cxx.VectorKernelSource`."""
    _keep_subnormals()
    return cupy.RawKernel(vs.source, vs.name, options=OPTIONS), vs.lanes


# CuPy appends "-ftz=true" after the caller's options (cupy.cuda.compiler's
# _compile_with_cache_cuda) and NVRTC honours the last occurrence, so cxx.NVRTC_OPTIONS'
# "--ftz=false" alone is overridden: on an H200, float32 results that should be subnormal
# came back as 0 (22 activations differed from the CPU). Our kernels' options carry a
# marker define (which also keys CuPy's disk cache apart from flushing builds), and for
# those alone the appended flag is dropped where CuPy hands the options to NVRTC.
NO_FTZ_MARK = "-DIGLU_NP_KEEP_SUBNORMALS=1"
OPTIONS = cxx.NVRTC_OPTIONS + (NO_FTZ_MARK,)
_FTZ_ON = ("-ftz=true", "--ftz=true")


def _drop_ftz(options):
    """The options NVRTC gets for a kernel of ours: CuPy's appended FTZ flag removed."""
    options = tuple(options)
    if NO_FTZ_MARK in options:
        options = tuple(o for o in options if o not in _FTZ_ON)
    return options


def _keep_subnormals():
    """Wrap CuPy's NVRTC program compile once so :func:`_drop_ftz` applies (cupy 14 calls
    ``_NVRTCProgram.compile(options)`` last; older CuPy too)."""
    from cupy.cuda import compiler

    prog = compiler._NVRTCProgram
    orig = prog.compile
    if getattr(orig, "_iglu_np_keeps_subnormals", False):
        return

    def compile(self, options=(), *args, **kwargs):
        return orig(self, _drop_ftz(options), *args, **kwargs)

    compile._iglu_np_keeps_subnormals = True
    compile.__wrapped__ = orig
    prog.compile = compile


def _sm_count(cupy) -> int:
    dev = cupy.cuda.Device()
    return _memo(("sms", dev.id), lambda: int(dev.attributes["MultiProcessorCount"]))


def _layout(a):
    """'C' or 'F' for an array contiguous in that order (both for 1-d), else None."""
    f = a.flags
    return "C" if f.c_contiguous else ("F" if f.f_contiguous else None)


def vector_plan(arrs, pargs, out, cdt, odt=None):
    """The data dtype of the vector kernel when every operand allows it (same shape,
    dtype and memory order, contiguous, 16-byte aligned; scalar parameters; ``out``
    likewise or None, and then the result dtype ``odt``, when given, the data's), else
    None. Works on any objects with ``shape``, ``dtype``, ``flags`` and ``data.ptr``
    (CuPy arrays)."""
    if any(np.ndim(p) != 0 or _is_device(p) for p in pargs):
        return None
    ddt = np.dtype(arrs[0].dtype)
    name = cxx.data_dtype_name(ddt)
    # the data must compute in cdt (float16 and bfloat16 in float32)
    if name is None or cxx.DATA_TYPES[name][1] != cxx.C_TYPES.get(np.dtype(cdt)):
        return None
    if out is None and odt is not None and np.dtype(odt) != ddt:
        return None  # the vector kernel writes the data's dtype
    ops = list(arrs) + ([out] if out is not None else [])
    lay = _layout(arrs[0])
    if lay is None:
        return None
    for a in ops:
        if a.shape != arrs[0].shape or np.dtype(a.dtype) != ddt or a.size == 0:
            return None
        la = _layout(a)
        if la is None or (la != lay and a.ndim > 1):
            return None
        if a.data.ptr % cxx.VECTOR_BYTES:
            return None
    return ddt


def _blocks(n, lanes, cap) -> int:
    """Blocks of :data:`THREADS` for a vector kernel over ``n`` elements: one vector per
    thread up to ``cap`` blocks (the kernels loop over the rest)."""
    return max(1, min(-(-max(1, n // lanes) // THREADS), cap))


def _fused_kernel(cupy, act, ddt):
    """The memoised (RawKernel, lanes) of the fused backward for the current device."""
    return _memo(
        (BWD_ALL, cupy.cuda.Device().id, act.name, ddt.name),
        lambda: _raw(cupy, cxx.fused_backward_source(act.spec, ddt)),
    )


def _overlaps(cupy, o, operands) -> bool:
    """Whether ``o`` shares memory with an operand other than as exactly the same view."""
    for a in operands:
        if a is o:
            continue
        if cupy.may_share_memory(o, a) and not (
            a.data.ptr == o.data.ptr and a.strides == o.strides and a.shape == o.shape
        ):
            return True
    return False


def _run_vector(cupy, act, kind, arrs, pargs, out, ddt, cdt):
    kern, lanes = get_vector_kernel(act.name, kind, ddt)
    o = out if out is not None else cupy.empty_like(arrs[0])  # keeps C or F order
    n = arrs[0].size
    blocks = _blocks(n, lanes, _sm_count(cupy) * BLOCKS_PER_SM)
    kern((blocks,), (THREADS,), (*arrs, o, np.int64(n), *(cdt.type(p) for p in pargs)))
    return o


def _as_cupy(cupy, v):
    if handles(v):
        return v
    if _interop.is_bf16_array(v):  # torch's interface names bfloat16 items only "<V2"
        return _interop.bf16_to_cupy(cupy, v)
    return cupy.asarray(v)  # __cuda_array_interface__: zero-copy


def _is_device(v) -> bool:
    if handles(v):
        return True
    try:
        return hasattr(v, "__cuda_array_interface__")
    except Exception:
        return False


def _check_bf16(cupy, name):
    """bfloat16 kernels need CuPy's bfloat16 type (CuPy >= 14 with ml_dtypes)."""
    try:
        major = int(cupy.__version__.split(".")[0])
    except ValueError:
        return
    if major < 14:
        raise TypeError(
            f"{name}: bfloat16 arrays need CuPy >= 14 (with ml_dtypes) for the cupy "
            f"backend, found CuPy {cupy.__version__}; upgrade cupy or pass float16/float32"
        )


_targets: dict = {}  # cupy module -> its Target


def _target(cupy) -> Target:
    t = _targets.get(cupy)
    if t is None:

        def device_param(v):
            d = _as_cupy(cupy, v)
            return d, cupy.asnumpy(d)

        def param(v, dev, cdt):
            if dev is not None:
                return dev.astype(cdt, copy=False)
            if np.ndim(v) == 0:
                return cdt.type(v)
            return cupy.asarray(v, dtype=cdt)

        def as_cupy(v):
            return _as_cupy(cupy, v)

        t = _targets[cupy] = Target(
            "cupy",
            data=as_cupy,
            device=_is_device,
            host_hint="use cupy.asarray",
            device_param=device_param,
            param=param,
            out=as_cupy,
            out_what="a device array for the cupy backend",
        )
    return t


def _prepare(act, data, params, out=None):
    """``(cupy, call, arrs, split)``: the :class:`~._call.Call` (see :func:`._call.prepare`),
    the data in the compute dtype (16-bit data stay as they are where they compute in
    float32: the kernels widen them) and the float32 split (None, or the device mask and
    the params of :func:`iglu_np._dtypes.f32_split`; see run)."""
    import cupy

    c = prepare(act, data, params, out, _target(cupy))
    arrs = list(c.data)
    if any(_is_bf16(a.dtype) for a in arrs):
        _check_bf16(cupy, act.name)
    cdt = c.compute
    if not (c.output != c.result and cdt == c.result):
        arrs = [a if a.dtype == cdt else a.astype(cdt) for a in arrs]
    split = c.split
    if split is not None:
        # a float32 call widened by an array parameter only some of whose values lie beyond
        # float32: (the mask of those elements on the device, the params with the others)
        split = cupy.asarray(split[0]), dict(zip(act.param_names, split[1]))
    return cupy, c, arrs, split


def backward_all(act, data, params, out):
    """grad_x and every parameter's gradient from one read of x and grad_out (the fused
    vector kernel, :func:`cxx.fused_backward_source`) when the operands allow 128-bit
    accesses and every parameter is a scalar; None otherwise (two passes then)."""
    if not act.param_names:
        return None
    # out= checked as run checks it (the two passes would raise the same errors)
    cupy, c, arrs, _ = _prepare(act, data, params, out)
    cdt, odt, pargs, shape, out, o = c.compute, c.output, c.params, c.shape, c.out, c.out_operand
    if o is not None and _overlaps(cupy, o, arrs):
        return None  # the two-pass path buffers it
    ddt = vector_plan(arrs, pargs, o, cdt, odt) if math.prod(shape) else None
    if ddt is None or len(arrs) != 2:
        return None
    kern, lanes = _fused_kernel(cupy, act, ddt)
    y = o if o is not None else cupy.empty_like(arrs[0])
    n = arrs[0].size
    blocks = _blocks(n, lanes, _sm_count(cupy) * FUSED_BLOCKS_PER_SM)
    part = cupy.empty((len(pargs), blocks * THREADS), dtype=np.float64)
    kern((blocks,), (THREADS,), (*arrs, y, part, np.int64(n), *(cdt.type(p) for p in pargs)))
    sums = part.sum(axis=1)
    grads = {p: sums[i].astype(cdt) for i, p in enumerate(act.param_names)}
    return (out if out is not None else y), grads


def _grad_dtype(odt):
    """Parameter gradients of 16-bit data are float32 (a sum rounded to float16 or
    bfloat16 would lose what the float64 accumulation kept)."""
    return F32 if odt.itemsize == 2 else odt


def backward_params(act, data, params) -> dict:
    """Each parameter's gradient on CuPy arrays, reduced to its shape (in float64)."""
    cupy, c, arrs, split = _prepare(act, data, params)
    cdt, odt, pargs, shape = c.compute, c.output, c.params, c.shape
    if split is not None:  # float32 where the parameters allow (see run)
        _, c32, arrs32, _ = _prepare(act, data, split[1])
        pargs32 = c32.params
    res = {}
    for i, p in enumerate(act.param_names):
        full = cupy.empty(shape, dtype=cdt)
        get_kernel(act.name, "bwd_" + p, cdt)(*arrs, *pargs, full)
        if split is not None:
            narrow = cupy.empty(shape, dtype=F32)
            get_kernel(act.name, "bwd_" + p, F32)(*arrs32, *pargs32, narrow)
            full = cupy.where(split[0], full, narrow.astype(F64))
        pshape = np.shape(pargs[i])
        nlead = len(shape) - len(pshape)
        axes = tuple(range(nlead)) + tuple(
            nlead + j for j, n in enumerate(pshape) if n == 1 and shape[nlead + j] != 1
        )
        # float64 accumulation, as in the Numba CUDA backend
        s = full.sum(axis=axes, dtype=np.float64, keepdims=True) if axes else full
        res[p] = s.reshape(pshape).astype(_grad_dtype(odt))
    return res


def run(act, kind, data, params, out):
    """Compute ``kind`` of ``act`` on CuPy arrays (see iglu_np.backends)."""
    name = act.name
    cupy, c, arrs, split = _prepare(act, data, params, out)
    cdt, odt, pargs, shape, out, o = c.compute, c.output, c.params, c.shape, c.out, c.out_operand
    if o is not None and _overlaps(cupy, o, [*arrs, *(p for p in pargs if _is_device(p))]):
        # out shares memory with an operand other than as the very same view: compute into
        # a temporary and copy, numpy's buffered semantics (kernels read and write in any order)
        res = run(act, kind, data, params, None)
        o[...] = res
        return out
    if split is not None:
        # an array parameter with values both within and beyond float32: float64 only for
        # the elements beyond, each element's bits those it has alone (the CPU's rule)
        wide = cupy.empty(shape, dtype=odt)
        if wide.size:
            get_kernel(name, kind, cdt)(*arrs, *pargs, wide)
        res = cupy.where(split[0], wide, run(act, kind, data, split[1], None))
        if o is None:
            return res
        o[...] = res
        return out
    ddt = vector_plan(arrs, pargs, o, cdt, odt) if math.prod(shape) else None
    if ddt is not None:  # contiguous, aligned, scalar parameters: 128-bit accesses
        o = _run_vector(cupy, act, kind, arrs, pargs, o, ddt, cdt)
        return out if out is not None else o
    if o is None:
        o = cupy.empty(shape, dtype=odt)
    if o.size:
        get_kernel(name, kind, cdt)(*arrs, *pargs, o)
    return out if out is not None else o


# --------------------------------------------------------------------------- thin path
# The general path above costs several times a kernel launch in Python per small call
# (_prepare's dtype rules, vector_plan, the overlap checks, empty_like; tools/gpu_diag.py
# and tools/gpu_host_overhead.py measure both paths). The thin path
# takes the common case with a few attribute reads and one dict lookup, keyed by what its
# checks decide: (activation, kind, dtype, current device). Its checks admit one layout
# class (every operand C-contiguous, 16-byte aligned, of x's shape and dtype; out= None,
# x or g itself, or an array that does not overlap them) and one parameter class (Python
# or numpy scalars, or 0-d numpy arrays, within float32's range where the data computes
# in float32), so these need no place in the key. The plan behind the key holds what the
# general path would use there: the same memoised RawKernel, its lanes, the block cap of
# the grid and the parameters' scalar type. Anything else returns None and the general
# path decides, and raises the errors; the parameters' domain checks run here (the same
# :func:`iglu_np._params.values`). The kernel launches on the current stream, as CuPy
# launches do: no stream is kept in a plan.
_plans: dict = {}
_SCALAR_PARAMS = frozenset((float, int, np.float16, np.float32, np.float64))


class _ThinPlan:
    """What the thin path needs for one (activation, kind, dtype, device)."""

    __slots__ = ("cap", "compute", "defaults", "f32", "kernel", "lanes", "last", "scalar")

    def __init__(self, kernel, lanes, cap, compute, defaults):
        self.kernel, self.lanes, self.cap = kernel, lanes, cap  # cap: the grid's block cap
        self.compute, self.scalar = compute, compute.type  # the parameters' scalar type
        self.f32 = compute == F32  # parameters beyond float32 go to the general path
        self.defaults = defaults  # the default parameters' arguments (None: beyond float32)
        self.last = (-1, None, None)  # (n, grid, n as int64) of the last call


def _thin_plan(cupy, act, kind, dt):
    """The :class:`_ThinPlan` for data of dtype ``dt``, or False where the vector kernels
    do not take that dtype. Raises what the general path raises for it (bfloat16 on a
    CuPy < 14, a kernel that does not translate to C++)."""
    name = cxx.data_dtype_name(dt)
    if name is None:
        return False
    if _is_bf16(dt):
        _check_bf16(cupy, act.name)
    cdt = F64 if name == "float64" else F32  # float16 and bfloat16 compute in float32
    if kind == BWD_ALL:
        kern, lanes = _fused_kernel(cupy, act, dt)
        cap = _sm_count(cupy) * FUSED_BLOCKS_PER_SM
    else:
        kern, lanes = get_vector_kernel(act.name, kind, dt)
        cap = _sm_count(cupy) * BLOCKS_PER_SM
    beyond = cdt == F32 and _beyond_f32(act.defaults) is not None
    return _ThinPlan(kern, lanes, cap, cdt, None if beyond else [cdt.type(v) for v in act.defaults])


def fast_path(array):
    """The thin per-call path for arrays of ``type(array)`` (the dispatcher keeps it per
    array type): ``(run, backward_all)``, with the signatures of :func:`run` and
    :func:`backward_all`, returning None wherever the general path has to decide; None
    for a type it does not take (only ``cupy.ndarray``, of a CuPy that exposes its
    contiguity flag as an attribute)."""
    import cupy

    nd = cupy.ndarray
    if type(array) is not nd or not hasattr(array, "_c_contiguous"):
        return None
    return _thin(cupy)


def _thin(cupy):
    nd = cupy.ndarray
    current_device = cupy.cuda.runtime.getDevice
    plans = _plans
    scalars = _SCALAR_PARAMS
    i64 = np.int64
    vb = cxx.VECTOR_BYTES
    f32_max, f32_tiny = _F32_MAX, _F32_TINY

    def plan(act, kind, dt):
        key = (act, kind, dt, current_device())
        p = plans.get(key)
        if p is None:
            with _lock:
                p = plans.get(key)
                if p is None:
                    p = plans[key] = _thin_plan(cupy, act, kind, dt)
        return p

    def arguments(act, params, p):
        """The parameters as kernel arguments (validated), or None for the general path."""
        if not params:
            return p.defaults
        for v in params.values():
            t = type(v)
            if t not in scalars and not (t is np.ndarray and v.ndim == 0):
                return None
        vals = _values(act, params)  # the domain checks and their errors
        if p.f32:  # beyond float32's range the general path computes in float64
            for v in vals:
                a = abs(float(v))
                if a > f32_max or (a < f32_tiny and a != 0):
                    return None
        ct = p.scalar
        return [ct(v) for v in vals]

    def grid(p, n):
        last = p.last
        if last[0] == n:
            return last[1], last[2]
        last = p.last = (n, (_blocks(n, p.lanes, p.cap),), i64(n))
        return last[1], last[2]

    def operands(data, out):
        """(x, g or None, out or None, shape) when every operand is in the thin path's
        layout class, else None."""
        x = data[0]
        if type(x) is not nd or not x._c_contiguous:
            return None
        px = x.data.ptr
        if px % vb or not x.size:
            return None
        shape, dt = x.shape, x.dtype
        g = None
        if len(data) == 2:
            g = data[1]
            if (
                type(g) is not nd
                or g.dtype is not dt
                or not g._c_contiguous
                or g.data.ptr % vb
                or g.shape != shape
            ):
                return None
        if out is not None:
            if (
                type(out) is not nd
                or out.dtype is not dt
                or not out._c_contiguous
                or out.shape != shape
            ):
                return None
            po = out.data.ptr
            if po % vb:
                return None
            # out may be x or g itself (the same address, shape and dtype: elementwise in
            # place); any other overlap goes to the general path, which buffers it
            nb = x.nbytes
            if po != px and po < px + nb and px < po + nb:
                return None
            if g is not None:
                pg = g.data.ptr
                if po != pg and po < pg + nb and pg < po + nb:
                    return None
        return x, g, out, shape

    def run_thin(act, kind, data, params, out):
        ops = operands(data, out)
        if ops is None:
            return None
        x, g, o, shape = ops
        p = plan(act, kind, x.dtype)
        if p is False:
            return None
        args = arguments(act, params, p)
        if args is None:
            return None
        if o is None:
            o = nd(shape, x.dtype)
        blocks, n = grid(p, x.size)
        if g is None:
            p.kernel(blocks, (THREADS,), (x, o, n, *args))
        else:
            p.kernel(blocks, (THREADS,), (x, g, o, n, *args))
        return o

    def backward_all_thin(act, data, params, out):
        if not act.param_names or isinstance(out, tuple):
            return None
        ops = operands(data, out)
        if ops is None or ops[1] is None:
            return None
        x, g, o, shape = ops
        p = plan(act, BWD_ALL, x.dtype)
        if p is False:
            return None
        args = arguments(act, params, p)
        if args is None:
            return None
        y = o if o is not None else nd(shape, x.dtype)
        blocks, n = grid(p, x.size)
        part = cupy.empty((len(args), blocks[0] * THREADS), dtype=np.float64)
        p.kernel(blocks, (THREADS,), (x, g, y, part, n, *args))
        sums = part.sum(axis=1)
        cdt = p.compute
        return y, {nm: sums[i].astype(cdt) for i, nm in enumerate(act.param_names)}

    return run_thin, backward_all_thin
