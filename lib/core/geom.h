/* Engine-neutral geometry of one forward or backward call (not installed).
 *
 * The engine dispatch (core/engine.c) validates the parameters once into a
 * fattn_geom: sizes, per-batch lengths and token offsets, the views every
 * engine addresses through strides, and the scalars of the softmax. Every
 * engine reads and writes its host tensors through the offsets defined here,
 * after these checks; nothing is trusted: a bad cu_seqlens array is an
 * error, never an out-of-bounds access.
 */
#ifndef FATTN_CORE_GEOM_H
#define FATTN_CORE_GEOM_H

#include <stdbool.h>
#include <stdint.h>

#include "fattn/engine.h"

#define FATTN_GEOM_INLINE_B 64  /* batches whose length/offset tables need no allocation */
#define FATTN_GEOM_INLINE_H 128 /* heads whose sink/ALiBi slopes need none */

struct fattn_geom {
    int64_t b, h, hg, group;   /* group = h / hg */
    int64_t sq, skv;           /* padded (max) lengths */
    int64_t d, dv;
    fattn_dtype io;
    fattn_qkv_format q_fmt, kv_fmt;
    int32_t *len_q, *len_kv;   /* [b] actual lengths */
    int32_t *off_q, *off_kv;   /* [b] THD token offsets (0 otherwise) */
    /* views (element offsets through strides) */
    fattn_tensor q, k, v, o;
    fattn_tensor bias;         /* empty unless post_scale_bias */
    float *sink;               /* [h] or NULL */
    bool alibi;
    float *alibi_slopes;       /* [h] when alibi */
    float scale;
    float dropout;             /* 0 when not applied */
    uint64_t rng_seed, rng_offset;
    int64_t win_left;          /* the window's left element (-1: none) */
    int64_t win_right;         /* the band's right bound (-1: none): the window's, or 0 from
                                * a causal mask (fattn_mask_band_right) */
    bool bottom_right;
    bool thd_stats;            /* Stats ragged [t_q,h,1] */
    int64_t t_q;               /* tokens of a THD Q */
    /* Paged K/V (a paged_kv_* layout): k and v are page containers, bshd
     * [pages, page, hg, d] or sbhd [page, pages, hg, d] as kv_fmt says, and
     * key position j of batch bi lies in page pt[bi][j / page] at row
     * j % page. Every table entry a length reaches was checked to name a
     * page of its container. */
    bool paged;
    fattn_tensor pt_k, pt_v;   /* int32 [b, pages_per_seq] */
    int64_t page_k, page_v;    /* page sizes */
    /* Where the tables above live when b and h are small, so that a call
     * allocates nothing on the hot path of a plan-cache hit; larger ones
     * are allocated. Last, so that init and free need not clear them. */
    int32_t inline_seq[4 * FATTN_GEOM_INLINE_B];
    float inline_h[2 * FATTN_GEOM_INLINE_H];
};

/* What fattn__geom_init checks: the common part of forward and backward.
 * `o` is the O-shaped tensor to check against (O for forward and backward
 * alike); bias and softmax_offset are the inputs (forward) or the aux pack's
 * entries (backward). */
typedef struct fattn_geom_args {
    const fattn_tensor *q, *k, *v, *o;
    const fattn_tensor *bias, *softmax_offset;
    const fattn_tensor *cu_q, *cu_kv, *cu_q_pad, *cu_kv_pad;
    const fattn_tensor *rng_state;
    const fattn_tensor *page_table_k, *page_table_v; /* NULL or empty unless paged */
    int64_t max_seqlen_q, max_seqlen_kv;
    float attn_scale, dropout;
    bool apply_dropout;
    fattn_qkv_layout layout;
    fattn_qkv_format o_format;
    fattn_bias_type bias_type;
    fattn_mask_type mask_type;
    fattn_softmax_type softmax_type;
    int64_t win_left, win_right;
    bool bottom_right;
    bool fp8;        /* an FP8 call: Q/K/V FP8, O FP8 or float16/bfloat16 */
    const char *who; /* "forward" / "backward", for messages */
} fattn_geom_args;

/* Validate and fill g; on failure g holds nothing to free. Otherwise the
 * caller frees with fattn__geom_free. */
fattn_status fattn__geom_init(fattn_geom *g, const fattn_geom_args *a);

/* The dispatch's geometry of a forward / backward call (core/engine.c: the
 * arguments above from the params, the host-metadata check, fattn__geom_init;
 * the backward's Bias, SoftmaxOffset and rng_state from its aux pack, whose
 * entry count is checked). What fattn_engine_fwd / _bwd hand the engine as
 * the call's geom; for tests and benchmarks that describe a call without
 * running it. `who` prefixes messages. Free with fattn__geom_free. */
fattn_status fattn__geom_init_fwd(fattn_geom *g, const fattn_fwd_params *p, const char *who);
fattn_status fattn__geom_init_bwd(fattn_geom *g, const fattn_bwd_params *p, const char *who);
void fattn__geom_free(fattn_geom *g);

/* Element offset of row (batch bi, position pos, head n) of a 4-D (or THD
 * 3-D) tensor in format fmt; the head-dim index adds strides[last]. off is
 * the THD token offset table ([b]), unused for the other formats. */
int64_t fattn__geom_row_offset(const fattn_tensor *t, fattn_qkv_format fmt,
                              const int32_t *off, int64_t bi, int64_t pos, int64_t n);

/* Element offset of K's (resp. V's) row (bi, key position pos, kv head n):
 * through the page table when g is paged, else fattn__geom_row_offset. */
int64_t fattn__geom_k_offset(const fattn_geom *g, int64_t bi, int64_t pos, int64_t n);
int64_t fattn__geom_v_offset(const fattn_geom *g, int64_t bi, int64_t pos, int64_t n);

/* Element offset of Stats/Max entry (bi, n, i) of a tensor of the shape
 * fattn__geom_stats_shape gives. */
int64_t fattn__geom_stats_offset(const fattn_geom *g, const fattn_tensor *stats,
                                int64_t bi, int64_t n, int64_t i);

/* Shape of Stats (and Max): [b,h,sq,1], or [t_q,h,1] for a THD Q. */
void fattn__geom_stats_shape(const fattn_geom *g, int *ndim, int64_t shape[4]);

#endif /* FATTN_CORE_GEOM_H */
