"""What TE's context-parallel FP8 code does that its own test does not
catch, with its exact signature read from the run file (docs/te.md,
"Context parallelism", finding T1).

T1: AttnFuncWithCPAndKVP2P's FP8 backward returns, as a rank's dK and dV,
the sum of that rank's own per-step partial gradients -- each of them the
gradient of another rank's K/V block -- instead of the partials every
rank computed for its block. At step i a rank holds the K/V block of rank
(rank + 1 + i) % cp (the forward saves the last block it received,
context_parallel.py 2.19.0:2330 / 2.20.2:2312, and the backward receives
from rank + 1, :2473-2474 / :2456-2457) and writes the step's partial
into slot (rank + i + 1) % cp of dkv_recv_buffer (delayed scaling,
:2975 / :2958) or adds it to a local dkv_buffer (current scaling,
:2977 / :2960); the one exchange, all_to_all_single(dkv_send_buffer,
dkv_recv_buffer) (:2730-2735 / :2713-2718), writes what the other ranks
computed for this rank's block into dkv_send_buffer, which nothing reads;
the result is the sum over dkv_recv_buffer (:3074-3090 / :3057-3073) or
dkv_buffer (:3093 / :3076). dQ is right (Q does not move). TE's test holds FP8 to an RMSE
below 0.15 of the range (tests/pytorch/utils.py :239-265), which such a
dK passes at its test's sizes.

The signature, per rank, for dk and dv: (1) TE's tensor is the rank's own
partials (engine_call/backward/NNN/out_dk, out_dv; FP8 codes times
scale_inv under delayed scaling), each placed in the rank's K rows (a
partial of half the rows is the first chunk: the causal steps of the
block's first half, :2991-2996 / :2974-2979), summed in float32 and
rounded to the nominal dtype, to one ulp of it; (2) the partials every
rank computed for this rank's block, placed and summed the same way,
are within TE's FP8 tolerance of the case without CP -- the engine's
steps are right, TE's combination of them is not."""
import os
import re

import numpy as np

from . import signatures

NAME = ("T1: TE's FP8 P2P backward returns each rank's own per-step dK/dV partials summed "
        "(the other ranks' blocks), not its block's")
TE_LINES = ("context_parallel.py 2.19.0:2330,2473-2474,2730-2735,2975-2977,3074-3093, "
            "2.20.2:2312,2456-2457,2713-2718,2958-2960,3057-3076")

# the K/V side of a P2P rank's gradients and the engine-call output
# holding each step's partial of it
GRADS = {"dk": "out_dk", "dv": "out_dv"}


def applies(spec):
    """T1's cases: FP8 through AttnFuncWithCPAndKVP2P with the FP8 backward
    (p2p; an a2a+p2p case's P2P level has its heads split by the a2a, not
    in the matrix) under delayed scaling, or current scaling without a
    causal mask (its causal steps follow the f16 branch's copy/add
    pattern into the local buffer, :3009-3055 / :2992-3038, which this
    signature does not model)."""
    f, cp = spec.get("fp8"), spec.get("cp")
    if not f or not cp or cp["comm"] != "p2p" or not f.get("dpa_bwd", True):
        return False
    return f["recipe"] == "delayed" or "causal" not in spec["mask"]


def _values(d):
    """A dataset's values in float64: FP8 codes times their scale_inv."""
    dt = str(d.attrs["dtype"])
    if dt.startswith("float8"):
        import torch
        f8 = torch.float8_e4m3fn if dt == "float8_e4m3fn" else torch.float8_e5m2
        codes = torch.from_numpy(np.ascontiguousarray(d[()])).view(f8).float().numpy()
        return codes.astype(np.float64) * float(np.float32(d.attrs["scale_inv"]))
    return signatures.load(d)


def _placed(part, shape, sd):
    """A step's partial in the rank's K rows: whole, or the first chunk."""
    if part.shape == tuple(shape):
        return part
    out = np.zeros(shape, np.float64)
    idx = [slice(None)] * len(shape)
    idx[sd] = slice(0, part.shape[sd])
    out[tuple(idx)] = part
    return out


def _rounded(x, nominal):
    import torch
    t = torch.from_numpy(x.astype(np.float32)).to(
        torch.bfloat16 if nominal == "bfloat16" else torch.float16)
    return t.float().numpy().astype(np.float64)


def check(case, spec, rank, name, ratio_of):
    """None when rank's dk/dv carry T1's signature; else why not.
    ratio_of(a, ref): TE's FP8 tolerance ratio (< 1 passes)."""
    fmt = spec["layout"].split("_")[0]
    sd = {"bshd": 1, "sbhd": 0}.get(fmt)
    if sd is None:
        return f"a {fmt} case"
    ranks = case["ranks"]
    size = len(ranks)
    got = ranks[rank]["backward"][name]
    shape = got.shape
    nominal = str(got.attrs["dtype"])
    own = np.zeros(shape, np.float64)
    right = np.zeros(shape, np.float64)
    for r in ranks:
        calls = ranks[r]["engine_call/backward"]
        for i, n in enumerate(sorted(calls)):
            part = _placed(_values(calls[n][GRADS[name]]), shape, sd)
            if r == rank:
                own += part
            if (int(r) + 1 + i) % size == int(rank):
                right += part
    a = signatures.load(got)
    want = _rounded(own, nominal)
    ulp = np.abs(_rounded(own * (1 + 2.0 ** -7), nominal) - want)
    if not np.all(np.abs(a - want) <= ulp + 1e-30):
        bad = int(np.sum(~(np.abs(a - want) <= ulp + 1e-30)))
        return f"{bad} of {a.size} elements are not the rank's own partials summed"
    ref = np.take(signatures.load(case["backward"][name]),
                  ranks[rank]["inputs/token_index_kv"][()], axis=sd)
    ratio = ratio_of(right, ref)
    if not ratio < 1.0:
        return (f"the partials every rank computed for this block are {ratio:.3g} of TE's "
                f"FP8 tolerance from the case without CP")
    return None


# What TE's context-parallel path refuses with FP8, by its own check: a case
# TE raises on is listed as TE's refusal (not counted as errored) only with
# this exact signature -- the exception, its message, and a TE line that is
# that check in the TE that ran.
R1 = {
    "name": "R1: FusedAttention refuses the delayed recipe without reduce_amax under context "
            "parallelism",
    "te_lines": "backends.py 2.19.0:2250-2254, 2.20.2:2509-2513",
    "raised": "TE raised AssertionError: Amax reduction across TP+CP group is necessary when "
              "using context parallelism with FP8!",
    "file": "transformer_engine/pytorch/attention/dot_product_attention/backends.py",
    "check": "assert not context_parallel or fp8_recipe.reduce_amax",
}
_RAISED = re.compile(r"^(?:fattn-te: )?ranks? (\d+(?:, \d+)*): (.*) \(([^()]*):(\d+)\)$")


def refusal(spec, reason, te_root):
    """(R1, None) when the errored case is R1 with its exact signature;
    (None, why not) when it is R1's case but not its signature; (None,
    None) when it is not R1's case."""
    f, cp = spec.get("fp8"), spec.get("cp")
    if not (f and cp and f.get("recipe") == "delayed" and f.get("reduce_amax") is False):
        return None, None
    m = _RAISED.match(reason)
    if not m or m.group(2) != R1["raised"] or m.group(3) != R1["file"]:
        return None, f"TE's error is not R1's: {reason}"
    path = os.path.join(te_root, m.group(3))
    try:
        with open(path, encoding="utf-8") as fh:
            line = fh.read().splitlines()[int(m.group(4)) - 1]
    except (OSError, IndexError):
        return None, f"{m.group(3)}:{m.group(4)} cannot be read in {te_root}"
    if R1["check"] not in line:
        return None, f"{m.group(3)}:{m.group(4)} is not R1's check ({line.strip()})"
    return R1, None
