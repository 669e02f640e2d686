#!/usr/bin/env bash
# compare-commits.sh REV_A REV_B [--cases FILE] [--backend cpu|cudnn|auto] [--keep DIR]
#
# Is the change from REV_A to REV_B behaviour-neutral? Builds both revisions
# in temporary git worktrees (optimised, no tests), runs the same matrix with
# each — both front ends — and compares the run files with `fattn diff`
# (from REV_B's build, or REV_A's if REV_B has none). The matrix is REV_A's
# golden/default_cases.json unless --cases names a file. A difference shows
# the diff's first 40 lines, how many were cut, and its summary line.
# --keep DIR works in DIR and keeps what is made there (run files, build,
# run and full diff logs; the worktrees are removed) instead of a
# temporary directory. Prints one verdict line; exit 0 identical,
# 1 different, 2 a build or usage failure (or no git repository).
set -euo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }

case "${1:-}" in -h|--help) usage; exit 0 ;; esac
[ $# -ge 2 ] || { usage >&2; exit 2; }
rev_a=$1 rev_b=$2
shift 2
cases="" backend="cpu" keep=""
while [ $# -gt 0 ]; do
    case "$1" in
        --cases) cases=$(realpath "$2"); shift 2 ;;
        --backend) backend=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "compare-commits: unknown argument '$1'" >&2; exit 2 ;;
    esac
done

top=$(git rev-parse --show-toplevel 2>/dev/null) ||
    { echo "compare-commits: $(pwd) is not inside a git repository: run it from a clone" >&2; exit 2; }
sha_a=$(git -C "$top" rev-parse --verify "$rev_a^{commit}") || { echo "compare-commits: no revision $rev_a" >&2; exit 2; }
sha_b=$(git -C "$top" rev-parse --verify "$rev_b^{commit}") || { echo "compare-commits: no revision $rev_b" >&2; exit 2; }
work=${keep:-$(mktemp -d)}
mkdir -p "$work"
cleanup() {
    for side in a b; do
        [ -d "$work/$side" ] && git -C "$top" worktree remove --force "$work/$side" >/dev/null 2>&1 || true
    done
    [ -n "$keep" ] || rm -rf "$work"
}
trap cleanup EXIT

build() { # side sha
    local side=$1 sha=$2
    git -C "$top" worktree add --detach "$work/$side" "$sha" >/dev/null 2>&1 ||
        { echo "compare-commits: cannot check out $sha" >&2; exit 2; }
    if ! { meson setup "$work/$side/build" "$work/$side" -Dtests=disabled -Dcuda=auto &&
           meson compile -C "$work/$side/build"; } >"$work/build-$side.log" 2>&1; then
        tail -20 "$work/build-$side.log" >&2
        echo "compare-commits: building $sha failed (log: $work/build-$side.log)" >&2
        exit 2
    fi
}

echo "compare-commits: building $rev_a ($sha_a) and $rev_b ($sha_b) in $work"
build a "$sha_a"
build b "$sha_b"
[ -n "$cases" ] || cases="$work/a/golden/default_cases.json"

status=0
for impl in legacy split; do
    for side in a b; do
        if ! "$work/$side/build/harness/fattn" run --cases "$cases" --impl "$impl" \
                --backend "$backend" -o "$work/$side-$impl.h5" 2>"$work/run-$side-$impl.log"; then
            cat "$work/run-$side-$impl.log" >&2
            echo "compare-commits: fattn run ($side, $impl) failed" >&2
            exit 2
        fi
    done
done

differ=""
for side in b a; do
    if "$work/$side/build/harness/fattn" diff --help >/dev/null 2>&1; then
        differ="$work/$side/build/harness/fattn"
        break
    fi
done
[ -n "$differ" ] || { echo "compare-commits: neither revision has fattn diff" >&2; exit 2; }

# The first 40 lines of a diff report, how many lines are cut, and its last
# line (the summary), so that a long list still ends with the counts.
show_diff() {
    local total
    total=$(wc -l <"$1")
    if [ "$total" -le 41 ]; then cat "$1"; return; fi
    sed -n '1,40p' "$1"
    echo "... $((total - 41)) more lines cut$([ -n "$keep" ] && echo " (all in $1)" || echo "; --keep DIR keeps the full report")"
    tail -n 1 "$1"
}

for impl in legacy split; do
    set +e
    "$differ" diff "$work/a-$impl.h5" "$work/b-$impl.h5" >"$work/diff-$impl.txt" 2>&1
    rc=$?
    set -e
    case $rc in
        0) echo "compare-commits: $impl: identical" ;;
        1) echo "compare-commits: $impl: DIFFERENT"; show_diff "$work/diff-$impl.txt"; status=1 ;;
        *) cat "$work/diff-$impl.txt" >&2; echo "compare-commits: diff failed" >&2; exit 2 ;;
    esac
done
n=$(grep -c '"id"' "$cases" || true)
if [ $status -eq 0 ]; then
    echo "compare-commits: $rev_a -> $rev_b: behavior-neutral ($n cases, both front ends, backend $backend)"
else
    echo "compare-commits: $rev_a -> $rev_b: NOT behavior-neutral (see above)"
fi
exit $status
