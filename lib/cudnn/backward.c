/* The cuDNN engine's backward: graph, plan, upload, execute, copy back the
 * defined regions of dQ, dK, dV, dBias and dSoftmaxOffset. With device
 * tensors the graph binds the caller's buffers and nothing is copied. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn/engine_internal.h"

typedef struct bwd_run {
    cudnn_engine *e;
    const fattn_bwd_params *p;
    const fattn_geom *geom;
    fattn_tensor stats;
    cg_bwd_desc d;
    bool device; /* the call's tensors are device tensors */
} bwd_run;

/* Stats in the graph's layout: [b,h,sq] or ragged [t_q,h]; undefined
 * rows zero (the kernels do not read them). */
static fattn_status upload_stats(bwd_run *r, dev_arena *a, dev_bindings *d)
{
    const fattn_geom *geom = r->geom;
    int64_t b = geom->b, h = geom->h;
    int64_t stats_n;
    size_t stats_bytes;
    fattn_status st0 = fattn__cudnn_stats_count(geom, &stats_n, &stats_bytes);
    if (st0 != FATTN_OK)
        return st0;
    float *hs = calloc((size_t)stats_n, sizeof(float));
    if (!hs)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: Stats staging");
    const float *src = r->stats.data;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i = 0; i < geom->len_q[bi]; i++)
            for (int64_t n = 0; n < h; n++) {
                int64_t si = geom->thd_stats ? ((int64_t)geom->off_q[bi] + i) * h + n
                                             : (bi * h + n) * geom->sq + i;
                hs[si] = src[fattn__geom_stats_offset(geom, &r->stats, bi, n, i)];
            }
    fattn_status st = fattn__cudnn_dev_upload(a, hs, stats_bytes,
                                       &d->p[CG_ROLE_STATS]);
    free(hs);
    return st;
}

/* Gradient t (dQ, dK, dV) back from the device into its defined rows. */
static fattn_status download_grad(bwd_run *r, fattn_tensor *out, void *dev, int t)
{
    const fattn_geom *geom = r->geom;
    int64_t b = geom->b, h = geom->h;
    size_t bytes = fattn__cudnn_view_bytes(out);
    char *hbuf = malloc(bytes);
    if (!hbuf)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: host staging");
    fattn_status st = fattn__cudnn_download(r->e->api, hbuf, dev, bytes);
    if (st != FATTN_OK)
        goto out;
    if (t == 0)
        fattn__cudnn_copy_rows(out, hbuf, geom->q_fmt, geom->off_q, geom->len_q, b, h,
                        geom->d);
    else
        fattn__cudnn_copy_rows(out, hbuf, geom->kv_fmt, geom->off_kv, geom->len_kv, b,
                        geom->hg, t == 1 ? geom->d : geom->dv);
out:
    free(hbuf);
    return st;
}

static fattn_status download_dbias(bwd_run *r, const dev_bindings *d)
{
    const fattn_tensor *db = &r->p->d_bias;
    size_t bytes = fattn__cudnn_view_bytes(db), esz = fattn_dtype_size(db->dtype);
    char *hbuf = malloc(bytes);
    if (!hbuf)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: host staging");
    fattn_status st = fattn__cudnn_download(r->e->api, hbuf, d->p[CG_ROLE_DBIAS], bytes);
    if (st != FATTN_OK)
        goto out;
    for (int64_t i0 = 0; i0 < db->shape[0]; i0++)
        for (int64_t i1 = 0; i1 < db->shape[1]; i1++)
            for (int64_t i2 = 0; i2 < db->shape[2]; i2++) {
                int64_t off = i0 * db->strides[0] + i1 * db->strides[1] +
                              i2 * db->strides[2];
                memcpy((char *)db->data + (size_t)off * esz, hbuf + (size_t)off * esz,
                       (size_t)db->shape[3] * esz);
            }
out:
    free(hbuf);
    return st;
}

static fattn_status download_dsink(bwd_run *r, const dev_bindings *d)
{
    int64_t h = r->geom->h;
    float *hsink = malloc((size_t)h * sizeof(float));
    const fattn_tensor *dso = &r->p->d_softmax_offset;
    if (!hsink)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: dSoftmaxOffset staging");
    fattn_status st = fattn__cudnn_download(r->e->api, hsink, d->p[CG_ROLE_DSINK],
                                            (size_t)h * sizeof(float));
    if (st != FATTN_OK)
        goto out;
    for (int64_t n = 0; n < h; n++)
        ((float *)dso->data)[n * dso->strides[1]] = hsink[n];
out:
    free(hsink);
    return st;
}

/* Copy back the defined regions of dQ, dK, dV, dBias, dSoftmaxOffset only. */
static fattn_status download_grads(bwd_run *r, const dev_bindings *d)
{
    const fattn_bwd_params *p = r->p;
    fattn_tensor *outs[3] = {(fattn_tensor *)&p->dq, (fattn_tensor *)&p->dk,
                             (fattn_tensor *)&p->dv};
    void *devs[3] = {d->p[CG_ROLE_DQ], d->p[CG_ROLE_DK], d->p[CG_ROLE_DV]};
    for (int t = 0; t < 3; t++) {
        fattn_status st = download_grad(r, outs[t], devs[t], t);
        if (st != FATTN_OK)
            return st;
    }
    if (r->d.dbias) {
        fattn_status st = download_dbias(r, d);
        if (st != FATTN_OK)
            return st;
    }
    if (r->d.f.sink && !fattn_tensor_is_empty(&p->d_softmax_offset))
        return download_dsink(r, d);
    return FATTN_OK;
}

static fattn_status build_graph(cg_graph *g, const void *desc)
{
    return fattn__cg_build_bwd(g, desc);
}

static void note_route(cudnn_engine *e, const cg_graph *g, const cg_bwd_desc *d)
{
    (void)g;
    snprintf(e->last_route, sizeof e->last_route, "%s",
             d->native       ? "bwd-native"
             : d->ordered_dq ? "bwd-ordered-dq"
             : d->deterministic || d->dbias ? "bwd-direct-dq"
                                            : "bwd-dq-accum");
}

static fattn_status run_backward(bwd_run *r, dev_arena *a)
{
    const fattn_bwd_params *p = r->p;
    const fattn_geom *geom = r->geom;
    const cg_fwd_desc *fd = &r->d.f;
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
    dev_bindings d = {{NULL}};
    bool dev = r->device;
    if ((st = fattn__cudnn_bind_input(a, &p->attn.q, dev, &d.p[CG_ROLE_Q])) != FATTN_OK ||
        (st = fattn__cudnn_bind_input(a, &p->attn.k, dev, &d.p[CG_ROLE_K])) != FATTN_OK ||
        (st = fattn__cudnn_bind_input(a, &p->attn.v, dev, &d.p[CG_ROLE_V])) != FATTN_OK ||
        (st = fattn__cudnn_bind_input(a, &p->attn.o, dev, &d.p[CG_ROLE_O])) != FATTN_OK ||
        (st = fattn__cudnn_bind_input(a, &p->d_o, dev, &d.p[CG_ROLE_DO])) != FATTN_OK ||
        (st = fattn__cudnn_bind_output(a, &p->dq, dev, fattn__cudnn_view_bytes(&p->dq), &d.p[CG_ROLE_DQ])) != FATTN_OK ||
        (st = fattn__cudnn_bind_output(a, &p->dk, dev, fattn__cudnn_view_bytes(&p->dk), &d.p[CG_ROLE_DK])) != FATTN_OK ||
        (st = fattn__cudnn_bind_output(a, &p->dv, dev, fattn__cudnn_view_bytes(&p->dv), &d.p[CG_ROLE_DV])) != FATTN_OK)
        return st;
    if (fattn__cg_bwd_dsum_bytes(&r->d) > 0 &&
        (st = fattn__cudnn_dev_alloc(a, (size_t)fattn__cg_bwd_dsum_bytes(&r->d), &d.p[CG_ROLE_DSUM])) != FATTN_OK)
        return st;
    if (fattn__cg_bwd_dq_accum_bytes(&r->d) > 0 &&
        (st = fattn__cudnn_dev_alloc(a, (size_t)fattn__cg_bwd_dq_accum_bytes(&r->d), &d.p[CG_ROLE_DQ_ACCUM])) != FATTN_OK)
        return st;
    if (dev)
        d.p[CG_ROLE_STATS] = r->stats.data; /* contiguous: the graph's layout */
    else if ((st = upload_stats(r, a, &d)) != FATTN_OK)
        return st;
    if (fd->bias && (st = fattn__cudnn_bind_input(a, &geom->bias, dev, &d.p[CG_ROLE_BIAS])) != FATTN_OK)
        return st;
    if (r->d.dbias && (st = fattn__cudnn_bind_output(a, &p->d_bias, dev, fattn__cudnn_view_bytes(&p->d_bias),
                                              &d.p[CG_ROLE_DBIAS])) != FATTN_OK)
        return st;
    bool dsink_dev = dev && !fattn_tensor_is_empty(&p->d_softmax_offset);
    if (fd->sink && (st = fattn__cudnn_bind_output(a, &p->d_softmax_offset, dsink_dev,
                                            (size_t)h * sizeof(float), &d.p[CG_ROLE_DSINK])) != FATTN_OK)
        return st;
    int64_t rng[2] = {(int64_t)geom->rng_seed, (int64_t)geom->rng_offset};
    if ((st = fattn__cudnn_upload_common(a, fd, geom, rng, &d)) != FATTN_OK)
        return st;
    if (fd->ragged_q || fd->ragged_kv) {
        const fattn_tensor *cq = &p->attn.cu_seqlens_q, *cqp = &p->attn.cu_seqlens_q_padded;
        const fattn_tensor *ck = &p->attn.cu_seqlens_kv, *ckp = &p->attn.cu_seqlens_kv_padded;
        bool rq = fd->ragged_q, rkv = fd->ragged_kv;
        const ragged_src rs[] = {
            {CG_ROLE_RAG_Q, rq, cq, cqp, p->attn.q.strides[0]},
            {CG_ROLE_RAG_K, rkv, ck, ckp, p->attn.k.strides[0]},
            {CG_ROLE_RAG_V, rkv, ck, ckp, p->attn.v.strides[0]},
            {CG_ROLE_RAG_O, rq, cq, cqp, p->attn.o.strides[0]},
            {CG_ROLE_RAG_STATS, rq, cq, cqp, h},
            {CG_ROLE_RAG_DO, rq, cq, cqp, p->d_o.strides[0]},
            {CG_ROLE_RAG_DQ, rq, cq, cqp, p->dq.strides[0]},
            {CG_ROLE_RAG_DK, rkv, ck, ckp, p->dk.strides[0]},
            {CG_ROLE_RAG_DV, rkv, ck, ckp, p->dv.strides[0]},
        };
        if ((st = fattn__cudnn_upload_ragged(a, rs, (int)(sizeof rs / sizeof rs[0]), b, fd->ragged_dtype,
                                      &d)) != FATTN_OK)
            return st;
    }
    void *ptrs[CG_MAX_TENSORS];
    fattn__cudnn_bind_tensors(g, &d, ptrs);
    r->e->last_workspace = (plan->workspace > 0 ? plan->workspace : 0) +
                           fattn__cg_bwd_dsum_bytes(&r->d) + fattn__cg_bwd_dq_accum_bytes(&r->d);
    if ((st = fattn__cudnn_execute_plan(r->e, pe, ptrs, host_pre)) != FATTN_OK)
        return st;
    return dev ? FATTN_OK : download_grads(r, &d);
}

/* Host or device tensors (fattn__cudnn_call_location): the inputs, Stats, the
 * gradients, and Bias, dBias, dSoftmaxOffset where the graph has them. */
static fattn_status bwd_location(bwd_run *r, const fattn_bwd_params *p, const fattn_bwd_call *c)
{
    cudnn_tensor_use use[12] = {
        {&p->attn.q, "Q", false},          {&p->attn.k, "K", false},   {&p->attn.v, "V", false},
        {&p->attn.o, "O", false},          {&p->d_o, "dO", false}, {&c->stats, "Stats", true},
        {&p->dq, "dQ", false},        {&p->dk, "dK", false}, {&p->dv, "dV", false},
    };
    int n = 9;
    if (r->d.f.bias)
        use[n++] = (cudnn_tensor_use){&c->bias, "Bias", false};
    if (r->d.dbias)
        use[n++] = (cudnn_tensor_use){&p->d_bias, "dBias", false};
    if (r->d.f.sink)
        use[n++] = (cudnn_tensor_use){&p->d_softmax_offset, "dSoftmaxOffset", true};
    fattn_status st = fattn__cudnn_call_location(use, n, "cuDNN backward", &r->device);
    if (st != FATTN_OK)
        return st;
    return r->device ? fattn__cudnn_device_call_supported(&r->d.f, "cuDNN backward") : FATTN_OK;
}

/* run_backward on an emptied arena, with the timing of this call only. */
static fattn_status run_fresh(bwd_run *r, dev_arena *a)
{
    fattn__cudnn_dev_reset(a);
    memset(&r->e->timing, 0, sizeof r->e->timing);
    return run_backward(r, a);
}

/* The routes the plan cache's switches ask for (docs/cudnn-engine.md), where
 * the case and cuDNN allow them; whether the graph then built may fall back to
 * the usual one when cuDNN refuses it (not for FATTN_CUDNN_DET_TAG: a probe
 * wants the refusal). */
static bool choose_route(const fattn_cudnn_plan_cache *pc, cg_bwd_desc *d)
{
    /* Never for the deterministic backward (fattn__cg_bwd_is_native): measured on
     * the H200 with cuDNN 9.28, the native op's engine repeats dQ not
     * bitwise although cuDNN does not note it non-deterministic. cuDNN 9.19's
     * operation graph refuses the op; 9.26 was the first seen to take it. */
    d->native = pc->bwd_native && pc->cudnn_version >= 92600 && fattn__cg_bwd_is_native(d);
    if (!d->deterministic || !pc->det_ordered)
        return d->native;
    if (pc->det_tag.on && !d->dbias && !d->f.fp8) {
        d->ordered_dq = true;
        d->pin = pc->det_tag;
        return false;
    }
    d->ordered_dq = fattn__cg_bwd_ordered_pin(d, pc->cudnn_version, pc->cc_major, &d->pin);
    return d->ordered_dq;
}

fattn_status fattn__cudnn_engine_bwd(fattn_engine *base, const fattn_bwd_params *p,
                              const fattn_bwd_call *c)
{
    cudnn_engine *e = (cudnn_engine *)base;
    e->call_t0 = c->t0; /* validation in the dispatch counts as fattn's host time */
    if (p->fp8)
        return fattn__cudnn_fp8_bwd(e, p, c);
    bwd_run r;
    memset(&r, 0, sizeof r);
    r.e = e;
    r.p = p;
    fattn_status st = fattn__cg_bwd_desc_from_geom(c->geom, p, &r.d);
    if (st != FATTN_OK)
        return st;
    if (e->force_det)
        r.d.deterministic = true;
    bool fallback = choose_route(e->pc, &r.d);
    /* A sink with a ragged (THD) Q on cuDNN <= 9.19 never gets here: the
     * dispatch refuses it by the support table's row dsink_thd_cudnn. */
    assert(c && c->geom && !fattn_tensor_is_empty(&c->stats));
    r.geom = c->geom;
    r.stats = c->stats;
    if ((st = bwd_location(&r, p, c)) != FATTN_OK)
        return st;
    dev_arena *arena = &e->pc->arena[1];
    st = run_fresh(&r, arena);
    if (st == FATTN_E_UNSUPPORTED && fallback) { /* the switch's route: cuDNN did not take it */
        r.d.native = r.d.ordered_dq = false;
        memset(&r.d.pin, 0, sizeof r.d.pin);
        st = run_fresh(&r, arena);
    }
    return st;
}
