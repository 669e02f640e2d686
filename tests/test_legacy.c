/* Suite "legacy": the legacy front end (lib/legacy) on its own: the RNG
 * advance and the saved rng_state, the saved list and the 33 attributes,
 * TE's zero-fills (in the runner's record of a legacy run), the refusals of
 * every support rule, misuse, and every matrix case through its calls (the
 * 36 grads; TE's refusals before the rng draw). The comparison with the
 * split is test_frontends.c's.
 */
#include <stdio.h>
#include <string.h>

#include "cases.h"
#include "fattn_test.h"
#include "fe_unit.h"
#include "runner.h"
#include "runtree.h"

static fattn_engine *engine2(void)
{
    fattn_engine *e = NULL;
    fattn_cpu_options o = {.threads = 2};
    ck_assert_int_eq(fattn_engine_init_cpu(&e, &o), FATTN_OK);
    return e;
}

static const tcase *find(const char *id)
{
    const tcase *c = tcase_find(id);
    ck_assert_msg(c != NULL, "no case %s", id);
    return c;
}

/* A sequence of forwards: rng_state offsets base, base+16, base+32, ... */
START_TEST(rng_sequence)
{
    const tcase *c = find("bwd.dropout.p01.f16");
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_legacy_ctx *ctx = NULL;
    ck_assert_int_eq(fattn_legacy_ctx_init(&ctx, e), FATTN_OK);
    fattn_rng_gen gen = {1000, 64};
    for (int i = 0; i < 4; i++) {
        fattn_tensor out, ml, g[FATTN_LEGACY_NGRADS];
        ck_assert_int_eq(fe_legacy_call_fwd_bwd(c, &b, ctx, &gen, &out, &ml, g), FATTN_OK);
        const int64_t *rs = ctx->tensor_objects[FATTN_LEGACY_SAVED_RNG_STATE].data;
        ck_assert_int_eq(rs[0], 1000);
        ck_assert_int_eq(rs[1], 64 + 16 * i);
        ck_assert_uint_eq(gen.offset, (uint64_t)(64 + 16 * (i + 1)));
    }
    fattn_legacy_ctx_free(ctx);
    tcase_teardown(&b);
    fattn_engine_free(e);
    fattn_test_mark("legacy.rng.sequence");
}
END_TEST

/* Backward uses the saved rng_state, not the generator's current state. */
START_TEST(rng_backward_saved)
{
    const tcase *c = find("bwd.dropout.p05.f16");
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_legacy_ctx *a = NULL, *x = NULL, *ref = NULL;
    ck_assert_int_eq(fattn_legacy_ctx_init(&a, e), FATTN_OK);
    ck_assert_int_eq(fattn_legacy_ctx_init(&x, e), FATTN_OK);
    ck_assert_int_eq(fattn_legacy_ctx_init(&ref, e), FATTN_OK);
    fattn_rng_gen gen = {77, 0}, gen_ref = {77, 0};
    fattn_tensor out, ml, ga[FATTN_LEGACY_NGRADS], gx[FATTN_LEGACY_NGRADS],
        gr[FATTN_LEGACY_NGRADS];
    /* forward a (offset 0), forward x (offset 16), then backward a */
    ck_assert_int_eq(fe_legacy_call_fwd(c, &b, a, &gen, &out, &ml), FATTN_OK);
    ck_assert_int_eq(fe_legacy_call_fwd_bwd(c, &b, x, &gen, &out, &ml, gx), FATTN_OK);
    ck_assert_int_eq(fattn_legacy_backward(a, &b.d_o, ga), FATTN_OK);
    ck_assert_int_eq(fe_legacy_call_fwd_bwd(c, &b, ref, &gen_ref, &out, &ml, gr), FATTN_OK);
    for (int i = FATTN_LEGACY_GRAD_DQ; i <= FATTN_LEGACY_GRAD_DV; i++) {
        ck_assert_msg(fe_same_bits(&ga[i], &gr[i]), "grad %d differs from the reference", i);
        ck_assert_msg(!fe_same_bits(&ga[i], &gx[i]), "grad %d ignores the rng_state", i);
    }
    fattn_legacy_ctx_free(a);
    fattn_legacy_ctx_free(x);
    fattn_legacy_ctx_free(ref);
    tcase_teardown(&b);
    fattn_engine_free(e);
    fattn_test_mark("legacy.rng.backward_saved");
}
END_TEST

/* The saved list and the attributes. */
static const char *const saved_cases[] = {"bwd.nomask.f16", "bwd.bias.1hss.f16",
                                          "bwd.softmax.learnable.f16", "bwd.max_logit.f16",
                                          "bwd.layout.thd_thd_thd.bf16"};

START_TEST(saved_list)
{
    const tcase *c = find(saved_cases[_i]);
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_legacy_ctx *ctx = NULL;
    ck_assert_int_eq(fattn_legacy_ctx_init(&ctx, e), FATTN_OK);
    fattn_rng_gen gen = {5, 0};
    fattn_tensor out, ml, g[FATTN_LEGACY_NGRADS];
    ck_assert_int_eq(fe_legacy_call_fwd_bwd(c, &b, ctx, &gen, &out, &ml, g), FATTN_OK);
    bool bias = c->bias == FATTN_BIAS_POST_SCALE_BIAS;
    bool sink = c->softmax != FATTN_SOFTMAX_VANILLA;
    const fattn_tensor *s = ctx->tensor_objects;
    ck_assert_int_eq(ctx->n_saved, 14 + bias + sink);
    for (int i = 0; i < 4; i++)
        ck_assert(fattn_tensor_is_empty(&s[i]));
    ck_assert(fattn_tensor_same(&s[4], &b.q));
    ck_assert(fattn_tensor_same(&s[5], &b.k));
    ck_assert(fattn_tensor_same(&s[6], &b.v));
    ck_assert(fattn_tensor_same(&s[7], &out));
    ck_assert(fattn_tensor_same(&s[8], &b.cu_q));
    ck_assert(fattn_tensor_same(&s[9], &b.cu_kv));
    ck_assert(fattn_tensor_is_empty(&b.cu_q_pad) ? fattn_tensor_is_empty(&s[10])
                                                 : fattn_tensor_same(&s[10], &b.cu_q_pad));
    ck_assert_int_eq(s[12].dtype, FATTN_DTYPE_FLOAT32);
    ck_assert_int_eq(s[13].dtype, FATTN_DTYPE_INT64);
    ck_assert_int_eq(s[13].shape[0], 2);
    if (bias)
        ck_assert(fattn_tensor_same(&s[14], &b.bias));
    if (sink)
        ck_assert(fattn_tensor_same(&s[ctx->n_saved - 1], &b.softmax_offset));
    /* attributes */
    /* fp8_meta None: get_fp8_recipe()'s default on Hopper (quantization.py:607-611) */
    ck_assert_int_eq(ctx->fp8_recipe, FATTN_FP8_RECIPE_DELAYED);
    ck_assert(!ctx->fp8);
    ck_assert_int_eq(ctx->nominal_dtype, c->dtype);
    ck_assert_int_eq(ctx->max_seqlen_q, c->sq);
    ck_assert_int_eq(ctx->max_seqlen_kv, c->skv);
    /* None as passed: TE keeps it in the ctx and fused_attn_bwd resolves it */
    ck_assert(isnan(ctx->attn_scale));
    ck_assert_int_eq(ctx->qkv_layout, c->layout);
    ck_assert_int_eq(ctx->dqkv_layout, c->layout);
    ck_assert_int_eq(ctx->o_format, fattn_layout_q_format(c->layout));
    ck_assert_int_eq(ctx->window_size[0], c->window[0]);
    ck_assert_int_eq(ctx->window_size[1], c->window[1]);
    ck_assert(ctx->bottom_right_diagonal == c->bottom_right);
    ck_assert_int_eq(ctx->fused_attention_backend, FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN);
    ck_assert(ctx->deterministic);
    char id[128];
    snprintf(id, sizeof id, "legacy.saved.%s", c->id);
    fattn_legacy_ctx_free(ctx);
    tcase_teardown(&b);
    fattn_engine_free(e);
    fattn_test_mark(id);
}
END_TEST

/* Attributes backward never reads are still set; None is kept for backward. */
START_TEST(attrs_carried)
{
    const tcase *c = find("bwd.causal_bottom_right.f16");
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_legacy_ctx *ctx = NULL;
    ck_assert_int_eq(fattn_legacy_ctx_init(&ctx, e), FATTN_OK);
    fattn_rng_gen gen = {5, 0};
    /* a current-scaling autocast that DPA's local_recipes override */
    fattn_fp8_meta meta = {.autocast_recipe = FATTN_FP8_RECIPE_CURRENT,
                           .n_local_recipes = 1,
                           .local_recipes = {FATTN_FP8_RECIPE_MXFP8}};
    fattn_tensor out, ml;
    fattn_status st = fattn_legacy_forward(
        ctx, true, c->sq, c->skv, &b.cu_q, &b.cu_kv, NULL, NULL, NULL, NULL, &b.q, &b.k, &b.v,
        NULL, 0.25f, 0.0f, false, c->layout, c->bias, c->mask, c->softmax, c->window, -1, &gen,
        FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN, false, false, &meta, NULL, false, NULL, true,
        true, 7, false, NULL, NULL, &out, &ml);
    ck_assert_msg(st == FATTN_OK, "%s", fattn_last_error());
    ck_assert_ptr_eq(ctx->fp8_meta, &meta);
    ck_assert_int_eq(ctx->fp8_recipe, FATTN_FP8_RECIPE_MXFP8); /* local_recipes[0] */
    ck_assert(ctx->is_output_fp8);
    ck_assert(ctx->bf16_backward);
    ck_assert(!ctx->fast_zero_fill);
    ck_assert_int_eq(ctx->layer_number, 7);
    ck_assert(ctx->attn_scale == 0.25f);
    ck_assert_int_eq(ctx->bottom_right_diagonal, -1); /* None kept, as 2.19.0's ctx */
    ck_assert(!ctx->deterministic);
    ck_assert(fattn_tensor_is_empty(&ml));
    fattn_legacy_ctx_free(ctx);
    tcase_teardown(&b);
    fattn_engine_free(e);
}
END_TEST

/* TE's zero-fills, as the runner records a legacy run of the table row:
 * THD O and THD dQ outside the valid tokens are 0, not the poison. */
static const int32_t *int32_data(const fh_h5_node *n)
{
    ck_assert_msg(n && n->is_dataset && n->dtype == FATTN_DTYPE_INT32 && n->ndim == 1,
                  "not an int32 vector");
    return n->data;
}

START_TEST(thd_zero_fill)
{
    const tcase *c = find("bwd.layout.thd_thd_thd.f16");
    fattn_engine *e = engine2();
    fh_run_opts o = {.impl = FH_IMPL_LEGACY, .engine = e, .until = FH_STATE_BACKWARD,
                        .poison = FH_POISON_PATTERN};
    fh_h5_node *run = NULL;
    ck_assert_msg(fh_run_case(tcase_spec_of(c), &o, &run) == FATTN_OK, "%s",
                  fattn_last_error());
    const fh_h5_node *cu = fh_h5_node_find(run, "inputs/cu_seqlens_q");
    const int32_t *seq = int32_data(cu);
    const int32_t *off = int32_data(fh_h5_node_find(run, "inputs/cu_seqlens_q_padded"));
    int64_t nb = cu->shape[0] - 1;
    ck_assert_int_eq(nb, c->b);
    const fh_h5_node *ts[2] = {fh_h5_node_find(run, "forward/out"),
                                  fh_h5_node_find(run, "backward/dq")};
    int gaps = 0;
    for (int k = 0; k < 2; k++) {
        const fh_h5_node *n = ts[k];
        ck_assert_msg(n && n->is_dataset && n->ndim == 3 && n->dtype == FATTN_DTYPE_FLOAT16,
                      "tensor %d: not a THD float16 dataset", k);
        int64_t row = n->shape[1] * n->shape[2];
        const uint16_t *p = n->data;
        for (int64_t t = 0; t < n->shape[0]; t++) {
            bool valid = false;
            for (int64_t bi = 0; bi < nb; bi++)
                if (t >= off[bi] && t < off[bi] + (seq[bi + 1] - seq[bi]))
                    valid = true;
            if (valid)
                continue;
            gaps++;
            for (int64_t x = 0; x < row; x++)
                ck_assert_uint_eq(p[t * row + x], 0);
        }
    }
    ck_assert_int_gt(gaps, 0);
    fh_h5_node_free(run);
    fattn_engine_free(e);
    fattn_test_mark("legacy.thd_zero_fill");
}
END_TEST

/* Each support rule refuses through the legacy forward. */
START_TEST(rule_refusal)
{
    int n = 0;
    const fattn_support_rule *rules = fattn_support_rules(&n);
    const fattn_support_rule *r = &rules[_i];
    fattn_engine *e = engine2();
    fe_spec s = fe_spec_for_rule(r->id);
    fattn_status st = fe_legacy_spec(&s, e);
    if (r->stage == FATTN_SUPPORT_AT_BACKWARD) {
        /* an engine's backward-only gap: the forward is not refused by it (it
         * reaches the engine, which the fake one refuses to run) */
        char rule[128];
        snprintf(rule, sizeof rule, "rule %s:", r->id);
        ck_assert_msg(st != FATTN_E_UNSUPPORTED && !strstr(fattn_last_error(), rule),
                      "rule %s refused the forward: %s", r->id, fattn_last_error());
    } else if (!fe_rule_at_reference(r)) {
        /* TE's rule for a cuDNN the reference platform does not have: the
         * front ends, which ask for the reference's, never refuse with it */
        char rule[128];
        snprintf(rule, sizeof rule, "rule %s:", r->id);
        ck_assert_msg(!strstr(fattn_last_error(), rule), "rule %s refused at the reference "
                      "platform: %s", r->id, fattn_last_error());
    } else if (!fe_rule_at_front_end(r->id)) {
        /* a gap the front end's own argument checks refuse first */
        ck_assert_msg(st != FATTN_OK && strncmp(fattn_last_error(), "rule ", 5) != 0,
                      "rule %s: got %s (%s)", r->id, fattn_status_name(st), fattn_last_error());
    } else {
        /* the rule itself, or TE's own rule that refuses the gap's case first */
        const fattn_support_rule *front = fattn_support_rule_find(fe_rule_at_front_end(r->id));
        ck_assert_ptr_nonnull(front);
        ck_assert_msg(st == front->status, "rule %s: got %s (%s)", r->id,
                      fattn_status_name(st), fattn_last_error());
        char want[128];
        snprintf(want, sizeof want, "rule %s:", front->id);
        ck_assert_msg(strncmp(fattn_last_error(), want, strlen(want)) == 0, "%s",
                      fattn_last_error());
    }
    fattn_engine_free(e);
    char id[128];
    snprintf(id, sizeof id, "legacy.refuses.%s", r->id);
    fattn_test_mark(id);
}
END_TEST

START_TEST(default_spec_runs)
{
    fattn_engine *e = engine2();
    fe_spec s = fe_spec_default();
    ck_assert_msg(fe_legacy_spec(&s, e) == FATTN_OK, "%s", fattn_last_error());
    fattn_engine_free(e);
}
END_TEST

/* A second backward on one ctx raises in TE 2.19.0 (restore_from_func_ctx,
 * quantized_tensor.py:344-350); a new forward saves again. */
START_TEST(second_backward)
{
    fattn_engine *e = engine2();
    const tcase *c = find("bwd.nomask.f16");
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_legacy_ctx *ctx = NULL;
    ck_assert_int_eq(fattn_legacy_ctx_init(&ctx, e), FATTN_OK);
    fattn_rng_gen gen = {5, 0};
    fattn_tensor out, ml, g[FATTN_LEGACY_NGRADS];
    ck_assert_int_eq(fe_legacy_call_fwd_bwd(c, &b, ctx, &gen, &out, &ml, g), FATTN_OK);
    ck_assert_int_eq(fattn_legacy_backward(ctx, &b.d_o, g), FATTN_E_STATE);
    ck_assert_msg(strstr(fattn_last_error(), "ctx must have .tensor_objects"), "%s",
                  fattn_last_error());
    for (int i = 0; i < FATTN_LEGACY_NGRADS; i++)
        ck_assert(fattn_tensor_is_empty(&g[i]));
    ck_assert_int_eq(fe_legacy_call_fwd_bwd(c, &b, ctx, &gen, &out, &ml, g), FATTN_OK);
    ck_assert(!fattn_tensor_is_empty(&g[FATTN_LEGACY_GRAD_DQ]));
    fattn_legacy_ctx_free(ctx);
    tcase_teardown(&b);
    fattn_engine_free(e);
    fattn_test_mark("legacy.second_backward");
}
END_TEST

START_TEST(misuse)
{
    fattn_engine *e = engine2();
    const tcase *c = find("bwd.nomask.f16");
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_legacy_ctx *ctx = NULL;
    ck_assert_int_eq(fattn_legacy_ctx_init(&ctx, NULL), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fattn_legacy_ctx_init(&ctx, e), FATTN_OK);
    fattn_tensor g[FATTN_LEGACY_NGRADS], out, ml;
    ck_assert_int_eq(fattn_legacy_backward(ctx, &b.d_o, g), FATTN_E_STATE);
    /* rng_gen None */
    ck_assert_int_eq(fattn_legacy_forward(ctx, true, c->sq, c->skv, &b.cu_q, &b.cu_kv, NULL,
                                          NULL, NULL, NULL, &b.q, &b.k, &b.v, NULL,
                                          FATTN_LEGACY_SCALE_NONE, 0.0f, true, c->layout,
                                          c->bias, c->mask, c->softmax, c->window, -1, NULL,
                                          FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN, false, false,
                                          NULL, NULL, true, NULL, false, false, 1, false, NULL,
                                          NULL, &out, &ml),
                     FATTN_E_INVALID_ARG);
    /* No_Backend raises in fused_attn_fwd */
    fattn_rng_gen gen = {1, 0};
    ck_assert_int_eq(fattn_legacy_forward(ctx, true, c->sq, c->skv, &b.cu_q, &b.cu_kv, NULL,
                                          NULL, NULL, NULL, &b.q, &b.k, &b.v, NULL,
                                          FATTN_LEGACY_SCALE_NONE, 0.0f, true, c->layout,
                                          c->bias, c->mask, c->softmax, c->window, -1, &gen,
                                          FATTN_TE_BACKEND_NO_BACKEND, false, false, NULL, NULL,
                                          true, NULL, false, false, 1, false, NULL, NULL, &out,
                                          &ml),
                     FATTN_E_INVALID_CASE);
    /* use_FAv2_bwd: forward runs, backward is unsupported */
    ck_assert_int_eq(fattn_legacy_forward(ctx, true, c->sq, c->skv, &b.cu_q, &b.cu_kv, NULL,
                                          NULL, NULL, NULL, &b.q, &b.k, &b.v, NULL,
                                          FATTN_LEGACY_SCALE_NONE, 0.0f, true, c->layout,
                                          c->bias, c->mask, c->softmax, c->window, -1, &gen,
                                          FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN, true, false,
                                          NULL, NULL, true, NULL, false, false, 1, false, NULL,
                                          NULL, &out, &ml),
                     FATTN_OK);
    ck_assert_int_eq(fattn_legacy_backward(ctx, &b.d_o, g), FATTN_E_UNSUPPORTED);
    ck_assert_int_eq(fattn_legacy_backward(ctx, NULL, g), FATTN_E_INVALID_ARG);
    fattn_legacy_ctx_free(ctx);
    tcase_teardown(&b);
    fattn_engine_free(e);
}
END_TEST

/* Every matrix case through legacy's own calls (test_frontends.c compares
 * the recorded runs): a case TE refuses is refused with the support table's
 * status before the rng_state is drawn; any other draws once, saves it, and
 * returns 36 grads of which only dq, dk, dv and the case's d_bias and
 * d_softmax_offset are filled (none for inference). */
START_TEST(case_calls)
{
    const tcase *c = &tcase_table[_i];
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_msg(tcase_setup(c, &b) == FATTN_OK, "%s: %s", c->id, fattn_last_error());
    fattn_legacy_ctx *ctx = NULL;
    ck_assert_int_eq(fattn_legacy_ctx_init(&ctx, e), FATTN_OK);
    fattn_rng_gen gen = {c->seed + 7, 32};
    fattn_tensor out, ml, g[FATTN_LEGACY_NGRADS];
    fattn_status st = fe_legacy_call_fwd_bwd(c, &b, ctx, &gen, &out, &ml, g);
    fattn_support_query q = fe_case_query(c);
    fattn_status expect = fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL);
    ck_assert_msg(st == expect, "%s: %s, want %s (%s)", c->id, fattn_status_name(st),
                  fattn_status_name(expect), fattn_last_error());
    if (expect != FATTN_OK) {
        ck_assert_uint_eq(gen.offset, 32);
    } else {
        ck_assert_uint_eq(gen.offset, 48);
        const fattn_tensor *rs = &ctx->tensor_objects[FATTN_LEGACY_SAVED_RNG_STATE];
        ck_assert_int_eq(((const int64_t *)rs->data)[0], (int64_t)(c->seed + 7));
        ck_assert_int_eq(((const int64_t *)rs->data)[1], 32);
        bool has_bias = c->bias == FATTN_BIAS_POST_SCALE_BIAS;
        bool has_sink = c->softmax != FATTN_SOFTMAX_VANILLA;
        for (int i = 0; i < FATTN_LEGACY_NGRADS; i++) {
            bool want = c->training &&
                        (i == FATTN_LEGACY_GRAD_DQ || i == FATTN_LEGACY_GRAD_DK ||
                         i == FATTN_LEGACY_GRAD_DV ||
                         (i == FATTN_LEGACY_GRAD_DBIAS && has_bias) ||
                         (i == FATTN_LEGACY_GRAD_DSOFTMAX_OFFSET && has_sink));
            ck_assert_msg(fattn_tensor_is_empty(&g[i]) == !want, "%s: grad %d", c->id, i);
        }
    }
    fattn_legacy_ctx_free(ctx);
    tcase_teardown(&b);
    fattn_engine_free(e);
    char id[160];
    snprintf(id, sizeof id, "legacy.case.%s", c->id);
    fattn_test_mark(id);
}
END_TEST

static void list_ids(void)
{
    printf("legacy.rng.sequence\nlegacy.rng.backward_saved\nlegacy.thd_zero_fill\n"
           "legacy.second_backward\n");
    for (int i = 0; i < FE_NROWS(saved_cases); i++)
        printf("legacy.saved.%s\n", saved_cases[i]);
    int n = 0;
    const fattn_support_rule *rules = fattn_support_rules(&n);
    for (int i = 0; i < n; i++)
        printf("legacy.refuses.%s\n", rules[i].id);
    for (int i = 0; i < tcase_count; i++)
        printf("legacy.case.%s\n", tcase_table[i].id);
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("legacy");
    TCase *tc = tcase_create("legacy");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    int n = 0;
    fattn_support_rules(&n);
    tcase_add_test(tc, rng_sequence);
    tcase_add_test(tc, rng_backward_saved);
    tcase_add_loop_test(tc, saved_list, 0, FE_NROWS(saved_cases));
    tcase_add_test(tc, attrs_carried);
    tcase_add_test(tc, thd_zero_fill);
    tcase_add_loop_test(tc, rule_refusal, 0, n);
    tcase_add_test(tc, default_spec_runs);
    tcase_add_test(tc, misuse);
    tcase_add_test(tc, second_backward);
    tcase_add_loop_test(tc, case_calls, 0, tcase_count);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
