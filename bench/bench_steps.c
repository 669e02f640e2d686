/* bench_cudnn --steps N: where a plan-cache hit spends host time.
 *
 * The engine's public call does, on the host, in order: resolve the
 * dispatch's geometry (cg_*_desc_from_geom), find the plan (fattn__cudnn_get_plan: the
 * description memo; on its miss the graph is built and keyed), bind the
 * tensors, make or reuse the variant pack and call cudnnBackendExecute
 * (fattn__cudnn_execute_plan); around them it copies. This file repeats those
 * steps one by one through the engine's internal functions (the library is
 * built with default symbol visibility), with a clock around each, on
 * device buffers allocated once, so that no step's cost hides in another's.
 * For comparison it also times what the cache used to do on each hit: the
 * graph build, its text dump, a fresh variant pack. It is the instrumented
 * mode of the benchmark: nothing here is in the library's call path. Each
 * figure is the median over N repetitions; the variants after "exec_call"
 * say what the execute call costs right after the host streamed through
 * 256 MiB (its caches cold: what the call's own copies do), after a
 * pageable host-to-device copy, and on freshly allocated buffers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_steps.h"
#include "cudnn/engine_internal.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum {
    S_PUBLIC,     /* the whole public call (copies included), wall */
    S_REPORTED,   /* what that call reported as host_us */
    S_DESC,       /* cg_*_desc_from_geom */
    S_GRAPH,      /* cg_build_* into a graph allocated once */
    S_DUMP,       /* the text dump that keyed the plan cache */
    S_KEY,        /* the binary key (fattn__cg_key) */
    S_GET_PLAN,   /* fattn__cudnn_get_plan: the description memo's lookup */
    S_VPACK,      /* variant pack: create, three attributes, finalize */
    S_EXECUTE,    /* cudnnBackendExecute */
    S_DESTROY,    /* variant pack destroy */
    S_EXEC_CALL,  /* fattn__cudnn_execute_plan as the engine calls it (pack reused) */
    S_EXEC_COLD,  /* the same right after the host wrote 256 MiB (no CUDA) */
    S_H2D,        /* cudaMemcpy H2D of Q (pageable) */
    S_EXEC_H2D,   /* fattn__cudnn_execute_plan right after that copy */
    S_MALLOC,     /* cudaMalloc of every bound buffer */
    S_EXEC_FRESH, /* fattn__cudnn_execute_plan on those fresh buffers (new pack) */
    S_FREE,       /* cudaFree of them (implicitly synchronising) */
    S_SYNC,       /* cudaDeviceSynchronize after one execute (GPU time) */
    S_DEV_PUBLIC, /* the same public call on device tensors, wall (queue empty) */
    S_DEV_REPORTED, /* what that call reported as host_us */
    S_COUNT
};

#define COLD_BYTES ((size_t)256 << 20)

static const char *const step_names[S_COUNT] = {
    "public_us", "reported_host_us", "desc_us", "graph_us", "dump_us", "key_us",
    "get_plan_us", "vpack_us", "execute_us", "destroy_us", "exec_call_us", "exec_cold_us", "h2d_us",
    "exec_after_h2d_us", "malloc_us", "exec_fresh_us", "free_us", "sync_us",
    "dev_public_us", "dev_reported_host_us",
};

/* Bytes a graph tensor spans. */
static size_t tensor_bytes(const cg_tensor *t)
{
    int64_t e = 1;
    for (int i = 0; i < 4; i++)
        e += (t->dims[i] - 1) * t->strides[i];
    size_t es = t->dtype == CG_F32 || t->dtype == CG_I32 ? 4 : t->dtype == CG_I64 ? 8
                : t->dtype == CG_BOOL ? 1 : 2;
    return (size_t)e * es;
}

/* One device buffer per bound tensor of g (zeros), ptrs as the engine binds. */
static fattn_status bind_all(const cudnn_api *api, const cg_graph *g, void **ptrs, void **owned,
                             int *nowned)
{
    *nowned = 0;
    for (int i = 0; i < g->nt; i++) {
        const cg_tensor *t = &g->t[i];
        ptrs[i] = NULL;
        if (t->is_virtual)
            continue;
        if (t->by_value) {
            ptrs[i] = (void *)&t->value;
            continue;
        }
        size_t n = tensor_bytes(t);
        cudaError_t ce = api->cudaMalloc(&ptrs[i], n);
        if (ce == cudaSuccess)
            ce = api->cudaMemset(ptrs[i], 0, n);
        if (ce != cudaSuccess)
            return fattn__cudnn_cuda_fail(api, ce, "steps: buffers");
        owned[(*nowned)++] = ptrs[i];
    }
    return FATTN_OK;
}

static void free_all(const cudnn_api *api, void **owned, int n)
{
    for (int i = 0; i < n; i++)
        api->cudaFree(owned[i]);
}

typedef struct steps_ctx {
    cudnn_engine *e;
    const cudnn_api *api;
    cg_graph *g;
    const void *desc;
    size_t desc_len;
    cudnn_graph_builder build;
    unsigned char *junk; /* COLD_BYTES the host writes to evict its caches */
    void *ptrs[CG_MAX_TENSORS];
    double *v[S_COUNT];
} steps_ctx;

/* One repetition of the host steps of a cache hit on graph g (already built
 * by the caller's describe step); i the sample index. */
static fattn_status one_rep(steps_ctx *x, int i, const void *hq, size_t qbytes)
{
    const cudnn_api *api = x->api;
    cudnn_engine *e = x->e;
    double t = now_us();
    char *dump = fattn__cg_dump(x->g, false);
    x->v[S_DUMP][i] = now_us() - t;
    free(dump);
    cg_key_buf kb;
    t = now_us();
    fattn__cg_key(x->g, &kb);
    x->v[S_KEY][i] = now_us() - t;
    plan_entry *pe = NULL;
    t = now_us();
    fattn_status st = fattn__cudnn_get_plan(e, x->desc, x->desc_len, x->build, &pe);
    x->v[S_GET_PLAN][i] = now_us() - t;
    if (st != FATTN_OK)
        return st;
    if (!e->timing.plan_cache_hit)
        return fattn_error(FATTN_E_INTERNAL, "steps: the plan was not a cache hit");
    cudnn_plan *plan = pe->plan;
    int64_t uids[CG_MAX_TENSORS];
    void *data[CG_MAX_TENSORS];
    int n = 0;
    for (int k = 0; k < pe->g->nt; k++)
        if (!pe->g->t[k].is_virtual) {
            uids[n] = pe->g->t[k].uid;
            data[n++] = x->ptrs[k];
        }
    cudnnBackendDescriptor_t vp = NULL;
    t = now_us();
    cudnnStatus_t s = api->BackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    void *ws = e->pc->ws;
    if (s == CUDNN_STATUS_SUCCESS)
        s = api->BackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
                                     uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api->BackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                     CUDNN_TYPE_VOID_PTR, n, data);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api->BackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                     1, &ws);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api->BackendFinalize(vp);
    x->v[S_VPACK][i] = now_us() - t;
    if (s == CUDNN_STATUS_SUCCESS) {
        t = now_us();
        s = api->BackendExecute(e->pc->handle, plan->plan, vp);
        x->v[S_EXECUTE][i] = now_us() - t;
    }
    t = now_us();
    if (vp)
        api->BackendDestroyDescriptor(vp);
    x->v[S_DESTROY][i] = now_us() - t;
    if (s != CUDNN_STATUS_SUCCESS)
        return fattn__cudnn_fail(api, s, "steps: variant pack / execute");
    t = now_us();
    cudaError_t ce = api->cudaDeviceSynchronize();
    x->v[S_SYNC][i] = now_us() - t;
    if (ce != cudaSuccess)
        return fattn__cudnn_cuda_fail(api, ce, "steps: synchronize");

    /* twice: the first makes the entry's pack for these pointers */
    for (int rep = 0; rep < 2 && st == FATTN_OK; rep++) {
        t = now_us();
        st = fattn__cudnn_execute_plan(e, pe, x->ptrs, 0.0);
        x->v[S_EXEC_CALL][i] = now_us() - t;
        if (st == FATTN_OK && (ce = api->cudaDeviceSynchronize()) != cudaSuccess)
            st = fattn__cudnn_cuda_fail(api, ce, "steps: synchronize");
    }
    if (st != FATTN_OK)
        return st;
    memset(x->junk, i & 0xff, COLD_BYTES);
    t = now_us();
    st = fattn__cudnn_execute_plan(e, pe, x->ptrs, 0.0);
    x->v[S_EXEC_COLD][i] = now_us() - t;
    if (st == FATTN_OK && (ce = api->cudaDeviceSynchronize()) != cudaSuccess)
        st = fattn__cudnn_cuda_fail(api, ce, "steps: synchronize");
    if (st != FATTN_OK)
        return st;

    int iq = fattn__cg_find_uid(pe->g, CG_UID_Q);
    t = now_us();
    ce = api->cudaMemcpy(x->ptrs[iq], hq, qbytes, cudaMemcpyHostToDevice);
    x->v[S_H2D][i] = now_us() - t;
    if (ce != cudaSuccess)
        return fattn__cudnn_cuda_fail(api, ce, "steps: H2D");
    t = now_us();
    st = fattn__cudnn_execute_plan(e, pe, x->ptrs, 0.0);
    x->v[S_EXEC_H2D][i] = now_us() - t;
    if (st == FATTN_OK && (ce = api->cudaDeviceSynchronize()) != cudaSuccess)
        st = fattn__cudnn_cuda_fail(api, ce, "steps: synchronize");
    if (st != FATTN_OK)
        return st;

    void *fresh[CG_MAX_TENSORS], *owned[CG_MAX_TENSORS];
    int nown = 0;
    t = now_us();
    for (int k = 0; k < pe->g->nt && st == FATTN_OK; k++) {
        const cg_tensor *tk = &pe->g->t[k];
        fresh[k] = tk->is_virtual ? NULL : tk->by_value ? (void *)&tk->value : NULL;
        if (tk->is_virtual || tk->by_value)
            continue;
        if ((ce = api->cudaMalloc(&fresh[k], tensor_bytes(tk))) != cudaSuccess)
            st = fattn__cudnn_cuda_fail(api, ce, "steps: cudaMalloc");
        else
            owned[nown++] = fresh[k];
    }
    x->v[S_MALLOC][i] = now_us() - t;
    if (st == FATTN_OK) {
        t = now_us();
        st = fattn__cudnn_execute_plan(e, pe, fresh, 0.0);
        x->v[S_EXEC_FRESH][i] = now_us() - t;
    }
    t = now_us();
    free_all(api, owned, nown);
    x->v[S_FREE][i] = now_us() - t;
    if (st == FATTN_OK && (ce = api->cudaDeviceSynchronize()) != cudaSuccess)
        st = fattn__cudnn_cuda_fail(api, ce, "steps: synchronize");
    return st;
}

static fattn_status build_fwd(cg_graph *g, const void *d)
{
    return fattn__cg_build_fwd(g, d);
}

static fattn_status build_bwd(cg_graph *g, const void *d)
{
    return fattn__cg_build_bwd(g, d);
}

int bench_steps(fattn_engine *eng, const char *shape, bool causal, const char *kind,
                const fattn_fwd_params *fp, const fattn_bwd_params *bp,
                const bench_dev *dev, int n)
{
    steps_ctx x;
    memset(&x, 0, sizeof x);
    x.e = (cudnn_engine *)eng->impl;
    x.api = x.e->api;
    x.g = malloc(sizeof *x.g);
    double *all = calloc((size_t)S_COUNT * (size_t)n, sizeof *all);
    void *owned[CG_MAX_TENSORS];
    int nowned = 0;
    fattn_status st = x.g && all ? FATTN_OK : fattn_error(FATTN_E_NOMEM, "steps");
    for (int s = 0; s < S_COUNT && all; s++)
        x.v[s] = all + (size_t)s * (size_t)n;
    cg_fwd_desc fd;
    cg_bwd_desc bd;
    /* the geometry the dispatch makes of the call (its own step, in S_PUBLIC) */
    fattn_geom geom;
    bool have_geom = false;
    if (st == FATTN_OK)
        st = bp ? fattn__geom_init_bwd(&geom, bp, "backward")
                : fattn__geom_init_fwd(&geom, fp, "forward");
    have_geom = st == FATTN_OK;
    if (st == FATTN_OK)
        st = bp ? fattn__cg_bwd_desc_from_geom(&geom, bp, &bd) : fattn__cg_fwd_desc_from_geom(&geom, fp, &fd);
    if (st == FATTN_OK)
        st = bp ? fattn__cg_build_bwd(x.g, &bd) : fattn__cg_build_fwd(x.g, &fd);
    x.desc = bp ? (const void *)&bd : (const void *)&fd;
    x.desc_len = bp ? sizeof bd : sizeof fd;
    x.build = bp ? build_bwd : build_fwd;
    x.junk = malloc(COLD_BYTES);
    if (st == FATTN_OK && !x.junk)
        st = fattn_error(FATTN_E_NOMEM, "steps");
    plan_entry *pe = NULL;
    if (st == FATTN_OK)
        st = fattn__cudnn_get_plan(x.e, x.desc, x.desc_len, x.build, &pe);
    /* by-value scalars bound as the engine binds them: into the entry's graph */
    if (st == FATTN_OK)
        st = bind_all(x.api, pe->g, x.ptrs, owned, &nowned);
    const fattn_tensor *q = bp ? &bp->attn.q : &fp->attn.q;
    size_t qbytes = fattn__cudnn_view_bytes(q);
    for (int i = 0; i < n && st == FATTN_OK; i++) {
        double t = now_us();
        st = bp ? fattn_engine_bwd(eng, bp) : fattn_engine_fwd(eng, fp);
        x.v[S_PUBLIC][i] = now_us() - t;
        x.v[S_REPORTED][i] = fattn_engine_last_report(eng).timing.host_us;
        if (st != FATTN_OK)
            break;
        t = now_us();
        st = bp ? fattn__cg_bwd_desc_from_geom(&geom, bp, &bd) : fattn__cg_fwd_desc_from_geom(&geom, fp, &fd);
        x.v[S_DESC][i] = now_us() - t;
        if (st != FATTN_OK)
            break;
        t = now_us();
        st = bp ? fattn__cg_build_bwd(x.g, &bd) : fattn__cg_build_fwd(x.g, &fd);
        x.v[S_GRAPH][i] = now_us() - t;
        if (st == FATTN_OK)
            st = one_rep(&x, i, q->data, qbytes);
        if (st == FATTN_OK && dev) {
            /* the steps above rebound the plan's variant pack: one untimed
             * call makes the device pointers' pack again, as on a real hit */
            st = bp ? fattn_engine_bwd(eng, &dev->bp) : fattn_engine_fwd(eng, &dev->fp);
            if (st != FATTN_OK)
                break;
            cudaError_t ce = x.api->cudaDeviceSynchronize();
            if (ce != cudaSuccess) {
                st = fattn__cudnn_cuda_fail(x.api, ce, "steps: synchronize");
                break;
            }
            t = now_us();
            st = bp ? fattn_engine_bwd(eng, &dev->bp) : fattn_engine_fwd(eng, &dev->fp);
            x.v[S_DEV_PUBLIC][i] = now_us() - t;
            x.v[S_DEV_REPORTED][i] = fattn_engine_last_report(eng).timing.host_us;
        }
    }
    free_all(x.api, owned, nowned);
    if (st == FATTN_OK) {
        printf("{\"bench\":\"cudnn_steps\",\"shape\":\"%s\",\"causal\":%s,\"kind\":\"%s\","
               "\"reps\":%d", shape, causal ? "true" : "false", kind, n);
        for (int s = 0; s < (dev ? S_COUNT : S_DEV_PUBLIC); s++) {
            qsort(x.v[s], (size_t)n, sizeof(double), cmp_double);
            double med = n % 2 ? x.v[s][n / 2] : 0.5 * (x.v[s][n / 2 - 1] + x.v[s][n / 2]);
            printf(",\"%s\":%.2f", step_names[s], med);
        }
        printf("}\n");
        fflush(stdout);
    } else {
        fprintf(stderr, "bench_cudnn: steps %s %s %s: %s\n", shape,
                causal ? "causal" : "non-causal", kind, fattn_last_error());
    }
    if (have_geom)
        fattn__geom_free(&geom);
    free(all);
    free(x.g);
    free(x.junk);
    return st == FATTN_OK ? 0 : -1;
}

int bench_public(fattn_engine *eng, const fattn_fwd_params *fp, const fattn_bwd_params *bp,
                 int n, double *median_ms, double *wall_us)
{
    const cudnn_api *api = ((cudnn_engine *)eng->impl)->api;
    cudaEvent_t *ev = calloc((size_t)n + 1, sizeof *ev);
    double *ms = calloc((size_t)n, sizeof *ms), *wall = calloc((size_t)n, sizeof *wall);
    fattn_status st = ev && ms && wall ? FATTN_OK : fattn_error(FATTN_E_NOMEM, "public");
    int made = 0;
    cudaError_t ce = cudaSuccess;
    for (; st == FATTN_OK && made <= n; made++)
        if ((ce = api->cudaEventCreate(&ev[made])) != cudaSuccess) {
            st = fattn__cudnn_cuda_fail(api, ce, "cudaEventCreate");
            break;
        }
    if (st == FATTN_OK && (ce = api->cudaEventRecord(ev[0], NULL)) != cudaSuccess)
        st = fattn__cudnn_cuda_fail(api, ce, "cudaEventRecord");
    for (int i = 0; i < n && st == FATTN_OK; i++) {
        double t = now_us();
        st = bp ? fattn_engine_bwd(eng, bp) : fattn_engine_fwd(eng, fp);
        wall[i] = now_us() - t;
        if (st == FATTN_OK && (ce = api->cudaEventRecord(ev[i + 1], NULL)) != cudaSuccess)
            st = fattn__cudnn_cuda_fail(api, ce, "cudaEventRecord");
    }
    if (st == FATTN_OK && (ce = api->cudaEventSynchronize(ev[n])) != cudaSuccess)
        st = fattn__cudnn_cuda_fail(api, ce, "cudaEventSynchronize");
    for (int i = 0; i < n && st == FATTN_OK; i++) {
        float t = 0.0f;
        if ((ce = api->cudaEventElapsedTime(&t, ev[i], ev[i + 1])) != cudaSuccess)
            st = fattn__cudnn_cuda_fail(api, ce, "cudaEventElapsedTime");
        ms[i] = t;
    }
    if (st == FATTN_OK) {
        qsort(ms, (size_t)n, sizeof *ms, cmp_double);
        qsort(wall, (size_t)n, sizeof *wall, cmp_double);
        *median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
        *wall_us = n % 2 ? wall[n / 2] : 0.5 * (wall[n / 2 - 1] + wall[n / 2]);
    } else {
        fprintf(stderr, "bench_cudnn: public calls: %s\n", fattn_last_error());
    }
    for (int i = 0; i < made && ev; i++)
        api->cudaEventDestroy(ev[i]);
    free(ev);
    free(ms);
    free(wall);
    return st == FATTN_OK ? 0 : -1;
}

/* A device copy of host view t (its span, same strides) in d. */
static fattn_status dev_mirror(const cudnn_api *api, bench_dev *d, const fattn_tensor *t,
                               fattn_tensor *out)
{
    *out = *t;
    if (fattn_tensor_is_empty(t))
        return FATTN_OK;
    if (d->n == (int)(sizeof d->p / sizeof d->p[0]))
        return fattn_error(FATTN_E_INTERNAL, "device mode: too many buffers");
    size_t bytes = fattn__cudnn_view_bytes(t);
    void *p = NULL;
    cudaError_t ce = api->cudaMalloc(&p, bytes);
    if (ce != cudaSuccess)
        return fattn__cudnn_cuda_fail(api, ce, "device mode: cudaMalloc");
    d->p[d->n++] = p;
    if ((ce = api->cudaMemcpy(p, t->data, bytes, cudaMemcpyHostToDevice)) != cudaSuccess)
        return fattn__cudnn_cuda_fail(api, ce, "device mode: H2D");
    out->data = p;
    out->device = FATTN_DEVICE_CUDA;
    return FATTN_OK;
}

int bench_dev_init(fattn_engine *eng, const fattn_fwd_params *fp, const fattn_bwd_params *bp,
                   bench_dev *d)
{
    const cudnn_api *api = ((cudnn_engine *)eng->impl)->api;
    memset(d, 0, sizeof *d);
    d->fp = *fp;
    d->bp = *bp;
    d->aux_fwd = *fp->aux;
    d->aux_bwd = *bp->aux;
    d->fp.aux = &d->aux_fwd;
    d->bp.aux = &d->aux_bwd;
    fattn_status st;
    if ((st = dev_mirror(api, d, &fp->attn.q, &d->fp.attn.q)) || (st = dev_mirror(api, d,
        &fp->attn.k, &d->fp.attn.k)) ||
        (st = dev_mirror(api, d, &fp->attn.v, &d->fp.attn.v)) || (st = dev_mirror(api, d,
            &fp->attn.o, &d->fp.attn.o)) ||
        (st = dev_mirror(api, d, &fp->aux->t[0], &d->aux_fwd.t[0])) ||
        (st = dev_mirror(api, d, &bp->d_o, &d->bp.d_o)) ||
        (st = dev_mirror(api, d, &bp->dq, &d->bp.dq)) ||
        (st = dev_mirror(api, d, &bp->dk, &d->bp.dk)) ||
        (st = dev_mirror(api, d, &bp->dv, &d->bp.dv))) {
        fprintf(stderr, "bench_cudnn: device mode: %s\n", fattn_last_error());
        bench_dev_free(eng, d);
        return -1;
    }
    d->bp.attn.q = d->fp.attn.q;
    d->bp.attn.k = d->fp.attn.k;
    d->bp.attn.v = d->fp.attn.v;
    d->bp.attn.o = d->fp.attn.o;
    d->aux_bwd.t[0] = d->aux_fwd.t[0];
    return 0;
}

void bench_dev_free(fattn_engine *eng, bench_dev *d)
{
    const cudnn_api *api = ((cudnn_engine *)eng->impl)->api;
    api->cudaDeviceSynchronize(); /* queued calls may still use the buffers */
    for (int i = 0; i < d->n; i++)
        api->cudaFree(d->p[i]);
    d->n = 0;
}

int bench_dev_host(fattn_engine *eng, const fattn_fwd_params *fp, const fattn_bwd_params *bp,
                   int n, bool busy, double *reported_us, double *wall_us, int *hits)
{
    const cudnn_api *api = ((cudnn_engine *)eng->impl)->api;
    double *rep = calloc((size_t)n, sizeof *rep), *wall = calloc((size_t)n, sizeof *wall);
    fattn_status st = rep && wall ? FATTN_OK : fattn_error(FATTN_E_NOMEM, "device host cost");
    *hits = 0;
    if (st == FATTN_OK && busy) /* the GPU at work before the first timed call */
        st = bp ? fattn_engine_bwd(eng, bp) : fattn_engine_fwd(eng, fp);
    for (int i = 0; i < n && st == FATTN_OK; i++) {
        cudaError_t ce = busy ? cudaSuccess : api->cudaDeviceSynchronize();
        if (ce != cudaSuccess) {
            st = fattn__cudnn_cuda_fail(api, ce, "cudaDeviceSynchronize");
            break;
        }
        double t = now_us();
        st = bp ? fattn_engine_bwd(eng, bp) : fattn_engine_fwd(eng, fp);
        wall[i] = now_us() - t;
        fattn_engine_timing tm = fattn_engine_last_report(eng).timing;
        rep[i] = tm.host_us;
        *hits += tm.plan_cache_hit;
    }
    if (st == FATTN_OK && api->cudaDeviceSynchronize() != cudaSuccess)
        st = fattn_error(FATTN_E_CUDA, "cudaDeviceSynchronize after the device calls");
    if (st == FATTN_OK) {
        qsort(rep, (size_t)n, sizeof *rep, cmp_double);
        qsort(wall, (size_t)n, sizeof *wall, cmp_double);
        *reported_us = n % 2 ? rep[n / 2] : 0.5 * (rep[n / 2 - 1] + rep[n / 2]);
        *wall_us = n % 2 ? wall[n / 2] : 0.5 * (wall[n / 2 - 1] + wall[n / 2]);
    } else {
        fprintf(stderr, "bench_cudnn: device host cost: %s\n", fattn_last_error());
    }
    free(rep);
    free(wall);
    return st == FATTN_OK ? 0 : -1;
}

int bench_tune_info(const fattn_engine *eng, char *first, char *winner, size_t cap,
                    int *candidates, double *first_ms, double *winner_ms)
{
    const cudnn_engine *e = eng->impl;
    if (!e->tune.tuned)
        return 0;
    snprintf(first, cap, "%s", e->tune.first);
    snprintf(winner, cap, "%s", e->tune.winner);
    *candidates = e->tune.candidates;
    *first_ms = e->tune.first_ms;
    *winner_ms = e->tune.winner_ms;
    return 1;
}

void bench_tune_sweep(const fattn_engine *eng, char *out, size_t cap)
{
    const cudnn_engine *e = eng->impl;
    snprintf(out, cap, "%s", e->tune.sweep);
}

int bench_tune_list(const fattn_engine *eng, char (*tags)[96], double *ms, int cap)
{
    const cudnn_engine *e = eng->impl;
    if (!e->tune.tuned)
        return 0;
    int n = e->tune.candidates < cap ? e->tune.candidates : cap;
    for (int i = 0; i < n; i++) {
        snprintf(tags[i], 96, "%s", e->tune.tag[i]);
        ms[i] = e->tune.ms[i];
    }
    return n;
}
