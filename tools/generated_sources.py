"""Every source the package generates, written one file each, and a check against a copy.

The generators are pure text: the CuPy C++ of ``backends/codegen/cxx.py``
(ElementwiseKernel parts per kind and compute dtype, the 16-byte-vector RawKernels per
data dtype, the fused backward), the Numba CPU modules of ``backends/cpu/ufuncs.py`` and
``backends/cpu/loop_source.py`` (as written into the kernel cache), the Numba CUDA
kernels' Python of ``backends/cuda/numba_cuda/_sources.py`` (general form per parameter
layout and rank, vector form per data dtype and toolchain, the one-pass backward) and the
C++ translation unit the GPU tests host-compile with g++
(``tests/gpu_helpers.host_source``). Nothing is compiled and no GPU is needed. A
refactoring of the backends keeps all of them byte-identical:

    python tools/generated_sources.py DIR            # write them into DIR
    python tools/generated_sources.py --check DIR    # regenerate, compare; exit 1 on a difference
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COMPUTE = ("float32", "float64")
DATA = ("float16", "bfloat16", "float32", "float64")


def _kernel_source_text(ks) -> str:
    return "".join(
        f"// {f}: {getattr(ks, f)!r}\n"
        for f in ks.__dataclass_fields__
        if f not in ("preamble", "body", "source")
    ) + "".join(
        f"// ---- {f}\n{getattr(ks, f)}\n" for f in ("preamble", "body", "source") if hasattr(ks, f)
    )


def _lanes(numba_cuda, dtype, mlir: bool) -> int:
    """numba_cuda.lanes under the toolchain ``mlir`` says, whichever this process chose."""
    had = numba_cuda._discovery._state.get("mlir", _UNSET)
    numba_cuda._discovery._state["mlir"] = mlir
    try:
        return numba_cuda.lanes(np.dtype(dtype))
    finally:
        if had is _UNSET:
            del numba_cuda._discovery._state["mlir"]
        else:
            numba_cuda._discovery._state["mlir"] = had


_UNSET = object()


def sources():
    """``(relative path, text)`` of every generated source, in a fixed order."""
    import iglu_np  # noqa: F401  (registers the activations)
    from iglu_np._spec import REGISTRY
    from iglu_np.backends.codegen import cxx
    from iglu_np.backends.cpu import loop_source
    from iglu_np.backends.cpu import ufuncs as cpu
    from iglu_np.backends.cuda import numba_cuda
    from tests import gpu_helpers

    for name in sorted(REGISTRY):
        spec = REGISTRY[name]
        yield f"cpu/{name}.py", cpu._wrapper_source(spec)
        yield f"cpu_fast/{name}.py", loop_source.source(spec)
        if cxx.has_cxx(spec):
            for kind in cxx.kernel_kinds(spec):
                for c in COMPUTE:
                    yield (
                        f"cupy/{name}/{kind}_{c}.cu",
                        _kernel_source_text(cxx.kernel_source(spec, kind, c)),
                    )
                for d in DATA:
                    yield (
                        f"cupy/{name}/{kind}_vec_{d}.cu",
                        _kernel_source_text(cxx.vector_kernel_source(spec, kind, d)),
                    )
            if spec.param_names:
                for d in DATA:
                    yield (
                        f"cupy/{name}/bwdall_vec_{d}.cu",
                        _kernel_source_text(cxx.fused_backward_source(spec, d)),
                    )
            yield f"host_cxx/{name}.cpp", gpu_helpers.host_source(spec)
        n = len(spec.param_names)
        layouts = sorted({(False,) * n, (True,) * n, tuple(i == 0 for i in range(n))})
        for kind in numba_cuda._sources._kinds(spec):
            for arrays, ndim in itertools.product(layouts, (1, 2)):
                sums = (True, False) if kind.startswith("sum_") else (None,)
                for ss in sums:
                    tag = "".join("a" if a else "s" for a in arrays) or "-"
                    extra = "" if ss is None else ("_scalarsum" if ss else "_arraysum")
                    _, src = numba_cuda._sources._source(spec, kind, arrays, ndim, bool(ss))
                    yield f"numba_cuda/{name}/{kind}_{tag}_{ndim}d{extra}.py", src
            if not kind.startswith("sum_"):
                for d, mlir in itertools.product(("float16", "float32", "float64"), (False, True)):
                    w = _lanes(numba_cuda, d, mlir)
                    _, src = numba_cuda._sources._source_vec(
                        spec, kind, w, w * np.dtype(d).itemsize, mlir
                    )
                    tool = "mlir" if mlir else "nvvm"
                    yield f"numba_cuda/{name}/{kind}_vec_{d}_{tool}.py", src
        if spec.param_names:
            for ndim in (1, 2):
                _, src = numba_cuda._sources._source_all(spec, ndim)
                yield f"numba_cuda/{name}/bwdall_{ndim}d.py", src


def write(directory: Path) -> list:
    directory.mkdir(parents=True, exist_ok=True)
    names = []
    for rel, text in sources():
        p = directory / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text.encode())
        names.append(rel)
    return names


def check(directory: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        new = Path(tmp)
        write(new)
        old_files, new_files = (
            {p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file()}
            for d in (directory, new)
        )
        bad = sorted(f"only in {directory}: {f}" for f in old_files - new_files)
        bad += sorted(f"only regenerated: {f}" for f in new_files - old_files)
        bad += sorted(
            f"differs: {f}"
            for f in old_files & new_files
            if (directory / f).read_bytes() != (new / f).read_bytes()
        )
    for line in bad:
        print(line)
    print(f"{len(new_files)} generated sources, {len(bad)} differences from {directory}")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", nargs="?", help="write every generated source here")
    ap.add_argument("--check", metavar="DIR", help="regenerate and compare with DIR")
    a = ap.parse_args(argv)
    if a.check:
        return check(Path(a.check))
    if not a.directory:
        ap.error("give a directory, or --check DIR")
    print(f"{len(write(Path(a.directory)))} generated sources written to {a.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
