/* Case specs: JSON parsing with named errors, defaults, equality, from the
 * rows of FH_SPEC_KEYS (spec_keys.h). The canonical writer, reading a spec
 * file and the summary are in spec_text.c. See spec.h for the keys. */
#include "spec.h"
#include "spec_parse.h"

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

#include "schedule.h"
#include "try.h"

/* Generated at build time from golden/default_cases.json (tools/build/embed.py). */
extern const char fh_default_cases_json[];

/* ------------------------------------------------------------------------ */
/* Names                                                                    */
/* ------------------------------------------------------------------------ */

static const char *const bias_shape_names[] = {"1hss", "b1ss", "bhss", "11ss", "111s"};
#define N_BIAS_SHAPES (sizeof bias_shape_names / sizeof bias_shape_names[0])

const char *fh_bias_shape_name(fh_bias_shape s)
{
    if ((unsigned)s >= N_BIAS_SHAPES)
        return NULL;
    return bias_shape_names[s];
}

fattn_status fh_bias_shape_parse(const char *s, fh_bias_shape *out)
{
    for (size_t i = 0; s && i < N_BIAS_SHAPES; i++) {
        if (strcmp(s, bias_shape_names[i]) == 0) {
            *out = (fh_bias_shape)i;
            return FATTN_OK;
        }
    }
    return fattn_error(FATTN_E_PARSE,
                       "unknown bias_shape \"%s\" (valid: 1hss, b1ss, bhss, 11ss, 111s)",
                       s ? s : "(null)");
}

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
/* Init, free, copy, equal: by kind, from FH_SPEC_KEYS                    */
/* ------------------------------------------------------------------------ */

/* Defaults. memset gives the rest: required integers 0, FLAG false, PAIR
 * and NREAL unset (null), TRI FH_TRISTATE_NULL, REFUSE off, id "". INT
 * rows whose default names another row (hg = h) get it again when parsed. */
#define I_ID(k, d)
#define I_REQ(k, d)
#define I_INT(k, d) s->k = (d);
#define I_NAME(k, d) s->k = (d);
#define I_BOOL(k, d) s->k = (d);
#define I_FLAG(k, d)
#define I_OINT(k, d)
#define I_PAIR(k, d)
#define I_TRI(k, d)
#define I_REAL(k, d) s->k = (d);
#define I_NREAL(k, d)
#define I_LIST(k, d) s->k = NULL;
#define I_FP8(k, d)                                                                            \
    s->fp8_recipe = FATTN_FP8_RECIPE_DELAYED;                                                  \
    s->fp8_dpa_bwd = true;                                                                     \
    s->fp8_o_in_f16 = true;                                                                    \
    s->fp8_amax_history_len = FH_SPEC_FP8_HISTORY_DEFAULT;                                     \
    s->fp8_reduce_amax = true;                                                                 \
    s->fp8_amax_algo = FATTN_FP8_AMAX_MAX;
#define I_REFUSE(k, d)
#define I_PAGED(k, d)
#define I_CP(k, d)
#define I_SCHED(k, d)
#define INIT_ROW(key, kind, ctype, a, b, dflt, post) I_##kind(key, dflt)

void fh_spec_init(fh_spec *s)
{
    memset(s, 0, sizeof *s);
    _Static_assert(FH_TRISTATE_NULL == 0, "memset makes a null tristate");
    FH_SPEC_KEYS(INIT_ROW)
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
#define OWNED_OINT(k)
#define OWNED_PAIR(k)
#define OWNED_TRI(k)
#define OWNED_REAL(k)
#define OWNED_NREAL(k)
#define OWNED_FP8(k)
#define OWNED_REFUSE(k)
#define OWNED_PAGED(k)
#define OWNED_CP(k)
#define OWNED_SCHED(k)

static void free_lists(fh_spec *s)
{
#define OWNED(k) free(s->k);
    FH_SPEC_KEYS(OWNED_ROW)
#undef OWNED
    fh_schedule_free(s->schedule);
}

void fh_spec_free(fh_spec *s)
{
    if (!s)
        return;
    free_lists(s);
    fh_spec_init(s);
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

fattn_status fh_spec_copy(fh_spec *dst, const fh_spec *src)
{
    *dst = *src;
    bool oom = false;
#define OWNED(k)                                                                               \
    dst->k = dup_list(src->k, src->b);                                                         \
    oom = oom || (src->k && !dst->k);
    FH_SPEC_KEYS(OWNED_ROW)
#undef OWNED
    dst->schedule = NULL;
    oom = oom || fh_schedule_copy(src->schedule, &dst->schedule) != FATTN_OK;
    if (oom) {
        free_lists(dst);
        fh_spec_init(dst);
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
#define E_OINT(k) (x->k == y->k)
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
                  x->fp8_o_in_f16 == y->fp8_o_in_f16 && x->bf16_backward == y->bf16_backward &&   \
                  x->fp8_amax_history_len == y->fp8_amax_history_len &&                         \
                  x->fp8_amax_algo == y->fp8_amax_algo && x->fp8_margin == y->fp8_margin &&     \
                  x->fp8_reduce_amax == y->fp8_reduce_amax)))
#define E_REFUSE(k)                                                                            \
    (x->expect_refusal == y->expect_refusal &&                                                 \
     (!x->expect_refusal || (x->refusal_status == y->refusal_status &&                         \
                             strcmp(x->refusal_rule, y->refusal_rule) == 0)))
#define E_PAGED(k)                                                                             \
    (x->paged == y->paged && (!x->paged || (x->page_size == y->page_size &&                    \
     x->num_pages == y->num_pages && x->paged_separate_v == y->paged_separate_v)))
#define E_CP(k)                                                                                \
    (x->cp == y->cp && (!x->cp || (x->cp_size == y->cp_size && x->cp_comm == y->cp_comm &&     \
                                   x->cp_balance == y->cp_balance)))
#define E_SCHED(k) fh_schedule_equal(x->schedule, y->schedule)
#define EQ_ROW(key, kind, ctype, a, b, dflt, post) &&E_##kind(key)

bool fh_spec_equal(const fh_spec *x, const fh_spec *y)
{
    return true FH_SPEC_KEYS(EQ_ROW);
}

void fh_spec_list_free(fh_spec_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->count; i++)
        fh_spec_free(&l->items[i]);
    free(l->items);
    l->items = NULL;
    l->count = 0;
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                  */
/* ------------------------------------------------------------------------ */

/* The keys in the rows' order; fh_spec_key_name gives them sorted. */
#define KEY_NAME_ROW(key, kind, ctype, a, b, dflt, post) #key,
static const char *const spec_rows[] = {FH_SPEC_KEYS(KEY_NAME_ROW)};
#define N_SPEC_ROWS (sizeof spec_rows / sizeof spec_rows[0])

size_t fh_spec_key_count(void) { return N_SPEC_ROWS; }

/* The i-th key in sorted order: the one that i keys sort before. */
const char *fh_spec_key_name(size_t i)
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

/* A name its parser refused: the parser's message (which lists the valid
 * names) under the case and key. */
static fattn_status name_error(const spec_parse_ctx *c, const char *key)
{
    char why[512];
    snprintf(why, sizeof why, "%s", fattn_last_error());
    return spec_case_error(c, FATTN_E_PARSE, key, "%s", why);
}

static bool id_char_ok(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
}

static fattn_status parse_id(spec_parse_ctx *c, const json_t *obj, fh_spec *s)
{
    const json_t *v = json_object_get(obj, "id");
    if (!v)
        return spec_case_error(c, FATTN_E_PARSE, "id", "missing (required)");
    if (!json_is_string(v))
        return spec_case_error(c, FATTN_E_PARSE, "id", "expected a string, got %s",
                               spec_json_type(v));
    const char *id = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0)
        return spec_case_error(c, FATTN_E_PARSE, "id", "empty");
    if (n > FH_SPEC_ID_MAX)
        return spec_case_error(c, FATTN_E_PARSE, "id", "longer than %d characters",
                               FH_SPEC_ID_MAX);
    for (size_t i = 0; i < n; i++) {
        if (!id_char_ok(id[i]))
            return spec_case_error(c, FATTN_E_PARSE, "id",
                                   "character %zu (byte 0x%02x) is not one of [A-Za-z0-9._-]", i,
                                   (unsigned)(unsigned char)id[i]);
    }
    if (strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
        return spec_case_error(c, FATTN_E_PARSE, "id", "\"%s\" cannot name a group", id);
    memcpy(s->id, id, n + 1);
    c->id = s->id;
    return FATTN_OK;
}

int64_t fh_spec_rng_increment(const fh_spec *s)
{
    if (!s->fp8)
        return FATTN_RNG_F16_INCREMENT;
    /* fused_attn.py:356-364: ceil(sq^2 / 128) per thread on the FP8
     * backend, which philox_cuda_state rounds up to a multiple of 4. */
    int64_t n = (s->sq * s->sq + 127) / 128;
    return (n + 3) / 4 * 4;
}

int64_t fh_spec_steps(const fh_spec *s)
{
    return s->schedule ? s->schedule->n : 0;
}

int64_t fh_spec_rng_advance(const fh_spec *s)
{
    int64_t f = fh_schedule_forwards(s->schedule);
    /* <= 4096 forwards of <= 2^46 each (sq <= 2^24): no overflow */
    return fh_spec_rng_increment(s) * (f > 1 ? f : 1);
}

bool fh_spec_refusal_status(fattn_status st)
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

/* Reading a row, by kind (parameters named apart from the members: s->b). */
#define P_ID(k, t, lo, hi, d)
#define P_REQ(k, t, lo, hi, d) TRY(spec_get_int(c, obj, #k, lo, hi, &s->k));
#define P_INT(k, t, lo, hi, d)                                                                 \
    s->k = (d);                                                                                \
    TRY(spec_get_int(c, obj, #k, lo, hi, &s->k));
#define P_NAME(k, t, parse, name, d)                                                           \
    {                                                                                          \
        const char *str_;                                                                      \
        TRY(spec_get_string(c, obj, #k, &str_));                                                   \
        if (str_ && parse(str_, &s->k) != FATTN_OK)                                            \
            return name_error(c, #k);                                                          \
    }
#define P_BOOL(k, t, lo, hi, d) TRY(spec_get_bool(c, obj, #k, &s->k));
#define P_FLAG(k, t, lo, hi, d) TRY(spec_get_bool(c, obj, #k, &s->k));
#define P_OINT(k, t, lo, hi, d) TRY(spec_get_int(c, obj, #k, lo, hi, &s->k));
#define P_PAIR(k, t, lo, hi, d) TRY(spec_get_pair(c, obj, #k, lo, hi, &s->k##_set, s->k));
#define P_TRI(k, t, lo, hi, d) TRY(spec_get_tristate(c, obj, #k, &s->k));
#define P_REAL(k, t, lo, hi, d)                                                                \
    {                                                                                          \
        bool present_;                                                                         \
        TRY(spec_get_number(c, obj, #k, false, &present_, &s->k));                                 \
    }
#define P_NREAL(k, t, lo, hi, d) TRY(spec_get_number(c, obj, #k, true, &s->k##_set, &s->k));
#define P_LIST(k, t, lo, hi, d) TRY(spec_get_list(c, obj, #k, s->b, lo, hi, &s->k));
#define P_FP8(k, t, lo, hi, d) TRY(spec_parse_fp8(c, obj, s));
#define P_REFUSE(k, t, lo, hi, d) TRY(spec_parse_expect_refusal(c, obj, s));
#define P_PAGED(k, t, lo, hi, d) TRY(spec_parse_paged(c, obj, s));
#define P_CP(k, t, lo, hi, d) TRY(spec_parse_cp(c, obj, s));
#define P_SCHED(k, t, lo, hi, d) TRY(spec_parse_schedule(c, obj, s));
#define POST_NONE(k)
#define POST_CHECK(k) TRY(spec_check_##k(c, s));
#define PARSE_ROW(key, kind, ctype, a, b, dflt, post) P_##kind(key, ctype, a, b, dflt) POST_##post(key)

/* Required keys, checked all before any is read. */
#define R_REQ(k)                                                                               \
    if (!json_object_get(obj, #k))                                                             \
        return spec_case_error(c, FATTN_E_PARSE, #k, "missing (required)");
#define R_ID(k)
#define R_INT(k)
#define R_NAME(k)
#define R_BOOL(k)
#define R_FLAG(k)
#define R_OINT(k)
#define R_PAIR(k)
#define R_TRI(k)
#define R_REAL(k)
#define R_NREAL(k)
#define R_LIST(k)
#define R_FP8(k)
#define R_REFUSE(k)
#define R_PAGED(k)
#define R_CP(k)
#define R_SCHED(k)
#define REQUIRED_ROW(key, kind, ctype, a, b, dflt, post) R_##kind(key)

static fattn_status unknown_key(const spec_parse_ctx *c, const char *key)
{
    /* the valid keys, so that a typo is fixed without the docs */
    char list[400];
    size_t used = 0;
    for (size_t i = 0; i < N_SPEC_ROWS && used < sizeof list; i++) {
        int w = snprintf(list + used, sizeof list - used, "%s%s", i ? " " : "",
                         fh_spec_key_name(i));
        used = w < 0 ? sizeof list : used + (size_t)w;
    }
    return spec_case_error(c, FATTN_E_PARSE, key, "unknown key (keys: %s)", list);
}

static fattn_status parse_case_fields(spec_parse_ctx *c, const json_t *obj, fh_spec *s)
{
    if (!json_is_object(obj))
        return spec_case_error(c, FATTN_E_PARSE, NULL, "expected an object, got %s",
                               spec_json_type(obj));
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
    FH_SPEC_KEYS(REQUIRED_ROW)
    FH_SPEC_KEYS(PARSE_ROW)
    return FATTN_OK;
}

static fattn_status parse_case(spec_parse_ctx *c, const json_t *obj, fh_spec *s)
{
    fh_spec_init(s);
    fattn_status st = parse_case_fields(c, obj, s);
    if (st != FATTN_OK)
        fh_spec_free(s);
    return st;
}

static fattn_status load_json(const char *text, size_t len, const char *source, json_t **out)
{
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    /* jansson gives every syntax error a message; a failed allocation mostly
     * leaves none (and sets no error code), so an empty message is memory */
    if (!root && !err.text[0])
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory parsing JSON", source);
    if (!root)
        return fattn_error(FATTN_E_PARSE, "%s: line %d column %d: %s", source, err.line,
                           err.column, err.text);
    *out = root;
    return FATTN_OK;
}

static int cmp_spec_ptr_id(const void *a, const void *b)
{
    const fh_spec *x = *(const fh_spec *const *)a;
    const fh_spec *y = *(const fh_spec *const *)b;
    return strcmp(x->id, y->id);
}

static fattn_status check_unique_ids(const char *source, const fh_spec_list *l)
{
    if (l->count < 2)
        return FATTN_OK;
    const fh_spec **sorted = malloc(l->count * sizeof *sorted);
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

fattn_status fh_spec_parse_json(const char *text, size_t len, const char *source,
                                   fh_spec_list *out)
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
                         source, spec_json_type(root));
        goto out;
    }
    size_t n = json_array_size(root);
    if (n > 0) {
        out->items = calloc(n, sizeof *out->items);
        if (!out->items) {
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory for %zu cases", source, n);
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        spec_parse_ctx c = {source, i + 1, ""};
        assert(out->items);
        st = parse_case(&c, json_array_get(root, i), &out->items[i]);
        if (st != FATTN_OK)
            goto out;
        out->count = i + 1;
    }
    st = check_unique_ids(source, out);
out:
    json_decref(root);
    if (st != FATTN_OK)
        fh_spec_list_free(out);
    return st;
}

fattn_status fh_spec_parse_one(const char *text, size_t len, const char *source,
                                  fh_spec *out)
{
    fh_spec_init(out);
    if (!source)
        source = "<spec>";
    json_t *root = NULL;
    TRY(load_json(text, len, source, &root));
    spec_parse_ctx c = {source, 0, ""};
    fattn_status st = parse_case(&c, root, out);
    json_decref(root);
    return st;
}

const char *fh_spec_default_json(void) { return fh_default_cases_json; }

fattn_status fh_spec_load_default(fh_spec_list *out)
{
    return fh_spec_parse_json(fh_default_cases_json, strlen(fh_default_cases_json),
                                 "<default matrix>", out);
}


bool fh_spec_matches_glob(const char *id, const char *glob)
{
    return fnmatch(glob, id, 0) == 0;
}
