/* Suite "cudnn-gpu": the cuDNN engine on a GPU, for every case of the CPU
 * test matrix (tests/cases.h), held to the float64 oracle (tests/oracle.h)
 * with the per-dtype tolerances of tests/oracle_check.c — the CPU engine's
 * rule, with cuDNN's own measured dBias allowance. Per case:
 *   - forward: O, Stats (and Max) on their defined regions within tolerance,
 *     finite, the poison outside them intact; a second forward bitwise
 *     identical. Dropout cases run the test-only graph variant that also
 *     writes cuDNN's keep-mask (fattn_cudnn_capture_dropout_mask); the
 *     oracle then drops what cuDNN dropped, and the production graph's O
 *     is checked against the same oracle;
 *   - backward (training cases): dQ, dK, dV, dBias, dSoftmaxOffset against
 *     the oracle's backward given the engine's own O and Stats, in both dQ
 *     variants (deterministic direct-dQ and PyTorch's accumulator graph);
 *     the deterministic variant bitwise repeatable except dSoftmaxOffset
 *     (docs/determinism.md); dropout backward regenerates the forward's
 *     mask from rng_state, so the captured mask serves it too;
 *   - a case the engine refuses with FATTN_E_UNSUPPORTED passes as skipped,
 *     its reason logged.
 * Also a large deterministic-repeat check; `test_cudnn_gpu --determinism
 * FILE` measures which backward outputs repeat bitwise per feature row at
 * b4 h16 s2048 d128 and writes FILE (docs/determinism.md); `--max-rows
 * FILE` what cuDNN leaves in Max past each sequence's length
 * (tests/cudnn_max_rows.c, docs/te.md). FATTN_GPU_CASES
 * (comma-separated case ids) restricts the per-case tests, e.g. for
 * compute-sanitizer runs.
 *
 * Without a CUDA device (or without cuDNN) it prints the TAP plan
 * "1..0 # SKIP no CUDA device" and exits 0. With $FATTN_GPU_RESULTS set,
 * one JSON object per case is appended to that file (tools/gpu-ci.sh
 * assembles docs/gpu-runs/<date>.json from it).
 *
 * Check runs without fork here: CUDA cannot be used in a child forked after
 * the parent initialised it, and one engine (one plan cache) serves all.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cudnn_env.h"
#include "cases.h"
#include "cudnn_max_rows.h"
#include "fattn/cudnn.h"
#include "fattn/dtype.h"
#include "fattn/te.h"
#include "fattn_config.h"
#include "fattn_gpu_test.h"
#include "fattn_test.h"
#include "oracle.h"
#include "oracle_check.h"

static fattn_engine *g_gpu;

/* Whether the case is selected by $FATTN_GPU_CASES (all when unset). */
static bool selected(const tcase *c)
{
    const char *only = getenv("FATTN_GPU_CASES");
    if (!only || !*only)
        return true;
    size_t n = strlen(c->id);
    for (const char *p = only; (p = strstr(p, c->id)) != NULL; p += n)
        if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return true;
    return false;
}

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

static bool dropout_on(const tcase *c)
{
    return c->training && c->dropout > 0.0f;
}

/* cuDNN's keep-mask of the case, [b,h,sq,skv] floats (NULL without dropout). */
static float *mask_alloc(const tcase *c)
{
    if (!dropout_on(c))
        return NULL;
    int64_t n = (int64_t)c->b * c->h * c->sq * c->skv;
    float *m = malloc((size_t)n * sizeof *m);
    ck_assert_ptr_nonnull(m);
    for (int64_t i = 0; i < n; i++)
        m[i] = -1.0f; /* neither keep nor drop: an unwritten mask shows */
    ck_assert_int_eq(fattn_cudnn_capture_dropout_mask(g_gpu, m, n), FATTN_OK);
    return m;
}

/* After a captured forward: capture off, and every entry 0 or 1 (the
 * fraction kept returned). */
static double mask_done(const tcase *c, const float *m)
{
    ck_assert_int_eq(fattn_cudnn_capture_dropout_mask(g_gpu, NULL, 0), FATTN_OK);
    int64_t n = (int64_t)c->b * c->h * c->sq * c->skv, kept = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert_msg(m[i] == 0.0f || m[i] == 1.0f, "%s: keep-mask[%lld] = %g", c->id,
                      (long long)i, (double)m[i]);
        kept += m[i] == 1.0f;
    }
    return (double)kept / (double)n;
}

static int64_t storage_bytes(const fattn_tensor *t)
{
    int64_t e = 1;
    for (int i = 0; i < t->ndim; i++)
        e += (t->shape[i] - 1) * t->strides[i];
    return e * (int64_t)fattn_dtype_size(t->dtype);
}

static bool same_bits(const fattn_tensor *a, const fattn_tensor *b)
{
    if (fattn_tensor_is_empty(a) || fattn_tensor_is_empty(b))
        return fattn_tensor_is_empty(a) == fattn_tensor_is_empty(b);
    return memcmp(a->data, b->data, (size_t)storage_bytes(a)) == 0;
}

/* The outputs one test checks, their reports, and the JSON record. */
#define MAX_OUTS 12
typedef struct case_log {
    const char *names[MAX_OUTS];
    check_report rep[MAX_OUTS];
    int n;
    char reason[1024];
} case_log;

static void note(case_log *l, const char *fmt, const char *what)
{
    size_t n = strlen(l->reason);
    snprintf(l->reason + n, sizeof l->reason - n, fmt, what);
}

/* Check one output against the oracle; failures go to l->reason. */
static void check(case_log *l, const tcase *c, const tcase_buffers *buf, const char *name,
                  oracle_output which, const fattn_tensor *t, const double *ref, tol_kind kind)
{
    const tolerance *tol = tolerance_for_cudnn(c->dtype);
    ck_assert_ptr_nonnull(tol);
    ck_assert_int_lt(l->n, MAX_OUTS);
    check_report *r = &l->rep[l->n];
    l->names[l->n++] = name;
    check_out k = {name, which, t, ref, tol->k[kind].atol, tol->k[kind].rtol};
    oracle_check_output(c, buf, &k, r);
    if (r->fatal)
        note(l, "%s; ", r->first_fatal);
    if (r->out_of_tol)
        note(l, "%s; ", r->first_tol);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s == '\n' || *s == '\t' ? ' ' : *s, f);
    }
    fputc('"', f);
}

/* One JSON line per case and direction into $FATTN_GPU_RESULTS. */
static void log_case(const char *id, const char *status, const case_log *l, const char *route,
                     const char *engine, const char *extra)
{
    const char *path = getenv("FATTN_GPU_RESULTS");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    fprintf(f, "{\"id\":");
    json_str(f, id);
    fprintf(f, ",\"status\":\"%s\",\"reason\":", status);
    json_str(f, l ? l->reason : "");
    fprintf(f, ",\"route\":");
    json_str(f, route);
    fprintf(f, ",\"engine\":");
    json_str(f, engine);
    if (l) {
        fprintf(f, ",\"vs_oracle\":{");
        for (int i = 0; i < l->n; i++)
            fprintf(f, "%s\"%s\":{\"max_abs_err\":%.3e,\"tol_frac\":%.3f,\"defined\":%lld}",
                    i ? "," : "", l->names[i], l->rep[i].worst_abs, l->rep[i].worst_frac,
                    (long long)l->rep[i].defined);
        fprintf(f, "}");
    }
    if (extra && *extra)
        fprintf(f, ",%s", extra);
    fprintf(f, "}\n");
    fclose(f);
}

static void skip_or_fail(const tcase *c, const char *id, fattn_status st)
{
    case_log l = {.n = 0};
    snprintf(l.reason, sizeof l.reason, "%s", fattn_last_error());
    if (st == FATTN_E_UNSUPPORTED) {
        log_case(id, "skip", &l, "", "", NULL);
        printf("# skip %s: %s\n", id, l.reason);
        return;
    }
    log_case(id, "fail", &l, "", "", NULL);
    ck_abort_msg("%s: %s (%s)", id, fattn_status_name(st), l.reason);
    (void)c;
}

START_TEST(gpu_forward)
{
    const tcase *c = &tcase_table[_i];
    if (!selected(c))
        return;
    tcase_buffers gb, gb2, gv;
    memset(&gb, 0, sizeof gb);
    memset(&gb2, 0, sizeof gb2);
    memset(&gv, 0, sizeof gv);
    fattn_status st = forward(c, &gb, g_gpu);
    if (st != FATTN_OK) {
        tcase_teardown(&gb);
        skip_or_fail(c, c->id, st);
        return;
    }
    char route[16], engine[96], extra[256] = "";
    snprintf(route, sizeof route, "%s", fattn_engine_last_report(g_gpu).route);
    snprintf(engine, sizeof engine, "%s", fattn_engine_last_report(g_gpu).tag);
    case_log l = {.n = 0};
    /* repeat: bitwise */
    ck_assert_int_eq(forward(c, &gb2, g_gpu), FATTN_OK);
    if (!same_bits(&gb.o, &gb2.o) || !same_bits(&gb.stats, &gb2.stats))
        note(&l, "%s; ", "a repeated forward differs");
    /* dropout: the mask-writing variant, for the oracle */
    float *keep = mask_alloc(c);
    if (keep) {
        st = forward(c, &gv, g_gpu);
        double kept = mask_done(c, keep);
        ck_assert_msg(st == FATTN_OK, "%s: keep-mask variant: %s", c->id, fattn_last_error());
        snprintf(extra, sizeof extra, "\"keep_fraction\":%.4f,\"mask_variant_engine\":\"%s\","
                 "\"mask_variant_same_bits\":%s", kept, fattn_engine_last_report(g_gpu).tag,
                 same_bits(&gb.o, &gv.o) && same_bits(&gb.stats, &gv.stats) ? "true" : "false");
    }
    oracle_inputs in = {.keep = keep};
    oracle_result r = {0};
    ck_assert_int_eq(oracle_forward(c, &gb, &in, &r), FATTN_OK);
    check(&l, c, &gb, "O", ORACLE_O, &gb.o, r.o, TOL_O);
    check(&l, c, &gb, "Stats", ORACLE_STATS, &gb.stats, r.stats, TOL_STATS);
    if (c->return_max_logit)
        check(&l, c, &gb, "Max", ORACLE_MAX, &gb.max, r.max, TOL_STATS);
    if (keep) {
        check(&l, c, &gv, "O(mask variant)", ORACLE_O, &gv.o, r.o, TOL_O);
        check(&l, c, &gv, "Stats(mask variant)", ORACLE_STATS, &gv.stats, r.stats, TOL_STATS);
    }
    log_case(c->id, *l.reason ? "fail" : "pass", &l, route, engine, extra);
    oracle_result_free(&r);
    free(keep);
    tcase_teardown(&gb);
    tcase_teardown(&gb2);
    tcase_teardown(&gv);
    ck_assert_msg(!*l.reason, "%s: %s", c->id, l.reason);
    char id[128];
    snprintf(id, sizeof id, "cudnn.gpu.%s", c->id);
    fattn_test_mark(id);
}
END_TEST

/* ---- backward ------------------------------------------------------------ */

static const char *const grad_names[5] = {"dq", "dk", "dv", "dbias", "dsink"};

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

/* The gradients of buf against the oracle's backward given buf's O and
 * Stats; names get the variant's suffix. */
static void check_grads(case_log *l, const tcase *c, const tcase_buffers *buf,
                        const float *keep, bool det)
{
    oracle_inputs in = {.keep = keep};
    oracle_result r = {0};
    ck_assert_int_eq(oracle_backward(c, buf, &in, true, &r), FATTN_OK);
    static const char *const det_names[5] = {"dQ", "dK", "dV", "dBias", "dSoftmaxOffset"};
    static const char *const acc_names[5] = {"dQ(accum)", "dK(accum)", "dV(accum)",
                                             "dBias(accum)", "dSoftmaxOffset(accum)"};
    const char *const *nm = det ? det_names : acc_names;
    check(l, c, buf, nm[0], ORACLE_DQ, &buf->dq, r.dq, TOL_DQK);
    check(l, c, buf, nm[1], ORACLE_DK, &buf->dk, r.dk, TOL_DQK);
    check(l, c, buf, nm[2], ORACLE_DV, &buf->dv, r.dv, TOL_DV);
    if (c->bias == FATTN_BIAS_POST_SCALE_BIAS)
        check(l, c, buf, nm[3], ORACLE_DBIAS, &buf->d_bias, r.d_bias, TOL_DBIAS);
    if (c->softmax != FATTN_SOFTMAX_VANILLA)
        check(l, c, buf, nm[4], ORACLE_DOFFSET, &buf->d_softmax_offset, r.d_softmax_offset,
              TOL_DOFFSET);
    oracle_result_free(&r);
}

START_TEST(gpu_backward)
{
    const tcase *c = &tcase_table[_i];
    if (!c->training || !selected(c))
        return;
    char id[128];
    snprintf(id, sizeof id, "%s.backward", c->id);
    tcase_buffers gb, gb2;
    memset(&gb, 0, sizeof gb);
    memset(&gb2, 0, sizeof gb2);
    ck_assert_int_eq(tcase_setup(c, &gb), FATTN_OK);
    /* forward (its keep-mask captured) + deterministic backward */
    float *keep = mask_alloc(c);
    fattn_status st = tcase_run(c, &gb, g_gpu);
    if (keep)
        ck_assert_int_eq(fattn_cudnn_capture_dropout_mask(g_gpu, NULL, 0), FATTN_OK);
    if (st != FATTN_OK) {
        free(keep);
        tcase_teardown(&gb);
        skip_or_fail(c, id, st);
        return;
    }
    if (keep)
        mask_done(c, keep);
    char tag_det[96], tag_acc[96] = "", extra[512];
    snprintf(tag_det, sizeof tag_det, "%s", fattn_engine_last_report(g_gpu).tag);
    case_log l = {.n = 0};
    check_grads(&l, c, &gb, keep, true);
    /* repeat, deterministic: bitwise, except dSoftmaxOffset on cuDNN 9.19
     * even with `deterministic` (docs/determinism.md): recorded, not required */
    ck_assert_int_eq(tcase_setup(c, &gb2), FATTN_OK);
    ck_assert_int_eq(tcase_run(c, &gb2, g_gpu), FATTN_OK);
    long per[5];
    grad_diffs(&gb, &gb2, per);
    long diffs = per[0] + per[1] + per[2] + per[3], dsink_diffs = per[4];
    if (diffs) {
        size_t n = strlen(l.reason);
        snprintf(l.reason + n, sizeof l.reason - n, "deterministic repeat differs in %ld "
                 "elements (dq %ld dk %ld dv %ld dbias %ld); ", diffs, per[0], per[1], per[2],
                 per[3]);
    }
    /* the accumulator variant (PyTorch's graph) on gb2's forward state */
    st = rerun_bwd(c, &gb2, g_gpu, false);
    snprintf(tag_acc, sizeof tag_acc, "%s", fattn_engine_last_report(g_gpu).tag);
    if (st != FATTN_OK)
        note(&l, "accumulator variant: %s; ", fattn_last_error());
    else
        check_grads(&l, c, &gb2, keep, false);
    snprintf(extra, sizeof extra, "\"engine_accum\":\"%s\",\"dsink_repeat_diffs\":%ld",
             tag_acc, dsink_diffs);
    log_case(id, *l.reason ? "fail" : "pass", &l, "bwd", tag_det, extra);
    printf("# %s: %s; det %s, accum %s\n", id, *l.reason ? l.reason : "ok", tag_det, tag_acc);
    free(keep);
    tcase_teardown(&gb);
    tcase_teardown(&gb2);
    ck_assert_msg(!*l.reason, "%s: %s", id, l.reason);
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
                snprintf(out->tag, sizeof out->tag, "%s", fattn_engine_last_report(g_gpu).tag);
                out->workspace = fattn_engine_last_report(g_gpu).workspace;
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

/* The device's facts into $FATTN_GPU_INFO (tools/gpu/gpu-ci.sh's record)
 * and the TAP log; the engine; the modes --max-rows and --determinism
 * (tools/gpu), which end the program. */
static int setup(int argc, char **argv)
{
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
    if (fattn_engine_init_cudnn(&g_gpu, NULL) != FATTN_OK) {
        printf("Bail out! %s\n", fattn_last_error());
        return 1;
    }
    if (argc > 2 && strcmp(argv[1], "--max-rows") == 0) {
        int rc = cudnn_max_rows_run(g_gpu, argv[2]);
        fattn_engine_free(g_gpu);
        return rc;
    }
    if (argc > 2 && strcmp(argv[1], "--determinism") == 0) {
        int repeats = argc > 3 ? atoi(argv[3]) : 5;
        int rc = run_determinism(argv[2], repeats < 3 ? 3 : repeats);
        fattn_engine_free(g_gpu);
        return rc;
    }
    return FATTN_GPU_TEST_GO_ON;
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("cudnn-gpu");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, gpu_forward, 0, tcase_count);
    suite_add_tcase(s, tc);
    TCase *tb = tcase_create("backward");
    tcase_set_timeout(tb, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tb, gpu_backward, 0, tcase_count);
    suite_add_tcase(s, tb);
    TCase *tl = tcase_create("large");
    tcase_set_tags(tl, "large"); /* sanitizer runs leave it out: CK_EXCLUDE_TAGS=large */
    tcase_set_timeout(tl, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_test(tl, gpu_deterministic_large);
    suite_add_tcase(s, tl);
    return s;
}

static void teardown(void)
{
    printf("# plans cached: %d\n", fattn_engine_last_report(g_gpu).plans);
    fattn_engine_free(g_gpu);
}

FATTN_GPU_TEST_MAIN(.make_suite = make_suite, .list_ids = list_ids, .setup = setup,
                    .teardown = teardown)
