#!/bin/sh
# Entry point at the path DESIGN.md, the README and .ci/run name; the script
# is tools/ci/install-deps.sh (tools/README.md). It runs under the shell this
# entry point runs under, as it did when it lived here.
d=$(dirname "$0")
if [ -n "${BASH_VERSION:-}" ]; then exec bash "$d/ci/install-deps.sh" "$@"; fi
exec sh "$d/ci/install-deps.sh" "$@"
