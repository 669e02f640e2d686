/* `fattn verify` cold and warm in one process.
 *
 * Runs verify's checks (harness/check/verify.h) twice with the same arguments in
 * this process, each run as `fattn verify` makes it, and prints one JSON
 * line with both wall times. The first run is cold: its cuDNN engine builds
 * every plan the matrix needs into the process's plan cache (harness/cli/cli.c).
 * The second is warm: its new engine takes every plan from that cache, so the
 * difference is what plan building costs. On the CPU engine both runs do the
 * same work (it has no plan cache) and the two times only show the noise.
 * Goal: warm < 60 s on the GPU (docs/bench.md).
 *
 * Usage: bench_verify [--log FILE] [VERIFY OPTIONS...]
 *   VERIFY OPTIONS are passed to both runs as `fattn verify` takes them
 *   (e.g. --backend cudnn, --filter GLOB). --log FILE writes both runs'
 *   tables and verdicts to FILE, leaving only the JSON line on stdout;
 *   without it the tables come first and the JSON line last.
 *
 * JSON: bench "verify", args (the verify arguments), cold_s, warm_s,
 * cold_exit, warm_exit (verify's exit codes), plans_after_cold,
 * plans_after_warm (plans in the process's plan cache; equal when the
 * warm run built none), goal_warm_s, goal_cold_s, prebuild_jobs and
 * prebuild_s (the cold run's plan-building processes and their wall time,
 * part of cold_s; 0 on the CPU engine or with --jobs 1).
 *
 * Exit: 0 both runs finished with the same exit code (0 or 1: a verdict of
 * "not behaviour-neutral" is a result here, not a failure); 1 the two exit
 * codes differ; 2 a usage error here or in verify, or a run that errored
 * (both runs are made either way).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cmd_verify.h"
#include "fattn/cudnn.h"

#define GOAL_WARM_S 60.0
/* A fresh process with no plan store: the plans built by --jobs processes
 * first (measured: 51 s one after another on the H200 for 154 plans). */
#define GOAL_COLD_S 15.0

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One verify run as `fattn verify` makes it (engine, matrix and goldens
 * opened and given back; the shared cuDNN engine keeps its plans), its
 * table and verdict to f: verify's exit code, *secs its wall time. */
static int timed_verify(fh_cmd_verify_env *v, FILE *f, double *secs)
{
    double t0 = now_s();
    int rc = fh_cmd_verify_open(v);
    if (rc == FH_EXIT_OK) {
        fh_cmd_verify_print_header(f, v);
        fh_verify_result r;
        fattn_status st = fh_verify_run(v->m.sel, v->m.n_sel, v->e, &v->goldens,
                                           fh_cmd_verify_print_case, f, &r);
        rc = st == FATTN_OK ? fh_cmd_verify_finish(f, v, &r)
                            : cli_fail("verify", "%s", fattn_last_error());
        fh_verify_result_free(&r);
        fh_cmd_verify_close(v);
    }
    fflush(f);
    *secs = now_s() - t0;
    return rc;
}

static const char usage[] =
    "usage: bench_verify [--log FILE] [VERIFY OPTIONS...]\n"
    "\n"
    "Run `fattn verify VERIFY OPTIONS` twice in this process (cold, then warm with the\n"
    "cuDNN plan cache of the first run) and print both wall times as one JSON line.\n"
    "--log FILE: both runs' output to FILE instead of stdout. Exit 0 both runs gave the\n"
    "same exit code (0 or 1), 1 they differ, 2 a usage error or an errored run.\n";

int main(int argc, char **argv)
{
    const char *log = NULL;
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage, stdout);
        return 0;
    }
    /* verify's argv: "verify" and every argument but --log, the same array
     * for both runs */
    char **vargv = calloc((size_t)argc + 1, sizeof *vargv);
    json_t *jargs = json_array();
    if (!vargv || !jargs) {
        fputs("bench_verify: out of memory\n", stderr);
        return FH_EXIT_ERROR;
    }
    int vargc = 0;
    vargv[vargc++] = "verify";
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--log=", 6)) {
            log = argv[i] + 6;
        } else if (!strcmp(argv[i], "--log")) {
            if (i + 1 >= argc) {
                fputs(usage, stderr);
                return FH_EXIT_ERROR;
            }
            log = argv[++i];
        } else {
            vargv[vargc++] = argv[i];
            json_array_append_new(jargs, json_string(argv[i]));
        }
    }
    fh_cmd_verify_env v;
    bool done;
    int rc = fh_cmd_verify_parse(vargc, vargv, &v, &done);
    if (rc != FH_EXIT_OK || done)
        return rc;
    FILE *f = stdout;
    if (log && !(f = fopen(log, "w"))) { /* one log per bench run */
        perror(log);
        return FH_EXIT_ERROR;
    }
    double cold_s = 0.0, warm_s = 0.0;
    int cold_rc = timed_verify(&v, f, &cold_s);
    /* the cold run's plan prebuild (harness/cli/cmd_verify_prebuild.c); the
     * warm run never makes one (this process has a cuDNN engine by then) */
    int prebuild_jobs = v.prebuild_jobs;
    double prebuild_s = v.prebuild_s;
    int plans_cold = cli_engine_cached_plans();
    /* the warm run even after an exit 2: an errored case is still a run */
    int warm_rc = timed_verify(&v, f, &warm_s);
    int plans_warm = cli_engine_cached_plans();
    if (f != stdout)
        fclose(f);
    /* where the plans came from: built, or restored from the plan store */
    fattn_cudnn_plan_store_stats ps;
    memset(&ps, 0, sizeof ps);
    const fattn_cudnn_plan_cache *shared = cli_plan_cache();
    const char *store = fattn_cudnn_plan_cache_store_dir(shared);
    if (shared)
        fattn_cudnn_plan_cache_stats(shared, &ps);
    json_t *jstore = json_string(store ? store : "");
    char *store_s = json_dumps(jstore, JSON_ENCODE_ANY);
    json_decref(jstore);

    char *args = json_dumps(jargs, JSON_COMPACT);
    printf("{\"bench\":\"verify\",\"args\":%s,\"cold_s\":%.3f,\"warm_s\":%.3f,"
           "\"cold_exit\":%d,\"warm_exit\":%d,\"plans_after_cold\":%d,"
           "\"plans_after_warm\":%d,\"goal_warm_s\":%.0f,\"goal_cold_s\":%.0f,"
           "\"prebuild_jobs\":%d,\"prebuild_s\":%.3f,\"plan_store\":%s,"
           "\"store_built\":%lld,\"store_loaded\":%lld,\"store_stored\":%lld,"
           "\"store_unserializable\":%lld,\"store_rejected\":%lld}\n",
           args ? args : "[]", cold_s, warm_s, cold_rc, warm_rc, plans_cold, plans_warm,
           GOAL_WARM_S, GOAL_COLD_S, prebuild_jobs, prebuild_s,
           store_s && *store ? store_s : "null", (long long)ps.built,
           (long long)ps.loaded, (long long)ps.stored, (long long)ps.unserializable,
           (long long)ps.rejected);
    free(store_s);
    cli_engines_shutdown();
    free(args);
    json_decref(jargs);
    free(vargv);
    if (cold_rc == FH_EXIT_ERROR || warm_rc == FH_EXIT_ERROR)
        return FH_EXIT_ERROR;
    return cold_rc == warm_rc ? 0 : 1;
}
