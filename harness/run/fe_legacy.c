/* The legacy front end behind the adapter (fe.h): FusedAttnFunc before the
 * refactor, one ctx with loose fields and the saved list
 * [12 fixed entries, aux pack as TE's list]. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fattn/fp8.h"
#include "fattn/legacy.h"

#include "fe.h"

_Static_assert((int)FATTN_LEGACY_SAVED_AUX == (int)FH_SAVED_AUX_FIRST,
               "legacy's fixed saved entries are the table's FIXED rows");
_Static_assert(FATTN_LEGACY_SAVED_MAX == FH_SAVED_COUNT,
               "legacy's saved list holds at most every slot");

typedef struct fe_legacy {
    const fh_fe_env *env;
    fattn_legacy_ctx *ctx;
    fattn_tensor out, max_logit;
    fattn_tensor grads[FATTN_LEGACY_NGRADS];
    fattn_fp8_quantizers qs; /* DPA's quantizers, FP8 cases only */
    fattn_fp8_quantizers *q; /* the ones handed over: the module's, else qs */
    fattn_fp8_meta meta;     /* DPA's fp8_meta */
    fattn_fp8_quantizer loaded[6]; /* the recorded ones, on a replay */
} fe_legacy;

static fattn_status legacy_init(void **fe, const fh_fe_env *env)
{
    assert(fe && env && env->spec && env->in && env->gen);
    fe_legacy *s = calloc(1, sizeof *s);
    if (!s)
        return fattn_error(FATTN_E_NOMEM, "cannot allocate the legacy front end's state");
    s->env = env;
    fattn_status st = fattn_legacy_ctx_init(&s->ctx, env->engine);
    if (st != FATTN_OK) {
        free(s);
        return st;
    }
    s->ctx->poison = env->poison;
    s->ctx->cpu_offload = env->spec->cpu_offload;
    s->ctx->direct_call = env->spec->raw_func_args;
    s->ctx->env_fp8_dpa_bwd = env->spec->fp8_dpa_bwd;
    s->ctx->env_fp8cs_o_in_f16 = env->spec->fp8_o_in_f16;
    s->q = env->quantizers ? env->quantizers : &s->qs;
    if (env->spec->fp8 && !env->quantizers)
        fh_fe_fp8_quantizers(env->spec, &s->qs);
    fh_fe_fp8_meta(env->spec, &s->meta);
    *fe = s;
    return FATTN_OK;
}

static void legacy_free(void *fe)
{
    fe_legacy *s = fe;
    if (!s)
        return;
    fattn_legacy_ctx_free(s->ctx);
    free(s);
}

/* The ctx's aux pack (the saved list after the fixed entries) as slots. */
static fattn_status legacy_aux(const fattn_legacy_ctx *c, fattn_tensor aux[FH_SAVED_NAUX])
{
    assert(c->n_saved >= FATTN_LEGACY_SAVED_AUX && c->n_saved <= FATTN_LEGACY_SAVED_MAX);
    return fh_saved_aux_from_list(c->tensor_objects + FATTN_LEGACY_SAVED_AUX,
                                     c->n_saved - FATTN_LEGACY_SAVED_AUX, c->attn_bias_type,
                                     c->softmax_type, aux);
}

/* FusedAttnFunc.forward with its 36 positional inputs. */
static fattn_status legacy_forward(void *fe, fh_fe_forward *res)
{
    fe_legacy *s = fe;
    assert(s && s->ctx);
    const fh_spec *sp = s->env->spec;
    const fh_case_inputs *in = s->env->in;
    fattn_tensor none = fattn_tensor_empty();
    if (fattn_dtype_is_fp8(in->q.dtype)) { /* Float8Tensors: what they carry */
        s->ctx->in_scale_inv[0] = in->q_scale_inv;
        s->ctx->in_scale_inv[1] = in->k_scale_inv;
        s->ctx->in_scale_inv[2] = in->v_scale_inv;
        s->ctx->in_nominal_dtype = sp->dtype;
    }
    fattn_status st = fattn_legacy_forward(
        s->ctx, sp->is_training, sp->sq, sp->skv, &in->cu_seqlens_q, &in->cu_seqlens_kv,
        &in->cu_seqlens_q_padded, &in->cu_seqlens_kv_padded, &in->page_table_k,
        &in->page_table_v, &in->q, &in->k,
        &in->v, &in->attn_bias, fh_fe_attn_scale(sp), fh_fe_dropout(sp),
        sp->fast_zero_fill, sp->layout, sp->bias, sp->mask, sp->softmax, in->window,
        fh_fe_bottom_right_diagonal(sp), s->env->gen, FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN,
        false, sp->fp8, &s->meta, sp->fp8 ? s->q : NULL, sp->deterministic, &in->softmax_offset,
        sp->fp8_output, sp->bf16_backward, 1, sp->return_max_logit, &none, &none, &s->out,
        &s->max_logit);
    if (st != FATTN_OK)
        return st;
    res->out = s->out;
    res->out_scale_inv = isnan(s->ctx->out_scale_inv) ? 0.0f : s->ctx->out_scale_inv;
    res->max_logit = s->max_logit;
    return legacy_aux(s->ctx, res->aux);
}

static void record_from_ctx(fh_ctx_record *dst, const fattn_legacy_ctx *src)
{
    FH_CTX_FIELDS(FH_CTX_COPY_FIELD)
}

static void ctx_from_record(fattn_legacy_ctx *dst, const fh_ctx_record *src)
{
    FH_CTX_FIELDS(FH_CTX_COPY_FIELD)
}

/* SAVE_CTX: the ctx its forward filled. */
static fattn_status legacy_save_ctx(void *fe, fh_fe_saved *res)
{
    fe_legacy *s = fe;
    const fattn_legacy_ctx *c = s->ctx;
    /* legacy cannot resume at FORWARD: SAVE_CTX follows its own forward */
    assert(c && c->has_forward);
    for (int i = 0; i < FH_SAVED_AUX_FIRST; i++) {
        res->t[i] = c->tensor_objects[i];
        res->scale_inv[i] = isnan(c->tensor_scale_inv[i]) ? 0.0f : c->tensor_scale_inv[i];
    }
    fattn_status st = legacy_aux(c, res->t + FH_SAVED_AUX_FIRST);
    if (st != FATTN_OK)
        return st;
    record_from_ctx(&res->rec, c);
    return FATTN_OK;
}

static fattn_status legacy_record_private(void *fe, fh_state state, fh_h5_node *group)
{
    fe_legacy *s = fe;
    if (state != FH_STATE_SAVE_CTX)
        return FATTN_OK;
    fh_h5_node *impl;
    fattn_status st = fh_h5_node_group(group, "_impl", &impl);
    if (st != FATTN_OK)
        return st;
    /* set by forward, never read by backward */
    const fattn_legacy_ctx *c = s->ctx;
    if ((st = fh_h5_node_set_uint8(impl, "is_output_fp8", c->is_output_fp8)) != FATTN_OK ||
        (st = fh_h5_node_set_string(impl, "fp8_recipe", fattn_fp8_recipe_name(c->fp8_recipe))) !=
            FATTN_OK ||
        !c->fp8_meta)
        return st;
    /* fp8_meta as FusedAttnFunc reads it: its local_recipes, or None */
    char meta[64] = "local_recipes=None";
    if (c->fp8_meta->n_local_recipes > 0)
        snprintf(meta, sizeof meta, "local_recipes=[%s%s%s]",
                 fattn_fp8_recipe_name(c->fp8_meta->local_recipes[0]),
                 c->fp8_meta->n_local_recipes > 1 ? ", " : "",
                 c->fp8_meta->n_local_recipes > 1
                     ? fattn_fp8_recipe_name(c->fp8_meta->local_recipes[1])
                     : "");
    return fh_h5_node_set_string(impl, "fp8_meta", meta);
}

static fattn_status legacy_backward(void *fe, const fattn_tensor *d_out, fh_fe_grads *res)
{
    fe_legacy *s = fe;
    assert(s && s->ctx && d_out);
    float dsi = s->env->in->d_out_scale_inv;
    s->ctx->d_out_scale_inv = dsi != 0.0f ? dsi : NAN;
    fattn_status st = fattn_legacy_backward(s->ctx, d_out, s->grads);
    if (st != FATTN_OK)
        return st;
    res->grads_scale_inv = isnan(s->ctx->grads_scale_inv) ? 0.0f : s->ctx->grads_scale_inv;
    const fattn_tensor *g = s->grads;
    res->dq = g[FATTN_LEGACY_GRAD_DQ];
    res->dk = g[FATTN_LEGACY_GRAD_DK];
    res->dv = g[FATTN_LEGACY_GRAD_DV];
    res->d_bias = g[FATTN_LEGACY_GRAD_DBIAS];
    res->d_softmax_offset = g[FATTN_LEGACY_GRAD_DSOFTMAX_OFFSET];
    if (s->ctx->fp8) {
        res->dO_quantizer = s->ctx->dO_quantizer;
        res->dP_quantizer = s->ctx->dP_quantizer;
        res->dQKV_quantizer = s->ctx->dQKV_quantizer;
    }
    return FATTN_OK;
}

/* FusedAttnFunc.backward once more on the same ctx; grads of its own, so
 * that the recorded first ones stay as they were. */
static fattn_status legacy_backward_again(void *fe, const fattn_tensor *d_out, bool *applies)
{
    fe_legacy *s = fe;
    assert(s && s->ctx && d_out);
    *applies = true;
    fattn_tensor again[FATTN_LEGACY_NGRADS];
    return fattn_legacy_backward(s->ctx, d_out, again);
}

/* The recorded save_ctx into the ctx: the fields, the fixed entries, then
 * the aux slots the file holds as TE's list. */
static fattn_status legacy_load_save_ctx(void *fe, const fh_h5_node *sc,
                                         const fh_ctx_record *rec)
{
    fe_legacy *s = fe;
    fattn_legacy_ctx *c = s->ctx;
    fh_ctx_record own = *rec;
    fh_fe_own_quantizers(&own, s->loaded);
    ctx_from_record(c, &own);
    for (int i = 0; i < FH_SAVED_AUX_FIRST; i++) {
        c->tensor_objects[i] = fh_fe_node_tensor(sc, fh_saved_name((fh_saved_slot)i));
        float si = fh_fe_node_scale_inv(sc, fh_saved_name((fh_saved_slot)i));
        c->tensor_scale_inv[i] = si != 0.0f ? si : NAN;
    }
    fattn_tensor aux[FH_SAVED_NAUX];
    for (int i = 0; i < FH_SAVED_NAUX; i++) {
        fh_saved_slot slot = (fh_saved_slot)(FH_SAVED_AUX_FIRST + i);
        aux[i] = fh_fe_node_tensor(sc, fh_saved_name(slot));
    }
    c->n_saved = FH_SAVED_AUX_FIRST +
                 fh_saved_aux_to_list(aux, c->tensor_objects + FH_SAVED_AUX_FIRST);
    assert(c->n_saved <= FATTN_LEGACY_SAVED_MAX);
    c->has_forward = true;
    return FATTN_OK;
}

const fh_fe_ops fh_fe_legacy = {
    .name = "legacy",
    .init = legacy_init,
    .free = legacy_free,
    .forward = legacy_forward,
    .save_ctx = legacy_save_ctx,
    .saved = legacy_save_ctx, /* the ctx as it is: reading it changes nothing */
    .backward = legacy_backward,
    .record_private = legacy_record_private,
    .load_save_ctx = legacy_load_save_ctx,
    .load_forward = NULL, /* forward and save_ctx are one call */
    .backward_again = legacy_backward_again,
};
