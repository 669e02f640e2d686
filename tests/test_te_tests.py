#!/usr/bin/python3
"""tools/te/te-tests and its tier (docs/te.md, "TE's tests as a matrix").

usage: test_te_tests.py FATTN SOURCE_ROOT      (prints TAP)

- te_backend.py, the transcription of TE's nvte_get_fused_attn_backend, on
  the facts of fused_attn.cpp (release_v2.19) that the tier rests on: any
  head dim for inference from cuDNN 9.10.2 but one causal query token, the
  training limits, FP8 inference with d_qk 192 / d_v 128, max_logit from
  9.21 (plain Python, always runs);
- pytest_stub's expansion of stacked parametrize marks: pytest's ids and
  order (always runs);
- the committed golden/te_tests_cases.json and its provenance are what the
  tool makes from TE's committed test files (tests/data/te-tests) and TE
  2.19.0's Python, byte for byte (needs tools/te/setup.sh's environment;
  skipped, saying so, without it);
- every case of the tier is one the support table's routing rows leave to
  FusedAttention, as TE's own selection did (fattn cases --te-rules names
  none);
- the tier's test_kv_cache schedules: one per FusedAttention configuration
  of DotProductAttention, the steps of one model's Simulation alike in all
  its configurations, from the non-deterministic passes only (plain
  Python on the committed files, always runs).
"""
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
import tap  # noqa: E402

FATTN, ROOT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
sys.path.insert(0, os.path.join(ROOT, "tools", "te"))
from fattn_te import pytest_stub, te_backend as tb  # noqa: E402

TESTS = tap.Tests()
case = TESTS.case
TIER = os.path.join(ROOT, "golden", "te_tests_cases.json")
PROV = os.path.join(ROOT, "golden", "te_tests_cases.provenance.json")
ENV = os.environ.get("FATTN_TE_ENV", os.path.join(os.environ.get("HOME", "/root"), ".cache",
                                                   "fattn-te"))


def be(train, dqk, dv, sq=128, skv=128, mask="no_mask", layout="BSHD_BSHD_BSHD", dtype="bf16",
       cudnn=91900, max_logit=False, sm=90):
    return tb.fused_attn_backend(train, dtype, dtype, layout, "no_bias", mask, "vanilla", 0.0,
                                 16, 16, sq, skv, dqk, dv, -1, 0 if "causal" in mask else -1,
                                 max_logit, False, False, sm=sm, cudnn=cudnn)


@case("te_backend: TE's head-dim clause (fused_attn.cpp:310-353): any head dim for inference "
      "from cuDNN 9.10.2, but one non-paged causal query token; at most 256 for training")
def _():
    F16, NO = tb.F16_ARBITRARY_SEQLEN, tb.NO_BACKEND
    assert be(True, 128, 128) == F16 and be(True, 256, 256) == F16
    assert be(True, 512, 512) == NO, "training above 256 on sm_90"
    assert be(False, 512, 512) == F16 and be(False, 1024, 1024, sq=1) == F16
    assert be(False, 512, 512, cudnn=91001) == NO, "before 9.10.2"
    assert be(False, 512, 512, sq=1, mask="causal") == NO
    assert be(False, 512, 512, sq=1, mask="padding_causal") == NO
    assert be(False, 512, 512, sq=1, mask="padding_causal",
              layout="Paged_KV_BSHD_BSHD_BSHD") == F16, "a paged cache takes any head dim"
    assert be(False, 512, 512, sq=1, mask="causal_bottom_right") == F16
    assert be(True, 192, 128) == F16 and be(True, 256, 128) == NO, "the 9.11 MLA exclusion"
    assert be(True, 12, 12) == NO, "multiples of 8"
    assert be(False, 128, 128, max_logit=True) == NO
    assert be(False, 128, 128, max_logit=True, cudnn=92100) == F16


@case("te_backend: TE's FP8 clause (fused_attn.cpp:257-295): inference up to 256 with unequal "
      "head dims, training 128 only, no max_logit")
def _():
    FP8, NO = tb.FP8, tb.NO_BACKEND
    assert be(False, 192, 128, dtype="fp8e4m3") == FP8
    assert be(True, 192, 128, dtype="fp8e4m3") == NO
    assert be(True, 128, 128, dtype="fp8e4m3") == FP8
    assert be(False, 64, 64, dtype="fp8e4m3", mask="padding") == FP8
    assert be(False, 128, 128, dtype="fp8e4m3", layout="THD_THD_THD", mask="padding") == NO
    assert be(False, 128, 128, dtype="fp8e4m3", max_logit=True) == NO


@case("pytest_stub.expand: stacked parametrize marks in pytest's order and ids (the innermost "
      "first in an id, the outermost varying fastest), skipif marks, pytest.param ids")
def _():
    pytest = pytest_stub.make_module()

    @pytest.mark.parametrize("x", [0, 1])
    @pytest.mark.parametrize("y", [pytest.param(2, id="two"), {"a": 1}])
    def f(x, y):
        pass

    got = [(tid, kw["x"]) for tid, kw, skip in pytest_stub.expand(f)]
    assert got == [("two-0", 0), ("two-1", 1), ("y1-0", 0), ("y1-1", 1)], got

    @pytest.mark.skipif(True, reason="no")
    @pytest.mark.parametrize("z", [1])
    def g(z):
        pass

    assert [s for _, _, s in pytest_stub.expand(g)] == ["no"]


@case("the committed tier is what te-tests makes from TE's committed tests, byte for byte")
def _():
    te = os.path.join(ENV, "te", "2.19.0")
    if not os.path.exists(os.path.join(ENV, "venv", "bin", "python")) or \
            not os.path.exists(os.path.join(te, ".fattn-te-unpacked")):
        return "SKIP no TE environment at %s (tools/te/setup.sh makes it)" % ENV
    d = tempfile.mkdtemp(prefix="fattn-te-tests-")
    out = os.path.join(d, "te_tests_cases.json")
    with open(PROV) as f:
        import json
        prov = json.load(f)
    p = subprocess.run([os.path.join(ROOT, "tools", "te", "te-tests"), "--te", te,
                        "--te-rev", prov["te_python"], "--tests",
                        os.path.join(ROOT, "tests", "data", "te-tests", "pytorch"),
                        "--tests-rev", prov["te_tests"], "-o", out],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    for mine, theirs in ((out, TIER), (os.path.join(d, "te_tests_cases.provenance.json"), PROV)):
        with open(mine, "rb") as a, open(theirs, "rb") as b:
            assert a.read() == b.read(), "%s differs from %s: regenerate it (docs/te.md)" % (
                theirs, mine)


@case("the tier's calls are FusedAttention's for TE's selection: fattn's routing rows route "
      "none of them elsewhere (fattn cases --te-rules 2.19 and 2.20)")
def _():
    for rules in ("2.19", "2.20"):
        p = subprocess.run([FATTN, "cases", "--cases", TIER, "--te-rules", rules],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        routed = [l for l in p.stdout.splitlines() if "would not route here" in l]
        assert not routed, routed[:3]


@case("the tier's test_kv_cache cases: 24 schedules of cache steps (2 models x 3 q formats x "
      "paged or not x 2 dtypes), one Simulation's steps per model, non-deterministic passes "
      "only, within their caches; TransformerLayer and CUDA graphs reported untranslated")
def _():
    import json
    with open(TIER) as f:
        kv = [c for c in json.load(f) if c["id"].startswith("te.kv_cache.")]
    with open(PROV) as f:
        prov = json.load(f)
    assert len(kv) == 24, len(kv)
    steps = {}
    for c in kv:
        assert c["schedule"] and not c["is_training"] and not c["deterministic"], c["id"]
        assert c["mask"] == "padding_causal_bottom_right", c["id"]
        assert ("paged" in c) == c["layout"].startswith("paged_kv_"), c["id"]
        model = c["id"].split(".")[2]
        steps.setdefault(model, []).append(c["schedule"])
        total = {}
        for st in c["schedule"]:
            assert len(st["step"]) <= c["b"], c["id"]
            for seq, n in st["step"]:
                assert n <= c["sq"], c["id"]
                total[seq] = total.get(seq, 0) + n
        assert max(total.values()) <= c["skv"], c["id"]
        tests = prov["cases"][c["id"]]["tests"]
        assert tests and all("test_kv_cache[" in t and "non-deterministic)" in t
                             for t in tests), tests
    assert sorted(steps) == ["infer_0", "infer_1"], sorted(steps)
    for model, scheds in steps.items():
        assert len(scheds) == 12 and all(s == scheds[0] for s in scheds), model
    for k in ("test_kv_cache[TransformerLayer]", "test_kv_cache[cuda_graph]"):
        assert k in prov["not_translated"], k
    assert prov["kv_cache"]["torch"], "the torch that drew the lengths is named"


sys.exit(1 if tap.run(TESTS) else 0)
