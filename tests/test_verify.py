#!/usr/bin/python3
"""fattn verify and fattn golden, end to end, with their sensitivity proven.

usage: test_verify.py FATTN_EXE XXH128_EXE FIXTURES_DIR MUTANTS(0|1) [MUTANT_EXE...]
       (prints TAP)

- verify passes against the committed fixtures (the README's main job);
- golden refuses a non-empty directory without --force, writes with it;
- a golden copy with one bit flipped in one tensor (digest recomputed, so the
  file is valid) makes verify exit 1 naming that tensor; a missing fixtures
  directory exits 2;
- with MUTANTS=1 (a -Dself_test_mutants=true build) every named plumbing
  mutant makes verify exit 1 naming the tensor that should differ: each
  mutant is tests/mutants/NAME.patch applied to its file of lib/split
  (split.c, fp8.c or args.c) and built into its own executable
  fattn-mutant-NAME, one of the MUTANT_EXEs; the FP8 mutants (fp8_*) touch
  the FP8 cases only.
"""
import re
import os
import shutil
import subprocess
import sys
import tempfile
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

h5py, np = tap.need_modules("h5py", "numpy")

FATTN, XXH128, FIXTURES, MUTANTS = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
MUTANT_EXES = {os.path.basename(p): p for p in sys.argv[5:]}
TMP = tempfile.mkdtemp(prefix="fattn-verify-")
TESTS = tap.Tests()

# mutant -> a path fragment verify must name
MUTANT_TARGETS = {
    "aux_swap": "forward/aux/aux_bias",
    "no_restore": "save_ctx/q",
    "rng_no_advance": "forward@rng_gen_offset",
    "scale_sqrtf": "raw.none.scale.dqk24_dv40.causal.f16 ",
    "dbias_slot": "backward/d_bias",
    "window_unnormalised": "save_ctx@window_size",
    "inference_dropout": "legacy vs split: forward/out",
    "bwd_dropout_bound": "legacy vs split: backward: state missing in B",
    "support_no_dropout": "refuse.swa_dropout.f16 ",
    "dedup_k_as_v": "legacy vs split: save_ctx/k",
    "seam_swap_cu": "split save/restore seam: backward/_impl@cu_seqlens_q",
    "bwd_scale_none": "raw.none.scale.dqk24_dv40.padding.bf16 ",
    "bwd_brd_none": "raw.none.brd.window.no_mask.f16 ",
    "wrapper_grad_swap": "legacy vs split wrapper: backward/dk",
    "offload_ignored": "refuse.cpu_offload_v1.sb3hd.f16 ",
    "ctx_max_seqlen_kv": "save_ctx@max_seqlen_kv",
    "ctx_mask_type": "save_ctx@attn_mask_type",
    "ctx_softmax_type": "save_ctx@softmax_type",
    "ctx_bias_type": "save_ctx@attn_bias_type",
    "ctx_o_format": "save_ctx@o_format",
    "ctx_nominal_dtype": "save_ctx@nominal_dtype",
    "ctx_use_fav2": "legacy vs split: @skipped: legacy absent, split split backward: use_FAv2_bwd",
    "saved_kv_unpadded": "save_ctx/cu_seqlens_kv_padded",
    "dedup_out_as_v": "save_ctx/out",
    "stats_from_max": "forward/aux/softmax_stats",
    "ctx_max_seqlen_q": "save_ctx@max_seqlen_q",
    "ctx_dropout_dropped": "save_ctx@dropout_p",
    "ctx_scale_dropped": "save_ctx@attn_scale",
    "ctx_bhsd_as_bshd": "save_ctx@qkv_layout",
    "ctx_dqkv_unpacked": "save_ctx@dqkv_layout",
    "ctx_backend_fp8": "save_ctx@fused_attention_backend",
    "ctx_fp8_inverted": "fattn_bwd_args.q_fp8/k_fp8/v_fp8 (fp8 is set: an FP8 backward) is unset",
    "saved_cu_q_padded": "save_ctx/cu_seqlens_q",
    "saved_cu_kv_as_q": "save_ctx/cu_seqlens_kv",
    "saved_q_unpadded": "save_ctx/cu_seqlens_q_padded",
    "saved_v_from_k": "save_ctx/v",
    "saved_offset_from_bias": "split setup_ctx: slot aux_softmax_offset",
    "max_logit_all_rows": "forward/max_logit: first at [0] (flat 0): A 0.196289062 (0x3e49), B -nan (0xffff); 2 elements finite on one side, NaN or Inf on the other",
    "rng_state_after_advance": "forward/aux/rng_state",
    "thd_out_not_zeroed": "forward/out",
    "thd_dq_not_zeroed": "backward/dq",
    "doffset_learnable_only": "backward/d_softmax_offset",
    "fp8_scale_inv_dropped": "legacy vs split: save_ctx/out_fp8@scale_inv: legacy 0.03125, split absent",
    "fp8_dedup_to_f16": "legacy vs split: save_ctx/q_fp8: dtype differs",
    "fp8_is_output_fp8_read": "split: FATTN_E_INVALID_ARG: case fp8.cs.sbh3d.outfp8 (split, state backward): O is missing",
    "fp8_bwd_wrong_quantizer": "legacy vs split: save_ctx@dO_quantizer: legacy delayed float8_e5m2 scale=0x1p+6",
    "fp8_input_descale_shared": "legacy vs split: engine_call/forward@fp8.descale_k: legacy 0.015625, split 0.03125",
    "fp8_bf16_backward_inverted": "legacy vs split: backward/dq: dtype differs",
    "fp8_wrapper_out_engine_o": "legacy vs split wrapper returned: returned/out: dtype differs",
    "wrapper_max_logit_dropped": "legacy vs split wrapper returned: returned/max_logit: missing in B",
    "fp8_rng_step_sq_skv": "legacy vs split: forward@rng_gen_offset",
    "bwd_brd_none_padding": "raw.none.brd.padding_causal_bottom_right.bf16 ",
    "doffset_into_offset": "inputs unchanged: split: inputs/_impl@softmax_offset: the caller's tensor changed",
    "second_backward_unguarded": "split wrapper second backward: backward/_impl@second_backward: FATTN_OK on a second backward on one ctx, where TE 2.20.2 raises",
    "paged_identity_table": "legacy vs split: forward/out",
    "fp8_s_quantizer_by_reference": "steps/4/save_ctx@S_quantizer",
    "bwd_window_left_from_right": "engine_call/backward@window_size_left: legacy -1, split 0",
    "paged_bottom_right": "legacy vs split: inputs equal; engine_call/forward@bottom_right_diagonal: "
                          "legacy 0, split 1; then forward/aux/softmax_stats",
    "max_logit_training_only": "legacy vs split: inputs, engine_call/forward equal; "
                               "forward/max_logit: missing in B",
    "fp8_dqkv_amax_from_dv": "engine_call/backward equal; backward@dQKV_quantizer: legacy "
                             "delayed float8_e5m2",
    "max_logit_drops_nan": "engine faults: legacy vs split: inputs, engine_call/forward equal; "
                           "forward/max_logit: 1 of 2 elements differ",
    "wrapper_fp8_d_out_dropped": "engine_call/backward: split wrapper failed where legacy "
                                 "and the split's helpers ran: FATTN_E_MISSING_FIELD",
    "backward_guard_after_success": "split wrapper second backward after a failed one: "
                                    "backward/_impl@second_backward: FATTN_OK on a second "
                                    "backward on one ctx, where TE 2.20.2 raises",
}

# The blind spots only an engine fault shows (a -Dtesting build): every case
# that differs must differ first in that check, nowhere else.
MUTANT_ONLY_CHECK = {
    "max_logit_drops_nan": "engine faults: legacy vs split: inputs, engine_call/forward equal; "
                           "forward/max_logit: ",
    "wrapper_fp8_d_out_dropped": "legacy vs split wrapper: inputs, engine_call/forward, forward, "
                                 "save_ctx equal; engine_call/backward: split wrapper failed "
                                 "where legacy and the split's helpers ran: "
                                 "FATTN_E_MISSING_FIELD",
    "backward_guard_after_success": "split wrapper second backward after a failed one: ",
}

# The mutants a gap of the matrix hid: only the cases that close it may see
# them (each names the one feature the rest of the matrix lacks).
MUTANT_ONLY_CASES = {
    "paged_bottom_right": {"paged.bshd_bshd_bshd.prefill.padding_causal.top_left.f16"},
    "max_logit_training_only": {"max_logit.inference.causal.bf16",
                                "dims.d1024.sq1.padding.max_logit.inference.f16",
                                "mode.eval.max_logit.causal.bf16"},
    "fp8_dqkv_amax_from_dv": {"fp8.ds.bshd.dq_amax_above_dv.sq16_skv64"},
    # one forward and backward cannot see it: only the schedule whose recipe
    # update falls between a forward and its backward
    "fp8_s_quantizer_by_reference": {"sched.fp8.pipeline.update_between.f16"},
}


test = TESTS.case


def fattn(*args, env=None, exe=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([exe or FATTN] + list(args), capture_output=True, text=True, env=e)


@test("no false alarms: 20 runs of verify on one build give the same verdict and report bytes")
def _():
    first = None
    for i in range(20):
        j = os.path.join(TMP, "repeat-%d.json" % i)
        p = fattn("verify", "--fixtures", FIXTURES, "--json", j)
        assert p.returncode == 0, (i, p.stdout[-1500:], p.stderr[-500:])
        with open(j, "rb") as f:
            got = (p.stdout, p.stderr, f.read())
        if first is None:
            first = got
            assert "behavior-neutral: yes" in p.stdout
        assert got == first, "run %d's report differs from run 0's" % i


@test("verify passes against the committed fixtures, bitwise on this platform")
def _():
    p = fattn("verify", "--fixtures", FIXTURES, "--json", os.path.join(TMP, "v.json"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    assert "behavior-neutral: yes" in p.stdout, p.stdout[-500:]
    assert "bitwise (exact platform key match)" in p.stdout
    m = re.search(r"FP8: exercised \((\d+) cases", p.stdout)
    assert m and int(m.group(1)) >= 12, p.stdout
    assert "without golden" not in p.stdout, "the committed goldens miss cases"
    import json
    j = json.load(open(os.path.join(TMP, "v.json")))
    assert j["summary"]["cases"] >= 40 and j["exit"] == 0


@test("golden refuses a non-empty directory without --force and writes with it")
def _():
    d = os.path.join(TMP, "gold")
    os.makedirs(d)
    open(os.path.join(d, "keep.txt"), "w").write("x")
    p = fattn("golden", "-o", d)
    assert p.returncode == 2 and "not empty" in p.stderr, p.stderr
    p = fattn("golden", "-o", d, "--force", "--allow-dirty", env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert p.returncode == 0, p.stderr
    files = [f for f in os.listdir(d) if f.endswith(".h5")]
    assert files == ["cpu-math-1.h5"], files
    per_case = os.path.getsize(os.path.join(d, files[0])) / max(1, len(h5py.File(
        os.path.join(d, files[0]), "r")["cases"]))
    assert per_case <= 300 * 1024, per_case
    p = fattn("verify", "--fixtures", d)
    assert p.returncode == 0, p.stdout[-1500:]


def first_backward_tensor(f):
    for cid in f["cases"]:
        g = f["cases"][cid]
        if "backward" in g and "dq" in g["backward"]:
            return cid, g["backward/dq"]
    raise AssertionError("no case with backward/dq in the goldens")


@test("a golden with one flipped bit (digest recomputed) fails verify naming the tensor")
def _():
    d = os.path.join(TMP, "flipped")
    shutil.copytree(FIXTURES, d)
    path = os.path.join(d, "cpu-math-1.h5")
    with h5py.File(path, "r+") as f:
        cid, ds = first_backward_tensor(f)
        data = ds[()]
        flat = data.reshape(-1).view(np.uint16 if data.dtype.itemsize == 2 else
                                     np.uint32 if data.dtype.itemsize == 4 else np.uint8)
        flat[len(flat) // 2] ^= 1
        ds[...] = data
        digest = subprocess.run([XXH128], input=data.tobytes(), capture_output=True,
                                check=True).stdout.decode().strip()
        ds.attrs.modify("digest", digest)
    p = fattn("inspect", path)
    assert p.returncode == 0, "the edited golden should still be a valid file: " + p.stderr
    p = fattn("verify", "--fixtures", d, "--filter", cid)
    assert p.returncode == 1, (p.returncode, p.stdout[-1500:])
    assert "golden: backward/dq" in p.stdout, p.stdout[-1500:]


@test("no goldens for this platform key: CPU goldens within tolerance, saying so")
def _():
    d = os.path.join(TMP, "other-key")
    os.makedirs(d)
    shutil.copy(os.path.join(FIXTURES, "cpu-math-1.h5"), os.path.join(d, "cpu-math-0.h5"))
    with h5py.File(os.path.join(d, "cpu-math-0.h5"), "r+") as f:  # another CPU math
        f.attrs.modify("cpu_math_version", np.int64(0))
    p = fattn("verify", "--fixtures", d)
    assert p.returncode == 0, p.stdout[-1500:]
    assert "within tolerance" in p.stdout and "no goldens for platform key" in p.stdout
    assert "dropout: same-engine only" in p.stdout
    # a value moved by far more than the tolerance is caught and named
    path = os.path.join(d, "cpu-math-0.h5")
    with h5py.File(path, "r+") as f:
        cid, ds = first_backward_tensor(f)
        out = f["cases"][cid]["forward/out"]
        data = out[()]
        if out.attrs["dtype"] == "bfloat16":
            v = ((data.astype(np.uint32) << 16).view(np.float32)).copy()
            v.reshape(-1)[0] = v.reshape(-1)[0] * 1.5 + 0.25
            data = (v.view(np.uint32) >> 16).astype(np.uint16)
        else:
            data = data.copy()
            data.reshape(-1)[0] = data.reshape(-1)[0] * 1.5 + 0.25
        out[...] = data
        digest = subprocess.run([XXH128], input=data.tobytes(), capture_output=True,
                                check=True).stdout.decode().strip()
        out.attrs.modify("digest", digest)
    p = fattn("verify", "--fixtures", d, "--filter", cid)
    assert p.returncode == 1, (p.returncode, p.stdout[-1500:])
    assert "golden (tolerance): forward/out" in p.stdout, p.stdout[-1500:]


@test("goldens of the same engine identity under another name: bitwise, saying so; a case "
      "that ran other plans is compared as without goldens of its own")
def _():
    d = os.path.join(TMP, "identity")
    os.makedirs(d)
    shutil.copy(os.path.join(FIXTURES, "cpu-math-1.h5"), os.path.join(d, "cpu-elsewhere.h5"))
    p = fattn("verify", "--fixtures", d, "-k", "layout.")
    assert p.returncode == 0, p.stdout[-1500:]
    assert "goldens: bitwise against cpu-elsewhere.h5 (no goldens for platform key cpu-math-1; "\
        "the same engine identity: CPU math 1, the same plans)" in p.stdout, p.stdout[-800:]
    # one case's golden ran another engine config; CPU goldens of another
    # math are there to fall back on
    shutil.copy(os.path.join(FIXTURES, "cpu-math-1.h5"), os.path.join(d, "cpu-math-0.h5"))
    with h5py.File(os.path.join(d, "cpu-math-0.h5"), "r+") as f:
        f.attrs.modify("cpu_math_version", np.int64(0))
    with h5py.File(os.path.join(d, "cpu-elsewhere.h5"), "r+") as f:
        g = f["cases/layout.sb3hd.causal.f16"]
        g["forward"].attrs["prov_engine_tag"] = "eng7_k3=1"
        if "attrs_digest" in g.attrs:
            del g.attrs["attrs_digest"]
    p = fattn("verify", "--fixtures", d, "-k", "layout.")
    assert p.returncode == 0, p.stdout[-1500:]
    row = [l for l in p.stdout.splitlines() if l.startswith("layout.sb3hd.causal.f16 ")]
    assert row and "ok (other plans than the goldens': not bitwise)" in row[0], p.stdout
    assert "the same engine identity: CPU math 1) where a case ran the same plans; 1 case ran " \
        "other plans: within tolerance against the CPU goldens" in p.stdout, p.stdout[-800:]


@test("prov_* attributes (engine tags) are provenance: a golden carrying one still passes")
def _():
    d = os.path.join(TMP, "prov")
    shutil.copytree(FIXTURES, d)
    with h5py.File(os.path.join(d, "cpu-math-1.h5"), "r+") as f:
        for cid in f["cases"]:
            g = f["cases"][cid]
            if "forward" in g:
                g["forward"].attrs["prov_engine_tag"] = "eng2_k24=7"
            if "attrs_digest" in g.attrs:  # an edit by hand: a file from before the digest
                del g.attrs["attrs_digest"]
    p = fattn("verify", "--fixtures", d)
    assert p.returncode == 0, p.stdout[-1500:]


@test("a missing fixtures directory exits 2")
def _():
    p = fattn("verify", "--fixtures", os.path.join(TMP, "nowhere"))
    assert p.returncode == 2 and "nowhere" in p.stderr, p.stderr


def make_mutant_test(mutant, target):
    @test("mutant %s is caught: exit 1 naming %s" % (mutant, target))
    def _():
        if mutant in MUTANT_ONLY_CHECK and os.environ.get("FATTN_BUILD_TESTING", "1") != "1":
            return "SKIP the engine-fault checks need a build with -Dtesting=true"
        exe = MUTANT_EXES.get("fattn-mutant-" + mutant)
        assert exe, "no fattn-mutant-%s among %s" % (mutant, sorted(MUTANT_EXES))
        p = fattn("verify", "--fixtures", FIXTURES, exe=exe)
        assert p.returncode == 1, (p.returncode, p.stdout[-1500:], p.stderr[-500:])
        assert target in p.stdout, p.stdout[-2500:]
        assert "behavior-neutral: NO" in p.stdout, (p.stdout[-2500:], p.stderr[-1500:])
        failed = [ln.split()[0] for ln in p.stdout.splitlines()
                  if re.search(r"  (DIFFERENT \(\d+\)|ERROR): ", ln)]
        if mutant.startswith("fp8_"):  # FP8 plumbing: no f16 case may see it
            assert failed and all(c.startswith("fp8.") or ".fp8." in c for c in failed), failed
        if mutant in MUTANT_ONLY_CASES:
            assert set(failed) == MUTANT_ONLY_CASES[mutant], failed
        if mutant in MUTANT_ONLY_CHECK:
            rows = [ln for ln in p.stdout.splitlines() if re.search(r"  DIFFERENT \(\d+\): ", ln)]
            assert rows and all(MUTANT_ONLY_CHECK[mutant] in ln for ln in rows), rows[:3]


@test("a difference is reported as a person acts on it: first index, both values, max abs/rel/ULP, and commands that reproduce it")
def _():
    if not MUTANTS:
        return "SKIP needs a -Dself_test_mutants=true build"
    exe = MUTANT_EXES["fattn-mutant-dedup_k_as_v"]
    p = fattn("verify", "--fixtures", FIXTURES, exe=exe)
    assert p.returncode == 1, p.stdout[-1500:]
    out = p.stdout
    assert "legacy vs split: save_ctx/k: first at [0,0,0,0] (flat 0): A " in out, out[-2500:]
    assert "(0x" in out and "max abs" in out and "max rel" in out and "max ULP" in out
    lines = out.splitlines()
    i = lines.index("reproduce:")
    cmd = lines[i + 1].strip()
    # it runs as pasted: this very fattn, by its path
    exe_real = os.path.realpath(exe)
    assert cmd.startswith(exe_real + " run --filter layout.") and \
        exe_real + " diff legacy.h5 split.h5" in cmd, cmd
    d = os.path.join(TMP, "repro")
    os.makedirs(d)
    r = subprocess.run(cmd, shell=True, cwd=d, capture_output=True, text=True)
    assert r.returncode == 1, (r.returncode, r.stdout[-1500:], r.stderr[-500:])
    assert "save_ctx/k" in r.stdout, r.stdout[-1500:]


if MUTANTS:
    for m, t in MUTANT_TARGETS.items():
        make_mutant_test(m, t)


@test("the earliest cause first: a backward engine-call argument slipped in the split is named "
      "with both values in every failing row, the states before it equal, and the contrast "
      "names the window (causal's (-1,0) among its values)")
def _():
    if not MUTANTS:
        return "SKIP needs a -Dself_test_mutants=true build"
    import json
    exe = MUTANT_EXES["fattn-mutant-bwd_window_left_from_right"]
    jpath = os.path.join(TMP, "cause.json")
    p = fattn("verify", "--fixtures", FIXTURES, "--json", jpath, exe=exe)
    assert p.returncode == 1, (p.returncode, p.stdout[-1500:], p.stderr[-500:])
    rows = [l for l in p.stdout.splitlines() if re.search(r"  DIFFERENT \(\d+\): ", l)]
    assert len(rows) >= 20, p.stdout[-2500:]
    # a schedule's row names the step: its earlier steps equal, then the
    # backward's call in the first step with a backward
    cause = re.compile(r"DIFFERENT \(\d+\): legacy vs split: (?:inputs, engine_call/forward, "
                       r"forward, save_ctx equal; |steps/1(?: to steps/\d+)? equal; "
                       r"(?=steps/(\d+)/))(?:steps/\d+/)?engine_call/backward@window_size_left: "
                       r"legacy (-?\d+), split (-?\d+); then (?:steps/\d+/)?backward")
    values = [cause.search(r) for r in rows]
    assert all(values), [r for r, v in zip(rows, values) if not v][:3]
    assert all(v.group(2) != v.group(3) for v in values)
    causal = [r for r in rows if r.startswith("layout.bshd_bshd_bshd.causal.bf16 ")]
    assert causal and "window_size_left: legacy -1, split 0;" in causal[0], rows[:3]
    # the window decides, not the mask: raw.window_m1m1's causal cases train
    # with window (-1,-1) and pass, so "mask causal" has misses and the
    # normalised window (causal's (-1,0) among the values) has none but a
    # training case under inference_mode (no backward to slip)
    m = re.search(r"^contrast: the (\d+) failing cases all have window in \{([^}]*)\} and "
                  r"training yes; (?:none of the (\d+) passing cases have both|so do (\d+) "
                  r"of the \d+ passing cases); no case with "
                  r"window \(-1,-1\) fails", p.stdout, re.M)
    assert m and int(m.group(1)) == len(rows), p.stdout[-2500:]
    assert "(-1,0)" in m.group(2).split(", ") and "(-1,-1)" not in m.group(2), m.group(2)
    j = json.load(open(jpath))
    bad = [c for c in j["cases"] if c["result"] == "different"]
    assert len(bad) == len(rows)
    for c in bad:
        assert c["cause"]["check"] == "legacy vs split", c["cause"]
        assert c["cause"]["state"] == "engine_call/backward", c["cause"]
        # a schedule's cause names its step; the steps before it are equal
        at = f"steps/{c['cause']['step']}/" if c["cause"].get("step") else ""
        if not at:
            assert c["cause"]["equal_before"] == ["inputs", "engine_call/forward", "forward",
                                                  "save_ctx"], c["cause"]
        first = c["first"][0]
        assert (first["path"], first["side_a"], first["side_b"]) == \
            (f"legacy vs split: {at}engine_call/backward@window_size_left", "legacy",
             "split"), first
        assert first["a"] != first["b"] and int(first["b"]) >= -1, first
        # every difference listed, the count of them the case's count
        assert len(c["first"]) == c["differences"], c
    assert j["contrast"]["features"] == ["window", "training"], j["contrast"]
    assert j["contrast"]["failing"] == len(rows), j["contrast"]
    # fattn-te computes the contrast in Python (tools/te/fattn_te/cause.py) over
    # `fattn cases --resolved --json`'s features: over the same cases it says
    # what verify says, word for word
    te_cause = te_cause_module()
    r = subprocess.run([exe, "cases", "--resolved", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-500:]
    # (a case that does not resolve, a refusal, has no features)
    resolved = json.loads(r.stdout)
    feats = {c["id"]: c["features"] for c in resolved if "features" in c}
    expect_refusal = {c["id"] for c in resolved if c["spec"].get("expect_refusal")}
    # as verify splits them (cmd_verify_text.c): a difference or an error fails,
    # refusal cases and skipped ones are on neither side
    ran = [c for c in j["cases"] if c["id"] not in expect_refusal and c["result"] != "skipped"]
    py = te_cause.contrast(feats, [c["id"] for c in ran if c["result"] in ("different", "error")],
                           [c["id"] for c in ran if c["result"] == "ok"])
    line = next(l for l in p.stdout.splitlines() if l.startswith("contrast: "))
    assert py["text"] == line, (py["text"], line)
    assert py["features"] == j["contrast"]["features"], (py, j["contrast"])


def te_cause_module():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "tools", "te"))
    from fattn_te import cause  # pure Python: needs neither torch nor TE
    return cause


@test("fattn-te's contrast weighs every feature fattn lists, in fattn's order: a grad mode "
      "or a cache that alone tells failing cases from passing ones is named")
def _():
    cause = te_cause_module()
    base = {"mask": "causal", "dtype": "bf16", "grad_mode": "grad", "max_batch_size": "no"}
    for key, bad in (("grad_mode", "no_grad"), ("max_batch_size", "yes")):
        feats = {f"c{i}": dict(base, **({key: bad} if i < 2 else {})) for i in range(4)}
        out = cause.contrast(feats, ["c0", "c1"], ["c2", "c3"])
        assert out["features"] == [key], (key, out)
        assert out["text"].startswith(f"contrast: the 2 failing cases all have {key} {bad}; "
                                      "none of the 2 passing cases have that"), out["text"]
    # ties go to the feature fattn lists first: mask before dtype (not the names' order)
    feats = {f"c{i}": dict(base, **({"dtype": "f16", "mask": "padding"} if i < 2 else {}))
             for i in range(4)}
    assert cause.contrast(feats, ["c0", "c1"], ["c2", "c3"])["features"] == ["mask"]


@test("a failure of the split's wrapper alone is a difference naming the wrapper (exit 1), "
      "and every FP8 case that ran counts as exercised")
def _():
    if not MUTANTS:
        return "SKIP needs a -Dself_test_mutants=true build"
    import json
    exe = MUTANT_EXES["fattn-mutant-wrapper_fp8_d_out_dropped"]
    jpath = os.path.join(TMP, "wrapper.json")
    p = fattn("verify", "--filter", "fp8.*", "--json", jpath, exe=exe)
    assert p.returncode == 1, (p.returncode, p.stdout[-1500:])
    n_fp8 = len([l for l in fattn("cases", "--filter", "fp8.*").stdout.splitlines()])
    assert "FP8: exercised (%d cases;" % n_fp8 in p.stdout, p.stdout[-800:]
    cases = json.load(open(jpath))["cases"]
    bad = [c for c in cases if c["result"] != "ok"]
    assert bad and all(c["result"] == "different" for c in bad), bad
    assert all(c["first"][0]["path"] == "legacy vs split wrapper: engine_call/backward" and
               c["first"][0]["why"].startswith("split wrapper failed") for c in bad), bad


@test("a side that errors in a later state: both sides' status and message, table and JSON")
def _():
    if not MUTANTS:
        return "SKIP needs a -Dself_test_mutants=true build"
    import json
    exe = MUTANT_EXES["fattn-mutant-bwd_dropout_bound"]
    jpath = os.path.join(TMP, "sides.json")
    p = fattn("verify", "--filter", "dropout.p0.1.f16", "--json", jpath, exe=exe)
    assert p.returncode == 1, (p.returncode, p.stdout[-1500:], p.stderr[-500:])
    why = "split: FATTN_E_INVALID_ARG: case dropout.p0.1.f16 (split, state backward): " \
          "split backward: dropout_p 0.1 out of range"
    row = [l for l in p.stdout.splitlines() if l.startswith("dropout.p0.1.f16 ")]
    assert row and "legacy: ok (every state); " + why in row[0], p.stdout
    assert "\n  legacy: ok (every state)\n  " + why + "\n" in p.stdout, p.stdout
    c = json.load(open(jpath))["cases"][0]
    assert c["legacy"] == {"status": "FATTN_OK", "message": ""}, c
    assert c["split"]["status"] == "FATTN_E_INVALID_ARG", c
    assert "dropout_p 0.1 out of range" in c["split"]["message"], c
    # an unchanged build names no sides
    p = fattn("verify", "--filter", "dropout.p0.1.f16", "--json", jpath)
    assert p.returncode == 0 and "legacy" not in json.load(open(jpath))["cases"][0]


@test("expect_refusal: the default matrix's refusals are checked cases; a split that stops refusing is named")
def _():
    p = fattn("verify", "--filter", "refuse.*")
    assert p.returncode == 0, p.stdout[-1500:]
    assert "refusals checked: 21 (" in p.stdout, p.stdout
    assert "ok (refused as expected: FATTN_E_INVALID_CASE, rule swa_restrictions)" in p.stdout
    if not MUTANTS:
        return "SKIP the mutant half needs a -Dself_test_mutants=true build"
    p = fattn("verify", "--filter", "refuse.*", exe=MUTANT_EXES["fattn-mutant-support_no_dropout"])
    assert p.returncode == 1, (p.returncode, p.stdout[-1500:])
    row = [l for l in p.stdout.splitlines() if l.startswith("refuse.swa_dropout.f16 ")]
    assert row and "DIFFERENT" in row[0] and "@refused_" in row[0], p.stdout
    assert "refusals checked: 20 (" in p.stdout, p.stdout


@test("only raw_func_args reaches the inference_dropout mutant: the same cases without it pass")
def _():
    if not MUTANTS:
        return "SKIP needs a -Dself_test_mutants=true build"
    exe = MUTANT_EXES["fattn-mutant-inference_dropout"]
    import json
    p = fattn("cases", "--filter", "inference.raw_dropout.*", "--resolved", "--json")
    assert p.returncode == 0, p.stderr
    specs = [e["spec"] for e in json.loads(p.stdout)]
    assert len(specs) >= 2 and all(s["raw_func_args"] for s in specs), specs
    for s in specs:  # other ids: the goldens hold these ids with raw_func_args
        del s["raw_func_args"]
        s["id"] += ".dpa"
    path = os.path.join(TMP, "dpa-dropout.json")
    json.dump(specs, open(path, "w"))
    p = fattn("verify", "--cases", path, exe=exe)
    assert p.returncode == 0, (p.returncode, p.stdout[-1500:])


def main():
    failed = tap.run(TESTS)
    shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
