#!/usr/bin/python3
"""End-to-end tests of `fattn diff` (docs/diff.md).

usage: test_diff.py FATTN_EXE XXH128_EXE PROFILE_JSON     (prints TAP)

Run files come from `fattn run` on a small filter of the default matrix;
copies are edited with h5py. XXH128_EXE prints the fattn digest of stdin,
so an edited dataset can be given a matching digest. Needs h5py and numpy
(Debian python3-h5py); without them the test skips, except under CI=true.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

h5py, np = tap.need_modules("h5py", "numpy")

FATTN, XXH, PROFILE = sys.argv[1], sys.argv[2], sys.argv[3]
TMP = tempfile.mkdtemp(prefix="fattn-diff-")
RESULTS = tap.Tests()
FILTER = "mask.causal*"


# Fixed creation time: files made by separate runs differ only where a test
# makes them differ, even when a second boundary passes between two runs.
RUN_ENV = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")


def run(*args, check=None):
    p = subprocess.run([FATTN] + list(args), capture_output=True, text=True, env=RUN_ENV)
    if check is not None and p.returncode != check:
        raise AssertionError("fattn %s: exit %d, want %d\n%s\n%s" % (
            " ".join(args), p.returncode, check, p.stdout[-3000:], p.stderr))
    return p


def path(name):
    return os.path.join(TMP, name)


def digest(data):
    p = subprocess.run([XXH], input=data.tobytes(), capture_output=True, check=True)
    return p.stdout.decode().strip()


def redigest(ds):
    ds.attrs.modify("digest", digest(ds[()]))


def edited(src, name, edit):
    dst = path(name)
    shutil.copy(path(src), dst)
    with h5py.File(dst, "r+") as f:
        edit(f)
        # as a file from before attrs_digest (not checked), so the edit
        # itself is what diff reports
        for c in f["cases"].values():
            if "attrs_digest" in c.attrs:
                del c.attrs["attrs_digest"]
    return dst


def first_case(f):
    for k in f["cases"]:
        if "backward" in f["cases"][k]:
            return f["cases"][k]
    raise AssertionError("no training case")


OUT = None  # the path of forward/out of the first training case


case = RESULTS.case


def setup():
    global OUT
    run("run", "--filter", FILTER, "--impl", "legacy", "-o", path("L.h5"), check=0)
    run("run", "--filter", FILTER, "--impl", "split", "-o", path("S.h5"), check=0)
    with h5py.File(path("L.h5"), "r") as f:
        OUT = first_case(f).name + "/forward/out"


def flip_bits(f, p, idx, mask, fix_digest):
    ds = f[p]
    a = ds[()]
    u = a.view(np.uint16 if a.dtype.itemsize == 2 else
               np.uint32 if a.dtype.itemsize == 4 else np.uint8).reshape(-1)
    u[idx] ^= mask
    ds[...] = a
    if fix_digest:
        redigest(ds)


def set_bits(f, p, idx, bits):
    ds = f[p]
    a = ds[()]
    u = a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32).reshape(-1)
    u[idx] = bits
    ds[...] = a
    redigest(ds)


@case("identical files exit 0")
def _():
    shutil.copy(path("L.h5"), path("L2.h5"))
    p = run("diff", path("L.h5"), path("L2.h5"), check=0)
    assert "provenance: identical" in p.stdout and "exit 0" in p.stdout, p.stdout


@case("legacy vs split run files of the matrix exit 0; impl in the delta, _impl listed")
def _():
    p = run("diff", path("L.h5"), path("S.h5"), "--show-private", check=0)
    assert "/@impl" in p.stdout and "private (_impl, not counted)" in p.stdout, p.stdout


@case("_impl groups are quiet by default: no line each, the summary counts them; "
      "--show-private lists them; verify's verdict on the same pair is unchanged")
def _():
    import re
    quiet = run("diff", path("L.h5"), path("S.h5"), check=0)
    shown = run("diff", path("L.h5"), path("S.h5"), "--show-private", check=0)
    assert "private (_impl" not in quiet.stdout, quiet.stdout
    listed = [l for l in shown.stdout.splitlines() if l.startswith("private (_impl")]
    assert listed, shown.stdout
    n = int(re.search(r"(\d+) private", quiet.stdout.splitlines()[-1]).group(1))
    assert n > 0 and "--show-private" in quiet.stdout.splitlines()[-1], quiet.stdout
    assert re.search(r"%d private; exit 0$" % n, shown.stdout.splitlines()[-1]), shown.stdout
    # the report shrinks by exactly the private lines, nothing else changes
    assert len(shown.stdout.splitlines()) == len(quiet.stdout.splitlines()) + len(listed)
    p = run("verify", "--backend", "cpu", "--filter", "layout.bshd*", check=0)
    assert "behavior-neutral: yes" in p.stdout, p.stdout


@case("a flipped bit with a stale digest is 'corrupt: PATH' (exit 1)")
def _():
    f = edited("L.h5", "stale.h5", lambda f: flip_bits(f, OUT, 3, 1, False))
    p = run("diff", path("L.h5"), f, check=1)
    assert "corrupt: " + OUT in p.stdout, p.stdout
    p = run("diff", f, path("L.h5"), "--mode", "ulp", "--max-ulp", "5", check=1)
    assert "corrupt: " + OUT in p.stdout, p.stdout


@case("a flipped bit with a recomputed digest is a difference naming the path, hex and ulp")
def _():
    f = edited("L.h5", "flip.h5", lambda f: flip_bits(f, OUT, 3, 1, True))
    p = run("diff", f, path("L.h5"), check=1)
    assert "different: " + OUT in p.stdout, p.stdout
    assert "1 of " in p.stdout and "max_ulp 1" in p.stdout, p.stdout
    assert "ulp histogram: 0:0 1:1" in p.stdout and "(0x" in p.stdout, p.stdout
    assert "corrupt:" not in p.stdout, p.stdout


@case("--trust-digests skips data whose stored digests agree (a stale flip goes unseen)")
def _():
    p = run("diff", path("L.h5"), path("stale.h5"), "--trust-digests", check=0)
    assert "--trust-digests" in p.stdout
    run("diff", path("L.h5"), path("flip.h5"), "--trust-digests", check=1)


@case("a 1-ulp change passes --max-ulp 1 and fails --max-ulp 0")
def _():
    run("diff", path("flip.h5"), path("L.h5"), "--mode", "ulp", "--max-ulp", "1", check=0)
    p = run("diff", path("flip.h5"), path("L.h5"), "--mode", "ulp", "--max-ulp", "0", check=1)
    assert "different: " + OUT in p.stdout


@case("a changed NaN payload differs bitwise, passes ulp and tol modes")
def _():
    a = edited("L.h5", "nan_a.h5", lambda f: set_bits(f, OUT, 5, 0x7fc0))
    b = edited("L.h5", "nan_b.h5", lambda f: set_bits(f, OUT, 5, 0x7fc1))
    p = run("diff", a, b, check=1)
    assert "NaN payloads 1" in p.stdout, p.stdout
    run("diff", a, b, "--mode", "ulp", check=0)
    run("diff", a, b, "--mode", "tol", check=0)
    p = run("diff", a, path("L.h5"), "--mode", "ulp", "--max-ulp", "100000", check=1)
    assert "class changes 1" in p.stdout, p.stdout


@case("+0 vs -0 differs bitwise, passes --mode ulp --max-ulp 0")
def _():
    a = edited("L.h5", "pz.h5", lambda f: set_bits(f, OUT, 7, 0x0000))
    b = edited("L.h5", "nz.h5", lambda f: set_bits(f, OUT, 7, 0x8000))
    p = run("diff", a, b, check=1)
    assert "different: " + OUT in p.stdout and "0x8000" in p.stdout, p.stdout
    run("diff", a, b, "--mode", "ulp", "--max-ulp", "0", check=0)


def replace(f, p, arr, dtype_attr):
    del f[p]
    ds = f.create_dataset(p, data=arr)
    ds.attrs["dtype"] = dtype_attr
    ds.attrs["digest"] = digest(arr)


@case("shape [2,3] vs [3,2] is a structure difference (exit 1) naming the path")
def _():
    p23 = first_case(h5py.File(path("L.h5"), "r")).name + "/forward/aux/softmax_stats"
    a = edited("L.h5", "s23.h5", lambda f: replace(f, p23, np.zeros((2, 3), np.float32),
                                                   "float32"))
    b = edited("L.h5", "s32.h5", lambda f: replace(f, p23, np.zeros((3, 2), np.float32),
                                                   "float32"))
    p = run("diff", a, b, check=1)
    assert "structure: " + p23 in p.stdout and "shape differs" in p.stdout, p.stdout


@case("float32 vs float64 is not equal: float64 is no run-file dtype (exit 2 naming the path); "
      "float32 vs float16 is a dtype difference (exit 1)")
def _():
    ps = first_case(h5py.File(path("L.h5"), "r")).name + "/forward/aux/softmax_stats"
    with h5py.File(path("L.h5"), "r") as f:
        x = f[ps][()]
    b = edited("L.h5", "f64.h5", lambda f: replace(f, ps, x.astype(np.float64), "float32"))
    p = run("diff", path("L.h5"), b, check=2)
    assert ps in p.stderr and "f64.h5" in p.stderr, p.stderr
    b = edited("L.h5", "f16.h5", lambda f: replace(f, ps, x.astype(np.float16), "float16"))
    p = run("diff", path("L.h5"), b, check=1)
    assert "structure: " + ps in p.stdout and "dtype differs" in p.stdout, p.stdout


@case("an extra attribute is a difference naming PATH@NAME")
def _():
    b = edited("L.h5", "attr.h5", lambda f: f[OUT].attrs.create("note", "x"))
    p = run("diff", path("L.h5"), b, check=1)
    assert "missing in A: " + OUT + "@note" in p.stdout, p.stdout


@case("a missing dataset is a difference naming the path")
def _():
    b = edited("L.h5", "miss.h5", lambda f: f.__delitem__(OUT))
    p = run("diff", path("L.h5"), b, check=1)
    assert "missing in B: " + OUT + " (dataset)" in p.stdout, p.stdout


@case("--mode tol: a value exactly at atol + rtol*|b| passes, the next float up fails")
def _():
    ps = first_case(h5py.File(path("L.h5"), "r")).name + "/forward/aux/softmax_stats"
    def put(v):
        def e(f):
            a = f[ps][()]
            a.reshape(-1)[0] = v
            f[ps][...] = a
            redigest(f[ps])
        return e
    b = edited("L.h5", "tb.h5", put(np.float32(2.0)))
    a = edited("L.h5", "ta.h5", put(np.float32(3.25)))   # |a-b| = 1.25 = 0.25 + 0.5*2
    up = edited("L.h5", "tu.h5", put(np.nextafter(np.float32(3.25), np.float32(4))))
    rule = "*/softmax_stats=0.5,0.25"
    p = run("diff", a, b, "--mode", "tol", "--tol", rule, check=0)
    assert "within tol: " + ps in p.stdout, p.stdout
    p = run("diff", up, b, "--mode", "tol", "--tol", rule, check=1)
    assert "different: " + ps in p.stdout and "rtol 0.5, atol 0.25" in p.stdout, p.stdout
    run("diff", a, b, "--mode", "tol", check=1)  # the float32 default is far tighter
    # last match wins
    run("diff", a, b, "--mode", "tol", "--tol", rule, "--tol", "*=0,0", check=1)


@case("--tol-profile loads the shipped profile; a malformed one is a usage error")
def _():
    p = run("diff", path("flip.h5"), path("L.h5"), "--mode", "tol", "--tol-profile", PROFILE,
            check=0)
    assert "fattn-tol/1" in p.stdout, p.stdout
    with open(path("bad.json"), "w") as f:
        f.write('{"version": "x", "dtypes": {"int32": {"rtol": 1, "atol": 1}}}')
    run("diff", path("flip.h5"), path("L.h5"), "--mode", "tol", "--tol-profile",
        path("bad.json"), check=2)


@case("files differing only in provenance exit 0 with the delta printed")
def _():
    b = edited("L.h5", "prov.h5", lambda f: (f.attrs.modify("git_rev", "feedface"),
                                              f.attrs.modify("device", "NVIDIA H200")))
    p = run("diff", path("L.h5"), b, check=0)
    assert "/@git_rev" in p.stdout and "feedface" in p.stdout, p.stdout
    assert "different platforms (device)" in p.stdout, p.stdout


@case("_impl differences are listed as private, exit 0")
def _():
    def e(f):
        c = first_case(f)
        g = c["forward/_impl"]
        k = [k for k in g if isinstance(g[k], h5py.Dataset)][0]
        flip_bits(f, g.name + "/" + k, 0, 1, True)
    b = edited("S.h5", "impl.h5", e)
    p = run("diff", path("S.h5"), b, "--show-private", check=0)
    assert "private (_impl, not counted)" in p.stdout and "1 different" in p.stdout, p.stdout
    p = run("diff", path("S.h5"), b, check=0)
    assert "private (_impl" not in p.stdout and "1 private (not counted" in p.stdout, p.stdout


@case("/audit is compared only with --audit")
def _():
    run("run", "--filter", "mask.causal.sq*", "--repeat", "2", "-o", path("au.h5"), check=0)
    def e(f):
        def visit(name, obj):
            if "repeats" in obj.attrs:
                obj.attrs.modify("repeats", 3)
                return True
        f["audit"].visititems(visit)
    b = edited("au.h5", "au2.h5", e)
    p = run("diff", path("au.h5"), b, check=0)
    assert "/audit: not compared" in p.stdout, p.stdout
    p = run("diff", path("au.h5"), b, "--audit", check=1)
    assert "/audit/" in p.stdout and "@repeats" in p.stdout, p.stdout


@case("--json names the differing path with its count and max_ulp")
def _():
    j = path("r.json")
    run("diff", path("flip.h5"), path("L.h5"), "--json", j, check=1)
    with open(j) as f:
        r = json.load(f)
    assert r["schema"] == "fattn-diff/1" and r["reference"] == "B" and r["exit"] == 1
    e = r["paths"][OUT]
    assert e["status"] == "different" and e["count"] == 1 and e["max_ulp"] == 1, e
    assert e["worst"][0]["a_bits"].startswith("0x"), e
    assert r["summary"]["different"] == 1 and r["summary"]["counted"] == 1, r["summary"]
    run("diff", path("L.h5"), path("S.h5"), "--json", j, check=0)
    with open(j) as f:
        r = json.load(f)
    assert r["provenance_delta"][0]["path"] == "/@impl" and r["exit"] == 0, r
    assert any(v["status"] == "private" for v in r["paths"].values())


@case("--only restricts the comparison to matching paths")
def _():
    run("diff", path("L.h5"), path("miss.h5"), "--only", "*/inputs/*", check=0)
    run("diff", path("L.h5"), path("miss.h5"), "--only", "*/forward/*", check=1)


@case("digest-only tensors compare with the other side's recomputed digest")
def _():
    def e(f):
        d = f[OUT].attrs["digest"]
        g = f[OUT].parent
        del f[OUT]
        g.attrs["digest:out"] = d
    b = edited("L.h5", "donly.h5", e)
    run("diff", path("L.h5"), b, check=0)
    run("diff", b, path("L.h5"), check=0)
    run("diff", b, b, check=0)
    p = run("diff", path("flip.h5"), b, check=1)
    assert "different: " + OUT in p.stdout and "digest only in B" in p.stdout, p.stdout
    p = run("diff", path("stale.h5"), b, check=1)
    assert "corrupt: " + OUT in p.stdout, p.stdout


@case("unreadable, missing, non-HDF5 and wrong-schema files exit 2 naming the file")
def _():
    with open(path("text.h5"), "w") as f:
        f.write("not hdf5\n" * 20)
    p = run("diff", path("L.h5"), path("text.h5"), check=2)
    assert "text.h5" in p.stderr, p.stderr
    p = run("diff", path("nope.h5"), path("L.h5"), check=2)
    assert "nope.h5" in p.stderr, p.stderr
    b = edited("L.h5", "schema.h5", lambda f: f.attrs.modify("schema", "fattn-run/9"))
    p = run("diff", path("L.h5"), b, check=2)
    assert "schema" in p.stderr, p.stderr


@case("usage errors exit 2")
def _():
    run("diff", path("L.h5"), check=2)
    run("diff", path("L.h5"), path("L.h5"), "--mode", "fuzzy", check=2)
    run("diff", path("L.h5"), path("L.h5"), "--max-ulp", "1", check=2)
    run("diff", path("L.h5"), path("L.h5"), "--mode", "tol", "--tol", "x=1", check=2)
    assert "fattn diff A.h5 B.h5" in run("diff", "--help", check=0).stdout


def main():
    try:
        setup()
    except Exception as e:  # noqa: BLE001
        print("1..1\nnot ok 1 - setup\n# %s" % str(e).replace("\n", "\n# "))
        return 1
    failed = tap.run(RESULTS)
    if not failed:
        shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
