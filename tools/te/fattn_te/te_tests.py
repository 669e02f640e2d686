"""tools/te/te-tests: TE's own attention tests as a case file (docs/te.md,
"TE's tests as a matrix").

TE's test modules (tests/pytorch/attention/test_attention.py, with
tests/pytorch/utils.py) are imported on the CPU through fattn's shim and a
pytest stand-in (pytest_stub.py), on a platform (te_platform.py: sm_90,
a cuDNN version, flash-attn 2 installed; nvte_get_fused_attn_backend as
te_backend.py transcribes it). Every test function whose runner builds a
DotProductAttention is called with every parameter combination its
decorators give, as pytest would, and TE's own code decides what happens:
its skips, its get_available_attention_backends (TE's get_attention_backend
from the tree's Python), and whether it calls the runner with
FusedAttention. The runners themselves are replaced by recorders: a call
that would run FusedAttention is recorded as the FusedAttnFunc call it
makes, a fattn case spec; no attention runs.

Each case keeps TE's shapes where the CPU engine can afford them and is
scaled down otherwise (batch, heads keeping the GQA ratio, sequence
lengths and windows keeping their relations; head dims always kept).
Identical calls are one case. The provenance file names, per case, every
TE test id (with its pass: cuDNN version, determinism) that makes the call
and how its shape was kept or scaled.

test_kv_cache.py (te_kv_cache.py) runs too, in the non-deterministic
passes only, as TE's QA runs it: each DotProductAttention configuration it
runs with FusedAttention is one case whose schedule holds the cache steps
its Simulation takes.

What is not translated (reported on stderr with counts, and in the
provenance file): the tests whose runners build a MultiheadAttention or
TransformerLayer (their attention inputs are projections, FP8 Float8Tensors
under fp8_mha), the FP8 extra-state schedule, and of test_kv_cache.py the
TransformerLayer and CUDA-graph configurations."""
import argparse
import collections
import hashlib
import importlib.util
import json
import logging
import os
import sys

from . import loader, pytest_stub, te_kv_cache, te_platform

# The runners of test_attention.py that build a DotProductAttention
# directly; their FusedAttention calls are recorded.
DPA_RUNNER = "_run_dot_product_attention"
FP8_RUNNER = "_run_dpa_fp8_vs_f16"
# The runners not translated, and why (the report's note).
NOT_TRANSLATED = {
    "_run_transformer_layer": "TransformerLayer: the attention inputs are its projections",
    "_run_mha_fp8_vs_f16": "MultiheadAttention (fp8_mha: FP8 inputs and outputs from its "
                           "linear layers)",
    "_run_custom_mha_fp8": "a custom MHA with FP8 GEMMs around the attention",
    "_run_ref_mha_f16": "the custom MHA's f16 reference",
    "_run_dpa_fp8_extra_state": "a schedule of FP8 iterations with a checkpoint round trip",
}
# TE's QA script (qa/L0_pytorch_unittest/test.sh) runs test_attention.py
# with and without NVTE_ALLOW_NONDETERMINISTIC_ALGO=0, test_kv_cache.py
# only without
KV_NOTE = "test_kv_cache.py runs in the non-deterministic passes only, as TE's QA runs it"
# CPU budget of one case: b*h*sq*skv*max(d_qk, d_v) (the default matrix's
# cases are at most ~2e5; verify runs each about a dozen times)
BUDGET = 1 << 16
PASSES = [(91900, False), (91900, True), (92100, False), (92100, True)]


class ToolError(Exception):
    pass


def _dtype_name(dtype):
    import torch
    return {torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(dtype)


def _short(dtype_name):
    return {"float16": "f16", "bfloat16": "bf16"}[dtype_name]


def import_test_module(tests_dir, relpath, name):
    """One of TE's test modules, imported as pytest would (its folder's
    parent, tests/pytorch, on sys.path for `utils`)."""
    path = os.path.join(tests_dir, relpath)
    if not os.path.isfile(path):
        raise ToolError("%s: no such file (--tests names TE's tests/pytorch folder)" % path)
    if tests_dir not in sys.path:
        sys.path.insert(0, tests_dir)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# ---- the recorded calls -> specs ---------------------------------------------


def _scale(n, f):
    """A sequence length scaled by f: one token stays one (decoding), more
    stay more than one."""
    return n if n <= 1 else max(2, n // f)


def scaled_shape(c):
    """The case's shape within BUDGET: (b, h, hg, sq, skv, window), and a
    note. Head dims are kept (the support rules read them)."""
    b, h, hg, sq, skv = c["b"], c["h"], c["hg"], c["sq"], c["skv"]
    win = list(c["window"])
    b2 = min(b, 2)
    r = h // hg
    if r == 1:
        hg2 = h2 = min(h, 2)
    elif hg == 1:
        hg2, h2 = 1, min(h, 4)
    else:
        hg2 = min(hg, 2)
        h2 = hg2 * min(r, 2)
    d = max(c["d_qk"], c["d_v"])
    f = 1
    while b2 * h2 * _scale(sq, f) * _scale(skv, f) * d > BUDGET and (
            _scale(sq, f) > 8 or _scale(skv, f) > 8):
        f *= 2
    sq2, skv2 = _scale(sq, f), _scale(skv, f)
    # the order of sq and skv is kept (cross attention, bottom-right masks)
    if sq < skv and sq2 >= skv2:
        skv2 = 2 * sq2
    elif sq > skv and sq2 <= skv2:
        sq2 = 2 * skv2
    win2 = [w if w <= 0 else max(1, w // f) for w in win]
    new = (b2, h2, hg2, sq2, skv2, win2)
    old = (b, h, hg, sq, skv, win)
    if new == old:
        return new, "kept"
    note = "scaled from b %d h %d hg %d sq %d skv %d%s to b %d h %d hg %d sq %d skv %d%s" % (
        b, h, hg, sq, skv, " window %s" % win if win != [-1, -1] else "", b2, h2, hg2, sq2,
        skv2, " window %s" % win2 if win2 != [-1, -1] else "")
    return new, note


def spec_of_call(call):
    """The fattn case spec (without id) of a recorded FusedAttnFunc call,
    and its shape note."""
    (b, h, hg, sq, skv, win), note = scaled_shape(call)
    s = {"b": b, "h": h, "hg": hg, "sq": sq, "skv": skv, "d_qk": call["d_qk"],
         "d_v": call["d_v"], "dtype": call["dtype"], "layout": call["layout"],
         "mask": call["mask"], "is_training": call["is_training"],
         "deterministic": call["deterministic"]}
    if win != [-1, -1]:
        s["window"] = win
    if call["bias"] != "no_bias":
        s["bias"] = call["bias"]
    if call["bias"] == "post_scale_bias":
        s["bias_shape"] = call["bias_shape"]
        s["bias_no_grad"] = True  # the tests' bias tensors require no grad
    if call["softmax"] != "vanilla":
        s["softmax"] = call["softmax"]
    if call["dropout_p"]:
        s["dropout_p"] = call["dropout_p"]
    if call["return_max_logit"]:
        s["return_max_logit"] = True
    if call["pad_between_seqs"]:
        s["pad_between_seqs"] = True
    if call.get("fp8"):
        s["fp8"] = call["fp8"]
    return s, note


def _window(config):
    w = getattr(config, "window_size", (-1, -1))
    return [int(w[0]), int(w[1])]


def _mask_for_call(config):
    return config.attn_mask_type


def call_of_dpa(args, deterministic):
    """_run_dot_product_attention(dtype, config, backend, ckpt_attn,
    qkv_layout, pad_between_seqs, is_training, declarative_packed=False) ->
    the FusedAttnFunc call DotProductAttention makes: the config as the test
    left it (thd masks made padding, windows normalised), a custom ALiBi
    slope given as the post_scale_bias FusedAttention makes of it
    (dot_product_attention.py: fu_core_attention_bias_type)."""
    dtype, config, _backend, _ckpt, layout, pad_between_seqs, is_training = args[:7]
    bias, bias_shape = config.attn_bias_type, config.bias_shape
    if bias == "alibi" and getattr(config, "alibi_type", "none") == "custom":
        bias = "post_scale_bias"
        bias_shape = "bhss" if config.bias_shape == "bhss" else "1hss"
    return {"b": config.batch_size, "h": config.num_heads, "hg": config.num_gqa_groups,
            "sq": config.max_seqlen_q, "skv": config.max_seqlen_kv, "d_qk": config.head_dim_qk,
            "d_v": config.head_dim_v, "dtype": _dtype_name(dtype), "layout": layout,
            "mask": _mask_for_call(config), "bias": bias, "bias_shape": bias_shape,
            "softmax": config.softmax_type, "window": _window(config),
            "dropout_p": float(config.dropout_p), "is_training": bool(is_training),
            "deterministic": bool(deterministic),
            "return_max_logit": bool(config.return_max_logit),
            "pad_between_seqs": bool(pad_between_seqs)}


def _recipe_name(r):
    n = type(r).__name__
    return {"DelayedScaling": "delayed", "Float8CurrentScaling": "current",
            "MXFP8BlockScaling": "mxfp8", "Float8BlockScaling": "block"}.get(n, n)


def call_of_fp8(args, deterministic):
    """_run_dpa_fp8_vs_f16(dtype, config, fp8_dpa, qkv_layout, is_training,
    fp8_recipe): DotProductAttention under autocast(enabled=fp8_dpa) on f16
    inputs: FusedAttnFunc's FP8 branch with the recipe's quantizers (no FP8
    input or output), NVTE_FP8_DPA_BWD as the test set it; or its f16 path."""
    dtype, config, fp8_dpa, layout, is_training, recipe = args[:6]
    qkv_format = "".join(ch for ch in layout.split("_")[0] if ch.isalpha())
    c = call_of_dpa((dtype, config, None, False, layout, False, is_training), deterministic)
    if qkv_format == "thd" and "padding" not in c["mask"]:
        c["mask"] = "padding" if c["mask"] == "no_mask" else "padding_" + c["mask"]
    if fp8_dpa:
        fp8 = {"recipe": _recipe_name(recipe)}
        if os.environ.get("NVTE_FP8_DPA_BWD", "1") == "0":
            fp8["dpa_bwd"] = False
        if os.environ.get("NVTE_DPA_FP8CS_O_in_F16", "1") == "0":
            fp8["o_in_f16"] = False
        c["fp8"] = fp8
    return c


class Recorder:
    """The runners replaced: what each test invocation asked FusedAttention
    to run, and of the runners not translated, how often they were
    reached."""

    def __init__(self, mod):
        import torch
        self.mod = mod
        self.calls = []
        self.untranslated = collections.Counter()
        self.deterministic = False
        # one output for every backend, so that the test's comparisons pass
        # (a spread, for the FP8 tests' RMSE against the outputs' range)
        z = torch.tensor([0.0, 1.0])
        self.out = (z, z, (z, z, z))

        def dpa(*args, **kwargs):
            if args[2] == "FusedAttention":
                self.calls.append(call_of_dpa(args, self.deterministic))
            return self.out

        def fp8(*args, **kwargs):
            if os.environ.get("NVTE_FUSED_ATTN") == "1" and \
                    os.environ.get("NVTE_FLASH_ATTN") == "0":
                self.calls.append(call_of_fp8(args, self.deterministic))
            return z, (z, z, z)

        def untranslated(name):
            def run(*args, **kwargs):
                self.untranslated[name] += 1
                raise pytest_stub.Skipped("te-tests: %s is not translated" % name)
            return run

        setattr(mod, DPA_RUNNER, dpa)
        setattr(mod, FP8_RUNNER, fp8)
        for name in NOT_TRANSLATED:
            if hasattr(mod, name):
                setattr(mod, name, untranslated(name))


def run_tests(mod, rec, module_file, label):
    """Every test function of mod, every parameter combination: the calls
    recorded, each with its TE test id. Returns (calls, counts)."""
    out, counts = [], collections.Counter()
    for name in sorted(n for n in vars(mod) if n.startswith("test_")):
        fn = getattr(mod, name)
        if not callable(fn):
            continue
        for tid, kwargs, skip in pytest_stub.expand(fn):
            test_id = "%s::%s[%s]" % (module_file, name, tid) if tid else \
                "%s::%s" % (module_file, name)
            if skip:
                counts["skipped (mark)"] += 1
                continue
            n0 = len(rec.calls)
            pytest_stub.run(fn, kwargs, counts)  # a failed test's calls are kept too
            for call in rec.calls[n0:]:
                out.append((call, test_id, label))
    return out, counts


def case_id(call, test_id, taken):
    """A readable, stable id: te.<test>.<config>.<layout>.<dtype>[.flags]."""
    fn = test_id.split("::")[1].split("[")[0].replace("test_", "")
    params = test_id.split("[", 1)[1].rstrip("]") if "[" in test_id else ""
    model = next((p for p in params.split("-") if "_" in p and p[0].isalpha() and
                  not p.startswith(("sbh", "bsh", "thd", "sb3", "bs3", "t3", "th3"))), "")
    parts = ["te", fn] + ([model] if model else []) + [call["layout"], _short(call["dtype"])]
    if call.get("fp8"):
        parts.insert(2, "fp8_" + call["fp8"]["recipe"])
    if not call["is_training"]:
        parts.append("infer")
    if call["pad_between_seqs"]:
        parts.append("pbs")
    if not call["deterministic"]:
        parts.append("nondet")
    base = ".".join(p.replace("/", "_") for p in parts)
    cid, k = base, 2
    while cid in taken:
        cid, k = "%s.%d" % (base, k), k + 1
    return cid


def build(records):
    """records [(call, test id, pass label)] -> (cases, provenance):
    identical calls are one case."""
    by_key, order = {}, []
    for call, test_id, label in records:
        spec, note = (te_kv_cache.spec_of_call if "steps" in call else spec_of_call)(call)
        key = json.dumps(spec, sort_keys=True)
        if key not in by_key:
            by_key[key] = {"spec": spec, "tests": [], "shapes": set(), "first": (call, test_id)}
            order.append(key)
        e = by_key[key]
        e["tests"].append("%s (%s)" % (test_id, label))
        e["shapes"].add(note)
    cases, prov, taken = [], {}, set()
    seed = 6001
    for key in order:
        e = by_key[key]
        cid = case_id(e["first"][0], e["first"][1], taken)
        taken.add(cid)
        case = dict(e["spec"], id=cid, seed=seed)
        seed += 1
        cases.append(case)
        prov[cid] = {"tests": sorted(set(e["tests"])), "shape": sorted(e["shapes"])}
    cases.sort(key=lambda c: c["id"])
    return cases, prov


def _label(cudnn, det):
    return "cuDNN %d.%d.%d, %s" % (cudnn // 10000, cudnn // 100 % 100, cudnn % 100,
                                   "deterministic" if det else "non-deterministic")


def _set_pass(shim, cudnn, det):
    """The platform of one pass: cuDNN's version and TE's determinism."""
    shim.get_fused_attn_backend = te_platform.make_get_fused_attn_backend(90, cudnn)
    shim.get_cudnn_version = lambda v=cudnn: v
    te_platform.patch_te(90, cudnn)
    te_platform.pretend_flash_attn_2()
    os.environ["NVTE_ALLOW_NONDETERMINISTIC_ALGO"] = "0" if det else "1"


def collect(te_root, tests_dir, passes):
    """Every pass's records and counts: test_attention.py's, then
    test_kv_cache.py's (after them, so that the cases of the first keep
    their seeds)."""
    import torch  # noqa: F401  (TE's import needs it first)
    sys.modules["pytest"] = pytest_stub.make_module()
    te_platform.patch_torch_cuda(90)
    shim = te_platform.shim_module(90, passes[0][0])
    loader.import_backends(te_root, module=shim)
    records, report = [], []
    logging.disable(logging.WARNING)
    for cudnn, det in passes:
        _set_pass(shim, cudnn, det)
        # imported per pass: its skipif marks and _deterministic are read at import
        mod = import_test_module(tests_dir, os.path.join("attention", "test_attention.py"),
                                 "te_test_attention_%d_%d" % (cudnn, det))
        rec = Recorder(mod)
        rec.deterministic = det
        recs, counts = run_tests(mod, rec, "tests/pytorch/attention/test_attention.py",
                                 _label(cudnn, det))
        records += recs
        report.append((_label(cudnn, det), len(recs), counts, dict(rec.untranslated)))
    for cudnn, det in passes:
        if det:
            continue
        _set_pass(shim, cudnn, det)
        # imported per pass: its runs write the module's ModelConfigs
        kv = import_test_module(tests_dir, os.path.join("attention", "test_kv_cache.py"),
                                "te_test_kv_cache_%d" % cudnn)
        rec = te_kv_cache.Recorder(kv)
        recs, counts = te_kv_cache.run_tests(kv, rec, _label(cudnn, det), det)
        records += recs
        report.append(("test_kv_cache.py, " + _label(cudnn, det), len(recs), counts,
                       dict(rec.untranslated)))
    return records, report


def provenance_doc(prov, te_rev, tests_rev, passes):
    return {"schema": "fattn-te-tests/1",
            "te_python": te_rev, "te_tests": tests_rev,
            "platform": {"sm": 90, "cudnn": [p[0] for p in passes][::2],
                         "flash_attn": te_platform.FLASH_ATTN_VERSION},
            "passes": [_label(c, d) for c, d in passes],
            "budget": "b*h*sq*skv*max(d_qk,d_v) <= %d" % BUDGET,
            "not_translated": dict(NOT_TRANSLATED, **{
                "test_kv_cache[%s]" % k: v for k, v in te_kv_cache.NOT_TRANSLATED.items()}),
            "kv_cache": te_kv_cache.provenance(KV_NOTE),
            "cases": prov}


def write_json(path, obj, lines=False):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        if lines:  # one case a line, as golden/default_cases.json
            f.write("[\n" + ",\n".join("  " + json.dumps(c) for c in obj) + "\n]\n")
        else:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="te-tests",
        description="TE's own attention tests as a fattn case file: the FusedAttnFunc calls "
                    "test_attention.py makes on sm_90 (cuDNN 9.19.0 and 9.21.0, "
                    "deterministic and not), and test_kv_cache.py's simulations as schedules "
                    "of cache steps (non-deterministic), TE's backend selection deciding "
                    "(docs/te.md).")
    p.add_argument("--te", required=True,
                   help="TE's Python: a checkout, an unpacked wheel, or the folder holding "
                        "transformer_engine/")
    p.add_argument("--tests", help="TE's tests/pytorch folder (default: the --te checkout's)")
    p.add_argument("--te-rev", default="", help="what --te is, for the provenance")
    p.add_argument("--tests-rev", default="", help="what --tests is, for the provenance")
    p.add_argument("-o", "--output", required=True, help="the case file to write")
    p.add_argument("--provenance", help="the provenance file (default: OUTPUT with "
                                        ".provenance.json for .json)")
    a = p.parse_args(argv)
    tests_dir = os.path.abspath(a.tests or os.path.join(a.te, "tests", "pytorch"))
    prov_path = a.provenance or (a.output[:-5] if a.output.endswith(".json") else a.output) + \
        ".provenance.json"
    for out in (a.output, prov_path):
        d = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(d):
            print("te-tests: %s: no such directory" % d, file=sys.stderr)
            return 2
    try:
        records, report = collect(os.path.abspath(a.te), tests_dir, PASSES)
    except (ToolError, loader.TEImportError) as e:
        print("te-tests: %s" % e, file=sys.stderr)
        return 2
    cases, prov = build(records)
    write_json(a.output, cases, lines=True)
    write_json(prov_path, provenance_doc(prov, a.te_rev, a.tests_rev, PASSES))
    for label, n, counts, untr in report:
        print("te-tests: %s: %d FusedAttention calls; tests %s; not translated %s" % (
            label, n, dict(sorted(counts.items())), dict(sorted(untr.items()))),
              file=sys.stderr)
    print("te-tests: wrote %d cases (%d calls) to %s, provenance to %s" % (
        len(cases), len(records), a.output, prov_path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
