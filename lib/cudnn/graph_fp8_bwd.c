/* The cuDNN engine's FP8 backward graph (graph.h, fattn__cg_build_bwd_fp8): the
 * per-tensor-scaled lowering of cudnn-frontend's SDPAFP8BackwardNode
 * (include/cudnn_frontend/node/sdpa_fp8_bwd.h, expand_node, non-MXFP8
 * branch). Unlike the F16 composite backward it binds no caller-side Dsum
 * or dQ accumulator: the FP8 kernel keeps both internally. Facts only, no
 * code copied; docs/cudnn-engine.md, "FP8", has the op list. */
#include <string.h>

#include "cudnn/graph_build.h"

static void matmul_into(builder *bd, const char *name, int a, int b, int out, int m_ov, int n_ov,
                        int k_ov)
{
    cg_op *mm = fattn__cgb_add_op(bd, CG_OP_MATMUL, name);
    if (!mm)
        return;
    mm->in[0] = a, mm->in[1] = b, mm->out = out;
    mm->m_override = m_ov, mm->n_override = n_ov, mm->k_override = k_ov;
}

static void reshape_into(builder *bd, const char *name, int x, int out)
{
    cg_op *o = fattn__cgb_add_op(bd, CG_OP_RESHAPE, name);
    if (!o)
        return;
    o->in[0] = x;
    o->out = out;
}

static int mul(builder *bd, const char *name, int x, int y, cg_dtype out)
{
    return fattn__cgb_pw(bd, name, CG_PW_MUL, CG_F32, -1, x, y, -1, out);
}

static int mul_role(builder *bd, const char *name, int x, cg_role r, cg_dtype out)
{
    return mul(bd, name, x, fattn__cgb_fp8_scalar(bd, r), out);
}

typedef struct fp8_bwd_t {
    int q, kt, vt, o, d_o, stats, seq_q, seq_kv;
    int rng;              /* dropout keep-mask, -1 without */
    int attn_scale, drop_scale;
} fp8_bwd_t;

/* Inputs as the node's expand_node has them: K and V transposed to
 * [b, h, d, s] (the backend's KT and VT), the per-batch lengths, the
 * dropout keep-mask. */
static void fp8_bwd_inputs(builder *bd, const cg_bwd_desc *x, fp8_bwd_t *t)
{
    const cg_fwd_desc *d = &x->f;
    t->q = fattn__cgb_add_tensor(bd, "Q", d->io, d->q_dims, d->q_strides, false, false, CG_ROLE_Q,
                          CG_UID_Q);
    int64_t kd[4] = {d->k_dims[0], d->k_dims[1], d->k_dims[3], d->k_dims[2]};
    int64_t ks[4] = {d->k_strides[0], d->k_strides[1], d->k_strides[3], d->k_strides[2]};
    t->kt = fattn__cgb_add_tensor(bd, "K", d->io, kd, ks, false, false, CG_ROLE_K, CG_UID_K);
    int64_t vd[4] = {d->v_dims[0], d->v_dims[1], d->v_dims[3], d->v_dims[2]};
    int64_t vs[4] = {d->v_strides[0], d->v_strides[1], d->v_strides[3], d->v_strides[2]};
    t->vt = fattn__cgb_add_tensor(bd, "V", d->io, vd, vs, false, false, CG_ROLE_V, CG_UID_V);
    t->o = fattn__cgb_add_tensor(bd, "O", d->o_dt, d->o_dims, d->o_strides, false, false, CG_ROLE_O,
                          CG_UID_O);
    t->d_o = fattn__cgb_add_tensor(bd, "dO", x->do_dt, x->do_dims, x->do_strides, false, false,
                            CG_ROLE_DO, CG_UID_DO);
    int64_t r4[4] = {d->b, d->hq, d->sq, 1};
    t->stats = fattn__cgb_add_tensor(bd, "Stats", CG_F32, r4, NULL, false, false, CG_ROLE_STATS,
                              CG_UID_STATS);
    t->seq_q = t->seq_kv = -1;
    if (d->padding) {
        int64_t b4[4] = {d->b, 1, 1, 1};
        t->seq_q = fattn__cgb_add_tensor(bd, "seq_q", CG_I32, b4, NULL, false, false, CG_ROLE_SEQ_Q,
                                  CG_UID_SEQ_Q);
        t->seq_kv = fattn__cgb_add_tensor(bd, "seq_kv", CG_I32, b4, NULL, false, false, CG_ROLE_SEQ_KV,
                                   CG_UID_SEQ_KV);
    }
    t->rng = -1;
    t->drop_scale = -1;
    if (d->dropout > 0.0f) {
        int seed = fattn__cgb_add_tensor(bd, "Seed", CG_I64, fattn__cgb_one4, fattn__cgb_one4, false, false,
                                  CG_ROLE_SEED, CG_UID_SEED);
        int off = fattn__cgb_add_tensor(bd, "Offset", CG_I64, fattn__cgb_one4, fattn__cgb_one4, false, false,
                                 CG_ROLE_OFFSET, CG_UID_OFFSET);
        int64_t s4[4] = {d->b, d->hq, d->sq, d->skv};
        t->rng = fattn__cgb_virt(bd, "rng", CG_F32, s4);
        cg_op *r = fattn__cgb_add_op(bd, CG_OP_RNG, "rng");
        if (r) {
            r->in[0] = seed, r->in[1] = off, r->out = t->rng;
            r->bernoulli_p = 1.0 - (double)d->dropout;
        }
    }
}

/* Dsum: sum_c dO * O over the head dim, descaled; divided by the dropout
 * scale (times 1-p) as the frontend does. */
static int fp8_bwd_dsum(builder *bd, const cg_bwd_desc *x, const fp8_bwd_t *t)
{
    const cg_fwd_desc *d = &x->f;
    int prod = mul(bd, "mul_dO_O", t->d_o, t->o, CG_F32);
    int64_t r4[4] = {d->b, d->hq, d->sq, 1};
    int sum = fattn__cgb_virt(bd, "reduce_dO", CG_F32, r4);
    fattn__cgb_red_into(bd, "reduce_dO", CG_RED_ADD, prod, sum);
    sum = mul_role(bd, "descale_dO", sum, CG_ROLE_DESCALE_DO, CG_F32);
    sum = mul_role(bd, "descale_O", sum, CG_ROLE_DESCALE_O, CG_F32);
    if (d->dropout > 0.0f) {
        int inv = fattn__cgb_scalar_f(bd, "dropout_scale_inv", 1.0f - d->dropout, -1);
        sum = mul(bd, "scale_dropout_inv", sum, inv, CG_F32);
    }
    return sum;
}

/* The recomputed exp(s - Stats), with the forward's masks. */
static int fp8_bwd_exp_s(builder *bd, const cg_bwd_desc *x, fp8_bwd_t *t)
{
    const cg_fwd_desc *d = &x->f;
    int64_t s4[4] = {d->b, d->hq, d->sq, d->skv};
    int s = fattn__cgb_virt(bd, "bmm_Q_K", CG_F32, s4);
    matmul_into(bd, "bmm_Q_K", t->q, t->kt, s, t->seq_q, t->seq_kv, -1);
    t->attn_scale = fattn__cgb_scalar_f(bd, "Attn_scale", d->attn_scale, CG_UID_SCALE);
    s = mul(bd, "attn_scale", s, t->attn_scale, CG_F32);
    s = fattn__cgb_fp8_descale_qk(bd, s);
    s = fattn__cgb_score_modifiers(bd, d, s, t->seq_q, t->seq_kv);
    s = fattn__cgb_band_mask(bd, d, s, t->seq_q, t->seq_kv);
    s = fattn__cgb_pw(bd, "sub_dV_Stats", CG_PW_SUB, CG_F32, -1, s, t->stats, -1, CG_F32);
    return fattn__cgb_pw(bd, "exp_dV", CG_PW_EXP, CG_F32, -1, s, -1, -1, CG_F32);
}

/* dS = (dO V^T descaled - Dsum) * exp_S [* dropout scale] * attn_scale;
 * amax_dP; quantised with scale_dP to dp_dt (dO's type: fattn__cg_fp8_bwd_desc). */
static int fp8_bwd_ds(builder *bd, const cg_bwd_desc *x, const fp8_bwd_t *t, int exp_s,
                      int dsum)
{
    const cg_fwd_desc *d = &x->f;
    int64_t s4[4] = {d->b, d->hq, d->sq, d->skv};
    int dp = fattn__cgb_virt(bd, "bmm_dO_V_T", CG_F32, s4);
    matmul_into(bd, "bmm_dO_V_T", t->d_o, t->vt, dp, t->seq_q, t->seq_kv, -1);
    dp = mul_role(bd, "descale_dO", dp, CG_ROLE_DESCALE_DO, CG_F32);
    dp = mul_role(bd, "descale_V", dp, CG_ROLE_DESCALE_V, CG_F32);
    dp = fattn__cgb_pw(bd, "sub_dP_softmax_sum", CG_PW_SUB, CG_F32, -1, dp, dsum, -1, CG_F32);
    dp = mul(bd, "mul_dP_exp_S", dp, exp_s, CG_F32);
    if (t->drop_scale >= 0)
        dp = mul(bd, "mul_dS_dropout_scale", dp, t->drop_scale, CG_F32);
    dp = mul(bd, "mul_dS_attn_scale", dp, t->attn_scale, CG_F32);
    fattn__cgb_fp8_amax(bd, "amax_dP", dp, CG_ROLE_AMAX_DP);
    return mul_role(bd, "scale_dP", dp, CG_ROLE_SCALE_DP, x->dp_dt);
}

/* A [b, h, sq, skv] tensor's transposed view [b, h, skv, sq], virtual. */
static int transposed(builder *bd, const char *name, const cg_fwd_desc *d, int x, cg_dtype dt)
{
    int64_t dims[4] = {d->b, d->hq, d->skv, d->sq};
    int64_t st[4] = {d->hq * d->sq * d->skv, d->sq * d->skv, 1, d->skv};
    int out = fattn__cgb_add_tensor(bd, name, dt, dims, st, true, false, CG_ROLE_NONE, -1);
    reshape_into(bd, name, x, out);
    return out;
}

fattn_status fattn__cg_build_bwd_fp8(cg_graph *g, const cg_bwd_desc *x)
{
    memset(g, 0, sizeof *g);
    g->next_uid = CG_UID_FIRST_INTERNAL;
    g->route = CG_ROUTE_COMPOSITE;
    builder bd = {g, FATTN_OK};
    const cg_fwd_desc *d = &x->f;
    fp8_bwd_t t;
    fp8_bwd_inputs(&bd, x, &t);
    int dq = fattn__cgb_add_tensor(&bd, "dQ", x->dq_dt, x->dq_dims, x->dq_strides, false, false,
                            CG_ROLE_DQ, CG_UID_DQ);
    int dk = fattn__cgb_add_tensor(&bd, "dK", x->dk_dt, x->dk_dims, x->dk_strides, false, false,
                            CG_ROLE_DK, CG_UID_DK);
    int dv = fattn__cgb_add_tensor(&bd, "dV", x->dv_dt, x->dv_dims, x->dv_strides, false, false,
                            CG_ROLE_DV, CG_UID_DV);
    int dsum = fp8_bwd_dsum(&bd, x, &t);
    int exp_s = fp8_bwd_exp_s(&bd, x, &t);

    /* P for dV: dropped, scaled, quantised to s_dt (Q's type), transposed */
    int p = exp_s;
    if (t.rng >= 0) {
        p = mul(&bd, "mul_p_dropout_mask", p, t.rng, CG_F32);
        t.drop_scale = fattn__cgb_scalar_f(&bd, "dropout_scale", 1.0f / (1.0f - d->dropout), -1);
        p = mul(&bd, "mul_dS_dropout_scale", p, t.drop_scale, CG_F32);
    }
    p = mul_role(&bd, "scale_S", p, CG_ROLE_SCALE_S, d->s_dt);
    int pt = transposed(&bd, "S_T", d, p, d->s_dt);
    fattn__cgb_fp8_matmul(&bd, "bmm_S_T_dO", pt, t.d_o, dv, CG_ROLE_DESCALE_S, CG_ROLE_DESCALE_DO,
                   CG_ROLE_SCALE_DV, CG_ROLE_AMAX_DV, t.seq_kv, -1, t.seq_q);

    int ds = fp8_bwd_ds(&bd, x, &t, exp_s, dsum);

    /* dQ = dS K: K back from its transposed view */
    int k = fattn__cgb_add_tensor(&bd, "reshape_K", d->io, d->k_dims, d->k_strides, true, false,
                           CG_ROLE_NONE, -1);
    reshape_into(&bd, "reshape_K", t.kt, k);
    fattn__cgb_fp8_matmul(&bd, "bmm_dP_K", ds, k, dq, CG_ROLE_DESCALE_DP, CG_ROLE_DESCALE_K,
                   CG_ROLE_SCALE_DQ, CG_ROLE_AMAX_DQ, t.seq_q, -1, t.seq_kv);

    /* dK = dS^T Q (a GQA head sum inside matmul_fp8) */
    int dst = transposed(&bd, "dP_T", d, ds, x->dp_dt);
    fattn__cgb_fp8_matmul(&bd, "bmm_dP_T_Q", dst, t.q, dk, CG_ROLE_DESCALE_DP, CG_ROLE_DESCALE_Q,
                   CG_ROLE_SCALE_DK, CG_ROLE_AMAX_DK, t.seq_kv, -1, t.seq_q);
    return bd.st;
}
