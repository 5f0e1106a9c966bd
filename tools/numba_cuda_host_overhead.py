"""Host-side time of one small Numba CUDA backend call, without a GPU.

    python tools/numba_cuda_host_overhead.py [--n 1024] [--calls 20000]

The Python work the ``numba_cuda`` backend does before it hands a launch to the
toolchain, measured with the launch and the output allocation stubbed: fake device
arrays (``__cuda_array_interface__`` objects at 256-byte-aligned addresses) go through
the public API (``iglu_np.iglu(x, out=y, backend="numba_cuda")``) to the thin per-call
path, whose pointer kernel is replaced by a no-op launcher. What a real call adds on a
GPU -- the toolchain's launch (numba-cuda's argument marshalling and cuLaunchKernel) and,
without ``out=``, the allocation from the input library's pool -- is not measured here;
``tools/gpu_diag.py`` times whole calls on a GPU.

Prints one line per case: microseconds per call (best of 5 repeats).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402


class FakeDeviceArray:
    """Just enough of a CUDA array interface for the thin path (never dereferenced)."""

    def __init__(self, n, dtype=np.float32, address=1 << 20):
        self.__cuda_array_interface__ = {
            "shape": (n,),
            "typestr": np.dtype(dtype).str,
            "strides": None,
            "data": (address, False),
            "version": 3,
            "stream": None,
        }


class _NoLaunch:
    """Stands in for a configured launch: counts calls, launches nothing."""

    calls = 0

    def __call__(self, *args):
        _NoLaunch.calls += 1


class _NoKernel:
    def __getitem__(self, config):
        return _NoLaunch()


def stub(nc, n, dtype):
    """Replace what needs a GPU (and a toolchain): the compiled pointer kernel, the
    stream objects, the SM count, and the output allocation."""
    nc._discovery._cuda = lambda: None
    nc._discovery._mlir = lambda: False
    nc.simulator = lambda: False
    nc._compile._pointer_kernel = lambda *a, **k: _NoKernel()
    nc._thin_path._launch_stream = lambda cuda, s: None
    nc._discovery._state["sms"] = 132
    out = FakeDeviceArray(n, dtype, address=1 << 24)
    nc._thin_path._allocator = lambda cuda, template, odt: lambda shape, x, stream: (out, 1 << 24)


def best_us(fn, calls, repeats=5):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=20000)
    a = ap.parse_args(argv)

    import iglu_np
    from iglu_np import _params
    from iglu_np.backends.cuda import numba_cuda as nc

    stub(nc, a.n, np.float32)
    x = FakeDeviceArray(a.n)
    g = FakeDeviceArray(a.n, address=1 << 22)
    y = FakeDeviceArray(a.n, address=1 << 24)
    act = _params.of("iglu")
    rows = {
        "numba_cuda.run(fwd, out=y)": lambda: nc.run(act, "fwd", (x,), {}, y),
        "numba_cuda.run(fwd, sigma=1.5, out=y)": lambda: nc.run(
            act, "fwd", (x,), {"sigma": 1.5}, y
        ),
        "numba_cuda.run(fwd), new output": lambda: nc.run(act, "fwd", (x,), {}, None),
        "numba_cuda.run(bwd, out=y)": lambda: nc.run(act, "bwd", (x, g), {}, y),
        "iglu_np.iglu(x, out=y, backend='numba_cuda')": lambda: iglu_np.iglu(
            x, out=y, backend="numba_cuda"
        ),
        "iglu_np.iglu(x, backend='numba_cuda')": lambda: iglu_np.iglu(x, backend="numba_cuda"),
    }
    before = _NoLaunch.calls
    for label, fn in rows.items():
        print(f"  {label:46s} {best_us(fn, a.calls):7.2f} us per call")
    assert _NoLaunch.calls > before, "the thin path did not run (nothing was launched)"
    return 0


if __name__ == "__main__":
    sys.exit(main())
