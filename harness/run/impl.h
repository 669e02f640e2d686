/* The front ends and the states of a case run, as names: the registry's
 * rows (FATTN_IMPLS; the adapters, fe.h / fe.c) and the state machine's
 * states (runner.h; names and transitions in state.c). Both the adapters
 * and the runner use them, so they are neither's: the adapters do not
 * depend on the runner. */
#ifndef FATTN_HARNESS_IMPL_H
#define FATTN_HARNESS_IMPL_H

#include "fattn/status.h"

/* The front ends: X(ENUM_SUFFIX, name). Each row has an adapter
 * fattn_fe_<name> (fe.h, harness/run/fe_<name>.c); the runner reaches a front
 * end only through it. */
#define FATTN_IMPLS(X)                                                                         \
    X(LEGACY, legacy)                                                                          \
    X(SPLIT, split)

typedef enum fattn_impl {
#define FATTN_IMPL_ENUM_(suffix, name) FATTN_IMPL_##suffix,
    FATTN_IMPLS(FATTN_IMPL_ENUM_)
#undef FATTN_IMPL_ENUM_
    FATTN_IMPL_COUNT
} fattn_impl;

typedef enum fattn_state {
    FATTN_STATE_BEGIN = 0,
    FATTN_STATE_INPUTS,
    FATTN_STATE_FORWARD,
    FATTN_STATE_SAVE_CTX,
    FATTN_STATE_BACKWARD,
    FATTN_STATE_COUNT
} fattn_state;

const char *fattn_impl_name(fattn_impl i);
fattn_status fattn_impl_parse(const char *s, fattn_impl *out);
/* "begin", "inputs", "forward", "save_ctx", "backward". */
const char *fattn_state_name(fattn_state s);
fattn_status fattn_state_parse(const char *s, fattn_state *out);

/* FATTN_OK if `impl` can resume a recorded case at `from` (replay): at
 * SAVE_CTX or FORWARD when its adapter loads that state (fe.h; --from
 * forward exists only for split). Else FATTN_E_INVALID_ARG with a message
 * naming the front ends that can. */
fattn_status fattn_impl_resume_check(fattn_impl impl, fattn_state from);

/* The transition table: FATTN_OK if a case in `from` may step to `to`,
 * else FATTN_E_STATE with a message naming both states. */
fattn_status fattn_state_check(fattn_state from, fattn_state to);

#endif /* FATTN_HARNESS_IMPL_H */
