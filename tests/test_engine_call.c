/* Suite "engine_call": what a front end handed the engine, recorded
 * (harness/run/engine_call.h); a case's differences in run order and its
 * earliest cause (harness/check/cause.h); the cross-case contrast
 * (harness/check/contrast.h). */
#include <string.h>

#include "cause.h"
#include "contrast.h"
#include "engine_call.h"
#include "fattn_test.h"
#include "runner.h"
#include "spec_parse.h"

static fh_spec parse(const char *json)
{
    fh_spec s;
    ck_assert_msg(fh_spec_parse_one(json, strlen(json), "test", &s) == FATTN_OK, "%s: %s",
                  json, fattn_last_error());
    return s;
}

static const char *str_attr(const fh_h5_node *g, const char *name)
{
    const fh_h5_attr *a = g ? fh_h5_node_attr(g, name) : NULL;
    return a && a->kind == FH_H5_ATTR_STRING ? a->s : NULL;
}

static int64_t int_attr(const fh_h5_node *g, const char *name)
{
    const fh_h5_attr *a = fh_h5_node_attr(g, name);
    ck_assert_msg(a && a->kind == FH_H5_ATTR_INT64, "%s: no int64", name);
    return a->i64[0];
}

/* The tensor attribute `name` of call g: its source and digest fields. */
static void assert_tensor(const fh_h5_node *g, const char *name, const char *source,
                          const fh_h5_node *same_data)
{
    const char *v = str_attr(g, name);
    ck_assert_msg(v != NULL, "%s/@%s missing", g->name, name);
    char want[96];
    snprintf(want, sizeof want, "] %s xxh3-128:", source);
    ck_assert_msg(strstr(v, want) != NULL, "%s@%s = '%s', want source %s", g->name, name, v,
                  source);
    if (same_data) /* an input's content is what was recorded of it */
        ck_assert_msg(strstr(v, same_data->digest) != NULL, "%s@%s = '%s', want digest %s",
                      g->name, name, v, same_data->digest);
}

static fh_h5_node *run(const char *json, fh_impl impl)
{
    fh_spec s = parse(json);
    fattn_engine *e = NULL;
    ck_assert_int_eq(fattn_engine_open("cpu", NULL, &e), FATTN_OK);
    fh_run_opts o = {.impl = impl, .engine = e, .until = FH_STATE_BACKWARD,
                        .poison = FH_POISON_PATTERN};
    fh_h5_node *n = NULL;
    ck_assert_msg(fh_run_case(&s, &o, &n) == FATTN_OK, "%s", fattn_last_error());
    fattn_engine_free(e);
    fh_spec_free(&s);
    return n;
}

/* Each front end's calls of a causal training case: the scalars it handed
 * over, each tensor named by the recorded tensor it is, an input's digest
 * the recorded one; both front ends alike. */
START_TEST(test_run_records_calls)
{
    static const char *json = "{\"id\": \"c\", \"b\": 2, \"h\": 2, \"sq\": 8, \"d_qk\": 8, "
                              "\"mask\": \"causal\"}";
    fh_h5_node *n = run(json, (fh_impl)_i);
    const fh_h5_node *f = fh_h5_node_find(n, "engine_call/forward");
    const fh_h5_node *b = fh_h5_node_find(n, "engine_call/backward");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_null(fh_h5_node_find(n, "engine_call/forward.2"));
    ck_assert_int_eq(int_attr(f, "window_size_left"), -1);
    ck_assert_int_eq(int_attr(f, "window_size_right"), 0);
    ck_assert_int_eq(int_attr(b, "window_size_left"), -1);
    ck_assert_int_eq(int_attr(b, "max_seqlen_q"), 8);
    ck_assert_str_eq(str_attr(b, "mask_type"), "causal");
    const fh_h5_node *in = fh_h5_node_find(n, "inputs");
    assert_tensor(f, "q", "inputs/q", fh_h5_node_find(in, "q"));
    assert_tensor(f, "o", "forward/out", NULL);
    assert_tensor(f, "aux[0]", "forward/aux/softmax_stats", NULL);
    assert_tensor(f, "rng_state", "forward/aux/rng_state", NULL);
    assert_tensor(b, "q", "save_ctx/q", fh_h5_node_find(in, "q"));
    assert_tensor(b, "d_o", "inputs/d_out", fh_h5_node_find(in, "d_out"));
    assert_tensor(b, "dq", "backward/dq", NULL);
    ck_assert_ptr_null(fh_h5_node_attr(f, "bias")); /* None: no attribute */
    fh_h5_node_free(n);
    fattn_test_mark(_i == FH_IMPL_LEGACY ? "engine_call.run.legacy" : "engine_call.run.split");
}
END_TEST

/* An inference case makes no backward call; a packed layout's k is a view
 * into the buffer q starts, named with its offset where no tensor starts
 * there (k is an input of its own, so it is named itself). */
START_TEST(test_run_inference_and_packed)
{
    fh_h5_node *n = run("{\"id\": \"i\", \"b\": 1, \"h\": 2, \"sq\": 8, \"d_qk\": 8, "
                           "\"is_training\": false, \"layout\": \"sb3hd\"}",
                           FH_IMPL_SPLIT);
    const fh_h5_node *f = fh_h5_node_find(n, "engine_call/forward");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_null(fh_h5_node_find(n, "engine_call/backward"));
    assert_tensor(f, "k", "inputs/k", NULL);
    /* the interleaved view of the packed buffer: d * 3 elements a row */
    ck_assert_ptr_nonnull(strstr(str_attr(f, "k"), "strides [48,48,8,1]"));
    fh_h5_node_free(n);
    fattn_test_mark("engine_call.run.inference_packed");
}
END_TEST

/* A stand-in engine that does nothing: the log's calls are what matter. */
static fattn_status null_fwd(fattn_engine *e, const fattn_fwd_params *p, const fattn_fwd_call *c)
{
    (void)e, (void)p, (void)c;
    return FATTN_OK;
}

static fattn_status null_bwd(fattn_engine *e, const fattn_bwd_params *p, const fattn_bwd_call *c)
{
    (void)e, (void)p, (void)c;
    return FATTN_OK;
}

static const fattn_engine_ops null_ops = {.name = "null", .fwd = null_fwd, .bwd = null_bwd};

/* Calls go straight to the log's operations (the dispatch is the run's
 * business): several forward calls are numbered, a view into a named
 * tensor is named with its element offset, an unnamed one "unrecorded";
 * writing a direction twice under one group is an error; a copy takes one
 * direction's calls. */
START_TEST(test_log_numbering_and_names)
{
    fattn_engine inner = {.ops = &null_ops};
    fh_call_log *log = NULL;
    ck_assert_int_eq(fh_call_log_open(&inner, &log), FATTN_OK);
    fattn_engine *e = fh_call_log_engine(log);
    ck_assert_str_eq(fattn_engine_name(e), "null");
    uint16_t buf[64] = {0}, other[8] = {0};
    int64_t shape[2] = {4, 8}, half[2] = {2, 8};
    fattn_tensor whole = fattn_tensor_view(buf, FATTN_DTYPE_FLOAT16, 2, shape);
    fattn_tensor tail = fattn_tensor_view(buf + 16, FATTN_DTYPE_FLOAT16, 2, half);
    fattn_tensor lone = fattn_tensor_view(other, FATTN_DTYPE_FLOAT16, 1, half + 1);
    fattn_aux_pack aux = {0};
    for (int k = 0; k < 3; k++) {
        fattn_fwd_params p = {.aux = &aux};
        p.attn.q = k == 1 ? tail : whole;
        p.attn.k = lone;
        p.attn.window_size_left = k;
        ck_assert_int_eq(e->ops->fwd(e, &p, NULL), FATTN_OK);
    }
    fattn_bwd_params pb = {.aux = &aux};
    ck_assert_int_eq(e->ops->bwd(e, &pb, NULL), FATTN_OK);
    ck_assert_uint_eq(fh_call_log_pending(log, FH_CALL_FORWARD), 3);
    ck_assert_uint_eq(fh_call_log_pending(log, FH_CALL_BACKWARD), 1);
    fh_call_names names = {0};
    fh_call_names_add(&names, "inputs/", "q", &whole);
    fh_h5_node *g = NULL, *again = NULL;
    ck_assert_int_eq(fh_h5_node_new_group("c", &g), FATTN_OK);
    ck_assert_int_eq(fh_call_log_write(log, FH_CALL_FORWARD, &names, g), FATTN_OK);
    ck_assert_uint_eq(fh_call_log_pending(log, FH_CALL_FORWARD), 0);
    ck_assert_uint_eq(fh_call_log_pending(log, FH_CALL_BACKWARD), 1);
    const char *call[3] = {"engine_call/forward", "engine_call/forward.2",
                           "engine_call/forward.3"};
    for (int k = 0; k < 3; k++) {
        const fh_h5_node *c = fh_h5_node_find(g, call[k]);
        ck_assert_msg(c != NULL, "%s missing", call[k]);
        ck_assert_int_eq(int_attr(c, "window_size_left"), k);
        assert_tensor(c, "q", k == 1 ? "inputs/q+16" : "inputs/q", NULL);
        assert_tensor(c, "k", "unrecorded", NULL);
    }
    /* a second forward written under the same group: refused, not merged */
    fattn_fwd_params p = {.aux = &aux};
    ck_assert_int_eq(e->ops->fwd(e, &p, NULL), FATTN_OK);
    ck_assert_int_eq(fh_call_log_write(log, FH_CALL_FORWARD, NULL, g), FATTN_E_STATE);
    fh_call_log_discard(log, FH_CALL_BACKWARD);
    ck_assert_uint_eq(fh_call_log_pending(log, FH_CALL_BACKWARD), 0);
    ck_assert_int_eq(fh_h5_node_new_group("d", &again), FATTN_OK);
    ck_assert_int_eq(fh_call_copy(g, FH_CALL_FORWARD, again), FATTN_OK);
    ck_assert_ptr_nonnull(fh_h5_node_find(again, "engine_call/forward.3"));
    ck_assert_ptr_null(fh_h5_node_find(again, "engine_call/backward"));
    fh_call_log_free(log);
    fh_h5_node_free(g);
    fh_h5_node_free(again);
    fattn_test_mark("engine_call.log.numbering");
}
END_TEST

/* A recorded group's datasets as names (a replay's loaded views). */
START_TEST(test_names_from_group)
{
    fh_h5_node *g = NULL, *sub = NULL;
    ck_assert_int_eq(fh_h5_node_new_group("save_ctx", &g), FATTN_OK);
    uint16_t v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t shape[1] = {8};
    fattn_tensor t = fattn_tensor_view(v, FATTN_DTYPE_FLOAT16, 1, shape);
    ck_assert_int_eq(fh_h5_node_add_tensor(g, "q", &t, NULL), FATTN_OK);
    ck_assert_int_eq(fh_h5_node_group(g, "aux", &sub), FATTN_OK);
    ck_assert_int_eq(fh_h5_node_add_tensor(sub, "rng_state", &t, NULL), FATTN_OK);
    fh_call_names n = {0};
    fh_call_names_add_group(&n, "save_ctx/", g);
    ck_assert_int_eq(n.n, 2);
    ck_assert_str_eq(n.name[0], "save_ctx/aux/rng_state");
    ck_assert_str_eq(n.name[1], "save_ctx/q");
    ck_assert_ptr_eq(n.t[1].data, fh_h5_node_find(g, "q")->data);
    fh_h5_node_free(g);
    fattn_test_mark("engine_call.names.group");
}
END_TEST

/* Where a difference's path puts it in run order. */
static const struct {
    const char *path;
    int state;
} state_rows[] = {
    {"@spec", FH_VERIFY_STATE_CASE},
    {"inputs/q", FH_VERIFY_STATE_INPUTS},
    {"split: inputs/_impl@q", FH_VERIFY_STATE_INPUTS},
    {"engine_call/forward@q", FH_VERIFY_STATE_CALL_FWD},
    {"engine_call/forward.2@q", FH_VERIFY_STATE_CALL_FWD},
    {"engine_call", FH_VERIFY_STATE_CALL_FWD},
    {"forward/aux/softmax_stats", FH_VERIFY_STATE_FORWARD},
    {"forward@rng_gen_offset", FH_VERIFY_STATE_FORWARD},
    {"returned/out", FH_VERIFY_STATE_RETURNED},
    {"save_ctx@window_size", FH_VERIFY_STATE_SAVE_CTX},
    {"engine_call/backward@window_size_left", FH_VERIFY_STATE_CALL_BWD},
    {"backward/_impl@cu_seqlens_q", FH_VERIFY_STATE_BACKWARD},
    {"backward", FH_VERIFY_STATE_BACKWARD},
    {"forwardish/x", FH_VERIFY_STATE_OTHER},
    {"legacy@refused_status", FH_VERIFY_STATE_OTHER},
    {"steps/3/engine_call/backward@q", FH_VERIFY_STATE_CALL_BWD},
    {"repeat: steps/12/forward/out", FH_VERIFY_STATE_FORWARD},
    {"steps/x/forward/out", FH_VERIFY_STATE_OTHER},
};

START_TEST(test_state_of)
{
    const char *p = state_rows[_i].path;
    ck_assert_msg(fh_verify_state_of(p) == state_rows[_i].state, "%s: state %d, want %d", p,
                  fh_verify_state_of(p), state_rows[_i].state);
    int want_step = strstr(p, "steps/3/") ? 3 : strstr(p, "steps/12/") ? 12 : 0;
    ck_assert_int_eq(fh_verify_step_of(p), want_step);
    fattn_test_mark("engine_call.cause.state_of");
}
END_TEST

/* A case whose backward call differs first: the cause names it with both
 * values and the states equal before it; the order lists the check's
 * tensors of a state before its attributes, states in run order. */
START_TEST(test_cause)
{
    fh_h5_node *a = run("{\"id\": \"c\", \"b\": 1, \"h\": 1, \"sq\": 8, \"d_qk\": 8, "
                           "\"mask\": \"causal\"}",
                           FH_IMPL_LEGACY);
    fh_h5_node *b = run("{\"id\": \"c\", \"b\": 1, \"h\": 1, \"sq\": 8, \"d_qk\": 8, "
                           "\"mask\": \"causal\"}",
                           FH_IMPL_SPLIT);
    /* the split's backward call as the window_size_left mutant makes it,
     * and its grads as that call would change them */
    fh_h5_node *call = fh_h5_node_find(b, "engine_call/backward");
    ck_assert_int_eq(fh_h5_node_set_int64(call, "window_size_left", 0), FATTN_OK);
    fh_h5_node *dq = fh_h5_node_find(b, "backward/dq");
    ((unsigned char *)dq->data)[0] ^= 1;
    ck_assert_int_eq(fh_h5_node_set_int64(fh_h5_node_find(b, "save_ctx"), "extra", 1),
                     FATTN_OK);
    fh_spec s = parse("{\"id\": \"c\", \"b\": 1, \"h\": 1, \"sq\": 8, \"d_qk\": 8}");
    fh_verify_case c;
    memset(&c, 0, sizeof c);
    c.spec = &s;
    fh_compare_result r = {0};
    r.keep_all = true;
    fh_compare_cases(a, b, NULL, &r);
    fh_verify_note_check(&c, "legacy vs split", &r, a, b, "legacy", "split");
    ck_assert_uint_eq(c.cmp.differences, 3);
    ck_assert_uint_eq(c.n_diffs, 3);
    fh_verify_cause cause;
    fh_verify_cause_of(&c, &cause);
    ck_assert_int_eq(cause.state, FH_VERIFY_STATE_SAVE_CTX);
    char text[1400];
    fh_verify_cause_text(&c, text, sizeof text);
    ck_assert_msg(strstr(text, "legacy vs split: inputs, engine_call/forward, forward equal; "
                               "save_ctx@extra: legacy absent, split 1; then "
                               "engine_call/backward@window_size_left, backward/dq") == text,
                  "%s", text);
    /* without the ctx attribute, the engine call is the earliest */
    fh_verify_case_free(&c);
    memset(&c, 0, sizeof c);
    c.spec = &s;
    ck_assert_int_eq(fh_h5_node_set_int64(fh_h5_node_find(a, "save_ctx"), "extra", 1),
                     FATTN_OK);
    r = (fh_compare_result){0};
    r.keep_all = true;
    fh_compare_cases(a, b, NULL, &r);
    fh_verify_note_check(&c, "legacy vs split", &r, a, b, "legacy", "split");
    fh_verify_cause_text(&c, text, sizeof text);
    ck_assert_msg(strstr(text, "save_ctx equal; engine_call/backward@window_size_left: legacy "
                               "-1, split 0; then backward/dq") != NULL,
                  "%s", text);
    size_t idx[3];
    fh_verify_diff_order(&c, idx);
    ck_assert_str_eq(c.diffs[idx[0]].d.path, "engine_call/backward@window_size_left");
    ck_assert_str_eq(c.diffs[idx[1]].d.path, "backward/dq");
    fh_verify_case_free(&c);
    fh_spec_free(&s);
    fh_h5_node_free(a);
    fh_h5_node_free(b);
    fattn_test_mark("engine_call.cause.text");
}
END_TEST

/* The contrast over made-up features: the feature with the fewest passing
 * cases that share the failing cases' values wins (mask before window on a
 * tie); a second one is added when it leaves fewer. */
static fh_case_features feat(const char *mask, const char *window, const char *training)
{
    fh_case_features f;
    for (int k = 0; k < FH_FEATURE_COUNT; k++)
        snprintf(f.v[k], sizeof f.v[k], "same");
    snprintf(f.v[FH_FEATURE_mask], sizeof f.v[0], "%s", mask);
    snprintf(f.v[FH_FEATURE_window], sizeof f.v[0], "%s", window);
    snprintf(f.v[FH_FEATURE_training], sizeof f.v[0], "%s", training);
    return f;
}

START_TEST(test_contrast)
{
    const fh_case_features f[] = {
        feat("causal", "(-1,0)", "yes"),  feat("causal", "(-1,0)", "yes"),
        feat("padding_causal", "(-1,0)", "yes"),
        feat("causal", "(-1,0)", "no"),   feat("no_mask", "(-1,-1)", "yes"),
        feat("padding", "(-1,-1)", "yes"), feat("no_mask", "(-1,-1)", "no"),
    };
    const fh_contrast_outcome o[] = {FH_CONTRAST_FAIL, FH_CONTRAST_FAIL,
                                        FH_CONTRAST_FAIL, FH_CONTRAST_PASS,
                                        FH_CONTRAST_PASS, FH_CONTRAST_PASS,
                                        FH_CONTRAST_NONE};
    fh_contrast c;
    ck_assert_int_eq(fh_contrast_of_features(f, o, 7, &c), FATTN_OK);
    ck_assert_uint_eq(c.failing, 3);
    ck_assert_uint_eq(c.passing, 3);
    ck_assert_int_eq(c.n_keys, 2);
    ck_assert_int_eq(c.keys[0], FH_FEATURE_mask);
    ck_assert_int_eq(c.keys[1], FH_FEATURE_training);
    ck_assert_uint_eq(c.misses, 0);
    ck_assert_str_eq(c.text, "contrast: the 3 failing cases all have mask in {causal, "
                             "padding_causal} and training yes; none of the 3 passing cases "
                             "have both; no case with mask in {no_mask, padding} fails (2 "
                             "cases)");
    /* one failing case: nothing to contrast */
    const fh_contrast_outcome one[] = {FH_CONTRAST_FAIL, FH_CONTRAST_PASS};
    ck_assert_int_eq(fh_contrast_of_features(f, one, 2, &c), FATTN_OK);
    ck_assert_str_eq(c.text, "");
    fattn_test_mark("engine_call.contrast.rule");
}
END_TEST

static void list_ids(void)
{
    puts("engine_call.run.legacy\nengine_call.run.split\nengine_call.run.inference_packed\n"
         "engine_call.log.numbering\nengine_call.names.group\nengine_call.cause.state_of\n"
         "engine_call.cause.text\nengine_call.contrast.rule");
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("engine_call");
    TCase *tc = tcase_create("calls");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, test_run_records_calls, 0, FH_IMPL_COUNT);
    tcase_add_test(tc, test_run_inference_and_packed);
    tcase_add_test(tc, test_log_numbering_and_names);
    tcase_add_test(tc, test_names_from_group);
    suite_add_tcase(s, tc);
    TCase *tw = tcase_create("why");
    tcase_set_timeout(tw, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tw, test_state_of, 0, (int)(sizeof state_rows / sizeof state_rows[0]));
    tcase_add_test(tw, test_cause);
    tcase_add_test(tw, test_contrast);
    suite_add_tcase(s, tw);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
