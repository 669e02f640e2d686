/* The spec parser's typed getters (spec_parse.h): each reads one JSON
 * member of a case object and names the case, the key and the cause of a
 * refusal. Shared by the row parser (spec.c) and the object-valued keys
 * (spec_objects.c). */
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

fattn_status spec_case_error(const spec_parse_ctx *c, fattn_status st, const char *key,
                             const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    char where[FH_SPEC_ID_MAX + 64];
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

const char *spec_json_type(const json_t *v)
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

fattn_status spec_get_int(const spec_parse_ctx *c, const json_t *obj, const char *key,
                          int64_t lo, int64_t hi, int64_t *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return FATTN_OK;
    if (!json_is_integer(v))
        return spec_case_error(c, FATTN_E_PARSE, key, "expected an integer, got %s",
                               spec_json_type(v));
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return spec_case_error(c, FATTN_E_INVALID_ARG, key,
                               "%" JSON_INTEGER_FORMAT " out of range [%" PRId64 ", %" PRId64
                               "]", x, lo, hi);
    *out = (int64_t)x;
    return FATTN_OK;
}

fattn_status spec_get_bool(const spec_parse_ctx *c, const json_t *obj, const char *key, bool *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return FATTN_OK;
    if (!json_is_boolean(v))
        return spec_case_error(c, FATTN_E_PARSE, key, "expected true or false, got %s",
                               spec_json_type(v));
    *out = json_is_true(v);
    return FATTN_OK;
}

/* A number (integer or real) as a double; *present false for a missing key
 * or (when nullable) null. */
fattn_status spec_get_number(const spec_parse_ctx *c, const json_t *obj, const char *key,
                             bool nullable, bool *present, double *out)
{
    const json_t *v = json_object_get(obj, key);
    *present = false;
    if (!v || (nullable && json_is_null(v)))
        return FATTN_OK;
    if (!json_is_number(v))
        return spec_case_error(c, FATTN_E_PARSE, key, "expected %sa number, got %s",
                               nullable ? "null or " : "", spec_json_type(v));
    double x = json_number_value(v);
    if (!isfinite(x))
        return spec_case_error(c, FATTN_E_INVALID_ARG, key, "not a finite number");
    *present = true;
    *out = x;
    return FATTN_OK;
}

/* A string key; *out NULL when the key is missing. */
fattn_status spec_get_string(const spec_parse_ctx *c, const json_t *obj, const char *key,
                             const char **out)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v)
        return FATTN_OK;
    if (!json_is_string(v))
        return spec_case_error(c, FATTN_E_PARSE, key, "expected a string, got %s",
                               spec_json_type(v));
    *out = json_string_value(v);
    return FATTN_OK;
}

/* null or [left, right], each in [lo, hi]; *set false for null. */
fattn_status spec_get_pair(const spec_parse_ctx *c, const json_t *obj, const char *key,
                           int64_t lo, int64_t hi, bool *set, int64_t out[2])
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_array(v) || json_array_size(v) != 2)
        return spec_case_error(c, FATTN_E_PARSE, key,
                               "expected null or [left, right], got %s%s", spec_json_type(v),
                               json_is_array(v) ? " of the wrong length" : "");
    for (size_t i = 0; i < 2; i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_integer(e))
            return spec_case_error(c, FATTN_E_PARSE, key,
                                   "element %zu: expected an integer, got %s", i,
                                   spec_json_type(e));
        json_int_t x = json_integer_value(e);
        if (x < lo || x > hi)
            return spec_case_error(c, FATTN_E_INVALID_ARG, key,
                                   "element %zu: %" JSON_INTEGER_FORMAT
                                   " does not fit in int32", i, x);
        out[i] = (int64_t)x;
    }
    *set = true;
    return FATTN_OK;
}

fattn_status spec_get_tristate(const spec_parse_ctx *c, const json_t *obj, const char *key,
                               fh_tristate *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_boolean(v))
        return spec_case_error(c, FATTN_E_PARSE, key, "expected null, true or false, got %s",
                               spec_json_type(v));
    *out = json_is_true(v) ? FH_TRISTATE_TRUE : FH_TRISTATE_FALSE;
    return FATTN_OK;
}

/* null or a list of exactly b integers in [lo, hi] (malloc'd). */
fattn_status spec_get_list(const spec_parse_ctx *c, const json_t *obj, const char *key, int64_t b,
                           int64_t lo, int64_t hi, int64_t **out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_array(v))
        return spec_case_error(c, FATTN_E_PARSE, key, "expected null or a list of integers, got %s",
                               spec_json_type(v));
    if ((int64_t)json_array_size(v) != b)
        return spec_case_error(c, FATTN_E_INVALID_ARG, key,
                               "has %zu entries, expected b = %" PRId64, json_array_size(v), b);
    int64_t *list = malloc((size_t)b * sizeof *list);
    if (!list)
        return spec_case_error(c, FATTN_E_NOMEM, key, "out of memory");
    for (int64_t i = 0; i < b; i++) {
        const json_t *e = json_array_get(v, (size_t)i);
        if (!json_is_integer(e)) {
            free(list);
            return spec_case_error(c, FATTN_E_PARSE, key,
                                   "element %" PRId64 ": expected an integer, got %s", i,
                                   spec_json_type(e));
        }
        json_int_t x = json_integer_value(e);
        if (x < lo || x > hi) {
            free(list);
            return spec_case_error(c, FATTN_E_INVALID_ARG, key,
                                   "element %" PRId64 ": %" JSON_INTEGER_FORMAT
                              " out of range [%" PRId64 ", %" PRId64 "]",
                              i, x, lo, hi);
        }
        list[i] = (int64_t)x;
    }
    *out = list;
    return FATTN_OK;
}

