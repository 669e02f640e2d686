/* The HTML pieces of `fattn report` (report.h, docs/report.md): they write
 * the page, so they live among the commands. */
#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "elemcmp.h"
#include "escape.h"
#include "report.h"

void fh_report_begin(FILE *f, const char *title)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", f);
    fh_escape_markup(f, title, FH_MARKUP_HTML);
    fputs("</title>\n<style>\n"
          "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\n"
          "h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}h3{font-size:1em}\n"
          "table{border-collapse:collapse;margin:.5em 0}\n"
          "td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top;text-align:left}\n"
          "code,.mono{font-family:ui-monospace,monospace;font-size:12px}\n"
          ".verdict{font-size:1.3em;font-weight:bold;padding:.4em .8em;display:inline-block}\n"
          ".v-ok{background:#cfc}.v-bad{background:#fcc}\n"
          ".chip{display:inline-block;width:2.6em;height:1.6em;margin:1px;font-size:10px;"
          "line-height:1.6em;text-align:center;color:#000;text-decoration:none;"
          "border:1px solid #888}\n"
          ".r-ok{background:#8d8}.r-different{background:#e55}.r-error{background:#e9e}"
          ".r-skipped{background:#ccc}\n"
          ".empty{color:#999;font-style:italic}.differs{background:#fee}\n"
          ".badge{padding:1px 6px;border:1px solid #888;font-size:12px}\n"
          ".panel{display:inline-block;margin:0 8px 8px 0;vertical-align:top}\n"
          "</style>\n</head>\n<body>\n",
          f);
}

void fh_report_end(FILE *f) { fputs("</body>\n</html>\n", f); }

void fh_report_anchor(FILE *f, const char *id)
{
    fputs("case-", f);
    for (; id && *id; id++) {
        char ch = *id;
        bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
        fputc(keep ? ch : '_', f);
    }
}

/* ---- the case grid ---------------------------------------------------------- */

static const char *or_unknown(const char *s) { return s ? s : "?"; }

/* The grid's columns: the spec's dtypes, then FP8 (a case with an fp8
 * recipe, whatever its nominal dtype). */
static const char *const grid_cols[] = {"float16", "bfloat16", "float32", "FP8"};
#define GRID_NCOLS (sizeof grid_cols / sizeof grid_cols[0])
#define GRID_FP8 (GRID_NCOLS - 1)

static int col_of(const fh_report_cell *c)
{
    if (c->fp8)
        return (int)GRID_FP8;
    for (size_t k = 0; c->dtype && k < GRID_FP8; k++)
        if (!strcmp(c->dtype, grid_cols[k]))
            return (int)k;
    return -1;
}

/* Grid order: row (layout, mask), then column, then the input's order. */
typedef struct grid_item {
    const fh_report_cell *c;
    int col;
    size_t i;
} grid_item;

static int cmp_row(const fh_report_cell *x, const fh_report_cell *y)
{
    int c = strcmp(or_unknown(x->layout), or_unknown(y->layout));
    return c ? c : strcmp(or_unknown(x->mask), or_unknown(y->mask));
}

static int cmp_item(const void *px, const void *py)
{
    const grid_item *x = px, *y = py;
    int c = cmp_row(x->c, y->c);
    if (c)
        return c;
    if (x->col != y->col)
        return x->col < y->col ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The first n bytes of s, escaped. */
static void text_prefix(FILE *f, const char *s, size_t n)
{
    char buf[8];
    assert(n < sizeof buf);
    snprintf(buf, sizeof buf, "%.*s", (int)n, s);
    fh_escape_markup(f, buf, FH_MARKUP_HTML);
}

/* The short label of a case's square: its bias and softmax, the defaults
 * left out. */
static void chip_label(FILE *f, const fh_report_cell *c)
{
    bool bias = c->bias && strcmp(c->bias, "no_bias");
    bool sm = c->softmax && strcmp(c->softmax, "vanilla");
    if (bias)
        text_prefix(f, c->bias, 4);
    if (bias && sm)
        fputc('/', f);
    if (sm)
        text_prefix(f, c->softmax, 3);
    if (!bias && !sm)
        fputs("&middot;", f);
}

static void grid_chip(FILE *f, const fh_report_cell *c)
{
    fputs("<a class=\"chip r-", f);
    fh_escape_markup(f, c->result, FH_MARKUP_HTML);
    fputs("\" href=\"#", f);
    fh_report_anchor(f, c->id);
    fputs("\" title=\"", f);
    fh_escape_markup(f, c->id, FH_MARKUP_HTML);
    fputs(": ", f);
    fh_escape_markup(f, c->result, FH_MARKUP_HTML);
    fputs(" (bias ", f);
    fh_escape_markup(f, or_unknown(c->bias), FH_MARKUP_HTML);
    fputs(", softmax ", f);
    fh_escape_markup(f, or_unknown(c->softmax), FH_MARKUP_HTML);
    if (c->fp8) {
        fputs(", FP8 ", f);
        fh_escape_markup(f, c->fp8, FH_MARKUP_HTML);
    }
    fputs(")\">", f);
    chip_label(f, c);
    fputs("</a>", f);
}

/* The legend, FP8's line from what the grid holds. */
static void grid_legend(FILE *f, size_t n_fp8, size_t unplaced)
{
    fputs("<p>Each square is a case (its label: bias/softmax when not the default), "
          "<span class=\"chip r-ok\">ok</span> <span class=\"chip r-different\">diff</span> "
          "<span class=\"chip r-error\">error</span> <span class=\"chip r-skipped\">skip</span>"
          "; ", f);
    if (n_fp8)
        fprintf(f, "FP8: %zu case%s (the column of every case with an fp8 recipe).", n_fp8,
                n_fp8 == 1 ? "" : "s");
    else
        fputs("FP8: no case here.", f);
    if (unplaced)
        fprintf(f, " %zu case%s of an unknown dtype are not in the grid.", unplaced,
                unplaced == 1 ? "" : "s");
    fputs("</p>\n", f);
}

void fh_report_grid(FILE *f, const fh_report_cell *cells, size_t n)
{
    /* sorted once: each row, and in it each column, is one run of items */
    grid_item *it = calloc(n ? n : 1, sizeof *it);
    if (!it) {
        fputs("<p>(grid: out of memory)</p>\n", f);
        return;
    }
    size_t unplaced = 0, n_fp8 = 0;
    for (size_t i = 0; i < n; i++) {
        it[i] = (grid_item){&cells[i], col_of(&cells[i]), i};
        unplaced += it[i].col < 0;
        n_fp8 += it[i].col == (int)GRID_FP8;
    }
    qsort(it, n, sizeof *it, cmp_item);
    fputs("<table class=\"grid\" id=\"grid\">\n<tr><th>layout</th><th>mask</th>", f);
    for (size_t k = 0; k < GRID_NCOLS; k++)
        fprintf(f, "<th>%s</th>", grid_cols[k]);
    fputs("</tr>\n", f);
    for (size_t i = 0; i < n;) {
        const fh_report_cell *row = it[i].c;
        fputs("<tr><td class=\"mono\">", f);
        fh_escape_markup(f, or_unknown(row->layout), FH_MARKUP_HTML);
        fputs("</td><td class=\"mono\">", f);
        fh_escape_markup(f, or_unknown(row->mask), FH_MARKUP_HTML);
        fputs("</td>", f);
        while (i < n && cmp_row(it[i].c, row) == 0 && it[i].col < 0)
            i++; /* an unknown dtype: counted, not drawn */
        for (int k = 0; k < (int)GRID_NCOLS; k++) {
            fputs("<td>", f);
            for (; i < n && cmp_row(it[i].c, row) == 0 && it[i].col == k; i++)
                grid_chip(f, it[i].c);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
    grid_legend(f, n_fp8, unplaced);
    free(it);
}

/* ---- a differing tensor ----------------------------------------------------- */

#define MAP_CELLS 64  /* the map's cells per side, at most */
#define MAP_PANELS 16 /* panels drawn, at most */
#define FIRST_SHOWN 12

/* The map's axes. Axes of extent 1 are left out; the columns are the last
 * axis left (head dim d in every TE layout, the key position of a bias or
 * its gradient [.., h, sq, skv]), the rows the longest of the others (the
 * query or key position: s, or t of thd), and each combination of the rest
 * (batch, head) is a panel of its own. Out and dQ thus show query position
 * x head dim per head and batch, dK and dV key position x head dim, a bias
 * query x key per head: mask and window mistakes show as their shape. */
typedef struct map_axes {
    int row, col;        /* axis numbers, -1: none */
    uint64_t rows, cols; /* their extents (1 when none) */
    uint64_t panels;
} map_axes;

static map_axes map_axes_of(int ndim, const int64_t *shape)
{
    map_axes m = {-1, -1, 1, 1, 1};
    for (int k = ndim - 1; k >= 0 && m.col < 0; k--)
        if (shape[k] > 1)
            m.col = k;
    for (int k = 0; k < ndim; k++)
        if (k != m.col && shape[k] > 1 && (m.row < 0 || shape[k] >= shape[m.row]))
            m.row = k;
    for (int k = 0; k < ndim; k++)
        if (k != m.col && k != m.row)
            m.panels *= (uint64_t)shape[k];
    if (m.col >= 0)
        m.cols = (uint64_t)shape[m.col];
    if (m.row >= 0)
        m.rows = (uint64_t)shape[m.row];
    return m;
}

/* Flat index i's position: its panel (the other axes in C order), row and
 * column. */
static void map_place(const map_axes *m, int ndim, const int64_t *shape, uint64_t i,
                      uint64_t *panel, uint64_t *row, uint64_t *col)
{
    uint64_t p = 0, mul = 1;
    *row = *col = 0;
    for (int k = ndim - 1; k >= 0; k--) {
        uint64_t ext = (uint64_t)shape[k], idx = i % ext;
        i /= ext;
        if (k == m->row)
            *row = idx;
        else if (k == m->col)
            *col = idx;
        else {
            p += idx * mul;
            mul *= ext;
        }
    }
    *panel = p;
}

/* How far apart two elements are, for the map's colour: the ULP distance
 * of floats (a class change or sign flip as the far end), 1 for integers. */
static uint64_t elem_distance(fattn_dtype t, uint64_t xa, uint64_t xb)
{
    if (!fattn_dtype_is_float(t))
        return 1;
    double a = fh_elem_decode(t, xa), b = fh_elem_decode(t, xb);
    if (isnan(a) || isnan(b) || isinf(a) || isinf(b) || signbit(a) != signbit(b))
        return UINT64_MAX;
    uint64_t u = fh_elem_ulp(t, xa, xb);
    return u ? u : 1;
}

typedef struct diff_map {
    map_axes ax;
    uint64_t rc, cc;      /* cells per side */
    uint64_t n_panels;    /* panels drawn */
    uint64_t *panel_id;   /* [n_panels]: which panel */
    uint64_t *panel_diff; /* [n_panels]: its differing elements */
    uint64_t *cell;       /* [n_panels][rc][cc]: the largest distance */
    uint64_t max_d;
    uint64_t panels_with_diff;
} diff_map;

/* Fill the map: the first MAP_PANELS panels with a difference. */
static bool diff_map_build(diff_map *d, const fh_h5_node *a, const fh_h5_node *b)
{
    memset(d, 0, sizeof *d);
    d->ax = map_axes_of(a->ndim, a->shape);
    d->rc = d->ax.rows < MAP_CELLS ? d->ax.rows : MAP_CELLS;
    d->cc = d->ax.cols < MAP_CELLS ? d->ax.cols : MAP_CELLS;
    d->panel_id = calloc(MAP_PANELS, sizeof *d->panel_id);
    d->panel_diff = calloc(MAP_PANELS, sizeof *d->panel_diff);
    d->cell = calloc(MAP_PANELS * d->rc * d->cc, sizeof *d->cell);
    if (!d->panel_id || !d->panel_diff || !d->cell)
        return false;
    size_t es = fattn_dtype_size(a->dtype);
    uint64_t numel = es ? a->nbytes / es : 0, last_panel = UINT64_MAX, slot = 0;
    const unsigned char *pa = a->data, *pb = b->data;
    for (uint64_t i = 0; i < numel; i++) {
        uint64_t xa = fh_elem_bits(pa + i * es, es), xb = fh_elem_bits(pb + i * es, es);
        if (xa == xb)
            continue;
        uint64_t panel, row, col;
        map_place(&d->ax, a->ndim, a->shape, i, &panel, &row, &col);
        if (panel != last_panel) {
            for (slot = 0; slot < d->n_panels && d->panel_id[slot] != panel; slot++)
                ;
            if (slot == d->n_panels) {
                d->panels_with_diff++;
                if (d->n_panels < MAP_PANELS)
                    d->panel_id[d->n_panels++] = panel;
                else
                    slot = MAP_PANELS;
            }
        }
        last_panel = panel;
        if (slot >= MAP_PANELS) {
            last_panel = UINT64_MAX;
            continue;
        }
        uint64_t dist = elem_distance(a->dtype, xa, xb);
        uint64_t *c = &d->cell[(slot * d->rc + row * d->rc / d->ax.rows) * d->cc +
                               col * d->cc / d->ax.cols];
        if (dist > *c)
            *c = dist;
        if (dist > d->max_d && dist != UINT64_MAX)
            d->max_d = dist;
        d->panel_diff[slot]++;
    }
    return true;
}

static void diff_map_free(diff_map *d)
{
    free(d->panel_id);
    free(d->panel_diff);
    free(d->cell);
}

/* Yellow (1 ULP) to dark red (the tensor's largest distance), log scale;
 * black for a sign flip or class change. */
static void cell_colour(FILE *f, uint64_t dist, uint64_t max_d)
{
    if (dist == UINT64_MAX) {
        fputs("#000", f);
        return;
    }
    double t = max_d > 1 ? log2((double)dist) / log2((double)max_d) : 0.0;
    fprintf(f, "hsl(%d,100%%,%d%%)", (int)lround(55 - 55 * t), (int)lround(60 - 25 * t));
}

static void map_panel(FILE *f, const diff_map *d, const fh_h5_node *a, uint64_t slot)
{
    int px = (int)(256 / (d->rc > d->cc ? d->rc : d->cc));
    px = px < 3 ? 3 : px > 24 ? 24 : px;
    int w = (int)d->cc * px, h = (int)d->rc * px;
    char where[160] = "";
    /* the panel's index over the other axes */
    uint64_t p = d->panel_id[slot];
    size_t used = 0;
    for (int k = a->ndim - 1; k >= 0; k--)
        if (k != d->ax.row && k != d->ax.col) {
            uint64_t ext = (uint64_t)a->shape[k];
            char tmp[160];
            snprintf(tmp, sizeof tmp, "axis %d = %" PRIu64 "%s%s", k, p % ext, used ? ", " : "",
                     where);
            snprintf(where, sizeof where, "%s", tmp);
            used = 1;
            p /= ext;
        }
    fprintf(f, "<div class=\"panel\"><div class=\"mono\">%s (%" PRIu64 " differing)</div>\n",
            used ? where : "whole tensor", d->panel_diff[slot]);
    fprintf(f, "<svg class=\"diffmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
            "height=\"%d\" viewBox=\"0 0 %d %d\"><rect width=\"%d\" height=\"%d\" "
            "fill=\"#eef\"/>", w, h, w, h, w, h);
    for (uint64_t r = 0; r < d->rc; r++)
        for (uint64_t c = 0; c < d->cc; c++) {
            uint64_t v = d->cell[(slot * d->rc + r) * d->cc + c];
            if (!v)
                continue;
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"",
                    (int)c * px, (int)r * px, px, px);
            cell_colour(f, v, d->max_d);
            fputs("\"/>", f);
        }
    fputs("</svg></div>\n", f);
}

static void tensor_map(FILE *f, const fh_h5_node *a, const fh_h5_node *b)
{
    diff_map d;
    if (!diff_map_build(&d, a, b)) {
        fputs("<p>(difference map: out of memory)</p>\n", f);
        diff_map_free(&d);
        return;
    }
    fputs("<p>Difference map: ", f);
    if (d.ax.row >= 0)
        fprintf(f, "rows axis %d (%" PRIu64 "), ", d.ax.row, d.ax.rows);
    if (d.ax.col >= 0)
        fprintf(f, "columns axis %d (%" PRIu64 ")", d.ax.col, d.ax.cols);
    fprintf(f, "%s; one panel per index of the other axes (%" PRIu64 " panel%s differ",
            d.ax.rows > MAP_CELLS || d.ax.cols > MAP_CELLS ? ", binned to 64 cells a side" : "",
            d.panels_with_diff, d.panels_with_diff == 1 ? "" : "s");
    if (d.panels_with_diff > d.n_panels)
        fprintf(f, ", the first %" PRIu64 " shown", d.n_panels);
    fprintf(f, "). Colour: the largest ULP distance in a cell, yellow 1 to red %" PRIu64
            " (log scale), black a sign flip or class change; pale blue: equal.</p>\n",
            d.max_d);
    for (uint64_t s = 0; s < d.n_panels; s++)
        map_panel(f, &d, a, s);
    diff_map_free(&d);
}

/* The diff's ULP histogram of the differing elements (elemcmp.h buckets). */
static void tensor_histogram(FILE *f, const fh_elem_stats *s)
{
    static const char *const names[] = {"0 (&plusmn;0)", "1", "2-4", "5-16", "17-256", "&gt;256",
                                        "sign flip", "class change"};
    uint64_t v[8] = {s->hist[0], s->hist[1], s->hist[2], s->hist[3], s->hist[4], s->hist[5],
                     s->sign_flips, s->class_changes};
    uint64_t mx = 1;
    for (int k = 0; k < 8; k++)
        mx = v[k] > mx ? v[k] : mx;
    const int bw = 76, hh = 120;
    fprintf(f, "<p>ULP distances of the differing elements:</p>\n<svg class=\"histogram\" "
            "xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\">", 8 * bw, hh + 34);
    for (int k = 0; k < 8; k++) {
        int bh = (int)((double)v[k] / (double)mx * hh);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#c44\"/>"
                "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%" PRIu64
                "</text><text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%s"
                "</text>", k * bw + 4, hh + 12 - bh, bw - 8, bh, k * bw + bw / 2, hh + 10 - bh,
                v[k], k * bw + bw / 2, hh + 26, names[k]);
    }
    fputs("</svg>\n", f);
}

static void index_text(FILE *f, int ndim, const int64_t *shape, uint64_t i)
{
    uint64_t idx[FATTN_MAX_DIMS];
    for (int k = ndim - 1; k >= 0; k--) {
        idx[k] = i % (uint64_t)shape[k];
        i /= (uint64_t)shape[k];
    }
    fputc('[', f);
    for (int k = 0; k < ndim; k++)
        fprintf(f, "%s%" PRIu64, k ? "," : "", idx[k]);
    fputc(']', f);
}

/* The first differing elements in C order, both values in decimal and hex. */
static void tensor_first(FILE *f, const fh_h5_node *a, const fh_h5_node *b)
{
    size_t es = fattn_dtype_size(a->dtype);
    uint64_t numel = es ? a->nbytes / es : 0;
    bool fl = fattn_dtype_is_float(a->dtype);
    fputs("<table class=\"first\"><tr><th>index</th><th>A</th><th>B</th><th>A bits</th>"
          "<th>B bits</th><th>ULP</th></tr>\n", f);
    int shown = 0;
    for (uint64_t i = 0; i < numel && shown < FIRST_SHOWN; i++) {
        const unsigned char *pa = (const unsigned char *)a->data + i * es,
                            *pb = (const unsigned char *)b->data + i * es;
        uint64_t xa = fh_elem_bits(pa, es), xb = fh_elem_bits(pb, es);
        if (xa == xb)
            continue;
        fputs("<tr><td class=\"mono\">", f);
        index_text(f, a->ndim, a->shape, i);
        fprintf(f, "</td><td class=\"mono\">%.9g</td><td class=\"mono\">%.9g</td>"
                   "<td class=\"mono\">0x%0*" PRIx64 "</td><td class=\"mono\">0x%0*" PRIx64
                   "</td><td class=\"mono\">",
                fh_elem_decode(a->dtype, xa), fh_elem_decode(a->dtype, xb), (int)es * 2,
                xa, (int)es * 2, xb);
        uint64_t d = fl ? elem_distance(a->dtype, xa, xb) : 0;
        if (!fl)
            fputs("-", f);
        else if (d == UINT64_MAX)
            fputs("sign/class", f);
        else
            fprintf(f, "%" PRIu64, fh_elem_ulp(a->dtype, xa, xb));
        fputs("</td></tr>\n", f);
        shown++;
    }
    fputs("</table>\n", f);
}

void fh_report_tensor(FILE *f, const fh_diff_entry *e, const fh_h5_node *a,
                         const fh_h5_node *b)
{
    fputs("<div class=\"tensor\"><h3 class=\"mono\">", f);
    fh_escape_markup(f, e->path, FH_MARKUP_HTML);
    fprintf(f, "</h3>\n<p>%s [", fattn_dtype_name(e->dtype));
    for (int k = 0; k < e->ndim; k++)
        fprintf(f, "%s%" PRId64, k ? "," : "", e->shape[k]);
    fprintf(f, "]: %" PRIu64 " of %" PRIu64 " elements differ in their bits", e->st.bit_count,
            e->st.numel);
    if (fattn_dtype_is_float(e->dtype))
        fprintf(f, "; max ULP %" PRIu64 ", max abs %.6g, max rel %.6g", e->st.max_ulp,
                e->st.max_abs, e->st.max_rel);
    fputs("</p>\n", f);
    bool data = a && b && a->is_dataset && b->is_dataset && a->data && b->data &&
                a->nbytes == b->nbytes && a->dtype == b->dtype && a->ndim == b->ndim;
    if (!data) {
        fputs("<p>(no element data on both sides: nothing to draw)</p></div>\n", f);
        return;
    }
    tensor_map(f, a, b);
    if (fattn_dtype_is_float(e->dtype))
        tensor_histogram(f, &e->st);
    fputs("<p>First differing elements (C order):</p>\n", f);
    tensor_first(f, a, b);
    fputs("</div>\n", f);
}

/* ---- provenance ------------------------------------------------------------- */

static void attr_value(FILE *f, const fh_h5_attr *x)
{
    char buf[64];
    if (!x) {
        fputs("<span class=\"empty\">absent</span>", f);
        return;
    }
    switch (x->kind) {
    case FH_H5_ATTR_STRING: fh_escape_markup(f, x->s, FH_MARKUP_HTML); return;
    case FH_H5_ATTR_INT64: snprintf(buf, sizeof buf, "%" PRId64, x->i64[0]); break;
    case FH_H5_ATTR_FLOAT32: snprintf(buf, sizeof buf, "%.9g", (double)x->f32); break;
    case FH_H5_ATTR_UINT8: snprintf(buf, sizeof buf, "%u", (unsigned)x->u8); break;
    case FH_H5_ATTR_INT64_PAIR:
        snprintf(buf, sizeof buf, "[%" PRId64 ", %" PRId64 "]", x->i64[0], x->i64[1]);
        break;
    }
    fputs(buf, f);
}

static bool attr_equal(const fh_h5_attr *x, const fh_h5_attr *y)
{
    if (!x || !y || x->kind != y->kind)
        return !x && !y;
    return x->kind == FH_H5_ATTR_STRING ? !strcmp(x->s, y->s)
                                           : x->i64[0] == y->i64[0] && x->i64[1] == y->i64[1] &&
                                                 x->u8 == y->u8 &&
                                                 !memcmp(&x->f32, &y->f32, sizeof x->f32);
}

static void prov_row(FILE *f, const char *name, const fh_h5_node *a, const fh_h5_node *b)
{
    const fh_h5_attr *x = a ? fh_h5_node_attr(a, name) : NULL;
    const fh_h5_attr *y = b ? fh_h5_node_attr(b, name) : NULL;
    bool differ = a && b && !attr_equal(x, y);
    fprintf(f, "<tr%s><td class=\"mono\">", differ ? " class=\"differs\"" : "");
    fh_escape_markup(f, name, FH_MARKUP_HTML);
    fputs("</td><td class=\"mono\">", f);
    attr_value(f, x);
    if (b) {
        fputs("</td><td class=\"mono\">", f);
        attr_value(f, y);
    }
    fputs("</td></tr>\n", f);
}

void fh_report_provenance(FILE *f, const char *label_a, const fh_h5_node *a,
                             const char *label_b, const fh_h5_node *b)
{
    fputs("<table class=\"provenance\"><tr><th>attribute</th><th>", f);
    fh_escape_markup(f, label_a, FH_MARKUP_HTML);
    if (b) {
        fputs("</th><th>", f);
        fh_escape_markup(f, label_b, FH_MARKUP_HTML);
    }
    fputs("</th></tr>\n", f);
    for (size_t i = 0; a && i < a->n_attrs; i++)
        prov_row(f, a->attrs[i].name, a, b);
    for (size_t i = 0; b && i < b->n_attrs; i++)
        if (!a || !fh_h5_node_attr(a, b->attrs[i].name))
            prov_row(f, b->attrs[i].name, a, b);
    fputs("</table>\n", f);
    assert(!a || !a->is_dataset);
}
