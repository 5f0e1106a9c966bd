"""Whether Numba CUDA can run here, and the launch constants: nothing imports numba.cuda
before :func:`_cuda` is called."""

from __future__ import annotations

import threading

from .. import toolchain as cuda_toolchain

THREADS = 256  # per block on a GPU; also the shared-memory size of the reduction
SIM_THREADS = 8  # the simulator runs one Python thread per CUDA thread: keep it small
BLOCKS_PER_SM = 32
MIN_BLOCKS = 128

_lock = threading.RLock()
_state: dict = {}


# --------------------------------------------------------------------------- discovery
def handles(array) -> bool:
    """Numba device arrays and any ``__cuda_array_interface__`` object (no import needed)."""
    if getattr(type(array), "__cuda_ndarray__", False):
        return True
    try:
        return hasattr(array, "__cuda_array_interface__")
    except Exception:  # a host tensor type that raises something else than AttributeError
        return False


def _cuda():
    """The toolchain's ``cuda`` module (numba-cuda-mlir where installed, else numba-cuda);
    a RuntimeError naming the fix where it cannot compile (numba-cuda on numpy >= 2.5)."""
    cuda = _state.get("cuda")
    if cuda is None:
        cuda = _state["cuda"] = cuda_toolchain.cuda_module()
    return cuda


def _mlir() -> bool:
    """Whether this process compiles with numba-cuda-mlir (chosen once: the choice looks
    the package up on sys.path, 23 us, and simulator() asks several times per launch)."""
    m = _state.get("mlir")
    if m is None:
        m = _state["mlir"] = cuda_toolchain.choose() == cuda_toolchain.MLIR
    return m


def simulator() -> bool:
    """True under ``NUMBA_ENABLE_CUDASIM=1`` with numba-cuda (kernels run as Python on the
    CPU; numba-cuda-mlir has no simulator)."""
    if _mlir():
        return False
    sim = _state.get("cudasim")
    if sim is None:  # fixed for the process (numba reads the variable at import)
        from numba.cuda.core import config

        sim = _state["cudasim"] = bool(config.ENABLE_CUDASIM)
    return sim


def status():
    """(usable, reason) for ``iglu-np info``."""
    tool = cuda_toolchain.choose()
    why = cuda_toolchain.problem(tool)
    if why is not None:
        return False, why
    mod = "numba_cuda_mlir" if tool == cuda_toolchain.MLIR else "numba_cuda"
    try:
        ver = getattr(__import__(mod), "__version__", "?")
    except Exception as e:  # ImportError, or OSError from a wheel built for another Python
        return False, f"{tool} fails to import ({type(e).__name__}: {e})"
    ver = f"{tool} {ver}"
    try:
        cuda = _cuda()
        if simulator():
            return True, f"{ver}, CUDA simulator (NUMBA_ENABLE_CUDASIM=1): slow, for tests"
        dev = cuda.get_current_device()
    except Exception as e:
        import ctypes.util

        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if ctypes.util.find_library("cuda") is None:
            msg = "no NVIDIA driver: libcuda not found"
        return False, f"{ver} installed, but no usable CUDA GPU/driver ({msg})"
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    cc = ".".join(map(str, dev.compute_capability))
    note = ""
    if _mlir():
        import importlib.util

        note = (
            "; broadcast or strided operands run the CuPy kernels"
            if importlib.util.find_spec("cupy")
            else "; C-contiguous operands of the result's shape only (install cupy for the rest)"
        )
    return True, f"{ver}, {name} (compute capability {cc}){note}"
