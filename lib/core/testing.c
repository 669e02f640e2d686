/* The test-control entry point (fattn/testing.h), built only with
 * -Dtesting=true: the allocation fault that tests use to drive every
 * failure path of fattn_tensor_alloc's callers, and the engine gap rows a
 * device measurement lifts. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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

/* Whether the comma-separated list in environment variable `var` names
 * `id` whole. Read on every call: a measurement or test sets it before its
 * first case, and rows are checked a few times per engine call. */
static bool env_names(const char *var, const char *id)
{
    const char *e = getenv(var);
    size_t n = id ? strlen(id) : 0;
    if (!e || !n)
        return false;
    for (const char *p = e; (p = strstr(p, id)) != NULL; p += n)
        if ((p == e || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
            return true;
    return false;
}

bool fattn_testing_row_lifted(const char *id)
{
    return env_names(FATTN_TESTING_LIFT_ROWS_ENV, id);
}

bool fattn_testing_row_widened(const char *id)
{
    return env_names(FATTN_TESTING_WIDEN_ROWS_ENV, id);
}
