/* harness/run/module.h — what a schedule's steps share: the state TE keeps
 * on the module between calls (DotProductAttention's FP8 recipe state and
 * quantizers, InferenceParams' KV cache). Private to run/.
 *
 * FP8 (a delayed-scaling case): two DelayedScalingRecipeStates, forward (9
 * quantizers: DotProductAttention's num_gemms 3, dot_product_attention.py
 * 2.20.2:1364) and backward (6), each scale[n] and amax_history[len][n],
 * and the quantizer objects every forward is handed, whose scale and amax
 * are views of scale[i] and amax_history[0][i] (quantization.py:1444-1451)
 * at get_attention_quantizers' indices (fused_attn.py:167-172: QKV 2, O 3,
 * S 8 forward; dQKV 0, dO 3, dP 5 backward). The objects hold the values
 * between the steps that touch the arrays (U, X), which gather them first
 * and scatter them back after. The initial state: TE's (scales 1, histories
 * 0) but for the six quantizers, which start at the harness's distinct
 * scales (fh_fe_fp8_quantizers) so that one handed to the wrong place
 * shows.
 *
 * KV cache: InferenceParams' caches, bshd and contiguous, zeros at first as
 * TE allocates them (inference.py:448-463, 648-663): non-paged [b, skv, hg,
 * d], paged [num_pages, page_size, hg, d]; the bookkeeping is model/'s
 * (fh_kv_plan).
 */
#ifndef FH_HARNESS_MODULE_H
#define FH_HARNESS_MODULE_H

#include "fattn/fp8.h"
#include "fattn/tensor.h"

#include "h5io.h"
#include "inputs.h"
#include "spec.h"

#define FH_MODULE_FWD_N 9
#define FH_MODULE_BWD_N 6

typedef struct fh_module {
    const fh_spec *spec;
    bool fp8;                      /* delayed-scaling recipe state kept */
    fattn_fp8_quantizers qs;       /* the objects forwards are handed */
    float scale_fwd[FH_MODULE_FWD_N], scale_bwd[FH_MODULE_BWD_N];
    float *hist_fwd, *hist_bwd;    /* [len][9], [len][6] */
    bool kv;                       /* a schedule of cache steps */
    fh_kv_plan plan;
    fattn_tensor k_cache, v_cache; /* owned */
} fh_module;

/* The module a schedule of `spec` runs in (spec outlives it). */
fattn_status fh_module_init(fh_module *m, const fh_spec *spec);
void fh_module_free(fh_module *m);

/* U: FP8GlobalStateManager.reduce_and_update_fp8_tensors for the
 * directions in `update` (FH_UPDATE_*), then the state as group
 * `recipe` of g (scale_fwd, amax_history_fwd, scale_bwd, amax_history_bwd,
 * float32). */
fattn_status fh_module_update(fh_module *m, int update, fh_h5_node *g);
/* X: get_extra_state's checkpoint as group `extra_state` of g (the four
 * arrays and the recipe's fields as attributes), then set_extra_state of
 * it, read back from that group, into the same module. */
fattn_status fh_module_extra_state(fh_module *m, fh_h5_node *g);

/* A cache step (1-based k; spec = fh_spec_step's): the step's new K and
 * V (`tokens`: inputs of the step spec with q's format for all three)
 * appended as InferenceParams.step does, then *in's k, v and page tables
 * made the cache and its table as FusedAttention hands them on (k and v
 * storage freed). */
fattn_status fh_module_cache_step(fh_module *m, int64_t k, const fh_spec *step,
                                     fh_case_inputs *in);

#endif /* FH_HARNESS_MODULE_H */
