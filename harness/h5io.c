/* The run-file layer over HDF5 1.10.8: in-memory trees, a sorted,
 * byte-reproducible, atomic writer, and a validating reader. See h5io.h. */
#include "h5io.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "fattn's run files assume a little-endian host (memory type = file type)"
#endif

_Static_assert(sizeof(hid_t) == sizeof(int64_t), "hid_t is int64_t in HDF5 1.10");

/* ------------------------------------------------------------------------ */
/* HDF5 set-up and errors                                                   */
/* ------------------------------------------------------------------------ */

static pthread_once_t fapl_once = PTHREAD_ONCE_INIT;
static hid_t shared_fapl = H5I_INVALID_HID;

static void make_fapl(void)
{
    /* No H5_term_library at exit (it must be said before the library's
     * first call, hence here, and h5_enter calls this first). A file whose
     * close failed part way (a full disk: EFBIG/ENOSPC while flushing)
     * stays in HDF5's ID table half torn down, and 1.10.8's termination
     * then dereferences NULL closing it again (H5F__close_cb): fattn
     * reported the failure cleanly and then died of SIGSEGV in exit().
     * Every file fattn opens is closed explicitly, so nothing is lost;
     * tests/test_reliability.py "disk full" is the regression test. */
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t p = H5Pcreate(H5P_FILE_ACCESS);
    if (p < 0)
        return;
    if (H5Pset_libver_bounds(p, H5F_LIBVER_V18, H5F_LIBVER_V110) < 0 ||
        /* Lock, but go on where the file system has no locks (NFS). */
        H5Pset_file_locking(p, 1, 1) < 0) {
        H5Pclose(p);
        return;
    }
    shared_fapl = p;
}

/* Every entry point: quiet this thread's error stack, get the shared fapl. */
static fattn_status h5_enter(hid_t *fapl)
{
    pthread_once(&fapl_once, make_fapl);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (shared_fapl < 0)
        return fattn_error(FATTN_E_INTERNAL, "HDF5: cannot create the file access property list");
    if (fapl)
        *fapl = shared_fapl;
    return FATTN_OK;
}

typedef struct stack_info {
    char api[96];
    char deep[512];
    unsigned frames;
} stack_info;

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *ctx)
{
    stack_info *si = ctx;
    if (n == 0)
        snprintf(si->api, sizeof si->api, "%s", e->func_name ? e->func_name : "?");
    snprintf(si->deep, sizeof si->deep, "%s", e->desc ? e->desc : "?");
    si->frames = n + 1;
    return 0;
}

/* The failure of an HDF5 call as one message: "<context>: <API>: <deepest
 * cause>"; clears the stack. */
static fattn_status h5_fail(fattn_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static fattn_status h5_fail(fattn_status st, const char *fmt, ...)
{
    char ctx[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    stack_info si = {"", "", 0};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, &si);
    H5Eclear2(H5E_DEFAULT);
    if (si.frames == 0)
        return fattn_error(st, "%s: HDF5 call failed", ctx);
    return fattn_error(st, "%s: %s: %s", ctx, si.api, si.deep);
}

static void close_id(hid_t id)
{
    if (id < 0)
        return;
    H5E_BEGIN_TRY
    {
        switch (H5Iget_type(id)) {
        case H5I_DATATYPE: H5Tclose(id); break;
        case H5I_DATASPACE: H5Sclose(id); break;
        case H5I_GENPROP_LST: H5Pclose(id); break;
        case H5I_ATTR: H5Aclose(id); break;
        default: H5Oclose(id); break;
        }
    }
    H5E_END_TRY;
}

/* ------------------------------------------------------------------------ */
/* Types                                                                    */
/* ------------------------------------------------------------------------ */

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

int64_t fattn_h5_file_type(fattn_dtype dtype)
{
    if (h5_enter(NULL) != FATTN_OK)
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

static hid_t vlen_string_type(H5T_cset_t cset)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0)
        return t;
    if (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, cset) < 0) {
        H5Tclose(t);
        return H5I_INVALID_HID;
    }
    return t;
}

/* ------------------------------------------------------------------------ */
/* Trees                                                                    */
/* ------------------------------------------------------------------------ */

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* Link and attribute names: printable ASCII without '/', not "." or "..". */
static fattn_status check_name(const char *what, const char *name, bool allow_empty)
{
    size_t n = strlen(name);
    if (n == 0 && allow_empty)
        return FATTN_OK;
    if (n == 0 || n > FATTN_H5_NAME_MAX)
        return fattn_error(FATTN_E_INVALID_ARG, "%s name \"%s\": length must be 1..%d", what,
                           name, FATTN_H5_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch < 0x20 || ch > 0x7e || ch == '/')
            return fattn_error(FATTN_E_INVALID_ARG,
                               "%s name \"%s\": byte 0x%02x not allowed", what, name, ch);
    }
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return fattn_error(FATTN_E_INVALID_ARG, "%s name \"%s\" not allowed", what, name);
    return FATTN_OK;
}

static bool utf8_ok(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        if (*p < 0x80) {
            p++;
            continue;
        }
        int extra;
        uint32_t cp;
        if ((*p & 0xe0) == 0xc0) {
            extra = 1;
            cp = *p & 0x1f;
        } else if ((*p & 0xf0) == 0xe0) {
            extra = 2;
            cp = *p & 0x0f;
        } else if ((*p & 0xf8) == 0xf0) {
            extra = 3;
            cp = *p & 0x07;
        } else {
            return false;
        }
        p++;
        for (int i = 0; i < extra; i++, p++) {
            if ((*p & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (*p & 0x3f);
        }
        static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
    }
    return true;
}

fattn_status fattn_h5_node_new_group(const char *name, fattn_h5_node **out)
{
    *out = NULL;
    fattn_status st = check_name("group", name, true);
    if (st != FATTN_OK)
        return st;
    fattn_h5_node *n = calloc(1, sizeof *n);
    if (!n || !(n->name = dup_str(name))) {
        free(n);
        return fattn_error(FATTN_E_NOMEM, "out of memory for group \"%s\"", name);
    }
    *out = n;
    return FATTN_OK;
}

static void attr_clear(fattn_h5_attr *a)
{
    free(a->name);
    free(a->s);
    memset(a, 0, sizeof *a);
}

void fattn_h5_node_free(fattn_h5_node *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n_attrs; i++)
        attr_clear(&n->attrs[i]);
    free(n->attrs);
    for (size_t i = 0; i < n->n_children; i++)
        fattn_h5_node_free(n->children[i]);
    free(n->children);
    free(n->data);
    free(n->name);
    free(n);
}

/* Index of `name` among children, or the insertion point with *found false. */
static size_t child_index(const fattn_h5_node *p, const char *name, bool *found)
{
    size_t lo = 0, hi = p->n_children;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(p->children[mid]->name, name);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

static fattn_status insert_child(fattn_h5_node *p, fattn_h5_node *c)
{
    if (p->is_dataset)
        return fattn_error(FATTN_E_STATE, "\"%s\" is a dataset and cannot hold \"%s\"", p->name,
                           c->name);
    bool found;
    size_t at = child_index(p, c->name, &found);
    if (found)
        return fattn_error(FATTN_E_STATE, "group \"%s\" already has a child \"%s\"", p->name,
                           c->name);
    if (p->n_children == p->cap_children) {
        size_t cap = p->cap_children ? 2 * p->cap_children : 8;
        fattn_h5_node **nc = realloc(p->children, cap * sizeof *nc);
        if (!nc)
            return fattn_error(FATTN_E_NOMEM, "out of memory adding \"%s\"", c->name);
        p->children = nc;
        p->cap_children = cap;
    }
    memmove(p->children + at + 1, p->children + at, (p->n_children - at) * sizeof *p->children);
    p->children[at] = c;
    p->n_children++;
    return FATTN_OK;
}

fattn_status fattn_h5_node_adopt(fattn_h5_node *parent, fattn_h5_node *child)
{
    fattn_status st = check_name("link", child->name, false);
    if (st != FATTN_OK)
        return st;
    return insert_child(parent, child);
}

fattn_status fattn_h5_node_copy_attrs(const fattn_h5_node *src, fattn_h5_node *dst)
{
    fattn_status st = FATTN_OK;
    for (size_t i = 0; i < src->n_attrs && st == FATTN_OK; i++) {
        const fattn_h5_attr *a = &src->attrs[i];
        if (src->is_dataset && (!strcmp(a->name, "dtype") || !strcmp(a->name, "digest")))
            continue;
        switch (a->kind) {
        case FATTN_H5_ATTR_STRING: st = fattn_h5_node_set_string(dst, a->name, a->s); break;
        case FATTN_H5_ATTR_INT64: st = fattn_h5_node_set_int64(dst, a->name, a->i64[0]); break;
        case FATTN_H5_ATTR_FLOAT32: st = fattn_h5_node_set_float32(dst, a->name, a->f32); break;
        case FATTN_H5_ATTR_UINT8: st = fattn_h5_node_set_uint8(dst, a->name, a->u8); break;
        case FATTN_H5_ATTR_INT64_PAIR:
            st = fattn_h5_node_set_int64_pair(dst, a->name, a->i64);
            break;
        }
    }
    return st;
}

fattn_status fattn_h5_node_copy(const fattn_h5_node *src, fattn_h5_node *dst_parent,
                                const char *skip)
{
    fattn_status st;
    fattn_h5_node *d;
    if (src->is_dataset) {
        st = fattn_h5_node_add_bytes(dst_parent, src->name, src->dtype, src->ndim, src->shape,
                                     src->data, src->nbytes, &d);
        return st == FATTN_OK ? fattn_h5_node_copy_attrs(src, d) : st;
    }
    if ((st = fattn_h5_node_group(dst_parent, src->name, &d)) ||
        (st = fattn_h5_node_copy_attrs(src, d)))
        return st;
    for (size_t i = 0; i < src->n_children; i++) {
        if (skip && !strcmp(src->children[i]->name, skip))
            continue;
        if ((st = fattn_h5_node_copy(src->children[i], d, skip)))
            return st;
    }
    return FATTN_OK;
}

fattn_status fattn_h5_node_group(fattn_h5_node *parent, const char *name, fattn_h5_node **out)
{
    *out = NULL;
    bool found;
    size_t at = child_index(parent, name, &found);
    if (found) {
        if (parent->children[at]->is_dataset)
            return fattn_error(FATTN_E_STATE, "\"%s\" in \"%s\" is a dataset, not a group", name,
                               parent->name);
        *out = parent->children[at];
        return FATTN_OK;
    }
    fattn_h5_node *g;
    fattn_status st = check_name("group", name, false);
    if (st == FATTN_OK)
        st = fattn_h5_node_new_group(name, &g);
    if (st != FATTN_OK)
        return st;
    st = insert_child(parent, g);
    if (st != FATTN_OK) {
        fattn_h5_node_free(g);
        return st;
    }
    *out = g;
    return FATTN_OK;
}

/* numel * size without overflow; false if it does not fit. */
static bool shape_bytes(fattn_dtype dtype, int ndim, const int64_t *shape, size_t *bytes)
{
    uint64_t n = fattn_dtype_size(dtype);
    if (n == 0 || ndim < 0 || ndim > FATTN_MAX_DIMS)
        return false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return false;
        uint64_t d = (uint64_t)shape[i];
        if (d != 0 && n > (uint64_t)INT64_MAX / d)
            return false;
        n *= d;
    }
    if (n > SIZE_MAX)
        return false;
    *bytes = (size_t)n;
    return true;
}

static fattn_status new_dataset(fattn_h5_node *parent, const char *name, fattn_dtype dtype,
                                int ndim, const int64_t *shape, size_t nbytes,
                                fattn_h5_node **out)
{
    fattn_status st = check_name("dataset", name, false);
    if (st != FATTN_OK)
        return st;
    bool found;
    child_index(parent, name, &found);
    if (found)
        return fattn_error(FATTN_E_STATE, "group \"%s\" already has a child \"%s\"",
                           parent->name, name);
    fattn_h5_node *n = calloc(1, sizeof *n);
    if (!n || !(n->name = dup_str(name)) || (nbytes && !(n->data = malloc(nbytes)))) {
        fattn_h5_node_free(n);
        return fattn_error(FATTN_E_NOMEM, "out of memory for dataset \"%s\" (%zu bytes)", name,
                           nbytes);
    }
    n->is_dataset = true;
    n->dtype = dtype;
    n->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        n->shape[i] = shape[i];
    n->nbytes = nbytes;
    *out = n;
    return FATTN_OK;
}

static fattn_status finish_dataset(fattn_h5_node *parent, fattn_h5_node *n, fattn_h5_node **out)
{
    fattn_digest_bytes(n->data, n->nbytes, n->digest);
    memcpy(n->stored_digest, n->digest, sizeof n->digest);
    fattn_status st = insert_child(parent, n);
    if (st != FATTN_OK) {
        fattn_h5_node_free(n);
        return st;
    }
    if (out)
        *out = n;
    return FATTN_OK;
}

fattn_status fattn_h5_node_add_tensor(fattn_h5_node *parent, const char *name,
                                      const fattn_tensor *t, fattn_h5_node **out)
{
    if (fattn_tensor_is_empty(t))
        return fattn_error(FATTN_E_INVALID_ARG,
                           "dataset \"%s\": the empty slot has no dataset (its absence is data)",
                           name);
    if (t->device != FATTN_DEVICE_HOST)
        return fattn_error(FATTN_E_INVALID_ARG, "dataset \"%s\": tensor is not on the host", name);
    size_t nbytes;
    if (!shape_bytes(t->dtype, t->ndim, t->shape, &nbytes))
        return fattn_error(FATTN_E_OVERFLOW, "dataset \"%s\": size does not fit", name);
    fattn_h5_node *n;
    fattn_status st = new_dataset(parent, name, t->dtype, t->ndim, t->shape, nbytes, &n);
    if (st != FATTN_OK)
        return st;
    if (nbytes)
        fattn_tensor_gather(t, n->data);
    return finish_dataset(parent, n, out);
}

fattn_status fattn_h5_node_add_bytes(fattn_h5_node *parent, const char *name, fattn_dtype dtype,
                                     int ndim, const int64_t *shape, const void *data,
                                     size_t nbytes, fattn_h5_node **out)
{
    size_t want;
    if (!shape_bytes(dtype, ndim, shape, &want))
        return fattn_error(FATTN_E_INVALID_ARG, "dataset \"%s\": bad dtype, rank or shape", name);
    if (want != nbytes)
        return fattn_error(FATTN_E_SHAPE, "dataset \"%s\": %zu bytes given, shape needs %zu", name,
                           nbytes, want);
    fattn_h5_node *n;
    fattn_status st = new_dataset(parent, name, dtype, ndim, shape, nbytes, &n);
    if (st != FATTN_OK)
        return st;
    if (nbytes)
        memcpy(n->data, data, nbytes);
    return finish_dataset(parent, n, out);
}

/* The slot for attribute `name` (created, sorted), cleared. */
static fattn_status attr_slot(fattn_h5_node *n, const char *name, fattn_h5_attr **out)
{
    fattn_status st = check_name("attribute", name, false);
    if (st != FATTN_OK)
        return st;
    if (n->is_dataset && (strcmp(name, "dtype") == 0 || strcmp(name, "digest") == 0))
        return fattn_error(FATTN_E_INVALID_ARG,
                           "dataset \"%s\": attribute \"%s\" is written by the run-file layer",
                           n->name, name);
    size_t lo = 0, hi = n->n_attrs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(n->attrs[mid].name, name);
        if (c == 0) {
            free(n->attrs[mid].s);
            n->attrs[mid].s = NULL;
            *out = &n->attrs[mid];
            return FATTN_OK;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (n->n_attrs == n->cap_attrs) {
        size_t cap = n->cap_attrs ? 2 * n->cap_attrs : 8;
        fattn_h5_attr *na = realloc(n->attrs, cap * sizeof *na);
        if (!na)
            return fattn_error(FATTN_E_NOMEM, "out of memory for attribute \"%s\"", name);
        n->attrs = na;
        n->cap_attrs = cap;
    }
    char *nm = dup_str(name);
    if (!nm)
        return fattn_error(FATTN_E_NOMEM, "out of memory for attribute \"%s\"", name);
    memmove(n->attrs + lo + 1, n->attrs + lo, (n->n_attrs - lo) * sizeof *n->attrs);
    memset(&n->attrs[lo], 0, sizeof n->attrs[lo]);
    n->attrs[lo].name = nm;
    n->n_attrs++;
    *out = &n->attrs[lo];
    return FATTN_OK;
}

fattn_status fattn_h5_node_set_string(fattn_h5_node *n, const char *name, const char *v)
{
    if (!utf8_ok(v))
        return fattn_error(FATTN_E_INVALID_ARG, "attribute \"%s\": value is not UTF-8", name);
    char *copy = dup_str(v);
    if (!copy)
        return fattn_error(FATTN_E_NOMEM, "out of memory for attribute \"%s\"", name);
    fattn_h5_attr *a;
    fattn_status st = attr_slot(n, name, &a);
    if (st != FATTN_OK) {
        free(copy);
        return st;
    }
    a->kind = FATTN_H5_ATTR_STRING;
    a->s = copy;
    return FATTN_OK;
}

fattn_status fattn_h5_node_set_int64(fattn_h5_node *n, const char *name, int64_t v)
{
    fattn_h5_attr *a;
    fattn_status st = attr_slot(n, name, &a);
    if (st == FATTN_OK) {
        a->kind = FATTN_H5_ATTR_INT64;
        a->i64[0] = v;
        a->i64[1] = 0;
    }
    return st;
}

fattn_status fattn_h5_node_set_float32(fattn_h5_node *n, const char *name, float v)
{
    fattn_h5_attr *a;
    fattn_status st = attr_slot(n, name, &a);
    if (st == FATTN_OK) {
        a->kind = FATTN_H5_ATTR_FLOAT32;
        a->f32 = v;
    }
    return st;
}

fattn_status fattn_h5_node_set_uint8(fattn_h5_node *n, const char *name, uint8_t v)
{
    fattn_h5_attr *a;
    fattn_status st = attr_slot(n, name, &a);
    if (st == FATTN_OK) {
        a->kind = FATTN_H5_ATTR_UINT8;
        a->u8 = v;
    }
    return st;
}

fattn_status fattn_h5_node_set_int64_pair(fattn_h5_node *n, const char *name, const int64_t v[2])
{
    fattn_h5_attr *a;
    fattn_status st = attr_slot(n, name, &a);
    if (st == FATTN_OK) {
        a->kind = FATTN_H5_ATTR_INT64_PAIR;
        a->i64[0] = v[0];
        a->i64[1] = v[1];
    }
    return st;
}

fattn_h5_node *fattn_h5_node_find(const fattn_h5_node *n, const char *path)
{
    const fattn_h5_node *cur = n;
    while (cur && *path) {
        while (*path == '/')
            path++;
        if (!*path)
            break;
        const char *end = strchr(path, '/');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        char part[FATTN_H5_NAME_MAX + 1];
        if (len > FATTN_H5_NAME_MAX)
            return NULL;
        memcpy(part, path, len);
        part[len] = '\0';
        bool found;
        size_t at = child_index(cur, part, &found);
        cur = found ? cur->children[at] : NULL;
        path += len;
    }
    return (fattn_h5_node *)cur;
}

const fattn_h5_attr *fattn_h5_node_attr(const fattn_h5_node *n, const char *name)
{
    for (size_t i = 0; i < n->n_attrs; i++) {
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    }
    return NULL;
}

fattn_tensor fattn_h5_node_tensor(const fattn_h5_node *n)
{
    if (!n || !n->is_dataset)
        return fattn_tensor_empty();
    static char zero_size_anchor;
    return fattn_tensor_view(n->data ? n->data : &zero_size_anchor, n->dtype, n->ndim, n->shape);
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct tracked_group {
    char *path;        /* absolute, "/" for the root */
    char *last_child;  /* NULL before the first */
    bool attrs_done;
    bool closed;       /* a later sibling of it or an ancestor's was created */
} tracked_group;

struct fattn_h5_writer {
    char *target;
    char *tmp;
    int tmp_fd;
    hid_t file;
    bool failed;
    fattn_h5_write_hook hook;
    void *hook_ctx;
    tracked_group *groups;
    size_t n_groups, cap_groups;
};

static atomic_uint tmp_counter;

static char *path_join(const char *parent, const char *name)
{
    size_t a = strlen(parent), b = strlen(name);
    bool slash = !(a > 0 && parent[a - 1] == '/');
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, parent, a);
    if (slash)
        p[a++] = '/';
    memcpy(p + a, name, b + 1);
    return p;
}

static tracked_group *find_group(fattn_h5_writer *w, const char *path)
{
    for (size_t i = 0; i < w->n_groups; i++) {
        if (strcmp(w->groups[i].path, path) == 0)
            return &w->groups[i];
    }
    return NULL;
}

static fattn_status track_group(fattn_h5_writer *w, const char *path)
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
    if (!(g->path = dup_str(path)))
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
    w->n_groups++;
    return FATTN_OK;
}

/* Record that child `name` of tracked group `g` is about to be created:
 * it must sort after the previous child; everything tracked below `g`
 * is closed from now on. */
static fattn_status claim_child(fattn_h5_writer *w, tracked_group *g, const char *name)
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
    char *nm = dup_str(name);
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

static fattn_status run_hook(fattn_h5_writer *w, const char *path, const char *attr)
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

static fattn_status write_attr(fattn_h5_writer *w, hid_t obj, const char *objpath,
                               const fattn_h5_attr *a)
{
    fattn_status st = run_hook(w, objpath, a->name);
    if (st != FATTN_OK)
        return st;
    hid_t type = H5I_INVALID_HID, space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
    const void *buf = NULL;
    const char *sp = a->s;
    hsize_t two = 2;
    switch (a->kind) {
    case FATTN_H5_ATTR_STRING:
        type = vlen_string_type(H5T_CSET_UTF8);
        space = H5Screate(H5S_SCALAR);
        buf = &sp;
        break;
    case FATTN_H5_ATTR_INT64:
        type = H5Tcopy(H5T_STD_I64LE);
        space = H5Screate(H5S_SCALAR);
        buf = &a->i64[0];
        break;
    case FATTN_H5_ATTR_FLOAT32:
        type = H5Tcopy(H5T_IEEE_F32LE);
        space = H5Screate(H5S_SCALAR);
        buf = &a->f32;
        break;
    case FATTN_H5_ATTR_UINT8:
        type = H5Tcopy(H5T_STD_U8LE);
        space = H5Screate(H5S_SCALAR);
        buf = &a->u8;
        break;
    case FATTN_H5_ATTR_INT64_PAIR:
        type = H5Tcopy(H5T_STD_I64LE);
        space = H5Screate_simple(1, &two, NULL);
        buf = a->i64;
        break;
    }
    st = FATTN_OK;
    if (type < 0 || space < 0)
        st = h5_fail(FATTN_E_IO, "%s: %s: attribute \"%s\": type", w->target, objpath, a->name);
    else if ((attr = H5Acreate2(obj, a->name, type, space, H5P_DEFAULT, H5P_DEFAULT)) < 0)
        st = h5_fail(FATTN_E_IO, "%s: %s: attribute \"%s\": create", w->target, objpath, a->name);
    else if (H5Awrite(attr, type, buf) < 0)
        st = h5_fail(FATTN_E_IO, "%s: %s: attribute \"%s\": write", w->target, objpath, a->name);
    if (attr >= 0 && H5Aclose(attr) < 0 && st == FATTN_OK)
        st = h5_fail(FATTN_E_IO, "%s: %s: attribute \"%s\": close", w->target, objpath, a->name);
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
    return st;
}

static int cmp_attr_ptr(const void *x, const void *y)
{
    const fattn_h5_attr *a = *(const fattn_h5_attr *const *)x;
    const fattn_h5_attr *b = *(const fattn_h5_attr *const *)y;
    return strcmp(a->name, b->name);
}

/* A node's attributes, sorted; datasets also get dtype and digest. */
static fattn_status write_attrs(fattn_h5_writer *w, hid_t obj, const char *objpath,
                                const fattn_h5_node *n)
{
    size_t count = n->n_attrs + (n->is_dataset ? 2 : 0);
    if (count == 0)
        return FATTN_OK;
    const fattn_h5_attr **list = malloc(count * sizeof *list);
    if (!list)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
    fattn_h5_attr extra[2];
    memset(extra, 0, sizeof extra);
    for (size_t i = 0; i < n->n_attrs; i++)
        list[i] = &n->attrs[i];
    if (n->is_dataset) {
        extra[0].name = (char *)"dtype";
        extra[0].kind = FATTN_H5_ATTR_STRING;
        extra[0].s = (char *)fattn_dtype_name(n->dtype);
        extra[1].name = (char *)"digest";
        extra[1].kind = FATTN_H5_ATTR_STRING;
        extra[1].s = (char *)n->digest;
        list[n->n_attrs] = &extra[0];
        list[n->n_attrs + 1] = &extra[1];
    }
    qsort(list, count, sizeof *list, cmp_attr_ptr);
    fattn_status st = FATTN_OK;
    for (size_t i = 0; i < count && st == FATTN_OK; i++)
        st = write_attr(w, obj, objpath, list[i]);
    free(list);
    return st;
}

static fattn_status write_node(fattn_h5_writer *w, hid_t parent, const char *path,
                               const fattn_h5_node *n);

static fattn_status write_children(fattn_h5_writer *w, hid_t group, const char *path,
                                   const fattn_h5_node *n)
{
    for (size_t i = 0; i < n->n_children; i++) {
        const fattn_h5_node *c = n->children[i];
        if (i > 0 && strcmp(n->children[i - 1]->name, c->name) >= 0)
            return fattn_error(FATTN_E_INTERNAL, "%s: %s: children not sorted", w->target, path);
        char *cp = path_join(path, c->name);
        if (!cp)
            return fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
        fattn_status st = write_node(w, group, cp, c);
        free(cp);
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

static fattn_status write_dataset(fattn_h5_writer *w, hid_t parent, const char *path,
                                  const fattn_h5_node *n)
{
    size_t want;
    if (!shape_bytes(n->dtype, n->ndim, n->shape, &want) || want != n->nbytes)
        return fattn_error(FATTN_E_SHAPE, "%s: %s: shape and byte count disagree", w->target, path);
    hsize_t dims[FATTN_MAX_DIMS];
    for (int i = 0; i < n->ndim; i++)
        dims[i] = (hsize_t)n->shape[i];
    hid_t type = (hid_t)fattn_h5_file_type(n->dtype);
    hid_t space = n->ndim == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(n->ndim, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t d = H5I_INVALID_HID;
    fattn_status st = FATTN_OK;
    if (type < 0 || space < 0 || dcpl < 0 || H5Pset_obj_track_times(dcpl, 0) < 0)
        st = h5_fail(FATTN_E_IO, "%s: %s: dataset set-up", w->target, path);
    else if ((d = H5Dcreate2(parent, n->name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0)
        st = h5_fail(FATTN_E_IO, "%s: %s: create dataset", w->target, path);
    else if (n->nbytes && H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, n->data) < 0)
        st = h5_fail(FATTN_E_IO, "%s: %s: write dataset", w->target, path);
    if (st == FATTN_OK)
        st = write_attrs(w, d, path, n);
    if (d >= 0 && H5Dclose(d) < 0 && st == FATTN_OK)
        st = h5_fail(FATTN_E_IO, "%s: %s: close dataset", w->target, path);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
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

static fattn_status write_node(fattn_h5_writer *w, hid_t parent, const char *path,
                               const fattn_h5_node *n)
{
    fattn_status st = run_hook(w, path, NULL);
    if (st != FATTN_OK)
        return st;
    if (n->is_dataset)
        return write_dataset(w, parent, path, n);
    hid_t g = create_group(parent, n->name);
    if (g < 0)
        return h5_fail(FATTN_E_IO, "%s: %s: create group", w->target, path);
    st = write_attrs(w, g, path, n);
    if (st == FATTN_OK)
        st = write_children(w, g, path, n);
    if (H5Gclose(g) < 0 && st == FATTN_OK)
        st = h5_fail(FATTN_E_IO, "%s: %s: close group", w->target, path);
    return st;
}

static void writer_free(fattn_h5_writer *w)
{
    for (size_t i = 0; i < w->n_groups; i++) {
        free(w->groups[i].path);
        free(w->groups[i].last_child);
    }
    free(w->groups);
    free(w->target);
    free(w->tmp);
    free(w);
}

fattn_status fattn_h5_writer_open(const char *target, fattn_h5_writer **out)
{
    *out = NULL;
    hid_t fapl = H5I_INVALID_HID;
    fattn_status st = h5_enter(&fapl);
    if (st != FATTN_OK)
        return st;
    fattn_h5_writer *w = calloc(1, sizeof *w);
    if (!w)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", target);
    w->tmp_fd = -1;
    w->file = H5I_INVALID_HID;
    if (!(w->target = dup_str(target))) {
        writer_free(w);
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", target);
    }
    /* ".<base>.tmp-<pid>-<n>" beside the target. */
    const char *slash = strrchr(target, '/');
    size_t dirlen = slash ? (size_t)(slash - target) + 1 : 0;
    const char *base = target + dirlen;
    if (!*base) {
        writer_free(w);
        return fattn_error(FATTN_E_INVALID_ARG, "%s: not a file name", target);
    }
    size_t cap = strlen(target) + 64;
    if (!(w->tmp = malloc(cap))) {
        writer_free(w);
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", target);
    }
    for (int attempt = 0; attempt < 100 && w->tmp_fd < 0; attempt++) {
        unsigned k = atomic_fetch_add(&tmp_counter, 1u);
        snprintf(w->tmp, cap, "%.*s.%s.tmp-%ld-%u", (int)dirlen, target, base, (long)getpid(), k);
        w->tmp_fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (w->tmp_fd < 0 && errno != EEXIST) {
            st = fattn_error(FATTN_E_IO, "%s: cannot create temporary file %s: %s", target, w->tmp,
                             strerror(errno));
            writer_free(w);
            return st;
        }
    }
    if (w->tmp_fd < 0) {
        writer_free(w);
        return fattn_error(FATTN_E_IO, "%s: no free temporary name", target);
    }
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (fcpl < 0 || H5Pset_obj_track_times(fcpl, 0) < 0) {
        st = h5_fail(FATTN_E_IO, "%s: file creation properties", target);
    } else {
        w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, fcpl, fapl);
        if (w->file < 0)
            st = h5_fail(FATTN_E_IO, "%s: create %s", target, w->tmp);
    }
    if (fcpl >= 0)
        H5Pclose(fcpl);
    if (st == FATTN_OK)
        st = track_group(w, "/");
    if (st != FATTN_OK) {
        fattn_h5_writer_abort(w);
        return st;
    }
    *out = w;
    return FATTN_OK;
}

void fattn_h5_writer_set_hook(fattn_h5_writer *w, fattn_h5_write_hook hook, void *ctx)
{
    w->hook = hook;
    w->hook_ctx = ctx;
}

/* Make sure the group at absolute `path` exists and is open for writing;
 * create missing groups on the way (in order). */
static fattn_status ensure_group(fattn_h5_writer *w, const char *path, tracked_group **out)
{
    if (path[0] != '/')
        return fattn_error(FATTN_E_INVALID_ARG, "%s: path \"%s\" is not absolute", w->target, path);
    tracked_group *g = find_group(w, "/");
    const char *p = path;
    char *cur = dup_str("/");
    if (!cur)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
    fattn_status st = FATTN_OK;
    while (st == FATTN_OK) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char part[FATTN_H5_NAME_MAX + 1];
        if (len > FATTN_H5_NAME_MAX) {
            st = fattn_error(FATTN_E_INVALID_ARG, "%s: path component too long in %s", w->target,
                             path);
            break;
        }
        memcpy(part, p, len);
        part[len] = '\0';
        p += len;
        char *next = path_join(cur, part);
        if (!next) {
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
            break;
        }
        free(cur);
        cur = next;
        tracked_group *ng = find_group(w, cur);
        if (!ng) {
            st = check_name("group", part, false);
            if (st == FATTN_OK)
                st = claim_child(w, g, part);
            if (st == FATTN_OK)
                st = run_hook(w, cur, NULL);
            if (st == FATTN_OK) {
                hid_t gid = create_group(w->file, cur);
                if (gid < 0)
                    st = h5_fail(FATTN_E_IO, "%s: %s: create group", w->target, cur);
                else if (H5Gclose(gid) < 0)
                    st = h5_fail(FATTN_E_IO, "%s: %s: close group", w->target, cur);
            }
            if (st == FATTN_OK)
                st = track_group(w, cur);
            if (st == FATTN_OK)
                ng = find_group(w, cur);
        }
        g = ng;
    }
    free(cur);
    if (st == FATTN_OK && g->closed)
        st = fattn_error(FATTN_E_STATE,
                         "%s: group %s is closed: objects must be written in sorted order",
                         w->target, g->path);
    *out = st == FATTN_OK ? g : NULL;
    return st;
}

fattn_status fattn_h5_writer_put(fattn_h5_writer *w, const char *parent_path,
                                 const fattn_h5_node *node)
{
    if (w->failed)
        return fattn_error(FATTN_E_STATE, "%s: an earlier write failed", w->target);
    fattn_status st = h5_enter(NULL);
    if (st != FATTN_OK)
        return st;
    tracked_group *g;
    st = ensure_group(w, parent_path, &g);
    char *gpath = NULL;
    hid_t gid = H5I_INVALID_HID;
    if (st == FATTN_OK && !(gpath = dup_str(g->path)))
        st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
    if (st == FATTN_OK && (gid = H5Gopen2(w->file, gpath, H5P_DEFAULT)) < 0)
        st = h5_fail(FATTN_E_IO, "%s: %s: open group", w->target, gpath);
    if (st == FATTN_OK && node->name[0] == '\0') {
        /* Merge into the parent: attributes once, then children. */
        if (node->is_dataset) {
            st = fattn_error(FATTN_E_INVALID_ARG, "%s: a dataset needs a name", w->target);
        } else if (node->n_attrs) {
            if (g->attrs_done)
                st = fattn_error(FATTN_E_STATE, "%s: %s: attributes already written", w->target,
                                 gpath);
            else {
                g->attrs_done = true;
                st = write_attrs(w, gid, gpath, node);
            }
        }
        for (size_t i = 0; st == FATTN_OK && i < node->n_children; i++) {
            const fattn_h5_node *c = node->children[i];
            g = find_group(w, gpath);
            st = claim_child(w, g, c->name);
            char *cp = st == FATTN_OK ? path_join(gpath, c->name) : NULL;
            if (st == FATTN_OK && !cp)
                st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
            if (st == FATTN_OK)
                st = write_node(w, gid, cp, c);
            free(cp);
        }
    } else if (st == FATTN_OK) {
        st = check_name("link", node->name, false);
        if (st == FATTN_OK)
            st = claim_child(w, g, node->name);
        char *cp = st == FATTN_OK ? path_join(gpath, node->name) : NULL;
        if (st == FATTN_OK && !cp)
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", w->target);
        if (st == FATTN_OK)
            st = write_node(w, gid, cp, node);
        free(cp);
    }
    if (gid >= 0 && H5Gclose(gid) < 0 && st == FATTN_OK)
        st = h5_fail(FATTN_E_IO, "%s: %s: close group", w->target, gpath);
    free(gpath);
    if (st != FATTN_OK)
        w->failed = true;
    return st;
}

static fattn_status fsync_dir_of(const char *target)
{
    const char *slash = strrchr(target, '/');
    char *dir;
    if (!slash)
        dir = dup_str(".");
    else if (slash == target)
        dir = dup_str("/");
    else {
        dir = malloc((size_t)(slash - target) + 1);
        if (dir) {
            memcpy(dir, target, (size_t)(slash - target));
            dir[slash - target] = '\0';
        }
    }
    if (!dir)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", target);
    fattn_status st = FATTN_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0)
        st = fattn_error(FATTN_E_IO, "%s: fsync of directory %s: %s", target, dir, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(dir);
    return st;
}

fattn_status fattn_h5_writer_commit(fattn_h5_writer *w)
{
    fattn_status st = FATTN_OK;
    if (w->failed)
        st = fattn_error(FATTN_E_STATE, "%s: an earlier write failed; not committed", w->target);
    if (st == FATTN_OK)
        st = h5_enter(NULL);
    if (st == FATTN_OK)
        st = run_hook(w, ":commit", NULL);
    if (st == FATTN_OK) {
        herr_t rc = H5Fclose(w->file);
        w->file = H5I_INVALID_HID;
        if (rc < 0)
            st = h5_fail(FATTN_E_IO, "%s: close %s", w->target, w->tmp);
    }
    if (st == FATTN_OK && fsync(w->tmp_fd) != 0)
        st = fattn_error(FATTN_E_IO, "%s: fsync %s: %s", w->target, w->tmp, strerror(errno));
    if (st == FATTN_OK) {
        int rc = close(w->tmp_fd);
        w->tmp_fd = -1;
        if (rc != 0)
            st = fattn_error(FATTN_E_IO, "%s: close %s: %s", w->target, w->tmp, strerror(errno));
    }
    if (st == FATTN_OK && rename(w->tmp, w->target) != 0)
        st = fattn_error(FATTN_E_IO, "%s: rename from %s: %s", w->target, w->tmp, strerror(errno));
    if (st != FATTN_OK) {
        fattn_h5_writer_abort(w);
        return st;
    }
    st = fsync_dir_of(w->target);
    writer_free(w);
    return st;
}

void fattn_h5_writer_abort(fattn_h5_writer *w)
{
    if (!w)
        return;
    if (w->file >= 0) {
        H5E_BEGIN_TRY { H5Fclose(w->file); }
        H5E_END_TRY;
    }
    if (w->tmp_fd >= 0)
        close(w->tmp_fd);
    if (w->tmp)
        unlink(w->tmp);
    writer_free(w);
}

fattn_status fattn_h5_write_file(const char *target, const fattn_h5_node *root,
                                 fattn_h5_write_hook hook, void *hook_ctx)
{
    fattn_h5_writer *w;
    fattn_status st = fattn_h5_writer_open(target, &w);
    if (st != FATTN_OK)
        return st;
    fattn_h5_writer_set_hook(w, hook, hook_ctx);
    /* The root is merged into "/" whatever its name. */
    if (root->is_dataset) {
        fattn_h5_writer_abort(w);
        return fattn_error(FATTN_E_INVALID_ARG, "%s: the root must be a group", target);
    }
    fattn_h5_node view = *root;
    view.name = (char *)"";
    st = fattn_h5_writer_put(w, "/", &view);
    if (st != FATTN_OK) {
        fattn_h5_writer_abort(w);
        return st;
    }
    return fattn_h5_writer_commit(w);
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                  */
/* ------------------------------------------------------------------------ */

struct fattn_h5_reader {
    char *path;
    hid_t file;
};

fattn_status fattn_h5_reader_open(const char *path, fattn_h5_reader **out)
{
    *out = NULL;
    hid_t fapl = H5I_INVALID_HID;
    fattn_status st = h5_enter(&fapl);
    if (st != FATTN_OK)
        return st;
    if (access(path, R_OK) != 0)
        return fattn_error(FATTN_E_IO, "%s: cannot read: %s", path, strerror(errno));
    fattn_h5_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = dup_str(path))) {
        free(r);
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
    }
    r->file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (r->file < 0) {
        st = h5_fail(FATTN_E_INVALID_FILE, "%s: open", path);
        free(r->path);
        free(r);
        return st;
    }
    *out = r;
    return FATTN_OK;
}

void fattn_h5_reader_close(fattn_h5_reader *r)
{
    if (!r)
        return;
    H5E_BEGIN_TRY { H5Fclose(r->file); }
    H5E_END_TRY;
    free(r->path);
    free(r);
}

bool fattn_h5_reader_exists(fattn_h5_reader *r, const char *path)
{
    if (h5_enter(NULL) != FATTN_OK)
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
    char bad_name[FATTN_H5_NAME_MAX + 1];
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
    if (!(l->names[l->n] = dup_str(name)))
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
    fattn_h5_reader *r;
    bool allow_corrupt;
    bool metadata_only;
    haddr_t *seen;  /* addresses of groups visited */
    size_t n_seen, cap_seen;
} read_ctx;

/* Read one attribute into node n (validated kinds only). */
static fattn_status read_attr(read_ctx *c, hid_t obj, const char *objpath, const char *name,
                              fattn_h5_node *n, char *dtype_out, char *digest_out)
{
    const char *file = c->r->path;
    if (check_name("attribute", name, false) != FATTN_OK)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: attribute name not allowed", file,
                           objpath);
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return h5_fail(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": open", file, objpath, name);
    hid_t t = H5Aget_type(a), s = H5Aget_space(a);
    fattn_status st = FATTN_OK;
    if (t < 0 || s < 0) {
        st = h5_fail(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": type", file, objpath, name);
        goto done;
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
        hid_t mt = vlen_string_type(cset);
        char *p = NULL;
        if (mt < 0 || H5Aread(a, mt, &p) < 0) {
            st = h5_fail(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": read", file, objpath,
                         name);
        } else if (!p) {
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": null string", file,
                             objpath, name);
        } else if (!utf8_ok(p)) {
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": not UTF-8", file,
                             objpath, name);
        } else if (is_reserved) {
            char *dst = strcmp(name, "dtype") == 0 ? dtype_out : digest_out;
            snprintf(dst, 64, "%s", p);
            if (strlen(p) >= 64)
                dst[0] = '\0';
        } else {
            st = fattn_h5_node_set_string(n, name, p);
        }
        if (p)
            H5free_memory(p);
        if (mt >= 0)
            H5Tclose(mt);
        goto done;
    }
    if (is_reserved) {
        st = fattn_error(FATTN_E_INVALID_FILE,
                         "%s: %s: attribute \"%s\" is not a variable-length string", file, objpath,
                         name);
        goto done;
    }
    if (tclass == H5T_INTEGER && H5Tequal(t, H5T_STD_I64LE) > 0 && (scalar || pair)) {
        int64_t v[2] = {0, 0};
        if (H5Aread(a, H5T_STD_I64LE, v) < 0)
            st = h5_fail(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": read", file, objpath,
                         name);
        else
            st = scalar ? fattn_h5_node_set_int64(n, name, v[0])
                        : fattn_h5_node_set_int64_pair(n, name, v);
    } else if (tclass == H5T_INTEGER && H5Tequal(t, H5T_STD_U8LE) > 0 && scalar) {
        uint8_t v = 0;
        if (H5Aread(a, H5T_STD_U8LE, &v) < 0)
            st = h5_fail(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": read", file, objpath,
                         name);
        else
            st = fattn_h5_node_set_uint8(n, name, v);
    } else if (tclass == H5T_FLOAT && H5Tequal(t, H5T_IEEE_F32LE) > 0 && scalar) {
        float v = 0;
        if (H5Aread(a, H5T_IEEE_F32LE, &v) < 0)
            st = h5_fail(FATTN_E_INVALID_FILE, "%s: %s: attribute \"%s\": read", file, objpath,
                         name);
        else
            st = fattn_h5_node_set_float32(n, name, v);
    } else {
        st = fattn_error(FATTN_E_INVALID_FILE,
                         "%s: %s: attribute \"%s\": unsupported type or shape (want a "
                         "variable-length string, int64, int64[2], float32 or uint8 scalar)",
                         file, objpath, name);
    }
done:
    if (s >= 0)
        H5Sclose(s);
    if (t >= 0)
        H5Tclose(t);
    H5Aclose(a);
    return st;
}

static fattn_status read_attrs(read_ctx *c, hid_t obj, const char *objpath, fattn_h5_node *n,
                               char *dtype_out, char *digest_out)
{
    name_list l = {0};
    hsize_t idx = 0;
    fattn_status st = FATTN_OK;
    if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, attr_cb, &l) < 0)
        st = l.oom ? fattn_error(FATTN_E_NOMEM, "%s: out of memory", c->r->path)
                   : h5_fail(FATTN_E_INVALID_FILE, "%s: %s: list attributes", c->r->path,
                             objpath);
    for (size_t i = 0; st == FATTN_OK && i < l.n; i++)
        st = read_attr(c, obj, objpath, l.names[i], n, dtype_out, digest_out);
    name_list_free(&l);
    return st;
}

static fattn_status read_dataset(read_ctx *c, hid_t d, const char *path, fattn_h5_node *n)
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
    if (!fattn_digest_is_valid(digest_s))
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: missing or malformed digest attribute",
                           file, path);
    memcpy(n->stored_digest, digest_s, FATTN_DIGEST_LEN);

    hid_t t = H5Dget_type(d), want = (hid_t)fattn_h5_file_type(n->dtype);
    hid_t s = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
    if (t < 0 || want < 0 || s < 0 || dcpl < 0) {
        st = h5_fail(FATTN_E_INVALID_FILE, "%s: %s: dataset type, space or properties", file, path);
        goto done;
    }
    if (H5Tequal(t, want) <= 0) {
        st = fattn_error(FATTN_E_INVALID_FILE,
                         "%s: %s: storage type does not match dtype \"%s\" (class %d, %zu bytes)",
                         file, path, dtype_s, (int)H5Tget_class(t), H5Tget_size(t));
        goto done;
    }
    H5S_class_t sclass = H5Sget_simple_extent_type(s);
    int rank = H5Sget_simple_extent_ndims(s);
    if ((sclass != H5S_SIMPLE && sclass != H5S_SCALAR) || rank < 0 || rank > FATTN_MAX_DIMS) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: dataspace is not simple of rank <= %d",
                         file, path, FATTN_MAX_DIMS);
        goto done;
    }
    hsize_t dims[FATTN_MAX_DIMS];
    if (rank > 0 && H5Sget_simple_extent_dims(s, dims, NULL) < 0) {
        st = h5_fail(FATTN_E_INVALID_FILE, "%s: %s: dataspace dims", file, path);
        goto done;
    }
    n->ndim = rank;
    for (int i = 0; i < rank; i++) {
        if (dims[i] > (hsize_t)INT64_MAX) {
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: dimension %d too large", file, path, i);
            goto done;
        }
        n->shape[i] = (int64_t)dims[i];
    }
    if (!shape_bytes(n->dtype, n->ndim, n->shape, &n->nbytes)) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: size overflows", file, path);
        goto done;
    }
    H5D_layout_t layout = H5Pget_layout(dcpl);
    if ((layout != H5D_CONTIGUOUS && layout != H5D_COMPACT) || H5Pget_nfilters(dcpl) != 0 ||
        H5Pget_external_count(dcpl) != 0) {
        st = fattn_error(FATTN_E_INVALID_FILE,
                         "%s: %s: only contiguous or compact datasets without filters or "
                         "external storage are read",
                         file, path);
        goto done;
    }
    hsize_t stored = H5Dget_storage_size(d);
    if (stored != (hsize_t)n->nbytes) {
        st = fattn_error(FATTN_E_INVALID_FILE,
                         "%s: %s: %" PRIu64 " bytes of storage for %zu bytes of data", file, path,
                         (uint64_t)stored, n->nbytes);
        goto done;
    }
    if (c->metadata_only)
        goto done; /* no data, no digest: n->digest stays "" */
    if (n->nbytes) {
        if (!(n->data = malloc(n->nbytes))) {
            st = fattn_error(FATTN_E_NOMEM, "%s: %s: out of memory (%zu bytes)", file, path,
                             n->nbytes);
            goto done;
        }
        if (H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, n->data) < 0) {
            st = h5_fail(FATTN_E_INVALID_FILE, "%s: %s: read", file, path);
            goto done;
        }
    }
    fattn_digest_bytes(n->data, n->nbytes, n->digest);
    if (strcmp(n->digest, n->stored_digest) != 0) {
        if (c->allow_corrupt)
            n->corrupt = true;
        else
            st = fattn_error(FATTN_E_INVALID_FILE,
                             "%s: %s: corrupt: stored digest %s, data digest %s", file, path,
                             n->stored_digest, n->digest);
    }
done:
    close_id(dcpl);
    close_id(s);
    close_id(want);
    close_id(t);
    return st;
}

static fattn_status read_object(read_ctx *c, hid_t obj, const char *name, const char *path,
                                int depth, fattn_h5_node **out);

static fattn_status read_group(read_ctx *c, hid_t g, const char *path, int depth,
                               fattn_h5_node *n)
{
    const char *file = c->r->path;
    H5O_info_t info;
    if (H5Oget_info2(g, &info, H5O_INFO_BASIC) < 0)
        return h5_fail(FATTN_E_INVALID_FILE, "%s: %s: object info", file, path);
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
    if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, link_cb, &l) < 0)
        st = l.oom ? fattn_error(FATTN_E_NOMEM, "%s: out of memory", file)
                   : h5_fail(FATTN_E_INVALID_FILE, "%s: %s: list links", file, path);
    if (st == FATTN_OK && l.bad_link)
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: \"%s\" is a soft or external link", file,
                         path, l.bad_name);
    for (size_t i = 0; st == FATTN_OK && i < l.n; i++) {
        char *cp = path_join(path, l.names[i]);
        if (!cp) {
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", file);
            break;
        }
        hid_t o = H5Oopen(g, l.names[i], H5P_DEFAULT);
        if (o < 0) {
            st = h5_fail(FATTN_E_INVALID_FILE, "%s: %s: open", file, cp);
        } else {
            fattn_h5_node *child = NULL;
            st = read_object(c, o, l.names[i], cp, depth + 1, &child);
            H5Oclose(o);
            if (st == FATTN_OK) {
                st = insert_child(n, child);
                if (st != FATTN_OK) {
                    fattn_h5_node_free(child);
                    char why[512];
                    snprintf(why, sizeof why, "%s", fattn_last_error());
                    st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: %s", file, cp, why);
                }
            }
        }
        free(cp);
    }
    name_list_free(&l);
    return st;
}

static fattn_status read_object(read_ctx *c, hid_t obj, const char *name, const char *path,
                                int depth, fattn_h5_node **out)
{
    const char *file = c->r->path;
    *out = NULL;
    if (depth > FATTN_H5_MAX_DEPTH)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: nested deeper than %d", file, path,
                           FATTN_H5_MAX_DEPTH);
    if (name[0] && check_name("link", name, false) != FATTN_OK)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: link name not allowed", file, path);
    fattn_h5_node *n = calloc(1, sizeof *n);
    if (!n || !(n->name = dup_str(name))) {
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
        fattn_h5_node_free(n);
        return st;
    }
    *out = n;
    return FATTN_OK;
}

fattn_status fattn_h5_reader_read(fattn_h5_reader *r, const char *path,
                                  const fattn_h5_read_opts *opts, fattn_h5_node **out)
{
    *out = NULL;
    fattn_status st = h5_enter(NULL);
    if (st != FATTN_OK)
        return st;
    if (path[0] != '/')
        return fattn_error(FATTN_E_INVALID_ARG, "%s: path \"%s\" is not absolute", r->path, path);
    if (strcmp(path, "/") != 0 && !fattn_h5_reader_exists(r, path))
        return fattn_error(FATTN_E_INVALID_FILE, "%s: %s: no such object", r->path, path);
    hid_t o = H5Oopen(r->file, path, H5P_DEFAULT);
    if (o < 0)
        return h5_fail(FATTN_E_INVALID_FILE, "%s: %s: open", r->path, path);
    const char *slash = strrchr(path, '/');
    const char *name = strcmp(path, "/") == 0 ? "" : slash + 1;
    read_ctx c = {r, opts ? opts->allow_corrupt : false, opts ? opts->metadata_only : false,
                  NULL, 0, 0};
    st = read_object(&c, o, name, path, 0, out);
    free(c.seen);
    H5Oclose(o);
    return st;
}

/* ---- streaming one dataset ---------------------------------------------- */

struct fattn_h5_dstream {
    hid_t dset, ftype, fspace;
    int rank;
    hsize_t dims[FATTN_MAX_DIMS];
    hsize_t inner[FATTN_MAX_DIMS]; /* elements per step of dim k */
    uint64_t numel, pos;           /* elements */
    size_t esize;
    char *path;
    const char *file;
};

void fattn_h5_dstream_close(fattn_h5_dstream *s)
{
    if (!s)
        return;
    close_id(s->fspace);
    close_id(s->ftype);
    close_id(s->dset);
    free(s->path);
    free(s);
}

fattn_status fattn_h5_dstream_open(fattn_h5_reader *r, const char *path,
                                   const fattn_h5_node *meta, fattn_h5_dstream **out)
{
    *out = NULL;
    fattn_status st = h5_enter(NULL);
    if (st != FATTN_OK)
        return st;
    if (!meta->is_dataset)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: %s: not a dataset", r->path, path);
    fattn_h5_dstream *s = calloc(1, sizeof *s);
    if (!s || !(s->path = dup_str(path))) {
        free(s);
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", r->path);
    }
    s->dset = s->ftype = s->fspace = H5I_INVALID_HID;
    s->file = r->path;
    hid_t want = H5I_INVALID_HID;
    s->dset = H5Dopen2(r->file, path, H5P_DEFAULT);
    if (s->dset < 0) {
        st = h5_fail(FATTN_E_INVALID_FILE, "%s: %s: open", r->path, path);
        goto fail;
    }
    s->ftype = H5Dget_type(s->dset);
    s->fspace = H5Dget_space(s->dset);
    want = (hid_t)fattn_h5_file_type(meta->dtype);
    if (s->ftype < 0 || s->fspace < 0 || want < 0) {
        st = h5_fail(FATTN_E_INVALID_FILE, "%s: %s: dataset type or space", r->path, path);
        goto fail;
    }
    /* The file may not change between the metadata pass and this one. */
    s->rank = H5Sget_simple_extent_ndims(s->fspace);
    if (H5Tequal(s->ftype, want) <= 0 || s->rank != meta->ndim ||
        (s->rank > 0 && H5Sget_simple_extent_dims(s->fspace, s->dims, NULL) < 0)) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: dataset changed while reading", r->path,
                         path);
        goto fail;
    }
    s->numel = 1;
    for (int i = 0; i < s->rank; i++) {
        if ((int64_t)s->dims[i] != meta->shape[i]) {
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: %s: dataset changed while reading",
                             r->path, path);
            goto fail;
        }
        s->numel *= s->dims[i]; /* no overflow: the metadata pass checked the byte size */
    }
    for (int k = s->rank - 1; k >= 0; k--)
        s->inner[k] = k == s->rank - 1 ? 1 : s->inner[k + 1] * s->dims[k + 1];
    s->esize = fattn_dtype_size(meta->dtype);
    close_id(want);
    *out = s;
    return FATTN_OK;
fail:
    close_id(want);
    fattn_h5_dstream_close(s);
    return st;
}

fattn_status fattn_h5_dstream_read(fattn_h5_dstream *s, void *buf, size_t cap, size_t *got)
{
    *got = 0;
    if (s->pos >= s->numel)
        return FATTN_OK;
    fattn_status st = h5_enter(NULL);
    if (st != FATTN_OK)
        return st;
    uint64_t cap_el = cap / s->esize;
    if (cap_el == 0)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: %s: buffer smaller than one element",
                           s->file, s->path);
    if (s->rank == 0) {
        if (H5Dread(s->dset, s->ftype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
            return h5_fail(FATTN_E_INVALID_FILE, "%s: %s: read", s->file, s->path);
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
        st = h5_fail(FATTN_E_INVALID_FILE, "%s: %s: read elements %" PRIu64 "..%" PRIu64,
                     s->file, s->path, s->pos, s->pos + (uint64_t)n);
        close_id(ms);
        return st;
    }
    close_id(ms);
    s->pos += n;
    *got = (size_t)n * s->esize;
    return FATTN_OK;
}

fattn_status fattn_h5_read_file(const char *path, const fattn_h5_read_opts *opts,
                                fattn_h5_node **out)
{
    *out = NULL;
    fattn_h5_reader *r;
    fattn_status st = fattn_h5_reader_open(path, &r);
    if (st != FATTN_OK)
        return st;
    st = fattn_h5_reader_read(r, "/", opts, out);
    fattn_h5_reader_close(r);
    return st;
}

/* ------------------------------------------------------------------------ */
/* created_utc                                                              */
/* ------------------------------------------------------------------------ */

fattn_status fattn_h5_created_utc(char out[32])
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
