"""Numba CUDA backend: numba-cuda-mlir where installed, else numba-cuda
(:mod:`iglu_np.backends.cuda.toolchain` chooses, and says what to install where neither
can compile, e.g. numba-cuda on numpy >= 2.5).

Each spec's scalar kernels (the same Python source as the CPU ufuncs, with the same
elementary functions: iglu_np._vmath's, compiled for the GPU instead of libdevice's) are
compiled as ``cuda.jit(device=True, forceinline=True)`` device functions through
:class:`~iglu_np.backends.codegen._rebind.Rebinder`, and called from explicit grid-stride
``@cuda.jit`` kernels generated per (activation, kind, compute dtype, which parameters
are arrays, number of dimensions):

* 64-bit indexing (``cuda.grid(1)`` is int64, so is the loop bound);
* scalar parameters are kernel arguments; array parameters (per-channel sigma ...) and
  broadcast operands are stride-0 views, so nothing is materialised;
* operands are viewed at the broadcast shape and adjacent dimensions that are contiguous
  in *every* operand are merged: the usual case (same-shape contiguous arrays, scalar
  parameters) runs as a 1-D C-contiguous kernel; strided inputs keep their strides (no
  copies) and index through the few dimensions left;
* the vector form: where the collapsed kernel is 1-D, every operand C-contiguous, of one
  dtype and 16-byte aligned, and the parameters scalars (the usual case), each thread
  loads 16 bytes of each operand per step (4 float32, 2 float64, 8 float16; 4 float16
  under numba-cuda-mlir) with one vector load, computes them, stores them with one
  vector store and strides over the grid; the ``n % lanes`` last elements go to one
  thread each. Other launches (strided, broadcast, views that start mid-vector) take the
  general form;
* a thin per-call path for that usual case (:func:`_thin`): a plan cached per
  (activation, kind, dtypes, array type, parameter values) holds the validated
  parameters and the vector kernel compiled for raw pointers (one signature: no type
  resolution per call), launch configurations are cached, a new output comes from the
  input library's own pool (CuPy's, torch's; Numba's ``device_array`` otherwise), and
  the launch passes integers, not wrapped arrays;
* the launch goes to the input's stream (the ``__cuda_array_interface__`` stream of a
  CuPy array or torch tensor, the bound stream of a Numba array, else the default);
* float16 data is loaded as float16, computed in float32 and stored as float16;
  bfloat16 is refused with a TypeError naming the CuPy backend, which computes it;
* ``backward_params`` is one fused pass per parameter: g * df/dp accumulated in float64
  (per-thread sums, a shared-memory block sum, one atomic per block for a scalar
  parameter; atomics into the parameter-shaped accumulator for an array parameter).

Inputs: Numba device arrays and any object with ``__cuda_array_interface__`` (CuPy,
torch CUDA tensors ...), used in place. Outputs have the input's type when it is CuPy or
torch (zero-copy wrappers), else Numba device arrays.

Nothing here imports numba.cuda before it is needed: ``handles`` and ``status`` work
without it.
"""

from . import _arrays, _compile, _device_functions, _discovery, _run, _sources, _thin_path
from ._arrays import collapse
from ._compile import compile_ptx, offline_device, pointer_signature, signature
from ._device_functions import device_function
from ._discovery import BLOCKS_PER_SM, THREADS, handles, simulator, status
from ._run import backward_all, backward_params, run
from ._sources import kernel_python, lanes

__all__ = [
    "handles",
    "status",
    "run",
    "backward_params",
    "backward_all",
    "device_function",
    "kernel_python",
    "compile_ptx",
    "simulator",
    "signature",
    "pointer_signature",
    "offline_device",
    "collapse",
    "lanes",
    "THREADS",
    "BLOCKS_PER_SM",
    # the layers, for tests and tools that reach inside
    "_arrays",
    "_compile",
    "_device_functions",
    "_discovery",
    "_run",
    "_sources",
    "_thin_path",
]
