/* The lazy loading of libcudnn / libcudart (cudnn_internal.h): dlopen on
 * first use, so that a build with the cuDNN engine runs the CPU engine on
 * machines without them; and cuDNN's error text. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fattn_config.h"
#include "cudnn/cudnn_internal.h"
#include "fattn/cudnn.h"

/* ---- loading -------------------------------------------------------------- */

static cudnn_api g_api;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* Guards the paths named and whether each library was tried. */
static pthread_mutex_t g_rt_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_cudnn_tried, g_rt_tried;
/* The paths fattn_cudnn_use_libraries named ("": the default search). */
static char g_cudnn_lib[512], g_cudart_lib[512];

/* dlsym into a function pointer without a pedantic object/function cast. */
#define LOAD(lib, field, sym, ok)                                              \
    do {                                                                       \
        void *f_ = dlsym(lib, sym);                                            \
        if (!f_)                                                               \
            ok = false;                                                        \
        else                                                                   \
            memcpy(&g_api.field, &f_, sizeof f_);                              \
    } while (0)

static void load_cudnn(void)
{
    const char *cands[4];
    int n = 0;
    pthread_mutex_lock(&g_rt_lock);
    g_cudnn_tried = true;
    pthread_mutex_unlock(&g_rt_lock);
    if (g_cudnn_lib[0]) /* fixed once tried: read without the lock */
        cands[n++] = g_cudnn_lib;
#ifdef FATTN_CUDNN_LIBDIR
    cands[n++] = FATTN_CUDNN_LIBDIR "/libcudnn.so.9";
#endif
    cands[n++] = "libcudnn.so.9";
    cands[n++] = "libcudnn.so";
    void *lib = NULL;
    for (int i = 0; i < n && !lib; i++) {
        lib = dlopen(cands[i], RTLD_NOW | RTLD_GLOBAL);
        if (lib)
            snprintf(g_api.cudnn_path, sizeof g_api.cudnn_path, "%s", cands[i]);
    }
    if (!lib) {
        const char *e = dlerror();
        snprintf(g_api.load_error, sizeof g_api.load_error, "cannot load libcudnn.so.9: %s",
                 e ? e : "not found");
        return;
    }
    bool ok = true;
    LOAD(lib, GetVersion, "cudnnGetVersion", ok);
    LOAD(lib, GetErrorString, "cudnnGetErrorString", ok);
    LOAD(lib, GetLastErrorString, "cudnnGetLastErrorString", ok);
    LOAD(lib, Create, "cudnnCreate", ok);
    LOAD(lib, Destroy, "cudnnDestroy", ok);
    LOAD(lib, SetStream, "cudnnSetStream", ok);
    LOAD(lib, BackendCreateDescriptor, "cudnnBackendCreateDescriptor", ok);
    LOAD(lib, BackendDestroyDescriptor, "cudnnBackendDestroyDescriptor", ok);
    LOAD(lib, BackendFinalize, "cudnnBackendFinalize", ok);
    LOAD(lib, BackendSetAttribute, "cudnnBackendSetAttribute", ok);
    LOAD(lib, BackendGetAttribute, "cudnnBackendGetAttribute", ok);
    LOAD(lib, BackendExecute, "cudnnBackendExecute", ok);
    if (!ok) {
        snprintf(g_api.load_error, sizeof g_api.load_error,
                 "%.400s lacks a backend-API symbol (not cuDNN 9?)", g_api.cudnn_path);
        return;
    }
    g_api.cudnn_loaded = true;
}

static void load_cudart(void)
{
    const char *cands[] = {g_cudart_lib, "libcudart.so", "libcudart.so.13", "libcudart.so.12"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof cands / sizeof cands[0] && !lib; i++)
        if (cands[i] && *cands[i])
            lib = dlopen(cands[i], RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        snprintf(g_api.load_error, sizeof g_api.load_error, "cannot load libcudart");
        return;
    }
    bool ok = true;
    LOAD(lib, cudaGetDeviceCount, "cudaGetDeviceCount", ok);
    LOAD(lib, cudaSetDevice, "cudaSetDevice", ok);
    LOAD(lib, cudaDeviceGetAttribute, "cudaDeviceGetAttribute", ok);
    LOAD(lib, cudaRuntimeGetVersion, "cudaRuntimeGetVersion", ok);
    LOAD(lib, cudaDriverGetVersion, "cudaDriverGetVersion", ok);
    LOAD(lib, cudaMalloc, "cudaMalloc", ok);
    LOAD(lib, cudaFree, "cudaFree", ok);
    LOAD(lib, cudaMemcpy, "cudaMemcpy", ok);
    LOAD(lib, cudaMemset, "cudaMemset", ok);
    LOAD(lib, cudaDeviceSynchronize, "cudaDeviceSynchronize", ok);
    LOAD(lib, cudaGetErrorString, "cudaGetErrorString", ok);
    LOAD(lib, cudaEventCreate, "cudaEventCreate", ok);
    LOAD(lib, cudaEventDestroy, "cudaEventDestroy", ok);
    LOAD(lib, cudaEventRecord, "cudaEventRecord", ok);
    LOAD(lib, cudaEventSynchronize, "cudaEventSynchronize", ok);
    LOAD(lib, cudaEventElapsedTime, "cudaEventElapsedTime", ok);
    bool props_ok = true;
    LOAD(lib, cudaGetDeviceProperties, "cudaGetDeviceProperties_v2", props_ok);
    if (!props_ok) {
        props_ok = true;
        LOAD(lib, cudaGetDeviceProperties, "cudaGetDeviceProperties", props_ok);
    }
    if (!ok || !props_ok) {
        snprintf(g_api.load_error, sizeof g_api.load_error, "libcudart lacks a symbol");
        return;
    }
    g_api.cudart_loaded = true;
}

/* One library's path: copied while it is not loaded yet; afterwards only
 * the path it was loaded with (or none) is accepted. */
static fattn_status use_path(char *dst, size_t cap, const char *path, bool tried,
                             const char *what)
{
    if (!path || !*path)
        return FATTN_OK;
    if (tried) {
        if (strcmp(dst, path) == 0)
            return FATTN_OK;
        return fattn_error(FATTN_E_STATE, "cuDNN engine: %s is loaded already (%s), cannot "
                           "load %s instead", what, dst[0] ? dst : "the default search", path);
    }
    if (strlen(path) >= cap)
        return fattn_error(FATTN_E_INVALID_ARG, "cuDNN engine: the %s path is longer than %zu "
                           "bytes", what, cap - 1);
    snprintf(dst, cap, "%s", path);
    return FATTN_OK;
}

fattn_status fattn_cudnn_use_libraries(const fattn_cudnn_settings *s)
{
    if (!s)
        return FATTN_OK;
    pthread_mutex_lock(&g_rt_lock);
    fattn_status st = use_path(g_cudnn_lib, sizeof g_cudnn_lib, s->cudnn_lib, g_cudnn_tried,
                               "libcudnn");
    if (st != FATTN_OK)
        goto out;
    st = use_path(g_cudart_lib, sizeof g_cudart_lib, s->cudart_lib, g_rt_tried, "libcudart");
out:
    pthread_mutex_unlock(&g_rt_lock);
    return st;
}

const cudnn_api *fattn__cudnn_api_load(bool want_cudart)
{
    pthread_once(&g_once, load_cudnn);
    if (!g_api.cudnn_loaded) {
        fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: %s", g_api.load_error);
        return NULL;
    }
    if (want_cudart) {
        pthread_mutex_lock(&g_rt_lock);
        if (!g_rt_tried) {
            g_rt_tried = true;
            load_cudart();
        }
        pthread_mutex_unlock(&g_rt_lock);
        if (!g_api.cudart_loaded) {
            fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: %s", g_api.load_error);
            return NULL;
        }
    }
    return &g_api;
}

fattn_status fattn__cudnn_fail(const cudnn_api *api, cudnnStatus_t s, const char *what)
{
    char last[1024] = "";
    if (api->GetLastErrorString)
        api->GetLastErrorString(last, sizeof last);
    return fattn_error(FATTN_E_CUDNN, "cuDNN: %s failed: %s%s%s", what,
                       api->GetErrorString ? api->GetErrorString(s) : "?", *last ? ": " : "",
                       last);
}
