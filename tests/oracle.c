/* The float64 oracle (see oracle.h): docs/numerics.md as plain loops.
 *
 * Reading guide. Everything is organised around one query row
 * (batch bi, query head n, position i < sq_b):
 *   row_logits()  numerics.md "Forward" steps 1-3: logits, bias/alibi, band
 *   row_forward() steps 4-6: sink softmax, dropout, O = P·V
 *   oracle_backward() the "Backward" formulas, row by row
 * The helpers before them only turn (format, batch, position, head, feature)
 * into tensor indices, and read inputs through the views (or the double
 * overrides of oracle_inputs).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/dtype.h"
#include "fattn/philox.h"
#include "fattn/te.h"
#include "oracle.h"

/* ------------------------------------------------------------------------ */
/* Tensor access                                                            */
/* ------------------------------------------------------------------------ */

/* C-order linear index of multi-index idx in a tensor of `ndim` dims with
 * the given shape. */
static int64_t linear_index(int ndim, const int64_t *shape, const int64_t *idx)
{
    int64_t e = 0;
    for (int a = 0; a < ndim; a++)
        e = e * shape[a] + idx[a];
    return e;
}

/* Element idx of a float tensor as a double: the override array (C order of
 * the logical shape) when given, else the view's element widened exactly. */
static double read_f(const fattn_tensor *t, const double *ov, const int64_t *idx)
{
    if (ov)
        return ov[linear_index(t->ndim, t->shape, idx)];
    return (double)fattn_load_f32(t->data, t->dtype, fattn_tensor_offset(t, idx));
}

/* Element i of a 1-D int32 or int64 tensor (cu_seqlens, rng_state). */
static int64_t read_int(const fattn_tensor *t, int64_t i)
{
    int64_t off = i * t->strides[0];
    if (t->dtype == FATTN_DTYPE_INT64)
        return ((const int64_t *)t->data)[off];
    return ((const int32_t *)t->data)[off];
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int a = 0; a < ndim; a++)
        n *= shape[a];
    return n;
}

/* ------------------------------------------------------------------------ */
/* Geometry: formats, lengths, offsets                                      */
/* ------------------------------------------------------------------------ */

static fattn_qkv_format q_format(const tcase *c)
{
    return fattn_layout_q_format(c->layout);
}

static fattn_qkv_format kv_format(const tcase *c)
{
    return fattn_layout_kv_format(c->layout);
}

/* Actual lengths come from cu_seqlens with a padding mask (THD always has
 * one); otherwise every sequence has the padded length. */
static bool uses_cu_lengths(const tcase *c)
{
    return fattn_mask_has_padding(c->mask) || q_format(c) == FATTN_FORMAT_THD ||
           kv_format(c) == FATTN_FORMAT_THD;
}

int oracle_len_q(const tcase *c, const tcase_buffers *buf, int bi)
{
    if (!uses_cu_lengths(c))
        return c->sq;
    return (int)(read_int(&buf->cu_q, bi + 1) - read_int(&buf->cu_q, bi));
}

int oracle_len_kv(const tcase *c, const tcase_buffers *buf, int bi)
{
    if (!uses_cu_lengths(c))
        return c->skv;
    return (int)(read_int(&buf->cu_kv, bi + 1) - read_int(&buf->cu_kv, bi));
}

/* THD token offset of sequence bi: cu_seqlens_*_padded when given, else
 * cu_seqlens_*. 0 for the other formats (they index positions directly). */
int64_t oracle_off_q(const tcase *c, const tcase_buffers *buf, int bi)
{
    if (q_format(c) != FATTN_FORMAT_THD)
        return 0;
    if (!fattn_tensor_is_empty(&buf->cu_q_pad))
        return read_int(&buf->cu_q_pad, bi);
    return read_int(&buf->cu_q, bi);
}

int64_t oracle_off_kv(const tcase *c, const tcase_buffers *buf, int bi)
{
    if (kv_format(c) != FATTN_FORMAT_THD)
        return 0;
    if (!fattn_tensor_is_empty(&buf->cu_kv_pad))
        return read_int(&buf->cu_kv_pad, bi);
    return read_int(&buf->cu_kv, bi);
}

/* Multi-index of feature `feat` of (batch bi, position pos, head) in a tensor
 * of format f, whose sequence bi starts at token `off` when f is THD:
 *   sbhd [s,b,h,x]   bshd [b,s,h,x]   bhsd [b,h,s,x]   thd [t,h,x]
 * Returns the number of dims. */
static int token_index(fattn_qkv_format f, int64_t off, int bi, int pos, int head,
                       int feat, int64_t idx[4])
{
    switch (f) {
    case FATTN_FORMAT_SBHD:
        idx[0] = pos, idx[1] = bi, idx[2] = head, idx[3] = feat;
        return 4;
    case FATTN_FORMAT_BHSD:
        idx[0] = bi, idx[1] = head, idx[2] = pos, idx[3] = feat;
        return 4;
    case FATTN_FORMAT_THD:
        idx[0] = off + pos, idx[1] = head, idx[2] = feat;
        return 3;
    default: /* bshd */
        idx[0] = bi, idx[1] = pos, idx[2] = head, idx[3] = feat;
        return 4;
    }
}

/* Everything one row computation needs, resolved once per call. */
typedef struct geom {
    const tcase *c;
    const tcase_buffers *buf;
    const oracle_inputs *in;
    fattn_qkv_format qf, kvf;
    double scale;
    int group;            /* h / hg: query heads per kv head */
    bool sink;            /* off-by-one or learnable */
    bool dropout;         /* training and p > 0 */
    double keep_scale;    /* 1 / (1 - p) */
    uint64_t rng_seed, rng_offset;
    uint32_t threshold;
} geom;

static const double *ov_or_null(const oracle_inputs *in, int which)
{
    if (!in)
        return NULL;
    switch (which) {
    case 0: return in->q;
    case 1: return in->k;
    case 2: return in->v;
    case 3: return in->bias;
    case 4: return in->softmax_offset;
    default: return in->d_o;
    }
}

static void geom_init(geom *g, const tcase *c, const tcase_buffers *buf,
                      const oracle_inputs *in)
{
    memset(g, 0, sizeof *g);
    g->c = c;
    g->buf = buf;
    g->in = in;
    g->qf = q_format(c);
    g->kvf = kv_format(c);
    g->scale = oracle_scale(c);
    g->group = c->h / c->hg;
    g->sink = c->softmax != FATTN_SOFTMAX_VANILLA;
    g->dropout = c->training && c->dropout > 0.0f;
    g->keep_scale = 1.0 / (1.0 - (double)c->dropout);
    if (!fattn_tensor_is_empty(&buf->rng_state)) {
        g->rng_seed = (uint64_t)read_int(&buf->rng_state, 0);
        g->rng_offset = (uint64_t)read_int(&buf->rng_state, 1);
    }
    g->threshold = fattn_dropout_threshold(c->dropout);
}

/* Row vectors: q[i] of head n (d values), k[j] / v[j] of kv head kh,
 * dO[i] of head n (dv values). */
static void load_q(const geom *g, int bi, int n, int i, double *out)
{
    int64_t idx[4];
    int64_t off = oracle_off_q(g->c, g->buf, bi);
    for (int x = 0; x < g->c->d; x++) {
        token_index(g->qf, off, bi, i, n, x, idx);
        out[x] = read_f(&g->buf->q, ov_or_null(g->in, 0), idx);
    }
}

static void load_k(const geom *g, int bi, int kh, int j, double *out)
{
    int64_t idx[4];
    int64_t off = oracle_off_kv(g->c, g->buf, bi);
    for (int x = 0; x < g->c->d; x++) {
        token_index(g->kvf, off, bi, j, kh, x, idx);
        out[x] = read_f(&g->buf->k, ov_or_null(g->in, 1), idx);
    }
}

static void load_v(const geom *g, int bi, int kh, int j, double *out)
{
    int64_t idx[4];
    int64_t off = oracle_off_kv(g->c, g->buf, bi);
    for (int x = 0; x < g->c->dv; x++) {
        token_index(g->kvf, off, bi, j, kh, x, idx);
        out[x] = read_f(&g->buf->v, ov_or_null(g->in, 2), idx);
    }
}

static void load_do(const geom *g, int bi, int n, int i, double *out)
{
    int64_t idx[4];
    int64_t off = oracle_off_q(g->c, g->buf, bi);
    for (int x = 0; x < g->c->dv; x++) {
        token_index(g->qf, off, bi, i, n, x, idx);
        out[x] = read_f(&g->buf->d_o, ov_or_null(g->in, 5), idx);
    }
}

/* The sink logit z of head n: softmax_offset[0,n,0,0]. */
static double sink_logit(const geom *g, int n)
{
    int64_t idx[4] = {0, n, 0, 0};
    return read_f(&g->buf->softmax_offset, ov_or_null(g->in, 4), idx);
}

/* Index of bias element (bi|0, n|0, i|0, j): size-1 dims broadcast. */
static void bias_index(const fattn_tensor *bias, int bi, int n, int i, int j,
                       int64_t idx[4])
{
    idx[0] = bias->shape[0] == 1 ? 0 : bi;
    idx[1] = bias->shape[1] == 1 ? 0 : n;
    idx[2] = bias->shape[2] == 1 ? 0 : i;
    idx[3] = j;
}

/* Linear index of a Stats/Max row in the oracle's arrays:
 * [b,h,sq] -> (bi*h + n)*sq + i;  THD [t_q,h] -> (off_q(bi) + i)*h + n. */
static int64_t stats_index(const geom *g, int bi, int n, int i)
{
    if (g->qf == FATTN_FORMAT_THD)
        return (oracle_off_q(g->c, g->buf, bi) + i) * g->c->h + n;
    return ((int64_t)bi * g->c->h + n) * g->c->sq + i;
}

/* The same row's element in an engine's Stats tensor ([b,h,sq,1] or
 * [t_q,h,1]), widened from float32. */
static double saved_stats(const geom *g, int bi, int n, int i)
{
    int64_t idx[4];
    if (g->qf == FATTN_FORMAT_THD) {
        idx[0] = oracle_off_q(g->c, g->buf, bi) + i, idx[1] = n, idx[2] = 0;
    } else {
        idx[0] = bi, idx[1] = n, idx[2] = i, idx[3] = 0;
    }
    const fattn_tensor *s = &g->buf->stats;
    return (double)fattn_load_f32(s->data, s->dtype, fattn_tensor_offset(s, idx));
}

double oracle_scale(const tcase *c)
{
    return (double)(float)(1.0 / sqrt((double)c->d));
}

double oracle_alibi_slope(int n, int h)
{
    /* n2 = 2^floor(log2 h); heads 0..n2-1 get 2^(-8(n+1)/n2); the remaining
     * heads get 2^(-4k/n2) for k = 1, 3, 5, ... */
    int n2 = 1;
    while (n2 * 2 <= h)
        n2 *= 2;
    if (n < n2)
        return pow(2.0, -8.0 * (double)(n + 1) / (double)n2);
    int k = 2 * (n - n2) + 1;
    return pow(2.0, -4.0 * (double)k / (double)n2);
}

static bool keep_of(const geom *g, int bi, int n, int i, int j)
{
    if (!g->dropout)
        return true;
    const tcase *c = g->c;
    uint64_t e = (((uint64_t)bi * (uint64_t)c->h + (uint64_t)n) * (uint64_t)c->sq +
                  (uint64_t)i) * (uint64_t)c->skv + (uint64_t)j;
    if (g->in && g->in->keep)
        return g->in->keep[e] != 0.0f;
    return fattn_philox_u32(g->rng_seed, g->rng_offset, e) >= g->threshold;
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                  */
/* ------------------------------------------------------------------------ */

/* Steps 1-3 for row (bi, n, i): s[j] for every j < skv, kept[j] the band
 * rule; s[j] = -inf for keys not kept. Returns the number of kept keys. */
static int row_logits(const geom *g, int bi, int n, int i, double *s, bool *kept)
{
    const tcase *c = g->c;
    int len_q = oracle_len_q(c, g->buf, bi);
    int len_kv = oracle_len_kv(c, g->buf, bi);
    int kh = n / g->group;
    int64_t diag = c->bottom_right ? (int64_t)i + (len_kv - len_q) : (int64_t)i;
    int64_t left = c->window[0], right = c->window[1];
    /* TE's C++ makes every causal mask causal whatever the window: cuDNN's
     * causal flag bounds the band on the right at 0 unless the window's
     * right element is set (fused_attn_f16_arbitrary_seqlen.cu:68-71,
     * 303-316 at d0067d0) */
    if (right == -1 && (c->mask == FATTN_MASK_CAUSAL || c->mask == FATTN_MASK_PADDING_CAUSAL ||
                        c->mask == FATTN_MASK_CAUSAL_BOTTOM_RIGHT ||
                        c->mask == FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT))
        right = 0;
    double *qv = malloc(sizeof(double) * (size_t)c->d);
    double *kv = malloc(sizeof(double) * (size_t)c->d);
    int nkept = 0;
    for (int j = 0; j < c->skv; j++) {
        bool in_band = j < len_kv && (left < 0 || j >= diag - left) &&
                       (right < 0 || j <= diag + right);
        kept[j] = in_band;
        s[j] = -INFINITY;
        if (!in_band)
            continue;
        nkept++;
        if (nkept == 1)
            load_q(g, bi, n, i, qv);
        load_k(g, bi, kh, j, kv);
        double dot = 0.0;
        for (int x = 0; x < c->d; x++)
            dot += qv[x] * kv[x];
        double sj = dot * g->scale; /* step 1 */
        if (c->bias == FATTN_BIAS_POST_SCALE_BIAS) { /* step 2 */
            int64_t idx[4];
            bias_index(&g->buf->bias, bi, n, i, j, idx);
            sj += read_f(&g->buf->bias, ov_or_null(g->in, 3), idx);
        } else if (c->bias == FATTN_BIAS_ALIBI) {
            sj += (double)(j - i) * oracle_alibi_slope(n, c->h);
        }
        s[j] = sj;
    }
    free(qv);
    free(kv);
    return nkept;
}

int oracle_row_logits(const tcase *c, const tcase_buffers *buf,
                      const oracle_inputs *in, int bi, int n, int i, double *s,
                      bool *kept)
{
    geom g;
    geom_init(&g, c, buf, in);
    return row_logits(&g, bi, n, i, s, kept);
}

bool oracle_keep(const tcase *c, const tcase_buffers *buf, int bi, int n, int i,
                 int j)
{
    geom g;
    geom_init(&g, c, buf, NULL);
    return keep_of(&g, bi, n, i, j);
}

/* Steps 4-6 for one row: writes o[0..dv), *stats, *max. */
static void row_forward(const geom *g, int bi, int n, int i, double *s, bool *kept,
                        double *vrow, double *o, double *stats, double *max)
{
    const tcase *c = g->c;
    int nkept = row_logits(g, bi, n, i, s, kept);
    for (int x = 0; x < c->dv; x++)
        o[x] = 0.0;

    double row_max = -INFINITY; /* Max: kept logits only, no sink */
    for (int j = 0; j < c->skv; j++)
        if (kept[j] && s[j] > row_max)
            row_max = s[j];
    *max = row_max;

    double z = g->sink ? sink_logit(g, n) : -INFINITY;
    double m = row_max > z ? row_max : z; /* M = max(max s_j, z) */
    if (nkept == 0 && !g->sink) {         /* empty row, no sink */
        *stats = -INFINITY;
        return;
    }
    double l = 0.0; /* L = sum exp(s_j - M) (+ exp(z - M)) */
    for (int j = 0; j < c->skv; j++)
        if (kept[j])
            l += exp(s[j] - m);
    if (g->sink)
        l += exp(z - m);
    *stats = m + log(l);

    int kh = n / g->group;
    for (int j = 0; j < c->skv; j++) {
        if (!kept[j])
            continue;
        double p = exp(s[j] - m) / l;
        if (g->dropout) /* step 5 */
            p = keep_of(g, bi, n, i, j) ? p * g->keep_scale : 0.0;
        load_v(g, bi, kh, j, vrow);
        for (int x = 0; x < c->dv; x++) /* step 6 */
            o[x] += p * vrow[x];
    }
}

static double *zeros(int64_t n)
{
    return calloc((size_t)(n > 0 ? n : 1), sizeof(double));
}

void oracle_result_free(oracle_result *r)
{
    free(r->o);
    free(r->stats);
    free(r->max);
    free(r->dq);
    free(r->dk);
    free(r->dv);
    free(r->d_bias);
    free(r->d_softmax_offset);
    memset(r, 0, sizeof *r);
}

/* O's logical shape: q's with the last dim dv. */
static void o_shape(const tcase *c, const tcase_buffers *buf, int64_t shape[4])
{
    for (int a = 0; a < buf->q.ndim; a++)
        shape[a] = buf->q.shape[a];
    shape[buf->q.ndim - 1] = c->dv;
}

fattn_status oracle_forward(const tcase *c, const tcase_buffers *buf,
                            const oracle_inputs *in, oracle_result *r)
{
    if (!c || !buf || !r || c->h % c->hg != 0)
        return FATTN_E_INVALID_ARG;
    geom g;
    geom_init(&g, c, buf, in);

    int64_t oshape[4];
    o_shape(c, buf, oshape);
    int ond = buf->q.ndim;
    free(r->o);
    free(r->stats);
    free(r->max);
    r->o = r->stats = r->max = NULL;
    r->n_o = numel_of(ond, oshape);
    r->n_stats = g.qf == FATTN_FORMAT_THD ? buf->q.shape[0] * c->h
                                          : (int64_t)c->b * c->h * c->sq;
    r->o = zeros(r->n_o);
    r->stats = zeros(r->n_stats);
    if (c->return_max_logit)
        r->max = zeros(r->n_stats);
    double *s = malloc(sizeof(double) * (size_t)c->skv);
    bool *kept = malloc(sizeof(bool) * (size_t)c->skv);
    double *vrow = malloc(sizeof(double) * (size_t)c->dv);
    double *o = malloc(sizeof(double) * (size_t)c->dv);
    if (!r->o || !r->stats || (c->return_max_logit && !r->max) || !s || !kept ||
        !vrow || !o) {
        free(s), free(kept), free(vrow), free(o);
        oracle_result_free(r);
        return FATTN_E_NOMEM;
    }

    for (int bi = 0; bi < c->b; bi++) {
        int len_q = oracle_len_q(c, buf, bi);
        int64_t off = oracle_off_q(c, buf, bi);
        for (int n = 0; n < c->h; n++) {
            for (int i = 0; i < len_q; i++) {
                double st, mx;
                row_forward(&g, bi, n, i, s, kept, vrow, o, &st, &mx);
                for (int x = 0; x < c->dv; x++) {
                    int64_t idx[4];
                    token_index(g.qf, off, bi, i, n, x, idx);
                    r->o[linear_index(ond, oshape, idx)] = o[x];
                }
                r->stats[stats_index(&g, bi, n, i)] = st;
                if (r->max)
                    r->max[stats_index(&g, bi, n, i)] = mx;
            }
        }
    }
    free(s), free(kept), free(vrow), free(o);
    return FATTN_OK;
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                 */
/* ------------------------------------------------------------------------ */

fattn_status oracle_backward(const tcase *c, const tcase_buffers *buf,
                             const oracle_inputs *in, bool saved,
                             oracle_result *r)
{
    if (!c || !buf || !r || c->h % c->hg != 0)
        return FATTN_E_INVALID_ARG;
    if (!saved && (!r->o || !r->stats))
        return FATTN_E_INVALID_ARG; /* needs oracle_forward first */
    geom g;
    geom_init(&g, c, buf, in);
    const int d = c->d, dv = c->dv;

    free(r->dq), free(r->dk), free(r->dv);
    free(r->d_bias), free(r->d_softmax_offset);
    r->dq = r->dk = r->dv = r->d_bias = r->d_softmax_offset = NULL;
    r->n_dq = fattn_tensor_numel(&buf->q);
    r->n_dk = fattn_tensor_numel(&buf->k);
    r->n_dv = fattn_tensor_numel(&buf->v);
    r->dq = zeros(r->n_dq);
    r->dk = zeros(r->n_dk);
    r->dv = zeros(r->n_dv);
    bool has_bias = c->bias == FATTN_BIAS_POST_SCALE_BIAS;
    r->n_bias = has_bias ? fattn_tensor_numel(&buf->bias) : 0;
    r->n_offset = g.sink ? c->h : 0;
    if (has_bias)
        r->d_bias = zeros(r->n_bias);
    if (g.sink)
        r->d_softmax_offset = zeros(r->n_offset);

    int64_t oshape[4];
    o_shape(c, buf, oshape);
    double *s = malloc(sizeof(double) * (size_t)c->skv);
    bool *kept = malloc(sizeof(bool) * (size_t)c->skv);
    double *qrow = malloc(sizeof(double) * (size_t)d);
    double *krow = malloc(sizeof(double) * (size_t)d);
    double *vrow = malloc(sizeof(double) * (size_t)dv);
    double *dorow = malloc(sizeof(double) * (size_t)dv);
    double *orow = malloc(sizeof(double) * (size_t)dv);
    if (!r->dq || !r->dk || !r->dv || (has_bias && !r->d_bias) ||
        (g.sink && !r->d_softmax_offset) || !s || !kept || !qrow || !krow ||
        !vrow || !dorow || !orow) {
        free(s), free(kept), free(qrow), free(krow), free(vrow), free(dorow),
            free(orow);
        return FATTN_E_NOMEM;
    }

    for (int bi = 0; bi < c->b; bi++) {
        int len_q = oracle_len_q(c, buf, bi);
        int64_t qoff = oracle_off_q(c, buf, bi);
        int64_t kvoff = oracle_off_kv(c, buf, bi);
        for (int n = 0; n < c->h; n++) {
            int kh = n / g.group;
            for (int i = 0; i < len_q; i++) {
                row_logits(&g, bi, n, i, s, kept);
                load_q(&g, bi, n, i, qrow);
                load_do(&g, bi, n, i, dorow);

                /* The O and Stats this backward is given. */
                double stats;
                for (int x = 0; x < dv; x++) {
                    int64_t idx[4];
                    token_index(g.qf, qoff, bi, i, n, x, idx);
                    orow[x] = saved ? read_f(&buf->o, NULL, idx)
                                    : r->o[linear_index(buf->q.ndim, oshape, idx)];
                }
                stats = saved ? saved_stats(&g, bi, n, i)
                              : r->stats[stats_index(&g, bi, n, i)];

                double dsum = 0.0; /* Dsum_i = dO[i,:] . O[i,:] */
                for (int x = 0; x < dv; x++)
                    dsum += dorow[x] * orow[x];

                if (g.sink) /* dSoftmaxOffset[n] -= exp(z - Stats_i) * Dsum_i */
                    r->d_softmax_offset[n] -= exp(sink_logit(&g, n) - stats) * dsum;

                for (int j = 0; j < c->skv; j++) {
                    if (!kept[j])
                        continue;
                    double p = exp(s[j] - stats);
                    bool keep = keep_of(&g, bi, n, i, j);
                    double pd = g.dropout ? (keep ? p * g.keep_scale : 0.0) : p;
                    load_k(&g, bi, kh, j, krow);
                    load_v(&g, bi, kh, j, vrow);

                    double dp = 0.0; /* dP_ij = dO[i,:] . v[j,:] */
                    for (int x = 0; x < dv; x++)
                        dp += dorow[x] * vrow[x];
                    double dpd = g.dropout ? (keep ? dp * g.keep_scale : 0.0) : dp;
                    double t = p * (dpd - dsum); /* T_ij */
                    double ds = t * g.scale;     /* dS_ij */

                    int64_t idx[4];
                    for (int x = 0; x < dv; x++) { /* dV[j] += Pd_ij dO[i] */
                        token_index(g.kvf, kvoff, bi, j, kh, x, idx);
                        r->dv[linear_index(buf->v.ndim, buf->v.shape, idx)] +=
                            pd * dorow[x];
                    }
                    for (int x = 0; x < d; x++) { /* dQ[i] += dS_ij k[j] */
                        token_index(g.qf, qoff, bi, i, n, x, idx);
                        r->dq[linear_index(buf->q.ndim, buf->q.shape, idx)] +=
                            ds * krow[x];
                    }
                    for (int x = 0; x < d; x++) { /* dK[j] += dS_ij q[i] */
                        token_index(g.kvf, kvoff, bi, j, kh, x, idx);
                        r->dk[linear_index(buf->k.ndim, buf->k.shape, idx)] +=
                            ds * qrow[x];
                    }
                    if (has_bias) { /* dBias[e] += T_ij over its broadcast */
                        bias_index(&buf->bias, bi, n, i, j, idx);
                        r->d_bias[linear_index(4, buf->bias.shape, idx)] += t;
                    }
                }
            }
        }
    }
    free(s), free(kept), free(qrow), free(krow), free(vrow), free(dorow),
        free(orow);
    return FATTN_OK;
}

/* ------------------------------------------------------------------------ */
/* Defined regions                                                          */
/* ------------------------------------------------------------------------ */

/* Is (format f, multi-index idx) a row of a real token? `len` and `off` give
 * each batch's length and THD offset. */
static bool row_defined(const tcase *c, const tcase_buffers *buf,
                        fattn_qkv_format f, bool is_q, const int64_t *idx)
{
    int bi, pos;
    switch (f) {
    case FATTN_FORMAT_SBHD:
        pos = (int)idx[0], bi = (int)idx[1];
        break;
    case FATTN_FORMAT_BHSD:
        bi = (int)idx[0], pos = (int)idx[2];
        break;
    case FATTN_FORMAT_THD:
        for (bi = 0; bi < c->b; bi++) {
            int64_t off = is_q ? oracle_off_q(c, buf, bi) : oracle_off_kv(c, buf, bi);
            int len = is_q ? oracle_len_q(c, buf, bi) : oracle_len_kv(c, buf, bi);
            if (idx[0] >= off && idx[0] < off + len)
                return true;
        }
        return false;
    default:
        bi = (int)idx[0], pos = (int)idx[1];
        break;
    }
    int len = is_q ? oracle_len_q(c, buf, bi) : oracle_len_kv(c, buf, bi);
    return pos < len;
}

bool oracle_defined(const tcase *c, const tcase_buffers *buf,
                    oracle_output which, const int64_t *idx)
{
    switch (which) {
    case ORACLE_O:
    case ORACLE_DQ:
        return row_defined(c, buf, q_format(c), true, idx);
    case ORACLE_DK:
    case ORACLE_DV:
        return row_defined(c, buf, kv_format(c), false, idx);
    case ORACLE_STATS:
    case ORACLE_MAX:
        if (q_format(c) == FATTN_FORMAT_THD)
            return row_defined(c, buf, FATTN_FORMAT_THD, true, idx);
        return idx[2] < oracle_len_q(c, buf, (int)idx[0]);
    default:
        return true;
    }
}
