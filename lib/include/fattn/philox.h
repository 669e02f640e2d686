/* fattn/philox.h — counter-based random numbers (Philox4x32-10).
 *
 * The generator itself is Random123's philox4x32 with 10 rounds (Debian's
 * librandom123-dev, header-only); this module only fixes how fattn maps
 * elements to counters, so that every engine and front end sees the same
 * bits.
 *
 * Element-to-counter mapping (documented in docs/numerics.md):
 *   key     = { lo32(seed), hi32(seed) }
 *   counter = { lo32(n / 4), hi32(n / 4), lo32(stream), hi32(stream) }
 *   word    = output[n % 4]
 * where n is the element's linear index in its stream and `stream` names the
 * consumer: an input tensor's stream id (fattn_philox_stream_*), or, for CPU
 * dropout, the rng_state offset.
 */
#ifndef FATTN_PHILOX_H
#define FATTN_PHILOX_H

#include "fattn/api.h"

#include <stdint.h>

#include "fattn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One Philox4x32-10 block: out = philox(ctr, key). */
FATTN_API void fattn_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                   uint32_t out[4]);

/* The 32-bit word for element n of `stream` under `seed` (mapping above). */
FATTN_API uint32_t fattn_philox_u32(uint64_t seed, uint64_t stream, uint64_t n);

/* Fill out[0..count) with the words for elements first .. first+count-1,
 * one Philox block per four elements. */
FATTN_API void fattn_philox_fill_u32(uint64_t seed, uint64_t stream, uint64_t first,
                                     uint64_t count, uint32_t *out);

/* A word mapped to [-1, 1]: (float)(int32)word * 2^-31. The int-to-float
 * conversion rounds to nearest even (24 significant bits), so the result is
 * the float nearest to int32(word) * 2^-31: exact only for |int32| < 2^24,
 * and the words 0x7fffffc0 .. 0x7fffffff give exactly 1.0f. */
FATTN_API float fattn_philox_to_sym_unit(uint32_t word);

/* Fill a float view (any strides) with scale * fattn_philox_to_sym_unit of
 * stream `stream` under `seed`: element e of the logical shape in C order
 * takes word e, rounded to the view's dtype. */
FATTN_API void fattn_philox_fill_tensor(fattn_tensor *t, uint64_t seed, uint64_t stream, float scale);

/* Dropout keep decision for probability p of dropping: keep iff
 * word >= fattn_dropout_threshold(p), threshold = round(p * 2^32) clamped
 * to [0, 2^32 - 1]. */
FATTN_API uint32_t fattn_dropout_threshold(float p);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_PHILOX_H */
