/* harness/model/case.h — the resolved model of one case: every value the harness
 * derives from a spec, in one struct (docs/cases.md "The resolved model").
 *
 * fh_case_resolve is pure: no I/O, no random tensors, nothing but the
 * struct and its four sequence tables (b and b + 1 entries, which is why it
 * allocates: b goes up to FH_SPEC_MAX_B). inputs.c builds the case's
 * tensors from it, the tests build their cases from it, and
 * `fattn cases --resolved --json` prints it for Python tools.
 *
 * What it resolves (the rules are those of inputs.h):
 *  - the layout's group and the q and kv formats; whether q and k/v share
 *    one token dimension (3hd, h3d);
 *  - the window through TE's check_set_window_size;
 *  - what FusedAttnFunc receives for attn_scale and bottom_right_diagonal
 *    (fh_case_attn_scale_arg / _bottom_right_diagonal_arg) and what the
 *    forward runs with: DotProductAttention resolves both (the default),
 *    a direct caller (raw_func_args) passes the spec's values, None for
 *    null, and fused_attn_fwd resolves None;
 *  - TE's default attn_scale (float)(1.0/sqrt((double)d_qk)), and
 *    dropout_p as the float32 the front ends get;
 *  - sequence lengths (the spec's lists, else drawn from the seed; the
 *    maximum without a padding mask), cu_seqlens, the padded offsets with
 *    THD gaps, and the THD token counts;
 *  - a paged case's K and V as page containers (bshd [num_pages, page_size,
 *    hg, d], sbhd [page_size, num_pages, hg, d], as TE's fused_attn.cpp
 *    reads them) and its int32 page tables [b, skv / page_size];
 *  - the logical shape of every tensor the case has: q k v page_table_k
 *    page_table_v attn_bias
 *    softmax_offset d_out (inputs), out (forward), dq dk dv d_bias
 *    d_softmax_offset (backward); a tensor the case does not have has
 *    present false.
 */
#ifndef FH_HARNESS_CASE_H
#define FH_HARNESS_CASE_H

#include <stdbool.h>
#include <stdint.h>

#include "fattn/dtype.h"
#include "fattn/status.h"
#include "fattn/te.h"
#include "fattn/tensor.h"

#include "spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor's logical shape and dtype, or present false. */
typedef struct fh_case_shape {
    bool present;
    fattn_dtype dtype;
    int ndim;
    int64_t shape[FATTN_MAX_DIMS];
} fh_case_shape;

/* The tensors of a case, in the order `fattn cases --resolved` lists them. */
#define FH_CASE_TENSORS(X)                                                     \
    X(q) X(k) X(v) X(page_table_k) X(page_table_v) X(attn_bias) X(softmax_offset) \
    X(d_out) X(out) X(dq) X(dk) X(dv) X(d_bias) X(d_softmax_offset)

typedef struct fh_case_tensors {
#define FH_CASE_FIELD(name) fh_case_shape name;
    FH_CASE_TENSORS(FH_CASE_FIELD)
#undef FH_CASE_FIELD
} fh_case_tensors;

typedef struct fh_case {
    const fh_spec *spec;           /* borrowed: the spec it was resolved from */
    fattn_qkv_layout_group layout_group;
    fattn_qkv_format q_format, kv_format;
    bool thd;                      /* q or kv in THD */
    bool padding;                  /* a padding mask or THD: padded cu_seqlens exist */
    bool self_packed;              /* 3hd/h3d: q, k, v share one token dimension */
    int64_t window[2];             /* what FusedAttnFunc gets (fh_case_window) */
    bool bottom_right_diagonal;    /* what the forward runs with */
    int bottom_right_diagonal_arg; /* what FusedAttnFunc gets: -1 None, 0, 1 */
    float attn_scale;              /* the spec's, else TE's default */
    float attn_scale_arg;          /* what FusedAttnFunc gets: NaN None */
    float dropout_p;               /* as the float32 the front ends get */
    int64_t t_q, t_kv;             /* THD token counts (0 for a non-THD side) */
    /* FP8 inputs (spec fp8.input_fp8): q, k, v are E4M3 Float8Tensors;
     * d_out is an E5M2 one where MultiheadAttention hands one (fp8_output
     * under delayed scaling, MHA19:937 = MHA20:967); dq, dk, dv come back
     * E5M2 from an FP8 backward without bf16_backward (backends.py's table,
     * docs/fp8-branches.md §8). */
    bool fp8_inputs, fp8_d_out, fp8_grads;
    /* Owned, b entries: the length of each sequence. */
    int64_t *seqlens_q, *seqlens_kv;
    /* Owned, b + 1 entries: prefix sums of the lengths (cu_seqlens), and
     * the token offsets with THD gaps (cu_seqlens_*_padded; equal to the
     * prefix sums for a non-THD side; recorded only when padding). */
    int64_t *cu_seqlens_q, *cu_seqlens_kv;
    int64_t *cu_seqlens_q_padded, *cu_seqlens_kv_padded;
    fh_case_tensors t;
} fh_case;

/* Resolve `spec` (parsed, so defaults are filled) into *out. The spec must
 * outlive *out. Errors: a window TE refuses (fattn_window_normalize's
 * status, the message naming the case); FATTN_E_INVALID_CASE for lengths outside
 * [0, sq] x [0, skv] or a THD tensor without tokens; FATTN_E_NOMEM. On
 * failure *out holds nothing to free (fh_case_free is still safe). */
fattn_status fh_case_resolve(const fh_spec *spec, fh_case *out);
/* What FusedAttnFunc receives from the harness for `spec`: the spec's
 * attn_scale, else TE's default (DotProductAttention's softmax_scale), or
 * NaN (None) under raw_func_args; bottom_right_diagonal as
 * DotProductAttention resolves it (dot_product_attention.py:2398-2406),
 * or under raw_func_args the spec's value, -1 (None) for null. */
float fh_case_attn_scale_arg(const fh_spec *spec);
/* The window FusedAttnFunc receives for `spec` into out: normalised as
 * DotProductAttention's check_set_window_size normalises it
 * (fattn_window_normalize, *warned where TE warns), or under raw_func_args
 * a window the spec sets as given (a direct caller's, e.g. (-1,-1) with a
 * causal mask, which TE's C++ runs causal: fattn_mask_band_right).
 * Errors: fattn_window_normalize's, the message naming the case and, for
 * FATTN_E_INVALID_CASE, the support rule window_mask. */
fattn_status fh_case_window(const fh_spec *spec, int64_t out[2], bool *warned);
int fh_case_bottom_right_diagonal_arg(const fh_spec *spec);

/* Free the sequence tables; *c becomes empty (NULL is fine). */
void fh_case_free(fh_case *c);

/* One case's resolved model as one line of JSON (an element of the array
 * docs/cases.md describes; no newline), malloc'd: the canonical spec's own
 * text and floats in the shortest round-trip form. So a long matrix is
 * printed a case at a time. */
fattn_status fh_case_json_line(const fh_spec *s, char **out);

/* The resolved model of the cases specs[0..n) as one JSON array (the
 * format docs/cases.md describes), malloc'd and NUL-terminated. */
fattn_status fh_case_list_json(const fh_spec *const *specs, size_t n, char **out);

#ifdef __cplusplus
}
#endif
#endif /* FH_HARNESS_CASE_H */
