/* The test-only fault-injecting engine wrapper (fault_engine.h). */
#include "fattn_config.h"

#if FATTN_TESTING
#include "fault_engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/dtype.h"
#include "fattn/fp8.h"
#include "fattn/tensor.h"

typedef struct fault_engine {
    fattn_engine base;
    fattn_engine_ops ops; /* the wrapper's, named by its caller */
    fattn_engine *inner;  /* borrowed unless close_inner */
    void (*close_inner)(fattn_engine *);
    fh_fault_plan plan;
    int writes;
    bool failed_backward;
} fault_engine;

static fault_engine *fault_of(const fattn_engine *e)
{
    return (fault_engine *)e->impl;
}

/* The first batch with query rows (cu_seqlens_q; 0 without them), -1 when
 * every batch is empty. */
static int64_t first_batch(const fattn_tensor *cu)
{
    if (fattn_tensor_is_empty(cu))
        return 0;
    const int32_t *c = cu->data;
    for (int64_t b = 0; b + 1 < cu->shape[0]; b++)
        if (c[b + 1] > c[b])
            return b;
    return -1;
}

/* The element offset of index [i0, i1, i2, i3] of t (as many as its rank). */
static int64_t at4(const fattn_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    int64_t ix[FATTN_MAX_DIMS] = {i0, i1, i2, i3};
    return fattn_tensor_offset(t, ix);
}

static void put(const fattn_tensor *t, int64_t off, float v)
{
    if (fattn_dtype_is_fp8(t->dtype))
        ((uint8_t *)t->data)[off] = fattn_fp8_quantize(t->dtype, v, 1.0f);
    else
        fattn_store_f32(t->data, t->dtype, off, v);
}

/* The row of the first batch with rows: (bi, its THD token), false if none. */
static bool first_row(const fattn_fwd_params *p, int64_t *bi, int64_t *tok)
{
    const fattn_attn_common *a = &p->attn;
    *bi = first_batch(&a->cu_seqlens_q);
    if (*bi < 0)
        return false;
    const fattn_tensor *off = fattn_tensor_is_empty(&a->cu_seqlens_q_padded)
                                  ? &a->cu_seqlens_q : &a->cu_seqlens_q_padded;
    *tok = fattn_tensor_is_empty(off) ? 0 : ((const int32_t *)off->data)[*bi];
    return true;
}

/* One fault into the forward's outputs (c's Stats and Max, p's O). */
static void inject(fault_engine *f, const fh_fault *x, const fattn_fwd_params *p,
                   const fattn_fwd_call *c)
{
    int64_t bi, tok;
    if (!first_row(p, &bi, &tok))
        return;
    if (x->output == FH_FAULT_O) {
        const fattn_tensor *o = &p->attn.o;
        int64_t h, d = o->shape[o->ndim - 1], base;
        switch (p->attn.o_format) {
        case FATTN_FORMAT_THD: h = o->shape[1], base = at4(o, tok, x->head, 0, 0); break;
        case FATTN_FORMAT_SBHD: h = o->shape[2], base = at4(o, 0, bi, x->head, 0); break;
        case FATTN_FORMAT_BHSD: h = o->shape[1], base = at4(o, bi, x->head, 0, 0); break;
        default: h = o->shape[2], base = at4(o, bi, 0, x->head, 0); break;
        }
        if (x->head >= h)
            return;
        for (int64_t k = 0; k < d; k++)
            put(o, base + k * o->strides[o->ndim - 1], x->value);
        f->writes++;
        return;
    }
    const fattn_tensor *t = x->output == FH_FAULT_MAX ? &c->max : &c->stats;
    if (fattn_tensor_is_empty(t) || x->head >= t->shape[1])
        return;
    /* [t_q, h, 1] for a THD q, else [b, h, sq, 1] */
    put(t, t->ndim == 3 ? at4(t, tok, x->head, 0, 0) : at4(t, bi, x->head, 0, 0), x->value);
    f->writes++;
}

static fattn_status fault_fwd(fattn_engine *e, const fattn_fwd_params *p, const fattn_fwd_call *c)
{
    fault_engine *f = fault_of(e);
    fattn_status st = f->inner->ops->fwd(f->inner, p, c);
    if (st != FATTN_OK)
        return st;
    for (int i = 0; i < f->plan.n; i++)
        inject(f, &f->plan.f[i], p, c);
    return FATTN_OK;
}

static fattn_status fault_bwd(fattn_engine *e, const fattn_bwd_params *p, const fattn_bwd_call *c)
{
    fault_engine *f = fault_of(e);
    if (f->plan.fail_first_backward && !f->failed_backward) {
        f->failed_backward = true;
        return fattn_error(FATTN_E_INTERNAL, "%s: the injected fault of the first backward "
                           "call (a test-only engine)", e->ops->name);
    }
    return f->inner->ops->bwd(f->inner, p, c);
}

static bool fault_supports(const fattn_engine *e, fattn_engine_query q)
{
    return fattn_engine_supports(fault_of(e)->inner, q);
}

static void fault_report(const fattn_engine *e, fattn_engine_report *out)
{
    *out = fattn_engine_last_report(fault_of(e)->inner);
    out->engine = e->ops->name;
}

static long fault_cudnn_version(const fattn_engine *e)
{
    return fattn_engine_cudnn_version(fault_of(e)->inner);
}

static void fault_free(fattn_engine *e)
{
    fault_engine *f = fault_of(e);
    if (f->close_inner)
        f->close_inner(f->inner);
    free(f);
}

fattn_status fh_fault_engine_wrap(fattn_engine *inner, const fh_fault_plan *plan,
                                     const char *name, void (*close_inner)(fattn_engine *),
                                     fattn_engine **out)
{
    if (!inner || !plan || !name || !out || plan->n < 0 || plan->n > FH_FAULTS_MAX)
        return fattn_error(FATTN_E_INVALID_ARG, "fh_fault_engine_wrap: bad argument");
    fault_engine *f = calloc(1, sizeof *f);
    if (!f)
        return fattn_error(FATTN_E_NOMEM, "fault engine: out of memory");
    f->ops = (fattn_engine_ops){.name = name, .who_fwd = inner->ops->who_fwd,
                                .who_bwd = inner->ops->who_bwd, .fwd = fault_fwd,
                                .bwd = fault_bwd, .supports = fault_supports,
                                .report = fault_report, .free = fault_free,
                                .cudnn_version = fault_cudnn_version};
    f->base.ops = &f->ops;
    f->base.impl = f;
    f->inner = inner;
    f->close_inner = close_inner;
    f->plan = *plan;
    *out = &f->base;
    return FATTN_OK;
}

int fh_fault_engine_writes(const fattn_engine *e)
{
    return fault_of(e)->writes;
}

bool fh_fault_engine_failed_backward(const fattn_engine *e)
{
    return fault_of(e)->failed_backward;
}

/* One item of the plan's text: OUTPUT=VALUE[@HEAD] or bwd=fail. */
static fattn_status parse_item(const char *item, size_t n, fh_fault_plan *plan)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return fattn_error(FATTN_E_INVALID_ARG, "fault plan: empty or overlong item");
    memcpy(buf, item, n);
    buf[n] = '\0';
    if (!strcmp(buf, "bwd=fail")) {
        plan->fail_first_backward = true;
        return FATTN_OK;
    }
    static const char *const outs[] = {"max", "stats", "o"};
    char *eq = strchr(buf, '='), *at = strchr(buf, '@'), *end = NULL;
    int k = -1;
    for (int i = 0; eq && i < 3; i++)
        if ((size_t)(eq - buf) == strlen(outs[i]) && !strncmp(buf, outs[i], strlen(outs[i])))
            k = i;
    if (at)
        *at = '\0';
    long head = at ? strtol(at + 1, &end, 10) : 0;
    const char *v = eq ? eq + 1 : "";
    float value = !strcmp(v, "nan") ? NAN : !strcmp(v, "inf") ? INFINITY
                                        : !strcmp(v, "-inf")  ? -INFINITY : 0.0f;
    bool value_ok = !strcmp(v, "nan") || !strcmp(v, "inf") || !strcmp(v, "-inf");
    if (k < 0 || !value_ok || (at && (!*(at + 1) || *end || head < 0 || head > 65535)) ||
        plan->n >= FH_FAULTS_MAX)
        return fattn_error(FATTN_E_INVALID_ARG, "fault plan: '%.*s' is not OUTPUT=VALUE[@HEAD] "
                           "(OUTPUT max|stats|o, VALUE nan|inf|-inf) nor bwd=fail, or more than "
                           "%d faults", (int)n, item, FH_FAULTS_MAX);
    plan->f[plan->n++] = (fh_fault){(fh_fault_output)k, value, head};
    return FATTN_OK;
}

fattn_status fh_fault_plan_parse(const char *text, fh_fault_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    if (!text || !*text)
        return fattn_error(FATTN_E_INVALID_ARG, "fault plan: empty");
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        fattn_status st = parse_item(p, n, plan);
        if (st != FATTN_OK)
            return st;
        if (!comma)
            return FATTN_OK;
        p = comma + 1;
    }
}

#endif /* FATTN_TESTING */
