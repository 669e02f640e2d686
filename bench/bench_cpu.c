/* CPU engine speed against a naive single-threaded loop, in one run.
 *
 * For each size (b=2 h=8 d=64, bf16, bshd, no mask; s = 512 and 2048) it
 * times the engine's forward and backward (all threads) and a naive
 * reference written the obvious way (one thread, per-element bf16 loads,
 * one dot product at a time), and prints the ratio. Figures are medians of
 * REPS runs; the naive loop runs once at s=2048 (it takes tens of seconds).
 * Inputs come from Philox, never zeros.
 *
 * Usage: bench_cpu [--quick]   (--quick: s=512 only)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fattn/engine.h"
#include "fattn/philox.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(fattn_tensor *t, uint64_t stream, float scale)
{
    int64_t n = fattn_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        fattn_store_f32(t->data, t->dtype, i,
                        scale * fattn_philox_to_sym_unit(fattn_philox_u32(42, stream, (uint64_t)i)));
}

/* ---- naive reference: bshd, no mask, vanilla softmax ------------------- */

static float ld(const fattn_tensor *t, int64_t b, int64_t s, int64_t h, int64_t c)
{
    return fattn_load_f32(t->data, t->dtype,
                          b * t->strides[0] + s * t->strides[1] + h * t->strides[2] + c);
}

static void naive_forward(const fattn_tensor *q, const fattn_tensor *k, const fattn_tensor *v,
                          fattn_tensor *o, float *stats, float scale)
{
    int64_t B = q->shape[0], S = q->shape[1], H = q->shape[2], D = q->shape[3];
    float *p = malloc((size_t)S * sizeof(float));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++) {
                float m = -INFINITY;
                for (int64_t j = 0; j < S; j++) {
                    float s = 0.0f;
                    for (int64_t c = 0; c < D; c++)
                        s += ld(q, b, i, h, c) * ld(k, b, j, h, c);
                    p[j] = s * scale;
                    if (p[j] > m)
                        m = p[j];
                }
                float l = 0.0f;
                for (int64_t j = 0; j < S; j++) {
                    p[j] = expf(p[j] - m);
                    l += p[j];
                }
                stats[(b * H + h) * S + i] = m + logf(l);
                for (int64_t c = 0; c < D; c++) {
                    float acc = 0.0f;
                    for (int64_t j = 0; j < S; j++)
                        acc += p[j] / l * ld(v, b, j, h, c);
                    fattn_store_f32(o->data, o->dtype,
                                    b * o->strides[0] + i * o->strides[1] + h * o->strides[2] + c,
                                    acc);
                }
            }
    free(p);
}

static void naive_backward(const fattn_tensor *q, const fattn_tensor *k, const fattn_tensor *v,
                           const fattn_tensor *o, const fattn_tensor *d_o, const float *stats,
                           float scale, float *dq, float *dk, float *dv)
{
    int64_t B = q->shape[0], S = q->shape[1], H = q->shape[2], D = q->shape[3];
    size_t n = (size_t)(B * S * H * D);
    memset(dq, 0, n * sizeof(float));
    memset(dk, 0, n * sizeof(float));
    memset(dv, 0, n * sizeof(float));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++) {
                float dsum = 0.0f;
                for (int64_t c = 0; c < D; c++)
                    dsum += ld(d_o, b, i, h, c) * ld(o, b, i, h, c);
                for (int64_t j = 0; j < S; j++) {
                    float s = 0.0f, dp = 0.0f;
                    for (int64_t c = 0; c < D; c++) {
                        s += ld(q, b, i, h, c) * ld(k, b, j, h, c);
                        dp += ld(d_o, b, i, h, c) * ld(v, b, j, h, c);
                    }
                    float p = expf(s * scale - stats[(b * H + h) * S + i]);
                    float ds = p * (dp - dsum) * scale;
                    for (int64_t c = 0; c < D; c++) {
                        size_t qi = (size_t)(((b * S + i) * H + h) * D + c);
                        size_t kj = (size_t)(((b * S + j) * H + h) * D + c);
                        dq[qi] += ds * ld(k, b, j, h, c);
                        dk[kj] += ds * ld(q, b, i, h, c);
                        dv[kj] += p * ld(d_o, b, i, h, c);
                    }
                }
            }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static int run_size(fattn_engine *e, int64_t S, int reps)
{
    const int64_t B = 2, H = 8, D = 64;
    int64_t shape[4] = {B, S, H, D};
    fattn_tensor q, k, v, o, d_o, dq, dk, dv, stats;
    fattn_dtype bf = FATTN_DTYPE_BFLOAT16;
    if (fattn_tensor_alloc(&q, bf, 4, shape) || fattn_tensor_alloc(&k, bf, 4, shape) ||
        fattn_tensor_alloc(&v, bf, 4, shape) || fattn_tensor_alloc(&o, bf, 4, shape) ||
        fattn_tensor_alloc(&d_o, bf, 4, shape) || fattn_tensor_alloc(&dq, bf, 4, shape) ||
        fattn_tensor_alloc(&dk, bf, 4, shape) || fattn_tensor_alloc(&dv, bf, 4, shape)) {
        fprintf(stderr, "bench: %s\n", fattn_last_error());
        return 1;
    }
    int64_t sshape[4] = {B, H, S, 1};
    fattn_tensor_alloc(&stats, FATTN_DTYPE_FLOAT32, 4, sshape);
    fill(&q, 1, 0.5f);
    fill(&k, 2, 0.5f);
    fill(&v, 3, 1.0f);
    fill(&d_o, 6, 0.1f);
    int64_t two = 2;
    int64_t rng[2] = {1234, 0};
    fattn_tensor rng_state = fattn_tensor_view(rng, FATTN_DTYPE_INT64, 1, &two);
    float scale = (float)(1.0 / sqrt((double)D));

    fattn_aux_pack aux = {0};
    fattn_fwd_params fp = {
        .attn.q = q, .attn.k = k, .attn.v = v, .attn.o = o, .aux = &aux, .rng_state = rng_state,
        .attn.max_seqlen_q = S, .attn.max_seqlen_kv = S, .is_training = true,
            .attn.attn_scale = scale,
        .attn.qkv_layout = FATTN_LAYOUT_BSHD_BSHD_BSHD, .attn.o_format = FATTN_FORMAT_BSHD,
        .attn.bias_type = FATTN_BIAS_NO_BIAS, .attn.mask_type = FATTN_MASK_NO_MASK,
        .attn.softmax_type = FATTN_SOFTMAX_VANILLA, .attn.window_size_left = -1,
        .attn.window_size_right = -1, .attn.bottom_right_diagonal = true,
    };
    fattn_engine_fwd(e, &fp); /* sizes the pack */
    aux.t[0] = stats;
    double tf[16], tb[16];
    fattn_bwd_params bp = {
        .attn.q = q, .attn.k = k, .attn.v = v, .attn.o = o, .d_o = d_o, .aux = &aux, .dq = dq,
            .dk = dk, .dv = dv,
        .attn.max_seqlen_q = S, .attn.max_seqlen_kv = S, .attn.attn_scale = scale,
        .attn.qkv_layout = FATTN_LAYOUT_BSHD_BSHD_BSHD, .attn.o_format = FATTN_FORMAT_BSHD,
        .do_format = FATTN_FORMAT_BSHD, .dqkv_layout = FATTN_LAYOUT_BSHD_BSHD_BSHD,
        .attn.bias_type = FATTN_BIAS_NO_BIAS, .attn.mask_type = FATTN_MASK_NO_MASK,
        .attn.softmax_type = FATTN_SOFTMAX_VANILLA, .attn.window_size_left = -1,
        .attn.window_size_right = -1, .attn.bottom_right_diagonal = true,
    };
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        if (fattn_engine_fwd(e, &fp) != FATTN_OK) {
            fprintf(stderr, "bench: forward: %s\n", fattn_last_error());
            return 1;
        }
        double t1 = now_s();
        if (fattn_engine_bwd(e, &bp) != FATTN_OK) {
            fprintf(stderr, "bench: backward: %s\n", fattn_last_error());
            return 1;
        }
        double t2 = now_s();
        tf[r] = t1 - t0;
        tb[r] = t2 - t1;
    }
    double ef = median(tf, reps), eb = median(tb, reps);

    float *nstats = malloc((size_t)(B * H * S) * sizeof(float));
    size_t ne = (size_t)(B * S * H * D);
    float *ndq = malloc(ne * sizeof(float)), *ndk = malloc(ne * sizeof(float)),
          *ndv = malloc(ne * sizeof(float));
    fattn_tensor no;
    fattn_tensor_alloc(&no, bf, 4, shape);
    double t0 = now_s();
    naive_forward(&q, &k, &v, &no, nstats, scale);
    double t1 = now_s();
    naive_backward(&q, &k, &v, &no, &d_o, nstats, scale, ndq, ndk, ndv);
    double t2 = now_s();
    double nf = t1 - t0, nb = t2 - t1;

    printf("cpu-bench b=%lld h=%lld s=%lld d=%lld bf16: forward %.3f s (naive %.3f s, %.1fx), "
           "backward %.3f s (naive %.3f s, %.1fx), threads=%s\n",
           (long long)B, (long long)H, (long long)S, (long long)D, ef, nf, nf / ef, eb, nb,
           nb / eb, getenv("FATTN_BENCH_THREADS") ? getenv("FATTN_BENCH_THREADS") : "all");
    fflush(stdout);
    free(nstats);
    free(ndq);
    free(ndk);
    free(ndv);
    fattn_tensor_free(&no);
    fattn_tensor *all[] = {&q, &k, &v, &o, &d_o, &dq, &dk, &dv, &stats};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fattn_tensor_free(all[i]);
    return 0;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int threads = getenv("FATTN_BENCH_THREADS") ? atoi(getenv("FATTN_BENCH_THREADS")) : 0;
    fattn_engine *e = NULL;
    if (fattn_engine_init_cpu(&e, &(fattn_cpu_options){.threads = threads}) != FATTN_OK) {
        fprintf(stderr, "bench: %s\n", fattn_last_error());
        return 1;
    }
    int rc = run_size(e, 512, 5);
    if (!rc && !quick)
        rc = run_size(e, 2048, 3);
    fattn_engine_free(e);
    return rc;
}
