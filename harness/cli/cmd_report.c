/* fattn report: one self-contained HTML page of a verify JSON report or of
 * the difference between two run files (docs/report.md). The results are
 * verify's and diff's own (the JSON report; fh_diff_files): this command
 * only lays them out and, for run files, draws where the bits differ. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "diff.h"
#include "escape.h"
#include "fileguard.h"
#include "h5estimate.h"
#include "h5io.h"
#include "isolate.h"
#include "report.h"
#include "runfile.h"

static const char report_help[] =
    "usage: fattn report VERIFY.json [--cases FILE] [--max-memory BYTES] -o REPORT.html\n"
    "       fattn report RUN_A.h5 RUN_B.h5 [--max-memory BYTES] -o REPORT.html\n"
    "\n"
    "Write one self-contained HTML page (inline SVG, no script, nothing loaded from the\n"
    "network) for people to look at:\n"
    "- of a `fattn verify --json` report: the verdict, a grid of the cases along their\n"
    "  features (rows layout and mask, columns dtype with an FP8 column, each case a square\n"
    "  coloured by its result and labelled with its bias and softmax) linking to each case's\n"
    "  details (its first differences, the front ends' errors), and the provenance of the\n"
    "  run and of the goldens file it was checked against. The features come from the\n"
    "  matrix (--cases FILE, default the compiled-in matrix); cases it lacks are '?'.\n"
    "- of two run files (B the reference, compared bitwise as `fattn diff` does): the same\n"
    "  grid from the cases' recorded specs, both files' provenance, and for each differing\n"
    "  tensor a map of where it differs (per panel of batch and head: its sequence axis x\n"
    "  its last axis), the histogram of the ULP distances of its differing elements, and\n"
    "  its first differing elements with both values in decimal and hex.\n"
    "-o - writes the page to stdout. --max-memory (default half the RAM) refuses, before\n"
    "anything is read, a page whose estimate is larger: the comparison, both files' trees\n"
    "without data, every attribute value escaped into the page, a pair of tensors drawn\n"
    "(of a verify JSON: its size parsed and escaped). Exit 0 the page is written (whatever\n"
    "it shows), 2 a usage error, an input that cannot be read or is over the bound.\n";

/* The page so far, in memory: written in one atomic replace at the end. */
typedef struct page {
    FILE *f;
    char *text;
    size_t len;
} page;

/* A string member of a JSON object, NULL when absent or not a string. */
static const char *jstr(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* The features of case `id` from the matrix (NULL fields when unknown). */
static void cell_from_spec(fh_report_cell *c, const fh_spec *s)
{
    if (!s)
        return;
    c->layout = fattn_layout_name(s->layout);
    c->mask = fattn_mask_type_name(s->mask);
    c->bias = fattn_bias_type_name(s->bias);
    c->softmax = fattn_softmax_type_name(s->softmax);
    c->dtype = fattn_dtype_name(s->dtype);
    c->fp8 = s->fp8 ? fattn_fp8_recipe_name(s->fp8_recipe) : NULL;
}

static const fh_spec *matrix_find(const cli_matrix *m, const char *id)
{
    for (size_t i = 0; id && i < m->n_sel; i++)
        if (!strcmp(m->sel[i]->id, id))
            return m->sel[i];
    return NULL;
}

static void section_start(FILE *f, const char *id, const char *result)
{
    fputs("<div class=\"case\" id=\"", f);
    fh_report_anchor(f, id);
    fputs("\"><h3><span class=\"badge r-", f);
    fh_escape_markup(f, result, FH_MARKUP_HTML);
    fputs("\">", f);
    fh_escape_markup(f, result, FH_MARKUP_HTML);
    fputs("</span> <code>", f);
    fh_escape_markup(f, id, FH_MARKUP_HTML);
    fputs("</code></h3>\n", f);
}

static void feature(FILE *f, const char *name, const char *value)
{
    fprintf(f, "%s%s ", strcmp(name, "layout") ? ", " : "", name);
    fh_escape_markup(f, value ? value : "?", FH_MARKUP_HTML);
}

static void features_line(FILE *f, const fh_report_cell *c)
{
    fputs("<p class=\"mono\">", f);
    feature(f, "layout", c->layout);
    feature(f, "mask", c->mask);
    feature(f, "bias", c->bias);
    feature(f, "softmax", c->softmax);
    feature(f, "dtype", c->dtype);
    if (c->fp8)
        feature(f, "FP8 recipe", c->fp8);
    fputs("</p>\n", f);
}

/* One verify case's details: its first differences and front-end errors. */
static void verify_case_details(FILE *f, const json_t *jc, const fh_report_cell *c)
{
    section_start(f, c->id, c->result);
    features_line(f, c);
    json_int_t nd = json_integer_value(json_object_get(jc, "differences"));
    const json_t *first = json_object_get(jc, "first");
    const json_t *cause = json_object_get(jc, "cause");
    if (nd && json_is_object(cause)) { /* where it starts (docs/verify.md) */
        fputs("<p class=\"cause\">earliest cause: <code>", f);
        fh_escape_markup(f, jstr(cause, "text"), FH_MARKUP_HTML);
        fputs("</code></p>\n", f);
    }
    if (nd) {
        size_t listed = json_array_size(first);
        fprintf(f, "<p>%lld difference%s, in run order%s:</p>\n<ul>\n", (long long)nd,
                nd == 1 ? "" : "s", listed < (size_t)nd ? " (the first ones)" : "");
        size_t k;
        const json_t *d;
        json_array_foreach(first, k, d) {
            fputs("<li><code>", f);
            fh_escape_markup(f, jstr(d, "path"), FH_MARKUP_HTML);
            fputs("</code>: ", f);
            const json_t *a = json_object_get(d, "a"), *b = json_object_get(d, "b");
            if (a || b) { /* an attribute: both sides' values */
                fh_escape_markup(f, jstr(d, "side_a"), FH_MARKUP_HTML);
                fputs(" <code>", f);
                fh_escape_markup(f, json_is_string(a) ? json_string_value(a) : "absent",
                                    FH_MARKUP_HTML);
                fputs("</code>, ", f);
                fh_escape_markup(f, jstr(d, "side_b"), FH_MARKUP_HTML);
                fputs(" <code>", f);
                fh_escape_markup(f, json_is_string(b) ? json_string_value(b) : "absent",
                                    FH_MARKUP_HTML);
                fputs("</code>", f);
            } else {
                fh_escape_markup(f, jstr(d, "why"), FH_MARKUP_HTML);
            }
            fputs("</li>\n", f);
        }
        fputs("</ul>\n", f);
    }
    for (int k = 0; k < 2; k++) {
        const json_t *side = json_object_get(jc, k ? "split" : "legacy");
        if (!side)
            continue;
        fprintf(f, "<p>%s: <code>", k ? "split" : "legacy");
        fh_escape_markup(f, jstr(side, "status"), FH_MARKUP_HTML);
        fputs("</code> ", f);
        fh_escape_markup(f, jstr(side, "message"), FH_MARKUP_HTML);
        fputs("</p>\n", f);
    }
    if (!json_is_true(json_object_get(jc, "golden")))
        fputs("<p>no golden compared</p>\n", f);
    fputs("</div>\n", f);
}

static void verdict_box(FILE *f, bool good, const char *text)
{
    fprintf(f, "<p><span class=\"verdict %s\" id=\"verdict\">", good ? "v-ok" : "v-bad");
    fh_escape_markup(f, text, FH_MARKUP_HTML);
    fputs("</span></p>\n", f);
}

/* The file at path as a tree (metadata only: no data), read as diff reads
 * it: safe to read, not necessarily a valid run (the run a report is about
 * may break the contract). NULL with a message when it cannot be read. */
static fh_h5_node *read_tree(const char *path, bool metadata_only, double attr_text_max)
{
    fh_h5_reader *r = NULL;
    fh_h5_node *n = NULL;
    fh_h5_read_opts o = {.allow_corrupt = true, .metadata_only = metadata_only,
                            .attr_text_max = attr_text_max};
    if (path && fh_h5_reader_open(path, &r) == FATTN_OK)
        if (fh_h5_reader_read(r, "/", &o, &n) != FATTN_OK)
            n = NULL;
    fh_h5_reader_close(r);
    return n;
}

/* The isolated child's read of the goldens file: its estimate against the
 * bound (ctx, a double), then its metadata. */
static fattn_status probe_metadata(const char *path, void *ctx)
{
    fh_h5_estimate e;
    fattn_status st = fh_runfile_check_size(path, *(const double *)ctx, false, &e);
    if (st != FATTN_OK)
        return st;
    fh_h5_node *n = read_tree(path, true, fh_h5_estimate_attr_text(&e));
    fh_h5_node_free(n);
    return n ? FATTN_OK : fattn_error(FATTN_E_INVALID_FILE, "%s: %s", path, fattn_last_error());
}

/* The goldens file a verify JSON names, its metadata read first in the
 * isolated child (isolate.h: a file libhdf5 crashes on is a message, not
 * the report's death) and then here from the same pinned file; shown only
 * when it is a run file (schema fattn-run/1), since the JSON may name any
 * file. NULL with why in *why (static text or fattn_last_error()). */
static fh_h5_node *read_goldens(const char *path, double max_mem, const char **why)
{
    *why = "the verify report names no goldens file";
    if (!path)
        return NULL;
    fh_h5_estimate e;
    if (fh_isolate_run(path, probe_metadata, &max_mem, 0, 0) != FATTN_OK ||
        fh_runfile_check_size(path, max_mem, false, &e) != FATTN_OK) {
        *why = fattn_last_error();
        return NULL;
    }
    fh_h5_node *g = read_tree(path, true, fh_h5_estimate_attr_text(&e));
    const fh_h5_attr *schema = g ? fh_h5_node_attr(g, "schema") : NULL;
    if (!g)
        *why = fattn_last_error();
    else if (!schema || schema->kind != FH_H5_ATTR_STRING ||
             strcmp(schema->s, FH_RUN_SCHEMA) != 0) {
        *why = "not a fattn run file (no schema " FH_RUN_SCHEMA ")";
        fh_h5_node_free(g);
        g = NULL;
    }
    return g;
}

static void goldens_provenance(FILE *f, const char *path, double max_mem)
{
    const char *why;
    fh_h5_node *g = read_goldens(path, max_mem, &why);
    if (g) {
        fh_report_provenance(f, "the goldens file's root attributes", g, NULL, NULL);
    } else {
        fputs("<p class=\"empty\">the goldens file cannot be read here, its provenance is not "
              "shown: ", f);
        fh_escape_markup(f, why, FH_MARKUP_HTML);
        fputs("</p>\n", f);
    }
    fh_h5_node_free(g);
}

/* The verify page; an exit code. */
static int verify_page(FILE *f, const char *path, const json_t *root, const cli_matrix *m,
                       double max_mem)
{
    const json_t *cases = json_object_get(root, "cases"), *sum = json_object_get(root, "summary");
    size_t n = json_array_size(cases);
    fh_report_cell *cells = calloc(n ? n : 1, sizeof *cells);
    if (!cells)
        return cli_fail("report", "out of memory");
    fh_report_begin(f, "fattn verify report");
    fputs("<h1>fattn verify: ", f);
    fh_escape_markup(f, path, FH_MARKUP_HTML);
    fputs("</h1>\n", f);
    const char *verdict = jstr(root, "verdict");
    verdict_box(f, verdict && !strcmp(verdict, "behavior-neutral"), verdict ? verdict : "?");
    fprintf(f, "<p>%lld cases, %lld tensors, %lld different, %lld errors, %lld skipped, "
            "%lld without golden; exit %lld</p>\n",
            (long long)json_integer_value(json_object_get(sum, "cases")),
            (long long)json_integer_value(json_object_get(sum, "tensors")),
            (long long)json_integer_value(json_object_get(sum, "different_cases")),
            (long long)json_integer_value(json_object_get(sum, "errors")),
            (long long)json_integer_value(json_object_get(sum, "skipped")),
            (long long)json_integer_value(json_object_get(sum, "without_golden")),
            (long long)json_integer_value(json_object_get(root, "exit")));
    const json_t *contrast = json_object_get(root, "contrast");
    if (json_is_object(contrast)) { /* what the failing cases share (docs/verify.md) */
        fputs("<p class=\"contrast\" id=\"contrast\">", f);
        fh_escape_markup(f, jstr(contrast, "text"), FH_MARKUP_HTML);
        fputs("</p>\n", f);
    }
    size_t i;
    const json_t *jc;
    json_array_foreach(cases, i, jc) {
        cells[i].id = jstr(jc, "id");
        cells[i].result = jstr(jc, "result");
        cell_from_spec(&cells[i], matrix_find(m, cells[i].id));
    }
    fputs("<h2>Cases</h2>\n", f);
    fh_report_grid(f, cells, n);
    fputs("<h2>Provenance</h2>\n<table><tr><th>run</th><td class=\"mono\">engine ", f);
    fh_escape_markup(f, jstr(root, "engine"), FH_MARKUP_HTML);
    fputs(", platform key ", f);
    fh_escape_markup(f, jstr(root, "platform_key"), FH_MARKUP_HTML);
    fputs(", TE rules ", f);
    fh_escape_markup(f, jstr(root, "te_rules") ? jstr(root, "te_rules") : "?",
                        FH_MARKUP_HTML);
    fprintf(f, ", deterministic backward forced: %s, fattn ",
            json_is_true(json_object_get(root, "forced_deterministic_bwd")) ? "yes" : "no");
    fh_escape_markup(f, jstr(root, "fattn_version") ? jstr(root, "fattn_version") : "?",
                        FH_MARKUP_HTML);
    fputs(" at git_rev ", f);
    fh_escape_markup(f, jstr(root, "git_rev") ? jstr(root, "git_rev") : "? (not recorded)",
                        FH_MARKUP_HTML);
    fputs("</td></tr>\n", f);
    fputs("<tr><th>goldens</th><td class=\"mono\">", f);
    fh_escape_markup(f, jstr(root, "goldens"), FH_MARKUP_HTML);
    fputs("</td></tr></table>\n", f);
    goldens_provenance(f, jstr(root, "goldens"), max_mem);
    fputs("<h2>Details</h2>\n", f);
    json_array_foreach(cases, i, jc) verify_case_details(f, jc, &cells[i]);
    fh_report_end(f);
    free(cells);
    return FH_EXIT_OK;
}

/* ---- two run files ---------------------------------------------------------- */

/* The page's bound (docs/report.md): differing tensors drawn and
 * differences listed, over the whole page; past them one line says how many
 * more there are and which command lists them. */
#define REPORT_MAX_DRAWN 8
#define REPORT_MAX_LISTED 500

/* The case a diff entry belongs to: the id's length after "/cases/" (up to
 * '/' or '@' or the end), 0 when it is no case's. */
static size_t case_of_path(const char *p)
{
    if (strncmp(p, "/cases/", 7) != 0)
        return 0;
    return strcspn(p + 7, "/@");
}

/* The cases of either file, with their features from the recorded spec,
 * parsed and checked as inspect checks it (runfile.h): the page shows the
 * spec's own names, never the attribute's text. Cells sorted by id, one per
 * case of either file; each case's counted entries chained (first, next). */
typedef struct run_cases {
    fh_report_cell *cells;
    fh_spec *specs; /* owned, parsed `spec` attributes */
    size_t n, n_specs;
    size_t *first, *next; /* entry chains per cell, SIZE_MAX ends */
} run_cases;

/* An exit code: 2 when a case's spec is not valid. */
static int add_cases(run_cases *rc, const char *path, const fh_h5_node *root)
{
    const fh_h5_node *cs = fh_h5_node_find(root, "cases");
    for (size_t i = 0; cs && i < cs->n_children; i++) {
        const fh_h5_node *c = cs->children[i];
        if (fh_runfile_case_spec(path, c, &rc->specs[rc->n_specs]) != FATTN_OK)
            return cli_fail("report", "%s", fattn_last_error());
        fh_report_cell *cell = &rc->cells[rc->n++];
        cell_from_spec(cell, &rc->specs[rc->n_specs++]);
        cell->id = c->name;
        cell->result = "ok";
    }
    return FH_EXIT_OK;
}

static int cmp_cell_id(const void *x, const void *y)
{
    return strcmp(((const fh_report_cell *)x)->id, ((const fh_report_cell *)y)->id);
}

/* Sort by id, keep one cell per case, chain each case's counted entries
 * and mark its result: one sort and one pass over the entries. */
static bool index_cases(run_cases *rc, const fh_diff_report *r)
{
    qsort(rc->cells, rc->n, sizeof *rc->cells, cmp_cell_id);
    size_t n = 0;
    for (size_t i = 0; i < rc->n; i++)
        if (!n || strcmp(rc->cells[n - 1].id, rc->cells[i].id) != 0)
            rc->cells[n++] = rc->cells[i];
    rc->n = n;
    rc->first = malloc((n ? n : 1) * sizeof *rc->first);
    rc->next = malloc((r->n_e ? r->n_e : 1) * sizeof *rc->next);
    if (!rc->first || !rc->next)
        return false;
    for (size_t i = 0; i < n; i++)
        rc->first[i] = SIZE_MAX;
    for (size_t k = r->n_e; k-- > 0;) { /* backwards: chains in walk order */
        rc->next[k] = SIZE_MAX;
        const char *p = r->e[k].path;
        size_t len = case_of_path(p);
        if (!len || len > FH_SPEC_ID_MAX || !fh_diff_entry_counted(&r->e[k]))
            continue;
        char id[FH_SPEC_ID_MAX + 1];
        memcpy(id, p + 7, len);
        id[len] = '\0';
        fh_report_cell key = {.id = id};
        fh_report_cell *c = bsearch(&key, rc->cells, n, sizeof key, cmp_cell_id);
        if (!c)
            continue;
        size_t i = (size_t)(c - rc->cells);
        rc->next[k] = rc->first[i];
        rc->first[i] = k;
        c->result = "different";
    }
    return true;
}

/* What has gone onto the page so far, against its bound; the readers the
 * drawn tensors' data come from (one pair at a time). */
typedef struct page_budget {
    size_t drawn, listed, not_drawn, not_listed;
    fh_h5_reader *ra, *rb;
} page_budget;

/* A differing tensor with its data: read from both files now, drawn, freed,
 * so the page holds one pair at a time. */
static void draw_tensor(FILE *f, const fh_diff_entry *e, page_budget *pb)
{
    fh_h5_read_opts o = {.allow_corrupt = true};
    fh_h5_node *na = NULL, *nb = NULL;
    if (fh_h5_reader_read(pb->ra, e->path, &o, &na) != FATTN_OK ||
        fh_h5_reader_read(pb->rb, e->path, &o, &nb) != FATTN_OK) {
        fh_h5_node_free(na);
        na = NULL;
    }
    fh_report_tensor(f, e, na, nb);
    fh_h5_node_free(na);
    fh_h5_node_free(nb);
}

static void run_case_details(FILE *f, const fh_report_cell *c, size_t first,
                             const run_cases *rc, const fh_diff_report *r, page_budget *pb)
{
    section_start(f, c->id, c->result);
    features_line(f, c);
    if (!strcmp(c->result, "ok")) {
        fputs("<p>bitwise identical</p></div>\n", f);
        return;
    }
    fputs("<ul>\n", f);
    for (size_t k = first; k != SIZE_MAX; k = rc->next[k]) {
        const fh_diff_entry *e = &r->e[k];
        if (pb->listed >= REPORT_MAX_LISTED) {
            pb->not_listed++;
            continue;
        }
        pb->listed++;
        fputs("<li><code>", f);
        fh_escape_markup(f, e->path, FH_MARKUP_HTML);
        fputs("</code> (", f);
        fh_escape_markup(f, e->kind, FH_MARKUP_HTML);
        fprintf(f, "): %s", fh_diff_status_name(e->status));
        if (e->msg) {
            fputs(": ", f);
            fh_escape_markup(f, e->msg, FH_MARKUP_HTML);
        }
        fputs("</li>\n", f);
    }
    fputs("</ul>\n", f);
    for (size_t k = first; k != SIZE_MAX; k = rc->next[k]) {
        const fh_diff_entry *e = &r->e[k];
        if (e->status != FH_DIFF_DIFFERENT || !e->has_data)
            continue;
        if (pb->drawn < REPORT_MAX_DRAWN) {
            pb->drawn++;
            draw_tensor(f, e, pb);
        } else {
            pb->not_drawn++;
        }
    }
    fputs("</div>\n", f);
}

/* The line that stands for what the bound left out. */
static void bound_note(FILE *f, const char *a, const char *b, const page_budget *pb)
{
    if (!pb->not_drawn && !pb->not_listed)
        return;
    fprintf(f, "<p class=\"empty\" id=\"bounded\">This page is bounded: %zu more differing "
            "tensor%s not drawn (%d drawn at most), %zu more difference%s not listed (%d at "
            "most). <code>fattn diff ", pb->not_drawn, cli_s(pb->not_drawn), REPORT_MAX_DRAWN,
            pb->not_listed, cli_s(pb->not_listed), REPORT_MAX_LISTED);
    fh_escape_markup(f, a, FH_MARKUP_HTML);
    fputc(' ', f);
    fh_escape_markup(f, b, FH_MARKUP_HTML);
    fputs("</code> lists them all.</p>\n", f);
}

static void write_runs_page(FILE *f, const char *a, const char *b, const fh_diff_report *r,
                            const run_cases *rc, const fh_h5_node *ta,
                            const fh_h5_node *tb, page_budget *pb)
{
    fh_report_begin(f, "fattn report: run files");
    fputs("<h1>fattn diff: <code>", f);
    fh_escape_markup(f, a, FH_MARKUP_HTML);
    fputs("</code> against <code>", f);
    fh_escape_markup(f, b, FH_MARKUP_HTML);
    fputs("</code></h1>\n", f);
    char verdict[96];
    snprintf(verdict, sizeof verdict, r->counted ? "DIFFERENT: %zu difference%s" : "identical",
             r->counted, cli_s(r->counted));
    verdict_box(f, r->counted == 0, verdict);
    fprintf(f, "<p>%zu tensor%s compared bitwise, B the reference (as <code>fattn diff</code>"
            ")</p>\n<h2>Cases</h2>\n", r->n_data, cli_s(r->n_data));
    fh_report_grid(f, rc->cells, rc->n);
    fputs("<h2>Provenance</h2>\n", f);
    fh_report_provenance(f, "A", ta, "B", tb);
    fputs("<h2>Details</h2>\n", f);
    for (size_t i = 0; i < rc->n; i++)
        run_case_details(f, &rc->cells[i], rc->first[i], rc, r, pb);
    bound_note(f, a, b, pb);
    fh_report_end(f);
}

static int runs_page(FILE *f, const char *a, const char *b, const fh_diff_report *r,
                     const fh_h5_node *ta, const fh_h5_node *tb, page_budget *pb)
{
    const fh_h5_node *ca = fh_h5_node_find(ta, "cases"),
                        *cb = fh_h5_node_find(tb, "cases");
    size_t cap = (ca ? ca->n_children : 0) + (cb ? cb->n_children : 0) + 1;
    run_cases rc = {calloc(cap, sizeof *rc.cells), calloc(cap, sizeof *rc.specs), 0, 0, NULL,
                    NULL};
    int code = FH_EXIT_OK;
    if (!rc.cells || !rc.specs)
        code = cli_fail("report", "out of memory");
    else if ((code = add_cases(&rc, a, ta)) == FH_EXIT_OK &&
             (code = add_cases(&rc, b, tb)) == FH_EXIT_OK && !index_cases(&rc, r))
        code = cli_fail("report", "out of memory");
    if (code == FH_EXIT_OK)
        write_runs_page(f, a, b, r, &rc, ta, tb, pb);
    for (size_t i = 0; i < rc.n_specs; i++)
        fh_spec_free(&rc.specs[i]);
    free(rc.cells);
    free(rc.specs);
    free(rc.first);
    free(rc.next);
    return code;
}

/* What the page of two run files takes beyond the comparison: both trees
 * read again without their data, one differing pair whole (the largest of
 * each file, at most), and the page itself: every attribute value of both
 * files escaped (an entity or a visible \\u code is at most six bytes a
 * byte), a line per object and attribute, the drawn tensors' maps. */
enum { REPORT_LINE_COST = 512, REPORT_DRAWING_COST = 1 << 20, REPORT_ESCAPE_GROWTH = 6 };

static double runs_page_memory(const fh_h5_estimate *a, const fh_h5_estimate *b)
{
    double text = REPORT_ESCAPE_GROWTH *
                      (fh_h5_estimate_attr_text(a) + fh_h5_estimate_attr_text(b)) +
                  REPORT_LINE_COST * (a->objects + a->attrs + b->objects + b->attrs) +
                  (double)REPORT_MAX_DRAWN * REPORT_DRAWING_COST;
    return fh_diff_memory(a, b, 0) + fh_h5_estimate_tree(a, false) +
           fh_h5_estimate_tree(b, false) + a->largest + b->largest + text;
}

/* Both run files compared (diff streams them, each checked in the isolated
 * child first, within --max-memory), the page's estimate checked, their
 * metadata read, then the page, drawn tensors' data read one pair at a
 * time; an exit code. */
static int runs_report(FILE *f, const char *a, const char *b, double max_mem)
{
    fh_diff_opts o = {.mode = FH_ELEM_BITWISE, .max_memory = max_mem};
    fh_diff_report r;
    if (fh_diff_files(a, b, &o, &r) != FATTN_OK) {
        int rc = cli_fail("report", "%s", fattn_last_error());
        fh_diff_report_free(&r);
        return rc;
    }
    fh_h5_estimate ea, eb;
    fh_h5_node *ta = NULL, *tb = NULL;
    page_budget pb = {0};
    int rc = FH_EXIT_OK;
    double need = 0;
    if (fh_h5_estimate_file(a, &ea) != FATTN_OK || fh_h5_estimate_file(b, &eb) != FATTN_OK)
        rc = cli_fail("report", "%s", fattn_last_error());
    else if ((need = runs_page_memory(&ea, &eb)) > max_mem)
        rc = cli_fail("report", "%s and %s: the page holds an estimated %.0f bytes (the "
                      "comparison, both trees without data, attribute text up to %.0f and "
                      "%.0f escaped into the page, the largest pair of tensors drawn), over "
                      "--max-memory %.0f: refused before the page is made", a, b, need,
                      fh_h5_estimate_attr_text(&ea), fh_h5_estimate_attr_text(&eb),
                      max_mem);
    else if (!(ta = read_tree(a, true, fh_h5_estimate_attr_text(&ea))) ||
             fh_h5_reader_open(a, &pb.ra) != FATTN_OK)
        rc = cli_fail_at("report", a);
    else if (!(tb = read_tree(b, true, fh_h5_estimate_attr_text(&eb))) ||
             fh_h5_reader_open(b, &pb.rb) != FATTN_OK)
        rc = cli_fail_at("report", b);
    else
        rc = runs_page(f, a, b, &r, ta, tb, &pb);
    fh_h5_reader_close(pb.ra);
    fh_h5_reader_close(pb.rb);
    fh_h5_node_free(ta);
    fh_h5_node_free(tb);
    fh_diff_report_free(&r);
    return rc;
}

/* What the page takes from a verify JSON, checked before any of it is
 * used: a case is an object with a string id and one of the four results
 * (both go into markup, the result as a class name). Every other string is
 * escaped where it is written. An exit code. */
static int verify_json_check(const char *path, const json_t *root)
{
    static const char *const results[] = {"ok", "different", "error", "skipped"};
    size_t i;
    const json_t *jc;
    json_array_foreach(json_object_get(root, "cases"), i, jc) {
        const char *id = jstr(jc, "id"), *r = jstr(jc, "result");
        bool known = false;
        for (size_t k = 0; r && k < sizeof results / sizeof results[0]; k++)
            known = known || !strcmp(r, results[k]);
        if (!id || !known)
            return cli_fail("report", "%s: cases[%zu]: %s (not a fattn verify JSON report)",
                            path, i, !id ? "no string id"
                                         : "result is not one of ok, different, error, skipped");
    }
    return FH_EXIT_OK;
}

/* What a verify JSON of `bytes` becomes in memory: jansson's values (a
 * number or string of a few bytes is an object of dozens) and the page
 * made from them, escaped; generously. */
enum { REPORT_JSON_GROWTH = 48 };

static int verify_report(FILE *f, const char *path, const char *cases, const char *out,
                         double max_mem)
{
    /* pinned first: a FIFO or device is refused, not waited on */
    if (fh_fileguard_pin(path) != FATTN_OK)
        return cli_fail("report", "%s", fattn_last_error());
    char fdpath[64];
    struct stat sb;
    if (stat(fh_fileguard_read_path(path, fdpath, sizeof fdpath), &sb) != 0)
        return cli_fail("report", "%s: %s", path, strerror(errno));
    double need = REPORT_JSON_GROWTH * (double)sb.st_size +
                  (double)fh_fileguard_pinned_memory();
    if (need > max_mem)
        return cli_fail("report", "%s: its page holds an estimated %.0f bytes (the JSON's %lld "
                        "bytes parsed and escaped into the page), over --max-memory %.0f: "
                        "refused before it is read", path, need, (long long)sb.st_size,
                        max_mem);
    json_error_t err;
    json_t *root = json_load_file(fh_fileguard_read_path(path, fdpath, sizeof fdpath), 0, &err);
    /* jansson gives every syntax error and unreadable file a message; an
     * empty one is a failed allocation */
    if (!root && !err.text[0])
        return cli_fail("report", "%s: out of memory reading JSON", path);
    if (!root && err.line < 1) /* jansson could not read it at all */
        return cli_fail("report", "%s: %s", path, err.text);
    if (!root)
        return cli_fail("report", "%s: not a JSON file: line %d: %s", path, err.line, err.text);
    const char *schema = jstr(root, "schema");
    int rc = FH_EXIT_OK;
    if (!schema || strcmp(schema, "fattn-verify/1") || !json_is_array(json_object_get(root, "cases")))
        rc = cli_fail("report", "%s: not a fattn verify JSON report (schema fattn-verify/1); "
                      "two run files make a diff report", path);
    else
        rc = verify_json_check(path, root);
    const char *goldens = jstr(root, "goldens");
    if (rc == FH_EXIT_OK && !cli_is_stdout(out) &&
        fh_fileguard_check_distinct(out, &goldens, 1) != FATTN_OK)
        rc = cli_fail("report", "-o %s (the goldens file the verify report names)",
                      fattn_last_error());
    cli_matrix m;
    if (rc == FH_EXIT_OK && cli_matrix_load("report", cases, NULL, NULL, &m) != FH_EXIT_OK)
        rc = FH_EXIT_ERROR;
    else if (rc == FH_EXIT_OK) {
        rc = verify_page(f, path, root, &m, max_mem);
        cli_matrix_free(&m);
    }
    json_decref(root);
    return rc;
}

int fh_cmd_report(int argc, char **argv)
{
    const char *in[2] = {NULL, NULL}, *out = NULL, *cases = NULL, *maxmem_s = NULL;
    size_t n_in = 0;
    cli_args a = {argc, argv, 1, "report"};
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(report_help, stdout);
            return FH_EXIT_OK;
        } else if ((r = cli_opt(&a, "-o", &out)) || (r = cli_opt(&a, "--cases", &cases)) ||
                   (r = cli_opt(&a, "--max-memory", &maxmem_s))) {
            if (r < 0)
                return cli_fail("report", "%s needs a value", argv[a.i]);
        } else if (argv[a.i][0] == '-' && argv[a.i][1]) {
            return cli_fail("report", "unknown argument '%s' (see fattn report --help)",
                            argv[a.i]);
        } else if (n_in < 2) {
            in[n_in++] = argv[a.i];
        } else {
            return cli_fail("report", "too many inputs: one verify JSON report or two run files");
        }
    }
    if (!n_in)
        return cli_fail("report", "no input: VERIFY.json, or RUN_A.h5 RUN_B.h5 (see fattn "
                        "report --help)");
    if (!out)
        return cli_fail("report", "-o REPORT.html is required");
    double max_mem;
    if (cli_max_memory_or_default("report", maxmem_s, &max_mem) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    if (n_in == 2 && cases)
        return cli_fail("report", "--cases is for a verify report: run files record their specs");
    const char *named[3] = {in[0], in[1], cases};
    if (!cli_is_stdout(out) && (fh_fileguard_check_distinct(out, named, 3) != FATTN_OK ||
                                fh_fileguard_check_output(out) != FATTN_OK))
        return cli_fail("report", "-o %s", fattn_last_error());
    page p = {0};
    if (!(p.f = open_memstream(&p.text, &p.len)))
        return cli_fail("report", "out of memory");
    int rc = n_in == 1 ? verify_report(p.f, in[0], cases, out, max_mem)
                       : runs_report(p.f, in[0], in[1], max_mem);
    bool bad = ferror(p.f) != 0;
    if (fclose(p.f) != 0 || bad || !p.text) {
        free(p.text);
        return cli_fail("report", "%s: cannot build the page: out of memory", out);
    }
    if (rc == FH_EXIT_OK)
        rc = cli_write_report("report", "HTML report", out, p.text);
    if (rc == FH_EXIT_OK && !cli_is_stdout(out))
        printf("report: wrote %s\n", cli_vis(out));
    free(p.text);
    return rc;
}
