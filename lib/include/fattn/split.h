/* fattn/split.h — the split front end: TE's FusedAttnFunc after the refactor
 * (TE PR #3480, as merged in TE 2.20.2): args structs, forward_impl / setup_ctx / backward_impl,
 * fixed aux slots, saved-tensor dedup, 5 grads + 1 empty.
 *
 * Flow (what fattn_split_func_forward / _backward do; TE 2.20.2
 * backends.py:2249-2286):
 *   fattn_split_forward_impl(args, q, k, v, attn_bias, softmax_offset, &res)
 *       -> res.out, res.max_logit, res.to_save (TE's 12 entries),
 *          res.ctx_attrs (saved_from per entry)
 *   fattn_split_setup_ctx(&bwd, args, &res.out, &res.ctx_attrs, &res.to_save,
 *                         &saved)
 *       -> bwd's configuration; saved = the 16 tensors TE hands
 *          save_for_backward, deduplicated entries put back
 *   (FusedAttnFunc.backward) fattn_split_setup_saved_tensors(&bwd, &saved)
 *       -> the 16 back into bwd's tensor fields, TE's unpacking order
 *   bwd.d_out = dO; fattn_split_backward_impl(&bwd, &grads)
 *
 * Fixed aux slots: softmax_stats, rng_state, aux_bias, aux_softmax_offset.
 * The engine's variable-length list exists only at the engine boundary
 * (list -> slots right after the forward; backward's list is built from
 * the slots that are not None, backends.py:1568-1575).
 *
 * Dedup (backends.py:1825-1854, the merged rule): each of the 12 entries
 * is checked with `is` — fattn_tensor_same: same data pointer, dtype,
 * shape and strides — against one fixed source only: the fp8 and f16 q
 * entries against q, k against k, v against v, out against the returned
 * O. A match is emptied and its source named in ctx_attrs.saved_from;
 * setup_ctx puts the source back. Entries 10 and 11 are always None and
 * named attn_bias / softmax_offset when the forward has that tensor, so the
 * backward's aux bias and offset are the forward's inputs.
 *
 * Unset encodings (a required field left unset fails with
 * FATTN_E_MISSING_FIELD naming it): enums -1 (layouts NOT_SET, TE backend
 * NO_BACKEND), max_seqlen 0, window FATTN_SPLIT_WINDOW_UNSET, is_training -1,
 * pointers NULL. Optional fields have TE's defaults (see fattn_fwd_args).
 *
 * Memory: a fattn_split_fwd_result owns what forward_impl allocated (O,
 * max_logit, Stats, Max, rng_state) until fattn_split_fwd_result_free; a
 * fattn_split_grads owns the gradient buffers until fattn_split_grads_free.
 * Args structs never own tensors.
 *
 * The data (args structs, slots, to_save, results, grads) and the helpers
 * over it are fattn/split_types.h, included here: lib/split/args.c and
 * fp8.c need only that, so their dependencies point one way.
 */
#ifndef FATTN_SPLIT_H
#define FATTN_SPLIT_H

#include "fattn/api.h"

#include "fattn/split_types.h" /* args, slots, to_save, results, grads */

#ifdef __cplusplus
extern "C" {
#endif

/* _fused_attn_forward_impl. */
FATTN_API fattn_status fattn_split_forward_impl(const fattn_fwd_args *args, const fattn_tensor *q,
                                                const fattn_tensor *k, const fattn_tensor *v,
                                                const fattn_tensor *attn_bias,
                                                const fattn_tensor *softmax_offset,
                                                fattn_split_fwd_result *res);

/* _fused_attn_setup_ctx (backends.py:1897-2004): `bwd` (initialised here)
 * gets the backward's configuration, its tensor fields stay empty; `saved`
 * gets the 16 tensors to save: to_save's entries with each deduplicated
 * one taken back from its source, the cu_seqlens from `fwd`. */
FATTN_API fattn_status fattn_split_setup_ctx(fattn_bwd_args *bwd, const fattn_fwd_args *fwd,
                                             const fattn_tensor *out,
                                             const fattn_split_ctx_attrs *ctx_attrs,
                                             const fattn_split_to_save *to_save, fattn_split_saved *saved);

/* FusedAttnBwdArgs.setup_saved_tensors (backends.py:1545-1566): the saved
 * 16 into bwd's tensor fields, in FATTN_SPLIT_SLOTS order. */
FATTN_API void fattn_split_setup_saved_tensors(fattn_bwd_args *bwd, const fattn_split_saved *saved);

/* _fused_attn_backward_impl: allocates and fills `grads`. */
FATTN_API fattn_status fattn_split_backward_impl(const fattn_bwd_args *bwd, fattn_split_grads *grads);

/* ---- the thin autograd wrapper -------------------------------------- */

typedef struct fattn_split_func_ctx {
    bool has_forward;
    /* backward ran: TE sets ctx.backward_objects = None (2.20.2
     * backends.py:2285), so a second backward on this ctx raises. */
    bool backward_objects_cleared;
    fattn_bwd_args bwd;
    fattn_split_saved saved; /* ctx.save_for_backward's tensors */
    fattn_split_fwd_result fwd;
    fattn_split_grads grads;
} fattn_split_func_ctx;

FATTN_API fattn_status fattn_split_func_ctx_init(fattn_split_func_ctx **out);
FATTN_API void fattn_split_func_ctx_free(fattn_split_func_ctx *ctx);

/* FusedAttnFunc.forward(ctx, q, k, v, attn_bias, softmax_offset, args):
 * returns O (and max_logit when args->return_max_logit; may be NULL). The
 * ctx keeps what backward needs; views stay valid until the ctx is freed or
 * runs again. */
FATTN_API fattn_status fattn_split_func_forward(fattn_split_func_ctx *ctx, const fattn_tensor *q,
                                                const fattn_tensor *k, const fattn_tensor *v,
                                                const fattn_tensor *attn_bias,
                                                const fattn_tensor *softmax_offset,
                                                const fattn_fwd_args *args, fattn_tensor *out,
                                                fattn_tensor *max_logit);

/* FusedAttnFunc.backward: grads6 = (dq, dk, dv, d_bias, d_softmax_offset,
 * empty for args). Once per forward: a second call is FATTN_E_STATE, as
 * TE 2.20.2 raises AttributeError on ctx.backward_objects = None. An FP8
 * d_out's _scale_inv goes into ctx->bwd.d_out_scale_inv before the call;
 * FP8 grads' comes back in ctx->grads.grads_scale_inv. */
FATTN_API fattn_status fattn_split_func_backward(fattn_split_func_ctx *ctx, const fattn_tensor *d_out,
                                                 fattn_tensor grads6[6]);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_SPLIT_H */
