/* Internals of the CPU engine (not installed).
 *
 * The engine dispatch validates the parameters once into a fattn_geom
 * (core/geom.h: sizes, per-batch lengths and token offsets, element offsets
 * of every row); the engine runs work items in parallel over it. Every work item writes a disjoint part of the outputs
 * and computes it in one fixed order, so results never depend on the thread
 * count or on which thread ran which item.
 */
#ifndef FATTN_CPU_H
#define FATTN_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "core/geom.h"
#include "fattn/engine.h"

/* ---- geometry (core/geom.h) ------------------------------------------ */

/* Keys j kept for query i of batch bi: [*lo, *hi) (empty if lo >= hi). */
void fattn__cpu_key_range(const fattn_geom *g, int64_t bi, int64_t i, int64_t *lo,
                   int64_t *hi);

/* ---- one row of logits ------------------------------------------------ */

/* Scratch of one worker, sized for the largest (batch, head).
 * K^T and V^T have leading dimension ldk = skv + 8 (zero padding past the
 * loaded keys, so 8-key kernels may read a few keys beyond a range); row
 * buffers (K rows, V rows, Q/dO/O rows, accumulators) have leading dimension
 * ldc = max(d, dv) rounded up to 8 (zero padding past the head dim). */
#define CPU_ROWS 4
typedef struct cpu_scratch {
    int64_t ldk, ldc;
    float *kt;     /* [d][ldk]  K^T of one (batch, kv head) */
    float *kr;     /* [skv][ldc] K rows */
    float *vr;     /* [skv][ldc] V rows */
    float *vt;     /* [dv][ldk] V^T */
    int64_t kv_bi, kv_gk; /* which (batch, kv head) is loaded (-1: none) */
    unsigned kv_have;     /* CPU_KT | CPU_KR | CPU_VR | CPU_VT loaded */
    float *s, *p, *dp, *ds, *pd, *t; /* [CPU_ROWS][ldk] per-row key vectors */
    float *qrow;   /* [CPU_ROWS][ldc] */
    float *dorow;  /* [CPU_ROWS][ldc] */
    float *orow;   /* [CPU_ROWS][ldc] */
    float *acc;    /* [skv * (2 ldc + 64)] accumulators */
    float *acc2, *acc3; /* [skv * ldc] */
    uint32_t *rnd; /* [skv + 4] dropout words */
} cpu_scratch;

enum { CPU_KT = 1u, CPU_KR = 2u, CPU_VR = 4u, CPU_VT = 8u };

fattn_status fattn__cpu_scratch_init(cpu_scratch *s, const fattn_geom *g);
void fattn__cpu_scratch_free(cpu_scratch *s);

/* Make keys [0, len_kv[bi]) of (bi, kv head gk) available as float32 in the
 * buffers named by `want` (CPU_* bits), reusing what the scratch already
 * holds for the same (bi, gk). */
void fattn__cpu_load_kv(const fattn_geom *g, cpu_scratch *scr, int64_t bi, int64_t gk, unsigned want);

/* One row (bi, pos, head n) of a tensor, widened to / rounded from float. */
void fattn__cpu_load_row(const fattn_tensor *t, fattn_qkv_format fmt,
                  const int32_t *off, int64_t bi, int64_t pos, int64_t n,
                  int64_t width, float *out);
void fattn__cpu_store_row(fattn_tensor *t, fattn_qkv_format fmt, const int32_t *off,
                   int64_t bi, int64_t pos, int64_t n, int64_t width,
                   const float *in);

/* Round n floats to io in place (no-op for float32 io). */
void fattn__cpu_round_io(fattn_dtype io, float *x, int64_t n);

/* Raw dot products of up to CPU_ROWS rows against the columns of bt:
 * out[r*ldo + j] = sum_c a[r*lda + c] * bt[c*ldb + j] (c = 0..kd-1 ascending,
 * from 0.0f) for j in [j0, j1) (and possibly up to 7 more, j1 + 7 < ldb and
 * < ldo). Rows r >= nr are not written. */
void fattn__cpu_dot_rows(int nr, const float *a, int64_t lda, int64_t kd, const float *bt,
                  int64_t ldb, int64_t j0, int64_t j1, float *out, int64_t ldo);

/* acc[r*lda + c] += sum_j w[r*ldw + j] * m[j*ldm + c] for j ascending in
 * [lo[r], hi[r]), c in [0, nc) (nc a multiple of 8), rows r < nr. */
void fattn__cpu_axpy_rows(int nr, const float *w, int64_t ldw, const int64_t *lo,
                   const int64_t *hi, const float *m, int64_t ldm, int64_t nc,
                   float *acc, int64_t lda);

/* acc[(j - j0)*lda + c] += sum over rows r ascending with lo[r] <= j < hi[r]
 * of w[r*ldw + j] * x[r*ldx + c], for j in [j0, j1), c in [0, nc) (nc a
 * multiple of 8). */
void fattn__cpu_rank_rows(int nr, const float *w, int64_t ldw, const int64_t *lo, const int64_t *hi,
                   const float *x, int64_t ldx, int64_t nc, int64_t j0, int64_t j1,
                   float *acc, int64_t lda);

/* Logits s[r*lds + j] of the query rows qrow[r*ldq..] (r < nr, positions
 * i[r]) for j in [lo[r], hi[r]): dot product (head-dim ascending), times
 * scale, plus bias and ALiBi. Entries outside a row's range are garbage. */
void fattn__cpu_logits_rows(const fattn_geom *g, const cpu_scratch *scr, int64_t bi, int64_t n,
                     int nr, const int64_t *i, const float *qrow, int64_t ldq,
                     const int64_t *lo, const int64_t *hi, float *s, int64_t lds);

/* Philox keep words for row (bi, n, i), keys [lo, hi) into rnd[0..hi-lo). */
void fattn__cpu_dropout_words(const fattn_geom *g, int64_t bi, int64_t n, int64_t i,
                       int64_t lo, int64_t hi, uint32_t *rnd);

/* ---- parallel for ------------------------------------------------------ */

typedef fattn_status (*cpu_item_fn)(void *ctx, cpu_scratch *scr, int64_t item);

/* Run fn(ctx, scratch, item) for item in [0, n) on `threads` threads, each
 * with its own scratch. Returns the first failure by item order. */
fattn_status fattn__cpu_parallel_for(int threads, const fattn_geom *g, int64_t n,
                              cpu_item_fn fn, void *ctx);

int fattn__cpu_default_threads(void);

/* ---- passes ------------------------------------------------------------ */

/* An executing call, resolved and validated by the dispatch (core/engine.c). */
fattn_status fattn__cpu_forward(int threads, const fattn_fwd_params *p, const fattn_fwd_call *c);
fattn_status fattn__cpu_backward(int threads, const fattn_bwd_params *p, const fattn_bwd_call *c);
/* The same calls with FP8 scaling (p->fp8 set; cpu/fp8.c). */
fattn_status fattn__cpu_fp8_forward(int threads, const fattn_fwd_params *p, const fattn_fwd_call *c);
fattn_status fattn__cpu_fp8_backward(int threads, const fattn_bwd_params *p,
                              const fattn_bwd_call *c);

#endif /* FATTN_CPU_H */
