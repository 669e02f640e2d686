/* The harness state machine and its observers (see runner.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/cudnn.h"
#include "fattn/legacy.h"
#include "fattn/split.h"

#include "inputs.h"
#include "runner.h"

/* ---- names and the transition table ------------------------------------ */

static const char *const impl_names[] = {"legacy", "split"};
static const char *const state_names[] = {"begin", "inputs", "forward", "save_ctx", "backward"};

const char *fattn_impl_name(fattn_impl i)
{
    return (i == FATTN_IMPL_LEGACY || i == FATTN_IMPL_SPLIT) ? impl_names[i] : "?";
}

fattn_status fattn_impl_parse(const char *s, fattn_impl *out)
{
    for (int i = 0; i < 2; i++)
        if (strcmp(s, impl_names[i]) == 0) {
            *out = (fattn_impl)i;
            return FATTN_OK;
        }
    return fattn_error(FATTN_E_PARSE, "unknown implementation '%s' (legacy, split)", s);
}

const char *fattn_state_name(fattn_state s)
{
    return (s >= FATTN_STATE_BEGIN && s < FATTN_STATE_COUNT) ? state_names[s] : "?";
}

fattn_status fattn_state_parse(const char *s, fattn_state *out)
{
    for (int i = 0; i < FATTN_STATE_COUNT; i++)
        if (strcmp(s, state_names[i]) == 0) {
            *out = (fattn_state)i;
            return FATTN_OK;
        }
    return fattn_error(FATTN_E_PARSE, "unknown state '%s' (inputs, forward, save_ctx, backward)",
                       s);
}

/* allowed[from][to]: each state has exactly one successor. */
static const bool allowed[FATTN_STATE_COUNT][FATTN_STATE_COUNT] = {
    [FATTN_STATE_BEGIN][FATTN_STATE_INPUTS] = true,
    [FATTN_STATE_INPUTS][FATTN_STATE_FORWARD] = true,
    [FATTN_STATE_FORWARD][FATTN_STATE_SAVE_CTX] = true,
    [FATTN_STATE_SAVE_CTX][FATTN_STATE_BACKWARD] = true,
};

fattn_status fattn_state_check(fattn_state from, fattn_state to)
{
    if (from < 0 || from >= FATTN_STATE_COUNT || to < 0 || to >= FATTN_STATE_COUNT)
        return fattn_error(FATTN_E_STATE, "invalid state value (%d -> %d)", (int)from, (int)to);
    if (!allowed[from][to])
        return fattn_error(FATTN_E_STATE, "invalid step from state %s to state %s",
                           fattn_state_name(from), fattn_state_name(to));
    return FATTN_OK;
}

/* ---- the backward-read set (save_ctx attributes) ----------------------- */

/* The ctx fields backward reads, as TE names them (backends.py:1635-1726
 * minus fp8_recipe, fp8_meta, is_output_fp8 and tensor_objects). Quantizers,
 * qkv_type and qkv_scale_inv_format are None on the f16 path and, as None
 * values, recorded by their absence. */
typedef struct ctx_record {
    bool fp8, is_input_fp8, bf16_backward, fast_zero_fill, use_FAv2_bwd, deterministic;
    bool bottom_right_diagonal;
    fattn_dtype nominal_dtype;
    int64_t layer_number, max_seqlen_q, max_seqlen_kv, window_size[2];
    const char *qkv_type;
    float attn_scale, dropout_p;
    fattn_qkv_layout qkv_layout, dqkv_layout;
    fattn_qkv_format o_format, qkv_scale_inv_format;
    fattn_bias_type attn_bias_type;
    fattn_mask_type attn_mask_type;
    fattn_softmax_type softmax_type;
    fattn_te_backend fused_attention_backend;
} ctx_record;

static fattn_status ctx_record_write(const ctx_record *r, fattn_h5_node *n)
{
    fattn_status st;
#define PUT(call)                                                                          \
    if ((st = (call)) != FATTN_OK)                                                         \
        return st;
    PUT(fattn_h5_node_set_uint8(n, "fp8", r->fp8));
    PUT(fattn_h5_node_set_string(n, "nominal_dtype", fattn_dtype_name(r->nominal_dtype)));
    PUT(fattn_h5_node_set_uint8(n, "is_input_fp8", r->is_input_fp8));
    PUT(fattn_h5_node_set_uint8(n, "bf16_backward", r->bf16_backward));
    PUT(fattn_h5_node_set_int64(n, "layer_number", r->layer_number));
    if (r->qkv_type)
        PUT(fattn_h5_node_set_string(n, "qkv_type", r->qkv_type));
    PUT(fattn_h5_node_set_int64(n, "max_seqlen_q", r->max_seqlen_q));
    PUT(fattn_h5_node_set_int64(n, "max_seqlen_kv", r->max_seqlen_kv));
    PUT(fattn_h5_node_set_float32(n, "attn_scale", r->attn_scale));
    PUT(fattn_h5_node_set_float32(n, "dropout_p", r->dropout_p));
    PUT(fattn_h5_node_set_uint8(n, "fast_zero_fill", r->fast_zero_fill));
    PUT(fattn_h5_node_set_string(n, "qkv_layout", fattn_layout_name(r->qkv_layout)));
    PUT(fattn_h5_node_set_string(n, "o_format", fattn_format_name(r->o_format)));
    if (r->qkv_scale_inv_format != FATTN_FORMAT_NOT_SET)
        PUT(fattn_h5_node_set_string(n, "qkv_scale_inv_format",
                                     fattn_format_name(r->qkv_scale_inv_format)));
    PUT(fattn_h5_node_set_string(n, "dqkv_layout", fattn_layout_name(r->dqkv_layout)));
    PUT(fattn_h5_node_set_string(n, "attn_bias_type", fattn_bias_type_name(r->attn_bias_type)));
    PUT(fattn_h5_node_set_string(n, "attn_mask_type", fattn_mask_type_name(r->attn_mask_type)));
    PUT(fattn_h5_node_set_string(n, "softmax_type", fattn_softmax_type_name(r->softmax_type)));
    PUT(fattn_h5_node_set_int64_pair(n, "window_size", r->window_size));
    PUT(fattn_h5_node_set_uint8(n, "bottom_right_diagonal", r->bottom_right_diagonal));
    PUT(fattn_h5_node_set_string(n, "fused_attention_backend",
                                 fattn_te_backend_name(r->fused_attention_backend)));
    PUT(fattn_h5_node_set_uint8(n, "use_FAv2_bwd", r->use_FAv2_bwd));
    PUT(fattn_h5_node_set_uint8(n, "deterministic", r->deterministic));
#undef PUT
    return FATTN_OK;
}

static fattn_status attr_get(const fattn_h5_node *n, const char *name, fattn_h5_attr_kind kind,
                             bool optional, const fattn_h5_attr **out)
{
    const fattn_h5_attr *a = fattn_h5_node_attr(n, name);
    *out = a;
    if (!a)
        return optional ? FATTN_OK
                        : fattn_error(FATTN_E_INVALID_FILE, "save_ctx: attribute '%s' is missing",
                                      name);
    if (a->kind != kind)
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: attribute '%s' has the wrong type",
                           name);
    return FATTN_OK;
}

static fattn_status ctx_record_read(const fattn_h5_node *n, ctx_record *r)
{
    memset(r, 0, sizeof *r);
    const fattn_h5_attr *a;
    fattn_status st;
#define U8(field)                                                                          \
    if ((st = attr_get(n, #field, FATTN_H5_ATTR_UINT8, false, &a)))                        \
        return st;                                                                         \
    if (a->u8 > 1)                                                                         \
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: '%s' is %u, not a boolean",     \
                           #field, a->u8);                                                 \
    r->field = a->u8 != 0;
#define I64(field)                                                                         \
    if ((st = attr_get(n, #field, FATTN_H5_ATTR_INT64, false, &a)))                        \
        return st;                                                                         \
    r->field = a->i64[0];
#define F32(field)                                                                         \
    if ((st = attr_get(n, #field, FATTN_H5_ATTR_FLOAT32, false, &a)))                      \
        return st;                                                                         \
    r->field = a->f32;
#define ENUM(field, parse)                                                                 \
    if ((st = attr_get(n, #field, FATTN_H5_ATTR_STRING, false, &a)))                       \
        return st;                                                                         \
    if ((st = parse(a->s, &r->field)))                                                     \
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: attribute '%s': %s", #field,   \
                           fattn_last_error());
    U8(fp8);
    ENUM(nominal_dtype, fattn_dtype_parse);
    U8(is_input_fp8);
    U8(bf16_backward);
    I64(layer_number);
    if ((st = attr_get(n, "qkv_type", FATTN_H5_ATTR_STRING, true, &a)))
        return st;
    r->qkv_type = a ? a->s : NULL;
    I64(max_seqlen_q);
    I64(max_seqlen_kv);
    F32(attn_scale);
    F32(dropout_p);
    U8(fast_zero_fill);
    ENUM(qkv_layout, fattn_layout_parse);
    ENUM(o_format, fattn_format_parse);
    if ((st = attr_get(n, "qkv_scale_inv_format", FATTN_H5_ATTR_STRING, true, &a)))
        return st;
    r->qkv_scale_inv_format = FATTN_FORMAT_NOT_SET;
    if (a && (st = fattn_format_parse(a->s, &r->qkv_scale_inv_format)))
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: qkv_scale_inv_format: %s",
                           fattn_last_error());
    ENUM(dqkv_layout, fattn_layout_parse);
    ENUM(attn_bias_type, fattn_bias_type_parse);
    ENUM(attn_mask_type, fattn_mask_type_parse);
    ENUM(softmax_type, fattn_softmax_type_parse);
    if ((st = attr_get(n, "window_size", FATTN_H5_ATTR_INT64_PAIR, false, &a)))
        return st;
    r->window_size[0] = a->i64[0];
    r->window_size[1] = a->i64[1];
    U8(bottom_right_diagonal);
    ENUM(fused_attention_backend, fattn_te_backend_parse);
    U8(use_FAv2_bwd);
    U8(deterministic);
#undef U8
#undef I64
#undef F32
#undef ENUM
    if (r->max_seqlen_q <= 0 || r->max_seqlen_kv <= 0)
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: max_seqlen_q/max_seqlen_kv "
                           "(%lld, %lld) out of range (must be positive)", (long long)r->max_seqlen_q,
                           (long long)r->max_seqlen_kv);
    if (r->window_size[0] < -1 || r->window_size[1] < -1)
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: window_size (%lld, %lld) out of range (below -1)",
                           (long long)r->window_size[0], (long long)r->window_size[1]);
    if (!(r->dropout_p >= 0.0f && r->dropout_p < 1.0f))
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: dropout_p %g out of range [0, 1)",
                           (double)r->dropout_p);
    if (!isfinite(r->attn_scale))
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: attn_scale out of range (not finite)");
    return FATTN_OK;
}

fattn_status fattn_save_ctx_validate(const fattn_h5_node *save_ctx)
{
    ctx_record rec;
    return ctx_record_read(save_ctx, &rec);
}

/* ---- recording helpers --------------------------------------------------- */

static fattn_status put_tensor(fattn_h5_node *g, const char *name, const fattn_tensor *t)
{
    if (!t || fattn_tensor_is_empty(t))
        return FATTN_OK; /* an empty slot: its absence is data */
    return fattn_h5_node_add_tensor(g, name, t, NULL);
}

static fattn_status put_group(fattn_h5_node *parent, const char *name, fattn_h5_node **out)
{
    return fattn_h5_node_group(parent, name, out);
}

/* Saved-tensor roles, in TE's save order (== split slots). */
static const char *const roles[16] = {
    "q_fp8", "k_fp8", "v_fp8", "out_fp8", "q", "k", "v", "out",
    "cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded",
    "softmax_stats", "rng_state", "aux_bias", "aux_softmax_offset"};

static bool bias_in_pack(fattn_bias_type t)
{
    return t == FATTN_BIAS_PRE_SCALE_BIAS || t == FATTN_BIAS_POST_SCALE_BIAS;
}

/* TE's aux list -> the four named slots (softmax_stats, rng_state,
 * aux_bias, aux_softmax_offset). */
static fattn_status aux_list_to_slots(const fattn_tensor *list, int n, fattn_bias_type bias,
                                      fattn_softmax_type softmax, fattn_tensor slots[4])
{
    for (int i = 0; i < 4; i++)
        slots[i] = fattn_tensor_empty();
    int want = 2 + bias_in_pack(bias) + (softmax != FATTN_SOFTMAX_VANILLA);
    if (n != want)
        return fattn_error(FATTN_E_INTERNAL, "aux list has %d entries, expected %d", n, want);
    int k = 0;
    slots[0] = list[k++];
    slots[1] = list[k++];
    if (bias_in_pack(bias))
        slots[2] = list[k++];
    if (softmax != FATTN_SOFTMAX_VANILLA)
        slots[3] = list[k++];
    return FATTN_OK;
}

/* ---- one case run ---------------------------------------------------------- */

typedef struct case_run {
    const fattn_spec *spec;
    const fattn_run_opts *opts;
    fattn_state state;
    fattn_case_inputs in;
    bool have_inputs;
    fattn_rng_gen gen;
    fattn_h5_node *node; /* /cases/<id> */
    /* legacy */
    fattn_legacy_ctx *lctx;
    fattn_tensor l_out, l_max_logit;
    fattn_tensor l_grads[FATTN_LEGACY_NGRADS];
    /* split */
    fattn_fwd_args fargs;
    fattn_split_fwd_result fres;
    bool have_fres;
    fattn_bwd_args bargs;
    fattn_split_grads sgrads;
    bool have_sgrads;
} case_run;

static void case_run_free(case_run *r)
{
    if (r->lctx)
        fattn_legacy_ctx_free(r->lctx);
    if (r->have_fres)
        fattn_split_fwd_result_free(&r->fres);
    if (r->have_sgrads)
        fattn_split_grads_free(&r->sgrads);
    if (r->have_inputs)
        fattn_inputs_free(&r->in);
}

static fattn_status step(case_run *r, fattn_state to)
{
    fattn_status st = fattn_state_check(r->state, to);
    if (st == FATTN_OK)
        r->state = to;
    return st;
}

/* INPUTS: generate and record. */
static fattn_status do_inputs(case_run *r)
{
    fattn_status st = step(r, FATTN_STATE_INPUTS);
    if (st != FATTN_OK)
        return st;
    if ((st = fattn_inputs_make(r->spec, &r->in)) != FATTN_OK)
        return st;
    r->have_inputs = true;
    fattn_h5_node *g;
    if ((st = put_group(r->node, "inputs", &g)))
        return st;
    const fattn_case_inputs *in = &r->in;
    if ((st = put_tensor(g, "q", &in->q)) || (st = put_tensor(g, "k", &in->k)) ||
        (st = put_tensor(g, "v", &in->v)) || (st = put_tensor(g, "attn_bias", &in->attn_bias)) ||
        (st = put_tensor(g, "softmax_offset", &in->softmax_offset)) ||
        (st = put_tensor(g, "cu_seqlens_q", &in->cu_seqlens_q)) ||
        (st = put_tensor(g, "cu_seqlens_kv", &in->cu_seqlens_kv)) ||
        (st = put_tensor(g, "cu_seqlens_q_padded", &in->cu_seqlens_q_padded)) ||
        (st = put_tensor(g, "cu_seqlens_kv_padded", &in->cu_seqlens_kv_padded)) ||
        (st = put_tensor(g, "d_out", &in->d_out)))
        return st;
    return FATTN_OK;
}

static float spec_scale(const fattn_spec *s)
{
    return s->attn_scale_set ? (float)s->attn_scale : NAN; /* NaN: TE's None */
}

static float spec_dropout(const fattn_spec *s)
{
    /* FusedAttention passes 0.0 when not training. */
    return s->is_training ? (float)s->dropout_p : 0.0f;
}

static fattn_status record_forward(case_run *r, const fattn_tensor *out,
                                   const fattn_tensor *max_logit, const fattn_tensor aux[4],
                                   fattn_h5_node **group)
{
    fattn_h5_node *g, *a;
    fattn_status st;
    if ((st = put_group(r->node, "forward", &g)) || (st = put_tensor(g, "out", out)) ||
        (st = put_tensor(g, "max_logit", max_logit)) || (st = put_group(g, "aux", &a)))
        return st;
    for (int i = 0; i < 4; i++)
        if ((st = put_tensor(a, roles[12 + i], &aux[i])))
            return st;
    /* TE's forward draws its rng_state from the global generator and
     * advances it: the generator after the forward is an effect of the
     * forward that a later call would see, so it is recorded too. */
    if ((st = fattn_h5_node_set_int64(g, "rng_gen_seed", (int64_t)r->gen.seed)) ||
        (st = fattn_h5_node_set_int64(g, "rng_gen_offset", (int64_t)r->gen.offset)))
        return st;
    /* which cuDNN engine config ran: provenance, never counted by diff */
    if (fattn_engine_supports(r->opts->engine, FATTN_ENGINE_Q_PLAN_TAG) &&
        (st = fattn_h5_node_set_string(g, "prov_engine_tag",
                                       fattn_engine_last_report(r->opts->engine).tag)))
        return st;
    *group = g;
    return FATTN_OK;
}

/* FORWARD, legacy: FusedAttnFunc.forward with its 36 positional inputs. */
static fattn_status forward_legacy(case_run *r)
{
    const fattn_spec *s = r->spec;
    const fattn_case_inputs *in = &r->in;
    fattn_status st = fattn_legacy_ctx_init(&r->lctx, r->opts->engine);
    if (st != FATTN_OK)
        return st;
    r->lctx->poison = r->opts->poison;
    fattn_tensor none = fattn_tensor_empty();
    st = fattn_legacy_forward(
        r->lctx, s->is_training, s->sq, s->skv, &in->cu_seqlens_q, &in->cu_seqlens_kv,
        &in->cu_seqlens_q_padded, &in->cu_seqlens_kv_padded, &none, &none, &in->q, &in->k,
        &in->v, &in->attn_bias, spec_scale(s), spec_dropout(s), s->fast_zero_fill, s->layout,
        s->bias, s->mask, s->softmax, in->window, in->bottom_right_diagonal ? 1 : 0, &r->gen,
        FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN, false, false, NULL, NULL, s->deterministic,
        &in->softmax_offset, false, false, 1, s->return_max_logit, &none, &none, &r->l_out,
        &r->l_max_logit);
    if (st != FATTN_OK)
        return st;
    const fattn_legacy_ctx *c = r->lctx;
    fattn_tensor aux[4];
    st = aux_list_to_slots(c->tensor_objects + FATTN_LEGACY_SAVED_AUX,
                           c->n_saved - FATTN_LEGACY_SAVED_AUX, c->attn_bias_type,
                           c->softmax_type, aux);
    fattn_h5_node *g;
    if (st == FATTN_OK)
        st = record_forward(r, &r->l_out, &r->l_max_logit, aux, &g);
    return st;
}

static void fwd_args_from_spec(case_run *r)
{
    const fattn_spec *s = r->spec;
    const fattn_case_inputs *in = &r->in;
    fattn_fwd_args *a = &r->fargs;
    fattn_fwd_args_init(a);
    a->q = in->q;
    a->k = in->k;
    a->v = in->v;
    a->attn_bias = in->attn_bias;
    a->softmax_offset = in->softmax_offset;
    a->max_seqlen_q = s->sq;
    a->max_seqlen_kv = s->skv;
    a->cu_seqlens_q = in->cu_seqlens_q;
    a->cu_seqlens_kv = in->cu_seqlens_kv;
    a->cu_seqlens_q_padded = in->cu_seqlens_q_padded;
    a->cu_seqlens_kv_padded = in->cu_seqlens_kv_padded;
    a->is_training = s->is_training ? 1 : 0;
    a->qkv_layout = s->layout;
    a->attn_bias_type = s->bias;
    a->attn_mask_type = s->mask;
    a->softmax_type = s->softmax;
    a->window_size[0] = in->window[0];
    a->window_size[1] = in->window[1];
    a->bottom_right_diagonal = in->bottom_right_diagonal ? 1 : 0;
    a->attn_scale = spec_scale(s);
    a->dropout_p = spec_dropout(s);
    a->fast_zero_fill = s->fast_zero_fill;
    a->fused_attention_backend = FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN;
    a->deterministic = s->deterministic;
    a->return_max_logit = s->return_max_logit;
    a->rng_gen = &r->gen;
    a->layer_number = 1;
    a->engine = r->opts->engine;
    a->poison = r->opts->poison;
}

/* A slot's tensor, or its dedup source when forward left it empty. */
static fattn_tensor split_resolved_slot(const case_run *r, int slot)
{
    const fattn_split_fwd_result *f = &r->fres;
    if (!fattn_tensor_is_empty(&f->to_save.t[slot]))
        return f->to_save.t[slot];
    switch (f->ctx_attrs.saved_from[slot]) {
    case FATTN_SPLIT_SRC_Q: return r->in.q;
    case FATTN_SPLIT_SRC_K: return r->in.k;
    case FATTN_SPLIT_SRC_V: return r->in.v;
    case FATTN_SPLIT_SRC_ATTN_BIAS: return r->in.attn_bias;
    case FATTN_SPLIT_SRC_SOFTMAX_OFFSET: return r->in.softmax_offset;
    case FATTN_SPLIT_SRC_OUT: return f->out;
    default: return fattn_tensor_empty();
    }
}

/* FORWARD, split: _fused_attn_forward_impl. */
static fattn_status forward_split(case_run *r)
{
    fwd_args_from_spec(r);
    fattn_status st = fattn_split_forward_impl(&r->fargs, &r->in.q, &r->in.k, &r->in.v,
                                               &r->in.attn_bias, &r->in.softmax_offset,
                                               &r->fres);
    if (st != FATTN_OK)
        return st;
    r->have_fres = true;
    fattn_tensor aux[4];
    for (int i = 0; i < 4; i++)
        aux[i] = split_resolved_slot(r, FATTN_SPLIT_SLOT_SOFTMAX_STATS + i);
    fattn_h5_node *g, *impl;
    if ((st = record_forward(r, &r->fres.out, &r->fres.max_logit, aux, &g)) ||
        (st = put_group(g, "_impl", &impl)))
        return st;
    for (int i = 0; i < FATTN_SPLIT_NSLOTS; i++) {
        if ((st = put_tensor(impl, roles[i], &r->fres.to_save.t[i])))
            return st;
        fattn_split_source src = r->fres.ctx_attrs.saved_from[i];
        if (src != FATTN_SPLIT_SRC_NONE) {
            char name[64];
            snprintf(name, sizeof name, "saved_from.%s", roles[i]);
            if ((st = fattn_h5_node_set_string(impl, name, fattn_split_source_name(src))))
                return st;
        }
    }
    return FATTN_OK;
}

static fattn_status record_save_ctx(case_run *r, const fattn_tensor saved[16],
                                    const ctx_record *rec, fattn_h5_node **group)
{
    fattn_h5_node *g;
    fattn_status st = put_group(r->node, "save_ctx", &g);
    if (st != FATTN_OK)
        return st;
    for (int i = 0; i < 16; i++)
        if ((st = put_tensor(g, roles[i], &saved[i])))
            return st;
    if ((st = ctx_record_write(rec, g)))
        return st;
    *group = g;
    return FATTN_OK;
}

/* SAVE_CTX, legacy: the ctx its forward filled. */
static fattn_status save_ctx_legacy(case_run *r)
{
    const fattn_legacy_ctx *c = r->lctx;
    fattn_tensor saved[16];
    for (int i = 0; i < FATTN_LEGACY_SAVED_AUX; i++)
        saved[i] = c->tensor_objects[i];
    fattn_status st = aux_list_to_slots(c->tensor_objects + FATTN_LEGACY_SAVED_AUX,
                                        c->n_saved - FATTN_LEGACY_SAVED_AUX, c->attn_bias_type,
                                        c->softmax_type, saved + 12);
    if (st != FATTN_OK)
        return st;
    ctx_record rec = {
        .fp8 = c->fp8, .is_input_fp8 = c->is_input_fp8, .bf16_backward = c->bf16_backward,
        .fast_zero_fill = c->fast_zero_fill, .use_FAv2_bwd = c->use_FAv2_bwd,
        .deterministic = c->deterministic, .bottom_right_diagonal = c->bottom_right_diagonal,
        .nominal_dtype = c->nominal_dtype, .layer_number = c->layer_number,
        .max_seqlen_q = c->max_seqlen_q, .max_seqlen_kv = c->max_seqlen_kv,
        .window_size = {c->window_size[0], c->window_size[1]}, .qkv_type = c->qkv_type,
        .attn_scale = c->attn_scale, .dropout_p = c->dropout_p, .qkv_layout = c->qkv_layout,
        .dqkv_layout = c->dqkv_layout, .o_format = c->o_format,
        .qkv_scale_inv_format = c->qkv_scale_inv_format, .attn_bias_type = c->attn_bias_type,
        .attn_mask_type = c->attn_mask_type, .softmax_type = c->softmax_type,
        .fused_attention_backend = c->fused_attention_backend,
    };
    fattn_h5_node *g, *impl;
    if ((st = record_save_ctx(r, saved, &rec, &g)) || (st = put_group(g, "_impl", &impl)))
        return st;
    /* set by forward, never read by backward (fp8_recipe and fp8_meta are
     * None on every path fattn runs, hence absent) */
    return fattn_h5_node_set_uint8(impl, "is_output_fp8", c->is_output_fp8);
}

static void bwd_saved(const fattn_bwd_args *b, fattn_tensor saved[16])
{
    const fattn_tensor *src[16] = {
        &b->q_fp8, &b->k_fp8, &b->v_fp8, &b->out_fp8, &b->q, &b->k, &b->v, &b->out,
        &b->cu_seqlens_q, &b->cu_seqlens_kv, &b->cu_seqlens_q_padded,
        &b->cu_seqlens_kv_padded, &b->softmax_stats, &b->rng_state, &b->aux_bias,
        &b->aux_softmax_offset};
    for (int i = 0; i < 16; i++)
        saved[i] = *src[i];
}

static ctx_record bwd_record(const fattn_bwd_args *b)
{
    ctx_record rec = {
        .fp8 = b->fp8, .is_input_fp8 = b->is_input_fp8, .bf16_backward = b->bf16_backward,
        .fast_zero_fill = b->fast_zero_fill, .use_FAv2_bwd = b->use_FAv2_bwd,
        .deterministic = b->deterministic, .bottom_right_diagonal = b->bottom_right_diagonal != 0,
        .nominal_dtype = b->nominal_dtype, .layer_number = b->layer_number,
        .max_seqlen_q = b->max_seqlen_q, .max_seqlen_kv = b->max_seqlen_kv,
        .window_size = {b->window_size[0], b->window_size[1]}, .qkv_type = b->qkv_type,
        .attn_scale = b->attn_scale, .dropout_p = b->dropout_p, .qkv_layout = b->qkv_layout,
        .dqkv_layout = b->dqkv_layout, .o_format = b->o_format,
        .qkv_scale_inv_format = b->qkv_scale_inv_format, .attn_bias_type = b->attn_bias_type,
        .attn_mask_type = b->attn_mask_type, .softmax_type = b->softmax_type,
        .fused_attention_backend = b->fused_attention_backend,
    };
    return rec;
}

/* SAVE_CTX, split: _fused_attn_setup_ctx. */
static fattn_status save_ctx_split(case_run *r)
{
    fattn_status st = fattn_split_setup_ctx(&r->bargs, &r->fargs, &r->fres.out,
                                            &r->fres.ctx_attrs, &r->fres.to_save);
    if (st != FATTN_OK)
        return st;
    fattn_tensor saved[16];
    bwd_saved(&r->bargs, saved);
    ctx_record rec = bwd_record(&r->bargs);
    fattn_h5_node *g;
    return record_save_ctx(r, saved, &rec, &g);
}

static fattn_status record_backward(case_run *r, const fattn_tensor *dq, const fattn_tensor *dk,
                                    const fattn_tensor *dv, const fattn_tensor *d_bias,
                                    const fattn_tensor *d_softmax_offset)
{
    fattn_h5_node *g;
    fattn_status st;
    if ((st = put_group(r->node, "backward", &g)) || (st = put_tensor(g, "dq", dq)) ||
        (st = put_tensor(g, "dk", dk)) || (st = put_tensor(g, "dv", dv)) ||
        (st = put_tensor(g, "d_bias", d_bias)) ||
        (st = put_tensor(g, "d_softmax_offset", d_softmax_offset)))
        return st;
    return FATTN_OK;
}

static fattn_status backward_legacy(case_run *r, const fattn_tensor *d_out)
{
    fattn_status st = fattn_legacy_backward(r->lctx, d_out, r->l_grads);
    if (st != FATTN_OK)
        return st;
    const fattn_tensor *g = r->l_grads;
    return record_backward(r, &g[FATTN_LEGACY_GRAD_DQ], &g[FATTN_LEGACY_GRAD_DK],
                           &g[FATTN_LEGACY_GRAD_DV], &g[FATTN_LEGACY_GRAD_DBIAS],
                           &g[FATTN_LEGACY_GRAD_DSOFTMAX_OFFSET]);
}

static fattn_status backward_split(case_run *r, const fattn_tensor *d_out)
{
    r->bargs.d_out = *d_out;
    fattn_status st = fattn_split_backward_impl(&r->bargs, &r->sgrads);
    if (st != FATTN_OK)
        return st;
    r->have_sgrads = true;
    const fattn_split_grads *g = &r->sgrads;
    return record_backward(r, &g->dq, &g->dk, &g->dv, &g->d_bias, &g->d_softmax_offset);
}

static fattn_status case_node_new(const fattn_spec *s, fattn_h5_node **out)
{
    fattn_status st = fattn_h5_node_new_group(s->id, out);
    if (st != FATTN_OK)
        return st;
    char *canon = NULL;
    if ((st = fattn_spec_canonical(s, &canon)) == FATTN_OK)
        st = fattn_h5_node_set_string(*out, "spec", canon);
    free(canon);
    if (st != FATTN_OK) {
        fattn_h5_node_free(*out);
        *out = NULL;
    }
    return st;
}

/* Turn an engine refusal into the recorded skip; anything else stays an
 * error. */
static fattn_status finish(case_run *r, fattn_status st, fattn_h5_node **out)
{
    if (st == FATTN_E_UNSUPPORTED) {
        char reason[1024];
        snprintf(reason, sizeof reason, "%s", fattn_last_error());
        fattn_h5_node_free(r->node);
        r->node = NULL;
        st = case_node_new(r->spec, &r->node);
        if (st == FATTN_OK)
            st = fattn_h5_node_set_string(r->node, "skipped", reason);
    } else if (st != FATTN_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", fattn_last_error());
        st = fattn_error(st, "case %s (%s, state %s): %s", r->spec->id,
                         fattn_impl_name(r->opts->impl), fattn_state_name(r->state), msg);
    }
    if (st == FATTN_OK) {
        *out = r->node;
        r->node = NULL;
    }
    fattn_h5_node_free(r->node);
    case_run_free(r);
    return st;
}

fattn_status fattn_run_case(const fattn_spec *spec, const fattn_run_opts *opts,
                            fattn_h5_node **out)
{
    *out = NULL;
    case_run r;
    memset(&r, 0, sizeof r);
    r.spec = spec;
    r.opts = opts;
    r.state = FATTN_STATE_BEGIN;
    /* A fresh generator per case run (nothing carries over between case runs). */
    r.gen.seed = (uint64_t)spec->rng_seed;
    r.gen.offset = (uint64_t)spec->rng_offset;
    fattn_status st = case_node_new(spec, &r.node);
    if (st != FATTN_OK)
        return st;
    bool legacy = opts->impl == FATTN_IMPL_LEGACY;
    st = do_inputs(&r);
    if (st == FATTN_OK && opts->until >= FATTN_STATE_FORWARD) {
        if ((st = step(&r, FATTN_STATE_FORWARD)) == FATTN_OK)
            st = legacy ? forward_legacy(&r) : forward_split(&r);
    }
    if (st == FATTN_OK && opts->until >= FATTN_STATE_SAVE_CTX) {
        if ((st = step(&r, FATTN_STATE_SAVE_CTX)) == FATTN_OK)
            st = legacy ? save_ctx_legacy(&r) : save_ctx_split(&r);
    }
    /* Inference cases have no backward group (TE saves the ctx either way). */
    if (st == FATTN_OK && opts->until >= FATTN_STATE_BACKWARD && spec->is_training) {
        if ((st = step(&r, FATTN_STATE_BACKWARD)) == FATTN_OK)
            st = legacy ? backward_legacy(&r, &r.in.d_out) : backward_split(&r, &r.in.d_out);
    }
    return finish(&r, st, out);
}

/* ---- replay ---------------------------------------------------------------- */

static fattn_tensor node_tensor_at(const fattn_h5_node *g, const char *name)
{
    const fattn_h5_node *n = g ? fattn_h5_node_find(g, name) : NULL;
    return (n && n->is_dataset) ? fattn_h5_node_tensor(n) : fattn_tensor_empty();
}

/* Load the recorded save_ctx into legacy's ctx. */
static fattn_status load_legacy(case_run *r, const fattn_h5_node *sc, const ctx_record *rec)
{
    fattn_status st = fattn_legacy_ctx_init(&r->lctx, r->opts->engine);
    if (st != FATTN_OK)
        return st;
    fattn_legacy_ctx *c = r->lctx;
    c->poison = r->opts->poison;
    c->fp8 = rec->fp8;
    c->nominal_dtype = rec->nominal_dtype;
    c->is_input_fp8 = rec->is_input_fp8;
    c->bf16_backward = rec->bf16_backward;
    c->layer_number = rec->layer_number;
    c->qkv_type = rec->qkv_type;
    c->max_seqlen_q = rec->max_seqlen_q;
    c->max_seqlen_kv = rec->max_seqlen_kv;
    c->attn_scale = rec->attn_scale;
    c->dropout_p = rec->dropout_p;
    c->fast_zero_fill = rec->fast_zero_fill;
    c->qkv_layout = rec->qkv_layout;
    c->o_format = rec->o_format;
    c->qkv_scale_inv_format = rec->qkv_scale_inv_format;
    c->dqkv_layout = rec->dqkv_layout;
    c->attn_bias_type = rec->attn_bias_type;
    c->attn_mask_type = rec->attn_mask_type;
    c->softmax_type = rec->softmax_type;
    c->window_size[0] = rec->window_size[0];
    c->window_size[1] = rec->window_size[1];
    c->bottom_right_diagonal = rec->bottom_right_diagonal;
    c->fused_attention_backend = rec->fused_attention_backend;
    c->use_FAv2_bwd = rec->use_FAv2_bwd;
    c->deterministic = rec->deterministic;
    /* the saved list: 12 fixed entries, then the aux pack as a list */
    for (int i = 0; i < 12; i++)
        c->tensor_objects[i] = node_tensor_at(sc, roles[i]);
    int n = 12;
    for (int i = 12; i < 16; i++) {
        fattn_tensor t = node_tensor_at(sc, roles[i]);
        if (!fattn_tensor_is_empty(&t))
            c->tensor_objects[n++] = t;
    }
    c->n_saved = n;
    c->has_forward = true;
    return FATTN_OK;
}

/* Load the recorded save_ctx into split's bwd args. */
static fattn_status load_split(case_run *r, const fattn_h5_node *sc, const ctx_record *rec)
{
    fattn_bwd_args *b = &r->bargs;
    fattn_bwd_args_init(b);
    fattn_tensor *dst[16] = {
        &b->q_fp8, &b->k_fp8, &b->v_fp8, &b->out_fp8, &b->q, &b->k, &b->v, &b->out,
        &b->cu_seqlens_q, &b->cu_seqlens_kv, &b->cu_seqlens_q_padded,
        &b->cu_seqlens_kv_padded, &b->softmax_stats, &b->rng_state, &b->aux_bias,
        &b->aux_softmax_offset};
    for (int i = 0; i < 16; i++)
        *dst[i] = node_tensor_at(sc, roles[i]);
    b->fp8 = rec->fp8;
    b->nominal_dtype = rec->nominal_dtype;
    b->is_input_fp8 = rec->is_input_fp8;
    b->bf16_backward = rec->bf16_backward;
    b->layer_number = rec->layer_number;
    b->qkv_type = rec->qkv_type;
    b->max_seqlen_q = rec->max_seqlen_q;
    b->max_seqlen_kv = rec->max_seqlen_kv;
    b->attn_scale = rec->attn_scale;
    b->dropout_p = rec->dropout_p;
    b->fast_zero_fill = rec->fast_zero_fill;
    b->qkv_layout = rec->qkv_layout;
    b->o_format = rec->o_format;
    b->qkv_scale_inv_format = rec->qkv_scale_inv_format;
    b->dqkv_layout = rec->dqkv_layout;
    b->attn_bias_type = rec->attn_bias_type;
    b->attn_mask_type = rec->attn_mask_type;
    b->softmax_type = rec->softmax_type;
    b->window_size[0] = rec->window_size[0];
    b->window_size[1] = rec->window_size[1];
    b->bottom_right_diagonal = rec->bottom_right_diagonal ? 1 : 0;
    b->fused_attention_backend = rec->fused_attention_backend;
    b->use_FAv2_bwd = rec->use_FAv2_bwd;
    b->deterministic = rec->deterministic;
    b->engine = r->opts->engine;
    b->poison = r->opts->poison;
    return FATTN_OK;
}

/* Rebuild split's forward result from the recorded inputs and forward
 * (the `--from forward` boundary): the to-save slots as the forward handed
 * them back (forward/_impl) and its saved_from names. */
static fattn_status load_split_forward(case_run *r, const fattn_h5_node *rec_node)
{
    const fattn_h5_node *in = fattn_h5_node_find(rec_node, "inputs");
    const fattn_h5_node *fw = fattn_h5_node_find(rec_node, "forward");
    const fattn_h5_node *impl = fw ? fattn_h5_node_find(fw, "_impl") : NULL;
    if (!in || !fw || !impl)
        return fattn_error(FATTN_E_INVALID_FILE,
                           "--from forward needs inputs/, forward/ and forward/_impl/ "
                           "(a run of the split front end)");
    /* inputs: views into the recorded data */
    r->in.q = node_tensor_at(in, "q");
    r->in.k = node_tensor_at(in, "k");
    r->in.v = node_tensor_at(in, "v");
    r->in.attn_bias = node_tensor_at(in, "attn_bias");
    r->in.softmax_offset = node_tensor_at(in, "softmax_offset");
    r->in.cu_seqlens_q = node_tensor_at(in, "cu_seqlens_q");
    r->in.cu_seqlens_kv = node_tensor_at(in, "cu_seqlens_kv");
    r->in.cu_seqlens_q_padded = node_tensor_at(in, "cu_seqlens_q_padded");
    r->in.cu_seqlens_kv_padded = node_tensor_at(in, "cu_seqlens_kv_padded");
    r->in.d_out = node_tensor_at(in, "d_out");
    fattn_status st = fattn_window_normalize(r->spec->mask, r->spec->window_set,
                                             r->spec->window, r->in.window, NULL);
    if (st != FATTN_OK)
        return st;
    /* bottom_right_diagonal as inputs.c resolves it */
    fattn_case_inputs tmp;
    if ((st = fattn_inputs_make(r->spec, &tmp)) != FATTN_OK)
        return st;
    r->in.bottom_right_diagonal = tmp.bottom_right_diagonal;
    fattn_inputs_free(&tmp);
    fwd_args_from_spec(r);

    fattn_split_fwd_result *f = &r->fres;
    memset(f, 0, sizeof *f);
    f->out = node_tensor_at(fw, "out");
    f->max_logit = node_tensor_at(fw, "max_logit");
    for (int i = 0; i < FATTN_SPLIT_NSLOTS; i++) {
        f->to_save.t[i] = node_tensor_at(impl, roles[i]);
        char name[64];
        snprintf(name, sizeof name, "saved_from.%s", roles[i]);
        const fattn_h5_attr *a = fattn_h5_node_attr(impl, name);
        f->ctx_attrs.saved_from[i] = FATTN_SPLIT_SRC_NONE;
        if (a) {
            bool found = false;
            for (int s = FATTN_SPLIT_SRC_Q; s <= FATTN_SPLIT_SRC_OUT; s++)
                if (a->kind == FATTN_H5_ATTR_STRING &&
                    !strcmp(a->s, fattn_split_source_name((fattn_split_source)s))) {
                    f->ctx_attrs.saved_from[i] = (fattn_split_source)s;
                    found = true;
                }
            if (!found)
                return fattn_error(FATTN_E_INVALID_FILE, "forward/_impl: %s is not a source",
                                   name);
        }
    }
    /* The ctx attributes forward_impl hands setup_ctx are the f16 path's,
     * derived from the args exactly as the forward derives them. */
    const fattn_h5_node *sc = fattn_h5_node_find(rec_node, "save_ctx");
    ctx_record rec;
    if (!sc)
        return fattn_error(FATTN_E_INVALID_FILE, "--from forward: save_ctx/ missing");
    if ((st = ctx_record_read(sc, &rec)) != FATTN_OK)
        return st;
    fattn_split_ctx_attrs *ca = &f->ctx_attrs;
    ca->fp8 = rec.fp8;
    ca->nominal_dtype = rec.nominal_dtype;
    ca->is_input_fp8 = rec.is_input_fp8;
    ca->qkv_type = rec.qkv_type;
    ca->qkv_layout = rec.qkv_layout;
    ca->dqkv_layout = rec.dqkv_layout;
    ca->o_format = rec.o_format;
    ca->qkv_scale_inv_format = rec.qkv_scale_inv_format;
    ca->attn_scale = rec.attn_scale;
    ca->bottom_right_diagonal = rec.bottom_right_diagonal;
    ca->fused_attention_backend = rec.fused_attention_backend;
    return FATTN_OK;
}

fattn_status fattn_replay_case(const fattn_h5_node *recorded, fattn_state from,
                               const fattn_run_opts *opts, fattn_h5_node **out)
{
    *out = NULL;
    const fattn_h5_attr *sa = fattn_h5_node_attr(recorded, "spec");
    if (!sa || sa->kind != FATTN_H5_ATTR_STRING)
        return fattn_error(FATTN_E_INVALID_FILE, "case %s: no spec attribute", recorded->name);
    fattn_spec spec;
    fattn_status st = fattn_spec_parse_one(sa->s, strlen(sa->s), recorded->name, &spec);
    if (st != FATTN_OK)
        return st;
    case_run r;
    memset(&r, 0, sizeof r);
    r.spec = &spec;
    r.opts = opts;
    if (fattn_h5_node_attr(recorded, "skipped")) {
        /* a skipped case stays skipped, copied as recorded */
        st = case_node_new(&spec, &r.node);
        if (st == FATTN_OK)
            st = fattn_h5_node_copy_attrs(recorded, r.node);
        if (st == FATTN_OK) {
            *out = r.node;
            r.node = NULL;
        }
        fattn_h5_node_free(r.node);
        fattn_spec_free(&spec);
        return st;
    }
    if (from != FATTN_STATE_SAVE_CTX && from != FATTN_STATE_FORWARD) {
        fattn_spec_free(&spec);
        return fattn_error(FATTN_E_INVALID_ARG, "replay starts from save_ctx or forward, not %s",
                           fattn_state_name(from));
    }
    if (from == FATTN_STATE_FORWARD && opts->impl != FATTN_IMPL_SPLIT) {
        fattn_spec_free(&spec);
        return fattn_error(FATTN_E_INVALID_ARG,
                           "--from forward exists only for --impl split (legacy's forward "
                           "and save_ctx are one call)");
    }
    if ((st = case_node_new(&spec, &r.node)) != FATTN_OK) {
        fattn_spec_free(&spec);
        return st;
    }
    /* copy every recorded state up to the boundary, bit for bit */
    static const char *const groups[] = {"inputs", "forward", "save_ctx"};
    int upto = from == FATTN_STATE_SAVE_CTX ? 3 : 2;
    for (int i = 0; i < upto && st == FATTN_OK; i++) {
        const fattn_h5_node *g = fattn_h5_node_find(recorded, groups[i]);
        if (!g)
            st = fattn_error(FATTN_E_STATE,
                             "case %s: cannot resume from state %s: the file lacks state %s",
                             spec.id, fattn_state_name(from), groups[i]);
        else
            st = fattn_h5_node_copy(g, r.node, NULL);
    }
    r.state = from;
    const fattn_h5_node *sc = fattn_h5_node_find(recorded, "save_ctx");
    const fattn_h5_node *in = fattn_h5_node_find(recorded, "inputs");
    fattn_tensor d_out = node_tensor_at(in, "d_out");
    if (st == FATTN_OK && from == FATTN_STATE_SAVE_CTX) {
        ctx_record rec;
        st = ctx_record_read(sc, &rec);
        if (st == FATTN_OK)
            st = opts->impl == FATTN_IMPL_LEGACY ? load_legacy(&r, sc, &rec)
                                                 : load_split(&r, sc, &rec);
    } else if (st == FATTN_OK) {
        st = load_split_forward(&r, recorded);
        if (st == FATTN_OK && (st = step(&r, FATTN_STATE_SAVE_CTX)) == FATTN_OK)
            st = save_ctx_split(&r);
    }
    if (st == FATTN_OK && spec.is_training && opts->until >= FATTN_STATE_BACKWARD) {
        if (fattn_tensor_is_empty(&d_out))
            st = fattn_error(FATTN_E_INVALID_FILE, "case %s: inputs/d_out missing", spec.id);
        else if ((st = step(&r, FATTN_STATE_BACKWARD)) == FATTN_OK)
            st = opts->impl == FATTN_IMPL_LEGACY ? backward_legacy(&r, &d_out)
                                                 : backward_split(&r, &d_out);
    }
    /* views into `recorded` must not be freed as inputs */
    r.have_inputs = false;
    st = finish(&r, st, out);
    fattn_spec_free(&spec);
    return st;
}
