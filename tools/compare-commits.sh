#!/usr/bin/env bash
# Entry point at the path the docs name (docs/verify.md); the script is
# tools/workflow/compare-commits.sh (tools/README.md).
exec bash "$(dirname "$0")/workflow/compare-commits.sh" "$@"
