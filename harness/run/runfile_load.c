/* Run files: loading, bounded by an estimate of what reading them holds
 * and checked in an isolated child first (see runfile.h). */
#include <stdio.h>

#include "fileguard.h"
#include "h5estimate.h"
#include "isolate.h"
#include "runfile.h"

fattn_status fh_runfile_check_size(const char *path, double max_bytes, bool with_data,
                                      fh_h5_estimate *e)
{
    fattn_status st = fh_h5_estimate_file(path, e);
    if (st != FATTN_OK || !(max_bytes > 0))
        return st;
    double tree = fh_h5_estimate_tree(e, with_data);
    double copies = (double)fh_fileguard_pinned_memory();
    if (tree + copies <= max_bytes)
        return FATTN_OK;
    char copy_note[128] = "", largest[320] = "";
    if (with_data && e->largest_path[0])
        snprintf(largest, sizeof largest, ", the largest %s %.0f", e->largest_path, e->largest);
    if (copies > 0)
        snprintf(copy_note, sizeof copy_note, ", the inputs' private copies in a memory-backed "
                 "TMPDIR %.0f", copies);
    return fattn_error(FATTN_E_INVALID_ARG, "%s: reading it %s holds an estimated %.0f bytes "
                       "(datasets %.0f%s, attribute text up to %.0f, %.0f objects and attributes"
                       "%s), over --max-memory %.0f: refused before %s read", path,
                       with_data ? "whole" : "without its data", tree + copies,
                       with_data ? e->data_bytes : 0.0, largest, fh_h5_estimate_attr_text(e),
                       e->objects + e->attrs, copy_note, max_bytes,
                       with_data ? "its data is" : "its attributes are");
    return FATTN_OK;
}

/* The whole load, as the isolated child runs it: the size bound (ctx, a
 * double; 0 none) from the structure first, so that the child too stays
 * within it. */
static fattn_status load_and_drop(const char *path, void *ctx)
{
    fh_h5_estimate e;
    fattn_status st = fh_runfile_check_size(path, *(const double *)ctx, true, &e);
    if (st != FATTN_OK)
        return st;
    fh_h5_node *r = NULL;
    fh_h5_read_opts o = {.attr_text_max = fh_h5_estimate_attr_text(&e)};
    if ((st = fh_h5_read_file(path, &o, &r)) != FATTN_OK)
        goto out;
    st = fh_runfile_validate(path, r);
out:
    fh_h5_node_free(r);
    return st;
}

fattn_status fh_runfile_load_bounded(const char *path, double max_bytes,
                                        fh_h5_node **root)
{
    *root = NULL;
    /* An untrusted file is first read in a forked, resource-limited child,
     * so a crash inside libhdf5 becomes an error instead of ours. The parent
     * then reads the same pinned copy the child checked, size included. */
    fattn_status st = fh_isolate_run(path, load_and_drop, &max_bytes, 0, 0);
    if (st != FATTN_OK)
        return st == FATTN_E_NOMEM || st == FATTN_E_INVALID_ARG
                   ? st
                   : fattn_error(FATTN_E_INVALID_FILE, "%s", fattn_last_error());
    fh_h5_estimate e;
    if ((st = fh_h5_estimate_file(path, &e)) != FATTN_OK)
        return fattn_error(FATTN_E_INVALID_FILE, "%s", fattn_last_error());
    fh_h5_node *r = NULL;
    fh_h5_read_opts o = {.attr_text_max = fh_h5_estimate_attr_text(&e)};
    st = fh_h5_read_file(path, &o, &r);
    if (st != FATTN_OK) /* fattn_error copes with its own message as the argument */
        return fattn_error(st == FATTN_E_NOMEM ? st : FATTN_E_INVALID_FILE, "%s",
                           fattn_last_error());
    st = fh_runfile_validate(path, r);
    if (st != FATTN_OK) {
        fh_h5_node_free(r);
        return st;
    }
    *root = r;
    return FATTN_OK;
}

fattn_status fh_runfile_load(const char *path, fh_h5_node **root)
{
    return fh_runfile_load_bounded(path, 0.0, root);
}
