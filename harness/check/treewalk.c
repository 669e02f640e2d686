/* One walk over two recorded trees (see treewalk.h). */
#include "treewalk.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"

fh_walk_at fh_walk_root(const char *path, const fh_h5_node *a, const fh_h5_node *b)
{
    assert(a || b);
    return (fh_walk_at){path, path, a, b, 0, false, NULL};
}

static size_t n_attrs(const fh_h5_node *n) { return n ? n->n_attrs : 0; }

static size_t n_children(const fh_h5_node *n)
{
    return n && !n->is_dataset ? n->n_children : 0;
}

void fh_walk_attrs(const fh_walk *w, const fh_walk_at *at)
{
    assert(w && w->v && at);
    if (!w->v->attr)
        return;
    const fh_h5_node *na = at->a, *nb = at->b;
    size_t i = 0, j = 0;
    while (i < n_attrs(na) || j < n_attrs(nb)) {
        const fh_h5_attr *a = i < n_attrs(na) ? &na->attrs[i] : NULL;
        const fh_h5_attr *b = j < n_attrs(nb) ? &nb->attrs[j] : NULL;
        int cmp = !a ? 1 : !b ? -1 : strcmp(a->name, b->name);
        if (cmp < 0)
            b = NULL, i++;
        else if (cmp > 0)
            a = NULL, j++;
        else
            i++, j++;
        w->v->attr(w->ctx, at, a, b);
    }
    if (w->v->attrs_done)
        w->v->attrs_done(w->ctx, at);
}

/* The path of child `name` below `parent` into buf (see treewalk.h). */
static void join(char *buf, size_t cap, const char *parent, char sep, const char *name)
{
    int n;
    if (!*parent)
        n = snprintf(buf, cap, "%s", name);
    else if (sep == '/' && !strcmp(parent, "/"))
        n = snprintf(buf, cap, "/%s", name);
    else
        n = snprintf(buf, cap, "%s%c%s", parent, sep, name);
    /* names are at most FH_H5_NAME_MAX and trees at most
     * FH_H5_MAX_DEPTH deep (h5io.h), so the path fits */
    assert(n >= 0 && (size_t)n < cap);
    (void)n;
}

void fh_walk_group(const fh_walk *w, const fh_walk_at *at)
{
    assert(at->depth <= FH_H5_MAX_DEPTH + 1);
    assert(w->sep == '/' || w->sep == '.');
    fh_walk_attrs(w, at);
    if (w->v->child) {
        const fh_h5_node *na = at->a, *nb = at->b;
        size_t i = 0, j = 0;
        while (i < n_children(na) || j < n_children(nb)) {
            if (w->v->stop && w->v->stop(w->ctx))
                return;
            const fh_h5_node *a = i < n_children(na) ? na->children[i] : NULL;
            const fh_h5_node *b = j < n_children(nb) ? nb->children[j] : NULL;
            int cmp = !a ? 1 : !b ? -1 : strcmp(a->name, b->name);
            if (cmp < 0)
                b = NULL, i++;
            else if (cmp > 0)
                a = NULL, j++;
            else
                i++, j++;
            const char *name = a ? a->name : b->name;
            char path[FH_WALK_PATH_MAX];
            join(path, sizeof path, at->path, w->sep, name);
            fh_walk_at c = {path, name, a, b, at->depth + 1,
                               at->priv || !strcmp(name, "_impl"), at};
            if (w->v->child(w->ctx, &c) == FH_WALK_DESCEND)
                fh_walk_group(w, &c);
        }
    }
    if (w->v->group_done)
        w->v->group_done(w->ctx, at);
}

/* ---- the data of a dataset pair ------------------------------------------------- */

static fattn_status memory_open(void *ctx, int side, const char *path, const fh_h5_node *n,
                                void **stream)
{
    (void)path;
    fh_walk_memory_state *m = ctx;
    assert((side == 0 || side == 1) && n->is_dataset && (n->data || !n->nbytes));
    m->side[side] = (fh_walk_memory_stream){n, false};
    *stream = &m->side[side];
    return FATTN_OK;
}

static fattn_status memory_next(void *stream, const unsigned char **chunk, size_t *nbytes)
{
    fh_walk_memory_stream *m = stream;
    assert(m && m->n);
    *chunk = m->n->data;
    *nbytes = m->taken ? 0 : m->n->nbytes;
    m->taken = true;
    return FATTN_OK;
}

static void memory_close(void *stream) { (void)stream; }

fh_walk_source fh_walk_memory(fh_walk_memory_state *m)
{
    return (fh_walk_source){m, memory_open, memory_next, memory_close};
}

fattn_status fh_walk_compare_data(const fh_walk_source *src, const char *path,
                                     const fh_h5_node *a, const fh_h5_node *b,
                                     const fh_elem_cmp *rule, bool want_signal,
                                     fh_elem_stats *s, char *digest_a, char *digest_b)
{
    assert(a->dtype == b->dtype && a->ndim == b->ndim);
    size_t es = fattn_dtype_size(a->dtype);
    assert(es > 0);
    void *sa = NULL, *sb = NULL;
    fh_digest_state da = {0}, db = {0};
    fattn_status st;
    if ((st = src->open(src->ctx, 0, path, a, &sa)) != FATTN_OK ||
        (st = src->open(src->ctx, 1, path, b, &sb)) != FATTN_OK ||
        (digest_a && (st = fh_digest_init(&da)) != FATTN_OK) ||
        (digest_b && (st = fh_digest_init(&db)) != FATTN_OK))
        goto out;
    uint64_t base = 0;
    for (;;) {
        const unsigned char *ca, *cb;
        size_t ga, gb;
        if ((st = src->next(sa, &ca, &ga)) != FATTN_OK ||
            (st = src->next(sb, &cb, &gb)) != FATTN_OK)
            goto out;
        if (ga != gb) { /* same shape and dtype: cannot happen */
            st = fattn_error(FATTN_E_INTERNAL, "%s: chunk sizes differ", path);
            goto out;
        }
        if (!ga)
            break;
        assert(ga % es == 0); /* a source hands out whole elements */
        if (digest_a)
            fh_digest_update(&da, ca, ga);
        if (digest_b)
            fh_digest_update(&db, cb, gb);
        size_t n = ga / es;
        fh_elem_compare_chunk(rule, a->dtype, ca, cb, n, base, &want_signal, s);
        base += n;
    }
    if (digest_a)
        fh_digest_final(&da, digest_a);
    if (digest_b)
        fh_digest_final(&db, digest_b);
out:
    if (digest_a)
        fh_digest_free(&da);
    if (digest_b)
        fh_digest_free(&db);
    if (sa)
        src->close(sa);
    if (sb)
        src->close(sb);
    return st;
}
