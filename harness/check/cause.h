/* harness/check/cause.h — why a case differs, not only that it does: its
 * differences placed in run order and the earliest one named
 * (docs/verify.md, "The earliest cause").
 *
 * A case run goes inputs -> engine_call/forward -> forward (-> returned)
 * -> save_ctx -> engine_call/backward -> backward. Whatever differs in an
 * earlier state reaches the later ones, so the earliest differing state of
 * the first check that differs is where to look first; the states before
 * it that both sides hold were equal. Differences are listed in that
 * order: by check (in the order run), by state in run order, within a
 * state the tensors before the attributes (an output's difference before
 * the ctx attribute that explains it is listed beside it, not hidden
 * under it), then in the order the comparison found them.
 */
#ifndef FH_HARNESS_CAUSE_H
#define FH_HARNESS_CAUSE_H

#include <stddef.h>

#include "verify.h"

/* The states in run order, as a difference's path places it. */
typedef enum fh_verify_state {
    FH_VERIFY_STATE_CASE = 0, /* the case group's own attributes (@spec, @refused_*) */
    FH_VERIFY_STATE_INPUTS,
    FH_VERIFY_STATE_CALL_FWD, /* engine_call/forward, forward.2, ... */
    FH_VERIFY_STATE_FORWARD,
    FH_VERIFY_STATE_RETURNED, /* what the forward call returned (verify's wrapper run) */
    FH_VERIFY_STATE_SAVE_CTX,
    FH_VERIFY_STATE_CALL_BWD,
    FH_VERIFY_STATE_BACKWARD,
    FH_VERIFY_STATE_OTHER,       /* anything else (a front end's name, a check's own) */
    FH_VERIFY_NSTATES
} fh_verify_state;

/* The state a difference's path is in ("backward/dq", "save_ctx@x",
 * "engine_call/backward@y", "split: inputs/_impl@q"). */
int fh_verify_state_of(const char *path);
/* k of a schedule step's path ("steps/<k>/backward/dq"), 0 for none; the
 * state above is the step's. Steps come in their order, before a state. */
int fh_verify_step_of(const char *path);
/* "inputs", "engine_call/forward", ... ("case" for the case's own). */
const char *fh_verify_state_name(int state);
/* The states case group g holds, as bits 1u << state. */
unsigned fh_verify_states_in(const fh_h5_node *g);

/* Record a check's differences into c (verify.c's checks call it): counts,
 * the first FH_COMPARE_MAX_REPORTED in c->cmp, every one in c->diffs,
 * the check's side names and the states both trees hold (a, b may be
 * NULL: a check of one tree). r must have been made with keep_all; its
 * list is moved into c (r is freed). */
void fh_verify_note_check(fh_verify_case *c, const char *check, fh_compare_result *r,
                             const fh_h5_node *a, const fh_h5_node *b,
                             const char *side_a, const char *side_b);

/* The order differences are listed in (the file comment): idx[0..n_diffs)
 * gets the indices into c->diffs. */
void fh_verify_diff_order(const fh_verify_case *c, size_t *idx);

/* The earliest cause of a differing case. */
typedef struct fh_verify_cause {
    int check;             /* the first check that differs; -1: none */
    int step;              /* its earliest differing schedule step (0: not a step) */
    int state;             /* its earliest differing state (in that step) */
    unsigned equal_before; /* states before it both sides hold, all equal (bits) */
    size_t n_first;        /* differences in that state */
} fh_verify_cause;

void fh_verify_cause_of(const fh_verify_case *c, fh_verify_cause *out);
/* The same for one check (index into c->checks); check -1 when it found
 * nothing. */
void fh_verify_check_cause_of(const fh_verify_case *c, int check, fh_verify_cause *out);

/* One difference as a line: "<path>: <side_a> <a>, <side_b> <b>" for an
 * attribute (a side without it: "absent"), else "<path>: <why>". */
void fh_verify_diff_text(const fh_verify_case *c, const fh_verify_diff *d, char *buf,
                            size_t n);
/* The cause as one line: "<check>: inputs, engine_call/forward, forward,
 * save_ctx equal; <the earliest state's first differences, as
 * fh_verify_diff_text>; then backward/dk, backward/dq, backward/dv"
 * (bounded, with "and N more"). "" when the case does not differ. */
void fh_verify_cause_text(const fh_verify_case *c, char *buf, size_t n);
/* The same for one check's differences. */
void fh_verify_check_cause_text(const fh_verify_case *c, int check, char *buf, size_t n);

#endif /* FH_HARNESS_CAUSE_H */
