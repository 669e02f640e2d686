#!/bin/sh
# tools/gpu/fetch-gpu-deps.sh — download (not install) the Debian packages the
# GPU machine lacks into .deps/ (ignored by git), so that tools/gpu-ci.sh can
# unpack them there without network (docs/cudnn-engine.md, "GPU runs").
# Debian 12's packages work on the GPU machine's Ubuntu 24.04.
set -eu
cd "$(dirname "$0")/../.."
PKGS="check libsubunit-dev libsubunit0 librandom123-dev libjansson-dev libjansson4
libxxhash-dev libxxhash0"
mkdir -p .deps
cd .deps
for p in $PKGS; do
    if ls "${p}"_*.deb >/dev/null 2>&1; then
        continue
    fi
    apt-get download "$p" || { apt-get update -qq && apt-get download "$p"; }
done
ls -1 *.deb
