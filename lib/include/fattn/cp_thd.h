/* TE's THD helpers for context parallelism on the host: what
 * transformer_engine/common/fused_attn/context_parallel.cu (TE d0067d0;
 * release_v2.19 holds the same file) computes for the tex.thd_* entry
 * points (pytorch/csrc/extensions/attention.cpp:792-1049), so that TE's
 * own context-parallel Python runs THD on fattn's engines (fattn-te's
 * shim, tools/te/fattn_te/thd.py, allocates as attention.cpp does and
 * calls these).
 *
 * As TE's kernels do, every tensor is addressed as a C-contiguous array from
 * its data pointer and shape (strides are not read); cu_seqlens arrays are
 * int32 [batch + 1]. The checks TE makes with NVTE_CHECK are made here and
 * refused with FATTN_E_INVALID_ARG / FATTN_E_SHAPE naming TE's condition;
 * the 16-byte alignment checks too (TE's kernels move 16 bytes at a time).
 * Arithmetic is TE's, in float, with fattn's portable exp and log1p (the
 * CPU engine's rule: the same bits on every machine); a dtype add or
 * multiply is the float operation rounded to the dtype once. Dtypes of the
 * data tensors: float16, bfloat16, float32 (TE's NON_FP8ONLY switch); lse
 * float32. */
#ifndef FATTN_CP_THD_H
#define FATTN_CP_THD_H

#include <stdbool.h>
#include <stdint.h>

#include "fattn/api.h"
#include "fattn/status.h"
#include "fattn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* thd_get_partitioned_indices: the token indices of rank `rank` of
 * `world` under DualChunkSwap (each sequence's 2*world chunks, chunks rank
 * and 2*world-1-rank to the rank), out int32 [total_tokens / world].
 * Every cu_seqlens entry must be a multiple of 2*world (the kernel's
 * assert), total_tokens > 0 one too. */
FATTN_API fattn_status fattn_cp_thd_partitioned_indices(
    const fattn_tensor *cu_seqlens, int64_t total_tokens, int world, int rank, fattn_tensor *out);

/* thd_sequence_order_to_cp_rank_order (to_sequence_order false:
 * out[g] = inp[src(g)]) and thd_cp_rank_order_to_sequence_order (true:
 * out[src(g)] = inp[g]), g < total_tokens = inp's first dimension, src the
 * partition index of token g % (total/world) of rank g / (total/world). */
FATTN_API fattn_status fattn_cp_thd_reorder(
    const fattn_tensor *inp, const fattn_tensor *cu_seqlens, int world, bool to_sequence_order,
    fattn_tensor *out);

/* thd_read_half_tensor: the first (half_idx 0) or second (1) half of each
 * sequence of a [t,h,d] or [2,t,h,d] tensor into half ([t/2,h,d] or
 * [2,t/2,h,d]); cu_seqlens of the full sequences. */
FATTN_API fattn_status fattn_cp_thd_read_half(
    const fattn_tensor *tensor, const fattn_tensor *cu_seqlens, int half_idx, fattn_tensor *half);

/* thd_second_half_lse_correction (read false: lse's second halves become
 * max + log1p(exp(min - max)) of themselves and lse_per_step) and
 * thd_read_second_half_lse (read true: half_lse gets lse's second halves).
 * packed: lse [h, lse_seqlen] and half [h, n] with n >= lse_seqlen / 2;
 * else lse [b, h, s] and half [b, h, s / 2]. */
FATTN_API fattn_status fattn_cp_thd_second_half_lse(
    fattn_tensor *lse, fattn_tensor *half, const fattn_tensor *cu_seqlens, bool packed, bool read);

/* thd_out_correction: out[t,h,d] += out_per_step * exp(lse_per_step - lse)
 * per token and head (a zero out_per_step element adds zero), over the
 * whole of each sequence, or its second half only: TE 2.19.0's seven
 * arguments, old_lse NULL. With old_lse (lse's shape), TE 2.20.2's eight:
 * the online merge out = out * exp(old_lse - lse) + out_per_step *
 * exp(lse_per_step - lse), in float, rounded to the dtype once. 2.20.2's
 * C++ was not read (no stored source holds it): this form is modelled on
 * 2.20.2's own bshd/sbhd twin, flash_attn_fwd_incremental_out_correction
 * (context_parallel.py:180-210), and held to TE's result without CP. */
FATTN_API fattn_status fattn_cp_thd_out_correction(
    fattn_tensor *out, const fattn_tensor *out_per_step, const fattn_tensor *old_lse,
    const fattn_tensor *lse, const fattn_tensor *lse_per_step, const fattn_tensor *cu_seqlens,
    bool only_second_half, bool packed);

/* thd_grad_correction: each half of each sequence of grad ([t,h,d] or
 * [2,t,h,d]) gets grad_per_step's tokens added ("add"), copied ("copy") or
 * left alone ("none"): first/second one of (add|copy, none), (none,
 * add|copy) with a half-length grad_per_step, or (add, copy) / (copy, add)
 * with a full-length one. */
FATTN_API fattn_status fattn_cp_thd_grad_correction(
    fattn_tensor *grad, const fattn_tensor *grad_per_step, const fattn_tensor *cu_seqlens,
    const char *first_half, const char *second_half);

/* thd_copy_valid_tokens_from_per_split_to_rank_local: out[i] = inp[i] for
 * every token i that lies within its sequence's valid length (cu_seqlens)
 * from the sequence's padded start (cu_seqlens_padded); out and inp of
 * one shape and dtype. */
FATTN_API fattn_status fattn_cp_thd_copy_valid_tokens(
    fattn_tensor *out, const fattn_tensor *inp, const fattn_tensor *cu_seqlens_padded,
    const fattn_tensor *cu_seqlens);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_CP_THD_H */
