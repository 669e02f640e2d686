/* harness/run/fault_engine.h — a test-only engine wrapper that injects
 * faults into an engine's outputs (-Dtesting=true builds only:
 * FATTN_TESTING; a shipped build has none of it).
 *
 * No input makes an engine write a NaN into Max or Stats, or an Inf into a
 * row of O, yet the front ends reduce over those outputs (max_logit is
 * torch.amax over Max, current scaling's O quantizer an amax over O) and
 * hand them on (Stats to the backward). The wrapper lets the engine it
 * wraps run every call as it would, then writes a chosen value into a
 * chosen head's first defined row of a chosen output of an executing
 * forward: Max, Stats or O (the whole row of O). It can also make the first
 * backward call fail, as an engine fault would, before the engine runs, so
 * that what a front end does after a failed backward shows. Support
 * questions, the cuDNN version and the report are the wrapped engine's, so
 * the dispatch refuses what that engine cannot run.
 *
 * "First defined row": query row 0 of the first batch whose query length is
 * not zero (cu_seqlens_q; batch 0 without it), at that batch's first token
 * for THD (cu_seqlens_q_padded's offset where given).
 */
#ifndef FH_HARNESS_FAULT_ENGINE_H
#define FH_HARNESS_FAULT_ENGINE_H

#include <stdbool.h>

#include "fattn/engine.h"

typedef enum fh_fault_output {
    FH_FAULT_MAX = 0, /* Max (return_max_logit): max_logit's source */
    FH_FAULT_STATS,      /* Stats: the softmax statistics backward reads */
    FH_FAULT_O           /* O: every element of the row */
} fh_fault_output;

typedef struct fh_fault {
    fh_fault_output output;
    float value;  /* NaN, +Inf, -Inf (or any value) */
    int64_t head; /* a head the output has (others are ignored) */
} fh_fault;

#define FH_FAULTS_MAX 8

typedef struct fh_fault_plan {
    fh_fault f[FH_FAULTS_MAX];
    int n;
    bool fail_first_backward; /* the first backward call fails (FATTN_E_INTERNAL) */
} fh_fault_plan;

/* The plan from text: comma-separated items OUTPUT=VALUE[@HEAD] (OUTPUT
 * max|stats|o, VALUE nan|inf|-inf, HEAD default 0) and bwd=fail, e.g.
 * "max=nan,max=inf@1,o=nan,bwd=fail". FATTN_E_INVALID_ARG naming the item
 * that is not one. */
fattn_status fh_fault_plan_parse(const char *text, fh_fault_plan *plan);

/* Wrap `inner` in the plan. `name` is the wrapper's engine name (reports and
 * provenance). Freeing the wrapper calls close_inner(inner) when it is not
 * NULL (the wrapper owns the engine), else leaves it open (borrowed). */
fattn_status fh_fault_engine_wrap(fattn_engine *inner, const fh_fault_plan *plan,
                                     const char *name, void (*close_inner)(fattn_engine *),
                                     fattn_engine **out);
/* How many faults the wrapper wrote (rows, over every forward), and whether
 * it failed a backward. */
int fh_fault_engine_writes(const fattn_engine *e);
bool fh_fault_engine_failed_backward(const fattn_engine *e);

#endif /* FH_HARNESS_FAULT_ENGINE_H */
