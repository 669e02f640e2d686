/* Guarded inputs and atomic outputs (see fileguard.h). */
#define _GNU_SOURCE /* syscall(SYS_getdents64) in the signal handler */
#include "fileguard.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <linux/fs.h> /* FICLONE */
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fattn_config.h"

/* ---- inputs ---------------------------------------------------------------- */

fattn_status fattn_fileguard_open_input(const char *path, int *fd)
{
    *fd = -1;
    /* O_NONBLOCK: opening a FIFO for reading blocks until a writer comes. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0)
        return fattn_error(FATTN_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        int e = errno;
        close(f);
        return fattn_error(FATTN_E_IO, "%s: fstat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return fattn_error(FATTN_E_INVALID_FILE,
                           "%s: not a regular file (%s): refused as input", path,
                           S_ISFIFO(sb.st_mode)  ? "a FIFO"
                           : S_ISDIR(sb.st_mode) ? "a directory"
                           : S_ISCHR(sb.st_mode) ? "a character device"
                           : S_ISBLK(sb.st_mode) ? "a block device"
                           : S_ISSOCK(sb.st_mode) ? "a socket"
                                                  : "not a file");
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(f);
        return fattn_error(FATTN_E_IO, "%s: fcntl: %s", path, strerror(e));
    }
    *fd = f;
    return FATTN_OK;
}

typedef struct pin {
    char *path;
    int fd;     /* what is read: the snapshot */
    dev_t dev;  /* the file itself, for outputs that are inputs */
    ino_t ino;
    char *snap; /* the snapshot's name */
    int slot;   /* its signal-cleanup slot */
} pin;

/* Every pinned input is read from a private snapshot, whatever its size, so
 * that a file rewritten in place cannot change between the isolated child's
 * check and the parent's reading ("every reader checks the file once and
 * works on what it checked"). */

/* The pins of this process; the lock guards the table, not the files. */
static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
static pin *pins;
static size_t n_pins, cap_pins;

static void snapshots_remove(void);
static pthread_once_t snapshots_once = PTHREAD_ONCE_INIT;
static pid_t snapshots_owner;
static void snapshots_at_exit(void)
{
    snapshots_owner = getpid(); /* a forked child's exit leaves them */
    atexit(snapshots_remove);
}

/* Copy size bytes of fd into m: a reflink first (FICLONE: btrfs and XFS
 * share the extents copy-on-write, so a later rewrite of the input does not
 * reach the copy and nothing is copied now), else the free space of m's
 * file system is checked and the bytes copied. 0, or an errno; *room the
 * free bytes when ENOSPC is answered by the check. */
static int snapshot_copy(int fd, int m, uint64_t size, uint64_t *room)
{
    if (ioctl(m, FICLONE, fd) == 0)
        return 0;
    struct statvfs vs;
    if (fstatvfs(m, &vs) == 0 && (uint64_t)vs.f_bavail * vs.f_frsize < size) {
        *room = (uint64_t)vs.f_bavail * vs.f_frsize;
        return ENOSPC;
    }
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    if (!buf)
        return ENOMEM;
    int err = 0;
    for (uint64_t done = 0; !err && done < size;) {
        ssize_t n = pread(fd, buf, cap, (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            err = n < 0 ? errno : 0;
            break; /* shorter now than at fstat: what was copied is what is checked */
        }
        for (ssize_t w = 0; !err && w < n;) {
            ssize_t k = write(m, buf + w, (size_t)(n - w));
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                err = k < 0 ? errno : EIO;
            else
                w += k;
        }
        done += (uint64_t)n;
    }
    free(buf);
    return err;
}

/* A private copy of `path`, open at fd (size bytes), in $TMPDIR (mode 0600,
 * "fattn-input-XXXXXX", removed when unpinned, at exit and on the cleanup
 * signals): the fd to read from in *out, its name in *name, its signal
 * slot in *slot. A named file, since libhdf5 resolves /proc/self/fd/N to a
 * path. FATTN_E_NOMEM naming the file, the directory and the cause when no
 * copy can be made (no room, not writable): the input is refused then, not
 * read unchecked. */
static fattn_status snapshot(const char *path, int fd, uint64_t size, int *out, char **name,
                             int *slot)
{
    const char *dir = getenv("TMPDIR");
    dir = dir && *dir ? dir : "/tmp";
    size_t cap = strlen(dir) + 32;
    char *tmpl = malloc(cap);
    if (!tmpl)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
    snprintf(tmpl, cap, "%s/fattn-input-XXXXXX", dir);
    int m = mkstemp(tmpl);
    if (m < 0) {
        int e = errno;
        free(tmpl);
        return fattn_error(FATTN_E_NOMEM, "%s: cannot make its private copy in %s: %s (set "
                           "TMPDIR to a writable directory with room)", path, dir, strerror(e));
    }
    if ((*slot = fattn_fileguard_scratch_register(tmpl)) < 0) {
        unlink(tmpl);
        close(m);
        free(tmpl);
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
    }
    pthread_once(&snapshots_once, snapshots_at_exit);
    uint64_t room = 0;
    int err = snapshot_copy(fd, m, size, &room);
    if (err) {
        fattn_fileguard_scratch_unregister(*slot);
        unlink(tmpl);
        close(m);
        fattn_status st =
            room || err == ENOSPC
                ? fattn_error(FATTN_E_NOMEM, "%s: no room for its private copy in %s (%llu bytes "
                              "needed, %llu free): refused (set TMPDIR to a directory with room)",
                              path, dir, (unsigned long long)size, (unsigned long long)room)
                : fattn_error(FATTN_E_NOMEM, "%s: cannot make its private copy in %s: %s "
                              "(set TMPDIR to a writable directory with room)",
                              path, dir, strerror(err));
        free(tmpl);
        return st;
    }
    *name = tmpl;
    *out = m;
    return FATTN_OK;
}

/* Close a pin's descriptor and remove its snapshot. */
static void pin_release(pin *p)
{
    close(p->fd);
    if (p->snap) {
        fattn_fileguard_scratch_unregister(p->slot);
        unlink(p->snap);
        free(p->snap);
        p->snap = NULL;
    }
}

static void snapshots_remove(void)
{
    if (getpid() != snapshots_owner)
        return;
    pthread_mutex_lock(&pin_lock);
    for (size_t i = 0; i < n_pins; i++)
        if (pins[i].snap)
            unlink(pins[i].snap);
    pthread_mutex_unlock(&pin_lock);
}

static pin *pin_find(const char *path)
{
    for (size_t i = 0; i < n_pins; i++)
        if (strcmp(pins[i].path, path) == 0)
            return &pins[i];
    return NULL;
}

fattn_status fattn_fileguard_pin(const char *path)
{
    int fd;
    fattn_status st = fattn_fileguard_open_input(path, &fd);
    if (st != FATTN_OK) {
        /* An older pin of the path no longer names what the path is. */
        fattn_fileguard_unpin(path);
        return st;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return fattn_error(FATTN_E_IO, "%s: fstat: %s", path, strerror(e));
    }
    pin np = {NULL, fd, sb.st_dev, sb.st_ino, NULL, -1};
    /* the copy is made before the table is locked: it may take a while */
    int m = -1;
    st = snapshot(path, fd, (uint64_t)sb.st_size, &m, &np.snap, &np.slot);
    close(fd);
    if (st != FATTN_OK) {
        fattn_fileguard_unpin(path);
        return st;
    }
    np.fd = m;
    pthread_mutex_lock(&pin_lock);
    pin *p = pin_find(path);
    if (p) {
        pin_release(p);
        np.path = p->path;
        *p = np;
    } else if (n_pins == cap_pins && cap_pins >= 4096) {
        st = fattn_error(FATTN_E_IO, "%s: too many input files open", path);
    } else {
        if (n_pins == cap_pins) {
            size_t cap = cap_pins ? 2 * cap_pins : 8;
            pin *grown = realloc(pins, cap * sizeof *grown);
            if (grown) {
                pins = grown;
                cap_pins = cap;
            }
        }
        char *copy = strdup(path);
        if (n_pins == cap_pins || !copy) {
            free(copy);
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
        } else {
            np.path = copy;
            pins[n_pins++] = np;
        }
    }
    if (st != FATTN_OK)
        pin_release(&np);
    pthread_mutex_unlock(&pin_lock);
    return st;
}

void fattn_fileguard_unpin(const char *path)
{
    pthread_mutex_lock(&pin_lock);
    pin *p = pin_find(path);
    if (p) {
        pin_release(p);
        free(p->path);
        *p = pins[--n_pins];
    }
    pthread_mutex_unlock(&pin_lock);
}

static bool proc_fd_usable(void)
{
    static atomic_int usable = -1;
    int u = atomic_load(&usable);
    if (u < 0) {
        u = access("/proc/self/fd", X_OK) == 0;
        atomic_store(&usable, u);
    }
    return u == 1;
}

const char *fattn_fileguard_read_path(const char *path, char *buf, size_t cap)
{
    if (!proc_fd_usable())
        return path;
    pthread_mutex_lock(&pin_lock);
    const pin *p = pin_find(path);
    int fd = p ? p->fd : -1;
    pthread_mutex_unlock(&pin_lock);
    if (fd < 0)
        return path;
    int n = snprintf(buf, cap, "/proc/self/fd/%d", fd);
    return n > 0 && (size_t)n < cap ? buf : path;
}

/* ---- outputs: checks ------------------------------------------------------- */

static fattn_status tmp_create(fattn_fileguard_tmp *t, int *err);

/* Is a pinned input the file `sb` describes, or pinned under `target`? */
static const char *pinned_as(const char *target, const struct stat *sb)
{
    const char *hit = NULL;
    pthread_mutex_lock(&pin_lock);
    for (size_t i = 0; i < n_pins && !hit; i++) {
        if (strcmp(pins[i].path, target) == 0)
            hit = pins[i].path;
        else if (sb && pins[i].dev == sb->st_dev && pins[i].ino == sb->st_ino)
            hit = pins[i].path;
    }
    pthread_mutex_unlock(&pin_lock);
    return hit;
}

fattn_status fattn_fileguard_check_target(const char *target)
{
    struct stat sb;
    bool exists = lstat(target, &sb) == 0;
    if (!exists && errno != ENOENT)
        return fattn_error(FATTN_E_IO, "%s: cannot check the output: %s", target,
                           strerror(errno));
    if (exists && S_ISLNK(sb.st_mode))
        return fattn_error(FATTN_E_INVALID_ARG,
                           "%s: the output is a symbolic link: refused (name the file itself)",
                           target);
    if (exists && !S_ISREG(sb.st_mode))
        return fattn_error(FATTN_E_INVALID_ARG,
                           "%s: the output exists and is not a regular file (%s): refused",
                           target,
                           S_ISFIFO(sb.st_mode)  ? "a FIFO"
                           : S_ISDIR(sb.st_mode) ? "a directory"
                           : S_ISCHR(sb.st_mode) ? "a character device"
                           : S_ISBLK(sb.st_mode) ? "a block device"
                                                 : "a socket");
    const char *in = pinned_as(target, exists ? &sb : NULL);
    if (in)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "%s: the output is an input of this command (%s): refused", target,
                           in);
    return FATTN_OK;
}

fattn_status fattn_fileguard_check_output(const char *target)
{
    fattn_status st = fattn_fileguard_check_target(target);
    if (st != FATTN_OK)
        return st;
    const char *slash = strrchr(target, '/');
    if (slash && !slash[1])
        return fattn_error(FATTN_E_INVALID_ARG, "%s: names a directory, not a file", target);
    char *dir = !slash ? strdup(".") : slash == target ? strdup("/")
                                                       : strndup(target, (size_t)(slash - target));
    if (!dir)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", target);
    struct stat sb;
    if (stat(dir, &sb) != 0)
        st = fattn_error(errno == ENOENT ? FATTN_E_INVALID_ARG : FATTN_E_IO,
                         "%s: cannot write there: directory %s: %s", target, dir,
                         strerror(errno));
    else if (!S_ISDIR(sb.st_mode))
        st = fattn_error(FATTN_E_INVALID_ARG, "%s: cannot write there: %s is not a directory",
                         target, dir);
    if (st == FATTN_OK) {
        /* A real file made and removed: permissions, a read-only file system,
         * ACLs and root's privileges all answer as the write itself will. */
        fattn_fileguard_tmp t;
        memset(&t, 0, sizeof t);
        t.fd = -1;
        t.slot = -1;
        int err = 0;
        if (!(t.target = strdup(target)))
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", target);
        else if (tmp_create(&t, &err) != FATTN_OK)
            st = fattn_error(FATTN_E_INVALID_ARG, "%s: cannot write there: cannot create a file "
                             "in directory %s: %s", target, dir, err ? strerror(err)
                                                                     : fattn_last_error());
        fattn_fileguard_tmp_discard(&t);
    }
    free(dir);
    return st;
}

fattn_status fattn_fileguard_check_distinct(const char *out, const char *const *inputs,
                                            size_t n)
{
    struct stat so;
    bool out_exists = stat(out, &so) == 0;
    for (size_t i = 0; i < n; i++) {
        if (!inputs[i])
            continue;
        struct stat si;
        bool same = strcmp(out, inputs[i]) == 0 ||
                    (out_exists && stat(inputs[i], &si) == 0 && si.st_dev == so.st_dev &&
                     si.st_ino == so.st_ino);
        if (same)
            return fattn_error(FATTN_E_INVALID_ARG,
                               "%s: the output is an input of this command (%s): refused", out,
                               inputs[i]);
    }
    return FATTN_OK;
}

/* ---- outputs: temporary files and signals ---------------------------------- */

/* What the signal handler cleans up, in slots of chunks that are only ever
 * added (never freed or moved), so that the handler can walk them with
 * plain loads while another thread registers: a slot's fields are written
 * while the signals are blocked and then published by `used`; a new chunk
 * is filled before it is linked. Registration takes a lock (threads), the
 * handler none. Each slot records the process that registered it: a forked
 * child inherits the table and the handler, and must not remove its
 * parent's files. */
enum { TMP_CHUNK = 16, TMP_PATH_MAX = 4352 };
enum { SLOT_FILE = 1, SLOT_DIR = 2, SLOT_CHILD = 3 };
typedef struct tmp_chunk {
    char paths[TMP_CHUNK][TMP_PATH_MAX];
    volatile sig_atomic_t used[TMP_CHUNK]; /* 0, or a SLOT_ kind */
    volatile sig_atomic_t owner[TMP_CHUNK]; /* the registering pid */
    volatile sig_atomic_t child[TMP_CHUNK]; /* SLOT_CHILD: its pid */
    struct tmp_chunk *_Atomic next;
} tmp_chunk;
static tmp_chunk tmp_first;
static pthread_mutex_t tmp_lock = PTHREAD_MUTEX_INITIALIZER;
/* SIGPIPE: --progress into a closed pipe kills the process mid-write */
static const int cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
enum { N_CLEANUP_SIGNALS = sizeof cleanup_signals / sizeof cleanup_signals[0] };
static struct sigaction old_actions[N_CLEANUP_SIGNALS];
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
static atomic_uint tmp_counter;

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
 * into a scratch directory), then files, then directories. */
static void on_signal(int sig)
{
    int saved = errno;
    sig_atomic_t me = (sig_atomic_t)getpid();
    for (int kind = SLOT_CHILD; kind >= SLOT_FILE; kind--)
        for (tmp_chunk *c = &tmp_first; c; c = atomic_load(&c->next))
            for (int i = 0; i < TMP_CHUNK; i++) {
                if (c->used[i] != kind || c->owner[i] != me)
                    continue;
                if (kind == SLOT_CHILD) {
                    kill((pid_t)c->child[i], SIGKILL);
                    waitpid((pid_t)c->child[i], NULL, 0);
                } else if (kind == SLOT_FILE) {
                    unlink(c->paths[i]);
                } else {
                    remove_dir_in_handler(c->paths[i]);
                }
            }
    for (int k = 0; k < N_CLEANUP_SIGNALS; k++)
        if (cleanup_signals[k] == sig)
            sigaction(sig, &old_actions[k], NULL);
    errno = saved;
    raise(sig);
}

static void install_handlers(void)
{
    for (int k = 0; k < N_CLEANUP_SIGNALS; k++) {
        struct sigaction old;
        if (sigaction(cleanup_signals[k], NULL, &old) != 0)
            continue;
        old_actions[k] = old;
        /* An ignored signal stays ignored (nohup), a handler of the
         * program's own stays its own. */
        if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigfillset(&sa.sa_mask);
        sigaction(cleanup_signals[k], &sa, NULL);
    }
}

static void block_signals(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    for (int k = 0; k < N_CLEANUP_SIGNALS; k++)
        sigaddset(&set, cleanup_signals[k]);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

/* A free slot (chunk *c, index) of a new registration, a chunk added when
 * all are taken; -1 when none can be had (a name too long, or no memory for
 * a chunk). Call with the signals blocked. */
static int tmp_register_kind(int kind, const char *path, pid_t child)
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

static int tmp_register(const char *path)
{
    return tmp_register_kind(SLOT_FILE, path, 0);
}

static void tmp_release_slot(int slot)
{
    if (slot < 0)
        return;
    sigset_t old;
    block_signals(&old);
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
    pthread_once(&handlers_once, install_handlers);
    sigset_t old;
    block_signals(&old);
    int slot = tmp_register_kind(kind, path, child);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return slot;
}

int fattn_fileguard_scratch_register(const char *path)
{
    return register_blocked(SLOT_FILE, path, 0);
}

void fattn_fileguard_scratch_unregister(int slot)
{
    tmp_release_slot(slot);
}

int fattn_fileguard_scratch_dir_register(const char *dir)
{
    return register_blocked(SLOT_DIR, dir, 0);
}

pid_t fattn_fileguard_fork_child(int *slot)
{
    *slot = -1;
    pthread_once(&handlers_once, install_handlers);
    /* No moment in which the child exists unregistered. */
    sigset_t old;
    block_signals(&old);
    pid_t pid = fork();
    if (pid > 0)
        *slot = tmp_register_kind(SLOT_CHILD, NULL, pid);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return pid;
}

static void tmp_unregister(fattn_fileguard_tmp *t)
{
    tmp_release_slot(t->slot);
    t->slot = -1;
}

static void tmp_free(fattn_fileguard_tmp *t)
{
    free(t->target);
    free(t->path);
    t->target = t->path = NULL;
}

/* Create ".<base>.tmp-<pid>-<n>" beside t->target, open and registered;
 * *err gets open's errno on failure. */
static fattn_status tmp_create(fattn_fileguard_tmp *t, int *err)
{
    const char *target = t->target;
    const char *slash = strrchr(target, '/');
    size_t dirlen = slash ? (size_t)(slash - target) + 1 : 0;
    const char *base = target + dirlen;
    if (!*base)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: not a file name", target);
    size_t cap = strlen(target) + 64;
    if (!(t->path = malloc(cap)))
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", target);
    pthread_once(&handlers_once, install_handlers);
    fattn_status st = FATTN_OK;
    for (int attempt = 0; attempt < 100 && t->fd < 0 && st == FATTN_OK; attempt++) {
        unsigned k = atomic_fetch_add(&tmp_counter, 1u);
        /* the base cut to 200 bytes: an output name near NAME_MAX (255)
         * still has a temporary name that fits */
        snprintf(t->path, cap, "%.*s.%.200s.tmp-%ld-%u", (int)dirlen, target, base,
                 (long)getpid(), k);
        /* No moment between the file's creation and its registration. */
        sigset_t old;
        block_signals(&old);
        t->fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        int e = errno;
        if (t->fd >= 0)
            t->slot = tmp_register(t->path);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (t->fd < 0 && e != EEXIST) {
            *err = e;
            st = fattn_error(FATTN_E_IO, "%s: cannot create temporary file %s: %s", target,
                             t->path, strerror(e));
        }
    }
    if (st == FATTN_OK && t->fd < 0)
        st = fattn_error(FATTN_E_IO, "%s: no free temporary name", target);
    return st;
}

fattn_status fattn_fileguard_tmp_open(const char *target, fattn_fileguard_tmp *t)
{
    memset(t, 0, sizeof *t);
    t->fd = -1;
    t->slot = -1;
    fattn_status st = fattn_fileguard_check_target(target);
    if (st != FATTN_OK)
        return st;
    if (!(t->target = strdup(target)))
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", target);
    int err = 0;
    st = tmp_create(t, &err);
    if (st != FATTN_OK)
        fattn_fileguard_tmp_discard(t);
    return st;
}

void fattn_fileguard_tmp_discard(fattn_fileguard_tmp *t)
{
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    if (t->path)
        unlink(t->path);
    tmp_unregister(t);
    tmp_free(t);
}

static fattn_status fsync_dir_of(const char *target)
{
    const char *slash = strrchr(target, '/');
    char *dir;
    if (!slash)
        dir = strdup(".");
    else if (slash == target)
        dir = strdup("/");
    else
        dir = strndup(target, (size_t)(slash - target));
    if (!dir)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", target);
    fattn_status st = FATTN_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0)
        st = fattn_error(FATTN_E_IO, "%s: fsync of directory %s: %s", target, dir, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(dir);
    return st;
}

#if FATTN_TESTING
/* FATTN_TEST_WRITE_PAUSE=S: wait S seconds before the rename, so that a
 * test can signal a process whose temporary file exists. */
static void test_pause(void)
{
    const char *e = getenv("FATTN_TEST_WRITE_PAUSE");
    int s = e ? atoi(e) : 0;
    for (int i = 0; i < 10 * s && i < 600; i++) {
        struct timespec ts = {0, 100000000L};
        nanosleep(&ts, NULL);
    }
}
#endif

fattn_status fattn_fileguard_tmp_commit(fattn_fileguard_tmp *t)
{
    assert(t->target && t->path);
    fattn_status st = FATTN_OK;
    if (t->fd >= 0) {
        if (fsync(t->fd) != 0)
            st = fattn_error(FATTN_E_IO, "%s: fsync %s: %s", t->target, t->path, strerror(errno));
        int rc = close(t->fd);
        t->fd = -1;
        if (st == FATTN_OK && rc != 0)
            st = fattn_error(FATTN_E_IO, "%s: close %s: %s", t->target, t->path, strerror(errno));
    }
#if FATTN_TESTING
    test_pause();
#endif
    /* The target again: it may have become something else meanwhile. */
    if (st == FATTN_OK)
        st = fattn_fileguard_check_target(t->target);
    if (st == FATTN_OK && rename(t->path, t->target) != 0)
        st = fattn_error(FATTN_E_IO, "%s: rename from %s: %s", t->target, t->path,
                         strerror(errno));
    if (st != FATTN_OK) {
        fattn_fileguard_tmp_discard(t);
        return st;
    }
    tmp_unregister(t);
    st = fsync_dir_of(t->target);
    tmp_free(t);
    return st;
}

fattn_status fattn_fileguard_write_text(const char *target, const char *data, size_t len)
{
    fattn_fileguard_tmp t;
    fattn_status st = fattn_fileguard_tmp_open(target, &t);
    if (st != FATTN_OK)
        return st;
    size_t done = 0;
    while (st == FATTN_OK && done < len) {
        ssize_t n = write(t.fd, data + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            st = fattn_error(FATTN_E_IO, "%s: write %s: %s", target, t.path,
                             n < 0 ? strerror(errno) : "no progress");
        else
            done += (size_t)n;
    }
    if (st != FATTN_OK) {
        fattn_fileguard_tmp_discard(&t);
        return st;
    }
    return fattn_fileguard_tmp_commit(&t);
}
