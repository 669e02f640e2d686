/* fattn/engine.h — the engine API: TE's nvte_fused_attn_fwd / _bwd in C.
 *
 * An engine (fattn's cpu | cudnn choice) computes attention with TE's exact
 * semantics. The parameters mirror nvte_fused_attn_fwd and
 * nvte_fused_attn_bwd (transformer_engine/common/include/transformer_engine/
 * fused_attn.h) one for one, grouped in two structs; the aux pack is TE's
 * variable-length list. Front ends (lib/legacy, lib/split) sit on top and
 * never see engine internals.
 *
 * Shapes (b batch, h = hq query heads, hg = hk = hv kv heads, sq/skv padded
 * sequence lengths, t_q/t_kv total tokens of a THD tensor, d = d_qk, dv):
 *   Q        format sbhd [sq,b,h,d] | bshd [b,sq,h,d] | bhsd [b,h,sq,d] | thd [t_q,h,d]
 *   K        same format rules with kv length and hg heads, head dim d
 *   V        as K with head dim dv
 *   O        Q's format with head dim dv (o_format)
 *   Bias     [1|b, 1|h, 1|sq, skv] in Q's dtype (post_scale_bias only)
 *   SoftmaxOffset float32 [1,h,1,1] (off-by-one, learnable)
 *   cu_seqlens_* int32 [b+1]; rng_state int64 [2] = (seed, offset)
 *   Stats    float32 [b,h,sq,1], or [t_q,h,1] for a THD Q (ragged stats,
 *            indexed by the token's position in Q)
 *   Max      as Stats (only with return_max_logit)
 * Layout strides come from the views: packed layouts are views into one
 * buffer, and no engine copies to make a tensor contiguous.
 *
 * The aux pack, exactly as TE orders it:
 *   [Stats, (Max if return_max_logit), rng_state,
 *    (Bias if bias_type is pre/post_scale_bias),
 *    (SoftmaxOffset if softmax_type is not vanilla)]
 * Forward follows TE's two-call protocol: called with aux->n == 0 it only
 * validates, fills the pack's shapes and dtypes (data NULL) and returns; the
 * caller allocates Stats (and Max) and calls again. On the executing call
 * the dispatch points the rng_state, Bias and SoftmaxOffset entries at the
 * inputs, as TE does (the pack entry *is* the input). fattn_aux_layout_fwd
 * and _bwd give the slots. Backward reads
 *   [Stats, rng_state, (Bias), (SoftmaxOffset)]   (Max already stripped).
 *
 * Defined regions (an engine writes nothing outside them; callers poison
 * outputs first and compare whole buffers within one engine):
 *   O, Stats, Max   rows of query positions i < seqlen_q(b) — with a padding
 *                   mask seqlen_q(b) = cu_seqlens_q[b+1]-cu_seqlens_q[b], else sq;
 *                   THD: tokens [q_off(b), q_off(b)+seqlen_q(b)) where q_off
 *                   is cu_seqlens_q_padded[b] (or cu_seqlens_q[b]).
 *   dQ              as O's rows; dK, dV: key rows j < seqlen_kv(b) (THD:
 *                   their token ranges); each row fully, all heads.
 *   dBias           the whole bias tensor.
 *   dSoftmaxOffset  the whole [1,h,1,1] tensor.
 * Padded rows of bshd/sbhd and padding tokens of THD are left untouched.
 *
 * Host or device tensors (fattn_tensor.device): an engine that answers
 * FATTN_ENGINE_Q_DEVICE_TENSORS also takes a call whose tensors live in CUDA
 * device memory (FATTN_DEVICE_CUDA): Q decides, and every other tensor the
 * engine reads or writes (K, V, O, Bias, Stats, Max, dO, dQ, dK, dV, dBias,
 * dSoftmaxOffset) must then be a device tensor too, 16-byte aligned, Stats
 * and dSoftmaxOffset contiguous. The tensors the dispatch reads on the host
 * stay host tensors in every call: cu_seqlens_* (and padded), rng_state,
 * softmax_offset (FATTN_E_INVALID_ARG otherwise, for every engine). A
 * device call is queued on the engine's stream and returns without waiting;
 * see fattn/cudnn.h. Other engines refuse a device tensor with
 * FATTN_E_UNSUPPORTED before touching any tensor.
 */
#ifndef FATTN_ENGINE_H
#define FATTN_ENGINE_H

#include "fattn/api.h"

#include <stdbool.h>
#include <stdint.h>

#include "fattn/status.h"
#include "fattn/te.h"
#include "fattn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FATTN_AUX_MAX 5

/* TE's NVTETensorPack for Aux_CTX_Tensors. */
typedef struct fattn_aux_pack {
    int n;
    fattn_tensor t[FATTN_AUX_MAX];
} fattn_aux_pack;

/* The FP8 path of nvte_fused_attn_fwd (fused_attn.h): the scaling factors
 * TE carries on its NVTETensors, as values. descale_X is tensor X's
 * scale_inv; S is the softmax output P (TE's input_output_S: its scale,
 * scale_inv and amax); O's quantizer gives scale_o and receives amax_o.
 * Q, K and V are FP8 codes of one dtype (E4M3 in TE's recipes); P is
 * quantised to s_dtype; O is FP8 (scaled by scale_o) or float16/bfloat16
 * (unscaled: TE's O_in_F16 / fp8_output off). amax_s and amax_o point at
 * one float each, written by the call: max |x| before the scale is applied
 * (docs/numerics.md, "FP8 attention"). */
typedef struct fattn_fp8_fwd {
    float descale_q, descale_k, descale_v;
    float descale_s, scale_s;
    float scale_o;
    float *amax_s, *amax_o;
    fattn_dtype s_dtype;
} fattn_fp8_fwd;

/* The FP8 path of nvte_fused_attn_bwd: Q, K, V, O as the forward had them,
 * dO in FP8 (E5M2 in TE's HYBRID format), dP (TE's input_output_dP, the
 * softmax gradient dS) quantised to dp_dtype with scale_dp, and dQ, dK, dV
 * FP8 (scaled by their scale_dX) or float16/bfloat16 (unscaled). amax_dp,
 * amax_dq, amax_dk, amax_dv are written as in the forward. */
typedef struct fattn_fp8_bwd {
    float descale_q, descale_k, descale_v, descale_o, descale_do;
    float descale_s, scale_s;
    float descale_dp, scale_dp;
    float scale_dq, scale_dk, scale_dv;
    float *amax_dp, *amax_dq, *amax_dk, *amax_dv;
    fattn_dtype s_dtype, dp_dtype;
} fattn_fp8_bwd;

/* What nvte_fused_attn_fwd and nvte_fused_attn_bwd share: the inputs Q, K,
 * V, the output O (the backward reads it), the sequence metadata and every
 * option of the attention itself. One struct in both calls, so that the
 * backward hands it on whole where it needs the forward's reading of the case
 * (the cuDNN engine's graph description) and nothing is copied field by field. */
typedef struct fattn_attn_common {
    fattn_tensor q, k, v;
    fattn_tensor o;              /* forward: output; backward: input */
    fattn_tensor cu_seqlens_q, cu_seqlens_kv;
    fattn_tensor cu_seqlens_q_padded, cu_seqlens_kv_padded; /* may be empty */
    int64_t max_seqlen_q, max_seqlen_kv;
    float attn_scale;
    float dropout;
    fattn_qkv_layout qkv_layout;
    fattn_qkv_format o_format;
    fattn_bias_type bias_type;
    fattn_mask_type mask_type;
    fattn_softmax_type softmax_type;
    int64_t window_size_left, window_size_right;
    bool bottom_right_diagonal;
    bool cuda_graph;
} fattn_attn_common;

/* nvte_fused_attn_fwd's arguments (S and the FP8 scaling are in `fp8`;
 * workspace and stream are the engine's business). */
typedef struct fattn_fwd_params {
    fattn_attn_common attn;
    fattn_tensor bias;           /* empty unless pre/post_scale_bias */
    fattn_tensor softmax_offset; /* empty when vanilla */
    fattn_aux_pack *aux;         /* in/out, see above */
    fattn_tensor page_table_k, page_table_v;                /* paged only */
    fattn_tensor rng_state;      /* int64 [2] */
    bool is_training;
    bool return_max_logit;
    const fattn_fp8_fwd *fp8;    /* NULL: not an FP8 call */
} fattn_fwd_params;

/* nvte_fused_attn_bwd's arguments (S, dP and the FP8 scaling are in `fp8`). */
typedef struct fattn_bwd_params {
    fattn_attn_common attn;
    fattn_tensor d_o;
    const fattn_aux_pack *aux;   /* [Stats, rng_state, (Bias), (Offset)] */
    fattn_tensor dq, dk, dv;
    fattn_tensor d_bias;             /* empty unless post_scale_bias with grad */
    fattn_tensor d_softmax_offset;   /* empty when vanilla */
    fattn_qkv_format do_format;
    fattn_qkv_layout dqkv_layout;
    bool deterministic;
    const fattn_fp8_bwd *fp8;    /* NULL: not an FP8 call */
} fattn_bwd_params;

/* ---- TE's aux pack --------------------------------------------------- */

/* Where each entry sits in the aux pack, -1 when absent; n entries in all.
 * The one statement of TE's slot order in the library (the front ends keep
 * their own copies as independent witnesses). */
typedef struct fattn_aux_layout {
    int n;
    int stats, max, rng_state, bias, softmax_offset;
} fattn_aux_layout;

/* Forward pack: [Stats, (Max), rng_state, (Bias), (SoftmaxOffset)]. Bias is
 * present for pre_scale_bias and post_scale_bias, SoftmaxOffset for every
 * softmax type but vanilla, Max with return_max_logit. */
FATTN_API fattn_aux_layout fattn_aux_layout_fwd(fattn_bias_type bias, fattn_softmax_type softmax,
                                                bool return_max_logit);
/* Backward pack: the forward's without Max. */
FATTN_API fattn_aux_layout fattn_aux_layout_bwd(fattn_bias_type bias, fattn_softmax_type softmax);

/* ---- engines ---------------------------------------------------------- */

/* An engine is an object: forward and backward, the questions it answers
 * (supports) and what it says about its last call (report). The CPU and
 * cuDNN engines and the test-only variants implement the same table; callers
 * never compare engine names (only the registry below does). The dispatch
 * (fattn_engine_fwd, fattn_engine_bwd) runs TE's two-call protocol and
 * validates the geometry once; an engine's operations see only executing
 * calls, with the pack's entries resolved. */
typedef struct fattn_engine fattn_engine;

/* The validated geometry of a call (lib/core/geom.h, internal to lib/). */
typedef struct fattn_geom fattn_geom;

/* An executing forward call: Stats (and Max) are the caller's float32
 * tensors of the shape the describing call reported; the pack's rng_state,
 * Bias and SoftmaxOffset entries already point at the inputs. */
typedef struct fattn_fwd_call {
    const fattn_geom *geom;
    fattn_tensor stats;
    fattn_tensor max;     /* empty unless return_max_logit */
    double t0;            /* when the dispatch took the call (CLOCK_MONOTONIC, s):
                             host time an engine reports counts from here */
} fattn_fwd_call;

/* A backward call: the pack's entries, Stats' shape checked. bias and
 * softmax_offset are empty where the layout has none. */
typedef struct fattn_bwd_call {
    const fattn_geom *geom;
    fattn_tensor stats, rng_state, bias, softmax_offset;
    double t0;            /* as fattn_fwd_call's */
} fattn_bwd_call;

/* Questions an engine answers, so that callers ask instead of naming it. */
typedef enum fattn_engine_query {
    /* The support table's cuDNN rules apply to it (lib/core/support.c);
     * otherwise its CPU rules. */
    FATTN_ENGINE_Q_SUPPORT_RULES_CUDNN = 1,
    /* The report's tag names the compiled kernel configuration that ran:
     * provenance worth recording (prov_engine_tag). */
    FATTN_ENGINE_Q_PLAN_TAG,
    /* dSoftmaxOffset is not bitwise repeatable even with the deterministic
     * backward (measured, docs/determinism.md): compare it within tolerance. */
    FATTN_ENGINE_Q_NOISY_D_SOFTMAX_OFFSET,
    /* Every backward runs the deterministic algorithm, whatever
     * fattn_bwd_params.deterministic says (fattn_engine_options). */
    FATTN_ENGINE_Q_FORCED_DETERMINISTIC_BWD,
    /* It runs on a CUDA device: provenance records the device and the CUDA
     * and cuDNN versions (harness/run/runfile.c). */
    FATTN_ENGINE_Q_CUDA_DEVICE,
    /* It runs FP8 calls (fattn_fwd_params.fp8 / fattn_bwd_params.fp8); the
     * dispatch refuses them for an engine that does not. */
    FATTN_ENGINE_Q_FP8,
    /* It takes device tensors (fattn_tensor.device FATTN_DEVICE_CUDA; the
     * rules above the aux pack's, at the top of this file). */
    FATTN_ENGINE_Q_DEVICE_TENSORS,
    /* Its results are the CPU engine's math (FATTN_CPU_MATH_VERSION), FP8
     * scales and bytes included: verify compares its FP8 cases with CPU
     * goldens within tolerance; another engine's FP8 scales follow its own
     * amax and its bytes its own rounding. */
    FATTN_ENGINE_Q_CPU_MATH,
} fattn_engine_query;

/* Benchmark timing of the last call (fattn_engine_options.timing_iters). */
typedef struct fattn_engine_timing {
    int iters;              /* timed executions (0: timing was off) */
    double gpu_ms_median;   /* plan execution, CUDA events */
    double gpu_ms_min;
    /* Host time of the call outside the copies and the GPU work: graph
     * description, plan-cache lookup (or build), variant pack, launch.
     * With a plan-cache hit this is the per-call host overhead. */
    double host_us;
    /* Its two parts: fattn's (validation, graph description, cache key and
     * lookup) and the execution call (variant pack and
     * cudnnBackendExecute, which launches the kernels). */
    double host_fattn_us;
    double host_execute_us;
    double plan_build_s;    /* 0 when the plan came from the cache; the
                               restore time when it came from the store */
    bool plan_cache_hit;
    bool plan_from_store;   /* restored from the plan store (not built) */
} fattn_engine_timing;

/* What an engine says about itself and its last forward or backward, for
 * provenance and benchmarks. Strings are the engine's, valid until its next
 * call or its free; never NULL ("" when there is nothing to say). */
typedef struct fattn_engine_report {
    const char *engine;      /* its name */
    const char *platform;    /* the key goldens are filed under, e.g.
                                "cpu-math-1", "cudnn-nvidia-h200-sm90-132sm-cudnn91900" */
    const char *tag;         /* engine config of the last plan ("eng2_k24=7") */
    const char *route;       /* "composite" / "native" forward, "bwd-dq-accum" /
                                "bwd-direct-dq" backward */
    const char *plan_source; /* "memory", "store" or "built" */
    int plans;               /* plans in the engine's plan cache */
    int64_t workspace;       /* device bytes the last backward used besides its
                                inputs and outputs (docs/cudnn-engine.md) */
    fattn_engine_timing timing;
} fattn_engine_report;

typedef struct fattn_engine_ops {
    const char *name; /* "cpu", "cudnn", or a test variant's name */
    /* Prefixes of the dispatch's validation messages ("forward" and
     * "backward" when NULL). */
    const char *who_fwd, *who_bwd;
    fattn_status (*fwd)(fattn_engine *e, const fattn_fwd_params *p, const fattn_fwd_call *c);
    fattn_status (*bwd)(fattn_engine *e, const fattn_bwd_params *p, const fattn_bwd_call *c);
    /* NULL: no query holds. */
    bool (*supports)(const fattn_engine *e, fattn_engine_query q);
    /* Fill what the engine knows; the dispatch has set every field to its
     * empty value and `engine` to the name. NULL: nothing more. */
    void (*report)(const fattn_engine *e, fattn_engine_report *out);
    void (*free)(fattn_engine *e);
    /* The cuDNN version it runs (cudnnGetVersion) for the support rows that
     * hold for a range of them; NULL: the reference platform's
     * (FATTN_SUPPORT_CUDNN_REFERENCE). */
    long (*cudnn_version)(const fattn_engine *e);
    /* Its device's GPU architecture (compute capability major * 10 +
     * minor, 90 = sm_90) for the support rows that hold for a range of
     * them; NULL: the reference platform's (FATTN_SUPPORT_SM_REFERENCE). */
    int (*sm)(const fattn_engine *e);
} fattn_engine_ops;

struct fattn_engine {
    const fattn_engine_ops *ops;
    void *impl;
};

/* Options of the CPU engine. threads = 0 means one per online CPU. Results
 * are bitwise independent of the thread count. */
typedef struct fattn_cpu_options {
    int threads;
} fattn_cpu_options;

FATTN_API fattn_status fattn_engine_init_cpu(fattn_engine **out,
                                             const fattn_cpu_options *opt);
FATTN_API fattn_status fattn_engine_fwd(fattn_engine *e, const fattn_fwd_params *p);
FATTN_API fattn_status fattn_engine_bwd(fattn_engine *e, const fattn_bwd_params *p);
FATTN_API const char *fattn_engine_name(const fattn_engine *e);
FATTN_API bool fattn_engine_supports(const fattn_engine *e, fattn_engine_query q);
FATTN_API fattn_engine_report fattn_engine_last_report(const fattn_engine *e);
FATTN_API void fattn_engine_free(fattn_engine *e);

/* ---- the engine registry (lib/core/registry.c) ------------------------ */

/* A cuDNN plan cache (fattn/cudnn.h), owned by whoever made it. */
typedef struct fattn_cudnn_plan_cache fattn_cudnn_plan_cache;

/* Options of fattn_engine_open: each engine takes what concerns it. */
typedef struct fattn_engine_options {
    int threads;                  /* CPU: 0 = one per online CPU */
    int device;                   /* cuDNN: CUDA ordinal (ignored with a plan cache) */
    bool force_deterministic_bwd; /* cuDNN: every backward deterministic */
    int timing_iters;             /* cuDNN: benchmark timing, 0 off */
    /* cuDNN: where the caller keeps a plan cache shared by its engines.
     * NULL: the engine has its own. Else the cache in *plan_cache is used;
     * when it is NULL the engine makes one and leaves it there: the caller
     * owns it and frees it (fattn_cudnn_plan_cache_free) after its last
     * engine. A CPU engine never touches it. */
    fattn_cudnn_plan_cache **plan_cache;
    /* cuDNN: the settings of a plan cache it makes (fattn/cudnn.h); NULL:
     * the defaults. */
    const struct fattn_cudnn_settings *cudnn_settings;
} fattn_engine_options;

/* The registry is the one place engine names are compared. Kinds, in the
 * order --backend auto prefers them: "cudnn", "cpu". */
FATTN_API bool fattn_engine_kind_known(const char *name);
/* Whether the kind `name` runs on a CUDA device and its library loads
 * ("auto" or NULL: whether any kind --backend auto may pick does); asks
 * no device, so a process that must fork before CUDA starts can ask. */
FATTN_API bool fattn_engine_kind_may_use_device(const char *name);
/* Open the named kind; opt may be NULL (defaults). */
FATTN_API fattn_status fattn_engine_open(const char *name, const fattn_engine_options *opt,
                                         fattn_engine **out);
/* Open the first kind that is available and opens, in preference order;
 * *name gets its registry name. */
FATTN_API fattn_status fattn_engine_open_auto(const fattn_engine_options *opt, fattn_engine **out,
                                              const char **name);
/* The cuDNN version e loaded (91900 = 9.19.0); the reference platform's
 * (FATTN_SUPPORT_CUDNN_REFERENCE) for an engine without cuDNN. The front
 * ends test the engine's own gap rows at it (fattn_support_query's
 * engine_cudnn_version). */
FATTN_API long fattn_engine_cudnn_version(const fattn_engine *e);
/* The GPU architecture e runs on (90 = sm_90); the reference platform's
 * (FATTN_SUPPORT_SM_REFERENCE) for an engine without a device. Asked as
 * fattn_engine_cudnn_version (fattn_support_query's engine_sm). */
FATTN_API int fattn_engine_sm(const fattn_engine *e);
/* The support table's engine bit for e (FATTN_SUPPORT_ENGINE_*), what
 * fattn_support_check takes. */
FATTN_API unsigned fattn_engine_support_bit(const fattn_engine *e);

/* Version of the CPU engine's math: bumped whenever any CPU result bit can
 * change (part of the CPU platform key of goldens). */
#define FATTN_CPU_MATH_VERSION 1

#ifdef __cplusplus
}
#endif
#endif /* FATTN_ENGINE_H */
