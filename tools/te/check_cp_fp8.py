"""Suite `te`: the shim's tex.quantize reduces a current-scaling
quantizer's amax over its group, as TE's C++ does
(Float8CurrentScalingQuantizer::quantize_impl, quantizer.cpp
release_v2.19:1015-1021; tools/te/fattn_te/bridge_fp8.py _reduce_amax):
two gloo ranks on the host, each quantizing a shard whose largest
magnitude differs (rank 0: 0.5, rank 1: 1.0), through TE 2.20.2's own
Float8CurrentScalingQuantizer with and without with_amax_reduction over
the two ranks' group. Prints, from rank 0, one line per quantizer:
"<reduce|local> <rank 0's amax> <rank 1's amax> <rank 0's scale_inv>
<rank 1's scale_inv>" (C's %a); before that, whether three errors carry
R1's signature (tools/te/fattn_te/cp_findings.py).

Usage: check_cp_fp8.py TOOLS_TE_DIR WORK_DIR"""
import os
import sys

sys.path.insert(0, sys.argv[1])
from fattn_te import bridge, bridge_fp8, fp8, loader, patches, where  # noqa: E402


def main():
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)  # before the fork (a forked OpenMP pool hangs)
    loader.import_backends(where.te_root("2.20.2"))
    patches.apply_cpu()
    import transformer_engine_torch as tex
    from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer
    # R1's signature (fattn_te/cp_findings.py): the message and a line of
    # the TE that ran that is FusedAttention's reduce_amax check
    from fattn_te import cp, cp_findings
    spec = {"fp8": {"recipe": "delayed", "reduce_amax": False}, "cp": {"size": 2}}
    head = ("rank 0: " + cp_findings.R1["raised"])
    r1 = f"{cp_findings.R1['raised']} ({cp_findings.R1['file']}:2510)"
    for label, reason in (
            ("R1 2510", f"{head} ({cp_findings.R1['file']}:2510)"),
            ("R1 2511", f"{head} ({cp_findings.R1['file']}:2511)"),
            ("R1 other message", f"rank 0: TE raised AssertionError: no ({cp_findings.R1['file']}:2510)"),
            # as cp.py records a case whose ranks raised: each rank's error
            ("R1 from both ranks", cp.rank_errors([(0, r1), (1, r1)])),
            ("R1 and another rank's error",
             cp.rank_errors([(0, r1), (1, "TE raised RuntimeError: x (y.py:3)")]))):
        entry, why = cp_findings.refusal(spec, reason, where.te_root("2.20.2"))
        print(f"{label}: {'R1' if entry else 'not'}{': ' + why if why else ''}")
    sys.stdout.flush()  # nothing buffered for the child to inherit
    pid = os.fork()
    rank = 0 if pid else 1
    bridge.set_engine(bridge.Engine("cpu"))
    dist.init_process_group("gloo", init_method="file://" + os.path.join(sys.argv[2], "store"),
                            rank=rank, world_size=2)
    group = dist.new_group([0, 1])
    # a shard whose amax is 0.5 on rank 0, 1.0 on rank 1 (exact in bf16)
    x = (torch.linspace(-1.0, 1.0, 64) * (0.5 * (rank + 1))).to(torch.bfloat16)
    rows = []
    for name, red in (("reduce", True), ("local", False)):
        q = Float8CurrentScalingQuantizer(fp8_dtype=tex.DType.kFloat8E4M3,
                                          device=torch.device("cpu"),
                                          with_amax_reduction=red,
                                          amax_reduction_group=group if red else None)
        y = q(x)
        amax = bridge_fp8.cs_state[id(q)][2]
        got = [None, None]
        dist.all_gather_object(got, (amax, float(y._scale_inv.reshape(-1)[0])))
        rows.append(f"{name} {fp8.hexf(got[0][0])} {fp8.hexf(got[1][0])} "
                    f"{fp8.hexf(got[0][1])} {fp8.hexf(got[1][1])}")
    dist.destroy_process_group()
    if rank == 1:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print("\n".join(rows))
    return 0 if status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
