"""Paged cases through TE's own InferenceParams (docs/te.md, "Paged KV as
InferenceParams hands it"): for a case with max_batch_size, fattn-te does
what DotProductAttention does with a KV cache before it calls
FusedAttention (2.20.2 dot_product_attention.py:2532-2567): TE's
InferenceParams(is_paged=True, max_batch_size) with its PagedKVCacheManager
takes the steps that hold the case's lengths (pre_step() and step(): a
prefill, or a prefill then a decode step), and the last step's caches,
cu_seqlens of max_batch_size + 1 entries, max_seqlen_kv and qkv_format are
what FusedAttention gets, with the InferenceParams itself (its page table).
So the cache, the page table, the lengths and FusedAttention's trimming
of them are TE's own.

On the host: InferenceParams allocates on torch.cuda.current_device() and
"cuda" (inference.py:209-230, 632-667); within `host()` those devices are
the CPU (a TorchFunctionMode that maps them, and current_device answering
0). TE's copy_to_kv_cache custom op is registered for CUDA only
(custom_ops.py:18-22); its CPU kernel here is TE's own Python body, which
calls tex.copy_to_kv_cache: the shim's, on libfattn's fattn_kvcache_copy."""
import collections
import contextlib

import torch
from torch.overrides import TorchFunctionMode

_CUDA = ("cuda",)


def _cpu(dev):
    if dev is None:
        return None
    if isinstance(dev, int):
        return torch.device("cpu")
    d = torch.device(dev)
    return torch.device("cpu") if d.type in _CUDA else d


class _HostDevices(TorchFunctionMode):
    """Every `device=` a torch function is given names the CPU instead of a
    CUDA device (what InferenceParams allocates on)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = _cpu(kwargs["device"])
        return func(*args, **kwargs)


_registered = False


def _register_cpu_kernel():
    """TE's copy_to_kv_cache op on CPU tensors: the op's own body (it
    calls tex.copy_to_kv_cache, the shim's)."""
    global _registered
    if _registered:
        return
    from transformer_engine.pytorch.attention import custom_ops
    op = custom_ops.copy_to_kv_cache
    op.register_kernel("cpu")(op._init_fn)
    _registered = True


@contextlib.contextmanager
def host():
    _register_cpu_kernel()
    saved = torch.cuda.current_device, torch.range
    torch.cuda.current_device = lambda: 0
    # torch.range never reaches a TorchFunctionMode; the non-paged manager
    # makes its batch_indices_post_step with it (inference.py:437)
    torch.range = lambda *a, **k: saved[1](*a, **dict(k, device=_cpu(k.get("device"))))
    try:
        with _HostDevices():
            yield
    finally:
        torch.cuda.current_device, torch.range = saved


def steps(res):
    """[(new tokens per sequence, tokens before them)] of the manager's
    steps that hold the case's lengths: one prefill (seqlens_q =
    seqlens_kv), or a prefill of seqlens_kv - 1 then one token each (the
    decode step); the last one is the attention's. As fattn's harness
    models it (harness/inputs.c te_steps)."""
    q, kv = res["seqlens_q"], res["seqlens_kv"]
    if q == kv:
        return [(list(q), [0] * len(q))]
    if all(x == 1 for x in q):
        first = [x - 1 for x in kv]
        return [(first, [0] * len(kv)), ([1] * len(kv), first)]
    raise ValueError("max_batch_size: TE's cache manager holds a prefill or a decode step "
                     "after one")


def _tokens(flat, fmt, start, count, ctx):
    """The new tokens of a step as DPA hands key_layer / value_layer in the
    step's format (bshd [b, ctx, hg, d], sbhd [ctx, b, hg, d]): positions
    start[i] .. start[i] + count[i] - 1 of the flat [b, skv, hg, d] tensor,
    the rest zeros."""
    b = flat.shape[0]
    out = torch.zeros((b, ctx) + tuple(flat.shape[2:]), dtype=flat.dtype, device=flat.device)
    for i in range(b):
        out[i, :count[i]] = flat[i, start[i]:start[i] + count[i]]
    return out if fmt == "bshd" else out.transpose(0, 1).contiguous()


def _flat(cache, table, lens, skv):
    """The contiguous twin's K or V ([b, skv, hg, d]) from fattn's cache and
    page table: position p of sequence i is row p % page of page
    table[i][p // page] (what fattn's run file holds; the values TE's steps
    write into its own cache)."""
    page = cache.shape[1]
    b = len(lens)
    out = torch.zeros((b, skv) + tuple(cache.shape[2:]), dtype=cache.dtype)
    for i in range(b):
        for p in range(lens[i]):
            out[i, p] = cache[int(table[i, p // page]), p % page]
    return out


def prepare(res, t, device=None):
    """TE's InferenceParams after the steps before the attention, and the
    attention step's new K and V in q's format: (params, new_k, new_v,
    q_format). With `device` (a CUDA device: DotProductAttention on a GPU
    runner) TE allocates its cache and page table there itself, as for a
    user, and the new tokens are handed there; otherwise all of it lives
    on the host (host())."""
    from transformer_engine.pytorch.attention.inference import InferenceParams
    spec = res["spec"]
    fmt = res["q_format"]
    paged = spec["paged"]
    table = t["page_table_k"].detach().cpu()
    fk = _flat(t["k"].detach().cpu(), table, res["seqlens_kv"], spec["skv"])
    fv = _flat(t["v"].detach().cpu(), table, res["seqlens_kv"], spec["skv"])
    if device is not None:
        fk, fv = fk.to(device), fv.to(device)
    with host() if device is None else contextlib.nullcontext():
        ip = InferenceParams(spec["max_batch_size"], spec["skv"], num_heads_kv=spec["hg"],
                             head_dim_k=spec["d_qk"], dtype=t["q"].dtype,
                             head_dim_v=spec["d_v"], is_paged=True,
                             total_num_pages=paged["num_pages"], page_size=paged["page_size"],
                             qkv_format=fmt)
        ip.allocate_memory(1)
        todo = steps(res)
        for n, start in todo:
            ctx = spec["sq"] if len(todo) == 1 else max(max(n), 1)
            nk, nv = (_tokens(f, fmt, start, n, ctx) for f in (fk, fv))
            ip.pre_step(collections.OrderedDict((i, n[i]) for i in range(len(n))))
            if (n, start) != todo[-1]:
                ip.step(1, nk, nv, fmt)  # an earlier step's tokens into the cache
    return ip, nk, nv, fmt


def attention_step(ip, new_k, new_v, fmt):
    """The last step as DotProductAttention takes it (2.20.2
    dot_product_attention.py:2555-2567): the new tokens into the cache, and
    what FusedAttention is then called with."""
    with host():
        return ip.step(1, new_k, new_v, fmt)
