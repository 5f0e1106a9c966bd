import os

import hypothesis
import numpy as np
import pytest

import iglu_np

from .gpu_helpers import NUMBA_CUDA_WITHOUT_ROW_STACK

# Hypothesis draws the same examples on every run (scipy's convention), so CI and the
# README's test command pass or fail reproducibly; IGLU_NP_HYPOTHESIS_PROFILE=random
# explores new examples, and a failure it finds becomes an @example of its test.
hypothesis.settings.register_profile(
    "deterministic", derandomize=True, database=None, deadline=None, print_blob=True
)
hypothesis.settings.register_profile("random", deadline=None, print_blob=True)
hypothesis.settings.load_profile(os.environ.get("IGLU_NP_HYPOTHESIS_PROFILE", "deterministic"))

NAMES = list(iglu_np.ACTIVATIONS)
DTYPES = [np.float32, np.float64]


_GPU_SKIP = "needs a real NVIDIA GPU (none detected)"


def pytest_collection_modifyitems(config, items):
    gpu = _gpu_available()
    skip = pytest.mark.skip(reason=_GPU_SKIP)
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(skip)


# CI installs every test extra (NVRTC, NVVM, g++, dask, sklearn...) and torch's CPU wheel
# (for the comparisons; never a dependency), so there the only acceptable skips are the
# real-GPU one and, on numpy >= 2.5, numba-cuda's offline PTX checks (it cannot compile
# there; numba-cuda-mlir's offline check runs instead): IGLU_NP_STRICT_SKIPS=1 turns any
# other skip (a verification step that silently stopped running) into a failure.
_ALLOWED_SKIPS = (_GPU_SKIP,) + (
    () if hasattr(np, "row_stack") else (NUMBA_CUDA_WITHOUT_ROW_STACK,)
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if (
        rep.skipped
        and os.environ.get("IGLU_NP_STRICT_SKIPS") == "1"
        and not hasattr(rep, "wasxfail")
    ):
        reason = str(rep.longrepr[2] if isinstance(rep.longrepr, tuple) else rep.longrepr)
        if not any(a in reason for a in _ALLOWED_SKIPS):
            rep.outcome = "failed"
            rep.longrepr = f"skipped under IGLU_NP_STRICT_SKIPS=1: {reason}"


def _pin_numba_cuda_without_a_gpu():
    """Where numba-cuda and numba-cuda-mlir are both installed (CI's gpu-verify extra) and
    no GPU is present, the tests' Numba CUDA work (PTX, the simulator) is numba-cuda's:
    mlir needs a GPU to compile (tests/test_mlir_ptx.py asks for it explicitly)."""
    import importlib.util

    if os.environ.get("IGLU_NP_CUDA_TOOLCHAIN"):
        return
    if importlib.util.find_spec("numba_cuda") and importlib.util.find_spec("numba_cuda_mlir"):
        if not _gpu_available():
            os.environ["IGLU_NP_CUDA_TOOLCHAIN"] = "numba-cuda"


def _gpu_available() -> bool:
    """Whether the CUDA driver sees a GPU, asked of libcuda itself: ``numba.cuda`` is
    numba-cuda's, which may be unusable where the chosen toolchain works (numpy >= 2.5)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    n = ctypes.c_int(0)
    return lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0


@pytest.fixture(scope="module")
def nvrtc():
    """NVRTC (the cuda-bindings and nvidia-cuda-nvrtc wheels) or a skip saying why."""
    from . import gpu_helpers as H

    ok, why = H.nvrtc_status()
    if not ok:
        pytest.skip(why)
    return why


_pin_numba_cuda_without_a_gpu()
