/* fattn/kv_cache.h — appending new tokens to a KV cache as TE's
 * copy_to_kv_cache does.
 *
 * TE's InferenceParams.step (attention/inference.py) hands the step's new
 * K and V to tex.copy_to_kv_cache (pytorch/csrc/extensions/attention.cpp:
 * 1088-1111), i.e. nvte_copy_to_kv_cache (common/fused_attn/kv_cache.cu,
 * TE release_v2.19, which d0067d0 leaves unchanged): an optional reindex of
 * a non-paged cache, then one copy per new token. fattn runs the same on
 * host tensors, element bytes as they are (the dtype is not interpreted).
 *
 * The caches are bshd, contiguous: non-paged [max_batch, max_seq_len, hg,
 * d], paged [num_pages, page_size, hg, d] with page_size = max_seq_len /
 * max_pages_per_seq. The new tokens are contiguous in `format`: bshd
 * [b, max_ctx_len, hg, d], sbhd [max_ctx_len, b, hg, d], thd [t, hg, d].
 * cu_new_lens and cu_cached_lens (b + 1 entries, the step's new lengths and
 * the cached lengths after the step) are InferenceParams' cu_seqlens_q and
 * cu_seqlens_kv.
 *
 * `table`, as TE passes it: for a paged cache the cache manager's page
 * table (rows of max_pages_per_seq entries, at least b of them); for a
 * non-paged cache NonPagedKVCacheManager's batch_indices (max_batch
 * entries) with max_pages_per_seq 1, and `reindex` its need_reindex
 * (inference.py: it is passed where the kernel takes is_non_paged, so a
 * non-paged step that adds or drops no sequence runs the paged addressing
 * over batch_indices, which is the identity then).
 *
 * With `reindex` (reindex_kv_cache_kernel): actual_b is one past the last
 * place batch_indices descends among its first b entries (b when it never
 * does); for each batch entry bi < actual_b, in order, when batch_indices[0]
 * != 0 or batch_indices[bi] - batch_indices[0] != bi, its first cached -
 * new tokens (the length before the step) move from cache row
 * batch_indices[bi] to row bi. Then (copy_to_kv_cache_kernel), for each
 * bi < b and each new token i < new_len: the token at position pos =
 * cached_len - new_len + i goes to page bi (reindex) or table[bi][pos /
 * page_size], row pos % page_size.
 *
 * Unlike TE, every index is checked before anything is written:
 * FATTN_E_INVALID_ARG names the first that would leave a tensor (TE would
 * write out of bounds) or a shape that does not match; nothing is written
 * then.
 */
#ifndef FATTN_KV_CACHE_H
#define FATTN_KV_CACHE_H

#include "fattn/api.h"

#include <stdbool.h>
#include <stdint.h>

#include "fattn/status.h"
#include "fattn/te.h"
#include "fattn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fattn_kv_cache_copy_args {
    const fattn_tensor *new_k, *new_v;   /* the step's tokens in `format` */
    fattn_tensor *k_cache, *v_cache;     /* bshd, contiguous */
    const int32_t *table;                /* page table rows, or batch_indices */
    int64_t table_rows;                  /* rows of `table` (entries, non-paged) */
    const int32_t *cu_new_lens, *cu_cached_lens; /* b + 1 each */
    fattn_qkv_format format;             /* BSHD, SBHD or THD */
    int64_t b, max_ctx_len, max_seq_len, max_pages_per_seq;
    bool reindex;                        /* the kernel's is_non_paged */
} fattn_kv_cache_copy_args;

FATTN_API fattn_status fattn_kv_cache_copy(const fattn_kv_cache_copy_args *a);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_KV_CACHE_H */
