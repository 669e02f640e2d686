/* The front ends and the states of a case run, as names: the registry's
 * rows (FH_IMPLS; the adapters, fe.h / fe.c) and the state machine's
 * states (runner.h; names and transitions in state.c). Both the adapters
 * and the runner use them, so they are neither's: the adapters do not
 * depend on the runner. */
#ifndef FH_HARNESS_IMPL_H
#define FH_HARNESS_IMPL_H

#include "fattn/status.h"

/* The front ends: X(ENUM_SUFFIX, name). Each row has an adapter
 * fh_fe_<name> (fe.h, harness/run/fe_<name>.c); the runner reaches a front
 * end only through it. */
#define FH_IMPLS(X)                                                                            \
    X(LEGACY, legacy)                                                                          \
    X(SPLIT, split)

typedef enum fh_impl {
#define FH_IMPL_ENUM_(suffix, name) FH_IMPL_##suffix,
    FH_IMPLS(FH_IMPL_ENUM_)
#undef FH_IMPL_ENUM_
    FH_IMPL_COUNT
} fh_impl;

typedef enum fh_state {
    FH_STATE_BEGIN = 0,
    FH_STATE_INPUTS,
    FH_STATE_FORWARD,
    FH_STATE_SAVE_CTX,
    FH_STATE_BACKWARD,
    FH_STATE_COUNT
} fh_state;

const char *fh_impl_name(fh_impl i);
fattn_status fh_impl_parse(const char *s, fh_impl *out);
/* "begin", "inputs", "forward", "save_ctx", "backward". */
const char *fh_state_name(fh_state s);
fattn_status fh_state_parse(const char *s, fh_state *out);

/* FATTN_OK if `impl` can resume a recorded case at `from` (replay): at
 * SAVE_CTX or FORWARD when its adapter loads that state (fe.h; --from
 * forward exists only for split). Else FATTN_E_INVALID_ARG with a message
 * naming the front ends that can. */
fattn_status fh_impl_resume_check(fh_impl impl, fh_state from);

/* The transition table: FATTN_OK if a case in `from` may step to `to`,
 * else FATTN_E_STATE with a message naming both states. */
fattn_status fh_state_check(fh_state from, fh_state to);

#endif /* FH_HARNESS_IMPL_H */
