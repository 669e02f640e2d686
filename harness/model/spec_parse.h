/* The spec parser's parts, private to model/: the parse context, the typed
 * getters every key's row uses (spec_parse.c), the parsers of the keys
 * whose value is an object and the checks of the CHECK rows
 * (spec_objects.c). spec.c reads the rows of FH_SPEC_KEYS with them.
 *
 * A getter reads member `key` of case object `obj`; a missing member (and,
 * where it says so, null) leaves *out as it was, so that the row's default
 * stands. Every refusal names the source, the case (id and position) and
 * the key, through spec_case_error. A new key of an object shape gets its
 * parser here (spec_parse_<key>) and its P_ macro in spec.c.
 */
#ifndef FH_HARNESS_SPEC_PARSE_H
#define FH_HARNESS_SPEC_PARSE_H

#include <jansson.h>

#include "spec.h"

typedef struct spec_parse_ctx {
    const char *source;
    size_t index;   /* 1-based position in the array; 0 for a lone object */
    const char *id; /* "" until known */
} spec_parse_ctx;

/* fattn_error(st, ...) with "<source>: case '<id>' (#<index>): key '<key>':
 * <detail>" (no key part when key is NULL). Returns st. */
fattn_status spec_case_error(const spec_parse_ctx *c, fattn_status st, const char *key,
                             const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* "an integer", "null", ...: how a refusal names what it found. */
const char *spec_json_type(const json_t *v);

/* An integer in [lo, hi]. */
fattn_status spec_get_int(const spec_parse_ctx *c, const json_t *obj, const char *key,
                          int64_t lo, int64_t hi, int64_t *out);
fattn_status spec_get_bool(const spec_parse_ctx *c, const json_t *obj, const char *key,
                           bool *out);
/* A finite number as a double; *present false when missing or (nullable)
 * null. */
fattn_status spec_get_number(const spec_parse_ctx *c, const json_t *obj, const char *key,
                             bool nullable, bool *present, double *out);
/* A string; *out NULL when missing (it points into obj). */
fattn_status spec_get_string(const spec_parse_ctx *c, const json_t *obj, const char *key,
                             const char **out);
/* null or [left, right], each in [lo, hi]; *set false for null. */
fattn_status spec_get_pair(const spec_parse_ctx *c, const json_t *obj, const char *key,
                           int64_t lo, int64_t hi, bool *set, int64_t out[2]);
/* null, true or false. */
fattn_status spec_get_tristate(const spec_parse_ctx *c, const json_t *obj, const char *key,
                               fh_tristate *out);
/* null or exactly b integers in [lo, hi]; *out malloc'd, the caller's. */
fattn_status spec_get_list(const spec_parse_ctx *c, const json_t *obj, const char *key,
                           int64_t b, int64_t lo, int64_t hi, int64_t **out);

/* The object-valued keys (spec.h describes their members). */
fattn_status spec_parse_fp8(const spec_parse_ctx *c, const json_t *obj, fh_spec *s);
fattn_status spec_parse_expect_refusal(const spec_parse_ctx *c, const json_t *obj,
                                       fh_spec *s);
fattn_status spec_parse_paged(const spec_parse_ctx *c, const json_t *obj, fh_spec *s);
fattn_status spec_parse_cp(const spec_parse_ctx *c, const json_t *obj, fh_spec *s);
/* spec_schedule.c */
fattn_status spec_parse_schedule(const spec_parse_ctx *c, const json_t *obj, fh_spec *s);

/* The CHECK rows' checks (spec_keys.h), run once the row is read. */
fattn_status spec_check_hg(const spec_parse_ctx *c, const fh_spec *s);
fattn_status spec_check_d_v(const spec_parse_ctx *c, const fh_spec *s);
fattn_status spec_check_dropout_p(const spec_parse_ctx *c, const fh_spec *s);
fattn_status spec_check_attn_scale(const spec_parse_ctx *c, const fh_spec *s);
fattn_status spec_check_bias_no_grad(const spec_parse_ctx *c, const fh_spec *s);
fattn_status spec_check_paged(const spec_parse_ctx *c, fh_spec *s);
fattn_status spec_check_schedule(const spec_parse_ctx *c, fh_spec *s);

#endif /* FH_HARNESS_SPEC_PARSE_H */
