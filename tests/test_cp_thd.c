/* Suite "cp_thd": lib/bridge/cp_thd.c, TE's THD context-parallel helpers,
 * which fattn-te's shim calls for tex.thd_* (tools/te/fattn_te/thd.py).
 *
 * Held to TE's definitions: the partition against TE's own CPU
 * definition of the same indices (get_batch_on_this_cp_rank's host path,
 * context_parallel.py 2.20.2:5935-5953, written out below) and TE's
 * docstring example (:5591-5608); the other helpers against results worked
 * by hand from context_parallel.cu's kernels (TE d0067d0), each row a
 * small THD batch; TE's NVTE_CHECK refusals as errors.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fattn/cp_thd.h"
#include "fattn/dtype.h"
#include "fattn/status.h"
#include "fattn/tensor.h"
#include "fattn_test.h"

#define NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static fattn_tensor cu_view(int32_t *cu, int n)
{
    int64_t s[1] = {n};
    return fattn_tensor_view(cu, FATTN_DTYPE_INT32, 1, s);
}

/* ---- the partition: against TE's host definition --------------------------- */

/* get_batch_on_this_cp_rank's CPU path: per padded sequence, slices of
 * len / (2 * world), rank's slice and slice 2 * world - 1 - rank. */
static int te_host_indices(const int32_t *cu, int b, int world, int rank, int32_t *out)
{
    int n = 0, total = 2 * world;
    for (int s = 0; s < b; s++) {
        int slice = (cu[s + 1] - cu[s]) / total, start = cu[s];
        for (int k = 0; k < slice; k++)
            out[n++] = start + rank * slice + k;
        for (int k = 0; k < slice; k++)
            out[n++] = start + (total - rank - 1) * slice + k;
    }
    return n;
}

typedef struct part_row {
    const char *id;
    int b;
    int32_t cu[6];
    int world;
} part_row;

static const part_row part_rows[] = {
    {"two_seqs.w2", 2, {0, 8, 12}, 2},
    {"one_seq.w4", 1, {0, 16}, 4},
    {"empty_seq.w2", 3, {0, 8, 8, 20}, 2},
    {"five_seqs.w4", 5, {0, 8, 24, 32, 64, 72}, 4},
    {"one_seq.w8", 1, {0, 32}, 8},
};

START_TEST(partition_row)
{
    const part_row *r = &part_rows[_i];
    int32_t cu[6];
    memcpy(cu, r->cu, sizeof cu);
    fattn_tensor c = cu_view(cu, r->b + 1);
    int64_t total = r->cu[r->b], n = total / r->world;
    for (int rank = 0; rank < r->world; rank++) {
        int32_t got[64], want[64];
        int64_t s[1] = {n};
        fattn_tensor out = fattn_tensor_view(got, FATTN_DTYPE_INT32, 1, s);
        ck_assert_int_eq(fattn_cp_thd_partitioned_indices(&c, total, r->world, rank, &out),
                         FATTN_OK);
        ck_assert_int_eq(te_host_indices(r->cu, r->b, r->world, rank, want), n);
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(got[i] == want[i], "%s rank %d [%lld]: %d, TE's host path %d", r->id,
                          rank, (long long)i, got[i], want[i]);
    }
    char id[64];
    snprintf(id, sizeof id, "cp_thd.partition.%s", r->id);
    fattn_test_mark(id);
}
END_TEST

/* TE's docstring example (context_parallel.py 2.20.2:5591-5608): seq lens
 * 8 and 4, cp 2: GPU0 holds seq 0's tokens 0 1 6 7 and seq 1's 0 3. */
START_TEST(partition_docstring)
{
    int32_t cu[3] = {0, 8, 12}, got[6];
    fattn_tensor c = cu_view(cu, 3);
    int64_t s[1] = {6};
    fattn_tensor out = fattn_tensor_view(got, FATTN_DTYPE_INT32, 1, s);
    ck_assert_int_eq(fattn_cp_thd_partitioned_indices(&c, 12, 2, 0, &out), FATTN_OK);
    const int32_t want0[6] = {0, 1, 6, 7, 8, 11};
    ck_assert_mem_eq(got, want0, sizeof want0);
    ck_assert_int_eq(fattn_cp_thd_partitioned_indices(&c, 12, 2, 1, &out), FATTN_OK);
    const int32_t want1[6] = {2, 3, 4, 5, 9, 10};
    ck_assert_mem_eq(got, want1, sizeof want1);
}
END_TEST

/* TE's checks: cu entries multiples of 2*world, rank in range, total too. */
START_TEST(partition_refuses)
{
    int32_t cu[3] = {0, 6, 12}, got[8];
    fattn_tensor c = cu_view(cu, 3);
    int64_t s[1] = {6};
    fattn_tensor out = fattn_tensor_view(got, FATTN_DTYPE_INT32, 1, s);
    ck_assert_int_eq(fattn_cp_thd_partitioned_indices(&c, 12, 2, 0, &out), FATTN_E_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "cu_seqlens[1] = 6"));
    cu[1] = 8;
    ck_assert_int_eq(fattn_cp_thd_partitioned_indices(&c, 12, 2, 2, &out), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fattn_cp_thd_partitioned_indices(&c, 10, 2, 0, &out), FATTN_E_INVALID_ARG);
    cu[2] = 16;
    ck_assert_int_eq(fattn_cp_thd_partitioned_indices(&c, 16, 2, 0, &out), FATTN_E_SHAPE);
}
END_TEST

/* The reorder is the partition laid out rank after rank, and its inverse. */
START_TEST(reorder_round_trip)
{
    int32_t cu[3] = {0, 8, 16}, idx[8];
    fattn_tensor c = cu_view(cu, 3);
    float in[16][4], mid[16][4], back[16][4];
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 4; k++)
            in[i][k] = (float)(i * 10 + k);
    int64_t sh[2] = {16, 4}, s1[1] = {8};
    fattn_tensor ti = fattn_tensor_view(in, FATTN_DTYPE_FLOAT32, 2, sh);
    fattn_tensor tm = fattn_tensor_view(mid, FATTN_DTYPE_FLOAT32, 2, sh);
    fattn_tensor tb = fattn_tensor_view(back, FATTN_DTYPE_FLOAT32, 2, sh);
    fattn_tensor ix = fattn_tensor_view(idx, FATTN_DTYPE_INT32, 1, s1);
    ck_assert_int_eq(fattn_cp_thd_reorder(&ti, &c, 2, false, &tm), FATTN_OK);
    for (int rank = 0; rank < 2; rank++) {
        ck_assert_int_eq(fattn_cp_thd_partitioned_indices(&c, 16, 2, rank, &ix), FATTN_OK);
        for (int i = 0; i < 8; i++)
            ck_assert_float_eq(mid[rank * 8 + i][1], in[idx[i]][1]);
    }
    ck_assert_int_eq(fattn_cp_thd_reorder(&tm, &c, 2, true, &tb), FATTN_OK);
    ck_assert_mem_eq(back, in, sizeof in);
    /* a token of 12 bytes: TE moves 16 at a time and refuses it */
    int64_t sh3[2] = {16, 3};
    fattn_tensor odd = fattn_tensor_view(in, FATTN_DTYPE_FLOAT32, 2, sh3);
    ck_assert_int_eq(fattn_cp_thd_reorder(&odd, &c, 2, false, &tm), FATTN_E_INVALID_ARG);
}
END_TEST

/* ---- halves ---------------------------------------------------------------- */

/* [t=8, h=1, d=8] bf16 (16-byte tokens), sequences of 4 and 4: token i
 * holds i everywhere; the first halves are tokens 0 1 4 5, the second 2 3
 * 6 7; with a leading dimension of 2 the second block is read the same. */
START_TEST(read_half_rows)
{
    uint16_t in[2][8][8], half[2][4][8];
    for (int y = 0; y < 2; y++)
        for (int i = 0; i < 8; i++)
            for (int k = 0; k < 8; k++)
                in[y][i][k] = fattn_f32_to_bf16((float)(100 * y + i)).bits;
    int32_t cu[3] = {0, 4, 8};
    fattn_tensor c = cu_view(cu, 3);
    const int want[2][4] = {{0, 1, 4, 5}, {2, 3, 6, 7}};
    for (int nd = 3; nd <= 4; nd++) {
        for (int hi = 0; hi < 2; hi++) {
            memset(half, 0xff, sizeof half);
            int64_t s3[3] = {8, 1, 8}, h3[3] = {4, 1, 8}, s4[4] = {2, 8, 1, 8},
                    h4[4] = {2, 4, 1, 8};
            fattn_tensor t = fattn_tensor_view(in, FATTN_DTYPE_BFLOAT16, nd, nd == 3 ? s3 : s4);
            fattn_tensor h = fattn_tensor_view(half, FATTN_DTYPE_BFLOAT16, nd, nd == 3 ? h3 : h4);
            ck_assert_int_eq(fattn_cp_thd_read_half(&t, &c, hi, &h), FATTN_OK);
            for (int y = 0; y < (nd == 3 ? 1 : 2); y++)
                for (int i = 0; i < 4; i++)
                    ck_assert_float_eq(fattn_bf16_to_f32((fattn_bf16){half[y][i][3]}),
                                       (float)(100 * y + want[hi][i]));
        }
    }
}
END_TEST

/* lse: packed [h=1, t=8] and unpacked [b=2, h=1, s=4] over sequences of 4
 * and 4; the second halves are t 2 3 6 7 (packed) and s 2 3 of each
 * sequence (unpacked). The correction is log(exp(a) + exp(b)). */
START_TEST(lse_halves)
{
    int32_t cu[3] = {0, 4, 8};
    fattn_tensor c = cu_view(cu, 3);
    for (int packed = 0; packed < 2; packed++) {
        float lse[8] = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f}, half[4];
        int64_t ls_p[2] = {1, 8}, hs_p[2] = {1, 4}, ls_u[3] = {2, 1, 4}, hs_u[3] = {2, 1, 2};
        int nd = packed ? 2 : 3;
        fattn_tensor tl = fattn_tensor_view(lse, FATTN_DTYPE_FLOAT32, nd, packed ? ls_p : ls_u);
        fattn_tensor th = fattn_tensor_view(half, FATTN_DTYPE_FLOAT32, nd, packed ? hs_p : hs_u);
        memset(half, 0, sizeof half);
        ck_assert_int_eq(fattn_cp_thd_second_half_lse(&tl, &th, &c, packed, true), FATTN_OK);
        const float want[4] = {2.0f, 3.0f, 6.0f, 7.0f};
        ck_assert_mem_eq(half, want, sizeof want);
        const float per_step[4] = {2.0f, -INFINITY, 0.0f, 7.0f};
        memcpy(half, per_step, sizeof half);
        ck_assert_int_eq(fattn_cp_thd_second_half_lse(&tl, &th, &c, packed, false), FATTN_OK);
        const int at[4] = {2, 3, 6, 7};
        for (int i = 0; i < 4; i++) {
            double a = want[i], b = per_step[i];
            double exact = fmax(a, b) + log1p(exp(fmin(a, b) - fmax(a, b)));
            ck_assert_msg(fabs(lse[at[i]] - exact) <= 2e-7 * fabs(exact) + 1e-30,
                          "packed %d [%d]: %a, want %a", packed, at[i], (double)lse[at[i]],
                          exact);
        }
        ck_assert_float_eq(lse[0], 0.0f); /* the first halves untouched */
        ck_assert_float_eq(lse[5], 5.0f);
    }
}
END_TEST

/* ---- corrections -------------------------------------------------------------- */

/* out [t=4, h=1, d=8] f16 = 1, out_per_step = 2 but one element 0, lse 0,
 * lse_per_step log(0.5): each element gains 2 * 0.5 = 1, the 0 element 0;
 * with only_second_half, t=4 out, t=2 per step, the sequences' second halves. */
START_TEST(out_correction_rows)
{
    int32_t cu[3] = {0, 2, 4};
    fattn_tensor c = cu_view(cu, 3);
    for (int second = 0; second < 2; second++) {
        uint16_t out[4][8], ps[4][8];
        for (int i = 0; i < 4; i++)
            for (int k = 0; k < 8; k++) {
                out[i][k] = fattn_f32_to_f16(1.0f).bits;
                ps[i][k] = fattn_f32_to_f16(k == 5 ? 0.0f : 2.0f).bits;
            }
        int np = second ? 2 : 4;
        float lse[4] = {0, 0, 0, 0}, lps[4];
        for (int i = 0; i < 4; i++)
            lps[i] = logf(0.5f);
        int64_t so[3] = {4, 1, 8}, sp[3] = {np, 1, 8}, sl[2] = {1, 4}, slp[2] = {1, np};
        fattn_tensor to = fattn_tensor_view(out, FATTN_DTYPE_FLOAT16, 3, so);
        fattn_tensor tp = fattn_tensor_view(ps, FATTN_DTYPE_FLOAT16, 3, sp);
        fattn_tensor tl = fattn_tensor_view(lse, FATTN_DTYPE_FLOAT32, 2, sl);
        fattn_tensor tlp = fattn_tensor_view(lps, FATTN_DTYPE_FLOAT32, 2, slp);
        ck_assert_int_eq(fattn_cp_thd_out_correction(&to, &tp, NULL, &tl, &tlp, &c, second,
                                                     true),
                         FATTN_OK);
        for (int i = 0; i < 4; i++) {
            bool touched = !second || i == 1 || i == 3;
            for (int k = 0; k < 8; k++) {
                float want = touched && k != 5 ? 2.0f : 1.0f;
                ck_assert_msg(fattn_f16_to_f32((fattn_f16){out[i][k]}) == want,
                              "second %d token %d k %d", second, i, k);
            }
        }
    }
}
END_TEST

/* 2.20.2's online merge: out 1 with old_lse log(0.25) and lse 0 scales to
 * 0.25, then out_per_step 2 at log(0.5) adds 1: 1.25 in the tokens the
 * merge reaches, 1 elsewhere. */
START_TEST(out_correction_incremental)
{
    int32_t cu[3] = {0, 2, 4};
    fattn_tensor c = cu_view(cu, 3);
    float out[4][8], ps[2][8], lse[4] = {0, 0, 0, 0}, old[4], lps[2];
    for (int i = 0; i < 4; i++) {
        old[i] = logf(0.25f);
        for (int k = 0; k < 8; k++)
            out[i][k] = 1.0f;
    }
    for (int i = 0; i < 2; i++) {
        lps[i] = logf(0.5f);
        for (int k = 0; k < 8; k++)
            ps[i][k] = 2.0f;
    }
    int64_t so[3] = {4, 1, 8}, sp[3] = {2, 1, 8}, sl[2] = {1, 4}, slp[2] = {1, 2};
    fattn_tensor to = fattn_tensor_view(out, FATTN_DTYPE_FLOAT32, 3, so);
    fattn_tensor tp = fattn_tensor_view(ps, FATTN_DTYPE_FLOAT32, 3, sp);
    fattn_tensor tl = fattn_tensor_view(lse, FATTN_DTYPE_FLOAT32, 2, sl);
    fattn_tensor told = fattn_tensor_view(old, FATTN_DTYPE_FLOAT32, 2, sl);
    fattn_tensor tlp = fattn_tensor_view(lps, FATTN_DTYPE_FLOAT32, 2, slp);
    ck_assert_int_eq(fattn_cp_thd_out_correction(&to, &tp, &told, &tl, &tlp, &c, true, true),
                     FATTN_OK);
    for (int i = 0; i < 4; i++) {
        double want = (i == 1 || i == 3) ? 1.25 : 1.0;
        ck_assert_msg(fabs(out[i][0] - want) < 1e-6, "token %d: %g", i, (double)out[i][0]);
    }
}
END_TEST

typedef struct grad_row {
    const char *first, *second;
    bool full; /* grad_per_step as long as grad */
    float want[4]; /* grad tokens 0..3 after, from grad 1 and per-step 10 + its token */
} grad_row;

/* grad [t=4, h=1, d=8] f32 of sequences 2 and 2 (halves: tokens 0 | 1 and
 * 2 | 3); a half-length grad_per_step holds tokens 10, 11 for the
 * sequences' selected halves; a full one 10..13. */
static const grad_row grad_rows[] = {
    {"add", "none", false, {11.0f, 1.0f, 12.0f, 1.0f}},
    {"copy", "none", false, {10.0f, 1.0f, 11.0f, 1.0f}},
    {"none", "add", false, {1.0f, 11.0f, 1.0f, 12.0f}},
    {"none", "copy", false, {1.0f, 10.0f, 1.0f, 11.0f}},
    {"add", "copy", true, {11.0f, 11.0f, 13.0f, 13.0f}},
    {"copy", "add", true, {10.0f, 12.0f, 12.0f, 14.0f}},
};

START_TEST(grad_correction_row)
{
    const grad_row *r = &grad_rows[_i];
    int32_t cu[3] = {0, 2, 4};
    fattn_tensor c = cu_view(cu, 3);
    float g[4][8], ps[4][8];
    int np = r->full ? 4 : 2;
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 8; k++) {
            g[i][k] = 1.0f;
            ps[i][k] = 10.0f + (float)i;
        }
    int64_t sg[3] = {4, 1, 8}, sp[3] = {np, 1, 8};
    fattn_tensor tg = fattn_tensor_view(g, FATTN_DTYPE_FLOAT32, 3, sg);
    fattn_tensor tp = fattn_tensor_view(ps, FATTN_DTYPE_FLOAT32, 3, sp);
    ck_assert_int_eq(fattn_cp_thd_grad_correction(&tg, &tp, &c, r->first, r->second), FATTN_OK);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 8; k++)
            ck_assert_msg(g[i][k] == r->want[i], "%s/%s token %d: %g, want %g", r->first,
                          r->second, i, (double)g[i][k], (double)r->want[i]);
    char id[64];
    snprintf(id, sizeof id, "cp_thd.grad.%s_%s", r->first, r->second);
    fattn_test_mark(id);
}
END_TEST

START_TEST(grad_correction_refuses)
{
    int32_t cu[3] = {0, 2, 4};
    fattn_tensor c = cu_view(cu, 3);
    float g[4][8] = {{0}}, ps[4][8] = {{0}};
    int64_t sg[3] = {4, 1, 8};
    fattn_tensor tg = fattn_tensor_view(g, FATTN_DTYPE_FLOAT32, 3, sg);
    fattn_tensor tp = fattn_tensor_view(ps, FATTN_DTYPE_FLOAT32, 3, sg);
    ck_assert_int_eq(fattn_cp_thd_grad_correction(&tg, &tp, &c, "add", "add"),
                     FATTN_E_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "Unsupported Functor"));
    ck_assert_int_eq(fattn_cp_thd_grad_correction(&tg, &tp, &c, "add", "none"), FATTN_E_SHAPE);
}
END_TEST

/* Tokens within each sequence's valid length from its padded start are
 * copied, the padding ones and the tail left as they were. */
START_TEST(copy_valid_tokens)
{
    int32_t pad[3] = {0, 4, 8}, valid[3] = {0, 3, 4};
    fattn_tensor cp = cu_view(pad, 3), cv = cu_view(valid, 3);
    float in[10][4], out[10][4];
    for (int i = 0; i < 10; i++)
        for (int k = 0; k < 4; k++) {
            in[i][k] = (float)i;
            out[i][k] = -1.0f;
        }
    int64_t s[2] = {10, 4};
    fattn_tensor ti = fattn_tensor_view(in, FATTN_DTYPE_FLOAT32, 2, s);
    fattn_tensor to = fattn_tensor_view(out, FATTN_DTYPE_FLOAT32, 2, s);
    ck_assert_int_eq(fattn_cp_thd_copy_valid_tokens(&to, &ti, &cp, &cv), FATTN_OK);
    const float want[10] = {0, 1, 2, -1, 4, -1, -1, -1, -1, -1};
    for (int i = 0; i < 10; i++)
        ck_assert_msg(out[i][2] == want[i], "token %d: %g", i, (double)out[i][2]);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("cp_thd");
    TCase *tc = tcase_create("partition");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, partition_row, 0, NROWS(part_rows));
    tcase_add_test(tc, partition_docstring);
    tcase_add_test(tc, partition_refuses);
    tcase_add_test(tc, reorder_round_trip);
    suite_add_tcase(s, tc);
    tc = tcase_create("halves");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tc, read_half_rows);
    tcase_add_test(tc, lse_halves);
    suite_add_tcase(s, tc);
    tc = tcase_create("corrections");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tc, out_correction_rows);
    tcase_add_test(tc, out_correction_incremental);
    tcase_add_loop_test(tc, grad_correction_row, 0, NROWS(grad_rows));
    tcase_add_test(tc, grad_correction_refuses);
    tcase_add_test(tc, copy_valid_tokens);
    suite_add_tcase(s, tc);
    return s;
}

static void list_ids(void)
{
    for (int i = 0; i < NROWS(part_rows); i++)
        printf("cp_thd.partition.%s\n", part_rows[i].id);
    for (int i = 0; i < NROWS(grad_rows); i++)
        printf("cp_thd.grad.%s_%s\n", grad_rows[i].first, grad_rows[i].second);
}

FATTN_TEST_MAIN(make_suite, list_ids)
