/* The cuDNN engine object (fattn/cudnn.h): its operation table, what it
 * answers and reports, init and free. Calls are in forward.c and
 * backward.c, plans in plans.c (engine_internal.h has the map). */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cudnn/engine_internal.h"
#include "fattn/cudnn.h"

double fattn__cudnn_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


static void cudnn_engine_free(fattn_engine *base)
{
    cudnn_engine *e = (cudnn_engine *)base;
    if (e->own_pc)
        fattn_cudnn_plan_cache_free(e->pc);
    free(e->scratch);
    free(e->kb);
    free(e);
}

static bool cudnn_engine_supports(const fattn_engine *base, fattn_engine_query q)
{
    const cudnn_engine *e = (const cudnn_engine *)base;
    switch (q) {
    case FATTN_ENGINE_Q_SUPPORT_RULES_CUDNN:
    case FATTN_ENGINE_Q_PLAN_TAG:
    case FATTN_ENGINE_Q_NOISY_D_SOFTMAX_OFFSET:
    case FATTN_ENGINE_Q_CUDA_DEVICE:
    case FATTN_ENGINE_Q_DEVICE_TENSORS:
        return true;
    case FATTN_ENGINE_Q_FORCED_DETERMINISTIC_BWD:
        return e->force_det;
    case FATTN_ENGINE_Q_FP8: /* fp8_run.c; what an architecture lacks is a support row */
        return true;
    case FATTN_ENGINE_Q_CPU_MATH:
        return false;
    }
    return false;
}

static void cudnn_engine_report(const fattn_engine *base, fattn_engine_report *out)
{
    const cudnn_engine *e = (const cudnn_engine *)base;
    assert(e->pc && e->last_plan_source);
    out->platform = e->platform;
    out->tag = e->last_tag;
    out->route = e->last_route;
    out->plan_source = e->last_plan_source;
    out->plans = e->pc->nplans;
    out->workspace = e->last_workspace;
    out->timing = e->timing;
}

static long cudnn_engine_version(const fattn_engine *base)
{
    return (long)((const cudnn_engine *)base)->api->GetVersion();
}

/* The device's architecture, for the support rows that hold on some only
 * (what cudnn-frontend's FP8 SDPA builds there). */
static int cudnn_engine_sm(const fattn_engine *base)
{
    const fattn_cudnn_plan_cache *pc = ((const cudnn_engine *)base)->pc;
    return pc->cc_major * 10 + pc->cc_minor;
}

static const fattn_engine_ops cudnn_ops = {
    .name = "cudnn",
    .who_fwd = "cuDNN forward",
    .who_bwd = "cuDNN backward",
    .fwd = fattn__cudnn_engine_fwd,
    .bwd = fattn__cudnn_engine_bwd,
    .supports = cudnn_engine_supports,
    .report = cudnn_engine_report,
    .free = cudnn_engine_free,
    .cudnn_version = cudnn_engine_version,
    .sm = cudnn_engine_sm,
};

/* ---- public --------------------------------------------------------------- */

const char *fattn_cudnn_engine_settings(const fattn_engine *e)
{
    return e && e->ops == &cudnn_ops ? ((const cudnn_engine *)e)->pc->settings_text : "";
}

bool fattn_cudnn_library_loadable(void)
{
    return fattn__cudnn_api_load(false) != NULL;
}

bool fattn_cudnn_available(void)
{
    const cudnn_api *api = fattn__cudnn_api_load(true);
    if (!api)
        return false;
    int n = 0;
    cudaError_t ce = api->cudaGetDeviceCount(&n);
    if (ce != cudaSuccess || n <= 0) {
        fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: no CUDA device (%s)",
                    ce != cudaSuccess ? api->cudaGetErrorString(ce) : "count 0");
        return false;
    }
    return true;
}

fattn_status fattn_cudnn_get_info(int device, fattn_cudnn_info *out)
{
    memset(out, 0, sizeof *out);
    out->cudnn_header_version = CUDNN_VERSION;
    if (!fattn_cudnn_available())
        return fattn_error(FATTN_E_UNSUPPORTED, "%s", fattn_last_error());
    const cudnn_api *api = fattn__cudnn_api_load(true);
    out->cudnn_version = (int64_t)api->GetVersion();
    snprintf(out->cudnn_library, sizeof out->cudnn_library, "%s", api->cudnn_path);
    api->cudaRuntimeGetVersion(&out->cuda_runtime_version);
    api->cudaDriverGetVersion(&out->cuda_driver_version);
    api->cudaDeviceGetAttribute(&out->sm_count, cudaDevAttrMultiProcessorCount, device);
    api->cudaDeviceGetAttribute(&out->cc_major, cudaDevAttrComputeCapabilityMajor, device);
    api->cudaDeviceGetAttribute(&out->cc_minor, cudaDevAttrComputeCapabilityMinor, device);
    /* The device name is the first field of cudaDeviceProp; the buffer is
     * larger than any version's struct. */
    size_t cap = sizeof(struct cudaDeviceProp) + 8192;
    char *props = calloc(1, cap);
    if (props) {
        if (api->cudaGetDeviceProperties(props, device) == cudaSuccess)
            snprintf(out->device_name, sizeof out->device_name, "%.255s", props);
        free(props);
    }
    return FATTN_OK;
}

/* The platform key goldens are filed under: GPU model, compute capability,
 * SM count, cuDNN runtime version (bitwise comparison against goldens is
 * only meaningful on an exact match). */
static void platform_key(int device, char *buf, size_t n)
{
    fattn_cudnn_info info;
    if (fattn_cudnn_get_info(device, &info) != FATTN_OK) {
        snprintf(buf, n, "cudnn-unknown");
        return;
    }
    char name[64];
    size_t k = 0;
    for (const char *p = info.device_name; *p && k + 1 < sizeof name; p++)
        name[k++] = (*p >= 'A' && *p <= 'Z') ? (char)(*p - 'A' + 'a')
                    : ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')) ? *p
                                                                            : '-';
    name[k] = '\0';
    snprintf(buf, n, "cudnn-%s-sm%d%d-%dsm-cudnn%lld", name, info.cc_major, info.cc_minor,
             info.sm_count, (long long)info.cudnn_version);
}

fattn_status fattn_engine_init_cudnn(fattn_engine **out, const fattn_cudnn_options *opt)
{
    if (!out)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_engine_init_cudnn: out is NULL");
    *out = NULL;
    if (opt && (opt->timing_iters < 0 || opt->timing_iters > 100000))
        return fattn_error(FATTN_E_INVALID_ARG, "cuDNN engine: %d timing iterations",
                           opt->timing_iters);
    cudnn_engine *e = calloc(1, sizeof *e);
    if (!e)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: cannot allocate");
    fattn_status st = FATTN_OK;
    e->scratch = malloc(sizeof *e->scratch);
    e->kb = malloc(sizeof *e->kb);
    if (!e->scratch || !e->kb) {
        st = fattn_error(FATTN_E_NOMEM, "cuDNN engine: cannot allocate");
        goto out;
    }
    e->pc = opt ? opt->plan_cache : NULL;
    if (!e->pc) {
        st = fattn_cudnn_plan_cache_init(&e->pc, opt ? opt->device : 0,
                                         opt ? &opt->settings : NULL);
        if (st != FATTN_OK)
            goto out;
        e->own_pc = true;
    }
    e->base.ops = &cudnn_ops;
    e->base.impl = e;
    e->api = e->pc->api;
    e->force_det = opt && opt->force_deterministic_bwd;
    e->time_iters = opt ? opt->timing_iters : 0;
    e->last_plan_source = "";
    platform_key(e->pc->device, e->platform, sizeof e->platform);
    *out = &e->base;
out:
    if (st != FATTN_OK) {
        free(e->scratch);
        free(e->kb);
        free(e);
    }
    return st;
}

static const cudnn_engine *as_cudnn(const fattn_engine *e)
{
    return e && e->ops == &cudnn_ops ? (const cudnn_engine *)e : NULL;
}

fattn_status fattn_cudnn_capture_dropout_mask(fattn_engine *e, float *mask, int64_t count)
{
    cudnn_engine *c = (cudnn_engine *)as_cudnn(e);
    if (!c)
        return fattn_error(FATTN_E_INVALID_ARG, "capture_dropout_mask: not a cuDNN engine");
    if (mask && count <= 0)
        return fattn_error(FATTN_E_INVALID_ARG, "capture_dropout_mask: count %lld",
                           (long long)count);
    c->mask_dst = mask;
    c->mask_cap = mask ? count : 0;
    return FATTN_OK;
}

fattn_status fattn_cudnn_capture_max(fattn_engine *e, float *dst, int64_t count,
                                     const uint32_t *fill)
{
    cudnn_engine *c = (cudnn_engine *)as_cudnn(e);
    if (!c)
        return fattn_error(FATTN_E_INVALID_ARG, "capture_max: not a cuDNN engine");
    if (dst && count <= 0)
        return fattn_error(FATTN_E_INVALID_ARG, "capture_max: count %lld", (long long)count);
    c->max_dst = dst;
    c->max_cap = dst ? count : 0;
    c->max_fill_on = dst && fill;
    c->max_fill = fill ? *fill : 0;
    return FATTN_OK;
}

fattn_cudnn_plan_cache *fattn_cudnn_engine_plan_cache(const fattn_engine *e)
{
    const cudnn_engine *c = as_cudnn(e);
    return c ? c->pc : NULL;
}
