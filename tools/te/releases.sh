#!/bin/sh
# The TE releases fattn's support table knows, oldest first, one per line:
# each wheel's release (e.g. 2.20.2), read from the table itself
# (lib/include/fattn/te_releases.h, FATTN_TE_RELEASES), so that adding a
# release there is all the TE tools need: setup.sh fetches every one,
# gpu-te.sh verifies each release against the one before, test_te.sh runs
# the first two (TE's monolith, which fattn's legacy front end models, and
# the refactor as merged, which split models).
# Usage:
#   tools/te/releases.sh            every release
#   tools/te/releases.sh --newest   the newest only
# Environment:
#   FATTN_TE_RELEASES_H  another copy of the header to read (suite
#                        te_release's dry run with a made-up release)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
header=${FATTN_TE_RELEASES_H:-$here/../../lib/include/fattn/te_releases.h}
[ -r "$header" ] || { echo "releases.sh: cannot read $header" >&2; exit 2; }
# The table's rows: `X(id, "name", "release", "cpp_rev")`, the first bare,
# the others after `S()`, one to a line inside the #define (the dry run's
# row is a #define line of its own, so it is never read here).
list=$(sed -n 's/^[[:space:]]*\(S()[[:space:]]*\)\{0,1\}X([A-Za-z0-9_]*,[[:space:]]*"[^"]*",[[:space:]]*"\([^"]*\)",[[:space:]]*"[^"]*")[[:space:]]*\\\{0,1\}[[:space:]]*$/\2/p' "$header")
[ -n "$list" ] || { echo "releases.sh: no release rows in $header" >&2; exit 2; }
case ${1:-} in
'') printf '%s\n' "$list" ;;
--newest) printf '%s\n' "$list" | tail -n 1 ;;
*) echo "usage: releases.sh [--newest]" >&2; exit 2 ;;
esac
