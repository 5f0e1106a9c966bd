"""Host-side Python time of one CuPy-backend call, measured without a GPU.

The kernel launch is stubbed, so what is timed is the Python iglu_np runs around it: the
thin per-call path (``cupy_backend.fast_path``) against the general path (``_prepare``,
``vector_plan``, the overlap checks), both through the public call
``iglu_np.<act>(x, out=y)`` on 1,024 float32 elements. Two modes:

* ``fake`` (always): the test double ``tests/fake_cupy.py`` as ``cupy``; its arrays are
  plain Python objects, so attribute reads cost what CuPy's Cython attributes cost, and
  its allocation (``out=None`` rows) is a Python constructor, not CuPy's memory pool;
* ``real`` (when cupy imports here): real ``cupy.ndarray`` objects over a made-up device
  address (``cupy.cuda.UnownedMemory``; nothing is allocated or launched), the thin path
  only (the general path needs a device), ``out=`` given.

Neither includes CuPy's own launch (``RawKernel.__call__``, about 7.7 us on an H100 by
itself) or anything on the device: ``tools/gpu_diag.py`` and ``iglu-np bench --device
gpu`` measure the real per-call time on a GPU. Run from the checkout:
``python tools/gpu_host_overhead.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

N = 1024


def _per_call_us(fn, calls, rounds=5) -> float:
    """Best of ``rounds`` means over ``calls`` calls, in microseconds."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    return best


def fake_rows(calls):
    """(label, thin us, general us) rows with the fake cupy."""
    from tests import fake_cupy as fc

    sys.modules["cupy"], sys.modules["cupy.cuda"] = fc, fc.cuda
    sys.modules["cupy.cuda.compiler"] = fc.compiler
    import iglu_np
    from iglu_np import backends

    fc.reset()
    fc.STATE.record = False
    x, g, y = (fc.ndarray(N, np.float32) for _ in range(3))
    iglu_np.iglu(x, out=y)  # the dispatcher notes the thin path for fake arrays
    thin = backends._FAST[fc.ndarray]
    general = (thin[0], None, None)
    cases = {
        "iglu(x, out=y)": lambda: iglu_np.iglu(x, out=y),
        "iglu(x, sigma=2.0, out=y)": lambda: iglu_np.iglu(x, sigma=2.0, out=y),
        "iglu(x, sigma=np.float32(2), out=y)": lambda: iglu_np.iglu(
            x, sigma=np.float32(2.0), out=y
        ),
        "gelu(x, out=y)": lambda: iglu_np.gelu(x, out=y),
        "iglu.backward(x, g, out=y)": lambda: iglu_np.iglu.backward(x, g, out=y),
        "iglu(x) (fake allocation)": lambda: iglu_np.iglu(x),
        "iglu.backward_all(x, g, out=y)": lambda: iglu_np.iglu.backward_all(x, g, out=y),
    }
    rows = []
    for label, fn in cases.items():
        backends._FAST[fc.ndarray] = thin
        t = _per_call_us(fn, calls)
        backends._FAST[fc.ndarray] = general
        gen = _per_call_us(fn, calls)
        rows.append((label, t, gen))
    backends._FAST[fc.ndarray] = thin
    for m in ("cupy", "cupy.cuda", "cupy.cuda.compiler"):
        sys.modules.pop(m, None)
    return rows


def real_rows(calls):
    """(label, thin us) rows with real cupy arrays (no device: nothing is launched)."""
    try:
        import cupy
        from cupy.cuda import memory
    except ImportError as e:
        return None, f"cupy does not import here ({e})"
    import iglu_np
    from iglu_np import _params, backends
    from iglu_np.backends.cuda import cupy as cb

    cupy.cuda.runtime.getDevice = lambda: 0  # no driver here: device 0 is "current"

    def arr(i):
        mem = memory.UnownedMemory(0x7F00_0000_0000 + i * 0x10000, N * 4, None, device_id=0)
        return cupy.ndarray((N,), np.float32, memptr=memory.MemoryPointer(mem, 0))

    x, g, y = arr(0), arr(1), arr(2)

    def stub(grid, block, args):  # what RawKernel.__call__ receives; the launch itself is left out
        pass

    f32 = np.dtype(np.float32)
    for name, kind in (("iglu", "fwd"), ("iglu", "bwd"), ("gelu", "fwd")):
        act = _params.of(name)
        cb._plans[(act, kind, f32, 0)] = cb._ThinPlan(
            stub, 4, 132 * cb.BLOCKS_PER_SM, f32, [np.float32(v) for v in act.defaults]
        )
    backends._FAST[cupy.ndarray] = ("cupy", *cb.fast_path(x))
    cases = {
        "iglu(x, out=y)": lambda: iglu_np.iglu(x, out=y),
        "iglu(x, sigma=2.0, out=y)": lambda: iglu_np.iglu(x, sigma=2.0, out=y),
        "gelu(x, out=y)": lambda: iglu_np.gelu(x, out=y),
        "iglu.backward(x, g, out=y)": lambda: iglu_np.iglu.backward(x, g, out=y),
    }
    return [(label, _per_call_us(fn, calls)) for label, fn in cases.items()], cupy.__version__


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--calls", type=int, default=20000, help="calls per timing round (default 20000)"
    )
    args = ap.parse_args(argv)
    print(
        f"Host-side Python per call, {N} float32 elements, kernel launch stubbed "
        "(best of 5 rounds; no device time):"
    )
    print(f"  {'call (fake cupy)':40s} {'thin us':>9s} {'general us':>11s}")
    for label, t, gen in fake_rows(args.calls):
        print(f"  {label:40s} {t:9.2f} {gen:11.2f}")
    rows, ver = real_rows(args.calls)
    if rows is None:
        print(f"real cupy arrays: skipped, {ver}")
    else:
        print(f"  {'call (real cupy ' + ver + ' arrays)':40s} {'thin us':>9s}")
        for label, t in rows:
            print(f"  {label:40s} {t:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
