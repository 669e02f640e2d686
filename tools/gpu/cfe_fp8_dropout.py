#!/usr/bin/env python3
"""cudnn-frontend's own FP8 SDPA forward with dropout, one small case per call.

cuDNN 9.19's FP8 forward kernel on sm_90 wrote past its shared memory under
compute-sanitizer memcheck, and without it hit an illegal memory access, on
fattn's two FP8 cases with dropout (b1-2 h2 s16 d128; docs/cudnn-engine.md),
so fattn refuses FP8 with dropout on sm_90. This builds the same forward
through cudnn-frontend's `sdpa_fp8` (heuristics A, then fallback), which
lowers it without any of fattn's code, so that running it under memcheck says
whose graph the fault belongs to. tools/gpu/gpu-ci.sh (GPU_CI_FP8=1) runs each
case in its own process under `compute-sanitizer --tool memcheck`.

One JSON line: {"case", "ok", "engine", "error"?}; exit 0 when the forward
ran and synchronised, 1 when it failed, 0 with "skipped" without
cudnn-frontend or a GPU.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bench"))
import cfe_fp8_bench as cfe  # noqa: E402  (the bench's graph helpers)

# name: (b, h, s, d, memory order, dropout)
CASES = {
    "bshd_s16_dropout": (1, 2, 16, 128, "bshd", 0.1),
    "sbhd_s16_dropout": (1, 2, 16, 128, "sbhd", 0.1),
    "bshd_b2_s16_dropout": (2, 2, 16, 128, "bshd", 0.1),
    "bshd_s128_dropout": (1, 2, 128, 128, "bshd", 0.1),
    "bshd_s16_nodropout": (1, 2, 16, 128, "bshd", 0.0),
}


def as_bhsd(t, order):
    """[b, h, s, d] view of memory laid out in `order`."""
    return t.permute(0, 2, 1, 3) if order == "bshd" else t.permute(1, 2, 0, 3)


def run(torch, cudnn, name):
    b, h, s, d, order, p = CASES[name]
    dev = "cuda"
    shape = (b, s, h, d) if order == "bshd" else (s, b, h, d)
    gen = torch.Generator(device=dev).manual_seed(7)
    x = {n: as_bhsd(((torch.rand(shape, device=dev, generator=gen) * 2 - 1) * 16)
                    .to(torch.float8_e4m3fn), order) for n in ("q", "k", "v")}
    x["o"] = as_bhsd(torch.empty(shape, device=dev, dtype=torch.float8_e4m3fn), order)
    stats = torch.empty((b, h, s, 1), device=dev, dtype=torch.float32)
    E4, F = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    handle = cudnn.create_handle()
    g = cudnn.pygraph(io_data_type=E4, intermediate_data_type=F, compute_data_type=F,
                      handle=handle)
    U = cfe.Uid
    q, k, v = (cfe.tensor(g, u, x[n], E4) for u, n in ((U.Q, "q"), (U.K, "k"), (U.V, "v")))
    sc = {n: cfe.scalar(g, u, cudnn) for n, u in (
        ("dq", U.DESC_Q), ("dk", U.DESC_K), ("dv", U.DESC_V), ("ds", U.DESC_S),
        ("ss", U.SCALE_S), ("so", U.SCALE_O))}
    kw = {}
    seed_t = torch.full((1, 1, 1, 1), 1234, device=dev, dtype=torch.int64)
    off_t = torch.full((1, 1, 1, 1), 0, device=dev, dtype=torch.int64)
    if p > 0:
        seed = g.tensor(uid=50, dim=(1, 1, 1, 1), stride=(1, 1, 1, 1),
                        data_type=cudnn.data_type.INT64)
        off = g.tensor(uid=51, dim=(1, 1, 1, 1), stride=(1, 1, 1, 1),
                       data_type=cudnn.data_type.INT64)
        kw["dropout"] = (p, seed, off)
    o, st, amax_s, amax_o = g.sdpa_fp8(
        q=q, k=k, v=v, descale_q=sc["dq"], descale_k=sc["dk"], descale_v=sc["dv"],
        descale_s=sc["ds"], scale_s=sc["ss"], scale_o=sc["so"], generate_stats=True,
        attn_scale=1.0 / math.sqrt(d), **kw)
    o.set_uid(U.O).set_output(True).set_dim(tuple(x["o"].shape)) \
        .set_stride(tuple(x["o"].stride())).set_data_type(E4)
    st.set_uid(U.STATS).set_output(True).set_data_type(F)
    for t, uid in ((amax_s, U.AMAX_S), (amax_o, U.AMAX_O)):
        t.set_uid(uid).set_output(True).set_dim((1, 1, 1, 1)).set_stride((1, 1, 1, 1)) \
            .set_data_type(F)
    cfe.build(g, cudnn)
    one = lambda val: torch.full((1, 1, 1, 1), val, device=dev, dtype=torch.float32)  # noqa: E731
    pack = {U.Q: x["q"], U.K: x["k"], U.V: x["v"], U.O: x["o"], U.STATS: stats,
            U.DESC_Q: one(1 / 16), U.DESC_K: one(1 / 16), U.DESC_V: one(1 / 16),
            U.DESC_S: one(1 / 256), U.SCALE_S: one(256.0), U.SCALE_O: one(32.0),
            U.AMAX_S: one(0.0), U.AMAX_O: one(0.0)}
    if p > 0:
        pack[50], pack[51] = seed_t, off_t
    ws = torch.empty(max(g.get_workspace_size(), 1), device=dev, dtype=torch.uint8)
    g.execute(pack, ws, handle=handle)
    torch.cuda.synchronize()
    return cfe.plan_name(g)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    a = ap.parse_args()
    try:
        import torch
        import cudnn
    except ImportError as e:
        print(json.dumps({"case": a.case, "skipped": "cannot import: %s" % e}), flush=True)
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"case": a.case, "skipped": "no CUDA device"}), flush=True)
        return 0
    try:
        engine = run(torch, cudnn, a.case)
    except Exception as e:  # noqa: BLE001 - the failure is the finding
        print(json.dumps({"case": a.case, "ok": False,
                          "error": "%s: %s" % (type(e).__name__, str(e)[:600])}), flush=True)
        return 1
    print(json.dumps({"case": a.case, "ok": True, "engine": engine}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
