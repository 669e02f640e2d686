/* Suite "cudnn-gpu": the cuDNN engine's forward on a GPU, for every case of
 * the CPU test matrix (tests/cases.h), compared with the CPU engine.
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

static void list_ids(void)
{
    for (int i = 0; i < tcase_count; i++)
        printf("cudnn.gpu.%s\n", tcase_table[i].id);
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
    Suite *s = suite_create("cudnn-gpu");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, gpu_forward, 0, tcase_count);
    suite_add_tcase(s, tc);
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
