"""The DotProductAttention path (`--call dpa`, docs/te.md "DotProductAttention
on a GPU runner"): TE's DotProductAttention itself, constructed and called
as a user does, so that its backend selection and the arguments it builds
for FusedAttention are TE's. Its constructor needs CUDA (module/base.py:
"TransformerEngine needs CUDA."), so this path runs on a GPU runner only;
plan() -- what DPA is given for a case, or why the case cannot be given to
it -- is pure and tested on the CPU (tools/te/check_dpa.py).

DPA selects among FlashAttention (its package is not installed on fattn's
runners), FusedAttention and the unfused path. fattn-te turns the unfused
path off (NVTE_UNFUSED_ATTN=0, a user's own switch): a case DPA would send
away from FusedAttention then gets no backend, and is reported as routed
away (RoutedAway), not run through another path. TE's C++ answer to
DPA's question which fused sub-backend a configuration has
(tex.get_fused_attn_backend) is the shim's: F16_arbitrary_seqlen (FP8 for
FP8 dtypes), the case being one fattn's support table already found valid
for TE's C++ (a case it refuses is a refuse.* case, asked of TE by
refusal.py)."""
import inspect
import os

import torch


class RoutedAway(Exception):
    """DotProductAttention sends the case to no FusedAttention: a result
    about DPA's routing, reported per case, never run another way."""


# Why a case is not given to DotProductAttention: the first that applies.
def not_through_dpa(res):
    spec = res["spec"]
    if spec.get("schedule"):
        return ("schedule (its steps go through the one FusedAttention, recipe state and "
                "InferenceParams schedule.py keeps)")
    if spec.get("raw_func_args"):
        return "raw_func_args (a direct FusedAttnFunc caller's arguments)"
    if spec.get("fp8"):
        return ("FP8 (DPA's own fp8_autocast recipe state starts its scales at 1, not the "
                "harness's quantizer scales)")
    if spec["softmax"] != "vanilla":
        return "softmax offset (DPA's own parameter, allocated on the device)"
    if res["q_format"] == "bhsd":
        return "bhsd layout (not one of DPA's qkv_format sbhd, bshd, thd)"
    paged = spec.get("paged")
    if paged and not spec.get("max_batch_size"):
        return "paged without max_batch_size (fattn's own page table; DPA takes InferenceParams)"
    if paged and res["q_format"] == "thd":
        return "paged with a thd q"
    if not paged and res["q_format"] != res["kv_format"]:
        return "mixed q/kv formats (a KV-cache layout)"
    if spec["bias"] == "alibi":
        return "ALiBi (DPA makes its slopes on the device)"
    return None


def plan(res):
    """(constructor kwargs, forward kwargs that do not hold tensors, env)
    of DotProductAttention for the case (TE 2.19.0 and 2.20.2 take both).
    The tensors (query_layer, key_layer, value_layer, cu_seqlens,
    core_attention_bias, inference_params) are the call's."""
    spec = res["spec"]
    fmt = res["q_format"]
    init = {
        "num_attention_heads": spec["h"], "kv_channels": (spec["d_qk"], spec["d_v"]),
        "num_gqa_groups": spec["hg"], "attention_dropout": float(spec["dropout_p"]),
        "qkv_format": fmt, "attn_mask_type": spec["mask"],
        "window_size": tuple(res["window"]), "layer_number": 1,
        "attention_type": "self", "softmax_scale": res["attn_scale"],
        "softmax_type": spec["softmax"], "return_max_logit": bool(spec["return_max_logit"]),
    }
    call = {
        "qkv_format": fmt, "attn_mask_type": spec["mask"], "window_size": tuple(res["window"]),
        "bottom_right_diagonal": res["bottom_right_diagonal"],
        "core_attention_bias_type": spec["bias"], "fast_zero_fill": bool(spec["fast_zero_fill"]),
        "max_seqlen_q": spec["sq"], "max_seqlen_kv": spec["skv"],
    }
    if fmt == "thd":
        call["pad_between_seqs"] = bool(spec["pad_between_seqs"])
    env = {"NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0" if spec["deterministic"] else "1",
           "NVTE_UNFUSED_ATTN": "0", "NVTE_FLASH_ATTN": "0"}
    return init, call, env


def _accepted(func, kwargs):
    names = inspect.signature(func).parameters
    return {k: v for k, v in kwargs.items() if k in names}


def call_dpa(backends, res, t):
    """Runs DotProductAttention on the case (a GPU runner); returns what
    module.call_module returns."""
    from transformer_engine.pytorch.attention.dot_product_attention import (
        dot_product_attention as dpa_mod)
    from . import kvcache, module
    spec = res["spec"]
    init, call, env = plan(res)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        dpa = dpa_mod.DotProductAttention(**_accepted(dpa_mod.DotProductAttention.__init__, init))
        dpa.train(bool(spec["is_training"]))
        gpu = _on_gpu()
        if gpu:
            to_gpu(t)
            q, k, v = t["q"], t["k"], t["v"]
        else:
            q, k, v = (t[n].as_subclass(module.HostTensor) for n in ("q", "k", "v"))
        if spec.get("max_batch_size"):  # DPA's step() writes the new tokens itself
            params, k, v, _ = kvcache.prepare(res, t, q.device if gpu else None)
            if not gpu:
                k, v = k.as_subclass(module.HostTensor), v.as_subclass(module.HostTensor)
            call["inference_params"] = params
            call.pop("max_seqlen_kv")
        elif "padding" in spec["mask"] or res["thd"]:
            for n in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded",
                      "cu_seqlens_kv_padded"):
                call[n] = t.get(n)
        call["core_attention_bias"] = t.get("attn_bias")
        try:
            result = dpa(q, k, v, **_accepted(dpa.forward, call))
        except Exception as e:  # noqa: BLE001 -- DPA finding no backend is its routing
            if "No dot product attention backend" in str(e):
                raise RoutedAway(f"DotProductAttention routes it away from FusedAttention "
                                 f"({str(e).splitlines()[0]})") from e
            raise
        chosen = getattr(dpa_mod, "_attention_backends", {})
        if not chosen.get("use_fused_attention", True):
            raise RoutedAway("DotProductAttention ran it on another backend than FusedAttention")
    finally:
        for k_, v_ in saved.items():
            if v_ is None:
                os.environ.pop(k_, None)
            else:
                os.environ[k_] = v_
    flat, max_logit = result if spec["return_max_logit"] else (result, None)
    ctx = module.find_ctx(flat, backends.FusedAttnFunc)
    out = flat.view(*flat.shape[:-1], t["q"].shape[-2], t["v"].shape[-1])
    return out, max_logit, ctx, flat


def _on_gpu():
    """The cuDNN engine on a machine whose torch sees a GPU."""
    from . import bridge
    return bridge.engine().device == "cuda" and torch.cuda.is_available()


def to_gpu(t):
    """The case's tensors (in place) as CUDA tensors: DotProductAttention's
    backend selection takes the exact tensor type (torch.Tensor or TE's FP8
    types, utils.py get_attention_backend), so the host alias FusedAttention
    alone accepts (module.HostTensor) routes every case away. They become
    the leaves the recorder names and the backward differentiates, packed
    views kept views of one buffer (DPA reads the layout from them), and the
    shim hands the cuDNN engine their device pointers (calls.py)."""
    from . import fp8
    bases, moved = {}, {}
    for n, x in t.items():
        if not isinstance(x, torch.Tensor) or fp8.is_float8(x):
            continue
        b = x._base
        if b is None:
            moved[n] = x.detach().cuda().requires_grad_(x.requires_grad)
            continue
        if id(b) not in bases:
            bases[id(b)] = b.detach().contiguous().cuda().requires_grad_(b.requires_grad)
        moved[n] = bases[id(b)].as_strided(x.size(), x.stride(), x.storage_offset())
    t.update(moved)


def cuda_available():
    return torch.cuda.is_available()
