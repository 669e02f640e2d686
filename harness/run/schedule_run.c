/* A case's schedule through one front end (runner.h, docs/run-files.md
 * "Schedules"): every step recorded under /cases/<id>/steps/<k>/, the
 * micro-batches whose forward is alive each holding its own front-end
 * state, one generator and one module (module.h) for the whole run. */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case_run.h"
#include "module.h"
#include "runner.h"

#define MAX_LIVE 64

/* One micro-batch: a forward and, in training, its ctx until its B. */
typedef struct micro_batch {
    int64_t mb;
    fh_spec spec;           /* the step's (seed + k) */
    fh_case_run run;        /* its front end's state and inputs */
    fh_h5_node *fnode;      /* its forward's step group */
} micro_batch;

typedef struct sched_run {
    const fh_spec *spec;
    const fh_run_opts *opts;
    fattn_rng_gen gen;
    fh_module m;
    fh_h5_node *node, *steps;
    micro_batch *live[MAX_LIVE];
    int n_live;
    int64_t k;              /* the step running, 1-based */
    fh_state state;         /* its state, for messages */
} sched_run;

static void mb_free(micro_batch *b)
{
    if (!b)
        return;
    fh_case_run_free(&b->run);
    fh_spec_free(&b->spec);
    free(b);
}

/* steps/<k> */
static fattn_status step_group(sched_run *r, fh_h5_node **g)
{
    char name[32];
    snprintf(name, sizeof name, "%" PRId64, r->k);
    return fh_h5_node_group(r->steps, name, g);
}

/* A micro-batch for step k: its spec, a run of opts->impl over the
 * schedule's generator and the module's quantizers, recording into g. */
static fattn_status mb_new(sched_run *r, fh_h5_node *g, micro_batch **out)
{
    micro_batch *b = calloc(1, sizeof *b);
    if (!b)
        return fattn_error(FATTN_E_NOMEM, "out of memory for a micro-batch");
    fattn_status st;
    if ((st = fh_spec_step(r->spec, r->m.kv ? &r->m.plan : NULL, r->k, &b->spec)) != FATTN_OK ||
        (st = fh_case_run_init(&b->run, &b->spec, r->opts)) != FATTN_OK)
        goto out;
    b->run.env.gen = &r->gen;
    b->run.env.quantizers = r->spec->fp8 ? &r->m.qs : NULL;
    b->run.node = b->fnode = g;
    *out = b;
out:
    if (st != FATTN_OK) {
        fh_spec_free(&b->spec);
        free(b);
    }
    return st;
}

/* The end of a micro-batch, after a step whose status so far is `first`:
 * the caller's tensors as it left them, then its state freed. It ends after
 * a failure too; then the first error stands, status and message, and one
 * here is dropped. */
static fattn_status mb_end(sched_run *r, micro_batch *b, fattn_status first)
{
    fattn_status st = FATTN_OK;
    if (r->opts->inputs_after && b->run.state >= FH_STATE_INPUTS) {
        char msg[3072] = ""; /* as long as the library's last-error message */
        if (first != FATTN_OK)
            snprintf(msg, sizeof msg, "%s", fattn_last_error());
        b->run.node = b->fnode;
        st = fh_case_run_inputs_after(&b->run);
        if (first != FATTN_OK && st != FATTN_OK)
            fattn_error(first, "%s", msg);
    }
    mb_free(b);
    return first != FATTN_OK ? first : st;
}

/* One state of micro-batch b, recorded into step group g when --until
 * reaches it, else into a scratch group dropped after: a schedule runs
 * every state of every step, since later steps depend on them (the amaxes
 * a backward writes, the cache), and records those up to --until. */
static fattn_status run_state(sched_run *r, micro_batch *b, fh_h5_node *g, fh_state s)
{
    fh_h5_node *scratch = NULL;
    fattn_status st = FATTN_OK;
    if (r->opts->until < s)
        st = fh_h5_node_new_group("", &scratch);
    b->run.node = scratch ? scratch : g;
    r->state = s;
    if (st != FATTN_OK)
        goto out;
    if (s == FH_STATE_FORWARD)
        st = fh_case_run_forward(&b->run);
    else if (s == FH_STATE_SAVE_CTX && b->run.state == FH_STATE_FORWARD)
        st = fh_case_run_save_ctx(&b->run);
    else if (s == FH_STATE_SAVE_CTX)
        st = fh_case_run_saved(&b->run);
    else
        st = fh_case_run_backward(&b->run, &b->run.in.d_out);
out:
    b->run.node = g;
    fh_h5_node_free(scratch);
    return st;
}

/* The forward states, up to SAVE_CTX. */
static fattn_status mb_forward(sched_run *r, micro_batch *b)
{
    fattn_status st = run_state(r, b, b->fnode, FH_STATE_FORWARD);
    if (st != FATTN_OK)
        return st;
    /* at --until forward the forward's engine calls are written here, as the
     * runner writes them; save_ctx, which writes them otherwise, then runs
     * into scratch */
    if (r->opts->until == FH_STATE_FORWARD &&
        (st = fh_case_run_write_calls(&b->run, FH_CALL_FORWARD)) != FATTN_OK)
        return st;
    return run_state(r, b, b->fnode, FH_STATE_SAVE_CTX);
}

/* F m: inputs drawn for this step (seed + k), the forward; in training the
 * micro-batch stays alive for its B. */
static fattn_status step_f(sched_run *r, const fh_step *s, fh_h5_node *g)
{
    micro_batch *b = NULL;
    fattn_status st = mb_new(r, g, &b);
    if (st != FATTN_OK)
        return st;
    b->mb = s->mb;
    r->state = FH_STATE_INPUTS;
    if ((st = fh_case_run_inputs(&b->run)) != FATTN_OK || (st = mb_forward(r, b)) != FATTN_OK ||
        !fh_spec_has_backward(r->spec))
        goto out;
    assert(r->n_live < MAX_LIVE); /* the schedule's check bounds it */
    r->live[r->n_live++] = b;
    return FATTN_OK;
out:
    return mb_end(r, b, st);
}

/* B m: the ctx as the backward finds it (save_ctx/ again: what it holds by
 * reference may have changed since the forward), then the backward with
 * the micro-batch's d_out. */
static fattn_status step_b(sched_run *r, const fh_step *s, fh_h5_node *g)
{
    int at = -1;
    for (int i = 0; i < r->n_live; i++)
        at = r->live[i]->mb == s->mb ? i : at;
    assert(at >= 0); /* the schedule's check */
    micro_batch *b = r->live[at];
    r->live[at] = r->live[--r->n_live];
    fattn_status st = run_state(r, b, g, FH_STATE_SAVE_CTX);
    if (st != FATTN_OK)
        goto out;
    st = run_state(r, b, g, FH_STATE_BACKWARD);
out:
    return mb_end(r, b, st);
}

/* A cache step: q and the new tokens drawn for this step, the tokens
 * appended to the module's cache, the forward over it. */
static fattn_status step_kv(sched_run *r, fh_h5_node *g)
{
    micro_batch *b = NULL;
    fattn_status st = mb_new(r, g, &b);
    if (st != FATTN_OK)
        return st;
    r->state = FH_STATE_INPUTS;
    b->run.state = FH_STATE_INPUTS;
    if ((st = fh_inputs_make(&b->spec, &b->run.in)) != FATTN_OK)
        goto out;
    b->run.own_inputs = true;
    if ((st = fh_module_cache_step(&r->m, r->k, &b->spec, &b->run.in)) != FATTN_OK ||
        (st = fh_case_run_put_inputs(&b->run)) != FATTN_OK)
        goto out;
    st = mb_forward(r, b);
out:
    return mb_end(r, b, st);
}

static fattn_status run_step(sched_run *r, const fh_step *s)
{
    fh_h5_node *g = NULL;
    fattn_status st = step_group(r, &g);
    if (st != FATTN_OK)
        return st;
    r->state = FH_STATE_BEGIN;
    switch (s->kind) {
    case FH_STEP_F: return step_f(r, s, g);
    case FH_STEP_B: return step_b(r, s, g);
    case FH_STEP_U: return fh_module_update(&r->m, s->update, g);
    case FH_STEP_X: return fh_module_extra_state(&r->m, g);
    case FH_STEP_KV: return step_kv(r, g);
    }
    return fattn_error(FATTN_E_INTERNAL, "step %" PRId64 ": unknown kind", r->k);
}

static void sched_free(sched_run *r)
{
    for (int i = 0; i < r->n_live; i++)
        mb_free(r->live[i]);
    r->n_live = 0;
    fh_module_free(&r->m);
}

/* Where a failure happened: the front end, the step and its state. */
static void where_of(const sched_run *r, char *buf, size_t n)
{
    char name[64] = "";
    if (r->k >= 1 && r->k <= r->spec->schedule->n)
        fh_step_name(&r->spec->schedule->steps[r->k - 1], name, sizeof name);
    snprintf(buf, n, "%s, step %" PRId64 " %s, state %s",
             fh_impl_name(r->opts->impl), r->k, name, fh_state_name(r->state));
}

fattn_status fh_run_schedule(const fh_spec *spec, const fh_run_opts *opts,
                                fh_h5_node **out)
{
    *out = NULL;
    assert(spec->schedule);
    sched_run r = {.spec = spec, .opts = opts, .state = FH_STATE_BEGIN};
    /* one generator for the whole run (TE's global generator) */
    r.gen.seed = (uint64_t)spec->rng_seed;
    r.gen.offset = (uint64_t)spec->rng_offset;
    fattn_status st = fh_case_node_new(spec, &r.node);
    if (st != FATTN_OK)
        return st;
    if ((st = fh_module_init(&r.m, spec)) != FATTN_OK ||
        (st = fh_h5_node_group(r.node, "steps", &r.steps)) != FATTN_OK)
        goto out;
    for (int64_t i = 0; i < spec->schedule->n; i++) {
        const fh_step *s = &spec->schedule->steps[i];
        r.k = i + 1;
        if ((st = run_step(&r, s)) != FATTN_OK)
            goto out;
    }
out:
    for (int i = 0; i < r.n_live; i++) { /* forwards whose B never came */
        /* once one failed, the rest are freed without recording their end */
        if (st != FATTN_OK)
            mb_free(r.live[i]);
        else
            st = mb_end(&r, r.live[i], FATTN_OK);
        r.live[i] = NULL;
    }
    r.n_live = 0;
    char where[160];
    where_of(&r, where, sizeof where);
    sched_free(&r);
    /* a case TE refuses refuses at its first forward: recorded as one */
    if (spec->expect_refusal && fh_spec_refusal_status(st))
        st = fh_case_record_refusal(spec, &r.node, st, r.state);
    if (st != FATTN_OK && st != FATTN_E_UNSUPPORTED && opts->keep_partial)
        st = FATTN_OK; /* what the steps recorded up to the failure */
    return fh_case_finish(spec, opts, &r.node, st, where, out);
}

/* ---- replay ------------------------------------------------------------------ */

typedef struct sched_replay {
    sched_run r;             /* spec, opts, node, steps, k, state */
    const fh_h5_node *rsteps;
    fh_state from;
} sched_replay;

static const fh_h5_node *recorded_step(const sched_replay *p, int64_t k)
{
    char name[32];
    snprintf(name, sizeof name, "%" PRId64, k);
    return fh_h5_node_find(p->rsteps, name);
}

/* Every child of src copied under dst (but `skip`). */
static fattn_status copy_children(const fh_h5_node *src, fh_h5_node *dst, const char *skip)
{
    fattn_status st;
    for (size_t i = 0; i < src->n_children; i++)
        if ((!skip || strcmp(src->children[i]->name, skip) != 0) &&
            (st = fh_h5_node_copy(src->children[i], dst, NULL)) != FATTN_OK)
            return st;
    return FATTN_OK;
}

/* A forward step: copied as recorded, or (from FORWARD) setup_ctx run
 * again on its recorded forward. */
static fattn_status replay_forward(sched_replay *p, const fh_h5_node *rec, fh_h5_node *g)
{
    if (p->from == FH_STATE_SAVE_CTX)
        return copy_children(rec, g, NULL);
    micro_batch *b = NULL;
    fattn_status st;
    if ((st = copy_children(rec, g, "save_ctx")) != FATTN_OK ||
        (st = mb_new(&p->r, g, &b)) != FATTN_OK)
        return st;
    fh_case_run_load_inputs(&b->run, fh_h5_node_find(rec, "inputs"));
    b->run.state = FH_STATE_FORWARD;
    p->r.state = FH_STATE_SAVE_CTX;
    if ((st = fh_case_run_fe_start(&b->run)) != FATTN_OK ||
        (st = b->run.ops->load_forward(b->run.fe, rec)) != FATTN_OK)
        goto out;
    st = fh_case_run_save_ctx(&b->run);
out:
    mb_free(b);
    return st;
}

/* A B step: its recorded save_ctx (the ctx as the backward found it) into
 * the front end's backward, with its forward's d_out. */
static fattn_status replay_backward(sched_replay *p, const fh_step *s, const fh_h5_node *rec,
                                    fh_h5_node *g)
{
    (void)s;
    int64_t f = fh_schedule_forward_of(p->r.spec->schedule, p->r.k);
    const fh_h5_node *fin = f >= 1 ? recorded_step(p, f) : NULL;
    const fh_h5_node *sc_g = fh_h5_node_find(rec, "save_ctx");
    fin = fin ? fh_h5_node_find(fin, "inputs") : NULL;
    if (!sc_g)
        return fattn_error(FATTN_E_STATE, "cannot resume from state %s: the file lacks this B "
                           "step's save_ctx", fh_state_name(p->from));
    if (p->r.opts->until < FH_STATE_BACKWARD) /* as recorded, nothing recomputed */
        return fh_h5_node_copy(sc_g, g, NULL);
    if (!fin)
        return fattn_error(FATTN_E_INVALID_FILE, "the file lacks the B step's forward's inputs");
    int64_t k = p->r.k;
    p->r.k = f; /* the micro-batch's spec is its forward's */
    micro_batch *b = NULL;
    fattn_status st = mb_new(&p->r, g, &b);
    p->r.k = k;
    fh_ctx_record rec_ctx;
    if (st != FATTN_OK || (st = fh_h5_node_copy(sc_g, g, NULL)) != FATTN_OK)
        goto out;
    fh_case_run_load_inputs(&b->run, fin);
    /* the backward reads the recorded slots as views: its engine
     * call's tensors are named by them */
    for (int i = 0; i < FH_SAVED_COUNT; i++)
        b->run.saved_t[i] = fh_fe_node_tensor(sc_g, fh_saved_name((fh_saved_slot)i));
    b->run.state = FH_STATE_SAVE_CTX;
    p->r.state = FH_STATE_SAVE_CTX;
    if ((st = fh_ctx_record_read(sc_g, &rec_ctx)) != FATTN_OK ||
        (st = fh_case_run_fe_start(&b->run)) != FATTN_OK ||
        (st = b->run.ops->load_save_ctx(b->run.fe, sc_g, &rec_ctx)) != FATTN_OK)
        goto out;
    if (fattn_tensor_is_empty(&b->run.in.d_out)) {
        st = fattn_error(FATTN_E_INVALID_FILE, "the forward's inputs/d_out missing");
        goto out;
    }
    p->r.state = FH_STATE_BACKWARD;
    st = fh_case_run_backward(&b->run, &b->run.in.d_out);
out:
    mb_free(b);
    return st;
}

static fattn_status replay_step(sched_replay *p, const fh_step *s, const fh_h5_node *rec)
{
    fh_h5_node *g = NULL;
    fattn_status st = step_group(&p->r, &g);
    if (st != FATTN_OK)
        return st;
    p->r.state = FH_STATE_BEGIN;
    switch (s->kind) {
    case FH_STEP_F:
    case FH_STEP_KV: return replay_forward(p, rec, g);
    case FH_STEP_B: return replay_backward(p, s, rec, g);
    case FH_STEP_U:
    case FH_STEP_X: return copy_children(rec, g, NULL);
    }
    return fattn_error(FATTN_E_INTERNAL, "step %" PRId64 ": unknown kind", p->r.k);
}

fattn_status fh_replay_schedule(const fh_h5_node *recorded, const fh_spec *spec,
                                   fh_state from, const fh_run_opts *opts,
                                   fh_h5_node **out)
{
    *out = NULL;
    sched_replay p = {.r = {.spec = spec, .opts = opts}, .from = from};
    p.rsteps = fh_h5_node_find(recorded, "steps");
    char where[160];
    fattn_status st = fh_case_node_new(spec, &p.r.node);
    if (st != FATTN_OK)
        return st;
    if (!p.rsteps) {
        st = fattn_error(FATTN_E_STATE, "cannot resume from state %s: the file lacks steps/",
                         fh_state_name(from));
        goto out;
    }
    if (fh_schedule_is_cache(spec->schedule)) {
        if ((st = fh_spec_kv_plan(spec, &p.r.m.plan)) != FATTN_OK)
            goto out;
        p.r.m.kv = true;
    }
    if ((st = fh_h5_node_group(p.r.node, "steps", &p.r.steps)) != FATTN_OK)
        goto out;
    for (int64_t i = 0; i < spec->schedule->n; i++) {
        const fh_step *s = &spec->schedule->steps[i];
        p.r.k = i + 1;
        const fh_h5_node *rec = recorded_step(&p, p.r.k);
        if (!rec)
            break;
        if ((st = replay_step(&p, s, rec)) != FATTN_OK)
            goto out;
    }
out:
    where_of(&p.r, where, sizeof where);
    sched_free(&p.r);
    return fh_case_finish(spec, opts, &p.r.node, st, where, out);
}
