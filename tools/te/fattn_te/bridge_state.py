"""The shim's stand-in for the C++ of TE's that carries recipe state from
call to call: the delayed-scaling recipe update, on libfattn's own
(fattn/fp8.h fattn_fp8_delayed_update, through lib/bridge/state.c). TE's
Python calls it as tex.fused_amax_and_scale_update_after_reduction
(quantization.py:694 in both releases); the tensors are TE's own, written
in place. (The cache's copy_to_kv_cache is bridge_kv.py's.)"""
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
    buf = amax_reduction_buffer.detach().cpu()
    off = 0
    for hist, scale in zip(amax_histories, scales):
        n = scale.numel()
        if hist.dim() != 2 or hist.shape[1] != n:
            raise RuntimeError(f"amax history of shape {tuple(hist.shape)} for {n} scales")
        red = buf[off:off + n].contiguous()
        # libfattn updates host memory: a GPU rank's state (context
        # parallelism on a GPU runner) through host twins, written back
        h = hist if hist.device.type == "cpu" else hist.detach().cpu()
        sc = scale if scale.device.type == "cpu" else scale.detach().cpu()
        bridge.engine()._check(_lib().fattn_bridge_fp8_delayed_update(
            _f32(h, "amax_history"), _f32(sc, "scale"), hist.shape[0], n,
            _f32(red, "amax_reduction_buffer"), _ALGOS[amax_compute_algo],
            _FP8_FATTN[int(fp8_dtype)], int(margin)), "amax and scale update")
        if h is not hist:
            hist.copy_(h)
            scale.copy_(sc)
        off += n

