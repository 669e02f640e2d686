/* The cuDNN engine's speed: forward, backward and host cost per call.
 *
 * For each shape (bf16, bshd, no dropout, scale 1/sqrt(d), causal and not):
 *   b=4 h=16 s=4096 d=128, b=2 h=16 s=8192 d=128, b=8 h=16 s=2048 d=64
 * it measures, on one cuDNN engine through the engine API (the two-call aux
 * protocol of engine.h, a training forward that writes Stats):
 *   - the first (cold) call of each graph: plan build seconds, as the engine
 *     reports them, for the forward, the default backward and the
 *     deterministic backward;
 *   - the host cost of a plan-cache hit: median host_us of --host-calls
 *     forward (and backward) calls (fattn_engine_last_report: everything the
 *     call does on the host besides copies and GPU work); with --public also
 *     on device copies of the tensors (no copies at all), each call made with
 *     the queue empty as torch_sdpa_bench.py --public times PyTorch's;
 *   - GPU time: --rounds rounds, each one forward, one default backward
 *     (deterministic=false: PyTorch's graph with the FLOAT dQ accumulator)
 *     and one deterministic backward (direct dQ), each re-executing its plan
 *     --iters times between CUDA events (a second engine on the same plan
 *     cache, made with fattn_cudnn_options.timing_iters). A round
 *     gives a median per pass; the figure is the median of the rounds'
 *     medians, with their spread and the smallest single execution.
 * The executions are queued back to back with an event between each two
 * (fattn/cudnn.h), so the host's launch work overlaps the previous execution.
 *
 * FLOP convention (FlashAttention's benchmark convention):
 * forward 4*b*h*sq*skv*d, halved for causal; backward 2.5 x the forward.
 *
 * Inputs come from the project's Philox fill (harness streams: q 1, k 2, v 3,
 * dO 6; scales 0.5, 0.5, 1, 0.1), never zeros: one flat buffer per tensor,
 * filled once and viewed in each shape (every shape has at most as many
 * elements as the largest).
 *
 * Output: JSON lines on stdout. First {"bench":"cudnn","info":...} (device,
 * cuDNN version, FLOP convention, settings), then one object per shape and
 * mask (keys in docs/bench.md). Without a usable GPU: one line
 * {"bench":"cudnn","skipped":"no CUDA device: ..."} and exit 0.
 *
 * With --fp8 it measures the FP8 rows instead (bench_fp8.c: E4M3/E5M2 HYBRID,
 * b4 h16 s4096 d128 and b2 h16 s8192 d128, causal and not, forward and
 * backward), JSON lines {"bench":"cudnn_fp8",...}.
 *
 * Usage: bench_cudnn [--iters N] [--rounds R] [--host-calls H] [--steps N] [--public N]
 *                    [--only GLOB] [--fp8]
 * Exit 0 on success (or no GPU), 1 if any measurement failed, 2 usage error.
 */
#include <fnmatch.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fattn/cudnn.h"
#include "fattn/engine.h"
#include "fattn/philox.h"
#include "fattn/te.h"

#include "bench_fp8.h"
#include "bench_steps.h"

#define MAX_ROUNDS 16

typedef struct shape {
    int64_t b, h, s, d;
} shape;

static const shape shapes[] = {
    {4, 16, 4096, 128},
    {2, 16, 8192, 128},
    {8, 16, 2048, 64},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

typedef struct settings {
    int iters, rounds, host_calls;
    int steps; /* --steps: repetitions of the instrumented mode, 0 off */
    int public_calls; /* --public: public calls timed by CUDA events, 0 off */
    const char *only;
    bool fp8; /* --fp8: the FP8 rows (bench_fp8.c) instead of the bf16 ones */
} settings;

/* The host tensors of the largest shape, as flat buffers. */
typedef struct buffers {
    int64_t numel;
    fattn_tensor q, k, v, o, d_o, dq, dk, dv;
} buffers;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorts v); n >= 1. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- inputs --------------------------------------------------------------- */

typedef struct fill_job {
    fattn_tensor *t;
    uint64_t stream;
    float scale;
} fill_job;

static void *fill_thread(void *arg)
{
    fill_job *j = arg;
    fattn_philox_fill_tensor(j->t, 1, j->stream, j->scale);
    return NULL;
}

/* Fill q, k, v and dO, one thread each: hundreds of millions of elements
 * take seconds per tensor on one core. */
static void fill_inputs(buffers *bf)
{
    fill_job jobs[4] = {{&bf->q, 1, 0.5f}, {&bf->k, 2, 0.5f}, {&bf->v, 3, 1.0f},
                        {&bf->d_o, 6, 0.1f}};
    pthread_t th[4];
    bool started[4] = {false};
    for (int i = 0; i < 4; i++)
        started[i] = pthread_create(&th[i], NULL, fill_thread, &jobs[i]) == 0;
    for (int i = 0; i < 4; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            fill_thread(&jobs[i]);
    }
}

static int buffers_alloc(buffers *bf, int64_t numel)
{
    memset(bf, 0, sizeof *bf);
    bf->numel = numel;
    fattn_tensor *all[] = {&bf->q, &bf->k, &bf->v, &bf->o, &bf->d_o, &bf->dq, &bf->dk, &bf->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (fattn_tensor_alloc(all[i], FATTN_DTYPE_BFLOAT16, 1, &numel) != FATTN_OK) {
            fprintf(stderr, "bench_cudnn: %s\n", fattn_last_error());
            return -1;
        }
    return 0;
}

static void buffers_free(buffers *bf)
{
    fattn_tensor *all[] = {&bf->q, &bf->k, &bf->v, &bf->o, &bf->d_o, &bf->dq, &bf->dk, &bf->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fattn_tensor_free(all[i]);
}

/* A bshd [b, s, h, d] view of a flat buffer. */
static fattn_tensor bshd(const fattn_tensor *flat, const shape *sh)
{
    int64_t dims[4] = {sh->b, sh->s, sh->h, sh->d};
    return fattn_tensor_view(flat->data, FATTN_DTYPE_BFLOAT16, 4, dims);
}

/* ---- one shape and mask ---------------------------------------------------- */

/* Everything one case needs: views, the aux packs, Stats, parameters. */
typedef struct bench_case {
    shape sh;
    bool causal;
    char name[64];
    fattn_tensor stats;
    int64_t rng[2];
    fattn_aux_pack aux_fwd, aux_bwd;
    fattn_fwd_params fp;
    fattn_bwd_params bp;
} bench_case;

/* GPU times of one kind of call over the rounds. */
typedef struct timed {
    double round_ms[MAX_ROUNDS]; /* each round's median */
    double min_ms;
    double ms;                   /* median of round_ms */
    double spread;               /* (max - min of round_ms) / ms */
    double build_s;              /* plan build of the cold call */
    char tag[96], route[16];
    /* autotune (FATTN_CUDNN_AUTOTUNE=1): the cold call's choice */
    int tuned, candidates;
    char first[96];
    double first_ms, winner_ms;
    int nlisted;                 /* every timed candidate: tag and median */
    char sweep[320];             /* FATTN_CUDNN_AUTOTUNE=knobs: the knob sweep's note */
    char cand_tag[24][96];       /* up to CUDNN_AUTOTUNE_MAX */
    double cand_ms[24];
    int64_t workspace;           /* device bytes a backward used besides its tensors */
} timed;

static double fwd_flops(const bench_case *c)
{
    double f = 4.0 * (double)c->sh.b * (double)c->sh.h * (double)c->sh.s * (double)c->sh.s *
               (double)c->sh.d;
    return c->causal ? 0.5 * f : f;
}

static double tflops(double flops, double ms) { return ms > 0.0 ? flops / (ms * 1e-3) / 1e12 : 0.0; }

/* Parameters and the forward's first call (the pack's shapes), then Stats. */
static fattn_status case_init(bench_case *c, buffers *bf, fattn_engine *e)
{
    fattn_mask_type mask = c->causal ? FATTN_MASK_CAUSAL : FATTN_MASK_NO_MASK;
    int64_t win[2] = {-1, -1}, w[2];
    fattn_status st = fattn_window_normalize(mask, false, win, w, NULL);
    if (st != FATTN_OK)
        return st;
    /* TE's defaults for a DotProductAttention call with this mask */
    bool bottom_right = fattn_bottom_right_default_dpa(mask);
    float scale = (float)(1.0 / sqrt((double)c->sh.d));
    int64_t two = 2;
    c->rng[0] = 1234;
    c->rng[1] = 0;
    fattn_tensor q = bshd(&bf->q, &c->sh), k = bshd(&bf->k, &c->sh), v = bshd(&bf->v, &c->sh),
                 o = bshd(&bf->o, &c->sh);
    c->fp = (fattn_fwd_params){
        .attn.q = q, .attn.k = k, .attn.v = v, .attn.o = o,
        .bias = fattn_tensor_empty(), .softmax_offset = fattn_tensor_empty(),
        .aux = &c->aux_fwd,
        .attn.cu_seqlens_q = fattn_tensor_empty(), .attn.cu_seqlens_kv = fattn_tensor_empty(),
        .attn.cu_seqlens_q_padded = fattn_tensor_empty(),
            .attn.cu_seqlens_kv_padded = fattn_tensor_empty(),
        .page_table_k = fattn_tensor_empty(), .page_table_v = fattn_tensor_empty(),
        .rng_state = fattn_tensor_view(c->rng, FATTN_DTYPE_INT64, 1, &two),
        .attn.max_seqlen_q = c->sh.s, .attn.max_seqlen_kv = c->sh.s,
        .is_training = true, .attn.attn_scale = scale, .attn.dropout = 0.0f,
        .attn.qkv_layout = FATTN_LAYOUT_BSHD_BSHD_BSHD, .attn.o_format = FATTN_FORMAT_BSHD,
        .attn.bias_type = FATTN_BIAS_NO_BIAS, .attn.mask_type = mask,
        .attn.softmax_type = FATTN_SOFTMAX_VANILLA,
        .attn.window_size_left = w[0], .attn.window_size_right = w[1],
        .attn.bottom_right_diagonal = bottom_right,
    };
    memset(&c->aux_fwd, 0, sizeof c->aux_fwd);
    if ((st = fattn_engine_fwd(e, &c->fp)) != FATTN_OK)
        return st;
    if (c->aux_fwd.n != 2)
        return fattn_error(FATTN_E_INTERNAL, "aux pack has %d entries, want 2", c->aux_fwd.n);
    const fattn_tensor *t0 = &c->aux_fwd.t[0];
    if ((st = fattn_tensor_alloc(&c->stats, t0->dtype, t0->ndim, t0->shape)) != FATTN_OK)
        return st;
    c->aux_fwd.t[0] = c->stats;
    /* the backward's pack: [Stats, rng_state], as the forward leaves it */
    c->aux_bwd.n = 2;
    c->aux_bwd.t[0] = c->stats;
    c->aux_bwd.t[1] = c->fp.rng_state;
    c->bp = (fattn_bwd_params){
        .attn.q = q, .attn.k = k, .attn.v = v, .attn.o = o, .d_o = bshd(&bf->d_o, &c->sh),
            .aux = &c->aux_bwd,
        .dq = bshd(&bf->dq, &c->sh), .dk = bshd(&bf->dk, &c->sh), .dv = bshd(&bf->dv, &c->sh),
        .d_bias = fattn_tensor_empty(), .d_softmax_offset = fattn_tensor_empty(),
        .attn.cu_seqlens_q = fattn_tensor_empty(), .attn.cu_seqlens_kv = fattn_tensor_empty(),
        .attn.cu_seqlens_q_padded = fattn_tensor_empty(),
            .attn.cu_seqlens_kv_padded = fattn_tensor_empty(),
        .attn.max_seqlen_q = c->sh.s, .attn.max_seqlen_kv = c->sh.s,
        .attn.attn_scale = scale, .attn.dropout = 0.0f,
        .attn.qkv_layout = FATTN_LAYOUT_BSHD_BSHD_BSHD, .attn.o_format = FATTN_FORMAT_BSHD,
        .do_format = FATTN_FORMAT_BSHD, .dqkv_layout = FATTN_LAYOUT_BSHD_BSHD_BSHD,
        .attn.bias_type = FATTN_BIAS_NO_BIAS, .attn.mask_type = mask,
        .attn.softmax_type = FATTN_SOFTMAX_VANILLA,
        .attn.window_size_left = w[0], .attn.window_size_right = w[1],
        .attn.bottom_right_diagonal = bottom_right,
        .deterministic = false,
    };
    return FATTN_OK;
}

typedef enum { CALL_FWD, CALL_BWD, CALL_BWD_DET } call_kind;

static const char *const call_names[] = {"forward", "backward", "deterministic backward"};

/* One executing call of the given kind; *t its timing. */
static fattn_status call(bench_case *c, fattn_engine *e, call_kind k, fattn_engine_timing *t)
{
    fattn_status st;
    if (k == CALL_FWD) {
        st = fattn_engine_fwd(e, &c->fp);
    } else {
        c->bp.deterministic = k == CALL_BWD_DET;
        st = fattn_engine_bwd(e, &c->bp);
    }
    if (st == FATTN_OK)
        *t = fattn_engine_last_report(e).timing;
    return st;
}

/* The cold call of kind k: plan build seconds, engine tag and route. */
static fattn_status cold(bench_case *c, fattn_engine *e, call_kind k, timed *out)
{
    fattn_engine_timing t;
    fattn_status st = call(c, e, k, &t);
    if (st != FATTN_OK)
        return st;
    fattn_engine_report rep = fattn_engine_last_report(e);
    out->build_s = t.plan_cache_hit ? 0.0 : t.plan_build_s;
    snprintf(out->tag, sizeof out->tag, "%s", rep.tag);
    snprintf(out->route, sizeof out->route, "%s", rep.route);
    char winner[96];
    out->tuned = bench_tune_info(e, out->first, winner, sizeof winner, &out->candidates,
                                 &out->first_ms, &out->winner_ms);
    out->nlisted = bench_tune_list(e, out->cand_tag, out->cand_ms, 24);
    bench_tune_sweep(e, out->sweep, sizeof out->sweep);
    out->workspace = k == CALL_FWD ? 0 : rep.workspace;
    return FATTN_OK;
}

/* Host cost of n cache-hit calls of kind k: *median_us, *min_us, *hits, and
 * the medians of its parts (fattn's own, the execution call). */
static fattn_status host_cost(bench_case *c, fattn_engine *e, call_kind k, int n,
                              double *median_us, double *min_us, int *hits,
                              double *fattn_us, double *exec_us)
{
    double *us = malloc(3 * (size_t)n * sizeof *us);
    if (!us)
        return fattn_error(FATTN_E_NOMEM, "host cost samples");
    double *fu = us + n, *xu = us + 2 * n;
    fattn_status st = FATTN_OK;
    *hits = 0;
    for (int i = 0; i < n && st == FATTN_OK; i++) {
        fattn_engine_timing t;
        if ((st = call(c, e, k, &t)) == FATTN_OK) {
            us[i] = t.host_us;
            fu[i] = t.host_fattn_us;
            xu[i] = t.host_execute_us;
            *hits += t.plan_cache_hit;
        }
    }
    if (st == FATTN_OK) {
        *median_us = median(us, n);
        *min_us = us[0];
        *fattn_us = median(fu, n);
        *exec_us = median(xu, n);
    }
    free(us);
    return st;
}

/* Round r of kind k: iters timed executions of the cached plan, on the
 * engine made with timing_iters = iters. */
static fattn_status timed_round(bench_case *c, fattn_engine *e, call_kind k, int iters, int r,
                                timed *out)
{
    fattn_engine_timing t;
    fattn_status st = call(c, e, k, &t);
    if (st != FATTN_OK)
        return st;
    if (t.iters != iters)
        return fattn_error(FATTN_E_INTERNAL, "%d timed executions, asked for %d", t.iters, iters);
    out->round_ms[r] = t.gpu_ms_median;
    if (r == 0 || t.gpu_ms_min < out->min_ms)
        out->min_ms = t.gpu_ms_min;
    return FATTN_OK;
}

static void summarise(timed *t, int rounds)
{
    double v[MAX_ROUNDS];
    memcpy(v, t->round_ms, (size_t)rounds * sizeof v[0]);
    t->ms = median(v, rounds);
    t->spread = t->ms > 0.0 ? (v[rounds - 1] - v[0]) / t->ms : 0.0;
}

static void print_rounds(const timed *t, int rounds)
{
    putchar('[');
    for (int r = 0; r < rounds; r++)
        printf("%s%.4f", r ? "," : "", t->round_ms[r]);
    putchar(']');
}

/* The device-tensor mode's figures (--public): per kind, host cost with the
 * queue empty (reported, wall) and the public calls timed as PyTorch's. */
typedef struct dev_figures {
    double host_us[3], host_wall_us[3], pub_ms[3], pub_wall_us[3];
    double busy_us[3], busy_wall_us[3]; /* the same calls with the GPU still busy */
    int hits;
} dev_figures;

/* The three kinds on the device copies dv of a case's tensors. */
static fattn_status device_mode(fattn_engine *e, const settings *cfg, bench_dev *dv,
                                dev_figures *f)
{
    for (int k = 0; k < 3; k++) {
        dv->bp.deterministic = k == CALL_BWD_DET;
        const fattn_bwd_params *bp = k ? &dv->bp : NULL;
        int hits = 0;
        /* the first call on these pointers makes the variant pack: not a hit's cost */
        if ((k ? fattn_engine_bwd(e, &dv->bp) : fattn_engine_fwd(e, &dv->fp)) != FATTN_OK)
            return fattn_error(FATTN_E_INTERNAL, "device-tensor %s: %s", call_names[k],
                               fattn_last_error());
        int busy_hits = 0;
        if (bench_dev_host(e, &dv->fp, bp, cfg->host_calls, false, &f->host_us[k],
                           &f->host_wall_us[k], &hits) != 0 ||
            bench_dev_host(e, &dv->fp, bp, cfg->host_calls, true, &f->busy_us[k],
                           &f->busy_wall_us[k], &busy_hits) != 0 ||
            bench_public(e, &dv->fp, bp, cfg->public_calls, &f->pub_ms[k], &f->pub_wall_us[k]) != 0)
            return fattn_error(FATTN_E_INTERNAL, "device-tensor calls failed (above)");
        f->hits += hits;
    }
    return FATTN_OK;
}

static void print_device(const dev_figures *f, const settings *cfg)
{
    static const char *const key[] = {"fwd", "bwd", "bwd_det"};
    for (int k = 0; k < 3; k++)
        printf("\"dev_%s_host_us\":%.2f,\"dev_%s_host_wall_us\":%.2f,\"dev_%s_public_ms\":%.4f,"
               "\"dev_%s_public_wall_us\":%.2f,\"dev_%s_host_busy_us\":%.2f,"
               "\"dev_%s_host_busy_wall_us\":%.2f,", key[k], f->host_us[k], key[k],
               f->host_wall_us[k], key[k], f->pub_ms[k], key[k], f->pub_wall_us[k], key[k],
               f->busy_us[k], key[k], f->busy_wall_us[k]);
    printf("\"dev_host_cache_hits\":%d,\"dev_host_calls\":%d,", f->hits, 3 * cfg->host_calls);
}

/* The goal: a deterministic backward at >= 0.85x the accumulator's
 * throughput. Where it is missed, say on stderr what would decide whether
 * another engine config could meet it: the configs cuDNN offers for the
 * deterministic graph timed on this shape (FATTN_CUDNN_AUTOTUNE=1 times
 * every one heuristics A, B and fallback give) and the workspaces. */
static void det_cost_note(const bench_case *c, const timed *tm)
{
    double cost = tm[1].ms > 0.0 ? tm[2].ms / tm[1].ms : 0.0;
    if (cost <= 1.0 / 0.85)
        return;
    fprintf(stderr, "bench_cudnn: %s %s: deterministic backward %.2fx the accumulator's "
            "(goal <= %.2fx); workspace %lld vs %lld bytes; ", c->name,
            c->causal ? "causal" : "non-causal", cost, 1.0 / 0.85,
            (long long)tm[2].workspace, (long long)tm[1].workspace);
    if (!tm[2].tuned) {
        fprintf(stderr, "rerun with FATTN_CUDNN_AUTOTUNE=1 to time every deterministic "
                "config cuDNN offers (bwd_det_tune.all_ms)\n");
        return;
    }
    fprintf(stderr, "%d deterministic configs timed:", tm[2].nlisted);
    for (int i = 0; i < tm[2].nlisted; i++)
        fprintf(stderr, " %s %.4f ms", tm[2].cand_tag[i], tm[2].cand_ms[i]);
    fprintf(stderr, "; the goal needs one at or below %.4f ms\n", tm[1].ms / 0.85);
}

/* Measure one shape and mask and print its JSON line. 0 or -1. e runs
 * untimed, et (same plan cache) with timing_iters = cfg->iters. */
static int run_case(bench_case *c, buffers *bf, fattn_engine *e, fattn_engine *et,
                    const settings *cfg)
{
    timed tm[3];
    memset(tm, 0, sizeof tm);
    double host_fwd = 0, host_fwd_min = 0, host_bwd = 0, host_bwd_min = 0;
    double host_fwd_fattn = 0, host_fwd_exec = 0, host_bwd_fattn = 0, host_bwd_exec = 0;
    int hits_fwd = 0, hits_bwd = 0;
    double t0 = now_s();
    const char *stage = "setup";
    fattn_status st = case_init(c, bf, e);
    for (int k = 0; k < 3 && st == FATTN_OK; k++) {
        stage = call_names[k];
        st = cold(c, e, (call_kind)k, &tm[k]);
    }
    if (st == FATTN_OK) {
        stage = "host cost (forward)";
        st = host_cost(c, e, CALL_FWD, cfg->host_calls, &host_fwd, &host_fwd_min, &hits_fwd,
                       &host_fwd_fattn, &host_fwd_exec);
    }
    if (st == FATTN_OK) {
        stage = "host cost (backward)";
        st = host_cost(c, e, CALL_BWD, cfg->host_calls, &host_bwd, &host_bwd_min, &hits_bwd,
                       &host_bwd_fattn, &host_bwd_exec);
    }
    double pub_ms[3] = {0, 0, 0}, pub_wall[3] = {0, 0, 0};
    for (int k = 0; k < 3 && st == FATTN_OK && cfg->public_calls > 0; k++) {
        stage = "public calls";
        c->bp.deterministic = k == CALL_BWD_DET;
        if (bench_public(e, &c->fp, k ? &c->bp : NULL, cfg->public_calls, &pub_ms[k],
                         &pub_wall[k]) != 0)
            st = fattn_error(FATTN_E_INTERNAL, "public calls failed (above)");
    }
    bench_dev dv;
    bool have_dev = false;
    dev_figures devf;
    memset(&devf, 0, sizeof devf);
    if (st == FATTN_OK && (cfg->public_calls > 0 || cfg->steps > 0)) {
        stage = "device tensors";
        if (bench_dev_init(e, &c->fp, &c->bp, &dv) != 0)
            st = fattn_error(FATTN_E_INTERNAL, "device-tensor buffers failed (above)");
        else
            have_dev = true;
    }
    if (st == FATTN_OK && cfg->public_calls > 0)
        st = device_mode(e, cfg, &dv, &devf);
    if (st == FATTN_OK && cfg->steps > 0) {
        stage = "steps";
        c->bp.deterministic = false;
        dv.bp.deterministic = false;
        if (bench_steps(e, c->name, c->causal, "fwd", &c->fp, NULL, &dv, cfg->steps) != 0 ||
            bench_steps(e, c->name, c->causal, "bwd", &c->fp, &c->bp, &dv, cfg->steps) != 0)
            st = fattn_error(FATTN_E_INTERNAL, "instrumented steps failed (above)");
    }
    if (have_dev)
        bench_dev_free(e, &dv);
    /* rounds interleave the three kinds, so that a drift of the clocks
     * touches them alike */
    for (int r = 0; r < cfg->rounds && st == FATTN_OK; r++)
        for (int k = 0; k < 3 && st == FATTN_OK; k++) {
            stage = call_names[k];
            st = timed_round(c, et, (call_kind)k, cfg->iters, r, &tm[k]);
        }
    fattn_tensor_free(&c->stats);
    if (st != FATTN_OK) {
        fprintf(stderr, "bench_cudnn: %s %s: %s: %s\n", c->name, c->causal ? "causal" : "non-causal",
                stage, fattn_last_error());
        printf("{\"bench\":\"cudnn\",\"shape\":\"%s\",\"causal\":%s,\"error\":\"%s failed "
               "(stderr has the message)\"}\n",
               c->name, c->causal ? "true" : "false", stage);
        fflush(stdout);
        return -1;
    }
    for (int k = 0; k < 3; k++)
        summarise(&tm[k], cfg->rounds);
    double ff = fwd_flops(c), bf_flops = 2.5 * ff;
    printf("{\"bench\":\"cudnn\",\"shape\":\"%s\",\"b\":%lld,\"h\":%lld,\"s\":%lld,\"d\":%lld,"
           "\"dtype\":\"bf16\",\"layout\":\"bshd\",\"causal\":%s,",
           c->name, (long long)c->sh.b, (long long)c->sh.h, (long long)c->sh.s,
           (long long)c->sh.d, c->causal ? "true" : "false");
    static const char *const key[] = {"fwd", "bwd", "bwd_det"};
    for (int k = 0; k < 3; k++) {
        printf("\"%s_ms\":%.4f,\"%s_ms_min\":%.4f,\"%s_ms_spread\":%.4f,\"%s_ms_rounds\":", key[k],
               tm[k].ms, key[k], tm[k].min_ms, key[k], tm[k].spread, key[k]);
        print_rounds(&tm[k], cfg->rounds);
        printf(",\"%s_tflops\":%.1f,", key[k], tflops(k ? bf_flops : ff, tm[k].ms));
    }
    printf("\"det_cost\":%.3f,", tm[1].ms > 0.0 ? tm[2].ms / tm[1].ms : 0.0);
    printf("\"host_us\":%.2f,\"host_us_min\":%.2f,\"bwd_host_us\":%.2f,\"bwd_host_us_min\":%.2f,"
           "\"host_calls\":%d,\"host_cache_hits\":%d,\"bwd_host_cache_hits\":%d,",
           host_fwd, host_fwd_min, host_bwd, host_bwd_min, cfg->host_calls, hits_fwd, hits_bwd);
    printf("\"host_fattn_us\":%.2f,\"host_execute_us\":%.2f,\"bwd_host_fattn_us\":%.2f,"
           "\"bwd_host_execute_us\":%.2f,", host_fwd_fattn, host_fwd_exec, host_bwd_fattn,
           host_bwd_exec);
    if (cfg->public_calls > 0)
        printf("\"fwd_public_ms\":%.4f,\"bwd_public_ms\":%.4f,\"bwd_det_public_ms\":%.4f,"
               "\"fwd_public_wall_us\":%.1f,\"bwd_public_wall_us\":%.1f,"
               "\"bwd_det_public_wall_us\":%.1f,\"public_calls\":%d,", pub_ms[0], pub_ms[1],
               pub_ms[2], pub_wall[0], pub_wall[1], pub_wall[2], cfg->public_calls);
    if (cfg->public_calls > 0)
        print_device(&devf, cfg);
    printf("\"plan_build_s\":%.3f,\"bwd_plan_build_s\":%.3f,\"bwd_det_plan_build_s\":%.3f,",
           tm[0].build_s, tm[1].build_s, tm[2].build_s);
    printf("\"engine_tag\":\"%s\",\"route\":\"%s\",\"bwd_engine_tag\":\"%s\",\"bwd_route\":\"%s\","
           "\"bwd_det_engine_tag\":\"%s\",\"bwd_det_route\":\"%s\",",
           tm[0].tag, tm[0].route, tm[1].tag, tm[1].route, tm[2].tag, tm[2].route);
    for (int k = 0; k < 3; k++)
        if (tm[k].tuned) {
            printf("\"%s_tune\":{\"candidates\":%d,\"mode_a_first\":\"%s\",\"winner\":\"%s\","
                   "\"mode_a_first_ms\":%.4f,\"winner_ms\":%.4f,\"all_ms\":{", key[k],
                   tm[k].candidates, tm[k].first, tm[k].tag, tm[k].first_ms, tm[k].winner_ms);
            for (int i = 0; i < tm[k].nlisted; i++)
                printf("%s\"%s\":%.4f", i ? "," : "", tm[k].cand_tag[i], tm[k].cand_ms[i]);
            printf("}");
            if (tm[k].sweep[0]) {
                for (char *q = tm[k].sweep; *q; q++)
                    *q = (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20) ? ' ' : *q;
                printf(",\"sweep\":\"%s\"", tm[k].sweep);
            }
            printf("},");
        }
    printf("\"bwd_workspace\":%lld,\"bwd_det_workspace\":%lld,", (long long)tm[1].workspace,
           (long long)tm[2].workspace);
    det_cost_note(c, tm);
    printf("\"fwd_gflop\":%.3f,\"iters\":%d,\"rounds\":%d,\"wall_s\":%.2f}\n", ff * 1e-9,
           cfg->iters, cfg->rounds, now_s() - t0);
    fflush(stdout);
    return 0;
}

/* ---- main ------------------------------------------------------------------ */

static const char usage[] =
    "usage: bench_cudnn [--iters N] [--rounds R] [--host-calls H] [--steps N] [--public N]\n"
    "                   [--only GLOB] [--fp8]\n"
    "\n"
    "The cuDNN engine's forward, backward and deterministic-backward speed (TFLOP/s),\n"
    "host cost of a plan-cache hit and cold plan build, per shape (bf16, bshd, causal\n"
    "and not): b4 h16 s4096 d128, b2 h16 s8192 d128, b8 h16 s2048 d64. JSON lines.\n"
    "  --iters N       timed executions per round (default 20)\n"
    "  --rounds R      rounds, interleaving forward and both backwards (default 3, <= 16)\n"
    "  --host-calls H  cache-hit calls whose host cost is measured (default 20)\n"
    "  --steps N       also N cache-hit calls per kind with a clock around each host\n"
    "                  step (graph, key, lookup, variant pack, execute...): JSON lines\n"
    "                  \"bench\":\"cudnn_steps\", each with the same call on device\n"
    "                  tensors (dev_public_us) (default 0: off)\n"
    "  --public N      also N public calls per kind (forward, both backwards), each\n"
    "                  between CUDA events, queued back to back: *_public_ms on host\n"
    "                  tensors (copies included), dev_*_public_ms on device tensors;\n"
    "                  and dev_*_host_us: the host cost of H device-tensor calls\n"
    "                  made with the queue empty, dev_*_host_busy_us with the GPU\n"
    "                  still running the calls before (default 0: off)\n"
    "  --only GLOB     shapes whose name (b4_h16_s4096_d128 ...) matches\n"
    "  --fp8           the FP8 rows instead (fp8_b4_h16_s4096_d128, fp8_b2_h16_s8192_d128,\n"
    "                  E4M3 Q/K/V/O, E5M2 dO/dQ/dK/dV): JSON lines \"bench\":\"cudnn_fp8\"\n"
    "FLOPs: forward 4*b*h*sq*skv*d, halved for causal; backward 2.5 x forward.\n"
    "Without a usable GPU: one JSON line saying so, exit 0.\n";

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv)
{
    settings cfg = {.iters = 20, .rounds = 3, .host_calls = 20, .steps = 0, .public_calls = 0,
                    .only = NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--iters") && val) {
            bad = parse_int(val, 1, 100000, &cfg.iters);
        } else if (!strcmp(a, "--rounds") && val) {
            bad = parse_int(val, 1, MAX_ROUNDS, &cfg.rounds);
        } else if (!strcmp(a, "--host-calls") && val) {
            bad = parse_int(val, 1, 100000, &cfg.host_calls);
        } else if (!strcmp(a, "--public") && val) {
            bad = parse_int(val, 0, 100000, &cfg.public_calls);
        } else if (!strcmp(a, "--steps") && val) {
            bad = parse_int(val, 0, 100000, &cfg.steps);
        } else if (!strcmp(a, "--only") && val) {
            cfg.only = val;
        } else if (!strcmp(a, "--fp8")) {
            cfg.fp8 = true;
            i--; /* no value */
        } else {
            bad = 1;
            val = NULL;
        }
        if (bad) {
            fprintf(stderr, "bench_cudnn: bad argument '%s%s%s'\n%s", a, val ? " " : "",
                    val ? val : "", usage);
            return 2;
        }
        i++;
    }

    /* the library reads no environment: the variables as the CLI reads them,
     * the libraries named before anything loads them */
    fattn_cudnn_settings cudnn_settings;
    if (fattn_cudnn_settings_parse(getenv("FATTN_CUDNN_AUTOTUNE"), getenv("FATTN_CUDNN_BWD"),
                                   getenv("FATTN_CUDNN_DET"), getenv("FATTN_CUDNN_DET_TAG"),
                                   getenv("FATTN_CUDNN_PLAN_DIR"), getenv("FATTN_CUDNN_LIB"),
                                   getenv("FATTN_CUDART_LIB"), &cudnn_settings) != FATTN_OK ||
        fattn_cudnn_use_libraries(&cudnn_settings) != FATTN_OK) {
        fprintf(stderr, "bench_cudnn: %s\n", fattn_last_error());
        return 2;
    }
    if (!fattn_cudnn_available()) {
        /* a build or CI machine without a GPU: nothing to measure, not a failure */
        char why[512];
        snprintf(why, sizeof why, "%s", fattn_last_error());
        for (char *p = why; *p; p++)
            if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
                *p = ' ';
        fprintf(stderr, "bench_cudnn: no CUDA device (%s): nothing measured\n", why);
        printf("{\"bench\":\"cudnn\",\"skipped\":\"no CUDA device: %s\"}\n", why);
        return 0;
    }
    fattn_cudnn_info info;
    fattn_cudnn_plan_cache *pc = NULL;
    fattn_engine *e = NULL, *et = NULL;
    if (fattn_cudnn_get_info(0, &info) != FATTN_OK ||
        fattn_cudnn_plan_cache_init(&pc, 0, &cudnn_settings) != FATTN_OK ||
        fattn_engine_init_cudnn(&e, &(fattn_cudnn_options){.plan_cache = pc}) != FATTN_OK ||
        fattn_engine_init_cudnn(&et, &(fattn_cudnn_options){.plan_cache = pc,
                                                             .timing_iters = cfg.iters}) !=
            FATTN_OK) {
        fprintf(stderr, "bench_cudnn: %s\n", fattn_last_error());
        fattn_engine_free(e);
        fattn_cudnn_plan_cache_free(pc);
        return 1;
    }
    for (char *p = info.device_name; *p; p++) /* it goes into a JSON string */
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = ' ';
    printf("{\"bench\":\"cudnn\",\"info\":{\"device\":\"%s\",\"sm_count\":%d,\"cc\":\"%d.%d\","
           "\"cudnn_version\":%lld,\"cudnn_header_version\":%lld,\"cuda_runtime_version\":%d,"
           "\"cuda_driver_version\":%d,\"flops\":\"forward 4*b*h*sq*skv*d, halved for causal; "
           "backward 2.5 x forward\",\"timing\":\"executions queued back to back, a CUDA "
           "event between each two; median per round, median of rounds\","
           "\"iters\":%d,\"rounds\":%d,\"host_calls\":%d}}\n",
           info.device_name, info.sm_count, info.cc_major, info.cc_minor,
           (long long)info.cudnn_version, (long long)info.cudnn_header_version,
           info.cuda_runtime_version, info.cuda_driver_version, cfg.iters, cfg.rounds,
           cfg.host_calls);
    fflush(stdout);
    if (cfg.fp8) {
        int bad = bench_fp8_run(e, et, cfg.only, cfg.rounds);
        fattn_engine_free(e);
        fattn_engine_free(et);
        fattn_cudnn_plan_cache_free(pc);
        return bad ? 1 : 0;
    }

    int64_t numel = 0;
    for (size_t i = 0; i < N_SHAPES; i++) {
        int64_t n = shapes[i].b * shapes[i].h * shapes[i].s * shapes[i].d;
        numel = n > numel ? n : numel;
    }
    buffers bf;
    if (buffers_alloc(&bf, numel) != 0) {
        buffers_free(&bf);
        fattn_engine_free(e);
        fattn_engine_free(et);
        fattn_cudnn_plan_cache_free(pc);
        return 1;
    }
    double tf = now_s();
    fill_inputs(&bf);
    fprintf(stderr, "bench_cudnn: inputs filled in %.1f s\n", now_s() - tf);

    int failed = 0;
    for (size_t i = 0; i < N_SHAPES; i++)
        for (int causal = 0; causal < 2; causal++) {
            bench_case c;
            memset(&c, 0, sizeof c);
            c.sh = shapes[i];
            c.causal = causal;
            snprintf(c.name, sizeof c.name, "b%lld_h%lld_s%lld_d%lld", (long long)c.sh.b,
                     (long long)c.sh.h, (long long)c.sh.s, (long long)c.sh.d);
            if (cfg.only && fnmatch(cfg.only, c.name, 0) != 0)
                continue;
            failed |= run_case(&c, &bf, e, et, &cfg) != 0;
        }
    buffers_free(&bf);
    fattn_engine_free(e);
    fattn_engine_free(et);
    fattn_cudnn_plan_cache_free(pc);
    return failed ? 1 : 0;
}
