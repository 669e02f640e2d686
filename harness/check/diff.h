/* harness/check/diff.h — `fattn diff`: compare two run files into a report
 * (docs/run-files.md; docs/diff.md). Rendering the report (text, JSON) and
 * the exit code are the command's (harness/cli/cmd_diff.c); this library never
 * prints.
 *
 * Order of work: both files are walked without data (h5io's metadata-only
 * read: structure, types, shapes, storage validated as far as safe reading
 * needs); provenance and structure are compared in one walk over both trees
 * (treewalk.h); then each dataset pair is streamed in bounded chunks (memory
 * type = file type), both sides' digests recomputed, and the elements
 * compared by the mode's rule (elemcmp.h). Memory stays bounded (two chunk
 * buffers and the metadata trees) whatever the file size.
 *
 * B is the reference: A is compared against it (tolerance |a-b| <= atol +
 * rtol*|b|; relative errors divide by |b|).
 */
#ifndef FH_HARNESS_DIFF_H
#define FH_HARNESS_DIFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "digest.h"
#include "elemcmp.h"
#include "fattn/dtype.h"
#include "fattn/status.h"
#include "fattn/tensor.h"
#include "h5estimate.h"
#include "tolerance.h"

typedef struct fh_diff_opts {
    fh_elem_mode mode;              /* BITWISE, ULP or TOL (not NOISY) */
    uint64_t max_ulp;               /* ULP mode */
    const fh_tol_profile *tol;      /* TOL mode */
    const char *only;               /* glob over paths, or NULL */
    bool trust_digests;             /* equal stored digests: skip the data */
    bool audit;                     /* compare /audit too */
    size_t chunk_bytes;             /* 0: 4 MiB */
    double max_memory;              /* --max-memory: refused before either file's
                                       attributes are read when the estimate
                                       (fh_diff_memory) is over it; 0: none */
} fh_diff_opts;

/* What became of one path. A difference under an `_impl` group keeps its
 * status in the entry and is tallied as PRIVATE (never counted). */
typedef enum fh_diff_status {
    FH_DIFF_EQUAL = 0,
    FH_DIFF_DIFFERENT,
    FH_DIFF_MISSING_IN_A,
    FH_DIFF_MISSING_IN_B,
    FH_DIFF_CORRUPT,
    FH_DIFF_STRUCTURE,
    FH_DIFF_VALUE,          /* an attribute on both sides, of another value */
    FH_DIFF_PRIVATE,
} fh_diff_status;

#define FH_DIFF_N_STATUS (FH_DIFF_PRIVATE + 1)

/* "equal", "different", "missing_in_a", ... (the JSON names). */
const char *fh_diff_status_name(fh_diff_status s);

typedef struct fh_diff_entry {
    char *path;         /* "/cases/x/forward/out" or "/cases/x@spec" */
    const char *kind;   /* dataset, digest, group, attribute */
    fh_diff_status status;
    bool is_private;    /* under an _impl group */
    char *msg;          /* structure / corrupt / digest detail, or NULL */
    char *a, *b;        /* an attribute's values as text (VALUE), else NULL */
    /* datasets */
    bool has_data;
    fattn_dtype dtype;
    int ndim;
    int64_t shape[FATTN_MAX_DIMS];
    fh_elem_stats st;
    fh_tol tol;         /* TOL mode, float datasets */
    char digest_a[FH_DIGEST_LEN], digest_b[FH_DIGEST_LEN];
} fh_diff_entry;

/* A provenance attribute that differs (never counted). */
typedef struct fh_diff_prov {
    char *path;  /* "/@device", "/cases/x/forward@prov_engine" */
    char *a, *b; /* formatted values; NULL when absent */
    bool platform; /* a key that makes bitwise equality not expected */
} fh_diff_prov;

typedef struct fh_diff_report {
    const char *file_a, *file_b;     /* the caller's strings */
    fh_diff_entry *e;                /* in walk order */
    size_t n_e, cap_e;
    fh_diff_prov *prov;
    size_t n_prov, cap_prov;
    bool audit_skipped;              /* /audit present and not compared */
    size_t tally[FH_DIFF_N_STATUS]; /* entries by status (differing private ones: PRIVATE) */
    size_t counted;                  /* entries that count as differences */
    size_t n_data;                   /* datasets and digest-only tensors compared */
} fh_diff_report;

/* What comparing two files holds: the trees of both without their data
 * (h5estimate.h: nodes, attributes and their text, as estimated from each
 * file's structure), an entry per object and attribute of both, the two
 * chunk buffers, and the inputs' private copies in memory (fileguard.h). */
double fh_diff_memory(const fh_h5_estimate *a, const fh_h5_estimate *b,
                         size_t chunk_bytes);

/* Is the entry a counted difference? */
bool fh_diff_entry_counted(const fh_diff_entry *e);

/* Compare run files a and b into *r (initialised here; free it with
 * fh_diff_report_free whatever the result). FATTN_OK: the report is
 * complete (r->counted > 0 means they differ, a corrupt dataset included);
 * an error: a file that cannot be read safely, or out of memory (message
 * in fattn_last_error, naming the file). */
fattn_status fh_diff_files(const char *a, const char *b, const fh_diff_opts *o,
                              fh_diff_report *r);
void fh_diff_report_free(fh_diff_report *r);

/* A shape as "[2,16,4,64]", truncated to fit n (n > 0). */
void fh_diff_fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape);

#endif /* FH_HARNESS_DIFF_H */
