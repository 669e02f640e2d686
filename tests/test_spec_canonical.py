#!/usr/bin/env python3
"""The canonical spec is Python's json.dumps(sort_keys=True) byte for byte
(docs/cases.md): every `spec` attribute of a run of the default matrix, and
the key order of every spec `fattn cases --resolved --json` prints.

Usage: test_spec_canonical.py FATTN"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

h5py = tap.need_modules("h5py")

FATTN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="fattn-canon-")
TESTS = tap.Tests()


def python_canonical(s):
    return json.dumps(json.loads(s), sort_keys=True, separators=(",", ":"))


def fattn(*args):
    p = subprocess.run([FATTN] + list(args), capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError("fattn %s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr))
    return p.stdout


@TESTS.case("every spec attribute of a run of the default matrix is json.dumps(sort_keys) "
            "byte for byte")
def _():
    out = os.path.join(TMP, "run.h5")
    fattn("run", "-o", out)
    n, bad = 0, []
    with h5py.File(out, "r") as f:
        def visit(name, obj):
            nonlocal n
            if "spec" not in obj.attrs:
                return
            s = obj.attrs["spec"]
            s = s.decode() if isinstance(s, bytes) else str(s)
            n += 1
            if s != python_canonical(s):
                bad.append("%s:\n  fattn:  %s\n  python: %s" % (name, s, python_canonical(s)))
        f.visititems(visit)
    if bad:
        raise AssertionError("%d of %d specs not canonical:\n%s" % (len(bad), n, "\n".join(bad)))
    with open(os.path.join(os.path.dirname(__file__), "..", "golden", "default_cases.json")) as g:
        cases = len(json.load(g))
    if n != cases:
        raise AssertionError("%d spec attributes, the default matrix has %d cases" % (n, cases))


@TESTS.case("every spec cases --resolved --json prints has its keys sorted, at every level")
def _():
    # The spec is re-read as (key, value) pairs to keep the order fattn wrote;
    # numbers are compared as values here (how the resolved document writes
    # floats is the document's business, not the spec's).
    def pairs(kv):
        return {"__pairs__": kv}

    def order_ok(v, where):
        if isinstance(v, dict) and "__pairs__" in v:
            keys = [k for k, _ in v["__pairs__"]]
            if keys != sorted(keys):
                raise AssertionError("%s: keys not sorted: %s" % (where, keys))
            for k, x in v["__pairs__"]:
                order_ok(x, where + "." + k)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                order_ok(x, "%s[%d]" % (where, i))

    doc = json.loads(fattn("cases", "--resolved", "--json"), object_pairs_hook=pairs)
    n = 0
    for entry in doc:
        d = dict(entry["__pairs__"])
        order_ok(d["spec"], d["id"])
        n += 1
    if n == 0:
        raise AssertionError("no cases printed")


failed = tap.run(TESTS)
shutil.rmtree(TMP, ignore_errors=True)
sys.exit(1 if failed else 0)
