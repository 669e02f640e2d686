/* The FP8 branches of TE 2.19.0 FusedAttnFunc (the monolith), for the
 * legacy front end: backends.py:1487-1613 (forward), 1657-1748 (its ctx),
 * 1758-1960 (backward), with the TE helpers they call (utils.py
 * combine_and_quantize U19:3158-3215, combine_and_dequantize
 * U19:3218-3269) and the quantizers' arithmetic (float8_tensor.py,
 * recipe_common.cuh:14-49). docs/fp8-branches.md maps each line.
 *
 * independent witness: lib/split/fp8.c implements the same rules for the
 * split front end; code alike is intended, do not unify.
 *
 * fattn models the per-tensor recipes of Hopper (delayed and current
 * scaling), with f16 or FP8 inputs (is_input_fp8: q, k, v handed over as
 * Float8Tensors, their _scale_inv in ctx->in_scale_inv); MXFP8 and block
 * scaling are refused by the support table.
 */
#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "fattn/dtype.h"
#include "fattn/fp8.h"

#include "internal.h"

/* The element offset of C-order linear index `lin` of t. */
static int64_t lg8_offset(const fattn_tensor *t, int64_t lin)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (lin % t->shape[d]) * t->strides[d];
        lin /= t->shape[d];
    }
    return off;
}

/* max |x| over n tensors (the combined tensor TE quantises once). */
static float lg8_amax(const fattn_tensor *const *t, int n)
{
    float m = 0.0f;
    for (int i = 0; i < n; i++) {
        int64_t numel = fattn_tensor_numel(t[i]);
        for (int64_t e = 0; e < numel; e++) {
            float x = fabsf(fattn_load_f32(t[i]->data, t[i]->dtype, lg8_offset(t[i], e)));
            if (x > m)
                m = x;
        }
    }
    return m;
}

/* A quantizer's call on a tensor whose amax is `amax`: the scale it
 * quantises with. Delayed (Float8Quantizer): its recipe state's scale; the
 * amax goes to its amax_history[0] view. Current
 * (Float8CurrentScalingQuantizer): FP8-max / amax as recipe_common.cuh:14-49
 * computes it (amax raised to amax_epsilon; 0, inf or NaN give 1; an
 * overflowing quotient the float32 max; pow-2 scales keep sign and
 * exponent only). */
static float lg8_quantizer_scale(fattn_fp8_quantizer *qz, float amax)
{
    if (qz->kind == FATTN_FP8_RECIPE_DELAYED) {
        /* raised, not set: the cast kernel's atomicMax into its amax view,
         * which only the recipe update zeroes */
        qz->amax = fmaxf(qz->amax, amax);
        return qz->scale;
    }
    qz->amax = amax;
    float a = amax < qz->amax_epsilon ? qz->amax_epsilon : amax;
    float scale = 1.0f;
    if (a != 0.0f && isfinite(a)) {
        scale = fattn_fp8_max(qz->dtype) / a;
        if (isinf(scale))
            scale = FLT_MAX;
        if (isnan(scale))
            scale = 1.0f;
    }
    if (qz->force_pow_2_scales) {
        uint32_t bits;
        memcpy(&bits, &scale, sizeof bits);
        bits &= 0xFF800000u;
        memcpy(&scale, &bits, sizeof bits);
    }
    qz->scale = scale;
    return scale;
}

/* dst (FP8 codes) = quantise(src * scale), element for element. */
static void lg8_encode(const fattn_tensor *src, fattn_tensor *dst, float scale)
{
    assert(fattn_tensor_numel(src) == fattn_tensor_numel(dst));
    int64_t numel = fattn_tensor_numel(src);
    uint8_t *out = dst->data;
    for (int64_t e = 0; e < numel; e++) {
        float x = fattn_load_f32(src->data, src->dtype, lg8_offset(src, e));
        out[lg8_offset(dst, e)] = fattn_fp8_quantize(dst->dtype, x, scale);
    }
}

/* Float8Tensor.dequantize: dst = decode(code) * scale_inv in dst's dtype. */
static void lg8_decode(const fattn_tensor *src, fattn_tensor *dst, float scale_inv)
{
    int64_t numel = fattn_tensor_numel(src);
    const uint8_t *in = src->data;
    for (int64_t e = 0; e < numel; e++) {
        float x = fattn_fp8_decode(src->dtype, in[lg8_offset(src, e)]) * scale_inv;
        fattn_store_f32(dst->data, dst->dtype, lg8_offset(dst, e), x);
    }
}

/* Buffers shaped as `layout` packs q, k, v (the layout groups of
 * combine_and_quantize, U19:3158-3215): one [.,3,.] buffer, q and a
 * [.,2,.] kv buffer, or three. */
static fattn_status lg8_alloc_like(fattn_legacy_ctx *ctx, fattn_qkv_layout layout,
                                   const fattn_tensor *q, const fattn_tensor *k,
                                   const fattn_tensor *v, fattn_dtype dt, fattn_tensor storage[3],
                                   fattn_tensor views[3])
{
    fattn_tensor w[3];
    fattn_status st;
    switch (fattn_layout_group(layout)) {
    case FATTN_LAYOUT_GROUP_3HD:
    case FATTN_LAYOUT_GROUP_H3D:
        st = fattn__legacy_alloc_packed(
            ctx, &storage[0], dt, q, 3,
            fattn_layout_group(layout) == FATTN_LAYOUT_GROUP_3HD ? q->ndim - 2 : q->ndim - 1,
            views);
        return st;
    case FATTN_LAYOUT_GROUP_HD_2HD:
    case FATTN_LAYOUT_GROUP_HD_H2D:
        st = fattn__legacy_alloc_packed(ctx, &storage[0], dt, q, 1, 0, w);
        if (st != FATTN_OK)
            return st;
        views[0] = w[0];
        st = fattn__legacy_alloc_packed(
            ctx, &storage[1], dt, k, 2,
            fattn_layout_group(layout) == FATTN_LAYOUT_GROUP_HD_2HD ? k->ndim - 2 : k->ndim - 1,
            w);
        if (st != FATTN_OK)
            return st;
        views[1] = w[0], views[2] = w[1];
        return FATTN_OK;
    default:
        st = fattn__legacy_alloc_packed(ctx, &storage[0], dt, q, 1, 0, &views[0]);
        if (st != FATTN_OK)
            return st;
        st = fattn__legacy_alloc_packed(ctx, &storage[1], dt, k, 1, 0, &views[1]);
        if (st != FATTN_OK)
            return st;
        return fattn__legacy_alloc_packed(ctx, &storage[2], dt, v, 1, 0, &views[2]);
    }
}

void fattn__legacy_fp8_free(fattn_legacy_ctx *ctx)
{
    for (int i = 0; i < 3; i++) {
        fattn_tensor_free(&ctx->own_qkv_fp8[i]);
        fattn_tensor_free(&ctx->own_grad_fp8[i]);
    }
    fattn_tensor_free(&ctx->own_out_fp8);
    fattn_tensor_free(&ctx->own_out_f16);
    fattn_tensor_free(&ctx->own_d_out_fp8);
    for (int i = 0; i < 3; i++)
        fattn_tensor_free(&ctx->own_qkv_f16[i]);
    fattn_tensor_free(&ctx->own_d_out_f16);
}

/* combine_and_quantize (utils.py U19:3158-3215): three tensors laid out as
 * `layout` packs them, quantised at once by qz into FP8 buffers in
 * storage[3]; one scale for the three, amax over all of them. */
static fattn_status lg8_combine_and_quantize(fattn_legacy_ctx *ctx, fattn_qkv_layout layout,
                                             const fattn_tensor *const src[3],
                                             fattn_fp8_quantizer *qz, fattn_tensor storage[3],
                                             fattn_tensor out[3], float *scale_inv)
{
    fattn_status st = lg8_alloc_like(ctx, layout, src[0], src[1], src[2], qz->dtype, storage,
                                     out);
    if (st != FATTN_OK)
        return st;
    float scale = lg8_quantizer_scale(qz, lg8_amax(src, 3));
    for (int i = 0; i < 3; i++)
        lg8_encode(src[i], &out[i], scale);
    *scale_inv = 1.0f / scale;
    return FATTN_OK;
}

/* backends.py:1493-1509: FP8 inputs are used as given, each with its own
 * _scale_inv; f16 ones are quantised at once by the QKV quantizer. */
static fattn_status lg8_qkv_fp8(lg_forward_locals *f)
{
    fattn_legacy_ctx *ctx = f->ctx;
    if (f->is_input_fp8) {
        f->qkv_fp8[0] = *f->q, f->qkv_fp8[1] = *f->k, f->qkv_fp8[2] = *f->v;
        for (int i = 0; i < 3; i++)
            f->qkv_scale_inv[i] = ctx->in_scale_inv[i];
        return FATTN_OK;
    }
    const fattn_tensor *src[3] = {f->q, f->k, f->v};
    float si = 1.0f;
    fattn_status st = lg8_combine_and_quantize(ctx, f->qkv_layout, src, &f->quantizers->QKV,
                                               ctx->own_qkv_fp8, f->qkv_fp8, &si);
    for (int i = 0; i < 3; i++)
        f->qkv_scale_inv[i] = si;
    return st;
}

/* combine_and_dequantize (utils.py U19:3218-3269): the three FP8 tensors
 * put back together by layout and dequantised with q's _scale_inv, k's and
 * v's own notwithstanding (TE's make_like(q_fp8, ...)), into `out` of the
 * nominal dtype, laid out as `layout` packs them. */
static fattn_status lg8_combine_and_dequantize(fattn_legacy_ctx *ctx, fattn_qkv_layout layout,
                                               const fattn_tensor *const src[3],
                                               float q_scale_inv, fattn_dtype nominal,
                                               fattn_tensor storage[3], fattn_tensor out[3])
{
    fattn_status st = lg8_alloc_like(ctx, layout, src[0], src[1], src[2], nominal, storage,
                                     out);
    if (st != FATTN_OK)
        return st;
    for (int i = 0; i < 3; i++)
        lg8_decode(src[i], &out[i], q_scale_inv);
    return FATTN_OK;
}

/* The FP8 fused_attn_fwd (backends.py:1528-1560): O is FP8 under delayed
 * scaling (attention.cpp:73-77), the nominal dtype under current scaling
 * (its amax buffer thrown away, attention.cpp:78-94). */
static fattn_status lg8_fused_attn_fwd(lg_forward_locals *f, bool ds)
{
    fattn_legacy_ctx *ctx = f->ctx;
    fattn_fp8_quantizers *qs = f->quantizers;
    fattn_tensor shape_of = ctx->own_out;
    fattn_tensor_free(&ctx->own_out);
    fattn_status st = fattn__legacy_alloc_out(ctx, &ctx->own_out, ds ? qs->O.dtype : f->nominal,
                                             shape_of.ndim, shape_of.shape);
    if (st != FATTN_OK)
        return st;
    float amax_o_discarded = 0.0f;
    fattn_fp8_fwd fp = {
        .descale_q = f->qkv_scale_inv[0], .descale_k = f->qkv_scale_inv[1],
        .descale_v = f->qkv_scale_inv[2],
        .descale_s = 1.0f / qs->S.scale, .scale_s = qs->S.scale,
        .scale_o = ds ? qs->O.scale : 1.0f,
        .amax_s = &qs->S.amax, .amax_o = ds ? &qs->O.amax : &amax_o_discarded,
        .s_dtype = qs->S.dtype};
    f->eq = &f->qkv_fp8[0], f->ek = &f->qkv_fp8[1], f->ev = &f->qkv_fp8[2];
    f->fp8p = &fp;
    st = fattn__legacy_forward_fused_attn_fwd(f);
    f->eq = f->q, f->ek = f->k, f->ev = f->v;
    f->fp8p = NULL;
    return st;
}

fattn_status fattn__legacy_fp8_forward(lg_forward_locals *f)
{
    fattn_legacy_ctx *ctx = f->ctx;
    fattn_fp8_quantizers *qs = f->quantizers;
    /* _qkv_quantizer_type (backends.py:222-238); mxfp8 and block scaling
     * were refused by the support table */
    if (qs->QKV.kind != FATTN_FP8_RECIPE_DELAYED && qs->QKV.kind != FATTN_FP8_RECIPE_CURRENT)
        return fattn_error(FATTN_E_INVALID_CASE, "legacy forward: the QKV quantizer is not an "
                           "FP8 quantizer (TE raises TypeError, backends.py:238)");
    bool ds = qs->QKV.kind == FATTN_FP8_RECIPE_DELAYED;
    f->is_bwd_fp8 = f->fp8 && ctx->env_fp8_dpa_bwd;
    fattn_status st = lg8_qkv_fp8(f);
    if (st != FATTN_OK)
        return st;
    st = lg8_fused_attn_fwd(f, ds);
    if (st != FATTN_OK)
        return st;
    /* backends.py:1565-1584 */
    bool o_in_f16 = ctx->env_fp8cs_o_in_f16;
    bool bwd_o_f16 = f->is_training && (!f->is_bwd_fp8 || (!ds && o_in_f16));
    bool bwd_o_fp8 = f->is_training && f->is_bwd_fp8 && (ds || !o_in_f16);
    f->out_fp8 = f->out_f16 = ctx->own_out;
    f->out_fp8_scale_inv = ds ? 1.0f / qs->O.scale : NAN;
    if (ds && (!f->fp8_output || bwd_o_f16)) {
        st = fattn__legacy_alloc_out(ctx, &ctx->own_out_f16, f->nominal, ctx->own_out.ndim,
                                    ctx->own_out.shape);
        if (st != FATTN_OK)
            return st;
        lg8_decode(&ctx->own_out, &ctx->own_out_f16, f->out_fp8_scale_inv);
        f->out_f16 = ctx->own_out_f16;
    } else if (!ds && (f->fp8_output || bwd_o_fp8)) {
        const fattn_tensor *o = &ctx->own_out;
        float scale = lg8_quantizer_scale(&qs->O, lg8_amax(&o, 1));
        st = fattn__legacy_alloc_out(ctx, &ctx->own_out_fp8, qs->O.dtype, o->ndim, o->shape);
        if (st != FATTN_OK)
            return st;
        lg8_encode(o, &ctx->own_out_fp8, scale);
        f->out_fp8 = ctx->own_out_fp8;
        f->out_fp8_scale_inv = 1.0f / scale;
    }
    /* backends.py:1610-1612: an F16 backward of FP8 inputs gets them
     * dequantised */
    f->qkv_f16[0] = *f->q, f->qkv_f16[1] = *f->k, f->qkv_f16[2] = *f->v;
    if (f->is_bwd_fp8 || !f->is_input_fp8)
        return FATTN_OK;
    const fattn_tensor *q8[3] = {&f->qkv_fp8[0], &f->qkv_fp8[1], &f->qkv_fp8[2]};
    return lg8_combine_and_dequantize(ctx, f->qkv_layout, q8, f->qkv_scale_inv[0], f->nominal,
                                      ctx->own_qkv_f16, f->qkv_f16);
}

/* backends.py:1601-1613 (what is saved), 1657-1748 (the ctx attributes
 * that differ on the FP8 path) and 1599 (what is returned). */
void fattn__legacy_fp8_save_and_ctx(lg_forward_locals *f)
{
    fattn_legacy_ctx *ctx = f->ctx;
    fattn_fp8_quantizers *qs = f->quantizers;
    bool ds = qs->QKV.kind == FATTN_FP8_RECIPE_DELAYED;
    fattn_tensor *s = ctx->tensor_objects;
    for (int i = FATTN_LEGACY_SAVED_Q_FP8; i <= FATTN_LEGACY_SAVED_OUT; i++)
        s[i] = fattn_tensor_empty();
    if (f->is_bwd_fp8) {
        for (int i = 0; i < 3; i++) {
            s[FATTN_LEGACY_SAVED_Q_FP8 + i] = f->qkv_fp8[i];
            ctx->tensor_scale_inv[FATTN_LEGACY_SAVED_Q_FP8 + i] = f->qkv_scale_inv[i];
        }
        if (!ds && ctx->env_fp8cs_o_in_f16) {
            s[FATTN_LEGACY_SAVED_OUT] = f->out_f16; /* FP8_O_F16 */
        } else {
            s[FATTN_LEGACY_SAVED_OUT_FP8] = f->out_fp8; /* FP8_O_FP8 */
            ctx->tensor_scale_inv[FATTN_LEGACY_SAVED_OUT_FP8] = f->out_fp8_scale_inv;
        }
    } else {
        s[FATTN_LEGACY_SAVED_Q] = f->qkv_f16[0]; /* FP8_BWD_F16 */
        s[FATTN_LEGACY_SAVED_K] = f->qkv_f16[1];
        s[FATTN_LEGACY_SAVED_V] = f->qkv_f16[2];
        s[FATTN_LEGACY_SAVED_OUT] = f->out_f16;
    }
    ctx->fp8 = f->is_bwd_fp8;
    ctx->is_input_fp8 = f->is_input_fp8;
    ctx->qkv_type = ds ? "delayed" : "current";
    ctx->QKV_quantizer = &qs->QKV;
    ctx->O_quantizer = &qs->O;
    ctx->dQKV_quantizer = &qs->dQKV;
    ctx->dO_quantizer = &qs->dO;
    ctx->dP_quantizer = &qs->dP;
    /* backends.py:1696-1700: backward gets a copy whose scale is frozen now */
    ctx->S_quantizer = &qs->S;
    if (f->is_bwd_fp8 && qs->S.kind == FATTN_FP8_RECIPE_DELAYED) {
        ctx->own_s_copy = qs->S;
        ctx->own_s_copy.shared_amax = &qs->S.amax; /* copy() keeps the amax view */
        ctx->S_quantizer = &ctx->own_s_copy;
    }
    ctx->fused_attention_backend = f->is_bwd_fp8 ? FATTN_TE_BACKEND_FP8
                                                 : FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN;
    f->out_ret = f->fp8_output ? f->out_fp8 : f->out_f16;
    ctx->out_scale_inv = f->fp8_output ? f->out_fp8_scale_inv : NAN;
}

/* dO quantised by the dO quantizer (backends.py:1766-1775). */
static fattn_status lg8_quantize_d_out(fattn_legacy_ctx *ctx, const fattn_tensor *d_out,
                                       float *scale_inv)
{
    fattn_fp8_quantizer *qz = ctx->dO_quantizer;
    fattn_status st = fattn__legacy_alloc_out(ctx, &ctx->own_d_out_fp8, qz->dtype, d_out->ndim,
                                             d_out->shape);
    if (st != FATTN_OK)
        return st;
    float scale = lg8_quantizer_scale(qz, lg8_amax(&d_out, 1));
    lg8_encode(d_out, &ctx->own_d_out_fp8, scale);
    *scale_inv = 1.0f / scale;
    return FATTN_OK;
}

fattn_status fattn__legacy_fp8_d_out_f16(fattn_legacy_ctx *ctx, const fattn_tensor *d_out,
                                        const fattn_tensor **use)
{
    *use = d_out;
    if (!fattn_dtype_is_fp8(d_out->dtype))
        return FATTN_OK;
    fattn_status st = fattn__legacy_alloc_out(ctx, &ctx->own_d_out_f16, ctx->nominal_dtype,
                                             d_out->ndim, d_out->shape);
    if (st != FATTN_OK)
        return st;
    lg8_decode(d_out, &ctx->own_d_out_f16, ctx->d_out_scale_inv);
    *use = &ctx->own_d_out_f16;
    return FATTN_OK;
}

/* backends.py:1932-1948: the engine's dq, dk, dv (p's) become the grads g.
 * Quantized ones (delayed) are dequantised with their _scale_inv unless the
 * inputs were FP8 and bf16_backward is off, when they are returned as they
 * are; F16 ones (current) are quantised by the dQKV quantizer exactly then. */
static fattn_status lg8_grads_out(fattn_legacy_ctx *ctx, bool quantized,
                                  const fattn_bwd_params *p, fattn_tensor g[FATTN_LEGACY_NGRADS])
{
    fattn_tensor *gq = &g[FATTN_LEGACY_GRAD_DQ], *gk = &g[FATTN_LEGACY_GRAD_DK];
    fattn_tensor *gv = &g[FATTN_LEGACY_GRAD_DV];
    bool fp8_out = ctx->is_input_fp8 && !ctx->bf16_backward;
    if (quantized && fp8_out) {
        *gq = p->dq, *gk = p->dk, *gv = p->dv;
        ctx->grads_scale_inv = 1.0f / ctx->dQKV_quantizer->scale;
    } else if (quantized) {
        float si = 1.0f / ctx->dQKV_quantizer->scale;
        lg8_decode(&p->dq, gq, si);
        lg8_decode(&p->dk, gk, si);
        lg8_decode(&p->dv, gv, si);
    } else if (fp8_out) {
        const fattn_tensor *src[3] = {gq, gk, gv};
        fattn_tensor out[3];
        fattn_status st = lg8_combine_and_quantize(ctx, ctx->dqkv_layout, src,
                                                   ctx->dQKV_quantizer, ctx->own_grad_fp8, out,
                                                   &ctx->grads_scale_inv);
        if (st != FATTN_OK)
            return st;
        *gq = out[0], *gk = out[1], *gv = out[2];
    }
    return FATTN_OK;
}

fattn_status fattn__legacy_fp8_backward(fattn_legacy_ctx *ctx, const fattn_tensor *d_out,
                                       const fattn_aux_pack *aux,
                                       fattn_tensor g[FATTN_LEGACY_NGRADS])
{
    if (!ctx->dO_quantizer || !ctx->dP_quantizer || !ctx->dQKV_quantizer || !ctx->S_quantizer)
        return fattn_error(FATTN_E_STATE, "legacy backward: FP8 backward without its "
                           "quantizers (ctx.dO/dP/dQKV/S_quantizer are None)");
    fattn_fp8_quantizer *dqkv = ctx->dQKV_quantizer, *s_q = ctx->S_quantizer;
    fattn_fp8_quantizer *dp = ctx->dP_quantizer;
    bool ds = dqkv->kind == FATTN_FP8_RECIPE_DELAYED;
    const fattn_tensor *s = ctx->tensor_objects;
    /* backends.py:1766-1775: a quantized d_out is used as is */
    float do_si = ctx->d_out_scale_inv;
    const fattn_tensor *d_o = d_out;
    fattn_status st = FATTN_OK;
    if (!fattn_dtype_is_fp8(d_out->dtype)) {
        st = lg8_quantize_d_out(ctx, d_out, &do_si);
        d_o = &ctx->own_d_out_fp8;
    }
    if (st != FATTN_OK)
        return st;
    fattn_bwd_params p;
    fattn__legacy_backward_params(ctx, d_out, aux, g, &p);
    p.attn.q = s[FATTN_LEGACY_SAVED_Q_FP8];
    p.attn.k = s[FATTN_LEGACY_SAVED_K_FP8];
    p.attn.v = s[FATTN_LEGACY_SAVED_V_FP8];
    p.d_o = *d_o;
    /* backends.py:1890-1895: out_fp8, or the F16 out under current scaling
     * with O_in_F16 */
    bool o_fp8 = !(ctx->qkv_type && strcmp(ctx->qkv_type, "current") == 0 &&
                   ctx->env_fp8cs_o_in_f16);
    p.attn.o = o_fp8 ? s[FATTN_LEGACY_SAVED_OUT_FP8] : s[FATTN_LEGACY_SAVED_OUT];
    /* dQ, dK, dV: FP8 under delayed scaling (attention.cpp:381-383), F16
     * under current scaling; then returned in the dtype the table of
     * backends.py:1932-1948 gives */
    if (ds) {
        fattn_tensor views[3];
        st = lg8_alloc_like(ctx, ctx->dqkv_layout, &g[FATTN_LEGACY_GRAD_DQ],
                            &g[FATTN_LEGACY_GRAD_DK], &g[FATTN_LEGACY_GRAD_DV], dqkv->dtype,
                            ctx->own_grad_fp8, views);
        if (st != FATTN_OK)
            return st;
        p.dq = views[0], p.dk = views[1], p.dv = views[2];
    }
    float amax3[3] = {0.0f, 0.0f, 0.0f};
    fattn_fp8_bwd fb = {
        .descale_q = ctx->tensor_scale_inv[FATTN_LEGACY_SAVED_Q_FP8],
        .descale_k = ctx->tensor_scale_inv[FATTN_LEGACY_SAVED_K_FP8],
        .descale_v = ctx->tensor_scale_inv[FATTN_LEGACY_SAVED_V_FP8],
        .descale_o = o_fp8 ? ctx->tensor_scale_inv[FATTN_LEGACY_SAVED_OUT_FP8] : 1.0f,
        .descale_do = do_si,
        .descale_s = 1.0f / s_q->scale, .scale_s = s_q->scale,
        .descale_dp = 1.0f / dp->scale, .scale_dp = dp->scale,
        .scale_dq = ds ? dqkv->scale : 1.0f, .scale_dk = ds ? dqkv->scale : 1.0f,
        .scale_dv = ds ? dqkv->scale : 1.0f,
        .amax_dp = &dp->amax, .amax_dq = &amax3[0], .amax_dk = &amax3[1], .amax_dv = &amax3[2],
        .s_dtype = s_q->dtype, .dp_dtype = dp->dtype};
    p.fp8 = &fb;
    st = fattn_engine_bwd(ctx->engine, &p);
    if (st != FATTN_OK)
        return st;
    if (ds) {
        /* F5: dQ, dK and dV share one amax buffer; fattn keeps the largest */
        float m = amax3[0] > amax3[1] ? amax3[0] : amax3[1];
        dqkv->amax = m > amax3[2] ? m : amax3[2];
    }
    return lg8_grads_out(ctx, ds, &p, g);
}
