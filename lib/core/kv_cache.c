/* Appending a step's tokens to a KV cache as TE's nvte_copy_to_kv_cache
 * does (fattn/kv_cache.h; common/fused_attn/kv_cache.cu, TE release_v2.19):
 * every index is checked first, then the same moves and copies run in the
 * kernel's order. */
#include <assert.h>
#include <string.h>

#include "fattn/kv_cache.h"

typedef struct kv_plan {
    const fattn_kv_cache_copy_args *a;
    size_t esz;                 /* bytes per element */
    int64_t row_k, row_v;       /* elements per token: hg * d_k, hg * d_v */
    int64_t page_size, pages;   /* cache rows per page, pages in the cache */
} kv_plan;

static int64_t len_of(const int32_t *cu, int64_t bi)
{
    return (int64_t)cu[bi + 1] - (int64_t)cu[bi];
}

static fattn_status bad(const char *what)
{
    return fattn_error(FATTN_E_INVALID_ARG, "copy_to_kv_cache: %s", what);
}

static bool usable(const fattn_tensor *t)
{
    return t && !fattn_tensor_is_empty(t) && t->device == FATTN_DEVICE_HOST &&
           fattn_tensor_is_contiguous(t);
}

/* Shapes, dtypes and the kernel's own arithmetic (page_size). */
static fattn_status check_shapes(kv_plan *p)
{
    const fattn_kv_cache_copy_args *a = p->a;
    if (!usable(a->new_k) || !usable(a->new_v) || !usable(a->k_cache) || !usable(a->v_cache))
        return bad("new_k, new_v, k_cache and v_cache must be contiguous host tensors");
    /* attention.cpp:1091-1094 */
    if (a->k_cache->dtype != a->v_cache->dtype || a->new_k->dtype != a->new_v->dtype ||
        a->new_k->dtype != a->k_cache->dtype)
        return bad("new_k, new_v, k_cache and v_cache must be of the same data type");
    if (a->format != FATTN_FORMAT_BSHD && a->format != FATTN_FORMAT_SBHD &&
        a->format != FATTN_FORMAT_THD)
        return bad("qkv_format must be {BSHD, SBHD, THD}");
    int nd = a->format == FATTN_FORMAT_THD ? 3 : 4;
    const fattn_tensor *nk = a->new_k, *nv = a->new_v, *kc = a->k_cache, *vc = a->v_cache;
    if (nk->ndim != nd || nv->ndim != nd || kc->ndim != 4 || vc->ndim != 4)
        return bad("new tokens must be [b, s, h, d], [s, b, h, d] or [t, h, d] and the caches "
                   "[pages, page_size, h, d]");
    if (a->b < 0 || a->max_ctx_len < 0 || a->max_seq_len < 1 || a->max_pages_per_seq < 1 ||
        a->max_seq_len % a->max_pages_per_seq != 0 || !a->table || !a->cu_new_lens ||
        !a->cu_cached_lens)
        return bad("b, max_ctx_len, max_seq_len, max_pages_per_seq or a table out of range");
    /* kv_cache.cu: h_kv, d_k from new_k, d_v from new_v */
    int64_t hg = nk->shape[nd - 2], dk = nk->shape[nd - 1], dv = nv->shape[nd - 1];
    p->page_size = a->max_seq_len / a->max_pages_per_seq;
    p->pages = kc->shape[0];
    if (nv->shape[nd - 2] != hg || kc->shape[2] != hg || vc->shape[2] != hg ||
        kc->shape[3] != dk || vc->shape[3] != dv || vc->shape[0] != p->pages ||
        kc->shape[1] != p->page_size || vc->shape[1] != p->page_size)
        return bad("the caches' [pages, page_size, h, d] do not match the new tokens' heads "
                   "and dims, or max_seq_len / max_pages_per_seq");
    for (int i = 0; i < nd - 2; i++)
        if (nv->shape[i] != nk->shape[i])
            return bad("new_k and new_v differ in their token dimensions");
    if (a->format == FATTN_FORMAT_BSHD && (nk->shape[0] < a->b || nk->shape[1] != a->max_ctx_len))
        return bad("bshd new tokens must be [>= b, max_ctx_len, h, d]");
    if (a->format == FATTN_FORMAT_SBHD && nk->shape[1] != a->b)
        return bad("sbhd new tokens must be [s, b, h, d]");
    p->esz = fattn_dtype_size(kc->dtype);
    p->row_k = hg * dk;
    p->row_v = hg * dv;
    return FATTN_OK;
}

/* Where new token i of batch entry bi is, in tokens of new_k/new_v. */
static int64_t new_token(const kv_plan *p, int64_t bi, int64_t i)
{
    const fattn_kv_cache_copy_args *a = p->a;
    if (a->format == FATTN_FORMAT_BSHD)
        return bi * a->max_ctx_len + i;
    if (a->format == FATTN_FORMAT_SBHD)
        return i * a->b + bi;
    return (int64_t)a->cu_new_lens[bi] + i;
}

static int64_t tokens_in(const fattn_tensor *t, fattn_qkv_format f)
{
    return f == FATTN_FORMAT_THD ? t->shape[0] : t->shape[0] * t->shape[1];
}

/* The cache row (in tokens) that position pos of entry bi is copied to;
 * -1 when the table sends it outside the cache. */
static int64_t cache_row(const kv_plan *p, int64_t bi, int64_t pos)
{
    const fattn_kv_cache_copy_args *a = p->a;
    int64_t page = bi;
    if (!a->reindex) {
        int64_t slot = pos / p->page_size;
        if (bi >= a->table_rows || slot >= a->max_pages_per_seq)
            return -1;
        page = a->table[bi * a->max_pages_per_seq + slot];
    }
    if (page < 0 || page >= p->pages)
        return -1;
    return page * p->page_size + pos % p->page_size;
}

/* reindex_kv_cache_kernel's actual_b: one past the last descent of the
 * first b batch indices (b when they never descend). */
static int64_t reindex_count(const fattn_kv_cache_copy_args *a)
{
    int64_t actual = a->b;
    for (int64_t i = 0; i + 1 < a->b; i++)
        if (a->table[i + 1] < a->table[i])
            actual = i + 1;
    return actual;
}

static bool reindex_moves(const fattn_kv_cache_copy_args *a, int64_t bi)
{
    return a->table[0] != 0 || (int64_t)a->table[bi] - a->table[0] != bi;
}

/* Every index both kernels will use, before anything moves. */
static fattn_status check_indices(const kv_plan *p)
{
    const fattn_kv_cache_copy_args *a = p->a;
    int64_t new_tokens = tokens_in(a->new_k, a->format);
    if (a->reindex && a->table_rows < a->b)
        return bad("batch_indices has fewer than b entries");
    for (int64_t bi = 0; bi < a->b; bi++) {
        int64_t nl = len_of(a->cu_new_lens, bi), cl = len_of(a->cu_cached_lens, bi);
        if (nl < 0 || cl < nl || cl > a->max_seq_len)
            return bad("a sequence's new length is negative or above its cached length, or "
                       "its cached length above max_seq_len");
        if (a->format != FATTN_FORMAT_THD && nl > (a->format == FATTN_FORMAT_BSHD
                                                       ? a->max_ctx_len
                                                       : a->new_k->shape[0]))
            return bad("a sequence has more new tokens than the new tokens' length");
        for (int64_t i = 0; i < nl; i++) {
            int64_t t = new_token(p, bi, i);
            if (t < 0 || t >= new_tokens)
                return bad("a new token lies outside new_k (cu_new_lens past its tokens)");
            if (cache_row(p, bi, cl - nl + i) < 0)
                return bad("a table entry names no page of the cache (or the position is "
                           "past max_seq_len)");
        }
    }
    if (!a->reindex)
        return FATTN_OK;
    for (int64_t bi = 0; bi < reindex_count(a); bi++) {
        int64_t keep = len_of(a->cu_cached_lens, bi) - len_of(a->cu_new_lens, bi);
        if (reindex_moves(a, bi) && keep > 0 && (a->table[bi] < 0 || a->table[bi] >= p->pages ||
                                                 bi >= p->pages))
            return bad("batch_indices names a row outside the cache");
    }
    return FATTN_OK;
}

static void copy_token(const kv_plan *p, fattn_tensor *dst, int64_t drow, const fattn_tensor *src,
                       int64_t srow, int64_t row)
{
    size_t n = (size_t)row * p->esz;
    memmove((char *)dst->data + (size_t)drow * n, (const char *)src->data + (size_t)srow * n, n);
}

fattn_status fattn_kv_cache_copy(const fattn_kv_cache_copy_args *a)
{
    kv_plan p = {.a = a};
    fattn_status st = check_shapes(&p);
    if (st != FATTN_OK)
        return st;
    st = check_indices(&p);
    if (st != FATTN_OK)
        return st;
    if (a->reindex) {
        /* rows of one cache entry are page_size = max_seq_len tokens apart */
        for (int64_t bi = 0; bi < reindex_count(a); bi++) {
            if (!reindex_moves(a, bi))
                continue;
            int64_t keep = len_of(a->cu_cached_lens, bi) - len_of(a->cu_new_lens, bi);
            for (int64_t t = 0; t < keep; t++) {
                int64_t from = a->table[bi] * p.page_size + t, to = bi * p.page_size + t;
                copy_token(&p, a->k_cache, to, a->k_cache, from, p.row_k);
                copy_token(&p, a->v_cache, to, a->v_cache, from, p.row_v);
            }
        }
    }
    for (int64_t bi = 0; bi < a->b; bi++) {
        int64_t nl = len_of(a->cu_new_lens, bi), cl = len_of(a->cu_cached_lens, bi);
        for (int64_t i = 0; i < nl; i++) {
            int64_t row = cache_row(&p, bi, cl - nl + i), t = new_token(&p, bi, i);
            assert(row >= 0);
            copy_token(&p, a->k_cache, row, a->new_k, t, p.row_k);
            copy_token(&p, a->v_cache, row, a->new_v, t, p.row_v);
        }
    }
    return FATTN_OK;
}
