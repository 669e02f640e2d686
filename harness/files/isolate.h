/* Reading untrusted files in a forked child.
 *
 * libhdf5 has open fuzz-found crashes on malformed files; fattn must turn
 * them into a clean error. fh_isolate_run first opens `path` once and
 * pins it (fileguard.h: refused unless a regular file, so a FIFO cannot
 * block it), forks, applies resource limits in the child (address space,
 * CPU time; it dies with its parent), runs `fn` there and reports: the
 * child's status and message if it returned, "HDF5 library failed reading
 * FILE (signal N)" if it died, "reading FILE took longer than N s
 * (wall-clock limit)" if it neither returned nor died in time (it is then
 * killed). The parent then reads the file itself, knowing the library
 * survives it: the same pinned file, whatever was renamed over the path
 * meanwhile. A path that cannot be opened is left to `fn` to report.
 */
#ifndef FH_HARNESS_ISOLATE_H
#define FH_HARNESS_ISOLATE_H

#include <stdint.h>

#include "fattn/status.h"

typedef fattn_status (*fh_isolate_fn)(const char *path, void *ctx);

/* Run fn(path, ctx) in a child limited to `as_bytes` of address space (0:
 * a default scaled to the file size; ignored under AddressSanitizer, whose
 * shadow memory needs the whole space), `cpu_seconds` of CPU time (0: the
 * file size's, fh_isolate_cpu_limit) and cpu_seconds + 60 s of
 * wall-clock time. */
fattn_status fh_isolate_run(const char *path, fh_isolate_fn fn, void *ctx,
                               uint64_t as_bytes, unsigned cpu_seconds);

/* The CPU time a child gets to read a file of `size` bytes: 60 s and one
 * more per 16 MiB (reading and digesting runs at hundreds of MiB/s, so a
 * sound file never comes near it, while a small hostile one that makes
 * libhdf5 spin is stopped in a minute, not five). */
unsigned fh_isolate_cpu_limit(uint64_t size);

/* Told once when a child has read for a while (5 s) without finishing, so
 * that a command can say why it waits; waited_s so far, cpu_limit_s the
 * limit that will stop it. NULL (the default): nothing is told. The
 * library itself never prints. */
typedef void (*fh_isolate_notice_fn)(const char *path, double waited_s, unsigned cpu_limit_s);
void fh_isolate_set_notice(fh_isolate_notice_fn fn);

#endif /* FH_HARNESS_ISOLATE_H */
