#!/usr/bin/python3
"""Tests of tools/torch/torch_reference.py and tools/torch/torch_table.py (docs/torch.md).

usage: test_torch_reference.py TOOLS_DIR FATTN_EXE XXH128_EXE SPEC_JSON   (prints TAP)

Everything here runs without torch and without a GPU: --help, --make-cases
and its classification (over `fattn cases --resolved --json`), bad input, the
digest implementation the reader falls back to and the run-file writer
(tools/python/fattn_runfile.py, through `fattn write-tree`). The tool is run with a `torch` module on its path that refuses to be
imported, so nothing that must work without torch can import it by accident.
Where the interpreter has torch, one more test runs the CPU development path
end to end; otherwise it is reported as skipped. Needs h5py and numpy
(Debian python3-h5py); without them the test skips, except under CI=true.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

h5py, np = tap.need_modules("h5py", "numpy")

TOOLS, FATTN, XXH, SPEC = sys.argv[1:5]
# every case of the default matrix is in the report
with open(SPEC) as _f:
    N_CASES = len(json.load(_f))
TOOL = os.path.join(TOOLS, "torch_reference.py")
TABLE = os.path.join(TOOLS, "torch_table.py")
TMP = tempfile.mkdtemp(prefix="fattn-torch-")
NOTORCH = os.path.join(TMP, "notorch")
os.makedirs(NOTORCH)
with open(os.path.join(NOTORCH, "torch.py"), "w") as f:
    f.write("raise ImportError('torch must not be imported here')\n")
sys.path.insert(0, TOOLS)
os.environ["FATTN"] = FATTN  # the fattn the tools resolve specs and write files with
import torch_reference as tr  # noqa: E402
import fattn_runfile as fr  # noqa: E402  (tools/python/, put on the path by torch_reference)

RESULTS = tap.Tests()
ENV = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")

# The default matrix's expressible subset (docs/torch.md), and cases it leaves out.
EXPRESSIBLE = [
    "layout.sbhd_sbhd_sbhd.no_mask.f16", "layout.bshd_bshd_bshd.causal.bf16",
    "layout.bhsd_bhsd_bhsd.no_mask.bf16", "layout.sb3hd.causal.f16", "layout.sbh3d.no_mask.bf16",
    "layout.sbhd_sb2hd.no_mask.f16", "layout.sbhd_bshd_bshd.causal.f16",
    "mask.causal.sq_gt_skv.f16", "bias.post_scale_bias.1hss.f16",
    "bias.post_scale_bias.b1ss.causal.bf16", "bias.post_scale_bias.bhss.f16",
    "bias.post_scale_bias.111s.inference.f16", "gqa.h16_hg2.bf16", "dims.dqk32_dv16.bf16",
    "dims.dqk24_dv40.causal.f16", "inference.no_mask.f16",
    # inference: the engines drop only while training (lib/core/engine.c,
    # apply_dropout), so SDPA without dropout matches however large p is
    "inference.raw_dropout.p0.2.f16",
    # raw_func_args: None scale resolved by the front ends to TE's default
    "raw.none.scale.dqk24_dv40.causal.f16",
    "edge.sq1.no_mask.bf16",
    "edge.skv67.causal.bf16", "edge.skv130.no_mask.f16", "flags.attn_scale.f16",
    "flags.nondeterministic.bf16", "scale.inexact.0.0883883.bf16",
    # raw_func_args: causal with the window (-1, -1), top-left, sq < skv
    "raw.window_m1m1.causal.f16",
    "dims.d512.inference.bf16", "dims.dqk512_dv64.causal.inference.f16",
    # a bias without grad: made an inference case, as every post_scale_bias one
    "route.bias_no_grad.11ss.bf16",
    # eval mode with dropout configured: FusedAttention passes 0 (backends.py:2603)
    "mode.eval.dropout_p0.2.f16",
]
LEFT_OUT = {
    "layout.thd_thd_thd.padding.bf16": "THD layout",
    "layout.bs3hd.padding.f16": "padding mask",
    "mask.causal_bottom_right.bf16": "bottom-right causal with sq 16 != skv 40",
    "mqa.h4_hg1.causal_bottom_right.f16": "is_causal is top-left",
    "window.causal.bf16": "sliding window (2, 0)",
    "window.no_mask.top_left.f16": "sliding window (3, 2)",
    "bias.alibi.causal.bf16": "ALiBi",
    "dropout.p0.1.f16": "dropout",
    "softmax.off_by_one.f16": "off-by-one softmax",
    "softmax.learnable.causal.bf16": "learnable softmax",
    "max_logit.no_mask.bf16": "return_max_logit",
}


def tool(*args, torch=False, script=TOOL):
    env = dict(ENV)
    if not torch:
        env["PYTHONPATH"] = NOTORCH + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, script] + list(args), capture_output=True,
                          text=True, env=env)


def fattn(*args, check=None):
    p = subprocess.run([FATTN] + list(args), capture_output=True, text=True, env=ENV)
    if check is not None and p.returncode != check:
        raise AssertionError("fattn %s: exit %d, want %d\n%s%s" % (
            " ".join(args), p.returncode, check, p.stdout[-2000:], p.stderr))
    return p


def path(name):
    return os.path.join(TMP, name)


def expect(p, rc, *words):
    out = p.stdout + p.stderr
    assert p.returncode == rc, "exit %d, want %d\n%s" % (p.returncode, rc, out[-3000:])
    for w in words:
        assert w in out, "%r not in output:\n%s" % (w, out[-3000:])


case = RESULTS.case


def made_cases():
    """--make-cases on the default matrix, once; its output and report."""
    if not os.path.exists(path("subset.json")):
        p = tool("--make-cases", SPEC, "-o", path("subset.json"), "--report",
                 path("subset-report.json"))
        expect(p, 0, "%d of %d cases expressible" % (len(EXPRESSIBLE), N_CASES))
    with open(path("subset.json")) as f:
        subset = json.load(f)
    with open(path("subset-report.json")) as f:
        report = json.load(f)
    return subset, report


def subset_run():
    """A CPU fattn run of the expressible subset."""
    if not os.path.exists(path("run.h5")):
        made_cases()
        fattn("run", "--backend", "cpu", "--cases", path("subset.json"), "-o", path("run.h5"),
              check=0)
    return path("run.h5")


@case("--help works without torch; the development options stay hidden")
def _():
    p = tool("--help")
    expect(p, 0, "usage: torch_reference.py", "--make-cases", "--report", "fattn diff")
    assert "--sdpa-backend" not in p.stdout and "--device" not in p.stdout
    expect(tool("--help", script=TABLE), 0, "usage: torch_table.py", "--report")


@case("--make-cases on the default matrix: the expressible subset, deterministic false")
def _():
    subset, report = made_cases()
    ids = [c["id"] for c in subset]
    assert ids == EXPRESSIBLE, ids
    assert all(c["deterministic"] is False for c in subset)
    with open(SPEC) as f:
        source = {c["id"]: c for c in json.load(f)}
    for c in subset:  # nothing else changed, except training bias cases made inference
        changed = {k for k in c if source[c["id"]].get(k, "unset") != c[k]}
        allowed = {"deterministic"}
        if c["id"] in ("bias.post_scale_bias.1hss.f16", "bias.post_scale_bias.b1ss.causal.bf16",
                       "bias.post_scale_bias.bhss.f16", "route.bias_no_grad.11ss.bf16"):
            assert c["is_training"] is False, c
            allowed.add("is_training")
        assert changed <= allowed, (c["id"], changed)
    p = fattn("cases", "--cases", path("subset.json"), check=0)
    assert [l.split("\t")[0] for l in p.stdout.splitlines()] == EXPRESSIBLE
    assert all("nondeterministic" in l for l in p.stdout.splitlines())
    entries = {e["id"]: e for e in report["cases"]}
    assert len(entries) == N_CASES and [e["id"] for e in report["cases"]] == sorted(entries)
    for cid in EXPRESSIBLE:
        assert entries[cid]["expressible"] is True, entries[cid]
    for cid, why in LEFT_OUT.items():
        assert cid not in ids
        e = entries[cid]
        assert e["expressible"] is False and why in e["reason"], e


@case("classification: each rule with its reason, and the cases that stay expressible")
def _():
    base = {"b": 1, "h": 2, "sq": 16, "d_qk": 16, "dtype": "float16", "layout": "bshd_bshd_bshd"}
    rows = [
        ("f32", {"dtype": "float32"}, False, "float32 io"),
        ("paged", {"layout": "paged_kv_bshd_bshd_bshd", "mask": "padding", "is_training": False,
                   "paged": {"page_size": 4}}, False, "paged KV"),
        ("thd", {"layout": "thd_thd_thd", "mask": "padding"}, False, "THD layout"),
        ("pad", {"mask": "padding_causal"}, False, "padding_causal mask"),
        ("pre", {"bias": "pre_scale_bias"}, False, "pre_scale_bias"),
        ("alibi", {"bias": "alibi", "mask": "causal"}, False, "ALiBi"),
        ("sink", {"softmax": "learnable"}, False, "learnable softmax"),
        ("drop", {"dropout_p": 0.25}, False, "dropout 0.25"),
        ("maxlogit", {"return_max_logit": True}, False, "return_max_logit"),
        ("br", {"mask": "causal_bottom_right", "skv": 24}, False, "top-left"),
        ("swa", {"mask": "causal", "window": [4, 0]}, False, "sliding window (4, 0)"),
        ("drop_inf", {"dropout_p": 0.25, "is_training": False}, True, None),
        ("br_square", {"mask": "causal_bottom_right"}, True, None),
        ("win_noop", {"window": [-1, 0]}, True, None),
        ("causal_noop", {"mask": "causal", "window": [-1, -1]}, True, None),
        ("gqa_dv", {"h": 4, "hg": 1, "d_v": 8, "skv": 40}, True, None),
        ("bias_train", {"bias": "post_scale_bias", "bias_shape": "bhss"}, True, "dBias"),
    ]
    specs = [dict(base, id=r[0], **r[1]) for r in rows]
    with open(path("synthetic.json"), "w") as f:
        json.dump(specs, f)
    p = tool("--make-cases", path("synthetic.json"), "-o", path("synthetic-out.json"),
             "--report", path("synthetic-report.json"))
    expect(p, 0, "not expressible: float32 io")
    with open(path("synthetic-report.json")) as f:
        got = {e["id"]: e for e in json.load(f)["cases"]}
    for cid, _, expressible, why in rows:
        assert got[cid]["expressible"] is expressible, got[cid]
        if why:
            assert why in (got[cid]["reason"] or ""), got[cid]
    assert got["bias_train"]["backward"] is False
    assert got["bias_train"]["changed"] == {"deterministic": False, "is_training": False}
    assert got["gqa_dv"]["backward"] is True
    # the verdicts tr.classify gives directly, on fattn's resolved model of a spec
    r = fr.resolve_specs([dict(base, id="x"), dict(base, id="y", mask="causal_bottom_right")])
    assert r[0]["spec"]["deterministic"] is True and r[0]["spec"]["hg"] == 2
    assert tr.classify(r[0]).backward_reason.startswith("deterministic backward")
    v = tr.classify(r[1])
    assert v.forward and v.is_causal and not v.gqa


@case("bad spec input: exit 2 naming the file and cause, nothing written")
def _():
    out = path("never.json")
    # fattn's spec parser decides (fattn cases --resolved): its messages name the cause
    bad = {
        "notjson.json": ("[{", "string or '}' expected"),
        "object.json": ('{"id": "x"}', "expected a JSON array"),
        "unknown.json": ('[{"id": "x", "b": 1, "h": 1, "sq": 1, "d_qk": 8, "bogus": 1}]',
                         "key 'bogus': unknown key"),
        "dup.json": ('[{"id": "x", "b": 1, "h": 1, "sq": 1, "d_qk": 8},'
                     ' {"id": "x", "b": 1, "h": 1, "sq": 1, "d_qk": 8}]',
                     "key 'id': duplicate of case #1"),
        "type.json": ('[{"id": "x", "b": "1", "h": 1, "sq": 1, "d_qk": 8}]', "key 'b'"),
        "layout.json": ('[{"id": "x", "b": 1, "h": 1, "sq": 1, "d_qk": 8, "layout": "x"}]',
                        "unknown qkv_layout"),
    }
    for name, (text, why) in bad.items():
        with open(path(name), "w") as f:
            f.write(text)
        expect(tool("--make-cases", path(name), "-o", out), 2, path(name), why)
        assert not os.path.exists(out), name
    expect(tool("--make-cases", path("missing.json"), "-o", out), 2, path("missing.json"),
           "cannot open")
    expect(tool("--make-cases", SPEC, "-o", out, "--fattn", path("nofattn")), 2,
           path("nofattn"), "not an executable fattn")
    expect(tool("--make-cases", SPEC, "-o", path("nodir/out.json")), 2, "nodir")
    expect(tool("--make-cases", SPEC, "-o", "/dev/null"), 2, "/dev/null",
           "not a regular file")
    expect(tool("--make-cases", SPEC, "-o", TMP), 2, "not a regular file")
    expect(tool("-o", out), 2, "RUN.h5 is required")
    expect(tool("--make-cases", SPEC, "-o", SPEC), 2, "would replace its input")
    assert not os.path.exists(out)


@case("bad run file: exit 2 naming the file, case and cause, before torch is needed")
def _():
    run = subset_run()
    out = path("never.h5")
    with open(path("text.h5"), "w") as f:
        f.write("not hdf5\n")
    with h5py.File(path("noschema.h5"), "w") as f:
        f.create_group("cases")
    shutil.copy(run, path("corrupt.h5"))
    with h5py.File(path("corrupt.h5"), "r+") as f:
        ds = f["cases/gqa.h16_hg2.bf16/inputs/q"]
        data = ds[()]
        data.flat[0] ^= 1
        ds[...] = data  # the digest attribute is left as it was
    shutil.copy(run, path("nospec.h5"))
    with h5py.File(path("nospec.h5"), "r+") as f:
        del f["cases/inference.no_mask.f16"].attrs["spec"]
    shutil.copy(run, path("noq.h5"))
    with h5py.File(path("noq.h5"), "r+") as f:
        del f["cases/edge.sq1.no_mask.bf16/inputs/q"]
    for name, words in (("text.h5", ["not a readable HDF5 file"]),
                        ("noschema.h5", ["not a fattn run file"]),
                        ("corrupt.h5", ["/cases/gqa.h16_hg2.bf16/inputs/q", "corrupt dataset"]),
                        ("nospec.h5", ["inference.no_mask.f16", "no spec attribute"]),
                        ("noq.h5", ["edge.sq1.no_mask.bf16", "inputs/q is missing"]),
                        ("absent.h5", ["absent.h5"])):
        expect(tool(path(name), "-o", out), 2, path(name), *words)
        assert not os.path.exists(out), name
    leftovers = [n for n in os.listdir(TMP) if n.startswith(".never")]
    assert not leftovers, leftovers


@case("load_tree: a gzip dataset declaring more than the bound is refused before it is read")
def _():
    run = subset_run()
    bomb = path("bomb.h5")
    shutil.copy(run, bomb)
    where = "cases/inference.no_mask.f16/inputs/bomb"
    with h5py.File(bomb, "r+") as f:
        # 200 MB declared; one chunk written, the rest the fill value: a file
        # of kilobytes that inflates to the declared size when read
        ds = f.create_dataset(where, shape=(25 << 20,), dtype="f8", chunks=(1 << 16,),
                              compression="gzip", fillvalue=0.0)
        ds[: 1 << 16] = 1.0
    assert os.path.getsize(bomb) < os.path.getsize(run) + (1 << 20)
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.time()
    try:
        fr.load_tree(bomb, max_bytes=100 << 20)
        raise AssertionError("load_tree read a file declaring 200 MB under a 100 MB bound")
    except fr.InputError as e:
        msg = str(e)
    for w in (bomb, "/" + where, "209715200 bytes", "deflate", "refused before reading"):
        assert w in msg, (w, msg)
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grew < 50 << 10 and time.time() - t0 < 10, "peak grew %d KiB" % grew
    # the default bound is half the memory: a dataset declaring 2^40 bytes
    # (no chunk written) is refused by the tool itself, exit 2
    huge = path("huge.h5")
    shutil.copy(run, huge)
    with h5py.File(huge, "r+") as f:
        f.create_dataset(where, shape=(1 << 37,), dtype="f8", chunks=(1 << 20,),
                         compression="gzip")
    out = path("never.h5")
    expect(tool(huge, "-o", out), 2, huge, "/" + where, "refused before reading")
    assert not os.path.exists(out)
    # a filter that is not known to stay within the declared shape (307:
    # bzip2, a plugin) is refused whatever the size
    plugin = path("plugin.h5")
    shutil.copy(run, plugin)
    with h5py.File(plugin, "r+") as f:
        f.create_dataset(where, shape=(4,), dtype="f8", chunks=(4,), compression=307,
                         allow_unknown_filter=True)
    try:
        fr.load_tree(plugin)
        raise AssertionError("load_tree accepted a dataset with filter 307")
    except fr.InputError as e:
        assert "filter 307" in str(e) and "/" + where in str(e), str(e)
    # and a file within the bound still loads
    fr.load_tree(run, max_bytes=100 << 20)


@case("a valid run file without torch: exit 2 'torch is not importable', nothing written")
def _():
    out = path("never.h5")
    expect(tool(subset_run(), "-o", out), 2, "torch is not importable")
    assert not os.path.exists(out)


@case("digests: the reader's plain XXH3-128 equals libxxhash's (tests/xxh128) at every length")
def _():
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 3, 4, 5, 8, 9, 15, 16, 17, 31, 32, 33, 64, 65, 96, 97, 127, 128, 129,
              160, 161, 200, 239, 240, 241, 255, 256, 1023, 1024, 1025, 1087, 2048, 5000,
              65536 + 13):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        want = subprocess.run([XXH], input=data, capture_output=True, check=True)
        low, high = fr.xxh3_128_plain(data)
        got = "xxh3-128:%016x%016x" % (high, low)
        assert got == want.stdout.decode().strip(), (n, got, want.stdout)


@case("the writer: a run file read and written back is valid, equal, byte-reproducible")
def _():
    run = subset_run()
    saved = fr._HASHER
    fr._HASHER = (fr.xxh3_128_plain, "plain")  # the fallback checks the digests read here
    try:
        tree = fr.load_tree(run)
        fr.write_tree(path("copy1.h5"), tree)  # through fattn write-tree
        time.sleep(1.1)  # a timestamp anywhere in the file would now differ
        os.makedirs(path("sub"), exist_ok=True)
        fr.write_tree(path("sub/copy2.h5"), fr.load_tree(run))
    finally:
        fr._HASHER = saved
    fattn("inspect", path("copy1.h5"), check=0)
    p = fattn("diff", run, path("copy1.h5"), "--json", path("copy.json"), check=0)
    assert "same platform" in p.stdout, p.stdout[:2000]
    with open(path("copy1.h5"), "rb") as a, open(path("sub/copy2.h5"), "rb") as b:
        assert a.read() == b.read(), "two writes differ"
    with open(run, "rb") as a, open(path("copy1.h5"), "rb") as b:
        assert a.read() == b.read(), "fattn's writer wrote the same tree differently"
    with h5py.File(path("copy1.h5"), "r") as f:
        ds = f["cases/layout.bshd_bshd_bshd.causal.bf16/forward/out"]
        assert ds.dtype == np.uint16 and ds.attrs["dtype"] == "bfloat16"


@case("torch_table: a row for every case of the matrix, bitwise cells and reasons")
def _():
    subset_run()
    if not os.path.exists(path("copy.json")):
        raise AssertionError("needs the writer test's diff JSON")
    p = tool(path("copy.json"), "-o", path("table.md"), script=TABLE)
    expect(p, 0)
    with open(path("table.md")) as f:
        text = f.read()
    rows = [l for l in text.splitlines() if l.startswith("| `")]
    assert len(rows) == N_CASES, len(rows)
    assert "{0} expressible, {0} of them compared, {0} bitwise".format(len(EXPRESSIBLE)) in text, text[:400]
    row = {l.split("`")[1]: l for l in rows}
    assert row["gqa.h16_hg2.bf16"].count("| bitwise") == 5, row["gqa.h16_hg2.bf16"]
    assert "— (inference)" in row["bias.post_scale_bias.1hss.f16"]
    assert "run as inference: post_scale_bias backward" in row["bias.post_scale_bias.1hss.f16"]
    assert "not expressible: ALiBi" in row["bias.alibi.causal.bf16"]
    with open(path("notdiff.json"), "w") as f:
        f.write("{}")
    expect(tool(path("notdiff.json"), script=TABLE), 2, "not a fattn-diff/1 report")


@case("with torch: the CPU development path end to end, fattn diff --mode tol passes")
def _():
    if importlib.util.find_spec("torch") is None:
        return "SKIP torch not installed"
    run = subset_run()
    p = tool(run, "-o", path("torch.h5"), "--report", path("torch-report.json"),
             "--device", "cpu", "--sdpa-backend", "math", torch=True)
    expect(p, 0, "{0} of {0} cases expressible, {0} written".format(len(EXPRESSIBLE)))
    fattn("inspect", path("torch.h5"), check=0)
    fattn("diff", "--mode", "tol", run, path("torch.h5"), check=0)
    with h5py.File(path("torch.h5"), "r") as f:
        assert f.attrs["impl"] == "torch" and f.attrs["backend"] == "torch-math"
        assert "prov_torch_version" in f.attrs
    return None


def main():
    failed = tap.run(RESULTS)
    shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
