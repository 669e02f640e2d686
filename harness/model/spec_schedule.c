/* The spec key `schedule` (schedule.h, docs/cases.md "Schedules"): its
 * JSON, and the checks that need the rest of the case (its CHECK row). */
#include "spec_parse.h"

#include <assert.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"

static const char key[] = "schedule";

/* One cache step: [[seq, len], ...], 1..b entries, ids in [0, 7]. */
static fattn_status parse_kv(const spec_parse_ctx *c, const json_t *v, int64_t k, int64_t b,
                             fh_step *st)
{
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (n == 0 || (int64_t)n > b)
        return spec_case_error(c, FATTN_E_PARSE, key, "step %" PRId64 ": \"step\" takes 1 to b "
                               "= %" PRId64 " [sequence id, new length] pairs", k, b);
    st->kind = FH_STEP_KV;
    st->n = (int64_t)n;
    st->seq = calloc(n, sizeof *st->seq);
    st->len = calloc(n, sizeof *st->len);
    if (!st->seq || !st->len)
        return fattn_error(FATTN_E_NOMEM, "out of memory reading a schedule");
    for (size_t j = 0; j < n; j++) {
        const json_t *e = json_array_get(v, j);
        const json_t *a = json_array_get(e, 0), *l = json_array_get(e, 1);
        if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_integer(a) ||
            !json_is_integer(l))
            return spec_case_error(c, FATTN_E_PARSE, key, "step %" PRId64 ": entry %zu is not "
                                   "a [sequence id, new length] pair of integers", k, j + 1);
        st->seq[j] = json_integer_value(a);
        st->len[j] = json_integer_value(l);
        if (st->seq[j] < 0 || st->seq[j] > FH_KV_MAX_SEQ_ID || st->len[j] < 1)
            return spec_case_error(c, FATTN_E_INVALID_ARG, key, "step %" PRId64 ": entry %zu: "
                                   "sequence ids are 0..%d (the order TE's cache managers "
                                   "iterate them in is then ascending, harness/model/"
                                   "schedule.h) and new lengths >= 1", k, j + 1,
                                   FH_KV_MAX_SEQ_ID);
        for (size_t i = 0; i < j; i++)
            if (st->seq[i] == st->seq[j])
                return spec_case_error(c, FATTN_E_INVALID_ARG, key, "step %" PRId64 ": sequence "
                                       "%" PRId64 " given twice", k, st->seq[j]);
    }
    return FATTN_OK;
}

/* One step object: exactly one of F, B, U, X, step. */
static fattn_status parse_step(const spec_parse_ctx *c, const json_t *o, int64_t k, int64_t b,
                               fh_step *st)
{
    const char *name;
    const json_t *v;
    if (!json_is_object(o) || json_object_size(o) != 1)
        return spec_case_error(c, FATTN_E_PARSE, key, "step %" PRId64 ": expected an object "
                               "of one member: F, B, U, X or step", k);
    json_object_foreach((json_t *)o, name, v) {
        if (!strcmp(name, "F") || !strcmp(name, "B")) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) >= FH_SCHEDULE_MAX_MB)
                return spec_case_error(c, FATTN_E_PARSE, key, "step %" PRId64 ": %s takes a "
                                       "micro-batch number in [0, %" PRId64 ")", k, name,
                                       FH_SCHEDULE_MAX_MB);
            st->kind = name[0] == 'F' ? FH_STEP_F : FH_STEP_B;
            st->mb = json_integer_value(v);
        } else if (!strcmp(name, "U")) {
            const char *d = json_is_string(v) ? json_string_value(v) : "";
            st->kind = FH_STEP_U;
            st->update = !strcmp(d, "forward")    ? FH_UPDATE_FORWARD
                         : !strcmp(d, "backward") ? FH_UPDATE_BACKWARD
                         : !strcmp(d, "both")     ? FH_UPDATE_BOTH
                                                  : 0;
            if (!st->update)
                return spec_case_error(c, FATTN_E_PARSE, key, "step %" PRId64 ": U takes "
                                       "\"forward\", \"backward\" or \"both\"", k);
        } else if (!strcmp(name, "X")) {
            if (!json_is_string(v) || strcmp(json_string_value(v), "extra_state") != 0)
                return spec_case_error(c, FATTN_E_PARSE, key, "step %" PRId64 ": X takes "
                                       "\"extra_state\" (TE's checkpoint of the FP8 state)", k);
            st->kind = FH_STEP_X;
        } else if (!strcmp(name, "step")) {
            return parse_kv(c, v, k, b, st);
        } else {
            return spec_case_error(c, FATTN_E_PARSE, key, "step %" PRId64 ": unknown step "
                                   "'%s' (F, B, U, X, step)", k, name);
        }
    }
    return FATTN_OK;
}

fattn_status spec_parse_schedule(const spec_parse_ctx *c, const json_t *obj, fh_spec *s)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return FATTN_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (n == 0 || n > FH_SCHEDULE_MAX_STEPS)
        return spec_case_error(c, FATTN_E_PARSE, key, "expected null or an array of 1 to %d "
                               "steps, got %s", FH_SCHEDULE_MAX_STEPS, spec_json_type(v));
    fh_schedule *sc = calloc(1, sizeof *sc);
    if (sc)
        sc->steps = calloc(n, sizeof *sc->steps);
    if (!sc || !sc->steps) {
        free(sc);
        return fattn_error(FATTN_E_NOMEM, "out of memory reading a schedule");
    }
    sc->n = (int64_t)n;
    s->schedule = sc; /* owned by the spec from here on, freed with it */
    for (size_t i = 0; i < n; i++) {
        fattn_status st = parse_step(c, json_array_get(v, i), (int64_t)i + 1, s->b,
                                     &sc->steps[i]);
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

/* F, B, U, X: micro-batches alive between their F and B; U and X only
 * with FP8 delayed scaling (TE keeps recipe state for it alone). */
static fattn_status check_training(const spec_parse_ctx *c, const fh_spec *s)
{
    const fh_schedule *sc = s->schedule;
    int64_t live[64], n_live = 0;
    for (int64_t k = 0; k < sc->n; k++) {
        const fh_step *st = &sc->steps[k];
        int64_t at = -1;
        for (int64_t i = 0; i < n_live; i++)
            at = live[i] == st->mb ? i : at;
        if (st->kind == FH_STEP_KV)
            return spec_case_error(c, FATTN_E_INVALID_ARG, key, "step %" PRId64 ": a cache "
                                   "step in a schedule of forwards and backwards (a schedule "
                                   "is one or the other)", k + 1);
        if ((st->kind == FH_STEP_U || st->kind == FH_STEP_X) &&
            !(s->fp8 && s->fp8_recipe == FATTN_FP8_RECIPE_DELAYED))
            return spec_case_error(c, FATTN_E_INVALID_ARG, key, "step %" PRId64 ": %s needs "
                                   "fp8 with the delayed recipe (TE keeps recipe state for "
                                   "delayed scaling only, quantization.py:656-700)", k + 1,
                                   st->kind == FH_STEP_U ? "U" : "X");
        if (st->kind == FH_STEP_F && at >= 0)
            return spec_case_error(c, FATTN_E_INVALID_ARG, key, "step %" PRId64 ": F%" PRId64
                                   " while micro-batch %" PRId64 "'s forward is alive (its B "
                                   "has not run)", k + 1, st->mb, st->mb);
        if (st->kind == FH_STEP_F && fh_spec_has_backward(s)) {
            if (n_live == 64)
                return spec_case_error(c, FATTN_E_INVALID_ARG, key, "step %" PRId64 ": more "
                                       "than 64 forwards alive at once", k + 1);
            live[n_live++] = st->mb;
        }
        if (st->kind == FH_STEP_B && (at < 0 || !fh_spec_has_backward(s)))
            return spec_case_error(c, FATTN_E_INVALID_ARG, key, "step %" PRId64 ": B%" PRId64
                                   " without a live forward of micro-batch %" PRId64 "%s",
                                   k + 1, st->mb, st->mb,
                                   fh_spec_has_backward(s) ? "" :
                                   s->is_training ? " (a forward under no_grad or "
                                   "inference_mode keeps none)" :
                                   " (an inference case keeps none)");
        if (st->kind == FH_STEP_B)
            live[at] = live[--n_live];
    }
    return FATTN_OK;
}

/* Cache steps: inference through DotProductAttention with InferenceParams
 * (a bshd cache, padding masks, no FP8, lengths from the steps). */
static fattn_status check_cache(const spec_parse_ctx *c, const fh_spec *s)
{
    const fh_schedule *sc = s->schedule;
    for (int64_t k = 0; k < sc->n; k++)
        if (sc->steps[k].kind != FH_STEP_KV)
            return spec_case_error(c, FATTN_E_INVALID_ARG, key, "step %" PRId64 ": a forward, "
                                   "backward or update in a schedule of cache steps", k + 1);
    fattn_qkv_format qf = fattn_layout_q_format(s->layout);
    const char *why = NULL;
    if (s->is_training)
        why = "cache steps are inference (is_training false): TE's KV caching runs in eval";
    else if (s->no_grad || s->inference_mode)
        why = "cache steps run with grad enabled, as TE's test_kv_cache.py runs them (no_grad "
              "and inference_mode are not modelled with them)";
    else if (fattn_layout_kv_format(s->layout) != FATTN_FORMAT_BSHD ||
             (fattn_layout_group(s->layout) != FATTN_LAYOUT_GROUP_HD_HD_HD &&
              fattn_layout_group(s->layout) != FATTN_LAYOUT_GROUP_PAGED_KV_HD_HD_HD) ||
             (qf != FATTN_FORMAT_BSHD && qf != FATTN_FORMAT_SBHD && qf != FATTN_FORMAT_THD))
        why = "cache steps need a layout <q>_bshd_bshd or paged_kv_<q>_bshd_bshd (the cache is "
              "bshd, inference.py:198; q bshd, sbhd or thd)";
    else if (!fattn_mask_has_padding(s->mask))
        why = "cache steps need a padding mask (DotProductAttention asserts it, "
              "dot_product_attention.py 2.19.0:1834, 2.20.2:2537)";
    else if (s->fp8)
        why = "cache steps run no FP8 (FusedAttention is off for FP8 KV caching, utils.py "
              "2.19.0:868, 2.20.2:969)";
    else if (s->paged && s->paged_separate_v)
        why = "FusedAttention passes the cache's one page table for K and V (backends.py "
              "2.19.0:2227-2228, 2.20.2:2486-2487): no separate_v";
    else if (s->seqlens_q || s->seqlens_kv || s->pad_between_seqs)
        why = "the steps give the lengths: no seqlens_q, seqlens_kv or pad_between_seqs";
    else if (s->paged && s->num_pages != s->b * (s->skv / s->page_size))
        why = "InferenceParams needs total_num_pages = max_batch_size * pages per sequence "
              "(inference.py:174-177): num_pages must be b * skv / page_size";
    else if (qf == FATTN_FORMAT_THD && s->h < s->b)
        why = "a thd q with h < b: FusedAttention cuts cu_seqlens to q.shape[1] + 1 = h + 1 "
              "entries (backends.py 2.19.0:2174-2176, 2.20.2:2433-2435), fewer than the "
              "cache's b + 1";
    if (why)
        return spec_case_error(c, FATTN_E_INVALID_ARG, key, "%s", why);
    fh_kv_plan plan;
    fattn_status st = fh_kv_plan_make(sc, s->b, s->skv, s->sq, s->paged, s->page_size,
                                         qf == FATTN_FORMAT_THD, &plan);
    if (st != FATTN_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", fattn_last_error());
        return spec_case_error(c, st, key, "%s", msg);
    }
    fh_kv_plan_free(&plan);
    return FATTN_OK;
}

fattn_status spec_check_schedule(const spec_parse_ctx *c, fh_spec *s)
{
    if (!s->schedule)
        return FATTN_OK;
    if (s->max_batch_size && fh_schedule_is_cache(s->schedule)) /* spec_objects.c */
        return spec_case_error(c, FATTN_E_INVALID_ARG, "max_batch_size",
                               "not with cache steps (they are the cache's model)");
    return fh_schedule_is_cache(s->schedule) ? check_cache(c, s) : check_training(c, s);
}

fattn_status fh_spec_kv_plan(const fh_spec *s, fh_kv_plan *out)
{
    assert(fh_schedule_is_cache(s->schedule));
    return fh_kv_plan_make(s->schedule, s->b, s->skv, s->sq, s->paged, s->page_size,
                              fattn_layout_q_format(s->layout) == FATTN_FORMAT_THD, out);
}

fattn_status fh_spec_step(const fh_spec *s, const fh_kv_plan *plan, int64_t k,
                             fh_spec *out)
{
    assert(s->schedule && k >= 1 && k <= s->schedule->n);
    fh_spec tmp = *s;
    tmp.schedule = NULL;
    tmp.seed = s->seed + k; /* <= INT64_MAX: the seed row's bound */
    if (s->schedule->steps[k - 1].kind == FH_STEP_KV) {
        const fh_kv_step *kv = &plan->steps[k - 1];
        assert(plan && kv->lens_q);
        tmp.b = kv->b;
        tmp.sq = kv->sq;
        tmp.seqlens_q = kv->lens_q;
        tmp.seqlens_kv = kv->lens_kv;
    }
    return fh_spec_copy(out, &tmp);
}
