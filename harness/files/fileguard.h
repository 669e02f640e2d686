/* harness/files/fileguard.h — the files fattn reads and writes, guarded against
 * what a hostile path can be (docs/reliability.md "Files").
 *
 * Inputs: a file fattn reads is opened once, without blocking, and refused
 * unless it is a regular file (a FIFO would hang the reader, a device would
 * be read forever). fh_fileguard_pin keeps that descriptor for the rest
 * of the process under the path it was opened by; every later read of the
 * same path (the isolated child's and the parent's, harness/files/isolate.h) goes
 * through /proc/self/fd/N, so that they all read the one file that was
 * checked, whatever is renamed over the path meanwhile. Every pinned file,
 * whatever its size, is pinned as a private copy
 * ($TMPDIR/fattn-input-XXXXXX, mode 0600, a reflink where the file system
 * can, else a copy of its data extents that keeps its holes: it costs at
 * most the bytes the input holds, never its apparent size), so that one
 * rewritten in place cannot change between the child's check and the
 * parent's reading either. One copy per input at a time: pinning a path
 * again keeps the copy while the file is unchanged, else removes it before
 * the new one is made. No copy (no room in $TMPDIR, not writable, past
 * the file-size limit, or over --max-memory where $TMPDIR is memory-backed):
 * the input is refused, not read unchecked. The copies are removed when
 * unpinned, at exit and on the cleanup signals.
 *
 * Outputs: every output is written under a temporary name beside the target
 * (".NAME.tmp-PID-N") and renamed over it. The target must not exist or be
 * a regular file: a symbolic link, device node, FIFO or directory is refused
 * (a link is never written through nor replaced); it must not be an input
 * pinned in this process (same path or same inode). While a temporary file
 * exists, every signal whose default action ends the process (SIGKILL
 * aside: INT, TERM, HUP, PIPE, QUIT, ALRM, USR1, USR2, XCPU, XFSZ, VTALRM,
 * PROF, IO, PWR, STKFLT, the real-time ones, and the faults SEGV, BUS, ILL,
 * FPE, TRAP, SYS, ABRT) removes it before the process dies of the signal
 * (an async-signal-safe handler, installed on the first registration, not
 * where the signal was ignored or had a handler of its own); so too
 * registered scratch files and directories and the private copies of
 * inputs, after registered children are killed.
 * The registrations have no fixed limit (chunks added outside the handler).
 *
 * This module never prints; messages name the file and the cause.
 */
#ifndef FH_HARNESS_FILEGUARD_H
#define FH_HARNESS_FILEGUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fattn/status.h"

/* ---- inputs ---------------------------------------------------------------- */

/* Open `path` for reading: O_NONBLOCK for the open itself (a FIFO without a
 * writer must not block it), fstat, refused (FATTN_E_INVALID_FILE) unless a
 * regular file; *fd is blocking again, close-on-exec, the caller's. */
fattn_status fh_fileguard_open_input(const char *path, int *fd);

/* Open `path` as fh_fileguard_open_input does, copy it privately and keep
 * the copy's descriptor as the pin of `path` (replacing an earlier pin of
 * the same path string, whose descriptor is closed): from now on
 * fh_fileguard_read_path(path) names this very copy. FATTN_E_NOMEM
 * naming the file and $TMPDIR when the copy cannot be made (the free space
 * is checked first). */
fattn_status fh_fileguard_pin(const char *path);

/* Forget the pin of `path` (if any), close its descriptor and remove its
 * copy: for a command that read a file and now means to replace it, or is
 * done with it. */
void fh_fileguard_unpin(const char *path);

/* The bytes the private copies pinned now hold in memory (their data where
 * $TMPDIR is memory-backed, else nothing): what a command's memory
 * estimate counts for them. */
uint64_t fh_fileguard_pinned_memory(void);

/* --max-memory, for the private copies: a copy into a memory-backed
 * $TMPDIR that would take the copies past it is refused. 0: no bound (the
 * default until a command sets it). */
void fh_fileguard_set_memory_bound(double bytes);
double fh_fileguard_memory_bound(void);

/* Whether dir lives in memory (tmpfs, ramfs). */
bool fh_fileguard_memory_backed(const char *dir);

/* The name to open `path` by: "/proc/self/fd/N" (written to buf, cap bytes)
 * when `path` is pinned and /proc is there, else `path` itself. */
const char *fh_fileguard_read_path(const char *path, char *buf, size_t cap);

/* ---- outputs --------------------------------------------------------------- */

/* FATTN_E_INVALID_ARG with a message if `target` exists and is not a
 * regular file (or is a symbolic link), or is a pinned input; FATTN_OK if
 * it may be replaced. */
fattn_status fh_fileguard_check_target(const char *target);

/* fh_fileguard_check_target, then whether a file can be made beside
 * `target`: its directory exists, is a directory, and a temporary file can
 * be created there (made and removed again). For commands to call before
 * any work, so that a run is not computed for a write that cannot happen.
 * Messages name `target` once, then the cause. */
fattn_status fh_fileguard_check_output(const char *target);

/* FATTN_E_INVALID_ARG if `out` names one of the n files `inputs` (the same
 * path, or the same inode where both exist; NULL entries are skipped):
 * for commands to call before any work. */
fattn_status fh_fileguard_check_distinct(const char *out, const char *const *inputs,
                                            size_t n);

/* A temporary file beside its target, registered for removal on signals. */
typedef struct fh_fileguard_tmp {
    char *target;
    char *path; /* the temporary name */
    int fd;     /* open for writing, -1 once closed */
    int slot;   /* the signal handler's registration, -1 if none */
} fh_fileguard_tmp;

/* fh_fileguard_check_target, then create the temporary file (O_EXCL,
 * mode 0666 less the umask) and register it, with those signals blocked in
 * between so that no moment leaves it unregistered. */
fattn_status fh_fileguard_tmp_open(const char *target, fh_fileguard_tmp *t);
/* fsync and close the descriptor (if still open), rename over the target,
 * fsync the directory, unregister; on failure the temporary file is removed
 * and the target untouched. Frees t's strings either way. */
fattn_status fh_fileguard_tmp_commit(fh_fileguard_tmp *t);
/* Close, remove the temporary file, unregister, free (a zeroed or already
 * finished t is fine). */
void fh_fileguard_tmp_discard(fh_fileguard_tmp *t);

/* A scratch file of the command's own that exists under its final name
 * (committed) until the command removes it (run --repeat's cases, merge's
 * inputs): registered as a temporary file is, so that the cleanup
 * signals remove it too. The slot to give back; the slots grow
 * as needed (chunks of 16 added outside the handler), so -1 only when the
 * path is over 4,351 bytes or no memory is left (then the file is left on
 * such a signal). */
int fh_fileguard_scratch_register(const char *path);
/* Give the slot back (before the command removes the file itself). */
void fh_fileguard_scratch_unregister(int slot);

/* A scratch directory of the command's own (verify's temporary plan
 * store): on the cleanup signals the files directly in it
 * and then the directory are removed (it must hold no subdirectories).
 * The slot, -1 when none can be had; give it back with
 * fh_fileguard_scratch_unregister before removing the directory. */
int fh_fileguard_scratch_dir_register(const char *dir);

/* fork(), the child registered in the parent (with the signals blocked
 * across, so that none arrives in between): on those signals the parent
 * kills it (SIGKILL) and reaps it before it removes files and scratch
 * directories, so that nothing writes into them after the removal. *slot
 * (parent only; -1 in the child or on failure) is given back with
 * fh_fileguard_scratch_unregister once the child was waited for. */
pid_t fh_fileguard_fork_child(int *slot);

/* Replace `target` with the len bytes at data atomically (tmp_open, write,
 * tmp_commit). */
fattn_status fh_fileguard_write_text(const char *target, const char *data, size_t len);

#endif /* FH_HARNESS_FILEGUARD_H */
