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
#include "scrub.h"

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
    ck_assert_int_eq(fh_isolate_run("f.h5", fn_ok, NULL, 0, 10), FATTN_OK);
}
END_TEST

START_TEST(test_status_and_message_cross_the_fork)
{
    ck_assert_int_eq(fh_isolate_run("f.h5", fn_invalid, NULL, 0, 10), FATTN_E_INVALID_FILE);
    ck_assert_str_eq(fattn_last_error(), "f.h5: bad schema");
}
END_TEST

START_TEST(test_crash_is_an_error)
{
    ck_assert_int_eq(fh_isolate_run("evil.h5", fn_crash, NULL, 0, 10), FATTN_E_INVALID_FILE);
    const char *m = fattn_last_error();
    ck_assert_msg(strstr(m, "HDF5 library failed reading evil.h5") && strstr(m, "signal 11"),
                  "message: %s", m);
}
END_TEST

START_TEST(test_cpu_limit)
{
    ck_assert_int_eq(fh_isolate_run("slow.h5", fn_spin, NULL, 0, 1), FATTN_E_INVALID_FILE);
    ck_assert_msg(strstr(fattn_last_error(), "slow.h5") != NULL, "%s", fattn_last_error());
}
END_TEST

/* The first bytes of the file `path` names now for fattn's readers. */
static void read_head(const char *path, char *out, size_t cap)
{
    char buf[64];
    const char *p = fh_fileguard_read_path(path, buf, sizeof buf);
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
    ck_assert_int_eq(fh_isolate_run(path, fn_swap_then_read, other, 0, 10), FATTN_OK);
    char head[16];
    read_head(path, head, sizeof head);
    ck_assert_str_eq(head, "checked");
    /* a new check pins what the path names now */
    ck_assert_int_eq(fh_isolate_run(path, fn_ok, NULL, 0, 10), FATTN_OK);
    read_head(path, head, sizeof head);
    ck_assert_str_eq(head, "swapped");
    fh_fileguard_unpin(path);
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
    ck_assert_int_eq(fh_isolate_run(path, fn_ok, NULL, 0, 10), FATTN_E_INVALID_FILE);
    ck_assert_msg(strstr(fattn_last_error(), "not a regular file (a FIFO)"), "%s",
                  fattn_last_error());
    unlink(path);
    rmdir(dir);
}
END_TEST

/* In the child: what glibc prints as it aborts on a corrupt heap, with an
 * address and terminal controls, then the abort. */
static fattn_status fn_say_and_abort(const char *path, void *ctx)
{
    (void)path;
    (void)ctx;
    static const char words[] = "\n  munmap_chunk(): invalid pointer 0x55d5aa0012f0\x1b[2J\x07\n"
                                "second line\n";
    ssize_t unused = write(STDERR_FILENO, words, sizeof words - 1);
    (void)unused;
    abort();
    return FATTN_OK;
}

START_TEST(test_child_words_one_scrubbed_line)
{
    ck_assert_int_eq(fh_isolate_run("w.h5", fn_say_and_abort, NULL, 0, 10),
                     FATTN_E_INVALID_FILE);
    const char *m = fattn_last_error();
    ck_assert_msg(strstr(m, "(signal 6): the reader said: munmap_chunk(): invalid pointer 0x...?[2J?") &&
                      !strchr(m, '\n') && !strchr(m, '\x1b') && !strstr(m, "55d5aa") &&
                      !strstr(m, "second line"),
                  "message: %s", m);
}
END_TEST

/* fh_scrub_text, row by row: text in, text out. */
START_TEST(test_scrub_rows)
{
    static const struct { const char *in, *out; } rows[] = {
        {"plain words", "plain words"},
        {"at 0x7ffd1234abcd now", "at 0x... now"},
        {"0x1F 0xabc 0x", "0x1F 0xabc 0x"}, /* short hex is a number, not an address */
        {"a\x1b[2Jb\x07" "c\x7f", "a?[2Jb?c?"},
        {"first\nsecond", "first"},
        {"cr\rnext", "cr"},
        {"caf\xc3\xa9", "caf??"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s", rows[i].in);
        fh_scrub_text(buf);
        ck_assert_msg(strcmp(buf, rows[i].out) == 0, "row %zu: \"%s\", want \"%s\"", i, buf,
                      rows[i].out);
    }
}
END_TEST

/* How many private copies ("fattn-input-*") are in dir. */
static int copies_in(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c fattn-input-", dir);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (f && fscanf(f, "%d", &n) != 1)
        n = -1;
    if (f)
        pclose(f);
    return n;
}

START_TEST(test_pin_again_keeps_one_copy)
{
    char dir[] = "/tmp/fattn-isolate-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], tmpdir[256];
    snprintf(path, sizeof path, "%s/in.h5", dir);
    snprintf(tmpdir, sizeof tmpdir, "%s/tmp", dir);
    ck_assert_int_eq(mkdir(tmpdir, 0700), 0);
    setenv("TMPDIR", tmpdir, 1);
    write_text(path, "first");
    char a[64], b[64];
    ck_assert_int_eq(fh_fileguard_pin(path), FATTN_OK);
    snprintf(a, sizeof a, "%s", fh_fileguard_read_path(path, a, sizeof a));
    /* unchanged: the same copy, read by the same descriptor */
    ck_assert_int_eq(fh_fileguard_pin(path), FATTN_OK);
    snprintf(b, sizeof b, "%s", fh_fileguard_read_path(path, b, sizeof b));
    ck_assert_str_eq(a, b);
    ck_assert_int_eq(copies_in(tmpdir), 1);
    /* rewritten: a new copy, and the old one gone first */
    write_text(path, "second, longer");
    ck_assert_int_eq(fh_fileguard_pin(path), FATTN_OK);
    ck_assert_int_eq(copies_in(tmpdir), 1);
    char head[32];
    read_head(path, head, sizeof head);
    ck_assert_str_eq(head, "second, longer");
    fh_fileguard_unpin(path);
    ck_assert_int_eq(copies_in(tmpdir), 0);
    unsetenv("TMPDIR");
    unlink(path);
    rmdir(tmpdir);
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
    tcase_add_test(tc, test_child_words_one_scrubbed_line);
    tcase_add_test(tc, test_scrub_rows);
    tcase_add_test(tc, test_pin_again_keeps_one_copy);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, fattn_test_no_ids)
