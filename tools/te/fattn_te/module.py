"""The module path (docs/te.md, "How a case runs"): TE's FusedAttention,
constructed as DotProductAttention constructs it (2.20.2
dot_product_attention.py:989-997) and called as DotProductAttention calls it
(:3021-3059) with the case's tensors, so that TE's own argument building
(FusedAttnFwdArgs or the monolith's positional call, eval-mode dropout,
cu_seqlens and their padded defaults, max_seqlen from the shapes) is what
runs. fattn-te stands in for DotProductAttention only where it decides
something before the call: the backend (F16_arbitrary_seqlen, forced) and
the full cu_seqlens of an unpadded bshd/sbhd batch (:2657, :2674, TE's own
get_full_cu_seqlens)."""
import torch


def not_expressed(res):
    """Why FusedAttention cannot express the case (None when it can): then
    the case goes through FusedAttnFunc.apply directly. FP8 cases go
    through the module with DPA's fp8_meta, recipes and quantizers
    (fp8.py). raw_func_args
    cases are a direct FusedAttnFunc caller's arguments (attn_scale /
    bottom_right_diagonal None, dropout in eval); FusedAttention takes the
    layouts of TE's QKVLayouts (constants.py:151, asserted at 2.20.2
    backends.py:2414), and without inference_params one format for q and
    k/v (utils.py get_qkv_format:2654-2657: mixed formats are KV-cache
    layouts). A paged case goes through the module with TE's own
    InferenceParams when it has max_batch_size (kvcache.py: TE's cache
    manager makes the cache, the table and the lengths), else with a
    stand-in holding fattn's page table (_PagedCache), unless V has a table
    of its own (the module passes one table for both) or q is thd (the
    module takes a thd q's head count for the batch when it cuts
    cu_seqlens)."""
    from transformer_engine.pytorch.constants import QKVLayouts
    spec = res["spec"]
    if spec.get("raw_func_args"):
        return "raw_func_args"
    if spec["layout"] not in QKVLayouts:
        return "layout outside QKVLayouts"
    paged = spec.get("paged")
    if paged and paged.get("separate_v"):
        return "paged with a separate V table"
    if paged and res["q_format"] == "thd":
        # FusedAttention cuts cu_seqlens to query_layer.shape[1] + 1 entries
        # (2.19.0 backends.py:2175, 2.20.2 :2434): a thd q's head count
        return "paged with a thd q"
    if not paged and res["q_format"] != res["kv_format"]:
        return "mixed q/kv formats"
    return None


class _PagedCache:
    """The part of InferenceParams FusedAttention reads for a paged KV
    cache (2.19.0 backends.py:2227-2228, 2.20.2 :2486-2487): is_paged and
    the cache manager's page table, which it passes as both page_table_k
    and page_table_v (:2595-2596). DotProductAttention hands the module
    its InferenceParams after it wrote the step's tokens into the cache;
    the case's k and v are that cache already."""

    def __init__(self, page_table):
        self.is_paged = True
        self.cache_manager = type("PageTableOnly", (), {"page_table": page_table})()


_HOST_FLOAT8 = {}


def host_float8(t):
    """An FP8 input (TE's Float8Tensor) as FusedAttention sees it: the same
    object, its class a subclass of its own that reports is_cuda (TE checks
    q, k, v with isinstance, so TE's classes still recognise it)."""
    cls = type(t)
    host = _HOST_FLOAT8.get(cls)
    if host is None:
        host = _HOST_FLOAT8[cls] = type("Host" + cls.__name__, (cls,),
                                        {"is_cuda": property(lambda self: True)})
    t.__class__ = host
    return t


class HostTensor(torch.Tensor):
    """q, k and v as FusedAttention sees them: fattn's engines take host
    tensors (the cuDNN engine does its own transfers), while
    FusedAttention.forward asserts CUDA tensors (2.19.0 backends.py:2152,
    2.20.2 :2411). The alias reports is_cuda and is otherwise the tensor:
    same storage, same autograd graph, and every operation on it returns a
    plain tensor."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def is_cuda(self):
        return True


def _base(x):
    """The buffer a packed layout's views share, as DPA hands it over
    (qkv_layer / kv_layer); None for FP8 inputs, whose views TE's
    combine_tensors joins from their storage itself."""
    from . import fp8
    return None if fp8.is_float8(x) else x._base


def find_ctx(out, func):
    """The autograd node of TE's FusedAttnFunc below the module's output
    (the module reshapes the output to ...(hd), a view node on top)."""
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if getattr(node, "_forward_cls", None) is func:
            return node
        todo.extend(n for n, _ in node.next_functions)
    return None


def call_module(backends, res, t, extra=None):
    """Runs FusedAttention.forward on the case; returns (out as [..., h,
    d_v], max_logit, TE's FusedAttnFunc ctx, the module's output tensor).
    extra: more keyword arguments for FusedAttention.forward (context
    parallelism's, fattn_te/cp_worker.py)."""
    from transformer_engine.pytorch.attention.dot_product_attention import utils as dpa_utils
    from transformer_engine.pytorch.cpp_extensions.fused_attn import FusedAttnBackend
    from . import fp8
    spec = res["spec"]
    # a KV cache makes DPA's attention "cross" (2.20.2 dot_product_attention.py:2545-2549)
    mod = backends.FusedAttention(
        res["attn_scale_arg"], attention_dropout=float(spec["dropout_p"]),
        attention_type="cross" if spec.get("max_batch_size") else "self",
        layer_number=1, deterministic=bool(spec["deterministic"]),
        softmax_type=spec["softmax"], return_max_logit=bool(spec["return_max_logit"]))
    mod.train(bool(spec["is_training"]))
    if fp8.is_float8(t["q"]):  # FP8 inputs: DPA hands TE's Float8Tensors on
        q, k, v = (host_float8(t[n]) for n in ("q", "k", "v"))
    else:
        q, k, v = (t[n].as_subclass(HostTensor) for n in ("q", "k", "v"))
    # the FP8 arguments as DPA passes them (:3021-3059): fp8 = DPA.fp8 and
    # its recipe's fp8_dpa, its fp8_meta and quantizers, fp8_output and
    # bf16_backward as MultiheadAttention asks
    f8 = fp8.func_args(spec) if fp8.is_fp8_case(spec) else None
    backend = FusedAttnBackend["FP8" if f8 else "F16_arbitrary_seqlen"]
    cu_q, cu_kv = t.get("cu_seqlens_q"), t.get("cu_seqlens_kv")
    cu_q_pad, cu_kv_pad = t.get("cu_seqlens_q_padded"), t.get("cu_seqlens_kv_padded")
    max_q, max_kv, layout = spec["sq"], spec["skv"], spec["layout"]
    params = _PagedCache(t["page_table_k"]) if spec.get("paged") else None
    if spec.get("max_batch_size"):
        # DPA with TE's InferenceParams (kvcache.py): its step() writes the
        # tokens and hands back the caches, cu_seqlens of max_batch_size + 1
        # entries, max_seqlen_kv and the format; the padded ones are None
        # (dot_product_attention.py:2555-2568); get_qkv_layout names the layout
        from . import kvcache
        params, new_k, new_v, fmt = kvcache.prepare(res, t)
        kc, vc, cu_q, cu_kv, max_kv, qkv_fmt = kvcache.attention_step(params, new_k, new_v, fmt)
        cu_q_pad = cu_kv_pad = None
        layout = dpa_utils.get_qkv_layout(t["q"].detach(), kc, vc, qkv_format=qkv_fmt,
                                          inference_params=params)[0]
        if layout != spec["layout"]:
            raise RuntimeError(f"TE's get_qkv_layout names the cache {layout}, the case "
                               f"{spec['layout']}")
        k, v = kc.as_subclass(HostTensor), vc.as_subclass(HostTensor)
    if not res["thd"] and "padding" not in spec["mask"]:
        b = spec["b"]
        if cu_q is None and res["q_format"] in ("bshd", "sbhd"):
            cu_q = dpa_utils.get_full_cu_seqlens(b, spec["sq"], q.device)
        if cu_kv is None and res["kv_format"] in ("bshd", "sbhd"):
            cu_kv = dpa_utils.get_full_cu_seqlens(b, spec["skv"], k.device)
    grp = res["layout_group"]
    packed_qkv = _base(t["q"]) if grp in ("3hd", "h3d") else None
    packed_kv = _base(t["k"]) if grp in ("hd_2hd", "hd_h2d") else None
    result = mod(
        q, k, v, qkv_layout=layout, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv,
        cu_seqlens_q_padded=cu_q_pad, cu_seqlens_kv_padded=cu_kv_pad,
        max_seqlen_q=max_q, max_seqlen_kv=max_kv, attn_mask_type=spec["mask"],
        window_size=tuple(res["window"]), bottom_right_diagonal=res["bottom_right_diagonal_arg"],
        fused_attention_backend=backend,
        core_attention_bias_type=spec["bias"], core_attention_bias=t.get("attn_bias"),
        fast_zero_fill=bool(spec["fast_zero_fill"]), softmax_offset=t.get("softmax_offset"),
        fp8=bool(f8), fp8_meta=f8 and f8["fp8_meta"], quantizers=f8 and f8["quantizers"],
        fp8_output=bool(f8 and f8["fp8_output"]), bf16_backward=bool(f8 and f8["bf16_backward"]),
        packed_qkv=packed_qkv, packed_kv=packed_kv,
        inference_params=params,
        **(extra or {}))
    if spec["return_max_logit"]:
        flat, max_logit = result
    else:
        flat, max_logit = result, None
    ctx = find_ctx(flat, backends.FusedAttnFunc)
    out = flat.view(*flat.shape[:-1], t["q"].shape[-2], t["v"].shape[-1])
    return out, max_logit, ctx, flat
