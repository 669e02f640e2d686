/* fattn/dtype.h — element types and exact conversions.
 *
 * The 16- and 8-bit float formats are stored in one-member structs so that
 * arithmetic on raw bits is a compile error: `fattn_bf16 a, b; a + b;` does
 * not build. Convert with the functions below.
 *
 * All conversions to a narrower format round to nearest, ties to even, and
 * follow each format's definition exactly:
 *   float16   IEEE binary16: overflow -> inf, subnormals kept, NaN stays NaN
 *             (quiet, sign and top payload bits kept).
 *   bfloat16  top half of binary32: overflow -> inf, NaN stays NaN (quiet).
 *   e4m3fn    1-4-3, bias 7, no inf; 0x7f/0xff are NaN; max finite 448.
 *             Values that round past 448 (and +-inf) become NaN, as the OCP
 *             spec's non-saturating conversion and PyTorch's .to() do.
 *   e5m2      1-5-2, bias 15, IEEE-like: overflow -> inf, NaN stays NaN.
 * Widening to float32 is exact for every bit pattern.
 */
#ifndef FATTN_DTYPE_H
#define FATTN_DTYPE_H

#include "fattn/api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fattn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fattn_dtype {
    FATTN_DTYPE_INVALID = 0,
    FATTN_DTYPE_FLOAT32,
    FATTN_DTYPE_FLOAT16,
    FATTN_DTYPE_BFLOAT16,
    FATTN_DTYPE_FLOAT8_E4M3FN,
    FATTN_DTYPE_FLOAT8_E5M2,
    FATTN_DTYPE_INT32,
    FATTN_DTYPE_INT64,
    FATTN_DTYPE_UINT8,
    FATTN_DTYPE_COUNT
} fattn_dtype;

typedef struct fattn_f16 { uint16_t bits; } fattn_f16;
typedef struct fattn_bf16 { uint16_t bits; } fattn_bf16;
typedef struct fattn_e4m3 { uint8_t bits; } fattn_e4m3;
typedef struct fattn_e5m2 { uint8_t bits; } fattn_e5m2;

/* The contract's name ("float32", "bfloat16", "float8_e4m3fn", ...). */
FATTN_API const char *fattn_dtype_name(fattn_dtype t);
/* Inverse of fattn_dtype_name; FATTN_E_PARSE for anything else. */
FATTN_API fattn_status fattn_dtype_parse(const char *name, fattn_dtype *out);
/* Bytes per element; 0 for FATTN_DTYPE_INVALID. */
FATTN_API size_t fattn_dtype_size(fattn_dtype t);
/* float32, float16, bfloat16 and the two fp8 formats. */
FATTN_API bool fattn_dtype_is_float(fattn_dtype t);

FATTN_API float fattn_f16_to_f32(fattn_f16 h);
FATTN_API fattn_f16 fattn_f32_to_f16(float f);
FATTN_API float fattn_bf16_to_f32(fattn_bf16 h);
FATTN_API fattn_bf16 fattn_f32_to_bf16(float f);
FATTN_API float fattn_e4m3_to_f32(fattn_e4m3 h);
FATTN_API fattn_e4m3 fattn_f32_to_e4m3(float f);
FATTN_API float fattn_e5m2_to_f32(fattn_e5m2 h);
FATTN_API fattn_e5m2 fattn_f32_to_e5m2(float f);

/* Bit casts between float32 and its representation. */
FATTN_API uint32_t fattn_f32_bits(float f);
FATTN_API float fattn_f32_from_bits(uint32_t u);

/* Element `i` of a buffer of type t, widened to float (floats only). */
FATTN_API float fattn_load_f32(const void *base, fattn_dtype t, int64_t i);
/* Round `v` to type t and store it as element `i` (floats only). */
FATTN_API void fattn_store_f32(void *base, fattn_dtype t, int64_t i, float v);
/* Round `v` to type t and widen again: the value t can hold nearest to v. */
FATTN_API float fattn_round_f32(fattn_dtype t, float v);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_DTYPE_H */
