/* The tolerance table and the element walk of oracle_check.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fattn/dtype.h"
#include "oracle_check.h"

/* Rule: |engine - oracle| <= atol + rtol * |oracle|, per dtype and output.
 *
 * Why these numbers. The engine computes in float32 and rounds to the io
 * dtype at cuDNN's rounding points (numerics.md): P before P.V, Pd and dS
 * before their products, each io output once. Let u be the unit roundoff:
 * 2^-11 (float16), 2^-8 (bfloat16), 2^-24 (float32).
 *  - rtol is about 4u for the io outputs (float16 2e-3, bfloat16 1.6e-2,
 *    TE's own cross-backend tolerances are 1e-3 / 1.5e-2): the final
 *    rounding alone costs u.
 *  - atol covers the rounded intermediates: a rounded P or dS is a relative
 *    error u on every *term* of a sum of mixed signs, so the error scales
 *    with the sum of |terms| of that output, not with |result|. That scale
 *    differs per output (inputs: q, k ~ 0.5 U(-1,1), v ~ U(-1,1),
 *    dO ~ 0.1 U(-1,1); |O| <= ~2 with dropout, |dV| <= ~0.5, |dBias|,
 *    |dQ|, |dK| <= ~0.08), hence one atol per output kind.
 *  - Stats, Max and dSoftmaxOffset are float32 whatever the io dtype: their
 *    logits come from the exact io inputs, and (oracle backward given the
 *    engine's O and Stats) dSoftmaxOffset sees no io rounding at all.
 * Each atol is about 4x the largest error measured over the whole table
 * (FATTN_TEST_REPORT=1) after the rtol share; worst measured |error| and
 * the worst fraction of the allowance used (engine at FATTN_CPU_MATH_VERSION 1):
 *              O        dQ,dK    dV       dBias    dOffset  Stats/Max
 *   float16    5.1e-4   1.5e-5   1.4e-4   2.6e-5   2.0e-8   6.2e-7
 *              (0.25)   (0.29)   (0.40)   (0.20)   (0.04)   (0.14)
 *   bfloat16   6.2e-3   1.1e-4   1.0e-3   1.9e-4   3.0e-8   6.9e-7
 *              (0.30)   (0.38)   (0.28)   (0.18)   (0.03)   (0.13)
 *   float32    1.1e-7   6.4e-9   4.6e-8   5.1e-9   4.6e-8   3.8e-7
 *              (0.27)   (0.22)   (0.38)   (0.22)   (0.03)   (0.13)
 * The engine is bit-reproducible across machines, so these measurements do
 * not drift; a change of FATTN_CPU_MATH_VERSION is the time to re-measure. */
static const tolerance tolerances[] = {
    /*                       O                dQ, dK            dV */
    /*                       dBias            dSoftmaxOffset    Stats, Max */
    {FATTN_DTYPE_FLOAT16,  {{1e-3, 2e-3},     {2e-5, 2e-3},     {1e-4, 2e-3},
                            {1e-5, 2e-3},     {1e-7, 1e-5},     {1e-7, 1e-6}}},
    {FATTN_DTYPE_BFLOAT16, {{6e-3, 1.6e-2},   {1.5e-4, 1.6e-2}, {1e-3, 1.6e-2},
                            {1e-4, 1.6e-2},   {1e-7, 1e-5},     {1e-7, 1e-6}}},
    {FATTN_DTYPE_FLOAT32,  {{1.5e-7, 1e-6},   {1.5e-8, 1e-6},   {5e-8, 1e-6},
                            {1.5e-8, 1e-6},   {1e-7, 1e-5},     {1e-7, 1e-6}}},
};

/* The cuDNN engine (cuDNN 9.19 on the H200) against the same oracle, as a
 * fraction of the table above (docs/gpu-runs/2026-12-02-oracle.json, every
 * GPU case of the matrix, both dQ variants):
 *              O      dQ     dK     dV     dBias  dOffset  Stats
 *   float16    0.22   0.24   0.43   0.40   1.09   0.03     0.18
 *   bfloat16   0.23   0.23   0.37   0.29   0.65   0.06     0.17
 * Everything fits the CPU engine's allowances but dBias, worst where the
 * bias is shared across heads (b1ss: cuDNN sums dS over h): 1.29e-5 at an
 * oracle value of 9.6e-4, i.e. an atol need of 1.1e-5 (float16). Its dBias
 * atol is about 4x the need, as for the rest of the table. */
static const tolerance tolerances_cudnn[] = {
    {FATTN_DTYPE_FLOAT16,  {{1e-3, 2e-3},     {2e-5, 2e-3},     {1e-4, 2e-3},
                            {5e-5, 2e-3},     {1e-7, 1e-5},     {1e-7, 1e-6}}},
    {FATTN_DTYPE_BFLOAT16, {{6e-3, 1.6e-2},   {1.5e-4, 1.6e-2}, {1e-3, 1.6e-2},
                            {3e-4, 1.6e-2},   {1e-7, 1e-5},     {1e-7, 1e-6}}},
};

static const tolerance *find(const tolerance *tab, size_t n, fattn_dtype t)
{
    for (size_t i = 0; i < n; i++)
        if (tab[i].dtype == t)
            return &tab[i];
    return NULL;
}

const tolerance *tolerance_for(fattn_dtype t)
{
    return find(tolerances, sizeof tolerances / sizeof tolerances[0], t);
}

const tolerance *tolerance_for_cudnn(fattn_dtype t)
{
    return find(tolerances_cudnn, sizeof tolerances_cudnn / sizeof tolerances_cudnn[0], t);
}

static bool all_poison(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0xFF)
            return false;
    return true;
}

void oracle_check_output(const tcase *c, const tcase_buffers *buf, const check_out *k,
                         check_report *r)
{
    memset(r, 0, sizeof *r);
    const fattn_tensor *t = k->t;
    if (fattn_tensor_is_empty(t)) {
        r->fatal++;
        snprintf(r->first_fatal, sizeof r->first_fatal, "%s: %s missing", c->id, k->name);
        return;
    }
    size_t esz = fattn_dtype_size(t->dtype);
    int64_t n = fattn_tensor_numel(t);
    int64_t idx[FATTN_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; e++) {
        const char *p = (const char *)t->data + (size_t)fattn_tensor_offset(t, idx) * esz;
        if (!oracle_defined(c, buf, k->which, idx)) {
            if (!all_poison(p, esz) && r->fatal++ == 0)
                snprintf(r->first_fatal, sizeof r->first_fatal,
                         "%s: %s[%lld] (C order) is outside the defined region but was "
                         "written (%g)", c->id, k->name, (long long)e,
                         (double)fattn_load_f32(p, t->dtype, 0));
        } else {
            r->defined++;
            double a = (double)fattn_load_f32(p, t->dtype, 0);
            double ref = k->ref[e];
            if (isinf(ref)) { /* Stats / Max of an empty row */
                if (a != ref && r->fatal++ == 0)
                    snprintf(r->first_fatal, sizeof r->first_fatal,
                             "%s: %s[%lld]: engine %.9g, oracle %g", c->id, k->name,
                             (long long)e, a, ref);
            } else if (!isfinite(a)) {
                if (r->fatal++ == 0)
                    snprintf(r->first_fatal, sizeof r->first_fatal,
                             "%s: %s[%lld] is not finite (%g), oracle %.9g", c->id, k->name,
                             (long long)e, a, ref);
            } else {
                double err = fabs(a - ref), allow = k->atol + k->rtol * fabs(ref);
                if (err > r->worst_abs)
                    r->worst_abs = err;
                if (err / allow > r->worst_frac)
                    r->worst_frac = err / allow;
                if (err - k->rtol * fabs(ref) > r->worst_need)
                    r->worst_need = err - k->rtol * fabs(ref);
                if (fabs(ref) > r->max_ref)
                    r->max_ref = fabs(ref);
                if (err > allow && r->out_of_tol++ == 0)
                    snprintf(r->first_tol, sizeof r->first_tol,
                             "%s: %s[%lld] (C order): engine %.9g, oracle %.9g, |diff| %.3g > "
                             "%.3g", c->id, k->name, (long long)e, a, ref, err, allow);
            }
        }
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d])
                break;
            idx[d] = 0;
        }
    }
    if (r->defined == 0 && r->fatal++ == 0)
        snprintf(r->first_fatal, sizeof r->first_fatal, "%s: %s has no defined element",
                 c->id, k->name);
}
