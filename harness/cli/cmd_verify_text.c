/* fattn verify: what a failing case says, in the table, under the verdict
 * and in the JSON report — its earliest cause first, then every difference
 * in run order with attribute values (harness/check/cause.h,
 * docs/verify.md "The earliest cause"). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cause.h"
#include "cli.h"
#include "contrast.h"
#include "cmd_verify.h"
#include "escape.h"
#include "verify.h"

/* The differences listed under the verdict; the rest are counted. */
#define FIRST_LISTED 8

/* "legacy: ok; split: FATTN_E_X: message" for a case a side failed in. */
void fh_cmd_verify_sides_text(const fh_verify_case *c, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < FH_IMPL_COUNT && used < n; i++) {
        const char *msg = c->side_error[i];
        int w = c->side_status[i] == FATTN_OK
                    ? snprintf(buf + used, n - used, "%s%s: ok (every state)", i ? "; " : "",
                               fh_impl_name((fh_impl)i))
                    : snprintf(buf + used, n - used, "%s%s: %s: %s", i ? "; " : "",
                               fh_impl_name((fh_impl)i),
                               fattn_status_name(c->side_status[i]), msg);
        used = w < 0 ? n : used + (size_t)w;
    }
}

void fh_cmd_verify_result_text(const fh_verify_case *c, char *result, size_t n)
{
    if (c->skipped) {
        snprintf(result, n, "skipped: %s", c->skipped);
    } else if (c->cmp.differences) {
        char sides[1100] = "", cause[1400];
        if (fh_verify_side_failed(c))
            fh_cmd_verify_sides_text(c, sides, sizeof sides);
        fh_verify_cause_text(c, cause, sizeof cause);
        if (!cause[0]) /* nothing kept (out of memory): the first one */
            snprintf(cause, sizeof cause, "%s %s", c->cmp.paths[0], c->cmp.why[0]);
        snprintf(result, n, "DIFFERENT (%zu): %s%s%s%s", c->cmp.differences, cause,
                 sides[0] ? " (" : "", sides, sides[0] ? ")" : "");
    } else if (c->error[0]) {
        snprintf(result, n, "ERROR: %s", c->error);
    } else if (c->refused) {
        snprintf(result, n, "ok (refused as expected: %s, rule %s)%s",
                 fattn_status_name(c->spec->refusal_status), c->spec->refusal_rule,
                 c->golden_missing ? " (no golden)" : "");
    } else {
        char same[96] = "";
        if (c->same_engine_only)
            snprintf(same, sizeof same, " (%s: same-engine only)", c->same_engine_only);
        else if (c->other_plans)
            snprintf(same, sizeof same, " (other plans than the goldens': not bitwise)");
        snprintf(result, n, "ok%s%s", c->golden_missing ? " (no golden)" : same,
                 c->noisy_within ? " (d_softmax_offset: non-deterministic on this engine, "
                                   "within its bound)"
                                 : "");
    }
}

/* "3 tensors, 2 attributes" of the differences idx[from..n). */
static void kinds_text(const fh_verify_case *c, const size_t *idx, size_t from, char *buf,
                       size_t n)
{
    size_t t = 0, other = 0;
    for (size_t i = from; i < c->n_diffs; i++)
        c->diffs[idx[i]].d.tensor ? t++ : other++;
    snprintf(buf, n, "%zu tensor%s, %zu other object%s", t, cli_s(t), other, cli_s(other));
}

void fh_cmd_verify_print_first(FILE *f, const fh_verify_case *b)
{
    char cause[1400];
    fh_verify_cause_text(b, cause, sizeof cause);
    fprintf(f, "first differences (%s, case %s):\n", b->first_check, cli_vis(b->spec->id));
    if (cause[0])
        fprintf(f, "  cause: %s\n", cli_vis(cause));
    size_t *idx = b->n_diffs ? malloc(b->n_diffs * sizeof *idx) : NULL;
    if (idx) {
        fh_verify_diff_order(b, idx);
        for (size_t k = 0; k < b->n_diffs && k < FIRST_LISTED; k++) {
            char t[1400];
            fh_verify_diff_text(b, &b->diffs[idx[k]], t, sizeof t);
            fprintf(f, "  %s: %s\n", b->checks[b->diffs[idx[k]].check].name, cli_vis(t));
        }
        if (b->n_diffs > FIRST_LISTED) {
            char kinds[96];
            kinds_text(b, idx, FIRST_LISTED, kinds, sizeof kinds);
            fprintf(f, "  ... and %zu more (%s; fattn verify -k '%s' --json - lists them all)\n",
                    b->n_diffs - FIRST_LISTED, kinds, b->spec->id);
        }
        free(idx);
    } else {
        for (size_t k = 0; k < b->cmp.differences && k < FH_COMPARE_MAX_REPORTED; k++)
            fprintf(f, "  %s: %s\n", cli_vis(b->cmp.paths[k]), cli_vis(b->cmp.why[k]));
    }
    /* differences noted but not kept in full (out of memory) are counted */
    if (b->cmp.differences > b->n_diffs && b->n_diffs)
        fprintf(f, "  (%zu more differences counted, not kept)\n",
                b->cmp.differences - b->n_diffs);
    if (b->cmp.detail[0])
        fprintf(f, "  %s: %s\n", cli_vis(b->cmp.detail_path), cli_vis(b->cmp.detail));
    /* a state missing on one side: why it is missing */
    for (int i = 0; fh_verify_side_failed(b) && i < FH_IMPL_COUNT; i++) {
        if (b->side_status[i] == FATTN_OK)
            fprintf(f, "  %s: ok (every state)\n", fh_impl_name((fh_impl)i));
        else
            fprintf(f, "  %s: %s: %s\n", fh_impl_name((fh_impl)i),
                    fattn_status_name(b->side_status[i]), cli_vis(b->side_error[i]));
    }
}

/* The case's cause as JSON: the check, the earliest state, the states
 * equal before it, and the line. */
static json_t *json_cause(const fh_verify_case *c)
{
    fh_verify_cause cause;
    fh_verify_cause_of(c, &cause);
    if (cause.check < 0)
        return json_null();
    char text[1400];
    fh_verify_cause_text(c, text, sizeof text);
    json_t *eq = json_array();
    for (int s = 0; s < FH_VERIFY_NSTATES; s++)
        if (cause.equal_before & (1u << s))
            json_array_append_new(eq, json_string(fh_verify_state_name(s)));
    return json_pack("{s:s,s:s,s:o,s:I,s:s,s:i}", "check", c->checks[cause.check].name, "state",
                     fh_verify_state_name(cause.state), "equal_before", eq, "in_state",
                     (json_int_t)cause.n_first, "text", text, "step", cause.step);
}

/* Every difference, in the listing order: "path" is "<check>: <path>" as
 * before; "a"/"b" an attribute's two values, with the sides' names. */
static json_t *json_first(const fh_verify_case *c)
{
    json_t *jd = json_array();
    size_t *idx = c->n_diffs ? malloc(c->n_diffs * sizeof *idx) : NULL;
    if (!idx) {
        for (size_t k = 0; k < c->cmp.differences && k < FH_COMPARE_MAX_REPORTED; k++)
            json_array_append_new(jd, json_pack("{s:s,s:s}", "path", c->cmp.paths[k], "why",
                                                c->cmp.why[k]));
        return jd;
    }
    fh_verify_diff_order(c, idx);
    for (size_t k = 0; k < c->n_diffs; k++) {
        const fh_verify_diff *d = &c->diffs[idx[k]];
        const char *check = c->checks[d->check].name;
        char path[1400];
        snprintf(path, sizeof path, "%s: %s", check, d->d.path);
        json_t *e = json_pack("{s:s,s:s,s:s,s:s,s:b,s:i}", "path", path, "why", d->d.why,
                              "check", check, "state", fh_verify_state_name(d->state),
                              "tensor", d->d.tensor, "step", d->step);
        if (e && (d->d.a || d->d.b)) {
            json_object_set_new(e, "a", d->d.a ? json_string(d->d.a) : json_null());
            json_object_set_new(e, "b", d->d.b ? json_string(d->d.b) : json_null());
            json_object_set_new(e, "side_a", json_string(c->checks[d->check].side_a));
            json_object_set_new(e, "side_b", json_string(c->checks[d->check].side_b));
        }
        json_array_append_new(jd, e);
    }
    free(idx);
    return jd;
}

json_t *fh_cmd_verify_json_cases(const fh_verify_result *r)
{
    json_t *jcases = json_array();
    for (size_t i = 0; i < r->n_cases; i++) {
        const fh_verify_case *c = &r->cases[i];
        json_t *jc = json_pack("{s:s,s:s,s:I,s:s,s:I,s:o,s:b}", "id", c->spec->id, "states",
                               c->states, "tensors", (json_int_t)c->tensors, "result",
                               c->skipped ? "skipped" : c->cmp.differences ? "different"
                                                        : c->error[0]    ? "error"
                                                                         : "ok",
                               "differences", (json_int_t)c->cmp.differences, "first",
                               json_first(c), "golden", c->golden_compared);
        if (jc && c->cmp.differences)
            json_object_set_new(jc, "cause", json_cause(c));
        if (jc && c->spec->expect_refusal)
            json_object_set_new(jc, "refused", json_boolean(c->refused));
        if (jc && c->skipped) /* why: the support row that names the engine's gap */
            json_object_set_new(jc, "skipped", json_string(c->skipped));
        /* each front end's status and message, when one of them failed */
        for (int k = 0; jc && fh_verify_side_failed(c) && k < FH_IMPL_COUNT; k++)
            json_object_set_new(jc, fh_impl_name((fh_impl)k),
                                json_pack("{s:s,s:s}", "status",
                                          fattn_status_name(c->side_status[k]), "message",
                                          c->side_error[k]));
        json_array_append_new(jcases, jc);
    }
    return jcases;
}

void fh_cmd_verify_contrast(const fh_verify_result *r, fh_contrast *out)
{
    memset(out, 0, sizeof *out);
    const fh_spec **specs = malloc((r->n_cases ? r->n_cases : 1) * sizeof *specs);
    fh_contrast_outcome *o = malloc((r->n_cases ? r->n_cases : 1) * sizeof *o);
    if (specs && o) {
        for (size_t i = 0; i < r->n_cases; i++) {
            const fh_verify_case *c = &r->cases[i];
            specs[i] = c->spec;
            o[i] = c->skipped || c->spec->expect_refusal ? FH_CONTRAST_NONE
                   : (c->cmp.differences || c->error[0]) ? FH_CONTRAST_FAIL
                                                         : FH_CONTRAST_PASS;
        }
        if (fh_contrast_of(specs, o, r->n_cases, out) != FATTN_OK)
            memset(out, 0, sizeof *out); /* no line rather than a wrong one */
    }
    free(specs);
    free(o);
}

json_t *fh_cmd_verify_json_contrast(const fh_contrast *c)
{
    if (!c->text[0])
        return json_null();
    json_t *keys = json_array();
    for (int k = 0; k < c->n_keys; k++)
        json_array_append_new(keys, json_string(fh_feature_name(c->keys[k])));
    return json_pack("{s:s,s:I,s:I,s:o,s:I}", "text", c->text, "failing",
                     (json_int_t)c->failing, "passing", (json_int_t)c->passing, "features", keys,
                     "passing_with_them", (json_int_t)c->misses);
}
