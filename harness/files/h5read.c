/* Reading run files into validated trees, and streaming one dataset. See
 * h5read.h and h5io.h. */
#include "h5read.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileguard.h"
#include "h5base.h"
#include "h5write.h"

struct fh_h5_reader {
    char *path;
    hid_t file;
};

hid_t fh_h5base_reader_file(const fh_h5_reader *r)
{
    return r->file;
}

const char *fh_h5base_reader_path(const fh_h5_reader *r)
{
    return r->path;
}

fattn_status fh_h5_reader_open(const char *path, fh_h5_reader **out)
{
    *out = NULL;
    hid_t fapl = H5I_INVALID_HID;
    fattn_status st = fh_h5base_enter(&fapl);
    if (st != FATTN_OK)
        return st;
    /* The file is opened by its pin where it has one (the very file the
     * isolated child checked, fileguard.h), else through a descriptor of
     * our own: either way its type is checked without blocking on it, and
     * HDF5 opens exactly that file. */
    int own_fd = -1;
    char fdpath[64];
    const char *open_path = fh_fileguard_read_path(path, fdpath, sizeof fdpath);
    if (open_path == path) {
        if ((st = fh_fileguard_open_input(path, &own_fd)) != FATTN_OK)
            return st;
        int n = snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", own_fd);
        if (n > 0 && (size_t)n < sizeof fdpath && access(fdpath, F_OK) == 0)
            open_path = fdpath;
    }
    fh_h5_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = fh_runtree_strdup(path))) {
        free(r);
        if (own_fd >= 0)
            close(own_fd);
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
    }
    r->file = H5Fopen(open_path, H5F_ACC_RDONLY, fapl);
    if (own_fd >= 0)
        close(own_fd); /* HDF5 holds its own descriptor of the file */
    if (r->file < 0) {
        st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: open", path);
        free(r->path);
        free(r);
        return st;
    }
    *out = r;
    return FATTN_OK;
}

void fh_h5_reader_close(fh_h5_reader *r)
{
    if (!r)
        return;
    H5E_BEGIN_TRY { H5Fclose(r->file); }
    H5E_END_TRY;
    free(r->path);
    free(r);
}

bool fh_h5_reader_exists(fh_h5_reader *r, const char *path)
{
    if (fh_h5base_enter(NULL) != FATTN_OK)
        return false;
    size_t n = strlen(path);
    char *buf = malloc(n + 1);
    if (!buf)
        return false;
    bool ok = true;
    for (size_t i = 1; i <= n && ok; i++) {
        if (i == n || path[i] == '/') {
            if (i == 1 && path[0] == '/' && n == 1)
                break;
            memcpy(buf, path, i);
            buf[i] = '\0';
            if (strcmp(buf, "/") == 0)
                continue;
            htri_t e = H5Lexists(r->file, buf, H5P_DEFAULT);
            ok = e > 0;
        }
    }
    H5Eclear2(H5E_DEFAULT);
    free(buf);
    return ok;
}

typedef struct name_list {
    char **names;
    size_t n, cap;
    bool bad_link;      /* a soft or external link was seen */
    char bad_name[FH_H5_NAME_MAX + 1];
    bool oom;
} name_list;

static void name_list_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
}

static bool name_list_add(name_list *l, const char *name)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **nn = realloc(l->names, cap * sizeof *nn);
        if (!nn)
            return false;
        l->names = nn;
        l->cap = cap;
    }
    if (!(l->names[l->n] = fh_runtree_strdup(name)))
        return false;
    l->n++;
    return true;
}

static herr_t link_cb(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
    (void)g;
    name_list *l = ctx;
    if (info->type != H5L_TYPE_HARD) {
        l->bad_link = true;
        snprintf(l->bad_name, sizeof l->bad_name, "%s", name);
        return 1;
    }
    if (!name_list_add(l, name)) {
        l->oom = true;
        return -1;
    }
    return 0;
}

static herr_t attr_cb(hid_t loc, const char *name, const H5A_info_t *info, void *ctx)
{
    (void)loc;
    (void)info;
    name_list *l = ctx;
    if (!name_list_add(l, name)) {
        l->oom = true;
        return -1;
    }
    return 0;
}

typedef struct read_ctx {
    fh_h5_reader *r;
    bool allow_corrupt;
    bool metadata_only;
    double text, text_max; /* attribute text read so far, and its bound */
    haddr_t *seen;  /* addresses of groups visited */
    size_t n_seen, cap_seen;
} read_ctx;

/* Read one attribute into node n (validated kinds only). */
static fattn_status read_attr(read_ctx *c, hid_t obj, const char *objpath, const char *name,
                              fh_h5_node *n, char *dtype_out, char *digest_out)
{
    const char *file = c->r->path;
    if (fh_runtree_check_name("attribute", name, false) != FATTN_OK)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: attribute name not allowed", file,
                           objpath);
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": open", file, objpath, name);
    hid_t t = H5Aget_type(a), s = H5Aget_space(a);
    fattn_status st = FATTN_OK;
    if (t < 0 || s < 0) {
        st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": type", file, objpath, name);
        goto out;
    }
    H5S_class_t sclass = H5Sget_simple_extent_type(s);
    int rank = H5Sget_simple_extent_ndims(s);
    hsize_t dims[1] = {0};
    if (sclass == H5S_SIMPLE && rank == 1)
        H5Sget_simple_extent_dims(s, dims, NULL);
    bool scalar = sclass == H5S_SCALAR;
    bool pair = sclass == H5S_SIMPLE && rank == 1 && dims[0] == 2;
    H5T_class_t tclass = H5Tget_class(t);
    bool is_reserved = n->is_dataset && (strcmp(name, "dtype") == 0 || strcmp(name, "digest") == 0);
    if (tclass == H5T_STRING && scalar && H5Tis_variable_str(t) > 0) {
        H5T_cset_t cset = H5Tget_cset(t);
        hid_t mt = fh_h5base_vlen_string_type(cset);
        char *p = NULL;
        if (mt < 0 || H5Aread(a, mt, &p) < 0) {
            st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": read", file, objpath,
                         name);
        } else if (!p) {
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": null string", file,
                             objpath, name);
        } else if ((c->text += (double)strlen(p)) > c->text_max) {
            /* the text lives in the file beside the datasets: more than
             * that is heap objects shared or overlapping, read again */
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": the attributes "
                             "hold more text (%.0f bytes so far) than the file has room for (%.0f "
                             "bytes): shared or overlapping heap objects, refused",
                             file, objpath, name, c->text, c->text_max);
        } else if (!fh_runtree_utf8_ok(p)) {
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": not UTF-8", file,
                             objpath, name);
        } else if (is_reserved) {
            char *dst = strcmp(name, "dtype") == 0 ? dtype_out : digest_out;
            snprintf(dst, 64, "%s", p);
            if (strlen(p) >= 64)
                dst[0] = '\0';
        } else {
            st = fh_h5_node_set_string(n, name, p);
        }
        if (p)
            H5free_memory(p);
        if (mt >= 0)
            H5Tclose(mt);
        goto out;
    }
    if (is_reserved) {
        st = fattn_error(FATTN_E_INVALID_FILE,
                         "%s: %s: attribute \"%s\" is not a variable-length string", file, objpath,
                         name);
        goto out;
    }
    if (tclass == H5T_INTEGER && H5Tequal(t, H5T_STD_I64LE) > 0 && (scalar || pair)) {
        int64_t v[2] = {0, 0};
        if (H5Aread(a, H5T_STD_I64LE, v) < 0)
            st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": read", file, objpath,
                         name);
        else
            st = scalar ? fh_h5_node_set_int64(n, name, v[0])
                        : fh_h5_node_set_int64_pair(n, name, v);
    } else if (tclass == H5T_INTEGER && H5Tequal(t, H5T_STD_U8LE) > 0 && scalar) {
        uint8_t v = 0;
        if (H5Aread(a, H5T_STD_U8LE, &v) < 0)
            st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": read", file, objpath,
                         name);
        else
            st = fh_h5_node_set_uint8(n, name, v);
    } else if (tclass == H5T_FLOAT && H5Tequal(t, H5T_IEEE_F32LE) > 0 && scalar) {
        float v = 0;
        if (H5Aread(a, H5T_IEEE_F32LE, &v) < 0)
            st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": read", file, objpath,
                         name);
        else
            st = fh_h5_node_set_float32(n, name, v);
    } else {
        st = fattn_error(FATTN_E_INVALID_FILE,
                         "%s: %s: attribute \"%s\": unsupported type or shape (want a "
                         "variable-length string, int64, int64[2], float32 or uint8 scalar)",
                         file, objpath, name);
    }
out:
    if (s >= 0)
        H5Sclose(s);
    if (t >= 0)
        H5Tclose(t);
    H5Aclose(a);
    return st;
}

static fattn_status read_attrs(read_ctx *c, hid_t obj, const char *objpath, fh_h5_node *n,
                               char *dtype_out, char *digest_out)
{
    name_list l = {0};
    hsize_t idx = 0;
    fattn_status st = FATTN_OK;
    if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, attr_cb, &l) < 0) {
        st = l.oom ? fattn_error(FATTN_E_NOMEM, "%s: out of memory", c->r->path)
                   : fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: list attributes", c->r->path,
                             objpath);
        goto out;
    }
    for (size_t i = 0; i < l.n; i++)
        if ((st = read_attr(c, obj, objpath, l.names[i], n, dtype_out, digest_out)) != FATTN_OK)
            goto out;
out:
    name_list_free(&l);
    return st;
}

static fattn_status read_dataset(read_ctx *c, hid_t d, const char *path, fh_h5_node *n)
{
    const char *file = c->r->path;
    char dtype_s[64] = "", digest_s[64] = "";
    n->is_dataset = true;
    fattn_status st = read_attrs(c, d, path, n, dtype_s, digest_s);
    if (st != FATTN_OK)
        return st;
    if (!dtype_s[0])
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: dataset has no dtype attribute", file,
                           path);
    if (fattn_dtype_parse(dtype_s, &n->dtype) != FATTN_OK)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: unknown dtype \"%s\"", file, path,
                           dtype_s);
    if (!fh_digest_is_valid(digest_s))
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: missing or malformed digest attribute",
                           file, path);
    memcpy(n->stored_digest, digest_s, FH_DIGEST_LEN);

    hid_t t = H5Dget_type(d), want = (hid_t)fh_h5_file_type(n->dtype);
    hid_t s = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
    if (t < 0 || want < 0 || s < 0 || dcpl < 0) {
        st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: dataset type, space or properties", file, path);
        goto out;
    }
    if (H5Tequal(t, want) <= 0) {
        st = fattn_error(FATTN_E_INVALID_FILE,
                         "%s: %s: storage type does not match dtype \"%s\" (class %d, %zu bytes)",
                         file, path, dtype_s, (int)H5Tget_class(t), H5Tget_size(t));
        goto out;
    }
    H5S_class_t sclass = H5Sget_simple_extent_type(s);
    int rank = H5Sget_simple_extent_ndims(s);
    if ((sclass != H5S_SIMPLE && sclass != H5S_SCALAR) || rank < 0 || rank > FATTN_MAX_DIMS) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: dataspace is not simple of rank <= %d",
                         file, path, FATTN_MAX_DIMS);
        goto out;
    }
    hsize_t dims[FATTN_MAX_DIMS];
    if (rank > 0 && H5Sget_simple_extent_dims(s, dims, NULL) < 0) {
        st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: dataspace dims", file, path);
        goto out;
    }
    n->ndim = rank;
    for (int i = 0; i < rank; i++) {
        if (dims[i] > (hsize_t)INT64_MAX) {
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: dimension %d too large", file, path, i);
            goto out;
        }
        n->shape[i] = (int64_t)dims[i];
    }
    if (!fh_runtree_shape_bytes(n->dtype, n->ndim, n->shape, &n->nbytes)) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: size overflows", file, path);
        goto out;
    }
    H5D_layout_t layout = H5Pget_layout(dcpl);
    if ((layout != H5D_CONTIGUOUS && layout != H5D_COMPACT) || H5Pget_nfilters(dcpl) != 0 ||
        H5Pget_external_count(dcpl) != 0) {
        st = fattn_error(FATTN_E_INVALID_FILE,
                         "%s: %s: only contiguous or compact datasets without filters or "
                         "external storage are read",
                         file, path);
        goto out;
    }
    hsize_t stored = H5Dget_storage_size(d);
    if (stored != (hsize_t)n->nbytes) {
        st = fattn_error(FATTN_E_INVALID_FILE,
                         "%s: %s: %" PRIu64 " bytes of storage for %zu bytes of data", file, path,
                         (uint64_t)stored, n->nbytes);
        goto out;
    }
    if (c->metadata_only)
        goto out; /* no data, no digest: n->digest stays "" */
    if (n->nbytes) {
        if (!(n->data = malloc(n->nbytes))) {
            st = fattn_error(FATTN_E_NOMEM, "%s: %s: out of memory (%zu bytes)", file, path,
                             n->nbytes);
            goto out;
        }
        if (H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, n->data) < 0) {
            st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: read", file, path);
            goto out;
        }
    }
    fh_digest_bytes(n->data, n->nbytes, n->digest);
    if (strcmp(n->digest, n->stored_digest) != 0) {
        if (c->allow_corrupt)
            n->corrupt = true;
        else
            st = fattn_error(FATTN_E_INVALID_FILE,
                             "%s: %s: corrupt: stored digest %s, data digest %s", file, path,
                             n->stored_digest, n->digest);
    }
out:
    fh_h5base_close(dcpl);
    fh_h5base_close(s);
    fh_h5base_close(want);
    fh_h5base_close(t);
    return st;
}

static fattn_status read_object(read_ctx *c, hid_t obj, const char *name, const char *path,
                                int depth, fh_h5_node **out);

/* Read the child `name` of group g (at path) into n's children. */
static fattn_status read_child(read_ctx *c, hid_t g, const char *path, const char *name,
                               int depth, fh_h5_node *n)
{
    const char *file = c->r->path;
    char *cp = fh_runtree_path_join(path, name);
    if (!cp)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", file);
    fattn_status st = FATTN_OK;
    hid_t o = H5Oopen(g, name, H5P_DEFAULT);
    if (o < 0) {
        st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: open", file, cp);
        goto out;
    }
    fh_h5_node *child = NULL;
    st = read_object(c, o, name, cp, depth + 1, &child);
    H5Oclose(o);
    if (st != FATTN_OK)
        goto out;
    st = fh_runtree_insert_child(n, child);
    if (st != FATTN_OK) {
        fh_h5_node_free(child);
        char why[512];
        snprintf(why, sizeof why, "%s", fattn_last_error());
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: %s", file, cp, why);
    }
out:
    free(cp);
    return st;
}

static fattn_status read_group(read_ctx *c, hid_t g, const char *path, int depth,
                               fh_h5_node *n)
{
    const char *file = c->r->path;
    H5O_info_t info;
    if (H5Oget_info2(g, &info, H5O_INFO_BASIC) < 0)
        return fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: object info", file, path);
    for (size_t i = 0; i < c->n_seen; i++) {
        if (c->seen[i] == info.addr)
            return fattn_error(FATTN_E_INVALID_FILE,
                               "%s: %s: group reached twice (hard-link cycle or alias)", file,
                               path);
    }
    if (c->n_seen == c->cap_seen) {
        size_t cap = c->cap_seen ? 2 * c->cap_seen : 32;
        haddr_t *ns = realloc(c->seen, cap * sizeof *ns);
        if (!ns)
            return fattn_error(FATTN_E_NOMEM, "%s: out of memory", file);
        c->seen = ns;
        c->cap_seen = cap;
    }
    c->seen[c->n_seen++] = info.addr;

    fattn_status st = read_attrs(c, g, path, n, NULL, NULL);
    if (st != FATTN_OK)
        return st;
    name_list l = {0};
    hsize_t idx = 0;
    if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, link_cb, &l) < 0) {
        st = l.oom ? fattn_error(FATTN_E_NOMEM, "%s: out of memory", file)
                   : fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: list links", file, path);
        goto out;
    }
    if (l.bad_link) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: \"%s\" is a soft or external link", file,
                         path, l.bad_name);
        goto out;
    }
    for (size_t i = 0; i < l.n; i++)
        if ((st = read_child(c, g, path, l.names[i], depth, n)) != FATTN_OK)
            goto out;
out:
    name_list_free(&l);
    return st;
}

static fattn_status read_object(read_ctx *c, hid_t obj, const char *name, const char *path,
                                int depth, fh_h5_node **out)
{
    const char *file = c->r->path;
    *out = NULL;
    if (depth > FH_H5_MAX_DEPTH)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: nested deeper than %d", file, path,
                           FH_H5_MAX_DEPTH);
    if (name[0] && fh_runtree_check_name("link", name, false) != FATTN_OK)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: link name not allowed", file, path);
    fh_h5_node *n = calloc(1, sizeof *n);
    if (!n || !(n->name = fh_runtree_strdup(name))) {
        free(n);
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", file);
    }
    fattn_status st;
    H5I_type_t type = H5Iget_type(obj);
    if (type == H5I_GROUP)
        st = read_group(c, obj, path, depth, n);
    else if (type == H5I_DATASET)
        st = read_dataset(c, obj, path, n);
    else
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: neither a group nor a dataset", file, path);
    if (st != FATTN_OK) {
        fh_h5_node_free(n);
        return st;
    }
    *out = n;
    return FATTN_OK;
}

fattn_status fh_h5_reader_read(fh_h5_reader *r, const char *path,
                                  const fh_h5_read_opts *opts, fh_h5_node **out)
{
    *out = NULL;
    fattn_status st = fh_h5base_enter(NULL);
    if (st != FATTN_OK)
        return st;
    if (path[0] != '/')
        return fattn_error(FATTN_E_INVALID_ARG, "%s: path \"%s\" is not absolute", r->path, path);
    if (strcmp(path, "/") != 0 && !fh_h5_reader_exists(r, path))
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: no such object", r->path, path);
    hid_t o = H5Oopen(r->file, path, H5P_DEFAULT);
    if (o < 0)
        return fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: open", r->path, path);
    const char *slash = strrchr(path, '/');
    const char *name = strcmp(path, "/") == 0 ? "" : slash + 1;
    double span = fh_h5base_file_span(r->file);
    read_ctx c = {r, opts ? opts->allow_corrupt : false, opts ? opts->metadata_only : false,
                  0.0, opts && opts->attr_text_max > 0 ? opts->attr_text_max : span,
                  NULL, 0, 0};
    st = read_object(&c, o, name, path, 0, out);
    free(c.seen);
    H5Oclose(o);
    return st;
}

/* ---- streaming one dataset ---------------------------------------------- */

struct fh_h5_dstream {
    hid_t dset, ftype, fspace;
    int rank;
    hsize_t dims[FATTN_MAX_DIMS];
    hsize_t inner[FATTN_MAX_DIMS]; /* elements per step of dim k */
    uint64_t numel, pos;           /* elements */
    size_t esize;
    char *path;
    const char *file;
};

void fh_h5_dstream_close(fh_h5_dstream *s)
{
    if (!s)
        return;
    fh_h5base_close(s->fspace);
    fh_h5base_close(s->ftype);
    fh_h5base_close(s->dset);
    free(s->path);
    free(s);
}

fattn_status fh_h5_dstream_open(fh_h5_reader *r, const char *path,
                                   const fh_h5_node *meta, fh_h5_dstream **out)
{
    *out = NULL;
    fattn_status st = fh_h5base_enter(NULL);
    if (st != FATTN_OK)
        return st;
    if (!meta->is_dataset)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: %s: not a dataset", r->path, path);
    fh_h5_dstream *s = calloc(1, sizeof *s);
    if (!s || !(s->path = fh_runtree_strdup(path))) {
        free(s);
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", r->path);
    }
    s->dset = s->ftype = s->fspace = H5I_INVALID_HID;
    s->file = r->path;
    hid_t want = H5I_INVALID_HID;
    s->dset = H5Dopen2(r->file, path, H5P_DEFAULT);
    if (s->dset < 0) {
        st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: open", r->path, path);
        goto out;
    }
    s->ftype = H5Dget_type(s->dset);
    s->fspace = H5Dget_space(s->dset);
    want = (hid_t)fh_h5_file_type(meta->dtype);
    if (s->ftype < 0 || s->fspace < 0 || want < 0) {
        st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: dataset type or space", r->path, path);
        goto out;
    }
    /* The file may not change between the metadata pass and this one. */
    s->rank = H5Sget_simple_extent_ndims(s->fspace);
    if (H5Tequal(s->ftype, want) <= 0 || s->rank != meta->ndim ||
        (s->rank > 0 && H5Sget_simple_extent_dims(s->fspace, s->dims, NULL) < 0)) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: dataset changed while reading", r->path,
                         path);
        goto out;
    }
    s->numel = 1;
    for (int i = 0; i < s->rank; i++) {
        if ((int64_t)s->dims[i] != meta->shape[i]) {
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: dataset changed while reading",
                             r->path, path);
            goto out;
        }
        s->numel *= s->dims[i]; /* no overflow: the metadata pass checked the byte size */
    }
    for (int k = s->rank - 1; k >= 0; k--)
        s->inner[k] = k == s->rank - 1 ? 1 : s->inner[k + 1] * s->dims[k + 1];
    s->esize = fattn_dtype_size(meta->dtype);
    *out = s;
out:
    fh_h5base_close(want);
    if (st != FATTN_OK)
        fh_h5_dstream_close(s);
    return st;
}

fattn_status fh_h5_dstream_read(fh_h5_dstream *s, void *buf, size_t cap, size_t *got)
{
    *got = 0;
    if (s->pos >= s->numel)
        return FATTN_OK;
    fattn_status st = fh_h5base_enter(NULL);
    if (st != FATTN_OK)
        return st;
    uint64_t cap_el = cap / s->esize;
    if (cap_el == 0)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: %s: buffer smaller than one element",
                           s->file, s->path);
    if (s->rank == 0) {
        if (H5Dread(s->dset, s->ftype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
            return fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: read", s->file, s->path);
        s->pos = 1;
        *got = s->esize;
        return FATTN_OK;
    }
    /* The next C-order range as one hyperslab: the outermost dimension k
     * at which the position is aligned (all later indices 0) and one step
     * of k fits the buffer; take as many steps of k as fit. */
    hsize_t idx[FATTN_MAX_DIMS] = {0}, start[FATTN_MAX_DIMS], count[FATTN_MAX_DIMS];
    uint64_t rem = s->pos;
    for (int i = 0; i < s->rank; i++) {
        idx[i] = rem / s->inner[i];
        rem %= s->inner[i];
    }
    int k = 0;
    for (; k < s->rank - 1; k++) {
        bool aligned = true;
        for (int j = k + 1; j < s->rank; j++)
            aligned = aligned && idx[j] == 0;
        if (aligned && s->inner[k] <= cap_el)
            break;
    }
    uint64_t steps = cap_el / s->inner[k];
    if (steps > s->dims[k] - idx[k])
        steps = s->dims[k] - idx[k];
    for (int i = 0; i < s->rank; i++) {
        start[i] = i <= k ? idx[i] : 0;
        count[i] = i < k ? 1 : i == k ? steps : s->dims[i];
    }
    hsize_t n = steps * s->inner[k];
    hid_t ms = H5Screate_simple(1, &n, NULL);
    if (ms < 0 || H5Sselect_hyperslab(s->fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
        H5Dread(s->dset, s->ftype, ms, s->fspace, H5P_DEFAULT, buf) < 0) {
        st = fh_h5base_fail(FATTN_E_INVALID_FILE, "%s: %s: read elements %" PRIu64 "..%" PRIu64,
                     s->file, s->path, s->pos, s->pos + (uint64_t)n);
        fh_h5base_close(ms);
        return st;
    }
    fh_h5base_close(ms);
    s->pos += n;
    *got = (size_t)n * s->esize;
    return FATTN_OK;
}

fattn_status fh_h5_read_file(const char *path, const fh_h5_read_opts *opts,
                                fh_h5_node **out)
{
    *out = NULL;
    fh_h5_reader *r;
    fattn_status st = fh_h5_reader_open(path, &r);
    if (st != FATTN_OK)
        return st;
    st = fh_h5_reader_read(r, "/", opts, out);
    fh_h5_reader_close(r);
    return st;
}
