#!/usr/bin/python3
"""What a file may claim about its matrix, and what a long matrix costs
(docs/reliability.md "Report, terminal and merge").

usage: test_hostile_matrix.py FATTN_EXE SANITIZED   (prints TAP)

 - merge recomputes matrix_digest from the merged cases' specs: a complete
   set of shards of another matrix carrying a copied matrix_digest (and a
   matching matrix_cases) is refused, nothing written; inspect checks a
   file holding its whole matrix the same way; real shards still merge
   and the merged file inspects as valid;
 - a `shard` attribute must be canonical ("01/2" is not shard 1/2);
 - write-tree refuses an attribute named twice;
 - cases --resolved --json writes floats in the shortest round-trip form
   and prints a case at a time: its peak RSS on 20,000 cases stays near
   plain `cases` (not under the sanitizers, SANITIZED=1, whose shadow
   memory makes RSS meaningless).
Needs h5py (Debian python3-h5py); without it the test skips, except under
CI=true.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

h5py = tap.need_modules("h5py")

FATTN, SANITIZED = sys.argv[1], sys.argv[2] == "1"
TMP = tempfile.mkdtemp(prefix="fattn-hm-")
RESULTS = tap.Tests()
case = RESULTS.case


def run(*args):
    return subprocess.run([FATTN, *args], capture_output=True, text=True, cwd=TMP, timeout=300)


def path(name):
    return os.path.join(TMP, name)


def shards(filt, prefix):
    out = []
    for i in (1, 2):
        p = path("%s%d.h5" % (prefix, i))
        r = run("run", "--filter", filt, "--shard", "%d/2" % i, "-o", p)
        assert r.returncode == 0, r.stderr
        out.append(p)
    return out


def root_attrs(p):
    with h5py.File(p, "r") as f:
        return dict(f.attrs)


@case("merge: real shards merge, and the merged file inspects as valid")
def _():
    s = shards("mask.*", "real")
    r = run("merge", "-o", path("real.h5"), *s)
    assert r.returncode == 0, r.stderr
    r = run("inspect", path("real.h5"))
    assert r.returncode == 0 and "valid" in r.stderr, r.stderr


@case("merge: shards of another matrix with a copied matrix_digest: exit 2, nothing written")
def _():
    real = root_attrs(path("real1.h5"))
    forged = shards("layout.*", "forged")
    n = 0
    for p in forged:
        with h5py.File(p, "r") as f:
            n += len(f["cases"])
    for p in forged:
        with h5py.File(p, "r+") as f:
            f.attrs.modify("matrix_digest", real["matrix_digest"])
            f.attrs.modify("matrix_cases", n)
    out = path("forged.h5")
    r = run("merge", "-o", out, *forged)
    assert r.returncode == 2 and "matrix_digest" in r.stderr and "mixed set" in r.stderr, \
        (r.returncode, r.stderr)
    assert not os.path.exists(out), "merge left an output"
    left = [x for x in os.listdir(TMP) if x.startswith(".")]
    assert not left, "merge left %s" % left


@case("inspect: a whole-matrix file whose matrix_digest names another matrix: exit 2")
def _():
    p = path("whole.h5")
    r = run("run", "--filter", "layout.*", "-o", p)
    assert r.returncode == 0, r.stderr
    assert run("inspect", p).returncode == 0
    with h5py.File(p, "r+") as f:
        f.attrs.modify("matrix_digest", root_attrs(path("real1.h5"))["matrix_digest"])
    r = run("inspect", p)
    assert r.returncode == 2 and "matrix_digest" in r.stderr, (r.returncode, r.stderr)


@case("shard '01/2', '1/02', '+1/2': merge and inspect refuse it")
def _():
    for bad in ("01/2", "1/02", "+1/2", "1/2 "):
        p = path("shard-bad.h5")
        shutil.copy(path("real1.h5"), p)
        with h5py.File(p, "r+") as f:
            f.attrs.modify("shard", bad)
        r = run("merge", "-o", path("m.h5"), p, path("real2.h5"))
        assert r.returncode == 2 and "shard" in r.stderr, (bad, r.returncode, r.stderr)
        r = run("inspect", p)
        assert r.returncode == 2 and "shard" in r.stderr, (bad, r.returncode, r.stderr)


@case("merge --partial of one shard: merged, and inspect calls it valid (not the whole matrix)")
def _():
    out = path("partial.h5")
    r = run("merge", "--partial", "-o", out, path("real1.h5"))
    assert r.returncode == 0, r.stderr
    r = run("inspect", out)
    assert r.returncode == 0, r.stderr


@case("write-tree: an attribute named twice is refused (exit 2), nothing written")
def _():
    man, data, out = path("m.json"), path("d.bin"), path("w.h5")
    open(data, "wb").close()
    attrs = [{"name": "a", "kind": "string", "value": "x"},
             {"name": "a", "kind": "int64", "value": 1}]
    for root in ({"attrs": attrs}, {"children": {"g": {"attrs": attrs}}}):
        with open(man, "w") as f:
            json.dump({"schema": "fattn-tree/1", "root": root}, f)
        r = run("write-tree", man, data, "-o", out)
        assert r.returncode == 2 and 'attribute "a" given twice' in r.stderr, r.stderr
        assert not os.path.exists(out)
    with open(man, "w") as f:
        json.dump({"schema": "fattn-tree/1", "root": {"attrs": attrs[:1]}}, f)
    assert run("write-tree", man, data, "-o", out).returncode == 0


@case("cases --resolved --json: floats in the shortest round-trip form")
def _():
    spec = [{"id": "a", "b": 1, "h": 1, "sq": 4, "d_qk": 8, "dropout_p": 0.1,
             "attn_scale": 0.1, "raw_func_args": True},
            {"id": "b", "b": 1, "h": 1, "sq": 4, "d_qk": 8, "attn_scale": 1e16}]
    with open(path("f.json"), "w") as f:
        json.dump(spec, f)
    r = run("cases", "--cases", path("f.json"), "--resolved", "--json")
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "0.10000000000000001" not in text and "10000000000000000.0" not in text, text
    got = json.loads(text)
    for c in got:
        for k in ("attn_scale", "attn_scale_arg", "dropout_p"):
            v = c.get(k)
            if isinstance(v, float):
                assert repr(v) in text or ("%s" % v).replace("e+", "e") in text, (k, v, text)
    assert '"dropout_p":0.1,' in text, text


@case("cases --resolved --json on 20,000 cases: printed a case at a time, memory near plain cases")
def _():
    spec = [{"id": "c%d" % i, "b": 1, "h": 1, "sq": 2, "d_qk": 8} for i in range(20000)]
    with open(path("big.json"), "w") as f:
        json.dump(spec, f)

    def peak(*args):
        with open(path("out.json"), "wb") as out:
            p = subprocess.Popen([FATTN, *args], stdout=out, stderr=subprocess.PIPE, cwd=TMP)
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
        assert p.returncode == 0, p.stderr.read()
        return ru.ru_maxrss * 1024
    plain = peak("cases", "--cases", path("big.json"))
    resolved = peak("cases", "--cases", path("big.json"), "--resolved", "--json")
    got = json.load(open(path("out.json")))
    assert len(got) == 20000 and got[-1]["id"] == "c19999"
    if SANITIZED:
        return "SKIP under the sanitizers: RSS does not measure what fattn holds"
    assert resolved < plain * 1.5 + (16 << 20), \
        "resolved peak %.0f MB against plain %.0f MB" % (resolved / 1e6, plain / 1e6)


try:
    failed = tap.run(RESULTS)
finally:
    shutil.rmtree(TMP, ignore_errors=True)
sys.exit(1 if failed else 0)
