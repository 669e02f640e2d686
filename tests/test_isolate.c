/* Untrusted files are read in a forked child: a crash there is an error. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "fattn_test.h"
#include "isolate.h"

static fattn_status fn_ok(const char *path, void *ctx)
{
    (void)path;
    (void)ctx;
    return FATTN_OK;
}

static fattn_status fn_invalid(const char *path, void *ctx)
{
    (void)ctx;
    return fattn_error(FATTN_E_INVALID_FILE, "%s: bad schema", path);
}

static fattn_status fn_crash(const char *path, void *ctx)
{
    (void)path;
    (void)ctx;
    raise(SIGSEGV);
    return FATTN_OK;
}

static fattn_status fn_spin(const char *path, void *ctx)
{
    (void)path;
    (void)ctx;
    for (volatile unsigned long i = 0;; i++) {
    }
    return FATTN_OK;
}

START_TEST(test_ok)
{
    ck_assert_int_eq(fattn_isolate_run("f.h5", fn_ok, NULL, 0, 10), FATTN_OK);
}
END_TEST

START_TEST(test_status_and_message_cross_the_fork)
{
    ck_assert_int_eq(fattn_isolate_run("f.h5", fn_invalid, NULL, 0, 10), FATTN_E_INVALID_FILE);
    ck_assert_str_eq(fattn_last_error(), "f.h5: bad schema");
}
END_TEST

START_TEST(test_crash_is_an_error)
{
    ck_assert_int_eq(fattn_isolate_run("evil.h5", fn_crash, NULL, 0, 10), FATTN_E_INVALID_FILE);
    const char *m = fattn_last_error();
    ck_assert_msg(strstr(m, "HDF5 library failed reading evil.h5") && strstr(m, "signal 11"),
                  "message: %s", m);
}
END_TEST

START_TEST(test_cpu_limit)
{
    ck_assert_int_eq(fattn_isolate_run("slow.h5", fn_spin, NULL, 0, 1), FATTN_E_INVALID_FILE);
    ck_assert_msg(strstr(fattn_last_error(), "slow.h5") != NULL, "%s", fattn_last_error());
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("isolate");
    TCase *tc = tcase_create("fork");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tc, test_ok);
    tcase_add_test(tc, test_status_and_message_cross_the_fork);
    tcase_add_test(tc, test_crash_is_an_error);
    tcase_add_test(tc, test_cpu_limit);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, fattn_test_no_ids)
