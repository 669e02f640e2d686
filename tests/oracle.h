/* The float64 oracle: docs/numerics.md written as plain loops.
 *
 * This is the definition both engines are held to, not an engine: every
 * quantity is a double, there is no intermediate rounding, exp/log are libm's
 * double functions, and the loops are the formulas of docs/numerics.md in the
 * order they are written there. It reads a case (tests/cases.h) and its
 * buffers — q, k, v, bias, softmax_offset and dO through their strided views
 * (fattn_load_f32), cu_seqlens, the padded offsets and rng_state from their
 * int32/int64 tensors — and knows nothing of lib/cpu.
 *
 * Shapes (b, h, hg, sq, skv, d, dv as in cases.h; t_q/t_kv the token counts
 * of a THD tensor, i.e. its dim 0):
 *   q   sbhd [sq,b,h,d] | bshd [b,sq,h,d] | bhsd [b,h,sq,d] | thd [t_q,h,d]
 *   k   the kv format with skv / t_kv, hg heads, head dim d
 *   v   as k with head dim dv
 *   O   q's format with head dim dv;  dO the same
 *   Bias [bias_b, bias_h, bias_sq, skv];  SoftmaxOffset [1,h,1,1]
 *   Stats, Max  [b,h,sq,1], or [t_q,h,1] when q is THD
 * Every result array is a double array in C order of the *logical* shape of
 * the engine output it defines (the list above; dQ/dK/dV have q/k/v's shape,
 * dBias the bias shape, dSoftmaxOffset [1,h,1,1]). Elements outside an
 * output's defined region (engine.h, "Defined regions") are 0 in the oracle's
 * arrays; oracle_defined() tells the regions apart.
 */
#ifndef FATTN_TEST_ORACLE_H
#define FATTN_TEST_ORACLE_H

#include <stdbool.h>
#include <stdint.h>

#include "cases.h"

/* Optional double-precision replacements of the inputs. A non-NULL array is
 * read instead of the tensor: C order of that tensor's logical shape (the
 * view's shape), e.g. q as [sq,b,h,d] for sbhd, offset as [1,h,1,1]. Used to
 * perturb inputs for finite differences. NULL members read the tensors. */
typedef struct oracle_inputs {
    const double *q, *k, *v;
    const double *bias;
    const double *softmax_offset;
    const double *d_o;
    /* The dropout keep decisions to use instead of fattn's Philox mapping:
     * [b, h, sq, skv] in C order, nonzero = kept (an engine with its own
     * dropout bits, e.g. cuDNN's mask captured by
     * fattn_cudnn_capture_dropout_mask). NULL: the CPU mapping. */
    const float *keep;
} oracle_inputs;

/* The oracle's outputs; each array is NULL until computed, or when the case
 * has no such output (max without return_max_logit, dbias without
 * post_scale_bias, d_softmax_offset with vanilla softmax). */
typedef struct oracle_result {
    double *o;                  /* O's logical shape */
    double *stats;              /* [b,h,sq] or [t_q,h] (the trailing 1 dropped) */
    double *max;                /* as stats; return_max_logit only */
    double *dq, *dk, *dv;       /* q / k / v logical shapes */
    double *d_bias;             /* bias shape */
    double *d_softmax_offset;   /* [h] */
    int64_t n_o, n_stats, n_dq, n_dk, n_dv, n_bias, n_offset; /* element counts */
} oracle_result;

/* Which output an index refers to, for oracle_defined(). */
typedef enum oracle_output {
    ORACLE_O,
    ORACLE_STATS,
    ORACLE_MAX,
    ORACLE_DQ,
    ORACLE_DK,
    ORACLE_DV,
    ORACLE_DBIAS,
    ORACLE_DOFFSET
} oracle_output;

/* The softmax scale fattn uses when the caller gives none:
 * (float)(1.0 / sqrt((double)d_qk)), as a double. */
double oracle_scale(const tcase *c);

/* Forward: O, Stats and (return_max_logit) Max of docs/numerics.md
 * "Forward", into r (allocated here; free with oracle_result_free).
 * Dropout applies when c->training and c->dropout > 0.
 * in may be NULL. Returns FATTN_OK, or FATTN_E_NOMEM / FATTN_E_INVALID_ARG. */
fattn_status oracle_forward(const tcase *c, const tcase_buffers *buf,
                            const oracle_inputs *in, oracle_result *r);

/* Backward: dQ, dK, dV, dBias, dSoftmaxOffset of docs/numerics.md
 * "Backward". O and Stats are the ones the backward is *given*:
 *   saved = false: r->o and r->stats from oracle_forward on the same inputs
 *                  (the exact math end to end, for finite differences);
 *   saved = true:  buf->o and buf->stats as an engine stored them (the
 *                  float32 Stats and io-dtype O that engine's backward read).
 * dO comes from in->d_o or buf->d_o. */
fattn_status oracle_backward(const tcase *c, const tcase_buffers *buf,
                             const oracle_inputs *in, bool saved,
                             oracle_result *r);

void oracle_result_free(oracle_result *r);

/* One query row's logits after bias / alibi, for tests of the identities:
 * s[j] and kept[j] for every j < skv (s[j] = -inf where not kept). Returns
 * the number of kept keys. (bi, n, i) as in numerics.md; i < sq_b. */
int oracle_row_logits(const tcase *c, const tcase_buffers *buf,
                      const oracle_inputs *in, int bi, int n, int i, double *s,
                      bool *kept);

/* The dropout keep decision of logit (bi, n, i, j) under the case's
 * rng_state (true when dropout is off). */
bool oracle_keep(const tcase *c, const tcase_buffers *buf, int bi, int n, int i,
                 int j);

/* Whether element idx (a multi-index of the output's logical shape, the
 * Stats/Max index including its trailing 1) lies in the output's defined
 * region (engine.h). */
bool oracle_defined(const tcase *c, const tcase_buffers *buf,
                    oracle_output which, const int64_t *idx);

/* Actual lengths and THD token offsets of batch bi, as the oracle reads them
 * from the cu_seqlens tensors (padding masks) or the padded max. */
int oracle_len_q(const tcase *c, const tcase_buffers *buf, int bi);
int oracle_len_kv(const tcase *c, const tcase_buffers *buf, int bi);
int64_t oracle_off_q(const tcase *c, const tcase_buffers *buf, int bi);
int64_t oracle_off_kv(const tcase *c, const tcase_buffers *buf, int bi);

/* The standard ALiBi slope of head n of h (numerics.md step 2). */
double oracle_alibi_slope(int n, int h);

#endif /* FATTN_TEST_ORACLE_H */
