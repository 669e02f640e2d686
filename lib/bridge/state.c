/* The C++ of TE's that carries state between calls, for the bridge's
 * tex stand-ins (fattn/bridge.h): the delayed-scaling recipe update and
 * copy_to_kv_cache, through the library's own (fattn/fp8.h,
 * fattn/kv_cache.h) with arguments ctypes passes as they are. */
#include "fattn/bridge.h"
#include "fattn/fp8.h"
#include "fattn/kv_cache.h"

fattn_status fattn_bridge_fp8_delayed_update(float *amax_history, float *scale, int64_t len,
                                             int64_t n, const float *reduced, int algo,
                                             int dtype, int margin)
{
    fattn_fp8_recipe_state st = {len, n, scale, amax_history};
    return fattn_fp8_delayed_update(&st, reduced, (fattn_fp8_amax_algo)algo, (fattn_dtype)dtype,
                                    margin);
}

fattn_status fattn_bridge_kv_cache_copy(const fattn_tensor *new_k, const fattn_tensor *new_v,
                                        fattn_tensor *k_cache, fattn_tensor *v_cache,
                                        const int32_t *table, int64_t table_rows,
                                        const int32_t *cu_new, const int32_t *cu_cached,
                                        int format, int64_t b, int64_t max_ctx_len,
                                        int64_t max_seq_len, int64_t max_pages_per_seq,
                                        int reindex)
{
    fattn_kv_cache_copy_args a = {
        .new_k = new_k, .new_v = new_v, .k_cache = k_cache, .v_cache = v_cache,
        .table = table, .table_rows = table_rows, .cu_new_lens = cu_new,
        .cu_cached_lens = cu_cached, .format = (fattn_qkv_format)format, .b = b,
        .max_ctx_len = max_ctx_len, .max_seq_len = max_seq_len,
        .max_pages_per_seq = max_pages_per_seq, .reindex = reindex != 0};
    return fattn_kv_cache_copy(&a);
}
