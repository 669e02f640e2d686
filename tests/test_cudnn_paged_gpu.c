/* Suite "cudnn-gpu" (cudnn_paged_gpu): the cuDNN engine's paged-KV forward
 * on a GPU, over the paged fixtures (paged.c; float16/bfloat16 rows). Per
 * row:
 *   - the paged forward held to the float64 oracle of the contiguous inputs
 *     (cuDNN tolerances, tests/oracle_check.c), poison outside the defined
 *     regions intact;
 *   - a second paged forward bitwise identical to the first;
 *   - O and Stats bitwise equal to the same case with the cache laid out
 *     contiguously (measured so on the H200 with cuDNN 9.19 through
 *     cudnn-frontend; a difference fails here);
 *   - the identity table over the same containers changes O.
 * Without a CUDA device (or cuDNN) it prints "1..0 # SKIP" and exits 0.
 * Check runs without fork: CUDA cannot be used in a child forked after the
 * parent initialised it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_env.h"
#include "cases.h"
#include "fattn/cudnn.h"
#include "fattn_config.h"
#include "fattn_gpu_test.h"
#include "fattn_test.h"
#include "oracle.h"
#include "oracle_check.h"
#include "paged.h"

static fattn_engine *g_gpu;

static void *copy_of(const fattn_tensor *t, size_t *n)
{
    *n = (size_t)fattn_tensor_numel(t) * fattn_dtype_size(t->dtype);
    void *m = malloc(*n);
    ck_assert_ptr_nonnull(m);
    memcpy(m, t->data, *n);
    return m;
}

START_TEST(gpu_paged)
{
    const paged_row *r = &paged_rows[_i];
    if (r->dtype == FATTN_DTYPE_FLOAT32)
        return; /* cuDNN's fused attention takes float16/bfloat16 only */
    tcase c;
    tcase_buffers buf;
    paged_row_case(r, &c);
    ck_assert_int_eq(tcase_setup(&c, &buf), FATTN_OK);
    fattn_status st = tcase_run(&c, &buf, g_gpu);
    ck_assert_msg(st == FATTN_OK, "%s: contiguous: %s", r->id, fattn_last_error());
    size_t on, sn;
    void *o_flat = copy_of(&buf.o, &on), *s_flat = copy_of(&buf.stats, &sn);

    paged_inputs pi;
    ck_assert_int_eq(paged_make(r, &c, &buf, false, &pi), FATTN_OK);
    st = paged_run(&c, &buf, &pi, g_gpu);
    if (st == FATTN_E_UNSUPPORTED) {
        printf("# skip %s: %s\n", r->id, fattn_last_error());
    } else {
        ck_assert_msg(st == FATTN_OK, "%s: paged: %s", r->id, fattn_last_error());
        const tolerance *tol = tolerance_for_cudnn(c.dtype);
        ck_assert_ptr_nonnull(tol);
        oracle_result res = {0};
        ck_assert_int_eq(oracle_forward(&c, &buf, NULL, &res), FATTN_OK);
        check_out outs[] = {
            {"O", ORACLE_O, &buf.o, res.o, tol->k[TOL_O].atol, tol->k[TOL_O].rtol},
            {"Stats", ORACLE_STATS, &buf.stats, res.stats, tol->k[TOL_STATS].atol,
             tol->k[TOL_STATS].rtol},
        };
        for (int i = 0; i < 2; i++) {
            check_report rep;
            oracle_check_output(&c, &buf, &outs[i], &rep);
            ck_assert_msg(rep.fatal == 0, "%s %s: %s", r->id, outs[i].name, rep.first_fatal);
            ck_assert_msg(rep.out_of_tol == 0, "%s %s: %s", r->id, outs[i].name, rep.first_tol);
        }
        oracle_result_free(&res);
        size_t on1, sn1;
        void *o1 = copy_of(&buf.o, &on1), *s1 = copy_of(&buf.stats, &sn1);
        ck_assert_int_eq(paged_run(&c, &buf, &pi, g_gpu), FATTN_OK);
        ck_assert_msg(memcmp(o1, buf.o.data, on1) == 0, "%s: paged O not repeatable", r->id);
        ck_assert_msg(memcmp(s1, buf.stats.data, sn1) == 0, "%s: paged Stats not repeatable",
                      r->id);
        ck_assert_msg(memcmp(o1, o_flat, on) == 0, "%s: paged O differs from contiguous", r->id);
        ck_assert_msg(memcmp(s1, s_flat, sn) == 0, "%s: paged Stats differ from contiguous",
                      r->id);
        /* the identity table over the same containers */
        int32_t *tk = pi.pt_k.data, *tv = pi.pt_v.data;
        for (int64_t i = 0; i < (int64_t)r->b * r->pages_per_seq; i++)
            tk[i] = tv[i] = (int32_t)i;
        ck_assert_int_eq(paged_run(&c, &buf, &pi, g_gpu), FATTN_OK);
        ck_assert_msg(memcmp(o1, buf.o.data, on1) != 0, "%s: identity table, same O", r->id);
        free(o1);
        free(s1);
        char id[128];
        snprintf(id, sizeof id, "cudnn.gpu.%s", r->id);
        fattn_test_mark(id);
    }
    free(o_flat);
    free(s_flat);
    paged_free(&pi);
    tcase_teardown(&buf);
}
END_TEST

static void list_ids(void)
{
    for (int i = 0; i < paged_row_count; i++)
        if (paged_rows[i].dtype != FATTN_DTYPE_FLOAT32)
            printf("cudnn.gpu.%s\n", paged_rows[i].id);
}

static int setup(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    if (fattn_engine_init_cudnn(&g_gpu, NULL) != FATTN_OK) {
        printf("Bail out! %s\n", fattn_last_error());
        return 1;
    }
    return FATTN_GPU_TEST_GO_ON;
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("cudnn_paged_gpu");
    TCase *tc = tcase_create("paged");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, gpu_paged, 0, paged_row_count);
    suite_add_tcase(s, tc);
    return s;
}

static void teardown(void)
{
    fattn_engine_free(g_gpu);
}

FATTN_GPU_TEST_MAIN(.make_suite = make_suite, .list_ids = list_ids, .setup = setup,
                    .teardown = teardown)
