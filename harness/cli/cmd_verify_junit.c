/* fattn verify --junit: the JUnit XML report (docs/verify.md), one testcase
 * per check of each case. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cause.h"
#include "cli.h"
#include "cmd_verify.h"
#include "compare.h"
#include "escape.h"
#include "verify.h"

static void junit_open(FILE *f, const char *id, const char *name)
{
    fputs("    <testcase classname=\"fattn.verify.", f);
    fh_escape_markup(f, id, FH_MARKUP_XML);
    fputs("\" name=\"", f);
    fh_escape_markup(f, name, FH_MARKUP_XML);
    fputs("\">\n", f);
}

/* The differences a failure lists; the rest are counted. */
#define JUNIT_LISTED 200

/* One check of a case as a testcase: a failure whose message is the
 * check's earliest cause (cause.h) and whose text lists its differences in
 * run order, with attribute values, when it found any. */
static void junit_check(FILE *f, const fh_verify_case *c, size_t k)
{
    const char *check = c->checks[k].name;
    size_t n = c->checks[k].differences;
    junit_open(f, c->spec->id, check);
    if (n) {
        char cause[1400];
        fh_verify_check_cause_text(c, (int)k, cause, sizeof cause);
        fprintf(f, "      <failure type=\"different\" message=\"");
        if (cause[0])
            fh_escape_markup(f, cause, FH_MARKUP_XML);
        else
            fprintf(f, "%s: %zu difference%s", check, n, cli_s(n));
        fprintf(f, "\">%zu difference%s", n, cli_s(n));
        size_t *idx = c->n_diffs ? malloc(c->n_diffs * sizeof *idx) : NULL;
        size_t listed = 0, of_check = 0;
        if (idx)
            fh_verify_diff_order(c, idx);
        for (size_t d = 0; idx && d < c->n_diffs; d++) {
            const fh_verify_diff *x = &c->diffs[idx[d]];
            if ((size_t)x->check != k)
                continue;
            if (of_check++ >= JUNIT_LISTED)
                continue;
            char t[1400];
            fh_verify_diff_text(c, x, t, sizeof t);
            fputs("\n", f);
            fh_escape_markup(f, check, FH_MARKUP_XML);
            fputs(": ", f);
            fh_escape_markup(f, t, FH_MARKUP_XML);
            listed++;
        }
        if (listed < n)
            fprintf(f, "\n... and %zu more", n - listed);
        free(idx);
        fputs("</failure>\n", f);
    }
    fputs("    </testcase>\n", f);
}

/* One case as JUnit testcases, classname fattn.verify.<id>: one per check
 * run (named by the check), and one named "case" for a skipped or errored
 * case, or one that ran no check. *tests and *failures count them. */
static void junit_case(FILE *f, const fh_verify_case *c, size_t *tests, size_t *failures)
{
    for (size_t k = 0; k < c->n_checks && !c->skipped; k++) {
        junit_check(f, c, k);
        ++*tests;
        *failures += c->checks[k].differences > 0;
    }
    if (!c->skipped && !c->error[0] && c->n_checks)
        return;
    ++*tests;
    junit_open(f, c->spec->id, "case");
    if (c->skipped) {
        fputs("      <skipped message=\"", f);
        fh_escape_markup(f, c->skipped, FH_MARKUP_XML);
        fputs("\"/>\n", f);
    } else if (c->error[0]) {
        fputs("      <error type=\"error\" message=\"", f);
        fh_escape_markup(f, c->error, FH_MARKUP_XML);
        fputs("\"/>\n", f);
    }
    fputs("    </testcase>\n", f);
}

/* The JUnit XML report of the cases run; 0, or -1 after a message. The
 * testcases are written first, as the counts the header carries are
 * theirs. */
int fh_cmd_verify_write_junit(const char *path, const fh_cmd_verify_env *v,
                                 const fh_verify_result *r)
{
    char *body = NULL, *text = NULL;
    size_t blen = 0, len = 0, tests = 0, failures = 0;
    FILE *b = open_memstream(&body, &blen);
    for (size_t i = 0; b && i < r->n_cases; i++)
        junit_case(b, &r->cases[i], &tests, &failures);
    bool bad = !b || ferror(b) != 0;
    if (b && fclose(b) != 0)
        bad = true;
    FILE *f = bad ? NULL : open_memstream(&text, &len);
    if (!f) {
        free(body);
        cli_fail("verify", "%s: cannot write the JUnit report: out of memory", path);
        return -1;
    }
    char counts[200];
    snprintf(counts, sizeof counts, "tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" "
             "skipped=\"%zu\"", tests, failures, r->n_err, r->n_skip);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<testsuites name=\"fattn verify\" %s>\n"
               "  <testsuite name=\"fattn verify\" %s>\n    <properties>\n", counts, counts);
    const char *props[][2] = {{"engine", v->backend_name},
                              {"platform_key", v->goldens.key},
                              {"goldens", v->goldens.path},
                              {"verdict", r->neutral ? "behavior-neutral"
                                                     : "not behavior-neutral"}};
    for (size_t k = 0; k < sizeof props / sizeof props[0]; k++) {
        fprintf(f, "      <property name=\"%s\" value=\"", props[k][0]);
        fh_escape_markup(f, props[k][1] ? props[k][1] : "", FH_MARKUP_XML);
        fputs("\"/>\n", f);
    }
    fputs("    </properties>\n", f);
    fputs(body ? body : "", f);
    free(body);
    fputs("  </testsuite>\n</testsuites>", f);
    bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad || !text) {
        free(text);
        cli_fail("verify", "%s: cannot write the JUnit report: out of memory", path);
        return -1;
    }
    int rc = cli_write_report("verify", "JUnit report", path, text);
    free(text);
    return rc == FH_EXIT_OK ? 0 : -1;
}
