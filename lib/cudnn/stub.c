/* The cuDNN engine's API in a build without cuDNN (FATTN_HAVE_CUDNN 0):
 * everything reports FATTN_E_UNSUPPORTED. */
#include <stddef.h>

#include "fattn/cudnn.h"

static fattn_status no_cudnn(void)
{
    return fattn_error(FATTN_E_UNSUPPORTED,
                       "this build of fattn has no cuDNN engine (FATTN_HAVE_CUDNN=0)");
}

bool fattn_cudnn_available(void)
{
    no_cudnn();
    return false;
}

bool fattn_cudnn_library_loadable(void)
{
    no_cudnn();
    return false;
}

fattn_status fattn_cudnn_get_info(int device, fattn_cudnn_info *out)
{
    (void)device;
    (void)out;
    return no_cudnn();
}

fattn_status fattn_engine_init_cudnn(fattn_engine **out, const fattn_cudnn_options *opt)
{
    (void)opt;
    if (out)
        *out = NULL;
    return no_cudnn();
}

const char *fattn_cudnn_last_tag(const fattn_engine *e)
{
    (void)e;
    return "";
}

const char *fattn_cudnn_last_route(const fattn_engine *e)
{
    (void)e;
    return "";
}

int fattn_cudnn_plan_count(const fattn_engine *e)
{
    (void)e;
    return 0;
}

int64_t fattn_cudnn_last_workspace(const fattn_engine *e)
{
    (void)e;
    return 0;
}

bool fattn_cudnn_forces_deterministic(const fattn_engine *e)
{
    (void)e;
    return false;
}

fattn_status fattn_cudnn_set_force_deterministic(fattn_engine *e, bool on)
{
    (void)e;
    (void)on;
    return no_cudnn();
}

fattn_status fattn_cudnn_capture_dropout_mask(fattn_engine *e, float *mask, int64_t count)
{
    (void)e;
    (void)mask;
    (void)count;
    return no_cudnn();
}

fattn_status fattn_cudnn_set_timing(fattn_engine *e, int iters)
{
    (void)e;
    (void)iters;
    return no_cudnn();
}

void fattn_cudnn_last_timing(const fattn_engine *e, fattn_cudnn_timing *out)
{
    (void)e;
    if (out)
        *out = (fattn_cudnn_timing){0};
}

fattn_status fattn_cudnn_plan_stats(const fattn_engine *e, fattn_cudnn_plan_store_stats *out)
{
    (void)e;
    if (out)
        *out = (fattn_cudnn_plan_store_stats){0};
    return no_cudnn();
}

const char *fattn_cudnn_plan_store_dir(const fattn_engine *e)
{
    (void)e;
    return "";
}

const char *fattn_cudnn_last_plan_source(const fattn_engine *e)
{
    (void)e;
    return "";
}
