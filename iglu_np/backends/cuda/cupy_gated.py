"""The gated forms on CuPy arrays: one ElementwiseKernel per op over the gate and up
views (:mod:`iglu_np.backends.codegen.gated_cxx`), compiled with the activations' NVRTC
options, memoised per device, spec, op and compute dtype.

:func:`forward` and :func:`backward` take float32/float64 CuPy operands of one dtype
and scalar parameters within its range; they return None for anything else, which
:mod:`iglu_np._gated` then composes from the activation's CuPy kernels (the same bits).
"""

from __future__ import annotations

import numpy as np

from ..._dtypes import fused_dtype, typed
from ..._spec import REGISTRY
from ..codegen.gated_cxx import gated_kernel_source
from . import cupy as _cupy_backend

__all__ = ["backward", "forward", "kernel"]


def kernel(name: str, op: str, compute):
    """The memoised ElementwiseKernel of gated op ``op`` of activation ``name``."""
    import cupy

    compute = np.dtype(compute)

    def build():
        ks = gated_kernel_source(REGISTRY[name], op, compute)
        _cupy_backend._keep_subnormals()
        return cupy.ElementwiseKernel(
            ks.in_params,
            ks.out_params,
            ks.body,
            ks.name,
            preamble=ks.preamble,
            options=_cupy_backend.OPTIONS,
        )

    key = (cupy.cuda.Device().id, "gated", name, op, compute.name)
    return _cupy_backend._memo(key, build)


def forward(name, gate, up, lim, shift, vals, out=None):
    """``act(gate) * up`` into ``out`` (a new array when None), or None."""
    dt = fused_dtype([gate.dtype, up.dtype], vals)
    if dt is None:
        return None
    import cupy

    if out is None:
        out = cupy.empty(np.broadcast_shapes(gate.shape, up.shape), dt)
    kernel(name, "fwd", dt)(gate, up, *typed(dt, lim, shift, *vals), out)
    return out


def backward(name, gate, up, go, lim, shift, vals, dg, du):
    """The gate's and up's gradients written into ``dg`` and ``du`` (views of one array
    or two arrays of the broadcast shape); False where the kernel does not apply."""
    dt = fused_dtype([gate.dtype, up.dtype, go.dtype], vals)
    if dt is None or dg.dtype != dt or du.dtype != dt:
        return False
    kernel(name, "bwd", dt)(gate, up, go, *typed(dt, lim, shift, *vals), dg, du)
    return True
