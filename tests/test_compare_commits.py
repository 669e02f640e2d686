#!/usr/bin/python3
"""tools/compare-commits.sh: its messages, its help, and how it shows a long
difference list, without building fattn.

usage: test_compare_commits.py SCRIPT

Outside a git repository the script says so itself (exit 2). Inside a
throwaway repository of two commits, a `meson` stand-in on PATH "builds"
each revision into a stand-in `fattn` whose diff prints 100 lines ending
with its summary and exits 1: the script shows the first 40, says how many
it cut, ends the list with the summary and prints the verdict naming both
revisions as given. Exit 0 passed, 1 failed.
"""
import os
import shutil
import subprocess
import sys
import tempfile

SCRIPT = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="fattn-cc-")
failures = []

MESON = r"""#!/bin/sh
# setup BUILD SRC | compile -C BUILD
if [ "$1" = setup ]; then mkdir -p "$2/harness"; cat > "$2/harness/fattn" <<'X'
#!/bin/sh
case "$1" in
run) while [ $# -gt 1 ]; do [ "$1" = -o ] && : > "$2"; shift; done ;;
diff) [ "$2" = --help ] && exit 0
      i=1; while [ $i -le 99 ]; do echo "different: /cases/c$i/forward/out (dataset)"; i=$((i+1)); done
      echo "summary: 99 datasets compared, 99 counted differences; exit 1"; exit 1 ;;
esac
X
chmod +x "$2/harness/fattn"; fi
exit 0
"""


def check(ok, what):
    print(("ok - " if ok else "FAIL - ") + what)
    if not ok:
        failures.append(what)


def sh(*args, cwd, env=None):
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=120)


try:
    outside = os.path.join(TMP, "outside")
    os.makedirs(outside)
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=TMP)
    p = sh("bash", SCRIPT, "HEAD~1", "HEAD", cwd=outside, env=env)
    check(p.returncode == 2 and p.stderr.strip().startswith("compare-commits: ") and
          "not inside a git repository" in p.stderr and "fatal" not in p.stderr,
          "outside a repository: its own message, exit 2 (%r)" % p.stderr)

    p = sh("bash", SCRIPT, "--help", cwd=outside, env=env)
    check(p.returncode == 0 and "--keep DIR" in p.stdout and "keeps" in p.stdout and
          "set -e" not in p.stdout, "--help describes --keep (%r)" % p.stdout[-300:])

    repo = os.path.join(TMP, "repo")
    os.makedirs(os.path.join(repo, "golden"))
    with open(os.path.join(repo, "golden", "default_cases.json"), "w") as f:
        f.write('[{"id": "x"}]\n')
    genv = dict(env, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
                GIT_COMMITTER_EMAIL="t@x")
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "one"],
                 ["commit", "-q", "--allow-empty", "-m", "two"]):
        sh("git", *args, cwd=repo, env=genv)
    bindir = os.path.join(TMP, "bin")
    os.makedirs(bindir)
    with open(os.path.join(bindir, "meson"), "w") as f:
        f.write(MESON)
    os.chmod(os.path.join(bindir, "meson"), 0o755)
    senv = dict(genv, PATH=bindir + ":" + os.environ["PATH"])
    p = sh("bash", SCRIPT, "HEAD~1", "HEAD", cwd=repo, env=senv)
    out = p.stdout.splitlines()
    check(p.returncode == 1, "a difference is exit 1 (%d: %s)" % (p.returncode, p.stderr[-300:]))
    shown = [l for l in out if l.startswith("different: ")]
    check(len(shown) == 2 * 40, "40 lines of each front end's list shown (%d)" % len(shown))
    cut = [i for i, l in enumerate(out) if l.startswith("... 59 more lines cut")]
    check(len(cut) == 2, "the list says how many lines it cut (%s)" % out[:3])
    check(all(out[i + 1].startswith("summary: 99 datasets") for i in cut),
          "the shown list ends with the diff's summary")
    check(out[-1] == "compare-commits: HEAD~1 -> HEAD: NOT behavior-neutral (see above)",
          "the verdict names both revisions as given (%r)" % out[-1:])
finally:
    shutil.rmtree(TMP, ignore_errors=True)
print("%d failed" % len(failures))
sys.exit(1 if failures else 0)
