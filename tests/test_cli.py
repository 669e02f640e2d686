#!/usr/bin/python3
"""End-to-end tests of the fattn CLI (cases, run, replay, inspect, merge).

usage: test_cli.py FATTN_EXE        (prints TAP)

Run files are read back with h5py; two files are "equal" when every group,
dataset (dtype, shape, bytes) and attribute outside `_impl` groups matches
and only the provenance root attributes differ. Needs h5py and numpy
(Debian python3-h5py); without them the test skips, except under CI=true.
"""
import os
import subprocess
import sys
import tempfile
import time
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

h5py, np = tap.need_modules("h5py", "numpy")

FATTN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="fattn-cli-")
RESULTS = tap.Tests()


def run(*args, env=None, check=None, cwd=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([FATTN] + list(args), capture_output=True, text=True, env=e, cwd=cwd)
    if check is not None and p.returncode != check:
        raise AssertionError("fattn %s: exit %d, want %d\n%s" % (" ".join(args), p.returncode,
                                                                 check, p.stderr))
    return p


def path(name):
    return os.path.join(TMP, name)


# The test engine variants exist only in a build with -Dtesting=true (meson
# says which; run by hand, the build is assumed to have them).
VARIANTS_SKIP = None if os.environ.get("FATTN_BUILD_TESTING", "1") == "1" else \
    "SKIP test engine variants need a build with -Dtesting=true"


def tree(fname, skip_root_attrs=True):
    """Everything counted: {path: repr} outside _impl, root attrs excluded."""
    out = {}
    with h5py.File(fname, "r") as f:
        def visit(name, obj):
            if "_impl" in name.split("/"):
                return
            # attrs_digest is derived (it covers _impl attributes too): the
            # attributes it covers are compared themselves
            attrs = sorted((k, repr(v)) for k, v in obj.attrs.items() if k != "attrs_digest")
            if isinstance(obj, h5py.Dataset):
                out[name] = repr((obj.dtype.str, obj.shape, obj[()].tobytes(), attrs))
            else:
                out[name] = repr(attrs)
        f.visititems(visit)
        if not skip_root_attrs:
            out["/"] = repr(sorted((k, repr(v)) for k, v in f.attrs.items()))
    return out


def assert_same(a, b):
    ta, tb = tree(a), tree(b)
    missing = sorted(set(ta) ^ set(tb))
    assert not missing, "objects in one file only: %s" % missing[:5]
    bad = [k for k in ta if ta[k] != tb[k]]
    assert not bad, "differing objects: %s" % bad[:5]
    return len(ta)


case = RESULTS.case


@case("cases lists the default matrix, id TAB summary")
def _():
    p = run("cases", check=0)
    lines = p.stdout.splitlines()
    assert len(lines) >= 40, len(lines)
    ids = [l.split("\t")[0] for l in lines]
    assert len(set(ids)) == len(ids)
    assert all("\t" in l for l in lines)
    assert p.stderr == ""


@case("--te-rules: cases notes what DotProductAttention would route elsewhere, run records "
      "the selection, golden and verify take it, an unknown release is exit 2")
def _():
    p = run("cases", check=0)
    notes = dict(l.split("\t", 1) for l in p.stdout.splitlines())
    sink, bias = notes["softmax.off_by_one.f16"], notes["bias.post_scale_bias.1hss.f16"]
    assert sink.endswith(" [DPA 2.20 would not route here: rule det_sink, utils.py:1761]"), sink
    assert bias.endswith("[DPA 2.20 would not route here: rule det_bias_grad, "
                         "utils.py:1781]"), bias
    # a plain case and a case FusedAttnFunc refuses get no note
    assert "DPA" not in notes["layout.sbhd_sbhd_sbhd.no_mask.f16"]
    assert "DPA" not in notes["refuse.bias_sink_quirk.bf16"]
    p = run("cases", "--te-rules", "2.19", "--filter", "softmax.off_by_one.f16", check=0)
    assert p.stdout.rstrip().endswith("[DPA 2.19 would not route here: rule det_sink, "
                                      "utils.py:1534]"), p.stdout
    # the same spec, not deterministic: DotProductAttention would choose FusedAttention
    nd = os.path.join(TMP, "nondet.json")
    with open(nd, "w") as f:
        f.write('[{"id": "s", "b": 1, "h": 2, "sq": 16, "d_qk": 16, "softmax": "off-by-one", '
                '"deterministic": false}]')
    p = run("cases", "--cases", nd, check=0)
    assert "DPA" not in p.stdout, p.stdout
    # a bias that needs no grad (TE reads core_attention_bias.requires_grad): no
    # det_bias_grad, nor bias_111s_grad for a [1,1,1,skv] one; with grad, both
    nb = os.path.join(TMP, "bias_no_grad.json")
    with open(nb, "w") as f:
        f.write('[{"id": "g", "b": 1, "h": 2, "sq": 16, "d_qk": 16, "bias": "post_scale_bias",'
                ' "bias_shape": "111s"}, {"id": "n", "b": 1, "h": 2, "sq": 16, "d_qk": 16,'
                ' "bias": "post_scale_bias", "bias_shape": "111s", "bias_no_grad": true}]')
    notes = dict(l.split("\t", 1) for l in run("cases", "--cases", nb, check=0).stdout.splitlines())
    assert "rule det_bias_grad" in notes["g"] and "rule bias_111s_grad" in notes["g"], notes
    assert "DPA" not in notes["n"] and "bias_no_grad" in notes["n"], notes
    out = path("te_rules.h5")
    for rules, line in (("2.19", 1534), (None, 1761)):
        argv = ["run", "--backend", "cpu", "--filter", "softmax.off_by_one.f16", "-o", out]
        run(*(argv + (["--te-rules", rules] if rules else [])), check=0)
        with h5py.File(out, "r") as f:
            assert f.attrs["te_rules"] == (rules or "2.20"), dict(f.attrs)
            note = f["cases/softmax.off_by_one.f16"].attrs["prov_te_route"]
            assert note == "DPA %s would not route here: rule det_sink, utils.py:%d" % (
                rules or "2.20", line), note
    run("inspect", out, check=0)
    # a replay keeps the release its source recorded, for the cases it recomputes
    run("run", "--backend", "cpu", "--filter", "softmax.off_by_one.f16", "--te-rules", "2.19",
        "-o", out, check=0)
    rep = path("te_rules_replay.h5")
    run("replay", out, "--from", "save_ctx", "--impl", "legacy", "--backend", "cpu", "-o", rep,
        check=0)
    with h5py.File(rep, "r") as f:
        assert f.attrs["te_rules"] == "2.19", dict(f.attrs)
        note = f["cases/softmax.off_by_one.f16"].attrs["prov_te_route"]
        assert note.startswith("DPA 2.19 would not route here: rule det_sink"), note
    p = run("verify", "--backend", "cpu", "--filter", "softmax.*", "--te-rules", "2.19",
            check=0)
    assert "TE 2.19 rules: DotProductAttention would route 4 of 4 cases elsewhere" in p.stdout, \
        p.stdout
    bad_out, gdir = path("te_rules_bad.h5"), os.path.join(TMP, "te-rules-goldens")
    for argv in (["cases"], ["run", "--backend", "cpu", "-o", bad_out],
                 ["verify", "--backend", "cpu"], ["golden", "--backend", "cpu", "-o", gdir]):
        for bad in ("2.18", "2.20.2", ""):
            p = run(*(argv + ["--te-rules", bad]))
            assert p.returncode == 2, (argv, bad, p.returncode, p.stderr)
            assert "--te-rules '%s': expected one of 2.19, 2.20" % bad in p.stderr, p.stderr
            assert p.stdout == "", (argv, p.stdout)
    assert not os.path.exists(bad_out) and not os.path.exists(gdir)


@case("zero cases selected is exit 2 naming the filter or file, for verify, run, golden, cases")
def _():
    empty = os.path.join(TMP, "empty-cases.json")
    with open(empty, "w") as f:
        f.write("[]")
    out = os.path.join(TMP, "none.h5")
    gdir = os.path.join(TMP, "none-goldens")
    for argv, words in [
            (["verify", "--backend", "cpu", "--filter", "thd"], ["--filter 'thd'", "whole case ids"]),
            (["verify", "--backend", "cpu", "--strict", "--filter", "thd"], ["--filter 'thd'"]),
            (["verify", "--backend", "cpu", "--cases", empty], [empty, "holds no cases"]),
            (["run", "--backend", "cpu", "--filter", "thd", "-o", out], ["--filter 'thd'"]),
            (["run", "--backend", "cpu", "--cases", empty, "-o", out], [empty, "holds no cases"]),
            (["golden", "--backend", "cpu", "--cases", empty, "-o", gdir], [empty, "holds no cases"]),
            (["cases", "--filter", "thd"], ["--filter 'thd'"]),
            (["cases", "--cases", empty], [empty, "holds no cases"])]:
        p = run(*argv)
        assert p.returncode == 2, (argv, p.returncode, p.stdout, p.stderr)
        for w in words:
            assert w in p.stderr, (argv, w, p.stderr)
        assert "behavior-neutral: yes" not in p.stdout, (argv, p.stdout)
    assert not os.path.exists(out) and not os.path.exists(gdir)


@case("every command has --help")
def _():
    for cmd in ("cases", "run", "replay", "inspect", "merge"):
        p = run(cmd, "--help", check=0)
        assert "usage: fattn " + cmd in p.stdout, cmd


@case("legacy and split give identical trees over the default matrix")
def _():
    run("run", "--impl", "legacy", "-o", path("legacy.h5"), check=0)
    run("run", "--impl", "split", "-o", path("split.h5"), check=0)
    n = assert_same(path("legacy.h5"), path("split.h5"))
    assert n > 500, n
    with h5py.File(path("split.h5"), "r") as f:
        assert f.attrs["schema"] == "fattn-run/1"
        assert f.attrs["impl"] == "split"
        c = f["cases"]
        assert len(c) >= 40
        # inference cases have no backward group, training ones do
        kinds = {("backward" in c[k]) for k in c if "skipped" not in c[k].attrs}
        assert kinds == {True, False}, kinds


@case("cross-wired replays from an --until save_ctx file equal straight runs")
def _():
    run("run", "--impl", "legacy", "--until", "save_ctx", "-o", path("u_legacy.h5"), check=0)
    run("run", "--impl", "split", "--until", "save_ctx", "-o", path("u_split.h5"), check=0)
    with h5py.File(path("u_legacy.h5"), "r") as f:
        assert not any("backward" in f["cases"][k] for k in f["cases"])
    run("replay", path("u_legacy.h5"), "--from", "save_ctx", "--impl", "split",
        "-o", path("x_ls.h5"), check=0)
    run("replay", path("u_split.h5"), "--from", "save_ctx", "--impl", "legacy",
        "-o", path("x_sl.h5"), check=0)
    run("replay", path("u_split.h5"), "--from", "forward", "--impl", "split",
        "-o", path("x_ss.h5"), check=0)
    for x in ("x_ls.h5", "x_sl.h5", "x_ss.h5"):
        assert_same(path("legacy.h5"), path(x))
    with h5py.File(path("x_ls.h5"), "r") as f:
        assert f.attrs["impl_forward"] == "legacy"
        assert f.attrs["impl_backward"] == "split"
        assert f.attrs["replayed_from"] == "save_ctx"


@case("replay --from forward with legacy is a usage error")
def _():
    p = run("replay", path("u_legacy.h5"), "--from", "forward", "--impl", "legacy",
            "-o", path("nope.h5"), check=2)
    assert "split" in p.stderr
    assert not os.path.exists(path("nope.h5"))


@case("two runs with SOURCE_DATE_EPOCH are byte-identical, whatever the output path")
def _():
    env = {"SOURCE_DATE_EPOCH": "1700000000"}
    run("run", "-o", path("rep1.h5"), env=env, check=0)
    time.sleep(1.1)
    os.makedirs(path("sub"), exist_ok=True)
    run("run", "-o", path("sub/rep2.h5"), env=env, check=0)
    with open(path("rep1.h5"), "rb") as a, open(path("sub/rep2.h5"), "rb") as b:
        assert a.read() == b.read(), "files differ"


@case("whole, filtered and sharded runs give identical case groups; merge joins shards")
def _():
    for i in (1, 2, 3):
        run("run", "--shard", "%d/3" % i, "-o", path("shard%d.h5" % i), check=0)
    run("merge", "-o", path("merged.h5"), path("shard3.h5"), path("shard1.h5"),
        path("shard2.h5"), check=0)
    assert_same(path("split.h5"), path("merged.h5"))
    run("run", "--filter", "*causal*", "-o", path("filtered.h5"), check=0)
    whole = tree(path("split.h5"))
    filt = tree(path("filtered.h5"))
    assert filt and all(whole.get(k) == v for k, v in filt.items())
    # reversed-order matrix file: same case groups (RNG is per case run)
    with h5py.File(path("split.h5"), "r") as f:
        specs = [f["cases"][k].attrs["spec"] for k in f["cases"]]
    with open(path("reversed.json"), "w") as out:
        out.write("[" + ",".join(reversed(specs)) + "]")
    run("run", "--cases", path("reversed.json"), "-o", path("reversed.h5"), check=0)
    assert_same(path("split.h5"), path("reversed.h5"))


@case("merge refuses overlapping shards (exit 2, nothing written)")
def _():
    p = run("merge", "-o", path("dup.h5"), path("shard1.h5"), path("shard1.h5"), check=2)
    assert "both shard 1/3" in p.stderr, p.stderr
    assert not os.path.exists(path("dup.h5"))


@case("h5py reads our values: float16 as float16, bfloat16 as uint16 + dtype attribute")
def _():
    with h5py.File(path("split.h5"), "r") as f:
        seen = set()
        for k in f["cases"]:
            g = f["cases"][k]
            if "forward" not in g:
                continue
            out = g["forward/out"]
            dt = out.attrs["dtype"]
            seen.add(dt)
            if dt == "float16":
                assert out.dtype == np.float16
            elif dt == "bfloat16":
                assert out.dtype == np.uint16
            assert out.attrs["digest"].startswith("xxh3-128:")
            assert len(out.attrs["digest"]) == len("xxh3-128:") + 32
        assert {"float16", "bfloat16"} <= seen, seen


def bf16(a):
    return (a.astype(np.uint32) << 16).view(np.float32)


@case("recorded O equals softmax(QK^T s)V recomputed in numpy from the recorded inputs")
def _():
    checked = 0
    with h5py.File(path("split.h5"), "r") as f:
        for k in f["cases"]:
            g = f["cases"][k]
            spec = g.attrs["spec"]
            if ('"layout":"bshd_bshd_bshd"' not in spec or '"mask":"no_mask"' not in spec
                    or '"bias":"no_bias"' not in spec or '"softmax":"vanilla"' not in spec
                    or '"dropout_p":0.0' not in spec or "forward" not in g
                    or '"fp8":' in spec):  # FP8: held to the oracle in test_cpu_fp8
                continue
            def load(d):
                x = d[()]
                return bf16(x).astype(np.float64) if d.attrs["dtype"] == "bfloat16" \
                    else x.astype(np.float64)
            q, kk, v = (load(g["inputs/" + n]) for n in ("q", "k", "v"))
            out = load(g["forward/out"])
            b, s, h, d = q.shape
            hg = kk.shape[2]
            import json
            js = json.loads(spec)
            scale = js["attn_scale"] if js["attn_scale"] is not None else \
                float(np.float32(1.0 / np.sqrt(d)))
            kr = np.repeat(kk, h // hg, axis=2)
            vr = np.repeat(v, h // hg, axis=2)
            sc = np.einsum("bihd,bjhd->bhij", q, kr) * scale
            p = np.exp(sc - sc.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            ref = np.einsum("bhij,bjhd->bihd", p, vr)
            tol = 2e-2 if g["forward/out"].attrs["dtype"] == "bfloat16" else 2e-3
            assert np.abs(out - ref).max() <= tol * max(1.0, np.abs(ref).max()), k
            checked += 1
    assert checked >= 1, "no plain bshd case in the matrix"


@case("inspect: a valid file exits 0 and prints the tree")
def _():
    p = run("inspect", path("split.h5"), check=0)
    assert "cases/" in p.stdout and "xxh3-128:" in p.stdout


def corrupt_copy(name, mutate):
    dst = path(name)
    with open(path("split.h5"), "rb") as f:
        data = bytearray(f.read())
    with open(dst, "wb") as f:
        f.write(mutate(data))
    return dst


@case("inspect: truncated, empty and non-HDF5 files exit 2 naming the file")
def _():
    for name, mut in (("trunc.h5", lambda d: d[: len(d) // 2]),
                      ("empty.h5", lambda d: b""),
                      ("text.h5", lambda d: b"not an hdf5 file\n" * 10)):
        f = corrupt_copy(name, mut)
        p = run("inspect", f, check=2)
        assert name in p.stderr, p.stderr


def edited_copy(name, edit):
    import shutil
    dst = path(name)
    shutil.copy(path("split.h5"), dst)
    with h5py.File(dst, "r+") as f:
        edit(f)
    return dst


@case("inspect: wrong schema, a dtype attribute disagreeing with storage, a bad digest, "
      "a shape the spec cannot make, non-monotone cu_seqlens -> exit 2")
def _():
    def first_training_case(f):
        for k in f["cases"]:
            if "backward" in f["cases"][k]:
                return f["cases"][k]
    def thd_case(f):
        for k in f["cases"]:
            if "cu_seqlens_q_padded" in f["cases"][k]["inputs"] and \
                    '"layout":"thd' in f["cases"][k].attrs["spec"]:
                return f["cases"][k]
    edits = {
        "schema.h5": lambda f: f.attrs.modify("schema", "fattn-run/2"),
        "dtype.h5": lambda f: first_training_case(f)["forward/out"].attrs.modify(
            "dtype", "float32"),
        "digest.h5": lambda f: first_training_case(f)["forward/out"].attrs.modify(
            "digest", "xxh3-128:" + "0" * 32),
        "shape.h5": lambda f: (f.move(first_training_case(f).name + "/inputs/q",
                                      first_training_case(f).name + "/inputs/q_old"),
                               first_training_case(f).create_dataset(
                                   "inputs/q", data=np.zeros((1, 2, 3), np.float16))),
        "cuseq.h5": lambda f: thd_case(f)["inputs/cu_seqlens_q"].__setitem__(
            1, 10**6),
    }
    for name, edit in edits.items():
        f = edited_copy(name, edit)
        p = run("inspect", f, check=2)
        assert name in p.stderr, (name, p.stderr)


@case("run: bad specs exit 2 naming file, case and key; nothing written")
def _():
    bad = {
        "unknown_key.json": '[{"id":"x","b":1,"h":1,"sq":4,"d_qk":8,"bogus":1}]',
        "dup.json": '[{"id":"x","b":1,"h":1,"sq":4,"d_qk":8},{"id":"x","b":1,"h":1,"sq":4,"d_qk":8}]',
        "type.json": '[{"id":"x","b":"one","h":1,"sq":4,"d_qk":8}]',
        "te_invalid.json": '[{"id":"x","b":1,"h":1,"sq":4,"d_qk":8,"bias":"pre_scale_bias"}]',
    }
    for name, text in bad.items():
        with open(path(name), "w") as f:
            f.write(text)
        p = run("run", "--cases", path(name), "-o", path("bad.h5"), check=2)
        assert "x" in p.stderr, p.stderr
        assert not os.path.exists(path("bad.h5"))


# A case the engine cannot run: the CPU engine runs every case TE accepts, so
# the tests of a skipped case widen one of the cuDNN engine's gaps to it (FP8
# with d_qk != d_v, rule fp8_mla_cudnn; FATTN_TEST_WIDEN_ROWS, -Dtesting only).
GAP_ENV = {"FATTN_TEST_WIDEN_ROWS": "fp8_mla_cudnn"}


def write_gap_case():
    with open(path("gap.json"), "w") as f:
        f.write('[{"id":"gap","b":1,"h":1,"sq":4,"d_qk":128,"d_v":64,'
                '"is_training":false,"fp8":{"recipe":"delayed"}}]')


@case("run: a case the engine cannot run is recorded as skipped with its reason")
def _():
    if VARIANTS_SKIP:
        return VARIANTS_SKIP
    write_gap_case()
    run("run", "--cases", path("gap.json"), "-o", path("gap.h5"), env=GAP_ENV, check=0)
    with h5py.File(path("gap.h5"), "r") as f:
        g = f["cases/gap"]
        assert "skipped" in g.attrs and len(g.attrs["skipped"]) > 10
        assert len(g) == 0


@case("run: --max-memory refuses a case before allocating (exit 2)")
def _():
    p = run("run", "--max-memory", "1000", "-o", path("mem.h5"), check=2)
    assert "max-memory" in p.stderr
    assert not os.path.exists(path("mem.h5"))


@case("run --repeat 2 records per-tensor repeat identity under /audit")
def _():
    run("run", "--filter", "*causal*", "--repeat", "2", "-o", path("audit.h5"), check=0)
    with h5py.File(path("audit.h5"), "r") as f:
        a = f["audit"]
        n = 0
        def visit(name, obj):
            nonlocal n
            if "identical" in obj.attrs:
                assert obj.attrs["identical"] == 1, name
                assert obj.attrs["repeats"] == 2
                n += 1
        a.visititems(visit)
        assert n > 10, n


def audit_of(fname):
    """{case/state/tensor: attrs (+ 'index': list of logical indices)}."""
    out = {}
    with h5py.File(fname, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Group) and ("unwritten" in obj.attrs or
                                                 "identical" in obj.attrs):
                d = {k: int(v) for k, v in obj.attrs.items()}
                if "unwritten_index" in obj:
                    d["index"] = [tuple(int(x) for x in r) for r in obj["unwritten_index"][()]]
                out[name] = d
        f["audit"].visititems(visit)
    return out


@case("--check-writes: a full-length case has every output element written")
def _():
    run("run", "--filter", "layout.bshd_bshd_bshd.*", "--check-writes", "-o",
        path("cw.h5"), check=0)
    a = audit_of(path("cw.h5"))
    assert a, "no audit records"
    assert all(v["unwritten"] == 0 for v in a.values()), \
        [k for k, v in a.items() if v["unwritten"]]


@case("test variant unwritten_dq: --check-writes reports dq's element [0,0,0,1], nothing else")
def _():
    if VARIANTS_SKIP:
        # without variants the variable changes nothing: every element written
        run("run", "--filter", "layout.bshd_bshd_bshd.*", "--check-writes", "-o",
            path("cw_novar.h5"), env={"FATTN_TEST_ENGINE_VARIANT": "unwritten_dq"}, check=0)
        a = audit_of(path("cw_novar.h5"))
        assert a and all(v["unwritten"] == 0 for v in a.values()), a
        with h5py.File(path("cw_novar.h5"), "r") as f:
            assert "prov_test_variant" not in f.attrs
        return VARIANTS_SKIP
    run("run", "--filter", "layout.bshd_bshd_bshd.*", "--check-writes", "-o",
        path("cw_bad.h5"), env={"FATTN_TEST_ENGINE_VARIANT": "unwritten_dq"}, check=0)
    a = audit_of(path("cw_bad.h5"))
    bad = {k: v for k, v in a.items() if v["unwritten"]}
    assert bad and all(k.endswith("/backward/dq") for k in bad), bad
    for v in bad.values():
        assert v["unwritten"] == 1 and v["index"] == [(0, 0, 0, 1)], v
    with h5py.File(path("cw_bad.h5"), "r") as f:
        assert f.attrs["prov_test_variant"] == "unwritten_dq"


@case("test variant flaky_dk: --repeat 3 reports only dk as not repeatable")
def _():
    if VARIANTS_SKIP:
        return VARIANTS_SKIP
    p = run("run", "--filter", "layout.bshd_bshd_bshd.*", "--repeat", "3", "-o",
            path("flaky.h5"), env={"FATTN_TEST_ENGINE_VARIANT": "flaky_dk"}, check=0)
    a = audit_of(path("flaky.h5"))
    bad = sorted(k for k, v in a.items() if v.get("identical") == 0)
    assert bad and all(k.endswith("/backward/dk") for k in bad), bad
    assert any(v.get("identical") == 1 for v in a.values())
    # the variant changes one element of dK on every other call
    assert all(a[k]["max_differing"] == 1 for k in bad), [a[k] for k in bad]
    assert all(v["max_differing"] == 0 for k, v in a.items() if v.get("identical") == 1)
    for k in bad:
        case = k.split("/")[0]
        assert ("--repeat: %s/backward/dk is not bitwise repeatable (1 of " % case) in p.stderr, \
            p.stderr


def bf16_values(ds):
    return (np.asarray(ds[()], dtype=np.uint32) << 16).view(np.float32)


@case("test variant fault:PLAN: NaN / Inf written into Max, O and Stats rows after the "
      "engine, a first backward made to fail, a bad plan refused (exit 2)")
def _():
    if VARIANTS_SKIP:
        return VARIANTS_SKIP
    out, cid = path("fault.h5"), "max_logit.no_mask.bf16"
    run("run", "--filter", cid, "-o", out, check=0,
        env={"FATTN_TEST_ENGINE_VARIANT": "fault:max=nan,max=inf@1,o=-inf@1,stats=nan"})
    with h5py.File(out, "r") as f:
        assert f.attrs["prov_test_variant"].startswith("fault:"), dict(f.attrs)
        g = f["cases/" + cid]
        ml = bf16_values(g["forward/max_logit"])
        assert np.isnan(ml[0]) and ml[1] == np.inf, ml  # torch.amax propagates NaN
        o = bf16_values(g["forward/out"])  # sbhd [s, b, h, d]: row 0 of batch 0, head 1
        assert np.all(o[0, 0, 1] == -np.inf) and np.isfinite(o[0, 0, 0]).all(), o[0, 0]
        st = g["forward/aux/softmax_stats"][()]  # [b, h, sq, 1]
        assert np.isnan(st[0, 0, 0, 0]) and np.isfinite(st[0, 1, 0, 0]), st[0, :, 0, 0]
    p = run("run", "--filter", cid, "-o", path("fault2.h5"), check=2,
            env={"FATTN_TEST_ENGINE_VARIANT": "fault:bwd=fail"})
    assert "the injected fault of the first backward call" in p.stderr, p.stderr
    for bad in ("fault:max=zero", "fault:q=nan", "fault:max=nan@x", "fault:"):
        p = run("run", "--filter", cid, "-o", path("fault3.h5"), check=2,
                env={"FATTN_TEST_ENGINE_VARIANT": bad})
        assert "fault plan" in p.stderr and not os.path.exists(path("fault3.h5")), p.stderr


def count_datasets(fname):
    n = 0
    with h5py.File(fname, "r") as f:
        def visit(name, obj):
            nonlocal n
            if isinstance(obj, h5py.Dataset) and not name.startswith("audit/"):
                n += 1
        f.visititems(visit)
    return n


@case("run, replay and merge end with 'wrote N cases (M tensors) to X', plurals right")
def _():
    one, many = path("wrote1.h5"), path("wroteN.h5")
    p = run("run", "--filter", "layout.bshd_bshd_bshd.*", "-o", one, check=0)
    assert p.stdout == "run: wrote 1 case (%d tensors) to %s\n" % (count_datasets(one), one), \
        p.stdout
    p = run("run", "--filter", "layout.*", "-o", many, check=0)
    n = len(h5py.File(many, "r")["cases"])
    assert n > 1
    assert p.stdout == "run: wrote %d cases (%d tensors) to %s\n" % (n, count_datasets(many),
                                                                      many), p.stdout
    p = run("replay", one, "--from", "save_ctx", "--impl", "legacy", "-o", path("wrote_r.h5"),
            check=0)
    assert p.stdout == "replay: wrote 1 case (%d tensors) to %s\n" % (
        count_datasets(path("wrote_r.h5")), path("wrote_r.h5")), p.stdout
    p = run("merge", "-o", path("wrote_m.h5"), many, check=0)
    assert p.stdout == "merge: wrote %d cases (%d tensors) to %s\n" % (
        n, count_datasets(many), path("wrote_m.h5")), p.stdout
    p = run("diff", one, one, check=0)
    assert "summary: %d datasets compared, 0 counted differences" % count_datasets(one) \
        in p.stdout, p.stdout
    with open(path("one-case.json"), "w") as f:
        f.write('[{"id":"tiny","b":1,"h":1,"sq":4,"d_qk":8}]')
    os.makedirs(path("nofix"), exist_ok=True)
    p = run("verify", "--backend", "cpu", "--cases", path("one-case.json"), "--fixtures",
            path("nofix"), check=0)
    assert "behavior-neutral: yes (1 case, " in p.stdout, p.stdout


@case("stdout is line-buffered: verify's first row reaches a pipe while later cases run")
def _():
    with open(path("slow.json"), "w") as f:
        f.write('[{"id":"a.fast","b":1,"h":1,"sq":4,"d_qk":8},'
                '{"id":"b.slow","b":2,"h":4,"sq":1024,"d_qk":64}]')
    os.makedirs(path("nofix"), exist_ok=True)
    p = subprocess.Popen([FATTN, "verify", "--backend", "cpu", "--cases", path("slow.json"),
                          "--fixtures", path("nofix")], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    try:
        lines = [p.stdout.readline() for _ in range(3)]
        # fully buffered, the rows come with the exit: give that a moment
        time.sleep(0.5)
        running = p.poll() is None
    finally:
        rest = p.communicate()[0]
    assert lines[2].startswith("a.fast"), lines
    assert running, "the first row came only when verify exited: %r" % (lines + [rest])
    assert p.returncode == 0, p.returncode


@case("--json - writes the JSON to stdout (diff, verify) and the text to stderr, no file '-'")
def _():
    import json
    d = path("json-stdout")
    os.makedirs(d, exist_ok=True)
    one, many = path("wrote1.h5"), path("wroteN.h5")
    p = run("diff", one, many, "--json", "-", cwd=d, check=1)
    j = json.loads(p.stdout)
    assert j["schema"] == "fattn-diff/1" and j["exit"] == 1, j.get("schema")
    assert "summary:" in p.stderr and "exit 1" in p.stderr, p.stderr
    p = run("verify", "--backend", "cpu", "--cases", path("one-case.json"), "--fixtures",
            path("nofix"), "--json", "-", cwd=d, check=0)
    j = json.loads(p.stdout)
    assert j["schema"] == "fattn-verify/1" and [c["id"] for c in j["cases"]] == ["tiny"], j
    assert "behavior-neutral: yes (1 case," in p.stderr, p.stderr
    assert os.listdir(d) == [], os.listdir(d)


@case("verify --json: `golden` is true exactly where a golden was compared (not for an "
      "errored or a skipped case, nor a case file without goldens)")
def _():
    import json
    mixed = path("golden-flag.json")
    with open(mixed, "w") as f:
        f.write('[{"id":"ran","b":1,"h":1,"sq":4,"d_qk":8},'
                '{"id":"errs","b":1,"h":1,"sq":4,"d_qk":12},'
                '{"id":"gap","b":1,"h":1,"sq":4,"d_qk":128,"d_v":64,'
                '"is_training":false,"fp8":{"recipe":"delayed"}}]')
    env = None if VARIANTS_SKIP else GAP_ENV
    p = run("verify", "--backend", "cpu", "--cases", mixed, "--json", "-", env=env, check=2)
    cases = {c["id"]: c for c in json.loads(p.stdout)["cases"]}
    assert cases["errs"]["result"] == "error", cases
    if not VARIANTS_SKIP:
        assert cases["gap"]["result"] == "skipped", cases
        assert "rule fp8_mla_cudnn" in cases["gap"]["skipped"], cases["gap"]
    assert not any(c["golden"] for c in cases.values()), cases
    p = run("verify", "--backend", "cpu", "--filter", "layout.sbhd_sbhd_sbhd.no_mask.f16",
            "--json", "-", check=0)
    (c,) = json.loads(p.stdout)["cases"]
    assert c["golden"] is True and c["result"] == "ok", c


def unwritable_dir():
    """A directory no file can be made in: mode 0555, or for root (whom modes do not stop)
    /sys where the kernel refuses it; None if neither is to be had."""
    if os.geteuid() != 0:
        d = path("readonly")
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o555)
        return d
    try:
        fd = os.open("/sys/fattn-probe", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError:
        return "/sys"
    os.close(fd)
    os.unlink("/sys/fattn-probe")
    return None


@case("outputs are checked before any work: missing directory, a directory, an unwritable "
      "place -> exit 2, the path named once, nothing computed or left behind")
def _():
    one = path("wrote1.h5")
    targets = [path("nodir/x.h5"), TMP, path("wrote1.h5/x.h5")]
    ro = unwritable_dir()
    if ro:
        targets.append(os.path.join(ro, "x.h5"))
    before = sorted(os.listdir(TMP))
    for t in targets:
        for argv in (["run", "--filter", "layout.*", "-o", t],
                     ["run", "--filter", "layout.*", "--repeat", "2", "-o", t],
                     ["replay", one, "--from", "save_ctx", "--impl", "legacy", "-o", t],
                     ["merge", "-o", t, one],
                     ["diff", one, path("wroteN.h5"), "--json", t],
                     ["verify", "--backend", "cpu", "--cases", path("one-case.json"),
                      "--fixtures", path("nofix"), "--json", t],
                     ["verify", "--backend", "cpu", "--cases", path("one-case.json"),
                      "--fixtures", path("nofix"), "--junit", t]):
            t0 = time.time()
            p = run(*argv)
            assert p.returncode == 2, (argv, p.returncode, p.stderr)
            assert p.stderr.count(t) == 1, (argv, p.stderr)
            assert p.stderr.count("\n") == 1, (argv, p.stderr)
            assert p.stdout == "", (argv, p.stdout)  # no table, no report, no "exit 1"
            assert time.time() - t0 < 5, (argv, "work was done first")
    # golden -o DIR: a directory it cannot make, or a file where the directory belongs
    with open(path("gold-file"), "w") as f:
        f.write("x")
    before = sorted(os.listdir(TMP))
    for t in [path("nodir/g")] + ([os.path.join(ro, "g")] if ro else []) + [path("gold-file")]:
        p = run("golden", "--backend", "cpu", "--cases", path("one-case.json"), "-o", t)
        assert p.returncode == 2 and p.stderr.count(t) == 1, (t, p.returncode, p.stderr)
        assert p.stdout == "", p.stdout
    assert "not a directory" in p.stderr, p.stderr
    assert sorted(os.listdir(TMP)) == before, sorted(set(os.listdir(TMP)) ^ set(before))


@case("shard files record shard I/N and matrix_digest; merge refuses incomplete and mixed "
      "sets (exit 2, nothing written) unless --partial")
def _():
    with h5py.File(path("shard2.h5"), "r") as f:
        assert f.attrs["shard"] == "2/3", dict(f.attrs)
        digest = f.attrs["matrix_digest"]
        assert digest.startswith("xxh3-128:") and len(digest) == 9 + 32, digest
    with h5py.File(path("split.h5"), "r") as f:
        assert "shard" not in f.attrs and f.attrs["matrix_digest"] == digest
    with h5py.File(path("merged.h5"), "r") as f:
        assert "shard" not in f.attrs and f.attrs["matrix_digest"] == digest
    run("run", "--shard", "1/2", "-o", path("half1.h5"), check=0)
    run("run", "--filter", "layout.*", "--shard", "3/3", "-o", path("fshard3.h5"), check=0)
    # the same matrix listed in reverse deals other cases to shard 2/3
    run("run", "--cases", path("reversed.json"), "--shard", "2/3", "-o", path("rshard2.h5"),
        check=0)
    with h5py.File(path("rshard2.h5"), "r") as f:
        assert f.attrs["matrix_digest"] == digest  # the digest is of the cases, not the order
    out = path("refused.h5")
    for ins, words in [
            (["shard1.h5", "shard3.h5"], ["incomplete set", "missing: 2/3", "--partial"]),
            (["shard2.h5"], ["missing: 1/3, 3/3"]),
            (["shard1.h5", "half1.h5"], ["mixed set", "shard 1/2", "shard 1/3"]),
            (["shard1.h5", "shard2.h5", "fshard3.h5"], ["mixed set", "different matrices"]),
            (["split.h5", "shard1.h5"], ["mixed set", "not a shard"]),
            (["shard1.h5", "rshard2.h5", "shard3.h5"], [])]:
        p = run("merge", "-o", out, *[path(i) for i in ins])
        assert p.returncode == 2, (ins, p.returncode, p.stderr)
        for w in words:
            assert w in p.stderr, (ins, w, p.stderr)
        assert not os.path.exists(out), ins
    # --partial merges the shards given, and says which are missing
    p = run("merge", "--partial", "-o", out, path("shard1.h5"), path("shard3.h5"), check=0)
    assert "missing: 2/3" in p.stderr, p.stderr
    with h5py.File(out, "r") as f, h5py.File(path("split.h5"), "r") as w:
        assert 0 < len(f["cases"]) < len(w["cases"])
    # a mixed set stays refused with --partial: its shards do not divide one matrix
    p = run("merge", "--partial", "-o", path("refused2.h5"), path("shard1.h5"),
            path("half1.h5"), check=2)
    assert "mixed set" in p.stderr
    # unsharded run files of disjoint cases merge as before
    run("run", "--filter", "layout.*", "-o", path("u1.h5"), check=0)
    run("run", "--filter", "mask.*", "-o", path("u2.h5"), check=0)
    run("merge", "-o", path("u12.h5"), path("u1.h5"), path("u2.h5"), check=0)
    with h5py.File(path("u12.h5"), "r") as f:
        # the union of two filters is no one matrix: no digest claims it is
        assert "matrix_digest" not in f.attrs and "shard" not in f.attrs
        assert len(f["cases"]) == 27, len(f["cases"])


PROGRESS_RE = r"\[(\d+)/(\d+)\] (\S+)\.\.\. (ok|skipped|refused|DIFFERENT|ERROR)$"


def progress_lines(text, n):
    import re
    lines = [l for l in text.splitlines() if re.match(r"\[\d+/\d+\] ", l)]
    got = [re.match(PROGRESS_RE, l) for l in lines]
    assert all(got) and len(got) == n, lines
    assert [int(g.group(1)) for g in got] == list(range(1, n + 1)), lines
    assert all(int(g.group(2)) == n for g in got), lines
    return [(g.group(3), g.group(4)) for g in got]


@case("--progress: run, verify, golden, replay and merge print [i/N] CASE... ok per case on "
      "stderr; nothing without it when stderr is not a terminal; a terminal gets it unasked")
def _():
    flt = "layout.bshd*"
    ids = sorted(l.split("\t")[0] for l in run("cases", "--filter", flt, check=0).stdout
                 .splitlines())
    n = len(ids)
    out = path("prog.h5")
    for argv in (["run", "--filter", flt, "-o", out],
                 ["verify", "--backend", "cpu", "--filter", flt, "--fixtures", path("nofix")],
                 ["replay", out, "--from", "save_ctx", "--impl", "legacy", "-o",
                  path("prog-r.h5")],
                 ["merge", "-o", path("prog-m.h5"), out],
                 ["golden", "--backend", "cpu", "--cases", path("slow.json"), "--force",
                  "--allow-dirty", "-o", path("prog-golden")]):
        quiet = run(*argv, check=0)
        assert quiet.stderr == "", (argv, quiet.stderr)
        p = run(*(argv + ["--progress"]), check=0)
        if argv[0] == "golden":
            assert progress_lines(p.stderr, 2) == [("a.fast", "ok"), ("b.slow", "ok")]
            continue
        got = progress_lines(p.stderr, n)
        assert sorted(i for i, _ in got) == ids and {r for _, r in got} == {"ok"}, got
        assert p.stdout == quiet.stdout or argv[0] == "verify", (p.stdout, quiet.stdout)
    # stderr a terminal: progress without the flag
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen([FATTN, "run", "--filter", flt, "-o", path("prog-tty.h5")],
                         stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    p.wait()
    text = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        text += chunk
    os.close(master)
    assert p.returncode == 0
    progress_lines(text.decode().replace("\r", ""), n)


@case("verify --progress with stdout and stderr in one pipe: each row, then its progress line")
def _():
    p = subprocess.run([FATTN, "verify", "--backend", "cpu", "--filter", "layout.bshd*",
                        "--fixtures", path("nofix"), "--progress"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    lines = p.stdout.splitlines()
    prog = [i for i, l in enumerate(lines) if l.startswith("[")]
    assert prog, lines
    for i in prog:
        case_id = lines[i].split()[1][:-3]
        assert lines[i - 1].startswith(case_id + " "), (lines[i - 1], lines[i])


def verify_fixture():
    """Goldens of three tiny cases, in a directory whose name XML must escape, and a matrix
    whose middle case no longer matches its golden (another input seed)."""
    import json
    cases = [{"id": "a.one", "b": 1, "h": 1, "sq": 4, "d_qk": 8},
             {"id": "b.two", "b": 1, "h": 1, "sq": 4, "d_qk": 8, "seed": 7},
             {"id": "c.three", "b": 1, "h": 1, "sq": 4, "d_qk": 8}]
    gold = path("vx-gold.json")
    with open(gold, "w") as f:
        json.dump(cases, f)
    fix = path("fix&<\"'>")
    if not os.path.isdir(fix):
        run("golden", "--backend", "cpu", "--cases", gold, "--allow-dirty", "-o", fix, check=0)
    cases[1]["seed"] = 8
    changed = path("vx-changed.json")
    with open(changed, "w") as f:
        json.dump(cases, f)
    return fix, changed


def table_ids(stdout):
    return [l.split()[0] for l in stdout.splitlines()[2:] if l and l.split()[0] in
            ("a.one", "b.two", "c.three")]


@case("verify -x/--exitfirst stops after the first differing case, prints the report so far, "
      "exit 1")
def _():
    fix, changed = verify_fixture()
    p = run("verify", "--backend", "cpu", "--cases", changed, "--fixtures", fix, check=1)
    assert table_ids(p.stdout) == ["a.one", "b.two", "c.three"], p.stdout
    for flag in ("-x", "--exitfirst"):
        p = run("verify", "--backend", "cpu", "--cases", changed, "--fixtures", fix, flag,
                check=1)
        assert table_ids(p.stdout) == ["a.one", "b.two"], p.stdout
        assert "behavior-neutral: NO (2 cases," in p.stdout, p.stdout
        assert "first differences (golden, case b.two)" in p.stdout, p.stdout
        assert "stopped after the first failing case (-x): 2 of 3 cases run" in p.stdout
    # nothing fails: -x changes nothing
    p = run("verify", "--backend", "cpu", "--cases", changed, "--fixtures", fix, "-x", "-k",
            "e", check=0)
    assert table_ids(p.stdout) == ["a.one", "c.three"] and "stopped" not in p.stdout, p.stdout


@case("verify -k SUBSTRING selects cases whose id contains it, beside --filter; none is exit 2")
def _():
    fix, changed = verify_fixture()
    p = run("verify", "--backend", "cpu", "--cases", changed, "--fixtures", fix, "-k", "thr",
            check=0)
    assert table_ids(p.stdout) == ["c.three"], p.stdout
    p = run("verify", "--backend", "cpu", "--cases", changed, "--fixtures", fix, "-k", "o",
            "--filter", "[ab].*", check=1)
    assert table_ids(p.stdout) == ["a.one", "b.two"], p.stdout
    for extra in (["-k", "zzz"], ["-k", "thr", "--filter", "a.*"]):
        p = run("verify", "--backend", "cpu", "--cases", changed, "--fixtures", fix, *extra,
                check=2)
        assert "-k '%s'" % extra[1] in p.stderr and "behavior-neutral" not in p.stdout, p.stderr


@case("verify --junit FILE / -: JUnit XML that xml.etree parses, one testcase per case and "
      "check, a failure with the check's first difference, escaped text")
def _():
    import xml.etree.ElementTree as ET
    fix, changed = verify_fixture()
    out = path("junit.xml")
    p = run("verify", "--backend", "cpu", "--cases", changed, "--fixtures", fix, "--junit",
            out, check=1)
    assert table_ids(p.stdout) == ["a.one", "b.two", "c.three"], p.stdout
    root = ET.parse(out).getroot()
    suite = root.find("testsuite")
    tcs = suite.findall("testcase")
    checks = ["split save/restore seam", "legacy vs split", "inputs unchanged",
              "legacy second backward",
              "split wrapper save/restore seam", "legacy vs split wrapper",
              "legacy vs split wrapper returned", "split wrapper second backward",
              "replay legacy save_ctx -> split",
              "replay split save_ctx -> legacy", "replay split forward -> split", "repeat",
              "golden"]
    want = [("fattn.verify." + c, k) for c in ("a.one", "b.two", "c.three") for k in checks]
    assert [(t.get("classname"), t.get("name")) for t in tcs] == want, \
        [(t.get("classname"), t.get("name")) for t in tcs]
    assert root.tag == "testsuites" and suite.get("tests") == str(len(want)), suite.attrib
    assert suite.get("failures") == "1" and suite.get("errors") == "0", suite.attrib
    fails = [(t.get("classname"), t.get("name"), t.find("failure")) for t in tcs
             if t.find("failure") is not None]
    assert [x[:2] for x in fails] == [("fattn.verify.b.two", "golden")], fails
    f = fails[0][2]
    assert f.get("message").startswith("golden: @spec"), f.attrib
    assert "forward/out" in f.text and f.text.startswith("%s difference" % f.text.split()[0]), \
        f.text
    props = {e.get("name"): e.get("value") for e in suite.find("properties")}
    assert props["goldens"] == os.path.join(fix, "cpu-math-1.h5"), props  # & < " ' > escaped
    assert props["verdict"] == "not behavior-neutral", props
    # -x: the testcases of the cases run
    p = run("verify", "--backend", "cpu", "--cases", changed, "--fixtures", fix, "-x",
            "--junit", "-", check=1)
    root = ET.fromstring(p.stdout)
    assert sorted({t.get("classname") for t in root.iter("testcase")}) == \
        ["fattn.verify.a.one", "fattn.verify.b.two"], p.stdout
    assert "stopped after the first failing case" in p.stderr, p.stderr
    # a skipped case is a skipped element
    if not VARIANTS_SKIP:
        write_gap_case()
        p = run("verify", "--backend", "cpu", "--cases", path("gap.json"), "--fixtures",
                path("nofix"), "--junit", "-", env=GAP_ENV, check=0)
        (t,) = ET.fromstring(p.stdout).iter("testcase")
        assert t.get("name") == "case" and t.find("skipped") is not None and \
            "rule fp8_mla_cudnn" in t.find("skipped").get("message")
    p = run("verify", "--json", "-", "--junit", "-", check=2)
    assert "only one report" in p.stderr, p.stderr


@case("verify's table keeps its columns aligned for a case id longer than the case column")
def _():
    import json
    long_id = "layout.bshd_bshd_bshd." + "a_very_long_descriptive_case_name_" * 2 + "bf16"
    cases = path("long-id.json")
    with open(cases, "w") as f:
        json.dump([{"id": "s.short", "b": 1, "h": 1, "sq": 4, "d_qk": 8},
                   {"id": long_id, "b": 1, "h": 1, "sq": 4, "d_qk": 8}], f)
    os.makedirs(path("nofix-long"), exist_ok=True)
    p = run("verify", "--backend", "cpu", "--cases", cases, "--fixtures", path("nofix-long"),
            check=0)
    lines = p.stdout.splitlines()
    header = lines[1]
    rows = [l for l in lines[2:4]]
    assert header.startswith("case ") and [r.split()[0] for r in rows] == ["s.short", long_id]
    col = header.index("states")
    for r in rows:
        # every row's states and tensors start under the header's
        assert r[col - 1] == " " and r[col:col + 4] == "ifsb", (header, r)
        assert r.index(" ok") > col and r[header.index("result"):].startswith("ok"), (header, r)


@case("inspect on a non-HDF5 file says 'not an HDF5 file'; a user block before the signature "
      "is still HDF5")
def _():
    for name, data in (("text.h5", b"just some text\n"), ("empty.h5", b""),
                       ("zeros.h5", bytes(4096))):
        with open(path(name), "wb") as f:
            f.write(data)
        p = run("inspect", path(name), check=2)
        assert "%s: not an HDF5 file" % path(name) in p.stderr, p.stderr
        assert "H5Fopen" not in p.stderr, p.stderr
    # h5py writes a file with a 512-byte user block: found, and read by HDF5
    with h5py.File(path("ub.h5"), "w", userblock_size=512) as f:
        f.attrs["x"] = 1
    p = run("inspect", path("ub.h5"))
    assert "not an HDF5 file" not in p.stderr and p.returncode == 2, p.stderr


@case("a reader child that takes long is explained while fattn waits; its CPU limit grows with "
      "the file's size (60 s + 1 s per 16 MiB)")
def _():
    if VARIANTS_SKIP:
        return "SKIP FATTN_TEST_ISOLATE_* need a build with -Dtesting=true"
    small = path("hang-small.h5")
    run("run", "--filter", "layout.bshd_bshd_bshd.*", "-o", small, check=0)
    big = path("hang-big.h5")  # sparse: 1 GiB of apparent size, an HDF5 signature first
    with open(big, "wb") as f:
        f.write(b"\x89HDF\r\n\x1a\n")
        f.truncate(1 << 30)
    env = {"FATTN_TEST_ISOLATE_HANG": "1", "FATTN_TEST_ISOLATE_WALL_S": "3",
           "FATTN_TEST_ISOLATE_NOTICE_S": "1"}
    for f, limit in ((small, 60), (big, 60 + 64)):
        t0 = time.time()
        p = run("inspect", f, env=env, check=2)
        lines = p.stderr.splitlines()
        assert len(lines) == 2 and lines[0].startswith("fattn: still reading %s after 1 s" % f), \
            p.stderr
        assert "stopped after %d s of CPU time" % limit in lines[0], (limit, lines[0])
        assert "took longer than 3 s (wall-clock limit)" in lines[1], lines[1]
        assert time.time() - t0 < 30
    # a read that finishes in time says nothing of the sort
    p = run("inspect", small, env={"FATTN_TEST_ISOLATE_NOTICE_S": "1"}, check=0)
    assert "still reading" not in p.stderr, p.stderr


@case("golden refuses (exit 2) a build of a tree with uncommitted changes unless --allow-dirty;"
      " the committed fixtures record a clean git_rev")
def _():
    one = path("dirty-one.json")
    with open(one, "w") as f:
        f.write('[{"id": "a.one", "b": 1, "h": 1, "sq": 4, "d_qk": 8}]')
    d = path("dirty-goldens")
    if VARIANTS_SKIP:
        return "SKIP FATTN_TEST_GIT_REV needs a build with -Dtesting=true"
    dirty = {"FATTN_TEST_GIT_REV": "0123abc-dirty"}
    p = run("golden", "--backend", "cpu", "--cases", one, "-o", d, env=dirty, check=2)
    assert "uncommitted changes (git_rev 0123abc-dirty)" in p.stderr and "--allow-dirty" in \
        p.stderr, p.stderr
    assert not os.path.exists(d) and p.stdout == "", (os.listdir(TMP), p.stdout)
    p = run("golden", "--backend", "cpu", "--cases", one, "--allow-dirty", "-o", d, env=dirty,
            check=0)
    assert os.listdir(d) == ["cpu-math-1.h5"], os.listdir(d)
    p = run("golden", "--backend", "cpu", "--cases", one, "--force", "-o", d,
            env={"FATTN_TEST_GIT_REV": "0123abc"}, check=0)
    assert "golden: wrote 1 case to" in p.stdout, p.stdout
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
    for name in sorted(os.listdir(fixtures)):
        if name.endswith(".h5"):
            with h5py.File(os.path.join(fixtures, name), "r") as f:
                rev = f.attrs["git_rev"]
                rev = rev.decode() if isinstance(rev, bytes) else rev
            assert len(rev) == 40 and "dirty" not in rev, (name, rev)


@case("verify --jobs: a whole number 1..32 (else exit 2 naming it); on a machine where the "
      "cuDNN engine cannot open, the plan-building processes change nothing of verify's "
      "message or exit and leave no temporary plan store behind")
def _():
    for bad in ("0", " 2", "+2", "0x4", "33", "2.0", ""):
        p = run("verify", "--backend", "cpu", "--jobs", bad, check=2)
        assert "--jobs '%s': expected a whole number from 1 to 32" % bad in p.stderr, p.stderr
        assert p.stdout == "", p.stdout
    tmp = path("jobs-tmp")
    os.mkdir(tmp)
    one = path("jobs-one.json")
    with open(one, "w") as f:
        f.write('[{"id": "a.one", "b": 1, "h": 1, "sq": 4, "d_qk": 8}]')
    env = {"TMPDIR": tmp, "FATTN_CUDNN_PLAN_DIR": ""}
    single = run("verify", "--backend", "cudnn", "--cases", one, "--jobs", "1", env=env)
    many = run("verify", "--backend", "cudnn", "--cases", one, "--jobs", "3", env=env)
    if single.returncode == 2:  # no usable GPU here: the same refusal either way
        assert many.returncode == 2 and many.stderr == single.stderr, (many.stderr, single.stderr)
    else:  # a GPU: the same verdict either way (no goldens for a.one: same exit)
        assert many.returncode == single.returncode, (many.stdout, single.stdout)
    assert os.listdir(tmp) == [], os.listdir(tmp)
    p = run("verify", "--backend", "cpu", "--cases", one, "--jobs", "4", env=env)
    assert p.returncode in (0, 1) and os.listdir(tmp) == [], (p.returncode, os.listdir(tmp))


@case("FATTN_CUDNN_LIB names the libcudnn the CLI's cuDNN engine loads (the library reads "
      "no environment: the CLI hands the path over); a library that is not cuDNN is named "
      "in the refusal")
def _():
    one = path("lib-one.json")
    with open(one, "w") as f:
        f.write('[{"id": "a.one", "b": 1, "h": 1, "sq": 4, "d_qk": 8}]')
    p = run("run", "--backend", "cudnn", "--cases", one, "-o", path("lib.h5"),
            env={"FATTN_CUDNN_LIB": "libm.so.6"}, check=2)
    if "this build of fattn has no cuDNN engine" in p.stderr:  # e.g. the sanitizer build
        return "SKIP this build has no cuDNN engine (FATTN_HAVE_CUDNN=0)"
    assert "libm.so.6 lacks a backend-API symbol" in p.stderr, p.stderr
    assert not os.path.exists(path("lib.h5"))


@case("a cp case: run and verify record it skipped naming fattn-te; run --cp-reference runs "
      "it without CP, THD padded to multiples of 2 x size; ranks only for a cp spec")
def _():
    import json
    import numpy as np
    cases = path("cp.json")
    with open(cases, "w") as f:
        json.dump([{"id": "cp.bshd", "b": 2, "h": 2, "sq": 16, "d_qk": 16, "mask": "causal",
                    "cp": {"size": 2, "comm": "a2a"}},
                   {"id": "cp.thd", "b": 3, "h": 2, "sq": 16, "d_qk": 16,
                    "layout": "thd_thd_thd", "mask": "padding_causal", "pad_between_seqs": True,
                    "seqlens_q": [16, 5, 9], "seqlens_kv": [16, 5, 9], "cp": {"size": 4}}], f)
    run("run", "--cases", cases, "-o", path("cp-skip.h5"), check=0)
    with h5py.File(path("cp-skip.h5"), "r") as f:
        for cid in ("cp.bshd", "cp.thd"):
            why = f["cases"][cid].attrs["skipped"]
            assert "runs through fattn-te only" in why and "ranks" in why, why
            assert '"cp":{"comm":' in f["cases"][cid].attrs["spec"]
    p = run("verify", "--cases", cases, check=0)
    assert "(2 cases, 0 tensors, 2 skipped, 0 differences)" in p.stdout, p.stdout
    run("run", "--cp-reference", "--cases", cases, "-o", path("cp-ref.h5"), check=0)
    run("inspect", path("cp-ref.h5"), check=0)
    with h5py.File(path("cp-ref.h5"), "r") as f:
        assert "backward" in f["cases/cp.bshd"] and "skipped" not in f["cases/cp.bshd"].attrs
        padded = np.diff(f["cases/cp.thd/inputs/cu_seqlens_q_padded"][()])
        assert list(padded) == [16, 8, 16], padded  # 16, 5 -> 8, 9 -> 16 (multiples of 8)
    # a ranks group where the spec has no cp is refused by full validation
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "tools", "python"))
    import fattn_runfile as fr
    t = fr.load_tree(path("cp-ref.h5"))
    run("run", "--filter", "layout.bshd_bshd_bshd.causal.bf16", "-o", path("plain.h5"), check=0)
    plain = fr.load_tree(path("plain.h5"))
    c = plain["children"]["cases"]["children"]["layout.bshd_bshd_bshd.causal.bf16"]
    c["children"]["ranks"] = t["children"]["cases"]["children"]["cp.bshd"]["children"]["inputs"]
    c["attrs"] = [a for a in c["attrs"] if a[0] != "attrs_digest"]  # as fattn-te writes cases
    fr.write_tree(path("plain-ranks.h5"), plain, fattn=FATTN)
    p = run("inspect", path("plain-ranks.h5"), check=2)
    assert "ranks recorded for a spec without cp" in p.stderr, p.stderr


def main():
    return 1 if tap.run(RESULTS) else 0


if __name__ == "__main__":
    sys.exit(main())
