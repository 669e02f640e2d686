/* The split front end behind the adapter (fe.h): FusedAttnFunc after the
 * refactor — forward_impl, setup_ctx, backward_impl over args structs and
 * fixed slots. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/fp8.h"
#include "fattn/split.h"

#include "fe.h"

_Static_assert((int)FATTN_SPLIT_NSLOTS == (int)FH_SAVED_COUNT,
               "split's slots are the table's rows");
_Static_assert((int)FATTN_SPLIT_SLOT_SOFTMAX_STATS == (int)FH_SAVED_AUX_FIRST,
               "split's aux slots are the table's aux rows");

typedef struct fe_split {
    const fh_fe_env *env;
    fh_case_inputs in; /* views: the env's, or the recorded inputs (load_forward) */
    fattn_fwd_args fargs;
    fattn_split_fwd_result fres;
    bool have_fres;
    fattn_bwd_args bargs;
    fattn_split_saved saved; /* setup_ctx's 16, as save_for_backward keeps them */
    fattn_split_grads grads;
    bool have_grads;
    fattn_fp8_quantizers qs;       /* DPA's quantizers, FP8 cases only */
    fattn_fp8_quantizers *q;       /* the ones handed over: the module's, else qs */
    fattn_fp8_meta meta;           /* DPA's fp8_meta */
    fattn_fp8_quantizer loaded[6]; /* the recorded ones, on a replay */
    /* env->via_wrapper: FusedAttnFunc's ctx, which owns the forward's
     * result, the saved 16 and the bwd args instead of the fields above;
     * f, b and sv point at whichever set the run uses. */
    fattn_split_func_ctx *func;
    const fattn_split_fwd_result *f;
    fattn_bwd_args *b;
    const fattn_split_saved *sv;
} fe_split;

static fattn_status split_init(void **fe, const fh_fe_env *env)
{
#ifndef NDEBUG
    for (int i = 0; i < FH_SAVED_COUNT; i++)
        assert(!strcmp(fattn_split_slot_name((fattn_split_slot)i),
                       fh_saved_name((fh_saved_slot)i)));
#endif
    assert(fe && env && env->spec && env->in && env->gen);
    fe_split *s = calloc(1, sizeof *s);
    if (!s)
        return fattn_error(FATTN_E_NOMEM, "cannot allocate the split front end's state");
    s->env = env;
    s->in = *env->in;
    s->f = &s->fres, s->b = &s->bargs, s->sv = &s->saved;
    if (env->via_wrapper) {
        fattn_status st = fattn_split_func_ctx_init(&s->func);
        if (st != FATTN_OK) {
            free(s);
            return st;
        }
        s->f = &s->func->fwd, s->b = &s->func->bwd, s->sv = &s->func->saved;
    }
    *fe = s;
    return FATTN_OK;
}

static void split_free(void *fe)
{
    fe_split *s = fe;
    if (!s)
        return;
    if (s->have_fres)
        fattn_split_fwd_result_free(&s->fres);
    if (s->have_grads)
        fattn_split_grads_free(&s->grads);
    fattn_split_func_ctx_free(s->func);
    free(s);
}

static void fwd_args_from_case(fe_split *s)
{
    const fh_spec *sp = s->env->spec;
    const fh_case_inputs *in = &s->in;
    fattn_fwd_args *a = &s->fargs;
    fattn_fwd_args_init(a);
    a->q = in->q;
    a->k = in->k;
    a->v = in->v;
    a->attn_bias = in->attn_bias;
    a->softmax_offset = in->softmax_offset;
    a->max_seqlen_q = sp->sq;
    a->max_seqlen_kv = sp->skv;
    a->cu_seqlens_q = in->cu_seqlens_q;
    a->cu_seqlens_kv = in->cu_seqlens_kv;
    a->cu_seqlens_q_padded = in->cu_seqlens_q_padded;
    a->cu_seqlens_kv_padded = in->cu_seqlens_kv_padded;
    a->page_table_k = in->page_table_k; /* FusedAttention: the cache's table, twice */
    a->page_table_v = in->page_table_v;
    a->is_training = sp->is_training ? 1 : 0;
    a->qkv_layout = sp->layout;
    a->attn_bias_type = sp->bias;
    a->attn_mask_type = sp->mask;
    a->softmax_type = sp->softmax;
    a->window_size[0] = in->window[0];
    a->window_size[1] = in->window[1];
    a->bottom_right_diagonal = fh_fe_bottom_right_diagonal(sp);
    a->attn_scale = fh_fe_attn_scale(sp);
    a->dropout_p = fh_fe_dropout(sp);
    a->fast_zero_fill = sp->fast_zero_fill;
    a->fused_attention_backend = FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN;
    a->deterministic = sp->deterministic;
    a->return_max_logit = sp->return_max_logit;
    a->rng_gen = s->env->gen;
    a->layer_number = 1;
    a->engine = s->env->engine;
    a->poison = s->env->poison;
    a->cpu_offload = sp->cpu_offload;
    a->direct_call = sp->raw_func_args;
    a->fp8 = sp->fp8;
    a->fp8_output = sp->fp8_output;
    a->bf16_backward = sp->bf16_backward;
    a->nvte_fp8_dpa_bwd = sp->fp8_dpa_bwd;
    a->nvte_dpa_fp8cs_o_in_f16 = sp->fp8_o_in_f16;
    if (sp->fp8) {
        s->q = s->env->quantizers ? s->env->quantizers : &s->qs;
        if (!s->env->quantizers)
            fh_fe_fp8_quantizers(sp, &s->qs);
        a->quantizers = s->q;
    }
    fh_fe_fp8_meta(sp, &s->meta);
    a->fp8_meta = &s->meta;
    if (fattn_dtype_is_fp8(in->q.dtype)) { /* Float8Tensors: what they carry */
        a->in_scale_inv[0] = in->q_scale_inv;
        a->in_scale_inv[1] = in->k_scale_inv;
        a->in_scale_inv[2] = in->v_scale_inv;
        a->in_nominal_dtype = sp->dtype;
    }
}

/* An FP8 d_out's _scale_inv (NaN: d_out is not FP8). */
static float d_out_scale_inv(const fe_split *s)
{
    float si = s->env->in->d_out_scale_inv;
    return si != 0.0f ? si : NAN;
}

/* The grads' _scale_inv as the runner records it (0: F16 grads). */
static float grads_scale_inv(float si)
{
    return isnan(si) ? 0.0f : si;
}

/* The scale_inv of the saved fp8 tensors from their datasets in `sc`. */
static void load_fp8_scale_inv(const fh_h5_node *sc, float si[4])
{
    static const char *const roles[4] = {"q_fp8", "k_fp8", "v_fp8", "out_fp8"};
    for (int i = 0; i < 4; i++) {
        float v = fh_fe_node_scale_inv(sc, roles[i]);
        si[i] = v != 0.0f ? v : NAN;
    }
}

/* to_save entry i, or its dedup source when forward left it empty. */
static fattn_tensor resolved_entry(const fe_split *s, int i)
{
    const fattn_split_fwd_result *f = s->f;
    assert(i >= 0 && i < FATTN_SPLIT_NTO_SAVE);
    if (!fattn_tensor_is_empty(&f->to_save.t[i]))
        return f->to_save.t[i];
    switch (f->ctx_attrs.saved_from[i]) {
    case FATTN_SPLIT_SRC_Q: return s->in.q;
    case FATTN_SPLIT_SRC_K: return s->in.k;
    case FATTN_SPLIT_SRC_V: return s->in.v;
    case FATTN_SPLIT_SRC_ATTN_BIAS: return s->in.attn_bias;
    case FATTN_SPLIT_SRC_SOFTMAX_OFFSET: return s->in.softmax_offset;
    case FATTN_SPLIT_SRC_OUT: return f->out;
    default: return fattn_tensor_empty();
    }
}

/* The record name of to_save entry i: its slot's. */
static const char *entry_role(int i)
{
    return fh_saved_name((fh_saved_slot)fattn_split_to_save_slot(i));
}

/* _fused_attn_forward_impl, or FusedAttnFunc.forward (which runs setup_ctx
 * as well) through the wrapper. */
static fattn_status split_forward(void *fe, fh_fe_forward *res)
{
    fe_split *s = fe;
    fwd_args_from_case(s);
    fattn_status st;
    if (s->func) {
        /* FusedAttnFunc.forward's return value, recorded apart (returned/):
         * out_ret and max_logit, which the ctx's forward result need not be */
        st = fattn_split_func_forward(s->func, &s->in.q, &s->in.k, &s->in.v, &s->in.attn_bias,
                                      &s->in.softmax_offset, &s->fargs, &res->ret_out,
                                      &res->ret_max_logit);
        res->returned = true;
        float si = s->func->fwd.out_scale_inv;
        res->ret_out_scale_inv =
            (fattn_dtype_is_fp8(res->ret_out.dtype) && !isnan(si)) ? si : 0.0f;
        if (st != FATTN_OK)
            return st;
    } else {
        st = fattn_split_forward_impl(&s->fargs, &s->in.q, &s->in.k, &s->in.v,
                                      &s->in.attn_bias, &s->in.softmax_offset, &s->fres);
        if (st != FATTN_OK)
            return st;
        s->have_fres = true;
    }
    res->out = s->f->out;
    res->out_scale_inv = isnan(s->f->out_scale_inv) ? 0.0f : s->f->out_scale_inv;
    res->max_logit = s->f->max_logit;
    for (int i = 0; i < FH_SAVED_NAUX; i++)
        res->aux[i] = fattn_tensor_empty();
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++) {
        int slot = (int)fattn_split_to_save_slot(i);
        if (slot >= FH_SAVED_AUX_FIRST)
            res->aux[slot - FH_SAVED_AUX_FIRST] = resolved_entry(s, i);
    }
    return FATTN_OK;
}

/* forward/_impl: the 12 to-save entries as forward_impl handed them back
 * and where each deduplicated one comes from. */
static fattn_status record_forward_impl(const fe_split *s, fh_h5_node *impl)
{
    fattn_status st;
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++) {
        const char *role = entry_role(i);
        if ((st = fh_fe_put_tensor(impl, role, &s->f->to_save.t[i])) != FATTN_OK)
            return st;
        fattn_split_source src = s->f->ctx_attrs.saved_from[i];
        if (src != FATTN_SPLIT_SRC_NONE) {
            char name[64];
            snprintf(name, sizeof name, "saved_from.%s", role);
            if ((st = fh_h5_node_set_string(impl, name, fattn_split_source_name(src))) !=
                FATTN_OK)
                return st;
        }
    }
    return FATTN_OK;
}

/* The bwd args' saved tensors, by slot (members named as the table). */
static void bwd_slots(fattn_bwd_args *b, fattn_tensor *slot[FH_SAVED_COUNT])
{
    int i = 0;
#define SLOT_ROW(role, pack) slot[i++] = &b->role;
    FH_SAVED_SLOTS(SLOT_ROW)
#undef SLOT_ROW
    assert(i == FH_SAVED_COUNT);
}

/* backward/_impl: the fingerprints of the 16 saved tensors as
 * setup_saved_tensors unpacked them into the bwd args, the far side of the
 * save/restore seam (verify holds them against save_ctx, the near side). */
static fattn_status record_backward_impl(fe_split *s, fh_h5_node *impl)
{
    fattn_tensor *slot[FH_SAVED_COUNT];
    bwd_slots(s->b, slot);
    fattn_status st;
    for (int i = 0; i < FH_SAVED_COUNT; i++)
        if ((st = fh_fe_put_fingerprint(impl, fh_saved_name((fh_saved_slot)i), slot[i])) !=
            FATTN_OK)
            return st;
    return FATTN_OK;
}

static fattn_status split_record_private(void *fe, fh_state state, fh_h5_node *group)
{
    fe_split *s = fe;
    if (state != FH_STATE_FORWARD && state != FH_STATE_BACKWARD)
        return FATTN_OK;
    fh_h5_node *impl;
    fattn_status st = fh_h5_node_group(group, "_impl", &impl);
    if (st != FATTN_OK)
        return st;
    if (state == FH_STATE_FORWARD) {
        assert(s->have_fres || s->func); /* recorded only after its forward succeeded */
        return record_forward_impl(s, impl);
    }
    assert(s->have_grads || s->func);
    return record_backward_impl(s, impl);
}

static void record_from_bwd(fh_ctx_record *dst, const fattn_bwd_args *src)
{
    FH_CTX_FIELDS(FH_CTX_COPY_FIELD)
}

static void bwd_from_record(fattn_bwd_args *dst, const fh_ctx_record *src)
{
    FH_CTX_FIELDS(FH_CTX_COPY_FIELD)
}

/* What the ctx holds: the saved 16 and the bwd args. */
static fattn_status split_saved(void *fe, fh_fe_saved *res)
{
    fe_split *s = fe;
    for (int i = 0; i < FH_SAVED_COUNT; i++)
        res->t[i] = s->sv->t[i];
    for (int i = 0; i < 4; i++) /* q_fp8 k_fp8 v_fp8 out_fp8 lead the table */
        res->scale_inv[i] = isnan(s->b->fp8_scale_inv[i]) ? 0.0f : s->b->fp8_scale_inv[i];
    record_from_bwd(&res->rec, s->b);
    return FATTN_OK;
}

/* _fused_attn_setup_ctx. */
static fattn_status split_save_ctx(void *fe, fh_fe_saved *res)
{
    fe_split *s = fe;
    if (!s->func) { /* the wrapper's forward ran setup_ctx already */
        fattn_status st = fattn_split_setup_ctx(&s->bargs, &s->fargs, &s->fres.out,
                                                &s->fres.ctx_attrs, &s->fres.to_save, &s->saved);
        if (st != FATTN_OK)
            return st;
    }
    return split_saved(fe, res);
}

/* FusedAttnFunc.backward: its six outputs are the grads of (q, k, v,
 * attn_bias, softmax_offset, fwd_args) (TE 2.20.2 backends.py:2286); the
 * last, for the args, must be None. */
static fattn_status split_wrapper_backward(fe_split *s, const fattn_tensor *d_out,
                                           fh_fe_grads *res)
{
    fattn_tensor g6[6];
    s->func->bwd.d_out_scale_inv = d_out_scale_inv(s);
    fattn_status st = fattn_split_func_backward(s->func, d_out, g6);
    if (st != FATTN_OK)
        return st;
    if (!fattn_tensor_is_empty(&g6[5]))
        return fattn_error(FATTN_E_INTERNAL,
                           "split wrapper: FusedAttnFunc.backward returned a gradient for "
                           "fwd_args (output 6 of 6), which must be None");
    res->dq = g6[0];
    res->dk = g6[1];
    res->dv = g6[2];
    res->d_bias = g6[3];
    res->d_softmax_offset = g6[4];
    res->grads_scale_inv = grads_scale_inv(s->func->grads.grads_scale_inv);
    if (s->b->fp8) {
        res->dO_quantizer = s->b->dO_quantizer;
        res->dP_quantizer = s->b->dP_quantizer;
        res->dQKV_quantizer = s->b->dQKV_quantizer;
    }
    return FATTN_OK;
}

/* _fused_attn_backward_impl. */
static fattn_status split_backward(void *fe, const fattn_tensor *d_out, fh_fe_grads *res)
{
    fe_split *s = fe;
    assert(s && d_out);
    if (s->func)
        return split_wrapper_backward(s, d_out, res);
    s->bargs.d_out = *d_out;
    s->bargs.d_out_scale_inv = d_out_scale_inv(s);
    fattn_split_setup_saved_tensors(&s->bargs, &s->saved); /* backends.py:2284 */
    fattn_status st = fattn_split_backward_impl(&s->bargs, &s->grads);
    if (st != FATTN_OK)
        return st;
    s->have_grads = true;
    const fattn_split_grads *g = &s->grads;
    res->dq = g->dq;
    res->dk = g->dk;
    res->dv = g->dv;
    res->d_bias = g->d_bias;
    res->d_softmax_offset = g->d_softmax_offset;
    res->grads_scale_inv = grads_scale_inv(g->grads_scale_inv);
    if (s->b->fp8) {
        res->dO_quantizer = s->b->dO_quantizer;
        res->dP_quantizer = s->b->dP_quantizer;
        res->dQKV_quantizer = s->b->dQKV_quantizer;
    }
    return FATTN_OK;
}

/* FusedAttnFunc.backward once more on the wrapper's ctx; the helpers
 * have no ctx of their own (the harness wires them), so nothing applies. */
static fattn_status split_backward_again(void *fe, const fattn_tensor *d_out, bool *applies)
{
    fe_split *s = fe;
    *applies = s->func != NULL;
    if (!s->func)
        return FATTN_OK;
    fattn_tensor g6[6];
    return fattn_split_func_backward(s->func, d_out, g6);
}

/* The recorded save_ctx into the bwd args. */
static fattn_status split_load_save_ctx(void *fe, const fh_h5_node *sc,
                                        const fh_ctx_record *rec)
{
    fe_split *s = fe;
    if (s->func)
        return fattn_error(FATTN_E_STATE, "split wrapper: FusedAttnFunc has no replay boundary "
                           "(forward and setup_ctx are one call)");
    fattn_bwd_args *b = &s->bargs;
    fattn_bwd_args_init(b);
    for (int i = 0; i < FH_SAVED_COUNT; i++)
        s->saved.t[i] = fh_fe_node_tensor(sc, fh_saved_name((fh_saved_slot)i));
    fh_ctx_record own = *rec;
    fh_fe_own_quantizers(&own, s->loaded);
    bwd_from_record(b, &own);
    load_fp8_scale_inv(sc, b->fp8_scale_inv);
    b->nvte_dpa_fp8cs_o_in_f16 = s->env->spec->fp8_o_in_f16;
    b->engine = s->env->engine;
    b->poison = s->env->poison;
    return FATTN_OK;
}

/* forward/_impl's saved_from.<role> for to_save entry i into ctx_attrs. */
static fattn_status load_saved_from(const fh_h5_node *impl, int i,
                                    fattn_split_ctx_attrs *ca)
{
    assert(i >= 0 && i < FATTN_SPLIT_NTO_SAVE && impl);
    char name[64];
    snprintf(name, sizeof name, "saved_from.%s", entry_role(i));
    const fh_h5_attr *a = fh_h5_node_attr(impl, name);
    ca->saved_from[i] = FATTN_SPLIT_SRC_NONE;
    if (!a)
        return FATTN_OK;
    for (int src = FATTN_SPLIT_SRC_Q; src <= FATTN_SPLIT_SRC_OUT; src++)
        if (a->kind == FH_H5_ATTR_STRING &&
            !strcmp(a->s, fattn_split_source_name((fattn_split_source)src))) {
            ca->saved_from[i] = (fattn_split_source)src;
            return FATTN_OK;
        }
    return fattn_error(FATTN_E_INVALID_FILE, "forward/_impl: %s is not a source", name);
}

static void attrs_from_record(fattn_split_ctx_attrs *dst, const fh_ctx_record *src)
{
    FH_CTX_FIELDS(FH_CTX_COPY_DERIVED)
}

/* The case's window and diagonal as the forward saw them (the recorded
 * inputs lack them): resolved from the spec as inputs.c resolves them. */
static fattn_status resolve_window(fe_split *s)
{
    const fh_spec *sp = s->env->spec;
    fattn_status st = fh_case_window(sp, s->in.window, NULL);
    if (st != FATTN_OK)
        return st;
    fh_case_inputs tmp;
    if ((st = fh_inputs_make(sp, &tmp)) != FATTN_OK)
        return st;
    s->in.bottom_right_diagonal = tmp.bottom_right_diagonal;
    fh_inputs_free(&tmp);
    return FATTN_OK;
}

/* Split's forward result rebuilt from the recorded inputs and forward (the
 * `--from forward` boundary): the to-save slots as the forward handed them
 * back (forward/_impl), their saved_from names, and the ctx attributes
 * forward_impl derives (the f16 path's, as recorded in save_ctx). */
static fattn_status split_load_forward(void *fe, const fh_h5_node *recorded)
{
    fe_split *s = fe;
    if (s->func)
        return fattn_error(FATTN_E_STATE, "split wrapper: FusedAttnFunc has no replay boundary "
                           "(forward and setup_ctx are one call)");
    const fh_h5_node *in = fh_h5_node_find(recorded, "inputs");
    const fh_h5_node *fw = fh_h5_node_find(recorded, "forward");
    const fh_h5_node *impl = fw ? fh_h5_node_find(fw, "_impl") : NULL;
    if (!in || !fw || !impl)
        return fattn_error(FATTN_E_INVALID_FILE,
                           "--from forward needs inputs/, forward/ and forward/_impl/ "
                           "(a run of the split front end)");
    fattn_status st = resolve_window(s);
    if (st != FATTN_OK)
        return st;
    fwd_args_from_case(s);
    fattn_split_fwd_result *f = &s->fres;
    memset(f, 0, sizeof *f);
    f->out = fh_fe_node_tensor(fw, "out");
    f->max_logit = fh_fe_node_tensor(fw, "max_logit");
    for (int i = 0; i < FATTN_SPLIT_NTO_SAVE; i++) {
        f->to_save.t[i] = fh_fe_node_tensor(impl, entry_role(i));
        if ((st = load_saved_from(impl, i, &f->ctx_attrs)) != FATTN_OK)
            return st;
    }
    const fh_h5_node *sc = fh_h5_node_find(recorded, "save_ctx");
    fh_ctx_record rec;
    if (!sc)
        return fattn_error(FATTN_E_INVALID_FILE, "--from forward: save_ctx/ missing");
    if ((st = fh_ctx_record_read(sc, &rec)) != FATTN_OK)
        return st;
    fh_fe_own_quantizers(&rec, s->loaded);
    attrs_from_record(&f->ctx_attrs, &rec);
    load_fp8_scale_inv(sc, f->ctx_attrs.fp8_scale_inv);
    return FATTN_OK;
}

const fh_fe_ops fh_fe_split = {
    .name = "split",
    .init = split_init,
    .free = split_free,
    .forward = split_forward,
    .save_ctx = split_save_ctx,
    .saved = split_saved,
    .backward = split_backward,
    .record_private = split_record_private,
    .load_save_ctx = split_load_save_ctx,
    .load_forward = split_load_forward,
    .backward_again = split_backward_again,
};
