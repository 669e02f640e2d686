/* The cuDNN engine's forward: graph, plan, upload, execute, copy back the
 * defined regions of O, Stats (and Max). With device tensors the graph binds
 * the caller's buffers and nothing is copied. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn/engine_internal.h"
#include "core/checked.h"

typedef struct fwd_run {
    cudnn_engine *e;
    const fattn_fwd_params *p;
    const fattn_geom *geom;
    fattn_tensor stats;
    fattn_tensor max; /* empty without return_max_logit */
    cg_fwd_desc d;
    bool device; /* the call's tensors are device tensors */
} fwd_run;

static fattn_status build_graph(cg_graph *g, const void *desc)
{
    return fattn__cg_build_fwd(g, desc);
}

static void note_route(cudnn_engine *e, const cg_graph *g, const cg_fwd_desc *d)
{
    (void)d;
    snprintf(e->last_route, sizeof e->last_route, "%s",
             g->route == CG_ROUTE_NATIVE ? "native" : "composite");
}

static fattn_status copy_back(fwd_run *r, const dev_bindings *db, size_t o_bytes,
                              size_t stats_bytes);

/* Max's device buffer (the caller's with device tensors), laid out as
 * Stats; with the capture hook it must fit there, and with a fill every
 * element is set to it first. */
static fattn_status bind_max(fwd_run *r, dev_arena *a, int64_t n, size_t bytes, dev_bindings *d)
{
    cudnn_engine *e = r->e;
    fattn_status st = fattn__cudnn_bind_output(a, &r->max, r->device, bytes, &d->p[CG_ROLE_MAX]);
    if (st != FATTN_OK || !e->max_dst)
        return st;
    if (n > e->max_cap)
        return fattn_error(FATTN_E_SHAPE, "cuDNN engine: Max needs %lld floats, the capture "
                           "buffer holds %lld", (long long)n, (long long)e->max_cap);
    if (!e->max_fill_on)
        return FATTN_OK;
    uint32_t *h = malloc(bytes);
    if (!h)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: Max fill staging");
    for (int64_t i = 0; i < n; i++)
        h[i] = e->max_fill;
    cudaError_t ce = e->api->cudaMemcpy(d->p[CG_ROLE_MAX], h, bytes, cudaMemcpyHostToDevice);
    free(h);
    return ce == cudaSuccess ? FATTN_OK : fattn__cudnn_cuda_fail(e->api, ce, "cudaMemcpy H2D (Max fill)");
}

static fattn_status run_forward(fwd_run *r, dev_arena *a)
{
    const fattn_fwd_params *p = r->p;
    const fattn_geom *geom = r->geom;
    const cudnn_api *api = r->e->api;
    plan_entry *pe = NULL;
    fattn_status st = fattn__cudnn_get_plan(r->e, &r->d, sizeof r->d, build_graph, &pe);
    if (st != FATTN_OK)
        return st;
    const cg_graph *g = pe->g;
    const cudnn_plan *plan = pe->plan;
    note_route(r->e, g, &r->d);
    snprintf(r->e->last_tag, sizeof r->e->last_tag, "%s", plan->tag);
    double host_pre = fattn__cudnn_now_s() - r->e->call_t0 - r->e->timing.plan_build_s;

    int64_t b = geom->b, h = geom->h;
    void *mask = NULL;
    int64_t mask_n = 0;
    /* b*h*sq fits (the geometry checks it); times skv may not. */
    if (r->d.rng_dump && !fattn_mul_i64(b * h * geom->sq, geom->skv, &mask_n))
        return fattn_error(FATTN_E_OVERFLOW, "cuDNN engine: the dropout mask's size overflows");
    if (mask_n > r->e->mask_cap)
        return fattn_error(FATTN_E_SHAPE, "cuDNN engine: the dropout mask needs %lld floats, "
                           "the capture buffer holds %lld", (long long)mask_n,
                           (long long)r->e->mask_cap);
    if (mask_n && (st = fattn__cudnn_dev_alloc(a, (size_t)mask_n * sizeof(float), &mask)) != FATTN_OK)
        return st;
    dev_bindings d = {{NULL}};
    d.p[CG_ROLE_RNG_DUMP] = mask;
    size_t o_bytes = fattn__cudnn_view_bytes(&p->attn.o);
    int64_t stats_n;
    size_t stats_bytes;
    if ((st = fattn__cudnn_stats_count(geom, &stats_n, &stats_bytes)) != FATTN_OK)
        return st;
    bool dev = r->device;
    if ((st = fattn__cudnn_bind_input(a, &p->attn.q, dev, &d.p[CG_ROLE_Q])) != FATTN_OK ||
        (st = fattn__cudnn_bind_input(a, &p->attn.k, dev, &d.p[CG_ROLE_K])) != FATTN_OK ||
        (st = fattn__cudnn_bind_input(a, &p->attn.v, dev, &d.p[CG_ROLE_V])) != FATTN_OK ||
        (st = fattn__cudnn_bind_output(a, &p->attn.o, dev, o_bytes, &d.p[CG_ROLE_O])) != FATTN_OK ||
        (st = fattn__cudnn_bind_output(a, &r->stats, dev, stats_bytes, &d.p[CG_ROLE_STATS])) != FATTN_OK)
        return st;
    if (r->d.max_output && (st = bind_max(r, a, stats_n, stats_bytes, &d)) != FATTN_OK)
        return st;
    if (r->d.bias && (st = fattn__cudnn_bind_input(a, &p->bias, dev, &d.p[CG_ROLE_BIAS])) != FATTN_OK)
        return st;
    int64_t rng[2] = {0, 0};
    if (r->d.dropout > 0.0f) {
        rng[0] = ((const int64_t *)p->rng_state.data)[0];
        rng[1] = ((const int64_t *)p->rng_state.data)[p->rng_state.strides[0]];
    }
    if ((st = fattn__cudnn_upload_common(a, &r->d, geom, rng, &d)) != FATTN_OK)
        return st;
    if (r->d.ragged_q || r->d.ragged_kv) {
        const fattn_tensor *cq = &p->attn.cu_seqlens_q, *cqp = &p->attn.cu_seqlens_q_padded;
        const fattn_tensor *ck = &p->attn.cu_seqlens_kv, *ckp = &p->attn.cu_seqlens_kv_padded;
        bool rq = r->d.ragged_q, rkv = r->d.ragged_kv;
        const ragged_src rs[] = {
            {CG_ROLE_RAG_Q, rq, cq, cqp, p->attn.q.strides[0]},
            {CG_ROLE_RAG_K, rkv, ck, ckp, p->attn.k.strides[0]},
            {CG_ROLE_RAG_V, rkv, ck, ckp, p->attn.v.strides[0]},
            {CG_ROLE_RAG_O, rq, cq, cqp, p->attn.o.strides[0]},
            {CG_ROLE_RAG_STATS, rq, cq, cqp, h},
        };
        if ((st = fattn__cudnn_upload_ragged(a, rs, (int)(sizeof rs / sizeof rs[0]), b, r->d.ragged_dtype,
                                      &d)) != FATTN_OK)
            return st;
    }
    void *ptrs[CG_MAX_TENSORS];
    fattn__cudnn_bind_tensors(g, &d, ptrs);
    if ((st = fattn__cudnn_execute_plan(r->e, pe, ptrs, host_pre)) != FATTN_OK)
        return st;
    cudaError_t ce;
    if (mask) {
        ce = api->cudaMemcpy(r->e->mask_dst, mask, (size_t)mask_n * sizeof(float),
                             cudaMemcpyDeviceToHost);
        if (ce != cudaSuccess)
            return fattn__cudnn_cuda_fail(api, ce, "cudaMemcpy D2H (dropout mask)");
    }
    if (r->d.max_output && r->e->max_dst) {
        ce = api->cudaMemcpy(r->e->max_dst, d.p[CG_ROLE_MAX], stats_bytes,
                             cudaMemcpyDeviceToHost);
        if (ce != cudaSuccess)
            return fattn__cudnn_cuda_fail(api, ce, "cudaMemcpy D2H (Max capture)");
    }
    return dev ? FATTN_OK : copy_back(r, &d, o_bytes, stats_bytes);
}

/* The defined regions of O, Stats and Max, from the device buffers to the
 * caller's host tensors. */
static fattn_status copy_back(fwd_run *r, const dev_bindings *db, size_t o_bytes,
                              size_t stats_bytes)
{
    const fattn_fwd_params *p = r->p;
    const fattn_geom *geom = r->geom;
    const cudnn_api *api = r->e->api;
    int64_t b = geom->b, h = geom->h;
    bool has_max = r->d.max_output;
    char *ho = malloc(o_bytes);
    float *hs = malloc(stats_bytes), *hm = has_max ? malloc(stats_bytes) : NULL;
    fattn_status st = FATTN_OK;
    if (!ho || !hs || (has_max && !hm)) {
        st = fattn_error(FATTN_E_NOMEM, "cuDNN engine: host staging");
        goto out;
    }
    st = fattn__cudnn_download(api, ho, db->p[CG_ROLE_O], o_bytes);
    if (st != FATTN_OK)
        goto out;
    st = fattn__cudnn_download(api, hs, db->p[CG_ROLE_STATS], stats_bytes);
    if (st != FATTN_OK)
        goto out;
    if (has_max) {
        st = fattn__cudnn_download(api, hm, db->p[CG_ROLE_MAX], stats_bytes);
        if (st != FATTN_OK)
            goto out;
    }
    size_t esz = fattn_dtype_size(p->attn.o.dtype);
    size_t row = (size_t)geom->dv * esz;
    float *sdst = r->stats.data, *mdst = r->max.data;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i = 0; i < geom->len_q[bi]; i++)
            for (int64_t n = 0; n < h; n++) {
                int64_t off = fattn__geom_row_offset(&p->attn.o, geom->q_fmt, geom->off_q, bi, i, n);
                memcpy((char *)p->attn.o.data + (size_t)off * esz, ho + (size_t)off * esz, row);
                int64_t si = geom->thd_stats ? ((int64_t)geom->off_q[bi] + i) * h + n
                                             : (bi * h + n) * geom->sq + i;
                sdst[fattn__geom_stats_offset(geom, &r->stats, bi, n, i)] = hs[si];
                if (has_max)
                    mdst[fattn__geom_stats_offset(geom, &r->max, bi, n, i)] = hm[si];
            }
out:
    free(ho);
    free(hs);
    free(hm);
    return st;
}

fattn_status fattn__cudnn_engine_fwd(fattn_engine *base, const fattn_fwd_params *p,
                              const fattn_fwd_call *c)
{
    cudnn_engine *e = (cudnn_engine *)base;
    e->call_t0 = c->t0; /* validation in the dispatch counts as fattn's host time */
    if (p->fp8)
        return fattn__cudnn_fp8_fwd(e, p, c);
    fwd_run r;
    memset(&r, 0, sizeof r);
    r.e = e;
    r.p = p;
    fattn_status st = fattn__cg_fwd_desc_from_geom(c->geom, p, &r.d);
    if (st != FATTN_OK)
        return st;
    assert(fattn__cg_fwd_builds_at(&r.d, e->pc->cudnn_version)); /* row max_logit_cudnn */
    r.d.rng_dump = e->mask_dst && r.d.dropout > 0.0f;
    assert(c && c->geom && !fattn_tensor_is_empty(&c->stats));
    assert(!r.d.max_output || !fattn_tensor_is_empty(&c->max));
    r.geom = c->geom;
    r.stats = c->stats;
    r.max = c->max;
    cudnn_tensor_use use[7] = {{&p->attn.q, "Q", false}, {&p->attn.k, "K", false}, {&p->attn.v,
        "V", false},
                               {&p->attn.o, "O", false}, {&c->stats, "Stats", true}};
    int nuse = 5;
    if (r.d.bias)
        use[nuse++] = (cudnn_tensor_use){&p->bias, "Bias", false};
    if (r.d.max_output)
        use[nuse++] = (cudnn_tensor_use){&c->max, "Max", true};
    if ((st = fattn__cudnn_call_location(use, nuse, "cuDNN forward", &r.device)) != FATTN_OK ||
        (r.device && (st = fattn__cudnn_device_call_supported(&r.d, "cuDNN forward")) != FATTN_OK))
        return st;
    dev_arena *arena = &e->pc->arena[0];
    fattn__cudnn_dev_reset(arena);
    memset(&e->timing, 0, sizeof e->timing);
    return run_forward(&r, arena);
}
