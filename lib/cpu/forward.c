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
#include <math.h>
#include <string.h>

#include "fattn/philox.h"

#include "cpu/cpu.h"
#include "cpu/fmath.h"

#define FWD_ROWS 64

typedef struct fwd_job {
    const cpu_geom *g;
    const fattn_fwd_params *p;
    fattn_tensor stats, max; /* max may be empty */
    int64_t blocks;          /* row blocks per (bi, n) */
} fwd_job;

static fattn_status fwd_item(void *ctx, cpu_scratch *scr, int64_t item)
{
    const fwd_job *job = ctx;
    const cpu_geom *g = job->g;
    int64_t blk = item % job->blocks;
    int64_t n = (item / job->blocks) % g->h;
    int64_t bi = item / job->blocks / g->h;
    int64_t lq = g->len_q[bi];
    int64_t i0 = blk * FWD_ROWS, i1 = i0 + FWD_ROWS < lq ? i0 + FWD_ROWS : lq;
    if (i0 >= i1)
        return FATTN_OK;
    int64_t gk = n / g->group, dv = g->dv, ldk = scr->ldk, ldc = scr->ldc;
    cpu_load_kv(g, scr, bi, gk, CPU_KT | CPU_VR);

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
            cpu_key_range(g, bi, idx[r], &lo[r], &hi[r]);
            slot[r] = -1;
            if (lo[r] < hi[r]) {
                slot[r] = na;
                alo[na] = lo[r];
                ahi[na] = hi[r];
                aidx[na] = idx[r];
                cpu_load_row(&g->q, g->q_fmt, g->off_q, bi, idx[r], n, g->d,
                             scr->qrow + na * ldc);
                na++;
            }
        }
        if (na > 0)
            cpu_logits_rows(g, scr, bi, n, na, aidx, scr->qrow, ldc, alo, ahi, scr->s, ldk);

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
                st = m + fattn_cpu_logf(lsum);
                for (int64_t j = l; j < h; j++)
                    pr[j] = pr[j] / lsum;
                if (g->dropout > 0.0f && l < h) {
                    cpu_dropout_words(g, bi, n, idx[r], l, h, scr->rnd);
                    const uint32_t *rnd = scr->rnd;
                    for (int64_t j = l; j < h; j++)
                        pr[j] = rnd[j - l] >= thr ? pr[j] * keep_scale : 0.0f;
                }
                if (l < h)
                    cpu_round_io(g->io, pr + l, h - l);
                plo[r] = l;
                phi[r] = h > l ? h : l;
            }
            stat[r] = st;
            rmax[r] = rowmax;
        }
        cpu_axpy_rows(nb, scr->p, ldk, plo, phi, scr->vr, ldc, ncv, scr->orow, ldc);
        for (int r = 0; r < nb; r++) {
            cpu_store_row(o, g->q_fmt, g->off_q, bi, idx[r], n, dv, scr->orow + r * ldc);
            float *st = job->stats.data;
            st[cpu_stats_offset(g, &job->stats, bi, n, idx[r])] = stat[r];
            if (!fattn_tensor_is_empty(&job->max)) {
                float *mx = job->max.data;
                mx[cpu_stats_offset(g, &job->max, bi, n, idx[r])] = rmax[r];
            }
        }
    }
    return FATTN_OK;
}

static bool shape_is(const fattn_tensor *t, int ndim, const int64_t *shape)
{
    if (t->ndim != ndim)
        return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i])
            return false;
    return true;
}

fattn_status cpu_forward(int threads, const fattn_fwd_params *p)
{
    if (!p->aux)
        return fattn_error(FATTN_E_INVALID_ARG, "forward: aux pack is NULL");
    bool apply_dropout = p->is_training && p->dropout > 0.0f;
    cpu_geom_args a = {
        .q = &p->q, .k = &p->k, .v = &p->v, .o = &p->o,
        .bias = &p->bias, .softmax_offset = &p->softmax_offset,
        .cu_q = &p->cu_seqlens_q, .cu_kv = &p->cu_seqlens_kv,
        .cu_q_pad = &p->cu_seqlens_q_padded, .cu_kv_pad = &p->cu_seqlens_kv_padded,
        .rng_state = &p->rng_state,
        .max_seqlen_q = p->max_seqlen_q, .max_seqlen_kv = p->max_seqlen_kv,
        .attn_scale = p->attn_scale, .dropout = p->dropout,
        .apply_dropout = apply_dropout,
        .layout = p->qkv_layout, .o_format = p->o_format,
        .bias_type = p->bias_type, .mask_type = p->mask_type,
        .softmax_type = p->softmax_type,
        .win_left = p->window_size_left, .win_right = p->window_size_right,
        .bottom_right = p->bottom_right_diagonal,
        .who = "forward",
    };
    cpu_geom g;
    fattn_status st = cpu_geom_init(&g, &a);
    if (st != FATTN_OK)
        return st;

    /* TE's pack: [Stats, (Max), rng_state, (Bias), (SoftmaxOffset)]. */
    bool has_bias = p->bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
                    p->bias_type == FATTN_BIAS_POST_SCALE_BIAS;
    bool has_sink = p->softmax_type != FATTN_SOFTMAX_VANILLA;
    int want = 2 + (p->return_max_logit ? 1 : 0) + (has_bias ? 1 : 0) + (has_sink ? 1 : 0);
    int sndim;
    int64_t sshape[4];
    cpu_stats_shape(&g, &sndim, sshape);
    fattn_aux_pack *aux = p->aux;

    if (aux->n == 0) {
        /* First call of TE's protocol: describe the pack, run nothing. */
        int k = 0;
        aux->t[k++] = fattn_tensor_view(NULL, FATTN_DTYPE_FLOAT32, sndim, sshape);
        if (p->return_max_logit)
            aux->t[k++] = fattn_tensor_view(NULL, FATTN_DTYPE_FLOAT32, sndim, sshape);
        int64_t two = 2;
        aux->t[k++] = fattn_tensor_view(NULL, FATTN_DTYPE_INT64, 1, &two);
        if (has_bias) {
            aux->t[k] = p->bias;
            aux->t[k++].data = NULL;
        }
        if (has_sink) {
            aux->t[k] = p->softmax_offset;
            aux->t[k++].data = NULL;
        }
        aux->n = k;
        cpu_geom_free(&g);
        return FATTN_OK;
    }
    if (aux->n != want) {
        cpu_geom_free(&g);
        return fattn_error(FATTN_E_INVALID_ARG, "forward: aux pack has %d entries, expected %d",
                           aux->n, want);
    }
    fwd_job job = {.g = &g, .p = p, .stats = aux->t[0], .max = fattn_tensor_empty()};
    int k = 1;
    if (p->return_max_logit)
        job.max = aux->t[k++];
    const fattn_tensor *outs[2] = {&job.stats, &job.max};
    for (int i = 0; i < (p->return_max_logit ? 2 : 1); i++) {
        if (fattn_tensor_is_empty(outs[i]) || outs[i]->dtype != FATTN_DTYPE_FLOAT32 ||
            !shape_is(outs[i], sndim, sshape)) {
            cpu_geom_free(&g);
            return fattn_error(FATTN_E_SHAPE, "forward: aux %s must be a float32 tensor of "
                               "the shape the first call reported", i ? "Max" : "Stats");
        }
    }
    /* As TE does on the executing call, the pack's rng_state, Bias and
     * SoftmaxOffset entries become the inputs themselves. */
    aux->t[k++] = p->rng_state;
    if (has_bias)
        aux->t[k++] = p->bias;
    if (has_sink)
        aux->t[k++] = p->softmax_offset;

    job.blocks = (g.sq + FWD_ROWS - 1) / FWD_ROWS;
    st = cpu_parallel_for(threads, &g, g.b * g.h * job.blocks, fwd_item, &job);
    cpu_geom_free(&g);
    return st;
}
