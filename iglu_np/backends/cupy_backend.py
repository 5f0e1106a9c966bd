"""CuPy backend: one ``cupy.ElementwiseKernel`` per activation and kernel kind.

The math is the spec's C++ (``cxx=``) after the prelude header, used as the kernel
preamble; the body is one line (see :mod:`iglu_np.backends.cxx`, which builds the exact
strings CI compiles with NVRTC and tests through g++). Kernels are named
``iglu_np_<name>_<fwd|dx|d<param>|bwd|bwd<param>>``, built on first use and memoised per
device and compute dtype. CuPy itself handles broadcasting, strided inputs and the
current stream.

* float16 data is read as float16, computed in float32 and written as float16;
* integer/bool data computes in float64 (as on the CPU);
* parameters: Python/numpy scalars are passed by value, host arrays are copied to the
  device (they are parameter-sized), device arrays are used in place. Device parameter
  arrays are validated against the domain through a host copy (a synchronisation);
* an activation whose spec has no C++ (every built-in one has; a newly added one may not)
  same CuPy arrays (zero-copy), when numba-cuda is installed.

cupy is imported only when a CuPy array shows up (or ``backend="cupy"`` is asked for).
"""
from __future__ import annotations

import threading

import numpy as np

from . import cxx

__all__ = ["handles", "status", "run", "get_kernel"]

_lock = threading.RLock()
_kernels: dict = {}
_DATA_NAMES = ("x", "grad_out")


def handles(array) -> bool:
    return type(array).__module__.split(".")[0] == "cupy"


def status():
    """(usable, reason) for ``iglu-np info``."""
    try:
        import cupy
    except ImportError:
        return False, "cupy not installed (pip install 'iglu-np[cuda12]' or '[cuda13]')"
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

    from .._spec import REGISTRY

    compute = np.dtype(compute)
    dev = cupy.cuda.Device().id
    key = (dev, name, kind, compute.name)
    k = _kernels.get(key)
    if k is None:
        with _lock:
            k = _kernels.get(key)
            if k is None:
                ks = cxx.kernel_source(REGISTRY[name], kind, compute)
                k = cupy.ElementwiseKernel(
                    ks.in_params, ks.out_params, ks.body, ks.name,
                    preamble=ks.preamble, options=("--std=c++17",),
                )
                _kernels[key] = k
    return k


def _as_cupy(cupy, v):
    return v if handles(v) else cupy.asarray(v)  # __cuda_array_interface__: zero-copy


def _is_device(v) -> bool:
    if handles(v):
        return True
    try:
        return hasattr(v, "__cuda_array_interface__")
    except Exception:
        return False


def run(act, kind, data, params, out):
    """Compute ``kind`` of ``act`` on CuPy arrays (see iglu_np.backends)."""
    from .._api import _all_half, _compute_dtype, _f32_range_error

    name = act.name
    if not cxx.has_cxx(act.spec):
        try:
            from . import numba_cuda

            import numba_cuda as _nc  # noqa: F401  (the package, not the module above)
        except ImportError:
            raise cxx.NoCxxError(
                f"{name}: no C++ source yet for the CuPy backend, and numba-cuda (which "
                "would run it on the same arrays) is not installed"
            ) from None
        return numba_cuda.run(act, kind, data, params, out)

    import cupy

    for nm, d in zip(_DATA_NAMES, data):
        if not _is_device(d):
            raise TypeError(
                f"{name}: {nm} is a host {type(d).__name__} but the cupy backend needs device "
                "arrays for x and grad_out (use cupy.asarray); parameters may be host values"
            )
    arrs = [_as_cupy(cupy, d) for d in data]
    cdt = None
    for nm, a in zip(_DATA_NAMES, arrs):
        dt = _compute_dtype(name, nm, a.dtype)
        cdt = dt if cdt is None else np.promote_types(cdt, dt)
    half = cdt == np.float32 and _all_half(arrs)
    odt = np.dtype(np.float16) if half else cdt
    if not half:
        arrs = [a if a.dtype == cdt else a.astype(cdt) for a in arrs]

    host_params, dev_params = {}, {}
    for k, v in params.items():
        if _is_device(v):
            dev_params[k] = _as_cupy(cupy, v)
            host_params[k] = cupy.asnumpy(dev_params[k])
        else:
            host_params[k] = v
    vals = act._param_values(host_params)
    if cdt == np.float32:
        _f32_range_error(act, vals, "cupy")
    pargs = []
    for p, v in zip(act.param_names, vals):
        if p in dev_params:
            pargs.append(dev_params[p].astype(cdt, copy=False))
        elif np.ndim(v) == 0:
            pargs.append(cdt.type(v))
        else:
            pargs.append(cupy.asarray(v, dtype=cdt))
    shapes = [a.shape for a in arrs] + [np.shape(a) for a in pargs]
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"{name}: operands with shapes {shapes} do not broadcast together") from None

    if kind == "backward_params":
        if len(arrs) != 2:
            raise TypeError(f"{name}.backward_params needs x and grad_out")
        res = {}
        for i, p in enumerate(act.param_names):
            full = cupy.empty(shape, dtype=cdt)
            get_kernel(name, "bwd_" + p, cdt)(*arrs, *pargs, full)
            pshape = np.shape(pargs[i])
            nlead = len(shape) - len(pshape)
            axes = tuple(range(nlead)) + tuple(
                nlead + j for j, n in enumerate(pshape) if n == 1 and shape[nlead + j] != 1
            )
            # float64 accumulation, as in the Numba CUDA backend
            s = full.sum(axis=axes, dtype=np.float64, keepdims=True) if axes else full
            res[p] = s.reshape(pshape).astype(cdt)
        return res

    if out is not None:
        if isinstance(out, tuple):
            if len(out) != 1:
                raise ValueError(f"{name}: out= must be one array")
            out = out[0]
        if not _is_device(out):
            raise TypeError(f"{name}: out= must be a device array for the cupy backend, got {type(out).__name__}")
        o = _as_cupy(cupy, out)
        if o.shape != tuple(shape):
            raise ValueError(f"{name}: out= has shape {o.shape}, expected {tuple(shape)}")
        if o.dtype.kind != "f":
            raise TypeError(f"{name}: out= must be a floating array, got {o.dtype}")
    else:
        o = cupy.empty(shape, dtype=odt)
    if o.size:
        get_kernel(name, kind, cdt)(*arrs, *pargs, o)
    return out if out is not None else o
