#!/usr/bin/python3
"""What a file can make fattn print (docs/reliability.md "Report, terminal
and merge").

usage: test_hostile_terminal.py FATTN_EXE FIXTURES_DIR   (prints TAP)

Run files, goldens and case files whose strings hold terminal controls
(ESC/CSI/OSC sequences, BEL, CR, the C1 control U+009B, a bidirectional
override) and a newline followed by a forged "behavior-neutral: yes"
line. inspect, diff, merge, verify and cases print them (tables, trees,
error messages) and must show every such byte visibly (\\x1b, \\n): their
stdout and stderr hold no control byte but newline, and no line of theirs
starts with the forged text. Needs h5py (Debian python3-h5py); without it
the test skips, except under CI=true.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

h5py = tap.need_modules("h5py")

FATTN, FIXTURES = sys.argv[1], sys.argv[2]
TMP = tempfile.mkdtemp(prefix="fattn-ht-")
RESULTS = tap.Tests()
case = RESULTS.case
CASE = "mask.causal.sq_gt_skv.f16"
FORGED = "behavior-neutral: yes FORGED"
HOSTILE = "x\x1b[2J\x1b]0;owned\x07\r\n" + FORGED + "\u009b31m\u202e\t\x7f"


def run(*args):
    return subprocess.run([FATTN, *args], capture_output=True, cwd=TMP, timeout=300)


def check_visible(p, what, must_show=True):
    """p's stdout and stderr: no control byte but newline, no forged line,
    and (must_show) the controls written visibly."""
    out = p.stdout + p.stderr
    text = out.decode("utf-8", errors="strict")
    bad = sorted({"%02x" % ord(c) for c in text
                  if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f or
                  0x202a <= ord(c) <= 0x202e})
    assert not bad, "%s: raw control characters %s in its output:\n%s" % (what, bad, text)
    forged = [ln for ln in text.split("\n") if ln.startswith(FORGED)]
    assert not forged, "%s: a forged line: %r" % (what, forged)
    if must_show:
        assert "\\x1b[2J" in text and "\\n" + FORGED in text, \
            "%s: the controls are not shown visibly:\n%s" % (what, text)
    return text


def good_run():
    path = os.path.join(TMP, "a.h5")
    if not os.path.exists(path):
        p = run("run", "--filter", CASE, "-o", path)
        assert p.returncode == 0, p.stderr.decode()
    return path


def hostile_root():
    path = os.path.join(TMP, "root.h5")
    shutil.copy(good_run(), path)
    with h5py.File(path, "r+") as f:  # root attributes: under no digest
        f.attrs.modify("device", HOSTILE)
        f.attrs.modify("git_rev", HOSTILE)
    return path


def hostile_spec():
    path = os.path.join(TMP, "spec.h5")
    shutil.copy(good_run(), path)
    with h5py.File(path, "r+") as f:
        c = f["cases/" + CASE]
        spec = json.loads(c.attrs["spec"])
        spec["layout"] = HOSTILE
        c.attrs.modify("spec", json.dumps(spec))
        del c.attrs["attrs_digest"]
    return path


@case("inspect: root attributes with terminal controls are printed visibly, valid")
def _():
    p = run("inspect", hostile_root())
    assert p.returncode == 0, p.stderr.decode()
    check_visible(p, "inspect")


@case("inspect: a spec with terminal controls: exit 2, the message one visible line")
def _():
    p = run("inspect", hostile_spec())
    assert p.returncode == 2, p.stderr.decode()
    check_visible(p, "inspect (spec)")


@case("diff: the provenance delta shows the controls visibly")
def _():
    p = run("diff", good_run(), hostile_root())
    assert p.returncode == 0, p.stderr.decode()
    check_visible(p, "diff")


@case("merge: inputs with terminal controls: exit 2, the message one visible line")
def _():
    p = run("merge", "-o", os.path.join(TMP, "m.h5"), good_run(), hostile_spec())
    assert p.returncode == 2, p.stderr.decode()
    check_visible(p, "merge")
    p = run("merge", "-o", os.path.join(TMP, "m.h5"), hostile_root())
    assert p.returncode == 0, p.stderr.decode()
    check_visible(p, "merge (one input)", must_show=False)


@case("verify: goldens with terminal controls: the table and messages are visible")
def _():
    fx = os.path.join(TMP, "fixtures")
    os.makedirs(fx, exist_ok=True)
    g = os.path.join(fx, "cpu-math-1.h5")
    shutil.copy(os.path.join(FIXTURES, "cpu-math-1.h5"), g)
    with h5py.File(g, "r+") as f:
        f.attrs.modify("device", HOSTILE)
        c = f["cases/" + CASE]
        del c.attrs["attrs_digest"]
        c["save_ctx"].attrs.modify("fused_attention_backend", HOSTILE)
    p = run("verify", "--fixtures", fx, "--filter", CASE, "--progress")
    assert p.returncode == 2, p.stderr.decode()
    check_visible(p, "verify")


@case("cases: a case file with terminal controls: exit 2, the message one visible line")
def _():
    path = os.path.join(TMP, "cases.json")
    with open(path, "w") as f:
        json.dump([{"id": "a", "layout": HOSTILE, "b": 1, "h": 1, "sq": 4, "skv": 4, "d_qk": 8,
                    "d_v": 8, "dtype": "float16"}], f)
    for args in (("cases", "--cases", path), ("cases", "--cases", path, "--resolved", "--json")):
        p = run(*args)
        assert p.returncode == 2, p.stderr.decode()
        check_visible(p, " ".join(args))


@case("a bare control byte in an argument path shows visibly in the message")
def _():
    p = run("inspect", os.path.join(TMP, "no\x1b[2Jsuch\n" + FORGED + ".h5"))
    assert p.returncode == 2
    check_visible(p, "inspect (path)")


HOSTILE_NAME = "out\x1b[2J\n" + FORGED  # a file name may hold both


@case("the closing 'wrote ... to OUT' lines of run, replay, merge, golden and report show the "
      "-o path visibly")
def _():
    spec = os.path.join(TMP, "one.json")
    with open(spec, "w") as f:
        json.dump([{"id": "t.one", "b": 1, "h": 1, "sq": 2, "d_qk": 8, "dtype": "float32"}], f)
    good = good_run()
    for args in (("run", "--cases", spec, "-o", HOSTILE_NAME + ".run.h5"),
                 ("replay", good, "--from", "save_ctx", "--impl", "split", "-o",
                  HOSTILE_NAME + ".replay.h5"),
                 ("merge", "-o", HOSTILE_NAME + ".merge.h5", good),
                 ("golden", "--backend", "cpu", "--cases", spec, "--allow-dirty", "-o",
                  HOSTILE_NAME + ".golden"),
                 ("report", good, good, "-o", HOSTILE_NAME + ".html")):
        p = run(*args)
        assert p.returncode == 0, (args[0], p.stderr.decode())
        text = check_visible(p, args[0])
        assert "wrote" in text, (args[0], text)


@case("bidirectional controls from a file are written visibly into the HTML page (\\u202e), "
      "never as themselves")
def _():
    page = os.path.join(TMP, "bidi.html")
    p = run("report", hostile_root(), good_run(), "-o", page)
    assert p.returncode == 0, p.stderr.decode()
    with open(page, "rb") as f:
        html = f.read().decode("utf-8")
    raw = sorted({"U+%04X" % ord(c) for c in html
                  if 0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069 or
                  ord(c) in (0x200e, 0x200f, 0x061c)})
    assert not raw, "raw bidirectional controls in the page: %s" % raw
    assert "\\u202e" in html, "the override is not shown"


@case("libhdf5 crashing in the reader child: one scrubbed line (its last words, no addresses), "
      "nothing raw on the terminal")
def _():
    bad = os.path.join(os.path.dirname(os.path.abspath(FIXTURES)), "tests", "data", "bad",
                       "hdf5-upstream-global-heap-overflow.h5")
    p = run("inspect", bad)
    assert p.returncode == 2, p.stderr.decode()
    text = check_visible(p, "inspect (crash)", must_show=False)
    err = p.stderr.decode()
    lines = [ln for ln in err.split("\n") if ln]
    assert len(lines) == 1 and lines[0].startswith("fattn inspect: "), err
    # what the child printed as it died (glibc's "munmap_chunk(): invalid
    # pointer", a sanitizer's report; the crash varies with the heap's
    # layout) is in that line or nowhere
    assert "munmap_chunk" not in err or "the reader said: munmap_chunk" in err, err
    assert not re.search(r"0x[0-9a-fA-F]{4,}", err), "an address in the message: " + err


try:
    failed = tap.run(RESULTS)
finally:
    shutil.rmtree(TMP, ignore_errors=True)
sys.exit(1 if failed else 0)
