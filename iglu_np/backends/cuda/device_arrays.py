"""Foreign CUDA arrays (torch and JAX tensors, anything with ``__cuda_array_interface__`` or a
CUDA ``__dlpack__``) through the CuPy kernels, with no copies.

Each operand is wrapped as a CuPy array over the same memory (``cupy.asarray`` of the
array interface, or ``cupy.from_dlpack``, which orders the producer's stream before
CuPy's), the CuPy backend computes, and new results are handed back to the input's library
the same way (``torch.from_dlpack``, ``jax.dlpack.from_dlpack``); ``out=`` is written in
place. Only when cupy is importable: without it such arrays go to the Numba CUDA backend
(:mod:`iglu_np.backends.cuda.numba_cuda`).

bfloat16 tensors (torch.bfloat16, JAX's bfloat16) become CuPy arrays of
``ml_dtypes.bfloat16`` and back (:mod:`iglu_np.backends.cuda._interop`).
"""

from __future__ import annotations

from ._interop import bf16_to_cupy, is_bf16_array, to_jax, to_torch

__all__ = ["handles", "status", "run", "backward_params", "backward_all", "is_cuda_array"]

_KDL_CUDA = (2, 13)  # DLPack device types: kDLCUDA, kDLCUDAManaged


def is_cuda_array(a) -> bool:
    """A device array of another library (not CuPy, not a Numba device array)."""
    t = type(a)
    if t.__module__.split(".")[0] in ("cupy", "numpy") or getattr(t, "__cuda_ndarray__", False):
        return False
    try:
        if hasattr(a, "__cuda_array_interface__"):
            return True
    except Exception:  # a host tensor that raises on the probe (torch CPU tensors do)
        pass
    try:
        dev = getattr(a, "__dlpack_device__", None)
        return dev is not None and int(dev()[0]) in _KDL_CUDA
    except Exception:
        return False


def handles(a) -> bool:
    if not is_cuda_array(a):
        return False
    try:
        import cupy  # noqa: F401
    except ImportError:
        return False
    return True


def status():
    """(usable, reason) for ``iglu-np info``."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        return False, "cupy not installed: torch/JAX CUDA arrays go to numba_cuda"
    except Exception as e:
        return False, f"cupy fails to import ({type(e).__name__}: {e})"
    return (
        True,
        "torch/JAX/__cuda_array_interface__ CUDA arrays through the CuPy kernels, zero-copy",
    )


def _to_cupy(cupy, a):
    if not is_cuda_array(a):
        return a
    if is_bf16_array(a):
        return bf16_to_cupy(cupy, a)
    try:
        if hasattr(a, "__cuda_array_interface__"):
            return cupy.asarray(a)
    except Exception:
        pass
    return cupy.from_dlpack(a)


def _like(template, res):
    """``res`` (a CuPy array) as an array of ``template``'s library, sharing memory."""
    mod = type(template).__module__.split(".")[0]
    if mod == "torch":
        return to_torch(res)
    if mod in ("jax", "jaxlib"):
        return to_jax(res)
    return res


def _args(cupy, data, params, out):
    cdata = tuple(_to_cupy(cupy, d) for d in data)
    cparams = {k: _to_cupy(cupy, v) for k, v in params.items()}
    cout = None
    if out is not None:
        cout = (
            tuple(_to_cupy(cupy, o) for o in out) if isinstance(out, tuple) else _to_cupy(cupy, out)
        )
    return cdata, cparams, cout


def run(act, kind, data, params, out):
    import cupy

    from . import cupy as cupy_backend

    cdata, cparams, cout = _args(cupy, data, params, out)
    res = cupy_backend.run(act, kind, cdata, cparams, cout)
    return out if out is not None else _like(data[0], res)


def backward_params(act, data, params) -> dict:
    import cupy

    from . import cupy as cupy_backend

    cdata, cparams, _ = _args(cupy, data, params, None)
    res = cupy_backend.backward_params(act, cdata, cparams)
    return {k: _like(data[0], v) for k, v in res.items()}


def backward_all(act, data, params, out):
    import cupy

    from . import cupy as cupy_backend

    cdata, cparams, cout = _args(cupy, data, params, out)
    res = cupy_backend.backward_all(act, cdata, cparams, cout)
    if res is None:
        return None
    gx, grads = res
    gx = out if out is not None else _like(data[0], gx)
    return gx, {k: _like(data[0], v) for k, v in grads.items()}
