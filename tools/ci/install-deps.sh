#!/bin/sh
# Install every build, test and GPU-script dependency of fattn from Debian.
# Idempotent: packages already present are left alone and apt is not touched.
# Runs as root (CI, containers) or through sudo when available.
# --main: only what building fattn and its main job (fattn verify) need:
# no test tools, no browser (the report test's Chromium comes with the rest).
set -eu

MAIN="build-essential pkg-config meson ninja-build git
libhdf5-dev librandom123-dev libjansson-dev libxxhash-dev"
TESTS="hdf5-tools check libsubunit-dev
python3 python3-h5py python3-numpy
chromium"
case "${1:-}" in
    --main) PKGS=$MAIN ;;
    "") PKGS="$MAIN $TESTS" ;;
    *) echo "install-deps: unknown argument '$1' (--main installs only what the build and fattn verify need)" >&2; exit 2 ;;
esac

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    echo "install-deps: all dependencies present"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "install-deps: need root to install:$missing" >&2; exit 1
    fi
fi

echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
