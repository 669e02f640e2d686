/* Parameter validation and index geometry shared by every engine.
 *
 * Everything an engine reads or writes is addressed through offsets
 * computed here, after checking that every length and token offset stays
 * inside the tensors the caller described. The messages name the CPU engine
 * where they did before the geometry was shared: they are part of the
 * recorded behaviour.
 */
#include <assert.h>
#include <stddef.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/geom.h"

/* Dims of a Q/K/V/O tensor in one of the plain formats. For THD, *b is -1
 * and *s is the token count. */
static fattn_status fmt_dims(const fattn_tensor *t, fattn_qkv_format f,
                             const char *name, int64_t *b, int64_t *s,
                             int64_t *h, int64_t *d)
{
    if (fattn_tensor_is_empty(t))
        return fattn_error(FATTN_E_INVALID_ARG, "%s is missing", name);
    int want = f == FATTN_FORMAT_THD ? 3 : 4;
    if (t->ndim != want)
        return fattn_error(FATTN_E_SHAPE, "%s has %d dims, format %s needs %d",
                           name, t->ndim, fattn_format_name(f), want);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] <= 0)
            return fattn_error(FATTN_E_SHAPE, "%s dim %d is %lld", name, i,
                               (long long)t->shape[i]);
    switch (f) {
    case FATTN_FORMAT_SBHD:
        *s = t->shape[0]; *b = t->shape[1]; *h = t->shape[2]; *d = t->shape[3];
        break;
    case FATTN_FORMAT_BSHD:
        *b = t->shape[0]; *s = t->shape[1]; *h = t->shape[2]; *d = t->shape[3];
        break;
    case FATTN_FORMAT_BHSD:
        *b = t->shape[0]; *h = t->shape[1]; *s = t->shape[2]; *d = t->shape[3];
        break;
    case FATTN_FORMAT_THD:
        *b = -1; *s = t->shape[0]; *h = t->shape[1]; *d = t->shape[2];
        break;
    default:
        return fattn_error(FATTN_E_LAYOUT, "%s: format %s is not a plain format",
                           name, fattn_format_name(f));
    }
    return FATTN_OK;
}

int64_t fattn__geom_row_offset(const fattn_tensor *t, fattn_qkv_format fmt,
                       const int32_t *off, int64_t bi, int64_t pos, int64_t n)
{
    const int64_t *st = t->strides;
    switch (fmt) {
    case FATTN_FORMAT_SBHD: return pos * st[0] + bi * st[1] + n * st[2];
    case FATTN_FORMAT_BSHD: return bi * st[0] + pos * st[1] + n * st[2];
    case FATTN_FORMAT_BHSD: return bi * st[0] + n * st[1] + pos * st[2];
    default: return ((int64_t)off[bi] + pos) * st[0] + n * st[1];
    }
}

void fattn__geom_stats_shape(const fattn_geom *g, int *ndim, int64_t shape[4])
{
    if (g->thd_stats) {
        *ndim = 3;
        shape[0] = g->t_q; shape[1] = g->h; shape[2] = 1;
    } else {
        *ndim = 4;
        shape[0] = g->b; shape[1] = g->h; shape[2] = g->sq; shape[3] = 1;
    }
}

int64_t fattn__geom_stats_offset(const fattn_geom *g, const fattn_tensor *stats,
                         int64_t bi, int64_t n, int64_t i)
{
    if (g->thd_stats)
        return ((int64_t)g->off_q[bi] + i) * stats->strides[0] + n * stats->strides[1];
    return bi * stats->strides[0] + n * stats->strides[1] + i * stats->strides[2];
}

/* ALiBi slopes as cuDNN's frontend computes them (cudnn_frontend_utils.h
 * get_alibi_slope; TE's get_alibi gives the same): n = 2^floor(log2 h); the
 * first n heads 2^(-8k/n), k = 1..n; the rest 2^(-4k/n), k = 1, 3, 5, ...
 * Computed with exp2 of exact small rationals; pow/exp2 of such arguments
 * are exact or correctly rounded in practice, and the slopes are stored in
 * float so any libm difference below float precision vanishes. */
static void alibi_slopes(int64_t h, float *out)
{
    int64_t n = 1;
    while (n * 2 <= h)
        n *= 2;
    for (int64_t k = 1; k <= n; k++)
        out[k - 1] = (float)exp2(-8.0 * (double)k / (double)n);
    for (int64_t e = 0; e < h - n; e++)
        out[n + e] = (float)exp2(-4.0 * (double)(2 * e + 1) / (double)n);
}

static fattn_status read_seqlens(const fattn_tensor *cu, const char *name,
                                 int64_t b, int64_t max_len, int32_t *len,
                                 const char *who)
{
    if (fattn_tensor_is_empty(cu))
        return fattn_error(FATTN_E_INVALID_ARG,
                           "%s: %s is required with a padding mask", who, name);
    if (cu->dtype != FATTN_DTYPE_INT32 || cu->ndim != 1 || cu->shape[0] != b + 1)
        return fattn_error(FATTN_E_SHAPE, "%s: %s must be int32 [%lld]", who, name,
                           (long long)(b + 1));
    const int32_t *c = cu->data;
    for (int64_t i = 0; i < b; i++) {
        int64_t l = (int64_t)c[(i + 1) * cu->strides[0]] - c[i * cu->strides[0]];
        if (l < 0 || l > max_len)
            return fattn_error(FATTN_E_SHAPE,
                               "%s: %s gives sequence %lld length %lld outside [0, %lld]",
                               who, name, (long long)i, (long long)l, (long long)max_len);
        len[i] = (int32_t)l;
    }
    return FATTN_OK;
}

/* THD token offsets: the padded array if given, else the plain one; every
 * sequence must fit inside its slot and the tensor. */
static fattn_status read_offsets(const fattn_tensor *cu, const fattn_tensor *cu_pad,
                                 const char *name, int64_t b, int64_t tokens,
                                 const int32_t *len, int32_t *off, const char *who)
{
    const fattn_tensor *src = fattn_tensor_is_empty(cu_pad) ? cu : cu_pad;
    if (src->dtype != FATTN_DTYPE_INT32 || src->ndim != 1 || src->shape[0] != b + 1)
        return fattn_error(FATTN_E_SHAPE, "%s: %s must be int32 [%lld]", who, name,
                           (long long)(b + 1));
    const int32_t *c = src->data;
    for (int64_t i = 0; i < b; i++) {
        int64_t start = c[i * src->strides[0]], next = c[(i + 1) * src->strides[0]];
        if (start < 0 || next < start || start + len[i] > next || next > tokens)
            return fattn_error(FATTN_E_SHAPE,
                               "%s: %s slot %lld [%lld, %lld) cannot hold %d tokens "
                               "inside %lld", who, name, (long long)i, (long long)start,
                               (long long)next, len[i], (long long)tokens);
        off[i] = (int32_t)start;
    }
    return FATTN_OK;
}

/* The header of g: everything but its inline tables. */
#define GEOM_HEADER offsetof(fattn_geom, inline_seq)

void fattn__geom_free(fattn_geom *g)
{
    if (g->len_q != g->inline_seq) { /* the four were allocated together or not at all */
        free(g->len_q);
        free(g->len_kv);
        free(g->off_q);
        free(g->off_kv);
    }
    if (g->sink != g->inline_h)
        free(g->sink);
    if (g->alibi_slopes != g->inline_h + FATTN_GEOM_INLINE_H)
        free(g->alibi_slopes);
    memset(g, 0, GEOM_HEADER);
}

/* n floats of head table `slot` (0 sink, 1 ALiBi slopes): inline when they
 * fit, else allocated; NULL when out of memory. */
static float *geom_head_table(fattn_geom *g, int slot, int64_t n)
{
    if (n <= FATTN_GEOM_INLINE_H)
        return g->inline_h + slot * FATTN_GEOM_INLINE_H;
    return malloc((size_t)n * sizeof(float));
}

static bool io_dtype_ok(fattn_dtype t)
{
    return t == FATTN_DTYPE_FLOAT16 || t == FATTN_DTYPE_BFLOAT16 ||
           t == FATTN_DTYPE_FLOAT32;
}

/* An FP8 call: Q, K and V codes of one FP8 dtype (their descales come with
 * the call), O FP8 or float16/bfloat16 (TE's fp8_output on or off). */
static fattn_status geom_dtypes_fp8(fattn_geom *g, const fattn_geom_args *a)
{
    const char *who = a->who;
    fattn_dtype io = a->q->dtype;
    if (io != FATTN_DTYPE_FLOAT8_E4M3FN && io != FATTN_DTYPE_FLOAT8_E5M2)
        return fattn_error(FATTN_E_DTYPE, "%s: an FP8 call needs FP8 Q, got %s", who,
                           fattn_dtype_name(io));
    const fattn_tensor *same[] = {a->k, a->v};
    const char *names[] = {"K", "V"};
    for (int i = 0; i < 2; i++)
        if (!fattn_tensor_is_empty(same[i]) && same[i]->dtype != io)
            return fattn_error(FATTN_E_DTYPE, "%s: FP8 %s is %s but Q is %s", who, names[i],
                               fattn_dtype_name(same[i]->dtype), fattn_dtype_name(io));
    fattn_dtype od = a->o->dtype;
    if (!fattn_tensor_is_empty(a->o) && od != FATTN_DTYPE_FLOAT8_E4M3FN &&
        od != FATTN_DTYPE_FLOAT8_E5M2 && od != FATTN_DTYPE_FLOAT16 && od != FATTN_DTYPE_BFLOAT16)
        return fattn_error(FATTN_E_DTYPE, "%s: FP8 attention's O must be FP8, float16 or "
                           "bfloat16, got %s", who, fattn_dtype_name(od));
    g->io = io;
    return FATTN_OK;
}

/* Layout, formats and the io dtype. */
static fattn_status geom_dtypes(fattn_geom *g, const fattn_geom_args *a)
{
    const char *who = a->who;
    if (a->layout < 0 || a->layout >= FATTN_LAYOUT_NOT_SET)
        return fattn_error(FATTN_E_LAYOUT, "%s: QKV layout not set", who);
    g->paged = fattn_layout_is_paged(a->layout);
    g->q_fmt = fattn_layout_q_format(a->layout);
    g->kv_fmt = fattn_layout_kv_format(a->layout);
    if (a->o_format != g->q_fmt)
        return fattn_error(FATTN_E_LAYOUT, "%s: o_format %s differs from Q's format %s",
                           who, fattn_format_name(a->o_format), fattn_format_name(g->q_fmt));

    fattn_dtype io = a->q->dtype;
    if (a->fp8)
        return geom_dtypes_fp8(g, a);
    /* FP8 codes without their descales are the support table's row
     * fp8_descales_engines, refused by the dispatch before the geometry:
     * here they are only a dtype that is not an F16 path's. */
    if (!io_dtype_ok(io))
        return fattn_error(FATTN_E_DTYPE, "%s: Q dtype %s is not float16/bfloat16/float32",
                           who, fattn_dtype_name(io));
    const fattn_tensor *same[] = {a->k, a->v, a->o};
    const char *names[] = {"K", "V", "O"};
    for (int i = 0; i < 3; i++)
        if (!fattn_tensor_is_empty(same[i]) && same[i]->dtype != io)
            return fattn_error(FATTN_E_DTYPE, "%s: %s is %s but Q is %s", who, names[i],
                               fattn_dtype_name(same[i]->dtype), fattn_dtype_name(io));
    g->io = io;
    return FATTN_OK;
}

static fattn_status geom_set_dims(fattn_geom *g, const fattn_geom_args *a, int64_t b,
                                  int64_t sq, int64_t mskv, int64_t h, int64_t d, int64_t dv,
                                  int64_t hg);
static fattn_status geom_paged_dims(fattn_geom *g, const fattn_geom_args *a, int64_t b,
                                    int64_t sq, int64_t h, int64_t d, int64_t dv, int64_t hg,
                                    int64_t pages_k, int64_t page_k, int64_t pages_v,
                                    int64_t page_v);

/* Q/K/V/O shapes, the batch and the padded lengths. */
static fattn_status geom_dims(fattn_geom *g, const fattn_geom_args *a)
{
    const char *who = a->who;
    int64_t bq, sq, h, d, bk, skv, hg, dk, bv, sv, hv, dv, bo, s_o, ho, dvo;
    fattn_status st;
    if ((st = fmt_dims(a->q, g->q_fmt, "Q", &bq, &sq, &h, &d)) != FATTN_OK ||
        (st = fmt_dims(a->k, g->kv_fmt, "K", &bk, &skv, &hg, &dk)) != FATTN_OK ||
        (st = fmt_dims(a->v, g->kv_fmt, "V", &bv, &sv, &hv, &dv)) != FATTN_OK ||
        (st = fmt_dims(a->o, g->q_fmt, "O", &bo, &s_o, &ho, &dvo)) != FATTN_OK)
        return st;
    if (dk != d)
        return fattn_error(FATTN_E_SHAPE, "%s: K head dim %lld != Q head dim %lld", who,
                           (long long)dk, (long long)d);
    if (hv != hg || (!g->paged && (bv != bk || sv != skv)))
        return fattn_error(FATTN_E_SHAPE, "%s: V's batch/length/heads differ from K's", who);
    if (ho != h || bo != bq || s_o != sq || dvo != dv)
        return fattn_error(FATTN_E_SHAPE, "%s: O shape does not match Q with V's head dim",
                           who);
    if (h % hg != 0)
        return fattn_error(FATTN_E_SHAPE, "%s: %lld query heads not divisible by %lld kv heads",
                           who, (long long)h, (long long)hg);

    int64_t b;
    if (g->q_fmt == FATTN_FORMAT_THD) {
        if (fattn_tensor_is_empty(a->cu_q) || a->cu_q->ndim != 1 || a->cu_q->shape[0] < 2)
            return fattn_error(FATTN_E_SHAPE, "%s: THD Q needs cu_seqlens_q [b+1]", who);
        b = a->cu_q->shape[0] - 1;
    } else {
        b = bq;
    }
    if (g->paged)
        return geom_paged_dims(g, a, b, sq, h, d, dv, hg, bk, skv, bv, sv);
    if (g->kv_fmt != FATTN_FORMAT_THD && bk != b)
        return fattn_error(FATTN_E_SHAPE, "%s: K batch %lld != Q batch %lld", who,
                           (long long)bk, (long long)b);
    if (g->kv_fmt == FATTN_FORMAT_THD &&
        (fattn_tensor_is_empty(a->cu_kv) || a->cu_kv->ndim != 1 || a->cu_kv->shape[0] != b + 1))
        return fattn_error(FATTN_E_SHAPE, "%s: THD K/V need cu_seqlens_kv [%lld]", who,
                           (long long)(b + 1));

    if (g->kv_fmt != FATTN_FORMAT_THD && a->max_seqlen_kv != skv)
        return fattn_error(FATTN_E_SHAPE, "%s: max_seqlen_kv %lld != K's length %lld", who,
                           (long long)a->max_seqlen_kv, (long long)skv);
    int64_t mskv = g->kv_fmt == FATTN_FORMAT_THD ? a->max_seqlen_kv : skv;
    return geom_set_dims(g, a, b, sq, mskv, h, d, dv, hg);
}

/* The padded lengths and sizes, once K/V's own are known: mskv is
 * max_seqlen_kv as the layout defines it. */
static fattn_status geom_set_dims(fattn_geom *g, const fattn_geom_args *a, int64_t b,
                                  int64_t sq, int64_t mskv, int64_t h, int64_t d, int64_t dv,
                                  int64_t hg)
{
    const char *who = a->who;
    /* Padded lengths: the tensor's own for sbhd/bshd/bhsd (TE recomputes
     * max_seqlen from the shape there), max_seqlen for THD. */
    int64_t msq = g->q_fmt == FATTN_FORMAT_THD ? a->max_seqlen_q : sq;
    if (g->q_fmt != FATTN_FORMAT_THD && a->max_seqlen_q != sq)
        return fattn_error(FATTN_E_SHAPE, "%s: max_seqlen_q %lld != Q's length %lld", who,
                           (long long)a->max_seqlen_q, (long long)sq);
    if (msq <= 0 || mskv <= 0)
        return fattn_error(FATTN_E_SHAPE, "%s: max_seqlen must be positive", who);
    /* Lengths are int32 (cu_seqlens, the length tables below), and the
     * per-row tables [b, h, max_seqlen] (Stats, Dsum) must be countable. */
    int64_t rows;
    if (msq > INT32_MAX || mskv > INT32_MAX)
        return fattn_error(FATTN_E_SHAPE, "%s: max_seqlen (%lld, %lld) exceeds int32", who,
                           (long long)msq, (long long)mskv);
    if (!fattn_mul_i64(b, h, &rows) || !fattn_mul_i64(rows, msq > mskv ? msq : mskv, &rows))
        return fattn_error(FATTN_E_OVERFLOW, "%s: [b=%lld, h=%lld, max_seqlen=%lld] overflows",
                           who, (long long)b, (long long)h, (long long)(msq > mskv ? msq : mskv));

    g->b = b; g->h = h; g->hg = hg; g->group = h / hg;
    g->sq = msq; g->skv = mskv; g->d = d; g->dv = dv;
    g->q = *a->q; g->k = *a->k; g->v = *a->v; g->o = *a->o;
    g->t_q = g->q_fmt == FATTN_FORMAT_THD ? sq : 0;
    g->thd_stats = g->q_fmt == FATTN_FORMAT_THD;
    return FATTN_OK;
}

/* A page table: int32 [>= b, pages_per_seq] with pages_per_seq =
 * ceil(max_seqlen_kv / page): TE takes pages_per_seq from the table's shape
 * (fused_attn.cpp) and cuDNN's paged cache load accepts no other count.
 * Rows past b are allowed and never read: TE's InferenceParams keeps a
 * table of max_batch_size rows (inference.py:632-635) and FusedAttention
 * hands it on whole (backends.py 2.20.2:2486-2487), cuDNN reading the
 * first b. Its entries are checked against the lengths in geom_pages. */
static fattn_status page_table_dims(const fattn_tensor *pt, const char *name, int64_t b,
                                    int64_t page, int64_t mskv, const char *who)
{
    if (!pt || fattn_tensor_is_empty(pt))
        return fattn_error(FATTN_E_INVALID_ARG, "%s: a paged KV layout needs %s", who, name);
    if (pt->dtype != FATTN_DTYPE_INT32 || pt->ndim != 2 || pt->shape[0] < b ||
        pt->shape[1] < 1)
        return fattn_error(FATTN_E_SHAPE, "%s: %s must be int32 [>= %lld, pages_per_seq]", who,
                           name, (long long)b);
    if (mskv <= 0 || pt->shape[1] != (mskv + page - 1) / page)
        return fattn_error(FATTN_E_SHAPE, "%s: %s has %lld pages per sequence, "
                           "max_seqlen_kv %lld in pages of %lld needs %lld", who, name,
                           (long long)pt->shape[1], (long long)mskv, (long long)page,
                           mskv > 0 ? (long long)((mskv + page - 1) / page) : 0LL);
    return FATTN_OK;
}

/* Paged K/V (TE's fused_attn.cpp reads the containers' shapes so: bshd
 * [num_pages, page_size, hg, d], sbhd [page_size, num_pages, hg, d]): the
 * batch comes from Q, max_seqlen_kv is the call's, each cache has its own
 * page size, number of pages and table. fmt_dims read a bshd container's
 * pages as its batch and its page size as its length, and the same of an
 * sbhd one. */
static fattn_status geom_paged_dims(fattn_geom *g, const fattn_geom_args *a, int64_t b,
                                    int64_t sq, int64_t h, int64_t d, int64_t dv, int64_t hg,
                                    int64_t pages_k, int64_t page_k, int64_t pages_v,
                                    int64_t page_v)
{
    const char *who = a->who;
    (void)pages_k, (void)pages_v; /* checked against the tables' entries in geom_pages */
    if (g->kv_fmt != FATTN_FORMAT_BSHD && g->kv_fmt != FATTN_FORMAT_SBHD)
        return fattn_error(FATTN_E_LAYOUT, "%s: paged K/V must be bshd or sbhd, got %s", who,
                           fattn_format_name(g->kv_fmt));
    int64_t mskv = a->max_seqlen_kv;
    fattn_status st;
    if ((st = page_table_dims(a->page_table_k, "page_table_k", b, page_k, mskv, who)) != FATTN_OK ||
        (st = page_table_dims(a->page_table_v, "page_table_v", b, page_v, mskv, who)) != FATTN_OK)
        return st;
    g->pt_k = *a->page_table_k;
    g->pt_v = *a->page_table_v;
    g->page_k = page_k;
    g->page_v = page_v;
    return geom_set_dims(g, a, b, sq, mskv, h, d, dv, hg);
}

/* Every table entry a sequence's length reaches names a page of its
 * container; the entries past it are never read (TE leaves zeros there). */
static fattn_status geom_pages(const fattn_geom *g, const fattn_tensor *pt,
                               const fattn_tensor *cache, int64_t page, const char *name,
                               const char *who)
{
    int64_t pages = g->kv_fmt == FATTN_FORMAT_BSHD ? cache->shape[0] : cache->shape[1];
    const int32_t *t = pt->data;
    for (int64_t bi = 0; bi < g->b; bi++) {
        int64_t used = ((int64_t)g->len_kv[bi] + page - 1) / page;
        for (int64_t j = 0; j < used; j++) {
            int32_t e = t[bi * pt->strides[0] + j * pt->strides[1]];
            if (e < 0 || e >= pages)
                return fattn_error(FATTN_E_SHAPE, "%s: %s[%lld][%lld] = %d is not a page of "
                                   "the %lld-page cache", who, name, (long long)bi,
                                   (long long)j, e, (long long)pages);
        }
    }
    return FATTN_OK;
}

static int64_t paged_offset(const fattn_geom *g, const fattn_tensor *t, const fattn_tensor *pt,
                            int64_t page, int64_t bi, int64_t pos, int64_t n)
{
    const int32_t *tab = pt->data;
    int64_t pg = tab[bi * pt->strides[0] + (pos / page) * pt->strides[1]];
    int64_t row = pos % page;
    const int64_t *st = t->strides;
    if (g->kv_fmt == FATTN_FORMAT_BSHD)
        return pg * st[0] + row * st[1] + n * st[2];
    return row * st[0] + pg * st[1] + n * st[2];
}

int64_t fattn__geom_k_offset(const fattn_geom *g, int64_t bi, int64_t pos, int64_t n)
{
    if (g->paged)
        return paged_offset(g, &g->k, &g->pt_k, g->page_k, bi, pos, n);
    return fattn__geom_row_offset(&g->k, g->kv_fmt, g->off_kv, bi, pos, n);
}

int64_t fattn__geom_v_offset(const fattn_geom *g, int64_t bi, int64_t pos, int64_t n)
{
    if (g->paged)
        return paged_offset(g, &g->v, &g->pt_v, g->page_v, bi, pos, n);
    return fattn__geom_row_offset(&g->v, g->kv_fmt, g->off_kv, bi, pos, n);
}

/* Per-batch lengths and THD token offsets. */
static fattn_status geom_seqlens(fattn_geom *g, const fattn_geom_args *a)
{
    const char *who = a->who;
    int64_t b = g->b, msq = g->sq, mskv = g->skv;
    fattn_status st;
    if (b <= FATTN_GEOM_INLINE_B) {
        int32_t *t = g->inline_seq;
        memset(t, 0, 4 * (size_t)b * sizeof *t);
        g->len_q = t, g->len_kv = t + b, g->off_q = t + 2 * b, g->off_kv = t + 3 * b;
    } else {
        g->len_q = calloc((size_t)b, sizeof(int32_t));
        g->len_kv = calloc((size_t)b, sizeof(int32_t));
        g->off_q = calloc((size_t)b, sizeof(int32_t));
        g->off_kv = calloc((size_t)b, sizeof(int32_t));
    }
    if (!g->len_q || !g->len_kv || !g->off_q || !g->off_kv)
        return fattn_error(FATTN_E_NOMEM, "%s: cannot allocate sequence tables", who);

    bool padding = fattn_mask_has_padding(a->mask_type);
    bool thd = g->q_fmt == FATTN_FORMAT_THD || g->kv_fmt == FATTN_FORMAT_THD;
    if (thd && !padding)
        return fattn_error(FATTN_E_INVALID_CASE, "%s: THD layouts need a padding mask, got %s",
                           who, fattn_mask_type_name(a->mask_type));
    /* A paged cache's lengths are its sequences' (cu_seqlens_kv): without
     * them nothing says how much of each table to read. */
    if (g->paged && !padding)
        return fattn_error(FATTN_E_INVALID_CASE, "%s: paged KV layouts need a padding mask, "
                           "got %s", who, fattn_mask_type_name(a->mask_type));
    if (padding) {
        if ((st = read_seqlens(a->cu_q, "cu_seqlens_q", b, msq, g->len_q, who)) != FATTN_OK ||
            (st = read_seqlens(a->cu_kv, "cu_seqlens_kv", b, mskv, g->len_kv, who)) != FATTN_OK)
            return st;
    } else {
        for (int64_t i = 0; i < b; i++) {
            g->len_q[i] = (int32_t)msq;
            g->len_kv[i] = (int32_t)mskv;
        }
    }
    if (g->q_fmt == FATTN_FORMAT_THD &&
        (st = read_offsets(a->cu_q, a->cu_q_pad, "cu_seqlens_q_padded", b, g->q.shape[0], g->len_q,
                           g->off_q, who)) != FATTN_OK)
        return st;
    if (g->kv_fmt == FATTN_FORMAT_THD &&
        (st = read_offsets(a->cu_kv, a->cu_kv_pad, "cu_seqlens_kv_padded", b, g->k.shape[0],
                           g->len_kv,
                           g->off_kv, who)) != FATTN_OK)
        return st;
    if (g->paged &&
        ((st = geom_pages(g, &g->pt_k, &g->k, g->page_k, "page_table_k", who)) != FATTN_OK ||
         (st = geom_pages(g, &g->pt_v, &g->v, g->page_v, "page_table_v", who)) != FATTN_OK))
        return st;
    return FATTN_OK;
}

/* The bias tensor or ALiBi slopes. */
static fattn_status geom_bias(fattn_geom *g, const fattn_geom_args *a)
{
    const char *who = a->who;
    int64_t b = g->b, h = g->h, msq = g->sq, mskv = g->skv;
    fattn_dtype io = g->io;
    g->bias = fattn_tensor_empty();
    /* A bias tensor's shape, pre- or post-scale alike: that no engine runs
     * pre_scale_bias is the support table's (row pre_scale_bias_engines,
     * refused by the dispatch before the geometry). */
    if (a->bias_type == FATTN_BIAS_PRE_SCALE_BIAS || a->bias_type == FATTN_BIAS_POST_SCALE_BIAS) {
        const fattn_tensor *bt = a->bias;
        if (!bt || fattn_tensor_is_empty(bt))
            return fattn_error(FATTN_E_INVALID_ARG, "%s: %s without a bias tensor", who,
                               fattn_bias_type_name(a->bias_type));
        if (bt->dtype != io)
            return fattn_error(FATTN_E_DTYPE, "%s: bias is %s but Q is %s", who,
                               fattn_dtype_name(bt->dtype), fattn_dtype_name(io));
        if (bt->ndim != 4 || (bt->shape[0] != 1 && bt->shape[0] != b) ||
            (bt->shape[1] != 1 && bt->shape[1] != h) ||
            (bt->shape[2] != 1 && bt->shape[2] != msq) || bt->shape[3] != mskv)
            return fattn_error(FATTN_E_SHAPE, "%s: bias must be [1|%lld, 1|%lld, 1|%lld, %lld]",
                               who, (long long)b, (long long)h, (long long)msq,
                               (long long)mskv);
        g->bias = *bt;
    } else if (a->bias_type != FATTN_BIAS_NO_BIAS && a->bias_type != FATTN_BIAS_ALIBI) {
        return fattn_error(FATTN_E_INVALID_ARG, "%s: unknown bias type %d", who,
                           (int)a->bias_type);
    }
    g->alibi = a->bias_type == FATTN_BIAS_ALIBI;
    if (g->alibi) {
        g->alibi_slopes = geom_head_table(g, 1, h);
        if (!g->alibi_slopes)
            return fattn_error(FATTN_E_NOMEM, "%s: alibi slopes", who);
        alibi_slopes(h, g->alibi_slopes);
    }
    return FATTN_OK;
}

/* The softmax offset (sink), dropout, scale and window. */
static fattn_status geom_scalars(fattn_geom *g, const fattn_geom_args *a)
{
    const char *who = a->who;
    int64_t h = g->h;
    if (a->softmax_type != FATTN_SOFTMAX_VANILLA) {
        const fattn_tensor *so = a->softmax_offset;
        if (a->softmax_type != FATTN_SOFTMAX_OFF_BY_ONE &&
            a->softmax_type != FATTN_SOFTMAX_LEARNABLE)
            return fattn_error(FATTN_E_INVALID_ARG, "%s: unknown softmax type %d", who,
                               (int)a->softmax_type);
        if (!so || fattn_tensor_is_empty(so) || so->dtype != FATTN_DTYPE_FLOAT32 ||
            so->ndim != 4 || so->shape[0] != 1 || so->shape[1] != h || so->shape[2] != 1 ||
            so->shape[3] != 1)
            return fattn_error(FATTN_E_SHAPE, "%s: %s softmax needs a float32 [1,%lld,1,1] "
                               "softmax_offset", who, fattn_softmax_type_name(a->softmax_type),
                               (long long)h);
        g->sink = geom_head_table(g, 0, h);
        if (!g->sink)
            return fattn_error(FATTN_E_NOMEM, "%s: sink", who);
        const float *z = so->data;
        for (int64_t n = 0; n < h; n++)
            g->sink[n] = z[n * so->strides[1]];
    }

    /* dropout */
    if (!(a->dropout >= 0.0f && a->dropout < 1.0f))
        return fattn_error(FATTN_E_INVALID_ARG, "%s: dropout %g outside [0, 1)", who,
                           (double)a->dropout);
    g->dropout = a->apply_dropout ? a->dropout : 0.0f;
    if (g->dropout > 0.0f) {
        const fattn_tensor *rs = a->rng_state;
        if (!rs || fattn_tensor_is_empty(rs) || rs->dtype != FATTN_DTYPE_INT64 ||
            rs->ndim != 1 || rs->shape[0] != 2)
            return fattn_error(FATTN_E_SHAPE, "%s: dropout needs an int64 [2] rng_state", who);
        const int64_t *r = rs->data;
        g->rng_seed = (uint64_t)r[0];
        g->rng_offset = (uint64_t)r[rs->strides[0]];
    }

    if (!isfinite(a->attn_scale))
        return fattn_error(FATTN_E_INVALID_ARG, "%s: attn_scale is not finite", who);
    g->scale = a->attn_scale;
    if (a->win_left < -1 || a->win_right < -1)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: window (%lld, %lld) below -1", who,
                           (long long)a->win_left, (long long)a->win_right);
    g->win_left = a->win_left;
    /* causality from the mask type, as TE's C++ applies it whatever the
     * window (fattn_mask_band_right): what both engines run */
    g->win_right = fattn_mask_band_right(a->mask_type, a->fp8, a->win_right);
    g->bottom_right = a->bottom_right;
    return FATTN_OK;
}

fattn_status fattn__geom_init(fattn_geom *g, const fattn_geom_args *a)
{
    memset(g, 0, GEOM_HEADER);
    assert(a && a->who);
    fattn_status st;
    if ((st = geom_dtypes(g, a)) != FATTN_OK || (st = geom_dims(g, a)) != FATTN_OK ||
        (st = geom_seqlens(g, a)) != FATTN_OK || (st = geom_bias(g, a)) != FATTN_OK ||
        (st = geom_scalars(g, a)) != FATTN_OK)
        fattn__geom_free(g);
    return st;
}
