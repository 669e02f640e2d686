"""Suite `te`: the DotProductAttention path's CPU side (tools/te/fattn_te/
dpa.py). DotProductAttention itself needs CUDA; what it is given for each
case, and why a case is not given to it, are decided here without TE and
held to the default matrix.

Usage: check_dpa.py TOOLS_TE_DIR FATTN; prints: the count through DPA, the
reasons the others are not (sorted, with counts), then the plan of one case
(its constructor and call arguments, the environment)."""
import collections
import json
import subprocess
import sys

sys.path.insert(0, sys.argv[1])
from fattn_te import dpa  # noqa: E402

p = subprocess.run([sys.argv[2], "cases", "--resolved", "--json"], capture_output=True,
                   text=True, check=True)
cases = [c for c in json.loads(p.stdout) if "spec" in c and not c["spec"].get("expect_refusal")]
why = collections.Counter(dpa.not_through_dpa(c) for c in cases)
print(why.pop(None, 0))
print("; ".join(f"{k.split(' (')[0]} {v}" for k, v in sorted(why.items())))
c = next(c for c in cases if c["id"] == "mode.eval.dropout_p0.2.f16")
init, call, env = dpa.plan(c)
print(json.dumps([init, call, env], sort_keys=True))
