/* The spec keys whose value is an object (fp8, expect_refusal, paged) and
 * the checks of the CHECK rows (spec_keys.h): ranges that involve other
 * keys, run once the row is read. */
#include "spec_parse.h"

#include <assert.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "fattn/support.h"
#include "schedule.h"

/* fp8's recipe-update members: amax_history_len, amax_compute_algo,
 * margin (TE's DelayedScaling fields, common/recipe/__init__.py:253-256). */
static fattn_status fp8_update_member(const spec_parse_ctx *c, const char *k, const json_t *x,
                                      fh_spec *s)
{
    static const char key[] = "fp8";
    if (!strcmp(k, "amax_compute_algo")) {
        if (!json_is_string(x) ||
            fattn_fp8_amax_algo_parse(json_string_value(x), &s->fp8_amax_algo) != FATTN_OK)
            return spec_case_error(c, FATTN_E_PARSE, key, "amax_compute_algo: expected \"max\" "
                                   "or \"most_recent\" (a callable runs TE's unfused update, "
                                   "which fattn does not model)");
        return FATTN_OK;
    }
    int64_t lo = !strcmp(k, "margin") ? -64 : 1;
    int64_t hi = !strcmp(k, "margin") ? 64 : FH_SPEC_FP8_HISTORY_MAX;
    if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi)
        return spec_case_error(c, FATTN_E_PARSE, key, "%s: expected an integer in [%" PRId64
                               ", %" PRId64 "]", k, lo, hi);
    *(!strcmp(k, "margin") ? &s->fp8_margin : &s->fp8_amax_history_len) = json_integer_value(x);
    return FATTN_OK;
}

/* fp8: null, or an object of the members spec.h lists. */
fattn_status spec_parse_fp8(const spec_parse_ctx *c, const json_t *obj, fh_spec *s)
{
    static const char key[] = "fp8";
    static const char *const members[] = {"amax_compute_algo", "amax_history_len",
                                          "bf16_backward",     "dpa_bwd",
                                          "input_fp8",         "margin",
                                          "o_in_f16",          "output_fp8",
                                          "recipe",            "reduce_amax"};
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_object(v))
        return spec_case_error(c, FATTN_E_PARSE, key, "expected null or an object, got %s",
                               spec_json_type(v));
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        bool known = false;
        for (size_t i = 0; i < sizeof members / sizeof members[0]; i++)
            known = known || strcmp(k, members[i]) == 0;
        if (!known)
            return spec_case_error(c, FATTN_E_PARSE, key,
                                   "unknown member '%s' (amax_compute_algo, amax_history_len, "
                                   "bf16_backward, dpa_bwd, input_fp8, margin, o_in_f16, "
                                   "output_fp8, recipe, reduce_amax)", k);
        if (!strcmp(k, "amax_compute_algo") || !strcmp(k, "amax_history_len") ||
            !strcmp(k, "margin")) {
            fattn_status st = fp8_update_member(c, k, x, s);
            if (st != FATTN_OK)
                return st;
            continue;
        }
        if (strcmp(k, "recipe") == 0) {
            if (!json_is_string(x) ||
                fattn_fp8_recipe_parse(json_string_value(x), &s->fp8_recipe) != FATTN_OK)
                return spec_case_error(c, FATTN_E_PARSE, key,
                                       "recipe: expected \"delayed\", \"current\", \"mxfp8\" or "
                                  "\"block\"");
            continue;
        }
        if (!json_is_boolean(x))
            return spec_case_error(c, FATTN_E_PARSE, key, "%s: expected a boolean, got %s", k,
                                   spec_json_type(x));
        bool b = json_is_true(x);
        switch (k[0]) {
        case 'b': s->bf16_backward = b; break;
        case 'd': s->fp8_dpa_bwd = b; break;
        case 'i': s->fp8_input = b; break;
        case 'o': *(k[1] == '_' ? &s->fp8_o_in_f16 : &s->fp8_output) = b; break;
        case 'r': s->fp8_reduce_amax = b; break;
        default: assert(0);
        }
    }
    if (!s->fp8_reduce_amax && s->fp8_recipe != FATTN_FP8_RECIPE_DELAYED)
        return spec_case_error(c, FATTN_E_INVALID_ARG, key, "reduce_amax: a DelayedScaling "
                               "field (common/recipe/__init__.py); recipe %s has none",
                               fattn_fp8_recipe_name(s->fp8_recipe));
    if (s->dtype != FATTN_DTYPE_FLOAT16 && s->dtype != FATTN_DTYPE_BFLOAT16)
        return spec_case_error(c, FATTN_E_INVALID_ARG, key,
                               "the FP8 path needs dtype float16 or bfloat16 (q's nominal dtype), "
                          "not %s", fattn_dtype_name(s->dtype));
    s->fp8 = true;
    return FATTN_OK;
}

/* expect_refusal: null, or {"status": <name>, "rule": <rule id>}. */
fattn_status spec_parse_expect_refusal(const spec_parse_ctx *c, const json_t *obj, fh_spec *s)
{
    static const char key[] = "expect_refusal";
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_object(v))
        return spec_case_error(c, FATTN_E_PARSE, key, "expected null or an object, got %s",
                               spec_json_type(v));
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        if (strcmp(k, "status") != 0 && strcmp(k, "rule") != 0)
            return spec_case_error(c, FATTN_E_PARSE, key, "unknown member '%s' (status, rule)", k);
    }
    const json_t *jst = json_object_get(v, "status"), *jr = json_object_get(v, "rule");
    if (!jst || !json_is_string(jst) || !jr || !json_is_string(jr))
        return spec_case_error(c, FATTN_E_PARSE, key, "status and rule are required strings");
    const char *name = json_string_value(jst), *rule = json_string_value(jr);
    if (!fattn_status_from_name(name, &s->refusal_status))
        return spec_case_error(c, FATTN_E_PARSE, key, "status '%s' is not a fattn status name",
                               name);
    if (!fh_spec_refusal_status(s->refusal_status))
        return spec_case_error(c, FATTN_E_INVALID_ARG, key,
                               "status %s is not a refusal (an engine's FATTN_E_UNSUPPORTED is a "
                          "skip; FATTN_OK, memory, I/O, CUDA and internal failures are not "
                          "refusals)", name);
    if (!fattn_support_rule_find(rule))
        return spec_case_error(c, FATTN_E_INVALID_ARG, key, "rule '%s' is not in the support table",
                               rule);
    assert(strlen(rule) < sizeof s->refusal_rule); /* a table id */
    snprintf(s->refusal_rule, sizeof s->refusal_rule, "%s", rule);
    s->expect_refusal = true;
    return FATTN_OK;
}

/* paged: null or {"page_size" (required), "num_pages", "separate_v"}. */
fattn_status spec_parse_paged(const spec_parse_ctx *c, const json_t *obj, fh_spec *s)
{
    const json_t *v = json_object_get(obj, "paged"), *x;
    const char *k;
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_object(v) || !json_object_get(v, "page_size"))
        return spec_case_error(c, FATTN_E_PARSE, "paged", "expected null or an object with "
                               "page_size, got %s", spec_json_type(v));
    json_object_foreach((json_t *)v, k, x) {
        if (strcmp(k, "page_size") && strcmp(k, "num_pages") && strcmp(k, "separate_v"))
            return spec_case_error(c, FATTN_E_PARSE, "paged",
                                   "unknown member '%s' (num_pages, page_size, separate_v)", k);
    }
    fattn_status st;
    if ((st = spec_get_int(c, v, "page_size", 1, FH_SPEC_MAX_S, &s->page_size)) != FATTN_OK ||
        (st = spec_get_int(c, v, "num_pages", 1, INT32_MAX, &s->num_pages)) != FATTN_OK ||
        (st = spec_get_bool(c, v, "separate_v", &s->paged_separate_v)) != FATTN_OK)
        return st;
    s->paged = true;
    return FATTN_OK;
}

/* a*b*c*d <= limit, without overflow. All factors >= 1. */
static bool product_fits(int64_t limit, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t f[4] = {a, b, c, d};
    int64_t p = 1;
    for (int i = 0; i < 4; i++) {
        assert(f[i] >= 1); /* every size was parsed with a minimum of 1 */
        if (!fattn_mul_i64(p, f[i], &p) || p > limit)
            return false;
    }
    return true;
}

static fattn_status check_sizes(const spec_parse_ctx *c, const fh_spec *s)
{
    const int64_t limit = INT64_MAX / 8;
    struct {
        const char *what;
        int64_t x[4];
    } t[] = {
        {"q (b*h*sq*d_qk)", {s->b, s->h, s->sq, s->d_qk}},
        {"k (b*hg*skv*d_qk)", {s->b, s->hg, s->skv, s->d_qk}},
        {"v (b*hg*skv*d_v)", {s->b, s->hg, s->skv, s->d_v}},
        {"out (b*h*sq*d_v)", {s->b, s->h, s->sq, s->d_v}},
        {"scores (b*h*sq*skv)", {s->b, s->h, s->sq, s->skv}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (!product_fits(limit, t[i].x[0], t[i].x[1], t[i].x[2], t[i].x[3]))
            return spec_case_error(c, FATTN_E_OVERFLOW, NULL,
                                   "the size of %s overflows int64 bytes", t[i].what);
    }
    return FATTN_OK;
}

/* The CHECK rows' checks, run once the row is read. */
fattn_status spec_check_hg(const spec_parse_ctx *c, const fh_spec *s)
{
    if (s->hg > s->h || s->h % s->hg != 0)
        return spec_case_error(c, FATTN_E_INVALID_ARG, "hg",
                               "%" PRId64 " does not divide h = %" PRId64, s->hg, s->h);
    return FATTN_OK;
}

/* d_v is the last size: every tensor's byte count must fit. */
fattn_status spec_check_d_v(const spec_parse_ctx *c, const fh_spec *s)
{
    return check_sizes(c, s);
}

fattn_status spec_check_dropout_p(const spec_parse_ctx *c, const fh_spec *s)
{
    if (!(s->dropout_p >= 0.0 && s->dropout_p < 1.0))
        return spec_case_error(c, FATTN_E_INVALID_ARG, "dropout_p", "%g is not in [0, 1)",
                               s->dropout_p);
    return FATTN_OK;
}

/* The front ends take the scale as float32. */
fattn_status spec_check_attn_scale(const spec_parse_ctx *c, const fh_spec *s)
{
    if (s->attn_scale_set && fabs(s->attn_scale) > 3.4028234663852886e38)
        return spec_case_error(c, FATTN_E_INVALID_ARG, "attn_scale", "%g does not fit in float32",
                               s->attn_scale);
    return FATTN_OK;
}

/* A bias that needs no grad is a bias tensor's (DotProductAttention reads
 * core_attention_bias.requires_grad, dot_product_attention.py). */
fattn_status spec_check_bias_no_grad(const spec_parse_ctx *c, const fh_spec *s)
{
    if (s->bias_no_grad && s->bias != FATTN_BIAS_POST_SCALE_BIAS &&
        s->bias != FATTN_BIAS_PRE_SCALE_BIAS)
        return spec_case_error(c, FATTN_E_INVALID_ARG, "bias_no_grad", "the case has no bias "
                               "tensor (bias is %s)", fattn_bias_type_name(s->bias));
    return FATTN_OK;
}

bool fh_spec_has_backward(const fh_spec *s)
{
    return s->is_training && !s->no_grad && !s->inference_mode;
}

/* max_batch_size: the cache as TE's InferenceParams keeps it (inference.py
 * 169-177, 198, 632-635 in 2.20.2): paged, a bshd cache of exactly
 * max_batch_size * pages-per-sequence pages, one table [max_batch_size,
 * pps] for K and V, max_batch_size >= b. */
static fattn_status spec_check_max_batch_size(const spec_parse_ctx *c, const fh_spec *s,
                                              int64_t pps)
{
    if (!s->max_batch_size)
        return FATTN_OK;
    const char *why = NULL;
    if (!s->paged)
        why = "needs paged (TE's InferenceParams with is_paged=True)";
    else if (s->max_batch_size < s->b)
        why = "must be >= b";
    else if (s->num_pages != s->max_batch_size * pps)
        why = "needs num_pages = max_batch_size * skv / page_size (InferenceParams asserts "
              "total_num_pages = max_batch_size * max_pages_per_seq)";
    else if (fattn_layout_kv_format(s->layout) != FATTN_FORMAT_BSHD)
        why = "needs a bshd cache (paged_kv_*_bshd_bshd: InferenceParams keeps K and V bshd)";
    else if (s->paged_separate_v)
        why = "takes one page table for K and V (separate_v false)";
    else if (s->b > FH_KV_MAX_SEQ_ID + 1)
        why = "takes b <= 8 sequences (ids 0..7: TE's cache manager orders them by Python's "
              "set order, schedule.h)";
    if (why)
        return spec_case_error(c, FATTN_E_INVALID_ARG, "max_batch_size", "%s", why);
    return FATTN_OK;
}

/* A paged_kv_* layout iff paged; InferenceParams (inference.py:169-177): skv
 * % page_size == 0, num_pages (default max_batch_size, else b, times pps) =
 * max_batch * pps, max_batch >= b. */
fattn_status spec_check_paged(const spec_parse_ctx *c, fh_spec *s)
{
    if (fattn_layout_is_paged(s->layout) != s->paged)
        return spec_case_error(c, FATTN_E_INVALID_ARG, "paged", "%s", s->paged ?
                               "needs a paged_kv_* layout" : "a paged_kv_* layout needs the key");
    int64_t pps = s->paged ? s->skv / s->page_size : 1;
    int64_t rows = s->max_batch_size ? s->max_batch_size : s->b;
    s->num_pages = s->paged && !s->num_pages ? rows * pps : s->num_pages; /* <= 2^40 */
    /* as an explicit num_pages is bounded: the page tables are int32, and
     * past it their entries would wrap negative */
    if (s->num_pages > INT32_MAX)
        return spec_case_error(c, FATTN_E_INVALID_ARG, "paged",
                               "num_pages defaults to (max_batch_size or b) * skv / page_size = "
                               "%" PRId64 ", past INT32_MAX (the page tables are int32): fewer "
                               "sequences or larger pages", s->num_pages);
    if (s->paged && (s->skv % s->page_size || s->num_pages < s->b * pps || s->num_pages % pps))
        return spec_case_error(c, FATTN_E_INVALID_ARG, "paged",
                               "skv %" PRId64 " must be a multiple of page_size and num_pages %"
                               PRId64 " one >= b of its %" PRId64,
                               s->skv, s->num_pages, pps);
    return spec_check_max_batch_size(c, s, pps);
}

