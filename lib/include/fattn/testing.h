/* fattn/testing.h — the one test-control entry point of libfattn.
 *
 * Exists only in a build configured with -Dtesting=true (fattn_config.h
 * defines FATTN_TESTING 1; lib/core/testing.c is compiled only then). A
 * shipped build has none of these symbols, and the environment variables
 * below change nothing in it. Code that uses this header guards the use with
 * `#if FATTN_TESTING`.
 *
 * Allocation faults. With FATTN_TEST_FAIL_ALLOC=N in the environment (N a
 * decimal >= 1, read once, on the first fattn_tensor_alloc of the process)
 * the Nth fattn_tensor_alloc of the process fails with FATTN_E_NOMEM as if
 * the allocator had returned NULL; every other call is unaffected. Calls are
 * counted atomically over all threads. Unset, empty or malformed ("0",
 * "-1", "2x", " 1"): no fault. The CLI's fault sweeps set it on a child
 * process (tests/test_reliability.py); Check suites set it before their
 * first allocation (tests/fuzz/test_fault_hook.c).
 */
#ifndef FATTN_TESTING_H
#define FATTN_TESTING_H

#include "fattn/api.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The environment variable that arms the allocation fault. */
#define FATTN_TESTING_FAIL_ALLOC_ENV "FATTN_TEST_FAIL_ALLOC"

/* Lifting engine gaps. With FATTN_TEST_LIFT_ROWS=id[,id...] in the
 * environment, the support table's rows of those ids are skipped when they
 * are engine gaps (status FATTN_E_UNSUPPORTED; TE's own rules are never
 * lifted), at the front ends and at the engine dispatch alike: the device
 * measurement of a gap not yet measured (tools/gpu/large-dims.sh) runs the
 * engine on what its row refuses, to learn whether the row may go. */
#define FATTN_TESTING_LIFT_ROWS_ENV "FATTN_TEST_LIFT_ROWS"

/* True when row `id` is named in FATTN_TEST_LIFT_ROWS. */
FATTN_API bool fattn_testing_row_lifted(const char *id);

/* Widening engine gaps. With FATTN_TEST_WIDEN_ROWS=id[,id...], those engine
 * gap rows hold for every engine: the CPU engine, which runs every case TE
 * accepts, then skips what only the cuDNN engine's row refuses, so that the
 * CLI's reports of a skipped case are tested on a machine without a GPU. */
#define FATTN_TESTING_WIDEN_ROWS_ENV "FATTN_TEST_WIDEN_ROWS"

/* True when row `id` is named in FATTN_TEST_WIDEN_ROWS. */
FATTN_API bool fattn_testing_row_widened(const char *id);

/* Counts one allocation; true when this one is the armed Nth and must fail.
 * Called by fattn_tensor_alloc once per call that would allocate. */
FATTN_API bool fattn_testing_alloc_fault(void);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_TESTING_H */
