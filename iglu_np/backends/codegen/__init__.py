"""Code generation shared by the targets: the C++ translation of the specs' Python
kernels (:mod:`.cxx_translate`), the CuPy kernel sources built from it (:mod:`.cxx`) and
the rebinding of kernels' globals for a Numba target (:mod:`._rebind`). Pure text and
Python objects: nothing here compiles or needs a GPU."""
