/* harness/check/contrast.h — what separates the failing cases from the
 * passing ones, as one rule over their features (model/case_features.h;
 * docs/verify.md, "The contrast").
 *
 * The rule, small on purpose so that a reader can check it by hand:
 *   1. For each feature k, S_k is the set of values the failing cases have;
 *      "k in S_k" holds for every failing case, and the passing cases that
 *      hold it too are its misses. A feature whose S_k holds for every
 *      passing case says nothing and is not a candidate.
 *   2. Pick the candidate with the fewest misses (ties: the feature order
 *      of case_features.h, the mask first).
 *   3. If it has misses, add the second condition "k2 in S_k2" that leaves
 *      the fewest of them (ties as before), when it leaves fewer.
 * The text names the condition, how many passing cases hold it too, and
 * the values of the first feature that only passing cases have.
 * Skipped cases and expected refusals are neither failing nor passing.
 */
#ifndef FH_HARNESS_CONTRAST_H
#define FH_HARNESS_CONTRAST_H

#include <stddef.h>

#include "case_features.h"
#include "spec.h"

typedef enum fh_contrast_outcome {
    FH_CONTRAST_NONE = 0, /* not counted (skipped, refused as expected) */
    FH_CONTRAST_PASS,
    FH_CONTRAST_FAIL,
} fh_contrast_outcome;

/* The most values of a feature a condition names in full. */
#define FH_CONTRAST_VALUES_SHOWN 8

typedef struct fh_contrast {
    size_t failing, passing;
    int n_keys;                     /* conditions: 0 (none found), 1 or 2 */
    fh_feature keys[2];
    size_t misses;                  /* passing cases that hold the conditions */
    char text[2048];                /* "" when fewer than 2 failing or no passing */
} fh_contrast;

/* The contrast of the cases specs[0..n) with their outcomes. An error:
 * out of memory, or a spec that does not resolve. */
fattn_status fh_contrast_of(const fh_spec *const *specs, const fh_contrast_outcome *o,
                               size_t n, fh_contrast *out);

/* The same over features already made (tools and tests). */
fattn_status fh_contrast_of_features(const fh_case_features *f,
                                        const fh_contrast_outcome *o, size_t n,
                                        fh_contrast *out);

#endif /* FH_HARNESS_CONTRAST_H */
