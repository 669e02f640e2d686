/* bench_cudnn --fp8: the cuDNN engine's FP8 attention speed, the rows of
 * cudnn-frontend's measured FP8 table (b4 h16 s4096 d128 and b2 h16 s8192
 * d128, causal and not; HYBRID: E4M3 Q/K/V/O, E5M2 dO/dQ/dK/dV, per-tensor
 * scaling factors), forward and backward. Timing as bench/cfe_fp8_bench.py
 * times cudnn-frontend: the plan executed --iters times between CUDA events
 * (fattn_cudnn_options.timing_iters), the median per round, the median of
 * --rounds rounds. FLOPs: forward 4*b*h*s*s*d, halved for causal; backward
 * 2.5 x forward. One JSON line per row: {"bench":"cudnn_fp8",...}; a row
 * cuDNN refuses gives "error" with its reason. */
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/cudnn.h"
#include "fattn/engine.h"
#include "fattn/fp8.h"

#include "bench_fp8.h"
#include "bench_steps.h"

#define E4 FATTN_DTYPE_FLOAT8_E4M3FN
#define E5 FATTN_DTYPE_FLOAT8_E5M2
#define FP8_MAX_ROUNDS 16

typedef struct fp8_row {
    int64_t b, h, s, d;
} fp8_row;

static const fp8_row rows[] = {{4, 16, 4096, 128}, {2, 16, 8192, 128}};

typedef struct fp8_bufs {
    fattn_tensor q, k, v, o, d_o, dq, dk, dv, stats, rng;
    fattn_aux_pack aux;
    fattn_fp8_fwd f8;
    fattn_fp8_bwd b8;
    float amax[6];
} fp8_bufs;

static void fill(fattn_tensor *t, fattn_dtype dt, float scale, uint64_t s)
{
    unsigned char *p = t->data;
    int64_t n = fattn_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float x = (float)((double)(s >> 33) / 2147483648.0 * 2.0 - 1.0);
        p[i] = fattn_fp8_quantize(dt, x, scale);
    }
}

static int bufs_init(fp8_bufs *x, const fp8_row *r)
{
    memset(x, 0, sizeof *x);
    int64_t sh[4] = {r->b, r->s, r->h, r->d}, rs[1] = {2};
    fattn_tensor *e4[] = {&x->q, &x->k, &x->v, &x->o};
    fattn_tensor *e5[] = {&x->d_o, &x->dq, &x->dk, &x->dv};
    for (int i = 0; i < 4; i++)
        if (fattn_tensor_alloc(e4[i], E4, 4, sh) || fattn_tensor_alloc(e5[i], E5, 4, sh))
            return -1;
    if (fattn_tensor_alloc(&x->rng, FATTN_DTYPE_INT64, 1, rs))
        return -1;
    ((int64_t *)x->rng.data)[0] = 1, ((int64_t *)x->rng.data)[1] = 0;
    fill(&x->q, E4, 224.0f, 1);
    fill(&x->k, E4, 224.0f, 2);
    fill(&x->v, E4, 224.0f, 3);
    fill(&x->d_o, E5, 1024.0f, 6);
    x->f8 = (fattn_fp8_fwd){1.0f / 224, 1.0f / 224, 1.0f / 224, 1.0f / 448, 448.0f, 16.0f,
                            &x->amax[0], &x->amax[1], E4};
    x->b8 = (fattn_fp8_bwd){1.0f / 224, 1.0f / 224, 1.0f / 224, 1.0f / 16, 1.0f / 1024,
                            1.0f / 448, 448.0f, 1.0f / 16384, 16384.0f, 1.0f, 1.0f, 1.0f,
                            &x->amax[2], &x->amax[3], &x->amax[4], &x->amax[5], E4, E5};
    return 0;
}

static void bufs_free(fp8_bufs *x)
{
    fattn_tensor *all[] = {&x->q, &x->k, &x->v, &x->o, &x->d_o, &x->dq,
                           &x->dk, &x->dv, &x->stats, &x->rng};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fattn_tensor_free(all[i]);
}

static fattn_status fwd(fattn_engine *e, const fp8_row *r, bool causal, fp8_bufs *x)
{
    fattn_fwd_params p;
    memset(&p, 0, sizeof p);
    p.attn.q = x->q, p.attn.k = x->k, p.attn.v = x->v, p.attn.o = x->o;
    p.aux = &x->aux;
    p.rng_state = x->rng;
    p.attn.max_seqlen_q = p.attn.max_seqlen_kv = r->s;
    p.is_training = true;
    p.attn.attn_scale = 1.0f / sqrtf((float)r->d);
    p.attn.qkv_layout = FATTN_LAYOUT_BSHD_BSHD_BSHD;
    p.attn.o_format = FATTN_FORMAT_BSHD;
    p.attn.mask_type = causal ? FATTN_MASK_CAUSAL : FATTN_MASK_NO_MASK;
    p.attn.window_size_left = -1;
    p.attn.window_size_right = causal ? 0 : -1;
    p.fp8 = &x->f8;
    x->aux.n = 0;
    fattn_status st = fattn_engine_fwd(e, &p);
    if (st != FATTN_OK)
        return st;
    if (fattn_tensor_is_empty(&x->stats) &&
        (st = fattn_tensor_alloc(&x->stats, FATTN_DTYPE_FLOAT32, x->aux.t[0].ndim,
                                 x->aux.t[0].shape)))
        return st;
    x->aux.t[0] = x->stats;
    return fattn_engine_fwd(e, &p);
}

static fattn_status bwd(fattn_engine *e, const fp8_row *r, bool causal, fp8_bufs *x)
{
    fattn_bwd_params p;
    memset(&p, 0, sizeof p);
    p.attn.q = x->q, p.attn.k = x->k, p.attn.v = x->v, p.attn.o = x->o, p.d_o = x->d_o;
    p.dq = x->dq, p.dk = x->dk, p.dv = x->dv;
    fattn_aux_pack a = {2, {x->stats, x->rng}};
    p.aux = &a;
    p.attn.max_seqlen_q = p.attn.max_seqlen_kv = r->s;
    p.attn.attn_scale = 1.0f / sqrtf((float)r->d);
    p.attn.qkv_layout = p.dqkv_layout = FATTN_LAYOUT_BSHD_BSHD_BSHD;
    p.attn.o_format = p.do_format = FATTN_FORMAT_BSHD;
    p.attn.mask_type = causal ? FATTN_MASK_CAUSAL : FATTN_MASK_NO_MASK;
    p.attn.window_size_left = -1;
    p.attn.window_size_right = causal ? 0 : -1;
    p.deterministic = true;
    p.fp8 = &x->b8;
    return fattn_engine_bwd(e, &p);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void json_safe(char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            *s = ' ';
}

/* With FATTN_CUDNN_AUTOTUNE=1, what the cold call's tuning chose, as JSON
 * members (",\"<prefix>tune_first\":..."): heuristic mode A's first config,
 * the winner, how many candidates were timed and both medians. "" when the
 * plan was not tuned. */
static void tune_json(const fattn_engine *e, const char *prefix, char *out, size_t cap)
{
    char first[96], winner[96];
    int n = 0;
    double first_ms = 0, winner_ms = 0;
    out[0] = '\0';
    if (!bench_tune_info(e, first, winner, sizeof first, &n, &first_ms, &winner_ms))
        return;
    json_safe(first);
    json_safe(winner);
    snprintf(out, cap, ",\"%stune_first\":\"%s\",\"%stune_winner\":\"%s\","
             "\"%stune_candidates\":%d,\"%stune_first_ms\":%.4f,\"%stune_winner_ms\":%.4f",
             prefix, first, prefix, winner, prefix, n, prefix, first_ms, prefix, winner_ms);
}

/* One row: a cold call of each direction (plan build), then rounds of one
 * timed forward and one timed backward. */
static int run_row(fattn_engine *e, fattn_engine *et, const fp8_row *r, bool causal,
                   const char *name, int rounds)
{
    fp8_bufs x;
    char err[400] = "";
    double fms[FP8_MAX_ROUNDS], bms[FP8_MAX_ROUNDS];
    fattn_engine_report rep;
    double build_f = 0, build_b = 0;
    char tag_f[96] = "", tag_b[96] = "", tune_f[400] = "", tune_b[400] = "";
    fattn_status st = bufs_init(&x, r) ? FATTN_E_NOMEM : FATTN_OK;
    if (st == FATTN_OK && (st = fwd(e, r, causal, &x)) == FATTN_OK) {
        rep = fattn_engine_last_report(e);
        build_f = rep.timing.plan_build_s;
        snprintf(tag_f, sizeof tag_f, "%s", rep.tag);
        tune_json(e, "", tune_f, sizeof tune_f);
        if ((st = bwd(e, r, causal, &x)) == FATTN_OK) {
            rep = fattn_engine_last_report(e);
            build_b = rep.timing.plan_build_s;
            snprintf(tag_b, sizeof tag_b, "%s", rep.tag);
            tune_json(e, "bwd_", tune_b, sizeof tune_b);
        }
    }
    for (int i = 0; i < rounds && st == FATTN_OK; i++) {
        if ((st = fwd(et, r, causal, &x)) == FATTN_OK)
            fms[i] = fattn_engine_last_report(et).timing.gpu_ms_median;
        if (st == FATTN_OK && (st = bwd(et, r, causal, &x)) == FATTN_OK)
            bms[i] = fattn_engine_last_report(et).timing.gpu_ms_median;
    }
    if (st != FATTN_OK) {
        snprintf(err, sizeof err, "%s", fattn_last_error());
        json_safe(err);
        printf("{\"bench\":\"cudnn_fp8\",\"shape\":\"%s\",\"causal\":%s,\"error\":\"%s\"}\n",
               name, causal ? "true" : "false", err);
        fflush(stdout);
        bufs_free(&x);
        return st == FATTN_E_UNSUPPORTED ? 0 : 1;
    }
    qsort(fms, (size_t)rounds, sizeof fms[0], cmp_d);
    qsort(bms, (size_t)rounds, sizeof bms[0], cmp_d);
    double fm = fms[rounds / 2], bm = bms[rounds / 2];
    double ff = 4.0 * (double)r->b * (double)r->h * (double)r->s * (double)r->s * (double)r->d;
    if (causal)
        ff *= 0.5;
    printf("{\"bench\":\"cudnn_fp8\",\"shape\":\"%s\",\"causal\":%s,\"dtypes\":\"e4m3 qkvo, "
           "e5m2 do/dq/dk/dv\",\"fwd_ms\":%.4f,\"bwd_ms\":%.4f,\"fwd_tflops\":%.1f,"
           "\"bwd_tflops\":%.1f,\"fwd_ms_rounds_min\":%.4f,\"bwd_ms_rounds_min\":%.4f,"
           "\"plan_build_s\":%.3f,\"bwd_plan_build_s\":%.3f,\"engine_tag\":\"%s\","
           "\"bwd_engine_tag\":\"%s\",\"amax_o\":%g,\"amax_dq\":%g,\"rounds\":%d%s%s}\n",
           name, causal ? "true" : "false", fm, bm, ff / (fm * 1e-3) / 1e12,
           2.5 * ff / (bm * 1e-3) / 1e12, fms[0], bms[0], build_f, build_b, tag_f, tag_b,
           x.amax[1], x.amax[3], rounds, tune_f, tune_b);
    fflush(stdout);
    bufs_free(&x);
    return 0;
}

int bench_fp8_run(fattn_engine *e, fattn_engine *et, const char *only, int rounds)
{
    if (rounds > FP8_MAX_ROUNDS)
        rounds = FP8_MAX_ROUNDS;
    int failed = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        for (int causal = 0; causal < 2; causal++) {
            char name[64];
            snprintf(name, sizeof name, "fp8_b%lld_h%lld_s%lld_d%lld", (long long)rows[i].b,
                     (long long)rows[i].h, (long long)rows[i].s, (long long)rows[i].d);
            if (only && fnmatch(only, name, 0) != 0)
                continue;
            failed |= run_row(e, et, &rows[i], causal != 0, name, rounds);
        }
    return failed;
}
