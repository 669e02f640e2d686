/* The test-only allocation fault (fattn/testing.h, lib/core/testing.c,
 * read by lib/core/tensor.c): with FATTN_TEST_FAIL_ALLOC=N the Nth
 * fattn_tensor_alloc of the process fails with FATTN_E_NOMEM, every other
 * one succeeds. Check forks each test, and the variable is read on a
 * process's first call, so each test sets it before allocating anything.
 * tests/test_reliability.py drives the same hook through `fattn run` and
 * `fattn replay`. A build without -Dtesting has no hook: the suite reports
 * TAP "1..0 # SKIP" with the reason. */
#include <stdlib.h>
#include <string.h>

#include "fattn/tensor.h"
#include "fattn_config.h"
#include "fattn_test.h"

static const char *const ids[] = {
    "fault.alloc.nth_fails",
    "fault.alloc.unset",
    "fault.alloc.malformed",
};

static void list_ids(void)
{
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        puts(ids[i]);
}

static fattn_status alloc_small(fattn_tensor *t)
{
    const int64_t shape[2] = {3, 5};
    *t = fattn_tensor_empty();
    return fattn_tensor_alloc(t, FATTN_DTYPE_FLOAT32, 2, shape);
}

START_TEST(test_nth_fails)
{
    ck_assert_int_eq(setenv("FATTN_TEST_FAIL_ALLOC", "3", 1), 0);
    for (int i = 1; i <= 6; i++) {
        fattn_tensor t;
        fattn_status st = alloc_small(&t);
        if (i == 3) {
            ck_assert_int_eq(st, FATTN_E_NOMEM);
            ck_assert(fattn_tensor_is_empty(&t));
            ck_assert_msg(strstr(fattn_last_error(), "FATTN_TEST_FAIL_ALLOC") != NULL, "%s",
                          fattn_last_error());
        } else {
            ck_assert_int_eq(st, FATTN_OK);
            ck_assert(!fattn_tensor_is_empty(&t));
            fattn_tensor_free(&t);
        }
    }
    fattn_test_mark("fault.alloc.nth_fails");
}
END_TEST

START_TEST(test_unset)
{
    ck_assert_int_eq(unsetenv("FATTN_TEST_FAIL_ALLOC"), 0);
    for (int i = 0; i < 1000; i++) {
        fattn_tensor t;
        ck_assert_int_eq(alloc_small(&t), FATTN_OK);
        fattn_tensor_free(&t);
    }
    fattn_test_mark("fault.alloc.unset");
}
END_TEST

static const char *const malformed[] = {"", "0", "-1", "2x", "abc", " 1"};

START_TEST(test_malformed)
{
    ck_assert_int_eq(setenv("FATTN_TEST_FAIL_ALLOC", malformed[_i], 1), 0);
    for (int i = 0; i < 50; i++) {
        fattn_tensor t;
        ck_assert_int_eq(alloc_small(&t), FATTN_OK);
        fattn_tensor_free(&t);
    }
    fattn_test_mark("fault.alloc.malformed");
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("fault_hook");
    TCase *tc = tcase_create("alloc");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tc, test_nth_fails);
    tcase_add_test(tc, test_unset);
    tcase_add_loop_test(tc, test_malformed, 0, (int)(sizeof malformed / sizeof malformed[0]));
    suite_add_tcase(s, tc);
    return s;
}

#if FATTN_TESTING
FATTN_TEST_MAIN(make_suite, list_ids)
#else
int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--list-ids") == 0) {
        list_ids();
        return 0;
    }
    (void)make_suite;
    printf("1..0 # SKIP built without -Dtesting: no allocation fault hook to test\n");
    return 0;
}
#endif
