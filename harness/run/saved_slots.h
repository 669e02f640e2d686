/* The saved tensors: the 16 slots of TE's save order, as one table.
 *
 * Forward saves [q_fp8, k_fp8, v_fp8, out_fp8, q, k, v, out, cu_seqlens_q,
 * cu_seqlens_kv, cu_seqlens_q_padded, cu_seqlens_kv_padded] and then the
 * cuDNN aux pack. The legacy front end keeps the pack as TE's
 * variable-length list after the fixed entries (fattn_legacy_ctx
 * tensor_objects); the split front end gives it four fixed slots
 * (softmax_stats, rng_state, aux_bias, aux_softmax_offset). The run file
 * names every slot by role, the split's way (save_ctx/<role>,
 * forward/aux/<aux role>, forward/_impl/<role>).
 *
 * A row is X(role, pack):
 *   role  the dataset name = the fattn_bwd_args member = the split slot's
 *         name (fattn_split_slot_name)
 *   pack  FIXED: one of the entries before the aux pack; otherwise an aux
 *         slot, named by its member of fattn_aux_layout (fattn/engine.h):
 *         where and whether TE's pack holds it comes from
 *         fattn_aux_layout_bwd(), the library's one copy of that rule.
 *         Aux rows come last, in the pack's order.
 *
 * To add a slot: add its row here in TE's save order (FIXED rows before
 * the aux rows), the member of the same name to fattn_bwd_args, and the
 * slot to fattn_split_slot; the recording, loading and the legacy list
 * positions follow. A new aux slot needs its member in fattn_aux_layout.
 */
#ifndef FH_HARNESS_SAVED_SLOTS_H
#define FH_HARNESS_SAVED_SLOTS_H

#include "fattn/te.h"
#include "fattn/tensor.h"

#define FH_SAVED_SLOTS(X)                                                                      \
    X(q_fp8, FIXED)                                                                            \
    X(k_fp8, FIXED)                                                                            \
    X(v_fp8, FIXED)                                                                            \
    X(out_fp8, FIXED)                                                                          \
    X(q, FIXED)                                                                                \
    X(k, FIXED)                                                                                \
    X(v, FIXED)                                                                                \
    X(out, FIXED)                                                                              \
    X(cu_seqlens_q, FIXED)                                                                     \
    X(cu_seqlens_kv, FIXED)                                                                    \
    X(cu_seqlens_q_padded, FIXED)                                                              \
    X(cu_seqlens_kv_padded, FIXED)                                                             \
    X(softmax_stats, stats)                                                                    \
    X(rng_state, rng_state)                                                                    \
    X(aux_bias, bias)                                                                          \
    X(aux_softmax_offset, softmax_offset)

/* FH_SAVED_<role>: a slot's index in the save order. */
typedef enum fh_saved_slot {
#define FH_SAVED_ENUM_(role, pack) FH_SAVED_##role,
    FH_SAVED_SLOTS(FH_SAVED_ENUM_)
#undef FH_SAVED_ENUM_
    FH_SAVED_COUNT
} fh_saved_slot;

/* The first aux slot; the aux slots are [FH_SAVED_AUX_FIRST, COUNT). */
#define FH_SAVED_AUX_FIRST FH_SAVED_softmax_stats
#define FH_SAVED_NAUX (FH_SAVED_COUNT - FH_SAVED_AUX_FIRST)

/* A slot's role ("q_fp8", ..., "aux_softmax_offset"). */
const char *fh_saved_name(fh_saved_slot s);

/* The aux-pack slot arithmetic, in one place: for a case's bias type and
 * softmax type, index[i] is where aux slot i (FH_SAVED_AUX_FIRST + i)
 * sits in TE's pack, or -1 when the pack lacks it. Returns the pack's
 * length (2..4). */
int fh_saved_aux_layout(fattn_bias_type bias, fattn_softmax_type softmax,
                           int index[FH_SAVED_NAUX]);

/* TE's aux list (n entries) -> the aux slots (absent ones empty).
 * FATTN_E_INTERNAL if n is not the layout's length. */
fattn_status fh_saved_aux_from_list(const fattn_tensor *list, int n, fattn_bias_type bias,
                                       fattn_softmax_type softmax,
                                       fattn_tensor slots[FH_SAVED_NAUX]);

/* The aux slots -> TE's list: the non-empty slots in order (a recorded
 * save_ctx holds exactly the slots the pack had). Returns the length. */
int fh_saved_aux_to_list(const fattn_tensor slots[FH_SAVED_NAUX],
                            fattn_tensor list[FH_SAVED_NAUX]);

#endif /* FH_HARNESS_SAVED_SLOTS_H */
