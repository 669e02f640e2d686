#!/bin/sh
# bench_diff.sh: time `fattn diff` against cmp and h5diff on two warm-cache
# run files of one large float32 dataset that differ in a single late element.
#
# usage: bench/bench_diff.sh BUILD_DIR [MIB] [WORKDIR]
#   MIB      size of the dataset in MiB (default 2048)
#   WORKDIR  where the two files go (default: a new directory under /tmp)
# Prints one line: sizes, the three times and the ratios. Files are removed.
set -eu
build=${1:?usage: bench_diff.sh BUILD_DIR [MIB] [WORKDIR]}
mib=${2:-2048}
work=${3:-$(mktemp -d /tmp/fattn-bench-diff.XXXXXX)}
fattn=$build/harness/fattn
gen=$build/bench/gen_runfile
mkdir -p "$work"
trap 'rm -f "$work/a.h5" "$work/b.h5" "$work/c.h5"' EXIT
n=$((mib * 262144))
"$gen" "$work/a.h5" "$mib"
"$gen" "$work/b.h5" "$mib" $((n - 7))
cp "$work/a.h5" "$work/c.h5"
# warm the page cache
cat "$work/a.h5" "$work/b.h5" "$work/c.h5" > /dev/null

now() { date +%s.%N; }
# timeit WANT CMD...: seconds of one run; the exit status must be WANT
timeit() {
    want=$1
    shift
    t0=$(now)
    set +e
    "$@" > /dev/null 2>&1
    rc=$?
    set -e
    t1=$(now)
    if [ "$rc" -ne "$want" ]; then
        echo "bench_diff: $1 exited $rc, want $want" >&2
        exit 2
    fi
    echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}
best() { # best of 3
    for _ in 1 2 3; do
        timeit "$@"
        echo
    done | sort -n | head -n 1
}
t_diff=$(best 1 "$fattn" diff "$work/a.h5" "$work/b.h5")
# cmp stops at the first differing byte (the digest attribute in the object
# header), so its throughput is measured on a byte-identical copy: a full read
# of both files, what fattn diff must do.
t_cmp=$(best 0 cmp "$work/a.h5" "$work/c.h5")
if command -v h5diff > /dev/null; then
    t_h5=$(timeit 1 h5diff "$work/a.h5" "$work/b.h5")
else
    t_h5=nan
fi
size=$(stat -c %s "$work/a.h5")
awk -v s="$size" -v d="$t_diff" -v c="$t_cmp" -v h="$t_h5" 'BEGIN {
    printf "bench_diff: 2 x %.2f GiB, one differing element: fattn diff %.3f s, cmp %.3f s, " \
           "h5diff %s s (full-read cmp of identical copies); fattn diff throughput = %.2f x cmp, %s x h5diff\n",
           s / 1073741824, d, c, h, c / d, (h == "nan") ? "n/a" : sprintf("%.1f", h / d) }'
