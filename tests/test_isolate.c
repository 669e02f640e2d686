/* Untrusted files are read in a forked child: a crash there is an error. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fattn_test.h"
#include "fileguard.h"
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

/* The first bytes of the file `path` names now for fattn's readers. */
static void read_head(const char *path, char *out, size_t cap)
{
    char buf[64];
    const char *p = fattn_fileguard_read_path(path, buf, sizeof buf);
    int fd = open(p, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, out, cap - 1) : -1;
    out[n > 0 ? n : 0] = '\0';
    if (fd >= 0)
        close(fd);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* In the child: rename another file over the path, then read "the path". */
static fattn_status fn_swap_then_read(const char *path, void *ctx)
{
    const char *other = ctx;
    if (rename(other, path) != 0)
        return fattn_error(FATTN_E_IO, "rename failed");
    char head[16];
    read_head(path, head, sizeof head);
    return strcmp(head, "checked") == 0 ? FATTN_OK
                                        : fattn_error(FATTN_E_INVALID_FILE, "read \"%s\"", head);
}

START_TEST(test_child_and_parent_read_the_pinned_file)
{
    char dir[] = "/tmp/fattn-isolate-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], other[256];
    snprintf(path, sizeof path, "%s/in.h5", dir);
    snprintf(other, sizeof other, "%s/other.h5", dir);
    write_text(path, "checked");
    write_text(other, "swapped");
    /* the swap happens after the check began: child and parent still read
     * the file that was opened */
    ck_assert_int_eq(fattn_isolate_run(path, fn_swap_then_read, other, 0, 10), FATTN_OK);
    char head[16];
    read_head(path, head, sizeof head);
    ck_assert_str_eq(head, "checked");
    /* a new check pins what the path names now */
    ck_assert_int_eq(fattn_isolate_run(path, fn_ok, NULL, 0, 10), FATTN_OK);
    read_head(path, head, sizeof head);
    ck_assert_str_eq(head, "swapped");
    fattn_fileguard_unpin(path);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_fifo_is_refused_without_blocking)
{
    char dir[] = "/tmp/fattn-isolate-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/in.h5", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    /* no writer: an open for reading would block; the timeout fails a hang */
    ck_assert_int_eq(fattn_isolate_run(path, fn_ok, NULL, 0, 10), FATTN_E_INVALID_FILE);
    ck_assert_msg(strstr(fattn_last_error(), "not a regular file (a FIFO)"), "%s",
                  fattn_last_error());
    unlink(path);
    rmdir(dir);
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
    tcase_add_test(tc, test_child_and_parent_read_the_pinned_file);
    tcase_add_test(tc, test_fifo_is_refused_without_blocking);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, fattn_test_no_ids)
