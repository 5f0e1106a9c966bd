import os

import numpy as np
import pytest

import iglu_np

NAMES = list(iglu_np.ACTIVATIONS)
DTYPES = [np.float32, np.float64]


def pytest_collection_modifyitems(config, items):
    gpu = _gpu_available()
    skip = pytest.mark.skip(reason="needs a real NVIDIA GPU (none detected)")
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(skip)


def _gpu_available() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:
        return False
