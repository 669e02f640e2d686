#!/usr/bin/python3
"""Every self-test mutant patch still applies to its file of lib/split exactly.

usage: check_patches.py PATCH_EXE (TARGET_C PATCH)...   (prints TAP)

One test per patch: its `+++ b/lib/split/X.c` header must name TARGET_C
(the file tests/mutants/meson.build applies it to), and `patch --dry-run
--fuzz=0` against TARGET_C must succeed, so a change to the split sources
that leaves a mutant behind fails here, in every build, and not only in a
-Dself_test_mutants=true one.
"""
import os
import re
import subprocess
import sys
import tempfile
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tap  # noqa: E402  (tests/tap.py)

PATCH, ARGS = sys.argv[1], sys.argv[2:]
assert len(ARGS) % 2 == 0, "usage: check_patches.py PATCH_EXE (TARGET_C PATCH)..."
TESTS = tap.Tests()


def make(target, patch):
    name, rel = os.path.basename(patch), "lib/split/" + os.path.basename(target)

    @TESTS.case("mutant patch %s applies to %s without fuzz" % (name, rel))
    def _():
        with open(patch) as f:
            heads = re.findall(r"^\+\+\+ b/(\S+)", f.read(), re.M)
        assert heads == [rel], "%s: its +++ header names %s, meson applies it to %s" % (
            name, heads or "no file", rel)
        with tempfile.TemporaryDirectory(prefix="fattn-mutant-") as d:
            p = subprocess.run([PATCH, "--dry-run", "--fuzz=0", "--no-backup-if-mismatch",
                                "--reject-file=-", "-o", os.path.join(d, "out.c"),
                                target, patch], capture_output=True, text=True)
            assert p.returncode == 0, "%s no longer applies:\n%s%s" % (name, p.stdout, p.stderr)


for _t, _p in zip(ARGS[0::2], ARGS[1::2]):
    make(_t, _p)

if __name__ == "__main__":
    sys.exit(1 if tap.run(TESTS) else 0)
