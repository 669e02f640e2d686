/* Suite "oracle": the float64 oracle checked against itself and calculus.
 *
 * - Finite differences: for tiny cases, loss = sum(O * dO) through
 *   oracle_forward; central differences (step 1e-6, in double, on double
 *   copies of every input passed as oracle_inputs overrides) must match
 *   oracle_backward's dQ, dK, dV, dBias and dSoftmaxOffset. Dropout keeps
 *   its Philox mask fixed by the seed, so the loss stays smooth and the
 *   check is valid there too.
 * - Identities: softmax rows sum to 1 (with the sink term when there is
 *   one), Stats = logsumexp of the kept logits (and the sink), Max = the
 *   largest kept logit, empty rows give O = 0 and Stats = -inf (or z).
 * - Known answers computed by hand: one tiny attention row, the ALiBi
 *   slopes, the band rule, the dropout keep rate.
 *
 * This suite does not link tests/cases.c: it builds its own float32 buffers
 * for the separate (unpacked) layouts. Packed layouts are exercised by the
 * cpu_engine suite, where the oracle reads the engine's views.
 */
#include <math.h>

#include "fattn/dtype.h"
#include "fattn/philox.h"
#include "fattn/te.h"
#include "fattn_test.h"
#include "oracle.h"

/* ------------------------------------------------------------------------ */
/* Tiny cases                                                               */
/* ------------------------------------------------------------------------ */

#define NO_MASK .mask = FATTN_MASK_NO_MASK, .window = {-1, -1}, .bottom_right = true
#define CAUSAL .mask = FATTN_MASK_CAUSAL, .window = {-1, 0}, .bottom_right = false
#define WINDOW(M, L, R, BR) .mask = FATTN_MASK_##M, .window = {L, R}, .bottom_right = BR
#define SMALL(B, H, HG) .b = B, .h = H, .hg = HG, .sq = 3, .skv = 5, .d = 4, .dv = 3
#define F32(L) .dtype = FATTN_DTYPE_FLOAT32, .layout = FATTN_LAYOUT_##L, .training = true

static const int pad_q[] = {2, 3}, pad_kv[] = {5, 3};
static const int full_q[] = {3, 1}, full_kv[] = {1, 5}; /* batch 0: 2 empty rows */
static const int thd_q[] = {3, 1}, thd_kv[] = {4, 2};

static const tcase fd_cases[] = {
    {.id = "fd.nomask", SMALL(1, 2, 2), F32(BSHD_BSHD_BSHD), NO_MASK, .seed = 11},
    {.id = "fd.causal", SMALL(2, 2, 2), F32(SBHD_SBHD_SBHD), CAUSAL, .seed = 12},
    {.id = "fd.window.bottom_right", SMALL(2, 2, 1), F32(BSHD_BSHD_BSHD),
     WINDOW(NO_MASK, 2, 0, true), .seed = 13},
    {.id = "fd.window.top_left", SMALL(1, 2, 2), F32(BHSD_BHSD_BHSD),
     WINDOW(NO_MASK, 1, 1, false), .seed = 14},
    {.id = "fd.bias.1hss", SMALL(2, 2, 2), F32(BSHD_BSHD_BSHD), NO_MASK,
     .bias = FATTN_BIAS_POST_SCALE_BIAS, .bias_b = 1, .bias_h = 2, .bias_sq = 3,
     .seed = 15},
    {.id = "fd.bias.b1ss", SMALL(2, 2, 1), F32(SBHD_SBHD_SBHD), CAUSAL,
     .bias = FATTN_BIAS_POST_SCALE_BIAS, .bias_b = 2, .bias_h = 1, .bias_sq = 3,
     .seed = 16},
    {.id = "fd.alibi", SMALL(1, 3, 1), F32(BSHD_BSHD_BSHD),
     WINDOW(CAUSAL_BOTTOM_RIGHT, -1, 0, true), .bias = FATTN_BIAS_ALIBI, .seed = 17},
    {.id = "fd.learnable", SMALL(2, 2, 2), F32(BSHD_BSHD_BSHD), CAUSAL,
     .softmax = FATTN_SOFTMAX_LEARNABLE, .seed = 18},
    {.id = "fd.off_by_one", SMALL(1, 2, 1), F32(SBHD_SBHD_SBHD), NO_MASK,
     .softmax = FATTN_SOFTMAX_OFF_BY_ONE, .seed = 19},
    {.id = "fd.gqa", SMALL(1, 4, 2), F32(BSHD_BSHD_BSHD), NO_MASK, .seed = 20},
    {.id = "fd.padding", SMALL(2, 2, 2), F32(BSHD_BSHD_BSHD),
     WINDOW(PADDING, -1, -1, true), .seqlens_q = pad_q, .seqlens_kv = pad_kv,
     .seed = 21},
    {.id = "fd.padding_causal_bottom_right.empty_rows", SMALL(2, 2, 2),
     F32(BSHD_BSHD_BSHD), WINDOW(PADDING_CAUSAL_BOTTOM_RIGHT, -1, 0, true),
     .seqlens_q = full_q, .seqlens_kv = full_kv, .seed = 22},
    {.id = "fd.padding_causal_bottom_right.empty_rows.learnable", SMALL(2, 2, 2),
     F32(BSHD_BSHD_BSHD), WINDOW(PADDING_CAUSAL_BOTTOM_RIGHT, -1, 0, true),
     .softmax = FATTN_SOFTMAX_LEARNABLE, .seqlens_q = full_q,
     .seqlens_kv = full_kv, .seed = 23},
    {.id = "fd.thd", SMALL(2, 2, 1), F32(THD_THD_THD),
     WINDOW(PADDING_CAUSAL, -1, 0, false), .pad_between_seqs = true,
     .seqlens_q = thd_q, .seqlens_kv = thd_kv, .seed = 24},
    {.id = "fd.thd_bshd_bshd.learnable", SMALL(2, 2, 2), F32(THD_BSHD_BSHD),
     WINDOW(PADDING, -1, -1, true), .softmax = FATTN_SOFTMAX_LEARNABLE,
     .pad_between_seqs = true, .seqlens_q = thd_q, .seqlens_kv = thd_kv,
     .seed = 25},
    {.id = "fd.dropout", SMALL(2, 2, 2), F32(BSHD_BSHD_BSHD), NO_MASK,
     .dropout = 0.3f, .seed = 26},
};
#define N_FD ((int)(sizeof fd_cases / sizeof fd_cases[0]))

/* ------------------------------------------------------------------------ */
/* A fixture: float32 buffers plus exact double copies of the inputs        */
/* ------------------------------------------------------------------------ */

typedef struct fixture {
    const tcase *c;
    tcase_buffers buf;
    double *x[6];      /* q k v bias offset dO, C order of each logical shape */
    int64_t n[6];
    oracle_inputs in;
} fixture;

enum { X_Q, X_K, X_V, X_BIAS, X_OFF, X_DO };

static int shape_of(fattn_qkv_format f, int64_t b, int64_t s, int64_t t,
                    int64_t heads, int64_t dim, int64_t *shape)
{
    if (f == FATTN_FORMAT_THD) {
        shape[0] = t, shape[1] = heads, shape[2] = dim;
        return 3;
    }
    if (f == FATTN_FORMAT_SBHD)
        shape[0] = s, shape[1] = b, shape[2] = heads, shape[3] = dim;
    else if (f == FATTN_FORMAT_BHSD)
        shape[0] = b, shape[1] = heads, shape[2] = s, shape[3] = dim;
    else
        shape[0] = b, shape[1] = s, shape[2] = heads, shape[3] = dim;
    return 4;
}

/* Allocate a float32 tensor, fill it from Philox (scale * sym unit), and keep
 * an exact double copy. */
static void make_input(fixture *f, int which, fattn_tensor *t, int ndim,
                       const int64_t *shape, uint64_t stream, float scale)
{
    ck_assert_int_eq(fattn_tensor_alloc(t, FATTN_DTYPE_FLOAT32, ndim, shape), FATTN_OK);
    int64_t n = fattn_tensor_numel(t);
    f->n[which] = n;
    f->x[which] = malloc(sizeof(double) * (size_t)n);
    ck_assert_ptr_nonnull(f->x[which]);
    for (int64_t e = 0; e < n; e++) {
        float u = fattn_philox_to_sym_unit(fattn_philox_u32(f->c->seed, stream, (uint64_t)e));
        ((float *)t->data)[e] = scale * u;
        f->x[which][e] = (double)(scale * u);
    }
}

static void make_i32(fattn_tensor *t, int n, const int *v)
{
    int64_t shape[1] = {n};
    ck_assert_int_eq(fattn_tensor_alloc(t, FATTN_DTYPE_INT32, 1, shape), FATTN_OK);
    for (int i = 0; i < n; i++)
        ((int32_t *)t->data)[i] = v[i];
}

static void fixture_init(fixture *f, const tcase *c)
{
    memset(f, 0, sizeof *f);
    f->c = c;
    tcase_buffers *b = &f->buf;
    fattn_qkv_format qf = fattn_layout_q_format(c->layout);
    fattn_qkv_format kvf = fattn_layout_kv_format(c->layout);
    bool padding = fattn_mask_has_padding(c->mask);

    int cu_q[9] = {0}, cu_kv[9] = {0}, off_q[9] = {0}, off_kv[9] = {0};
    for (int bi = 0; bi < c->b; bi++) {
        int lq = padding ? c->seqlens_q[bi] : c->sq;
        int lkv = padding ? c->seqlens_kv[bi] : c->skv;
        int gap = c->pad_between_seqs ? 2 : 0; /* two gap tokens per sequence */
        cu_q[bi + 1] = cu_q[bi] + lq;
        cu_kv[bi + 1] = cu_kv[bi] + lkv;
        off_q[bi + 1] = off_q[bi] + lq + gap;
        off_kv[bi + 1] = off_kv[bi] + lkv + gap;
    }
    make_i32(&b->cu_q, c->b + 1, cu_q);
    make_i32(&b->cu_kv, c->b + 1, cu_kv);
    if (padding) {
        make_i32(&b->cu_q_pad, c->b + 1, qf == FATTN_FORMAT_THD ? off_q : cu_q);
        make_i32(&b->cu_kv_pad, c->b + 1, kvf == FATTN_FORMAT_THD ? off_kv : cu_kv);
    }
    b->t_q = off_q[c->b];
    b->t_kv = off_kv[c->b];

    int64_t s[4];
    int nd = shape_of(qf, c->b, c->sq, b->t_q, c->h, c->d, s);
    make_input(f, X_Q, &b->qkv_storage[0], nd, s, 1, 0.5f);
    nd = shape_of(kvf, c->b, c->skv, b->t_kv, c->hg, c->d, s);
    make_input(f, X_K, &b->qkv_storage[1], nd, s, 2, 0.5f);
    nd = shape_of(kvf, c->b, c->skv, b->t_kv, c->hg, c->dv, s);
    make_input(f, X_V, &b->qkv_storage[2], nd, s, 3, 1.0f);
    b->q = b->qkv_storage[0];
    b->k = b->qkv_storage[1];
    b->v = b->qkv_storage[2];
    if (c->bias == FATTN_BIAS_POST_SCALE_BIAS) {
        int64_t bs[4] = {c->bias_b, c->bias_h, c->bias_sq, c->skv};
        make_input(f, X_BIAS, &b->bias, 4, bs, 4, 1.0f);
    }
    if (c->softmax != FATTN_SOFTMAX_VANILLA) {
        int64_t os[4] = {1, c->h, 1, 1};
        make_input(f, X_OFF, &b->softmax_offset, 4, os, 5, 1.0f);
        if (c->softmax == FATTN_SOFTMAX_OFF_BY_ONE)
            for (int n = 0; n < c->h; n++)
                ((float *)b->softmax_offset.data)[n] = 0.0f, f->x[X_OFF][n] = 0.0;
    }
    nd = shape_of(qf, c->b, c->sq, b->t_q, c->h, c->dv, s);
    make_input(f, X_DO, &b->d_o, nd, s, 6, 0.1f);
    ck_assert_int_eq(fattn_tensor_alloc(&b->o, FATTN_DTYPE_FLOAT32, nd, s), FATTN_OK);
    if (qf == FATTN_FORMAT_THD) {
        int64_t ss[3] = {b->t_q, c->h, 1};
        ck_assert_int_eq(fattn_tensor_alloc(&b->stats, FATTN_DTYPE_FLOAT32, 3, ss), FATTN_OK);
    } else {
        int64_t ss[4] = {c->b, c->h, c->sq, 1};
        ck_assert_int_eq(fattn_tensor_alloc(&b->stats, FATTN_DTYPE_FLOAT32, 4, ss), FATTN_OK);
    }
    int64_t rs[1] = {2};
    ck_assert_int_eq(fattn_tensor_alloc(&b->rng_state, FATTN_DTYPE_INT64, 1, rs), FATTN_OK);
    ((int64_t *)b->rng_state.data)[0] = (int64_t)c->seed + 7;
    ((int64_t *)b->rng_state.data)[1] = 32;

    f->in.q = f->x[X_Q];
    f->in.k = f->x[X_K];
    f->in.v = f->x[X_V];
    f->in.bias = f->x[X_BIAS];
    f->in.softmax_offset = f->x[X_OFF];
    f->in.d_o = f->x[X_DO];
}

static void fixture_free(fixture *f)
{
    tcase_buffers *b = &f->buf;
    fattn_tensor *own[] = {&b->qkv_storage[0], &b->qkv_storage[1], &b->qkv_storage[2],
                           &b->bias, &b->softmax_offset, &b->cu_q, &b->cu_kv,
                           &b->cu_q_pad, &b->cu_kv_pad, &b->rng_state, &b->o,
                           &b->d_o, &b->stats};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        fattn_tensor_free(own[i]);
    for (int i = 0; i < 6; i++)
        free(f->x[i]);
}

/* loss = sum over O's elements of O * dO (undefined rows are 0 in O). */
static double loss(const fixture *f)
{
    oracle_result r = {0};
    ck_assert_int_eq(oracle_forward(f->c, &f->buf, &f->in, &r), FATTN_OK);
    double l = 0.0;
    for (int64_t e = 0; e < r.n_o; e++)
        l += r.o[e] * f->x[X_DO][e];
    oracle_result_free(&r);
    return l;
}

/* Central differences of loss() in every element of input `which`, against
 * the analytic gradient g. Returns the largest |fd - g|. */
static double fd_check(fixture *f, int which, const double *g, const char *name)
{
    const double step = 1e-6;
    double worst = 0.0;
    for (int64_t e = 0; e < f->n[which]; e++) {
        double keep = f->x[which][e];
        f->x[which][e] = keep + step;
        double lp = loss(f);
        f->x[which][e] = keep - step;
        double lm = loss(f);
        f->x[which][e] = keep;
        double fd = (lp - lm) / (2.0 * step);
        double err = fabs(fd - g[e]);
        if (err > worst)
            worst = err;
        ck_assert_msg(err <= 1e-7 + 1e-6 * fabs(g[e]),
                      "%s: d%s[%lld]: finite difference %.12g, backward %.12g",
                      f->c->id, name, (long long)e, fd, g[e]);
    }
    return worst;
}

START_TEST(test_fd)
{
    const tcase *c = &fd_cases[_i];
    fixture f;
    fixture_init(&f, c);
    oracle_result r = {0};
    ck_assert_int_eq(oracle_forward(c, &f.buf, &f.in, &r), FATTN_OK);
    ck_assert_int_eq(oracle_backward(c, &f.buf, &f.in, false, &r), FATTN_OK);
    ck_assert_int_eq(r.n_dq, f.n[X_Q]);
    ck_assert_int_eq(r.n_dk, f.n[X_K]);
    ck_assert_int_eq(r.n_dv, f.n[X_V]);

    /* The gradient must not be trivially zero, or the check proves little. */
    double gsum = 0.0;
    for (int64_t e = 0; e < r.n_dq; e++)
        gsum += fabs(r.dq[e]);
    ck_assert_msg(gsum > 1e-6, "%s: dQ is all zero", c->id);

    fd_check(&f, X_Q, r.dq, "Q");
    fd_check(&f, X_K, r.dk, "K");
    fd_check(&f, X_V, r.dv, "V");
    if (c->bias == FATTN_BIAS_POST_SCALE_BIAS) {
        ck_assert_ptr_nonnull(r.d_bias);
        ck_assert_int_eq(r.n_bias, f.n[X_BIAS]);
        fd_check(&f, X_BIAS, r.d_bias, "Bias");
    } else {
        ck_assert_ptr_null(r.d_bias);
    }
    if (c->softmax != FATTN_SOFTMAX_VANILLA) {
        ck_assert_ptr_nonnull(r.d_softmax_offset);
        ck_assert_int_eq(r.n_offset, c->h);
        fd_check(&f, X_OFF, r.d_softmax_offset, "SoftmaxOffset");
    } else {
        ck_assert_ptr_null(r.d_softmax_offset);
    }

    /* The saved path: the same backward given O and Stats as an engine would
     * store them (float32 here) differs only by that rounding. */
    for (int64_t e = 0; e < r.n_o; e++)
        ((float *)f.buf.o.data)[e] = (float)r.o[e];
    for (int64_t e = 0; e < r.n_stats; e++)
        ((float *)f.buf.stats.data)[e] = (float)r.stats[e];
    oracle_result r2 = {0};
    ck_assert_int_eq(oracle_backward(c, &f.buf, &f.in, true, &r2), FATTN_OK);
    for (int64_t e = 0; e < r.n_dq; e++)
        ck_assert_double_eq_tol(r2.dq[e], r.dq[e], 1e-6);
    for (int64_t e = 0; e < r.n_dk; e++)
        ck_assert_double_eq_tol(r2.dk[e], r.dk[e], 1e-6);
    for (int64_t e = 0; e < r.n_dv; e++)
        ck_assert_double_eq_tol(r2.dv[e], r.dv[e], 1e-6);

    oracle_result_free(&r2);
    oracle_result_free(&r);
    fixture_free(&f);
    fattn_test_mark(c->id);
}
END_TEST

/* Softmax identities row by row, and the overrides reading exactly what the
 * tensors hold. */
START_TEST(test_identities)
{
    const tcase *c = &fd_cases[_i];
    fixture f;
    fixture_init(&f, c);
    oracle_result r = {0}, rt = {0};
    ck_assert_int_eq(oracle_forward(c, &f.buf, &f.in, &r), FATTN_OK);
    ck_assert_int_eq(oracle_forward(c, &f.buf, NULL, &rt), FATTN_OK);
    ck_assert_int_eq(oracle_backward(c, &f.buf, &f.in, false, &r), FATTN_OK);
    ck_assert_int_eq(oracle_backward(c, &f.buf, NULL, false, &rt), FATTN_OK);
    /* Overrides equal to the float32 data give bit-identical results. */
    ck_assert_mem_eq(r.o, rt.o, sizeof(double) * (size_t)r.n_o);
    ck_assert_mem_eq(r.stats, rt.stats, sizeof(double) * (size_t)r.n_stats);
    ck_assert_mem_eq(r.dq, rt.dq, sizeof(double) * (size_t)r.n_dq);
    ck_assert_mem_eq(r.dk, rt.dk, sizeof(double) * (size_t)r.n_dk);
    ck_assert_mem_eq(r.dv, rt.dv, sizeof(double) * (size_t)r.n_dv);

    double *s = malloc(sizeof(double) * (size_t)c->skv);
    bool *kept = malloc(sizeof(bool) * (size_t)c->skv);
    bool sink = c->softmax != FATTN_SOFTMAX_VANILLA;
    bool q_thd = fattn_layout_q_format(c->layout) == FATTN_FORMAT_THD;
    for (int bi = 0; bi < c->b; bi++) {
        for (int n = 0; n < c->h; n++) {
            double z = sink ? f.x[X_OFF][n] : -INFINITY;
            for (int i = 0; i < oracle_len_q(c, &f.buf, bi); i++) {
                int nk = oracle_row_logits(c, &f.buf, NULL, bi, n, i, s, kept);
                int64_t si = q_thd ? (oracle_off_q(c, &f.buf, bi) + i) * c->h + n
                                   : ((int64_t)bi * c->h + n) * c->sq + i;
                double stats = r.stats[si];
                if (nk == 0 && !sink) {
                    ck_assert(isinf(stats) && stats < 0);
                    continue;
                }
                double psum = sink ? exp(z - stats) : 0.0, esum = sink ? exp(z) : 0.0;
                for (int j = 0; j < c->skv; j++) {
                    if (!kept[j])
                        continue;
                    psum += exp(s[j] - stats);
                    esum += exp(s[j]);
                }
                ck_assert_double_eq_tol(psum, 1.0, 1e-12); /* rows sum to 1 */
                ck_assert_double_eq_tol(stats, log(esum), 1e-12); /* logsumexp */
                if (nk == 0) /* only the sink: Stats = z */
                    ck_assert_double_eq_tol(stats, z, 1e-15);
            }
        }
    }
    free(s);
    free(kept);
    oracle_result_free(&r);
    oracle_result_free(&rt);
    fixture_free(&f);
}
END_TEST

/* Step 2 by explicit indexing: the logits with the bias minus the logits
 * without it are bias[bi|0, n|0, i|0, j]; with alibi, (j - i) * slope(n). */
START_TEST(test_bias_terms)
{
    const tcase *c = &fd_cases[_i];
    if (c->bias == FATTN_BIAS_NO_BIAS)
        return;
    fixture f;
    fixture_init(&f, c);
    tcase plain = *c;
    plain.bias = FATTN_BIAS_NO_BIAS;
    double s[5], s0[5];
    bool kept[5], kept0[5];
    int checked = 0;
    for (int bi = 0; bi < c->b; bi++)
        for (int n = 0; n < c->h; n++)
            for (int i = 0; i < c->sq; i++) {
                oracle_row_logits(c, &f.buf, &f.in, bi, n, i, s, kept);
                oracle_row_logits(&plain, &f.buf, &f.in, bi, n, i, s0, kept0);
                for (int j = 0; j < c->skv; j++) {
                    ck_assert(kept[j] == kept0[j]);
                    if (!kept[j])
                        continue;
                    double want;
                    if (c->bias == FATTN_BIAS_ALIBI) {
                        want = (double)(j - i) * oracle_alibi_slope(n, c->h);
                    } else {
                        int bb = c->bias_b == 1 ? 0 : bi, bh = c->bias_h == 1 ? 0 : n;
                        int bs = c->bias_sq == 1 ? 0 : i;
                        want = f.x[X_BIAS][((bb * c->bias_h + bh) * c->bias_sq + bs) *
                                               c->skv + j];
                    }
                    ck_assert_double_eq_tol(s[j] - s0[j], want, 1e-14);
                    checked++;
                }
            }
    ck_assert_int_gt(checked, 0);
    fixture_free(&f);
}
END_TEST

/* Max is the largest kept logit without the sink; -inf for an empty row. */
START_TEST(test_max_logit)
{
    tcase c = fd_cases[12]; /* empty rows + learnable sink */
    ck_assert_str_eq(c.id, "fd.padding_causal_bottom_right.empty_rows.learnable");
    c.return_max_logit = true;
    fixture f;
    fixture_init(&f, &c);
    oracle_result r = {0};
    ck_assert_int_eq(oracle_forward(&c, &f.buf, NULL, &r), FATTN_OK);
    ck_assert_ptr_nonnull(r.max);
    double s[5];
    bool kept[5];
    int empty = 0;
    for (int bi = 0; bi < c.b; bi++)
        for (int n = 0; n < c.h; n++)
            for (int i = 0; i < oracle_len_q(&c, &f.buf, bi); i++) {
                int nk = oracle_row_logits(&c, &f.buf, NULL, bi, n, i, s, kept);
                double m = -INFINITY;
                for (int j = 0; j < c.skv; j++)
                    if (kept[j] && s[j] > m)
                        m = s[j];
                int64_t si = ((int64_t)bi * c.h + n) * c.sq + i;
                ck_assert(r.max[si] == m);
                if (nk == 0) {
                    empty++;
                    ck_assert(isinf(r.max[si]) && r.max[si] < 0);
                    /* the sink alone: Stats = z, O = 0 */
                    ck_assert_double_eq_tol(r.stats[si], f.x[X_OFF][n], 1e-15);
                }
            }
    ck_assert_int_eq(empty, 2 * c.h); /* rows 0 and 1 of batch 0 */
    oracle_result_free(&r);
    fixture_free(&f);
}
END_TEST

/* One row by hand: d = 1 (scale 1), q = 1, k = (1, -1), v = (2, 4). */
START_TEST(test_known_answer)
{
    static const tcase c = {.id = "known", .b = 1, .h = 1, .hg = 1, .sq = 1, .skv = 2,
                            .d = 1, .dv = 1, F32(BSHD_BSHD_BSHD), NO_MASK, .seed = 1};
    fixture f;
    fixture_init(&f, &c);
    double q[1] = {1.0}, k[2] = {1.0, -1.0}, v[2] = {2.0, 4.0}, d_o[1] = {1.0};
    f.in.q = q, f.in.k = k, f.in.v = v, f.in.d_o = d_o;
    oracle_result r = {0};
    ck_assert_int_eq(oracle_forward(&c, &f.buf, &f.in, &r), FATTN_OK);
    double e = exp(1.0), ie = exp(-1.0);
    double p0 = e / (e + ie), p1 = ie / (e + ie);
    ck_assert_double_eq_tol(r.o[0], 2.0 * p0 + 4.0 * p1, 1e-15);
    ck_assert_double_eq_tol(r.stats[0], log(e + ie), 1e-15);
    ck_assert_int_eq(oracle_backward(&c, &f.buf, &f.in, false, &r), FATTN_OK);
    /* dV = P; dS_j = P_j (v_j - O); dQ = sum dS_j k_j; dK_j = dS_j q */
    double o = 2.0 * p0 + 4.0 * p1;
    ck_assert_double_eq_tol(r.dv[0], p0, 1e-15);
    ck_assert_double_eq_tol(r.dv[1], p1, 1e-15);
    ck_assert_double_eq_tol(r.dk[0], p0 * (2.0 - o), 1e-15);
    ck_assert_double_eq_tol(r.dk[1], p1 * (4.0 - o), 1e-15);
    ck_assert_double_eq_tol(r.dq[0], p0 * (2.0 - o) - p1 * (4.0 - o), 1e-15);
    oracle_result_free(&r);
    fixture_free(&f);
}
END_TEST

START_TEST(test_alibi_slopes)
{
    for (int n = 0; n < 8; n++) /* power of two: 2^-1 .. 2^-8 */
        ck_assert_double_eq(oracle_alibi_slope(n, 8), ldexp(1.0, -(n + 1)));
    /* h = 6: n2 = 4 -> 2^-2, 2^-4, 2^-6, 2^-8, then 2^-1, 2^-3 (k = 1, 3) */
    const int e6[6] = {-2, -4, -6, -8, -1, -3};
    for (int n = 0; n < 6; n++)
        ck_assert_double_eq(oracle_alibi_slope(n, 6), ldexp(1.0, e6[n]));
    ck_assert_double_eq(oracle_alibi_slope(0, 1), ldexp(1.0, -8));
}
END_TEST

/* The band rule: sq = 4, skv = 6, window (1, 0), bottom-right: diag = i + 2,
 * keys i+1 .. i+2; top-left: keys i-1 .. i. */
START_TEST(test_band)
{
    tcase c = {.id = "band", .b = 1, .h = 1, .hg = 1, .sq = 4, .skv = 6, .d = 2,
               .dv = 2, F32(BSHD_BSHD_BSHD), WINDOW(NO_MASK, 1, 0, true), .seed = 3};
    for (int br = 0; br < 2; br++) {
        c.bottom_right = br == 1;
        fixture f;
        fixture_init(&f, &c);
        double s[6];
        bool kept[6];
        for (int i = 0; i < 4; i++) {
            int nk = oracle_row_logits(&c, &f.buf, NULL, 0, 0, i, s, kept);
            int diag = br ? i + 2 : i;
            int want = 0;
            for (int j = 0; j < 6; j++) {
                bool in = j >= diag - 1 && j <= diag;
                want += in;
                ck_assert_msg(kept[j] == in, "br=%d i=%d j=%d", br, i, j);
                ck_assert(in ? isfinite(s[j]) : (isinf(s[j]) && s[j] < 0));
            }
            ck_assert_int_eq(nk, want);
        }
        fixture_free(&f);
    }
}
END_TEST

/* The keep rate of p = 0.25 over 8192 logits is 0.75 within 4 sigma, and
 * the mask is the Philox word test of numerics.md. */
START_TEST(test_dropout_mask)
{
    tcase c = {.id = "drop", .b = 1, .h = 2, .hg = 2, .sq = 64, .skv = 64, .d = 1,
               .dv = 1, F32(BSHD_BSHD_BSHD), NO_MASK, .dropout = 0.25f, .seed = 5};
    fixture f;
    fixture_init(&f, &c);
    int kept = 0;
    uint32_t thr = fattn_dropout_threshold(0.25f);
    ck_assert_uint_eq(thr, 1u << 30);
    for (int n = 0; n < 2; n++)
        for (int i = 0; i < 64; i++)
            for (int j = 0; j < 64; j++) {
                bool k = oracle_keep(&c, &f.buf, 0, n, i, j);
                uint64_t e = ((uint64_t)n * 64 + (uint64_t)i) * 64 + (uint64_t)j;
                ck_assert(k == (fattn_philox_u32(c.seed + 7, 32, e) >= thr));
                kept += k;
            }
    ck_assert_int_ge(kept, (int)(0.73 * 8192));
    ck_assert_int_le(kept, (int)(0.77 * 8192));
    c.training = false; /* inference never drops */
    for (int j = 0; j < 64; j++)
        ck_assert(oracle_keep(&c, &f.buf, 0, 0, 0, j));
    fixture_free(&f);
}
END_TEST

/* A given keep-mask replaces the Philox mapping: the CPU mapping's own
 * decisions handed in give the same bits; one decision flipped changes
 * exactly that row's O. */
START_TEST(test_keep_mask_input)
{
    tcase c = {.id = "keep", .b = 2, .h = 2, .hg = 2, .sq = 8, .skv = 8, .d = 4,
               .dv = 4, F32(BSHD_BSHD_BSHD), NO_MASK, .dropout = 0.25f, .seed = 11};
    fixture f;
    fixture_init(&f, &c);
    int64_t n = (int64_t)c.b * c.h * c.sq * c.skv;
    float *keep = malloc((size_t)n * sizeof *keep);
    ck_assert_ptr_nonnull(keep);
    for (int bi = 0; bi < c.b; bi++)
        for (int h = 0; h < c.h; h++)
            for (int i = 0; i < c.sq; i++)
                for (int j = 0; j < c.skv; j++)
                    keep[((bi * c.h + h) * c.sq + i) * c.skv + j] =
                        oracle_keep(&c, &f.buf, bi, h, i, j) ? 1.0f : 0.0f;
    oracle_result a = {0}, b = {0};
    oracle_inputs in = {.keep = keep};
    ck_assert_int_eq(oracle_forward(&c, &f.buf, NULL, &a), FATTN_OK);
    ck_assert_int_eq(oracle_forward(&c, &f.buf, &in, &b), FATTN_OK);
    ck_assert(memcmp(a.o, b.o, (size_t)a.n_o * sizeof(double)) == 0);
    ck_assert_int_eq(oracle_backward(&c, &f.buf, NULL, false, &a), FATTN_OK);
    ck_assert_int_eq(oracle_backward(&c, &f.buf, &in, false, &b), FATTN_OK);
    ck_assert(memcmp(a.dq, b.dq, (size_t)a.n_dq * sizeof(double)) == 0);
    ck_assert(memcmp(a.dv, b.dv, (size_t)a.n_dv * sizeof(double)) == 0);
    /* flip (b1, h0, i3, j5): O changes in row (1, 3, 0) only (bshd) */
    keep[((1 * c.h + 0) * c.sq + 3) * c.skv + 5] =
        keep[((1 * c.h + 0) * c.sq + 3) * c.skv + 5] != 0.0f ? 0.0f : 1.0f;
    oracle_result_free(&b);
    memset(&b, 0, sizeof b);
    ck_assert_int_eq(oracle_forward(&c, &f.buf, &in, &b), FATTN_OK);
    for (int bi = 0; bi < c.b; bi++)
        for (int i = 0; i < c.sq; i++)
            for (int h = 0; h < c.h; h++) {
                int64_t off = ((int64_t)(bi * c.sq + i) * c.h + h) * c.dv;
                bool same = memcmp(a.o + off, b.o + off, (size_t)c.dv * sizeof(double)) == 0;
                ck_assert_msg(same == !(bi == 1 && i == 3 && h == 0), "b%d i%d h%d", bi, i, h);
            }
    oracle_result_free(&a);
    oracle_result_free(&b);
    free(keep);
    fixture_free(&f);
}
END_TEST

/* Defined regions: padded rows of bshd and THD gap tokens are undefined, and
 * the oracle leaves them 0. */
START_TEST(test_defined_regions)
{
    const tcase *c = &fd_cases[13]; /* fd.thd: lengths q {3,1}, kv {4,2}, gaps 2 */
    ck_assert_str_eq(c->id, "fd.thd");
    fixture f;
    fixture_init(&f, c);
    ck_assert_int_eq(f.buf.t_q, 3 + 2 + 1 + 2);
    oracle_result r = {0};
    ck_assert_int_eq(oracle_forward(c, &f.buf, &f.in, &r), FATTN_OK);
    ck_assert_int_eq(oracle_backward(c, &f.buf, &f.in, false, &r), FATTN_OK);
    const bool tok_q[8] = {1, 1, 1, 0, 0, 1, 0, 0};
    const bool tok_kv[10] = {1, 1, 1, 1, 0, 0, 1, 1, 0, 0};
    for (int64_t t = 0; t < 8; t++)
        for (int64_t n = 0; n < c->h; n++)
            for (int64_t x = 0; x < c->dv; x++) {
                int64_t idx[3] = {t, n, x};
                ck_assert(oracle_defined(c, &f.buf, ORACLE_O, idx) == tok_q[t]);
                if (!tok_q[t])
                    ck_assert(r.o[(t * c->h + n) * c->dv + x] == 0.0);
            }
    for (int64_t t = 0; t < 10; t++) {
        int64_t idx[3] = {t, 0, 0};
        ck_assert(oracle_defined(c, &f.buf, ORACLE_DK, idx) == tok_kv[t]);
        if (!tok_kv[t])
            ck_assert(r.dk[t * c->hg * c->d] == 0.0);
    }
    oracle_result_free(&r);
    fixture_free(&f);
}
END_TEST

static void list_ids(void)
{
    for (int i = 0; i < N_FD; i++)
        printf("%s\n", fd_cases[i].id);
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("oracle");
    TCase *fd = tcase_create("finite_differences");
    tcase_set_timeout(fd, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(fd, test_fd, 0, N_FD);
    suite_add_tcase(s, fd);
    TCase *id = tcase_create("identities");
    tcase_set_timeout(id, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(id, test_identities, 0, N_FD);
    tcase_add_loop_test(id, test_bias_terms, 0, N_FD);
    tcase_add_test(id, test_max_logit);
    tcase_add_test(id, test_known_answer);
    tcase_add_test(id, test_alibi_slopes);
    tcase_add_test(id, test_band);
    tcase_add_test(id, test_dropout_mask);
    tcase_add_test(id, test_keep_mask_input);
    tcase_add_test(id, test_defined_regions);
    suite_add_tcase(s, id);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
