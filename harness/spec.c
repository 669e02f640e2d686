/* Case specs: JSON parsing with named errors, defaults, equality, from the
 * rows of FATTN_SPEC_KEYS (spec_keys.h). The canonical writer, reading a spec
 * file, the summary and the bias shapes' names are in spec_text.c. See
 * spec.h for the keys. */
#include "spec.h"

#include <assert.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "fattn/rng.h"
#include "fattn/support.h"

/* Generated at build time from golden/default_cases.json (tools/build/embed.py). */
extern const char fattn_default_cases_json[];

/* The spec's dtypes: the three io types of the F16 path. */
static fattn_status spec_dtype_parse(const char *s, fattn_dtype *out)
{
    static const fattn_dtype allowed[] = {FATTN_DTYPE_FLOAT16, FATTN_DTYPE_BFLOAT16,
                                          FATTN_DTYPE_FLOAT32};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        if (strcmp(s, fattn_dtype_name(allowed[i])) == 0) {
            *out = allowed[i];
            return FATTN_OK;
        }
    }
    return fattn_error(FATTN_E_PARSE,
                       "unknown dtype \"%s\" (valid: float16, bfloat16, float32)", s);
}

/* ------------------------------------------------------------------------ */
/* Init, free, copy, equal: by kind, from FATTN_SPEC_KEYS                 */
/* ------------------------------------------------------------------------ */

/* Defaults. memset gives the rest: required integers 0, FLAG false, PAIR
 * and NREAL unset (null), TRI FATTN_TRISTATE_NULL, REFUSE off, id "". INT
 * rows whose default names another row (hg = h) get it again when parsed. */
#define I_ID(k, d)
#define I_REQ(k, d)
#define I_INT(k, d) s->k = (d);
#define I_NAME(k, d) s->k = (d);
#define I_BOOL(k, d) s->k = (d);
#define I_FLAG(k, d)
#define I_PAIR(k, d)
#define I_TRI(k, d)
#define I_REAL(k, d) s->k = (d);
#define I_NREAL(k, d)
#define I_LIST(k, d) s->k = NULL;
#define I_FP8(k, d)                                                                            \
    s->fp8_recipe = FATTN_FP8_RECIPE_DELAYED;                                                  \
    s->fp8_dpa_bwd = true;                                                                     \
    s->fp8_o_in_f16 = true;
#define I_REFUSE(k, d)
#define I_PAGED(k, d)
#define INIT_ROW(key, kind, ctype, a, b, dflt, post) I_##kind(key, dflt)

void fattn_spec_init(fattn_spec *s)
{
    memset(s, 0, sizeof *s);
    _Static_assert(FATTN_TRISTATE_NULL == 0, "memset makes a null tristate");
    FATTN_SPEC_KEYS(INIT_ROW)
}

/* The rows that own memory (LIST): free, and copy deeply. */
#define OWNED_ROW(key, kind, ctype, a, b, dflt, post) OWNED_##kind(key)
#define OWNED_LIST(k) OWNED(k)
#define OWNED_ID(k)
#define OWNED_REQ(k)
#define OWNED_INT(k)
#define OWNED_NAME(k)
#define OWNED_BOOL(k)
#define OWNED_FLAG(k)
#define OWNED_PAIR(k)
#define OWNED_TRI(k)
#define OWNED_REAL(k)
#define OWNED_NREAL(k)
#define OWNED_FP8(k)
#define OWNED_REFUSE(k)
#define OWNED_PAGED(k)

static void free_lists(fattn_spec *s)
{
#define OWNED(k) free(s->k);
    FATTN_SPEC_KEYS(OWNED_ROW)
#undef OWNED
}

void fattn_spec_free(fattn_spec *s)
{
    if (!s)
        return;
    free_lists(s);
    fattn_spec_init(s);
}

static int64_t *dup_list(const int64_t *src, int64_t n)
{
    if (!src)
        return NULL;
    int64_t *p = malloc((size_t)n * sizeof *p);
    if (p)
        memcpy(p, src, (size_t)n * sizeof *p);
    return p;
}

fattn_status fattn_spec_copy(fattn_spec *dst, const fattn_spec *src)
{
    *dst = *src;
    bool oom = false;
#define OWNED(k)                                                                               \
    dst->k = dup_list(src->k, src->b);                                                         \
    oom = oom || (src->k && !dst->k);
    FATTN_SPEC_KEYS(OWNED_ROW)
#undef OWNED
    if (oom) {
        free_lists(dst);
        fattn_spec_init(dst);
        return fattn_error(FATTN_E_NOMEM, "spec '%s': out of memory copying seqlens", src->id);
    }
    return FATTN_OK;
}

static bool same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static bool same_list(const int64_t *a, const int64_t *b, int64_t n)
{
    if (!a || !b)
        return a == b;
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Equal by kind; floats by their bits, a null PAIR/NREAL ignores its value,
 * fp8 and expect_refusal compare their members only when set. LIST rows
 * come after b, so their length is equal when they are compared. */
#define E_ID(k) (strcmp(x->k, y->k) == 0)
#define E_REQ(k) (x->k == y->k)
#define E_INT(k) (x->k == y->k)
#define E_NAME(k) (x->k == y->k)
#define E_BOOL(k) (x->k == y->k)
#define E_FLAG(k) (x->k == y->k)
#define E_PAIR(k)                                                                              \
    (x->k##_set == y->k##_set && (!x->k##_set || (x->k[0] == y->k[0] && x->k[1] == y->k[1])))
#define E_TRI(k) (x->k == y->k)
#define E_REAL(k) same_double(x->k, y->k)
#define E_NREAL(k) (x->k##_set == y->k##_set && (!x->k##_set || same_double(x->k, y->k)))
#define E_LIST(k) same_list(x->k, y->k, x->b)
#define E_FP8(k)                                                                               \
    (x->fp8 == y->fp8 &&                                                                       \
     (!x->fp8 || (x->fp8_recipe == y->fp8_recipe && x->fp8_input == y->fp8_input &&           \
                  x->fp8_output == y->fp8_output && x->fp8_dpa_bwd == y->fp8_dpa_bwd &&       \
                  x->fp8_o_in_f16 == y->fp8_o_in_f16 && x->bf16_backward == y->bf16_backward)))
#define E_REFUSE(k)                                                                            \
    (x->expect_refusal == y->expect_refusal &&                                                 \
     (!x->expect_refusal || (x->refusal_status == y->refusal_status &&                         \
                             strcmp(x->refusal_rule, y->refusal_rule) == 0)))
#define E_PAGED(k)                                                                             \
    (x->paged == y->paged && (!x->paged || (x->page_size == y->page_size &&                    \
     x->num_pages == y->num_pages && x->paged_separate_v == y->paged_separate_v)))
#define EQ_ROW(key, kind, ctype, a, b, dflt, post) &&E_##kind(key)

bool fattn_spec_equal(const fattn_spec *x, const fattn_spec *y)
{
    return true FATTN_SPEC_KEYS(EQ_ROW);
}

void fattn_spec_list_free(fattn_spec_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->count; i++)
        fattn_spec_free(&l->items[i]);
    free(l->items);
    l->items = NULL;
    l->count = 0;
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                  */
/* ------------------------------------------------------------------------ */

/* The keys in the rows' order; fattn_spec_key_name gives them sorted. */
#define KEY_NAME_ROW(key, kind, ctype, a, b, dflt, post) #key,
static const char *const spec_rows[] = {FATTN_SPEC_KEYS(KEY_NAME_ROW)};
#define N_SPEC_ROWS (sizeof spec_rows / sizeof spec_rows[0])

size_t fattn_spec_key_count(void) { return N_SPEC_ROWS; }

/* The i-th key in sorted order: the one that i keys sort before. */
const char *fattn_spec_key_name(size_t i)
{
    for (size_t r = 0; r < N_SPEC_ROWS; r++) {
        size_t before = 0;
        for (size_t q = 0; q < N_SPEC_ROWS; q++)
            before += strcmp(spec_rows[q], spec_rows[r]) < 0;
        if (before == i)
            return spec_rows[r];
    }
    return NULL;
}

typedef struct parse_ctx {
    const char *source;
    size_t index;   /* 1-based position in the array; 0 for a lone object */
    const char *id; /* "" until known */
} parse_ctx;

static fattn_status case_error(const parse_ctx *c, fattn_status st, const char *key,
                               const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static fattn_status case_error(const parse_ctx *c, fattn_status st, const char *key,
                               const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    char where[FATTN_SPEC_ID_MAX + 64];
    if (c->id && c->id[0])
        snprintf(where, sizeof where, "case '%s'", c->id);
    else
        snprintf(where, sizeof where, "case");
    char pos[32] = "";
    if (c->index)
        snprintf(pos, sizeof pos, " (#%zu)", c->index);
    if (key)
        return fattn_error(st, "%s: %s%s: key '%s': %s", c->source, where, pos, key, detail);
    return fattn_error(st, "%s: %s%s: %s", c->source, where, pos, detail);
}

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NULL: return "null";
    }
    return "an unknown value";
}

static fattn_status get_int(const parse_ctx *c, const json_t *obj, const char *key,
                            int64_t lo, int64_t hi, int64_t *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return FATTN_OK;
    if (!json_is_integer(v))
        return case_error(c, FATTN_E_PARSE, key, "expected an integer, got %s",
                          json_type_name(v));
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return case_error(c, FATTN_E_INVALID_ARG, key,
                          "%" JSON_INTEGER_FORMAT " out of range [%" PRId64 ", %" PRId64 "]", x,
                          lo, hi);
    *out = (int64_t)x;
    return FATTN_OK;
}

static fattn_status get_bool(const parse_ctx *c, const json_t *obj, const char *key, bool *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return FATTN_OK;
    if (!json_is_boolean(v))
        return case_error(c, FATTN_E_PARSE, key, "expected true or false, got %s",
                          json_type_name(v));
    *out = json_is_true(v);
    return FATTN_OK;
}

/* A number (integer or real) as a double; *present false for a missing key
 * or (when nullable) null. */
static fattn_status get_number(const parse_ctx *c, const json_t *obj, const char *key,
                               bool nullable, bool *present, double *out)
{
    const json_t *v = json_object_get(obj, key);
    *present = false;
    if (!v || (nullable && json_is_null(v)))
        return FATTN_OK;
    if (!json_is_number(v))
        return case_error(c, FATTN_E_PARSE, key, "expected %sa number, got %s",
                          nullable ? "null or " : "", json_type_name(v));
    double x = json_number_value(v);
    if (!isfinite(x))
        return case_error(c, FATTN_E_INVALID_ARG, key, "not a finite number");
    *present = true;
    *out = x;
    return FATTN_OK;
}

/* A string key; *out NULL when the key is missing. */
static fattn_status get_string(const parse_ctx *c, const json_t *obj, const char *key,
                               const char **out)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v)
        return FATTN_OK;
    if (!json_is_string(v))
        return case_error(c, FATTN_E_PARSE, key, "expected a string, got %s",
                          json_type_name(v));
    *out = json_string_value(v);
    return FATTN_OK;
}

/* A name its parser refused: the parser's message (which lists the valid
 * names) under the case and key. */
static fattn_status name_error(const parse_ctx *c, const char *key)
{
    char why[512];
    snprintf(why, sizeof why, "%s", fattn_last_error());
    return case_error(c, FATTN_E_PARSE, key, "%s", why);
}

static bool id_char_ok(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
}

static fattn_status parse_id(parse_ctx *c, const json_t *obj, fattn_spec *s)
{
    const json_t *v = json_object_get(obj, "id");
    if (!v)
        return case_error(c, FATTN_E_PARSE, "id", "missing (required)");
    if (!json_is_string(v))
        return case_error(c, FATTN_E_PARSE, "id", "expected a string, got %s",
                          json_type_name(v));
    const char *id = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0)
        return case_error(c, FATTN_E_PARSE, "id", "empty");
    if (n > FATTN_SPEC_ID_MAX)
        return case_error(c, FATTN_E_PARSE, "id", "longer than %d characters",
                          FATTN_SPEC_ID_MAX);
    for (size_t i = 0; i < n; i++) {
        if (!id_char_ok(id[i]))
            return case_error(c, FATTN_E_PARSE, "id",
                              "character %zu (byte 0x%02x) is not one of [A-Za-z0-9._-]", i,
                              (unsigned)(unsigned char)id[i]);
    }
    if (strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
        return case_error(c, FATTN_E_PARSE, "id", "\"%s\" cannot name a group", id);
    memcpy(s->id, id, n + 1);
    c->id = s->id;
    return FATTN_OK;
}

/* null or [left, right], each in [lo, hi]; *set false for null. */
static fattn_status get_pair(const parse_ctx *c, const json_t *obj, const char *key,
                             int64_t lo, int64_t hi, bool *set, int64_t out[2])
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_array(v) || json_array_size(v) != 2)
        return case_error(c, FATTN_E_PARSE, key,
                          "expected null or [left, right], got %s%s", json_type_name(v),
                          json_is_array(v) ? " of the wrong length" : "");
    for (size_t i = 0; i < 2; i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_integer(e))
            return case_error(c, FATTN_E_PARSE, key, "element %zu: expected an integer, got %s",
                              i, json_type_name(e));
        json_int_t x = json_integer_value(e);
        if (x < lo || x > hi)
            return case_error(c, FATTN_E_INVALID_ARG, key,
                              "element %zu: %" JSON_INTEGER_FORMAT " does not fit in int32", i, x);
        out[i] = (int64_t)x;
    }
    *set = true;
    return FATTN_OK;
}

int64_t fattn_spec_rng_increment(const fattn_spec *s)
{
    if (!s->fp8)
        return FATTN_RNG_F16_INCREMENT;
    /* fused_attn.py:356-364: ceil(sq^2 / 128) per thread on the FP8
     * backend, which philox_cuda_state rounds up to a multiple of 4. */
    int64_t n = (s->sq * s->sq + 127) / 128;
    return (n + 3) / 4 * 4;
}

bool fattn_spec_refusal_status(fattn_status st)
{
    switch (st) {
    case FATTN_OK:
    case FATTN_E_UNSUPPORTED:
    case FATTN_E_NOMEM:
    case FATTN_E_IO:
    case FATTN_E_CUDA:
    case FATTN_E_CUDNN:
    case FATTN_E_INTERNAL:
        return false;
    default:
        return true;
    }
}

/* fp8: null, or an object of the members spec.h lists. */
static fattn_status parse_fp8(const parse_ctx *c, const json_t *obj, fattn_spec *s)
{
    static const char key[] = "fp8";
    static const char *const members[] = {"bf16_backward", "dpa_bwd",    "input_fp8",
                                          "o_in_f16",      "output_fp8", "recipe"};
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_object(v))
        return case_error(c, FATTN_E_PARSE, key, "expected null or an object, got %s",
                          json_type_name(v));
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        bool known = false;
        for (size_t i = 0; i < sizeof members / sizeof members[0]; i++)
            known = known || strcmp(k, members[i]) == 0;
        if (!known)
            return case_error(c, FATTN_E_PARSE, key,
                              "unknown member '%s' (bf16_backward, dpa_bwd, input_fp8, "
                              "o_in_f16, output_fp8, recipe)", k);
        if (strcmp(k, "recipe") == 0) {
            if (!json_is_string(x) ||
                fattn_fp8_recipe_parse(json_string_value(x), &s->fp8_recipe) != FATTN_OK)
                return case_error(c, FATTN_E_PARSE, key,
                                  "recipe: expected \"delayed\", \"current\", \"mxfp8\" or "
                                  "\"block\"");
            continue;
        }
        if (!json_is_boolean(x))
            return case_error(c, FATTN_E_PARSE, key, "%s: expected a boolean, got %s", k,
                              json_type_name(x));
        bool b = json_is_true(x);
        switch (k[0]) {
        case 'b': s->bf16_backward = b; break;
        case 'd': s->fp8_dpa_bwd = b; break;
        case 'i': s->fp8_input = b; break;
        case 'o': *(k[1] == '_' ? &s->fp8_o_in_f16 : &s->fp8_output) = b; break;
        default: assert(0);
        }
    }
    if (s->dtype != FATTN_DTYPE_FLOAT16 && s->dtype != FATTN_DTYPE_BFLOAT16)
        return case_error(c, FATTN_E_INVALID_ARG, key,
                          "the FP8 path needs dtype float16 or bfloat16 (q's nominal dtype), "
                          "not %s", fattn_dtype_name(s->dtype));
    s->fp8 = true;
    return FATTN_OK;
}

/* expect_refusal: null, or {"status": <name>, "rule": <rule id>}. */
static fattn_status parse_expect_refusal(const parse_ctx *c, const json_t *obj, fattn_spec *s)
{
    static const char key[] = "expect_refusal";
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_object(v))
        return case_error(c, FATTN_E_PARSE, key, "expected null or an object, got %s",
                          json_type_name(v));
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        if (strcmp(k, "status") != 0 && strcmp(k, "rule") != 0)
            return case_error(c, FATTN_E_PARSE, key, "unknown member '%s' (status, rule)", k);
    }
    const json_t *jst = json_object_get(v, "status"), *jr = json_object_get(v, "rule");
    if (!jst || !json_is_string(jst) || !jr || !json_is_string(jr))
        return case_error(c, FATTN_E_PARSE, key, "status and rule are required strings");
    const char *name = json_string_value(jst), *rule = json_string_value(jr);
    if (!fattn_status_from_name(name, &s->refusal_status))
        return case_error(c, FATTN_E_PARSE, key, "status '%s' is not a fattn status name", name);
    if (!fattn_spec_refusal_status(s->refusal_status))
        return case_error(c, FATTN_E_INVALID_ARG, key,
                          "status %s is not a refusal (an engine's FATTN_E_UNSUPPORTED is a "
                          "skip; FATTN_OK, memory, I/O, CUDA and internal failures are not "
                          "refusals)", name);
    if (!fattn_support_rule_find(rule))
        return case_error(c, FATTN_E_INVALID_ARG, key, "rule '%s' is not in the support table",
                          rule);
    assert(strlen(rule) < sizeof s->refusal_rule); /* a table id */
    snprintf(s->refusal_rule, sizeof s->refusal_rule, "%s", rule);
    s->expect_refusal = true;
    return FATTN_OK;
}

/* paged: null or {"page_size" (required), "num_pages", "separate_v"}. */
static fattn_status parse_paged(const parse_ctx *c, const json_t *obj, fattn_spec *s)
{
    const json_t *v = json_object_get(obj, "paged"), *x;
    const char *k;
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_object(v) || !json_object_get(v, "page_size"))
        return case_error(c, FATTN_E_PARSE, "paged", "expected null or an object with "
                          "page_size, got %s", json_type_name(v));
    json_object_foreach((json_t *)v, k, x) {
        if (strcmp(k, "page_size") && strcmp(k, "num_pages") && strcmp(k, "separate_v"))
            return case_error(c, FATTN_E_PARSE, "paged",
                              "unknown member '%s' (num_pages, page_size, separate_v)", k);
    }
    fattn_status st;
    if ((st = get_int(c, v, "page_size", 1, FATTN_SPEC_MAX_S, &s->page_size)) ||
        (st = get_int(c, v, "num_pages", 1, INT32_MAX, &s->num_pages)) ||
        (st = get_bool(c, v, "separate_v", &s->paged_separate_v)))
        return st;
    s->paged = true;
    return FATTN_OK;
}

static fattn_status parse_tristate(const parse_ctx *c, const json_t *obj, const char *key,
                                   fattn_tristate *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_boolean(v))
        return case_error(c, FATTN_E_PARSE, key, "expected null, true or false, got %s",
                          json_type_name(v));
    *out = json_is_true(v) ? FATTN_TRISTATE_TRUE : FATTN_TRISTATE_FALSE;
    return FATTN_OK;
}

/* null or a list of exactly b integers in [lo, hi] (malloc'd). */
static fattn_status get_list(const parse_ctx *c, const json_t *obj, const char *key, int64_t b,
                             int64_t lo, int64_t hi, int64_t **out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_array(v))
        return case_error(c, FATTN_E_PARSE, key, "expected null or a list of integers, got %s",
                          json_type_name(v));
    if ((int64_t)json_array_size(v) != b)
        return case_error(c, FATTN_E_INVALID_ARG, key,
                          "has %zu entries, expected b = %" PRId64, json_array_size(v), b);
    int64_t *list = malloc((size_t)b * sizeof *list);
    if (!list)
        return case_error(c, FATTN_E_NOMEM, key, "out of memory");
    for (int64_t i = 0; i < b; i++) {
        const json_t *e = json_array_get(v, (size_t)i);
        if (!json_is_integer(e)) {
            free(list);
            return case_error(c, FATTN_E_PARSE, key, "element %" PRId64 ": expected an integer, got %s",
                              i, json_type_name(e));
        }
        json_int_t x = json_integer_value(e);
        if (x < lo || x > hi) {
            free(list);
            return case_error(c, FATTN_E_INVALID_ARG, key,
                              "element %" PRId64 ": %" JSON_INTEGER_FORMAT
                              " out of range [%" PRId64 ", %" PRId64 "]",
                              i, x, lo, hi);
        }
        list[i] = (int64_t)x;
    }
    *out = list;
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

static fattn_status check_sizes(const parse_ctx *c, const fattn_spec *s)
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
            return case_error(c, FATTN_E_OVERFLOW, NULL,
                              "the size of %s overflows int64 bytes", t[i].what);
    }
    return FATTN_OK;
}

#define TRY(expr)                                                              \
    do {                                                                       \
        fattn_status try_st_ = (expr);                                         \
        if (try_st_ != FATTN_OK)                                               \
            return try_st_;                                                    \
    } while (0)

/* The CHECK rows' checks, run once the row is read. */
static fattn_status spec_check_hg(const parse_ctx *c, const fattn_spec *s)
{
    if (s->hg > s->h || s->h % s->hg != 0)
        return case_error(c, FATTN_E_INVALID_ARG, "hg",
                          "%" PRId64 " does not divide h = %" PRId64, s->hg, s->h);
    return FATTN_OK;
}

/* d_v is the last size: every tensor's byte count must fit. */
static fattn_status spec_check_d_v(const parse_ctx *c, const fattn_spec *s)
{
    return check_sizes(c, s);
}

static fattn_status spec_check_dropout_p(const parse_ctx *c, const fattn_spec *s)
{
    if (!(s->dropout_p >= 0.0 && s->dropout_p < 1.0))
        return case_error(c, FATTN_E_INVALID_ARG, "dropout_p", "%g is not in [0, 1)",
                          s->dropout_p);
    return FATTN_OK;
}

/* The front ends take the scale as float32. */
static fattn_status spec_check_attn_scale(const parse_ctx *c, const fattn_spec *s)
{
    if (s->attn_scale_set && fabs(s->attn_scale) > 3.4028234663852886e38)
        return case_error(c, FATTN_E_INVALID_ARG, "attn_scale", "%g does not fit in float32",
                          s->attn_scale);
    return FATTN_OK;
}

/* A bias that needs no grad is a bias tensor's (DotProductAttention reads
 * core_attention_bias.requires_grad, dot_product_attention.py). */
static fattn_status spec_check_bias_no_grad(const parse_ctx *c, const fattn_spec *s)
{
    if (s->bias_no_grad && s->bias != FATTN_BIAS_POST_SCALE_BIAS &&
        s->bias != FATTN_BIAS_PRE_SCALE_BIAS)
        return case_error(c, FATTN_E_INVALID_ARG, "bias_no_grad", "the case has no bias tensor "
                          "(bias is %s)", fattn_bias_type_name(s->bias));
    return FATTN_OK;
}

/* A paged_kv_* layout iff paged; InferenceParams (inference.py:169-177): skv
 * % page_size == 0, num_pages (default b * pps) = max_batch * pps, max_batch >= b. */
static fattn_status spec_check_paged(const parse_ctx *c, fattn_spec *s)
{
    if (fattn_layout_is_paged(s->layout) != s->paged)
        return case_error(c, FATTN_E_INVALID_ARG, "paged", "%s", s->paged ?
                          "needs a paged_kv_* layout" : "a paged_kv_* layout needs the key");
    int64_t pps = s->paged ? s->skv / s->page_size : 1;
    s->num_pages = s->paged && !s->num_pages ? s->b * pps : s->num_pages; /* <= 2^40 */
    if (s->paged && (s->skv % s->page_size || s->num_pages < s->b * pps || s->num_pages % pps))
        return case_error(c, FATTN_E_INVALID_ARG, "paged", "skv %" PRId64 " must be a multiple "
                          "of page_size and num_pages %" PRId64 " one >= b of its %" PRId64,
                          s->skv, s->num_pages, pps);
    return FATTN_OK;
}

/* Reading a row, by kind (parameters named apart from the members: s->b). */
#define P_ID(k, t, lo, hi, d)
#define P_REQ(k, t, lo, hi, d) TRY(get_int(c, obj, #k, lo, hi, &s->k));
#define P_INT(k, t, lo, hi, d)                                                                 \
    s->k = (d);                                                                                \
    TRY(get_int(c, obj, #k, lo, hi, &s->k));
#define P_NAME(k, t, parse, name, d)                                                           \
    {                                                                                          \
        const char *str_;                                                                      \
        TRY(get_string(c, obj, #k, &str_));                                                    \
        if (str_ && parse(str_, &s->k) != FATTN_OK)                                            \
            return name_error(c, #k);                                                          \
    }
#define P_BOOL(k, t, lo, hi, d) TRY(get_bool(c, obj, #k, &s->k));
#define P_FLAG(k, t, lo, hi, d) TRY(get_bool(c, obj, #k, &s->k));
#define P_PAIR(k, t, lo, hi, d) TRY(get_pair(c, obj, #k, lo, hi, &s->k##_set, s->k));
#define P_TRI(k, t, lo, hi, d) TRY(parse_tristate(c, obj, #k, &s->k));
#define P_REAL(k, t, lo, hi, d)                                                                \
    {                                                                                          \
        bool present_;                                                                         \
        TRY(get_number(c, obj, #k, false, &present_, &s->k));                                  \
    }
#define P_NREAL(k, t, lo, hi, d) TRY(get_number(c, obj, #k, true, &s->k##_set, &s->k));
#define P_LIST(k, t, lo, hi, d) TRY(get_list(c, obj, #k, s->b, lo, hi, &s->k));
#define P_FP8(k, t, lo, hi, d) TRY(parse_fp8(c, obj, s));
#define P_REFUSE(k, t, lo, hi, d) TRY(parse_expect_refusal(c, obj, s));
#define P_PAGED(k, t, lo, hi, d) TRY(parse_paged(c, obj, s));
#define POST_NONE(k)
#define POST_CHECK(k) TRY(spec_check_##k(c, s));
#define PARSE_ROW(key, kind, ctype, a, b, dflt, post) P_##kind(key, ctype, a, b, dflt) POST_##post(key)

/* Required keys, checked all before any is read. */
#define R_REQ(k)                                                                               \
    if (!json_object_get(obj, #k))                                                             \
        return case_error(c, FATTN_E_PARSE, #k, "missing (required)");
#define R_ID(k)
#define R_INT(k)
#define R_NAME(k)
#define R_BOOL(k)
#define R_FLAG(k)
#define R_PAIR(k)
#define R_TRI(k)
#define R_REAL(k)
#define R_NREAL(k)
#define R_LIST(k)
#define R_FP8(k)
#define R_REFUSE(k)
#define R_PAGED(k)
#define REQUIRED_ROW(key, kind, ctype, a, b, dflt, post) R_##kind(key)

static fattn_status unknown_key(const parse_ctx *c, const char *key)
{
    /* the valid keys, so that a typo is fixed without the docs */
    char list[400];
    size_t used = 0;
    for (size_t i = 0; i < N_SPEC_ROWS && used < sizeof list; i++) {
        int w = snprintf(list + used, sizeof list - used, "%s%s", i ? " " : "",
                         fattn_spec_key_name(i));
        used = w < 0 ? sizeof list : used + (size_t)w;
    }
    return case_error(c, FATTN_E_PARSE, key, "unknown key (keys: %s)", list);
}

static fattn_status parse_case_fields(parse_ctx *c, const json_t *obj, fattn_spec *s)
{
    if (!json_is_object(obj))
        return case_error(c, FATTN_E_PARSE, NULL, "expected an object, got %s",
                          json_type_name(obj));
    /* The id first, so that every later message names the case. */
    TRY(parse_id(c, obj, s));
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        bool known = false;
        for (size_t i = 0; i < N_SPEC_ROWS && !known; i++)
            known = strcmp(key, spec_rows[i]) == 0;
        if (!known)
            return unknown_key(c, key);
    }
    FATTN_SPEC_KEYS(REQUIRED_ROW)
    FATTN_SPEC_KEYS(PARSE_ROW)
    return FATTN_OK;
}

static fattn_status parse_case(parse_ctx *c, const json_t *obj, fattn_spec *s)
{
    fattn_spec_init(s);
    fattn_status st = parse_case_fields(c, obj, s);
    if (st != FATTN_OK)
        fattn_spec_free(s);
    return st;
}

static fattn_status load_json(const char *text, size_t len, const char *source, json_t **out)
{
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return fattn_error(FATTN_E_PARSE, "%s: line %d column %d: %s", source, err.line,
                           err.column, err.text);
    *out = root;
    return FATTN_OK;
}

static int cmp_spec_ptr_id(const void *a, const void *b)
{
    const fattn_spec *x = *(const fattn_spec *const *)a;
    const fattn_spec *y = *(const fattn_spec *const *)b;
    return strcmp(x->id, y->id);
}

static fattn_status check_unique_ids(const char *source, const fattn_spec_list *l)
{
    if (l->count < 2)
        return FATTN_OK;
    const fattn_spec **sorted = malloc(l->count * sizeof *sorted);
    if (!sorted)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory checking ids", source);
    for (size_t i = 0; i < l->count; i++)
        sorted[i] = &l->items[i];
    qsort(sorted, l->count, sizeof *sorted, cmp_spec_ptr_id);
    fattn_status st = FATTN_OK;
    for (size_t i = 1; i < l->count; i++) {
        if (strcmp(sorted[i - 1]->id, sorted[i]->id) == 0) {
            /* Name both positions, first occurrence first. */
            size_t a = (size_t)(sorted[i - 1] - l->items) + 1;
            size_t b = (size_t)(sorted[i] - l->items) + 1;
            assert(a != b && a <= l->count && b <= l->count);
            if (a > b) {
                size_t t = a;
                a = b;
                b = t;
            }
            st = fattn_error(FATTN_E_PARSE, "%s: case '%s' (#%zu): key 'id': duplicate of case #%zu",
                             source, sorted[i]->id, b, a);
            break;
        }
    }
    free(sorted);
    return st;
}

fattn_status fattn_spec_parse_json(const char *text, size_t len, const char *source,
                                   fattn_spec_list *out)
{
    out->items = NULL;
    out->count = 0;
    if (!source)
        source = "<spec>";
    json_t *root = NULL;
    TRY(load_json(text, len, source, &root));
    fattn_status st = FATTN_OK;
    if (!json_is_array(root)) {
        st = fattn_error(FATTN_E_PARSE, "%s: expected a JSON array of case objects, got %s",
                         source, json_type_name(root));
        goto done;
    }
    size_t n = json_array_size(root);
    if (n > 0) {
        out->items = calloc(n, sizeof *out->items);
        if (!out->items) {
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory for %zu cases", source, n);
            goto done;
        }
    }
    for (size_t i = 0; i < n; i++) {
        parse_ctx c = {source, i + 1, ""};
        assert(out->items);
        st = parse_case(&c, json_array_get(root, i), &out->items[i]);
        if (st != FATTN_OK)
            goto done;
        out->count = i + 1;
    }
    st = check_unique_ids(source, out);
done:
    json_decref(root);
    if (st != FATTN_OK)
        fattn_spec_list_free(out);
    return st;
}

fattn_status fattn_spec_parse_one(const char *text, size_t len, const char *source,
                                  fattn_spec *out)
{
    fattn_spec_init(out);
    if (!source)
        source = "<spec>";
    json_t *root = NULL;
    TRY(load_json(text, len, source, &root));
    parse_ctx c = {source, 0, ""};
    fattn_status st = parse_case(&c, root, out);
    json_decref(root);
    return st;
}

const char *fattn_spec_default_json(void) { return fattn_default_cases_json; }

fattn_status fattn_spec_load_default(fattn_spec_list *out)
{
    return fattn_spec_parse_json(fattn_default_cases_json, strlen(fattn_default_cases_json),
                                 "<default matrix>", out);
}


bool fattn_spec_matches_glob(const char *id, const char *glob)
{
    return fnmatch(glob, id, 0) == 0;
}
