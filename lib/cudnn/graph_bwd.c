/* The cuDNN engine's backward graph (graph.h): the description from
 * fattn_bwd_params, then cudnn-frontend 1.18's CompositeSDPABackwardNode. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn/graph_build.h"
#include "fattn/te.h"

/* ---- backward ------------------------------------------------------------ */

fattn_status fattn__cg_bwd_desc_from_geom(const fattn_geom *g, const fattn_bwd_params *p,
                                   cg_bwd_desc *d)
{
    memset(d, 0, sizeof *d);
    /* The forward's description of the same call (the dispatch resolved the
     * aux pack's Bias and SoftmaxOffset into g). */
    fattn_status st = fattn__cg_fwd_desc_for_bwd(g, p, &d->f);
    if (st != FATTN_OK)
        return st;
    d->f.allow_native = false; /* the forward's native op is not the backward's */
    if (p->dqkv_layout < 0 || p->dqkv_layout >= FATTN_LAYOUT_NOT_SET ||
        fattn_layout_is_paged(p->dqkv_layout))
        return fattn_error(FATTN_E_LAYOUT, "cuDNN backward: dQKV layout not set or paged");
    fattn_qkv_format qf = g->q_fmt, kf = g->kv_fmt;
    fattn_qkv_format dqf = fattn_layout_q_format(p->dqkv_layout);
    fattn_qkv_format dkf = fattn_layout_kv_format(p->dqkv_layout);
    if (dqf != qf || dkf != kf || p->do_format != p->attn.o_format)
        return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN backward: dQKV / dO formats must match "
                           "the QKV / O formats");
    const fattn_tensor *grads[] = {&p->d_o, &p->dq, &p->dk, &p->dv};
    if (d->f.fp8 && (st = fattn__cg_fp8_bwd_desc(p, d)) != FATTN_OK)
        return st;
    for (int i = 0; i < 4 && !d->f.fp8; i++)
        if (grads[i]->dtype != p->attn.q.dtype)
            return fattn_error(FATTN_E_DTYPE, "cuDNN backward: dO, dQ, dK, dV must have Q's "
                               "dtype");
    const cg_fwd_desc *f = &d->f;
    if ((st = fattn__cgb_to_bhsd(&p->d_o, qf, "dO", f->b, f->sq, d->do_dims, d->do_strides)) != FATTN_OK ||
        (st = fattn__cgb_to_bhsd(&p->dq, qf, "dQ", f->b, f->sq, d->dq_dims, d->dq_strides)) != FATTN_OK ||
        (st = fattn__cgb_to_bhsd(&p->dk, kf, "dK", f->b, f->skv, d->dk_dims, d->dk_strides)) != FATTN_OK ||
        (st = fattn__cgb_to_bhsd(&p->dv, kf, "dV", f->b, f->skv, d->dv_dims, d->dv_strides)) != FATTN_OK)
        return st;
    for (int i = 0; i < 4; i++)
        if (d->do_dims[i] != f->o_dims[i] || d->dq_dims[i] != f->q_dims[i] ||
            d->dk_dims[i] != f->k_dims[i] || d->dv_dims[i] != f->v_dims[i])
            return fattn_error(FATTN_E_SHAPE, "cuDNN backward: gradient shapes differ from "
                               "their inputs'");
    if (f->bias && !fattn_tensor_is_empty(&p->d_bias)) {
        const fattn_tensor *db = &p->d_bias;
        if (db->ndim != 4 || db->dtype != p->attn.q.dtype)
            return fattn_error(FATTN_E_SHAPE, "cuDNN backward: dBias must be 4-D of Q's dtype");
        for (int i = 0; i < 4; i++) {
            if (db->shape[i] != f->bias_dims[i])
                return fattn_error(FATTN_E_SHAPE, "cuDNN backward: dBias shape differs from "
                                   "Bias");
            d->dbias_dims[i] = db->shape[i];
            d->dbias_strides[i] = db->strides[i];
        }
        if (d->dbias_strides[3] != 1)
            return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN backward: dBias needs a unit last "
                               "stride");
        d->dbias = true;
    }
    d->dsink = f->sink; /* TE always asks for dSoftmaxOffset with a sink */
    d->max_total_q = f->ragged_q ? p->attn.q.shape[0] : 0;
    d->deterministic = p->deterministic;
    return FATTN_OK;
}

int64_t fattn__cg_bwd_dsum_bytes(const cg_bwd_desc *d)
{
    if (d->native) /* the op keeps its own */
        return 0;
    if (d->max_total_q > 0) /* TH1, Stats' token stride hq */
        return d->max_total_q * d->f.hq * (int64_t)sizeof(float);
    return d->f.b * d->f.hq * d->f.sq * (int64_t)sizeof(float);
}

/* The frontend forces the direct-dQ ("dP workspace") graph for dBias too;
 * the ordered-dQ deterministic backward keeps the accumulator graph. */
static bool bwd_direct_dq(const cg_bwd_desc *d)
{
    return (d->deterministic && !d->ordered_dq) || d->dbias;
}

bool fattn__cg_bwd_ordered_pin(const cg_bwd_desc *d, int64_t cudnn_version, int cc_major, cg_pin *out)
{
    memset(out, 0, sizeof *out);
    if (d->f.fp8 || d->dbias || d->native || cc_major != 9 || cudnn_version < 92500)
        return false;
    /* Measured with cuDNN 9.28 on the H200: with a ragged dQ packed with dK
     * and dV (T3HD, TH3D: its token stride 3·h·d; dQ_accum takes dQ's
     * strides) the ordered dQ is neither repeatable nor right; a THD dQ of
     * its own is fine. */
    if (d->f.ragged_q && d->dq_strides[2] != d->f.hq * d->f.d)
        return false;
    /* TILE_M 2, TILE_N 1, KERNEL_CFG 2, STREAM_K 0, TILE_CGA_M 0, STAGES 4 */
    static const int32_t type[] = {40, 41, 24, 38, 27, 14};
    static const int64_t value[] = {2, 1, 2, 0, 0, 4};
    out->on = true;
    out->engine = 6;
    out->n = (int)(sizeof type / sizeof type[0]);
    memcpy(out->type, type, sizeof type);
    memcpy(out->value, value, sizeof value);
    return true;
}

bool fattn__cg_bwd_is_native(const cg_bwd_desc *d)
{
    return fattn__cg_fwd_native_shape(&d->f) && !d->dbias && !d->dsink && !d->deterministic;
}

int64_t fattn__cg_bwd_dq_accum_bytes(const cg_bwd_desc *d)
{
    if (bwd_direct_dq(d) || d->native)
        return 0;
    if (d->max_total_q > 0) /* dQ's strides: tokens times dQ's token stride */
        return d->max_total_q * d->dq_strides[2] * (int64_t)sizeof(float);
    return d->f.b * d->f.hq * d->f.sq * d->f.d * (int64_t)sizeof(float);
}

/* A matmul with optional overrides; out is given. */
static void matmul_into(builder *bd, const char *name, int a, int b, int out, int m_ov, int n_ov,
                        int k_ov)
{
    cg_op *mm = fattn__cgb_add_op(bd, CG_OP_MATMUL, name);
    if (!mm)
        return;
    mm->in[0] = a, mm->in[1] = b, mm->out = out;
    mm->m_override = m_ov;
    mm->n_override = n_ov;
    mm->k_override = k_ov;
}

static void reshape_into(builder *bd, const char *name, int x, int out)
{
    cg_op *o = fattn__cgb_add_op(bd, CG_OP_RESHAPE, name);
    if (!o)
        return;
    o->in[0] = x;
    o->out = out;
}

/* The backward's inputs and outputs, in the order their descriptors must
 * exist (ragged offsets first), the per-batch lengths, the scalars and the
 * regenerated dropout mask. */
typedef struct bwd_inputs {
    int q, k, v, o, dO, stats, dq, dk, dvt;
    int seq_q, seq_kv, scale;
    int drop_scale, drop_scale_inv, one; /* -1 where unused */
    int mask;                            /* -1 without dropout */
    int rs, rk, rdq;                     /* ragged offsets, -1 without */
    int64_t st4[4];                      /* Stats' strides */
} bwd_inputs;

static fattn_status bwd_add_inputs(builder *bd, const cg_bwd_desc *bdsc, bwd_inputs *x)
{
    cg_graph *g = bd->g;
    const cg_fwd_desc *d = &bdsc->f;
    const int64_t b = d->b, hq = d->hq, sq = d->sq, skv = d->skv;
    const int64_t s4[4] = {b, hq, sq, skv};
    const int64_t r4[4] = {b, hq, sq, 1};
    /* ragged offsets first */
    int rq = -1, rk = -1, rv = -1, ro = -1, rs = -1, rdo = -1, rdq = -1, rdk = -1, rdv = -1;
    if (d->ragged_q) {
        rq = fattn__cgb_ragged_tensor(bd, "ragged_offset_q", d->ragged_dtype, b, CG_ROLE_RAG_Q,
                               CG_UID_RAG_Q);
        ro = fattn__cgb_ragged_tensor(bd, "ragged_offset_o", d->ragged_dtype, b, CG_ROLE_RAG_O,
                               CG_UID_RAG_O);
        rs = fattn__cgb_ragged_tensor(bd, "ragged_offset_stats", d->ragged_dtype, b, CG_ROLE_RAG_STATS,
                               CG_UID_RAG_STATS);
        rdo = fattn__cgb_ragged_tensor(bd, "ragged_offset_do", d->ragged_dtype, b, CG_ROLE_RAG_DO,
                                CG_UID_RAG_DO);
        rdq = fattn__cgb_ragged_tensor(bd, "ragged_offset_dq", d->ragged_dtype, b, CG_ROLE_RAG_DQ,
                                CG_UID_RAG_DQ);
    }
    if (d->ragged_kv) {
        rk = fattn__cgb_ragged_tensor(bd, "ragged_offset_k", d->ragged_dtype, b, CG_ROLE_RAG_K,
                               CG_UID_RAG_K);
        rv = fattn__cgb_ragged_tensor(bd, "ragged_offset_v", d->ragged_dtype, b, CG_ROLE_RAG_V,
                               CG_UID_RAG_V);
        rdk = fattn__cgb_ragged_tensor(bd, "ragged_offset_dk", d->ragged_dtype, b, CG_ROLE_RAG_DK,
                                CG_UID_RAG_DK);
        rdv = fattn__cgb_ragged_tensor(bd, "ragged_offset_dv", d->ragged_dtype, b, CG_ROLE_RAG_DV,
                                CG_UID_RAG_DV);
    }
    /* inputs: Q, KT, VT, O, dO, Stats */
    int q = fattn__cgb_add_tensor(bd, "Q", d->io, d->q_dims, d->q_strides, false, false, CG_ROLE_Q,
                           CG_UID_Q);
    int64_t kt_dims[4] = {d->k_dims[0], d->k_dims[1], d->k_dims[3], d->k_dims[2]};
    int64_t kt_strides[4] = {d->k_strides[0], d->k_strides[1], d->k_strides[3], d->k_strides[2]};
    int k = fattn__cgb_add_tensor(bd, "K", d->io, kt_dims, kt_strides, false, false, CG_ROLE_K, CG_UID_K);
    int64_t vt_dims[4] = {d->v_dims[0], d->v_dims[1], d->v_dims[3], d->v_dims[2]};
    int64_t vt_strides[4] = {d->v_strides[0], d->v_strides[1], d->v_strides[3], d->v_strides[2]};
    int v = fattn__cgb_add_tensor(bd, "V", d->io, vt_dims, vt_strides, false, false, CG_ROLE_V, CG_UID_V);
    int o = fattn__cgb_add_tensor(bd, "O", d->io, d->o_dims, d->o_strides, false, false, CG_ROLE_O,
                           CG_UID_O);
    int dO = fattn__cgb_add_tensor(bd, "dO", d->io, bdsc->do_dims, bdsc->do_strides, false, false,
                            CG_ROLE_DO, CG_UID_DO);
    int64_t st4[4];
    if (d->ragged_q) {
        st4[0] = hq * sq, st4[1] = 1, st4[2] = hq, st4[3] = 1;
    } else {
        fattn__cgb_contiguous(r4, st4);
    }
    int stats = fattn__cgb_add_tensor(bd, "Stats", CG_F32, r4, st4, false, false, CG_ROLE_STATS,
                               CG_UID_STATS);
    int dq = fattn__cgb_add_tensor(bd, "dQ", d->io, bdsc->dq_dims, bdsc->dq_strides, false, false,
                            CG_ROLE_DQ, CG_UID_DQ);
    int dk = fattn__cgb_add_tensor(bd, "dK", d->io, bdsc->dk_dims, bdsc->dk_strides, false, false,
                            CG_ROLE_DK, CG_UID_DK);
    int dvt = fattn__cgb_add_tensor(bd, "dV", d->io, bdsc->dv_dims, bdsc->dv_strides, false, false,
                             CG_ROLE_DV, CG_UID_DV);
    if (bd->st != FATTN_OK)
        return bd->st;
    g->t[q].ragged = rq;
    g->t[k].ragged = rk;
    g->t[v].ragged = rv;
    g->t[o].ragged = ro;
    g->t[dO].ragged = rdo;
    g->t[stats].ragged = rs;
    g->t[dq].ragged = rdq;
    g->t[dk].ragged = rdk;
    g->t[dvt].ragged = rdv;

    int seq_q = -1, seq_kv = -1;
    if (d->padding) {
        int64_t bd4[4] = {b, 1, 1, 1};
        seq_q = fattn__cgb_add_tensor(bd, "seq_q", CG_I32, bd4, NULL, false, false, CG_ROLE_SEQ_Q,
                               CG_UID_SEQ_Q);
        seq_kv = fattn__cgb_add_tensor(bd, "seq_kv", CG_I32, bd4, NULL, false, false, CG_ROLE_SEQ_KV,
                                CG_UID_SEQ_KV);
    }
    int scale = fattn__cgb_scalar_f(bd, "Attn_scale", d->attn_scale, CG_UID_SCALE);
    bool dropout = d->dropout > 0.0f;
    int drop_scale = -1, drop_scale_inv = -1, one = -1;
    if (dropout) {
        drop_scale = fattn__cgb_scalar_f(bd, "Dropout_scale", 1.0f / (1.0f - d->dropout), -1);
        drop_scale_inv = fattn__cgb_scalar_f(bd, "Dropout_scale_inv", 1.0f - d->dropout, -1);
    } else {
        one = fattn__cgb_scalar_f(bd, "one", 1.0f, -1);
    }

    /* RNG: the forward's mask, regenerated from the saved rng_state */
    int mask = -1;
    if (dropout) {
        int seed = fattn__cgb_add_tensor(bd, "Seed", CG_I64, fattn__cgb_one4, fattn__cgb_one4, false, false,
                                  CG_ROLE_SEED,
                              CG_UID_SEED);
        int off = fattn__cgb_add_tensor(bd, "Offset", CG_I64, fattn__cgb_one4, fattn__cgb_one4, false, false,
                                 CG_ROLE_OFFSET,
                             CG_UID_OFFSET);
        mask = fattn__cgb_virt(bd, "rng", CG_F32, s4);
        cg_op *r = fattn__cgb_add_op(bd, CG_OP_RNG, "rng");
        if (r) {
            r->in[0] = seed, r->in[1] = off, r->out = mask;
            r->bernoulli_p = 1.0 - (double)d->dropout;
        }
    }

    *x = (bwd_inputs){.q = q, .k = k, .v = v, .o = o, .dO = dO, .stats = stats, .dq = dq,
                      .dk = dk, .dvt = dvt, .seq_q = seq_q, .seq_kv = seq_kv, .scale = scale,
                      .drop_scale = drop_scale, .drop_scale_inv = drop_scale_inv, .one = one,
                      .mask = mask, .rs = rs, .rk = rk, .rdq = rdq};
    memcpy(x->st4, st4, sizeof st4);
    return bd->st;
}

/* B1-B3: Dsum = rowsum(dO * O) * (1 - p), and dSoftmaxOffset from it.
 * Returns the Dsum tensor. */
static int bwd_dsum(builder *bd, const cg_bwd_desc *bdsc, const bwd_inputs *x)
{
    cg_graph *g = bd->g;
    const cg_fwd_desc *d = &bdsc->f;
    const int64_t b = d->b, hq = d->hq, sq = d->sq, dv = d->dv;
    const int64_t r4[4] = {b, hq, sq, 1};
    const int64_t r4s[4] = {hq * sq, sq, 1, 1};
    const int dO = x->dO, o = x->o, stats = x->stats;
    const bool dropout = d->dropout > 0.0f;
    /* B1-B3: Dsum = rowsum(dO * O) * (1 - p) */
    int64_t t0_dims[4] = {b, hq, sq, dv}, t0_str[4] = {hq * sq * dv, sq * dv, hq * dv, 1};
    int t0 = fattn__cgb_add_tensor(bd, "mul_dO_O", CG_F32, t0_dims, t0_str, true, false, CG_ROLE_NONE, -1);
    fattn__cgb_pw_into(bd, "mul_dO_O", CG_PW_MUL, CG_F32, -1, dO, o, -1, t0);
    int t1 = fattn__cgb_add_tensor(bd, "reduce_dO_o", CG_F32, r4, r4s, true, false, CG_ROLE_NONE, -1);
    fattn__cgb_red_into(bd, "reduce_dO_o", CG_RED_ADD, t0, t1);
    if (bdsc->dsink) {
        int64_t sd[4] = {1, hq, 1, 1}, ss[4] = {hq, 1, 1, 1};
        int sink = fattn__cgb_add_tensor(bd, "sink_token", CG_F32, sd, ss, false, false, CG_ROLE_SINK,
                                  CG_UID_SINK);
        int dsink = fattn__cgb_add_tensor(bd, "dsink_token", CG_F32, sd, ss, false, false, CG_ROLE_DSINK,
                                   CG_UID_DSINK);
        int ss_ = fattn__cgb_pw(bd, "sub_sink", CG_PW_SUB, CG_F32, -1, sink, stats, -1, CG_F32);
        int es = fattn__cgb_pw(bd, "exp_sink", CG_PW_EXP, CG_F32, -1, ss_, -1, -1, CG_F32);
        int pt = fattn__cgb_pw(bd, "mul_exp_sink_last_output", CG_PW_MUL, CG_F32, -1, es, t1, -1, CG_F32);
        fattn__cgb_red_into(bd, "reduce_per_token_grad", CG_RED_ADD, pt, dsink);
    }
    int dsum = fattn__cgb_add_tensor(bd, "softmax_sum", CG_F32, r4, bdsc->max_total_q > 0 ? x->st4 : r4s,
                              false, false, CG_ROLE_DSUM, CG_UID_DSUM);
    if (bd->st == FATTN_OK && bdsc->max_total_q > 0)
        g->t[dsum].ragged = x->rs;
    fattn__cgb_pw_into(bd, "scale_dropout_inv", CG_PW_MUL, CG_F32, -1, t1,
                dropout ? x->drop_scale_inv : x->one,
            -1, dsum);


    return dsum;
}

/* B4-B18: P recomputed, then dV, dS (and dBias), dK, dQ. */
static fattn_status bwd_grads(builder *bd, const cg_bwd_desc *bdsc, const bwd_inputs *x,
                              int dsum)
{
    cg_graph *g = bd->g;
    const cg_fwd_desc *d = &bdsc->f;
    const int64_t b = d->b, hq = d->hq, sq = d->sq, skv = d->skv, dqk = d->d, dv = d->dv;
    const int64_t s4[4] = {b, hq, sq, skv};
    const int64_t st_s4t[4] = {hq * sq * skv, sq * skv, 1, skv};
    const int q = x->q, k = x->k, v = x->v, dO = x->dO, stats = x->stats;
    const int dq = x->dq, dk = x->dk, dvt = x->dvt, seq_q = x->seq_q, seq_kv = x->seq_kv;
    const int scale = x->scale, drop_scale = x->drop_scale, mask = x->mask;
    const bool dropout = d->dropout > 0.0f;
    /* B4-B7: P recomputed */
    int s = fattn__cgb_virt(bd, "matmul_Q_KT", CG_F32, s4);
    matmul_into(bd, "matmul_Q_KT", q, k, s, seq_q, seq_kv, -1);
    s = fattn__cgb_pw(bd, "mul_s_attn_scale", CG_PW_MUL, CG_F32, -1, s, scale, -1, CG_F32);
    s = fattn__cgb_score_modifiers(bd, d, s, seq_q, seq_kv);
    s = fattn__cgb_pw(bd, "sub_s_m", CG_PW_SUB, CG_F32, -1, s, stats, -1, CG_F32);
    s = fattn__cgb_band_mask(bd, d, s, seq_q, seq_kv);
    int p_ = fattn__cgb_pw(bd, "exp_s", CG_PW_EXP, CG_F32, -1, s, -1, -1, CG_F32);
    int pd = p_;
    if (dropout) {
        pd = fattn__cgb_pw(bd, "mul_p_dropout_mask", CG_PW_MUL, CG_F32, -1, pd, mask, -1, CG_F32);
        pd = fattn__cgb_pw(bd, "mul_p_dropout_scale", CG_PW_MUL, CG_F32, -1, pd, drop_scale, -1, CG_F32);
    }
    /* B8-B9: dV */
    int64_t pt_dims[4] = {b, hq, skv, sq};
    int pT = fattn__cgb_add_tensor(bd, "reshape_p", d->io, pt_dims, st_s4t, true, false, CG_ROLE_NONE, -1);
    reshape_into(bd, "reshape_p", pd, pT);
    if (hq == d->hv) {
        matmul_into(bd, "matmul_pT_dO", pT, dO, dvt, seq_kv, -1, seq_q);
    } else {
        int64_t fh[4] = {b, hq, skv, dv};
        int full = fattn__cgb_virt(bd, "matmul_pT_dO", d->io, fh);
        matmul_into(bd, "matmul_pT_dO", pT, dO, full, seq_kv, -1, seq_q);
        fattn__cgb_red_into(bd, "red_dV_head", CG_RED_ADD, full, dvt);
    }
    /* B10-B13: dS */
    int dp = fattn__cgb_virt(bd, "matmul_dO_VT", CG_F32, s4);
    matmul_into(bd, "matmul_dO_VT", dO, v, dp, seq_q, seq_kv, -1);
    if (dropout)
        dp = fattn__cgb_pw(bd, "dP_dropout_mask", CG_PW_MUL, CG_F32, -1, dp, mask, -1, CG_F32);
    int t2 = fattn__cgb_pw(bd, "sub_dP_softmax_sum", CG_PW_SUB, CG_F32, -1, dp, dsum, -1, CG_F32);
    int t3 = fattn__cgb_pw(bd, "mul_dP_exp_s", CG_PW_MUL, CG_F32, -1, t2, p_, -1, CG_F32);
    if (dropout)
        t3 = fattn__cgb_pw(bd, "mul_dS_dropout_scale", CG_PW_MUL, CG_F32, -1, t3, drop_scale, -1, CG_F32);
    if (bdsc->dbias) {
        int db = fattn__cgb_add_tensor(bd, "dBias", d->io, bdsc->dbias_dims, bdsc->dbias_strides, false,
                                false, CG_ROLE_DBIAS, CG_UID_DBIAS);
        fattn__cgb_red_into(bd, "red_dP_dBias", CG_RED_ADD, t3, db);
    }
    int ds = fattn__cgb_pw(bd, "mul_dS_attn_scale", CG_PW_MUL, CG_F32, -1, t3, scale, -1, CG_F32);
    /* B14-B15: dK */
    int dsT = fattn__cgb_add_tensor(bd, "reshape_dS", d->io, pt_dims, st_s4t, true, false, CG_ROLE_NONE,
                             -1);
    reshape_into(bd, "reshape_dS", ds, dsT);
    if (hq == d->hk) {
        matmul_into(bd, "matmul_dST_Q", dsT, q, dk, seq_kv, -1, seq_q);
    } else {
        int64_t fh[4] = {b, hq, skv, dqk};
        int full = fattn__cgb_virt(bd, "matmul_dST_Q", d->io, fh);
        matmul_into(bd, "matmul_dST_Q", dsT, q, full, seq_kv, -1, seq_q);
        fattn__cgb_red_into(bd, "red_dK_head", CG_RED_ADD, full, dk);
    }
    /* B16-B18: dQ */
    int kv = fattn__cgb_add_tensor(bd, "reshape_k", CG_F32, d->k_dims, d->k_strides, true, false,
                            CG_ROLE_NONE, -1);
    if (bd->st == FATTN_OK)
        g->t[kv].ragged = x->rk;
    reshape_into(bd, "reshape_k", k, kv);
    if (!bwd_direct_dq(bdsc)) {
        int64_t qa[4] = {b, hq, sq, dqk};
        int acc = fattn__cgb_add_tensor(bd, "dQ_accum", CG_F32, qa,
                                 bdsc->max_total_q > 0 ? bdsc->dq_strides : NULL, false, false,
                             CG_ROLE_DQ_ACCUM, CG_UID_DQ_ACCUM);
        if (bd->st == FATTN_OK && bdsc->max_total_q > 0)
            g->t[acc].ragged = x->rdq;
        matmul_into(bd, "matmul_dS_K", ds, kv, acc, seq_q, -1, seq_kv);
        fattn__cgb_pw_into(bd, "identity_dQ", CG_PW_IDENTITY, CG_F32, -1, acc, -1, -1, dq);
    } else {
        matmul_into(bd, "matmul_dS_K", ds, kv, dq, seq_q, -1, seq_kv);
    }
    return bd->st;
}


/* The single SDPA_BWD op: K and V untransposed, Stats [b,hq,sq,1], the
 * scale by value; the engine keeps Dsum and any dQ accumulator itself. */
static fattn_status build_native_bwd(builder *bd, const cg_bwd_desc *bdsc)
{
    const cg_fwd_desc *d = &bdsc->f;
    bd->g->route = CG_ROUTE_NATIVE;
    int64_t r4[4] = {d->b, d->hq, d->sq, 1};
    int t[CG_SDPA_N];
    t[CG_SDPA_MAX] = -1; /* the forward SOFTMAX op's slot */
    t[CG_SDPA_Q] = fattn__cgb_add_tensor(bd, "Q", d->io, d->q_dims, d->q_strides, false, false,
                                  CG_ROLE_Q, CG_UID_Q);
    t[CG_SDPA_K] = fattn__cgb_add_tensor(bd, "K", d->io, d->k_dims, d->k_strides, false, false,
                                  CG_ROLE_K, CG_UID_K);
    t[CG_SDPA_V] = fattn__cgb_add_tensor(bd, "V", d->io, d->v_dims, d->v_strides, false, false,
                                  CG_ROLE_V, CG_UID_V);
    t[CG_SDPA_O] = fattn__cgb_add_tensor(bd, "O", d->io, d->o_dims, d->o_strides, false, false,
                                  CG_ROLE_O, CG_UID_O);
    t[CG_SDPA_STATS] = fattn__cgb_add_tensor(bd, "Stats", CG_F32, r4, NULL, false, false,
                                      CG_ROLE_STATS, CG_UID_STATS);
    t[CG_SDPA_SCALE] = fattn__cgb_scalar_f(bd, "Attn_scale", d->attn_scale, CG_UID_SCALE);
    t[CG_SDPA_DO] = fattn__cgb_add_tensor(bd, "dO", d->io, bdsc->do_dims, bdsc->do_strides, false,
                                   false, CG_ROLE_DO, CG_UID_DO);
    t[CG_SDPA_DQ] = fattn__cgb_add_tensor(bd, "dQ", d->io, bdsc->dq_dims, bdsc->dq_strides, false,
                                   false, CG_ROLE_DQ, CG_UID_DQ);
    t[CG_SDPA_DK] = fattn__cgb_add_tensor(bd, "dK", d->io, bdsc->dk_dims, bdsc->dk_strides, false,
                                   false, CG_ROLE_DK, CG_UID_DK);
    t[CG_SDPA_DV] = fattn__cgb_add_tensor(bd, "dV", d->io, bdsc->dv_dims, bdsc->dv_strides, false,
                                   false, CG_ROLE_DV, CG_UID_DV);
    cg_op *op = fattn__cgb_add_op(bd, CG_OP_SDPA_BWD, "sdpa_bwd");
    if (op)
        memcpy(op->sdpa, t, sizeof t);
    return bd->st;
}

fattn_status fattn__cg_build_bwd(cg_graph *g, const cg_bwd_desc *bdsc)
{
    if (bdsc->f.fp8)
        return fattn__cg_build_bwd_fp8(g, bdsc);
    memset(g, 0, sizeof *g);
    g->next_uid = CG_UID_FIRST_INTERNAL;
    g->route = CG_ROUTE_COMPOSITE;
    assert(!bdsc->ordered_dq || bdsc->pin.on);
    g->pin = bdsc->pin;
    g->deterministic = bdsc->deterministic;
    builder bd = {g, FATTN_OK};
    if (bdsc->native) {
        assert(fattn__cg_bwd_is_native(bdsc));
        return build_native_bwd(&bd, bdsc);
    }
    bwd_inputs x;
    fattn_status st = bwd_add_inputs(&bd, bdsc, &x);
    if (st != FATTN_OK)
        return st;
    int dsum = bwd_dsum(&bd, bdsc, &x);
    return bwd_grads(&bd, bdsc, &x, dsum);
}
