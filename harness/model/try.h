/* The harness's helper of the error idiom (docs/architecture.md, "One
 * error idiom").
 *
 * TRY(expr): return expr's status from the calling function unless it is
 * FATTN_OK; the early return, written once for the rows that a table
 * expands into (the spec's keys, which spec.c reads and spec_text.c writes;
 * a case's inputs, which case_run.c records), where a statement per row must
 * fit in one macro. */
#ifndef FH_HARNESS_TRY_H
#define FH_HARNESS_TRY_H

#include "fattn/status.h"

#define TRY(expr)                                                              \
    do {                                                                       \
        fattn_status try_st_ = (expr);                                         \
        if (try_st_ != FATTN_OK)                                               \
            return try_st_;                                                    \
    } while (0)

#endif
