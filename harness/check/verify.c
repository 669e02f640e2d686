/* The checks of `fattn verify` (see verify.h). */
#include "verify.h"

#include <assert.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fattn/engine.h"
#include "cause.h"
#include "fattn_config.h"
#include "runfile.h"
#include "runner.h"
#include "fe.h"
#include "saved_slots.h"
#if FATTN_TESTING
#include <math.h>

#include "fattn/dtype.h"
#include "fault_engine.h"
#endif

/* The platform key goldens are filed under: bitwise comparison against
 * goldens is only meaningful on an exact match. The engine knows it. */
void fh_verify_platform_key(const fattn_engine *e, char *buf, size_t n)
{
    snprintf(buf, n, "%s", fattn_engine_last_report(e).platform);
}

/* Tensors that are non-deterministic by construction on an engine even with
 * the deterministic backward (measured on the H200, docs/determinism.md):
 * compared within the io dtype's tolerance instead of bitwise. */
static const char *const cudnn_noisy[] = {"backward/d_softmax_offset", NULL};

/* A comparison result set up for this case's engine. */
static fh_compare_result cmp_init(const fh_verify_case *c, fattn_engine *e)
{
    fh_compare_result r = {0};
    r.keep_all = true;
    if (fattn_engine_supports(e, FATTN_ENGINE_Q_NOISY_D_SOFTMAX_OFFSET)) {
        fh_tol_profile p;
        fh_tol_profile_builtin(&p);
        fh_tol t = fh_tol_profile_lookup(&p, "backward/d_softmax_offset", c->spec->dtype);
        fh_tol_profile_free(&p);
        r.noisy = cudnn_noisy;
        r.noisy_rtol = t.rtol;
        r.noisy_atol = t.atol;
    }
    return r;
}

/* A check's differences into the case (cause.h), its sides named. */
static void check_note(fh_verify_case *c, const char *check, fh_compare_result *r,
                       const fh_h5_node *a, const fh_h5_node *b, const char *side_a,
                       const char *side_b)
{
    fh_verify_note_check(c, check, r, a, b, side_a, side_b);
}

/* A result that keeps every difference with its values (cause.h). */
static fh_compare_result cmp_all(void)
{
    fh_compare_result r = {0};
    r.keep_all = true;
    return r;
}

/* Run a case; on failure retry with earlier --until so a difference in an
 * earlier state can still be found. *err and *status get the first
 * failure (status NULL: not wanted). */
static fh_h5_node *run_partial(const fh_spec *s, fh_impl impl, bool via_wrapper,
                                  fattn_engine *e, char *err, size_t errn, fattn_status *status)
{
    static const fh_state untils[] = {FH_STATE_BACKWARD, FH_STATE_SAVE_CTX,
                                         FH_STATE_FORWARD, FH_STATE_INPUTS};
    for (size_t i = 0; i < sizeof untils / sizeof untils[0]; i++) {
        fh_run_opts o = {.impl = impl, .engine = e, .until = untils[i],
                            .poison = FH_POISON_PATTERN, .via_wrapper = via_wrapper,
                            .backward_again = true, .inputs_after = true};
        fh_h5_node *n = NULL;
        fattn_status st = fh_run_case(s, &o, &n);
        if (st != FATTN_OK) {
            if (i == 0) {
                snprintf(err, errn, "%s", fattn_last_error());
                if (status)
                    *status = st;
            }
            /* every step of a schedule runs whatever --until says (later
             * steps depend on them): its steps up to the failure instead */
            if (s->schedule && st != FATTN_E_UNSUPPORTED) {
                o.keep_partial = true;
                return fh_run_case(s, &o, &n) == FATTN_OK ? n : NULL;
            }
            continue;
        }
        return n;
    }
    return NULL;
}

static const char *skipped_reason(const fh_h5_node *n)
{
    const fh_h5_attr *a = n ? fh_h5_node_attr(n, "skipped") : NULL;
    return a && a->kind == FH_H5_ATTR_STRING ? a->s : NULL;
}

bool fh_verify_side_failed(const fh_verify_case *c)
{
    for (int i = 0; i < FH_IMPL_COUNT; i++)
        if (c->side_status[i] != FATTN_OK)
            return true;
    return false;
}

/* The case's error when a side failed without an earlier difference: the
 * one message when both failed alike, else both sides' status and message. */
static void side_error_note(fh_verify_case *c)
{
    const fattn_status *st = c->side_status;
    const char *el = c->side_error[FH_IMPL_LEGACY], *es = c->side_error[FH_IMPL_SPLIT];
    if (st[FH_IMPL_LEGACY] == st[FH_IMPL_SPLIT] && strcmp(el, es) == 0) {
        snprintf(c->error, sizeof c->error, "%s", el);
        return;
    }
    snprintf(c->error, sizeof c->error, "legacy: %s%s%.200s; split: %s%s%.200s",
             fattn_status_name(st[FH_IMPL_LEGACY]), el[0] ? ": " : "", el,
             fattn_status_name(st[FH_IMPL_SPLIT]), es[0] ? ": " : "", es);
}

static const char *string_attr(const fh_h5_node *n, const char *name)
{
    const fh_h5_attr *a = n ? fh_h5_node_attr(n, name) : NULL;
    return a && a->kind == FH_H5_ATTR_STRING ? a->s : NULL;
}

/* A check of one call's groups: g holds its states; `at` is their path
 * below the case group ("" or a schedule's "steps/<k>/"). */
typedef void (*call_check)(fh_verify_case *c, const fh_h5_node *g, const char *at,
                           void *arg);

/* fn over each call of a run: the case group, or each step of its
 * schedule (docs/run-files.md "Schedules"), in step order. */
static void each_call(fh_verify_case *c, const fh_h5_node *run, call_check fn, void *arg)
{
    const fh_h5_node *steps = fh_h5_node_find(run, "steps");
    if (!steps) {
        fn(c, run, "", arg);
        return;
    }
    for (size_t k = 1; k <= steps->n_children; k++) {
        char name[32], at[48];
        snprintf(name, sizeof name, "%zu", k);
        snprintf(at, sizeof at, "steps/%zu/", k);
        const fh_h5_node *g = fh_h5_node_find(steps, name);
        if (g)
            fn(c, g, at, arg);
    }
}

static void note_difference(fh_compare_result *r, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void note_difference(fh_compare_result *r, const char *path, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fh_compare_note(r, path, why, NULL, NULL, false);
}

/* What a refusal is compared by: its status, rule and state. The message
 * is the support table's text (its TE citations move with TE versions) and
 * is compared only between the two front ends of one run. */
static const char *const refusal_keys[] = {"refused_status", "refused_rule", "refused_state"};

/* An expect_refusal case: each front end must have refused with the
 * spec's status and rule. A side that ran through, or refused otherwise,
 * is a named difference. */
static void check_refusal(fh_verify_case *c)
{
    const fh_spec *s = c->spec;
    const fh_h5_node *side[FH_IMPL_COUNT] = {[FH_IMPL_LEGACY] = c->legacy,
                                                   [FH_IMPL_SPLIT] = c->split};
    fh_compare_result r = cmp_all();
    for (int i = 0; i < FH_IMPL_COUNT; i++) {
        const char *name = fh_impl_name((fh_impl)i);
        const char *status = string_attr(side[i], "refused_status");
        const char *rule = string_attr(side[i], "refused_rule");
        const char *state = string_attr(side[i], "refused_state");
        char path[64];
        snprintf(path, sizeof path, "%s@refused_status", name);
        if (!status) {
            note_difference(&r, path, "did not refuse (expected %s, rule %s)",
                            fattn_status_name(s->refusal_status), s->refusal_rule);
            continue;
        }
        if (strcmp(status, fattn_status_name(s->refusal_status)) != 0)
            note_difference(&r, path, "refused with %s, expected %s (rule %s, state %s)",
                            status, fattn_status_name(s->refusal_status), rule ? rule : "?",
                            state ? state : "?");
        snprintf(path, sizeof path, "%s@refused_rule", name);
        if (!rule || strcmp(rule, s->refusal_rule) != 0)
            note_difference(&r, path, "refused by rule '%s', expected rule %s (state %s)",
                            rule ? rule : "?", s->refusal_rule, state ? state : "?");
    }
    check_note(c, "expect_refusal", &r, NULL, NULL, NULL, NULL);
    c->refused = r.differences == 0;
}

/* The split's save/restore seam (TE 2.20.2 backends.py:1987-2004 packed,
 * 1545-1566 unpacked): what setup_ctx handed save_for_backward (save_ctx)
 * must be what backward unpacked into its args (backward/_impl), slot for
 * slot; for a schedule, each B step's (its save_ctx is the ctx as that
 * backward found it). */
static void seam_call(fh_verify_case *c, const fh_h5_node *run, const char *at, void *arg)
{
    const fh_h5_node *sc = fh_h5_node_find(run, "save_ctx");
    const fh_h5_node *bw = fh_h5_node_find(run, "backward");
    const fh_h5_node *impl = bw ? fh_h5_node_find(bw, "_impl") : NULL;
    if (!sc || !impl)
        return; /* no backward, or a front end without the seam */
    fh_compare_result r = cmp_all();
    for (int i = 0; i < FH_SAVED_COUNT; i++) {
        const char *name = fh_saved_name((fh_saved_slot)i);
        const fh_h5_node *packed = fh_h5_node_find(sc, name);
        const char *unpacked = string_attr(impl, name);
        char fp[FH_FE_FINGERPRINT_LEN] = "";
        if (packed && packed->is_dataset)
            fh_fe_fingerprint(packed, fp);
        if (!packed && !unpacked)
            continue;
        if (packed && unpacked && !strcmp(fp, unpacked))
            continue;
        char path[128];
        snprintf(path, sizeof path, "%sbackward/_impl@%s", at, name);
        note_difference(&r, path, "%s",
                        !unpacked ? "saved, but None in the backward's args"
                        : !packed ? "None when saved, but set in the backward's args"
                                  : "unpacked into the backward's args unlike it was saved");
    }
    check_note(c, arg, &r, NULL, NULL, "saved", "unpacked");
}

static void check_seam(fh_verify_case *c, const fh_h5_node *run, const char *check)
{
    each_call(c, run, seam_call, (void *)check);
}

/* What FusedAttnFunc.forward returns (out_ret, and max_logit when asked
 * for): the wrapper run records it apart (returned/), the legacy
 * monolith's forward/out and max_logit are its return value. Compared
 * bitwise, out with the scale_inv it carries as a Float8Tensor. */
/* One forward's: legacy's forward/ (lf) against the wrapper's returned/
 * (wr), as trees whose returned/ sits at `at` (a schedule's step group). */
static void returned_call(fh_verify_case *c, const fh_h5_node *lf,
                          const fh_h5_node *wr, const char *step, fattn_engine *e)
{
    fh_h5_node *a = NULL, *b = NULL, *ga = NULL, *pa = NULL, *pb = NULL;
    fattn_status st;
    if ((st = fh_h5_node_new_group(c->spec->id, &a)) != FATTN_OK ||
        (st = fh_h5_node_new_group(c->spec->id, &b)) != FATTN_OK)
        goto out;
    pa = a, pb = b;
    if ((step && ((st = fh_h5_node_group(a, "steps", &pa)) != FATTN_OK ||
                  (st = fh_h5_node_group(pa, step, &pa)) != FATTN_OK ||
                  (st = fh_h5_node_group(b, "steps", &pb)) != FATTN_OK ||
                  (st = fh_h5_node_group(pb, step, &pb)) != FATTN_OK)) ||
        (st = fh_h5_node_group(pa, "returned", &ga)) != FATTN_OK)
        goto out;
    const char *const names[] = {"out", "max_logit"};
    for (int i = 0; i < 2; i++) {
        const fh_h5_node *ds = fh_h5_node_find(lf, names[i]);
        if (ds && (st = fh_h5_node_copy(ds, ga, NULL)) != FATTN_OK)
            goto out;
    }
    const fh_h5_attr *si = fh_h5_node_attr(lf, "out_scale_inv");
    fh_h5_node *lo = fh_h5_node_find(ga, "out");
    if (lo && si && si->kind == FH_H5_ATTR_FLOAT32 &&
        (st = fh_h5_node_set_float32(lo, "scale_inv", si->f32)) != FATTN_OK)
        goto out;
    if (wr && (st = fh_h5_node_copy(wr, pb, NULL)) != FATTN_OK)
        goto out;
    static const char *const only[] = {"returned", NULL};
    fh_compare_result r = cmp_init(c, e);
    fh_compare_cases(a, b, only, &r);
    check_note(c, "legacy vs split wrapper returned", &r, a, b, "legacy", "split wrapper");
out:
    if (st != FATTN_OK)
        snprintf(c->error, sizeof c->error, "split wrapper returned: %s", fattn_last_error());
    fh_h5_node_free(a);
    fh_h5_node_free(b);
}

/* What FusedAttnFunc.forward returns, each forward of a schedule's too. */
static void check_returned(fh_verify_case *c, const fh_h5_node *w, fattn_engine *e)
{
    const fh_h5_node *ls = fh_h5_node_find(c->legacy, "steps");
    const fh_h5_node *ws = fh_h5_node_find(w, "steps");
    if (!ls) {
        const fh_h5_node *lf = fh_h5_node_find(c->legacy, "forward");
        if (lf)
            returned_call(c, lf, fh_h5_node_find(w, "returned"), NULL, e);
        return;
    }
    for (size_t k = 0; k < ls->n_children; k++) {
        const char *name = ls->children[k]->name;
        const fh_h5_node *lf = fh_h5_node_find(ls->children[k], "forward");
        const fh_h5_node *wk = ws ? fh_h5_node_find(ws, name) : NULL;
        if (lf)
            returned_call(c, lf, wk ? fh_h5_node_find(wk, "returned") : NULL, name, e);
    }
}

/* The caller's tensors after a run (inputs/_impl@<input>, recorded by the
 * runner) must be what was handed in: a front end that writes into an
 * input after its last read of it changes no output of its own. For a
 * schedule, each forward's inputs when its micro-batch ended. */
static void inputs_after_call(fh_verify_case *c, const fh_h5_node *run, const char *at,
                              void *arg)
{
    const char *side = arg;
    const fh_h5_node *in = fh_h5_node_find(run, "inputs");
    const fh_h5_node *impl = in ? fh_h5_node_find(in, "_impl") : NULL;
    if (!in)
        return;
    fh_compare_result r = cmp_all();
    for (size_t i = 0; i < in->n_children; i++) {
        const fh_h5_node *ds = in->children[i];
        if (!ds->is_dataset)
            continue;
        char fp[FH_FE_FINGERPRINT_LEN], path[192];
        fh_fe_fingerprint(ds, fp);
        const char *after = string_attr(impl, ds->name);
        snprintf(path, sizeof path, "%s: %sinputs/_impl@%s", side, at, ds->name);
        if (!after)
            note_difference(&r, path, "not recorded after the run");
        else if (strcmp(after, fp) != 0)
            note_difference(&r, path, "the caller's tensor changed during the run (%.100s)",
                            after);
    }
    check_note(c, "inputs unchanged", &r, NULL, NULL, "before", "after");
}

static void check_inputs_after(fh_verify_case *c, const fh_h5_node *run, const char *side)
{
    each_call(c, run, inputs_after_call, (void *)side);
}

/* What each TE version raises on a second backward on one ctx (autograd's
 * retain_graph lets a caller try): 2.19.0 restore_from_func_ctx finds
 * ctx.tensor_objects gone (quantized_tensor.py:345), 2.20.2 finds
 * ctx.backward_objects None (backends.py:2283). */
static const struct {
    const char *te, *says;
} second_backward_error[FH_IMPL_COUNT] = {
    [FH_IMPL_LEGACY] = {"TE 2.19.0", "ctx must have .tensor_objects"},
    [FH_IMPL_SPLIT] = {"TE 2.20.2", "'NoneType' object has no attribute 'grad_output'"},
};

/* A training run's second backward on its ctx (backward/_impl@
 * second_backward, recorded by the runner) must have been refused with
 * FATTN_E_STATE and the front end's TE version's error: each B step's, in
 * a schedule. */
typedef struct second_arg {
    fh_impl impl;
    const char *check;
} second_arg;

static void second_call(fh_verify_case *c, const fh_h5_node *run, const char *at,
                        void *arg)
{
    const second_arg *a = arg;
    const fh_h5_node *bw = fh_h5_node_find(run, "backward");
    if (!fh_spec_has_backward(c->spec) || !bw)
        return;
    const fh_h5_node *impl_g = fh_h5_node_find(bw, "_impl");
    const char *status = string_attr(impl_g, "second_backward");
    const char *msg = string_attr(impl_g, "second_backward_error");
    const char *want = second_backward_error[a->impl].says, *te = second_backward_error[a->impl].te;
    fh_compare_result r = cmp_all();
    char p1[96], p2[96];
    snprintf(p1, sizeof p1, "%sbackward/_impl@second_backward", at);
    snprintf(p2, sizeof p2, "%sbackward/_impl@second_backward_error", at);
    if (!status)
        note_difference(&r, p1, "not called (the run records no second backward)");
    else if (strcmp(status, fattn_status_name(FATTN_E_STATE)) != 0)
        note_difference(&r, p1, "%s on a second backward on one ctx, where %s raises (%s)",
                        status, te, want);
    else if (!msg || !strstr(msg, want))
        note_difference(&r, p2, "refused, but not with %s's error (%s): %.80s", te, want,
                        msg ? msg : "(none)");
    check_note(c, a->check, &r, NULL, NULL, NULL, NULL);
}

static void check_second_backward(fh_verify_case *c, const fh_h5_node *run, fh_impl impl,
                                  const char *check)
{
    second_arg a = {impl, check};
    each_call(c, run, second_call, &a);
}

/* The split through FusedAttnFunc's own forward and backward
 * (fattn_split_func_*: the wrapper wires the helpers together and maps
 * the grads to its six outputs), held against the legacy monolith's run:
 * the same recorded tree, so its five grads are the legacy's 36 outputs'
 * non-None five (the monolith's other 31 are None, fattn_legacy_backward). */
static void check_wrapper(fh_verify_case *c, fattn_engine *e)
{
    char err[512] = "";
    fattn_status st = FATTN_OK;
    fh_h5_node *w = run_partial(c->spec, FH_IMPL_SPLIT, true, e, err, sizeof err, &st);
    if (err[0]) {
        /* the wrapper alone failed, where legacy and the split's helpers ran
         * through: a behaviour of the refactor's wrapper that differs from
         * the monolith's, so a difference naming it (with the states it
         * reached against legacy's), not an errored case */
        static const char *const order[] = {"inputs", "engine_call/forward", "forward",
                                            "save_ctx", "engine_call/backward", "backward"};
        const char *reached[7] = {NULL}, *at = "split wrapper";
        size_t n = 0;
        bool stopped = false;
        for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
            bool mine = w && fh_h5_node_find(w, order[k]);
            if (mine && !stopped)
                reached[n++] = order[k];
            else if (!mine && !stopped && fh_h5_node_find(c->legacy, order[k])) {
                at = order[k]; /* the state it failed in: the failure is the cause there */
                stopped = true;
            }
        }
        fh_compare_result r = cmp_init(c, e);
        note_difference(&r, at, "split wrapper failed where legacy and the split's helpers ran: "
                        "%s: %.300s", fattn_status_name(st), err);
        if (n)
            fh_compare_cases(c->legacy, w, reached, &r); /* the states it recorded */
        check_note(c, "legacy vs split wrapper", &r, c->legacy, w, "legacy", "split wrapper");
    } else if (w) {
        check_seam(c, w, "split wrapper save/restore seam");
        /* the states: returned/ is the wrapper run's own, checked next */
        static const char *const states[] = {"inputs", "engine_call", "forward", "save_ctx",
                                             "backward", NULL};
        fh_compare_result r = cmp_init(c, e);
        fh_compare_cases(c->legacy, w, states, &r);
        check_note(c, "legacy vs split wrapper", &r, c->legacy, w, "legacy", "split wrapper");
        check_returned(c, w, e);
        check_inputs_after(c, w, "split wrapper");
        check_second_backward(c, w, FH_IMPL_SPLIT, "split wrapper second backward");
    }
    fh_h5_node_free(w);
}

#if FATTN_TESTING
/* A run on the engine wrapped in a fault plan (fault_engine.h, test-only);
 * *st and err say how it failed. */
static fh_h5_node *fault_run(const fh_spec *s, fh_impl impl, bool via_wrapper,
                                fattn_engine *e, const fh_fault_plan *plan, char *err,
                                size_t errn, fattn_status *st)
{
    fattn_engine *f = NULL;
    fh_h5_node *n = NULL;
    if ((*st = fh_fault_engine_wrap(e, plan, "test-fault", NULL, &f)) != FATTN_OK)
        goto out;
    fh_run_opts o = {.impl = impl, .engine = f, .until = FH_STATE_BACKWARD,
                        .poison = FH_POISON_PATTERN, .via_wrapper = via_wrapper,
                        .backward_again = plan->fail_first_backward,
                        .backward_after_failure = plan->fail_first_backward};
    *st = fh_run_case(s, &o, &n);
out:
    if (*st != FATTN_OK)
        snprintf(err, errn, "%s", fattn_last_error());
    fattn_engine_free(f);
    return n;
}

/* The faults the engine outputs get: a NaN across head 0's first defined
 * row of O, +Inf into the last head's row of Stats and, with
 * return_max_logit, a NaN into head 0's row of Max and +Inf into head 1's. */
static fh_fault_plan output_faults(const fh_spec *s)
{
    fh_fault_plan p = {.n = 0};
    p.f[p.n++] = (fh_fault){FH_FAULT_O, NAN, 0};
    p.f[p.n++] = (fh_fault){FH_FAULT_STATS, INFINITY, s->h - 1};
    if (s->return_max_logit) {
        p.f[p.n++] = (fh_fault){FH_FAULT_MAX, NAN, 0};
        p.f[p.n++] = (fh_fault){FH_FAULT_MAX, INFINITY, 1};
    }
    return p;
}

/* max_logit is torch.amax of Max over every dim but h (fused_attn.py:
 * 402-441): a NaN propagates, +Inf is the max. Head 0 must be NaN, head 1
 * +Inf, in each side's forward. */
static void check_fault_max_logit(fh_verify_case *c, fh_h5_node *const side[2])
{
    fh_compare_result r = cmp_all();
    for (int i = 0; i < FH_IMPL_COUNT; i++) {
        const fh_h5_node *f = fh_h5_node_find(side[i], "forward");
        const fh_h5_node *m = f ? fh_h5_node_find(f, "max_logit") : NULL;
        char path[96];
        snprintf(path, sizeof path, "%s: forward/max_logit", fh_impl_name((fh_impl)i));
        if (!m || !m->is_dataset) {
            note_difference(&r, path, "missing, though the engine wrote Max");
            continue;
        }
        float h0 = fattn_load_f32(m->data, m->dtype, 0);
        float h1 = m->shape[0] > 1 ? fattn_load_f32(m->data, m->dtype, 1) : INFINITY;
        if (!isnan(h0) || !(isinf(h1) && h1 > 0))
            note_difference(&r, path, "[%g, %g] where Max holds a NaN in head 0 and +Inf in "
                            "head 1: torch.amax gives [nan, inf] (TE fused_attn.py:412)",
                            (double)h0, (double)h1);
    }
    check_note(c, "engine faults: max_logit as torch.amax", &r, NULL, NULL, NULL, NULL);
}

/* NaN and Inf in the engine's outputs (no input puts them there): both
 * front ends, run on an engine that writes them (output_faults), must
 * record the same bits, and max_logit must propagate them as TE's
 * torch.amax does. */
static void check_output_faults(fh_verify_case *c, fattn_engine *e)
{
    fh_fault_plan plan = output_faults(c->spec);
    fh_h5_node *side[FH_IMPL_COUNT] = {NULL, NULL};
    fattn_status st[FH_IMPL_COUNT];
    char err[FH_IMPL_COUNT][512];
    for (int i = 0; i < FH_IMPL_COUNT; i++)
        side[i] = fault_run(c->spec, (fh_impl)i, false, e, &plan, err[i], sizeof err[i],
                            &st[i]);
    fh_compare_result r = cmp_init(c, e);
    bool same_failure = st[0] != FATTN_OK && st[0] == st[1] && !strcmp(err[0], err[1]);
    for (int i = 0; i < FH_IMPL_COUNT && !same_failure; i++)
        if (st[i] != FATTN_OK)
            note_difference(&r, fh_impl_name((fh_impl)i), "failed on the faulty engine "
                            "(the other side %s): %s: %.300s", st[1 - i] ? "failed otherwise"
                            : "ran", fattn_status_name(st[i]), err[i]);
    if (st[0] == FATTN_OK && st[1] == FATTN_OK)
        fh_compare_cases(side[0], side[1], NULL, &r);
    check_note(c, "engine faults: legacy vs split", &r, side[0], side[1], "legacy", "split");
    if (st[0] == FATTN_OK && st[1] == FATTN_OK && c->spec->return_max_logit)
        check_fault_max_logit(c, side);
    for (int i = 0; i < FH_IMPL_COUNT; i++)
        fh_h5_node_free(side[i]);
}

/* A second backward after a first that failed in the engine (made to fail
 * once): both TE versions clear the ctx's guard before their backward
 * calls the engine (2.19.0 restore_from_func_ctx, quantized_tensor.py:350;
 * 2.20.2 backends.py:2285), so the second raises as after a first that
 * ran. Legacy, and the split through FusedAttnFunc's wrapper (the helpers
 * have no ctx). */
static void check_backward_after_failure(fh_verify_case *c, fattn_engine *e)
{
    if (!fh_spec_has_backward(c->spec))
        return;
    const fh_fault_plan plan = {.n = 0, .fail_first_backward = true};
    static const struct {
        fh_impl impl;
        bool wrapper;
        const char *check;
    } runs[] = {{FH_IMPL_LEGACY, false, "legacy second backward after a failed one"},
                {FH_IMPL_SPLIT, true, "split wrapper second backward after a failed one"}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char err[512] = "";
        fattn_status st;
        fh_h5_node *n = fault_run(c->spec, runs[i].impl, runs[i].wrapper, e, &plan, err,
                                     sizeof err, &st);
        const fh_h5_node *bw = n ? fh_h5_node_find(n, "backward") : NULL;
        const char *first = string_attr(bw ? fh_h5_node_find(bw, "_impl") : NULL,
                                        "first_backward");
        fh_compare_result r = cmp_all();
        bool failed = st != FATTN_OK;
        if (failed)
            note_difference(&r, "backward", "the run failed: %s: %.300s", fattn_status_name(st),
                            err);
        else if (!first || strcmp(first, fattn_status_name(FATTN_E_INTERNAL)) != 0)
            note_difference(&r, "backward/_impl@first_backward", "%s, where the engine failed "
                            "the first backward (FATTN_E_INTERNAL)", first ? first : "ran");
        check_note(c, runs[i].check, &r, NULL, NULL, NULL, NULL);
        if (!failed && first)
            check_second_backward(c, n, runs[i].impl, runs[i].check);
        fh_h5_node_free(n);
    }
}
#endif

/* One side skipped (its engine or front end said unsupported), the other
 * ran: the skip is that side's outcome, so the report says why beside the
 * states it is missing. */
static void note_one_sided_skip(fh_verify_case *c, const char *sl, const char *ss)
{
    const char *why[FH_IMPL_COUNT] = {[FH_IMPL_LEGACY] = sl, [FH_IMPL_SPLIT] = ss};
    for (int i = 0; i < FH_IMPL_COUNT; i++) {
        if (!why[i] || c->side_status[i] != FATTN_OK)
            continue;
        c->side_status[i] = FATTN_E_UNSUPPORTED;
        snprintf(c->side_error[i], sizeof c->side_error[i], "skipped: %s", why[i]);
    }
}

/* Checks 1-3 for one case. */
void fh_verify_check_case(fh_verify_case *c, fattn_engine *e)
{
    /* c zeroed but for spec (verify.h) */
    assert(c && c->spec && !c->legacy && !c->split && c->cmp.differences == 0);
    char *err_l = c->side_error[FH_IMPL_LEGACY], *err_s = c->side_error[FH_IMPL_SPLIT];
    size_t errn = sizeof c->side_error[0];
    c->legacy = run_partial(c->spec, FH_IMPL_LEGACY, false, e, err_l, errn,
                            &c->side_status[FH_IMPL_LEGACY]);
    c->split = run_partial(c->spec, FH_IMPL_SPLIT, false, e, err_s, errn,
                           &c->side_status[FH_IMPL_SPLIT]);
    if (c->legacy && c->split) {
        const char *sl = skipped_reason(c->legacy), *ss = skipped_reason(c->split);
        if (sl && ss) {
            c->skipped = sl;
            return;
        }
        if (sl || ss)
            note_one_sided_skip(c, sl, ss);
        check_seam(c, c->split, "split save/restore seam"); /* first: it shows downstream too */
        fh_compare_result r = cmp_init(c, e);
        fh_compare_cases(c->legacy, c->split, NULL, &r);
        check_note(c, "legacy vs split", &r, c->legacy, c->split, "legacy", "split");
    }
    if (fh_verify_side_failed(c) || !c->legacy || !c->split) {
        if (c->cmp.differences == 0)
            side_error_note(c);
        return;
    }
    if (c->spec->expect_refusal) {
        check_refusal(c);
        return; /* nothing to replay or repeat past a refusal */
    }
    check_inputs_after(c, c->legacy, "legacy");
    check_inputs_after(c, c->split, "split");
    check_second_backward(c, c->legacy, FH_IMPL_LEGACY, "legacy second backward");
    check_wrapper(c, e);
    if (c->error[0])
        return;
#if FATTN_TESTING
    /* the cases whose engine outputs the front ends reduce: max_logit over
     * Max, and current scaling's amax over the engine's O it quantises for
     * an FP8 output (fp8.c); the backward guard is per ctx, and these hold
     * both paths to it, f16 and FP8 */
    if (c->spec->return_max_logit ||
        (c->spec->fp8 && c->spec->fp8_recipe == FATTN_FP8_RECIPE_CURRENT &&
         c->spec->fp8_output)) {
        check_output_faults(c, e);
        check_backward_after_failure(c, e);
    }
#endif
    if (fh_spec_has_backward(c->spec)) {
        fh_run_opts o = {.engine = e, .until = FH_STATE_BACKWARD,
                            .poison = FH_POISON_PATTERN};
        struct { const char *name; const fh_h5_node *src; fh_state from; fh_impl impl; }
        replays[] = {
            {"replay legacy save_ctx -> split", c->legacy, FH_STATE_SAVE_CTX, FH_IMPL_SPLIT},
            {"replay split save_ctx -> legacy", c->split, FH_STATE_SAVE_CTX, FH_IMPL_LEGACY},
            {"replay split forward -> split", c->split, FH_STATE_FORWARD, FH_IMPL_SPLIT},
        };
        for (size_t i = 0; i < sizeof replays / sizeof replays[0]; i++) {
            o.impl = replays[i].impl;
            fh_h5_node *x = NULL;
            if (fh_replay_case(replays[i].src, replays[i].from, &o, &x) != FATTN_OK) {
                snprintf(c->error, sizeof c->error, "%s: %s", replays[i].name,
                         fattn_last_error());
                return;
            }
            fh_compare_result r = cmp_init(c, e);
            r.replay = true;
            fh_compare_cases(replays[i].src, x, NULL, &r);
            check_note(c, replays[i].name, &r, replays[i].src, x, "straight run", "replay");
            fh_h5_node_free(x);
        }
    }
    char err[512] = "";
    fh_h5_node *again = run_partial(c->spec, FH_IMPL_SPLIT, false, e, err, sizeof err, NULL);
    if (!again || err[0]) {
        snprintf(c->error, sizeof c->error, "repeat: %s", err);
    } else {
        fh_compare_result r = cmp_init(c, e);
        fh_compare_cases(c->split, again, NULL, &r);
        check_note(c, "repeat", &r, c->split, again, "split", "split again");
    }
    fh_h5_node_free(again);
}

const char *fh_verify_same_engine_only(const fh_spec *s, const fattn_engine *e)
{
    if (s->dropout_p > 0.0 && s->is_training)
        return "dropout";
    if (s->fp8 && !fattn_engine_supports(e, FATTN_ENGINE_Q_CPU_MATH))
        return "FP8";
    return NULL;
}

/* Against the goldens: bitwise on an exact platform-key match, else (tol
 * non-NULL) against CPU goldens within the tolerance profile, except what
 * compares within one engine only (fh_verify_same_engine_only). */
void fh_verify_check_golden(fh_verify_case *c, const fh_h5_node *goldens,
                               const fh_tol_profile *tol, fattn_engine *e)
{
    assert(c && c->spec);
    if (!c->legacy || c->skipped || c->error[0])
        return;
    const fh_h5_node *gc = goldens ? fh_h5_node_find(goldens, "cases") : NULL;
    const fh_h5_node *g = gc ? fh_h5_node_find(gc, c->spec->id) : NULL;
    if (!g) {
        c->golden_missing = true;
        return;
    }
    fh_compare_result r = cmp_init(c, e);
    if (c->spec->expect_refusal && string_attr(c->legacy, "refused_status")) {
        /* a refusal: the same on every engine */
        for (size_t i = 0; i < sizeof refusal_keys / sizeof refusal_keys[0]; i++) {
            const char *a = string_attr(c->legacy, refusal_keys[i]);
            const char *b = string_attr(g, refusal_keys[i]);
            char path[64];
            snprintf(path, sizeof path, "@%s", refusal_keys[i]);
            if (!b)
                note_difference(&r, path, "missing in the golden (it ran there)");
            else if (strcmp(a ? a : "", b) != 0)
                note_difference(&r, path, "'%s', golden '%s'", a ? a : "", b);
        }
    } else if (!tol) {
        /* goldens made before engine calls were recorded hold none: the
         * rest is compared all the same */
        static const char *const states[] = {"inputs", "forward", "save_ctx", "backward",
                                             NULL};
        fh_compare_cases(c->legacy, g, fh_compare_has_calls(g) ? NULL : states, &r);
    } else if ((c->same_engine_only = fh_verify_same_engine_only(c->spec, e))) {
        return;
    } else {
        fh_compare_cases_tol(c->legacy, g, tol, &r);
    }
    check_note(c, tol ? "golden (tolerance)" : "golden", &r, c->legacy, g, "run", "golden");
    c->golden_compared = true;
}

void fh_verify_check_against(fh_verify_case *c, const fh_verify_goldens *g,
                                fattn_engine *e)
{
    const fh_h5_node *mine[FH_IMPL_COUNT] = {[FH_IMPL_LEGACY] = c->legacy,
                                                   [FH_IMPL_SPLIT] = c->split};
    for (int i = 0; i < FH_IMPL_COUNT; i++) {
        const fh_h5_node *cs = g->against[i] ? fh_h5_node_find(g->against[i], "cases")
                                                : NULL;
        if (!cs || !mine[i] || c->error[0])
            continue;
        const fh_h5_node *theirs = fh_h5_node_find(cs, c->spec->id);
        char check[192], side[64];
        snprintf(check, sizeof check, "against %.100s: %s", g->against_name,
                 fh_impl_name((fh_impl)i));
        snprintf(side, sizeof side, "%.63s", g->against_name);
        fh_compare_result r = cmp_init(c, e);
        if (!theirs) {
            note_difference(&r, "@spec", "the case is not in %s's run", g->against_name);
        } else {
            /* a revision from before engine calls were recorded holds none */
            static const char *const states[] = {"inputs", "forward", "save_ctx", "backward",
                                                 NULL};
            bool calls = fh_compare_has_calls(theirs) ||
                         (!fh_h5_node_find(theirs, "forward") &&
                          !fh_h5_node_find(theirs, "steps"));
            fh_compare_cases(theirs, mine[i], calls ? NULL : states, &r);
        }
        check_note(c, check, &r, theirs, mine[i], side, "this tree");
    }
}

/* The states recorded: the case's, or for a schedule those any step has. */
static void states_str(const fh_h5_node *n, char *buf)
{
    static const char *const st[] = {"inputs", "forward", "save_ctx", "backward"};
    static const char letters[] = "ifsb";
    const fh_h5_node *steps = n ? fh_h5_node_find(n, "steps") : NULL;
    for (int i = 0; i < 4; i++) {
        bool has = n && fh_h5_node_find(n, st[i]);
        for (size_t k = 0; steps && k < steps->n_children; k++)
            has = has || fh_h5_node_find(steps->children[k], st[i]);
        buf[i] = has ? letters[i] : '-';
    }
    buf[4] = '\0';
}


void fh_verify_case_free(fh_verify_case *c)
{
    for (size_t i = 0; i < c->n_diffs; i++) {
        free(c->diffs[i].d.path);
        free(c->diffs[i].d.why);
        free(c->diffs[i].d.a);
        free(c->diffs[i].d.b);
    }
    free(c->diffs);
    c->diffs = NULL;
    c->n_diffs = c->cap_diffs = 0;
    fh_h5_node_free(c->legacy);
    fh_h5_node_free(c->split);
    c->legacy = c->split = NULL;
    c->skipped = NULL; /* pointed into legacy's tree */
}

/* The engine config tags (prov_engine_tag) of the groups of run case x
 * that golden case y records one for, all equal: the same plans ran. */
static bool same_tags(const fh_h5_node *x, const fh_h5_node *y)
{
    static const char *const groups[] = {"forward", "backward"};
    for (int i = 0; i < 2; i++) {
        const char *a = string_attr(fh_h5_node_find(x, groups[i]), "prov_engine_tag");
        const char *b = string_attr(fh_h5_node_find(y, groups[i]), "prov_engine_tag");
        if (b && (!a || strcmp(a, b) != 0))
            return false;
    }
    const fh_h5_node *sx = fh_h5_node_find(x, "steps"), *sy = fh_h5_node_find(y, "steps");
    for (size_t k = 0; sx && sy && k < sy->n_children; k++) {
        const fh_h5_node *a = fh_h5_node_find(sx, sy->children[k]->name);
        if (a && !same_tags(a, sy->children[k]))
            return false;
    }
    return true;
}

static bool same_plans(const fh_verify_case *c, const fh_h5_node *goldens)
{
    const fh_h5_node *gc = goldens ? fh_h5_node_find(goldens, "cases") : NULL;
    const fh_h5_node *g = gc ? fh_h5_node_find(gc, c->spec->id) : NULL;
    return !g || !c->legacy || same_tags(c->legacy, g);
}

/* A case's outcome into the run's counts. */
static void tally_case(fh_verify_result *r, const fh_verify_case *c)
{
    r->n_refused += c->refused;
    if (c->skipped) {
        r->n_skip++;
    } else if (c->cmp.differences) {
        r->n_diff++;
        r->n_diff_objects += c->cmp.differences;
        if (!r->first_bad)
            r->first_bad = c;
    } else if (c->error[0]) {
        r->n_err++;
    }
    r->n_nogold += c->golden_missing;
    r->n_tensors += c->tensors;
}

fattn_status fh_verify_run(const fh_spec *const *specs, size_t n, fattn_engine *e,
                              const fh_verify_goldens *g, fh_verify_case_fn on_case,
                              void *ctx, fh_verify_result *r)
{
    assert(r && g && (specs || n == 0));
    memset(r, 0, sizeof *r);
    r->cases = calloc(n ? n : 1, sizeof *r->cases);
    if (!r->cases)
        return fattn_error(FATTN_E_NOMEM, "verify: out of memory");
    r->n_cases = n;
    for (size_t i = 0; i < n; i++) {
        fh_verify_case *c = &r->cases[i];
        c->spec = specs[i];
        fh_verify_check_case(c, e);
        const fh_h5_node *gt = g->tree;
        const fh_tol_profile *tol = g->tolerance ? &g->profile : NULL;
        if (g->identity && !same_plans(c, g->tree)) {
            /* another device's goldens compute this case's bits only with
             * the same engine configs */
            c->other_plans = true;
            gt = g->cpu_tree;
            tol = gt ? &g->profile : NULL;
        }
        fh_verify_check_golden(c, gt, tol, e);
        fh_verify_check_against(c, g, e);
        states_str(c->split ? c->split : c->legacy, c->states);
        tally_case(r, c);
        if (on_case)
            on_case(ctx, c);
        if (r->stop) {
            r->n_cases = i + 1;
            break;
        }
    }
    r->neutral = r->n_diff == 0 && r->n_err == 0;
    return FATTN_OK;
}

void fh_verify_result_free(fh_verify_result *r)
{
    for (size_t i = 0; i < r->n_cases; i++)
        fh_verify_case_free(&r->cases[i]);
    free(r->cases);
    memset(r, 0, sizeof *r);
}
