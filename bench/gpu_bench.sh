#!/bin/sh
# bench/gpu_bench.sh — the GPU benchmark in one session (docs/bench.md).
#
# Builds bench_cudnn and bench_verify with the cuDNN engine (in $BUILD_DIR,
# default build-gpu), then on the same GPU, one after the other:
#   1. bench/bench_cudnn      fattn's cuDNN engine, JSON lines
#   2. bench/torch_sdpa_bench.py   PyTorch SDPA with the cuDNN backend forced
#      (1 and 2 alternate BENCH_PASSES times, default 1: each pass is a fresh
#      process of each; the in-process rounds give the noise band)
#   3. bench_verify --backend cudnn   fattn verify cold, then warm, in one
#      process (BENCH_VERIFY=0 skips it)
# and joins them (bench/bench_report.py) into bench-<date>.json and a
# markdown table bench-<date>.md in docs/bench-runs/ (apart from gpu-ci.sh's
# records in docs/gpu-runs/), or in $OUT when set (a GPU job's output folder),
# where the logs are packed into bench-logs.tar.gz.
# The table is also printed. Ratios are against PyTorch in the same run;
# nothing here asserts a time.
#
# Knobs: BENCH_PASSES (1), BENCH_ITERS (20 timed executions per round),
# BENCH_ROUNDS (3), BENCH_HOST_CALLS (20), BENCH_ONLY (shape glob),
# BENCH_VERIFY (1), BENCH_SHAPES (1: 0 skips steps 1 and 2), BENCH_PUBLIC (10: public
# calls per kind timed the same way on both sides, 0 off), BENCH_AUTOTUNE (0; 1: a second
# bench_cudnn pass with FATTN_CUDNN_AUTOTUNE=1, reported apart as bench-<date>-autotune.*),
# BENCH_STEPS (0: repetitions of
# bench_cudnn's instrumented host steps), BENCH_REV (the git revision to record), PYTHON (python3,
# the one with torch), BUILD_DIR.
# Dependencies and cuDNN: tools/gpu/gpu-env.sh (as tools/gpu/gpu-ci.sh).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DEST=${OUT:-$ROOT/docs/bench-runs}
LOGS=$DEST/bench-logs
mkdir -p "$LOGS"
T0=$(date +%s)
PASSES=${BENCH_PASSES:-1}
ITERS=${BENCH_ITERS:-20}
ROUNDS=${BENCH_ROUNDS:-3}
HOST_CALLS=${BENCH_HOST_CALLS:-20}
PUBLIC=${BENCH_PUBLIC:-10}
STEPS=${BENCH_STEPS:-0}
PY=${PYTHON:-python3}
say() { echo "gpu-bench: $* (at $(( $(date +%s) - T0 )) s)"; }

. tools/gpu/gpu-env.sh
say "cuDNN from $CUDNN"
nvidia-smi >"$LOGS/nvidia-smi.txt" 2>&1 || true

gpu_build_setup "$LOGS/setup.log" || exit 2
meson compile -C "$BUILD" bench/bench_cudnn bench/bench_verify >"$LOGS/compile.log" 2>&1 ||
    { tail -60 "$LOGS/compile.log"; exit 2; }
say "built"

# BENCH_ONLY is a glob for the programs, not for the shell
set -f
ONLY_C= ONLY_T=
if [ -n "${BENCH_ONLY:-}" ]; then
    ONLY_C="--only $BENCH_ONLY" ONLY_T="--only $BENCH_ONLY"
fi
FATTN_FILES= TORCH_FILES=
p=1
[ "${BENCH_SHAPES:-1}" = 1 ] || p=$((PASSES + 1))
while [ "$p" -le "$PASSES" ]; do
    # cold plan builds are builds: no plan store here
    # shellcheck disable=SC2086  # ONLY_* are two words or none
    env -u FATTN_CUDNN_PLAN_DIR timeout "${BENCH_FATTN_TIMEOUT:-240}" "$BUILD/bench/bench_cudnn" --iters "$ITERS" \
        --rounds "$ROUNDS" --host-calls "$HOST_CALLS" --public "$PUBLIC" --steps "$STEPS" $ONLY_C \
        >"$LOGS/fattn-$p.jsonl" 2>"$LOGS/fattn-$p.err" ||
        say "bench_cudnn pass $p: exit $? (see fattn-$p.err)"
    say "bench_cudnn pass $p done"
    if [ "${BENCH_AUTOTUNE:-0}" = 1 ]; then
        # shellcheck disable=SC2086
        env -u FATTN_CUDNN_PLAN_DIR FATTN_CUDNN_AUTOTUNE=1 timeout "${BENCH_FATTN_TIMEOUT:-240}" \
            "$BUILD/bench/bench_cudnn" --iters "$ITERS" --rounds "$ROUNDS" \
            --host-calls "$HOST_CALLS" $ONLY_C >"$LOGS/fattn-autotune-$p.jsonl" \
            2>"$LOGS/fattn-autotune-$p.err" ||
            say "bench_cudnn (autotune) pass $p: exit $? (see fattn-autotune-$p.err)"
        say "bench_cudnn (autotune) pass $p done"
        AT_FILES="${AT_FILES:-} $LOGS/fattn-autotune-$p.jsonl"
    fi
    # shellcheck disable=SC2086
    timeout "${BENCH_TORCH_TIMEOUT:-240}" "$PY" bench/torch_sdpa_bench.py --iters "$ITERS" \
        --rounds "$ROUNDS" --public "$PUBLIC" $ONLY_T >"$LOGS/torch-$p.jsonl" 2>"$LOGS/torch-$p.err" ||
        say "torch_sdpa_bench pass $p: exit $? (see torch-$p.err)"
    say "torch_sdpa_bench pass $p done"
    FATTN_FILES="$FATTN_FILES $LOGS/fattn-$p.jsonl"
    TORCH_FILES="$TORCH_FILES $LOGS/torch-$p.jsonl"
    p=$((p + 1))
done

# verify cold and warm, twice: with an empty plan store (the cold run builds
# every plan and stores it), then in a new process with that store populated
# (the cold run restores them): the cold start with and without the store.
VERIFY_ARG=
if [ "${BENCH_VERIFY:-1}" = 1 ]; then
    STORE=$(mktemp -d)
    : >"$LOGS/verify.json"
    for pass in empty populated; do
        FATTN_CUDNN_PLAN_DIR=$STORE/plans timeout "${BENCH_VERIFY_TIMEOUT:-300}" \
            "$BUILD/bench/bench_verify" --backend cudnn --log "$LOGS/verify-$pass.log" \
            >>"$LOGS/verify.json" 2>"$LOGS/verify-$pass.err" ||
            say "bench_verify ($pass store): exit $? (see verify-$pass.err, verify-$pass.log)"
        say "bench_verify ($pass store) done: $(tail -1 "$LOGS/verify.json" 2>/dev/null)"
    done
    du -sh "$STORE/plans" >"$LOGS/plan-store-size.txt" 2>&1 || true
    ls "$STORE/plans" | wc -l >>"$LOGS/plan-store-size.txt" 2>&1 || true
    rm -rf "$STORE"
    [ -s "$LOGS/verify.json" ] && VERIFY_ARG="--verify $LOGS/verify.json"
fi

DATE=$(date -u +%Y-%m-%d)
# BENCH_REV: the revision, where the tree was copied without its history
REV=${BENCH_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [ -n "$FATTN_FILES" ]; then
    # shellcheck disable=SC2086  # the file lists are words
    python3 bench/bench_report.py --fattn $FATTN_FILES --torch $TORCH_FILES $VERIFY_ARG \
        --git-rev "$REV" --date "$DATE" --json "$DEST/bench-$DATE.json" --md "$DEST/bench-$DATE.md"
fi
if [ -n "${AT_FILES:-}" ]; then
    # shellcheck disable=SC2086
    python3 bench/bench_report.py --fattn $AT_FILES --torch $TORCH_FILES --git-rev "$REV" \
        --date "$DATE (fattn with FATTN_CUDNN_AUTOTUNE=1)" --json "$DEST/bench-$DATE-autotune.json" \
        --md "$DEST/bench-$DATE-autotune.md"
fi
if [ -n "${OUT:-}" ]; then
    tar czf "$OUT/bench-logs.tar.gz" -C "$DEST" bench-logs && rm -rf "$LOGS"
fi
say "done: $DEST/bench-$DATE.json, $DEST/bench-$DATE.md"
