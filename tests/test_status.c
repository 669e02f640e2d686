/* Suite "status": status codes, the per-thread error message, and the
 * strided tensor views of fattn/tensor.h. */
#include <pthread.h>
#include <stdint.h>

#include "fattn/status.h"
#include "fattn/tensor.h"
#include "fattn_test.h"

#define NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- status codes ------------------------------------------------------------ */

static const fattn_status all_status[] = {
    FATTN_OK,          FATTN_E_INVALID_ARG,  FATTN_E_NOMEM,           FATTN_E_UNSUPPORTED,
    FATTN_E_SHAPE,     FATTN_E_DTYPE,        FATTN_E_LAYOUT,          FATTN_E_PARSE,
    FATTN_E_STATE,     FATTN_E_IO,           FATTN_E_INVALID_FILE,    FATTN_E_UNSAFE_TE_QUIRK,
    FATTN_E_INVALID_CASE, FATTN_E_CUDA,      FATTN_E_CUDNN,           FATTN_E_OVERFLOW,
    FATTN_E_INTERNAL,  FATTN_E_MISSING_FIELD, FATTN_E_NOT_MODELLED,
};

START_TEST(status_names_distinct)
{
    ck_assert_int_eq(NROWS(all_status), 19);
    for (int i = 0; i < NROWS(all_status); i++) {
        fattn_status a = all_status[i];
        ck_assert_int_eq((int)a, -i); /* 0, -1, ..., -18 */
        const char *name = fattn_status_name(a);
        const char *text = fattn_status_str(a);
        ck_assert_ptr_nonnull(name);
        ck_assert_ptr_nonnull(text);
        ck_assert_msg(strncmp(name, "FATTN_", 6) == 0, "name %s", name);
        ck_assert_msg(text[0] != '\0', "empty text for %s", name);
        for (int j = 0; j < i; j++) {
            ck_assert_str_ne(name, fattn_status_name(all_status[j]));
            ck_assert_str_ne(text, fattn_status_str(all_status[j]));
        }
    }
    ck_assert_str_eq(fattn_status_name(FATTN_OK), "FATTN_OK");
    ck_assert_str_eq(fattn_status_name(FATTN_E_OVERFLOW), "FATTN_E_OVERFLOW");
    ck_assert_str_eq(fattn_status_name(FATTN_E_MISSING_FIELD), "FATTN_E_MISSING_FIELD");
}
END_TEST

/* fattn_status_from_name inverts fattn_status_name on every code and on
 * nothing else, not even the name an unknown code prints as. */
START_TEST(status_from_name)
{
    for (int i = 0; i < NROWS(all_status); i++) {
        fattn_status got = FATTN_E_INTERNAL == all_status[i] ? FATTN_OK : FATTN_E_INTERNAL;
        ck_assert(fattn_status_from_name(fattn_status_name(all_status[i]), &got));
        ck_assert_int_eq(got, all_status[i]);
    }
    const char *bad[] = {"FATTN_E_UNKNOWN", "fattn_ok", "FATTN_E_", "", "FATTN_OK "};
    for (int i = 0; i < NROWS(bad); i++) {
        fattn_status got = FATTN_E_IO;
        ck_assert_msg(!fattn_status_from_name(bad[i], &got), "'%s' parsed", bad[i]);
        ck_assert_int_eq(got, FATTN_E_IO);
    }
    ck_assert(!fattn_status_from_name(NULL, NULL));
}
END_TEST

START_TEST(status_unknown)
{
    const int bad[] = {1, -19, -1000, 42};
    for (int i = 0; i < NROWS(bad); i++) {
        ck_assert_ptr_nonnull(fattn_status_name((fattn_status)bad[i]));
        ck_assert_ptr_nonnull(fattn_status_str((fattn_status)bad[i]));
        for (int j = 0; j < NROWS(all_status); j++)
            ck_assert_str_ne(fattn_status_name((fattn_status)bad[i]),
                             fattn_status_name(all_status[j]));
    }
}
END_TEST

START_TEST(error_sets_message)
{
    fattn_clear_error();
    ck_assert_str_eq(fattn_last_error(), "");
    fattn_status st = fattn_error(FATTN_E_SHAPE, "q has %d dims, want %s", 3, "4");
    ck_assert_int_eq(st, FATTN_E_SHAPE);
    ck_assert_str_eq(fattn_last_error(), "q has 3 dims, want 4");
    /* a later error replaces the message */
    ck_assert_int_eq(fattn_error(FATTN_E_IO, "second"), FATTN_E_IO);
    ck_assert_str_eq(fattn_last_error(), "second");
    fattn_clear_error();
    ck_assert_str_eq(fattn_last_error(), "");
    /* very long messages are truncated, still terminated */
    char big[4000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ck_assert_int_eq(fattn_error(FATTN_E_INTERNAL, "%s", big), FATTN_E_INTERNAL);
    size_t n = strlen(fattn_last_error());
    ck_assert_uint_gt(n, 100);
    ck_assert_uint_lt(n, sizeof big - 1);
}
END_TEST

typedef struct thread_arg {
    char seen_initially[64];
    char seen_after[64];
} thread_arg;

static void *thread_body(void *p)
{
    thread_arg *a = p;
    snprintf(a->seen_initially, sizeof a->seen_initially, "%s", fattn_last_error());
    fattn_error(FATTN_E_CUDA, "from the thread");
    snprintf(a->seen_after, sizeof a->seen_after, "%s", fattn_last_error());
    return NULL;
}

START_TEST(error_per_thread)
{
    fattn_error(FATTN_E_PARSE, "from main");
    thread_arg a;
    memset(&a, 0, sizeof a);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, thread_body, &a), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_str_eq(a.seen_initially, ""); /* a fresh thread has no error */
    ck_assert_str_eq(a.seen_after, "from the thread");
    ck_assert_str_eq(fattn_last_error(), "from main"); /* main's is untouched */
}
END_TEST

/* ---- tensors ------------------------------------------------------------------ */

START_TEST(tensor_empty)
{
    fattn_tensor e = fattn_tensor_empty();
    ck_assert(fattn_tensor_is_empty(&e));
    ck_assert_ptr_null(e.data);
    ck_assert_int_eq(e.ndim, 0);
    ck_assert_int_eq(fattn_tensor_numel(&e), 0);
    fattn_tensor e2 = fattn_tensor_empty();
    ck_assert(!fattn_tensor_same(&e, &e2)); /* absence is never "the same" tensor */
    /* a non-empty scalar has numel 1 */
    float x = 2.0f;
    fattn_tensor s = fattn_tensor_view(&x, FATTN_DTYPE_FLOAT32, 0, NULL);
    ck_assert(!fattn_tensor_is_empty(&s));
    ck_assert_int_eq(fattn_tensor_numel(&s), 1);
    ck_assert(fattn_tensor_is_contiguous(&s));
    fattn_tensor_free(NULL); /* allowed */
}
END_TEST

typedef struct view_row {
    int ndim;
    int64_t shape[FATTN_MAX_DIMS];
    int64_t strides[FATTN_MAX_DIMS];
    int64_t numel;
} view_row;

static const view_row view_rows[] = {
    {1, {7}, {1}, 7},
    {2, {3, 4}, {4, 1}, 12},
    {3, {2, 3, 4}, {12, 4, 1}, 24},
    {4, {2, 1, 3, 5}, {15, 15, 5, 1}, 30},
    {5, {2, 2, 2, 2, 2}, {16, 8, 4, 2, 1}, 32},
    {3, {2, 0, 3}, {0, 3, 1}, 0},
};

START_TEST(tensor_view_strides)
{
    const view_row *r = &view_rows[_i];
    char buf[8];
    fattn_tensor t = fattn_tensor_view(buf, FATTN_DTYPE_BFLOAT16, r->ndim, r->shape);
    ck_assert_ptr_eq(t.data, buf);
    ck_assert_int_eq(t.dtype, FATTN_DTYPE_BFLOAT16);
    ck_assert_int_eq(t.device, FATTN_DEVICE_HOST);
    ck_assert_int_eq(t.ndim, r->ndim);
    for (int i = 0; i < r->ndim; i++) {
        ck_assert_int_eq(t.shape[i], r->shape[i]);
        ck_assert_int_eq(t.strides[i], r->strides[i]);
    }
    ck_assert_int_eq(fattn_tensor_numel(&t), r->numel);
    ck_assert(fattn_tensor_is_contiguous(&t));
    int64_t last[FATTN_MAX_DIMS];
    for (int i = 0; i < r->ndim; i++)
        last[i] = r->shape[i] > 0 ? r->shape[i] - 1 : 0;
    if (r->numel > 0)
        ck_assert_int_eq(fattn_tensor_offset(&t, last), r->numel - 1);
}
END_TEST

START_TEST(tensor_offset_contiguity)
{
    float buf[24];
    const int64_t shape[3] = {2, 3, 4};
    fattn_tensor t = fattn_tensor_view(buf, FATTN_DTYPE_FLOAT32, 3, shape);
    const int64_t idx[3] = {1, 2, 3};
    ck_assert_int_eq(fattn_tensor_offset(&t, idx), 12 + 8 + 3);
    /* transpose the last two dims: no longer contiguous */
    fattn_tensor tt = t;
    tt.shape[1] = 4;
    tt.shape[2] = 3;
    tt.strides[1] = 1;
    tt.strides[2] = 4;
    ck_assert(!fattn_tensor_is_contiguous(&tt));
    const int64_t idx2[3] = {1, 3, 2};
    ck_assert_int_eq(fattn_tensor_offset(&tt, idx2), 12 + 3 + 8);
    /* size-1 dims may carry any stride */
    fattn_tensor one = t;
    one.shape[0] = 1;
    one.strides[0] = 999;
    ck_assert(fattn_tensor_is_contiguous(&one));
    /* a packed-QKV-like interleaved view: [s=2, h=3] out of [2, 3, 3] */
    fattn_tensor q = fattn_tensor_view(buf, FATTN_DTYPE_FLOAT32, 2, (const int64_t[]){2, 3});
    q.strides[0] = 9;
    q.strides[1] = 1;
    ck_assert(!fattn_tensor_is_contiguous(&q));
}
END_TEST

START_TEST(tensor_alloc_free)
{
    const int64_t shape[4] = {2, 3, 5, 7};
    fattn_tensor t;
    ck_assert_int_eq(fattn_tensor_alloc(&t, FATTN_DTYPE_FLOAT16, 4, shape), FATTN_OK);
    ck_assert_ptr_nonnull(t.data);
    ck_assert_uint_eq((uintptr_t)t.data % 64, 0);
    ck_assert_int_eq(fattn_tensor_numel(&t), 210);
    ck_assert(fattn_tensor_is_contiguous(&t));
    ck_assert_int_eq(t.strides[0], 105);
    memset(t.data, 0x5a, 210 * 2); /* the whole size is writable */
    fattn_tensor_free(&t);
    ck_assert(fattn_tensor_is_empty(&t));
    ck_assert_int_eq(t.ndim, 0);

    /* a zero-size tensor still allocates (non-NULL) */
    const int64_t zshape[2] = {0, 4};
    ck_assert_int_eq(fattn_tensor_alloc(&t, FATTN_DTYPE_INT64, 2, zshape), FATTN_OK);
    ck_assert_ptr_nonnull(t.data);
    ck_assert_int_eq(fattn_tensor_numel(&t), 0);
    fattn_tensor_free(&t);

    ck_assert_int_eq(fattn_tensor_alloc(&t, FATTN_DTYPE_INVALID, 1, shape), FATTN_E_DTYPE);
    ck_assert_int_eq(fattn_tensor_alloc(&t, FATTN_DTYPE_FLOAT32, FATTN_MAX_DIMS + 1, shape),
                     FATTN_E_SHAPE);
    const int64_t neg[2] = {3, -1};
    ck_assert_int_eq(fattn_tensor_alloc(&t, FATTN_DTYPE_FLOAT32, 2, neg), FATTN_E_SHAPE);
}
END_TEST

typedef struct overflow_row {
    fattn_dtype dtype;
    int ndim;
    int64_t shape[FATTN_MAX_DIMS];
} overflow_row;

static const overflow_row overflow_rows[] = {
    {FATTN_DTYPE_UINT8, 2, {INT64_C(1) << 40, INT64_C(1) << 40}},      /* count */
    {FATTN_DTYPE_FLOAT32, 1, {INT64_C(1) << 62}},                       /* bytes */
    {FATTN_DTYPE_INT64, 3, {INT64_C(1) << 20, INT64_C(1) << 20, INT64_C(1) << 20}},
    {FATTN_DTYPE_FLOAT16, 5, {INT64_MAX, 2, 1, 1, 1}},
    {FATTN_DTYPE_BFLOAT16, 4, {65536, 65536, 65536, 65536}},
};

START_TEST(tensor_overflow)
{
    const overflow_row *r = &overflow_rows[_i];
    fattn_tensor t = fattn_tensor_empty();
    fattn_clear_error();
    ck_assert_int_eq(fattn_tensor_alloc(&t, r->dtype, r->ndim, r->shape), FATTN_E_OVERFLOW);
    ck_assert_ptr_null(t.data);
    ck_assert_str_ne(fattn_last_error(), "");
}
END_TEST

START_TEST(tensor_same)
{
    float buf[12];
    const int64_t shape[2] = {3, 4};
    fattn_tensor a = fattn_tensor_view(buf, FATTN_DTYPE_FLOAT32, 2, shape);
    fattn_tensor b = a;
    ck_assert(fattn_tensor_same(&a, &b));
    b.strides[0] = 5;
    ck_assert(!fattn_tensor_same(&a, &b));
    b = a;
    b.shape[1] = 3;
    ck_assert(!fattn_tensor_same(&a, &b));
    b = a;
    b.data = buf + 1;
    ck_assert(!fattn_tensor_same(&a, &b));
    b = a;
    b.dtype = FATTN_DTYPE_INT32;
    ck_assert(!fattn_tensor_same(&a, &b));
    b = a;
    b.ndim = 1;
    ck_assert(!fattn_tensor_same(&a, &b));
    /* dims past ndim do not matter */
    b = a;
    b.shape[3] = 77;
    b.strides[4] = 88;
    ck_assert(fattn_tensor_same(&a, &b));
}
END_TEST

/* Gather through a transposed view and through a strided (sliced) view. */
START_TEST(tensor_gather)
{
    int32_t buf[24];
    for (int i = 0; i < 24; i++)
        buf[i] = i;
    /* [2, 3, 4] viewed as [2, 4, 3] (last two transposed) */
    fattn_tensor t =
        fattn_tensor_view(buf, FATTN_DTYPE_INT32, 3, (const int64_t[]){2, 4, 3});
    t.strides[0] = 12;
    t.strides[1] = 1;
    t.strides[2] = 4;
    int32_t out[24];
    fattn_tensor_gather(&t, out);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 3; c++)
                ck_assert_int_eq(out[(a * 4 + b) * 3 + c], a * 12 + c * 4 + b);

    /* every other column of a [4, 6] matrix, starting at column 1 */
    int32_t m[24];
    for (int i = 0; i < 24; i++)
        m[i] = 100 + i;
    fattn_tensor s = fattn_tensor_view(m + 1, FATTN_DTYPE_INT32, 2, (const int64_t[]){4, 3});
    s.strides[0] = 6;
    s.strides[1] = 2;
    int32_t o2[12];
    fattn_tensor_gather(&s, o2);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            ck_assert_int_eq(o2[r * 3 + c], 100 + r * 6 + 1 + 2 * c);

    /* a contiguous gather is a copy */
    fattn_tensor full = fattn_tensor_view(m, FATTN_DTYPE_INT32, 1, (const int64_t[]){24});
    int32_t o3[24];
    fattn_tensor_gather(&full, o3);
    ck_assert_int_eq(memcmp(o3, m, sizeof m), 0);
}
END_TEST

START_TEST(tensor_fill_bits)
{
    uint16_t buf[20];
    for (int i = 0; i < 20; i++)
        buf[i] = 0xffff;
    /* [2, 3] view with row stride 10 and column stride 3 */
    fattn_tensor t = fattn_tensor_view(buf, FATTN_DTYPE_FLOAT16, 2, (const int64_t[]){2, 3});
    t.strides[0] = 10;
    t.strides[1] = 3;
    fattn_tensor_fill_bits(&t, 0x12343c00ull); /* low 2 bytes: 0x3c00 */
    for (int i = 0; i < 20; i++) {
        bool in_view = (i == 0 || i == 3 || i == 6 || i == 10 || i == 13 || i == 16);
        ck_assert_uint_eq(buf[i], in_view ? 0x3c00 : 0xffff);
    }
    /* 8-byte elements take all of the pattern */
    int64_t w[3] = {0, 0, 0};
    fattn_tensor t8 = fattn_tensor_view(w, FATTN_DTYPE_INT64, 1, (const int64_t[]){3});
    fattn_tensor_fill_bits(&t8, 0x0123456789abcdefull);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq((uint64_t)w[i], 0x0123456789abcdefull);
    /* 1-byte elements */
    uint8_t b[4] = {0, 0, 0, 0};
    fattn_tensor t1 = fattn_tensor_view(b, FATTN_DTYPE_UINT8, 1, (const int64_t[]){3});
    fattn_tensor_fill_bits(&t1, 0x7f);
    ck_assert(b[0] == 0x7f && b[1] == 0x7f && b[2] == 0x7f && b[3] == 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("status");

    TCase *tc = tcase_create("status");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tc, status_names_distinct);
    tcase_add_test(tc, status_unknown);
    tcase_add_test(tc, status_from_name);
    tcase_add_test(tc, error_sets_message);
    tcase_add_test(tc, error_per_thread);
    suite_add_tcase(s, tc);

    tc = tcase_create("tensor");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tc, tensor_empty);
    tcase_add_loop_test(tc, tensor_view_strides, 0, NROWS(view_rows));
    tcase_add_test(tc, tensor_offset_contiguity);
    tcase_add_test(tc, tensor_alloc_free);
    tcase_add_loop_test(tc, tensor_overflow, 0, NROWS(overflow_rows));
    tcase_add_test(tc, tensor_same);
    tcase_add_test(tc, tensor_gather);
    tcase_add_test(tc, tensor_fill_bits);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, fattn_test_no_ids)
