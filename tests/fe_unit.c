/* Helpers of the front ends' unit tests (fe_unit.h). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "elemcmp.h"
#include "fe_unit.h"
#include "runtree.h"
#include "treewalk.h"

/* ---- bitwise comparison ------------------------------------------------ */

static bool same_layout(const fattn_tensor *a, const fattn_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

bool fe_same_bits(const fattn_tensor *a, const fattn_tensor *b)
{
    bool ea = fattn_tensor_is_empty(a), eb = fattn_tensor_is_empty(b);
    if (ea || eb)
        return ea && eb;
    if (!same_layout(a, b))
        return false;
    /* Both as datasets of one scratch group (gathered to C order), then
     * the walk's data comparison over the in-memory source. */
    fh_h5_node *g = NULL, *na = NULL, *nb = NULL;
    bool same = false;
    if (fh_h5_node_new_group("", &g) != FATTN_OK ||
        fh_h5_node_add_tensor(g, "a", a, &na) != FATTN_OK ||
        fh_h5_node_add_tensor(g, "b", b, &nb) != FATTN_OK)
        goto fail;
    assert(na->nbytes == nb->nbytes);
    fh_elem_cmp rule = {.mode = FH_ELEM_BITWISE};
    fh_elem_stats s;
    memset(&s, 0, sizeof s);
    s.numel = (uint64_t)fattn_tensor_numel(a);
    fh_walk_memory_state m;
    fh_walk_source src = fh_walk_memory(&m);
    if (fh_walk_compare_data(&src, "t", na, nb, &rule, false, &s, NULL, NULL) != FATTN_OK)
        goto fail;
    same = s.bit_count == 0;
fail:
    fh_h5_node_free(g);
    return same;
}

/* ---- a fake engine that reports cuDNN's support rules -------------------- */

static fattn_status fake_fwd(fattn_engine *e, const fattn_fwd_params *p, const fattn_fwd_call *c)
{
    (void)e;
    (void)p;
    (void)c;
    return fattn_error(FATTN_E_INTERNAL, "fake cudnn engine: must not run");
}

static fattn_status fake_bwd(fattn_engine *e, const fattn_bwd_params *p, const fattn_bwd_call *c)
{
    (void)e;
    (void)p;
    (void)c;
    return fattn_error(FATTN_E_INTERNAL, "fake cudnn engine: must not run");
}

static bool fake_supports(const fattn_engine *e, fattn_engine_query q)
{
    (void)e;
    /* FP8 as cuDNN: an FP8 call reaches the dispatch's gap rows */
    return q == FATTN_ENGINE_Q_SUPPORT_RULES_CUDNN || q == FATTN_ENGINE_Q_FP8;
}

static long fake_cudnn_928(const fattn_engine *e)
{
    (void)e;
    return 92801;
}

static const fattn_engine_ops fake_cudnn_ops = {
    .name = "cudnn", .fwd = fake_fwd, .bwd = fake_bwd, .supports = fake_supports, .free = NULL};
/* the same with cuDNN 9.28.1 loaded: the engine's gap rows are tested at it */
static const fattn_engine_ops fake_cudnn_928_ops = {.name = "cudnn",
                                                    .fwd = fake_fwd,
                                                    .bwd = fake_bwd,
                                                    .supports = fake_supports,
                                                    .cudnn_version = fake_cudnn_928,
                                                    .free = NULL};

static int fake_sm80(const fattn_engine *e)
{
    (void)e;
    return 80;
}

/* the same on an sm_80 device: the rows of some architectures are tested at it */
static const fattn_engine_ops fake_cudnn_sm80_ops = {.name = "cudnn",
                                                     .fwd = fake_fwd,
                                                     .bwd = fake_bwd,
                                                     .supports = fake_supports,
                                                     .sm = fake_sm80,
                                                     .free = NULL};

static bool no_fp8_supports(const fattn_engine *e, fattn_engine_query q)
{
    (void)e;
    (void)q;
    return false;
}

static const fattn_engine_ops fake_no_fp8_ops = {
    .name = "no-fp8", .fwd = fake_fwd, .bwd = fake_bwd, .supports = no_fp8_supports};

void fe_fake_no_fp8(fattn_engine *e)
{
    memset(e, 0, sizeof *e);
    e->ops = &fake_no_fp8_ops;
}

void fe_fake_cudnn(fattn_engine *e)
{
    memset(e, 0, sizeof *e);
    e->ops = &fake_cudnn_ops;
}

static void fake_cudnn_of(const fe_spec *s, fattn_engine *e)
{
    fe_fake_cudnn(e);
    assert(!(s->cudnn_928 && s->sm) && (s->sm == 0 || s->sm == 80));
    if (s->cudnn_928)
        e->ops = &fake_cudnn_928_ops;
    if (s->sm == 80)
        e->ops = &fake_cudnn_sm80_ops;
}

/* ---- small inputs for the support rules ---------------------------------- */

fe_spec fe_spec_default(void)
{
    fe_spec s;
    memset(&s, 0, sizeof s);
    s.layout = FATTN_LAYOUT_BSHD_BSHD_BSHD;
    s.dtype = FATTN_DTYPE_FLOAT16;
    s.h = s.hg = 2;
    s.sq = s.skv = 16;
    s.d = s.dv = 16;
    s.bias_type = FATTN_BIAS_NO_BIAS;
    s.bias_dtype = FATTN_DTYPE_FLOAT16;
    s.mask = FATTN_MASK_NO_MASK;
    s.softmax = FATTN_SOFTMAX_VANILLA;
    s.window[0] = s.window[1] = -1;
    return s;
}

fe_spec fe_spec_for_rule(const char *id)
{
    fe_spec s = fe_spec_default();
    if (!strcmp(id, "pre_scale_bias")) {
        s.bias_type = FATTN_BIAS_PRE_SCALE_BIAS;
        s.bias_present = true;
    } else if (!strcmp(id, "bias_missing")) {
        s.bias_type = FATTN_BIAS_POST_SCALE_BIAS;
    } else if (!strcmp(id, "bias_dtype")) {
        s.bias_type = FATTN_BIAS_POST_SCALE_BIAS;
        s.bias_present = true;
        s.bias_dtype = FATTN_DTYPE_FLOAT32;
    } else if (!strcmp(id, "bias_padding")) {
        s.bias_type = FATTN_BIAS_POST_SCALE_BIAS;
        s.bias_present = true;
        s.mask = FATTN_MASK_PADDING;
    } else if (!strcmp(id, "alibi_mask")) {
        s.bias_type = FATTN_BIAS_ALIBI;
    } else if (!strcmp(id, "window_mask")) {
        s.mask = FATTN_MASK_CAUSAL;
        s.window[0] = -1, s.window[1] = 3;
    } else if (!strcmp(id, "window_not_normalised")) {
        s.window[0] = -1, s.window[1] = 0; /* no_mask: TE rewrites to (-1,-1) */
    } else if (!strcmp(id, "heads_divisible")) {
        s.h = 3, s.hg = 2;
    } else if (!strcmp(id, "thd_padding")) {
        s.layout = FATTN_LAYOUT_THD_THD_THD;
    } else if (!strcmp(id, "head_dim")) {
        s.d = s.dv = 12;
    } else if (!strcmp(id, "head_dim_large_inference")) {
        s.d = s.dv = 512;
        s.inference = true;
        s.cudnn_version = 91001; /* TE's 9.10.2 clause admits it from 91002 */
    } else if (!strcmp(id, "head_dim_large_decode")) {
        s.d = s.dv = 512;
        s.inference = true;
        s.sq = 1;
        s.mask = FATTN_MASK_CAUSAL;
        s.window[0] = -1, s.window[1] = 0;
    } else if (!strcmp(id, "mla_hopper_training")) {
        s.d = 256, s.dv = 128; /* training, as every fe_spec */
    } else if (!strcmp(id, "bottom_right_sq_gt_skv")) {
        s.mask = FATTN_MASK_CAUSAL_BOTTOM_RIGHT;
        s.window[0] = -1, s.window[1] = 0;
        s.sq = 32;
    } else if (!strcmp(id, "swa_restrictions")) {
        s.window[0] = 3, s.window[1] = 1;
        s.sq = 32; /* sq > skv */
    } else if (!strcmp(id, "dropout_range")) {
        s.dropout = 1.0f;
    } else if (!strcmp(id, "bias_sink_quirk")) {
        s.bias_type = FATTN_BIAS_POST_SCALE_BIAS;
        s.bias_present = true;
        s.softmax = FATTN_SOFTMAX_LEARNABLE;
    } else if (!strcmp(id, "pre_scale_bias_engines")) {
        s = fe_spec_for_rule("pre_scale_bias");
    } else if (!strcmp(id, "fp8_descales_engines")) {
        s.dtype = FATTN_DTYPE_FLOAT8_E4M3FN; /* FP8 codes, no fp8 */
        s.d = s.dv = 128;
    } else if (!strcmp(id, "fp8_paged_cudnn")) {
        s = fe_spec_for_rule("paged_fp8");
        s.cudnn = true;
    } else if (!strncmp(id, "fp8_", 4)) {
        /* FP8 rules: a valid FP8 training spec (d = 128) changed in one place */
        s.fp8 = true;
        s.d = s.dv = 128;
        /* an engine's gap that TE's own rule refuses too: that rule's spec */
        if (!strcmp(id, "fp8_bias_engines"))
            id = "fp8_bias";
        else if (!strcmp(id, "fp8_softmax_engines"))
            id = "fp8_softmax";
        else if (!strcmp(id, "fp8_thd_cudnn"))
            id = "fp8_qkv_format", s.cudnn = true;
        else if (!strcmp(id, "fp8_max_logit_cudnn"))
            id = "fp8_max_logit", s.cudnn = true;
        else if (!strcmp(id, "fp8_head_dim_cudnn"))
            s.d = s.dv = 72, s.cudnn = true; /* multiples of 8, not of 16 */
        else if (!strcmp(id, "fp8_arch_cudnn"))
            s.cudnn = true, s.sm = 80;
        else if (!strcmp(id, "fp8_bottom_right_sm90_cudnn"))
            /* a top-left mask given a bottom-right diagonal, as a direct caller
             * may: TE's fp8_bottom_right reads the mask type only */
            s.cudnn = true, s.mask = FATTN_MASK_PADDING_CAUSAL, s.window[1] = 0,
            s.bottom_right = true;
        else if (!strcmp(id, "fp8_o_f16_sm90_cudnn"))
            /* current scaling: the FP8 branch asks for an O of the nominal dtype */
            s.cudnn = true, s.fp8_recipe = FATTN_FP8_RECIPE_CURRENT;
        else if (!strcmp(id, "fp8_dropout_sm90_cudnn"))
            s.cudnn = true, s.dropout = 0.1f;
        else if (!strcmp(id, "fp8_bwd_head_dim_sm90_cudnn"))
            s.cudnn = true, s.d = s.dv = 64, s.inference = true; /* TE's inference takes it */
        if (!strcmp(id, "fp8_mxfp8_blackwell"))
            s.fp8_recipe = FATTN_FP8_RECIPE_MXFP8;
        else if (!strcmp(id, "fp8_quantizer_type"))
            s.fp8_recipe = FATTN_FP8_RECIPE_BLOCK;
        else if (!strcmp(id, "fp8_qkv_format"))
            s.layout = FATTN_LAYOUT_THD_THD_THD, s.mask = FATTN_MASK_PADDING;
        else if (!strcmp(id, "fp8_bias"))
            s.bias_type = FATTN_BIAS_POST_SCALE_BIAS, s.bias_present = true;
        else if (!strcmp(id, "fp8_softmax"))
            s.softmax = FATTN_SOFTMAX_OFF_BY_ONE;
        else if (!strcmp(id, "fp8_bottom_right"))
            s.mask = FATTN_MASK_CAUSAL_BOTTOM_RIGHT, s.window[0] = -1, s.window[1] = 0;
        else if (!strcmp(id, "fp8_head_dim"))
            s.d = s.dv = 64;
        else if (!strcmp(id, "fp8_max_logit"))
            s.return_max_logit = true;
        else if (!strcmp(id, "fp8_window"))
            s.mask = FATTN_MASK_CAUSAL, s.window[0] = 3, s.window[1] = 0;
    } else if (!strcmp(id, "cpu_offload_v1")) {
        s.cpu_offload = true;
    } else if (!strcmp(id, "max_logit_cudnn")) {
        s.return_max_logit = true;
        s.cudnn = true;
    } else if (!strcmp(id, "float32_cudnn")) {
        s.dtype = FATTN_DTYPE_FLOAT32;
        s.bias_dtype = FATTN_DTYPE_FLOAT32;
        s.cudnn = true;
    } else if (!strncmp(id, "paged_", 6)) {
        s.layout = FATTN_LAYOUT_PAGED_KV_BSHD_BSHD_BSHD;
        s.mask = FATTN_MASK_PADDING;
        s.inference = true; /* a KV cache is inference */
        if (!strcmp(id, "paged_padding"))
            s.mask = FATTN_MASK_CAUSAL_BOTTOM_RIGHT, s.window[0] = -1, s.window[1] = 0;
        else if (!strcmp(id, "paged_training"))
            s.inference = false;
        else if (!strcmp(id, "paged_fp8"))
            s.fp8 = true;
    } else if (!strcmp(id, "thd_paged_decode_cudnn")) {
        s.layout = FATTN_LAYOUT_PAGED_KV_THD_SBHD_SBHD;
        s.mask = FATTN_MASK_PADDING;
        s.inference = true; /* a KV cache is inference */
        s.sq = 1;           /* decoding: one token per sequence */
        s.cudnn = true;
    } else if (!strcmp(id, "thd_cache_decode_gqa_cudnn")) {
        s.layout = FATTN_LAYOUT_THD_BSHD_BSHD;
        s.mask = FATTN_MASK_PADDING;
        s.inference = true; /* a KV cache is inference */
        s.sq = 1;           /* decoding: one token per sequence */
        s.hg = 1;           /* fewer KV heads than q heads */
        s.cudnn = true;
    } else if (!strcmp(id, "dsink_thd_cudnn")) {
        s.layout = FATTN_LAYOUT_THD_THD_THD;
        s.mask = FATTN_MASK_PADDING;
        s.softmax = FATTN_SOFTMAX_OFF_BY_ONE;
        s.cudnn = true;
    }
    return s;
}

const char *fe_rule_at_front_end(const char *id)
{
    static const struct {
        const char *gap, *front;
    } shadowed[] = {
        {"pre_scale_bias_engines", "pre_scale_bias"},
        {"fp8_descales_engines", NULL}, /* FP8 codes need the fp8 branch's quantizers */
        {"fp8_bias_engines", "fp8_bias"},
        {"fp8_softmax_engines", "fp8_softmax"},
        {"fp8_thd_cudnn", "fp8_qkv_format"},
        {"fp8_head_dim_cudnn", "fp8_head_dim"},
        {"fp8_paged_cudnn", "paged_fp8"},
        {"fp8_max_logit_cudnn", "fp8_max_logit"},
    };
    for (int i = 0; i < FE_NROWS(shadowed); i++)
        if (!strcmp(id, shadowed[i].gap))
            return shadowed[i].front;
    return id;
}

bool fe_rule_at_reference(const fattn_support_rule *r)
{
    long v = FATTN_SUPPORT_CUDNN_REFERENCE;
    return (!r->cudnn_from || v >= r->cudnn_from) && (!r->cudnn_below || v < r->cudnn_below);
}

fattn_support_query fe_query(const fe_spec *s)
{
    fattn_support_query q;
    fattn_support_query_init(&q);
    q.q_dtype = q.kv_dtype = s->dtype;
    q.has_bias_tensor = s->bias_present;
    q.bias_dtype = s->bias_dtype;
    q.layout = s->layout;
    q.bias_type = s->bias_type;
    q.mask_type = s->mask;
    q.softmax_type = s->softmax;
    q.dropout = s->dropout;
    q.h = s->h;
    q.hg = s->hg;
    q.sq = s->sq;
    q.skv = s->skv;
    q.d_qk = s->d;
    q.d_v = s->dv;
    q.window_left = s->window[0];
    q.window_right = s->window[1];
    q.is_training = !s->inference;
    q.return_max_logit = s->return_max_logit;
    q.fp8 = s->fp8;
    q.fp8_recipe = s->fp8 ? (s->fp8_recipe ? s->fp8_recipe : FATTN_FP8_RECIPE_DELAYED)
                          : FATTN_FP8_RECIPE_NONE;
    q.cpu_offload = s->cpu_offload;
    if (s->cudnn_version)
        q.cudnn_version = s->cudnn_version;
    q.engine_sm = s->sm;
    q.bottom_right_diagonal = s->bottom_right;
    /* the O the FP8 branch hands the engine: FP8 under delayed scaling, the
     * nominal dtype under current scaling */
    if (s->fp8)
        q.o_dtype = q.fp8_recipe == FATTN_FP8_RECIPE_CURRENT ? s->dtype
                                                             : FATTN_DTYPE_FLOAT8_E4M3FN;
    return q;
}

/* Zeroed tensors of a spec (b = 2; THD t = 2*sq; paged K/V as 2 pages). */
typedef struct spec_inputs {
    fattn_tensor q, k, v, bias, offset, cu_q, cu_kv;
} spec_inputs;

static void zero_alloc(fattn_tensor *t, fattn_dtype dt, int nd, const int64_t *sh)
{
    if (fattn_tensor_alloc(t, dt, nd, sh) == FATTN_OK)
        fattn_tensor_fill_bits(t, 0);
}

static void inputs_make(const fe_spec *s, spec_inputs *in)
{
    memset(in, 0, sizeof *in);
    in->bias = in->offset = fattn_tensor_empty();
    bool thd = fattn_layout_q_format(s->layout) == FATTN_FORMAT_THD;
    /* q and K/V each in their own format: a THD q may read a 4-dim (paged) cache */
    bool thd_kv = fattn_layout_kv_format(s->layout) == FATTN_FORMAT_THD;
    if (thd) {
        int64_t qs[3] = {2 * s->sq, s->h, s->d};
        zero_alloc(&in->q, s->dtype, 3, qs);
    } else {
        int64_t qs[4] = {2, s->sq, s->h, s->d};
        zero_alloc(&in->q, s->dtype, 4, qs);
    }
    if (thd_kv) {
        int64_t ks[3] = {2 * s->skv, s->hg, s->d}, vs[3] = {2 * s->skv, s->hg, s->dv};
        zero_alloc(&in->k, s->dtype, 3, ks);
        zero_alloc(&in->v, s->dtype, 3, vs);
    } else {
        int64_t ks[4] = {2, s->skv, s->hg, s->d}, vs[4] = {2, s->skv, s->hg, s->dv};
        zero_alloc(&in->k, s->dtype, 4, ks);
        zero_alloc(&in->v, s->dtype, 4, vs);
    }
    if (s->bias_present) {
        int64_t bs[4] = {1, s->h, s->sq, s->skv};
        zero_alloc(&in->bias, s->bias_dtype, 4, bs);
    }
    if (s->softmax != FATTN_SOFTMAX_VANILLA) {
        int64_t os[4] = {1, s->h, 1, 1};
        zero_alloc(&in->offset, FATTN_DTYPE_FLOAT32, 4, os);
    }
    int64_t three = 3;
    fattn_tensor_alloc(&in->cu_q, FATTN_DTYPE_INT32, 1, &three);
    fattn_tensor_alloc(&in->cu_kv, FATTN_DTYPE_INT32, 1, &three);
    int32_t *cq = in->cu_q.data, *ck = in->cu_kv.data;
    cq[0] = ck[0] = 0;
    cq[1] = s->sq, cq[2] = 2 * s->sq;
    ck[1] = s->skv, ck[2] = 2 * s->skv;
}

static void inputs_free(spec_inputs *in)
{
    fattn_tensor *ts[] = {&in->q, &in->k, &in->v, &in->bias, &in->offset, &in->cu_q, &in->cu_kv};
    for (int i = 0; i < FE_NROWS(ts); i++)
        fattn_tensor_free(ts[i]);
}

/* DPA's quantizers for a spec: every one of the spec's recipe (delayed by
 * default), E4M3 forward and E5M2 backward, unit scales. */
static fattn_fp8_quantizers fe_quantizers(const fe_spec *s)
{
    fattn_fp8_quantizers qs;
    memset(&qs, 0, sizeof qs);
    fattn_fp8_quantizer *all[6] = {&qs.QKV, &qs.O, &qs.S, &qs.dO, &qs.dP, &qs.dQKV};
    for (int i = 0; i < 6; i++) {
        all[i]->kind = s->fp8_recipe ? s->fp8_recipe : FATTN_FP8_RECIPE_DELAYED;
        all[i]->dtype = i < 3 ? FATTN_DTYPE_FLOAT8_E4M3FN : FATTN_DTYPE_FLOAT8_E5M2;
        all[i]->scale = 1.0f;
    }
    return qs;
}

fattn_status fe_legacy_spec(const fe_spec *s, fattn_engine *cpu)
{
    fattn_fp8_quantizers qs = fe_quantizers(s);
    fattn_engine fake;
    fake_cudnn_of(s, &fake);
    fattn_engine *e = s->cudnn ? &fake : cpu;
    spec_inputs in;
    inputs_make(s, &in);
    fattn_legacy_ctx *ctx = NULL;
    fattn_status st = fattn_legacy_ctx_init(&ctx, e);
    fattn_rng_gen gen = {1, 0};
    fattn_tensor out, ml;
    if (st == FATTN_OK)
        ctx->cpu_offload = s->cpu_offload;
    if (st == FATTN_OK)
        st = fattn_legacy_forward(ctx, !s->inference, s->sq, s->skv, &in.cu_q, &in.cu_kv, NULL, NULL,
                                  NULL, NULL, &in.q, &in.k, &in.v, &in.bias,
                                  FATTN_LEGACY_SCALE_NONE, s->dropout, true, s->layout,
                                  s->bias_type, s->mask, s->softmax, s->window,
                                  s->bottom_right ? 1 : -1, &gen,
                                  FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN, false, s->fp8, NULL,
                                  s->fp8 ? &qs : NULL, false, &in.offset, false, false, 1,
                                  s->return_max_logit, NULL, NULL, &out, &ml);
    fattn_legacy_ctx_free(ctx);
    inputs_free(&in);
    return st;
}

fattn_status fe_split_spec(const fe_spec *s, fattn_engine *cpu)
{
    fattn_fp8_quantizers qs = fe_quantizers(s);
    fattn_engine fake;
    fake_cudnn_of(s, &fake);
    spec_inputs in;
    inputs_make(s, &in);
    fattn_rng_gen gen = {1, 0};
    fattn_fwd_args a;
    fattn_fwd_args_init(&a);
    a.engine = s->cudnn ? &fake : cpu;
    a.max_seqlen_q = s->sq;
    a.max_seqlen_kv = s->skv;
    a.cu_seqlens_q = in.cu_q;
    a.cu_seqlens_kv = in.cu_kv;
    a.is_training = s->inference ? 0 : 1;
    a.qkv_layout = s->layout;
    a.attn_bias_type = s->bias_type;
    a.attn_mask_type = s->mask;
    a.softmax_type = s->softmax;
    a.window_size[0] = s->window[0];
    a.window_size[1] = s->window[1];
    a.bottom_right_diagonal = s->bottom_right ? 1 : -1;
    a.dropout_p = s->dropout;
    a.fused_attention_backend = FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN;
    a.return_max_logit = s->return_max_logit;
    a.fp8 = s->fp8;
    a.quantizers = s->fp8 ? &qs : NULL;
    a.cpu_offload = s->cpu_offload;
    a.rng_gen = &gen;
    fattn_split_fwd_result res;
    fattn_status st =
        fattn_split_forward_impl(&a, &in.q, &in.k, &in.v, &in.bias, &in.offset, &res);
    fattn_split_fwd_result_free(&res);
    inputs_free(&in);
    return st;
}

/* ---- a matrix case through one front end's calls ------------------------- */

fattn_support_query fe_case_query(const tcase *c)
{
    fattn_support_query q;
    fattn_support_query_init(&q);
    q.q_dtype = q.kv_dtype = c->dtype;
    q.has_bias_tensor = c->bias == FATTN_BIAS_POST_SCALE_BIAS;
    q.bias_dtype = c->dtype;
    q.layout = c->layout;
    q.bias_type = c->bias;
    q.mask_type = c->mask;
    q.softmax_type = c->softmax;
    q.dropout = c->dropout;
    q.h = c->h, q.hg = c->hg, q.sq = c->sq, q.skv = c->skv, q.d_qk = c->d, q.d_v = c->dv;
    q.window_left = c->window[0], q.window_right = c->window[1];
    q.direct_call = c->direct_call;
    q.is_training = c->training;
    q.return_max_logit = c->return_max_logit;
    return q;
}

/* Matrix cases TE itself refuses on the reference platform (the CPU engine
 * still runs them directly); the front ends must refuse them alike. */
static const char *const te_invalid_cases[] = {"bwd.swa.empty_rows.f16",
                                               "bwd.swa.empty_rows.bf16"};

bool fe_case_te_invalid(const tcase *c)
{
    for (int i = 0; i < FE_NROWS(te_invalid_cases); i++)
        if (!strcmp(c->id, te_invalid_cases[i]))
            return true;
    return false;
}

fattn_status fe_legacy_call_fwd(const tcase *c, tcase_buffers *b, fattn_legacy_ctx *ctx,
                                fattn_rng_gen *gen, fattn_tensor *out, fattn_tensor *max_logit)
{
    ctx->poison = FE_POISON;
    ctx->direct_call = c->direct_call;
    return fattn_legacy_forward(
        ctx, c->training, c->sq, c->skv, &b->cu_q, &b->cu_kv, &b->cu_q_pad, &b->cu_kv_pad,
        NULL, NULL, &b->q, &b->k, &b->v, &b->bias, FATTN_LEGACY_SCALE_NONE, c->dropout, true,
        c->layout, c->bias, c->mask, c->softmax, c->window, c->bottom_right ? 1 : 0, gen,
        FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN, false, false, NULL, NULL, true,
        &b->softmax_offset, false, false, 1, c->return_max_logit, NULL, NULL, out, max_logit);
}

fattn_status fe_legacy_call_fwd_bwd(const tcase *c, tcase_buffers *b, fattn_legacy_ctx *ctx,
                                    fattn_rng_gen *gen, fattn_tensor *out,
                                    fattn_tensor *max_logit,
                                    fattn_tensor grads[FATTN_LEGACY_NGRADS])
{
    fattn_status st = fe_legacy_call_fwd(c, b, ctx, gen, out, max_logit);
    for (int i = 0; i < FATTN_LEGACY_NGRADS; i++)
        grads[i] = fattn_tensor_empty();
    if (st != FATTN_OK || !c->training)
        return st;
    return fattn_legacy_backward(ctx, &b->d_o, grads);
}

void fe_split_fwd_args_of(const tcase *c, tcase_buffers *b, fattn_engine *e, fattn_rng_gen *gen,
                          fattn_fwd_args *a)
{
    fattn_fwd_args_init(a);
    a->max_seqlen_q = c->sq;
    a->max_seqlen_kv = c->skv;
    a->cu_seqlens_q = b->cu_q;
    a->cu_seqlens_kv = b->cu_kv;
    a->cu_seqlens_q_padded = b->cu_q_pad;
    a->cu_seqlens_kv_padded = b->cu_kv_pad;
    a->is_training = c->training ? 1 : 0;
    a->qkv_layout = c->layout;
    a->attn_bias_type = c->bias;
    a->attn_mask_type = c->mask;
    a->softmax_type = c->softmax;
    a->window_size[0] = c->window[0];
    a->window_size[1] = c->window[1];
    a->bottom_right_diagonal = c->bottom_right ? 1 : 0;
    a->dropout_p = c->dropout;
    a->fused_attention_backend = FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN;
    a->deterministic = true;
    a->return_max_logit = c->return_max_logit;
    a->rng_gen = gen;
    a->engine = e;
    a->poison = FE_POISON;
    a->direct_call = c->direct_call;
}

fattn_status fe_split_call_fwd_bwd(const tcase *c, tcase_buffers *b, fattn_engine *e,
                                   fattn_split_func_ctx *ctx, fattn_rng_gen *gen,
                                   fattn_tensor *out, fattn_tensor *max_logit,
                                   fattn_tensor grads6[6])
{
    fattn_fwd_args a;
    fe_split_fwd_args_of(c, b, e, gen, &a);
    fattn_status st = fattn_split_func_forward(ctx, &b->q, &b->k, &b->v, &b->bias,
                                               &b->softmax_offset, &a, out, max_logit);
    for (int i = 0; i < 6; i++)
        grads6[i] = fattn_tensor_empty();
    if (st != FATTN_OK || !c->training)
        return st;
    return fattn_split_func_backward(ctx, &b->d_o, grads6);
}

