/* The saved-slot table's names and the aux-pack slot arithmetic
 * (saved_slots.h). */
#include <assert.h>
#include <stdbool.h>

#include "saved_slots.h"

static const char *const names[] = {
#define NAME_ROW(role, pack) #role,
    FATTN_SAVED_SLOTS(NAME_ROW)
#undef NAME_ROW
};
_Static_assert(sizeof names / sizeof names[0] == FATTN_SAVED_COUNT, "one name per slot");

typedef enum pack_rule { FIXED, AUX_ALWAYS, AUX_IF_BIAS, AUX_IF_SOFTMAX } pack_rule;

static const pack_rule rules[] = {
#define RULE_ROW(role, pack) pack,
    FATTN_SAVED_SLOTS(RULE_ROW)
#undef RULE_ROW
};

const char *fattn_saved_name(fattn_saved_slot s)
{
    assert((int)s >= 0 && s < FATTN_SAVED_COUNT);
    return names[s];
}

/* Whether TE's pack holds a slot under `rule` (TE's fused_attn_fwd: Stats
 * and rng_state always; Bias for pre/post_scale_bias; SoftmaxOffset when
 * softmax is not vanilla). */
static bool in_pack(pack_rule rule, fattn_bias_type bias, fattn_softmax_type softmax)
{
    switch (rule) {
    case AUX_ALWAYS: return true;
    case AUX_IF_BIAS:
        return bias == FATTN_BIAS_PRE_SCALE_BIAS || bias == FATTN_BIAS_POST_SCALE_BIAS;
    case AUX_IF_SOFTMAX: return softmax != FATTN_SOFTMAX_VANILLA;
    case FIXED: break;
    }
    assert(!"a fixed slot is not in the aux pack");
    return false;
}

int fattn_saved_aux_layout(fattn_bias_type bias, fattn_softmax_type softmax,
                           int index[FATTN_SAVED_NAUX])
{
    int n = 0;
    for (int i = 0; i < FATTN_SAVED_NAUX; i++) {
        assert(rules[FATTN_SAVED_AUX_FIRST + i] != FIXED);
        index[i] = in_pack(rules[FATTN_SAVED_AUX_FIRST + i], bias, softmax) ? n++ : -1;
    }
    assert(n >= 2 && n <= FATTN_SAVED_NAUX);
    return n;
}

fattn_status fattn_saved_aux_from_list(const fattn_tensor *list, int n, fattn_bias_type bias,
                                       fattn_softmax_type softmax,
                                       fattn_tensor slots[FATTN_SAVED_NAUX])
{
    int index[FATTN_SAVED_NAUX];
    int want = fattn_saved_aux_layout(bias, softmax, index);
    for (int i = 0; i < FATTN_SAVED_NAUX; i++)
        slots[i] = fattn_tensor_empty();
    if (n != want)
        return fattn_error(FATTN_E_INTERNAL, "aux list has %d entries, expected %d", n, want);
    for (int i = 0; i < FATTN_SAVED_NAUX; i++)
        if (index[i] >= 0)
            slots[i] = list[index[i]];
    return FATTN_OK;
}

int fattn_saved_aux_to_list(const fattn_tensor slots[FATTN_SAVED_NAUX],
                            fattn_tensor list[FATTN_SAVED_NAUX])
{
    int n = 0;
    for (int i = 0; i < FATTN_SAVED_NAUX; i++)
        if (!fattn_tensor_is_empty(&slots[i]))
            list[n++] = slots[i];
    return n;
}
