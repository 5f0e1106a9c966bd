"""numba-cuda-mlir, the default Numba CUDA toolchain, compiles the kernels to PTX without
a GPU (tools/mlir_ptx_check.py, in a child process that asks for mlir): no failed compile,
no local memory. The suite's other Numba CUDA checks (PTX matrix, simulator) use numba-cuda."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^(\w+)\s+(\w+)\s+(float32|float64): .* local=(True|False) ")


def _check(names, kinds):
    pytest.importorskip(
        "numba_cuda_mlir", reason="numba-cuda-mlir not installed; pip install -e .[gpu-verify]"
    )
    env = dict(os.environ, IGLU_NP_CUDA_TOOLCHAIN="numba-cuda-mlir")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "mlir_ptx_check.py"),
            ",".join(names),
            ",".join(kinds),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = {m.group(1, 2, 3): m.group(4) for m in map(LINE.match, r.stdout.splitlines()) if m}
    want = {(n, k, d) for n in names for k in kinds for d in ("float32", "float64")}
    assert set(rows) == want, r.stdout
    return rows


def test_mlir_compiles_the_kernels_offline():
    # iglu (atan, divisions), gelu_tanh (two_prod), silu (exp_scaled), elu (exp_scaled_times):
    # helpers with conditional values, which cost local memory from Python 3.12 unless
    # named first (iglu_np._spec.kernel); bwd holds dx's code
    rows = _check(["iglu", "gelu_tanh", "silu", "elu"], ["fwd", "bwd"])
    assert all(v == "False" for v in rows.values()), rows  # no local memory


@pytest.mark.slow
def test_mlir_compiles_every_kernel_offline():
    from iglu_np._spec import REGISTRY

    _check(sorted(REGISTRY), ["fwd", "dx", "bwd"])


VEC = re.compile(
    r"^VEC (\w+) (\w+) (float16|float32|float64): vld=(\d+) vst=(\d+) ld=(\d+) local=(True|False) "
)


@pytest.mark.slow
def test_mlir_compiles_the_vector_form_offline():
    """The thin path's kernels (vector form on raw pointers) under numba-cuda-mlir: 16-byte
    loads and stores for float32 and float64 (one per input and step; the tail's scalar
    ones once), no local memory. float16 compiles (mlir's vectors hold four halves; its
    PTX loads them as two 32-bit words)."""
    pytest.importorskip(
        "numba_cuda_mlir", reason="numba-cuda-mlir not installed; pip install -e .[gpu-verify]"
    )
    env = dict(os.environ, IGLU_NP_CUDA_TOOLCHAIN="numba-cuda-mlir")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "mlir_ptx_check.py"),
            "iglu,gelu_tanh",
            "fwd,bwd",
            "vector",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [m.groups() for m in map(VEC.match, r.stdout.splitlines()) if m]
    assert len(rows) == 2 * 2 * 3, r.stdout
    for name, kind, dt, vld, vst, ld, local in rows:
        assert local == "False", (name, kind, dt)
        if dt != "float16":
            n_in = 2 if kind == "bwd" else 1
            assert int(vst) >= 1 and int(vld) == n_in * int(vst) and int(ld) == n_in, (
                name,
                kind,
                dt,
                vld,
                vst,
                ld,
            )
