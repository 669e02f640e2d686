/* Paged KV fixtures (paged.h). */
#include <check.h>
#include <string.h>

#include "fattn/dtype.h"
#include "fattn/te.h"
#include "paged.h"

#define F16 FATTN_DTYPE_FLOAT16
#define BF16 FATTN_DTYPE_BFLOAT16
#define F32 FATTN_DTYPE_FLOAT32
#define PAD FATTN_MASK_PADDING
#define PADC FATTN_MASK_PADDING_CAUSAL
#define PADBR FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT

const paged_row paged_rows[] = {
    /* decode: one new token per sequence, GQA, bottom-right causal as
     * DotProductAttention turns padding_causal into for a KV cache */
    {"paged.bshd_bshd_bshd.decode.gqa.bf16", "paged_kv_bshd_bshd_bshd", 3, 4, 2, 1, 16, 16,
     4, 3, 3, BF16, PADBR, false, {1, 1, 1}, {12, 5, 9}},
    {"paged.bshd_bshd_bshd.decode.f16", "paged_kv_bshd_bshd_bshd", 2, 2, 2, 1, 8, 8,
     8, 2, 2, F16, PAD, true, {1, 1}, {16, 3}},
    /* prefill: several new tokens against a cache */
    {"paged.sbhd_bshd_bshd.prefill.f16", "paged_kv_sbhd_bshd_bshd", 2, 2, 1, 8, 16, 8,
     8, 3, 2, F16, PADBR, false, {8, 3}, {20, 11}},
    {"paged.thd_bshd_bshd.prefill.gqa.bf16", "paged_kv_thd_bshd_bshd", 3, 4, 1, 6, 16, 16,
     4, 4, 5, BF16, PADBR, true, {6, 1, 4}, {16, 7, 4}},
    {"paged.bshd_sbhd_sbhd.separate_v.bf16", "paged_kv_bshd_sbhd_sbhd", 2, 2, 2, 4, 8, 16,
     4, 3, 1, BF16, PAD, true, {4, 2}, {9, 12}},
    {"paged.sbhd_sbhd_sbhd.causal.f16", "paged_kv_sbhd_sbhd_sbhd", 2, 4, 2, 5, 16, 16,
     2, 5, 3, F16, PADC, false, {5, 3}, {10, 6}},
    {"paged.thd_sbhd_sbhd.decode.f32", "paged_kv_thd_sbhd_sbhd", 3, 2, 1, 1, 8, 8,
     4, 2, 2, F32, PADBR, true, {1, 1, 1}, {8, 1, 6}},
};
const int paged_row_count = (int)(sizeof paged_rows / sizeof paged_rows[0]);

void paged_row_case(const paged_row *r, tcase *c)
{
    memset(c, 0, sizeof *c);
    c->id = r->id;
    c->b = r->b, c->h = r->h, c->hg = r->hg, c->sq = r->sq;
    c->skv = r->page * r->pages_per_seq; /* TE's max_sequence_length */
    c->d = r->d, c->dv = r->dv;
    c->dtype = r->dtype;
    fattn_qkv_layout paged;
    ck_assert_int_eq(fattn_layout_parse(r->layout, &paged), FATTN_OK);
    ck_assert(fattn_layout_is_paged(paged));
    ck_assert_int_eq(fattn_layout_parse(r->layout + strlen("paged_kv_"), &c->layout), FATTN_OK);
    c->mask = r->mask;
    c->window[0] = -1;
    c->window[1] = r->mask == PAD ? -1 : 0;
    c->bottom_right = r->mask == PADBR;
    c->seqlens_q = r->seqlens_q;
    c->seqlens_kv = r->seqlens_kv;
    c->seed = 7000 + (uint64_t)(r - paged_rows);
}

/* Element offset of row (bi, pos, head n) of a bshd or sbhd tensor. */
static int64_t kv_offset(const fattn_tensor *t, fattn_qkv_format f, int64_t bi, int64_t pos,
                         int64_t n)
{
    const int64_t *st = t->strides;
    if (f == FATTN_FORMAT_BSHD)
        return bi * st[0] + pos * st[1] + n * st[2];
    return pos * st[0] + bi * st[1] + n * st[2];
}

/* A shuffle of 0..n-1 from seed (LCG-driven Fisher-Yates), never the
 * identity for n > 1. */
static void shuffle(int32_t *p, int n, uint32_t seed)
{
    for (int i = 0; i < n; i++)
        p[i] = i;
    uint32_t x = seed * 2654435761u + 12345u;
    for (int i = n - 1; i > 0; i--) {
        x = x * 1664525u + 1013904223u;
        int j = (int)((x >> 8) % (uint32_t)(i + 1));
        int32_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    if (n > 1 && p[0] == 0 && p[1] == 1) { /* keep the first two pages out of place */
        p[0] = 1;
        p[1] = 0;
    }
}

/* Scatter src (the contiguous K or V, [b, skv, hg, w] in format f) into a
 * container of `pages` pages, rows j < len only; everything else poison.
 * The table maps (bi, page j) to perm[bi * pps + j]. */
static void scatter(const paged_row *r, const tcase_buffers *buf, const fattn_tensor *src,
                    fattn_qkv_format f, int64_t w, const int32_t *perm, bool identity,
                    fattn_tensor *cont, fattn_tensor *table)
{
    int64_t pages = (int64_t)r->b * r->pages_per_seq + r->spare;
    int64_t shape[4];
    if (f == FATTN_FORMAT_BSHD) {
        shape[0] = pages, shape[1] = r->page;
    } else {
        shape[0] = r->page, shape[1] = pages;
    }
    shape[2] = r->hg, shape[3] = w;
    ck_assert_int_eq(fattn_tensor_alloc(cont, src->dtype, 4, shape), FATTN_OK);
    for (int64_t e = 0; e < fattn_tensor_numel(cont); e++)
        fattn_store_f32(cont->data, cont->dtype, e, PAGE_POISON);
    int64_t tshape[2] = {r->b, r->pages_per_seq};
    ck_assert_int_eq(fattn_tensor_alloc(table, FATTN_DTYPE_INT32, 2, tshape), FATTN_OK);
    int32_t *tab = table->data;
    size_t es = fattn_dtype_size(src->dtype);
    for (int64_t bi = 0; bi < r->b; bi++) {
        for (int64_t j = 0; j < r->pages_per_seq; j++)
            tab[bi * r->pages_per_seq + j] =
                identity ? (int32_t)(bi * r->pages_per_seq + j) : perm[bi * r->pages_per_seq + j];
        for (int64_t pos = 0; pos < buf->seqlens_kv[bi]; pos++) {
            int64_t pg = tab[bi * r->pages_per_seq + pos / r->page], row = pos % r->page;
            for (int64_t n = 0; n < r->hg; n++) {
                int64_t so = kv_offset(src, f, bi, pos, n);
                int64_t dof = kv_offset(cont, f, pg, row, n);
                for (int64_t c = 0; c < w; c++)
                    memcpy((char *)cont->data + (dof + c * cont->strides[3]) * es,
                           (const char *)src->data + (so + c * src->strides[3]) * es, es);
            }
        }
    }
}

fattn_status paged_make(const paged_row *r, const tcase *c, const tcase_buffers *buf,
                        bool identity, paged_inputs *pi)
{
    ck_assert_int_eq(fattn_layout_parse(r->layout, &pi->layout), FATTN_OK);
    fattn_qkv_format f = fattn_layout_kv_format(c->layout);
    int n = r->b * r->pages_per_seq + r->spare;
    int32_t perm_k[64], perm_v[64];
    ck_assert_int_le(n, 64);
    shuffle(perm_k, n, (uint32_t)c->seed);
    shuffle(perm_v, n, (uint32_t)c->seed + (r->separate_v ? 99u : 0u));
    scatter(r, buf, &buf->k, f, r->d, perm_k, identity, &pi->kc, &pi->pt_k);
    scatter(r, buf, &buf->v, f, r->dv, perm_v, identity, &pi->vc, &pi->pt_v);
    return FATTN_OK;
}

void paged_free(paged_inputs *pi)
{
    fattn_tensor_free(&pi->kc);
    fattn_tensor_free(&pi->vc);
    fattn_tensor_free(&pi->pt_k);
    fattn_tensor_free(&pi->pt_v);
}

fattn_fwd_params paged_params(const tcase *c, tcase_buffers *buf, const paged_inputs *pi)
{
    fattn_fwd_params p = tcase_fwd_params(c, buf);
    p.attn.k = pi->kc;
    p.attn.v = pi->vc;
    p.page_table_k = pi->pt_k;
    p.page_table_v = pi->pt_v;
    p.attn.qkv_layout = pi->layout;
    p.attn.o_format = fattn_layout_q_format(pi->layout);
    return p;
}

fattn_status paged_run(const tcase *c, tcase_buffers *buf, const paged_inputs *pi,
                       fattn_engine *e)
{
    fattn_tensor_fill_bits(&buf->o, POISON_BITS);
    fattn_tensor_fill_bits(&buf->stats, POISON_BITS);
    memset(&buf->aux_fwd, 0, sizeof buf->aux_fwd);
    fattn_fwd_params p = paged_params(c, buf, pi);
    fattn_status st = fattn_engine_fwd(e, &p);
    if (st != FATTN_OK)
        return st;
    ck_assert_int_eq(buf->aux_fwd.n, 2);
    buf->aux_fwd.t[0] = buf->stats;
    return fattn_engine_fwd(e, &p);
}

