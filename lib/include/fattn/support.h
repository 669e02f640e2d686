/* fattn/support.h — the support table: is a case valid for TE, can an engine
 * run it, and would TE's DotProductAttention route it to FusedAttention?
 *
 * The table is data (lib/core/support.c): one row per rule, each naming the
 * TransformerEngine releases it applies to and, for each, the source line it
 * mirrors; evaluated for the reference platform sm_90 + cuDNN 9.19. Rows
 * come in two classes:
 *
 *  - refusals (fattn_support_rules): TE's FusedAttnFunc itself refuses the
 *    case (the C++ backend selection, the Python checks on its path) or an
 *    engine cannot run it. A refusal returns one of three statuses:
 *      FATTN_E_INVALID_CASE     TE itself refuses the configuration;
 *      FATTN_E_UNSUPPORTED      valid for TE, but the named engine cannot run it;
 *      FATTN_E_UNSAFE_TE_QUIRK  TE would write out of bounds (bias + sink dBias).
 *    Rows are checked in table order; the first that refuses wins. Both
 *    front ends call fattn_support_check before anything runs.
 *
 *  - routing rules (fattn_support_routes): DotProductAttention's backend
 *    filters (get_attention_backend in utils.py, FusedAttention.forward's
 *    asserts) would not choose FusedAttention, but FusedAttnFunc — a public
 *    autograd function, what fattn verifies — still runs the case when
 *    called directly. They never refuse; fattn_support_route_note says
 *    which of them a case trips.
 *
 * Which release's rules apply is the query's te_rules (default: the newest).
 */
#ifndef FATTN_SUPPORT_H
#define FATTN_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fattn/dtype.h"
#include "fattn/fp8.h"
#include "fattn/status.h"
#include "fattn/te.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TE releases whose rules the table knows (bit set). */
#define FATTN_TE_RULES_2_19 1u /* TransformerEngine 2.19.0 */
#define FATTN_TE_RULES_2_20 2u /* TransformerEngine 2.20.2 */
#define FATTN_TE_RULES_ALL (FATTN_TE_RULES_2_19 | FATTN_TE_RULES_2_20)
#define FATTN_TE_RULES_NEWEST FATTN_TE_RULES_2_20
#define FATTN_TE_RULES_COUNT 2 /* index 0: 2.19, 1: 2.20 (fattn_support_rule.cite) */
#define FATTN_TE_RULES_KNOWN "2.19, 2.20"

/* "2.19" or "2.20" -> one FATTN_TE_RULES_* bit. Anything else is
 * FATTN_E_INVALID_ARG, with a message listing the known names. */
fattn_status fattn_te_rules_parse(const char *s, unsigned *out);
/* One bit -> "2.19" / "2.20"; NULL for anything else. */
const char *fattn_te_rules_name(unsigned one);
/* One bit -> the release it stands for, "2.19.0" / "2.20.2"; NULL otherwise. */
const char *fattn_te_rules_release(unsigned one);

/* Everything a rule may look at. Fill with fattn_support_query_init first
 * (a plain valid f16 bshd no-mask query, newest rules) and then set what
 * the case has. */
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
    fattn_fp8_recipe fp8_recipe; /* the QKV quantizer's recipe (fp8 only) */
    bool cpu_offload;            /* TE's CPU offload v1 is on for this layer */
    /* Read by routing rules only (the front ends leave them at their
     * defaults): */
    int64_t b;                   /* batch size */
    int64_t bias_shape[3];       /* the bias tensor's [b|1, h|1, sq|1] (its first three dims) */
    bool deterministic;          /* NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 */
    bool bias_requires_grad;     /* the bias tensor needs dBias */
    unsigned te_rules;           /* the FATTN_TE_RULES_* bit whose rules apply */
} fattn_support_query;

/* Engines a rule applies to (bit set). TE-validity rules apply to all. */
#define FATTN_SUPPORT_ENGINE_CPU 1u
#define FATTN_SUPPORT_ENGINE_CUDNN 2u
#define FATTN_SUPPORT_ENGINE_ALL (FATTN_SUPPORT_ENGINE_CPU | FATTN_SUPPORT_ENGINE_CUDNN)

typedef enum fattn_support_class {
    FATTN_SUPPORT_REFUSAL = 0, /* FusedAttnFunc (or the engine) refuses */
    FATTN_SUPPORT_ROUTING = 1  /* DotProductAttention would choose another backend */
} fattn_support_class;

/* Where a rule is in one TE release. */
typedef struct fattn_support_cite {
    const char *rev;  /* "2.19.0", "2.20.2", or the commit read where the
                       * release's file is not public (C++ of 2.20.2) */
    const char *file; /* path in TE */
    int line;         /* first line of the mirrored code */
} fattn_support_cite;

typedef struct fattn_support_rule {
    const char *id;        /* stable, e.g. "pre_scale_bias" */
    bool (*refuses)(const fattn_support_query *q); /* true: the rule fails */
    fattn_status status;   /* what a refusal returns (FATTN_OK for routing rules) */
    const char *message;
    unsigned engines;      /* FATTN_SUPPORT_ENGINE_* */
    fattn_support_class cls;
    unsigned versions;     /* FATTN_TE_RULES_* it applies to */
    /* per release, by FATTN_TE_RULES_* index; file NULL where it does not apply */
    fattn_support_cite cite[FATTN_TE_RULES_COUNT];
} fattn_support_rule;

void fattn_support_query_init(fattn_support_query *q);

/* The refusal rows and their number. */
const fattn_support_rule *fattn_support_rules(int *count);
/* A refusal row by id; NULL if none. */
const fattn_support_rule *fattn_support_rule_find(const char *id);
/* The routing rows and their number. */
const fattn_support_rule *fattn_support_routes(int *count);
/* A routing row by id; NULL if none. */
const fattn_support_rule *fattn_support_route_find(const char *id);
/* The citation of `r` for release bit `one`; NULL where it does not apply. */
const fattn_support_cite *fattn_support_rule_cite(const fattn_support_rule *r, unsigned one);

/* Check `q` for `engine` ("cpu" or "cudnn") against the refusal rows that
 * apply to q->te_rules. Returns FATTN_OK, or the first refusing row's
 * status with fattn_error's message
 *   "rule <id>: <message> (TE <rev> <file>:<line>)"
 * — a row that applies to some releases only adds "; TE <names> rules only"
 * inside the parentheses — and *failed (may be NULL) pointing at the row.
 * An unknown engine name or te_rules value is FATTN_E_INVALID_ARG. */
fattn_status fattn_support_check(const fattn_support_query *q, const char *engine,
                                 const fattn_support_rule **failed);

/* The routing rows q trips under q->te_rules, in table order: up to `max`
 * of them into out (may be NULL with max 0); returns how many trip. */
int fattn_support_routed(const fattn_support_query *q, const fattn_support_rule **out, int max);

/* One line about q (empty when nothing applies), for reports:
 *   "DPA <name> would not route here: rule <id>, <file>:<line>[; rule ...]"
 * for the routing rows q trips under q->te_rules, and, when q->te_rules is
 * not the newest, "TE <newer> rules only: ..." for what the newest rules
 * would route elsewhere or refuse and the selected ones do not. Truncated
 * to fit n (n > 0). */
void fattn_support_route_note(const fattn_support_query *q, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_SUPPORT_H */
