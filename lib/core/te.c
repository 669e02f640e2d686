/* TransformerEngine's fused-attention enums: names, layout queries, window
 * normalisation and the bottom_right_diagonal defaults.
 *
 * Sources (NVIDIA/TransformerEngine at d0067d0da6cb, see
 * /work/shared/reference/te-fused-attn.md §0):
 *   enum values   transformer_engine/common/include/transformer_engine/fused_attn.h
 *                 L29-163
 *   Python names  transformer_engine/pytorch/cpp_extensions/fused_attn.py
 *                 L38-99 (QKVFormat, QKVLayout, AttnBiasType, AttnMaskType,
 *                 SoftmaxType) and L102-121 (FusedAttnBackend member names)
 *   layout maps   transformer_engine/common/fused_attn/fused_attn.cpp
 *                 L100-226 (nvte_get_qkv_layout_group, nvte_get_qkv_format,
 *                 nvte_get_q_format, nvte_get_kv_format)
 * Every enum is one table below; the functions only search tables.
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "fattn/te.h"

/* ---- generic name tables ------------------------------------------------ */

typedef struct name_row {
    int value;
    const char *name;
} name_row;

static const char *row_name(const name_row *rows, size_t n, int value)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].value == value)
            return rows[i].name;
    return NULL;
}

static fattn_status row_parse(const name_row *rows, size_t n, const char *what,
                              const char *s, int *out)
{
    if (s) {
        for (size_t i = 0; i < n; i++) {
            if (strcmp(s, rows[i].name) == 0) {
                *out = rows[i].value;
                return FATTN_OK;
            }
        }
    }
    char list[768];
    size_t used = 0;
    list[0] = '\0';
    for (size_t i = 0; i < n && used < sizeof list; i++) {
        int k = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                         rows[i].name);
        if (k < 0)
            break;
        used += (size_t)k;
    }
    return fattn_error(FATTN_E_PARSE, "unknown %s \"%s\" (valid: %s)", what,
                       s ? s : "(null)", list);
}

#define ROWS(t) (sizeof(t) / sizeof((t)[0]))

/* ---- QKV layouts ---------------------------------------------------------- */

/* Name (fused_attn.py QKVLayout L50-77), group (fused_attn.cpp
 * nvte_get_qkv_layout_group L100-139) and format (fused_attn.cpp
 * nvte_get_qkv_format L142-182). Indexed by the enum value. */
typedef struct layout_row {
    fattn_qkv_layout layout;
    const char *name;
    fattn_qkv_layout_group group;
    fattn_qkv_format format;
} layout_row;

static const layout_row layout_table[] = {
    {FATTN_LAYOUT_SB3HD, "sb3hd", FATTN_LAYOUT_GROUP_3HD, FATTN_FORMAT_SBHD},
    {FATTN_LAYOUT_SBH3D, "sbh3d", FATTN_LAYOUT_GROUP_H3D, FATTN_FORMAT_SBHD},
    {FATTN_LAYOUT_SBHD_SB2HD, "sbhd_sb2hd", FATTN_LAYOUT_GROUP_HD_2HD, FATTN_FORMAT_SBHD},
    {FATTN_LAYOUT_SBHD_SBH2D, "sbhd_sbh2d", FATTN_LAYOUT_GROUP_HD_H2D, FATTN_FORMAT_SBHD},
    {FATTN_LAYOUT_SBHD_SBHD_SBHD, "sbhd_sbhd_sbhd", FATTN_LAYOUT_GROUP_HD_HD_HD,
     FATTN_FORMAT_SBHD},
    {FATTN_LAYOUT_BS3HD, "bs3hd", FATTN_LAYOUT_GROUP_3HD, FATTN_FORMAT_BSHD},
    {FATTN_LAYOUT_BSH3D, "bsh3d", FATTN_LAYOUT_GROUP_H3D, FATTN_FORMAT_BSHD},
    {FATTN_LAYOUT_BSHD_BS2HD, "bshd_bs2hd", FATTN_LAYOUT_GROUP_HD_2HD, FATTN_FORMAT_BSHD},
    {FATTN_LAYOUT_BSHD_BSH2D, "bshd_bsh2d", FATTN_LAYOUT_GROUP_HD_H2D, FATTN_FORMAT_BSHD},
    {FATTN_LAYOUT_BSHD_BSHD_BSHD, "bshd_bshd_bshd", FATTN_LAYOUT_GROUP_HD_HD_HD,
     FATTN_FORMAT_BSHD},
    {FATTN_LAYOUT_T3HD, "t3hd", FATTN_LAYOUT_GROUP_3HD, FATTN_FORMAT_THD},
    {FATTN_LAYOUT_TH3D, "th3d", FATTN_LAYOUT_GROUP_H3D, FATTN_FORMAT_THD},
    {FATTN_LAYOUT_THD_T2HD, "thd_t2hd", FATTN_LAYOUT_GROUP_HD_2HD, FATTN_FORMAT_THD},
    {FATTN_LAYOUT_THD_TH2D, "thd_th2d", FATTN_LAYOUT_GROUP_HD_H2D, FATTN_FORMAT_THD},
    {FATTN_LAYOUT_THD_THD_THD, "thd_thd_thd", FATTN_LAYOUT_GROUP_HD_HD_HD, FATTN_FORMAT_THD},
    {FATTN_LAYOUT_SBHD_BSHD_BSHD, "sbhd_bshd_bshd", FATTN_LAYOUT_GROUP_HD_HD_HD,
     FATTN_FORMAT_SBHD_2BSHD},
    {FATTN_LAYOUT_BSHD_SBHD_SBHD, "bshd_sbhd_sbhd", FATTN_LAYOUT_GROUP_HD_HD_HD,
     FATTN_FORMAT_BSHD_2SBHD},
    {FATTN_LAYOUT_THD_BSHD_BSHD, "thd_bshd_bshd", FATTN_LAYOUT_GROUP_HD_HD_HD,
     FATTN_FORMAT_THD_2BSHD},
    {FATTN_LAYOUT_THD_SBHD_SBHD, "thd_sbhd_sbhd", FATTN_LAYOUT_GROUP_HD_HD_HD,
     FATTN_FORMAT_THD_2SBHD},
    {FATTN_LAYOUT_PAGED_KV_BSHD_BSHD_BSHD, "paged_kv_bshd_bshd_bshd",
     FATTN_LAYOUT_GROUP_PAGED_KV_HD_HD_HD, FATTN_FORMAT_BSHD},
    {FATTN_LAYOUT_PAGED_KV_BSHD_SBHD_SBHD, "paged_kv_bshd_sbhd_sbhd",
     FATTN_LAYOUT_GROUP_PAGED_KV_HD_HD_HD, FATTN_FORMAT_BSHD_2SBHD},
    {FATTN_LAYOUT_PAGED_KV_SBHD_BSHD_BSHD, "paged_kv_sbhd_bshd_bshd",
     FATTN_LAYOUT_GROUP_PAGED_KV_HD_HD_HD, FATTN_FORMAT_SBHD_2BSHD},
    {FATTN_LAYOUT_PAGED_KV_SBHD_SBHD_SBHD, "paged_kv_sbhd_sbhd_sbhd",
     FATTN_LAYOUT_GROUP_PAGED_KV_HD_HD_HD, FATTN_FORMAT_SBHD},
    {FATTN_LAYOUT_PAGED_KV_THD_BSHD_BSHD, "paged_kv_thd_bshd_bshd",
     FATTN_LAYOUT_GROUP_PAGED_KV_HD_HD_HD, FATTN_FORMAT_THD_2BSHD},
    {FATTN_LAYOUT_PAGED_KV_THD_SBHD_SBHD, "paged_kv_thd_sbhd_sbhd",
     FATTN_LAYOUT_GROUP_PAGED_KV_HD_HD_HD, FATTN_FORMAT_THD_2SBHD},
    {FATTN_LAYOUT_BHSD_BHSD_BHSD, "bhsd_bhsd_bhsd", FATTN_LAYOUT_GROUP_SD_SD_SD,
     FATTN_FORMAT_BHSD},
};
_Static_assert(ROWS(layout_table) == FATTN_LAYOUT_COUNT, "a row per layout, in enum order");

static const layout_row *layout_find(fattn_qkv_layout l)
{
    if ((int)l < 0 || (int)l >= FATTN_LAYOUT_COUNT)
        return NULL;
    /* the table is indexed by the enum value: each row at its own place */
    assert(layout_table[(int)l].layout == l);
    return &layout_table[(int)l];
}

/* NOT_SET has no Python string, so it has no name here either. */
const char *fattn_layout_name(fattn_qkv_layout l)
{
    const layout_row *r = layout_find(l);
    return r ? r->name : NULL;
}

fattn_status fattn_layout_parse(const char *s, fattn_qkv_layout *out)
{
    for (int i = 0; s && i < FATTN_LAYOUT_COUNT; i++) {
        if (strcmp(s, layout_table[i].name) == 0) {
            *out = layout_table[i].layout;
            return FATTN_OK;
        }
    }
    name_row rows[FATTN_LAYOUT_COUNT];
    for (int i = 0; i < FATTN_LAYOUT_COUNT; i++) {
        rows[i].value = (int)layout_table[i].layout;
        rows[i].name = layout_table[i].name;
    }
    int dummy = 0;
    return row_parse(rows, ROWS(rows), "qkv_layout", s, &dummy);
}

fattn_qkv_layout_group fattn_layout_group(fattn_qkv_layout l)
{
    const layout_row *r = layout_find(l);
    return r ? r->group : FATTN_LAYOUT_GROUP_NOT_SET;
}

fattn_qkv_format fattn_layout_format(fattn_qkv_layout l)
{
    const layout_row *r = layout_find(l);
    return r ? r->format : FATTN_FORMAT_NOT_SET;
}

bool fattn_layout_is_paged(fattn_qkv_layout l)
{
    return fattn_layout_group(l) == FATTN_LAYOUT_GROUP_PAGED_KV_HD_HD_HD;
}

/* Group names: TE has no Python strings for groups; these are the lower-case
 * enumerator names of NVTE_QKV_Layout_Group (fused_attn.h L62-77). */
static const name_row group_names[] = {
    {FATTN_LAYOUT_GROUP_3HD, "3hd"},
    {FATTN_LAYOUT_GROUP_H3D, "h3d"},
    {FATTN_LAYOUT_GROUP_HD_2HD, "hd_2hd"},
    {FATTN_LAYOUT_GROUP_HD_H2D, "hd_h2d"},
    {FATTN_LAYOUT_GROUP_HD_HD_HD, "hd_hd_hd"},
    {FATTN_LAYOUT_GROUP_PAGED_KV_HD_HD_HD, "paged_kv_hd_hd_hd"},
    {FATTN_LAYOUT_GROUP_SD_SD_SD, "sd_sd_sd"},
};
_Static_assert(ROWS(group_names) == FATTN_LAYOUT_GROUP_NOT_SET, "a name per layout group");

const char *fattn_layout_group_name(fattn_qkv_layout_group g)
{
    return row_name(group_names, ROWS(group_names), (int)g);
}

/* ---- QKV formats ---------------------------------------------------------------- */

/* Name (fused_attn.py QKVFormat L38-48), q format (fused_attn.cpp
 * nvte_get_q_format L185-204) and kv format (nvte_get_kv_format L207-226). */
typedef struct format_row {
    fattn_qkv_format format;
    const char *name;
    fattn_qkv_format q;
    fattn_qkv_format kv;
} format_row;

static const format_row format_table[] = {
    {FATTN_FORMAT_SBHD, "sbhd", FATTN_FORMAT_SBHD, FATTN_FORMAT_SBHD},
    {FATTN_FORMAT_BSHD, "bshd", FATTN_FORMAT_BSHD, FATTN_FORMAT_BSHD},
    {FATTN_FORMAT_THD, "thd", FATTN_FORMAT_THD, FATTN_FORMAT_THD},
    {FATTN_FORMAT_BSHD_2SBHD, "bshd_2sbhd", FATTN_FORMAT_BSHD, FATTN_FORMAT_SBHD},
    {FATTN_FORMAT_SBHD_2BSHD, "sbhd_2bshd", FATTN_FORMAT_SBHD, FATTN_FORMAT_BSHD},
    {FATTN_FORMAT_THD_2BSHD, "thd_2bshd", FATTN_FORMAT_THD, FATTN_FORMAT_BSHD},
    {FATTN_FORMAT_THD_2SBHD, "thd_2sbhd", FATTN_FORMAT_THD, FATTN_FORMAT_SBHD},
    {FATTN_FORMAT_BHSD, "bhsd", FATTN_FORMAT_BHSD, FATTN_FORMAT_BHSD},
};
_Static_assert(ROWS(format_table) == FATTN_FORMAT_NOT_SET, "a row per format");

static const format_row *format_find(fattn_qkv_format f)
{
    for (size_t i = 0; i < ROWS(format_table); i++)
        if (format_table[i].format == f)
            return &format_table[i];
    return NULL;
}

const char *fattn_format_name(fattn_qkv_format f)
{
    const format_row *r = format_find(f);
    return r ? r->name : NULL;
}

fattn_status fattn_format_parse(const char *s, fattn_qkv_format *out)
{
    name_row rows[ROWS(format_table)];
    for (size_t i = 0; i < ROWS(format_table); i++) {
        rows[i].value = (int)format_table[i].format;
        rows[i].name = format_table[i].name;
    }
    int v = 0;
    fattn_status st = row_parse(rows, ROWS(rows), "qkv_format", s, &v);
    if (st != FATTN_OK)
        return st;
    *out = (fattn_qkv_format)v;
    return FATTN_OK;
}

fattn_qkv_format fattn_layout_q_format(fattn_qkv_layout l)
{
    const format_row *r = format_find(fattn_layout_format(l));
    return r ? r->q : FATTN_FORMAT_NOT_SET;
}

fattn_qkv_format fattn_layout_kv_format(fattn_qkv_layout l)
{
    const format_row *r = format_find(fattn_layout_format(l));
    return r ? r->kv : FATTN_FORMAT_NOT_SET;
}

/* ---- bias, softmax, backend ------------------------------------------------ */

/* fused_attn.py AttnBiasType L79-84. */
static const name_row bias_names[] = {
    {FATTN_BIAS_NO_BIAS, "no_bias"},
    {FATTN_BIAS_PRE_SCALE_BIAS, "pre_scale_bias"},
    {FATTN_BIAS_POST_SCALE_BIAS, "post_scale_bias"},
    {FATTN_BIAS_ALIBI, "alibi"},
};
_Static_assert(ROWS(bias_names) == FATTN_BIAS_ALIBI + 1, "a name per bias type");

const char *fattn_bias_type_name(fattn_bias_type t)
{
    return row_name(bias_names, ROWS(bias_names), (int)t);
}

fattn_status fattn_bias_type_parse(const char *s, fattn_bias_type *out)
{
    int v = 0;
    fattn_status st = row_parse(bias_names, ROWS(bias_names), "attn_bias_type", s, &v);
    if (st != FATTN_OK)
        return st;
    *out = (fattn_bias_type)v;
    return FATTN_OK;
}

/* fused_attn.py SoftmaxType L95-99. */
static const name_row softmax_names[] = {
    {FATTN_SOFTMAX_VANILLA, "vanilla"},
    {FATTN_SOFTMAX_OFF_BY_ONE, "off-by-one"},
    {FATTN_SOFTMAX_LEARNABLE, "learnable"},
};
_Static_assert(ROWS(softmax_names) == FATTN_SOFTMAX_LEARNABLE + 1, "a name per softmax type");

const char *fattn_softmax_type_name(fattn_softmax_type t)
{
    return row_name(softmax_names, ROWS(softmax_names), (int)t);
}

fattn_status fattn_softmax_type_parse(const char *s, fattn_softmax_type *out)
{
    int v = 0;
    fattn_status st = row_parse(softmax_names, ROWS(softmax_names), "softmax_type", s, &v);
    if (st != FATTN_OK)
        return st;
    *out = (fattn_softmax_type)v;
    return FATTN_OK;
}

/* fused_attn.py class FusedAttnBackend L102-121 (member names). */
static const name_row backend_names[] = {
    {FATTN_TE_BACKEND_NO_BACKEND, "No_Backend"},
    {FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN, "F16_arbitrary_seqlen"},
    {FATTN_TE_BACKEND_FP8, "FP8"},
};
_Static_assert(ROWS(backend_names) == 3, "a name per backend: none, F16, FP8");

const char *fattn_te_backend_name(fattn_te_backend b)
{
    return row_name(backend_names, ROWS(backend_names), (int)b);
}

fattn_status fattn_te_backend_parse(const char *s, fattn_te_backend *out)
{
    int v = 0;
    fattn_status st = row_parse(backend_names, ROWS(backend_names), "fused_attn_backend", s, &v);
    if (st != FATTN_OK)
        return st;
    *out = (fattn_te_backend)v;
    return FATTN_OK;
}

/* ---- masks ----------------------------------------------------------------------- */

/* fused_attn.py AttnMaskType L86-93. `causal` is TE's `"causal" in
 * attn_mask_type` test (utils.py L2656); `bottom_right` the set
 * {"causal_bottom_right", "padding_causal_bottom_right"} used by
 * fused_attn.py L325-329 and dot_product_attention.py L1750-1753. */
typedef struct mask_row {
    fattn_mask_type mask;
    const char *name;
    bool padding;
    bool causal;
    bool bottom_right;
} mask_row;

static const mask_row mask_table[] = {
    {FATTN_MASK_NO_MASK, "no_mask", false, false, false},
    {FATTN_MASK_PADDING, "padding", true, false, false},
    {FATTN_MASK_CAUSAL, "causal", false, true, false},
    {FATTN_MASK_PADDING_CAUSAL, "padding_causal", true, true, false},
    {FATTN_MASK_CAUSAL_BOTTOM_RIGHT, "causal_bottom_right", false, true, true},
    {FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT, "padding_causal_bottom_right", true, true,
     true},
};
_Static_assert(ROWS(mask_table) == FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT + 1, "a row per mask");

static const mask_row *mask_find(fattn_mask_type m)
{
    for (size_t i = 0; i < ROWS(mask_table); i++)
        if (mask_table[i].mask == m)
            return &mask_table[i];
    return NULL;
}

const char *fattn_mask_type_name(fattn_mask_type t)
{
    const mask_row *r = mask_find(t);
    return r ? r->name : NULL;
}

fattn_status fattn_mask_type_parse(const char *s, fattn_mask_type *out)
{
    name_row rows[ROWS(mask_table)];
    for (size_t i = 0; i < ROWS(mask_table); i++) {
        rows[i].value = (int)mask_table[i].mask;
        rows[i].name = mask_table[i].name;
    }
    int v = 0;
    fattn_status st = row_parse(rows, ROWS(rows), "attn_mask_type", s, &v);
    if (st != FATTN_OK)
        return st;
    *out = (fattn_mask_type)v;
    return FATTN_OK;
}

bool fattn_mask_has_padding(fattn_mask_type m)
{
    const mask_row *r = mask_find(m);
    return r && r->padding;
}

bool fattn_mask_has_causal(fattn_mask_type m)
{
    const mask_row *r = mask_find(m);
    return r && r->causal;
}

bool fattn_mask_is_bottom_right(fattn_mask_type m)
{
    const mask_row *r = mask_find(m);
    return r && r->bottom_right;
}

/* ---- window_size ------------------------------------------------------------------ */

/* TE's check_set_window_size, transformer_engine/pytorch/attention/
 * dot_product_attention/utils.py L2642-2684 at d0067d0. TE compares tuples,
 * so "(-1, -1)" below means both elements equal. TE's warnings.warn calls
 * become *warned; its `assert False` becomes FATTN_E_INVALID_CASE. */
fattn_status fattn_window_normalize(fattn_mask_type mask, bool in_set,
                                    const int64_t in[2], int64_t out[2],
                                    bool *warned)
{
    if (warned)
        *warned = false;
    const mask_row *r = mask_find(mask);
    if (!r) /* utils.py L2682-2683: assert False, "Invalid attn_mask_type" */
        return fattn_error(FATTN_E_INVALID_ARG, "invalid attn_mask_type %d", (int)mask);
    if (!out || (in_set && !in))
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_window_normalize: NULL window");

    if (r->causal) { /* utils.py L2656: "causal" in attn_mask_type */
        if (!in_set) { /* L2657-2658: None -> (-1, 0) */
            out[0] = -1;
            out[1] = 0;
            return FATTN_OK;
        }
        const int64_t w0 = in[0], w1 = in[1];
        if ((w0 == -1 && w1 == -1) || (w0 >= 0 && w1 != 0)) {
            /* L2659-2665: (-1,-1) or (>=0, !=0) -> (w0, 0), with a warning */
            out[0] = w0;
            out[1] = 0;
            if (warned)
                *warned = true;
            return FATTN_OK;
        }
        if (!(w0 == -1 && w1 == 0) && (w0 < 0 || w1 != 0)) {
            /* L2666-2669: assert False */
            return fattn_error(FATTN_E_INVALID_CASE,
                               "window_size should be (-1, 0) or (>=0, 0) for "
                               "attn_mask_type=%s (got (%lld, %lld))",
                               r->name, (long long)w0, (long long)w1);
        }
        /* (-1, 0) or (>=0, 0): unchanged */
        out[0] = w0;
        out[1] = w1;
        return FATTN_OK;
    }

    /* utils.py L2670: attn_mask_type in ["no_mask", "padding", "arbitrary"] */
    if (!in_set) { /* L2671-2672: None -> (-1, -1) */
        out[0] = -1;
        out[1] = -1;
        return FATTN_OK;
    }
    const int64_t w0 = in[0], w1 = in[1];
    if (w0 == -1 && w1 == 0) { /* L2673-2677: (-1, 0) -> (-1, -1), warning */
        out[0] = -1;
        out[1] = -1;
        if (warned)
            *warned = true;
        return FATTN_OK;
    }
    if (!(w0 == -1 && w1 == -1) && (w0 < 0 || w1 < 0)) { /* L2678-2681 */
        return fattn_error(FATTN_E_INVALID_CASE,
                           "window_size should be (-1, -1) or (>=0, >=0) for "
                           "attn_mask_type=%s (got (%lld, %lld))",
                           r->name, (long long)w0, (long long)w1);
    }
    out[0] = w0;
    out[1] = w1;
    return FATTN_OK;
}

/* ---- the band's right bound -------------------------------------------------------- */

/* fused_attn_f16_arbitrary_seqlen.cu at d0067d0 (release_v2.19 holds the
 * same file): is_causal / is_bottom_right from the mask type alone
 * (L68-71 forward, L660-663 backward), handed to cudnn-frontend's
 * set_causal_mask / set_causal_mask_bottom_right (L303-304, L889-890),
 * which set a right bound of 0 where none is set yet (cudnn-frontend 1.18
 * graph_properties.h L1800-1823, L2092-2115); then the window's right
 * element replaces it unless it is -1 (L314-316, L908-910). The FP8 kernel
 * (fused_attn_fp8.cu L36-37, L519-520) sets the causal flag for causal and
 * padding_causal only (L256, L843), and the window's right bound the same
 * way (L268-270, L855-857). The bottom-right collapse (L75-79: a
 * bottom-right mask with s_q == s_kv and no padding becomes top-left) moves
 * the diagonal, not the bound. */
int64_t fattn_mask_band_right(fattn_mask_type mask, bool fp8, int64_t win_right)
{
    if (win_right != -1)
        return win_right;
    bool causal_flag = fp8 ? (mask == FATTN_MASK_CAUSAL || mask == FATTN_MASK_PADDING_CAUSAL)
                           : fattn_mask_has_causal(mask);
    return causal_flag ? 0 : -1;
}

/* ---- bottom_right_diagonal defaults ----------------------------------------------- */

/* DotProductAttention.forward, dot_product_attention.py L1746-1754 at d0067d0:
 * forced False for {"causal", "padding_causal"} (L1748-1749); True when still
 * None or the mask is a *_bottom_right one (L1750-1754). With the caller's
 * value None, that is: False for causal/padding_causal, True otherwise. */
bool fattn_bottom_right_default_dpa(fattn_mask_type mask)
{
    return !(mask == FATTN_MASK_CAUSAL || mask == FATTN_MASK_PADDING_CAUSAL);
}

/* fused_attn_fwd, cpp_extensions/fused_attn.py L325-329 at d0067d0 (and
 * fused_attn_bwd L591-595): None -> attn_mask_type in {"causal_bottom_right",
 * "padding_causal_bottom_right"}. */
bool fattn_bottom_right_default_fwd(fattn_mask_type mask)
{
    return fattn_mask_is_bottom_right(mask);
}

int fattn_format_shape(fattn_qkv_format f, int64_t b, int64_t s, int64_t t, int64_t heads,
                       int64_t dim, int64_t shape[4])
{
    switch (f) {
    case FATTN_FORMAT_SBHD:
        shape[0] = s; shape[1] = b; shape[2] = heads; shape[3] = dim;
        return 4;
    case FATTN_FORMAT_BHSD:
        shape[0] = b; shape[1] = heads; shape[2] = s; shape[3] = dim;
        return 4;
    case FATTN_FORMAT_THD:
        shape[0] = t; shape[1] = heads; shape[2] = dim;
        return 3;
    default:
        shape[0] = b; shape[1] = s; shape[2] = heads; shape[3] = dim;
        return 4;
    }
}
