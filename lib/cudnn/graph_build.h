/* The graph builder's primitives, shared by graph.c, graph_fwd.c and
 * graph_bwd.c (not installed). Each adds to bd->g in call order (the order
 * is part of the graph: uids and the text dump follow it); after the first
 * failure they do nothing and bd->st keeps the error. */
#ifndef FATTN_CUDNN_GRAPH_BUILD_H
#define FATTN_CUDNN_GRAPH_BUILD_H

#include "cudnn/graph.h"

typedef struct builder {
    cg_graph *g;
    fattn_status st;
} builder;

/* [1,1,1,1]: dims and strides of scalars and per-call constants. */
extern const int64_t fattn__cgb_one4[4];

/* A 4-D (or THD 3-D) view in cuDNN's [b, h, s, d] order. */
fattn_status fattn__cgb_to_bhsd(const fattn_tensor *t, fattn_qkv_format f, const char *name,
                         int64_t b, int64_t smax, int64_t dims[4], int64_t strides[4]);
void fattn__cgb_contiguous(const int64_t dims[4], int64_t strides[4]);
int fattn__cgb_add_tensor(builder *bd, const char *name, cg_dtype dt, const int64_t dims[4],
                   const int64_t strides[4], bool is_virtual, bool by_value, cg_role role,
                   int64_t uid);
int fattn__cgb_virt(builder *bd, const char *name, cg_dtype dt, const int64_t dims[4]);
int fattn__cgb_scalar_f(builder *bd, const char *name, float v, int64_t uid);
int fattn__cgb_scalar_i(builder *bd, const char *name, int32_t v);
cg_op *fattn__cgb_add_op(builder *bd, cg_op_kind kind, const char *name);
/* Pointwise op into a given output. */
void fattn__cgb_pw_into(builder *bd, const char *name, cg_pw_mode mode, cg_dtype math, int64_t axis,
                 int x, int b, int t, int out);
/* Pointwise op with a new virtual output: dims broadcast over x and b. */
int fattn__cgb_pw(builder *bd, const char *name, cg_pw_mode mode, cg_dtype math, int64_t axis,
           int x, int b, int t, cg_dtype out_dt);
void fattn__cgb_red_into(builder *bd, const char *name, cg_red_mode mode, int x, int out);
int fattn__cgb_ragged_tensor(builder *bd, const char *name, cg_dtype dt, int64_t b, cg_role role,
                      int64_t uid);
int fattn__cgb_score_modifiers(builder *bd, const cg_fwd_desc *d, int s, int seq_q, int seq_kv);
/* The diagonal band (causal / sliding window) on s: the forward applies it
 * to the modified scores, the backward after subtracting Stats. */
int fattn__cgb_band_mask(builder *bd, const cg_fwd_desc *d, int s, int seq_q, int seq_kv);

/* FP8 (graph_fp8.c). The [1,1,1,1] float32 device tensor of an FP8 role
 * (CG_ROLE_DESCALE_Q ... CG_ROLE_AMAX_DV), added on first use. */
int fattn__cgb_fp8_scalar(builder *bd, cg_role role);
/* AMAX reduction of x into the role's scalar. */
void fattn__cgb_fp8_amax(builder *bd, const char *name, int x, cg_role role);
/* cudnn-frontend's matmul_fp8 into tensor c: matmul (a GQA head sum when a
 * and b have more heads than c), descale_a, descale_b, scale_c, amax_c. */
void fattn__cgb_fp8_matmul(builder *bd, const char *name, int a, int b, int c, cg_role descale_a,
                    cg_role descale_b, cg_role scale_c, cg_role amax_c, int m_ov, int n_ov,
                    int k_ov);
/* The scores times descale_q and descale_k. */
int fattn__cgb_fp8_descale_qk(builder *bd, int s);
/* amax_s of P, then P * scale_s as the FP8 S dtype. */
int fattn__cgb_fp8_quantize_p(builder *bd, const cg_fwd_desc *d, int p);

#endif /* FATTN_CUDNN_GRAPH_BUILD_H */
