/* fattn/bridge.h — entry points for callers that reach libfattn from
 * outside C (tools/te/fattn_te through ctypes).
 *
 * fattn_bridge_abi: the layout of the engine API's structs (sizes and
 * member offsets, one row per entry in a fixed order the caller knows), so
 * that a caller mirroring them compares before its first call and a change
 * to fattn/engine.h fails loudly instead of passing garbage. Returns how
 * many rows there are, writing at most n of them to out.
 *
 * The FP8 cast TE's C++ `quantize` (pytorch/csrc/extensions/cast.cpp)
 * launches for a Float8Quantizer or Float8CurrentScalingQuantizer, for the
 * bridge's tex.quantize: fattn_bridge_fp8_amax (max |x|, NaN passed over,
 * as nvte_compute_amax), fattn_bridge_fp8_quantize (each element scaled
 * and cast with saturation, fattn_fp8_quantize) and
 * fattn_bridge_fp8_cs_scale (a current-scaling call's scale from its amax).
 */
#ifndef FATTN_BRIDGE_H
#define FATTN_BRIDGE_H

#include "fattn/api.h"

#include <stdint.h>

#include "fattn/status.h"
#include "fattn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

FATTN_API int fattn_bridge_abi(int64_t *out, int n);
FATTN_API fattn_status fattn_bridge_fp8_amax(const fattn_tensor *src, float *amax);
FATTN_API fattn_status fattn_bridge_fp8_quantize(const fattn_tensor *src, fattn_tensor *dst,
                                                 float scale);
FATTN_API float fattn_bridge_fp8_cs_scale(float amax, int dtype, int pow2, float epsilon);

#ifdef __cplusplus
}
#endif

#endif
