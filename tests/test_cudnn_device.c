/* Suite "cudnn-gpu", executable test_cudnn_device: the cuDNN engine on device
 * tensors (engine.h, fattn/cudnn.h).
 *
 *   - every case of the CPU test matrix a device call takes (no padding mask,
 *     no THD, no return_max_logit) runs twice on one engine: on host tensors
 *     (the plan is built) and on device copies of the same inputs, outputs
 *     poisoned with 0xFF: O, Stats, dQ, dK, dV and dBias must be bitwise the
 *     host path's (the deterministic backward), dSoftmaxOffset written and
 *     finite (it is not bitwise repeatable, docs/determinism.md). The device
 *     call must hit the plan cache, allocate no device buffer, and, without
 *     dropout, sink or ALiBi, take no buffer from the engine's arena at all
 *     in the forward (no upload) and only Dsum in the backward;
 *   - refusals: host and device tensors mixed (FATTN_E_INVALID_ARG), a
 *     padding mask on device tensors (FATTN_E_UNSUPPORTED), a misaligned
 *     device pointer and a non-contiguous device Stats (FATTN_E_LAYOUT).
 *
 * The CUDA runtime comes from the engine's own loader (fattn__cudnn_api_load).
 * Without a CUDA device (or a build without cuDNN) it prints the TAP plan
 * "1..0 # SKIP no CUDA device" and exits 0. No fork: CUDA cannot be used in
 * a child forked after the parent initialised it.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_env.h"
#include "cases.h"
#include "fattn/cudnn.h"
#include "fattn/te.h"
#include "fattn_config.h"
#include "fattn_gpu_test.h"
#include "fattn_test.h"

#if FATTN_HAVE_CUDNN
#include "cudnn/engine_internal.h"

static fattn_engine *g_eng;
static const cudnn_api *g_api;

/* Device buffers of one test, freed at its end. */
typedef struct dev_list {
    void *p[48];
    int n;
} dev_list;

static void dev_free_all(dev_list *l)
{
    for (int i = 0; i < l->n; i++)
        g_api->cudaFree(l->p[i]);
    l->n = 0;
}

static size_t span_bytes(const fattn_tensor *t)
{
    int64_t e = 1;
    for (int i = 0; i < t->ndim; i++)
        e += (t->shape[i] - 1) * t->strides[i];
    return (size_t)e * fattn_dtype_size(t->dtype);
}

static void *dev_alloc(dev_list *l, size_t bytes)
{
    void *p = NULL;
    ck_assert_int_lt(l->n, 48);
    ck_assert_int_eq(g_api->cudaMalloc(&p, bytes ? bytes : 16), cudaSuccess);
    l->p[l->n++] = p;
    return p;
}

/* A device copy of a host view with the same strides (empty stays empty);
 * an output (out) is filled with the poison instead. */
static fattn_tensor to_device(dev_list *l, const fattn_tensor *h, bool out)
{
    if (fattn_tensor_is_empty(h))
        return *h;
    size_t bytes = span_bytes(h);
    fattn_tensor d = *h;
    d.data = dev_alloc(l, bytes);
    d.device = FATTN_DEVICE_CUDA;
    if (out)
        ck_assert_int_eq(g_api->cudaMemset(d.data, 0xFF, bytes), cudaSuccess);
    else
        ck_assert_int_eq(g_api->cudaMemcpy(d.data, h->data, bytes, cudaMemcpyHostToDevice),
                         cudaSuccess);
    return d;
}

/* Elements of a tensor the describing call reported (data NULL, so
 * fattn_tensor_numel, which counts an empty tensor as 0, does not apply). */
static size_t described_numel(const fattn_tensor *t)
{
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= (size_t)t->shape[i];
    return n;
}

/* The logical tensor in C order (numel * size bytes, malloc'd). */
static unsigned char *gathered(const fattn_tensor *t)
{
    size_t n = (size_t)fattn_tensor_numel(t) * fattn_dtype_size(t->dtype);
    unsigned char *out = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(out);
    if (t->device == FATTN_DEVICE_HOST) {
        fattn_tensor_gather(t, out);
        return out;
    }
    size_t bytes = span_bytes(t);
    unsigned char *host = malloc(bytes);
    ck_assert_ptr_nonnull(host);
    ck_assert_int_eq(g_api->cudaMemcpy(host, t->data, bytes, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    fattn_tensor hv = *t;
    hv.data = host;
    hv.device = FATTN_DEVICE_HOST;
    fattn_tensor_gather(&hv, out);
    free(host);
    return out;
}

static void check_same(const char *id, const char *what, const fattn_tensor *h,
                       const fattn_tensor *d)
{
    size_t n = (size_t)fattn_tensor_numel(h) * fattn_dtype_size(h->dtype);
    unsigned char *a = gathered(h), *b = gathered(d);
    size_t first = n;
    for (size_t i = 0; i < n && first == n; i++)
        if (a[i] != b[i])
            first = i;
    free(a);
    free(b);
    ck_assert_msg(first == n, "%s: %s on device tensors differs from the host path at byte %zu",
                  id, what, first);
}

static bool device_case(const tcase *c)
{
    return !fattn_mask_has_padding(c->mask) && !c->return_max_logit &&
           fattn_layout_q_format(c->layout) != FATTN_FORMAT_THD &&
           fattn_layout_kv_format(c->layout) != FATTN_FORMAT_THD;
}

static int g_cases[512];
static int g_ncases;

static void pick_cases(void)
{
    for (int i = 0; i < tcase_count && g_ncases < 512; i++)
        if (device_case(&tcase_table[i]))
            g_cases[g_ncases++] = i;
}

/* The forward on device copies of buf's inputs: *fp and *aux hold the device
 * views afterwards (Stats in aux->t[0]). */
static fattn_status device_forward(const tcase *c, tcase_buffers *buf, dev_list *l,
                                   fattn_fwd_params *fp, fattn_aux_pack *aux)
{
    *fp = tcase_fwd_params(c, buf);
    memset(aux, 0, sizeof *aux);
    fp->aux = aux;
    fp->attn.q = to_device(l, &buf->q, false);
    fp->attn.k = to_device(l, &buf->k, false);
    fp->attn.v = to_device(l, &buf->v, false);
    fp->attn.o = to_device(l, &buf->o, true);
    fp->bias = to_device(l, &buf->bias, false);
    fattn_status st = fattn_engine_fwd(g_eng, fp);
    if (st != FATTN_OK)
        return st;
    fattn_tensor s = aux->t[0];
    size_t sbytes = described_numel(&s) * sizeof(float);
    cudaError_t pending = g_api->cudaDeviceSynchronize();
    ck_assert_msg(pending == cudaSuccess, "%s: before Stats: %s", c->id,
                  g_api->cudaGetErrorString(pending));
    s.data = dev_alloc(l, sbytes);
    s.device = FATTN_DEVICE_CUDA;
    cudaError_t ce = g_api->cudaMemset(s.data, 0xFF, sbytes);
    ck_assert_msg(ce == cudaSuccess, "%s: cudaMemset(Stats %p, %zu bytes, ndim %d): %s", c->id,
                  s.data, sbytes, s.ndim, g_api->cudaGetErrorString(ce));
    aux->t[0] = s;
    return fattn_engine_fwd(g_eng, fp);
}

START_TEST(device_vs_host)
{
    const tcase *c = &tcase_table[g_cases[_i]];
    tcase_buffers hb;
    fattn_status st = tcase_setup(c, &hb);
    ck_assert_msg(st == FATTN_OK, "%s: setup: %s", c->id, fattn_last_error());
    st = tcase_run(c, &hb, g_eng);
    if (st == FATTN_E_UNSUPPORTED) {
        printf("# %s: skipped, the engine refuses it: %s\n", c->id, fattn_last_error());
        tcase_teardown(&hb);
        return;
    }
    ck_assert_msg(st == FATTN_OK, "%s: host path: %s", c->id, fattn_last_error());
    fattn_cudnn_plan_cache *pc = fattn_cudnn_engine_plan_cache(g_eng);
    bool plain = c->dropout == 0.0f && c->softmax == FATTN_SOFTMAX_VANILLA &&
                 c->bias != FATTN_BIAS_ALIBI;
    dev_list l = {.n = 0};
    fattn_fwd_params fp;
    fattn_aux_pack faux;
    int held0 = pc->arena[0].held, held1 = pc->arena[1].held;
    void *ws = pc->ws;
    st = device_forward(c, &hb, &l, &fp, &faux);
    ck_assert_msg(st == FATTN_OK, "%s: device forward: %s", c->id, fattn_last_error());
    fattn_engine_report rep = fattn_engine_last_report(g_eng);
    ck_assert_msg(rep.timing.plan_cache_hit, "%s: the device forward missed the plan", c->id);
    ck_assert_int_eq(pc->arena[0].held, held0);
    if (plain)
        ck_assert_msg(pc->arena[0].n == 0, "%s: the device forward took %d arena buffers",
                      c->id, pc->arena[0].n);
    ck_assert_int_eq(g_api->cudaDeviceSynchronize(), cudaSuccess);
    check_same(c->id, "O", &hb.o, &fp.attn.o);
    check_same(c->id, "Stats", &hb.stats, &faux.t[0]);
    if (c->training) {
        fattn_aux_layout lay = fattn_aux_layout_bwd(c->bias, c->softmax);
        fattn_aux_pack baux = hb.aux_bwd;
        baux.t[lay.stats] = faux.t[0];
        if (lay.bias >= 0)
            baux.t[lay.bias] = fp.bias;
        fattn_bwd_params bp = tcase_bwd_params(c, &hb);
        bp.aux = &baux;
        bp.attn.q = fp.attn.q;
        bp.attn.k = fp.attn.k;
        bp.attn.v = fp.attn.v;
        bp.attn.o = fp.attn.o;
        bp.d_o = to_device(&l, &hb.d_o, false);
        bp.dq = to_device(&l, &hb.dq, true);
        bp.dk = to_device(&l, &hb.dk, true);
        bp.dv = to_device(&l, &hb.dv, true);
        bp.d_bias = to_device(&l, &hb.d_bias, true);
        bp.d_softmax_offset = to_device(&l, &hb.d_softmax_offset, true);
        st = fattn_engine_bwd(g_eng, &bp);
        ck_assert_msg(st == FATTN_OK, "%s: device backward: %s", c->id, fattn_last_error());
        rep = fattn_engine_last_report(g_eng);
        ck_assert_msg(rep.timing.plan_cache_hit, "%s: the device backward missed the plan",
                      c->id);
        ck_assert_int_eq(pc->arena[1].held, held1);
        /* Dsum only: the direct-dQ graph has no dQ accumulator (the ordered-dQ
         * one, FATTN_CUDNN_DET=ordered, has) */
        int bufs = rep.route && !strcmp(rep.route, "bwd-ordered-dq") ? 2 : 1;
        if (plain)
            ck_assert_msg(pc->arena[1].n == bufs, "%s: the device backward (%s) took %d "
                          "arena buffers, not %d", c->id, rep.route, pc->arena[1].n, bufs);
        ck_assert_int_eq(g_api->cudaDeviceSynchronize(), cudaSuccess);
        check_same(c->id, "dQ", &hb.dq, &bp.dq);
        check_same(c->id, "dK", &hb.dk, &bp.dk);
        check_same(c->id, "dV", &hb.dv, &bp.dv);
        if (!fattn_tensor_is_empty(&hb.d_bias))
            check_same(c->id, "dBias", &hb.d_bias, &bp.d_bias);
        if (!fattn_tensor_is_empty(&hb.d_softmax_offset)) {
            float *g = (float *)gathered(&bp.d_softmax_offset);
            for (int64_t n = 0; n < fattn_tensor_numel(&bp.d_softmax_offset); n++)
                ck_assert_msg(isfinite(g[n]), "%s: dSoftmaxOffset[%lld] not written (%g)",
                              c->id, (long long)n, (double)g[n]);
            free(g);
        }
    }
    ck_assert_ptr_eq(pc->ws, ws);
    dev_free_all(&l);
    tcase_teardown(&hb);
    fattn_test_mark(c->id);
}
END_TEST

/* ---- refusals ------------------------------------------------------------- */

typedef enum { R_MIXED, R_PADDING, R_MISALIGNED, R_STATS_STRIDED, R_FP8 } refusal;

typedef struct refusal_row {
    const char *id;
    const char *case_id;
    refusal kind;
    fattn_status want;
    const char *names; /* a word the message must hold */
} refusal_row;

static const refusal_row refusal_rows[] = {
    {"cudnn.device.refuse.mixed_o", "bwd.nomask.f16", R_MIXED, FATTN_E_INVALID_ARG, "O"},
    {"cudnn.device.refuse.padding", "bwd.padding.f16", R_PADDING, FATTN_E_UNSUPPORTED,
     "padding"},
    {"cudnn.device.refuse.misaligned_k", "bwd.nomask.f16", R_MISALIGNED, FATTN_E_LAYOUT, "K"},
    {"cudnn.device.refuse.stats_strided", "bwd.nomask.f16", R_STATS_STRIDED, FATTN_E_LAYOUT,
     "Stats"},
    /* The FP8 path uploads from host memory: refused before any operand is read. */
    {"cudnn.device.refuse.fp8", "bwd.nomask.f16", R_FP8, FATTN_E_UNSUPPORTED, "FP8"},
};

START_TEST(device_refused)
{
    const refusal_row *row = &refusal_rows[_i];
    const tcase *c = tcase_find(row->case_id);
    ck_assert_ptr_nonnull(c);
    tcase_buffers hb;
    ck_assert_int_eq(tcase_setup(c, &hb), FATTN_OK);
    dev_list l = {.n = 0};
    fattn_fwd_params fp = tcase_fwd_params(c, &hb);
    fattn_aux_pack aux;
    memset(&aux, 0, sizeof aux);
    fp.aux = &aux;
    fp.attn.q = to_device(&l, &hb.q, false);
    fp.attn.k = to_device(&l, &hb.k, false);
    fp.attn.v = to_device(&l, &hb.v, false);
    fp.attn.o = to_device(&l, &hb.o, true);
    ck_assert_int_eq(fattn_engine_fwd(g_eng, &fp), FATTN_OK); /* describing call */
    float amax_s = 0.0f, amax_o = 0.0f;
    fattn_fp8_fwd fp8 = {.descale_q = 1.0f, .descale_k = 1.0f, .descale_v = 1.0f,
                         .descale_s = 1.0f, .scale_s = 1.0f, .scale_o = 1.0f,
                         .amax_s = &amax_s, .amax_o = &amax_o, .s_dtype = FATTN_DTYPE_FLOAT8_E4M3FN};
    fattn_tensor s = aux.t[0];
    size_t sbytes = described_numel(&s) * sizeof(float);
    s.data = dev_alloc(&l, 2 * sbytes);
    s.device = FATTN_DEVICE_CUDA;
    aux.t[0] = s;
    switch (row->kind) {
    case R_MIXED:
        fp.attn.o = hb.o;
        break;
    case R_PADDING:
        break;
    case R_MISALIGNED: {
        void *p = dev_alloc(&l, span_bytes(&hb.k) + 16);
        fp.attn.k.data = (char *)p + 2;
        break;
    }
    case R_STATS_STRIDED:
        aux.t[0].strides[2] = 2; /* every other row: sq > 1 in the case */
        break;
    case R_FP8: /* FP8 codes in the same device buffers; O stays f16 (O_in_F16) */
        fp.fp8 = &fp8;
        fp.attn.q.dtype = fp.attn.k.dtype = fp.attn.v.dtype = FATTN_DTYPE_FLOAT8_E4M3FN;
        break;
    }
    fattn_status st = fattn_engine_fwd(g_eng, &fp);
    ck_assert_msg(st == row->want, "%s: %s, want %s (%s)", row->id, fattn_status_name(st),
                  fattn_status_name(row->want), fattn_last_error());
    ck_assert_msg(strstr(fattn_last_error(), row->names) != NULL,
                  "%s: message '%s' does not name %s", row->id, fattn_last_error(), row->names);
    dev_free_all(&l);
    tcase_teardown(&hb);
    fattn_test_mark(row->id);
}
END_TEST

#endif /* FATTN_HAVE_CUDNN */

static void list_ids(void)
{
#if FATTN_HAVE_CUDNN
    for (int i = 0; i < tcase_count; i++)
        if (device_case(&tcase_table[i]))
            printf("%s\n", tcase_table[i].id);
    for (size_t i = 0; i < sizeof refusal_rows / sizeof refusal_rows[0]; i++)
        printf("%s\n", refusal_rows[i].id);
#endif
}

#if FATTN_HAVE_CUDNN
static int setup(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    g_api = fattn__cudnn_api_load(true);
    if (!g_api || fattn_engine_init_cudnn(&g_eng, NULL) != FATTN_OK) {
        printf("Bail out! %s\n", fattn_last_error());
        return 1;
    }
    if (!fattn_engine_supports(g_eng, FATTN_ENGINE_Q_DEVICE_TENSORS)) {
        printf("Bail out! the cuDNN engine does not answer FATTN_ENGINE_Q_DEVICE_TENSORS\n");
        return 1;
    }
    pick_cases();
    return FATTN_GPU_TEST_GO_ON;
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("cudnn-device");
    TCase *tc = tcase_create("device_vs_host");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, device_vs_host, 0, g_ncases);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("refusals");
    tcase_set_timeout(tr, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tr, device_refused, 0,
                        (int)(sizeof refusal_rows / sizeof refusal_rows[0]));
    suite_add_tcase(s, tr);
    return s;
}

static void teardown(void)
{
    fattn_engine_free(g_eng);
}

FATTN_GPU_TEST_MAIN(.make_suite = make_suite, .list_ids = list_ids, .setup = setup,
                    .teardown = teardown)
#else
/* without cuDNN the main skips before it asks for a suite */
static Suite *make_suite(void)
{
    return NULL;
}

FATTN_GPU_TEST_MAIN(.make_suite = make_suite, .list_ids = list_ids)
#endif
