/* Suite "split": the split front end (lib/split) on its own: required
 * fields, the fixed slots and dedup for every saved-tensor variant (FP8
 * ones with FP8-typed tensors), FP8 execution refused, the RNG advance and
 * the saved rng_state, the refusals of every support rule, the layout
 * reload helper, the 6 grads of the wrapper, and every matrix case through
 * the wrapper (grads, dedup records, no aliasing; TE's refusals before the
 * rng draw). The comparison with legacy is test_frontends.c's.
 */
#include <stdio.h>
#include <string.h>

#include "cases.h"
#include "fattn_test.h"
#include "fe_unit.h"

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

/* ---- required fields --------------------------------------------------- */

static const char *const fwd_fields[] = {
    "engine",       "max_seqlen_q",   "max_seqlen_kv",  "is_training",
    "qkv_layout",   "attn_bias_type", "attn_mask_type", "softmax_type",
    "window_size",  "fused_attention_backend", "rng_gen"};

static void unset_fwd(fattn_fwd_args *a, const char *f)
{
    fattn_fwd_args d;
    fattn_fwd_args_init(&d);
    if (!strcmp(f, "engine")) a->engine = d.engine;
    else if (!strcmp(f, "max_seqlen_q")) a->max_seqlen_q = d.max_seqlen_q;
    else if (!strcmp(f, "max_seqlen_kv")) a->max_seqlen_kv = d.max_seqlen_kv;
    else if (!strcmp(f, "is_training")) a->is_training = d.is_training;
    else if (!strcmp(f, "qkv_layout")) a->qkv_layout = d.qkv_layout;
    else if (!strcmp(f, "attn_bias_type")) a->attn_bias_type = d.attn_bias_type;
    else if (!strcmp(f, "attn_mask_type")) a->attn_mask_type = d.attn_mask_type;
    else if (!strcmp(f, "softmax_type")) a->softmax_type = d.softmax_type;
    else if (!strcmp(f, "window_size")) a->window_size[1] = d.window_size[1];
    else if (!strcmp(f, "fused_attention_backend"))
        a->fused_attention_backend = d.fused_attention_backend;
    else if (!strcmp(f, "rng_gen")) a->rng_gen = d.rng_gen;
}

START_TEST(missing_fwd_field)
{
    const char *f = fwd_fields[_i];
    const tcase *c = find("bwd.nomask.f16");
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_rng_gen gen = {1, 0};
    fattn_fwd_args a;
    fe_split_fwd_args_of(c, &b, e, &gen, &a);
    fattn_split_fwd_result res;
    ck_assert_int_eq(fattn_split_forward_impl(&a, &b.q, &b.k, &b.v, NULL, NULL, &res), FATTN_OK);
    fattn_split_fwd_result_free(&res);
    unset_fwd(&a, f);
    ck_assert_int_eq(fattn_split_forward_impl(&a, &b.q, &b.k, &b.v, NULL, NULL, &res),
                     FATTN_E_MISSING_FIELD);
    char want[96];
    snprintf(want, sizeof want, "fattn_fwd_args.%s is unset", f);
    ck_assert_str_eq(fattn_last_error(), want);
    fattn_split_fwd_result_free(&res);
    tcase_teardown(&b);
    fattn_engine_free(e);
    char id[96];
    snprintf(id, sizeof id, "split.missing.fwd.%s", f);
    fattn_test_mark(id);
}
END_TEST

static const char *const bwd_fields[] = {
    "engine",      "d_out",      "nominal_dtype",  "max_seqlen_q",   "max_seqlen_kv",
    "qkv_layout", "o_format",       "dqkv_layout",    "attn_bias_type",
    "attn_mask_type", "softmax_type", "window_size",
    "fused_attention_backend", "softmax_stats", "rng_state", "aux_bias", "q", "k", "v", "out"};

static void unset_bwd(fattn_bwd_args *a, const char *f)
{
    fattn_bwd_args d;
    fattn_bwd_args_init(&d);
#define UNSET(name)                                                            \
    if (!strcmp(f, #name))                                                     \
        a->name = d.name;
    UNSET(engine)
    UNSET(d_out)
    UNSET(nominal_dtype)
    UNSET(max_seqlen_q)
    UNSET(max_seqlen_kv)
    UNSET(qkv_layout)
    UNSET(o_format)
    UNSET(dqkv_layout)
    UNSET(attn_bias_type)
    UNSET(attn_mask_type)
    UNSET(softmax_type)
    UNSET(fused_attention_backend)
    UNSET(softmax_stats)
    UNSET(rng_state)
    UNSET(aux_bias)
    UNSET(q)
    UNSET(k)
    UNSET(v)
    UNSET(out)
#undef UNSET
    if (!strcmp(f, "window_size"))
        a->window_size[0] = d.window_size[0];
}

START_TEST(missing_bwd_field)
{
    const char *f = bwd_fields[_i];
    const tcase *c = find("bwd.bias.1hss.f16");
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_rng_gen gen = {1, 0};
    fattn_fwd_args a;
    fe_split_fwd_args_of(c, &b, e, &gen, &a);
    a.q = b.q, a.k = b.k, a.v = b.v, a.attn_bias = b.bias;
    fattn_split_fwd_result res;
    ck_assert_int_eq(fattn_split_forward_impl(&a, &b.q, &b.k, &b.v, &b.bias, NULL, &res),
                     FATTN_OK);
    fattn_bwd_args bwd;
    fattn_split_saved saved;
    ck_assert_int_eq(
        fattn_split_setup_ctx(&bwd, &a, &res.out, &res.ctx_attrs, &res.to_save, &saved),
        FATTN_OK);
    fattn_split_setup_saved_tensors(&bwd, &saved);
    bwd.d_out = b.d_o;
    fattn_split_grads g;
    ck_assert_int_eq(fattn_split_backward_impl(&bwd, &g), FATTN_OK);
    fattn_split_grads_free(&g);
    unset_bwd(&bwd, f);
    ck_assert_int_eq(fattn_split_backward_impl(&bwd, &g), FATTN_E_MISSING_FIELD);
    char want[96];
    snprintf(want, sizeof want, "fattn_bwd_args.%s is unset", f);
    ck_assert_str_eq(fattn_last_error(), want);
    fattn_split_grads_free(&g);
    fattn_split_fwd_result_free(&res);
    tcase_teardown(&b);
    fattn_engine_free(e);
    char id[96];
    snprintf(id, sizeof id, "split.missing.bwd.%s", f);
    fattn_test_mark(id);
}
END_TEST

/* ---- slots and dedup for every saved-tensor variant ------------------- */

/* row = variant (4) x bias (2) x sink (2) x fp8 inputs (2) */
#define DEDUP_ROWS 32

static void alloc4(fattn_tensor *t, fattn_dtype dt, int64_t a, int64_t b2, int64_t c,
                   int64_t d)
{
    int64_t s[4] = {a, b2, c, d};
    ck_assert_int_eq(fattn_tensor_alloc(t, dt, 4, s), FATTN_OK);
}

static const char *const variant_names[] = {"f16", "fp8_o_f16", "fp8_o_fp8", "fp8_bwd_f16"};

START_TEST(dedup_variant)
{
    fattn_split_save_variant variant = (fattn_split_save_variant)(_i / 8);
    bool bias = (_i / 4) % 2, sink = (_i / 2) % 2, in_fp8 = _i % 2;
    if (variant == FATTN_SPLIT_SAVE_F16)
        in_fp8 = false; /* the f16 path has f16 inputs */
    fattn_tensor q8, k8, v8, o8, qf, kf, vf, of, cu[4], st, rng, bt, off;
    alloc4(&q8, FATTN_DTYPE_FLOAT8_E4M3FN, 2, 8, 2, 16);
    alloc4(&k8, FATTN_DTYPE_FLOAT8_E4M3FN, 2, 8, 2, 16);
    alloc4(&v8, FATTN_DTYPE_FLOAT8_E4M3FN, 2, 8, 2, 16);
    alloc4(&o8, FATTN_DTYPE_FLOAT8_E4M3FN, 2, 8, 2, 16);
    alloc4(&qf, FATTN_DTYPE_BFLOAT16, 2, 8, 2, 16);
    alloc4(&kf, FATTN_DTYPE_BFLOAT16, 2, 8, 2, 16);
    alloc4(&vf, FATTN_DTYPE_BFLOAT16, 2, 8, 2, 16);
    alloc4(&of, FATTN_DTYPE_BFLOAT16, 2, 8, 2, 16);
    int64_t three = 3, two = 2;
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(fattn_tensor_alloc(&cu[i], FATTN_DTYPE_INT32, 1, &three), FATTN_OK);
    alloc4(&st, FATTN_DTYPE_FLOAT32, 2, 2, 8, 1);
    ck_assert_int_eq(fattn_tensor_alloc(&rng, FATTN_DTYPE_INT64, 1, &two), FATTN_OK);
    bt = off = fattn_tensor_empty();
    if (bias)
        alloc4(&bt, FATTN_DTYPE_BFLOAT16, 1, 2, 8, 8);
    if (sink)
        alloc4(&off, FATTN_DTYPE_FLOAT32, 1, 2, 1, 1);

    /* The inputs; the forward returns out_fp8 (fp8_output) on the O-in-FP8
     * path, out_f16 otherwise. */
    fattn_tensor in_q = in_fp8 ? q8 : qf, in_k = in_fp8 ? k8 : kf, in_v = in_fp8 ? v8 : vf;
    fattn_tensor out = variant == FATTN_SPLIT_SAVE_FP8_O_FP8 ? o8 : of;
    /* What forward hands to save: f16 q/k/v are the inputs unless they were
     * FP8 (then dequantized copies, here the bf16 tensors with in_fp8). */
    fattn_tensor deq_q, deq_k, deq_v;
    alloc4(&deq_q, FATTN_DTYPE_BFLOAT16, 2, 8, 2, 16);
    alloc4(&deq_k, FATTN_DTYPE_BFLOAT16, 2, 8, 2, 16);
    alloc4(&deq_v, FATTN_DTYPE_BFLOAT16, 2, 8, 2, 16);
    fattn_tensor fp8s[4] = {q8, k8, v8, o8};
    fattn_tensor f16s[4] = {in_fp8 ? deq_q : qf, in_fp8 ? deq_k : kf, in_fp8 ? deq_v : vf, of};
    fattn_split_to_save ts, before;
    ck_assert_int_eq(fattn_split_fill_to_save(variant, fp8s, f16s, &st, &rng, &ts), FATTN_OK);
    before = ts;

    /* Which slots the variant fills (TE 2.20.2 backends.py:1842-1849): the
     * entries stand for slots, the aux bias and offset entries are None. */
    bool has[FATTN_SPLIT_NSLOTS] = {false};
    has[FATTN_SPLIT_SLOT_SOFTMAX_STATS] = has[FATTN_SPLIT_SLOT_RNG_STATE] = true;
    switch (variant) {
    case FATTN_SPLIT_SAVE_F16:
    case FATTN_SPLIT_SAVE_FP8_BWD_F16:
        has[FATTN_SPLIT_SLOT_Q] = has[FATTN_SPLIT_SLOT_K] = has[FATTN_SPLIT_SLOT_V] =
            has[FATTN_SPLIT_SLOT_OUT] = true;
        break;
    case FATTN_SPLIT_SAVE_FP8_O_F16:
        has[FATTN_SPLIT_SLOT_Q_FP8] = has[FATTN_SPLIT_SLOT_K_FP8] =
            has[FATTN_SPLIT_SLOT_V_FP8] = has[FATTN_SPLIT_SLOT_OUT] = true;
        break;
    case FATTN_SPLIT_SAVE_FP8_O_FP8:
        has[FATTN_SPLIT_SLOT_Q_FP8] = has[FATTN_SPLIT_SLOT_K_FP8] =
            has[FATTN_SPLIT_SLOT_V_FP8] = has[FATTN_SPLIT_SLOT_OUT_FP8] = true;
        break;
    }
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++) {
        fattn_split_slot slot = fattn_split_to_save_slot(i);
        ck_assert_msg(fattn_tensor_is_empty(&ts.t[i]) == !has[slot], "slot %s",
                      fattn_split_slot_name(slot));
    }

    fattn_split_source sf[FATTN_SPLIT_NTO_SAVE];
    fattn_split_dedup(&ts, &in_q, &in_k, &in_v, &out, bias, sink, sf);

    /* Expected sources: only real identity matches, the aux two by name. */
    fattn_split_source want[FATTN_SPLIT_NSLOTS] = {FATTN_SPLIT_SRC_NONE};
    if (has[FATTN_SPLIT_SLOT_Q_FP8] && in_fp8) {
        want[FATTN_SPLIT_SLOT_Q_FP8] = FATTN_SPLIT_SRC_Q;
        want[FATTN_SPLIT_SLOT_K_FP8] = FATTN_SPLIT_SRC_K;
        want[FATTN_SPLIT_SLOT_V_FP8] = FATTN_SPLIT_SRC_V;
    }
    if (has[FATTN_SPLIT_SLOT_OUT_FP8])
        want[FATTN_SPLIT_SLOT_OUT_FP8] = FATTN_SPLIT_SRC_OUT;
    if (has[FATTN_SPLIT_SLOT_Q] && !in_fp8) {
        want[FATTN_SPLIT_SLOT_Q] = FATTN_SPLIT_SRC_Q;
        want[FATTN_SPLIT_SLOT_K] = FATTN_SPLIT_SRC_K;
        want[FATTN_SPLIT_SLOT_V] = FATTN_SPLIT_SRC_V;
    }
    if (has[FATTN_SPLIT_SLOT_OUT] && variant != FATTN_SPLIT_SAVE_FP8_O_FP8)
        want[FATTN_SPLIT_SLOT_OUT] = FATTN_SPLIT_SRC_OUT;
    if (bias)
        want[FATTN_SPLIT_SLOT_AUX_BIAS] = FATTN_SPLIT_SRC_ATTN_BIAS;
    if (sink)
        want[FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET] = FATTN_SPLIT_SRC_SOFTMAX_OFFSET;
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++) {
        fattn_split_slot slot = fattn_split_to_save_slot(i);
        ck_assert_msg(sf[i] == want[slot], "slot %s: source %d, want %d",
                      fattn_split_slot_name(slot), (int)sf[i], (int)want[slot]);
        /* A recorded entry is emptied; any other keeps what it had. */
        if (want[slot] != FATTN_SPLIT_SRC_NONE)
            ck_assert(fattn_tensor_is_empty(&ts.t[i]));
        else
            ck_assert(fe_same_bits(&ts.t[i], &before.t[i]) &&
                      (fattn_tensor_is_empty(&ts.t[i]) ||
                       fattn_tensor_same(&ts.t[i], &before.t[i])));
    }

    /* setup_ctx returns the 16: every deduplicated tensor back, the
     * cu_seqlens from the args, the aux two from the inputs; the unpack
     * puts each into its field. */
    fattn_fwd_args fa;
    fattn_fwd_args_init(&fa);
    fa.q = in_q, fa.k = in_k, fa.v = in_v, fa.attn_bias = bt, fa.softmax_offset = off;
    fa.cu_seqlens_q = cu[0], fa.cu_seqlens_kv = cu[1];
    fa.cu_seqlens_q_padded = cu[2], fa.cu_seqlens_kv_padded = cu[3];
    fattn_split_ctx_attrs ca;
    memset(&ca, 0, sizeof ca);
    memcpy(ca.saved_from, sf, sizeof sf);
    fattn_bwd_args bwd;
    fattn_split_saved saved;
    ck_assert_int_eq(fattn_split_setup_ctx(&bwd, &fa, &out, &ca, &ts, &saved), FATTN_OK);
    ck_assert(fattn_tensor_is_empty(&bwd.q) && fattn_tensor_is_empty(&bwd.softmax_stats));
    fattn_split_setup_saved_tensors(&bwd, &saved);
    fattn_tensor wantt[FATTN_SPLIT_NSLOTS];
    for (int i = 0; i < FATTN_SPLIT_NSLOTS; i++)
        wantt[i] = fattn_tensor_empty();
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++)
        wantt[fattn_split_to_save_slot(i)] = before.t[i];
    for (int i = 0; i < 4; i++)
        wantt[FATTN_SPLIT_SLOT_CU_SEQLENS_Q + i] = cu[i];
    wantt[FATTN_SPLIT_SLOT_AUX_BIAS] = bt;
    wantt[FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET] = off;
    const fattn_tensor *got[FATTN_SPLIT_NSLOTS] = {
        &bwd.q_fp8,         &bwd.k_fp8,         &bwd.v_fp8,
        &bwd.out_fp8,       &bwd.q,             &bwd.k,
        &bwd.v,             &bwd.out,           &bwd.cu_seqlens_q,
        &bwd.cu_seqlens_kv, &bwd.cu_seqlens_q_padded, &bwd.cu_seqlens_kv_padded,
        &bwd.softmax_stats, &bwd.rng_state,     &bwd.aux_bias,
        &bwd.aux_softmax_offset};
    for (int i = 0; i < FATTN_SPLIT_NSLOTS; i++) {
        if (fattn_tensor_is_empty(&wantt[i]))
            ck_assert(fattn_tensor_is_empty(got[i]) && fattn_tensor_is_empty(&saved.t[i]));
        else
            ck_assert_msg(fattn_tensor_same(got[i], &wantt[i]) &&
                              fattn_tensor_same(&saved.t[i], &wantt[i]),
                          "slot %s not restored", fattn_split_slot_name((fattn_split_slot)i));
    }
    if (has[FATTN_SPLIT_SLOT_Q_FP8]) /* FP8-typed slots really are FP8 */
        ck_assert_int_eq(wantt[FATTN_SPLIT_SLOT_Q_FP8].dtype, FATTN_DTYPE_FLOAT8_E4M3FN);
    if (has[FATTN_SPLIT_SLOT_OUT_FP8])
        ck_assert_int_eq(wantt[FATTN_SPLIT_SLOT_OUT_FP8].dtype, FATTN_DTYPE_FLOAT8_E4M3FN);

    fattn_tensor *own[] = {&q8, &k8, &v8, &o8, &qf, &kf, &vf, &of, &cu[0], &cu[1], &cu[2],
                           &cu[3], &st, &rng, &bt, &off, &deq_q, &deq_k, &deq_v};
    for (int i = 0; i < FE_NROWS(own); i++)
        fattn_tensor_free(own[i]);
    char id[128];
    snprintf(id, sizeof id, "split.dedup.%s.%s.%s.%s", variant_names[variant],
             bias ? "bias" : "no_bias", sink ? "sink" : "vanilla", in_fp8 ? "in_fp8" : "in_f16");
    fattn_test_mark(id);
}
END_TEST

/* TE 2.20.2 backends.py:1830-1843: each entry is checked against its own
 * source only. Row = entry member (q, k, v, out) x source member: the
 * entry holds that source's tensor, and is deduplicated only on the
 * diagonal (an earlier rule matched every entry against every source). */
START_TEST(dedup_own_source_only)
{
    int member = _i / 4, holds = _i % 4;
    static const fattn_split_source names[4] = {FATTN_SPLIT_SRC_Q, FATTN_SPLIT_SRC_K,
                                                FATTN_SPLIT_SRC_V, FATTN_SPLIT_SRC_OUT};
    static const char *const mn[4] = {"q", "k", "v", "out"};
    fattn_tensor src[4], st, rng;
    for (int i = 0; i < 4; i++)
        alloc4(&src[i], FATTN_DTYPE_BFLOAT16, 2, 8, 2, 16);
    alloc4(&st, FATTN_DTYPE_FLOAT32, 2, 2, 8, 1);
    int64_t two = 2;
    ck_assert_int_eq(fattn_tensor_alloc(&rng, FATTN_DTYPE_INT64, 1, &two), FATTN_OK);
    fattn_tensor none4[4] = {fattn_tensor_empty(), fattn_tensor_empty(), fattn_tensor_empty(),
                             fattn_tensor_empty()};
    fattn_tensor f16[4];
    for (int i = 0; i < 4; i++)
        f16[i] = none4[i];
    f16[member] = src[holds];
    fattn_split_to_save ts;
    ck_assert_int_eq(fattn_split_fill_to_save(FATTN_SPLIT_SAVE_F16, none4, f16, &st, &rng, &ts),
                     FATTN_OK);
    fattn_split_source sf[FATTN_SPLIT_NTO_SAVE];
    fattn_split_dedup(&ts, &src[0], &src[1], &src[2], &src[3], false, false, sf);
    fattn_split_source want = member == holds ? names[member] : FATTN_SPLIT_SRC_NONE;
    ck_assert_msg(sf[4 + member] == want, "entry %s holding %s: source %d, want %d", mn[member],
                  mn[holds], (int)sf[4 + member], (int)want);
    ck_assert(fattn_tensor_is_empty(&ts.t[4 + member]) == (member == holds));
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++)
        if (i != 4 + member)
            ck_assert_int_eq(sf[i], FATTN_SPLIT_SRC_NONE);
    for (int i = 0; i < 4; i++)
        fattn_tensor_free(&src[i]);
    fattn_tensor_free(&st);
    fattn_tensor_free(&rng);
    char id[96];
    snprintf(id, sizeof id, "split.dedup_own_source.%s_holds_%s", mn[member], mn[holds]);
    fattn_test_mark(id);
}
END_TEST

/* Both front ends test the engine's own gap rows at the cuDNN it loaded:
 * return_max_logit on a cuDNN engine is refused below 9.21 and handed to
 * the engine (the fake one, which must not run: E_INTERNAL) on 9.28.1. */
START_TEST(engine_gap_at_loaded_cudnn)
{
    fattn_engine *e = engine2();
    fe_spec s = fe_spec_for_rule("max_logit_cudnn");
    ck_assert(s.cudnn && s.return_max_logit);
    ck_assert_int_eq(fe_split_spec(&s, e), FATTN_E_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "rule max_logit_cudnn"));
    ck_assert_int_eq(fe_legacy_spec(&s, e), FATTN_E_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "rule max_logit_cudnn"));
    s.cudnn_928 = true;
    ck_assert_int_eq(fe_split_spec(&s, e), FATTN_E_INTERNAL);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "must not run"));
    ck_assert_int_eq(fe_legacy_spec(&s, e), FATTN_E_INTERNAL);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "must not run"));
    fattn_engine_free(e);
}
END_TEST

/* FP8 execution on an engine without it is refused with a message; FP8
 * codes with fp8 off (Float8Tensors on the f16 path) are not modelled,
 * refused by the front end before any engine. */
START_TEST(fp8_unsupported)
{
    fattn_engine *e = engine2();
    fattn_engine no_fp8;
    fe_fake_no_fp8(&no_fp8);
    fe_spec s = fe_spec_default();
    s.fp8 = true;
    s.d = s.dv = 128;
    ck_assert_int_eq(fe_split_spec(&s, &no_fp8), FATTN_E_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "no FP8 attention"));
    s = fe_spec_default();
    s.dtype = FATTN_DTYPE_FLOAT8_E4M3FN;
    ck_assert_int_eq(fe_split_spec(&s, e), FATTN_E_NOT_MODELLED);
    ck_assert_int_eq(fe_legacy_spec(&s, e), FATTN_E_NOT_MODELLED);

    const tcase *c = find("bwd.nomask.f16");
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_split_func_ctx *ctx = NULL;
    ck_assert_int_eq(fattn_split_func_ctx_init(&ctx), FATTN_OK);
    fattn_rng_gen gen = {1, 0};
    fattn_tensor out, ml, g6[6];
    fattn_fwd_args args;
    fe_split_fwd_args_of(c, &b, e, &gen, &args);
    ck_assert_int_eq(fattn_split_func_forward(ctx, &b.q, &b.k, &b.v, NULL, NULL, &args, &out,
                                              &ml),
                     FATTN_OK);
    ctx->bwd.fp8 = true; /* an FP8 backward without its quantizers */
    ck_assert_int_eq(fattn_split_func_backward(ctx, &b.d_o, g6), FATTN_E_MISSING_FIELD);
    fattn_split_func_ctx_free(ctx);
    tcase_teardown(&b);
    fattn_engine_free(e);
    fattn_test_mark("split.fp8_unsupported");
}
END_TEST

/* ---- RNG ----------------------------------------------------------------- */

START_TEST(rng_sequence)
{
    const tcase *c = find("bwd.dropout.p01.f16");
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_rng_gen gen = {1000, 64};
    fattn_fwd_args a;
    fe_split_fwd_args_of(c, &b, e, &gen, &a);
    for (int i = 0; i < 4; i++) {
        fattn_split_fwd_result res;
        ck_assert_int_eq(fattn_split_forward_impl(&a, &b.q, &b.k, &b.v, NULL, NULL, &res),
                         FATTN_OK);
        const int64_t *rs = res.to_save.t[9].data; /* backends.py:1847, rng_state */
        ck_assert_int_eq(rs[0], 1000);
        ck_assert_int_eq(rs[1], 64 + 16 * i);
        ck_assert_uint_eq(gen.offset, (uint64_t)(64 + 16 * (i + 1)));
        fattn_split_fwd_result_free(&res);
    }
    tcase_teardown(&b);
    fattn_engine_free(e);
    fattn_test_mark("split.rng.sequence");
}
END_TEST

START_TEST(rng_backward_saved)
{
    const tcase *c = find("bwd.dropout.p05.f16");
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_split_func_ctx *a = NULL, *x = NULL, *ref = NULL;
    ck_assert_int_eq(fattn_split_func_ctx_init(&a), FATTN_OK);
    ck_assert_int_eq(fattn_split_func_ctx_init(&x), FATTN_OK);
    ck_assert_int_eq(fattn_split_func_ctx_init(&ref), FATTN_OK);
    fattn_rng_gen gen = {77, 0}, gen_ref = {77, 0};
    fattn_fwd_args args;
    fe_split_fwd_args_of(c, &b, e, &gen, &args);
    fattn_tensor out, ml, ga[6], gx[6], gr[6];
    ck_assert_int_eq(fattn_split_func_forward(a, &b.q, &b.k, &b.v, NULL, NULL, &args, &out, &ml),
                     FATTN_OK);
    ck_assert_int_eq(fe_split_call_fwd_bwd(c, &b, e, x, &gen, &out, &ml, gx), FATTN_OK);
    ck_assert_int_eq(fattn_split_func_backward(a, &b.d_o, ga), FATTN_OK);
    ck_assert_int_eq(fe_split_call_fwd_bwd(c, &b, e, ref, &gen_ref, &out, &ml, gr), FATTN_OK);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(fe_same_bits(&ga[i], &gr[i]), "grad %d differs from the reference", i);
        ck_assert_msg(!fe_same_bits(&ga[i], &gx[i]), "grad %d ignores the rng_state", i);
    }
    ck_assert(fattn_tensor_is_empty(&ga[5]));
    fattn_split_func_ctx_free(a);
    fattn_split_func_ctx_free(x);
    fattn_split_func_ctx_free(ref);
    tcase_teardown(&b);
    fattn_engine_free(e);
    fattn_test_mark("split.rng.backward_saved");
}
END_TEST

/* ---- refusals, helpers --------------------------------------------------- */

START_TEST(rule_refusal)
{
    int n = 0;
    const fattn_support_rule *rules = fattn_support_rules(&n);
    const fattn_support_rule *r = &rules[_i];
    fattn_engine *e = engine2();
    fe_spec s = fe_spec_for_rule(r->id);
    fattn_status st = fe_split_spec(&s, e);
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
    snprintf(id, sizeof id, "split.refuses.%s", r->id);
    fattn_test_mark(id);
}
END_TEST

START_TEST(default_spec_runs)
{
    fattn_engine *e = engine2();
    fe_spec s = fe_spec_default();
    ck_assert_msg(fe_split_spec(&s, e) == FATTN_OK, "%s", fattn_last_error());
    fattn_engine_free(e);
}
END_TEST

START_TEST(reload_layout)
{
    ck_assert_int_eq(fattn_split_reload_layout(FATTN_LAYOUT_SB3HD, false), FATTN_LAYOUT_SB3HD);
    ck_assert_int_eq(fattn_split_reload_layout(FATTN_LAYOUT_SB3HD, true),
                     FATTN_LAYOUT_SBHD_SBHD_SBHD);
    ck_assert_int_eq(fattn_split_reload_layout(FATTN_LAYOUT_BSHD_BSH2D, true),
                     FATTN_LAYOUT_BSHD_BSHD_BSHD);
    ck_assert_int_eq(fattn_split_reload_layout(FATTN_LAYOUT_TH3D, true),
                     FATTN_LAYOUT_THD_THD_THD);
    ck_assert_int_eq(fattn_split_reload_layout(FATTN_LAYOUT_THD_BSHD_BSHD, true),
                     FATTN_LAYOUT_THD_BSHD_BSHD);
    ck_assert_int_eq(fattn_split_reload_layout(FATTN_LAYOUT_BHSD_BHSD_BHSD, true),
                     FATTN_LAYOUT_BHSD_BHSD_BHSD);
}
END_TEST

START_TEST(names)
{
    ck_assert_str_eq(fattn_split_slot_name(FATTN_SPLIT_SLOT_Q_FP8), "q_fp8");
    ck_assert_str_eq(fattn_split_slot_name(FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET),
                     "aux_softmax_offset");
    ck_assert_ptr_null(fattn_split_slot_name(FATTN_SPLIT_NSLOTS));
    ck_assert_str_eq(fattn_split_source_name(FATTN_SPLIT_SRC_ATTN_BIAS), "attn_bias");
    ck_assert_str_eq(fattn_split_source_name(FATTN_SPLIT_SRC_OUT), "out");
    ck_assert_ptr_null(fattn_split_source_name(FATTN_SPLIT_SRC_NONE));
}
END_TEST

/* A second backward on one ctx raises in TE 2.20.2 (ctx.backward_objects is
 * None, backends.py:2283-2285); a new forward re-arms the ctx. */
START_TEST(second_backward)
{
    const tcase *c = find("bwd.nomask.f16");
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_split_func_ctx *ctx = NULL;
    ck_assert_int_eq(fattn_split_func_ctx_init(&ctx), FATTN_OK);
    fattn_rng_gen gen = {5, 0};
    fattn_tensor g6[6], out, ml;
    ck_assert_int_eq(fe_split_call_fwd_bwd(c, &b, e, ctx, &gen, &out, &ml, g6), FATTN_OK);
    ck_assert_int_eq(fattn_split_func_backward(ctx, &b.d_o, g6), FATTN_E_STATE);
    ck_assert_msg(strstr(fattn_last_error(), "backward_objects is None"), "%s",
                  fattn_last_error());
    for (int i = 0; i < 6; i++)
        ck_assert(fattn_tensor_is_empty(&g6[i]));
    ck_assert_int_eq(fe_split_call_fwd_bwd(c, &b, e, ctx, &gen, &out, &ml, g6), FATTN_OK);
    ck_assert(!fattn_tensor_is_empty(&g6[0]));
    fattn_split_func_ctx_free(ctx);
    tcase_teardown(&b);
    fattn_engine_free(e);
    fattn_test_mark("split.second_backward");
}
END_TEST

/* The wrapper: 6 grads, the last (args) empty; misuse. */
START_TEST(wrapper)
{
    const tcase *c = find("bwd.softmax.learnable.f16");
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_int_eq(tcase_setup(c, &b), FATTN_OK);
    fattn_split_func_ctx *ctx = NULL;
    ck_assert_int_eq(fattn_split_func_ctx_init(&ctx), FATTN_OK);
    fattn_tensor g6[6], out, ml;
    ck_assert_int_eq(fattn_split_func_backward(ctx, &b.d_o, g6), FATTN_E_STATE);
    fattn_rng_gen gen = {1, 0};
    ck_assert_int_eq(fe_split_call_fwd_bwd(c, &b, e, ctx, &gen, &out, &ml, g6), FATTN_OK);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(!fattn_tensor_is_empty(&g6[i]) == (i != 3), "grad %d", i);
    ck_assert(fattn_tensor_is_empty(&g6[5]));
    ck_assert_int_eq(g6[4].dtype, FATTN_DTYPE_FLOAT32);
    ck_assert_int_eq(g6[4].shape[1], c->h);
    fattn_split_func_ctx_free(ctx);
    tcase_teardown(&b);
    fattn_engine_free(e);
    fattn_test_mark("split.wrapper");
}
END_TEST

/* ---- every matrix case through split's own calls ------------------------ */

/* Does t's data pointer lie inside storage s? */
static bool inside(const fattn_tensor *t, const fattn_tensor *s)
{
    if (fattn_tensor_is_empty(t) || fattn_tensor_is_empty(s))
        return false;
    const char *p = t->data, *b = s->data;
    size_t bytes = (size_t)fattn_tensor_numel(s) * fattn_dtype_size(s->dtype);
    return p >= b && p < b + bytes;
}

/* forward_impl's dedup records name exactly the inputs and out; nothing it
 * returns aliases an input; setup_ctx put the deduplicated ones back. */
static void check_dedup(const tcase *c, const tcase_buffers *b, const fattn_split_func_ctx *sctx)
{
    bool has_bias = c->bias == FATTN_BIAS_POST_SCALE_BIAS;
    bool has_sink = c->softmax != FATTN_SOFTMAX_VANILLA;
    const fattn_split_fwd_result *r = &sctx->fwd;
    /* by slot: the f16 four are entries 4-7, the aux two entries 10 and 11 */
    fattn_split_source sf[FATTN_SPLIT_NSLOTS] = {FATTN_SPLIT_SRC_NONE};
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++)
        sf[fattn_split_to_save_slot(i)] = r->ctx_attrs.saved_from[i];
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
    const fattn_tensor *inputs[] = {&b->qkv_storage[0], &b->qkv_storage[1], &b->qkv_storage[2],
                                    &b->bias, &b->softmax_offset};
    const fattn_tensor *returned[FATTN_SPLIT_NTO_SAVE + 2];
    int nret = 0;
    returned[nret++] = &r->out;
    returned[nret++] = &r->max_logit;
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++)
        returned[nret++] = &r->to_save.t[i];
    for (int i = 0; i < nret; i++)
        for (int j = 0; j < FE_NROWS(inputs); j++)
            ck_assert_msg(!inside(returned[i], inputs[j]),
                          "%s: returned tensor %d aliases input %d", c->id, i, j);
    const fattn_tensor *saved = sctx->saved.t;
    ck_assert(fattn_tensor_same(&saved[FATTN_SPLIT_SLOT_Q], &b->q));
    ck_assert(fattn_tensor_same(&saved[FATTN_SPLIT_SLOT_K], &b->k));
    ck_assert(fattn_tensor_same(&saved[FATTN_SPLIT_SLOT_V], &b->v));
    ck_assert(fattn_tensor_same(&saved[FATTN_SPLIT_SLOT_OUT], &r->out));
    if (has_bias)
        ck_assert(fattn_tensor_same(&saved[FATTN_SPLIT_SLOT_AUX_BIAS], &b->bias));
    if (has_sink)
        ck_assert(fattn_tensor_same(&saved[FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET],
                                    &b->softmax_offset));
}

/* Every matrix case through the split's wrapper (test_frontends.c compares
 * the recorded runs): a case TE refuses is refused with the support table's
 * status before the rng_state is drawn; any other draws once, saves it,
 * returns 6 grads of which only dq, dk, dv and the case's d_bias and
 * d_softmax_offset are filled (none for inference), and dedups as above. */
START_TEST(case_calls)
{
    const tcase *c = &tcase_table[_i];
    fattn_engine *e = engine2();
    tcase_buffers b;
    ck_assert_msg(tcase_setup(c, &b) == FATTN_OK, "%s: %s", c->id, fattn_last_error());
    fattn_split_func_ctx *ctx = NULL;
    ck_assert_int_eq(fattn_split_func_ctx_init(&ctx), FATTN_OK);
    fattn_rng_gen gen = {c->seed + 7, 32};
    fattn_tensor out, ml, g6[6];
    fattn_status st = fe_split_call_fwd_bwd(c, &b, e, ctx, &gen, &out, &ml, g6);
    fattn_support_query q = fe_case_query(c);
    fattn_status expect = fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL);
    ck_assert_msg(st == expect, "%s: %s, want %s (%s)", c->id, fattn_status_name(st),
                  fattn_status_name(expect), fattn_last_error());
    if (expect != FATTN_OK) {
        ck_assert_uint_eq(gen.offset, 32);
    } else {
        ck_assert_uint_eq(gen.offset, 48);
        const fattn_tensor *rs = &ctx->saved.t[FATTN_SPLIT_SLOT_RNG_STATE];
        ck_assert_int_eq(((const int64_t *)rs->data)[0], (int64_t)(c->seed + 7));
        ck_assert_int_eq(((const int64_t *)rs->data)[1], 32);
        bool has_bias = c->bias == FATTN_BIAS_POST_SCALE_BIAS;
        bool has_sink = c->softmax != FATTN_SOFTMAX_VANILLA;
        for (int i = 0; i < 6; i++) {
            bool want = c->training && (i < 3 || (i == 3 && has_bias) || (i == 4 && has_sink));
            ck_assert_msg(fattn_tensor_is_empty(&g6[i]) == !want, "%s: grad %d", c->id, i);
        }
        check_dedup(c, &b, ctx);
    }
    fattn_split_func_ctx_free(ctx);
    tcase_teardown(&b);
    fattn_engine_free(e);
    char id[160];
    snprintf(id, sizeof id, "split.case.%s", c->id);
    fattn_test_mark(id);
}
END_TEST

static void list_ids(void)
{
    for (int i = 0; i < FE_NROWS(fwd_fields); i++)
        printf("split.missing.fwd.%s\n", fwd_fields[i]);
    for (int i = 0; i < FE_NROWS(bwd_fields); i++)
        printf("split.missing.bwd.%s\n", bwd_fields[i]);
    for (int i = 0; i < DEDUP_ROWS; i++) {
        int v = i / 8;
        bool bias = (i / 4) % 2, sink = (i / 2) % 2, in_fp8 = (i % 2) && v != 0;
        if (v == 0 && i % 2)
            continue; /* same id as the even row: f16 inputs */
        printf("split.dedup.%s.%s.%s.%s\n", variant_names[v], bias ? "bias" : "no_bias",
               sink ? "sink" : "vanilla", in_fp8 ? "in_fp8" : "in_f16");
    }
    static const char *const mn[4] = {"q", "k", "v", "out"};
    for (int i = 0; i < 16; i++)
        printf("split.dedup_own_source.%s_holds_%s\n", mn[i / 4], mn[i % 4]);
    printf("split.fp8_unsupported\nsplit.rng.sequence\nsplit.rng.backward_saved\n"
           "split.wrapper\nsplit.second_backward\n");
    int n = 0;
    const fattn_support_rule *rules = fattn_support_rules(&n);
    for (int i = 0; i < n; i++)
        printf("split.refuses.%s\n", rules[i].id);
    for (int i = 0; i < tcase_count; i++)
        printf("split.case.%s\n", tcase_table[i].id);
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("split");
    TCase *tc = tcase_create("split");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    int n = 0;
    fattn_support_rules(&n);
    tcase_add_loop_test(tc, missing_fwd_field, 0, FE_NROWS(fwd_fields));
    tcase_add_loop_test(tc, missing_bwd_field, 0, FE_NROWS(bwd_fields));
    tcase_add_loop_test(tc, dedup_variant, 0, DEDUP_ROWS);
    tcase_add_loop_test(tc, dedup_own_source_only, 0, 16);
    tcase_add_test(tc, fp8_unsupported);
    tcase_add_test(tc, engine_gap_at_loaded_cudnn);
    tcase_add_test(tc, rng_sequence);
    tcase_add_test(tc, rng_backward_saved);
    tcase_add_loop_test(tc, rule_refusal, 0, n);
    tcase_add_test(tc, default_spec_runs);
    tcase_add_test(tc, reload_layout);
    tcase_add_test(tc, names);
    tcase_add_test(tc, wrapper);
    tcase_add_test(tc, second_backward);
    tcase_add_loop_test(tc, case_calls, 0, tcase_count);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
