/* fattn/support.h — the support table: is a case valid for TE, and can an
 * engine run it?
 *
 * The table is data (lib/core/support.c): one row per rule, each citing the
 * TransformerEngine source line it mirrors (TE commit d0067d0), evaluated for
 * the reference platform sm_90 + cuDNN 9.19. A row refuses a query with one
 * of three statuses:
 *   FATTN_E_INVALID_CASE     TE itself refuses the configuration;
 *   FATTN_E_UNSUPPORTED      valid for TE, but the named engine cannot run it;
 *   FATTN_E_UNSAFE_TE_QUIRK  TE would write out of bounds (bias + sink dBias).
 * Rows are checked in table order; the first that refuses wins. Both front
 * ends call fattn_support_check before anything runs.
 */
#ifndef FATTN_SUPPORT_H
#define FATTN_SUPPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "fattn/dtype.h"
#include "fattn/status.h"
#include "fattn/te.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Everything a rule may look at. Fill with fattn_support_query_init first
 * (a plain valid f16 bshd no-mask query) and then set what the case has. */
typedef struct fattn_support_query {
    fattn_dtype q_dtype, kv_dtype;
    bool has_bias_tensor;        /* an attn_bias tensor was passed */
    fattn_dtype bias_dtype;      /* its dtype (ignored without one) */
    fattn_qkv_layout layout;
    fattn_bias_type bias_type;
    fattn_mask_type mask_type;
    fattn_softmax_type softmax_type;
    float dropout;
    int64_t h, hg, sq, skv, d_qk, d_v;
    int64_t window_left, window_right; /* as passed to FusedAttnFunc */
    bool is_training;
    bool return_max_logit;
    bool fp8;                    /* FP8 execution requested */
} fattn_support_query;

/* Engines a rule applies to (bit set). TE-validity rules apply to all. */
#define FATTN_SUPPORT_ENGINE_CPU 1u
#define FATTN_SUPPORT_ENGINE_CUDNN 2u
#define FATTN_SUPPORT_ENGINE_ALL (FATTN_SUPPORT_ENGINE_CPU | FATTN_SUPPORT_ENGINE_CUDNN)

typedef struct fattn_support_rule {
    const char *id;        /* stable, e.g. "pre_scale_bias" */
    bool (*refuses)(const fattn_support_query *q); /* true: the rule fails */
    fattn_status status;   /* what a refusal returns */
    const char *message;
    const char *te_file;   /* path in TE at commit d0067d0 */
    int te_line;           /* first line of the mirrored code */
    unsigned engines;      /* FATTN_SUPPORT_ENGINE_* */
} fattn_support_rule;

void fattn_support_query_init(fattn_support_query *q);

/* The table and its length. */
const fattn_support_rule *fattn_support_rules(int *count);
/* A row by id; NULL if none. */
const fattn_support_rule *fattn_support_rule_find(const char *id);

/* Check `q` for `engine` ("cpu" or "cudnn"). Returns FATTN_OK, or the first
 * refusing row's status with fattn_error's message
 *   "rule <id>: <message> (TE <file>:<line>)"
 * and *failed (may be NULL) pointing at the row. An unknown engine name is
 * FATTN_E_INVALID_ARG. */
fattn_status fattn_support_check(const fattn_support_query *q, const char *engine,
                                 const fattn_support_rule **failed);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_SUPPORT_H */
