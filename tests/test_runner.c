/* The harness state machine: the transition table, exhaustively; the
 * tables of ctx fields and saved slots; the front-end registry. */
#include <math.h>
#include <string.h>

#include "fattn/split.h"

#include "ctx_fields.h"
#include "fattn_test.h"
#include "fe.h"
#include "runner.h"
#include "saved_slots.h"
#include "verify.h"

/* The one legal successor of each state (-1: none). */
static const int successor[FH_STATE_COUNT] = {
    [FH_STATE_BEGIN] = FH_STATE_INPUTS,
    [FH_STATE_INPUTS] = FH_STATE_FORWARD,
    [FH_STATE_FORWARD] = FH_STATE_SAVE_CTX,
    [FH_STATE_SAVE_CTX] = FH_STATE_BACKWARD,
    [FH_STATE_BACKWARD] = -1,
};

START_TEST(test_transition)
{
    fh_state from = (fh_state)(_i / FH_STATE_COUNT);
    fh_state to = (fh_state)(_i % FH_STATE_COUNT);
    fattn_clear_error();
    fattn_status st = fh_state_check(from, to);
    if ((int)to == successor[from]) {
        ck_assert_int_eq(st, FATTN_OK);
    } else {
        ck_assert_int_eq(st, FATTN_E_STATE);
        /* the message names both states */
        const char *msg = fattn_last_error();
        ck_assert_msg(strstr(msg, fh_state_name(from)) && strstr(msg, fh_state_name(to)),
                      "message '%s' does not name %s and %s", msg, fh_state_name(from),
                      fh_state_name(to));
    }
    char id[64];
    snprintf(id, sizeof id, "runner.transition.%s.%s", fh_state_name(from),
             fh_state_name(to));
    fattn_test_mark(id);
}
END_TEST

START_TEST(test_names)
{
    for (int s = 0; s < FH_STATE_COUNT; s++) {
        fh_state back;
        ck_assert_int_eq(fh_state_parse(fh_state_name((fh_state)s), &back), FATTN_OK);
        ck_assert_int_eq(back, s);
    }
    fh_state x;
    ck_assert_int_eq(fh_state_parse("backwards", &x), FATTN_E_PARSE);
    fh_impl i;
    ck_assert_int_eq(fh_impl_parse("legacy", &i), FATTN_OK);
    ck_assert_int_eq(i, FH_IMPL_LEGACY);
    ck_assert_int_eq(fh_impl_parse("split", &i), FATTN_OK);
    ck_assert_int_eq(i, FH_IMPL_SPLIT);
    ck_assert_int_eq(fh_impl_parse("monolith", &i), FATTN_E_PARSE);
    ck_assert_int_eq(fh_state_check((fh_state)-1, FH_STATE_INPUTS), FATTN_E_STATE);
}
END_TEST

/* ---- the backward-read set ------------------------------------------------ */

#define AK_BOOL FH_H5_ATTR_UINT8
#define AK_INT64 FH_H5_ATTR_INT64
#define AK_FLOAT32 FH_H5_ATTR_FLOAT32
#define AK_TRIBOOL FH_H5_ATTR_UINT8
#define AK_PAIR FH_H5_ATTR_INT64_PAIR
#define AK_ENUM FH_H5_ATTR_STRING
#define AK_STRING FH_H5_ATTR_STRING
#define AK_OPAQUE (-1) /* not recorded */
#define AK_QUANT FH_H5_ATTR_STRING
#define REQUIRED_REQ true
#define REQUIRED_OPT false

typedef struct ctx_row {
    const char *name;
    int attr_kind;
    bool required;
} ctx_row;

static const ctx_row ctx_rows[] = {
#define ROW(name, ctype, kind, codec, presence, role) {#name, (int)AK_##kind, REQUIRED_##presence},
    FH_CTX_FIELDS(ROW)
#undef ROW
};

/* A valid record with every field away from its zero value. */
static fattn_fp8_quantizer sample_quant[2] = {
    {FATTN_FP8_RECIPE_DELAYED, FATTN_DTYPE_FLOAT8_E4M3FN, 16.0f, 3.25f, false, 0.0f, NULL},
    {FATTN_FP8_RECIPE_CURRENT, FATTN_DTYPE_FLOAT8_E5M2, 0x1.8p-3f, 1e-7f, true, 0x1p-20f, NULL},
};

static fh_ctx_record ctx_sample(bool with_optional)
{
    fh_ctx_record r;
    memset(&r, 0, sizeof r);
    if (with_optional) {
        r.QKV_quantizer = r.O_quantizer = r.S_quantizer = &sample_quant[0];
        r.dQKV_quantizer = r.dO_quantizer = r.dP_quantizer = &sample_quant[1];
    }
    r.fp8 = false;
    r.nominal_dtype = FATTN_DTYPE_BFLOAT16;
    r.is_input_fp8 = true;
    r.bf16_backward = true;
    r.layer_number = 3;
    r.qkv_type = with_optional ? "float8_e4m3fn" : NULL;
    r.max_seqlen_q = 128;
    r.max_seqlen_kv = 96;
    r.attn_scale = with_optional ? 0.125f : NAN; /* NaN: None */
    r.dropout_p = 0.25f;
    r.fast_zero_fill = true;
    r.qkv_layout = FATTN_LAYOUT_SBHD_SB2HD;
    r.o_format = FATTN_FORMAT_BSHD;
    r.qkv_scale_inv_format = with_optional ? FATTN_FORMAT_THD : FATTN_FORMAT_NOT_SET;
    r.dqkv_layout = FATTN_LAYOUT_SBH3D;
    r.attn_bias_type = FATTN_BIAS_POST_SCALE_BIAS;
    r.attn_mask_type = FATTN_MASK_PADDING_CAUSAL;
    r.softmax_type = FATTN_SOFTMAX_LEARNABLE;
    r.window_size[0] = 7;
    r.window_size[1] = -1;
    r.bottom_right_diagonal = with_optional ? 1 : -1;
    r.fused_attention_backend = FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN;
    r.use_FAv2_bwd = true;
    r.deterministic = true;
    return r;
}

static fh_h5_node *ctx_node(const fh_ctx_record *r)
{
    fh_h5_node *n = NULL;
    ck_assert_int_eq(fh_h5_node_new_group("save_ctx", &n), FATTN_OK);
    ck_assert_int_eq(fh_ctx_record_write(r, n), FATTN_OK);
    return n;
}

#define SAME_BOOL(a, b) ((a) == (b))
#define SAME_INT64(a, b) ((a) == (b))
#define SAME_FLOAT32(a, b) ((a) == (b) || (isnan(a) && isnan(b)))
#define SAME_TRIBOOL(a, b) ((a) == (b))
#define SAME_ENUM(a, b) ((a) == (b))
#define SAME_OPAQUE(a, b) ((a) == (b))
#define SAME_QUANT(a, b)                                                                       \
    ((a) == (b) || ((a) && (b) && (a)->kind == (b)->kind && (a)->dtype == (b)->dtype &&         \
                    (a)->scale == (b)->scale && (a)->amax == (b)->amax &&                       \
                    (a)->force_pow_2_scales == (b)->force_pow_2_scales &&                       \
                    (a)->amax_epsilon == (b)->amax_epsilon))
#define SAME_PAIR(a, b) ((a)[0] == (b)[0] && (a)[1] == (b)[1])
#define SAME_STRING(a, b) ((a) == (b) || ((a) && (b) && !strcmp((a), (b))))

static void ctx_check_same(const fh_ctx_record *a, const fh_ctx_record *b)
{
#define CHECK_ROW(name, ctype, kind, codec, presence, role)                                   \
    ck_assert_msg(SAME_##kind(a->name, b->name), "field %s differs after a round trip", #name);
    FH_CTX_FIELDS(CHECK_ROW)
#undef CHECK_ROW
}

START_TEST(test_ctx_roundtrip)
{
    for (int opt = 0; opt < 2; opt++) {
        fh_ctx_record r = ctx_sample(opt), back;
        fh_h5_node *n = ctx_node(&r);
        size_t want = 0;
        for (int i = 0; i < FH_CTX_NFIELDS; i++)
            want += ctx_rows[i].attr_kind != AK_OPAQUE && (ctx_rows[i].required || opt);
        ck_assert_uint_eq(n->n_attrs, want);
        ck_assert_int_eq(fh_ctx_record_read(n, &back), FATTN_OK);
        ck_assert_int_eq(fh_save_ctx_validate(n), FATTN_OK);
        ctx_check_same(&r, &back);
        fh_h5_node_free(n);
    }
}
END_TEST

static void copy_attr(fh_h5_node *dst, const fh_h5_attr *a)
{
    fattn_status st = FATTN_E_INTERNAL;
    switch (a->kind) {
    case FH_H5_ATTR_STRING: st = fh_h5_node_set_string(dst, a->name, a->s); break;
    case FH_H5_ATTR_INT64: st = fh_h5_node_set_int64(dst, a->name, a->i64[0]); break;
    case FH_H5_ATTR_FLOAT32: st = fh_h5_node_set_float32(dst, a->name, a->f32); break;
    case FH_H5_ATTR_UINT8: st = fh_h5_node_set_uint8(dst, a->name, a->u8); break;
    case FH_H5_ATTR_INT64_PAIR: st = fh_h5_node_set_int64_pair(dst, a->name, a->i64); break;
    }
    ck_assert_int_eq(st, FATTN_OK);
}

/* Row _i left out: invalid, naming it, exactly when the row is required. */
START_TEST(test_ctx_missing)
{
    const ctx_row *row = &ctx_rows[_i];
    fh_ctx_record r = ctx_sample(true);
    fh_h5_node *full = ctx_node(&r), *n = NULL;
    ck_assert_int_eq(fh_h5_node_new_group("save_ctx", &n), FATTN_OK);
    for (size_t k = 0; k < full->n_attrs; k++)
        if (strcmp(full->attrs[k].name, row->name))
            copy_attr(n, &full->attrs[k]);
    fattn_clear_error();
    fattn_status st = fh_save_ctx_validate(n);
    if (row->required && row->attr_kind != AK_OPAQUE) {
        ck_assert_int_eq(st, FATTN_E_INVALID_FILE);
        ck_assert_msg(strstr(fattn_last_error(), row->name), "'%s' does not name %s",
                      fattn_last_error(), row->name);
    } else {
        ck_assert_int_eq(st, FATTN_OK);
    }
    fh_h5_node_free(full);
    fh_h5_node_free(n);
}
END_TEST

/* Row _i recorded with the wrong HDF5 type: invalid, naming it (an
 * unrecorded row's name is just another attribute). */
START_TEST(test_ctx_wrong_type)
{
    const ctx_row *row = &ctx_rows[_i];
    fh_ctx_record r = ctx_sample(true);
    fh_h5_node *n = ctx_node(&r);
    if (row->attr_kind == FH_H5_ATTR_STRING)
        ck_assert_int_eq(fh_h5_node_set_int64(n, row->name, 7), FATTN_OK);
    else
        ck_assert_int_eq(fh_h5_node_set_string(n, row->name, "x"), FATTN_OK);
    fattn_clear_error();
    fattn_status st = fh_save_ctx_validate(n);
    if (row->attr_kind == AK_OPAQUE) {
        ck_assert_int_eq(st, FATTN_OK);
    } else {
        ck_assert_int_eq(st, FATTN_E_INVALID_FILE);
        ck_assert_msg(strstr(fattn_last_error(), row->name), "'%s' does not name %s",
                      fattn_last_error(), row->name);
    }
    fh_h5_node_free(n);
}
END_TEST

/* Values of the right type that backward cannot take. */
START_TEST(test_ctx_values)
{
    fh_ctx_record good = ctx_sample(false);
    fh_ctx_record bad[6];
    for (int i = 0; i < 6; i++)
        bad[i] = good;
    bad[0].max_seqlen_q = 0;
    bad[1].max_seqlen_kv = -4;
    bad[2].window_size[0] = -2;
    bad[3].dropout_p = 1.0f;
    bad[4].attn_scale = INFINITY;
    bad[5].dropout_p = NAN;
    for (int i = 0; i < 6; i++) {
        fh_h5_node *n = ctx_node(&bad[i]);
        ck_assert_int_eq(fh_save_ctx_validate(n), FATTN_E_INVALID_FILE);
        ck_assert_ptr_nonnull(strstr(fattn_last_error(), "out of range"));
        fh_h5_node_free(n);
    }
    fh_h5_node *n = ctx_node(&good);
    ck_assert_int_eq(fh_h5_node_set_uint8(n, "deterministic", 2), FATTN_OK);
    ck_assert_int_eq(fh_save_ctx_validate(n), FATTN_E_INVALID_FILE);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "not a boolean"));
    ck_assert_int_eq(fh_h5_node_set_uint8(n, "deterministic", 1), FATTN_OK);
    ck_assert_int_eq(fh_h5_node_set_string(n, "qkv_layout", "sbhd_sbhd_sbhdx"), FATTN_OK);
    ck_assert_int_eq(fh_save_ctx_validate(n), FATTN_E_INVALID_FILE);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "qkv_layout"));
    ck_assert_int_eq(fh_h5_node_set_string(n, "qkv_layout", "sbhd_sbhd_sbhd"), FATTN_OK);
    ck_assert_int_eq(fh_h5_node_set_string(n, "qkv_scale_inv_format", "nope"), FATTN_OK);
    ck_assert_int_eq(fh_save_ctx_validate(n), FATTN_E_INVALID_FILE);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "qkv_scale_inv_format"));
    fh_h5_node_free(n);
}
END_TEST

/* ---- the saved slots ------------------------------------------------------ */

START_TEST(test_saved_slots)
{
    ck_assert_int_eq(FH_SAVED_COUNT, FATTN_SPLIT_NSLOTS);
    for (int i = 0; i < FH_SAVED_COUNT; i++)
        ck_assert_str_eq(fh_saved_name((fh_saved_slot)i),
                         fattn_split_slot_name((fattn_split_slot)i));
    ck_assert_int_eq(FH_SAVED_AUX_FIRST, FATTN_SPLIT_SLOT_SOFTMAX_STATS);
    static const fattn_bias_type biases[] = {FATTN_BIAS_NO_BIAS, FATTN_BIAS_PRE_SCALE_BIAS,
                                             FATTN_BIAS_POST_SCALE_BIAS, FATTN_BIAS_ALIBI};
    static const fattn_softmax_type softmaxes[] = {
        FATTN_SOFTMAX_VANILLA, FATTN_SOFTMAX_OFF_BY_ONE, FATTN_SOFTMAX_LEARNABLE};
    static char bytes[FH_SAVED_NAUX];
    for (int b = 0; b < 4; b++)
        for (int s = 0; s < 3; s++) {
            bool has_bias = b == 1 || b == 2, has_offset = s != 0;
            int index[FH_SAVED_NAUX];
            int n = fh_saved_aux_layout(biases[b], softmaxes[s], index);
            /* TE's pack: Stats, rng_state, then Bias, then SoftmaxOffset */
            ck_assert_int_eq(n, 2 + has_bias + has_offset);
            ck_assert_int_eq(index[0], 0);
            ck_assert_int_eq(index[1], 1);
            ck_assert_int_eq(index[2], has_bias ? 2 : -1);
            ck_assert_int_eq(index[3], has_offset ? 2 + has_bias : -1);
            fattn_tensor list[FH_SAVED_NAUX], slots[FH_SAVED_NAUX], back[FH_SAVED_NAUX];
            for (int k = 0; k < n; k++) {
                int64_t shape[1] = {1};
                list[k] = fattn_tensor_view(&bytes[k], FATTN_DTYPE_UINT8, 1, shape);
            }
            ck_assert_int_eq(fh_saved_aux_from_list(list, n, biases[b], softmaxes[s], slots),
                             FATTN_OK);
            ck_assert_int_eq(fh_saved_aux_to_list(slots, back), n);
            for (int k = 0; k < n; k++)
                ck_assert_ptr_eq(back[k].data, list[k].data);
            ck_assert_int_eq(fh_saved_aux_from_list(list, n - 1, biases[b], softmaxes[s], slots),
                             FATTN_E_INTERNAL);
        }
}
END_TEST

/* ---- the front ends ------------------------------------------------------- */

START_TEST(test_impls)
{
    for (int i = 0; i < FH_IMPL_COUNT; i++) {
        const fh_fe_ops *ops = fh_fe_get((fh_impl)i);
        ck_assert_ptr_nonnull(ops);
        ck_assert(ops->init != NULL);
        ck_assert(ops->free != NULL);
        ck_assert(ops->forward != NULL);
        ck_assert(ops->save_ctx != NULL);
        ck_assert(ops->backward != NULL);
        fh_impl back;
        ck_assert_int_eq(fh_impl_parse(ops->name, &back), FATTN_OK);
        ck_assert_int_eq(back, i);
        ck_assert_int_eq(fh_impl_resume_check((fh_impl)i, FH_STATE_SAVE_CTX), FATTN_OK);
        ck_assert_int_eq(fh_impl_resume_check((fh_impl)i, FH_STATE_BACKWARD),
                         FATTN_E_INVALID_ARG);
    }
    ck_assert_ptr_null(fh_fe_get(FH_IMPL_COUNT));
    ck_assert_int_eq(fh_impl_resume_check(FH_IMPL_SPLIT, FH_STATE_FORWARD), FATTN_OK);
    ck_assert_int_eq(fh_impl_resume_check(FH_IMPL_LEGACY, FH_STATE_FORWARD),
                     FATTN_E_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "split"));
}
END_TEST

/* An engine of another math than the CPU's that runs FP8 (as cuDNN does). */
static bool other_math_supports(const fattn_engine *e, fattn_engine_query q)
{
    (void)e;
    return q == FATTN_ENGINE_Q_FP8;
}

/* Which cases verify compares with another engine's goldens (CPU goldens
 * within tolerance) and which within one engine only. */
static const struct {
    double dropout_p;
    bool is_training, fp8, cpu;
    const char *why; /* NULL: compared */
} same_engine_rows[] = {
    {0.0, true, false, true, NULL},      {0.0, true, false, false, NULL},
    {0.1, true, false, true, "dropout"}, {0.1, true, false, false, "dropout"},
    {0.1, false, false, false, NULL},    /* inference: dropout does not apply */
    {0.0, true, true, true, NULL},       /* FP8 on the CPU math: compared */
    {0.0, true, true, false, "FP8"},     {0.0, false, true, false, "FP8"},
    {0.1, true, true, false, "dropout"},
};

START_TEST(test_same_engine_only)
{
    static const fattn_engine_ops other_ops = {.name = "other-math",
                                               .supports = other_math_supports};
    fattn_engine other = {.ops = &other_ops}, *cpu = NULL;
    ck_assert_int_eq(fattn_engine_open("cpu", NULL, &cpu), FATTN_OK);
    fh_spec s;
    memset(&s, 0, sizeof s);
    s.dropout_p = same_engine_rows[_i].dropout_p;
    s.is_training = same_engine_rows[_i].is_training;
    s.fp8 = same_engine_rows[_i].fp8;
    const char *why = fh_verify_same_engine_only(&s, same_engine_rows[_i].cpu ? cpu : &other);
    const char *want = same_engine_rows[_i].why;
    ck_assert_msg(want ? why && !strcmp(why, want) : !why, "row %d: '%s', want '%s'", _i,
                  why ? why : "(compared)", want ? want : "(compared)");
    fattn_engine_free(cpu);
}
END_TEST

static void list_ids(void)
{
    for (int f = 0; f < FH_STATE_COUNT; f++)
        for (int t = 0; t < FH_STATE_COUNT; t++)
            printf("runner.transition.%s.%s\n", fh_state_name((fh_state)f),
                   fh_state_name((fh_state)t));
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("runner");
    TCase *tc = tcase_create("states");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, test_transition, 0, FH_STATE_COUNT * FH_STATE_COUNT);
    tcase_add_test(tc, test_names);
    suite_add_tcase(s, tc);
    TCase *tt = tcase_create("tables");
    tcase_set_timeout(tt, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tt, test_ctx_roundtrip);
    tcase_add_loop_test(tt, test_ctx_missing, 0, FH_CTX_NFIELDS);
    tcase_add_loop_test(tt, test_ctx_wrong_type, 0, FH_CTX_NFIELDS);
    tcase_add_test(tt, test_ctx_values);
    tcase_add_test(tt, test_saved_slots);
    tcase_add_test(tt, test_impls);
    tcase_add_loop_test(tt, test_same_engine_only, 0,
                        (int)(sizeof same_engine_rows / sizeof same_engine_rows[0]));
    suite_add_tcase(s, tt);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
