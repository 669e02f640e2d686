#!/usr/bin/env python3
"""Enforce docs/features.md: every test id it names must exist and must have
passed in this test run.

usage: check_feature_table.py FEATURES.md RAN_DIR EXE...

Each EXE is a Check suite executable built from tests/fattn_test.h: with
`--list-ids` it prints every id it knows; while running under meson it
appends the id of every passing table row to RAN_DIR/ran-<exe name>.ids
(truncated when the executable starts). An id is "name" or a glob
("cpu_engine.fwd.*") that must match at least one known id, all of whose
matches must have run.
"""
import fnmatch
import os
import re
import subprocess
import sys


def table_ids(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("|") or re.match(r"^\|\s*-", line):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 2 or cells[0].lower() == "feature":
                continue
            ids = re.findall(r"`([^`]+)`", cells[-1])
            rows.append((cells[0], ids))
    return rows


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    features, ran_dir, exes = sys.argv[1], sys.argv[2], sys.argv[3:]
    known, ran = set(), set()
    for exe in exes:
        out = subprocess.run([exe, "--list-ids"], check=True, capture_output=True, text=True)
        known.update(l.strip() for l in out.stdout.splitlines() if l.strip())
        log = os.path.join(ran_dir, "ran-" + os.path.basename(exe) + ".ids")
        if os.path.exists(log):
            with open(log, encoding="utf-8") as f:
                ran.update(l.strip() for l in f if l.strip())
    rows = table_ids(features)
    problems = []
    n_ids = 0
    for feature, ids in rows:
        if not ids:
            problems.append(f"{features}: feature '{feature}' names no test id")
        for pat in ids:
            n_ids += 1
            matches = [k for k in known if fnmatch.fnmatchcase(k, pat)]
            if not matches:
                problems.append(f"{features}: '{feature}': test id '{pat}' does not exist")
                continue
            missing = sorted(m for m in matches if m not in ran)
            if missing:
                problems.append(f"{features}: '{feature}': test id(s) did not run or did not "
                                f"pass: {', '.join(missing[:5])}")
    for p in problems:
        print(p)
    print(f"feature table: {len(rows)} features, {n_ids} ids, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
