/* harness/cli/cmd_verify.h — the pieces of `fattn verify` a program other than
 * `fattn` reuses (bench/bench_verify.c runs the checks twice in one
 * process): its arguments, the engine, matrix and goldens they name, and
 * its rendering. The checks themselves are verify.h's. */
#ifndef FH_HARNESS_CMD_VERIFY_H
#define FH_HARNESS_CMD_VERIFY_H

#include <stdbool.h>
#include <stdio.h>

#include "cli.h"
#include "verify.h"

typedef struct fh_cmd_verify_env {
    /* arguments (pointers into argv) */
    const char *cases, *filter, *backend, *fixtures, *json;
    const char *keyword; /* -k SUBSTRING */
    const char *junit;   /* --junit FILE */
    const char *against; /* --against [REPO@]REV (cmd_verify_against.c) */
    bool strict;
    unsigned te_rules;          /* --te-rules: FATTN_TE_RULES_* bit */
    bool progress;  /* --progress, or stderr a terminal */
    bool exitfirst; /* -x: stop after the first differing or errored case */
    int jobs;       /* -j/--jobs: plan-building processes on cuDNN (1: none) */
    /* a plan-building child's share: every shard_n-th selected case from
     * shard_k (shard_n 0: all of them) */
    int shard_k, shard_n;
    /* what the plan prebuild did: processes that ran, wall seconds */
    int prebuild_jobs;
    double prebuild_s;
    const char *fix_dir;        /* the fixtures directory in use */
    double max_mem;             /* --max-memory (0: no bound) */
    double cases_mem;           /* what the selected cases hold (estimate) */
    /* opened by fh_cmd_verify_open */
    cli_matrix m;
    fattn_engine *e;
    const char *backend_name;
    bool forced;                /* deterministic backward forced (cuDNN) */
    fh_verify_goldens goldens;
    bool opened;
    /* --against: where REV was built, which revision, its own verify */
    char against_dir[1024];
    bool against_keep;          /* a step failed: its log stays */
    char against_sha[64], against_short[16];
    int against_verify_exit;
    char against_verdict[512];
} fh_cmd_verify_env;

/* Parse verify's arguments (argv[0] is "verify"). *done: --help was
 * printed. Returns an exit code (2 after a message on stderr). */
int fh_cmd_verify_parse(int argc, char **argv, fh_cmd_verify_env *v, bool *done);
/* The fixtures directory, the matrix, the engine and the goldens; an exit
 * code (2 after a message). Close with fh_cmd_verify_close. */
int fh_cmd_verify_open(fh_cmd_verify_env *v);
void fh_cmd_verify_close(fh_cmd_verify_env *v);
/* The second half of fh_cmd_verify_open, for an env whose matrix is
 * loaded: keeps only its shard's cases (shard_n > 0), then opens the engine
 * and the goldens. */
int fh_cmd_verify_open_engine(fh_cmd_verify_env *v);

/* Cold start on cuDNN (cmd_verify_prebuild.c): unless this process has
 * opened a cuDNN engine already, or the engine will not be cuDNN, or
 * v->jobs is 1, v->jobs child processes run the checks on their shares of
 * the selected cases into the plan store, so that the engine opened next
 * restores the plans. Children that fail cost time only. An exit code. */
int fh_cmd_verify_prebuild(fh_cmd_verify_env *v);
/* --jobs's bound: more processes gain nothing on the measured machine
 * (16 cores; 8 did nearly as well) and each holds a CUDA context and a
 * deterministic-backward workspace. */
#define FH_VERIFY_MAX_JOBS 32
/* --jobs's default: the online CPUs, at most 16. */
int fh_cmd_verify_default_jobs(void);

/* What checking m's cases holds (case_mem.h): with keep_all (verify) the
 * two runs of every case kept for the report plus the largest case's
 * third run; else (golden) the largest case's three runs. Within max_mem
 * (0: no bound): FH_EXIT_OK with the estimate in *cases_mem; else the
 * failure printed, naming the case. */
int fh_cmd_verify_check_memory(const char *cmd, const cli_matrix *m, bool keep_all,
                                  double max_mem, double *cases_mem);

/* The table's header; one row (a fh_verify_case_fn, ctx the FILE *). */
void fh_cmd_verify_print_header(FILE *f, const fh_cmd_verify_env *v);
void fh_cmd_verify_print_case(void *ctx, const fh_verify_case *c);
/* The verdict lines to f and the JSON report if asked; verify's exit code. */
int fh_cmd_verify_finish(FILE *f, const fh_cmd_verify_env *v,
                            const fh_verify_result *r);
/* The JUnit XML report of r to path (- for stdout); 0, or -1 after a
 * message (cmd_verify_junit.c). */
int fh_cmd_verify_write_junit(const char *path, const fh_cmd_verify_env *v,
                                 const fh_verify_result *r);
/* What a case says (cmd_verify_text.c): its table result ("ok",
 * "DIFFERENT (n): <earliest cause>", ...); under the verdict, the first
 * failing case's cause and differences in run order; the JSON report's
 * cases; a failing side's status and message. */
void fh_cmd_verify_result_text(const fh_verify_case *c, char *result, size_t n);
void fh_cmd_verify_print_first(FILE *f, const fh_verify_case *b);
struct json_t;
struct json_t *fh_cmd_verify_json_cases(const fh_verify_result *r);
void fh_cmd_verify_sides_text(const fh_verify_case *c, char *buf, size_t n);
/* The cross-case contrast of a run (harness/check/contrast.h) and its JSON. */
struct fh_contrast;
void fh_cmd_verify_contrast(const fh_verify_result *r, struct fh_contrast *out);
struct json_t *fh_cmd_verify_json_contrast(const struct fh_contrast *c);
/* --against (cmd_verify_against.c): build REV, run it and load its run
 * files into v->goldens.against (an exit code, 2 after a message); its
 * line under the verdict; the trees and the directory freed. */
int fh_cmd_verify_against_prepare(fh_cmd_verify_env *v);
void fh_cmd_verify_against_print(FILE *f, const fh_cmd_verify_env *v);
void fh_cmd_verify_against_free(fh_cmd_verify_env *v);
/* Verify's exit code for a result (docs/verify.md). */
int fh_cmd_verify_exit(const fh_verify_result *r, bool strict);

#endif /* FH_HARNESS_CMD_VERIFY_H */
