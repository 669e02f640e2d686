/* fattn diff: compare two run files into a report. See diff.h and
 * docs/diff.md. */
#include "diff.h"

#include <assert.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileguard.h"
#include "h5io.h"
#include "isolate.h"
#include "runfile.h"
#include "treewalk.h"

#define DIFF_CHUNK_DEFAULT ((size_t)4 << 20)
#define RUN_SCHEMA "fattn-run/1"

static const char *status_names[FH_DIFF_N_STATUS] = {
    "equal", "different", "missing_in_a", "missing_in_b", "corrupt", "structure", "value",
    "private"};

const char *fh_diff_status_name(fh_diff_status s)
{
    assert(s >= 0 && s < FH_DIFF_N_STATUS);
    return status_names[s];
}

bool fh_diff_entry_counted(const fh_diff_entry *e)
{
    return !e->is_private && e->status != FH_DIFF_EQUAL;
}

/* A pending dataset comparison: the nodes on each side (NULL digest-only). */
typedef struct job {
    size_t entry;
    const fh_h5_node *na, *nb;
    const char *dig_a, *dig_b; /* digest-only attribute values */
} job;

typedef struct diff_ctx {
    const fh_diff_opts *o;
    fh_diff_report *r;
    fh_h5_reader *ra, *rb;
    job *jobs;
    size_t n_jobs, cap_jobs;
    unsigned char *buf_a, *buf_b;
    size_t chunk;
    fh_elem_sq_cache sq;      /* energy tables for this comparison */
    const struct fh_walk *walk;
    bool oom;
    /* the walk of a subtree present on one side only (list_missing) */
    fh_diff_status missing_status;
    size_t missing_count[FH_H5_MAX_DEPTH + 2];
} diff_ctx;

static char *xstrdup(diff_ctx *c, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (!d) {
        c->oom = true;
        return NULL;
    }
    memcpy(d, s, n);
    return d;
}

static char *xprintf(diff_ctx *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static char *xprintf(diff_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        c->oom = true;
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (!s) {
        c->oom = true;
        return NULL;
    }
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static bool in_only(diff_ctx *c, const char *path)
{
    return !c->o->only || fnmatch(c->o->only, path, 0) == 0;
}

/* Add an entry (NULL when --only excludes it or on OOM). The path and msg
 * are taken over (freed on exclusion). */
static fh_diff_entry *add_entry(diff_ctx *c, char *path, const char *kind,
                                   fh_diff_status status, bool is_private, char *msg)
{
    fh_diff_report *r = c->r;
    if (!path || !in_only(c, path)) {
        free(path);
        free(msg);
        return NULL;
    }
    if (r->n_e == r->cap_e) {
        size_t cap = r->cap_e ? 2 * r->cap_e : 64;
        fh_diff_entry *ne = realloc(r->e, cap * sizeof *ne);
        if (!ne) {
            c->oom = true;
            free(path);
            free(msg);
            return NULL;
        }
        r->e = ne;
        r->cap_e = cap;
    }
    assert(r->n_e < r->cap_e && kind);
    fh_diff_entry *e = &r->e[r->n_e++];
    memset(e, 0, sizeof *e);
    e->path = path;
    e->kind = kind;
    e->status = status;
    e->is_private = is_private;
    e->msg = msg;
    return e;
}

static void add_job(diff_ctx *c, const fh_diff_entry *e, const fh_h5_node *na,
                    const fh_h5_node *nb, const char *dig_a, const char *dig_b)
{
    if (c->n_jobs == c->cap_jobs) {
        size_t cap = c->cap_jobs ? 2 * c->cap_jobs : 64;
        job *nj = realloc(c->jobs, cap * sizeof *nj);
        if (!nj) {
            c->oom = true;
            return;
        }
        c->jobs = nj;
        c->cap_jobs = cap;
    }
    c->jobs[c->n_jobs++] = (job){(size_t)(e - c->r->e), na, nb, dig_a, dig_b};
}

static char *fmt_attr(diff_ctx *c, const fh_h5_attr *a)
{
    if (!a)
        return NULL;
    switch (a->kind) {
    case FH_H5_ATTR_STRING: return xprintf(c, "\"%s\"", a->s);
    case FH_H5_ATTR_INT64: return xprintf(c, "%lld", (long long)a->i64[0]);
    case FH_H5_ATTR_FLOAT32: return xprintf(c, "%.9g (float32)", (double)a->f32);
    case FH_H5_ATTR_UINT8: return xprintf(c, "%u (uint8)", a->u8);
    default:
        return xprintf(c, "[%lld, %lld]", (long long)a->i64[0], (long long)a->i64[1]);
    }
}

static bool attr_equal(const fh_h5_attr *a, const fh_h5_attr *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case FH_H5_ATTR_STRING: return strcmp(a->s, b->s) == 0;
    case FH_H5_ATTR_INT64: return a->i64[0] == b->i64[0];
    case FH_H5_ATTR_FLOAT32: return memcmp(&a->f32, &b->f32, sizeof a->f32) == 0;
    case FH_H5_ATTR_UINT8: return a->u8 == b->u8;
    default: return a->i64[0] == b->i64[0] && a->i64[1] == b->i64[1];
    }
}

static char *join(diff_ctx *c, const char *parent, const char *name)
{
    return xprintf(c, "%s%s%s", parent, strcmp(parent, "/") ? "/" : "", name);
}

/* ------------------------------------------------------------------------ */
/* Structure: the walk's visitor                                            */
/* ------------------------------------------------------------------------ */

static const char *platform_keys[] = {"backend",       "device",           "sm", "sm_count",
                                      "cuda_version",  "cudnn_version",   NULL};

static bool is_platform_key(const char *name)
{
    if (strncmp(name, "prov_", 5) == 0)
        return true;
    for (int i = 0; platform_keys[i]; i++)
        if (!strcmp(name, platform_keys[i]))
            return true;
    return false;
}

static void add_prov(diff_ctx *c, const char *objpath, const fh_h5_attr *a,
                     const fh_h5_attr *b)
{
    fh_diff_report *r = c->r;
    const char *name = a ? a->name : b->name;
    if (a && b && attr_equal(a, b))
        return;
    if (r->n_prov == r->cap_prov) {
        size_t cap = r->cap_prov ? 2 * r->cap_prov : 16;
        fh_diff_prov *np = realloc(r->prov, cap * sizeof *np);
        if (!np) {
            c->oom = true;
            return;
        }
        r->prov = np;
        r->cap_prov = cap;
    }
    fh_diff_prov *p = &r->prov[r->n_prov++];
    p->path = xprintf(c, "%s@%s", objpath, name);
    p->a = fmt_attr(c, a);
    p->b = fmt_attr(c, b);
    p->platform = is_platform_key(name);
}

static bool digest_attr(const fh_h5_attr *a)
{
    return a && strncmp(a->name, "digest:", 7) == 0 && a->name[7];
}

/* A digest:<name> attribute pair of two groups: a digest-only tensor when
 * the dataset is absent on its side (with the dataset it is an ordinary
 * attribute, and false is returned). */
static bool digest_only_attr(diff_ctx *c, const fh_walk_at *at, const fh_h5_attr *a,
                             const fh_h5_attr *b)
{
    const char *tname = (a ? a->name : b->name) + 7;
    const fh_h5_node *sa = fh_h5_node_find(at->a, tname);
    const fh_h5_node *sb = fh_h5_node_find(at->b, tname);
    bool ad = digest_attr(a) && !sa, bd = digest_attr(b) && !sb;
    if (!ad && !bd)
        return false;
    if ((ad && sb) || (bd && sa))
        return true; /* digest facing a dataset: the children pass */
    char *p = join(c, at->path, tname);
    if (ad && bd) {
        fh_diff_entry *e = add_entry(c, p, "digest", FH_DIFF_EQUAL, at->priv, NULL);
        if (e)
            add_job(c, e, NULL, NULL, a->s, b->s);
    } else {
        add_entry(c, p, "digest", ad ? FH_DIFF_MISSING_IN_B : FH_DIFF_MISSING_IN_A,
                  at->priv, NULL);
    }
    return true;
}

/* The attribute digest (runtree.h) is derived data, never an attribute:
 * each side that has one must match its own attributes, else that side's
 * attributes are corrupt. */
static void attrs_digest_check(diff_ctx *c, const fh_walk_at *at, const fh_h5_attr *a,
                               const fh_h5_attr *b)
{
    const fh_h5_node *side[2] = {a ? at->a : NULL, b ? at->b : NULL};
    for (int i = 0; i < 2; i++) {
        bool intact = true;
        if (!side[i])
            continue;
        if (fh_h5_node_attrs_intact(side[i], &intact) != FATTN_OK) {
            c->oom = true;
            return;
        }
        if (!intact)
            add_entry(c, xprintf(c, "%s@%s", at->path, FH_H5_ATTRS_DIGEST), "attribute",
                      FH_DIFF_CORRUPT, at->priv,
                      xprintf(c, "the attributes of %s in %s do not match their digest",
                              at->path, i ? "B" : "A"));
    }
}

/* One attribute name of two objects present on both sides: provenance at
 * the root and prov_*, digest-only tensors, else compared. */
static void visit_attr(void *ctx, const fh_walk_at *at, const fh_h5_attr *a,
                       const fh_h5_attr *b)
{
    diff_ctx *c = ctx;
    const char *name = a ? a->name : b->name;
    bool is_root = at->depth == 0;
    assert(at->a && at->b);
    if (is_root && !strcmp(name, "schema"))
        return;
    if (is_root || !strncmp(name, "prov_", 5)) {
        add_prov(c, at->path, a, b);
        return;
    }
    if (!strcmp(name, FH_H5_ATTRS_DIGEST)) {
        attrs_digest_check(c, at, a, b);
        return;
    }
    if (!at->a->is_dataset && (digest_attr(a) || digest_attr(b)) &&
        digest_only_attr(c, at, a, b))
        return;
    char *p = xprintf(c, "%s@%s", at->path, name);
    if (!a || !b) {
        add_entry(c, p, "attribute", a ? FH_DIFF_MISSING_IN_B : FH_DIFF_MISSING_IN_A,
                  at->priv, NULL);
    } else if (!attr_equal(a, b)) {
        char *va = fmt_attr(c, a), *vb = fmt_attr(c, b);
        fh_diff_entry *e = add_entry(c, p, "attribute", FH_DIFF_VALUE, at->priv,
                                        xprintf(c, "A=%s B=%s", va ? va : "?", vb ? vb : "?"));
        if (e) { /* the entry keeps the values */
            e->a = va;
            e->b = vb;
        } else {
            free(va);
            free(vb);
        }
    } else {
        free(p);
    }
}

static bool visit_stop(void *ctx) { return ((diff_ctx *)ctx)->oom; }

/* ---- a subtree on one side only: one entry per dataset or digest-only
 * tensor, or the group itself when it holds none ---- */

static const fh_h5_node *one_side(const fh_walk_at *at) { return at->a ? at->a : at->b; }

static void missing_attr(void *ctx, const fh_walk_at *at, const fh_h5_attr *a,
                         const fh_h5_attr *b)
{
    diff_ctx *c = ctx;
    const fh_h5_attr *x = a ? a : b;
    const fh_h5_node *n = one_side(at);
    if (n->is_dataset || !digest_attr(x) || fh_h5_node_find(n, x->name + 7))
        return;
    add_entry(c, join(c, at->path, x->name + 7), "digest", c->missing_status, at->priv, NULL);
    c->missing_count[at->depth]++;
}

static fh_walk_next missing_child(void *ctx, const fh_walk_at *at)
{
    diff_ctx *c = ctx;
    assert(at->depth < FH_H5_MAX_DEPTH + 2);
    c->missing_count[at->depth] = 0;
    if (!one_side(at)->is_dataset)
        return FH_WALK_DESCEND;
    add_entry(c, xstrdup(c, at->path), "dataset", c->missing_status, at->priv, NULL);
    c->missing_count[at->depth - 1]++;
    return FH_WALK_SKIP;
}

static void missing_group_done(void *ctx, const fh_walk_at *at)
{
    diff_ctx *c = ctx;
    size_t k = c->missing_count[at->depth];
    if (k == 0) {
        add_entry(c, xstrdup(c, at->path), "group", c->missing_status, at->priv, NULL);
        k = 1;
    }
    if (at->depth > 0)
        c->missing_count[at->depth - 1] += k;
}

static const fh_walk_visitor missing_visitor = {
    .attr = missing_attr,
    .child = missing_child,
    .group_done = missing_group_done,
    .stop = visit_stop,
};

static void list_missing(diff_ctx *c, const fh_walk_at *at, fh_diff_status st)
{
    const fh_h5_node *n = one_side(at);
    if (n->is_dataset) {
        add_entry(c, xstrdup(c, at->path), "dataset", st, at->priv, NULL);
        return;
    }
    c->missing_status = st;
    fh_walk w = {&missing_visitor, c, '/'};
    /* the subtree's own walk, rooted at its path, depth 0 */
    fh_walk_at root = *at;
    root.depth = 0;
    c->missing_count[0] = 0;
    fh_walk_group(&w, &root);
}

/* ---- datasets and groups present on both sides, or on one ---- */

static bool same_shape(const fh_h5_node *a, const fh_h5_node *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

void fh_diff_fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

static void set_geometry(fh_diff_entry *e, const fh_h5_node *ds)
{
    e->dtype = ds->dtype;
    e->ndim = ds->ndim;
    memcpy(e->shape, ds->shape, sizeof e->shape);
}

/* A name on one side only: a dataset facing a digest-only tensor, or a
 * missing subtree. */
static void visit_one_sided(diff_ctx *c, const fh_walk_at *at)
{
    const fh_h5_node *ds = one_side(at);
    assert(at->up);
    const fh_h5_node *other_parent = at->a ? at->up->b : at->up->a;
    char an[FH_H5_NAME_MAX + 16];
    snprintf(an, sizeof an, "digest:%s", at->name);
    const fh_h5_attr *dg = fh_h5_node_attr(other_parent, an);
    if (ds->is_dataset && dg && dg->kind == FH_H5_ATTR_STRING) {
        fh_diff_entry *e = add_entry(c, xstrdup(c, at->path), "digest", FH_DIFF_EQUAL,
                                        at->priv, NULL);
        if (e) {
            set_geometry(e, ds);
            if (at->a)
                add_job(c, e, at->a, NULL, NULL, dg->s);
            else
                add_job(c, e, NULL, at->b, dg->s, NULL);
        }
    } else {
        list_missing(c, at, at->a ? FH_DIFF_MISSING_IN_B : FH_DIFF_MISSING_IN_A);
    }
}

/* A dataset pair: its attributes, then dtype and shape, then a job for
 * the data. */
static void visit_datasets(diff_ctx *c, const fh_walk_at *at)
{
    const fh_h5_node *a = at->a, *b = at->b;
    fh_walk_attrs(c->walk, at);
    if (a->dtype != b->dtype || !same_shape(a, b)) {
        char sa[128], sb[128];
        fh_diff_fmt_shape(sa, sizeof sa, a->ndim, a->shape);
        fh_diff_fmt_shape(sb, sizeof sb, b->ndim, b->shape);
        add_entry(c, xstrdup(c, at->path), "dataset", FH_DIFF_STRUCTURE, at->priv,
                  xprintf(c, "%s %s in A, %s %s in B%s", fattn_dtype_name(a->dtype), sa,
                          fattn_dtype_name(b->dtype), sb,
                          a->dtype != b->dtype ? " (dtype differs)" : " (shape differs)"));
        return;
    }
    fh_diff_entry *e = add_entry(c, xstrdup(c, at->path), "dataset", FH_DIFF_EQUAL,
                                    at->priv, NULL);
    if (e) {
        e->has_data = true;
        set_geometry(e, a);
        add_job(c, e, a, b, NULL, NULL);
    }
}

static fh_walk_next visit_child(void *ctx, const fh_walk_at *at)
{
    diff_ctx *c = ctx;
    const fh_h5_node *a = at->a, *b = at->b;
    if (at->depth == 1 && !strcmp(at->name, "audit") && !c->o->audit) {
        c->r->audit_skipped = true;
        return FH_WALK_SKIP;
    }
    if (!a || !b) {
        visit_one_sided(c, at);
        return FH_WALK_SKIP;
    }
    if (a->is_dataset != b->is_dataset) {
        add_entry(c, xstrdup(c, at->path), a->is_dataset ? "dataset" : "group",
                  FH_DIFF_STRUCTURE, at->priv,
                  xprintf(c, "a %s in A, a %s in B", a->is_dataset ? "dataset" : "group",
                          b->is_dataset ? "dataset" : "group"));
        return FH_WALK_SKIP;
    }
    if (!a->is_dataset)
        return FH_WALK_DESCEND;
    visit_datasets(c, at);
    return FH_WALK_SKIP;
}

static const fh_walk_visitor diff_visitor = {
    .attr = visit_attr,
    .child = visit_child,
    .stop = visit_stop,
};

/* ------------------------------------------------------------------------ */
/* Data: the streaming source                                               */
/* ------------------------------------------------------------------------ */

/* The streaming source: each side's dataset read from its file in bounded
 * hyperslabs into that side's chunk buffer (memory type = file type). */
typedef struct file_stream {
    fh_h5_dstream *ds;
    unsigned char *buf;
    size_t cap;
} file_stream;

static fattn_status file_open(void *ctx, int side, const char *path, const fh_h5_node *n,
                              void **stream)
{
    diff_ctx *c = ctx;
    file_stream *f = malloc(sizeof *f);
    if (!f)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
    *f = (file_stream){NULL, side ? c->buf_b : c->buf_a, c->chunk};
    fattn_status st = fh_h5_dstream_open(side ? c->rb : c->ra, path, n, &f->ds);
    if (st != FATTN_OK) {
        free(f);
        return st;
    }
    *stream = f;
    return FATTN_OK;
}

static fattn_status file_next(void *stream, const unsigned char **chunk, size_t *nbytes)
{
    file_stream *f = stream;
    *chunk = f->buf;
    return fh_h5_dstream_read(f->ds, f->buf, f->cap, nbytes);
}

static void file_close(void *stream)
{
    file_stream *f = stream;
    fh_h5_dstream_close(f->ds);
    free(f);
}

static fh_walk_source file_source(diff_ctx *c)
{
    return (fh_walk_source){c, file_open, file_next, file_close};
}

/* The digest of one side's dataset, streamed. */
static fattn_status stream_digest(diff_ctx *c, int side, const char *path,
                                  const fh_h5_node *n, char out[FH_DIGEST_LEN])
{
    fh_walk_source src = file_source(c);
    void *s;
    fattn_status st = src.open(src.ctx, side, path, n, &s);
    if (st != FATTN_OK)
        return st;
    fh_digest_state ds;
    const unsigned char *chunk;
    size_t got;
    if ((st = fh_digest_init(&ds)) != FATTN_OK)
        goto out;
    for (;;) {
        if ((st = src.next(s, &chunk, &got)) != FATTN_OK)
            goto out;
        if (!got)
            break;
        fh_digest_update(&ds, chunk, got);
    }
    st = fh_digest_final(&ds, out);
out:
    src.close(s);
    fh_digest_free(&ds); /* nothing left to free after the final or a failed init */
    return st;
}

/* Both sides of a dataset pair streamed chunk by chunk through the mode's
 * element rule, digests recomputed on the way. */
static fattn_status compare_pair(diff_ctx *c, fh_diff_entry *e, const fh_h5_node *na,
                                 const fh_h5_node *nb)
{
    const fh_diff_opts *o = c->o;
    e->st.numel = 1;
    for (int i = 0; i < na->ndim; i++)
        e->st.numel *= (uint64_t)na->shape[i];
    if (o->mode == FH_ELEM_TOL && fattn_dtype_is_float(e->dtype))
        e->tol = fh_tol_profile_lookup(o->tol, e->path, e->dtype);
    if (o->trust_digests && !strcmp(na->stored_digest, nb->stored_digest)) {
        memcpy(e->digest_a, na->stored_digest, FH_DIGEST_LEN);
        memcpy(e->digest_b, nb->stored_digest, FH_DIGEST_LEN);
        return FATTN_OK;
    }
    fh_elem_cmp rule = {o->mode, o->max_ulp, e->tol, false, &c->sq};
    /* Energy of equal chunks is needed only if the dataset differs; the
     * stored digests say so in advance (a mismatch that shows up anyway is
     * corruption, and its NMSE is then marked partial). */
    bool want_signal = fattn_dtype_is_float(e->dtype) &&
                       strcmp(na->stored_digest, nb->stored_digest) != 0;
    fh_walk_source src = file_source(c);
    return fh_walk_compare_data(&src, e->path, na, nb, &rule, want_signal, &e->st,
                                   e->digest_a, e->digest_b);
}

/* A dataset pair: the data, then whether either side is corrupt. */
static fattn_status run_pair_job(diff_ctx *c, fh_diff_entry *e, const job *jb)
{
    fattn_status st = compare_pair(c, e, jb->na, jb->nb);
    if (st != FATTN_OK)
        return st;
    bool ca = strcmp(e->digest_a, jb->na->stored_digest) != 0;
    bool cb = strcmp(e->digest_b, jb->nb->stored_digest) != 0;
    if (ca || cb) {
        e->status = FH_DIFF_CORRUPT;
        e->msg = xprintf(c, "%s%s%s%s%s%s%s%s%s", ca ? "A: stored " : "",
                         ca ? jb->na->stored_digest : "", ca ? ", data " : "",
                         ca ? e->digest_a : "", ca && cb ? "; " : "", cb ? "B: stored " : "",
                         cb ? jb->nb->stored_digest : "", cb ? ", data " : "",
                         cb ? e->digest_b : "");
    } else if (e->st.fail_count > 0) {
        e->status = FH_DIFF_DIFFERENT;
    }
    return FATTN_OK;
}

/* One side's dataset facing a digest-only tensor: its digest, recomputed
 * unless trusted; *corrupt when the data do not match the stored one. */
static fattn_status side_digest(diff_ctx *c, fh_diff_entry *e, int side,
                                const fh_h5_node *n, char *out, bool *corrupt)
{
    if (c->o->trust_digests)
        return FATTN_OK;
    fattn_status st = stream_digest(c, side, e->path, n, out);
    if (st != FATTN_OK)
        return st;
    if (strcmp(out, n->stored_digest)) {
        e->status = FH_DIFF_CORRUPT;
        e->msg = xprintf(c, "%c: stored %s, data %s", side ? 'B' : 'A', n->stored_digest, out);
        *corrupt = true;
    }
    return FATTN_OK;
}

static fattn_status run_job(diff_ctx *c, const job *jb)
{
    fh_diff_entry *e = &c->r->e[jb->entry];
    fattn_status st = FATTN_OK;
    if (jb->na && jb->nb)
        return run_pair_job(c, e, jb);
    /* digest-only on at least one side */
    const char *da = jb->dig_a, *db = jb->dig_b;
    bool corrupt = false;
    if (jb->na) {
        da = jb->na->stored_digest;
        st = side_digest(c, e, 0, jb->na, e->digest_a, &corrupt);
        if (st != FATTN_OK || corrupt)
            return st;
    }
    if (jb->nb) {
        db = jb->nb->stored_digest;
        st = side_digest(c, e, 1, jb->nb, e->digest_b, &corrupt);
        if (st != FATTN_OK || corrupt)
            return st;
    }
    snprintf(e->digest_a, FH_DIGEST_LEN, "%s", da);
    snprintf(e->digest_b, FH_DIGEST_LEN, "%s", db);
    if (strcmp(da, db) != 0) {
        e->status = FH_DIFF_DIFFERENT;
        e->msg = xprintf(c, "digest %s in A, %s in B (%s: elements cannot be counted)", da, db,
                         !jb->na && !jb->nb ? "digest only on both sides"
                         : !jb->na          ? "digest only in A"
                                            : "digest only in B");
    }
    return FATTN_OK;
}

/* ------------------------------------------------------------------------ */
/* Opening the files                                                        */
/* ------------------------------------------------------------------------ */

/* What open_side and the comparison do to a file, in a forked child first
 * (isolate.h): a metadata-only lenient read, then every dataset streamed
 * once. A crash inside libhdf5 on a malformed file then becomes an error
 * instead of killing fattn diff (docs/reliability.md). */
static fattn_status probe_tree(fh_h5_reader *r, const fh_h5_node *n, char *path,
                               size_t len, size_t cap, unsigned char *buf, size_t bufcap)
{
    size_t nl = strlen(n->name);
    if (len + 1 + nl + 1 > cap)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: path too long", path);
    size_t at = len;
    if (nl) {
        if (len > 1)
            path[at++] = '/';
        memcpy(path + at, n->name, nl);
        at += nl;
        path[at] = '\0';
    }
    fattn_status st = FATTN_OK;
    fh_h5_dstream *ds = NULL;
    if (n->is_dataset) {
        if ((st = fh_h5_dstream_open(r, path, n, &ds)) != FATTN_OK)
            goto out;
        size_t got;
        do {
            if ((st = fh_h5_dstream_read(ds, buf, bufcap, &got)) != FATTN_OK)
                goto out;
        } while (got);
    } else {
        for (size_t i = 0; i < n->n_children; i++)
            if ((st = probe_tree(r, n->children[i], path, at, cap, buf, bufcap)) != FATTN_OK)
                goto out;
    }
out:
    fh_h5_dstream_close(ds);
    path[len] = '\0';
    return st;
}

/* The isolated child's pass over one side: its estimate against the bound
 * (ctx, a double: one side's share of it, 0 none), then what diff does
 * with it (a metadata-only read, every dataset streamed once). */
static fattn_status probe_side(const char *path, void *ctx)
{
    fh_h5_estimate e;
    fattn_status st = fh_runfile_check_size(path, *(const double *)ctx, false, &e);
    if (st != FATTN_OK)
        return st;
    fh_h5_reader *r = NULL;
    if ((st = fh_h5_reader_open(path, &r)) != FATTN_OK)
        return st;
    fh_h5_node *root = NULL;
    fh_h5_read_opts opts = {.allow_corrupt = true, .metadata_only = true,
                               .attr_text_max = fh_h5_estimate_attr_text(&e)};
    enum { BUF = 1 << 16 };
    unsigned char *buf = NULL;
    char p[4096] = "/";
    if ((st = fh_h5_reader_read(r, "/", &opts, &root)) != FATTN_OK)
        goto out;
    if (!(buf = malloc(BUF))) {
        st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
        goto out;
    }
    st = probe_tree(r, root, p, 1, sizeof p, buf, BUF);
out:
    free(buf);
    fh_h5_node_free(root);
    fh_h5_reader_close(r);
    return st;
}

/* One side checked in the isolated child (against max, 0 none), its
 * estimate in *e; then opened here. */
static fattn_status check_side(const char *path, double max, fh_h5_estimate *e)
{
    fattn_status st;
    if ((st = fh_isolate_run(path, probe_side, &max, 0, 0)) != FATTN_OK)
        return st; /* the child's message, passed on by isolate */
    return fh_runfile_check_size(path, max, false, e);
}

static fattn_status open_side(const char *path, const fh_h5_estimate *e,
                              fh_h5_reader **r, fh_h5_node **root)
{
    fattn_status st;
    if ((st = fh_h5_reader_open(path, r)) != FATTN_OK)
        return st;
    fh_h5_read_opts opts = {.allow_corrupt = true, .metadata_only = true,
                               .attr_text_max = fh_h5_estimate_attr_text(e)};
    if ((st = fh_h5_reader_read(*r, "/", &opts, root)) != FATTN_OK)
        return st;
    const fh_h5_attr *s = fh_h5_node_attr(*root, "schema");
    if (!s || s->kind != FH_H5_ATTR_STRING)
        return fattn_error(FATTN_E_INVALID_FILE,
                           "%s: no schema attribute at the root: not a fattn run file", path);
    if (strcmp(s->s, RUN_SCHEMA) != 0)
        return fattn_error(FATTN_E_INVALID_FILE,
                           "%s: schema \"%s\" is not a known run-file schema (want %s)", path,
                           s->s, RUN_SCHEMA);
    return FATTN_OK;
}

/* An entry per object and attribute (its path, message and statistics),
 * generously. */
enum { DIFF_ENTRY_COST = sizeof(fh_diff_entry) + 512 };

double fh_diff_memory(const fh_h5_estimate *a, const fh_h5_estimate *b,
                         size_t chunk_bytes)
{
    double chunk = (double)(chunk_bytes ? chunk_bytes : DIFF_CHUNK_DEFAULT);
    return fh_h5_estimate_tree(a, false) + fh_h5_estimate_tree(b, false) +
           (a->objects + a->attrs + b->objects + b->attrs) * DIFF_ENTRY_COST + 2.0 * chunk +
           (double)fh_fileguard_pinned_memory();
}

/* Both sides checked (each in its isolated child), then the whole
 * comparison's estimate against the bound, then both opened. */
static fattn_status open_sides(const char *a, const char *b, const fh_diff_opts *o,
                               diff_ctx *c, fh_h5_node **ta, fh_h5_node **tb)
{
    fh_h5_estimate ea, eb;
    fattn_status st;
    if ((st = check_side(a, o->max_memory, &ea)) != FATTN_OK ||
        (st = check_side(b, o->max_memory, &eb)) != FATTN_OK)
        return st;
    double need = fh_diff_memory(&ea, &eb, c->chunk);
    if (o->max_memory > 0 && need > o->max_memory)
        return fattn_error(FATTN_E_INVALID_ARG, "%s and %s: comparing them holds an estimated "
                           "%.0f bytes (both files' trees without their data, attribute text "
                           "up to %.0f and %.0f, an entry per object and attribute, the chunk "
                           "buffers), over --max-memory %.0f: refused before their attributes "
                           "are read", a, b, need, fh_h5_estimate_attr_text(&ea),
                           fh_h5_estimate_attr_text(&eb), o->max_memory);
    if ((st = open_side(a, &ea, &c->ra, ta)) != FATTN_OK)
        return st;
    return open_side(b, &eb, &c->rb, tb);
}

/* ------------------------------------------------------------------------ */
/* Driver                                                                   */
/* ------------------------------------------------------------------------ */

static void tally(fh_diff_report *r)
{
    for (size_t i = 0; i < r->n_e; i++) {
        const fh_diff_entry *e = &r->e[i];
        assert((int)e->status >= 0 && e->status < FH_DIFF_PRIVATE);
        if (e->has_data || !strcmp(e->kind, "digest"))
            r->n_data++;
        r->tally[e->is_private && e->status != FH_DIFF_EQUAL ? FH_DIFF_PRIVATE
                                                                : e->status]++;
        if (fh_diff_entry_counted(e))
            r->counted++;
    }
}

fattn_status fh_diff_files(const char *a, const char *b, const fh_diff_opts *o,
                              fh_diff_report *r)
{
    assert(o->mode != FH_ELEM_NOISY && (o->mode != FH_ELEM_TOL || o->tol));
    memset(r, 0, sizeof *r);
    r->file_a = a;
    r->file_b = b;
    diff_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.r = r;
    c.chunk = o->chunk_bytes ? o->chunk_bytes : DIFF_CHUNK_DEFAULT;
    fh_walk w = {&diff_visitor, &c, '/'};
    c.walk = &w;
    fh_h5_node *ta = NULL, *tb = NULL;
    fattn_status st = open_sides(a, b, o, &c, &ta, &tb);
    if (st != FATTN_OK)
        goto out;
    c.buf_a = malloc(c.chunk);
    c.buf_b = malloc(c.chunk);
    if (!c.buf_a || !c.buf_b) {
        st = fattn_error(FATTN_E_NOMEM, "out of memory (chunk buffers)");
        goto out;
    }
    fh_walk_at root = fh_walk_root("/", ta, tb);
    fh_walk_group(&w, &root);
    for (size_t i = 0; !c.oom && i < c.n_jobs; i++)
        if ((st = run_job(&c, &c.jobs[i])) != FATTN_OK)
            goto out;
    if (c.oom) {
        st = fattn_error(FATTN_E_NOMEM, "out of memory");
        goto out;
    }
    tally(r);
out:
    free(c.jobs);
    free(c.buf_a);
    free(c.buf_b);
    fh_elem_sq_cache_free(&c.sq);
    fh_h5_node_free(ta);
    fh_h5_node_free(tb);
    fh_h5_reader_close(c.ra);
    fh_h5_reader_close(c.rb);
    return st;
}

void fh_diff_report_free(fh_diff_report *r)
{
    for (size_t i = 0; i < r->n_e; i++) {
        free(r->e[i].path);
        free(r->e[i].msg);
        free(r->e[i].a);
        free(r->e[i].b);
    }
    free(r->e);
    for (size_t i = 0; i < r->n_prov; i++) {
        free(r->prov[i].path);
        free(r->prov[i].a);
        free(r->prov[i].b);
    }
    free(r->prov);
    memset(r, 0, sizeof *r);
}
