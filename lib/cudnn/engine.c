/* The cuDNN engine: forward through a cached cuDNN plan, host tensors copied
 * to and from the device (fattn/cudnn.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/geom.h"
#include "cudnn/cudnn_internal.h"
#include "cudnn/plan_store.h"
#include "fattn/cudnn.h"

typedef struct plan_entry {
    char *key;
    cudnn_plan *plan;
    struct plan_entry *next;
} plan_entry;

typedef struct cudnn_engine {
    fattn_engine base;
    const cudnn_api *api;
    cudnnHandle_t handle;
    int device;
    plan_entry *plans;
    int nplans;
    void *ws;
    size_t ws_size;
    char last_tag[96];
    char last_route[16];
    int64_t last_workspace; /* bytes of the last backward: engine + Dsum + dQ_accum */
    bool force_det;         /* every backward deterministic (fattn_cudnn_options) */
    float *mask_dst;        /* capture_dropout_mask: host destination, or NULL */
    int64_t mask_cap;       /* its capacity in floats */
    int time_iters;         /* set_timing */
    double call_t0;         /* when the current forward/backward call began */
    fattn_cudnn_timing timing;
    /* Plan store (plan_store.h): directory (NULL: none), what keys its files
     * besides the graph, counters; where the last plan came from. */
    char *store_dir;
    ps_env store_env;
    fattn_cudnn_plan_store_stats pstats;
    const char *last_plan_source;
} cudnn_engine;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define FATTN_CUDNN_MAX_HEADS 4096

/* ---- device memory --------------------------------------------------------- */

#define MAX_ALLOCS 40

typedef struct dev_arena {
    const cudnn_api *api;
    void *p[MAX_ALLOCS];
    int n;
} dev_arena;

static fattn_status cuda_fail(const cudnn_api *api, cudaError_t e, const char *what)
{
    return fattn_error(FATTN_E_CUDA, "CUDA: %s failed: %s", what, api->cudaGetErrorString(e));
}

static fattn_status dev_alloc(dev_arena *a, size_t bytes, void **out)
{
    *out = NULL;
    if (a->n == MAX_ALLOCS)
        return fattn_error(FATTN_E_INTERNAL, "cuDNN engine: too many device buffers");
    cudaError_t e = a->api->cudaMalloc(out, bytes ? bytes : 16);
    if (e != cudaSuccess)
        return cuda_fail(a->api, e, "cudaMalloc");
    a->p[a->n++] = *out;
    return FATTN_OK;
}

static fattn_status dev_upload(dev_arena *a, const void *host, size_t bytes, void **out)
{
    fattn_status st = dev_alloc(a, bytes, out);
    if (st != FATTN_OK)
        return st;
    cudaError_t e = a->api->cudaMemcpy(*out, host, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? FATTN_OK : cuda_fail(a->api, e, "cudaMemcpy H2D");
}

static void dev_free_all(dev_arena *a)
{
    for (int i = a->n - 1; i >= 0; i--)
        a->api->cudaFree(a->p[i]);
    a->n = 0;
}

static size_t view_bytes(const fattn_tensor *t)
{
    int64_t e = 1;
    for (int i = 0; i < t->ndim; i++)
        e += (t->shape[i] - 1) * t->strides[i];
    return (size_t)e * fattn_dtype_size(t->dtype);
}

/* ---- plans ---------------------------------------------------------------- */

/* Record why the store was not used (the reason is in fattn_last_error)
 * and count it (counter may be NULL); the caller goes on without it. */
static void store_note(cudnn_engine *e, int64_t *counter)
{
    if (counter)
        (*counter)++;
    snprintf(e->pstats.last_note, sizeof e->pstats.last_note, "%s", fattn_last_error());
}

/* A restored plan lists knob choices its config holds at -1 (measured on
 * the H200 with cuDNN 9.19: "eng6_k14=-1_k24=26" for a plan built as
 * "eng6_k24=26"); tags are compared without them (cudnn_internal.h). */
void cudnn_tag_canonical(const char *tag, size_t len, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < cap;) {
        if (tag[i] == '_' && i + 1 < len && tag[i + 1] == 'k') {
            size_t j = i + 2;
            while (j < len && tag[j] >= '0' && tag[j] <= '9')
                j++;
            if (j > i + 2 && len - j >= 3 && tag[j] == '=' && tag[j + 1] == '-' &&
                tag[j + 2] == '1' && (j + 3 == len || tag[j + 3] == '_')) {
                i = j + 3;
                continue;
            }
        }
        out[o++] = tag[i++];
    }
    out[o] = 0;
}

static bool tags_match(const char *a, size_t alen, const char *b, size_t blen)
{
    char ca[160], cb[160];
    cudnn_tag_canonical(a, alen, ca, sizeof ca);
    cudnn_tag_canonical(b, blen, cb, sizeof cb);
    return strcmp(ca, cb) == 0;
}

/* The plan stored under key_text, restored, or NULL (no file, or a file
 * that is refused: counted and noted). A restored plan must report the
 * engine tag and workspace the file recorded at store time; otherwise it is
 * dropped, so the store can only ever save a build, never change a plan. */
static cudnn_plan *store_load(cudnn_engine *e, const char *key_text)
{
    ps_loaded l;
    if (ps_lookup(e->store_dir, key_text, &l) != FATTN_OK) {
        store_note(e, &e->pstats.rejected);
        return NULL;
    }
    if (!l.found) {
        e->pstats.missing++;
        return NULL;
    }
    cudnn_plan *p = NULL;
    fattn_status st = cudnn_plan_deserialize(e->api, e->handle, l.rec.blob, l.rec.blob_len, &p);
    if (st == FATTN_OK && (!tags_match(p->tag, strlen(p->tag), l.rec.tag, l.rec.tag_len) ||
                           p->workspace != l.rec.workspace)) {
        fattn_error(FATTN_E_INVALID_FILE,
                    "plan store: restored plan is %s with %lld workspace bytes, the file "
                    "recorded %.*s with %lld",
                    p->tag, (long long)p->workspace, (int)l.rec.tag_len, l.rec.tag,
                    (long long)l.rec.workspace);
        cudnn_plan_free(p);
        p = NULL;
        st = FATTN_E_INVALID_FILE;
    }
    /* provenance names the plan as it was built */
    if (st == FATTN_OK && l.rec.tag_len < sizeof p->tag)
        snprintf(p->tag, sizeof p->tag, "%.*s", (int)l.rec.tag_len, l.rec.tag);
    ps_loaded_free(&l);
    if (st != FATTN_OK) {
        store_note(e, &e->pstats.rejected);
        return NULL;
    }
    e->pstats.loaded++;
    return p;
}

/* Write a freshly built plan to the store when cuDNN can serialize it. A
 * failure costs only a rebuild in the next process: counted and noted. */
static void store_save(cudnn_engine *e, const char *key_text, const cudnn_plan *p)
{
    unsigned char *blob = NULL;
    size_t len = 0;
    if (cudnn_plan_serialize(p, &blob, &len) != FATTN_OK) {
        store_note(e, &e->pstats.unserializable);
        return;
    }
    ps_record r = {p->tag, strlen(p->tag), key_text, strlen(key_text), p->workspace, blob, len};
    if (ps_store(e->store_dir, &r) != FATTN_OK)
        store_note(e, &e->pstats.write_failed);
    else
        e->pstats.stored++;
    free(blob);
}

/* The plan for g: this engine's cache, else the plan store (when enabled),
 * else a build (then written to the store). Errors only when no plan can be
 * had at all; the store's own failures fall back to a build. */
static fattn_status get_plan(cudnn_engine *e, const cg_graph *g, cudnn_plan **out)
{
    char *key = cg_dump(g, false);
    if (!key)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: graph dump");
    for (plan_entry *pe = e->plans; pe; pe = pe->next)
        if (!strcmp(pe->key, key)) {
            free(key);
            *out = pe->plan;
            e->timing.plan_cache_hit = true;
            e->timing.plan_from_store = false;
            e->timing.plan_build_s = 0.0;
            e->last_plan_source = "memory";
            return FATTN_OK;
        }
    e->timing.plan_cache_hit = false;
    cudnn_plan *p = NULL;
    char *key_text = NULL;
    if (e->store_dir) {
        key_text = ps_key_text(&e->store_env, key);
        if (!key_text) {
            fattn_error(FATTN_E_NOMEM, "plan store: no memory for the key; built instead");
            store_note(e, NULL);
        } else {
            p = store_load(e, key_text);
        }
    }
    if (!p) {
        fattn_status st = cudnn_plan_build(e->api, e->handle, g, &p);
        if (st != FATTN_OK) {
            free(key);
            free(key_text);
            return st;
        }
        e->pstats.built++;
        if (key_text)
            store_save(e, key_text, p);
    }
    free(key_text);
    plan_entry *pe = malloc(sizeof *pe);
    if (!pe) {
        free(key);
        cudnn_plan_free(p);
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: plan cache");
    }
    e->timing.plan_build_s = p->build_seconds;
    e->timing.plan_from_store = p->from_store;
    e->last_plan_source = p->from_store ? "store" : "built";
    pe->key = key;
    pe->plan = p;
    pe->next = e->plans;
    e->plans = pe;
    e->nplans++;
    *out = p;
    return FATTN_OK;
}

/* ---- executing ------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Timed re-executions for set_timing: the same plan and buffers, queued
 * back to back on the handle's (default) stream with an event between
 * consecutive executions, one wait at the end. */
static fattn_status time_plan(cudnn_engine *e, cudnn_plan *plan, const cg_graph *g,
                              void *const *ptrs)
{
    const cudnn_api *api = e->api;
    int n = e->time_iters;
    double *ms = malloc((size_t)n * sizeof *ms);
    cudaEvent_t *ev = calloc((size_t)n + 1, sizeof *ev);
    if (!ms || !ev) {
        free(ms);
        free(ev);
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: timing");
    }
    fattn_status st = FATTN_OK;
    cudaError_t ce = cudaSuccess;
    int made = 0;
    for (; made <= n && ce == cudaSuccess; made++)
        ce = api->cudaEventCreate(&ev[made]);
    if (ce != cudaSuccess) {
        made--;
        st = cuda_fail(api, ce, "cudaEventCreate");
    }
    if (st == FATTN_OK && (ce = api->cudaEventRecord(ev[0], NULL)) != cudaSuccess)
        st = cuda_fail(api, ce, "cudaEventRecord");
    for (int i = 0; i < n && st == FATTN_OK; i++) {
        if ((st = cudnn_plan_execute(plan, e->handle, g, ptrs, e->ws)) != FATTN_OK)
            break;
        if ((ce = api->cudaEventRecord(ev[i + 1], NULL)) != cudaSuccess)
            st = cuda_fail(api, ce, "cudaEventRecord");
    }
    if (st == FATTN_OK && (ce = api->cudaEventSynchronize(ev[n])) != cudaSuccess)
        st = cuda_fail(api, ce, "cudaEventSynchronize");
    for (int i = 0; i < n && st == FATTN_OK; i++) {
        float t = 0.0f;
        if ((ce = api->cudaEventElapsedTime(&t, ev[i], ev[i + 1])) != cudaSuccess)
            st = cuda_fail(api, ce, "cudaEventElapsedTime");
        ms[i] = t;
    }
    if (st == FATTN_OK) {
        qsort(ms, (size_t)n, sizeof *ms, cmp_double);
        e->timing.iters = n;
        e->timing.gpu_ms_min = ms[0];
        e->timing.gpu_ms_median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    }
    for (int i = 0; i < made; i++)
        api->cudaEventDestroy(ev[i]);
    free(ev);
    free(ms);
    return st;
}

/* Grow the shared workspace, execute, wait; then the timed repeats.
 * host_pre is the host time the call spent before its first copy. */
static fattn_status execute_plan(cudnn_engine *e, cudnn_plan *plan, const cg_graph *g,
                                 void *const *ptrs, double host_pre)
{
    const cudnn_api *api = e->api;
    size_t ws = (size_t)(plan->workspace > 0 ? plan->workspace : 0);
    if (ws > e->ws_size) {
        if (e->ws)
            api->cudaFree(e->ws);
        e->ws = NULL;
        e->ws_size = 0;
        cudaError_t ce = api->cudaMalloc(&e->ws, ws);
        if (ce != cudaSuccess)
            return cuda_fail(api, ce, "cudaMalloc workspace");
        e->ws_size = ws;
    }
    double t0 = now_s();
    fattn_status st = cudnn_plan_execute(plan, e->handle, g, ptrs, e->ws);
    e->timing.host_fattn_us = 1e6 * host_pre;
    e->timing.host_execute_us = 1e6 * (now_s() - t0);
    e->timing.host_us = e->timing.host_fattn_us + e->timing.host_execute_us;
    if (st != FATTN_OK)
        return st;
    cudaError_t ce = api->cudaDeviceSynchronize();
    if (ce != cudaSuccess)
        return cuda_fail(api, ce, "cudaDeviceSynchronize after execute");
    return e->time_iters > 0 ? time_plan(e, plan, g, ptrs) : FATTN_OK;
}

/* ---- forward --------------------------------------------------------------- */

/* Read int32 entry i of a 1-D tensor. */
static int64_t cu_at(const fattn_tensor *t, int64_t i)
{
    return ((const int32_t *)t->data)[i * t->strides[0]];
}

/* Ragged element offsets [b+1] of a THD tensor: token offset * token stride. */
static void ragged_offsets(const fattn_tensor *cu, const fattn_tensor *cu_pad, int64_t b,
                           int64_t mult, cg_dtype dt, void *out)
{
    const fattn_tensor *src = fattn_tensor_is_empty(cu_pad) ? cu : cu_pad;
    for (int64_t i = 0; i <= b; i++) {
        int64_t v = cu_at(src, i) * mult;
        if (dt == CG_I64)
            ((int64_t *)out)[i] = v;
        else
            ((int32_t *)out)[i] = (int32_t)v;
    }
}

/* Device pointer of every role a graph can bind (cg_role): one table for the
 * forward and the backward. */
typedef struct dev_bindings {
    void *p[CG_ROLE_COUNT];
} dev_bindings;

/* ptrs[i] for every tensor i of g: NULL for virtual ones, the host value of
 * by-value scalars, else the device pointer of its role. */
static void bind_tensors(const cg_graph *g, const dev_bindings *d, void **ptrs)
{
    for (int i = 0; i < g->nt; i++) {
        const cg_tensor *t = &g->t[i];
        if (t->is_virtual)
            ptrs[i] = NULL;
        else if (t->by_value)
            ptrs[i] = (void *)&t->value;
        else
            ptrs[i] = d->p[t->role];
    }
}

/* One ragged-offset array: role, whether the graph has it, the cu_seqlens
 * (and padded) tensors it comes from, and the element stride of a token. */
typedef struct ragged_src {
    cg_role role;
    bool on;
    const fattn_tensor *cu, *pad;
    int64_t mult;
} ragged_src;

/* Upload the [b+1] element offsets of every ragged tensor into its role. */
static fattn_status upload_ragged(dev_arena *a, const ragged_src *rs, int n, int64_t b,
                                  cg_dtype dt, dev_bindings *d)
{
    size_t esz = dt == CG_I64 ? 8 : 4;
    void *host = malloc((size_t)(b + 1) * 8);
    if (!host)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: ragged offsets");
    fattn_status st = FATTN_OK;
    for (int i = 0; i < n && st == FATTN_OK; i++) {
        if (!rs[i].on)
            continue;
        ragged_offsets(rs[i].cu, rs[i].pad, b, rs[i].mult, dt, host);
        st = dev_upload(a, host, (size_t)(b + 1) * esz, &d->p[rs[i].role]);
    }
    free(host);
    return st;
}

/* The inputs forward and backward share beyond Q, K, V: sink, ALiBi slopes,
 * per-batch lengths, dropout seed and offset. */
static fattn_status upload_common(dev_arena *a, const cg_fwd_desc *fd, const fattn_geom *geom,
                                  const int64_t rng[2], dev_bindings *d)
{
    fattn_status st = FATTN_OK;
    size_t hbytes = (size_t)geom->h * sizeof(float), bbytes = (size_t)geom->b * sizeof(int32_t);
    if (fd->sink && (st = dev_upload(a, geom->sink, hbytes, &d->p[CG_ROLE_SINK])))
        return st;
    if (fd->alibi && (st = dev_upload(a, geom->alibi_slopes, hbytes, &d->p[CG_ROLE_ALIBI])))
        return st;
    if (fd->padding && ((st = dev_upload(a, geom->len_q, bbytes, &d->p[CG_ROLE_SEQ_Q])) ||
                        (st = dev_upload(a, geom->len_kv, bbytes, &d->p[CG_ROLE_SEQ_KV]))))
        return st;
    if (fd->dropout > 0.0f) {
        if ((st = dev_upload(a, rng, 2 * sizeof(int64_t), &d->p[CG_ROLE_SEED])))
            return st;
        d->p[CG_ROLE_OFFSET] = (char *)d->p[CG_ROLE_SEED] + sizeof(int64_t);
    }
    return FATTN_OK;
}

typedef struct fwd_run {
    cudnn_engine *e;
    const fattn_fwd_params *p;
    const fattn_geom *geom;
    fattn_tensor stats;
    cg_graph *g;
    cg_fwd_desc d;
} fwd_run;

static fattn_status run_forward(fwd_run *r, dev_arena *a)
{
    const fattn_fwd_params *p = r->p;
    const fattn_geom *geom = r->geom;
    const cg_graph *g = r->g;
    const cudnn_api *api = r->e->api;
    cudnn_plan *plan = NULL;
    fattn_status st = get_plan(r->e, g, &plan);
    if (st != FATTN_OK)
        return st;
    snprintf(r->e->last_tag, sizeof r->e->last_tag, "%s", plan->tag);
    double host_pre = now_s() - r->e->call_t0 - r->e->timing.plan_build_s;

    int64_t b = geom->b, h = geom->h;
    void *mask = NULL;
    int64_t mask_n = r->d.rng_dump ? b * h * geom->sq * geom->skv : 0;
    if (mask_n > r->e->mask_cap)
        return fattn_error(FATTN_E_SHAPE, "cuDNN engine: the dropout mask needs %lld floats, "
                           "the capture buffer holds %lld", (long long)mask_n,
                           (long long)r->e->mask_cap);
    if (mask_n && (st = dev_alloc(a, (size_t)mask_n * sizeof(float), &mask)))
        return st;
    dev_bindings d = {{NULL}};
    d.p[CG_ROLE_RNG_DUMP] = mask;
    size_t o_bytes = view_bytes(&p->o);
    int64_t stats_n = (geom->thd_stats ? geom->t_q : b * geom->sq) * h;
    if ((st = dev_upload(a, p->q.data, view_bytes(&p->q), &d.p[CG_ROLE_Q])) ||
        (st = dev_upload(a, p->k.data, view_bytes(&p->k), &d.p[CG_ROLE_K])) ||
        (st = dev_upload(a, p->v.data, view_bytes(&p->v), &d.p[CG_ROLE_V])) ||
        (st = dev_alloc(a, o_bytes, &d.p[CG_ROLE_O])) ||
        (st = dev_alloc(a, (size_t)stats_n * sizeof(float), &d.p[CG_ROLE_STATS])))
        return st;
    if (r->d.bias && (st = dev_upload(a, p->bias.data, view_bytes(&p->bias), &d.p[CG_ROLE_BIAS])))
        return st;
    int64_t rng[2] = {0, 0};
    if (r->d.dropout > 0.0f) {
        rng[0] = ((const int64_t *)p->rng_state.data)[0];
        rng[1] = ((const int64_t *)p->rng_state.data)[p->rng_state.strides[0]];
    }
    if ((st = upload_common(a, &r->d, geom, rng, &d)))
        return st;
    if (r->d.ragged_q || r->d.ragged_kv) {
        const fattn_tensor *cq = &p->cu_seqlens_q, *cqp = &p->cu_seqlens_q_padded;
        const fattn_tensor *ck = &p->cu_seqlens_kv, *ckp = &p->cu_seqlens_kv_padded;
        bool rq = r->d.ragged_q, rkv = r->d.ragged_kv;
        const ragged_src rs[] = {
            {CG_ROLE_RAG_Q, rq, cq, cqp, p->q.strides[0]},
            {CG_ROLE_RAG_K, rkv, ck, ckp, p->k.strides[0]},
            {CG_ROLE_RAG_V, rkv, ck, ckp, p->v.strides[0]},
            {CG_ROLE_RAG_O, rq, cq, cqp, p->o.strides[0]},
            {CG_ROLE_RAG_STATS, rq, cq, cqp, h},
        };
        if ((st = upload_ragged(a, rs, (int)(sizeof rs / sizeof rs[0]), b, r->d.ragged_dtype, &d)))
            return st;
    }
    void *ptrs[CG_MAX_TENSORS];
    bind_tensors(g, &d, ptrs);
    if ((st = execute_plan(r->e, plan, g, ptrs, host_pre)))
        return st;
    cudaError_t ce;
    if (mask) {
        ce = api->cudaMemcpy(r->e->mask_dst, mask, (size_t)mask_n * sizeof(float),
                             cudaMemcpyDeviceToHost);
        if (ce != cudaSuccess)
            return cuda_fail(api, ce, "cudaMemcpy D2H (dropout mask)");
    }

    /* copy back the defined regions only */
    char *ho = malloc(o_bytes);
    float *hs = malloc((size_t)stats_n * sizeof(float));
    if (!ho || !hs) {
        free(ho);
        free(hs);
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: host staging");
    }
    ce = api->cudaMemcpy(ho, d.p[CG_ROLE_O], o_bytes, cudaMemcpyDeviceToHost);
    if (ce == cudaSuccess)
        ce = api->cudaMemcpy(hs, d.p[CG_ROLE_STATS], (size_t)stats_n * sizeof(float),
                             cudaMemcpyDeviceToHost);
    if (ce != cudaSuccess) {
        free(ho);
        free(hs);
        return cuda_fail(api, ce, "cudaMemcpy D2H");
    }
    size_t esz = fattn_dtype_size(p->o.dtype);
    size_t row = (size_t)geom->dv * esz;
    float *sdst = r->stats.data;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i = 0; i < geom->len_q[bi]; i++)
            for (int64_t n = 0; n < h; n++) {
                int64_t off = fattn_geom_row_offset(&p->o, geom->q_fmt, geom->off_q, bi, i, n);
                memcpy((char *)p->o.data + (size_t)off * esz, ho + (size_t)off * esz, row);
                int64_t si = geom->thd_stats ? ((int64_t)geom->off_q[bi] + i) * h + n
                                             : (bi * h + n) * geom->sq + i;
                sdst[fattn_geom_stats_offset(geom, &r->stats, bi, n, i)] = hs[si];
            }
    free(ho);
    free(hs);
    return FATTN_OK;
}

static fattn_status cudnn_engine_fwd(fattn_engine *base, const fattn_fwd_params *p,
                                     const fattn_fwd_call *c)
{
    cudnn_engine *e = (cudnn_engine *)base;
    e->call_t0 = now_s();
    fwd_run r;
    memset(&r, 0, sizeof r);
    r.e = e;
    r.p = p;
    fattn_status st = cg_fwd_desc_from_params(p, &r.d);
    if (st != FATTN_OK)
        return st;
    r.d.rng_dump = e->mask_dst && r.d.dropout > 0.0f;
    r.geom = c->geom;
    r.stats = c->stats;
    r.g = malloc(sizeof *r.g);
    if (!r.g)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: graph");
    st = cg_build_fwd(r.g, &r.d);
    if (st == FATTN_OK) {
        snprintf(e->last_route, sizeof e->last_route, "%s",
                 r.g->route == CG_ROUTE_NATIVE ? "native" : "composite");
        dev_arena arena = {.api = e->api, .n = 0};
        memset(&e->timing, 0, sizeof e->timing);
        st = run_forward(&r, &arena);
        dev_free_all(&arena);
    }
    free(r.g);
    return st;
}

/* ---- backward -------------------------------------------------------------- */

typedef struct bwd_run {
    cudnn_engine *e;
    const fattn_bwd_params *p;
    const fattn_geom *geom;
    fattn_tensor stats;
    cg_graph *g;
    cg_bwd_desc d;
} bwd_run;

/* Device copy of a host tensor's view; NULL-safe for empty tensors. */
static fattn_status upload_view(dev_arena *a, const fattn_tensor *t, void **out)
{
    return dev_upload(a, t->data, view_bytes(t), out);
}

/* Copy rows [0, len) of every head of a gradient back (defined regions). */
static void copy_rows(fattn_tensor *dst, const char *dev_copy, fattn_qkv_format fmt,
                      const int32_t *off, const int32_t *len, int64_t b, int64_t heads,
                      int64_t width)
{
    size_t esz = fattn_dtype_size(dst->dtype);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i = 0; i < len[bi]; i++)
            for (int64_t n = 0; n < heads; n++) {
                int64_t o = fattn_geom_row_offset(dst, fmt, off, bi, i, n);
                memcpy((char *)dst->data + (size_t)o * esz, dev_copy + (size_t)o * esz,
                       (size_t)width * esz);
            }
}

static fattn_status download(const cudnn_api *api, void *host, const void *dev, size_t bytes)
{
    cudaError_t ce = api->cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
    return ce == cudaSuccess ? FATTN_OK : cuda_fail(api, ce, "cudaMemcpy D2H");
}

static fattn_status run_backward(bwd_run *r, dev_arena *a)
{
    const fattn_bwd_params *p = r->p;
    const fattn_geom *geom = r->geom;
    const cg_graph *g = r->g;
    const cg_fwd_desc *fd = &r->d.f;
    const cudnn_api *api = r->e->api;
    cudnn_plan *plan = NULL;
    fattn_status st = get_plan(r->e, g, &plan);
    if (st != FATTN_OK)
        return st;
    snprintf(r->e->last_tag, sizeof r->e->last_tag, "%s", plan->tag);
    double host_pre = now_s() - r->e->call_t0 - r->e->timing.plan_build_s;

    int64_t b = geom->b, h = geom->h;
    dev_bindings d = {{NULL}};
    int64_t stats_n = (geom->thd_stats ? geom->t_q : b * geom->sq) * h;
    if ((st = upload_view(a, &p->q, &d.p[CG_ROLE_Q])) ||
        (st = upload_view(a, &p->k, &d.p[CG_ROLE_K])) ||
        (st = upload_view(a, &p->v, &d.p[CG_ROLE_V])) ||
        (st = upload_view(a, &p->o, &d.p[CG_ROLE_O])) ||
        (st = upload_view(a, &p->d_o, &d.p[CG_ROLE_DO])) ||
        (st = dev_alloc(a, view_bytes(&p->dq), &d.p[CG_ROLE_DQ])) ||
        (st = dev_alloc(a, view_bytes(&p->dk), &d.p[CG_ROLE_DK])) ||
        (st = dev_alloc(a, view_bytes(&p->dv), &d.p[CG_ROLE_DV])) ||
        (st = dev_alloc(a, (size_t)cg_bwd_dsum_bytes(&r->d), &d.p[CG_ROLE_DSUM])))
        return st;
    if (cg_bwd_dq_accum_bytes(&r->d) > 0 &&
        (st = dev_alloc(a, (size_t)cg_bwd_dq_accum_bytes(&r->d), &d.p[CG_ROLE_DQ_ACCUM])))
        return st;
    /* Stats in the graph's layout: [b,h,sq] or ragged [t_q,h]; undefined
     * rows zero (the kernels do not read them). */
    {
        float *hs = calloc((size_t)stats_n, sizeof(float));
        if (!hs)
            return fattn_error(FATTN_E_NOMEM, "cuDNN engine: Stats staging");
        const float *src = r->stats.data;
        for (int64_t bi = 0; bi < b; bi++)
            for (int64_t i = 0; i < geom->len_q[bi]; i++)
                for (int64_t n = 0; n < h; n++) {
                    int64_t si = geom->thd_stats ? ((int64_t)geom->off_q[bi] + i) * h + n
                                                 : (bi * h + n) * geom->sq + i;
                    hs[si] = src[fattn_geom_stats_offset(geom, &r->stats, bi, n, i)];
                }
        st = dev_upload(a, hs, (size_t)stats_n * sizeof(float), &d.p[CG_ROLE_STATS]);
        free(hs);
        if (st != FATTN_OK)
            return st;
    }
    if (fd->bias && (st = upload_view(a, &geom->bias, &d.p[CG_ROLE_BIAS])))
        return st;
    if (r->d.dbias && (st = dev_alloc(a, view_bytes(&p->d_bias), &d.p[CG_ROLE_DBIAS])))
        return st;
    if (fd->sink && (st = dev_alloc(a, (size_t)h * sizeof(float), &d.p[CG_ROLE_DSINK])))
        return st;
    int64_t rng[2] = {(int64_t)geom->rng_seed, (int64_t)geom->rng_offset};
    if ((st = upload_common(a, fd, geom, rng, &d)))
        return st;
    if (fd->ragged_q || fd->ragged_kv) {
        const fattn_tensor *cq = &p->cu_seqlens_q, *cqp = &p->cu_seqlens_q_padded;
        const fattn_tensor *ck = &p->cu_seqlens_kv, *ckp = &p->cu_seqlens_kv_padded;
        bool rq = fd->ragged_q, rkv = fd->ragged_kv;
        const ragged_src rs[] = {
            {CG_ROLE_RAG_Q, rq, cq, cqp, p->q.strides[0]},
            {CG_ROLE_RAG_K, rkv, ck, ckp, p->k.strides[0]},
            {CG_ROLE_RAG_V, rkv, ck, ckp, p->v.strides[0]},
            {CG_ROLE_RAG_O, rq, cq, cqp, p->o.strides[0]},
            {CG_ROLE_RAG_STATS, rq, cq, cqp, h},
            {CG_ROLE_RAG_DO, rq, cq, cqp, p->d_o.strides[0]},
            {CG_ROLE_RAG_DQ, rq, cq, cqp, p->dq.strides[0]},
            {CG_ROLE_RAG_DK, rkv, ck, ckp, p->dk.strides[0]},
            {CG_ROLE_RAG_DV, rkv, ck, ckp, p->dv.strides[0]},
        };
        if ((st = upload_ragged(a, rs, (int)(sizeof rs / sizeof rs[0]), b, fd->ragged_dtype, &d)))
            return st;
    }
    void *ptrs[CG_MAX_TENSORS];
    bind_tensors(g, &d, ptrs);
    r->e->last_workspace = (plan->workspace > 0 ? plan->workspace : 0) +
                           cg_bwd_dsum_bytes(&r->d) + cg_bwd_dq_accum_bytes(&r->d);
    if ((st = execute_plan(r->e, plan, g, ptrs, host_pre)))
        return st;

    /* copy back the defined regions only */
    fattn_tensor *outs[3] = {(fattn_tensor *)&p->dq, (fattn_tensor *)&p->dk,
                             (fattn_tensor *)&p->dv};
    void *devs[3] = {d.p[CG_ROLE_DQ], d.p[CG_ROLE_DK], d.p[CG_ROLE_DV]};
    for (int t = 0; t < 3 && st == FATTN_OK; t++) {
        size_t bytes = view_bytes(outs[t]);
        char *hbuf = malloc(bytes);
        if (!hbuf)
            return fattn_error(FATTN_E_NOMEM, "cuDNN engine: host staging");
        st = download(api, hbuf, devs[t], bytes);
        if (st == FATTN_OK) {
            if (t == 0)
                copy_rows(outs[t], hbuf, geom->q_fmt, geom->off_q, geom->len_q, b, h, geom->d);
            else
                copy_rows(outs[t], hbuf, geom->kv_fmt, geom->off_kv, geom->len_kv, b, geom->hg,
                          t == 1 ? geom->d : geom->dv);
        }
        free(hbuf);
    }
    if (st == FATTN_OK && r->d.dbias) {
        const fattn_tensor *db = &p->d_bias;
        size_t bytes = view_bytes(db), esz = fattn_dtype_size(db->dtype);
        char *hbuf = malloc(bytes);
        if (!hbuf)
            return fattn_error(FATTN_E_NOMEM, "cuDNN engine: host staging");
        st = download(api, hbuf, d.p[CG_ROLE_DBIAS], bytes);
        if (st == FATTN_OK)
            for (int64_t i0 = 0; i0 < db->shape[0]; i0++)
                for (int64_t i1 = 0; i1 < db->shape[1]; i1++)
                    for (int64_t i2 = 0; i2 < db->shape[2]; i2++) {
                        int64_t off = i0 * db->strides[0] + i1 * db->strides[1] +
                                      i2 * db->strides[2];
                        memcpy((char *)db->data + (size_t)off * esz, hbuf + (size_t)off * esz,
                               (size_t)db->shape[3] * esz);
                    }
        free(hbuf);
    }
    if (st == FATTN_OK && fd->sink && !fattn_tensor_is_empty(&p->d_softmax_offset)) {
        float hsink[FATTN_CUDNN_MAX_HEADS];
        const fattn_tensor *dso = &p->d_softmax_offset;
        if (h > FATTN_CUDNN_MAX_HEADS)
            return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: more than %d heads",
                               FATTN_CUDNN_MAX_HEADS);
        st = download(api, hsink, d.p[CG_ROLE_DSINK], (size_t)h * sizeof(float));
        if (st == FATTN_OK)
            for (int64_t n = 0; n < h; n++)
                ((float *)dso->data)[n * dso->strides[1]] = hsink[n];
    }
    return st;
}

static fattn_status cudnn_engine_bwd(fattn_engine *base, const fattn_bwd_params *p,
                                     const fattn_bwd_call *c)
{
    cudnn_engine *e = (cudnn_engine *)base;
    e->call_t0 = now_s();
    bwd_run r;
    memset(&r, 0, sizeof r);
    r.e = e;
    r.p = p;
    fattn_status st = cg_bwd_desc_from_params(p, &r.d);
    if (st != FATTN_OK)
        return st;
    if (e->force_det)
        r.d.deterministic = true;
    /* Measured on the H200 with cuDNN 9.19.0 (docs/determinism.md): with a
     * ragged (THD) Q the fused kernel's dSoftmaxOffset is wrong (every head,
     * by ~0.4 at the matrix sizes) while dQ, dK, dV are right; refuse rather
     * than return it. */
    if (r.d.dsink && r.d.f.ragged_q && e->api->GetVersion() <= 91900)
        return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN backward: dSoftmaxOffset with a THD "
                           "(ragged) Q is wrong on cuDNN <= 9.19 (measured); not supported");
    r.geom = c->geom;
    r.stats = c->stats;
    r.g = malloc(sizeof *r.g);
    if (!r.g)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: graph");
    st = cg_build_bwd(r.g, &r.d);
    if (st == FATTN_OK) {
        snprintf(e->last_route, sizeof e->last_route, "%s",
                 r.d.deterministic || r.d.dbias ? "bwd-direct-dq" : "bwd-dq-accum");
        dev_arena arena = {.api = e->api, .n = 0};
        memset(&e->timing, 0, sizeof e->timing);
        st = run_backward(&r, &arena);
        dev_free_all(&arena);
    }
    free(r.g);
    return st;
}

static void cudnn_engine_free(fattn_engine *base)
{
    cudnn_engine *e = (cudnn_engine *)base;
    while (e->plans) {
        plan_entry *n = e->plans->next;
        cudnn_plan_free(e->plans->plan);
        free(e->plans->key);
        free(e->plans);
        e->plans = n;
    }
    if (e->ws)
        e->api->cudaFree(e->ws);
    if (e->handle)
        e->api->Destroy(e->handle);
    free(e->store_dir);
    free(e);
}

static const fattn_engine_ops cudnn_ops = {
    .name = "cudnn",
    .who_fwd = "cuDNN forward",
    .who_bwd = "cuDNN backward",
    .fwd = cudnn_engine_fwd,
    .bwd = cudnn_engine_bwd,
    .free = cudnn_engine_free,
};

/* ---- public --------------------------------------------------------------- */

bool fattn_cudnn_library_loadable(void)
{
    return cudnn_api_load(false) != NULL;
}

bool fattn_cudnn_available(void)
{
    const cudnn_api *api = cudnn_api_load(true);
    if (!api)
        return false;
    int n = 0;
    cudaError_t ce = api->cudaGetDeviceCount(&n);
    if (ce != cudaSuccess || n <= 0) {
        fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: no CUDA device (%s)",
                    ce != cudaSuccess ? api->cudaGetErrorString(ce) : "count 0");
        return false;
    }
    return true;
}

fattn_status fattn_cudnn_get_info(int device, fattn_cudnn_info *out)
{
    memset(out, 0, sizeof *out);
    out->cudnn_header_version = CUDNN_VERSION;
    if (!fattn_cudnn_available())
        return fattn_error(FATTN_E_UNSUPPORTED, "%s", fattn_last_error());
    const cudnn_api *api = cudnn_api_load(true);
    out->cudnn_version = (int64_t)api->GetVersion();
    snprintf(out->cudnn_library, sizeof out->cudnn_library, "%s", api->cudnn_path);
    api->cudaRuntimeGetVersion(&out->cuda_runtime_version);
    api->cudaDriverGetVersion(&out->cuda_driver_version);
    api->cudaDeviceGetAttribute(&out->sm_count, cudaDevAttrMultiProcessorCount, device);
    api->cudaDeviceGetAttribute(&out->cc_major, cudaDevAttrComputeCapabilityMajor, device);
    api->cudaDeviceGetAttribute(&out->cc_minor, cudaDevAttrComputeCapabilityMinor, device);
    /* The device name is the first field of cudaDeviceProp; the buffer is
     * larger than any version's struct. */
    size_t cap = sizeof(struct cudaDeviceProp) + 8192;
    char *props = calloc(1, cap);
    if (props) {
        if (api->cudaGetDeviceProperties(props, device) == cudaSuccess)
            snprintf(out->device_name, sizeof out->device_name, "%.255s", props);
        free(props);
    }
    return FATTN_OK;
}

fattn_status fattn_engine_init_cudnn(fattn_engine **out, const fattn_cudnn_options *opt)
{
    if (!out)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_engine_init_cudnn: out is NULL");
    *out = NULL;
    if (!fattn_cudnn_available())
        return fattn_error(FATTN_E_UNSUPPORTED, "%s", fattn_last_error());
    const cudnn_api *api = cudnn_api_load(true);
    int device = opt ? opt->device : 0;
    cudaError_t ce = api->cudaSetDevice(device);
    if (ce != cudaSuccess)
        return cuda_fail(api, ce, "cudaSetDevice");
    if (api->GetVersion() < 90000)
        return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: cuDNN %zu is older than 9.0",
                           api->GetVersion());
    cudnn_engine *e = calloc(1, sizeof *e);
    if (!e)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: cannot allocate");
    cudnnStatus_t s = api->Create(&e->handle);
    if (s != CUDNN_STATUS_SUCCESS) {
        free(e);
        return cudnn_fail(api, s, "cudnnCreate");
    }
    e->base.ops = &cudnn_ops;
    e->base.impl = e;
    e->api = api;
    e->device = device;
    e->force_det = opt && opt->force_deterministic_bwd;
    e->last_plan_source = "";
    /* The plan store is an optimisation: a store that cannot be set up is
     * noted in the stats and the engine works without it. */
    const char *dir = ps_resolve_dir(opt ? opt->plan_dir : NULL, getenv("FATTN_CUDNN_PLAN_DIR"));
    fattn_cudnn_info info;
    if (dir && fattn_cudnn_get_info(device, &info) != FATTN_OK) {
        snprintf(e->pstats.last_note, sizeof e->pstats.last_note,
                 "plan store off: device properties unavailable: %s", fattn_last_error());
    } else if (dir) {
        e->store_dir = strdup(dir);
        if (!e->store_dir) {
            cudnn_engine_free(&e->base);
            return fattn_error(FATTN_E_NOMEM, "cuDNN engine: plan store directory");
        }
        e->store_env.cudnn_version = info.cudnn_version;
        e->store_env.lowering_revision = CUDNN_LOWERING_REVISION;
        snprintf(e->store_env.device_name, sizeof e->store_env.device_name, "%s",
                 info.device_name);
        e->store_env.sm_count = info.sm_count;
        e->store_env.cc_major = info.cc_major;
        e->store_env.cc_minor = info.cc_minor;
        e->pstats.store_enabled = true;
    }
    *out = &e->base;
    return FATTN_OK;
}

static const cudnn_engine *as_cudnn(const fattn_engine *e)
{
    return e && e->ops == &cudnn_ops ? (const cudnn_engine *)e : NULL;
}

const char *fattn_cudnn_last_tag(const fattn_engine *e)
{
    const cudnn_engine *c = as_cudnn(e);
    return c ? c->last_tag : "";
}

const char *fattn_cudnn_last_route(const fattn_engine *e)
{
    const cudnn_engine *c = as_cudnn(e);
    return c ? c->last_route : "";
}

int fattn_cudnn_plan_count(const fattn_engine *e)
{
    const cudnn_engine *c = as_cudnn(e);
    return c ? c->nplans : 0;
}

int64_t fattn_cudnn_last_workspace(const fattn_engine *e)
{
    const cudnn_engine *c = as_cudnn(e);
    return c ? c->last_workspace : 0;
}

bool fattn_cudnn_forces_deterministic(const fattn_engine *e)
{
    const cudnn_engine *c = as_cudnn(e);
    return c && c->force_det;
}

fattn_status fattn_cudnn_set_force_deterministic(fattn_engine *e, bool on)
{
    cudnn_engine *c = (cudnn_engine *)as_cudnn(e);
    if (!c)
        return fattn_error(FATTN_E_INVALID_ARG, "set_force_deterministic: not a cuDNN engine");
    c->force_det = on;
    return FATTN_OK;
}

fattn_status fattn_cudnn_capture_dropout_mask(fattn_engine *e, float *mask, int64_t count)
{
    cudnn_engine *c = (cudnn_engine *)as_cudnn(e);
    if (!c)
        return fattn_error(FATTN_E_INVALID_ARG, "capture_dropout_mask: not a cuDNN engine");
    if (mask && count <= 0)
        return fattn_error(FATTN_E_INVALID_ARG, "capture_dropout_mask: count %lld",
                           (long long)count);
    c->mask_dst = mask;
    c->mask_cap = mask ? count : 0;
    return FATTN_OK;
}

fattn_status fattn_cudnn_set_timing(fattn_engine *e, int iters)
{
    cudnn_engine *c = (cudnn_engine *)as_cudnn(e);
    if (!c)
        return fattn_error(FATTN_E_INVALID_ARG, "set_timing: not a cuDNN engine");
    if (iters < 0 || iters > 100000)
        return fattn_error(FATTN_E_INVALID_ARG, "set_timing: %d iterations", iters);
    c->time_iters = iters;
    return FATTN_OK;
}

void fattn_cudnn_last_timing(const fattn_engine *e, fattn_cudnn_timing *out)
{
    const cudnn_engine *c = as_cudnn(e);
    if (out)
        *out = c ? c->timing : (fattn_cudnn_timing){0};
}

fattn_status fattn_cudnn_plan_stats(const fattn_engine *e, fattn_cudnn_plan_store_stats *out)
{
    const cudnn_engine *c = as_cudnn(e);
    if (!c || !out)
        return fattn_error(FATTN_E_INVALID_ARG, "plan_stats: %s",
                           !out ? "out is NULL" : "not a cuDNN engine");
    *out = c->pstats;
    return FATTN_OK;
}

const char *fattn_cudnn_plan_store_dir(const fattn_engine *e)
{
    const cudnn_engine *c = as_cudnn(e);
    return c && c->store_dir ? c->store_dir : "";
}

const char *fattn_cudnn_last_plan_source(const fattn_engine *e)
{
    const cudnn_engine *c = as_cudnn(e);
    return c ? c->last_plan_source : "";
}
