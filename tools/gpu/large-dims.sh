#!/bin/sh
# tools/gpu/large-dims.sh — the cuDNN engine on two shapes TE admits, alone,
# on the GPU machine, from the repository root (docs/cudnn-engine.md, "Head
# dims above 256 and FP8 with d_qk != d_v"):
#   a head dim above 256   inference, which TE's C++ admits from cuDNN 9.10.2
#                          (fused_attn.cpp:323-329)
#   FP8 d_qk 192 / d_v 128 inference, which TE's FP8 backend admits on sm_90
#                          (fused_attn.cpp:270)
# Both ran right on an H100 with cuDNN 9.19.0 (with the engine rows that
# refused them lifted; docs/gpu-runs/2026-12-05-large-dims.txt), so no row
# refuses them now and the GPU suites and `fattn verify --backend cudnn` run
# them with every other case. This script runs just them, for a device or a
# cuDNN not measured yet: LARGE_DIMS_CUDNN_LIB names a libcudnn.so.9 to load
# (through FATTN_CUDNN_LIB, into the build made against PyTorch's cuDNN
# headers, as tools/gpu/max-rows.sh does); default the one gpu-env.sh finds.
#   1. test_cudnn_gpu on the CPU matrix's head-dim-above-256 cases (O, Stats
#      and Max against the float64 oracle, poison outside the defined rows, a
#      second forward bitwise): `ok` per case, or `not ok` with why;
#   2. test_cudnn_fp8_gpu (its fp8.mla.d192_dv128.infer case against the CPU
#      engine's FP8 model, the d = 128 cases as always);
#   3. fattn verify --backend cudnn on the default matrix's cases of both
#      kinds (the front ends bitwise on cuDNN, repeat, CPU goldens within
#      tolerance, or same-engine only for FP8).
# A case that fails or that cuDNN refuses here needs an engine row for that
# cuDNN's range (CUDNN_BELOW / CUDNN_FROM in lib/core/support.c) that cites
# this measurement. Logs and a summary (large-dims.txt) under $OUT (default
# /tmp/large-dims); BUILD_DIR as gpu-ci.sh (build-gpu). Exit 0 when every
# step exits 0, else 1.
set -u
DEST=${OUT:-/tmp/large-dims}
mkdir -p "$DEST"
. tools/gpu/gpu-env.sh
gpu_build_setup "$DEST/setup.log" || exit 2
meson compile -C "$BUILD" tests/test_cudnn_gpu tests/test_cudnn_fp8_gpu harness/fattn \
    >"$DEST/compile.log" 2>&1 || { tail -40 "$DEST/compile.log"; exit 2; }
L=
if [ -n "${LARGE_DIMS_CUDNN_LIB:-}" ]; then
    [ -f "$LARGE_DIMS_CUDNN_LIB" ] || { echo "no $LARGE_DIMS_CUDNN_LIB" >&2; exit 2; }
    LIBDIR=$(dirname "$LARGE_DIMS_CUDNN_LIB")
    L="FATTN_CUDNN_LIB=$LARGE_DIMS_CUDNN_LIB LD_LIBRARY_PATH=$LIBDIR:${LD_LIBRARY_PATH:-}"
fi
LARGE=fwd.d512.f16,fwd.d512.bf16,fwd.d1024.sq1.padding.max_logit.f16
LARGE=$LARGE,fwd.d1024.sq1.padding.max_logit.bf16,fwd.dqk512_dv64.causal.f16
LARGE=$LARGE,fwd.dqk512_dv64.causal.bf16
MATRIX='dims.d*,fp8.*.mla.*'
F="$BUILD/harness/fattn"
SUM="$DEST/large-dims.txt"
: >"$SUM"
rc=0
env $L FATTN_GPU_CASES="$LARGE" CK_EXCLUDE_TAGS=large FATTN_GPU_INFO="$DEST/info.json" \
    timeout 300 "$BUILD/tests/test_cudnn_gpu" >"$DEST/gpu.tap" 2>&1
r=$?
echo "test_cudnn_gpu: rc $r" >>"$SUM"
[ "$r" = 0 ] || rc=1
env $L timeout 300 "$BUILD/tests/test_cudnn_fp8_gpu" >"$DEST/fp8.tap" 2>&1
r=$?
echo "test_cudnn_fp8_gpu: rc $r" >>"$SUM"
[ "$r" = 0 ] || rc=1
for glob in $(echo "$MATRIX" | tr ',' ' '); do
    env $L timeout 300 "$F" verify --backend cudnn --filter "$glob" \
        --json "$DEST/verify-$(echo "$glob" | tr -c 'a-z0-9\n' '_').json" \
        >>"$DEST/verify.log" 2>&1
    r=$?
    echo "fattn verify --backend cudnn --filter '$glob': rc $r" >>"$SUM"
    [ "$r" = 0 ] || rc=1
done
grep -hE "^(not )?ok|:[FE]:|^# (device|skip|plans)|^# fp8\.mla|Checks" "$DEST/gpu.tap" "$DEST/fp8.tap" \
    >>"$SUM" 2>/dev/null
grep -hE "^(dims|fp8)\.|behavior-neutral|goldens:" "$DEST/verify.log" >>"$SUM"
cat "$SUM"
exit $rc
