#!/usr/bin/python3
""".ci/run tells what it is doing: a heading per stage, and a build's latest
step while the build runs.

usage: test_ci_run.py CI_RUN

.ci/run is copied into an empty tree of its own (it works in its parent's
parent) with stand-ins on PATH: a `meson` whose compile prints ninja-style
steps slowly, install-deps and the test counter that do nothing. Exit 0
passed, 1 failed.
"""
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

CI_RUN = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="fattn-ci-run-")
failures = []


def check(ok, what):
    print(("ok - " if ok else "FAIL - ") + what)
    if not ok:
        failures.append(what)


def put(rel, text, mode=0o755):
    p = os.path.join(TMP, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text)
    os.chmod(p, mode)


try:
    put(".ci/run", open(CI_RUN).read())
    put("tools/install-deps.sh", "echo 'install-deps: all dependencies present'\n")
    put("tools/te/setup.sh", "echo 'te: environment present'\n")
    put("tools/ci/count-tests.py", "print('0 passed, 0 failed, 0 skipped')\n")
    put("bin/meson", """#!/bin/sh
case "$1" in
setup) mkdir -p "$2/meson-logs"; echo '[]' > "$2/meson-logs/testlog.json" ;;
compile) for i in 1 2 3 4; do echo "[$i/4] Compiling C object $3/step$i.o"; sleep 1; done ;;
test) echo "meson test ran in $3" ;;
esac
""")
    env = dict(os.environ, PATH=os.path.join(TMP, "bin") + ":" + os.environ["PATH"],
               FATTN_CI_TICK="2")
    p = subprocess.run(["bash", os.path.join(TMP, ".ci/run")], capture_output=True, text=True,
                       env=env, timeout=120)
    out = p.stdout
    heads = re.findall(r"^=== stage (\d+): (.*) ===$", out, re.M)
    check([h[1].split(" (")[0].split(":")[0] for h in heads] ==
          ["dependencies", "TE's Python environment", "optimised build", "optimised build", "sanitizer build, ASan + UBSan",
           "sanitizer build", "summary"], "a heading per stage, in order (%s)" % heads)
    check([int(h[0]) for h in heads] == list(range(1, len(heads) + 1)), "stages numbered")
    for b in ("build-ci", "build-san"):
        ticks = re.findall(r"^  building %s \((\d+) s\): \[(\d)/4\] Compiling C object" % b,
                           out, re.M)
        check(len(ticks) >= 1, "while %s builds, its latest step is shown (%s)" % (b, ticks))
    check(out.index("=== stage 3") < out.index("building build-ci") <
          out.index("=== stage 4"), "the build's progress comes under its heading")
    check("meson test ran in build-ci" in out and "meson test ran in build-san" in out,
          "both suites still run")
finally:
    shutil.rmtree(TMP, ignore_errors=True)
print("%d failed" % len(failures))
sys.exit(1 if failures else 0)
