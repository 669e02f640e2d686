/* harness/check/tolerance.h — tolerance profiles for the within-tolerance
 * comparisons of `fattn diff --mode tol` and of verify against CPU goldens
 * (docs/diff.md: the profile file format; tolerances/).
 *
 * A float element a passes against the reference b when
 * |a - b| <= atol + rtol * |b|.
 */
#ifndef FH_HARNESS_TOLERANCE_H
#define FH_HARNESS_TOLERANCE_H

#include <stdbool.h>
#include <stddef.h>

#include "fattn/dtype.h"
#include "fattn/status.h"

typedef struct fh_tol {
    double rtol, atol;
} fh_tol;

typedef struct fh_tol_rule {
    char *glob; /* fnmatch(3) over the dataset path, '*' crosses '/' */
    fh_tol tol;
} fh_tol_rule;

/* A versioned per-dtype tolerance profile plus per-path rules (the last
 * matching rule wins over the dtype default). Integer dtypes are always
 * compared exactly. */
typedef struct fh_tol_profile {
    char version[128];
    fh_tol dtype[FATTN_DTYPE_COUNT];
    bool have[FATTN_DTYPE_COUNT];
    fh_tol_rule *rules;
    size_t n_rules, cap_rules;
} fh_tol_profile;

#define FH_TOL_BUILTIN_VERSION "fattn-tol/1 (TransformerEngine test_attention)"

/* The built-in profile: float32 (1.3e-6, 1e-5), float16 (1e-3, 1e-3),
 * bfloat16 (1.5e-2, 1.5e-2), e4m3fn (0.125, 0.0675), e5m2 (0.25, 0.125)
 * as (rtol, atol). */
void fh_tol_profile_builtin(fh_tol_profile *p);
/* Replace p by a JSON profile file (docs/diff.md; tolerances/). */
fattn_status fh_tol_profile_load(const char *path, fh_tol_profile *p);
/* Append a rule "GLOB=RTOL,ATOL" (as --tol gives it). */
fattn_status fh_tol_profile_add_rule(fh_tol_profile *p, const char *spec);
/* The tolerance for a float dataset at `path`. */
fh_tol fh_tol_profile_lookup(const fh_tol_profile *p, const char *path,
                                   fattn_dtype dtype);
void fh_tol_profile_free(fh_tol_profile *p);

#endif /* FH_HARNESS_TOLERANCE_H */
