/* fattn/tensor.h — strided views of tensors.
 *
 * A fattn_tensor is a view: it never owns memory unless it came from
 * fattn_tensor_alloc. Shape and strides are in elements (not bytes), up to
 * FATTN_MAX_DIMS dims, C order meaning the last dim varies fastest. Packed QKV
 * layouts are expressed as three views into one buffer with interleaving
 * strides; nothing in fattn copies to make a layout contiguous.
 *
 * An empty slot (TE's None) is a tensor whose data is NULL and ndim is 0:
 * fattn_tensor_empty(). Its absence is data; it is never a zero-size tensor.
 */
#ifndef FATTN_TENSOR_H
#define FATTN_TENSOR_H

#include "fattn/api.h"

#include <stdbool.h>
#include <stdint.h>

#include "fattn/dtype.h"
#include "fattn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FATTN_MAX_DIMS 5

typedef enum fattn_device {
    FATTN_DEVICE_HOST = 0,
    FATTN_DEVICE_CUDA = 1
} fattn_device;

typedef struct fattn_tensor {
    void *data;
    fattn_dtype dtype;
    fattn_device device;
    int ndim;
    int64_t shape[FATTN_MAX_DIMS];
    int64_t strides[FATTN_MAX_DIMS];
} fattn_tensor;

/* The empty slot. */
FATTN_API fattn_tensor fattn_tensor_empty(void);
FATTN_API bool fattn_tensor_is_empty(const fattn_tensor *t);

/* A contiguous (C-order) host view of `data` with the given shape. */
FATTN_API fattn_tensor fattn_tensor_view(void *data, fattn_dtype dtype, int ndim,
                                         const int64_t *shape);

/* Allocate a contiguous host tensor (64-byte aligned). Free with
 * fattn_tensor_free, which also resets *t to the empty slot. Contents are
 * uninitialised. FATTN_E_OVERFLOW if the byte size does not fit. */
FATTN_API fattn_status fattn_tensor_alloc(fattn_tensor *t, fattn_dtype dtype, int ndim,
                                          const int64_t *shape);
FATTN_API void fattn_tensor_free(fattn_tensor *t);

/* One contiguous buffer holding `npack` tensors of logical shape `shape`
 * (ndim dims), interleaved by a pack dim of size npack inserted at dim `at`
 * ("3hd"/"2hd" packing: at = ndim - 2; "h3d"/"h2d": at = ndim - 1), as
 * packed QKV layouts lay them out; views[m] is the m-th tensor. *storage
 * owns the memory (fattn_tensor_free it). npack = 1: a plain tensor. */
FATTN_API fattn_status fattn_tensor_alloc_packed(fattn_tensor *storage, fattn_dtype dtype, int ndim,
                                                 const int64_t *shape, int npack, int at,
                                                 fattn_tensor *views);

/* Product of the dims (1 for ndim 0 non-empty; 0 for the empty slot). */
FATTN_API int64_t fattn_tensor_numel(const fattn_tensor *t);
/* Element offset of a multi-index (no bounds check). */
FATTN_API int64_t fattn_tensor_offset(const fattn_tensor *t, const int64_t *idx);
FATTN_API bool fattn_tensor_is_contiguous(const fattn_tensor *t);
/* Same data pointer, dtype, ndim, shape and strides: the identity rule that
 * saved-tensor dedup uses. */
FATTN_API bool fattn_tensor_same(const fattn_tensor *a, const fattn_tensor *b);

/* Copy the logical tensor in C order of its shape into `dst` (numel *
 * dtype size bytes), gathered through the strides. */
FATTN_API void fattn_tensor_gather(const fattn_tensor *t, void *dst);
/* Fill every element of the view with the byte pattern of `pattern`
 * (dtype-sized, little-endian low bytes used). */
FATTN_API void fattn_tensor_fill_bits(fattn_tensor *t, uint64_t pattern);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_TENSOR_H */
