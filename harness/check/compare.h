/* Bitwise comparison of recorded case trees (the checks of `fattn verify`),
 * as visitors of the two-tree walk (treewalk.h) over in-memory trees.
 *
 * Two case groups are equal when every group, dataset and attribute outside
 * `_impl` groups is present on both sides with the same dtype, shape and
 * bytes (datasets) or the same value (attributes; `digest` is derived and
 * never compared as an attribute). A golden may keep a tensor as digest
 * only: no dataset, an attribute `digest:<name>` on its state group, which
 * is compared with the other side's digest of that dataset.
 */
#ifndef FH_HARNESS_COMPARE_H
#define FH_HARNESS_COMPARE_H

#include <stddef.h>

#include "h5io.h"
#include "tolerance.h"

#define FH_COMPARE_MAX_REPORTED 8
#define FH_COMPARE_DETAIL_LEN 512

/* One difference in full (fh_compare_result.keep_all). */
typedef struct fh_compare_diff {
    char *path;   /* below the case group: "backward/dq", "save_ctx@window_size" */
    char *why;    /* "1982 of 2048 elements differ", "attribute values differ", ... */
    char *a, *b;  /* an attribute's value on each side as text, NULL where absent
                   * (both NULL: not an attribute) */
    bool tensor;  /* a dataset or digest-only tensor (else an attribute, group, state) */
} fh_compare_diff;

typedef struct fh_compare_result {
    size_t tensors;     /* datasets (and digest-only tensors) compared */
    size_t differences; /* objects that differ, are missing or are extra */
    /* Input: datasets (paths relative to the case group, e.g.
     * "backward/d_softmax_offset") that are non-deterministic by construction
     * on the engine (docs/determinism.md): compared within `noisy_tol`
     * instead of bitwise. NULL-terminated; NULL = none. */
    const char *const *noisy;
    double noisy_rtol, noisy_atol;
    size_t noisy_within; /* noisy datasets that differed within the bound */
    /* Input: B is a replay. A replay hands the engine views of the run
     * file's tensors, which are stored contiguous: an engine-call tensor
     * (engine_call.h) from a recorded state (inputs/, forward/, save_ctx/)
     * is then compared without its strides, which are the file's and not
     * the front end's views (a packed layout's q, k, v). */
    bool replay;
    /* the first differing paths (relative to the case group) with why */
    char paths[FH_COMPARE_MAX_REPORTED][192];
    char why[FH_COMPARE_MAX_REPORTED][160];
    /* For the first dataset whose elements differ (detail_path): where and
     * by how much, as a person acts on it — the first differing element's
     * index and both values (decimal and hex bits), then max abs and rel
     * error and max ULP over the tensor (floats). Empty until one differs. */
    char detail_path[256];
    char detail[FH_COMPARE_DETAIL_LEN];
    /* Input: keep every difference, with attribute values, in all[0..n_all)
     * as well (then free with fh_compare_result_free); paths/why above
     * keep the first FH_COMPARE_MAX_REPORTED either way. */
    bool keep_all;
    fh_compare_diff *all;
    size_t n_all, cap_all;
    bool all_incomplete; /* out of memory: all[] lacks some (differences counts them) */
} fh_compare_result;

/* Note a difference: counted, its path and why kept among the first ones,
 * and in all[] with the attribute values a and b (NULL: absent, or not an
 * attribute when both are) when keep_all. */
void fh_compare_note(fh_compare_result *r, const char *path, const char *why,
                        const char *a, const char *b, bool tensor);
/* An attribute's value as text ("-1", "causal", "[-1, 0]", "0.125"). */
void fh_compare_attr_text(const fh_h5_attr *a, char *buf, size_t n);
/* Free all[] (r stays usable; its counts are kept). */
void fh_compare_result_free(fh_compare_result *r);

/* Attributes named prov_* are provenance and never compared. */

/* Compare case groups `a` and `b`, only the state groups named in `states`
 * (NULL-terminated; NULL = every child). Results accumulate into *r. */
void fh_compare_cases(const fh_h5_node *a, const fh_h5_node *b,
                         const char *const *states, fh_compare_result *r);

/* Whether case group c records engine calls (engine_call/, or a
 * schedule step's): goldens made before they were recorded hold none, and
 * are compared without them. */
bool fh_compare_has_calls(const fh_h5_node *c);

/* Turn a case group into its golden form: inputs and save_ctx datasets
 * become `digest:<name>` attributes on their groups (nested names joined
 * with '/'), forward and backward stay in full. */
fattn_status fh_compare_make_golden(const fh_h5_node *run_case, fh_h5_node **out);


/* Cross-platform comparison against CPU goldens: inputs bitwise (through
 * their digests); save_ctx attributes equal and its input-derived tensors
 * bitwise; forward and backward float datasets within the tolerance profile
 * (|a - g| <= atol + rtol |g|, the golden g the reference, NaN/inf classes
 * equal) on the CPU engine's defined region — elements the golden still
 * holds as all-0xFF poison bytes are undefined and skipped; integers exact. */
void fh_compare_cases_tol(const fh_h5_node *run, const fh_h5_node *golden,
                             const fh_tol_profile *profile, fh_compare_result *r);

#endif /* FH_HARNESS_COMPARE_H */
