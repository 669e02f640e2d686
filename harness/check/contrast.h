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
#ifndef FATTN_HARNESS_CONTRAST_H
#define FATTN_HARNESS_CONTRAST_H

#include <stddef.h>

#include "case_features.h"
#include "spec.h"

typedef enum fattn_contrast_outcome {
    FATTN_CONTRAST_NONE = 0, /* not counted (skipped, refused as expected) */
    FATTN_CONTRAST_PASS,
    FATTN_CONTRAST_FAIL,
} fattn_contrast_outcome;

/* The most values of a feature a condition names in full. */
#define FATTN_CONTRAST_VALUES_SHOWN 8

typedef struct fattn_contrast {
    size_t failing, passing;
    int n_keys;                     /* conditions: 0 (none found), 1 or 2 */
    fattn_feature keys[2];
    size_t misses;                  /* passing cases that hold the conditions */
    char text[2048];                /* "" when fewer than 2 failing or no passing */
} fattn_contrast;

/* The contrast of the cases specs[0..n) with their outcomes. An error:
 * out of memory, or a spec that does not resolve. */
fattn_status fattn_contrast_of(const fattn_spec *const *specs, const fattn_contrast_outcome *o,
                               size_t n, fattn_contrast *out);

/* The same over features already made (tools and tests). */
fattn_status fattn_contrast_of_features(const fattn_case_features *f,
                                        const fattn_contrast_outcome *o, size_t n,
                                        fattn_contrast *out);

#endif /* FATTN_HARNESS_CONTRAST_H */
