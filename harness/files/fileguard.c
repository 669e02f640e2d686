/* Guarded inputs and atomic outputs (see fileguard.h). */
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fattn_config.h"
#include "fileguard_slots.h"

/* ---- inputs ---------------------------------------------------------------- */

fattn_status fh_fileguard_open_input(const char *path, int *fd)
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
    off_t size; /* and what it was when copied, to tell it unchanged */
    struct timespec mtime, ctime;
    char *snap; /* the snapshot's name */
    int slot;   /* its signal-cleanup slot */
    uint64_t mem; /* the bytes the snapshot holds in memory (tmpfs), else 0 */
} pin;

/* Every pinned input is read from a private snapshot, whatever its size, so
 * that a file rewritten in place cannot change between the isolated child's
 * check and the parent's reading ("every reader checks the file once and
 * works on what it checked"). One snapshot per input at a time: pinning a
 * path again keeps its snapshot while the file is the one copied (same
 * inode, size and times), else removes it before the new one is made. */

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

/* Close a pin's descriptor and remove its snapshot. */
static void pin_release(pin *p)
{
    close(p->fd);
    if (p->snap) {
        fh_fileguard_scratch_unregister(p->slot);
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

static bool same_time(struct timespec a, struct timespec b)
{
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* Is `path` pinned to a snapshot of the very file sb describes, unchanged
 * since it was copied? Else its old pin (if any) is released. */
static bool pin_still_current(const char *path, const struct stat *sb)
{
    pthread_mutex_lock(&pin_lock);
    pin *p = pin_find(path);
    bool same = p && p->dev == sb->st_dev && p->ino == sb->st_ino && p->size == sb->st_size &&
                same_time(p->mtime, sb->st_mtim) && same_time(p->ctime, sb->st_ctim);
    pthread_mutex_unlock(&pin_lock);
    if (p && !same)
        fh_fileguard_unpin(path);
    return same;
}

uint64_t fh_fileguard_pinned_memory(void)
{
    uint64_t sum = 0;
    pthread_mutex_lock(&pin_lock);
    for (size_t i = 0; i < n_pins; i++)
        sum += pins[i].mem;
    pthread_mutex_unlock(&pin_lock);
    return sum;
}

fattn_status fh_fileguard_pin(const char *path)
{
    int fd;
    fattn_status st = fh_fileguard_open_input(path, &fd);
    if (st != FATTN_OK) {
        /* An older pin of the path no longer names what the path is. */
        fh_fileguard_unpin(path);
        return st;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return fattn_error(FATTN_E_IO, "%s: fstat: %s", path, strerror(e));
    }
    if (pin_still_current(path, &sb)) {
        close(fd);
        return FATTN_OK;
    }
    pin np = {NULL, fd, sb.st_dev, sb.st_ino, sb.st_size, sb.st_mtim, sb.st_ctim, NULL, -1, 0};
    pthread_once(&snapshots_once, snapshots_at_exit);
    /* the copy is made before the table is locked: it may take a while */
    int m = -1;
    st = fh_fileguard_copy_make(path, fd, &sb, fh_fileguard_pinned_memory(), &m, &np.snap,
                                   &np.slot, &np.mem);
    close(fd);
    if (st != FATTN_OK)
        return st;
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

void fh_fileguard_unpin(const char *path)
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

const char *fh_fileguard_read_path(const char *path, char *buf, size_t cap)
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

static fattn_status tmp_create(fh_fileguard_tmp *t, int *err);

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

fattn_status fh_fileguard_check_target(const char *target)
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

fattn_status fh_fileguard_check_output(const char *target)
{
    fattn_status st = fh_fileguard_check_target(target);
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
    if (stat(dir, &sb) != 0) {
        st = fattn_error(errno == ENOENT ? FATTN_E_INVALID_ARG : FATTN_E_IO,
                         "%s: cannot write there: directory %s: %s", target, dir,
                         strerror(errno));
        goto out;
    }
    if (!S_ISDIR(sb.st_mode)) {
        st = fattn_error(FATTN_E_INVALID_ARG, "%s: cannot write there: %s is not a directory",
                         target, dir);
        goto out;
    }
    /* A real file made and removed: permissions, a read-only file system,
     * ACLs and root's privileges all answer as the write itself will. */
    fh_fileguard_tmp t;
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
    fh_fileguard_tmp_discard(&t);
out:
    free(dir);
    return st;
}

fattn_status fh_fileguard_check_distinct(const char *out, const char *const *inputs,
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

/* ---- outputs: temporary files --------------------------------------------- */

static atomic_uint tmp_counter;

static void tmp_unregister(fh_fileguard_tmp *t)
{
    fh_fileguard_scratch_unregister(t->slot);
    t->slot = -1;
}

static void tmp_free(fh_fileguard_tmp *t)
{
    free(t->target);
    free(t->path);
    t->target = t->path = NULL;
}

/* Create ".<base>.tmp-<pid>-<n>" beside t->target, open and registered;
 * *err gets open's errno on failure. */
static fattn_status tmp_create(fh_fileguard_tmp *t, int *err)
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
    fh_fileguard_signals_install();
    for (int attempt = 0; attempt < 100 && t->fd < 0; attempt++) {
        unsigned k = atomic_fetch_add(&tmp_counter, 1u);
        /* the base cut to 200 bytes: an output name near NAME_MAX (255)
         * still has a temporary name that fits */
        snprintf(t->path, cap, "%.*s.%.200s.tmp-%ld-%u", (int)dirlen, target, base,
                 (long)getpid(), k);
        /* No moment between the file's creation and its registration. */
        sigset_t old;
        fh_fileguard_signals_block(&old);
        t->fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        int e = errno;
        if (t->fd >= 0)
            t->slot = fh_fileguard_slot_add(FH_SLOT_FILE, t->path, 0);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (t->fd < 0 && e != EEXIST) {
            *err = e;
            return fattn_error(FATTN_E_IO, "%s: cannot create temporary file %s: %s", target,
                               t->path, strerror(e));
        }
    }
    if (t->fd < 0)
        return fattn_error(FATTN_E_IO, "%s: no free temporary name", target);
    return FATTN_OK;
}

fattn_status fh_fileguard_tmp_open(const char *target, fh_fileguard_tmp *t)
{
    memset(t, 0, sizeof *t);
    t->fd = -1;
    t->slot = -1;
    fattn_status st = fh_fileguard_check_target(target);
    if (st != FATTN_OK)
        return st;
    if (!(t->target = strdup(target)))
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", target);
    int err = 0;
    st = tmp_create(t, &err);
    if (st != FATTN_OK)
        fh_fileguard_tmp_discard(t);
    return st;
}

void fh_fileguard_tmp_discard(fh_fileguard_tmp *t)
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

fattn_status fh_fileguard_tmp_commit(fh_fileguard_tmp *t)
{
    assert(t->target && t->path);
    fattn_status st = FATTN_OK;
    if (t->fd >= 0) {
        /* The descriptor is closed even after a failed fsync, whose error
         * is the one reported. */
        int sync_rc = fsync(t->fd), sync_errno = errno;
        int rc = close(t->fd), close_errno = errno;
        t->fd = -1;
        if (sync_rc != 0)
            st = fattn_error(FATTN_E_IO, "%s: fsync %s: %s", t->target, t->path,
                             strerror(sync_errno));
        else if (rc != 0)
            st = fattn_error(FATTN_E_IO, "%s: close %s: %s", t->target, t->path,
                             strerror(close_errno));
    }
#if FATTN_TESTING
    test_pause();
#endif
    if (st != FATTN_OK)
        goto out;
    /* The target again: it may have become something else meanwhile. */
    if ((st = fh_fileguard_check_target(t->target)) != FATTN_OK)
        goto out;
    if (rename(t->path, t->target) != 0) {
        st = fattn_error(FATTN_E_IO, "%s: rename from %s: %s", t->target, t->path,
                         strerror(errno));
        goto out;
    }
    tmp_unregister(t);
    st = fsync_dir_of(t->target);
    tmp_free(t);
    return st;
out:
    /* not renamed: the temporary file goes */
    fh_fileguard_tmp_discard(t);
    return st;
}

fattn_status fh_fileguard_write_text(const char *target, const char *data, size_t len)
{
    fh_fileguard_tmp t;
    fattn_status st = fh_fileguard_tmp_open(target, &t);
    if (st != FATTN_OK)
        return st;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(t.fd, data + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            st = fattn_error(FATTN_E_IO, "%s: write %s: %s", target, t.path,
                             n < 0 ? strerror(errno) : "no progress");
            goto out;
        }
        done += (size_t)n;
    }
    return fh_fileguard_tmp_commit(&t);
out:
    fh_fileguard_tmp_discard(&t);
    return st;
}
