#!/usr/bin/env python3
"""The build targets that the meson test suites named need, for `meson compile`.

usage: suite-targets.py BUILD_DIR SUITE [SUITE...]

Prints, one per line, every target that a test of those suites depends on
(its executable, and whatever its `depends:` names) in the form `meson
compile` takes (`subdir/name`), read from `meson introspect --tests` and
`--targets` of the configured BUILD_DIR: a fresh build dir then builds what
`meson test --no-rebuild --suite ...` runs, however many executables the
suites' tables grow (tools/gpu/gpu-ci.sh). A suite is named with or without
the project's prefix (`cudnn-gpu` or `fattn:cudnn-gpu`). Exit 2 on a build
dir meson cannot read or a suite with no test.
"""
import json
import os
import subprocess
import sys


def introspect(build, what):
    p = subprocess.run(["meson", "introspect", "--" + what, build], capture_output=True,
                       text=True)
    if p.returncode != 0:
        print("suite-targets: meson introspect --%s %s: %s" % (what, build, (p.stderr or p.stdout).strip()),
              file=sys.stderr)
        sys.exit(2)
    return json.loads(p.stdout)


def in_suites(test, suites):
    """Whether a test (meson's record) is in one of the suites named."""
    return any(s in suites or s.split(":", 1)[-1] in suites for s in test["suite"])


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    build, suites = argv[1], set(argv[2:])
    tests = [t for t in introspect(build, "tests") if in_suites(t, suites)]
    found = {s.split(":", 1)[-1] for t in tests for s in t["suite"]}
    missing = sorted(s for s in suites if s.split(":", 1)[-1] not in found)
    if missing:
        print("suite-targets: no test in suite %s of %s" % (", ".join(missing), build),
              file=sys.stderr)
        return 2
    ids = {d for t in tests for d in t["depends"]}
    # the source root, which `defined_in` paths are under (meson's IDE file)
    with open(os.path.join(build, "meson-info", "meson-info.json")) as f:
        root = json.load(f)["directories"]["source"]
    out = set()
    for target in introspect(build, "targets"):
        if target["id"] in ids:
            subdir = os.path.relpath(os.path.dirname(target["defined_in"]), root)
            out.add(target["name"] if subdir == "." else subdir + "/" + target["name"])
    for name in sorted(out):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
