#!/bin/sh
# The Python environment fattn-te runs TransformerEngine's Python in: a
# virtual environment with torch (PyPI's build; it runs without a GPU),
# numpy, h5py and the few pure-Python packages TE's import chain needs, plus
# TE's pure-Python wheels unpacked by version (never installed: installing
# would pull TE's compiled dependencies).
#
# Idempotent and cached: a second run with the same versions changes
# nothing and downloads nothing. Usage:
#   tools/te/setup.sh [VERSION...]   (default: every release the support
#                                     table knows, tools/te/releases.sh)
# Environment:
#   FATTN_TE_ENV     where it lives (default ~/.cache/fattn-te)
#   FATTN_TE_PYTHON  the interpreter the venv is made from (default python3)
set -eu

env_dir=${FATTN_TE_ENV:-${HOME:-/root}/.cache/fattn-te}
python=${FATTN_TE_PYTHON:-python3}
if [ $# -eq 0 ]; then
    # shellcheck disable=SC2046 # one word per release on purpose
    set -- $("$(dirname "$0")/releases.sh")
fi

# Bumped when the package list changes, so that an older venv is completed.
pkgs="torch numpy h5py pydantic packaging einops onnxscript"
stamp="$env_dir/venv/.fattn-te-packages"

mkdir -p "$env_dir"
start=$(date +%s)
if [ ! -x "$env_dir/venv/bin/python" ]; then
    echo "fattn-te setup: creating $env_dir/venv" >&2
    "$python" -m venv "$env_dir/venv"
fi
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$pkgs" ]; then
    echo "fattn-te setup: installing $pkgs" >&2
    # shellcheck disable=SC2086 # the list is words on purpose
    "$env_dir/venv/bin/python" -m pip install --progress-bar off -q $pkgs
    printf '%s\n' "$pkgs" >"$stamp"
fi

for ver in "$@"; do
    case $ver in
    *[!0-9.]* | '')
        echo "fattn-te setup: '$ver' is not a TE release number (as tools/te/releases.sh lists them)" >&2
        exit 2 ;;
    esac
    dest="$env_dir/te/$ver"
    [ -f "$dest/.fattn-te-unpacked" ] && continue
    echo "fattn-te setup: fetching transformer-engine==$ver (pure-Python wheel)" >&2
    mkdir -p "$env_dir/wheels"
    "$env_dir/venv/bin/python" -m pip download --progress-bar off -q --no-deps \
        --only-binary=:all: "transformer-engine==$ver" -d "$env_dir/wheels"
    whl="$env_dir/wheels/transformer_engine-$ver-py3-none-any.whl"
    [ -f "$whl" ] || { echo "fattn-te setup: pip gave no $whl" >&2; exit 1; }
    rm -rf "$dest.tmp"
    "$env_dir/venv/bin/python" -m zipfile -e "$whl" "$dest.tmp"
    touch "$dest.tmp/.fattn-te-unpacked"
    rm -rf "$dest"
    mv "$dest.tmp" "$dest"
done
echo "fattn-te setup: ready in $env_dir ($(( $(date +%s) - start )) s)" >&2
