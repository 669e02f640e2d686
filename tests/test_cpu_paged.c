/* Suite "cpu_paged": the CPU engine over a paged KV cache (the six
 * paged_kv_* layouts, fixtures in paged.c: shuffled and separate tables,
 * unused pages and rows poisoned), held to the float64 oracle and, as a
 * metamorphic check, bitwise equal to the same case with the cache laid out
 * contiguously.
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
#include "paged.h"

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
    paged_row_case(r, &fx->c);
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
    const paged_row *r = &paged_rows[_i];
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
    const paged_row *r = &paged_rows[_i];
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
    BAD_LONG_TABLE,  /* more than ceil(max_seqlen_kv / page) */
    BAD_NO_PADDING,  /* causal without padding */
    BAD_FEW_ROWS,    /* fewer rows than the batch */
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
    [BAD_LONG_TABLE] = {"long_table", FATTN_E_SHAPE},
    [BAD_NO_PADDING] = {"no_padding", FATTN_E_INVALID_CASE},
    [BAD_FEW_ROWS] = {"few_rows", FATTN_E_SHAPE},
};

START_TEST(test_refused)
{
    const paged_row *r = &paged_rows[0];
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
    case BAD_LONG_TABLE: p.attn.max_seqlen_kv -= r->page; break; /* one page too many */
    case BAD_NO_PADDING: p.attn.mask_type = FATTN_MASK_CAUSAL_BOTTOM_RIGHT; break;
    case BAD_FEW_ROWS: p.page_table_k.shape[0] = r->b - 1; break;
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
    for (int i = 0; i < paged_row_count; i++)
        printf("%s\n", paged_rows[i].id);
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("cpu_paged");
    TCase *tc = tcase_create("paged");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, test_paged_vs_contiguous, 0, paged_row_count);
    tcase_add_loop_test(tc, test_identity_table_differs, 0, paged_row_count);
    tcase_add_loop_test(tc, test_refused, 0, BAD_KINDS);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
