/* Strided tensor views. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "fattn/tensor.h"
#include "fattn_config.h"
#if FATTN_TESTING
#include "fattn/testing.h"
#endif

fattn_tensor fattn_tensor_empty(void)
{
    fattn_tensor t;
    memset(&t, 0, sizeof t);
    return t;
}

bool fattn_tensor_is_empty(const fattn_tensor *t) { return t->data == NULL; }

fattn_tensor fattn_tensor_view(void *data, fattn_dtype dtype, int ndim,
                               const int64_t *shape)
{
    fattn_tensor t = fattn_tensor_empty();
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.strides[i] = stride;
        stride *= shape[i];
    }
    return t;
}

fattn_status fattn_tensor_alloc(fattn_tensor *t, fattn_dtype dtype, int ndim,
                                const int64_t *shape)
{
    if (ndim < 0 || ndim > FATTN_MAX_DIMS)
        return fattn_error(FATTN_E_SHAPE, "tensor rank %d outside 0..%d", ndim,
                           FATTN_MAX_DIMS);
    size_t esz = fattn_dtype_size(dtype);
    if (esz == 0)
        return fattn_error(FATTN_E_DTYPE, "cannot allocate dtype %d", (int)dtype);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return fattn_error(FATTN_E_SHAPE, "negative dim %d: %lld", i,
                               (long long)shape[i]);
        if (!fattn_mul_i64(n, shape[i], &n))
            return fattn_error(FATTN_E_OVERFLOW, "tensor element count overflows");
    }
    size_t bytes;
    /* 63 spare: the rounding up below must not wrap either. */
    if (!fattn_bytes_of(n, esz, &bytes) || bytes > SIZE_MAX / 2 - 63)
        return fattn_error(FATTN_E_OVERFLOW, "tensor byte size overflows");
    /* aligned_alloc wants a multiple of the alignment; round up, never 0. */
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0)
        rounded = 64;
#if FATTN_TESTING
    /* fattn/testing.h: an injected failure, exactly where malloc's would be. */
    if (fattn_testing_alloc_fault())
        return fattn_error(FATTN_E_NOMEM, "cannot allocate %zu bytes "
                           "(injected by " FATTN_TESTING_FAIL_ALLOC_ENV ")", bytes);
#endif
    void *p = aligned_alloc(64, rounded);
    if (!p)
        return fattn_error(FATTN_E_NOMEM, "cannot allocate %zu bytes", bytes);
    *t = fattn_tensor_view(p, dtype, ndim, shape);
    return FATTN_OK;
}

fattn_status fattn_tensor_alloc_packed(fattn_tensor *storage, fattn_dtype dtype, int ndim,
                                       const int64_t *shape, int npack, int at,
                                       fattn_tensor *views)
{
    if (npack == 1) {
        fattn_status st = fattn_tensor_alloc(storage, dtype, ndim, shape);
        if (st != FATTN_OK)
            return st;
        views[0] = *storage;
        return FATTN_OK;
    }
    if (ndim < 1 || ndim + 1 > FATTN_MAX_DIMS || at < 0 || at > ndim || npack < 1)
        return fattn_error(FATTN_E_SHAPE, "packed tensor: rank %d, pack dim %d", ndim, at);
    int64_t sshape[FATTN_MAX_DIMS];
    for (int a = 0, s = 0; a < ndim + 1; a++)
        sshape[a] = a == at ? npack : shape[s++];
    fattn_status st = fattn_tensor_alloc(storage, dtype, ndim + 1, sshape);
    if (st != FATTN_OK)
        return st;
    size_t esz = fattn_dtype_size(dtype);
    for (int m = 0; m < npack; m++) {
        fattn_tensor v = fattn_tensor_empty();
        v.dtype = dtype;
        v.ndim = ndim;
        for (int a = 0, s = 0; a < ndim + 1; a++) {
            if (a == at)
                continue;
            v.shape[s] = storage->shape[a];
            v.strides[s] = storage->strides[a];
            s++;
        }
        v.data = (char *)storage->data + (size_t)m * (size_t)storage->strides[at] * esz;
        views[m] = v;
    }
    return FATTN_OK;
}

void fattn_tensor_free(fattn_tensor *t)
{
    if (!t)
        return;
    free(t->data);
    *t = fattn_tensor_empty();
}

int64_t fattn_tensor_numel(const fattn_tensor *t)
{
    if (fattn_tensor_is_empty(t))
        return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

int64_t fattn_tensor_offset(const fattn_tensor *t, const int64_t *idx)
{
    int64_t off = 0;
    for (int i = 0; i < t->ndim; i++)
        off += idx[i] * t->strides[i];
    return off;
}

bool fattn_tensor_is_contiguous(const fattn_tensor *t)
{
    int64_t stride = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != stride)
            return false;
        stride *= t->shape[i];
    }
    return true;
}

bool fattn_tensor_same(const fattn_tensor *a, const fattn_tensor *b)
{
    if (a->data == NULL || a->data != b->data || a->dtype != b->dtype ||
        a->ndim != b->ndim || a->device != b->device)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] || a->strides[i] != b->strides[i])
            return false;
    return true;
}

void fattn_tensor_gather(const fattn_tensor *t, void *dst)
{
    size_t esz = fattn_dtype_size(t->dtype);
    int64_t n = fattn_tensor_numel(t);
    int64_t idx[FATTN_MAX_DIMS] = {0};
    const char *src = t->data;
    char *out = dst;
    for (int64_t e = 0; e < n; e++) {
        memcpy(out + (size_t)e * esz, src + (size_t)fattn_tensor_offset(t, idx) * esz, esz);
        for (int i = t->ndim - 1; i >= 0; i--) {
            if (++idx[i] < t->shape[i])
                break;
            idx[i] = 0;
        }
    }
}

void fattn_tensor_fill_bits(fattn_tensor *t, uint64_t pattern)
{
    size_t esz = fattn_dtype_size(t->dtype);
    int64_t n = fattn_tensor_numel(t);
    int64_t idx[FATTN_MAX_DIMS] = {0};
    unsigned char bytes[8];
    for (int i = 0; i < 8; i++)
        bytes[i] = (unsigned char)(pattern >> (8 * i));
    char *base = t->data;
    for (int64_t e = 0; e < n; e++) {
        memcpy(base + (size_t)fattn_tensor_offset(t, idx) * esz, bytes, esz);
        for (int i = t->ndim - 1; i >= 0; i--) {
            if (++idx[i] < t->shape[i])
                break;
            idx[i] = 0;
        }
    }
}
