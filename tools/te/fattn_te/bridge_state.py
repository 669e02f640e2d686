"""The shim's stand-ins for the C++ of TE's that carries state from call to
call: the delayed-scaling recipe update and copy_to_kv_cache, on
libfattn's own (fattn/fp8.h fattn_fp8_delayed_update, fattn/kv_cache.h
fattn_kv_cache_copy, through lib/bridge/state.c). TE's Python calls them
as tex.* (quantization.py:694 in both releases; attention/custom_ops.py's
copy_to_kv_cache body); the tensors are TE's own, written in place."""
import ctypes

import torch

from . import bridge

# transformer_engine.h DType of the FP8 formats -> fattn's dtype codes
_FP8_FATTN = {7: 4, 8: 5}
_ALGOS = {"max": 0, "most_recent": 1}


def _lib():
    lib = bridge.engine().lib
    if not getattr(lib, "_fattn_state_typed", False):
        f = lib.fattn_bridge_fp8_delayed_update
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                      ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        g = lib.fattn_bridge_kv_cache_copy
        g.restype = ctypes.c_int
        g.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_void_p, ctypes.c_int64,
                                               ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                               ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                               ctypes.c_int64, ctypes.c_int]
        lib._fattn_state_typed = True
    return lib


def _f32(t, what):
    if t.dtype != torch.float32 or t.device.type != "cpu" or not t.is_contiguous():
        raise bridge.BridgeError(f"{what}: a contiguous float32 host tensor, got {t.dtype} "
                                 f"on {t.device}")
    return t.data_ptr()


def fused_amax_and_scale_update_after_reduction(amax_reduction_buffer, amax_histories, scales,
                                                amax_compute_algo, fp8_dtype, margin):
    """tex.fused_amax_and_scale_update_after_reduction
    (pytorch/csrc/extensions/recipe.cpp ->
    nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction,
    delayed_scaling.cu kernel_bulk): per state, in order, its slice of the
    reduction buffer, its history [len, n] and scales [n] updated in place."""
    if amax_compute_algo not in _ALGOS:
        raise RuntimeError(f"Unsupported amax compute algorithm ({amax_compute_algo})")
    if int(fp8_dtype) not in _FP8_FATTN:
        raise RuntimeError(f"Expected FP8 dtype, but got {fp8_dtype}")
    if len(amax_histories) != len(scales):
        raise RuntimeError("amax histories and scales differ in number")
    buf = amax_reduction_buffer.detach()
    off = 0
    for hist, scale in zip(amax_histories, scales):
        n = scale.numel()
        if hist.dim() != 2 or hist.shape[1] != n:
            raise RuntimeError(f"amax history of shape {tuple(hist.shape)} for {n} scales")
        red = buf[off:off + n].contiguous()
        bridge.engine()._check(_lib().fattn_bridge_fp8_delayed_update(
            _f32(hist, "amax_history"), _f32(scale, "scale"), hist.shape[0], n,
            _f32(red, "amax_reduction_buffer"), _ALGOS[amax_compute_algo],
            _FP8_FATTN[int(fp8_dtype)], int(margin)), "amax and scale update")
        off += n


def copy_to_kv_cache(new_k, new_v, k_cache, v_cache, page_table, cu_new_lens, cu_cached_lens,
                     qkv_format, b, max_ctx_len, max_seq_len, max_pages_per_seq,
                     is_non_paged):
    """tex.copy_to_kv_cache (attention.cpp:1088-1111 -> nvte_copy_to_kv_cache,
    kv_cache.cu): the caches written in place; `page_table` is the paged
    manager's table or the non-paged manager's batch_indices (one entry per
    row), as TE passes it."""
    for name, t in (("page_table", page_table), ("cu_new_lens", cu_new_lens),
                    ("cu_cached_lens", cu_cached_lens)):
        if t.dtype != torch.int32 or t.device.type != "cpu" or not t.is_contiguous():
            raise bridge.BridgeError(f"copy_to_kv_cache: {name} must be contiguous int32 on "
                                     f"the host")
    nkt, nvt = new_k.contiguous(), new_v.contiguous()  # kept alive over the call
    nk, nv = bridge.view(nkt), bridge.view(nvt)
    kc, vc = bridge.view(k_cache), bridge.view(v_cache)
    rows = page_table.shape[0] if page_table.dim() == 2 else page_table.numel()
    bridge.engine()._check(_lib().fattn_bridge_kv_cache_copy(
        ctypes.addressof(nk), ctypes.addressof(nv), ctypes.addressof(kc), ctypes.addressof(vc),
        page_table.data_ptr(), rows, cu_new_lens.data_ptr(), cu_cached_lens.data_ptr(),
        int(qkv_format), int(b), int(max_ctx_len), int(max_seq_len), int(max_pages_per_seq),
        int(bool(is_non_paged))), "copy_to_kv_cache")
