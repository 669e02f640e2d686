/* The private copy every pinned input is read from (fileguard.h): holes
 * kept, bounded by the bytes the input really holds, the room left and,
 * where $TMPDIR lives in memory, --max-memory. */
#define _GNU_SOURCE /* SEEK_DATA, SEEK_HOLE */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h> /* FICLONE */
#include <linux/magic.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fileguard.h"
#include "fileguard_slots.h"

#ifndef RAMFS_MAGIC
#define RAMFS_MAGIC 0x858458f6UL
#endif

/* --max-memory as the commands set it; 0 until then (no bound). */
static _Atomic double memory_bound;

void fh_fileguard_set_memory_bound(double bytes)
{
    memory_bound = bytes > 0 ? bytes : 0;
}

double fh_fileguard_memory_bound(void)
{
    return memory_bound;
}

bool fh_fileguard_memory_backed(const char *dir)
{
    struct statfs fs;
    return statfs(dir, &fs) == 0 &&
           ((unsigned long)fs.f_type == TMPFS_MAGIC || (unsigned long)fs.f_type == RAMFS_MAGIC);
}

/* The bytes of fd's data extents below size (SEEK_DATA/SEEK_HOLE: holes
 * are not data; a file system that cannot tell reports all data): what a
 * copy that keeps the holes writes at most. */
static uint64_t data_bytes(int fd, uint64_t size)
{
    uint64_t sum = 0;
    for (off_t pos = 0; (uint64_t)pos < size;) {
        off_t data = lseek(fd, pos, SEEK_DATA);
        if (data < 0)
            return errno == ENXIO ? sum : sum + (size - (uint64_t)pos); /* ENXIO: a hole to the end */
        if ((uint64_t)data >= size)
            break;
        off_t hole = lseek(fd, data, SEEK_HOLE);
        if (hole < 0 || (uint64_t)hole > size)
            hole = (off_t)size;
        sum += (uint64_t)(hole - data);
        pos = hole;
    }
    return sum;
}

static bool all_zero(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* pwrite all n bytes at off; 0 or an errno. */
static int write_at(int m, const char *buf, size_t n, off_t off)
{
    for (size_t w = 0; w < n;) {
        ssize_t k = pwrite(m, buf + w, n - w, off + (off_t)w);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? errno : EIO;
        w += (size_t)k;
    }
    return 0;
}

/* Copy fd's data extents below size into m at the same offsets, leaving
 * holes where fd has them and where a block of data is all zeros, at most
 * `budget` bytes written (a file that grew meanwhile: what was copied is
 * what is checked); then m is size bytes long. 0, or an errno. */
static int copy_extents(int fd, int m, uint64_t size, uint64_t budget)
{
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    if (!buf)
        return ENOMEM;
    int err = 0;
    uint64_t written = 0;
    for (off_t pos = 0; !err && (uint64_t)pos < size && written < budget;) {
        off_t data = lseek(fd, pos, SEEK_DATA), hole;
        if (data < 0 && errno == ENXIO)
            break;
        if (data < 0) { /* no SEEK_DATA here: all of it is data */
            data = pos;
            hole = (off_t)size;
        } else if ((hole = lseek(fd, data, SEEK_HOLE)) < 0 || (uint64_t)hole > size) {
            hole = (off_t)size;
        }
        for (off_t at = data; !err && at < hole && written < budget;) {
            size_t want = (size_t)((uint64_t)(hole - at) < cap ? (uint64_t)(hole - at) : cap);
            ssize_t n = pread(fd, buf, want, at);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                err = n < 0 ? errno : 0;
                hole = at; /* shorter now than at fstat */
                break;
            }
            if ((uint64_t)n > budget - written)
                n = (ssize_t)(budget - written);
            if (!all_zero(buf, (size_t)n)) {
                err = write_at(m, buf, (size_t)n, at);
                written += (uint64_t)n;
            }
            at += n;
        }
        pos = hole;
    }
    free(buf);
    if (!err && ftruncate(m, (off_t)size) != 0)
        err = errno;
    return err;
}

/* Why a copy of `need` bytes of data (size bytes long) cannot be made in
 * dir, before anything is written: the file-size limit (a write past it
 * would raise SIGXFSZ), the free space, and --max-memory where dir lives
 * in memory. FATTN_OK when it can. */
static fattn_status copy_fits(const char *path, const char *dir, int m, uint64_t size,
                              uint64_t need, uint64_t pinned_mem, bool in_memory)
{
    struct rlimit fl;
    if (getrlimit(RLIMIT_FSIZE, &fl) == 0 && fl.rlim_cur != RLIM_INFINITY &&
        size > (uint64_t)fl.rlim_cur)
        return fattn_error(FATTN_E_NOMEM, "%s: cannot make its private copy in %s: it is %llu "
                           "bytes long, past the file-size limit of %llu bytes (ulimit -f): "
                           "refused", path, dir, (unsigned long long)size,
                           (unsigned long long)fl.rlim_cur);
    struct statvfs vs;
    if (fstatvfs(m, &vs) == 0 && (uint64_t)vs.f_bavail * vs.f_frsize < need)
        return fattn_error(FATTN_E_NOMEM, "%s: no room for its private copy in %s (%llu bytes "
                           "needed, %llu free): refused (set TMPDIR to a directory with room)",
                           path, dir, (unsigned long long)need,
                           (unsigned long long)((uint64_t)vs.f_bavail * vs.f_frsize));
    double bound = fh_fileguard_memory_bound();
    if (in_memory && bound > 0 && (double)(need + pinned_mem) > bound)
        return fattn_error(FATTN_E_NOMEM, "%s: its private copy would hold %llu bytes of memory "
                           "in %s (a memory-backed file system)%s%llu with the other inputs' "
                           "copies, over --max-memory %.0f: refused (set TMPDIR to a directory "
                           "on disk)", path, (unsigned long long)need, dir,
                           pinned_mem ? ", " : ": ", (unsigned long long)(need + pinned_mem),
                           bound);
    return FATTN_OK;
}

fattn_status fh_fileguard_copy_make(const char *path, int fd, const struct stat *sb,
                                       uint64_t pinned_mem, int *out, char **name, int *slot,
                                       uint64_t *mem)
{
    *out = -1;
    *name = NULL;
    *slot = -1;
    *mem = 0;
    const char *dir = getenv("TMPDIR");
    dir = dir && *dir ? dir : "/tmp";
    size_t cap = strlen(dir) + 32;
    char *tmpl = malloc(cap);
    if (!tmpl)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
    snprintf(tmpl, cap, "%s/fattn-input-XXXXXX", dir);
    /* created and registered with the signals held off: no moment leaves
     * it behind */
    fh_fileguard_signals_install();
    sigset_t old;
    fh_fileguard_signals_block(&old);
    int m = mkstemp(tmpl), e = errno;
    if (m >= 0 && (*slot = fh_fileguard_slot_add(FH_SLOT_FILE, tmpl, 0)) < 0) {
        unlink(tmpl);
        close(m);
        m = -1;
        e = ENOMEM;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (m < 0) {
        free(tmpl);
        return fattn_error(FATTN_E_NOMEM, "%s: cannot make its private copy in %s: %s (set "
                           "TMPDIR to a writable directory with room)", path, dir, strerror(e));
    }
    uint64_t size = (uint64_t)sb->st_size;
    bool in_memory = fh_fileguard_memory_backed(dir);
    fattn_status st = FATTN_OK;
    /* A reflink shares the extents copy-on-write (btrfs, XFS): nothing is
     * written now, and a later rewrite of the input does not reach it. */
    if (ioctl(m, FICLONE, fd) != 0) {
        uint64_t need = data_bytes(fd, size);
        if ((st = copy_fits(path, dir, m, size, need, pinned_mem, in_memory)) != FATTN_OK)
            goto out;
        int err = copy_extents(fd, m, size, need);
        if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
            st = fattn_error(FATTN_E_NOMEM, "%s: no room for its private copy in %s (%llu bytes "
                             "needed): %s: refused (set TMPDIR to a directory with room)", path,
                             dir, (unsigned long long)need, strerror(err));
            goto out;
        }
        if (err) {
            st = fattn_error(FATTN_E_NOMEM, "%s: cannot make its private copy in %s: %s (set "
                             "TMPDIR to a writable directory with room)", path, dir,
                             strerror(err));
            goto out;
        }
    }
    struct stat cs;
    if (in_memory && fstat(m, &cs) == 0)
        *mem = (uint64_t)cs.st_blocks * 512u;
    *name = tmpl;
    *out = m;
out:
    if (st != FATTN_OK) {
        fh_fileguard_scratch_unregister(*slot);
        *slot = -1;
        unlink(tmpl);
        close(m);
        free(tmpl);
    }
    return st;
}
