/* harness/files/fileguard_slots.h — what fileguard.c, fileguard_copy.c and
 * fileguard_signals.c share inside files/ (not for other folders: their
 * API is fileguard.h). */
#ifndef FH_HARNESS_FILEGUARD_SLOTS_H
#define FH_HARNESS_FILEGUARD_SLOTS_H

#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "fattn/status.h"

/* What a cleanup slot holds: a file to unlink, a scratch directory to
 * empty and remove, a child to kill and reap. */
enum { FH_SLOT_FILE = 1, FH_SLOT_DIR = 2, FH_SLOT_CHILD = 3 };

/* Install the cleanup handler (once per process) on every signal whose
 * default action ends the process, except where the signal is ignored or
 * has a handler of the program's own. */
void fh_fileguard_signals_install(void);

/* Block the cleanup signals (a real fault, SIGSEGV and its kind, cannot be
 * held off; one sent with kill(2) can); *old gets the mask to restore with
 * pthread_sigmask(SIG_SETMASK, old, NULL). */
void fh_fileguard_signals_block(sigset_t *old);

/* A slot of `kind` for path (FILE, DIR) or child (CHILD); -1 when none can
 * be had (a path over 4,351 bytes, or no memory). Call with the signals
 * blocked (fh_fileguard_signals_block). */
int fh_fileguard_slot_add(int kind, const char *path, pid_t child);

/* The private copy of an input (fileguard_copy.c): `fd` open on the input
 * (`sb` its fstat), copied into $TMPDIR as "fattn-input-XXXXXX" (0600),
 * holes kept. On success *out is the copy's descriptor, *name its path
 * (malloc'd), *slot its cleanup slot and *mem the bytes it holds in
 * memory (its data when $TMPDIR is memory-backed, else 0). `pinned_mem`
 * is what the other pinned copies hold in memory already. */
fattn_status fh_fileguard_copy_make(const char *path, int fd, const struct stat *sb,
                                       uint64_t pinned_mem, int *out, char **name, int *slot,
                                       uint64_t *mem);

#endif /* FH_HARNESS_FILEGUARD_SLOTS_H */
