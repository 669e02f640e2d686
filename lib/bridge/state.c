/* The C++ of TE's that carries recipe state between calls, for the
 * bridge's tex stand-in (fattn/bridge.h): the delayed-scaling recipe
 * update, through the library's own (fattn/fp8.h) with arguments ctypes
 * passes as they are. (tex.copy_to_kv_cache calls fattn_kv_cache_copy
 * directly: tools/te/fattn_te/bridge_kv.py.) */
#include "fattn/bridge.h"
#include "fattn/fp8.h"

fattn_status fattn_bridge_fp8_delayed_update(float *amax_history, float *scale, int64_t len,
                                             int64_t n, const float *reduced, int algo,
                                             int dtype, int margin)
{
    fattn_fp8_recipe_state st = {len, n, scale, amax_history};
    return fattn_fp8_delayed_update(&st, reduced, (fattn_fp8_amax_algo)algo, (fattn_dtype)dtype,
                                    margin);
}
