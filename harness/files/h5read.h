/* harness/files/h5read.h — reading and validating run files into trees
 * (runtree.h), and streaming one dataset a bounded buffer at a time. What is
 * validated is listed in h5io.h. This module never prints.
 */
#ifndef FH_HARNESS_H5READ_H
#define FH_HARNESS_H5READ_H

#include <stdbool.h>
#include <stddef.h>

#include "fattn/status.h"
#include "runtree.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- reading --------------------------------------------------------------- */

typedef struct fh_h5_read_opts {
    bool allow_corrupt; /* mark digest mismatches instead of failing */
    bool metadata_only; /* validate structure, types, shapes and storage but
                           read no data: data NULL, digest "" (stored_digest
                           set); for streaming with fh_h5_dstream */
    double attr_text_max; /* the most bytes of attribute text to read (0: the
                             file's size, always a bound: the text is stored
                             in it); more is refused (h5estimate.h) */
} fh_h5_read_opts;

typedef struct fh_h5_reader fh_h5_reader;

/* Open read-only (every open shares one file-access property list). */
fattn_status fh_h5_reader_open(const char *path, fh_h5_reader **out);
/* Read and validate the object at absolute `path` ("/" for everything)
 * and all below it. opts may be NULL (strict). */
fattn_status fh_h5_reader_read(fh_h5_reader *r, const char *path,
                                  const fh_h5_read_opts *opts, fh_h5_node **out);
/* Does the object at absolute `path` exist (links followed one by one)? */
bool fh_h5_reader_exists(fh_h5_reader *r, const char *path);
void fh_h5_reader_close(fh_h5_reader *r);

/* Streaming one dataset in C order, a bounded buffer at a time (memory
 * type = file type, no conversion). `meta` is the dataset's node from a
 * (metadata-only) read of the same reader; the dataset must still have its
 * type and shape. Each read fills buf with the next whole elements, at most
 * cap bytes, as one hyperslab; *got is 0 at the end. */
typedef struct fh_h5_dstream fh_h5_dstream;
fattn_status fh_h5_dstream_open(fh_h5_reader *r, const char *path,
                                   const fh_h5_node *meta, fh_h5_dstream **out);
fattn_status fh_h5_dstream_read(fh_h5_dstream *s, void *buf, size_t cap, size_t *got);
void fh_h5_dstream_close(fh_h5_dstream *s);

/* open + read("/") + close. */
fattn_status fh_h5_read_file(const char *path, const fh_h5_read_opts *opts,
                                fh_h5_node **out);

#ifdef __cplusplus
}
#endif
#endif /* FH_HARNESS_H5READ_H */
