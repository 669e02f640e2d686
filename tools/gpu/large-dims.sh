#!/bin/sh
# tools/gpu/large-dims.sh — the device measurement of two engine gaps the
# cuDNN engine's support rows still refuse unmeasured (docs/cudnn-engine.md,
# "Head dims above 256 and FP8 with d_qk != d_v"), on the GPU machine, from
# the repository root:
#   head_dim_large_cudnn  a head dim above 256, which TE's C++ admits for
#                         inference from cuDNN 9.10.2 (fused_attn.cpp:323-329)
#   fp8_mla_cudnn         FP8 inference with d_qk 192 / d_v 128, which TE's
#                         FP8 backend admits on sm_90 (fused_attn.cpp:270)
# Each runs with its row lifted (FATTN_TEST_LIFT_ROWS, a -Dtesting build):
#   1. test_cudnn_gpu on the CPU matrix's head-dim-above-256 cases (O, Stats
#      and Max against the float64 oracle, poison outside the defined rows, a
#      second forward bitwise): `ok` per case, or `not ok` with why;
#   2. test_cudnn_fp8_gpu (its fp8.mla.d192_dv128.infer case against the CPU
#      engine's FP8 model, the d = 128 cases as before);
#   3. fattn verify --backend cudnn on the default matrix's cases of both kinds
#      (the front ends bitwise on cuDNN, repeat, CPU goldens within tolerance
#      or same-engine only for FP8).
# Then the same three with the rows in place: every such case skipped, naming
# its row. What decides the rows: a case of step 1-3 that passes lifted says
# the graph runs and is right at this cuDNN, so its row goes (or narrows to
# the cuDNN versions that fail); one that fails (cuDNN refuses the graph: no
# engine config, not supported) keeps its row, then citing the measured
# refusal. Logs and a summary (large-dims.txt) under $OUT (default
# /tmp/large-dims); BUILD_DIR as gpu-ci.sh (build-gpu).
set -u
DEST=${OUT:-/tmp/large-dims}
mkdir -p "$DEST"
. tools/gpu/gpu-env.sh
BUILD=${BUILD_DIR:-build-gpu}
if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" -Dcuda=enabled -Dcudnn_dir="$CUDNN" -Dtesting=true \
        >"$DEST/setup.log" 2>&1 || { tail -30 "$DEST/setup.log"; exit 2; }
fi
meson compile -C "$BUILD" tests/test_cudnn_gpu tests/test_cudnn_fp8_gpu harness/fattn \
    >"$DEST/compile.log" 2>&1 || { tail -40 "$DEST/compile.log"; exit 2; }
LARGE=fwd.d512.f16,fwd.d512.bf16,fwd.d1024.sq1.padding.max_logit.f16
LARGE=$LARGE,fwd.d1024.sq1.padding.max_logit.bf16,fwd.dqk512_dv64.causal.f16
LARGE=$LARGE,fwd.dqk512_dv64.causal.bf16
MATRIX='dims.d*,fp8.*.mla.*'
ROWS=head_dim_large_cudnn,fp8_mla_cudnn
F="$BUILD/harness/fattn"
SUM="$DEST/large-dims.txt"
: >"$SUM"
for mode in lifted rows; do
    if [ "$mode" = lifted ]; then L="FATTN_TEST_LIFT_ROWS=$ROWS"; else L="FATTN_TEST_LIFT_ROWS="; fi
    env $L FATTN_GPU_CASES="$LARGE" CK_EXCLUDE_TAGS=large FATTN_GPU_INFO="$DEST/info.json" \
        timeout 300 "$BUILD/tests/test_cudnn_gpu" >"$DEST/gpu-$mode.tap" 2>&1
    echo "test_cudnn_gpu ($mode): rc $?" >>"$SUM"
    env $L timeout 300 "$BUILD/tests/test_cudnn_fp8_gpu" >"$DEST/fp8-$mode.tap" 2>&1
    echo "test_cudnn_fp8_gpu ($mode): rc $?" >>"$SUM"
    for glob in $(echo "$MATRIX" | tr ',' ' '); do
        env $L timeout 300 "$F" verify --backend cudnn --filter "$glob" \
            --json "$DEST/verify-$mode-$(echo "$glob" | tr -c 'a-z0-9\n' '_').json" \
            >>"$DEST/verify-$mode.log" 2>&1
        echo "fattn verify --backend cudnn --filter '$glob' ($mode): rc $?" >>"$SUM"
    done
    grep -hE "^(not )?ok|# skip|skip|SKIP" "$DEST/gpu-$mode.tap" "$DEST/fp8-$mode.tap" \
        >>"$SUM" 2>/dev/null
    grep -hE "^(dims|fp8)\.|behavior-neutral|goldens:" "$DEST/verify-$mode.log" >>"$SUM"
done
cat "$SUM"
