/* The CPU engine's kernels: the kept-key range of a row, the
 * register-blocked dot products and rank updates, the logits of a row block
 * and the dropout words. Every output is computed in one fixed order. */
#include "fattn/philox.h"

#include "cpu/cpu.h"
#include "cpu/fmath.h"

void fattn__cpu_key_range(const fattn_geom *g, int64_t bi, int64_t i, int64_t *lo,
                   int64_t *hi)
{
    int64_t lk = g->len_kv[bi], lq = g->len_q[bi];
    int64_t diag = i + (g->bottom_right ? lk - lq : 0);
    int64_t l = 0, r = lk;
    /* Compared as win < bound - diag so that a window near INT64_MAX cannot
     * overflow: the same test as diag + win + 1 < r (and diag - win > l)
     * for every value where those do not overflow. |diag| <= lq + lk. */
    if (g->win_right >= 0 && g->win_right < r - diag - 1)
        r = diag + g->win_right + 1;
    if (g->win_left >= 0 && g->win_left < diag - l)
        l = diag - g->win_left;
    *lo = l;
    *hi = r;
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

void fattn__cpu_dot_rows(int nr, const float *a, int64_t lda, int64_t kd, const float *bt,
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

void fattn__cpu_axpy_rows(int nr, const float *w, int64_t ldw, const int64_t *lo,
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

void fattn__cpu_rank_rows(int nr, const float *w, int64_t ldw, const int64_t *lo, const int64_t *hi,
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

void fattn__cpu_logits_rows(const fattn_geom *g, const cpu_scratch *scr, int64_t bi, int64_t n,
                     int nr, const int64_t *i, const float *qrow, int64_t ldq,
                     const int64_t *lo, const int64_t *hi, float *s, int64_t lds)
{
    int64_t ul = lo[0], uh = hi[0];
    for (int r = 1; r < nr; r++) {
        ul = lo[r] < ul ? lo[r] : ul;
        uh = hi[r] > uh ? hi[r] : uh;
    }
    /* Head-dim ascending for every element, from 0.0f. */
    fattn__cpu_dot_rows(nr, qrow, ldq, g->d, scr->kt, scr->ldk, ul, uh, s, lds);
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

void fattn__cpu_dropout_words(const fattn_geom *g, int64_t bi, int64_t n, int64_t i, int64_t lo,
                       int64_t hi, uint32_t *rnd)
{
    uint64_t base = (((uint64_t)bi * (uint64_t)g->h + (uint64_t)n) * (uint64_t)g->sq +
                     (uint64_t)i) * (uint64_t)g->skv;
    fattn_philox_fill_u32(g->rng_seed, g->rng_offset, base + (uint64_t)lo,
                          (uint64_t)(hi - lo), rnd);
}
