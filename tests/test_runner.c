/* The harness state machine: the transition table, exhaustively. */
#include <string.h>

#include "fattn_test.h"
#include "runner.h"

/* The one legal successor of each state (-1: none). */
static const int successor[FATTN_STATE_COUNT] = {
    [FATTN_STATE_BEGIN] = FATTN_STATE_INPUTS,
    [FATTN_STATE_INPUTS] = FATTN_STATE_FORWARD,
    [FATTN_STATE_FORWARD] = FATTN_STATE_SAVE_CTX,
    [FATTN_STATE_SAVE_CTX] = FATTN_STATE_BACKWARD,
    [FATTN_STATE_BACKWARD] = -1,
};

START_TEST(test_transition)
{
    fattn_state from = (fattn_state)(_i / FATTN_STATE_COUNT);
    fattn_state to = (fattn_state)(_i % FATTN_STATE_COUNT);
    fattn_clear_error();
    fattn_status st = fattn_state_check(from, to);
    if ((int)to == successor[from]) {
        ck_assert_int_eq(st, FATTN_OK);
    } else {
        ck_assert_int_eq(st, FATTN_E_STATE);
        /* the message names both states */
        const char *msg = fattn_last_error();
        ck_assert_msg(strstr(msg, fattn_state_name(from)) && strstr(msg, fattn_state_name(to)),
                      "message '%s' does not name %s and %s", msg, fattn_state_name(from),
                      fattn_state_name(to));
    }
    char id[64];
    snprintf(id, sizeof id, "runner.transition.%s.%s", fattn_state_name(from),
             fattn_state_name(to));
    fattn_test_mark(id);
}
END_TEST

START_TEST(test_names)
{
    for (int s = 0; s < FATTN_STATE_COUNT; s++) {
        fattn_state back;
        ck_assert_int_eq(fattn_state_parse(fattn_state_name((fattn_state)s), &back), FATTN_OK);
        ck_assert_int_eq(back, s);
    }
    fattn_state x;
    ck_assert_int_eq(fattn_state_parse("backwards", &x), FATTN_E_PARSE);
    fattn_impl i;
    ck_assert_int_eq(fattn_impl_parse("legacy", &i), FATTN_OK);
    ck_assert_int_eq(i, FATTN_IMPL_LEGACY);
    ck_assert_int_eq(fattn_impl_parse("split", &i), FATTN_OK);
    ck_assert_int_eq(i, FATTN_IMPL_SPLIT);
    ck_assert_int_eq(fattn_impl_parse("monolith", &i), FATTN_E_PARSE);
    ck_assert_int_eq(fattn_state_check((fattn_state)-1, FATTN_STATE_INPUTS), FATTN_E_STATE);
}
END_TEST

static void list_ids(void)
{
    for (int f = 0; f < FATTN_STATE_COUNT; f++)
        for (int t = 0; t < FATTN_STATE_COUNT; t++)
            printf("runner.transition.%s.%s\n", fattn_state_name((fattn_state)f),
                   fattn_state_name((fattn_state)t));
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("runner");
    TCase *tc = tcase_create("states");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, test_transition, 0, FATTN_STATE_COUNT * FATTN_STATE_COUNT);
    tcase_add_test(tc, test_names);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
