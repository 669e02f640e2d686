/* Suite "support": the support table (lib/core/support.c).
 *
 * Every refusal rule has a row here with a query that trips it
 * (fe_spec_for_rule): the check must fail with that rule, its status and a
 * message naming the rule and its TE line, for the engines the rule applies
 * to, and pass for the others. Every rule, refusal or routing, has its
 * releases and each release's citation written down here; every routing
 * rule a query that trips it and one that does not. The default query and
 * every case of the CPU matrix pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "core/support_rows.h"
#include "fattn/support.h"
#include "fattn_config.h"
#include "fattn_test.h"
#include "fe_unit.h"
#if FATTN_TESTING
#include "fattn/testing.h"
#endif

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
    {"paged_padding", FATTN_E_INVALID_CASE, true, true},
    {"paged_training", FATTN_E_NOT_MODELLED, true, true},
    {"paged_fp8", FATTN_E_NOT_MODELLED, true, true},
    {"head_dim", FATTN_E_INVALID_CASE, true, true},
    {"head_dim_large_inference", FATTN_E_INVALID_CASE, true, true},
    {"head_dim_large_decode", FATTN_E_INVALID_CASE, true, true},
    {"mla_hopper_training", FATTN_E_INVALID_CASE, true, true},
    {"bottom_right_sq_gt_skv", FATTN_E_INVALID_CASE, true, true},
    {"swa_restrictions", FATTN_E_INVALID_CASE, true, true},
    {"dropout_range", FATTN_E_INVALID_CASE, true, true},
    {"bias_sink_quirk", FATTN_E_UNSAFE_TE_QUIRK, true, true},
    {"cpu_offload_v1", FATTN_E_NOT_MODELLED, true, true},
    {"fp8_mxfp8_blackwell", FATTN_E_INVALID_CASE, true, true},
    {"fp8_quantizer_type", FATTN_E_INVALID_CASE, true, true},
    {"fp8_qkv_format", FATTN_E_INVALID_CASE, true, true},
    {"fp8_bias", FATTN_E_INVALID_CASE, true, true},
    {"fp8_softmax", FATTN_E_INVALID_CASE, true, true},
    {"fp8_bottom_right", FATTN_E_INVALID_CASE, true, true},
    {"fp8_head_dim", FATTN_E_INVALID_CASE, true, true},
    {"fp8_max_logit", FATTN_E_INVALID_CASE, true, true},
    {"fp8_window", FATTN_E_NOT_MODELLED, true, true},
    {"fp8_max_logit_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"max_logit_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"float32_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"dsink_thd_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"thd_paged_decode_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"thd_cache_decode_gqa_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"pre_scale_bias_engines", FATTN_E_UNSUPPORTED, true, true},
    {"fp8_descales_engines", FATTN_E_UNSUPPORTED, true, true},
    {"fp8_bias_engines", FATTN_E_UNSUPPORTED, true, true},
    {"fp8_softmax_engines", FATTN_E_UNSUPPORTED, true, true},
    {"fp8_thd_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"fp8_head_dim_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"fp8_paged_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"fp8_arch_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"fp8_bottom_right_sm90_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"fp8_o_f16_sm90_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"fp8_dropout_sm90_cudnn", FATTN_E_UNSUPPORTED, false, true},
    {"fp8_bwd_head_dim_sm90_cudnn", FATTN_E_UNSUPPORTED, false, true},
};

START_TEST(rule_refuses)
{
    const rule_row *r = &rule_rows[_i];
    fe_spec s = fe_spec_for_rule(r->id);
    fattn_support_query q = fe_query(&s);
    const fattn_support_rule *row = fattn_support_rule_find(r->id);
    ck_assert_ptr_nonnull(row);
    /* a backward-only row: never at the call, at an engine's backward only */
    bool bwd = row->stage == FATTN_SUPPORT_AT_BACKWARD;
    if (bwd) {
        ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CUDNN, NULL), FATTN_OK);
        ck_assert_int_eq(fattn_support_check_engine(&q, FATTN_SUPPORT_ENGINE_CUDNN, NULL),
                         FATTN_OK);
        q.at_backward = true;
    }
    const unsigned engines[2] = {FATTN_SUPPORT_ENGINE_CPU, FATTN_SUPPORT_ENGINE_CUDNN};
    const char *names[2] = {"cpu", "cudnn"};
    bool applies[2] = {r->cpu, r->cudnn};
    for (int e = 0; e < 2; e++) {
        const fattn_support_rule *failed = NULL;
        /* the dispatch's check sees an engine's own gaps only */
        bool gap = r->status == FATTN_E_UNSUPPORTED;
        fattn_status st = bwd || gap ? fattn_support_check_engine(&q, engines[e], &failed)
                                     : fattn_support_check(&q, engines[e], &failed);
        if (applies[e]) {
            ck_assert_msg(st == r->status, "%s on %s: got %s", r->id, names[e],
                          fattn_status_name(st));
            ck_assert_ptr_nonnull(failed);
            ck_assert_str_eq(failed->id, r->id);
            char want[160];
            snprintf(want, sizeof want, "rule %s: ", r->id);
            ck_assert_msg(strncmp(fattn_last_error(), want, strlen(want)) == 0, "message '%s'",
                          fattn_last_error());
            /* the newest release's citation: a wheel's Python, or C++ read at d0067d0;
             * none for an engine's measured gap */
            fattn_support_cite c;
            ck_assert_msg(!fattn_support_rule_cite(row, FATTN_TE_RULES_NEWEST, &c) ||
                              strstr(fattn_last_error(), "(TE 2.20.2 transformer_engine/") ||
                              strstr(fattn_last_error(), "(TE d0067d0 transformer_engine/"),
                          "message '%s'", fattn_last_error());
        } else {
            /* another engine's row for the same thing may refuse it, not this one */
            ck_assert_msg(st == FATTN_OK || (failed && strcmp(failed->id, r->id) != 0),
                          "%s must not apply to %s (%s)", r->id, names[e], fattn_last_error());
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
        ck_assert_int_eq(rules[i].cls, FATTN_SUPPORT_REFUSAL);
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
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CUDNN, NULL), FATTN_OK);
    fe_spec s = fe_spec_default();
    fattn_support_query q2 = fe_query(&s);
    ck_assert_int_eq(fattn_support_check(&q2, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
}
END_TEST

START_TEST(bad_engine)
{
    fattn_support_query q;
    fattn_support_query_init(&q);
    const fattn_support_rule *failed = (const fattn_support_rule *)1;
    ck_assert_int_eq(fattn_support_check(&q, 4u, &failed), FATTN_E_INVALID_ARG);
    ck_assert_ptr_null(failed);
    ck_assert_int_eq(fattn_support_check(NULL, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fattn_support_check(&q, 0u, NULL), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_ALL, NULL), FATTN_E_INVALID_ARG);
}
END_TEST

/* Boundaries of the numeric rules. */
START_TEST(boundaries)
{
    fattn_support_query q;
    fattn_support_query_init(&q);
    q.d_qk = q.d_v = 256;
    q.is_training = true;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    q.d_v = 264;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_E_INVALID_CASE);
    /* above 256: inference from cuDNN 9.10.2 (fused_attn.cpp:323-329), any
     * mask for sq > 1 or a paged cache, not causal / padding_causal for one
     * query token; both engines run it (the cuDNN engine's graph measured on
     * an H100 with cuDNN 9.19.0), at the front ends and the dispatch alike */
    q.is_training = false;
    const fattn_support_rule *failed = NULL;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CUDNN, NULL), FATTN_OK);
    ck_assert_int_eq(fattn_support_check_engine(&q, FATTN_SUPPORT_ENGINE_CUDNN, NULL), FATTN_OK);
    q.d_qk = q.d_v = 1024;
    q.cudnn_version = 91001;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, &failed),
                     FATTN_E_INVALID_CASE);
    ck_assert_str_eq(failed->id, "head_dim_large_inference");
    q.cudnn_version = 91002;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    q.sq = 1;
    q.mask_type = FATTN_MASK_CAUSAL;
    q.window_right = 0;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, &failed),
                     FATTN_E_INVALID_CASE);
    ck_assert_str_eq(failed->id, "head_dim_large_decode");
    q.mask_type = FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    q.mask_type = FATTN_MASK_PADDING_CAUSAL;
    q.layout = FATTN_LAYOUT_PAGED_KV_BSHD_BSHD_BSHD;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    q.is_training = true;
    q.layout = FATTN_LAYOUT_BSHD_BSHD_BSHD;
    q.mask_type = FATTN_MASK_NO_MASK;
    q.window_right = -1;
    q.sq = 16;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, &failed),
                     FATTN_E_INVALID_CASE);
    ck_assert_str_eq(failed->id, "head_dim");
    /* FP8 inference with d_qk 192 / d_v 128 (TE's FP8 MLA, fused_attn.cpp:
     * 266-273): both engines (the cuDNN engine's graph measured on an H100
     * with cuDNN 9.19.0); FP8 training with it stays TE's refusal */
    fe_spec mla = fe_spec_default();
    mla.fp8 = true, mla.inference = true, mla.d = 192, mla.dv = 128;
    fattn_support_query qm = fe_query(&mla);
    for (unsigned e = FATTN_SUPPORT_ENGINE_CPU; e <= FATTN_SUPPORT_ENGINE_CUDNN; e <<= 1) {
        ck_assert_int_eq(fattn_support_check(&qm, e, NULL), FATTN_OK);
        ck_assert_int_eq(fattn_support_check_engine(&qm, e, NULL), FATTN_OK);
    }
    qm.is_training = true;
    ck_assert_int_eq(fattn_support_check(&qm, FATTN_SUPPORT_ENGINE_CUDNN, &failed),
                     FATTN_E_INVALID_CASE);
    ck_assert_str_eq(failed->id, "fp8_head_dim");
    fattn_support_query_init(&q);
    q.dropout = 0.999f;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    q.dropout = -0.1f;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_E_INVALID_CASE);
    /* bottom-right with sq > skv is fine with a padding mask, no bias, no dropout */
    fattn_support_query_init(&q);
    q.mask_type = FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT;
    q.window_right = 0;
    q.sq = 32, q.skv = 16;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    q.dropout = 0.1f;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_E_INVALID_CASE);
    /* alibi with a causal mask is valid */
    fattn_support_query_init(&q);
    q.bias_type = FATTN_BIAS_ALIBI;
    q.mask_type = FATTN_MASK_CAUSAL;
    q.window_right = 0;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    /* a sink without a bias tensor is fine; alibi + sink is fine */
    q.softmax_type = FATTN_SOFTMAX_OFF_BY_ONE;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    /* a causal mask with the window (-1,-1): DotProductAttention rewrites it
     * (window_not_normalised), a direct FusedAttnFunc caller's reaches TE's
     * C++ as given; so does a window check_set_window_size asserts on */
    fattn_support_query_init(&q);
    q.mask_type = FATTN_MASK_CAUSAL;
    q.window_left = q.window_right = -1;
    failed = NULL;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, &failed),
                     FATTN_E_INVALID_CASE);
    ck_assert_str_eq(failed->id, "window_not_normalised");
    q.direct_call = true;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    q.window_right = 3;
    q.direct_call = false;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, &failed),
                     FATTN_E_INVALID_CASE);
    ck_assert_str_eq(failed->id, "window_mask");
    q.direct_call = true; /* then TE's C++ has no backend for it (swa_restrictions) */
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, &failed),
                     FATTN_E_INVALID_CASE);
    ck_assert_str_eq(failed->id, "swa_restrictions");
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
        fattn_status st = fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, &failed);
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

/* ---- releases and citations ---------------------------------------------- */

/* Where each rule is in TE, keyed by release: the line from each release on
 * where it moved, oldest first (a row holds for every release from its
 * first on and cites its last line there, so a new release that moves
 * nothing needs no edit here). Read off the wheels' Python and TE's C++
 * (docs/frontends.md); a moved or mistyped line fails here. The revision a
 * citation names is its release's (FATTN_TE_RELEASES: the wheel for Python,
 * the C++ read for a .cpp). */
typedef struct cite_at {
    unsigned since; /* a FATTN_TE_RULES_* bit; 0 ends the list */
    int line;
} cite_at;

typedef struct cite_row {
    const char *id;
    fattn_support_class cls;
    const char *file; /* the last path component; NULL: cites no TE line */
    cite_at at[FATTN_SUPPORT_MAX_WHERE];
} cite_row;

#define C_REF FATTN_SUPPORT_REFUSAL
#define C_ROUTE FATTN_SUPPORT_ROUTING
#define R(id) FATTN_TE_RULES_##id
/* an engine's measured gap: no TE line in any release */
#define NO_CITE NULL, {{0u, 0}}

static const cite_row cite_rows[] = {
    {"pre_scale_bias", C_REF, "fused_attn.cpp", {{R(2_19), 354}}},
    {"bias_missing", C_REF, "fused_attn.py", {{R(2_19), 335}}},
    {"bias_dtype", C_REF, "fused_attn.py", {{R(2_19), 340}}},
    {"bias_padding", C_REF, "fused_attn.cpp", {{R(2_19), 412}}},
    {"alibi_mask", C_REF, "fused_attn.cpp", {{R(2_19), 358}}},
    {"window_mask", C_REF, "utils.py", {{R(2_19), 2697}, {R(2_20), 3016}}},
    {"window_not_normalised", C_REF, "utils.py", {{R(2_19), 2690}, {R(2_20), 3009}}},
    {"heads_divisible", C_REF, "dot_product_attention.py", {{R(2_19), 748}, {R(2_20), 928}}},
    {"thd_padding", C_REF, "dot_product_attention.py", {{R(2_19), 1800}, {R(2_20), 2450}}},
    {"paged_padding", C_REF, "dot_product_attention.py", {{R(2_19), 1834}, {R(2_20), 2537}}},
    {"paged_training", C_REF, "fused_attn.py", {{R(2_19), 448}}},
    {"paged_fp8", C_REF, "utils.py", {{R(2_19), 868}, {R(2_20), 969}}},
    {"head_dim", C_REF, "fused_attn.cpp", {{R(2_19), 310}}},
    {"head_dim_large_inference", C_REF, "fused_attn.cpp", {{R(2_19), 326}}},
    {"head_dim_large_decode", C_REF, "fused_attn.cpp", {{R(2_19), 328}}},
    {"mla_hopper_training", C_REF, "fused_attn.cpp", {{R(2_19), 349}}},
    {"bottom_right_sq_gt_skv", C_REF, "fused_attn.cpp", {{R(2_19), 400}}},
    {"swa_restrictions", C_REF, "fused_attn.cpp", {{R(2_19), 430}}},
    {"dropout_range", C_REF, "backends.py", {{R(2_19), 397}, {R(2_20), 412}}},
    {"bias_sink_quirk", C_REF, "attention.cpp", {{R(2_19), 548}}},
    {"cpu_offload_v1", C_REF, "backends.py", {{R(2_19), 1708}, {R(2_20), 1939}}},
    {"fp8_mxfp8_blackwell", C_REF, "utils.py", {{R(2_19), 703}, {R(2_20), 774}}},
    {"fp8_quantizer_type", C_REF, "utils.py", {{R(2_19), 2776}, {R(2_20), 3095}}},
    {"fp8_qkv_format", C_REF, "fused_attn.cpp", {{R(2_19), 286}}},
    {"fp8_bias", C_REF, "fused_attn.cpp", {{R(2_19), 258}}},
    {"fp8_softmax", C_REF, "fused_attn.cpp", {{R(2_19), 286}}},
    {"fp8_bottom_right", C_REF, "fused_attn.cpp", {{R(2_19), 279}}},
    {"fp8_head_dim", C_REF, "fused_attn.cpp", {{R(2_19), 266}}},
    {"fp8_max_logit", C_REF, "backends.py", {{R(2_19), 1750}, {R(2_20), 2275}}},
    {"fp8_window", C_REF, "utils.py", {{R(2_19), 1342}, {R(2_20), 1443}}},
    {"max_logit_cudnn", C_REF, "fused_attn.cpp", {{R(2_19), 479}}},
    {"float32_cudnn", C_REF, "fused_attn.cpp", {{R(2_19), 296}}},
    {"dsink_thd_cudnn", C_REF, NO_CITE},
    {"thd_paged_decode_cudnn", C_REF, NO_CITE},
    {"thd_cache_decode_gqa_cudnn", C_REF, NO_CITE},
    {"pre_scale_bias_engines", C_REF, NO_CITE},
    {"fp8_descales_engines", C_REF, NO_CITE},
    {"fp8_bias_engines", C_REF, NO_CITE},
    {"fp8_softmax_engines", C_REF, NO_CITE},
    {"fp8_thd_cudnn", C_REF, NO_CITE},
    {"fp8_head_dim_cudnn", C_REF, NO_CITE},
    {"fp8_paged_cudnn", C_REF, NO_CITE},
    {"fp8_max_logit_cudnn", C_REF, NO_CITE},
    {"fp8_arch_cudnn", C_REF, NO_CITE},
    {"fp8_bottom_right_sm90_cudnn", C_REF, NO_CITE},
    {"fp8_o_f16_sm90_cudnn", C_REF, NO_CITE},
    {"fp8_dropout_sm90_cudnn", C_REF, NO_CITE},
    {"fp8_bwd_head_dim_sm90_cudnn", C_REF, NO_CITE},
    {"det_sink", C_ROUTE, "utils.py", {{R(2_19), 1534}, {R(2_20), 1761}}},
    {"det_bias_grad", C_ROUTE, "utils.py", {{R(2_19), 1554}, {R(2_20), 1781}}},
    {"det_thd_bhss", C_ROUTE, "utils.py", {{R(2_19), 1578}, {R(2_20), 1801}}},
    {"bias_111s_grad", C_ROUTE, "utils.py", {{R(2_19), 1449}, {R(2_20), 1575}}},
    {"float32_module", C_ROUTE, "backends.py", {{R(2_19), 2147}, {R(2_20), 2406}}},
    {"mla_layout", C_ROUTE, "utils.py", {{R(2_19), 906}, {R(2_20), 1007}}},
};

/* Every release the table knows, from the releases table itself: its bit,
 * the wheel's release and the revision of the C++ read for it. */
#define REL_(id, name, rel, cpp) {FATTN_TE_RULES_##id, rel, cpp},
static const struct {
    unsigned bit;
    const char *release, *cpp_rev;
} releases[] = {FATTN_TE_RELEASES(REL_, FATTN_TE_NOSEP_)};
#undef REL_
_Static_assert(sizeof releases / sizeof releases[0] == FATTN_TE_RULES_COUNT,
               "one entry per FATTN_TE_RELEASES row");

/* The line cite_row w gives for releases[k] (0: none). */
static int cite_line(const cite_row *w, int k)
{
    int line = 0;
    for (int i = 0; i < FATTN_SUPPORT_MAX_WHERE && w->at[i].since; i++)
        for (int j = 0; j <= k; j++)
            if (releases[j].bit == w->at[i].since)
                line = w->at[i].line;
    return line;
}

static const char *last_part(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static void check_cite(const fattn_support_rule *r, unsigned one, const char *file,
                       const char *rev, int line)
{
    fattn_support_cite c;
    bool cited = fattn_support_rule_cite(r, one, &c);
    if (line == 0) {
        ck_assert_msg(!cited && (!file || !fattn_support_rule_holds(r, one)),
                      "%s must cite nothing for TE %s", r->id, fattn_te_rules_name(one));
        return;
    }
    ck_assert_msg(cited && fattn_support_rule_holds(r, one), "%s applies to TE %s", r->id,
                  fattn_te_rules_name(one));
    ck_assert_msg(!strncmp(c.file, "transformer_engine/", 19), "%s: %s", r->id, c.file);
    ck_assert_str_eq(last_part(c.file), file);
    ck_assert_str_eq(c.rev, rev);
    ck_assert_msg(c.line == line, "%s in TE %s: line %d, want %d", r->id,
                  fattn_te_rules_name(one), c.line, line);
}

/* Each rule: its class, and in every release its citation; a refusal's
 * message under each release's rules cites that release. */
START_TEST(rule_cites)
{
    const cite_row *w = &cite_rows[_i];
    const fattn_support_rule *r = w->cls == C_REF ? fattn_support_rule_find(w->id)
                                                  : fattn_support_route_find(w->id);
    ck_assert_msg(r != NULL, "no %s rule %s", w->cls == C_REF ? "refusal" : "routing", w->id);
    ck_assert_int_eq(r->cls, w->cls);
    for (int k = 0; k < FATTN_TE_RULES_COUNT; k++) {
        unsigned one = releases[k].bit;
        int line = cite_line(w, k);
        bool cpp = w->file && strstr(w->file, ".cpp") != NULL;
        const char *rev = cpp ? releases[k].cpp_rev : releases[k].release;
        check_cite(r, one, w->file, rev, line);
        if (w->cls != C_REF)
            continue;
        fe_spec s = fe_spec_for_rule(w->id);
        fattn_support_query q = fe_query(&s);
        q.te_rules = one;
        const fattn_support_rule *failed = NULL;
        unsigned eng = r->engines & FATTN_SUPPORT_ENGINE_CUDNN ? FATTN_SUPPORT_ENGINE_CUDNN
                                                               : FATTN_SUPPORT_ENGINE_CPU;
        fattn_status st = fattn_support_check(&q, eng, &failed);
        /* a row that cites no TE line refuses at the call all the same
         * unless it is checked at the backward only */
        bool refuses = line || r->stage == FATTN_SUPPORT_AT_CALL;
        /* an engine's gap that TE's own row refuses first: that row */
        const char *front = fe_rule_at_front_end(w->id);
        const fattn_support_rule *first = front ? fattn_support_rule_find(front) : r;
        ck_assert_msg(refuses ? failed == first : st == FATTN_OK, "%s under TE %s: %s", w->id,
                      fattn_te_rules_name(one), fattn_last_error());
        char want[160];
        snprintf(want, sizeof want, "(TE %s transformer_engine/", rev);
        ck_assert_msg(!line || strstr(fattn_last_error(), want), "'%s' lacks '%s'",
                      fattn_last_error(), want);
        snprintf(want, sizeof want, "%s:%d)", w->file ? w->file : "", line);
        ck_assert_msg(!line || strstr(fattn_last_error(), want), "'%s' lacks '%s'",
                      fattn_last_error(), want);
    }
    char id[96];
    snprintf(id, sizeof id, "support.cite.%s", w->id);
    fattn_test_mark(id);
}
END_TEST

/* Every row of both tables has a citation row here. */
START_TEST(cites_complete)
{
    int nr = 0, nt = 0;
    const fattn_support_rule *rules = fattn_support_rules(&nr);
    const fattn_support_rule *routes = fattn_support_routes(&nt);
    ck_assert_int_eq(nr + nt, FE_NROWS(cite_rows));
    for (int i = 0; i < nr + nt; i++) {
        const fattn_support_rule *r = i < nr ? &rules[i] : &routes[i - nr];
        bool found = false;
        for (int j = 0; j < FE_NROWS(cite_rows); j++)
            found = found || (!strcmp(cite_rows[j].id, r->id) && cite_rows[j].cls == r->cls);
        ck_assert_msg(found, "rule %s has no citation row", r->id);
    }
    for (int i = 0; i < nt; i++) {
        ck_assert_int_eq(routes[i].status, FATTN_OK);
        ck_assert_ptr_eq(fattn_support_route_find(routes[i].id), &routes[i]);
        ck_assert_ptr_null(fattn_support_rule_find(routes[i].id)); /* never a refusal */
    }
    ck_assert_ptr_null(fattn_support_route_find("pre_scale_bias"));
}
END_TEST

START_TEST(te_rules_names)
{
    unsigned v = 0;
    ck_assert_int_eq(fattn_te_rules_parse("2.19", &v), FATTN_OK);
    ck_assert_uint_eq(v, FATTN_TE_RULES_2_19);
    ck_assert_int_eq(fattn_te_rules_parse("2.20", &v), FATTN_OK);
    ck_assert_uint_eq(v, FATTN_TE_RULES_2_20);
    const char *bad[] = {"2.21", "2.20.2", "", "2.2", NULL};
    for (int i = 0; i < FE_NROWS(bad); i++) {
        ck_assert_int_eq(fattn_te_rules_parse(bad[i], &v), FATTN_E_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(fattn_last_error(), "known: 2.19, 2.20"));
    }
    ck_assert_str_eq(fattn_te_rules_name(FATTN_TE_RULES_2_19), "2.19");
    ck_assert_str_eq(fattn_te_rules_release(FATTN_TE_RULES_2_20), "2.20.2");
    ck_assert_ptr_null(fattn_te_rules_name(FATTN_TE_RULES_ALL));
    ck_assert_ptr_null(fattn_te_rules_release(0));
    /* the default is the newest; a query naming no single release is refused */
    fattn_support_query q;
    fattn_support_query_init(&q);
    ck_assert_uint_eq(q.te_rules, FATTN_TE_RULES_2_20);
    ck_assert(!q.deterministic && !q.bias_requires_grad && q.b == 1);
    q.te_rules = FATTN_TE_RULES_ALL;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_E_INVALID_ARG);
    q.te_rules = 0;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_E_INVALID_ARG);
}
END_TEST

/* mla_hopper_training: fused_attn.cpp:351-353's bounds. */
START_TEST(mla_boundaries)
{
    static const struct {
        int64_t d_qk, d_v;
        bool training, refused;
    } rows[] = {
        {256, 128, true, true},   {128, 256, true, true},  {136, 128, true, true},
        {192, 128, true, false},  {128, 128, true, false}, {256, 256, true, false},
        {128, 120, true, false},  {120, 256, true, false}, {256, 128, false, false},
    };
    for (int i = 0; i < FE_NROWS(rows); i++) {
        fattn_support_query q;
        fattn_support_query_init(&q);
        q.d_qk = rows[i].d_qk, q.d_v = rows[i].d_v, q.is_training = rows[i].training;
        for (unsigned v = FATTN_TE_RULES_2_19; v <= FATTN_TE_RULES_2_20; v <<= 1) {
            q.te_rules = v;
            const fattn_support_rule *failed = NULL;
            fattn_status st = fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, &failed);
            ck_assert_msg(rows[i].refused ? st == FATTN_E_INVALID_CASE && failed &&
                                                !strcmp(failed->id, "mla_hopper_training")
                                          : st == FATTN_OK,
                          "d_qk %lld d_v %lld training %d: %s", (long long)rows[i].d_qk,
                          (long long)rows[i].d_v, rows[i].training, fattn_last_error());
        }
    }
}
END_TEST

/* The cuDNN range a row holds for: each versioned row refuses inside its
 * range and not outside it (the reference platform's 9.19.0 is the default). */
START_TEST(cudnn_ranges)
{
    static const struct {
        const char *id;
        long inside, outside;
    } rows[] = {
        {"mla_hopper_training", 91100, 91099}, /* cuDNN >= 9.11 */
        {"fp8_qkv_format", 92099, 92100},      /* before 9.21 */
        {"fp8_softmax", 92099, 92100},
        {"dsink_thd_cudnn", 91900, 91901},     /* measured on 9.19.0 */
        {"thd_paged_decode_cudnn", 92800, 92801}, /* 9.19.0 wrong, 9.28.1 right */
    };
    for (int i = 0; i < FE_NROWS(rows); i++) {
        const fattn_support_rule *r = fattn_support_rule_find(rows[i].id);
        ck_assert_ptr_nonnull(r);
        fe_spec s = fe_spec_for_rule(rows[i].id);
        fattn_support_query q = fe_query(&s);
        bool bwd = r->stage == FATTN_SUPPORT_AT_BACKWARD;
        q.at_backward = bwd;
        ck_assert_int_eq(q.cudnn_version, FATTN_SUPPORT_CUDNN_REFERENCE);
        for (int k = 0; k < 3; k++) {
            long v = k == 0 ? FATTN_SUPPORT_CUDNN_REFERENCE : k == 1 ? rows[i].inside
                                                                     : rows[i].outside;
            q.cudnn_version = v;
            const fattn_support_rule *failed = NULL;
            fattn_status st = bwd ? fattn_support_check_engine(&q, FATTN_SUPPORT_ENGINE_CUDNN,
                                                               &failed)
                                  : fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CUDNN, &failed);
            /* outside its range the row passes; an engine's gap that holds at
             * every cuDNN (fp8_thd_cudnn, fp8_softmax_engines) may still refuse */
            ck_assert_msg(k == 2 ? failed != r && (st == FATTN_OK || st == FATTN_E_UNSUPPORTED)
                                 : failed == r,
                          "%s at cuDNN %ld: %s", rows[i].id, v, fattn_last_error());
            (void)st;
        }
    }
    fattn_test_mark("support.cudnn_ranges");
}
END_TEST

/* The front ends ask for TE's validity at the reference platform and for
 * the engine's gaps at the cuDNN the engine loaded: on a cuDNN >= 9.21 the
 * max_logit gap is gone while FP8's TE rules below 9.21 still refuse. */
START_TEST(engine_version_for_gaps)
{
    static const struct {
        const char *id;
        long engine_version;
        bool refused;
    } rows[] = {
        {"max_logit_cudnn", 0, true},      /* 0: the platform's (reference) version */
        {"max_logit_cudnn", 91900, true},
        {"max_logit_cudnn", 92100, false}, /* the engine's gap ends at 9.21 */
        {"max_logit_cudnn", 92801, false},
        {"fp8_softmax", 92801, true},      /* a TE rule: the reference platform's */
        {"fp8_qkv_format", 92801, true},
    };
    for (int i = 0; i < FE_NROWS(rows); i++) {
        fe_spec s = fe_spec_for_rule(rows[i].id);
        fattn_support_query q = fe_query(&s);
        q.engine_cudnn_version = rows[i].engine_version;
        const fattn_support_rule *failed = NULL;
        fattn_status st = fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CUDNN, &failed);
        if (rows[i].refused)
            ck_assert_msg(failed && !strcmp(failed->id, rows[i].id), "%s at engine cuDNN %ld: %s",
                          rows[i].id, rows[i].engine_version, fattn_last_error());
        else
            ck_assert_msg(st == FATTN_OK, "%s at engine cuDNN %ld: %s", rows[i].id,
                          rows[i].engine_version, fattn_last_error());
    }
}
END_TEST

/* The dispatch's check is the engines' own gaps only: a case TE refuses is
 * the front ends' business, and passes it. */
START_TEST(engine_gaps_only)
{
    fe_spec s = fe_spec_for_rule("alibi_mask");
    fattn_support_query q = fe_query(&s);
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL),
                     FATTN_E_INVALID_CASE);
    ck_assert_int_eq(fattn_support_check_engine(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    /* a case TE refuses and no engine runs either: the front ends name TE's
     * rule, the dispatch the engines' gap */
    s = fe_spec_for_rule("pre_scale_bias");
    q = fe_query(&s);
    const fattn_support_rule *gap = NULL;
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, &gap),
                     FATTN_E_INVALID_CASE);
    ck_assert_str_eq(gap->id, "pre_scale_bias");
    ck_assert_int_eq(fattn_support_check_engine(&q, FATTN_SUPPORT_ENGINE_CPU, &gap),
                     FATTN_E_UNSUPPORTED);
    ck_assert_str_eq(gap->id, "pre_scale_bias_engines");
    s = fe_spec_for_rule("float32_cudnn");
    q = fe_query(&s);
    const fattn_support_rule *failed = NULL;
    ck_assert_int_eq(fattn_support_check_engine(&q, FATTN_SUPPORT_ENGINE_CUDNN, &failed),
                     FATTN_E_UNSUPPORTED);
    ck_assert_str_eq(failed->id, "float32_cudnn");
    ck_assert_int_eq(fattn_support_check_engine(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    fattn_test_mark("support.engine_gaps_only");
}
END_TEST

/* ---- docs/frontends.md's table --------------------------------------------- */

/* The cells of a markdown table row, trimmed, into cells[] (at most max). */
static int split_cells(char *line, char **cells, int max)
{
    int n = 0;
    char *p = strchr(line, '|');
    while (p && n < max) {
        char *start = p + 1, *end = strchr(start, '|');
        if (!end)
            break;
        *end = '\0';
        while (*start == ' ')
            start++;
        char *e = start + strlen(start);
        while (e > start && e[-1] == ' ')
            *--e = '\0';
        cells[n++] = start;
        p = end;
    }
    return n;
}

/* "≥ 9.11", "< 9.21", "≥ 9.11, < 9.21" or "any": a row's cuDNN range. */
static void cudnn_text(const fattn_support_rule *r, char *buf, size_t n)
{
    long v[2] = {r->cudnn_from, r->cudnn_below};
    const char *op[2] = {"≥ ", "< "};
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < 2 && k < n; i++) {
        if (!v[i])
            continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%s%ld.%ld", k ? ", " : "", op[i], v[i] / 10000,
                              v[i] / 100 % 100);
        if (v[i] % 100 && k < n)
            k += (size_t)snprintf(buf + k, n - k, ".%ld", v[i] % 100);
    }
    if (!k)
        snprintf(buf, n, "any");
}

/* "cudnn", or with a GPU architecture range "cudnn, sm < 90" / "cudnn, sm
 * ≥ 90, < 100": a row's engines. */
static void engines_text(const fattn_support_rule *r, char *buf, size_t n)
{
    const char *eng = r->engines == FATTN_SUPPORT_ENGINE_ALL   ? "all"
                      : r->engines == FATTN_SUPPORT_ENGINE_CPU ? "cpu"
                                                               : "cudnn";
    size_t k = (size_t)snprintf(buf, n, "%s", eng);
    int v[2] = {r->sm_from, r->sm_below};
    const char *op[2] = {"≥ ", "< "};
    for (int i = 0, first = 1; i < 2 && k < n; i++) {
        if (!v[i])
            continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%s%d", first ? ", sm " : ", ", op[i], v[i]);
        first = 0;
    }
}

/* The "file:line" at p ("utils.py:2697 ..."); false if there is none. */
static bool cell_cite(const char *p, char *file, size_t n, int *line)
{
    const char *colon = strchr(p, ':');
    if (!colon || colon[1] < '0' || colon[1] > '9' || (size_t)(colon - p) >= n ||
        memchr(p, ' ', (size_t)(colon - p)))
        return false;
    snprintf(file, n, "%.*s", (int)(colon - p), p);
    *line = atoi(colon + 1);
    return true;
}

/* The citation a "where in TE" cell gives for release bit `one`: its first
 * "file:line" holds from the first release on, each "; <name>: file:line"
 * from that release on; "—" for none. */
static bool cell_cite_for(const char *cell, unsigned one, char *file, size_t n, int *line)
{
    if (!strncmp(cell, "—", strlen("—")))
        return false;
    bool ok = cell_cite(cell, file, n, line);
    for (unsigned rel = 2u; ok && rel <= one; rel <<= 1) { /* the second release on */
        char tag[32];
        snprintf(tag, sizeof tag, "; %s: ", fattn_te_rules_name(rel));
        const char *at = strstr(cell, tag);
        if (at)
            ok = cell_cite(at + strlen(tag), file, n, line);
    }
    return ok;
}

/* One table row against one rule: the id, class, status, engines, cuDNN
 * range, and in every release its citation ("—" where the rule cites none;
 * the revision read for each release is the releases table's, said once
 * above the table). */
static void check_doc_row(char **c, const fattn_support_rule *r)
{
    bool ref = r->cls == FATTN_SUPPORT_REFUSAL;
    ck_assert_str_eq(c[0], r->id);
    ck_assert_str_eq(c[1], ref ? "refusal" : "routing");
    const char *st = fattn_status_name(r->status);
    ck_assert_str_eq(c[2], ref ? st + strlen("FATTN_E_") : "—");
    char eng[64];
    engines_text(r, eng, sizeof eng);
    ck_assert_msg(!strcmp(c[3], ref ? eng : "—"), "%s: engines '%s', want '%s'", r->id, c[3],
                  ref ? eng : "—");
    char cu[64];
    cudnn_text(r, cu, sizeof cu);
    ck_assert_msg(!strcmp(c[4], cu), "%s: cuDNN '%s', want '%s'", r->id, c[4], cu);
    for (int i = 0; i < FATTN_TE_RULES_COUNT; i++) {
        unsigned one = 1u << i;
        fattn_support_cite want;
        char file[96];
        int line = 0;
        bool has = cell_cite_for(c[5], one, file, sizeof file, &line);
        if (!fattn_support_rule_cite(r, one, &want)) {
            ck_assert_msg(!has, "%s, TE %s: '%s' cites a line", r->id, fattn_te_rules_name(one),
                          c[5]);
            continue;
        }
        ck_assert_msg(has, "%s, TE %s: cell '%s'", r->id, fattn_te_rules_name(one), c[5]);
        ck_assert_msg(!strcmp(file, last_part(want.file)) && line == want.line,
                      "%s, TE %s: docs say %s:%d, the table %s:%d", r->id,
                      fattn_te_rules_name(one), file, line, last_part(want.file), want.line);
    }
}

/* docs/frontends.md's support table has one row per rule, refusals then
 * routing rules, in the table's order, and says what the rows say. */
START_TEST(docs_table_matches)
{
    FILE *f = fopen(FATTN_SOURCE_ROOT "/docs/frontends.md", "r");
    ck_assert_ptr_nonnull(f);
    int nr = 0, nt = 0;
    const fattn_support_rule *rules = fattn_support_rules(&nr);
    const fattn_support_rule *routes = fattn_support_routes(&nt);
    char line[2048];
    int row = -1; /* -1: before the header */
    while (fgets(line, sizeof line, f)) {
        char *cells[16];
        int n = split_cells(line, cells, 16);
        if (row < 0) {
            if (n > 4 && !strcmp(cells[0], "id") && !strcmp(cells[4], "cuDNN"))
                row = 0;
            continue;
        }
        if (n == 0)
            break; /* the end of the table */
        if (cells[0][0] == '-')
            continue; /* the rule under the header */
        ck_assert_int_eq(n, 6);
        ck_assert_msg(row < nr + nt, "more rows than rules: %s", cells[0]);
        check_doc_row(cells, row < nr ? &rules[row] : &routes[row - nr]);
        row++;
    }
    fclose(f);
    ck_assert_msg(row == nr + nt, "docs/frontends.md has %d of %d rules", row, nr + nt);
    fattn_test_mark("support.docs_table");
}
END_TEST

/* ---- routing rules --------------------------------------------------------- */

/* A query that trips a routing rule, and the same query with one condition
 * of it undone. */
typedef struct route_row {
    const char *id;
    void (*trip)(fattn_support_query *q);
    void (*untrip)(fattn_support_query *q);
} route_row;

static void bias_grad(fattn_support_query *q, int64_t b, int64_t h, int64_t sq)
{
    q->is_training = true;
    q->bias_type = FATTN_BIAS_POST_SCALE_BIAS;
    q->has_bias_tensor = true;
    q->bias_dtype = q->q_dtype;
    q->bias_requires_grad = true;
    q->bias_shape[0] = b, q->bias_shape[1] = h, q->bias_shape[2] = sq;
}

static void trip_det_sink(fattn_support_query *q)
{
    q->deterministic = true;
    q->softmax_type = FATTN_SOFTMAX_LEARNABLE;
}
static void untrip_det_sink(fattn_support_query *q) { q->softmax_type = FATTN_SOFTMAX_VANILLA; }

static void trip_det_bias_grad(fattn_support_query *q)
{
    q->deterministic = true;
    bias_grad(q, 1, q->h, q->sq);
}
static void untrip_det_bias_grad(fattn_support_query *q) { q->bias_requires_grad = false; }

/* b*h*sq*skv = 2 * 2 * 16384 * 16384 = 2^30, the cap itself */
static void trip_det_thd_bhss(fattn_support_query *q)
{
    q->deterministic = true;
    q->is_training = true;
    q->layout = FATTN_LAYOUT_THD_THD_THD;
    q->mask_type = FATTN_MASK_PADDING;
    q->b = 2, q->h = q->hg = 2, q->sq = q->skv = 16384;
}
static void untrip_det_thd_bhss(fattn_support_query *q) { q->skv = 16383; }

static void trip_bias_111s_grad(fattn_support_query *q) { bias_grad(q, 1, 1, 1); }
static void untrip_bias_111s_grad(fattn_support_query *q) { q->bias_shape[2] = q->sq; }

static void trip_float32(fattn_support_query *q) { q->q_dtype = q->kv_dtype = FATTN_DTYPE_FLOAT32; }
static void untrip_float32(fattn_support_query *q)
{
    q->q_dtype = q->kv_dtype = FATTN_DTYPE_BFLOAT16;
}

static void trip_mla_layout(fattn_support_query *q)
{
    q->layout = FATTN_LAYOUT_BSHD_BS2HD;
    q->d_v = 32;
}
static void untrip_mla_layout(fattn_support_query *q) { q->layout = FATTN_LAYOUT_BHSD_BHSD_BHSD; }

static const route_row route_rows[] = {
    {"det_sink", trip_det_sink, untrip_det_sink},
    {"det_bias_grad", trip_det_bias_grad, untrip_det_bias_grad},
    {"det_thd_bhss", trip_det_thd_bhss, untrip_det_thd_bhss},
    {"bias_111s_grad", trip_bias_111s_grad, untrip_bias_111s_grad},
    {"float32_module", trip_float32, untrip_float32},
    {"mla_layout", trip_mla_layout, untrip_mla_layout},
};

static bool routed_by(const fattn_support_query *q, const char *id)
{
    const fattn_support_rule *got[16];
    int n = fattn_support_routed(q, got, 16);
    ck_assert_int_le(n, 16);
    for (int i = 0; i < n; i++)
        if (!strcmp(got[i]->id, id))
            return true;
    return false;
}

/* Each routing rule: tripped under both releases' rules, named with the
 * release's line in the note, never a refusal; undone, gone. */
START_TEST(route_trips)
{
    const route_row *w = &route_rows[_i];
    const fattn_support_rule *r = fattn_support_route_find(w->id);
    ck_assert_ptr_nonnull(r);
    for (unsigned v = FATTN_TE_RULES_2_19; v <= FATTN_TE_RULES_2_20; v <<= 1) {
        fattn_support_query q;
        fattn_support_query_init(&q);
        w->trip(&q);
        q.te_rules = v;
        ck_assert_msg(routed_by(&q, w->id), "%s not tripped under TE %s", w->id,
                      fattn_te_rules_name(v));
        /* FusedAttnFunc still runs it: the refusal rows accept it on the CPU */
        ck_assert_msg(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL) == FATTN_OK, "%s: %s", w->id,
                      fattn_last_error());
        fattn_support_cite c;
        ck_assert(fattn_support_rule_cite(r, v, &c));
        char note[512], want[160];
        fattn_support_route_note(&q, note, sizeof note);
        snprintf(want, sizeof want, "rule %s, %s:%d", w->id, last_part(c.file), c.line);
        ck_assert_msg(strstr(note, want) != NULL, "note '%s' lacks '%s'", note, want);
        snprintf(want, sizeof want, "DPA %s would not route here: ", fattn_te_rules_name(v));
        ck_assert_msg(!strncmp(note, want, strlen(want)), "note '%s'", note);
        ck_assert_ptr_null(strstr(note, "rules only"));
        w->untrip(&q);
        ck_assert_msg(!routed_by(&q, w->id), "%s still tripped", w->id);
    }
    char id[96];
    snprintf(id, sizeof id, "support.route.%s", w->id);
    fattn_test_mark(id);
}
END_TEST

/* bias_111s_grad where the releases differ: with max_seqlen_q 1, 2.19.0
 * still calls a [1,1,1,skv] bias "111s", 2.20.2 calls it "11ss". */
START_TEST(route_111s_sq1)
{
    fattn_support_query q;
    fattn_support_query_init(&q);
    trip_bias_111s_grad(&q);
    q.sq = 1;
    q.te_rules = FATTN_TE_RULES_2_19;
    ck_assert(routed_by(&q, "bias_111s_grad"));
    q.te_rules = FATTN_TE_RULES_2_20;
    ck_assert(!routed_by(&q, "bias_111s_grad"));
    q.bias_requires_grad = false; /* forward only: neither release minds */
    q.te_rules = FATTN_TE_RULES_2_19;
    ck_assert(!routed_by(&q, "bias_111s_grad"));
    fattn_test_mark("support.route.bias_111s_grad.sq1");
}
END_TEST

/* A plain query trips no routing rule and gets an empty note; the note is
 * cut, never overrun, in a small buffer. */
START_TEST(route_note_plain)
{
    fattn_support_query q;
    fattn_support_query_init(&q);
    char note[256];
    ck_assert_int_eq(fattn_support_routed(&q, NULL, 0), 0);
    fattn_support_route_note(&q, note, sizeof note);
    ck_assert_str_eq(note, "");
    trip_det_sink(&q);
    trip_float32(&q);
    ck_assert_int_eq(fattn_support_routed(&q, NULL, 0), 2);
    char tiny[12];
    fattn_support_route_note(&q, tiny, sizeof tiny);
    ck_assert_uint_eq(strlen(tiny), sizeof tiny - 1);
    fattn_support_route_note(&q, note, sizeof note);
    ck_assert_str_eq(note, "DPA 2.20 would not route here: rule det_sink, utils.py:1761; "
                           "rule float32_module, backends.py:2406");
}
END_TEST

/* ---- a rule only the newer release has ------------------------------------ */

static bool any_sink(const fattn_support_query *q)
{
    return q->softmax_type != FATTN_SOFTMAX_VANILLA;
}

#define NEW_ONLY                                                                               \
    FATTN_SUPPORT_AT_CALL, FATTN_TE_RULES_2_20, 0u, 0L, 0L, 0, 0,                              \
    {                                                                                          \
        {FATTN_TE_RULES_2_20, "transformer_engine/x.py", 7}                                    \
    }
/* an engine's gap first: no release's refusal, never "TE 2.20 rules only" */
static const fattn_support_rule new_refusal[] = {
    {"new_engine_gap", any_sink, FATTN_E_UNSUPPORTED, "made up", FATTN_SUPPORT_ENGINE_CUDNN,
     FATTN_SUPPORT_REFUSAL, NEW_ONLY},
    {"new_refusal", any_sink, FATTN_E_INVALID_CASE, "made up", FATTN_SUPPORT_ENGINE_ALL,
     FATTN_SUPPORT_REFUSAL, NEW_ONLY},
};
static const fattn_support_rule new_route[] = {
    {"new_route", any_sink, FATTN_OK, "made up", FATTN_SUPPORT_ENGINE_ALL,
     FATTN_SUPPORT_ROUTING, NEW_ONLY},
};

/* Selected 2.19: the 2.20-only rows neither refuse nor route, and the note
 * says what 2.20's rules alone would do. Selected 2.20: they apply, and the
 * refusal says it is 2.20's only. */
START_TEST(newer_rules_only)
{
    fattn_support_query q;
    fattn_support_query_init(&q);
    q.softmax_type = FATTN_SOFTMAX_OFF_BY_ONE;
    q.te_rules = FATTN_TE_RULES_2_19;
    ck_assert_int_eq(fattn__support_check_rows(new_refusal, 2, &q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    ck_assert_int_eq(fattn__support_routed_rows(new_route, 1, &q, NULL, 0), 0);
    char note[256];
    fattn__support_note_rows(new_refusal, 2, new_route, 1, &q, note, sizeof note);
    ck_assert_str_eq(note, "TE 2.20 rules only: DPA 2.20 would not route here: rule new_route, "
                           "x.py:7; TE 2.20 rules only: refused by rule new_refusal, x.py:7");
    q.te_rules = FATTN_TE_RULES_2_20;
    const fattn_support_rule *failed = NULL;
    ck_assert_int_eq(fattn__support_check_rows(new_refusal, 2, &q, FATTN_SUPPORT_ENGINE_CPU, &failed),
                     FATTN_E_INVALID_CASE);
    ck_assert_ptr_eq(failed, &new_refusal[1]);
    ck_assert_str_eq(fattn_last_error(), "rule new_refusal: made up (TE 2.20.2 "
                                         "transformer_engine/x.py:7; TE 2.20 rules only)");
    ck_assert_int_eq(fattn__support_routed_rows(new_route, 1, &q, NULL, 0), 1);
    fattn__support_note_rows(new_refusal, 2, new_route, 1, &q, note, sizeof note);
    ck_assert_str_eq(note, "DPA 2.20 would not route here: rule new_route, x.py:7");
    /* a vanilla query: nothing from either release */
    q.softmax_type = FATTN_SOFTMAX_VANILLA;
    q.te_rules = FATTN_TE_RULES_2_19;
    fattn__support_note_rows(new_refusal, 2, new_route, 1, &q, note, sizeof note);
    ck_assert_str_eq(note, "");
    fattn_test_mark("support.newer_rules_only");
}
END_TEST

#if FATTN_TESTING
/* The device measurement's hook (fattn/testing.h): a named engine gap is
 * lifted at the front ends' check and the dispatch's alike; TE's own rows
 * never are; a name is matched whole. */
START_TEST(lift_rows)
{
    fe_spec s = fe_spec_for_rule("max_logit_cudnn");
    fattn_support_query q = fe_query(&s);
    const fattn_support_rule *failed = NULL;
    setenv(FATTN_TESTING_LIFT_ROWS_ENV, "float32_cudnn,max_logit_cudnn", 1);
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CUDNN, NULL), FATTN_OK);
    ck_assert_int_eq(fattn_support_check_engine(&q, FATTN_SUPPORT_ENGINE_CUDNN, NULL), FATTN_OK);
    setenv(FATTN_TESTING_LIFT_ROWS_ENV, "max_logit", 1);
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CUDNN, &failed),
                     FATTN_E_UNSUPPORTED);
    ck_assert_str_eq(failed->id, "max_logit_cudnn");
    fe_spec t = fe_spec_for_rule("head_dim_large_decode");
    fattn_support_query qt = fe_query(&t);
    setenv(FATTN_TESTING_LIFT_ROWS_ENV, "head_dim_large_decode", 1);
    ck_assert_int_eq(fattn_support_check(&qt, FATTN_SUPPORT_ENGINE_CPU, &failed),
                     FATTN_E_INVALID_CASE);
    ck_assert_str_eq(failed->id, "head_dim_large_decode");
    unsetenv(FATTN_TESTING_LIFT_ROWS_ENV);
    /* widened: the CPU engine skips what only cuDNN's row refuses */
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    setenv(FATTN_TESTING_WIDEN_ROWS_ENV, "max_logit_cudnn", 1);
    ck_assert_int_eq(fattn_support_check_engine(&q, FATTN_SUPPORT_ENGINE_CPU, &failed),
                     FATTN_E_UNSUPPORTED);
    ck_assert_str_eq(failed->id, "max_logit_cudnn");
    setenv(FATTN_TESTING_WIDEN_ROWS_ENV, "max_logit", 1); /* a part of a name: no effect */
    ck_assert_int_eq(fattn_support_check_engine(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    setenv(FATTN_TESTING_WIDEN_ROWS_ENV, "head_dim_large_decode", 1); /* TE's: no effect */
    ck_assert_int_eq(fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL), FATTN_OK);
    unsetenv(FATTN_TESTING_WIDEN_ROWS_ENV);
    fattn_test_mark("support.lift_rows");
}
END_TEST
#endif

static void list_ids(void)
{
    for (int i = 0; i < FE_NROWS(rule_rows); i++)
        printf("support.%s\n", rule_rows[i].id);
    for (int i = 0; i < FE_NROWS(cite_rows); i++)
        printf("support.cite.%s\n", cite_rows[i].id);
    for (int i = 0; i < FE_NROWS(route_rows); i++)
        printf("support.route.%s\n", route_rows[i].id);
    printf("support.newer_rules_only\nsupport.route.bias_111s_grad.sq1\n"
           "support.cudnn_ranges\nsupport.engine_gaps_only\nsupport.docs_table\n");
#if FATTN_TESTING
    printf("support.lift_rows\n");
#endif
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("support");
    TCase *tc = tcase_create("rules");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, rule_refuses, 0, FE_NROWS(rule_rows));
    tcase_add_test(tc, table_matches);
    tcase_add_loop_test(tc, rule_cites, 0, FE_NROWS(cite_rows));
    tcase_add_test(tc, cites_complete);
    tcase_add_test(tc, te_rules_names);
    tcase_add_test(tc, mla_boundaries);
    tcase_add_test(tc, cudnn_ranges);
    tcase_add_test(tc, engine_gaps_only);
    tcase_add_test(tc, engine_version_for_gaps);
    tcase_add_test(tc, docs_table_matches);
    tcase_add_loop_test(tc, route_trips, 0, FE_NROWS(route_rows));
    tcase_add_test(tc, route_111s_sq1);
    tcase_add_test(tc, route_note_plain);
    tcase_add_test(tc, newer_rules_only);
    tcase_add_test(tc, default_passes);
    tcase_add_test(tc, bad_engine);
    tcase_add_test(tc, boundaries);
    tcase_add_test(tc, matrix_passes);
#if FATTN_TESTING
    tcase_add_test(tc, lift_rows);
#endif
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
