/* harness/h5io.h — the run-file layer over HDF5 1.10.8.
 *
 * A run file is built in memory as a tree of fattn_h5_node (groups with
 * attributes and children, datasets with their bytes) and written in one
 * pass that visits everything in sorted order: a group's attributes first,
 * sorted by name, then its children sorted by name (strcmp, i.e. byte
 * order). Reading gives the same tree back, validated.
 *
 * Writing (docs/run-files.md, byte-reproducible):
 *  - timestamps off on the file-creation (root group), every group-creation
 *    and every dataset-creation property list; libver bounds V18..V110;
 *    contiguous datasets, no filters; the memory type equals the file type,
 *    so the stored bytes are exactly the tensor's bits (NaN payloads, -0).
 *  - file types: float32 IEEE F32LE; float16 an IEEE-layout half built
 *    from F32LE (fields 15,10,5,0,10; precision 16; size 2; ebias 15),
 *    which h5py reads as float16; bfloat16 STD_U16LE; float8_e4m3fn and
 *    float8_e5m2 STD_U8LE; int32/int64/uint8 STD_I32LE/I64LE/U8LE.
 *  - every dataset gets the attributes `dtype` (its fattn dtype name) and
 *    `digest` (digest.h) — added by the writer, never by callers.
 *  - attributes: variable-length UTF-8 string scalars, int64, float32 and
 *    uint8 scalars, int64[2].
 *  - atomic replace: the file is written under a temporary name in the
 *    target's directory, closed, fsync'd, renamed over the target, and the
 *    directory fsync'd. On any failure the temporary file is removed and the
 *    target is left untouched.
 *  - a streaming writer puts subtrees one at a time (e.g. one case at a
 *    time) and refuses a child that does not sort after the previous child
 *    of the same group (FATTN_E_STATE), so callers cannot break the order.
 *
 * Reading validates as far as safe reading needs (what diff needs, docs/diff.md): only
 * hard links; groups and datasets only; depth <= FATTN_H5_MAX_DEPTH; every
 * dataset has a known `dtype` consistent with its storage type, a simple
 * dataspace of rank <= 5, a byte size computable without overflow and
 * backed by storage (H5Dget_storage_size equals it); attributes of the
 * kinds above only. The digest is recomputed and compared with the stored
 * attribute: a mismatch is corruption (FATTN_E_INVALID_FILE, or with
 * allow_corrupt the node is marked corrupt and reading goes on).
 *
 * Errors: HDF5's automatic error printing is switched off; a failing HDF5
 * call becomes one fattn_error message "<file>: <object>: <what>:
 * <API function>: <deepest cause>" (the error stack's first and deepest
 * frames). This module never prints.
 *
 * Host byte order must be little-endian (checked at compile time).
 */
#ifndef FATTN_HARNESS_H5IO_H
#define FATTN_HARNESS_H5IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "digest.h"
#include "fattn/dtype.h"
#include "fattn/status.h"
#include "fattn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FATTN_H5_MAX_DEPTH 16
#define FATTN_H5_NAME_MAX 255

typedef enum fattn_h5_attr_kind {
    FATTN_H5_ATTR_STRING = 0,  /* variable-length UTF-8, scalar */
    FATTN_H5_ATTR_INT64,       /* H5T_STD_I64LE scalar */
    FATTN_H5_ATTR_FLOAT32,     /* H5T_IEEE_F32LE scalar */
    FATTN_H5_ATTR_UINT8,       /* H5T_STD_U8LE scalar (booleans) */
    FATTN_H5_ATTR_INT64_PAIR   /* H5T_STD_I64LE [2] (window_size) */
} fattn_h5_attr_kind;

typedef struct fattn_h5_attr {
    char *name;
    fattn_h5_attr_kind kind;
    char *s;          /* STRING */
    int64_t i64[2];   /* INT64 uses [0]; INT64_PAIR both */
    float f32;
    uint8_t u8;
} fattn_h5_attr;

typedef struct fattn_h5_node {
    char *name;                 /* link name; "" for a root */
    bool is_dataset;
    fattn_h5_attr *attrs;       /* kept sorted by name */
    size_t n_attrs, cap_attrs;
    /* groups */
    struct fattn_h5_node **children; /* kept sorted by name */
    size_t n_children, cap_children;
    /* datasets */
    fattn_dtype dtype;
    int ndim;
    int64_t shape[FATTN_MAX_DIMS];
    void *data;                 /* C order, nbytes */
    size_t nbytes;
    char digest[FATTN_DIGEST_LEN];        /* of data */
    char stored_digest[FATTN_DIGEST_LEN]; /* read: the attribute */
    bool corrupt;               /* read with allow_corrupt: digests differ */
} fattn_h5_node;

/* ---- building trees ------------------------------------------------------ */

/* A new, empty group node (name may be "" for a root). */
fattn_status fattn_h5_node_new_group(const char *name, fattn_h5_node **out);
/* Free a node and everything under it (NULL is fine). */
void fattn_h5_node_free(fattn_h5_node *n);

/* The child group `name` of `parent`, created if missing. FATTN_E_STATE if
 * a dataset of that name exists. */
fattn_status fattn_h5_node_group(fattn_h5_node *parent, const char *name,
                                 fattn_h5_node **out);
/* Add a dataset holding the logical tensor `t` (host, not the empty slot)
 * gathered to C order of its shape, with its digest. FATTN_E_STATE if
 * `name` exists. `out` may be NULL. */
fattn_status fattn_h5_node_add_tensor(fattn_h5_node *parent, const char *name,
                                      const fattn_tensor *t, fattn_h5_node **out);
/* Add a dataset from raw C-order bytes (copied): nbytes must equal
 * numel(shape) * dtype size. */
fattn_status fattn_h5_node_add_bytes(fattn_h5_node *parent, const char *name,
                                     fattn_dtype dtype, int ndim, const int64_t *shape,
                                     const void *data, size_t nbytes, fattn_h5_node **out);
/* Move an existing node (and ownership) under parent. */
fattn_status fattn_h5_node_adopt(fattn_h5_node *parent, fattn_h5_node *child);
/* Copy every attribute of src onto dst (a dataset's `dtype` and `digest`
 * are derived and not copied). */
fattn_status fattn_h5_node_copy_attrs(const fattn_h5_node *src, fattn_h5_node *dst);
/* Deep-copy src (dataset or group, with attributes) under dst_parent,
 * leaving out every child named `skip` (NULL: none). */
fattn_status fattn_h5_node_copy(const fattn_h5_node *src, fattn_h5_node *dst_parent,
                                const char *skip);

/* Set (add or replace) an attribute. `dtype` and `digest` are reserved on
 * datasets (FATTN_E_INVALID_ARG). Strings must be valid UTF-8 without NULs. */
fattn_status fattn_h5_node_set_string(fattn_h5_node *n, const char *name, const char *v);
fattn_status fattn_h5_node_set_int64(fattn_h5_node *n, const char *name, int64_t v);
fattn_status fattn_h5_node_set_float32(fattn_h5_node *n, const char *name, float v);
fattn_status fattn_h5_node_set_uint8(fattn_h5_node *n, const char *name, uint8_t v);
fattn_status fattn_h5_node_set_int64_pair(fattn_h5_node *n, const char *name,
                                          const int64_t v[2]);

/* Lookups (NULL if absent). `path` is relative, '/'-separated ("a/b/c"). */
fattn_h5_node *fattn_h5_node_find(const fattn_h5_node *n, const char *path);
const fattn_h5_attr *fattn_h5_node_attr(const fattn_h5_node *n, const char *name);

/* A view of a dataset node's bytes as a contiguous host tensor. */
fattn_tensor fattn_h5_node_tensor(const fattn_h5_node *n);

/* ---- writing -------------------------------------------------------------- */

/* Test hook: called before each object (group, dataset, attribute) is
 * written, with its absolute path ("/cases/x/inputs/q"; "/cases/x@spec" and
 * "/@schema" for attributes), and once with ":commit" before the file is
 * closed and renamed; a non-zero return aborts the write with FATTN_E_IO. */
typedef int (*fattn_h5_write_hook)(void *ctx, const char *path);

typedef struct fattn_h5_writer fattn_h5_writer;

/* Start writing `target` (under a temporary name in its directory). */
fattn_status fattn_h5_writer_open(const char *target, fattn_h5_writer **out);
void fattn_h5_writer_set_hook(fattn_h5_writer *w, fattn_h5_write_hook hook, void *ctx);
/* Write `node` under the group at absolute `parent_path` ("/" or
 * "/cases"); missing groups on the way are created (empty, no attributes).
 * A node named "" is merged into the parent itself: its attributes go on
 * the parent (allowed once per group, before any child) and its children
 * under it. Each new child must sort after the previous child of the same
 * group, else FATTN_E_STATE. On failure the writer is poisoned: only
 * fattn_h5_writer_abort is left. */
fattn_status fattn_h5_writer_put(fattn_h5_writer *w, const char *parent_path,
                                 const fattn_h5_node *node);
/* Close, fsync, rename over the target, fsync the directory; frees w. On
 * failure the temporary file is removed and the target untouched. */
fattn_status fattn_h5_writer_commit(fattn_h5_writer *w);
/* Discard everything; removes the temporary file; frees w (NULL is fine). */
void fattn_h5_writer_abort(fattn_h5_writer *w);

/* open + put(root at "/") + commit; `hook` may be NULL. */
fattn_status fattn_h5_write_file(const char *target, const fattn_h5_node *root,
                                 fattn_h5_write_hook hook, void *hook_ctx);

/* ---- reading --------------------------------------------------------------- */

typedef struct fattn_h5_read_opts {
    bool allow_corrupt; /* mark digest mismatches instead of failing */
    bool metadata_only; /* validate structure, types, shapes and storage but
                           read no data: data NULL, digest "" (stored_digest
                           set); for streaming with fattn_h5_dstream */
} fattn_h5_read_opts;

typedef struct fattn_h5_reader fattn_h5_reader;

/* Open read-only (every open shares one file-access property list). */
fattn_status fattn_h5_reader_open(const char *path, fattn_h5_reader **out);
/* Read and validate the object at absolute `path` ("/" for everything)
 * and all below it. opts may be NULL (strict). */
fattn_status fattn_h5_reader_read(fattn_h5_reader *r, const char *path,
                                  const fattn_h5_read_opts *opts, fattn_h5_node **out);
/* Does the object at absolute `path` exist (links followed one by one)? */
bool fattn_h5_reader_exists(fattn_h5_reader *r, const char *path);
void fattn_h5_reader_close(fattn_h5_reader *r);

/* Streaming one dataset in C order, a bounded buffer at a time (memory
 * type = file type, no conversion). `meta` is the dataset's node from a
 * (metadata-only) read of the same reader; the dataset must still have its
 * type and shape. Each read fills buf with the next whole elements, at most
 * cap bytes, as one hyperslab; *got is 0 at the end. */
typedef struct fattn_h5_dstream fattn_h5_dstream;
fattn_status fattn_h5_dstream_open(fattn_h5_reader *r, const char *path,
                                   const fattn_h5_node *meta, fattn_h5_dstream **out);
fattn_status fattn_h5_dstream_read(fattn_h5_dstream *s, void *buf, size_t cap, size_t *got);
void fattn_h5_dstream_close(fattn_h5_dstream *s);

/* open + read("/") + close. */
fattn_status fattn_h5_read_file(const char *path, const fattn_h5_read_opts *opts,
                                fattn_h5_node **out);

/* ---- helpers ---------------------------------------------------------------- */

/* "YYYY-MM-DDTHH:MM:SSZ" from SOURCE_DATE_EPOCH (decimal seconds) when set,
 * else the current time. FATTN_E_INVALID_ARG for a malformed value. */
fattn_status fattn_h5_created_utc(char out[32]);

/* The HDF5 file type fattn stores `dtype` as (caller closes with H5Tclose);
 * a negative hid on failure. Returned as int64_t to keep hdf5.h out of
 * this header (hid_t is int64_t in HDF5 1.10). */
int64_t fattn_h5_file_type(fattn_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_HARNESS_H5IO_H */
