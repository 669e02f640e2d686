/* Suite "cudnn-construct", FP8 part: the cuDNN engine's FP8 SDPA graphs
 * (lib/cudnn/graph_fp8.c, graph_fp8_bwd.c), built without a GPU from
 * parameter shapes alone (no data is read), their op order against
 * cudnn-frontend's sdpa_fp8 / sdpa_fp8_backward lowering, the refusals,
 * the plan key's FP8 fields and, where libcudnn.so.9 loads, lowering up to
 * the finalized operation graph. */
#include <stdlib.h>
#include <string.h>

#include "cudnn_env.h"
#include "cudnn/graph.h"
#include "core/engine_gaps.h"
#include "cudnn_desc.h"
#include "fattn/cudnn.h"
#include "fattn/engine.h"
#include "fattn/support.h"
#include "fattn_config.h"
#include "fattn_test.h"
#if FATTN_HAVE_CUDNN
#include "cudnn/cudnn_internal.h"
#endif

#define E4 FATTN_DTYPE_FLOAT8_E4M3FN
#define E5 FATTN_DTYPE_FLOAT8_E5M2
#define BF FATTN_DTYPE_BFLOAT16

static unsigned char dummy[16]; /* data pointers: never read */

static fattn_tensor bshd(fattn_dtype t, int64_t b, int64_t s, int64_t h, int64_t d)
{
    int64_t shape[4] = {b, s, h, d};
    return fattn_tensor_view(dummy, t, 4, shape);
}

/* One FP8 case: shapes, dtypes and options. */
typedef struct fp8_case {
    const char *id;
    int64_t b, hq, hk, s, d;
    fattn_mask_type mask;
    float dropout;
    fattn_dtype io, o, s_dt, d_o, grad, dp;
} fp8_case;

static const fp8_case base = {"base", 2, 4, 4, 256, 128, FATTN_MASK_NO_MASK, 0.0f,
                              E4, E4, E4, E5, E5, E5};

typedef struct fp8_params {
    fattn_fwd_params f;
    fattn_bwd_params b;
    fattn_fp8_fwd f8;
    fattn_fp8_bwd b8;
    fattn_aux_pack aux;
    float amax[6];
    float sink[64]; /* softmax_offset [1, h, 1, 1] */
} fp8_params;

static void make_params(const fp8_case *c, fp8_params *x)
{
    memset(x, 0, sizeof *x);
    int64_t cu_shape[1] = {c->b + 1}, rng_shape[1] = {2};
    fattn_fwd_params *f = &x->f;
    f->attn.q = bshd(c->io, c->b, c->s, c->hq, c->d);
    f->attn.k = bshd(c->io, c->b, c->s, c->hk, c->d);
    f->attn.v = bshd(c->io, c->b, c->s, c->hk, c->d);
    f->attn.o = bshd(c->o, c->b, c->s, c->hq, c->d);
    f->attn.cu_seqlens_q = fattn_tensor_view(dummy, FATTN_DTYPE_INT32, 1, cu_shape);
    f->attn.cu_seqlens_kv = f->attn.cu_seqlens_q;
    f->rng_state = fattn_tensor_view(dummy, FATTN_DTYPE_INT64, 1, rng_shape);
    f->attn.max_seqlen_q = f->attn.max_seqlen_kv = c->s;
    f->is_training = true;
    f->attn.attn_scale = 0.088388f;
    f->attn.dropout = c->dropout;
    f->attn.qkv_layout = FATTN_LAYOUT_BSHD_BSHD_BSHD;
    f->attn.o_format = FATTN_FORMAT_BSHD;
    f->attn.mask_type = c->mask;
    f->attn.window_size_left = -1;
    f->attn.window_size_right = c->mask == FATTN_MASK_NO_MASK ? -1 : 0;
    x->f8 = (fattn_fp8_fwd){1.5f, 0.5f, 0.25f, 1.0f / 448.0f, 448.0f, 2.0f, &x->amax[0],
                            &x->amax[1], c->s_dt};
    f->fp8 = &x->f8;

    fattn_bwd_params *b = &x->b;
    b->attn.q = f->attn.q, b->attn.k = f->attn.k, b->attn.v = f->attn.v, b->attn.o = f->attn.o;
    b->d_o = bshd(c->d_o, c->b, c->s, c->hq, c->d);
    b->dq = bshd(c->grad, c->b, c->s, c->hq, c->d);
    b->dk = bshd(c->grad, c->b, c->s, c->hk, c->d);
    b->dv = bshd(c->grad, c->b, c->s, c->hk, c->d);
    x->aux.n = 2; /* [Stats, rng_state] */
    x->aux.t[1] = f->rng_state;
    b->aux = &x->aux;
    b->attn.cu_seqlens_q = f->attn.cu_seqlens_q, b->attn.cu_seqlens_kv = f->attn.cu_seqlens_kv;
    b->attn.max_seqlen_q = b->attn.max_seqlen_kv = c->s;
    b->attn.attn_scale = f->attn.attn_scale;
    b->attn.dropout = c->dropout;
    b->attn.qkv_layout = b->dqkv_layout = f->attn.qkv_layout;
    b->attn.o_format = b->do_format = f->attn.o_format;
    b->attn.mask_type = c->mask;
    b->attn.window_size_left = f->attn.window_size_left;
    b->attn.window_size_right = f->attn.window_size_right;
    b->deterministic = true;
    x->b8 = (fattn_fp8_bwd){1.5f, 0.5f, 0.25f, 2.0f, 4.0f, 1.0f / 448.0f, 448.0f,
                            1.0f / 57344.0f, 57344.0f, 1.0f, 1.0f, 1.0f,
                            &x->amax[2], &x->amax[3], &x->amax[4], &x->amax[5],
                            c->s_dt, c->dp};
    b->fp8 = &x->b8;
}

static fattn_status build_fwd(const fp8_case *c, cg_fwd_desc *d, cg_graph *g)
{
    fp8_params x;
    make_params(c, &x);
    fattn_status st = tdesc_fwd(&x.f, d);
    return st ? st : fattn__cg_build_fwd(g, d);
}

static fattn_status build_bwd(const fp8_case *c, cg_bwd_desc *d, cg_graph *g)
{
    fp8_params x;
    make_params(c, &x);
    fattn_status st = tdesc_bwd(&x.b, d);
    return st ? st : fattn__cg_build_bwd(g, d);
}

static const fp8_case shape_rows[] = {
    {"plain", 2, 4, 4, 256, 128, FATTN_MASK_NO_MASK, 0.0f, E4, E4, E4, E5, E5, E5},
    {"causal", 2, 4, 4, 256, 128, FATTN_MASK_CAUSAL, 0.0f, E4, E4, E4, E5, E5, E5},
    {"gqa", 2, 8, 2, 256, 128, FATTN_MASK_CAUSAL, 0.0f, E4, E4, E4, E5, E5, E5},
    {"padding_causal", 2, 4, 4, 256, 128, FATTN_MASK_PADDING_CAUSAL, 0.0f, E4, E4, E4, E5, E5,
     E5},
    {"dropout", 2, 4, 4, 256, 128, FATTN_MASK_NO_MASK, 0.1f, E4, E4, E4, E5, E5, E5},
    {"o_bf16", 2, 4, 4, 256, 128, FATTN_MASK_CAUSAL, 0.0f, E4, BF, E4, E5, BF, E5},
    {"d64", 2, 4, 4, 256, 64, FATTN_MASK_NO_MASK, 0.0f, E4, E4, E4, E5, E5, E5},
};
#define N_SHAPES ((int)(sizeof shape_rows / sizeof shape_rows[0]))

static int op_index(const cg_graph *g, const char *name, int from)
{
    for (int i = from; i < g->nops; i++)
        if (!strcmp(g->ops[i].name, name))
            return i;
    return -1;
}

/* names appear in this order (not necessarily adjacent) */
static void assert_order(const char *id, const cg_graph *g, const char *const *names)
{
    int at = 0;
    for (int i = 0; names[i]; i++) {
        int k = op_index(g, names[i], at);
        ck_assert_msg(k >= 0, "%s: op %s missing or out of order", id, names[i]);
        at = k + 1;
    }
}

static const cg_tensor *by_uid(const cg_graph *g, int64_t uid)
{
    int i = fattn__cg_find_uid(g, uid);
    return i >= 0 ? &g->t[i] : NULL;
}

/* The frontend's quantisation points, in order, and the FP8 tensors. */
START_TEST(fwd_graph)
{
    const fp8_case *c = &shape_rows[_i];
    cg_fwd_desc d;
    cg_graph *g = malloc(sizeof *g);
    ck_assert_msg(build_fwd(c, &d, g) == FATTN_OK, "%s: %s", c->id, fattn_last_error());
    ck_assert(g->route == CG_ROUTE_COMPOSITE);
    ck_assert(fattn__cg_graph_is_fp8(g));
    static const char *const order[] = {"bmm1", "attn_scale", "descale_q", "descale_k", "div",
                                        "amax_s", "scale_s", "bmm2", "descale_a", "descale_b",
                                        "scale_c", "amax_c", NULL};
    assert_order(c->id, g, order);
    ck_assert_int_eq(by_uid(g, CG_UID_Q)->dtype, CG_FP8_E4M3);
    ck_assert_int_eq(by_uid(g, CG_UID_O)->dtype, c->o == BF ? CG_BF16 : CG_FP8_E4M3);
    /* P reaches bmm2 as Q's FP8 type */
    const cg_op *mm2 = &g->ops[op_index(g, "bmm2", 0)];
    ck_assert_int_eq(g->t[mm2->in[0]].dtype, CG_FP8_E4M3);
    ck_assert_int_eq(g->t[mm2->out].dtype, CG_F32);
    const cg_op *am = &g->ops[op_index(g, "amax_s", 0)];
    ck_assert_int_eq(am->mode, CG_RED_AMAX);
    ck_assert_int_eq(g->t[am->out].role, CG_ROLE_AMAX_S);
    for (int r = CG_ROLE_DESCALE_Q; r <= CG_ROLE_AMAX_DV; r++) {
        bool fwd = r == CG_ROLE_DESCALE_Q || r == CG_ROLE_DESCALE_K || r == CG_ROLE_DESCALE_V ||
                   r == CG_ROLE_DESCALE_S || r == CG_ROLE_SCALE_S || r == CG_ROLE_SCALE_O ||
                   r == CG_ROLE_AMAX_S || r == CG_ROLE_AMAX_O;
        const cg_tensor *t = by_uid(g, CG_UID_FP8_FIRST + (r - CG_ROLE_DESCALE_Q));
        ck_assert_msg((t != NULL) == fwd, "%s: %s present %d", c->id, fattn__cg_role_name(r), t != NULL);
        if (t) /* a device tensor, one float: values bind at execution */
            ck_assert(!t->is_virtual && !t->by_value && t->dims[0] * t->dims[3] == 1);
    }
    free(g);
}
END_TEST

START_TEST(bwd_graph)
{
    const fp8_case *c = &shape_rows[_i];
    cg_bwd_desc d;
    cg_graph *g = malloc(sizeof *g);
    ck_assert_msg(build_bwd(c, &d, g) == FATTN_OK, "%s: %s", c->id, fattn_last_error());
    static const char *const order[] = {"mul_dO_O", "reduce_dO", "descale_dO", "descale_O",
                                        "bmm_Q_K", "attn_scale", "descale_q", "descale_k",
                                        "sub_dV_Stats", "exp_dV", "scale_S", "S_T",
                                        "bmm_S_T_dO", "scale_c", "amax_c", "bmm_dO_V_T",
                                        "sub_dP_softmax_sum", "mul_dP_exp_S",
                                        "mul_dS_attn_scale", "amax_dP", "scale_dP",
                                        "bmm_dP_K", "dP_T", "bmm_dP_T_Q", NULL};
    assert_order(c->id, g, order);
    /* no caller-side Dsum or dQ accumulator in the FP8 graph */
    ck_assert_ptr_null(by_uid(g, CG_UID_DSUM));
    ck_assert_ptr_null(by_uid(g, CG_UID_DQ_ACCUM));
    ck_assert_int_eq(by_uid(g, CG_UID_DO)->dtype, CG_FP8_E5M2);
    ck_assert_int_eq(by_uid(g, CG_UID_DQ)->dtype, c->grad == BF ? CG_BF16 : CG_FP8_E5M2);
    const cg_op *dpk = &g->ops[op_index(g, "bmm_dP_K", 0)];
    ck_assert_int_eq(g->t[dpk->in[0]].dtype, CG_FP8_E5M2);
    /* GQA: dK and dV through the head-sum reduction, dQ not */
    int gqa = 0;
    for (int i = 0; i < g->nops; i++)
        gqa += !strcmp(g->ops[i].name, "gqa_c");
    ck_assert_int_eq(gqa, c->hq != c->hk ? 2 : 0);
    ck_assert_int_eq(op_index(g, "rng", 0) >= 0, c->dropout > 0.0f);
    free(g);
    char id[96];
    snprintf(id, sizeof id, "cudnn.fp8.construct.%s", c->id);
    fattn_test_mark(id);
}
END_TEST

/* ---- refusals --------------------------------------------------------------- */

static void t_bias(fp8_params *x) { x->f.attn.bias_type = x->b.attn.bias_type = FATTN_BIAS_ALIBI; }
static void t_sink(fp8_params *x)
{
    x->f.attn.softmax_type = x->b.attn.softmax_type = FATTN_SOFTMAX_OFF_BY_ONE;
    int64_t so[4] = {1, x->f.attn.q.shape[2], 1, 1};
    x->f.softmax_offset = fattn_tensor_view(x->sink, FATTN_DTYPE_FLOAT32, 4, so);
}
static void t_thd(fp8_params *x)
{
    int64_t s3[3] = {512, 4, 128};
    x->f.attn.qkv_layout = x->b.attn.qkv_layout = x->b.dqkv_layout = FATTN_LAYOUT_THD_THD_THD;
    x->f.attn.o_format = x->b.attn.o_format = x->b.do_format = FATTN_FORMAT_THD;
    x->f.attn.mask_type = x->b.attn.mask_type = FATTN_MASK_PADDING;
    fattn_tensor *all[] = {&x->f.attn.q, &x->f.attn.k, &x->f.attn.v, &x->f.attn.o};
    for (int i = 0; i < 4; i++)
        *all[i] = fattn_tensor_view(dummy, all[i]->dtype, 3, s3);
}
static void t_s_bf16(fp8_params *x) { x->f8.s_dtype = x->b8.s_dtype = BF; }
static void t_s_e5(fp8_params *x) { x->f8.s_dtype = x->b8.s_dtype = E5; }
static void t_no_fp8(fp8_params *x) { x->f.fp8 = NULL; }
static void t_k_e5(fp8_params *x) { x->f.attn.k.dtype = E5; }
static void t_o_f32(fp8_params *x) { x->f.attn.o.dtype = FATTN_DTYPE_FLOAT32; }
static void t_d72(fp8_params *x)
{
    fattn_tensor *all[] = {&x->f.attn.q, &x->f.attn.k, &x->f.attn.v, &x->f.attn.o};
    for (int i = 0; i < 4; i++)
        all[i]->shape[3] = 72;
}

/* TE's FP8 inference on sm_90 takes d_qk 192 / d_v 128 (fused_attn.cpp:270) */
static void t_mla(fp8_params *x)
{
    x->f.is_training = false;
    x->f.attn.q.shape[3] = x->f.attn.k.shape[3] = 192;
    x->f.attn.q.strides[2] = x->f.attn.k.strides[2] = 192;
    for (int i = 1; i >= 0; i--) {
        x->f.attn.q.strides[i] = x->f.attn.q.strides[i + 1] * x->f.attn.q.shape[i + 1];
        x->f.attn.k.strides[i] = x->f.attn.k.strides[i + 1] * x->f.attn.k.shape[i + 1];
    }
}

static const struct {
    const char *what;
    void (*tweak)(fp8_params *);
    fattn_status want;
    const char *says;
} refusal_rows[] = {
    {"d_qk 192, d_v 128", t_mla, FATTN_E_UNSUPPORTED, "fp8_mla_cudnn"},
    {"bias", t_bias, FATTN_E_UNSUPPORTED, "fp8_bias_engines"},
    {"softmax offset", t_sink, FATTN_E_UNSUPPORTED, "fp8_softmax_engines"},
    {"THD", t_thd, FATTN_E_UNSUPPORTED, "THD"},
    {"S dtype bf16", t_s_bf16, FATTN_E_DTYPE, "S dtype must be FP8"},
    {"S dtype != Q's", t_s_e5, FATTN_E_UNSUPPORTED, "quantises P to Q's type"},
    {"no scaling factors", t_no_fp8, FATTN_E_UNSUPPORTED, "fp8_descales_engines"},
    {"K dtype != Q's", t_k_e5, FATTN_E_DTYPE, "FP8 K is float8_e5m2 but Q is"},
    {"float32 O", t_o_f32, FATTN_E_DTYPE, "O must be FP8"},
    {"d 72", t_d72, FATTN_E_UNSUPPORTED, "multiple of 16"},
};

START_TEST(fwd_refusals)
{
    fp8_params x;
    make_params(&base, &x);
    refusal_rows[_i].tweak(&x);
    cg_fwd_desc d;
    /* as the dispatch: the support table's rows first (fp8_* rows for cuDNN) */
    fattn_status st = fattn__engine_gaps_fwd(&x.f, FATTN_SUPPORT_ENGINE_CUDNN, 92100,
                                             FATTN_SUPPORT_SM_REFERENCE);
    if (st == FATTN_OK)
        st = tdesc_fwd(&x.f, &d);
    ck_assert_msg(st == refusal_rows[_i].want, "%s: status %d, %s", refusal_rows[_i].what, st,
                  fattn_last_error());
    ck_assert_msg(strstr(fattn_last_error(), refusal_rows[_i].says), "%s: \"%s\"",
                  refusal_rows[_i].what, fattn_last_error());
}
END_TEST

static void t_dp_e4(fp8_params *x) { x->b8.dp_dtype = E4; }
static void t_dp_bf16(fp8_params *x) { x->b8.dp_dtype = BF; }
static void t_do_bf16(fp8_params *x) { x->b.d_o.dtype = BF; }
static void t_dq_f32(fp8_params *x) { x->b.dq.dtype = FATTN_DTYPE_FLOAT32; }

static const struct {
    const char *what;
    void (*tweak)(fp8_params *);
    fattn_status want;
    const char *says;
} bwd_refusal_rows[] = {
    {"dP dtype != dO's", t_dp_e4, FATTN_E_UNSUPPORTED, "quantises dP to dO's type"},
    {"dP dtype bf16", t_dp_bf16, FATTN_E_DTYPE, "dP dtype must be FP8"},
    {"dO bf16", t_do_bf16, FATTN_E_DTYPE, "dO is bfloat16, must be FP8"},
    {"dQ float32", t_dq_f32, FATTN_E_DTYPE, "dQ is float32"},
    {"bias", t_bias, FATTN_E_UNSUPPORTED, "fp8_bias_engines"},
};

START_TEST(bwd_refusals)
{
    fp8_params x;
    make_params(&base, &x);
    bwd_refusal_rows[_i].tweak(&x);
    cg_bwd_desc d;
    /* as the dispatch: the support table's rows first */
    fattn_status st = fattn__engine_gaps_bwd(&x.b, FATTN_SUPPORT_ENGINE_CUDNN, 92100,
                                             FATTN_SUPPORT_SM_REFERENCE);
    if (st == FATTN_OK)
        st = tdesc_bwd(&x.b, &d);
    ck_assert_msg(st == bwd_refusal_rows[_i].want, "%s: status %d, %s",
                  bwd_refusal_rows[_i].what, st, fattn_last_error());
    ck_assert_msg(strstr(fattn_last_error(), bwd_refusal_rows[_i].says), "%s: \"%s\"",
                  bwd_refusal_rows[_i].what, fattn_last_error());
}
END_TEST

/* What sm_90 cannot build: the dispatch refuses it at the engine's sm by
 * a row, and the engine's own assertion of what its graph builds there
 * agrees; sm_100 builds it. */
static const struct {
    const char *id;
    int shape;        /* shape_rows index */
    bool backward, bottom_right, dropout;
    int sm;
    fattn_status want;
    const char *rule;
} arch_rows[] = {
    {"fwd d128 sm90", 0, false, false, false, 90, FATTN_OK, NULL},
    {"bwd d128 sm90", 1, true, false, false, 90, FATTN_OK, NULL},
    {"bwd d64 sm90", 6, true, false, false, 90, FATTN_E_UNSUPPORTED,
     "fp8_bwd_head_dim_sm90_cudnn"},
    {"bwd d64 sm100", 6, true, false, false, 100, FATTN_OK, NULL},
    {"fwd d64 sm90", 6, false, false, false, 90, FATTN_OK, NULL},
    {"fwd bf16 O sm90", 5, false, false, false, 90, FATTN_E_UNSUPPORTED, "fp8_o_f16_sm90_cudnn"},
    {"bwd bf16 O sm90", 5, true, false, false, 90, FATTN_OK, NULL},
    {"fwd bf16 O sm100", 5, false, false, false, 100, FATTN_OK, NULL},
    {"bottom-right sm90", 3, false, true, false, 90, FATTN_E_UNSUPPORTED,
     "fp8_bottom_right_sm90_cudnn"},
    {"bottom-right bwd sm90", 3, true, true, false, 90, FATTN_E_UNSUPPORTED,
     "fp8_bottom_right_sm90_cudnn"},
    {"bottom-right sm100", 3, false, true, false, 100, FATTN_OK, NULL},
    {"bottom-right top-left band sm90", 1, false, true, false, 90, FATTN_OK, NULL},
    {"sm80", 0, false, false, false, 80, FATTN_E_UNSUPPORTED, "fp8_arch_cudnn"},
    {"sm89 bwd", 1, true, false, false, 89, FATTN_E_UNSUPPORTED, "fp8_arch_cudnn"},
    {"dropout sm90", 0, false, false, true, 90, FATTN_E_UNSUPPORTED, "fp8_dropout_sm90_cudnn"},
    {"dropout bwd sm90", 1, true, false, true, 90, FATTN_E_UNSUPPORTED,
     "fp8_dropout_sm90_cudnn"},
    {"dropout sm100", 0, false, false, true, 100, FATTN_OK, NULL},
};

START_TEST(arch)
{
    fp8_params x;
    make_params(&shape_rows[arch_rows[_i].shape], &x);
    x.f.attn.bottom_right_diagonal = x.b.attn.bottom_right_diagonal = arch_rows[_i].bottom_right;
    if (arch_rows[_i].dropout)
        x.f.attn.dropout = x.b.attn.dropout = 0.1f;
    int sm = arch_rows[_i].sm;
    bool bwd = arch_rows[_i].backward;
    fattn_status st = bwd ? fattn__engine_gaps_bwd(&x.b, FATTN_SUPPORT_ENGINE_CUDNN, 91900, sm)
                          : fattn__engine_gaps_fwd(&x.f, FATTN_SUPPORT_ENGINE_CUDNN, 91900, sm);
    ck_assert_msg(st == arch_rows[_i].want, "%s: %d %s", arch_rows[_i].id, st,
                  st ? fattn_last_error() : "");
    if (arch_rows[_i].rule) {
        char want[96];
        snprintf(want, sizeof want, "rule %s: ", arch_rows[_i].rule);
        ck_assert_msg(!strncmp(fattn_last_error(), want, strlen(want)), "%s: \"%s\"",
                      arch_rows[_i].id, fattn_last_error());
    }
    /* the graph of the same call: built exactly where no row refuses it */
    cg_bwd_desc d;
    fattn_status dst = bwd ? tdesc_bwd(&x.b, &d) : tdesc_fwd(&x.f, &d.f);
    ck_assert_msg(dst == FATTN_OK, "%s: %s", arch_rows[_i].id, fattn_last_error());
    ck_assert_msg(fattn__cg_fp8_arch_builds(&d.f, sm, bwd) == (st == FATTN_OK),
                  "%s: the graph and the rows disagree", arch_rows[_i].id);
}
END_TEST

/* ---- the plan key ------------------------------------------------------------ */

/* Each FP8 field of a description, changed alone, changes the graph key
 * (forward fields on the forward graph, the rest on the backward's). */
typedef enum {
    KF_FP8, KF_IO, KF_O, KF_S, KF_BWD_O, KF_BWD_S, KF_DO, KF_DP, KF_DQ, KF_DK, KF_DV, KF_N
} key_field;
static const char *const kf_names[KF_N] = {"fp8", "io", "o_dt", "s_dt", "bwd o_dt", "bwd s_dt",
                                           "do_dt", "dp_dt", "dq_dt", "dk_dt", "dv_dt"};

static cg_dtype other(cg_dtype t)
{
    return t == CG_FP8_E4M3 ? CG_FP8_E5M2 : CG_FP8_E4M3;
}

static void key_of(const cg_fwd_desc *f, const cg_bwd_desc *b, cg_key_buf *k)
{
    cg_graph *g = malloc(sizeof *g);
    fattn_status st = f ? fattn__cg_build_fwd(g, f) : fattn__cg_build_bwd(g, b);
    ck_assert_msg(st == FATTN_OK, "%s", fattn_last_error());
    fattn__cg_key(g, k);
    free(g);
}

START_TEST(key_each_fp8_field)
{
    cg_fwd_desc f;
    cg_bwd_desc b;
    cg_graph *g = malloc(sizeof *g);
    ck_assert_int_eq(build_fwd(&shape_rows[1], &f, g), FATTN_OK);
    ck_assert_int_eq(build_bwd(&shape_rows[1], &b, g), FATTN_OK);
    free(g);
    cg_key_buf *k0 = malloc(sizeof *k0), *k1 = malloc(sizeof *k1);
    bool fwd = _i <= KF_S;
    key_of(fwd ? &f : NULL, &b, k0);
    cg_fwd_desc *m = fwd ? &f : &b.f;
    switch ((key_field)_i) {
    case KF_FP8: m->fp8 = false, m->io = CG_BF16; break;
    case KF_IO: m->io = other(m->io); break;
    case KF_O: case KF_BWD_O: m->o_dt = other(m->o_dt); break;
    case KF_S: case KF_BWD_S: m->s_dt = other(m->s_dt); break;
    case KF_DO: b.do_dt = other(b.do_dt); break;
    case KF_DP: b.dp_dt = other(b.dp_dt); break;
    case KF_DQ: b.dq_dt = CG_BF16; break;
    case KF_DK: b.dk_dt = CG_BF16; break;
    case KF_DV: b.dv_dt = CG_BF16; break;
    case KF_N: break;
    }
    key_of(fwd ? &f : NULL, &b, k1);
    ck_assert_msg(!fattn__cg_key_equal(k1, k0->b, k0->len, k0->hash), "%s: the key did not change",
                  kf_names[_i]);
    free(k0);
    free(k1);
}
END_TEST

/* The scaling factors are device tensors: one plan (one key) for every
 * scaling, as TE's FP8 recipes change them at every step. */
START_TEST(key_ignores_scaling_values)
{
    fp8_params x;
    cg_fwd_desc d0, d1;
    make_params(&shape_rows[1], &x);
    ck_assert_int_eq(tdesc_fwd(&x.f, &d0), FATTN_OK);
    x.f8.descale_q = 3.0f, x.f8.scale_s = 17.0f, x.f8.scale_o = 0.125f;
    ck_assert_int_eq(tdesc_fwd(&x.f, &d1), FATTN_OK);
    ck_assert(memcmp(&d0, &d1, sizeof d0) == 0);
    cg_key_buf *k0 = malloc(sizeof *k0), *k1 = malloc(sizeof *k1);
    key_of(&d0, NULL, k0);
    key_of(&d1, NULL, k1);
    ck_assert(fattn__cg_key_equal(k1, k0->b, k0->len, k0->hash));
    free(k0);
    free(k1);
}
END_TEST

/* FP8 inference with d_qk 192 / d_v 128: the row fp8_mla_cudnn refuses it
 * until a device measures it (tools/gpu/large-dims.sh runs it with the row
 * lifted); the graph it would run is built here: bmm1 over 192, bmm2 and O
 * over 128, and, with libcudnn, lowered to a finalized operation graph. */
START_TEST(mla_forward)
{
    fp8_params x;
    make_params(&base, &x);
    t_mla(&x);
    cg_fwd_desc d;
    cg_graph *g = malloc(sizeof *g);
    ck_assert_int_eq(tdesc_fwd(&x.f, &d), FATTN_OK);
    ck_assert_int_eq(fattn__cg_build_fwd(g, &d), FATTN_OK);
    ck_assert(d.d == 192 && d.dv == 128);
    const cg_tensor *q = by_uid(g, CG_UID_Q), *v = by_uid(g, CG_UID_V), *o = by_uid(g, CG_UID_O);
    ck_assert(q && v && o && q->dims[3] == 192 && v->dims[3] == 128 && o->dims[3] == 128);
#if FATTN_HAVE_CUDNN
    if (fattn_cudnn_library_loadable()) {
        const cudnn_api *api = fattn__cudnn_api_load(false);
        ck_assert_msg(api != NULL, "%s", fattn_last_error());
        cudnn_plan *p = NULL;
        ck_assert_msg(fattn__cudnn_plan_build(api, NULL, g, &p) == FATTN_OK, "%s", fattn_last_error());
        fattn__cudnn_plan_free(p);
    }
#endif
    free(g);
    fattn_test_mark("cudnn.fp8.construct.mla_forward");
}
END_TEST

#if FATTN_HAVE_CUDNN
/* The FP8 graphs lower to backend descriptors and the operation graph
 * finalizes (no device: heuristics are not asked). */
START_TEST(lowering_finalizes)
{
    const fp8_case *c = &shape_rows[_i];
    const cudnn_api *api = fattn__cudnn_api_load(false);
    ck_assert_msg(api != NULL, "%s", fattn_last_error());
    cg_graph *g = malloc(sizeof *g);
    for (int dir = 0; dir < 2; dir++) {
        fattn_status st;
        if (dir == 0) {
            cg_fwd_desc d;
            st = build_fwd(c, &d, g);
        } else {
            cg_bwd_desc d;
            st = build_bwd(c, &d, g);
        }
        ck_assert_int_eq(st, FATTN_OK);
        cudnn_plan *p = NULL;
        st = fattn__cudnn_plan_build(api, NULL, g, &p);
        if (st != FATTN_OK) { /* the graph, for whoever reads the failure */
            char *dump = fattn__cg_dump(g, true);
            fprintf(stderr, "%s %s graph:\n%s\n", c->id, dir ? "backward" : "forward",
                    dump ? dump : "");
            free(dump);
        }
        ck_assert_msg(st == FATTN_OK, "%s (%s): %s", c->id, dir ? "backward" : "forward",
                      fattn_last_error());
        ck_assert_ptr_nonnull(p->op_graph);
        fattn__cudnn_plan_free(p);
    }
    free(g);
}
END_TEST
#endif

static void list_ids(void)
{
    for (int i = 0; i < N_SHAPES; i++)
        printf("cudnn.fp8.construct.%s\n", shape_rows[i].id);
    printf("cudnn.fp8.construct.mla_forward\n");
}

static Suite *make_suite(void)
{
    fattn_test_cudnn_libraries();
    Suite *s = suite_create("cudnn-construct-fp8");
    TCase *tc = tcase_create("fp8");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, fwd_graph, 0, N_SHAPES);
    tcase_add_loop_test(tc, bwd_graph, 0, N_SHAPES);
    tcase_add_loop_test(tc, fwd_refusals, 0, (int)(sizeof refusal_rows / sizeof refusal_rows[0]));
    tcase_add_loop_test(tc, bwd_refusals, 0,
                        (int)(sizeof bwd_refusal_rows / sizeof bwd_refusal_rows[0]));
    tcase_add_loop_test(tc, arch, 0, (int)(sizeof arch_rows / sizeof arch_rows[0]));
    tcase_add_loop_test(tc, key_each_fp8_field, 0, KF_N);
    tcase_add_test(tc, key_ignores_scaling_values);
    tcase_add_test(tc, mla_forward);
#if FATTN_HAVE_CUDNN
    if (fattn_cudnn_library_loadable())
        tcase_add_loop_test(tc, lowering_finalizes, 0, N_SHAPES);
#endif
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
