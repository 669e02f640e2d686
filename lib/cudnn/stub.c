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
