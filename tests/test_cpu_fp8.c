/* The CPU engine's FP8 attention against the float64 oracle.
 *
 * Inputs come from a float32 case (tests/cases.h) and are quantised as TE's
 * current scaling does (scale = fp8_max / amax; the tensor's scale_inv is
 * the engine's descale). The oracle computes the exact attention of the
 * dequantised inputs, so what remains is the engine's own quantisation of
 * P, O, dS and the gradients. Each output is held to a normwise relative
 * error bound (docs/numerics.md, "FP8 tolerances"); the amax outputs to the
 * oracle's maxima; Stats elementwise; and every output outside its defined
 * region must still hold its poison, every element inside it not.
 *
 * The forward runs twice, first with scale_o = 1 to learn amax_o, then with
 * scale_o = max / amax_o, as a current-scaling recipe would; the backward
 * likewise for dP, dQ, dK and dV. A third run of each with 1, 2, 3 and 5
 * threads must give identical bytes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/fp8.h"
#include "cases.h"
#include "fattn_test.h"
#include "oracle.h"

#include "cpu/fmath.h"

typedef struct fp8_case {
    tcase c;
    fattn_dtype qkv, o, d_o, dp, grad;
    /* normwise relative tolerances (docs/numerics.md "FP8 tolerances") */
    double tol_o, tol_grad;
} fp8_case;

#define E4 FATTN_DTYPE_FLOAT8_E4M3FN
#define E5 FATTN_DTYPE_FLOAT8_E5M2
#define F16 FATTN_DTYPE_FLOAT16
#define BF16 FATTN_DTYPE_BFLOAT16
#define CAUSAL {-1, 0}
#define FULL {-1, -1}

static const int thd_lq[] = {100, 37, 128};
static const int thd_lkv[] = {128, 64, 90};
static const int pad_lq[] = {128, 77};

static const fp8_case fp8_cases[] = {
    {{.id = "fp8.bshd.d128.hybrid", .b = 2, .h = 2, .hg = 2, .sq = 128, .skv = 128, .d = 128,
      .dv = 128, .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD, .mask = FATTN_MASK_NO_MASK,
      .window = FULL, .training = true, .return_max_logit = true, .seed = 11},
     E4, E4, E5, E5, E5, 0.125, 0.25},
    {{.id = "fp8.sbhd.gqa.causal.o_f16", .b = 2, .h = 4, .hg = 2, .sq = 128, .skv = 128,
      .d = 128, .dv = 128, .layout = FATTN_LAYOUT_SBHD_SBHD_SBHD, .mask = FATTN_MASK_CAUSAL,
      .window = CAUSAL, .training = true, .return_max_logit = true, .seed = 12},
     E4, F16, E5, E5, BF16, 0.125, 0.25},
    {{.id = "fp8.thd.padding_causal.e4m3", .b = 3, .h = 2, .hg = 1, .sq = 128, .skv = 128,
      .d = 128, .dv = 128, .layout = FATTN_LAYOUT_THD_THD_THD,
      .mask = FATTN_MASK_PADDING_CAUSAL, .window = CAUSAL, .training = true,
      .return_max_logit = true, .seqlens_q = thd_lq, .seqlens_kv = thd_lkv, .seed = 13},
     E4, E4, E4, E4, E4, 0.125, 0.125},
    {{.id = "fp8.bshd.padding.dropout", .b = 2, .h = 2, .hg = 2, .sq = 128, .skv = 128,
      .d = 128, .dv = 128, .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD, .mask = FATTN_MASK_PADDING,
      .window = FULL, .dropout = 0.1f, .training = true, .return_max_logit = true,
      .seqlens_q = pad_lq, .seqlens_kv = pad_lq, .seed = 14},
     E4, E4, E5, E5, E5, 0.125, 0.25},
    {{.id = "fp8.bshd.window.sq_ne_skv", .b = 1, .h = 2, .hg = 1, .sq = 64, .skv = 192,
      .d = 128, .dv = 128, .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD, .mask = FATTN_MASK_NO_MASK,
      .window = {48, 16}, .training = true, .return_max_logit = true, .seed = 15},
     E4, E4, E5, E5, E5, 0.125, 0.25},
    /* unequal head dims: TE's FP8 inference takes d_qk 192 / d_v 128 on
     * sm_90 (fused_attn.cpp:270); the engine, called directly, runs the
     * backward of them too */
    {{.id = "fp8.bshd.mla.d192_dv128", .b = 1, .h = 2, .hg = 1, .sq = 64, .skv = 96,
      .d = 192, .dv = 128, .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD, .mask = FATTN_MASK_CAUSAL,
      .window = CAUSAL, .training = true, .return_max_logit = true, .seed = 16},
     E4, E4, E5, E5, E5, 0.125, 0.25},
};

#define N_CASES ((int)(sizeof fp8_cases / sizeof fp8_cases[0]))

/* ---- helpers ------------------------------------------------------------ */

static void unravel(const fattn_tensor *t, int64_t lin, int64_t *idx)
{
    for (int i = t->ndim - 1; i >= 0; i--) {
        idx[i] = lin % t->shape[i];
        lin /= t->shape[i];
    }
}

static double load_at(const fattn_tensor *t, const int64_t *idx)
{
    return (double)fattn_load_f32(t->data, t->dtype, fattn_tensor_offset(t, idx));
}

/* dst: a contiguous FP8 (or other float) tensor of src's shape holding src
 * quantised with scale = max / amax; returns the dequantised values
 * (C order, double) and the descale. */
static double *quantize_like(const fattn_tensor *src, fattn_dtype t, fattn_tensor *dst,
                             float *descale)
{
    int64_t n = fattn_tensor_numel(src), idx[FATTN_MAX_DIMS];
    ck_assert_int_eq(fattn_tensor_alloc(dst, t, src->ndim, src->shape), FATTN_OK);
    double amax = 0.0;
    for (int64_t e = 0; e < n; e++) {
        unravel(src, e, idx);
        amax = fmax(amax, fabs(load_at(src, idx)));
    }
    ck_assert_msg(amax > 0.0, "input of zeros");
    float scale = (float)(fattn_fp8_max(t) / amax);
    *descale = 1.0f / scale;
    double *deq = malloc((size_t)n * sizeof(double));
    unsigned char *codes = dst->data;
    for (int64_t e = 0; e < n; e++) {
        unravel(src, e, idx);
        codes[e] = fattn_fp8_quantize(t, (float)load_at(src, idx), scale);
        deq[e] = (double)fattn_fp8_decode(t, codes[e]) * (double)*descale;
    }
    return deq;
}

static void alloc_poisoned(fattn_tensor *dst, fattn_dtype t, const fattn_tensor *like)
{
    ck_assert_int_eq(fattn_tensor_alloc(dst, t, like->ndim, like->shape), FATTN_OK);
    fattn_tensor_fill_bits(dst, UINT64_MAX);
}

/* The value element e of an engine output stands for. */
static double dequant(const fattn_tensor *t, int64_t e, float descale)
{
    int64_t idx[FATTN_MAX_DIMS];
    unravel(t, e, idx);
    if (fattn_dtype_is_fp8(t->dtype))
        return (double)fattn_fp8_decode(t->dtype, ((const unsigned char *)t->data)[e]) *
               (double)descale;
    return load_at(t, idx);
}

static bool all_ff(const fattn_tensor *t, int64_t e)
{
    size_t esz = fattn_dtype_size(t->dtype);
    const unsigned char *p = (const unsigned char *)t->data + (size_t)e * esz;
    for (size_t i = 0; i < esz; i++)
        if (p[i] != 0xff)
            return false;
    return true;
}

/* Normwise relative error of an output over its defined region, checking
 * poison outside it; *ref_max gets max |ref| over the region. */
static double rel_error(const fp8_case *fc, const tcase_buffers *buf, oracle_output which,
                        const fattn_tensor *t, const double *ref, float descale,
                        double *ref_max, const char *name)
{
    double num = 0.0, den = 0.0, rmax = 0.0;
    int64_t n = fattn_tensor_numel(t), idx[FATTN_MAX_DIMS], defined = 0;
    for (int64_t e = 0; e < n; e++) {
        unravel(t, e, idx);
        if (!oracle_defined(&fc->c, buf, which, idx)) {
            ck_assert_msg(all_ff(t, e), "%s: %s[%lld] outside the defined region was written",
                          fc->c.id, name, (long long)e);
            continue;
        }
        defined++;
        double a = dequant(t, e, descale);
        ck_assert_msg(isfinite(a), "%s: %s[%lld] = %g", fc->c.id, name, (long long)e, a);
        num += (a - ref[e]) * (a - ref[e]);
        den += ref[e] * ref[e];
        rmax = fmax(rmax, fabs(ref[e]));
    }
    ck_assert_msg(defined > 0 && den > 0.0, "%s: %s is zero or empty", fc->c.id, name);
    *ref_max = rmax;
    return sqrt(num / den);
}

/* ---- one case ----------------------------------------------------------- */

typedef struct fp8_state {
    tcase c;
    tcase_buffers buf; /* float32 inputs; o / stats / max get the engine's results */
    fattn_tensor q8, k8, v8, o8, do8, dq, dk, dv;
    double *qd, *kd, *vd, *dod;
    fattn_fp8_fwd ff;
    fattn_fp8_bwd fb;
    float descale_o;
    float amax_s, amax_o, amax_dp, amax_dq, amax_dk, amax_dv;
    fattn_aux_pack aux_bwd;
} fp8_state;

static tcase_buffers fp8_view(fp8_state *s)
{
    tcase_buffers b = s->buf;
    b.q = s->q8;
    b.k = s->k8;
    b.v = s->v8;
    b.o = s->o8;
    b.d_o = s->do8;
    b.dq = s->dq;
    b.dk = s->dk;
    b.dv = s->dv;
    return b;
}

static void run_fwd(fp8_state *s, fattn_engine *e)
{
    fattn_tensor_fill_bits(&s->o8, UINT64_MAX);
    tcase_buffers b = fp8_view(s);
    memset(&b.aux_fwd, 0, sizeof b.aux_fwd);
    fattn_fwd_params p = tcase_fwd_params(&s->c, &b);
    p.fp8 = &s->ff;
    ck_assert_msg(fattn_engine_fwd(e, &p) == FATTN_OK, "%s: %s", s->c.id, fattn_last_error());
    fattn_aux_layout l = fattn_aux_layout_fwd(s->c.bias, s->c.softmax, s->c.return_max_logit);
    fattn_tensor *st = &b.aux_fwd.t[l.stats], *mx = &b.aux_fwd.t[l.max];
    if (fattn_tensor_is_empty(&s->buf.stats)) {
        ck_assert_int_eq(fattn_tensor_alloc(&s->buf.stats, st->dtype, st->ndim, st->shape), 0);
        ck_assert_int_eq(fattn_tensor_alloc(&s->buf.max, mx->dtype, mx->ndim, mx->shape), 0);
    }
    fattn_tensor_fill_bits(&s->buf.stats, UINT64_MAX);
    fattn_tensor_fill_bits(&s->buf.max, UINT64_MAX);
    *st = s->buf.stats;
    *mx = s->buf.max;
    ck_assert_msg(fattn_engine_fwd(e, &p) == FATTN_OK, "%s: %s", s->c.id, fattn_last_error());
    s->aux_bwd.n = 2;
    s->aux_bwd.t[0] = b.aux_fwd.t[l.stats];
    s->aux_bwd.t[1] = b.aux_fwd.t[l.rng_state];
}

static void run_bwd(fp8_state *s, fattn_engine *e)
{
    fattn_tensor_fill_bits(&s->dq, UINT64_MAX);
    fattn_tensor_fill_bits(&s->dk, UINT64_MAX);
    fattn_tensor_fill_bits(&s->dv, UINT64_MAX);
    tcase_buffers b = fp8_view(s);
    b.aux_bwd = s->aux_bwd;
    fattn_bwd_params p = tcase_bwd_params(&s->c, &b);
    p.fp8 = &s->fb;
    ck_assert_msg(fattn_engine_bwd(e, &p) == FATTN_OK, "%s: %s", s->c.id, fattn_last_error());
}

/* A current-scaling scale for an output of dtype t whose amax was `amax`
 * (1 for an unscaled float16/bfloat16 output). */
static float scale_for(fattn_dtype t, float amax)
{
    if (!fattn_dtype_is_fp8(t))
        return 1.0f;
    ck_assert(amax > 0.0f && isfinite(amax));
    return fattn_fp8_max(t) / amax;
}

static void fp8_setup(const fp8_case *fc, fp8_state *s)
{
    memset(s, 0, sizeof *s);
    s->c = fc->c;
    s->c.dtype = FATTN_DTYPE_FLOAT32;
    ck_assert_msg(tcase_setup(&s->c, &s->buf) == FATTN_OK, "%s: %s", s->c.id,
                  fattn_last_error());
    fattn_fp8_fwd *f = &s->ff;
    s->qd = quantize_like(&s->buf.q, fc->qkv, &s->q8, &f->descale_q);
    s->kd = quantize_like(&s->buf.k, fc->qkv, &s->k8, &f->descale_k);
    s->vd = quantize_like(&s->buf.v, fc->qkv, &s->v8, &f->descale_v);
    s->dod = quantize_like(&s->buf.d_o, fc->d_o, &s->do8, &s->fb.descale_do);
    alloc_poisoned(&s->o8, fc->o, &s->buf.o);
    alloc_poisoned(&s->dq, fc->grad, &s->buf.q);
    alloc_poisoned(&s->dk, fc->grad, &s->buf.k);
    alloc_poisoned(&s->dv, fc->grad, &s->buf.v);
    f->s_dtype = fc->qkv;
    f->scale_s = fattn_fp8_max(fc->qkv); /* P <= 1 */
    f->descale_s = 1.0f / f->scale_s;
    f->scale_o = 1.0f;
    f->amax_s = &s->amax_s;
    f->amax_o = &s->amax_o;
    fattn_fp8_bwd *g = &s->fb;
    g->descale_q = f->descale_q;
    g->descale_k = f->descale_k;
    g->descale_v = f->descale_v;
    g->descale_s = f->descale_s;
    g->scale_s = f->scale_s;
    g->s_dtype = fc->qkv;
    g->dp_dtype = fc->dp;
    g->scale_dp = g->descale_dp = g->scale_dq = g->scale_dk = g->scale_dv = 1.0f;
    g->amax_dp = &s->amax_dp;
    g->amax_dq = &s->amax_dq;
    g->amax_dk = &s->amax_dk;
    g->amax_dv = &s->amax_dv;
}

static void fp8_teardown(fp8_state *s)
{
    fattn_tensor *ts[] = {&s->q8, &s->k8, &s->v8, &s->o8, &s->do8, &s->dq, &s->dk, &s->dv};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        fattn_tensor_free(ts[i]);
    free(s->qd);
    free(s->kd);
    free(s->vd);
    free(s->dod);
    tcase_teardown(&s->buf);
}

/* Forward and backward twice each: the first runs learn the amaxes that
 * the second runs' output scales come from. */
static void scaled_runs(const fp8_case *fc, fp8_state *s, fattn_engine *e)
{
    run_fwd(s, e);
    s->ff.scale_o = scale_for(fc->o, s->amax_o);
    s->descale_o = fattn_dtype_is_fp8(fc->o) ? 1.0f / s->ff.scale_o : 1.0f;
    run_fwd(s, e);
    s->fb.descale_o = s->descale_o;
    run_bwd(s, e);
    fattn_fp8_bwd *g = &s->fb;
    g->scale_dp = fattn_fp8_max(fc->dp) / s->amax_dp;
    g->descale_dp = 1.0f / g->scale_dp;
    g->scale_dq = scale_for(fc->grad, s->amax_dq);
    g->scale_dk = scale_for(fc->grad, s->amax_dk);
    g->scale_dv = scale_for(fc->grad, s->amax_dv);
    run_bwd(s, e);
}

/* The oracle's O, Stats and maxima against the scaled forward's. */
static void check_forward(const fp8_case *fc, fp8_state *s)
{
    oracle_inputs in = {.q = s->qd, .k = s->kd, .v = s->vd};
    oracle_result r = {0};
    ck_assert_int_eq(oracle_forward(&s->c, &s->buf, &in, &r), FATTN_OK);
    double omax, err = rel_error(fc, &s->buf, ORACLE_O, &s->o8, r.o, s->descale_o, &omax, "O");
    if (getenv("FATTN_FP8_VERBOSE"))
        fprintf(stderr, "%s: O error %.4f (tol %.3f)\n", fc->c.id, err, fc->tol_o);
    ck_assert_msg(err <= fc->tol_o, "%s: O normwise error %g > %g", fc->c.id, err, fc->tol_o);
    ck_assert_msg(fabs(s->amax_o - omax) <= fc->tol_o * omax, "%s: amax_o %g, oracle max %g",
                  fc->c.id, s->amax_o, omax);
    double pmax = 0.0;
    const float *st = s->buf.stats.data;
    int64_t idx[FATTN_MAX_DIMS];
    for (int64_t e2 = 0; e2 < r.n_stats; e2++) {
        unravel(&s->buf.stats, e2, idx);
        if (!oracle_defined(&s->c, &s->buf, ORACLE_STATS, idx)) {
            ck_assert(all_ff(&s->buf.stats, e2));
            continue;
        }
        ck_assert_msg(fabs(st[e2] - r.stats[e2]) <= 1e-4 * (1.0 + fabs(r.stats[e2])),
                      "%s: Stats[%lld] %g, oracle %g", fc->c.id, (long long)e2, st[e2],
                      r.stats[e2]);
        if (isfinite(r.max[e2]))
            pmax = fmax(pmax, exp(r.max[e2] - r.stats[e2]));
    }
    /* amax_s is max P before scale_s (after dropout's 1/(1-p)) */
    double want_s = pmax, slack = 1e-4 * want_s;
    if (s->c.dropout > 0.0f)
        ck_assert_msg(s->amax_s <= want_s / (1.0 - s->c.dropout) + slack && s->amax_s > 0.0f,
                      "%s: amax_s %g", fc->c.id, s->amax_s);
    else
        ck_assert_msg(fabs(s->amax_s - want_s) <= slack, "%s: amax_s %g, oracle max P %g",
                      fc->c.id, s->amax_s, want_s);
    oracle_result_free(&r);
}

/* The engine's O (dequantised) and Stats become what the oracle's backward
 * reads; the scaled backward's dQ, dK, dV against it. */
static void check_backward(const fp8_case *fc, fp8_state *s)
{
    int64_t n = fattn_tensor_numel(&s->buf.o), idx[FATTN_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        unravel(&s->buf.o, i, idx);
        float v = all_ff(&s->o8, i) ? 0.0f : (float)dequant(&s->o8, i, s->descale_o);
        fattn_store_f32(s->buf.o.data, FATTN_DTYPE_FLOAT32, fattn_tensor_offset(&s->buf.o, idx),
                        v);
    }
    const fattn_fp8_bwd *g = &s->fb;
    oracle_inputs in = {.q = s->qd, .k = s->kd, .v = s->vd, .d_o = s->dod};
    oracle_result r = {0};
    ck_assert_int_eq(oracle_backward(&s->c, &s->buf, &in, true, &r), FATTN_OK);
    const struct {
        const char *name;
        oracle_output which;
        const fattn_tensor *t;
        const double *ref;
        float scale, amax;
    } outs[] = {
        {"dQ", ORACLE_DQ, &s->dq, r.dq, g->scale_dq, s->amax_dq},
        {"dK", ORACLE_DK, &s->dk, r.dk, g->scale_dk, s->amax_dk},
        {"dV", ORACLE_DV, &s->dv, r.dv, g->scale_dv, s->amax_dv},
    };
    for (int k = 0; k < 3; k++) {
        float ds = fattn_dtype_is_fp8(fc->grad) ? 1.0f / outs[k].scale : 1.0f;
        double gmax, err = rel_error(fc, &s->buf, outs[k].which, outs[k].t, outs[k].ref, ds,
                                     &gmax, outs[k].name);
        if (getenv("FATTN_FP8_VERBOSE"))
            fprintf(stderr, "%s: %s error %.4f (tol %.3f)\n", fc->c.id, outs[k].name, err,
                    fc->tol_grad);
        ck_assert_msg(err <= fc->tol_grad, "%s: %s normwise error %g > %g", fc->c.id,
                      outs[k].name, err, fc->tol_grad);
        ck_assert_msg(fabs(outs[k].amax - gmax) <= fc->tol_grad * gmax,
                      "%s: amax_%s %g, oracle max %g", fc->c.id, outs[k].name, outs[k].amax,
                      gmax);
    }
    ck_assert(s->amax_dp > 0.0f && isfinite(s->amax_dp));
    oracle_result_free(&r);
}

static unsigned char *copy_bytes(const fattn_tensor *t)
{
    size_t n = (size_t)fattn_tensor_numel(t) * fattn_dtype_size(t->dtype);
    unsigned char *p = malloc(n);
    memcpy(p, t->data, n);
    return p;
}

static bool same_bytes(const fattn_tensor *t, const unsigned char *ref)
{
    size_t n = (size_t)fattn_tensor_numel(t) * fattn_dtype_size(t->dtype);
    return memcmp(t->data, ref, n) == 0;
}

/* The scaled reruns with 2, 3 and 5 threads give the 1-thread bytes. */
static void check_threads(fp8_state *s)
{
    const fattn_tensor *ts[] = {&s->o8, &s->buf.stats, &s->buf.max, &s->dq, &s->dk, &s->dv};
    const char *names[] = {"O", "Stats", "Max", "dQ", "dK", "dV"};
    unsigned char *ref[6];
    for (int i = 0; i < 6; i++)
        ref[i] = copy_bytes(ts[i]);
    float am[6] = {s->amax_s, s->amax_o, s->amax_dp, s->amax_dq, s->amax_dk, s->amax_dv};
    static const int threads[] = {2, 3, 5};
    for (int t = 0; t < 3; t++) {
        fattn_engine *e = NULL;
        ck_assert_int_eq(fattn_engine_init_cpu(&e, &(fattn_cpu_options){threads[t]}), 0);
        run_fwd(s, e);
        run_bwd(s, e);
        fattn_engine_free(e);
        for (int i = 0; i < 6; i++)
            ck_assert_msg(same_bytes(ts[i], ref[i]), "%s: %s differs with %d threads",
                          s->c.id, names[i], threads[t]);
        float am2[6] = {s->amax_s, s->amax_o, s->amax_dp, s->amax_dq, s->amax_dk, s->amax_dv};
        ck_assert_msg(memcmp(am, am2, sizeof am) == 0, "%s: an amax differs with %d threads",
                      s->c.id, threads[t]);
    }
    for (int i = 0; i < 6; i++)
        free(ref[i]);
}

START_TEST(fp8_vs_oracle)
{
    const fp8_case *fc = &fp8_cases[_i];
    fp8_state *s = calloc(1, sizeof *s);
    fp8_setup(fc, s);
    fattn_engine *e = NULL;
    ck_assert_int_eq(fattn_engine_init_cpu(&e, &(fattn_cpu_options){1}), FATTN_OK);
    scaled_runs(fc, s, e);
    fattn_engine_free(e);
    check_forward(fc, s);
    check_backward(fc, s);
    check_threads(s);
    fp8_teardown(s);
    free(s);
    fattn_test_mark(fc->c.id);
}
END_TEST

/* ---- the documented quantisation points, bit for bit ---------------------- */

/* A small case small enough to write docs/numerics.md's "FP8 attention"
 * steps out as plain float32 loops over the codes: the engine must give
 * exactly these codes, Stats and amaxes. One (batch, head), no mask, so
 * every loop below is the formula as the doc writes it. */
static const fp8_case model_case = {
    {.id = "fp8.model.bshd", .b = 1, .h = 1, .hg = 1, .sq = 5, .skv = 7, .d = 8, .dv = 8,
     .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD, .mask = FATTN_MASK_NO_MASK, .window = FULL,
     .training = true, .return_max_logit = true, .seed = 21},
    E4, E4, E5, E5, E5, 0.125, 0.25};

#define MQ 5
#define MK 7
#define MD 8

static float code_at(const fattn_tensor *t, int pos, int c)
{
    /* bshd [1, s, 1, d], contiguous */
    return fattn_fp8_decode(t->dtype, ((const unsigned char *)t->data)[pos * MD + c]);
}

typedef struct model_out {
    uint8_t o[MQ][MD], dq[MQ][MD], dk[MK][MD], dv[MK][MD];
    float stats[MQ], amax_s, amax_o, amax_dp, amax_dq, amax_dk, amax_dv;
} model_out;

static float amax1(float m, float x)
{
    return fabsf(x) > m ? fabsf(x) : m;
}

static void model_forward(const fp8_state *s, float scale, model_out *m, float p8[MQ][MK])
{
    const fattn_fp8_fwd *f = &s->ff;
    for (int i = 0; i < MQ; i++) {
        float sc[MK], p[MK], mx = -INFINITY, l = 0.0f, o[MD] = {0};
        for (int j = 0; j < MK; j++) {
            float acc = 0.0f;
            for (int c = 0; c < MD; c++)
                acc = acc + code_at(&s->q8, i, c) * code_at(&s->k8, j, c);
            sc[j] = ((acc * scale) * f->descale_q) * f->descale_k;
            mx = sc[j] > mx ? sc[j] : mx;
        }
        for (int j = 0; j < MK; j++)
            p[j] = fattn_cpu_expf(sc[j] - mx);
        for (int j = 0; j < MK; j++)
            l = l + p[j];
        m->stats[i] = mx + fattn__cpu_logf(l);
        for (int j = 0; j < MK; j++) {
            p[j] = p[j] / l;
            m->amax_s = amax1(m->amax_s, p[j]);
            p8[i][j] = fattn_fp8_decode(f->s_dtype, fattn_fp8_quantize(f->s_dtype, p[j],
                                                                       f->scale_s));
            for (int c = 0; c < MD; c++)
                o[c] = o[c] + p8[i][j] * code_at(&s->v8, j, c);
        }
        for (int c = 0; c < MD; c++) {
            float v = (o[c] * f->descale_s) * f->descale_v;
            m->amax_o = amax1(m->amax_o, v);
            m->o[i][c] = fattn_fp8_quantize(s->o8.dtype, v, f->scale_o);
        }
    }
}

static void model_backward(const fp8_state *s, float scale, model_out *m, float p8[MQ][MK])
{
    const fattn_fp8_bwd *g = &s->fb;
    float ds8[MQ][MK], hk[MK][MD] = {{0}}, hv[MK][MD] = {{0}};
    for (int i = 0; i < MQ; i++) {
        float dsum = 0.0f, dq[MD] = {0};
        for (int c = 0; c < MD; c++)
            dsum = dsum + code_at(&s->do8, i, c) * code_at(&s->o8, i, c);
        dsum = (dsum * g->descale_do) * g->descale_o;
        for (int j = 0; j < MK; j++) {
            float acc = 0.0f, dp = 0.0f;
            for (int c = 0; c < MD; c++)
                acc = acc + code_at(&s->q8, i, c) * code_at(&s->k8, j, c);
            float sc = ((acc * scale) * g->descale_q) * g->descale_k;
            float p = fattn_cpu_expf(sc - m->stats[i]);
            for (int c = 0; c < MD; c++)
                dp = dp + code_at(&s->do8, i, c) * code_at(&s->v8, j, c);
            dp = (dp * g->descale_do) * g->descale_v;
            float ds = p * (dp - dsum);
            m->amax_dp = amax1(m->amax_dp, ds);
            ds8[i][j] = fattn_fp8_decode(g->dp_dtype, fattn_fp8_quantize(g->dp_dtype, ds,
                                                                         g->scale_dp));
            for (int c = 0; c < MD; c++)
                dq[c] = dq[c] + ds8[i][j] * code_at(&s->k8, j, c);
        }
        for (int c = 0; c < MD; c++) {
            float v = ((dq[c] * g->descale_dp) * g->descale_k) * scale;
            m->amax_dq = amax1(m->amax_dq, v);
            m->dq[i][c] = fattn_fp8_quantize(s->dq.dtype, v, g->scale_dq);
        }
    }
    for (int j = 0; j < MK; j++)
        for (int i = 0; i < MQ; i++)
            for (int c = 0; c < MD; c++) {
                hk[j][c] = hk[j][c] + ds8[i][j] * code_at(&s->q8, i, c);
                hv[j][c] = hv[j][c] + p8[i][j] * code_at(&s->do8, i, c);
            }
    for (int j = 0; j < MK; j++)
        for (int c = 0; c < MD; c++) {
            /* the group sum starts from 0.0f (one head here) */
            float k = (((0.0f + hk[j][c]) * g->descale_dp) * g->descale_q) * scale;
            float v = ((0.0f + hv[j][c]) * g->descale_s) * g->descale_do;
            m->amax_dk = amax1(m->amax_dk, k);
            m->amax_dv = amax1(m->amax_dv, v);
            m->dk[j][c] = fattn_fp8_quantize(s->dk.dtype, k, g->scale_dk);
            m->dv[j][c] = fattn_fp8_quantize(s->dv.dtype, v, g->scale_dv);
        }
}

START_TEST(fp8_model_bits)
{
    fp8_state *s = calloc(1, sizeof *s);
    fp8_setup(&model_case, s);
    fattn_engine *e = NULL;
    ck_assert_int_eq(fattn_engine_init_cpu(&e, &(fattn_cpu_options){2}), FATTN_OK);
    scaled_runs(&model_case, s, e);
    fattn_engine_free(e);
    model_out *m = calloc(1, sizeof *m);
    float p8[MQ][MK];
    model_forward(s, s->buf.attn_scale, m, p8);
    model_backward(s, s->buf.attn_scale, m, p8);
    ck_assert_mem_eq(m->o, s->o8.data, sizeof m->o);
    ck_assert_mem_eq(m->stats, s->buf.stats.data, sizeof m->stats);
    ck_assert_mem_eq(m->dq, s->dq.data, sizeof m->dq);
    ck_assert_mem_eq(m->dk, s->dk.data, sizeof m->dk);
    ck_assert_mem_eq(m->dv, s->dv.data, sizeof m->dv);
    float want[6] = {m->amax_s, m->amax_o, m->amax_dp, m->amax_dq, m->amax_dk, m->amax_dv};
    float got[6] = {s->amax_s, s->amax_o, s->amax_dp, s->amax_dq, s->amax_dk, s->amax_dv};
    for (int k = 0; k < 6; k++)
        ck_assert_msg(memcmp(&want[k], &got[k], sizeof(float)) == 0, "amax %d: %a, model %a",
                      k, got[k], want[k]);
    free(m);
    fp8_teardown(s);
    free(s);
    fattn_test_mark("fp8.model.bits");
}
END_TEST

/* ---- refusals ------------------------------------------------------------ */

typedef struct refuse_row {
    const char *id;
    bool backward;
    void (*mutate)(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s);
    fattn_status want;
    const char *msg; /* a substring of the message */
} refuse_row;

static fattn_tensor f16_twin; /* a float16 tensor of Q's shape, for the dtype rows */
static fattn_tensor offset_zeros; /* float32 [1,h,1,1] zeros */

static void m_bias(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s)
{
    (void)bp;
    (void)s;
    fp->attn.bias_type = FATTN_BIAS_ALIBI;
}
static void m_softmax(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s)
{
    (void)bp;
    int64_t shape[4] = {1, s->c.h, 1, 1};
    ck_assert_int_eq(fattn_tensor_alloc(&offset_zeros, FATTN_DTYPE_FLOAT32, 4, shape), 0);
    fattn_tensor_fill_bits(&offset_zeros, 0);
    fp->attn.softmax_type = FATTN_SOFTMAX_OFF_BY_ONE;
    fp->softmax_offset = offset_zeros;
}
static void m_no_scaling(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s)
{
    (void)bp;
    (void)s;
    fp->fp8 = NULL;
}
static void m_q_f16(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s)
{
    (void)bp;
    (void)s;
    fp->attn.q = f16_twin;
}
static void m_k_e5m2(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s)
{
    (void)bp;
    (void)s;
    fp->attn.k.dtype = FATTN_DTYPE_FLOAT8_E5M2;
}
static void m_o_f32(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s)
{
    (void)bp;
    fp->attn.o = s->buf.o;
}
static void m_s_f16(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s)
{
    (void)fp;
    (void)bp;
    s->ff.s_dtype = FATTN_DTYPE_FLOAT16;
}
static void m_no_amax_s(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s)
{
    (void)fp;
    (void)bp;
    s->ff.amax_s = NULL;
}
static void m_do_f16(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s)
{
    (void)fp;
    (void)s;
    bp->d_o = f16_twin;
}
static void m_dp_bf16(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s)
{
    (void)fp;
    (void)bp;
    s->fb.dp_dtype = FATTN_DTYPE_BFLOAT16;
}
static void m_dq_f32(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s)
{
    (void)fp;
    bp->dq = s->buf.dq;
}
static void m_no_amax_dk(fattn_fwd_params *fp, fattn_bwd_params *bp, fp8_state *s)
{
    (void)fp;
    (void)bp;
    s->fb.amax_dk = NULL;
}

static const refuse_row refuse_rows[] = {
    /* the engines' gaps: the support table's rows, refused by the dispatch */
    {"fp8.refuse.bias", false, m_bias, FATTN_E_UNSUPPORTED, "rule fp8_bias_engines:"},
    {"fp8.refuse.softmax_offset", false, m_softmax, FATTN_E_UNSUPPORTED,
     "rule fp8_softmax_engines:"},
    {"fp8.refuse.codes_without_scaling", false, m_no_scaling, FATTN_E_UNSUPPORTED,
     "rule fp8_descales_engines:"},
    {"fp8.refuse.q_not_fp8", false, m_q_f16, FATTN_E_DTYPE, "needs FP8 Q"},
    {"fp8.refuse.k_other_fp8", false, m_k_e5m2, FATTN_E_DTYPE, "FP8 K is float8_e5m2"},
    {"fp8.refuse.o_float32", false, m_o_f32, FATTN_E_DTYPE, "O must be FP8"},
    {"fp8.refuse.s_not_fp8", false, m_s_f16, FATTN_E_DTYPE, "S dtype"},
    {"fp8.refuse.amax_s_missing", false, m_no_amax_s, FATTN_E_MISSING_FIELD, "amax_s"},
    {"fp8.refuse.bwd.do_not_fp8", true, m_do_f16, FATTN_E_DTYPE, "dO is float16"},
    {"fp8.refuse.bwd.dp_not_fp8", true, m_dp_bf16, FATTN_E_DTYPE, "dP dtype"},
    {"fp8.refuse.bwd.dq_float32", true, m_dq_f32, FATTN_E_DTYPE, "dQ is float32"},
    {"fp8.refuse.bwd.amax_dk_missing", true, m_no_amax_dk, FATTN_E_MISSING_FIELD, "amax_dk"},
};

START_TEST(fp8_refusals)
{
    const refuse_row *row = &refuse_rows[_i];
    fp8_state *s = calloc(1, sizeof *s);
    fp8_setup(&fp8_cases[0], s);
    ck_assert_int_eq(fattn_tensor_alloc(&f16_twin, FATTN_DTYPE_FLOAT16, s->buf.q.ndim,
                                        s->buf.q.shape), FATTN_OK);
    fattn_tensor_fill_bits(&f16_twin, 0x3c00); /* 1.0 */
    fattn_engine *e = NULL;
    ck_assert_int_eq(fattn_engine_init_cpu(&e, &(fattn_cpu_options){2}), FATTN_OK);
    if (row->backward)
        run_fwd(s, e);
    tcase_buffers b = fp8_view(s);
    memset(&b.aux_fwd, 0, sizeof b.aux_fwd);
    b.aux_bwd = s->aux_bwd;
    fattn_fwd_params fp = tcase_fwd_params(&s->c, &b);
    fattn_bwd_params bp = tcase_bwd_params(&s->c, &b);
    fp.fp8 = &s->ff;
    bp.fp8 = &s->fb;
    row->mutate(&fp, &bp, s);
    fattn_status st;
    if (row->backward) {
        st = fattn_engine_bwd(e, &bp);
    } else {
        st = fattn_engine_fwd(e, &fp); /* describing call */
        if (st == FATTN_OK) {
            fattn_aux_layout l = fattn_aux_layout_fwd(fp.attn.bias_type, fp.attn.softmax_type,
                                                      true);
            ck_assert_int_eq(fattn_tensor_alloc(&s->buf.stats, FATTN_DTYPE_FLOAT32,
                                                b.aux_fwd.t[l.stats].ndim,
                                                b.aux_fwd.t[l.stats].shape), 0);
            ck_assert_int_eq(fattn_tensor_alloc(&s->buf.max, FATTN_DTYPE_FLOAT32,
                                                b.aux_fwd.t[l.max].ndim,
                                                b.aux_fwd.t[l.max].shape), 0);
            b.aux_fwd.t[l.stats] = s->buf.stats;
            b.aux_fwd.t[l.max] = s->buf.max;
            st = fattn_engine_fwd(e, &fp);
        }
    }
    ck_assert_msg(st == row->want, "%s: %s (%s), want %s", row->id, fattn_status_name(st),
                  fattn_last_error(), fattn_status_name(row->want));
    ck_assert_msg(strstr(fattn_last_error(), row->msg), "%s: message \"%s\" lacks \"%s\"",
                  row->id, fattn_last_error(), row->msg);
    fattn_engine_free(e);
    fattn_tensor_free(&f16_twin);
    fattn_tensor_free(&offset_zeros);
    fp8_teardown(s);
    free(s);
    fattn_test_mark(row->id);
}
END_TEST

/* An engine that answers no query: the dispatch refuses its FP8 calls. */
static fattn_status nofp8_fwd(fattn_engine *e, const fattn_fwd_params *p,
                              const fattn_fwd_call *c)
{
    (void)e;
    (void)p;
    (void)c;
    return FATTN_E_INTERNAL;
}

START_TEST(fp8_engine_without_fp8)
{
    static const fattn_engine_ops ops = {.name = "nofp8", .fwd = nofp8_fwd};
    fattn_engine e = {.ops = &ops, .impl = NULL};
    fp8_state *s = calloc(1, sizeof *s);
    fp8_setup(&fp8_cases[0], s);
    tcase_buffers b = fp8_view(s);
    memset(&b.aux_fwd, 0, sizeof b.aux_fwd);
    fattn_fwd_params fp = tcase_fwd_params(&s->c, &b);
    fp.fp8 = &s->ff;
    ck_assert_int_eq(fattn_engine_fwd(&e, &fp), FATTN_E_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "the nofp8 engine has no FP8"));
    fattn_bwd_params bp = tcase_bwd_params(&s->c, &b);
    bp.fp8 = &s->fb;
    ck_assert_int_eq(fattn_engine_bwd(&e, &bp), FATTN_E_UNSUPPORTED);
    fattn_engine *cpu = NULL;
    ck_assert_int_eq(fattn_engine_init_cpu(&cpu, NULL), FATTN_OK);
    ck_assert(fattn_engine_supports(cpu, FATTN_ENGINE_Q_FP8));
    fattn_engine_free(cpu);
    fp8_teardown(s);
    free(s);
    fattn_test_mark("fp8.refuse.engine_without_fp8");
}
END_TEST

/* ---- optimisation levels ------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* One line per case: its id and a hash of every output byte and amax of
 * its scaled runs. */
static void write_digests(FILE *out)
{
    for (int i = 0; i < N_CASES; i++) {
        fp8_state *s = calloc(1, sizeof *s);
        fp8_setup(&fp8_cases[i], s);
        fattn_engine *e = NULL;
        ck_assert_int_eq(fattn_engine_init_cpu(&e, &(fattn_cpu_options){3}), FATTN_OK);
        scaled_runs(&fp8_cases[i], s, e);
        fattn_engine_free(e);
        const fattn_tensor *ts[] = {&s->o8, &s->buf.stats, &s->buf.max, &s->dq, &s->dk, &s->dv};
        uint64_t h = 0xcbf29ce484222325ull;
        for (int k = 0; k < 6; k++)
            h = fnv1a(h, ts[k]->data,
                      (size_t)fattn_tensor_numel(ts[k]) * fattn_dtype_size(ts[k]->dtype));
        float am[6] = {s->amax_s, s->amax_o, s->amax_dp, s->amax_dq, s->amax_dk, s->amax_dv};
        h = fnv1a(h, am, sizeof am);
        fprintf(out, "%s %016llx\n", s->c.id, (unsigned long long)h);
        fp8_teardown(s);
        free(s);
    }
}

#ifdef FATTN_CPU_FP8_O0
/* The same cases through the engine compiled at -O0 (this file built
 * against libfattn_o0, run with --digest) give the same bytes. */
START_TEST(fp8_opt_levels)
{
    char *mine = NULL, *theirs = NULL;
    size_t n_mine = 0, n_theirs = 0;
    FILE *m = open_memstream(&mine, &n_mine);
    write_digests(m);
    fclose(m);
    FILE *p = popen("'" FATTN_CPU_FP8_O0 "' --digest", "r");
    ck_assert_ptr_nonnull(p);
    FILE *t = open_memstream(&theirs, &n_theirs);
    char line[512];
    while (fgets(line, sizeof line, p))
        fputs(line, t);
    fclose(t);
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_msg(n_mine > 0 && strcmp(mine, theirs) == 0, "-O0 digests differ:\n%s\nvs\n%s",
                  theirs, mine);
    free(mine);
    free(theirs);
    fattn_test_mark("fp8.bits.opt_levels");
}
END_TEST
#endif

#define NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *make_suite(void)
{
    Suite *s = suite_create("cpu_fp8");
    TCase *tc = tcase_create("oracle");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, fp8_vs_oracle, 0, N_CASES);
    tcase_add_test(tc, fp8_model_bits);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("refuse");
    tcase_set_timeout(tr, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tr, fp8_refusals, 0, NROWS(refuse_rows));
    tcase_add_test(tr, fp8_engine_without_fp8);
    suite_add_tcase(s, tr);
#ifdef FATTN_CPU_FP8_O0
    TCase *tb = tcase_create("bits");
    tcase_set_timeout(tb, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_test(tb, fp8_opt_levels);
    suite_add_tcase(s, tb);
#endif
    return s;
}

static void list_ids(void)
{
    for (int i = 0; i < N_CASES; i++)
        printf("%s\n", fp8_cases[i].c.id);
    for (int i = 0; i < NROWS(refuse_rows); i++)
        printf("%s\n", refuse_rows[i].id);
    printf("fp8.refuse.engine_without_fp8\nfp8.model.bits\n");
#ifdef FATTN_CPU_FP8_O0
    printf("fp8.bits.opt_levels\n");
#endif
}

/* FATTN_TEST_MAIN's main, renamed, so that --digest can come first. */
int fp8_check_main(int argc, char **argv);
#define main fp8_check_main
FATTN_TEST_MAIN(make_suite, list_ids)
#undef main

/* Check's asserts report to a running test even when they hold, so the
 * digests are written from inside one, unforked, with Check silent. */
START_TEST(digest_to_stdout)
{
    write_digests(stdout);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--digest") == 0) {
        unsetenv("CK_TAP_LOG_FILE_NAME");
        Suite *su = suite_create("digest");
        TCase *tc = tcase_create("digest");
        tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
        tcase_add_test(tc, digest_to_stdout);
        suite_add_tcase(su, tc);
        SRunner *sr = srunner_create(su);
        srunner_set_fork_status(sr, CK_NOFORK);
        srunner_run_all(sr, CK_SILENT);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 2 : 0;
    }
    return fp8_check_main(argc, argv);
}
