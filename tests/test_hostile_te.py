#!/usr/bin/python3
"""fattn-te's own files and processes, attacked as fattn's are
(docs/te.md "Trust and files", docs/reliability.md "fattn-te").

usage: test_hostile_te.py FATTN_EXE SOURCE_ROOT SANITIZED   (prints TAP)

 - two --te wheels of one file name from different folders unpack into two
   folders (keyed by their bytes' digest), so the second TE is the one run;
 - fattn-te's text files (the refusal logs) are written atomically and never
   through a link: a symbolic link planted where one goes is refused and
   the file it points to stays as it was, as is one planted for a file
   `--keep DIR` keeps or for `fattn-te run -o`, before any TE runs;
 - SIGTERM, SIGINT, SIGHUP and SIGQUIT during `fattn-te verify` end it by
   the signal with its temporary folders removed and its child stopped.

The first two need only this Python; the rest need TE's environment
(tools/te/setup.sh, $FATTN_TE_ENV) and report a skip without it; the
signals are also skipped in a sanitizer build, whose libfattn TE's Python
cannot load (its child would end before the signal).
"""
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

FATTN, ROOT = sys.argv[1], sys.argv[2]
SANITIZED = sys.argv[3] == "1"
sys.path.insert(0, os.path.join(ROOT, "tools", "te"))
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
TMP = tempfile.mkdtemp(prefix="fattn-hostile-te-")
RESULTS = tap.Tests()
case = RESULTS.case
TE_TOOL = os.path.join(ROOT, "tools", "te", "fattn-te")
TE_ENV = os.environ.get("FATTN_TE_ENV", os.path.join(os.path.expanduser("~"), ".cache",
                                                     "fattn-te"))
NO_ENV = "SKIP no TE environment (tools/te/setup.sh)"
BACKENDS = "transformer_engine/pytorch/attention/dot_product_attention/backends.py"


def te_env():
    return (os.access(os.path.join(TE_ENV, "venv", "bin", "python"), os.X_OK) and
            all(os.path.isdir(os.path.join(TE_ENV, "te", v)) for v in ("2.19.0", "2.20.2")))


def path(*names):
    return os.path.join(TMP, *names)


def wheel(where, body):
    """A minimal TE wheel (what --te checks for) named like the release's."""
    os.makedirs(where, exist_ok=True)
    p = os.path.join(where, "transformer_engine-2.20.2-py3-none-any.whl")
    with zipfile.ZipFile(p, "w") as z:
        z.writestr(BACKENDS, body)
        z.writestr("transformer_engine-2.20.2.dist-info/METADATA", "Name: transformer_engine\n")
    return p


def te_tool(*args, env=None, **kw):
    e = dict(os.environ, FATTN=FATTN, TMPDIR=path("tmpdir"), **(env or {}))
    os.makedirs(e["TMPDIR"], exist_ok=True)
    return subprocess.run([TE_TOOL, *args], capture_output=True, text=True, env=e, timeout=300,
                          **kw)


@case("two --te wheels of one file name from different folders unpack into two folders; one "
      "wheel given twice into one")
def _():
    from fattn_te import cli
    a = wheel(path("a"), "# release\n")
    b = wheel(path("b"), "# a local change\n")  # the same file name, other bytes
    work = path("work")
    os.mkdir(work)
    ra, rb, ra2 = cli.te_root(a, work), cli.te_root(b, work), cli.te_root(a, work)
    assert ra != rb and ra == ra2, (ra, rb, ra2)
    for root, body in ((ra, "# release\n"), (rb, "# a local change\n")):
        with open(os.path.join(root, BACKENDS)) as f:
            assert f.read() == body, root
    assert sorted(os.listdir(work)) == sorted(os.path.basename(r) for r in (ra, rb))


@case("guard.write_text: atomic, and a symbolic link or FIFO where the file goes is refused, "
      "what the link names untouched")
def _():
    import fattn_runfile as rf
    from fattn_te import guard
    d = path("write")
    os.mkdir(d)
    victim = path("victim")
    with open(victim, "w") as f:
        f.write("precious")
    target = os.path.join(d, "te1-refusals.json")
    for make in (lambda: os.symlink(victim, target), lambda: os.symlink(path("nowhere"), target),
                 lambda: os.mkfifo(target)):
        make()
        try:
            guard.write_text(target, "[]")
            raise AssertionError("written through %s" % os.readlink(target)
                                 if os.path.islink(target) else "written into a FIFO")
        except rf.InputError as e:
            assert target in str(e), str(e)
        os.unlink(target)
    with open(victim) as f:
        assert f.read() == "precious"
    assert not os.path.exists(path("nowhere"))
    guard.write_text(target, "[1]")
    guard.write_text(target, "[2]")
    with open(target) as f:
        assert f.read() == "[2]"
    assert os.listdir(d) == ["te1-refusals.json"], os.listdir(d)


@case("fattn-te verify --keep DIR and run -o: a link planted for a file they write is refused "
      "before any TE runs, exit 2, what it names untouched")
def _():
    if not te_env():
        return NO_ENV
    victim = path("victim2")
    with open(victim, "w") as f:
        f.write("precious")
    keep = path("keep")
    for name in ("te1-refusals.json", "te2.h5", "fattn-split.h5"):
        shutil.rmtree(keep, ignore_errors=True)
        os.mkdir(keep)
        os.symlink(victim, os.path.join(keep, name))
        t0 = time.time()
        p = te_tool("verify", "--te", "2.19.0", "--te", "2.20.2", "--keep", keep)
        assert p.returncode == 2 and os.path.join(keep, name) in p.stderr and \
            "symbolic link" in p.stderr, (name, p.returncode, p.stderr)
        assert time.time() - t0 < 30, "took %.0f s: TE ran first" % (time.time() - t0)
        assert os.listdir(keep) == [name], os.listdir(keep)
    link = path("link.h5")
    os.symlink(victim, link)
    p = te_tool("run", "--te", "2.20.2", "-o", link)
    assert p.returncode == 2 and "symbolic link" in p.stderr, p.stderr
    with open(victim) as f:
        assert f.read() == "precious"
    assert not os.listdir(path("tmpdir")), os.listdir(path("tmpdir"))


@case("SIGTERM, SIGINT, SIGHUP, SIGQUIT during fattn-te verify: it dies of the signal, its "
      "temporary folders are gone, its child stopped")
def _():
    if not te_env():
        return NO_ENV
    if SANITIZED:
        return "SKIP sanitizer build: TE's Python cannot load its libfattn"
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        tmpdir = path("stop-%d" % sig)
        os.mkdir(tmpdir)

        def defaults():
            for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
                signal.signal(s, signal.SIG_DFL)
        p = subprocess.Popen([TE_TOOL, "verify", "--te", "2.19.0", "--te", "2.20.2", "--filter",
                              "edge.sq1*"], env=dict(os.environ, FATTN=FATTN, TMPDIR=tmpdir),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True, preexec_fn=defaults)
        try:
            deadline, kids = time.time() + 120, []
            while not (kids and glob.glob(os.path.join(tmpdir, "fattn-te-verify-*"))):
                kids = tap.children_of(p.pid)
                if time.time() > deadline or p.poll() is not None:
                    raise AssertionError("no child seen (exit %s)" % p.poll())
                time.sleep(0.02)
            p.send_signal(sig)
            p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert p.returncode == -sig, "signal %d: exit %s" % (sig, p.returncode)
        left = os.listdir(tmpdir)
        assert not left, "signal %d left %s" % (sig, left)
        deadline = time.time() + 15
        while any(tap.alive(k) for k in kids) and time.time() < deadline:
            time.sleep(0.05)
        assert not any(tap.alive(k) for k in kids), "signal %d: its child runs on" % sig


try:
    failed = tap.run(RESULTS)
finally:
    shutil.rmtree(TMP, ignore_errors=True)
sys.exit(1 if failed else 0)
