/* Case inputs from a spec (see inputs.h for the value and length rules). */
#include <stdlib.h>
#include <string.h>

#include "fattn/philox.h"
#include "fattn/te.h"

#include "inputs.h"

enum {
    STREAM_Q = 1,
    STREAM_K = 2,
    STREAM_V = 3,
    STREAM_BIAS = 4,
    STREAM_OFFSET = 5,
    STREAM_DO = 6,
    STREAM_SEQLEN_Q = 7,
    STREAM_SEQLEN_KV = 8,
    STREAM_GAP_Q = 9,
    STREAM_GAP_KV = 10,
};

static fattn_status alloc_i32(fattn_tensor *t, int64_t n, const int64_t *vals)
{
    fattn_status st = fattn_tensor_alloc(t, FATTN_DTYPE_INT32, 1, &n);
    if (st != FATTN_OK)
        return st;
    for (int64_t i = 0; i < n; i++)
        ((int32_t *)t->data)[i] = (int32_t)vals[i];
    return FATTN_OK;
}

static bool layout_self_packed(fattn_qkv_layout l)
{
    fattn_qkv_layout_group g = fattn_layout_group(l);
    return g == FATTN_LAYOUT_GROUP_3HD || g == FATTN_LAYOUT_GROUP_H3D;
}

static fattn_status alloc_qkv(const fattn_spec *s, fattn_case_inputs *in)
{
    fattn_qkv_format qf = fattn_layout_q_format(s->layout);
    fattn_qkv_format kvf = fattn_layout_kv_format(s->layout);
    fattn_qkv_layout_group g = fattn_layout_group(s->layout);
    int64_t qs[4], ks[4], vs[4];
    int qn = fattn_format_shape(qf, s->b, s->sq, in->t_q, s->h, s->d_qk, qs);
    int kn = fattn_format_shape(kvf, s->b, s->skv, in->t_kv, s->hg, s->d_qk, ks);
    fattn_format_shape(kvf, s->b, s->skv, in->t_kv, s->hg, s->d_v, vs);
    fattn_tensor views[3];
    fattn_status st;
    if (g == FATTN_LAYOUT_GROUP_3HD || g == FATTN_LAYOUT_GROUP_H3D) {
        st = fattn_tensor_alloc_packed(&in->storage[0], s->dtype, qn, qs, 3,
                          g == FATTN_LAYOUT_GROUP_3HD ? qn - 2 : qn - 1, views);
        if (st == FATTN_OK) {
            in->q = views[0];
            in->k = views[1];
            in->v = views[2];
        }
        return st;
    }
    st = fattn_tensor_alloc_packed(&in->storage[0], s->dtype, qn, qs, 1, 0, views);
    if (st != FATTN_OK)
        return st;
    in->q = views[0];
    if (g == FATTN_LAYOUT_GROUP_HD_2HD || g == FATTN_LAYOUT_GROUP_HD_H2D) {
        st = fattn_tensor_alloc_packed(&in->storage[1], s->dtype, kn, ks, 2,
                          g == FATTN_LAYOUT_GROUP_HD_2HD ? kn - 2 : kn - 1, views);
        if (st == FATTN_OK) {
            in->k = views[0];
            in->v = views[1];
        }
        return st;
    }
    st = fattn_tensor_alloc_packed(&in->storage[1], s->dtype, kn, ks, 1, 0, views);
    if (st != FATTN_OK)
        return st;
    in->k = views[0];
    st = fattn_tensor_alloc_packed(&in->storage[2], s->dtype, kn, vs, 1, 0, views);
    if (st == FATTN_OK)
        in->v = views[0];
    return st;
}

void fattn_inputs_free(fattn_case_inputs *in)
{
    for (int i = 0; i < 3; i++)
        fattn_tensor_free(&in->storage[i]);
    fattn_tensor *own[] = {&in->attn_bias, &in->softmax_offset, &in->cu_seqlens_q,
                           &in->cu_seqlens_kv, &in->cu_seqlens_q_padded,
                           &in->cu_seqlens_kv_padded, &in->d_out};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        fattn_tensor_free(own[i]);
    memset(in, 0, sizeof *in);
}

static fattn_status resolve_config(const fattn_spec *s, fattn_case_inputs *in)
{
    int64_t w[2] = {s->window[0], s->window[1]};
    bool warned = false;
    fattn_status st = fattn_window_normalize(s->mask, s->window_set, w, in->window, &warned);
    if (st != FATTN_OK)
        return fattn_error(st, "case %s: window: %s", s->id, fattn_last_error());
    /* dot_product_attention.py:1746-1754 */
    if (s->mask == FATTN_MASK_CAUSAL || s->mask == FATTN_MASK_PADDING_CAUSAL)
        in->bottom_right_diagonal = false;
    else if (fattn_mask_is_bottom_right(s->mask) || s->bottom_right_diagonal == FATTN_TRISTATE_NULL)
        in->bottom_right_diagonal = true;
    else
        in->bottom_right_diagonal = s->bottom_right_diagonal == FATTN_TRISTATE_TRUE;
    return FATTN_OK;
}

fattn_status fattn_inputs_make(const fattn_spec *s, fattn_case_inputs *in)
{
    memset(in, 0, sizeof *in);
    fattn_status st = resolve_config(s, in);
    if (st != FATTN_OK)
        return st;
    fattn_qkv_format qf = fattn_layout_q_format(s->layout);
    fattn_qkv_format kvf = fattn_layout_kv_format(s->layout);
    bool thd = qf == FATTN_FORMAT_THD || kvf == FATTN_FORMAT_THD;
    bool padding = fattn_mask_has_padding(s->mask) || thd;
    uint64_t seed = (uint64_t)s->seed;
    int64_t b = s->b;

    int64_t *len_q = calloc((size_t)b, sizeof(int64_t));
    int64_t *len_kv = calloc((size_t)b, sizeof(int64_t));
    int64_t *cu_q = calloc((size_t)b + 1, sizeof(int64_t));
    int64_t *cu_kv = calloc((size_t)b + 1, sizeof(int64_t));
    int64_t *off_q = calloc((size_t)b + 1, sizeof(int64_t));
    int64_t *off_kv = calloc((size_t)b + 1, sizeof(int64_t));
    if (!len_q || !len_kv || !cu_q || !cu_kv || !off_q || !off_kv) {
        st = fattn_error(FATTN_E_NOMEM, "case %s: sequence tables", s->id);
        goto done;
    }
    for (int64_t bi = 0; bi < b; bi++) {
        int64_t lq = s->sq, lkv = s->skv;
        if (padding) {
            lq = s->seqlens_q ? s->seqlens_q[bi]
                              : 1 + (int64_t)(fattn_philox_u32(seed, STREAM_SEQLEN_Q, (uint64_t)bi) %
                                              (uint64_t)s->sq);
            lkv = s->seqlens_kv ? s->seqlens_kv[bi]
                                : 1 + (int64_t)(fattn_philox_u32(seed, STREAM_SEQLEN_KV,
                                                                 (uint64_t)bi) % (uint64_t)s->skv);
        }
        if (layout_self_packed(s->layout))
            lkv = lq; /* q, k, v share one token dimension */
        if (lq < 0 || lq > s->sq || lkv < 0 || lkv > s->skv) {
            st = fattn_error(FATTN_E_INVALID_CASE,
                             "case %s: sequence %lld has lengths (%lld, %lld) outside "
                             "[0, sq=%lld] x [0, skv=%lld]", s->id, (long long)bi,
                             (long long)lq, (long long)lkv, (long long)s->sq, (long long)s->skv);
            goto done;
        }
        int64_t gq = 0, gkv = 0;
        if (s->pad_between_seqs) {
            gq = (int64_t)(fattn_philox_u32(seed, STREAM_GAP_Q, (uint64_t)bi) % 4u);
            gkv = (int64_t)(fattn_philox_u32(seed, STREAM_GAP_KV, (uint64_t)bi) % 4u);
        }
        if (layout_self_packed(s->layout))
            gkv = gq;
        len_q[bi] = lq;
        len_kv[bi] = lkv;
        cu_q[bi + 1] = cu_q[bi] + lq;
        cu_kv[bi + 1] = cu_kv[bi] + lkv;
        off_q[bi + 1] = off_q[bi] + lq + gq;
        off_kv[bi + 1] = off_kv[bi] + lkv + gkv;
    }
    in->t_q = qf == FATTN_FORMAT_THD ? off_q[b] : 0;
    in->t_kv = kvf == FATTN_FORMAT_THD ? off_kv[b] : 0;
    if ((qf == FATTN_FORMAT_THD && in->t_q == 0) || (kvf == FATTN_FORMAT_THD && in->t_kv == 0)) {
        st = fattn_error(FATTN_E_INVALID_CASE, "case %s: THD tensor with no tokens", s->id);
        goto done;
    }
    /* FusedAttention passes cu_seqlens always and sets the padded ones to
     * the plain ones for a padding mask or THD when the caller gives none;
     * THD gaps make them differ. */
    if ((st = alloc_i32(&in->cu_seqlens_q, b + 1, cu_q)) ||
        (st = alloc_i32(&in->cu_seqlens_kv, b + 1, cu_kv)))
        goto done;
    if (padding &&
        ((st = alloc_i32(&in->cu_seqlens_q_padded, b + 1, qf == FATTN_FORMAT_THD ? off_q : cu_q)) ||
         (st = alloc_i32(&in->cu_seqlens_kv_padded, b + 1,
                         kvf == FATTN_FORMAT_THD ? off_kv : cu_kv))))
        goto done;

    if ((st = alloc_qkv(s, in)) != FATTN_OK)
        goto done;
    fattn_philox_fill_tensor(&in->q, seed, STREAM_Q, 0.5f);
    fattn_philox_fill_tensor(&in->k, seed, STREAM_K, 0.5f);
    fattn_philox_fill_tensor(&in->v, seed, STREAM_V, 1.0f);

    if (s->bias == FATTN_BIAS_POST_SCALE_BIAS || s->bias == FATTN_BIAS_PRE_SCALE_BIAS) {
        const char *shape = fattn_bias_shape_name(s->bias_shape);
        int64_t bs[4] = {shape[0] == 'b' ? b : 1, shape[1] == 'h' ? s->h : 1,
                         shape[2] == 's' ? s->sq : 1, s->skv};
        if ((st = fattn_tensor_alloc(&in->attn_bias, s->dtype, 4, bs)))
            goto done;
        fattn_philox_fill_tensor(&in->attn_bias, seed, STREAM_BIAS, 1.0f);
    }
    if (s->softmax != FATTN_SOFTMAX_VANILLA) {
        int64_t os[4] = {1, s->h, 1, 1};
        if ((st = fattn_tensor_alloc(&in->softmax_offset, FATTN_DTYPE_FLOAT32, 4, os)))
            goto done;
        if (s->softmax == FATTN_SOFTMAX_LEARNABLE)
            fattn_philox_fill_tensor(&in->softmax_offset, seed, STREAM_OFFSET, 1.0f);
        else
            memset(in->softmax_offset.data, 0, sizeof(float) * (size_t)s->h);
    }
    if (s->is_training) {
        int64_t os[4];
        int on = fattn_format_shape(qf, b, s->sq, in->t_q, s->h, s->d_v, os);
        if ((st = fattn_tensor_alloc(&in->d_out, s->dtype, on, os)))
            goto done;
        fattn_philox_fill_tensor(&in->d_out, seed, STREAM_DO, 0.1f);
    }
    st = FATTN_OK;
done:
    free(len_q);
    free(len_kv);
    free(cu_q);
    free(cu_kv);
    free(off_q);
    free(off_kv);
    if (st != FATTN_OK)
        fattn_inputs_free(in);
    return st;
}
