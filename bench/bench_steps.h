/* bench_cudnn's instrumented mode (bench_steps.c). */
#ifndef FATTN_BENCH_STEPS_H
#define FATTN_BENCH_STEPS_H

#include <stdbool.h>

#include "fattn/engine.h"

/* n cache-hit calls of one kind on eng (a forward when bp is NULL), each
 * followed by the engine's host steps one by one with a clock around each;
 * prints one JSON line of step medians ("bench":"cudnn_steps"). The plans
 * must be in eng's cache already. 0, or -1 with the reason on stderr. */
int bench_steps(fattn_engine *eng, const char *shape, bool causal, const char *kind,
                const fattn_fwd_params *fp, const fattn_bwd_params *bp, int n);

/* n public calls of one kind on eng (a forward when bp is NULL), each
 * between two CUDA events on the default stream, queued back to back, the
 * way torch_sdpa_bench.py times PyTorch's calls: the median interval
 * (*median_ms; the engine's calls copy host tensors and so end synchronised)
 * and the median host wall time of a call (*wall_us). 0, or -1 (stderr). */
int bench_public(fattn_engine *eng, const fattn_fwd_params *fp, const fattn_bwd_params *bp,
                 int n, double *median_ms, double *wall_us);

/* The autotune choice eng's last call made (FATTN_CUDNN_AUTOTUNE=1): 1 with
 * mode A's first config and the winner (tags, cap bytes each), how many
 * candidates were timed and the two medians; 0 when that call chose none. */
int bench_tune_info(const fattn_engine *eng, char *first, char *winner, size_t cap,
                    int *candidates, double *first_ms, double *winner_ms);

#endif
