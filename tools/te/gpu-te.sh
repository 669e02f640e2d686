#!/bin/sh
# TE's own FusedAttnFunc on the cuDNN engine, on a GPU machine without
# network (docs/te.md, "On a GPU runner"): builds fattn with cuDNN
# (tools/gpu/gpu-env.sh finds the cuDNN PyTorch uses), makes fattn-te's
# environment from the machine's own Python (its torch, numpy, h5py) plus
# the wheels in $FATTN_TE_WHEELS (default .whl: TE's pure-Python wheels and
# the few pure-Python packages TE's import chain needs, listed in
# tools/te/setup.sh), then runs `fattn-te verify --backend cudnn` for each
# release the support table knows against the one before it
# (tools/te/releases.sh). Logs and run files go under $OUT (default
# build-gpu-te/out). Each stage runs under its own time limit and writes
# per-case progress (and, past GPU_TE_STALL_S seconds, Python stacks) to
# its log, so that a stopped run still says where it was:
#   probe   torch sees the GPU (60 s)
#   one     fattn-te run of the newest release on one case (GPU_TE_ONE_S,
#           default 150 s)
#   one_fp8 the same on one FP8 case through TE's FP8 path
#           (GPU_TE_ONE_FP8, default fp8.ds.bshd; GPU_TE_ONE_S)
#   verify  fattn-te verify of the first two releases on GPU_TE_FILTER
#           (default every case, the FP8 ones included), GPU_TE_VERIFY_S
#           (default 420 s); verify2, verify3, ... each later release
#           against the one before
# With --cp N (a runner with N >= 2 GPUs), the stages are probe and cp
# instead: `fattn-te verify --cp-matrix --backend cudnn` of the first two
# releases on the CP matrix's cases of at most N ranks
# (golden/cp_cases.json: cp2.* for 2 GPUs, all of it from 4), each rank a
# process on its own GPU, NCCL between them, fattn's cuDNN engine in each
# (docs/te.md, "Context parallelism"; GPU_TE_CP_S, default 600 s).
#   dpa     the first two releases through TE's DotProductAttention itself
#           (--call dpa: its constructor needs CUDA, so only here),
#           GPU_TE_DPA_S (default 420 s); a case DPA routes away from
#           FusedAttention is listed as routed away, not compared
# GPU_TE_STAGES (default "one one_fp8 verify dpa") names the stages after
# probe that run, e.g. GPU_TE_STAGES=dpa to rerun only that one.
# Exit status: the first failing stage's (124 for a time limit), else
# fattn-te verify's, else the dpa stage's.
set -eu
CP=
if [ "${1:-}" = "--cp" ]; then
    CP=${2:?--cp needs the number of GPUs}
    case $CP in *[!0-9]*|'') echo "gpu-te: --cp $CP: not a number" >&2; exit 2 ;; esac
    shift 2
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build-gpu-te/out}
WHEELS=${FATTN_TE_WHEELS:-$ROOT/.whl}
mkdir -p "$OUT"
T0=$(date +%s)

. tools/gpu/gpu-env.sh
gpu_build_setup "$OUT/setup.log" || exit 2
meson compile -C "$BUILD" harness/fattn lib/fattn:shared_library >"$OUT/compile.log" 2>&1 ||
    { tail -60 "$OUT/compile.log"; exit 2; }

# fattn-te's environment layout (tools/te/setup.sh): venv/bin/python and
# te/<version>/ unpacked. venv/bin/python runs the machine's python3 itself
# (a wrapper, not a venv: that python3 may be a venv already, whose packages
# a second venv would not see).
ENV_DIR=${FATTN_TE_ENV:-$ROOT/build-gpu-te/env}
mkdir -p "$ENV_DIR/venv/bin"
printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" >"$ENV_DIR/venv/bin/python"
chmod +x "$ENV_DIR/venv/bin/python"
SITE=$ENV_DIR/site
for w in "$WHEELS"/*.whl; do
    case $(basename "$w") in
    transformer_engine-*)
        ver=$(basename "$w" | sed 's/^transformer_engine-\([0-9.]*\)-.*/\1/')
        if [ ! -f "$ENV_DIR/te/$ver/.fattn-te-unpacked" ]; then
            python3 -m zipfile -e "$w" "$ENV_DIR/te/$ver"
            touch "$ENV_DIR/te/$ver/.fattn-te-unpacked"
        fi ;;
    *) python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
           --target "$SITE" "$w" >>"$OUT/pip.log" 2>&1 ;;
    esac
done
echo "gpu-te: environment ready in $(( $(date +%s) - T0 )) s" | tee "$OUT/summary.txt"

export FATTN_TE_ENV="$ENV_DIR" FATTN="$ROOT/$BUILD/harness/fattn"
export FATTN_LIB="$ROOT/$BUILD/lib/libfattn.so"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export FATTN_TE_PROGRESS=1 FATTN_TE_STALL_S=${GPU_TE_STALL_S:-60} PYTHONUNBUFFERED=1

stage() { # name limit command...: runs it, logs to $OUT/<name>.log, keeps the log's tail
    name=$1 limit=$2; shift 2
    t=$(date +%s); src=0
    timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1 || src=$?
    echo "gpu-te: stage $name exit $src after $(( $(date +%s) - t )) s" | tee -a "$OUT/summary.txt"
    # the verdict lines come first in a long log: kept whole before its tail is
    grep -e '->' -e '^FP8:' -e 'context parallelism' -e 'through DotProductAttention' \
        -e 'routed away' -e '^  /cases/' -e '^  cause:' "$OUT/$name.log" >"$OUT/$name.lines" || true
    tail -c 20000 "$OUT/$name.log" >"$OUT/$name.tail" && mv "$OUT/$name.tail" "$OUT/$name.log"
    return $src
}

stage probe 60 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0), "gpus", torch.cuda.device_count())' ||
    exit $?
cat "$OUT/probe.log" >>"$OUT/summary.txt"
if [ -n "$CP" ]; then
    gpus=$(sed -n 's/.* gpus \([0-9]*\)$/\1/p' "$OUT/probe.log")
    if [ "${gpus:-0}" -lt "$CP" ] || [ "$CP" -lt 2 ]; then
        echo "gpu-te: --cp $CP needs 2 <= $CP GPUs; torch sees ${gpus:-0}" | tee -a "$OUT/summary.txt"
        exit 2
    fi
    if [ "$CP" -ge 4 ]; then set --; else set -- --filter 'cp2.*'; fi
    rc=0
    stage cp "${GPU_TE_CP_S:-600}" tools/te/fattn-te verify --te "$(tools/te/releases.sh | sed -n 1p)" \
        --te "$(tools/te/releases.sh | sed -n 2p)" --cp-matrix \
        --backend cudnn --keep "$OUT/cp-runs" "$@" || rc=$?
    grep -e '->' -e 'context parallelism' "$OUT/cp.lines" >>"$OUT/summary.txt" || true
    [ -n "${GPU_TE_KEEP_RUNS:-}" ] || rm -rf "$OUT/cp-runs"
    echo "gpu-te: done, exit $rc after $(( $(date +%s) - T0 )) s" | tee -a "$OUT/summary.txt"
    exit $rc
fi
STAGES=" ${GPU_TE_STAGES:-one one_fp8 verify dpa} "
wants() { case $STAGES in *" $1 "*) return 0 ;; esac; return 1; }
newest=$(tools/te/releases.sh --newest)
! wants one || stage one "${GPU_TE_ONE_S:-150}" tools/te/fattn-te run --te "$newest" --backend cudnn \
    --filter "${GPU_TE_ONE:-layout.bshd_bshd_bshd.causal.bf16}" -o "$OUT/one.h5" || exit $?
if wants one_fp8; then
stage one_fp8 "${GPU_TE_ONE_S:-150}" tools/te/fattn-te run --te "$newest" --backend cudnn \
    --filter "${GPU_TE_ONE_FP8:-fp8.ds.bshd}" -o "$OUT/one_fp8.h5" || exit $?
"$FATTN" run --impl split --backend cudnn --filter "${GPU_TE_ONE_FP8:-fp8.ds.bshd}" \
    -o "$OUT/one_fp8_fattn.h5" >/dev/null 2>&1 &&
    "$FATTN" diff "$OUT/one_fp8_fattn.h5" "$OUT/one_fp8.h5" >>"$OUT/one_fp8.log" 2>&1 || true
tail -1 "$OUT/one_fp8.log" | sed 's/^/gpu-te: one_fp8 vs fattn split: /' >>"$OUT/summary.txt"
fi
rc=0
if [ -n "${GPU_TE_FILTER:-}" ]; then set -- --filter "$GPU_TE_FILTER"; else set --; fi
prev='' n=0
for rel in $(tools/te/releases.sh); do
    if [ -n "$prev" ] && wants verify; then
        n=$((n + 1)) name=verify keep=$OUT/runs
        [ $n -eq 1 ] || name=verify$n keep=$OUT/runs-verify$n
        vrc=0
        stage "$name" "${GPU_TE_VERIFY_S:-420}" tools/te/fattn-te verify --te "$prev" \
            --te "$rel" --backend cudnn --keep "$keep" "$@" || vrc=$?
        [ $rc -ne 0 ] || rc=$vrc
        grep -e '->' -e '^FP8:' "$OUT/$name.lines" >>"$OUT/summary.txt" || true
    fi
    prev=$rel
done
rel1=$(tools/te/releases.sh | sed -n 1p) rel2=$(tools/te/releases.sh | sed -n 2p)
rc_dpa=0
! wants dpa || stage dpa "${GPU_TE_DPA_S:-420}" tools/te/fattn-te verify --te "$rel1" --te "$rel2" \
    --backend cudnn --call dpa --keep "$OUT/runs-dpa" "$@" || rc_dpa=$?
grep -e '->' -e '^te-[0-9.]*: [0-9]* cases* through DotProductAttention' -e 'routed away' \
    -e '^FP8:' "$OUT/dpa.lines" 2>/dev/null | sed 's/^/dpa: /' >>"$OUT/summary.txt" || true
[ "$rc" -ne 0 ] || rc=$rc_dpa
# run files are large; only the verdicts and logs come back unless asked
[ -n "${GPU_TE_KEEP_RUNS:-}" ] || rm -rf "$OUT/runs" "$OUT"/runs-verify* "$OUT/runs-dpa" "$OUT/one.h5" "$OUT/one_fp8.h5" \
    "$OUT/one_fp8_fattn.h5"
echo "gpu-te: done, exit $rc after $(( $(date +%s) - T0 )) s" | tee -a "$OUT/summary.txt"
exit $rc
