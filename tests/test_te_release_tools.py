#!/usr/bin/env python3
"""Suite te_release, the tools' half: the recipe for a new TE release
(docs/architecture.md, "A TE release") followed once as a dry run.

usage: test_te_release_tools.py ROOT   (prints TAP)

Step 1 of the recipe is one row in lib/include/fattn/te_releases.h. Here
that row -- the made-up release the C half of the suite builds the table
with (the header's FATTN_TE_RELEASE_DRY_RUN_ row, 9.99) -- is added to a copy
of the header, and the TE tools are pointed at the copy
(FATTN_TE_RELEASES_H): tools/te/releases.sh lists it as the newest,
tools/te/setup.sh fetches its wheel with the others (through a stand-in
Python that records what pip is asked for, so nothing is downloaded), and
setup.sh, gpu-te.sh and test_te.sh name no release themselves: each asks
releases.sh.
"""
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

HEADER = "lib/include/fattn/te_releases.h"
TOOLS = ("tools/te/setup.sh", "tools/te/gpu-te.sh", "tools/te/test_te.sh")
ROW = re.compile(r'^\s*(S\(\)\s*)?X\((\w+),\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)"\)')

# A stand-in for python3 and the venv's python: `-m venv DIR` makes DIR's
# bin/python (this script again), `-m pip download ... PKG==V -d DIR` logs
# PKG==V and leaves an empty wheel file, `-m zipfile -e WHL DIR` makes DIR.
STAND_IN = r'''#!/bin/sh
log=${DRY_RUN_LOG:?}
case "$1 $2" in
"-m venv") mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;
"-m pip")
    shift 2
    [ "$1" = download ] || { echo "pip $*" >>"$log"; exit 0; }
    dir= pkg=
    while [ $# -gt 0 ]; do
        case $1 in -d) dir=$2; shift ;; transformer-engine==*) pkg=$1 ;; esac
        shift
    done
    echo "download $pkg" >>"$log"
    mkdir -p "$dir" && : >"$dir/transformer_engine-${pkg#*==}-py3-none-any.whl" ;;
"-m zipfile") mkdir -p "$5" ;;
*) echo "unexpected: $*" >>"$log"; exit 1 ;;
esac
'''


def releases_in(text):
    """(id, name, release, cpp_rev) of the rows of a te_releases.h text."""
    return [m.groups()[1:] for m in map(ROW.match, text.splitlines()) if m]


def dry_run_row(text):
    """The made-up release of the header's dry-run define, as a table row."""
    m = re.search(r"#define FATTN_TE_RELEASE_DRY_RUN_\(X, S\) (S\(\) X\([^)]*\))", text)
    if not m:
        raise AssertionError("%s: no FATTN_TE_RELEASE_DRY_RUN_ row" % HEADER)
    return m.group(1)


def with_row(text, row):
    """The header text with `row` added after the last release row, as the
    recipe's step 1 adds a release."""
    lines = text.splitlines(True)
    last = max(i for i, line in enumerate(lines) if ROW.match(line))
    width = len(lines[last].rstrip("\n")) - 1  # the continuation's column
    lines.insert(last + 1, ("    " + row).ljust(width) + "\\\n")
    return "".join(lines)


def code_lines(path):
    """(number, line) of a shell script's lines, comments taken out."""
    with open(path) as f:
        return [(i, re.sub(r"(^|\s)#\s.*$", "", line)) for i, line in enumerate(f, 1)]


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    root = argv[1]
    with open(os.path.join(root, HEADER)) as f:
        text = f.read()
    work = tempfile.mkdtemp(prefix="fattn-te-release-")
    tests = tap.Tests()
    known = releases_in(text)
    row = dry_run_row(text)
    fake = releases_in("    " + row)[0]
    copy = os.path.join(work, "te_releases.h")
    with open(copy, "w") as f:
        f.write(with_row(text, row))
    env = dict(os.environ, FATTN_TE_RELEASES_H=copy)
    rel_sh = os.path.join(root, "tools/te/releases.sh")

    @tests.case("releases.sh: the table's releases, oldest first (%s)"
                % ", ".join(r[2] for r in known))
    def listed():
        got = subprocess.run([rel_sh], capture_output=True, text=True, check=True).stdout.split()
        if got != [r[2] for r in known] or len(got) < 2:
            raise AssertionError("releases.sh says %r, the header %r" % (got, known))

    @tests.case("releases.sh with the made-up release %s added: it is listed, the newest"
                % fake[2])
    def added():
        got = subprocess.run([rel_sh], env=env, capture_output=True, text=True,
                             check=True).stdout.split()
        new = subprocess.run([rel_sh, "--newest"], env=env, capture_output=True, text=True,
                             check=True).stdout.strip()
        if got != [r[2] for r in known] + [fake[2]] or new != fake[2]:
            raise AssertionError("releases.sh says %r, newest %r" % (got, new))

    @tests.case("setup.sh with no argument fetches every release's wheel, the new one too")
    def setup():
        py = os.path.join(work, "python3")
        with open(py, "w") as f:
            f.write(STAND_IN)
        os.chmod(py, os.stat(py).st_mode | stat.S_IXUSR)
        log = os.path.join(work, "log")
        e = dict(env, FATTN_TE_ENV=os.path.join(work, "env"), FATTN_TE_PYTHON=py,
                 DRY_RUN_LOG=log)
        p = subprocess.run(["sh", os.path.join(root, "tools/te/setup.sh")], env=e,
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError("setup.sh exit %d: %s" % (p.returncode, p.stderr))
        with open(log) as f:
            got = [line.split("==")[1] for line in f.read().split("\n")
                   if line.startswith("download ")]
        want = [r[2] for r in known] + [fake[2]]
        if got != want:
            raise AssertionError("setup.sh fetched %r, want %r" % (got, want))
        for r in want:
            if not os.path.isfile(os.path.join(work, "env/te", r, ".fattn-te-unpacked")):
                raise AssertionError("setup.sh left no te/%s" % r)

    for tool in TOOLS:
        @tests.case("%s names no release and asks releases.sh" % tool)
        def named(tool=tool):
            path = os.path.join(root, tool)
            lits = [(i, line.strip()) for i, line in code_lines(path)
                    for r in known if re.search(r"(?<![\d.])%s(?![\d.])" % re.escape(r[2]),
                                                line)]
            if lits:
                raise AssertionError("\n".join("%s:%d: %s" % (tool, i, l) for i, l in lits))
            if not any("releases.sh" in line for _, line in code_lines(path)):
                raise AssertionError("%s does not ask releases.sh" % tool)

    try:
        return 1 if tap.run(tests) else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
