"""fattn's transformer_engine_torch: TE's C++ extension (tex) replaced by
TE's enums with TE's values, the names the import chain needs,
fused_attn_fwd / fused_attn_bwd on fattn's engines (f16 and FP8) and the
per-tensor FP8 cast TE's quantizers call (quantize)."""
import types

# TE's enums (tex_enums.py), exported by the shim as TE's C++ extension does
from .tex_enums import (DType, NVTE_QKV_Layout, NVTE_QKV_Format, NVTE_Bias_Type, NVTE_Mask_Type,
                        NVTE_Softmax_Type, NVTE_Fused_Attn_Backend, FP8FwdTensors, FP8BwdTensors,
                        NVTEScalingMode)


class Unavailable:
    """A compiled entry point or class of TE's that the import chain names
    but the fused-attention paths (f16, per-tensor FP8) never call: naming it works, calling
    it says what is missing."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(
            f"transformer_engine_torch.{self._name} is not provided by fattn's shim "
            "(tools/te/fattn_te/shim.py): only the fused-attention paths (f16, per-tensor "
            "FP8) run")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Unavailable(f"{self._name}.{attr}")

    def __repr__(self):
        return f"<fattn shim: transformer_engine_torch.{self._name} unavailable>"


def _fused_attn_fwd(*args):
    from . import calls
    return calls.fused_attn_fwd(*args)


def _fused_attn_bwd(*args):
    from . import calls
    return calls.fused_attn_bwd(*args)


def _copy_to_kv_cache(*args):
    from . import bridge_kv
    return bridge_kv.copy_to_kv_cache(*args)


def _get_fused_attn_backend(*args):
    """tex.get_fused_attn_backend, which only DotProductAttention's backend
    selection calls (the DPA path, fattn_te/dpa.py): 2.20.2 hands one
    FusedAttentionParams and takes (backend, reject message), 2.19.0 hands
    its fields positionally and takes the backend. The case is one fattn's
    support table already found valid for TE's C++ (else it is a refuse.*
    case, which the shim refuses at fused_attn_fwd), so the answer is the
    sub-backend of its dtype: FP8 for FP8 Q, else F16_arbitrary_seqlen."""
    fp8 = (int(DType.kFloat8E4M3), int(DType.kFloat8E5M2))
    if len(args) == 1:
        q_type = getattr(args[0], "qkv_dtype", None)
        fp8_case = q_type is not None and int(q_type) in fp8
    else:
        fp8_case = int(args[1]) in fp8
    b = (NVTE_Fused_Attn_Backend.NVTE_FP8 if fp8_case
         else NVTE_Fused_Attn_Backend.NVTE_F16_arbitrary_seqlen)
    return (b, "") if len(args) == 1 else b


def _quantize(*args, **kwargs):
    from . import bridge_fp8
    return bridge_fp8.quantize(*args, **kwargs)


# The reference platform's cuDNN (fattn's support table, 9.19.0) as
# cudnnGetVersion() encodes it.
CUDNN_VERSION = 91900


def _get_cudnn_version():
    return CUDNN_VERSION


def _thd(name):
    def call(*args):
        from . import thd
        return getattr(thd, name)(*args)
    call.__name__ = name
    return call


# Every name the shim defines, with the TE line that needs it (2.19.0; the
# 2.20.2 line where it moved). A name TE asks for that is not here is an
# AttributeError naming it, so that a new TE release says what it needs.
_U = None  # marks an Unavailable entry
NAMES = [
    ("DType", DType, "pytorch/constants.py:49-56,93 (member set asserted)"),
    ("FP8FwdTensors", FP8FwdTensors, "pytorch/constants.py:120-126"),
    ("FP8BwdTensors", FP8BwdTensors, "pytorch/constants.py:129-134"),
    ("NVTE_QKV_Layout", NVTE_QKV_Layout, "pytorch/cpp_extensions/fused_attn.py:13,50-77"),
    ("NVTE_QKV_Format", NVTE_QKV_Format, "pytorch/cpp_extensions/fused_attn.py:14,38-48"),
    ("NVTE_Bias_Type", NVTE_Bias_Type, "pytorch/cpp_extensions/fused_attn.py:15,79-84"),
    ("NVTE_Mask_Type", NVTE_Mask_Type, "pytorch/cpp_extensions/fused_attn.py:16,86-93"),
    ("NVTE_Softmax_Type", NVTE_Softmax_Type, "pytorch/cpp_extensions/fused_attn.py:17,95-99"),
    ("NVTE_Fused_Attn_Backend", NVTE_Fused_Attn_Backend,
     "pytorch/cpp_extensions/fused_attn.py:18,122-124,158 (member set asserted)"),
    ("NVTEScalingMode", NVTEScalingMode,
     "2.20.2 pytorch/attention/dot_product_attention/utils.py:374"),
    ("fused_attn_fwd", _fused_attn_fwd, "pytorch/cpp_extensions/fused_attn.py:367"),
    ("fused_attn_bwd", _fused_attn_bwd, "pytorch/cpp_extensions/fused_attn.py:618"),
    ("copy_to_kv_cache", _copy_to_kv_cache,
     "pytorch/attention/custom_ops.py:39 (InferenceParams.step's copy_to_kv_cache op)"),
    ("get_fused_attn_backend", _get_fused_attn_backend,
     "pytorch/attention/dot_product_attention/utils.py:380 (2.20.2: 452), DPA's selection"),
    ("quantize", _quantize,
     "pytorch/tensor/float8_tensor.py:116,125,307,316 (cast.cpp quantize)"),
    ("get_cudnn_version", _get_cudnn_version,
     "pytorch/utils.py:671 (2.20.2: 783) as cpp_extensions' (it star-imports tex: in "
     "__all__); from context_parallel.py 2.19.0:1850,5598 / 2.20.2:5702"),
] + [(n, _thd(n), "context_parallel.py: TE's CP with THD (tools/te/fattn_te/thd.py)")
     for n in ("thd_read_half_tensor", "thd_second_half_lse_correction",
               "thd_read_second_half_lse", "thd_out_correction", "thd_grad_correction",
               "thd_get_partitioned_indices", "thd_sequence_order_to_cp_rank_order",
               "thd_cp_rank_order_to_sequence_order",
               "thd_copy_valid_tokens_from_per_split_to_rank_local")] + [
    ("multi_tensor_scale", _U, "pytorch/tensor/utils.py:11"),
    ("multi_tensor_compute_scale_and_scale_inv", _U, "pytorch/tensor/utils.py:11"),
    ("multi_tensor_compute_scale_inv_e8m0", _U, "pytorch/tensor/utils.py:11"),
    ("multi_tensor_scale_tensor", _U, "pytorch/optimizers/__init__.py:6"),
    ("multi_tensor_l2norm", _U, "pytorch/optimizers/__init__.py:6"),
    ("multi_tensor_unscale_l2norm", _U, "pytorch/optimizers/__init__.py:6"),
    ("multi_tensor_adam", _U, "pytorch/optimizers/__init__.py:6"),
    ("multi_tensor_adam_fp8", _U, "pytorch/optimizers/__init__.py:6"),
    ("multi_tensor_adam_capturable", _U, "pytorch/optimizers/__init__.py:6"),
    ("multi_tensor_adam_capturable_master", _U, "pytorch/optimizers/__init__.py:6"),
    ("multi_tensor_sgd", _U, "pytorch/optimizers/__init__.py:6"),
    ("CommOverlap", _U, "pytorch/cpp_extensions/gemm.py:206 (2.20.2: 207)"),
    ("CommOverlapP2P", _U, "pytorch/cpp_extensions/gemm.py:206 (2.20.2: 207)"),
    ("CommOverlapType", _U, "pytorch/cpp_extensions/gemm.py:207 (2.20.2: 208)"),
    ("FP8TensorMeta", _U, "pytorch/ops/_common.py:13"),
    ("layernorm_bwd", _U, "pytorch/ops/basic/layer_norm.py:15"),
    ("layernorm_fwd", _U, "pytorch/ops/basic/layer_norm.py:15"),
    ("rmsnorm_bwd", _U, "pytorch/ops/basic/rmsnorm.py:15"),
    ("rmsnorm_fwd", _U, "pytorch/ops/basic/rmsnorm.py:15"),
    ("dbias_dgelu", _U, "pytorch/ops/fused/backward_activation_bias.py:28"),
    ("dbias_drelu", _U, "pytorch/ops/fused/backward_activation_bias.py:28"),
    ("bulk_overlap_ag_with_external_gemm", _U,
     "pytorch/ops/fused/userbuffers_backward_linear.py:13"),
]


def make_module():
    """A fresh transformer_engine_torch module object holding NAMES."""
    m = types.ModuleType("transformer_engine_torch")
    # cpp_extensions/__init__.py:6 does `from transformer_engine_torch import *`;
    # only what TE reads as cpp_extensions' own leaks through it.
    m.__all__ = ["get_cudnn_version"]
    for name, value, _where in NAMES:
        setattr(m, name, Unavailable(name) if value is _U else value)
    return m
