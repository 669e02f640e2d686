/* Suite "cudnn-gpu": the cuDNN engine on a GPU, for every case of the CPU
 * test matrix (tests/cases.h), compared with the CPU engine: the forward
 * (below) and the backward (further down: dQ, dK, dV, dBias, dSoftmaxOffset
 * against the CPU engine in both dQ variants, poison, repeat identity; a
 * large deterministic-repeat check). `test_cudnn_gpu --determinism FILE`
 * measures which backward outputs repeat bitwise per feature row at
 * b4 h16 s2048 d128 and writes FILE (docs/determinism.md).
 *
 * Without a CUDA device (or without cuDNN) it prints the TAP plan
 * "1..0 # SKIP no CUDA device" and exits 0. With one, per case:
 *   - a case the engine refuses with FATTN_E_UNSUPPORTED passes as skipped
 *     (its reason logged);
 *   - O and Stats on their defined regions are within per-dtype tolerances
 *     of the CPU engine's (dropout cases: Stats only, since cuDNN's dropout
 *     bits are its own — docs/numerics.md), and finite;
 *   - everything outside the defined regions still holds the poison;
 *   - a second forward on fresh buffers is bitwise identical.
 * With $FATTN_GPU_RESULTS set, one JSON object per case is appended to that
 * file (tools/gpu-ci.sh assembles docs/gpu-runs/<date>.json from it).
 *
 * Check runs without fork here: CUDA cannot be used in a child forked after
 * the parent initialised it, and one engine (one plan cache) serves all.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cases.h"
#include "fattn/cudnn.h"
#include "fattn/dtype.h"
#include "fattn/te.h"
#include "fattn_config.h"
#include "fattn_test.h"

static fattn_engine *g_cpu, *g_gpu;

/* Forward only (two-call protocol) on fresh poisoned buffers. */
static fattn_status forward(const tcase *c, tcase_buffers *buf, fattn_engine *e)
{
    fattn_status st = tcase_setup(c, buf);
    if (st != FATTN_OK)
        return st;
    memset(&buf->aux_fwd, 0, sizeof buf->aux_fwd);
    fattn_fwd_params fp = tcase_fwd_params(c, buf);
    if ((st = fattn_engine_fwd(e, &fp)) != FATTN_OK)
        return st;
    fattn_tensor *t0 = &buf->aux_fwd.t[0];
    if ((st = fattn_tensor_alloc(&buf->stats, t0->dtype, t0->ndim, t0->shape)) != FATTN_OK)
        return st;
    fattn_tensor_fill_bits(&buf->stats, UINT64_MAX);
    *t0 = buf->stats;
    if (c->return_max_logit) {
        fattn_tensor *t1 = &buf->aux_fwd.t[1];
        if ((st = fattn_tensor_alloc(&buf->max, t1->dtype, t1->ndim, t1->shape)) != FATTN_OK)
            return st;
        fattn_tensor_fill_bits(&buf->max, UINT64_MAX);
        *t1 = buf->max;
    }
    return fattn_engine_fwd(e, &fp);
}

static double as_double(const fattn_tensor *t, int64_t off)
{
    const char *p = (const char *)t->data;
    switch (t->dtype) {
    case FATTN_DTYPE_FLOAT16: return fattn_f16_to_f32(((const fattn_f16 *)p)[off]);
    case FATTN_DTYPE_BFLOAT16: return fattn_bf16_to_f32(((const fattn_bf16 *)p)[off]);
    default: return ((const float *)p)[off];
    }
}

static int64_t numel_bytes(const fattn_tensor *t)
{
    int64_t e = 1;
    for (int i = 0; i < t->ndim; i++)
        e += (t->shape[i] - 1) * t->strides[i];
    return e;
}

/* Element offsets (through strides) of all elements of a view, with a flag
 * saying whether each is in the defined region: for O rows of valid query
 * positions; for Stats the same positions. */
typedef struct cmp_result {
    double max_err_o, max_err_stats;
    long bad_o, bad_stats, poison_broken, nonfinite;
} cmp_result;

static void compare(const tcase *c, const tcase_buffers *cb, const tcase_buffers *gb,
                    bool compare_o, cmp_result *r)
{
    memset(r, 0, sizeof *r);
    double tol = c->dtype == FATTN_DTYPE_BFLOAT16 ? 1.6e-2 : 2e-3;
    const fattn_tensor *co = &cb->o, *go = &gb->o;
    int64_t ext = numel_bytes(co);
    size_t esz = fattn_dtype_size(co->dtype);
    char *mask = calloc((size_t)ext, 1);
    fattn_qkv_format f = fattn_layout_q_format(c->layout);
    bool pad = fattn_mask_has_padding(c->mask);
    const int64_t *st = co->strides;
    for (int64_t bi = 0; bi < c->b; bi++) {
        int64_t rows = pad ? cb->seqlens_q[bi] : c->sq;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t n = 0; n < c->h; n++)
                for (int64_t x = 0; x < c->dv; x++) {
                    int64_t off;
                    switch (f) {
                    case FATTN_FORMAT_SBHD: off = i * st[0] + bi * st[1] + n * st[2] + x * st[3]; break;
                    case FATTN_FORMAT_BHSD: off = bi * st[0] + n * st[1] + i * st[2] + x * st[3]; break;
                    case FATTN_FORMAT_THD:
                        off = ((int64_t)cb->offs_q[bi] + i) * st[0] + n * st[1] + x * st[2];
                        break;
                    default: off = bi * st[0] + i * st[1] + n * st[2] + x * st[3]; break;
                    }
                    mask[off] = 1;
                }
    }
    for (int64_t e = 0; e < ext; e++) {
        if (mask[e]) {
            double a = as_double(co, e), g = as_double(go, e);
            if (!isfinite(g) && !(isnan(a) && isnan(g))) {
                if (!(isinf(a) && a == g))
                    r->nonfinite++;
            }
            if (compare_o) {
                double err = fabs(a - g);
                if (isnan(a) != isnan(g) || err > tol + tol * fabs(a))
                    r->bad_o++;
                if (err > r->max_err_o)
                    r->max_err_o = err;
            }
        } else if (memcmp((const char *)co->data + e * (int64_t)esz,
                          (const char *)go->data + e * (int64_t)esz, esz) != 0) {
            r->poison_broken++;
        }
    }
    free(mask);
    /* Stats: compare every element; undefined ones must both be poison */
    const fattn_tensor *cs = &cb->stats, *gs = &gb->stats;
    int64_t ns = fattn_tensor_numel(cs);
    const float *a = cs->data, *g = gs->data;
    for (int64_t e = 0; e < ns; e++) {
        uint32_t ab, gbits;
        memcpy(&ab, &a[e], 4);
        memcpy(&gbits, &g[e], 4);
        if (ab == 0xFFFFFFFFu || gbits == 0xFFFFFFFFu) {
            if (ab != gbits)
                r->poison_broken++;
            continue;
        }
        if (isinf(a[e]) || isinf(g[e])) {
            if (a[e] != g[e])
                r->bad_stats++;
            continue;
        }
        double err = fabs((double)a[e] - (double)g[e]);
        if (isnan(g[e]) || err > 2e-4 + 2e-4 * fabs((double)a[e]))
            r->bad_stats++;
        if (err > r->max_err_stats)
            r->max_err_stats = err;
    }
}

static void log_result(const tcase *c, const char *status, const char *reason,
                       const cmp_result *r)
{
    const char *path = getenv("FATTN_GPU_RESULTS");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    char clean[512];
    size_t j = 0;
    for (const char *s = reason ? reason : ""; *s && j + 2 < sizeof clean; s++) {
        char ch = *s;
        if (ch == '"' || ch == '\\')
            clean[j++] = '\\';
        clean[j++] = (ch == '\n' || ch == '\t') ? ' ' : ch;
    }
    clean[j] = 0;
    fprintf(f, "{\"id\":\"%s\",\"status\":\"%s\",\"reason\":\"%s\",\"route\":\"%s\","
               "\"engine\":\"%s\",\"max_abs_err_o\":%.3e,\"max_abs_err_stats\":%.3e}\n",
            c->id, status, clean, r ? fattn_cudnn_last_route(g_gpu) : "",
            r ? fattn_cudnn_last_tag(g_gpu) : "", r ? r->max_err_o : 0.0,
            r ? r->max_err_stats : 0.0);
    fclose(f);
}

START_TEST(gpu_forward)
{
    const tcase *c = &tcase_table[_i];
    tcase_buffers cb, gb, gb2;
    memset(&cb, 0, sizeof cb);
    memset(&gb, 0, sizeof gb);
    memset(&gb2, 0, sizeof gb2);
    fattn_status st = forward(c, &gb, g_gpu);
    if (st == FATTN_E_UNSUPPORTED) {
        char reason[512];
        snprintf(reason, sizeof reason, "%s", fattn_last_error());
        tcase_teardown(&gb);
        log_result(c, "skip", reason, NULL);
        printf("# skip %s: %s\n", c->id, reason);
        return;
    }
    if (st != FATTN_OK) {
        char reason[512];
        snprintf(reason, sizeof reason, "%s", fattn_last_error());
        tcase_teardown(&gb);
        log_result(c, "fail", reason, NULL);
        ck_abort_msg("%s: %s", c->id, reason);
    }
    ck_assert_int_eq(forward(c, &cb, g_cpu), FATTN_OK);
    cmp_result r;
    compare(c, &cb, &gb, c->dropout == 0.0f || !c->training, &r);
    /* repeat: bitwise */
    ck_assert_int_eq(forward(c, &gb2, g_gpu), FATTN_OK);
    size_t ob = (size_t)numel_bytes(&gb.o) * fattn_dtype_size(gb.o.dtype);
    bool same = memcmp(gb.o.data, gb2.o.data, ob) == 0 &&
                memcmp(gb.stats.data, gb2.stats.data,
                       (size_t)fattn_tensor_numel(&gb.stats) * 4) == 0;
    char reason[256] = "";
    if (r.bad_o || r.bad_stats || r.poison_broken || r.nonfinite || !same)
        snprintf(reason, sizeof reason,
                 "O out of tolerance %ld (max %.3e), Stats %ld (max %.3e), poison broken %ld, "
                 "non-finite %ld, repeat %s", r.bad_o, r.max_err_o, r.bad_stats,
                 r.max_err_stats, r.poison_broken, r.nonfinite, same ? "identical" : "DIFFERS");
    log_result(c, *reason ? "fail" : "pass", reason, &r);
    tcase_teardown(&cb);
    tcase_teardown(&gb);
    tcase_teardown(&gb2);
    ck_assert_msg(!*reason, "%s: %s", c->id, reason);
    char id[128];
    snprintf(id, sizeof id, "cudnn.gpu.%s", c->id);
    fattn_test_mark(id);
}
END_TEST

/* ---- backward ------------------------------------------------------------ */

static long dsink_repeat_diffs; /* of the current backward case */

typedef struct grad_cmp {
    double max_err[5];   /* dq dk dv dbias dsink */
    long bad[5];
    long poison_broken, nonfinite;
    bool dsink_negated;  /* cuDNN's dSink matches -CPU rather than CPU */
} grad_cmp;

static const char *const grad_names[5] = {"dq", "dk", "dv", "dbias", "dsink"};

static double grad_tol(fattn_dtype t)
{
    return t == FATTN_DTYPE_BFLOAT16 ? 1.6e-2 : 2e-3;
}

/* Offset of row (bi, pos, head n) of a 3/4-D view in format f. */
static int64_t row_off(const fattn_tensor *t, fattn_qkv_format f, const int *offs, int64_t bi,
                       int64_t i, int64_t n)
{
    const int64_t *st = t->strides;
    switch (f) {
    case FATTN_FORMAT_SBHD: return i * st[0] + bi * st[1] + n * st[2];
    case FATTN_FORMAT_BHSD: return bi * st[0] + n * st[1] + i * st[2];
    case FATTN_FORMAT_THD: return ((int64_t)offs[bi] + i) * st[0] + n * st[1];
    default: return bi * st[0] + i * st[1] + n * st[2];
    }
}

/* Mark the defined region of gradient view v (which = 0 dq, 1 dk, 2 dv) in
 * the tag array of storage s (tag = which + 1). */
static void mark_grad(const tcase *c, const tcase_buffers *b, const fattn_tensor *v, int which,
                      const fattn_tensor *s, unsigned char *tag)
{
    size_t esz = fattn_dtype_size(v->dtype);
    const char *lo = s->data, *hi = lo + (size_t)fattn_tensor_numel(s) * esz;
    if ((const char *)v->data < lo || (const char *)v->data >= hi)
        return;
    int64_t base = ((const char *)v->data - lo) / (int64_t)esz;
    bool q = which == 0;
    fattn_qkv_format f = q ? fattn_layout_q_format(c->layout) : fattn_layout_kv_format(c->layout);
    bool pad = fattn_mask_has_padding(c->mask);
    int64_t heads = q ? c->h : c->hg, width = which == 2 ? c->dv : c->d;
    for (int64_t bi = 0; bi < c->b; bi++) {
        int64_t rows = q ? (pad ? b->seqlens_q[bi] : c->sq) : (pad ? b->seqlens_kv[bi] : c->skv);
        for (int64_t i = 0; i < rows; i++)
            for (int64_t n = 0; n < heads; n++) {
                int64_t off = base + row_off(v, f, q ? b->offs_q : b->offs_kv, bi, i, n);
                for (int64_t x = 0; x < width; x++)
                    tag[off + x * v->strides[v->ndim - 1]] = (unsigned char)(which + 1);
            }
    }
}

static bool is_poison(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0xFF)
            return false;
    return true;
}

static void cmp_val(grad_cmp *r, int which, double a, double g, double tol)
{
    if (!isfinite(g) && !(isnan(a) && isnan(g)) && !(isinf(a) && a == g))
        r->nonfinite++;
    double err = fabs(a - g);
    if (isnan(a) != isnan(g) || err > tol + tol * fabs(a))
        r->bad[which]++;
    if (err > r->max_err[which])
        r->max_err[which] = err;
}

/* Compare gradients of gb against cb (cb NULL: only poison and finiteness). */
static void compare_grads(const tcase *c, const tcase_buffers *cb, const tcase_buffers *gb,
                          grad_cmp *r)
{
    memset(r, 0, sizeof *r);
    double tol = grad_tol(c->dtype);
    const fattn_tensor *gst[3] = {&gb->dq_storage, &gb->dk_storage, &gb->dv_storage};
    const fattn_tensor *gv[3] = {&gb->dq, &gb->dk, &gb->dv};
    for (int si = 0; si < 3; si++) {
        const fattn_tensor *s = gst[si];
        if (fattn_tensor_is_empty(s))
            continue;
        int64_t n = fattn_tensor_numel(s);
        size_t esz = fattn_dtype_size(s->dtype);
        unsigned char *tag = calloc((size_t)n, 1);
        for (int w = 0; w < 3; w++)
            mark_grad(c, gb, gv[w], w, s, tag);
        const fattn_tensor *cs = cb ? (si == 0 ? &cb->dq_storage : si == 1 ? &cb->dk_storage
                                                                          : &cb->dv_storage)
                                    : NULL;
        for (int64_t e = 0; e < n; e++) {
            const char *gp = (const char *)s->data + (size_t)e * esz;
            if (!tag[e]) {
                if (!is_poison(gp, esz))
                    r->poison_broken++;
                continue;
            }
            double g = as_double(s, e);
            if (!cs) {
                if (!isfinite(g))
                    r->nonfinite++;
                continue;
            }
            cmp_val(r, tag[e] - 1, as_double(cs, e), g, tol);
        }
        free(tag);
    }
    if (!fattn_tensor_is_empty(&gb->d_bias)) {
        int64_t n = fattn_tensor_numel(&gb->d_bias);
        for (int64_t e = 0; e < n; e++) {
            double g = as_double(&gb->d_bias, e);
            if (cb)
                cmp_val(r, 3, as_double(&cb->d_bias, e), g, tol);
            else if (!isfinite(g))
                r->nonfinite++;
        }
    }
    if (!fattn_tensor_is_empty(&gb->d_softmax_offset)) {
        const float *g = gb->d_softmax_offset.data;
        const float *a = cb ? cb->d_softmax_offset.data : NULL;
        double e_pos = 0.0, e_neg = 0.0;
        for (int64_t n = 0; n < c->h; n++) {
            if (a) {
                e_pos = fmax(e_pos, fabs((double)a[n] - g[n]));
                e_neg = fmax(e_neg, fabs((double)a[n] + g[n]));
                cmp_val(r, 4, a[n], g[n], 2e-3);
            } else if (!isfinite(g[n])) {
                r->nonfinite++;
            }
        }
        r->dsink_negated = a && e_neg < e_pos;
    }
}

/* Bitwise differences of every gradient between two runs. */
static long grad_diffs(const tcase_buffers *a, const tcase_buffers *b, long per[5])
{
    const fattn_tensor *ta[5] = {&a->dq_storage, &a->dk_storage, &a->dv_storage, &a->d_bias,
                                 &a->d_softmax_offset};
    const fattn_tensor *tb[5] = {&b->dq_storage, &b->dk_storage, &b->dv_storage, &b->d_bias,
                                 &b->d_softmax_offset};
    long total = 0;
    for (int i = 0; i < 5; i++) {
        per[i] = 0;
        if (fattn_tensor_is_empty(ta[i]))
            continue;
        size_t esz = fattn_dtype_size(ta[i]->dtype);
        int64_t n = fattn_tensor_numel(ta[i]);
        for (int64_t e = 0; e < n; e++)
            if (memcmp((const char *)ta[i]->data + (size_t)e * esz,
                       (const char *)tb[i]->data + (size_t)e * esz, esz) != 0)
                per[i]++;
        total += per[i];
    }
    return total;
}

/* Backward again on buf's forward state with another dQ variant, outputs
 * re-poisoned first. */
static fattn_status rerun_bwd(const tcase *c, tcase_buffers *buf, fattn_engine *e, bool det)
{
    fattn_tensor *outs[] = {&buf->dq_storage, &buf->dk_storage, &buf->dv_storage, &buf->d_bias,
                            &buf->d_softmax_offset};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        if (!fattn_tensor_is_empty(outs[i]))
            fattn_tensor_fill_bits(outs[i], UINT64_MAX);
    fattn_bwd_params bp = tcase_bwd_params(c, buf);
    bp.deterministic = det;
    return fattn_engine_bwd(e, &bp);
}

static void log_bwd(const tcase *c, const char *status, const char *reason, const grad_cmp *r,
                    const grad_cmp *ra, const char *tag_det, const char *tag_acc)
{
    const char *path = getenv("FATTN_GPU_RESULTS");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    char clean[512];
    size_t j = 0;
    for (const char *s = reason ? reason : ""; *s && j + 2 < sizeof clean; s++) {
        char ch = *s;
        if (ch == '"' || ch == '\\')
            clean[j++] = '\\';
        clean[j++] = (ch == '\n' || ch == '\t') ? ' ' : ch;
    }
    clean[j] = 0;
    fprintf(f, "{\"id\":\"%s.backward\",\"status\":\"%s\",\"reason\":\"%s\",\"route\":\"bwd\","
               "\"engine\":\"%s\",\"engine_accum\":\"%s\"",
            c->id, status, clean, tag_det ? tag_det : "", tag_acc ? tag_acc : "");
    for (int i = 0; r && i < 5; i++)
        fprintf(f, ",\"max_abs_err_%s\":%.3e", grad_names[i], r->max_err[i]);
    for (int i = 0; ra && i < 5; i++)
        fprintf(f, ",\"max_abs_err_accum_%s\":%.3e", grad_names[i], ra->max_err[i]);
    if (r && c->softmax != FATTN_SOFTMAX_VANILLA)
        fprintf(f, ",\"dsink_negated\":%s,\"dsink_repeat_diffs\":%ld",
                r->dsink_negated ? "true" : "false", dsink_repeat_diffs);
    fprintf(f, "}\n");
    fclose(f);
}

static void fmt_cmp(char *out, size_t cap, const char *what, const grad_cmp *r)
{
    size_t n = strlen(out);
    snprintf(out + n, cap - n, "%s: bad dq %ld dk %ld dv %ld dbias %ld dsink %ld (max %.2e %.2e "
             "%.2e %.2e %.2e)%s, poison broken %ld, non-finite %ld; ", what, r->bad[0], r->bad[1],
             r->bad[2], r->bad[3], r->bad[4], r->max_err[0], r->max_err[1], r->max_err[2],
             r->max_err[3], r->max_err[4], r->dsink_negated ? " dSink NEGATED" : "",
             r->poison_broken, r->nonfinite);
}

static bool cmp_ok(const grad_cmp *r)
{
    for (int i = 0; i < 5; i++)
        if (r->bad[i])
            return false;
    return !r->poison_broken && !r->nonfinite;
}

START_TEST(gpu_backward)
{
    const tcase *c = &tcase_table[_i];
    if (!c->training)
        return;
    tcase_buffers cb, gb, gb2;
    memset(&cb, 0, sizeof cb);
    memset(&gb, 0, sizeof gb);
    memset(&gb2, 0, sizeof gb2);
    ck_assert_int_eq(tcase_setup(c, &gb), FATTN_OK);
    fattn_status st = tcase_run(c, &gb, g_gpu); /* forward + deterministic backward */
    char tag_det[96] = "", tag_acc[96] = "";
    snprintf(tag_det, sizeof tag_det, "%s", fattn_cudnn_last_tag(g_gpu));
    if (st == FATTN_E_UNSUPPORTED) {
        char reason[512];
        snprintf(reason, sizeof reason, "%s", fattn_last_error());
        tcase_teardown(&gb);
        log_bwd(c, "skip", reason, NULL, NULL, NULL, NULL);
        printf("# skip %s backward: %s\n", c->id, reason);
        return;
    }
    if (st != FATTN_OK) {
        char reason[512];
        snprintf(reason, sizeof reason, "%s", fattn_last_error());
        tcase_teardown(&gb);
        log_bwd(c, "fail", reason, NULL, NULL, NULL, NULL);
        ck_abort_msg("%s backward: %s", c->id, reason);
    }
    bool dropout = c->dropout > 0.0f;
    dsink_repeat_diffs = 0;
    grad_cmp r, ra;
    char reason[1024] = "";
    if (!dropout) {
        ck_assert_int_eq(tcase_setup(c, &cb), FATTN_OK);
        ck_assert_int_eq(tcase_run(c, &cb, g_cpu), FATTN_OK);
    }
    compare_grads(c, dropout ? NULL : &cb, &gb, &r);
    if (!cmp_ok(&r))
        fmt_cmp(reason, sizeof reason, "deterministic", &r);
    /* repeat, deterministic: bitwise */
    ck_assert_int_eq(tcase_setup(c, &gb2), FATTN_OK);
    ck_assert_int_eq(tcase_run(c, &gb2, g_gpu), FATTN_OK);
    /* dSoftmaxOffset is not bitwise repeatable on cuDNN 9.19 even with
     * `deterministic` (docs/determinism.md): recorded, not required */
    long per[5];
    grad_diffs(&gb, &gb2, per);
    long diffs = per[0] + per[1] + per[2] + per[3];
    dsink_repeat_diffs = per[4];
    if (diffs) {
        size_t n = strlen(reason);
        snprintf(reason + n, sizeof reason - n, "repeat differs in %ld elements (dq %ld dk %ld "
                 "dv %ld dbias %ld); ", diffs, per[0], per[1], per[2], per[3]);
    }
    /* the accumulator variant (PyTorch's graph) on the same forward state */
    st = rerun_bwd(c, &gb2, g_gpu, false);
    snprintf(tag_acc, sizeof tag_acc, "%s", fattn_cudnn_last_tag(g_gpu));
    memset(&ra, 0, sizeof ra);
    if (st != FATTN_OK) {
        size_t n = strlen(reason);
        snprintf(reason + n, sizeof reason - n, "accumulator variant: %s; ", fattn_last_error());
    } else {
        compare_grads(c, dropout ? NULL : &cb, &gb2, &ra);
        if (!cmp_ok(&ra))
            fmt_cmp(reason, sizeof reason, "accumulator", &ra);
        if (dropout) { /* within cuDNN: both variants agree up to dQ rounding */
            long pa[5];
            grad_diffs(&gb, &gb2, pa);
            if (pa[1] || pa[2]) {
                size_t n = strlen(reason);
                snprintf(reason + n, sizeof reason - n, "dropout: dK/dV differ between the "
                         "variants (%ld, %ld); ", pa[1], pa[2]);
            }
        }
    }
    log_bwd(c, *reason ? "fail" : "pass", reason, &r, &ra, tag_det, tag_acc);
    printf("# %s backward: %s; det %s, accum %s; max err dq %.2e dk %.2e dv %.2e dbias %.2e "
           "dsink %.2e%s\n", c->id, *reason ? reason : "ok", tag_det, tag_acc, r.max_err[0],
           r.max_err[1], r.max_err[2], r.max_err[3], r.max_err[4],
           r.dsink_negated ? " (dsink negated)" : "");
    tcase_teardown(&cb);
    tcase_teardown(&gb);
    tcase_teardown(&gb2);
    ck_assert_msg(!*reason, "%s backward: %s", c->id, reason);
    char id[128];
    snprintf(id, sizeof id, "cudnn.gpu.bwd.%s", c->id);
    fattn_test_mark(id);
}
END_TEST

/* ---- determinism at size ---------------------------------------------------- */

typedef struct det_row {
    const char *feature;
    tcase c;
} det_row;

#define DET_SHAPE .b = 4, .h = 16, .hg = 16, .sq = 2048, .skv = 2048, .d = 128, .dv = 128, \
                  .dtype = FATTN_DTYPE_BFLOAT16, .training = true
static const det_row det_rows[] = {
    {"nomask", {.id = "det.nomask", DET_SHAPE, .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD,
                .mask = FATTN_MASK_NO_MASK, .window = {-1, -1}, .bottom_right = true,
                .seed = 9001}},
    {"causal", {.id = "det.causal", DET_SHAPE, .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD,
                .mask = FATTN_MASK_CAUSAL, .window = {-1, 0}, .seed = 9002}},
    {"padding", {.id = "det.padding", DET_SHAPE, .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD,
                 .mask = FATTN_MASK_PADDING, .window = {-1, -1}, .bottom_right = true,
                 .seed = 9003}},
    {"window", {.id = "det.window", DET_SHAPE, .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD,
                .mask = FATTN_MASK_CAUSAL, .window = {255, 0}, .seed = 9004}},
    {"bias", {.id = "det.bias", DET_SHAPE, .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD,
              .mask = FATTN_MASK_NO_MASK, .window = {-1, -1}, .bottom_right = true,
              .bias = FATTN_BIAS_POST_SCALE_BIAS, .bias_b = 1, .bias_h = 16, .bias_sq = 2048,
              .seed = 9005}},
    {"alibi", {.id = "det.alibi", DET_SHAPE, .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD,
               .mask = FATTN_MASK_CAUSAL, .window = {-1, 0}, .bias = FATTN_BIAS_ALIBI,
               .seed = 9006}},
    {"dropout", {.id = "det.dropout", DET_SHAPE, .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD,
                 .mask = FATTN_MASK_NO_MASK, .window = {-1, -1}, .bottom_right = true,
                 .dropout = 0.1f, .seed = 9007}},
    {"sink", {.id = "det.sink", DET_SHAPE, .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD,
              .mask = FATTN_MASK_CAUSAL, .window = {-1, 0},
              .softmax = FATTN_SOFTMAX_LEARNABLE, .seed = 9008}},
    {"gqa", {.id = "det.gqa", .b = 4, .h = 16, .hg = 4, .sq = 2048, .skv = 2048, .d = 128,
             .dv = 128, .dtype = FATTN_DTYPE_BFLOAT16, .training = true,
             .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD, .mask = FATTN_MASK_NO_MASK,
             .window = {-1, -1}, .bottom_right = true, .seed = 9009}},
    {"thd", {.id = "det.thd", DET_SHAPE, .layout = FATTN_LAYOUT_THD_THD_THD,
             .mask = FATTN_MASK_PADDING, .window = {-1, -1}, .bottom_right = true,
             .seed = 9010}},
};
#define N_DET_ROWS (int)(sizeof det_rows / sizeof det_rows[0])

typedef struct det_result {
    fattn_status st;
    char reason[256];
    char tag[96];
    int repeats;
    long diffs[5];       /* elements differing from repeat 0, summed over repeats */
    long max_diffs[5];   /* worst single repeat */
    int64_t workspace;
    double seconds;
} det_result;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static fattn_status copy_grads(const tcase_buffers *src, tcase_buffers *dst)
{
    /* dst holds only the gradient tensors (owning copies) */
    const fattn_tensor *s[5] = {&src->dq_storage, &src->dk_storage, &src->dv_storage,
                                &src->d_bias, &src->d_softmax_offset};
    fattn_tensor *d[5] = {&dst->dq_storage, &dst->dk_storage, &dst->dv_storage, &dst->d_bias,
                          &dst->d_softmax_offset};
    for (int i = 0; i < 5; i++) {
        if (fattn_tensor_is_empty(s[i])) {
            *d[i] = fattn_tensor_empty();
            continue;
        }
        fattn_status st = fattn_tensor_alloc(d[i], s[i]->dtype, s[i]->ndim, s[i]->shape);
        if (st != FATTN_OK)
            return st;
        memcpy(d[i]->data, s[i]->data,
               (size_t)fattn_tensor_numel(s[i]) * fattn_dtype_size(s[i]->dtype));
    }
    return FATTN_OK;
}

static void free_grads(tcase_buffers *b)
{
    fattn_tensor *d[5] = {&b->dq_storage, &b->dk_storage, &b->dv_storage, &b->d_bias,
                          &b->d_softmax_offset};
    for (int i = 0; i < 5; i++)
        fattn_tensor_free(d[i]);
}

/* One row, one variant: forward once, backward `repeats` times. */
static void measure(const tcase *c, bool det, int repeats, det_result *out)
{
    memset(out, 0, sizeof *out);
    out->repeats = repeats;
    double t0 = now_s();
    tcase_buffers buf, first;
    memset(&first, 0, sizeof first);
    if ((out->st = tcase_setup(c, &buf)) != FATTN_OK) {
        snprintf(out->reason, sizeof out->reason, "%s", fattn_last_error());
        return;
    }
    /* forward (training) and a first backward, then the measured repeats */
    if ((out->st = tcase_run(c, &buf, g_gpu)) == FATTN_OK) {
        for (int r = 0; r < repeats && out->st == FATTN_OK; r++) {
            out->st = rerun_bwd(c, &buf, g_gpu, det);
            if (out->st != FATTN_OK)
                break;
            if (r == 0) {
                snprintf(out->tag, sizeof out->tag, "%s", fattn_cudnn_last_tag(g_gpu));
                out->workspace = fattn_cudnn_last_workspace(g_gpu);
                out->st = copy_grads(&buf, &first);
                continue;
            }
            long per[5];
            grad_diffs(&first, &buf, per);
            for (int i = 0; i < 5; i++) {
                out->diffs[i] += per[i];
                if (per[i] > out->max_diffs[i])
                    out->max_diffs[i] = per[i];
            }
        }
    }
    if (out->st != FATTN_OK)
        snprintf(out->reason, sizeof out->reason, "%s", fattn_last_error());
    free_grads(&first);
    tcase_teardown(&buf);
    out->seconds = now_s() - t0;
}

/* The suite's check: deterministic backward bitwise repeatable at size. */
START_TEST(gpu_deterministic_large)
{
    det_result r;
    measure(&det_rows[0].c, true, 3, &r);
    ck_assert_msg(r.st == FATTN_OK, "%s", r.reason);
    printf("# deterministic b4 h16 s2048 d128 bf16: %s, diffs dq %ld dk %ld dv %ld over %d "
           "repeats, %.1f s\n", r.tag, r.diffs[0], r.diffs[1], r.diffs[2], r.repeats, r.seconds);
    ck_assert_msg(r.diffs[0] == 0 && r.diffs[1] == 0 && r.diffs[2] == 0,
                  "deterministic backward differs: dq %ld dk %ld dv %ld", r.diffs[0],
                  r.diffs[1], r.diffs[2]);
    fattn_test_mark("cudnn.gpu.bwd.deterministic_large");
}
END_TEST

/* --determinism FILE: every feature row, both variants; JSON lines. */
static int run_determinism(const char *path, int repeats)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    const char *only = getenv("FATTN_DET_ROWS"); /* e.g. "gqa,thd" */
    for (int i = 0; i < N_DET_ROWS; i++)
        for (int det = 1; det >= 0; det--) {
            if (only && *only) {
                char key[32];
                snprintf(key, sizeof key, ",%s,", det_rows[i].feature);
                char list[256];
                snprintf(list, sizeof list, ",%s,", only);
                if (!strstr(list, key))
                    continue;
            }
            det_result r;
            measure(&det_rows[i].c, det, repeats, &r);
            const tcase *c = &det_rows[i].c;
            fprintf(f, "{\"feature\":\"%s\",\"deterministic\":%s,\"status\":\"%s\","
                       "\"reason\":\"%s\",\"engine\":\"%s\",\"b\":%d,\"h\":%d,\"hg\":%d,"
                       "\"s\":%d,\"d\":%d,\"dtype\":\"bf16\",\"repeats\":%d,"
                       "\"workspace_bytes\":%lld,\"seconds\":%.2f",
                    det_rows[i].feature, det ? "true" : "false",
                    r.st == FATTN_OK ? "ok" : "error", r.st == FATTN_OK ? "" : fattn_status_name(r.st),
                    r.tag, c->b, c->h, c->hg, c->sq, c->d, r.repeats, (long long)r.workspace,
                    r.seconds);
            for (int k = 0; k < 5; k++)
                fprintf(f, ",\"diff_%s\":%ld,\"max_diff_%s\":%ld", grad_names[k], r.diffs[k],
                        grad_names[k], r.max_diffs[k]);
            fprintf(f, "}\n");
            fflush(f);
            printf("%-8s %-13s %-12s dq %ld dk %ld dv %ld dbias %ld dsink %ld (%d repeats, "
                   "%.1f s)%s%s\n", det_rows[i].feature, det ? "deterministic" : "accumulator",
                   r.tag, r.diffs[0], r.diffs[1], r.diffs[2], r.diffs[3], r.diffs[4], r.repeats,
                   r.seconds, r.st == FATTN_OK ? "" : " ERROR: ", r.st == FATTN_OK ? "" : r.reason);
            fflush(stdout);
        }
    fclose(f);
    return 0;
}

static void list_ids(void)
{
    for (int i = 0; i < tcase_count; i++)
        printf("cudnn.gpu.%s\n", tcase_table[i].id);
    for (int i = 0; i < tcase_count; i++)
        if (tcase_table[i].training)
            printf("cudnn.gpu.bwd.%s\n", tcase_table[i].id);
    printf("cudnn.gpu.bwd.deterministic_large\n");
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--list-ids") == 0) {
        list_ids();
        return 0;
    }
    if (!FATTN_HAVE_CUDNN || !fattn_cudnn_available()) {
        printf("1..0 # SKIP no CUDA device (%s)\n", fattn_last_error());
        return 0;
    }
    const char *ran_log = getenv("FATTN_TEST_RAN_LOG");
    if (ran_log && *ran_log) {
        FILE *f = fopen(ran_log, "w");
        if (f)
            fclose(f);
    }
    fattn_cudnn_info info;
    if (fattn_cudnn_get_info(0, &info) == FATTN_OK) {
        const char *ip = getenv("FATTN_GPU_INFO");
        FILE *f = ip && *ip ? fopen(ip, "w") : NULL;
        if (f) {
            fprintf(f, "{\"device\":\"%s\",\"sm_count\":%d,\"sm\":\"sm_%d%d\","
                       "\"cudnn_version\":%lld,\"cudnn_header_version\":%lld,"
                       "\"cuda_runtime_version\":%d,\"cuda_driver_version\":%d,"
                       "\"cudnn_library\":\"%s\"}\n",
                    info.device_name, info.sm_count, info.cc_major, info.cc_minor,
                    (long long)info.cudnn_version, (long long)info.cudnn_header_version,
                    info.cuda_runtime_version, info.cuda_driver_version, info.cudnn_library);
            fclose(f);
        }
        printf("# device %s, %d SMs, sm_%d%d, cuDNN %lld (headers %lld), %s\n",
               info.device_name, info.sm_count, info.cc_major, info.cc_minor,
               (long long)info.cudnn_version, (long long)info.cudnn_header_version,
               info.cudnn_library);
    }
    if (fattn_engine_init_cpu(&g_cpu, NULL) != FATTN_OK ||
        fattn_engine_init_cudnn(&g_gpu, NULL) != FATTN_OK) {
        printf("Bail out! %s\n", fattn_last_error());
        return 1;
    }
    if (argc > 2 && strcmp(argv[1], "--determinism") == 0) {
        int repeats = argc > 3 ? atoi(argv[3]) : 5;
        int rc = run_determinism(argv[2], repeats < 3 ? 3 : repeats);
        fattn_engine_free(g_gpu);
        fattn_engine_free(g_cpu);
        return rc;
    }
    Suite *s = suite_create("cudnn-gpu");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, gpu_forward, 0, tcase_count);
    suite_add_tcase(s, tc);
    TCase *tb = tcase_create("backward");
    tcase_set_timeout(tb, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tb, gpu_backward, 0, tcase_count);
    tcase_add_test(tb, gpu_deterministic_large);
    suite_add_tcase(s, tb);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    printf("# plans cached: %d\n", fattn_cudnn_plan_count(g_gpu));
    fattn_engine_free(g_gpu);
    fattn_engine_free(g_cpu);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
