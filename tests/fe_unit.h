/* tests/fe_unit.h — helpers of the front ends' unit tests (test_legacy.c,
 * test_split.c, test_support.c).
 *
 * These call ONE front end's API directly with crafted arguments, to test
 * what only that API shows: the ctx it fills, the grads list it returns,
 * its dedup records, its refusals and misuse. Whole case runs and every
 * comparison of two front ends go through the harness instead
 * (fh_run_case, the tree walk: test_frontends.c); the bitwise check here
 * is the harness's bitwise element rule too.
 *
 *  - fe_same_bits: two tensors through the walk's in-memory source and
 *    FH_ELEM_BITWISE;
 *  - fe_fake_cudnn: an engine that claims cuDNN's support rules and fails
 *    if it is ever run (the rules the front ends check before the engine);
 *  - fe_spec and friends: small zeroed inputs that trip one support rule;
 *  - fe_legacy_call_* / fe_split_call_*: a CPU-matrix case (cases.h) handed
 *    to one front end's calls as a TE caller would.
 */
#ifndef FATTN_TEST_FE_UNIT_H
#define FATTN_TEST_FE_UNIT_H

#include <stdbool.h>
#include <stdint.h>

#include "cases.h"
#include "fattn/legacy.h"
#include "fattn/split.h"
#include "fattn/support.h"

#define FE_POISON UINT64_MAX /* 0xFF bytes, as cases.c and the runner poison */
#define FE_NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- bitwise comparison ------------------------------------------------ */

/* Same dtype, shape and every element's bits (the logical tensors, gathered
 * through their views), compared by the harness's bitwise rule. Two empty
 * slots are equal; an empty and a non-empty one are not. */
bool fe_same_bits(const fattn_tensor *a, const fattn_tensor *b);

/* ---- a fake engine that reports cuDNN's support rules -------------------- */

/* *e becomes an engine (no state to free) whose fwd and bwd fail with
 * FATTN_E_INTERNAL: a front end must refuse before it runs. */
void fe_fake_cudnn(fattn_engine *e);
/* *e becomes an engine without FP8 attention (FATTN_ENGINE_Q_FP8 false)
 * that fails likewise if run. */
void fe_fake_no_fp8(fattn_engine *e);

/* ---- small inputs for the support rules ---------------------------------- */

typedef struct fe_spec {
    fattn_qkv_layout layout;
    fattn_dtype dtype;
    int h, hg, sq, skv, d, dv;
    fattn_bias_type bias_type;
    bool bias_present;
    fattn_dtype bias_dtype;
    fattn_mask_type mask;
    fattn_softmax_type softmax;
    int64_t window[2];
    float dropout;
    bool fp8;
    fattn_fp8_recipe fp8_recipe; /* with fp8: every quantizer's recipe (delayed default) */
    bool cpu_offload; /* TE's CPU offload v1 state */
    bool return_max_logit;
    bool cudnn; /* run on the fake "cudnn" engine */
    bool cudnn_928; /* that engine reports cuDNN 9.28.1 loaded (else none: the reference) */
    int sm;         /* that engine's GPU architecture (0: none told, the reference sm_90) */
    bool inference; /* is_training false (every other spec trains) */
    long cudnn_version; /* the platform's cuDNN for fe_query (0: the reference's) */
    bool bottom_right; /* bottom_right_diagonal 1 (else None: the mask's default) */
} fe_spec;

/* bshd f16, h = hg = 2, sq = skv = d = dv = 16, no bias, no mask, vanilla
 * softmax, window (-1,-1): a spec every rule accepts. */
fe_spec fe_spec_default(void);
/* Rule id (fattn_support_rules) -> a spec that trips that rule (and only
 * it); the default spec for an unknown id. */
fe_spec fe_spec_for_rule(const char *id);
/* The rule a front end refuses fe_spec_for_rule(id) with: id itself, or,
 * for an engine's gap that one of TE's own rows refuses first at the front
 * ends (the gap rows come last in the table), that row; NULL where the
 * front end's own checks of its arguments refuse the spec before it asks
 * the table. Such a gap is reached by the engine dispatch alone
 * (fattn_support_check_engine). */
const char *fe_rule_at_front_end(const char *id);
/* Whether rule r holds for the reference platform's cuDNN
 * (FATTN_SUPPORT_CUDNN_REFERENCE), which the front ends ask TE's rules at:
 * a row for older cuDNNs only (head_dim_large_inference) is tripped by
 * fe_spec_for_rule's cudnn_version through the table, never through them. */
bool fe_rule_at_reference(const fattn_support_rule *r);
/* The support query of a spec (training). */
fattn_support_query fe_query(const fe_spec *s);

/* Forward of a spec with zeroed inputs (b = 2; THD t = 2*sq; on the fake
 * cuDNN engine when s->cudnn) through legacy's forward / split's
 * forward_impl; the status. */
fattn_status fe_legacy_spec(const fe_spec *s, fattn_engine *cpu);
fattn_status fe_split_spec(const fe_spec *s, fattn_engine *cpu);

/* ---- a matrix case through one front end's calls ------------------------- */

/* The support query of a matrix case. */
fattn_support_query fe_case_query(const tcase *c);
/* A matrix case TE itself refuses on the reference platform (the CPU engine
 * still runs it directly); the front ends must refuse it alike. */
bool fe_case_te_invalid(const tcase *c);

/* fattn_legacy_forward with the case's arguments over b's inputs (training
 * as the case says; outputs poisoned with FE_POISON). */
fattn_status fe_legacy_call_fwd(const tcase *c, tcase_buffers *b, fattn_legacy_ctx *ctx,
                                fattn_rng_gen *gen, fattn_tensor *out, fattn_tensor *max_logit);
/* The same, then fattn_legacy_backward from b->d_o when the case trains;
 * grads all empty otherwise (or when the forward fails). */
fattn_status fe_legacy_call_fwd_bwd(const tcase *c, tcase_buffers *b, fattn_legacy_ctx *ctx,
                                    fattn_rng_gen *gen, fattn_tensor *out,
                                    fattn_tensor *max_logit,
                                    fattn_tensor grads[FATTN_LEGACY_NGRADS]);

/* The case's fattn_fwd_args over b's cu_seqlens on engine e (q, k, v and
 * the bias are passed to the calls, not set here). */
void fe_split_fwd_args_of(const tcase *c, tcase_buffers *b, fattn_engine *e, fattn_rng_gen *gen,
                          fattn_fwd_args *a);
/* fattn_split_func_forward with those args, then fattn_split_func_backward
 * from b->d_o when the case trains; grads6 all empty otherwise. */
fattn_status fe_split_call_fwd_bwd(const tcase *c, tcase_buffers *b, fattn_engine *e,
                                   fattn_split_func_ctx *ctx, fattn_rng_gen *gen,
                                   fattn_tensor *out, fattn_tensor *max_logit,
                                   fattn_tensor grads6[6]);

#endif /* FATTN_TEST_FE_UNIT_H */
