#!/usr/bin/env python3
"""cudnn-frontend's FP8 SDPA speed: the baseline of `bench_cudnn --fp8`.

The same rows (b4 h16 s4096 d128 and b2 h16 s8192 d128, causal and not),
dtypes (HYBRID: E4M3 Q/K/V/O, E5M2 dO/dQ/dK/dV), layout (bhsd views of bshd
memory), per-tensor scaling factors as device tensors, and timing: the plan
(heuristics mode A, then fallback) executed --iters times with a CUDA event
between each two, the median per round, the median of --rounds rounds.
FLOPs: forward 4*b*h*s*s*d, halved for causal; backward 2.5 x forward.

One JSON line per row, {"bench":"cfe_fp8",...}; a row the frontend cannot
build gives "error" with the frontend's message. Without cudnn-frontend or a
GPU: one line {"bench":"cfe_fp8","skipped":...}, exit 0. The GPU machine has
no cudnn-frontend: tools/gpu/gpu-ci.sh installs the carried wheel
(nvidia-cudnn-frontend==1.32.0, .whl/) before it runs this.
"""
import argparse
import json
import math
import sys
import time

ROWS = [(4, 16, 4096, 128), (2, 16, 8192, 128)]


def emit(obj):
    print(json.dumps(obj), flush=True)


def bhsd(t):
    """A [b, s, h, d] tensor viewed as [b, h, s, d] (same memory)."""
    return t.permute(0, 2, 1, 3)


class Uid:
    Q, K, V, O, STATS, DO, DQ, DK, DV = range(1, 10)
    DESC_Q, DESC_K, DESC_V, DESC_S, SCALE_S, SCALE_O, AMAX_S, AMAX_O = range(20, 28)
    DESC_O, DESC_DO, DESC_DP, SCALE_DP, SCALE_DQ, SCALE_DK, SCALE_DV = range(30, 37)
    AMAX_DP, AMAX_DQ, AMAX_DK, AMAX_DV = range(40, 44)


def causal_kwargs(cudnn, causal):
    if not causal:
        return {}
    return {"diagonal_alignment": cudnn.diagonal_alignment.TOP_LEFT, "right_bound": 0}


def tensor(g, uid, t, dt):
    return g.tensor(uid=uid, dim=tuple(t.shape), stride=tuple(t.stride()), data_type=dt)


def scalar(g, uid, cudnn):
    return g.tensor(uid=uid, dim=(1, 1, 1, 1), stride=(1, 1, 1, 1),
                    data_type=cudnn.data_type.FLOAT)


def build(g, cudnn):
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()


def fwd_graph(cudnn, handle, x, causal, scale):
    E4, F = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=E4, intermediate_data_type=F, compute_data_type=F,
                      handle=handle)
    q, k, v = (tensor(g, u, x[n], E4) for u, n in ((Uid.Q, "q"), (Uid.K, "k"), (Uid.V, "v")))
    sc = {n: scalar(g, u, cudnn) for n, u in (
        ("dq", Uid.DESC_Q), ("dk", Uid.DESC_K), ("dv", Uid.DESC_V), ("ds", Uid.DESC_S),
        ("ss", Uid.SCALE_S), ("so", Uid.SCALE_O))}
    o, stats, amax_s, amax_o = g.sdpa_fp8(
        q=q, k=k, v=v, descale_q=sc["dq"], descale_k=sc["dk"], descale_v=sc["dv"],
        descale_s=sc["ds"], scale_s=sc["ss"], scale_o=sc["so"], generate_stats=True,
        attn_scale=scale, **causal_kwargs(cudnn, causal))
    o.set_uid(Uid.O).set_output(True).set_dim(tuple(x["o"].shape)) \
        .set_stride(tuple(x["o"].stride())).set_data_type(E4)
    stats.set_uid(Uid.STATS).set_output(True).set_data_type(F)
    amax_s.set_uid(Uid.AMAX_S).set_output(True).set_dim((1, 1, 1, 1)) \
        .set_stride((1, 1, 1, 1)).set_data_type(F)
    amax_o.set_uid(Uid.AMAX_O).set_output(True).set_dim((1, 1, 1, 1)) \
        .set_stride((1, 1, 1, 1)).set_data_type(F)
    build(g, cudnn)
    return g


def bwd_graph(cudnn, handle, x, causal, scale):
    E4, E5, F = cudnn.data_type.FP8_E4M3, cudnn.data_type.FP8_E5M2, cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=E4, intermediate_data_type=F, compute_data_type=F,
                      handle=handle)
    q, k, v, o = (tensor(g, u, x[n], E4) for u, n in (
        (Uid.Q, "q"), (Uid.K, "k"), (Uid.V, "v"), (Uid.O, "o")))
    d_o = tensor(g, Uid.DO, x["do"], E5)
    stats = tensor(g, Uid.STATS, x["stats"], F)
    sc = {n: scalar(g, u, cudnn) for n, u in (
        ("dq", Uid.DESC_Q), ("dk", Uid.DESC_K), ("dv", Uid.DESC_V), ("do", Uid.DESC_O),
        ("ddo", Uid.DESC_DO), ("ds", Uid.DESC_S), ("ddp", Uid.DESC_DP), ("ss", Uid.SCALE_S),
        ("sdq", Uid.SCALE_DQ), ("sdk", Uid.SCALE_DK), ("sdv", Uid.SCALE_DV),
        ("sdp", Uid.SCALE_DP))}
    dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp = g.sdpa_fp8_backward(
        q=q, k=k, v=v, o=o, dO=d_o, stats=stats, descale_q=sc["dq"], descale_k=sc["dk"],
        descale_v=sc["dv"], descale_o=sc["do"], descale_dO=sc["ddo"], descale_s=sc["ds"],
        descale_dP=sc["ddp"], scale_s=sc["ss"], scale_dQ=sc["sdq"], scale_dK=sc["sdk"],
        scale_dV=sc["sdv"], scale_dP=sc["sdp"], attn_scale=scale,
        **causal_kwargs(cudnn, causal))
    for t, uid, ref in ((dq, Uid.DQ, "dq"), (dk, Uid.DK, "dk"), (dv, Uid.DV, "dv")):
        t.set_uid(uid).set_output(True).set_dim(tuple(x[ref].shape)) \
            .set_stride(tuple(x[ref].stride())).set_data_type(E5)
    for t, uid in ((amax_dq, Uid.AMAX_DQ), (amax_dk, Uid.AMAX_DK), (amax_dv, Uid.AMAX_DV),
                   (amax_dp, Uid.AMAX_DP)):
        t.set_uid(uid).set_output(True).set_dim((1, 1, 1, 1)).set_stride((1, 1, 1, 1)) \
            .set_data_type(F)
    build(g, cudnn)
    return g


def plan_name(g):
    """The name of the plan cudnn-frontend built first (the one it executes
    after build_plans' heuristics choice); "" if the binding cannot say."""
    try:
        return g.get_plan_name_at_index(0)
    except Exception:  # noqa: BLE001 - a name is a nicety, never a failure
        return ""


def timed(torch, g, pack, handle, iters, rounds):
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute(pack, ws, handle=handle)  # warm
    torch.cuda.synchronize()
    meds = []
    for _ in range(rounds):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
        ev[0].record()
        for i in range(iters):
            g.execute(pack, ws, handle=handle)
            ev[i + 1].record()
        torch.cuda.synchronize()
        ms = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(iters))
        meds.append(ms[len(ms) // 2])
    meds.sort()
    return meds[len(meds) // 2], meds[0]


def run_row(torch, cudnn, handle, row, causal, args):
    b, h, s, d = row
    name = "fp8_b%d_h%d_s%d_d%d" % row
    dev = "cuda"

    def codes(dt, scale, seed):
        gen = torch.Generator(device=dev).manual_seed(seed)
        x = torch.rand((b, s, h, d), device=dev, generator=gen) * 2 - 1
        return bhsd((x * scale).to(dt))

    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
    x = {"q": codes(e4, 224, 1), "k": codes(e4, 224, 2), "v": codes(e4, 224, 3),
         "o": bhsd(torch.empty((b, s, h, d), device=dev, dtype=e4)),
         "do": codes(e5, 1024, 6)}
    x["stats"] = torch.empty((b, h, s, 1), device=dev, dtype=torch.float32)
    for n in ("dq", "dk", "dv"):
        x[n] = bhsd(torch.empty((b, s, h, d), device=dev, dtype=e5))
    one = lambda v: torch.full((1, 1, 1, 1), v, device=dev, dtype=torch.float32)  # noqa: E731
    scale = 1.0 / math.sqrt(d)
    t0 = time.time()
    gf = fwd_graph(cudnn, handle, x, causal, scale)
    fwd_pack = {Uid.Q: x["q"], Uid.K: x["k"], Uid.V: x["v"], Uid.O: x["o"],
                Uid.STATS: x["stats"], Uid.DESC_Q: one(1 / 224), Uid.DESC_K: one(1 / 224),
                Uid.DESC_V: one(1 / 224), Uid.DESC_S: one(1 / 448), Uid.SCALE_S: one(448.0),
                Uid.SCALE_O: one(16.0), Uid.AMAX_S: one(0.0), Uid.AMAX_O: one(0.0)}
    fm, fmin = timed(torch, gf, fwd_pack, handle, args.iters, args.rounds)
    gb = bwd_graph(cudnn, handle, x, causal, scale)
    bwd_pack = {Uid.Q: x["q"], Uid.K: x["k"], Uid.V: x["v"], Uid.O: x["o"], Uid.DO: x["do"],
                Uid.STATS: x["stats"], Uid.DQ: x["dq"], Uid.DK: x["dk"], Uid.DV: x["dv"],
                Uid.DESC_Q: one(1 / 224), Uid.DESC_K: one(1 / 224), Uid.DESC_V: one(1 / 224),
                Uid.DESC_O: one(1 / 16), Uid.DESC_DO: one(1 / 1024), Uid.DESC_S: one(1 / 448),
                Uid.DESC_DP: one(1 / 16384), Uid.SCALE_S: one(448.0),
                Uid.SCALE_DP: one(16384.0), Uid.SCALE_DQ: one(1.0), Uid.SCALE_DK: one(1.0),
                Uid.SCALE_DV: one(1.0), Uid.AMAX_DP: one(0.0), Uid.AMAX_DQ: one(0.0),
                Uid.AMAX_DK: one(0.0), Uid.AMAX_DV: one(0.0)}
    bm, bmin = timed(torch, gb, bwd_pack, handle, args.iters, args.rounds)
    ff = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    emit({"bench": "cfe_fp8", "shape": name, "causal": causal,
          "dtypes": "e4m3 qkvo, e5m2 do/dq/dk/dv", "fwd_ms": round(fm, 4),
          "bwd_ms": round(bm, 4), "fwd_tflops": round(ff / (fm * 1e-3) / 1e12, 1),
          "bwd_tflops": round(2.5 * ff / (bm * 1e-3) / 1e12, 1),
          "fwd_ms_rounds_min": round(fmin, 4), "bwd_ms_rounds_min": round(bmin, 4),
          "build_and_time_s": round(time.time() - t0, 2),
          "cudnn_frontend": getattr(cudnn, "__version__", "?"),
          "cudnn_backend": cudnn.backend_version(), "rounds": args.rounds,
          "iters": args.iters, "plan": plan_name(gf), "bwd_plan": plan_name(gb)})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    try:
        import torch
        import cudnn
    except ImportError as e:
        emit({"bench": "cfe_fp8", "skipped": "cannot import: %s" % e})
        return 0
    if not torch.cuda.is_available():
        emit({"bench": "cfe_fp8", "skipped": "no CUDA device"})
        return 0
    handle = cudnn.create_handle()
    failed = 0
    for row in ROWS:
        for causal in (False, True):
            try:
                run_row(torch, cudnn, handle, row, causal, args)
            except Exception as e:  # the frontend's message is the result
                failed = 1
                emit({"bench": "cfe_fp8", "shape": "fp8_b%d_h%d_s%d_d%d" % row,
                      "causal": causal, "error": "%s: %s" % (type(e).__name__, e)})
    return failed


if __name__ == "__main__":
    sys.exit(main())
