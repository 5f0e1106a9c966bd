"""Threaded loops in a process forked from one that loaded Numba's threading layer.

Numba's threading layers differ after ``fork()``: ``tbb`` and ``workqueue`` start their
threads again in the child, but GNU OpenMP cannot (its pool's threads do not exist there),
and Numba's ``omp`` layer built against it ends any child that starts a parallel region
once the parent has loaded the layer ("Terminating: fork() called from a process already
using GNU OpenMP"; a ``multiprocessing`` fork pool then waits for the lost task forever).
In a process forked after such a load, :data:`threads_lost` is true and the CPU backend
runs every call on the calling thread: the single-thread build of the same loops, so the
results are the same bits. Children keep their threads under a fork-safe layer
(``NUMBA_THREADING_LAYER=tbb`` with ``pip install tbb``, or ``workqueue``) or with the
``forkserver`` and ``spawn`` start methods, whose children load their own layer.

The hook is registered when ``iglu_np`` is imported, so import it before forking: a child
of a parent that loaded GNU OpenMP without ``iglu_np`` cannot tell that it was forked.
This module imports nothing but the standard library.
"""

from __future__ import annotations

import os
import sys

__all__ = ["threads_lost", "unsafe_layer_loaded"]

#: True in a process forked after its parent loaded a threading layer that does not
#: survive ``fork()``: threaded loops must not start there.
threads_lost = False


def unsafe_layer_loaded() -> bool:
    """Whether this process has loaded a Numba threading layer that a forked child
    cannot use (``omp`` on GNU OpenMP; Intel's and LLVM's OpenMP, TBB and workqueue are
    fork-safe). Never loads a layer itself."""
    par = sys.modules.get("numba.np.ufunc.parallel")
    if par is None or not getattr(par, "_is_initialized", False):
        return False
    if getattr(par, "_threading_layer", None) != "omp":
        return False
    omp = sys.modules.get("numba.np.ufunc.omppool")
    # an omp layer without its module in sys.modules cannot be told apart: unsafe
    return getattr(omp, "openmp_vendor", "GNU") == "GNU"


def _after_fork_in_child() -> None:
    global threads_lost
    if unsafe_layer_loaded():
        threads_lost = True


if hasattr(os, "register_at_fork"):  # POSIX; Windows has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
