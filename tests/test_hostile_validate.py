#!/usr/bin/python3
"""What a run file or a spec may make fattn compute (docs/reliability.md
"Validation of what a file may make fattn compute").

usage: test_hostile_validate.py FATTN_EXE XXH128_EXE VALIDATE_DIR SANITIZED   (prints TAP)

 - every committed VALIDATE_DIR/validate-*.h5 (made by make_validate.py
   there: a real run with one edit and its digests recomputed) is refused by
   the full validation: inspect, replay -o, merge -o and verify reading it as
   its golden exit 2 with a message naming the file, the object and the
   cause, and leave no output behind;
 - a file whose spec asks for GBs of inputs is refused without building
   them (peak RSS and CPU time bounded);
 - the valid file they were made from still inspects and replays;
 - each case's attribute digest (attrs_digest): attribute text changed under
   it is corruption (diff exit 1, the others 2), a file without it is read
   as before, diff never counts it, and runs stay byte-reproducible;
 - --shard and --max-memory values that used to switch a check off, and an
   rng_offset that would record a negative generator offset, are refused;
 - FP8 metadata (a quantizer's scale, amax, eps; forward@out_scale_inv) out
   of range is refused as a tensor's scale_inv is.

Every fattn command runs with RLIMIT_AS at 2 GiB (not under the sanitizers,
whose shadow memory needs the whole address space: SANITIZED=1) and a
wall-clock limit, so a replay that spins or allocates without bound fails.
Needs h5py and numpy (Debian python3-h5py); without them the test skips,
except under CI=true.
"""
import glob
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

h5py, numpy = tap.need_modules("h5py", "numpy")

FATTN, XXH, VDIR = sys.argv[1], sys.argv[2], sys.argv[3]
SANITIZED = sys.argv[4] == "1"
sys.path.insert(0, VDIR)
import make_validate  # noqa: E402  (the generator: file names and expected causes)

TMP = tempfile.mkdtemp(prefix="fattn-hv-")
RESULTS = tap.Tests()
case = RESULTS.case
AS_LIMIT = 2 << 30
SPEC = os.path.join(TMP, "cases.json")
GOOD = os.path.join(TMP, "good.h5")


def limits():
    if not SANITIZED:
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run(*args, check=None, timeout=60):
    try:
        p = subprocess.run([FATTN] + list(args), capture_output=True, text=True,
                           preexec_fn=limits, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("fattn %s: still running after %d s" % (" ".join(args), timeout))
    if p.returncode < 0:
        raise AssertionError("fattn %s died of signal %d\n%s"
                             % (" ".join(args), -p.returncode, p.stderr))
    if check is not None and p.returncode != check:
        raise AssertionError("fattn %s: exit %d, want %d\n%s" % (" ".join(args), p.returncode,
                                                                 check, p.stderr))
    return p


def leftovers(d):
    return sorted(n for n in os.listdir(d) if n.startswith("out") or ".tmp-" in n)


def setup():
    with open(SPEC, "w") as f:
        json.dump(make_validate.CASES, f)
    run("run", "--backend", "cpu", "--impl", "split", "--cases", SPEC, "-o", GOOD, check=0,
        timeout=120)


def refused(name, cause):
    def fn():
        src = os.path.join(VDIR, name)
        d = os.path.join(TMP, "c-" + name)
        os.mkdir(d)
        bad = os.path.join(d, name)
        shutil.copy(src, bad)
        out = os.path.join(d, "out.h5")
        for args in (["inspect", bad],
                     ["replay", bad, "--from", "save_ctx", "--impl", "split", "-o", out],
                     ["replay", bad, "--from", "save_ctx", "--impl", "legacy", "-o", out],
                     ["replay", bad, "--from", "forward", "--impl", "split", "-o", out],
                     ["merge", "-o", out, bad]):
            p = run(*args, check=2)
            assert bad in p.stderr, "%s: the message does not name the file:\n%s" % (
                args[0], p.stderr)
            assert re.search(cause, p.stderr), "%s: the message does not match /%s/:\n%s" % (
                args[0], cause, p.stderr)
            assert not leftovers(d), leftovers(d)
        # ... and as the golden verify reads
        fx = os.path.join(d, "fixtures")
        os.mkdir(fx)
        golden = os.path.join(fx, "cpu-math-1.h5")
        shutil.copy(src, golden)
        p = run("verify", "--cases", SPEC, "--backend", "cpu", "--fixtures", fx, check=2)
        assert golden in p.stderr and re.search(cause, p.stderr), p.stderr
    return fn


@case("the committed files are exactly those make_validate.py makes")
def _():
    have = sorted(os.path.basename(p) for p in glob.glob(os.path.join(VDIR, "validate-*.h5")))
    want = sorted(n for n, _, _ in make_validate.FILES)
    assert have == want, "committed %s, generator makes %s" % (have, want)


for _name, _fn, _cause in make_validate.FILES:
    case("%s: inspect, replay, merge, verify's golden exit 2 naming file and cause"
         % _name)(refused(_name, _cause))


@case("a 47 KB file whose spec asks for GBs of inputs: refused before they are built")
def _():
    if SANITIZED:
        return "SKIP peak RSS is not meaningful under the sanitizers"
    bad = os.path.join(VDIR, "validate-spec-shapes-huge.h5")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # no RLIMIT_AS here: the point is what it would take without one
    p = subprocess.run([FATTN, "inspect", bad], capture_output=True, text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert p.returncode == 2, p.stderr
    assert re.search(r"inputs/\w+ is .*the spec makes", p.stderr), p.stderr
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert cpu < 5.0, "inspect spent %.1f s of CPU" % cpu
    # ru_maxrss (KiB) is the largest child so far: the RUSAGE_CHILDREN
    # maximum only grows, so it holds for this one if it holds overall
    assert after.ru_maxrss < 400 * 1024, "peak RSS %d KiB" % after.ru_maxrss


@case("the valid file they are made from: inspect 0, every replay 0 and equal to it")
def _():
    d = os.path.join(TMP, "good")
    os.mkdir(d)
    run("inspect", GOOD, check=0)
    for frm, impl in (("save_ctx", "split"), ("save_ctx", "legacy"), ("forward", "split")):
        out = os.path.join(d, "out-%s-%s.h5" % (frm, impl))
        run("replay", GOOD, "--from", frm, "--impl", impl, "-o", out, check=0)
        run("diff", GOOD, out, check=0)


@case("attrs_digest: on every case; spec text changed under it is corrupt for diff (exit 1)")
def _():
    d = os.path.join(TMP, "ad")
    os.mkdir(d)
    with h5py.File(GOOD, "r") as f:
        for c in f["cases"].values():
            assert re.fullmatch(r"xxh3-128:[0-9a-f]{32}", c.attrs["attrs_digest"]), dict(c.attrs)
    bad = os.path.join(d, "flip.h5")
    shutil.copy(GOOD, bad)
    with h5py.File(bad, "r+") as f:
        c = f[make_validate.F32]
        c.attrs["spec"] = c.attrs["spec"].replace('"dropout_p":0.0', '"dropout_p":0.1')
    p = run("diff", GOOD, bad, check=1)
    assert re.search(r"corrupt: /cases/v\.bshd\.causal\.f32@attrs_digest", p.stdout), p.stdout
    p = run("inspect", bad, check=2)
    assert bad in p.stderr and "attributes corrupt" in p.stderr, p.stderr


@case("attrs_digest absent (a file from before it): not checked, and diff never counts it")
def _():
    d = os.path.join(TMP, "ad0")
    os.mkdir(d)
    old = os.path.join(d, "old.h5")
    shutil.copy(GOOD, old)
    with h5py.File(old, "r+") as f:
        for c in f["cases"].values():
            del c.attrs["attrs_digest"]
    run("inspect", old, check=0)
    p = run("diff", old, GOOD, check=0)
    assert "attrs_digest" not in p.stdout, p.stdout
    out = os.path.join(d, "out.h5")
    run("replay", old, "--from", "save_ctx", "--impl", "legacy", "-o", out, check=0)
    with h5py.File(out, "r") as f:
        assert all("attrs_digest" in c.attrs for c in f["cases"].values())


@case("two runs with SOURCE_DATE_EPOCH, different output paths: byte-identical")
def _():
    outs = [os.path.join(TMP, "sde%d" % i, "run.h5") for i in range(2)]
    for o in outs:
        os.mkdir(os.path.dirname(o))
        subprocess.run([FATTN, "run", "--backend", "cpu", "--cases", SPEC, "-o", o], check=True,
                       capture_output=True, env=dict(os.environ, SOURCE_DATE_EPOCH="7"))
    a, b = (open(o, "rb").read() for o in outs)
    assert a == b, "the two runs differ in bytes"


@case("--shard with a count past the limit, blanks or signs: exit 2")
def _():
    out = os.path.join(TMP, "out-shard.h5")
    for s in ("1/99999999999999999999", "99999999999999999999/1", " 1/2", "+1/2", "1/-2",
              "1/2x", "0/1"):
        p = run("run", "--cases", SPEC, "--shard", s, "-o", out, check=2)
        assert "--shard" in p.stderr, p.stderr
        assert not os.path.exists(out)
    run("run", "--cases", SPEC, "--shard", "2/2", "-o", out, check=0)


@case("--max-memory inf, 1e400, nan: exit 2 instead of no guard")
def _():
    out = os.path.join(TMP, "out-mem.h5")
    for m in ("inf", "1e400", "nan", "-inf", "0", ""):
        p = run("run", "--cases", SPEC, "--max-memory", m, "-o", out, check=2)
        assert "--max-memory" in p.stderr, p.stderr
        assert not os.path.exists(out)
    p = run("run", "--cases", SPEC, "--max-memory", "1e3", "-o", out, check=2)
    assert "exceeds --max-memory" in p.stderr, p.stderr


@case("rng_offset past INT64_MAX - 16: refused at parse; at the limit recorded exactly")
def _():
    spec = os.path.join(TMP, "rng.json")
    out = os.path.join(TMP, "out-rng.h5")
    one = dict(make_validate.CASES[0], dropout_p=0.25)
    for off in (2**63 - 1, 2**63 - 16):
        with open(spec, "w") as f:
            json.dump([dict(one, rng_offset=off)], f)
        p = run("run", "--cases", spec, "-o", out, check=2)
        assert "rng_offset" in p.stderr and spec in p.stderr, p.stderr
        assert not os.path.exists(out)
    with open(spec, "w") as f:
        json.dump([dict(one, rng_offset=2**63 - 17)], f)
    run("run", "--cases", spec, "-o", out, check=0)
    with h5py.File(out, "r") as f:
        fw = f["cases/%s/forward" % one["id"]]
        assert int(fw.attrs["rng_gen_offset"]) == 2**63 - 1, fw.attrs["rng_gen_offset"]
    run("inspect", out, check=0)


@case("--max-memory 0x10, ' 5', '+5' and --repeat ' 2', '+2': exit 2 (plain decimal only)")
def _():
    out = os.path.join(TMP, "strict.h5")
    for args in (["--max-memory", "0x10"], ["--max-memory", " 5"], ["--max-memory", "+5"],
                 ["--repeat", " 2"], ["--repeat", "+2"]):
        p = run("run", "--cases", SPEC, *args, "-o", out, check=2)
        assert args[0] in p.stderr, p.stderr
        assert not os.path.exists(out)
    p = run("replay", GOOD, "--from", "save_ctx", "--impl", "split", "--max-memory", "0x10",
            "-o", out, check=2)


FP8_CASE = "fp8.cs.bsh3d.fp8in.o_fp8"
FP8_OUT_CASE = "fp8.cs.bshd_bs2hd.gqa.outfp8"


@case("FP8 metadata: a quantizer's scale, amax or eps and forward@out_scale_inv out of range: "
      "inspect and replay exit 2")
def _():
    d = os.path.join(TMP, "fp8")
    os.mkdir(d)
    good = os.path.join(d, "good.h5")
    run("run", "--backend", "cpu", "--filter", FP8_CASE, "-o", good, check=0, timeout=120)
    run("inspect", good, check=0)
    out = os.path.join(d, "out.h5")
    for field, value in [("scale", "inf"), ("scale", "0x0p+0"), ("scale", "-0x1p+4"),
                         ("amax", "nan"), ("amax", "-0x1p+0"), ("eps", "inf")]:
        bad = os.path.join(d, "bad.h5")
        shutil.copy(good, bad)
        with h5py.File(bad, "r+") as f:
            c = f["cases/" + FP8_CASE]
            del c.attrs["attrs_digest"]  # no digest in the way: the range check must hold
            q = c["save_ctx"].attrs["O_quantizer"]
            q = re.sub(r"\b%s=\S+" % field, "%s=%s" % (field, value), q)
            c["save_ctx"].attrs.modify("O_quantizer", q)
        p = run("inspect", bad, check=2)
        assert "O_quantizer" in p.stderr and field in p.stderr, (field, value, p.stderr)
        run("replay", bad, "--from", "save_ctx", "--impl", "split", "-o", out, check=2)
        assert not os.path.exists(out)
    run("run", "--backend", "cpu", "--filter", FP8_OUT_CASE, "-o", good, check=0, timeout=120)
    for value in (float("inf"), float("nan"), 0.0, -1.0):
        bad = os.path.join(d, "bad.h5")
        shutil.copy(good, bad)
        with h5py.File(bad, "r+") as f:
            c = f["cases/" + FP8_OUT_CASE]
            del c.attrs["attrs_digest"]
            assert "out_scale_inv" in c["forward"].attrs
            c["forward"].attrs.modify("out_scale_inv", numpy.float32(value))
        p = run("inspect", bad, check=2)
        assert "out_scale_inv" in p.stderr, (value, p.stderr)


FP8_DS_CASE = "fp8.ds.bshd"  # delayed scaling, training: all six quantizers recorded


@case("FP8 quantizers against the spec and their role: a delayed case's dO_quantizer in E4M3, "
      "a current-scaling recipe where delayed is TE's, an MXFP8 one, pow2 on a delayed one: "
      "inspect and replay exit 2 naming it")
def _():
    d = os.path.join(TMP, "fp8-roles")
    os.mkdir(d)
    good = os.path.join(d, "good.h5")
    run("run", "--backend", "cpu", "--filter", FP8_DS_CASE, "-o", good, check=0, timeout=120)
    run("inspect", good, check=0)
    out = os.path.join(d, "out.h5")
    edits = [("dO_quantizer", "float8_e5m2", "float8_e4m3fn", "float8_e5m2"),
             ("dQKV_quantizer", "float8_e5m2", "float8_e4m3fn", "float8_e5m2"),
             ("QKV_quantizer", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fn"),
             ("S_quantizer", "delayed", "current", "delayed"),
             ("QKV_quantizer", "delayed", "mxfp8", "per block"),
             ("O_quantizer", "pow2=0", "pow2=1", "no pow2")]
    for attr, old, new, cause in edits:
        bad = os.path.join(d, "bad.h5")
        shutil.copy(good, bad)
        with h5py.File(bad, "r+") as f:
            c = f["cases/" + FP8_DS_CASE]
            del c.attrs["attrs_digest"]  # no digest in the way: the role check must hold
            q = c["save_ctx"].attrs[attr]
            assert old in q, (attr, q)
            c["save_ctx"].attrs.modify(attr, q.replace(old, new, 1))
        p = run("inspect", bad, check=2)
        assert attr in p.stderr and cause in p.stderr and bad in p.stderr, (attr, new, p.stderr)
        if attr == edits[0][0]:  # replay loads through the same validation
            p = run("replay", bad, "--from", "save_ctx", "--impl", "split", "-o", out, check=2)
            assert attr in p.stderr, (attr, new, p.stderr)
            assert not os.path.exists(out)


PAGED_CASE = "paged.bshd_bshd_bshd.decode.gqa.bf16"  # b = 3, 4 pages a sequence, 16 pages


@case("page tables in a run file: entries out of [0, num_pages) (-5, 99999, INT32_MIN, "
      "INT32_MAX) or a page twice in one sequence (all zero): inspect and replay exit 2")
def _():
    d = os.path.join(TMP, "paged")
    os.mkdir(d)
    good = os.path.join(d, "good.h5")
    run("run", "--backend", "cpu", "--filter", PAGED_CASE, "-o", good, check=0, timeout=120)
    run("inspect", good, check=0)
    make_validate.XXH = XXH
    out = os.path.join(d, "out.h5")
    for value, cause in ((-5, "not a page of the cache"), (99999, "not a page of the cache"),
                         (-2**31, "not a page of the cache"),
                         (2**31 - 1, "not a page of the cache"), (None, "holds page 0 twice")):
        bad = os.path.join(d, "bad.h5")
        shutil.copy(good, bad)
        with h5py.File(bad, "r+") as f:
            c = f["cases/" + PAGED_CASE]
            del c.attrs["attrs_digest"]
            ds = c["inputs/page_table_k"]
            t = ds[()].copy()
            if value is None:
                t[...] = 0
            else:
                t[1, 2] = value
            ds[...] = t
            ds.attrs["digest"] = make_validate.digest(t)  # a valid dataset: only its values lie
        p = run("inspect", bad, check=2)
        assert "page_table_k" in p.stderr and cause in p.stderr, (value, p.stderr)
        if value is None:  # replay loads through the same validation
            run("replay", bad, "--from", "save_ctx", "--impl", "split", "-o", out, check=2)
            assert not os.path.exists(out)


@case("paged: the default num_pages (b * skv / page_size) past INT32_MAX is refused as an "
      "explicit one is")
def _():
    spec = os.path.join(TMP, "paged-many.json")
    with open(spec, "w") as f:
        json.dump([{"id": "p.many", "b": 65536, "h": 1, "sq": 1, "skv": 65536, "d_qk": 8,
                    "layout": "paged_kv_bshd_bshd_bshd", "mask": "padding",
                    "is_training": False, "paged": {"page_size": 1}}], f)
    p = run("cases", "--cases", spec, check=2)
    assert "num_pages" in p.stderr and "INT32_MAX" in p.stderr and spec in p.stderr, p.stderr


failed = 1
try:
    setup()
    failed = tap.run(RESULTS)
finally:
    shutil.rmtree(TMP, ignore_errors=True)
sys.exit(1 if failed else 0)
