/* The FP8 branch of TE 2.20.2's _fused_attn_forward_impl (backends.py
 * S:1645-1771), its save variants (S:1759-1771), the S-quantizer copy and
 * ctx_attrs (S:1856-1877), with the TE helpers it calls (utils.py
 * combine_and_quantize U20:3477-3534) and the quantizers' arithmetic
 * (float8_tensor.py, recipe_common.cuh:14-49). docs/fp8-branches.md maps
 * each line.
 *
 * independent witness: lib/legacy/legacy_fp8.c implements the same rules
 * for the legacy front end; code alike is intended, do not unify.
 *
 * Modelled: delayed and current scaling, with f16 or FP8 inputs (q, k, v
 * as Float8Tensors: is_input_fp8, their _scale_inv in args->in_scale_inv).
 * MXFP8 and block scaling are refused by the support table before this
 * branch.
 */
#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "fattn/dtype.h"
#include "fattn/fp8.h"

#include "internal.h"

/* Offset of element `i` (C order) of a strided view. */
static int64_t sp8_at(const fattn_tensor *t, int64_t i)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t n = t->shape[d];
        off += (i % n) * t->strides[d];
        i /= n;
    }
    return off;
}

static float sp8_amax_of(const fattn_tensor *t, float m)
{
    int64_t n = fattn_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(fattn_load_f32(t->data, t->dtype, sp8_at(t, i)));
        m = a > m ? a : m;
    }
    return m;
}

/* The scale a quantizer's call uses on a tensor of max |x| = amax (it
 * records the amax as it goes). Delayed: the state's scale. Current: the
 * FP8 max over amax, with recipe_common.cuh:14-49's edge cases. */
static float sp8_scale(fattn_fp8_quantizer *qz, float amax)
{
    if (qz->kind != FATTN_FP8_RECIPE_CURRENT) {
        /* the cast kernel's atomicMax into the amax_history[0] view: the
         * largest amax since the recipe's last update (quantizer.cpp's
         * Float8Quantizer hands the kernel its amax tensor) */
        qz->amax = fmaxf(qz->amax, amax);
        return qz->scale;
    }
    qz->amax = amax;
    float a = fmaxf(amax, qz->amax_epsilon);
    float sc;
    if (a == 0.0f || !isfinite(a)) {
        sc = 1.0f;
    } else {
        sc = fattn_fp8_max(qz->dtype) / a;
        sc = isinf(sc) ? FLT_MAX : (isnan(sc) ? 1.0f : sc);
    }
    if (qz->force_pow_2_scales) {
        uint32_t u;
        memcpy(&u, &sc, 4);
        u &= 0xFF800000u; /* sign and exponent */
        memcpy(&sc, &u, 4);
    }
    qz->scale = sc;
    return sc;
}

static void sp8_quantize_into(const fattn_tensor *x, fattn_tensor *codes, float scale)
{
    int64_t n = fattn_tensor_numel(x);
    for (int64_t i = 0; i < n; i++)
        ((uint8_t *)codes->data)[sp8_at(codes, i)] =
            fattn_fp8_quantize(codes->dtype, fattn_load_f32(x->data, x->dtype, sp8_at(x, i)), scale);
}

static void sp8_dequantize_into(const fattn_tensor *codes, fattn_tensor *y, float scale_inv)
{
    int64_t n = fattn_tensor_numel(codes);
    for (int64_t i = 0; i < n; i++) {
        uint8_t c = ((const uint8_t *)codes->data)[sp8_at(codes, i)];
        fattn_store_f32(y->data, y->dtype, sp8_at(y, i), fattn_fp8_decode(codes->dtype, c) * scale_inv);
    }
}

/* Buffers laid out as the layout packs q, k, v (combine_and_quantize's
 * groups, U20:3477-3534): the packed 3 (group 1), q plus the packed 2
 * (group 2), or three; storage[] owns them, views[] are q, k, v. */
static fattn_status sp8_qkv_buffers(const sp_forward_frame *f, fattn_dtype dt,
                                    fattn_tensor storage[3], fattn_tensor views[3])
{
    uint64_t poison = f->args->poison;
    fattn_qkv_layout_group g = fattn_layout_group(f->args->qkv_layout);
    const fattn_tensor *q = f->q, *k = f->k, *v = f->v;
    fattn_tensor kv[2];
    fattn_status st;
    if (g == FATTN_LAYOUT_GROUP_3HD || g == FATTN_LAYOUT_GROUP_H3D)
        return fattn__split_alloc_packed(poison, &storage[0], dt, q, 3,
                                        g == FATTN_LAYOUT_GROUP_3HD ? q->ndim - 2 : q->ndim - 1,
                                        views);
    st = fattn__split_alloc_packed(poison, &storage[0], dt, q, 1, 0, &views[0]);
    if (st != FATTN_OK)
        return st;
    if (g == FATTN_LAYOUT_GROUP_HD_2HD || g == FATTN_LAYOUT_GROUP_HD_H2D) {
        st = fattn__split_alloc_packed(poison, &storage[1], dt, k, 2,
                                      g == FATTN_LAYOUT_GROUP_HD_2HD ? k->ndim - 2 : k->ndim - 1,
                                      kv);
        views[1] = kv[0];
        views[2] = kv[1];
        return st;
    }
    st = fattn__split_alloc_packed(poison, &storage[1], dt, k, 1, 0, &views[1]);
    if (st != FATTN_OK)
        return st;
    return fattn__split_alloc_packed(poison, &storage[2], dt, v, 1, 0, &views[2]);
}

fattn_status fattn__split_fp8_inputs(sp_forward_frame *f)
{
    const fattn_fwd_args *args = f->args;
    bool q8 = fattn_dtype_is_fp8(f->q->dtype);
    f->is_input_fp8 = q8;
    f->nominal = q8 ? args->in_nominal_dtype : f->q->dtype;
    if (fattn_dtype_is_fp8(f->k->dtype) != q8 || fattn_dtype_is_fp8(f->v->dtype) != q8)
        return fattn_error(FATTN_E_INVALID_ARG, "split forward: q, k, v must be of the same "
                           "class, e.g. torch.Tensor or QuantizedTensorStorage (S:1617-1619 "
                           "asserts)");
    if (!q8)
        return FATTN_OK;
    if (!args->fp8)
        return fattn_error(FATTN_E_NOT_MODELLED, "split forward: FP8 q, k, v with fp8 False "
                           "(the f16 path handed Float8Tensors) is not modelled by fattn");
    if (f->nominal != FATTN_DTYPE_FLOAT16 && f->nominal != FATTN_DTYPE_BFLOAT16)
        return fattn_error(FATTN_E_INVALID_ARG, "split forward: FP8 q, k, v need their nominal "
                           "dtype (args.in_nominal_dtype float16 or bfloat16)");
    for (int i = 0; i < 3; i++)
        if (!(args->in_scale_inv[i] > 0.0f) || isinf(args->in_scale_inv[i]))
            return fattn_error(FATTN_E_INVALID_ARG, "split forward: FP8 %c needs its "
                               "_scale_inv (args.in_scale_inv[%d], finite and > 0)", "qkv"[i], i);
    return FATTN_OK;
}

/* S:1651-1667: FP8 inputs as given, each with its _scale_inv; f16 ones
 * quantised once by the QKV quantizer, one scale for the three. */
static fattn_status sp8_qkv_fp8(sp_forward_frame *f)
{
    if (f->is_input_fp8) {
        f->qkv_fp8[0] = *f->q;
        f->qkv_fp8[1] = *f->k;
        f->qkv_fp8[2] = *f->v;
        for (int i = 0; i < 3; i++)
            f->qkv_scale_inv[i] = f->args->in_scale_inv[i];
        return FATTN_OK;
    }
    fattn_fp8_quantizer *qz = &f->args->quantizers->QKV;
    fattn_status st = sp8_qkv_buffers(f, qz->dtype, f->res->own_qkv_fp8, f->qkv_fp8);
    if (st != FATTN_OK)
        return st;
    float amax = sp8_amax_of(f->v, sp8_amax_of(f->k, sp8_amax_of(f->q, 0.0f)));
    float scale = sp8_scale(qz, amax);
    sp8_quantize_into(f->q, &f->qkv_fp8[0], scale);
    sp8_quantize_into(f->k, &f->qkv_fp8[1], scale);
    sp8_quantize_into(f->v, &f->qkv_fp8[2], scale);
    for (int i = 0; i < 3; i++)
        f->qkv_scale_inv[i] = 1.0f / scale;
    return FATTN_OK;
}

/* S:1769-1770, combine_and_dequantize (U20:3537-3588): FP8 inputs put back
 * together by the layout's group and dequantised with q's _scale_inv (k's
 * and v's own notwithstanding: make_like(q_fp8, ...)) into new buffers of
 * the nominal dtype, for an F16 backward. */
static fattn_status sp8_combine_and_dequantize(sp_forward_frame *f)
{
    fattn_status st = sp8_qkv_buffers(f, f->nominal, f->res->own_qkv_f16, f->qkv_f16);
    if (st != FATTN_OK)
        return st;
    for (int i = 0; i < 3; i++)
        sp8_dequantize_into(&f->qkv_fp8[i], &f->qkv_f16[i], f->qkv_scale_inv[0]);
    return FATTN_OK;
}

/* S:1686-1718, the FP8 call: O in FP8 with the O quantizer's scale
 * (delayed), else in q's nominal dtype with O's amax discarded. */
static fattn_status sp8_call(sp_forward_frame *f, bool delayed)
{
    fattn_fp8_quantizers *qs = f->args->quantizers;
    fattn_split_fwd_result *res = f->res;
    if (delayed) {
        fattn_tensor was = res->own_out;
        fattn_tensor_free(&res->own_out);
        fattn_status st = fattn__split_alloc_out(f->args->poison, &res->own_out, qs->O.dtype,
                                                was.ndim, was.shape);
        if (st != FATTN_OK)
            return st;
    }
    float amax_thrown_away = 0.0f;
    fattn_fp8_fwd fp;
    memset(&fp, 0, sizeof fp);
    fp.descale_q = f->qkv_scale_inv[0];
    fp.descale_k = f->qkv_scale_inv[1];
    fp.descale_v = f->qkv_scale_inv[2];
    fp.scale_s = qs->S.scale;
    fp.descale_s = 1.0f / qs->S.scale;
    fp.amax_s = &qs->S.amax;
    fp.s_dtype = qs->S.dtype;
    fp.scale_o = delayed ? qs->O.scale : 1.0f;
    fp.amax_o = delayed ? &qs->O.amax : &amax_thrown_away;
    f->eq = &f->qkv_fp8[0];
    f->ek = &f->qkv_fp8[1];
    f->ev = &f->qkv_fp8[2];
    f->fp8p = &fp;
    fattn_status st = fattn__split_forward_impl_fused_attn_fwd(f);
    f->eq = f->q;
    f->ek = f->k;
    f->ev = f->v;
    f->fp8p = NULL;
    return st;
}

fattn_status fattn__split_fp8_forward(sp_forward_frame *f)
{
    const fattn_fwd_args *args = f->args;
    fattn_fp8_quantizers *qs = args->quantizers;
    fattn_split_fwd_result *res = f->res;
    /* _qkv_quantizer_type (S:237-253) */
    bool delayed = qs->QKV.kind == FATTN_FP8_RECIPE_DELAYED;
    if (!delayed && qs->QKV.kind != FATTN_FP8_RECIPE_CURRENT)
        return fattn_error(FATTN_E_INVALID_CASE, "split forward: QKV_quantizer is no FP8 "
                           "quantizer (TE raises TypeError, S:253)");
    f->is_bwd_fp8 = args->fp8 && args->nvte_fp8_dpa_bwd;
    fattn_status st = sp8_qkv_fp8(f);
    if (st != FATTN_OK)
        return st;
    st = sp8_call(f, delayed);
    if (st != FATTN_OK)
        return st;
    /* S:1723-1742 */
    bool training = args->is_training == 1, cs_o16 = !delayed && args->nvte_dpa_fp8cs_o_in_f16;
    bool need_o_f16 = training && (!f->is_bwd_fp8 || cs_o16);
    bool need_o_fp8 = training && f->is_bwd_fp8 && (delayed || !args->nvte_dpa_fp8cs_o_in_f16);
    f->out_fp8 = res->own_out;
    f->out_f16 = res->own_out;
    f->out_fp8_scale_inv = NAN;
    if (delayed) {
        f->out_fp8_scale_inv = 1.0f / qs->O.scale;
        if (!args->fp8_output || need_o_f16) {
            st = fattn__split_alloc_out(args->poison, &res->own_out_f16, f->nominal,
                                       res->own_out.ndim, res->own_out.shape);
            if (st != FATTN_OK)
                return st;
            sp8_dequantize_into(&res->own_out, &res->own_out_f16, f->out_fp8_scale_inv);
            f->out_f16 = res->own_out_f16;
        }
    } else if (args->fp8_output || need_o_fp8) {
        float scale = sp8_scale(&qs->O, sp8_amax_of(&res->own_out, 0.0f));
        st = fattn__split_alloc_out(args->poison, &res->own_out_fp8, qs->O.dtype,
                                   res->own_out.ndim, res->own_out.shape);
        if (st != FATTN_OK)
            return st;
        sp8_quantize_into(&res->own_out, &res->own_out_fp8, scale);
        f->out_fp8 = res->own_out_fp8;
        f->out_fp8_scale_inv = 1.0f / scale;
    }
    /* S:1757 */
    f->out_ret = args->fp8_output ? f->out_fp8 : f->out_f16;
    res->out_scale_inv = args->fp8_output ? f->out_fp8_scale_inv : NAN;
    f->qkv_f16[0] = *f->q;
    f->qkv_f16[1] = *f->k;
    f->qkv_f16[2] = *f->v;
    return (f->is_bwd_fp8 || !f->is_input_fp8) ? FATTN_OK : sp8_combine_and_dequantize(f);
}

fattn_split_save_variant fattn__split_fp8_save_variant(const sp_forward_frame *f)
{
    const fattn_fwd_args *args = f->args;
    if (!f->is_bwd_fp8)
        return FATTN_SPLIT_SAVE_FP8_BWD_F16;
    bool current = args->quantizers->QKV.kind == FATTN_FP8_RECIPE_CURRENT;
    return (current && args->nvte_dpa_fp8cs_o_in_f16) ? FATTN_SPLIT_SAVE_FP8_O_F16
                                                      : FATTN_SPLIT_SAVE_FP8_O_FP8;
}

/* The candidates fill_to_save picks from: q8 k8 v8 out8 and q k v out_f16
 * (f16 inputs as given, FP8 ones dequantised). */
void fattn__split_fp8_tensors(const sp_forward_frame *f, fattn_tensor fp8[SP_QKVO_N],
                             fattn_tensor f16[SP_QKVO_N])
{
    for (int i = 0; i < 3; i++)
        fp8[i] = f->qkv_fp8[i];
    fp8[SP_QKVO_OUT] = f->out_fp8;
    f16[SP_QKVO_Q] = f->qkv_f16[0];
    f16[SP_QKVO_K] = f->qkv_f16[1];
    f16[SP_QKVO_V] = f->qkv_f16[2];
    f16[SP_QKVO_OUT] = f->out_f16;
}

/* The scale_inv each FP8 entry of to_save carries (a deduplicated entry
 * carries its source's, which setup_ctx puts back: the same value). */
void fattn__split_fp8_scale_invs(sp_forward_frame *f)
{
    float *si = f->res->ctx_attrs.fp8_scale_inv;
    fattn_split_save_variant v = fattn__split_fp8_save_variant(f);
    if (v == FATTN_SPLIT_SAVE_FP8_BWD_F16)
        return;
    for (int i = 0; i < 3; i++)
        si[i] = f->qkv_scale_inv[i];
    if (v == FATTN_SPLIT_SAVE_FP8_O_FP8)
        si[SP_QKVO_OUT] = f->out_fp8_scale_inv;
}

/* S:1856-1877 */
void fattn__split_fp8_ctx_attrs(sp_forward_frame *f)
{
    fattn_fp8_quantizers *qs = f->args->quantizers;
    fattn_split_ctx_attrs *ca = &f->res->ctx_attrs;
    ca->fp8 = f->is_bwd_fp8;
    ca->is_input_fp8 = f->is_input_fp8;
    ca->qkv_type = qs->QKV.kind == FATTN_FP8_RECIPE_DELAYED ? "delayed" : "current";
    ca->fused_attention_backend =
        f->is_bwd_fp8 ? FATTN_TE_BACKEND_FP8 : FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN;
    ca->QKV_quantizer = &qs->QKV;
    ca->O_quantizer = &qs->O;
    ca->dQKV_quantizer = &qs->dQKV;
    ca->dO_quantizer = &qs->dO;
    ca->dP_quantizer = &qs->dP;
    ca->S_quantizer = &qs->S;
    /* S:1856-1858: backward's S quantizer is a copy with the scale as now */
    if (f->is_bwd_fp8 && qs->S.kind == FATTN_FP8_RECIPE_DELAYED) {
        f->res->own_s_copy = qs->S;
        f->res->own_s_copy.shared_amax = &qs->S.amax; /* copy() shares the amax */
        ca->S_quantizer = &f->res->own_s_copy;
    }
}

/* dQ, dK, dV as cuDNN writes them under delayed scaling: FP8 buffers shaped
 * as the dqkv layout packs them (attention.cpp:381-383, 398-452). */
static fattn_status sp8_grad_buffers(const fattn_bwd_args *bwd, fattn_split_grads *g,
                                     fattn_dtype dt, fattn_tensor out[3])
{
    fattn_qkv_layout_group grp = fattn_layout_group(bwd->dqkv_layout);
    uint64_t poison = bwd->poison;
    fattn_tensor kv[2];
    fattn_status st;
    if (grp == FATTN_LAYOUT_GROUP_3HD || grp == FATTN_LAYOUT_GROUP_H3D)
        return fattn__split_alloc_packed(poison, &g->own_fp8[0], dt, &g->dq, 3,
                                        grp == FATTN_LAYOUT_GROUP_3HD ? g->dq.ndim - 2
                                                                      : g->dq.ndim - 1,
                                        out);
    st = fattn__split_alloc_packed(poison, &g->own_fp8[0], dt, &g->dq, 1, 0, &out[0]);
    if (st != FATTN_OK)
        return st;
    if (grp == FATTN_LAYOUT_GROUP_HD_2HD || grp == FATTN_LAYOUT_GROUP_HD_H2D) {
        st = fattn__split_alloc_packed(poison, &g->own_fp8[1], dt, &g->dk, 2,
                                      grp == FATTN_LAYOUT_GROUP_HD_2HD ? g->dk.ndim - 2
                                                                       : g->dk.ndim - 1,
                                      kv);
        out[1] = kv[0];
        out[2] = kv[1];
        return st;
    }
    st = fattn__split_alloc_packed(poison, &g->own_fp8[1], dt, &g->dk, 1, 0, &out[1]);
    if (st != FATTN_OK)
        return st;
    return fattn__split_alloc_packed(poison, &g->own_fp8[2], dt, &g->dv, 1, 0, &out[2]);
}

/* S:2167-2183: the grads returned. Quantized ones (fp8[], delayed) are
 * dequantised into g with their _scale_inv unless the inputs were FP8 and
 * bf16_backward is off, when they are returned as they are; F16 ones
 * (current, fp8 NULL) are quantised by the dQKV quantizer exactly then,
 * combined by the dqkv layout's group (combine_and_quantize). */
static fattn_status sp8_grads_out(const fattn_bwd_args *bwd, fattn_split_grads *g,
                                  const fattn_tensor *fp8)
{
    fattn_fp8_quantizer *qz = bwd->dQKV_quantizer;
    bool fp8_out = bwd->is_input_fp8 && !bwd->bf16_backward;
    if (fp8 && fp8_out) {
        g->dq = fp8[0];
        g->dk = fp8[1];
        g->dv = fp8[2];
        g->grads_scale_inv = 1.0f / qz->scale;
    } else if (fp8) {
        float si = 1.0f / qz->scale;
        sp8_dequantize_into(&fp8[0], &g->dq, si);
        sp8_dequantize_into(&fp8[1], &g->dk, si);
        sp8_dequantize_into(&fp8[2], &g->dv, si);
    } else if (fp8_out) {
        fattn_tensor q8[3];
        fattn_status st = sp8_grad_buffers(bwd, g, qz->dtype, q8);
        if (st != FATTN_OK)
            return st;
        float amax = sp8_amax_of(&g->dv, sp8_amax_of(&g->dk, sp8_amax_of(&g->dq, 0.0f)));
        float scale = sp8_scale(qz, amax);
        sp8_quantize_into(&g->dq, &q8[0], scale);
        sp8_quantize_into(&g->dk, &q8[1], scale);
        sp8_quantize_into(&g->dv, &q8[2], scale);
        g->dq = q8[0];
        g->dk = q8[1];
        g->dv = q8[2];
        g->grads_scale_inv = 1.0f / scale;
    }
    return FATTN_OK;
}

/* A quantized d_out must come with its _scale_inv. */
static fattn_status sp8_check_d_out(const fattn_bwd_args *bwd)
{
    float si = bwd->d_out_scale_inv;
    if (fattn_dtype_is_fp8(bwd->d_out.dtype) && (!(si > 0.0f) || isinf(si)))
        return fattn_error(FATTN_E_INVALID_ARG, "split backward: an FP8 d_out needs its "
                           "_scale_inv (bwd.d_out_scale_inv, finite and > 0)");
    return FATTN_OK;
}

fattn_status fattn__split_fp8_d_out_f16(const fattn_bwd_args *bwd, fattn_split_grads *g,
                                       fattn_tensor *d_o)
{
    const fattn_tensor *d_out = &bwd->d_out;
    if (!fattn_dtype_is_fp8(d_out->dtype))
        return FATTN_OK;
    fattn_status st = sp8_check_d_out(bwd);
    if (st != FATTN_OK)
        return st;
    st = fattn__split_alloc_out(bwd->poison, &g->own_d_out_f16, bwd->nominal_dtype,
                               d_out->ndim, d_out->shape);
    if (st != FATTN_OK)
        return st;
    sp8_dequantize_into(d_out, &g->own_d_out_f16, bwd->d_out_scale_inv);
    *d_o = g->own_d_out_f16;
    return FATTN_OK;
}

fattn_status fattn__split_fp8_backward(const fattn_bwd_args *bwd, const fattn_aux_pack *pack,
                                      fattn_split_grads *g)
{
    fattn_fp8_quantizer *dO_q = bwd->dO_quantizer, *dP_q = bwd->dP_quantizer;
    fattn_fp8_quantizer *dQKV_q = bwd->dQKV_quantizer, *S_q = bwd->S_quantizer;
    if (!dO_q || !dP_q || !dQKV_q || !S_q)
        return fattn_error(FATTN_E_STATE, "split backward: FP8 backward needs dO, dP, dQKV "
                           "and S quantizers (args has None)");
    bool delayed = dQKV_q->kind == FATTN_FP8_RECIPE_DELAYED;
    /* S:2020-2029: a quantized d_out as is, else d_out_fp8 = dO_quantizer(d_out) */
    const fattn_tensor *d_out = &bwd->d_out;
    float do_scale_inv = bwd->d_out_scale_inv;
    fattn_status st = sp8_check_d_out(bwd);
    if (st != FATTN_OK)
        return st;
    if (!fattn_dtype_is_fp8(d_out->dtype)) {
        st = fattn__split_alloc_out(bwd->poison, &g->own_d_out_fp8, dO_q->dtype, d_out->ndim,
                                   d_out->shape);
        if (st != FATTN_OK)
            return st;
        float do_scale = sp8_scale(dO_q, sp8_amax_of(d_out, 0.0f));
        sp8_quantize_into(d_out, &g->own_d_out_fp8, do_scale);
        do_scale_inv = 1.0f / do_scale;
        d_out = &g->own_d_out_fp8;
    }
    fattn_bwd_params p;
    fattn__split_backward_params(bwd, pack, g, &p);
    p.attn.q = bwd->q_fp8;
    p.attn.k = bwd->k_fp8;
    p.attn.v = bwd->v_fp8;
    p.d_o = *d_out;
    /* S:2125-2130: the F16 out under current scaling with O_in_F16 */
    bool o_is_fp8 = !(bwd->qkv_type && !strcmp(bwd->qkv_type, "current") &&
                      bwd->nvte_dpa_fp8cs_o_in_f16);
    p.attn.o = o_is_fp8 ? bwd->out_fp8 : bwd->out;
    fattn_tensor gq[3];
    if (delayed) {
        st = sp8_grad_buffers(bwd, g, dQKV_q->dtype, gq);
        if (st != FATTN_OK)
            return st;
        p.dq = gq[0];
        p.dk = gq[1];
        p.dv = gq[2];
    }
    float a_dq = 0.0f, a_dk = 0.0f, a_dv = 0.0f;
    float g_scale = delayed ? dQKV_q->scale : 1.0f;
    fattn_fp8_bwd fb;
    memset(&fb, 0, sizeof fb);
    fb.descale_q = bwd->fp8_scale_inv[SP_QKVO_Q];
    fb.descale_k = bwd->fp8_scale_inv[SP_QKVO_K];
    fb.descale_v = bwd->fp8_scale_inv[SP_QKVO_V];
    fb.descale_o = o_is_fp8 ? bwd->fp8_scale_inv[SP_QKVO_OUT] : 1.0f;
    fb.descale_do = do_scale_inv;
    fb.scale_s = S_q->scale;
    fb.descale_s = 1.0f / S_q->scale;
    fb.scale_dp = dP_q->scale;
    fb.descale_dp = 1.0f / dP_q->scale;
    fb.scale_dq = fb.scale_dk = fb.scale_dv = g_scale;
    fb.amax_dp = &dP_q->amax;
    fb.amax_dq = &a_dq;
    fb.amax_dk = &a_dk;
    fb.amax_dv = &a_dv;
    fb.s_dtype = S_q->dtype;
    fb.dp_dtype = dP_q->dtype;
    p.fp8 = &fb;
    st = fattn_engine_bwd(bwd->engine, &p);
    if (st != FATTN_OK)
        return st;
    if (delayed) /* F5: one amax for the three; fattn keeps the largest */
        dQKV_q->amax = fmaxf(fmaxf(a_dq, a_dk), a_dv);
    return sp8_grads_out(bwd, g, delayed ? gq : NULL);
}

/* fused_attn.py:356-364 on the FP8 backend: ceil(sq*sq/128) per thread,
 * which philox_cuda_state rounds up to a multiple of 4 (fp8-branches F4). */
uint64_t fattn__split_fp8_rng_step(const fattn_fwd_args *args)
{
    uint64_t sq = (uint64_t)args->max_seqlen_q;
    return ((sq * sq + 127u) / 128u + 3u) & ~(uint64_t)3u;
}
