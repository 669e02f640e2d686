/* CPU engine backward: dQ, dK, dV, dBias, dSoftmaxOffset.
 *
 * Three passes, each a parallel loop whose items write disjoint outputs:
 *   1. per (bi, n, row block): Dsum_i = dO_i . O_i, then per row the
 *      recomputed P = exp(s - Stats), dP = dO . V^T, dS, and dQ = dS . K.
 *   2. per (bi, kv head, key block): dV = Pd^T . dO and dK = dS^T . Q over
 *      the group's query heads (per-head sums rounded to io, then summed,
 *      as cuDNN's GQA reduction does) and every query row.
 *   3. per (bias row block): dBias = sum of T = P (dPd - Dsum) over the
 *      dims the bias was broadcast along.
 * dSoftmaxOffset is a short serial sum over Dsum and Stats.
 * Every recomputation of a row goes through the same code as the forward,
 * so the logits are bitwise the ones the forward used.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/philox.h"

#include "core/checked.h"
#include "cpu/cpu.h"
#include "cpu/fmath.h"

#define BWD_ROWS 64
#define BWD_KEYS 128

typedef struct bwd_job {
    const fattn_geom *g;
    const fattn_bwd_params *p;
    fattn_tensor stats, d_o, dq, dk, dv, d_bias;
    float *dsum;          /* [b][h][sq] */
    int64_t row_blocks, key_blocks, bias_blocks;
    float keep_scale;
    uint32_t thr;
} bwd_job;

/* For nr (<= CPU_ROWS) rows, positions i[r] of (bi, n) with kept keys
 * [lo[r], hi[r]) (non-empty) and finite Stats, whose Q and dO rows are in
 * scr->qrow / scr->dorow (row r at r * ldc): P (undropped) into scr->p, dS
 * (rounded to io) into scr->ds, Pd (dropped, rounded to io) into scr->pd if
 * want_pd, T into scr->t if want_t (row r at r * ldk). */
static void bwd_rows(const bwd_job *job, cpu_scratch *scr, int64_t bi, int64_t n, int nr,
                     const int64_t *i, const int64_t *lo, const int64_t *hi, bool want_pd,
                     bool want_t)
{
    const fattn_geom *g = job->g;
    int64_t ldk = scr->ldk, ldc = scr->ldc;
    const float *st = job->stats.data;
    fattn__cpu_logits_rows(g, scr, bi, n, nr, i, scr->qrow, ldc, lo, hi, scr->s, ldk);
    int64_t ul = lo[0], uh = hi[0];
    for (int r = 1; r < nr; r++) {
        ul = lo[r] < ul ? lo[r] : ul;
        uh = hi[r] > uh ? hi[r] : uh;
    }
    /* dP = dO . V^T, head dim ascending from 0.0f */
    fattn__cpu_dot_rows(nr, scr->dorow, ldc, g->dv, scr->vt, ldk, ul, uh, scr->dp, ldk);
    for (int r = 0; r < nr; r++) {
        float *s = scr->s + r * ldk, *p = scr->p + r * ldk, *dp = scr->dp + r * ldk;
        float *ds = scr->ds + r * ldk, *pd = want_pd ? scr->pd + r * ldk : NULL;
        float *t = want_t ? scr->t + r * ldk : NULL;
        int64_t l = lo[r], h = hi[r];
        float stat = st[fattn__geom_stats_offset(g, &job->stats, bi, n, i[r])];
        float dsum = job->dsum[(bi * g->h + n) * g->sq + i[r]];
        for (int64_t j = l; j < h; j++)
            p[j] = fattn_cpu_expf(s[j] - stat);
        if (g->dropout > 0.0f) {
            fattn__cpu_dropout_words(g, bi, n, i[r], l, h, scr->rnd);
            const uint32_t *rnd = scr->rnd;
            for (int64_t j = l; j < h; j++) {
                bool keep = rnd[j - l] >= job->thr;
                if (pd)
                    pd[j] = keep ? p[j] * job->keep_scale : 0.0f;
                dp[j] = keep ? dp[j] * job->keep_scale : 0.0f;
            }
        } else if (pd) {
            for (int64_t j = l; j < h; j++)
                pd[j] = p[j];
        }
        float scale = g->scale;
        if (t) {
            for (int64_t j = l; j < h; j++) {
                float tj = p[j] * (dp[j] - dsum);
                t[j] = tj;
                ds[j] = tj * scale;
            }
        } else {
            for (int64_t j = l; j < h; j++)
                ds[j] = (p[j] * (dp[j] - dsum)) * scale;
        }
        fattn__cpu_round_io(g->io, ds + l, h - l);
        if (pd)
            fattn__cpu_round_io(g->io, pd + l, h - l);
    }
}

/* Pass 1: Dsum and dQ. */
static fattn_status bwd_dq_item(void *ctx, cpu_scratch *scr, int64_t item)
{
    bwd_job *job = ctx;
    const fattn_geom *g = job->g;
    int64_t blk = item % job->row_blocks;
    int64_t n = (item / job->row_blocks) % g->h;
    int64_t bi = item / job->row_blocks / g->h;
    int64_t lq = g->len_q[bi];
    int64_t i0 = blk * BWD_ROWS, i1 = i0 + BWD_ROWS < lq ? i0 + BWD_ROWS : lq;
    if (i0 >= i1)
        return FATTN_OK;
    int64_t gk = n / g->group, d = g->d, dv = g->dv, ldc = scr->ldc, ldk = scr->ldk;
    int64_t ncd = (d + 7) / 8 * 8;
    fattn__cpu_load_kv(g, scr, bi, gk, CPU_KT | CPU_KR | CPU_VT);
    float *acc = scr->acc; /* [CPU_ROWS][ldc] dQ rows */
    const float *stp = job->stats.data;
    for (int64_t ib = i0; ib < i1; ib += CPU_ROWS) {
        int nb = (int)(i1 - ib < CPU_ROWS ? i1 - ib : CPU_ROWS);
        int64_t alo[CPU_ROWS], ahi[CPU_ROWS], aidx[CPU_ROWS];
        int na = 0, slot[CPU_ROWS];
        for (int r = 0; r < nb; r++) {
            int64_t i = ib + r;
            float *dorow = scr->dorow + na * ldc, *orow = scr->orow;
            fattn__cpu_load_row(&job->d_o, g->q_fmt, g->off_q, bi, i, n, dv, dorow);
            fattn__cpu_load_row(&g->o, g->q_fmt, g->off_q, bi, i, n, dv, orow);
            float dsum = 0.0f;
            for (int64_t c = 0; c < dv; c++)
                dsum = dsum + dorow[c] * orow[c];
            job->dsum[(bi * g->h + n) * g->sq + i] = dsum;
            int64_t lo, hi;
            fattn__cpu_key_range(g, bi, i, &lo, &hi);
            float stat = stp[fattn__geom_stats_offset(g, &job->stats, bi, n, i)];
            slot[r] = -1;
            if (lo < hi && stat != -INFINITY) {
                for (int64_t c = dv; c < ldc; c++)
                    dorow[c] = 0.0f;
                fattn__cpu_load_row(&g->q, g->q_fmt, g->off_q, bi, i, n, d, scr->qrow + na * ldc);
                slot[r] = na;
                alo[na] = lo;
                ahi[na] = hi;
                aidx[na] = i;
                na++;
            }
        }
        for (int64_t e = 0; e < CPU_ROWS * ldc; e++)
            acc[e] = 0.0f;
        if (na > 0) {
            bwd_rows(job, scr, bi, n, na, aidx, alo, ahi, false, false);
            fattn__cpu_axpy_rows(na, scr->ds, ldk, alo, ahi, scr->kr, ldc, ncd, acc, ldc);
        }
        for (int r = 0; r < nb; r++) {
            /* rows without a kept key (or with Stats -inf) get dQ = 0 */
            if (slot[r] < 0) {
                float *zr = scr->orow;
                for (int64_t c = 0; c < d; c++)
                    zr[c] = 0.0f;
                fattn__cpu_store_row(&job->dq, g->q_fmt, g->off_q, bi, ib + r, n, d, zr);
            } else {
                fattn__cpu_store_row(&job->dq, g->q_fmt, g->off_q, bi, ib + r, n, d,
                              acc + slot[r] * ldc);
            }
        }
    }
    return FATTN_OK;
}

/* Pass 2: dK and dV for a block of keys of one (bi, kv head). */
static fattn_status bwd_dkv_item(void *ctx, cpu_scratch *scr, int64_t item)
{
    bwd_job *job = ctx;
    const fattn_geom *g = job->g;
    int64_t blk = item % job->key_blocks;
    int64_t gk = (item / job->key_blocks) % g->hg;
    int64_t bi = item / job->key_blocks / g->hg;
    int64_t lq = g->len_q[bi], lk = g->len_kv[bi];
    int64_t j0 = blk * BWD_KEYS, j1 = j0 + BWD_KEYS < lk ? j0 + BWD_KEYS : lk;
    if (j0 >= j1)
        return FATTN_OK;
    int64_t d = g->d, dv = g->dv, nk = j1 - j0, ldc = scr->ldc, ldk = scr->ldk;
    int64_t ncd = (d + 7) / 8 * 8, ncv = (dv + 7) / 8 * 8;
    fattn__cpu_load_kv(g, scr, bi, gk, CPU_KT | CPU_VT);
    /* acc: per-head dK [nk][ldc] and dV [nk][ldc]; acc2/acc3: group sums. */
    float *hdk = scr->acc, *hdv = scr->acc + nk * ldc;
    float *gdk = scr->acc2, *gdv = scr->acc3;
    bool grouped = g->group > 1;
    if (grouped) {
        memset(gdk, 0, (size_t)(nk * ldc) * sizeof(float));
        memset(gdv, 0, (size_t)(nk * ldc) * sizeof(float));
    }
    const float *stp = job->stats.data;
    for (int64_t hn = 0; hn < g->group; hn++) {
        int64_t n = gk * g->group + hn;
        memset(hdk, 0, (size_t)(nk * ldc) * sizeof(float));
        memset(hdv, 0, (size_t)(nk * ldc) * sizeof(float));
        int64_t alo[CPU_ROWS], ahi[CPU_ROWS], aidx[CPU_ROWS];
        int na = 0;
        for (int64_t i = 0; i < lq || na > 0; i++) {
            if (i < lq) {
                int64_t lo, hi;
                fattn__cpu_key_range(g, bi, i, &lo, &hi);
                if (lo < j0)
                    lo = j0;
                if (hi > j1)
                    hi = j1;
                if (lo >= hi)
                    continue;
                float stat = stp[fattn__geom_stats_offset(g, &job->stats, bi, n, i)];
                if (stat == -INFINITY)
                    continue;
                float *qrow = scr->qrow + na * ldc, *dorow = scr->dorow + na * ldc;
                fattn__cpu_load_row(&g->q, g->q_fmt, g->off_q, bi, i, n, d, qrow);
                fattn__cpu_load_row(&job->d_o, g->q_fmt, g->off_q, bi, i, n, dv, dorow);
                for (int64_t c = d; c < ldc; c++)
                    qrow[c] = 0.0f;
                for (int64_t c = dv; c < ldc; c++)
                    dorow[c] = 0.0f;
                alo[na] = lo;
                ahi[na] = hi;
                aidx[na] = i;
                na++;
                if (na < CPU_ROWS && i + 1 < lq)
                    continue;
            }
            /* rows ascending: dV += Pd^T dO, dK += dS^T Q */
            bwd_rows(job, scr, bi, n, na, aidx, alo, ahi, true, false);
            fattn__cpu_rank_rows(na, scr->pd, ldk, alo, ahi, scr->dorow, ldc, ncv, j0, j1, hdv, ldc);
            fattn__cpu_rank_rows(na, scr->ds, ldk, alo, ahi, scr->qrow, ldc, ncd, j0, j1, hdk, ldc);
            na = 0;
            if (i >= lq)
                break;
        }
        if (grouped) {
            for (int64_t j = 0; j < nk; j++) {
                float *a = gdk + j * ldc, *hrow = hdk + j * ldc;
                for (int64_t c = 0; c < d; c++)
                    a[c] = a[c] + fattn_round_f32(g->io, hrow[c]);
                a = gdv + j * ldc;
                hrow = hdv + j * ldc;
                for (int64_t c = 0; c < dv; c++)
                    a[c] = a[c] + fattn_round_f32(g->io, hrow[c]);
            }
        }
    }
    const float *rdk = grouped ? gdk : hdk, *rdv = grouped ? gdv : hdv;
    for (int64_t j = j0; j < j1; j++) {
        fattn__cpu_store_row(&job->dk, g->kv_fmt, g->off_kv, bi, j, gk, d, rdk + (j - j0) * ldc);
        fattn__cpu_store_row(&job->dv, g->kv_fmt, g->off_kv, bi, j, gk, dv, rdv + (j - j0) * ldc);
    }
    return FATTN_OK;
}

/* Pass 3: one block of bias rows (bb, bh, rows [r0, r1) of the bias's sq dim). */
static fattn_status bwd_dbias_item(void *ctx, cpu_scratch *scr, int64_t item)
{
    bwd_job *job = ctx;
    const fattn_geom *g = job->g;
    const fattn_tensor *db = &job->d_bias;
    int64_t bb_n = db->shape[0], bh_n = db->shape[1], bs_n = db->shape[2];
    int64_t skv = db->shape[3];
    int64_t blk = item % job->bias_blocks;
    int64_t bh = (item / job->bias_blocks) % bh_n;
    int64_t bb = item / job->bias_blocks / bh_n;
    int64_t r0 = blk * BWD_ROWS, r1 = r0 + BWD_ROWS < bs_n ? r0 + BWD_ROWS : bs_n;
    float *acc = scr->acc; /* [r1 - r0][skv] */
    memset(acc, 0, (size_t)((r1 - r0) * skv) * sizeof(float));
    int64_t b_lo = bb_n == 1 ? 0 : bb, b_hi = bb_n == 1 ? g->b : bb + 1;
    int64_t n_lo = bh_n == 1 ? 0 : bh, n_hi = bh_n == 1 ? g->h : bh + 1;
    for (int64_t bi = b_lo; bi < b_hi; bi++) {
        int64_t lq = g->len_q[bi];
        for (int64_t n = n_lo; n < n_hi; n++) {
            fattn__cpu_load_kv(g, scr, bi, n / g->group, CPU_KT | CPU_VT);
            for (int64_t r = r0; r < r1; r++) {
                int64_t i_lo = bs_n == 1 ? 0 : r, i_hi = bs_n == 1 ? lq : (r + 1 < lq ? r + 1 : lq);
                float *arow = acc + (r - r0) * skv;
                for (int64_t i = i_lo; i < i_hi; i++) {
                    int64_t lo, hi;
                    fattn__cpu_key_range(g, bi, i, &lo, &hi);
                    float stat = ((const float *)job->stats.data)[fattn__geom_stats_offset(g, &job->stats, bi, n, i)];
                    if (lo >= hi || stat == -INFINITY)
                        continue;
                    fattn__cpu_load_row(&g->q, g->q_fmt, g->off_q, bi, i, n, g->d, scr->qrow);
                    fattn__cpu_load_row(&job->d_o, g->q_fmt, g->off_q, bi, i, n, g->dv, scr->dorow);
                    bwd_rows(job, scr, bi, n, 1, &i, &lo, &hi, false, true);
                    const float *t = scr->t;
                    for (int64_t j = lo; j < hi; j++)
                        arow[j] = arow[j] + t[j];
                }
            }
        }
    }
    int64_t sd = db->strides[3];
    for (int64_t r = r0; r < r1; r++) {
        int64_t base = bb * db->strides[0] + bh * db->strides[1] + r * db->strides[2];
        for (int64_t j = 0; j < skv; j++)
            fattn_store_f32(db->data, db->dtype, base + j * sd, acc[(r - r0) * skv + j]);
    }
    return FATTN_OK;
}

static fattn_status check_grad(const fattn_tensor *grad, const fattn_tensor *like,
                               const char *name)
{
    if (fattn_tensor_is_empty(grad))
        return fattn_error(FATTN_E_INVALID_ARG, "backward: %s output is missing", name);
    if (grad->dtype != like->dtype || grad->ndim != like->ndim)
        return fattn_error(FATTN_E_SHAPE, "backward: %s must match its input's dtype and rank",
                           name);
    for (int i = 0; i < like->ndim; i++)
        if (grad->shape[i] != like->shape[i])
            return fattn_error(FATTN_E_SHAPE, "backward: %s dim %d is %lld, input has %lld",
                               name, i, (long long)grad->shape[i], (long long)like->shape[i]);
    return FATTN_OK;
}

fattn_status fattn__cpu_backward(int threads, const fattn_bwd_params *p, const fattn_bwd_call *c)
{
    const fattn_geom *g = c->geom;
    assert(g);
    bool has_bias = p->attn.bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
                    p->attn.bias_type == FATTN_BIAS_POST_SCALE_BIAS;
    bool has_sink = p->attn.softmax_type != FATTN_SOFTMAX_VANILLA;
    const fattn_tensor bias = c->bias, offset = c->softmax_offset;
    fattn_status st;
    bwd_job job = {.g = g, .p = p, .stats = c->stats, .d_o = p->d_o, .dq = p->dq,
                   .dk = p->dk, .dv = p->dv, .d_bias = p->d_bias};
    if ((st = check_grad(&p->d_o, &p->attn.o, "dO")) != FATTN_OK ||
        (st = check_grad(&p->dq, &p->attn.q, "dQ")) != FATTN_OK ||
        (st = check_grad(&p->dk, &p->attn.k, "dK")) != FATTN_OK ||
        (st = check_grad(&p->dv, &p->attn.v, "dV")) != FATTN_OK ||
        (has_bias && !fattn_tensor_is_empty(&p->d_bias) &&
         (st = check_grad(&p->d_bias, &bias, "dBias")) != FATTN_OK))
        return st;
    if (has_sink && !fattn_tensor_is_empty(&p->d_softmax_offset) &&
        (st = check_grad(&p->d_softmax_offset, &offset, "dSoftmaxOffset")) != FATTN_OK)
        return st;
    job.keep_scale = g->dropout > 0.0f ? 1.0f / (1.0f - g->dropout) : 1.0f;
    job.thr = fattn_dropout_threshold(g->dropout);
    int64_t nsum;
    if (!fattn_mul_i64(g->b, g->h, &nsum) || !fattn_mul_i64(nsum, g->sq, &nsum))
        return fattn_error(FATTN_E_OVERFLOW, "backward: Dsum [b=%lld, h=%lld, max_seqlen_q=%lld] "
                           "overflows", (long long)g->b, (long long)g->h, (long long)g->sq);
    job.dsum = calloc((size_t)nsum, sizeof(float));
    if (!job.dsum)
        return fattn_error(FATTN_E_NOMEM, "backward: cannot allocate Dsum");
    job.row_blocks = (g->sq + BWD_ROWS - 1) / BWD_ROWS;
    job.key_blocks = (g->skv + BWD_KEYS - 1) / BWD_KEYS;
    st = fattn__cpu_parallel_for(threads, g, g->b * g->h * job.row_blocks, bwd_dq_item, &job);
    if (st != FATTN_OK)
        goto out;
    st = fattn__cpu_parallel_for(threads, g, g->b * g->hg * job.key_blocks, bwd_dkv_item, &job);
    if (st != FATTN_OK)
        goto out;
    if (has_bias && !fattn_tensor_is_empty(&p->d_bias)) {
        job.bias_blocks = (p->d_bias.shape[2] + BWD_ROWS - 1) / BWD_ROWS;
        st = fattn__cpu_parallel_for(threads, g,
                              p->d_bias.shape[0] * p->d_bias.shape[1] * job.bias_blocks,
                              bwd_dbias_item, &job);
        if (st != FATTN_OK)
            goto out;
    }
    if (has_sink && !fattn_tensor_is_empty(&p->d_softmax_offset)) {
        /* dz_n = -sum_{bi, i} exp(z_n - Stats_i) * Dsum_i, bi then i ascending. */
        const fattn_tensor *dso = &p->d_softmax_offset;
        for (int64_t n = 0; n < g->h; n++) {
            float acc = 0.0f;
            for (int64_t bi = 0; bi < g->b; bi++)
                for (int64_t i = 0; i < g->len_q[bi]; i++) {
                    const float *stp = job.stats.data;
                    float stat = stp[fattn__geom_stats_offset(g, &job.stats, bi, n, i)];
                    float ps = fattn_cpu_expf(g->sink[n] - stat);
                    acc = acc + ps * job.dsum[(bi * g->h + n) * g->sq + i];
                }
            ((float *)dso->data)[n * dso->strides[1]] = -acc;
        }
    }
out:
    free(job.dsum);
    return st;
}
