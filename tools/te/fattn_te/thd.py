"""The shim's tex.thd_* (TE's THD helpers for context parallelism): what
attention.cpp:792-1049 (TE d0067d0) does around each kernel -- its checks,
its allocation (at::empty -> the run file's poison, at::zeros -> zeros) --
with the kernel itself libfattn's (lib/bridge/cp_thd.c, fattn/cp_thd.h) on
the host tensors' memory, through ctypes. TE calls them from
context_parallel.py (the shim's NAMES cite the lines)."""
import ctypes

import torch

from . import bridge


class _Lib:
    def __init__(self):
        self.lib = bridge.engine().lib
        for name in ("fattn_cp_thd_partitioned_indices", "fattn_cp_thd_reorder",
                     "fattn_cp_thd_read_half", "fattn_cp_thd_second_half_lse",
                     "fattn_cp_thd_out_correction", "fattn_cp_thd_grad_correction",
                     "fattn_cp_thd_copy_valid_tokens"):
            getattr(self.lib, name).restype = ctypes.c_int

    def call(self, name, *args):
        st = getattr(self.lib, name)(*args)
        if st != 0:
            msg = self.lib.fattn_last_error()
            # NVTE_CHECK / NVTE_ERROR reach Python as a RuntimeError
            raise RuntimeError(f"{name}: {msg.decode() if msg else st}")


_lib = None


def _l():
    global _lib
    if _lib is None:
        _lib = _Lib()
    return _lib


def _host(t, what):
    """The memory TE's kernel reads: a host tensor's own storage (the
    kernels address it as C-contiguous from its data pointer, as CUDA's
    do)."""
    if t.device.type != "cpu":
        raise RuntimeError(f"{what}: fattn's THD helpers run on host tensors")
    return ctypes.byref(bridge.view(t))


def _on_host(*inplace):
    """On a GPU runner TE hands these CUDA tensors: they run on host copies
    (fattn's kernels are host code), the arguments TE's kernel writes in
    place (positions `inplace`) copied back, a result moved to the device."""
    def deco(fn):
        def call(*args):
            dev = next((a.device for a in args if isinstance(a, torch.Tensor)
                        and a.device.type != "cpu"), None)
            if dev is None:
                return fn(*args)
            host = [a.detach().cpu() if isinstance(a, torch.Tensor) else a for a in args]
            r = fn(*host)
            for i in inplace:
                args[i].copy_(host[i])
            return r.to(dev) if isinstance(r, torch.Tensor) else r
        call.__name__ = fn.__name__
        call.__doc__ = fn.__doc__
        return call
    return deco


def _cu(t, what):
    if t.dtype != torch.int32 or t.dim() != 1 or t.shape[0] < 2:
        raise RuntimeError(f"{what}: cu_seqlens must be int32 [batch + 1] (attention.cpp)")
    return _host(t, what)


@_on_host()
def thd_read_half_tensor(tensor, cu_seqlens, half_idx):
    shape = list(tensor.shape)
    if tensor.dim() not in (3, 4):
        raise RuntimeError("thd_read_half_tensor: tensor.dim() == 3 || tensor.dim() == 4")
    shape[0 if tensor.dim() == 3 else 1] //= 2
    half = bridge.poisoned(shape, tensor.dtype, tensor.device)  # at::empty
    _l().call("fattn_cp_thd_read_half", _host(tensor, "thd_read_half_tensor"),
              _cu(cu_seqlens, "thd_read_half_tensor"), int(half_idx),
              _host(half, "thd_read_half_tensor"))
    return half


@_on_host(0)
def thd_second_half_lse_correction(lse, lse_per_step, cu_seqlens, lse_packed):
    _l().call("fattn_cp_thd_second_half_lse", _host(lse, "thd_second_half_lse_correction"),
              _host(lse_per_step, "thd_second_half_lse_correction"),
              _cu(cu_seqlens, "thd_second_half_lse_correction"), bool(lse_packed), False)


@_on_host()
def thd_read_second_half_lse(lse, cu_seqlens, lse_packed, second_half_lse_seqlen):
    if lse_packed:
        shape = [lse.shape[0], int(second_half_lse_seqlen)]
    else:
        shape = [lse.shape[0], lse.shape[1], int(second_half_lse_seqlen)]
    half = torch.zeros(shape, dtype=lse.dtype, device=lse.device)  # at::zeros
    _l().call("fattn_cp_thd_second_half_lse", _host(lse, "thd_read_second_half_lse"),
              _host(half, "thd_read_second_half_lse"),
              _cu(cu_seqlens, "thd_read_second_half_lse"), bool(lse_packed), True)
    return half


@_on_host(0)
def thd_out_correction(*args):
    """TE 2.19.0's (out, out_per_step, lse, lse_per_step, cu_seqlens,
    only_second_half, lse_packed) or 2.20.2's, with old_lse after
    out_per_step (the online merge, context_parallel.py 2.20.2:2211)."""
    if len(args) == 7:
        out, out_per_step, lse, lse_per_step, cu_seqlens, only_second_half, lse_packed = args
        old = None
    elif len(args) == 8:
        (out, out_per_step, old, lse, lse_per_step, cu_seqlens, only_second_half,
         lse_packed) = args
    else:
        raise TypeError(f"thd_out_correction() takes 7 or 8 positional arguments but "
                        f"{len(args)} were given")
    w = "thd_out_correction"
    _l().call("fattn_cp_thd_out_correction", _host(out, w), _host(out_per_step, w),
              _host(old, w) if old is not None else None, _host(lse, w),
              _host(lse_per_step, w), _cu(cu_seqlens, w), bool(only_second_half),
              bool(lse_packed))


@_on_host(0)
def thd_grad_correction(grad, grad_per_step, cu_seqlens, first_half, second_half):
    _l().call("fattn_cp_thd_grad_correction", _host(grad, "thd_grad_correction"),
              _host(grad_per_step, "thd_grad_correction"),
              _cu(cu_seqlens, "thd_grad_correction"), str(first_half).encode(),
              str(second_half).encode())


@_on_host()
def thd_get_partitioned_indices(cu_seqlens, total_tokens, world_size, rank):
    n = int(total_tokens) // int(world_size) if int(world_size) > 0 else 0
    out = bridge.poisoned([max(n, 0)], torch.int32, cu_seqlens.device)  # at::empty
    _l().call("fattn_cp_thd_partitioned_indices", _cu(cu_seqlens, "thd_get_partitioned_indices"),
              ctypes.c_int64(int(total_tokens)), int(world_size), int(rank),
              _host(out, "thd_get_partitioned_indices"))
    return out


def _reorder(inp, cu_seqlens, cp_size, total_tokens, to_sequence, what):
    if inp.dim() < 1 or inp.shape[0] != int(total_tokens):
        raise RuntimeError(f"{what}: inp.dim() >= 1 && inp.size(0) == total_tokens")
    inp_c = inp.contiguous()
    out = bridge.poisoned(inp_c.shape, inp_c.dtype, inp_c.device)  # at::empty_like
    _l().call("fattn_cp_thd_reorder", _host(inp_c, what), _cu(cu_seqlens, what), int(cp_size),
              bool(to_sequence), _host(out, what))
    return out


@_on_host()
def thd_sequence_order_to_cp_rank_order(inp, cu_seqlens, cp_size, total_tokens):
    return _reorder(inp, cu_seqlens, cp_size, total_tokens, False,
                    "thd_sequence_order_to_cp_rank_order")


@_on_host()
def thd_cp_rank_order_to_sequence_order(inp, cu_seqlens, cp_size, total_tokens):
    return _reorder(inp, cu_seqlens, cp_size, total_tokens, True,
                    "thd_cp_rank_order_to_sequence_order")


@_on_host(0)
def thd_copy_valid_tokens_from_per_split_to_rank_local(out, inp, cu_seqlens_padded, cu_seqlens):
    what = "thd_copy_valid_tokens_from_per_split_to_rank_local"
    if not out.is_contiguous():
        raise RuntimeError(f"{what} output must be contiguous.")
    # the contiguous copies live until the call returns
    inp_c, pad_c, cu_c = inp.contiguous(), cu_seqlens_padded.contiguous(), cu_seqlens.contiguous()
    _l().call("fattn_cp_thd_copy_valid_tokens", _host(out, what), _host(inp_c, what),
              _cu(pad_c, what), _cu(cu_c, what))
