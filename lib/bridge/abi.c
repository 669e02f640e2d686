/* The layout of the engine API's structs, for callers that mirror them
 * outside C (tools/te/fattn_te/bridge.py through ctypes): they compare
 * their own sizes and offsets with these before the first call, so that a
 * change to fattn/engine.h fails loudly instead of passing garbage. */
#include <stddef.h>
#include <stdint.h>

#include "fattn/engine.h"

#define FIELD(type, member) (int64_t) offsetof(type, member)

/* One row per entry, in a fixed order the caller knows; returns how many
 * there are, writing at most n of them to out. */
int fattn_bridge_abi(int64_t *out, int n);

int fattn_bridge_abi(int64_t *out, int n)
{
    const int64_t rows[] = {
        (int64_t)sizeof(fattn_tensor),
        FIELD(fattn_tensor, dtype),
        FIELD(fattn_tensor, device),
        FIELD(fattn_tensor, shape),
        FIELD(fattn_tensor, strides),
        (int64_t)sizeof(fattn_aux_pack),
        (int64_t)sizeof(fattn_fwd_params),
        FIELD(fattn_fwd_params, aux),
        FIELD(fattn_fwd_params, rng_state),
        FIELD(fattn_fwd_params, max_seqlen_q),
        FIELD(fattn_fwd_params, attn_scale),
        FIELD(fattn_fwd_params, qkv_layout),
        FIELD(fattn_fwd_params, window_size_left),
        FIELD(fattn_fwd_params, bottom_right_diagonal),
        (int64_t)sizeof(fattn_bwd_params),
        FIELD(fattn_bwd_params, aux),
        FIELD(fattn_bwd_params, dq),
        FIELD(fattn_bwd_params, max_seqlen_q),
        FIELD(fattn_bwd_params, qkv_layout),
        FIELD(fattn_bwd_params, window_size_left),
        FIELD(fattn_bwd_params, deterministic),
        (int64_t)sizeof(fattn_engine_options),
        (int64_t)FATTN_CPU_MATH_VERSION,
    };
    int count = (int)(sizeof rows / sizeof rows[0]);
    for (int i = 0; out && i < n && i < count; i++)
        out[i] = rows[i];
    return count;
}
