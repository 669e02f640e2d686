/* The cuDNN engine's FP8 calls (fattn_fwd_params.fp8 / fattn_bwd_params.fp8):
 * the FP8 graphs of graph_fp8.c, their scaling factors uploaded as one
 * device array of floats (one [1,1,1,1] tensor per factor), the amax
 * outputs read back from it after the execution. Shapes and the copies of
 * the defined regions are the F16 paths'. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn/engine_internal.h"
#include "fattn/fp8.h"

#define FP8_NSCALARS (CG_ROLE_AMAX_DV - CG_ROLE_DESCALE_Q + 1)

typedef struct fp8_scalars {
    float v[FP8_NSCALARS];
} fp8_scalars;

static void put(fp8_scalars *s, cg_role r, float v)
{
    s->v[r - CG_ROLE_DESCALE_Q] = v;
}

static float get(const fp8_scalars *s, cg_role r)
{
    return s->v[r - CG_ROLE_DESCALE_Q];
}

/* A gradient or O that is not FP8 is stored unscaled (engine.h): its scale
 * factor in the graph is 1. */
static float out_scale(fattn_dtype t, float scale)
{
    return fattn_dtype_is_fp8(t) ? scale : 1.0f;
}

static fattn_status upload_scalars(dev_arena *a, const fp8_scalars *s, dev_bindings *d)
{
    void *dev = NULL;
    fattn_status st = fattn__cudnn_dev_upload(a, s->v, sizeof s->v, &dev);
    if (st != FATTN_OK)
        return st;
    for (int r = CG_ROLE_DESCALE_Q; r <= CG_ROLE_AMAX_DV; r++)
        d->p[r] = (char *)dev + (size_t)(r - CG_ROLE_DESCALE_Q) * sizeof(float);
    return FATTN_OK;
}

static fattn_status build_fwd(cg_graph *g, const void *desc)
{
    return fattn__cg_build_fwd(g, desc);
}

static fattn_status build_bwd(cg_graph *g, const void *desc)
{
    return fattn__cg_build_bwd(g, desc);
}

/* O's defined rows and Stats back from the device. */
static fattn_status fwd_copy_back(cudnn_engine *e, const fattn_fwd_params *p,
                                  const fattn_geom *geom, fattn_tensor *stats,
                                  const dev_bindings *d, size_t o_bytes, size_t stats_bytes)
{
    char *ho = malloc(o_bytes);
    float *hs = malloc(stats_bytes);
    fattn_status st = FATTN_OK;
    if (!ho || !hs) {
        st = fattn_error(FATTN_E_NOMEM, "cuDNN engine: host staging");
        goto out;
    }
    st = fattn__cudnn_download(e->api, ho, d->p[CG_ROLE_O], o_bytes);
    if (st != FATTN_OK)
        goto out;
    st = fattn__cudnn_download(e->api, hs, d->p[CG_ROLE_STATS], stats_bytes);
    if (st != FATTN_OK)
        goto out;
    size_t esz = fattn_dtype_size(p->attn.o.dtype), row = (size_t)geom->dv * esz;
    int64_t h = geom->h;
    float *sdst = stats->data;
    for (int64_t bi = 0; bi < geom->b; bi++)
        for (int64_t i = 0; i < geom->len_q[bi]; i++)
            for (int64_t n = 0; n < h; n++) {
                int64_t off = fattn__geom_row_offset(&p->attn.o, geom->q_fmt, geom->off_q, bi,
                                                    i, n);
                memcpy((char *)p->attn.o.data + (size_t)off * esz, ho + (size_t)off * esz, row);
                sdst[fattn__geom_stats_offset(geom, stats, bi, n, i)] =
                    hs[(bi * h + n) * geom->sq + i];
            }
out:
    free(ho);
    free(hs);
    return st;
}

/* The FP8 path uploads its operands from host memory; device tensors are
 * refused by name rather than read as host pointers. */
static fattn_status refuse_device(const fattn_tensor *q, const char *who)
{
    if (q->device != FATTN_DEVICE_CUDA)
        return FATTN_OK;
    return fattn_error(FATTN_E_UNSUPPORTED, "%s: device tensors are not taken on the FP8 "
                       "path (host tensors only)", who);
}

fattn_status fattn__cudnn_fp8_fwd(cudnn_engine *e, const fattn_fwd_params *p, const fattn_fwd_call *c)
{
    const fattn_fp8_fwd *f = p->fp8;
    assert(f && c && c->geom);
    fattn_status st = refuse_device(&p->attn.q, "cuDNN FP8 forward");
    if (st != FATTN_OK)
        return st;
    if (!f->amax_s || !f->amax_o)
        return fattn_error(FATTN_E_MISSING_FIELD, "FP8 forward: amax_s and amax_o must point "
                           "at a float each");
    cg_fwd_desc desc;
    st = fattn__cg_fwd_desc_from_geom(c->geom, p, &desc);
    if (st != FATTN_OK)
        return st;
    /* what the device's architecture lacks: rows the dispatch refused */
    assert(fattn__cg_fp8_arch_builds(&desc, fattn_engine_sm(&e->base), false));
    const fattn_geom *geom = c->geom;
    dev_arena *a = &e->pc->arena[0];
    fattn__cudnn_dev_reset(a);
    memset(&e->timing, 0, sizeof e->timing);
    plan_entry *pe = NULL;
    if ((st = fattn__cudnn_get_plan(e, &desc, sizeof desc, build_fwd, &pe)) != FATTN_OK)
        return st;
    snprintf(e->last_route, sizeof e->last_route, "fp8");
    snprintf(e->last_tag, sizeof e->last_tag, "%s", pe->plan->tag);
    double host_pre = fattn__cudnn_now_s() - e->call_t0 - e->timing.plan_build_s;

    dev_bindings d = {{NULL}};
    fp8_scalars s = {{0}};
    put(&s, CG_ROLE_DESCALE_Q, f->descale_q);
    put(&s, CG_ROLE_DESCALE_K, f->descale_k);
    put(&s, CG_ROLE_DESCALE_V, f->descale_v);
    put(&s, CG_ROLE_DESCALE_S, f->descale_s);
    put(&s, CG_ROLE_SCALE_S, f->scale_s);
    put(&s, CG_ROLE_SCALE_O, out_scale(p->attn.o.dtype, f->scale_o));
    size_t o_bytes = fattn__cudnn_view_bytes(&p->attn.o);
    int64_t stats_n;
    size_t stats_bytes;
    if ((st = fattn__cudnn_stats_count(geom, &stats_n, &stats_bytes)) != FATTN_OK ||
        (st = fattn__cudnn_upload_view(a, &p->attn.q, &d.p[CG_ROLE_Q])) != FATTN_OK ||
        (st = fattn__cudnn_upload_view(a, &p->attn.k, &d.p[CG_ROLE_K])) != FATTN_OK ||
        (st = fattn__cudnn_upload_view(a, &p->attn.v, &d.p[CG_ROLE_V])) != FATTN_OK ||
        (st = fattn__cudnn_dev_alloc(a, o_bytes, &d.p[CG_ROLE_O])) != FATTN_OK ||
        (st = fattn__cudnn_dev_alloc(a, stats_bytes, &d.p[CG_ROLE_STATS])) != FATTN_OK ||
        (st = upload_scalars(a, &s, &d)) != FATTN_OK)
        return st;
    int64_t rng[2] = {0, 0};
    if (desc.dropout > 0.0f) {
        rng[0] = ((const int64_t *)p->rng_state.data)[0];
        rng[1] = ((const int64_t *)p->rng_state.data)[p->rng_state.strides[0]];
    }
    if ((st = fattn__cudnn_upload_common(a, &desc, geom, rng, &d)) != FATTN_OK)
        return st;
    void *ptrs[CG_MAX_TENSORS];
    fattn__cudnn_bind_tensors(pe->g, &d, ptrs);
    if ((st = fattn__cudnn_execute_plan(e, pe, ptrs, host_pre)) != FATTN_OK)
        return st;
    if ((st = fattn__cudnn_download(e->api, s.v, d.p[CG_ROLE_DESCALE_Q], sizeof s.v)) != FATTN_OK)
        return st;
    *f->amax_s = get(&s, CG_ROLE_AMAX_S);
    *f->amax_o = get(&s, CG_ROLE_AMAX_O);
    fattn_tensor stats = c->stats;
    return fwd_copy_back(e, p, geom, &stats, &d, o_bytes, stats_bytes);
}

/* Stats in the graph's [b,h,sq] layout, undefined rows zero. */
static fattn_status bwd_upload_stats(dev_arena *a, const fattn_geom *geom,
                                     const fattn_tensor *stats, dev_bindings *d)
{
    int64_t n_el;
    size_t bytes;
    fattn_status st = fattn__cudnn_stats_count(geom, &n_el, &bytes);
    if (st != FATTN_OK)
        return st;
    float *hs = calloc((size_t)n_el, sizeof(float));
    if (!hs)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: Stats staging");
    const float *src = stats->data;
    for (int64_t bi = 0; bi < geom->b; bi++)
        for (int64_t i = 0; i < geom->len_q[bi]; i++)
            for (int64_t n = 0; n < geom->h; n++)
                hs[(bi * geom->h + n) * geom->sq + i] =
                    src[fattn__geom_stats_offset(geom, stats, bi, n, i)];
    st = fattn__cudnn_dev_upload(a, hs, bytes, &d->p[CG_ROLE_STATS]);
    free(hs);
    return st;
}

/* Gradient t (dQ, dK, dV) back from the device into its defined rows. */
static fattn_status bwd_download_grad(cudnn_engine *e, const fattn_geom *geom, fattn_tensor *out,
                                      void *dev, int t)
{
    size_t bytes = fattn__cudnn_view_bytes(out);
    char *hbuf = malloc(bytes);
    if (!hbuf)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: host staging");
    fattn_status st = fattn__cudnn_download(e->api, hbuf, dev, bytes);
    if (st != FATTN_OK)
        goto out;
    if (t == 0)
        fattn__cudnn_copy_rows(out, hbuf, geom->q_fmt, geom->off_q, geom->len_q, geom->b,
                        geom->h, geom->d);
    else
        fattn__cudnn_copy_rows(out, hbuf, geom->kv_fmt, geom->off_kv, geom->len_kv, geom->b,
                        geom->hg, t == 1 ? geom->d : geom->dv);
out:
    free(hbuf);
    return st;
}

static fattn_status bwd_download(cudnn_engine *e, const fattn_bwd_params *p,
                                 const fattn_geom *geom, const dev_bindings *d)
{
    fattn_tensor *outs[3] = {(fattn_tensor *)&p->dq, (fattn_tensor *)&p->dk,
                             (fattn_tensor *)&p->dv};
    const cg_role roles[3] = {CG_ROLE_DQ, CG_ROLE_DK, CG_ROLE_DV};
    for (int t = 0; t < 3; t++) {
        fattn_status st = bwd_download_grad(e, geom, outs[t], d->p[roles[t]], t);
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

static void bwd_scalars(const fattn_bwd_params *p, fp8_scalars *s)
{
    const fattn_fp8_bwd *f = p->fp8;
    memset(s, 0, sizeof *s);
    put(s, CG_ROLE_DESCALE_Q, f->descale_q);
    put(s, CG_ROLE_DESCALE_K, f->descale_k);
    put(s, CG_ROLE_DESCALE_V, f->descale_v);
    put(s, CG_ROLE_DESCALE_O, f->descale_o);
    put(s, CG_ROLE_DESCALE_DO, f->descale_do);
    put(s, CG_ROLE_DESCALE_S, f->descale_s);
    put(s, CG_ROLE_DESCALE_DP, f->descale_dp);
    put(s, CG_ROLE_SCALE_S, f->scale_s);
    put(s, CG_ROLE_SCALE_DP, f->scale_dp);
    put(s, CG_ROLE_SCALE_DQ, out_scale(p->dq.dtype, f->scale_dq));
    put(s, CG_ROLE_SCALE_DK, out_scale(p->dk.dtype, f->scale_dk));
    put(s, CG_ROLE_SCALE_DV, out_scale(p->dv.dtype, f->scale_dv));
}

fattn_status fattn__cudnn_fp8_bwd(cudnn_engine *e, const fattn_bwd_params *p, const fattn_bwd_call *c)
{
    const fattn_fp8_bwd *f = p->fp8;
    assert(f && c && c->geom);
    fattn_status st = refuse_device(&p->attn.q, "cuDNN FP8 backward");
    if (st != FATTN_OK)
        return st;
    if (!f->amax_dp || !f->amax_dq || !f->amax_dk || !f->amax_dv)
        return fattn_error(FATTN_E_MISSING_FIELD, "FP8 backward: amax_dp, amax_dq, amax_dk "
                           "and amax_dv must point at a float each");
    cg_bwd_desc desc;
    st = fattn__cg_bwd_desc_from_geom(c->geom, p, &desc);
    if (st != FATTN_OK)
        return st;
    assert(fattn__cg_fp8_arch_builds(&desc.f, fattn_engine_sm(&e->base), true));
    /* No algorithm choice: measured bitwise repeatable on the H200 (docs/determinism.md). */
    desc.deterministic = false;
    const fattn_geom *geom = c->geom;
    dev_arena *a = &e->pc->arena[1];
    fattn__cudnn_dev_reset(a);
    memset(&e->timing, 0, sizeof e->timing);
    plan_entry *pe = NULL;
    if ((st = fattn__cudnn_get_plan(e, &desc, sizeof desc, build_bwd, &pe)) != FATTN_OK)
        return st;
    snprintf(e->last_route, sizeof e->last_route, "bwd-fp8");
    snprintf(e->last_tag, sizeof e->last_tag, "%s", pe->plan->tag);
    double host_pre = fattn__cudnn_now_s() - e->call_t0 - e->timing.plan_build_s;

    dev_bindings d = {{NULL}};
    fp8_scalars s;
    bwd_scalars(p, &s);
    if ((st = fattn__cudnn_upload_view(a, &p->attn.q, &d.p[CG_ROLE_Q])) != FATTN_OK ||
        (st = fattn__cudnn_upload_view(a, &p->attn.k, &d.p[CG_ROLE_K])) != FATTN_OK ||
        (st = fattn__cudnn_upload_view(a, &p->attn.v, &d.p[CG_ROLE_V])) != FATTN_OK ||
        (st = fattn__cudnn_upload_view(a, &p->attn.o, &d.p[CG_ROLE_O])) != FATTN_OK ||
        (st = fattn__cudnn_upload_view(a, &p->d_o, &d.p[CG_ROLE_DO])) != FATTN_OK ||
        (st = fattn__cudnn_dev_alloc(a, fattn__cudnn_view_bytes(&p->dq), &d.p[CG_ROLE_DQ])) != FATTN_OK ||
        (st = fattn__cudnn_dev_alloc(a, fattn__cudnn_view_bytes(&p->dk), &d.p[CG_ROLE_DK])) != FATTN_OK ||
        (st = fattn__cudnn_dev_alloc(a, fattn__cudnn_view_bytes(&p->dv), &d.p[CG_ROLE_DV])) != FATTN_OK ||
        (st = bwd_upload_stats(a, geom, &c->stats, &d)) != FATTN_OK || (st = upload_scalars(a, &s, &d)) != FATTN_OK)
        return st;
    int64_t rng[2] = {(int64_t)geom->rng_seed, (int64_t)geom->rng_offset};
    if ((st = fattn__cudnn_upload_common(a, &desc.f, geom, rng, &d)) != FATTN_OK)
        return st;
    void *ptrs[CG_MAX_TENSORS];
    fattn__cudnn_bind_tensors(pe->g, &d, ptrs);
    e->last_workspace = pe->plan->workspace > 0 ? pe->plan->workspace : 0;
    if ((st = fattn__cudnn_execute_plan(e, pe, ptrs, host_pre)) != FATTN_OK)
        return st;
    if ((st = fattn__cudnn_download(e->api, s.v, d.p[CG_ROLE_DESCALE_Q], sizeof s.v)) != FATTN_OK)
        return st;
    *f->amax_dp = get(&s, CG_ROLE_AMAX_DP);
    *f->amax_dq = get(&s, CG_ROLE_AMAX_DQ);
    *f->amax_dk = get(&s, CG_ROLE_AMAX_DK);
    *f->amax_dv = get(&s, CG_ROLE_AMAX_DV);
    return bwd_download(e, p, geom, &d);
}
