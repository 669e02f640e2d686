#!/usr/bin/python3
"""docs/reliability.md's fuzzing commands keep what they make under their
work directory.

usage: test_fuzz_doc.py RELIABILITY_MD

The command block of the Fuzzing section, from its `B=` line on, is run
with B pointing at stand-in fuzzers, SRC at a stand-in source tree (the
files the commands name) and W at a directory that does not exist yet, from
inside that source tree. A stand-in writes where libFuzzer does: a corpus
unit into its first directory argument, a crash input at -artifact_prefix
(the current directory without one) and a log into the current directory.
Nothing may appear outside W. Exit 0 passed, 1 failed.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

DOC = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="fattn-fuzz-doc-")
failures = []

FUZZER = r"""#!/bin/sh
prefix="" first="" merge=0
for a in "$@"; do
    case "$a" in
    -artifact_prefix=*) prefix=${a#-artifact_prefix=} ;;
    -merge=1) merge=1 ;;
    -*) ;;
    *) [ -z "$first" ] && first=$a ;;
    esac
done
[ -d "$first" ] || { echo "no corpus directory $first" >&2; exit 1; }
[ $merge = 1 ] && exit 0
echo unit > "$first/unit-$(basename "$0")" || exit 1
echo crash > "${prefix}crash-$(basename "$0")" || exit 1
echo log > "fuzz-$(basename "$0").log"
"""


def check(ok, what):
    print(("ok - " if ok else "FAIL - ") + what)
    if not ok:
        failures.append(what)


def listing(root):
    out = set()
    for d, _, files in os.walk(root):
        for f in files:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


try:
    text = open(DOC).read()
    sec = text[text.index("## Fuzzing"):]
    block = re.search(r"```\n(.*?)```", sec, re.S).group(1)
    lines = block.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("B=")), None)
    check(start is not None, "the block sets B, W and SRC")
    if start is not None:
        src, b, w = (os.path.join(TMP, n) for n in ("src", "build-fuzz", "work"))
        for d in ("tests/fuzz/seeds/fuzz_spec", "tests/fuzz/seeds/fuzz_runfile",
                  "tests/fuzz/corpus/fuzz_spec", "tests/fuzz/corpus/fuzz_runfile"):
            os.makedirs(os.path.join(src, d))
        open(os.path.join(src, "tests/fuzz/lsan.supp"), "w").close()
        os.makedirs(b)
        for t in ("fuzz_spec", "fuzz_runfile"):
            with open(os.path.join(b, t), "w") as f:
                f.write(FUZZER)
            os.chmod(os.path.join(b, t), 0o755)
        script = ["set -eu", 'B=%s W=%s SRC=$PWD' % (b, w)] + lines[start + 1:]
        before = listing(src)
        p = subprocess.run(["bash", "-c", "\n".join(script)], cwd=src, capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == 0, "the commands run (%s)" % p.stderr.strip()[-300:])
        check(listing(src) == before, "nothing lands in the source tree (%s)"
              % sorted(listing(src) - before))
        made = listing(w) if os.path.isdir(w) else set()
        check({"artifacts/crash-fuzz_spec", "artifacts/crash-fuzz_runfile"} <= made,
              "crash inputs under W/artifacts (%s)" % sorted(made))
        check({"fuzz_spec/unit-fuzz_spec", "fuzz_runfile/unit-fuzz_runfile"} <= made,
              "corpus units under W (%s)" % sorted(made))
        stray = set(os.listdir(TMP)) - {"src", "build-fuzz", "work"}
        check(not stray, "nothing beside W (%s)" % sorted(stray))
finally:
    shutil.rmtree(TMP, ignore_errors=True)
print("%d failed" % len(failures))
sys.exit(1 if failures else 0)
