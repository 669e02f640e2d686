#!/usr/bin/python3
"""fattn verify --against [REPO@]REV, end to end without building a second
fattn: a throwaway repository of three commits, and a `meson` stand-in on
PATH whose "build" of a revision is a wrapper around the fattn under test
(recording which revision's tree it was handed). So the export of REV, the
build steps, REV's runs and own verify, the comparison and the report are
all the real ones; only the compiler is not run.

usage: test_verify_against.py FATTN   (prints TAP)

- against an earlier commit, and on a dirty tree (the export is REV's
  committed tree, whatever the working tree holds): exit 0, both revisions'
  verdicts said, REV's tree is the one built;
- REV's fattn computing other bits (a -Dtesting engine variant): exit 1, the
  row names `against REV: legacy` with backward/dq as its first cause;
- a revision git cannot resolve, a directory that is no git checkout, git
  missing, a failing meson setup (its log's end shown): exit 2, saying so;
- the temporary directory is removed.
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
import tap  # noqa: E402

FATTN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="fattn-against-test-")
TESTS = tap.Tests()
test = TESTS.case
TESTING = os.environ.get("FATTN_BUILD_TESTING", "1") == "1"

# setup BUILD SRC ...: a fattn wrapper in BUILD/harness, and SRC's rev.txt
# logged (which tree was exported); compile: nothing. FAIL in rev.txt fails
# the setup; VARIANT makes REV's runs use a misbehaving test engine.
MESON = r"""#!/bin/sh
if [ "$1" = setup ]; then
    rev=$(cat "$3/rev.txt")
    echo "setup $rev" >> "@LOG@"
    case "$rev" in *FAIL*) echo "meson: the build cannot be set up here"; exit 1 ;; esac
    mkdir -p "$2/harness"
    variant=""
    case "$rev" in *VARIANT*) variant="FATTN_TEST_ENGINE_VARIANT=unwritten_dq" ;; esac
    cat > "$2/harness/fattn" <<X
#!/bin/sh
if [ "\$1" = run ] && [ -n "$variant" ]; then export $variant; fi
exec "@FATTN@" "\$@"
X
    chmod +x "$2/harness/fattn"
fi
exit 0
"""

BIN = os.path.join(TMP, "bin")
LOG = os.path.join(TMP, "meson.log")
REPO = os.path.join(TMP, "repo")
GENV = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
            GIT_COMMITTER_EMAIL="t@x", TMPDIR=os.path.join(TMP, "tmp"))


def sh(*args, cwd=None, env=None):
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, env=env or GENV,
                          timeout=300)


def setup():
    os.makedirs(BIN)
    os.makedirs(GENV["TMPDIR"])
    with open(os.path.join(BIN, "meson"), "w") as f:
        f.write(MESON.replace("@LOG@", LOG).replace("@FATTN@", FATTN))
    os.chmod(os.path.join(BIN, "meson"), 0o755)
    os.makedirs(REPO)
    sh("git", "init", "-q", cwd=REPO)
    for rev in ("one", "two VARIANT", "three FAIL"):
        with open(os.path.join(REPO, "rev.txt"), "w") as f:
            f.write(rev + "\n")
        sh("git", "add", "-A", cwd=REPO)
        sh("git", "commit", "-qm", rev, cwd=REPO)


def env():
    return dict(GENV, PATH=BIN + ":" + os.environ["PATH"])


def verify(spec, *extra, e=None):
    return sh(FATTN, "verify", "--backend", "cpu", "-k", "layout.sb3hd.causal",
              "--against", spec, *extra, env=e or env())


def logged():
    with open(LOG) as f:
        return f.read().split("\n")[-2]


@test("against an earlier commit: exit 0, REV's tree built, both verdicts said")
def _():
    p = verify(REPO + "@HEAD~2")
    assert p.returncode == 0, (p.returncode, p.stdout[-1500:], p.stderr[-1500:])
    assert logged() == "setup one", logged()
    short = sh("git", "-C", REPO, "rev-parse", "--short=10", "HEAD~2").stdout.strip()
    line = [l for l in p.stdout.splitlines() if l.startswith("against ")]
    assert line and line[0].startswith(
        "against %s@HEAD~2 (%s): each case's legacy and split runs bitwise against its own; "
        "its own verify: behavior-neutral: yes (1 case" % (REPO, short)), p.stdout[-800:]
    assert "behavior-neutral: yes (1 case" in p.stdout, p.stdout[-800:]


@test("on a dirty tree: REV's committed tree is exported, the working tree's edit is not")
def _():
    with open(os.path.join(REPO, "rev.txt"), "w") as f:
        f.write("dirty\n")
    try:
        p = verify(REPO + "@HEAD~2")
        assert p.returncode == 0, (p.returncode, p.stdout[-1500:], p.stderr[-1500:])
        assert logged() == "setup one", logged()
    finally:
        sh("git", "-C", REPO, "checkout", "--", "rev.txt")


@test("REV computing other bits: exit 1, the first cause named under 'against REV: legacy'")
def _():
    if not TESTING:
        return "SKIP the engine variant needs a build with -Dtesting=true"
    p = verify(REPO + "@HEAD~1", "--json", os.path.join(TMP, "a.json"))
    assert p.returncode == 1, (p.returncode, p.stdout[-1500:], p.stderr[-1500:])
    row = [l for l in p.stdout.splitlines() if l.startswith("layout.sb3hd.causal.f16 ")]
    want = "DIFFERENT (2): against HEAD~1: legacy: inputs, engine_call/forward, forward, " \
           "save_ctx, engine_call/backward equal; backward/dq: "
    assert row and want in row[0], p.stdout[-1500:]
    import json
    j = json.load(open(os.path.join(TMP, "a.json")))
    assert j["against"]["rev"] == REPO + "@HEAD~1" and j["against"]["verify_exit"] == 0, j
    assert "verify --against" in p.stdout.split("reproduce:")[1], p.stdout[-800:]


@test("bad revisions and places: exit 2 saying why; a failing step shows its log's end")
def _():
    p = verify(REPO + "@no-such-rev")
    assert p.returncode == 2 and "no revision no-such-rev in " + REPO in p.stderr, p.stderr
    plain = os.path.join(TMP, "plain")
    os.makedirs(plain)
    p = verify(plain + "@HEAD")
    assert p.returncode == 2 and "no revision HEAD in " + plain in p.stderr, p.stderr
    p = verify(REPO + "@HEAD")
    assert p.returncode == 2 and "meson setup failed" in p.stderr and \
        "the build cannot be set up here" in p.stderr, p.stderr
    nogit = os.path.join(TMP, "nogit")
    os.makedirs(nogit)
    for tool in ("tar", "meson"):
        src = shutil.which(tool, path=env()["PATH"])
        os.symlink(src, os.path.join(nogit, tool))
    p = verify(REPO + "@HEAD~2", e=dict(env(), PATH=nogit))
    assert p.returncode == 2 and "needs git, which is not installed" in p.stderr, p.stderr


@test("no temporary directory is left but the failed build's, whose log was shown")
def _():
    left = sorted(os.listdir(GENV["TMPDIR"]))
    assert len(left) == 1 and left[0].startswith("fattn-against-"), left


failed = 1
try:
    setup()
    failed = tap.run(TESTS)
finally:
    shutil.rmtree(TMP, ignore_errors=True)
sys.exit(1 if failed else 0)
