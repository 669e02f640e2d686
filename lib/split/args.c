/* The split front end's data (fattn/split.h): slot and source names, the
 * args structs' initial values and required fields, the to-save slots and
 * their dedup, the owners' free functions, the offload reload layout; and
 * the engine calls and outputs split.c (the f16 path) and fp8.c (the FP8
 * branch) share, so that both depend on this file and not on each other:
 * poisoned outputs, packed dQKV, fused_attn_fwd's f16 call, fused_attn_bwd's
 * f16 arguments. TE's three helpers themselves are in split.c.
 *
 * TE lines cited as backends.py:N are TE 2.20.2's
 * transformer_engine/pytorch/attention/dot_product_attention/backends.py.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/split_types.h"
#include "internal.h"

/* ------------------------------------------------------------------------ */
/* Names, init                                                              */
/* ------------------------------------------------------------------------ */

static const char *const slot_names[FATTN_SPLIT_NSLOTS] = {
#define SP_SLOT_NAME(suffix, name) [FATTN_SPLIT_SLOT_##suffix] = #name,
    FATTN_SPLIT_SLOTS(SP_SLOT_NAME)
#undef SP_SLOT_NAME
};

fattn_tensor *fattn__split_bwd_slot(fattn_bwd_args *a, fattn_split_slot s)
{
    switch (s) {
#define SP_SLOT_FIELD(suffix, name)                                                            \
    case FATTN_SPLIT_SLOT_##suffix:                                                            \
        return &a->name;
        FATTN_SPLIT_SLOTS(SP_SLOT_FIELD)
#undef SP_SLOT_FIELD
    default:
        assert(!"not a split slot");
        return NULL;
    }
}

/* The slot each to_save entry stands for (TE 2.20.2 backends.py:1842-1849
 * against the 16 of 1987-2004). */
static const fattn_split_slot to_save_slots[FATTN_SPLIT_NTO_SAVE] = {
    FATTN_SPLIT_SLOT_Q_FP8,         FATTN_SPLIT_SLOT_K_FP8,    FATTN_SPLIT_SLOT_V_FP8,
    FATTN_SPLIT_SLOT_OUT_FP8,       FATTN_SPLIT_SLOT_Q,        FATTN_SPLIT_SLOT_K,
    FATTN_SPLIT_SLOT_V,             FATTN_SPLIT_SLOT_OUT,      FATTN_SPLIT_SLOT_SOFTMAX_STATS,
    FATTN_SPLIT_SLOT_RNG_STATE,     FATTN_SPLIT_SLOT_AUX_BIAS, FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET};

/* Entries of to_save: the fp8 and f16 groups of four, then the two aux. */
enum { SP_TS_FP8 = 0, SP_TS_F16 = 4, SP_TS_STATS = 8, SP_TS_RNG_STATE = 9,
       SP_TS_AUX_BIAS = 10, SP_TS_AUX_SOFTMAX_OFFSET = 11 };

fattn_split_slot fattn_split_to_save_slot(int i)
{
    assert(i >= 0 && i < FATTN_SPLIT_NTO_SAVE);
    return to_save_slots[i];
}

const char *fattn_split_slot_name(fattn_split_slot s)
{
    return ((int)s >= 0 && s < FATTN_SPLIT_NSLOTS) ? slot_names[s] : NULL;
}

const char *fattn_split_source_name(fattn_split_source s)
{
    switch (s) {
    case FATTN_SPLIT_SRC_Q: return "q";
    case FATTN_SPLIT_SRC_K: return "k";
    case FATTN_SPLIT_SRC_V: return "v";
    case FATTN_SPLIT_SRC_ATTN_BIAS: return "attn_bias";
    case FATTN_SPLIT_SRC_SOFTMAX_OFFSET: return "softmax_offset";
    case FATTN_SPLIT_SRC_OUT: return "out";
    default: return NULL;
    }
}

/* FusedAttnFwdArgs's defaults, backends.py:1440-1486 (fattn's unset encodings for the
 * required fields, fattn/split.h). */
void fattn_fwd_args_init(fattn_fwd_args *a)
{
    memset(a, 0, sizeof *a);
    a->q = a->k = a->v = a->attn_bias = a->softmax_offset = fattn_tensor_empty();
    a->packed_qkv = a->packed_kv = fattn_tensor_empty();
    a->cu_seqlens_q = a->cu_seqlens_kv = fattn_tensor_empty();
    a->cu_seqlens_q_padded = a->cu_seqlens_kv_padded = fattn_tensor_empty();
    a->page_table_k = a->page_table_v = fattn_tensor_empty();
    a->max_seqlen_q = a->max_seqlen_kv = 0;
    a->is_training = -1;
    a->qkv_layout = FATTN_LAYOUT_NOT_SET;
    a->attn_bias_type = (fattn_bias_type)-1;
    a->attn_mask_type = (fattn_mask_type)-1;
    a->softmax_type = (fattn_softmax_type)-1;
    a->window_size[0] = a->window_size[1] = FATTN_SPLIT_WINDOW_UNSET;
    a->bottom_right_diagonal = -1;
    a->attn_scale = FATTN_SPLIT_SCALE_NONE;
    a->dropout_p = 0.0f;
    a->fast_zero_fill = true;
    a->fused_attention_backend = FATTN_TE_BACKEND_NO_BACKEND;
    a->nvte_fp8_dpa_bwd = true;
    a->nvte_dpa_fp8cs_o_in_f16 = true;
    a->layer_number = 1;
    a->in_scale_inv[0] = a->in_scale_inv[1] = a->in_scale_inv[2] = NAN;
    a->in_nominal_dtype = FATTN_DTYPE_INVALID;
}

/* FusedAttnBwdArgs: every field None, backends.py:1489-1543 (unset encodings). */
void fattn_bwd_args_init(fattn_bwd_args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 0; i < FATTN_SPLIT_NSLOTS; i++)
        *fattn__split_bwd_slot(a, (fattn_split_slot)i) = fattn_tensor_empty();
    a->d_out = fattn_tensor_empty();
    a->d_out_scale_inv = NAN;
    a->nominal_dtype = FATTN_DTYPE_INVALID;
    a->layer_number = 1;
    a->attn_scale = FATTN_SPLIT_SCALE_NONE;
    a->fast_zero_fill = true;
    a->qkv_layout = a->dqkv_layout = FATTN_LAYOUT_NOT_SET;
    a->o_format = a->qkv_scale_inv_format = FATTN_FORMAT_NOT_SET;
    a->attn_bias_type = (fattn_bias_type)-1;
    a->attn_mask_type = (fattn_mask_type)-1;
    a->softmax_type = (fattn_softmax_type)-1;
    a->window_size[0] = a->window_size[1] = FATTN_SPLIT_WINDOW_UNSET;
    a->bottom_right_diagonal = -1;
    a->fused_attention_backend = FATTN_TE_BACKEND_NO_BACKEND;
    for (int i = 0; i < 4; i++)
        a->fp8_scale_inv[i] = NAN;
    a->nvte_dpa_fp8cs_o_in_f16 = true;
}

/* independent witness: mirrors lib/legacy/legacy.c lg_none, do not unify. */
static bool sp_none(const fattn_tensor *t)
{
    return !t || fattn_tensor_is_empty(t);
}

/* ------------------------------------------------------------------------ */
/* Slots and dedup                                                          */
/* ------------------------------------------------------------------------ */

fattn_status fattn_split_fill_to_save(fattn_split_save_variant variant,
                                      const fattn_tensor fp8[4], const fattn_tensor f16[4],
                                      const fattn_tensor *softmax_stats,
                                      const fattn_tensor *rng_state, fattn_split_to_save *ts)
{
    if (!fp8 || !f16 || !softmax_stats || !rng_state || !ts)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_fill_to_save: NULL argument");
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++)
        ts->t[i] = fattn_tensor_empty();
    /* TE 2.20.2 backends.py:1760-1771, the FP8 branch's fp8_tensors / f16_tensors. */
    switch (variant) {
    case FATTN_SPLIT_SAVE_F16:
    case FATTN_SPLIT_SAVE_FP8_BWD_F16:
        for (int i = 0; i < SP_QKVO_N; i++)
            ts->t[SP_TS_F16 + i] = f16[i];
        break;
    case FATTN_SPLIT_SAVE_FP8_O_F16:
        for (int i = 0; i < SP_QKVO_N; i++)
            if (i != SP_QKVO_OUT)
                ts->t[SP_TS_FP8 + i] = fp8[i];
        ts->t[SP_TS_F16 + SP_QKVO_OUT] = f16[SP_QKVO_OUT];
        break;
    case FATTN_SPLIT_SAVE_FP8_O_FP8:
        for (int i = 0; i < SP_QKVO_N; i++)
            ts->t[SP_TS_FP8 + i] = fp8[i];
        break;
    default:
        return fattn_error(FATTN_E_INVALID_ARG, "split: unknown save variant %d", (int)variant);
    }
    /* backends.py:1842-1849: the aux bias and offset entries are None */
    ts->t[SP_TS_STATS] = *softmax_stats;
    ts->t[SP_TS_RNG_STATE] = *rng_state;
    return FATTN_OK;
}

/* backends.py:1830-1843: entry i of a group of four is checked against its
 * own source only. */
static fattn_split_source sp_dedup_qkvo(const fattn_tensor *entry, int member,
                                        const fattn_tensor *const src[SP_QKVO_N])
{
    static const fattn_split_source names[SP_QKVO_N] = {FATTN_SPLIT_SRC_Q, FATTN_SPLIT_SRC_K,
                                                        FATTN_SPLIT_SRC_V, FATTN_SPLIT_SRC_OUT};
    if (fattn_tensor_is_empty(entry) || sp_none(src[member]) ||
        !fattn_tensor_same(entry, src[member]))
        return FATTN_SPLIT_SRC_NONE;
    return names[member];
}

void fattn_split_dedup(fattn_split_to_save *ts, const fattn_tensor *q, const fattn_tensor *k,
                       const fattn_tensor *v, const fattn_tensor *out, bool has_bias,
                       bool has_softmax_offset,
                       fattn_split_source saved_from[FATTN_SPLIT_NTO_SAVE])
{
    assert(ts && saved_from);
    const fattn_tensor *const src[SP_QKVO_N] = {q, k, v, out};
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++)
        saved_from[i] = FATTN_SPLIT_SRC_NONE;
    for (int i = 0; i < SP_QKVO_N; i++) {
        saved_from[SP_TS_FP8 + i] = sp_dedup_qkvo(&ts->t[SP_TS_FP8 + i], i, src);
        saved_from[SP_TS_F16 + i] = sp_dedup_qkvo(&ts->t[SP_TS_F16 + i], i, src);
    }
    /* backends.py:1841-1842: named from the forward's inputs, whatever the entry holds */
    if (has_bias)
        saved_from[SP_TS_AUX_BIAS] = FATTN_SPLIT_SRC_ATTN_BIAS;
    if (has_softmax_offset)
        saved_from[SP_TS_AUX_SOFTMAX_OFFSET] = FATTN_SPLIT_SRC_SOFTMAX_OFFSET;
    /* backends.py:1851-1853: None where a source is named */
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++)
        if (saved_from[i] != FATTN_SPLIT_SRC_NONE)
            ts->t[i] = fattn_tensor_empty();
}

/* ------------------------------------------------------------------------ */
/* Required fields                                                          */
/* ------------------------------------------------------------------------ */

#define MISSING(s, name) fattn_error(FATTN_E_MISSING_FIELD, "%s.%s is unset", s, name)

fattn_status fattn__split_check_fwd_args(const fattn_fwd_args *a)
{
    const char *s = "fattn_fwd_args";
    if (!a->engine)
        return MISSING(s, "engine");
    if (a->max_seqlen_q <= 0)
        return MISSING(s, "max_seqlen_q");
    if (a->max_seqlen_kv <= 0)
        return MISSING(s, "max_seqlen_kv");
    if (a->is_training != 0 && a->is_training != 1)
        return MISSING(s, "is_training");
    if (a->qkv_layout == FATTN_LAYOUT_NOT_SET || (int)a->qkv_layout < 0 ||
        (int)a->qkv_layout > FATTN_LAYOUT_NOT_SET)
        return MISSING(s, "qkv_layout");
    if ((int)a->attn_bias_type < 0)
        return MISSING(s, "attn_bias_type");
    if ((int)a->attn_mask_type < 0)
        return MISSING(s, "attn_mask_type");
    if ((int)a->softmax_type < 0)
        return MISSING(s, "softmax_type");
    if (a->window_size[0] == FATTN_SPLIT_WINDOW_UNSET ||
        a->window_size[1] == FATTN_SPLIT_WINDOW_UNSET)
        return MISSING(s, "window_size");
    if (a->fused_attention_backend == FATTN_TE_BACKEND_NO_BACKEND)
        return MISSING(s, "fused_attention_backend");
    if (!a->rng_gen)
        return MISSING(s, "rng_gen");
    if (a->bottom_right_diagonal < -1 || a->bottom_right_diagonal > 1)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "fattn_fwd_args.bottom_right_diagonal %d (use -1, 0 or 1)",
                           a->bottom_right_diagonal);
    return FATTN_OK;
}

fattn_status fattn__split_check_bwd_args(const fattn_bwd_args *a)
{
    const char *s = "fattn_bwd_args";
    if (!a->engine)
        return MISSING(s, "engine");
    if (fattn_tensor_is_empty(&a->d_out))
        return MISSING(s, "d_out");
    if (a->nominal_dtype == FATTN_DTYPE_INVALID)
        return MISSING(s, "nominal_dtype");
    /* an FP8 backward reads the fp8 slots (S:2131-2165) */
    if (a->fp8 && (fattn_tensor_is_empty(&a->q_fp8) || fattn_tensor_is_empty(&a->k_fp8) ||
                   fattn_tensor_is_empty(&a->v_fp8)))
        return MISSING(s, "q_fp8/k_fp8/v_fp8 (fp8 is set: an FP8 backward)");
    if (a->max_seqlen_q <= 0)
        return MISSING(s, "max_seqlen_q");
    if (a->max_seqlen_kv <= 0)
        return MISSING(s, "max_seqlen_kv");
    if (a->qkv_layout == FATTN_LAYOUT_NOT_SET)
        return MISSING(s, "qkv_layout");
    if (a->o_format == FATTN_FORMAT_NOT_SET)
        return MISSING(s, "o_format");
    if (a->dqkv_layout == FATTN_LAYOUT_NOT_SET)
        return MISSING(s, "dqkv_layout");
    if ((int)a->attn_bias_type < 0)
        return MISSING(s, "attn_bias_type");
    if ((int)a->attn_mask_type < 0)
        return MISSING(s, "attn_mask_type");
    if ((int)a->softmax_type < 0)
        return MISSING(s, "softmax_type");
    if (a->window_size[0] == FATTN_SPLIT_WINDOW_UNSET ||
        a->window_size[1] == FATTN_SPLIT_WINDOW_UNSET)
        return MISSING(s, "window_size");
    if (a->bottom_right_diagonal < -1 || a->bottom_right_diagonal > 1)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "fattn_bwd_args.bottom_right_diagonal %d (use -1, 0 or 1)",
                           a->bottom_right_diagonal);
    if (a->fused_attention_backend == FATTN_TE_BACKEND_NO_BACKEND)
        return MISSING(s, "fused_attention_backend");
    if (fattn_tensor_is_empty(&a->softmax_stats))
        return MISSING(s, "softmax_stats");
    if (fattn_tensor_is_empty(&a->rng_state))
        return MISSING(s, "rng_state");
    bool tensor_bias = a->attn_bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
                       a->attn_bias_type == FATTN_BIAS_POST_SCALE_BIAS;
    if (tensor_bias && fattn_tensor_is_empty(&a->aux_bias))
        return MISSING(s, "aux_bias");
    if (a->softmax_type != FATTN_SOFTMAX_VANILLA && fattn_tensor_is_empty(&a->aux_softmax_offset))
        return MISSING(s, "aux_softmax_offset");
    if (!a->fp8) {
        if (fattn_tensor_is_empty(&a->q))
            return MISSING(s, "q");
        if (fattn_tensor_is_empty(&a->k))
            return MISSING(s, "k");
        if (fattn_tensor_is_empty(&a->v))
            return MISSING(s, "v");
        if (fattn_tensor_is_empty(&a->out))
            return MISSING(s, "out");
    }
    return FATTN_OK;
}

/* ------------------------------------------------------------------------ */
/* Owners and layouts                                                       */
/* ------------------------------------------------------------------------ */

void fattn_split_fwd_result_free(fattn_split_fwd_result *r)
{
    if (!r)
        return;
    fattn_tensor_free(&r->own_out);
    fattn_tensor_free(&r->own_max_logit);
    fattn_tensor_free(&r->own_stats);
    fattn_tensor_free(&r->own_max);
    fattn_tensor_free(&r->own_rng_state);
    for (int i = 0; i < 3; i++) {
        fattn_tensor_free(&r->own_qkv_fp8[i]);
        fattn_tensor_free(&r->own_qkv_f16[i]);
    }
    fattn_tensor_free(&r->own_out_fp8);
    fattn_tensor_free(&r->own_out_f16);
    memset(r, 0, sizeof *r);
}

void fattn_split_grads_free(fattn_split_grads *g)
{
    if (!g)
        return;
    for (int i = 0; i < 3; i++)
        fattn_tensor_free(&g->own_storage[i]);
    fattn_tensor_free(&g->own_d_bias);
    fattn_tensor_free(&g->own_d_softmax_offset);
    for (int i = 0; i < 3; i++)
        fattn_tensor_free(&g->own_fp8[i]);
    fattn_tensor_free(&g->own_d_out_fp8);
    fattn_tensor_free(&g->own_d_out_f16);
    memset(g, 0, sizeof *g);
    g->grads_scale_inv = NAN; /* no FP8 grads */
}

/* _reload_qkv_layout, backends.py:1881-1894. */
fattn_qkv_layout fattn_split_reload_layout(fattn_qkv_layout layout, bool offloaded)
{
    if (!offloaded)
        return layout;
    switch (layout) {
    case FATTN_LAYOUT_SB3HD:
    case FATTN_LAYOUT_SBH3D:
    case FATTN_LAYOUT_SBHD_SB2HD:
    case FATTN_LAYOUT_SBHD_SBH2D:
        return FATTN_LAYOUT_SBHD_SBHD_SBHD;
    case FATTN_LAYOUT_BS3HD:
    case FATTN_LAYOUT_BSH3D:
    case FATTN_LAYOUT_BSHD_BS2HD:
    case FATTN_LAYOUT_BSHD_BSH2D:
        return FATTN_LAYOUT_BSHD_BSHD_BSHD;
    case FATTN_LAYOUT_T3HD:
    case FATTN_LAYOUT_TH3D:
    case FATTN_LAYOUT_THD_T2HD:
    case FATTN_LAYOUT_THD_TH2D:
        return FATTN_LAYOUT_THD_THD_THD;
    default:
        return layout;
    }
}

/* ---- the engine calls and outputs that split.c and fp8.c share -------------- */

/* Positions in the engine's aux list that forward allocates: Stats first,
 * then Max when return_max_logit (fused_attn.py:402-441). */
enum sp_pack { SP_PACK_STATS = 0, SP_PACK_MAX = 1 };

static fattn_tensor sp_opt(const fattn_tensor *t)
{
    return sp_none(t) ? fattn_tensor_empty() : *t;
}


fattn_status fattn__split_alloc_out(uint64_t poison, fattn_tensor *t, fattn_dtype dt, int ndim,
                                 const int64_t *shape)
{
    fattn_status st = fattn_tensor_alloc(t, dt, ndim, shape);
    if (st != FATTN_OK)
        return st;
    if (poison != 0)
        fattn_tensor_fill_bits(t, poison);
    return FATTN_OK;
}

/* independent witness: mirrors lib/legacy/legacy_calls.c fattn__legacy_alloc_packed, do not
 * unify. attention.cpp:398-452: `npack` tensors shaped like `like` in one
 * buffer, the pack dim at `at` (ndim-2 for 3hd/2hd, ndim-1 for h3d/h2d). */
fattn_status fattn__split_alloc_packed(uint64_t poison, fattn_tensor *storage, fattn_dtype dt,
                                    const fattn_tensor *like, int npack, int at,
                                    fattn_tensor *views)
{
    int nd = like->ndim;
    /* one tensor, or the 3 of a qkv / 2 of a kv pack, the pack dim a real one */
    assert(npack >= 1 && npack <= 3 && at >= 0 && at <= nd && views);
    if (npack == 1) {
        fattn_status st = fattn__split_alloc_out(poison, storage, dt, nd, like->shape);
        if (st != FATTN_OK)
            return st;
        views[0] = *storage;
        return FATTN_OK;
    }
    if (nd + 1 > FATTN_MAX_DIMS)
        return fattn_error(FATTN_E_SHAPE, "split: %d dims cannot be packed", nd);
    int64_t shape[FATTN_MAX_DIMS];
    int s = 0;
    for (int a = 0; a <= nd; a++)
        shape[a] = (a == at) ? npack : like->shape[s++];
    fattn_status st = fattn__split_alloc_out(poison, storage, dt, nd + 1, shape);
    if (st != FATTN_OK)
        return st;
    size_t esz = fattn_dtype_size(dt);
    for (int m = 0; m < npack; m++) {
        fattn_tensor w = fattn_tensor_empty();
        w.dtype = dt;
        w.device = storage->device;
        w.ndim = nd;
        s = 0;
        for (int a = 0; a <= nd; a++) {
            if (a == at)
                continue;
            w.shape[s] = storage->shape[a];
            w.strides[s] = storage->strides[a];
            s++;
        }
        w.data = (char *)storage->data + (size_t)m * (size_t)storage->strides[at] * esz;
        views[m] = w;
    }
    return FATTN_OK;
}

/* fused_attn_fwd's arguments, the f16 path. */
static void sp_forward_impl_params(sp_forward_frame *f, fattn_fwd_params *p)
{
    const fattn_fwd_args *args = f->args;
    memset(p, 0, sizeof *p);
    p->attn.q = *f->eq;
    p->attn.k = *f->ek;
    p->attn.v = *f->ev;
    p->fp8 = f->fp8p;
    p->bias = sp_opt(f->attn_bias);
    p->softmax_offset = sp_opt(f->softmax_offset);
    p->attn.o = f->res->own_out;
    p->aux = &f->pack;
    p->attn.cu_seqlens_q = args->cu_seqlens_q;
    p->attn.cu_seqlens_kv = args->cu_seqlens_kv;
    p->attn.cu_seqlens_q_padded = args->cu_seqlens_q_padded;
    p->attn.cu_seqlens_kv_padded = args->cu_seqlens_kv_padded;
    /* backends.py:1788-1789 passes FusedAttnFwdArgs' tables (1455-1456;
     * FusedAttention: the cache's one table twice, 2595-2596); no ctx
     * attribute keeps them, the backward's call takes none. */
    p->page_table_k = args->page_table_k;
    p->page_table_v = args->page_table_v;
    p->rng_state = f->res->own_rng_state;
    p->attn.max_seqlen_q = args->max_seqlen_q;
    p->attn.max_seqlen_kv = args->max_seqlen_kv;
    p->is_training = args->is_training == 1;
    p->return_max_logit = args->return_max_logit;
    p->attn.cuda_graph = false;
    p->attn.attn_scale = f->scale;
    p->attn.dropout = args->dropout_p;
    p->attn.qkv_layout = args->qkv_layout;
    p->attn.o_format = f->qf;
    p->attn.bias_type = args->attn_bias_type;
    p->attn.mask_type = args->attn_mask_type;
    p->attn.softmax_type = args->softmax_type;
    p->attn.window_size_left = args->window_size[0];
    p->attn.window_size_right = args->window_size[1];
    p->attn.bottom_right_diagonal = f->brd;
}

/* The engine's list -> fixed slots, right after the engine call: Max
 * becomes max_logit and is never saved. */
static void sp_forward_impl_list_to_slots(sp_forward_frame *f)
{
    const fattn_fwd_args *args = f->args;
    for (int i = 0; i < SP_AUX_N; i++)
        f->aux[i] = fattn_tensor_empty();
    int at = 0;
    f->aux[SP_AUX_STATS] = f->pack.t[at++];
    if (args->return_max_logit)
        at++;
    f->aux[SP_AUX_RNG_STATE] = f->pack.t[at++];
    if (args->attn_bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
        args->attn_bias_type == FATTN_BIAS_POST_SCALE_BIAS)
        f->aux[SP_AUX_BIAS] = f->pack.t[at++];
    if (args->softmax_type != FATTN_SOFTMAX_VANILLA)
        f->aux[SP_AUX_SOFTMAX_OFFSET] = f->pack.t[at++];
    assert(at == f->pack.n);
}

/* fused_attn_fwd at the engine boundary, two-call protocol: the first call
 * sizes the list, forward allocates Stats (and Max), the second executes. */
fattn_status fattn__split_forward_impl_fused_attn_fwd(sp_forward_frame *f)
{
    const fattn_fwd_args *args = f->args;
    fattn_split_fwd_result *res = f->res;
    assert(args->engine); /* a required field, checked by forward_impl */
    memset(&f->pack, 0, sizeof f->pack);
    fattn_fwd_params p;
    sp_forward_impl_params(f, &p);
    fattn_status st = fattn_engine_fwd(args->engine, &p);
    if (st != FATTN_OK)
        return st;
    int want = 2 + (args->return_max_logit ? 1 : 0) +
               ((args->attn_bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
                 args->attn_bias_type == FATTN_BIAS_POST_SCALE_BIAS)
                    ? 1
                    : 0) +
               (args->softmax_type != FATTN_SOFTMAX_VANILLA ? 1 : 0);
    if (f->pack.n != want)
        return fattn_error(FATTN_E_INTERNAL, "split forward: engine sized %d aux entries, want %d",
                           f->pack.n, want);
    fattn_tensor *stats = &f->pack.t[SP_PACK_STATS];
    st = fattn__split_alloc_out(args->poison, &res->own_stats, stats->dtype, stats->ndim, stats->shape);
    if (st != FATTN_OK)
        return st;
    *stats = res->own_stats;
    if (args->return_max_logit) {
        fattn_tensor *max = &f->pack.t[SP_PACK_MAX];
        st = fattn__split_alloc_out(args->poison, &res->own_max, max->dtype, max->ndim, max->shape);
        if (st != FATTN_OK)
            return st;
        *max = res->own_max;
    }
    st = fattn_engine_fwd(args->engine, &p);
    if (st != FATTN_OK)
        return st;
    sp_forward_impl_list_to_slots(f);
    return FATTN_OK;
}

/* fused_attn_bwd's arguments, the f16 branch (the FP8 one starts from them). */
void fattn__split_backward_params(const fattn_bwd_args *bwd, const fattn_aux_pack *pack,
                                 const fattn_split_grads *g, fattn_bwd_params *pp)
{
    assert(bwd->engine); /* a required field, checked by backward_impl */
    fattn_bwd_params p;
    memset(&p, 0, sizeof p);
    p.attn.q = bwd->q;
    p.attn.k = bwd->k;
    p.attn.v = bwd->v;
    p.attn.o = bwd->out;
    p.d_o = bwd->d_out;
    p.aux = pack;
    p.dq = g->dq;
    p.dk = g->dk;
    p.dv = g->dv;
    p.d_bias = g->d_bias;
    p.d_softmax_offset = g->d_softmax_offset;
    p.attn.cu_seqlens_q = bwd->cu_seqlens_q;
    p.attn.cu_seqlens_kv = bwd->cu_seqlens_kv;
    p.attn.cu_seqlens_q_padded = bwd->cu_seqlens_q_padded;
    p.attn.cu_seqlens_kv_padded = bwd->cu_seqlens_kv_padded;
    p.attn.max_seqlen_q = bwd->max_seqlen_q;
    p.attn.max_seqlen_kv = bwd->max_seqlen_kv;
    /* fused_attn.py:591-599: None resolved, d from the q passed */
    const fattn_tensor *qd = bwd->q.ndim ? &bwd->q : &bwd->q_fp8; /* FP8 branch: q_fp8 */
    p.attn.attn_scale = isnan(bwd->attn_scale) ? (float)(1.0 / sqrt((double)qd->shape[qd->ndim - 1]))
                                          : bwd->attn_scale;
    p.attn.dropout = bwd->dropout_p;
    p.attn.qkv_layout = bwd->qkv_layout;
    p.attn.o_format = bwd->o_format;
    p.do_format = bwd->o_format;
    p.dqkv_layout = bwd->dqkv_layout;
    p.attn.bias_type = bwd->attn_bias_type;
    p.attn.mask_type = bwd->attn_mask_type;
    p.attn.softmax_type = bwd->softmax_type;
    p.attn.window_size_left = bwd->window_size[0];
    p.attn.window_size_right = bwd->window_size[1];
    p.attn.bottom_right_diagonal = bwd->bottom_right_diagonal < 0
                                  ? fattn_bottom_right_default_fwd(bwd->attn_mask_type)
                                  : bwd->bottom_right_diagonal == 1;
    p.deterministic = bwd->deterministic;
    p.attn.cuda_graph = false;
    *pp = p;
}
