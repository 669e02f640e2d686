/* The in-memory tree of a run file: building, copying, lookups. See
 * runtree.h. Nothing here touches HDF5. */
#include "runtree.h"

#include "core/checked.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

char *fh_runtree_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* Link and attribute names: printable ASCII without '/', not "." or "..". */
fattn_status fh_runtree_check_name(const char *what, const char *name, bool allow_empty)
{
    size_t n = strlen(name);
    if (n == 0 && allow_empty)
        return FATTN_OK;
    if (n == 0 || n > FH_H5_NAME_MAX)
        return fattn_error(FATTN_E_INVALID_ARG, "%s name \"%s\": length must be 1..%d", what,
                           name, FH_H5_NAME_MAX);
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

bool fh_runtree_utf8_ok(const char *s)
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

fattn_status fh_h5_node_new_group(const char *name, fh_h5_node **out)
{
    *out = NULL;
    fattn_status st = fh_runtree_check_name("group", name, true);
    if (st != FATTN_OK)
        return st;
    fh_h5_node *n = calloc(1, sizeof *n);
    if (!n || !(n->name = fh_runtree_strdup(name))) {
        free(n);
        return fattn_error(FATTN_E_NOMEM, "out of memory for group \"%s\"", name);
    }
    *out = n;
    return FATTN_OK;
}

static void attr_clear(fh_h5_attr *a)
{
    free(a->name);
    free(a->s);
    memset(a, 0, sizeof *a);
}

void fh_h5_node_free(fh_h5_node *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n_attrs; i++)
        attr_clear(&n->attrs[i]);
    free(n->attrs);
    for (size_t i = 0; i < n->n_children; i++)
        fh_h5_node_free(n->children[i]);
    free(n->children);
    free(n->data);
    free(n->name);
    free(n);
}

/* Index of `name` among children, or the insertion point with *found false. */
static size_t child_index(const fh_h5_node *p, const char *name, bool *found)
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
    assert(lo == p->n_children || strcmp(p->children[lo]->name, name) > 0);
    return lo;
}

fattn_status fh_runtree_insert_child(fh_h5_node *p, fh_h5_node *c)
{
    assert(p && c && c->name);
    assert(p->n_children <= p->cap_children);
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
        fh_h5_node **nc = realloc(p->children, cap * sizeof *nc);
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

fattn_status fh_h5_node_adopt(fh_h5_node *parent, fh_h5_node *child)
{
    fattn_status st = fh_runtree_check_name("link", child->name, false);
    if (st != FATTN_OK)
        return st;
    return fh_runtree_insert_child(parent, child);
}

fattn_status fh_h5_node_copy_attrs(const fh_h5_node *src, fh_h5_node *dst)
{
    fattn_status st = FATTN_OK;
    for (size_t i = 0; i < src->n_attrs; i++) {
        const fh_h5_attr *a = &src->attrs[i];
        if (src->is_dataset && (!strcmp(a->name, "dtype") || !strcmp(a->name, "digest")))
            continue;
        switch (a->kind) {
        case FH_H5_ATTR_STRING: st = fh_h5_node_set_string(dst, a->name, a->s); break;
        case FH_H5_ATTR_INT64: st = fh_h5_node_set_int64(dst, a->name, a->i64[0]); break;
        case FH_H5_ATTR_FLOAT32: st = fh_h5_node_set_float32(dst, a->name, a->f32); break;
        case FH_H5_ATTR_UINT8: st = fh_h5_node_set_uint8(dst, a->name, a->u8); break;
        case FH_H5_ATTR_INT64_PAIR:
            st = fh_h5_node_set_int64_pair(dst, a->name, a->i64);
            break;
        }
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

fattn_status fh_h5_node_copy(const fh_h5_node *src, fh_h5_node *dst_parent,
                                const char *skip)
{
    fattn_status st;
    fh_h5_node *d;
    if (src->is_dataset) {
        st = fh_h5_node_add_bytes(dst_parent, src->name, src->dtype, src->ndim, src->shape,
                                     src->data, src->nbytes, &d);
        if (st != FATTN_OK)
            return st;
        return fh_h5_node_copy_attrs(src, d);
    }
    if ((st = fh_h5_node_group(dst_parent, src->name, &d)) != FATTN_OK ||
        (st = fh_h5_node_copy_attrs(src, d)) != FATTN_OK)
        return st;
    for (size_t i = 0; i < src->n_children; i++) {
        if (skip && !strcmp(src->children[i]->name, skip))
            continue;
        if ((st = fh_h5_node_copy(src->children[i], d, skip)) != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

fattn_status fh_h5_node_group(fh_h5_node *parent, const char *name, fh_h5_node **out)
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
    fh_h5_node *g;
    fattn_status st;
    if ((st = fh_runtree_check_name("group", name, false)) != FATTN_OK ||
        (st = fh_h5_node_new_group(name, &g)) != FATTN_OK)
        return st;
    st = fh_runtree_insert_child(parent, g);
    if (st != FATTN_OK) {
        fh_h5_node_free(g);
        return st;
    }
    *out = g;
    return FATTN_OK;
}

/* numel * size without overflow; false if it does not fit. */
bool fh_runtree_shape_bytes(fattn_dtype dtype, int ndim, const int64_t *shape, size_t *bytes)
{
    int64_t n = (int64_t)fattn_dtype_size(dtype);
    if (n == 0 || ndim < 0 || ndim > FATTN_MAX_DIMS)
        return false;
    for (int i = 0; i < ndim; i++)
        if (!fattn_mul_i64(n, shape[i], &n)) /* also refuses a negative extent */
            return false;
    return fattn_bytes_of(n, 1, bytes);
}

static fattn_status new_dataset(fh_h5_node *parent, const char *name, fattn_dtype dtype,
                                int ndim, const int64_t *shape, size_t nbytes,
                                fh_h5_node **out)
{
    fattn_status st = fh_runtree_check_name("dataset", name, false);
    if (st != FATTN_OK)
        return st;
    bool found;
    child_index(parent, name, &found);
    if (found)
        return fattn_error(FATTN_E_STATE, "group \"%s\" already has a child \"%s\"",
                           parent->name, name);
    fh_h5_node *n = calloc(1, sizeof *n);
    if (!n || !(n->name = fh_runtree_strdup(name)) || (nbytes && !(n->data = malloc(nbytes)))) {
        fh_h5_node_free(n);
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

static fattn_status finish_dataset(fh_h5_node *parent, fh_h5_node *n, fh_h5_node **out)
{
    fh_digest_bytes(n->data, n->nbytes, n->digest);
    memcpy(n->stored_digest, n->digest, sizeof n->digest);
    fattn_status st = fh_runtree_insert_child(parent, n);
    if (st != FATTN_OK) {
        fh_h5_node_free(n);
        return st;
    }
    if (out)
        *out = n;
    return FATTN_OK;
}

fattn_status fh_h5_node_add_tensor(fh_h5_node *parent, const char *name,
                                      const fattn_tensor *t, fh_h5_node **out)
{
    if (fattn_tensor_is_empty(t))
        return fattn_error(FATTN_E_INVALID_ARG,
                           "dataset \"%s\": the empty slot has no dataset (its absence is data)",
                           name);
    if (t->device != FATTN_DEVICE_HOST)
        return fattn_error(FATTN_E_INVALID_ARG, "dataset \"%s\": tensor is not on the host", name);
    size_t nbytes;
    if (!fh_runtree_shape_bytes(t->dtype, t->ndim, t->shape, &nbytes))
        return fattn_error(FATTN_E_OVERFLOW, "dataset \"%s\": size does not fit", name);
    fh_h5_node *n;
    fattn_status st = new_dataset(parent, name, t->dtype, t->ndim, t->shape, nbytes, &n);
    if (st != FATTN_OK)
        return st;
    if (nbytes)
        fattn_tensor_gather(t, n->data);
    return finish_dataset(parent, n, out);
}

fattn_status fh_h5_node_add_bytes(fh_h5_node *parent, const char *name, fattn_dtype dtype,
                                     int ndim, const int64_t *shape, const void *data,
                                     size_t nbytes, fh_h5_node **out)
{
    size_t want;
    if (!fh_runtree_shape_bytes(dtype, ndim, shape, &want))
        return fattn_error(FATTN_E_INVALID_ARG, "dataset \"%s\": bad dtype, rank or shape", name);
    if (want != nbytes)
        return fattn_error(FATTN_E_SHAPE, "dataset \"%s\": %zu bytes given, shape needs %zu", name,
                           nbytes, want);
    fh_h5_node *n;
    fattn_status st = new_dataset(parent, name, dtype, ndim, shape, nbytes, &n);
    if (st != FATTN_OK)
        return st;
    if (nbytes)
        memcpy(n->data, data, nbytes);
    return finish_dataset(parent, n, out);
}

/* The slot for attribute `name` (created, sorted), cleared. */
static fattn_status attr_slot(fh_h5_node *n, const char *name, fh_h5_attr **out)
{
    fattn_status st = fh_runtree_check_name("attribute", name, false);
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
        fh_h5_attr *na = realloc(n->attrs, cap * sizeof *na);
        if (!na)
            return fattn_error(FATTN_E_NOMEM, "out of memory for attribute \"%s\"", name);
        n->attrs = na;
        n->cap_attrs = cap;
    }
    char *nm = fh_runtree_strdup(name);
    if (!nm)
        return fattn_error(FATTN_E_NOMEM, "out of memory for attribute \"%s\"", name);
    assert(lo <= n->n_attrs && n->n_attrs < n->cap_attrs);
    memmove(n->attrs + lo + 1, n->attrs + lo, (n->n_attrs - lo) * sizeof *n->attrs);
    memset(&n->attrs[lo], 0, sizeof n->attrs[lo]);
    n->attrs[lo].name = nm;
    n->n_attrs++;
    *out = &n->attrs[lo];
    return FATTN_OK;
}

fattn_status fh_h5_node_set_string(fh_h5_node *n, const char *name, const char *v)
{
    if (!fh_runtree_utf8_ok(v))
        return fattn_error(FATTN_E_INVALID_ARG, "attribute \"%s\": value is not UTF-8", name);
    char *copy = fh_runtree_strdup(v);
    if (!copy)
        return fattn_error(FATTN_E_NOMEM, "out of memory for attribute \"%s\"", name);
    fh_h5_attr *a;
    fattn_status st = attr_slot(n, name, &a);
    if (st != FATTN_OK) {
        free(copy);
        return st;
    }
    a->kind = FH_H5_ATTR_STRING;
    a->s = copy;
    return FATTN_OK;
}

fattn_status fh_h5_node_set_int64(fh_h5_node *n, const char *name, int64_t v)
{
    fh_h5_attr *a;
    fattn_status st = attr_slot(n, name, &a);
    if (st != FATTN_OK)
        return st;
    a->kind = FH_H5_ATTR_INT64;
    a->i64[0] = v;
    a->i64[1] = 0;
    return FATTN_OK;
}

fattn_status fh_h5_node_set_float32(fh_h5_node *n, const char *name, float v)
{
    fh_h5_attr *a;
    fattn_status st = attr_slot(n, name, &a);
    if (st != FATTN_OK)
        return st;
    a->kind = FH_H5_ATTR_FLOAT32;
    a->f32 = v;
    return FATTN_OK;
}

fattn_status fh_h5_node_set_uint8(fh_h5_node *n, const char *name, uint8_t v)
{
    fh_h5_attr *a;
    fattn_status st = attr_slot(n, name, &a);
    if (st != FATTN_OK)
        return st;
    a->kind = FH_H5_ATTR_UINT8;
    a->u8 = v;
    return FATTN_OK;
}

fattn_status fh_h5_node_set_int64_pair(fh_h5_node *n, const char *name, const int64_t v[2])
{
    fh_h5_attr *a;
    fattn_status st = attr_slot(n, name, &a);
    if (st != FATTN_OK)
        return st;
    a->kind = FH_H5_ATTR_INT64_PAIR;
    a->i64[0] = v[0];
    a->i64[1] = v[1];
    return FATTN_OK;
}

fh_h5_node *fh_h5_node_find(const fh_h5_node *n, const char *path)
{
    const fh_h5_node *cur = n;
    while (cur && *path) {
        while (*path == '/')
            path++;
        if (!*path)
            break;
        const char *end = strchr(path, '/');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        char part[FH_H5_NAME_MAX + 1];
        if (len > FH_H5_NAME_MAX)
            return NULL;
        memcpy(part, path, len);
        part[len] = '\0';
        bool found;
        size_t at = child_index(cur, part, &found);
        cur = found ? cur->children[at] : NULL;
        path += len;
    }
    return (fh_h5_node *)cur;
}

const fh_h5_attr *fh_h5_node_attr(const fh_h5_node *n, const char *name)
{
    assert(n && name);
    for (size_t i = 0; i < n->n_attrs; i++) {
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    }
    return NULL;
}

fattn_tensor fh_h5_node_tensor(const fh_h5_node *n)
{
    if (!n || !n->is_dataset)
        return fattn_tensor_empty();
    static char zero_size_anchor;
    return fattn_tensor_view(n->data ? n->data : &zero_size_anchor, n->dtype, n->ndim, n->shape);
}

char *fh_runtree_path_join(const char *parent, const char *name)
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

/* ---- the attribute digest of a case (runtree.h) ---------------------------- */

static fattn_status put_le(fh_digest_state *d, uint64_t v, int nbytes)
{
    unsigned char b[8];
    assert(nbytes >= 1 && nbytes <= 8);
    for (int i = 0; i < nbytes; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return fh_digest_update(d, b, (size_t)nbytes);
}

static fattn_status digest_attr(fh_digest_state *d, const fh_h5_attr *a)
{
    fattn_status st;
    uint32_t bits;
    if ((st = fh_digest_update(d, a->name, strlen(a->name) + 1)) != FATTN_OK ||
        (st = put_le(d, (uint64_t)a->kind, 1)) != FATTN_OK)
        return st;
    switch (a->kind) {
    case FH_H5_ATTR_STRING:
        if ((st = put_le(d, (uint64_t)strlen(a->s), 8)) != FATTN_OK)
            return st;
        return fh_digest_update(d, a->s, strlen(a->s));
    case FH_H5_ATTR_INT64: return put_le(d, (uint64_t)a->i64[0], 8);
    case FH_H5_ATTR_FLOAT32:
        memcpy(&bits, &a->f32, sizeof bits);
        return put_le(d, bits, 4);
    case FH_H5_ATTR_UINT8: return put_le(d, a->u8, 1);
    case FH_H5_ATTR_INT64_PAIR:
        if ((st = put_le(d, (uint64_t)a->i64[0], 8)) != FATTN_OK)
            return st;
        return put_le(d, (uint64_t)a->i64[1], 8);
    }
    return fattn_error(FATTN_E_INTERNAL, "attribute %s: unknown kind %d", a->name, (int)a->kind);
}

/* n at `path` below the sealed group (top: whether n is that group). */
static fattn_status digest_subtree(fh_digest_state *d, const fh_h5_node *n,
                                   const char *path, bool top, int depth)
{
    assert(depth <= FH_H5_MAX_DEPTH + 1);
    fattn_status st = fh_digest_update(d, path, strlen(path) + 1);
    if (st != FATTN_OK)
        return st;
    for (size_t i = 0; i < n->n_attrs; i++) {
        if (top && strcmp(n->attrs[i].name, FH_H5_ATTRS_DIGEST) == 0)
            continue;
        if ((st = digest_attr(d, &n->attrs[i])) != FATTN_OK)
            return st;
    }
    for (size_t i = 0; i < n->n_children; i++) {
        char *p = fh_runtree_path_join(path, n->children[i]->name);
        if (!p)
            return fattn_error(FATTN_E_NOMEM, "attribute digest: out of memory");
        st = digest_subtree(d, n->children[i], p, false, depth + 1);
        free(p);
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

fattn_status fh_h5_node_attrs_digest(const fh_h5_node *n, char out[FH_DIGEST_LEN])
{
    fh_digest_state d;
    fattn_status st = fh_digest_init(&d);
    if (st != FATTN_OK)
        return st;
    if ((st = digest_subtree(&d, n, "", true, 0)) != FATTN_OK) {
        fh_digest_free(&d);
        return st;
    }
    return fh_digest_final(&d, out);
}

fattn_status fh_h5_node_seal_attrs(fh_h5_node *n)
{
    char dg[FH_DIGEST_LEN];
    fattn_status st = fh_h5_node_attrs_digest(n, dg);
    if (st != FATTN_OK)
        return st;
    return fh_h5_node_set_string(n, FH_H5_ATTRS_DIGEST, dg);
}

fattn_status fh_h5_node_attrs_intact(const fh_h5_node *n, bool *intact)
{
    const fh_h5_attr *a = fh_h5_node_attr(n, FH_H5_ATTRS_DIGEST);
    *intact = true;
    if (!a)
        return FATTN_OK;
    if (a->kind != FH_H5_ATTR_STRING || !fh_digest_is_valid(a->s)) {
        *intact = false;
        return FATTN_OK;
    }
    char dg[FH_DIGEST_LEN];
    fattn_status st = fh_h5_node_attrs_digest(n, dg);
    if (st != FATTN_OK)
        return st;
    *intact = strcmp(dg, a->s) == 0;
    return FATTN_OK;
}
