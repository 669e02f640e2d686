/* CPU engine, FP8 attention: cuDNN's FP8 SDPA quantisation points.
 *
 * Forward, per (bi, head n, query row i), codes decoded exactly to float32:
 *   s_j  = ((q . k_j) * scale) * descale_q * descale_k          kept keys
 *   P    = softmax(s) in float32 (Stats = M + log L), dropout-scaled
 *   amax_s = max |P|;  P8 = encode(P * scale_s) in s_dtype
 *   O    = (sum_j decode(P8_j) * v_j) * descale_s * descale_v
 *   amax_o = max |O|;  O stored as encode(O * scale_o), or rounded to O's
 *   float16/bfloat16 dtype without scaling.
 * Backward recomputes s and P from Stats and, per row,
 *   Dsum = (dO . O) * descale_do * descale_o
 *   dP_j = (dO . v_j) * descale_do * descale_v (dropout-scaled)
 *   dS_j = P_j * (dP_j - Dsum);  amax_dp = max |dS|;  dS8 = encode(dS * scale_dp)
 *   dQ   = (sum_j dS8_j k_j) * descale_dp * descale_k * scale
 *   dK_j = (sum_heads sum_i dS8_ij q_i) * descale_dp * descale_q * scale
 *   dV_j = (sum_heads sum_i P8_ij dO_i) * descale_s * descale_do
 * each gradient's amax before its scale_dX, stored as O is. The order of
 * every sum is fixed (head dim, then keys, then queries, then the group's
 * heads, ascending); amax is a max, exact in any order, combined over work
 * items after the loop. docs/numerics.md, "FP8 attention", says why these
 * points.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/fp8.h"
#include "fattn/philox.h"

#include "core/checked.h"
#include "cpu/cpu.h"
#include "cpu/fmath.h"

#define FP8_ROWS 32
#define FP8_KEYS 64

static float fp8_q(fattn_dtype t, float v, float scale)
{
    return fattn_fp8_decode(t, fattn_fp8_quantize(t, v, scale));
}

static float amax_of(const float *x, int64_t n, float m)
{
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        m = a > m ? a : m;
    }
    return m;
}

/* Store a row of float32 results: FP8 outputs quantised with their scale,
 * float16/bfloat16 ones rounded as they are. */
static void store_row_q(fattn_tensor *t, fattn_qkv_format fmt, const int32_t *off,
                        int64_t bi, int64_t pos, int64_t n, int64_t width, const float *in,
                        float scale)
{
    int64_t o = fattn__geom_row_offset(t, fmt, off, bi, pos, n);
    int64_t sd = t->strides[t->ndim - 1];
    unsigned char *p = t->data;
    for (int64_t c = 0; c < width; c++) {
        if (fattn_dtype_is_fp8(t->dtype))
            p[o + c * sd] = fattn_fp8_quantize(t->dtype, in[c], scale);
        else
            fattn_store_f32(t->data, t->dtype, o + c * sd, in[c]);
    }
}

/* Logits of one row for keys [lo, hi): K rows are in scr->kr. */
static void fp8_logits(const fattn_geom *g, const cpu_scratch *scr, const float *q,
                       int64_t lo, int64_t hi, float dq, float dk, float *s)
{
    for (int64_t j = lo; j < hi; j++) {
        const float *kj = scr->kr + j * scr->ldc;
        float acc = 0.0f;
        for (int64_t c = 0; c < g->d; c++)
            acc = acc + q[c] * kj[c];
        s[j] = ((acc * g->scale) * dq) * dk;
    }
}

static float dot_v(const float *a, const float *b, int64_t n)
{
    float acc = 0.0f;
    for (int64_t c = 0; c < n; c++)
        acc = acc + a[c] * b[c];
    return acc;
}

/* ---- forward ----------------------------------------------------------- */

typedef struct fp8_fwd_job {
    const fattn_geom *g;
    const fattn_fp8_fwd *f;
    fattn_tensor stats, max;
    int64_t blocks;
    float *amax_s, *amax_o; /* per item */
} fp8_fwd_job;

/* One query row: Stats (returned), the row max into *rmax, O into orow. */
static float fp8_fwd_row(const fp8_fwd_job *job, cpu_scratch *scr, int64_t bi, int64_t n,
                         int64_t i, float *orow, float *rmax, float *am_s)
{
    const fattn_geom *g = job->g;
    const fattn_fp8_fwd *f = job->f;
    int64_t lo, hi;
    fattn__cpu_key_range(g, bi, i, &lo, &hi);
    float *s = scr->s, *p = scr->p;
    for (int64_t c = 0; c < g->dv; c++)
        orow[c] = 0.0f;
    *rmax = -INFINITY;
    if (lo >= hi)
        return -INFINITY; /* no kept key: O = 0, Stats = -inf (as F16) */
    fp8_logits(g, scr, scr->qrow, lo, hi, f->descale_q, f->descale_k, s);
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = lo; j < hi; j++)
        m = s[j] > m ? s[j] : m;
    *rmax = m;
    for (int64_t j = lo; j < hi; j++)
        p[j] = fattn_cpu_expf(s[j] - m);
    for (int64_t j = lo; j < hi; j++)
        l = l + p[j];
    float st = m + fattn__cpu_logf(l);
    for (int64_t j = lo; j < hi; j++)
        p[j] = p[j] / l;
    if (g->dropout > 0.0f) {
        const float keep_scale = 1.0f / (1.0f - g->dropout);
        const uint32_t thr = fattn_dropout_threshold(g->dropout);
        fattn__cpu_dropout_words(g, bi, n, i, lo, hi, scr->rnd);
        for (int64_t j = lo; j < hi; j++)
            p[j] = scr->rnd[j - lo] >= thr ? p[j] * keep_scale : 0.0f;
    }
    *am_s = amax_of(p + lo, hi - lo, *am_s);
    for (int64_t j = lo; j < hi; j++) {
        float pj = fp8_q(f->s_dtype, p[j], f->scale_s);
        const float *vj = scr->vr + j * scr->ldc;
        for (int64_t c = 0; c < g->dv; c++)
            orow[c] = orow[c] + pj * vj[c];
    }
    for (int64_t c = 0; c < g->dv; c++)
        orow[c] = (orow[c] * f->descale_s) * f->descale_v;
    return st;
}

/* A row pass's work item: block `item % blocks` of FP8_ROWS query rows of
 * head n of batch bi (items ordered block, head, batch), as the rows
 * [*i0, *i1) below the batch's query length (empty past it). */
static void fp8_row_item(const fattn_geom *g, int64_t blocks, int64_t item, int64_t *bi,
                         int64_t *n, int64_t *i0, int64_t *i1)
{
    int64_t blk = item % blocks;
    *n = (item / blocks) % g->h;
    *bi = item / blocks / g->h;
    int64_t lq = g->len_q[*bi];
    *i0 = blk * FP8_ROWS;
    *i1 = *i0 + FP8_ROWS < lq ? *i0 + FP8_ROWS : lq;
}

static fattn_status fp8_fwd_item(void *ctx, cpu_scratch *scr, int64_t item)
{
    fp8_fwd_job *job = ctx;
    const fattn_geom *g = job->g;
    int64_t bi, n, i0, i1;
    fp8_row_item(g, job->blocks, item, &bi, &n, &i0, &i1);
    float am_s = 0.0f, am_o = 0.0f;
    if (i0 < i1)
        fattn__cpu_load_kv(g, scr, bi, n / g->group, CPU_KR | CPU_VR);
    for (int64_t i = i0; i < i1; i++) {
        float rmax, *orow = scr->orow;
        fattn__cpu_load_row(&g->q, g->q_fmt, g->off_q, bi, i, n, g->d, scr->qrow);
        float st = fp8_fwd_row(job, scr, bi, n, i, orow, &rmax, &am_s);
        am_o = amax_of(orow, g->dv, am_o);
        store_row_q((fattn_tensor *)&g->o, g->q_fmt, g->off_q, bi, i, n, g->dv, orow,
                    job->f->scale_o);
        float *stp = job->stats.data;
        stp[fattn__geom_stats_offset(g, &job->stats, bi, n, i)] = st;
        if (!fattn_tensor_is_empty(&job->max)) {
            float *mx = job->max.data;
            mx[fattn__geom_stats_offset(g, &job->max, bi, n, i)] = rmax;
        }
    }
    job->amax_s[item] = am_s;
    job->amax_o[item] = am_o;
    return FATTN_OK;
}

/* What the CPU FP8 path does not model is the support table's (rows
 * fp8_bias_engines, fp8_softmax_engines), refused by the dispatch before
 * the engine runs: here only asserted. Unequal head dims (TE's FP8
 * inference takes d_qk 192 / d_v 128) run as the f16 path runs them: Q.K
 * over d, P.V over dv. The S dtype is the call's own fault. */
static fattn_status fp8_check(const char *who, fattn_bias_type bias, fattn_softmax_type sm,
                              fattn_dtype s_dtype, const fattn_geom *g)
{
    assert(bias == FATTN_BIAS_NO_BIAS && sm == FATTN_SOFTMAX_VANILLA);
    (void)bias, (void)sm, (void)g;
    if (!fattn_dtype_is_fp8(s_dtype))
        return fattn_error(FATTN_E_DTYPE, "%s: FP8 attention's S dtype must be FP8, got %s",
                           who, fattn_dtype_name(s_dtype));
    return FATTN_OK;
}

static float reduce_amax(const float *a, int64_t n)
{
    return amax_of(a, n, 0.0f);
}

fattn_status fattn__cpu_fp8_forward(int threads, const fattn_fwd_params *p, const fattn_fwd_call *c)
{
    const fattn_geom *g = c->geom;
    const fattn_fp8_fwd *f = p->fp8;
    assert(g && f);
    fattn_status st = fp8_check("FP8 forward", p->attn.bias_type, p->attn.softmax_type, f->s_dtype, g);
    if (st != FATTN_OK)
        return st;
    if (!f->amax_s || !f->amax_o)
        return fattn_error(FATTN_E_MISSING_FIELD, "FP8 forward: amax_s and amax_o must point "
                           "at a float each");
    fp8_fwd_job job = {.g = g, .f = f, .stats = c->stats, .max = c->max};
    job.blocks = (g->sq + FP8_ROWS - 1) / FP8_ROWS;
    int64_t items = g->b * g->h * job.blocks;
    job.amax_s = calloc((size_t)items, sizeof(float));
    job.amax_o = calloc((size_t)items, sizeof(float));
    if (!job.amax_s || !job.amax_o) {
        st = fattn_error(FATTN_E_NOMEM, "FP8 forward: cannot allocate amax partials");
        goto out;
    }
    st = fattn__cpu_parallel_for(threads, g, items, fp8_fwd_item, &job);
    if (st != FATTN_OK)
        goto out;
    *f->amax_s = reduce_amax(job.amax_s, items);
    *f->amax_o = reduce_amax(job.amax_o, items);
out:
    free(job.amax_s);
    free(job.amax_o);
    return st;
}

/* ---- backward ---------------------------------------------------------- */

typedef struct fp8_bwd_job {
    const fattn_geom *g;
    const fattn_fp8_bwd *f;
    fattn_tensor stats, d_o, dq, dk, dv;
    float *dsum;               /* [b][h][sq] */
    int64_t row_blocks, key_blocks;
    float *am_dp, *am_dq;      /* per pass-1 item */
    float *am_dk, *am_dv;      /* per pass-2 item */
} fp8_bwd_job;

/* Row i of (bi, n), keys [lo, hi) (non-empty), Q row in qrow and dO row in
 * dorow: dS8 into scr->ds and, if p8 is set, the quantised dropped P into
 * scr->pd. Elementwise in j, so any key subrange gives the same values. */
static void fp8_bwd_row(const fp8_bwd_job *job, cpu_scratch *scr, int64_t bi, int64_t n,
                        int64_t i, int64_t lo, int64_t hi, const float *qrow,
                        const float *dorow, bool p8, float *am_dp)
{
    const fattn_geom *g = job->g;
    const fattn_fp8_bwd *f = job->f;
    float *s = scr->s, *ds = scr->ds, *pd = scr->pd;
    float stat = ((const float *)job->stats.data)[fattn__geom_stats_offset(g, &job->stats, bi,
                                                                          n, i)];
    float dsum = job->dsum[(bi * g->h + n) * g->sq + i];
    fp8_logits(g, scr, qrow, lo, hi, f->descale_q, f->descale_k, s);
    const bool drop = g->dropout > 0.0f;
    const float keep_scale = drop ? 1.0f / (1.0f - g->dropout) : 1.0f;
    if (drop)
        fattn__cpu_dropout_words(g, bi, n, i, lo, hi, scr->rnd);
    const uint32_t thr = fattn_dropout_threshold(g->dropout);
    for (int64_t j = lo; j < hi; j++) {
        float pj = fattn_cpu_expf(s[j] - stat);
        float dp = (dot_v(dorow, scr->vr + j * scr->ldc, g->dv) * f->descale_do) * f->descale_v;
        bool keep = !drop || scr->rnd[j - lo] >= thr;
        dp = keep ? dp * keep_scale : 0.0f;
        float dsj = pj * (dp - dsum);
        float a = fabsf(dsj);
        *am_dp = a > *am_dp ? a : *am_dp;
        ds[j] = fp8_q(f->dp_dtype, dsj, f->scale_dp);
        if (p8)
            pd[j] = fp8_q(f->s_dtype, keep ? pj * keep_scale : 0.0f, f->scale_s);
    }
}

static bool fp8_row_live(const fp8_bwd_job *job, int64_t bi, int64_t n, int64_t i,
                         int64_t *lo, int64_t *hi)
{
    const fattn_geom *g = job->g;
    fattn__cpu_key_range(g, bi, i, lo, hi);
    float stat = ((const float *)job->stats.data)[fattn__geom_stats_offset(g, &job->stats, bi,
                                                                          n, i)];
    return *lo < *hi && stat != -INFINITY;
}

/* Pass 1: Dsum and dQ for a block of rows of (bi, n). */
static fattn_status fp8_dq_item(void *ctx, cpu_scratch *scr, int64_t item)
{
    fp8_bwd_job *job = ctx;
    const fattn_geom *g = job->g;
    const fattn_fp8_bwd *f = job->f;
    int64_t bi, n, i0, i1;
    fp8_row_item(g, job->row_blocks, item, &bi, &n, &i0, &i1);
    float am_dp = 0.0f, am_dq = 0.0f;
    if (i0 < i1)
        fattn__cpu_load_kv(g, scr, bi, n / g->group, CPU_KR | CPU_VR);
    for (int64_t i = i0; i < i1; i++) {
        float *qrow = scr->qrow, *dorow = scr->dorow, *orow = scr->orow, *acc = scr->acc;
        fattn__cpu_load_row(&job->d_o, g->q_fmt, g->off_q, bi, i, n, g->dv, dorow);
        fattn__cpu_load_row(&g->o, g->q_fmt, g->off_q, bi, i, n, g->dv, orow);
        job->dsum[(bi * g->h + n) * g->sq + i] =
            (dot_v(dorow, orow, g->dv) * f->descale_do) * f->descale_o;
        for (int64_t c = 0; c < g->d; c++)
            acc[c] = 0.0f;
        int64_t lo, hi;
        if (fp8_row_live(job, bi, n, i, &lo, &hi)) {
            fattn__cpu_load_row(&g->q, g->q_fmt, g->off_q, bi, i, n, g->d, qrow);
            fp8_bwd_row(job, scr, bi, n, i, lo, hi, qrow, dorow, false, &am_dp);
            for (int64_t j = lo; j < hi; j++) {
                const float *kj = scr->kr + j * scr->ldc;
                for (int64_t c = 0; c < g->d; c++)
                    acc[c] = acc[c] + scr->ds[j] * kj[c];
            }
            for (int64_t c = 0; c < g->d; c++)
                acc[c] = ((acc[c] * f->descale_dp) * f->descale_k) * g->scale;
        }
        am_dq = amax_of(acc, g->d, am_dq);
        store_row_q(&job->dq, g->q_fmt, g->off_q, bi, i, n, g->d, acc, f->scale_dq);
    }
    job->am_dp[item] = am_dp;
    job->am_dq[item] = am_dq;
    return FATTN_OK;
}

/* One query head's contribution to dK, dV of keys [j0, j1): hdk, hdv. */
static void fp8_dkv_head(fp8_bwd_job *job, cpu_scratch *scr, int64_t bi, int64_t n,
                         int64_t j0, int64_t j1, float *hdk, float *hdv)
{
    const fattn_geom *g = job->g;
    int64_t ldc = scr->ldc;
    float unused = 0.0f;
    for (int64_t i = 0; i < g->len_q[bi]; i++) {
        int64_t lo, hi;
        if (!fp8_row_live(job, bi, n, i, &lo, &hi))
            continue;
        lo = lo < j0 ? j0 : lo;
        hi = hi > j1 ? j1 : hi;
        if (lo >= hi)
            continue;
        float *qrow = scr->qrow, *dorow = scr->dorow;
        fattn__cpu_load_row(&g->q, g->q_fmt, g->off_q, bi, i, n, g->d, qrow);
        fattn__cpu_load_row(&job->d_o, g->q_fmt, g->off_q, bi, i, n, g->dv, dorow);
        fp8_bwd_row(job, scr, bi, n, i, lo, hi, qrow, dorow, true, &unused);
        for (int64_t j = lo; j < hi; j++) {
            float *dk = hdk + (j - j0) * ldc, *dv = hdv + (j - j0) * ldc;
            for (int64_t c = 0; c < g->d; c++)
                dk[c] = dk[c] + scr->ds[j] * qrow[c];
            for (int64_t c = 0; c < g->dv; c++)
                dv[c] = dv[c] + scr->pd[j] * dorow[c];
        }
    }
}

/* Pass 2: dK and dV for a block of keys of (bi, kv head gk): per query head
 * float32 sums, added over the group's heads ascending, then descaled. */
static fattn_status fp8_dkv_item(void *ctx, cpu_scratch *scr, int64_t item)
{
    fp8_bwd_job *job = ctx;
    const fattn_geom *g = job->g;
    const fattn_fp8_bwd *f = job->f;
    int64_t blk = item % job->key_blocks;
    int64_t gk = (item / job->key_blocks) % g->hg;
    int64_t bi = item / job->key_blocks / g->hg;
    int64_t lk = g->len_kv[bi], ldc = scr->ldc;
    int64_t j0 = blk * FP8_KEYS, j1 = j0 + FP8_KEYS < lk ? j0 + FP8_KEYS : lk;
    float am_dk = 0.0f, am_dv = 0.0f;
    if (j0 < j1) {
        int64_t nk = j1 - j0;
        float *hdk = scr->acc, *hdv = scr->acc + nk * ldc, *gdk = scr->acc2, *gdv = scr->acc3;
        memset(gdk, 0, (size_t)(nk * ldc) * sizeof(float));
        memset(gdv, 0, (size_t)(nk * ldc) * sizeof(float));
        fattn__cpu_load_kv(g, scr, bi, gk, CPU_KR | CPU_VR);
        for (int64_t hn = 0; hn < g->group; hn++) {
            memset(hdk, 0, (size_t)(2 * nk * ldc) * sizeof(float));
            fp8_dkv_head(job, scr, bi, gk * g->group + hn, j0, j1, hdk, hdv);
            for (int64_t e = 0; e < nk * ldc; e++) {
                gdk[e] = gdk[e] + hdk[e];
                gdv[e] = gdv[e] + hdv[e];
            }
        }
        for (int64_t j = j0; j < j1; j++) {
            float *dk = gdk + (j - j0) * ldc, *dv = gdv + (j - j0) * ldc;
            for (int64_t c = 0; c < g->d; c++)
                dk[c] = ((dk[c] * f->descale_dp) * f->descale_q) * g->scale;
            for (int64_t c = 0; c < g->dv; c++)
                dv[c] = (dv[c] * f->descale_s) * f->descale_do;
            am_dk = amax_of(dk, g->d, am_dk);
            am_dv = amax_of(dv, g->dv, am_dv);
            store_row_q(&job->dk, g->kv_fmt, g->off_kv, bi, j, gk, g->d, dk, f->scale_dk);
            store_row_q(&job->dv, g->kv_fmt, g->off_kv, bi, j, gk, g->dv, dv, f->scale_dv);
        }
    }
    job->am_dk[item] = am_dk;
    job->am_dv[item] = am_dv;
    return FATTN_OK;
}

/* A gradient (or dO) of the shape of `like`, of an FP8 dtype or, when
 * f16_ok, of float16/bfloat16. */
static fattn_status fp8_check_grad(const fattn_tensor *grad, const fattn_tensor *like,
                                   const char *name, bool f16_ok)
{
    if (fattn_tensor_is_empty(grad))
        return fattn_error(FATTN_E_INVALID_ARG, "FP8 backward: %s is missing", name);
    fattn_dtype t = grad->dtype;
    bool ok = fattn_dtype_is_fp8(t) ||
              (f16_ok && (t == FATTN_DTYPE_FLOAT16 || t == FATTN_DTYPE_BFLOAT16));
    if (!ok)
        return fattn_error(FATTN_E_DTYPE, "FP8 backward: %s is %s, must be FP8%s", name,
                           fattn_dtype_name(t), f16_ok ? ", float16 or bfloat16" : "");
    if (grad->ndim != like->ndim)
        return fattn_error(FATTN_E_SHAPE, "FP8 backward: %s has rank %d, its input %d", name,
                           grad->ndim, like->ndim);
    for (int i = 0; i < like->ndim; i++)
        if (grad->shape[i] != like->shape[i])
            return fattn_error(FATTN_E_SHAPE, "FP8 backward: %s dim %d is %lld, input has "
                               "%lld", name, i, (long long)grad->shape[i],
                               (long long)like->shape[i]);
    return FATTN_OK;
}

static fattn_status fp8_bwd_checks(const fattn_bwd_params *p, const fattn_geom *g)
{
    const fattn_fp8_bwd *f = p->fp8;
    fattn_status st = fp8_check("FP8 backward", p->attn.bias_type, p->attn.softmax_type, f->s_dtype, g);
    if (st != FATTN_OK)
        return st;
    if (!fattn_dtype_is_fp8(f->dp_dtype))
        return fattn_error(FATTN_E_DTYPE, "FP8 backward: dP dtype must be FP8, got %s",
                           fattn_dtype_name(f->dp_dtype));
    if (!f->amax_dp || !f->amax_dq || !f->amax_dk || !f->amax_dv)
        return fattn_error(FATTN_E_MISSING_FIELD, "FP8 backward: amax_dp, amax_dq, amax_dk "
                           "and amax_dv must point at a float each");
    if ((st = fp8_check_grad(&p->d_o, &p->attn.o, "dO", false)) != FATTN_OK ||
        (st = fp8_check_grad(&p->dq, &p->attn.q, "dQ", true)) != FATTN_OK ||
        (st = fp8_check_grad(&p->dk, &p->attn.k, "dK", true)) != FATTN_OK ||
        (st = fp8_check_grad(&p->dv, &p->attn.v, "dV", true)) != FATTN_OK)
        return st;
    return FATTN_OK;
}

fattn_status fattn__cpu_fp8_backward(int threads, const fattn_bwd_params *p, const fattn_bwd_call *c)
{
    const fattn_geom *g = c->geom;
    const fattn_fp8_bwd *f = p->fp8;
    assert(g && f);
    fattn_status st = fp8_bwd_checks(p, g);
    if (st != FATTN_OK)
        return st;
    fp8_bwd_job job = {.g = g, .f = f, .stats = c->stats, .d_o = p->d_o, .dq = p->dq,
                       .dk = p->dk, .dv = p->dv};
    int64_t nsum;
    if (!fattn_mul_i64(g->b, g->h, &nsum) || !fattn_mul_i64(nsum, g->sq, &nsum))
        return fattn_error(FATTN_E_OVERFLOW, "FP8 backward: Dsum [b, h, max_seqlen_q] "
                           "overflows");
    job.row_blocks = (g->sq + FP8_ROWS - 1) / FP8_ROWS;
    job.key_blocks = (g->skv + FP8_KEYS - 1) / FP8_KEYS;
    int64_t n1 = g->b * g->h * job.row_blocks, n2 = g->b * g->hg * job.key_blocks;
    job.dsum = calloc((size_t)nsum, sizeof(float));
    float *am = calloc((size_t)(2 * n1 + 2 * n2), sizeof(float));
    if (!job.dsum || !am) {
        st = fattn_error(FATTN_E_NOMEM, "FP8 backward: cannot allocate Dsum");
        goto out;
    }
    job.am_dp = am;
    job.am_dq = am + n1;
    job.am_dk = am + 2 * n1;
    job.am_dv = am + 2 * n1 + n2;
    st = fattn__cpu_parallel_for(threads, g, n1, fp8_dq_item, &job);
    if (st != FATTN_OK)
        goto out;
    st = fattn__cpu_parallel_for(threads, g, n2, fp8_dkv_item, &job);
    if (st != FATTN_OK)
        goto out;
    *f->amax_dp = reduce_amax(job.am_dp, n1);
    *f->amax_dq = reduce_amax(job.am_dq, n1);
    *f->amax_dk = reduce_amax(job.am_dk, n2);
    *f->amax_dv = reduce_amax(job.am_dv, n2);
out:
    free(am);
    free(job.dsum);
    return st;
}
