/* What reading a file will hold, from its structure alone (see
 * h5estimate.h). */
#include "h5estimate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5base.h"
#include "runtree.h"

/* What a node and an attribute of a tree cost besides their text and data
 * (the structs, their names, the arrays that hold them, malloc's rounding),
 * generously; attribute text is held by the tree and, while it is read,
 * by libhdf5's copy of its heap collection, its conversion buffer and the
 * string it hands back: four times. */
enum { NODE_COST = 512, ATTR_COST = 160, ATTR_TEXT_COPIES = 4 };

typedef struct walk {
    const char *file;
    fh_h5_estimate *e;
    haddr_t *seen; /* groups visited */
    size_t n_seen, cap_seen;
    int depth;
    const char *where; /* the group being listed */
    fattn_status st;
} walk;

static fattn_status walk_object(walk *w, hid_t obj, const char *where);

static herr_t child_cb(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
    walk *w = ctx;
    if (info->type != H5L_TYPE_HARD) {
        w->st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: \"%s\" is a soft or external link",
                            w->file, w->where, name);
        return -1;
    }
    char *cp = fh_runtree_path_join(w->where, name);
    if (!cp) {
        w->st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->file);
        return -1;
    }
    hid_t o = H5Oopen(g, name, H5P_DEFAULT);
    if (o < 0) {
        w->st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: open", w->file, cp);
    } else {
        const char *parent = w->where;
        w->depth++;
        w->st = walk_object(w, o, cp);
        w->depth--;
        w->where = parent;
        H5Oclose(o);
    }
    free(cp);
    return w->st == FATTN_OK ? 0 : -1;
}

static fattn_status walk_dataset(walk *w, hid_t d, const char *where)
{
    hid_t s = H5Dget_space(d), t = H5Dget_type(d);
    fattn_status st = FATTN_OK;
    int rank = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    hsize_t dims[H5S_MAX_RANK];
    size_t esz = t >= 0 ? H5Tget_size(t) : 0;
    if (rank < 0 || esz == 0 || (rank > 0 && H5Sget_simple_extent_dims(s, dims, NULL) < 0)) {
        st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: dataset type or space", w->file,
                               where);
    } else {
        double bytes = (double)esz; /* a double: no shape a file declares overflows it */
        for (int i = 0; i < rank; i++)
            bytes *= (double)dims[i];
        w->e->data_bytes += bytes;
        if (bytes > w->e->largest) {
            w->e->largest = bytes;
            snprintf(w->e->largest_path, sizeof w->e->largest_path, "%s", where);
        }
        double stored = (double)H5Dget_storage_size(d);
        w->e->stored_bytes += stored < bytes ? stored : bytes;
        /* what the reader refuses too (h5io.h): a size no storage backs */
        if (stored < bytes)
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: %.0f bytes of storage for %.0f bytes "
                             "of data: not backed by storage", w->file, where, stored, bytes);
    }
    H5Eclear2(H5E_DEFAULT);
    fh_h5base_close(t);
    fh_h5base_close(s);
    return st;
}

static fattn_status walk_object(walk *w, hid_t obj, const char *where)
{
    if (w->depth > FH_H5_MAX_DEPTH)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: nested deeper than %d", w->file, where,
                           FH_H5_MAX_DEPTH);
    H5O_info_t info;
    if (H5Oget_info2(obj, &info, H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS) < 0)
        return fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: object info", w->file, where);
    w->e->objects += 1;
    w->e->attrs += (double)info.num_attrs;
    if (info.type == H5O_TYPE_DATASET)
        return walk_dataset(w, obj, where);
    if (info.type != H5O_TYPE_GROUP)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: neither a group nor a dataset",
                           w->file, where);
    for (size_t i = 0; i < w->n_seen; i++)
        if (w->seen[i] == info.addr)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: group reached twice (hard-link "
                               "cycle or alias)", w->file, where);
    if (w->n_seen == w->cap_seen) {
        size_t cap = w->cap_seen ? 2 * w->cap_seen : 32;
        haddr_t *ns = realloc(w->seen, cap * sizeof *ns);
        if (!ns)
            return fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->file);
        w->seen = ns;
        w->cap_seen = cap;
    }
    w->seen[w->n_seen++] = info.addr;
    hsize_t idx = 0;
    w->st = FATTN_OK;
    w->where = where;
    if (H5Literate(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, child_cb, w) < 0 && w->st == FATTN_OK)
        w->st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: list links", w->file, where);
    H5Eclear2(H5E_DEFAULT);
    return w->st;
}

fattn_status fh_h5_reader_estimate(fh_h5_reader *r, fh_h5_estimate *e)
{
    memset(e, 0, sizeof *e);
    fattn_status st = fh_h5base_enter(NULL);
    if (st != FATTN_OK)
        return st;
    hid_t file = fh_h5base_reader_file(r);
    const char *path = fh_h5base_reader_path(r);
    e->file_bytes = fh_h5base_file_span(file);
    if (!(e->file_bytes >= 0))
        return fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: file size", path);
    hid_t root = H5Oopen(file, "/", H5P_DEFAULT);
    if (root < 0)
        return fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: /: open", path);
    walk w = {path, e, NULL, 0, 0, 0, "/", FATTN_OK};
    st = walk_object(&w, root, "/");
    free(w.seen);
    H5Oclose(root);
    return st;
}

fattn_status fh_h5_estimate_file(const char *path, fh_h5_estimate *e)
{
    memset(e, 0, sizeof *e);
    fh_h5_reader *r = NULL;
    fattn_status st = fh_h5_reader_open(path, &r);
    if (st != FATTN_OK)
        goto out;
    st = fh_h5_reader_estimate(r, e);
out:
    fh_h5_reader_close(r);
    return st;
}

double fh_h5_estimate_attr_text(const fh_h5_estimate *e)
{
    double left = e->file_bytes - e->stored_bytes;
    return left > 0 ? left : 0;
}

double fh_h5_estimate_tree(const fh_h5_estimate *e, bool with_data)
{
    return e->objects * NODE_COST + e->attrs * ATTR_COST +
           ATTR_TEXT_COPIES * fh_h5_estimate_attr_text(e) + (with_data ? e->data_bytes : 0);
}
