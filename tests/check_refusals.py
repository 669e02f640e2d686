#!/usr/bin/env python3
"""An engine refuses nothing that a support row refuses (docs/architecture.md,
"A support rule").

usage: check_refusals.py ROOT   (prints TAP)

What an engine cannot run is a row of the support table (lib/core/support.c,
status FATTN_E_UNSUPPORTED): the engine dispatch refuses it before the
engine sees the call, and the engine at most asserts what the row
guarantees, citing it ("row <id>"). This check reads the engines' sources
(ENGINE_DIRS) for every refusal they still make -- a
`fattn_error(FATTN_E_UNSUPPORTED, ...)` or `return FATTN_E_UNSUPPORTED` --
and holds them against the rows:

  listed     every refusal is one of ENGINE_REFUSALS, keyed by file and
             function, each with why it is no fact about the case (the
             machine, cuDNN's own answer for one graph, where one call's
             memory is, the consistency of one call's arguments); a new one
             is a support row instead, or joins the list with its reason
  no stale   every entry of ENGINE_REFUSALS still matches a refusal
  distinct   no refusal restates a row: its message names no row id and
             quotes (\\"...\\") no text a row of status FATTN_E_UNSUPPORTED
             quotes (cudnn-frontend's reasons are what such rows quote)
  cited      every "row <id>" an engine's comment or assert names is a row
             of the table

It first checks itself on synthetic sources.
"""
import os
import re
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import check_structure as cs  # noqa: E402  (the C scanning helpers, beside this script)
import tap  # noqa: E402

ENGINE_DIRS = ("lib/cpu", "lib/cudnn")
SUPPORT_TABLE = "lib/core/support.c"

# (file, function): (refusals in it, why none of them is a support row).
ENGINE_REFUSALS = {
    ("lib/cpu/engine.c", "host_only"):
        (1, "a device tensor handed to the CPU engine: where the call's memory is"),
    ("lib/cudnn/engine.c", "fattn_cudnn_available"):
        (1, "no CUDA device on this machine"),
    ("lib/cudnn/engine.c", "fattn_cudnn_get_info"):
        (1, "the device's properties cannot be read on this machine"),
    ("lib/cudnn/load.c", "fattn__cudnn_api_load"):
        (2, "libcudnn or libcudart does not load on this machine"),
    ("lib/cudnn/stub.c", "no_cudnn"):
        (1, "a build without cuDNN: every call of the cuDNN API"),
    ("lib/cudnn/plans.c", "fattn_cudnn_plan_cache_init"):
        (2, "the loaded cuDNN cannot hold a plan cache (no device, cuDNN older than 9.0): "
            "the machine, before any case"),
    ("lib/cudnn/plans.c", "build_candidates"):
        (1, "cuDNN's autotuning finds no config that builds this graph: cuDNN's own answer"),
    ("lib/cudnn/lower.c", "pick_config"):
        (3, "cuDNN's heuristics offer no engine config for this graph: cuDNN's own answer"),
    ("lib/cudnn/lower.c", "fattn__cudnn_plan_build_knobs"):
        (3, "a pinned engine config (FATTN_CUDNN_DET_TAG, the knob sweep) that cuDNN does not "
            "take for this graph: a setting, not the case"),
    ("lib/cudnn/lower.c", "fattn__cudnn_plan_serialize"):
        (5, "cuDNN cannot serialise this plan for the plan store: the store skips it"),
    ("lib/cudnn/fp8_run.c", "refuse_device"):
        (1, "device tensors on the FP8 path: where the call's memory is"),
    ("lib/cudnn/transfer.c", "fattn__cudnn_device_call_supported"):
        (1, "device tensors whose undefined rows the engine could not keep untouched: where "
            "the call's memory is"),
    ("lib/cudnn/graph.c", "fattn__cgb_to_bhsd"):
        (1, "a view whose head dim is not contiguous: the layout of one call's memory"),
    ("lib/cudnn/graph_fwd.c", "fwd_desc_options"):
        (1, "a bias view without a unit last stride: the layout of one call's memory"),
    ("lib/cudnn/graph_bwd.c", "fattn__cg_bwd_desc_from_geom"):
        (2, "gradients laid out unlike their inputs, a dBias view without a unit last stride: "
            "the consistency and memory of one call's arguments (TE passes neither)"),
    ("lib/cudnn/graph_fp8.c", "fattn__cg_fp8_fwd_desc"):
        (1, "an FP8 call whose S dtype is not Q's: the consistency of one call's FP8 "
            "parameters (TE quantises P to Q's type)"),
    ("lib/cudnn/graph_fp8.c", "fattn__cg_fp8_bwd_desc"):
        (1, "an FP8 backward whose dP dtype is not dO's: the consistency of one call's FP8 "
            "parameters (TE quantises dP to dO's type)"),
}

REFUSAL = re.compile(r"fattn_error\s*\(\s*FATTN_E_UNSUPPORTED\b|return\s+FATTN_E_UNSUPPORTED\b")
ROW_CITE = re.compile(r"\brow ([a-z0-9]+_[a-z0-9_]*[a-z0-9])\b")
QUOTE = re.compile(r'\\"(.*?)\\"')


def c_strings(code, pos):
    """The message at pos: past the comma, the adjacent C string literals
    there, joined as written (escapes kept); "" when none follows."""
    m = re.match(r"\s*,\s*", code[pos:])
    if not m:
        return ""
    i, out = pos + m.end(), []
    while i < len(code) and code[i] == '"':
        j = cs.literal_end(code, i)
        out.append(code[i + 1:j - 1])
        i = j
        while i < len(code) and code[i].isspace():
            i += 1
    return "".join(out)


def refusals(rel, src):
    """(function, line, message) of every refusal in one source file."""
    code = cs.blank_preprocessor(cs.strip_comments(src))
    funcs = cs.functions(cs.blank_literals(code))
    found = []
    for m in REFUSAL.finditer(cs.blank_literals(code)):
        line = cs.line_of(code, m.start())
        names = [n for n, lo, hi, _ in funcs if lo <= line <= hi]
        found.append((names[0] if names else "?", line, c_strings(code, m.end())))
    return found


def row_citations(src):
    """(line, id) of every "row <id>" in a source file's comments."""
    out = []
    for m in re.finditer(r"/\*.*?\*/|//[^\n]*", src, re.S):
        for c in ROW_CITE.finditer(m.group(0)):
            out.append((cs.line_of(src, m.start() + c.start()), c.group(1)))
    return out


def table_rows(src):
    """{id: (status, message)} of the support table's rows."""
    code = cs.strip_comments(src)
    rows = {}
    for m in re.finditer(r'\{\s*"([a-z0-9_]+)"\s*,\s*\w+\s*,\s*(FATTN_\w+)\s*(?=,)', code):
        rows[m.group(1)] = (m.group(2), c_strings(code, m.end()))
    return rows


def quotes(message):
    return {re.sub(r"\s+", " ", q.strip().lower()) for q in QUOTE.findall(message) if q.strip()}


def restates(message, rows):
    """The ids of the rows a refusal's message restates."""
    mq = quotes(message)
    hits = []
    for rid, (status, rmsg) in sorted(rows.items()):
        if re.search(r"\b%s\b" % re.escape(rid), message):
            hits.append(rid)
        elif status == "FATTN_E_UNSUPPORTED" and any(
                a in b or b in a for a in mq for b in quotes(rmsg)):
            hits.append(rid)
    return hits


def scan(root):
    """Refusals by (file, function), and the row citations, of ENGINE_DIRS."""
    found, cites = {}, []
    for d in ENGINE_DIRS:
        for fn in sorted(os.listdir(os.path.join(root, d))):
            if not fn.endswith((".c", ".h")):
                continue
            rel = d + "/" + fn
            with open(os.path.join(root, rel)) as f:
                src = f.read()
            for func, line, msg in refusals(rel, src):
                found.setdefault((rel, func), []).append((line, msg))
            cites += [(rel, line, rid) for line, rid in row_citations(src)]
    return found, cites


def problems_listed(found, listed):
    out = []
    for (rel, func), sites in sorted(found.items()):
        want = listed.get((rel, func))
        where = ", ".join("%s:%d" % (rel, line) for line, _ in sites)
        if want is None:
            out.append("%s: a refusal in %s that is not listed: make it a support row "
                       "(the dispatch refuses it, the engine asserts it) or, if it is no "
                       "fact about the case, list it in ENGINE_REFUSALS with why" % (where, func))
        elif want[0] != len(sites):
            out.append("%s: %d refusal(s) in %s, ENGINE_REFUSALS lists %d" %
                       (where, len(sites), func, want[0]))
    return out


def problems_stale(found, listed):
    return ["ENGINE_REFUSALS lists %s in %s, which refuses nothing now: delete the entry" %
            (func, rel) for (rel, func) in sorted(listed) if (rel, func) not in found]


def problems_distinct(found, rows):
    out = []
    for (rel, func), sites in sorted(found.items()):
        for line, msg in sites:
            hits = restates(msg, rows)
            if hits:
                out.append("%s:%d: %s restates row %s: the dispatch refuses it first; "
                           "assert it instead" % (rel, line, func, ", ".join(hits)))
    return out


def problems_cited(cites, rows):
    return ["%s:%d: names row %s, which the support table does not have" % (rel, line, rid)
            for rel, line, rid in cites if rid not in rows]


# ---- the checker on synthetic sources ------------------------------------------

SYNTH_TABLE = r'''
static const fattn_support_rule rules[] = {
    {"fp8_bias_engines", r_fp8_bias, FATTN_E_UNSUPPORTED,
     "FP8 attention with a bias is implemented by no engine",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, NOT_IN_TE},
    {"fp8_head_dim_cudnn", r_fp8_head_dim16, FATTN_E_UNSUPPORTED,
     "FP8 attention needs head dims that are multiples of 16 on the cuDNN engine "
     "(cudnn-frontend: \"hidden_dim should be multiple of 16\")",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), ANY_CUDNN, NOT_IN_TE},
};
'''

SYNTH_ENGINE = r'''
/* a graph: row fp8_head_dim_cudnn guarantees it; row gone_row does not exist */
static fattn_status quoted(int d)
{
    if (d % 16)
        return fattn_error(FATTN_E_UNSUPPORTED, "engine: head dim %d (cudnn-frontend: "
                           "\"hidden_dim should be multiple of 16\")", d);
    return FATTN_OK;
}

static fattn_status named(int b)
{
    if (b)
        return fattn_error(FATTN_E_UNSUPPORTED, "engine: see fp8_bias_engines");
    if (b > 2)
        return FATTN_E_UNSUPPORTED;
    return fattn_error(FATTN_E_DTYPE, "not a refusal");
}

static fattn_status own(void)
{
    return fattn_error(FATTN_E_UNSUPPORTED, "engine: no device");
}
'''


def self_test():
    rows = table_rows(SYNTH_TABLE)
    if sorted(rows) != ["fp8_bias_engines", "fp8_head_dim_cudnn"]:
        raise AssertionError("table rows: %r" % sorted(rows))
    found = {}
    for func, line, msg in refusals("lib/x/e.c", SYNTH_ENGINE):
        found.setdefault(("lib/x/e.c", func), []).append((line, msg))
    if sorted((k[1], len(v)) for k, v in found.items()) != [("named", 2), ("own", 1),
                                                           ("quoted", 1)]:
        raise AssertionError("refusals: %r" % found)
    listed = {("lib/x/e.c", "own"): (1, "x"), ("lib/x/e.c", "named"): (1, "x"),
              ("lib/x/e.c", "gone"): (1, "x")}
    p = problems_listed(found, listed)
    if len(p) != 2 or "not listed" not in p[0] + p[1] or "lists 1" not in p[0] + p[1]:
        raise AssertionError("listed: %r" % p)
    if problems_stale(found, listed) != [problems_stale({}, {("lib/x/e.c", "gone"): 0})[0]]:
        raise AssertionError("stale: %r" % problems_stale(found, listed))
    p = problems_distinct(found, rows)
    if len(p) != 2 or "restates row fp8_head_dim_cudnn" not in p[1] or \
            "restates row fp8_bias_engines" not in p[0]:
        raise AssertionError("distinct: %r" % p)
    cites = [("lib/x/e.c", line, rid) for line, rid in row_citations(SYNTH_ENGINE)]
    p = problems_cited(cites, rows)
    if len(cites) != 2 or len(p) != 1 or "gone_row" not in p[0]:
        raise AssertionError("cited: %r %r" % (cites, p))


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    root = argv[1]
    with open(os.path.join(root, SUPPORT_TABLE)) as f:
        rows = table_rows(f.read())
    found, cites = scan(root)
    tests = tap.Tests()
    tests.case("self-test: each check catches a synthetic engine's refusals")(self_test)

    def run(problems):
        def fn():
            if problems:
                raise AssertionError("\n".join(problems))
        return fn

    n = sum(len(v) for v in found.values())
    tests.case("listed: the engines' %d refusals are ENGINE_REFUSALS' (%d rows read)"
               % (n, len(rows)))(run(problems_listed(found, ENGINE_REFUSALS)))
    tests.case("no stale ENGINE_REFUSALS entry")(run(problems_stale(found, ENGINE_REFUSALS)))
    tests.case("distinct: no engine refusal restates a support row")(
        run(problems_distinct(found, rows)))
    tests.case("cited: the %d rows the engines name exist" % len(cites))(
        run(problems_cited(cites, rows)))
    return 1 if tap.run(tests) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
