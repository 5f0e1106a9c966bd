"""Zero-copy hand-offs between CuPy and torch / JAX CUDA arrays, bfloat16 included.

bfloat16 is ``ml_dtypes.bfloat16`` on the CuPy side (CuPy >= 14 knows it when ml_dtypes
is installed). torch describes a bfloat16 tensor in its CUDA array interface as raw 2-byte
items (``"<V2"``), so its memory is read as uint16 and viewed as bfloat16; bfloat16 results
go back to torch through an int16 DLPack view (a dtype every CuPy exports), viewed as
torch.bfloat16 again. Nothing here imports cupy, torch, JAX or ml_dtypes before a call
needs them.
"""

from __future__ import annotations

import numpy as np

from ..._dtypes import is_bf16

__all__ = ["is_bf16_array", "bf16_to_cupy", "to_torch", "to_jax"]


def is_bf16_array(a) -> bool:
    """Whether ``a`` holds bfloat16: an ``ml_dtypes.bfloat16`` dtype (CuPy, JAX, numpy) or
    ``torch.bfloat16`` (neither library is imported)."""
    dt = getattr(a, "dtype", None)
    return is_bf16(dt) or (type(dt).__module__ == "torch" and str(dt) == "torch.bfloat16")


class _Bits16:
    """The array interface of a 2-byte-item array, with its items described as uint16
    (what any CuPy reads); holds the producer so its memory outlives the view."""

    __slots__ = ("__cuda_array_interface__", "base")

    def __init__(self, cai, base):
        self.__cuda_array_interface__ = dict(cai, typestr="<u2")
        self.__cuda_array_interface__.pop("descr", None)
        self.base = base


def _bf16_dtype():
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(
            "bfloat16 arrays on the GPU need ml_dtypes (pip install ml_dtypes) and CuPy >= 14"
        ) from None
    return np.dtype(ml_dtypes.bfloat16)


def bf16_to_cupy(cupy, a):
    """A bfloat16 CUDA array of another library as a CuPy bfloat16 array, zero-copy."""
    bf16 = _bf16_dtype()
    try:
        cai = a.__cuda_array_interface__
    except Exception:
        cai = None
    try:
        if cai is not None and np.dtype(cai["typestr"]).itemsize == 2:
            return cupy.asarray(_Bits16(cai, a)).view(bf16)
        r = cupy.from_dlpack(a)
        return r if r.dtype == bf16 else r.view(bf16)
    except (TypeError, ValueError, NotImplementedError, BufferError) as e:
        raise TypeError(
            f"a bfloat16 {type(a).__module__.split('.')[0]} array cannot become a CuPy array "
            f"here ({type(e).__name__}: {e}); bfloat16 on the GPU needs CuPy >= 14 with ml_dtypes"
        ) from None


def to_torch(res):
    """A CuPy array as a torch tensor on the same memory (bfloat16 as torch.bfloat16)."""
    import torch

    if is_bf16(res.dtype):
        return torch.from_dlpack(res.view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(res)


def to_jax(res):
    """A CuPy array as a JAX array (bfloat16 as JAX's bfloat16)."""
    import jax

    if is_bf16(res.dtype):
        try:
            return jax.dlpack.from_dlpack(res)
        except Exception:  # a CuPy whose DLPack export does not know bfloat16
            import jax.numpy as jnp

            return jax.lax.bitcast_convert_type(
                jax.dlpack.from_dlpack(res.view(np.int16)), jnp.bfloat16
            )
    return jax.dlpack.from_dlpack(res)
