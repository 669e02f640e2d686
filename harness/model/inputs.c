/* Case inputs from a resolved case (case.h; inputs.h has the value rules). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/fp8.h"
#include "fattn/kv_cache.h"
#include "fattn/philox.h"
#include "fattn/te.h"

#include "inputs.h"
#include "schedule.h"

enum {
    STREAM_Q = 1,
    STREAM_K = 2,
    STREAM_V = 3,
    STREAM_BIAS = 4,
    STREAM_OFFSET = 5,
    STREAM_DO = 6, /* 7..10: the sequence tables (case.c) */
    STREAM_PT_K = 11,
    STREAM_PT_V = 12,
};

#define PAGE_POISON 1024.0f

static fattn_status alloc_i32(fattn_tensor *t, int64_t n, const int64_t *vals)
{
    fattn_status st = fattn_tensor_alloc(t, FATTN_DTYPE_INT32, 1, &n);
    if (st != FATTN_OK)
        return st;
    for (int64_t i = 0; i < n; i++)
        ((int32_t *)t->data)[i] = (int32_t)vals[i];
    return FATTN_OK;
}

fattn_status fh_inputs_alloc_qkv(const fh_case *c, fattn_dtype dt, fattn_tensor storage[3],
                                    fattn_tensor *q, fattn_tensor *k, fattn_tensor *v)
{
    const fh_case_shape *qs = &c->t.q, *ks = &c->t.k, *vs = &c->t.v;
    fattn_qkv_layout_group g = c->layout_group;
    assert(qs->present && ks->present && vs->present);
    for (int i = 0; i < 3; i++)
        storage[i] = fattn_tensor_empty();
    fattn_tensor views[3];
    fattn_status st;
    if (g == FATTN_LAYOUT_GROUP_3HD || g == FATTN_LAYOUT_GROUP_H3D) {
        /* One buffer of q's shape three times (the spec has sq == skv,
         * h == hg, d_qk == d_v for these layouts). */
        st = fattn_tensor_alloc_packed(&storage[0], dt, qs->ndim, qs->shape, 3,
                          g == FATTN_LAYOUT_GROUP_3HD ? qs->ndim - 2 : qs->ndim - 1, views);
        if (st != FATTN_OK)
            return st;
        *q = views[0];
        *k = views[1];
        *v = views[2];
        return FATTN_OK;
    }
    st = fattn_tensor_alloc_packed(&storage[0], dt, qs->ndim, qs->shape, 1, 0, views);
    if (st != FATTN_OK)
        return st;
    *q = views[0];
    if (g == FATTN_LAYOUT_GROUP_HD_2HD || g == FATTN_LAYOUT_GROUP_HD_H2D) {
        st = fattn_tensor_alloc_packed(&storage[1], dt, ks->ndim, ks->shape, 2,
                          g == FATTN_LAYOUT_GROUP_HD_2HD ? ks->ndim - 2 : ks->ndim - 1, views);
        if (st != FATTN_OK)
            goto out;
        *k = views[0];
        *v = views[1];
    } else {
        st = fattn_tensor_alloc_packed(&storage[1], dt, ks->ndim, ks->shape, 1, 0, views);
        if (st != FATTN_OK)
            goto out;
        *k = views[0];
        st = fattn_tensor_alloc_packed(&storage[2], dt, vs->ndim, vs->shape, 1, 0, views);
        if (st != FATTN_OK)
            goto out;
        *v = views[0];
    }
out:
    if (st != FATTN_OK) {
        for (int i = 0; i < 3; i++)
            fattn_tensor_free(&storage[i]);
    }
    return st;
}

void fh_inputs_free(fh_case_inputs *in)
{
    for (int i = 0; i < 3; i++) {
        fattn_tensor_free(&in->storage[i]);
        fattn_tensor_free(&in->storage_fp8[i]);
    }
    fattn_tensor *own[] = {&in->attn_bias, &in->softmax_offset, &in->cu_seqlens_q,
                           &in->cu_seqlens_kv, &in->cu_seqlens_q_padded,
                           &in->cu_seqlens_kv_padded, &in->d_out, &in->page_table_k,
                           &in->page_table_v};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        fattn_tensor_free(own[i]);
    memset(in, 0, sizeof *in);
}

static fattn_status alloc_seqlens(const fh_case *c, fh_case_inputs *in)
{
    int64_t n = c->spec->b + 1;
    fattn_status st;
    /* FusedAttention passes cu_seqlens always and sets the padded ones to
     * the plain ones for a padding mask or THD when the caller gives none;
     * THD gaps make them differ. */
    if ((st = alloc_i32(&in->cu_seqlens_q, n, c->cu_seqlens_q)) != FATTN_OK ||
        (st = alloc_i32(&in->cu_seqlens_kv, n, c->cu_seqlens_kv)) != FATTN_OK)
        return st;
    if (c->padding &&
        ((st = alloc_i32(&in->cu_seqlens_q_padded, n, c->cu_seqlens_q_padded)) != FATTN_OK ||
         (st = alloc_i32(&in->cu_seqlens_kv_padded, n, c->cu_seqlens_kv_padded)) != FATTN_OK))
        return st;
    return FATTN_OK;
}

static fattn_status alloc_shape(fattn_tensor *t, const fh_case_shape *s)
{
    assert(s->present);
    return fattn_tensor_alloc(t, s->dtype, s->ndim, s->shape);
}

/* dst = the saturating FP8 cast of src * scale (what TE's quantizers and
 * cuDNN write), element for element in logical C order. */
static void quantize_into(const fattn_tensor *src, fattn_tensor *dst, float scale)
{
    int64_t n = fattn_tensor_numel(src), idx[FATTN_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; e++) {
        float x = fattn_load_f32(src->data, src->dtype, fattn_tensor_offset(src, idx));
        ((uint8_t *)dst->data)[fattn_tensor_offset(dst, idx)] =
            fattn_fp8_quantize(dst->dtype, x, scale);
        for (int d = src->ndim - 1; d >= 0 && ++idx[d] == src->shape[d]; d--)
            idx[d] = 0;
    }
}

/* The case's q, k, v (and d_out, where MHA hands an FP8 one) as the
 * Float8Tensors inputs.h describes; the nominal ones are dropped. */
static fattn_status inputs_to_fp8(const fh_case *c, fh_case_inputs *in)
{
    fattn_tensor q8, k8, v8;
    fattn_status st = fh_inputs_alloc_qkv(c, FATTN_DTYPE_FLOAT8_E4M3FN, in->storage_fp8, &q8,
                                             &k8, &v8);
    if (st != FATTN_OK)
        return st;
    float sq = 32.0f, sk = 64.0f, sv = 16.0f;
    if (c->layout_group == FATTN_LAYOUT_GROUP_3HD || c->layout_group == FATTN_LAYOUT_GROUP_H3D)
        sk = sv = sq;
    else if (c->layout_group != FATTN_LAYOUT_GROUP_HD_HD_HD)
        sv = sk;
    quantize_into(&in->q, &q8, sq);
    quantize_into(&in->k, &k8, sk);
    quantize_into(&in->v, &v8, sv);
    in->q = q8, in->k = k8, in->v = v8;
    in->q_scale_inv = 1.0f / sq, in->k_scale_inv = 1.0f / sk, in->v_scale_inv = 1.0f / sv;
    for (int i = 0; i < 3; i++)
        fattn_tensor_free(&in->storage[i]);
    if (!c->fp8_d_out)
        return FATTN_OK;
    fattn_tensor d8;
    st = fattn_tensor_alloc(&d8, FATTN_DTYPE_FLOAT8_E5M2, in->d_out.ndim, in->d_out.shape);
    if (st != FATTN_OK)
        return st;
    quantize_into(&in->d_out, &d8, 32.0f);
    fattn_tensor_free(&in->d_out);
    in->d_out = d8;
    in->d_out_scale_inv = 1.0f / 32.0f;
    return FATTN_OK;
}

/* A shuffle of 0..n-1 (Fisher-Yates over Philox words of `stream`), never
 * the identity for n > 1: a table read as the identity must show. */
static void page_shuffle(int64_t n, uint64_t seed, uint64_t stream, int32_t *perm)
{
    for (int64_t i = 0; i < n; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(fattn_philox_u32(seed, stream, (uint64_t)i) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    bool identity = true;
    for (int64_t i = 0; i < n && identity; i++)
        identity = perm[i] == i;
    if (identity && n > 1) {
        perm[0] = 1;
        perm[1] = 0;
    }
}

/* The page table of `stream` ([b, pps] from a shuffle of the cache's pages)
 * and the container of shape cs holding flat's rows where it says. */
static fattn_status page_one(const fh_case *c, const fattn_tensor *flat,
                             const fh_case_shape *cs, uint64_t stream, fattn_tensor *table,
                             fattn_tensor *cont)
{
    const fh_spec *s = c->spec;
    int64_t b = s->b, pps = s->skv / s->page_size, page = s->page_size;
    fattn_status st;
    if ((st = alloc_shape(table, &c->t.page_table_k)) != FATTN_OK ||
        (st = alloc_shape(cont, cs)) != FATTN_OK)
        return st;
    int32_t *perm = malloc((size_t)s->num_pages * sizeof *perm), *tab = table->data;
    if (!perm)
        return fattn_error(FATTN_E_NOMEM, "case %s: page table", s->id);
    page_shuffle(s->num_pages, (uint64_t)s->seed, stream, perm);
    memcpy(tab, perm, (size_t)(b * pps) * sizeof *tab);
    free(perm);
    int64_t n = fattn_tensor_numel(cont), w = cs->shape[3], hg = cs->shape[2];
    for (int64_t e = 0; e < n; e++)
        fattn_store_f32(cont->data, cont->dtype, e, PAGE_POISON);
    size_t es = fattn_dtype_size(cont->dtype);
    bool bshd = c->kv_format == FATTN_FORMAT_BSHD;
    const int64_t *fs = flat->strides, *ks = cont->strides;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t j = 0; j < c->seqlens_kv[bi]; j++) {
            int64_t pg = tab[bi * pps + j / page], row = j % page;
            for (int64_t h = 0; h < hg; h++) {
                int64_t src = (bshd ? bi * fs[0] + j * fs[1] : j * fs[0] + bi * fs[1]) + h * fs[2];
                int64_t dst = (bshd ? pg * ks[0] + row * ks[1] : row * ks[0] + pg * ks[1]) +
                              h * ks[2];
                memcpy((char *)cont->data + (size_t)dst * es,
                       (const char *)flat->data + (size_t)src * es, (size_t)w * es);
            }
        }
    return FATTN_OK;
}

/* ---- the cache as TE's InferenceParams makes it (max_batch_size) ---- */

/* The steps PagedKVCacheManager takes to hold the case's lengths (2.20.2
 * inference.py:746-771: a new sequence gets its step's tokens, a known one
 * one more): one prefill (seqlens_q = seqlens_kv), or a prefill of
 * seqlens_kv - 1 then a decode step of one token each (seqlens_q all 1).
 * first[i]: the prefill's tokens of sequence i. */
static fattn_status te_steps(const fh_case *c, int64_t *first, bool *decode)
{
    const fh_spec *s = c->spec;
    bool prefill = true, ones = true;
    for (int64_t i = 0; i < s->b; i++) {
        prefill = prefill && c->seqlens_q[i] == c->seqlens_kv[i];
        ones = ones && c->seqlens_q[i] == 1 && c->seqlens_kv[i] >= 1;
    }
    if (!prefill && !ones)
        return fattn_error(FATTN_E_INVALID_CASE, "case %s: max_batch_size: TE's cache manager "
                           "holds one prefill (seqlens_q = seqlens_kv) or a decode step after "
                           "one (seqlens_q all 1), not these lengths (inference.py:746-771)",
                           s->id);
    *decode = !prefill;
    for (int64_t i = 0; i < s->b; i++)
        first[i] = c->seqlens_kv[i] - (*decode ? 1 : 0);
    return FATTN_OK;
}

/* The page table [max_batch_size, pps] as the manager fills it after the
 * steps (fh_kv_plan_make, the cache managers' bookkeeping the schedules
 * use: pages from the free list in order, a decode step one more to a
 * sequence whose length fills its pages; every other entry 0). Sequence i
 * is id i (ids below FH_KV_MAX_SEQ_ID + 1, as TE's set order needs). */
static fattn_status te_page_table(const fh_case *c, const int64_t *first, bool decode,
                                  int32_t *tab)
{
    const fh_spec *s = c->spec;
    int64_t b = s->b, pps = s->skv / s->page_size;
    fh_step steps[2] = {{.kind = FH_STEP_KV, .n = b}, {.kind = FH_STEP_KV, .n = b}};
    int64_t *ids = calloc((size_t)(3 * b), sizeof *ids), *len0 = ids + b, *len1 = len0 + b;
    if (!ids)
        return fattn_error(FATTN_E_NOMEM, "case %s: cache steps", s->id);
    for (int64_t i = 0; i < b; i++)
        ids[i] = i, len0[i] = first[i], len1[i] = 1;
    steps[0].seq = steps[1].seq = ids;
    steps[0].len = len0, steps[1].len = len1;
    fh_schedule sched = {.n = decode ? 2 : 1, .steps = steps};
    fh_kv_plan plan;
    fattn_status st = fh_kv_plan_make(&sched, s->max_batch_size, s->skv, s->skv, true,
                                         s->page_size, false, &plan);
    if (st != FATTN_OK) {
        st = fattn_error(st, "case %s: max_batch_size: %s", s->id, fattn_last_error());
        goto out;
    }
    memcpy(tab, plan.steps[sched.n - 1].page_table,
           (size_t)(s->max_batch_size * pps) * sizeof *tab);
    fh_kv_plan_free(&plan);
out:
    free(ids);
    return st;
}

/* One step of `n[i]` tokens from position `from[i]` of each sequence of the
 * flat K or V ([b, skv, hg, d] bshd) as DPA hands them: [b, ctx, hg, d]. */
static fattn_status te_step_tokens(const fattn_tensor *flat, const int64_t *from, const int64_t *n,
                                   int64_t b, int64_t ctx, fattn_tensor *out)
{
    int64_t shape[4] = {b, ctx, flat->shape[2], flat->shape[3]};
    fattn_status st = fattn_tensor_alloc(out, flat->dtype, 4, shape);
    if (st != FATTN_OK)
        return st;
    size_t es = fattn_dtype_size(flat->dtype), row = (size_t)(shape[2] * shape[3]) * es;
    memset(out->data, 0, (size_t)(b * ctx) * row);
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < n[i]; j++)
            for (int64_t h = 0; h < shape[2]; h++) {
                int64_t idx[4] = {i, from[i] + j, h, 0}, dst[4] = {i, j, h, 0};
                memcpy((char *)out->data + (size_t)fattn_tensor_offset(out, dst) * es,
                       (const char *)flat->data + (size_t)fattn_tensor_offset(flat, idx) * es,
                       (size_t)shape[3] * es);
            }
    return FATTN_OK;
}

/* One step into the caches through the copy TE's step() makes
 * (fattn_kv_cache_copy = nvte_copy_to_kv_cache): new tokens n[i] from
 * position from[i], the lengths after it from[i] + n[i]. */
static fattn_status te_copy_step(const fh_case *c, const fh_case_inputs *in,
                                 fattn_tensor *kc, fattn_tensor *vc, const fattn_tensor *table,
                                 const int64_t *from, const int64_t *n)
{
    const fh_spec *s = c->spec;
    int64_t b = s->b, ctx = 1;
    int32_t *cn = calloc((size_t)(2 * (b + 1)), sizeof *cn), *cc = cn + b + 1;
    if (!cn)
        return fattn_error(FATTN_E_NOMEM, "case %s: cache step lengths", s->id);
    for (int64_t i = 0; i < b; i++) {
        ctx = n[i] > ctx ? n[i] : ctx;
        cn[i + 1] = cn[i] + (int32_t)n[i];
        cc[i + 1] = cc[i] + (int32_t)(from[i] + n[i]);
    }
    fattn_tensor nk = fattn_tensor_empty(), nv = fattn_tensor_empty();
    fattn_status st;
    if ((st = te_step_tokens(&in->k, from, n, b, ctx, &nk)) != FATTN_OK ||
        (st = te_step_tokens(&in->v, from, n, b, ctx, &nv)) != FATTN_OK)
        goto out;
    fattn_kv_cache_copy_args a = {
        .new_k = &nk, .new_v = &nv, .k_cache = kc, .v_cache = vc, .table = table->data,
        .table_rows = table->shape[0], .cu_new_lens = cn, .cu_cached_lens = cc,
        .format = FATTN_FORMAT_BSHD, .b = b, .max_ctx_len = ctx, .max_seq_len = s->skv,
        .max_pages_per_seq = table->shape[1], .reindex = false};
    st = fattn_kv_cache_copy(&a);
out:
    fattn_tensor_free(&nk);
    fattn_tensor_free(&nv);
    free(cn);
    return st;
}

/* K and V in caches of zeros (torch.zeros, inference.py:646-667), written
 * by the manager's steps; one table for both. */
static fattn_status page_kv_te(const fh_case *c, fh_case_inputs *in)
{
    const fh_spec *s = c->spec;
    int64_t *first = calloc((size_t)(3 * s->b), sizeof *first), *zero = first + s->b;
    int64_t *one = zero + s->b;
    if (!first)
        return fattn_error(FATTN_E_NOMEM, "case %s: cache steps", s->id);
    bool decode = false;
    fattn_tensor kc = fattn_tensor_empty(), vc = fattn_tensor_empty();
    fattn_status st;
    if ((st = te_steps(c, first, &decode)) != FATTN_OK ||
        (st = alloc_shape(&in->page_table_k, &c->t.page_table_k)) != FATTN_OK ||
        (st = alloc_shape(&in->page_table_v, &c->t.page_table_v)) != FATTN_OK ||
        (st = alloc_shape(&kc, &c->t.k)) != FATTN_OK ||
        (st = alloc_shape(&vc, &c->t.v)) != FATTN_OK ||
        (st = te_page_table(c, first, decode, in->page_table_k.data)) != FATTN_OK)
        goto out;
    memcpy(in->page_table_v.data, in->page_table_k.data,
           (size_t)fattn_tensor_numel(&in->page_table_k) * sizeof(int32_t));
    memset(kc.data, 0, (size_t)fattn_tensor_numel(&kc) * fattn_dtype_size(kc.dtype));
    memset(vc.data, 0, (size_t)fattn_tensor_numel(&vc) * fattn_dtype_size(vc.dtype));
    if ((st = te_copy_step(c, in, &kc, &vc, &in->page_table_k, zero, first)) != FATTN_OK)
        goto out;
    for (int64_t i = 0; i < s->b; i++)
        one[i] = 1;
    if (decode)
        st = te_copy_step(c, in, &kc, &vc, &in->page_table_k, first, one);
out:
    /* failed or not, the caches replace the flat K and V: in owns (and frees) them */
    free(first);
    fattn_tensor_free(&in->storage[1]);
    fattn_tensor_free(&in->storage[2]);
    in->storage[1] = kc, in->storage[2] = vc;
    in->k = kc, in->v = vc;
    return st;
}

/* A paged case's K and V: the flat ones (storage[1], storage[2]) scattered
 * into their containers, which replace them. */
static fattn_status page_kv(const fh_case *c, fh_case_inputs *in)
{
    if (c->spec->max_batch_size)
        return page_kv_te(c, in);
    fattn_tensor kc = fattn_tensor_empty(), vc = fattn_tensor_empty();
    fattn_status st = page_one(c, &in->k, &c->t.k, STREAM_PT_K, &in->page_table_k, &kc);
    if (st != FATTN_OK)
        goto out;
    st = page_one(c, &in->v, &c->t.v, c->spec->paged_separate_v ? STREAM_PT_V : STREAM_PT_K,
                  &in->page_table_v, &vc);
out:
    /* failed or not, the containers replace the flat K and V: in owns (and frees) them */
    fattn_tensor_free(&in->storage[1]);
    fattn_tensor_free(&in->storage[2]);
    in->storage[1] = kc, in->storage[2] = vc;
    in->k = kc, in->v = vc;
    return st;
}

fattn_status fh_inputs_make_from_case(const fh_case *c, fh_case_inputs *in)
{
    memset(in, 0, sizeof *in);
    const fh_spec *s = c->spec;
    assert(s);
    uint64_t seed = (uint64_t)s->seed;
    in->window[0] = c->window[0];
    in->window[1] = c->window[1];
    in->bottom_right_diagonal = c->bottom_right_diagonal;
    in->t_q = c->t_q;
    in->t_kv = c->t_kv;
    /* a paged case's K and V are made flat first, as its contiguous twin's */
    fh_case flat = *c;
    if (s->paged) {
        flat.t.k.ndim = fattn_format_shape(c->kv_format, s->b, s->skv, 0, s->hg, s->d_qk,
                                           flat.t.k.shape);
        flat.t.v.ndim = fattn_format_shape(c->kv_format, s->b, s->skv, 0, s->hg, s->d_v,
                                           flat.t.v.shape);
    }
    fattn_status st;
    if ((st = alloc_seqlens(c, in)) != FATTN_OK ||
        (st = fh_inputs_alloc_qkv(&flat, s->dtype, in->storage, &in->q, &in->k, &in->v)) !=
            FATTN_OK)
        goto out;
    assert(in->q.ndim == c->t.q.ndim && in->v.ndim == flat.t.v.ndim);
    fattn_philox_fill_tensor(&in->q, seed, STREAM_Q, 0.5f);
    fattn_philox_fill_tensor(&in->k, seed, STREAM_K, 0.5f);
    fattn_philox_fill_tensor(&in->v, seed, STREAM_V, 1.0f);
    if (s->paged && (st = page_kv(c, in)) != FATTN_OK)
        goto out;
    if (c->t.attn_bias.present) {
        if ((st = alloc_shape(&in->attn_bias, &c->t.attn_bias)) != FATTN_OK)
            goto out;
        fattn_philox_fill_tensor(&in->attn_bias, seed, STREAM_BIAS, 1.0f);
    }
    if (c->t.softmax_offset.present) {
        if ((st = alloc_shape(&in->softmax_offset, &c->t.softmax_offset)) != FATTN_OK)
            goto out;
        if (s->softmax == FATTN_SOFTMAX_LEARNABLE)
            fattn_philox_fill_tensor(&in->softmax_offset, seed, STREAM_OFFSET, 1.0f);
        else
            memset(in->softmax_offset.data, 0, sizeof(float) * (size_t)s->h);
    }
    if (c->t.d_out.present) {
        if ((st = alloc_shape(&in->d_out, &c->t.d_out)) != FATTN_OK)
            goto out;
        fattn_philox_fill_tensor(&in->d_out, seed, STREAM_DO, 0.1f);
    }
    if (c->fp8_inputs)
        st = inputs_to_fp8(c, in);
out:
    if (st != FATTN_OK)
        fh_inputs_free(in);
    return st;
}

fattn_status fh_inputs_make(const fh_spec *s, fh_case_inputs *in)
{
    memset(in, 0, sizeof *in);
    fh_case c;
    fattn_status st = fh_case_resolve(s, &c);
    if (st != FATTN_OK)
        return st;
    st = fh_inputs_make_from_case(&c, in);
    fh_case_free(&c);
    return st;
}
