/* bench_cudnn's instrumented mode (bench_steps.c). */
#ifndef FATTN_BENCH_STEPS_H
#define FATTN_BENCH_STEPS_H

#include <stdbool.h>

#include "fattn/engine.h"

typedef struct bench_dev bench_dev;

/* n cache-hit calls of one kind on eng (a forward when bp is NULL), each
 * followed by the engine's host steps one by one with a clock around each;
 * prints one JSON line of step medians ("bench":"cudnn_steps"). The plans
 * must be in eng's cache already. With dev (not NULL) each repetition also
 * makes the same call on dev's device tensors, the queue empty before it:
 * dev_public_us (its wall time) and dev_reported_host_us. 0, or -1 with the
 * reason on stderr. */
int bench_steps(fattn_engine *eng, const char *shape, bool causal, const char *kind,
                const fattn_fwd_params *fp, const fattn_bwd_params *bp,
                const bench_dev *dev, int n);

/* n public calls of one kind on eng (a forward when bp is NULL), each
 * between two CUDA events on the default stream, queued back to back, the
 * way torch_sdpa_bench.py times PyTorch's calls: the median interval
 * (*median_ms; calls on host tensors copy and so end synchronised, calls on
 * device tensors return once queued)
 * and the median host wall time of a call (*wall_us). 0, or -1 (stderr). */
int bench_public(fattn_engine *eng, const fattn_fwd_params *fp, const fattn_bwd_params *bp,
                 int n, double *median_ms, double *wall_us);

/* Device-tensor mode (--public, --steps): device copies of a case's
 * tensors, made once, and the parameters over them (fattn_tensor.device
 * FATTN_DEVICE_CUDA; rng_state stays a host tensor). fp's pack must hold
 * its Stats (after the describing call); bp's views are fp's (Q, K, V, O)
 * plus dO, dQ, dK, dV. */
struct bench_dev {
    void *p[16];
    int n;
    fattn_aux_pack aux_fwd, aux_bwd;
    fattn_fwd_params fp;
    fattn_bwd_params bp;
};
int bench_dev_init(fattn_engine *eng, const fattn_fwd_params *fp, const fattn_bwd_params *bp,
                   bench_dev *d);
void bench_dev_free(fattn_engine *eng, bench_dev *d);

/* Host cost of n cache-hit calls on device tensors (a forward when bp is
 * NULL): medians of the reported host_us and of the call's wall time; *hits
 * the plan-cache hits. 0 or -1. Each call is made with the queue empty
 * (cudaDeviceSynchronize before it, as torch_sdpa_bench.py --public times
 * PyTorch's), or with `busy` while the GPU still runs the calls before it
 * (one untimed call first, then the n back to back, no synchronisation
 * between: a training loop's steady state; the queue stays far from full). */
int bench_dev_host(fattn_engine *eng, const fattn_fwd_params *fp, const fattn_bwd_params *bp,
                   int n, bool busy, double *reported_us, double *wall_us, int *hits);

/* The autotune choice eng's last call made (FATTN_CUDNN_AUTOTUNE=1): 1 with
 * mode A's first config and the winner (tags, cap bytes each), how many
 * candidates were timed and the two medians; 0 when that call chose none. */
int bench_tune_info(const fattn_engine *eng, char *first, char *winner, size_t cap,
                    int *candidates, double *first_ms, double *winner_ms);

/* What FATTN_CUDNN_AUTOTUNE=knobs's sweep found for eng's last plan built
 * ("" when none ran), into out (cap bytes). */
void bench_tune_sweep(const fattn_engine *eng, char *out, size_t cap);

/* Every candidate eng's last call timed (its autotune choice): up to cap
 * tags (96 bytes each) and median times; how many, 0 when it chose none. */
int bench_tune_list(const fattn_engine *eng, char (*tags)[96], double *ms, int cap);

#endif
