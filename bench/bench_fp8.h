/* bench_cudnn --fp8 (bench_fp8.c). */
#ifndef FATTN_BENCH_FP8_H
#define FATTN_BENCH_FP8_H

#include "fattn/engine.h"

/* The FP8 rows whose name matches only (NULL: all), on e (cold calls) and et
 * (the same plan cache, timing_iters set), rounds rounds each. JSON lines on
 * stdout; returns nonzero if a row failed other than by a refusal. */
int bench_fp8_run(fattn_engine *e, fattn_engine *et, const char *only, int rounds);

#endif
