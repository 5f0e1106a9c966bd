"""Structural guard for the CPU fast path's speed: the element loops of the paper's table
activations compile to packed SIMD code and call no libm function.

Read from the assembly (:func:`iglu_np.backends.cpu_fast.simd_report`), never timed. A
kernel edit that reintroduces a data-dependent branch LLVM will not if-convert, a loop
left inside the element loop or a libm call makes these fail; run
``python tools/simd_report.py <name>`` to see which kind and dtype.
"""
import math

import numba
import numpy as np
import pytest

import iglu_np
from iglu_np.backends import cpu_fast

DT = [np.float32, np.float64]
IDS = ["f32", "f64"]
PAPER = ["iglu", "iglu_approx", "gelu", "gelu_tanh", "silu", "mish", "softplus", "elu",
         "selu", "celu", "relu", "hardswish", "sigmoid", "tanh"]
# Loops known to stay scalar (none at present). Strict xfail: fixing one turns it into a
# failure to be removed here.
KNOWN_SCALAR: set = set()


def _check(name, kind, dtype):
    r = cpu_fast.simd_report(name, kind, dtype)
    assert r["simd"] and not r["libm"], f"{name}.{kind} {np.dtype(dtype).name}: {r}"


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("kind", ["fwd", "bwd"])
def test_iglu_loops_vectorise(kind, dtype):
    _check("iglu", kind, dtype)


def _cases():
    for name in PAPER:
        for kind in ("fwd", "bwd"):
            for dt, i in zip(DT, IDS):
                marks = [pytest.mark.slow]
                if (name, kind, dt) in KNOWN_SCALAR:
                    marks.append(pytest.mark.xfail(strict=True, reason="not vectorised yet"))
                yield pytest.param(name, kind, dt, marks=marks, id=f"{name}-{kind}-{i}")


@pytest.mark.parametrize("name,kind,dtype", list(_cases()))
def test_paper_table_loops_vectorise(name, kind, dtype):
    _check(name, kind, dtype)


# ---------------------------------------------------------------- the detector itself
def _stats_of(fn, dtype=np.float64):
    loop = numba.njit(error_model="numpy")(fn)
    t = numba.from_dtype(np.dtype(dtype))
    arr = numba.types.Array(t, 1, "C")
    sig = (arr, arr)
    loop.compile(sig)
    for fname, lines in cpu_fast._functions(loop.inspect_asm(sig)).items():
        if not fname.startswith(("_ZN7cpython", "cfunc.")) and "_loop" in fname:
            return cpu_fast._loop_stats(lines)
    raise AssertionError("function not found in the assembly")


def _atan_loop(x, out):
    for i in range(x.size):
        out[i] = math.atan(x[i])


def _mul_loop(x, out):
    for i in range(x.size):
        out[i] = x[i] * 3.0 + 1.0


def test_detector_sees_libm_calls_and_simd():
    libm = _stats_of(_atan_loop)
    assert not libm["simd"] and any("atan" in c for c in libm["calls"]), libm
    simd = _stats_of(_mul_loop, np.float32)
    assert simd["simd"] and simd["packed"] > 0 and not simd["calls"], simd


def test_detector_on_synthetic_assembly():
    asm = "\n".join([
        "f:",
        "\tmovl\t$0, %eax",
        ".LBB0_1:",
        "\tvmovups\t(%rdi,%rax,4), %zmm0",
        "\tvfmadd213ps\t%zmm1, %zmm2, %zmm0",
        "\taddq\t$16, %rax",
        "\tjne\t.LBB0_1",
        ".LBB0_2:",
        "\tvmulss\t%xmm0, %xmm1, %xmm0",
        "\tmovabsq\t$expf, %rax",
        "\tcallq\t*%rax",
        "\tjne\t.LBB0_2",
        "\tretq",
    ])
    (name, lines), = cpu_fast._functions(asm).items()
    assert name == "f" and cpu_fast._loops(lines) == [(1, 5), (6, 10)]
    st = cpu_fast._loop_stats(lines)
    assert st == {"packed": 1, "simd": True, "calls": ["expf"]}
