/* Suite "te": TransformerEngine enum names, layout queries, window
 * normalisation and bottom_right_diagonal defaults.
 *
 * The expected tables are written out here from TE's sources
 * (NVIDIA/TransformerEngine d0067d0): enum values from
 * common/include/transformer_engine/fused_attn.h, strings from
 * pytorch/cpp_extensions/fused_attn.py, layout maps from
 * common/fused_attn/fused_attn.cpp L100-226, window rules from
 * pytorch/attention/dot_product_attention/utils.py L2642-2684.
 */
#include <stdint.h>

#include "fattn/te.h"
#include "fattn_test.h"

#define NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- layouts ------------------------------------------------------------------ */

typedef struct layout_expect {
    int value; /* NVTE_QKV_Layout */
    const char *name;
    const char *group;  /* NVTE_QKV_Layout_Group, lower case */
    const char *format; /* nvte_get_qkv_format */
    const char *q;      /* nvte_get_q_format */
    const char *kv;     /* nvte_get_kv_format */
    bool paged;
} layout_expect;

static const layout_expect layout_rows[] = {
    {0, "sb3hd", "3hd", "sbhd", "sbhd", "sbhd", false},
    {1, "sbh3d", "h3d", "sbhd", "sbhd", "sbhd", false},
    {2, "sbhd_sb2hd", "hd_2hd", "sbhd", "sbhd", "sbhd", false},
    {3, "sbhd_sbh2d", "hd_h2d", "sbhd", "sbhd", "sbhd", false},
    {4, "sbhd_sbhd_sbhd", "hd_hd_hd", "sbhd", "sbhd", "sbhd", false},
    {5, "bs3hd", "3hd", "bshd", "bshd", "bshd", false},
    {6, "bsh3d", "h3d", "bshd", "bshd", "bshd", false},
    {7, "bshd_bs2hd", "hd_2hd", "bshd", "bshd", "bshd", false},
    {8, "bshd_bsh2d", "hd_h2d", "bshd", "bshd", "bshd", false},
    {9, "bshd_bshd_bshd", "hd_hd_hd", "bshd", "bshd", "bshd", false},
    {10, "t3hd", "3hd", "thd", "thd", "thd", false},
    {11, "th3d", "h3d", "thd", "thd", "thd", false},
    {12, "thd_t2hd", "hd_2hd", "thd", "thd", "thd", false},
    {13, "thd_th2d", "hd_h2d", "thd", "thd", "thd", false},
    {14, "thd_thd_thd", "hd_hd_hd", "thd", "thd", "thd", false},
    {15, "sbhd_bshd_bshd", "hd_hd_hd", "sbhd_2bshd", "sbhd", "bshd", false},
    {16, "bshd_sbhd_sbhd", "hd_hd_hd", "bshd_2sbhd", "bshd", "sbhd", false},
    {17, "thd_bshd_bshd", "hd_hd_hd", "thd_2bshd", "thd", "bshd", false},
    {18, "thd_sbhd_sbhd", "hd_hd_hd", "thd_2sbhd", "thd", "sbhd", false},
    {19, "paged_kv_bshd_bshd_bshd", "paged_kv_hd_hd_hd", "bshd", "bshd", "bshd", true},
    {20, "paged_kv_bshd_sbhd_sbhd", "paged_kv_hd_hd_hd", "bshd_2sbhd", "bshd", "sbhd", true},
    {21, "paged_kv_sbhd_bshd_bshd", "paged_kv_hd_hd_hd", "sbhd_2bshd", "sbhd", "bshd", true},
    {22, "paged_kv_sbhd_sbhd_sbhd", "paged_kv_hd_hd_hd", "sbhd", "sbhd", "sbhd", true},
    {23, "paged_kv_thd_bshd_bshd", "paged_kv_hd_hd_hd", "thd_2bshd", "thd", "bshd", true},
    {24, "paged_kv_thd_sbhd_sbhd", "paged_kv_hd_hd_hd", "thd_2sbhd", "thd", "sbhd", true},
    {25, "bhsd_bhsd_bhsd", "sd_sd_sd", "bhsd", "bhsd", "bhsd", false},
};

START_TEST(layout_row)
{
    const layout_expect *r = &layout_rows[_i];
    fattn_qkv_layout l = (fattn_qkv_layout)r->value;
    ck_assert_ptr_nonnull(fattn_layout_name(l));
    ck_assert_str_eq(fattn_layout_name(l), r->name);
    fattn_qkv_layout parsed = FATTN_LAYOUT_NOT_SET;
    ck_assert_int_eq(fattn_layout_parse(r->name, &parsed), FATTN_OK);
    ck_assert_int_eq((int)parsed, r->value);
    ck_assert_str_eq(fattn_layout_group_name(fattn_layout_group(l)), r->group);
    ck_assert_str_eq(fattn_format_name(fattn_layout_format(l)), r->format);
    ck_assert_str_eq(fattn_format_name(fattn_layout_q_format(l)), r->q);
    ck_assert_str_eq(fattn_format_name(fattn_layout_kv_format(l)), r->kv);
    ck_assert_int_eq(fattn_layout_is_paged(l), r->paged);
}
END_TEST

START_TEST(layout_enum_values)
{
    ck_assert_int_eq(NROWS(layout_rows), FATTN_LAYOUT_COUNT);
    ck_assert_int_eq(FATTN_LAYOUT_SB3HD, 0);
    ck_assert_int_eq(FATTN_LAYOUT_THD_THD_THD, 14);
    ck_assert_int_eq(FATTN_LAYOUT_PAGED_KV_BSHD_BSHD_BSHD, 19);
    ck_assert_int_eq(FATTN_LAYOUT_BHSD_BHSD_BHSD, 25);
    ck_assert_int_eq(FATTN_LAYOUT_NOT_SET, 26);
    ck_assert_int_eq(FATTN_LAYOUT_GROUP_PAGED_KV_HD_HD_HD, 5);
    ck_assert_int_eq(FATTN_LAYOUT_GROUP_SD_SD_SD, 6);
    ck_assert_int_eq(FATTN_FORMAT_BSHD_2SBHD, 3);
    ck_assert_int_eq(FATTN_FORMAT_SBHD_2BSHD, 4);
    ck_assert_int_eq(FATTN_FORMAT_BHSD, 7);
    /* out-of-enum and NOT_SET: no name, NOT_SET answers */
    const int bad[] = {FATTN_LAYOUT_NOT_SET, -1, 27, 1000};
    for (int i = 0; i < NROWS(bad); i++) {
        fattn_qkv_layout l = (fattn_qkv_layout)bad[i];
        ck_assert_ptr_null(fattn_layout_name(l));
        ck_assert_int_eq(fattn_layout_group(l), FATTN_LAYOUT_GROUP_NOT_SET);
        ck_assert_int_eq(fattn_layout_format(l), FATTN_FORMAT_NOT_SET);
        ck_assert_int_eq(fattn_layout_q_format(l), FATTN_FORMAT_NOT_SET);
        ck_assert_int_eq(fattn_layout_kv_format(l), FATTN_FORMAT_NOT_SET);
        ck_assert(!fattn_layout_is_paged(l));
    }
    ck_assert_ptr_null(fattn_layout_group_name(FATTN_LAYOUT_GROUP_NOT_SET));
    ck_assert_ptr_null(fattn_format_name(FATTN_FORMAT_NOT_SET));
}
END_TEST

/* ---- formats ------------------------------------------------------------------ */

typedef struct name_expect {
    int value;
    const char *name;
} name_expect;

static const name_expect format_rows[] = {
    {0, "sbhd"}, {1, "bshd"}, {2, "thd"}, {3, "bshd_2sbhd"},
    {4, "sbhd_2bshd"}, {5, "thd_2bshd"}, {6, "thd_2sbhd"}, {7, "bhsd"},
};

static const name_expect group_rows[] = {
    {0, "3hd"}, {1, "h3d"}, {2, "hd_2hd"}, {3, "hd_h2d"},
    {4, "hd_hd_hd"}, {5, "paged_kv_hd_hd_hd"}, {6, "sd_sd_sd"},
};

static const name_expect bias_rows[] = {
    {0, "no_bias"}, {1, "pre_scale_bias"}, {2, "post_scale_bias"}, {3, "alibi"},
};

static const name_expect mask_rows[] = {
    {0, "no_mask"}, {1, "padding"}, {2, "causal"},
    {3, "padding_causal"}, {4, "causal_bottom_right"}, {5, "padding_causal_bottom_right"},
};

static const name_expect softmax_rows[] = {
    {0, "vanilla"}, {1, "off-by-one"}, {2, "learnable"},
};

static const name_expect backend_rows[] = {
    {-1, "No_Backend"}, {1, "F16_arbitrary_seqlen"}, {2, "FP8"},
};

START_TEST(format_names)
{
    for (int i = 0; i < NROWS(format_rows); i++) {
        const name_expect *r = &format_rows[i];
        ck_assert_str_eq(fattn_format_name((fattn_qkv_format)r->value), r->name);
        fattn_qkv_format f = FATTN_FORMAT_NOT_SET;
        ck_assert_int_eq(fattn_format_parse(r->name, &f), FATTN_OK);
        ck_assert_int_eq((int)f, r->value);
    }
    for (int i = 0; i < NROWS(group_rows); i++)
        ck_assert_str_eq(fattn_layout_group_name((fattn_qkv_layout_group)group_rows[i].value),
                         group_rows[i].name);
}
END_TEST

START_TEST(bias_names)
{
    for (int i = 0; i < NROWS(bias_rows); i++) {
        const name_expect *r = &bias_rows[i];
        ck_assert_str_eq(fattn_bias_type_name((fattn_bias_type)r->value), r->name);
        fattn_bias_type v = (fattn_bias_type)99;
        ck_assert_int_eq(fattn_bias_type_parse(r->name, &v), FATTN_OK);
        ck_assert_int_eq((int)v, r->value);
    }
    ck_assert_ptr_null(fattn_bias_type_name((fattn_bias_type)4));
}
END_TEST

START_TEST(mask_names)
{
    for (int i = 0; i < NROWS(mask_rows); i++) {
        const name_expect *r = &mask_rows[i];
        ck_assert_str_eq(fattn_mask_type_name((fattn_mask_type)r->value), r->name);
        fattn_mask_type v = (fattn_mask_type)99;
        ck_assert_int_eq(fattn_mask_type_parse(r->name, &v), FATTN_OK);
        ck_assert_int_eq((int)v, r->value);
    }
    ck_assert_ptr_null(fattn_mask_type_name((fattn_mask_type)6));
}
END_TEST

START_TEST(softmax_names)
{
    for (int i = 0; i < NROWS(softmax_rows); i++) {
        const name_expect *r = &softmax_rows[i];
        ck_assert_str_eq(fattn_softmax_type_name((fattn_softmax_type)r->value), r->name);
        fattn_softmax_type v = (fattn_softmax_type)99;
        ck_assert_int_eq(fattn_softmax_type_parse(r->name, &v), FATTN_OK);
        ck_assert_int_eq((int)v, r->value);
    }
    ck_assert_ptr_null(fattn_softmax_type_name((fattn_softmax_type)3));
}
END_TEST

START_TEST(backend_names)
{
    for (int i = 0; i < NROWS(backend_rows); i++) {
        const name_expect *r = &backend_rows[i];
        ck_assert_str_eq(fattn_te_backend_name((fattn_te_backend)r->value), r->name);
        fattn_te_backend v = (fattn_te_backend)99;
        ck_assert_int_eq(fattn_te_backend_parse(r->name, &v), FATTN_OK);
        ck_assert_int_eq((int)v, r->value);
    }
    ck_assert_ptr_null(fattn_te_backend_name((fattn_te_backend)0));
}
END_TEST

/* Unknown strings: FATTN_E_PARSE, output untouched, a message that names the
 * bad string and lists a valid name. */
typedef struct bad_expect {
    int kind; /* 0 layout 1 format 2 bias 3 mask 4 softmax 5 backend */
    const char *input;
    const char *a_valid_name;
} bad_expect;

static const bad_expect bad_rows[] = {
    {0, "SB3HD", "paged_kv_thd_sbhd_sbhd"},
    {0, "sbhd_sbhd", "bhsd_bhsd_bhsd"},
    {0, "", "sb3hd"},
    {0, "not_set", "thd_thd_thd"},
    {1, "bhsd_bhsd_bhsd", "thd_2sbhd"},
    {1, "thd_2bshd ", "bhsd"},
    {2, "post_scale", "post_scale_bias"},
    {3, "arbitrary", "padding_causal_bottom_right"},
    {3, "causal_padding", "no_mask"},
    {4, "off_by_one", "off-by-one"},
    {5, "no_backend", "F16_arbitrary_seqlen"},
};

START_TEST(parse_errors)
{
    const bad_expect *r = &bad_rows[_i];
    fattn_clear_error();
    int sentinel = 77;
    fattn_status st;
    switch (r->kind) {
    case 0: {
        fattn_qkv_layout v = (fattn_qkv_layout)sentinel;
        st = fattn_layout_parse(r->input, &v);
        ck_assert_int_eq((int)v, sentinel);
        break;
    }
    case 1: {
        fattn_qkv_format v = (fattn_qkv_format)sentinel;
        st = fattn_format_parse(r->input, &v);
        ck_assert_int_eq((int)v, sentinel);
        break;
    }
    case 2: {
        fattn_bias_type v = (fattn_bias_type)sentinel;
        st = fattn_bias_type_parse(r->input, &v);
        ck_assert_int_eq((int)v, sentinel);
        break;
    }
    case 3: {
        fattn_mask_type v = (fattn_mask_type)sentinel;
        st = fattn_mask_type_parse(r->input, &v);
        ck_assert_int_eq((int)v, sentinel);
        break;
    }
    case 4: {
        fattn_softmax_type v = (fattn_softmax_type)sentinel;
        st = fattn_softmax_type_parse(r->input, &v);
        ck_assert_int_eq((int)v, sentinel);
        break;
    }
    default: {
        fattn_te_backend v = (fattn_te_backend)sentinel;
        st = fattn_te_backend_parse(r->input, &v);
        ck_assert_int_eq((int)v, sentinel);
        break;
    }
    }
    ck_assert_int_eq(st, FATTN_E_PARSE);
    const char *msg = fattn_last_error();
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", r->input);
    ck_assert_msg(strstr(msg, quoted) != NULL, "message \"%s\" lacks %s", msg, quoted);
    ck_assert_msg(strstr(msg, r->a_valid_name) != NULL, "message \"%s\" lacks %s", msg,
                  r->a_valid_name);
}
END_TEST

START_TEST(parse_null)
{
    fattn_qkv_layout l;
    ck_assert_int_eq(fattn_layout_parse(NULL, &l), FATTN_E_PARSE);
    fattn_mask_type m;
    ck_assert_int_eq(fattn_mask_type_parse(NULL, &m), FATTN_E_PARSE);
}
END_TEST

/* ---- mask predicates ------------------------------------------------------------ */

typedef struct mask_pred {
    fattn_mask_type mask;
    bool padding, causal, bottom_right;
    bool br_dpa, br_fwd; /* bottom_right_diagonal defaults */
} mask_pred;

/* br_dpa: dot_product_attention.py L1746-1754; br_fwd: fused_attn.py L325-329 */
static const mask_pred mask_preds[] = {
    {FATTN_MASK_NO_MASK, false, false, false, true, false},
    {FATTN_MASK_PADDING, true, false, false, true, false},
    {FATTN_MASK_CAUSAL, false, true, false, false, false},
    {FATTN_MASK_PADDING_CAUSAL, true, true, false, false, false},
    {FATTN_MASK_CAUSAL_BOTTOM_RIGHT, false, true, true, true, true},
    {FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT, true, true, true, true, true},
};

START_TEST(mask_predicates)
{
    const mask_pred *r = &mask_preds[_i];
    ck_assert_int_eq(fattn_mask_has_padding(r->mask), r->padding);
    ck_assert_int_eq(fattn_mask_has_causal(r->mask), r->causal);
    ck_assert_int_eq(fattn_mask_is_bottom_right(r->mask), r->bottom_right);
    ck_assert_int_eq(fattn_bottom_right_default_dpa(r->mask), r->br_dpa);
    ck_assert_int_eq(fattn_bottom_right_default_fwd(r->mask), r->br_fwd);
}
END_TEST

/* ---- window normalisation --------------------------------------------------------- */

typedef struct win_case {
    const char *id;
    bool set;
    int64_t w0, w1;
} win_case;

static const win_case win_cases[] = {
    {"none", false, 0, 0},  {"n1_n1", true, -1, -1}, {"n1_0", true, -1, 0},
    {"3_0", true, 3, 0},    {"3_2", true, 3, 2},     {"5_n1", true, 5, -1},
    {"n1_5", true, -1, 5},  {"n2_0", true, -2, 0},   {"0_0", true, 0, 0},
};
#define NCASES NROWS(win_cases)

typedef struct win_result {
    fattn_status st;
    int64_t o0, o1;
    bool warned;
} win_result;

/* Expected results per case, in win_cases order (utils.py L2656-2681). */
static const win_result causal_expect[] = {
    {FATTN_OK, -1, 0, false},              /* none -> (-1, 0)           L2657 */
    {FATTN_OK, -1, 0, true},               /* (-1,-1) -> (-1, 0), warns L2659 */
    {FATTN_OK, -1, 0, false},              /* (-1, 0) unchanged               */
    {FATTN_OK, 3, 0, false},               /* (>=0, 0) unchanged              */
    {FATTN_OK, 3, 0, true},                /* (3, 2) -> (3, 0), warns   L2660 */
    {FATTN_OK, 5, 0, true},                /* (5,-1) -> (5, 0), warns   L2660 */
    {FATTN_E_INVALID_CASE, 0, 0, false},   /* (-1, 5): assert           L2666 */
    {FATTN_E_INVALID_CASE, 0, 0, false},   /* (-2, 0): assert           L2666 */
    {FATTN_OK, 0, 0, false},               /* (0, 0) unchanged                */
};

static const win_result plain_expect[] = {
    {FATTN_OK, -1, -1, false},             /* none -> (-1,-1)           L2671 */
    {FATTN_OK, -1, -1, false},             /* (-1,-1) unchanged               */
    {FATTN_OK, -1, -1, true},              /* (-1, 0) -> (-1,-1), warns L2673 */
    {FATTN_OK, 3, 0, false},               /* unchanged                       */
    {FATTN_OK, 3, 2, false},               /* unchanged                       */
    {FATTN_E_INVALID_CASE, 0, 0, false},   /* (5,-1): assert            L2678 */
    {FATTN_E_INVALID_CASE, 0, 0, false},   /* (-1,5): assert            L2678 */
    {FATTN_E_INVALID_CASE, 0, 0, false},   /* (-2,0): assert            L2678 */
    {FATTN_OK, 0, 0, false},               /* unchanged                       */
};

static const struct {
    fattn_mask_type mask;
    const char *name;
    const win_result *expect;
} win_masks[] = {
    {FATTN_MASK_NO_MASK, "no_mask", plain_expect},
    {FATTN_MASK_PADDING, "padding", plain_expect},
    {FATTN_MASK_CAUSAL, "causal", causal_expect},
    {FATTN_MASK_PADDING_CAUSAL, "padding_causal", causal_expect},
    {FATTN_MASK_CAUSAL_BOTTOM_RIGHT, "causal_bottom_right", causal_expect},
    {FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT, "padding_causal_bottom_right", causal_expect},
};

START_TEST(window_row)
{
    int mi = _i / NCASES, ci = _i % NCASES;
    const win_case *c = &win_cases[ci];
    const win_result *e = &win_masks[mi].expect[ci];
    int64_t in[2] = {c->w0, c->w1};
    int64_t out[2] = {111, 222};
    bool warned = !e->warned;
    fattn_clear_error();
    fattn_status st =
        fattn_window_normalize(win_masks[mi].mask, c->set, c->set ? in : NULL, out, &warned);
    ck_assert_msg(st == e->st, "%s %s: status %s", win_masks[mi].name, c->id,
                  fattn_status_name(st));
    if (st == FATTN_OK) {
        ck_assert_msg(out[0] == e->o0 && out[1] == e->o1, "%s %s: (%lld, %lld)",
                      win_masks[mi].name, c->id, (long long)out[0], (long long)out[1]);
        ck_assert_int_eq(warned, e->warned);
    } else {
        ck_assert(!warned);
        ck_assert_ptr_nonnull(strstr(fattn_last_error(), "window_size"));
        ck_assert_ptr_nonnull(strstr(fattn_last_error(), win_masks[mi].name));
    }
    /* warned may be NULL */
    int64_t out2[2];
    ck_assert_int_eq(fattn_window_normalize(win_masks[mi].mask, c->set, c->set ? in : NULL,
                                            out2, NULL),
                     e->st);
    char id[96];
    snprintf(id, sizeof id, "te.window.%s.%s", win_masks[mi].name, c->id);
    fattn_test_mark(id);
}
END_TEST

/* ---- the band's right bound (TE's C++: causality from the mask type) ---------------- */

/* Per mask: the right bound for a right element of -1, 0 and 3, f16 then
 * FP8 (fused_attn_f16_arbitrary_seqlen.cu:68-71, 303-316; fused_attn_fp8.cu
 * :36-37, 256, 268-270, d0067d0). */
static const struct {
    fattn_mask_type mask;
    const char *name;
    int64_t f16_none, fp8_none; /* the bound for -1 */
} band_rows[] = {
    {FATTN_MASK_NO_MASK, "no_mask", -1, -1},
    {FATTN_MASK_PADDING, "padding", -1, -1},
    {FATTN_MASK_CAUSAL, "causal", 0, 0},
    {FATTN_MASK_PADDING_CAUSAL, "padding_causal", 0, 0},
    /* the FP8 kernel's causal flag is the top-left masks' only */
    {FATTN_MASK_CAUSAL_BOTTOM_RIGHT, "causal_bottom_right", 0, -1},
    {FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT, "padding_causal_bottom_right", 0, -1},
};

START_TEST(band_right_row)
{
    fattn_mask_type m = band_rows[_i].mask;
    ck_assert_int_eq(fattn_mask_band_right(m, false, -1), band_rows[_i].f16_none);
    ck_assert_int_eq(fattn_mask_band_right(m, true, -1), band_rows[_i].fp8_none);
    /* a right element other than -1 is the bound, whatever the mask */
    for (int fp8 = 0; fp8 < 2; fp8++) {
        ck_assert_int_eq(fattn_mask_band_right(m, fp8, 0), 0);
        ck_assert_int_eq(fattn_mask_band_right(m, fp8, 3), 3);
    }
    char id[96];
    snprintf(id, sizeof id, "te.band_right.%s", band_rows[_i].name);
    fattn_test_mark(id);
}
END_TEST

START_TEST(window_bad_mask)
{
    int64_t in[2] = {-1, -1}, out[2];
    ck_assert_int_eq(fattn_window_normalize((fattn_mask_type)17, true, in, out, NULL),
                     FATTN_E_INVALID_ARG);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("te");

    TCase *tc = tcase_create("layouts");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, layout_row, 0, NROWS(layout_rows));
    tcase_add_test(tc, layout_enum_values);
    suite_add_tcase(s, tc);

    tc = tcase_create("names");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tc, format_names);
    tcase_add_test(tc, bias_names);
    tcase_add_test(tc, mask_names);
    tcase_add_test(tc, softmax_names);
    tcase_add_test(tc, backend_names);
    tcase_add_loop_test(tc, parse_errors, 0, NROWS(bad_rows));
    tcase_add_test(tc, parse_null);
    suite_add_tcase(s, tc);

    tc = tcase_create("masks");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, mask_predicates, 0, NROWS(mask_preds));
    tcase_add_loop_test(tc, window_row, 0, NROWS(win_masks) * NCASES);
    tcase_add_test(tc, window_bad_mask);
    tcase_add_loop_test(tc, band_right_row, 0, NROWS(band_rows));
    suite_add_tcase(s, tc);
    return s;
}

static void list_ids(void)
{
    for (int m = 0; m < NROWS(win_masks); m++)
        for (int c = 0; c < NCASES; c++)
            printf("te.window.%s.%s\n", win_masks[m].name, win_cases[c].id);
    for (int m = 0; m < NROWS(band_rows); m++)
        printf("te.band_right.%s\n", band_rows[m].name);
}

FATTN_TEST_MAIN(make_suite, list_ids)
