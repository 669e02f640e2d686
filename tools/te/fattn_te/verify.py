"""fattn-te verify --te A --te B: TE A vs TE B, and each against fattn's C
front end of its shape (legacy for a monolith, split for the refactor), one
verdict line per pair (docs/te.md). Exit 0 when every pair is neutral but
for the deviations in DEVIATIONS, 1 on any other difference (an errored
case included), 2 on an error of the tool or bad input."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from . import cause, guard, signatures, where

# What --keep DIR keeps: each TE's run file and its refusal log, the front
# ends' run files.
_KEPT = ("te1.h5", "te2.h5", "te1-refusals.json", "te2-refusals.json", "fattn-legacy.h5",
         "fattn-split.h5")

HERE = os.path.dirname(os.path.abspath(__file__))


_RUN_LINE = re.compile(r"\((?:\d+ through DotProductAttention, \d+ routed away from "
                       r"FusedAttention, )?(?:(\d+) through FusedAttention, )?(\d+) through "
                       r"FusedAttnFunc\.apply; (\d+) errored\)")
_DPA_LINE = re.compile(r"\((\d+) through DotProductAttention, (\d+) routed away")


def _te_run(root, args, out, te_arg=None):
    """fattn-te run on one TE (a root te_root checked; te_arg: the --te to
    hand it instead, a PATH@REV the run exports and labels itself); exit 1
    (cases that errored, recorded in the file) is a result. With progress,
    the run's progress lines go to stderr as they come. Returns (through the
    module, through FusedAttnFunc.apply, why those took it)."""
    argv = [os.path.join(os.path.dirname(HERE), "fattn-te"), "run", "--te", te_arg or root,
            "--backend", args.backend, "--call", args.call, "-o", out] + where.fattn_args(args)
    if args.progress_on:
        argv.append("--progress")
    # TE's answers to the cases fattn refuses (refusal.py), beside the run file
    env = dict(os.environ, FATTN_TE_REFUSALS=out[:-len(".h5")] + "-refusals.json")
    # handed a stop signal, as guard.stopping() raises it; with progress the
    # run's lines go to stderr as they come
    p = guard.run(argv, env=env, capture_output=False, text=True, stdout=subprocess.PIPE,
                  stderr=None if args.progress_on else subprocess.PIPE)
    m = _RUN_LINE.search(p.stdout)
    if p.returncode not in (0, 1) or not m:
        sys.stderr.write(p.stdout + (p.stderr or ""))
        raise RuntimeError(f"fattn-te run --te {te_arg or root}: exit {p.returncode}")
    why = re.search(r"^  through FusedAttnFunc\.apply: (.*)$", p.stdout, re.M)
    f8 = re.search(r"^  FP8: (\d+) through FusedAttention, ", p.stdout, re.M)
    d = _DPA_LINE.search(p.stdout)
    return (int(m.group(1) or 0), int(m.group(2)), why.group(1) if why else "",
            int(f8.group(1)) if f8 else 0, (int(d.group(1)), int(d.group(2))) if d else None)


def _errored(path, routed=False):
    """case id -> reason of the cases fattn-te recorded as errored (routed:
    of those DotProductAttention routed away from FusedAttention)."""
    import h5py
    out = {}
    with h5py.File(path, "r") as f:
        for cid, g in f["cases"].items():
            r = g.attrs.get("skipped")
            r = r.decode() if isinstance(r, bytes) else r
            if not r or not r.startswith(where.ERROR_PREFIX):
                continue
            if r.startswith(where.ROUTED_PREFIX) == routed:
                out[cid] = r[len(where.ROUTED_PREFIX if routed else where.ERROR_PREFIX):]
    return out


# The one table of documented deviations (docs/te.md, "Findings"): a
# difference that matches an entry is listed under its verdict, not
# counted. Its kind: "deviation" (fattn and TE differ where no contract
# defines the values: the pair stays neutral) or "change" (TE's behaviour
# changed between releases, reviewed: the pair says "no, documented changes
# only", and exits 0). An entry: where it may appear (fattn_pairs_only: pairs of a fattn
# front end and a TE), the path, which cases (on their resolved model, with
# "call": the path the TEs were called through, --call),
# which kind of difference (entry(e, side): side tells, for the path's case,
# which run of the pair refused it), its exact signature (signature(pair,
# case, side, path): None when the runs show exactly what the entry
# documents, else what they show; signatures.py), the reason and TE's
# lines. Anything else in a matched case still counts.
_DIRECT = "FusedAttnFunc called directly; DotProductAttention turns every backend off for " \
          "max_logit with FP8 (utils.py 2.19.0:756-765, 2.20.2:827-836)"
DEVIATIONS = [{
    "name": "max_logit with a padding mask in bshd/sbhd",
    "kind": "deviation",
    "fattn_pairs_only": True,
    "path": re.compile(r"^/cases/([^/]+)/forward/max_logit$"),
    "case": lambda r: bool(r.get("padding")) and not r.get("thd")
    and bool(r["spec"].get("return_max_logit")),
    # TE's amax is NaN (the poisoned rows past the lengths), fattn's finite
    "entry": lambda e, side: e["status"] == "different" and e.get("count") is not None
    and (e.get("ulp_histogram") or {}).get("class_changes", 0) == e["count"],
    "signature": lambda pair, cid, side, path: signatures.max_logit_nan(pair, path),
    "reason": "TE's torch.amax reads Max rows past each sequence's length (undefined "
              "memory); fattn counts the defined rows",
    "te_lines": "cpp_extensions/fused_attn.py:412,441 (2.19.0, 2.20.2)",
}, {
    "name": "NaN payloads of the rows an FP8 padding case leaves unwritten",
    "kind": "deviation",
    "fattn_pairs_only": True,
    "path": re.compile(r"^/cases/([^/]+)/(?:forward/out|backward/d[qkv])$"),
    "case": lambda r: bool(r["spec"].get("fp8")) and bool(r.get("padding")),
    # every differing element is NaN on both sides, only the payload differs
    "entry": lambda e, side: e["status"] == "different" and bool(e.get("count"))
    and (e.get("ulp_histogram") or {}).get("nan_payloads", 0) == e["count"],
    "signature": lambda pair, cid, side, path: signatures.fp8_nan_payload(pair, path),
    "reason": "rows past each length are undefined; TE dequantises them to torch's NaN "
              "(0xffff), fattn's conversion keeps the engine's quiet NaN (0xffc0/0xffe0); "
              "every defined element is bitwise equal",
    "te_lines": "backends.py 2.19.0:1579-1581,1932-1943, 2.20.2:1737-1739,2167-2178 "
                "(combine_and_dequantize, the O dequantisation)",
}, {
    "name": "F1: return_max_logit with FP8 raises in 2.19.0, runs in 2.20.2",
    "kind": "change",
    "fattn_pairs_only": False,
    "path": re.compile(r"^/cases/([^/@]+)[/@]"),
    "case": lambda r: bool(r["spec"].get("fp8")) and bool(r["spec"].get("return_max_logit")),
    # one run refused the case (fattn's rule; TE 2.19.0's TypeError), the
    # other ran it: the ran side's datasets and engine calls (groups), the
    # refused side's refused_*
    "entry": lambda e, side: side is not None and e["status"] == (
        f"missing_in_{side}" if e["kind"] in ("dataset", "group")
        else f"missing_in_{'b' if side == 'a' else 'a'}" if e["kind"] == "attribute" else None),
    # 2.19.0's TypeError at backends.py:1751 (or fattn's rule) on the refusing
    # side, (out, None) on the running side: nothing else
    "signature": lambda pair, cid, side, path: signatures.f1(pair, cid, side),
    "reason": "2.19.0's FP8 branch leaves max_logit None and unpacks it (TypeError after the "
              "kernel ran); 2.20.2 returns (out, None); " + _DIRECT,
    "te_lines": "backends.py 2.19.0:1750-1751, 2.20.2:2275-2276",
}, {
    "name": "FusedAttention hands fused_attn_fwd one page table for K and V",
    "kind": "deviation",
    "fattn_pairs_only": True,
    "path": re.compile(r"^/cases/([^/]+)/(?:steps/\d+/)?engine_call/forward@page_table_v$"),
    "case": lambda r: bool(r["spec"].get("paged")),
    # the same view and content; only the tensor it is differs: fattn's front
    # end hands the case's page_table_v, TE's module path page_table_k
    "entry": lambda e, side: e["status"] == "value" and "a" in e and "b" in e
    and e["a"].replace(" inputs/page_table_v ", " inputs/page_table_k ") == e["b"],
    # and the two tables the case has hold the same pages
    "signature": lambda pair, cid, side, path: _same_page_tables(pair, cid, path),
    "reason": "FusedAttention passes the cache's one page table as both tables; fattn's "
              "front ends get the case's V table, equal to it, as a tensor of its own",
    "te_lines": "backends.py 2.19.0:2335-2336, 2.20.2:2595-2596",
}, {
    "name": "FusedAttention hands InferenceParams' cu_seqlens as the padded ones",
    "kind": "deviation",
    "fattn_pairs_only": True,
    "path": re.compile(r"^/cases/([^/]+)/(?:steps/\d+/)?engine_call/forward(?:\.\d+)?"
                       r"@cu_seqlens_(q|kv)_padded$"),
    "case": lambda r: bool(r["spec"].get("max_batch_size")) or _cache_schedule(r),
    # the same view and content; only the tensor it is differs: fattn's front
    # ends get the case's cu_seqlens_*_padded, TE's the cu_seqlens step() made
    "entry": lambda e, side: e["status"] == "value" and "a" in e and "b" in e
    and _but_source(e["a"]) == _but_source(e["b"])
    and re.sub(r" inputs/(cu_seqlens_(?:q|kv))_padded ", r" inputs/\1 ", e["a"]) == e["b"],
    "signature": lambda pair, cid, side, path: None,
    "reason": "with InferenceParams, step() leaves the padded cu_seqlens None and FusedAttention "
              "hands the cu_seqlens in their place; fattn's front ends get the case's padded "
              "cu_seqlens, equal to them, as tensors of their own",
    "te_lines": "backends.py 2.19.0:2230-2233, 2.20.2:2489-2492",
}, {
    "name": "DotProductAttention makes the cu_seqlens of a case it is handed without them",
    "kind": "deviation",
    "fattn_pairs_only": True,
    "path": re.compile(r"^/cases/([^/]+)/(?:steps/\d+/)?engine_call/(?:forward|backward)"
                       r"(?:\.\d+)?@cu_seqlens_(?:q|kv)(?:_padded)?$"),
    "case": lambda r: r.get("call") == "dpa" and not r["spec"].get("max_batch_size")
    and not r["thd"] and "padding" not in r["spec"]["mask"],
    # the same view and content; only the tensor it is differs: fattn's front
    # ends get the case's cu_seqlens, TE's DPA (--call dpa) the ones it made
    # from the shapes, one tensor for q and kv where the lengths agree, which
    # the saved slots name
    # (the backward's by the saved slot that holds it: TE saved the one tensor
    # in both)
    "entry": lambda e, side: e["status"] == "value" and "a" in e and "b" in e
    and _but_source(e["a"]) == _but_source(e["b"])
    and e["a"].split(" ")[-2].startswith(("inputs/cu_seqlens_", "save_ctx/cu_seqlens_"))
    and e["b"].split(" ")[-2].startswith(("save_ctx/cu_seqlens_", "unrecorded")),
    "signature": lambda pair, cid, side, path: None,
    "reason": "DotProductAttention builds cu_seqlens from the batch and lengths when a case "
              "has no padding and passes one tensor for q and kv when they agree; fattn's "
              "front ends get the case's cu_seqlens, equal to them, as tensors of their own",
    "te_lines": "dot_product_attention.py 2.19.0:1949-1970, 2.20.2:2657-2678 "
                "(get_full_cu_seqlens, cached per batch, length and device)",
}, {
    "name": "DotProductAttention names a packed layout with one head by the first layout "
            "its offsets match",
    "kind": "deviation",
    "fattn_pairs_only": True,
    "path": re.compile(r"^/cases/([^/]+)/(?:steps/\d+/)?(?:engine_call/(?:forward|backward)"
                       r"(?:\.\d+)?|save_ctx)@(?:d?qkv_layout|dq|dk|dv)$"),
    "case": lambda r: r.get("call") == "dpa" and _one_head_packed(r),
    # with one head, k and v at offsets d apart fit both 2hd and h2d (3hd and
    # h3d): DPA takes the first it checks, the 2hd one; the same memory, so
    # only the layout's name differs and the strides of the size-1 head dim
    # of what TE allocates for it (dK, dV)
    "entry": lambda e, side: e["status"] == "value" and "a" in e and "b" in e
    and _same_memory_other_name(e["a"], e["b"]),
    "signature": lambda pair, cid, side, path: None,
    "reason": "DotProductAttention reads the layout from the tensors' offsets and takes the "
              "2hd (3hd) layout first; with one head the h2d (h3d) memory fits it too, so "
              "FusedAttention gets the other name for the same bytes",
    "te_lines": "dot_product_attention/utils.py 2.19.0:2554-2568,2590-2606, "
                "2.20.2:2873-2887,2909-2925 (get_qkv_layout)",
}, {
    "name": "FusedAttention hands fused_attn_fwd the cache manager's whole page table",
    "kind": "deviation",
    "fattn_pairs_only": True,
    "path": re.compile(r"^/cases/([^/]+)/steps/\d+/engine_call/forward@page_table_[kv]$"),
    "case": lambda r: bool(r["spec"].get("paged")) and _cache_schedule(r),
    # a cache step whose batch is smaller than the cache's (a sequence
    # finished): fattn's front ends get the step's rows of the table, TE's
    # the manager's table of max_batch_size rows, of which the engine reads
    # the first b
    "entry": lambda e, side: e["status"] == "value" and "a" in e and "b" in e
    and _rows_of(e["a"], e["b"]),
    # and the rows fattn hands are the rows TE's step has
    "signature": lambda pair, cid, side, path: _step_tables_equal(pair, cid, path),
    "reason": "FusedAttention passes InferenceParams' page table whole (max_batch_size rows) "
              "where it cuts cu_seqlens to the step's batch; fattn's front ends get the "
              "step's b rows of it, the rows the engine reads",
    "te_lines": "backends.py 2.19.0:2230-2233,2335-2336, 2.20.2:2489-2492,2595-2596",
}, {
    # context parallelism (fattn_te/cp_verify.py): the ring's outputs
    "name": "P1: 2.20.2 merges each P2P step into the output as an online softmax "
            "(2.19.0: once, after the ring)",
    "kind": "change",
    "fattn_pairs_only": False,
    "path": re.compile(r"^/cases/([^/]+)/ranks/\d+/(?:forward/out|backward/d[qkv]"
                       r"|engine_call/backward/\d{3}/(?:o|out_d[qkv]))$"),
    "case": lambda r: bool(r["spec"].get("cp"))
    and r["spec"]["cp"]["comm"] in ("p2p", "a2a+p2p"),
    # the rounding of the merge, nothing else: every finite pair within TE's
    # own CP tolerance's atol of each other; a NaN/Inf against a finite value
    # only in a THD token past its sequence's length (an undefined row: the
    # merge reads that row's Stats), which the signature checks element by
    # element (signatures.p1)
    "entry": lambda e, side: e["status"] == "different" and bool(e.get("count"))
    and e.get("max_abs") is not None
    and e["max_abs"] <= {"bfloat16": 2.5e-2, "float16": 5e-3}.get(e.get("dtype"), 0.0),
    "signature": lambda pair, cid, side, path: signatures.p1(pair, path),
    "reason": "2.20.2 merges each step's output into the running output (out * exp(old - new) "
              "+ out_step * exp(step - new), rounded to the dtype each step); 2.19.0 corrects "
              "once after the ring",
    "te_lines": "context_parallel.py 2.19.0:2224-2271, 2.20.2:2141-2245",
}]


def _but_source(desc):
    """An engine-call tensor's descriptor ("<dtype> [<shape>] strides
    [<strides>] <source> <digest>") without its source."""
    parts = desc.split(" ")
    return " ".join(parts[:-2] + parts[-1:]) if len(parts) >= 3 else desc


def _one_head_packed(res):
    """A layout packing K and V (or Q, K and V) along the head dim, with one
    head there: one memory that DPA's layout detection also reads as the
    packing along the dim before it."""
    spec = res["spec"]
    lay = spec["layout"]
    return ("h2d" in lay and spec.get("hg", spec["h"]) == 1) or ("h3d" in lay and spec["h"] == 1)


def _same_memory_other_name(a, b):
    """a is a h2d/h3d layout name and b the same with 2hd/3hd, or a and b
    describe one tensor (dtype, shape, source, digest) whose strides differ
    only in dims of size 1."""
    if " " not in a:
        return a != b and a.replace("h2d", "2hd").replace("h3d", "3hd") == b
    pa, pb = _parse_desc(a), _parse_desc(b)
    if not (pa and pb) or pa[:2] + pa[3:] != pb[:2] + pb[3:]:
        return False
    shape, sa, sb = pa[1], pa[2], pb[2]
    return len(sa) == len(sb) == len(shape) and sa != sb and all(
        x == y or n == 1 for x, y, n in zip(sa, sb, shape))


def _cache_schedule(res):
    """A case whose schedule steps a KV cache (TE's InferenceParams made its
    tables and lengths)."""
    return any("step" in st for st in res["spec"].get("schedule") or [])


def _step_prefix(path):
    """"steps/<k>/" of a schedule step's path, else ""."""
    m = re.search(r"/(steps/\d+/)", path)
    return m.group(1) if m else ""


_DESC = re.compile(r"^(\S+) \[((?:\d+(?:,\d+)*)?)\] strides \[((?:-?\d+(?:,-?\d+)*)?)\] "
                   r"(\S+) (\S+)$")


def _parse_desc(d):
    """(dtype, shape, strides, source, digest) of an engine-call tensor's
    descriptor ("<dtype> [<shape>] strides [<strides>] <source> <digest>",
    engine_calls.py), shape and strides as tuples of ints, else None."""
    m = _DESC.match(d)
    if not m:
        return None
    ints = [tuple(int(x) for x in g.split(",")) if g else () for g in m.group(2, 3)]
    return (m.group(1), ints[0], ints[1], m.group(4), m.group(5))


def _desc(d):
    """(dtype, rows, cols, source) of an engine-call descriptor of a 2-D
    row-major tensor ("int32 [r,c] strides [c,1] <source> <digest>"), else
    None."""
    p = _parse_desc(d)
    if not p or len(p[1]) != 2 or len(p[2]) != 2 or p[2][0] < 0 or p[2][1] != 1:
        return None
    return (p[0], p[1][0], p[1][1], p[3])


def _rows_of(a, b):
    """fattn's table (either, by its own name) the first rows of TE's
    page_table_k: the same dtype and columns, fewer rows."""
    da, db = _desc(a), _desc(b)
    return bool(da and db and da[0] == db[0] and da[2] == db[2] and da[1] < db[1]
                and da[3] in ("inputs/page_table_k", "inputs/page_table_v")
                and db[3] == "inputs/page_table_k")


def _step_tables_equal(pair, cid, path):
    """None when the step's page_table_k in both runs holds the same rows
    (TE's run records the step's first b rows of the manager's table)."""
    at = f"/cases/{cid}/{_step_prefix(path)}inputs/page_table_k"
    a, b = pair.node(0, at), pair.node(1, at)
    if a is None or b is None:
        return "the runs record no page_table_k for the step"
    if a.shape != b.shape or (a[()] != b[()]).any():
        return "the step's page_table_k differs between the runs"
    return None


def _same_page_tables(pair, cid, path=""):
    """None when the fattn run's page_table_k and page_table_v hold the same
    pages (the module's one table stands for both), else what they hold."""
    at = f"/cases/{cid}/{_step_prefix(path)}inputs"
    k = pair.node(0, f"{at}/page_table_k")
    v = pair.node(0, f"{at}/page_table_v")
    if k is None or v is None:
        return "the fattn run records no page_table_k and page_table_v"
    if k.shape != v.shape or (k[()] != v[()]).any():
        return "page_table_k and page_table_v hold different pages"
    return None


def _documented(path, e, resolved, fattn_pair, refused_side, pair, misses=None):
    """The DEVIATIONS entry a difference matches, or None. refused_side:
    case id -> "a" or "b" where exactly one run of the pair refused it;
    pair: the two runs (signatures.Pair) the entry's signature reads. A
    difference in an entry's place whose signature does not hold is
    counted, and what the runs show instead goes to misses (case id ->
    (entry, what))."""
    for d in DEVIATIONS:
        if d["fattn_pairs_only"] and not fattn_pair:
            continue
        m = d["path"].match(path)
        if not (m and m.group(1) in resolved and d["case"](resolved[m.group(1)])):
            continue
        cid = m.group(1)
        if not d["entry"](e, refused_side.get(cid)):
            continue
        why = (d["signature"](pair, cid, refused_side.get(cid), path) if pair is not None
               else "no runs to read its signature from")
        if why is None:
            return d
        if misses is not None:
            misses.setdefault(cid, (d, why))
    return None


def _refused_side(a, b):
    """case id -> "a" / "b": the cases exactly one of two run files refused."""
    import h5py
    sets = []
    for path in (a, b):
        with h5py.File(path, "r") as f:
            sets.append({cid for cid, g in f["cases"].items() if "refused_rule" in g.attrs})
    return {**{c: "a" for c in sets[0] - sets[1]}, **{c: "b" for c in sets[1] - sets[0]}}


def _cases(path):
    return len(_case_ids(path))


def _case_ids(path):
    import h5py
    with h5py.File(path, "r") as f:
        return sorted(f["cases"].keys())


def _fp8_counts(path):
    """(FP8 cases TE ran, FP8 cases refused) in a TE run file."""
    import h5py
    ran = refused = 0
    with h5py.File(path, "r") as f:
        for case in f["cases"].values():
            spec = json.loads(case.attrs["spec"])
            if not spec.get("fp8"):
                continue
            if "refused_rule" in case.attrs or "skipped" in case.attrs:
                refused += 1
            else:
                ran += 1
    return ran, refused


# On cuDNN 9.19 the gradient of the sink (softmax offset) is summed in an
# order that changes run to run even with the deterministic backward
# (docs/determinism.md); `fattn verify` compares it within the io dtype's
# tolerance there (harness/check/verify.c cudnn_noisy), and so does this.
_NOISY = re.compile(r"^/cases/([^/]+)/backward/d_softmax_offset$")
_TOL = os.path.join(where.SRC, "tolerances", "fattn-tol-1.json")
_SHOWN = 12


def _diff_json(fattn, a, b, extra=()):
    p = guard.run([fattn, "diff", a, b, "--json", "-"] + list(extra))
    if p.returncode not in (0, 1):
        sys.stderr.write(p.stdout + p.stderr)
        raise RuntimeError(f"fattn diff {a} {b}: exit {p.returncode}")
    return json.loads(p.stdout)


def _within_tolerance(fattn, a, b, path, io_dtype):
    with open(_TOL, encoding="utf-8") as f:
        t = json.load(f)["dtypes"][io_dtype]
    r = _diff_json(fattn, a, b, ["--mode", "tol", "--only", path,
                                 "--tol", f"{path}={t['rtol']},{t['atol']}"])
    return r["exit"] == 0


def _n(k, word):
    return f"{k} {word}{'' if k == 1 else 's'}"


def _what(e):
    what = e["status"].replace("_", " ")
    if e["status"] == "value" and "a" in e and "b" in e:
        return f"value: A {e['a']}, B {e['b']}"
    if e["status"] == "different" and e.get("count") is not None:
        what += f": {e['count']} of {e.get('numel')} elements"
        cls = (e.get("ulp_histogram") or {}).get("class_changes", 0)
        if cls:  # max abs is over the finite pairs only
            what += f", {cls} NaN/Inf vs finite"
        nanp = (e.get("ulp_histogram") or {}).get("nan_payloads", 0)
        if nanp == e["count"]:
            what += ", NaN payloads only"
        elif cls != e["count"]:
            what += f", max abs {e.get('max_abs')}"
    return what


def _present(a, b):
    """case id -> the states (cause.STATES indices) both run files hold."""
    import h5py
    held = []
    for path in (a, b):
        with h5py.File(path, "r") as f:
            h = {}
            for cid, g in f["cases"].items():
                names = set(g.keys())
                if "engine_call" in g:
                    names |= {"engine_call/" + n for n in g["engine_call"].keys()}
                h[cid] = cause.states_in(names)
            held.append(h)
    return {c: held[0][c] & held[1].get(c, set()) for c in held[0]}


def _failing(counted, a, b, a_name, b_name):
    """case id -> {"items": [(rel, entry)] in run order, "cause": ...} of the
    cases with counted differences."""
    by_case = {}
    for seq, (path, e) in enumerate(counted):
        cid, rel = cause.split_path(path)
        by_case.setdefault(cid, []).append((cause.order_key(rel, e, seq), rel, e))
    present = _present(a, b) if by_case else {}
    out = {}
    for cid, items in sorted(by_case.items(), key=lambda x: x[0] or ""):
        items = [(rel, e) for _, rel, e in sorted(items, key=lambda x: x[0])]
        out[cid] = {"items": items,
                    "cause": cause.case_cause(items, present.get(cid, set()), a_name, b_name,
                                              _what)}
    return out


def _verdict(fattn, a_name, a, b_name, b, io_dtypes, resolved=None, fattn_pair=False,
             kept=True, logs=(None, None)):
    """One verdict line for A vs B, then each documented deviation, each
    failing case's earliest cause and each counted difference, in run order.
    io_dtypes: case id -> io dtype where the backend's d_softmax_offset is
    compared within tolerance (cuDNN), else None. resolved: case id ->
    resolved case, for DEVIATIONS; fattn_pair: A is a fattn front end's run;
    logs: each run's refusal log (None for a fattn front end). Returns the
    pair's report (verify.main writes it as JSON and JUnit); its "exit" is 0
    (neutral, deviations aside) or 1."""
    r = _diff_json(fattn, a, b)
    # cases DotProductAttention routed away from FusedAttention (--call dpa)
    # are not compared: they are listed, each once per pair
    routed = {**_errored(a, True), **_errored(b, True)}
    r["paths"] = {p: e for p, e in r["paths"].items()
                  if not (re.match(r"^/cases/([^/@]+)", p) and
                          re.match(r"^/cases/([^/@]+)", p).group(1) in routed)}
    n = sum(1 for e in r["paths"].values() if e["kind"] in ("dataset", "digest"))
    side = _refused_side(a, b)
    counted, noisy, documented, misses = [], [], [], {}
    pair = signatures.Pair([a_name, b_name], [a, b], list(logs))
    for path, e in sorted(r["paths"].items()):
        if e["status"] in ("equal", "private"):
            continue
        m = _NOISY.match(path)
        if (io_dtypes and m and e["status"] == "different" and m.group(1) in io_dtypes
                and _within_tolerance(fattn, a, b, path, io_dtypes[m.group(1)])):
            noisy.append(path)
            continue
        d = _documented(path, e, resolved or {}, fattn_pair, side, pair, misses)
        if d:
            documented.append((path, e, d))
            continue
        counted.append((path, e))
    pair.close()
    ncases = _cases(a) - len(routed)
    note = (f"; {len(noisy)} d_softmax_offset within tolerance (non-deterministic on "
            f"this engine)") if noisy else ""
    devs = [x for x in documented if x[2]["kind"] == "deviation"]
    # a documented behaviour change, by case: (entry name, case id) -> paths
    changes = {}
    for path, e, d in documented:
        if d["kind"] == "change":
            changes.setdefault((d["name"].split(":")[0], d["path"].match(path).group(1)),
                               []).append((path, e, d))
    dev = f"{len(devs)} documented deviation{'' if len(devs) == 1 else 's'}"
    if not counted:
        if changes:
            # not neutral: TE's behaviour changed, in the documented places only
            what = ", ".join(f"{f} in {c}" for f, c in sorted(changes))
            word = f"no, documented changes only ({what}{'; ' + dev if devs else ''})"
        else:
            word = f"neutral ({dev})" if devs else "yes"
        line = (f"{a_name} -> {b_name}: behavior-neutral: {word} ({_n(ncases, 'case')}, "
                f"{_n(n, 'tensor')}{note})")
    else:
        # N of M count the same things: cases; then the tensors among M's
        # tensors and the attributes (and other objects) that differ
        extra = f"; {len(documented)} documented" if documented else ""
        ccases = {m.group(1) for m in (re.match(r"^/cases/([^/@]+)", p) for p, _ in counted)
                  if m}
        nt = sum(1 for _, e in counted if e["kind"] in ("dataset", "digest"))
        other = len(counted) - nt
        what = f"{nt} of {_n(n, 'tensor')}" + (f", {_n(other, 'other object')}" if other else "")
        word = "no"
        line = (f"{a_name} -> {b_name}: behavior-neutral: no ({len(ccases)} of {ncases} cases "
                f"differ: {what}{extra}{note})")
    print(line)
    # one line per path; a case where an entry matched several: one line
    by_case = {}
    for path, e, d in devs:
        m = d["path"].match(path)
        by_case.setdefault((d["name"], m.group(1) if m else path), []).append((path, e, d))
    for (_, cid), items in by_case.items():
        path, e, d = items[0]
        if len(items) == 1:
            print(f"  documented: {path}  {_what(e)}: {d['name']} (TE {d['te_lines']}; "
                  f"docs/te.md, Findings)")
        else:
            rels = ", ".join(p[len(f"/cases/{cid}/"):] for p, _, _ in items)
            print(f"  documented: /cases/{cid}  {len(items)} paths ({rels}): {d['name']} "
                  f"(TE {d['te_lines']}; docs/te.md, Findings)")
    for (_, cid), items in sorted(changes.items()):
        d = items[0][2]
        ran = b_name if side.get(cid) == "a" else a_name
        print(f"  documented change: /cases/{cid}  refused in "
              f"{a_name if ran == b_name else b_name}, run in {ran} ({_n(len(items), 'path')}): "
              f"{d['name']} (TE {d['te_lines']}; docs/te.md, Findings)")
    for cid, why in sorted(routed.items()):
        print(f"  routed away (not compared): /cases/{cid}: {why}")
    for cid, (d, why) in sorted(misses.items()):
        print(f"  not documented: /cases/{cid}: {d['name'].split(':')[0]}'s signature does not "
              f"hold: {why}")
    errs = {"A": _errored(a), "B": _errored(b)}
    failing = _failing(counted, a, b, a_name, b_name)
    more = (f"fattn diff {a} {b}" if kept else
            "run again with --keep DIR, then fattn diff on the two files it names")
    _print_failing(failing, errs, a_name, b_name, more)
    return {"a": a_name, "b": b_name, "file_a": a if kept else None,
            "file_b": b if kept else None, "verdict": word, "line": line,
            "exit": 1 if counted else 0, "cases": ncases, "tensors": n,
            "case_ids": _case_ids(a),
            "counted": len(counted), "noisy": noisy,
            "documented": [{"path": p, "status": e["status"], "entry": d["name"],
                            "kind": d["kind"]} for p, e, d in documented],
            "failing": {cid: {"cause": f["cause"], "errored": [k for k in ("A", "B")
                                                                 if cid in errs[k]],
                              "differences": [_json_diff(rel, e) for rel, e in f["items"]]}
                        for cid, f in failing.items()}}


def _json_diff(rel, e):
    out = {"path": rel, "status": e["status"], "kind": e.get("kind"), "what": _what(e),
           "state": cause.STATES[cause.state_of(rel)]}
    for k in ("a", "b", "count", "numel", "max_abs"):
        if k in e:
            out[k] = e[k]
    return out


def _print_failing(failing, errs, a_name, b_name, more):
    """Under the verdict: each failing case's cause (a case that errored in
    either run: one line naming the run and the reason), then its counted
    differences in run order, both bounded with complete counts."""
    causes, shown, left = [], [], {"tensor": 0, "other": 0}
    for cid, f in failing.items():
        where = [k for k in ("A", "B") if cid in errs[k]]
        if where:
            name = {"A": a_name, "B": b_name}
            causes.append(f"  /cases/{cid}  errored in {' and '.join(name[k] for k in where)}: "
                          f"{errs[where[-1]][cid]}")
            continue
        causes.append(f"  cause: /cases/{cid}: {f['cause']['text']}")
        for rel, e in f["items"]:
            if len(shown) < _SHOWN:
                sep = "" if rel.startswith("@") else "/"
                shown.append(f"  /cases/{cid}{sep}{rel}  {_what(e)}")
            else:
                left["tensor" if e.get("kind") in ("dataset", "digest") else "other"] += 1
    for line in causes[:_SHOWN]:
        print(line)
    if len(causes) > _SHOWN:
        print(f"  ... and {len(causes) - _SHOWN} more failing cases (--json lists every "
              f"case's cause)")
    for line in shown:
        print(line)
    if left["tensor"] + left["other"]:
        print(f"  ... and {left['tensor'] + left['other']} more ({_n(left['tensor'], 'tensor')}, "
              f"{_n(left['other'], 'other object')}; {more})")


def _io_dtypes(args, fattn):
    if args.backend != "cudnn":
        return None
    return {c["id"]: c["spec"]["dtype"] for c in where.rf.resolved_cases(args.cases, fattn=fattn)
            if "spec" in c}


def _check_outputs(args):
    """--json and --junit are checked before any TE runs: a directory that
    exists, not both on stdout, not one file twice."""
    outs = [(f, v) for f, v in (("--json", args.json), ("--junit", args.junit)) if v]
    if sum(1 for _, v in outs if v == "-") > 1:
        raise where.rf.InputError("--json - and --junit -: only one report can go to stdout")
    if len(outs) == 2 and outs[0][1] != "-" and os.path.abspath(outs[0][1]) == \
            os.path.abspath(outs[1][1]):
        raise where.rf.InputError(f"--json and --junit name the same file {outs[0][1]}")
    for flag, v in outs:
        if v != "-":
            try:
                where.check_output(v)
            except where.rf.InputError as e:
                raise where.rf.InputError(f"{flag} {e}")


def _one_te(i, root, name, args, work, fattn, cache):
    """TE i's run into work/te<i>.h5 (with its refusals), from the reference
    cache when its key is there; returns (path, how its cases went, reused)."""
    out = os.path.join(work, f"te{i + 1}.h5")
    refusals = out[:-len(".h5")] + "-refusals.json"
    k = None
    if cache:
        from . import refcache
        k = refcache.key(root, name, fattn, os.environ.get("FATTN_LIB"), args)
        hit = refcache.lookup(cache, k)
        if hit:
            shutil.copyfile(hit[0], out)
            shutil.copyfile(hit[1], refusals)
            return out, tuple(hit[2]["through"]), True
    if args.progress_on:
        sys.stderr.write(f"fattn-te verify: running {name}\n")
    arg = args.te[i]
    through = _te_run(root, args, out, arg if os.path.abspath(root) in where._CHECKOUTS else None)
    if cache and k:
        from . import refcache
        refcache.store(cache, k, out, refusals, {"through": list(through), "te": name})
    return out, through, False


def _pair_contrast(pair, resolved, files):
    """The contrast of a pair's failing cases with its passing ones (cases
    both runs ran; cause.contrast, as fattn verify's)."""
    feats = {cid: r["features"] for cid, r in resolved.items() if "features" in r}
    fail = set(pair["failing"])
    ran = set()
    import h5py
    for i, path in enumerate(files):
        with h5py.File(path, "r") as f:
            got = {cid for cid, g in f["cases"].items() if "inputs" in g or "steps" in g}
        ran = got if i == 0 else ran & got
    return cause.contrast(feats, sorted(fail), sorted(ran - fail))


def main(args):
    if len(args.te) != 2:
        raise where.rf.InputError("verify takes --te twice (A and B)")
    _check_outputs(args)
    args.progress_on = where.progress_wanted(args.progress)
    fattn = where.rf.find_fattn()
    where.use_library_of(fattn)
    tmp = tempfile.mkdtemp(prefix="fattn-te-verify-")
    work = args.keep or tmp
    real_stdout = sys.stdout
    if args.json == "-" or args.junit == "-":
        sys.stdout = sys.stderr  # the report alone on stdout
    try:
        os.makedirs(work, exist_ok=True)
        if args.keep:  # before any TE runs: a link planted for a kept file is refused
            for name in _KEPT:
                guard.check_target(os.path.join(work, name))
        roots, names = where.te_roots(args.te, tmp)
        # TE's runs and fattn's front-end runs over the same cases.
        files, through = [], []
        for i, root in enumerate(roots):
            f, how, reused = _one_te(i, root, names[i], args, work, fattn, args.ref_cache)
            files.append(f)
            through.append(how)
            if reused:
                print(f"{names[i]}: its run reused from the reference cache {args.ref_cache} "
                      f"(same TE tree, fattn build and matrix)")
        fe_files = {}
        for r in roots:
            impl = "split" if where.is_refactored(r) else "legacy"
            if impl not in fe_files:
                out = os.path.join(work, f"fattn-{impl}.h5")
                argv = [fattn, "run", "--impl", impl, "--backend", args.backend, "-o",
                        out] + where.fattn_args(args)
                p = guard.run(argv)
                if p.returncode != 0:
                    sys.stderr.write(p.stderr)
                    raise RuntimeError(f"fattn run --impl {impl}: exit {p.returncode}")
                fe_files[impl] = out
        io = _io_dtypes(args, fattn)
        # each case carries the path the TEs were called through (--call):
        # some entries of DEVIATIONS only that path shows
        resolved = {c["id"]: dict(c, call=args.call)
                    for c in where.rf.resolved_cases(args.cases, fattn=fattn) if "spec" in c}
        kept = bool(args.keep)
        logs = [signatures.load_log(f[:-len(".h5")] + "-refusals.json") for f in files]
        pairs = [(names[0], files[0], names[1], files[1], False, logs)]
        for name, f, r, lg in zip(names, files, roots, logs):
            impl = "split" if where.is_refactored(r) else "legacy"
            pairs.append((f"fattn-{impl}", fe_files[impl], name, f, True, (None, lg)))
        reports = []
        for an, af, bn, bf, fattn_pair, lgs in pairs:
            rep = _verdict(fattn, an, af, bn, bf, io, resolved, fattn_pair, kept, lgs)
            rep["contrast"] = _pair_contrast(rep, resolved, (af, bf))
            if rep["contrast"]:
                print("  " + rep["contrast"]["text"])
            reports.append(rep)
        rc = max(r["exit"] for r in reports)
        errs = [_errored(f) for f in files]
        for name, (mod, func, why, _, dpa), err in zip(names, through, errs):
            via = (f"{_n(dpa[0], 'case')} through DotProductAttention, {dpa[1]} routed away "
                   f"from FusedAttention, " if dpa else "")
            print(f"{name}: {via}{_n(mod, 'case')} through FusedAttention, {func} through "
                  f"FusedAttnFunc.apply{f' ({why})' if why else ''}, {len(err)} errored")
            for cid, reason in sorted(err.items()):
                only = "" if all(cid in e for e in errs) else " (errored in this TE only)"
                print(f"  errored: {cid}{only}: {reason}")
        from . import refusal
        for name, lg in zip(names, logs):
            print(f"{name}: refusals: {refusal.summary(lg)}")
        ran, refused = _fp8_counts(files[0])
        via = (str(through[0][3]) if through[0][3] == through[1][3] else
               ", ".join(f"{t[3]} in {nm}" for t, nm in zip(through, names)))
        print(f"FP8: exercised ({_n(ran, 'case')} through TE's FP8 path, {via} of them through "
              f"FusedAttention; {refused} refused)" if ran else
              f"FP8: not exercised ({refused} refused)")
        if any(errs):
            rc = max(rc, 1)
        from . import reports as rp
        doc = rp.document(args, names, roots, reports, errs, rc)
        sys.stdout.flush()
        if args.json:
            rp.write(args.json, json.dumps(doc, indent=1, sort_keys=True) + "\n", real_stdout)
        if args.junit:
            rp.write(args.junit, rp.junit(doc), real_stdout)
        return rc
    finally:
        sys.stdout = real_stdout
        shutil.rmtree(tmp, ignore_errors=True)
