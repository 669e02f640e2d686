"""The TAP runner of the Python test scripts (test_cli.py, test_diff.py, ...).

A script collects its tests in a Tests list with the @TESTS.case(name)
decorator and ends with sys.exit(1 if tap.run(TESTS) else 0), doing its own
setup before and clean-up after. A test passes by returning and fails by
raising: the exception's text follows its "not ok" line as "# " comments. A
test that returns a string starting with "SKIP" is reported as skipped with
that reason. todo(name), when given, may return the reason a test is a known
failure: it is reported with "# TODO <reason>" and not counted as failed.
"""
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
