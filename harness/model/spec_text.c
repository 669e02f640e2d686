/* Case specs as text: Python-repr floats, the canonical JSON writer, reading
 * a spec file and the one-line summary of `fattn cases`. See spec.h. */
#include "spec.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "try.h"

/* ------------------------------------------------------------------------ */
/* Python-repr floats                                                       */
/* ------------------------------------------------------------------------ */

/* Decimal digits of a p-digit mantissa: value = m * 10^(e - p + 1). */
static bool reads_back(uint64_t m, int p, int e, double v)
{
    char s[48];
    snprintf(s, sizeof s, "%" PRIu64 "e%d", m, e - p + 1);
    double r = strtod(s, NULL);
    return memcmp(&r, &v, sizeof r) == 0;
}

static uint64_t pow10_u64(int p)
{
    uint64_t r = 1;
    while (p-- > 0)
        r *= 10;
    return r;
}

fattn_status fh_spec_format_double(double v, char *buf, size_t n)
{
    if (!isfinite(v))
        return fattn_error(FATTN_E_INVALID_ARG, "cannot format a non-finite number as JSON");
    bool neg = signbit(v);
    double a = fabs(v);
    char digits[24];
    int e = 0;
    if (a == 0.0) {
        strcpy(digits, "0");
    } else {
        /* Shortest p whose correctly rounded p-digit decimal reads back; at
         * that p also accept a neighbour in the last digit (the interval of
         * doubles rounding to `a` is asymmetric at powers of two), as the
         * shortest-digits algorithm of Python's repr does. */
        uint64_t best = 0;
        int bp = 0;
        for (int p = 1; p <= 17 && !bp; p++) {
            char s[40];
            snprintf(s, sizeof s, "%.*e", p - 1, a);
            /* s = "d.ddde[+-]xx" */
            uint64_t m = 0;
            const char *q = s;
            for (; *q && *q != 'e'; q++) {
                if (*q >= '0' && *q <= '9')
                    m = m * 10 + (uint64_t)(*q - '0');
            }
            int pe = atoi(q + 1);
            if (reads_back(m, p, pe, a)) {
                best = m;
                bp = p;
                e = pe;
                break;
            }
            /* Neighbours in the last digit that keep p digits. Both cannot
             * read back when m does not (m lies between them). */
            uint64_t lo = pow10_u64(p - 1), hi = pow10_u64(p);
            const uint64_t cand[2] = {m + 1, m - 1};
            for (int k = 0; k < 2 && !bp; k++) {
                if (cand[k] >= lo && cand[k] < hi && reads_back(cand[k], p, pe, a)) {
                    best = cand[k];
                    bp = p;
                    e = pe;
                }
            }
        }
        if (!bp)
            return fattn_error(FATTN_E_INTERNAL, "no round-trip form for %a", v);
        snprintf(digits, sizeof digits, "%" PRIu64, best);
        /* Strip trailing zeros (a neighbour may end in 0). */
        size_t dl = strlen(digits);
        while (dl > 1 && digits[dl - 1] == '0')
            digits[--dl] = '\0';
    }
    size_t nd = strlen(digits);
    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (a != 0.0 && (e < -4 || e >= 16)) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", e < 0 ? '-' : '+',
                              e < 0 ? -e : e);
    } else if (e < 0) {
        /* 0.000ddd */
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -e - 1; i++)
            out[o++] = '0';
        memcpy(out + o, digits, nd);
        o += nd;
    } else {
        /* Integer part: digits[0..e], padded with zeros. */
        for (int i = 0; i <= e; i++)
            out[o++] = (size_t)i < nd ? digits[i] : '0';
        out[o++] = '.';
        if ((size_t)e + 1 < nd) {
            memcpy(out + o, digits + e + 1, nd - (size_t)e - 1);
            o += nd - (size_t)e - 1;
        } else {
            out[o++] = '0';
        }
    }
    out[o] = '\0';
    if (o + 1 > n)
        return fattn_error(FATTN_E_OVERFLOW, "buffer of %zu bytes too small for a number", n);
    memcpy(buf, out, o + 1);
    return FATTN_OK;
}

/* ------------------------------------------------------------------------ */
/* Canonical form                                                           */
/* ------------------------------------------------------------------------ */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void sb_fmt(sbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0)
        sb_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* A JSON string; non-ASCII and control bytes escaped as \u00XX. */
static void sb_json_str(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        if (*q == '"' || *q == '\\') {
            char e[2] = {'\\', (char)*q};
            sb_put(b, e, 2);
        } else if (*q < 0x20 || *q >= 0x7f) {
            sb_fmt(b, "\\u%04x", (unsigned)*q);
        } else {
            sb_put(b, (const char *)q, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static void sb_key(sbuf *b, const char *k, bool *first)
{
    if (!*first)
        sb_put(b, ",", 1);
    *first = false;
    sb_json_str(b, k);
    sb_put(b, ":", 1);
}

static void sb_list(sbuf *b, const int64_t *l, int64_t n)
{
    if (!l) {
        sb_str(b, "null");
        return;
    }
    sb_put(b, "[", 1);
    for (int64_t i = 0; i < n; i++)
        sb_fmt(b, i ? ",%" PRId64 : "%" PRId64, l[i]);
    sb_put(b, "]", 1);
}

static const char *tf(bool v) { return v ? "true" : "false"; }

/* A name a row's namer gives, or an error for an enum out of range. */
static fattn_status w_name(sbuf *b, const fh_spec *s, const char *key, const char *name)
{
    if (!name)
        return fattn_error(FATTN_E_INVALID_ARG, "spec '%s': key '%s' is out of range", s->id,
                           key);
    sb_json_str(b, name);
    return FATTN_OK;
}

static fattn_status w_double(sbuf *b, double v)
{
    char num[32];
    TRY(fh_spec_format_double(v, num, sizeof num));
    sb_str(b, num);
    return FATTN_OK;
}

static fattn_status w_fp8(sbuf *b, const fh_spec *s)
{
    sb_str(b, "{");
    if (s->fp8_amax_algo != FATTN_FP8_AMAX_MAX) {
        sb_str(b, "\"amax_compute_algo\":");
        TRY(w_name(b, s, "fp8.amax_compute_algo", fattn_fp8_amax_algo_name(s->fp8_amax_algo)));
        sb_str(b, ",");
    }
    if (s->fp8_amax_history_len != FH_SPEC_FP8_HISTORY_DEFAULT)
        sb_fmt(b, "\"amax_history_len\":%" PRId64 ",", s->fp8_amax_history_len);
    sb_fmt(b, "\"bf16_backward\":%s,\"dpa_bwd\":%s,\"input_fp8\":%s,", tf(s->bf16_backward),
           tf(s->fp8_dpa_bwd), tf(s->fp8_input));
    if (s->fp8_margin != 0)
        sb_fmt(b, "\"margin\":%" PRId64 ",", s->fp8_margin);
    sb_fmt(b, "\"o_in_f16\":%s,\"output_fp8\":%s,\"recipe\":", tf(s->fp8_o_in_f16),
           tf(s->fp8_output));
    TRY(w_name(b, s, "fp8.recipe", fattn_fp8_recipe_name(s->fp8_recipe)));
    if (!s->fp8_reduce_amax)
        sb_str(b, ",\"reduce_amax\":false");
    sb_str(b, "}");
    return FATTN_OK;
}

static void sb_put_cb(void *ctx, const char *text)
{
    sb_str((sbuf *)ctx, text);
}

/* Writing a row's value, by kind; a kind whose key is written only when set
 * returns before sb_key. Inside a writer: b (the buffer), s, first. */
#define W_ID(k, t, lo, hi) sb_key(b, #k, first); sb_json_str(b, s->k);
#define W_INT64(k) sb_key(b, #k, first); sb_fmt(b, "%" PRId64, s->k);
#define W_REQ(k, t, lo, hi) W_INT64(k)
#define W_INT(k, t, lo, hi) W_INT64(k)
#define W_NAME(k, t, parse, namer) sb_key(b, #k, first); TRY(w_name(b, s, #k, namer(s->k)));
#define W_BOOL(k, t, lo, hi) sb_key(b, #k, first); sb_str(b, tf(s->k));
#define W_FLAG(k, t, lo, hi)                                                                   \
    if (s->k) {                                                                                \
        sb_key(b, #k, first);                                                                  \
        sb_str(b, "true");                                                                     \
    }
#define W_OINT(k, t, lo, hi)                                                                   \
    if (s->k) {                                                                                \
        sb_key(b, #k, first);                                                                  \
        sb_fmt(b, "%" PRId64, s->k);                                                           \
    }
#define W_PAIR(k, t, lo, hi)                                                                   \
    sb_key(b, #k, first);                                                                      \
    if (s->k##_set)                                                                            \
        sb_fmt(b, "[%" PRId64 ",%" PRId64 "]", s->k[0], s->k[1]);                              \
    else                                                                                       \
        sb_str(b, "null");
#define W_TRI(k, t, lo, hi)                                                                    \
    sb_key(b, #k, first);                                                                      \
    sb_str(b, s->k == FH_TRISTATE_NULL ? "null" : tf(s->k == FH_TRISTATE_TRUE));
#define W_REAL(k, t, lo, hi) sb_key(b, #k, first); TRY(w_double(b, s->k));
#define W_NREAL(k, t, lo, hi)                                                                  \
    sb_key(b, #k, first);                                                                      \
    if (s->k##_set)                                                                            \
        TRY(w_double(b, s->k));                                                                \
    else                                                                                       \
        sb_str(b, "null");
#define W_LIST(k, t, lo, hi) sb_key(b, #k, first); sb_list(b, s->k, s->b);
/* Written only when set, members sorted: every member filled in, but the
 * recipe update's (amax_compute_algo, amax_history_len, margin) and
 * reduce_amax only where they differ from TE's defaults, so that FP8 cases
 * written before they existed keep their bytes. */
#define W_FP8(k, t, lo, hi)                                                                    \
    if (s->fp8) {                                                                              \
        sb_key(b, #k, first);                                                                  \
        TRY(w_fp8(b, s));                                                                      \
    }
/* Written only when set, members sorted. */
#define W_REFUSE(k, t, lo, hi)                                                                 \
    if (s->expect_refusal) {                                                                   \
        sb_key(b, #k, first);                                                                  \
        sb_str(b, "{\"rule\":");                                                               \
        sb_json_str(b, s->refusal_rule);                                                       \
        sb_str(b, ",\"status\":");                                                             \
        TRY(w_name(b, s, "expect_refusal.status", fattn_status_name(s->refusal_status)));      \
        sb_str(b, "}");                                                                        \
    }

/* Written only when set, every member filled in, members sorted. */
#define W_PAGED(k, t, lo, hi)                                                                  \
    if (s->paged) {                                                                            \
        sb_key(b, #k, first);                                                                  \
        sb_fmt(b, "{\"num_pages\":%" PRId64 ",\"page_size\":%" PRId64 ",\"separate_v\":%s}",   \
               s->num_pages, s->page_size, tf(s->paged_separate_v));                           \
    }

/* Written only when set, every member filled in, members sorted. */
#define W_CP(k, t, lo, hi)                                                                     \
    if (s->cp) {                                                                               \
        sb_key(b, #k, first);                                                                  \
        sb_str(b, "{\"comm\":");                                                               \
        TRY(w_name(b, s, "cp.comm", fh_cp_comm_name(s->cp_comm)));                             \
        sb_str(b, ",\"load_balancing\":");                                                     \
        TRY(w_name(b, s, "cp.load_balancing", fh_cp_balance_name(s->cp_balance)));             \
        sb_fmt(b, ",\"size\":%" PRId64 "}", s->cp_size);                                      \
    }

/* Written only when set. */
#define W_SCHED(k, t, lo, hi)                                                                  \
    if (s->schedule) {                                                                         \
        sb_key(b, #k, first);                                                                  \
        fh_schedule_write(s->schedule, sb_put_cb, b);                                          \
    }

/* One writer per row, and the rows as {key, writer}. */
typedef fattn_status (*row_writer)(sbuf *b, const fh_spec *s, bool *first);
#define WRITER_FN(key, kind, ctype, a, b_, dflt, post)                                         \
    static fattn_status w_row_##key(sbuf *b, const fh_spec *s, bool *first)                    \
    {                                                                                          \
        W_##kind(key, ctype, a, b_)                                                            \
        return FATTN_OK;                                                                       \
    }
FH_SPEC_KEYS(WRITER_FN)

typedef struct writer_row {
    const char *key;
    row_writer write;
} writer_row;
#define WRITER_ROW(key, kind, ctype, a, b, dflt, post) {#key, w_row_##key},
static const writer_row writer_rows[] = {FH_SPEC_KEYS(WRITER_ROW)};
#define N_WRITER_ROWS (sizeof writer_rows / sizeof writer_rows[0])

static int cmp_writer_row(const void *x, const void *y)
{
    return strcmp(((const writer_row *)x)->key, ((const writer_row *)y)->key);
}

fattn_status fh_spec_canonical(const fh_spec *s, char **out)
{
    *out = NULL;
    /* Sorted here, not by the table's order: the canonical form's key order
     * is Python's sort_keys whatever order the rows are in. */
    writer_row rows[N_WRITER_ROWS];
    memcpy(rows, writer_rows, sizeof rows);
    qsort(rows, N_WRITER_ROWS, sizeof rows[0], cmp_writer_row);
    sbuf b = {0};
    bool first = true;
    fattn_status st = FATTN_OK;
    sb_put(&b, "{", 1);
    for (size_t i = 0; i < N_WRITER_ROWS; i++)
        if ((st = rows[i].write(&b, s, &first)) != FATTN_OK)
            goto out;
    sb_put(&b, "}", 1);
    if (b.oom) {
        st = fattn_error(FATTN_E_NOMEM, "spec '%s': out of memory writing canonical form", s->id);
        goto out;
    }
    *out = b.p;
    b.p = NULL;
out:
    free(b.p);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Spec files                                                               */
/* ------------------------------------------------------------------------ */

fattn_status fh_spec_load_file(const char *path, fh_spec_list *out)
{
    out->items = NULL;
    out->count = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return fattn_error(FATTN_E_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    fattn_status st = FATTN_OK;
    if (!buf) {
        st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
        goto out;
    }
    for (;;) {
        if (len == cap) {
            if (cap >= FH_SPEC_MAX_FILE_BYTES) {
                st = fattn_error(FATTN_E_INVALID_ARG, "%s: larger than %u bytes", path,
                                 (unsigned)FH_SPEC_MAX_FILE_BYTES);
                goto out;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
                goto out;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) {
                st = fattn_error(FATTN_E_IO, "%s: read failed: %s", path, strerror(errno));
                goto out;
            }
            break;
        }
    }
    st = fh_spec_parse_json(buf, len, path, out);
out:
    free(buf);
    fclose(f);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Summary and globs                                                        */
/* ------------------------------------------------------------------------ */

/* " schedule:F0 F1 U B0 B1" (the steps, as many as fit a line), or for
 * cache steps " schedule:6 cache steps" with the first few. */
static void summary_schedule(sbuf *b, const fh_schedule *sc)
{
    char name[64];
    sb_fmt(b, " schedule(%" PRId64 "):", sc->n);
    for (int64_t i = 0; i < sc->n; i++) {
        if (i == 12) {
            sb_str(b, " ...");
            break;
        }
        fh_step_name(&sc->steps[i], name, sizeof name);
        sb_fmt(b, "%s%s", i ? " " : "", name);
    }
}

fattn_status fh_spec_summary(const fh_spec *s, char *buf, size_t n)
{
    if (n == 0)
        return fattn_error(FATTN_E_INVALID_ARG, "fh_spec_summary: empty buffer");
    sbuf b = {0};
    sb_fmt(&b, "%s %s b=%" PRId64 " h=%" PRId64, fattn_dtype_name(s->dtype),
           fattn_layout_name(s->layout), s->b, s->h);
    if (s->hg != s->h)
        sb_fmt(&b, " hg=%" PRId64, s->hg);
    sb_fmt(&b, " sq=%" PRId64 " skv=%" PRId64 " d=%" PRId64, s->sq, s->skv, s->d_qk);
    if (s->d_v != s->d_qk)
        sb_fmt(&b, " d_v=%" PRId64, s->d_v);
    sb_fmt(&b, " mask=%s", fattn_mask_type_name(s->mask));
    if (s->window_set)
        sb_fmt(&b, " window=[%" PRId64 ",%" PRId64 "]", s->window[0], s->window[1]);
    if (s->bottom_right_diagonal != FH_TRISTATE_NULL)
        sb_fmt(&b, " bottom_right=%s", tf(s->bottom_right_diagonal == FH_TRISTATE_TRUE));
    if (s->bias == FATTN_BIAS_POST_SCALE_BIAS)
        sb_fmt(&b, " bias=post_scale_bias/%s", fh_bias_shape_name(s->bias_shape));
    else if (s->bias != FATTN_BIAS_NO_BIAS)
        sb_fmt(&b, " bias=%s", fattn_bias_type_name(s->bias));
    if (s->softmax != FATTN_SOFTMAX_VANILLA)
        sb_fmt(&b, " softmax=%s", fattn_softmax_type_name(s->softmax));
    if (s->dropout_p != 0.0) {
        char p[32];
        if (fh_spec_format_double(s->dropout_p, p, sizeof p) == FATTN_OK)
            sb_fmt(&b, " dropout=%s", p);
    }
    if (s->attn_scale_set) {
        char p[32];
        if (fh_spec_format_double(s->attn_scale, p, sizeof p) == FATTN_OK)
            sb_fmt(&b, " scale=%s", p);
    }
    if (s->pad_between_seqs)
        sb_str(&b, " pad_between_seqs");
    if (s->seqlens_q || s->seqlens_kv)
        sb_str(&b, " seqlens=explicit");
    if (s->return_max_logit)
        sb_str(&b, " max_logit");
    if (!s->deterministic)
        sb_str(&b, " nondeterministic");
    if (!s->fast_zero_fill)
        sb_str(&b, " no_fast_zero_fill");
    sb_str(&b, s->is_training ? " train" : " inference");
    if (s->no_grad)
        sb_str(&b, " no_grad");
    if (s->inference_mode)
        sb_str(&b, " inference_mode");
    if (s->raw_func_args)
        sb_str(&b, " raw_func_args");
    if (s->cpu_offload)
        sb_str(&b, " cpu_offload");
    if (s->bias_no_grad)
        sb_str(&b, " bias_no_grad");
    if (s->fp8)
        sb_fmt(&b, " fp8:%s%s%s%s", fattn_fp8_recipe_name(s->fp8_recipe),
               s->fp8_input ? "+in" : "", s->fp8_output ? "+out" : "",
               s->fp8_dpa_bwd ? "" : "+bwd16");
    if (s->paged)
        sb_fmt(&b, " paged:%" PRId64 "x%" PRId64 "%s", s->num_pages, s->page_size,
               s->paged_separate_v ? "+v" : "");
    if (s->max_batch_size)
        sb_fmt(&b, " max_batch_size=%" PRId64, s->max_batch_size);
    if (s->cp)
        sb_fmt(&b, " cp:%s*%" PRId64 "%s", fh_cp_comm_name(s->cp_comm), s->cp_size,
               s->cp_balance == FH_CP_NO_LOAD_BALANCE ? "+no_load_balance" : "");
    if (s->expect_refusal)
        sb_fmt(&b, " refused:%s", s->refusal_rule);
    if (s->fp8 && s->schedule && !fh_schedule_is_cache(s->schedule))
        sb_fmt(&b, " recipe:%s/%" PRId64 "/m%" PRId64,
               fattn_fp8_amax_algo_name(s->fp8_amax_algo), s->fp8_amax_history_len, s->fp8_margin);
    if (s->schedule)
        summary_schedule(&b, s->schedule);
    if (b.oom) {
        free(b.p);
        return fattn_error(FATTN_E_NOMEM, "spec '%s': out of memory", s->id);
    }
    snprintf(buf, n, "%s", b.p);
    free(b.p);
    return FATTN_OK;
}
