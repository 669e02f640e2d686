/* Case inputs: every tensor a case feeds the front ends, made from its spec.
 *
 * Values come from Philox under the spec's `seed`, one stream per tensor
 * (docs/numerics.md "Random numbers"), element e of a tensor being element e
 * of its logical shape in C order:
 *   q (stream 1) 0.5 u, k (2) 0.5 u, v (3) u, attn_bias (4) u,
 *   softmax_offset (5) u for learnable and zeros for off-by-one (TE passes a
 *   zeros buffer), d_out (6) 0.1 u, with u = fattn_philox_to_sym_unit.
 * Sequence lengths: the spec's lists, else drawn per batch from streams 7
 * (q) and 8 (kv) as 1 + word % max; without a padding mask every length is
 * the maximum. pad_between_seqs puts 0..3 gap tokens (streams 9, 10) after
 * each THD sequence. Packed layouts (3hd, h3d, 2hd, h2d) are views into one
 * buffer, as TE's callers hand them over.
 *
 * FP8 inputs (case.h fp8_inputs): q, k, v are then those values quantised to
 * E4M3 Float8Tensors (TE's saturating cast of x * scale), each with a scale
 * of its own where the layout keeps it a tensor of its own: q 32, k 64,
 * v 16; a packed kv shares k's, a packed qkv q's (one Float8Tensor split).
 * The scales differ from the QKV quantizer's (16) and from each other so
 * that a descale taken from the wrong tensor shows. An FP8 d_out (case.h
 * fp8_d_out) is d_out quantised to E5M2 with scale 32 (the dO quantizer's
 * is 64).
 *
 * Paged cases (spec key paged): k and v take exactly the values of the same
 * case laid out contiguously ([b, skv, hg, d] in the kv format), then are
 * scattered into page containers (case.h's shapes): position j of batch
 * entry bi goes to row j % page_size of page table[bi][j / page_size]. The
 * tables (int32 [b, skv / page_size]) map the batch entries to a shuffle of
 * all num_pages pages (Fisher-Yates over Philox stream 11, V's over stream
 * 12 with separate_v, else the same table as TE's FusedAttention passes),
 * never the identity. Every container row no sequence's length reaches (the
 * rows past a length, and the pages of the batch entries past b) holds
 * 1024.0, finite in every io dtype so that a kernel multiplying it by a
 * zero probability still adds zero, yet a gather through a wrong table
 * changes O by far more than any tolerance.
 * The spec's window and bottom_right_diagonal are resolved (case.h) as
 * DotProductAttention does before calling FusedAttnFunc: the window through
 * TE's check_set_window_size, the diagonal forced False for causal and
 * padding_causal, True for *_bottom_right masks and True when unset.
 */
#ifndef FH_HARNESS_INPUTS_H
#define FH_HARNESS_INPUTS_H

#include "fattn/tensor.h"

#include "case.h"
#include "spec.h"

typedef struct fh_case_inputs {
    fattn_tensor storage[3];   /* owned; q/k/v are views into these */
    fattn_tensor q, k, v;
    fattn_tensor attn_bias, softmax_offset;              /* empty when absent */
    fattn_tensor cu_seqlens_q, cu_seqlens_kv;            /* always */
    fattn_tensor cu_seqlens_q_padded, cu_seqlens_kv_padded; /* padding masks */
    fattn_tensor d_out;        /* training only */
    fattn_tensor page_table_k, page_table_v; /* paged only (owned) */
    fattn_tensor storage_fp8[3];              /* owned: FP8 q, k, v */
    /* a Float8Tensor input's _scale_inv (0: not FP8): q, k, v, d_out */
    float q_scale_inv, k_scale_inv, v_scale_inv, d_out_scale_inv;
    int64_t window[2];         /* normalised */
    bool bottom_right_diagonal;
    int64_t t_q, t_kv;         /* THD token counts (0 otherwise) */
} fh_case_inputs;

/* Build every input of `s` (fh_case_resolve, then
 * fh_inputs_make_from_case). On failure nothing is left allocated. */
fattn_status fh_inputs_make(const fh_spec *s, fh_case_inputs *in);
/* Build every input of the resolved case `c` (its spec gives the seed and
 * dtype). On failure nothing is left allocated. */
fattn_status fh_inputs_make_from_case(const fh_case *c, fh_case_inputs *in);
void fh_inputs_free(fh_case_inputs *in);

/* q, k and v of case `c` (or dq, dk, dv: same shapes) in its layout's
 * packing and of dtype dt, as TE's callers build both the inputs and dQKV:
 * one buffer for 3hd/h3d, q plus one kv buffer for 2hd/h2d, else three.
 * storage[0..2] own the buffers (those not needed are the empty slot); *q,
 * *k, *v are views; contents uninitialised. On failure nothing is left
 * allocated. */
fattn_status fh_inputs_alloc_qkv(const fh_case *c, fattn_dtype dt, fattn_tensor storage[3],
                                    fattn_tensor *q, fattn_tensor *k, fattn_tensor *v);

#endif /* FH_HARNESS_INPUTS_H */
