/* The cleanup on signals of fileguard.h: temporary and scratch files,
 * scratch directories, the private copies of inputs and forked children,
 * removed (killed) by a handler on every signal whose default action ends
 * the process. */
#define _GNU_SOURCE /* syscall(SYS_getdents64) in the signal handler */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fileguard.h"
#include "fileguard_slots.h"

/* What the signal handler cleans up, in slots of chunks that are only ever
 * added (never freed or moved), so that the handler can walk them with
 * plain loads while another thread registers: a slot's fields are written
 * while the signals are blocked and then published by `used`; a new chunk
 * is filled before it is linked. Registration takes a lock (threads), the
 * handler none. Each slot records the process that registered it: a forked
 * child inherits the table and the handler, and must not remove its
 * parent's files. */
enum { TMP_CHUNK = 16, TMP_PATH_MAX = 4352 };
typedef struct tmp_chunk {
    char paths[TMP_CHUNK][TMP_PATH_MAX];
    volatile sig_atomic_t used[TMP_CHUNK]; /* 0, or a FH_SLOT_ kind */
    volatile sig_atomic_t owner[TMP_CHUNK]; /* the registering pid */
    volatile sig_atomic_t child[TMP_CHUNK]; /* FH_SLOT_CHILD: its pid */
    struct tmp_chunk *_Atomic next;
} tmp_chunk;
static tmp_chunk tmp_first;
static pthread_mutex_t tmp_lock = PTHREAD_MUTEX_INITIALIZER;

/* Every signal whose default action ends the process (signal(7): Term and
 * Core), SIGKILL aside, which no handler sees; all of them are blocked
 * while a file is created and registered. The faults (SIGSEGV and its
 * kind, SIGABRT from abort() and a failed assert()) are listed apart: a
 * real one cannot be held off, only one sent by kill(2) can. The
 * real-time signals (SIGRTMIN..SIGRTMAX) end the process by default too
 * and are added when the handler is installed. */
static const int async_signals[] = {
    SIGHUP,  SIGINT,    SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM, SIGTERM,
    SIGXCPU, SIGXFSZ,   SIGVTALRM, SIGPROF, SIGIO, SIGPWR,
#ifdef SIGSTKFLT
    SIGSTKFLT,
#endif
};
static const int sync_signals[] = {SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV, SIGSYS};
enum { N_ASYNC = sizeof async_signals / sizeof async_signals[0],
       N_SYNC = sizeof sync_signals / sizeof sync_signals[0] };
/* What each signal did before (indexed by number; real-time ones too). */
static struct sigaction old_actions[_NSIG];
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;

/* Async-signal-safe: remove the plain files directly in dir (a scratch
 * directory holds no subdirectories), then dir. getdents64 is the system
 * call; readdir may allocate. */
static void remove_dir_in_handler(const char *dir)
{
    /* a few passes: entries removed while the directory is read may make
     * getdents64 skip others */
    for (int pass = 0; rmdir(dir) != 0 && errno == ENOTEMPTY && pass < 4; pass++) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            break;
        char buf[4096] __attribute__((aligned(8)));
        for (;;) {
            long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
            if (n <= 0)
                break;
            for (long off = 0; off < n;) {
                /* struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, name */
                unsigned short reclen;
                memcpy(&reclen, buf + off + 16, sizeof reclen);
                const char *name = buf + off + 19;
                if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0)
                    unlinkat(fd, name, 0);
                off += reclen;
            }
        }
        close(fd);
    }
}

/* Async-signal-safe: kill, waitpid, unlink, open, getdents64, unlinkat,
 * rmdir, sigaction and raise only. Children first (they may be writing
 * into a scratch directory), then files, then directories; then the
 * signal's previous disposition is restored and the signal raised again,
 * so that the process ends as it would have (a synchronous fault recurs
 * when the handler returns and meets the default action). */
static void on_signal(int sig)
{
    int saved = errno;
    sig_atomic_t me = (sig_atomic_t)getpid();
    for (int kind = FH_SLOT_CHILD; kind >= FH_SLOT_FILE; kind--)
        for (tmp_chunk *c = &tmp_first; c; c = atomic_load(&c->next))
            for (int i = 0; i < TMP_CHUNK; i++) {
                if (c->used[i] != kind || c->owner[i] != me)
                    continue;
                if (kind == FH_SLOT_CHILD) {
                    kill((pid_t)c->child[i], SIGKILL);
                    waitpid((pid_t)c->child[i], NULL, 0);
                } else if (kind == FH_SLOT_FILE) {
                    unlink(c->paths[i]);
                } else {
                    remove_dir_in_handler(c->paths[i]);
                }
            }
    if (sig > 0 && sig < _NSIG)
        sigaction(sig, &old_actions[sig], NULL);
    errno = saved;
    raise(sig);
}

static void install_one(int sig)
{
    struct sigaction old;
    if (sig <= 0 || sig >= _NSIG || sigaction(sig, NULL, &old) != 0)
        return;
    old_actions[sig] = old;
    /* An ignored signal stays ignored (nohup), a handler of the program's
     * own (a sanitizer's) stays its own. */
    if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigfillset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

static void install_handlers(void)
{
    for (int k = 0; k < N_ASYNC; k++)
        install_one(async_signals[k]);
    for (int k = 0; k < N_SYNC; k++)
        install_one(sync_signals[k]);
    for (int s = SIGRTMIN; s <= SIGRTMAX; s++)
        install_one(s);
}

void fh_fileguard_signals_install(void)
{
    pthread_once(&handlers_once, install_handlers);
}

void fh_fileguard_signals_block(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    for (int k = 0; k < N_ASYNC; k++)
        sigaddset(&set, async_signals[k]);
    /* the faults too: sent with kill(2) they are as asynchronous as the
     * rest (a real fault in these few instructions still ends the process,
     * its handler unseen) */
    for (int k = 0; k < N_SYNC; k++)
        sigaddset(&set, sync_signals[k]);
    for (int s = SIGRTMIN; s <= SIGRTMAX; s++)
        sigaddset(&set, s);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

int fh_fileguard_slot_add(int kind, const char *path, pid_t child)
{
    if (path && strlen(path) >= TMP_PATH_MAX)
        return -1;
    pthread_mutex_lock(&tmp_lock);
    int slot = -1, base = 0;
    for (tmp_chunk *c = &tmp_first; c && slot < 0; base += TMP_CHUNK) {
        for (int i = 0; i < TMP_CHUNK; i++)
            if (!c->used[i]) {
                if (path)
                    memcpy(c->paths[i], path, strlen(path) + 1);
                c->owner[i] = (sig_atomic_t)getpid();
                c->child[i] = (sig_atomic_t)child;
                atomic_thread_fence(memory_order_seq_cst); /* fields before `used` */
                c->used[i] = kind;
                slot = base + i;
                break;
            }
        tmp_chunk *next = atomic_load(&c->next);
        if (slot < 0 && !next) {
            next = calloc(1, sizeof *next); /* linked only once zeroed */
            if (next)
                atomic_store(&c->next, next);
        }
        c = next;
    }
    pthread_mutex_unlock(&tmp_lock);
    return slot;
}

void fh_fileguard_scratch_unregister(int slot)
{
    if (slot < 0)
        return;
    sigset_t old;
    fh_fileguard_signals_block(&old);
    pthread_mutex_lock(&tmp_lock);
    tmp_chunk *c = &tmp_first;
    for (int k = slot / TMP_CHUNK; k > 0 && c; k--)
        c = atomic_load(&c->next);
    assert(c && c->used[slot % TMP_CHUNK]);
    if (c)
        c->used[slot % TMP_CHUNK] = 0;
    pthread_mutex_unlock(&tmp_lock);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static int register_blocked(int kind, const char *path, pid_t child)
{
    fh_fileguard_signals_install();
    sigset_t old;
    fh_fileguard_signals_block(&old);
    int slot = fh_fileguard_slot_add(kind, path, child);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return slot;
}

int fh_fileguard_scratch_register(const char *path)
{
    return register_blocked(FH_SLOT_FILE, path, 0);
}

int fh_fileguard_scratch_dir_register(const char *dir)
{
    return register_blocked(FH_SLOT_DIR, dir, 0);
}

pid_t fh_fileguard_fork_child(int *slot)
{
    *slot = -1;
    fh_fileguard_signals_install();
    /* No moment in which the child exists unregistered. */
    sigset_t old;
    fh_fileguard_signals_block(&old);
    pid_t pid = fork();
    if (pid > 0)
        *slot = fh_fileguard_slot_add(FH_SLOT_CHILD, NULL, pid);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return pid;
}
