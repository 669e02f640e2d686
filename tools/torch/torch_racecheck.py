#!/usr/bin/env python3
"""PyTorch's own cuDNN SDPA, forward and backward, for compute-sanitizer.

    compute-sanitizer --tool racecheck --print-limit 100000 python3 tools/torch/torch_racecheck.py

Runs F.scaled_dot_product_attention with the cuDNN backend forced on small bf16
tensors, non-causal and causal, so a sanitizer report on fattn's cuDNN engine can
be set beside one on the same cuDNN kernels launched by PyTorch
(docs/gpu-runs/2026-12-02-racecheck.txt). Needs torch and a CUDA device.
"""
import sys


def main():
    if len(sys.argv) > 1:
        print(__doc__.strip())
        return 0 if sys.argv[1] in ("-h", "--help") else 2
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    for causal in (False, True):
        q, k, v = (torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            o.backward(torch.randn_like(o))
    torch.cuda.synchronize()
    print("torch sdpa done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
