/* Reading untrusted files in a forked child (see isolate.h). */
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fattn/clock.h"
#include "fattn_config.h"
#include "fileguard.h"
#include "isolate.h"
#include "scrub.h"

#if defined(__SANITIZE_ADDRESS__)
#define FH_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FH_UNDER_ASAN 1
#endif
#endif

/* Statuses travel as one byte of exit code: 0 ok, 10 + (-status). */
enum { EXIT_BASE = 10 };
/* The child's message: as long as fattn_error keeps. */
enum { MSG_MAX = 16384 };

/* The child's side: limits, then fn; never returns. */
static void child_run(const char *path, fh_isolate_fn fn, void *ctx, uint64_t as_bytes,
                      unsigned cpu_seconds, int wfd, int efd, pid_t parent)
{
    /* What the child prints (glibc's "munmap_chunk(): invalid pointer" as
     * it aborts, a sanitizer's report) goes to the parent, which passes on
     * a scrubbed line of it in the message: never raw to the terminal. */
    if (efd >= 0) {
        dup2(efd, STDERR_FILENO);
        close(efd);
    }
    /* Die with the parent: a child left reading a hostile file would spin
     * on for its whole CPU limit. The parent may have gone before this.
     * (The signal follows the forking thread; the commands fork from their
     * main thread, which lives as long as the process.) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
    struct rlimit cpu = {cpu_seconds, cpu_seconds + 1};
    setrlimit(RLIMIT_CPU, &cpu);
#ifndef FH_UNDER_ASAN
    if (as_bytes == 0) {
        struct stat sb;
        char fdpath[64];
        const char *p = fh_fileguard_read_path(path, fdpath, sizeof fdpath);
        uint64_t size = stat(p, &sb) == 0 ? (uint64_t)sb.st_size : 0;
        as_bytes = (UINT64_C(4) << 30) + 8 * size;
    }
    struct rlimit as = {(rlim_t)as_bytes, (rlim_t)as_bytes};
    setrlimit(RLIMIT_AS, &as);
#else
    (void)as_bytes;
#endif
    /* A crash must end the child by its signal, which the parent
     * reports, whatever handlers (a sanitizer's) the process installed. */
    static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
        signal(crash_signals[i], SIG_DFL);
#if FATTN_TESTING
    /* FATTN_TEST_ISOLATE_HANG=1: a child that never finishes, for the
     * tests of the wall-clock limit and of the parent's death. */
    const char *hang = getenv("FATTN_TEST_ISOLATE_HANG");
    if (hang && strcmp(hang, "1") == 0)
        for (;;)
            pause();
#endif
    fattn_status st = fn(path, ctx);
    const char *msg = fattn_last_error();
    ssize_t unused = write(wfd, msg, strlen(msg));
    (void)unused;
    close(wfd);
    _exit(st != FATTN_OK ? EXIT_BASE + (-(int)st) : 0);
}

static fh_isolate_notice_fn notice_fn;

void fh_isolate_set_notice(fh_isolate_notice_fn fn) { notice_fn = fn; }

unsigned fh_isolate_cpu_limit(uint64_t size)
{
    uint64_t s = 60 + size / (UINT64_C(16) << 20);
    return s > 86400 ? 86400 : (unsigned)s;
}

/* When the notice is due: 5 s into the read (FATTN_TEST_ISOLATE_NOTICE_S=S
 * in tests). */
static double notice_after_s(void)
{
#if FATTN_TESTING
    const char *e = getenv("FATTN_TEST_ISOLATE_NOTICE_S");
    if (e && atoi(e) > 0)
        return atoi(e);
#endif
    return 5.0;
}

/* What the parent waits for: the child's message until EOF or the
 * deadline, and the notice it tells once the child is slow. */
typedef struct wait_state {
    const char *path;
    double start, deadline, notice_at;
    unsigned cpu_seconds;
    bool told;
    int efd;          /* the child's stderr, -1 once at its end */
    char err[4096];   /* its first bytes */
    size_t err_len;
} wait_state;

/* Take what the child printed on stderr: its first bytes kept, the rest
 * drained so that the child never blocks on a full pipe. */
static void drain_stderr(wait_state *w)
{
    char scratch[512];
    char *dst = w->err_len < sizeof w->err ? w->err + w->err_len : scratch;
    size_t room = w->err_len < sizeof w->err ? sizeof w->err - w->err_len : sizeof scratch;
    ssize_t n = read(w->efd, dst, room);
    if (n < 0 && errno == EINTR)
        return;
    if (n <= 0) {
        close(w->efd);
        w->efd = -1;
    } else if (dst != scratch) {
        w->err_len += (size_t)n;
    }
}

/* Read the child's message until EOF or the deadline; false on timeout. */
static bool read_message(int rfd, char *msg, size_t cap, size_t *len, wait_state *w)
{
    *len = 0;
    for (;;) {
        double t = fattn_now_s(), left = w->deadline - t;
        if (left <= 0)
            return false;
        if (!w->told && notice_fn && t >= w->notice_at) {
            w->told = true;
            notice_fn(w->path, t - w->start, w->cpu_seconds);
        }
        if (!w->told && notice_fn && w->notice_at - t < left)
            left = w->notice_at - t;
        struct pollfd pfd[2] = {{rfd, POLLIN, 0}, {w->efd, POLLIN, 0}};
        int pr = poll(pfd, w->efd >= 0 ? 2 : 1, left > 3600 ? 3600000 : (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue; /* timeout: the deadline check above decides */
        if (w->efd >= 0 && pfd[1].revents)
            drain_stderr(w);
        if (!pfd[0].revents)
            continue;
        char scratch[512];
        char *dst = *len < cap - 1 ? msg + *len : scratch;
        size_t room = *len < cap - 1 ? cap - 1 - *len : sizeof scratch;
        ssize_t n = read(rfd, dst, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (dst != scratch)
            *len += (size_t)n;
    }
    msg[*len] = '\0';
    return true;
}

/* The wall-clock limit: the CPU limit and a minute (a child blocked
 * spends no CPU); FATTN_TEST_ISOLATE_WALL_S=S overrides it in tests. */
static double wall_limit_s(unsigned cpu_seconds)
{
#if FATTN_TESTING
    const char *e = getenv("FATTN_TEST_ISOLATE_WALL_S");
    if (e && atoi(e) > 0)
        return atoi(e);
#endif
    return (double)cpu_seconds + 60.0;
}

fattn_status fh_isolate_run(const char *path, fh_isolate_fn fn, void *ctx,
                               uint64_t as_bytes, unsigned cpu_seconds)
{
    assert(path && fn);
    /* Open the file once, here: refused unless regular (a FIFO would
     * block), and pinned, so that the child checks and the parent then
     * reads this one file even if another is renamed over the path. */
    fattn_status pst = fh_fileguard_pin(path);
    if (pst == FATTN_E_INVALID_FILE || pst == FATTN_E_NOMEM) /* not regular; no private copy */
        return pst;
    if (cpu_seconds == 0) {
        struct stat sb;
        char fdpath[64];
        const char *p = fh_fileguard_read_path(path, fdpath, sizeof fdpath);
        cpu_seconds = fh_isolate_cpu_limit(stat(p, &sb) == 0 ? (uint64_t)sb.st_size : 0);
    }
    /* A path that cannot be opened at all is left to fn, whose reading
     * reports it in its own words. */
    int pipefd[2], errfd[2];
    if (pipe(pipefd) != 0)
        return fattn_error(FATTN_E_IO, "%s: pipe: %s", path, strerror(errno));
    if (pipe(errfd) != 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        return fattn_error(FATTN_E_IO, "%s: pipe: %s", path, strerror(errno));
    }
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pipefd[0]);
        close(pipefd[1]);
        close(errfd[0]);
        close(errfd[1]);
        return fattn_error(FATTN_E_IO, "%s: fork: %s", path, strerror(e));
    }
    if (pid == 0) {
        close(pipefd[0]);
        close(errfd[0]);
        child_run(path, fn, ctx, as_bytes, cpu_seconds, pipefd[1], errfd[1], parent);
    }
    close(pipefd[1]);
    close(errfd[1]);
    char *msg = malloc(MSG_MAX);
    char small[1];
    size_t len = 0;
    double wall = wall_limit_s(cpu_seconds), t0 = fattn_now_s();
    wait_state ws = {path, t0, t0 + wall, t0 + notice_after_s(), cpu_seconds, false, errfd[0],
                     "", 0}, *w = &ws;
    bool in_time = read_message(pipefd[0], msg ? msg : small, msg ? MSG_MAX : 1, &len, w);
    close(pipefd[0]);
    if (!in_time)
        kill(pid, SIGKILL);
    int wstatus;
    fattn_status st = FATTN_OK;
    while (waitpid(pid, &wstatus, 0) < 0)
        if (errno != EINTR) {
            st = fattn_error(FATTN_E_IO, "%s: waitpid: %s", path, strerror(errno));
            goto out;
        }
    while (w->efd >= 0) /* the child is gone: what it left in the pipe, then EOF */
        drain_stderr(w);
    char said[600] = "", words[512];
    fh_scrub_last_words(w->err, w->err_len, words, sizeof words);
    if (words[0])
        snprintf(said, sizeof said, ": the reader said: %s", words);
    const char *m = msg ? msg : "";
    int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 255;
    if (!in_time)
        st = fattn_error(FATTN_E_INVALID_FILE,
                         "reading %s took longer than %.0f s (wall-clock limit): stopped", path,
                         wall);
    else if (WIFSIGNALED(wstatus))
        st = fattn_error(FATTN_E_INVALID_FILE, "HDF5 library failed reading %s (signal %d%s)%s",
                         path, WTERMSIG(wstatus),
                         WTERMSIG(wstatus) == SIGXCPU ? ", CPU time limit" : "", said);
    else if (code >= EXIT_BASE && code < EXIT_BASE + 64)
        st = fattn_error((fattn_status)(-(code - EXIT_BASE)), "%s", m);
    else if (code != 0)
        st = fattn_error(FATTN_E_INVALID_FILE, "reading %s failed in the child (exit %d)%s%s%s",
                         path, code, len ? ": " : "", m, said);
out:
    if (w->efd >= 0)
        close(w->efd);
    free(msg);
    return st;
}
