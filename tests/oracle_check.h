/* Holding an engine's outputs to the float64 oracle: the tolerance table
 * (the one place it is defined) and the element walk, shared by the CPU
 * engine suite (test_cpu_engine.c) and the GPU suite (test_cudnn_gpu.c).
 *
 * Rule: |engine - oracle| <= atol + rtol * |oracle| on the output's defined
 * region (engine.h); defined values finite, except Stats/Max of a row with
 * no kept key, which must equal the oracle's -inf exactly; every element
 * outside the defined region still the 0xFF poison.
 */
#ifndef FATTN_TEST_ORACLE_CHECK_H
#define FATTN_TEST_ORACLE_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "cases.h"
#include "oracle.h"

typedef enum tol_kind {
    TOL_O,       /* O */
    TOL_DQK,     /* dQ, dK */
    TOL_DV,      /* dV */
    TOL_DBIAS,   /* dBias */
    TOL_DOFFSET, /* dSoftmaxOffset (float32) */
    TOL_STATS,   /* Stats, Max (float32) */
    TOL_KINDS
} tol_kind;

typedef struct tolerance {
    fattn_dtype dtype;
    struct {
        double atol, rtol;
    } k[TOL_KINDS]; /* indexed by tol_kind */
} tolerance;

/* The tolerances of io dtype t for the CPU engine, and for the cuDNN engine
 * (float16 and bfloat16 only); NULL for a dtype without any. */
const tolerance *tolerance_for(fattn_dtype t);
const tolerance *tolerance_for_cudnn(fattn_dtype t);

/* One output to check. */
typedef struct check_out {
    const char *name;
    oracle_output which;
    const fattn_tensor *t;    /* the engine's output view */
    const double *ref;        /* oracle, C order of t's logical shape */
    double atol, rtol;
} check_out;

/* What the walk found. Fatal findings (poison overwritten, non-finite or
 * wrong infinities, nothing defined) and tolerance misses are kept apart:
 * a measuring run (FATTN_TEST_REPORT) tolerates only the latter. */
typedef struct check_report {
    int64_t defined;          /* elements in the defined region */
    int64_t out_of_tol;       /* defined elements beyond atol + rtol|oracle| */
    int64_t fatal;            /* poison broken, non-finite, inf mismatch */
    double worst_abs;         /* max |engine - oracle| */
    double worst_frac;        /* max |error| / allowance */
    double worst_need;        /* max |error| - rtol |oracle|: the atol needed */
    double max_ref;           /* max |oracle| */
    char first_fatal[320];    /* the first fatal finding, "" if none */
    char first_tol[320];      /* the first tolerance miss, "" if none */
} check_report;

/* Walk every element of k->t (through its strides) against k->ref. */
void oracle_check_output(const tcase *c, const tcase_buffers *buf, const check_out *k,
                         check_report *r);

#endif /* FATTN_TEST_ORACLE_CHECK_H */
