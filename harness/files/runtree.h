/* harness/files/runtree.h — the in-memory tree of a run file (no HDF5 here).
 *
 * Groups hold attributes and children, datasets hold their bytes in C order
 * with their digest; both lists are kept sorted by name (strcmp, i.e. byte
 * order) so that the writer (h5write.h) visits them in the order the file
 * must have and the reader (h5read.h) gives the same tree back. The
 * overview of the whole run-file layer is in h5io.h.
 */
#ifndef FH_HARNESS_RUNTREE_H
#define FH_HARNESS_RUNTREE_H

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

#define FH_H5_MAX_DEPTH 16
#define FH_H5_NAME_MAX 255

typedef enum fh_h5_attr_kind {
    FH_H5_ATTR_STRING = 0,     /* variable-length UTF-8, scalar */
    FH_H5_ATTR_INT64,          /* H5T_STD_I64LE scalar */
    FH_H5_ATTR_FLOAT32,        /* H5T_IEEE_F32LE scalar */
    FH_H5_ATTR_UINT8,          /* H5T_STD_U8LE scalar (booleans) */
    FH_H5_ATTR_INT64_PAIR      /* H5T_STD_I64LE [2] (window_size) */
} fh_h5_attr_kind;

typedef struct fh_h5_attr {
    char *name;
    fh_h5_attr_kind kind;
    char *s;          /* STRING */
    int64_t i64[2];   /* INT64 uses [0]; INT64_PAIR both */
    float f32;
    uint8_t u8;
} fh_h5_attr;

typedef struct fh_h5_node {
    char *name;                 /* link name; "" for a root */
    bool is_dataset;
    fh_h5_attr *attrs;          /* kept sorted by name */
    size_t n_attrs, cap_attrs;
    /* groups */
    struct fh_h5_node **children; /* kept sorted by name */
    size_t n_children, cap_children;
    /* datasets */
    fattn_dtype dtype;
    int ndim;
    int64_t shape[FATTN_MAX_DIMS];
    void *data;                 /* C order, nbytes */
    size_t nbytes;
    char digest[FH_DIGEST_LEN];           /* of data */
    char stored_digest[FH_DIGEST_LEN]; /* read: the attribute */
    bool corrupt;               /* read with allow_corrupt: digests differ */
} fh_h5_node;

/* ---- building trees ------------------------------------------------------ */

/* A new, empty group node (name may be "" for a root). */
fattn_status fh_h5_node_new_group(const char *name, fh_h5_node **out);
/* Free a node and everything under it (NULL is fine). */
void fh_h5_node_free(fh_h5_node *n);

/* The child group `name` of `parent`, created if missing. FATTN_E_STATE if
 * a dataset of that name exists. */
fattn_status fh_h5_node_group(fh_h5_node *parent, const char *name,
                                 fh_h5_node **out);
/* Add a dataset holding the logical tensor `t` (host, not the empty slot)
 * gathered to C order of its shape, with its digest. FATTN_E_STATE if
 * `name` exists. `out` may be NULL. */
fattn_status fh_h5_node_add_tensor(fh_h5_node *parent, const char *name,
                                      const fattn_tensor *t, fh_h5_node **out);
/* Add a dataset from raw C-order bytes (copied): nbytes must equal
 * numel(shape) * dtype size. */
fattn_status fh_h5_node_add_bytes(fh_h5_node *parent, const char *name,
                                     fattn_dtype dtype, int ndim, const int64_t *shape,
                                     const void *data, size_t nbytes, fh_h5_node **out);
/* Move an existing node (and ownership) under parent. */
fattn_status fh_h5_node_adopt(fh_h5_node *parent, fh_h5_node *child);
/* Copy every attribute of src onto dst (a dataset's `dtype` and `digest`
 * are derived and not copied). */
fattn_status fh_h5_node_copy_attrs(const fh_h5_node *src, fh_h5_node *dst);
/* Deep-copy src (dataset or group, with attributes) under dst_parent,
 * leaving out every child named `skip` (NULL: none). */
fattn_status fh_h5_node_copy(const fh_h5_node *src, fh_h5_node *dst_parent,
                                const char *skip);

/* Set (add or replace) an attribute. `dtype` and `digest` are reserved on
 * datasets (FATTN_E_INVALID_ARG). Strings must be valid UTF-8 without NULs. */
fattn_status fh_h5_node_set_string(fh_h5_node *n, const char *name, const char *v);
fattn_status fh_h5_node_set_int64(fh_h5_node *n, const char *name, int64_t v);
fattn_status fh_h5_node_set_float32(fh_h5_node *n, const char *name, float v);
fattn_status fh_h5_node_set_uint8(fh_h5_node *n, const char *name, uint8_t v);
fattn_status fh_h5_node_set_int64_pair(fh_h5_node *n, const char *name,
                                          const int64_t v[2]);

/* Lookups (NULL if absent). `path` is relative, '/'-separated ("a/b/c"). */
fh_h5_node *fh_h5_node_find(const fh_h5_node *n, const char *path);
const fh_h5_attr *fh_h5_node_attr(const fh_h5_node *n, const char *name);

/* A view of a dataset node's bytes as a contiguous host tensor. */
fattn_tensor fh_h5_node_tensor(const fh_h5_node *n);

/* ---- the attribute digest of a case ----------------------------------------
 * Attribute text lives in HDF5's global heap, which has no checksum; the
 * attribute FH_H5_ATTRS_DIGEST on a case group (/cases/<id>) is the
 * digest of every attribute in its subtree, as `digest` is of a dataset's
 * bytes: derived data, never compared as an attribute, and a value that
 * does not match the attributes is corruption. What it covers, in the
 * tree's sorted order, for the group and then each object below it
 * depth-first: the object's path below the group and NUL; then per
 * attribute (but the group's own FH_H5_ATTRS_DIGEST) its name and NUL,
 * its kind as one byte, and its value: a string as its 8-byte little-endian
 * length and bytes, int64 as 8 bytes little-endian, float32 as its 4 bytes
 * of bits, uint8 as 1 byte, int64[2] as 16 bytes. A dataset's `dtype` and
 * `digest` are not in a tree's attribute lists (the writer adds them and
 * its data digest covers the bytes), so they are not covered. */
#define FH_H5_ATTRS_DIGEST "attrs_digest"

/* The attribute digest of n's subtree into out. FATTN_E_NOMEM. */
fattn_status fh_h5_node_attrs_digest(const fh_h5_node *n, char out[FH_DIGEST_LEN]);
/* Set (or replace) n's FH_H5_ATTRS_DIGEST from its subtree: the last
 * change to a case node before it is written. */
fattn_status fh_h5_node_seal_attrs(fh_h5_node *n);
/* *intact: n has no FH_H5_ATTRS_DIGEST (a file from before it: not
 * checked), or one equal to its subtree's digest. A present one that is
 * not a well-formed digest string is not intact. */
fattn_status fh_h5_node_attrs_intact(const fh_h5_node *n, bool *intact);


/* ---- a tree from another language ----------------------------------------- */

#define FH_RUNTREE_MANIFEST_SCHEMA "fattn-tree/1"

/* The tree a JSON manifest describes, its tensors' bytes taken from `blob`
 * (docs/run-files.md "Writing from Python"):
 *   {"schema": "fattn-tree/1", "root": GROUP}
 *   GROUP   = {"attrs": [ATTR...], "children": {"name": GROUP | DATASET, ...}}
 *   DATASET = {"attrs": [ATTR...], "dtype": "bfloat16", "shape": [...],
 *              "offset": BYTES, "nbytes": BYTES}    (C-order bytes in blob)
 *   ATTR    = {"name", "kind": "string"|"int64"|"uint8"|"int64_pair", "value"}
 *           | {"name", "kind": "float32", "bits": UINT32}
 * Datasets get their dtype and digest attributes from the tree as always.
 * FATTN_E_PARSE naming the node for a malformed manifest; the tree API's
 * errors otherwise. */
fattn_status fh_runtree_from_manifest(const char *json, size_t len, const void *blob,
                                         size_t blob_len, fh_h5_node **out);

/* ---- shared with h5write.c and h5read.c ----------------------------------- */

/* A malloc'd copy of s, NULL when out of memory. */
char *fh_runtree_strdup(const char *s);
/* Link and attribute names: 1..FH_H5_NAME_MAX printable ASCII bytes
 * without '/', not "." or ".." ("" too when allow_empty). `what` names the
 * kind of object in the message. */
fattn_status fh_runtree_check_name(const char *what, const char *name, bool allow_empty);
/* Is s well-formed UTF-8 (no overlongs, surrogates or code points past
 * U+10FFFF)? */
bool fh_runtree_utf8_ok(const char *s);
/* numel(shape) * dtype size into *bytes; false when the dtype is unknown,
 * the rank out of 0..FATTN_MAX_DIMS, an extent negative or the size does
 * not fit. */
bool fh_runtree_shape_bytes(fattn_dtype dtype, int ndim, const int64_t *shape, size_t *bytes);
/* Insert c (ownership moves on success only) among p's children in sorted
 * place; FATTN_E_STATE if p is a dataset or has a child of that name. */
fattn_status fh_runtree_insert_child(fh_h5_node *p, fh_h5_node *c);
/* "parent/name" (one '/' between), malloc'd; NULL when out of memory. */
char *fh_runtree_path_join(const char *parent, const char *name);

#ifdef __cplusplus
}
#endif
#endif /* FH_HARNESS_RUNTREE_H */
