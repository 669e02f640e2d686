"""fattn's transformer_engine_torch: TE's C++ extension (tex) replaced by
TE's enums with TE's values, the names the import chain needs,
fused_attn_fwd / fused_attn_bwd on fattn's engines (f16 and FP8) and the
per-tensor FP8 cast TE's quantizers call (quantize)."""
import enum
import types


def _enum(name, members):
    return enum.IntEnum(name, members)


# transformer_engine/common/include/transformer_engine/transformer_engine.h,
# enum class DType (the pybind enum exports the members below).
DType = _enum("DType", [("kByte", 0), ("kInt32", 2), ("kFloat32", 4), ("kFloat16", 5),
                        ("kBFloat16", 6), ("kFloat8E4M3", 7), ("kFloat8E5M2", 8),
                        ("kFloat4E2M1", 10)])


_LAYOUTS = ["SB3HD", "SBH3D", "SBHD_SB2HD", "SBHD_SBH2D", "SBHD_SBHD_SBHD", "BS3HD", "BSH3D",
            "BSHD_BS2HD", "BSHD_BSH2D", "BSHD_BSHD_BSHD", "T3HD", "TH3D", "THD_T2HD",
            "THD_TH2D", "THD_THD_THD", "SBHD_BSHD_BSHD", "BSHD_SBHD_SBHD", "THD_BSHD_BSHD",
            "THD_SBHD_SBHD", "Paged_KV_BSHD_BSHD_BSHD", "Paged_KV_BSHD_SBHD_SBHD",
            "Paged_KV_SBHD_BSHD_BSHD", "Paged_KV_SBHD_SBHD_SBHD", "Paged_KV_THD_BSHD_BSHD",
            "Paged_KV_THD_SBHD_SBHD", "BHSD_BHSD_BHSD", "QKV_Layout_NOT_SET"]
# fused_attn.h's enums, as fattn's lib/include/fattn/te.h mirrors them.
NVTE_QKV_Layout = _enum("NVTE_QKV_Layout", [("NVTE_" + n, i) for i, n in enumerate(_LAYOUTS)])
NVTE_QKV_Format = _enum("NVTE_QKV_Format", [
    ("NVTE_SBHD", 0), ("NVTE_BSHD", 1), ("NVTE_THD", 2), ("NVTE_BSHD_2SBHD", 3),
    ("NVTE_SBHD_2BSHD", 4), ("NVTE_THD_2BSHD", 5), ("NVTE_THD_2SBHD", 6), ("NVTE_BHSD", 7),
    ("NVTE_QKV_Format_NOT_SET", 8)])
NVTE_Bias_Type = _enum("NVTE_Bias_Type", [
    ("NVTE_NO_BIAS", 0), ("NVTE_PRE_SCALE_BIAS", 1), ("NVTE_POST_SCALE_BIAS", 2),
    ("NVTE_ALIBI", 3)])
NVTE_Mask_Type = _enum("NVTE_Mask_Type", [
    ("NVTE_NO_MASK", 0), ("NVTE_PADDING_MASK", 1), ("NVTE_CAUSAL_MASK", 2),
    ("NVTE_PADDING_CAUSAL_MASK", 3), ("NVTE_CAUSAL_BOTTOM_RIGHT_MASK", 4),
    ("NVTE_PADDING_CAUSAL_BOTTOM_RIGHT_MASK", 5)])
NVTE_Softmax_Type = _enum("NVTE_Softmax_Type", [
    ("NVTE_VANILLA_SOFTMAX", 0), ("NVTE_OFF_BY_ONE_SOFTMAX", 1), ("NVTE_LEARNABLE_SOFTMAX", 2)])
NVTE_Fused_Attn_Backend = _enum("NVTE_Fused_Attn_Backend", [
    ("NVTE_No_Backend", -1), ("NVTE_F16_arbitrary_seqlen", 1), ("NVTE_FP8", 2)])


# transformer_engine.h's FP8 meta indices (pybind FP8FwdTensors / FP8BwdTensors).
FP8FwdTensors = _enum("FP8FwdTensors", [
    ("GEMM1_INPUT", 0), ("GEMM1_WEIGHT", 1), ("GEMM1_OUTPUT", 2), ("GEMM2_INPUT", 3),
    ("GEMM2_WEIGHT", 4), ("GEMM2_OUTPUT", 5), ("GEMM3_INPUT", 6), ("GEMM3_WEIGHT", 7),
    ("GEMM3_OUTPUT", 8)])
FP8BwdTensors = _enum("FP8BwdTensors", [
    ("GRAD_OUTPUT1", 0), ("GRAD_INPUT1", 1), ("GRAD_OUTPUT2", 2), ("GRAD_INPUT2", 3),
    ("GRAD_OUTPUT3", 4), ("GRAD_INPUT3", 5)])
# transformer_engine.h's NVTEScalingMode (only dataclass defaults on the
# f16 path read it).
NVTEScalingMode = _enum("NVTEScalingMode", [
    ("NVTE_DELAYED_TENSOR_SCALING", 0), ("NVTE_MXFP8_1D_SCALING", 1),
    ("NVTE_BLOCK_SCALING_1D", 2), ("NVTE_BLOCK_SCALING_2D", 3), ("NVTE_NVFP4_1D_SCALING", 4),
    ("NVTE_INVALID_SCALING", 100)])


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
    from . import bridge
    return bridge.fused_attn_fwd(*args)


def _fused_attn_bwd(*args):
    from . import bridge
    return bridge.fused_attn_bwd(*args)


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
