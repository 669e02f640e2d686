/* harness/files/h5estimate.h — what reading a file will hold in memory, told
 * from its structure before anything of it is read.
 *
 * The one estimate of a file's contents, for every command that reads a
 * run file (inspect, merge, diff, report, replay, verify's goldens, golden's
 * old goldens): a walk of its groups and datasets that reads no attribute
 * value and no data, only names, dataspaces, types, attribute counts and
 * storage sizes. Datasets count their declared size (shape times item
 * size). Attribute values (variable-length strings in HDF5's global heap)
 * cannot be sized without reading them, but they are stored in the file
 * uncompressed, apart from the datasets' storage: their text is at most
 * the file's bytes (up to its end of allocation, which nothing read may
 * pass) that no dataset's storage accounts for. That bound is
 * what the estimate counts (a file holding a 300 MB attribute counts its
 * 300 MB), and the reader (h5read.h, attr_text_max) refuses a file whose
 * attributes hold more text than it, as only shared or overlapping heap
 * objects could. This module never prints.
 */
#ifndef FH_HARNESS_H5ESTIMATE_H
#define FH_HARNESS_H5ESTIMATE_H

#include <stdbool.h>

#include "fattn/status.h"
#include "h5read.h"

typedef struct fh_h5_estimate {
    double file_bytes;   /* the bytes libhdf5 addresses (its EOA; past it, a
                            sparse tail, nothing is read) */
    double data_bytes;   /* every dataset's declared size */
    double largest;      /* the largest dataset's declared size */
    char largest_path[256]; /* and its path ("" when no dataset) */
    double stored_bytes; /* the datasets' storage in the file */
    double objects;      /* groups and datasets */
    double attrs;        /* attributes */
} fh_h5_estimate;

/* The estimate of the file r reads. FATTN_E_INVALID_FILE naming the object
 * where the walk fails (a link other than a hard one, a cycle, too deep). */
fattn_status fh_h5_reader_estimate(fh_h5_reader *r, fh_h5_estimate *e);
/* open, estimate, close */
fattn_status fh_h5_estimate_file(const char *path, fh_h5_estimate *e);

/* The most bytes the file's attribute values can hold: its bytes that no
 * dataset's storage accounts for. */
double fh_h5_estimate_attr_text(const fh_h5_estimate *e);

/* The bytes a tree read from the file holds at its height: every node and
 * attribute, the attribute text (with libhdf5's copies while it reads it),
 * and with_data the datasets' bytes (a whole read; without, a metadata-only
 * one). */
double fh_h5_estimate_tree(const fh_h5_estimate *e, bool with_data);

#endif /* FH_HARNESS_H5ESTIMATE_H */
