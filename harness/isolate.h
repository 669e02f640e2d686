/* Reading untrusted files in a forked child.
 *
 * libhdf5 has open fuzz-found crashes on malformed files; fattn must turn
 * them into a clean error. fattn_isolate_run first opens `path` once and
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
#ifndef FATTN_HARNESS_ISOLATE_H
#define FATTN_HARNESS_ISOLATE_H

#include <stdint.h>

#include "fattn/status.h"

typedef fattn_status (*fattn_isolate_fn)(const char *path, void *ctx);

/* Run fn(path, ctx) in a child limited to `as_bytes` of address space (0:
 * a default scaled to the file size; ignored under AddressSanitizer, whose
 * shadow memory needs the whole space), `cpu_seconds` of CPU time and
 * cpu_seconds + 60 s of wall-clock time. */
fattn_status fattn_isolate_run(const char *path, fattn_isolate_fn fn, void *ctx,
                               uint64_t as_bytes, unsigned cpu_seconds);

#endif /* FATTN_HARNESS_ISOLATE_H */
