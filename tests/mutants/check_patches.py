#!/usr/bin/python3
"""Every self-test mutant patch still applies to lib/split/split.c exactly.

usage: check_patches.py PATCH_EXE SPLIT_C PATCH...   (prints TAP)

One test per patch: `patch --dry-run --fuzz=0` against SPLIT_C must succeed,
so a change to split.c that leaves a mutant behind fails here, in every
build, and not only in a -Dself_test_mutants=true one.
"""
import os
import subprocess
import sys
import tempfile
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tap  # noqa: E402  (tests/tap.py)

PATCH, SPLIT_C, PATCHES = sys.argv[1], sys.argv[2], sys.argv[3:]
TESTS = tap.Tests()


def make(patch):
    name = os.path.basename(patch)

    @TESTS.case("mutant patch %s applies to lib/split/split.c without fuzz" % name)
    def _():
        with tempfile.TemporaryDirectory(prefix="fattn-mutant-") as d:
            p = subprocess.run([PATCH, "--dry-run", "--fuzz=0", "--no-backup-if-mismatch",
                                "--reject-file=-", "-o", os.path.join(d, "split.c"),
                                SPLIT_C, patch], capture_output=True, text=True)
            assert p.returncode == 0, "%s no longer applies:\n%s%s" % (name, p.stdout, p.stderr)


for _p in PATCHES:
    make(_p)

if __name__ == "__main__":
    sys.exit(1 if tap.run(TESTS) else 0)
