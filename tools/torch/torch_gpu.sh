#!/bin/sh
# tools/torch/torch_gpu.sh — fattn's cuDNN engine against PyTorch's own cuDNN SDPA,
# on a GPU machine (docs/torch.md, "Results on the H200").
#
# Needs fattn built with the cuDNN engine at $BUILD_DIR (default build-gpu,
# as tools/gpu-ci.sh builds it) and a python3 ($PYTHON) with torch, numpy and
# h5py (or their wheels in .deps/wheels). Writes under $OUT (a GPU job's output folder) or docs/gpu-runs/torch-<date>/:
#   torch_cases.json, cases-report.json  the expressible subset (--make-cases)
#   run.h5          fattn run --backend cudnn of it, --repeat 3 (its /audit)
#   torch.h5, torch-report.json          PyTorch's recomputation
#   torch2.h5       a second PyTorch run, for PyTorch's own repeatability
#   diff-bitwise.*, diff-tol.*, diff-torch-repeat.txt, audit.txt, inspect.txt
#   torch-table.md  the table for docs/torch.md (tools/torch/torch_table.py)
#   env.txt         versions; stages.txt: each stage's exit status
# Each stage runs under a time limit; a failing stage is logged, the rest run.
# TORCH_GPU_FE_LOG=1 also logs cudnn-frontend's graphs and engine choices of
# the PyTorch stage to fe.log (CUDNN_FRONTEND_LOG_INFO). Without a GPU, for
# trying the script: FATTN_BACKEND=cpu TORCH_ARGS="--device cpu --sdpa-backend math".
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD_DIR:-build-gpu}
PY=${PYTHON:-python3}
F=$BUILD/harness/fattn
T=tools/torch/torch_reference.py
BACKEND=${FATTN_BACKEND:-cudnn}
TORCH_ARGS=${TORCH_ARGS:-}
DEST=${OUT:-$ROOT/docs/gpu-runs/torch-$(date -u +%Y-%m-%d)}
mkdir -p "$DEST"
T0=$(date +%s)

# fattn links libjansson and libxxhash; on the GPU machine they come from
# .deps (tools/gpu/fetch-gpu-deps.sh), unpacked as tools/gpu-ci.sh does.
if ls .deps/*.deb >/dev/null 2>&1; then
    P=$(mktemp -d)
    for f in .deps/*.deb; do dpkg -x "$f" "$P"; done
    export LD_LIBRARY_PATH="$P/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# A python without h5py (or numpy) takes them from wheels fetched beforehand
# into .deps/wheels (docs/torch.md), installed into a temporary directory.
if ! "$PY" -c 'import h5py, numpy' 2>/dev/null && ls .deps/wheels/*.whl >/dev/null 2>&1; then
    W=$(mktemp -d)
    "$PY" -m pip install -q --no-index --no-deps --target "$W" .deps/wheels/*.whl
    export PYTHONPATH="$W${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ ! -x "$F" ]; then
    echo "torch-gpu: $F not found: build fattn with the cuDNN engine first (tools/gpu-ci.sh)" >&2
    exit 2
fi
if ! "$PY" -c 'import torch, numpy, h5py' 2>"$DEST/env.txt"; then
    cat "$DEST/env.txt" >&2
    echo "torch-gpu: $PY needs torch, numpy and h5py" >&2
    exit 2
fi
{
    "$PY" -c 'import sys, torch, numpy, h5py
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version(), "numpy", numpy.__version__, "h5py", h5py.__version__)
print("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")'
    git rev-parse HEAD 2>/dev/null || true
    nvidia-smi -L 2>/dev/null || true
} >"$DEST/env.txt" 2>&1
cat "$DEST/env.txt"

: >"$DEST/stages.txt"
# stage NAME LOG LIMIT CMD...: run CMD with its output in LOG; report, never abort.
stage() {
    name=$1 log=$2 limit=$3
    shift 3
    rc=0
    timeout "$limit" "$@" >"$log" 2>&1 || rc=$?
    echo "$name: exit $rc at $(( $(date +%s) - T0 )) s" | tee -a "$DEST/stages.txt"
    tail -3 "$log"
}

stage make-cases "$DEST/make-cases.log" 60 \
    "$PY" "$T" --make-cases -o "$DEST/torch_cases.json" --report "$DEST/cases-report.json"
stage "fattn run --backend $BACKEND" "$DEST/fattn-run.log" 300 \
    "$F" run --backend "$BACKEND" --cases "$DEST/torch_cases.json" --repeat 3 -o "$DEST/run.h5"
if [ "${TORCH_GPU_FE_LOG:-0}" = 1 ]; then
    export CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE="$DEST/fe.log"
fi
# TORCH_ARGS is split into words on purpose
# shellcheck disable=SC2086
stage torch_reference "$DEST/torch.log" 300 \
    "$PY" "$T" "$DEST/run.h5" -o "$DEST/torch.h5" --report "$DEST/torch-report.json" $TORCH_ARGS
# shellcheck disable=SC2086
stage "torch_reference again" "$DEST/torch2.log" 300 \
    "$PY" "$T" "$DEST/run.h5" -o "$DEST/torch2.h5" $TORCH_ARGS
unset CUDNN_FRONTEND_LOG_INFO CUDNN_FRONTEND_LOG_FILE
stage "fattn inspect" "$DEST/inspect.txt" 60 "$F" inspect "$DEST/torch.h5"
stage "fattn diff (bitwise)" "$DEST/diff-bitwise.txt" 120 \
    "$F" diff "$DEST/run.h5" "$DEST/torch.h5" --json "$DEST/diff-bitwise.json"
stage "fattn diff --mode tol" "$DEST/diff-tol.txt" 120 \
    "$F" diff --mode tol "$DEST/run.h5" "$DEST/torch.h5" --json "$DEST/diff-tol.json"
stage "fattn diff torch2 torch" "$DEST/diff-torch-repeat.txt" 120 \
    "$F" diff "$DEST/torch2.h5" "$DEST/torch.h5"
# fattn's own repeatability: the /audit of --repeat 3 (identical = 0 is a
# tensor that differed between repeats)
stage "fattn --repeat audit" "$DEST/audit.txt" 60 "$PY" -c '
import sys, h5py
f = h5py.File(sys.argv[1], "r")
seen, bad = [], []
def visit(name, obj):
    if "identical" in obj.attrs:
        seen.append(name)
        if not obj.attrs["identical"]:
            bad.append(name)
if "audit" in f:
    f["audit"].visititems(visit)
print("tensors audited:", len(seen), "not repeatable over --repeat 3:", len(bad))
for b in bad:
    print("  /audit/" + b)
' "$DEST/run.h5"
stage torch_table "$DEST/torch_table.log" 60 \
    "$PY" tools/torch/torch_table.py "$DEST/diff-bitwise.json" --report "$DEST/torch-report.json" \
    -o "$DEST/torch-table.md"
echo "torch-gpu: done in $(( $(date +%s) - T0 )) s, results in $DEST"
