/* Counter-based random numbers: Random123's Philox4x32-10 plus fattn's
 * element-to-counter mapping (see fattn/philox.h). The generator is used
 * through Random123's header only; nothing here re-implements it. */
#include <math.h>

#include <Random123/philox.h>

#include "fattn/philox.h"

void fattn_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                         uint32_t out[4])
{
    philox4x32_ctr_t c = {{ctr[0], ctr[1], ctr[2], ctr[3]}};
    philox4x32_key_t k = {{key[0], key[1]}};
    philox4x32_ctr_t r = philox4x32_R(10, c, k);
    for (int i = 0; i < 4; i++)
        out[i] = r.v[i];
}

/* The block holding elements 4*block .. 4*block+3 of `stream`. */
static void block_for(uint64_t seed, uint64_t stream, uint64_t block,
                      uint32_t out[4])
{
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32),
                             (uint32_t)stream, (uint32_t)(stream >> 32)};
    fattn_philox4x32_10(ctr, key, out);
}

uint32_t fattn_philox_u32(uint64_t seed, uint64_t stream, uint64_t n)
{
    uint32_t w[4];
    block_for(seed, stream, n / 4, w);
    return w[n % 4];
}

void fattn_philox_fill_u32(uint64_t seed, uint64_t stream, uint64_t first,
                           uint64_t count, uint32_t *out)
{
    uint64_t done = 0;
    while (done < count) {
        uint64_t n = first + done;
        uint32_t w[4];
        block_for(seed, stream, n / 4, w);
        for (unsigned j = (unsigned)(n % 4); j < 4 && done < count; j++)
            out[done++] = w[j];
    }
}

float fattn_philox_to_sym_unit(uint32_t word)
{
    /* Two's-complement reinterpretation without the implementation-defined
     * unsigned -> signed conversion. */
    int32_t s = word < 0x80000000u ? (int32_t)word
                                   : (int32_t)(word - 0x80000000u) - INT32_MAX - 1;
    /* int -> float rounds to nearest even (24 bits); the scale is exact. */
    return (float)s * 0x1p-31f;
}

uint32_t fattn_dropout_threshold(float p)
{
    double d = (double)p * 4294967296.0; /* exact: p has 24 bits */
    if (!(d > 0.0)) /* p <= 0 (and NaN) drop nothing */
        return 0;
    d = round(d);
    if (d >= 4294967295.0)
        return UINT32_MAX;
    return (uint32_t)d;
}

void fattn_philox_fill_tensor(fattn_tensor *t, uint64_t seed, uint64_t stream, float scale)
{
    int64_t n = fattn_tensor_numel(t);
    int64_t idx[FATTN_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; e++) {
        float u = fattn_philox_to_sym_unit(fattn_philox_u32(seed, stream, (uint64_t)e));
        fattn_store_f32(t->data, t->dtype, fattn_tensor_offset(t, idx), scale * u);
        for (int a = t->ndim - 1; a >= 0; a--) {
            if (++idx[a] < t->shape[a])
                break;
            idx[a] = 0;
        }
    }
}
