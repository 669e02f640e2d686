#!/usr/bin/python3
"""tools/gpu/suite-targets.py names every executable the suites it is given run.

usage: test_suite_targets.py SUITE_TARGETS_PY BUILD_DIR

For the GPU runner's two suites (cudnn-construct, cudnn-gpu) and one more
(support), the targets the script prints, looked up in `meson introspect
--targets` of this build, must produce every program the suites' tests run
(`meson test --no-rebuild` on a fresh build dir then finds them all, which a
hand-kept list did not), and name nothing that is not a target; an unknown
suite is exit 2. Exit 0 passed, 1 failed.
"""
import json
import os
import subprocess
import sys

SCRIPT, BUILD = sys.argv[1], os.path.abspath(sys.argv[2])
failures = []


def introspect(what):
    return json.loads(subprocess.run(["meson", "introspect", "--" + what, BUILD], check=True,
                                     capture_output=True, text=True).stdout)


def suite_targets(*suites):
    return subprocess.run([sys.executable, SCRIPT, BUILD, *suites], capture_output=True,
                          text=True)


with open(os.path.join(BUILD, "meson-info", "meson-info.json")) as f:
    SRC = json.load(f)["directories"]["source"]
by_name = {}
for t in introspect("targets"):
    subdir = os.path.relpath(os.path.dirname(t["defined_in"]), SRC)
    by_name[t["name"] if subdir == "." else subdir + "/" + t["name"]] = t
tests = introspect("tests")

for suites in (("cudnn-construct", "cudnn-gpu"), ("fattn:support",)):
    p = suite_targets(*suites)
    if p.returncode != 0:
        failures.append("%s: exit %d: %s" % (suites, p.returncode, p.stderr))
        continue
    names = p.stdout.split()
    unknown = [n for n in names if n not in by_name]
    if unknown:
        failures.append("%s: not targets: %s" % (suites, unknown))
    made = {os.path.abspath(f) for n in names if n in by_name for f in by_name[n]["filename"]}
    want = {s.split(":", 1)[-1] for s in suites}
    ran = [t for t in tests if want & {s.split(":", 1)[-1] for s in t["suite"]}]
    if not ran:
        failures.append("%s: no test in meson's list" % (suites,))
    for t in ran:
        prog = os.path.abspath(t["cmd"][0])
        if prog.startswith(BUILD + os.sep) and prog not in made:
            failures.append("%s: test %s runs %s, which no printed target makes"
                            % (suites, t["name"], prog))
    print("%s: %d targets for %d tests" % (" ".join(suites), len(names), len(ran)))

p = suite_targets("no-such-suite")
if p.returncode != 2 or "no-such-suite" not in p.stderr:
    failures.append("an unknown suite: exit %d, %r" % (p.returncode, p.stderr))

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
