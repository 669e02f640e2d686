/* Reading untrusted files in a forked child (see isolate.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isolate.h"

#if defined(__SANITIZE_ADDRESS__)
#define FATTN_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FATTN_UNDER_ASAN 1
#endif
#endif

/* Statuses travel as one byte of exit code: 0 ok, 10 + (-status). */
enum { EXIT_BASE = 10 };

fattn_status fattn_isolate_run(const char *path, fattn_isolate_fn fn, void *ctx,
                               uint64_t as_bytes, unsigned cpu_seconds)
{
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return fattn_error(FATTN_E_IO, "%s: pipe: %s", path, strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        return fattn_error(FATTN_E_IO, "%s: fork: %s", path, strerror(errno));
    }
    if (pid == 0) {
        close(pipefd[0]);
        struct rlimit core = {0, 0};
        setrlimit(RLIMIT_CORE, &core);
        struct rlimit cpu = {cpu_seconds, cpu_seconds + 1};
        setrlimit(RLIMIT_CPU, &cpu);
#ifndef FATTN_UNDER_ASAN
        if (as_bytes == 0) {
            struct stat sb;
            uint64_t size = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
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
        fattn_status st = fn(path, ctx);
        const char *msg = fattn_last_error();
        ssize_t unused = write(pipefd[1], msg, strlen(msg));
        (void)unused;
        close(pipefd[1]);
        _exit(st == FATTN_OK ? 0 : EXIT_BASE + (-(int)st));
    }
    close(pipefd[1]);
    char msg[1024];
    size_t len = 0;
    ssize_t n;
    while ((n = read(pipefd[0], msg + len, sizeof msg - 1 - len)) > 0)
        len += (size_t)n;
    msg[len] = '\0';
    close(pipefd[0]);
    int wstatus;
    while (waitpid(pid, &wstatus, 0) < 0)
        if (errno != EINTR)
            return fattn_error(FATTN_E_IO, "%s: waitpid: %s", path, strerror(errno));
    if (WIFSIGNALED(wstatus))
        return fattn_error(FATTN_E_INVALID_FILE, "HDF5 library failed reading %s (signal %d%s)",
                           path, WTERMSIG(wstatus),
                           WTERMSIG(wstatus) == SIGXCPU ? ", CPU time limit" : "");
    int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 255;
    if (code == 0)
        return FATTN_OK;
    if (code >= EXIT_BASE && code < EXIT_BASE + 64)
        return fattn_error((fattn_status)(-(code - EXIT_BASE)), "%s", msg);
    return fattn_error(FATTN_E_INVALID_FILE, "reading %s failed in the child (exit %d)%s%s",
                       path, code, len ? ": " : "", msg);
}
