/* The split front end (fattn/split.h): TE's FusedAttnFunc after the
 * refactor — args structs, forward_impl / setup_ctx / backward_impl, fixed
 * aux slots, saved-tensor dedup, 5 grads + 1 empty.
 *
 * Uses only the engine API and core types. The legacy front end
 * (lib/legacy/) implements the same rules separately; code that looks alike
 * is marked "independent witness" and must not be unified.
 *
 * This file is the code under review, step by step as TE's helpers:
 * _fused_attn_forward_impl, _fused_attn_setup_ctx and
 * _fused_attn_backward_impl, each a short sequence of static steps named
 * sp_<helper>_<block> after the block of the helper it models; args.c holds
 * the data they share (names, args structs, slots, dedup). The self-test
 * mutants of `fattn verify` are patches to this file (tests/mutants/).
 *
 * TE lines cited as file:line are TE 2.20.2's (the release that holds the
 * merged refactor; docs/frontends.md maps every function here to them):
 *   backends.py    transformer_engine/pytorch/attention/dot_product_attention/backends.py
 *   fused_attn.py  transformer_engine/pytorch/cpp_extensions/fused_attn.py
 * and, as the pure-Python wheel holds no C++, at TE commit d0067d0:
 *   attention.cpp  transformer_engine/pytorch/csrc/extensions/attention.cpp
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/dtype.h"
#include "fattn/split.h"
#include "fattn/support.h"
#include "internal.h"

/* ------------------------------------------------------------------------ */
/* Helpers (independent witnesses of lib/legacy/legacy.c)                   */
/* ------------------------------------------------------------------------ */

static bool sp_none(const fattn_tensor *t)
{
    return !t || fattn_tensor_is_empty(t);
}

static fattn_tensor sp_opt(const fattn_tensor *t)
{
    return sp_none(t) ? fattn_tensor_empty() : *t;
}

/* independent witness: mirrors lib/legacy/legacy.c lg_heads_dim, do not unify. */
static int sp_heads_dim(fattn_qkv_format f)
{
    return (f == FATTN_FORMAT_THD || f == FATTN_FORMAT_BHSD) ? 1 : 2;
}

/* independent witness: mirrors lib/legacy/legacy.c lg_support_engine, do not unify. */
static unsigned sp_support_engine(const fattn_engine *e)
{
    return fattn_engine_support_bit(e);
}


static float sp_amax_step(float m, float x)
{
    if (isnan(m))
        return m;
    if (isnan(x))
        return x;
    return x > m ? x : m;
}

/* independent witness: mirrors lib/legacy/legacy.c lg_max_logit, do not
 * unify. fused_attn.py:402-441: amax of Max over all dims but h, in O's
 * dtype, [h]; THD counts only tokens [start(b), start(b)+len(b)) (start from
 * cu_seqlens_q_padded when given); other formats with a padding mask only
 * rows i < len(b) (fattn: the rest is outside the defined region). */
static fattn_status sp_max_logit(const fattn_tensor *maxt, const fattn_tensor *cu_q,
                                 const fattn_tensor *cu_q_pad, bool padding, int64_t h,
                                 fattn_dtype odt, fattn_tensor *res)
{
    /* Max as the engine dispatch checked it: float32 [t_q,h,1] or [b,h,sq,1] */
    assert(maxt->dtype == FATTN_DTYPE_FLOAT32 && (maxt->ndim == 3 || maxt->ndim == 4));
    fattn_status st = fattn_tensor_alloc(res, odt, 1, &h);
    if (st != FATTN_OK)
        return st;
    const float *mx = maxt->data;
    const int32_t *cu = sp_none(cu_q) ? NULL : (const int32_t *)cu_q->data;
    const int32_t *pad = sp_none(cu_q_pad) ? NULL : (const int32_t *)cu_q_pad->data;
    int64_t nb = sp_none(cu_q) ? 0 : cu_q->shape[0] - 1;
    for (int64_t head = 0; head < h; head++) {
        float m = -INFINITY;
        int64_t ix[FATTN_MAX_DIMS] = {0};
        if (maxt->ndim == 3) { /* ragged [t_q, h, 1] */
            int64_t tq = maxt->shape[0];
            for (int64_t b = 0; b < nb; b++) {
                int64_t first = pad ? pad[b] : cu[b];
                int64_t stop = first + (cu[b + 1] - cu[b]);
                if (stop > tq)
                    stop = tq;
                if (first < 0)
                    first = 0;
                for (int64_t tok = first; tok < stop; tok++) {
                    ix[0] = tok;
                    ix[1] = head;
                    ix[2] = 0;
                    m = sp_amax_step(m, mx[fattn_tensor_offset(maxt, ix)]);
                }
            }
        } else { /* [b, h, sq, 1] */
            for (int64_t b = 0; b < maxt->shape[0]; b++) {
                int64_t rows = maxt->shape[2];
                if (padding && cu && b < nb && cu[b + 1] - cu[b] < rows)
                    rows = cu[b + 1] - cu[b];
                for (int64_t i = 0; i < rows; i++) {
                    ix[0] = b;
                    ix[1] = head;
                    ix[2] = i;
                    ix[3] = 0;
                    m = sp_amax_step(m, mx[fattn_tensor_offset(maxt, ix)]);
                }
            }
        }
        fattn_store_f32(res->data, odt, head, m);
    }
    return FATTN_OK;
}

/* ------------------------------------------------------------------------ */
/* forward_impl                                                             */
/* ------------------------------------------------------------------------ */

/* _fused_attn_forward_impl, first: the support table (checked here
 * independently of legacy), then the fused-attention backend the f16 path
 * needs. */
static fattn_status sp_forward_impl_support(const sp_forward_frame *f)
{
    const fattn_fwd_args *args = f->args;
    fattn_support_query query;
    fattn_support_query_init(&query);
    query.q_dtype = f->nominal; /* a Float8Tensor reports its nominal dtype (fused_attn.py:340) */
    query.kv_dtype = f->is_input_fp8 ? f->nominal : f->k->dtype;
    query.has_bias_tensor = !sp_none(f->attn_bias);
    query.bias_dtype = query.has_bias_tensor ? f->attn_bias->dtype : FATTN_DTYPE_INVALID;
    query.layout = args->qkv_layout;
    query.bias_type = args->attn_bias_type;
    query.mask_type = args->attn_mask_type;
    query.softmax_type = args->softmax_type;
    query.dropout = args->dropout_p;
    query.h = f->h;
    query.hg = f->k->shape[sp_heads_dim(f->kvf)];
    query.sq = args->max_seqlen_q;
    query.skv = args->max_seqlen_kv;
    query.d_qk = f->d_qk;
    query.d_v = f->d_v;
    query.window_left = args->window_size[0];
    query.window_right = args->window_size[1];
    query.is_training = args->is_training == 1;
    query.return_max_logit = args->return_max_logit;
    query.engine_cudnn_version = fattn_engine_cudnn_version(args->engine);
    query.engine_sm = fattn_engine_sm(args->engine);
    query.direct_call = args->direct_call;
    query.fp8 = args->fp8;
    query.fp8_recipe =
        (args->fp8 && args->quantizers) ? args->quantizers->QKV.kind : FATTN_FP8_RECIPE_NONE;
    query.cpu_offload = args->cpu_offload;
    fattn_status st = fattn_support_check(&query, sp_support_engine(args->engine), NULL);
    if (st != FATTN_OK || args->fp8) /* S:1646: the FP8 branch sets the backend */
        return st;
    if (args->fused_attention_backend != FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN)
        return fattn_error(FATTN_E_INVALID_CASE,
                           "split forward: fused_attention_backend %d cannot run the f16 path "
                           "(TE transformer_engine/pytorch/cpp_extensions/fused_attn.py:348)",
                           (int)args->fused_attention_backend);
    return FATTN_OK;
}

/* fused_attn.py:325-333: attn_scale and bottom_right_diagonal of None. */
static void sp_forward_impl_defaults(sp_forward_frame *f)
{
    const fattn_fwd_args *args = f->args;
    f->scale = args->attn_scale;
    if (isnan(f->scale))
        f->scale = (float)(1.0 / sqrt((double)f->d_qk));
    if (args->bottom_right_diagonal == -1)
        f->brd = fattn_bottom_right_default_fwd(args->attn_mask_type);
    else
        f->brd = args->bottom_right_diagonal == 1;
}

/* independent witness: mirrors lib/legacy/legacy.c (rng_state draw), do
 * not unify. attention.cpp:231-236: (seed, offset), then offset += 16. */
static fattn_status sp_forward_impl_rng_state(sp_forward_frame *f)
{
    fattn_split_fwd_result *res = f->res;
    int64_t two = 2;
    fattn_status st = fattn_tensor_alloc(&res->own_rng_state, FATTN_DTYPE_INT64, 1, &two);
    if (st != FATTN_OK)
        return st;
    int64_t *rs = res->own_rng_state.data;
    rs[0] = (int64_t)f->args->rng_gen->seed;
    rs[1] = (int64_t)f->args->rng_gen->offset;
    uint64_t step = f->args->fp8 ? fattn__split_fp8_rng_step(f->args) : FATTN_RNG_F16_INCREMENT;
    f->args->rng_gen->offset = f->args->rng_gen->offset + step;
    return FATTN_OK;
}

/* O: Q's shape with V's head dim (attention.cpp:173-176: zeroed for a THD O). */
static fattn_status sp_forward_impl_alloc_out(sp_forward_frame *f)
{
    const fattn_tensor *q = f->q;
    int64_t oshape[FATTN_MAX_DIMS];
    memcpy(oshape, q->shape, sizeof oshape);
    oshape[q->ndim - 1] = f->d_v;
    fattn_status st = fattn__split_alloc_out(f->args->poison, &f->res->own_out, f->nominal, q->ndim, oshape);
    if (st != FATTN_OK)
        return st;
    if (f->qf == FATTN_FORMAT_THD)
        fattn_tensor_fill_bits(&f->res->own_out, 0);
    return FATTN_OK;
}

/* fused_attn.py:402-441: max_logit from Max, when asked for. */
static fattn_status sp_forward_impl_max_logit(sp_forward_frame *f)
{
    const fattn_fwd_args *args = f->args;
    if (!args->return_max_logit)
        return FATTN_OK;
    return sp_max_logit(&f->res->own_max, &args->cu_seqlens_q, &args->cu_seqlens_q_padded,
                        fattn_mask_has_padding(args->attn_mask_type), f->h, f->q->dtype,
                        &f->res->own_max_logit);
}

/* backends.py:1825-1854 (f16 path): the aux pack's extra entries checked
 * against the inputs, then tensors_to_save and saved_from. */
static fattn_status sp_forward_impl_tensors_to_save(sp_forward_frame *f)
{
    const fattn_fwd_args *args = f->args;
    fattn_split_fwd_result *res = f->res;
    bool has_bias = args->attn_bias_type != FATTN_BIAS_NO_BIAS &&
                    args->attn_bias_type != FATTN_BIAS_ALIBI && !sp_none(f->attn_bias);
    bool has_softmax_offset =
        args->softmax_type != FATTN_SOFTMAX_VANILLA && !sp_none(f->softmax_offset);
    int n_extra = !fattn_tensor_is_empty(&f->aux[SP_AUX_BIAS]) +
                  !fattn_tensor_is_empty(&f->aux[SP_AUX_SOFTMAX_OFFSET]);
    if (n_extra != (int)has_bias + (int)has_softmax_offset)
        return fattn_error(FATTN_E_INTERNAL,
                           "split forward: unexpected fused attention aux tensors (%d beyond "
                           "stats and rng_state, %d expected; TE 2.20.2 backends.py:1828 asserts)",
                           n_extra, (int)has_bias + (int)has_softmax_offset);
    fattn_tensor fp8[SP_QKVO_N] = {fattn_tensor_empty(), fattn_tensor_empty(),
                                   fattn_tensor_empty(), fattn_tensor_empty()};
    fattn_tensor f16[SP_QKVO_N] = {*f->q, *f->k, *f->v, res->own_out};
    fattn_split_save_variant variant = FATTN_SPLIT_SAVE_F16;
    if (args->fp8) {
        variant = fattn__split_fp8_save_variant(f);
        fattn__split_fp8_tensors(f, fp8, f16);
    }
    fattn_status st = fattn_split_fill_to_save(variant, fp8, f16, &f->aux[SP_AUX_STATS],
                                               &f->aux[SP_AUX_RNG_STATE], &res->to_save);
    if (st != FATTN_OK)
        return st;
    fattn_split_dedup(&res->to_save, f->q, f->k, f->v, &f->out_ret, has_bias,
                      has_softmax_offset, res->ctx_attrs.saved_from);
    if (args->fp8)
        fattn__split_fp8_scale_invs(f);
    return FATTN_OK;
}

/* ctx_attrs (backends.py:1860-1877), f16 path. */
static void sp_forward_impl_ctx_attrs(sp_forward_frame *f)
{
    fattn_split_ctx_attrs *ca = &f->res->ctx_attrs;
    ca->fp8 = false;
    ca->nominal_dtype = f->nominal;
    ca->is_input_fp8 = false;
    ca->qkv_type = NULL;
    ca->qkv_layout = f->args->qkv_layout;
    ca->dqkv_layout = f->args->qkv_layout;
    ca->o_format = f->qf;
    ca->qkv_scale_inv_format = FATTN_FORMAT_NOT_SET;
    ca->fused_attention_backend = FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN;
    ca->QKV_quantizer = ca->O_quantizer = ca->dQKV_quantizer = ca->dO_quantizer =
        ca->dP_quantizer = ca->S_quantizer = NULL;
}

/* _fused_attn_forward_impl, backends.py:1578-1878. */
fattn_status fattn_split_forward_impl(const fattn_fwd_args *args, const fattn_tensor *q,
                                      const fattn_tensor *k, const fattn_tensor *v,
                                      const fattn_tensor *attn_bias,
                                      const fattn_tensor *softmax_offset,
                                      fattn_split_fwd_result *res)
{
    if (!args || !res)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_forward_impl: NULL args or res");
    memset(res, 0, sizeof *res);
    fattn_status st = fattn__split_check_fwd_args(args);
    if (st != FATTN_OK)
        return st;
    if (sp_none(q) || sp_none(k) || sp_none(v))
        return fattn_error(FATTN_E_INVALID_ARG, "split forward: q, k and v are required");

    sp_forward_frame f;
    memset(&f, 0, sizeof f);
    f.args = args;
    f.q = q, f.k = k, f.v = v, f.attn_bias = attn_bias, f.softmax_offset = softmax_offset;
    f.res = res;
    f.qf = fattn_layout_q_format(args->qkv_layout);
    f.kvf = fattn_layout_kv_format(args->qkv_layout);
    f.h = q->shape[sp_heads_dim(f.qf)];
    f.d_qk = q->shape[q->ndim - 1];
    f.d_v = v->shape[v->ndim - 1];
    f.eq = q, f.ek = k, f.ev = v;
    for (int i = 0; i < 4; i++)
        res->ctx_attrs.fp8_scale_inv[i] = NAN;
    res->out_scale_inv = NAN;
    if (args->fp8 && !args->quantizers)
        return fattn_error(FATTN_E_INVALID_ARG, "split forward: fp8 needs the quantizers "
                           "(get_attention_quantizers, S:1628-1630)");
    if ((st = fattn__split_fp8_inputs(&f)) != FATTN_OK)
        return st;

    st = sp_forward_impl_support(&f);
    if (st != FATTN_OK)
        return st;
    sp_forward_impl_defaults(&f);
    st = sp_forward_impl_rng_state(&f);
    if (st != FATTN_OK)
        goto out;
    st = sp_forward_impl_alloc_out(&f);
    if (st != FATTN_OK)
        goto out;
    st = args->fp8 ? fattn__split_fp8_forward(&f) : fattn__split_forward_impl_fused_attn_fwd(&f);
    if (st != FATTN_OK)
        goto out;
    f.out_ret = args->fp8 ? f.out_ret : res->own_out;
    st = sp_forward_impl_max_logit(&f);
    if (st != FATTN_OK)
        goto out;
    st = sp_forward_impl_tensors_to_save(&f);
    if (st != FATTN_OK)
        goto out;
    sp_forward_impl_ctx_attrs(&f);
    if (args->fp8)
        fattn__split_fp8_ctx_attrs(&f);

    res->out = f.out_ret;
    res->max_logit = args->return_max_logit ? res->own_max_logit : fattn_tensor_empty();
out:
    if (st != FATTN_OK)
        fattn_split_fwd_result_free(res);
    return st;
}

/* ------------------------------------------------------------------------ */
/* setup_ctx                                                                */
/* ------------------------------------------------------------------------ */

/* backends.py:1974-2004: the 12 entries with each deduplicated one taken
 * from `sources` (the args' inputs, or O), the cu_seqlens from the args,
 * as the 16 to save. */
static fattn_status sp_setup_ctx_saved(const fattn_fwd_args *fwd, const fattn_tensor *out,
                                       const fattn_split_ctx_attrs *ca,
                                       const fattn_split_to_save *to_save,
                                       fattn_split_saved *saved)
{
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++) {
        fattn_split_slot slot = fattn_split_to_save_slot(i);
        const fattn_tensor *src = NULL;
        switch (ca->saved_from[i]) {
        case FATTN_SPLIT_SRC_NONE: src = &to_save->t[i]; break;
        case FATTN_SPLIT_SRC_Q: src = &fwd->q; break;
        case FATTN_SPLIT_SRC_K: src = &fwd->k; break;
        case FATTN_SPLIT_SRC_V: src = &fwd->v; break;
        case FATTN_SPLIT_SRC_ATTN_BIAS: src = &fwd->attn_bias; break;
        case FATTN_SPLIT_SRC_SOFTMAX_OFFSET: src = &fwd->softmax_offset; break;
        case FATTN_SPLIT_SRC_OUT: src = out; break;
        default:
            return fattn_error(FATTN_E_INVALID_ARG, "split setup_ctx: slot %s has source %d",
                               fattn_split_slot_name(slot), (int)ca->saved_from[i]);
        }
        if (ca->saved_from[i] != FATTN_SPLIT_SRC_NONE && sp_none(src))
            return fattn_error(FATTN_E_MISSING_FIELD,
                               "split setup_ctx: slot %s was saved from %s, which is empty",
                               fattn_split_slot_name(slot),
                               fattn_split_source_name(ca->saved_from[i]));
        saved->t[slot] = *src;
    }
    saved->t[FATTN_SPLIT_SLOT_CU_SEQLENS_Q] = fwd->cu_seqlens_q;
    saved->t[FATTN_SPLIT_SLOT_CU_SEQLENS_KV] = fwd->cu_seqlens_kv;
    saved->t[FATTN_SPLIT_SLOT_CU_SEQLENS_Q_PADDED] = fwd->cu_seqlens_q_padded;
    saved->t[FATTN_SPLIT_SLOT_CU_SEQLENS_KV_PADDED] = fwd->cu_seqlens_kv_padded;
    return FATTN_OK;
}

/* _fused_attn_setup_ctx's configuration: what forward decided (ctx_attrs),
 * then the args. */
static void sp_setup_ctx_config(fattn_bwd_args *bwd, const fattn_fwd_args *fwd,
                                const fattn_split_ctx_attrs *ca)
{
    bwd->fp8 = ca->fp8;
    bwd->nominal_dtype = ca->nominal_dtype;
    bwd->is_input_fp8 = ca->is_input_fp8;
    bwd->bf16_backward = fwd->bf16_backward;
    bwd->layer_number = fwd->layer_number;
    bwd->QKV_quantizer = ca->QKV_quantizer;
    bwd->O_quantizer = ca->O_quantizer;
    bwd->dQKV_quantizer = ca->dQKV_quantizer;
    bwd->dO_quantizer = ca->dO_quantizer;
    bwd->dP_quantizer = ca->dP_quantizer;
    bwd->S_quantizer = ca->S_quantizer;
    bwd->qkv_type = ca->qkv_type;
    for (int i = 0; i < 4; i++)
        bwd->fp8_scale_inv[i] = ca->fp8_scale_inv[i];
    bwd->nvte_dpa_fp8cs_o_in_f16 = fwd->nvte_dpa_fp8cs_o_in_f16;
    bwd->max_seqlen_q = fwd->max_seqlen_q;
    bwd->max_seqlen_kv = fwd->max_seqlen_kv;
    bwd->attn_scale = fwd->attn_scale; /* backends.py:1934: as given, None too */
    bwd->dropout_p = fwd->dropout_p;
    bwd->fast_zero_fill = fwd->fast_zero_fill;
    bwd->qkv_layout = ca->qkv_layout;
    bwd->o_format = ca->o_format;
    bwd->qkv_scale_inv_format = ca->qkv_scale_inv_format;
    bwd->dqkv_layout = ca->dqkv_layout;
    bwd->attn_bias_type = fwd->attn_bias_type;
    bwd->attn_mask_type = fwd->attn_mask_type;
    bwd->softmax_type = fwd->softmax_type;
    bwd->window_size[0] = fwd->window_size[0];
    bwd->window_size[1] = fwd->window_size[1];
    bwd->bottom_right_diagonal = fwd->bottom_right_diagonal; /* backends.py:1955 */
    bwd->fused_attention_backend = ca->fused_attention_backend;
    bwd->use_FAv2_bwd = fwd->use_FAv2_bwd;
    bwd->deterministic = fwd->deterministic;
    bwd->engine = fwd->engine;
    bwd->poison = fwd->poison;
}

/* _fused_attn_setup_ctx, backends.py:1897-2004. */
fattn_status fattn_split_setup_ctx(fattn_bwd_args *bwd, const fattn_fwd_args *fwd,
                                   const fattn_tensor *out,
                                   const fattn_split_ctx_attrs *ca,
                                   const fattn_split_to_save *to_save, fattn_split_saved *saved)
{
    if (!bwd || !fwd || !ca || !to_save || !saved)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_setup_ctx: NULL argument");
    fattn_bwd_args_init(bwd);
    for (int i = 0; i < FATTN_SPLIT_NSLOTS; i++)
        saved->t[i] = fattn_tensor_empty();
    fattn_status st = sp_setup_ctx_saved(fwd, out, ca, to_save, saved);
    if (st != FATTN_OK)
        return st;
    sp_setup_ctx_config(bwd, fwd, ca);
    return FATTN_OK;
}

/* FusedAttnBwdArgs.setup_saved_tensors (backends.py:1545-1566), run at
 * backward's entry: the 16 in FATTN_SPLIT_SLOTS order, each into its field. */
void fattn_split_setup_saved_tensors(fattn_bwd_args *bwd, const fattn_split_saved *saved)
{
    assert(bwd && saved);
    for (int i = 0; i < FATTN_SPLIT_NSLOTS; i++)
        *fattn__split_bwd_slot(bwd, (fattn_split_slot)i) = saved->t[i];
}

/* ------------------------------------------------------------------------ */
/* backward_impl                                                            */
/* ------------------------------------------------------------------------ */

/* attention.cpp:398-452: dQ, dK, dV packed per the dqkv_layout group
 * (views into g's storage), then attention.cpp:492-498: THD grads
 * zero-filled. */
static fattn_status sp_backward_impl_alloc_dqkv(const fattn_bwd_args *bwd, fattn_split_grads *g)
{
    fattn_dtype dt = bwd->nominal_dtype; /* shapes from q, k, v: their fp8 on the FP8 path */
    const fattn_tensor *q = bwd->fp8 ? &bwd->q_fp8 : &bwd->q, *k = bwd->fp8 ? &bwd->k_fp8 : &bwd->k;
    fattn_qkv_layout_group grp = fattn_layout_group(bwd->dqkv_layout);
    fattn_tensor views[3];
    fattn_status st;
    if (grp == FATTN_LAYOUT_GROUP_3HD || grp == FATTN_LAYOUT_GROUP_H3D) {
        int at = grp == FATTN_LAYOUT_GROUP_3HD ? q->ndim - 2 : q->ndim - 1;
        st = fattn__split_alloc_packed(bwd->poison, &g->own_storage[0], dt, q, 3, at, views);
        if (st != FATTN_OK)
            return st;
        g->dq = views[0], g->dk = views[1], g->dv = views[2];
    } else if (grp == FATTN_LAYOUT_GROUP_HD_2HD || grp == FATTN_LAYOUT_GROUP_HD_H2D) {
        st = fattn__split_alloc_packed(bwd->poison, &g->own_storage[0], dt, q, 1, 0, views);
        if (st != FATTN_OK)
            return st;
        g->dq = views[0];
        int at = grp == FATTN_LAYOUT_GROUP_HD_2HD ? k->ndim - 2 : k->ndim - 1;
        st = fattn__split_alloc_packed(bwd->poison, &g->own_storage[1], dt, k, 2, at, views);
        if (st != FATTN_OK)
            return st;
        g->dk = views[0];
        g->dv = views[1];
    } else if (grp == FATTN_LAYOUT_GROUP_HD_HD_HD || grp == FATTN_LAYOUT_GROUP_SD_SD_SD) {
        const fattn_tensor *like[3] = {q, k, bwd->fp8 ? &bwd->v_fp8 : &bwd->v};
        fattn_tensor *dst[3] = {&g->dq, &g->dk, &g->dv};
        for (int i = 0; i < 3; i++) {
            st = fattn__split_alloc_packed(bwd->poison, &g->own_storage[i], dt, like[i], 1, 0, views);
            if (st != FATTN_OK)
                return st;
            *dst[i] = views[0];
        }
    } else {
        return fattn_error(FATTN_E_LAYOUT, "split backward: dqkv_layout %d not supported",
                           (int)bwd->dqkv_layout);
    }
    if (fattn_layout_q_format(bwd->dqkv_layout) == FATTN_FORMAT_THD)
        fattn_tensor_fill_bits(&g->dq, 0);
    if (fattn_layout_kv_format(bwd->dqkv_layout) == FATTN_FORMAT_THD) {
        fattn_tensor_fill_bits(&g->dk, 0);
        fattn_tensor_fill_bits(&g->dv, 0);
    }
    return FATTN_OK;
}

/* FusedAttnBwdArgs.aux_ctx_tensors (TE 2.20.2 backends.py:1568-1575): the
 * fixed slots -> the engine's list, right before the engine call:
 * [Stats, rng_state] and then whichever of Bias, SoftmaxOffset is not None
 * (what the slots hold decides, not the bias or softmax type). */
static void sp_backward_impl_aux_ctx_tensors(const fattn_bwd_args *bwd, fattn_aux_pack *pack)
{
    memset(pack, 0, sizeof *pack);
    pack->t[pack->n++] = bwd->softmax_stats;
    pack->t[pack->n++] = bwd->rng_state;
    if (!sp_none(&bwd->aux_bias))
        pack->t[pack->n++] = bwd->aux_bias;
    if (!sp_none(&bwd->aux_softmax_offset))
        pack->t[pack->n++] = bwd->aux_softmax_offset;
    assert(pack->n <= FATTN_AUX_MAX);
}

/* attention.cpp:543-559: dBias shaped like the last pack entry (the support
 * table refused bias + sink, so that entry is the bias), zero-filled for a
 * THD layout; attention.cpp:561-568: dSoftmaxOffset float32 [1, h, 1, 1]. */
static fattn_status sp_backward_impl_alloc_dbias(const fattn_bwd_args *bwd,
                                                 const fattn_aux_pack *pack,
                                                 fattn_split_grads *g)
{
    fattn_dtype dt = bwd->nominal_dtype;
    assert(pack->n >= 2 && pack->n <= FATTN_AUX_MAX); /* [Stats, rng_state, ...] */
    if (bwd->attn_bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
        bwd->attn_bias_type == FATTN_BIAS_POST_SCALE_BIAS) {
        const fattn_tensor *last = &pack->t[pack->n - 1];
        fattn_status st = fattn__split_alloc_out(bwd->poison, &g->own_d_bias, dt, last->ndim, last->shape);
        if (st != FATTN_OK)
            return st;
        if (fattn_layout_format(bwd->qkv_layout) == FATTN_FORMAT_THD)
            fattn_tensor_fill_bits(&g->own_d_bias, 0);
        g->d_bias = g->own_d_bias;
    }
    if (bwd->softmax_type != FATTN_SOFTMAX_VANILLA) {
        int64_t os[4] = {1, bwd->q.shape[sp_heads_dim(fattn_layout_q_format(bwd->qkv_layout))],
                         1, 1};
        fattn_status st = fattn__split_alloc_out(bwd->poison, &g->own_d_softmax_offset,
                                       FATTN_DTYPE_FLOAT32, 4, os);
        if (st != FATTN_OK)
            return st;
        g->d_softmax_offset = g->own_d_softmax_offset;
    }
    return FATTN_OK;
}

/* fused_attn_bwd, the f16 path: the engine writes g's buffers. */
static fattn_status sp_backward_impl_fused_attn_bwd(const fattn_bwd_args *bwd,
                                                    const fattn_aux_pack *pack,
                                                    fattn_split_grads *g)
{
    fattn_bwd_params p;
    fattn__split_backward_params(bwd, pack, g, &p);
    fattn_status st = fattn__split_fp8_d_out_f16(bwd, g, &p.d_o);
    return st != FATTN_OK ? st : fattn_engine_bwd(bwd->engine, &p);
}

/* _fused_attn_backward_impl, backends.py:2007-2242. */
fattn_status fattn_split_backward_impl(const fattn_bwd_args *bwd, fattn_split_grads *g)
{
    if (!bwd || !g)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_backward_impl: NULL argument");
    memset(g, 0, sizeof *g); /* the caller's g may be uninitialised */
    g->grads_scale_inv = NAN;
    fattn_status st = fattn__split_check_bwd_args(bwd);
    if (st != FATTN_OK)
        return st;
    if (bwd->use_FAv2_bwd)
        return fattn_error(FATTN_E_UNSUPPORTED,
                           "split backward: use_FAv2_bwd (flash-attn v2 backward, "
                           "backends.py:2039) is not available in fattn");

    g->dq = g->dk = g->dv = g->d_bias = g->d_softmax_offset = fattn_tensor_empty();
    fattn_aux_pack pack;
    st = sp_backward_impl_alloc_dqkv(bwd, g);
    if (st != FATTN_OK)
        goto out;
    sp_backward_impl_aux_ctx_tensors(bwd, &pack);
    st = sp_backward_impl_alloc_dbias(bwd, &pack, g);
    if (st != FATTN_OK)
        goto out;
    st = bwd->fp8 ? fattn__split_fp8_backward(bwd, &pack, g)
                  : sp_backward_impl_fused_attn_bwd(bwd, &pack, g);
    if (st != FATTN_OK)
        goto out;
out:
    if (st != FATTN_OK)
        fattn_split_grads_free(g);
    return st;
}

/* ---- The thin wrapper ------------------------------------------------------ */

fattn_status fattn_split_func_ctx_init(fattn_split_func_ctx **out)
{
    if (!out)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_func_ctx_init: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return fattn_error(FATTN_E_NOMEM, "split: cannot allocate a ctx");
    fattn_bwd_args_init(&(*out)->bwd);
    return FATTN_OK;
}

void fattn_split_func_ctx_free(fattn_split_func_ctx *ctx)
{
    if (!ctx)
        return;
    fattn_split_fwd_result_free(&ctx->fwd);
    fattn_split_grads_free(&ctx->grads);
    free(ctx);
}

/* FusedAttnFunc.forward, backends.py:2248-2277. */
fattn_status fattn_split_func_forward(fattn_split_func_ctx *ctx, const fattn_tensor *q,
                                      const fattn_tensor *k, const fattn_tensor *v,
                                      const fattn_tensor *attn_bias,
                                      const fattn_tensor *softmax_offset,
                                      const fattn_fwd_args *args, fattn_tensor *out,
                                      fattn_tensor *max_logit)
{
    if (out)
        *out = fattn_tensor_empty();
    if (max_logit)
        *max_logit = fattn_tensor_empty();
    if (!ctx || !args || !out)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_func_forward: NULL argument");
    fattn_split_fwd_result_free(&ctx->fwd);
    fattn_split_grads_free(&ctx->grads);
    ctx->has_forward = false;
    ctx->backward_objects_cleared = false;
    fattn_status st = fattn_split_forward_impl(args, q, k, v, attn_bias, softmax_offset,
                                               &ctx->fwd);
    if (st != FATTN_OK)
        return st;
    /* setup_ctx reads the inputs from the args: the wrapper's are these. */
    fattn_fwd_args a = *args;
    a.q = sp_opt(q);
    a.k = sp_opt(k);
    a.v = sp_opt(v);
    a.attn_bias = sp_opt(attn_bias);
    a.softmax_offset = sp_opt(softmax_offset);
    st = fattn_split_setup_ctx(&ctx->bwd, &a, &ctx->fwd.out, &ctx->fwd.ctx_attrs,
                               &ctx->fwd.to_save, &ctx->saved);
    if (st != FATTN_OK) {
        fattn_split_fwd_result_free(&ctx->fwd);
        return st;
    }
    ctx->has_forward = true;
    *out = ctx->fwd.out;
    if (max_logit)
        *max_logit = ctx->fwd.max_logit;
    return FATTN_OK;
}

/* FusedAttnFunc.backward, backends.py:2279-2286. */
fattn_status fattn_split_func_backward(fattn_split_func_ctx *ctx, const fattn_tensor *d_out,
                                       fattn_tensor grads6[6])
{
    if (!ctx || !grads6)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_func_backward: NULL argument");
    for (int i = 0; i < 6; i++)
        grads6[i] = fattn_tensor_empty();
    if (!ctx->has_forward)
        return fattn_error(FATTN_E_STATE, "split backward: no forward in this ctx");
    /* TE 2.20.2 backends.py:2282-2283: bwd_args = ctx.backward_objects is None after a
     * first backward, and `bwd_args.grad_output = d_out` raises. */
    if (ctx->backward_objects_cleared)
        return fattn_error(FATTN_E_STATE,
                           "split backward: 'NoneType' object has no attribute 'grad_output' "
                           "(ctx.backward_objects is None: a second backward on one ctx; TE "
                           "2.20.2 backends.py:2283 raises AttributeError)");
    ctx->backward_objects_cleared = true; /* backends.py:2285, even if backward fails */
    fattn_split_grads_free(&ctx->grads);
    ctx->bwd.d_out = sp_opt(d_out);
    fattn_split_setup_saved_tensors(&ctx->bwd, &ctx->saved); /* backends.py:2284 */
    fattn_status st = fattn_split_backward_impl(&ctx->bwd, &ctx->grads);
    ctx->bwd.d_out = fattn_tensor_empty();
    if (st != FATTN_OK)
        return st;
    grads6[0] = ctx->grads.dq;
    grads6[1] = ctx->grads.dk;
    grads6[2] = ctx->grads.dv;
    grads6[3] = ctx->grads.d_bias;
    grads6[4] = ctx->grads.d_softmax_offset;
    grads6[5] = fattn_tensor_empty(); /* args */
    return FATTN_OK;
}
