/* Internal to lib/split: what split.c (TE's three helpers and the thin
 * wrapper), fp8.c (the FP8 branch) and args.c (names, args structs,
 * required fields, slots, and the engine calls both others use) share.
 * Nothing outside lib/split includes it; lib/legacy keeps its own. */
#ifndef FATTN_SPLIT_INTERNAL_H
#define FATTN_SPLIT_INTERNAL_H

#include "fattn/engine.h"
#include "fattn/fp8.h"
#include "fattn/split_types.h"

/* Members of the groups of four: fp8[] and f16[] of
 * fattn_split_fill_to_save are (q, k, v, out), cu[] the four cu_seqlens,
 * aux[] the fixed aux slots as forward_impl reads the engine's list. */
enum sp_qkvo { SP_QKVO_Q, SP_QKVO_K, SP_QKVO_V, SP_QKVO_OUT, SP_QKVO_N };
enum sp_cu { SP_CU_Q, SP_CU_KV, SP_CU_Q_PADDED, SP_CU_KV_PADDED, SP_CU_N };
enum sp_aux { SP_AUX_STATS, SP_AUX_RNG_STATE, SP_AUX_BIAS, SP_AUX_SOFTMAX_OFFSET, SP_AUX_N };

/* The fattn_bwd_args field that holds slot s (FATTN_SPLIT_SLOTS' second
 * column); s must be a slot. */
fattn_tensor *fattn__split_bwd_slot(fattn_bwd_args *a, fattn_split_slot s);

/* The required fields of each args struct: FATTN_E_MISSING_FIELD naming
 * the first one unset (fattn/split.h's unset encodings). */
fattn_status fattn__split_check_fwd_args(const fattn_fwd_args *a);
fattn_status fattn__split_check_bwd_args(const fattn_bwd_args *a);

/* The locals of _fused_attn_forward_impl that its steps share. The inputs
 * are borrowed (q, k, v required; attn_bias, softmax_offset may be NULL or
 * empty); res owns every tensor the steps allocate. */
typedef struct sp_forward_frame {
    const fattn_fwd_args *args;
    const fattn_tensor *q, *k, *v, *attn_bias, *softmax_offset;
    fattn_split_fwd_result *res;
    fattn_qkv_format qf, kvf;    /* formats of Q and of K/V */
    int64_t h, d_qk, d_v;        /* heads of Q, head dims of Q/K and V */
    float scale;                 /* attn_scale resolved */
    bool brd;                    /* bottom_right_diagonal resolved */
    fattn_dtype nominal;         /* q.dtype: q's, or its nominal one when q is FP8 */
    bool is_input_fp8;           /* q is a Float8Tensor (S:1620) */
    fattn_aux_pack pack;         /* the engine's list, [Stats, (Max), rng_state, ...] */
    fattn_tensor aux[SP_AUX_N];  /* the list as fixed slots, Max left out */
    /* -- FP8 (fp8.c) -- */
    bool is_bwd_fp8;             /* fp8 and NVTE_FP8_DPA_BWD (S:1625) */
    const fattn_tensor *eq, *ek, *ev; /* what the engine gets */
    const fattn_fp8_fwd *fp8p;   /* NULL on the f16 path */
    fattn_tensor qkv_fp8[3], out_fp8, out_f16, out_ret;
    fattn_tensor qkv_f16[3];     /* an F16 backward's q, k, v: FP8 ones dequantised */
    float qkv_scale_inv[3], out_fp8_scale_inv;
} sp_forward_frame;

/* A poisoned output; one buffer of npack tensors shaped like `like`. */
fattn_status fattn__split_alloc_out(uint64_t poison, fattn_tensor *t, fattn_dtype dt, int ndim,
                                   const int64_t *shape);
fattn_status fattn__split_alloc_packed(uint64_t poison, fattn_tensor *storage, fattn_dtype dt,
                                      const fattn_tensor *like, int npack, int at,
                                      fattn_tensor *views);
/* fused_attn_fwd with the frame's engine tensors (both protocol calls). */
fattn_status fattn__split_forward_impl_fused_attn_fwd(sp_forward_frame *f);

/* S:1615-1621, 1641: q, k, v of one class; FP8 ones need fp8 and what a
 * Float8Tensor carries. Sets f->is_input_fp8 and f->nominal. */
fattn_status fattn__split_fp8_inputs(sp_forward_frame *f);
/* The FP8 branch of _fused_attn_forward_impl (fp8.c, S:1645-1771): sets
 * out_ret; then the save variant and groups (S:1759-1771), the scale_inv
 * of each entry left after dedup, and the FP8 ctx_attrs (S:1856-1877). */
fattn_status fattn__split_fp8_forward(sp_forward_frame *f);
fattn_split_save_variant fattn__split_fp8_save_variant(const sp_forward_frame *f);
void fattn__split_fp8_tensors(const sp_forward_frame *f, fattn_tensor fp8[SP_QKVO_N],
                             fattn_tensor f16[SP_QKVO_N]);
void fattn__split_fp8_scale_invs(sp_forward_frame *f);
void fattn__split_fp8_ctx_attrs(sp_forward_frame *f);

/* How far an FP8 forward advances the generator's offset. */
uint64_t fattn__split_fp8_rng_step(const fattn_fwd_args *args);
/* fused_attn_bwd's f16 arguments from the args (S:2196-2234). */
void fattn__split_backward_params(const fattn_bwd_args *bwd, const fattn_aux_pack *pack,
                                 const fattn_split_grads *g, fattn_bwd_params *p);
/* S:2197-2198: an F16 backward's dO, an FP8 d_out dequantised into g. */
fattn_status fattn__split_fp8_d_out_f16(const fattn_bwd_args *bwd, fattn_split_grads *g,
                                       fattn_tensor *d_o);
/* The FP8 branch of _fused_attn_backward_impl (S:2020-2029, 2125-2183),
 * g's dq/dk/dv allocated in the nominal dtype. */
fattn_status fattn__split_fp8_backward(const fattn_bwd_args *bwd, const fattn_aux_pack *pack,
                                      fattn_split_grads *g);

#endif /* FATTN_SPLIT_INTERNAL_H */
