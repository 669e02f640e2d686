/* Suite "te_release": the recipe for a new TE release (docs/architecture.md,
 * "A TE release"), followed once as a dry run. This executable builds the
 * support table (lib/core/support.c) with FATTN_TE_RELEASE_DRY_RUN, which
 * adds one made-up release, 9.99, as a new row of FATTN_TE_RELEASES —
 * the one edit the recipe makes before it turns to the rows that change.
 * With no other edit: --te-rules takes it (fattn_te_rules_parse, the lists
 * in messages and usage), it is the newest, every row holds for it and cites
 * its newest line at the new release's revisions, and nothing is reported as
 * new in it. The library itself is built without the made-up release (suite
 * support refuses "9.99"). */
#include <stdio.h>
#include <string.h>

#include "fattn/support.h"
#include "fattn_test.h"

#ifndef FATTN_TE_RELEASE_DRY_RUN
#error "built with -DFATTN_TE_RELEASE_DRY_RUN only"
#endif

START_TEST(release_accepted)
{
    ck_assert_int_eq(FATTN_TE_RULES_COUNT, 3);
    ck_assert_str_eq(FATTN_TE_RULES_KNOWN, "2.19, 2.20, 9.99");
    ck_assert_str_eq(FATTN_TE_RULES_CHOICES, "2.19|2.20|9.99");
    unsigned v = 0;
    ck_assert_int_eq(fattn_te_rules_parse("9.99", &v), FATTN_OK);
    ck_assert_uint_eq(v, FATTN_TE_RULES_9_99);
    ck_assert_uint_eq(FATTN_TE_RULES_NEWEST, FATTN_TE_RULES_9_99);
    ck_assert_str_eq(fattn_te_rules_name(v), "9.99");
    ck_assert_str_eq(fattn_te_rules_release(v), "9.99.0");
    ck_assert_int_eq(fattn_te_rules_parse("9.98", &v), FATTN_E_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "known: 2.19, 2.20, 9.99"));
    fattn_support_query q;
    fattn_support_query_init(&q);
    ck_assert_uint_eq(q.te_rules, FATTN_TE_RULES_9_99);
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    fattn_test_mark("te_release.accepted");
}
END_TEST

/* Every row holds for the new release and cites there what it cites for the
 * release before, at the new release's revisions. */
START_TEST(rows_carry_forward)
{
    int nr = 0, nt = 0;
    const fattn_support_rule *rules = fattn_support_rules(&nr);
    const fattn_support_rule *routes = fattn_support_routes(&nt);
    for (int i = 0; i < nr + nt; i++) {
        const fattn_support_rule *r = i < nr ? &rules[i] : &routes[i - nr];
        ck_assert_msg(fattn_support_rule_holds(r, FATTN_TE_RULES_9_99), "%s", r->id);
        fattn_support_cite old, now;
        bool had = fattn_support_rule_cite(r, FATTN_TE_RULES_2_20, &old);
        ck_assert_int_eq(fattn_support_rule_cite(r, FATTN_TE_RULES_9_99, &now), had);
        if (!had)
            continue;
        ck_assert_str_eq(now.file, old.file);
        ck_assert_int_eq(now.line, old.line);
        bool cpp = strstr(now.file, ".cpp") != NULL;
        ck_assert_str_eq(now.rev, cpp ? "dryrun0" : "9.99.0");
    }
    fattn_test_mark("te_release.rows_carry_forward");
}
END_TEST

/* Messages and notes under the new release; nothing new in it. */
START_TEST(messages)
{
    fattn_support_query q;
    fattn_support_query_init(&q);
    q.bias_type = FATTN_BIAS_PRE_SCALE_BIAS;
    q.has_bias_tensor = true;
    q.bias_dtype = q.q_dtype;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL),
                     FATTN_E_INVALID_CASE);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(),
                                 "(TE dryrun0 transformer_engine/common/fused_attn/"
                                 "fused_attn.cpp:354)"));
    q.te_rules = FATTN_TE_RULES_2_20;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL),
                     FATTN_E_INVALID_CASE);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "(TE d0067d0 transformer_engine/"));

    fattn_support_query_init(&q);
    q.deterministic = true;
    q.softmax_type = FATTN_SOFTMAX_LEARNABLE;
    char note[512];
    fattn_support_route_note(&q, note, sizeof note);
    ck_assert_str_eq(note, "DPA 9.99 would not route here: rule det_sink, utils.py:1761");
    q.te_rules = FATTN_TE_RULES_2_20;
    fattn_support_route_note(&q, note, sizeof note);
    ck_assert_str_eq(note, "DPA 2.20 would not route here: rule det_sink, utils.py:1761");
    fattn_test_mark("te_release.messages");
}
END_TEST

static void list_ids(void)
{
    printf("te_release.accepted\nte_release.rows_carry_forward\nte_release.messages\n");
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("te_release");
    TCase *tc = tcase_create("dry_run");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tc, release_accepted);
    tcase_add_test(tc, rows_carry_forward);
    tcase_add_test(tc, messages);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
