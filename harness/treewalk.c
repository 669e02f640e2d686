/* One walk over two recorded trees (see treewalk.h). */
#include "treewalk.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

fattn_walk_at fattn_walk_root(const char *path, const fattn_h5_node *a, const fattn_h5_node *b)
{
    assert(a || b);
    return (fattn_walk_at){path, path, a, b, 0, false, NULL};
}

static size_t n_attrs(const fattn_h5_node *n) { return n ? n->n_attrs : 0; }

static size_t n_children(const fattn_h5_node *n)
{
    return n && !n->is_dataset ? n->n_children : 0;
}

void fattn_walk_attrs(const fattn_walk *w, const fattn_walk_at *at)
{
    if (!w->v->attr)
        return;
    const fattn_h5_node *na = at->a, *nb = at->b;
    size_t i = 0, j = 0;
    while (i < n_attrs(na) || j < n_attrs(nb)) {
        const fattn_h5_attr *a = i < n_attrs(na) ? &na->attrs[i] : NULL;
        const fattn_h5_attr *b = j < n_attrs(nb) ? &nb->attrs[j] : NULL;
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
    /* names are at most FATTN_H5_NAME_MAX and trees at most
     * FATTN_H5_MAX_DEPTH deep (h5io.h), so the path fits */
    assert(n >= 0 && (size_t)n < cap);
    (void)n;
}

void fattn_walk_group(const fattn_walk *w, const fattn_walk_at *at)
{
    assert(at->depth <= FATTN_H5_MAX_DEPTH + 1);
    fattn_walk_attrs(w, at);
    if (w->v->child) {
        const fattn_h5_node *na = at->a, *nb = at->b;
        size_t i = 0, j = 0;
        while (i < n_children(na) || j < n_children(nb)) {
            if (w->v->stop && w->v->stop(w->ctx))
                return;
            const fattn_h5_node *a = i < n_children(na) ? na->children[i] : NULL;
            const fattn_h5_node *b = j < n_children(nb) ? nb->children[j] : NULL;
            int cmp = !a ? 1 : !b ? -1 : strcmp(a->name, b->name);
            if (cmp < 0)
                b = NULL, i++;
            else if (cmp > 0)
                a = NULL, j++;
            else
                i++, j++;
            const char *name = a ? a->name : b->name;
            char path[FATTN_WALK_PATH_MAX];
            join(path, sizeof path, at->path, w->sep, name);
            fattn_walk_at c = {path, name, a, b, at->depth + 1,
                               at->priv || !strcmp(name, "_impl"), at};
            if (w->v->child(w->ctx, &c) == FATTN_WALK_DESCEND)
                fattn_walk_group(w, &c);
        }
    }
    if (w->v->group_done)
        w->v->group_done(w->ctx, at);
}
