/* Suite "cpu_paged": the CPU engine over a paged KV cache (the six
 * paged_kv_* layouts), held to the float64 oracle and, as a metamorphic
 * check, bitwise equal to the same case with the cache laid out
 * contiguously.
 *
 * Each row is a contiguous case (its layout is the paged one without the
 * "paged_kv_" prefix, its skv pages_per_seq * page) whose K and V are then
 * scattered into page containers the way TE's cache holds them (fused_attn
 * .cpp reads bshd containers as [num_pages, page_size, hg, d] and sbhd ones
 * as [page_size, num_pages, hg, d]):
 *   - the table is a shuffle, never the identity, so a table ignored, read
 *     transposed or swapped with the other shows;
 *   - spare pages no table names, and the rows of a page past a sequence's
 *     length, hold NaN poison, so reading one shows in O;
 *   - a row may give V its own table (TE's fused_attn_fwd takes two).
 * The forward runs on both; O and Stats must be bitwise equal, and the paged
 * run's outputs are also walked against the oracle of the contiguous inputs.
 * Negative rows: the identity table must change O (the test can fail), and
 * bad tables, a missing table or a mask without padding are refused with
 * the status geom.c gives.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "cases.h"
#include "fattn/dtype.h"
#include "fattn/te.h"
#include "fattn_test.h"
#include "oracle.h"
#include "oracle_check.h"

#define POISON_BITS UINT64_MAX /* 0xFF bytes: NaN in every io dtype */

typedef struct paged_row {
    const char *id;
    const char *layout; /* a paged_kv_* name */
    int b, h, hg, sq, d, dv;
    int page, pages_per_seq, spare; /* spare: pages no table names */
    fattn_dtype dtype;
    fattn_mask_type mask;
    bool separate_v;    /* V gets its own shuffle */
    int seqlens_q[4], seqlens_kv[4];
} paged_row;

#define F16 FATTN_DTYPE_FLOAT16
#define BF16 FATTN_DTYPE_BFLOAT16
#define F32 FATTN_DTYPE_FLOAT32
#define PAD FATTN_MASK_PADDING
#define PADC FATTN_MASK_PADDING_CAUSAL
#define PADBR FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT

static const paged_row rows[] = {
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
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

/* One paged call's extra inputs. */
typedef struct paged_inputs {
    fattn_qkv_layout layout;
    fattn_tensor kc, vc;  /* page containers */
    fattn_tensor pt_k, pt_v;
} paged_inputs;

static void row_case(const paged_row *r, tcase *c)
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
    c->seed = 7000 + (uint64_t)(r - rows);
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
    fattn_tensor_fill_bits(cont, POISON_BITS);
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

static void paged_make(const paged_row *r, const tcase *c, const tcase_buffers *buf,
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
}

static void paged_free(paged_inputs *pi)
{
    fattn_tensor_free(&pi->kc);
    fattn_tensor_free(&pi->vc);
    fattn_tensor_free(&pi->pt_k);
    fattn_tensor_free(&pi->pt_v);
}

static fattn_fwd_params paged_params(const tcase *c, tcase_buffers *buf, const paged_inputs *pi)
{
    fattn_fwd_params p = tcase_fwd_params(c, buf);
    p.k = pi->kc;
    p.v = pi->vc;
    p.page_table_k = pi->pt_k;
    p.page_table_v = pi->pt_v;
    p.qkv_layout = pi->layout;
    p.o_format = fattn_layout_q_format(pi->layout);
    return p;
}

/* TE's two calls over the Stats the contiguous run allocated, outputs
 * poisoned first. */
static fattn_status paged_run(const tcase *c, tcase_buffers *buf, const paged_inputs *pi,
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

static void *copy_bytes(const fattn_tensor *t, size_t *n)
{
    *n = (size_t)fattn_tensor_numel(t) * fattn_dtype_size(t->dtype);
    void *m = malloc(*n);
    ck_assert_ptr_nonnull(m);
    memcpy(m, t->data, *n);
    return m;
}

typedef struct fixture {
    tcase c;
    tcase_buffers buf;
    fattn_engine *e;
    void *o_ref, *stats_ref;
    size_t o_n, stats_n;
} fixture;

/* The contiguous case: set up, run, keep its O and Stats. */
static void fixture_open(fixture *fx, const paged_row *r)
{
    row_case(r, &fx->c);
    fattn_status st = tcase_setup(&fx->c, &fx->buf);
    ck_assert_msg(st == FATTN_OK, "%s: setup: %s", r->id, fattn_last_error());
    ck_assert_int_eq(fattn_engine_init_cpu(&fx->e, &(fattn_cpu_options){.threads = 2}),
                     FATTN_OK);
    st = tcase_run(&fx->c, &fx->buf, fx->e);
    ck_assert_msg(st == FATTN_OK, "%s: contiguous: %s", r->id, fattn_last_error());
    fx->o_ref = copy_bytes(&fx->buf.o, &fx->o_n);
    fx->stats_ref = copy_bytes(&fx->buf.stats, &fx->stats_n);
}

static void fixture_close(fixture *fx)
{
    free(fx->o_ref);
    free(fx->stats_ref);
    fattn_engine_free(fx->e);
    tcase_teardown(&fx->buf);
}

START_TEST(test_paged_vs_contiguous)
{
    const paged_row *r = &rows[_i];
    fixture fx;
    fixture_open(&fx, r);
    paged_inputs pi;
    paged_make(r, &fx.c, &fx.buf, false, &pi);
    fattn_status st = paged_run(&fx.c, &fx.buf, &pi, fx.e);
    ck_assert_msg(st == FATTN_OK, "%s: paged: %s", r->id, fattn_last_error());
    ck_assert_msg(memcmp(fx.buf.o.data, fx.o_ref, fx.o_n) == 0,
                  "%s: paged O differs from the contiguous case's", r->id);
    ck_assert_msg(memcmp(fx.buf.stats.data, fx.stats_ref, fx.stats_n) == 0,
                  "%s: paged Stats differ from the contiguous case's", r->id);

    const tolerance *tol = tolerance_for(fx.c.dtype);
    ck_assert_ptr_nonnull(tol);
    oracle_result res = {0};
    ck_assert_int_eq(oracle_forward(&fx.c, &fx.buf, NULL, &res), FATTN_OK);
    check_out outs[] = {
        {"O", ORACLE_O, &fx.buf.o, res.o, tol->k[TOL_O].atol, tol->k[TOL_O].rtol},
        {"Stats", ORACLE_STATS, &fx.buf.stats, res.stats, tol->k[TOL_STATS].atol,
         tol->k[TOL_STATS].rtol},
    };
    for (int i = 0; i < 2; i++) {
        check_report rep;
        oracle_check_output(&fx.c, &fx.buf, &outs[i], &rep);
        ck_assert_msg(rep.fatal == 0, "%s %s: %s", r->id, outs[i].name, rep.first_fatal);
        ck_assert_msg(rep.out_of_tol == 0, "%s %s: %s", r->id, outs[i].name, rep.first_tol);
        ck_assert_int_gt(rep.defined, 0);
    }
    oracle_result_free(&res);
    paged_free(&pi);
    fixture_close(&fx);
    fattn_test_mark(r->id);
}
END_TEST

/* The same containers read through the identity table instead of their
 * own: O must change (what verify's identity-table mutant relies on). */
START_TEST(test_identity_table_differs)
{
    const paged_row *r = &rows[_i];
    fixture fx;
    fixture_open(&fx, r);
    paged_inputs pi;
    paged_make(r, &fx.c, &fx.buf, false, &pi);
    int32_t *tk = pi.pt_k.data, *tv = pi.pt_v.data;
    for (int64_t i = 0; i < (int64_t)r->b * r->pages_per_seq; i++)
        tk[i] = tv[i] = (int32_t)i;
    fattn_status st = paged_run(&fx.c, &fx.buf, &pi, fx.e);
    ck_assert_msg(st == FATTN_OK, "%s: %s", r->id, fattn_last_error());
    ck_assert_msg(memcmp(fx.buf.o.data, fx.o_ref, fx.o_n) != 0,
                  "%s: O unchanged under the identity table", r->id);
    paged_free(&pi);
    fixture_close(&fx);
}
END_TEST

/* Calls the geometry refuses, each with its status. */
typedef enum bad_kind {
    BAD_PAGE_RANGE,  /* a used entry names no page */
    BAD_PAGE_NEG,    /* a negative entry */
    BAD_NO_TABLE_V,  /* page_table_v missing */
    BAD_TABLE_DTYPE, /* int64 table */
    BAD_SHORT_TABLE, /* too few pages for max_seqlen_kv */
    BAD_NO_PADDING,  /* causal without padding */
    BAD_KINDS
} bad_kind;

static const struct {
    const char *name;
    fattn_status want;
} bad_rows[BAD_KINDS] = {
    [BAD_PAGE_RANGE] = {"page_range", FATTN_E_SHAPE},
    [BAD_PAGE_NEG] = {"page_negative", FATTN_E_SHAPE},
    [BAD_NO_TABLE_V] = {"no_table_v", FATTN_E_INVALID_ARG},
    [BAD_TABLE_DTYPE] = {"table_dtype", FATTN_E_SHAPE},
    [BAD_SHORT_TABLE] = {"short_table", FATTN_E_SHAPE},
    [BAD_NO_PADDING] = {"no_padding", FATTN_E_INVALID_CASE},
};

START_TEST(test_refused)
{
    const paged_row *r = &rows[0];
    fixture fx;
    fixture_open(&fx, r);
    paged_inputs pi;
    paged_make(r, &fx.c, &fx.buf, false, &pi);
    fattn_fwd_params p = paged_params(&fx.c, &fx.buf, &pi);
    memset(&fx.buf.aux_fwd, 0, sizeof fx.buf.aux_fwd);
    int32_t *tk = pi.pt_k.data;
    int64_t pages = pi.kc.shape[0];
    switch ((bad_kind)_i) {
    case BAD_PAGE_RANGE: tk[0] = (int32_t)pages; break;
    case BAD_PAGE_NEG: tk[r->pages_per_seq] = -1; break; /* batch 1's first page */
    case BAD_NO_TABLE_V: p.page_table_v = fattn_tensor_empty(); break;
    case BAD_TABLE_DTYPE: p.page_table_k.dtype = FATTN_DTYPE_INT64; break;
    case BAD_SHORT_TABLE: p.page_table_k.shape[1] = r->pages_per_seq - 1; break;
    case BAD_NO_PADDING: p.mask_type = FATTN_MASK_CAUSAL_BOTTOM_RIGHT; break;
    default: ck_abort();
    }
    fattn_status st = fattn_engine_fwd(fx.e, &p);
    ck_assert_msg(st == bad_rows[_i].want, "%s: got %s (%s)", bad_rows[_i].name,
                  fattn_status_name(st), fattn_last_error());
    paged_free(&pi);
    fixture_close(&fx);
}
END_TEST

static void list_ids(void)
{
    for (int i = 0; i < NROWS; i++)
        printf("%s\n", rows[i].id);
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("cpu_paged");
    TCase *tc = tcase_create("paged");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, test_paged_vs_contiguous, 0, NROWS);
    tcase_add_loop_test(tc, test_identity_table_differs, 0, NROWS);
    tcase_add_loop_test(tc, test_refused, 0, BAD_KINDS);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
