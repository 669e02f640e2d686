#!/bin/sh
# tools/gpu/det-probe.sh — the deterministic backward's algorithms on the GPU
# machine (docs/bench.md, "The deterministic backward at d = 64"): bench_cudnn
# under the cuDNN PyTorch uses and, where .cudnn-new/ holds a newer cuDNN
# (a tar.zst of its lib/ and include/, split in parts named *.tzst.NN;
# DET_PROBE_PARTS names another folder, DET_PROBE_ZSTD the zstd to use), under
# that one too, each with the direct-dQ graph (default) and with
# FATTN_CUDNN_DET=ordered; then the ordered variant's bitwise repeatability
# (test_cudnn_gpu --determinism). JSON lines and logs under $OUT.
set -u
DEST=${OUT:-/tmp/det-probe}
mkdir -p "$DEST"
. tools/gpu/gpu-env.sh
gpu_build_setup "$DEST/setup.log" || exit 2
meson compile -C "$BUILD" bench/bench_cudnn tests/test_cudnn_gpu >"$DEST/compile.log" 2>&1 ||
    { tail -40 "$DEST/compile.log"; exit 2; }
ONLY=${DET_PROBE_ONLY:-b*}
J=$DEST/det-probe.jsonl
: >"$J"
run() { # label, then env assignments; the bench's lines tagged with the label
    label=$1; shift
    echo "== $label" >&2
    { env "$@" "$BUILD/bench/bench_cudnn" --host-calls 3 --only "$ONLY" 2>>"$DEST/bench.log"
      echo "bench_cudnn ($label): exit $?" >>"$DEST/bench.log"; } |
        sed "s/^{/{\"probe\":\"$label\",/" >>"$J"
}
run cudnn-pytorch
if [ -n "${DET_PROBE_TAG919:-}" ]; then run cudnn-pytorch-tag FATTN_CUDNN_DET_TAG="$DET_PROBE_TAG919"; fi
NEW=/tmp/cudnn-new
PARTS=${DET_PROBE_PARTS:-.cudnn-new}
ZSTD=${DET_PROBE_ZSTD:-zstd}
if ls "$PARTS"/*.tzst.* >/dev/null 2>&1; then
    mkdir -p "$NEW" && cat "$PARTS"/*.tzst.* | $ZSTD -dq | tar x -C "$NEW" || exit 2
    L="FATTN_CUDNN_LIB=$NEW/lib/libcudnn.so.9 LD_LIBRARY_PATH=$NEW/lib:$LD_LIBRARY_PATH"
    run cudnn-new $L
    run cudnn-new-ordered $L FATTN_CUDNN_DET=ordered
    run cudnn-new-native $L FATTN_CUDNN_BWD=native
    env $L FATTN_CUDNN_DET=ordered FATTN_DET_ROWS=${DET_PROBE_ROWS:-nomask,causal,gqa,padding} \
        "$BUILD/tests/test_cudnn_gpu" --determinism "$DEST/det-ordered.json" 5 \
        >"$DEST/det-ordered.log" 2>&1
    echo "determinism (ordered): rc $?" >&2
fi
tail -5 "$DEST/bench.log" >&2
