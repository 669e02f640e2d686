/* Reading untrusted files in a forked child.
 *
 * libhdf5 has open fuzz-found crashes on malformed files; fattn must turn
 * them into a clean error. fattn_isolate_run forks, applies resource limits
 * in the child (address space and CPU time), runs `fn` there and reports:
 * the child's status and message if it returned, or "HDF5 library failed
 * reading FILE (signal N)" if it died. The parent then reads the file itself,
 * knowing the library survives it.
 */
#ifndef FATTN_HARNESS_ISOLATE_H
#define FATTN_HARNESS_ISOLATE_H

#include <stdint.h>

#include "fattn/status.h"

typedef fattn_status (*fattn_isolate_fn)(const char *path, void *ctx);

/* Run fn(path, ctx) in a child limited to `as_bytes` of address space (0:
 * a default scaled to the file size; ignored under AddressSanitizer, whose
 * shadow memory needs the whole space) and `cpu_seconds` of CPU time. */
fattn_status fattn_isolate_run(const char *path, fattn_isolate_fn fn, void *ctx,
                               uint64_t as_bytes, unsigned cpu_seconds);

#endif /* FATTN_HARNESS_ISOLATE_H */
