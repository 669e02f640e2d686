/* The support table's evaluation (core/support_rows.h): the TE releases,
 * what a row holds for and cites, and the checks and notes over any rows —
 * lib/core/support.c's tables or a test's. The rows themselves, and the
 * public entry points over them, are support.c's. */
#include <assert.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/support_rows.h"
#include "fattn/support.h"
#include "fattn_config.h"
#if FATTN_TESTING
#include "fattn/testing.h"
#endif

/* ---- releases ------------------------------------------------------------- */

typedef struct te_release {
    unsigned bit;
    const char *name, *release, *cpp_rev;
} te_release;

#define RELEASE_ROW(id, name, rel, cpp) {FATTN_TE_RULES_##id, name, rel, cpp},
#define RELEASE_SEP()
static const te_release releases[] = {FATTN_TE_RELEASES(RELEASE_ROW, RELEASE_SEP)};
_Static_assert(sizeof releases / sizeof releases[0] == FATTN_TE_RULES_COUNT,
               "a row per FATTN_TE_RELEASES entry");

static int release_index(unsigned one)
{
    for (int i = 0; i < FATTN_TE_RULES_COUNT; i++)
        if (releases[i].bit == one)
            return i;
    return -1;
}

fattn_status fattn_te_rules_parse(const char *s, unsigned *out)
{
    for (int i = 0; s && i < FATTN_TE_RULES_COUNT; i++)
        if (strcmp(s, releases[i].name) == 0) {
            *out = releases[i].bit;
            return FATTN_OK;
        }
    return fattn_error(FATTN_E_INVALID_ARG, "unknown TE rules '%s' (known: " FATTN_TE_RULES_KNOWN
                       ")", s ? s : "(null)");
}

const char *fattn_te_rules_name(unsigned one)
{
    int i = release_index(one);
    return i < 0 ? NULL : releases[i].name;
}

const char *fattn_te_rules_release(unsigned one)
{
    int i = release_index(one);
    return i < 0 ? NULL : releases[i].release;
}

bool fattn_support_rule_holds(const fattn_support_rule *r, unsigned one)
{
    int i = release_index(one);
    int first = release_index(r->te_first);
    int last = r->te_last ? release_index(r->te_last) : FATTN_TE_RULES_COUNT - 1;
    return i >= 0 && first >= 0 && last >= 0 && i >= first && i <= last;
}

static bool cudnn_holds(const fattn_support_rule *r, long v)
{
    return (!r->cudnn_from || v >= r->cudnn_from) && (!r->cudnn_below || v < r->cudnn_below);
}

static bool sm_holds(const fattn_support_rule *r, int sm)
{
    return (!r->sm_from || sm >= r->sm_from) && (!r->sm_below || sm < r->sm_below);
}

static bool is_cpp(const char *file)
{
    size_t n = strlen(file);
    return n > 4 && strcmp(file + n - 4, ".cpp") == 0;
}

bool fattn_support_rule_cite(const fattn_support_rule *r, unsigned one,
                             fattn_support_cite *out)
{
    memset(out, 0, sizeof *out);
    if (!r || !fattn_support_rule_holds(r, one))
        return false;
    int i = release_index(one);
    const fattn_support_where *w = NULL;
    for (int k = 0; k < FATTN_SUPPORT_MAX_WHERE && r->where[k].since; k++)
        if (release_index(r->where[k].since) <= i)
            w = &r->where[k];
    if (!w)
        return false; /* an engine's measured gap: no TE line */
    out->rev = is_cpp(w->file) ? releases[i].cpp_rev : releases[i].release;
    out->file = w->file;
    out->line = w->line;
    return true;
}

/* "TE 2.20 rules only" for a row some releases lack; "" for one all have. */
static void only_text(const fattn_support_rule *r, char *buf, size_t n)
{
    buf[0] = '\0';
    bool all = true;
    for (int i = 0; i < FATTN_TE_RULES_COUNT; i++)
        all = all && fattn_support_rule_holds(r, releases[i].bit);
    if (all)
        return;
    size_t k = (size_t)snprintf(buf, n, "TE");
    for (int i = 0; i < FATTN_TE_RULES_COUNT && k < n; i++)
        if (fattn_support_rule_holds(r, releases[i].bit))
            k += (size_t)snprintf(buf + k, n - k, " %s", releases[i].name);
    if (k < n)
        snprintf(buf + k, n - k, " rules only");
}

/* A row is a whole rule: what it tests, which releases, cuDNN versions and
 * GPU architectures, where in TE from which release on. Only an engine's own gap may cite no
 * TE line. */
static void assert_row(const fattn_support_rule *r, fattn_support_class cls)
{
    assert(r->id && r->refuses && r->message && r->cls == cls);
    assert(release_index(r->te_first) >= 0);
    assert(!r->te_last || release_index(r->te_last) >= release_index(r->te_first));
    assert(!r->cudnn_from || !r->cudnn_below || r->cudnn_from < r->cudnn_below);
    assert(!r->sm_from || !r->sm_below || r->sm_from < r->sm_below);
    assert(r->engines && (r->engines & ~FATTN_SUPPORT_ENGINE_ALL) == 0);
    assert(cls == FATTN_SUPPORT_ROUTING ? r->status == FATTN_OK : r->status != FATTN_OK);
    assert(r->stage == FATTN_SUPPORT_AT_CALL || r->status == FATTN_E_UNSUPPORTED);
    assert(r->where[0].since == r->te_first ||
           (r->where[0].since == 0 && r->status == FATTN_E_UNSUPPORTED));
    for (int k = 0; k < FATTN_SUPPORT_MAX_WHERE && r->where[k].since; k++) {
        assert(r->where[k].file && r->where[k].line > 0);
        assert(k == 0 || release_index(r->where[k].since) > release_index(r->where[k - 1].since));
    }
    (void)r;
    (void)cls;
}

/* The cuDNN version a refusal row is tested at: an engine's own gap at the
 * engine's cuDNN where the query names it, TE's rules at the platform's. */
static long row_cudnn_version(const fattn_support_rule *r, const fattn_support_query *q)
{
    return r->status == FATTN_E_UNSUPPORTED && q->engine_cudnn_version ? q->engine_cudnn_version
                                                                      : q->cudnn_version;
}

/* The GPU architecture likewise. */
static int row_sm(const fattn_support_rule *r, const fattn_support_query *q)
{
    return r->status == FATTN_E_UNSUPPORTED && q->engine_sm ? q->engine_sm : q->sm;
}

static bool one_engine(unsigned engine)
{
    return engine && (engine & (engine - 1)) == 0 && (engine & ~FATTN_SUPPORT_ENGINE_ALL) == 0;
}

/* The refusal rows that hold for q and the engine, in table order; the
 * first that refuses wins. engine_only: the engine's own gaps, the
 * AT_BACKWARD rows included when q->at_backward (the dispatch); else every
 * AT_CALL row (the front ends). */
static fattn_status check_rows_for(const fattn_support_rule *rows, size_t n,
                                   const fattn_support_query *q, unsigned engine,
                                   bool engine_only, const fattn_support_rule **failed)
{
    if (failed)
        *failed = NULL;
    if (!q)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_support_check: NULL argument");
    if (!one_engine(engine))
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_support_check: engine bits %#x are not "
                           "one engine", engine);
    if (release_index(q->te_rules) < 0)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_support_check: te_rules %u is not one "
                           "release (known: " FATTN_TE_RULES_KNOWN ")", q->te_rules);
    for (size_t i = 0; i < n; i++) {
        const fattn_support_rule *r = &rows[i];
        assert_row(r, FATTN_SUPPORT_REFUSAL);
        bool stage_ok = r->stage == FATTN_SUPPORT_AT_CALL || (engine_only && q->at_backward);
        bool for_engine = (r->engines & engine) != 0;
#if FATTN_TESTING
        /* the test hooks of fattn/testing.h, engine gaps only: a device
         * measurement lifts a gap, a CLI test widens one to every engine */
        if (r->status == FATTN_E_UNSUPPORTED && fattn_testing_row_lifted(r->id))
            continue;
        for_engine = for_engine ||
                     (r->status == FATTN_E_UNSUPPORTED && fattn_testing_row_widened(r->id));
#endif
        if (!stage_ok || (engine_only && r->status != FATTN_E_UNSUPPORTED) ||
            !fattn_support_rule_holds(r, q->te_rules) || !for_engine ||
            !cudnn_holds(r, row_cudnn_version(r, q)) || !sm_holds(r, row_sm(r, q)) ||
            !r->refuses(q))
            continue;
        if (failed)
            *failed = r;
        fattn_support_cite c;
        if (!fattn_support_rule_cite(r, q->te_rules, &c))
            return fattn_error(r->status, "rule %s: %s", r->id, r->message);
        char only[64];
        only_text(r, only, sizeof only);
        return fattn_error(r->status, "rule %s: %s (TE %s %s:%d%s%s)", r->id, r->message, c.rev,
                           c.file, c.line, only[0] ? "; " : "", only);
    }
    return FATTN_OK;
}

fattn_status fattn__support_check_rows(const fattn_support_rule *rows, size_t n,
                                      const fattn_support_query *q, unsigned engine,
                                      const fattn_support_rule **failed)
{
    return check_rows_for(rows, n, q, engine, false, failed);
}

fattn_status fattn__support_check_engine_rows(const fattn_support_rule *rows, size_t n,
                                             const fattn_support_query *q, unsigned engine,
                                             const fattn_support_rule **failed)
{
    return check_rows_for(rows, n, q, engine, true, failed);
}

int fattn__support_routed_rows(const fattn_support_rule *rows, size_t n,
                              const fattn_support_query *q, const fattn_support_rule **out,
                              int max)
{
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        const fattn_support_rule *r = &rows[i];
        assert_row(r, FATTN_SUPPORT_ROUTING);
        if (!fattn_support_rule_holds(r, q->te_rules) || !cudnn_holds(r, q->cudnn_version) ||
            !sm_holds(r, q->sm) || !r->refuses(q))
            continue;
        if (k < max && out)
            out[k] = r;
        k++;
    }
    return k;
}

/* Appending to a fixed buffer; a note that does not fit is cut. */
typedef struct note_buf {
    char *p;
    size_t n, len;
} note_buf;

static void note_add(note_buf *b, const char *fmt, ...)
{
    if (b->len + 1 >= b->n)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p + b->len, b->n - b->len, fmt, ap);
    va_end(ap);
    if (w > 0)
        b->len = b->len + (size_t)w < b->n ? b->len + (size_t)w : b->n - 1;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* "rule <id>, <file>:<line>" for each routing row q trips under `one`,
 * those `skip` trips as well left out. */
static int note_routes(note_buf *b, const fattn_support_rule *rows, size_t n,
                       const fattn_support_query *q, unsigned one, const fattn_support_query *skip,
                       const char *lead)
{
    fattn_support_query at = *q;
    at.te_rules = one;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        const fattn_support_rule *r = &rows[i];
        assert_row(r, FATTN_SUPPORT_ROUTING);
        if (!fattn_support_rule_holds(r, one) || !cudnn_holds(r, q->cudnn_version) ||
            !sm_holds(r, q->sm) || !r->refuses(&at))
            continue;
        if (skip && fattn_support_rule_holds(r, skip->te_rules))
            continue; /* the selected release has it too: already said */
        fattn_support_cite c;
        bool cited = fattn_support_rule_cite(r, one, &c);
        assert(cited); /* routing rows are TE's */
        (void)cited;
        note_add(b, "%s%s%srule %s, %s:%d", b->len ? "; " : "", k ? "" : lead, k ? "" : " ",
                 r->id, base_name(c.file), c.line);
        k++;
    }
    return k;
}

void fattn__support_note_rows(const fattn_support_rule *refusals, size_t nr,
                             const fattn_support_rule *routing, size_t nt,
                             const fattn_support_query *q, char *buf, size_t n)
{
    assert(buf && n > 0);
    buf[0] = '\0';
    int sel = release_index(q->te_rules);
    if (sel < 0)
        return;
    note_buf b = {buf, n, 0};
    char lead[96];
    snprintf(lead, sizeof lead, "DPA %s would not route here:", releases[sel].name);
    note_routes(&b, routing, nt, q, q->te_rules, NULL, lead);
    /* What only newer releases add: routing rows, then the first refusal. */
    for (int i = sel + 1; i < FATTN_TE_RULES_COUNT; i++) {
        unsigned one = releases[i].bit;
        snprintf(lead, sizeof lead, "TE %s rules only: DPA %s would not route here:",
                 releases[i].name, releases[i].name);
        note_routes(&b, routing, nt, q, one, q, lead);
        fattn_support_query at = *q;
        at.te_rules = one;
        for (size_t j = 0; j < nr; j++) {
            const fattn_support_rule *r = &refusals[j];
            /* TE's own refusals only: what an engine lacks is no release's rule */
            fattn_support_cite c;
            if (r->status == FATTN_E_UNSUPPORTED || r->stage != FATTN_SUPPORT_AT_CALL ||
                fattn_support_rule_holds(r, q->te_rules) || !cudnn_holds(r, q->cudnn_version) ||
                !sm_holds(r, q->sm) || !fattn_support_rule_cite(r, one, &c) || !r->refuses(&at))
                continue;
            note_add(&b, "%sTE %s rules only: refused by rule %s, %s:%d", b.len ? "; " : "",
                     releases[i].name, r->id, base_name(c.file), c.line);
            break;
        }
    }
}
