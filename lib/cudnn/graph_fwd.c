/* The cuDNN engine's forward graph (graph.h): the description from
 * fattn_fwd_params, then the native SDPA_FWD op or the composite graph of
 * cudnn-frontend 1.18's CompositeSDPANode (graph.c has the sources). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn/graph_build.h"
#include "fattn/te.h"

/* ---- geometry -> description ------------------------------------------- */

/* Elements spanned by a view (1 + sum (n-1)*stride). */
static int64_t view_extent(const fattn_tensor *t)
{
    int64_t e = 1;
    for (int i = 0; i < t->ndim; i++)
        e += (t->shape[i] - 1) * t->strides[i];
    return e;
}

/* The description's options past the shapes: ragged offset dtype, bias,
 * ALiBi, sink, dropout, the diagonal band, the scale. The dispatch checked
 * the values (geom.c); what is left here is cuDNN's reading of them. */
static fattn_status fwd_desc_options(const fattn_geom *g, const fattn_attn_common *a,
                                     cg_fwd_desc *d)
{
    /* Ragged offsets are element offsets: INT32 unless a tensor is too big. */
    int64_t span = 0;
    const fattn_tensor *all[] = {&g->q, &g->k, &g->v, &g->o};
    for (int i = 0; i < 4; i++) {
        int64_t e = view_extent(all[i]);
        span = e > span ? e : span;
    }
    d->ragged_dtype = span < INT32_MAX ? CG_I32 : CG_I64;

    assert(a->bias_type != FATTN_BIAS_PRE_SCALE_BIAS); /* row pre_scale_bias_engines */
    /* the geometry's bias view: the input (forward) or the aux pack's entry
     * (backward), 4-D of the io dtype, empty unless post_scale_bias */
    d->bias = !fattn_tensor_is_empty(&g->bias);
    if (d->bias) {
        const fattn_tensor *bt = &g->bias;
        assert(bt->ndim == 4 && a->bias_type == FATTN_BIAS_POST_SCALE_BIAS);
        for (int i = 0; i < 4; i++) {
            d->bias_dims[i] = bt->shape[i];
            d->bias_strides[i] = bt->strides[i];
        }
        if (d->bias_strides[3] != 1)
            return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: bias needs a unit last stride");
    }
    d->alibi = g->alibi;
    d->sink = a->softmax_type != FATTN_SOFTMAX_VANILLA;
    d->dropout = g->dropout; /* 0 unless applied (a training call) */
    d->stats_output = true;  /* TE always generates stats */

    /* TE's mapping (fused_attn_f16_arbitrary_seqlen.cu): alignment from
     * bottom_right_diagonal; a bottom-right diagonal with sq == skv and no
     * padding is plain top-left; left bound = left + 1, right bound = right. */
    d->bottom_right = g->bottom_right;
    if (d->bottom_right && d->sq == d->skv && !d->padding)
        d->bottom_right = false;
    d->has_left = g->win_left != -1;
    d->left_bound = d->has_left ? g->win_left + 1 : 0;
    d->has_right = g->win_right != -1;
    d->right_bound = d->has_right ? g->win_right : 0;
    d->attn_scale = g->scale;
    d->allow_native = true;
    return FATTN_OK;
}

/* The Q/K/V/O views as cuDNN's [b, h, s, d] (paged: the containers
 * [pages, h, page, d] with their tables' pages per sequence). */
static fattn_status fwd_desc_dims(const fattn_geom *g, cg_fwd_desc *d)
{
    int64_t b = g->b, sq = g->sq, skv = g->skv;
    fattn_status st;
    if ((st = fattn__cgb_to_bhsd(&g->q, g->q_fmt, "Q", b, sq, d->q_dims, d->q_strides)) != FATTN_OK ||
        (st = fattn__cgb_to_bhsd(&g->k, g->kv_fmt, "K", b, skv, d->k_dims, d->k_strides)) != FATTN_OK ||
        (st = fattn__cgb_to_bhsd(&g->v, g->kv_fmt, "V", b, skv, d->v_dims, d->v_strides)) != FATTN_OK ||
        (st = fattn__cgb_to_bhsd(&g->o, g->q_fmt, "O", b, sq, d->o_dims, d->o_strides)) != FATTN_OK)
        return st;
    d->b = b;
    d->sq = sq;
    d->skv = skv;
    d->hq = d->q_dims[1];
    d->hk = d->k_dims[1];
    d->hv = d->v_dims[1];
    d->d = d->q_dims[3];
    d->dv = d->v_dims[3];
    /* the geometry's shapes, read the way cuDNN reads them */
    assert(d->hq == g->h && d->hk == g->hg && d->hv == g->hg && d->d == g->d &&
           d->dv == g->dv && d->o_dims[3] == g->dv);
    if (d->paged) {
        /* tables of ceil(skv / page) entries (geom checked it; cudnn-frontend's
         * PagedCacheLoadNode accepts no other count) */
        d->pps_k = g->pt_k.shape[1];
        d->pps_v = g->pt_v.shape[1];
        assert(d->pps_k == (skv + d->k_dims[2] - 1) / d->k_dims[2] &&
               d->pps_v == (skv + d->v_dims[2] - 1) / d->v_dims[2]);
    }
    return FATTN_OK;
}

/* The forward description from the dispatch's geometry g and the call's
 * options a: what every graph of the call (forward, and the backward's
 * score recomputation) reads. fp8_s: the quantised P's dtype of an FP8 call,
 * NULL otherwise; max_logit: TE's return_max_logit. */
static fattn_status fwd_desc(const fattn_geom *g, const fattn_attn_common *a,
                             const fattn_dtype *fp8_s, bool max_logit, cg_fwd_desc *d)
{
    memset(d, 0, sizeof *d);
    /* What this engine cannot describe is the support table's rows for it
     * (float32_cudnn, max_logit_cudnn, the fp8_* gaps): the dispatch refuses
     * them before the engine runs, and the asserts below name the row each
     * relies on. */
    d->paged = g->paged;
    switch (g->io) {
    case FATTN_DTYPE_FLOAT16: d->io = CG_F16; break;
    case FATTN_DTYPE_BFLOAT16: d->io = CG_BF16; break;
    case FATTN_DTYPE_FLOAT8_E4M3FN:
    case FATTN_DTYPE_FLOAT8_E5M2:
        d->fp8 = true; /* dtypes: fattn__cg_fp8_fwd_desc */
        break;
    default:
        return fattn_error(FATTN_E_DTYPE, "cuDNN engine: Q dtype %s",
                           fattn_dtype_name(g->io));
    }
    assert(!(max_logit && d->fp8)); /* row fp8_max_logit_cudnn */
    assert(!(d->paged && d->fp8));  /* row fp8_paged_cudnn */
    d->ragged_q = g->q_fmt == FATTN_FORMAT_THD;
    d->ragged_kv = g->kv_fmt == FATTN_FORMAT_THD;
    /* geom refused THD and paged K/V without one */
    d->padding = fattn_mask_has_padding(a->mask_type);
    assert(d->padding || (!d->ragged_q && !d->ragged_kv && !d->paged));
    fattn_status st;
    if ((st = fwd_desc_dims(g, d)) != FATTN_OK)
        return st;
    if (d->fp8) {
        assert(fp8_s); /* row fp8_descales_engines */
        if ((st = fattn__cg_fp8_fwd_desc(a, *fp8_s, d)) != FATTN_OK)
            return st;
    } else {
        assert(!fp8_s); /* geom: an FP8 call has FP8 Q */
        d->o_dt = d->io;
    }
    if ((st = fwd_desc_options(g, a, d)) != FATTN_OK)
        return st;
    d->max_output = max_logit;
    if (d->max_output) /* the native op has no Max before 9.21's softmax descriptor */
        d->allow_native = false;
    return FATTN_OK;
}

fattn_status fattn__cg_fwd_desc_from_geom(const fattn_geom *g, const fattn_fwd_params *p,
                                   cg_fwd_desc *d)
{
    return fwd_desc(g, &p->attn, p->fp8 ? &p->fp8->s_dtype : NULL, p->return_max_logit, d);
}

/* The backward's score recomputation is the forward's graph of the same
 * call: the description from the same geometry and options. */
fattn_status fattn__cg_fwd_desc_for_bwd(const fattn_geom *g, const fattn_bwd_params *p,
                                 cg_fwd_desc *d)
{
    return fwd_desc(g, &p->attn, p->fp8 ? &p->fp8->s_dtype : NULL, false, d);
}

bool fattn__cg_fwd_builds_at(const cg_fwd_desc *d, int64_t cudnn_version)
{
    return !d->max_output || cudnn_version >= CG_MAX_LOGIT_MIN_CUDNN;
}

bool fattn__cg_fwd_native_shape(const cg_fwd_desc *d)
{
    return !d->fp8 && !d->paged && !d->padding && !d->ragged_q && !d->ragged_kv && !d->bias && !d->alibi &&
           !d->sink && d->dropout == 0.0f && !d->has_left && !d->has_right;
}

bool fattn__cg_fwd_is_native(const cg_fwd_desc *d)
{
    return d->allow_native && fattn__cg_fwd_native_shape(d);
}

/* ---- building ------------------------------------------------------------ */

static fattn_status build_native(builder *bd, const cg_fwd_desc *d)
{
    cg_graph *g = bd->g;
    g->route = CG_ROUTE_NATIVE;
    int q = fattn__cgb_add_tensor(bd, "Q", d->io, d->q_dims, d->q_strides, false, false, CG_ROLE_Q,
                           CG_UID_Q);
    int k = fattn__cgb_add_tensor(bd, "K", d->io, d->k_dims, d->k_strides, false, false, CG_ROLE_K,
                           CG_UID_K);
    int v = fattn__cgb_add_tensor(bd, "V", d->io, d->v_dims, d->v_strides, false, false, CG_ROLE_V,
                           CG_UID_V);
    int scale = fattn__cgb_scalar_f(bd, "Attn_scale", d->attn_scale, CG_UID_SCALE);
    int o = fattn__cgb_add_tensor(bd, "O", d->io, d->o_dims, d->o_strides, false, false, CG_ROLE_O,
                           CG_UID_O);
    int stats = -1;
    if (d->stats_output) {
        int64_t r4[4] = {d->b, d->hq, d->sq, 1};
        stats = fattn__cgb_add_tensor(bd, "Stats", CG_F32, r4, NULL, false, false, CG_ROLE_STATS,
                               CG_UID_STATS);
    }
    cg_op *op = fattn__cgb_add_op(bd, CG_OP_SDPA_FWD, "sdpa_fwd");
    if (op) {
        op->sdpa[CG_SDPA_Q] = q;
        op->sdpa[CG_SDPA_K] = k;
        op->sdpa[CG_SDPA_V] = v;
        op->sdpa[CG_SDPA_O] = o;
        op->sdpa[CG_SDPA_STATS] = stats;
        op->sdpa[CG_SDPA_SCALE] = scale;
    }
    return bd->st;
}

/* Bias, ALiBi and padding modifiers on the scaled scores s (the frontend's
 * order; forward and backward alike). */
/* The forward's inputs, in the order their descriptors must exist: ragged
 * offsets, Q, K (transposed), V, the per-batch lengths. */
typedef struct fwd_inputs {
    int q, k, v, seq_q, seq_kv;
    int pt_k, pt_v; /* page tables, -1 unless paged */
    int ro, rs; /* ragged offsets of O and Stats, -1 without */
} fwd_inputs;

static fattn_status fwd_add_paged(builder *bd, const cg_fwd_desc *d, fwd_inputs *x);

static fattn_status fwd_add_inputs(builder *bd, const cg_fwd_desc *d, fwd_inputs *x)
{
    cg_graph *g = bd->g;
    const int64_t b = d->b;
    /* Ragged offsets first: a tensor's RAGGED_OFFSET_DESC must exist before it. */
    int rq = -1, rk = -1, rv = -1;
    x->ro = -1, x->rs = -1, x->pt_k = -1, x->pt_v = -1;
    if (d->ragged_q) {
        rq = fattn__cgb_ragged_tensor(bd, "ragged_offset_q", d->ragged_dtype, b, CG_ROLE_RAG_Q,
                               CG_UID_RAG_Q);
        x->ro = fattn__cgb_ragged_tensor(bd, "ragged_offset_o", d->ragged_dtype, b, CG_ROLE_RAG_O,
                                  CG_UID_RAG_O);
        x->rs = fattn__cgb_ragged_tensor(bd, "ragged_offset_stats", d->ragged_dtype, b, CG_ROLE_RAG_STATS,
                                  CG_UID_RAG_STATS);
    }
    if (d->ragged_kv) {
        rk = fattn__cgb_ragged_tensor(bd, "ragged_offset_k", d->ragged_dtype, b, CG_ROLE_RAG_K,
                               CG_UID_RAG_K);
        rv = fattn__cgb_ragged_tensor(bd, "ragged_offset_v", d->ragged_dtype, b, CG_ROLE_RAG_V,
                               CG_UID_RAG_V);
    }

    int q = x->q = fattn__cgb_add_tensor(bd, "Q", d->io, d->q_dims, d->q_strides, false, false, CG_ROLE_Q,
                                  CG_UID_Q);
    if (d->paged) {
        if (bd->st == FATTN_OK)
            g->t[q].ragged = rq;
        return fwd_add_paged(bd, d, x);
    }
    /* K enters bmm1 transposed: [b, hk, d, skv], same memory. */
    int64_t kt_dims[4] = {d->k_dims[0], d->k_dims[1], d->k_dims[3], d->k_dims[2]};
    int64_t kt_strides[4] = {d->k_strides[0], d->k_strides[1], d->k_strides[3], d->k_strides[2]};
    int k = x->k = fattn__cgb_add_tensor(bd, "K", d->io, kt_dims, kt_strides, false, false, CG_ROLE_K,
                                  CG_UID_K);
    int v = x->v = fattn__cgb_add_tensor(bd, "V", d->io, d->v_dims, d->v_strides, false, false, CG_ROLE_V,
                                  CG_UID_V);
    if (bd->st != FATTN_OK)
        return bd->st;
    g->t[q].ragged = rq;
    g->t[k].ragged = rk;
    g->t[v].ragged = rv;

    x->seq_q = -1, x->seq_kv = -1;
    if (d->padding) {
        int64_t bd4[4] = {b, 1, 1, 1};
        x->seq_q = fattn__cgb_add_tensor(bd, "seq_q", CG_I32, bd4, NULL, false, false, CG_ROLE_SEQ_Q,
                                  CG_UID_SEQ_Q);
        x->seq_kv = fattn__cgb_add_tensor(bd, "seq_kv", CG_I32, bd4, NULL, false, false, CG_ROLE_SEQ_KV,
                                   CG_UID_SEQ_KV);
    }

    return bd->st;
}

/* Stats or Max: FLOAT [b, hq, sq, 1], row-major, or TE's ragged [t, h]
 * token-major layout with Stats' ragged offset rs. */
static int fwd_row_output(builder *bd, const cg_fwd_desc *d, const char *name, cg_role role,
                          int64_t uid, int rs)
{
    const int64_t r4[4] = {d->b, d->hq, d->sq, 1};
    int64_t st4[4];
    if (d->ragged_q) {
        st4[0] = d->hq * d->sq, st4[1] = 1, st4[2] = d->hq, st4[3] = 1;
    } else {
        fattn__cgb_contiguous(r4, st4);
    }
    int t = fattn__cgb_add_tensor(bd, name, CG_F32, r4, st4, false, false, role, uid);
    if (bd->st == FATTN_OK)
        bd->g->t[t].ragged = rs;
    return t;
}

/* The softmax as cuDNN >= 9.21's one SOFTMAX op (cudnn-frontend's
 * UnifiedSoftmaxNode, which its CompositeSDPANode emits there): X the
 * modified scores, Y = P, Stats and Max written, the sink as an input.
 * Only for return_max_logit: the F3-F9 chain cannot write Max beside Stats
 * (the frontend's CompositeSoftmaxNode refuses that mix). Returns P. */
static int fwd_softmax_op(builder *bd, const cg_fwd_desc *d, int s, int rs)
{
    int sink = -1;
    if (d->sink) {
        int64_t sd[4] = {1, d->hq, 1, 1}, ss[4] = {d->hq, 1, 1, 1};
        sink = fattn__cgb_add_tensor(bd, "sink_token", CG_F32, sd, ss, false, false, CG_ROLE_SINK,
                              CG_UID_SINK);
    }
    int stats = d->stats_output ? fwd_row_output(bd, d, "Stats", CG_ROLE_STATS, CG_UID_STATS, rs)
                                : -1;
    int max = fwd_row_output(bd, d, "Max", CG_ROLE_MAX, CG_UID_MAX, rs);
    const int64_t s4[4] = {d->b, d->hq, d->sq, d->skv};
    int p = fattn__cgb_virt(bd, "softmax", d->dropout > 0.0f ? CG_F32 : d->io, s4);
    cg_op *op = fattn__cgb_add_op(bd, CG_OP_SOFTMAX, "softmax");
    if (op) {
        op->in[0] = s, op->in[1] = sink, op->out = p;
        op->sdpa[CG_SDPA_STATS] = stats;
        op->sdpa[CG_SDPA_MAX] = max;
    }
    return p;
}

/* The paged inputs after Q (cudnn-frontend's CompositeSDPANode): the K and V
 * containers, the lengths, the page tables, and K's PAGED_CACHE_LOAD into
 * the virtual K^T [b, hk, d, skv] bmm1 reads (V's is made before bmm2,
 * fwd_paged_v). */
static fattn_status fwd_add_paged(builder *bd, const cg_fwd_desc *d, fwd_inputs *x)
{
    const int64_t b = d->b, skv = d->skv, hk = d->hk, dk = d->d;
    int kc = x->k = fattn__cgb_add_tensor(bd, "K", d->io, d->k_dims, d->k_strides, false, false,
                                   CG_ROLE_K, CG_UID_K);
    x->v = fattn__cgb_add_tensor(bd, "V", d->io, d->v_dims, d->v_strides, false, false, CG_ROLE_V,
                          CG_UID_V);
    int64_t bd4[4] = {b, 1, 1, 1};
    x->seq_q = fattn__cgb_add_tensor(bd, "seq_q", CG_I32, bd4, NULL, false, false, CG_ROLE_SEQ_Q,
                              CG_UID_SEQ_Q);
    x->seq_kv = fattn__cgb_add_tensor(bd, "seq_kv", CG_I32, bd4, NULL, false, false, CG_ROLE_SEQ_KV,
                               CG_UID_SEQ_KV);
    int64_t tk[4] = {b, 1, d->pps_k, 1}, tks[4] = {d->pps_k, d->pps_k, 1, 1};
    int64_t tv[4] = {b, 1, d->pps_v, 1}, tvs[4] = {d->pps_v, d->pps_v, 1, 1};
    x->pt_k = fattn__cgb_add_tensor(bd, "page_table_k", CG_I32, tk, tks, false, false, CG_ROLE_PT_K,
                             CG_UID_PT_K);
    x->pt_v = fattn__cgb_add_tensor(bd, "page_table_v", CG_I32, tv, tvs, false, false, CG_ROLE_PT_V,
                             CG_UID_PT_V);
    int64_t kt[4] = {b, hk, dk, skv}, kts[4] = {dk * skv * hk, dk * skv, 1, dk};
    x->k = fattn__cgb_add_tensor(bd, "paged_k", d->io, kt, kts, true, false, CG_ROLE_NONE, -1);
    cg_op *op = fattn__cgb_add_op(bd, CG_OP_PAGED_LOAD, "paged_k_cache_operation");
    if (op)
        op->in[0] = kc, op->in[1] = x->seq_kv, op->in[2] = x->pt_k, op->out = x->k;
    return bd->st;
}

/* V's PAGED_CACHE_LOAD into the virtual [b, hv, skv, dv] bmm2 reads. */
static int fwd_paged_v(builder *bd, const cg_fwd_desc *d, const fwd_inputs *x)
{
    const int64_t b = d->b, skv = d->skv, hv = d->hv, dv = d->dv;
    int64_t vd[4] = {b, hv, skv, dv}, vs[4] = {dv * skv * hv, dv * skv, dv, 1};
    int v = fattn__cgb_add_tensor(bd, "paged_v", d->io, vd, vs, true, false, CG_ROLE_NONE, -1);
    cg_op *op = fattn__cgb_add_op(bd, CG_OP_PAGED_LOAD, "paged_v_cache_operation");
    if (op)
        op->in[0] = x->v, op->in[1] = x->seq_kv, op->in[2] = x->pt_v, op->out = v;
    return v;
}

/* Softmax (F3-F9), with the sink variant: Stats = M + log(sum exp(s - M))
 * written out when the description asks, P = exp(s - M) / sum. Returns P. */
static int fwd_softmax(builder *bd, const cg_fwd_desc *d, int s, int rs)
{
    if (d->max_output)
        return fwd_softmax_op(bd, d, s, rs);
    cg_graph *g = bd->g;
    const int64_t b = d->b, hq = d->hq, sq = d->sq;
    const int64_t r4[4] = {b, hq, sq, 1};
    /* softmax (F3-F9), with the sink variant */
    int sink = -1, m;
    if (d->sink) {
        int64_t sd[4] = {1, hq, 1, 1}, ss[4] = {hq, 1, 1, 1};
        sink = fattn__cgb_add_tensor(bd, "sink_token", CG_F32, sd, ss, false, false, CG_ROLE_SINK,
                              CG_UID_SINK);
        int smax = fattn__cgb_virt(bd, "s_max", CG_F32, r4);
        fattn__cgb_red_into(bd, "Max", CG_RED_MAX, s, smax);
        m = fattn__cgb_virt(bd, "Max", CG_F32, r4);
        fattn__cgb_pw_into(bd, "max_sink", CG_PW_MAX, CG_F32, -1, smax, sink, -1, m);
    } else {
        m = fattn__cgb_virt(bd, "Max", CG_F32, r4);
        fattn__cgb_red_into(bd, "Max", CG_RED_MAX, s, m);
    }
    int z = fattn__cgb_pw(bd, "sub_M", CG_PW_SUB, CG_F32, -1, s, m, -1, CG_F32);
    int e = fattn__cgb_pw(bd, "exp_sub_M", CG_PW_EXP, CG_F32, -1, z, -1, -1, CG_F32);
    int l;
    if (d->sink) {
        int subs = fattn__cgb_pw(bd, "sub_sink", CG_PW_SUB, CG_F32, -1, sink, m, -1, CG_F32);
        int es = fattn__cgb_pw(bd, "exp_sink", CG_PW_EXP, CG_F32, -1, subs, -1, -1, CG_F32);
        int tsum = fattn__cgb_virt(bd, "SumExp_elements", CG_F32, r4);
        fattn__cgb_red_into(bd, "sum", CG_RED_ADD, e, tsum);
        l = fattn__cgb_virt(bd, "SumExp", CG_F32, r4);
        fattn__cgb_pw_into(bd, "add_sink", CG_PW_ADD, CG_F32, -1, tsum, es, -1, l);
    } else {
        l = fattn__cgb_virt(bd, "SumExp", CG_F32, r4);
        fattn__cgb_red_into(bd, "sum", CG_RED_ADD, e, l);
    }
    int lnl = fattn__cgb_pw(bd, "log", CG_PW_LOG, CG_F32, -1, l, -1, -1, CG_F32);
    int stats;
    if (d->stats_output) {
        int64_t st4[4];
        if (d->ragged_q) { /* TE's ragged stats: [t, h] token-major */
            st4[0] = hq * sq, st4[1] = 1, st4[2] = hq, st4[3] = 1;
        } else {
            fattn__cgb_contiguous(r4, st4);
        }
        stats = fattn__cgb_add_tensor(bd, "Stats", CG_F32, r4, st4, false, false, CG_ROLE_STATS,
                               CG_UID_STATS);
        if (bd->st == FATTN_OK)
            g->t[stats].ragged = rs;
    } else {
        stats = fattn__cgb_virt(bd, "Stats", CG_F32, r4);
    }
    fattn__cgb_pw_into(bd, "add", CG_PW_ADD, CG_F32, -1, m, lnl, -1, stats);
    return fattn__cgb_pw(bd, "div", CG_PW_DIV, CG_F32, -1, e, l, -1,
                  d->dropout > 0.0f || d->fp8 ? CG_F32 : d->io);
}

/* Dropout on P: the Philox keep-mask (written out for the oracle with
 * rng_dump) and the 1/(1-p) scale. Returns the dropped P. */
static int fwd_dropout(builder *bd, const cg_fwd_desc *d, int p)
{
    const int64_t s4[4] = {d->b, d->hq, d->sq, d->skv};
    if (d->dropout > 0.0f) {
        int seed = fattn__cgb_add_tensor(bd, "Seed", CG_I64, fattn__cgb_one4, fattn__cgb_one4, false, false,
                                  CG_ROLE_SEED,
                              CG_UID_SEED);
        int off = fattn__cgb_add_tensor(bd, "Offset", CG_I64, fattn__cgb_one4, fattn__cgb_one4, false, false,
                                 CG_ROLE_OFFSET,
                             CG_UID_OFFSET);
        int mask;
        if (d->rng_dump) { /* the keep-mask written out, for the oracle */
            int64_t ms[4];
            fattn__cgb_contiguous(s4, ms);
            mask = fattn__cgb_add_tensor(bd, "rng", CG_F32, s4, ms, false, false, CG_ROLE_RNG_DUMP,
                                  CG_UID_RNG_DUMP);
        } else {
            mask = fattn__cgb_virt(bd, "rng", CG_F32, s4);
        }
        cg_op *r = fattn__cgb_add_op(bd, CG_OP_RNG, "rng");
        if (r) {
            r->in[0] = seed, r->in[1] = off, r->out = mask;
            r->bernoulli_p = 1.0 - (double)d->dropout;
        }
        p = fattn__cgb_pw(bd, "dropout_mask_mul", CG_PW_MUL, CG_F32, -1, p, mask, -1, CG_F32);
        int sc = fattn__cgb_scalar_f(bd, "dropout_scale", 1.0f / (1.0f - d->dropout), -1);
        p = fattn__cgb_pw(bd, "dropout_scale", CG_PW_MUL, CG_F32, -1, p, sc, -1,
                   d->fp8 ? CG_F32 : d->io);
    }
    return p;
}

fattn_status fattn__cg_build_fwd(cg_graph *g, const cg_fwd_desc *d)
{
    memset(g, 0, sizeof *g);
    g->next_uid = CG_UID_FIRST_INTERNAL;
    builder bd = {g, FATTN_OK};
    if (fattn__cg_fwd_is_native(d))
        return build_native(&bd, d);
    g->route = CG_ROUTE_COMPOSITE;
    const int64_t s4[4] = {d->b, d->hq, d->sq, d->skv};

    fwd_inputs x;
    fattn_status st = fwd_add_inputs(&bd, d, &x);
    if (st != FATTN_OK)
        return st;
    int q = x.q, k = x.k, v = x.v, seq_q = x.seq_q, seq_kv = x.seq_kv;

    /* F1 bmm1 */
    int s = fattn__cgb_virt(&bd, "bmm1", CG_F32, s4);
    cg_op *mm = fattn__cgb_add_op(&bd, CG_OP_MATMUL, "bmm1");
    if (mm) {
        mm->in[0] = q, mm->in[1] = k, mm->out = s;
        mm->m_override = seq_q;
        mm->n_override = seq_kv;
    }
    /* F2 scale */
    int scale = fattn__cgb_scalar_f(&bd, "Attn_scale", d->attn_scale, CG_UID_SCALE);
    s = fattn__cgb_pw(&bd, "attn_scale", CG_PW_MUL, CG_F32, -1, s, scale, -1, CG_F32);
    if (d->fp8)
        s = fattn__cgb_fp8_descale_qk(&bd, s);

    /* score modifiers: bias, ALiBi, padding, diagonal band */
    s = fattn__cgb_score_modifiers(&bd, d, s, seq_q, seq_kv);
    s = fattn__cgb_band_mask(&bd, d, s, seq_q, seq_kv);

    int p = fwd_softmax(&bd, d, s, x.rs);
    p = fwd_dropout(&bd, d, p);
    if (d->fp8)
        p = fattn__cgb_fp8_quantize_p(&bd, d, p);

    if (d->paged)
        v = fwd_paged_v(&bd, d, &x);

    /* F10 bmm2 */
    int o = fattn__cgb_add_tensor(&bd, "O", d->fp8 ? d->o_dt : d->io, d->o_dims, d->o_strides, false,
                           false, CG_ROLE_O, CG_UID_O);
    if (bd.st == FATTN_OK)
        g->t[o].ragged = x.ro;
    if (d->fp8) {
        fattn__cgb_fp8_matmul(&bd, "bmm2", p, v, o, CG_ROLE_DESCALE_S, CG_ROLE_DESCALE_V,
                       CG_ROLE_SCALE_O, CG_ROLE_AMAX_O, seq_q, -1, seq_kv);
        return bd.st;
    }
    cg_op *mm2 = fattn__cgb_add_op(&bd, CG_OP_MATMUL, "bmm2");
    if (mm2) {
        mm2->in[0] = p, mm2->in[1] = v, mm2->out = o;
        mm2->m_override = seq_q;
        mm2->k_override = seq_kv;
    }
    return bd.st;
}
