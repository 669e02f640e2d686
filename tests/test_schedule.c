/* The spec key `schedule` (harness/model/schedule.h, spec_schedule.c):
 * its syntax and checks, its canonical form, and TE's cache managers'
 * bookkeeping over cache steps (fh_kv_plan) held to what
 * inference.py's pre_step does, worked out by hand. */
#include <string.h>

#include "fattn_test.h"
#include "schedule.h"
#include "spec.h"

#define NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* A training case and an inference cache case, completed by a row's keys. */
#define TRAIN "{\"id\":\"t\",\"b\":2,\"h\":2,\"sq\":4,\"d_qk\":8,"
#define FP8 "{\"id\":\"t\",\"b\":2,\"h\":2,\"sq\":4,\"d_qk\":128,\"fp8\":{},"
#define CACHE                                                                                  \
    "{\"id\":\"t\",\"b\":3,\"h\":4,\"sq\":4,\"skv\":8,\"d_qk\":8,\"is_training\":false,"        \
    "\"mask\":\"padding_causal_bottom_right\","

typedef struct parse_row {
    const char *id, *json;
    fattn_status st;
    const char *says; /* a part of the message */
} parse_row;

static const parse_row parse_rows[] = {
    {"sched.ok.pipeline", TRAIN "\"schedule\":[{\"F\":0},{\"F\":1},{\"B\":0},{\"B\":1}]}", FATTN_OK,
     NULL},
    {"sched.ok.fp8", FP8 "\"schedule\":[{\"F\":0},{\"U\":\"forward\"},{\"B\":0},"
     "{\"X\":\"extra_state\"}]}", FATTN_OK, NULL},
    {"sched.ok.cache", CACHE "\"schedule\":[{\"step\":[[0,3],[1,2]]},{\"step\":[[0,1],[1,1]]}]}",
     FATTN_OK, NULL},
    {"sched.empty", TRAIN "\"schedule\":[]}", FATTN_E_PARSE, "1 to 4096 steps"},
    {"sched.two_members", TRAIN "\"schedule\":[{\"F\":0,\"B\":0}]}", FATTN_E_PARSE,
     "step 1: expected an object of one member"},
    {"sched.unknown_step", TRAIN "\"schedule\":[{\"F\":0},{\"G\":1}]}", FATTN_E_PARSE,
     "step 2: unknown step 'G'"},
    {"sched.f_not_int", TRAIN "\"schedule\":[{\"F\":\"x\"}]}", FATTN_E_PARSE,
     "step 1: F takes a micro-batch"},
    {"sched.b_not_live", TRAIN "\"schedule\":[{\"F\":0},{\"B\":1}]}", FATTN_E_INVALID_ARG,
     "step 2: B1 without a live forward"},
    {"sched.ok.no_grad", TRAIN "\"no_grad\":true,\"schedule\":[{\"F\":0},{\"F\":0}]}",
     FATTN_OK, NULL},
    {"sched.b_no_grad", TRAIN "\"no_grad\":true,\"schedule\":[{\"F\":0},{\"B\":0}]}",
     FATTN_E_INVALID_ARG, "step 2: B0 without a live forward of micro-batch 0 (a forward under "
     "no_grad or inference_mode keeps none)"},
    {"sched.cache_inference_mode", CACHE "\"inference_mode\":true,\"schedule\":[{\"step\":"
     "[[0,3]]}]}", FATTN_E_INVALID_ARG, "cache steps run with grad enabled"},
    {"sched.f_twice", TRAIN "\"schedule\":[{\"F\":0},{\"F\":0}]}", FATTN_E_INVALID_ARG,
     "step 2: F0 while micro-batch 0's forward is alive"},
    {"sched.u_f16", TRAIN "\"schedule\":[{\"F\":0},{\"U\":\"both\"}]}", FATTN_E_INVALID_ARG,
     "step 2: U needs fp8 with the delayed recipe"},
    {"sched.x_current", "{\"id\":\"t\",\"b\":2,\"h\":2,\"sq\":4,\"d_qk\":128,"
     "\"fp8\":{\"recipe\":\"current\"},\"schedule\":[{\"X\":\"extra_state\"}]}",
     FATTN_E_INVALID_ARG, "step 1: X needs fp8 with the delayed recipe"},
    {"sched.u_bad", FP8 "\"schedule\":[{\"U\":\"sideways\"}]}", FATTN_E_PARSE,
     "step 1: U takes"},
    {"sched.x_bad", FP8 "\"schedule\":[{\"X\":\"weights\"}]}", FATTN_E_PARSE, "X takes"},
    {"sched.mixed", CACHE "\"schedule\":[{\"step\":[[0,3]]},{\"F\":0}]}", FATTN_E_INVALID_ARG,
     "step 2: a forward, backward or update in a schedule of cache steps"},
    {"sched.cache_training", TRAIN "\"mask\":\"padding\",\"schedule\":[{\"step\":[[0,3]]}]}",
     FATTN_E_INVALID_ARG, "cache steps are inference"},
    {"sched.cache_mask", "{\"id\":\"t\",\"b\":3,\"h\":4,\"sq\":4,\"skv\":8,\"d_qk\":8,"
     "\"is_training\":false,\"schedule\":[{\"step\":[[0,3]]}]}", FATTN_E_INVALID_ARG,
     "need a padding mask"},
    {"sched.cache_layout", CACHE "\"layout\":\"bshd_bs2hd\",\"schedule\":[{\"step\":[[0,3]]}]}",
     FATTN_E_INVALID_ARG, "<q>_bshd_bshd"},
    {"sched.cache_seqlens", CACHE "\"seqlens_q\":[1,1,1],\"schedule\":[{\"step\":[[0,3]]}]}",
     FATTN_E_INVALID_ARG, "the steps give the lengths"},
    {"sched.cache_thd_heads", "{\"id\":\"t\",\"b\":3,\"h\":2,\"sq\":4,\"skv\":8,\"d_qk\":8,"
     "\"is_training\":false,\"mask\":\"padding\",\"layout\":\"thd_bshd_bshd\","
     "\"schedule\":[{\"step\":[[0,3]]}]}", FATTN_E_INVALID_ARG, "h < b"},
    {"sched.cache_pages", CACHE "\"layout\":\"paged_kv_bshd_bshd_bshd\",\"paged\":"
     "{\"page_size\":2,\"num_pages\":24},\"schedule\":[{\"step\":[[0,3]]}]}",
     FATTN_E_INVALID_ARG, "num_pages must be b * skv / page_size"},
    {"sched.kv_id", CACHE "\"schedule\":[{\"step\":[[8,3]]}]}", FATTN_E_INVALID_ARG,
     "sequence ids are 0..7"},
    {"sched.kv_dup", CACHE "\"schedule\":[{\"step\":[[1,3],[1,2]]}]}", FATTN_E_INVALID_ARG,
     "sequence 1 given twice"},
    {"sched.kv_chunk", CACHE "\"schedule\":[{\"step\":[[0,3]]},{\"step\":[[0,2]]}]}",
     FATTN_E_INVALID_ARG, "step 2: sequence 0 continues with 2 new tokens"},
    {"sched.kv_order", CACHE "\"schedule\":[{\"step\":[[0,3],[1,2]]},{\"step\":[[1,1],[0,1]]}]}",
     FATTN_E_INVALID_ARG, "step 2: entry 1 is sequence 1, but the cache holds sequence 0"},
    {"sched.kv_new_order", CACHE "\"schedule\":[{\"step\":[[2,3],[1,2]]}]}", FATTN_E_INVALID_ARG,
     "new ones by ascending id"},
    {"sched.kv_long", CACHE "\"schedule\":[{\"step\":[[0,5]]}]}", FATTN_E_INVALID_ARG,
     "more than sq = 4"},
    {"sched.kv_full_row", CACHE "\"schedule\":[{\"step\":[[0,4]]},{\"step\":[[0,1]]},"
     "{\"step\":[[0,1]]},{\"step\":[[0,1]]},{\"step\":[[0,1]]},{\"step\":[[0,1]]}]}",
     FATTN_E_INVALID_ARG, "step 6: sequence 0 would hold 9 tokens, more than skv = 8"},
    {"sched.kv_batch", CACHE "\"schedule\":[{\"step\":[[0,1],[1,1],[2,1],[3,1]]}]}",
     FATTN_E_PARSE, "1 to b = 3"},
};

START_TEST(parse)
{
    const parse_row *r = &parse_rows[_i];
    fh_spec s;
    fattn_status st = fh_spec_parse_one(r->json, strlen(r->json), "rows", &s);
    ck_assert_msg(st == r->st, "%s: status %s, want %s: %s", r->id, fattn_status_name(st),
                  fattn_status_name(r->st), fattn_last_error());
    if (r->says)
        ck_assert_msg(strstr(fattn_last_error(), r->says) &&
                          strstr(fattn_last_error(), "key 'schedule'"),
                      "%s: message '%s' lacks '%s'", r->id, fattn_last_error(), r->says);
    if (st == FATTN_OK) { /* canonical form: it parses back to an equal spec */
        char *c = NULL;
        ck_assert_int_eq(fh_spec_canonical(&s, &c), FATTN_OK);
        fh_spec t;
        ck_assert_int_eq(fh_spec_parse_one(c, strlen(c), "canonical", &t), FATTN_OK);
        ck_assert(fh_spec_equal(&s, &t));
        free(c);
        fh_spec_free(&t);
    }
    fh_spec_free(&s);
    fattn_test_mark(r->id);
}
END_TEST

/* The canonical form, byte for byte as Python's json.dumps(sort_keys=True,
 * separators=(",", ":")) writes it; fp8's recipe-update members only
 * where they differ from TE's defaults; a case without the key unchanged. */
START_TEST(canonical)
{
    static const struct {
        const char *json, *want;
    } rows[] = {
        {FP8 "\"schedule\":[{\"F\":0},{\"U\":\"both\"},{\"X\":\"extra_state\"},{\"B\":0}]}",
         "\"schedule\":[{\"F\":0},{\"U\":\"both\"},{\"X\":\"extra_state\"},{\"B\":0}],"},
        {FP8 "\"schedule\":[{\"F\":0}]}",
         "\"fp8\":{\"bf16_backward\":false,\"dpa_bwd\":true,\"input_fp8\":false,"
         "\"o_in_f16\":true,\"output_fp8\":false,\"recipe\":\"delayed\"},"},
        {"{\"id\":\"t\",\"b\":2,\"h\":2,\"sq\":4,\"d_qk\":128,\"fp8\":{\"margin\":-1,"
         "\"amax_history_len\":3,\"amax_compute_algo\":\"most_recent\"}}",
         "\"fp8\":{\"amax_compute_algo\":\"most_recent\",\"amax_history_len\":3,"
         "\"bf16_backward\":false,\"dpa_bwd\":true,\"input_fp8\":false,\"margin\":-1,"
         "\"o_in_f16\":true,\"output_fp8\":false,\"recipe\":\"delayed\"},"},
        {"{\"id\":\"t\",\"b\":2,\"h\":2,\"sq\":4,\"d_qk\":128,\"fp8\":{\"reduce_amax\":false}}",
         "\"fp8\":{\"bf16_backward\":false,\"dpa_bwd\":true,\"input_fp8\":false,"
         "\"o_in_f16\":true,\"output_fp8\":false,\"recipe\":\"delayed\",\"reduce_amax\":false},"},
        {CACHE "\"schedule\":[{\"step\":[[0,3],[1,2]]},{\"step\":[[0,1],[1,1]]}]}",
         "\"schedule\":[{\"step\":[[0,3],[1,2]]},{\"step\":[[0,1],[1,1]]}],"},
    };
    for (int i = 0; i < NROWS(rows); i++) {
        fh_spec s;
        ck_assert_int_eq(fh_spec_parse_one(rows[i].json, strlen(rows[i].json), "c", &s),
                         FATTN_OK);
        char *c = NULL;
        ck_assert_int_eq(fh_spec_canonical(&s, &c), FATTN_OK);
        ck_assert_msg(strstr(c, rows[i].want), "row %d: %s lacks %s", i, c, rows[i].want);
        free(c);
        fh_spec_free(&s);
    }
    fh_spec s;
    const char *plain = TRAIN "\"seed\":3}";
    ck_assert_int_eq(fh_spec_parse_one(plain, strlen(plain), "c", &s), FATTN_OK);
    char *c = NULL;
    ck_assert_int_eq(fh_spec_canonical(&s, &c), FATTN_OK);
    ck_assert_ptr_null(strstr(c, "schedule"));
    free(c);
    fh_spec_free(&s);
    /* reduce_amax is DelayedScaling's: refused with another recipe */
    const char *cs = "{\"id\":\"t\",\"b\":2,\"h\":2,\"sq\":4,\"d_qk\":128,"
                     "\"fp8\":{\"recipe\":\"current\",\"reduce_amax\":false}}";
    ck_assert_int_eq(fh_spec_parse_one(cs, strlen(cs), "c", &s), FATTN_E_INVALID_ARG);
    fh_spec_free(&s);
    fattn_test_mark("sched.canonical");
}
END_TEST

/* Three steps over a cache of 3 sequences of 8 positions: sequences 0 and
 * 1 prefill 3 and 2 tokens, both decode, then 0 finishes while 1 decodes
 * and 2 arrives with 2 tokens. By hand from inference.py: NonPaged's
 * batch_indices are the unfinished indices, the finished, then the rest
 * (484-491), need_reindex when the set of sequences changes (508); the
 * paged manager (pages of 2) hands out free pages from the front and puts
 * a finished sequence's back at the end (722-744), and a continuing
 * sequence gets a page when its length is a multiple of the page size
 * (759-760); the page table's rows past the sequences keep what they held
 * (719). */
START_TEST(kv_plan_by_hand)
{
    const char *json = CACHE "\"schedule\":[{\"step\":[[0,3],[1,2]]},{\"step\":[[0,1],[1,1]]},"
                             "{\"step\":[[1,1],[2,2]]}]}";
    fh_spec s;
    ck_assert_int_eq(fh_spec_parse_one(json, strlen(json), "kv", &s), FATTN_OK);
    fh_kv_plan np, pg;
    ck_assert_int_eq(fh_kv_plan_make(s.schedule, 3, 8, 4, false, 0, false, &np), FATTN_OK);
    ck_assert_int_eq(fh_kv_plan_make(s.schedule, 3, 8, 4, true, 2, false, &pg), FATTN_OK);
    static const int64_t lq[3][2] = {{3, 2}, {1, 1}, {1, 2}}, lkv[3][2] = {{3, 2}, {4, 3}, {4, 2}};
    static const int32_t bidx[3][3] = {{0, 1, 2}, {0, 1, 2}, {1, 0, 2}};
    static const bool reindex[3] = {true, false, true};
    static const int32_t table[3][12] = {{0, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0},
                                         {0, 1, 0, 0, 2, 3, 0, 0, 0, 0, 0, 0},
                                         {2, 3, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0}};
    static const int64_t sq[3] = {3, 1, 2};
    for (int k = 0; k < 3; k++) {
        const fh_kv_step *a = &np.steps[k], *p = &pg.steps[k];
        ck_assert_int_eq(a->b, 2);
        ck_assert_int_eq(a->sq, sq[k]);
        for (int j = 0; j < 2; j++) {
            ck_assert_int_eq(a->lens_q[j], lq[k][j]);
            ck_assert_int_eq(a->lens_kv[j], lkv[k][j]);
            ck_assert_int_eq(p->lens_kv[j], lkv[k][j]);
        }
        for (int j = 0; j < 3; j++)
            ck_assert_msg(a->batch_indices[j] == bidx[k][j], "step %d batch_indices[%d] %d", k + 1,
                          j, a->batch_indices[j]);
        ck_assert(a->need_reindex == reindex[k]);
        for (int j = 0; j < 12; j++)
            ck_assert_msg(p->page_table[j] == table[k][j], "step %d page_table[%d] = %d, want %d",
                          k + 1, j, p->page_table[j], table[k][j]);
    }
    fh_kv_plan_free(&np);
    fh_kv_plan_free(&pg);
    /* a thd q: the call's batch is the cache's, the entries past the step's empty */
    fh_kv_plan th;
    ck_assert_int_eq(fh_kv_plan_make(s.schedule, 3, 8, 4, false, 0, true, &th), FATTN_OK);
    ck_assert_int_eq(th.steps[0].b, 3);
    ck_assert_int_eq(th.steps[0].b_q, 2);
    ck_assert_int_eq(th.steps[0].lens_q[2], 0);
    ck_assert_int_eq(th.steps[0].lens_kv[2], 0);
    fh_kv_plan_free(&th);
    /* the spec each step runs as */
    fh_kv_plan plan;
    ck_assert_int_eq(fh_spec_kv_plan(&s, &plan), FATTN_OK);
    fh_spec one;
    ck_assert_int_eq(fh_spec_step(&s, &plan, 3, &one), FATTN_OK);
    ck_assert_int_eq(one.seed, s.seed + 3);
    ck_assert_int_eq(one.b, 2);
    ck_assert_int_eq(one.sq, 2);
    ck_assert_ptr_null(one.schedule);
    ck_assert_int_eq(one.seqlens_kv[0], 4);
    ck_assert_int_eq(one.seqlens_kv[1], 2);
    fh_spec_free(&one);
    fh_kv_plan_free(&plan);
    fh_spec_free(&s);
    fattn_test_mark("sched.kv_plan");
}
END_TEST

/* More sequences than the cache's batch: the step is named. (A free page
 * is always there: InferenceParams' pages are max_batch times the pages of
 * one sequence, inference.py:174-177.) */
START_TEST(kv_plan_full)
{
    fh_schedule sc = {0};
    int64_t seq[2] = {0, 1}, len[2] = {4, 4};
    fh_step st = {.kind = FH_STEP_KV, .n = 2, .seq = seq, .len = len};
    sc.n = 1;
    sc.steps = &st;
    fh_kv_plan p;
    ck_assert_int_eq(fh_kv_plan_make(&sc, 1, 8, 4, true, 2, false, &p), FATTN_E_INVALID_ARG);
    ck_assert(strstr(fattn_last_error(), "step 1: more sequences than"));
    fattn_test_mark("sched.kv_full");
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("schedule");
    TCase *tc = tcase_create("schedule");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, parse, 0, NROWS(parse_rows));
    tcase_add_test(tc, canonical);
    tcase_add_test(tc, kv_plan_by_hand);
    tcase_add_test(tc, kv_plan_full);
    suite_add_tcase(s, tc);
    return s;
}

static void list_ids(void)
{
    for (int i = 0; i < NROWS(parse_rows); i++)
        printf("%s\n", parse_rows[i].id);
    printf("sched.canonical\nsched.kv_plan\nsched.kv_full\n");
}

FATTN_TEST_MAIN(make_suite, list_ids)
