"""The NVIDIA GPU target: CuPy kernels, Numba CUDA kernels and device arrays.

* :mod:`.cupy`: CuPy's ElementwiseKernel/RawKernel from the translated C++;
* :mod:`.numba_cuda`: Numba CUDA kernels generated from the specs' Python kernels;
* :mod:`.device_arrays`: torch and JAX CUDA arrays through their memory;
* :mod:`.toolchain`: which Numba CUDA toolchain is installed; :mod:`._interop`: bfloat16
  and DLPack conversions between the GPU libraries.

Importing this package imports none of them (and never CuPy or numba.cuda).
"""
