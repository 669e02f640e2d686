/* harness/cli/report.h — the pieces of `fattn report`'s HTML page
 * (docs/report.md): the case grid, a differing tensor's difference map, ULP
 * histogram and first differing elements, provenance tables. Everything is
 * written into one FILE as static HTML with inline SVG: the page loads
 * nothing and runs no script, so it can be mailed, archived as a CI
 * artefact or opened offline. Every string from a file is written through
 * fh_escape_markup (escape.h), and the features come from parsed specs
 * (the enums' own names), never from a file's text. The command
 * (cmd_report.c) decides what goes on the page; this module never reads
 * files and never prints elsewhere. */
#ifndef FH_HARNESS_REPORT_H
#define FH_HARNESS_REPORT_H

#include <stdio.h>

#include "diff.h"
#include "h5io.h"

/* The page's head (title, inline style) and its end. */
void fh_report_begin(FILE *f, const char *title);
void fh_report_end(FILE *f);

/* One case of the grid: its feature values (NULL: unknown), its FP8
 * recipe (NULL: not FP8) and its result, one of "ok", "different",
 * "error", "skipped". */
typedef struct fh_report_cell {
    const char *id;
    const char *layout, *mask, *bias, *softmax, *dtype, *fp8;
    const char *result;
} fh_report_cell;

/* The id of case `id`'s details section ("case-" and the id with every byte
 * outside [A-Za-z0-9_.-] as '_'), for links. */
void fh_report_anchor(FILE *f, const char *id);

/* The grid: one row per layout and mask, one column per dtype and one for
 * FP8 (every case with a recipe; the legend says how many); each case a
 * coloured square (its result) labelled with its bias and softmax, linking
 * to its details. O(n log n): one sort, one pass. */
void fh_report_grid(FILE *f, const fh_report_cell *cells, size_t n);

/* A differing dataset: the difference map over its two most telling axes
 * (see cmd_report_page.c, map_axes), the histogram of ULP distances of its
 * differing elements (the diff's statistics, e->st), and its first
 * differing elements with both values. a and b hold the data. */
void fh_report_tensor(FILE *f, const fh_diff_entry *e, const fh_h5_node *a,
                         const fh_h5_node *b);

/* A provenance table of the root attributes of both sides, the rows whose
 * values differ marked; b NULL: a's alone. */
void fh_report_provenance(FILE *f, const char *label_a, const fh_h5_node *a,
                             const char *label_b, const fh_h5_node *b);

#endif /* FH_HARNESS_REPORT_H */
