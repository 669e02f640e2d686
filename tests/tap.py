"""The TAP runner of the Python test scripts (test_cli.py, test_diff.py, ...).

A script collects its tests in a Tests list with the @TESTS.case(name)
decorator and ends with sys.exit(1 if tap.run(TESTS) else 0), doing its own
setup before and clean-up after. A test passes by returning and fails by
raising: the exception's text follows its "not ok" line as "# " comments. A
test that returns a string starting with "SKIP" is reported as skipped with
that reason. todo(name), when given, may return the reason a test is a known
failure: it is reported with "# TODO <reason>" and not counted as failed.

A script that needs modules Debian's python3 may lack (h5py, numpy) imports
them with need_modules("h5py", "numpy") before anything else. children_of
and alive are what the scripts that stop a process ask of its children.
"""
import importlib
import os
import sys


class Tests(list):
    """(name, function) pairs in the order they were registered."""

    def case(self, name):
        def deco(fn):
            self.append((name, fn))
            return fn
        return deco


def run(tests, todo=None):
    """Run tests, print the TAP plan and one line per test; the number failed.
    Output is flushed after each test, so that it interleaves in order with
    what the tests' subprocesses print."""
    print("1..%d" % len(tests))
    sys.stdout.flush()
    failed = 0
    for i, (name, fn) in enumerate(tests, 1):
        reason = todo(name) if todo else None
        directive = " # TODO " + reason if reason else ""
        try:
            r = fn()
            if not reason and isinstance(r, str) and r.startswith("SKIP"):
                directive = " # " + r
            print("ok %d - %s%s" % (i, name, directive))
        except Exception as e:  # noqa: BLE001
            if not reason:
                failed += 1
            print("not ok %d - %s%s" % (i, name, directive))
            for line in str(e).splitlines() or [repr(e)]:
                print("# " + line)
        sys.stdout.flush()
    return failed


def need_modules(*names):
    """The modules named ("h5py", "numpy"), imported: one module, or a tuple
    of them in order. Without one, the script ends as TAP says: skipped
    ("1..0 # SKIP") on a machine that lacks it, failed under CI (CI=true),
    whose machine installs them all (tools/install-deps.sh)."""
    mods = []
    for name in names:
        try:
            mods.append(importlib.import_module(name))
        except ImportError as e:
            what = "/".join(names)
            if os.environ.get("CI") == "true":
                print("1..1\nnot ok 1 - %s missing under CI: %s" % (what, e))
                sys.exit(1)
            print("1..0 # SKIP %s not installed: %s" % (what, e))
            sys.exit(0)
    return mods[0] if len(mods) == 1 else tuple(mods)


def children_of(pid):
    """The pids of pid's children (Linux /proc); [] once pid is gone."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def alive(pid):
    """Whether pid still runs (a zombie, exited but not reaped, does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
