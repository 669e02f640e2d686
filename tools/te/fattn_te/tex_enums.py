"""TE's enums with TE's values, as its C++ extension (transformer_engine_torch)
exports them: the shim hands them to TE's Python (shim.py), the hand-off
contract and the engine calls name layouts by them (contract.py,
calls.py)."""
import enum


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
