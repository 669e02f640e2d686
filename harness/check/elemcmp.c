/* Element comparators (see elemcmp.h). */
#include "elemcmp.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The sign bit of a float dtype. */
static unsigned sign_shift(fattn_dtype t)
{
    switch (t) {
    case FATTN_DTYPE_FLOAT32: return 31;
    case FATTN_DTYPE_FLOAT16:
    case FATTN_DTYPE_BFLOAT16: return 15;
    default: return 7;
    }
}

uint64_t fh_elem_ulp(fattn_dtype dtype, uint64_t a_bits, uint64_t b_bits)
{
    unsigned s = sign_shift(dtype);
    uint64_t mag_mask = ((uint64_t)1 << s) - 1;
    int64_t oa = (int64_t)(a_bits & mag_mask), ob = (int64_t)(b_bits & mag_mask);
    if ((a_bits >> s) & 1)
        oa = -oa;
    if ((b_bits >> s) & 1)
        ob = -ob;
    return oa > ob ? (uint64_t)(oa - ob) : (uint64_t)(ob - oa);
}

uint64_t fh_elem_bits(const unsigned char *p, size_t esize)
{
    switch (esize) {
    case 1: return p[0];
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        assert(esize == 8);
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

double fh_elem_decode(fattn_dtype t, uint64_t bits)
{
    switch (t) {
    case FATTN_DTYPE_FLOAT32: return (double)fattn_f32_from_bits((uint32_t)bits);
    case FATTN_DTYPE_FLOAT16: return (double)fattn_f16_to_f32((fattn_f16){(uint16_t)bits});
    case FATTN_DTYPE_BFLOAT16: return (double)fattn_bf16_to_f32((fattn_bf16){(uint16_t)bits});
    case FATTN_DTYPE_FLOAT8_E4M3FN: return (double)fattn_e4m3_to_f32((fattn_e4m3){(uint8_t)bits});
    case FATTN_DTYPE_FLOAT8_E5M2: return (double)fattn_e5m2_to_f32((fattn_e5m2){(uint8_t)bits});
    case FATTN_DTYPE_INT32: return (double)(int32_t)(uint32_t)bits;
    case FATTN_DTYPE_INT64: return (double)(int64_t)bits;
    default: return (double)(uint8_t)bits;
    }
}

/* 0 finite, 1 +inf, 2 -inf, 3 NaN */
static int fclass(double v)
{
    if (isnan(v))
        return 3;
    if (isinf(v))
        return v > 0 ? 1 : 2;
    return 0;
}

/* ---- signal energy ---------------------------------------------------------- */

void fh_elem_sq_cache_free(fh_elem_sq_cache *c)
{
    for (int i = 0; i < FATTN_DTYPE_COUNT; i++) {
        free(c->tab[i]);
        c->tab[i] = NULL;
    }
}

/* The squares of every bit pattern of an 8- or 16-bit dtype, built once per
 * cache (64 Ki doubles at most); NULL without a cache or memory. */
static const double *sq_table(fh_elem_sq_cache *c, fattn_dtype t)
{
    assert(fattn_dtype_size(t) <= 2 && (int)t >= 0 && t < FATTN_DTYPE_COUNT);
    if (!c)
        return NULL;
    if (c->tab[t])
        return c->tab[t];
    size_t n = (size_t)1 << (8 * fattn_dtype_size(t));
    double *tab = malloc(n * sizeof *tab);
    if (!tab)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        double v = fh_elem_decode(t, i);
        tab[i] = isfinite(v) ? v * v : 0.0;
    }
    c->tab[t] = tab;
    return tab;
}

/* Sum of squares of the finite float32 elements of a chunk; eight partial
 * sums in a fixed order, so the result does not depend on the compiler. */
static double energy_f32(const unsigned char *p, size_t n)
{
    double s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float f[8];
        memcpy(f, p + 4 * i, sizeof f);
        for (int j = 0; j < 8; j++)
            s[j] += (double)f[j] * (double)f[j];
    }
    for (; i < n; i++) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        s[0] += (double)f * (double)f;
    }
    double tot = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    if (isfinite(tot))
        return tot;
    tot = 0;
    for (i = 0; i < n; i++) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        if (isfinite(f))
            tot += (double)f * (double)f;
    }
    return tot;
}

/* Sum of squares of the finite elements of a chunk (the signal energy). */
static double energy(fh_elem_sq_cache *c, fattn_dtype t, const unsigned char *p, size_t n)
{
    if (t == FATTN_DTYPE_FLOAT32)
        return energy_f32(p, n);
    const double *tab = sq_table(c, t);
    double tot = 0;
    if (!tab)
        return NAN;
    size_t es = fattn_dtype_size(t);
    for (size_t i = 0; i < n; i++)
        tot += tab[fh_elem_bits(p + es * i, es)];
    return tot;
}

/* ---- element rules ------------------------------------------------------------ */

static void note_worst(fh_elem_stats *s, fh_elem_worst w)
{
    int n = s->n_worst;
    assert(n >= 0 && n <= FH_ELEM_WORST);
    if (n == FH_ELEM_WORST && w.score <= s->worst[n - 1].score)
        return;
    int pos = n < FH_ELEM_WORST ? n : n - 1;
    while (pos > 0 && s->worst[pos - 1].score < w.score) {
        if (pos < FH_ELEM_WORST)
            s->worst[pos] = s->worst[pos - 1];
        pos--;
    }
    s->worst[pos] = w;
    if (n < FH_ELEM_WORST)
        s->n_worst++;
}

static int hist_bucket(uint64_t u)
{
    return u == 0 ? 0 : u == 1 ? 1 : u <= 4 ? 2 : u <= 16 ? 3 : u <= 256 ? 4 : 5;
}

static bool all_ff(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0xFF)
            return false;
    return true;
}

/* Two finite float elements of one class whose bits differ: the statistics,
 * and whether the pair fails the rule (*excess: by how much under TOL). */
static bool finite_pair(const fh_elem_cmp *c, fattn_dtype t, fh_elem_stats *s,
                        fh_elem_worst *w, double *excess)
{
    double a = w->a, b = w->b;
    uint64_t u = fh_elem_ulp(t, w->a_bits, w->b_bits);
    unsigned sh = sign_shift(t);
    bool both_zero = a == 0 && b == 0;
    if (!both_zero && ((w->a_bits >> sh) & 1) != ((w->b_bits >> sh) & 1))
        s->sign_flips++;
    else
        s->hist[hist_bucket(u)]++;
    if (u > s->max_ulp)
        s->max_ulp = u;
    w->ulp = u;
    w->has_ulp = true;
    w->score = u;
    double d = fabs(a - b);
    if (d > s->max_abs)
        s->max_abs = d;
    if (b != 0 && d / fabs(b) > s->max_rel)
        s->max_rel = d / fabs(b);
    s->sse += d * d;
    s->signal += b * b;
    s->n_finite++;
    if (both_zero)
        return c->mode == FH_ELEM_BITWISE;
    if (c->mode == FH_ELEM_ULP)
        return u > c->max_ulp;
    if (c->mode == FH_ELEM_TOL) {
        double allowed = c->tol.atol + c->tol.rtol * fabs(b);
        *excess = d - allowed;
        return !(d <= allowed);
    }
    return true;
}

/* One element pair whose bits differ. */
static void differing_pair(const fh_elem_cmp *c, fattn_dtype t, uint64_t ua, uint64_t ub,
                           uint64_t index, fh_elem_stats *s)
{
    s->bit_count++;
    double a = fh_elem_decode(t, ua), b = fh_elem_decode(t, ub);
    fh_elem_worst w = {index, ua, ub, a, b, 0, 0, false};
    bool fail = true;
    double excess = INFINITY;
    if (!fattn_dtype_is_float(t)) {
        double d = fabs(a - b);
        if (d > s->max_abs)
            s->max_abs = d;
        w.score = d >= 1.8e19 ? UINT64_MAX : (uint64_t)d;
    } else {
        int ca = fclass(a), cb = fclass(b);
        if (ca != cb) {
            s->class_changes++;
            w.score = UINT64_MAX;
        } else if (ca == 3) {
            s->nan_payloads++;
            fail = c->mode == FH_ELEM_BITWISE;
        } else { /* both finite (equal infinities have equal bits) */
            fail = finite_pair(c, t, s, &w, &excess);
        }
    }
    if (fail) {
        s->fail_count++;
        if (c->mode == FH_ELEM_TOL && excess > s->excess) {
            s->excess = excess;
            s->excess_index = index;
        }
    }
    note_worst(s, w);
}

/* NOISY over one buffer: every element, as float values (see elemcmp.h). */
static void noisy_chunk(const fh_elem_cmp *c, fattn_dtype t, const unsigned char *pa,
                        const unsigned char *pb, size_t n, fh_elem_stats *s)
{
    size_t es = fattn_dtype_size(t);
    for (size_t e = 0; e < n; e++) {
        if (memcmp(pa + e * es, pb + e * es, es) != 0)
            s->bit_count++;
        double a = fattn_load_f32(pa, t, (int64_t)e);
        double b = fattn_load_f32(pb, t, (int64_t)e);
        if (!(fabs(a - b) <= c->tol.atol + c->tol.rtol * fabs(b)))
            s->fail_count++;
    }
}

void fh_elem_compare_chunk(const fh_elem_cmp *c, fattn_dtype t, const unsigned char *a,
                              const unsigned char *b, size_t n, uint64_t base,
                              bool *want_signal, fh_elem_stats *s)
{
    size_t es = fattn_dtype_size(t);
    bool is_float = fattn_dtype_is_float(t);
    assert(es > 0);
    if (memcmp(a, b, n * es) == 0) {
        if (*want_signal)
            s->signal += energy(c->sq, t, b, n);
        if (is_float)
            s->n_finite += n; /* the mean of RMSE runs over equal elements too */
        return;
    }
    if (c->mode == FH_ELEM_NOISY) {
        assert(is_float);
        noisy_chunk(c, t, a, b, n, s);
        return;
    }
    if (!*want_signal && is_float) {
        s->signal_partial = base > 0;
        *want_signal = true;
    }
    for (size_t i = 0; i < n; i++) {
        if (c->skip_poison_b && all_ff(b + i * es, es))
            continue; /* undefined region of the reference */
        uint64_t ua = fh_elem_bits(a + i * es, es), ub = fh_elem_bits(b + i * es, es);
        if (ua == ub) {
            if (is_float) {
                s->n_finite++;
                if (*want_signal) {
                    double v = fh_elem_decode(t, ub);
                    if (isfinite(v))
                        s->signal += v * v;
                }
            }
            continue;
        }
        differing_pair(c, t, ua, ub, base + i, s);
    }
}
