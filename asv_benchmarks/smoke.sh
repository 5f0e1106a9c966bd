#!/usr/bin/env bash
# CI smoke check of the asv suite (well under 2 minutes with a warm numba cache):
#   1. `asv check`: every benchmark module imports (this is where the registry-coverage
#      guard fails if a registered activation has no benchmark) and signatures are valid;
#   2. one quick, single-repeat, unsaved run of every benchmark for one activation and the
#      non-registry baselines, against the iglu_np importable here (`--python=same`, no
#      virtualenv build), asv run exits non-zero if any benchmark fails.
# Needs asv (`pip install -e '.[bench]'`). Works from a fresh clone: asv only needs the
# git repository and a machine file, which `asv machine --yes` writes if missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
PY="${PYTHON:-python}"
ACT="${IGLU_ASV_SMOKE_ACTIVATION:-iglu}"

if ! "$PY" -c "import asv" 2>/dev/null; then
    echo "asv_benchmarks/smoke.sh: asv is not installed (pip install -e '.[bench]')" >&2
    exit 1
fi
# The benchmarks import iglu_np from outside the checkout: use the checkout itself when
# the package is not installed (asv drops PYTHONPATH and honours ASV_PYTHONPATH).
if ! (cd / && "$PY" -c "import iglu_np" 2>/dev/null); then
    export ASV_PYTHONPATH="$root${ASV_PYTHONPATH:+:$ASV_PYTHONPATH}"
fi

cd "$here"
start=$SECONDS
[ -f "${ASV_MACHINE_FILE:-$HOME/.asv-machine.json}" ] || "$PY" -m asv machine --yes >/dev/null

"$PY" -m asv check --python=same

# Parameterised benchmarks are selected by "name(param, ...)"; every grid starts with the
# activation. One activation in float32: the smallest throughput size (the *GPU classes
# are left out at discovery on a machine without a GPU), the tiny-input overheads, the
# ratio/temporaries/accuracy tracks, the 16.8M-element peak-memory trio (forward,
# backward, copy floor), the bfloat16 forward's smallest size and the trainer. The forkserver imports the suite once.
A="'$ACT'"
"$PY" -m asv run --python=same --quick --dry-run --show-stderr --launch-method forkserver \
    --durations all \
    --bench "\($A, 'float32', 10000, '\w+'\)" \
    --bench "\($A, '\w+', 'float32'\)" \
    --bench "\($A, '5 elements', '\w+'\)" \
    --bench "\($A, 'float32'\)" \
    --bench "ForwardBF16.*\($A, 10000\)" \
    --bench "\($A\)" \
    --bench "Gated\w+\.time_gated_\w+\('swiglu', 'float32', 65536\)" \
    --bench "GatedLimits.*\('float32', 65536\)"

echo "asv smoke check passed in $((SECONDS - start)) s"
