#!/usr/bin/env python3
"""PyTorch's SDPA on its cuDNN backend, on the shapes of bench_cudnn.

The baseline bench/bench_cudnn.c is compared with (docs/bench.md). For each
shape (bf16, bshd memory layout, no dropout, default scale 1/sqrt(d), causal
and not):
    b=4 h=16 s=4096 d=128, b=2 h=16 s=8192 d=128, b=8 h=16 s=2048 d=64
it times, with the cuDNN backend forced
(torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)):

  forward   F.scaled_dot_product_attention on inputs that require grad, so
            that it is the training forward (it writes the softmax stats), as
            bench_cudnn's is;
  backward  torch.autograd.grad(out, (q, k, v), dO, retain_graph=True) on one
            retained forward graph: the backward alone, one cuDNN backward
            per call (PyTorch's default, non-deterministic dQ accumulator
            graph). Timing fwd+bwd and subtracting the forward would carry
            the noise of two measurements; this carries one.

Each timed call sits between two CUDA events; the calls are queued back to
back without synchronising in between, so Python's per-call overhead
overlaps the previous call's GPU work and the events time the GPU. After
--warmup untimed calls (the first builds cuDNN's graph: its wall time is
reported as first_*_s), --rounds rounds each time --iters forwards, then
--iters backwards; the figure is the median of the rounds' medians, with
their spread and the smallest single call.

q, k, v and dO are [b, s, h, d] tensors viewed as [b, h, s, d] (what SDPA
takes), so cuDNN sees bshd strides, as in bench_cudnn; dO is copied into
O's layout (bshd) once, so that PyTorch does not copy it in every backward. Values are uniform in [-1, 1) times 0.5, 0.5, 1,
0.1 (q, k, v, dO), as bench_cudnn's Philox inputs.

FLOP convention (the same as bench_cudnn): forward 4*b*h*sq*skv*d, halved
for causal; backward 2.5 x the forward.

Output: JSON lines on stdout: {"bench": "torch", "info": {...}}, then one
object per shape and mask with the keys of bench_cudnn's where they mean the
same thing. Without torch or a CUDA device: one {"bench": "torch",
"skipped": ...} line, exit 0. --help needs no torch.
"""

import argparse
import fnmatch
import json
import statistics
import sys
import time

SHAPES = [(4, 16, 4096, 128), (2, 16, 8192, 128), (8, 16, 2048, 64)]
SCALES = {"q": 0.5, "k": 0.5, "v": 1.0, "do": 0.1}


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="PyTorch SDPA (cuDNN backend forced) forward and backward speed on "
        "bench_cudnn's shapes; JSON lines on stdout.",
        epilog="FLOPs: forward 4*b*h*sq*skv*d, halved for causal; backward 2.5 x forward.",
    )
    p.add_argument("--iters", type=int, default=20, help="timed calls per round (default 20)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed calls before timing, the first builds the graph (default 3)")
    p.add_argument("--public", type=int, default=0, metavar="N",
                   help="also N calls per pass for the host cost (perf_counter around "
                   "each call, the queue empty before it: *_host_us; the GPU still "
                   "running the calls before it: *_host_busy_us) and N calls on host "
                   "tensors (copies in, the call, copies out: *_h2h_ms, CUDA events), as "
                   "fattn's public calls take them (default 0: off)")
    p.add_argument("--only", metavar="GLOB",
                   help="shapes whose name (b4_h16_s4096_d128 ...) matches")
    a = p.parse_args(argv)
    if a.iters < 1 or a.rounds < 1 or a.warmup < 1 or a.public < 0:
        p.error("--iters, --rounds and --warmup must be >= 1")
    return a


def emit(obj):
    print(json.dumps(obj, sort_keys=False), flush=True)


def shape_name(b, h, s, d):
    return f"b{b}_h{h}_s{s}_d{d}"


def fwd_flops(b, h, s, d, causal):
    f = 4.0 * b * h * s * s * d
    return 0.5 * f if causal else f


def tflops(flops, ms):
    return round(flops / (ms * 1e-3) / 1e12, 1) if ms > 0 else 0.0


def summarise(rounds_ms, mins):
    med = statistics.median(rounds_ms)
    return {
        "ms": round(med, 4),
        "ms_min": round(min(mins), 4),
        "ms_spread": round((max(rounds_ms) - min(rounds_ms)) / med, 4) if med > 0 else 0.0,
        "ms_rounds": [round(x, 4) for x in rounds_ms],
    }


class Bench:
    """The timing loop on one device; torch is passed in so that --help and a
    machine without torch never import it."""

    def __init__(self, torch, args):
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        self.torch, self.F, self.args = torch, F, args
        self.kernel = lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)
        self.dev = torch.device("cuda", 0)
        self.gen = torch.Generator(device=self.dev)
        self.gen.manual_seed(1)

    def info(self):
        torch, props = self.torch, self.torch.cuda.get_device_properties(self.dev)
        return {"device": props.name, "sm_count": props.multi_processor_count,
                "cc": f"{props.major}.{props.minor}", "torch_version": torch.__version__,
                "cudnn_version": torch.backends.cudnn.version(),
                "cuda_version": torch.version.cuda,
                "flops": "forward 4*b*h*sq*skv*d, halved for causal; backward 2.5 x forward",
                "timing": "CUDA events around each call, calls queued back to back; median "
                          "per round, median of rounds",
                "iters": self.args.iters, "rounds": self.args.rounds,
                "warmup": self.args.warmup}

    def bshd_input(self, b, h, s, d, scale, grad):
        """A [b, s, h, d] tensor seen as [b, h, s, d], uniform in [-scale, scale)."""
        torch = self.torch
        t = torch.rand((b, s, h, d), generator=self.gen, device=self.dev, dtype=torch.float32)
        t = ((t * 2.0 - 1.0) * scale).to(torch.bfloat16).transpose(1, 2)
        return t.detach().requires_grad_(grad)

    def timed_calls(self, fn, n):
        """n calls of fn, each between two events; their GPU times in ms."""
        cuda = self.torch.cuda
        ev = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True))
              for _ in range(n)]
        for start, end in ev:
            start.record()
            fn()
            end.record()
        cuda.synchronize()
        return [start.elapsed_time(end) for start, end in ev]

    def measure(self, q, k, v, do, causal):
        """First-call wall times and per-round medians and minima of both passes."""
        torch, F, args = self.torch, self.F, self.args
        self.causal = causal
        with self.kernel():
            def fwd():
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            t0 = time.monotonic()
            out = fwd()
            torch.cuda.synchronize()
            first = {"fwd": time.monotonic() - t0}
            # dO in O's layout (bshd here), else PyTorch copies it in every backward
            do_o = torch.empty_like(out).copy_(do)

            def bwd():
                return torch.autograd.grad(out, (q, k, v), do_o, retain_graph=True)

            t0 = time.monotonic()
            bwd()
            torch.cuda.synchronize()
            first["bwd"] = time.monotonic() - t0
            for _ in range(args.warmup - 1):
                fwd()
                bwd()
            torch.cuda.synchronize()
            rounds, mins = {"fwd": [], "bwd": []}, {"fwd": [], "bwd": []}
            for _ in range(args.rounds):  # interleaved, so that clock drift hits both alike
                for key, fn in (("fwd", fwd), ("bwd", bwd)):
                    ms = self.timed_calls(fn, args.iters)
                    rounds[key].append(statistics.median(ms))
                    mins[key].append(min(ms))
            if args.public:
                first.update(self.public(q, k, v, out, do_o, fwd, bwd))
        return first, rounds, mins

    def public(self, q, k, v, out, do_o, fwd, bwd):
        """Host cost of a call (perf_counter, the queue empty before it) and the
        host-tensor call fattn's engine makes (copies in, the call, copies
        out), between CUDA events."""
        torch, n = self.torch, self.args.public
        res = {}
        for key, fn in (("fwd", fwd), ("bwd", bwd)):
            # the queue empty before each call, then (busy) the GPU still running
            # the calls before it: one untimed call, then n back to back
            for suffix, busy in (("", False), ("_busy", True)):
                us = []
                torch.cuda.synchronize()
                if busy:
                    fn()
                for _ in range(n):
                    if not busy:
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    fn()
                    us.append(1e6 * (time.perf_counter() - t0))
                res[f"{key}_host{suffix}_us"] = round(statistics.median(us), 2)
        torch.cuda.synchronize()
        hq, hk, hv, ho, hdo = (t.detach().cpu() for t in (q, k, v, out, do_o))
        dq, dk, dv, o2, do2 = (torch.empty_like(t) for t in (q, k, v, out, do_o))
        causal = self.causal

        def fwd_h2h():
            o = self.F.scaled_dot_product_attention(hq.to(self.dev), hk.to(self.dev),
                                                    hv.to(self.dev), is_causal=causal)
            return o.cpu()

        def bwd_h2h():
            for dst, src in ((dq, hq), (dk, hk), (dv, hv), (o2, ho), (do2, hdo)):
                dst.copy_(src)  # the five tensors fattn's backward uploads
            g = torch.autograd.grad(out, (q, k, v), do2, retain_graph=True)
            return [t.cpu() for t in g]

        for key, fn in (("fwd", fwd_h2h), ("bwd", bwd_h2h)):
            fn()
            res[f"{key}_h2h_ms"] = round(statistics.median(self.timed_calls(fn, n)), 4)
        return res

    def run_shape(self, b, h, s, d):
        """Both masks of one shape: JSON rows; False if either failed."""
        name, ok = shape_name(b, h, s, d), True
        q = self.bshd_input(b, h, s, d, SCALES["q"], True)
        k = self.bshd_input(b, h, s, d, SCALES["k"], True)
        v = self.bshd_input(b, h, s, d, SCALES["v"], True)
        do = self.bshd_input(b, h, s, d, SCALES["do"], False)
        for causal in (False, True):
            t_case = time.monotonic()
            try:
                first, rounds, mins = self.measure(q, k, v, do, causal)
            except Exception as e:  # report it and go on with the next case
                print(f"torch_sdpa_bench: {name} causal={causal}: {e}", file=sys.stderr)
                emit({"bench": "torch", "shape": name, "causal": causal,
                      "error": f"{type(e).__name__}: {e}"})
                ok = False
                continue
            ff = fwd_flops(b, h, s, d, causal)
            row = {"bench": "torch", "shape": name, "b": b, "h": h, "s": s, "d": d,
                   "dtype": "bf16", "layout": "bshd", "causal": causal}
            for key, flops in (("fwd", ff), ("bwd", 2.5 * ff)):
                sm = summarise(rounds[key], mins[key])
                for k2, val in sm.items():
                    row[f"{key}_{k2}"] = val
                row[f"{key}_tflops"] = tflops(flops, sm["ms"])
            for key in ("fwd_host_us", "bwd_host_us", "fwd_host_busy_us", "bwd_host_busy_us",
                        "fwd_h2h_ms", "bwd_h2h_ms"):
                if key in first:
                    row[key] = first[key]
            row.update({"first_fwd_s": round(first["fwd"], 3),
                        "first_bwd_s": round(first["bwd"], 3),
                        "fwd_gflop": round(ff * 1e-9, 3), "iters": self.args.iters,
                        "rounds": self.args.rounds,
                        "wall_s": round(time.monotonic() - t_case, 2)})
            emit(row)
        return ok


def main(argv):
    args = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"torch_sdpa_bench: torch not importable ({e}): nothing measured", file=sys.stderr)
        emit({"bench": "torch", "skipped": f"torch not importable: {e}"})
        return 0
    if not torch.cuda.is_available():
        print("torch_sdpa_bench: no CUDA device: nothing measured", file=sys.stderr)
        emit({"bench": "torch", "skipped": "no CUDA device"})
        return 0
    bench = Bench(torch, args)
    emit({"bench": "torch", "info": bench.info()})
    ok = True
    for (b, h, s, d) in SHAPES:
        if args.only and not fnmatch.fnmatchcase(shape_name(b, h, s, d), args.only):
            continue
        ok = bench.run_shape(b, h, s, d) and ok
        torch.cuda.empty_cache()  # the next shape's tensors start from a clean pool
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
