/* Shared pieces of the fattn command-line tool. */
#ifndef FH_HARNESS_CLI_H
#define FH_HARNESS_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "fattn/engine.h"

#include "h5io.h"
#include "spec.h"

/* Exit codes (the contract): 0 identical / valid / passed, 1 a difference
 * or failed verification, 2 usage error, invalid file or errored case. */
enum { FH_EXIT_OK = 0, FH_EXIT_DIFF = 1, FH_EXIT_ERROR = 2 };

/* A tiny option scanner: `--name value` and `--name=value`. */
typedef struct cli_args {
    int argc;
    char **argv;
    int i;
    const char *cmd;
} cli_args;

/* If argv[i] is `name` (a flag with a value), store the value and advance.
 * Returns 1 when matched, 0 when not, -1 when the value is missing. */
int cli_opt(cli_args *a, const char *name, const char **value);
/* A boolean flag. */
bool cli_flag(cli_args *a, const char *name);

/* Print "fattn CMD: message" to stderr and return FH_EXIT_ERROR. */
int cli_fail(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* "s" unless n is 1, for counts in messages: "1 case", "2 cases". */
const char *cli_s(size_t n);

/* The datasets (tensors) in the tree under n, n itself included. */
size_t cli_count_datasets(const fh_h5_node *n);

/* cli_fail with fattn_last_error() about `path`: "fattn CMD: PATH: cause",
 * the path named once whether or not the message starts with it. */
int cli_fail_at(const char *cmd, const char *path);

/* Progress on stderr for the long commands: when it is a terminal or
 * --progress was given (never otherwise: tests and scripts compare
 * stderr). One line per case, `[17/63] layout.thd... ok`. */
bool cli_progress_wanted(bool flag);
void cli_progress_line(bool on, size_t i, size_t n, const char *id, const char *result);

/* Whether an output path is "-": the report goes to stdout. */
bool cli_is_stdout(const char *path);
/* This executable's path (from /proc/self/exe; "fattn" when it cannot be
 * known), for commands a user pastes: they then run this fattn. */
const char *cli_self_path(void);
/* s as one shell word: as it is when it needs no quoting, else in single
 * quotes (a ' as '\''); into buf, returned. */
const char *cli_sh_quote(const char *s, char *buf, size_t n);

/* A report (JSON, XML) to `path`, replaced atomically (fileguard.h), or
 * to stdout for "-", with a newline added there. FH_EXIT_OK, else the
 * failure printed as "fattn CMD: PATH: cannot write the WHAT: cause". */
int cli_write_report(const char *cmd, const char *what, const char *path, const char *text);

/* --max-memory BYTES: a positive finite number of bytes, at most 2^63 (so
 * "inf" or "1e400" cannot switch the guard off). Stores it in *bytes and
 * returns FH_EXIT_OK, else prints the failure (cli_fail). */
int cli_parse_max_memory(const char *cmd, const char *s, double *bytes);
/* The same, *bytes defaulting to half the machine's memory (4 GiB when
 * unknown, cli_default_max_memory) when s is NULL: the --max-memory of
 * every command that reads or makes tensors (run, replay, verify, golden,
 * inspect, merge, diff, report). Also the bound of the inputs' private
 * copies in a memory-backed $TMPDIR (fh_fileguard_set_memory_bound). */
int cli_max_memory_or_default(const char *cmd, const char *s, double *bytes);
double cli_default_max_memory(void);

/* --te-rules <release> (FATTN_TE_RULES_CHOICES): the release bit (fattn/support.h) in *rules and
 * FH_EXIT_OK, else the failure printed (listing the known names). */
int cli_parse_te_rules(const char *cmd, const char *s, unsigned *rules);
/* A count option's value: decimal digits only (no sign, blank or prefix),
 * lo <= value <= hi; else a message naming flag and an exit code 2. */
int cli_parse_count_arg(const char *cmd, const char *flag, const char *s, long lo, long hi,
                        long *out);

/* --shard I/N takes plain decimal integers up to this. */
#define CLI_SHARD_MAX 1000000000L

/* The matrix: --cases FILE or the compiled-in default, filtered by a glob
 * and restricted to shard I/N (1-based; case k of the full matrix belongs
 * to shard k % N + 1). */
typedef struct cli_matrix {
    fh_spec_list all;
    const fh_spec **sel;
    size_t n_sel;
    long shard_i, shard_n; /* 1/1 without --shard */
    const char *keyword;   /* -k: ids hold it (cli_matrix_keep_keyword), or NULL */
} cli_matrix;

int cli_matrix_load(const char *cmd, const char *cases_path, const char *filter,
                    const char *shard, cli_matrix *m);
/* -k SUBSTRING (pytest's -k for one word): keep the selected cases whose id
 * contains it; none left is exit 2 naming what emptied the selection (m
 * freed then). The matrix digest counts the same cases. */
int cli_matrix_keep_keyword(const char *cmd, cli_matrix *m, const char *keyword,
                            const char *filter);

/* The digest of the matrix that --shard divides: the canonical spec of
 * every case --filter keeps (all without one), in id order, each followed
 * by '\n', as a digest string (digest.h); *count gets how many cases that
 * is. Shards of one run share both; run files record them as
 * `matrix_digest` and `matrix_cases`, so that merge can tell a complete set
 * of shards of one matrix from an incomplete or a mixed one. In id order, so
 * that a run's bytes do not depend on the order the matrix lists its cases
 * in; shards of two listings are told apart by their case count. */
fattn_status cli_matrix_digest(const cli_matrix *m, const char *filter, char *out,
                               size_t *count);
void cli_matrix_free(cli_matrix *m);

/* The engine for --backend auto|cpu|cudnn (names resolved by the engine
 * registry); *backend_name gets the engine's registry name. Exit code on
 * failure. Every engine is new and has the options given (NULL: defaults);
 * cuDNN engines share the process's plan cache, so plans built by one
 * command serve every later one. The command gives the engine back with
 * cli_engine_close. Not thread-safe: commands run one at a time. */
int cli_engine_open_opts(const char *cmd, const char *backend, const fattn_engine_options *opt,
                         fattn_engine **e, const char **backend_name);
/* Name the cuDNN libraries of $FATTN_CUDNN_LIB and $FATTN_CUDART_LIB to the
 * library (fattn_cudnn_use_libraries) before anything loads them: what
 * main does first. An exit code (2 after a message). */
int cli_cudnn_libraries(const char *cmd);
/* cli_engine_open_opts with the default options. */
int cli_engine_open(const char *cmd, const char *backend, fattn_engine **e,
                    const char **backend_name);
/* Free an engine from cli_engine_open. NULL is fine. */
void cli_engine_close(fattn_engine *e);
/* Plans held by the process's plan cache (0 without one). */
int cli_engine_cached_plans(void);
/* The plan store this process's cuDNN engines and its children use:
 * $FATTN_CUDNN_PLAN_DIR when set and not empty, else a new private
 * directory under $TMPDIR (or /tmp) put into the environment, which
 * cli_engines_shutdown removes in this process (not in its children).
 * An exit code (2 after a message). */
int cli_plan_store_prepare(const char *cmd);
/* The process's plan cache, NULL before the first cuDNN engine. */
const fattn_cudnn_plan_cache *cli_plan_cache(void);
/* Free the process's plan cache. Whoever calls commands calls this once,
 * after the last (main, bench/bench_verify.c); not from atexit, because
 * the forked children of isolate.h must not touch the GPU. */
void cli_engines_shutdown(void);

/* Command entry points. */
int fh_cmd_cases(int argc, char **argv);
int fh_cmd_run(int argc, char **argv);
int fh_cmd_replay(int argc, char **argv);
int fh_cmd_inspect(int argc, char **argv);
int fh_cmd_merge(int argc, char **argv);
int fh_cmd_verify(int argc, char **argv);
int fh_cmd_golden(int argc, char **argv);
int fh_cmd_diff(int argc, char **argv);
int fh_cmd_report(int argc, char **argv);

/* The isolated reader's notice (isolate.h) as a line on stderr: main
 * installs it, so that a wait on a file libhdf5 spins on is explained. */
void cli_isolate_notice(const char *path, double waited_s, unsigned cpu_limit_s);
int fh_cmd_write_tree(int argc, char **argv);

#endif /* FH_HARNESS_CLI_H */
