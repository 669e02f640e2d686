/* The harness state machine and its observers (see runner.h): each state
 * is produced by a front end's adapter (fe.h) and recorded here, the same
 * way for every front end. */
#include <assert.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "fattn/cudnn.h"

#include "engine_call.h"
#include "fe.h"
#include "fileguard.h"
#include "h5read.h"
#include "h5write.h"
#include "inputs.h"
#include "runner.h"
#include "te_rules.h"

/* ---- memory ------------------------------------------------------------------ */

void fattn_run_memory_policy(void)
{
#if defined(__GLIBC__)
    /* a fixed threshold also turns off glibc's raising of it */
    (void)mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
}

/* ---- the backward-read set ------------------------------------------------ */

fattn_status fattn_save_ctx_validate(const fattn_h5_node *save_ctx)
{
    fattn_ctx_record rec;
    return fattn_ctx_record_read(save_ctx, &rec);
}

/* ---- one case run ---------------------------------------------------------- */

/* The datasets of inputs/, in the order they are recorded. */
#define CASE_INPUTS(X)                                                                         \
    X(q) X(k) X(v) X(attn_bias) X(softmax_offset) X(cu_seqlens_q) X(cu_seqlens_kv)             \
    X(cu_seqlens_q_padded) X(cu_seqlens_kv_padded) X(d_out) X(page_table_k) X(page_table_v)

typedef struct case_run {
    const fattn_spec *spec;
    const fattn_run_opts *opts;
    const fattn_fe_ops *ops; /* the front end's adapter */
    void *fe;                /* its state, once started */
    fattn_fe_env env;        /* what it is handed; points into this struct */
    fattn_state state;
    fattn_case_inputs in;
    bool own_inputs;         /* made here; false: views into a recorded tree */
    fattn_rng_gen gen;
    fattn_h5_node *node;     /* /cases/<id> */
    /* the engine calls the front end makes (engine_call.h), and what their
     * tensors are named by: the forward's outputs and the saved slots as
     * the front end handed them over (views it owns) */
    fattn_call_log *calls;
    fattn_tensor fwd_t[2 + FATTN_SAVED_NAUX];
    fattn_tensor saved_t[FATTN_SAVED_COUNT];
    fattn_tensor grads_t[5];
} case_run;

static fattn_status case_run_init(case_run *r, const fattn_spec *spec, const fattn_run_opts *opts)
{
    memset(r, 0, sizeof *r);
    r->spec = spec;
    r->opts = opts;
    r->state = FATTN_STATE_BEGIN;
    r->ops = fattn_fe_get(opts->impl);
    if (!r->ops)
        return fattn_error(FATTN_E_INVALID_ARG, "no front end %d", (int)opts->impl);
    /* the front end gets the engine through the call log */
    fattn_status st = fattn_call_log_open(opts->engine, &r->calls);
    if (st != FATTN_OK)
        return st;
    r->env = (fattn_fe_env){.spec = spec, .in = &r->in, .gen = &r->gen,
                            .engine = fattn_call_log_engine(r->calls), .poison = opts->poison,
                            .via_wrapper = opts->via_wrapper};
    return FATTN_OK;
}

static void case_run_free(case_run *r)
{
    if (r->fe)
        r->ops->free(r->fe);
    r->fe = NULL;
    if (r->own_inputs)
        fattn_inputs_free(&r->in);
    r->own_inputs = false;
    fattn_call_log_free(r->calls);
    r->calls = NULL;
}

#define NAME_INPUT(name) fattn_call_names_add(n, "inputs/", #name, &r->in.name);

static void names_inputs(const case_run *r, fattn_call_names *n)
{
    CASE_INPUTS(NAME_INPUT)
}

static void names_forward(const case_run *r, fattn_call_names *n)
{
    fattn_call_names_add(n, "forward/", "out", &r->fwd_t[0]);
    fattn_call_names_add(n, "forward/", "max_logit", &r->fwd_t[1]);
    for (int i = 0; i < FATTN_SAVED_NAUX; i++)
        fattn_call_names_add(n, "forward/aux/",
                             fattn_saved_name((fattn_saved_slot)(FATTN_SAVED_AUX_FIRST + i)),
                             &r->fwd_t[2 + i]);
}

static void names_saved(const case_run *r, fattn_call_names *n)
{
    for (int i = 0; i < FATTN_SAVED_COUNT; i++)
        fattn_call_names_add(n, "save_ctx/", fattn_saved_name((fattn_saved_slot)i),
                             &r->saved_t[i]);
}

/* Write the calls of `dir` the front end made under engine_call/, their
 * tensors named by the recorded ones they are: a forward call's by the
 * inputs, then the forward's outputs and the saved slots; a backward
 * call's by the saved slots first (what the backward reads), then the
 * inputs (d_out), the forward's outputs and the grads. */
static fattn_status write_calls(case_run *r, fattn_call_dir dir)
{
    static const char *const grads[5] = {"dq", "dk", "dv", "d_bias", "d_softmax_offset"};
    fattn_call_names *n = malloc(sizeof *n);
    if (!n)
        return fattn_error(FATTN_E_NOMEM, "case %s: out of memory", r->spec->id);
    n->n = 0;
    if (dir == FATTN_CALL_FORWARD) {
        names_inputs(r, n);
        names_forward(r, n);
        names_saved(r, n);
    } else {
        names_saved(r, n);
        names_inputs(r, n);
        names_forward(r, n);
        for (int i = 0; i < 5; i++)
            fattn_call_names_add(n, "backward/", grads[i], &r->grads_t[i]);
    }
    fattn_status st = fattn_call_log_write(r->calls, dir, n, r->node);
    free(n);
    return st;
}

static fattn_status step(case_run *r, fattn_state to)
{
    fattn_status st = fattn_state_check(r->state, to);
    if (st == FATTN_OK)
        r->state = to;
    return st;
}

/* The front end's state is made when the first state needs it (after the
 * inputs exist: the adapter keeps views of them). */
static fattn_status fe_start(case_run *r)
{
    assert(r->ops && r->env.in == &r->in);
    return r->fe ? FATTN_OK : r->ops->init(&r->fe, &r->env);
}

static fattn_status observe_private(case_run *r, fattn_state state, fattn_h5_node *g)
{
    return r->ops->record_private ? r->ops->record_private(r->fe, state, g) : FATTN_OK;
}

/* A Float8Tensor's scale_inv travels with it: the attribute scale_inv of
 * its dataset in g (si 0: not FP8, nothing to record). */
static fattn_status put_scale_inv(fattn_h5_node *g, const char *name, float si)
{
    fattn_h5_node *ds = (g && si != 0.0f) ? fattn_h5_node_find(g, name) : NULL;
    return ds ? fattn_h5_node_set_float32(ds, "scale_inv", si) : FATTN_OK;
}

/* INPUTS: generate and record. */
static fattn_status do_inputs(case_run *r)
{
    fattn_status st = step(r, FATTN_STATE_INPUTS);
    if (st != FATTN_OK)
        return st;
    if ((st = fattn_inputs_make(r->spec, &r->in)) != FATTN_OK)
        return st;
    r->own_inputs = true;
    fattn_h5_node *g;
    if ((st = fattn_h5_node_group(r->node, "inputs", &g)))
        return st;
#define PUT_INPUT(name)                                                                        \
    if ((st = fattn_fe_put_tensor(g, #name, &r->in.name)) != FATTN_OK)                        \
        return st;
    CASE_INPUTS(PUT_INPUT)
#undef PUT_INPUT
    if ((st = put_scale_inv(g, "q", r->in.q_scale_inv)) ||
        (st = put_scale_inv(g, "k", r->in.k_scale_inv)) ||
        (st = put_scale_inv(g, "v", r->in.v_scale_inv)))
        return st;
    return put_scale_inv(g, "d_out", r->in.d_out_scale_inv);
}

/* Views of a recorded inputs/ group (the spec-resolved window and diagonal
 * are not recorded and stay unset). */
static void load_inputs(case_run *r, const fattn_h5_node *in)
{
    assert(!r->own_inputs);
#define LOAD_INPUT(name) r->in.name = fattn_fe_node_tensor(in, #name);
    CASE_INPUTS(LOAD_INPUT)
#undef LOAD_INPUT
    r->in.q_scale_inv = fattn_fe_node_scale_inv(in, "q");
    r->in.k_scale_inv = fattn_fe_node_scale_inv(in, "k");
    r->in.v_scale_inv = fattn_fe_node_scale_inv(in, "v");
    r->in.d_out_scale_inv = fattn_fe_node_scale_inv(in, "d_out");
}

static fattn_status record_forward(case_run *r, const fattn_fe_forward *res,
                                   fattn_h5_node **group)
{
    fattn_h5_node *g, *a;
    fattn_status st;
    if ((st = fattn_h5_node_group(r->node, "forward", &g)) ||
        (st = fattn_fe_put_tensor(g, "out", &res->out)) ||
        (st = fattn_fe_put_tensor(g, "max_logit", &res->max_logit)) ||
        (st = fattn_h5_node_group(g, "aux", &a)))
        return st;
    for (int i = 0; i < FATTN_SAVED_NAUX; i++)
        if ((st = fattn_fe_put_tensor(
                 a, fattn_saved_name((fattn_saved_slot)(FATTN_SAVED_AUX_FIRST + i)),
                 &res->aux[i])))
            return st;
    /* TE's forward draws its rng_state from the global generator and
     * advances it: the generator after the forward is an effect of the
     * forward that a later call would see, so it is recorded too. */
    /* out as a Float8Tensor (fp8_output): its scale_inv travels with it */
    if (res->out_scale_inv != 0.0f &&
        (st = fattn_h5_node_set_float32(g, "out_scale_inv", res->out_scale_inv)))
        return st;
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

/* returned/: what the forward call returned, where the adapter says it
 * is another call's than the recorded forward's (the split wrapper's). */
static fattn_status record_returned(case_run *r, const fattn_fe_forward *res)
{
    if (!res->returned)
        return FATTN_OK;
    fattn_h5_node *g;
    fattn_status st;
    if ((st = fattn_h5_node_group(r->node, "returned", &g)) ||
        (st = fattn_fe_put_tensor(g, "out", &res->ret_out)) ||
        (st = fattn_fe_put_tensor(g, "max_logit", &res->ret_max_logit)))
        return st;
    return put_scale_inv(g, "out", res->ret_out_scale_inv);
}

/* FORWARD: the front end's forward, recorded. */
static fattn_status do_forward(case_run *r)
{
    fattn_status st = step(r, FATTN_STATE_FORWARD);
    fattn_fe_forward res;
    memset(&res, 0, sizeof res);
    fattn_h5_node *g = NULL;
    if (st == FATTN_OK)
        st = fe_start(r);
    if (st == FATTN_OK)
        st = r->ops->forward(r->fe, &res);
    if (st == FATTN_OK)
        st = record_forward(r, &res, &g);
    if (st == FATTN_OK) {
        r->fwd_t[0] = res.out;
        r->fwd_t[1] = res.max_logit;
        memcpy(r->fwd_t + 2, res.aux, sizeof res.aux);
    }
    if (st == FATTN_OK)
        st = record_returned(r, &res);
    if (st == FATTN_OK)
        st = observe_private(r, FATTN_STATE_FORWARD, g);
    return st;
}

/* SAVE_CTX: what the front end saved for backward, by role, and the
 * backward-read set as attributes. */
static fattn_status do_save_ctx(case_run *r)
{
    fattn_status st = step(r, FATTN_STATE_SAVE_CTX);
    fattn_fe_saved res;
    memset(&res, 0, sizeof res);
    fattn_h5_node *g = NULL;
    if (st == FATTN_OK)
        st = fe_start(r);
    if (st == FATTN_OK)
        st = r->ops->save_ctx(r->fe, &res);
    if (st == FATTN_OK)
        st = fattn_h5_node_group(r->node, "save_ctx", &g);
    for (int i = 0; st == FATTN_OK && i < FATTN_SAVED_COUNT; i++) {
        const char *role = fattn_saved_name((fattn_saved_slot)i);
        if ((st = fattn_fe_put_tensor(g, role, &res.t[i])) == FATTN_OK)
            st = put_scale_inv(g, role, res.scale_inv[i]);
    }
    if (st == FATTN_OK)
        st = fattn_ctx_record_write(&res.rec, g);
    if (st == FATTN_OK)
        memcpy(r->saved_t, res.t, sizeof res.t);
    if (st == FATTN_OK)
        st = observe_private(r, FATTN_STATE_SAVE_CTX, g);
    /* the forward's engine calls, once the saved slots can name them (an
     * FP8 forward hands the engine the quantised copies it saves) */
    if (st == FATTN_OK)
        st = write_calls(r, FATTN_CALL_FORWARD);
    return st;
}

/* A second backward on the context the first one used, after everything
 * of the first is recorded (a front end without a guard overwrites its
 * grads): backward/_impl@second_backward gets the call's status name and
 * @second_backward_error its message. Both TE versions raise there, so
 * that anything but a refusal is a front end handing out grads twice. */
static fattn_status backward_again(case_run *r, const fattn_tensor *d_out, fattn_h5_node *g)
{
    bool applies = false;
    fattn_status again = r->ops->backward_again ? r->ops->backward_again(r->fe, d_out, &applies)
                                                : FATTN_OK;
    if (!applies)
        return FATTN_OK;
    char msg[1024] = "";
    if (again != FATTN_OK)
        snprintf(msg, sizeof msg, "%s", fattn_last_error());
    fattn_h5_node *impl;
    fattn_status st = fattn_h5_node_group(g, "_impl", &impl);
    if (st == FATTN_OK)
        st = fattn_h5_node_set_string(impl, "second_backward", fattn_status_name(again));
    if (st == FATTN_OK && msg[0])
        st = fattn_h5_node_set_string(impl, "second_backward_error", msg);
    return st;
}

/* BACKWARD: the front end's backward from d_out, recorded. */
static fattn_status do_backward(case_run *r, const fattn_tensor *d_out)
{
    fattn_status st = step(r, FATTN_STATE_BACKWARD);
    fattn_fe_grads res;
    memset(&res, 0, sizeof res);
    fattn_h5_node *g = NULL;
    if (st == FATTN_OK)
        st = fe_start(r);
    if (st == FATTN_OK)
        st = r->ops->backward(r->fe, d_out, &res);
    if (st == FATTN_OK && (st = fattn_h5_node_group(r->node, "backward", &g)) == FATTN_OK &&
        !(st = fattn_fe_put_tensor(g, "dq", &res.dq)) &&
        !(st = fattn_fe_put_tensor(g, "dk", &res.dk)) &&
        !(st = fattn_fe_put_tensor(g, "dv", &res.dv)) &&
        !(st = fattn_fe_put_tensor(g, "d_bias", &res.d_bias)))
        st = fattn_fe_put_tensor(g, "d_softmax_offset", &res.d_softmax_offset);
    /* FP8 grads (FP8 inputs, no bf16_backward): one scale_inv for the three */
    for (int i = 0; st == FATTN_OK && i < 3; i++)
        st = put_scale_inv(g, (const char *const[]){"dq", "dk", "dv"}[i], res.grads_scale_inv);
    /* the amaxes an FP8 backward wrote, in the quantizers it was handed */
    if (st == FATTN_OK && res.dO_quantizer)
        st = fattn_ctx_quantizer_write(g, "dO_quantizer", res.dO_quantizer);
    if (st == FATTN_OK && res.dP_quantizer)
        st = fattn_ctx_quantizer_write(g, "dP_quantizer", res.dP_quantizer);
    if (st == FATTN_OK && res.dQKV_quantizer)
        st = fattn_ctx_quantizer_write(g, "dQKV_quantizer", res.dQKV_quantizer);
    if (st == FATTN_OK)
        st = observe_private(r, FATTN_STATE_BACKWARD, g);
    if (st == FATTN_OK) {
        const fattn_tensor grads[5] = {res.dq, res.dk, res.dv, res.d_bias,
                                       res.d_softmax_offset};
        memcpy(r->grads_t, grads, sizeof grads);
        st = write_calls(r, FATTN_CALL_BACKWARD);
    }
    if (st == FATTN_OK && r->opts->backward_again)
        st = backward_again(r, d_out, g);
    /* what a second backward handed the engine is not the run's */
    fattn_call_log_discard(r->calls, FATTN_CALL_BACKWARD);
    return st;
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

/* The support-table rule a refusal names ("rule <id>: ..."), or "". */
static void refusal_rule(const char *msg, char *buf, size_t n)
{
    const char *p = strstr(msg, "rule ");
    size_t k = 0;
    if (p)
        for (p += 5; k + 1 < n && (isalnum((unsigned char)p[k]) || p[k] == '_'); k++)
            buf[k] = p[k];
    buf[k] = '\0';
    if (!p || p[k] != ':')
        buf[0] = '\0';
}

/* An expect_refusal case the front end refused: recorded, as a skip is,
 * by its spec and attributes only (docs/run-files.md), so that verify and
 * diff compare the refusals: status name, rule id, the state it happened
 * in and the front end's own message (without the runner's prefix, which
 * names the front end). */
static fattn_status record_refusal(case_run *r, fattn_status refused)
{
    char msg[1024], rule[64];
    snprintf(msg, sizeof msg, "%s", fattn_last_error());
    refusal_rule(msg, rule, sizeof rule);
    fattn_h5_node_free(r->node);
    r->node = NULL;
    fattn_status st = case_node_new(r->spec, &r->node);
    if (st == FATTN_OK)
        st = fattn_h5_node_set_string(r->node, "refused_status", fattn_status_name(refused));
    if (st == FATTN_OK)
        st = fattn_h5_node_set_string(r->node, "refused_rule", rule);
    if (st == FATTN_OK)
        st = fattn_h5_node_set_string(r->node, "refused_state", fattn_state_name(r->state));
    if (st == FATTN_OK)
        st = fattn_h5_node_set_string(r->node, "refused_message", msg);
    return st;
}

/* Turn an engine refusal into the recorded skip, a front end's refusal of
 * an expect_refusal case into the recorded refusal; anything else stays an
 * error. */
static fattn_status finish(case_run *r, fattn_status st, fattn_h5_node **out)
{
    if (r->spec->expect_refusal && fattn_spec_refusal_status(st)) {
        st = record_refusal(r, st);
    } else if (st == FATTN_E_UNSUPPORTED) {
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
        st = fattn_error(st, "case %s (%s, state %s): %s", r->spec->id, r->ops->name,
                         fattn_state_name(r->state), msg);
    }
    char note[FATTN_TE_NOTE_MAX];
    if (st == FATTN_OK)
        st = fattn_case_te_note(r->spec, r->opts->te_rules, note, sizeof note);
    if (st == FATTN_OK && note[0])
        st = fattn_h5_node_set_string(r->node, "prov_te_route", note);
    /* the attribute digest, the last change to the case before it is written */
    if (st == FATTN_OK)
        st = fattn_h5_node_seal_attrs(r->node);
    if (st == FATTN_OK) {
        *out = r->node;
        r->node = NULL;
    }
    fattn_h5_node_free(r->node);
    case_run_free(r);
    return st;
}

/* inputs/_impl@<input>: each input's fingerprint as the front end left it
 * after the run, beside the one recorded before (the caller's tensors:
 * TE's front ends must not write into them). */
static fattn_status record_inputs_after(case_run *r)
{
    fattn_h5_node *in = fattn_h5_node_find(r->node, "inputs"), *impl;
    if (!in)
        return FATTN_OK;
    fattn_status st = fattn_h5_node_group(in, "_impl", &impl);
#define PUT_AFTER(name)                                                                        \
    if (st == FATTN_OK)                                                                        \
        st = fattn_fe_put_fingerprint(impl, #name, &r->in.name);
    CASE_INPUTS(PUT_AFTER)
#undef PUT_AFTER
    return st;
}

fattn_status fattn_run_case(const fattn_spec *spec, const fattn_run_opts *opts,
                            fattn_h5_node **out)
{
    *out = NULL;
    case_run r;
    fattn_status st = case_run_init(&r, spec, opts);
    if (st != FATTN_OK)
        return st;
    /* A fresh generator per case run (nothing carries over between case runs). */
    r.gen.seed = (uint64_t)spec->rng_seed;
    r.gen.offset = (uint64_t)spec->rng_offset;
    if ((st = case_node_new(spec, &r.node)) != FATTN_OK)
        return st;
    st = do_inputs(&r);
    if (st == FATTN_OK && opts->until >= FATTN_STATE_FORWARD)
        st = do_forward(&r);
    if (st == FATTN_OK && opts->until >= FATTN_STATE_SAVE_CTX)
        st = do_save_ctx(&r);
    else if (st == FATTN_OK && opts->until == FATTN_STATE_FORWARD)
        st = write_calls(&r, FATTN_CALL_FORWARD);
    /* Inference cases have no backward group (TE saves the ctx either way). */
    if (st == FATTN_OK && opts->until >= FATTN_STATE_BACKWARD && spec->is_training)
        st = do_backward(&r, &r.in.d_out);
    if (st == FATTN_OK && opts->inputs_after)
        st = record_inputs_after(&r);
    return finish(&r, st, out);
}

/* ---- replay ---------------------------------------------------------------- */

/* A skipped case stays skipped, a refused one refused, copied as recorded. */
static fattn_status replay_skipped(const fattn_h5_node *recorded, const fattn_spec *spec,
                                   fattn_h5_node **out)
{
    fattn_h5_node *node = NULL;
    fattn_status st = case_node_new(spec, &node);
    if (st == FATTN_OK)
        st = fattn_h5_node_copy_attrs(recorded, node);
    if (st == FATTN_OK)
        st = fattn_h5_node_seal_attrs(node);
    if (st == FATTN_OK) {
        *out = node;
        node = NULL;
    }
    fattn_h5_node_free(node);
    return st;
}

/* Copy every recorded state before and at `from`, bit for bit, and enter
 * `from` through the adapter's load; from FORWARD, SAVE_CTX then runs. */
static fattn_status replay_resume(case_run *r, const fattn_h5_node *recorded, fattn_state from)
{
    static const char *const groups[] = {"inputs", "forward", "save_ctx"};
    assert(from == FATTN_STATE_SAVE_CTX || from == FATTN_STATE_FORWARD);
    int upto = from == FATTN_STATE_SAVE_CTX ? 3 : 2;
    fattn_status st = FATTN_OK;
    for (int i = 0; i < upto && st == FATTN_OK; i++) {
        const fattn_h5_node *g = fattn_h5_node_find(recorded, groups[i]);
        if (!g)
            st = fattn_error(FATTN_E_STATE,
                             "case %s: cannot resume from state %s: the file lacks state %s",
                             r->spec->id, fattn_state_name(from), groups[i]);
        else
            st = fattn_h5_node_copy(g, r->node, NULL);
    }
    r->state = from;
    /* the recorded forward's engine calls: its state is copied, not rerun */
    if (st == FATTN_OK)
        st = fattn_call_copy(recorded, FATTN_CALL_FORWARD, r->node);
    if (st != FATTN_OK)
        return st;
    load_inputs(r, fattn_h5_node_find(recorded, "inputs"));
    if (from == FATTN_STATE_SAVE_CTX) {
        const fattn_h5_node *sc = fattn_h5_node_find(recorded, "save_ctx");
        /* the backward reads the recorded slots as views (load_save_ctx) */
        for (int i = 0; i < FATTN_SAVED_COUNT; i++)
            r->saved_t[i] = fattn_fe_node_tensor(sc, fattn_saved_name((fattn_saved_slot)i));
        fattn_ctx_record rec;
        if ((st = fattn_ctx_record_read(sc, &rec)) == FATTN_OK && (st = fe_start(r)) == FATTN_OK)
            st = r->ops->load_save_ctx(r->fe, sc, &rec);
        return st;
    }
    if ((st = fe_start(r)) == FATTN_OK && (st = r->ops->load_forward(r->fe, recorded)) == FATTN_OK)
        st = do_save_ctx(r);
    return st;
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
    if ((st = case_run_init(&r, &spec, opts)) != FATTN_OK)
        goto done;
    if (fattn_h5_node_attr(recorded, "skipped") || fattn_h5_node_attr(recorded, "refused_status")) {
        st = replay_skipped(recorded, &spec, out);
        goto done;
    }
    if (from != FATTN_STATE_SAVE_CTX && from != FATTN_STATE_FORWARD) {
        st = fattn_error(FATTN_E_INVALID_ARG, "replay starts from save_ctx or forward, not %s",
                         fattn_state_name(from));
        goto done;
    }
    if ((st = fattn_impl_resume_check(opts->impl, from)) != FATTN_OK ||
        (st = case_node_new(&spec, &r.node)) != FATTN_OK)
        goto done;
    st = replay_resume(&r, recorded, from);
    if (st == FATTN_OK && spec.is_training && opts->until >= FATTN_STATE_BACKWARD) {
        if (fattn_tensor_is_empty(&r.in.d_out))
            st = fattn_error(FATTN_E_INVALID_FILE, "case %s: inputs/d_out missing", spec.id);
        else
            st = do_backward(&r, &r.in.d_out);
    }
    st = finish(&r, st, out);
done:
    fattn_spec_free(&spec);
    return st;
}

/* ---- writing case by case ----------------------------------------------------- */

struct fattn_case_sink {
    char *out;
    const fattn_h5_node *root; /* root attributes, borrowed */
    fattn_h5_writer *w;        /* the output, or the scratch file (audit) */
    char *scratch;             /* the scratch file's path; NULL without audit */
    bool scratch_done;         /* committed: it exists under its own name */
    int scratch_slot;          /* its signal-cleanup registration (fileguard.h) */
    char **ids;                /* audit: the cases put, in order, to read back */
    size_t cap_ids;
    size_t n_put;
};

fattn_status fattn_case_sink_open(const char *out, const fattn_h5_node *root, bool audit,
                                  fattn_case_sink **sink)
{
    assert(root && !root->is_dataset && root->n_children == 0);
    *sink = NULL;
    fattn_case_sink *k = calloc(1, sizeof *k);
    if (!k || !(k->out = fattn_runtree_strdup(out))) {
        free(k);
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", out);
    }
    k->root = root;
    fattn_status st = FATTN_OK;
    if (!audit) {
        if ((st = fattn_h5_writer_open(out, &k->w)) == FATTN_OK)
            st = fattn_h5_writer_put(k->w, "/", root);
    } else {
        /* a short name of its own, so that an output name near NAME_MAX
         * still leaves room for the writer's temporary name of it */
        const char *slash = strrchr(out, '/');
        int dirlen = slash ? (int)(slash - out) + 1 : 0;
        size_t cap = (size_t)dirlen + 48;
        if (!(k->scratch = malloc(cap)))
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", out);
        else {
            snprintf(k->scratch, cap, "%.*s.fattn-cases-%ld", dirlen, out, (long)getpid());
            st = fattn_h5_writer_open(k->scratch, &k->w);
        }
    }
    if (st != FATTN_OK) {
        fattn_case_sink_free(k);
        return st;
    }
    *sink = k;
    return FATTN_OK;
}

fattn_status fattn_case_sink_put(fattn_case_sink *k, const fattn_h5_node *case_node)
{
    assert(k->w && !case_node->is_dataset);
    if (k->scratch && k->n_put == k->cap_ids) {
        size_t cap = k->cap_ids ? 2 * k->cap_ids : 64;
        char **ids = realloc(k->ids, cap * sizeof *ids);
        if (!ids)
            return fattn_error(FATTN_E_NOMEM, "%s: out of memory", k->out);
        k->ids = ids;
        k->cap_ids = cap;
    }
    fattn_status st = fattn_h5_writer_put(k->w, "/cases", case_node);
    if (st == FATTN_OK && k->scratch &&
        !(k->ids[k->n_put] = fattn_runtree_strdup(case_node->name)))
        st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", k->out);
    if (st == FATTN_OK)
        k->n_put++;
    return st;
}

/* An empty /cases for a file of no case (the schema has the group always). */
static fattn_status put_empty_cases(fattn_h5_writer *w)
{
    fattn_h5_node *cases = NULL;
    fattn_status st = fattn_h5_node_new_group("cases", &cases);
    if (st == FATTN_OK)
        st = fattn_h5_writer_put(w, "/", cases);
    fattn_h5_node_free(cases);
    return st;
}

/* Audit: the scratch file committed, then the output: root attributes,
 * /audit, each case read back from the scratch file and written. */
static fattn_status copy_scratch(fattn_case_sink *k, const fattn_h5_node *audit)
{
    fattn_status st = fattn_h5_writer_commit(k->w);
    k->w = NULL;
    if (st != FATTN_OK)
        return st;
    k->scratch_done = true;
    k->scratch_slot = fattn_fileguard_scratch_register(k->scratch);
    fattn_h5_reader *r = NULL;
    if ((st = fattn_h5_writer_open(k->out, &k->w)) == FATTN_OK &&
        (st = fattn_h5_writer_put(k->w, "/", k->root)) == FATTN_OK)
        st = fattn_h5_writer_put(k->w, "/", audit);
    if (st == FATTN_OK && k->n_put)
        st = fattn_h5_reader_open(k->scratch, &r);
    for (size_t i = 0; st == FATTN_OK && i < k->n_put; i++) {
        char *p = fattn_runtree_path_join("/cases", k->ids[i]);
        fattn_h5_node *c = NULL;
        if (!p)
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", k->out);
        else if ((st = fattn_h5_reader_read(r, p, NULL, &c)) == FATTN_OK)
            st = fattn_h5_writer_put(k->w, "/cases", c);
        fattn_h5_node_free(c);
        free(p);
    }
    fattn_h5_reader_close(r);
    return st;
}

fattn_status fattn_case_sink_commit(fattn_case_sink *k, const fattn_h5_node *audit)
{
    assert((audit != NULL) == (k->scratch != NULL) && k->w);
    assert(!audit || !strcmp(audit->name, "audit"));
    fattn_status st = audit ? copy_scratch(k, audit) : FATTN_OK;
    if (st == FATTN_OK && !k->n_put)
        st = put_empty_cases(k->w);
    if (st == FATTN_OK) {
        st = fattn_h5_writer_commit(k->w);
        k->w = NULL;
    }
    return st;
}

void fattn_case_sink_free(fattn_case_sink *k)
{
    if (!k)
        return;
    fattn_h5_writer_abort(k->w);
    if (k->scratch_done) {
        fattn_fileguard_scratch_unregister(k->scratch_slot);
        unlink(k->scratch);
    }
    for (size_t i = 0; k->ids && i < k->n_put; i++)
        free(k->ids[i]);
    free(k->ids);
    free(k->scratch);
    free(k->out);
    free(k);
}
