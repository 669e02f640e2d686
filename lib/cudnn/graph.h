/* lib/cudnn/graph.h — the cuDNN engine's internal graph description.
 *
 * A cg_graph is a plain-C picture of the operation graph the engine hands to
 * cuDNN's backend API: tensors (uid, dtype, dims, strides, virtual, by-value,
 * ragged offset) and operations in emission order with their attributes. It
 * is built from fattn_fwd_params without any CUDA (graph.c), dumped as text
 * for tests and as the plan store's key, keyed in binary for the in-memory
 * plan cache (fattn__cg_key), and lowered to backend descriptors in
 * one pass (lower.c). The forward is built as cudnn-frontend 1.18 lowers
 * CompositeSDPANode (and its score modifiers and softmax node) for the
 * options TransformerEngine sets, or as the single native SDPA_FWD op where
 * PyTorch 2.11 uses it; the backward as CompositeSDPABackwardNode lowers it,
 * in both dQ variants (docs/cudnn-engine.md, docs/determinism.md).
 *
 * All tensors are 4-D. User tensors have fixed uids (PyTorch's numbering:
 * Q0 K1 V2 O3 Bias4 Scale5 Seed6 Offset7 Stats8, SeqQ13 SeqKV14, and the
 * fattn additions below); internal tensors get uids from 100 up in creation
 * order.
 */
#ifndef FATTN_CUDNN_GRAPH_H
#define FATTN_CUDNN_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/geom.h"
#include "fattn/engine.h"

typedef enum cg_dtype {
    CG_F32 = 0,
    CG_F16,
    CG_BF16,
    CG_I32,
    CG_I64,
    CG_BOOL,
    CG_FP8_E4M3,
    CG_FP8_E5M2
} cg_dtype;

/* What a non-virtual, non-by-value tensor is bound to at execution. */
typedef enum cg_role {
    CG_ROLE_NONE = 0, /* virtual or by-value */
    CG_ROLE_Q,
    CG_ROLE_K,
    CG_ROLE_V,
    CG_ROLE_O,
    CG_ROLE_STATS,
    CG_ROLE_BIAS,
    CG_ROLE_SINK,
    CG_ROLE_ALIBI,
    CG_ROLE_SEQ_Q,
    CG_ROLE_SEQ_KV,
    CG_ROLE_RAG_Q,
    CG_ROLE_RAG_K,
    CG_ROLE_RAG_V,
    CG_ROLE_RAG_O,
    CG_ROLE_RAG_STATS,
    CG_ROLE_SEED,
    CG_ROLE_OFFSET,
    /* backward */
    CG_ROLE_DO,
    CG_ROLE_DQ,
    CG_ROLE_DK,
    CG_ROLE_DV,
    CG_ROLE_DBIAS,
    CG_ROLE_DSINK,
    CG_ROLE_DSUM,     /* caller-side Dsum buffer, b*hq*sq floats */
    CG_ROLE_DQ_ACCUM, /* caller-side dQ accumulator, b*hq*sq*d floats */
    CG_ROLE_RAG_DO,
    CG_ROLE_RAG_DQ,
    CG_ROLE_RAG_DK,
    CG_ROLE_RAG_DV,
    CG_ROLE_RNG_DUMP, /* test variant: the dropout keep-mask, [b,hq,sq,skv] float */
    CG_ROLE_MAX,      /* return_max_logit: the row max of the scores, laid out as Stats */
    /* FP8 (graph_fp8.c): one float each, [1,1,1,1] on the device */
    CG_ROLE_DESCALE_Q,
    CG_ROLE_DESCALE_K,
    CG_ROLE_DESCALE_V,
    CG_ROLE_DESCALE_S,
    CG_ROLE_DESCALE_O,
    CG_ROLE_DESCALE_DO,
    CG_ROLE_DESCALE_DP,
    CG_ROLE_SCALE_S,
    CG_ROLE_SCALE_O,
    CG_ROLE_SCALE_DP,
    CG_ROLE_SCALE_DQ,
    CG_ROLE_SCALE_DK,
    CG_ROLE_SCALE_DV,
    CG_ROLE_AMAX_S,
    CG_ROLE_AMAX_O,
    CG_ROLE_AMAX_DP,
    CG_ROLE_AMAX_DQ,
    CG_ROLE_AMAX_DK,
    CG_ROLE_AMAX_DV,
    /* paged KV: the page tables, int32 [b, 1, pages_per_seq, 1] */
    CG_ROLE_PT_K,
    CG_ROLE_PT_V,
    CG_ROLE_COUNT
} cg_role;

/* Fixed uids of user tensors. */
enum {
    CG_UID_Q = 0,
    CG_UID_K = 1,
    CG_UID_V = 2,
    CG_UID_O = 3,
    CG_UID_BIAS = 4,
    CG_UID_SCALE = 5,
    CG_UID_SEED = 6,
    CG_UID_OFFSET = 7,
    CG_UID_STATS = 8,
    CG_UID_SEQ_Q = 13,
    CG_UID_SEQ_KV = 14,
    CG_UID_ALIBI = 15,
    CG_UID_SINK = 16,
    CG_UID_RAG_Q = 20,
    CG_UID_RAG_K = 21,
    CG_UID_RAG_V = 22,
    CG_UID_RAG_O = 23,
    CG_UID_RAG_STATS = 24,
    /* backward (PyTorch's dO 9, dQ 10, dK 11, dV 12; the rest fattn's) */
    CG_UID_DO = 9,
    CG_UID_DQ = 10,
    CG_UID_DK = 11,
    CG_UID_DV = 12,
    CG_UID_DBIAS = 17,
    CG_UID_DSINK = 18,
    CG_UID_DSUM = 19,
    CG_UID_DQ_ACCUM = 25,
    CG_UID_RAG_DO = 26,
    CG_UID_RAG_DQ = 27,
    CG_UID_RAG_DK = 28,
    CG_UID_RAG_DV = 29,
    CG_UID_RNG_DUMP = 30,
    CG_UID_PT_K = 31,
    CG_UID_PT_V = 32,
    CG_UID_MAX = 33,
    /* FP8 scalars: CG_UID_FP8_FIRST + (role - CG_ROLE_DESCALE_Q) */
    CG_UID_FP8_FIRST = 40,
    CG_UID_FIRST_INTERNAL = 100
};

typedef struct cg_tensor {
    int64_t uid;
    char name[40];
    cg_dtype dtype;
    int64_t dims[4], strides[4];
    bool is_virtual, by_value;
    int ragged;        /* index of its ragged-offset tensor, or -1 */
    cg_role role;
    union {
        float f;
        int32_t i;
    } value;           /* by-value tensors only */
} cg_tensor;

typedef enum cg_op_kind {
    CG_OP_MATMUL = 0,
    CG_OP_POINTWISE,
    CG_OP_REDUCTION,
    CG_OP_RNG,
    CG_OP_SDPA_FWD,
    CG_OP_RESHAPE,
    CG_OP_SDPA_BWD,
    CG_OP_SOFTMAX, /* cuDNN >= 9.21's one-op softmax: in x (and sink), out P; Stats, Max */
    CG_OP_PAGED_LOAD /* in: container, sequence lengths, page table; out: the gathered cache */
} cg_op_kind;

typedef enum cg_pw_mode {
    CG_PW_ADD = 0,
    CG_PW_SUB,
    CG_PW_MUL,
    CG_PW_DIV,
    CG_PW_MAX,
    CG_PW_EXP,
    CG_PW_LOG,
    CG_PW_IDENTITY,
    CG_PW_CMP_GE,
    CG_PW_CMP_GT,
    CG_PW_CMP_LT,
    CG_PW_LOGICAL_AND,
    CG_PW_BINARY_SELECT,
    CG_PW_GEN_INDEX
} cg_pw_mode;

typedef enum cg_red_mode { CG_RED_MAX = 0, CG_RED_ADD, CG_RED_AMAX } cg_red_mode;

/* SDPA_FWD / SDPA_BWD operand slots (DO..DV: the backward's only); the
 * SOFTMAX op uses STATS and MAX. */
enum {
    CG_SDPA_Q = 0,
    CG_SDPA_K,
    CG_SDPA_V,
    CG_SDPA_O,
    CG_SDPA_STATS,
    CG_SDPA_SCALE,
    CG_SDPA_DO,
    CG_SDPA_DQ,
    CG_SDPA_DK,
    CG_SDPA_DV,
    CG_SDPA_MAX,
    CG_SDPA_N
};

typedef struct cg_op {
    cg_op_kind kind;
    char name[40];
    int mode;          /* cg_pw_mode or cg_red_mode */
    cg_dtype math;     /* pointwise math precision / matmul, reduction compute type */
    int64_t axis;      /* GEN_INDEX axis, else -1 */
    /* tensor indices (-1 unused): pointwise x, b, t; matmul a, b; reduction x;
     * rng seed, offset; reshape x */
    int in[3];
    int out;
    int m_override, n_override, k_override; /* matmul, -1 unused */
    double bernoulli_p;                     /* rng: keep probability */
    int sdpa[CG_SDPA_N];                    /* SDPA_FWD / SDPA_BWD operands, -1 unused */
} cg_op;

#define CG_MAX_TENSORS 160
#define CG_MAX_OPS 128

typedef enum cg_route { CG_ROUTE_COMPOSITE = 0, CG_ROUTE_NATIVE } cg_route;

/* An engine config the graph is to run with instead of heuristics' choice
 * (cuDNN's engine global index and knob choices, as an engine tag names
 * them): for a behaviour heuristics do not pick, the ordered dQ of the
 * deterministic backward. Part of the plan-cache key. */
#define CG_PIN_MAX_KNOBS 8
typedef struct cg_pin {
    bool on;
    int64_t engine;
    int n;
    int32_t type[CG_PIN_MAX_KNOBS];
    int64_t value[CG_PIN_MAX_KNOBS];
} cg_pin;

typedef struct cg_graph {
    cg_route route;
    cg_pin pin;
    /* A backward whose plan must be deterministic: part of the key, so that a
     * plan chosen for a non-deterministic call (autotune's fastest, which may
     * be noted non-deterministic) never serves a deterministic one where the
     * two graphs are alike (dBias forces the direct-dQ graph on both). */
    bool deterministic;
    int nt, nops;
    int64_t next_uid;
    cg_tensor t[CG_MAX_TENSORS];
    cg_op ops[CG_MAX_OPS];
} cg_graph;

/* A forward case, resolved from fattn_fwd_params into what the graph needs
 * (cuDNN's [b, h, s, d] order for every tensor). */
typedef struct cg_fwd_desc {
    cg_dtype io;
    int64_t b, hq, hk, hv, sq, skv, d, dv;
    int64_t q_dims[4], q_strides[4];
    int64_t k_dims[4], k_strides[4]; /* paged: the container [pages, hk, page, d] */
    int64_t v_dims[4], v_strides[4]; /* paged: the container [pages, hv, page, dv] */
    int64_t o_dims[4], o_strides[4];
    /* Paged KV (a paged_kv_* layout): K and V are page containers gathered
     * by a PAGED_CACHE_LOAD each into [b, h, skv, d] (K transposed) through
     * their tables of pages_per_seq entries, ceil(skv / page) as the
     * frontend's PagedCacheLoadNode requires. */
    bool paged;
    int64_t pps_k, pps_v;
    bool ragged_q, ragged_kv;   /* THD Q (and O, Stats) / THD K, V */
    cg_dtype ragged_dtype;      /* INT32, or INT64 when offsets may not fit */
    bool padding;               /* padding mask with per-batch lengths */
    bool bias;
    int64_t bias_dims[4], bias_strides[4];
    bool alibi;
    bool sink;                  /* off-by-one or learnable softmax */
    float dropout;              /* applied probability (0: none) */
    bool stats_output;          /* Stats non-virtual (TE: always) */
    /* return_max_logit: Max [b, hq, sq, 1] float32 written beside Stats, by
     * the SOFTMAX op that replaces the softmax chain (cuDNN >= 9.21, as
     * cudnn-frontend's CompositeSDPANode lowers softmax there; the chain's
     * REDUCTION MAX cannot be an output next to Stats). Never native. */
    bool max_output;
    bool has_left, has_right;   /* diagonal band bounds */
    int64_t left_bound, right_bound; /* cuDNN's: left = TE left + 1 */
    bool bottom_right;          /* diagonal alignment after TE's rewrite */
    float attn_scale;
    bool allow_native;          /* use SDPA_FWD where PyTorch 2.11 would */
    bool rng_dump;              /* test variant: the RNG output is a real tensor */
    /* FP8 (fattn_fwd_params.fp8 set): io is Q/K/V's FP8 dtype, o_dt O's
     * (FP8, or float16/bfloat16 for TE's O_in_F16), s_dt the quantised P's. */
    bool fp8;
    cg_dtype o_dt, s_dt;
} cg_fwd_desc;

/* A backward case: the forward's description (masks, bias, sink, dropout,
 * window, ragged) plus the gradient tensors and the backward's options. */
typedef struct cg_bwd_desc {
    cg_fwd_desc f;                      /* o_dims/o_strides: O */
    int64_t do_dims[4], do_strides[4];
    int64_t dq_dims[4], dq_strides[4];
    int64_t dk_dims[4], dk_strides[4];
    int64_t dv_dims[4], dv_strides[4];
    bool dbias;                         /* dBias output (REDUCTION ADD of t3) */
    int64_t dbias_dims[4], dbias_strides[4];
    bool dsink;                         /* dSoftmaxOffset output */
    bool deterministic;                 /* set_deterministic_algorithm: direct dQ, or ordered_dq */
    bool native;                        /* the single SDPA_BWD op (fattn__cg_bwd_is_native) */
    /* deterministic through the engine's ordered dQ accumulation: the
     * accumulator graph, run with `pin` (fattn__cg_bwd_ordered_pin) */
    bool ordered_dq;
    cg_pin pin;
    /* THD Q: the frontend's max_total_seq_len_q path — Dsum and dQ_accum are ragged
     * (Stats' and dQ's strides and offsets), sized by total tokens. */
    int64_t max_total_q;                /* tokens of the THD Q buffer, else 0 */
    /* FP8 (fattn_bwd_params.fp8 set; f.fp8 too): dO's dtype (E5M2 in
     * HYBRID), the quantised dP's, and each gradient's. */
    cg_dtype do_dt, dp_dt, dq_dt, dk_dt, dv_dt;
} cg_bwd_desc;

/* The backward's description: the forward's of the same call
 * (fattn__cg_fwd_desc_for_bwd) plus the gradients' views and the backward's options.
 * g is the dispatch's geometry of the call (its Bias and SoftmaxOffset the aux
 * pack's entries); no data is read. */
fattn_status fattn__cg_bwd_desc_from_geom(const fattn_geom *g, const fattn_bwd_params *p,
                                   cg_bwd_desc *d);

/* Build the backward graph: the native SDPA_BWD op where d->native, else the
 * composite graph (cudnn-frontend 1.18 CompositeSDPABackwardNode): the Dsum
 * chain, the score recomputation with every forward option, dV, dK (GQA:
 * full-head + REDUCTION ADD), dQ through the FLOAT accumulator + IDENTITY
 * (default, and the ordered-dQ deterministic backward with its pinned
 * config) or directly (deterministic, or with dBias), dBias and dSink
 * reductions. */
fattn_status fattn__cg_build_bwd(cg_graph *g, const cg_bwd_desc *d);

/* The engine config of cuDNN's ordered (bitwise repeatable) dQ accumulation
 * on the accumulator graph for a cuDNN of version `cudnn_version` on a
 * device of compute capability cc_major (cudnn-frontend's choice on Hopper
 * from cuDNN 9.25: engine 6, 64x64 tiles, STAGES 4); false where there is
 * none, the case has dBias (the direct-dQ graph) or is FP8, or its ragged dQ
 * is packed with dK and dV (measured wrong there). */
bool fattn__cg_bwd_ordered_pin(const cg_bwd_desc *d, int64_t cudnn_version, int cc_major, cg_pin *out);

/* Whether the backward can be the single native SDPA_BWD op (cuDNN >= 9.17;
 * 9.19's operation graph refuses it, 9.26 and 9.28 take it): what the
 * native forward takes (fattn__cg_fwd_is_native's conditions), no dBias, no
 * dSoftmaxOffset, not FP8, not deterministic (its engine on the H200 repeats
 * dQ not bitwise, measured with cuDNN 9.28). The choice is the caller's
 * (d->native). */
bool fattn__cg_bwd_is_native(const cg_bwd_desc *d);

/* Bytes of the caller-side buffers the backward graph binds (Dsum, and
 * dQ_accum unless deterministic; none for the native op). */
int64_t fattn__cg_bwd_dsum_bytes(const cg_bwd_desc *d);
int64_t fattn__cg_bwd_dq_accum_bytes(const cg_bwd_desc *d);

/* The forward's description from the geometry g the dispatch made of the
 * call (fattn_engine_fwd, core/geom.h: shapes, lengths and values checked
 * there) and the call's options: cuDNN's reading of the case, no data read.
 * The support table's engine rows (float32 io, return_max_logit below 9.21,
 * ...) refuse before this runs; a dtype that gets here anyway is
 * FATTN_E_DTYPE. */
fattn_status fattn__cg_fwd_desc_from_geom(const fattn_geom *g, const fattn_fwd_params *p,
                                   cg_fwd_desc *d);
/* The same for the backward's score recomputation (no Max output). */
fattn_status fattn__cg_fwd_desc_for_bwd(const fattn_geom *g, const fattn_bwd_params *p,
                                 cg_fwd_desc *d);

/* Whether the loaded cuDNN (cudnnGetVersion()) builds the description:
 * the Max output needs the SOFTMAX op, which cuDNN builds from 9.21
 * (cudnn-frontend's UnifiedSoftmaxNode gate). The row max_logit_cudnn
 * refuses the rest before the engine runs; the engine asserts this. */
bool fattn__cg_fwd_builds_at(const cg_fwd_desc *d, int64_t cudnn_version);
#define CG_MAX_LOGIT_MIN_CUDNN 92100

/* Whether the case is one the native SDPA ops take: no mask of any kind, no
 * bias or ALiBi, no dropout, no sink, dense layouts, not FP8. */
bool fattn__cg_fwd_native_shape(const cg_fwd_desc *d);
/* Whether PyTorch 2.11 (frontend 1.18, cuDNN >= 9.13.1) would use the native
 * SDPA_FWD op: d->allow_native and fattn__cg_fwd_native_shape. */
bool fattn__cg_fwd_is_native(const cg_fwd_desc *d);

/* Build the forward graph. */
fattn_status fattn__cg_build_fwd(cg_graph *g, const cg_fwd_desc *d);

/* FP8 (graph_fp8.c). The forward description's FP8 part, called by
 * fattn__cg_fwd_desc_from_geom for an FP8 call once the shapes are resolved:
 * dtypes (s_dtype: the quantised P's), and the refusals of what cuDNN 9.19's
 * FP8 SDPA does not build. */
fattn_status fattn__cg_fp8_fwd_desc(const fattn_attn_common *a, fattn_dtype s_dtype, cg_fwd_desc *d);
/* The backward's, after fattn__cg_bwd_desc_from_geom resolved the shapes. */
fattn_status fattn__cg_fp8_bwd_desc(const fattn_bwd_params *p, cg_bwd_desc *d);
/* The FP8 backward graph (cudnn-frontend's SDPAFP8BackwardNode, per-tensor
 * scaling); fattn__cg_build_bwd calls it when d->f.fp8. */
fattn_status fattn__cg_build_bwd_fp8(cg_graph *g, const cg_bwd_desc *d);
/* Whether cuDNN builds an FP8 description on a device of architecture sm
 * (compute capability major * 10 + minor; the graph finalizes anywhere,
 * heuristics then find no engine). What it does not build there are the
 * rows fp8_arch_cudnn and fp8_*_sm90_cudnn, which the dispatch refuses at
 * the engine's sm (fattn_engine_sm) before the engine runs; the engine
 * asserts this. */
bool fattn__cg_fp8_arch_builds(const cg_fwd_desc *d, int sm, bool backward);
/* Whether a graph is an FP8 one (an FP8 tensor in it). */
bool fattn__cg_graph_is_fp8(const cg_graph *g);

/* Text dump: one line per tensor ("T ..."), then one per op ("OP ...").
 * with_values adds by-value scalars' values; the plan-cache key is the dump
 * without them (values are read at execution). Returns a malloc'd string
 * (NULL on allocation failure). */
char *fattn__cg_dump(const cg_graph *g, bool with_values);

/* The plan cache's key: the graph's tensors (uid, dtype, dims, strides,
 * virtual, by-value, ragged offset, role) and operations (every attribute
 * and operand) as bytes, with their hash; names and by-value scalars'
 * values are not in it (names reach no descriptor, values are read at
 * execution), exactly what the dump without values leaves out besides the
 * names. No allocation: the caller's buffer holds the largest graph. */
#define CG_KEY_MAX (40 * 1024)
typedef struct cg_key_buf {
    size_t len;
    uint64_t hash;
    unsigned char b[CG_KEY_MAX];
} cg_key_buf;
void fattn__cg_key(const cg_graph *g, cg_key_buf *out);
/* Whether a's bytes are the len bytes at b whose hash is hash. */
bool fattn__cg_key_equal(const cg_key_buf *a, const unsigned char *b, size_t len, uint64_t hash);

/* Names, for dumps and messages. */
const char *fattn__cg_dtype_name(cg_dtype t);
const char *fattn__cg_pw_mode_name(cg_pw_mode m);
const char *fattn__cg_red_mode_name(cg_red_mode m);
const char *fattn__cg_op_kind_name(cg_op_kind k);
const char *fattn__cg_role_name(cg_role r);

/* Index of the tensor with uid `uid`, or -1. */
int fattn__cg_find_uid(const cg_graph *g, int64_t uid);

#endif /* FATTN_CUDNN_GRAPH_H */
