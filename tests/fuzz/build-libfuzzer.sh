#!/usr/bin/env bash
# Build the libFuzzer binaries of tests/fuzz/ (not part of CI: CI replays the
# committed corpora with the normal compiler, meson suite 'reliability').
#
# usage: tests/fuzz/build-libfuzzer.sh BUILD_DIR
#   BUILD_DIR: a meson build of this tree configured with clang, e.g.
#     CC=clang meson setup BUILD_DIR -Dcuda=disabled \
#         -Db_sanitize=address,undefined -Db_lundef=false \
#         -Dc_args=-fsanitize=fuzzer-no-link
#     meson compile -C BUILD_DIR harness/fattn_harness lib/fattn
# Writes BUILD_DIR/fuzz_spec and BUILD_DIR/fuzz_runfile. Run, e.g.:
#   BUILD_DIR/fuzz_spec -max_total_time=600 WORK_CORPUS tests/fuzz/seeds/fuzz_spec
# then minimise into the committed corpus:
#   BUILD_DIR/fuzz_spec -merge=1 tests/fuzz/corpus/fuzz_spec WORK_CORPUS
set -euo pipefail
build=${1:?usage: build-libfuzzer.sh BUILD_DIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CC:-clang}
flags=(-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src/harness" -I"$src/lib/include" -I"$build/lib" -I"$build/harness"
       $(pkg-config --cflags hdf5 jansson libxxhash))
libs=("$build/harness/libfattn_harness.a" "-L$build/lib" -lfattn "-Wl,-rpath,$build/lib"
      $(pkg-config --libs hdf5 jansson libxxhash) -lm -lpthread)
for t in fuzz_spec fuzz_runfile; do
    "$cc" "${flags[@]}" "$src/tests/fuzz/$t.c" "${libs[@]}" -o "$build/$t"
    echo "built $build/$t"
done
