/* Writing run-file trees: one sorted, byte-reproducible pass under a
 * temporary name, then an atomic rename. See h5write.h and h5io.h. */
#include "h5write.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fileguard.h"
#include "h5base.h"

typedef struct tracked_group {
    char *path;        /* absolute, "/" for the root */
    char *last_child;  /* NULL before the first */
    bool attrs_done;
    bool closed;       /* a later sibling of it or an ancestor's was created */
} tracked_group;

struct fh_h5_writer {
    char *target;
    fh_fileguard_tmp tmp; /* the temporary file beside the target */
    hid_t file;
    bool failed;
    fh_h5_write_hook hook;
    void *hook_ctx;
    tracked_group *groups;
    size_t n_groups, cap_groups;
};

static tracked_group *find_group(fh_h5_writer *w, const char *path)
{
    for (size_t i = 0; i < w->n_groups; i++) {
        if (strcmp(w->groups[i].path, path) == 0)
            return &w->groups[i];
    }
    return NULL;
}

static fattn_status track_group(fh_h5_writer *w, const char *path)
{
    if (w->n_groups == w->cap_groups) {
        size_t cap = w->cap_groups ? 2 * w->cap_groups : 16;
        tracked_group *g = realloc(w->groups, cap * sizeof *g);
        if (!g)
            return fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
        w->groups = g;
        w->cap_groups = cap;
    }
    tracked_group *g = &w->groups[w->n_groups];
    memset(g, 0, sizeof *g);
    if (!(g->path = fh_runtree_strdup(path)))
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
    w->n_groups++;
    return FATTN_OK;
}

/* Record that child `name` of tracked group `g` is about to be created:
 * it must sort after the previous child; everything tracked below `g`
 * is closed from now on. */
static fattn_status claim_child(fh_h5_writer *w, tracked_group *g, const char *name)
{
    if (g->closed)
        return fattn_error(FATTN_E_STATE,
                           "%s: group %s is closed: objects must be written in sorted order",
                           w->target, g->path);
    if (g->last_child && strcmp(name, g->last_child) <= 0)
        return fattn_error(FATTN_E_STATE,
                           "%s: %s: child \"%s\" does not sort after \"%s\": objects must be "
                           "written in sorted order",
                           w->target, g->path, name, g->last_child);
    char *nm = fh_runtree_strdup(name);
    if (!nm)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
    free(g->last_child);
    g->last_child = nm;
    size_t plen = strlen(g->path);
    for (size_t i = 0; i < w->n_groups; i++) {
        const char *p = w->groups[i].path;
        bool below = strcmp(g->path, "/") == 0
                         ? strcmp(p, "/") != 0
                         : strncmp(p, g->path, plen) == 0 && p[plen] == '/';
        if (below)
            w->groups[i].closed = true;
    }
    return FATTN_OK;
}

static fattn_status run_hook(fh_h5_writer *w, const char *path, const char *attr)
{
    if (!w->hook)
        return FATTN_OK;
    char buf[1024];
    if (attr)
        snprintf(buf, sizeof buf, "%s@%s", path, attr);
    else
        snprintf(buf, sizeof buf, "%s", path);
    if (w->hook(w->hook_ctx, buf) != 0)
        return fattn_error(FATTN_E_IO, "%s: %s: write aborted by hook", w->target, buf);
    return FATTN_OK;
}

static fattn_status write_attr(fh_h5_writer *w, hid_t obj, const char *objpath,
                               const fh_h5_attr *a)
{
    fattn_status st = run_hook(w, objpath, a->name);
    if (st != FATTN_OK)
        return st;
    hid_t type = H5I_INVALID_HID, space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
    const void *buf = NULL;
    const char *sp = a->s;
    hsize_t two = 2;
    switch (a->kind) {
    case FH_H5_ATTR_STRING:
        type = fh_h5base_vlen_string_type(H5T_CSET_UTF8);
        space = H5Screate(H5S_SCALAR);
        buf = &sp;
        break;
    case FH_H5_ATTR_INT64:
        type = H5Tcopy(H5T_STD_I64LE);
        space = H5Screate(H5S_SCALAR);
        buf = &a->i64[0];
        break;
    case FH_H5_ATTR_FLOAT32:
        type = H5Tcopy(H5T_IEEE_F32LE);
        space = H5Screate(H5S_SCALAR);
        buf = &a->f32;
        break;
    case FH_H5_ATTR_UINT8:
        type = H5Tcopy(H5T_STD_U8LE);
        space = H5Screate(H5S_SCALAR);
        buf = &a->u8;
        break;
    case FH_H5_ATTR_INT64_PAIR:
        type = H5Tcopy(H5T_STD_I64LE);
        space = H5Screate_simple(1, &two, NULL);
        buf = a->i64;
        break;
    }
    st = FATTN_OK;
    if (type < 0 || space < 0) {
        st = fh_h5base_fail(FATTN_E_IO, "%s: %s: attribute \"%s\": type", w->target, objpath, a->name);
        goto out;
    }
    if ((attr = H5Acreate2(obj, a->name, type, space, H5P_DEFAULT, H5P_DEFAULT)) < 0) {
        st = fh_h5base_fail(FATTN_E_IO, "%s: %s: attribute \"%s\": create", w->target, objpath, a->name);
        goto out;
    }
    if (H5Awrite(attr, type, buf) < 0) {
        st = fh_h5base_fail(FATTN_E_IO, "%s: %s: attribute \"%s\": write", w->target, objpath, a->name);
        goto out;
    }
    herr_t rc = H5Aclose(attr);
    attr = H5I_INVALID_HID;
    if (rc < 0)
        st = fh_h5base_fail(FATTN_E_IO, "%s: %s: attribute \"%s\": close", w->target, objpath, a->name);
out:
    /* after a failure the attribute is closed unchecked (fh_h5base_close):
     * the first error is the one reported; so below for datasets and groups */
    fh_h5base_close(attr);
    fh_h5base_close(space);
    fh_h5base_close(type);
    return st;
}

static int cmp_attr_ptr(const void *x, const void *y)
{
    const fh_h5_attr *a = *(const fh_h5_attr *const *)x;
    const fh_h5_attr *b = *(const fh_h5_attr *const *)y;
    return strcmp(a->name, b->name);
}

/* A node's attributes, sorted; datasets also get dtype and digest. */
static fattn_status write_attrs(fh_h5_writer *w, hid_t obj, const char *objpath,
                                const fh_h5_node *n)
{
    size_t count = n->n_attrs + (n->is_dataset ? 2 : 0);
    if (count == 0)
        return FATTN_OK;
    const fh_h5_attr **list = malloc(count * sizeof *list);
    if (!list)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
    fh_h5_attr extra[2];
    memset(extra, 0, sizeof extra);
    for (size_t i = 0; i < n->n_attrs; i++)
        list[i] = &n->attrs[i];
    if (n->is_dataset) {
        extra[0].name = (char *)"dtype";
        extra[0].kind = FH_H5_ATTR_STRING;
        extra[0].s = (char *)fattn_dtype_name(n->dtype);
        extra[1].name = (char *)"digest";
        extra[1].kind = FH_H5_ATTR_STRING;
        extra[1].s = (char *)n->digest;
        list[n->n_attrs] = &extra[0];
        list[n->n_attrs + 1] = &extra[1];
    }
    qsort(list, count, sizeof *list, cmp_attr_ptr);
    fattn_status st = FATTN_OK;
    for (size_t i = 0; i < count; i++)
        if ((st = write_attr(w, obj, objpath, list[i])) != FATTN_OK)
            goto out;
out:
    free(list);
    return st;
}

static fattn_status write_node(fh_h5_writer *w, hid_t parent, const char *path,
                               const fh_h5_node *n);

static fattn_status write_children(fh_h5_writer *w, hid_t group, const char *path,
                                   const fh_h5_node *n)
{
    for (size_t i = 0; i < n->n_children; i++) {
        const fh_h5_node *c = n->children[i];
        if (i > 0 && strcmp(n->children[i - 1]->name, c->name) >= 0)
            return fattn_error(FATTN_E_INTERNAL, "%s: %s: children not sorted", w->target, path);
        char *cp = fh_runtree_path_join(path, c->name);
        if (!cp)
            return fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
        fattn_status st = write_node(w, group, cp, c);
        free(cp);
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

static fattn_status write_dataset(fh_h5_writer *w, hid_t parent, const char *path,
                                  const fh_h5_node *n)
{
    size_t want;
    if (!fh_runtree_shape_bytes(n->dtype, n->ndim, n->shape, &want) || want != n->nbytes)
        return fattn_error(FATTN_E_SHAPE, "%s: %s: shape and byte count disagree", w->target, path);
    hsize_t dims[FATTN_MAX_DIMS];
    for (int i = 0; i < n->ndim; i++)
        dims[i] = (hsize_t)n->shape[i];
    hid_t type = (hid_t)fh_h5_file_type(n->dtype);
    hid_t space = n->ndim == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(n->ndim, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t d = H5I_INVALID_HID;
    fattn_status st = FATTN_OK;
    if (type < 0 || space < 0 || dcpl < 0 || H5Pset_obj_track_times(dcpl, 0) < 0) {
        st = fh_h5base_fail(FATTN_E_IO, "%s: %s: dataset set-up", w->target, path);
        goto out;
    }
    if ((d = H5Dcreate2(parent, n->name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0) {
        st = fh_h5base_fail(FATTN_E_IO, "%s: %s: create dataset", w->target, path);
        goto out;
    }
    if (n->nbytes && H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, n->data) < 0) {
        st = fh_h5base_fail(FATTN_E_IO, "%s: %s: write dataset", w->target, path);
        goto out;
    }
    if ((st = write_attrs(w, d, path, n)) != FATTN_OK)
        goto out;
    herr_t rc = H5Dclose(d);
    d = H5I_INVALID_HID;
    if (rc < 0)
        st = fh_h5base_fail(FATTN_E_IO, "%s: %s: close dataset", w->target, path);
out:
    fh_h5base_close(d);
    fh_h5base_close(dcpl);
    fh_h5base_close(space);
    fh_h5base_close(type);
    return st;
}

static hid_t create_group(hid_t parent, const char *name)
{
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    if (gcpl < 0)
        return gcpl;
    hid_t g = H5I_INVALID_HID;
    if (H5Pset_obj_track_times(gcpl, 0) >= 0)
        g = H5Gcreate2(parent, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    return g;
}

static fattn_status write_node(fh_h5_writer *w, hid_t parent, const char *path,
                               const fh_h5_node *n)
{
    assert(path && path[0] == '/');
    assert(!n->is_dataset || n->n_children == 0);
    fattn_status st = run_hook(w, path, NULL);
    if (st != FATTN_OK)
        return st;
    if (n->is_dataset)
        return write_dataset(w, parent, path, n);
    hid_t g = create_group(parent, n->name);
    if (g < 0)
        return fh_h5base_fail(FATTN_E_IO, "%s: %s: create group", w->target, path);
    if ((st = write_attrs(w, g, path, n)) != FATTN_OK ||
        (st = write_children(w, g, path, n)) != FATTN_OK)
        goto out;
    herr_t rc = H5Gclose(g);
    g = H5I_INVALID_HID;
    if (rc < 0)
        st = fh_h5base_fail(FATTN_E_IO, "%s: %s: close group", w->target, path);
out:
    fh_h5base_close(g);
    return st;
}

static void writer_free(fh_h5_writer *w)
{
    for (size_t i = 0; i < w->n_groups; i++) {
        free(w->groups[i].path);
        free(w->groups[i].last_child);
    }
    free(w->groups);
    free(w->target);
    free(w);
}

fattn_status fh_h5_writer_open(const char *target, fh_h5_writer **out)
{
    *out = NULL;
    hid_t fapl = H5I_INVALID_HID;
    fattn_status st = fh_h5base_enter(&fapl);
    if (st != FATTN_OK)
        return st;
    fh_h5_writer *w = calloc(1, sizeof *w);
    if (!w)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", target);
    w->file = H5I_INVALID_HID;
    w->tmp.fd = -1;
    w->tmp.slot = -1;
    if (!(w->target = fh_runtree_strdup(target))) {
        writer_free(w);
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", target);
    }
    /* ".<base>.tmp-<pid>-<n>" beside the target, which must be a regular
     * file or absent and no input of this process (fileguard.h). */
    if ((st = fh_fileguard_tmp_open(target, &w->tmp)) != FATTN_OK) {
        writer_free(w);
        return st;
    }
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (fcpl < 0 || H5Pset_obj_track_times(fcpl, 0) < 0) {
        st = fh_h5base_fail(FATTN_E_IO, "%s: file creation properties", target);
    } else {
        w->file = H5Fcreate(w->tmp.path, H5F_ACC_TRUNC, fcpl, fapl);
        if (w->file < 0)
            st = fh_h5base_fail(FATTN_E_IO, "%s: create %s", target, w->tmp.path);
    }
    if (fcpl >= 0)
        H5Pclose(fcpl);
    if (st != FATTN_OK)
        goto out;
    if ((st = track_group(w, "/")) != FATTN_OK)
        goto out;
    *out = w;
out:
    if (st != FATTN_OK)
        fh_h5_writer_abort(w);
    return st;
}

void fh_h5_writer_set_hook(fh_h5_writer *w, fh_h5_write_hook hook, void *ctx)
{
    w->hook = hook;
    w->hook_ctx = ctx;
}

/* Make sure the group at absolute `path` exists and is open for writing;
 * create missing groups on the way (in order). */
static fattn_status ensure_group(fh_h5_writer *w, const char *path, tracked_group **out)
{
    if (path[0] != '/')
        return fattn_error(FATTN_E_INVALID_ARG, "%s: path \"%s\" is not absolute", w->target, path);
    tracked_group *g = find_group(w, "/");
    const char *p = path;
    char *cur = fh_runtree_strdup("/");
    if (!cur)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
    fattn_status st = FATTN_OK;
    for (;;) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char part[FH_H5_NAME_MAX + 1];
        if (len > FH_H5_NAME_MAX) {
            st = fattn_error(FATTN_E_INVALID_ARG, "%s: path component too long in %s", w->target,
                             path);
            goto out;
        }
        memcpy(part, p, len);
        part[len] = '\0';
        p += len;
        char *next = fh_runtree_path_join(cur, part);
        if (!next) {
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
            goto out;
        }
        free(cur);
        cur = next;
        tracked_group *ng = find_group(w, cur);
        if (!ng) {
            if ((st = fh_runtree_check_name("group", part, false)) != FATTN_OK ||
                (st = claim_child(w, g, part)) != FATTN_OK ||
                (st = run_hook(w, cur, NULL)) != FATTN_OK)
                goto out;
            hid_t gid = create_group(w->file, cur);
            if (gid < 0) {
                st = fh_h5base_fail(FATTN_E_IO, "%s: %s: create group", w->target, cur);
                goto out;
            }
            if (H5Gclose(gid) < 0) {
                st = fh_h5base_fail(FATTN_E_IO, "%s: %s: close group", w->target, cur);
                goto out;
            }
            if ((st = track_group(w, cur)) != FATTN_OK)
                goto out;
            ng = find_group(w, cur);
        }
        g = ng;
    }
    if (g->closed) {
        st = fattn_error(FATTN_E_STATE,
                         "%s: group %s is closed: objects must be written in sorted order",
                         w->target, g->path);
        goto out;
    }
    *out = g;
out:
    if (st != FATTN_OK)
        *out = NULL;
    free(cur);
    return st;
}

/* Claim c's name in group g (open as gid, at gpath) and write c there. */
static fattn_status put_child(fh_h5_writer *w, tracked_group *g, hid_t gid, const char *gpath,
                              const fh_h5_node *c)
{
    fattn_status st = claim_child(w, g, c->name);
    if (st != FATTN_OK)
        return st;
    char *cp = fh_runtree_path_join(gpath, c->name);
    if (!cp)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
    st = write_node(w, gid, cp, c);
    free(cp);
    return st;
}

fattn_status fh_h5_writer_put(fh_h5_writer *w, const char *parent_path,
                                 const fh_h5_node *node)
{
    if (w->failed)
        return fattn_error(FATTN_E_STATE, "%s: an earlier write failed", w->target);
    fattn_status st = fh_h5base_enter(NULL);
    if (st != FATTN_OK)
        return st;
    tracked_group *g;
    char *gpath = NULL;
    hid_t gid = H5I_INVALID_HID;
    if ((st = ensure_group(w, parent_path, &g)) != FATTN_OK)
        goto out;
    if (!(gpath = fh_runtree_strdup(g->path))) {
        st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
        goto out;
    }
    if ((gid = H5Gopen2(w->file, gpath, H5P_DEFAULT)) < 0) {
        st = fh_h5base_fail(FATTN_E_IO, "%s: %s: open group", w->target, gpath);
        goto out;
    }
    if (node->name[0] == '\0') {
        /* Merge into the parent: attributes once, then children. */
        if (node->is_dataset) {
            st = fattn_error(FATTN_E_INVALID_ARG, "%s: a dataset needs a name", w->target);
            goto out;
        }
        if (node->n_attrs) {
            if (g->attrs_done) {
                st = fattn_error(FATTN_E_STATE, "%s: %s: attributes already written", w->target,
                                 gpath);
                goto out;
            }
            g->attrs_done = true;
            if ((st = write_attrs(w, gid, gpath, node)) != FATTN_OK)
                goto out;
        }
        for (size_t i = 0; i < node->n_children; i++) {
            g = find_group(w, gpath);
            if ((st = put_child(w, g, gid, gpath, node->children[i])) != FATTN_OK)
                goto out;
        }
    } else {
        if ((st = fh_runtree_check_name("link", node->name, false)) != FATTN_OK ||
            (st = put_child(w, g, gid, gpath, node)) != FATTN_OK)
            goto out;
    }
    herr_t rc = H5Gclose(gid);
    gid = H5I_INVALID_HID;
    if (rc < 0)
        st = fh_h5base_fail(FATTN_E_IO, "%s: %s: close group", w->target, gpath);
out:
    fh_h5base_close(gid);
    free(gpath);
    if (st != FATTN_OK)
        w->failed = true;
    return st;
}

fattn_status fh_h5_writer_commit(fh_h5_writer *w)
{
    fattn_status st = FATTN_OK;
    if (w->failed) {
        st = fattn_error(FATTN_E_STATE, "%s: an earlier write failed; not committed", w->target);
        goto out;
    }
    if ((st = fh_h5base_enter(NULL)) != FATTN_OK ||
        (st = run_hook(w, ":commit", NULL)) != FATTN_OK)
        goto out;
    herr_t rc = H5Fclose(w->file);
    w->file = H5I_INVALID_HID;
    if (rc < 0) {
        st = fh_h5base_fail(FATTN_E_IO, "%s: close %s", w->target, w->tmp.path);
        goto out;
    }
    /* fsync, close, rename over the target, fsync the directory; the
     * temporary file is gone on failure. */
    st = fh_fileguard_tmp_commit(&w->tmp);
    writer_free(w);
    return st;
out:
    fh_h5_writer_abort(w);
    return st;
}

void fh_h5_writer_abort(fh_h5_writer *w)
{
    if (!w)
        return;
    if (w->file >= 0) {
        H5E_BEGIN_TRY { H5Fclose(w->file); }
        H5E_END_TRY;
    }
    fh_fileguard_tmp_discard(&w->tmp);
    writer_free(w);
}

fattn_status fh_h5_write_file(const char *target, const fh_h5_node *root,
                                 fh_h5_write_hook hook, void *hook_ctx)
{
    fh_h5_writer *w;
    fattn_status st = fh_h5_writer_open(target, &w);
    if (st != FATTN_OK)
        return st;
    fh_h5_writer_set_hook(w, hook, hook_ctx);
    /* The root is merged into "/" whatever its name. */
    if (root->is_dataset) {
        fh_h5_writer_abort(w);
        return fattn_error(FATTN_E_INVALID_ARG, "%s: the root must be a group", target);
    }
    fh_h5_node view = *root;
    view.name = (char *)"";
    st = fh_h5_writer_put(w, "/", &view);
    if (st != FATTN_OK) {
        fh_h5_writer_abort(w);
        return st;
    }
    return fh_h5_writer_commit(w);
}

/* ---- the file types of the dtypes (declared in h5write.h) ---------------- */

static hid_t half_type(void)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    if (t < 0)
        return t;
    /* Fields first, then shrink: fields must fit the precision at each step. */
    if (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_precision(t, 16) < 0 ||
        H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, 15) < 0) {
        H5Tclose(t);
        return H5I_INVALID_HID;
    }
    return t;
}

int64_t fh_h5_file_type(fattn_dtype dtype)
{
    if (fh_h5base_enter(NULL) != FATTN_OK)
        return H5I_INVALID_HID;
    switch (dtype) {
    case FATTN_DTYPE_FLOAT32: return H5Tcopy(H5T_IEEE_F32LE);
    case FATTN_DTYPE_FLOAT16: return half_type();
    case FATTN_DTYPE_BFLOAT16: return H5Tcopy(H5T_STD_U16LE);
    case FATTN_DTYPE_FLOAT8_E4M3FN:
    case FATTN_DTYPE_FLOAT8_E5M2:
    case FATTN_DTYPE_UINT8: return H5Tcopy(H5T_STD_U8LE);
    case FATTN_DTYPE_INT32: return H5Tcopy(H5T_STD_I32LE);
    case FATTN_DTYPE_INT64: return H5Tcopy(H5T_STD_I64LE);
    default: return H5I_INVALID_HID;
    }
}

/* ------------------------------------------------------------------------ */
/* created_utc                                                              */
/* ------------------------------------------------------------------------ */

fattn_status fh_h5_created_utc(char out[32])
{
    const char *sde = getenv("SOURCE_DATE_EPOCH");
    time_t t;
    if (sde && *sde) {
        char *end;
        errno = 0;
        long long v = strtoll(sde, &end, 10);
        if (errno || *end || v < 0 || sde[0] == '-' || sde[0] == '+' || sde[0] == ' ')
            return fattn_error(FATTN_E_INVALID_ARG,
                               "SOURCE_DATE_EPOCH=\"%s\" is not a non-negative decimal integer",
                               sde);
        t = (time_t)v;
        if ((long long)t != v)
            return fattn_error(FATTN_E_INVALID_ARG, "SOURCE_DATE_EPOCH=\"%s\" out of range", sde);
    } else {
        t = time(NULL);
    }
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        return fattn_error(FATTN_E_INVALID_ARG, "created_utc: time %lld out of range", (long long)t);
    if (strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        return fattn_error(FATTN_E_INTERNAL, "created_utc: strftime failed");
    return FATTN_OK;
}
