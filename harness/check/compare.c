/* Comparison of recorded case trees (see compare.h): visitors of the
 * two-tree walk (treewalk.h) with the element rules of elemcmp.h. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "elemcmp.h"
#include "treewalk.h"

#define DIGEST_PREFIX "digest:"

static char *dup_or_null(const char *s, bool *oom)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    *oom = *oom || !d;
    return d;
}

static void keep_diff(fh_compare_result *r, const char *path, const char *why, const char *a,
                      const char *b, bool tensor)
{
    if (r->n_all == r->cap_all) {
        size_t cap = r->cap_all ? 2 * r->cap_all : 16;
        fh_compare_diff *n = realloc(r->all, cap * sizeof *n);
        if (!n) {
            r->all_incomplete = true;
            return;
        }
        r->all = n;
        r->cap_all = cap;
    }
    bool oom = false;
    fh_compare_diff d = {dup_or_null(path, &oom), dup_or_null(why, &oom),
                            dup_or_null(a, &oom), dup_or_null(b, &oom), tensor};
    if (oom) {
        free(d.path);
        free(d.why);
        free(d.a);
        free(d.b);
        r->all_incomplete = true;
        return;
    }
    r->all[r->n_all++] = d;
}

void fh_compare_note(fh_compare_result *r, const char *path, const char *why,
                        const char *a, const char *b, bool tensor)
{
    if (r->differences < FH_COMPARE_MAX_REPORTED) {
        snprintf(r->paths[r->differences], sizeof r->paths[0], "%s", path);
        snprintf(r->why[r->differences], sizeof r->why[0], "%s", why);
    }
    r->differences++;
    if (r->keep_all)
        keep_diff(r, path, why, a, b, tensor);
}

void fh_compare_result_free(fh_compare_result *r)
{
    for (size_t i = 0; i < r->n_all; i++) {
        free(r->all[i].path);
        free(r->all[i].why);
        free(r->all[i].a);
        free(r->all[i].b);
    }
    free(r->all);
    r->all = NULL;
    r->n_all = r->cap_all = 0;
}

void fh_compare_attr_text(const fh_h5_attr *a, char *buf, size_t n)
{
    switch (a->kind) {
    case FH_H5_ATTR_STRING: snprintf(buf, n, "%s", a->s); break;
    case FH_H5_ATTR_FLOAT32: snprintf(buf, n, "%.9g", (double)a->f32); break;
    case FH_H5_ATTR_UINT8: snprintf(buf, n, "%u", (unsigned)a->u8); break;
    case FH_H5_ATTR_INT64: snprintf(buf, n, "%lld", (long long)a->i64[0]); break;
    default:
        snprintf(buf, n, "[%lld, %lld]", (long long)a->i64[0], (long long)a->i64[1]);
        break;
    }
}

static void note(fh_compare_result *r, const char *path, const char *why)
{
    fh_compare_note(r, path, why, NULL, NULL, false);
}

static void note_tensor(fh_compare_result *r, const char *path, const char *why)
{
    fh_compare_note(r, path, why, NULL, NULL, true);
}

/* A note that is reported after the others of its object (attributes
 * missing in A come after those of A) or of its group (tensors missing in
 * the golden come after the golden's own): the order of the first
 * differences the report shows. */
typedef struct later_note {
    int level; /* 2*depth: after the group's children; 2*depth+1: after its attributes */
    char path[192];
    char why[160];
    char b[512];    /* an attribute missing in A: its value in B */
    bool has_b, tensor;
} later_note;

typedef struct cmp_ctx {
    fh_compare_result *r;
    const fh_walk *w;
    /* the state groups being walked: digest-only tensors live on them */
    const fh_h5_node *ra, *rb;
    size_t state_len; /* the path below the state group starts here */
    /* the tolerance walk */
    const fh_tol_profile *profile;
    fattn_dtype io_dtype;
    later_note *later;
    size_t n_later, cap_later;
} cmp_ctx;

static void note_later_full(cmp_ctx *c, int level, const char *path, const char *why,
                            const char *b, bool tensor)
{
    assert(level >= 0 && c->n_later <= c->cap_later);
    if (c->n_later == c->cap_later) {
        size_t cap = c->cap_later ? 2 * c->cap_later : 16;
        later_note *nl = realloc(c->later, cap * sizeof *nl);
        if (!nl) { /* out of memory: reported now rather than lost */
            fh_compare_note(c->r, path, why, NULL, b, tensor);
            return;
        }
        c->later = nl;
        c->cap_later = cap;
    }
    later_note *n = &c->later[c->n_later++];
    n->level = level;
    snprintf(n->path, sizeof n->path, "%s", path);
    snprintf(n->why, sizeof n->why, "%s", why);
    n->has_b = b != NULL;
    snprintf(n->b, sizeof n->b, "%s", b ? b : "");
    n->tensor = tensor;
}

static void note_later(cmp_ctx *c, int level, const char *path, const char *why, bool tensor)
{
    note_later_full(c, level, path, why, NULL, tensor);
}

/* Report the deferred notes of `level` (the innermost open ones). */
static void flush_later(cmp_ctx *c, int level)
{
    assert(c->n_later <= c->cap_later);
    size_t k = c->n_later;
    while (k > 0 && c->later[k - 1].level == level)
        k--;
    for (size_t i = k; i < c->n_later; i++)
        fh_compare_note(c->r, c->later[i].path, c->later[i].why, NULL,
                           c->later[i].has_b ? c->later[i].b : NULL, c->later[i].tensor);
    c->n_later = k;
}

static bool attr_equal(const fh_h5_attr *a, const fh_h5_attr *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case FH_H5_ATTR_STRING: return strcmp(a->s, b->s) == 0;
    case FH_H5_ATTR_FLOAT32: return memcmp(&a->f32, &b->f32, sizeof a->f32) == 0;
    case FH_H5_ATTR_UINT8: return a->u8 == b->u8;
    case FH_H5_ATTR_INT64: return a->i64[0] == b->i64[0];
    default: return a->i64[0] == b->i64[0] && a->i64[1] == b->i64[1];
    }
}

/* An engine-call tensor's descriptor without its "strides [...] " (see
 * compare.h, replay), when its source is a recorded state; else NULL. */
static const char *strip_strides(const char *v, char *buf, size_t n)
{
    const char *s = strstr(v, " strides [");
    const char *e = s ? strchr(s + 10, ']') : NULL;
    if (!e || e[1] != ' ')
        return NULL;
    const char *src = e + 2;
    if (strncmp(src, "inputs/", 7) && strncmp(src, "forward/", 8) && strncmp(src, "save_ctx/", 9))
        return NULL;
    snprintf(buf, n, "%.*s %s", (int)(s - v), v, src);
    return buf;
}

static bool engine_call_equal_replayed(const char *path, const fh_h5_attr *a,
                                       const fh_h5_attr *b)
{
    if (strncmp(path, "engine_call/", 12) || a->kind != FH_H5_ATTR_STRING ||
        b->kind != FH_H5_ATTR_STRING)
        return false;
    char x[512], y[512];
    const char *sa = strip_strides(a->s, x, sizeof x), *sb = strip_strides(b->s, y, sizeof y);
    return sa && sb && !strcmp(sa, sb);
}

static bool is_digest_attr(const char *name)
{
    return strncmp(name, DIGEST_PREFIX, strlen(DIGEST_PREFIX)) == 0;
}

/* One attribute name: digest-only tensors, provenance (prov_*) and a
 * dataset's derived dtype and digest are not compared. */
static void visit_attr(void *ctx, const fh_walk_at *at, const fh_h5_attr *a,
                       const fh_h5_attr *b)
{
    cmp_ctx *c = ctx;
    const fh_h5_attr *x = a ? a : b;
    const fh_h5_node *owner = a ? at->a : at->b;
    if (is_digest_attr(x->name) || !strncmp(x->name, "prov_", 5) ||
        !strcmp(x->name, FH_H5_ATTRS_DIGEST) ||
        (owner->is_dataset && (!strcmp(x->name, "digest") || !strcmp(x->name, "dtype"))))
        return;
    char p[192], va[512], vb[512];
    snprintf(p, sizeof p, "%s@%s", at->path, x->name);
    if (a)
        fh_compare_attr_text(a, va, sizeof va);
    if (b)
        fh_compare_attr_text(b, vb, sizeof vb);
    if (!a)
        note_later_full(c, 2 * at->depth + 1, p, "attribute missing in A", vb, false);
    else if (!b)
        fh_compare_note(c->r, p, "attribute missing in B", va, NULL, false);
    else if (!attr_equal(a, b) && !(c->r->replay && engine_call_equal_replayed(p, a, b)))
        fh_compare_note(c->r, p, "attribute values differ", va, vb, false);
}

static void visit_attrs_done(void *ctx, const fh_walk_at *at)
{
    flush_later(ctx, 2 * at->depth + 1);
}

static void visit_group_done(void *ctx, const fh_walk_at *at)
{
    flush_later(ctx, 2 * at->depth);
}

/* The digest of tensor `rel` (its path below the state group g) held as a
 * digest-only attribute; NULL if none. */
static const char *digest_of(const fh_h5_node *g, const char *rel)
{
    char attr[256];
    snprintf(attr, sizeof attr, DIGEST_PREFIX "%s", rel);
    const fh_h5_attr *a = fh_h5_node_attr(g, attr);
    return a && a->kind == FH_H5_ATTR_STRING ? a->s : NULL;
}

/* ---- bitwise ------------------------------------------------------------------ */

static bool same_shape(const fh_h5_node *x, const fh_h5_node *y)
{
    bool shape = x->ndim == y->ndim;
    for (int i = 0; shape && i < x->ndim; i++)
        shape = x->shape[i] == y->shape[i];
    return shape;
}

/* A path below a case group as below the group of one call: a schedule's
 * "steps/<k>/" stripped (its steps hold the states of one call each). */
static const char *call_path(const char *path)
{
    if (strncmp(path, "steps/", 6) != 0)
        return path;
    const char *q = path + 6;
    while (*q >= '0' && *q <= '9')
        q++;
    return *q == '/' ? q + 1 : path;
}

static bool is_noisy(const fh_compare_result *r, const char *path)
{
    bool noisy = false;
    for (const char *const *q = r->noisy; q && *q; q++)
        noisy = noisy || !strcmp(*q, call_path(path));
    return noisy;
}

/* The first differing element of equal-shaped x and y (flat index, or
 * numel when none) and its index in the shape, as "[i,j,...]". */
static uint64_t first_differing(const fh_h5_node *x, const fh_h5_node *y, char *idx,
                                size_t n)
{
    size_t esz = fattn_dtype_size(x->dtype), numel = esz ? x->nbytes / esz : 0;
    const unsigned char *a = x->data, *b = y->data;
    uint64_t i = 0;
    while (i < numel && memcmp(a + i * esz, b + i * esz, esz) == 0)
        i++;
    uint64_t rest = i;
    int64_t coord[FATTN_MAX_DIMS] = {0};
    for (int d = x->ndim - 1; d >= 0 && x->shape[d] > 0; d--) {
        coord[d] = (int64_t)(rest % (uint64_t)x->shape[d]);
        rest /= (uint64_t)x->shape[d];
    }
    int at = snprintf(idx, n, "[");
    for (int d = 0; d < x->ndim && at > 0 && (size_t)at < n; d++)
        at += snprintf(idx + at, n - (size_t)at, "%s%lld", d ? "," : "", (long long)coord[d]);
    if (at > 0 && (size_t)at < n)
        snprintf(idx + at, n - (size_t)at, "]");
    return i;
}

/* r's detail for the first dataset whose elements differ. */
static void note_detail(fh_compare_result *r, const char *path, const fh_h5_node *x,
                        const fh_h5_node *y, const fh_elem_stats *s)
{
    if (r->detail[0])
        return;
    char idx[160];
    uint64_t i = first_differing(x, y, idx, sizeof idx);
    size_t esz = fattn_dtype_size(x->dtype);
    if (!esz || i * esz >= x->nbytes)
        return;
    uint64_t ab = fh_elem_bits((const unsigned char *)x->data + i * esz, esz);
    uint64_t bb = fh_elem_bits((const unsigned char *)y->data + i * esz, esz);
    int w = (int)(2 * esz);
    int at = snprintf(r->detail, sizeof r->detail,
                      "first at %s (flat %llu): A %.9g (0x%0*llx), B %.9g (0x%0*llx)", idx,
                      (unsigned long long)i, fh_elem_decode(x->dtype, ab), w,
                      (unsigned long long)ab, fh_elem_decode(x->dtype, bb), w,
                      (unsigned long long)bb);
    /* max abs/rel/ULP are over the finite pairs only: a NaN or Inf on one
     * side is counted apart, so that "max abs 0" never hides it */
    if (fattn_dtype_is_float(x->dtype) && at > 0 && (size_t)at < sizeof r->detail) {
        char fin[96] = "";
        if (s->n_finite)
            snprintf(fin, sizeof fin, "; max abs %.3g, max rel %.3g, max ULP %llu", s->max_abs,
                     s->max_rel, (unsigned long long)s->max_ulp);
        int more = snprintf(r->detail + at, sizeof r->detail - (size_t)at, "%s", fin);
        at = more < 0 ? at : at + more;
        if (s->class_changes && (size_t)at < sizeof r->detail)
            snprintf(r->detail + at, sizeof r->detail - (size_t)at,
                     "; %llu element%s finite on one side, NaN or Inf on the other",
                     (unsigned long long)s->class_changes, s->class_changes == 1 ? "" : "s");
    }
    snprintf(r->detail_path, sizeof r->detail_path, "%s", path);
}

/* A dataset pair's data: bitwise, or within the noise bound for a
 * non-deterministic tensor; then its attributes. */
static void compare_datasets(cmp_ctx *c, const fh_walk_at *at)
{
    const fh_h5_node *x = at->a, *y = at->b;
    fh_compare_result *r = c->r;
    r->tensors++;
    if (x->dtype != y->dtype) {
        note_tensor(r, at->path, "dtype differs");
        return;
    }
    if (!same_shape(x, y)) {
        note_tensor(r, at->path, "shape differs");
        return;
    }
    assert(x->nbytes == y->nbytes);
    size_t esz = fattn_dtype_size(x->dtype), n = esz ? x->nbytes / esz : 0;
    bool noisy = is_noisy(r, at->path) && fattn_dtype_is_float(x->dtype);
    fh_elem_cmp rule = {noisy ? FH_ELEM_NOISY : FH_ELEM_BITWISE, 0,
                           {r->noisy_rtol, r->noisy_atol}, false, NULL};
    fh_elem_stats s = {0};
    fh_walk_memory_state m;
    fh_walk_source src = fh_walk_memory(&m);
    if (fh_walk_compare_data(&src, at->path, x, y, &rule, false, &s, NULL, NULL) != FATTN_OK)
        assert(!"the in-memory source cannot fail");
    if (s.bit_count) {
        char why[160];
        if (!noisy)
            snprintf(why, sizeof why, "%zu of %zu elements differ", (size_t)s.bit_count, n);
        else if (s.fail_count)
            snprintf(why, sizeof why, "%zu of %zu elements outside the noise bound (rtol %g "
                     "atol %g)", (size_t)s.fail_count, n, r->noisy_rtol, r->noisy_atol);
        if (!noisy || s.fail_count) {
            note_tensor(r, at->path, why);
            note_detail(r, at->path, x, y, &s);
        } else
            r->noisy_within++;
    }
    fh_walk_attrs(c->w, at);
}

/* A tensor on one side only: a digest-only tensor on the other? */
static void compare_one_sided(cmp_ctx *c, const fh_walk_at *at)
{
    const fh_h5_node *one = at->a ? at->a : at->b;
    const fh_h5_node *other_state = at->a ? c->rb : c->ra;
    assert(strlen(at->path) >= c->state_len);
    const char *d = other_state ? digest_of(other_state, at->path + c->state_len) : NULL;
    if (one->is_dataset && d) {
        c->r->tensors++;
        if (strcmp(d, one->digest) != 0)
            note_tensor(c->r, at->path, "digest differs from the digest-only golden");
    } else {
        fh_compare_note(c->r, at->path, at->a ? "missing in B" : "missing in A", NULL, NULL,
                           one->is_dataset);
    }
}

static fh_walk_next state_child(void *ctx, const fh_walk_at *at)
{
    cmp_ctx *c = ctx;
    if (!strcmp(at->name, "_impl"))
        return FH_WALK_SKIP;
    if (!at->a || !at->b) {
        compare_one_sided(c, at);
        return FH_WALK_SKIP;
    }
    if (at->a->is_dataset != at->b->is_dataset) {
        note(c->r, at->path, "dataset on one side, group on the other");
        return FH_WALK_SKIP;
    }
    if (!at->a->is_dataset)
        return FH_WALK_DESCEND;
    compare_datasets(c, at);
    return FH_WALK_SKIP;
}

/* Digest-only tensors of the state group pair at `at`. */
static void digest_only_pairs(cmp_ctx *c, const fh_walk_at *at)
{
    const fh_h5_node *a = at->a, *b = at->b;
    fh_compare_result *r = c->r;
    for (size_t k = 0; k < a->n_attrs; k++) {
        const fh_h5_attr *da = &a->attrs[k];
        if (!is_digest_attr(da->name))
            continue;
        const char *tname = da->name + strlen(DIGEST_PREFIX);
        if (fh_h5_node_find(b, tname))
            continue; /* compared against the dataset */
        const fh_h5_attr *db = fh_h5_node_attr(b, da->name);
        char p[192];
        snprintf(p, sizeof p, "%s/%s", at->path, tname);
        r->tensors++;
        if (!db)
            note_tensor(r, p, "missing in B");
        else if (!attr_equal(da, db))
            note_tensor(r, p, "digests differ");
    }
    for (size_t k = 0; k < b->n_attrs; k++) {
        const fh_h5_attr *db = &b->attrs[k];
        if (!is_digest_attr(db->name))
            continue;
        const char *tname = db->name + strlen(DIGEST_PREFIX);
        if (!fh_h5_node_find(a, tname) && !fh_h5_node_attr(a, db->name)) {
            char p[192];
            snprintf(p, sizeof p, "%s/%s", at->path, tname);
            r->tensors++;
            note_tensor(r, p, "missing in A");
        }
    }
}

static void state_group_done(void *ctx, const fh_walk_at *at)
{
    cmp_ctx *c = ctx;
    visit_group_done(ctx, at);
    if (at->a == c->ra && at->b == c->rb)
        digest_only_pairs(c, at);
}

static const fh_walk_visitor state_visitor = {
    .attr = visit_attr,
    .attrs_done = visit_attrs_done,
    .child = state_child,
    .group_done = state_group_done,
};

/* Walk a state group pair (or another group directly under the case). */
static void walk_state(cmp_ctx *c, const fh_walk_at *at)
{
    fh_walk w = {&state_visitor, c, '/'};
    const fh_walk *outer = c->w;
    c->w = &w;
    c->ra = at->a;
    c->rb = at->b;
    c->state_len = strlen(at->path) + 1;
    fh_walk_group(&w, at);
    c->w = outer;
}

/* The states, and the engine calls between them, compared one by one. */
static const char *const all_states[] = {"inputs", "engine_call", "forward", "save_ctx",
                                         "backward", NULL};

static bool is_state(const char *name)
{
    for (int k = 0; all_states[k]; k++)
        if (!strcmp(name, all_states[k]))
            return true;
    return false;
}

/* A child of the case groups other than a state (or a schedule's steps/,
 * whose steps are walked as cases of their own): compared as a whole. */
static fh_walk_next case_child(void *ctx, const fh_walk_at *at)
{
    cmp_ctx *c = ctx;
    if (is_state(at->name) || !strcmp(at->name, "steps"))
        return FH_WALK_SKIP;
    if (!at->b)
        note(c->r, at->path, "missing in B");
    else if (!at->a)
        note_later(c, 2 * (at->depth - 1), at->path, "missing in A", at->b->is_dataset);
    else if (!at->a->is_dataset)
        walk_state(c, at);
    return FH_WALK_SKIP;
}

static const fh_walk_visitor case_visitor = {
    .attr = visit_attr,
    .attrs_done = visit_attrs_done,
    .child = case_child,
    .group_done = visit_group_done,
};

/* The named states of two case groups (or of two steps of a schedule:
 * root's path then is "steps/<k>"), each walked as a state. */
static void walk_states(cmp_ctx *c, const fh_walk_at *root, const char *const *states)
{
    for (const char *const *s = states; *s; s++) {
        const fh_h5_node *x = fh_h5_node_find(root->a, *s);
        const fh_h5_node *y = fh_h5_node_find(root->b, *s);
        char path[96];
        snprintf(path, sizeof path, "%s%s%s", root->path, root->path[0] ? "/" : "", *s);
        if (!x && !y)
            continue;
        if (!x || !y) {
            note(c->r, path, strcmp(*s, "engine_call")
                                 ? (!x ? "state missing in A" : "state missing in B")
                                 : (!x ? "engine calls not recorded in A"
                                       : "engine calls not recorded in B"));
            continue;
        }
        fh_walk_at at = {path, *s, x, y, 1, false, root};
        walk_state(c, &at);
    }
}

/* The largest k of a steps/<k> group on either side (names that are not
 * numbers count as 0: steps/ then differs as a whole). */
static size_t max_step(const fh_h5_node *x, const fh_h5_node *y, bool *odd)
{
    size_t m = 0;
    const fh_h5_node *g[2] = {x, y};
    for (int i = 0; i < 2; i++)
        for (size_t k = 0; k < g[i]->n_children; k++) {
            char *end;
            unsigned long v = strtoul(g[i]->children[k]->name, &end, 10);
            *odd = *odd || *end || v == 0;
            m = v > m ? (size_t)v : m;
        }
    return m;
}

/* A schedule's steps/<k> pairs, in step order, each walked as a case's
 * states (docs/run-files.md "Schedules"); a step on one side only is a
 * difference naming it. `whole`: a step's other objects (a U step's
 * recipe/, an X step's extra_state/) too. */
static void walk_steps(cmp_ctx *c, const fh_h5_node *a, const fh_h5_node *b,
                       const char *const *states, bool whole)
{
    const fh_h5_node *x = fh_h5_node_find(a, "steps"), *y = fh_h5_node_find(b, "steps");
    if (!x && !y)
        return;
    if (!x || !y) {
        note(c->r, "steps", !x ? "missing in A" : "missing in B");
        return;
    }
    bool odd = false;
    size_t n = max_step(x, y, &odd);
    if (odd)
        note(c->r, "steps", "holds an object that is not a step");
    for (size_t k = 1; k <= n; k++) {
        char name[32], path[48];
        snprintf(name, sizeof name, "%zu", k);
        snprintf(path, sizeof path, "steps/%zu", k);
        const fh_h5_node *sa = fh_h5_node_find(x, name), *sb = fh_h5_node_find(y, name);
        if (!sa && !sb)
            continue;
        if (!sa || !sb) {
            note(c->r, path, !sa ? "step missing in A" : "step missing in B");
            continue;
        }
        fh_walk_at root = fh_walk_root(path, sa, sb);
        if (whole)
            fh_walk_group(c->w, &root); /* a step's own objects but its states */
        walk_states(c, &root, states);
    }
}

bool fh_compare_has_calls(const fh_h5_node *c)
{
    if (fh_h5_node_find(c, "engine_call"))
        return true;
    const fh_h5_node *steps = fh_h5_node_find(c, "steps");
    for (size_t k = 0; steps && k < steps->n_children; k++)
        if (fh_h5_node_find(steps->children[k], "engine_call"))
            return true;
    return false;
}

void fh_compare_cases(const fh_h5_node *a, const fh_h5_node *b,
                         const char *const *states, fh_compare_result *r)
{
    cmp_ctx c = {.r = r};
    fh_walk w = {&case_visitor, &c, '/'};
    c.w = &w;
    fh_walk_at root = fh_walk_root("", a, b);
    bool whole = states == NULL;
    if (states) {
        fh_walk_attrs(&w, &root);
    } else {
        /* attributes, then anything else under the case group as a whole */
        fh_walk_group(&w, &root);
        states = all_states;
    }
    walk_states(&c, &root, states);
    walk_steps(&c, a, b, states, whole);
    assert(c.n_later == 0);
    free(c.later);
}

/* ---- golden form ----------------------------------------------------------- */

/* Every dataset below `src` (path `rel` from the state group) as a
 * `digest:<rel><name>` attribute on `state`. */
static fattn_status digest_attrs(const fh_h5_node *src, fh_h5_node *state,
                                 const char *rel)
{
    for (size_t i = 0; i < src->n_children; i++) {
        const fh_h5_node *c = src->children[i];
        if (!strcmp(c->name, "_impl"))
            continue;
        char name[256];
        fattn_status st;
        if (c->is_dataset) {
            snprintf(name, sizeof name, DIGEST_PREFIX "%s%s", rel, c->name);
            st = fh_h5_node_set_string(state, name, c->digest);
        } else {
            snprintf(name, sizeof name, "%s%s/", rel, c->name);
            st = digest_attrs(c, state, name);
        }
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

/* The golden form of one call's states (a case's, or a schedule step's)
 * from src into dst; a schedule's steps/ each the same way. */
static fattn_status golden_states(const fh_h5_node *src, fh_h5_node *dst)
{
    fattn_status st;
    for (size_t i = 0; i < src->n_children; i++) {
        const fh_h5_node *state = src->children[i];
        fh_h5_node *gs;
        if (!strcmp(state->name, "inputs") || !strcmp(state->name, "save_ctx")) {
            if ((st = fh_h5_node_group(dst, state->name, &gs)) != FATTN_OK ||
                (st = fh_h5_node_copy_attrs(state, gs)) != FATTN_OK ||
                (st = digest_attrs(state, gs, "")) != FATTN_OK)
                return st;
        } else if (!strcmp(state->name, "steps") && !state->is_dataset) {
            if ((st = fh_h5_node_group(dst, "steps", &gs)) != FATTN_OK)
                return st;
            for (size_t k = 0; k < state->n_children; k++) {
                fh_h5_node *step;
                if ((st = fh_h5_node_group(gs, state->children[k]->name, &step)) != FATTN_OK ||
                    (st = golden_states(state->children[k], step)) != FATTN_OK)
                    return st;
            }
        } else if ((st = fh_h5_node_copy(state, dst, "_impl")) != FATTN_OK) {
            return st;
        }
    }
    return FATTN_OK;
}

fattn_status fh_compare_make_golden(const fh_h5_node *run_case, fh_h5_node **out)
{
    fh_h5_node *g = NULL;
    fattn_status st;
    if ((st = fh_h5_node_new_group(run_case->name, &g)) != FATTN_OK ||
        (st = fh_h5_node_copy_attrs(run_case, g)) != FATTN_OK ||
        (st = golden_states(run_case, g)) != FATTN_OK ||
        /* it covers the digest:<name> attributes too */
        (st = fh_h5_node_seal_attrs(g)) != FATTN_OK)
        goto out;
    *out = g;
out:
    if (st != FATTN_OK)
        fh_h5_node_free(g);
    return st;
}

/* ---- cross-platform, within tolerance ------------------------------------ */

/* One dataset pair: `at->a` the run, `at->b` the golden. */
static void tol_dataset(cmp_ctx *c, const fh_walk_at *at)
{
    const fh_h5_node *x = at->a, *g = at->b;
    fh_compare_result *r = c->r;
    r->tensors++;
    if (!(x->dtype == g->dtype && x->nbytes == g->nbytes && same_shape(x, g))) {
        note_tensor(r, at->path, "dtype or shape differs from the CPU golden");
        return;
    }
    size_t esz = fattn_dtype_size(x->dtype), n = esz ? x->nbytes / esz : 0;
    if (!fattn_dtype_is_float(x->dtype)) {
        if (memcmp(x->data, g->data, x->nbytes) != 0)
            note_tensor(r, at->path, "integer data differ from the CPU golden");
        return;
    }
    const char *call = call_path(at->path);
    fh_tol t = fh_tol_profile_lookup(c->profile, call, x->dtype);
    if (!strcmp(call, "backward/d_softmax_offset") && c->io_dtype != FATTN_DTYPE_INVALID)
        /* float32, but summed from io-precision products: the io dtype's
         * tolerance is the meaningful one */
        t = fh_tol_profile_lookup(c->profile, call, c->io_dtype);
    /* elements the golden holds as all-0xFF poison are outside the CPU
     * engine's defined region */
    fh_elem_cmp rule = {FH_ELEM_TOL, 0, t, true, NULL};
    fh_elem_stats s = {0};
    fh_walk_memory_state m;
    fh_walk_source src = fh_walk_memory(&m);
    if (fh_walk_compare_data(&src, at->path, x, g, &rule, false, &s, NULL, NULL) != FATTN_OK)
        assert(!"the in-memory source cannot fail");
    if (s.fail_count) {
        char why[160];
        snprintf(why, sizeof why, "%zu of %zu elements outside rtol %g atol %g (worst at flat "
                 "index %zu)", (size_t)s.fail_count, n, t.rtol, t.atol, (size_t)s.excess_index);
        note_tensor(r, at->path, why);
    }
}

/* Only a state group's own attributes are compared here. */
static void tol_attr(void *ctx, const fh_walk_at *at, const fh_h5_attr *a,
                     const fh_h5_attr *b)
{
    if (at->depth == 1)
        visit_attr(ctx, at, a, b);
}

static fh_walk_next tol_child(void *ctx, const fh_walk_at *at)
{
    cmp_ctx *c = ctx;
    if (!strcmp(at->name, "_impl"))
        return FH_WALK_SKIP;
    if (!at->b) {
        note_later(c, 2 * (at->depth - 1), at->path, "missing in the golden",
                   at->a->is_dataset);
        return FH_WALK_SKIP;
    }
    if (!at->a)
        fh_compare_note(c->r, at->path, "missing in the run", NULL, NULL, at->b->is_dataset);
    else if (at->b->is_dataset != at->a->is_dataset)
        note(c->r, at->path, "dataset on one side, group on the other");
    else if (at->b->is_dataset)
        tol_dataset(c, at);
    else
        return FH_WALK_DESCEND;
    return FH_WALK_SKIP;
}

static const fh_walk_visitor tol_visitor = {
    .attr = tol_attr,
    .attrs_done = visit_attrs_done,
    .child = tol_child,
    .group_done = visit_group_done,
};

/* save_ctx against the golden: attributes equal; tensors that come from
 * the inputs bitwise through the golden's digests (out and softmax_stats
 * are engine outputs, compared in forward/). */
static void tol_save_ctx(cmp_ctx *c, const fh_walk_at *root)
{
    fh_compare_result *r = c->r;
    const fh_h5_node *xs = fh_h5_node_find(root->a, "save_ctx");
    const fh_h5_node *gs = fh_h5_node_find(root->b, "save_ctx");
    char where[64];
    snprintf(where, sizeof where, "%s%ssave_ctx", root->path, root->path[0] ? "/" : "");
    if (!xs || !gs) {
        if (xs || gs)
            note(r, where, xs ? "state missing in the golden" : "state missing in the run");
        return;
    }
    fh_walk_at at = {where, "save_ctx", xs, gs, 1, false, root};
    fh_walk_attrs(c->w, &at);
    for (size_t i = 0; i < xs->n_children; i++) {
        const fh_h5_node *t = xs->children[i];
        if (!t->is_dataset || !strcmp(t->name, "out") || !strcmp(t->name, "softmax_stats"))
            continue;
        const char *d = digest_of(gs, t->name);
        char p[192];
        snprintf(p, sizeof p, "%s/%s", where, t->name);
        r->tensors++;
        if (!d)
            note_tensor(r, p, "missing in the golden");
        else if (strcmp(d, t->digest) != 0)
            note_tensor(r, p, "digest differs from the golden");
    }
}

/* One call's save_ctx, forward and backward against the golden's (a
 * case's, or a schedule step's at root path "steps/<k>"). */
static void tol_call(const fh_h5_node *run, const fh_h5_node *golden, const char *path,
                     const fh_tol_profile *profile, fh_compare_result *r)
{
    const fh_h5_node *o = fh_h5_node_find(golden, "forward/out");
    cmp_ctx c = {.r = r, .profile = profile, .io_dtype = o ? o->dtype : FATTN_DTYPE_INVALID};
    fh_walk w = {&tol_visitor, &c, '/'};
    c.w = &w;
    fh_walk_at root = fh_walk_root(path, run, golden);
    tol_save_ctx(&c, &root);
    static const char *const outs[] = {"forward", "backward"};
    for (int i = 0; i < 2; i++) {
        const fh_h5_node *x = fh_h5_node_find(run, outs[i]);
        const fh_h5_node *g = fh_h5_node_find(golden, outs[i]);
        char p[64];
        snprintf(p, sizeof p, "%s%s%s", path, path[0] ? "/" : "", outs[i]);
        if (!x && !g)
            continue;
        if (!x || !g) {
            note(r, p, x ? "state missing in the golden" : "state missing in the run");
            continue;
        }
        fh_walk_at at = {p, outs[i], x, g, 1, false, &root};
        fh_walk_group(&w, &at);
    }
    assert(c.n_later == 0);
    free(c.later);
}

void fh_compare_cases_tol(const fh_h5_node *run, const fh_h5_node *golden,
                             const fh_tol_profile *profile, fh_compare_result *r)
{
    /* inputs: engine-independent, bitwise through the digests (a
     * schedule's steps' too); so are the engine calls (what the front end
     * hands any engine), where the goldens record them */
    static const char *const inputs_calls[] = {"inputs", "engine_call", NULL};
    static const char *const inputs_only[] = {"inputs", NULL};
    fh_compare_cases(run, golden,
                        fh_compare_has_calls(golden) ? inputs_calls : inputs_only, r);
    tol_call(run, golden, "", profile, r);
    const fh_h5_node *rs = fh_h5_node_find(run, "steps");
    const fh_h5_node *gs = fh_h5_node_find(golden, "steps");
    for (size_t k = 0; rs && gs && k < rs->n_children; k++) {
        const fh_h5_node *g = fh_h5_node_find(gs, rs->children[k]->name);
        char path[48];
        snprintf(path, sizeof path, "steps/%.16s", rs->children[k]->name);
        if (g)
            tol_call(rs->children[k], g, path, profile, r);
        /* a step on one side only: fh_compare_cases named it above */
    }
}
