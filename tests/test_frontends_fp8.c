/* Suite "frontends_fp8": the FP8 branches of both front ends, row by row.
 *
 * Each row is one FP8 configuration of FusedAttnFunc (recipe, FP8 inputs,
 * fp8_output, NVTE_FP8_DPA_BWD, NVTE_DPA_FP8CS_O_in_F16, bf16_backward,
 * layout, training) and what TE 2.19.0 and 2.20.2 do with it, written down
 * here from TE's code (docs/fp8-branches.md §6-§8), not from fattn's:
 *  - which of the eight q/k/v/out slots are saved (the save variant);
 *  - which of them the split deduplicates, and to which source;
 *  - the dtype of the returned O and of dq, dk, dv (§8's table);
 *  - ctx.fp8 (is_bwd_fp8), ctx.is_input_fp8;
 *  - whether backward quantised d_out itself (the dO quantizer's amax).
 * Each row runs on the CPU engine through both front ends with the
 * harness's runner; the two trees must be equal bit for bit and both must
 * hold the row's expectations; each is replayed across the save_ctx seam
 * (and split from its forward) and must record the same tree again. FP8
 * inputs add: q_fp8 saved is the input's bits with its own _scale_inv, and
 * an F16 backward's k is TE's combine_and_dequantize of the FP8 k with q's
 * _scale_inv (U20:3572-3584), k's own notwithstanding.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compare.h"
#include "fattn/fp8.h"
#include "fattn_test.h"
#include "runfile.h"
#include "runner.h"
#include "runtree.h"
#include "spec.h"

typedef struct fp8_row {
    const char *id;
    const char *fp8;   /* the members of the case's fp8 object */
    const char *extra; /* more keys of the case ("" or ", \"key\": value...") */
    const char *saved; /* the save_ctx slots of q_fp8 .. out present, in order */
    const char *from;  /* split's saved_from of those entries, "role:source ..." */
    fattn_dtype out;   /* forward/out */
    fattn_dtype grads; /* backward/dq, dk, dv; INVALID: inference */
    bool ctx_fp8;      /* save_ctx@fp8 (is_bwd_fp8) */
    bool in_fp8;       /* save_ctx@is_input_fp8 */
    char d_out_q;      /* 'y': backward quantised d_out (dO amax set); 'n': it
                        * came quantized; '-': an F16 backward (no quantizers) */
} fp8_row;

#define BF FATTN_DTYPE_BFLOAT16
#define E4 FATTN_DTYPE_FLOAT8_E4M3FN
#define E5 FATTN_DTYPE_FLOAT8_E5M2
#define NONE FATTN_DTYPE_INVALID

static const fp8_row rows[] = {
    /* delayed scaling: FP8_O_FP8; grads E5M2 dequantised unless FP8 inputs */
    {"ds", "\"recipe\": \"delayed\"", "", "q_fp8 k_fp8 v_fp8 out_fp8", "", BF, BF, 1, 0, 'y'},
    {"ds.outfp8", "\"recipe\": \"delayed\", \"output_fp8\": true", "",
     "q_fp8 k_fp8 v_fp8 out_fp8", "out_fp8:out", E4, BF, 1, 0, 'y'},
    {"ds.fp8in.fp8out", "\"recipe\": \"delayed\", \"input_fp8\": true, \"output_fp8\": true", "",
     "q_fp8 k_fp8 v_fp8 out_fp8", "q_fp8:q k_fp8:k v_fp8:v out_fp8:out", E4, E5, 1, 1, 'n'},
    {"ds.fp8in.bf16bwd",
     "\"recipe\": \"delayed\", \"input_fp8\": true, \"bf16_backward\": true", "",
     "q_fp8 k_fp8 v_fp8 out_fp8", "q_fp8:q k_fp8:k v_fp8:v", BF, BF, 1, 1, 'y'},
    {"ds.fp8in.fp8out.infer",
     "\"recipe\": \"delayed\", \"input_fp8\": true, \"output_fp8\": true",
     ", \"is_training\": false",
     "q_fp8 k_fp8 v_fp8 out_fp8", "q_fp8:q k_fp8:k v_fp8:v out_fp8:out", E4, NONE, 1, 1, '-'},
    /* NVTE_FP8_DPA_BWD=0: FP8_BWD_F16, an F16 backward on f16 copies */
    {"ds.bwd16", "\"recipe\": \"delayed\", \"dpa_bwd\": false", "", "q k v out",
     "q:q k:k v:v out:out", BF, BF, 0, 0, '-'},
    {"ds.fp8in.fp8out.bwd16.bs3hd",
     "\"recipe\": \"delayed\", \"input_fp8\": true, \"output_fp8\": true, "
     "\"dpa_bwd\": false",
     ", \"layout\": \"bs3hd\"",
     "q k v out", "", E4, BF, 0, 1, '-'},
    /* current scaling: O in F16; FP8_O_F16 with O_in_F16, else FP8_O_FP8 */
    {"cs", "\"recipe\": \"current\"", "", "q_fp8 k_fp8 v_fp8 out", "out:out", BF, BF, 1, 0,
     'y'},
    {"cs.outfp8", "\"recipe\": \"current\", \"output_fp8\": true", "", "q_fp8 k_fp8 v_fp8 out",
     "", E4, BF, 1, 0, 'y'},
    {"cs.o_fp8", "\"recipe\": \"current\", \"o_in_f16\": false", "",
     "q_fp8 k_fp8 v_fp8 out_fp8", "", BF, BF, 1, 0, 'y'},
    {"cs.fp8in", "\"recipe\": \"current\", \"input_fp8\": true", "", "q_fp8 k_fp8 v_fp8 out",
     "q_fp8:q k_fp8:k v_fp8:v out:out", BF, E5, 1, 1, 'y'},
    {"cs.fp8in.bf16bwd",
     "\"recipe\": \"current\", \"input_fp8\": true, \"bf16_backward\": true", "",
     "q_fp8 k_fp8 v_fp8 out", "q_fp8:q k_fp8:k v_fp8:v out:out", BF, BF, 1, 1, 'y'},
    {"cs.bwd16", "\"recipe\": \"current\", \"dpa_bwd\": false", "", "q k v out",
     "q:q k:k v:v out:out", BF, BF, 0, 0, '-'},
    {"cs.fp8in.bwd16.sbhd_sb2hd",
     "\"recipe\": \"current\", \"input_fp8\": true, \"dpa_bwd\": false",
     ", \"layout\": \"sbhd_sb2hd\", \"hg\": 1",
     "q k v out", "out:out", BF, BF, 0, 1, '-'},
};
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

static const char *const slots8[8] = {"q_fp8", "k_fp8", "v_fp8", "out_fp8",
                                      "q",     "k",     "v",     "out"};

/* The row's spec: a training bf16 bshd case of d 128 unless the row says
 * otherwise. */
static void row_spec(const fp8_row *r, int i, fh_spec *s)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"id\": \"fp8row.%s\", \"b\": 2, \"h\": 2, \"sq\": 16, \"d_qk\": 128, "
             "\"seed\": %d, \"fp8\": {%s}%s}",
             r->id, 3100 + i, r->fp8, r->extra);
    fh_spec_init(s);
    ck_assert_msg(fh_spec_parse_one(text, strlen(text), r->id, s) == FATTN_OK, "%s: %s",
                  r->id, fattn_last_error());
}

static fattn_engine *engine2(void)
{
    fattn_engine *e = NULL;
    fattn_cpu_options o = {.threads = 2};
    ck_assert_int_eq(fattn_engine_init_cpu(&e, &o), FATTN_OK);
    return e;
}

static void same_trees(const char *id, const char *what, const fh_h5_node *a,
                       const fh_h5_node *b, bool replay)
{
    fh_compare_result r;
    memset(&r, 0, sizeof r);
    r.replay = replay; /* a replay's engine-call strides are the file's (compare.h) */
    fh_compare_cases(a, b, NULL, &r);
    ck_assert_msg(r.differences == 0, "%s: %s: %zu differences, first %s: %s", id, what,
                  r.differences, r.paths[0], r.why[0]);
    ck_assert_msg(r.tensors > 0, "%s: %s: nothing compared", id, what);
}

static bool has_word(const char *list, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = strstr(list, w); p; p = strstr(p + 1, w))
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0' || p[n] == ':'))
            return true;
    return false;
}

static uint8_t u8_attr(const fh_h5_node *n, const char *name)
{
    const fh_h5_attr *a = fh_h5_node_attr(n, name);
    ck_assert_msg(a && a->kind == FH_H5_ATTR_UINT8, "no uint8 attribute %s", name);
    return a->u8;
}

static float scale_inv(const fh_h5_node *ds)
{
    const fh_h5_attr *a = fh_h5_node_attr(ds, "scale_inv");
    return (a && a->kind == FH_H5_ATTR_FLOAT32) ? a->f32 : 0.0f;
}

/* The saved slots, the ctx flags, O's and the grads' dtypes, dO's quantizer. */
static void check_tree(const fp8_row *r, const char *impl, const fh_h5_node *t)
{
    const fh_h5_node *sc = fh_h5_node_find(t, "save_ctx");
    ck_assert_msg(sc, "%s %s: no save_ctx", r->id, impl);
    for (int i = 0; i < 8; i++) {
        const fh_h5_node *ds = fh_h5_node_find(sc, slots8[i]);
        ck_assert_msg((ds != NULL) == has_word(r->saved, slots8[i]), "%s %s: save_ctx/%s %s",
                      r->id, impl, slots8[i], ds ? "saved" : "missing");
        /* a saved Float8Tensor carries its scale_inv; an f16 one none */
        if (ds)
            ck_assert_msg((scale_inv(ds) > 0.0f) == (i < 4), "%s %s: %s scale_inv", r->id,
                          impl, slots8[i]);
    }
    ck_assert_int_eq(u8_attr(sc, "fp8"), r->ctx_fp8);
    ck_assert_int_eq(u8_attr(sc, "is_input_fp8"), r->in_fp8);
    const fh_h5_node *out = fh_h5_node_find(t, "forward/out");
    ck_assert_msg(out && out->dtype == r->out, "%s %s: forward/out dtype", r->id, impl);
    const fh_h5_node *bwd = fh_h5_node_find(t, "backward");
    ck_assert_msg((bwd != NULL) == (r->grads != NONE), "%s %s: backward group", r->id, impl);
    if (!bwd)
        return;
    for (int i = 0; i < 3; i++) {
        const fh_h5_node *g = fh_h5_node_find(bwd, (const char *[]){"dq", "dk", "dv"}[i]);
        ck_assert_msg(g && g->dtype == r->grads, "%s %s: grad %d dtype", r->id, impl, i);
        ck_assert_msg((scale_inv(g) > 0.0f) == (r->grads == E5), "%s %s: grad %d scale_inv",
                      r->id, impl, i);
    }
    const fh_h5_attr *q = fh_h5_node_attr(bwd, "dO_quantizer");
    ck_assert_msg((q != NULL) == (r->d_out_q != '-'), "%s %s: dO_quantizer", r->id, impl);
    if (q)
        ck_assert_msg((strstr(q->s, "amax=0x0p+0") == NULL) == (r->d_out_q == 'y'),
                      "%s %s: dO_quantizer %s", r->id, impl, q->s);
}

/* split's forward/_impl saved_from for the eight slots, against the row. */
static void check_dedup(const fp8_row *r, const fh_h5_node *split)
{
    const fh_h5_node *impl = fh_h5_node_find(split, "forward/_impl");
    ck_assert_msg(impl, "%s: no forward/_impl", r->id);
    for (int i = 0; i < 8; i++) {
        char name[64], want[64] = "";
        snprintf(name, sizeof name, "saved_from.%s", slots8[i]);
        const char *p = r->from;
        size_t n = strlen(slots8[i]);
        for (p = strstr(p, slots8[i]); p; p = strstr(p + 1, slots8[i]))
            if ((p == r->from || p[-1] == ' ') && p[n] == ':') {
                sscanf(p + n + 1, "%63[^ ]", want);
                break;
            }
        const fh_h5_attr *a = fh_h5_node_attr(impl, name);
        ck_assert_msg(want[0] ? (a && !strcmp(a->s, want)) : a == NULL,
                      "%s: split %s is %s, TE's rule gives %s", r->id, name, a ? a->s : "none",
                      want[0] ? want : "none");
    }
}

/* FP8 inputs: q_fp8 is the input q itself; an F16 backward's k is the FP8 k
 * dequantised with q's scale_inv, rounded to bf16. */
static void check_fp8_inputs(const fp8_row *r, const fh_h5_node *t)
{
    const fh_h5_node *q = fh_h5_node_find(t, "inputs/q");
    const fh_h5_node *k = fh_h5_node_find(t, "inputs/k");
    ck_assert_msg(q && k && q->dtype == E4 && k->dtype == E4, "%s: FP8 inputs", r->id);
    ck_assert_msg(scale_inv(q) > 0.0f && scale_inv(k) > 0.0f, "%s: input scale_inv", r->id);
    const fh_h5_node *q8 = fh_h5_node_find(t, "save_ctx/q_fp8");
    if (q8) {
        ck_assert_msg(q8->nbytes == q->nbytes && !memcmp(q8->data, q->data, q->nbytes),
                      "%s: save_ctx/q_fp8 is not the input q", r->id);
        ck_assert_msg(scale_inv(q8) == scale_inv(q), "%s: q_fp8 scale_inv", r->id);
    }
    const fh_h5_node *k16 = fh_h5_node_find(t, "save_ctx/k");
    if (!k16)
        return;
    ck_assert_int_eq(k16->dtype, BF);
    const uint8_t *codes = k->data;
    size_t n = k->nbytes;
    for (size_t e = 0; e < n; e++) {
        float want = fattn_fp8_decode(E4, codes[e]) * scale_inv(q);
        uint16_t got;
        memcpy(&got, (const uint8_t *)k16->data + 2 * e, 2);
        ck_assert_msg(got == fattn_f32_to_bf16(want).bits, "%s: save_ctx/k[%zu] is not k dequantised "
                      "with q's scale_inv", r->id, e);
    }
    ck_assert_msg(scale_inv(k) != scale_inv(q) || strstr(r->id, "bs3hd"),
                  "%s: k and q share a scale_inv: the quirk is not shown", r->id);
}

START_TEST(fp8_row_test)
{
    const fp8_row *r = &rows[_i];
    fh_spec s;
    row_spec(r, _i, &s);
    fattn_engine *e = engine2();
    fh_h5_node *runs[2] = {NULL, NULL};
    const fh_impl impls[2] = {FH_IMPL_LEGACY, FH_IMPL_SPLIT};
    for (int i = 0; i < 2; i++) {
        fh_run_opts o = {.impl = impls[i], .engine = e, .until = FH_STATE_BACKWARD,
                            .poison = FH_POISON_PATTERN};
        ck_assert_msg(fh_run_case(&s, &o, &runs[i]) == FATTN_OK, "%s %d: %s", r->id, i,
                      fattn_last_error());
        check_tree(r, i ? "split" : "legacy", runs[i]);
    }
    same_trees(r->id, "legacy vs split", runs[0], runs[1], false);
    check_dedup(r, runs[1]);
    if (r->in_fp8)
        check_fp8_inputs(r, runs[0]);
    /* across the seam both ways, and split from its own forward */
    struct { int from_run; fh_impl impl; fh_state at; } rep[] = {
        {0, FH_IMPL_SPLIT, FH_STATE_SAVE_CTX},
        {1, FH_IMPL_LEGACY, FH_STATE_SAVE_CTX},
        {1, FH_IMPL_SPLIT, FH_STATE_FORWARD}};
    for (int i = 0; i < 3 && r->grads != NONE; i++) {
        fh_run_opts o = {.impl = rep[i].impl, .engine = e, .until = FH_STATE_BACKWARD,
                            .poison = FH_POISON_PATTERN};
        fh_h5_node *re = NULL;
        ck_assert_msg(fh_replay_case(runs[rep[i].from_run], rep[i].at, &o, &re) == FATTN_OK,
                      "%s replay %d: %s", r->id, i, fattn_last_error());
        same_trees(r->id, "replay", re, runs[rep[i].impl == FH_IMPL_SPLIT], true);
        fh_h5_node_free(re);
    }
    fh_h5_node_free(runs[0]);
    fh_h5_node_free(runs[1]);
    fattn_engine_free(e);
    fh_spec_free(&s);
    char id[96];
    snprintf(id, sizeof id, "frontends_fp8.%s", r->id);
    fattn_test_mark(id);
}
END_TEST

/* FP8 inputs with a bias are refused for the FP8 backend's reason (rule
 * fp8_bias), not as a bias whose dtype differs from q's: TE compares the
 * bias with q.dtype, which a Float8Tensor reports as its nominal dtype
 * (fused_attn.py:340). */
START_TEST(fp8_input_bias_refused)
{
    static const char text[] =
        "{\"id\": \"fp8row.fp8in.bias\", \"b\": 1, \"h\": 2, \"sq\": 16, \"d_qk\": 128, "
        "\"bias\": \"post_scale_bias\", \"fp8\": {\"recipe\": \"delayed\", \"input_fp8\": true}}";
    fh_spec s;
    fh_spec_init(&s);
    ck_assert_int_eq(fh_spec_parse_one(text, strlen(text), "test", &s), FATTN_OK);
    fattn_engine *e = engine2();
    const fh_impl impls[2] = {FH_IMPL_LEGACY, FH_IMPL_SPLIT};
    for (int i = 0; i < 2; i++) {
        fh_run_opts o = {.impl = impls[i], .engine = e, .until = FH_STATE_BACKWARD,
                            .poison = FH_POISON_PATTERN};
        fh_h5_node *t = NULL;
        fattn_status st = fh_run_case(&s, &o, &t);
        ck_assert_msg(st == FATTN_E_INVALID_CASE && strstr(fattn_last_error(), "rule fp8_bias:"),
                      "impl %d: %s: %s", i, fattn_status_name(st), fattn_last_error());
        fh_h5_node_free(t);
    }
    fattn_engine_free(e);
    fh_spec_free(&s);
    fattn_test_mark("frontends_fp8.fp8in.bias_refused");
}
END_TEST

/* A recorded Float8Tensor must carry its scale_inv: the full validation
 * (inspect, replay, verify's goldens) refuses a run file whose FP8 input,
 * d_out, grad or saved fp8 slot has none that a replay could use. */
START_TEST(scale_inv_validated)
{
    static const char text[] =
        "{\"id\": \"fp8row.fp8in.valid\", \"b\": 1, \"h\": 2, \"sq\": 16, \"d_qk\": 128, "
        "\"fp8\": {\"recipe\": \"delayed\", \"input_fp8\": true, \"output_fp8\": true}}";
    static const char *const bad[] = {"inputs/q", "inputs/d_out", "backward/dq",
                                      "save_ctx/v_fp8"};
    fh_spec s;
    fh_spec_init(&s);
    ck_assert_int_eq(fh_spec_parse_one(text, strlen(text), "test", &s), FATTN_OK);
    fattn_engine *e = engine2();
    for (int i = -1; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        fh_run_opts o = {.impl = FH_IMPL_LEGACY, .engine = e,
                            .until = FH_STATE_BACKWARD, .poison = FH_POISON_PATTERN};
        fh_h5_node *root = NULL, *cases = NULL, *t = NULL;
        ck_assert_int_eq(fh_h5_node_new_group("", &root), FATTN_OK);
        ck_assert_int_eq(fh_h5_node_set_string(root, "schema", FH_RUN_SCHEMA), FATTN_OK);
        ck_assert_int_eq(fh_h5_node_group(root, "cases", &cases), FATTN_OK);
        ck_assert_msg(fh_run_case(&s, &o, &t) == FATTN_OK, "%s", fattn_last_error());
        ck_assert_int_eq(fh_h5_node_adopt(cases, t), FATTN_OK);
        if (i >= 0) { /* one scale_inv made unusable, the case's attribute digest resealed */
            fh_h5_node *ds = fh_h5_node_find(t, bad[i]);
            ck_assert_msg(ds && fh_h5_node_attr(ds, "scale_inv"), "%s: no scale_inv", bad[i]);
            ck_assert_int_eq(fh_h5_node_set_float32(ds, "scale_inv", i % 2 ? 0.0f : NAN),
                             FATTN_OK);
            ck_assert_int_eq(fh_h5_node_seal_attrs(t), FATTN_OK);
        }
        fattn_status st = fh_runfile_validate("mem.h5", root);
        if (i < 0)
            ck_assert_msg(st == FATTN_OK, "the run as recorded: %s", fattn_last_error());
        else
            ck_assert_msg(st == FATTN_E_INVALID_FILE && strstr(fattn_last_error(), bad[i]) &&
                              strstr(fattn_last_error(), "scale_inv"),
                          "%s: %s: %s", bad[i], fattn_status_name(st), fattn_last_error());
        fh_h5_node_free(root);
    }
    fattn_engine_free(e);
    fh_spec_free(&s);
    fattn_test_mark("frontends_fp8.scale_inv_validated");
}
END_TEST

static void list_ids(void)
{
    for (int i = 0; i < NROWS; i++)
        printf("frontends_fp8.%s\n", rows[i].id);
    printf("frontends_fp8.fp8in.bias_refused\n");
    printf("frontends_fp8.scale_inv_validated\n");
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("frontends_fp8");
    TCase *tc = tcase_create("branches");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, fp8_row_test, 0, NROWS);
    tcase_add_test(tc, fp8_input_bias_refused);
    tcase_add_test(tc, scale_inv_validated);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
