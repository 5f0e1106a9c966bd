#!/usr/bin/env bash
# The real-GPU checks in one command, for a bare GPU machine without network access
# (Python 3.12, numpy 2.5, cupy 14, numba-cuda 0.30.4, torch, JAX). Every step runs
# under its own time limit (the *_S variables below) and writes its log to $OUT:
#   info.txt    GPU, CPU, versions, `iglu-np info`, GPU load before the benchmark
#   pytest.log  `pytest -m gpu` (junit.xml beside it)
#   diag.txt    tools/gpu_diag.py: numba-cuda-mlir layouts, a small call's profile
#   bench_*.json / bench.md  `iglu-np bench --device gpu`
# numba-cuda-mlir is not on such a machine: to check it too, prepare an xz tarball of its
# unpacked wheel (48 MB, against the wheel's 71) on a machine with network access:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d /tmp/w numba-cuda-mlir==0.6.0
#   mkdir -p /tmp/u .whl && (cd /tmp/u && unzip -q /tmp/w/numba_cuda_mlir-*.whl && tar cf - . | xz -9 -T0 > "$OLDPWD/.whl/mlir.tar.xz")
# (.whl in .git/info/exclude), copy the checkout with .whl to the GPU machine and run
# `bash tools/device_check.sh` there; without .whl the script checks numba-cuda alone.
set -u
OUT=${OUT:-/tmp/device_out}
mkdir -p "$OUT"
T0=$(date +%s)
log() { echo "[$(($(date +%s) - T0)) s] $*"; }
PY=${PY:-python3}
if [ -f .whl/mlir.tar.xz ]; then
    mkdir -p /tmp/site && tar xJf .whl/mlir.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false CUPY_CACHE_DIR=/tmp/cupy_cache
log "set up"
{
    nvidia-smi
    echo "cores: $(nproc)"; lscpu | grep -m1 'Model name'
    $PY - <<'EOF'
import importlib
for m in ("numpy", "numba", "llvmlite", "cupy", "numba_cuda", "numba_cuda_mlir", "torch", "jax", "scipy"):
    try:
        print(m, getattr(importlib.import_module(m), "__version__", "?"))
    except Exception as e:
        print(m, "FAILS:", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
EOF
    timeout 60 $PY -m iglu_np.cli info
} > "$OUT/info.txt" 2>&1
log "info"; grep -E "numba|cupy|GPU|cuda" "$OUT/info.txt" | head -20

# Correctness first: every GPU test, spread over workers (the CPU side compiles the
# reference ufuncs; one xdist group would put all of test_gpu_device on one worker).
timeout "${PYTEST_S:-240}" $PY -m pytest -m gpu -p no:cacheprovider -p no:benchmark -n "${WORKERS:-12}" --dist load \
    -rfE --durations=12 --junitxml="$OUT/junit.xml" \
    tests/test_gpu_device.py tests/test_cuda_array.py tests/test_bench_reports.py \
    > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?" >> "$OUT/pytest.log"
log "pytest"; grep -E "^(FAILED|ERROR)|passed|failed|rc=" "$OUT/pytest.log" | tail -40

# What the CPU-side tests cannot tell: numba-cuda-mlir's layouts and where a small call
# spends its time (see tools/gpu_diag.py's docstring); DIAG=0 skips it.
if [ "${DIAG:-1}" = 1 ]; then
    timeout 90 $PY tools/gpu_diag.py > "$OUT/diag.txt" 2>&1
    log "diag"; head -60 "$OUT/diag.txt"
fi

# Speed on a quiet GPU (nothing else runs on it now): the benchmark, a few activations
# per dtype so it fits the call.
nvidia-smi --query-gpu=utilization.gpu,memory.used,clocks.sm --format=csv >> "$OUT/info.txt" 2>&1
[ "${BENCH:-1}" = 1 ] || { log "no bench"; exit 0; }
F32=${F32:-identity relu iglu iglu_approx gelu gelu_tanh silu softplus mish xielu elu hardswish}
OTHER=${OTHER:-identity iglu gelu silu xielu}
timeout "${BENCH_S:-150}" $PY -m iglu_np.cli bench --device gpu --dtype float32 --json $F32 \
    > "$OUT/bench_f32.json" 2> "$OUT/bench_err.txt"
log "bench float32 rc=$?"
[ -n "$OTHER" ] && timeout "${BENCH2_S:-120}" $PY -m iglu_np.cli bench --device gpu --dtype float16,float64 --json $OTHER \
    > "$OUT/bench_f16_f64.json" 2>> "$OUT/bench_err.txt"
log "bench float16,float64 rc=$?"
$PY - "$OUT" <<'EOF' > "$OUT/bench.md" 2>&1
import json, sys
from iglu_np.cli import bench_gpu
for f in ("bench_f32.json", "bench_f16_f64.json"):
    try:
        print(bench_gpu.markdown(json.load(open(f"{sys.argv[1]}/{f}"))), "\n")
    except Exception as e:
        print(f, "unreadable:", e)
EOF
cat "$OUT/bench.md"; tail -5 "$OUT/bench_err.txt"
log "done"
