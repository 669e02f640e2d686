/* fattn diff: the command line over diff.h, and the report's two
 * renderings (text on stdout, JSON with --json; docs/diff.md). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "diff.h"
#include "escape.h"
#include "fileguard.h"

static const char diff_help[] =
    "usage: fattn diff A.h5 B.h5 [--mode bitwise|ulp|tol] [--max-ulp N] [--tol-profile F]\n"
    "                  [--tol GLOB=RTOL,ATOL]... [--only GLOB] [--trust-digests] [--audit]\n"
    "                  [--show-private] [--json F] [--max-memory BYTES]\n"
    "\n"
    "Compare two run files. B is the reference: A is compared against it.\n"
    "Printed first: the provenance delta (root attributes but schema, and prov_* attributes),\n"
    "never counted, with what it implies (bitwise equality is expected only on the same\n"
    "platform). Then structure (missing/extra datasets and attributes, dtype and shape),\n"
    "corrupt datasets (stored digest != data), and one summary per differing dataset:\n"
    "count, max ulp, max abs, max rel (over |b|), RMSE, NMSE, SNR, a ULP histogram and the\n"
    "worst 5 elements with index, values and bits. Front-end-private (_impl) groups are\n"
    "compared but never counted, and listed only with --show-private (the summary says how\n"
    "many private differences there are); /audit is compared only with --audit.\n"
    "\n"
    "  --mode bitwise   (default) every stored bit counts: NaN payloads, +0/-0\n"
    "  --mode ulp       a float element passes within --max-ulp N (default 0) on its format's\n"
    "                   lattice; NaN equals NaN (any payload), +0 equals -0, a class change\n"
    "                   (finite/inf/NaN, inf sign) fails\n"
    "  --mode tol       a float element passes if |a-b| <= atol + rtol*|b|; per-dtype profile\n"
    "                   (built in: " FH_TOL_BUILTIN_VERSION ";\n"
    "                   --tol-profile F replaces it); --tol GLOB=RTOL,ATOL overrides per path,\n"
    "                   repeatable, the last match wins\n"
    "  integers always compare exactly\n"
    "  --only GLOB      restrict to paths matching GLOB ('*' crosses '/')\n"
    "  --trust-digests  datasets whose stored digests agree are not read\n"
    "  --show-private   list the differences in _impl groups, one line per group\n"
    "  --json F         write the whole report as JSON (schema fattn-diff/1, docs/diff.md);\n"
    "                   F = - writes it to stdout, and the text report to stderr\n"
    "  --max-memory BYTES  refuse, before either file's attributes are read, a comparison\n"
    "                   whose estimate is larger: both trees without data (attribute text\n"
    "                   up to what each file holds beside its datasets), an entry per\n"
    "                   object and attribute, the chunk buffers, private copies of the\n"
    "                   inputs where $TMPDIR is in memory (default: half the RAM)\n"
    "\n"
    "Exit 0 identical in the mode, 1 any counted difference (a corrupt dataset included),\n"
    "2 usage error or a file that cannot be read safely.\n";


static const char *const mode_names[] = {"bitwise", "ulp", "tol"};

/* ---- text ------------------------------------------------------------------ */

/* A flat C-order index as the logical index of the entry's shape. */
static void unflatten(const fh_diff_entry *e, uint64_t idx, uint64_t m[FATTN_MAX_DIMS])
{
    for (int i = e->ndim - 1; i >= 0; i--) {
        uint64_t d = (uint64_t)e->shape[i];
        m[i] = d ? idx % d : 0;
        idx = d ? idx / d : 0;
    }
}

static void fmt_index(char *buf, size_t n, const fh_diff_entry *e, uint64_t idx)
{
    uint64_t m[FATTN_MAX_DIMS];
    unflatten(e, idx, m);
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < e->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRIu64, i ? "," : "", m[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

static int hex_width(fattn_dtype t) { return (int)(2 * fattn_dtype_size(t)); }

static void fmt_num(char *buf, size_t n, double v)
{
    if (isnan(v))
        snprintf(buf, n, "nan");
    else if (isinf(v))
        snprintf(buf, n, v > 0 ? "inf" : "-inf");
    else
        snprintf(buf, n, "%.3g", v);
}

static double nmse_of(const fh_elem_stats *s)
{
    return s->signal > 0 ? s->sse / s->signal : NAN;
}

/* The float statistics line and the ULP histogram of one dataset. */
static void print_float_stats(FILE *f, const fh_diff_opts *o, const fh_diff_entry *e)
{
    const fh_elem_stats *s = &e->st;
    char ma[32], mr[32], rm[32], nm[32], sn[32];
    double nmse = nmse_of(s);
    fmt_num(ma, sizeof ma, s->max_abs);
    fmt_num(mr, sizeof mr, s->max_rel);
    fmt_num(rm, sizeof rm, s->n_finite ? sqrt(s->sse / (double)s->n_finite) : 0.0);
    fmt_num(nm, sizeof nm, nmse);
    fmt_num(sn, sizeof sn, nmse > 0 ? -10.0 * log10(nmse) : nmse == 0 ? INFINITY : NAN);
    fprintf(f, "; max_ulp %" PRIu64 ", max_abs %s, max_rel %s, rmse %s, nmse %s%s, snr %s dB",
            s->max_ulp, ma, mr, rm, nm, s->signal_partial ? " (partial)" : "", sn);
    if (o->mode == FH_ELEM_TOL)
        fprintf(f, "; rtol %g, atol %g", e->tol.rtol, e->tol.atol);
    fprintf(f, "\n  ulp histogram: 0:%" PRIu64 " 1:%" PRIu64 " 2-4:%" PRIu64 " 5-16:%" PRIu64
               " 17-256:%" PRIu64 " >256:%" PRIu64 "; sign flips %" PRIu64
               ", class changes %" PRIu64 ", NaN payloads %" PRIu64 "\n",
            s->hist[0], s->hist[1], s->hist[2], s->hist[3], s->hist[4], s->hist[5],
            s->sign_flips, s->class_changes, s->nan_payloads);
}

static void print_dataset(FILE *f, const fh_diff_opts *o, const fh_diff_entry *e,
                          const char *label)
{
    const fh_elem_stats *s = &e->st;
    bool is_float = fattn_dtype_is_float(e->dtype);
    char shape[160];
    fh_diff_fmt_shape(shape, sizeof shape, e->ndim, e->shape);
    uint64_t shown = o->mode == FH_ELEM_BITWISE ? s->bit_count : s->fail_count;
    fprintf(f, "%s: %s  %s %s  %" PRIu64 " of %" PRIu64 " differ (%.3g%%)", label, cli_vis(e->path),
            fattn_dtype_name(e->dtype), shape, shown, s->numel,
            s->numel ? 100.0 * (double)shown / (double)s->numel : 0.0);
    if (o->mode != FH_ELEM_BITWISE)
        fprintf(f, ", %" PRIu64 " in bits", s->bit_count);
    if (is_float) {
        print_float_stats(f, o, e);
    } else {
        char ma[32];
        fmt_num(ma, sizeof ma, s->max_abs);
        fprintf(f, "; max_abs %s (integers compare exactly)\n", ma);
    }
    for (int k = 0; k < s->n_worst; k++) {
        const fh_elem_worst *w = &s->worst[k];
        char idx[160];
        fmt_index(idx, sizeof idx, e, w->index);
        int hw = hex_width(e->dtype);
        fprintf(f, "  %s  A=%.9g (0x%0*" PRIx64 ")  B=%.9g (0x%0*" PRIx64 ")", idx, w->a, hw,
                w->a_bits, w->b, hw, w->b_bits);
        if (w->has_ulp)
            fprintf(f, "  ulp %" PRIu64, w->ulp);
        else if (is_float)
            fprintf(f, "  %s", w->score == UINT64_MAX ? "class change" : "NaN payload");
        fputc('\n', f);
    }
}

static void print_provenance(FILE *f, const fh_diff_opts *o, const fh_diff_report *r)
{
    if (r->n_prov == 0) {
        fprintf(f, "provenance: identical\n");
        fprintf(f, "  => same platform: bitwise equality is expected\n");
        return;
    }
    fprintf(f, "provenance delta (never counted):\n");
    bool platform = false;
    size_t plen = 0;
    char pl[512] = "";
    for (size_t i = 0; i < r->n_prov; i++) {
        const fh_diff_prov *p = &r->prov[i];
        fprintf(f, "  %s: A=%s B=%s\n", cli_vis(p->path), p->a ? cli_vis(p->a) : "(absent)",
                p->b ? cli_vis(p->b) : "(absent)");
        if (p->platform) {
            platform = true;
            const char *at = strrchr(p->path, '@');
            if (plen < sizeof pl)
                plen += (size_t)snprintf(pl + plen, sizeof pl - plen, "%s%s", plen ? ", " : "",
                                         cli_vis(at ? at + 1 : p->path));
        }
    }
    if (platform)
        fprintf(f,
                "  => different platforms (%s): bitwise equality is not expected; "
                "compare with --mode ulp or --mode tol%s\n",
                pl, o->mode == FH_ELEM_BITWISE ? " (this run: bitwise)" : "");
    else
        fprintf(f, "  => same platform (engine, device, SM count, library versions and engine "
                   "tags agree): bitwise equality is expected\n");
}

static void print_mode(FILE *f, const fh_diff_opts *o)
{
    fprintf(f, "mode: %s", mode_names[o->mode]);
    if (o->mode == FH_ELEM_ULP)
        fprintf(f, " (an element passes within %" PRIu64 " ulp; NaN equals NaN, +0 equals -0, "
                   "class changes fail)",
                o->max_ulp);
    else if (o->mode == FH_ELEM_TOL)
        fprintf(f, " (|a-b| <= atol + rtol*|b|, B is the reference; profile %s; NaN equals NaN, "
                   "+0 equals -0, class changes fail)",
                o->tol->version);
    else
        fprintf(f, " (every stored bit counts: NaN payloads, +0/-0)");
    fprintf(f, "; integers compare exactly%s\n",
            o->trust_digests ? "; --trust-digests: equal stored digests skip the data" : "");
}

/* Private entries, one line per _impl group (they come in walk order). */
static void print_private(FILE *f, const fh_diff_report *r)
{
    for (size_t i = 0; i < r->n_e;) {
        const fh_diff_entry *e = &r->e[i];
        if (!e->is_private || e->status == FH_DIFF_EQUAL) {
            i++;
            continue;
        }
        const char *im = strstr(e->path, "/_impl");
        size_t plen = im ? (size_t)(im - e->path) + 6 : strlen(e->path);
        size_t k[FH_DIFF_PRIVATE + 1] = {0};
        size_t j = i;
        for (; j < r->n_e; j++) {
            const fh_diff_entry *q = &r->e[j];
            if (!q->is_private || strncmp(q->path, e->path, plen) != 0 ||
                (q->path[plen] != '/' && q->path[plen] != '@' && q->path[plen] != '\0'))
                break;
            k[q->status]++;
        }
        char *prefix = strndup(e->path, plen);
        fprintf(f, "private (_impl, not counted): %s:", prefix ? cli_vis(prefix) : "?");
        free(prefix);
        const char *sep = " ";
        for (int s = FH_DIFF_DIFFERENT; s < FH_DIFF_PRIVATE; s++) {
            if (k[s]) {
                fprintf(f, "%s%zu %s", sep, k[s], fh_diff_status_name((fh_diff_status)s));
                sep = ", ";
            }
        }
        fputc('\n', f);
        i = j;
    }
}

/* The text report: provenance, mode, then structure, corrupt, different,
 * private, and the summary line. */
static void print_report(FILE *f, const fh_diff_opts *o, const fh_diff_report *r, int rc,
                         bool show_private)
{
    fprintf(f, "fattn diff: A=%s B=%s\n", cli_vis(r->file_a), cli_vis(r->file_b));
    print_provenance(f, o, r);
    print_mode(f, o);
    for (size_t i = 0; i < r->n_e; i++) {
        const fh_diff_entry *e = &r->e[i];
        if (e->is_private || e->status == FH_DIFF_EQUAL ||
            e->status == FH_DIFF_DIFFERENT || e->status == FH_DIFF_CORRUPT)
            continue;
        if (e->status == FH_DIFF_MISSING_IN_A)
            fprintf(f, "missing in A: %s (%s)\n", cli_vis(e->path), e->kind);
        else if (e->status == FH_DIFF_MISSING_IN_B)
            fprintf(f, "missing in B: %s (%s)\n", cli_vis(e->path), e->kind);
        else if (e->status == FH_DIFF_VALUE)
            fprintf(f, "value: %s: %s\n", cli_vis(e->path), e->msg ? cli_vis(e->msg) : "differs");
        else
            fprintf(f, "structure: %s: %s\n", cli_vis(e->path), e->msg ? cli_vis(e->msg) : "differs");
    }
    for (size_t i = 0; i < r->n_e; i++) {
        const fh_diff_entry *e = &r->e[i];
        if (e->is_private)
            continue;
        if (e->status == FH_DIFF_CORRUPT)
            fprintf(f, "corrupt: %s (%s)\n", cli_vis(e->path), e->msg ? cli_vis(e->msg) : "");
        else if (e->status == FH_DIFF_DIFFERENT && !e->has_data)
            fprintf(f, "different: %s: %s\n", cli_vis(e->path), e->msg ? cli_vis(e->msg) : "");
        else if (e->status == FH_DIFF_DIFFERENT)
            print_dataset(f, o, e, "different");
        else if (e->status == FH_DIFF_EQUAL && e->has_data && e->st.bit_count > 0)
            print_dataset(f, o, e, o->mode == FH_ELEM_ULP ? "within ulp" : "within tol");
    }
    /* front-end-private groups differ between front ends by design: one
     * line each would bury the counted differences (126 lines for the
     * default matrix), so by default only the summary counts them */
    if (show_private)
        print_private(f, r);
    if (r->audit_skipped)
        fprintf(f, "/audit: not compared (use --audit)\n");
    const size_t *t = r->tally;
    fprintf(f,
            "summary: %zu dataset%s compared, %zu counted difference%s (%zu different, "
            "%zu corrupt, %zu structure, %zu value, %zu missing in A, %zu missing in B), %zu "
            "private%s; exit %d\n",
            r->n_data, cli_s(r->n_data), r->counted, cli_s(r->counted), t[FH_DIFF_DIFFERENT],
            t[FH_DIFF_CORRUPT], t[FH_DIFF_STRUCTURE], t[FH_DIFF_VALUE],
            t[FH_DIFF_MISSING_IN_A],
            t[FH_DIFF_MISSING_IN_B], t[FH_DIFF_PRIVATE],
            t[FH_DIFF_PRIVATE] && !show_private ? " (not counted, not listed: --show-private)"
                                                   : "",
            rc);
    fflush(f);
}

/* ---- JSON (schema fattn-diff/1) ---------------------------------------------- */

static json_t *jnum(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *jattrval(const char *s) { return s ? json_string(s) : json_null(); }

static json_t *json_float_stats(const fh_diff_opts *o, const fh_diff_entry *e, json_t *p)
{
    const fh_elem_stats *s = &e->st;
    double nmse = nmse_of(s);
    json_object_set_new(p, "max_ulp", json_integer((json_int_t)s->max_ulp));
    json_object_set_new(p, "max_rel", jnum(s->max_rel));
    json_object_set_new(p, "rmse",
                        jnum(s->n_finite ? sqrt(s->sse / (double)s->n_finite) : 0.0));
    json_object_set_new(p, "nmse", jnum(nmse));
    json_object_set_new(p, "snr_db", jnum(nmse > 0 ? -10.0 * log10(nmse) : NAN));
    json_object_set_new(p, "nmse_partial", json_boolean(s->signal_partial));
    json_t *h = json_object();
    static const char *hn[] = {"0", "1", "2-4", "5-16", "17-256", ">256"};
    for (int k = 0; k < 6; k++)
        json_object_set_new(h, hn[k], json_integer((json_int_t)s->hist[k]));
    json_object_set_new(h, "sign_flips", json_integer((json_int_t)s->sign_flips));
    json_object_set_new(h, "class_changes", json_integer((json_int_t)s->class_changes));
    json_object_set_new(h, "nan_payloads", json_integer((json_int_t)s->nan_payloads));
    json_object_set_new(p, "ulp_histogram", h);
    if (o->mode == FH_ELEM_TOL) {
        json_object_set_new(p, "rtol", json_real(e->tol.rtol));
        json_object_set_new(p, "atol", json_real(e->tol.atol));
    }
    return p;
}

static json_t *json_worst(const fh_diff_entry *e)
{
    json_t *wl = json_array();
    for (int k = 0; k < e->st.n_worst; k++) {
        const fh_elem_worst *w = &e->st.worst[k];
        json_t *we = json_object(), *ix = json_array();
        uint64_t m[FATTN_MAX_DIMS];
        unflatten(e, w->index, m);
        for (int d = 0; d < e->ndim; d++)
            json_array_append_new(ix, json_integer((json_int_t)m[d]));
        char ha[24], hb[24];
        snprintf(ha, sizeof ha, "0x%0*" PRIx64, hex_width(e->dtype), w->a_bits);
        snprintf(hb, sizeof hb, "0x%0*" PRIx64, hex_width(e->dtype), w->b_bits);
        json_object_set_new(we, "index", ix);
        json_object_set_new(we, "a", jnum(w->a));
        json_object_set_new(we, "b", jnum(w->b));
        json_object_set_new(we, "a_bits", json_string(ha));
        json_object_set_new(we, "b_bits", json_string(hb));
        if (w->has_ulp)
            json_object_set_new(we, "ulp", json_integer((json_int_t)w->ulp));
        json_array_append_new(wl, we);
    }
    return wl;
}

static json_t *json_entry(const fh_diff_opts *o, const fh_diff_entry *e)
{
    json_t *p = json_object();
    json_object_set_new(p, "status",
                        json_string(e->is_private && e->status != FH_DIFF_EQUAL
                                        ? "private"
                                        : fh_diff_status_name(e->status)));
    json_object_set_new(p, "kind", json_string(e->kind));
    if (e->is_private)
        json_object_set_new(p, "private_status", json_string(fh_diff_status_name(e->status)));
    if (e->msg)
        json_object_set_new(p, "detail", json_string(e->msg));
    if (e->a && e->b) { /* an attribute's two values, as the text report writes them */
        json_object_set_new(p, "a", json_string(e->a));
        json_object_set_new(p, "b", json_string(e->b));
    }
    if (e->has_data) {
        const fh_elem_stats *s = &e->st;
        json_t *shape = json_array();
        for (int k = 0; k < e->ndim; k++)
            json_array_append_new(shape, json_integer(e->shape[k]));
        json_object_set_new(p, "dtype", json_string(fattn_dtype_name(e->dtype)));
        json_object_set_new(p, "shape", shape);
        json_object_set_new(p, "numel", json_integer((json_int_t)s->numel));
        json_object_set_new(
            p, "count",
            json_integer((json_int_t)(o->mode == FH_ELEM_BITWISE ? s->bit_count
                                                                     : s->fail_count)));
        json_object_set_new(p, "bit_count", json_integer((json_int_t)s->bit_count));
        json_object_set_new(p, "max_abs", jnum(s->max_abs));
        if (e->digest_a[0])
            json_object_set_new(p, "digest_a", json_string(e->digest_a));
        if (e->digest_b[0])
            json_object_set_new(p, "digest_b", json_string(e->digest_b));
        if (fattn_dtype_is_float(e->dtype))
            json_float_stats(o, e, p);
        json_object_set_new(p, "worst", json_worst(e));
    } else if (e->digest_a[0] || e->digest_b[0]) {
        json_object_set_new(p, "digest_a", json_string(e->digest_a));
        json_object_set_new(p, "digest_b", json_string(e->digest_b));
    }
    return p;
}

/* Write the JSON report; 0, or -1 after a message on stderr. */
static int write_json(const char *path, const fh_diff_opts *o, const fh_diff_report *r,
                      int exit_code)
{
    json_t *root = json_object(), *prov = json_array(), *paths = json_object();
    json_t *summ = json_object();
    if (!root || !prov || !paths || !summ) {
        json_decref(root);
        json_decref(prov);
        json_decref(paths);
        json_decref(summ);
        fprintf(stderr, "fattn diff: out of memory\n");
        return -1;
    }
    json_object_set_new(root, "schema", json_string("fattn-diff/1"));
    json_object_set_new(root, "mode", json_string(mode_names[o->mode]));
    json_object_set_new(root, "reference", json_string("B"));
    json_object_set_new(root, "a", json_string(r->file_a));
    json_object_set_new(root, "b", json_string(r->file_b));
    if (o->mode == FH_ELEM_ULP)
        json_object_set_new(root, "max_ulp", json_integer((json_int_t)o->max_ulp));
    if (o->mode == FH_ELEM_TOL)
        json_object_set_new(root, "tol_profile", json_string(o->tol->version));
    json_object_set_new(root, "trust_digests", json_boolean(o->trust_digests));
    json_object_set_new(root, "audit", json_boolean(o->audit));
    if (o->only)
        json_object_set_new(root, "only", json_string(o->only));
    for (size_t i = 0; i < r->n_prov; i++) {
        json_t *p = json_object();
        json_object_set_new(p, "path", json_string(r->prov[i].path));
        json_object_set_new(p, "a", jattrval(r->prov[i].a));
        json_object_set_new(p, "b", jattrval(r->prov[i].b));
        json_object_set_new(p, "platform", json_boolean(r->prov[i].platform));
        json_array_append_new(prov, p);
    }
    for (size_t i = 0; i < r->n_e; i++)
        json_object_set_new(paths, r->e[i].path, json_entry(o, &r->e[i]));
    for (int k = 0; k <= FH_DIFF_PRIVATE; k++)
        json_object_set_new(summ, fh_diff_status_name((fh_diff_status)k),
                            json_integer((json_int_t)r->tally[k]));
    json_object_set_new(summ, "entries", json_integer((json_int_t)r->n_e));
    json_object_set_new(summ, "counted", json_integer((json_int_t)r->counted));
    json_object_set_new(summ, "audit_skipped", json_boolean(r->audit_skipped));
    json_object_set_new(root, "provenance_delta", prov);
    json_object_set_new(root, "paths", paths);
    json_object_set_new(root, "summary", summ);
    json_object_set_new(root, "exit", json_integer(exit_code));
    /* One atomic replace (fileguard.h): a full disk leaves the old report. */
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(root);
    if (!text) {
        fprintf(stderr, "fattn diff: %s: cannot write the JSON report: out of memory\n",
                cli_vis(path));
        return -1;
    }
    int rc = cli_write_report("diff", "JSON report", path, text);
    free(text);
    return rc == FH_EXIT_OK ? 0 : -1;
}

/* ---- the command --------------------------------------------------------------- */

int fh_cmd_diff(int argc, char **argv)
{
    const char *files[2] = {NULL, NULL};
    const char *mode = NULL, *max_ulp = NULL, *profile = NULL, *only = NULL, *json = NULL;
    const char *maxmem_s = NULL;
    const char *tols[64];
    size_t n_tols = 0;
    bool trust = false, audit = false, show_private = false;
    cli_args a = {argc, argv, 1, "diff"};
    for (; a.i < argc; a.i++) {
        int r;
        const char *v = NULL;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(diff_help, stdout);
            return FH_EXIT_OK;
        } else if (cli_flag(&a, "--trust-digests")) {
            trust = true;
        } else if (cli_flag(&a, "--audit")) {
            audit = true;
        } else if (cli_flag(&a, "--show-private")) {
            show_private = true;
        } else if ((r = cli_opt(&a, "--tol-profile", &profile)) ||
                   (r = cli_opt(&a, "--mode", &mode)) || (r = cli_opt(&a, "--max-ulp", &max_ulp)) ||
                   (r = cli_opt(&a, "--only", &only)) || (r = cli_opt(&a, "--json", &json)) ||
                   (r = cli_opt(&a, "--max-memory", &maxmem_s))) {
            if (r < 0)
                return cli_fail("diff", "%s needs a value", argv[a.i]);
        } else if ((r = cli_opt(&a, "--tol", &v))) {
            if (r < 0)
                return cli_fail("diff", "--tol needs a value");
            if (n_tols == sizeof tols / sizeof tols[0])
                return cli_fail("diff", "too many --tol rules (at most 64)");
            tols[n_tols++] = v;
        } else if (argv[a.i][0] == '-' && argv[a.i][1] != '\0') {
            return cli_fail("diff", "unknown argument '%s' (see fattn diff --help)", argv[a.i]);
        } else if (!files[0]) {
            files[0] = argv[a.i];
        } else if (!files[1]) {
            files[1] = argv[a.i];
        } else {
            return cli_fail("diff", "unexpected argument '%s': two files are compared",
                            argv[a.i]);
        }
    }
    if (!files[1])
        return cli_fail("diff", "A.h5 and B.h5 are required (see fattn diff --help)");
    /* The report must not replace what it reports on. */
    const char *inputs[3] = {files[0], files[1], profile};
    if (json && !cli_is_stdout(json) &&
        (fh_fileguard_check_distinct(json, inputs, 3) != FATTN_OK ||
         fh_fileguard_check_output(json) != FATTN_OK))
        return cli_fail("diff", "--json %s", fattn_last_error());
    fh_diff_opts o;
    memset(&o, 0, sizeof o);
    if (cli_max_memory_or_default("diff", maxmem_s, &o.max_memory) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    o.only = only;
    o.trust_digests = trust;
    o.audit = audit;
    if (!mode || !strcmp(mode, "bitwise"))
        o.mode = FH_ELEM_BITWISE;
    else if (!strcmp(mode, "ulp"))
        o.mode = FH_ELEM_ULP;
    else if (!strcmp(mode, "tol"))
        o.mode = FH_ELEM_TOL;
    else
        return cli_fail("diff", "--mode '%s': expected bitwise, ulp or tol", mode);
    if (max_ulp) {
        char *end;
        errno = 0;
        unsigned long long u = strtoull(max_ulp, &end, 10);
        if (errno || end == max_ulp || *end || max_ulp[0] == '-')
            return cli_fail("diff", "--max-ulp '%s': expected a non-negative integer", max_ulp);
        if (o.mode != FH_ELEM_ULP)
            return cli_fail("diff", "--max-ulp needs --mode ulp");
        o.max_ulp = (uint64_t)u;
    }
    if ((profile || n_tols) && o.mode != FH_ELEM_TOL)
        return cli_fail("diff", "--tol-profile and --tol need --mode tol");
    fh_tol_profile prof;
    fh_tol_profile_builtin(&prof);
    if (profile && fh_tol_profile_load(profile, &prof) != FATTN_OK) {
        fh_tol_profile_free(&prof);
        return cli_fail("diff", "--tol-profile: %s", fattn_last_error());
    }
    for (size_t i = 0; i < n_tols; i++) {
        if (fh_tol_profile_add_rule(&prof, tols[i]) != FATTN_OK) {
            fh_tol_profile_free(&prof);
            return cli_fail("diff", "%s", fattn_last_error());
        }
    }
    o.tol = &prof;
    fh_diff_report r;
    int rc;
    if (fh_diff_files(files[0], files[1], &o, &r) != FATTN_OK) {
        rc = cli_fail("diff", "%s", fattn_last_error());
    } else {
        rc = r.counted ? FH_EXIT_DIFF : FH_EXIT_OK;
        /* the report first: the exit the text prints must be the real one,
         * and a report that cannot be written makes it 2 */
        if (json && write_json(json, &o, &r, rc) != 0)
            rc = FH_EXIT_ERROR;
        /* with --json -, stdout is the JSON alone and the text goes to stderr */
        print_report(cli_is_stdout(json) ? stderr : stdout, &o, &r, rc, show_private);
    }
    fh_diff_report_free(&r);
    fh_tol_profile_free(&prof);
    return rc;
}
