/* Parameter validation and index geometry of the CPU engine.
 *
 * Everything the engine reads or writes is addressed through offsets
 * computed here, after checking that every length and token offset stays
 * inside the tensors the caller described. Nothing is trusted: a bad
 * cu_seqlens array is an error, never an out-of-bounds access.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/philox.h"

#include "cpu/cpu.h"
#include "cpu/fmath.h"

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

int64_t cpu_row_offset(const fattn_tensor *t, fattn_qkv_format fmt,
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

void cpu_stats_shape(const cpu_geom *g, int *ndim, int64_t shape[4])
{
    if (g->thd_stats) {
        *ndim = 3;
        shape[0] = g->t_q; shape[1] = g->h; shape[2] = 1;
    } else {
        *ndim = 4;
        shape[0] = g->b; shape[1] = g->h; shape[2] = g->sq; shape[3] = 1;
    }
}

int64_t cpu_stats_offset(const cpu_geom *g, const fattn_tensor *stats,
                         int64_t bi, int64_t n, int64_t i)
{
    if (g->thd_stats)
        return ((int64_t)g->off_q[bi] + i) * stats->strides[0] + n * stats->strides[1];
    return bi * stats->strides[0] + n * stats->strides[1] + i * stats->strides[2];
}

void cpu_key_range(const cpu_geom *g, int64_t bi, int64_t i, int64_t *lo,
                   int64_t *hi)
{
    int64_t lk = g->len_kv[bi], lq = g->len_q[bi];
    int64_t diag = i + (g->bottom_right ? lk - lq : 0);
    int64_t l = 0, r = lk;
    if (g->win_right >= 0 && diag + g->win_right + 1 < r)
        r = diag + g->win_right + 1;
    if (g->win_left >= 0 && diag - g->win_left > l)
        l = diag - g->win_left;
    *lo = l;
    *hi = r;
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

void cpu_geom_free(cpu_geom *g)
{
    free(g->len_q);
    free(g->len_kv);
    free(g->off_q);
    free(g->off_kv);
    free(g->sink);
    free(g->alibi_slopes);
    memset(g, 0, sizeof *g);
}

static bool io_dtype_ok(fattn_dtype t)
{
    return t == FATTN_DTYPE_FLOAT16 || t == FATTN_DTYPE_BFLOAT16 ||
           t == FATTN_DTYPE_FLOAT32;
}

static fattn_status geom_check(cpu_geom *g, const cpu_geom_args *a)
{
    const char *who = a->who;
    if (a->layout < 0 || a->layout >= FATTN_LAYOUT_NOT_SET)
        return fattn_error(FATTN_E_LAYOUT, "%s: QKV layout not set", who);
    if (fattn_layout_is_paged(a->layout))
        return fattn_error(FATTN_E_UNSUPPORTED,
                           "%s: paged KV layout %s is not implemented by the CPU engine",
                           who, fattn_layout_name(a->layout));
    g->q_fmt = fattn_layout_q_format(a->layout);
    g->kv_fmt = fattn_layout_kv_format(a->layout);
    if (a->o_format != g->q_fmt)
        return fattn_error(FATTN_E_LAYOUT, "%s: o_format %s differs from Q's format %s",
                           who, fattn_format_name(a->o_format), fattn_format_name(g->q_fmt));

    fattn_dtype io = a->q->dtype;
    if (io == FATTN_DTYPE_FLOAT8_E4M3FN || io == FATTN_DTYPE_FLOAT8_E5M2)
        return fattn_error(FATTN_E_UNSUPPORTED, "%s: FP8 inputs are not implemented by "
                           "the CPU engine", who);
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

    int64_t bq, sq, h, d, bk, skv, hg, dk, bv, sv, hv, dv, bo, s_o, ho, dvo;
    fattn_status st;
    if ((st = fmt_dims(a->q, g->q_fmt, "Q", &bq, &sq, &h, &d)) ||
        (st = fmt_dims(a->k, g->kv_fmt, "K", &bk, &skv, &hg, &dk)) ||
        (st = fmt_dims(a->v, g->kv_fmt, "V", &bv, &sv, &hv, &dv)) ||
        (st = fmt_dims(a->o, g->q_fmt, "O", &bo, &s_o, &ho, &dvo)))
        return st;
    if (dk != d)
        return fattn_error(FATTN_E_SHAPE, "%s: K head dim %lld != Q head dim %lld", who,
                           (long long)dk, (long long)d);
    if (hv != hg || bv != bk || sv != skv)
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
    if (g->kv_fmt != FATTN_FORMAT_THD && bk != b)
        return fattn_error(FATTN_E_SHAPE, "%s: K batch %lld != Q batch %lld", who,
                           (long long)bk, (long long)b);
    if (g->kv_fmt == FATTN_FORMAT_THD &&
        (fattn_tensor_is_empty(a->cu_kv) || a->cu_kv->ndim != 1 || a->cu_kv->shape[0] != b + 1))
        return fattn_error(FATTN_E_SHAPE, "%s: THD K/V need cu_seqlens_kv [%lld]", who,
                           (long long)(b + 1));

    /* Padded lengths: the tensor's own for sbhd/bshd/bhsd (TE recomputes
     * max_seqlen from the shape there), max_seqlen for THD. */
    int64_t msq = g->q_fmt == FATTN_FORMAT_THD ? a->max_seqlen_q : sq;
    int64_t mskv = g->kv_fmt == FATTN_FORMAT_THD ? a->max_seqlen_kv : skv;
    if (g->q_fmt != FATTN_FORMAT_THD && a->max_seqlen_q != sq)
        return fattn_error(FATTN_E_SHAPE, "%s: max_seqlen_q %lld != Q's length %lld", who,
                           (long long)a->max_seqlen_q, (long long)sq);
    if (g->kv_fmt != FATTN_FORMAT_THD && a->max_seqlen_kv != skv)
        return fattn_error(FATTN_E_SHAPE, "%s: max_seqlen_kv %lld != K's length %lld", who,
                           (long long)a->max_seqlen_kv, (long long)skv);
    if (msq <= 0 || mskv <= 0)
        return fattn_error(FATTN_E_SHAPE, "%s: max_seqlen must be positive", who);

    g->b = b; g->h = h; g->hg = hg; g->group = h / hg;
    g->sq = msq; g->skv = mskv; g->d = d; g->dv = dv;
    g->q = *a->q; g->k = *a->k; g->v = *a->v; g->o = *a->o;
    g->t_q = g->q_fmt == FATTN_FORMAT_THD ? sq : 0;
    g->thd_stats = g->q_fmt == FATTN_FORMAT_THD;

    g->len_q = calloc((size_t)b, sizeof(int32_t));
    g->len_kv = calloc((size_t)b, sizeof(int32_t));
    g->off_q = calloc((size_t)b, sizeof(int32_t));
    g->off_kv = calloc((size_t)b, sizeof(int32_t));
    if (!g->len_q || !g->len_kv || !g->off_q || !g->off_kv)
        return fattn_error(FATTN_E_NOMEM, "%s: cannot allocate sequence tables", who);

    bool padding = fattn_mask_has_padding(a->mask_type);
    bool thd = g->q_fmt == FATTN_FORMAT_THD || g->kv_fmt == FATTN_FORMAT_THD;
    if (thd && !padding)
        return fattn_error(FATTN_E_INVALID_CASE, "%s: THD layouts need a padding mask, got %s",
                           who, fattn_mask_type_name(a->mask_type));
    if (padding) {
        if ((st = read_seqlens(a->cu_q, "cu_seqlens_q", b, msq, g->len_q, who)) ||
            (st = read_seqlens(a->cu_kv, "cu_seqlens_kv", b, mskv, g->len_kv, who)))
            return st;
    } else {
        for (int64_t i = 0; i < b; i++) {
            g->len_q[i] = (int32_t)msq;
            g->len_kv[i] = (int32_t)mskv;
        }
    }
    if (g->q_fmt == FATTN_FORMAT_THD &&
        (st = read_offsets(a->cu_q, a->cu_q_pad, "cu_seqlens_q_padded", b, sq, g->len_q,
                           g->off_q, who)))
        return st;
    if (g->kv_fmt == FATTN_FORMAT_THD &&
        (st = read_offsets(a->cu_kv, a->cu_kv_pad, "cu_seqlens_kv_padded", b, skv, g->len_kv,
                           g->off_kv, who)))
        return st;

    /* bias */
    g->bias = fattn_tensor_empty();
    if (a->bias_type == FATTN_BIAS_PRE_SCALE_BIAS)
        return fattn_error(FATTN_E_UNSUPPORTED, "%s: pre_scale_bias is not implemented by "
                           "TE's F16 fused path nor by the CPU engine", who);
    if (a->bias_type == FATTN_BIAS_POST_SCALE_BIAS) {
        const fattn_tensor *bt = a->bias;
        if (!bt || fattn_tensor_is_empty(bt))
            return fattn_error(FATTN_E_INVALID_ARG, "%s: post_scale_bias without a bias tensor",
                               who);
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
        g->alibi_slopes = malloc((size_t)h * sizeof(float));
        if (!g->alibi_slopes)
            return fattn_error(FATTN_E_NOMEM, "%s: alibi slopes", who);
        alibi_slopes(h, g->alibi_slopes);
    }

    /* softmax offset (sink) */
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
        g->sink = malloc((size_t)h * sizeof(float));
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
    g->win_right = a->win_right;
    g->bottom_right = a->bottom_right;
    return FATTN_OK;
}

fattn_status cpu_geom_init(cpu_geom *g, const cpu_geom_args *a)
{
    memset(g, 0, sizeof *g);
    fattn_status st = geom_check(g, a);
    if (st != FATTN_OK)
        cpu_geom_free(g);
    return st;
}

fattn_status cpu_scratch_init(cpu_scratch *s, const cpu_geom *g)
{
    memset(s, 0, sizeof *s);
    size_t skv = (size_t)g->skv, d = (size_t)g->d, dv = (size_t)g->dv;
    size_t dm = d > dv ? d : dv;
    size_t ldk = skv + 8, ldc = (dm + 7) / 8 * 8;
    s->ldk = (int64_t)ldk;
    s->ldc = (int64_t)ldc;
    s->kv_bi = s->kv_gk = -1;
    s->kt = calloc(d * ldk, sizeof(float));
    s->kr = calloc(skv * ldc, sizeof(float));
    s->vr = calloc(skv * ldc, sizeof(float));
    s->vt = calloc(dv * ldk, sizeof(float));
    s->s = calloc(CPU_ROWS * ldk, sizeof(float));
    s->p = calloc(CPU_ROWS * ldk, sizeof(float));
    s->dp = calloc(CPU_ROWS * ldk, sizeof(float));
    s->ds = calloc(CPU_ROWS * ldk, sizeof(float));
    s->pd = calloc(CPU_ROWS * ldk, sizeof(float));
    s->t = calloc(CPU_ROWS * ldk, sizeof(float));
    s->qrow = calloc(CPU_ROWS * ldc, sizeof(float));
    s->dorow = calloc(CPU_ROWS * ldc, sizeof(float));
    s->orow = calloc(CPU_ROWS * ldc, sizeof(float));
    s->acc = calloc(skv * (2 * ldc + 64) + CPU_ROWS * ldc, sizeof(float));
    s->acc2 = calloc(skv * ldc, sizeof(float));
    s->acc3 = calloc(skv * ldc, sizeof(float));
    s->rnd = calloc(skv + 4, sizeof(uint32_t));
    if (!s->kt || !s->kr || !s->vr || !s->vt || !s->s || !s->p || !s->dp || !s->ds || !s->pd ||
        !s->t || !s->qrow || !s->dorow || !s->orow || !s->acc || !s->acc2 || !s->acc3 ||
        !s->rnd) {
        cpu_scratch_free(s);
        return fattn_error(FATTN_E_NOMEM, "CPU engine: cannot allocate worker scratch");
    }
    return FATTN_OK;
}

void cpu_scratch_free(cpu_scratch *s)
{
    free(s->kt); free(s->kr); free(s->vr); free(s->vt);
    free(s->s); free(s->p); free(s->dp); free(s->ds); free(s->pd); free(s->t);
    free(s->qrow); free(s->dorow); free(s->orow);
    free(s->acc); free(s->acc2); free(s->acc3); free(s->rnd);
    memset(s, 0, sizeof *s);
}

/* Widen `width` elements at element offset o (stride sd) of an io buffer. */
static void load_strided(const void *data, fattn_dtype t, int64_t o, int64_t sd,
                         int64_t width, float *out)
{
    if (t == FATTN_DTYPE_BFLOAT16) {
        const uint16_t *p = (const uint16_t *)data + o;
        for (int64_t c = 0; c < width; c++)
            out[c] = fattn_cpu_f32_from_bits((uint32_t)p[c * sd] << 16);
    } else if (t == FATTN_DTYPE_FLOAT16) {
        const uint16_t *p = (const uint16_t *)data + o;
        for (int64_t c = 0; c < width; c++)
            out[c] = fattn_cpu_f16_to_f32(p[c * sd]);
    } else if (t == FATTN_DTYPE_FLOAT32) {
        const float *p = (const float *)data + o;
        for (int64_t c = 0; c < width; c++)
            out[c] = p[c * sd];
    } else {
        for (int64_t c = 0; c < width; c++)
            out[c] = fattn_load_f32(data, t, o + c * sd);
    }
}

void cpu_load_kv(const cpu_geom *g, cpu_scratch *scr, int64_t bi, int64_t gk, unsigned want)
{
    if (scr->kv_bi != bi || scr->kv_gk != gk) {
        scr->kv_have = 0;
        scr->kv_bi = bi;
        scr->kv_gk = gk;
    }
    want &= ~scr->kv_have;
    if (!want)
        return;
    int64_t d = g->d, dv = g->dv, len = g->len_kv[bi], ldk = scr->ldk, ldc = scr->ldc;
    int64_t ksd = g->k.strides[g->k.ndim - 1], vsd = g->v.strides[g->v.ndim - 1];
    if (want & (CPU_KT | CPU_KR)) {
        for (int64_t j = 0; j < len; j++) {
            int64_t ko = cpu_row_offset(&g->k, g->kv_fmt, g->off_kv, bi, j, gk);
            float *row = scr->kr + j * ldc;
            load_strided(g->k.data, g->io, ko, ksd, d, row);
            for (int64_t c = d; c < ldc; c++)
                row[c] = 0.0f;
        }
        scr->kv_have |= CPU_KR;
        if (want & CPU_KT) {
            for (int64_t c = 0; c < d; c++) {
                float *col = scr->kt + c * ldk;
                for (int64_t j = 0; j < len; j++)
                    col[j] = scr->kr[j * ldc + c];
                for (int64_t j = len; j < len + 8; j++)
                    col[j] = 0.0f;
            }
            scr->kv_have |= CPU_KT;
        }
    }
    if (want & (CPU_VR | CPU_VT)) {
        for (int64_t j = 0; j < len; j++) {
            int64_t vo = cpu_row_offset(&g->v, g->kv_fmt, g->off_kv, bi, j, gk);
            float *row = scr->vr + j * ldc;
            load_strided(g->v.data, g->io, vo, vsd, dv, row);
            for (int64_t c = dv; c < ldc; c++)
                row[c] = 0.0f;
        }
        scr->kv_have |= CPU_VR;
        if (want & CPU_VT) {
            for (int64_t c = 0; c < dv; c++) {
                float *col = scr->vt + c * ldk;
                for (int64_t j = 0; j < len; j++)
                    col[j] = scr->vr[j * ldc + c];
                for (int64_t j = len; j < len + 8; j++)
                    col[j] = 0.0f;
            }
            scr->kv_have |= CPU_VT;
        }
    }
}

void cpu_load_row(const fattn_tensor *t, fattn_qkv_format fmt, const int32_t *off,
                  int64_t bi, int64_t pos, int64_t n, int64_t width, float *out)
{
    int64_t o = cpu_row_offset(t, fmt, off, bi, pos, n);
    int64_t sd = t->strides[t->ndim - 1];
    load_strided(t->data, t->dtype, o, sd, width, out);
}

void cpu_store_row(fattn_tensor *t, fattn_qkv_format fmt, const int32_t *off, int64_t bi,
                   int64_t pos, int64_t n, int64_t width, const float *in)
{
    int64_t o = cpu_row_offset(t, fmt, off, bi, pos, n);
    int64_t sd = t->strides[t->ndim - 1];
    for (int64_t c = 0; c < width; c++)
        fattn_store_f32(t->data, t->dtype, o + c * sd, in[c]);
}

void cpu_round_io(fattn_dtype io, float *x, int64_t n)
{
    if (io == FATTN_DTYPE_BFLOAT16) {
        for (int64_t j = 0; j < n; j++)
            x[j] = fattn_cpu_round_bf16(x[j]);
    } else if (io == FATTN_DTYPE_FLOAT16) {
        for (int64_t j = 0; j < n; j++)
            x[j] = fattn_cpu_round_f16(x[j]);
    } else if (io != FATTN_DTYPE_FLOAT32) {
        for (int64_t j = 0; j < n; j++)
            x[j] = fattn_round_f32(io, x[j]);
    }
}

/* ---- register-blocked kernels ------------------------------------------ *
 * Vectors of 4 floats (GCC/Clang vector extension, SSE2 on x86-64): every
 * lane is one independent output, and every lane operation is the same
 * IEEE single-precision mul or add the scalar code would do, in the same
 * order per output. */
typedef float v4f __attribute__((vector_size(16)));

static inline v4f v4_ld(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void v4_st(float *p, v4f v)
{
    memcpy(p, &v, sizeof v);
}

static inline v4f v4_set1(float x)
{
    v4f v = {x, x, x, x};
    return v;
}

void cpu_dot_rows(int nr, const float *a, int64_t lda, int64_t kd, const float *bt,
                  int64_t ldb, int64_t j0, int64_t j1, float *out, int64_t ldo)
{
    if (nr == 4) {
        const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
        for (int64_t j = j0; j < j1; j += 8) {
            v4f s00 = v4_set1(0.0f), s01 = s00, s10 = s00, s11 = s00;
            v4f s20 = s00, s21 = s00, s30 = s00, s31 = s00;
            const float *b = bt + j;
            for (int64_t c = 0; c < kd; c++, b += ldb) {
                v4f k0 = v4_ld(b), k1 = v4_ld(b + 4);
                v4f q0 = v4_set1(a0[c]), q1 = v4_set1(a1[c]);
                v4f q2 = v4_set1(a2[c]), q3 = v4_set1(a3[c]);
                s00 = s00 + q0 * k0; s01 = s01 + q0 * k1;
                s10 = s10 + q1 * k0; s11 = s11 + q1 * k1;
                s20 = s20 + q2 * k0; s21 = s21 + q2 * k1;
                s30 = s30 + q3 * k0; s31 = s31 + q3 * k1;
            }
            v4_st(out + j, s00); v4_st(out + j + 4, s01);
            v4_st(out + ldo + j, s10); v4_st(out + ldo + j + 4, s11);
            v4_st(out + 2 * ldo + j, s20); v4_st(out + 2 * ldo + j + 4, s21);
            v4_st(out + 3 * ldo + j, s30); v4_st(out + 3 * ldo + j + 4, s31);
        }
        return;
    }
    for (int r = 0; r < nr; r++) {
        const float *ar = a + r * lda;
        float *o = out + r * ldo;
        int64_t j = j0;
        for (; j + 32 <= j1; j += 32) {
            v4f s0 = v4_set1(0.0f), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0,
                s7 = s0;
            const float *b = bt + j;
            for (int64_t c = 0; c < kd; c++, b += ldb) {
                v4f q = v4_set1(ar[c]);
                s0 = s0 + q * v4_ld(b); s1 = s1 + q * v4_ld(b + 4);
                s2 = s2 + q * v4_ld(b + 8); s3 = s3 + q * v4_ld(b + 12);
                s4 = s4 + q * v4_ld(b + 16); s5 = s5 + q * v4_ld(b + 20);
                s6 = s6 + q * v4_ld(b + 24); s7 = s7 + q * v4_ld(b + 28);
            }
            v4_st(o + j, s0); v4_st(o + j + 4, s1); v4_st(o + j + 8, s2);
            v4_st(o + j + 12, s3); v4_st(o + j + 16, s4); v4_st(o + j + 20, s5);
            v4_st(o + j + 24, s6); v4_st(o + j + 28, s7);
        }
        for (; j < j1; j += 8) {
            v4f s0 = v4_set1(0.0f), s1 = s0;
            const float *b = bt + j;
            for (int64_t c = 0; c < kd; c++, b += ldb) {
                v4f q = v4_set1(ar[c]);
                s0 = s0 + q * v4_ld(b);
                s1 = s1 + q * v4_ld(b + 4);
            }
            v4_st(o + j, s0);
            v4_st(o + j + 4, s1);
        }
    }
}

/* One row: acc[c] += sum_{j in [j0, j1)} w[j] * m[j*ldm + c]. */
static void axpy_row(const float *w, int64_t j0, int64_t j1, const float *m, int64_t ldm,
                     int64_t nc, float *acc)
{
    int64_t c = 0;
    for (; c + 32 <= nc; c += 32) {
        v4f a0 = v4_ld(acc + c), a1 = v4_ld(acc + c + 4), a2 = v4_ld(acc + c + 8),
            a3 = v4_ld(acc + c + 12), a4 = v4_ld(acc + c + 16), a5 = v4_ld(acc + c + 20),
            a6 = v4_ld(acc + c + 24), a7 = v4_ld(acc + c + 28);
        for (int64_t j = j0; j < j1; j++) {
            const float *mj = m + j * ldm + c;
            v4f x = v4_set1(w[j]);
            a0 = a0 + x * v4_ld(mj); a1 = a1 + x * v4_ld(mj + 4);
            a2 = a2 + x * v4_ld(mj + 8); a3 = a3 + x * v4_ld(mj + 12);
            a4 = a4 + x * v4_ld(mj + 16); a5 = a5 + x * v4_ld(mj + 20);
            a6 = a6 + x * v4_ld(mj + 24); a7 = a7 + x * v4_ld(mj + 28);
        }
        v4_st(acc + c, a0); v4_st(acc + c + 4, a1); v4_st(acc + c + 8, a2);
        v4_st(acc + c + 12, a3); v4_st(acc + c + 16, a4); v4_st(acc + c + 20, a5);
        v4_st(acc + c + 24, a6); v4_st(acc + c + 28, a7);
    }
    for (; c < nc; c += 8) {
        v4f a0 = v4_ld(acc + c), a1 = v4_ld(acc + c + 4);
        for (int64_t j = j0; j < j1; j++) {
            const float *mj = m + j * ldm + c;
            v4f x = v4_set1(w[j]);
            a0 = a0 + x * v4_ld(mj);
            a1 = a1 + x * v4_ld(mj + 4);
        }
        v4_st(acc + c, a0);
        v4_st(acc + c + 4, a1);
    }
}

void cpu_axpy_rows(int nr, const float *w, int64_t ldw, const int64_t *lo,
                   const int64_t *hi, const float *m, int64_t ldm, int64_t nc,
                   float *acc, int64_t lda)
{
    int64_t cl = 0, ch = -1;
    if (nr == 4) {
        cl = lo[0];
        ch = hi[0];
        for (int r = 1; r < 4; r++) {
            cl = lo[r] > cl ? lo[r] : cl;
            ch = hi[r] < ch ? hi[r] : ch;
        }
    }
    if (cl >= ch) { /* no common keys: one row at a time */
        for (int r = 0; r < nr; r++)
            axpy_row(w + r * ldw, lo[r], hi[r], m, ldm, nc, acc + r * lda);
        return;
    }
    /* Per row, keys ascending: [lo, cl) alone, [cl, ch) four rows at once,
     * [ch, hi) alone. */
    for (int r = 0; r < 4; r++)
        axpy_row(w + r * ldw, lo[r], cl, m, ldm, nc, acc + r * lda);
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
    for (int64_t c = 0; c < nc; c += 8) {
        float *c0 = acc + c, *c1 = acc + lda + c, *c2 = acc + 2 * lda + c,
              *c3 = acc + 3 * lda + c;
        v4f a00 = v4_ld(c0), a01 = v4_ld(c0 + 4), a10 = v4_ld(c1), a11 = v4_ld(c1 + 4);
        v4f a20 = v4_ld(c2), a21 = v4_ld(c2 + 4), a30 = v4_ld(c3), a31 = v4_ld(c3 + 4);
        for (int64_t j = cl; j < ch; j++) {
            const float *mj = m + j * ldm + c;
            v4f m0 = v4_ld(mj), m1 = v4_ld(mj + 4);
            v4f x0 = v4_set1(w0[j]), x1 = v4_set1(w1[j]);
            v4f x2 = v4_set1(w2[j]), x3 = v4_set1(w3[j]);
            a00 = a00 + x0 * m0; a01 = a01 + x0 * m1;
            a10 = a10 + x1 * m0; a11 = a11 + x1 * m1;
            a20 = a20 + x2 * m0; a21 = a21 + x2 * m1;
            a30 = a30 + x3 * m0; a31 = a31 + x3 * m1;
        }
        v4_st(c0, a00); v4_st(c0 + 4, a01); v4_st(c1, a10); v4_st(c1 + 4, a11);
        v4_st(c2, a20); v4_st(c2 + 4, a21); v4_st(c3, a30); v4_st(c3 + 4, a31);
    }
    for (int r = 0; r < 4; r++)
        axpy_row(w + r * ldw, ch, hi[r], m, ldm, nc, acc + r * lda);
}

void cpu_rank_rows(int nr, const float *w, int64_t ldw, const int64_t *lo, const int64_t *hi,
                   const float *x, int64_t ldx, int64_t nc, int64_t j0, int64_t j1,
                   float *acc, int64_t lda)
{
    for (int64_t j = j0; j < j1; j++) {
        float *aj = acc + (j - j0) * lda;
        int act[CPU_ROWS], na = 0;
        for (int r = 0; r < nr; r++)
            if (lo[r] <= j && j < hi[r])
                act[na++] = r;
        if (na == 0)
            continue;
        int64_t c = 0;
        for (; c + 16 <= nc; c += 16) {
            v4f a0 = v4_ld(aj + c), a1 = v4_ld(aj + c + 4), a2 = v4_ld(aj + c + 8),
                a3 = v4_ld(aj + c + 12);
            for (int k = 0; k < na; k++) {
                int r = act[k];
                const float *xr = x + r * ldx + c;
                v4f wv = v4_set1(w[r * ldw + j]);
                a0 = a0 + wv * v4_ld(xr); a1 = a1 + wv * v4_ld(xr + 4);
                a2 = a2 + wv * v4_ld(xr + 8); a3 = a3 + wv * v4_ld(xr + 12);
            }
            v4_st(aj + c, a0); v4_st(aj + c + 4, a1);
            v4_st(aj + c + 8, a2); v4_st(aj + c + 12, a3);
        }
        for (; c < nc; c += 8) {
            v4f a0 = v4_ld(aj + c), a1 = v4_ld(aj + c + 4);
            for (int k = 0; k < na; k++) {
                int r = act[k];
                const float *xr = x + r * ldx + c;
                v4f wv = v4_set1(w[r * ldw + j]);
                a0 = a0 + wv * v4_ld(xr);
                a1 = a1 + wv * v4_ld(xr + 4);
            }
            v4_st(aj + c, a0);
            v4_st(aj + c + 4, a1);
        }
    }
}

void cpu_logits_rows(const cpu_geom *g, const cpu_scratch *scr, int64_t bi, int64_t n,
                     int nr, const int64_t *i, const float *qrow, int64_t ldq,
                     const int64_t *lo, const int64_t *hi, float *s, int64_t lds)
{
    int64_t ul = lo[0], uh = hi[0];
    for (int r = 1; r < nr; r++) {
        ul = lo[r] < ul ? lo[r] : ul;
        uh = hi[r] > uh ? hi[r] : uh;
    }
    /* Head-dim ascending for every element, from 0.0f. */
    cpu_dot_rows(nr, qrow, ldq, g->d, scr->kt, scr->ldk, ul, uh, s, lds);
    float scale = g->scale;
    for (int r = 0; r < nr; r++) {
        float *sr = s + r * lds;
        int64_t l = lo[r], h = hi[r];
        for (int64_t j = l; j < h; j++)
            sr[j] = sr[j] * scale;
        if (!fattn_tensor_is_empty(&g->bias)) {
            const fattn_tensor *bt = &g->bias;
            int64_t base = (bt->shape[0] == 1 ? 0 : bi) * bt->strides[0] +
                           (bt->shape[1] == 1 ? 0 : n) * bt->strides[1] +
                           (bt->shape[2] == 1 ? 0 : i[r]) * bt->strides[2];
            for (int64_t j = l; j < h; j++)
                sr[j] = sr[j] + fattn_load_f32(bt->data, bt->dtype, base + j * bt->strides[3]);
        }
        if (g->alibi) {
            float slope = g->alibi_slopes[n];
            for (int64_t j = l; j < h; j++)
                sr[j] = sr[j] + (float)(j - i[r]) * slope;
        }
    }
}

void cpu_dropout_words(const cpu_geom *g, int64_t bi, int64_t n, int64_t i, int64_t lo,
                       int64_t hi, uint32_t *rnd)
{
    uint64_t base = (((uint64_t)bi * (uint64_t)g->h + (uint64_t)n) * (uint64_t)g->sq +
                     (uint64_t)i) * (uint64_t)g->skv;
    fattn_philox_fill_u32(g->rng_seed, g->rng_offset, base + (uint64_t)lo,
                          (uint64_t)(hi - lo), rnd);
}
