/* The cuDNN engine's host <-> device traffic: the arena of device buffers
 * kept between calls, uploads of views, ragged offsets and the shared inputs, and the
 * copies of the defined regions back; and where a call's tensors live (host or device
 * tensors, fattn_tensor.device). */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn/engine_internal.h"
#include "core/checked.h"

fattn_status fattn__cudnn_cuda_fail(const cudnn_api *api, cudaError_t e, const char *what)
{
    return fattn_error(FATTN_E_CUDA, "CUDA: %s failed: %s", what, api->cudaGetErrorString(e));
}

fattn_status fattn__cudnn_dev_alloc(dev_arena *a, size_t bytes, void **out)
{
    *out = NULL;
    if (a->n == MAX_ALLOCS)
        return fattn_error(FATTN_E_INTERNAL, "cuDNN engine: too many device buffers");
    int i = a->n;
    size_t want = bytes ? bytes : 16;
    if (i < a->held && a->cap[i] >= want) {
        *out = a->p[i];
        a->n++;
        return FATTN_OK;
    }
    if (i < a->held) {
        a->api->cudaFree(a->p[i]);
        a->p[i] = NULL;
        a->cap[i] = 0;
    }
    cudaError_t e = a->api->cudaMalloc(out, want);
    if (e != cudaSuccess) {
        /* the slot stays empty, allocated again next time */
        *out = NULL;
        if (i >= a->held) {
            a->p[i] = NULL;
            a->cap[i] = 0;
            a->held = i + 1;
        }
        return fattn__cudnn_cuda_fail(a->api, e, "cudaMalloc");
    }
    a->p[i] = *out;
    a->cap[i] = want;
    if (i >= a->held)
        a->held = i + 1;
    a->n++;
    return FATTN_OK;
}

fattn_status fattn__cudnn_dev_upload(dev_arena *a, const void *host, size_t bytes, void **out)
{
    fattn_status st = fattn__cudnn_dev_alloc(a, bytes, out);
    if (st != FATTN_OK)
        return st;
    cudaError_t e = a->api->cudaMemcpy(*out, host, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? FATTN_OK : fattn__cudnn_cuda_fail(a->api, e, "cudaMemcpy H2D");
}

void fattn__cudnn_dev_reset(dev_arena *a)
{
    a->n = 0;
}

void fattn__cudnn_dev_free_all(dev_arena *a)
{
    for (int i = a->held - 1; i >= 0; i--)
        if (a->p[i])
            a->api->cudaFree(a->p[i]);
    a->held = a->n = 0;
}

fattn_status fattn__cudnn_stats_count(const fattn_geom *g, int64_t *n, size_t *bytes)
{
    int64_t rows = g->thd_stats ? g->t_q : 0;
    if ((!g->thd_stats && !fattn_mul_i64(g->b, g->sq, &rows)) || !fattn_mul_i64(rows, g->h, n) ||
        !fattn_bytes_of(*n, sizeof(float), bytes))
        return fattn_error(FATTN_E_OVERFLOW, "cuDNN engine: Stats of [%lld, %lld, %lld] overflows",
                           (long long)(g->thd_stats ? g->t_q : g->b), (long long)g->h,
                           (long long)(g->thd_stats ? 1 : g->sq));
    return FATTN_OK;
}

size_t fattn__cudnn_view_bytes(const fattn_tensor *t)
{
    int64_t e = 1;
    for (int i = 0; i < t->ndim; i++)
        e += (t->shape[i] - 1) * t->strides[i];
    return (size_t)e * fattn_dtype_size(t->dtype);
}

/* Read int32 entry i of a 1-D tensor. */
int64_t fattn__cudnn_cu_at(const fattn_tensor *t, int64_t i)
{
    return ((const int32_t *)t->data)[i * t->strides[0]];
}

/* Ragged element offsets [b+1] of a THD tensor: token offset * token stride. */
static void ragged_offsets(const fattn_tensor *cu, const fattn_tensor *cu_pad, int64_t b,
                           int64_t mult, cg_dtype dt, void *out)
{
    const fattn_tensor *src = fattn_tensor_is_empty(cu_pad) ? cu : cu_pad;
    for (int64_t i = 0; i <= b; i++) {
        int64_t v = fattn__cudnn_cu_at(src, i) * mult;
        if (dt == CG_I64)
            ((int64_t *)out)[i] = v;
        else
            ((int32_t *)out)[i] = (int32_t)v;
    }
}

/* ptrs[i] for every tensor i of g: NULL for virtual ones, the host value of
 * by-value scalars, else the device pointer of its role. */
void fattn__cudnn_bind_tensors(const cg_graph *g, const dev_bindings *d, void **ptrs)
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

/* Upload the [b+1] element offsets of every ragged tensor into its role. */
fattn_status fattn__cudnn_upload_ragged(dev_arena *a, const ragged_src *rs, int n, int64_t b,
                                 cg_dtype dt, dev_bindings *d)
{
    size_t esz = dt == CG_I64 ? 8 : 4;
    void *host = malloc((size_t)(b + 1) * 8);
    if (!host)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: ragged offsets");
    fattn_status st = FATTN_OK;
    for (int i = 0; i < n; i++) {
        if (!rs[i].on)
            continue;
        ragged_offsets(rs[i].cu, rs[i].pad, b, rs[i].mult, dt, host);
        st = fattn__cudnn_dev_upload(a, host, (size_t)(b + 1) * esz, &d->p[rs[i].role]);
        if (st != FATTN_OK)
            goto out;
    }
out:
    free(host);
    return st;
}

/* A page table's first b rows ([>= b, pages_per_seq]: InferenceParams keeps
 * max_batch_size) packed as the graph's [b, 1, pps, 1]. */
static fattn_status upload_page_table(dev_arena *a, const fattn_tensor *pt, int64_t b,
                                      void **out)
{
    int64_t pps = pt->shape[1];
    assert(pt->shape[0] >= b);
    size_t bytes;
    if (!fattn_bytes_of(b * pps, sizeof(int32_t), &bytes))
        return fattn_error(FATTN_E_OVERFLOW, "cuDNN engine: page table");
    int32_t *host = malloc(bytes ? bytes : 1);
    if (!host)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: page table");
    const int32_t *src = pt->data;
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < pps; j++)
            host[i * pps + j] = src[i * pt->strides[0] + j * pt->strides[1]];
    fattn_status st = fattn__cudnn_dev_upload(a, host, bytes, out);
    free(host);
    return st;
}

/* The inputs forward and backward share beyond Q, K, V: sink, ALiBi slopes,
 * per-batch lengths, page tables (the forward's only), dropout seed and offset. */
fattn_status fattn__cudnn_upload_common(dev_arena *a, const cg_fwd_desc *fd, const fattn_geom *geom,
                                 const int64_t rng[2], dev_bindings *d)
{
    fattn_status st = FATTN_OK;
    size_t hbytes = (size_t)geom->h * sizeof(float), bbytes = (size_t)geom->b * sizeof(int32_t);
    if (fd->sink && (st = fattn__cudnn_dev_upload(a, geom->sink, hbytes, &d->p[CG_ROLE_SINK])) != FATTN_OK)
        return st;
    if (fd->alibi && (st = fattn__cudnn_dev_upload(a, geom->alibi_slopes, hbytes, &d->p[CG_ROLE_ALIBI])) != FATTN_OK)
        return st;
    if (fd->padding && ((st = fattn__cudnn_dev_upload(a, geom->len_q, bbytes, &d->p[CG_ROLE_SEQ_Q])) != FATTN_OK ||
                        (st = fattn__cudnn_dev_upload(a, geom->len_kv, bbytes, &d->p[CG_ROLE_SEQ_KV])) != FATTN_OK))
        return st;
    if (fd->paged &&
        ((st = upload_page_table(a, &geom->pt_k, geom->b, &d->p[CG_ROLE_PT_K])) != FATTN_OK ||
         (st = upload_page_table(a, &geom->pt_v, geom->b, &d->p[CG_ROLE_PT_V])) != FATTN_OK))
        return st;
    if (fd->dropout > 0.0f) {
        if ((st = fattn__cudnn_dev_upload(a, rng, 2 * sizeof(int64_t), &d->p[CG_ROLE_SEED])) != FATTN_OK)
            return st;
        d->p[CG_ROLE_OFFSET] = (char *)d->p[CG_ROLE_SEED] + sizeof(int64_t);
    }
    return FATTN_OK;
}

/* Device copy of a host tensor's view; NULL-safe for empty tensors. */
fattn_status fattn__cudnn_upload_view(dev_arena *a, const fattn_tensor *t, void **out)
{
    return fattn__cudnn_dev_upload(a, t->data, fattn__cudnn_view_bytes(t), out);
}

/* Copy rows [0, len) of every head of a gradient back (defined regions). */
void fattn__cudnn_copy_rows(fattn_tensor *dst, const char *dev_copy, fattn_qkv_format fmt,
                     const int32_t *off, const int32_t *len, int64_t b, int64_t heads,
                     int64_t width)
{
    size_t esz = fattn_dtype_size(dst->dtype);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i = 0; i < len[bi]; i++)
            for (int64_t n = 0; n < heads; n++) {
                int64_t o = fattn__geom_row_offset(dst, fmt, off, bi, i, n);
                memcpy((char *)dst->data + (size_t)o * esz, dev_copy + (size_t)o * esz,
                       (size_t)width * esz);
            }
}

fattn_status fattn__cudnn_download(const cudnn_api *api, void *host, const void *dev, size_t bytes)
{
    cudaError_t ce = api->cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
    return ce == cudaSuccess ? FATTN_OK : fattn__cudnn_cuda_fail(api, ce, "cudaMemcpy D2H");
}

fattn_status fattn__cudnn_call_location(const cudnn_tensor_use *use, int n, const char *who,
                                 bool *device)
{
    assert(n > 0 && !fattn_tensor_is_empty(use[0].t));
    *device = use[0].t->device == FATTN_DEVICE_CUDA;
    for (int i = 0; i < n; i++) {
        const fattn_tensor *t = use[i].t;
        if (fattn_tensor_is_empty(t))
            continue;
        if (t->device != FATTN_DEVICE_HOST && t->device != FATTN_DEVICE_CUDA)
            return fattn_error(FATTN_E_INVALID_ARG, "%s: %s has unknown device %d", who,
                               use[i].name, (int)t->device);
        if ((t->device == FATTN_DEVICE_CUDA) != *device)
            return fattn_error(FATTN_E_INVALID_ARG, "%s: %s is a %s tensor but %s is a %s "
                               "tensor: a call's tensors are all host or all device tensors "
                               "(cu_seqlens, rng_state and softmax_offset always host)", who,
                               use[i].name, *device ? "host" : "device", use[0].name,
                               *device ? "device" : "host");
        /* cuDNN is told every tensor is 16-byte aligned (lower.c); the host
         * path's arena buffers are, a caller's device pointer must be. */
        if (*device && (uintptr_t)t->data % 16 != 0)
            return fattn_error(FATTN_E_LAYOUT, "%s: device tensor %s at %p is not 16-byte "
                               "aligned", who, use[i].name, t->data);
        if (*device && use[i].contiguous && !fattn_tensor_is_contiguous(t))
            return fattn_error(FATTN_E_LAYOUT, "%s: device tensor %s must be contiguous (the "
                               "graph binds it as it is)", who, use[i].name);
    }
    return FATTN_OK;
}

fattn_status fattn__cudnn_device_call_supported(const cg_fwd_desc *fd, const char *who)
{
    /* cuDNN's kernels may write rows past a sequence's length; the host
     * path copies back the defined rows only (engine.h), a device call has
     * no such step, so it runs only where every row is defined. */
    if (fd->padding || fd->ragged_q || fd->ragged_kv)
        return fattn_error(FATTN_E_UNSUPPORTED, "%s: device tensors with a padding mask or a "
                           "THD layout are not supported (the engine could not keep rows past "
                           "a sequence's length untouched); pass host tensors", who);
    return FATTN_OK;
}

fattn_status fattn__cudnn_bind_input(dev_arena *a, const fattn_tensor *t, bool device, void **out)
{
    if (device) {
        *out = t->data;
        return FATTN_OK;
    }
    return fattn__cudnn_upload_view(a, t, out);
}

fattn_status fattn__cudnn_bind_output(dev_arena *a, const fattn_tensor *t, bool device, size_t bytes,
                               void **out)
{
    if (device) {
        *out = t->data;
        return FATTN_OK;
    }
    return fattn__cudnn_dev_alloc(a, bytes, out);
}
