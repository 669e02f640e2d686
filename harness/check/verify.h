/* harness/check/verify.h — the checks of `fattn verify` (and of `fattn golden`)
 * as a library that returns results; the table, the verdict line, the JSON
 * report and the exit code are the command's (harness/cli/cmd_verify.c).
 *
 * Per case of the matrix, on one engine:
 *   1. legacy vs split, bitwise, every state;
 *   2. cross-wired replays: legacy's save_ctx into split's backward, split's
 *      into legacy's, split's forward into split's setup_ctx + backward —
 *      each bitwise equal to the straight run;
 *   3. determinism: the split run repeated, bitwise equal;
 *   4. the goldens of this platform (fixtures/<platform key>.h5), bitwise,
 *      inputs and save_ctx through their digests; without them, the newest
 *      CPU goldens within the tolerance profile (compare.h).
 * An expect_refusal case (docs/cases.md) instead: both front ends refused
 * with the spec's status and rule (1, the refusals compared as recorded,
 * message included), and the refusal's status, rule and state equal the
 * golden's (4).
 * Tensors that are non-deterministic by construction on an engine
 * (docs/determinism.md) are compared within their noise bound.
 */
#ifndef FH_HARNESS_VERIFY_H
#define FH_HARNESS_VERIFY_H

#include <stdbool.h>
#include <stddef.h>

#include "compare.h"
#include "fattn/engine.h"
#include "runner.h"
#include "spec.h"
#include "tolerance.h"

/* The most checks one case runs (seams, legacy vs split and its wrapper,
 * the refusal, three replays, repeat, golden), with room to spare. */
#define FH_VERIFY_MAX_CHECKS 24

/* One difference a check found, in full (cause.h orders and renders them). */
typedef struct fh_verify_diff {
    int check;                /* index into the case's checks[] */
    fh_compare_diff d;        /* d.path below the case group */
    int state;                /* its state in run order (fh_verify_state_of) */
    int step;                 /* its schedule step (fh_verify_step_of; 0: none) */
    size_t seq;               /* the order found */
} fh_verify_diff;

/* One case's checks. */
typedef struct fh_verify_case {
    const fh_spec *spec;
    fh_h5_node *legacy, *split; /* owned (the skip reason lives in legacy's) */
    const char *skipped;           /* reason (inside legacy's tree), or NULL */
    char error[512];               /* non-empty: the case errored */
    fh_compare_result cmp;         /* every check's differences together */
    char first_check[64];          /* which check found the first difference */
    size_t tensors;
    bool golden_missing;           /* the goldens have no such case */
    bool golden_compared;          /* a golden was compared (not for a skipped or errored
                                    * case, nor one compared within one engine only) */
    /* goldens of the same engine identity, but this case ran other plans
     * (engine configs): compared as without goldens of its own */
    bool other_plans;
    /* Why the case is not compared with another engine's goldens ("dropout",
     * "FP8"), NULL when it is (or the goldens are this platform's). */
    const char *same_engine_only;
    bool refused;                  /* expect_refusal: both refused as expected */
    size_t noisy_within;           /* non-deterministic tensors within their bound */
    char states[8];                /* "ifsb": the states recorded ('-' absent) */
    /* Each front end's straight run (by fh_impl): its status and, when
     * it failed, its message, so that a report names both sides' errors
     * and not only the state one side is missing. */
    /* every check run on the case, in the order run, with its count of
     * differences (for reports of one entry per check: JUnit) */
    struct {
        char name[64];
        size_t differences;
        /* what its two sides are called ("legacy", "split"; "run",
         * "golden"), and the states (FH_VERIFY_STATE_* bits) both of
         * its trees hold */
        char side_a[32], side_b[32];
        unsigned states_both;
    } checks[FH_VERIFY_MAX_CHECKS];
    /* every difference of every check, in the order found, with attribute
     * values (fh_verify_case_free frees them) */
    fh_verify_diff *diffs;
    size_t n_diffs, cap_diffs;
    size_t n_checks;
    fattn_status side_status[FH_IMPL_COUNT];
    char side_error[FH_IMPL_COUNT][512];
} fh_verify_case;

/* Why case s is compared within one engine only and not with another
 * engine's goldens, or NULL: "dropout" (the random bits are each engine's
 * own); "FP8" on an engine without the CPU math (its scales follow its own
 * amax, its FP8 bytes its own rounding of P: cuDNN 9.28 on the H200 against
 * the CPU goldens differed in the quantizer attributes and FP8 outputs of
 * every FP8 case, docs/verify.md). */
const char *fh_verify_same_engine_only(const fh_spec *s, const fattn_engine *e);

/* Whether a front end's straight run failed (in any state). */
bool fh_verify_side_failed(const fh_verify_case *c);

/* The key goldens are filed under for engine e (its report's platform):
 * bitwise comparison against goldens is only meaningful on an exact match. */
void fh_verify_platform_key(const fattn_engine *e, char *buf, size_t n);

/* Checks 1-3 for c->spec (c zeroed but for spec). */
void fh_verify_check_case(fh_verify_case *c, fattn_engine *e);
/* Check 4 against a goldens tree (NULL: none), bitwise, or within `tol`
 * when it is not NULL. */
void fh_verify_check_golden(fh_verify_case *c, const fh_h5_node *goldens,
                               const fh_tol_profile *tol, fattn_engine *e);
/* Free c's trees. */
void fh_verify_case_free(fh_verify_case *c);

/* The goldens a verify run compares against. */
typedef struct fh_verify_goldens {
    char key[128];          /* this platform's key */
    char path[4096];        /* the file chosen (or the exact one looked for) */
    fh_h5_node *tree;       /* NULL: none */
    bool exact;             /* a file for this very key */
    bool tolerance;         /* against the newest CPU goldens within `profile` */
    /* No goldens for this key, but a file of the same engine identity
     * (sm, SM count, cuDNN version, ...; docs/verify.md): bitwise against
     * it where a case ran the same plans, else within tolerance against
     * cpu_tree (the newest CPU goldens, NULL if none). */
    bool identity;
    char identity_text[128];    /* "sm_90, 132 SMs, cuDNN 91900" */
    fh_h5_node *cpu_tree;
    char cpu_path[4096];
    bool profile_set;           /* `profile` holds the built-in profile */
    fh_tol_profile profile;
    char note[4300];        /* how they are compared, for the report */
    /* --against REV: REV's run files of the matrix, by front end (NULL:
     * none), which each case's straight runs are compared with bitwise */
    fh_h5_node *against[FH_IMPL_COUNT];
    char against_name[128];
} fh_verify_goldens;

/* Find and load the goldens for engine e in directory `dir`
 * (see the file comment, check 4), refused before they are read when
 * holding them whole would take more than max_bytes (0: no bound;
 * fh_runfile_load_bounded). An error: a goldens file that cannot be
 * loaded. */
fattn_status fh_verify_goldens_open(const char *dir, const fattn_engine *e, double max_bytes,
                                       fh_verify_goldens *g);
void fh_verify_goldens_free(fh_verify_goldens *g);
/* Each straight run of c against its case in g->against (its front end's
 * run of another revision), bitwise: the checks "against REV: legacy" and
 * "against REV: split". Nothing without them. */
void fh_verify_check_against(fh_verify_case *c, const fh_verify_goldens *g,
                                fattn_engine *e);

/* A whole run. */
typedef struct fh_verify_result {
    fh_verify_case *cases;         /* n_cases */
    size_t n_cases;
    size_t n_skip, n_err, n_diff, n_nogold, n_tensors, n_diff_objects;
    size_t n_refused;              /* expect_refusal cases refused as expected */
    const fh_verify_case *first_bad; /* the first case with a difference */
    bool neutral;                  /* no difference and no error */
    bool stop;                     /* set by on_case: run no more cases (n_cases: those run) */
} fh_verify_result;

/* Called after each case's checks (e.g. to print its row). */
typedef void (*fh_verify_case_fn)(void *ctx, const fh_verify_case *c);

/* Every check for every spec on engine e into *r (free it with
 * fh_verify_result_free). FATTN_E_NOMEM is the only error. */
fattn_status fh_verify_run(const fh_spec *const *specs, size_t n, fattn_engine *e,
                              const fh_verify_goldens *g, fh_verify_case_fn on_case,
                              void *ctx, fh_verify_result *r);
void fh_verify_result_free(fh_verify_result *r);

#endif /* FH_HARNESS_VERIFY_H */
