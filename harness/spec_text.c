/* Case specs as text: Python-repr floats, the canonical JSON writer and the
 * one-line summary of `fattn cases`. See spec.h. */
#include "spec.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(expr)                                                              \
    do {                                                                       \
        fattn_status try_st_ = (expr);                                         \
        if (try_st_ != FATTN_OK)                                               \
            return try_st_;                                                    \
    } while (0)

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

fattn_status fattn_spec_format_double(double v, char *buf, size_t n)
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

fattn_status fattn_spec_canonical(const fattn_spec *s, char **out)
{
    *out = NULL;
    const char *dtype = fattn_dtype_name(s->dtype);
    const char *layout = fattn_layout_name(s->layout);
    const char *mask = fattn_mask_type_name(s->mask);
    const char *bias = fattn_bias_type_name(s->bias);
    const char *bshape = fattn_bias_shape_name(s->bias_shape);
    const char *softmax = fattn_softmax_type_name(s->softmax);
    if (!dtype || !layout || !mask || !bias || !bshape || !softmax)
        return fattn_error(FATTN_E_INVALID_ARG, "spec '%s': an enum field is out of range", s->id);
    char dropout[32], scale[32];
    TRY(fattn_spec_format_double(s->dropout_p, dropout, sizeof dropout));
    if (s->attn_scale_set)
        TRY(fattn_spec_format_double(s->attn_scale, scale, sizeof scale));
    else
        strcpy(scale, "null");

    sbuf b = {0};
    bool first = true;
    sb_put(&b, "{", 1);
    /* Keys in sorted order (spec_keys; tests check the order). */
    sb_key(&b, "attn_scale", &first);
    sb_str(&b, scale);
    sb_key(&b, "b", &first);
    sb_fmt(&b, "%" PRId64, s->b);
    sb_key(&b, "bias", &first);
    sb_json_str(&b, bias);
    sb_key(&b, "bias_shape", &first);
    sb_json_str(&b, bshape);
    sb_key(&b, "bottom_right_diagonal", &first);
    sb_str(&b, s->bottom_right_diagonal == FATTN_TRISTATE_NULL
                   ? "null"
                   : tf(s->bottom_right_diagonal == FATTN_TRISTATE_TRUE));
    sb_key(&b, "d_qk", &first);
    sb_fmt(&b, "%" PRId64, s->d_qk);
    sb_key(&b, "d_v", &first);
    sb_fmt(&b, "%" PRId64, s->d_v);
    sb_key(&b, "deterministic", &first);
    sb_str(&b, tf(s->deterministic));
    /* Written only when set, as raw_func_args. */
    if (s->cpu_offload) {
        sb_key(&b, "cpu_offload", &first);
        sb_str(&b, "true");
    }
    sb_key(&b, "dropout_p", &first);
    sb_str(&b, dropout);
    sb_key(&b, "dtype", &first);
    sb_json_str(&b, dtype);
    /* Written only when set, as raw_func_args. */
    if (s->expect_refusal) {
        sb_key(&b, "expect_refusal", &first);
        sb_str(&b, "{\"rule\":");
        sb_json_str(&b, s->refusal_rule);
        sb_str(&b, ",\"status\":");
        sb_json_str(&b, fattn_status_name(s->refusal_status));
        sb_str(&b, "}");
    }
    sb_key(&b, "fast_zero_fill", &first);
    sb_str(&b, tf(s->fast_zero_fill));
    /* Written only when set, every member filled in. */
    if (s->fp8) {
        sb_key(&b, "fp8", &first);
        sb_fmt(&b, "{\"bf16_backward\":%s,\"dpa_bwd\":%s,\"input_fp8\":%s,\"o_in_f16\":%s,"
                   "\"output_fp8\":%s,\"recipe\":",
               tf(s->bf16_backward), tf(s->fp8_dpa_bwd), tf(s->fp8_input), tf(s->fp8_o_in_f16),
               tf(s->fp8_output));
        sb_json_str(&b, fattn_fp8_recipe_name(s->fp8_recipe));
        sb_str(&b, "}");
    }
    sb_key(&b, "h", &first);
    sb_fmt(&b, "%" PRId64, s->h);
    sb_key(&b, "hg", &first);
    sb_fmt(&b, "%" PRId64, s->hg);
    sb_key(&b, "id", &first);
    sb_json_str(&b, s->id);
    sb_key(&b, "is_training", &first);
    sb_str(&b, tf(s->is_training));
    sb_key(&b, "layout", &first);
    sb_json_str(&b, layout);
    sb_key(&b, "mask", &first);
    sb_json_str(&b, mask);
    sb_key(&b, "pad_between_seqs", &first);
    sb_str(&b, tf(s->pad_between_seqs));
    /* Written only when set, so that run files of the cases without it
     * keep their bytes. */
    if (s->raw_func_args) {
        sb_key(&b, "raw_func_args", &first);
        sb_str(&b, "true");
    }
    sb_key(&b, "return_max_logit", &first);
    sb_str(&b, tf(s->return_max_logit));
    sb_key(&b, "rng_offset", &first);
    sb_fmt(&b, "%" PRId64, s->rng_offset);
    sb_key(&b, "rng_seed", &first);
    sb_fmt(&b, "%" PRId64, s->rng_seed);
    sb_key(&b, "seed", &first);
    sb_fmt(&b, "%" PRId64, s->seed);
    sb_key(&b, "seqlens_kv", &first);
    sb_list(&b, s->seqlens_kv, s->b);
    sb_key(&b, "seqlens_q", &first);
    sb_list(&b, s->seqlens_q, s->b);
    sb_key(&b, "skv", &first);
    sb_fmt(&b, "%" PRId64, s->skv);
    sb_key(&b, "softmax", &first);
    sb_json_str(&b, softmax);
    sb_key(&b, "sq", &first);
    sb_fmt(&b, "%" PRId64, s->sq);
    sb_key(&b, "window", &first);
    if (s->window_set)
        sb_fmt(&b, "[%" PRId64 ",%" PRId64 "]", s->window[0], s->window[1]);
    else
        sb_str(&b, "null");
    sb_put(&b, "}", 1);
    if (b.oom) {
        free(b.p);
        return fattn_error(FATTN_E_NOMEM, "spec '%s': out of memory writing canonical form", s->id);
    }
    *out = b.p;
    return FATTN_OK;
}

/* ------------------------------------------------------------------------ */
/* Summary and globs                                                        */
/* ------------------------------------------------------------------------ */

fattn_status fattn_spec_summary(const fattn_spec *s, char *buf, size_t n)
{
    if (n == 0)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_spec_summary: empty buffer");
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
    if (s->bottom_right_diagonal != FATTN_TRISTATE_NULL)
        sb_fmt(&b, " bottom_right=%s", tf(s->bottom_right_diagonal == FATTN_TRISTATE_TRUE));
    if (s->bias == FATTN_BIAS_POST_SCALE_BIAS)
        sb_fmt(&b, " bias=post_scale_bias/%s", fattn_bias_shape_name(s->bias_shape));
    else if (s->bias != FATTN_BIAS_NO_BIAS)
        sb_fmt(&b, " bias=%s", fattn_bias_type_name(s->bias));
    if (s->softmax != FATTN_SOFTMAX_VANILLA)
        sb_fmt(&b, " softmax=%s", fattn_softmax_type_name(s->softmax));
    if (s->dropout_p != 0.0) {
        char p[32];
        if (fattn_spec_format_double(s->dropout_p, p, sizeof p) == FATTN_OK)
            sb_fmt(&b, " dropout=%s", p);
    }
    if (s->attn_scale_set) {
        char p[32];
        if (fattn_spec_format_double(s->attn_scale, p, sizeof p) == FATTN_OK)
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
    if (s->raw_func_args)
        sb_str(&b, " raw_func_args");
    if (s->cpu_offload)
        sb_str(&b, " cpu_offload");
    if (s->fp8)
        sb_fmt(&b, " fp8:%s%s%s%s", fattn_fp8_recipe_name(s->fp8_recipe),
               s->fp8_input ? "+in" : "", s->fp8_output ? "+out" : "",
               s->fp8_dpa_bwd ? "" : "+bwd16");
    if (s->expect_refusal)
        sb_fmt(&b, " refused:%s", s->refusal_rule);
    if (b.oom) {
        free(b.p);
        return fattn_error(FATTN_E_NOMEM, "spec '%s': out of memory", s->id);
    }
    snprintf(buf, n, "%s", b.p);
    free(b.p);
    return FATTN_OK;
}
