/* The states of a case run: names and the transition table (impl.h). */
#include <stdbool.h>
#include <string.h>

#include "impl.h"

static const char *const state_names[] = {"begin", "inputs", "forward", "save_ctx", "backward"};

const char *fh_state_name(fh_state s)
{
    return (s >= FH_STATE_BEGIN && s < FH_STATE_COUNT) ? state_names[s] : "?";
}

fattn_status fh_state_parse(const char *s, fh_state *out)
{
    for (int i = 0; i < FH_STATE_COUNT; i++)
        if (strcmp(s, state_names[i]) == 0) {
            *out = (fh_state)i;
            return FATTN_OK;
        }
    return fattn_error(FATTN_E_PARSE, "unknown state '%s' (inputs, forward, save_ctx, backward)",
                       s);
}

/* allowed[from][to]: each state has exactly one successor. */
static const bool allowed[FH_STATE_COUNT][FH_STATE_COUNT] = {
    [FH_STATE_BEGIN][FH_STATE_INPUTS] = true,
    [FH_STATE_INPUTS][FH_STATE_FORWARD] = true,
    [FH_STATE_FORWARD][FH_STATE_SAVE_CTX] = true,
    [FH_STATE_SAVE_CTX][FH_STATE_BACKWARD] = true,
};

fattn_status fh_state_check(fh_state from, fh_state to)
{
    if (from < 0 || from >= FH_STATE_COUNT || to < 0 || to >= FH_STATE_COUNT)
        return fattn_error(FATTN_E_STATE, "invalid state value (%d -> %d)", (int)from, (int)to);
    if (!allowed[from][to])
        return fattn_error(FATTN_E_STATE, "invalid step from state %s to state %s",
                           fh_state_name(from), fh_state_name(to));
    return FATTN_OK;
}

