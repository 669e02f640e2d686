/* Suite "frontends": legacy and split side by side.
 *
 * For every case of the CPU matrix (cases.h), on the CPU engine with 2
 * threads: both front ends give bitwise identical out, max_logit, Stats,
 * rng_state, dq, dk, dv, d_bias and d_softmax_offset (whole buffers, both
 * poisoned with the same pattern); both agree with a direct engine run of
 * the case (outside THD's zero-filled regions); legacy returns 36 grads and
 * split 6, only the documented ones non-empty; the split's forward_impl
 * returns nothing that aliases an input and records its dedup sources.
 * Cases TE refuses on the reference platform (fe_te_invalid_cases) must be
 * refused by both front ends with the support table's status instead.
 * Also: the two front-end libraries do not reference each other's symbols.
 */
#include <stdio.h>
#include <string.h>

#include "cases.h"
#include "fattn_test.h"
#include "fe_common.h"

static fattn_engine *engine2(void)
{
    fattn_engine *e = NULL;
    fattn_cpu_options o = {.threads = 2};
    ck_assert_int_eq(fattn_engine_init_cpu(&e, &o), FATTN_OK);
    return e;
}

/* Does t's data pointer lie inside storage s? */
static bool inside(const fattn_tensor *t, const fattn_tensor *s)
{
    if (fattn_tensor_is_empty(t) || fattn_tensor_is_empty(s))
        return false;
    const char *p = t->data, *b = s->data;
    size_t bytes = (size_t)fattn_tensor_numel(s) * fattn_dtype_size(s->dtype);
    return p >= b && p < b + bytes;
}

START_TEST(case_row)
{
    const tcase *c = &tcase_table[_i];
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_msg(tcase_setup(c, &b) == FATTN_OK, "%s: %s", c->id, fattn_last_error());

    /* Reference: the case run directly on the engine (rng_state (seed+7, 32)). */
    ck_assert_msg(tcase_run(c, &b, e) == FATTN_OK, "%s direct: %s", c->id, fattn_last_error());

    fattn_rng_gen lg_gen = {c->seed + 7, 32}, sp_gen = {c->seed + 7, 32};
    fattn_legacy_ctx *lctx = NULL;
    ck_assert_int_eq(fattn_legacy_ctx_init(&lctx, e), FATTN_OK);
    fattn_tensor l_out, l_ml, l_grads[FATTN_LEGACY_NGRADS];
    fattn_status lst = fe_legacy_case(c, &b, lctx, &lg_gen, &l_out, &l_ml, l_grads);
    fattn_split_func_ctx *sctx = NULL;
    ck_assert_int_eq(fattn_split_func_ctx_init(&sctx), FATTN_OK);
    fattn_tensor s_out, s_ml, s_grads[6];
    fattn_status sst = fe_split_case(c, &b, e, sctx, &sp_gen, &s_out, &s_ml, s_grads);

    /* A case TE refuses: both refuse it alike, before drawing rng_state. */
    fattn_support_query q = fe_case_query(c);
    fattn_status expect = fattn_support_check(&q, "cpu", NULL);
    ck_assert_msg(expect == (fe_case_te_invalid(c) ? FATTN_E_INVALID_CASE : FATTN_OK),
                  "%s: support says %s", c->id, fattn_status_name(expect));
    if (expect != FATTN_OK) {
        ck_assert_int_eq(lst, expect);
        ck_assert_int_eq(sst, expect);
        ck_assert_uint_eq(lg_gen.offset, 32);
        ck_assert_uint_eq(sp_gen.offset, 32);
        fattn_split_func_ctx_free(sctx);
        fattn_legacy_ctx_free(lctx);
        tcase_teardown(&b);
        fattn_engine_free(e);
        char rid[160];
        snprintf(rid, sizeof rid, "frontends.%s", c->id);
        fattn_test_mark(rid);
        return;
    }
    ck_assert_msg(lst == FATTN_OK, "%s legacy: %s", c->id, fattn_status_name(lst));
    ck_assert_msg(sst == FATTN_OK, "%s split: %s", c->id, fattn_status_name(sst));

    /* Both generators advanced once. */
    ck_assert_uint_eq(lg_gen.offset, 48);
    ck_assert_uint_eq(sp_gen.offset, 48);

    /* Bitwise: legacy vs split. */
    const fattn_tensor *l_stats = &lctx->tensor_objects[FATTN_LEGACY_SAVED_STATS];
    const fattn_tensor *l_rng = &lctx->tensor_objects[FATTN_LEGACY_SAVED_RNG_STATE];
    ck_assert_msg(fe_same_bits(&l_out, &s_out), "%s: out differs", c->id);
    ck_assert_msg(fe_same_bits(&l_ml, &s_ml), "%s: max_logit differs", c->id);
    ck_assert_msg(fe_same_bits(l_stats, &sctx->bwd.softmax_stats), "%s: stats differ", c->id);
    ck_assert_msg(fe_same_bits(l_rng, &sctx->bwd.rng_state), "%s: rng_state differs", c->id);
    ck_assert_msg(fe_same_bits(&l_grads[FATTN_LEGACY_GRAD_DQ], &s_grads[0]), "%s: dq", c->id);
    ck_assert_msg(fe_same_bits(&l_grads[FATTN_LEGACY_GRAD_DK], &s_grads[1]), "%s: dk", c->id);
    ck_assert_msg(fe_same_bits(&l_grads[FATTN_LEGACY_GRAD_DV], &s_grads[2]), "%s: dv", c->id);
    ck_assert_msg(fe_same_bits(&l_grads[FATTN_LEGACY_GRAD_DBIAS], &s_grads[3]), "%s: d_bias",
                  c->id);
    ck_assert_msg(fe_same_bits(&l_grads[FATTN_LEGACY_GRAD_DSOFTMAX_OFFSET], &s_grads[4]),
                  "%s: d_softmax_offset", c->id);
    ck_assert_int_eq(((int64_t *)l_rng->data)[0], (int64_t)(c->seed + 7));
    ck_assert_int_eq(((int64_t *)l_rng->data)[1], 32);

    /* Against the direct engine run. */
    bool q_thd = fattn_layout_q_format(c->layout) == FATTN_FORMAT_THD;
    bool kv_thd = fattn_layout_kv_format(c->layout) == FATTN_FORMAT_THD;
    ck_assert_msg(fe_same_bits(l_stats, &b.stats), "%s: stats vs engine", c->id);
    if (!q_thd)
        ck_assert_msg(fe_same_bits(&l_out, &b.o), "%s: out vs engine", c->id);
    if (c->training) {
        if (!q_thd)
            ck_assert_msg(fe_same_bits(&s_grads[0], &b.dq), "%s: dq vs engine", c->id);
        if (!kv_thd) {
            ck_assert_msg(fe_same_bits(&s_grads[1], &b.dk), "%s: dk vs engine", c->id);
            ck_assert_msg(fe_same_bits(&s_grads[2], &b.dv), "%s: dv vs engine", c->id);
        }
        ck_assert_msg(fe_same_bits(&s_grads[3], &b.d_bias), "%s: d_bias vs engine", c->id);
        ck_assert_msg(fe_same_bits(&s_grads[4], &b.d_softmax_offset),
                      "%s: d_softmax_offset vs engine", c->id);
    }
    if (c->return_max_logit) {
        ck_assert_int_eq(l_ml.ndim, 1);
        ck_assert_int_eq(l_ml.shape[0], c->h);
        ck_assert_int_eq(l_ml.dtype, c->dtype);
    } else {
        ck_assert(fattn_tensor_is_empty(&l_ml) && fattn_tensor_is_empty(&s_ml));
    }

    /* Grad counts: 36 with 9-12 and 29 only; 6 with the last empty. */
    bool has_bias = c->bias == FATTN_BIAS_POST_SCALE_BIAS;
    bool has_sink = c->softmax != FATTN_SOFTMAX_VANILLA;
    for (int i = 0; i < FATTN_LEGACY_NGRADS; i++) {
        bool want = c->training &&
                    (i == FATTN_LEGACY_GRAD_DQ || i == FATTN_LEGACY_GRAD_DK ||
                     i == FATTN_LEGACY_GRAD_DV ||
                     (i == FATTN_LEGACY_GRAD_DBIAS && has_bias) ||
                     (i == FATTN_LEGACY_GRAD_DSOFTMAX_OFFSET && has_sink));
        ck_assert_msg(fattn_tensor_is_empty(&l_grads[i]) == !want, "%s: legacy grad %d", c->id,
                      i);
    }
    for (int i = 0; i < 6; i++) {
        bool want = c->training && (i < 3 || (i == 3 && has_bias) || (i == 4 && has_sink));
        ck_assert_msg(fattn_tensor_is_empty(&s_grads[i]) == !want, "%s: split grad %d", c->id,
                      i);
    }

    /* Dedup records and no aliasing of inputs. */
    const fattn_split_fwd_result *r = &sctx->fwd;
    const fattn_split_source *sf = r->ctx_attrs.saved_from;
    ck_assert_int_eq(sf[FATTN_SPLIT_SLOT_Q], FATTN_SPLIT_SRC_Q);
    ck_assert_int_eq(sf[FATTN_SPLIT_SLOT_K], FATTN_SPLIT_SRC_K);
    ck_assert_int_eq(sf[FATTN_SPLIT_SLOT_V], FATTN_SPLIT_SRC_V);
    ck_assert_int_eq(sf[FATTN_SPLIT_SLOT_OUT], FATTN_SPLIT_SRC_OUT);
    ck_assert_int_eq(sf[FATTN_SPLIT_SLOT_AUX_BIAS],
                     has_bias ? FATTN_SPLIT_SRC_ATTN_BIAS : FATTN_SPLIT_SRC_NONE);
    ck_assert_int_eq(sf[FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET],
                     has_sink ? FATTN_SPLIT_SRC_SOFTMAX_OFFSET : FATTN_SPLIT_SRC_NONE);
    for (int i = 0; i < FATTN_SPLIT_NSLOTS; i++) {
        if (i == FATTN_SPLIT_SLOT_Q || i == FATTN_SPLIT_SLOT_K || i == FATTN_SPLIT_SLOT_V ||
            i == FATTN_SPLIT_SLOT_OUT || i == FATTN_SPLIT_SLOT_AUX_BIAS ||
            i == FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET)
            continue;
        ck_assert_int_eq(sf[i], FATTN_SPLIT_SRC_NONE);
    }
    const fattn_tensor *inputs[] = {&b.qkv_storage[0], &b.qkv_storage[1], &b.qkv_storage[2],
                                    &b.bias, &b.softmax_offset};
    const fattn_tensor *returned[FATTN_SPLIT_NSLOTS + 2];
    int nret = 0;
    returned[nret++] = &r->out;
    returned[nret++] = &r->max_logit;
    for (int i = 0; i < FATTN_SPLIT_NSLOTS; i++)
        returned[nret++] = &r->to_save.t[i];
    for (int i = 0; i < nret; i++)
        for (int j = 0; j < FE_NROWS(inputs); j++)
            ck_assert_msg(!inside(returned[i], inputs[j]), "%s: returned tensor %d aliases "
                          "input %d", c->id, i, j);
    /* setup_ctx put them back. */
    ck_assert(fattn_tensor_same(&sctx->bwd.q, &b.q));
    ck_assert(fattn_tensor_same(&sctx->bwd.k, &b.k));
    ck_assert(fattn_tensor_same(&sctx->bwd.v, &b.v));
    ck_assert(fattn_tensor_same(&sctx->bwd.out, &r->out));
    if (has_bias)
        ck_assert(fattn_tensor_same(&sctx->bwd.aux_bias, &b.bias));
    if (has_sink)
        ck_assert(fattn_tensor_same(&sctx->bwd.aux_softmax_offset, &b.softmax_offset));

    fattn_split_func_ctx_free(sctx);
    fattn_legacy_ctx_free(lctx);
    tcase_teardown(&b);
    fattn_engine_free(e);
    char id[160];
    snprintf(id, sizeof id, "frontends.%s", c->id);
    fattn_test_mark(id);
}
END_TEST

/* nm -u over a static library: fail on any undefined symbol with `bad`. */
static void check_symbols(const char *lib, const char *bad, const char *need)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "nm -u '%s' 2>/dev/null", lib);
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "cannot run nm on %s", lib);
    char line[512];
    int nsym = 0;
    bool saw_need = false;
    while (fgets(line, sizeof line, p)) {
        if (strstr(line, " U "))
            nsym++;
        ck_assert_msg(strstr(line, bad) == NULL, "%s references %s", lib, line);
        if (strstr(line, need))
            saw_need = true;
    }
    int rc = pclose(p);
    ck_assert_msg(rc == 0, "nm failed on %s", lib);
    ck_assert_msg(nsym > 0 && saw_need, "nm listed nothing useful for %s", lib);
}

START_TEST(independence)
{
    check_symbols(FATTN_LEGACY_LIB, "fattn_split_", "fattn_engine_fwd");
    check_symbols(FATTN_SPLIT_LIB, "fattn_legacy_", "fattn_engine_fwd");
    fattn_test_mark("frontends.independence");
}
END_TEST

static void list_ids(void)
{
    for (int i = 0; i < tcase_count; i++)
        printf("frontends.%s\n", tcase_table[i].id);
    printf("frontends.independence\n");
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("frontends");
    TCase *tc = tcase_create("matrix");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, case_row, 0, tcase_count);
    suite_add_tcase(s, tc);
    TCase *ti = tcase_create("independence");
    tcase_set_timeout(ti, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(ti, independence);
    suite_add_tcase(s, ti);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
