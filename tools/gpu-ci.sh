#!/bin/sh
# Entry point at the path DESIGN.md, GPU runners and the docs name; the script
# is tools/gpu/gpu-ci.sh (tools/README.md). It runs under the shell this
# entry point runs under, as it did when it lived here.
d=$(dirname "$0")
if [ -n "${BASH_VERSION:-}" ]; then exec bash "$d/gpu/gpu-ci.sh" "$@"; fi
exec sh "$d/gpu/gpu-ci.sh" "$@"
