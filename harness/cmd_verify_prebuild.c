/* Cold `fattn verify` on cuDNN: the plans the matrix needs, built by
 * parallel processes into a plan store before the checks run
 * (docs/verify.md, "Cold start on cuDNN").
 *
 * Building a cuDNN plan is host work (heuristics, then NVRTC compiling the
 * runtime-fused kernels: about a third of a second each on the H200) and
 * one process builds them one after another, so a fresh process spent
 * nearly all of a cold verify building plans. Here `jobs` child processes
 * each run verify's own checks on every jobs-th case (so they meet exactly
 * the graphs verify meets), with their output thrown away, and write each
 * plan into the plan store; then this process opens its engine and restores
 * the plans from the store instead of compiling them. A restored plan is
 * the same engine configuration, so the bits do not change; a plan no child
 * stored is built here as before, so a child that fails costs time, never
 * a result.
 *
 * Why processes and not threads: a CUDA context and a cuDNN handle per
 * worker without any locking in the engine, and the plan store already
 * takes concurrent writers (atomic rename). The parent must not have
 * touched CUDA before it forks (a child of a process that initialised
 * CUDA cannot use it), so the prebuild runs before this process opens any
 * engine, and not at all once it has.
 *
 * The store: $FATTN_CUDNN_PLAN_DIR when set (the children fill it, later
 * runs find the plans there); else a private temporary directory that
 * cli_engines_shutdown removes (a verify ended by a signal leaves it
 * behind under $TMPDIR, named fattn-plans-*). */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fattn/cudnn.h"

#include "cli.h"
#include "cmd_verify.h"


static double prebuild_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int fattn_cmd_verify_default_jobs(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > 16 ? 16 : (int)n;
}

static void on_case_ignore(void *ctx, const fattn_verify_case *c)
{
    (void)ctx;
    (void)c;
}

/* A child: verify's checks on the cases k, k + n, k + 2n, ... of v's
 * selection, everything it prints thrown away; never returns. */
static void prebuild_child(const fattn_cmd_verify_env *parent, int k, int n)
{
    int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) {
        dup2(null_fd, STDOUT_FILENO);
        dup2(null_fd, STDERR_FILENO);
        close(null_fd);
    }
    fattn_cmd_verify_env v = *parent;
    v.jobs = 1;
    v.shard_k = k;
    v.shard_n = n;
    v.progress = false;
    v.opened = false;
    int rc = fattn_cmd_verify_open_engine(&v); /* the matrix is the parent's, loaded */
    if (rc == FATTN_EXIT_OK) {
        fattn_verify_result r;
        if (fattn_verify_run(v.m.sel, v.m.n_sel, v.e, &v.goldens, on_case_ignore, NULL, &r) ==
            FATTN_OK)
            fattn_verify_result_free(&r);
        else
            rc = FATTN_EXIT_ERROR;
        fattn_cmd_verify_close(&v);
    }
    cli_engines_shutdown();
    _exit(rc == FATTN_EXIT_OK ? 0 : 1);
}

/* A child's end: true when it exited 0 (a waitpid error counts as a
 * failure). */
static bool prebuild_wait(pid_t pid)
{
    int ws = 0;
    pid_t got;
    while ((got = waitpid(pid, &ws, 0)) < 0 && errno == EINTR) {
    }
    return got == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
}

/* Whether --backend auto would open the cuDNN engine, asked in a child so
 * that this process does not initialise CUDA. */
static bool auto_is_cudnn(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0)
        _exit(fattn_cudnn_available() ? 0 : 1);
    return prebuild_wait(pid);
}

static bool prebuild_wanted(const fattn_cmd_verify_env *v)
{
    if (v->jobs <= 1 || v->shard_n > 0 || cli_plan_cache() != NULL)
        return false;
    if (!fattn_engine_kind_may_use_device(v->backend))
        return false;
    return (v->backend && strcmp(v->backend, "auto")) || auto_is_cudnn();
}

int fattn_cmd_verify_prebuild(fattn_cmd_verify_env *v)
{
    if (!prebuild_wanted(v))
        return FATTN_EXIT_OK;
    /* the prebuild only saves time: without a store this process builds
     * every plan itself, as with --jobs 1 */
    if (cli_plan_store_prepare("verify") != FATTN_EXIT_OK) {
        if (v->progress)
            fprintf(stderr, "fattn verify: no plan store, so no plan-building processes\n");
        return FATTN_EXIT_OK;
    }
    assert(v->jobs <= FATTN_VERIFY_MAX_JOBS); /* the parser's bound */
    int jobs = v->jobs;
    double t0 = prebuild_now_s();
    pid_t pids[FATTN_VERIFY_MAX_JOBS];
    int started = 0;
    fflush(NULL);
    for (int k = 0; k < jobs; k++) {
        pid_t pid = fork();
        if (pid < 0)
            break; /* fewer workers; this process builds what they did not */
        if (pid == 0)
            prebuild_child(v, k, jobs);
        pids[started++] = pid;
    }
    int failed = 0;
    for (int k = 0; k < started; k++)
        failed += !prebuild_wait(pids[k]);
    v->prebuild_jobs = started;
    v->prebuild_s = prebuild_now_s() - t0;
    if (v->progress)
        fprintf(stderr, "fattn verify: plans built by %d processes in %.1f s%s\n", started,
                v->prebuild_s, failed ? " (some failed: this process builds what they left)" : "");
    return FATTN_EXIT_OK;
}
