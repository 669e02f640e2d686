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

# A case DPA routes away (dpa.RoutedAway, raised here for one case of a
# filtered run, as call_dpa raises it on a GPU runner) is recorded as routed
# away, counted on the run line, listed, and left out of a verdict.
if len(sys.argv) > 3:
    import contextlib
    import io
    import os
    from fattn_te import cli, record, verify
    work, te = sys.argv[3], sys.argv[4]
    out, ref = os.path.join(work, "routed.h5"), os.path.join(work, "routed-ref.h5")
    real = record.run_case

    def run_case(backends, res, case, path="module"):
        if res["id"] == "layout.sb3hd.causal.f16":
            raise dpa.RoutedAway("DotProductAttention routes it away from FusedAttention "
                                 "(a stand-in for DPA's answer)")
        return real(backends, res, case, path)
    record.run_case = run_case
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["run", "--te", te, "--filter", "layout.sb3hd*", "-o", out])
    print(rc, [l for l in buf.getvalue().splitlines() if "routed away" in l])
    subprocess.run([sys.argv[2], "run", "--impl", "split", "--filter", "layout.sb3hd*", "-o", ref],
                   capture_output=True, check=True)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        res = verify._verdict(sys.argv[2], "fattn-split", ref, "te", out, None, {}, True)
    print(res["exit"], buf.getvalue().splitlines())

# DPA's name for a one-head packed layout (verify.DEVIATIONS): only the
# h2d/h3d -> 2hd/3hd renaming, only strides of size-1 dims, only one-head
# layouts, and only under --call dpa.
from fattn_te import verify  # noqa: E402
same = verify._same_memory_other_name
d = "bfloat16 [27,1,16] strides [32,32,1] backward/dk xxh3-128:e5a3"
probes = [same("thd_th2d", "thd_t2hd"), same("sbh3d", "sb3hd"),
          same(d, d.replace("[32,32,1]", "[32,16,1]")),
          not same("thd_t2hd", "thd_th2d"), not same("thd_th2d", "thd_thd_thd"),
          not same(d, d), not same(d, d.replace("[32,32,1]", "[32,32,2]")),
          not same(d.replace("[27,1,16]", "[27,2,16]"),
                   d.replace("[27,1,16]", "[27,2,16]").replace("[32,32,1]", "[32,16,1]")),
          not same(d, d.replace("[32,32,1]", "[32,16,1]").replace("e5a3", "e5a4")),
          verify._one_head_packed({"spec": {"layout": "thd_th2d", "h": 2, "hg": 1}}),
          not verify._one_head_packed({"spec": {"layout": "thd_th2d", "h": 2}}),
          not verify._one_head_packed({"spec": {"layout": "thd_t2hd", "h": 2, "hg": 1}})]
entry = next(e for e in verify.DEVIATIONS if e["name"].startswith("DotProductAttention names"))
res = {"spec": {"layout": "thd_th2d", "h": 2, "hg": 1}}
probes.append(not entry["case"](dict(res, call="module")))
probes.append(entry["case"](dict(res, call="dpa")))
print("one-head layout entry:", "narrow" if all(probes) else
      f"probes failing: {[i for i, ok in enumerate(probes) if not ok]}")
