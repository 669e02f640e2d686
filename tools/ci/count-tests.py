#!/usr/bin/env python3
"""Count individual tests in meson's testlog.json.

TAP tests (the Check suites) count each `ok` / `not ok` line; a TAP stream
of `1..0 # SKIP reason` (a GPU suite on a machine without a GPU) counts as
one skipped test. A `not ok ... # TODO` line is a known failure (TAP does not
count it as failed, nor does meson) and counts as skipped; `ok ... # TODO`
passed unexpectedly, which meson fails, so it counts as failed. Other tests
count as one each by their result.
Prints `N passed, M failed, K skipped`, or with --label L `L: N passed, M failed`.
"""
import json
import re
import sys


def count(path):
    passed = failed = skipped = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            t = json.loads(line)
            result = t.get("result", "")
            out = t.get("stdout") or ""
            if t.get("protocol") == "tap" or re.search(r"^1\.\.\d+", out, re.M):
                plan_skip = re.search(r"^1\.\.0\s*#\s*SKIP", out, re.M | re.I)
                n_ok = n_fail = n_skip = 0
                for l in out.splitlines():
                    todo = re.search(r"#\s*TODO", l, re.I)
                    if l.startswith("not ok"):
                        if todo:
                            n_skip += 1
                        else:
                            n_fail += 1
                    elif l.startswith("ok"):
                        if todo:
                            n_fail += 1
                        elif re.search(r"#\s*SKIP", l, re.I):
                            n_skip += 1
                        else:
                            n_ok += 1
                if plan_skip and n_ok + n_fail + n_skip == 0:
                    n_skip = 1
                if result in ("FAIL", "TIMEOUT", "ERROR") and n_fail == 0:
                    n_fail = 1  # a crash or timeout before the stream ended
                passed += n_ok
                failed += n_fail
                skipped += n_skip
            else:
                if result in ("OK", "EXPECTEDFAIL"):
                    passed += 1
                elif result == "SKIP":
                    skipped += 1
                else:
                    failed += 1
    return passed, failed, skipped


USAGE = "usage: count-tests.py TESTLOG.json... [--label L]"


def main():
    if len(sys.argv) >= 2 and sys.argv[1] in ("-h", "--help"):
        print(USAGE)
        print(__doc__.strip())
        return 0
    if len(sys.argv) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    label = None
    paths = []
    args = sys.argv[1:]
    while args:
        a = args.pop(0)
        if a == "--label":
            label = args.pop(0)
        else:
            paths.append(a)
    tot = [0, 0, 0]
    for p in paths:
        try:
            got = count(p)
        except OSError as e:  # the job never ran its tests: one failure, the line still printed
            print("count-tests.py: %s: %s" % (p, e.strerror), file=sys.stderr)
            got = (0, 1, 0)
        for i, v in enumerate(got):
            tot[i] += v
    if label:  # the job's line, exactly as CI reads it
        print(f"{label}: {tot[0]} passed, {tot[1]} failed")
    else:
        print(f"{tot[0]} passed, {tot[1]} failed, {tot[2]} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
