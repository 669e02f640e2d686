/* The harness's two helpers of the error idiom (docs/architecture.md, "One
 * error idiom").
 *
 * TRY(expr): return expr's status from the calling function unless it is
 * FATTN_OK; the early return, written once for the rows that the spec's key
 * tables expand into (spec.c reads them, spec_text.c writes them), where a
 * statement per row must fit in one macro. */
#ifndef FH_HARNESS_TRY_H
#define FH_HARNESS_TRY_H

#include "fattn/status.h"

#define TRY(expr)                                                              \
    do {                                                                       \
        fattn_status try_st_ = (expr);                                         \
        if (try_st_ != FATTN_OK)                                               \
            return try_st_;                                                    \
    } while (0)

/* The status a function reports when a step that must run even after a
 * failure (ending a micro-batch, restoring a saved setting) also reports
 * one: the first error wins. Both arguments are evaluated, which is the
 * point: `st = fh_first_error(st, end(b));` ends b either way. The status
 * wins, not its message: a second step that fails after the first sets the
 * last error message, so where the first message must stay, release
 * without reporting instead (an HDF5 handle closed at out:). */
static inline fattn_status fh_first_error(fattn_status first, fattn_status then)
{
    return first != FATTN_OK ? first : then;
}

#endif
