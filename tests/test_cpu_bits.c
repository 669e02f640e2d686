/* The CPU engine's bits do not depend on the thread count or on the
 * optimisation level.
 *
 * threads: every case of the matrix run with 1, 2, 3 and 5 threads gives
 *   byte-identical outputs (whole buffers, so untouched poison counts too).
 * opt: the matrix's digests from the engine built at -O0 (tests/cpu_digest
 *   linked against libfattn_O0) equal those of the optimised build.
 */
#include <stdio.h>
#include <string.h>

#include "cases.h"
#include "outputs_digest.h"
#include "fattn_test.h"

static const int thread_counts[] = {2, 3, 5};

START_TEST(test_threads)
{
    const tcase *c = &tcase_table[_i];
    uint64_t ref = 0;
    for (int t = -1; t < (int)(sizeof thread_counts / sizeof thread_counts[0]); t++) {
        int threads = t < 0 ? 1 : thread_counts[t];
        fattn_engine *e = NULL;
        ck_assert_int_eq(fattn_engine_init_cpu(&e, &(fattn_cpu_options){.threads = threads}),
                         FATTN_OK);
        tcase_buffers buf;
        ck_assert_msg(tcase_setup(c, &buf) == FATTN_OK, "%s: %s", c->id, fattn_last_error());
        ck_assert_msg(tcase_run(c, &buf, e) == FATTN_OK, "%s: %s", c->id, fattn_last_error());
        uint64_t h = tcase_outputs_digest(&buf);
        tcase_teardown(&buf);
        fattn_engine_free(e);
        if (t < 0)
            ref = h;
        else
            ck_assert_msg(h == ref, "%s: %d threads give %016llx, 1 thread %016llx", c->id,
                          threads, (unsigned long long)h, (unsigned long long)ref);
    }
    char id[160];
    snprintf(id, sizeof id, "bits.threads.%s", c->id);
    fattn_test_mark(id);
}
END_TEST

/* Run a digest executable and read its whole output. */
static char *run_digest(const char *exe, int threads)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' %d", exe, threads);
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "cannot run %s", exe);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    size_t n;
    while ((n = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (len + 1 >= cap)
            out = realloc(out, cap *= 2);
    }
    out[len] = '\0';
    int rc = pclose(p);
    ck_assert_msg(rc == 0, "%s exited with %d", exe, rc);
    return out;
}

START_TEST(test_opt_levels)
{
    char *o0 = run_digest(FATTN_CPU_DIGEST_O0, 2);
    char *o2 = run_digest(FATTN_CPU_DIGEST_OPT, 2);
    int lines = 0;
    for (char *p = o0; *p; p++)
        lines += *p == '\n';
    ck_assert_int_eq(lines, tcase_count);
    if (strcmp(o0, o2) != 0) {
        /* name the first differing case */
        char *a = o0, *b = o2;
        while (*a && *a == *b) {
            a++;
            b++;
        }
        while (a > o0 && a[-1] != '\n')
            a--;
        char line[200];
        sscanf(a, "%199[^\n]", line);
        ck_abort_msg("-O0 and optimised CPU engines differ, first at: %s", line);
    }
    free(o0);
    free(o2);
    fattn_test_mark("bits.opt_levels");
}
END_TEST

static void list_ids(void)
{
    for (int i = 0; i < tcase_count; i++)
        printf("bits.threads.%s\n", tcase_table[i].id);
    printf("bits.opt_levels\n");
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("cpu_bits");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, test_threads, 0, tcase_count);
    suite_add_tcase(s, tc);
    TCase *opt = tcase_create("opt_levels");
    tcase_set_timeout(opt, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_test(opt, test_opt_levels);
    suite_add_tcase(s, opt);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
