"""One rank of a context-parallel run (docs/te.md, "Context parallelism"):
`python -m fattn_te.cp_worker` in each of N local processes of one
torch.distributed group (gloo on the host; NCCL, one GPU per rank, on a GPU
runner). Every rank imports TE with fattn's shim, then runs the CP cases in
one order; a case of size s runs on ranks 0..s-1 with its own groups (every
rank makes every group, as torch.distributed requires) while the others
wait at the barrier that ends the case. Each rank holds its shard of the
sequence as TE's test makes it and calls TE's own FusedAttention with
cp_group, cp_global_ranks, cp_stream and cp_comm_type, forward and backward
through autograd; every fused_attn_fwd/bwd call TE's CP code makes on the
way is recorded. Rank 0 also runs the same case without CP (one process,
TE's FusedAttention as fattn-te runs every case): what the ranks are held
against. Each rank writes its records to OUT/<case>.<rank>.pkl."""
import argparse
import datetime
import inspect
import json
import os
import pickle
import sys
import time

import numpy as np

from . import fp8


def _arg_parser():
    ap = argparse.ArgumentParser(prog="fattn_te.cp_worker")
    ap.add_argument("--root", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--init", required=True, help="torch.distributed init_method")
    ap.add_argument("--ref", required=True, help="fattn run --cp-reference's file")
    ap.add_argument("--resolved", required=True, help="the cases' resolved model (JSON)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--fork", action="store_true",
                    help="start ranks 1..world-1 by forking this one once TE is imported "
                         "(the host's gloo runs; not with CUDA)")
    return ap


# ---- the rank's shard, as TE's test makes it -----------------------------------

def seq_dim(fmt):
    return {"bshd": 1, "sbhd": 0, "thd": 0}[fmt]


def dual_chunk_index(s, size, rank):
    """DualChunkSwap of a sequence of s positions: chunks rank and
    2*size-1-rank of 2*size (run_attention_with_cp.py 2.19 :473-483)."""
    c = s // (2 * size)
    return np.concatenate([np.arange(rank * c, (rank + 1) * c),
                           np.arange((2 * size - 1 - rank) * c, (2 * size - rank) * c)])


def token_index(res, side, size, rank, balance):
    """The global positions (bshd/sbhd: along the sequence; thd: tokens) of
    the rank's rows of q (side "q") or k/v ("kv")."""
    import torch
    spec = res["spec"]
    fmt = res["q_format"] if side == "q" else res["kv_format"]
    if fmt != "thd":
        return dual_chunk_index(spec["sq"] if side == "q" else spec["skv"], size, rank)
    cu = torch.tensor(res["cu_seqlens_q_padded" if side == "q" else "cu_seqlens_kv_padded"],
                      dtype=torch.int32)
    total = int(cu[-1])
    if balance == "no_load_balance":
        # TE's own (2.20.2 context_parallel.py:294-304): rank r's contiguous chunk
        from transformer_engine.pytorch.attention.dot_product_attention import \
            context_parallel as tcp
        from transformer_engine.pytorch.constants import CPLoadBalancingStrategy as S
        idx = tcp.get_thd_partitioned_indices(cu, total, size, rank, "cpu", S.NO_LOAD_BALANCE)
    else:
        # as TE's test: tex.thd_get_partitioned_indices (the shim's, fattn's C)
        import transformer_engine_torch as tex
        idx = tex.thd_get_partitioned_indices(cu, total, size, rank)
    return idx.numpy().astype(np.int64)


def take(x, fmt, index):
    import torch
    return x.index_select(seq_dim(fmt), torch.from_numpy(index)).contiguous()


# ---- groups ---------------------------------------------------------------------

_GROUPS = {}


def groups_for(size, comm, rank):
    """(cp_group, ranks) of a case of `size` ranks: one group of ranks
    0..size-1, or for a2a+p2p [a2a group, p2p group] as TE's test makes them
    (run_attention_with_cp.py 2.19 :285-297: a2a pairs (2i, 2i+1), p2p rings
    i, i+2, ...). Every rank makes every group in the same order."""
    import torch.distributed as dist
    key = (size, comm)
    if key not in _GROUPS:
        main = dist.new_group(list(range(size)))
        subs = []
        if comm == "a2a+p2p":
            sub_ranks = [list(range(2 * i, 2 * i + 2)) for i in range(size // 2)]
            sub_ranks += [list(range(i, size, 2)) for i in range(2)]
            for sr in sub_ranks:
                g = dist.new_group(sr)
                if rank in sr:
                    subs.append(g)
        _GROUPS[key] = (main, subs)
    main, subs = _GROUPS[key]
    return (subs if comm == "a2a+p2p" else main), list(range(size))


def main_group(size, comm):
    """The group of all the case's ranks (groups_for made it): the
    amax-reduction group TE's test hands its FP8 autocast
    (run_attention_with_cp.py release_v2.19 :409, :525: cp_comm_group,
    also for a2a+p2p)."""
    return _GROUPS[(size, comm)][0]


# ---- the engine calls TE's CP code makes -----------------------------------------

_SCALARS = {"max_seqlen_q": "int", "max_seqlen_kv": "int", "is_training": "bool",
            "attn_scale": "float", "dropout": "float", "fast_zero_fill": "bool",
            "qkv_layout": "layout", "o_format": "format", "do_format": "format",
            "dqkv_layout": "layout", "bias_type": "bias", "mask_type": "mask",
            "softmax_type": "softmax", "window_size": "pair", "bottom_right_diagonal": "bool",
            "deterministic": "bool", "return_max_logit": "bool"}
# the FP8 quantizers a CP step hands the engine (per-step copies whose amax
# TE reduces over the steps itself, context_parallel.py 2.20.2:1767-1777,
# 2607-2619), recorded after the call as fattn records quantizers
_QUANTIZERS = ["s_quantizer", "o_quantizer", "dp_quantizer", "dqkv_quantizer"]
_TENSORS = ["cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded", "q",
            "k", "v", "o", "d_o", "attn_bias", "softmax_offset"]


def _scalar_attr(name, kind, v):
    from . import shim
    if v is None:
        return None
    enums = {"layout": shim.NVTE_QKV_Layout, "format": shim.NVTE_QKV_Format,
             "bias": shim.NVTE_Bias_Type, "mask": shim.NVTE_Mask_Type,
             "softmax": shim.NVTE_Softmax_Type}
    if kind in enums:
        return (name, enums[kind](int(v)).name, None)
    if kind == "int":
        return (name, np.int64(v), np.dtype("int64"))
    if kind == "bool":
        return (name, np.uint8(bool(v)), np.dtype("uint8"))
    if kind == "float":
        return (name, np.float32(v), np.dtype("float32"))
    return (name, np.array([int(v[0]), int(v[1])], dtype=np.int64), np.dtype("int64"))


def _quantizer_text(q):
    """fattn's quantizer string (fp8.quantizer_string); a current-scaling
    copy the shim never quantized with holds no scale or amax in TE
    (TE's C++ makes O in the nominal dtype under current scaling):
    its kind, dtype, pow2 and eps only."""
    from . import bridge_fp8
    if bridge_fp8.kind(q) == "delayed" or id(q) in bridge_fp8.cs_state:
        return fp8.quantizer_string(q)
    return (f"current {fp8._DTYPE_NAME[int(q.dtype)]} pow2={int(bool(q.force_pow_2_scales))} "
            f"eps={fp8.hexf(float(q.amax_epsilon))}")


class CallLog:
    """Wraps the shim's fused_attn_fwd / fused_attn_bwd while a rank runs:
    each call's arguments (scalars as attributes, tensors as datasets) and
    what it returned, in call order."""

    def __init__(self):
        from . import calls
        self.sig = {"forward": inspect.signature(calls.fused_attn_fwd),
                    "backward": inspect.signature(calls.fused_attn_bwd)}
        self.calls = {"forward": [], "backward": []}

    def record(self, kind, args, result):
        from . import record
        a = self.sig[kind].bind(*args).arguments
        attrs = [x for x in (_scalar_attr(n, k, a.get(n)) for n, k in _SCALARS.items()
                             if n in a) if x]
        attrs += [(n, _quantizer_text(a[n]), None) for n in _QUANTIZERS if a.get(n) is not None]
        children = {}
        for n in _TENSORS:
            if a.get(n) is not None:
                record.put(children, n, a[n])
        if kind == "forward":
            record.put(children, "out_o", result[0])
            record.put(children, "out_softmax_stats", result[1])
        else:
            record.put(children, "softmax_stats", a["aux_ctx_tensors"][0])
            for n, t in zip(("out_dq", "out_dk", "out_dv", "out_d_bias"), result):
                record.put(children, n, t)
        self.calls[kind].append(record.group(attrs, children))

    def install(self, tex):
        self.orig = (tex.fused_attn_fwd, tex.fused_attn_bwd)
        fwd, bwd = self.orig

        def f(*args):
            r = fwd(*args)
            self.record("forward", args, r)
            return r

        def b(*args):
            r = bwd(*args)
            self.record("backward", args, r)
            return r

        tex.fused_attn_fwd, tex.fused_attn_bwd = f, b

    def remove(self, tex):
        tex.fused_attn_fwd, tex.fused_attn_bwd = self.orig

    def tree(self):
        from . import record
        return record.group([], {kind: record.group([], {f"{i:03d}": c for i, c in
                                                         enumerate(calls)})
                                 for kind, calls in self.calls.items() if calls})


# ---- one rank of one case ----------------------------------------------------------

def run_rank(backends, res, ref_case, rank, device="cpu"):
    """The rank's shard through TE's FusedAttention with CP, forward and
    backward; returns the rank's tree (inputs, forward, backward,
    engine_call). device: where the rank's tensors live ("cuda" on a GPU
    runner: NCCL's collectives need them there)."""
    import torch
    import transformer_engine_torch as tex
    from . import bridge, cp_fp8, cp_shim, module, record
    from transformer_engine.pytorch.constants import CPLoadBalancingStrategy
    spec = res["spec"]
    cp = spec["cp"]
    size, comm, balance = cp["size"], cp["comm"], cp["load_balancing"]
    g = {n: record.to_torch(ds) for n, ds in ref_case["children"]["inputs"]["children"].items()
         if "data" in ds}
    iq = token_index(res, "q", size, rank, balance)
    ikv = token_index(res, "kv", size, rank, balance)
    t = {"q": take(g["q"], res["q_format"], iq), "k": take(g["k"], res["kv_format"], ikv),
         "v": take(g["v"], res["kv_format"], ikv), "d_out": take(g["d_out"], res["q_format"], iq)
         if "d_out" in g else None}
    for n in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
        if n in g:
            t[n] = g[n]
    for q, kv in (("cu_seqlens_q", "cu_seqlens_kv"), ("cu_seqlens_q_padded", "cu_seqlens_kv_padded")):
        if q in t and kv in t and torch.equal(t[q], t[kv]):
            # self-attention: one tensor for both, as TE's test hands them
            # (run_attention_with_cp.py 2.19 :150-151; no-load-balance asserts
            # it, context_parallel.py 2.20.2:5673-5675)
            t[kv] = t[q]
    if "attn_bias" in g:  # [b|1, h|1, sq|1, skv]: the rank's query rows, as TE's test
        b = g["attn_bias"]
        t["attn_bias"] = b if b.shape[2] == 1 else b.index_select(
            2, torch.from_numpy(iq)).contiguous()
    if "softmax_offset" in g:
        t["softmax_offset"] = g["softmax_offset"]
    if device != "cpu":
        t = {n: x.to(device) if x is not None else None for n, x in t.items()}
    for n in ("q", "k", "v", "attn_bias", "softmax_offset"):
        if t.get(n) is not None and not (n == "attn_bias" and t[n].shape[2] == 1
                                         and spec["bias_shape"] == "111s"):
            t[n].requires_grad_(True)
    group, ranks = groups_for(size, comm, rank)
    f8state = cp_fp8.RankFp8(res, main_group(size, comm)) if fp8.is_fp8_case(spec) else None
    log = CallLog()
    log.install(tex)
    bridge.default_gen = bridge.PhiloxGen(spec["rng_seed"], spec["rng_offset"])
    ok = False
    try:
        if f8state is not None:
            fp8.set_env(backends, spec)
            f8state.enter()
        stream = cp_shim.cp_stream() if device == "cpu" else torch.cuda.Stream()
        extra = dict(cp_group=group, cp_global_ranks=ranks, cp_stream=stream,
                     cp_comm_type=comm, pad_between_seqs=bool(spec["pad_between_seqs"]),
                     load_balancing_strategy=CPLoadBalancingStrategy(balance))
        out, max_logit, _ctx, flat = module.call_module(
            backends, res, t, extra, f8=f8state.args() if f8state is not None else None)
        grads = None
        if spec["is_training"]:
            roles = [(n, r) for n, r in (("q", "dq"), ("k", "dk"), ("v", "dv"),
                                         ("attn_bias", "d_bias"),
                                         ("softmax_offset", "d_softmax_offset"))
                     if t.get(n) is not None and t[n].requires_grad]
            d = t["d_out"].reshape(flat.shape)
            grads = torch.autograd.grad([flat], [t[n] for n, _ in roles], [d], allow_unused=True)
        ok = True
    finally:
        # TE's test runs forward and backward inside the autocast; leaving
        # it reduces the delayed recipe's forward amaxes over the group
        f8rec = f8state.leave(ok) if f8state is not None else None
        bridge.default_gen = None
        log.remove(tex)
    inputs = {n: record.dataset(x.detach()) for n, x in t.items() if x is not None}
    inputs["token_index_q"] = record.dataset(torch.from_numpy(iq))
    inputs["token_index_kv"] = record.dataset(torch.from_numpy(ikv))
    fwd = {}
    record.put(fwd, "out", out)
    record.put(fwd, "max_logit", max_logit)
    node = {"inputs": record.group([], inputs), "forward": record.group([], fwd),
            "engine_call": log.tree()}
    if f8rec is not None:
        node["fp8"] = f8rec
    if grads is not None:
        bwd = {}
        for (_, role), gr in zip(roles, grads):
            record.put(bwd, role, gr)
        node["backward"] = record.group([], bwd)
    return record.group([], node)


def _dump(out_dir, cid, rank, payload):
    path = os.path.join(out_dir, f"{cid}.{rank}.pkl")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(payload, f)
    os.replace(tmp, path)


def _fork_ranks(world):
    """The ranks 1..world-1 as children of this process (rank 0), forked
    once TE is imported: one import instead of world, and its memory shared.
    Returns this process's rank and the children's pids (rank 0 only)."""
    pids = []
    for r in range(1, world):
        pid = os.fork()
        if pid == 0:
            return r, []
        pids.append(pid)
    return 0, pids


def _case_loop(args, backends, resolved, cases, gpu):
    import torch.distributed as dist
    from . import cli, record
    for cid in sorted(resolved):
        res = resolved[cid]
        size = res["spec"]["cp"]["size"]
        if size > args.world:
            continue
        ref_case = cases[cid]
        payload = {"rank": args.rank}
        t0 = time.monotonic()
        try:
            groups_for(size, res["spec"]["cp"]["comm"], args.rank)
            if args.rank < size:
                payload["node"] = run_rank(backends, res, ref_case, args.rank,
                                           "cuda" if gpu else "cpu")
        except Exception as e:  # the case's result; the run goes on
            payload["error"] = cli.describe_error(e)
        if args.rank == 0 and "error" not in payload:
            # the same case without CP, one process: what the ranks are held against
            try:
                payload["reference"] = record.run_case(backends, res, ref_case, "module")
            except Exception as e:
                payload["error"] = "without CP: " + cli.describe_error(e)
        payload["seconds"] = time.monotonic() - t0
        if args.rank < size:
            _dump(args.out, cid, args.rank, payload)
        dist.barrier()


def main(argv=None):
    args = _arg_parser().parse_args(argv)
    from . import cp_shim
    gpu = args.backend == "cudnn"
    if not gpu:
        cp_shim.environment()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))), "tools", "python"))
    import warnings
    warnings.simplefilter("ignore")
    import torch
    import torch.distributed as dist
    import fattn_runfile as rf
    from . import bridge, loader
    if args.fork:
        # no intra-op threads before the fork (a forked OpenMP pool hangs);
        # the ranks share the cores anyway
        torch.set_num_threads(1)
    backends = loader.import_backends(args.root)
    if not gpu:
        from . import patches
        patches.apply_cpu()
        cp_shim.apply()
    tree = rf.load_tree(args.ref)
    with open(args.resolved, encoding="utf-8") as f:
        resolved = json.load(f)
    children = []
    if args.fork:
        args.rank, children = _fork_ranks(args.world)
    if gpu:  # one GPU per rank (tools/te/gpu-te.sh --cp N)
        torch.cuda.set_device(args.rank)
    # the engine after the fork: its thread pool is the rank's own
    bridge.set_engine(bridge.Engine(args.backend, deterministic_bwd=gpu,
                                    device=args.rank if gpu else 0))
    rc = 0
    try:
        dist.init_process_group("nccl" if gpu else "gloo", init_method=args.init,
                                rank=args.rank, world_size=args.world,
                                timeout=datetime.timedelta(seconds=args.timeout))
        _case_loop(args, backends, resolved, tree["children"]["cases"]["children"], gpu)
        dist.destroy_process_group()
    except BaseException:
        import traceback
        traceback.print_exc()
        rc = 3
    if args.fork and args.rank != 0:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    for pid in children:
        _, status = os.waitpid(pid, 0)
        if status != 0:
            print(f"cp_worker: a forked rank exited with status {status}", file=sys.stderr)
            rc = max(rc, 3)
    return rc


if __name__ == "__main__":
    sys.exit(main())
