/* The cuDNN engine's API in a build without cuDNN (FATTN_HAVE_CUDNN 0):
 * everything reports FATTN_E_UNSUPPORTED. */
#include <stddef.h>

#include "fattn/cudnn.h"

static fattn_status no_cudnn(void)
{
    return fattn_error(FATTN_E_UNSUPPORTED,
                       "this build of fattn has no cuDNN engine (FATTN_HAVE_CUDNN=0)");
}

/* Nothing is ever loaded: any library named is as good as none. */
fattn_status fattn_cudnn_use_libraries(const fattn_cudnn_settings *s)
{
    (void)s;
    return FATTN_OK;
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

fattn_status fattn_cudnn_capture_dropout_mask(fattn_engine *e, float *mask, int64_t count)
{
    (void)e;
    (void)mask;
    (void)count;
    return no_cudnn();
}

const char *fattn_cudnn_engine_settings(const fattn_engine *e)
{
    (void)e;
    return "";
}

fattn_status fattn_cudnn_capture_max(fattn_engine *e, float *dst, int64_t count,
                                     const uint32_t *fill)
{
    (void)e;
    (void)dst;
    (void)count;
    (void)fill;
    return no_cudnn();
}

fattn_status fattn_cudnn_plan_cache_init(fattn_cudnn_plan_cache **out, int device,
                                         const fattn_cudnn_settings *settings)
{
    (void)device;
    (void)settings;
    if (out)
        *out = NULL;
    return no_cudnn();
}

void fattn_cudnn_plan_cache_free(fattn_cudnn_plan_cache *c)
{
    (void)c;
}

int fattn_cudnn_plan_cache_count(const fattn_cudnn_plan_cache *c)
{
    (void)c;
    return 0;
}

fattn_status fattn_cudnn_plan_cache_stats(const fattn_cudnn_plan_cache *c,
                                          fattn_cudnn_plan_store_stats *out)
{
    (void)c;
    (void)out;
    return no_cudnn();
}

const char *fattn_cudnn_plan_cache_store_dir(const fattn_cudnn_plan_cache *c)
{
    (void)c;
    return "";
}

fattn_cudnn_plan_cache *fattn_cudnn_engine_plan_cache(const fattn_engine *e)
{
    (void)e;
    return NULL;
}
