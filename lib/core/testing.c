/* The test-control entry point (fattn/testing.h), built only with
 * -Dtesting=true: the allocation fault that tests use to drive every
 * failure path of fattn_tensor_alloc's callers. */
#include <stdatomic.h>
#include <stdlib.h>

#include "fattn/testing.h"
#include "fattn_config.h"

#if !FATTN_TESTING
#error "lib/core/testing.c is built only with -Dtesting=true"
#endif

/* -1: the environment has not been read yet; 0: no fault; N: the Nth call. */
static atomic_llong alloc_fail_at = -1;
static atomic_llong alloc_calls = 0;

/* N from FATTN_TEST_FAIL_ALLOC: digits only, at least 1; else 0. */
static long long fail_alloc_from_env(void)
{
    const char *e = getenv(FATTN_TESTING_FAIL_ALLOC_ENV);
    char *end = NULL;
    long long v = e && *e >= '0' && *e <= '9' ? strtoll(e, &end, 10) : 0;
    return (end && *end == '\0' && v >= 1) ? v : 0;
}

bool fattn_testing_alloc_fault(void)
{
    long long at = atomic_load(&alloc_fail_at);
    if (at == -1) {
        /* Two threads racing here read the same environment: same value. */
        at = fail_alloc_from_env();
        atomic_store(&alloc_fail_at, at);
    }
    if (at == 0)
        return false;
    return atomic_fetch_add(&alloc_calls, 1) + 1 == at;
}
