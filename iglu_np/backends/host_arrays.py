"""Host arrays of other libraries through the CPU kernels, returned as their own type.

torch CPU tensors, JAX arrays on the CPU and any array whose ``__dlpack_device__`` is the
CPU (array-api-strict, ...) are viewed as numpy arrays over the same memory
(``Tensor.numpy``, ``numpy.asarray`` of a JAX array, else ``numpy.from_dlpack``), computed
by the dispatcher as numpy arrays, and the results handed back as the type of the first
such operand, the convention of scipy.special's and scikit-learn's array-API dispatch:
``torch.from_numpy``; ``jax.device_put``, which keeps a buffer aligned to 64 bytes
without a copy (float32/float64 results are computed into one); the input namespace's
``from_dlpack`` (a numpy array where the input has no ``__array_namespace__``). JAX
without its 64-bit mode holds a float64 result (of integer input) as float32.
Parameters may be such arrays too; ``backward_params``' gradients come back as the
input's type. ``out=`` writes into a torch tensor or a writable DLPack array in place;
JAX arrays are immutable, so ``out=`` on one is refused.

A torch tensor that requires grad is refused, as numpy refuses it (scipy.special's
fallback to numpy raises there too): a result computed on its detached values would
silently cut the autograd graph. ``iglu_np.torch`` has the differentiable operations; a
JAX tracer (inside ``jax.jit``, ``grad``, ``vmap``) is refused pointing to
``iglu_np.jax``. bfloat16 tensors cross as their bits (int16) viewed as
``ml_dtypes.bfloat16``. Types are recognised by their module's name: nothing here imports
torch or JAX.
"""

from __future__ import annotations

import sys

import numpy as np

from .._dtypes import F32, F64, is_bf16
from . import backward_all as _dispatch_backward_all
from . import backward_params as _dispatch_backward_params
from . import run as _dispatch

__all__ = [
    "backward_all",
    "backward_params",
    "fast_path",
    "handles",
    "kind_of",
    "run",
    "status",
    "to_numpy",
    "to_like",
]

_KDL_CPU = 1  # DLPack device type of host memory
_kinds: dict = {}  # type -> "torch" | "jax" | "tracer" | "dlpack" | None


def kind_of(a):
    """The library of ``a``'s type, as this module converts it, or None."""
    t = type(a)
    k = _kinds.get(t, False)
    if k is False:
        k = _kinds[t] = _classify(t)
    return k


def _classify(t):
    if t.__module__.split(".")[0] == "numpy":
        return None
    for c in t.__mro__:
        top = c.__module__.split(".")[0]
        if top == "torch" and c.__name__ == "Tensor":
            return "torch"
        if top == "jax" and c.__name__ == "Tracer":
            return "tracer"
        if top in ("jax", "jaxlib") and c.__name__ in ("Array", "ArrayImpl"):
            return "jax"
    return "dlpack" if hasattr(t, "__dlpack__") and hasattr(t, "__dlpack_device__") else None


def _on_host(a, k) -> bool:
    try:
        if k == "torch":
            return a.is_cpu
        if k == "jax":
            return all(d.platform == "cpu" for d in a.devices())
        return k == "dlpack" and int(a.__dlpack_device__()[0]) == _KDL_CPU
    except Exception:  # noqa: BLE001  (a device query that fails: not a host array)
        return False


def handles(a) -> bool:
    k = kind_of(a)
    if k == "tracer":
        raise TypeError(
            "a JAX tracer (inside jax.jit, grad or vmap): iglu_np's functions "
            "compute on concrete arrays; use iglu_np.jax.<name> there"
        )
    return k is not None and _on_host(a, k)


def status():
    """(usable, detail) for ``iglu-np info``."""
    return True, (
        "torch CPU tensors, JAX CPU arrays, __dlpack__ CPU arrays: the CPU kernels "
        "on their memory, results as the input's type"
    )


def fast_path(a):
    """The dispatcher's per-type path: the same calls, None for an operand of the type that
    is not on the CPU (a torch CUDA tensor after a CPU one)."""

    def thin_run(act, kind, data, params, out):
        k = kind_of(data[0])
        return run(act, kind, data, params, out) if k and _on_host(data[0], k) else None

    def thin_backward_all(act, data, params, out):
        k = kind_of(data[0])
        return backward_all(act, data, params, out) if k and _on_host(data[0], k) else None

    return thin_run, thin_backward_all


# --------------------------------------------------------------------------- conversions
def to_numpy(act, what: str, a):
    """``a`` as a numpy array over its memory where it is a foreign host array, else
    ``a`` itself; a TypeError naming ``what`` where that cannot be done."""
    k = kind_of(a)
    if k is None:
        return a
    if k == "tracer":
        handles(a)
    lib = type(a).__module__.split(".")[0]
    if not _on_host(a, k):
        dev = getattr(a, "device", "another device")
        raise TypeError(
            f"{act.name}: {what} is a {lib} array on {dev}, beside host arrays; "
            "put every operand on one device"
        )
    try:
        if k == "torch":
            if a.requires_grad:
                raise TypeError(
                    f"{act.name}: {what} is a torch tensor that requires grad; iglu_np's "
                    f"functions do not record autograd: use iglu_np.torch.{act.name} (or "
                    "pass .detach() for the values alone)"
                )
            torch = sys.modules["torch"]
            if a.dtype == torch.bfloat16:
                return a.view(torch.int16).numpy().view(_bf16(act))
            return a.numpy()
        if k == "jax":
            return np.asarray(a)  # a read-only view of a CPU buffer
        return np.from_dlpack(a)
    except (RuntimeError, BufferError, ValueError) as e:
        raise TypeError(
            f"{act.name}: {what} ({type(a).__name__} of {lib}) cannot be viewed "
            f"as a numpy array without a copy ({type(e).__name__}: {e})"
        ) from None


def _bf16(act):
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(
            f"{act.name}: bfloat16 tensors need ml_dtypes (pip install ml_dtypes)"
        ) from None
    return np.dtype(ml_dtypes.bfloat16)


def _out(act, out):
    if kind_of(out) in ("jax", "tracer"):
        raise TypeError(
            f"{act.name}: out= is a JAX array, and JAX arrays are immutable; call "
            "without out= (the result is a new JAX array)"
        )
    return to_numpy(act, "out", out)


def _aligned_empty(shape, dt):
    """An uninitialised C-ordered array whose data starts on a 64-byte boundary (what JAX
    adopts without a copy)."""
    n = int(np.prod(shape)) * dt.itemsize
    buf = np.empty(n + 64, np.uint8)
    off = -buf.ctypes.data % 64
    return buf[off : off + n].view(dt).reshape(shape)


def _jax_out(data, params):
    """A 64-byte-aligned ``out`` for a JAX result where its dtype and shape are x's (float32
    or float64 operands of one shape, scalar parameters), else None."""
    x = data[0]
    if type(x) is not np.ndarray or (x.dtype != F32 and x.dtype != F64):
        return None
    if any(
        type(d) is not np.ndarray or d.dtype != x.dtype or d.shape != x.shape for d in data[1:]
    ) or any(np.ndim(v) for v in params.values()):
        return None
    return _aligned_empty(x.shape, x.dtype)


def to_like(like, r):
    """The numpy result ``r`` as an array of ``like``'s library, on the same memory."""
    k = kind_of(like)
    r = np.asarray(r)
    if k == "torch":
        torch = sys.modules["torch"]
        if r.dtype.itemsize == 2 and is_bf16(r.dtype):
            return torch.from_numpy(r.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(r)
    if k == "jax":
        return sys.modules["jax"].device_put(r)
    ns = getattr(like, "__array_namespace__", None)
    if ns is None:
        return r
    xp = ns()
    try:  # on the input's device (a namespace may default to another CPU device)
        return xp.from_dlpack(r, device=like.device)
    except TypeError:  # a namespace older than the 2023.12 standard: no device keyword
        return xp.from_dlpack(r)


def _args(act, data, params):
    """``(like, numpy data, numpy params)``: ``like`` is the first foreign operand."""
    x = data[0]
    if len(data) == 1:
        like, nd = x, (to_numpy(act, "x", x),)
    else:
        g = data[1]
        like = x if kind_of(x) is not None else g
        nd = (to_numpy(act, "x", x), to_numpy(act, "grad_out", g))
    return like, nd, ({k: to_numpy(act, k, v) for k, v in params.items()} if params else params)


# --------------------------------------------------------------------------- backend
def run(act, kind, data, params, out):
    like, nd, npar = _args(act, data, params)
    if out is not None:
        _dispatch(act, kind, nd, npar, _out(act, out))
        return out
    if kind_of(like) == "jax":
        o = _jax_out(nd, npar)
        if o is not None:
            return to_like(like, _dispatch(act, kind, nd, npar, o))
    return to_like(like, _dispatch(act, kind, nd, npar, None))


def backward_params(act, data, params) -> dict:
    like, nd, npar = _args(act, data, params)
    return {k: to_like(like, v) for k, v in _dispatch_backward_params(act, nd, npar).items()}


def backward_all(act, data, params, out):
    like, nd, npar = _args(act, data, params)
    if out is not None:
        o = _out(act, out)
    else:
        o = _jax_out(nd, npar) if kind_of(like) == "jax" else None
    gx, grads = _dispatch_backward_all(act, nd, npar, o)
    gx = out if out is not None else to_like(like, gx)
    return gx, {k: to_like(like, v) for k, v in grads.items()}
