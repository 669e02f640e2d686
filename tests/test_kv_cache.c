/* fattn_kv_cache_copy (fattn/kv_cache.h) against TE's copy_to_kv_cache
 * worked out by hand: each row a cache before and after one step, the new
 * tokens numbered so that every cache token says where it came from.
 *
 * Tokens are one head of two float32 dims; new token t of a step is
 * {100 + t, 200 + t}, a token already in the cache {10 * row + pos, -1},
 * an untouched cache position {-9, -9} (TE's caches start as zeros; the
 * test fills them with a mark so that a stray write shows). */
#include <math.h>
#include <string.h>

#include "fattn/kv_cache.h"
#include "fattn_test.h"

#define NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MAXT 32 /* cache tokens */

typedef struct kv_row {
    const char *id;
    fattn_qkv_format format;
    int64_t new_shape[4];        /* the new tokens' shape (3 or 4 dims) */
    int64_t pages, page_size;    /* cache [pages, page_size, 1, 2] */
    int64_t b, max_ctx_len, max_seq_len, max_pages_per_seq;
    bool reindex;
    int32_t table[8];
    int64_t table_rows;
    int32_t cu_new[5], cu_cached[5];
    /* cache token (page * page_size + row) -> its content before and after:
     * -1 untouched mark, 1000 + r: the old token of row r, t >= 0: new token t */
    int before[MAXT], after[MAXT];
} kv_row;

static const kv_row kv_rows[] = {
    /* non-paged bshd, the first step: two sequences arrive (need_reindex,
     * identity batch_indices: nothing moves), 2 and 3 tokens */
    {"kv.bshd.first_step", FATTN_FORMAT_BSHD, {2, 3, 1, 2}, 3, 4, 2, 3, 4, 1, true,
     {0, 1, 2}, 3, {0, 2, 5}, {0, 2, 5},
     {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
     {0, 1, -1, -1, 3, 4, 5, -1, -1, -1, -1, -1}},
    /* non-paged bshd, the sequence in row 0 finished, row 1's continues by
     * one: batch_indices [1, 0, 2] (unfinished, finished, the rest), its 3
     * cached tokens move to row 0, the new one lands at position 3 */
    {"kv.bshd.reindex", FATTN_FORMAT_BSHD, {1, 1, 1, 2}, 3, 4, 1, 1, 4, 1, true,
     {1, 0, 2}, 3, {0, 1}, {0, 4},
     {1000, 1001, -1, -1, 1004, 1005, 1006, -1, -1, -1, -1, -1},
     {1004, 1005, 1006, 0, 1004, 1005, 1006, -1, -1, -1, -1, -1}},
    /* non-paged, the same sequences as before (no reindex): TE passes
     * need_reindex False where the kernel takes is_non_paged, so it runs
     * the paged addressing over batch_indices, the identity here */
    {"kv.bshd.no_reindex", FATTN_FORMAT_BSHD, {2, 1, 1, 2}, 2, 4, 2, 1, 4, 1, false,
     {0, 1}, 2, {0, 1, 2}, {0, 3, 5},
     {1000, 1001, -1, -1, 1004, -1, -1, -1}, {1000, 1001, 0, -1, 1004, 1, -1, -1}},
    /* paged thd: pages of 2, two pages per sequence; sequence 0 appends 2
     * tokens at positions 1, 2 (page 3 row 1, page 1 row 0), sequence 1
     * its first at position 0 (page 0 row 0) */
    {"kv.thd.paged", FATTN_FORMAT_THD, {3, 1, 2, 0}, 4, 2, 2, 1, 4, 2, false,
     {3, 1, 0, 2}, 2, {0, 2, 3}, {0, 3, 4},
     {-1, -1, -1, -1, -1, -1, 1006, -1}, {2, -1, 1, -1, -1, -1, 1006, 0}},
    /* paged sbhd: new tokens [ctx 2, b 2]; token (i, bi) is i * b + bi */
    {"kv.sbhd.paged", FATTN_FORMAT_SBHD, {2, 2, 1, 2}, 4, 2, 2, 2, 4, 2, false,
     {2, 0, 1, 3}, 2, {0, 2, 3}, {0, 2, 3},
     {-1, -1, -1, -1, -1, -1, -1, -1}, {-1, -1, 1, -1, 0, 2, -1, -1}},
};

static void token_value(int code, int row, float out[2])
{
    if (code == -1) {
        out[0] = out[1] = -9.0f;
    } else if (code >= 1000) {
        out[0] = (float)(10 * (code - 1000));
        out[1] = -1.0f;
    } else {
        out[0] = 100.0f + (float)code;
        out[1] = 200.0f + (float)code;
    }
    (void)row;
}

/* A cache and new tokens for row r: the caches hold `before`, the new
 * tokens are numbered in memory order. */
typedef struct kv_fixture {
    float kc[MAXT * 2], vc[MAXT * 2], nk[MAXT * 2], nv[MAXT * 2];
    fattn_tensor k_cache, v_cache, new_k, new_v;
} kv_fixture;

static void fixture(const kv_row *r, kv_fixture *f)
{
    int64_t ncache = r->pages * r->page_size;
    ck_assert(ncache <= MAXT);
    for (int64_t t = 0; t < ncache; t++) {
        token_value(r->before[t], (int)t, f->kc + 2 * t);
        token_value(r->before[t], (int)t, f->vc + 2 * t);
        f->vc[2 * t] = -f->vc[2 * t]; /* V differs from K */
    }
    int nd = r->format == FATTN_FORMAT_THD ? 3 : 4;
    int64_t ntok = r->new_shape[0] * (nd == 4 ? r->new_shape[1] : 1);
    ck_assert(ntok <= MAXT);
    for (int64_t t = 0; t < ntok; t++) {
        token_value((int)t, 0, f->nk + 2 * t);
        token_value((int)t, 0, f->nv + 2 * t);
        f->nv[2 * t] = -f->nv[2 * t];
    }
    int64_t cshape[4] = {r->pages, r->page_size, 1, 2};
    f->k_cache = fattn_tensor_view(f->kc, FATTN_DTYPE_FLOAT32, 4, cshape);
    f->v_cache = fattn_tensor_view(f->vc, FATTN_DTYPE_FLOAT32, 4, cshape);
    f->new_k = fattn_tensor_view(f->nk, FATTN_DTYPE_FLOAT32, nd, r->new_shape);
    f->new_v = fattn_tensor_view(f->nv, FATTN_DTYPE_FLOAT32, nd, r->new_shape);
}

static fattn_kv_cache_copy_args args_of(const kv_row *r, kv_fixture *f)
{
    return (fattn_kv_cache_copy_args){
        .new_k = &f->new_k, .new_v = &f->new_v, .k_cache = &f->k_cache, .v_cache = &f->v_cache,
        .table = r->table, .table_rows = r->table_rows, .cu_new_lens = r->cu_new,
        .cu_cached_lens = r->cu_cached, .format = r->format, .b = r->b,
        .max_ctx_len = r->max_ctx_len, .max_seq_len = r->max_seq_len,
        .max_pages_per_seq = r->max_pages_per_seq, .reindex = r->reindex};
}

START_TEST(kv_copy_rows)
{
    const kv_row *r = &kv_rows[_i];
    kv_fixture f;
    fixture(r, &f);
    fattn_kv_cache_copy_args a = args_of(r, &f);
    fattn_status st = fattn_kv_cache_copy(&a);
    ck_assert_msg(st == FATTN_OK, "%s: %s", r->id, fattn_last_error());
    for (int64_t t = 0; t < r->pages * r->page_size; t++) {
        float want[2];
        token_value(r->after[t], (int)t, want);
        ck_assert_msg(f.kc[2 * t] == want[0] && f.kc[2 * t + 1] == want[1],
                      "%s: k cache token %lld is (%g, %g), want (%g, %g)", r->id, (long long)t,
                      f.kc[2 * t], f.kc[2 * t + 1], want[0], want[1]);
        ck_assert_msg(f.vc[2 * t] == -want[0] && f.vc[2 * t + 1] == want[1],
                      "%s: v cache token %lld", r->id, (long long)t);
    }
    fattn_test_mark(r->id);
}
END_TEST

/* Indices TE would follow out of bounds, and mismatched tensors, are
 * refused before anything is written. */
START_TEST(kv_copy_refusals)
{
    const kv_row *base = &kv_rows[3]; /* paged thd */
    kv_row r = *base;
    kv_fixture f;
    r.table[0] = 9; /* no such page */
    fixture(&r, &f);
    float before[MAXT * 2];
    memcpy(before, f.kc, sizeof before);
    fattn_kv_cache_copy_args a = args_of(&r, &f);
    ck_assert_int_eq(fattn_kv_cache_copy(&a), FATTN_E_INVALID_ARG);
    ck_assert(memcmp(before, f.kc, sizeof before) == 0);
    ck_assert(strstr(fattn_last_error(), "page"));
    r = *base;
    r.cu_cached[1] = 1; /* fewer cached than new tokens */
    fixture(&r, &f);
    a = args_of(&r, &f);
    ck_assert_int_eq(fattn_kv_cache_copy(&a), FATTN_E_INVALID_ARG);
    r = *base;
    fixture(&r, &f);
    f.new_v.dtype = FATTN_DTYPE_INT32;
    a = args_of(&r, &f);
    ck_assert_int_eq(fattn_kv_cache_copy(&a), FATTN_E_INVALID_ARG);
    ck_assert(strstr(fattn_last_error(), "same data type"));
    r = kv_rows[1]; /* reindex from a row outside the cache */
    r.table[0] = 5;
    fixture(&r, &f);
    a = args_of(&r, &f);
    ck_assert_int_eq(fattn_kv_cache_copy(&a), FATTN_E_INVALID_ARG);
    fattn_test_mark("kv.refusals");
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("kv_cache");
    TCase *tc = tcase_create("kv_cache");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, kv_copy_rows, 0, NROWS(kv_rows));
    tcase_add_test(tc, kv_copy_refusals);
    suite_add_tcase(s, tc);
    return s;
}

static void list_ids(void)
{
    for (int i = 0; i < NROWS(kv_rows); i++)
        printf("%s\n", kv_rows[i].id);
    printf("kv.refusals\n");
}

FATTN_TEST_MAIN(make_suite, list_ids)
