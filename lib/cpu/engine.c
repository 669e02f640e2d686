/* The CPU engine's operation table. */
#include <assert.h>
#include <stdlib.h>

#include "cpu/cpu.h"

#define STR2(x) #x
#define STR(x) STR2(x)
#define FATTN_CPU_PLATFORM_KEY "cpu-math-" STR(FATTN_CPU_MATH_VERSION)

typedef struct cpu_engine {
    fattn_engine base;
    int threads;
} cpu_engine;

/* The CPU engine reads and writes tensors through host pointers: a device
 * tensor is refused before any is touched. */
static fattn_status host_only(const fattn_tensor *const *t, const char *const *names, int n,
                              const char *who)
{
    for (int i = 0; i < n; i++)
        if (!fattn_tensor_is_empty(t[i]) && t[i]->device != FATTN_DEVICE_HOST)
            return fattn_error(FATTN_E_UNSUPPORTED, "CPU %s: %s is a device tensor; the CPU "
                               "engine takes host tensors only", who, names[i]);
    return FATTN_OK;
}

static fattn_status cpu_engine_fwd(fattn_engine *e, const fattn_fwd_params *p,
                                   const fattn_fwd_call *c)
{
    static const char *const names[] = {"Q", "K", "V", "O", "Bias", "Stats", "Max"};
    const fattn_tensor *t[] = {&p->attn.q, &p->attn.k, &p->attn.v, &p->attn.o, &p->bias, &c->stats, &c->max};
    /* no engine runs it: the dispatch refused it (row pre_scale_bias_engines) */
    assert(p->attn.bias_type != FATTN_BIAS_PRE_SCALE_BIAS);
    _Static_assert(sizeof names / sizeof names[0] == sizeof t / sizeof t[0], "a name per tensor");
    fattn_status st = host_only(t, names, (int)(sizeof t / sizeof t[0]), "forward");
    if (st != FATTN_OK)
        return st;
    if (p->fp8)
        return fattn__cpu_fp8_forward(((cpu_engine *)e)->threads, p, c);
    return fattn__cpu_forward(((cpu_engine *)e)->threads, p, c);
}

static fattn_status cpu_engine_bwd(fattn_engine *e, const fattn_bwd_params *p,
                                   const fattn_bwd_call *c)
{
    static const char *const names[] = {"Q",  "K",  "V",     "O",     "dO",             "Stats",
                                        "dQ", "dK", "dV",    "Bias",  "dBias",
                                        "dSoftmaxOffset"};
    const fattn_tensor *t[] = {&p->attn.q,  &p->attn.k,  &p->attn.v,   &p->attn.o,      &p->d_o,
                               &c->stats, &p->dq, &p->dk, &p->dv, &c->bias, &p->d_bias,
                               &p->d_softmax_offset};
    assert(p->attn.bias_type != FATTN_BIAS_PRE_SCALE_BIAS); /* as the forward's */
    _Static_assert(sizeof names / sizeof names[0] == sizeof t / sizeof t[0], "a name per tensor");
    fattn_status st = host_only(t, names, (int)(sizeof t / sizeof t[0]), "backward");
    if (st != FATTN_OK)
        return st;
    if (p->fp8)
        return fattn__cpu_fp8_backward(((cpu_engine *)e)->threads, p, c);
    return fattn__cpu_backward(((cpu_engine *)e)->threads, p, c);
}

static void cpu_engine_free(fattn_engine *e) { free(e); }

static bool cpu_engine_supports(const fattn_engine *e, fattn_engine_query q)
{
    (void)e;
    return q == FATTN_ENGINE_Q_FP8 || q == FATTN_ENGINE_Q_CPU_MATH;
}

/* Its results depend on nothing but the math version: one platform. */
static void cpu_engine_report(const fattn_engine *e, fattn_engine_report *out)
{
    (void)e;
    out->platform = FATTN_CPU_PLATFORM_KEY;
}

static const fattn_engine_ops cpu_ops = {
    .name = "cpu",
    .fwd = cpu_engine_fwd,
    .bwd = cpu_engine_bwd,
    .supports = cpu_engine_supports, /* FP8 only */
    .report = cpu_engine_report,
    .free = cpu_engine_free,
};

fattn_status fattn_engine_init_cpu(fattn_engine **out, const fattn_cpu_options *opt)
{
    if (!out)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_engine_init_cpu: out is NULL");
    *out = NULL;
    int threads = opt ? opt->threads : 0;
    if (threads < 0)
        return fattn_error(FATTN_E_INVALID_ARG, "CPU engine: %d threads", threads);
    cpu_engine *e = calloc(1, sizeof *e);
    if (!e)
        return fattn_error(FATTN_E_NOMEM, "CPU engine: cannot allocate");
    e->base.ops = &cpu_ops;
    e->base.impl = e;
    e->threads = threads ? threads : fattn__cpu_default_threads();
    *out = &e->base;
    return FATTN_OK;
}
