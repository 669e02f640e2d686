/* fattn verify --junit: the JUnit XML report (docs/verify.md), one testcase
 * per check of each case. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_verify.h"
#include "compare.h"
#include "escape.h"
#include "verify.h"

static void junit_open(FILE *f, const char *id, const char *name)
{
    fputs("    <testcase classname=\"fattn.verify.", f);
    fattn_escape_markup(f, id, FATTN_MARKUP_XML);
    fputs("\" name=\"", f);
    fattn_escape_markup(f, name, FATTN_MARKUP_XML);
    fputs("\">\n", f);
}

/* One check of a case as a testcase: a failure with its first differences
 * (those the case kept, FATTN_COMPARE_MAX_REPORTED at most) when it found
 * any. */
static void junit_check(FILE *f, const fattn_verify_case *c, size_t k)
{
    const char *check = c->checks[k].name;
    size_t n = c->checks[k].differences, len = strlen(check);
    junit_open(f, c->spec->id, check);
    if (n) {
        fprintf(f, "      <failure type=\"different\" message=\"");
        bool first = true;
        for (size_t d = 0; d < c->cmp.differences && d < FATTN_COMPARE_MAX_REPORTED; d++) {
            const char *p = c->cmp.paths[d]; /* "check: path" */
            if (strncmp(p, check, len) != 0 || strncmp(p + len, ": ", 2) != 0)
                continue;
            if (first) {
                fattn_escape_markup(f, p, FATTN_MARKUP_XML);
                fputs(" ", f);
                fattn_escape_markup(f, c->cmp.why[d], FATTN_MARKUP_XML);
                fprintf(f, "\">%zu difference%s", n, cli_s(n));
                first = false;
            }
            fputs("\n", f);
            fattn_escape_markup(f, p, FATTN_MARKUP_XML);
            fputs(": ", f);
            fattn_escape_markup(f, c->cmp.why[d], FATTN_MARKUP_XML);
        }
        if (first) /* its differences came after the ones kept */
            fprintf(f, "%s: %zu difference%s\">%zu difference%s (not among the first %d kept)",
                    check, n, cli_s(n), n, cli_s(n), FATTN_COMPARE_MAX_REPORTED);
        fputs("</failure>\n", f);
    }
    fputs("    </testcase>\n", f);
}

/* One case as JUnit testcases, classname fattn.verify.<id>: one per check
 * run (named by the check), and one named "case" for a skipped or errored
 * case, or one that ran no check. *tests and *failures count them. */
static void junit_case(FILE *f, const fattn_verify_case *c, size_t *tests, size_t *failures)
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
        fattn_escape_markup(f, c->skipped, FATTN_MARKUP_XML);
        fputs("\"/>\n", f);
    } else if (c->error[0]) {
        fputs("      <error type=\"error\" message=\"", f);
        fattn_escape_markup(f, c->error, FATTN_MARKUP_XML);
        fputs("\"/>\n", f);
    }
    fputs("    </testcase>\n", f);
}

/* The JUnit XML report of the cases run; 0, or -1 after a message. The
 * testcases are written first, as the counts the header carries are
 * theirs. */
int fattn_cmd_verify_write_junit(const char *path, const fattn_cmd_verify_env *v,
                                 const fattn_verify_result *r)
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
        fattn_escape_markup(f, props[k][1] ? props[k][1] : "", FATTN_MARKUP_XML);
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
    return rc == FATTN_EXIT_OK ? 0 : -1;
}
