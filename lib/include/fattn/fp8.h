/* fattn/fp8.h — FP8 quantisation as TE's quantizers and cuDNN's FP8 SDPA do it.
 *
 * fattn/dtype.h's fattn_f32_to_e4m3 / _e5m2 are the non-saturating casts
 * (PyTorch's .to(torch.float8_*), the OCP spec's non-saturating mode). TE's
 * quantizers and cuDNN's FP8 graphs convert with saturation instead:
 * TE's fp8e4m3/fp8e5m2 are CUDA's __nv_fp8_e4m3/__nv_fp8_e5m2, whose float
 * constructors call __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) (CUDA 12
 * cuda_fp8.hpp), and on sm_89/sm_90 every f32 -> fp8 conversion is the PTX
 * instruction cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32, where .satfinite is
 * mandatory. Its rules, which the functions below follow:
 *   - round to nearest, ties to even, subnormals kept;
 *   - a finite value whose magnitude rounds past the largest finite one, and
 *     +-inf, become +-max (448 for e4m3fn, 57344 for e5m2);
 *   - NaN becomes 0x7f, the canonical NaN of both formats (sign dropped).
 * Decoding is exact (fattn_e4m3_to_f32 / fattn_e5m2_to_f32).
 */
#ifndef FATTN_FP8_H
#define FATTN_FP8_H

#include <stdbool.h>
#include <stdint.h>

#include "fattn/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

fattn_e4m3 fattn_f32_to_e4m3_sat(float f);
fattn_e5m2 fattn_f32_to_e5m2_sat(float f);

/* FATTN_DTYPE_FLOAT8_E4M3FN or FATTN_DTYPE_FLOAT8_E5M2. */
bool fattn_dtype_is_fp8(fattn_dtype t);
/* Largest finite value of an FP8 dtype (448, 57344); 0 for any other. */
float fattn_fp8_max(fattn_dtype t);
/* The saturating conversion of v to FP8 dtype t (t must be FP8). */
uint8_t fattn_fp8_encode(fattn_dtype t, float v);
/* Exact widening of code c of FP8 dtype t. */
float fattn_fp8_decode(fattn_dtype t, uint8_t c);
/* Quantise as a TE quantizer does: encode(v * scale). */
uint8_t fattn_fp8_quantize(fattn_dtype t, float v, float scale);
/* The value a quantised v stands for: decode(encode(v * scale)) * scale_inv,
 * the two products rounded to float32 each. */
float fattn_fp8_fake_quant(fattn_dtype t, float v, float scale, float scale_inv);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_FP8_H */
