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
 * runs find the plans there); else a private temporary directory
 * ($TMPDIR/fattn-plans-*) that cli_engines_shutdown removes, and that
 * SIGINT, SIGTERM, SIGHUP and SIGPIPE remove too: the children are
 * registered with fileguard, whose handler kills and reaps them before it
 * empties and removes the directory (a child left running would write into
 * it, or make it again). A child also dies with this process
 * (PR_SET_PDEATHSIG), so that SIGKILL leaves at most the directory. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fattn/cudnn.h"

#include "cli.h"
#include "cmd_verify.h"
#include "fattn_config.h"
#include "fileguard.h"

#if FATTN_TESTING
/* FATTN_TEST_PREBUILD=S: the prebuild runs whatever the backend (the CPU's
 * too, so that a machine without a GPU exercises it) and each child waits
 * S seconds first, so that a test can signal verify while the temporary
 * store and the children exist. 0 or unset: no effect. */
static int test_prebuild_hold(void)
{
    const char *e = getenv("FATTN_TEST_PREBUILD");
    int s = e ? atoi(e) : 0;
    return s > 0 && s <= 600 ? s : 0;
}
#endif


static double prebuild_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int fh_cmd_verify_default_jobs(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > 16 ? 16 : (int)n;
}

static void on_case_ignore(void *ctx, const fh_verify_case *c)
{
    (void)ctx;
    (void)c;
}

/* A child: verify's checks on the cases k, k + n, k + 2n, ... of v's
 * selection, everything it prints thrown away; never returns. */
static void prebuild_child(const fh_cmd_verify_env *parent, pid_t parent_pid, int k, int n)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent_pid)
        _exit(1); /* the parent is gone already */
#if FATTN_TESTING
    for (int i = 0, hold = test_prebuild_hold(); i < 10 * hold; i++) {
        struct timespec ts = {0, 100000000L};
        nanosleep(&ts, NULL);
    }
#endif
    int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) {
        dup2(null_fd, STDOUT_FILENO);
        dup2(null_fd, STDERR_FILENO);
        close(null_fd);
    }
    fh_cmd_verify_env v = *parent;
    v.jobs = 1;
    v.shard_k = k;
    v.shard_n = n;
    v.progress = false;
    v.opened = false;
    int rc = fh_cmd_verify_open_engine(&v); /* the matrix is the parent's, loaded */
    if (rc == FH_EXIT_OK) {
        fh_verify_result r;
        if (fh_verify_run(v.m.sel, v.m.n_sel, v.e, &v.goldens, on_case_ignore, NULL, &r) ==
            FATTN_OK)
            fh_verify_result_free(&r);
        else
            rc = FH_EXIT_ERROR;
        fh_cmd_verify_close(&v);
    }
    cli_engines_shutdown();
    _exit(rc == FH_EXIT_OK ? 0 : 1);
}

/* A child's end: true when it exited 0 (a waitpid error counts as a
 * failure). Its signal-cleanup slot (>= 0) is given back while it is a
 * zombie (waited for with WNOWAIT), so that its pid cannot have been
 * reused while the handler could still kill it. */
static bool prebuild_wait(pid_t pid, int slot)
{
    if (slot >= 0) {
        siginfo_t info;
        while (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
        }
        fh_fileguard_scratch_unregister(slot);
    }
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
    return prebuild_wait(pid, -1);
}

static bool prebuild_wanted(const fh_cmd_verify_env *v)
{
    if (v->jobs <= 1 || v->shard_n > 0 || cli_plan_cache() != NULL)
        return false;
#if FATTN_TESTING
    if (test_prebuild_hold() > 0)
        return true;
#endif
    if (!fattn_engine_kind_may_use_device(v->backend))
        return false;
    return (v->backend && strcmp(v->backend, "auto")) || auto_is_cudnn();
}

int fh_cmd_verify_prebuild(fh_cmd_verify_env *v)
{
    if (!prebuild_wanted(v))
        return FH_EXIT_OK;
    /* the prebuild only saves time: without a store this process builds
     * every plan itself, as with --jobs 1 */
    if (cli_plan_store_prepare("verify") != FH_EXIT_OK) {
        if (v->progress)
            fprintf(stderr, "fattn verify: no plan store, so no plan-building processes\n");
        return FH_EXIT_OK;
    }
    assert(v->jobs <= FH_VERIFY_MAX_JOBS); /* the parser's bound */
    int jobs = v->jobs;
    double t0 = prebuild_now_s();
    pid_t pids[FH_VERIFY_MAX_JOBS];
    int slots[FH_VERIFY_MAX_JOBS];
    int started = 0;
    pid_t self = getpid();
    fflush(NULL);
    for (int k = 0; k < jobs; k++) {
        pid_t pid = fh_fileguard_fork_child(&slots[started]);
        if (pid < 0)
            break; /* fewer workers; this process builds what they did not */
        if (pid == 0)
            prebuild_child(v, self, k, jobs);
        pids[started++] = pid;
    }
    int failed = 0;
    for (int k = 0; k < started; k++)
        failed += !prebuild_wait(pids[k], slots[k]);
    v->prebuild_jobs = started;
    v->prebuild_s = prebuild_now_s() - t0;
    if (v->progress)
        fprintf(stderr, "fattn verify: plans built by %d processes in %.1f s%s\n", started,
                v->prebuild_s, failed ? " (some failed: this process builds what they left)" : "");
    return FH_EXIT_OK;
}
