#!/bin/sh
# tools/gpu-ci.sh — what a GPU CI runner calls (DESIGN.md §7).
#
# Builds fattn with the cuDNN engine against the cuDNN PyTorch uses (or
# $CUDNN_DIR), runs the GPU test suites (cudnn-construct with
# FATTN_REQUIRE_CUDNN=1, cudnn-gpu), and writes docs/gpu-runs/<date>.json:
# device, SM count, cuDNN runtime version, per-case pass/fail/skip with the
# engine tag of each plan. With $OUT set (the device run tool), the JSON and
# all logs go under $OUT instead, to be copied into docs/gpu-runs/.
#
# Dependencies: if .deps/ holds Debian packages (tools/fetch-gpu-deps.sh), they
# are unpacked into a temporary prefix; else, as root with apt-get,
# tools/install-deps.sh installs them. GPU_CI_FULL=1 also runs the whole
# suite (its result is logged, not fatal).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DEST=${OUT:-$ROOT/docs/gpu-runs}
LOGS=$DEST/gpu-ci-logs
mkdir -p "$LOGS"
T0=$(date +%s)

if ls .deps/*.deb >/dev/null 2>&1; then
    P=$(mktemp -d)
    for f in .deps/*.deb; do dpkg -x "$f" "$P"; done
    for pc in "$P"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
        sed -i "s#^prefix=.*#prefix=$P/usr#" "$pc"
    done
    export PKG_CONFIG_PATH="$P/usr/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export C_INCLUDE_PATH="$P/usr/include${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}" # as -isystem
    export LIBRARY_PATH="$P/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$P/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    tools/install-deps.sh
fi

CUDNN=${CUDNN_DIR:-$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)}
if [ -z "$CUDNN" ] || [ ! -d "$CUDNN/include" ]; then
    CUDNN=/usr/local/cuda
fi
export LD_LIBRARY_PATH="$CUDNN/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "gpu-ci: cuDNN from $CUDNN" | tee "$LOGS/env.txt"
nvidia-smi >>"$LOGS/env.txt" 2>&1 || true

BUILD=${BUILD_DIR:-build-gpu}
if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" -Dcuda=enabled -Dcudnn_dir="$CUDNN" >"$LOGS/setup.log" 2>&1 ||
        { tail -40 "$LOGS/setup.log"; exit 2; }
fi
meson compile -C "$BUILD" >"$LOGS/compile.log" 2>&1 || { tail -60 "$LOGS/compile.log"; exit 2; }
grep -i "warning" "$LOGS/compile.log" || true

RES=$LOGS/results.jsonl
INFO=$LOGS/info.json
rm -f "$RES" "$INFO"
rc=0
FATTN_GPU_RESULTS=$RES FATTN_GPU_INFO=$INFO FATTN_REQUIRE_CUDNN=1 \
    meson test -C "$BUILD" --suite cudnn-construct --suite cudnn-gpu --print-errorlogs \
    >"$LOGS/test-gpu.log" 2>&1 || rc=$?
tail -15 "$LOGS/test-gpu.log"
cp "$BUILD/meson-logs/testlog.txt" "$LOGS/testlog-gpu.txt" 2>/dev/null || true
# The CLI end to end on the cuDNN engine (forward states; logged, not fatal).
if "$BUILD/harness/fattn" run --backend cudnn --until forward -o "$LOGS/run-cudnn-forward.h5" \
        >"$LOGS/cli-run.log" 2>&1; then
    echo "gpu-ci: fattn run --backend cudnn --until forward: ok"
else
    echo "gpu-ci: fattn run --backend cudnn --until forward: exit $? (see cli-run.log)"
fi
tail -5 "$LOGS/cli-run.log"
if [ "${GPU_CI_FULL:-0}" = 1 ]; then
    meson test -C "$BUILD" >"$LOGS/test-full.log" 2>&1 || echo "gpu-ci: full suite failed (see test-full.log)"
    tail -12 "$LOGS/test-full.log"
fi

DATE=$(date -u +%Y-%m-%d)
REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
python3 - "$RES" "$INFO" "$DEST/$DATE.json" "$REV" "$(( $(date +%s) - T0 ))" "$rc" <<'PY'
import json, sys
res, info, out, rev, secs, rc = sys.argv[1:7]
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
doc = {"schema": "fattn-gpu-run/1", "git_rev": rev, "suites": ["cudnn-construct", "cudnn-gpu"],
       "meson_test_exit": int(rc), "seconds": int(secs), **dev, "summary": summary,
       "engines": sorted({c["engine"] for c in cases if c.get("engine") and c["status"] != "skip"}),
       "cases": cases}
with open(out, "w") as f:
    json.dump(doc, f, indent=1, sort_keys=True)
    f.write("\n")
print("gpu-ci:", out, summary)
PY
echo "gpu-ci: done in $(( $(date +%s) - T0 )) s, meson test exit $rc"
exit $rc
