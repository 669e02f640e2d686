/* harness/files/h5base.h — the HDF5 plumbing the writer and the reader share
 * (private to h5write.c and h5read.c; includes hdf5.h, so no public header
 * includes it).
 *
 * Every entry point of the run-file layer calls fh_h5base_enter first: it
 * makes the one file-access property list (libver bounds V18..V110, file
 * locking where the file system has it) once per process, keeps HDF5 from
 * terminating itself at exit, and switches off HDF5's error printing for the
 * calling thread.
 */
#ifndef FH_HARNESS_H5BASE_H
#define FH_HARNESS_H5BASE_H

#include <hdf5.h>

#include "fattn/status.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "fattn's run files assume a little-endian host (memory type = file type)"
#endif

_Static_assert(sizeof(hid_t) == sizeof(int64_t), "hid_t is int64_t in HDF5 1.10");

/* Quiet this thread's error stack; *fapl (if non-NULL) gets the shared
 * file-access property list, owned by this module (never closed). */
fattn_status fh_h5base_enter(hid_t *fapl);

/* The failure of an HDF5 call as one message: "<context>: <API>: <deepest
 * cause>" with the context formatted from fmt; clears the error stack and
 * returns st. */
fattn_status fh_h5base_fail(fattn_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Close any HDF5 id of the kinds fattn opens; negative ids are ignored and
 * a failing close leaves no error on the stack. */
void fh_h5base_close(hid_t id);

/* The HDF5 file and the name of a reader (h5read.h), for the modules beside
 * it that walk the same file (h5estimate.c). */
struct fh_h5_reader;
hid_t fh_h5base_reader_file(const struct fh_h5_reader *r);
const char *fh_h5base_reader_path(const struct fh_h5_reader *r);

/* The bytes of an open file libhdf5 addresses: its end of allocation (EOA,
 * which no object may pass: a read past it fails), else its size; -1 when
 * neither can be had. Bytes past the EOA (a sparse tail) hold nothing a
 * reader takes. */
double fh_h5base_file_span(hid_t file);

/* A variable-length C string type with character set `cset` (caller closes);
 * negative on failure. */
hid_t fh_h5base_vlen_string_type(H5T_cset_t cset);

#endif /* FH_HARNESS_H5BASE_H */
