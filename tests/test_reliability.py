#!/usr/bin/python3
"""Reliability of the fattn CLI against bad input and faults
(docs/reliability.md).

usage: test_reliability.py FATTN_EXE XXH128_EXE BAD_DIR SANITIZED TESTING   (prints TAP)

 - malformed run files, made from a valid one with h5py (or raw bytes), and
   the committed files of BAD_DIR (tests/data/bad): each must give exit 2
   with a message naming the file, the object and the cause, for inspect,
   replay -o, merge -o (and diff where reading itself is unsafe), leave no
   output file (nor a temporary one) behind, and a valid file next to it
   must still pass;
 - malformed and hostile case specs (BAD_DIR/*.json) for cases, run -o,
   golden -o and verify;
 - faults: RLIMIT_FSIZE while writing (a full disk), SIGKILL mid-write, and
   every allocation of fattn_tensor_alloc failing in turn
   (FATTN_TEST_FAIL_ALLOC=N, fattn/testing.h; only in a -Dtesting build,
   TESTING=1: without the hook those cases report a skip and the reason).

Every fattn command runs with RLIMIT_AS at 2 GiB (not under the sanitizers,
whose shadow memory needs the whole address space: SANITIZED=1), so a file
asking for terabytes must be refused before anything is allocated.
Needs h5py and numpy (Debian python3-h5py); without them the test skips,
except under CI=true.
"""
import glob
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

h5py, np = tap.need_modules("h5py", "numpy")

FATTN, XXH, BAD_DIR = sys.argv[1], sys.argv[2], sys.argv[3]
SANITIZED = sys.argv[4] == "1"
TESTING = sys.argv[5] == "1"
NO_HOOK = "SKIP built without -Dtesting: no allocation fault hook (fattn/testing.h)"
TMP = tempfile.mkdtemp(prefix="fattn-rel-")
RESULTS = tap.Tests()
AS_LIMIT = 2 << 30

# Two small training cases: a padded batch layout (float32) and THD with
# cu_seqlens (bfloat16), so the save_ctx state and replays exist.
TINY = [
    {"id": "r.bshd.causal.f32", "b": 1, "h": 1, "sq": 2, "skv": 3, "d_qk": 8,
     "dtype": "float32", "mask": "causal", "seed": 3},
    {"id": "r.thd.padding.bf16", "b": 2, "h": 1, "sq": 3, "skv": 3, "d_qk": 8,
     "layout": "thd_thd_thd", "mask": "padding", "pad_between_seqs": True,
     "seqlens_q": [2, 1], "seqlens_kv": [3, 1]},
]
F32 = "cases/r.bshd.causal.f32"
THD = "cases/r.thd.padding.bf16"


def limits(as_limit=True, fsize=None):
    def apply():
        if as_limit and not SANITIZED:
            resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
        if fsize is not None:
            # A full disk: write(2) fails with EFBIG instead of a signal.
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return apply


def run(*args, env=None, check=None, fsize=None, timeout=300):
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([FATTN] + list(args), capture_output=True, text=True, env=e,
                       preexec_fn=limits(fsize=fsize), timeout=timeout)
    if p.returncode < 0:
        raise AssertionError("fattn %s died of signal %d\n%s"
                             % (" ".join(args), -p.returncode, p.stderr))
    if check is not None and p.returncode != check:
        raise AssertionError("fattn %s: exit %d, want %d\n%s" % (" ".join(args), p.returncode,
                                                                 check, p.stderr))
    return p


def path(*names):
    return os.path.join(TMP, *names)


case = RESULTS.case


def digest(arr):
    p = subprocess.run([XXH], input=np.ascontiguousarray(arr).tobytes(), capture_output=True,
                       check=True)
    return p.stdout.decode().strip()


def put(f, p, arr, dtype_name, fix_digest=True):
    """Replace dataset p with arr, its `dtype` attribute and (optionally) a
    matching digest."""
    if p in f:
        del f[p]
    ds = f.create_dataset(p, data=arr)
    ds.attrs["dtype"] = dtype_name
    ds.attrs["digest"] = digest(arr) if fix_digest else "xxh3-128:" + "0" * 32
    return ds


def redigest(ds):
    ds.attrs.modify("digest", digest(ds[()]))


def leftovers(d):
    """Output or temporary files a failed command may not leave in d."""
    return sorted(n for n in os.listdir(d) if n.startswith("out") or ".tmp-" in n)


GOOD = path("good.h5")
SPEC = path("tiny.json")


def setup():
    with open(SPEC, "w") as f:
        json.dump(TINY, f)
    run("run", "--backend", "cpu", "--cases", SPEC, "-o", GOOD, check=0)


# ---- malformed run files ------------------------------------------------------

def raw(data):
    def make(dst):
        with open(dst, "wb") as f:
            f.write(data(open(GOOD, "rb").read()))
    return make


def edit(fn):
    def make(dst):
        shutil.copy(GOOD, dst)
        with h5py.File(dst, "r+") as f:
            fn(f)
            # as a file from before attrs_digest (not checked), so only the
            # targeted check can fire
            if "cases" in f and isinstance(f["cases"], h5py.Group):
                for c in f["cases"].values():
                    if isinstance(c, h5py.Group) and "attrs_digest" in c.attrs:
                        del c.attrs["attrs_digest"]
    return make


def set_attr(p, name, value):
    def fn(f):
        f[p].attrs[name] = value
    return fn


def del_attr(p, name):
    def fn(f):
        del f[p].attrs[name]
    return fn


def modify_spec(p, **kv):
    def fn(f):
        s = json.loads(f[p].attrs["spec"])
        s.update(kv)
        f[p].attrs["spec"] = json.dumps(s, sort_keys=True, separators=(",", ":"))
    return fn


def huge(p, shape, h5type, dtype_name):
    """A dataset asking for `shape` elements with no data stored."""
    def fn(f):
        del f[p]
        ds = f.create_dataset(p, shape=shape, dtype=h5type)
        ds.attrs["dtype"] = dtype_name
        ds.attrs["digest"] = "xxh3-128:" + "0" * 32
    return fn


def cu(p, values):
    def fn(f):
        put(f, p, np.array(values, dtype=np.int32), "int32")
    return fn


def flip(p):
    def fn(f):
        a = f[p][()].copy()
        a.view(np.uint8).flat[0] ^= 1
        f[p][...] = a
    return fn


def replace_with_group(p):
    def fn(f):
        del f[p]
        f.create_group(p)
    return fn


def replace_with_dataset(p):
    def fn(f):
        del f[p]
        put(f, p, np.zeros(4, dtype=np.int32), "int32")
    return fn


def soft_link(p):
    def fn(f):
        del f[p]
        f[p] = h5py.SoftLink("/" + F32 + "/inputs/k")
    return fn


def rank6(p):
    def fn(f):
        put(f, p, np.zeros((1, 1, 1, 1, 2, 8), dtype=np.float32), "float32")
    return fn


def wrong_shape(p):
    def fn(f):
        put(f, p, np.zeros((1, 2, 1, 4), dtype=np.float32), "float32")
    return fn


def float64_attr(f):
    f.attrs["extra"] = np.float64(1.5)


def delete(p):
    def fn(f):
        del f[p]
    return fn


def seqlens(f):
    s = json.loads(f[THD].attrs["spec"])
    s["seqlens_q"] = [-1, 3]
    f[THD].attrs["spec"] = json.dumps(s, sort_keys=True, separators=(",", ":"))


# name: (make, object the message must name (regex), cause (regex), diff exit)
# diff validates only as far as safe reading needs (docs/run-files.md): where it
# still reads the file, its exit is not asserted (None).
RUNFILE_MUTANTS = [
    ("empty", raw(lambda b: b""), r"", r"not an HDF5 file|signature|open", 2),
    ("truncated", raw(lambda b: b[:len(b) // 2]), r"", r"truncat|EOF|eoa|open|read|address", 2),
    ("garbage", raw(lambda b: b"this is not HDF5\n" * 64), r"",
     r"not an HDF5 file|signature|open", 2),
    ("schema_v2", edit(set_attr("/", "schema", "fattn-run/2")), r"schema", r"fattn-run/2", None),
    ("schema_missing", edit(del_attr("/", "schema")), r"schema", r"no schema|not a fattn run",
     None),
    ("dtype_missing", edit(del_attr(F32 + "/inputs/q", "dtype")), r"inputs/q", r"dtype", 2),
    ("dtype_unknown", edit(set_attr(F32 + "/inputs/q", "dtype", "float99")), r"inputs/q",
     r"float99|dtype", 2),
    ("dtype_disagrees", edit(set_attr(F32 + "/inputs/q", "dtype", "bfloat16")), r"inputs/q",
     r"dtype|type", 2),
    ("dtype_not_string", edit(set_attr(F32 + "/inputs/q", "dtype", np.int64(3))), r"inputs/q",
     r"dtype", 2),
    ("digest_missing", edit(del_attr(F32 + "/inputs/k", "digest")), r"inputs/k", r"digest", 2),
    ("digest_stale", edit(flip(F32 + "/inputs/v")), r"inputs/v", r"digest|corrupt", None),
    ("dims_terabytes", edit(huge(F32 + "/inputs/q", (1 << 40, 1, 8), "<u2", "bfloat16")),
     r"inputs/q", r"storage|size|shape", 2),
    ("dims_overflow", edit(huge(F32 + "/inputs/q", (1 << 62, 1 << 62, 8), "<f4", "float32")),
     r"inputs/q", r"overflow|storage|size|large", 2),
    ("rank6", edit(rank6(F32 + "/inputs/q")), r"inputs/q", r"rank", 2),
    ("group_for_dataset", edit(replace_with_group(F32 + "/inputs/q")), r"inputs/q|q",
     r"group|dataset|missing|expected", None),
    ("soft_link", edit(soft_link(F32 + "/inputs/q")), r'inputs: "q"', r"link", 2),
    ("attr_float64", edit(float64_attr), r"extra", r"attribute|type|kind", 2),
    ("shape_vs_spec", edit(wrong_shape(F32 + "/inputs/q")), r"inputs/q", r"shape", None),
    ("spec_negative_seqlens", edit(seqlens), r"r\.thd\.padding\.bf16|spec",
     r"seqlens_q", None),
    ("spec_absurd_b", edit(modify_spec(F32, b=65536)), r"r\.bshd\.causal\.f32|inputs",
     r"shape|spec|b", None),
    ("spec_unknown_key", edit(modify_spec(F32, bogus=1)), r"r\.bshd\.causal\.f32|spec",
     r"bogus|unknown", None),
    ("cu_seqlens_non_monotone", edit(cu(THD + "/inputs/cu_seqlens_q", [0, 3, 2])),
     r"cu_seqlens_q", r"monoton|decreas|order|bounds", None),
    ("cu_seqlens_out_of_bounds", edit(cu(THD + "/inputs/cu_seqlens_kv", [0, 3, 1000])),
     r"cu_seqlens_kv", r"bound|range|exceed|monoton", None),
    ("cu_seqlens_negative", edit(cu(THD + "/inputs/cu_seqlens_q", [0, -5, 3])),
     r"cu_seqlens_q", r"monoton|negative|bound|range|start", None),
    ("ctx_max_seqlen_negative", edit(set_attr(THD + "/save_ctx", "max_seqlen_q", np.int64(-1))),
     r"save_ctx", r"out of range", None),
    ("ctx_window_absurd", edit(set_attr(THD + "/save_ctx", "window_size",
                                        np.array([-7, 1 << 40], dtype=np.int64))),
     r"save_ctx", r"out of range", None),
    ("ctx_dropout_absurd", edit(set_attr(F32 + "/save_ctx", "dropout_p", np.float32(2.0))),
     r"save_ctx", r"out of range", None),
    ("ctx_wrong_type", edit(set_attr(F32 + "/save_ctx", "qkv_layout", np.int64(7))),
     r"qkv_layout", r"type|string|expected", None),
    ("state_gap", edit(delete(F32 + "/forward")), r"r\.bshd\.causal\.f32",
     r"without the state before|forward", None),
]


def check_message(p, f, obj, cause):
    msg = p.stderr
    assert f in msg, "message does not name the file %s: %r" % (f, msg)
    if obj:
        assert re.search(obj, msg), "message does not name the object /%s/: %r" % (obj, msg)
    if cause:
        assert re.search(cause, msg, re.I), "message does not give the cause /%s/: %r" % (cause,
                                                                                         msg)
    assert msg.count("\n") <= 3, "more than a short message: %r" % msg


def refused_everywhere(bad, obj, cause, diff_exit):
    d = os.path.dirname(bad)
    p = run("inspect", bad, check=2)
    check_message(p, bad, obj, cause)
    out = os.path.join(d, "out-replay.h5")
    p = run("replay", bad, "--from", "save_ctx", "--impl", "split", "-o", out, check=2)
    check_message(p, bad, obj, cause)
    out = os.path.join(d, "out-merge.h5")
    p = run("merge", "-o", out, bad, GOOD, check=2)
    check_message(p, bad, obj, cause)
    if diff_exit is not None:
        p = run("diff", GOOD, bad, check=diff_exit)
        assert bad in p.stderr, p.stderr
    left = leftovers(d)
    assert not left, "left behind: %s" % left
    # a valid file next to it still passes
    neighbour = os.path.join(d, "neighbour.h5")
    shutil.copy(GOOD, neighbour)
    run("inspect", neighbour, check=0)


def mutant_test(name, make, obj, cause, diff_exit):
    def fn():
        d = path("m-" + name)
        os.mkdir(d)
        bad = os.path.join(d, name + ".h5")
        make(bad)
        refused_everywhere(bad, obj, cause, diff_exit)
    return fn


# A dataset where a state group belongs (cases/<id>/forward as an int32
# dataset with a good digest): the validator must refuse it.
TODO = {}
RUNFILE_MUTANTS.append(("dataset_for_group", edit(replace_with_dataset(F32 + "/forward")),
                        r"forward", r"group|dataset|expected", None))

for _name, _make, _obj, _cause, _diff in RUNFILE_MUTANTS:
    case("run file %s: exit 2 naming file, object and cause; nothing written" % _name)(
        mutant_test(_name, _make, _obj, _cause, _diff))


@case("committed bad run files (tests/data/bad/*.h5, libhdf5 crashers): "
      "inspect, diff, replay, merge, verify exit 2")
def _():
    files = sorted(glob.glob(os.path.join(BAD_DIR, "*.h5")))
    assert files, "no *.h5 in %s" % BAD_DIR
    for src in files:
        d = path("c-" + os.path.basename(src))
        os.mkdir(d)
        bad = os.path.join(d, os.path.basename(src))
        shutil.copy(src, bad)
        for args in (["inspect", bad], ["diff", bad, GOOD], ["diff", GOOD, bad],
                     ["replay", bad, "--from", "save_ctx", "--impl", "split", "-o",
                      os.path.join(d, "out.h5")],
                     ["merge", "-o", os.path.join(d, "out.h5"), bad, GOOD]):
            p = run(*args, check=2)
            assert bad in p.stderr, p.stderr
            assert not leftovers(d), leftovers(d)
        # ... and as the golden file verify reads (DIR/<platform key>.h5)
        fx = os.path.join(d, "fixtures")
        os.mkdir(fx)
        golden = os.path.join(fx, "cpu-math-1.h5")
        shutil.copy(src, golden)
        p = run("verify", "--cases", SPEC, "--backend", "cpu", "--fixtures", fx, check=2)
        assert golden in p.stderr, p.stderr


@case("NaN and inf inputs are valid data: inspect 0, replay runs and propagates them")
def _():
    d = path("nan")
    os.mkdir(d)
    f_nan = os.path.join(d, "nan.h5")
    shutil.copy(GOOD, f_nan)
    with h5py.File(f_nan, "r+") as f:
        for role in ("q", "k"):
            ds = f[F32 + "/inputs/" + role]
            a = ds[()].copy()
            a.flat[0] = np.nan
            a.flat[1] = np.inf
            ds[...] = a
            redigest(ds)
            # save_ctx holds the same tensors; keep them consistent
            sc = f[F32 + "/save_ctx/" + role]
            sc[...] = a
            redigest(sc)
    run("inspect", f_nan, check=0)
    out = os.path.join(d, "replayed.h5")
    run("replay", f_nan, "--from", "save_ctx", "--impl", "legacy", "--backend", "cpu", "-o", out,
        check=0)
    with h5py.File(out, "r") as f:
        dq = f[F32 + "/backward/dq"][()]
        assert not np.isfinite(dq).all(), "NaN input gave finite gradients only"
        assert np.isnan(f[F32 + "/save_ctx/q"][()].flat[0])


@case("a missing file and a directory: exit 2 naming them")
def _():
    for bad in (path("does-not-exist.h5"), TMP):
        p = run("inspect", bad, check=2)
        assert bad in p.stderr, p.stderr
        p = run("replay", bad, "--from", "save_ctx", "--impl", "split", "-o",
                path("out-missing.h5"), check=2)
        assert bad in p.stderr, p.stderr
    assert not os.path.exists(path("out-missing.h5"))


@case("replay onto an existing target that fails leaves the old target byte-identical")
def _():
    d = path("keep")
    os.mkdir(d)
    target = os.path.join(d, "target.h5")
    shutil.copy(GOOD, target)
    before = open(target, "rb").read()
    bad = os.path.join(d, "bad.h5")
    edit(set_attr("/", "schema", "fattn-run/2"))(bad)
    run("replay", bad, "--from", "save_ctx", "--impl", "split", "-o", target, check=2)
    run("merge", "-o", target, bad, check=2)
    assert open(target, "rb").read() == before
    assert not [n for n in os.listdir(d) if ".tmp-" in n]


# ---- case specs ----------------------------------------------------------------

# file in BAD_DIR: (regex the message must match, besides the file name)
SPEC_CORPUS = {
    "spec-not-json.json": r"line|JSON|parse",
    "spec-not-array.json": r"array",
    "spec-unknown-key.json": r"'bogus'",
    "spec-wrong-type.json": r"key 'b'.*integer",
    "spec-duplicate-id.json": r"duplicate",
    "spec-duplicate-key.json": r"duplicate|'h'",
    "spec-missing-key.json": r"'d_qk'|missing",
    "spec-bad-id.json": r"id",
    "spec-b-too-large.json": r"'b'",
    "spec-s-too-large.json": r"'sq'",
    "spec-negative-seqlens.json": r"seqlens_q",
    "spec-seqlens-too-long.json": r"seqlens_kv",
    "spec-seqlens-not-list.json": r"seqlens_q",
    "spec-dropout-one.json": r"dropout_p",
    "spec-window-wrong.json": r"window",
    "spec-hg-not-divisor.json": r"hg",
    "spec-overflow.json": r"overflow|size",
    "spec-nan-scale.json": r"attn_scale|NaN|parse|JSON",
    "spec-unknown-layout.json": r"layout",
}


@case("every spec of tests/data/bad is listed here (and every listed one exists)")
def _():
    have = {os.path.basename(p) for p in glob.glob(os.path.join(BAD_DIR, "spec-*.json"))}
    assert have == set(SPEC_CORPUS) | set(SPEC_RUN_REFUSALS), sorted(
        have ^ (set(SPEC_CORPUS) | set(SPEC_RUN_REFUSALS)))


def spec_test(fname, cause):
    def fn():
        spec = os.path.join(BAD_DIR, fname)
        d = path("s-" + fname)
        os.mkdir(d)
        p = run("cases", "--cases", spec, check=2)
        assert spec in p.stderr and re.search(cause, p.stderr), p.stderr
        assert p.stdout == "", p.stdout
        out = os.path.join(d, "out.h5")
        p = run("run", "--cases", spec, "-o", out, check=2)
        assert spec in p.stderr and re.search(cause, p.stderr), p.stderr
        gd = os.path.join(d, "out-golden")
        p = run("golden", "--cases", spec, "-o", gd, check=2)
        assert spec in p.stderr, p.stderr
        assert not os.path.exists(gd) or not os.listdir(gd), os.listdir(gd)
        p = run("verify", "--cases", spec, "--fixtures", d, check=2)
        assert spec in p.stderr, p.stderr
        assert not leftovers(d) or leftovers(d) == ["out-golden"], leftovers(d)
    return fn


for _f, _c in sorted(SPEC_CORPUS.items()):
    case("spec %s: refused by the parser, exit 2 naming file, case and key" % _f)(
        spec_test(_f, _c))

# Specs the parser accepts but run must refuse (file: cause in the message).
SPEC_RUN_REFUSALS = {
    # 65536 x 2^24 x ... : terabytes; refused by --max-memory before allocating
    "spec-hostile-size.json": r"--max-memory",
    # TE refuses d_qk = 4 (head_dim rule): an errored case
    "spec-unsupported-headdim.json": r"head_dim",
}


def run_refusal_test(fname, cause):
    def fn():
        spec = os.path.join(BAD_DIR, fname)
        d = path("r-" + fname)
        os.mkdir(d)
        out = os.path.join(d, "out.h5")
        t0 = time.time()
        p = run("run", "--backend", "cpu", "--cases", spec, "-o", out, check=2)
        assert re.search(cause, p.stderr), p.stderr
        assert time.time() - t0 < 60, "took %.0f s" % (time.time() - t0)
        assert not leftovers(d), leftovers(d)
        # the valid tiny spec still runs in the same directory
        run("run", "--backend", "cpu", "--cases", SPEC, "-o", os.path.join(d, "fine.h5"), check=0)
    return fn


for _f, _c in sorted(SPEC_RUN_REFUSALS.items()):
    case("spec %s: accepted by the parser, run refuses it, exit 2, nothing written" % _f)(
        run_refusal_test(_f, _c))


@case("--max-memory refuses a case above it before allocating (tiny limit, valid spec)")
def _():
    d = path("maxmem")
    os.mkdir(d)
    p = run("run", "--backend", "cpu", "--cases", SPEC, "--max-memory", "4096", "-o",
            os.path.join(d, "out.h5"), check=2)
    assert "--max-memory" in p.stderr and "r.bshd.causal.f32" in p.stderr, p.stderr
    assert not leftovers(d), leftovers(d)


# ---- faults ------------------------------------------------------------------

@case("disk full (RLIMIT_FSIZE) during run -o: exit 2 naming the cause, old target intact, "
      "no temp file")
def _():
    d = path("fsize")
    os.mkdir(d)
    target = os.path.join(d, "target.h5")
    with open(target, "wb") as f:
        f.write(b"OLD TARGET\n")
    size = os.path.getsize(GOOD)
    for limit in (0, 4096, size // 2, size - 512):
        p = run("run", "--backend", "cpu", "--cases", SPEC, "-o", target, fsize=limit, check=2)
        assert target in p.stderr or os.path.basename(target) in p.stderr, p.stderr
        assert re.search(r"File too large|No space|write|flush|close|I/O|HDF5", p.stderr,
                         re.I), p.stderr
        assert open(target, "rb").read() == b"OLD TARGET\n"
        stray = [n for n in os.listdir(d) if n != "target.h5"]
        assert not stray, "left behind at FSIZE %d: %s" % (limit, stray)
    # and without the limit the same command replaces it
    run("run", "--backend", "cpu", "--cases", SPEC, "-o", target, check=0)
    run("inspect", target, check=0)


@case("SIGKILL mid-write: the target is the old file or a complete new one, never partial")
def _():
    d = path("kill")
    os.mkdir(d)
    target = os.path.join(d, "target.h5")
    shutil.copy(GOOD, target)
    old = open(target, "rb").read()
    # the default matrix takes a moment; kill it at spread-out points
    t0 = time.time()
    run("run", "--backend", "cpu", "--filter", "*.bf16", "-o", os.path.join(d, "timing.h5"),
        check=0)
    full = time.time() - t0
    os.unlink(os.path.join(d, "timing.h5"))
    outcomes = set()
    for frac in (0.1, 0.3, 0.5, 0.7, 0.85, 0.95, 1.0):
        shutil.copy(GOOD, target)
        proc = subprocess.Popen([FATTN, "run", "--backend", "cpu", "--filter", "*.bf16", "-o",
                                 target],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=limits())
        time.sleep(full * frac)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        data = open(target, "rb").read()
        if data == old:
            outcomes.add("old")
        else:
            # renamed already: it must be the complete, valid new file
            run("inspect", target, check=0)
            outcomes.add("new")
        # a killed process cannot remove its temporary file; it is named
        # .<base>.tmp-<pid>-<n> and ignored by everything (docs/reliability.md)
        for n in os.listdir(d):
            if n != "target.h5":
                assert re.match(r"^\.target\.h5\.tmp-\d+-\d+$", n), n
                os.unlink(os.path.join(d, n))
    assert "old" in outcomes, outcomes


def alloc_fault_sweep(args, what, d, expect_case=True):
    """FATTN_TEST_FAIL_ALLOC=1,2,... until the command succeeds: each
    earlier N must fail cleanly."""
    target = os.path.join(d, "target.h5")
    with open(target, "wb") as f:
        f.write(b"OLD\n")
    n = 1
    while True:
        p = run(*(args + ["-o", target]), env={"FATTN_TEST_FAIL_ALLOC": str(n)})
        if p.returncode == 0:
            break
        assert p.returncode == 2, "%s N=%d: exit %d\n%s" % (what, n, p.returncode, p.stderr)
        assert "cannot allocate" in p.stderr and "FATTN_TEST_FAIL_ALLOC" in p.stderr, p.stderr
        if expect_case:
            assert re.search(r"case r\.[a-z0-9.]+[ :]", p.stderr), p.stderr
        assert open(target, "rb").read() == b"OLD\n", "%s N=%d replaced the target" % (what, n)
        assert sorted(os.listdir(d)) == ["target.h5"], os.listdir(d)
        n += 1
        assert n < 5000, "no end to the allocations"
    run("inspect", target, check=0)
    return n - 1


@case("every fattn_tensor_alloc of run failing in turn: exit 2, named case and cause, "
      "nothing written")
def _():
    if not TESTING:
        return NO_HOOK
    d = path("nomem-run")
    os.mkdir(d)
    n = alloc_fault_sweep(["run", "--backend", "cpu", "--cases", SPEC], "run", d)
    assert n >= 10, n


@case("every fattn_tensor_alloc of replay failing in turn: exit 2, nothing written")
def _():
    if not TESTING:
        return NO_HOOK
    d = path("nomem-replay")
    os.mkdir(d)
    n = alloc_fault_sweep(["replay", GOOD, "--from", "save_ctx", "--impl", "split",
                           "--backend", "cpu"], "replay", d)
    assert n >= 5, n


def main():
    setup()
    failed = tap.run(RESULTS, todo=lambda name: next(
        (t for k, t in TODO.items() if " %s:" % k in name), None))
    if not failed:
        shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
