"""TE's tex.fused_attn_fwd / tex.fused_attn_bwd on fattn's engines: what the
shim (shim.py) hands TE's Python for its C++ calls. Each checks TE's
hand-off first (contract.py), then calls the engine API through the
bridge's mirror of its structs (bridge.py), the FP8 calls through
bridge_fp8.py. The state a case run shares with the recorder and the
refusal log (bridge.last_forward, bridge.last_inputs, bridge.default_gen,
bridge.pending_refusal) stays in the bridge."""
import ctypes

import torch

from . import bridge, bridge_fp8, contract, engine_calls, tex_enums
from .bridge import (_TORCH, AuxPack, BridgeError, BwdParams, CppRefusal, FwdParams,
                     PhiloxGen, engine, is_float8, poisoned, view)


def _fmt_has_thd(fmt):
    return int(fmt) == 2  # NVTE_THD


def host_meta(t, keep):
    """What the engine dispatch reads on the host (cu_seqlens, rng_state,
    softmax_offset, page tables; fattn/engine.h) as a host tensor: a CUDA
    one (TE's context-parallel code on a GPU) is copied, the copy kept alive
    in `keep` until the call returns."""
    if t is not None and t.device.type != "cpu":
        t = t.detach().cpu()
        keep.append(t)
    return t


def _host_only(mask_type, qkv_layout):
    """Whether the cuDNN engine takes this call only on host tensors: a
    padding mask or a THD layout (lib/cudnn/transfer.c
    fattn__cudnn_device_call_supported: rows past a sequence's length stay
    untouched only on the host path, which copies back the defined rows)."""
    mask = tex_enums.NVTE_Mask_Type(int(mask_type)).name.lower()
    lay = tex_enums.NVTE_QKV_Layout(int(qkv_layout)).name[len("NVTE_"):].lower()
    return "padding" in mask or any(part.startswith("t") for part in lay.split("_"))


class HostTwins:
    """Host twins of a call's CUDA tensors, for a call the engine takes only
    on the host (_host_only) while TE handed CUDA tensors (DotProductAttention
    on a GPU runner): the engine runs on the twins -- packed views stay views
    of one host buffer, as the layout needs -- and the outputs are copied
    back into TE's tensors after it, so TE sees the bytes the host path
    writes, rows past a sequence's length untouched. The engine-call record
    names TE's own tensors (they are what TE handed). Made inactive (the
    call runs where TE's tensors are), it hands every tensor back as it is."""

    def __init__(self, active):
        self.active = active
        self.bases = {}
        self.outs = []

    def of(self, t):
        if not self.active or t is None or t.device.type == "cpu":
            return t
        b = t._base if t._base is not None else t
        hb = self.bases.get(id(b))
        if hb is None:
            hb = torch.empty_strided(b.size(), b.stride(), dtype=b.dtype)
            hb.copy_(b.detach())
            self.bases[id(b)] = hb
        return hb.as_strided(t.size(), t.stride(), t.storage_offset() - b.storage_offset())

    def out(self, t):
        """The twin of an output, copied back by done()."""
        h = self.of(t)
        if h is not t:
            self.outs.append((t, h))
        return h

    def done(self):
        with torch.no_grad():
            for t, h in self.outs:
                t.copy_(h)


def fused_attn_fwd(max_seqlen_q, max_seqlen_kv, is_training, attn_scale, dropout,
                   fast_zero_fill, qkv_layout, o_format, qkv_scale_inv_format, bias_type,
                   mask_type, softmax_type, window_size, bottom_right_diagonal, cu_seqlens_q,
                   cu_seqlens_kv, q, k, v, fake_dtype, cu_seqlens_q_padded,
                   cu_seqlens_kv_padded, page_table_k, page_table_v, s_quantizer,
                   o_quantizer, attn_bias, softmax_offset, rng_gen, rng_elts_per_thread,
                   return_max_logit, cuda_graph):
    """tex.fused_attn_fwd (TE fused_attn.py:367-400 calls it): returns
    [O, Stats, (Max), rng_state, (Bias), (SoftmaxOffset)]."""
    contract.check_fwd(max_seqlen_q, max_seqlen_kv, is_training, attn_scale, dropout,
                       fast_zero_fill, qkv_layout, o_format, qkv_scale_inv_format, bias_type,
                       mask_type, softmax_type, window_size, bottom_right_diagonal, cu_seqlens_q,
                       cu_seqlens_kv, q, k, v, fake_dtype, cu_seqlens_q_padded,
                       cu_seqlens_kv_padded, page_table_k, page_table_v, s_quantizer,
                       o_quantizer, attn_bias, softmax_offset, rng_gen, rng_elts_per_thread,
                       return_max_logit, cuda_graph)
    if bridge.pending_refusal:
        raise CppRefusal(bridge.pending_refusal)
    bridge.last_inputs = {"k": k, "v": v, "page_table_k": page_table_k, "page_table_v": page_table_v,
                   "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_kv": cu_seqlens_kv,
                   "cu_seqlens_q_padded": cu_seqlens_q_padded,
                   "cu_seqlens_kv_padded": cu_seqlens_kv_padded}
    e = engine()
    if rng_gen is None:
        rng_gen = bridge.default_gen
    if not isinstance(rng_gen, PhiloxGen):
        raise BridgeError("rng_gen must be fattn's PhiloxGen or None (the per-case default)")
    # attention.cpp:173-176: O is Q's shape with V's head dim; zeroed for THD.
    oshape = list(q.shape[:-1]) + [v.shape[-1]]
    fp8 = None
    if s_quantizer is not None or o_quantizer is not None or is_float8(q):
        # attention.cpp:136-162: the FP8 call (Float8Tensor Q, K, V; S and
        # O made by their quantizers); fattn_te/bridge_fp8 stands for it.
        out, fp8, out_data = bridge_fp8.fwd_setup(q, k, v, fake_dtype, s_quantizer,
                                                  o_quantizer, oshape)
        q, k, v = (bridge_fp8.data_of(x) for x in (q, k, v))
    else:
        out = out_data = poisoned(oshape, q.dtype, q.device)
        if _fmt_has_thd(o_format):
            out.zero_()
    # attention.cpp:231-236: rng_state = (seed, offset), then the generator
    # advances by rng_elts_per_thread rounded up to a multiple of 4.
    rng_state = torch.tensor([rng_gen.seed, rng_gen.offset], dtype=torch.int64)
    rng_gen.offset += (int(rng_elts_per_thread) + 3) // 4 * 4
    aux = AuxPack()
    p = FwdParams()
    keep, dev = [], q.device.type != "cpu"
    twins = HostTwins(dev and _host_only(mask_type, qkv_layout))
    dev = dev and not twins.active
    p.q, p.k, p.v = view(twins.of(q)), view(twins.of(k)), view(twins.of(v))
    p.bias, p.o = view(twins.of(attn_bias)), view(twins.out(out_data))
    if fp8 is not None:
        p.fp8 = ctypes.cast(ctypes.pointer(fp8.params), ctypes.c_void_p)
    p.aux = ctypes.pointer(aux)
    p.cu_seqlens_q, p.cu_seqlens_kv = (view(host_meta(cu_seqlens_q, keep)),
                                       view(host_meta(cu_seqlens_kv, keep)))
    p.cu_seqlens_q_padded = view(host_meta(cu_seqlens_q_padded, keep))
    p.cu_seqlens_kv_padded = view(host_meta(cu_seqlens_kv_padded, keep))
    p.page_table_k = view(host_meta(page_table_k, keep))
    p.page_table_v = view(host_meta(page_table_v, keep))
    p.softmax_offset = view(host_meta(softmax_offset, keep))
    rng_dev = rng_state.to(q.device)
    p.rng_state = view(rng_state)  # the dispatch reads it on the host
    p.max_seqlen_q, p.max_seqlen_kv = int(max_seqlen_q), int(max_seqlen_kv)
    p.is_training, p.return_max_logit, p.cuda_graph = bool(is_training), bool(
        return_max_logit), False
    p.attn_scale, p.dropout = float(attn_scale), float(dropout)
    p.qkv_layout, p.o_format = int(qkv_layout), int(o_format)
    p.bias_type, p.mask_type, p.softmax_type = int(bias_type), int(mask_type), int(softmax_type)
    p.window_size_left, p.window_size_right = int(window_size[0]), int(window_size[1])
    p.bottom_right_diagonal = bool(bottom_right_diagonal)
    e.fwd(p, dev)  # describes the pack
    if aux.n < 2:
        raise BridgeError(f"engine sized {aux.n} aux entries")
    nstats = 2 if return_max_logit else 1
    owned = []
    for i in range(nstats):
        a = aux.t[i]
        t = poisoned([a.shape[d] for d in range(a.ndim)], _TORCH[a.dtype], q.device)
        owned.append(t)
        aux.t[i] = view(twins.out(t))
    # what the executing call hands the engine (as TE handed it: the host
    # copies above are the dispatch's), the pack as the dispatch resolves
    # it: Stats, (Max), rng_state, (Bias), (SoftmaxOffset)
    pack = owned + [rng_dev] + ([attn_bias] if bias_type in (1, 2) else []) + (
        [softmax_offset] if softmax_type != 0 else [])
    engine_calls.note_fwd(p, [("q", q), ("k", k), ("v", v), ("o", out_data),
                              ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_kv", cu_seqlens_kv),
                              ("cu_seqlens_q_padded", cu_seqlens_q_padded),
                              ("cu_seqlens_kv_padded", cu_seqlens_kv_padded),
                              ("bias", attn_bias), ("softmax_offset", softmax_offset),
                              ("page_table_k", page_table_k), ("page_table_v", page_table_v),
                              ("rng_state", rng_dev)] +
                          [(f"aux[{i}]", t) for i, t in enumerate(pack)], fp8)
    e.fwd(p, dev)
    twins.done()
    if fp8 is not None:
        fp8.after()
    result = [out] + owned + [rng_dev]
    if bias_type in (1, 2):  # the pack's Bias entry is the input (pre/post_scale_bias)
        result.append(attn_bias)
    if softmax_type != 0:
        result.append(softmax_offset)
    if len(result) != 1 + aux.n:
        raise BridgeError(f"engine's pack has {aux.n} entries, the shim {len(result) - 1}")
    bridge.last_forward = list(result)
    bridge.last_forward_max = bool(return_max_logit)
    return result


def _alloc_packed(like, npack, at, dtype):
    if npack == 1:
        t = poisoned(like.shape, dtype, like.device)
        return [t]
    shape = list(like.shape)
    shape.insert(at, npack)
    buf = poisoned(shape, dtype, like.device)
    return [buf.select(at, m) for m in range(npack)]


def fused_attn_bwd(max_seqlen_q, max_seqlen_kv, attn_scale, dropout, fast_zero_fill,
                   qkv_layout, o_format, do_format, dqkv_layout, qkv_scale_inv_format,
                   do_scale_inv_format, bias_type, mask_type, softmax_type, window_size,
                   bottom_right_diagonal, deterministic, cu_seqlens_q, cu_seqlens_kv, q, k, v,
                   o, d_o, fake_dtype, aux_ctx_tensors, cu_seqlens_q_padded,
                   cu_seqlens_kv_padded, s_quantizer, dp_quantizer, dqkv_quantizer,
                   cuda_graph):
    """tex.fused_attn_bwd (TE fused_attn.py:618-651 calls it): returns
    [dQ, dK, dV, dBias, dSoftmaxOffset], None where absent."""
    e = engine()
    contract.check_bwd(max_seqlen_q, max_seqlen_kv, attn_scale, dropout, fast_zero_fill,
                       qkv_layout, o_format, do_format, dqkv_layout, qkv_scale_inv_format,
                       do_scale_inv_format, bias_type, mask_type, softmax_type, window_size,
                       bottom_right_diagonal, deterministic, cu_seqlens_q, cu_seqlens_kv, q, k,
                       v, o, d_o, fake_dtype, aux_ctx_tensors, cu_seqlens_q_padded,
                       cu_seqlens_kv_padded, s_quantizer, dp_quantizer, dqkv_quantizer,
                       cuda_graph)
    lay = tex_enums.NVTE_QKV_Layout(int(dqkv_layout)).name[len("NVTE_"):].lower()
    dtype = q.dtype
    fp8 = None
    if s_quantizer is not None or dp_quantizer is not None or is_float8(q):
        # attention.cpp:340-383, 460-465: the FP8 backward (Float8Tensor Q, K,
        # V, dO, O FP8 or not; dQKV made by its quantizer).
        fp8 = bridge_fp8.BwdCall(q, k, v, o, d_o, fake_dtype, s_quantizer, dp_quantizer,
                                 dqkv_quantizer)
        q, k, v, o, d_o = fp8.q, fp8.k, fp8.v, fp8.o, fp8.d_o
        dtype = fp8.grad_dtype
    # attention.cpp:398-452: dQ/dK/dV as views into one buffer per group.
    if "3hd" in lay or "h3d" in lay:
        dq, dk, dv = _alloc_packed(q, 3, q.dim() - 2 if "3hd" in lay else q.dim() - 1, dtype)
    elif "2hd" in lay or "h2d" in lay:
        (dq,) = _alloc_packed(q, 1, 0, dtype)
        dk, dv = _alloc_packed(k, 2, k.dim() - 2 if "2hd" in lay else k.dim() - 1, dtype)
    else:
        (dq,), (dk,), (dv,) = (_alloc_packed(t, 1, 0, dtype) for t in (q, k, v))
    # attention.cpp:492-498: THD grads zero-filled (q's format is the
    # layout's first part, k/v's its last: "t3hd", "thd_t2hd", "thd_bshd_bshd").
    parts = lay.split("_")
    if parts[0].startswith("t"):
        dq.zero_()
    if parts[-1].startswith("t"):
        dk.zero_()
        dv.zero_()
    d_bias = d_off = None
    # attention.cpp:543-559: dBias shaped like the last aux entry, zeroed for THD.
    if int(bias_type) in (1, 2):
        last = aux_ctx_tensors[-1]
        d_bias = poisoned(last.shape, dtype, q.device)
        qkv_name = tex_enums.NVTE_QKV_Layout(int(qkv_layout)).name[len("NVTE_"):].lower()
        if all(part.startswith("t") for part in qkv_name.split("_")):  # the layout's format is THD
            d_bias.zero_()
    # attention.cpp:561-568: dSoftmaxOffset float32 [1, h, 1, 1].
    if int(softmax_type) != 0:
        hdim = 1 if _fmt_has_thd(o_format) else (2 if int(o_format) in (0, 1) else 1)
        d_off = poisoned([1, q.shape[hdim], 1, 1], torch.float32, q.device)
    aux = AuxPack()
    aux.n = len(aux_ctx_tensors)
    keep, dev = [], q.device.type != "cpu"
    twins = HostTwins(dev and _host_only(mask_type, qkv_layout))
    dev = dev and not twins.active
    tw, tw_out = twins.of, twins.out
    last_host = len(aux_ctx_tensors) - 1 if int(softmax_type) != 0 else -1
    for i, t in enumerate(aux_ctx_tensors):
        # [Stats, rng_state, (Bias), (SoftmaxOffset)]: rng_state and the
        # offset are read on the host (fattn/engine.h)
        aux.t[i] = view(host_meta(t, keep) if i in (1, last_host) else tw(t))
    p = BwdParams()
    p.q, p.k, p.v, p.o, p.d_o = view(tw(q)), view(tw(k)), view(tw(v)), view(tw(o)), view(tw(d_o))
    p.aux = ctypes.pointer(aux)
    p.dq, p.dk, p.dv, p.d_bias, p.d_softmax_offset = (view(tw_out(dq)), view(tw_out(dk)),
                                                      view(tw_out(dv)), view(tw_out(d_bias)),
                                                      view(tw_out(d_off)))
    p.cu_seqlens_q, p.cu_seqlens_kv = (view(host_meta(cu_seqlens_q, keep)),
                                       view(host_meta(cu_seqlens_kv, keep)))
    p.cu_seqlens_q_padded = view(host_meta(cu_seqlens_q_padded, keep))
    p.cu_seqlens_kv_padded = view(host_meta(cu_seqlens_kv_padded, keep))
    p.max_seqlen_q, p.max_seqlen_kv = int(max_seqlen_q), int(max_seqlen_kv)
    p.attn_scale, p.dropout = float(attn_scale), float(dropout)
    p.qkv_layout, p.o_format, p.do_format = int(qkv_layout), int(o_format), int(do_format)
    p.dqkv_layout = int(dqkv_layout)
    p.bias_type, p.mask_type, p.softmax_type = int(bias_type), int(mask_type), int(softmax_type)
    p.window_size_left, p.window_size_right = int(window_size[0]), int(window_size[1])
    p.bottom_right_diagonal, p.deterministic = bool(bottom_right_diagonal), bool(deterministic)
    if fp8 is not None:
        p.fp8 = ctypes.cast(ctypes.pointer(fp8.params), ctypes.c_void_p)
    engine_calls.note_bwd(p, [("q", q), ("k", k), ("v", v), ("o", o),
                              ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_kv", cu_seqlens_kv),
                              ("cu_seqlens_q_padded", cu_seqlens_q_padded),
                              ("cu_seqlens_kv_padded", cu_seqlens_kv_padded), ("d_o", d_o),
                              ("dq", dq), ("dk", dk), ("dv", dv), ("d_bias", d_bias),
                              ("d_softmax_offset", d_off)] +
                          [(f"aux[{i}]", t) for i, t in enumerate(aux_ctx_tensors)], fp8)
    e.bwd(p, dev)
    twins.done()
    if fp8 is not None:
        dq, dk, dv = fp8.after(dq, dk, dv)
    return [dq, dk, dv, d_bias, d_off]
