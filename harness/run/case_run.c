/* One case run's states (case_run.h): each produced by the front end's
 * adapter (fe.h) or the harness and recorded into the run's group, the
 * same way for every front end. The runner (runner.c) drives one through
 * BEGIN -> BACKWARD, a schedule (schedule_run.c) one per micro-batch. */
#include <assert.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case_run.h"
#include "te_rules.h"
#include "try.h"

fattn_status fh_case_run_init(fh_case_run *r, const fh_spec *spec, const fh_run_opts *opts)
{
    memset(r, 0, sizeof *r);
    r->spec = spec;
    r->opts = opts;
    r->state = FH_STATE_BEGIN;
    r->ops = fh_fe_get(opts->impl);
    if (!r->ops)
        return fattn_error(FATTN_E_INVALID_ARG, "no front end %d", (int)opts->impl);
    /* the front end gets the engine through the call log */
    fattn_status st = fh_call_log_open(opts->engine, &r->calls);
    if (st != FATTN_OK)
        return st;
    r->env = (fh_fe_env){.spec = spec, .in = &r->in, .gen = &r->gen, /* a schedule repoints it */
                            .engine = fh_call_log_engine(r->calls), .poison = opts->poison,
                            .via_wrapper = opts->via_wrapper};
    return FATTN_OK;
}

void fh_case_run_free(fh_case_run *r)
{
    if (r->fe)
        r->ops->free(r->fe);
    r->fe = NULL;
    if (r->own_inputs)
        fh_inputs_free(&r->in);
    r->own_inputs = false;
    fh_call_log_free(r->calls);
    r->calls = NULL;
}

#define NAME_INPUT(name) fh_call_names_add(n, "inputs/", #name, &r->in.name);

static void names_inputs(const fh_case_run *r, fh_call_names *n)
{
    CASE_INPUTS(NAME_INPUT)
}

static void names_forward(const fh_case_run *r, fh_call_names *n)
{
    fh_call_names_add(n, "forward/", "out", &r->fwd_t[0]);
    fh_call_names_add(n, "forward/", "max_logit", &r->fwd_t[1]);
    for (int i = 0; i < FH_SAVED_NAUX; i++)
        fh_call_names_add(n, "forward/aux/",
                             fh_saved_name((fh_saved_slot)(FH_SAVED_AUX_FIRST + i)),
                             &r->fwd_t[2 + i]);
}

static void names_saved(const fh_case_run *r, fh_call_names *n)
{
    for (int i = 0; i < FH_SAVED_COUNT; i++)
        fh_call_names_add(n, "save_ctx/", fh_saved_name((fh_saved_slot)i),
                             &r->saved_t[i]);
}

/* A forward call's tensors are named by the inputs, then the forward's
 * outputs and the saved slots; a backward call's by the saved slots first
 * (what the backward reads), then the inputs (d_out), the forward's
 * outputs and the grads. */
fattn_status fh_case_run_write_calls(fh_case_run *r, fh_call_dir dir)
{
    static const char *const grads[5] = {"dq", "dk", "dv", "d_bias", "d_softmax_offset"};
    fh_call_names *n = malloc(sizeof *n);
    if (!n)
        return fattn_error(FATTN_E_NOMEM, "case %s: out of memory", r->spec->id);
    n->n = 0;
    if (dir == FH_CALL_FORWARD) {
        names_inputs(r, n);
        names_forward(r, n);
        names_saved(r, n);
    } else {
        names_saved(r, n);
        names_inputs(r, n);
        names_forward(r, n);
        for (int i = 0; i < 5; i++)
            fh_call_names_add(n, "backward/", grads[i], &r->grads_t[i]);
    }
    fattn_status st = fh_call_log_write(r->calls, dir, n, r->node);
    free(n);
    return st;
}

static fattn_status step(fh_case_run *r, fh_state to)
{
    fattn_status st = fh_state_check(r->state, to);
    if (st != FATTN_OK)
        return st;
    r->state = to;
    return FATTN_OK;
}

/* The front end's state is made when the first state needs it (after the
 * inputs exist: the adapter keeps views of them). */
fattn_status fh_case_run_fe_start(fh_case_run *r)
{
    assert(r->ops && r->env.in == &r->in);
    return r->fe ? FATTN_OK : r->ops->init(&r->fe, &r->env);
}

static fattn_status observe_private(fh_case_run *r, fh_state state, fh_h5_node *g)
{
    return r->ops->record_private ? r->ops->record_private(r->fe, state, g) : FATTN_OK;
}

/* A Float8Tensor's scale_inv travels with it: the attribute scale_inv of
 * its dataset in g (si 0: not FP8, nothing to record). */
static fattn_status put_scale_inv(fh_h5_node *g, const char *name, float si)
{
    fh_h5_node *ds = (g && si != 0.0f) ? fh_h5_node_find(g, name) : NULL;
    return ds ? fh_h5_node_set_float32(ds, "scale_inv", si) : FATTN_OK;
}

/* INPUTS: generate and record. */
fattn_status fh_case_run_inputs(fh_case_run *r)
{
    fattn_status st = step(r, FH_STATE_INPUTS);
    if (st != FATTN_OK)
        return st;
    if ((st = fh_inputs_make(r->spec, &r->in)) != FATTN_OK)
        return st;
    r->own_inputs = true;
    return fh_case_run_put_inputs(r);
}

fattn_status fh_case_run_put_inputs(fh_case_run *r)
{
    fattn_status st;
    fh_h5_node *g;
    if ((st = fh_h5_node_group(r->node, "inputs", &g)) != FATTN_OK)
        return st;
#define PUT_INPUT(name) TRY(fh_fe_put_tensor(g, #name, &r->in.name));
    CASE_INPUTS(PUT_INPUT)
#undef PUT_INPUT
    if ((st = put_scale_inv(g, "q", r->in.q_scale_inv)) != FATTN_OK ||
        (st = put_scale_inv(g, "k", r->in.k_scale_inv)) != FATTN_OK ||
        (st = put_scale_inv(g, "v", r->in.v_scale_inv)) != FATTN_OK)
        return st;
    return put_scale_inv(g, "d_out", r->in.d_out_scale_inv);
}

/* Views of a recorded inputs/ group (the spec-resolved window and diagonal
 * are not recorded and stay unset). */
void fh_case_run_load_inputs(fh_case_run *r, const fh_h5_node *in)
{
    assert(!r->own_inputs);
#define LOAD_INPUT(name) r->in.name = fh_fe_node_tensor(in, #name);
    CASE_INPUTS(LOAD_INPUT)
#undef LOAD_INPUT
    r->in.q_scale_inv = fh_fe_node_scale_inv(in, "q");
    r->in.k_scale_inv = fh_fe_node_scale_inv(in, "k");
    r->in.v_scale_inv = fh_fe_node_scale_inv(in, "v");
    r->in.d_out_scale_inv = fh_fe_node_scale_inv(in, "d_out");
}

static fattn_status record_forward(fh_case_run *r, const fh_fe_forward *res,
                                   fh_h5_node **group)
{
    fh_h5_node *g, *a;
    fattn_status st;
    if ((st = fh_h5_node_group(r->node, "forward", &g)) != FATTN_OK ||
        (st = fh_fe_put_tensor(g, "out", &res->out)) != FATTN_OK ||
        (st = fh_fe_put_tensor(g, "max_logit", &res->max_logit)) != FATTN_OK ||
        (st = fh_h5_node_group(g, "aux", &a)) != FATTN_OK)
        return st;
    for (int i = 0; i < FH_SAVED_NAUX; i++)
        if ((st = fh_fe_put_tensor(
                 a, fh_saved_name((fh_saved_slot)(FH_SAVED_AUX_FIRST + i)),
                 &res->aux[i])) != FATTN_OK)
            return st;
    /* TE's forward draws its rng_state from the global generator and
     * advances it: the generator after the forward is an effect of the
     * forward that a later call would see, so it is recorded too. */
    /* out as a Float8Tensor (fp8_output): its scale_inv travels with it */
    if (res->out_scale_inv != 0.0f &&
        (st = fh_h5_node_set_float32(g, "out_scale_inv", res->out_scale_inv)) != FATTN_OK)
        return st;
    if ((st = fh_h5_node_set_int64(g, "rng_gen_seed", (int64_t)r->env.gen->seed)) != FATTN_OK ||
        (st = fh_h5_node_set_int64(g, "rng_gen_offset", (int64_t)r->env.gen->offset)) != FATTN_OK)
        return st;
    /* which cuDNN engine config ran: provenance, never counted by diff */
    if (fattn_engine_supports(r->opts->engine, FATTN_ENGINE_Q_PLAN_TAG) &&
        (st = fh_h5_node_set_string(g, "prov_engine_tag",
                                       fattn_engine_last_report(r->opts->engine).tag)) != FATTN_OK)
        return st;
    *group = g;
    return FATTN_OK;
}

/* returned/: what the forward call returned, where the adapter says it
 * is another call's than the recorded forward's (the split wrapper's). */
static fattn_status record_returned(fh_case_run *r, const fh_fe_forward *res)
{
    if (!res->returned)
        return FATTN_OK;
    fh_h5_node *g;
    fattn_status st;
    if ((st = fh_h5_node_group(r->node, "returned", &g)) != FATTN_OK ||
        (st = fh_fe_put_tensor(g, "out", &res->ret_out)) != FATTN_OK ||
        (st = fh_fe_put_tensor(g, "max_logit", &res->ret_max_logit)) != FATTN_OK)
        return st;
    return put_scale_inv(g, "out", res->ret_out_scale_inv);
}

/* FORWARD: the front end's forward, recorded. */
fattn_status fh_case_run_forward(fh_case_run *r)
{
    fattn_status st = step(r, FH_STATE_FORWARD);
    fh_fe_forward res;
    memset(&res, 0, sizeof res);
    fh_h5_node *g = NULL;
    if (st != FATTN_OK || (st = fh_case_run_fe_start(r)) != FATTN_OK ||
        (st = r->ops->forward(r->fe, &res)) != FATTN_OK ||
        (st = record_forward(r, &res, &g)) != FATTN_OK)
        return st;
    r->fwd_t[0] = res.out;
    r->fwd_t[1] = res.max_logit;
    memcpy(r->fwd_t + 2, res.aux, sizeof res.aux);
    if ((st = record_returned(r, &res)) != FATTN_OK)
        return st;
    return observe_private(r, FH_STATE_FORWARD, g);
}

/* The saved tensors by role and the backward-read set into `g`. */
static fattn_status record_saved(fh_case_run *r, const fh_fe_saved *res, fh_h5_node *g)
{
    (void)r;
    fattn_status st;
    for (int i = 0; i < FH_SAVED_COUNT; i++) {
        const char *role = fh_saved_name((fh_saved_slot)i);
        if ((st = fh_fe_put_tensor(g, role, &res->t[i])) != FATTN_OK ||
            (st = put_scale_inv(g, role, res->scale_inv[i])) != FATTN_OK)
            return st;
    }
    return fh_ctx_record_write(&res->rec, g);
}

/* SAVE_CTX: what the front end saved for backward, by role, and the
 * backward-read set as attributes. */
fattn_status fh_case_run_save_ctx(fh_case_run *r)
{
    fattn_status st = step(r, FH_STATE_SAVE_CTX);
    fh_fe_saved res;
    memset(&res, 0, sizeof res);
    fh_h5_node *g = NULL;
    if (st != FATTN_OK || (st = fh_case_run_fe_start(r)) != FATTN_OK ||
        (st = r->ops->save_ctx(r->fe, &res)) != FATTN_OK ||
        (st = fh_h5_node_group(r->node, "save_ctx", &g)) != FATTN_OK ||
        (st = record_saved(r, &res, g)) != FATTN_OK)
        return st;
    memcpy(r->saved_t, res.t, sizeof res.t);
    if ((st = observe_private(r, FH_STATE_SAVE_CTX, g)) != FATTN_OK)
        return st;
    /* the forward's engine calls, once the saved slots can name them (an
     * FP8 forward hands the engine the quantised copies it saves) */
    return fh_case_run_write_calls(r, FH_CALL_FORWARD);
}

fattn_status fh_case_run_saved(fh_case_run *r)
{
    assert(r->fe && r->state == FH_STATE_SAVE_CTX && r->ops->saved);
    fh_fe_saved res;
    memset(&res, 0, sizeof res);
    fh_h5_node *g = NULL;
    fattn_status st = r->ops->saved(r->fe, &res);
    if (st != FATTN_OK || (st = fh_h5_node_group(r->node, "save_ctx", &g)) != FATTN_OK)
        return st;
    return record_saved(r, &res, g);
}

/* A second backward on the context the first one used, after everything
 * of the first is recorded (a front end without a guard overwrites its
 * grads): backward/_impl@second_backward gets the call's status name and
 * @second_backward_error its message. Both TE versions raise there, so
 * that anything but a refusal is a front end handing out grads twice. */
static fattn_status backward_again(fh_case_run *r, const fattn_tensor *d_out, fh_h5_node *g)
{
    bool applies = false;
    fattn_status again = r->ops->backward_again ? r->ops->backward_again(r->fe, d_out, &applies)
                                                : FATTN_OK;
    if (!applies)
        return FATTN_OK;
    char msg[1024] = "";
    if (again != FATTN_OK)
        snprintf(msg, sizeof msg, "%s", fattn_last_error());
    fh_h5_node *impl;
    fattn_status st;
    if ((st = fh_h5_node_group(g, "_impl", &impl)) != FATTN_OK ||
        (st = fh_h5_node_set_string(impl, "second_backward", fattn_status_name(again))) !=
            FATTN_OK)
        return st;
    return msg[0] ? fh_h5_node_set_string(impl, "second_backward_error", msg) : FATTN_OK;
}

/* A backward that failed, under opts.backward_after_failure: its status
 * and message (backward/_impl@first_backward, @first_backward_error), then a
 * second backward on the same context (backward_again), and the run goes on.
 * Both TE versions clear the context's guard before their backward calls
 * the engine, so the second must be refused as after a first that ran. */
static fattn_status backward_after_failure(fh_case_run *r, fattn_status failed,
                                           const fattn_tensor *d_out)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fattn_last_error());
    fh_h5_node *g = NULL, *impl = NULL;
    fattn_status st;
    if ((st = fh_h5_node_group(r->node, "backward", &g)) != FATTN_OK ||
        (st = fh_h5_node_group(g, "_impl", &impl)) != FATTN_OK ||
        (st = fh_h5_node_set_string(impl, "first_backward", fattn_status_name(failed))) !=
            FATTN_OK ||
        (st = fh_h5_node_set_string(impl, "first_backward_error", msg)) != FATTN_OK)
        return st;
    return backward_again(r, d_out, g);
}

/* BACKWARD: the front end's backward from d_out, recorded. */
fattn_status fh_case_run_backward(fh_case_run *r, const fattn_tensor *d_out)
{
    fattn_status st = step(r, FH_STATE_BACKWARD);
    fh_fe_grads res;
    memset(&res, 0, sizeof res);
    fh_h5_node *g = NULL;
    if (st != FATTN_OK || (st = fh_case_run_fe_start(r)) != FATTN_OK)
        goto out;
    st = r->ops->backward(r->fe, d_out, &res);
    if (st != FATTN_OK && r->opts->backward_after_failure) {
        st = backward_after_failure(r, st, d_out);
        goto out;
    }
    if (st != FATTN_OK || (st = fh_h5_node_group(r->node, "backward", &g)) != FATTN_OK ||
        (st = fh_fe_put_tensor(g, "dq", &res.dq)) != FATTN_OK ||
        (st = fh_fe_put_tensor(g, "dk", &res.dk)) != FATTN_OK ||
        (st = fh_fe_put_tensor(g, "dv", &res.dv)) != FATTN_OK ||
        (st = fh_fe_put_tensor(g, "d_bias", &res.d_bias)) != FATTN_OK ||
        (st = fh_fe_put_tensor(g, "d_softmax_offset", &res.d_softmax_offset)) != FATTN_OK)
        goto out;
    /* FP8 grads (FP8 inputs, no bf16_backward): one scale_inv for the three */
    for (int i = 0; i < 3; i++)
        if ((st = put_scale_inv(g, (const char *const[]){"dq", "dk", "dv"}[i],
                                res.grads_scale_inv)) != FATTN_OK)
            goto out;
    /* the amaxes an FP8 backward wrote, in the quantizers it was handed */
    if ((res.dO_quantizer &&
         (st = fh_ctx_quantizer_write(g, "dO_quantizer", res.dO_quantizer)) != FATTN_OK) ||
        (res.dP_quantizer &&
         (st = fh_ctx_quantizer_write(g, "dP_quantizer", res.dP_quantizer)) != FATTN_OK) ||
        (res.dQKV_quantizer &&
         (st = fh_ctx_quantizer_write(g, "dQKV_quantizer", res.dQKV_quantizer)) != FATTN_OK))
        goto out;
    /* which cuDNN engine config ran: provenance, never counted by diff */
    if (fattn_engine_supports(r->opts->engine, FATTN_ENGINE_Q_PLAN_TAG) &&
        (st = fh_h5_node_set_string(g, "prov_engine_tag",
                                    fattn_engine_last_report(r->opts->engine).tag)) != FATTN_OK)
        goto out;
    if ((st = observe_private(r, FH_STATE_BACKWARD, g)) != FATTN_OK)
        goto out;
    const fattn_tensor grads[5] = {res.dq, res.dk, res.dv, res.d_bias, res.d_softmax_offset};
    memcpy(r->grads_t, grads, sizeof grads);
    if ((st = fh_case_run_write_calls(r, FH_CALL_BACKWARD)) != FATTN_OK)
        goto out;
    if (r->opts->backward_again)
        st = backward_again(r, d_out, g);
out:
    /* what a second backward handed the engine is not the run's */
    fh_call_log_discard(r->calls, FH_CALL_BACKWARD);
    return st;
}

fattn_status fh_case_node_new(const fh_spec *s, fh_h5_node **out)
{
    fattn_status st = fh_h5_node_new_group(s->id, out);
    if (st != FATTN_OK)
        return st;
    char *canon = NULL;
    if ((st = fh_spec_canonical(s, &canon)) != FATTN_OK)
        goto out;
    st = fh_h5_node_set_string(*out, "spec", canon);
out:
    free(canon);
    if (st != FATTN_OK) {
        fh_h5_node_free(*out);
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
fattn_status fh_case_record_refusal(const fh_spec *spec, fh_h5_node **node,
                                       fattn_status refused, fh_state state)
{
    char msg[1024], rule[64];
    snprintf(msg, sizeof msg, "%s", fattn_last_error());
    refusal_rule(msg, rule, sizeof rule);
    fh_h5_node_free(*node);
    *node = NULL;
    fattn_status st;
    if ((st = fh_case_node_new(spec, node)) != FATTN_OK ||
        (st = fh_h5_node_set_string(*node, "refused_status", fattn_status_name(refused))) !=
            FATTN_OK ||
        (st = fh_h5_node_set_string(*node, "refused_rule", rule)) != FATTN_OK ||
        (st = fh_h5_node_set_string(*node, "refused_state", fh_state_name(state))) != FATTN_OK)
        return st;
    return fh_h5_node_set_string(*node, "refused_message", msg);
}

/* Turn an engine refusal into the recorded skip, a front end's refusal of
 * an expect_refusal case into the recorded refusal; anything else stays an
 * error. */
fattn_status fh_case_finish(const fh_spec *spec, const fh_run_opts *opts,
                               fh_h5_node **node, fattn_status st, const char *where,
                               fh_h5_node **out)
{
    if (st == FATTN_E_UNSUPPORTED) {
        char reason[1024];
        snprintf(reason, sizeof reason, "%s", fattn_last_error());
        fh_h5_node_free(*node);
        *node = NULL;
        if ((st = fh_case_node_new(spec, node)) != FATTN_OK ||
            (st = fh_h5_node_set_string(*node, "skipped", reason)) != FATTN_OK)
            goto out;
    } else if (st != FATTN_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", fattn_last_error());
        st = fattn_error(st, "case %s (%s): %s", spec->id, where, msg);
        goto out;
    }
    char note[FH_TE_NOTE_MAX];
    if ((st = fh_case_te_note(spec, opts->te_rules, note, sizeof note)) != FATTN_OK ||
        (note[0] && (st = fh_h5_node_set_string(*node, "prov_te_route", note)) != FATTN_OK))
        goto out;
    /* the attribute digest, the last change to the case before it is written */
    if ((st = fh_h5_node_seal_attrs(*node)) != FATTN_OK)
        goto out;
    *out = *node;
    *node = NULL;
out:
    fh_h5_node_free(*node);
    *node = NULL;
    return st;
}

fattn_status fh_case_run_finish(fh_case_run *r, fattn_status st, fh_h5_node **out)
{
    if (r->spec->expect_refusal && fh_spec_refusal_status(st))
        st = fh_case_record_refusal(r->spec, &r->node, st, r->state);
    char where[96];
    snprintf(where, sizeof where, "%s, state %s", r->ops->name, fh_state_name(r->state));
    st = fh_case_finish(r->spec, r->opts, &r->node, st, where, out);
    fh_case_run_free(r);
    return st;
}

/* inputs/_impl@<input>: each input's fingerprint as the front end left it
 * after the run, beside the one recorded before (the caller's tensors:
 * TE's front ends must not write into them). */
fattn_status fh_case_run_inputs_after(fh_case_run *r)
{
    fh_h5_node *in = fh_h5_node_find(r->node, "inputs"), *impl;
    if (!in)
        return FATTN_OK;
    fattn_status st = fh_h5_node_group(in, "_impl", &impl);
    if (st != FATTN_OK)
        return st;
#define PUT_AFTER(name) TRY(fh_fe_put_fingerprint(impl, #name, &r->in.name));
    CASE_INPUTS(PUT_AFTER)
#undef PUT_AFTER
    return FATTN_OK;
}

