/* The saved-slot table's names and the aux-pack slot arithmetic
 * (saved_slots.h). */
#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "fattn/engine.h"

#include "saved_slots.h"

static const char *const names[] = {
#define NAME_ROW(role, pack) #role,
    FH_SAVED_SLOTS(NAME_ROW)
#undef NAME_ROW
};
_Static_assert(sizeof names / sizeof names[0] == FH_SAVED_COUNT, "one name per slot");

const char *fh_saved_name(fh_saved_slot s)
{
    assert((int)s >= 0 && s < FH_SAVED_COUNT);
    return names[s];
}

/* Each row's place in fattn_aux_layout, or -1 for a FIXED row. */
#define LAYOUT_OFF_FIXED (-1)
#define LAYOUT_OFF_stats ((int)offsetof(fattn_aux_layout, stats))
#define LAYOUT_OFF_rng_state ((int)offsetof(fattn_aux_layout, rng_state))
#define LAYOUT_OFF_bias ((int)offsetof(fattn_aux_layout, bias))
#define LAYOUT_OFF_softmax_offset ((int)offsetof(fattn_aux_layout, softmax_offset))
static const int layout_off[] = {
#define OFF_ROW(role, pack) LAYOUT_OFF_##pack,
    FH_SAVED_SLOTS(OFF_ROW)
#undef OFF_ROW
};
_Static_assert(sizeof layout_off / sizeof layout_off[0] == FH_SAVED_COUNT, "one place per slot");

int fh_saved_aux_layout(fattn_bias_type bias, fattn_softmax_type softmax,
                           int index[FH_SAVED_NAUX])
{
    fattn_aux_layout l = fattn_aux_layout_bwd(bias, softmax);
    for (int i = 0; i < FH_SAVED_NAUX; i++) {
        int off = layout_off[FH_SAVED_AUX_FIRST + i];
        assert(off >= 0);
        memcpy(&index[i], (const char *)&l + off, sizeof index[i]);
    }
    assert(l.n >= 2 && l.n <= FH_SAVED_NAUX);
    return l.n;
}

fattn_status fh_saved_aux_from_list(const fattn_tensor *list, int n, fattn_bias_type bias,
                                       fattn_softmax_type softmax,
                                       fattn_tensor slots[FH_SAVED_NAUX])
{
    int index[FH_SAVED_NAUX];
    int want = fh_saved_aux_layout(bias, softmax, index);
    for (int i = 0; i < FH_SAVED_NAUX; i++)
        slots[i] = fattn_tensor_empty();
    if (n != want)
        return fattn_error(FATTN_E_INTERNAL, "aux list has %d entries, expected %d", n, want);
    for (int i = 0; i < FH_SAVED_NAUX; i++) {
        assert(index[i] < n);
        if (index[i] >= 0)
            slots[i] = list[index[i]];
    }
    return FATTN_OK;
}

int fh_saved_aux_to_list(const fattn_tensor slots[FH_SAVED_NAUX],
                            fattn_tensor list[FH_SAVED_NAUX])
{
    int n = 0;
    for (int i = 0; i < FH_SAVED_NAUX; i++)
        if (!fattn_tensor_is_empty(&slots[i]))
            list[n++] = slots[i];
    assert(n <= FH_SAVED_NAUX);
    return n;
}
