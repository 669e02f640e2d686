/* harness/model/case_features.h — a resolved case as a few named features, what
 * the cross-case contrast compares failing and passing cases by
 * (harness/check/contrast.h; docs/verify.md, "The contrast").
 *
 * Each feature is one value, written as text, of what decides how the case
 * runs, in a fixed order (the contrast's tie-break):
 *   mask        the mask as the engine applies it: the spec's mask, with
 *               "+window(l,r)" when the normalised window is a sliding one
 *               (neither (-1,-1) nor (-1,0)): TE's window is part of its mask
 *   window      the normalised window "(l,r)" alone
 *   training    "yes" / "no"
 *   layout, layout_group, q_format, dtype, bias, softmax
 *   fp8         the recipe, "none" without FP8
 *   fp8_input, fp8_output   "yes" / "no" (FP8 inputs handed in, an FP8 O)
 *   dropout     "yes" / "no" (a dropout the run applies)
 *   heads       "mha" (hg = h), "gqa", "mqa" (hg = 1)
 *   head_dims   "equal" / "unequal" (d_qk, d_v)
 *   lengths     "sq=skv", "sq<skv", "sq>skv"
 *   padding     "yes" / "no" (padded cu_seqlens: a padding mask or THD)
 *   max_logit, deterministic, paged, raw_func_args   "yes" / "no"
 *   grad_mode   "grad", "no_grad", "inference_mode" (the forward's)
 *   max_batch_size   "yes" / "no" (TE's InferenceParams holds the cache)
 * `fattn cases --resolved --json` lists them per case ("features"), so
 * that tools that compute the contrast (tools/te) see the same values.
 */
#ifndef FH_HARNESS_CASE_FEATURES_H
#define FH_HARNESS_CASE_FEATURES_H

#include "case.h"

#define FH_FEATURES(X)                                                                         \
    X(mask) X(window) X(training) X(layout) X(layout_group) X(q_format) X(dtype) X(bias)      \
    X(softmax) X(fp8) X(fp8_input) X(fp8_output) X(dropout) X(heads) X(head_dims) X(lengths) X(padding) X(max_logit)      \
    X(deterministic) X(paged) X(raw_func_args) X(grad_mode) X(max_batch_size)

typedef enum fh_feature {
#define FH_FEATURE_ENUM(name) FH_FEATURE_##name,
    FH_FEATURES(FH_FEATURE_ENUM)
#undef FH_FEATURE_ENUM
    FH_FEATURE_COUNT
} fh_feature;

#define FH_FEATURE_LEN 48

typedef struct fh_case_features {
    char v[FH_FEATURE_COUNT][FH_FEATURE_LEN];
} fh_case_features;

/* The feature's name ("mask", ...). */
const char *fh_feature_name(fh_feature f);
/* The features of a resolved case. */
void fh_case_features_of(const fh_case *c, fh_case_features *out);

#endif /* FH_HARNESS_CASE_FEATURES_H */
