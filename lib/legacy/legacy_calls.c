/* The legacy front end's engine calls and outputs, shared by legacy.c (the
 * f16 path) and legacy_fp8.c (the FP8 branch), which depend on this file and
 * not on each other: poisoned outputs and packed dQKV, fused_attn_fwd's f16
 * call (both protocol calls) and fused_attn_bwd's f16 arguments.
 *
 * TE lines cited as backends.py:N are TE 2.19.0's
 * transformer_engine/pytorch/attention/dot_product_attention/backends.py.
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "fattn/dtype.h"
#include "fattn/legacy.h"

#include "internal.h"

static fattn_tensor lg_opt(const fattn_tensor *t)
{
    return (t && !fattn_tensor_is_empty(t)) ? *t : fattn_tensor_empty();
}

/* Allocate a poisoned output (the harness's poison, 0 = leave as is). */
fattn_status fattn__legacy_alloc_out(fattn_legacy_ctx *ctx, fattn_tensor *t, fattn_dtype dt,
                                 int ndim, const int64_t *shape)
{
    fattn_status st = fattn_tensor_alloc(t, dt, ndim, shape);
    if (st != FATTN_OK)
        return st;
    if (ctx->poison != 0)
        fattn_tensor_fill_bits(t, ctx->poison);
    return FATTN_OK;
}

/* independent witness: mirrors lib/split/args.c fattn__split_alloc_packed, do not
 * unify. One buffer holding `npack` tensors shaped like `like`, interleaved
 * by a pack dim inserted at position `at` (ndim-2: "3hd"/"2hd"; ndim-1:
 * "h3d"/"h2d"); views[m] is member m. As attention.cpp:398-452 builds dQKV. */
fattn_status fattn__legacy_alloc_packed(fattn_legacy_ctx *ctx, fattn_tensor *storage,
                                    fattn_dtype dt, const fattn_tensor *like, int npack,
                                    int at, fattn_tensor *views)
{
    int nd = like->ndim;
    /* one tensor, or the 3 of a qkv / 2 of a kv pack, the pack dim a real one */
    assert(npack >= 1 && npack <= 3 && at >= 0 && at <= nd && views);
    if (npack == 1) {
        fattn_status st = fattn__legacy_alloc_out(ctx, storage, dt, nd, like->shape);
        if (st != FATTN_OK)
            return st;
        views[0] = *storage;
        return FATTN_OK;
    }
    int64_t shape[FATTN_MAX_DIMS];
    if (nd + 1 > FATTN_MAX_DIMS)
        return fattn_error(FATTN_E_SHAPE, "legacy: %d dims cannot be packed", nd);
    for (int a = 0, s = 0; a < nd + 1; a++)
        shape[a] = a == at ? npack : like->shape[s++];
    fattn_status st = fattn__legacy_alloc_out(ctx, storage, dt, nd + 1, shape);
    if (st != FATTN_OK)
        return st;
    size_t esz = fattn_dtype_size(dt);
    for (int m = 0; m < npack; m++) {
        fattn_tensor w = fattn_tensor_empty();
        w.dtype = dt;
        w.device = storage->device;
        w.ndim = nd;
        for (int a = 0, s = 0; a < nd + 1; a++) {
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

/* fused_attn_fwd's arguments, the f16 branch of forward (backends.py:1616-1649). */
static void lg_forward_params(lg_forward_locals *f, fattn_fwd_params *p)
{
    memset(p, 0, sizeof *p);
    p->attn.q = *f->eq;
    p->attn.k = *f->ek;
    p->attn.v = *f->ev;
    p->fp8 = f->fp8p;
    p->bias = lg_opt(f->attn_bias);
    p->softmax_offset = lg_opt(f->softmax_offset);
    p->attn.o = f->ctx->own_out;
    p->aux = &f->aux;
    p->attn.cu_seqlens_q = lg_opt(f->cu_seqlens_q);
    p->attn.cu_seqlens_kv = lg_opt(f->cu_seqlens_kv);
    p->attn.cu_seqlens_q_padded = lg_opt(f->cu_seqlens_q_padded);
    p->attn.cu_seqlens_kv_padded = lg_opt(f->cu_seqlens_kv_padded);
    /* backends.py:1630-1631 passes the tables as FusedAttnFunc got them
     * (1407-1408; FusedAttention: the cache's one table twice, 2335-2336);
     * nothing saves them for the backward, whose call takes none. */
    p->page_table_k = lg_opt(f->page_table_k);
    p->page_table_v = lg_opt(f->page_table_v);
    p->rng_state = f->ctx->own_rng_state;
    p->attn.max_seqlen_q = f->max_seqlen_q;
    p->attn.max_seqlen_kv = f->max_seqlen_kv;
    p->is_training = f->is_training;
    p->return_max_logit = f->return_max_logit;
    p->attn.cuda_graph = false;
    p->attn.attn_scale = f->scale;
    p->attn.dropout = f->dropout_p;
    p->attn.qkv_layout = f->qkv_layout;
    p->attn.o_format = f->qf;
    p->attn.bias_type = f->attn_bias_type;
    p->attn.mask_type = f->attn_mask_type;
    p->attn.softmax_type = f->softmax_type;
    p->attn.window_size_left = f->window_size[0];
    p->attn.window_size_right = f->window_size[1];
    p->attn.bottom_right_diagonal = f->brd;
}

/* out_, aux_ctx_tensors, *max_logit = fused_attn_fwd(...), the f16 branch
 * (backends.py:1614-1653).
 * Two-call protocol: sizes, allocate Stats (and Max), execute. */
fattn_status fattn__legacy_forward_fused_attn_fwd(lg_forward_locals *f)
{
    fattn_legacy_ctx *ctx = f->ctx;
    assert(ctx->engine); /* fattn_legacy_ctx_init refuses a NULL engine */
    fattn_aux_pack *aux = &f->aux;
    memset(aux, 0, sizeof *aux);
    fattn_fwd_params p;
    lg_forward_params(f, &p);
    fattn_status st = fattn_engine_fwd(ctx->engine, &p);
    if (st != FATTN_OK)
        return st;
    if (aux->n < 2 || aux->n > FATTN_AUX_MAX)
        return fattn_error(FATTN_E_INTERNAL, "legacy forward: engine sized %d aux entries",
                           aux->n);
    fattn_tensor *stats = &aux->t[LG_PACK_STATS];
    st = fattn__legacy_alloc_out(ctx, &ctx->own_stats, stats->dtype, stats->ndim, stats->shape);
    if (st != FATTN_OK)
        return st;
    *stats = ctx->own_stats;
    if (f->return_max_logit) {
        fattn_tensor *max = &aux->t[LG_PACK_MAX];
        st = fattn__legacy_alloc_out(ctx, &ctx->own_max, max->dtype, max->ndim, max->shape);
        if (st != FATTN_OK)
            return st;
        *max = ctx->own_max;
    }
    return fattn_engine_fwd(ctx->engine, &p);
}

/* backends.py:1965-1999: the f16 fused_attn_bwd's arguments; g[] holds dq,
 * dk, dv, dbias, doff as FATTN_LEGACY_GRAD_* index them. */
void fattn__legacy_backward_params(const fattn_legacy_ctx *ctx, const fattn_tensor *d_out,
                                  const fattn_aux_pack *aux,
                                  const fattn_tensor g[FATTN_LEGACY_NGRADS],
                                  fattn_bwd_params *pp)
{
    assert(ctx->engine && ctx->has_forward);
    const fattn_tensor *s = ctx->tensor_objects;
    fattn_bwd_params p;
    memset(&p, 0, sizeof p);
    p.attn.q = s[FATTN_LEGACY_SAVED_Q];
    p.attn.k = s[FATTN_LEGACY_SAVED_K];
    p.attn.v = s[FATTN_LEGACY_SAVED_V];
    p.attn.o = s[FATTN_LEGACY_SAVED_OUT];
    p.d_o = *d_out;
    p.aux = aux;
    p.dq = g[FATTN_LEGACY_GRAD_DQ];
    p.dk = g[FATTN_LEGACY_GRAD_DK];
    p.dv = g[FATTN_LEGACY_GRAD_DV];
    p.d_bias = g[FATTN_LEGACY_GRAD_DBIAS];
    p.d_softmax_offset = g[FATTN_LEGACY_GRAD_DSOFTMAX_OFFSET];
    p.attn.cu_seqlens_q = s[FATTN_LEGACY_SAVED_CU_SEQLENS_Q];
    p.attn.cu_seqlens_kv = s[FATTN_LEGACY_SAVED_CU_SEQLENS_KV];
    p.attn.cu_seqlens_q_padded = s[FATTN_LEGACY_SAVED_CU_SEQLENS_Q_PADDED];
    p.attn.cu_seqlens_kv_padded = s[FATTN_LEGACY_SAVED_CU_SEQLENS_KV_PADDED];
    p.attn.max_seqlen_q = ctx->max_seqlen_q;
    p.attn.max_seqlen_kv = ctx->max_seqlen_kv;
    /* fused_attn.py:591-599: the ctx's None resolved here, d from the q passed */
    const fattn_tensor *qd = p.attn.q.ndim ? &p.attn.q : &s[FATTN_LEGACY_SAVED_Q_FP8]; /* FP8: q_fp8 */
    p.attn.attn_scale = isnan(ctx->attn_scale) ? (float)(1.0 / sqrt((double)qd->shape[qd->ndim - 1]))
                                          : ctx->attn_scale;
    p.attn.dropout = ctx->dropout_p;
    p.attn.qkv_layout = ctx->qkv_layout;
    p.attn.o_format = ctx->o_format;
    p.do_format = ctx->o_format; /* do_format = ctx.o_format */
    p.dqkv_layout = ctx->dqkv_layout;
    p.attn.bias_type = ctx->attn_bias_type;
    p.attn.mask_type = ctx->attn_mask_type;
    p.attn.softmax_type = ctx->softmax_type;
    p.attn.window_size_left = ctx->window_size[0];
    p.attn.window_size_right = ctx->window_size[1];
    p.attn.bottom_right_diagonal = ctx->bottom_right_diagonal < 0
                                  ? fattn_bottom_right_default_fwd(ctx->attn_mask_type)
                                  : ctx->bottom_right_diagonal != 0;
    p.deterministic = ctx->deterministic;
    p.attn.cuda_graph = false;
    *pp = p;
}
