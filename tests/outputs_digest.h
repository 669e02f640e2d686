/* FNV-1a over every byte of a case's outputs (whole buffers, poison
 * included): equal digests mean equal output bits, for the bit-identity
 * tests. Not a file digest (run files use XXH3-128). */
#ifndef FATTN_TEST_OUTPUTS_DIGEST_H
#define FATTN_TEST_OUTPUTS_DIGEST_H

#include <stdint.h>

#include "cases.h"

static inline uint64_t fnv1a_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static inline uint64_t fnv1a_tensor(uint64_t h, const fattn_tensor *t)
{
    if (fattn_tensor_is_empty(t))
        return fnv1a_bytes(h, "-", 1);
    return fnv1a_bytes(h, t->data, (size_t)fattn_tensor_numel(t) * fattn_dtype_size(t->dtype));
}

/* Outputs: storage-backed tensors are hashed whole (their allocation). */
static inline uint64_t tcase_outputs_digest(const tcase_buffers *b)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    const fattn_tensor *outs[] = {&b->o, &b->stats, &b->max, &b->dq_storage, &b->dk_storage,
                                  &b->dv_storage, &b->d_bias, &b->d_softmax_offset};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        h = fnv1a_tensor(h, outs[i]);
    return h;
}

#endif
