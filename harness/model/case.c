/* The resolved model of a case (case.h): everything the harness derives
 * from a spec before any tensor exists. The rules are inputs.h's. */
#include "case.h"
#include "case_features.h"

#include <assert.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/philox.h"

/* Philox streams of the sequence tables (docs/numerics.md "Random
 * numbers"); inputs.c holds the tensors' streams 1..6. */
enum {
    STREAM_SEQLEN_Q = 7,
    STREAM_SEQLEN_KV = 8,
    STREAM_GAP_Q = 9,
    STREAM_GAP_KV = 10,
};

void fh_case_free(fh_case *c)
{
    if (!c)
        return;
    free(c->seqlens_q);
    free(c->seqlens_kv);
    free(c->cu_seqlens_q);
    free(c->cu_seqlens_kv);
    free(c->cu_seqlens_q_padded);
    free(c->cu_seqlens_kv_padded);
    memset(c, 0, sizeof *c);
}

float fh_case_attn_scale_arg(const fh_spec *s)
{
    if (s->attn_scale_set)
        return (float)s->attn_scale;
    return s->raw_func_args ? (float)NAN : (float)(1.0 / sqrt((double)s->d_qk));
}

int fh_case_bottom_right_diagonal_arg(const fh_spec *s)
{
    if (s->raw_func_args) /* a direct caller: as given */
        return s->bottom_right_diagonal == FH_TRISTATE_NULL      ? -1
               : s->bottom_right_diagonal == FH_TRISTATE_TRUE ? 1
                                                                   : 0;
    /* dot_product_attention.py:2398-2406 (2.20.2; 2.19.0 alike) */
    if (s->mask == FATTN_MASK_CAUSAL || s->mask == FATTN_MASK_PADDING_CAUSAL)
        return 0;
    if (fattn_mask_is_bottom_right(s->mask) || s->bottom_right_diagonal == FH_TRISTATE_NULL)
        return 1;
    return s->bottom_right_diagonal == FH_TRISTATE_TRUE;
}

fattn_status fh_case_window(const fh_spec *s, int64_t out[2], bool *warned)
{
    if (warned)
        *warned = false;
    if (s->raw_func_args && s->window_set) { /* a direct caller's, as given */
        out[0] = s->window[0];
        out[1] = s->window[1];
        return FATTN_OK;
    }
    int64_t w[2] = {s->window[0], s->window[1]};
    fattn_status st = fattn_window_normalize(s->mask, s->window_set, w, out, warned);
    /* the support table's window_mask row (docs/features.md) names this
     * refusal: DotProductAttention's check_set_window_size asserts before
     * FusedAttnFunc runs (TE 2.20.2 utils.py:3016, 2.19.0 utils.py:2697) */
    if (st == FATTN_E_INVALID_CASE)
        return fattn_error(st, "case %s: window: rule window_mask: %s", s->id, fattn_last_error());
    if (st != FATTN_OK)
        return fattn_error(st, "case %s: window: %s", s->id, fattn_last_error());
    return FATTN_OK;
}

static fattn_status resolve_config(const fh_spec *s, fh_case *c)
{
    fattn_status st = fh_case_window(s, c->window, NULL);
    if (st != FATTN_OK)
        return st;
    c->bottom_right_diagonal_arg = fh_case_bottom_right_diagonal_arg(s);
    c->bottom_right_diagonal = c->bottom_right_diagonal_arg < 0
                                   ? fattn_bottom_right_default_fwd(s->mask) /* fused_attn.py:325 */
                                   : c->bottom_right_diagonal_arg == 1;
    c->layout_group = fattn_layout_group(s->layout);
    c->q_format = fattn_layout_q_format(s->layout);
    c->kv_format = fattn_layout_kv_format(s->layout);
    c->thd = c->q_format == FATTN_FORMAT_THD || c->kv_format == FATTN_FORMAT_THD;
    c->padding = fattn_mask_has_padding(s->mask) || c->thd;
    c->self_packed = c->layout_group == FATTN_LAYOUT_GROUP_3HD ||
                     c->layout_group == FATTN_LAYOUT_GROUP_H3D;
    c->attn_scale = s->attn_scale_set ? (float)s->attn_scale
                                      : (float)(1.0 / sqrt((double)s->d_qk));
    c->attn_scale_arg = fh_case_attn_scale_arg(s);
    /* FusedAttention passes 0.0 when not training (2.20.2 backends.py:2603);
     * raw_func_args: a direct FusedAttnFunc caller's value as given. */
    c->dropout_p = (s->is_training || s->raw_func_args) ? (float)s->dropout_p : 0.0f;
    return FATTN_OK;
}

/* Lengths, prefix sums and gapped offsets of every sequence. Without a
 * padding mask every length is the maximum; self-packed layouts give kv
 * the q side's lengths and gaps (one token dimension). */
static fattn_status resolve_seqlens(const fh_spec *s, fh_case *c)
{
    uint64_t seed = (uint64_t)s->seed;
    int64_t b = s->b;
    assert(b >= 1 && s->sq >= 1 && s->skv >= 1);
    c->seqlens_q = calloc((size_t)b, sizeof(int64_t));
    c->seqlens_kv = calloc((size_t)b, sizeof(int64_t));
    c->cu_seqlens_q = calloc((size_t)b + 1, sizeof(int64_t));
    c->cu_seqlens_kv = calloc((size_t)b + 1, sizeof(int64_t));
    c->cu_seqlens_q_padded = calloc((size_t)b + 1, sizeof(int64_t));
    c->cu_seqlens_kv_padded = calloc((size_t)b + 1, sizeof(int64_t));
    if (!c->seqlens_q || !c->seqlens_kv || !c->cu_seqlens_q || !c->cu_seqlens_kv ||
        !c->cu_seqlens_q_padded || !c->cu_seqlens_kv_padded)
        return fattn_error(FATTN_E_NOMEM, "case %s: sequence tables", s->id);
    int64_t *off_q = c->cu_seqlens_q_padded, *off_kv = c->cu_seqlens_kv_padded;
    for (int64_t bi = 0; bi < b; bi++) {
        int64_t lq = s->sq, lkv = s->skv;
        if (c->padding) {
            lq = s->seqlens_q ? s->seqlens_q[bi]
                              : 1 + (int64_t)(fattn_philox_u32(seed, STREAM_SEQLEN_Q, (uint64_t)bi) %
                                              (uint64_t)s->sq);
            lkv = s->seqlens_kv ? s->seqlens_kv[bi]
                                : 1 + (int64_t)(fattn_philox_u32(seed, STREAM_SEQLEN_KV,
                                                                 (uint64_t)bi) % (uint64_t)s->skv);
        }
        if (c->self_packed)
            lkv = lq;
        if (lq < 0 || lq > s->sq || lkv < 0 || lkv > s->skv)
            return fattn_error(FATTN_E_INVALID_CASE,
                               "case %s: sequence %lld has lengths (%lld, %lld) outside "
                               "[0, sq=%lld] x [0, skv=%lld]", s->id, (long long)bi,
                               (long long)lq, (long long)lkv, (long long)s->sq,
                               (long long)s->skv);
        int64_t gq = 0, gkv = 0;
        if (s->pad_between_seqs && s->cp) {
            /* context parallelism: each sequence padded to a multiple of
             * 2 * cp_size (TE's pad_thd_sequences_for_cp, context_parallel.py
             * 2.20.2:5783; DualChunkSwap splits it into 2 * cp_size chunks) */
            int64_t m = 2 * s->cp_size;
            gq = (m - lq % m) % m;
            gkv = (m - lkv % m) % m;
        } else if (s->pad_between_seqs) {
            gq = (int64_t)(fattn_philox_u32(seed, STREAM_GAP_Q, (uint64_t)bi) % 4u);
            gkv = (int64_t)(fattn_philox_u32(seed, STREAM_GAP_KV, (uint64_t)bi) % 4u);
        }
        if (c->self_packed)
            gkv = gq;
        c->seqlens_q[bi] = lq;
        c->seqlens_kv[bi] = lkv;
        c->cu_seqlens_q[bi + 1] = c->cu_seqlens_q[bi] + lq;
        c->cu_seqlens_kv[bi + 1] = c->cu_seqlens_kv[bi] + lkv;
        off_q[bi + 1] = off_q[bi] + lq + gq;
        off_kv[bi + 1] = off_kv[bi] + lkv + gkv;
    }
    c->t_q = c->q_format == FATTN_FORMAT_THD ? off_q[b] : 0;
    c->t_kv = c->kv_format == FATTN_FORMAT_THD ? off_kv[b] : 0;
    if ((c->q_format == FATTN_FORMAT_THD && c->t_q == 0) ||
        (c->kv_format == FATTN_FORMAT_THD && c->t_kv == 0))
        return fattn_error(FATTN_E_INVALID_CASE, "case %s: THD tensor with no tokens", s->id);
    /* A non-THD side's padded offsets are its plain ones (FusedAttention
     * sets them so when the caller gives none). */
    if (c->q_format != FATTN_FORMAT_THD)
        memcpy(off_q, c->cu_seqlens_q, ((size_t)b + 1) * sizeof(int64_t));
    if (c->kv_format != FATTN_FORMAT_THD)
        memcpy(off_kv, c->cu_seqlens_kv, ((size_t)b + 1) * sizeof(int64_t));
    return FATTN_OK;
}

static void set_shape(fh_case_shape *t, fattn_dtype dtype, int ndim, const int64_t *shape)
{
    assert(ndim >= 1 && ndim <= FATTN_MAX_DIMS);
    t->present = true;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
}

/* Logical shapes: q [.., h, d_qk], k [.., hg, d_qk], v [.., hg, d_v] in
 * their formats; out and d_out as q with d_v; the bias [b|1, h|1, sq|1,
 * skv] by bias_shape; softmax_offset [1, h, 1, 1] float32; gradients as
 * what they differentiate, for training cases. */
static void resolve_tensors(const fh_spec *s, fh_case *c)
{
    fh_case_tensors *t = &c->t;
    int64_t sh[4];
    int n;
    n = fattn_format_shape(c->q_format, s->b, s->sq, c->t_q, s->h, s->d_qk, sh);
    set_shape(&t->q, s->dtype, n, sh);
    n = fattn_format_shape(c->kv_format, s->b, s->skv, c->t_kv, s->hg, s->d_qk, sh);
    set_shape(&t->k, s->dtype, n, sh);
    n = fattn_format_shape(c->kv_format, s->b, s->skv, c->t_kv, s->hg, s->d_v, sh);
    set_shape(&t->v, s->dtype, n, sh);
    if (s->paged) {
        int64_t pps = s->skv / s->page_size;
        bool bshd = c->kv_format == FATTN_FORMAT_BSHD;
        int64_t kc[4] = {bshd ? s->num_pages : s->page_size, bshd ? s->page_size : s->num_pages,
                         s->hg, s->d_qk};
        set_shape(&t->k, s->dtype, 4, kc);
        kc[3] = s->d_v;
        set_shape(&t->v, s->dtype, 4, kc);
        /* TE's InferenceParams keeps a table of max_batch_size rows */
        int64_t pt[2] = {s->max_batch_size ? s->max_batch_size : s->b, pps};
        set_shape(&t->page_table_k, FATTN_DTYPE_INT32, 2, pt);
        set_shape(&t->page_table_v, FATTN_DTYPE_INT32, 2, pt);
    }
    n = fattn_format_shape(c->q_format, s->b, s->sq, c->t_q, s->h, s->d_v, sh);
    set_shape(&t->out, s->dtype, n, sh);
    if (fh_spec_has_backward(s))
        set_shape(&t->d_out, s->dtype, n, sh);
    if (s->bias == FATTN_BIAS_POST_SCALE_BIAS || s->bias == FATTN_BIAS_PRE_SCALE_BIAS) {
        const char *name = fh_bias_shape_name(s->bias_shape);
        int64_t bs[4] = {name[0] == 'b' ? s->b : 1, name[1] == 'h' ? s->h : 1,
                         name[2] == 's' ? s->sq : 1, s->skv};
        set_shape(&t->attn_bias, s->dtype, 4, bs);
    }
    if (s->softmax != FATTN_SOFTMAX_VANILLA) {
        int64_t os[4] = {1, s->h, 1, 1};
        set_shape(&t->softmax_offset, FATTN_DTYPE_FLOAT32, 4, os);
    }
    if (fh_spec_has_backward(s)) {
        t->dq = t->q;
        t->dk = t->k;
        t->dv = t->v;
        t->d_bias = t->attn_bias;
        t->d_softmax_offset = t->softmax_offset;
    }
    c->fp8_inputs = s->fp8 && s->fp8_input;
    c->fp8_d_out = c->fp8_inputs && s->fp8_output && s->fp8_recipe == FATTN_FP8_RECIPE_DELAYED &&
                   fh_spec_has_backward(s);
    c->fp8_grads = c->fp8_inputs && s->fp8_dpa_bwd && !s->bf16_backward &&
                   fh_spec_has_backward(s);
    if (c->fp8_inputs)
        t->q.dtype = t->k.dtype = t->v.dtype = FATTN_DTYPE_FLOAT8_E4M3FN;
    if (c->fp8_d_out)
        t->d_out.dtype = FATTN_DTYPE_FLOAT8_E5M2;
    if (c->fp8_grads)
        t->dq.dtype = t->dk.dtype = t->dv.dtype = FATTN_DTYPE_FLOAT8_E5M2;
}

fattn_status fh_case_resolve(const fh_spec *spec, fh_case *out)
{
    memset(out, 0, sizeof *out);
    out->spec = spec;
    fattn_status st;
    if ((st = resolve_config(spec, out)) != FATTN_OK ||
        (st = resolve_seqlens(spec, out)) != FATTN_OK) {
        fh_case_free(out);
        return st;
    }
    resolve_tensors(spec, out);
    return FATTN_OK;
}

/* ---- the model as JSON (docs/cases.md) ----------------------------------- */

static json_t *int_array(const int64_t *v, int64_t n)
{
    json_t *a = json_array();
    for (int64_t i = 0; a && i < n; i++) {
        if (json_array_append_new(a, json_integer((json_int_t)v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *tensors_json(const fh_case_tensors *t)
{
    json_t *o = json_object();
    bool ok = o != NULL;
#define FH_CASE_PUT(name)                                                       \
    if (ok && t->name.present) {                                                \
        json_t *e = json_pack("{s:s,s:o*}", "dtype", fattn_dtype_name(t->name.dtype), \
                              "shape", int_array(t->name.shape, t->name.ndim)); \
        ok = e && json_object_set_new(o, #name, e) == 0;                        \
    }
    FH_CASE_TENSORS(FH_CASE_PUT)
#undef FH_CASE_PUT
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Values jansson cannot write in fattn's canonical form (the spec's text,
 * floats in the shortest round-trip form, fh_spec_format_double): the
 * object holds the string "\x01" and the slot's digit in their place, which
 * JSON_ENSURE_ASCII writes as "\u0001D" — a text no other value of a case
 * can hold (ids and names are ASCII letters, digits and ._-) — and the
 * dumped line gets the raw text spliced in. */
enum { RAW_SPEC, RAW_SCALE, RAW_SCALE_ARG, RAW_DROPOUT, RAW_SLOTS };

static json_t *raw_slot(int k)
{
    char mark[3] = {'\x01', (char)('0' + k), '\0'};
    return json_string(mark);
}

/* {"id", "spec", then the resolved values} or, for a spec that does not
 * resolve, {"id", "spec", "error"}; raw[] the slots' texts (malloc'd spec,
 * formatted numbers in num[]). */
static json_t *case_json(const fh_spec *s, char *raw[RAW_SLOTS], char num[][32])
{
    if (fh_spec_canonical(s, &raw[RAW_SPEC]) != FATTN_OK)
        return NULL;
    json_t *spec = raw_slot(RAW_SPEC);
    fh_case c;
    if (fh_case_resolve(s, &c) != FATTN_OK)
        return json_pack("{s:s,s:o*,s:s}", "id", s->id, "spec", spec, "error", fattn_last_error());
    if (fh_spec_format_double((double)c.attn_scale, num[0], 32) != FATTN_OK ||
        fh_spec_format_double((double)c.dropout_p, num[2], 32) != FATTN_OK ||
        (!isnan(c.attn_scale_arg) &&
         fh_spec_format_double((double)c.attn_scale_arg, num[1], 32) != FATTN_OK)) {
        json_decref(spec);
        fh_case_free(&c);
        return NULL;
    }
    raw[RAW_SCALE] = num[0];
    raw[RAW_SCALE_ARG] = num[1];
    raw[RAW_DROPOUT] = num[2];
    int64_t b = s->b;
    json_t *o = json_pack(
        "{s:s,s:o*,s:s,s:s,s:s,s:b,s:b,s:b,s:[I,I],s:b,s:o*,s:o*,s:o*,s:b,s:o*,s:I,s:I,"
        "s:o*,s:o*,s:o*,s:o*,s:o*,s:o*,s:o*}",
        "id", s->id, "spec", spec, "layout_group", fattn_layout_group_name(c.layout_group),
        "q_format", fattn_format_name(c.q_format), "kv_format", fattn_format_name(c.kv_format),
        "thd", c.thd, "padding", c.padding, "self_packed", c.self_packed, "window",
        (json_int_t)c.window[0], (json_int_t)c.window[1], "bottom_right_diagonal",
        c.bottom_right_diagonal, "bottom_right_diagonal_arg",
        c.bottom_right_diagonal_arg < 0 ? json_null() : json_boolean(c.bottom_right_diagonal_arg),
        "attn_scale", raw_slot(RAW_SCALE), "attn_scale_arg",
        isnan(c.attn_scale_arg) ? json_null() : raw_slot(RAW_SCALE_ARG),
        "attn_scale_default",
        !s->attn_scale_set, "dropout_p", raw_slot(RAW_DROPOUT), "t_q", (json_int_t)c.t_q, "t_kv",
        (json_int_t)c.t_kv, "seqlens_q", int_array(c.seqlens_q, b), "seqlens_kv",
        int_array(c.seqlens_kv, b), "cu_seqlens_q", int_array(c.cu_seqlens_q, b + 1),
        "cu_seqlens_kv", int_array(c.cu_seqlens_kv, b + 1), "cu_seqlens_q_padded",
        c.padding ? int_array(c.cu_seqlens_q_padded, b + 1) : json_null(), "cu_seqlens_kv_padded",
        c.padding ? int_array(c.cu_seqlens_kv_padded, b + 1) : json_null(), "tensors",
        tensors_json(&c.t));
    /* what the cross-case contrast compares cases by (features.h) */
    fh_case_features f;
    fh_case_features_of(&c, &f);
    json_t *jf = o ? json_object() : NULL;
    for (int k = 0; jf && k < FH_FEATURE_COUNT; k++)
        json_object_set_new(jf, fh_feature_name((fh_feature)k), json_string(f.v[k]));
    if (jf)
        json_object_set_new(o, "features", jf);
    fh_case_free(&c);
    return o;
}

/* The line: the dumped object with each slot's mark replaced by its text. */
static char *splice_raw(const char *dumped, char *const raw[RAW_SLOTS])
{
    size_t len = strlen(dumped) + 1;
    for (int k = 0; k < RAW_SLOTS; k++)
        len += raw[k] ? strlen(raw[k]) : 0;
    char *out = malloc(len), *o = out;
    for (const char *p = dumped; out && *p;) {
        /* the mark: a quote, \u0001, the slot's digit, a quote */
        if (!strncmp(p, "\"\\u0001", 7) && p[7] >= '0' && p[7] < '0' + RAW_SLOTS &&
            p[8] == '"' && raw[p[7] - '0']) {
            size_t n = strlen(raw[p[7] - '0']);
            memcpy(o, raw[p[7] - '0'], n);
            o += n;
            p += 9;
        } else {
            *o++ = *p++;
        }
    }
    if (out)
        *o = '\0';
    return out;
}

/* The resolved model of the case step k of s's schedule runs as (a B's is
 * its forward's), or "null" for an update or a checkpoint. */
static fattn_status step_json(const fh_spec *s, const fh_kv_plan *plan, int64_t k,
                              char **out)
{
    const fh_step *st = &s->schedule->steps[k - 1];
    if (st->kind == FH_STEP_U || st->kind == FH_STEP_X) {
        *out = strdup("null");
        return *out ? FATTN_OK : fattn_error(FATTN_E_NOMEM, "resolved cases: out of memory");
    }
    int64_t of = st->kind == FH_STEP_B ? fh_schedule_forward_of(s->schedule, k) : k;
    fh_spec one;
    fattn_status rc = fh_spec_step(s, plan, of, &one);
    if (rc != FATTN_OK)
        goto out;
    rc = fh_case_json_line(&one, out);
out:
    fh_spec_free(&one);
    return rc;
}

/* `,"steps":[...]` appended to a schedule's resolved line (before its
 * closing brace): each step's own resolved model. */
static fattn_status append_steps(const fh_spec *s, char **line)
{
    fh_kv_plan plan;
    bool kv = fh_schedule_is_cache(s->schedule);
    char *buf = NULL;
    fattn_status st = kv ? fh_spec_kv_plan(s, &plan) : FATTN_OK;
    if (st != FATTN_OK)
        goto out; /* fh_kv_plan_make leaves a failed plan zeroed: freeing it is a no-op */
    size_t len = strlen(*line), cap = len + 16;
    buf = malloc(cap);
    if (!buf) {
        st = fattn_error(FATTN_E_NOMEM, "resolved cases: out of memory");
        goto out;
    }
    memcpy(buf, *line, len - 1); /* without the closing brace */
    len--;
    memcpy(buf + len, ",\"steps\":[", 10);
    len += 10;
    for (int64_t k = 1; k <= s->schedule->n; k++) {
        char *one = NULL;
        if ((st = step_json(s, kv ? &plan : NULL, k, &one)) != FATTN_OK)
            goto out;
        size_t n = strlen(one);
        char *nb = realloc(buf, len + n + 4);
        if (!nb) {
            free(one);
            st = fattn_error(FATTN_E_NOMEM, "resolved cases: out of memory");
            goto out;
        }
        buf = nb;
        if (k > 1)
            buf[len++] = ',';
        memcpy(buf + len, one, n);
        len += n;
        free(one);
    }
    memcpy(buf + len, "]}", 3);
    free(*line);
    *line = buf;
    buf = NULL;
out:
    free(buf);
    if (kv)
        fh_kv_plan_free(&plan);
    return st;
}

fattn_status fh_case_json_line(const fh_spec *s, char **out)
{
    char *raw[RAW_SLOTS] = {NULL}, num[3][32];
    *out = NULL;
    json_t *o = case_json(s, raw, num);
    char *dumped = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (dumped)
        *out = splice_raw(dumped, raw);
    free(dumped);
    free(raw[RAW_SPEC]);
    json_decref(o);
    if (!*out)
        return fattn_error(FATTN_E_NOMEM, "resolved cases: case %s: out of memory", s->id);
    fattn_status st = FATTN_OK;
    if (s->schedule && (*out)[strlen(*out) - 1] == '}' &&
        (st = append_steps(s, out)) != FATTN_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

fattn_status fh_case_list_json(const fh_spec *const *specs, size_t n, char **out)
{
    /* One case per line: an array a person can read and a tool can parse. */
    *out = NULL;
    size_t len = 4;
    char **lines = calloc(n ? n : 1, sizeof *lines);
    if (!lines)
        return fattn_error(FATTN_E_NOMEM, "resolved cases");
    fattn_status st = FATTN_OK;
    for (size_t i = 0; i < n; i++) {
        if ((st = fh_case_json_line(specs[i], &lines[i])) != FATTN_OK)
            goto out;
        len += strlen(lines[i]) + 2;
    }
    char *buf = malloc(len), *p = buf;
    if (!buf) {
        st = fattn_error(FATTN_E_NOMEM, "resolved cases");
        goto out;
    }
    *p++ = '[';
    for (size_t i = 0; i < n; i++) {
        size_t k = strlen(lines[i]);
        memcpy(p, lines[i], k);
        p += k;
        if (i + 1 < n)
            *p++ = ',';
        *p++ = '\n';
    }
    if (n == 0)
        *p++ = '\n';
    *p++ = ']';
    *p = '\0';
    assert((size_t)(p - buf) < len);
    *out = buf;
out:
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
    return st;
}
