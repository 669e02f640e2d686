"""Suite `te`: DEVIATIONS (tools/te/fattn_te/verify.py) matches narrowly,
read against the runs of a kept `fattn-te verify --te 2.19.0 --te 2.20.2`.

F1 only where exactly one run refused the case and only its missing paths,
and only with its exact signature (TE 2.19.0's TypeError at
backends.py:1751 on the refusing side, 2.20.2's (out, None) on the
running side); the NaN-payload entry only in fattn pairs, only when every
differing element is a NaN payload, and only with TE's NaN the bits
torch's dequantisation gives the poison code.

Usage: check_documented.py TOOLS_TE_DIR KEPT_DIR; prints two lines: the
entries each probe matched, and what a moved F1 line shows instead."""
import json
import sys

sys.path.insert(0, sys.argv[1])
from fattn_te import signatures, verify  # noqa: E402

v = sys.argv[2]
logs = [json.load(open(f"{v}/te{i}-refusals.json", encoding="utf-8")) for i in (1, 2)]
te = signatures.Pair(["te-2.19.0", "te-2.20.2"], [f"{v}/te1.h5", f"{v}/te2.h5"], logs)
fe = signatures.Pair(["fattn-split", "te-2.20.2"], [f"{v}/fattn-split.h5", f"{v}/te2.h5"],
                     [None, logs[1]])
swapped = signatures.Pair(["te-2.20.2", "fattn-split"], [f"{v}/te2.h5", f"{v}/fattn-split.h5"],
                          [logs[1], None])
# a monolith that raises F1's TypeError one line further down
moved = json.loads(json.dumps(logs[0]))
for e in moved:
    if e["case"] == "refuse.fp8.max_logit":
        e["te_line"] = e["te_line"].replace(":1751", ":1752")
te_moved = signatures.Pair(["te-2.19.0", "copy"], [f"{v}/te1.h5", f"{v}/te2.h5"],
                           [moved, logs[1]])
r = {"refuse.fp8.max_logit": {"spec": {"fp8": {"recipe": "delayed"}, "return_max_logit": True}},
     "fp8.ds.bshd.padding_causal": {"padding": True, "spec": {"fp8": {"recipe": "delayed"}}}}
p, q = "/cases/refuse.fp8.max_logit/forward/out", "/cases/fp8.ds.bshd.padding_causal/forward/out"
ran = {"kind": "dataset", "status": "missing_in_a"}
diff = {"kind": "dataset", "status": "different", "count": 3, "ulp_histogram": {}}
nanp = {"kind": "dataset", "status": "different", "count": 4, "ulp_histogram": {"nan_payloads": 4}}
ulp = {"kind": "dataset", "status": "different", "count": 4, "ulp_histogram": {"nan_payloads": 3}}
one = {"refuse.fp8.max_logit": "a"}
misses = {}
print(*[(d["name"].split(":")[0].split(" ")[0] if d else "None") for d in (
    verify._documented(p, ran, r, False, one, te), verify._documented(p, diff, r, False, one, te),
    verify._documented(p, ran, r, False, {}, te), verify._documented(q, nanp, r, True, {}, fe),
    verify._documented(q, nanp, r, False, {}, fe), verify._documented(q, ulp, r, True, {}, fe),
    verify._documented(p, ran, r, False, one, fe),
    verify._documented(p, ran, r, False, one, te_moved, misses),
    verify._documented(q, nanp, r, True, {}, swapped))])
print(misses["refuse.fp8.max_logit"][1])
