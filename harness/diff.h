/* harness/diff.h — `fattn diff`: compare two run files (docs/run-files.md;
 * docs/diff.md).
 *
 * Order of work: both files are walked without data (h5io's metadata-only
 * read: structure, types, shapes, storage validated as far as safe reading
 * needs); provenance and structure are compared; then each dataset pair is
 * streamed in bounded chunks (memory type = file type), both sides' digests
 * recomputed, and the elements compared in the chosen mode. Memory stays
 * bounded (two chunk buffers and the metadata trees) whatever the file size.
 *
 * B is the reference: A is compared against it (tolerance |a-b| <= atol +
 * rtol*|b|; relative errors divide by |b|).
 */
#ifndef FATTN_HARNESS_DIFF_H
#define FATTN_HARNESS_DIFF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "fattn/dtype.h"
#include "fattn/status.h"

typedef enum fattn_diff_mode {
    FATTN_DIFF_BITWISE = 0, /* every stored bit counts (NaN payloads, +-0) */
    FATTN_DIFF_ULP,         /* float elements pass within max_ulp */
    FATTN_DIFF_TOL          /* float elements pass within atol + rtol*|b| */
} fattn_diff_mode;

typedef struct fattn_tol {
    double rtol, atol;
} fattn_tol;

typedef struct fattn_tol_rule {
    char *glob; /* fnmatch(3) over the dataset path, '*' crosses '/' */
    fattn_tol tol;
} fattn_tol_rule;

/* A versioned per-dtype tolerance profile plus per-path rules (the last
 * matching rule wins over the dtype default). Integer dtypes are always
 * compared exactly. */
typedef struct fattn_tol_profile {
    char version[128];
    fattn_tol dtype[FATTN_DTYPE_COUNT];
    bool have[FATTN_DTYPE_COUNT];
    fattn_tol_rule *rules;
    size_t n_rules, cap_rules;
} fattn_tol_profile;

#define FATTN_TOL_BUILTIN_VERSION "fattn-tol/1 (TransformerEngine test_attention)"

/* The built-in profile: float32 (1.3e-6, 1e-5), float16 (1e-3, 1e-3),
 * bfloat16 (1.5e-2, 1.5e-2), e4m3fn (0.125, 0.0675), e5m2 (0.25, 0.125)
 * as (rtol, atol). */
void fattn_tol_profile_builtin(fattn_tol_profile *p);
/* Replace p by a JSON profile file (docs/diff.md; tolerances/). */
fattn_status fattn_tol_profile_load(const char *path, fattn_tol_profile *p);
/* Append a rule "GLOB=RTOL,ATOL" (as --tol gives it). */
fattn_status fattn_tol_profile_add_rule(fattn_tol_profile *p, const char *spec);
/* The tolerance for a float dataset at `path`. */
fattn_tol fattn_tol_profile_lookup(const fattn_tol_profile *p, const char *path,
                                   fattn_dtype dtype);
void fattn_tol_profile_free(fattn_tol_profile *p);

/* ULP distance of two bit patterns of a float dtype on that format's own
 * lattice: sign-magnitude mapped monotonically onto the integers (+0 and -0
 * both map to 0). Meaningless for NaN. */
uint64_t fattn_diff_ulp(fattn_dtype dtype, uint64_t a_bits, uint64_t b_bits);

typedef struct fattn_diff_opts {
    fattn_diff_mode mode;
    uint64_t max_ulp;               /* ULP mode */
    const fattn_tol_profile *tol;   /* TOL mode */
    const char *only;               /* glob over paths, or NULL */
    bool trust_digests;             /* equal stored digests: skip the data */
    bool audit;                     /* compare /audit too */
    const char *json_path;          /* write the JSON report, or NULL */
    size_t chunk_bytes;             /* 0: 4 MiB */
    FILE *out;                      /* the text report (stdout) */
} fattn_diff_opts;

/* Compare run files a and b. Returns the exit code: 0 identical in the
 * mode, 1 any counted difference (a corrupt dataset included), 2 a file
 * that cannot be read safely or a failure (message on stderr). */
int fattn_diff_files(const char *a, const char *b, const fattn_diff_opts *o);

#endif /* FATTN_HARNESS_DIFF_H */
