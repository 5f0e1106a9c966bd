"""Diagnostics only a real GPU can give (run by tools/device_check.sh).

1. numba-cuda-mlir layouts: the Numba CUDA kernels run directly (the CuPy hand-off of
   ``numba_cuda._run._needs_cupy`` switched off here) on C-contiguous, strided and broadcast
   operands of 1 to 3 dimensions, against the CPU: on an H200 (numba-cuda-mlir 0.6) a
   per-channel sigma over a strided 3-d x gave wrong values; which layouts do?
2. Where a small Numba CUDA call spends its time: wall time per call against a plain
   numba kernel launch on the same CuPy arrays, then a cProfile of 200 calls on 1,024
   elements.
3. The same for the CuPy backend: the public call (the thin per-call path,
   ``cupy_backend.fast_path``) against the general path and ``cupy.negative``, their
   parts, the raw launch, and the public call's profile.

Prints plain text; needs cupy and a GPU.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import traceback

import numpy as np


def layouts():
    import cupy

    import iglu_np
    from iglu_np.backends.cuda import numba_cuda as nc

    nc._run._needs_cupy = lambda ops, shape: False  # the direct path, whatever the layout
    x3 = np.random.default_rng(0).standard_normal((4, 6, 10)).astype(np.float32) * 3
    s3 = np.linspace(0.5, 3.0, 6).astype(np.float32).reshape(1, 6, 1)
    xd3 = cupy.asarray(x3)
    views = {
        "1-d contiguous": lambda a: a.ravel(),
        "3-d contiguous": lambda a: a,
        "2-d strided": lambda a: a[0][:, ::2],
        "3-d strided": lambda a: a[:, :, ::2],
        "3-d transposed": lambda a: a.transpose(2, 1, 0),
    }
    for label, view in views.items():
        for sigma in (None, "per-channel"):
            if sigma and label.startswith(("1-d", "2-d")):
                continue
            kw_cpu = (
                {}
                if sigma is None
                else {"sigma": s3 if "transposed" not in label else s3.transpose(2, 1, 0)}
            )
            kw_gpu = {k: cupy.asarray(v) for k, v in kw_cpu.items()}
            name = label + (", per-channel sigma" if sigma else "")
            want = iglu_np.iglu(view(x3), **kw_cpu)
            try:
                got = cupy.asnumpy(iglu_np.iglu(view(xd3), backend="numba_cuda", **kw_gpu))
                err = float(np.max(np.abs(got - want)))
                print(f"  {name:40s} max abs diff {err:.3g}  {'ok' if err < 1e-5 else 'WRONG'}")
            except Exception as e:
                print(
                    f"  {name:40s} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                )


def overhead():
    import cupy

    import iglu_np
    from iglu_np.backends.cuda import numba_cuda as nc

    x = cupy.ones(1024, np.float32)
    y = cupy.empty_like(x)
    iglu_np.iglu(x, out=y, backend="numba_cuda")
    # against a plain kernel launch by the same toolchain on the same arrays (target:
    # the backend's call within 1.2x of it)
    cuda = nc._discovery._cuda()

    def plain(a, b):
        i = cuda.grid(1)
        if i < a.shape[0]:
            b[i] = a[i]

    plain_k = cuda.jit(plain)
    blocks = nc._arrays._launch_dims(cuda, x.size)[0]
    rows = {
        "plain numba kernel[...](x, y)": lambda: plain_k[blocks, nc.THREADS](x, y),
        "iglu(x, out=y, backend='numba_cuda')": lambda: iglu_np.iglu(
            x, out=y, backend="numba_cuda"
        ),
        "iglu(x, backend='numba_cuda')": lambda: iglu_np.iglu(x, backend="numba_cuda"),
        "iglu(x[1:], backend='numba_cuda') (general)": lambda: iglu_np.iglu(
            x[1:], backend="numba_cuda"
        ),
    }
    for label, fn in rows.items():
        print(f"  {label:44s} {_wall_us(cupy, fn, calls=500):8.2f} us per call")
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        iglu_np.iglu(x, out=y, backend="numba_cuda")
    cupy.cuda.Stream.null.synchronize()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
    print(s.getvalue())


def _wall_us(cupy, fn, calls=3000):
    import time

    fn()
    cupy.cuda.Stream.null.synchronize()
    best = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        cupy.cuda.Stream.null.synchronize()
        best.append((time.perf_counter() - t) / calls * 1e6)
    return min(best)


def cupy_overhead():
    """Where a small CuPy-backend call spends its time: the public call (thin path) against
    the general path, their parts (the vector kernel's launch alone, _prepare) and
    cupy.negative."""
    import cupy

    import iglu_np
    from iglu_np import _params, backends
    from iglu_np.backends.cuda import cupy as cb

    x = cupy.ones(1024, np.float32)
    y = cupy.empty_like(x)
    g = cupy.ones_like(x)
    act = _params.of("iglu")  # what the API hands a backend
    kern, lanes = cb.get_vector_kernel("iglu", "fwd", np.dtype(np.float32))
    n = np.int64(x.size)
    s = np.float32(1.0)
    iglu_np.iglu(x)  # the dispatcher notes the thin path for cupy arrays
    thin_run, thin_all = cb.fast_path(x)
    rows = {
        "cupy.negative(x, out=y)": lambda: cupy.negative(x, out=y),
        "cupy.negative(x)": lambda: cupy.negative(x),
        "raw vector kernel launch": lambda: kern((1,), (cb.THREADS,), (x, y, n, s)),
        "thin path alone (out=y)": lambda: thin_run(act, "fwd", (x,), {}, y),
        "iglu_np.iglu(x, out=y)": lambda: iglu_np.iglu(x, out=y),
        "iglu_np.iglu(x)": lambda: iglu_np.iglu(x),
        "iglu_np.iglu(x, sigma=2.0, out=y)": lambda: iglu_np.iglu(x, sigma=2.0, out=y),
        "iglu_np.iglu(x, backend='cupy')": lambda: iglu_np.iglu(x, backend="cupy"),
        "iglu_np.gelu(x)": lambda: iglu_np.gelu(x),
        "iglu_np.iglu.backward(x, g, out=y)": lambda: iglu_np.iglu.backward(x, g, out=y),
        "iglu_np.iglu.backward_all(x, g)": lambda: iglu_np.iglu.backward_all(x, g),
        "general: cupy_backend._prepare": lambda: cb._prepare(act, (x,), {"sigma": 1.0}),
        "general: cupy_backend.run(out=y)": lambda: cb.run(act, "fwd", (x,), {"sigma": 1.0}, y),
    }
    for label, fn in rows.items():
        print(f"  {label:40s} {_wall_us(cupy, fn):8.2f} us per call")
    # the public call with the thin path switched off: the general path end to end
    entry = backends._FAST.get(cupy.ndarray)
    backends._FAST[cupy.ndarray] = ("cupy", None, None)
    try:
        print(
            f"  {'general: iglu_np.iglu(x, out=y)':40s} "
            f"{_wall_us(cupy, lambda: iglu_np.iglu(x, out=y)):8.2f} us per call"
        )
    finally:
        backends._FAST[cupy.ndarray] = entry
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        iglu_np.iglu(x, out=y)
    cupy.cuda.Stream.null.synchronize()
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(25)
    print(out.getvalue())


def main():
    for title, fn in (
        ("numba-cuda-mlir layouts (direct, no CuPy hand-off):", layouts),
        ("a small CuPy-backend call (1,024 float32), wall time, best of 3:", cupy_overhead),
        (
            "a small Numba CUDA call (1,024 float32): wall time, then 200 calls by own time:",
            overhead,
        ),
    ):
        print(title)
        try:
            fn()
        except Exception:
            traceback.print_exc()


if __name__ == "__main__":
    main()
