/* harness/files/h5write.h — writing run-file trees (runtree.h) to HDF5 files:
 * atomic replace, sorted order, timestamps off, libver bounds V18..V110.
 * The format rules are listed in h5io.h. This module never prints.
 */
#ifndef FH_HARNESS_H5WRITE_H
#define FH_HARNESS_H5WRITE_H

#include <stdint.h>

#include "fattn/dtype.h"
#include "fattn/status.h"
#include "runtree.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- writing -------------------------------------------------------------- */

/* Test hook: called before each object (group, dataset, attribute) is
 * written, with its absolute path ("/cases/x/inputs/q"; "/cases/x@spec" and
 * "/@schema" for attributes), and once with ":commit" before the file is
 * closed and renamed; a non-zero return aborts the write with FATTN_E_IO. */
typedef int (*fh_h5_write_hook)(void *ctx, const char *path);

typedef struct fh_h5_writer fh_h5_writer;

/* Start writing `target` (under a temporary name in its directory). */
fattn_status fh_h5_writer_open(const char *target, fh_h5_writer **out);
void fh_h5_writer_set_hook(fh_h5_writer *w, fh_h5_write_hook hook, void *ctx);
/* Write `node` under the group at absolute `parent_path` ("/" or
 * "/cases"); missing groups on the way are created (empty, no attributes).
 * A node named "" is merged into the parent itself: its attributes go on
 * the parent (allowed once per group, before any child) and its children
 * under it. Each new child must sort after the previous child of the same
 * group, else FATTN_E_STATE. On failure the writer is poisoned: only
 * fh_h5_writer_abort is left. */
fattn_status fh_h5_writer_put(fh_h5_writer *w, const char *parent_path,
                                 const fh_h5_node *node);
/* Close, fsync, rename over the target, fsync the directory; frees w. On
 * failure the temporary file is removed and the target untouched. */
fattn_status fh_h5_writer_commit(fh_h5_writer *w);
/* Discard everything; removes the temporary file; frees w (NULL is fine). */
void fh_h5_writer_abort(fh_h5_writer *w);

/* open + put(root at "/") + commit; `hook` may be NULL. */
fattn_status fh_h5_write_file(const char *target, const fh_h5_node *root,
                                 fh_h5_write_hook hook, void *hook_ctx);

/* ---- helpers ---------------------------------------------------------------- */

/* "YYYY-MM-DDTHH:MM:SSZ" from SOURCE_DATE_EPOCH (decimal seconds) when set,
 * else the current time. FATTN_E_INVALID_ARG for a malformed value. */
fattn_status fh_h5_created_utc(char out[32]);

/* The HDF5 file type fattn stores `dtype` as (caller closes with H5Tclose);
 * a negative hid on failure. Returned as int64_t to keep hdf5.h out of
 * this header (hid_t is int64_t in HDF5 1.10). */
int64_t fh_h5_file_type(fattn_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif /* FH_HARNESS_H5WRITE_H */
