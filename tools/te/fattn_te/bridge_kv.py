"""The shim's copy_to_kv_cache on libfattn's fattn_kv_cache_copy (fattn/
kv_cache.h): what TE's C++ does when its InferenceParams writes a step's
tokens into the cache (custom_ops.py copy_to_kv_cache -> tex.copy_to_kv_cache,
attention.cpp:1088-1112 -> nvte_copy_to_kv_cache, kv_cache.cu). fattn's
harness builds a max_batch_size case's cache with the same function
(harness/model/inputs.c), so TE's cache and fattn's are written by one
tested piece of code. What fattn refuses (an index out of the cache or the
table, a dtype or shape that does not match) is TE's hand-off: TE's
kernel would read or write out of bounds."""
import ctypes

import torch

from . import bridge


def _i32(t, name):
    from .contract import HandoffError
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or not t.is_contiguous():
        raise HandoffError("copy_to_kv_cache", name, repr(t), "a contiguous int32 tensor")
    return ctypes.cast(t.data_ptr(), ctypes.POINTER(ctypes.c_int32))


def copy_to_kv_cache(new_k, new_v, k_cache, v_cache, page_table, cu_new_lens, cu_cached_lens,
                     qkv_format, b, max_ctx_len, max_seq_len, max_pages_per_seq, is_non_paged):
    """tex.copy_to_kv_cache (custom_ops.py:35-49 calls it): k_cache and
    v_cache written in place."""
    from .contract import HandoffError
    if k_cache.device.type != "cpu":
        # TE's InferenceParams on a GPU runner (DotProductAttention with a
        # cache): fattn's copy is a host function, so it runs on host
        # copies and the caches are written back in place -- the bytes TE's
        # kernel writes (the same function builds fattn's own caches).
        args = [x.detach().cpu() if isinstance(x, torch.Tensor) else x
                for x in (new_k, new_v, k_cache, v_cache, page_table, cu_new_lens,
                          cu_cached_lens)]
        copy_to_kv_cache(*args, qkv_format, b, max_ctx_len, max_seq_len, max_pages_per_seq,
                         is_non_paged)
        with torch.no_grad():
            k_cache.copy_(args[2])
            v_cache.copy_(args[3])
        return
    e = bridge.engine()
    lib = e.lib
    lib.fattn_kv_cache_copy.restype = ctypes.c_int
    views = [bridge.view(t) for t in (new_k, new_v, k_cache, v_cache)]
    rows = page_table.shape[0] if page_table.dim() else 0
    a = bridge.KvCopyArgs(new_k=ctypes.pointer(views[0]), new_v=ctypes.pointer(views[1]),
                   k_cache=ctypes.pointer(views[2]), v_cache=ctypes.pointer(views[3]),
                   table=_i32(page_table, "page_table"), table_rows=rows,
                   cu_new_lens=_i32(cu_new_lens, "cu_new_lens"),
                   cu_cached_lens=_i32(cu_cached_lens, "cu_cached_lens"),
                   format=int(qkv_format), b=int(b), max_ctx_len=int(max_ctx_len),
                   max_seq_len=int(max_seq_len), max_pages_per_seq=int(max_pages_per_seq),
                   reindex=bool(is_non_paged))
    if lib.fattn_kv_cache_copy(ctypes.byref(a)) != 0:
        msg = lib.fattn_last_error()
        raise HandoffError("copy_to_kv_cache", "arguments",
                           f"b {b}, max_ctx_len {max_ctx_len}, max_seq_len {max_seq_len}, "
                           f"max_pages_per_seq {max_pages_per_seq}",
                           f"what the kernel can copy in bounds: fattn refused them "
                           f"({msg.decode() if msg else '?'})")
