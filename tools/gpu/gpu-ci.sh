#!/bin/sh
# tools/gpu/gpu-ci.sh — what a GPU CI runner calls, through tools/gpu-ci.sh
# (docs/cudnn-engine.md).
#
# Builds fattn with the cuDNN engine against the cuDNN PyTorch uses (or
# $CUDNN_DIR), runs the GPU test suites (cudnn-construct with
# FATTN_REQUIRE_CUDNN=1, cudnn-gpu), and writes docs/gpu-runs/<date>.json:
# device, SM count, cuDNN runtime version, per-case pass/fail/skip with the
# engine tag of each plan, the backward determinism measurement
# (test_cudnn_gpu --determinism) and the CLI (fattn run / replay / verify
# --backend cudnn), each stage under a time limit. With $OUT set (a GPU job's output folder), the JSON and
# all logs go under $OUT instead, to be copied into docs/gpu-runs/.
#
# Dependencies and cuDNN: tools/gpu/gpu-env.sh. GPU_CI_FULL=1 also runs the whole
# suite (its result is logged, not fatal); GPU_CI_SUITES=0 skips the GPU suites
# (a run of the stages below only, e.g. benchmarks after a suite run). Stages besides the suites, each
# logged and never fatal: GPU_CI_DETERMINISM (1), GPU_CI_CLI (1),
# GPU_CI_REPEAT (1), GPU_CI_LARGE_DIMS (0: tools/gpu/large-dims.sh), GPU_CI_TE_TESTS (1:
# the TE-tests tier on cuDNN), GPU_CI_GOLDEN (0), GPU_CI_SANITIZER (1; GPU_CI_SAN_TOOLS
# "memcheck racecheck"), GPU_CI_TORCH (0: tools/torch/torch_gpu.sh, docs/torch.md),
# GPU_CI_BENCH (0: bench/gpu_bench.sh, docs/bench.md), GPU_CI_FP8_BENCH (0: FP8 rows
# of bench_cudnn and cudnn-frontend's, in one run, to $DEST/fp8-bench-<date>.jsonl),
# GPU_CI_FP8 (0: FP8 through the CLI, fattn run --repeat 5 and memcheck; with the
# carried cudnn-frontend wheel also bench/cfe_fp8_dropout.py under memcheck).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
DEST=${OUT:-$ROOT/docs/gpu-runs}
LOGS=$DEST/gpu-ci-logs
mkdir -p "$LOGS"
T0=$(date +%s)

. tools/gpu/gpu-env.sh
echo "gpu-ci: cuDNN from $CUDNN" | tee "$LOGS/env.txt"
nvidia-smi >>"$LOGS/env.txt" 2>&1 || true

gpu_build_setup "$LOGS/setup.log" || exit 2
# Only what the GPU stages run (other suites' targets are not needed here):
# every target the two suites' tests depend on, as meson's own test list
# has them (a hand-kept list misses the suite tables' newer executables,
# and `meson test --no-rebuild` then stops), and the CLI.
SUITES="cudnn-construct cudnn-gpu"
TARGETS=$(python3 tools/gpu/suite-targets.py "$BUILD" $SUITES) || exit 2
meson compile -C "$BUILD" $TARGETS harness/fattn \
    >"$LOGS/compile.log" 2>&1 || { tail -60 "$LOGS/compile.log"; exit 2; }
grep -i "warning" "$LOGS/compile.log" || true

RES=$LOGS/results.jsonl
INFO=$LOGS/info.json
rm -f "$RES" "$INFO"
rc=0
if [ "${GPU_CI_SUITES:-1}" = 1 ]; then
    FATTN_GPU_RESULTS=$RES FATTN_GPU_INFO=$INFO FATTN_REQUIRE_CUDNN=1 \
        timeout "${GPU_CI_TEST_TIMEOUT:-330}" meson test -C "$BUILD" --no-rebuild \
        $(printf ' --suite %s' $SUITES) --print-errorlogs --timeout-multiplier 2 \
        >"$LOGS/test-gpu.log" 2>&1 || rc=$?
    tail -15 "$LOGS/test-gpu.log"
    cp "$BUILD/meson-logs/testlog.txt" "$LOGS/testlog-gpu.txt" 2>/dev/null || true
fi
echo "gpu-ci: tests done at $(( $(date +%s) - T0 )) s"
# stage NAME LOG CMD...: run CMD with its output in LOG; report, never abort.
stage() {
    name=$1 log=$2
    shift 2
    if "$@" >"$log" 2>&1; then
        echo "gpu-ci: $name: exit 0 at $(( $(date +%s) - T0 )) s"
    else
        echo "gpu-ci: $name: exit $? at $(( $(date +%s) - T0 )) s (see $(basename "$log"))"
    fi
}
# Backward determinism per feature row at b4 h16 s2048 d128 bf16 (docs/determinism.md).
DET=$LOGS/determinism.jsonl
rm -f "$DET"
if [ "${GPU_CI_DETERMINISM:-1}" = 1 ]; then
    stage determinism "$LOGS/determinism.log" timeout "${GPU_CI_DET_TIMEOUT:-150}" \
        "$BUILD/tests/test_cudnn_gpu" --determinism "$DET" "${GPU_CI_DET_REPEATS:-5}"
    cat "$LOGS/determinism.log"
fi
# The CLI end to end on the cuDNN engine: run (forward and backward), replay,
# verify (against this platform's CPU goldens within tolerance); logged, not fatal.
if [ "${GPU_CI_CLI:-1}" = 1 ]; then
    F=$BUILD/harness/fattn
    stage "fattn run --backend cudnn" "$LOGS/cli-run.log" \
        timeout "${GPU_CI_CLI_TIMEOUT:-150}" "$F" run --backend cudnn -o "$LOGS/run.h5"
    tail -5 "$LOGS/cli-run.log"
    if [ -f "$LOGS/run.h5" ]; then
        stage "fattn replay --backend cudnn" "$LOGS/cli-replay.log" \
            timeout 100 "$F" replay "$LOGS/run.h5" --from save_ctx --impl legacy \
            --backend cudnn -o "$LOGS/replay.h5"
        tail -5 "$LOGS/cli-replay.log"
        rm -f "$LOGS/replay.h5"
        # run.h5 can be large: keep it only when small
        if [ "$(stat -c %s "$LOGS/run.h5")" -gt 60000000 ]; then rm -f "$LOGS/run.h5"; fi
    fi
    stage "fattn verify --backend cudnn" "$LOGS/cli-verify.log" \
        timeout "${GPU_CI_VERIFY_TIMEOUT:-150}" "$F" verify --backend cudnn \
        --json "$LOGS/verify.json"
    tail -8 "$LOGS/cli-verify.log"
fi
# Head dims above 256 and FP8 with d_qk != d_v alone (tools/gpu/large-dims.sh,
# docs/cudnn-engine.md): the suites and verify above run them already, so
# this is for a device or cuDNN not measured yet (LARGE_DIMS_CUDNN_LIB).
if [ "${GPU_CI_LARGE_DIMS:-0}" = 1 ]; then
    stage "tools/gpu/large-dims.sh" "$LOGS/large-dims.log" timeout 600 \
        env OUT="$LOGS/large-dims" BUILD_DIR="$BUILD" sh tools/gpu/large-dims.sh
    tail -40 "$LOGS/large-dims.log"
fi
# The TE-tests tier (golden/te_tests_cases.json, docs/te.md) on the cuDNN
# engine: what runs, and what is skipped by which support row.
if [ "${GPU_CI_TE_TESTS:-1}" = 1 ]; then
    stage "fattn verify --backend cudnn --cases golden/te_tests_cases.json" \
        "$LOGS/te-tests-tier.log" timeout "${GPU_CI_TE_TESTS_TIMEOUT:-540}" \
        "$BUILD/harness/fattn" verify --backend cudnn --cases golden/te_tests_cases.json \
        --json "$LOGS/te-tests-tier.json"
    tail -6 "$LOGS/te-tests-tier.log"
    python3 - "$LOGS/te-tests-tier.json" <<'PY' || true
import collections, json, re, sys
j = json.load(open(sys.argv[1]))
by = collections.Counter(c["result"] for c in j["cases"])
print("gpu-ci: te-tests tier on cuDNN: %s" % dict(by))
rules = collections.Counter()
for c in j["cases"]:
    if c["result"] == "skipped":
        m = re.search(r"rule (\w+)", c.get("skipped", ""))
        rules[m.group(1) if m else "?"] += 1
print("gpu-ci: te-tests tier skips by rule: %s" % dict(rules))
PY
fi
# --repeat at the size where the accumulator dQ shows its atomics: the
# accumulator case must be reported as not repeatable, the deterministic one
# not (docs/determinism.md).
if [ "${GPU_CI_REPEAT:-1}" = 1 ]; then
    stage "fattn run --repeat 3 (accumulator vs deterministic, b4 h16 s2048)" \
        "$LOGS/cli-repeat.log" timeout 200 "$BUILD/harness/fattn" run --backend cudnn \
        --cases tools/gpu/cases/repeat.json --repeat 3 -o "${TMPDIR:-/tmp}/fattn-repeat.h5"
    cat "$LOGS/cli-repeat.log"
    rm -f "${TMPDIR:-/tmp}/fattn-repeat.h5"
fi
# Goldens for this platform (deterministic backward forced), then a verify
# that must match them bitwise; the file lands in $DEST/goldens/ to be
# committed to fixtures/.
if [ "${GPU_CI_GOLDEN:-0}" = 1 ]; then
    F=$BUILD/harness/fattn
    rm -rf "$DEST/goldens"
    stage "fattn golden --backend cudnn" "$LOGS/golden.log" timeout 200 "$F" golden \
        --backend cudnn -o "$DEST/goldens"
    tail -3 "$LOGS/golden.log"
    cp fixtures/cpu-math-*.h5 "$DEST/goldens/" 2>/dev/null || true
    stage "fattn verify --backend cudnn (new goldens)" "$LOGS/verify-new-goldens.log" \
        timeout 200 "$F" verify --backend cudnn --fixtures "$DEST/goldens" \
        --json "$LOGS/verify-new-goldens.json"
    tail -4 "$LOGS/verify-new-goldens.log"
    rm -f "$DEST"/goldens/cpu-math-*.h5
fi
# FP8 on the cuDNN engine through the CLI: forward and backward repeated 5x
# bitwise at b4 h16 s2048 d128 (tools/gpu/cases/fp8-repeat.json), and
# compute-sanitizer memcheck over the matrix's FP8 cases (docs/cudnn-engine.md).
if [ "${GPU_CI_FP8:-0}" = 1 ]; then
    F=$BUILD/harness/fattn
    stage "fattn run --repeat 5 (FP8, b4 h16 s2048)" "$LOGS/fp8-repeat.log" timeout 200 \
        "$F" run --backend cudnn --cases tools/gpu/cases/fp8-repeat.json --repeat 5 \
        -o "${TMPDIR:-/tmp}/fattn-fp8-repeat.h5"
    cat "$LOGS/fp8-repeat.log"
    # the audit: every tensor of every state, identical over the 5 repeats or not
    "$F" inspect "${TMPDIR:-/tmp}/fattn-fp8-repeat.h5" >"$LOGS/fp8-repeat-audit.txt" 2>&1 || true
    echo "gpu-ci: FP8 repeat audit: $(grep -c '@identical = 1' "$LOGS/fp8-repeat-audit.txt") tensors identical, $(grep -c '@identical = 0' "$LOGS/fp8-repeat-audit.txt") not"
    rm -f "${TMPDIR:-/tmp}/fattn-fp8-repeat.h5"
    if command -v compute-sanitizer >/dev/null 2>&1; then
        stage "compute-sanitizer memcheck (FP8 cases)" "$LOGS/fp8-memcheck.log" timeout 200 \
            compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
            "$F" run --backend cudnn --filter 'fp8.*' -o "${TMPDIR:-/tmp}/fattn-fp8-san.h5"
        grep -E "ERROR SUMMARY|wrote|refused|skipped" "$LOGS/fp8-memcheck.log" | tail -4
        rm -f "${TMPDIR:-/tmp}/fattn-fp8-san.h5"
    fi
    # cudnn-frontend's own FP8 forward with dropout (whose fault is the
    # refused FP8 dropout on sm_90?): each case plain, then under memcheck
    if ls .whl/nvidia_cudnn_frontend-1.32.0-*.whl >/dev/null 2>&1; then
        CFE_DO=$(mktemp -d)
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --target "$CFE_DO" .whl/nvidia_cudnn_frontend-1.32.0-*.whl >/dev/null 2>&1 || true
        for c in bshd_s16_nodropout bshd_s16_dropout sbhd_s16_dropout bshd_b2_s16_dropout \
            bshd_s128_dropout; do
            PYTHONPATH="$CFE_DO" timeout 60 python3 tools/gpu/cfe_fp8_dropout.py --case "$c" \
                >>"$LOGS/cfe-fp8-dropout.log" 2>&1 || echo "exit $? ($c)" >>"$LOGS/cfe-fp8-dropout.log"
            if command -v compute-sanitizer >/dev/null 2>&1; then
                PYTHONPATH="$CFE_DO" timeout 120 compute-sanitizer --tool memcheck \
                    --report-api-errors no --error-exitcode 99 --print-limit 5 \
                    python3 tools/gpu/cfe_fp8_dropout.py \
                    --case "$c" >>"$LOGS/cfe-fp8-dropout-memcheck.log" 2>&1 ||
                    echo "exit $? ($c)" >>"$LOGS/cfe-fp8-dropout-memcheck.log"
            fi
        done
        echo "gpu-ci: cudnn-frontend FP8 dropout, plain:"
        grep -E '^\{|^exit' "$LOGS/cfe-fp8-dropout.log" || true
        echo "gpu-ci: cudnn-frontend FP8 dropout, memcheck:"
        grep -E '^\{|^exit|ERROR SUMMARY|Invalid|illegal' "$LOGS/cfe-fp8-dropout-memcheck.log" | head -40 || true
    fi
fi
# compute-sanitizer memcheck and racecheck over one case per forward and
# backward feature row (docs/cudnn-engine.md, "GPU memory checks").
if [ "${GPU_CI_SANITIZER:-1}" = 1 ] && command -v compute-sanitizer >/dev/null 2>&1; then
    SAN_CASES=${GPU_CI_SAN_CASES:-bwd.nomask.bf16,bwd.layout.sb3hd.f16,bwd.layout.thd_thd_thd.bf16,bwd.causal.bf16,bwd.causal_bottom_right.f16,bwd.padding_causal.bf16,bwd.swa.causal.bf16,bwd.bias.1hss.bf16,bwd.alibi.causal.f16,bwd.dropout.p01.bf16,bwd.softmax.off_by_one.f16,bwd.softmax.learnable.bf16,bwd.gqa8.bf16,bwd.mqa.f16,bwd.dqk24_dv40.bf16,fwd.nomask.f16}
    for tool in ${GPU_CI_SAN_TOOLS:-memcheck racecheck}; do
        stage "compute-sanitizer $tool" "$LOGS/sanitizer-$tool.log" \
            env FATTN_GPU_CASES="$SAN_CASES" CK_EXCLUDE_TAGS=large \
            timeout "${GPU_CI_SAN_TIMEOUT:-240}" compute-sanitizer --tool "$tool" --error-exitcode 99 \
            --print-limit "${GPU_CI_SAN_PRINT_LIMIT:-20}" \
            "$BUILD/tests/test_cudnn_gpu"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Checks|passed|failed|Bail" \
            "$LOGS/sanitizer-$tool.log" | tail -4
    done
fi
# Bit for bit against PyTorch's own cuDNN SDPA (docs/torch.md) and the
# speed table against it (docs/bench.md): their own scripts; the PyTorch
# comparison's files go with the logs (gpu-ci-logs/torch-<date>/), the
# benchmark's where bench/gpu_bench.sh puts them ($OUT or docs/bench-runs/).
if [ "${GPU_CI_TORCH:-0}" = 1 ]; then
    stage "tools/torch/torch_gpu.sh" "$LOGS/torch-gpu.log" timeout 300 \
        env OUT="$LOGS/torch-$(date -u +%Y-%m-%d)" BUILD_DIR="$BUILD" sh tools/torch/torch_gpu.sh
    tail -12 "$LOGS/torch-gpu.log"
fi
if [ "${GPU_CI_BENCH:-0}" = 1 ]; then
    stage "bench/gpu_bench.sh" "$LOGS/bench.log" timeout 540 \
        env BUILD_DIR="$BUILD" BENCH_REV="${GPU_CI_REV:-}" sh bench/gpu_bench.sh
    tail -16 "$LOGS/bench.log"
fi
# FP8: bench_cudnn's FP8 rows and cudnn-frontend's (bench/cfe_fp8_bench.py,
# from the carried wheel .whl/nvidia_cudnn_frontend-1.32.0-*.whl), timed the
# same way in the same run; both JSON line streams in one file beside the
# record (docs/bench.md, "FP8").
# GPU_CI_FP8_PASSES (1) alternates the two, each pass a fresh process of
# each, every line tagged "pass":N; GPU_CI_FP8_AUTOTUNE=1 runs fattn's side
# with FATTN_CUDNN_AUTOTUNE=1 (its rows then say what tuning chose).
if [ "${GPU_CI_FP8_BENCH:-0}" = 1 ]; then
    FP8J=$DEST/fp8-bench-$(date -u +%Y-%m-%d).jsonl
    : >"$FP8J"
    stage "compile bench_cudnn" "$LOGS/fp8-bench-compile.log" timeout 300 \
        meson compile -C "$BUILD" bench/bench_cudnn
    CFE_SITE=$(mktemp -d)
    stage "install cudnn-frontend wheel" "$LOGS/fp8-bench-pip.log" \
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$CFE_SITE" \
        .whl/nvidia_cudnn_frontend-1.32.0-*.whl
    p=1
    while [ "$p" -le "${GPU_CI_FP8_PASSES:-1}" ]; do
        stage "bench_cudnn --fp8 (pass $p)" "$LOGS/fp8-bench-fattn-$p.log" timeout 300 \
            env FATTN_CUDNN_AUTOTUNE="${GPU_CI_FP8_AUTOTUNE:-0}" \
            sh -c "'$BUILD/bench/bench_cudnn' --fp8 > '$LOGS/fp8-fattn-$p.jsonl'"
        stage "bench/cfe_fp8_bench.py (pass $p)" "$LOGS/fp8-bench-cfe-$p.log" timeout 300 \
            env PYTHONPATH="$CFE_SITE" PYTHONUNBUFFERED=1 \
            sh -c "python3 bench/cfe_fp8_bench.py > '$LOGS/fp8-cfe-$p.jsonl'"
        cat "$LOGS/fp8-fattn-$p.jsonl" "$LOGS/fp8-cfe-$p.jsonl" 2>/dev/null |
            sed "s/^{/{\"pass\":$p,/" >>"$FP8J" || true
        p=$((p + 1))
    done
    cat "$FP8J"
fi
if [ "${GPU_CI_FULL:-0}" = 1 ]; then
    meson test -C "$BUILD" >"$LOGS/test-full.log" 2>&1 || echo "gpu-ci: full suite failed (see test-full.log)"
    tail -12 "$LOGS/test-full.log"
fi

DATE=$(date -u +%Y-%m-%d)
# GPU_CI_REV: the revision, where the tree was copied without its history
REV=${GPU_CI_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
OUTJSON=$DEST/$DATE.json
[ -n "${GPU_CI_SUFFIX:-}" ] && OUTJSON=$DEST/$DATE-$GPU_CI_SUFFIX.json
python3 - "$RES" "$INFO" "$OUTJSON" "$REV" "$(( $(date +%s) - T0 ))" "$rc" "$DET" <<'PY'
import json, sys
res, info, out, rev, secs, rc, det = sys.argv[1:8]
cases = []
try:
    with open(res) as f:
        cases = [json.loads(l) for l in f if l.strip()]
except FileNotFoundError:
    pass
try:
    with open(info) as f:
        dev = json.load(f)
except FileNotFoundError:
    dev = {}
summary = {k: sum(1 for c in cases if c["status"] == k) for k in ("pass", "fail", "skip")}
determinism = []
try:
    with open(det) as f:
        determinism = [json.loads(l) for l in f if l.strip()]
except FileNotFoundError:
    pass
fwd = [c for c in cases if not c["id"].endswith(".backward")]
bwd = [c for c in cases if c["id"].endswith(".backward")]
summary_fwd = {k: sum(1 for c in fwd if c["status"] == k) for k in ("pass", "fail", "skip")}
summary_bwd = {k: sum(1 for c in bwd if c["status"] == k) for k in ("pass", "fail", "skip")}
doc = {"schema": "fattn-gpu-run/1", "git_rev": rev, "suites": ["cudnn-construct", "cudnn-gpu"],
       "meson_test_exit": int(rc), "seconds": int(secs), **dev, "summary": summary,
       "engines": sorted({c["engine"] for c in cases if c.get("engine") and c["status"] != "skip"}),
       "summary_forward": summary_fwd, "summary_backward": summary_bwd,
       "determinism": determinism, "cases": cases}
with open(out, "w") as f:
    json.dump(doc, f, indent=1, sort_keys=True)
    f.write("\n")
print("gpu-ci:", out, summary, "forward", summary_fwd, "backward", summary_bwd)
PY
# The record's page (docs/gpu-runs/<name>.md) and the index beside it; under
# $OUT the record is rendered once it is copied into docs/gpu-runs/.
if [ -z "${OUT:-}" ]; then
    python3 tools/docs/render-gpu-runs.py "$DEST" || echo "gpu-ci: rendering $DEST failed"
fi
# A GPU job's output folder may take only a few files: pack the logs into one.
if [ -n "${OUT:-}" ]; then
    tar czf "$OUT/gpu-ci-logs.tar.gz" --exclude='*.h5' -C "$DEST" gpu-ci-logs && rm -rf "$LOGS"
fi
echo "gpu-ci: done in $(( $(date +%s) - T0 )) s, meson test exit $rc"
exit $rc
