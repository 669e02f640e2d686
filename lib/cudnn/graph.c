/* The cuDNN engine's graph description: built from fattn_fwd_params in plain
 * C, no CUDA (graph.h). The op sequence follows cudnn-frontend 1.18's
 * CompositeSDPANode::expand_node, its score modifiers
 * (utils/attn_score_modifiers.h) and its Softmax node, for the options
 * TransformerEngine's F16 arbitrary-seqlen forward sets. Facts only; no
 * code was copied (docs/cudnn-engine.md lists what is mirrored). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn/graph.h"
#include "fattn/te.h"

/* ---- names ---------------------------------------------------------------- */

const char *cg_dtype_name(cg_dtype t)
{
    static const char *const n[] = {"f32", "f16", "bf16", "i32", "i64", "bool"};
    return (unsigned)t < sizeof n / sizeof n[0] ? n[t] : "?";
}

const char *cg_pw_mode_name(cg_pw_mode m)
{
    static const char *const n[] = {"ADD",    "SUB",    "MUL",    "DIV",         "MAX",
                                    "EXP",    "LOG",    "IDENTITY", "CMP_GE",    "CMP_GT",
                                    "CMP_LT", "LOGICAL_AND", "BINARY_SELECT", "GEN_INDEX"};
    return (unsigned)m < sizeof n / sizeof n[0] ? n[m] : "?";
}

const char *cg_red_mode_name(cg_red_mode m)
{
    return m == CG_RED_MAX ? "MAX" : m == CG_RED_ADD ? "ADD" : "?";
}

const char *cg_op_kind_name(cg_op_kind k)
{
    static const char *const n[] = {"MATMUL", "POINTWISE", "REDUCTION", "RNG", "SDPA_FWD",
                                    "RESHAPE"};
    return (unsigned)k < sizeof n / sizeof n[0] ? n[k] : "?";
}

const char *cg_role_name(cg_role r)
{
    static const char *const n[] = {"-",     "q",     "k",      "v",       "o",     "stats",
                                    "bias",  "sink",  "alibi",  "seq_q",   "seq_kv", "rag_q",
                                    "rag_k", "rag_v", "rag_o",  "rag_stats", "seed", "offset",
                                    "do",    "dq",    "dk",     "dv",      "dbias", "dsink",
                                    "dsum",  "dq_accum", "rag_do", "rag_dq", "rag_dk", "rag_dv",
                                    "rng_dump"};
    return (unsigned)r < sizeof n / sizeof n[0] ? n[r] : "?";
}

int cg_find_uid(const cg_graph *g, int64_t uid)
{
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].uid == uid)
            return i;
    return -1;
}

/* ---- parameters -> description -------------------------------------------- */

/* A 4-D (or THD 3-D) view in cuDNN's [b, h, s, d] order. */
static fattn_status to_bhsd(const fattn_tensor *t, fattn_qkv_format f, const char *name,
                            int64_t b, int64_t smax, int64_t dims[4], int64_t strides[4])
{
    if (fattn_tensor_is_empty(t))
        return fattn_error(FATTN_E_INVALID_ARG, "cuDNN engine: %s is missing", name);
    int want = f == FATTN_FORMAT_THD ? 3 : 4;
    if (t->ndim != want)
        return fattn_error(FATTN_E_SHAPE, "cuDNN engine: %s has %d dims, format %s needs %d",
                           name, t->ndim, fattn_format_name(f), want);
    const int64_t *sh = t->shape, *st = t->strides;
    switch (f) {
    case FATTN_FORMAT_SBHD:
        dims[0] = sh[1], dims[1] = sh[2], dims[2] = sh[0], dims[3] = sh[3];
        strides[0] = st[1], strides[1] = st[2], strides[2] = st[0], strides[3] = st[3];
        break;
    case FATTN_FORMAT_BSHD:
        dims[0] = sh[0], dims[1] = sh[2], dims[2] = sh[1], dims[3] = sh[3];
        strides[0] = st[0], strides[1] = st[2], strides[2] = st[1], strides[3] = st[3];
        break;
    case FATTN_FORMAT_BHSD:
        for (int i = 0; i < 4; i++)
            dims[i] = sh[i], strides[i] = st[i];
        break;
    case FATTN_FORMAT_THD:
        /* As TE describes a ragged tensor: batch stride of a padded bshd
         * tensor (the ragged offsets replace it), token stride as s. */
        dims[0] = b, dims[1] = sh[1], dims[2] = smax, dims[3] = sh[2];
        strides[0] = smax * st[0], strides[1] = st[1], strides[2] = st[0], strides[3] = st[2];
        break;
    default:
        return fattn_error(FATTN_E_LAYOUT, "cuDNN engine: %s format %s", name,
                           fattn_format_name(f));
    }
    for (int i = 0; i < 4; i++)
        if (dims[i] <= 0 || strides[i] < 0)
            return fattn_error(FATTN_E_SHAPE, "cuDNN engine: %s dim %d is %lld (stride %lld)",
                               name, i, (long long)dims[i], (long long)strides[i]);
    if (strides[3] != 1)
        return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: %s's head dim stride is %lld, "
                           "cuDNN needs 1", name, (long long)strides[3]);
    return FATTN_OK;
}

/* Elements spanned by a view (1 + sum (n-1)*stride). */
static int64_t view_extent(const fattn_tensor *t)
{
    int64_t e = 1;
    for (int i = 0; i < t->ndim; i++)
        e += (t->shape[i] - 1) * t->strides[i];
    return e;
}

/* The description's options past the shapes: ragged offset dtype, bias,
 * ALiBi, sink, dropout, the diagonal band, the scale. */
static fattn_status fwd_desc_options(const fattn_fwd_params *p, cg_fwd_desc *d)
{
    /* Ragged offsets are element offsets: INT32 unless a tensor is too big. */
    int64_t span = 0;
    const fattn_tensor *all[] = {&p->q, &p->k, &p->v, &p->o};
    for (int i = 0; i < 4; i++) {
        int64_t e = view_extent(all[i]);
        span = e > span ? e : span;
    }
    d->ragged_dtype = span < INT32_MAX ? CG_I32 : CG_I64;

    if (p->bias_type == FATTN_BIAS_PRE_SCALE_BIAS)
        return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: pre_scale_bias");
    d->bias = p->bias_type == FATTN_BIAS_POST_SCALE_BIAS;
    if (d->bias) {
        const fattn_tensor *bt = &p->bias;
        if (fattn_tensor_is_empty(bt) || bt->ndim != 4 || bt->dtype != p->q.dtype)
            return fattn_error(FATTN_E_SHAPE, "cuDNN engine: bias must be a 4-D tensor of Q's "
                               "dtype");
        for (int i = 0; i < 4; i++) {
            d->bias_dims[i] = bt->shape[i];
            /* size-1 dims broadcast: their stride does not matter to the
             * data, give them the packed value */
            d->bias_strides[i] = bt->strides[i];
        }
        if (d->bias_strides[3] != 1)
            return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: bias needs a unit last stride");
    }
    d->alibi = p->bias_type == FATTN_BIAS_ALIBI;
    d->sink = p->softmax_type != FATTN_SOFTMAX_VANILLA;
    d->dropout = p->is_training && p->dropout > 0.0f ? p->dropout : 0.0f;
    d->stats_output = true; /* TE always generates stats */

    /* TE's mapping (fused_attn_f16_arbitrary_seqlen.cu): alignment from
     * bottom_right_diagonal; a bottom-right diagonal with sq == skv and no
     * padding is plain top-left; left bound = left + 1, right bound = right. */
    d->bottom_right = p->bottom_right_diagonal;
    if (d->bottom_right && d->sq == d->skv && !d->padding)
        d->bottom_right = false;
    if (p->window_size_left < -1 || p->window_size_right < -1)
        return fattn_error(FATTN_E_INVALID_ARG, "cuDNN engine: window below -1");
    d->has_left = p->window_size_left != -1;
    d->left_bound = d->has_left ? p->window_size_left + 1 : 0;
    d->has_right = p->window_size_right != -1;
    d->right_bound = d->has_right ? p->window_size_right : 0;
    if (!isfinite(p->attn_scale))
        return fattn_error(FATTN_E_INVALID_ARG, "cuDNN engine: attn_scale is not finite");
    d->attn_scale = p->attn_scale;
    d->allow_native = true;
    return FATTN_OK;
}

fattn_status cg_fwd_desc_from_params(const fattn_fwd_params *p, cg_fwd_desc *d)
{
    memset(d, 0, sizeof *d);
    if (p->qkv_layout < 0 || p->qkv_layout >= FATTN_LAYOUT_NOT_SET)
        return fattn_error(FATTN_E_LAYOUT, "cuDNN engine: QKV layout not set");
    if (fattn_layout_is_paged(p->qkv_layout))
        return fattn_error(FATTN_E_UNSUPPORTED,
                           "cuDNN engine: paged KV layouts are not implemented");
    switch (p->q.dtype) {
    case FATTN_DTYPE_FLOAT16: d->io = CG_F16; break;
    case FATTN_DTYPE_BFLOAT16: d->io = CG_BF16; break;
    case FATTN_DTYPE_FLOAT32:
        return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: float32 io is not supported "
                           "by cuDNN's fused attention (float16/bfloat16 only)");
    case FATTN_DTYPE_FLOAT8_E4M3FN:
    case FATTN_DTYPE_FLOAT8_E5M2:
        return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: FP8 is not implemented");
    default:
        return fattn_error(FATTN_E_DTYPE, "cuDNN engine: Q dtype %s",
                           fattn_dtype_name(p->q.dtype));
    }
    if (p->k.dtype != p->q.dtype || p->v.dtype != p->q.dtype || p->o.dtype != p->q.dtype)
        return fattn_error(FATTN_E_DTYPE, "cuDNN engine: Q, K, V and O must share a dtype");
    if (p->return_max_logit)
        return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: return_max_logit needs cuDNN "
                           ">= 9.21 (this engine targets 9.19)");
    fattn_qkv_format qf = fattn_layout_q_format(p->qkv_layout);
    fattn_qkv_format kf = fattn_layout_kv_format(p->qkv_layout);
    if (p->o_format != qf)
        return fattn_error(FATTN_E_LAYOUT, "cuDNN engine: o_format differs from Q's format");
    bool padding = fattn_mask_has_padding(p->mask_type);
    d->ragged_q = qf == FATTN_FORMAT_THD;
    d->ragged_kv = kf == FATTN_FORMAT_THD;
    if ((d->ragged_q || d->ragged_kv) && !padding)
        return fattn_error(FATTN_E_INVALID_CASE, "cuDNN engine: THD needs a padding mask");
    int64_t b;
    if (d->ragged_q) {
        if (p->cu_seqlens_q.ndim != 1 || p->cu_seqlens_q.shape[0] < 2)
            return fattn_error(FATTN_E_SHAPE, "cuDNN engine: THD Q needs cu_seqlens_q [b+1]");
        b = p->cu_seqlens_q.shape[0] - 1;
    } else {
        if (p->q.ndim != 4)
            return fattn_error(FATTN_E_SHAPE, "cuDNN engine: Q must have 4 dims");
        b = qf == FATTN_FORMAT_SBHD ? p->q.shape[1] : p->q.shape[0];
    }
    int64_t sq = d->ragged_q ? p->max_seqlen_q : 0, skv = d->ragged_kv ? p->max_seqlen_kv : 0;
    if (!d->ragged_q)
        sq = qf == FATTN_FORMAT_SBHD ? p->q.shape[0] : p->q.shape[qf == FATTN_FORMAT_BHSD ? 2 : 1];
    if (!d->ragged_kv) {
        if (p->k.ndim != 4)
            return fattn_error(FATTN_E_SHAPE, "cuDNN engine: K must have 4 dims");
        skv = kf == FATTN_FORMAT_SBHD ? p->k.shape[0] : p->k.shape[kf == FATTN_FORMAT_BHSD ? 2 : 1];
    }
    if (sq <= 0 || skv <= 0)
        return fattn_error(FATTN_E_SHAPE, "cuDNN engine: sequence lengths must be positive");
    fattn_status st;
    if ((st = to_bhsd(&p->q, qf, "Q", b, sq, d->q_dims, d->q_strides)) ||
        (st = to_bhsd(&p->k, kf, "K", b, skv, d->k_dims, d->k_strides)) ||
        (st = to_bhsd(&p->v, kf, "V", b, skv, d->v_dims, d->v_strides)) ||
        (st = to_bhsd(&p->o, qf, "O", b, sq, d->o_dims, d->o_strides)))
        return st;
    d->b = b;
    d->sq = sq;
    d->skv = skv;
    d->hq = d->q_dims[1];
    d->hk = d->k_dims[1];
    d->hv = d->v_dims[1];
    d->d = d->q_dims[3];
    d->dv = d->v_dims[3];
    if (d->k_dims[0] != b || d->v_dims[0] != b || d->q_dims[0] != b || d->o_dims[0] != b ||
        d->k_dims[3] != d->d || d->v_dims[2] != skv || d->k_dims[2] != skv ||
        d->o_dims[1] != d->hq || d->o_dims[2] != sq || d->o_dims[3] != d->dv ||
        d->hk != d->hv || d->hq % d->hk != 0)
        return fattn_error(FATTN_E_SHAPE, "cuDNN engine: Q/K/V/O shapes are inconsistent");

    d->padding = padding;
    return fwd_desc_options(p, d);
}

bool cg_fwd_is_native(const cg_fwd_desc *d)
{
    return d->allow_native && !d->padding && !d->ragged_q && !d->ragged_kv && !d->bias &&
           !d->alibi && !d->sink && d->dropout == 0.0f && !d->has_left && !d->has_right;
}

/* ---- building ------------------------------------------------------------- */

typedef struct builder {
    cg_graph *g;
    fattn_status st;
} builder;

static void contiguous(const int64_t dims[4], int64_t strides[4])
{
    strides[3] = 1;
    for (int i = 2; i >= 0; i--)
        strides[i] = strides[i + 1] * dims[i + 1];
}

static int add_tensor(builder *bd, const char *name, cg_dtype dt, const int64_t dims[4],
                      const int64_t strides[4], bool is_virtual, bool by_value, cg_role role,
                      int64_t uid)
{
    cg_graph *g = bd->g;
    if (bd->st != FATTN_OK)
        return 0;
    if (g->nt >= CG_MAX_TENSORS) {
        bd->st = fattn_error(FATTN_E_INTERNAL, "cuDNN graph: more than %d tensors",
                             CG_MAX_TENSORS);
        return 0;
    }
    cg_tensor *t = &g->t[g->nt];
    memset(t, 0, sizeof *t);
    t->uid = uid >= 0 ? uid : g->next_uid++;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    int64_t cs[4];
    if (!strides) {
        contiguous(dims, cs);
        strides = cs;
    }
    for (int i = 0; i < 4; i++)
        t->dims[i] = dims[i], t->strides[i] = strides[i];
    t->is_virtual = is_virtual;
    t->by_value = by_value;
    t->ragged = -1;
    t->role = role;
    return g->nt++;
}

static int virt(builder *bd, const char *name, cg_dtype dt, const int64_t dims[4])
{
    return add_tensor(bd, name, dt, dims, NULL, true, false, CG_ROLE_NONE, -1);
}

static const int64_t one4[4] = {1, 1, 1, 1};

static int scalar_f(builder *bd, const char *name, float v, int64_t uid)
{
    int i = add_tensor(bd, name, CG_F32, one4, one4, false, true, CG_ROLE_NONE, uid);
    if (bd->st == FATTN_OK)
        bd->g->t[i].value.f = v;
    return i;
}

static int scalar_i(builder *bd, const char *name, int32_t v)
{
    int i = add_tensor(bd, name, CG_I32, one4, one4, false, true, CG_ROLE_NONE, -1);
    if (bd->st == FATTN_OK)
        bd->g->t[i].value.i = v;
    return i;
}

static cg_op *add_op(builder *bd, cg_op_kind kind, const char *name)
{
    cg_graph *g = bd->g;
    if (bd->st != FATTN_OK)
        return NULL;
    if (g->nops >= CG_MAX_OPS) {
        bd->st = fattn_error(FATTN_E_INTERNAL, "cuDNN graph: more than %d ops", CG_MAX_OPS);
        return NULL;
    }
    cg_op *o = &g->ops[g->nops++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    snprintf(o->name, sizeof o->name, "%s", name);
    o->math = CG_F32;
    o->axis = -1;
    o->in[0] = o->in[1] = o->in[2] = -1;
    o->out = -1;
    o->m_override = o->n_override = o->k_override = -1;
    for (int i = 0; i < CG_SDPA_N; i++)
        o->sdpa[i] = -1;
    return o;
}

/* Pointwise op into a given output. */
static void pw_into(builder *bd, const char *name, cg_pw_mode mode, cg_dtype math, int64_t axis,
                    int x, int b, int t, int out)
{
    cg_op *o = add_op(bd, CG_OP_POINTWISE, name);
    if (!o)
        return;
    o->mode = mode;
    o->math = math;
    o->axis = axis;
    o->in[0] = x, o->in[1] = b, o->in[2] = t;
    o->out = out;
}

/* Pointwise op with a new virtual output: dims broadcast over x and b. */
static int pw(builder *bd, const char *name, cg_pw_mode mode, cg_dtype math, int64_t axis,
              int x, int b, int t, cg_dtype out_dt)
{
    if (bd->st != FATTN_OK)
        return 0;
    int64_t dims[4];
    for (int i = 0; i < 4; i++) {
        dims[i] = bd->g->t[x].dims[i];
        if (b >= 0 && bd->g->t[b].dims[i] > dims[i])
            dims[i] = bd->g->t[b].dims[i];
    }
    int out = virt(bd, name, out_dt, dims);
    pw_into(bd, name, mode, math, axis, x, b, t, out);
    return out;
}

static void red_into(builder *bd, const char *name, cg_red_mode mode, int x, int out)
{
    cg_op *o = add_op(bd, CG_OP_REDUCTION, name);
    if (!o)
        return;
    o->mode = mode;
    o->in[0] = x;
    o->out = out;
}

static int ragged_tensor(builder *bd, const char *name, cg_dtype dt, int64_t b, cg_role role,
                         int64_t uid)
{
    int64_t dims[4] = {b + 1, 1, 1, 1};
    return add_tensor(bd, name, dt, dims, one4, false, false, role, uid);
}

static fattn_status build_native(builder *bd, const cg_fwd_desc *d)
{
    cg_graph *g = bd->g;
    g->route = CG_ROUTE_NATIVE;
    int q = add_tensor(bd, "Q", d->io, d->q_dims, d->q_strides, false, false, CG_ROLE_Q, CG_UID_Q);
    int k = add_tensor(bd, "K", d->io, d->k_dims, d->k_strides, false, false, CG_ROLE_K, CG_UID_K);
    int v = add_tensor(bd, "V", d->io, d->v_dims, d->v_strides, false, false, CG_ROLE_V, CG_UID_V);
    int scale = scalar_f(bd, "Attn_scale", d->attn_scale, CG_UID_SCALE);
    int o = add_tensor(bd, "O", d->io, d->o_dims, d->o_strides, false, false, CG_ROLE_O, CG_UID_O);
    int stats = -1;
    if (d->stats_output) {
        int64_t r4[4] = {d->b, d->hq, d->sq, 1};
        stats = add_tensor(bd, "Stats", CG_F32, r4, NULL, false, false, CG_ROLE_STATS,
                           CG_UID_STATS);
    }
    cg_op *op = add_op(bd, CG_OP_SDPA_FWD, "sdpa_fwd");
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
static int score_modifiers(builder *bd, const cg_fwd_desc *d, int s, int seq_q, int seq_kv)
{
    const int64_t hq = d->hq;
    if (d->bias) {
        int bias = add_tensor(bd, "Bias", d->io, d->bias_dims, d->bias_strides, false, false,
                              CG_ROLE_BIAS, CG_UID_BIAS);
        s = pw(bd, "bias_add", CG_PW_ADD, CG_F32, -1, s, bias, -1, CG_F32);
    }
    if (d->alibi) {
        int row = pw(bd, "gen_row_idx_alibi", CG_PW_GEN_INDEX, CG_I32, 2, s, -1, -1, CG_I32);
        int col = pw(bd, "gen_col_idx_alibi", CG_PW_GEN_INDEX, CG_I32, 3, s, -1, -1, CG_I32);
        int sub = pw(bd, "sub_col_row_alibi", CG_PW_SUB, CG_I32, -1, col, row, -1, CG_I32);
        int64_t sd[4] = {1, hq, 1, 1}, ss[4] = {hq, 1, 1, 1};
        int slopes = add_tensor(bd, "alibi_slopes", CG_F32, sd, ss, false, false, CG_ROLE_ALIBI,
                                CG_UID_ALIBI);
        int m = pw(bd, "mul_slope_alibi", CG_PW_MUL, CG_F32, -1, sub, slopes, -1, CG_F32);
        s = pw(bd, "add_alibi", CG_PW_ADD, CG_F32, -1, s, m, -1, CG_F32);
    }
    if (d->padding) {
        int row = pw(bd, "gen_row_idx_padding", CG_PW_GEN_INDEX, CG_I32, 2, s, -1, -1, CG_I32);
        int col = pw(bd, "gen_col_idx_padding", CG_PW_GEN_INDEX, CG_I32, 3, s, -1, -1, CG_I32);
        int rm = pw(bd, "lt_row_sq_padding", CG_PW_CMP_LT, CG_BOOL, -1, row, seq_q, -1, CG_BOOL);
        int cm = pw(bd, "lt_col_skv_padding", CG_PW_CMP_LT, CG_BOOL, -1, col, seq_kv, -1,
                    CG_BOOL);
        int both = pw(bd, "and_row_col_padding", CG_PW_LOGICAL_AND, CG_BOOL, -1, rm, cm, -1,
                      CG_BOOL);
        int ninf = scalar_f(bd, "neg_inf_padding", -INFINITY, -1);
        s = pw(bd, "select_padding", CG_PW_BINARY_SELECT, CG_F32, -1, s, ninf, both, CG_F32);
    }
    return s;
}

/* The diagonal band (causal / sliding window) on s: the forward applies it
 * to the modified scores, the backward after subtracting Stats. */
static int band_mask(builder *bd, const cg_fwd_desc *d, int s, int seq_q, int seq_kv)
{
    const int64_t sq = d->sq, skv = d->skv;
    if (d->has_left || d->has_right) {
        int ret = s;
        if (d->has_right) {
            int row = pw(bd, "gen_row_index", CG_PW_GEN_INDEX, CG_F32, 2, s, -1, -1, CG_I32);
            int col = pw(bd, "gen_col_index", CG_PW_GEN_INDEX, CG_F32, 3, s, -1, -1, CG_I32);
            if (d->bottom_right) {
                int a = seq_kv >= 0 ? seq_kv : scalar_i(bd, "s_kv", (int32_t)skv);
                row = pw(bd, "row_idx_add_skv", CG_PW_ADD, CG_I32, -1, row, a, -1, CG_I32);
                int c = seq_q >= 0 ? seq_q : scalar_i(bd, "s_q", (int32_t)sq);
                row = pw(bd, "row_idx_add_skv_sub_sq", CG_PW_SUB, CG_I32, -1, row, c, -1, CG_I32);
            }
            if (d->right_bound != 0) {
                int r = scalar_i(bd, "right_bound", (int32_t)d->right_bound);
                row = pw(bd, "row_idx_add_right_bound", CG_PW_ADD, CG_I32, -1, row, r, -1,
                         CG_I32);
            }
            int mask = pw(bd, "row_greater_than_col", CG_PW_CMP_GE, CG_BOOL, -1, row, col, -1,
                          CG_BOOL);
            int ninf = scalar_f(bd, "neg_inf_right", -INFINITY, -1);
            ret = pw(bd, "binary_select", CG_PW_BINARY_SELECT, CG_F32, -1, s, ninf, mask, CG_F32);
        }
        if (d->has_left) {
            bool int_path = d->bottom_right && (seq_q >= 0 || seq_kv >= 0);
            cg_dtype idx = int_path ? CG_I32 : CG_F32;
            int row = pw(bd, "gen_row_index", CG_PW_GEN_INDEX, CG_F32, 2, ret, -1, -1, idx);
            int col = pw(bd, "gen_col_index", CG_PW_GEN_INDEX, CG_F32, 3, ret, -1, -1, idx);
            if (!d->bottom_right) {
                int w = scalar_f(bd, "window", (float)d->left_bound, -1);
                col = pw(bd, "col+window", CG_PW_ADD, CG_F32, 3, col, w, -1, CG_F32);
            } else if (!int_path) {
                int w = scalar_f(bd, "window-skv+sq", (float)(d->left_bound - skv + sq), -1);
                col = pw(bd, "col+window-skv+sq", CG_PW_ADD, CG_F32, 3, col, w, -1, CG_F32);
            } else {
                int w = scalar_i(bd, "window", (int32_t)d->left_bound);
                col = pw(bd, "col+window", CG_PW_ADD, CG_I32, 3, col, w, -1, CG_I32);
                col = pw(bd, "col+window-skv", CG_PW_SUB, CG_I32, -1, col, seq_kv, -1, CG_I32);
                col = pw(bd, "col+window-skv+sq", CG_PW_ADD, CG_I32, -1, col, seq_q, -1, CG_I32);
            }
            int cmp = pw(bd, d->bottom_right ? "col+window-skv+sq>row" : "col+ws>row",
                         CG_PW_CMP_GT, CG_BOOL, -1, col, row, -1, CG_BOOL);
            int ninf = scalar_f(bd, "neg_inf_left", -INFINITY, -1);
            ret = pw(bd, "binary_select", CG_PW_BINARY_SELECT, CG_F32, -1, ret, ninf, cmp,
                     CG_F32);
        }
        s = ret;
    }
    return s;
}

/* The forward's inputs, in the order their descriptors must exist: ragged
 * offsets, Q, K (transposed), V, the per-batch lengths. */
typedef struct fwd_inputs {
    int q, k, v, seq_q, seq_kv;
    int ro, rs; /* ragged offsets of O and Stats, -1 without */
} fwd_inputs;

static fattn_status fwd_add_inputs(builder *bd, const cg_fwd_desc *d, fwd_inputs *x)
{
    cg_graph *g = bd->g;
    const int64_t b = d->b;
    /* Ragged offsets first: a tensor's RAGGED_OFFSET_DESC must exist before it. */
    int rq = -1, rk = -1, rv = -1;
    x->ro = -1, x->rs = -1;
    if (d->ragged_q) {
        rq = ragged_tensor(bd, "ragged_offset_q", d->ragged_dtype, b, CG_ROLE_RAG_Q, CG_UID_RAG_Q);
        x->ro = ragged_tensor(bd, "ragged_offset_o", d->ragged_dtype, b, CG_ROLE_RAG_O, CG_UID_RAG_O);
        x->rs = ragged_tensor(bd, "ragged_offset_stats", d->ragged_dtype, b, CG_ROLE_RAG_STATS,
                           CG_UID_RAG_STATS);
    }
    if (d->ragged_kv) {
        rk = ragged_tensor(bd, "ragged_offset_k", d->ragged_dtype, b, CG_ROLE_RAG_K, CG_UID_RAG_K);
        rv = ragged_tensor(bd, "ragged_offset_v", d->ragged_dtype, b, CG_ROLE_RAG_V, CG_UID_RAG_V);
    }

    int q = x->q = add_tensor(bd, "Q", d->io, d->q_dims, d->q_strides, false, false, CG_ROLE_Q, CG_UID_Q);
    /* K enters bmm1 transposed: [b, hk, d, skv], same memory. */
    int64_t kt_dims[4] = {d->k_dims[0], d->k_dims[1], d->k_dims[3], d->k_dims[2]};
    int64_t kt_strides[4] = {d->k_strides[0], d->k_strides[1], d->k_strides[3], d->k_strides[2]};
    int k = x->k = add_tensor(bd, "K", d->io, kt_dims, kt_strides, false, false, CG_ROLE_K, CG_UID_K);
    int v = x->v = add_tensor(bd, "V", d->io, d->v_dims, d->v_strides, false, false, CG_ROLE_V, CG_UID_V);
    if (bd->st != FATTN_OK)
        return bd->st;
    g->t[q].ragged = rq;
    g->t[k].ragged = rk;
    g->t[v].ragged = rv;

    x->seq_q = -1, x->seq_kv = -1;
    if (d->padding) {
        int64_t bd4[4] = {b, 1, 1, 1};
        x->seq_q = add_tensor(bd, "seq_q", CG_I32, bd4, NULL, false, false, CG_ROLE_SEQ_Q,
                           CG_UID_SEQ_Q);
        x->seq_kv = add_tensor(bd, "seq_kv", CG_I32, bd4, NULL, false, false, CG_ROLE_SEQ_KV,
                            CG_UID_SEQ_KV);
    }

    return bd->st;
}

/* Softmax (F3-F9), with the sink variant: Stats = M + log(sum exp(s - M))
 * written out when the description asks, P = exp(s - M) / sum. Returns P. */
static int fwd_softmax(builder *bd, const cg_fwd_desc *d, int s, int rs)
{
    cg_graph *g = bd->g;
    const int64_t b = d->b, hq = d->hq, sq = d->sq;
    const int64_t r4[4] = {b, hq, sq, 1};
    /* softmax (F3-F9), with the sink variant */
    int sink = -1, m;
    if (d->sink) {
        int64_t sd[4] = {1, hq, 1, 1}, ss[4] = {hq, 1, 1, 1};
        sink = add_tensor(bd, "sink_token", CG_F32, sd, ss, false, false, CG_ROLE_SINK,
                          CG_UID_SINK);
        int smax = virt(bd, "s_max", CG_F32, r4);
        red_into(bd, "Max", CG_RED_MAX, s, smax);
        m = virt(bd, "Max", CG_F32, r4);
        pw_into(bd, "max_sink", CG_PW_MAX, CG_F32, -1, smax, sink, -1, m);
    } else {
        m = virt(bd, "Max", CG_F32, r4);
        red_into(bd, "Max", CG_RED_MAX, s, m);
    }
    int z = pw(bd, "sub_M", CG_PW_SUB, CG_F32, -1, s, m, -1, CG_F32);
    int e = pw(bd, "exp_sub_M", CG_PW_EXP, CG_F32, -1, z, -1, -1, CG_F32);
    int l;
    if (d->sink) {
        int subs = pw(bd, "sub_sink", CG_PW_SUB, CG_F32, -1, sink, m, -1, CG_F32);
        int es = pw(bd, "exp_sink", CG_PW_EXP, CG_F32, -1, subs, -1, -1, CG_F32);
        int tsum = virt(bd, "SumExp_elements", CG_F32, r4);
        red_into(bd, "sum", CG_RED_ADD, e, tsum);
        l = virt(bd, "SumExp", CG_F32, r4);
        pw_into(bd, "add_sink", CG_PW_ADD, CG_F32, -1, tsum, es, -1, l);
    } else {
        l = virt(bd, "SumExp", CG_F32, r4);
        red_into(bd, "sum", CG_RED_ADD, e, l);
    }
    int lnl = pw(bd, "log", CG_PW_LOG, CG_F32, -1, l, -1, -1, CG_F32);
    int stats;
    if (d->stats_output) {
        int64_t st4[4];
        if (d->ragged_q) { /* TE's ragged stats: [t, h] token-major */
            st4[0] = hq * sq, st4[1] = 1, st4[2] = hq, st4[3] = 1;
        } else {
            contiguous(r4, st4);
        }
        stats = add_tensor(bd, "Stats", CG_F32, r4, st4, false, false, CG_ROLE_STATS,
                           CG_UID_STATS);
        if (bd->st == FATTN_OK)
            g->t[stats].ragged = rs;
    } else {
        stats = virt(bd, "Stats", CG_F32, r4);
    }
    pw_into(bd, "add", CG_PW_ADD, CG_F32, -1, m, lnl, -1, stats);
    return pw(bd, "div", CG_PW_DIV, CG_F32, -1, e, l, -1, d->dropout > 0.0f ? CG_F32 : d->io);
}

/* Dropout on P: the Philox keep-mask (written out for the oracle with
 * rng_dump) and the 1/(1-p) scale. Returns the dropped P. */
static int fwd_dropout(builder *bd, const cg_fwd_desc *d, int p)
{
    const int64_t s4[4] = {d->b, d->hq, d->sq, d->skv};
    if (d->dropout > 0.0f) {
        int seed = add_tensor(bd, "Seed", CG_I64, one4, one4, false, false, CG_ROLE_SEED,
                              CG_UID_SEED);
        int off = add_tensor(bd, "Offset", CG_I64, one4, one4, false, false, CG_ROLE_OFFSET,
                             CG_UID_OFFSET);
        int mask;
        if (d->rng_dump) { /* the keep-mask written out, for the oracle */
            int64_t ms[4];
            contiguous(s4, ms);
            mask = add_tensor(bd, "rng", CG_F32, s4, ms, false, false, CG_ROLE_RNG_DUMP,
                              CG_UID_RNG_DUMP);
        } else {
            mask = virt(bd, "rng", CG_F32, s4);
        }
        cg_op *r = add_op(bd, CG_OP_RNG, "rng");
        if (r) {
            r->in[0] = seed, r->in[1] = off, r->out = mask;
            r->bernoulli_p = 1.0 - (double)d->dropout;
        }
        p = pw(bd, "dropout_mask_mul", CG_PW_MUL, CG_F32, -1, p, mask, -1, CG_F32);
        int sc = scalar_f(bd, "dropout_scale", 1.0f / (1.0f - d->dropout), -1);
        p = pw(bd, "dropout_scale", CG_PW_MUL, CG_F32, -1, p, sc, -1, d->io);
    }
    return p;
}

fattn_status cg_build_fwd(cg_graph *g, const cg_fwd_desc *d)
{
    memset(g, 0, sizeof *g);
    g->next_uid = CG_UID_FIRST_INTERNAL;
    builder bd = {g, FATTN_OK};
    if (cg_fwd_is_native(d))
        return build_native(&bd, d);
    g->route = CG_ROUTE_COMPOSITE;
    const int64_t s4[4] = {d->b, d->hq, d->sq, d->skv};

    fwd_inputs x;
    fattn_status st = fwd_add_inputs(&bd, d, &x);
    if (st != FATTN_OK)
        return st;
    int q = x.q, k = x.k, v = x.v, seq_q = x.seq_q, seq_kv = x.seq_kv;

    /* F1 bmm1 */
    int s = virt(&bd, "bmm1", CG_F32, s4);
    cg_op *mm = add_op(&bd, CG_OP_MATMUL, "bmm1");
    if (mm) {
        mm->in[0] = q, mm->in[1] = k, mm->out = s;
        mm->m_override = seq_q;
        mm->n_override = seq_kv;
    }
    /* F2 scale */
    int scale = scalar_f(&bd, "Attn_scale", d->attn_scale, CG_UID_SCALE);
    s = pw(&bd, "attn_scale", CG_PW_MUL, CG_F32, -1, s, scale, -1, CG_F32);

    /* score modifiers: bias, ALiBi, padding, diagonal band */
    s = score_modifiers(&bd, d, s, seq_q, seq_kv);
    s = band_mask(&bd, d, s, seq_q, seq_kv);

    int p = fwd_softmax(&bd, d, s, x.rs);
    p = fwd_dropout(&bd, d, p);

    /* F10 bmm2 */
    int o = add_tensor(&bd, "O", d->io, d->o_dims, d->o_strides, false, false, CG_ROLE_O,
                       CG_UID_O);
    if (bd.st == FATTN_OK)
        g->t[o].ragged = x.ro;
    cg_op *mm2 = add_op(&bd, CG_OP_MATMUL, "bmm2");
    if (mm2) {
        mm2->in[0] = p, mm2->in[1] = v, mm2->out = o;
        mm2->m_override = seq_q;
        mm2->k_override = seq_kv;
    }
    return bd.st;
}

/* ---- backward ------------------------------------------------------------ */

fattn_status cg_bwd_desc_from_params(const fattn_bwd_params *p, cg_bwd_desc *d)
{
    memset(d, 0, sizeof *d);
    const fattn_aux_pack *aux = p->aux;
    fattn_aux_layout l = fattn_aux_layout_bwd(p->bias_type, p->softmax_type);
    if (!aux || aux->n != l.n)
        return fattn_error(FATTN_E_INVALID_ARG, "cuDNN backward: aux pack has %d entries, "
                           "expected %d", aux ? aux->n : 0, l.n);
    /* The forward's description from the same options. */
    fattn_fwd_params fp;
    memset(&fp, 0, sizeof fp);
    fp.q = p->q;
    fp.k = p->k;
    fp.v = p->v;
    fp.o = p->o;
    fp.bias = l.bias >= 0 ? aux->t[l.bias] : fattn_tensor_empty();
    fp.softmax_offset = l.softmax_offset >= 0 ? aux->t[l.softmax_offset] : fattn_tensor_empty();
    fp.cu_seqlens_q = p->cu_seqlens_q;
    fp.cu_seqlens_kv = p->cu_seqlens_kv;
    fp.cu_seqlens_q_padded = p->cu_seqlens_q_padded;
    fp.cu_seqlens_kv_padded = p->cu_seqlens_kv_padded;
    fp.rng_state = aux->t[l.rng_state];
    fp.max_seqlen_q = p->max_seqlen_q;
    fp.max_seqlen_kv = p->max_seqlen_kv;
    fp.is_training = true;
    fp.attn_scale = p->attn_scale;
    fp.dropout = p->dropout;
    fp.qkv_layout = p->qkv_layout;
    fp.o_format = p->o_format;
    fp.bias_type = p->bias_type;
    fp.mask_type = p->mask_type;
    fp.softmax_type = p->softmax_type;
    fp.window_size_left = p->window_size_left;
    fp.window_size_right = p->window_size_right;
    fp.bottom_right_diagonal = p->bottom_right_diagonal;
    fattn_status st = cg_fwd_desc_from_params(&fp, &d->f);
    if (st != FATTN_OK)
        return st;
    d->f.allow_native = false; /* the backward is always composite */
    if (p->dqkv_layout < 0 || p->dqkv_layout >= FATTN_LAYOUT_NOT_SET ||
        fattn_layout_is_paged(p->dqkv_layout))
        return fattn_error(FATTN_E_LAYOUT, "cuDNN backward: dQKV layout not set or paged");
    fattn_qkv_format qf = fattn_layout_q_format(p->qkv_layout);
    fattn_qkv_format kf = fattn_layout_kv_format(p->qkv_layout);
    fattn_qkv_format dqf = fattn_layout_q_format(p->dqkv_layout);
    fattn_qkv_format dkf = fattn_layout_kv_format(p->dqkv_layout);
    if (dqf != qf || dkf != kf || p->do_format != p->o_format)
        return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN backward: dQKV / dO formats must match "
                           "the QKV / O formats");
    const fattn_tensor *grads[] = {&p->d_o, &p->dq, &p->dk, &p->dv};
    for (int i = 0; i < 4; i++)
        if (grads[i]->dtype != p->q.dtype)
            return fattn_error(FATTN_E_DTYPE, "cuDNN backward: dO, dQ, dK, dV must have Q's "
                               "dtype");
    const cg_fwd_desc *f = &d->f;
    if ((st = to_bhsd(&p->d_o, qf, "dO", f->b, f->sq, d->do_dims, d->do_strides)) ||
        (st = to_bhsd(&p->dq, qf, "dQ", f->b, f->sq, d->dq_dims, d->dq_strides)) ||
        (st = to_bhsd(&p->dk, kf, "dK", f->b, f->skv, d->dk_dims, d->dk_strides)) ||
        (st = to_bhsd(&p->dv, kf, "dV", f->b, f->skv, d->dv_dims, d->dv_strides)))
        return st;
    for (int i = 0; i < 4; i++)
        if (d->do_dims[i] != f->o_dims[i] || d->dq_dims[i] != f->q_dims[i] ||
            d->dk_dims[i] != f->k_dims[i] || d->dv_dims[i] != f->v_dims[i])
            return fattn_error(FATTN_E_SHAPE, "cuDNN backward: gradient shapes differ from "
                               "their inputs'");
    if (f->bias && !fattn_tensor_is_empty(&p->d_bias)) {
        const fattn_tensor *db = &p->d_bias;
        if (db->ndim != 4 || db->dtype != p->q.dtype)
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
    d->max_total_q = f->ragged_q ? p->q.shape[0] : 0;
    d->deterministic = p->deterministic;
    return FATTN_OK;
}

int64_t cg_bwd_dsum_bytes(const cg_bwd_desc *d)
{
    if (d->max_total_q > 0) /* TH1, Stats' token stride hq */
        return d->max_total_q * d->f.hq * (int64_t)sizeof(float);
    return d->f.b * d->f.hq * d->f.sq * (int64_t)sizeof(float);
}

/* The frontend forces the direct-dQ ("dP workspace") graph for dBias too. */
static bool bwd_direct_dq(const cg_bwd_desc *d)
{
    return d->deterministic || d->dbias;
}

int64_t cg_bwd_dq_accum_bytes(const cg_bwd_desc *d)
{
    if (bwd_direct_dq(d))
        return 0;
    if (d->max_total_q > 0) /* dQ's strides: tokens times dQ's token stride */
        return d->max_total_q * d->dq_strides[2] * (int64_t)sizeof(float);
    return d->f.b * d->f.hq * d->f.sq * d->f.d * (int64_t)sizeof(float);
}

/* A matmul with optional overrides; out is given. */
static void matmul_into(builder *bd, const char *name, int a, int b, int out, int m_ov, int n_ov,
                        int k_ov)
{
    cg_op *mm = add_op(bd, CG_OP_MATMUL, name);
    if (!mm)
        return;
    mm->in[0] = a, mm->in[1] = b, mm->out = out;
    mm->m_override = m_ov;
    mm->n_override = n_ov;
    mm->k_override = k_ov;
}

static void reshape_into(builder *bd, const char *name, int x, int out)
{
    cg_op *o = add_op(bd, CG_OP_RESHAPE, name);
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
        rq = ragged_tensor(bd, "ragged_offset_q", d->ragged_dtype, b, CG_ROLE_RAG_Q, CG_UID_RAG_Q);
        ro = ragged_tensor(bd, "ragged_offset_o", d->ragged_dtype, b, CG_ROLE_RAG_O, CG_UID_RAG_O);
        rs = ragged_tensor(bd, "ragged_offset_stats", d->ragged_dtype, b, CG_ROLE_RAG_STATS,
                           CG_UID_RAG_STATS);
        rdo = ragged_tensor(bd, "ragged_offset_do", d->ragged_dtype, b, CG_ROLE_RAG_DO,
                            CG_UID_RAG_DO);
        rdq = ragged_tensor(bd, "ragged_offset_dq", d->ragged_dtype, b, CG_ROLE_RAG_DQ,
                            CG_UID_RAG_DQ);
    }
    if (d->ragged_kv) {
        rk = ragged_tensor(bd, "ragged_offset_k", d->ragged_dtype, b, CG_ROLE_RAG_K, CG_UID_RAG_K);
        rv = ragged_tensor(bd, "ragged_offset_v", d->ragged_dtype, b, CG_ROLE_RAG_V, CG_UID_RAG_V);
        rdk = ragged_tensor(bd, "ragged_offset_dk", d->ragged_dtype, b, CG_ROLE_RAG_DK,
                            CG_UID_RAG_DK);
        rdv = ragged_tensor(bd, "ragged_offset_dv", d->ragged_dtype, b, CG_ROLE_RAG_DV,
                            CG_UID_RAG_DV);
    }
    /* inputs: Q, KT, VT, O, dO, Stats */
    int q = add_tensor(bd, "Q", d->io, d->q_dims, d->q_strides, false, false, CG_ROLE_Q, CG_UID_Q);
    int64_t kt_dims[4] = {d->k_dims[0], d->k_dims[1], d->k_dims[3], d->k_dims[2]};
    int64_t kt_strides[4] = {d->k_strides[0], d->k_strides[1], d->k_strides[3], d->k_strides[2]};
    int k = add_tensor(bd, "K", d->io, kt_dims, kt_strides, false, false, CG_ROLE_K, CG_UID_K);
    int64_t vt_dims[4] = {d->v_dims[0], d->v_dims[1], d->v_dims[3], d->v_dims[2]};
    int64_t vt_strides[4] = {d->v_strides[0], d->v_strides[1], d->v_strides[3], d->v_strides[2]};
    int v = add_tensor(bd, "V", d->io, vt_dims, vt_strides, false, false, CG_ROLE_V, CG_UID_V);
    int o = add_tensor(bd, "O", d->io, d->o_dims, d->o_strides, false, false, CG_ROLE_O, CG_UID_O);
    int dO = add_tensor(bd, "dO", d->io, bdsc->do_dims, bdsc->do_strides, false, false,
                        CG_ROLE_DO, CG_UID_DO);
    int64_t st4[4];
    if (d->ragged_q) {
        st4[0] = hq * sq, st4[1] = 1, st4[2] = hq, st4[3] = 1;
    } else {
        contiguous(r4, st4);
    }
    int stats = add_tensor(bd, "Stats", CG_F32, r4, st4, false, false, CG_ROLE_STATS,
                           CG_UID_STATS);
    int dq = add_tensor(bd, "dQ", d->io, bdsc->dq_dims, bdsc->dq_strides, false, false,
                        CG_ROLE_DQ, CG_UID_DQ);
    int dk = add_tensor(bd, "dK", d->io, bdsc->dk_dims, bdsc->dk_strides, false, false,
                        CG_ROLE_DK, CG_UID_DK);
    int dvt = add_tensor(bd, "dV", d->io, bdsc->dv_dims, bdsc->dv_strides, false, false,
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
        seq_q = add_tensor(bd, "seq_q", CG_I32, bd4, NULL, false, false, CG_ROLE_SEQ_Q,
                           CG_UID_SEQ_Q);
        seq_kv = add_tensor(bd, "seq_kv", CG_I32, bd4, NULL, false, false, CG_ROLE_SEQ_KV,
                            CG_UID_SEQ_KV);
    }
    int scale = scalar_f(bd, "Attn_scale", d->attn_scale, CG_UID_SCALE);
    bool dropout = d->dropout > 0.0f;
    int drop_scale = -1, drop_scale_inv = -1, one = -1;
    if (dropout) {
        drop_scale = scalar_f(bd, "Dropout_scale", 1.0f / (1.0f - d->dropout), -1);
        drop_scale_inv = scalar_f(bd, "Dropout_scale_inv", 1.0f - d->dropout, -1);
    } else {
        one = scalar_f(bd, "one", 1.0f, -1);
    }

    /* RNG: the forward's mask, regenerated from the saved rng_state */
    int mask = -1;
    if (dropout) {
        int seed = add_tensor(bd, "Seed", CG_I64, one4, one4, false, false, CG_ROLE_SEED,
                              CG_UID_SEED);
        int off = add_tensor(bd, "Offset", CG_I64, one4, one4, false, false, CG_ROLE_OFFSET,
                             CG_UID_OFFSET);
        mask = virt(bd, "rng", CG_F32, s4);
        cg_op *r = add_op(bd, CG_OP_RNG, "rng");
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
    int t0 = add_tensor(bd, "mul_dO_O", CG_F32, t0_dims, t0_str, true, false, CG_ROLE_NONE, -1);
    pw_into(bd, "mul_dO_O", CG_PW_MUL, CG_F32, -1, dO, o, -1, t0);
    int t1 = add_tensor(bd, "reduce_dO_o", CG_F32, r4, r4s, true, false, CG_ROLE_NONE, -1);
    red_into(bd, "reduce_dO_o", CG_RED_ADD, t0, t1);
    if (bdsc->dsink) {
        int64_t sd[4] = {1, hq, 1, 1}, ss[4] = {hq, 1, 1, 1};
        int sink = add_tensor(bd, "sink_token", CG_F32, sd, ss, false, false, CG_ROLE_SINK,
                              CG_UID_SINK);
        int dsink = add_tensor(bd, "dsink_token", CG_F32, sd, ss, false, false, CG_ROLE_DSINK,
                               CG_UID_DSINK);
        int ss_ = pw(bd, "sub_sink", CG_PW_SUB, CG_F32, -1, sink, stats, -1, CG_F32);
        int es = pw(bd, "exp_sink", CG_PW_EXP, CG_F32, -1, ss_, -1, -1, CG_F32);
        int pt = pw(bd, "mul_exp_sink_last_output", CG_PW_MUL, CG_F32, -1, es, t1, -1, CG_F32);
        red_into(bd, "reduce_per_token_grad", CG_RED_ADD, pt, dsink);
    }
    int dsum = add_tensor(bd, "softmax_sum", CG_F32, r4, bdsc->max_total_q > 0 ? x->st4 : r4s,
                          false, false, CG_ROLE_DSUM, CG_UID_DSUM);
    if (bd->st == FATTN_OK && bdsc->max_total_q > 0)
        g->t[dsum].ragged = x->rs;
    pw_into(bd, "scale_dropout_inv", CG_PW_MUL, CG_F32, -1, t1, dropout ? x->drop_scale_inv : x->one,
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
    int s = virt(bd, "matmul_Q_KT", CG_F32, s4);
    matmul_into(bd, "matmul_Q_KT", q, k, s, seq_q, seq_kv, -1);
    s = pw(bd, "mul_s_attn_scale", CG_PW_MUL, CG_F32, -1, s, scale, -1, CG_F32);
    s = score_modifiers(bd, d, s, seq_q, seq_kv);
    s = pw(bd, "sub_s_m", CG_PW_SUB, CG_F32, -1, s, stats, -1, CG_F32);
    s = band_mask(bd, d, s, seq_q, seq_kv);
    int p_ = pw(bd, "exp_s", CG_PW_EXP, CG_F32, -1, s, -1, -1, CG_F32);
    int pd = p_;
    if (dropout) {
        pd = pw(bd, "mul_p_dropout_mask", CG_PW_MUL, CG_F32, -1, pd, mask, -1, CG_F32);
        pd = pw(bd, "mul_p_dropout_scale", CG_PW_MUL, CG_F32, -1, pd, drop_scale, -1, CG_F32);
    }
    /* B8-B9: dV */
    int64_t pt_dims[4] = {b, hq, skv, sq};
    int pT = add_tensor(bd, "reshape_p", d->io, pt_dims, st_s4t, true, false, CG_ROLE_NONE, -1);
    reshape_into(bd, "reshape_p", pd, pT);
    if (hq == d->hv) {
        matmul_into(bd, "matmul_pT_dO", pT, dO, dvt, seq_kv, -1, seq_q);
    } else {
        int64_t fh[4] = {b, hq, skv, dv};
        int full = virt(bd, "matmul_pT_dO", d->io, fh);
        matmul_into(bd, "matmul_pT_dO", pT, dO, full, seq_kv, -1, seq_q);
        red_into(bd, "red_dV_head", CG_RED_ADD, full, dvt);
    }
    /* B10-B13: dS */
    int dp = virt(bd, "matmul_dO_VT", CG_F32, s4);
    matmul_into(bd, "matmul_dO_VT", dO, v, dp, seq_q, seq_kv, -1);
    if (dropout)
        dp = pw(bd, "dP_dropout_mask", CG_PW_MUL, CG_F32, -1, dp, mask, -1, CG_F32);
    int t2 = pw(bd, "sub_dP_softmax_sum", CG_PW_SUB, CG_F32, -1, dp, dsum, -1, CG_F32);
    int t3 = pw(bd, "mul_dP_exp_s", CG_PW_MUL, CG_F32, -1, t2, p_, -1, CG_F32);
    if (dropout)
        t3 = pw(bd, "mul_dS_dropout_scale", CG_PW_MUL, CG_F32, -1, t3, drop_scale, -1, CG_F32);
    if (bdsc->dbias) {
        int db = add_tensor(bd, "dBias", d->io, bdsc->dbias_dims, bdsc->dbias_strides, false,
                            false, CG_ROLE_DBIAS, CG_UID_DBIAS);
        red_into(bd, "red_dP_dBias", CG_RED_ADD, t3, db);
    }
    int ds = pw(bd, "mul_dS_attn_scale", CG_PW_MUL, CG_F32, -1, t3, scale, -1, CG_F32);
    /* B14-B15: dK */
    int dsT = add_tensor(bd, "reshape_dS", d->io, pt_dims, st_s4t, true, false, CG_ROLE_NONE,
                         -1);
    reshape_into(bd, "reshape_dS", ds, dsT);
    if (hq == d->hk) {
        matmul_into(bd, "matmul_dST_Q", dsT, q, dk, seq_kv, -1, seq_q);
    } else {
        int64_t fh[4] = {b, hq, skv, dqk};
        int full = virt(bd, "matmul_dST_Q", d->io, fh);
        matmul_into(bd, "matmul_dST_Q", dsT, q, full, seq_kv, -1, seq_q);
        red_into(bd, "red_dK_head", CG_RED_ADD, full, dk);
    }
    /* B16-B18: dQ */
    int kv = add_tensor(bd, "reshape_k", CG_F32, d->k_dims, d->k_strides, true, false,
                        CG_ROLE_NONE, -1);
    if (bd->st == FATTN_OK)
        g->t[kv].ragged = x->rk;
    reshape_into(bd, "reshape_k", k, kv);
    if (!bwd_direct_dq(bdsc)) {
        int64_t qa[4] = {b, hq, sq, dqk};
        int acc = add_tensor(bd, "dQ_accum", CG_F32, qa,
                             bdsc->max_total_q > 0 ? bdsc->dq_strides : NULL, false, false,
                             CG_ROLE_DQ_ACCUM, CG_UID_DQ_ACCUM);
        if (bd->st == FATTN_OK && bdsc->max_total_q > 0)
            g->t[acc].ragged = x->rdq;
        matmul_into(bd, "matmul_dS_K", ds, kv, acc, seq_q, -1, seq_kv);
        pw_into(bd, "identity_dQ", CG_PW_IDENTITY, CG_F32, -1, acc, -1, -1, dq);
    } else {
        matmul_into(bd, "matmul_dS_K", ds, kv, dq, seq_q, -1, seq_kv);
    }
    return bd->st;
}


fattn_status cg_build_bwd(cg_graph *g, const cg_bwd_desc *bdsc)
{
    memset(g, 0, sizeof *g);
    g->next_uid = CG_UID_FIRST_INTERNAL;
    g->route = CG_ROUTE_COMPOSITE;
    builder bd = {g, FATTN_OK};
    bwd_inputs x;
    fattn_status st = bwd_add_inputs(&bd, bdsc, &x);
    if (st != FATTN_OK)
        return st;
    int dsum = bwd_dsum(&bd, bdsc, &x);
    return bwd_grads(&bd, bdsc, &x, dsum);
}

/* ---- dump ----------------------------------------------------------------- */

static long long uid_of(const cg_graph *g, int i)
{
    return i >= 0 ? (long long)g->t[i].uid : -1LL;
}

char *cg_dump(const cg_graph *g, bool with_values)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fprintf(f, "route %s\n", g->route == CG_ROUTE_NATIVE ? "native" : "composite");
    for (int i = 0; i < g->nt; i++) {
        const cg_tensor *t = &g->t[i];
        fprintf(f, "T uid=%lld name=%s dtype=%s dims=[%lld,%lld,%lld,%lld] "
                   "strides=[%lld,%lld,%lld,%lld] virtual=%d by_value=%d ragged=%lld role=%s",
                (long long)t->uid, t->name, cg_dtype_name(t->dtype), (long long)t->dims[0],
                (long long)t->dims[1], (long long)t->dims[2], (long long)t->dims[3],
                (long long)t->strides[0], (long long)t->strides[1], (long long)t->strides[2],
                (long long)t->strides[3], t->is_virtual, t->by_value, uid_of(g, t->ragged),
                cg_role_name(t->role));
        if (with_values && t->by_value) {
            if (t->dtype == CG_F32)
                fprintf(f, " value=%a", (double)t->value.f);
            else
                fprintf(f, " value=%d", (int)t->value.i);
        }
        fputc('\n', f);
    }
    for (int i = 0; i < g->nops; i++) {
        const cg_op *o = &g->ops[i];
        fprintf(f, "OP %d %s name=%s", i, cg_op_kind_name(o->kind), o->name);
        switch (o->kind) {
        case CG_OP_POINTWISE:
            fprintf(f, " mode=%s math=%s", cg_pw_mode_name((cg_pw_mode)o->mode),
                    cg_dtype_name(o->math));
            if (o->axis >= 0)
                fprintf(f, " axis=%lld", (long long)o->axis);
            fprintf(f, " x=%lld b=%lld t=%lld y=%lld", uid_of(g, o->in[0]), uid_of(g, o->in[1]),
                    uid_of(g, o->in[2]), uid_of(g, o->out));
            break;
        case CG_OP_REDUCTION:
            fprintf(f, " mode=%s comp=%s x=%lld y=%lld", cg_red_mode_name((cg_red_mode)o->mode),
                    cg_dtype_name(o->math), uid_of(g, o->in[0]), uid_of(g, o->out));
            break;
        case CG_OP_MATMUL:
            fprintf(f, " comp=%s a=%lld b=%lld c=%lld m_override=%lld n_override=%lld "
                       "k_override=%lld", cg_dtype_name(o->math), uid_of(g, o->in[0]),
                    uid_of(g, o->in[1]), uid_of(g, o->out), uid_of(g, o->m_override),
                    uid_of(g, o->n_override), uid_of(g, o->k_override));
            break;
        case CG_OP_RNG:
            fprintf(f, " dist=BERNOULLI p=%.17g seed=%lld offset=%lld y=%lld", o->bernoulli_p,
                    uid_of(g, o->in[0]), uid_of(g, o->in[1]), uid_of(g, o->out));
            break;
        case CG_OP_RESHAPE:
            fprintf(f, " x=%lld y=%lld", uid_of(g, o->in[0]), uid_of(g, o->out));
            break;
        case CG_OP_SDPA_FWD:
            fprintf(f, " q=%lld k=%lld v=%lld o=%lld stats=%lld scale=%lld",
                    uid_of(g, o->sdpa[CG_SDPA_Q]), uid_of(g, o->sdpa[CG_SDPA_K]),
                    uid_of(g, o->sdpa[CG_SDPA_V]), uid_of(g, o->sdpa[CG_SDPA_O]),
                    uid_of(g, o->sdpa[CG_SDPA_STATS]), uid_of(g, o->sdpa[CG_SDPA_SCALE]));
            break;
        }
        fputc('\n', f);
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
