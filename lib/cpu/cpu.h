/* Internals of the CPU engine (not installed).
 *
 * The engine validates the parameters once into a cpu_geom (sizes, per-batch
 * lengths and token offsets, element offsets of every row), then runs work
 * items in parallel. Every work item writes a disjoint part of the outputs
 * and computes it in one fixed order, so results never depend on the thread
 * count or on which thread ran which item.
 */
#ifndef FATTN_CPU_H
#define FATTN_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "fattn/engine.h"

/* ---- geometry ---------------------------------------------------------- */

typedef struct cpu_geom {
    int64_t b, h, hg, group;   /* group = h / hg */
    int64_t sq, skv;           /* padded (max) lengths */
    int64_t d, dv;
    fattn_dtype io;
    fattn_qkv_format q_fmt, kv_fmt;
    int32_t *len_q, *len_kv;   /* [b] actual lengths */
    int32_t *off_q, *off_kv;   /* [b] THD token offsets (0 otherwise) */
    /* views (element offsets through strides) */
    fattn_tensor q, k, v, o;
    fattn_tensor bias;         /* empty unless post_scale_bias */
    float *sink;               /* [h] or NULL */
    bool alibi;
    float *alibi_slopes;       /* [h] when alibi */
    float scale;
    float dropout;             /* 0 when not applied */
    uint64_t rng_seed, rng_offset;
    int64_t win_left, win_right;
    bool bottom_right;
    bool thd_stats;            /* Stats ragged [t_q,h,1] */
    int64_t t_q;               /* tokens of a THD Q */
} cpu_geom;

/* Validate the common part of forward and backward and fill g. The caller
 * frees with cpu_geom_free. `d_o_or_o` is the O-shaped tensor to check
 * against (o for forward, d_o for backward). */
typedef struct cpu_geom_args {
    const fattn_tensor *q, *k, *v, *o;
    const fattn_tensor *bias, *softmax_offset;
    const fattn_tensor *cu_q, *cu_kv, *cu_q_pad, *cu_kv_pad;
    const fattn_tensor *rng_state;
    int64_t max_seqlen_q, max_seqlen_kv;
    float attn_scale, dropout;
    bool apply_dropout;
    fattn_qkv_layout layout;
    fattn_qkv_format o_format;
    fattn_bias_type bias_type;
    fattn_mask_type mask_type;
    fattn_softmax_type softmax_type;
    int64_t win_left, win_right;
    bool bottom_right;
    const char *who; /* "forward" / "backward", for messages */
} cpu_geom_args;

fattn_status cpu_geom_init(cpu_geom *g, const cpu_geom_args *a);
void cpu_geom_free(cpu_geom *g);

/* Element offset of row (batch bi, position pos, head n) of a 4-D (or THD
 * 3-D) tensor in format fmt; the head-dim index adds strides[last]. */
int64_t cpu_row_offset(const fattn_tensor *t, fattn_qkv_format fmt,
                       const int32_t *off, int64_t bi, int64_t pos, int64_t n);

/* Element offset of Stats/Max entry (bi, n, i). */
int64_t cpu_stats_offset(const cpu_geom *g, const fattn_tensor *stats,
                         int64_t bi, int64_t n, int64_t i);

/* Keys j kept for query i of batch bi: [*lo, *hi) (empty if lo >= hi). */
void cpu_key_range(const cpu_geom *g, int64_t bi, int64_t i, int64_t *lo,
                   int64_t *hi);

/* Shape check of the Stats/Max tensor the engine expects. */
void cpu_stats_shape(const cpu_geom *g, int *ndim, int64_t shape[4]);

/* ---- one row of logits ------------------------------------------------ */

/* Scratch of one worker, sized for the largest (batch, head). */
typedef struct cpu_scratch {
    float *kt;     /* [d][len]  K^T of one (batch, kv head) */
    float *kr;     /* [len][d]  K rows */
    float *vr;     /* [len][dv] V rows */
    float *vt;     /* [dv][len] V^T */
    float *s;      /* [skv] logits of one row */
    float *p;      /* [skv] probabilities */
    float *dp;     /* [skv] */
    float *ds;     /* [skv] */
    float *pd;     /* [skv] */
    float *qrow;   /* [max(d, dv)] */
    float *dorow;  /* [max(d, dv)] */
    float *orow;   /* [max(d, dv)] */
    float *acc;    /* [skv * (2 max(d, dv) + 64)] accumulators */
    float *acc2, *acc3; /* [skv * max(d, dv)] */
    uint32_t *rnd; /* [skv + 4] dropout words */
} cpu_scratch;

fattn_status cpu_scratch_init(cpu_scratch *s, const cpu_geom *g);
void cpu_scratch_free(cpu_scratch *s);

/* Load keys [0, len) of (bi, kv head gk) as float32 into whichever of
 * K^T, K rows, V rows, V^T is non-NULL (leading dimension len). */
void cpu_load_kv(const cpu_geom *g, int64_t bi, int64_t gk, int64_t len,
                 float *kt, float *kr, float *vr, float *vt);

/* One row (bi, pos, head n) of a tensor, widened to / rounded from float. */
void cpu_load_row(const fattn_tensor *t, fattn_qkv_format fmt,
                  const int32_t *off, int64_t bi, int64_t pos, int64_t n,
                  int64_t width, float *out);
void cpu_store_row(fattn_tensor *t, fattn_qkv_format fmt, const int32_t *off,
                   int64_t bi, int64_t pos, int64_t n, int64_t width,
                   const float *in);

/* Logits s[j] for j in [lo, hi) of query row qrow (float32, d) against kt:
 * dot product (head-dim ascending), times scale, plus bias and ALiBi. */
void cpu_logits_row(const cpu_geom *g, int64_t bi, int64_t n, int64_t i,
                    const float *qrow, const float *kt, int64_t ldk,
                    int64_t lo, int64_t hi, float *s);

/* Philox keep words for row (bi, n, i), keys [lo, hi) into rnd[0..hi-lo). */
void cpu_dropout_words(const cpu_geom *g, int64_t bi, int64_t n, int64_t i,
                       int64_t lo, int64_t hi, uint32_t *rnd);

/* ---- parallel for ------------------------------------------------------ */

typedef fattn_status (*cpu_item_fn)(void *ctx, cpu_scratch *scr, int64_t item);

/* Run fn(ctx, scratch, item) for item in [0, n) on `threads` threads, each
 * with its own scratch. Returns the first failure by item order. */
fattn_status cpu_parallel_for(int threads, const cpu_geom *g, int64_t n,
                              cpu_item_fn fn, void *ctx);

int cpu_default_threads(void);

/* ---- passes ------------------------------------------------------------ */

fattn_status cpu_forward(int threads, const fattn_fwd_params *p);
fattn_status cpu_backward(int threads, const fattn_bwd_params *p);

#endif /* FATTN_CPU_H */
