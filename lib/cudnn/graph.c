/* The cuDNN engine's graph description: built from fattn_fwd_params in plain
 * C, no CUDA (graph.h). The op sequence follows cudnn-frontend 1.18's
 * CompositeSDPANode::expand_node, its score modifiers
 * (utils/attn_score_modifiers.h) and its Softmax node, for the options
 * TransformerEngine's F16 arbitrary-seqlen forward sets. Facts only; no
 * code was copied (docs/cudnn-engine.md lists what is mirrored).
 *
 * graph.c      names, the builder's primitives, the score modifiers both
 *              directions share, the text dump
 * graph_fwd.c  the forward description and graph
 * graph_bwd.c  the backward description and graph */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn/graph_build.h"
#include "fattn/te.h"

/* ---- names ---------------------------------------------------------------- */

const char *fattn__cg_dtype_name(cg_dtype t)
{
    static const char *const n[] = {"f32", "f16", "bf16", "i32", "i64", "bool", "e4m3", "e5m2"};
    _Static_assert(sizeof n / sizeof n[0] == CG_FP8_E5M2 + 1, "a name per dtype");
    return (unsigned)t < sizeof n / sizeof n[0] ? n[t] : "?";
}

const char *fattn__cg_pw_mode_name(cg_pw_mode m)
{
    static const char *const n[] = {"ADD",    "SUB",    "MUL",    "DIV",         "MAX",
                                    "EXP",    "LOG",    "IDENTITY", "CMP_GE",    "CMP_GT",
                                    "CMP_LT", "LOGICAL_AND", "BINARY_SELECT", "GEN_INDEX"};
    _Static_assert(sizeof n / sizeof n[0] == CG_PW_GEN_INDEX + 1, "a name per pointwise mode");
    return (unsigned)m < sizeof n / sizeof n[0] ? n[m] : "?";
}

const char *fattn__cg_red_mode_name(cg_red_mode m)
{
    return m == CG_RED_MAX ? "MAX" : m == CG_RED_ADD ? "ADD" : m == CG_RED_AMAX ? "AMAX" : "?";
}

const char *fattn__cg_op_kind_name(cg_op_kind k)
{
    static const char *const n[] = {"MATMUL", "POINTWISE", "REDUCTION", "RNG", "SDPA_FWD",
                                    "RESHAPE",  "SDPA_BWD", "SOFTMAX",
                                    "PAGED_CACHE_LOAD"};
    _Static_assert(sizeof n / sizeof n[0] == CG_OP_PAGED_LOAD + 1, "a name per op kind");
    return (unsigned)k < sizeof n / sizeof n[0] ? n[k] : "?";
}

const char *fattn__cg_role_name(cg_role r)
{
    static const char *const n[] = {"-",     "q",     "k",      "v",       "o",     "stats",
                                    "bias",  "sink",  "alibi",  "seq_q",   "seq_kv", "rag_q",
                                    "rag_k", "rag_v", "rag_o",  "rag_stats", "seed", "offset",
                                    "do",    "dq",    "dk",     "dv",      "dbias", "dsink",
                                    "dsum",  "dq_accum", "rag_do", "rag_dq", "rag_dk", "rag_dv",
                                    "rng_dump", "max", "descale_q", "descale_k", "descale_v",
                                    "descale_s", "descale_o", "descale_do", "descale_dp",
                                    "scale_s", "scale_o", "scale_dp", "scale_dq", "scale_dk",
                                    "scale_dv", "amax_s", "amax_o", "amax_dp", "amax_dq",
                                    "amax_dk", "amax_dv", "page_table_k", "page_table_v"};
    _Static_assert(sizeof n / sizeof n[0] == CG_ROLE_COUNT, "a name per role");
    return (unsigned)r < sizeof n / sizeof n[0] ? n[r] : "?";
}

int fattn__cg_find_uid(const cg_graph *g, int64_t uid)
{
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].uid == uid)
            return i;
    return -1;
}

/* ---- parameters -> description -------------------------------------------- */

/* A 4-D (or THD 3-D) view in cuDNN's [b, h, s, d] order. */
fattn_status fattn__cgb_to_bhsd(const fattn_tensor *t, fattn_qkv_format f, const char *name,
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

/* ---- building ------------------------------------------------------------- */


void fattn__cgb_contiguous(const int64_t dims[4], int64_t strides[4])
{
    strides[3] = 1;
    for (int i = 2; i >= 0; i--)
        strides[i] = strides[i + 1] * dims[i + 1];
}

int fattn__cgb_add_tensor(builder *bd, const char *name, cg_dtype dt, const int64_t dims[4],
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
    assert(g->nt >= 0 && g->nt < CG_MAX_TENSORS);
    cg_tensor *t = &g->t[g->nt];
    memset(t, 0, sizeof *t);
    t->uid = uid >= 0 ? uid : g->next_uid++;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    int64_t cs[4];
    if (!strides) {
        fattn__cgb_contiguous(dims, cs);
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

int fattn__cgb_virt(builder *bd, const char *name, cg_dtype dt, const int64_t dims[4])
{
    return fattn__cgb_add_tensor(bd, name, dt, dims, NULL, true, false, CG_ROLE_NONE, -1);
}

const int64_t fattn__cgb_one4[4] = {1, 1, 1, 1};

int fattn__cgb_scalar_f(builder *bd, const char *name, float v, int64_t uid)
{
    int i = fattn__cgb_add_tensor(bd, name, CG_F32, fattn__cgb_one4, fattn__cgb_one4, false, true, CG_ROLE_NONE, uid);
    if (bd->st == FATTN_OK)
        bd->g->t[i].value.f = v;
    return i;
}

int fattn__cgb_scalar_i(builder *bd, const char *name, int32_t v)
{
    int i = fattn__cgb_add_tensor(bd, name, CG_I32, fattn__cgb_one4, fattn__cgb_one4, false, true, CG_ROLE_NONE, -1);
    if (bd->st == FATTN_OK)
        bd->g->t[i].value.i = v;
    return i;
}

cg_op *fattn__cgb_add_op(builder *bd, cg_op_kind kind, const char *name)
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
void fattn__cgb_pw_into(builder *bd, const char *name, cg_pw_mode mode, cg_dtype math, int64_t axis,
                 int x, int b, int t, int out)
{
    cg_op *o = fattn__cgb_add_op(bd, CG_OP_POINTWISE, name);
    if (!o)
        return;
    /* every index names a tensor already added (-1: no such input) */
    assert(x >= 0 && x < bd->g->nt && b < bd->g->nt && t < bd->g->nt);
    assert(out >= 0 && out < bd->g->nt);
    o->mode = mode;
    o->math = math;
    o->axis = axis;
    o->in[0] = x, o->in[1] = b, o->in[2] = t;
    o->out = out;
}

/* Pointwise op with a new virtual output: dims broadcast over x and b. */
int fattn__cgb_pw(builder *bd, const char *name, cg_pw_mode mode, cg_dtype math, int64_t axis,
           int x, int b, int t, cg_dtype out_dt)
{
    if (bd->st != FATTN_OK)
        return 0;
    assert(x >= 0 && x < bd->g->nt && b < bd->g->nt);
    int64_t dims[4];
    for (int i = 0; i < 4; i++) {
        dims[i] = bd->g->t[x].dims[i];
        if (b >= 0 && bd->g->t[b].dims[i] > dims[i])
            dims[i] = bd->g->t[b].dims[i];
    }
    int out = fattn__cgb_virt(bd, name, out_dt, dims);
    fattn__cgb_pw_into(bd, name, mode, math, axis, x, b, t, out);
    return out;
}

void fattn__cgb_red_into(builder *bd, const char *name, cg_red_mode mode, int x, int out)
{
    cg_op *o = fattn__cgb_add_op(bd, CG_OP_REDUCTION, name);
    if (!o)
        return;
    assert(x >= 0 && x < bd->g->nt && out >= 0 && out < bd->g->nt);
    o->mode = mode;
    o->in[0] = x;
    o->out = out;
}

int fattn__cgb_ragged_tensor(builder *bd, const char *name, cg_dtype dt, int64_t b, cg_role role,
                      int64_t uid)
{
    int64_t dims[4] = {b + 1, 1, 1, 1};
    return fattn__cgb_add_tensor(bd, name, dt, dims, fattn__cgb_one4, false, false, role, uid);
}

int fattn__cgb_score_modifiers(builder *bd, const cg_fwd_desc *d, int s, int seq_q, int seq_kv)
{
    const int64_t hq = d->hq;
    if (d->bias) {
        int bias = fattn__cgb_add_tensor(bd, "Bias", d->io, d->bias_dims, d->bias_strides, false, false,
                                  CG_ROLE_BIAS, CG_UID_BIAS);
        s = fattn__cgb_pw(bd, "bias_add", CG_PW_ADD, CG_F32, -1, s, bias, -1, CG_F32);
    }
    if (d->alibi) {
        int row = fattn__cgb_pw(bd, "gen_row_idx_alibi", CG_PW_GEN_INDEX, CG_I32, 2, s, -1, -1, CG_I32);
        int col = fattn__cgb_pw(bd, "gen_col_idx_alibi", CG_PW_GEN_INDEX, CG_I32, 3, s, -1, -1, CG_I32);
        int sub = fattn__cgb_pw(bd, "sub_col_row_alibi", CG_PW_SUB, CG_I32, -1, col, row, -1, CG_I32);
        int64_t sd[4] = {1, hq, 1, 1}, ss[4] = {hq, 1, 1, 1};
        int slopes = fattn__cgb_add_tensor(bd, "alibi_slopes", CG_F32, sd, ss, false, false, CG_ROLE_ALIBI,
                                    CG_UID_ALIBI);
        int m = fattn__cgb_pw(bd, "mul_slope_alibi", CG_PW_MUL, CG_F32, -1, sub, slopes, -1, CG_F32);
        s = fattn__cgb_pw(bd, "add_alibi", CG_PW_ADD, CG_F32, -1, s, m, -1, CG_F32);
    }
    if (d->padding) {
        int row = fattn__cgb_pw(bd, "gen_row_idx_padding", CG_PW_GEN_INDEX, CG_I32, 2, s, -1, -1, CG_I32);
        int col = fattn__cgb_pw(bd, "gen_col_idx_padding", CG_PW_GEN_INDEX, CG_I32, 3, s, -1, -1, CG_I32);
        int rm = fattn__cgb_pw(bd, "lt_row_sq_padding", CG_PW_CMP_LT, CG_BOOL, -1, row, seq_q, -1,
                        CG_BOOL);
        int cm = fattn__cgb_pw(bd, "lt_col_skv_padding", CG_PW_CMP_LT, CG_BOOL, -1, col, seq_kv, -1,
                        CG_BOOL);
        int both = fattn__cgb_pw(bd, "and_row_col_padding", CG_PW_LOGICAL_AND, CG_BOOL, -1, rm, cm, -1,
                          CG_BOOL);
        int ninf = fattn__cgb_scalar_f(bd, "neg_inf_padding", -INFINITY, -1);
        s = fattn__cgb_pw(bd, "select_padding", CG_PW_BINARY_SELECT, CG_F32, -1, s, ninf, both, CG_F32);
    }
    return s;
}

/* The diagonal band (causal / sliding window) on s: the forward applies it
 * to the modified scores, the backward after subtracting Stats. */
int fattn__cgb_band_mask(builder *bd, const cg_fwd_desc *d, int s, int seq_q, int seq_kv)
{
    const int64_t sq = d->sq, skv = d->skv;
    if (d->has_left || d->has_right) {
        int ret = s;
        if (d->has_right) {
            int row = fattn__cgb_pw(bd, "gen_row_index", CG_PW_GEN_INDEX, CG_F32, 2, s, -1, -1, CG_I32);
            int col = fattn__cgb_pw(bd, "gen_col_index", CG_PW_GEN_INDEX, CG_F32, 3, s, -1, -1, CG_I32);
            if (d->bottom_right) {
                int a = seq_kv >= 0 ? seq_kv : fattn__cgb_scalar_i(bd, "s_kv", (int32_t)skv);
                row = fattn__cgb_pw(bd, "row_idx_add_skv", CG_PW_ADD, CG_I32, -1, row, a, -1, CG_I32);
                int c = seq_q >= 0 ? seq_q : fattn__cgb_scalar_i(bd, "s_q", (int32_t)sq);
                row = fattn__cgb_pw(bd, "row_idx_add_skv_sub_sq", CG_PW_SUB, CG_I32, -1, row, c, -1,
                             CG_I32);
            }
            if (d->right_bound != 0) {
                int r = fattn__cgb_scalar_i(bd, "right_bound", (int32_t)d->right_bound);
                row = fattn__cgb_pw(bd, "row_idx_add_right_bound", CG_PW_ADD, CG_I32, -1, row, r, -1,
                             CG_I32);
            }
            int mask = fattn__cgb_pw(bd, "row_greater_than_col", CG_PW_CMP_GE, CG_BOOL, -1, row, col, -1,
                              CG_BOOL);
            int ninf = fattn__cgb_scalar_f(bd, "neg_inf_right", -INFINITY, -1);
            ret = fattn__cgb_pw(bd, "binary_select", CG_PW_BINARY_SELECT, CG_F32, -1, s, ninf, mask,
                         CG_F32);
        }
        if (d->has_left) {
            bool int_path = d->bottom_right && (seq_q >= 0 || seq_kv >= 0);
            cg_dtype idx = int_path ? CG_I32 : CG_F32;
            int row = fattn__cgb_pw(bd, "gen_row_index", CG_PW_GEN_INDEX, CG_F32, 2, ret, -1, -1, idx);
            int col = fattn__cgb_pw(bd, "gen_col_index", CG_PW_GEN_INDEX, CG_F32, 3, ret, -1, -1, idx);
            if (!d->bottom_right) {
                int w = fattn__cgb_scalar_f(bd, "window", (float)d->left_bound, -1);
                col = fattn__cgb_pw(bd, "col+window", CG_PW_ADD, CG_F32, 3, col, w, -1, CG_F32);
            } else if (!int_path) {
                int w = fattn__cgb_scalar_f(bd, "window-skv+sq", (float)(d->left_bound - skv + sq), -1);
                col = fattn__cgb_pw(bd, "col+window-skv+sq", CG_PW_ADD, CG_F32, 3, col, w, -1, CG_F32);
            } else {
                int w = fattn__cgb_scalar_i(bd, "window", (int32_t)d->left_bound);
                col = fattn__cgb_pw(bd, "col+window", CG_PW_ADD, CG_I32, 3, col, w, -1, CG_I32);
                col = fattn__cgb_pw(bd, "col+window-skv", CG_PW_SUB, CG_I32, -1, col, seq_kv, -1, CG_I32);
                col = fattn__cgb_pw(bd, "col+window-skv+sq", CG_PW_ADD, CG_I32, -1, col, seq_q, -1,
                             CG_I32);
            }
            int cmp = fattn__cgb_pw(bd, d->bottom_right ? "col+window-skv+sq>row" : "col+ws>row",
                             CG_PW_CMP_GT, CG_BOOL, -1, col, row, -1, CG_BOOL);
            int ninf = fattn__cgb_scalar_f(bd, "neg_inf_left", -INFINITY, -1);
            ret = fattn__cgb_pw(bd, "binary_select", CG_PW_BINARY_SELECT, CG_F32, -1, ret, ninf, cmp,
                         CG_F32);
        }
        s = ret;
    }
    return s;
}

/* ---- dump ----------------------------------------------------------------- */

static long long uid_of(const cg_graph *g, int i)
{
    assert(i < g->nt); /* an index of this graph's tensors, or -1 for none */
    return i >= 0 ? (long long)g->t[i].uid : -1LL;
}

/* The dump is text built in memory: the plan cache's key and the tests'
 * view of a graph, never printed by the library. */
typedef struct dump_buf {
    char *s;
    size_t len, cap;
    bool failed; /* out of memory: the dump is dropped */
} dump_buf;

static void dump_add(dump_buf *d, const char *fmt, ...)
{
    if (d->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = d->cap - d->len;
        int n = vsnprintf(d->s ? d->s + d->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            d->failed = true;
            return;
        }
        if ((size_t)n < room) {
            d->len += (size_t)n;
            return;
        }
        size_t cap = d->cap ? d->cap * 2 : 4096;
        while (cap - d->len <= (size_t)n)
            cap *= 2;
        char *s = realloc(d->s, cap);
        if (!s) {
            d->failed = true;
            return;
        }
        d->s = s;
        d->cap = cap;
    }
}

char *fattn__cg_dump(const cg_graph *g, bool with_values)
{
    dump_buf d = {0};
    dump_add(&d, "route %s\n", g->route == CG_ROUTE_NATIVE ? "native" : "composite");
    if (g->deterministic)
        dump_add(&d, "deterministic\n");
    if (g->pin.on) {
        dump_add(&d, "pin eng%lld", (long long)g->pin.engine);
        for (int i = 0; i < g->pin.n; i++)
            dump_add(&d, "_k%d=%lld", (int)g->pin.type[i], (long long)g->pin.value[i]);
        dump_add(&d, "\n");
    }
    for (int i = 0; i < g->nt; i++) {
        const cg_tensor *t = &g->t[i];
        dump_add(&d, "T uid=%lld name=%s dtype=%s dims=[%lld,%lld,%lld,%lld] "
                   "strides=[%lld,%lld,%lld,%lld] virtual=%d by_value=%d ragged=%lld role=%s",
                (long long)t->uid, t->name, fattn__cg_dtype_name(t->dtype), (long long)t->dims[0],
                (long long)t->dims[1], (long long)t->dims[2], (long long)t->dims[3],
                (long long)t->strides[0], (long long)t->strides[1], (long long)t->strides[2],
                (long long)t->strides[3], t->is_virtual, t->by_value, uid_of(g, t->ragged),
                fattn__cg_role_name(t->role));
        if (with_values && t->by_value) {
            if (t->dtype == CG_F32)
                dump_add(&d, " value=%a", (double)t->value.f);
            else
                dump_add(&d, " value=%d", (int)t->value.i);
        }
        dump_add(&d, "\n");
    }
    for (int i = 0; i < g->nops; i++) {
        const cg_op *o = &g->ops[i];
        dump_add(&d, "OP %d %s name=%s", i, fattn__cg_op_kind_name(o->kind), o->name);
        switch (o->kind) {
        case CG_OP_POINTWISE:
            dump_add(&d, " mode=%s math=%s", fattn__cg_pw_mode_name((cg_pw_mode)o->mode),
                    fattn__cg_dtype_name(o->math));
            if (o->axis >= 0)
                dump_add(&d, " axis=%lld", (long long)o->axis);
            dump_add(&d, " x=%lld b=%lld t=%lld y=%lld", uid_of(g, o->in[0]), uid_of(g, o->in[1]),
                    uid_of(g, o->in[2]), uid_of(g, o->out));
            break;
        case CG_OP_REDUCTION:
            dump_add(&d, " mode=%s comp=%s x=%lld y=%lld", fattn__cg_red_mode_name((cg_red_mode)o->mode),
                    fattn__cg_dtype_name(o->math), uid_of(g, o->in[0]), uid_of(g, o->out));
            break;
        case CG_OP_MATMUL:
            dump_add(&d, " comp=%s a=%lld b=%lld c=%lld m_override=%lld n_override=%lld "
                       "k_override=%lld", fattn__cg_dtype_name(o->math), uid_of(g, o->in[0]),
                    uid_of(g, o->in[1]), uid_of(g, o->out), uid_of(g, o->m_override),
                    uid_of(g, o->n_override), uid_of(g, o->k_override));
            break;
        case CG_OP_RNG:
            dump_add(&d, " dist=BERNOULLI p=%.17g seed=%lld offset=%lld y=%lld", o->bernoulli_p,
                    uid_of(g, o->in[0]), uid_of(g, o->in[1]), uid_of(g, o->out));
            break;
        case CG_OP_RESHAPE:
            dump_add(&d, " x=%lld y=%lld", uid_of(g, o->in[0]), uid_of(g, o->out));
            break;
        case CG_OP_PAGED_LOAD:
            dump_add(&d, " container=%lld sequence=%lld page_table=%lld y=%lld",
                     uid_of(g, o->in[0]), uid_of(g, o->in[1]), uid_of(g, o->in[2]),
                     uid_of(g, o->out));
            break;
        case CG_OP_SDPA_FWD:
            dump_add(&d, " q=%lld k=%lld v=%lld o=%lld stats=%lld scale=%lld",
                    uid_of(g, o->sdpa[CG_SDPA_Q]), uid_of(g, o->sdpa[CG_SDPA_K]),
                    uid_of(g, o->sdpa[CG_SDPA_V]), uid_of(g, o->sdpa[CG_SDPA_O]),
                    uid_of(g, o->sdpa[CG_SDPA_STATS]), uid_of(g, o->sdpa[CG_SDPA_SCALE]));
            break;
        case CG_OP_SOFTMAX:
            dump_add(&d, " x=%lld sink=%lld y=%lld stats=%lld max=%lld", uid_of(g, o->in[0]),
                     uid_of(g, o->in[1]), uid_of(g, o->out), uid_of(g, o->sdpa[CG_SDPA_STATS]),
                     uid_of(g, o->sdpa[CG_SDPA_MAX]));
            break;
        case CG_OP_SDPA_BWD:
            dump_add(&d, " q=%lld k=%lld v=%lld o=%lld stats=%lld scale=%lld do=%lld dq=%lld "
                    "dk=%lld dv=%lld", uid_of(g, o->sdpa[CG_SDPA_Q]),
                    uid_of(g, o->sdpa[CG_SDPA_K]), uid_of(g, o->sdpa[CG_SDPA_V]),
                    uid_of(g, o->sdpa[CG_SDPA_O]), uid_of(g, o->sdpa[CG_SDPA_STATS]),
                    uid_of(g, o->sdpa[CG_SDPA_SCALE]), uid_of(g, o->sdpa[CG_SDPA_DO]),
                    uid_of(g, o->sdpa[CG_SDPA_DQ]), uid_of(g, o->sdpa[CG_SDPA_DK]),
                    uid_of(g, o->sdpa[CG_SDPA_DV]));
            break;
        }
        dump_add(&d, "\n");
    }
    if (d.failed) {
        free(d.s);
        return NULL;
    }
    return d.s;
}
