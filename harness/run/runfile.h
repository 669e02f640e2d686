/* Run files as a whole: provenance, full validation, reading and writing.
 *
 * Schema fattn-run/1 (docs/run-files.md). A run file's tree is
 *   /            schema + provenance attributes
 *   /cases/<id>  one group per case (runner.h)
 *   /audit/...   --repeat / --check-writes results
 */
#ifndef FH_HARNESS_RUNFILE_H
#define FH_HARNESS_RUNFILE_H

#include "h5estimate.h"
#include "h5io.h"
#include "runner.h"

#define FH_RUN_SCHEMA "fattn-run/1"

/* Root attributes every run file carries, for engine e (opened as
 * `backend`, the --backend name) that made it. */
fattn_status fh_runfile_set_provenance(fh_h5_node *root, const char *impl,
                                          const char *backend, const fattn_engine *e);

/* Read a run file (strict: corrupt datasets are an error) and validate it
 * fully: schema, every case's spec, input shapes against the spec,
 * cu_seqlens monotone and in bounds, save_ctx attributes in range. The
 * first violation is FATTN_E_INVALID_FILE with a message naming the file,
 * case and object. */
fattn_status fh_runfile_load(const char *path, fh_h5_node **root);

/* fh_runfile_load, refused before anything of it is read
 * (FATTN_E_INVALID_ARG naming the file, the estimate and the bound) when
 * reading it whole would hold more than max_bytes (> 0; 0: no bound;
 * fh_runfile_check_size): the isolated child checks first, then the
 * parent reads the copy it checked. */
fattn_status fh_runfile_load_bounded(const char *path, double max_bytes,
                                        fh_h5_node **root);

/* The estimate of the file at path (h5estimate.h: its structure only, no
 * attribute value, no data) in *e; FATTN_OK when a tree of it, whole
 * (with_data) or without data, plus the private copies of the inputs held
 * in memory (fileguard.h), stays within max_bytes (0: no bound), else
 * FATTN_E_INVALID_ARG naming the file, the estimate, its parts and the
 * bound. Reads the file in this process: call it where the file was
 * checked (the isolated child, isolate.h) or after. */
fattn_status fh_runfile_check_size(const char *path, double max_bytes, bool with_data,
                                      fh_h5_estimate *e);

/* Case group c's spec as full validation checks it: the `spec` attribute
 * parses, its id is the group's name, and the case's attributes match its
 * attrs_digest. FATTN_OK with *spec filled (the caller frees it), else
 * FATTN_E_INVALID_FILE naming the file and case (out of memory as such). */
fattn_status fh_runfile_case_spec(const char *path, const fh_h5_node *c, fh_spec *spec);

/* A cp case's ranks group (fattn-te's context-parallel runs, runfile_cp.c):
 * ranks 0 .. cp_size - 1, each with inputs, forward, engine_call (forward
 * and backward calls numbered 000, 001, ...) and, for a training case,
 * backward, each of datasets. FATTN_E_INVALID_FILE otherwise. */
fattn_status fh_runfile_check_ranks(const char *path, const fh_spec *s,
                                       const fh_h5_node *ranks);

/* Validate an already-read tree (as fh_runfile_load does). */
fattn_status fh_runfile_validate(const char *path, const fh_h5_node *root);

#endif /* FH_HARNESS_RUNFILE_H */
