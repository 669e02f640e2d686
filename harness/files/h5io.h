/* harness/files/h5io.h — the run-file layer over HDF5 1.10.8.
 *
 * A run file is built in memory as a tree of fh_h5_node (groups with
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
 * hard links; groups and datasets only; depth <= FH_H5_MAX_DEPTH; every
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
 *
 * The layer is three modules: runtree.h (the tree), h5write.h (the writer)
 * and h5read.h (the reader and the dataset stream); this header includes
 * all three. h5base.h is their private HDF5 plumbing.
 */
#ifndef FH_HARNESS_H5IO_H
#define FH_HARNESS_H5IO_H

#include "h5read.h"
#include "h5write.h"
#include "runtree.h"

#endif /* FH_HARNESS_H5IO_H */
