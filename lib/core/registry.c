/* The engine registry: name -> how to open it. The only place engine names
 * are compared: callers hold engine objects and ask them questions
 * (fattn_engine_supports, fattn_engine_support_bit). */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "fattn/cudnn.h"
#include "fattn/engine.h"
#include "fattn/support.h"

typedef struct engine_kind {
    const char *name;
    bool (*available)(void);
    fattn_status (*open)(const fattn_engine_options *opt, fattn_engine **out);
    /* Its library loads, asking no device (NULL: it runs on the host). */
    bool (*device_library_loads)(void);
} engine_kind;

static bool always(void) { return true; }
static bool cudnn_loads(void) { return fattn_cudnn_library_loadable(); }

static fattn_status open_cpu(const fattn_engine_options *opt, fattn_engine **out)
{
    fattn_cpu_options o = {.threads = opt->threads};
    return fattn_engine_init_cpu(out, &o);
}

static bool cudnn_available(void) { return fattn_cudnn_available(); }

static fattn_status open_cudnn(const fattn_engine_options *opt, fattn_engine **out)
{
    fattn_cudnn_options o = {.device = opt->device,
                             .force_deterministic_bwd = opt->force_deterministic_bwd,
                             .timing_iters = opt->timing_iters};
    if (opt->cudnn_settings)
        o.settings = *opt->cudnn_settings;
    if (opt->plan_cache) {
        if (!*opt->plan_cache) {
            fattn_status st =
                fattn_cudnn_plan_cache_init(opt->plan_cache, opt->device, opt->cudnn_settings);
            if (st != FATTN_OK)
                return st;
        }
        o.plan_cache = *opt->plan_cache;
    }
    return fattn_engine_init_cudnn(out, &o);
}

/* In the order --backend auto prefers them: a usable GPU first. */
static const engine_kind kinds[] = {
    {"cudnn", cudnn_available, open_cudnn, cudnn_loads},
    {"cpu", always, open_cpu, NULL},
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

static const engine_kind *find(const char *name)
{
    for (size_t i = 0; name && i < NKINDS; i++)
        if (strcmp(kinds[i].name, name) == 0)
            return &kinds[i];
    return NULL;
}

bool fattn_engine_kind_known(const char *name)
{
    return find(name) != NULL;
}

bool fattn_engine_kind_may_use_device(const char *name)
{
    bool any = !name || !strcmp(name, "auto");
    for (size_t i = 0; i < NKINDS; i++)
        if ((any || !strcmp(kinds[i].name, name)) && kinds[i].device_library_loads &&
            kinds[i].device_library_loads())
            return true;
    return false;
}

fattn_status fattn_engine_open(const char *name, const fattn_engine_options *opt,
                               fattn_engine **out)
{
    if (!out)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_engine_open: out is NULL");
    *out = NULL;
    const engine_kind *k = find(name);
    if (!k)
        return fattn_error(FATTN_E_INVALID_ARG, "engine '%s': expected cpu or cudnn",
                           name ? name : "(null)");
    fattn_engine_options defaults = {0};
    return k->open(opt ? opt : &defaults, out);
}

fattn_status fattn_engine_open_auto(const fattn_engine_options *opt, fattn_engine **out,
                                    const char **name)
{
    if (!out || !name)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_engine_open_auto: NULL argument");
    *out = NULL;
    fattn_engine_options defaults = {0};
    fattn_status st = FATTN_E_UNSUPPORTED;
    for (size_t i = 0; i < NKINDS; i++) {
        if (!kinds[i].available())
            continue;
        st = kinds[i].open(opt ? opt : &defaults, out);
        if (st != FATTN_OK)
            continue; /* the next kind; the last one's failure is the answer */
        *name = kinds[i].name;
        return FATTN_OK;
    }
    /* The last kind is always available: its failure is the answer. */
    assert(st != FATTN_OK);
    return st;
}

