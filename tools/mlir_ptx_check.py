"""Compile the Numba CUDA kernels with numba-cuda-mlir to PTX without a GPU, and summarise them.

    pip install -e ".[cuda13]"   # or numba-cuda-mlir[cu13] beside iglu_np, in its own venv
    python tools/mlir_ptx_check.py [names,...] [kinds,...]     # default: all; fwd,dx,bwd
    python tools/mlir_ptx_check.py names kinds vector          # the vector form on pointers

numba-cuda-mlir is the default Numba CUDA toolchain where it is installed, but the test
suite's PTX and simulator checks use numba-cuda (CI installs no mlir). This is how to see
that every kernel still compiles through mlir and what its PTX holds. numba-cuda-mlir 0.6
asks the driver for the compute capability before compiling; seeding its cached value
(``numba_cuda_mlir.tools._cached_cc``, a private name) lets it compile for cc 9.0 offline.

One line per kernel and dtype: compile seconds, whether the PTX uses local memory, flushes
subnormals (``.ftz``) or approximate math (libdevice's, a known gap under mlir: see the
README's GPU section), and its counts of fma, float64 and division instructions. Exits 1
if any kernel fails to compile.

With ``vector``: the vector form as the thin per-call path launches it (raw pointers,
float32, float64 and float16 data), one ``VEC`` line per kernel with its counts of vector
and scalar global loads and stores.
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    import numba_cuda_mlir.tools as mlir_tools

    mlir_tools._cached_cc = (9, 0)  # no driver here: compile for sm_90

    from iglu_np._kinds import Kind
    from iglu_np._spec import REGISTRY
    from iglu_np.backends.cuda import numba_cuda as nc

    if not nc._discovery._mlir():
        print("numba-cuda-mlir is not the Numba CUDA toolchain here (IGLU_NP_CUDA_TOOLCHAIN?)")
        return 2
    cu = nc._discovery._cuda()
    names = argv[0].split(",") if argv else sorted(REGISTRY)
    kinds = argv[1].split(",") if len(argv) > 1 else ["fwd", "dx", "bwd"]
    if len(argv) > 2 and argv[2] == "vector":
        return _vector(nc, names, kinds)
    failed = 0
    for name in names:
        spec = REGISTRY[name]
        for kind in kinds:
            kd = Kind.parse(kind)
            for dt, ty in (("float32", cu.float32), ("float64", cu.float64)):
                arr = cu.types.Array(ty, 1, "C")
                args = (
                    [cu.types.int64, arr] + [arr] * kd.times_grad + [ty] * len(spec.params) + [arr]
                )
                t = time.perf_counter()
                try:
                    k = nc._compile._kernel(name, kind, dt, (False,) * len(spec.params), 1)
                    ptx = k.inspect_asm(cu.void(*args))
                except Exception as e:  # report every kernel, then fail
                    failed += 1
                    print(f"FAIL {name} {kind} {dt}: {type(e).__name__}: {str(e)[:300]}")
                    continue
                ops = collections.Counter(
                    ln.split()[0]
                    for ln in (s.strip() for s in ptx.splitlines())
                    if ln and not ln.startswith(("//", ".", "{", "}", "$")) and not ln.endswith(":")
                )
                fma = sum(v for op, v in ops.items() if op.startswith("fma"))
                f64 = sum(v for op, v in ops.items() if ".f64" in op)
                div = sum(v for op, v in ops.items() if op.startswith("div"))
                print(
                    f"{name:12s} {kind:6s} {dt}: {time.perf_counter() - t:5.1f} s  "
                    f"local={'.local' in ptx} ftz={'.ftz' in ptx} approx={'approx' in ptx} "
                    f"fma={fma} f64={f64} div={div}"
                )
    print(f"{failed} failed")
    return 1 if failed else 0


def _vector(nc, names, kinds) -> int:
    import collections

    failed = 0
    for name in names:
        for kind in kinds:
            for cdt, ddt in (
                ("float32", "float32"),
                ("float64", "float64"),
                ("float32", "float16"),
            ):
                try:
                    k = nc._compile._pointer_kernel(name, kind, cdt, ddt)
                    ptx = k.inspect_asm(nc.pointer_signature(name, kind, cdt, ddt))
                except Exception as e:  # report every kernel, then fail
                    failed += 1
                    print(f"FAIL {name} {kind} {ddt}: {type(e).__name__}: {str(e)[:300]}")
                    continue
                ops = collections.Counter(
                    ln.split()[0]
                    for ln in (s.strip() for s in ptx.splitlines())
                    if ln.startswith(("ld.global", "st.global"))
                )
                vld = sum(v for op, v in ops.items() if op.startswith("ld.global.v"))
                vst = sum(v for op, v in ops.items() if op.startswith("st.global.v"))
                print(
                    f"VEC {name} {kind} {ddt}: vld={vld} vst={vst} "
                    f"ld={sum(ops.values()) - vld - vst - sum(v for op, v in ops.items() if op.startswith('st.global') and not op.startswith('st.global.v'))} "
                    f"local={'.local' in ptx} ops={dict(ops)}"
                )
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
