/* The plan cache's key of a graph (graph.h, fattn__cg_key): every field of every
 * tensor and operation that reaches a descriptor, as LEB128 varints, and a
 * 64-bit FNV-1a hash of those bytes. It replaces the text dump on the
 * lookup of a cache hit, which snprintf'd some 10 kB per call; the dump
 * still keys the on-disk plan store, which is read on a miss only. */
#include <assert.h>
#include <string.h>

#include "cudnn/graph.h"

typedef struct key_w {
    cg_key_buf *k;
} key_w;

/* Zigzag, then 7 bits a byte: small and negative values (-1 for "none")
 * take one byte. */
static void put(key_w *w, int64_t v)
{
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    cg_key_buf *k = w->k;
    assert(k->len + 10 <= CG_KEY_MAX);
    do {
        unsigned char b = (unsigned char)(u & 0x7f);
        u >>= 7;
        k->b[k->len++] = (unsigned char)(b | (u ? 0x80 : 0));
    } while (u);
}

static void put_tensor(key_w *w, const cg_tensor *t)
{
    put(w, t->uid);
    put(w, t->dtype);
    for (int i = 0; i < 4; i++)
        put(w, t->dims[i]);
    for (int i = 0; i < 4; i++)
        put(w, t->strides[i]);
    put(w, (t->is_virtual ? 1 : 0) | (t->by_value ? 2 : 0));
    put(w, t->ragged);
    put(w, t->role);
}

static void put_op(key_w *w, const cg_op *o)
{
    put(w, o->kind);
    put(w, o->mode);
    put(w, o->math);
    put(w, o->axis);
    for (int i = 0; i < 3; i++)
        put(w, o->in[i]);
    put(w, o->out);
    put(w, o->m_override);
    put(w, o->n_override);
    put(w, o->k_override);
    int64_t p;
    assert(sizeof p == sizeof o->bernoulli_p);
    memcpy(&p, &o->bernoulli_p, sizeof p);
    put(w, p);
    for (int i = 0; i < CG_SDPA_N; i++)
        put(w, o->sdpa[i]);
}

void fattn__cg_key(const cg_graph *g, cg_key_buf *out)
{
    key_w w = {out};
    out->len = 0;
    put(&w, g->route);
    put(&w, g->deterministic);
    put(&w, g->pin.on);
    if (g->pin.on) {
        put(&w, g->pin.engine);
        put(&w, g->pin.n);
        for (int i = 0; i < g->pin.n; i++) {
            put(&w, g->pin.type[i]);
            put(&w, g->pin.value[i]);
        }
    }
    put(&w, g->nt);
    put(&w, g->nops);
    for (int i = 0; i < g->nt; i++)
        put_tensor(&w, &g->t[i]);
    for (int i = 0; i < g->nops; i++)
        put_op(&w, &g->ops[i]);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < out->len; i++)
        h = (h ^ out->b[i]) * 1099511628211ull;
    out->hash = h;
}

bool fattn__cg_key_equal(const cg_key_buf *a, const unsigned char *b, size_t len, uint64_t hash)
{
    return a->hash == hash && a->len == len && memcmp(a->b, b, len) == 0;
}
