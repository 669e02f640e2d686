/* Test-only engine variants that prove --check-writes and --repeat can fail.
 *
 * Selected with the environment variable FATTN_TEST_ENGINE_VARIANT (the CLI
 * says so on stderr and records `prov_test_variant` in the run file); they
 * wrap the real engine and misbehave in one known way:
 *   unwritten_dq  backward leaves dQ's element at logical index [0,..,0,1]
 *                 as it found it (so the poison survives there)
 *   flaky_dk      every second backward adds one ulp to dK's first element
 *   fault:PLAN    the fault-injecting engine (harness/run/fault_engine.h):
 *                 PLAN as fh_fault_plan_parse takes it, e.g.
 *                 fault:max=nan,o=inf@1,bwd=fail
 * Compiled only in a build with -Dtesting=true (FATTN_TESTING): a shipping
 * CLI has no variant to select.
 */
#include "fattn_config.h"

#if FATTN_TESTING
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fault_engine.h"
#include "test_variants.h"

typedef struct variant_engine {
    fattn_engine base;
    fattn_engine *inner;
    int kind; /* 1 unwritten_dq, 2 flaky_dk */
    unsigned calls;
} variant_engine;

/* The dispatch has resolved the call already: hand it to the inner engine's
 * operation as it is. */
static fattn_status variant_fwd(fattn_engine *e, const fattn_fwd_params *p,
                                const fattn_fwd_call *c)
{
    fattn_engine *in = ((variant_engine *)e)->inner;
    return in->ops->fwd(in, p, c);
}

/* Element offset (in elements) of logical index [0, .., 0, last]. */
static int64_t first_offset(const fattn_tensor *t, int64_t last)
{
    return t->ndim > 0 ? last * t->strides[t->ndim - 1] : 0;
}

static fattn_status variant_bwd(fattn_engine *e, const fattn_bwd_params *p,
                                const fattn_bwd_call *c)
{
    variant_engine *v = (variant_engine *)e;
    size_t esz = fattn_dtype_size(p->dq.dtype);
    unsigned char saved[8] = {0};
    bool can_keep = v->kind == 1 && !fattn_tensor_is_empty(&p->dq) && p->dq.ndim > 0 &&
                    p->dq.shape[p->dq.ndim - 1] > 1 && esz <= sizeof saved;
    char *dq_elem = can_keep ? (char *)p->dq.data + (size_t)first_offset(&p->dq, 1) * esz : NULL;
    if (dq_elem)
        memcpy(saved, dq_elem, esz);
    fattn_status st = v->inner->ops->bwd(v->inner, p, c);
    if (st != FATTN_OK)
        return st;
    if (dq_elem)
        memcpy(dq_elem, saved, esz);
    if (v->kind == 2 && (v->calls++ & 1u) && !fattn_tensor_is_empty(&p->dk)) {
        /* one ulp on the raw bits: +1 on the low byte's integer */
        size_t kesz = fattn_dtype_size(p->dk.dtype);
        unsigned char *b = p->dk.data;
        uint64_t bits = 0;
        memcpy(&bits, b, kesz);
        bits += 1;
        memcpy(b, &bits, kesz);
    }
    return FATTN_OK;
}

static void variant_free(fattn_engine *e)
{
    variant_engine *v = (variant_engine *)e;
    cli_engine_close(v->inner);
    free(v);
}

/* The inner engine's report; no query holds (the support table checks a
 * variant with the CPU rules, and no provenance tag is recorded for it). */
static void variant_report(const fattn_engine *e, fattn_engine_report *out)
{
    *out = fattn_engine_last_report(((const variant_engine *)e)->inner);
    out->engine = e->ops->name;
}

static const fattn_engine_ops unwritten_ops = {
    .name = "test-variant:unwritten_dq", .fwd = variant_fwd, .bwd = variant_bwd,
    .supports = NULL, .report = variant_report, .free = variant_free};
static const fattn_engine_ops flaky_ops = {
    .name = "test-variant:flaky_dk", .fwd = variant_fwd, .bwd = variant_bwd,
    .supports = NULL, .report = variant_report, .free = variant_free};

fattn_status fh_test_variant_wrap(fattn_engine *inner, const char *name,
                                     fattn_engine **out)
{
    if (!strncmp(name, "fault:", 6)) { /* the fault-injecting engine (fault_engine.h) */
        fh_fault_plan plan;
        fattn_status st = fh_fault_plan_parse(name + 6, &plan);
        if (st != FATTN_OK)
            return fattn_error(st, "FATTN_TEST_ENGINE_VARIANT='%s': %s", name,
                               fattn_last_error());
        return fh_fault_engine_wrap(inner, &plan, "test-variant:fault", cli_engine_close, out);
    }
    int kind = !strcmp(name, "unwritten_dq") ? 1 : !strcmp(name, "flaky_dk") ? 2 : 0;
    if (!kind)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "FATTN_TEST_ENGINE_VARIANT='%s': expected unwritten_dq, flaky_dk "
                           "or fault:PLAN",
                           name);
    variant_engine *v = calloc(1, sizeof *v);
    if (!v)
        return fattn_error(FATTN_E_NOMEM, "test variant");
    v->base.ops = kind == 1 ? &unwritten_ops : &flaky_ops;
    v->base.impl = v;
    v->inner = inner;
    v->kind = kind;
    *out = &v->base;
    return FATTN_OK;
}

#endif /* FATTN_TESTING */
