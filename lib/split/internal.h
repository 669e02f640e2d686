/* Internal to lib/split: what split.c (TE's three helpers and the thin
 * wrapper) and args.c (names, args structs, required fields, slots) share.
 * Nothing outside lib/split includes it; lib/legacy keeps its own. */
#ifndef FATTN_SPLIT_INTERNAL_H
#define FATTN_SPLIT_INTERNAL_H

#include "fattn/split.h"

/* Members of the groups of four: fp8[] and f16[] of
 * fattn_split_fill_to_save are (q, k, v, out), cu[] the four cu_seqlens,
 * aux[] the fixed aux slots as forward_impl reads the engine's list. */
enum sp_qkvo { SP_QKVO_Q, SP_QKVO_K, SP_QKVO_V, SP_QKVO_OUT, SP_QKVO_N };
enum sp_cu { SP_CU_Q, SP_CU_KV, SP_CU_Q_PADDED, SP_CU_KV_PADDED, SP_CU_N };
enum sp_aux { SP_AUX_STATS, SP_AUX_RNG_STATE, SP_AUX_BIAS, SP_AUX_SOFTMAX_OFFSET, SP_AUX_N };

/* The fattn_bwd_args field that holds slot s (FATTN_SPLIT_SLOTS' second
 * column); s must be a slot. */
fattn_tensor *fattn_split_bwd_slot(fattn_bwd_args *a, fattn_split_slot s);

/* The required fields of each args struct: FATTN_E_MISSING_FIELD naming
 * the first one unset (fattn/split.h's unset encodings). */
fattn_status fattn_split_check_fwd_args(const fattn_fwd_args *a);
fattn_status fattn_split_check_bwd_args(const fattn_bwd_args *a);

#endif /* FATTN_SPLIT_INTERNAL_H */
