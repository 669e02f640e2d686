# tools/gpu/gpu-env.sh — the GPU machine's build environment, sourced (not
# run) from the repository root by tools/gpu/gpu-ci.sh, the probes beside it,
# tools/te/gpu-te.sh and bench/gpu_bench.sh.
#
# Dependencies: if .deps/ holds Debian packages (tools/gpu/fetch-gpu-deps.sh), they
# are unpacked into a temporary prefix and the compiler, pkg-config and loader
# paths point there; else, as root with apt-get, tools/install-deps.sh installs
# them. Then CUDNN is the cuDNN root to build against: $CUDNN_DIR, else the
# one PyTorch's environment carries (nvidia.cudnn), else /usr/local/cuda; its
# lib/ and the CUDA runtime's go first on LD_LIBRARY_PATH.
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

# gpu_build_setup LOG: configures $BUILD (default build-gpu) for the cuDNN engine
# once, with the test targets, so that every GPU script finds the same build
# whichever ran first (a build configured without them would make a later
# script's test targets unknown); on failure LOG's tail, status 2.
BUILD=${BUILD_DIR:-build-gpu}
gpu_build_setup() {
    [ -f "$BUILD/build.ninja" ] && return 0
    meson setup "$BUILD" -Dcuda=enabled -Dcudnn_dir="$CUDNN" -Dtesting=true >"$1" 2>&1 ||
        { tail -40 "$1"; return 2; }
}
