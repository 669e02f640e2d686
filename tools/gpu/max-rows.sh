#!/bin/sh
# tools/gpu/max-rows.sh — return_max_logit on the cuDNN engine (docs/te.md,
# "max_logit on cuDNN"), on the GPU machine: with the cuDNN that .cudnn-new/
# holds (>= 9.21; a tar.zst of its lib/ and include/ in parts *.tzst.NN, as
# tools/gpu/det-probe.sh takes it; MAX_ROWS_PARTS names another folder,
# MAX_ROWS_ZSTD the zstd to use), loaded through FATTN_CUDNN_LIB into the
# build made against PyTorch's cuDNN headers:
#   1. the GPU suite's max_logit cases (O, Stats, Max against the float64
#      oracle, poison outside the defined rows, a repeat), under PyTorch's
#      cuDNN (they skip below 9.21) and under the new one;
#   2. test_cudnn_gpu --max-rows: what cuDNN leaves in Max past each
#      sequence's length (NaN-payload fill, finite sentinel, unfilled) and
#      TE's amax over every row against fattn's over the defined rows.
# Logs and max-rows.jsonl under $OUT (default /tmp/max-rows).
set -u
DEST=${OUT:-/tmp/max-rows}
mkdir -p "$DEST"
. tools/gpu/gpu-env.sh
gpu_build_setup "$DEST/setup.log" || exit 2
meson compile -C "$BUILD" tests/test_cudnn_gpu >"$DEST/compile.log" 2>&1 ||
    { tail -40 "$DEST/compile.log"; exit 2; }
NEW=/tmp/cudnn-new
PARTS=${MAX_ROWS_PARTS:-.cudnn-new}
ZSTD=${MAX_ROWS_ZSTD:-zstd}
if [ ! -f "$NEW/lib/libcudnn.so.9" ]; then
    ls "$PARTS"/*.tzst.* >/dev/null 2>&1 || { echo "no $PARTS/*.tzst.*" >&2; exit 2; }
    mkdir -p "$NEW" && cat "$PARTS"/*.tzst.* | $ZSTD -dq | tar x -C "$NEW" || exit 2
fi
CASES=bwd.max_logit.f16,bwd.max_logit.bf16,bwd.max_logit.thd.f16,bwd.max_logit.thd.bf16
CASES=$CASES,fwd.max_logit.fully_masked_rows.f16,fwd.max_logit.fully_masked_rows.bf16
T="$BUILD/tests/test_cudnn_gpu"
env FATTN_GPU_CASES="$CASES" CK_EXCLUDE_TAGS=large "$T" >"$DEST/cases-pytorch.tap" 2>&1
echo "max_logit cases, PyTorch's cuDNN: rc $?" >&2
L="FATTN_CUDNN_LIB=$NEW/lib/libcudnn.so.9 LD_LIBRARY_PATH=$NEW/lib:$LD_LIBRARY_PATH"
env $L FATTN_GPU_CASES="$CASES" CK_EXCLUDE_TAGS=large FATTN_GPU_INFO="$DEST/info-new.json" \
    "$T" >"$DEST/cases-new.tap" 2>&1
echo "max_logit cases, $NEW: rc $?" >&2
env $L "$T" --max-rows "$DEST/max-rows.jsonl" >"$DEST/max-rows.log" 2>&1
echo "max-rows: rc $?" >&2
grep -h "^not ok\|^# device\|SKIP\|skip" "$DEST/cases-pytorch.tap" "$DEST/cases-new.tap" >&2
cat "$DEST/max-rows.log" >&2
