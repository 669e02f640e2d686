/* The cross-case contrast (see contrast.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contrast.h"
#include "textbuf.h"

/* Whether value v is among the failing cases' values of feature k. */
static bool in_failing(const fh_case_features *f, const fh_contrast_outcome *o, size_t n,
                       int k, const char *v)
{
    for (size_t i = 0; i < n; i++)
        if (o[i] == FH_CONTRAST_FAIL && !strcmp(f[i].v[k], v))
            return true;
    return false;
}

/* Passing cases that hold "k1 in S_k1" (and "k2 in S_k2" when k2 >= 0). */
static size_t misses(const fh_case_features *f, const fh_contrast_outcome *o, size_t n,
                     int k1, int k2)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += o[i] == FH_CONTRAST_PASS && in_failing(f, o, n, k1, f[i].v[k1]) &&
             (k2 < 0 || in_failing(f, o, n, k2, f[i].v[k2]));
    return m;
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* The distinct values of feature k among the cases of outcome `want`
 * (want FAIL) or among the passing cases not in the failing set (want
 * PASS), sorted, as "k v" or "k in {a, b}"; *count gets how many cases
 * have them. Nothing is written when there are none. */
static void values_text(fh_textbuf *b, const fh_case_features *f,
                        const fh_contrast_outcome *o, size_t n, int k,
                        fh_contrast_outcome want, size_t *count)
{
    const char **v = malloc((n ? n : 1) * sizeof *v);
    size_t nv = 0;
    *count = 0;
    for (size_t i = 0; v && i < n; i++) {
        if (o[i] != want || (want == FH_CONTRAST_PASS && in_failing(f, o, n, k, f[i].v[k])))
            continue;
        ++*count;
        bool seen = false;
        for (size_t j = 0; j < nv && !seen; j++)
            seen = !strcmp(v[j], f[i].v[k]);
        if (!seen)
            v[nv++] = f[i].v[k];
    }
    if (nv > 1)
        qsort(v, nv, sizeof *v, cmp_str);
    const char *name = fh_feature_name((fh_feature)k);
    if (nv == 1)
        fh_textbuf_put(b, "%s %s", name, v[0]);
    else if (nv > 1) {
        fh_textbuf_put(b, "%s in {", name);
        for (size_t j = 0; j < nv && j < FH_CONTRAST_VALUES_SHOWN; j++)
            fh_textbuf_put(b, "%s%s", j ? ", " : "", v[j]);
        if (nv > FH_CONTRAST_VALUES_SHOWN)
            fh_textbuf_put(b, ", and %zu more", nv - FH_CONTRAST_VALUES_SHOWN);
        fh_textbuf_put(b, "}");
    }
    free(v);
}

static int best_key(const fh_case_features *f, const fh_contrast_outcome *o, size_t n,
                    int k1, size_t bound, size_t *best_misses)
{
    int best = -1;
    *best_misses = bound;
    for (int k = 0; k < FH_FEATURE_COUNT; k++) {
        if (k == k1)
            continue;
        size_t m = k1 < 0 ? misses(f, o, n, k, -1) : misses(f, o, n, k1, k);
        if (m < *best_misses) {
            best = k;
            *best_misses = m;
        }
    }
    return best;
}

fattn_status fh_contrast_of_features(const fh_case_features *f,
                                        const fh_contrast_outcome *o, size_t n,
                                        fh_contrast *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < n; i++) {
        out->failing += o[i] == FH_CONTRAST_FAIL;
        out->passing += o[i] == FH_CONTRAST_PASS;
    }
    if (out->failing < 2 || out->passing == 0)
        return FATTN_OK;
    fh_textbuf b = {out->text, sizeof out->text, 0};
    size_t m1, m2;
    int k1 = best_key(f, o, n, -1, out->passing, &m1);
    if (k1 < 0) {
        fh_textbuf_put(&b, "contrast: no feature value is shared by all %zu failing cases "
                          "and missing in a passing one (%zu passing)", out->failing,
                          out->passing);
        return FATTN_OK;
    }
    out->keys[out->n_keys++] = (fh_feature)k1;
    out->misses = m1;
    int k2 = m1 ? best_key(f, o, n, k1, m1, &m2) : -1;
    if (k2 >= 0) {
        out->keys[out->n_keys++] = (fh_feature)k2;
        out->misses = m2;
    }
    size_t cnt;
    fh_textbuf_put(&b, "contrast: the %zu failing cases all have ", out->failing);
    values_text(&b, f, o, n, k1, FH_CONTRAST_FAIL, &cnt);
    if (k2 >= 0) {
        fh_textbuf_put(&b, " and ");
        values_text(&b, f, o, n, k2, FH_CONTRAST_FAIL, &cnt);
    }
    if (out->misses)
        fh_textbuf_put(&b, "; so do %zu of the %zu passing cases", out->misses, out->passing);
    else
        fh_textbuf_put(&b, "; none of the %zu passing cases ha%s %s", out->passing,
            out->passing == 1 ? "s" : "ve", k2 >= 0 ? "both" : "that");
    size_t at = b.at;
    fh_textbuf_put(&b, "; no case with ");
    values_text(&b, f, o, n, k1, FH_CONTRAST_PASS, &cnt);
    if (cnt)
        fh_textbuf_put(&b, " fails (%zu case%s)", cnt, cnt == 1 ? "" : "s");
    else { /* every passing value is a failing one too: nothing to add */
        b.at = at;
        out->text[at] = '\0';
    }
    return FATTN_OK;
}

fattn_status fh_contrast_of(const fh_spec *const *specs, const fh_contrast_outcome *o,
                               size_t n, fh_contrast *out)
{
    memset(out, 0, sizeof *out);
    fh_case_features *f = calloc(n ? n : 1, sizeof *f);
    if (!f)
        return fattn_error(FATTN_E_NOMEM, "contrast: out of memory");
    fattn_status st;
    for (size_t i = 0; i < n; i++) {
        if (o[i] == FH_CONTRAST_NONE)
            continue;
        fh_case c;
        if ((st = fh_case_resolve(specs[i], &c)) != FATTN_OK)
            goto out;
        fh_case_features_of(&c, &f[i]);
        fh_case_free(&c);
    }
    st = fh_contrast_of_features(f, o, n, out);
out:
    free(f);
    return st;
}
