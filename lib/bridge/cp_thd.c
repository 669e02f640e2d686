/* TE's THD context-parallel helpers on the host (fattn/cp_thd.h): each
 * function is one of context_parallel.cu's kernels (TE d0067d0) with its
 * launcher's checks, the grid's loops written out as plain loops (the
 * kernels' threads write disjoint elements, so the order is free). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/fmath.h"
#include "fattn/cp_thd.h"
#include "fattn/dtype.h"

/* ---- shared pieces ------------------------------------------------------ */

/* binary_search (context_parallel.cu:66-77): the sequence holding `target`
 * in an array of len sequence starts (the last one whose start is <=
 * target; empty sequences are passed over, as the kernel does). */
static int thd_bsearch(int64_t target, const int64_t *array, int len)
{
    int left = 1, right = len - 1;
    while (left < right) {
        int mid = (left + right) / 2;
        if (array[mid] <= target)
            left = mid + 1;
        else
            right = mid;
    }
    return left - 1;
}

/* A cu_seqlens tensor (int32 [b + 1], b >= 1) read into cu[] divided by
 * div; its entries must be non-decreasing, from 0. The caller frees *cu. */
static fattn_status load_cu(const fattn_tensor *t, const char *who, int64_t div, int64_t **cu,
                            int *batch)
{
    *cu = NULL;
    if (!t || !t->data || t->dtype != FATTN_DTYPE_INT32 || t->ndim != 1 || t->shape[0] < 2)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: cu_seqlens must be int32 [batch + 1] with "
                           "batch >= 1 (TE: cu_seqlens.scalar_type() == Int, dim() == 1, "
                           "size(0) >= 2)", who);
    int n = (int)t->shape[0];
    int64_t *c = malloc(sizeof *c * (size_t)n);
    if (!c)
        return fattn_error(FATTN_E_NOMEM, "%s: cu_seqlens", who);
    const int32_t *p = t->data;
    fattn_status st = FATTN_OK;
    for (int i = 0; i < n; i++) {
        c[i] = p[i] / div;
        if (p[i] < 0 || (i && p[i] < p[i - 1])) {
            st = fattn_error(FATTN_E_INVALID_ARG, "%s: cu_seqlens[%d] = %d is not a "
                             "non-decreasing offset", who, i, (int)p[i]);
            goto out;
        }
    }
    *cu = c;
    *batch = n - 1;
out:
    if (st != FATTN_OK)
        free(c);
    return st;
}

static bool is_data_dtype(fattn_dtype d)
{
    return d == FATTN_DTYPE_FLOAT16 || d == FATTN_DTYPE_BFLOAT16 || d == FATTN_DTYPE_FLOAT32;
}

static int64_t prod(const fattn_tensor *t, int from, int to)
{
    int64_t n = 1;
    for (int i = from; i < to; i++)
        n *= t->shape[i];
    return n;
}

/* log1p(x) for x in [0, 1] (exp of a non-positive difference) as
 * 2 atanh(x / (2 + x)) by its odd series in double, |s| <= 1/3 (26 terms:
 * truncation below 1e-26), rounded to float once: IEEE basic operations
 * only, so the same bits everywhere (CUDA's log1pf is not reproduced bit
 * for bit; within a float ulp of it). NaN in, NaN out. */
static float thd_log1pf(float xf)
{
    double x = (double)xf;
    if (x != x)
        return xf;
    double s = x / (2.0 + x), s2 = s * s, term = s, sum = 0.0;
    for (int k = 0; k < 26; k++) {
        sum += term / (double)(2 * k + 1);
        term *= s2;
    }
    return (float)(2.0 * sum);
}

/* ---- thd_partition_src_index and its two users --------------------------- */

/* context_parallel.cu:82-89: where token `token` of rank `rank` comes from
 * in the full buffer; cs = cu_seqlens / world. */
static int64_t src_index(int64_t token, const int64_t *cs, int batch, int world, int rank)
{
    int seq = thd_bsearch(token, cs, batch + 1);
    int64_t len = cs[seq + 1] - cs[seq], index = token - cs[seq];
    int64_t offset = index < len / 2 ? rank : (int64_t)(world - 1) * 2 - rank;
    return index + cs[seq] * world + len / 2 * offset;
}

fattn_status fattn_cp_thd_partitioned_indices(const fattn_tensor *cu_seqlens,
                                              int64_t total_tokens, int world, int rank,
                                              fattn_tensor *out)
{
    static const char who[] = "thd_get_partitioned_indices";
    if (!(world > 0 && rank >= 0 && rank < world && total_tokens > 0 &&
          total_tokens % (2 * (int64_t)world) == 0))
        return fattn_error(FATTN_E_INVALID_ARG, "%s: needs rank >= 0 && rank < world_size, "
                           "world_size > 0, total_tokens > 0 && total_tokens %% (world_size * "
                           "2) == 0 (rank %d, world %d, total %lld)", who, rank, world,
                           (long long)total_tokens);
    int64_t *cs;
    int batch;
    fattn_status st = load_cu(cu_seqlens, who, world, &cs, &batch);
    if (st != FATTN_OK)
        return st;
    const int32_t *raw = cu_seqlens->data;
    for (int i = 0; i <= batch; i++)
        if (raw[i] % (2 * world) != 0) { /* the kernel's assert (:97-100) */
            st = fattn_error(FATTN_E_INVALID_ARG, "%s: cu_seqlens[%d] = %d is not a "
                             "multiple of world_size * 2 = %d", who, i, (int)raw[i],
                             2 * world);
            goto out;
        }
    int64_t n = total_tokens / world;
    if (!out || out->dtype != FATTN_DTYPE_INT32 || fattn_tensor_numel(out) != n) {
        st = fattn_error(FATTN_E_SHAPE, "%s: out must be int32 [%lld]", who, (long long)n);
        goto out;
    }
    int32_t *o = out->data;
    for (int64_t t = 0; t < n; t++)
        o[t] = (int32_t)src_index(t, cs, batch, world, rank);
out:
    free(cs);
    return st;
}

fattn_status fattn_cp_thd_reorder(const fattn_tensor *inp, const fattn_tensor *cu_seqlens,
                                  int world, bool to_sequence_order, fattn_tensor *out)
{
    const char *who = to_sequence_order ? "thd_cp_rank_order_to_sequence_order"
                                        : "thd_sequence_order_to_cp_rank_order";
    int64_t total = inp && inp->ndim >= 1 ? inp->shape[0] : 0;
    if (world <= 0 || total <= 0 || total % (2 * (int64_t)world) != 0)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: needs cp_size > 0 and total_tokens > 0 "
                           "&& total_tokens %% (cp_size * 2) == 0 (cp_size %d, total %lld)",
                           who, world, (long long)total);
    size_t row = (size_t)prod(inp, 1, inp->ndim) * fattn_dtype_size(inp->dtype);
    if (row % 16 != 0)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: a token's %zu bytes are not a multiple "
                           "of 16 (TE: hidden_size_in_bytes %% 16 == 0)", who, row);
    if (!out || out->dtype != inp->dtype || fattn_tensor_numel(out) != fattn_tensor_numel(inp))
        return fattn_error(FATTN_E_SHAPE, "%s: out must be inp's shape and dtype", who);
    int64_t *cs;
    int batch;
    fattn_status st = load_cu(cu_seqlens, who, world, &cs, &batch);
    if (st != FATTN_OK)
        return st;
    int64_t tpr = total / world;
    const char *in = inp->data;
    char *o = out->data;
    for (int64_t g = 0; g < total; g++) {
        int64_t src = src_index(g % tpr, cs, batch, world, (int)(g / tpr));
        if (src < 0 || src >= total) {
            st = fattn_error(FATTN_E_INVALID_ARG, "%s: token %lld maps outside the %lld "
                             "tokens (cu_seqlens do not cover them)", who, (long long)g,
                             (long long)total);
            goto out;
        }
        int64_t rd = to_sequence_order ? g : src, wr = to_sequence_order ? src : g;
        memcpy(o + (size_t)wr * row, in + (size_t)rd * row, row);
    }
out:
    free(cs);
    return st;
}

/* ---- halves of sequences ------------------------------------------------ */

fattn_status fattn_cp_thd_read_half(const fattn_tensor *tensor, const fattn_tensor *cu_seqlens,
                                    int half_idx, fattn_tensor *half)
{
    static const char who[] = "thd_read_half_tensor";
    if (!tensor || (tensor->ndim != 3 && tensor->ndim != 4) || (half_idx != 0 && half_idx != 1))
        return fattn_error(FATTN_E_INVALID_ARG, "%s: tensor must be [t,h,d] or [2,t,h,d] "
                           "(TE: dim() == 3 || dim() == 4), half_idx 0 or 1", who);
    int sd = tensor->ndim == 3 ? 0 : 1;
    int64_t t = tensor->shape[sd];
    size_t row = (size_t)prod(tensor, sd + 1, tensor->ndim) * fattn_dtype_size(tensor->dtype);
    if (row % 16 != 0)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: a token's %zu bytes are not a multiple "
                           "of 16 (TE: hidden_size_in_bytes %% 16 == 0)", who, row);
    if (!half || half->dtype != tensor->dtype || half->ndim != tensor->ndim ||
        half->shape[sd] != t / 2 || fattn_tensor_numel(half) * 2 != fattn_tensor_numel(tensor))
        return fattn_error(FATTN_E_SHAPE, "%s: half must be tensor's shape with t halved", who);
    int64_t *cs;
    int batch;
    fattn_status st = load_cu(cu_seqlens, who, 2, &cs, &batch);
    if (st != FATTN_OK)
        return st;
    if (cs[batch] > t / 2) {
        long long cover = 2 * (long long)cs[batch];
        st = fattn_error(FATTN_E_SHAPE, "%s: cu_seqlens cover %lld tokens, tensor has %lld",
                         who, cover, (long long)t);
        goto out;
    }
    int64_t lead = prod(tensor, 0, sd);
    for (int64_t y = 0; y < lead; y++) {
        const char *src = (const char *)tensor->data + (size_t)(y * t) * row;
        char *dst = (char *)half->data + (size_t)(y * (t / 2)) * row;
        for (int64_t tok = 0; tok < cs[batch]; tok++) {
            int seq = thd_bsearch(tok, cs, batch + 1);
            memcpy(dst + (size_t)tok * row, src + (size_t)(tok + cs[seq + half_idx]) * row, row);
        }
    }
out:
    free(cs);
    return st;
}

/* The lse shapes of thd_second_half_lse_correction / _read_second_half_lse
 * (attention.cpp:832-923): heads, lse's and half's sequence lengths. */
static fattn_status lse_shapes(const fattn_tensor *lse, const fattn_tensor *half, int batch,
                               bool packed, const char *who, int64_t *heads, int64_t *ls,
                               int64_t *hs)
{
    if (lse->dtype != FATTN_DTYPE_FLOAT32 || half->dtype != FATTN_DTYPE_FLOAT32)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: lse must be float32 (TE: "
                           "scalar_type() == Float)", who);
    int nd = packed ? 2 : 3;
    if (lse->ndim != nd || half->ndim != nd)
        return fattn_error(FATTN_E_SHAPE, "%s: lse must be %s", who,
                           packed ? "[h, t] (packed)" : "[b, h, s]");
    *heads = lse->shape[nd - 2];
    *ls = lse->shape[nd - 1];
    *hs = half->shape[nd - 1];
    bool ok = half->shape[nd - 2] == *heads &&
              (packed ? *hs >= *ls / 2
                      : (lse->shape[0] == batch && half->shape[0] == batch && *hs == *ls / 2));
    if (!ok)
        return fattn_error(FATTN_E_SHAPE, "%s: the half lse must be %s", who,
                           packed ? "[h, >= t / 2]" : "[b, h, s / 2] of lse's b and h");
    return FATTN_OK;
}

fattn_status fattn_cp_thd_second_half_lse(fattn_tensor *lse, fattn_tensor *half,
                                          const fattn_tensor *cu_seqlens, bool packed,
                                          bool read)
{
    const char *who = read ? "thd_read_second_half_lse" : "thd_second_half_lse_correction";
    int64_t *cs = NULL, heads = 0, ls = 0, hs = 0;
    int batch;
    fattn_status st = load_cu(cu_seqlens, who, 2, &cs, &batch);
    if (st != FATTN_OK)
        goto out;
    st = lse_shapes(lse, half, batch, packed, who, &heads, &ls, &hs);
    if (st != FATTN_OK)
        goto out;
    float *l = lse->data, *hl = half->data;
    for (int64_t tok = 0; tok < cs[batch]; tok++) {
        int seq = thd_bsearch(tok, cs, batch + 1);
        for (int64_t h = 0; h < heads; h++) {
            int64_t idx, hidx; /* thd_lse_kernel, context_parallel.cu:242-258 */
            if (packed) {
                idx = h * ls + tok + cs[seq + 1];
                hidx = h * hs + tok;
            } else {
                int64_t r = (int64_t)seq * heads + h, col = tok - cs[seq];
                idx = r * ls + col + (cs[seq + 1] - cs[seq]);
                hidx = r * hs + col;
            }
            if (idx >= fattn_tensor_numel(lse) || hidx >= fattn_tensor_numel(half)) {
                st = fattn_error(FATTN_E_SHAPE, "%s: cu_seqlens reach past the lse", who);
                goto out;
            }
            if (read) { /* ReadLseFunctor */
                hl[hidx] = l[idx];
            } else { /* LseCorrectionFunctor: max + log1p(exp(min - max)) */
                float a = l[idx], b = hl[hidx];
                float mx = fmaxf(a, b), mn = fminf(a, b);
                l[idx] = mx + thd_log1pf(fattn_cpu_expf(mn - mx));
            }
        }
    }
out:
    free(cs);
    return st;
}

/* ---- corrections -------------------------------------------------------- */

/* The shapes thd_out_correction_helper checks (context_parallel.cu:545-590). */
static fattn_status out_shapes(const fattn_tensor *out, const fattn_tensor *ps,
                               const fattn_tensor *lse, const fattn_tensor *lps, int batch,
                               int half, bool packed, int64_t *ls, int64_t *lps_s)
{
    static const char who[] = "thd_out_correction";
    if (!is_data_dtype(out->dtype) || ps->dtype != out->dtype ||
        lse->dtype != FATTN_DTYPE_FLOAT32 || lps->dtype != FATTN_DTYPE_FLOAT32)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: out and out_per_step of one float16, "
                           "bfloat16 or float32 dtype, lse float32 (TE's checks)", who);
    if (out->ndim != 3 || ps->ndim != 3 || ps->shape[0] != out->shape[0] / half ||
        ps->shape[1] != out->shape[1] || ps->shape[2] != out->shape[2])
        return fattn_error(FATTN_E_SHAPE, "%s: out [t,h,d], out_per_step [t%s,h,d]", who,
                           half == 2 ? "/2" : "");
    int64_t t = out->shape[0], h = out->shape[1];
    if ((size_t)out->shape[2] * fattn_dtype_size(out->dtype) % 16 != 0)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: a head's %lld elements are not a multiple "
                           "of 16 bytes (the kernel moves float4s)", who,
                           (long long)out->shape[2]);
    bool ok;
    if (packed) {
        ok = lse->ndim == 2 && lps->ndim == 2 && lse->shape[0] == h && lps->shape[0] == h &&
             lse->shape[1] >= t && lps->shape[1] >= lse->shape[1] / half;
    } else {
        ok = lse->ndim == 3 && lps->ndim == 3 && lse->shape[0] == batch &&
             lse->shape[1] == h && lps->shape[0] == batch && lps->shape[1] == h &&
             lps->shape[2] == lse->shape[2] / half;
    }
    if (!ok)
        return fattn_error(FATTN_E_SHAPE, "%s: lse and lse_per_step shapes do not match out "
                           "(%s)", who, packed ? "[h, >= t] packed" : "[b, h, s]");
    *ls = lse->shape[lse->ndim - 1];
    *lps_s = lps->shape[lps->ndim - 1];
    return FATTN_OK;
}

fattn_status fattn_cp_thd_out_correction(fattn_tensor *out, const fattn_tensor *out_per_step,
                                         const fattn_tensor *old_lse, const fattn_tensor *lse,
                                         const fattn_tensor *lse_per_step,
                                         const fattn_tensor *cu_seqlens, bool only_second_half,
                                         bool packed)
{
    int half = only_second_half ? 2 : 1;
    int64_t *cs = NULL, ls = 0, lps_s = 0;
    int batch;
    fattn_status st = load_cu(cu_seqlens, "thd_out_correction", half, &cs, &batch);
    if (st != FATTN_OK)
        goto out;
    st = out_shapes(out, out_per_step, lse, lse_per_step, batch, half, packed, &ls, &lps_s);
    if (st != FATTN_OK)
        goto out;
    if (old_lse &&
        (old_lse->dtype != FATTN_DTYPE_FLOAT32 || old_lse->ndim != lse->ndim ||
         fattn_tensor_numel(old_lse) != fattn_tensor_numel(lse))) {
        st = fattn_error(FATTN_E_SHAPE, "thd_out_correction: old_lse must be float32 of lse's "
                         "shape");
        goto out;
    }
    int64_t heads = out->shape[1], d = out->shape[2], sh = only_second_half ? 1 : 0;
    const float *l = lse->data, *lp = lse_per_step->data, *lo = old_lse ? old_lse->data : NULL;
    fattn_dtype dt = out->dtype;
    for (int64_t tok = 0; tok < cs[batch]; tok++) {
        int seq = thd_bsearch(tok, cs, batch + 1);
        for (int64_t h = 0; h < heads; h++) {
            int64_t idx, ip; /* thd_out_correction_kernel, context_parallel.cu:286-301 */
            if (packed) {
                idx = h * ls + tok + cs[seq + 1] * sh;
                ip = h * lps_s + tok;
            } else {
                int64_t r = (int64_t)seq * heads + h, col = tok - cs[seq];
                idx = r * ls + col + (cs[seq + 1] - cs[seq]) * sh;
                ip = r * lps_s + col;
            }
            if (idx >= fattn_tensor_numel(lse) || ip >= fattn_tensor_numel(lse_per_step) ||
                tok + cs[seq + 1] * sh >= out->shape[0]) {
                st = fattn_error(FATTN_E_SHAPE, "thd_out_correction: cu_seqlens reach past "
                                 "out or the lse");
                goto out;
            }
            float f = fattn_cpu_expf(lp[ip] - l[idx]);
            int64_t o = ((tok + cs[seq + 1] * sh) * heads + h) * d, p = (tok * heads + h) * d;
            if (lo) { /* 2.20.2's online merge (the header says how it is modelled) */
                float fo = fattn_cpu_expf(lo[idx] - l[idx]);
                for (int64_t k = 0; k < d; k++) {
                    float x = fattn_load_f32(out->data, dt, o + k) * fo;
                    float y = fattn_load_f32(out_per_step->data, dt, p + k) * f;
                    fattn_store_f32(out->data, dt, o + k, x + y);
                }
                continue;
            }
            for (int64_t k = 0; k < d; k++) {
                float x = fattn_load_f32(out_per_step->data, dt, p + k);
                float add = x == 0.0f ? 0.0f : fattn_round_f32(dt, x * f);
                fattn_store_f32(out->data, dt, o + k,
                                fattn_load_f32(out->data, dt, o + k) + add);
            }
        }
    }
out:
    free(cs);
    return st;
}

typedef enum { G_NONE, G_ADD, G_COPY, G_BAD } grad_op;

static grad_op grad_op_of(const char *s)
{
    return !s ? G_BAD : !strcmp(s, "none") ? G_NONE : !strcmp(s, "add") ? G_ADD
           : !strcmp(s, "copy")            ? G_COPY
                                           : G_BAD;
}

/* One token of thd_grad_correction: the functor on `row` elements. */
static void grad_token(grad_op op, fattn_dtype dt, void *g, int64_t gi, const void *ps,
                       int64_t pi, int64_t row)
{
    size_t esz = fattn_dtype_size(dt);
    if (op == G_COPY) {
        memcpy((char *)g + (size_t)gi * esz, (const char *)ps + (size_t)pi * esz,
               (size_t)row * esz);
    } else if (op == G_ADD) {
        for (int64_t k = 0; k < row; k++)
            fattn_store_f32(g, dt, gi + k,
                            fattn_load_f32(g, dt, gi + k) + fattn_load_f32(ps, dt, pi + k));
    }
}

fattn_status fattn_cp_thd_grad_correction(fattn_tensor *grad, const fattn_tensor *grad_per_step,
                                          const fattn_tensor *cu_seqlens, const char *first_half,
                                          const char *second_half)
{
    static const char who[] = "thd_grad_correction";
    grad_op f0 = grad_op_of(first_half), f1 = grad_op_of(second_half);
    int functor; /* thd_grad_dispatcher, context_parallel.cu:693-718 */
    if ((f0 == G_ADD || f0 == G_COPY) && f1 == G_NONE)
        functor = 0;
    else if (f0 == G_NONE && (f1 == G_ADD || f1 == G_COPY))
        functor = 1;
    else if ((f0 == G_ADD && f1 == G_COPY) || (f0 == G_COPY && f1 == G_ADD))
        functor = 2;
    else
        return fattn_error(FATTN_E_INVALID_ARG, "%s: Unsupported Functor of first half and "
                           "second_half (%s, %s)", who, first_half ? first_half : "NULL",
                           second_half ? second_half : "NULL");
    if (!grad || (grad->ndim != 3 && grad->ndim != 4) || !is_data_dtype(grad->dtype) ||
        !grad_per_step || grad_per_step->dtype != grad->dtype ||
        grad_per_step->ndim != grad->ndim)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: grad [t,h,d] or [2,t,h,d] of float16, "
                           "bfloat16 or float32, grad_per_step the same", who);
    int sd = grad->ndim == 3 ? 0 : 1;
    int64_t t = grad->shape[sd], tp = functor < 2 ? t / 2 : t;
    if (grad_per_step->shape[sd] != tp || grad_per_step->shape[sd + 1] != grad->shape[sd + 1] ||
        grad_per_step->shape[sd + 2] != grad->shape[sd + 2])
        return fattn_error(FATTN_E_SHAPE, "%s: grad_per_step must be grad's shape%s", who,
                           functor < 2 ? " with t halved" : "");
    int64_t row = grad->shape[sd + 1] * grad->shape[sd + 2];
    if ((size_t)row * fattn_dtype_size(grad->dtype) % 16 != 0)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: a token's bytes are not a multiple of 16 "
                           "(TE's check)", who);
    int64_t *cs;
    int batch;
    fattn_status st = load_cu(cu_seqlens, who, functor < 2 ? 2 : 1, &cs, &batch);
    if (st != FATTN_OK)
        return st;
    int64_t lead = prod(grad, 0, sd);
    for (int64_t y = 0; y < lead; y++) {
        for (int64_t tok = 0; tok < cs[batch]; tok++) {
            int seq = thd_bsearch(tok, cs, batch + 1);
            int64_t off = functor < 2 ? cs[seq + functor] : 0;
            bool first = functor < 2 ? functor == 0
                                     : tok - cs[seq] < (cs[seq + 1] - cs[seq]) / 2;
            if (tok + off >= t || tok >= tp) {
                st = fattn_error(FATTN_E_SHAPE, "%s: cu_seqlens reach past grad", who);
                goto out;
            }
            grad_token(first ? f0 : f1, grad->dtype, grad->data, (y * t + tok + off) * row,
                       grad_per_step->data, (y * tp + tok) * row, row);
        }
    }
out:
    free(cs);
    return st;
}

fattn_status fattn_cp_thd_copy_valid_tokens(fattn_tensor *out, const fattn_tensor *inp,
                                            const fattn_tensor *cu_seqlens_padded,
                                            const fattn_tensor *cu_seqlens)
{
    static const char who[] = "thd_copy_valid_tokens_from_per_split_to_rank_local";
    if (!inp || !out || inp->ndim < 1 || out->dtype != inp->dtype || out->ndim != inp->ndim ||
        fattn_tensor_numel(out) != fattn_tensor_numel(inp) || inp->shape[0] <= 0)
        return fattn_error(FATTN_E_SHAPE, "%s: out must be inp's shape and dtype, inp at least "
                           "1-D with tokens", who);
    size_t row = (size_t)prod(inp, 1, inp->ndim) * fattn_dtype_size(inp->dtype);
    if (row % 16 != 0)
        return fattn_error(FATTN_E_INVALID_ARG, "%s: a token's %zu bytes are not a multiple "
                           "of 16 (TE: hidden_size_in_bytes %% 16 == 0)", who, row);
    int64_t *pad = NULL, *valid = NULL;
    int b1, b2;
    fattn_status st = load_cu(cu_seqlens_padded, who, 1, &pad, &b1);
    if (st != FATTN_OK)
        goto out;
    st = load_cu(cu_seqlens, who, 1, &valid, &b2);
    if (st != FATTN_OK)
        goto out;
    if (b1 != b2) {
        st = fattn_error(FATTN_E_SHAPE, "%s: cu_seqlens_padded and cu_seqlens differ in "
                         "length", who);
        goto out;
    }
    for (int64_t tok = 0; tok < inp->shape[0]; tok++) {
        int seq = thd_bsearch(tok, pad, b1 + 1);
        if (seq < 0 || seq >= b1)
            continue;
        int64_t local = tok - pad[seq], len = valid[seq + 1] - valid[seq];
        if (local >= 0 && local < len)
            memcpy((char *)out->data + (size_t)tok * row,
                   (const char *)inp->data + (size_t)tok * row, row);
    }
out:
    free(pad);
    free(valid);
    return st;
}
