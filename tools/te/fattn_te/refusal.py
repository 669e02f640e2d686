"""The cases fattn refuses, asked of TE: does TE refuse them too?

fattn's support table names where each refusal is in TE (the citation
closing `refused_message`). By that place a refused case is:
  * TE's C++ (transformer_engine/common/, pytorch/csrc/): the shim stands
    for the C++, so its tex.fused_attn_fwd raises the refusal as
    nvte_get_fused_attn_backend / the pybind check would (a RuntimeError,
    as NVTE_ERROR reaches Python), when and if TE's Python calls it;
  * FusedAttnFunc's own Python (backends.py, cpp_extensions/fused_attn.py,
    get_attention_quantizers): TE's code must raise by itself;
  * anything else is not asked of TE: a rule of DotProductAttention's,
    above the FusedAttnFunc call fattn-te makes (routing, argument checks),
    what fattn does not model (FATTN_E_NOT_MODELLED), what TE would run
    unsafely (FATTN_E_UNSAFE_TE_QUIRK: an out-of-bounds dBias write), or
    what the engine cannot run (a skip).
An asked case TE raises on with the refusal's signature (SIGNATURES: the
exception's type, the start of its message and the TE file it leaves TE
from) is recorded as fattn refused it, and TE's exception (type, message,
TE line) is reported on stderr and kept in `log` (written as JSON where
$FATTN_TE_REFUSALS names a file; `fattn-te verify` prints its summary); an
asked case TE runs is recorded as TE ran it, so that it differs from
fattn's refusal; an asked case TE raises on otherwise is a case that errored
(Mismatch), its reason saying who raised what instead."""
import json
import os
import re
import sys

from . import bridge, record

_CITE = re.compile(r"\(TE (\S+) (transformer_engine/\S+):(\d+)\)\s*$")
_TE_PY_FILES = ("pytorch/cpp_extensions/fused_attn.py",
                "pytorch/attention/dot_product_attention/backends.py")
_TE_PY_RULES = {"fp8_quantizer_type"}  # utils.py get_attention_quantizers, L:1470 / S:1628
_DPA_UTILS = "transformer_engine/pytorch/attention/dot_product_attention/utils.py"
_BACKENDS = "transformer_engine/pytorch/attention/dot_product_attention/backends.py"
# What a refusal looks like when TE gives it: (type, start of the message,
# the TE file it leaves TE's code from). TE's C++ (the shim standing for
# it) raises from the tex.fused_attn_fwd call; TE's Python by rule (any
# other rule of TE's Python: an exception from the file the rule cites).
CPP_SIGNATURE = ("CppRefusal", "TE's C++ refuses this case",
                 "transformer_engine/pytorch/cpp_extensions/fused_attn.py")
SIGNATURES = {
    "fp8_quantizer_type": ("TypeError", "FP8 attention requires FP8-compatible quantizers",
                           _DPA_UTILS),
    # 2.19.0 only (F1, docs/te.md): 2.20.2 runs the case
    "fp8_max_logit": ("TypeError", "Value after * must be an iterable, not NoneType", _BACKENDS),
}


class Mismatch(Exception):
    """TE raised on a refused case, but not the refusal: the case errored."""


def classify(attrs):
    """('cpp' | 'te' | None, the citation or why not asked)."""
    a = dict((x[0], x[1]) for x in attrs)
    if "skipped" in a:
        return None, "skipped by the engine"
    if a.get("refused_status") != "FATTN_E_INVALID_CASE":  # not modelled; unsafe in TE
        return None, f"{a.get('refused_status')}: not a refusal of TE's"
    m = _CITE.search(str(a.get("refused_message", "")))
    if not m:
        return None, "no TE line cited"
    path, cite = m.group(2), f"{m.group(2)}:{m.group(3)} (TE {m.group(1)})"
    if path.startswith(("transformer_engine/common/", "transformer_engine/pytorch/csrc/")):
        return "cpp", cite
    if path.endswith(_TE_PY_FILES) or a.get("refused_rule") in _TE_PY_RULES:
        return "te", cite
    return None, f"DotProductAttention's ({cite}), above FusedAttnFunc"


log = []


def write_log():
    """The log as JSON to $FATTN_TE_REFUSALS, replaced atomically and never
    through a link planted there (guard.write_text)."""
    path = os.environ.get("FATTN_TE_REFUSALS")
    if path:
        from . import guard
        guard.write_text(path, json.dumps(log, indent=1))


def run(backends, cid, res, attrs, call="module"):
    """Ask TE, through the path the run takes (record.case_path). Returns
    the case's children when TE ran it, else None."""
    how, cite = classify(attrs)
    rule = dict((x[0], x[1]) for x in attrs).get("refused_rule")
    entry = {"case": cid, "rule": rule, "where": cite, "asked": how}
    log.append(entry)
    if how is None or "tensors" not in res:
        entry["asked"] = None
        return None
    bridge.pending_refusal = (
        f"TE's C++ refuses this case ({cite}), as fattn's rule {rule} models it"
        if how == "cpp" else None)
    try:
        children = record.run_case(backends, res, record.synth_inputs(res), call)
    except Exception as e:  # the refusal TE gives: data, reported
        from . import blame, dpa
        msg = str(e).splitlines()[0] if str(e) else ""
        if isinstance(e, dpa.RoutedAway):  # --call dpa: DPA finds no backend for it
            entry.update(te="routed away", message=msg)
            sys.stderr.write(f"fattn-te: case {cid}: refused by fattn (rule {rule}); {msg}: "
                             f"not asked of FusedAttention\n")
            return None
        line = record.te_raised_where(e)
        who, why = blame.classify(e)
        if who == "tool" and not isinstance(e, bridge.CppRefusal):
            raise blame.ToolError(cid, why) from e
        entry.update(te="raised", type=type(e).__name__, message=msg, te_line=line)
        sig = CPP_SIGNATURE if how == "cpp" else SIGNATURES.get(
            rule, (None, "", cite.split(":")[0]))
        if who == "handoff" or not (
                sig[0] in (None, type(e).__name__) and msg.startswith(sig[1])
                and line.startswith(sig[2] + ":")):
            entry["te"] = "raised otherwise"
            raise Mismatch(f"{why}; fattn refuses the case by rule {rule} ({cite}), which TE "
                           f"gives as {sig[0] or 'an exception'}: {sig[1]}... from {sig[2]}")
        sys.stderr.write(f"fattn-te: case {cid}: refused by fattn (rule {rule}) and by TE: "
                         f"{type(e).__name__}: {msg} ({line})\n")
        return None
    finally:
        bridge.pending_refusal = None
    entry["te"] = "ran"
    sys.stderr.write(f"fattn-te: case {cid}: refused by fattn (rule {rule}, {cite}) but run "
                     f"by TE: recorded as run\n")
    return children


def summary(entries):
    """One line: how TE answered the cases fattn refuses."""
    asked = [e for e in entries if e.get("asked")]
    ran = [e["case"] for e in asked if e.get("te") == "ran"]
    other = [e["case"] for e in asked if e.get("te") == "raised otherwise"]
    line = (f"{len(asked)} of {len(entries)} refused cases asked of TE (its C++ as the shim, "
            f"its Python itself): {len(asked) - len(ran) - len(other)} refused by TE too")
    if ran:
        line += f"; run by TE: {', '.join(ran)}"
    if other:
        line += f"; raised otherwise (errored): {', '.join(other)}"
    return line
