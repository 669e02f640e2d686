"""The FP8 half of the shim's C++ stand-in: what TE's pybind layer does
around nvte_fused_attn_fwd/bwd on the FP8 backend and in `tex.quantize`
(pytorch/csrc/extensions/attention.cpp, cast.cpp, quantizer.cpp; lines
as at TE d0067d0, which docs/fp8-branches.md reads and which `git diff
d0067d0 release_v2.19` leaves unchanged), on fattn's engines and fattn's
FP8 cast (lib/bridge/abi.c). TE's own Python classes (Float8Quantizer,
Float8CurrentScalingQuantizer, Float8Tensor, Float8TensorStorage) are the
objects handed in and out; only what the C++ does is here.

Current-scaling quantizers hold no scale or amax in TE (float8_tensor.py:
"scale and amax tensors are not needed"): the C++ computes both per call
into the tensor it makes. `cs_state` keeps, per quantizer object, the
scale and amax of the last call the shim made with it, which is what
fattn's front ends record as that quantizer's state (fattn/fp8.h)."""
import ctypes

import torch

from . import bridge

# transformer_engine.h DType -> torch's FP8 dtypes (kFloat8E4M3, kFloat8E5M2)
_FP8_TORCH = {7: torch.float8_e4m3fn, 8: torch.float8_e5m2}
# fattn/dtype.h's codes for them
_FP8_FATTN = {7: 4, 8: 5}

cs_state = {}  # id(Float8CurrentScalingQuantizer) -> [quantizer, scale, amax]


def kind(quantizer):
    """'delayed' or 'current' by TE's class, as quantizer.cpp's converters
    dispatch; any other quantizer is not something the shim stands for."""
    name = type(quantizer).__name__
    if name == "Float8Quantizer":
        return "delayed"
    if name == "Float8CurrentScalingQuantizer":
        return "current"
    raise NotImplementedError(f"transformer_engine_torch: fattn's shim has no C++ path for a "
                              f"{name} (tools/te/fattn_te/bridge_fp8.py: per-tensor FP8 only)")


def _lib():
    return bridge.engine().lib


def data_of(t):
    """A Float8Tensor's codes as a torch FP8 tensor (a view, no copy)."""
    return t._data.view(_FP8_TORCH[int(t._fp8_dtype)])


def _f32(x):
    return float(torch.tensor([x], dtype=torch.float32)[0])


def _recip(x):
    """1/x in float32, as the C++ computes scale_inv."""
    return float((torch.ones(1, dtype=torch.float32) / torch.tensor([x], dtype=torch.float32))[0])


def _amax(src):
    a = ctypes.c_float()
    bridge.engine()._check(_lib().fattn_bridge_fp8_amax(ctypes.byref(bridge.view(src)),
                                                         ctypes.byref(a)), "amax")
    return a.value


def _scale_of(quantizer):
    return float(quantizer.scale.reshape(-1)[0])


def make_float8(data, scale_inv, quantizer, fake_dtype):
    """quantizer.cpp's create_tensor result: a Float8TensorStorage for an
    internal quantizer, else a Float8Tensor; data is a torch FP8 tensor."""
    from transformer_engine.pytorch.tensor.float8_tensor import Float8Tensor
    from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import (
        Float8TensorStorage)
    u8 = data.view(torch.uint8)
    si = torch.tensor([scale_inv], dtype=torch.float32, device=data.device)
    if quantizer is not None and getattr(quantizer, "internal", False):
        return Float8TensorStorage(data=u8, fp8_scale_inv=si, fp8_dtype=quantizer.dtype,
                                   fake_dtype=fake_dtype, data_transpose=None,
                                   quantizer=quantizer)
    return Float8Tensor(shape=u8.shape, dtype=fake_dtype, data=u8, fp8_scale_inv=si,
                        fp8_dtype=quantizer.dtype, requires_grad=False, data_transpose=None,
                        quantizer=quantizer, device=u8.device)


def _reduce_amax(amax, quantizer, device):
    """Float8CurrentScalingQuantizer::quantize_impl's reduction
    (quantizer.cpp release_v2.19:1015-1021): the float32 amax all-reduced
    with MAX over the quantizer's group (its
    _canonicalized_amax_reduction_group(), read by the C++ quantizer at
    :652-661) between computing it and the scale. FusedAttention marks its
    current-scaling quantizers so under context parallelism (backends.py
    2.19.0:2255-2262, 2.20.2:2514-2521)."""
    import torch.distributed as dist
    buf = torch.tensor([amax], dtype=torch.float32, device=device)  # NCCL: on the GPU
    dist.all_reduce(buf, op=dist.ReduceOp.MAX, group=quantizer._canonicalized_amax_reduction_group())
    return float(buf[0])


def quantize(tensor, quantizer, output=None, noop_flag=None):
    """tex.quantize (cast.cpp `quantize`), called by Float8Quantizer and
    Float8CurrentScalingQuantizer (float8_tensor.py:116,125 / 307,316):
    delayed: the quantizer's scale, its amax raised to the tensor's (the
    cast kernel's atomicMax into the amax it was given); current: amax of
    the tensor, scale from it (recipe_common.cuh:14-49), both the new
    tensor's own. scale_inv = 1/scale (the kernel writes it)."""
    if noop_flag is not None:
        raise NotImplementedError("transformer_engine_torch.quantize: noop_flag is not "
                                  "modelled by fattn's shim")
    k = kind(quantizer)
    src = tensor.detach()
    if bridge.is_float8(src):
        raise NotImplementedError("transformer_engine_torch.quantize: the source is already "
                                  "quantized")
    # libfattn's cast reads and writes host memory: a device tensor (a CP
    # rank on a GPU runner) goes through a host twin, the codes back to it
    host = src if src.device.type == "cpu" else src.cpu()
    amax = _amax(host)
    if k == "current" and quantizer.with_amax_reduction:
        amax = _reduce_amax(amax, quantizer, src.device)
    if k == "delayed":
        scale = _scale_of(quantizer)
        quantizer.amax.reshape(-1)[0] = max(float(quantizer.amax.reshape(-1)[0]), amax)
    else:
        scale = _lib().fattn_bridge_fp8_cs_scale(
            amax, _FP8_FATTN[int(quantizer.dtype)], int(bool(quantizer.force_pow_2_scales)),
            float(quantizer.amax_epsilon))
        cs_state[id(quantizer)] = [quantizer, scale, amax]
    if output is not None:
        data = data_of(output)
    else:
        data = torch.empty(tuple(src.shape), dtype=_FP8_TORCH[int(quantizer.dtype)],
                           device=src.device)
    codes = data if data.device.type == "cpu" else torch.empty(
        tuple(data.shape), dtype=data.dtype)
    bridge.engine()._check(_lib().fattn_bridge_fp8_quantize(
        ctypes.byref(bridge.view(host)), ctypes.byref(bridge.view(codes)), ctypes.c_float(scale)),
        "quantize")
    if codes is not data:
        data.copy_(codes)
    if output is not None:
        output._scale_inv.reshape(-1)[0] = _recip(scale)
        return output
    return make_float8(data, _recip(scale), quantizer, src.dtype)


class _FwdCall:
    def __init__(self, s_quantizer, o_quantizer, params):
        self.s_quantizer, self.o_quantizer, self.params = s_quantizer, o_quantizer, params
        self.amax_s = ctypes.c_float(0.0)
        self.amax_o = ctypes.c_float(0.0)
        params.amax_s = ctypes.pointer(self.amax_s)
        params.amax_o = ctypes.pointer(self.amax_o)

    def after(self):
        """fused_attn_fp8.cu:1153-1169: amax_s into S's amax (the
        quantizer's buffer, quantizer.cpp:336-342), amax_o into O's (a
        delayed O quantizer's; current scaling's is a throwaway,
        attention.cpp:78-94)."""
        self.s_quantizer.amax.reshape(-1)[0] = self.amax_s.value
        if kind(self.o_quantizer) == "delayed":
            self.o_quantizer.amax.reshape(-1)[0] = self.amax_o.value


def fwd_setup(q, k, v, fake_dtype, s_quantizer, o_quantizer, oshape):
    """attention.cpp:136-162 (FP8 Q, K, V carry data and scale_inv; S from
    quantizer_helper with no data: scale, amax, scale_inv = 1/scale; O
    from quantizer_helper with high precision wanted: FP8 under delayed
    scaling, attention.cpp:73-77, fake_dtype under current, 78-94).
    Returns (O as TE gets it, the call's FP8 state, O's buffer)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not bridge.is_float8(t):
            raise bridge.BridgeError(f"fattn FP8 forward: {name} is not a Float8Tensor "
                                     f"(TE's FP8 call hands quantized Q, K, V)")
    if s_quantizer is None or o_quantizer is None:
        raise bridge.BridgeError("fattn FP8 forward: S and O quantizers are required")
    if kind(s_quantizer) != "delayed":
        raise bridge.BridgeError("fattn FP8 forward: the S quantizer must be a Float8Quantizer")
    p = bridge.Fp8Fwd()
    p.descale_q, p.descale_k, p.descale_v = (float(t._scale_inv.reshape(-1)[0])
                                             for t in (q, k, v))
    p.scale_s = _scale_of(s_quantizer)
    p.descale_s = _recip(p.scale_s)
    p.s_dtype = _FP8_FATTN[int(s_quantizer.dtype)]
    if kind(o_quantizer) == "delayed":
        p.scale_o = _scale_of(o_quantizer)
        data = bridge.poisoned(oshape, _FP8_TORCH[int(o_quantizer.dtype)], q._data.device)
        out = make_float8(data, _recip(p.scale_o), o_quantizer, fake_dtype)
    else:
        p.scale_o = 1.0
        data = out = bridge.poisoned(oshape, fake_dtype, q._data.device)
    return out, _FwdCall(s_quantizer, o_quantizer, p), data


class BwdCall:
    """attention.cpp:340-383 and 460-465: the FP8 backward's tensors. Q, K,
    V, dO are Float8Tensors; O is FP8 (its scale_inv is descale_o) or
    f16 (descale_o unused, fused_attn_fp8.cu:1278-1283); S (the copy
    FusedAttnFunc froze) and dP give scale and 1/scale; dQ, dK, dV are
    made by the dQKV quantizer: FP8 E5M2 with its scale (delayed), else
    fake_dtype with throwaway amaxes (current)."""

    def __init__(self, q, k, v, o, d_o, fake_dtype, s_q, dp_q, dqkv_q):
        for name, t in (("q", q), ("k", k), ("v", v), ("dO", d_o)):
            if not bridge.is_float8(t):
                raise bridge.BridgeError(f"fattn FP8 backward: {name} is not a Float8Tensor "
                                         f"(TE's FP8 call hands quantized Q, K, V, dO)")
        if s_q is None or dp_q is None or dqkv_q is None:
            raise bridge.BridgeError("fattn FP8 backward: S, dP and dQKV quantizers are "
                                     "required")
        for name, qz in (("S", s_q), ("dP", dp_q)):
            if kind(qz) != "delayed":
                raise bridge.BridgeError(
                    f"fattn FP8 backward: the {name} quantizer handed to fused_attn_bwd is a "
                    f"{type(qz).__name__}; the FP8 kernel reads scale_{name} from it "
                    f"(fused_attn_fp8.cu:1263-1324), which only a Float8Quantizer holds")
        self.dp_q, self.dqkv_q, self.fake_dtype = dp_q, dqkv_q, fake_dtype
        self.delayed = kind(dqkv_q) == "delayed"
        p = self.params = bridge.Fp8Bwd()
        p.descale_q, p.descale_k, p.descale_v = (float(t._scale_inv.reshape(-1)[0])
                                                 for t in (q, k, v))
        p.descale_do = float(d_o._scale_inv.reshape(-1)[0])
        if bridge.is_float8(o):
            p.descale_o = float(o._scale_inv.reshape(-1)[0])
            self.o = data_of(o)
        else:
            p.descale_o = 1.0
            self.o = o
        p.scale_s = _scale_of(s_q)
        p.descale_s = _recip(p.scale_s)
        p.scale_dp = _scale_of(dp_q)
        p.descale_dp = _recip(p.scale_dp)
        g = _scale_of(dqkv_q) if self.delayed else 1.0
        p.scale_dq = p.scale_dk = p.scale_dv = g
        self.amax = [ctypes.c_float(0.0) for _ in range(4)]
        p.amax_dp, p.amax_dq, p.amax_dk, p.amax_dv = (ctypes.pointer(a) for a in self.amax)
        p.s_dtype = _FP8_FATTN[int(s_q.dtype)]
        p.dp_dtype = _FP8_FATTN[int(dp_q.dtype)]
        self.q, self.k, self.v, self.d_o = (data_of(t) for t in (q, k, v, d_o))
        self.grad_dtype = _FP8_TORCH[int(dqkv_q.dtype)] if self.delayed else fake_dtype

    def after(self, dq, dk, dv):
        """amax_dP into dP's amax; under delayed scaling dQ, dK, dV share
        the dQKV quantizer's one amax (quantizer.cpp:336-342, fp8-branches
        F5: which of cuDNN's three lands there is not determined; the
        shim, like fattn's front ends, keeps the largest) and come back as
        Float8Tensors with scale_inv = 1/scale."""
        self.dp_q.amax.reshape(-1)[0] = self.amax[0].value
        if not self.delayed:
            return dq, dk, dv
        self.dqkv_q.amax.reshape(-1)[0] = max(a.value for a in self.amax[1:])
        si = _recip(_scale_of(self.dqkv_q))
        return tuple(make_float8(t, si, self.dqkv_q, self.fake_dtype) for t in (dq, dk, dv))
