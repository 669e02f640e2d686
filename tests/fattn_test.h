/* Shared scaffolding of fattn's Check suites.
 *
 * Every suite executable is built from one test file that defines
 * `static Suite *make_suite(void)` and ends with FATTN_TEST_MAIN(make_suite,
 * list_fn). meson runs it in TAP mode (CK_TAP_LOG_FILE_NAME=-,
 * CK_VERBOSITY=silent); by hand it prints Check's own summary.
 *
 * Test ids. Table-driven tests name each row with a stable id
 * ("fwd.causal.bf16"). A row that passes calls fattn_test_mark(id), which
 * appends the id to the file named by $FATTN_TEST_RAN_LOG (if set). Run with
 * `--list-ids`, an executable prints every id it knows, one per line. The
 * feature-table check (tests/check_feature_table.py) uses both to prove each
 * id named in docs/features.md exists and ran.
 */
#ifndef FATTN_TEST_H
#define FATTN_TEST_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static inline void fattn_test_mark(const char *id)
{
    const char *path = getenv("FATTN_TEST_RAN_LOG");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    fprintf(f, "%s\n", id);
    fclose(f);
}

/* Seconds every TCase may run; generous for the sanitizer and -O0 builds. */
#define FATTN_TEST_TIMEOUT_SHORT 30
#define FATTN_TEST_TIMEOUT_LONG 300

/* What every suite's main does before its tests (FATTN_TEST_MAIN, and
 * FATTN_GPU_TEST_MAIN in fattn_gpu_test.h): this run's ids only, so the
 * ran-log starts afresh; and no core files from a child that crashes. */
static inline void fattn_test_begin(void)
{
    const char *ran_log = getenv("FATTN_TEST_RAN_LOG");
    if (ran_log && *ran_log) {
        FILE *truncated = fopen(ran_log, "w");
        if (truncated)
            fclose(truncated);
    }
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
}

#define FATTN_TEST_MAIN(make_suite_fn, list_ids_fn)                            \
    int main(int argc, char **argv)                                            \
    {                                                                          \
        if (argc > 1 && strcmp(argv[1], "--list-ids") == 0) {                  \
            list_ids_fn();                                                     \
            return 0;                                                          \
        }                                                                      \
        fattn_test_begin();                                                    \
        SRunner *sr = srunner_create(make_suite_fn());                         \
        srunner_run_all(sr, CK_ENV);                                           \
        int failed = srunner_ntests_failed(sr);                                \
        srunner_free(sr);                                                      \
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;                      \
    }

static inline void fattn_test_no_ids(void) {}

#endif /* FATTN_TEST_H */
