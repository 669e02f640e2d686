"""The platform TE's tests see when tools/te/te-tests runs them on the CPU:
the reference platform fattn's support table is evaluated for (sm_90, cuDNN
9.19.0, docs/frontends.md), or another cuDNN version. Only what TE's Python
asks of the device and of its C++ extension before a kernel would run:
compute capability, device properties, the cuDNN version, bf16 support, and
nvte_get_fused_attn_backend (te_backend.py). Nothing here runs attention."""
import sys
import types

from . import te_backend

# tex.DType members, as TE's Python hands them to get_fused_attn_backend
_DTYPE_NAMES = {"kFloat16": "fp16", "kBFloat16": "bf16", "kFloat8E4M3": "fp8e4m3",
                "kFloat8E5M2": "fp8e5m2"}


def _name(e, prefix):
    n = getattr(e, "name", str(e))
    return n[len(prefix):] if n.startswith(prefix) else n


_MASKS = {"NO_MASK": "no_mask", "PADDING_MASK": "padding", "CAUSAL_MASK": "causal",
          "PADDING_CAUSAL_MASK": "padding_causal",
          "CAUSAL_BOTTOM_RIGHT_MASK": "causal_bottom_right",
          "PADDING_CAUSAL_BOTTOM_RIGHT_MASK": "padding_causal_bottom_right"}


def _mask_name(e):
    return _MASKS[_name(e, "NVTE_")]


def _bias_name(e):
    return _name(e, "NVTE_").lower()


def _softmax_name(e):
    return {"VANILLA_SOFTMAX": "vanilla", "OFF_BY_ONE_SOFTMAX": "off-by-one",
            "LEARNABLE_SOFTMAX": "learnable"}[_name(e, "NVTE_")]


def make_get_fused_attn_backend(sm, cudnn):
    """tex.get_fused_attn_backend over te_backend for (sm, cudnn)."""
    def get_fused_attn_backend(is_training, q_dtype, kv_dtype, qkv_layout, bias_type,
                               attn_mask_type, softmax_type, dropout, h, hg, sq, skv, dqk, dv,
                               wl, wr, return_max_logit, cuda_graph, deterministic):
        from .shim import NVTE_Fused_Attn_Backend
        b = te_backend.fused_attn_backend(
            bool(is_training), _DTYPE_NAMES.get(_name(q_dtype, ""), str(q_dtype)),
            _DTYPE_NAMES.get(_name(kv_dtype, ""), str(kv_dtype)), _name(qkv_layout, "NVTE_"),
            _bias_name(bias_type), _mask_name(attn_mask_type), _softmax_name(softmax_type),
            float(dropout), int(h), int(hg), int(sq), int(skv), int(dqk), int(dv), int(wl),
            int(wr), bool(return_max_logit), bool(cuda_graph), bool(deterministic),
            sm=sm, cudnn=cudnn)
        return NVTE_Fused_Attn_Backend(b)
    return get_fused_attn_backend


def shim_module(sm, cudnn):
    """fattn's transformer_engine_torch with the backend selection and the
    cuDNN version of the platform."""
    from . import shim
    m = shim.make_module()
    m.get_fused_attn_backend = make_get_fused_attn_backend(sm, cudnn)
    m.get_cudnn_version = lambda: cudnn
    return m


def patch_torch_cuda(sm):
    """torch.cuda's device queries answer for one sm_XY device; nothing that
    allocates or runs is touched (a test body that did would fail, which the
    tool reports)."""
    import torch
    props = types.SimpleNamespace(major=sm // 10, minor=sm % 10, name="fattn reference sm_%d" % sm,
                                  multi_processor_count=132, total_memory=80 * 2**30)
    torch.cuda.current_device = lambda: 0
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_device_properties = lambda device=None: props
    torch.cuda.get_device_capability = lambda device=None: (sm // 10, sm % 10)
    torch.cuda.is_bf16_supported = lambda *a, **k: True
    # the tests' reset_rng_states keeps a CUDA generator state: the host's stands in
    torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()
    torch.cuda.set_rng_state = lambda *a, **k: None
    torch.cuda.manual_seed = lambda *a, **k: None
    torch.cuda.manual_seed_all = lambda *a, **k: None


def patch_te(sm, cudnn):
    """TE's own device and version queries, wherever a TE module bound them."""
    from . import patches
    import transformer_engine.pytorch.utils as u
    version = (cudnn // 10000, cudnn // 100 % 100, cudnn % 100)
    for name, value in (("get_device_compute_capability", lambda: (sm // 10, sm % 10)),
                        ("get_cudnn_version", lambda: version),
                        ("is_bf16_compatible", lambda: True)):
        orig = getattr(u, name, None)
        if orig is not None:
            patches._rebind(name, orig, value)
    for mname, mod in list(sys.modules.items()):
        if mname.startswith("transformer_engine") and hasattr(mod, "_FP8_SUPPORT"):
            mod._FP8_SUPPORT = (True, "") if sm >= 89 else (False, "not FP8")


FLASH_ATTN_VERSION = "2.8.3"


def pretend_flash_attn_2(version=FLASH_ATTN_VERSION):
    """flash-attn 2 installed, as on the machines TE's tests run on: only its
    version flags (utils.py FlashAttentionUtils, set as backends.py sets them
    when the import succeeds), so that a test that compares FusedAttention
    with FlashAttention finds two backends and runs. No flash-attn kernel is
    ever called: te-tests records the FusedAttention calls only."""
    from packaging.version import Version
    from transformer_engine.pytorch.attention.dot_product_attention.utils import (
        FlashAttentionUtils as F)
    F.is_installed = True
    F.version = Version(version)
    for attr, v in (("v2_plus", "2"), ("v2_1_plus", "2.1"), ("v2_3_plus", "2.3"),
                    ("v2_4_plus", "2.4"), ("v2_4_1_plus", "2.4.1"), ("v2_5_plus", "2.5.0"),
                    ("v2_5_7_plus", "2.5.7"), ("v2_6_0_plus", "2.6.0"),
                    ("v2_7_0_plus", "2.7.0")):
        setattr(F, attr, F.version >= Version(v))
