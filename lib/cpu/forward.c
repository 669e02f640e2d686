/* CPU engine forward: O, Stats (and Max) for every query row.
 *
 * Work item = (batch bi, query head n, block of FWD_ROWS query rows). Each
 * item loads its kv head's K^T and V once as float32, then per row:
 *   s = (q . K^T) * scale (+ bias) (+ alibi)           kept keys only
 *   M = max(s, sink), L = sum exp(s - M) (+ exp(sink - M))
 *   Stats = M + log L, Max = max(s)
 *   P = exp(s - M) / L, dropout-scaled, rounded to io
 *   O = P . V (float32, key index ascending), rounded to io
 * (docs/numerics.md has the definitions and rounding points.)
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "fattn/philox.h"

#include "cpu/cpu.h"
#include "cpu/fmath.h"

#define FWD_ROWS 64

typedef struct fwd_job {
    const fattn_geom *g;
    const fattn_fwd_params *p;
    fattn_tensor stats, max; /* max may be empty */
    int64_t blocks;          /* row blocks per (bi, n) */
} fwd_job;

static fattn_status fwd_item(void *ctx, cpu_scratch *scr, int64_t item)
{
    const fwd_job *job = ctx;
    const fattn_geom *g = job->g;
    int64_t blk = item % job->blocks;
    int64_t n = (item / job->blocks) % g->h;
    int64_t bi = item / job->blocks / g->h;
    int64_t lq = g->len_q[bi];
    int64_t i0 = blk * FWD_ROWS, i1 = i0 + FWD_ROWS < lq ? i0 + FWD_ROWS : lq;
    if (i0 >= i1)
        return FATTN_OK;
    int64_t gk = n / g->group, dv = g->dv, ldk = scr->ldk, ldc = scr->ldc;
    fattn__cpu_load_kv(g, scr, bi, gk, CPU_KT | CPU_VR);

    const bool has_sink = g->sink != NULL;
    const float z = has_sink ? g->sink[n] : 0.0f;
    const float keep_scale = g->dropout > 0.0f ? 1.0f / (1.0f - g->dropout) : 1.0f;
    const uint32_t thr = fattn_dropout_threshold(g->dropout);
    fattn_tensor *o = (fattn_tensor *)&g->o;
    const int64_t ncv = (dv + 7) / 8 * 8;

    /* CPU_ROWS query rows at a time: their logits in one register-blocked
     * pass over K^T, their P.V in one pass over V (each row still sums its
     * own keys in ascending order). */
    for (int64_t ib = i0; ib < i1; ib += CPU_ROWS) {
        int nb = (int)(i1 - ib < CPU_ROWS ? i1 - ib : CPU_ROWS);
        int64_t lo[CPU_ROWS], hi[CPU_ROWS], idx[CPU_ROWS];
        int64_t alo[CPU_ROWS], ahi[CPU_ROWS], aidx[CPU_ROWS];
        int na = 0, slot[CPU_ROWS];
        for (int r = 0; r < nb; r++) {
            idx[r] = ib + r;
            fattn__cpu_key_range(g, bi, idx[r], &lo[r], &hi[r]);
            slot[r] = -1;
            if (lo[r] < hi[r]) {
                slot[r] = na;
                alo[na] = lo[r];
                ahi[na] = hi[r];
                aidx[na] = idx[r];
                fattn__cpu_load_row(&g->q, g->q_fmt, g->off_q, bi, idx[r], n, g->d,
                             scr->qrow + na * ldc);
                na++;
            }
        }
        if (na > 0)
            fattn__cpu_logits_rows(g, scr, bi, n, na, aidx, scr->qrow, ldc, alo, ahi, scr->s, ldk);

        int64_t plo[CPU_ROWS], phi[CPU_ROWS];
        float stat[CPU_ROWS], rmax[CPU_ROWS];
        for (int r = 0; r < nb; r++) {
            float *s = scr->s + (slot[r] < 0 ? 0 : slot[r]) * ldk, *pr = scr->p + r * ldk;
            float *orow = scr->orow + r * ldc;
            int64_t l = lo[r], h = hi[r];
            float rowmax = -INFINITY;
            if (l < h) {
                for (int64_t j = l; j < h; j++)
                    rowmax = s[j] > rowmax ? s[j] : rowmax;
            }
            float m = rowmax;
            if (has_sink && z > m)
                m = z;
            float st, lsum = 0.0f;
            for (int64_t c = 0; c < ncv; c++)
                orow[c] = 0.0f;
            plo[r] = phi[r] = 0;
            if (m == -INFINITY) {
                /* No kept key and no sink: O = 0, Stats = -inf (docs). */
                st = -INFINITY;
            } else {
                for (int64_t j = l; j < h; j++)
                    pr[j] = fattn_cpu_expf(s[j] - m);
                for (int64_t j = l; j < h; j++)
                    lsum = lsum + pr[j];
                if (has_sink)
                    lsum = lsum + fattn_cpu_expf(z - m);
                st = m + fattn__cpu_logf(lsum);
                for (int64_t j = l; j < h; j++)
                    pr[j] = pr[j] / lsum;
                if (g->dropout > 0.0f && l < h) {
                    fattn__cpu_dropout_words(g, bi, n, idx[r], l, h, scr->rnd);
                    const uint32_t *rnd = scr->rnd;
                    for (int64_t j = l; j < h; j++)
                        pr[j] = rnd[j - l] >= thr ? pr[j] * keep_scale : 0.0f;
                }
                if (l < h)
                    fattn__cpu_round_io(g->io, pr + l, h - l);
                plo[r] = l;
                phi[r] = h > l ? h : l;
            }
            stat[r] = st;
            rmax[r] = rowmax;
        }
        fattn__cpu_axpy_rows(nb, scr->p, ldk, plo, phi, scr->vr, ldc, ncv, scr->orow, ldc);
        for (int r = 0; r < nb; r++) {
            fattn__cpu_store_row(o, g->q_fmt, g->off_q, bi, idx[r], n, dv, scr->orow + r * ldc);
            float *st = job->stats.data;
            st[fattn__geom_stats_offset(g, &job->stats, bi, n, idx[r])] = stat[r];
            if (!fattn_tensor_is_empty(&job->max)) {
                float *mx = job->max.data;
                mx[fattn__geom_stats_offset(g, &job->max, bi, n, idx[r])] = rmax[r];
            }
        }
    }
    return FATTN_OK;
}

fattn_status fattn__cpu_forward(int threads, const fattn_fwd_params *p, const fattn_fwd_call *c)
{
    const fattn_geom *g = c->geom;
    assert(g && !fattn_tensor_is_empty(&c->stats));
    fwd_job job = {.g = g, .p = p, .stats = c->stats, .max = c->max};
    job.blocks = (g->sq + FWD_ROWS - 1) / FWD_ROWS;
    return fattn__cpu_parallel_for(threads, g, g->b * g->h * job.blocks, fwd_item, &job);
}
