/* Suite "support": the support table (lib/core/support.c).
 *
 * Every rule has a row here with a query that trips it (fe_spec_for_rule):
 * the check must fail with that rule, its status and a message naming the
 * rule and its TE line, for the engines the rule applies to, and pass for
 * the others. The default query and every case of the CPU matrix pass.
 */
#include <string.h>

#include "cases.h"
#include "fattn/support.h"
#include "fattn_test.h"
#include "fe_unit.h"

typedef struct rule_row {
    const char *id;
    fattn_status status;
    bool cpu, cudnn; /* engines it applies to */
} rule_row;

static const rule_row rule_rows[] = {
    {"pre_scale_bias", FATTN_E_INVALID_CASE, true, true},
    {"bias_missing", FATTN_E_INVALID_CASE, true, true},
    {"bias_dtype", FATTN_E_INVALID_CASE, true, true},
    {"bias_padding", FATTN_E_INVALID_CASE, true, true},
    {"alibi_mask", FATTN_E_INVALID_CASE, true, true},
    {"window_mask", FATTN_E_INVALID_CASE, true, true},
    {"window_not_normalised", FATTN_E_INVALID_CASE, true, true},
    {"heads_divisible", FATTN_E_INVALID_CASE, true, true},
    {"thd_padding", FATTN_E_INVALID_CASE, true, true},
    {"head_dim", FATTN_E_INVALID_CASE, true, true},
    {"bottom_right_sq_gt_skv", FATTN_E_INVALID_CASE, true, true},
    {"swa_restrictions", FATTN_E_INVALID_CASE, true, true},
    {"dropout_range", FATTN_E_INVALID_CASE, true, true},
    {"bias_sink_quirk", FATTN_E_UNSAFE_TE_QUIRK, true, true},
    {"fp8_execution", FATTN_E_UNSUPPORTED, true, true},
    {"max_logit_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"paged_cpu", FATTN_E_UNSUPPORTED, true, true},
    {"float32_cudnn", FATTN_E_UNSUPPORTED, false, true},
};

START_TEST(rule_refuses)
{
    const rule_row *r = &rule_rows[_i];
    fe_spec s = fe_spec_for_rule(r->id);
    fattn_support_query q = fe_query(&s);
    const char *engines[2] = {"cpu", "cudnn"};
    bool applies[2] = {r->cpu, r->cudnn};
    for (int e = 0; e < 2; e++) {
        const fattn_support_rule *failed = NULL;
        fattn_status st = fattn_support_check(&q, engines[e], &failed);
        if (applies[e]) {
            ck_assert_msg(st == r->status, "%s on %s: got %s", r->id, engines[e],
                          fattn_status_name(st));
            ck_assert_ptr_nonnull(failed);
            ck_assert_str_eq(failed->id, r->id);
            char want[160];
            snprintf(want, sizeof want, "rule %s: ", r->id);
            ck_assert_msg(strncmp(fattn_last_error(), want, strlen(want)) == 0, "message '%s'",
                          fattn_last_error());
            ck_assert_ptr_nonnull(strstr(fattn_last_error(), "(TE transformer_engine/"));
        } else {
            ck_assert_msg(st == FATTN_OK, "%s must not apply to %s (%s)", r->id, engines[e],
                          fattn_last_error());
            ck_assert_ptr_null(failed);
        }
    }
    char id[96];
    snprintf(id, sizeof id, "support.%s", r->id);
    fattn_test_mark(id);
}
END_TEST

/* The table and this test agree: same ids, statuses, engines, and each row
 * cites a TE file and line. */
START_TEST(table_matches)
{
    int n = 0;
    const fattn_support_rule *rules = fattn_support_rules(&n);
    ck_assert_int_eq(n, FE_NROWS(rule_rows));
    for (int i = 0; i < n; i++) {
        const rule_row *r = NULL;
        for (int j = 0; j < FE_NROWS(rule_rows); j++)
            if (!strcmp(rule_rows[j].id, rules[i].id))
                r = &rule_rows[j];
        ck_assert_msg(r != NULL, "rule %s has no test row", rules[i].id);
        ck_assert_int_eq(rules[i].status, r->status);
        ck_assert(((rules[i].engines & FATTN_SUPPORT_ENGINE_CPU) != 0) == r->cpu);
        ck_assert(((rules[i].engines & FATTN_SUPPORT_ENGINE_CUDNN) != 0) == r->cudnn);
        ck_assert_msg(strncmp(rules[i].te_file, "transformer_engine/", 19) == 0, "%s",
                      rules[i].te_file);
        ck_assert_int_gt(rules[i].te_line, 0);
        ck_assert(rules[i].refuses != NULL);
        ck_assert_ptr_eq(fattn_support_rule_find(rules[i].id), &rules[i]);
    }
    ck_assert_ptr_null(fattn_support_rule_find("no_such_rule"));
    ck_assert_ptr_null(fattn_support_rule_find(NULL));
}
END_TEST

START_TEST(default_passes)
{
    fattn_support_query q;
    fattn_support_query_init(&q);
    ck_assert_int_eq(fattn_support_check(&q, "cpu", NULL), FATTN_OK);
    ck_assert_int_eq(fattn_support_check(&q, "cudnn", NULL), FATTN_OK);
    fe_spec s = fe_spec_default();
    fattn_support_query q2 = fe_query(&s);
    ck_assert_int_eq(fattn_support_check(&q2, "cpu", NULL), FATTN_OK);
}
END_TEST

START_TEST(bad_engine)
{
    fattn_support_query q;
    fattn_support_query_init(&q);
    const fattn_support_rule *failed = (const fattn_support_rule *)1;
    ck_assert_int_eq(fattn_support_check(&q, "tpu", &failed), FATTN_E_INVALID_ARG);
    ck_assert_ptr_null(failed);
    ck_assert_int_eq(fattn_support_check(NULL, "cpu", NULL), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fattn_support_check(&q, NULL, NULL), FATTN_E_INVALID_ARG);
}
END_TEST

/* Boundaries of the numeric rules. */
START_TEST(boundaries)
{
    fattn_support_query q;
    fattn_support_query_init(&q);
    q.d_qk = q.d_v = 256;
    ck_assert_int_eq(fattn_support_check(&q, "cpu", NULL), FATTN_OK);
    q.d_v = 264;
    ck_assert_int_eq(fattn_support_check(&q, "cpu", NULL), FATTN_E_INVALID_CASE);
    fattn_support_query_init(&q);
    q.dropout = 0.999f;
    ck_assert_int_eq(fattn_support_check(&q, "cpu", NULL), FATTN_OK);
    q.dropout = -0.1f;
    ck_assert_int_eq(fattn_support_check(&q, "cpu", NULL), FATTN_E_INVALID_CASE);
    /* bottom-right with sq > skv is fine with a padding mask, no bias, no dropout */
    fattn_support_query_init(&q);
    q.mask_type = FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT;
    q.window_right = 0;
    q.sq = 32, q.skv = 16;
    ck_assert_int_eq(fattn_support_check(&q, "cpu", NULL), FATTN_OK);
    q.dropout = 0.1f;
    ck_assert_int_eq(fattn_support_check(&q, "cpu", NULL), FATTN_E_INVALID_CASE);
    /* alibi with a causal mask is valid */
    fattn_support_query_init(&q);
    q.bias_type = FATTN_BIAS_ALIBI;
    q.mask_type = FATTN_MASK_CAUSAL;
    q.window_right = 0;
    ck_assert_int_eq(fattn_support_check(&q, "cpu", NULL), FATTN_OK);
    /* a sink without a bias tensor is fine; alibi + sink is fine */
    q.softmax_type = FATTN_SOFTMAX_OFF_BY_ONE;
    ck_assert_int_eq(fattn_support_check(&q, "cpu", NULL), FATTN_OK);
}
END_TEST

/* Every case of the CPU matrix is valid and CPU-supported, except the
 * known TE-invalid ones (refused by swa_restrictions). */
START_TEST(matrix_passes)
{
    for (int i = 0; i < tcase_count; i++) {
        const tcase *c = &tcase_table[i];
        fattn_support_query q = fe_case_query(c);
        const fattn_support_rule *failed = NULL;
        fattn_status st = fattn_support_check(&q, "cpu", &failed);
        if (fe_case_te_invalid(c)) {
            ck_assert_msg(st == FATTN_E_INVALID_CASE && failed &&
                              !strcmp(failed->id, "swa_restrictions"),
                          "case %s should be refused by swa_restrictions", c->id);
            continue;
        }
        ck_assert_msg(st == FATTN_OK, "case %s: %s", c->id, fattn_last_error());
    }
}
END_TEST

static void list_ids(void)
{
    for (int i = 0; i < FE_NROWS(rule_rows); i++)
        printf("support.%s\n", rule_rows[i].id);
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("support");
    TCase *tc = tcase_create("rules");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, rule_refuses, 0, FE_NROWS(rule_rows));
    tcase_add_test(tc, table_matches);
    tcase_add_test(tc, default_passes);
    tcase_add_test(tc, bad_engine);
    tcase_add_test(tc, boundaries);
    tcase_add_test(tc, matrix_passes);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
