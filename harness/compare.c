/* Bitwise comparison of recorded case trees (see compare.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compare.h"

#define DIGEST_PREFIX "digest:"

static void note(fattn_compare_result *r, const char *path, const char *why)
{
    if (r->differences < FATTN_COMPARE_MAX_REPORTED) {
        snprintf(r->paths[r->differences], sizeof r->paths[0], "%s", path);
        snprintf(r->why[r->differences], sizeof r->why[0], "%s", why);
    }
    r->differences++;
}

static bool attr_equal(const fattn_h5_attr *a, const fattn_h5_attr *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case FATTN_H5_ATTR_STRING: return strcmp(a->s, b->s) == 0;
    case FATTN_H5_ATTR_FLOAT32: return memcmp(&a->f32, &b->f32, sizeof a->f32) == 0;
    case FATTN_H5_ATTR_UINT8: return a->u8 == b->u8;
    case FATTN_H5_ATTR_INT64: return a->i64[0] == b->i64[0];
    default: return a->i64[0] == b->i64[0] && a->i64[1] == b->i64[1];
    }
}

static bool is_digest_attr(const char *name)
{
    return strncmp(name, DIGEST_PREFIX, strlen(DIGEST_PREFIX)) == 0;
}

static void compare_attrs(const fattn_h5_node *a, const fattn_h5_node *b, const char *path,
                          fattn_compare_result *r)
{
    const fattn_h5_node *sides[2] = {a, b};
    for (int s = 0; s < 2; s++) {
        const fattn_h5_node *x = sides[s], *y = sides[1 - s];
        for (size_t i = 0; i < x->n_attrs; i++) {
            const fattn_h5_attr *xa = &x->attrs[i];
            if (is_digest_attr(xa->name) || !strncmp(xa->name, "prov_", 5) ||
                (x->is_dataset && (!strcmp(xa->name, "digest") || !strcmp(xa->name, "dtype"))))
                continue;
            const fattn_h5_attr *ya = fattn_h5_node_attr(y, xa->name);
            char p[192];
            snprintf(p, sizeof p, "%s@%s", path, xa->name);
            if (!ya)
                note(r, p, s == 0 ? "attribute missing in B" : "attribute missing in A");
            else if (s == 0 && !attr_equal(xa, ya))
                note(r, p, "attribute values differ");
        }
    }
}

/* The digest of tensor `name` under group g: its dataset's, or the
 * digest-only attribute's; NULL if neither. */
static const char *digest_of(const fattn_h5_node *g, const char *prefix, const char *name)
{
    char attr[256];
    snprintf(attr, sizeof attr, DIGEST_PREFIX "%s%s", prefix, name);
    const fattn_h5_attr *a = fattn_h5_node_attr(g, attr);
    return a && a->kind == FATTN_H5_ATTR_STRING ? a->s : NULL;
}

static void compare_groups(const fattn_h5_node *a, const fattn_h5_node *b, const char *path,
                           const fattn_h5_node *ra, const fattn_h5_node *rb, const char *rel,
                           fattn_compare_result *r);

static void compare_datasets(const fattn_h5_node *x, const fattn_h5_node *y, const char *path,
                             fattn_compare_result *r)
{
    r->tensors++;
    if (x->dtype != y->dtype) {
        note(r, path, "dtype differs");
        return;
    }
    bool shape = x->ndim == y->ndim;
    for (int i = 0; shape && i < x->ndim; i++)
        shape = x->shape[i] == y->shape[i];
    if (!shape) {
        note(r, path, "shape differs");
        return;
    }
    bool noisy = false;
    for (const char *const *q = r->noisy; q && *q; q++)
        noisy = noisy || !strcmp(*q, path);
    if (noisy && fattn_dtype_is_float(x->dtype) && x->nbytes == y->nbytes &&
        memcmp(x->data, y->data, x->nbytes) != 0) {
        /* non-deterministic by construction: within the noise bound */
        size_t esz = fattn_dtype_size(x->dtype), n = esz ? x->nbytes / esz : 0, out = 0;
        for (size_t e = 0; e < n; e++) {
            double a = fattn_load_f32(x->data, x->dtype, (int64_t)e);
            double b = fattn_load_f32(y->data, y->dtype, (int64_t)e);
            if (!(fabs(a - b) <= r->noisy_atol + r->noisy_rtol * fabs(b)))
                out++;
        }
        if (out) {
            char why[160];
            snprintf(why, sizeof why, "%zu of %zu elements outside the noise bound (rtol %g "
                     "atol %g)", out, n, r->noisy_rtol, r->noisy_atol);
            note(r, path, why);
        } else {
            r->noisy_within++;
        }
        compare_attrs(x, y, path, r);
        return;
    }
    if (x->nbytes != y->nbytes || memcmp(x->data, y->data, x->nbytes) != 0) {
        size_t esz = fattn_dtype_size(x->dtype), n = esz ? x->nbytes / esz : 0, count = 0;
        const unsigned char *px = x->data, *py = y->data;
        for (size_t e = 0; e < n; e++)
            count += memcmp(px + e * esz, py + e * esz, esz) != 0;
        char why[160];
        snprintf(why, sizeof why, "%zu of %zu elements differ", count, n);
        note(r, path, why);
    }
    compare_attrs(x, y, path, r);
}

/* Children of a and b by name (both sorted), `ra`/`rb` the state groups
 * that may hold digest-only attributes for tensors below them, `rel` the
 * path below that state group. */
static void compare_groups(const fattn_h5_node *a, const fattn_h5_node *b, const char *path,
                           const fattn_h5_node *ra, const fattn_h5_node *rb, const char *rel,
                           fattn_compare_result *r)
{
    compare_attrs(a, b, path, r);
    size_t i = 0, j = 0;
    while (i < a->n_children || j < b->n_children) {
        const fattn_h5_node *x = i < a->n_children ? a->children[i] : NULL;
        const fattn_h5_node *y = j < b->n_children ? b->children[j] : NULL;
        int c = !x ? 1 : !y ? -1 : strcmp(x->name, y->name);
        const fattn_h5_node *one = c <= 0 ? x : y;
        if (c < 0)
            i++;
        else if (c > 0)
            j++;
        else {
            i++;
            j++;
        }
        if (!strcmp(one->name, "_impl"))
            continue;
        char p[192], sub[192];
        snprintf(p, sizeof p, "%s%s%s", path, *path ? "/" : "", one->name);
        snprintf(sub, sizeof sub, "%s%s", rel, one->name);
        if (c == 0) {
            if (x->is_dataset != y->is_dataset)
                note(r, p, "dataset on one side, group on the other");
            else if (x->is_dataset)
                compare_datasets(x, y, p, r);
            else {
                char nrel[200];
                snprintf(nrel, sizeof nrel, "%s/", sub);
                compare_groups(x, y, p, ra, rb, nrel, r);
            }
            continue;
        }
        /* present on one side only: a digest-only tensor on the other? */
        const fattn_h5_node *other_state = c < 0 ? rb : ra;
        const char *d = other_state ? digest_of(other_state, rel, one->name) : NULL;
        if (one->is_dataset && d) {
            r->tensors++;
            if (strcmp(d, one->digest) != 0)
                note(r, p, "digest differs from the digest-only golden");
        } else {
            note(r, p, c < 0 ? "missing in B" : "missing in A");
        }
    }
    /* digest-only on both sides */
    if (ra == a && rb == b) {
        for (size_t k = 0; k < a->n_attrs; k++) {
            const fattn_h5_attr *da = &a->attrs[k];
            if (!is_digest_attr(da->name))
                continue;
            const char *tname = da->name + strlen(DIGEST_PREFIX);
            if (fattn_h5_node_find(b, tname))
                continue; /* compared above against the dataset */
            const fattn_h5_attr *db = fattn_h5_node_attr(b, da->name);
            char p[192];
            snprintf(p, sizeof p, "%s/%s", path, tname);
            r->tensors++;
            if (!db)
                note(r, p, "missing in B");
            else if (!attr_equal(da, db))
                note(r, p, "digests differ");
        }
        for (size_t k = 0; k < b->n_attrs; k++) {
            const fattn_h5_attr *db = &b->attrs[k];
            if (!is_digest_attr(db->name))
                continue;
            const char *tname = db->name + strlen(DIGEST_PREFIX);
            if (!fattn_h5_node_find(a, tname) && !fattn_h5_node_attr(a, db->name)) {
                char p[192];
                snprintf(p, sizeof p, "%s/%s", path, tname);
                r->tensors++;
                note(r, p, "missing in A");
            }
        }
    }
}

void fattn_compare_cases(const fattn_h5_node *a, const fattn_h5_node *b,
                         const char *const *states, fattn_compare_result *r)
{
    compare_attrs(a, b, "", r);
    static const char *const all_states[] = {"inputs", "forward", "save_ctx", "backward", NULL};
    if (!states) {
        states = all_states;
        /* anything else under the case group is compared as a whole */
        for (int side = 0; side < 2; side++) {
            const fattn_h5_node *x = side ? b : a, *y = side ? a : b;
            for (size_t i = 0; i < x->n_children; i++) {
                const char *nm = x->children[i]->name;
                bool known = false;
                for (int k = 0; all_states[k]; k++)
                    known = known || !strcmp(nm, all_states[k]);
                if (!known && !fattn_h5_node_find(y, nm))
                    note(r, nm, side ? "missing in A" : "missing in B");
                else if (!known && side == 0 && !x->children[i]->is_dataset)
                    compare_groups(x->children[i], fattn_h5_node_find(y, nm), nm,
                                   x->children[i], fattn_h5_node_find(y, nm), "", r);
            }
        }
    }
    for (const char *const *s = states; *s; s++) {
        const fattn_h5_node *x = fattn_h5_node_find(a, *s), *y = fattn_h5_node_find(b, *s);
        if (!x && !y)
            continue;
        if (!x || !y) {
            note(r, *s, !x ? "state missing in A" : "state missing in B");
            continue;
        }
        compare_groups(x, y, *s, x, y, "", r);
    }
}

/* ---- golden form ----------------------------------------------------------- */

/* Every dataset below `src` (path `rel` from the state group) as a
 * `digest:<rel><name>` attribute on `state`. */
static fattn_status digest_attrs(const fattn_h5_node *src, fattn_h5_node *state,
                                 const char *rel)
{
    fattn_status st = FATTN_OK;
    for (size_t i = 0; i < src->n_children && st == FATTN_OK; i++) {
        const fattn_h5_node *c = src->children[i];
        if (!strcmp(c->name, "_impl"))
            continue;
        char name[256];
        if (c->is_dataset) {
            snprintf(name, sizeof name, DIGEST_PREFIX "%s%s", rel, c->name);
            st = fattn_h5_node_set_string(state, name, c->digest);
        } else {
            snprintf(name, sizeof name, "%s%s/", rel, c->name);
            st = digest_attrs(c, state, name);
        }
    }
    return st;
}

fattn_status fattn_compare_make_golden(const fattn_h5_node *run_case, fattn_h5_node **out)
{
    fattn_h5_node *g = NULL;
    fattn_status st = fattn_h5_node_new_group(run_case->name, &g);
    if (st == FATTN_OK)
        st = fattn_h5_node_copy_attrs(run_case, g);
    for (size_t i = 0; st == FATTN_OK && i < run_case->n_children; i++) {
        const fattn_h5_node *state = run_case->children[i];
        if (!strcmp(state->name, "inputs") || !strcmp(state->name, "save_ctx")) {
            fattn_h5_node *gs;
            if ((st = fattn_h5_node_group(g, state->name, &gs)) == FATTN_OK &&
                (st = fattn_h5_node_copy_attrs(state, gs)) == FATTN_OK)
                st = digest_attrs(state, gs, "");
        } else {
            st = fattn_h5_node_copy(state, g, "_impl");
        }
    }
    if (st != FATTN_OK) {
        fattn_h5_node_free(g);
        return st;
    }
    *out = g;
    return FATTN_OK;
}

/* ---- cross-platform, within tolerance ------------------------------------ */

static bool all_ff(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0xFF)
            return false;
    return true;
}

static int value_class(float v) { return isnan(v) ? 2 : isinf(v) ? 1 : 0; }

/* One float dataset `x` (run) against `g` (golden). */
static void tol_dataset(const fattn_h5_node *x, const fattn_h5_node *g, const char *path,
                        const fattn_tol_profile *profile, fattn_dtype io_dtype,
                        fattn_compare_result *r)
{
    r->tensors++;
    bool shape = x->dtype == g->dtype && x->ndim == g->ndim && x->nbytes == g->nbytes;
    for (int i = 0; shape && i < x->ndim; i++)
        shape = x->shape[i] == g->shape[i];
    if (!shape) {
        note(r, path, "dtype or shape differs from the CPU golden");
        return;
    }
    size_t esz = fattn_dtype_size(x->dtype), n = esz ? x->nbytes / esz : 0;
    const unsigned char *px = x->data, *pg = g->data;
    if (!fattn_dtype_is_float(x->dtype)) {
        if (memcmp(px, pg, x->nbytes) != 0)
            note(r, path, "integer data differ from the CPU golden");
        return;
    }
    fattn_tol t = fattn_tol_profile_lookup(profile, path, x->dtype);
    if (!strcmp(path, "backward/d_softmax_offset") && io_dtype != FATTN_DTYPE_INVALID)
        /* float32, but summed from io-precision products: the io dtype's
         * tolerance is the meaningful one */
        t = fattn_tol_profile_lookup(profile, path, io_dtype);
    size_t bad = 0, worst_i = 0;
    double worst = 0.0;
    for (size_t e = 0; e < n; e++) {
        if (all_ff(pg + e * esz, esz))
            continue; /* undefined region of the CPU engine */
        float a = fattn_load_f32(px, x->dtype, (int64_t)e);
        float b = fattn_load_f32(pg, g->dtype, (int64_t)e);
        int ca = value_class(a), cb = value_class(b);
        double err = ca || cb ? (ca == cb && (ca == 2 || a == b) ? 0.0 : INFINITY)
                              : fabs((double)a - (double)b);
        double allowed = ca || cb ? 0.0 : t.atol + t.rtol * fabs((double)b);
        if (err > allowed) {
            bad++;
            if (err - allowed > worst) {
                worst = err - allowed;
                worst_i = e;
            }
        }
    }
    if (bad) {
        char why[160];
        snprintf(why, sizeof why, "%zu of %zu elements outside rtol %g atol %g (worst at flat "
                 "index %zu)", bad, n, t.rtol, t.atol, worst_i);
        note(r, path, why);
    }
}

static void tol_group(const fattn_h5_node *x, const fattn_h5_node *g, const char *path,
                      const fattn_tol_profile *profile, fattn_dtype io_dtype,
                      fattn_compare_result *r)
{
    for (size_t i = 0; i < g->n_children; i++) {
        const fattn_h5_node *gc = g->children[i];
        if (!strcmp(gc->name, "_impl"))
            continue;
        const fattn_h5_node *xc = fattn_h5_node_find(x, gc->name);
        char p[192];
        snprintf(p, sizeof p, "%s/%s", path, gc->name);
        if (!xc)
            note(r, p, "missing in the run");
        else if (gc->is_dataset != xc->is_dataset)
            note(r, p, "dataset on one side, group on the other");
        else if (gc->is_dataset)
            tol_dataset(xc, gc, p, profile, io_dtype, r);
        else
            tol_group(xc, gc, p, profile, io_dtype, r);
    }
    for (size_t i = 0; i < x->n_children; i++)
        if (strcmp(x->children[i]->name, "_impl") && !fattn_h5_node_find(g, x->children[i]->name)) {
            char p[192];
            snprintf(p, sizeof p, "%s/%s", path, x->children[i]->name);
            note(r, p, "missing in the golden");
        }
}

void fattn_compare_cases_tol(const fattn_h5_node *run, const fattn_h5_node *golden,
                             const fattn_tol_profile *profile, fattn_compare_result *r)
{
    /* inputs: engine-independent, bitwise through the digests */
    static const char *const inputs_only[] = {"inputs", NULL};
    fattn_compare_cases(run, golden, inputs_only, r);
    /* save_ctx: attributes equal; tensors that come from the inputs bitwise,
     * out and softmax_stats are engine outputs compared in forward/ */
    const fattn_h5_node *xs = fattn_h5_node_find(run, "save_ctx");
    const fattn_h5_node *gs = fattn_h5_node_find(golden, "save_ctx");
    if (!xs || !gs) {
        if (xs || gs)
            note(r, "save_ctx", xs ? "state missing in the golden" : "state missing in the run");
    } else {
        compare_attrs(xs, gs, "save_ctx", r);
        for (size_t i = 0; i < xs->n_children; i++) {
            const fattn_h5_node *c = xs->children[i];
            if (!c->is_dataset || !strcmp(c->name, "out") || !strcmp(c->name, "softmax_stats"))
                continue;
            const char *d = digest_of(gs, "", c->name);
            char p[192];
            snprintf(p, sizeof p, "save_ctx/%s", c->name);
            r->tensors++;
            if (!d)
                note(r, p, "missing in the golden");
            else if (strcmp(d, c->digest) != 0)
                note(r, p, "digest differs from the golden");
        }
    }
    static const char *const outs[] = {"forward", "backward"};
    for (int i = 0; i < 2; i++) {
        const fattn_h5_node *x = fattn_h5_node_find(run, outs[i]);
        const fattn_h5_node *g = fattn_h5_node_find(golden, outs[i]);
        if (!x && !g)
            continue;
        if (!x || !g) {
            note(r, outs[i], x ? "state missing in the golden" : "state missing in the run");
            continue;
        }
        compare_attrs(x, g, outs[i], r);
        const fattn_h5_node *o = fattn_h5_node_find(golden, "forward/out");
        tol_group(x, g, outs[i], profile, o ? o->dtype : FATTN_DTYPE_INVALID, r);
    }
}
