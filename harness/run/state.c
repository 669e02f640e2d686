/* The states of a case run: names and the transition table (impl.h). */
#include <stdbool.h>
#include <string.h>

#include "impl.h"

static const char *const state_names[] = {"begin", "inputs", "forward", "save_ctx", "backward"};

const char *fattn_state_name(fattn_state s)
{
    return (s >= FATTN_STATE_BEGIN && s < FATTN_STATE_COUNT) ? state_names[s] : "?";
}

fattn_status fattn_state_parse(const char *s, fattn_state *out)
{
    for (int i = 0; i < FATTN_STATE_COUNT; i++)
        if (strcmp(s, state_names[i]) == 0) {
            *out = (fattn_state)i;
            return FATTN_OK;
        }
    return fattn_error(FATTN_E_PARSE, "unknown state '%s' (inputs, forward, save_ctx, backward)",
                       s);
}

/* allowed[from][to]: each state has exactly one successor. */
static const bool allowed[FATTN_STATE_COUNT][FATTN_STATE_COUNT] = {
    [FATTN_STATE_BEGIN][FATTN_STATE_INPUTS] = true,
    [FATTN_STATE_INPUTS][FATTN_STATE_FORWARD] = true,
    [FATTN_STATE_FORWARD][FATTN_STATE_SAVE_CTX] = true,
    [FATTN_STATE_SAVE_CTX][FATTN_STATE_BACKWARD] = true,
};

fattn_status fattn_state_check(fattn_state from, fattn_state to)
{
    if (from < 0 || from >= FATTN_STATE_COUNT || to < 0 || to >= FATTN_STATE_COUNT)
        return fattn_error(FATTN_E_STATE, "invalid state value (%d -> %d)", (int)from, (int)to);
    if (!allowed[from][to])
        return fattn_error(FATTN_E_STATE, "invalid step from state %s to state %s",
                           fattn_state_name(from), fattn_state_name(to));
    return FATTN_OK;
}

