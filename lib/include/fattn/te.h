/* fattn/te.h — TransformerEngine's fused-attention enums, with their names.
 *
 * Values and names mirror transformer_engine/common/include/transformer_engine/
 * fused_attn.h (NVTE_QKV_Layout, NVTE_QKV_Layout_Group, NVTE_QKV_Format,
 * NVTE_Bias_Type, NVTE_Mask_Type, NVTE_Softmax_Type, NVTE_Fused_Attn_Backend)
 * and the Python strings of transformer_engine/pytorch/cpp_extensions/
 * fused_attn.py. Layout names are the lower-case Python strings
 * ("sb3hd", "thd_thd_thd", "paged_kv_bshd_bshd_bshd").
 */
#ifndef FATTN_TE_H
#define FATTN_TE_H

#include "fattn/api.h"

#include <stdbool.h>
#include <stdint.h>

#include "fattn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fattn_qkv_layout {
    FATTN_LAYOUT_SB3HD = 0,
    FATTN_LAYOUT_SBH3D = 1,
    FATTN_LAYOUT_SBHD_SB2HD = 2,
    FATTN_LAYOUT_SBHD_SBH2D = 3,
    FATTN_LAYOUT_SBHD_SBHD_SBHD = 4,
    FATTN_LAYOUT_BS3HD = 5,
    FATTN_LAYOUT_BSH3D = 6,
    FATTN_LAYOUT_BSHD_BS2HD = 7,
    FATTN_LAYOUT_BSHD_BSH2D = 8,
    FATTN_LAYOUT_BSHD_BSHD_BSHD = 9,
    FATTN_LAYOUT_T3HD = 10,
    FATTN_LAYOUT_TH3D = 11,
    FATTN_LAYOUT_THD_T2HD = 12,
    FATTN_LAYOUT_THD_TH2D = 13,
    FATTN_LAYOUT_THD_THD_THD = 14,
    FATTN_LAYOUT_SBHD_BSHD_BSHD = 15,
    FATTN_LAYOUT_BSHD_SBHD_SBHD = 16,
    FATTN_LAYOUT_THD_BSHD_BSHD = 17,
    FATTN_LAYOUT_THD_SBHD_SBHD = 18,
    FATTN_LAYOUT_PAGED_KV_BSHD_BSHD_BSHD = 19,
    FATTN_LAYOUT_PAGED_KV_BSHD_SBHD_SBHD = 20,
    FATTN_LAYOUT_PAGED_KV_SBHD_BSHD_BSHD = 21,
    FATTN_LAYOUT_PAGED_KV_SBHD_SBHD_SBHD = 22,
    FATTN_LAYOUT_PAGED_KV_THD_BSHD_BSHD = 23,
    FATTN_LAYOUT_PAGED_KV_THD_SBHD_SBHD = 24,
    FATTN_LAYOUT_BHSD_BHSD_BHSD = 25,
    FATTN_LAYOUT_NOT_SET = 26
} fattn_qkv_layout;

#define FATTN_LAYOUT_COUNT 26

typedef enum fattn_qkv_layout_group {
    FATTN_LAYOUT_GROUP_3HD = 0,
    FATTN_LAYOUT_GROUP_H3D = 1,
    FATTN_LAYOUT_GROUP_HD_2HD = 2,
    FATTN_LAYOUT_GROUP_HD_H2D = 3,
    FATTN_LAYOUT_GROUP_HD_HD_HD = 4,
    FATTN_LAYOUT_GROUP_PAGED_KV_HD_HD_HD = 5,
    FATTN_LAYOUT_GROUP_SD_SD_SD = 6,
    FATTN_LAYOUT_GROUP_NOT_SET = 7
} fattn_qkv_layout_group;

typedef enum fattn_qkv_format {
    FATTN_FORMAT_SBHD = 0,
    FATTN_FORMAT_BSHD = 1,
    FATTN_FORMAT_THD = 2,
    FATTN_FORMAT_BSHD_2SBHD = 3,
    FATTN_FORMAT_SBHD_2BSHD = 4,
    FATTN_FORMAT_THD_2BSHD = 5,
    FATTN_FORMAT_THD_2SBHD = 6,
    FATTN_FORMAT_BHSD = 7,
    FATTN_FORMAT_NOT_SET = 8
} fattn_qkv_format;

typedef enum fattn_bias_type {
    FATTN_BIAS_NO_BIAS = 0,
    FATTN_BIAS_PRE_SCALE_BIAS = 1,
    FATTN_BIAS_POST_SCALE_BIAS = 2,
    FATTN_BIAS_ALIBI = 3
} fattn_bias_type;

typedef enum fattn_mask_type {
    FATTN_MASK_NO_MASK = 0,
    FATTN_MASK_PADDING = 1,
    FATTN_MASK_CAUSAL = 2,
    FATTN_MASK_PADDING_CAUSAL = 3,
    FATTN_MASK_CAUSAL_BOTTOM_RIGHT = 4,
    FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT = 5
} fattn_mask_type;

typedef enum fattn_softmax_type {
    FATTN_SOFTMAX_VANILLA = 0,
    FATTN_SOFTMAX_OFF_BY_ONE = 1,
    FATTN_SOFTMAX_LEARNABLE = 2
} fattn_softmax_type;

/* TE's NVTE_Fused_Attn_Backend: data the front ends carry, not fattn's
 * engine choice (cpu|cudnn). */
typedef enum fattn_te_backend {
    FATTN_TE_BACKEND_NO_BACKEND = -1,
    FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN = 1,
    FATTN_TE_BACKEND_FP8 = 2
} fattn_te_backend;

/* Names both ways. *_name returns NULL for a value outside the enum and
 * for the *_NOT_SET values (TE has no string for them);
 * *_parse returns FATTN_E_PARSE (with a message listing the valid names)
 * for an unknown string. */
FATTN_API const char *fattn_layout_name(fattn_qkv_layout l);
FATTN_API fattn_status fattn_layout_parse(const char *s, fattn_qkv_layout *out);
FATTN_API const char *fattn_layout_group_name(fattn_qkv_layout_group g);
FATTN_API const char *fattn_format_name(fattn_qkv_format f);
FATTN_API fattn_status fattn_format_parse(const char *s, fattn_qkv_format *out);
FATTN_API const char *fattn_bias_type_name(fattn_bias_type t);
FATTN_API fattn_status fattn_bias_type_parse(const char *s, fattn_bias_type *out);
FATTN_API const char *fattn_mask_type_name(fattn_mask_type t);
FATTN_API fattn_status fattn_mask_type_parse(const char *s, fattn_mask_type *out);
FATTN_API const char *fattn_softmax_type_name(fattn_softmax_type t);
FATTN_API fattn_status fattn_softmax_type_parse(const char *s, fattn_softmax_type *out);
FATTN_API const char *fattn_te_backend_name(fattn_te_backend b);
FATTN_API fattn_status fattn_te_backend_parse(const char *s, fattn_te_backend *out);

/* Layout queries, as TE's nvte_get_qkv_layout_group, nvte_get_qkv_format,
 * nvte_get_q_format and nvte_get_kv_format. */
FATTN_API fattn_qkv_layout_group fattn_layout_group(fattn_qkv_layout l);
FATTN_API fattn_qkv_format fattn_layout_format(fattn_qkv_layout l);
FATTN_API fattn_qkv_format fattn_layout_q_format(fattn_qkv_layout l);
FATTN_API fattn_qkv_format fattn_layout_kv_format(fattn_qkv_layout l);
FATTN_API bool fattn_layout_is_paged(fattn_qkv_layout l);

/* The logical shape of a tensor in a plain format (sbhd [s,b,h,d], bshd
 * [b,s,h,d], bhsd [b,h,s,d], thd [t,h,d]); returns the rank (4, or 3 for
 * thd, which uses t instead of b and s). */
FATTN_API int fattn_format_shape(fattn_qkv_format f, int64_t b, int64_t s, int64_t t, int64_t heads,
                                 int64_t dim, int64_t shape[4]);

/* Mask predicates. */
FATTN_API bool fattn_mask_has_padding(fattn_mask_type m);
FATTN_API bool fattn_mask_has_causal(fattn_mask_type m);
FATTN_API bool fattn_mask_is_bottom_right(fattn_mask_type m);

/* TE's check_set_window_size (dot_product_attention/utils.py).
 * `in` is the caller's window; `in_set` false means TE's None.
 * causal-type masks: None -> (-1,0); (-1,-1) or (>=0, !=0) -> (left, 0)
 *   (TE warns); anything else other than (-1,0)/(>=0,0) -> FATTN_E_INVALID_CASE.
 * no_mask/padding: None -> (-1,-1); (-1,0) -> (-1,-1) (TE warns); any
 *   negative other than (-1,-1) -> FATTN_E_INVALID_CASE.
 * `*warned` (may be NULL) is set when TE would have warned. */
FATTN_API fattn_status fattn_window_normalize(fattn_mask_type mask, bool in_set,
                                              const int64_t in[2], int64_t out[2],
                                              bool *warned);

/* The right bound of the diagonal band a fused_attn_fwd/bwd call runs with
 * (-1: none), as TE's C++ builds it from the mask type and the window's
 * right element `win_right`: the window's when it is not -1, else 0 for a
 * mask that sets cuDNN's causal flag, else none. So a causal mask is
 * causal with a (-1,-1) window too, as a direct fused_attn_fwd caller (TE's
 * context-parallel code) passes it. `fp8`: the FP8 kernel, whose causal
 * flag is the top-left masks' only. (The window of a call that came
 * through DotProductAttention is already normalised, so nothing changes
 * for it.) */
FATTN_API int64_t fattn_mask_band_right(fattn_mask_type mask, bool fp8, int64_t win_right);

/* bottom_right_diagonal when the caller passes None, at the two levels TE
 * defaults it: DotProductAttention (False for causal/padding_causal, True
 * otherwise) and fused_attn_fwd (True iff the mask is a *_bottom_right one). */
FATTN_API bool fattn_bottom_right_default_dpa(fattn_mask_type mask);
FATTN_API bool fattn_bottom_right_default_fwd(fattn_mask_type mask);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_TE_H */
