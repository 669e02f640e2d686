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

#include "fattn/api.h"

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

#include "fattn/te_releases.h"

#define FATTN_TE_NOSEP_()
#define FATTN_TE_IDX_(id, name, rel, cpp) FATTN_TE_RULES_IDX_##id,
enum { FATTN_TE_RELEASES(FATTN_TE_IDX_, FATTN_TE_NOSEP_) FATTN_TE_RULES_COUNT };
#undef FATTN_TE_IDX_
/* FATTN_TE_RULES_<id>: one bit per release, oldest lowest. */
#define FATTN_TE_BIT_(id, name, rel, cpp) FATTN_TE_RULES_##id = 1u << FATTN_TE_RULES_IDX_##id,
enum { FATTN_TE_RELEASES(FATTN_TE_BIT_, FATTN_TE_NOSEP_) };
#undef FATTN_TE_BIT_
#define FATTN_TE_RULES_ALL ((1u << FATTN_TE_RULES_COUNT) - 1u)
#define FATTN_TE_RULES_NEWEST (1u << (FATTN_TE_RULES_COUNT - 1))
/* "2.19, 2.20" and "2.19|2.20": string literals, for messages and usage. */
#define FATTN_TE_NAME_(id, name, rel, cpp) name
#define FATTN_TE_COMMA_() ", "
#define FATTN_TE_BAR_() "|"
#define FATTN_TE_RULES_KNOWN FATTN_TE_RELEASES(FATTN_TE_NAME_, FATTN_TE_COMMA_)
#define FATTN_TE_RULES_CHOICES FATTN_TE_RELEASES(FATTN_TE_NAME_, FATTN_TE_BAR_)

/* The cuDNN version the TE rules are evaluated for when the query does not
 * name one: the reference platform's, 9.19.0 (cudnnGetVersion's 91900). */
#define FATTN_SUPPORT_CUDNN_REFERENCE 91900
/* The GPU architecture likewise (compute capability major * 10 + minor):
 * the reference platform's sm_90. */
#define FATTN_SUPPORT_SM_REFERENCE 90

/* A release's name ("2.19") -> its FATTN_TE_RULES_* bit. Anything else is
 * FATTN_E_INVALID_ARG, with a message listing the known names. */
FATTN_API fattn_status fattn_te_rules_parse(const char *s, unsigned *out);
/* One bit -> its name ("2.19"); NULL for anything else. */
FATTN_API const char *fattn_te_rules_name(unsigned one);
/* One bit -> the release it stands for ("2.19.0"); NULL otherwise. */
FATTN_API const char *fattn_te_rules_release(unsigned one);

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
    bool direct_call;            /* FusedAttnFunc called directly, not by DotProductAttention:
                                  * DPA's check_set_window_size rows (window_mask,
                                  * window_not_normalised) do not apply */
    /* Read by routing rules only (the front ends leave them at their
     * defaults): */
    int64_t b;                   /* batch size */
    int64_t bias_shape[3];       /* the bias tensor's [b|1, h|1, sq|1] (its first three dims) */
    bool deterministic;          /* NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 */
    bool bias_requires_grad;     /* the bias tensor needs dBias */
    unsigned te_rules;           /* the FATTN_TE_RULES_* bit whose rules apply */
    long cudnn_version;          /* the platform's cuDNN (91900 = 9.19.0); init: the
                                  * reference platform's, FATTN_SUPPORT_CUDNN_REFERENCE */
    bool at_backward;            /* a backward call: the AT_BACKWARD rows apply too */
    /* The engine's own cuDNN, for the engine's gap rows (status
     * FATTN_E_UNSUPPORTED): whether a case is valid for TE is decided for
     * the reference platform (cudnn_version), whether the engine at hand
     * runs it for the cuDNN it loaded (fattn_engine_cudnn_version). 0: as
     * cudnn_version. */
    long engine_cudnn_version;
    /* The GPU architecture, as the cuDNN pair above: sm (init: the reference
     * platform's, FATTN_SUPPORT_SM_REFERENCE) for TE's rows, engine_sm (the
     * engine's device, fattn_engine_sm; 0: as sm) for the engine's gaps. */
    int sm, engine_sm;
    /* Read by engine gap rows only, filled by the engine dispatch (the front
     * ends leave them at their defaults, which no row refuses): */
    fattn_dtype o_dtype;         /* O's dtype (FATTN_DTYPE_INVALID: not told) */
    bool bottom_right_diagonal;  /* the band's alignment the engine is given */
} fattn_support_query;

/* Engines a rule applies to (bit set); the registry gives each engine kind
 * its bit (fattn_engine_support_bit). TE-validity rules apply to all. */
#define FATTN_SUPPORT_ENGINE_CPU 1u
#define FATTN_SUPPORT_ENGINE_CUDNN 2u
#define FATTN_SUPPORT_ENGINE_ALL (FATTN_SUPPORT_ENGINE_CPU | FATTN_SUPPORT_ENGINE_CUDNN)

typedef enum fattn_support_class {
    FATTN_SUPPORT_REFUSAL = 0, /* FusedAttnFunc (or the engine) refuses */
    FATTN_SUPPORT_ROUTING = 1  /* DotProductAttention would choose another backend */
} fattn_support_class;

/* When a refusal row is checked: when the front ends are called (before
 * anything runs, fattn_support_check) or only when an engine's backward is
 * (the dispatch, fattn_support_check_engine with q->at_backward): a gap of
 * the engine's backward alone must not cost the forward's comparison. */
typedef enum fattn_support_stage {
    FATTN_SUPPORT_AT_CALL = 0,
    FATTN_SUPPORT_AT_BACKWARD = 1
} fattn_support_stage;

/* Where a rule is in one TE release (what a message cites). */
typedef struct fattn_support_cite {
    const char *rev;  /* the release ("2.20.2"), or for C++ the revision read
                       * for it (the releases table's cpp_rev) */
    const char *file; /* path in TE */
    int line;         /* first line of the mirrored code */
} fattn_support_cite;

/* A row's citation from release `since` on, until the row's next one. */
typedef struct fattn_support_where {
    unsigned since;   /* FATTN_TE_RULES_* bit; 0 ends the list */
    const char *file; /* path in TE; a ".cpp" is cited at the release's cpp_rev */
    int line;
} fattn_support_where;

#define FATTN_SUPPORT_MAX_WHERE 4

typedef struct fattn_support_rule {
    const char *id;        /* stable, e.g. "pre_scale_bias" */
    bool (*refuses)(const fattn_support_query *q); /* true: the rule fails */
    fattn_status status;   /* what a refusal returns (FATTN_OK for routing rules) */
    const char *message;
    unsigned engines;      /* FATTN_SUPPORT_ENGINE_* bit set */
    fattn_support_class cls;
    fattn_support_stage stage;
    /* The TE releases it holds for, first and last (FATTN_TE_RULES_* bits;
     * te_last 0: every release from te_first on, newer ones included). */
    unsigned te_first, te_last;
    /* The cuDNN versions it holds for: [cudnn_from, cudnn_below), 0 for no
     * bound (91900 = 9.19.0). */
    long cudnn_from, cudnn_below;
    /* The GPU architectures it holds for: [sm_from, sm_below) in compute
     * capability major * 10 + minor (90 = sm_90), 0 for no bound. */
    int sm_from, sm_below;
    /* Its citations, oldest first; the first one's since is te_first. */
    fattn_support_where where[FATTN_SUPPORT_MAX_WHERE];
} fattn_support_rule;

/* Whether r holds for release bit `one` (its TE range). */
FATTN_API bool fattn_support_rule_holds(const fattn_support_rule *r, unsigned one);

FATTN_API void fattn_support_query_init(fattn_support_query *q);

/* The refusal rows and their number. */
FATTN_API const fattn_support_rule *fattn_support_rules(int *count);
/* A refusal row by id; NULL if none. */
FATTN_API const fattn_support_rule *fattn_support_rule_find(const char *id);
/* The routing rows and their number. */
FATTN_API const fattn_support_rule *fattn_support_routes(int *count);
/* A routing row by id; NULL if none. */
FATTN_API const fattn_support_rule *fattn_support_route_find(const char *id);
/* The citation of `r` for release bit `one` into *out; false (and *out
 * zeroed) where r does not hold for it. */
FATTN_API bool fattn_support_rule_cite(const fattn_support_rule *r, unsigned one,
                                       fattn_support_cite *out);

/* Check `q` for `engine` (one FATTN_SUPPORT_ENGINE_* bit) against the
 * refusal rows that hold for q->te_rules, q->cudnn_version and q->sm (an
 * engine's gap at q->engine_cudnn_version and q->engine_sm where set), at the call
 * (not the AT_BACKWARD rows). Returns FATTN_OK, or the first refusing row's
 * status with fattn_error's message
 *   "rule <id>: <message> (TE <rev> <file>:<line>)"
 * — a row that applies to some releases only adds "; TE <names> rules only"
 * inside the parentheses — and *failed (may be NULL) pointing at the row.
 * An engine that is not one bit, or a te_rules that is not one release, is
 * FATTN_E_INVALID_ARG. */
FATTN_API fattn_status fattn_support_check(const fattn_support_query *q, unsigned engine,
                                           const fattn_support_rule **failed);
/* The engine's own gaps only (rows with status FATTN_E_UNSUPPORTED), the
 * AT_BACKWARD ones too when q->at_backward: what the engine dispatch checks
 * before an engine runs (TE's own refusals are the front ends'). */
FATTN_API fattn_status fattn_support_check_engine(const fattn_support_query *q, unsigned engine,
                                                  const fattn_support_rule **failed);

/* The routing rows q trips under q->te_rules, in table order: up to `max`
 * of them into out (may be NULL with max 0); returns how many trip. */
FATTN_API int fattn_support_routed(const fattn_support_query *q, const fattn_support_rule **out, int max);

/* One line about q (empty when nothing applies), for reports:
 *   "DPA <name> would not route here: rule <id>, <file>:<line>[; rule ...]"
 * for the routing rows q trips under q->te_rules, and, when q->te_rules is
 * not the newest, "TE <newer> rules only: ..." for what the newest rules
 * would route elsewhere or refuse and the selected ones do not. Truncated
 * to fit n (n > 0). */
FATTN_API void fattn_support_route_note(const fattn_support_query *q, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_SUPPORT_H */
