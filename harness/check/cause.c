/* The differences of a case in run order and its earliest cause (see
 * cause.h). */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cause.h"
#include "textbuf.h"

static const char *const state_names[FH_VERIFY_NSTATES] = {
    [FH_VERIFY_STATE_CASE] = "case",
    [FH_VERIFY_STATE_INPUTS] = "inputs",
    [FH_VERIFY_STATE_CALL_FWD] = "engine_call/forward",
    [FH_VERIFY_STATE_FORWARD] = "forward",
    [FH_VERIFY_STATE_RETURNED] = "returned",
    [FH_VERIFY_STATE_SAVE_CTX] = "save_ctx",
    [FH_VERIFY_STATE_CALL_BWD] = "engine_call/backward",
    [FH_VERIFY_STATE_BACKWARD] = "backward",
    [FH_VERIFY_STATE_OTHER] = "other",
};

const char *fh_verify_state_name(int state)
{
    return state >= 0 && state < FH_VERIFY_NSTATES ? state_names[state] : "other";
}

/* Whether path starts with the group name g, followed by '/', '@', '.',
 * or nothing. */
static bool under(const char *path, const char *g)
{
    size_t n = strlen(g);
    return !strncmp(path, g, n) && (path[n] == '\0' || path[n] == '/' || path[n] == '@' ||
                                    path[n] == '.');
}

/* The path without a check's own prefix ("split: inputs/_impl@q"); *step
 * gets k of a schedule step's "steps/<k>/" prefix, which is taken off too
 * (0: none). */
static const char *strip(const char *path, int *step)
{
    const char *colon = strstr(path, ": ");
    if (colon)
        path = colon + 2;
    *step = 0;
    if (!strncmp(path, "steps/", 6)) {
        char *end = NULL;
        long k = strtol(path + 6, &end, 10);
        if (end && end != path + 6 && k > 0 && k < 1000000 && (*end == '/' || !*end)) {
            *step = (int)k;
            path = *end ? end + 1 : end;
        }
    }
    return path;
}

int fh_verify_step_of(const char *path)
{
    int step;
    strip(path, &step);
    return step;
}

int fh_verify_state_of(const char *path)
{
    int step;
    path = strip(path, &step);
    if (path[0] == '@')
        return FH_VERIFY_STATE_CASE;
    if (under(path, "engine_call/forward"))
        return FH_VERIFY_STATE_CALL_FWD;
    if (under(path, "engine_call/backward"))
        return FH_VERIFY_STATE_CALL_BWD;
    if (under(path, "engine_call"))
        return FH_VERIFY_STATE_CALL_FWD; /* the group as a whole */
    static const struct {
        const char *g;
        int s;
    } groups[] = {{"inputs", FH_VERIFY_STATE_INPUTS},
                  {"forward", FH_VERIFY_STATE_FORWARD},
                  {"returned", FH_VERIFY_STATE_RETURNED},
                  {"save_ctx", FH_VERIFY_STATE_SAVE_CTX},
                  {"backward", FH_VERIFY_STATE_BACKWARD}};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
        if (under(path, groups[i].g))
            return groups[i].s;
    return FH_VERIFY_STATE_OTHER;
}

unsigned fh_verify_states_in(const fh_h5_node *g)
{
    static const struct {
        const char *path;
        int s;
    } in[] = {{"inputs", FH_VERIFY_STATE_INPUTS},
              {"engine_call/forward", FH_VERIFY_STATE_CALL_FWD},
              {"forward", FH_VERIFY_STATE_FORWARD},
              {"returned", FH_VERIFY_STATE_RETURNED},
              {"save_ctx", FH_VERIFY_STATE_SAVE_CTX},
              {"engine_call/backward", FH_VERIFY_STATE_CALL_BWD},
              {"backward", FH_VERIFY_STATE_BACKWARD}};
    unsigned m = 0;
    for (size_t i = 0; g && i < sizeof in / sizeof in[0]; i++)
        if (fh_h5_node_find(g, in[i].path))
            m |= 1u << in[i].s;
    return m;
}

/* ---- noting a check ----------------------------------------------------------- */

static int check_index(fh_verify_case *c, const char *check)
{
    size_t k = 0;
    while (k < c->n_checks && strcmp(c->checks[k].name, check) != 0)
        k++;
    assert(k < FH_VERIFY_MAX_CHECKS);
    if (k == c->n_checks && k < FH_VERIFY_MAX_CHECKS) {
        memset(&c->checks[k], 0, sizeof c->checks[k]);
        snprintf(c->checks[c->n_checks++].name, sizeof c->checks[0].name, "%s", check);
    }
    return k < c->n_checks ? (int)k : -1;
}

/* Move r's full list into c->diffs, each with its check and state. */
static void take_diffs(fh_verify_case *c, int k, fh_compare_result *r)
{
    for (size_t i = 0; i < r->n_all; i++) {
        if (c->n_diffs == c->cap_diffs) {
            size_t cap = c->cap_diffs ? 2 * c->cap_diffs : 16;
            fh_verify_diff *d = realloc(c->diffs, cap * sizeof *d);
            if (!d)
                return; /* what is not moved is freed with r: counted, not listed */
            c->diffs = d;
            c->cap_diffs = cap;
        }
        fh_verify_diff *d = &c->diffs[c->n_diffs];
        d->check = k;
        d->d = r->all[i];
        d->state = fh_verify_state_of(d->d.path);
        d->step = fh_verify_step_of(d->d.path);
        d->seq = c->n_diffs++;
        memset(&r->all[i], 0, sizeof r->all[i]); /* moved */
    }
}

void fh_verify_note_check(fh_verify_case *c, const char *check, fh_compare_result *r,
                             const fh_h5_node *a, const fh_h5_node *b,
                             const char *side_a, const char *side_b)
{
    c->tensors += r->tensors;
    int k = check_index(c, check);
    if (k >= 0) {
        c->checks[k].differences += r->differences;
        snprintf(c->checks[k].side_a, sizeof c->checks[k].side_a, "%s", side_a ? side_a : "A");
        snprintf(c->checks[k].side_b, sizeof c->checks[k].side_b, "%s", side_b ? side_b : "B");
        c->checks[k].states_both = fh_verify_states_in(a) & fh_verify_states_in(b);
    }
    if (!c->cmp.detail[0] && r->detail[0]) {
        snprintf(c->cmp.detail_path, sizeof c->cmp.detail_path, "%.60s: %.190s", check,
                 r->detail_path);
        snprintf(c->cmp.detail, sizeof c->cmp.detail, "%s", r->detail);
    }
    c->noisy_within += r->noisy_within;
    for (size_t i = 0; i < r->differences; i++) {
        if (c->cmp.differences < FH_COMPARE_MAX_REPORTED && i < FH_COMPARE_MAX_REPORTED) {
            snprintf(c->cmp.paths[c->cmp.differences], sizeof c->cmp.paths[0], "%s: %s", check,
                     r->paths[i]);
            snprintf(c->cmp.why[c->cmp.differences], sizeof c->cmp.why[0], "%s", r->why[i]);
        }
        if (c->cmp.differences == 0)
            snprintf(c->first_check, sizeof c->first_check, "%s", check);
        c->cmp.differences++;
    }
    if (k >= 0)
        take_diffs(c, k, r);
    fh_compare_result_free(r);
}

/* ---- order and cause -------------------------------------------------------- */

static const fh_verify_case *sort_case; /* qsort has no context argument */

static int diff_cmp(const void *x, const void *y)
{
    const fh_verify_diff *a = &sort_case->diffs[*(const size_t *)x];
    const fh_verify_diff *b = &sort_case->diffs[*(const size_t *)y];
    if (a->check != b->check)
        return a->check < b->check ? -1 : 1;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    if (a->state != b->state)
        return a->state < b->state ? -1 : 1;
    if (a->d.tensor != b->d.tensor)
        return a->d.tensor ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

void fh_verify_diff_order(const fh_verify_case *c, size_t *idx)
{
    for (size_t i = 0; i < c->n_diffs; i++)
        idx[i] = i;
    sort_case = c;
    if (c->n_diffs > 1)
        qsort(idx, c->n_diffs, sizeof *idx, diff_cmp);
    sort_case = NULL;
}

void fh_verify_check_cause_of(const fh_verify_case *c, int check, fh_verify_cause *out)
{
    memset(out, 0, sizeof *out);
    out->check = -1;
    out->state = FH_VERIFY_NSTATES;
    out->step = -1;
    for (size_t i = 0; i < c->n_diffs; i++) {
        const fh_verify_diff *d = &c->diffs[i];
        if (d->check == check &&
            (out->step < 0 || d->step < out->step ||
             (d->step == out->step && d->state < out->state))) {
            out->step = d->step;
            out->state = d->state;
        }
    }
    if (out->state == FH_VERIFY_NSTATES)
        return;
    out->check = check;
    for (size_t i = 0; i < c->n_diffs; i++)
        out->n_first += c->diffs[i].check == check && c->diffs[i].step == out->step &&
                        c->diffs[i].state == out->state;
    /* the states both trees hold are known of the case group, not of a
     * schedule's steps: there the steps before are what was equal */
    unsigned before = (1u << out->state) - 1;
    out->equal_before = out->step ? 0 : c->checks[check].states_both & before;
}

void fh_verify_cause_of(const fh_verify_case *c, fh_verify_cause *out)
{
    int check = -1;
    for (size_t i = 0; i < c->n_diffs; i++)
        if (check < 0 || c->diffs[i].check < check)
            check = c->diffs[i].check;
    fh_verify_check_cause_of(c, check, out);
}

/* ---- text ------------------------------------------------------------------- */

void fh_verify_diff_text(const fh_verify_case *c, const fh_verify_diff *d, char *buf,
                            size_t n)
{
    const char *sa = "A", *sb = "B";
    if (d->check >= 0 && (size_t)d->check < c->n_checks) {
        sa = c->checks[d->check].side_a;
        sb = c->checks[d->check].side_b;
    }
    if (d->d.a || d->d.b)
        snprintf(buf, n, "%s: %s %s, %s %s", d->d.path, sa, d->d.a ? d->d.a : "absent", sb,
                 d->d.b ? d->d.b : "absent");
    else
        snprintf(buf, n, "%s: %s", d->d.path, d->d.why);
}

/* The later states' paths shown after "then" on the cause line. */
#define CAUSE_THEN_SHOWN 4
/* The earliest state's differences shown in full on the cause line. */
#define CAUSE_FIRST_SHOWN 2

void fh_verify_check_cause_text(const fh_verify_case *c, int check, char *buf, size_t n)
{
    fh_textbuf b = {buf, n, 0};
    buf[0] = '\0';
    fh_verify_cause cause;
    fh_verify_check_cause_of(c, check, &cause);
    if (cause.check < 0 || !c->n_diffs)
        return;
    size_t *idx = malloc(c->n_diffs * sizeof *idx);
    if (!idx)
        return;
    fh_verify_diff_order(c, idx);
    fh_textbuf_put(&b, "%s: ", c->checks[cause.check].name);
    int eq = 0;
    for (int s = 0; s < FH_VERIFY_NSTATES; s++)
        if (cause.equal_before & (1u << s))
            fh_textbuf_put(&b, "%s%s", eq++ ? ", " : "", state_names[s]);
    if (eq)
        fh_textbuf_put(&b, " equal; ");
    if (cause.step == 2)
        fh_textbuf_put(&b, "steps/1 equal; ");
    else if (cause.step > 2)
        fh_textbuf_put(&b, "steps/1 to steps/%d equal; ", cause.step - 1);
    size_t shown = 0;
    for (size_t i = 0; i < c->n_diffs; i++) {
        const fh_verify_diff *d = &c->diffs[idx[i]];
        if (d->check != cause.check || d->state != cause.state || d->step != cause.step)
            continue;
        if (shown++ < CAUSE_FIRST_SHOWN) {
            char t[1200];
            fh_verify_diff_text(c, d, t, sizeof t);
            fh_textbuf_put(&b, "%s%s", shown > 1 ? "; " : "", t);
        }
    }
    /* the counts of what the line leaves out, so that a reader knows */
    if (shown > CAUSE_FIRST_SHOWN)
        fh_textbuf_put(&b, " (and %zu more there)", shown - CAUSE_FIRST_SHOWN);
    size_t then = 0;
    for (size_t i = 0; i < c->n_diffs; i++) {
        const fh_verify_diff *d = &c->diffs[idx[i]];
        if (d->check != cause.check || (d->state == cause.state && d->step == cause.step))
            continue;
        if (then < CAUSE_THEN_SHOWN)
            fh_textbuf_put(&b, "%s%s", then ? ", " : "; then ", d->d.path);
        then++;
    }
    if (then > CAUSE_THEN_SHOWN)
        fh_textbuf_put(&b, " and %zu more", then - CAUSE_THEN_SHOWN);
    free(idx);
}

void fh_verify_cause_text(const fh_verify_case *c, char *buf, size_t n)
{
    fh_verify_cause cause;
    fh_verify_cause_of(c, &cause);
    fh_verify_check_cause_text(c, cause.check, buf, n);
}
