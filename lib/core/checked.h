/* Checked size arithmetic (internal to lib/ and the harness; not installed).
 *
 * Every size fattn computes from a tensor's shape, a recorded length or a
 * spec goes through these: a value a file or a caller makes up must turn
 * into an error, never into a wrapped size that allocates too little and is
 * then written past. Each returns false on overflow (or a negative operand
 * for the int64 forms) and leaves *out unspecified then; true with the exact
 * result otherwise.
 */
#ifndef FATTN_CORE_CHECKED_H
#define FATTN_CORE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* a * b in size_t. */
static inline bool fattn_mul_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* a + b in size_t. */
static inline bool fattn_add_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* a * b in int64_t, both >= 0 (counts and lengths). */
static inline bool fattn_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, out);
}

/* a + b in int64_t, both >= 0. */
static inline bool fattn_add_i64(int64_t a, int64_t b, int64_t *out)
{
    return a >= 0 && b >= 0 && !__builtin_add_overflow(a, b, out);
}

/* The bytes of n elements of esz bytes each, n >= 0, as a size_t. */
static inline bool fattn_bytes_of(int64_t n, size_t esz, size_t *out)
{
    if (n < 0 || (uint64_t)n > SIZE_MAX)
        return false;
    return fattn_mul_size((size_t)n, esz, out);
}

#endif /* FATTN_CORE_CHECKED_H */
