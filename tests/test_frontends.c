/* Suite "frontends": legacy and split side by side, through the harness.
 *
 * For every case of the CPU matrix (cases.h), on the CPU engine with 2
 * threads, the runner (fh_run_case) records the case from BEGIN to
 * BACKWARD through each front end's adapter, outputs poisoned with
 * FH_POISON_PATTERN and the generator starting at (seed + 7, 32), as
 * `fattn run` would record the table row's spec. Then:
 *  - the two case trees are equal bit for bit outside `_impl`, by verify's
 *    comparison (fh_compare_cases: the tree walk with the in-memory
 *    source and the bitwise element rule): inputs; forward out, max_logit,
 *    aux slots and the generator after it; save_ctx's saved tensors and
 *    the backward-read set; backward's grads;
 *  - the recorded values are the case's: rng_state (seed + 7, 32), the
 *    generator advanced by 16, max_logit [h] in the io dtype or absent,
 *    exactly the grads the case has (no backward group for inference);
 *  - both trees hold what a direct engine run of the case (tcase_run)
 *    computes, outside THD's zero-filled regions: out, Stats (forward/aux
 *    and save_ctx), dq, dk, dv, d_bias, d_softmax_offset, compared the
 *    same way.
 *  - each run resumed by fh_replay_case (the other front end from the
 *    recorded save_ctx; split from its recorded forward) records the same
 *    tree again.
 * Cases TE refuses on the reference platform (fe_case_te_invalid) must be
 * refused by both runs with the support table's status.
 *
 * What only one front end's API shows (legacy's 36 grads, split's 6 and its
 * dedup records, no returned tensor aliasing an input, the refusal before
 * the rng draw) is tested in test_legacy.c and test_split.c, per case too.
 * Also: the two front-end libraries do not reference each other's symbols.
 */
#include <stdio.h>
#include <string.h>

#include "cases.h"
#include "compare.h"
#include "fattn_test.h"
#include "fe_unit.h"
#include "runner.h"
#include "runtree.h"
#include "saved_slots.h"

static fattn_engine *engine2(void)
{
    fattn_engine *e = NULL;
    fattn_cpu_options o = {.threads = 2};
    ck_assert_int_eq(fattn_engine_init_cpu(&e, &o), FATTN_OK);
    return e;
}

/* The table row's spec with the generator starting where the direct engine
 * run's rng_state is (cases.c: (seed + 7, 32)). A shallow copy: it shares
 * the row's seqlens lists and is never freed. */
static fh_spec run_spec(const tcase *c)
{
    const fh_spec *s = tcase_spec_of(c);
    ck_assert_msg(s != NULL, "%s: no spec", c->id);
    fh_spec r = *s;
    r.rng_seed = (int64_t)(c->seed + 7);
    r.rng_offset = 32;
    return r;
}

static fattn_status run_through(const fh_spec *s, fh_impl impl, fattn_engine *e,
                                fh_h5_node **out)
{
    fh_run_opts o = {.impl = impl, .engine = e, .until = FH_STATE_BACKWARD,
                        .poison = FH_POISON_PATTERN};
    return fh_run_case(s, &o, out);
}

/* a and b compare equal (fh_compare_cases, every state) over at least
 * `min_tensors` tensors; `replay`: one of them is a replay (compare.h). */
static void expect_same_trees(const char *id, const char *what, const fh_h5_node *a,
                              const fh_h5_node *b, size_t min_tensors, bool replay)
{
    fh_compare_result r;
    memset(&r, 0, sizeof r);
    r.replay = replay;
    fh_compare_cases(a, b, NULL, &r);
    ck_assert_msg(r.differences == 0, "%s: %s: %zu differences, first %s: %s", id, what,
                  r.differences, r.paths[0], r.why[0]);
    ck_assert_msg(r.tensors >= min_tensors, "%s: %s: %zu tensors compared, want %zu", id, what,
                  r.tensors, min_tensors);
}

static int64_t int_attr(const fh_h5_node *n, const char *name)
{
    const fh_h5_attr *a = n ? fh_h5_node_attr(n, name) : NULL;
    ck_assert_msg(a && a->kind == FH_H5_ATTR_INT64, "no int64 attribute %s", name);
    return a->i64[0];
}

/* What the recorded tree of a case must hold whichever front end ran it. */
static void check_recorded(const tcase *c, const fh_spec *s, const fh_h5_node *t)
{
    ck_assert_msg(fh_h5_node_attr(t, "skipped") == NULL, "%s: skipped", c->id);
    const fh_h5_node *fwd = fh_h5_node_find(t, "forward");
    ck_assert_int_eq(int_attr(fwd, "rng_gen_seed"), s->rng_seed);
    ck_assert_int_eq(int_attr(fwd, "rng_gen_offset"), s->rng_offset + 16);
    const fh_h5_node *rs = fh_h5_node_find(t, "save_ctx/rng_state");
    ck_assert_msg(rs && rs->is_dataset && rs->dtype == FATTN_DTYPE_INT64 && rs->ndim == 1 &&
                      rs->shape[0] == 2,
                  "%s: save_ctx/rng_state", c->id);
    ck_assert_int_eq(((const int64_t *)rs->data)[0], s->rng_seed);
    ck_assert_int_eq(((const int64_t *)rs->data)[1], s->rng_offset);
    const fh_h5_node *ml = fh_h5_node_find(t, "forward/max_logit");
    if (c->return_max_logit) {
        ck_assert_msg(ml && ml->is_dataset, "%s: no max_logit", c->id);
        ck_assert_int_eq(ml->ndim, 1);
        ck_assert_int_eq(ml->shape[0], c->h);
        ck_assert_int_eq(ml->dtype, c->dtype);
    } else {
        ck_assert_msg(ml == NULL, "%s: max_logit recorded", c->id);
    }
    const fh_h5_node *bwd = fh_h5_node_find(t, "backward");
    ck_assert_msg((bwd != NULL) == c->training, "%s: backward group", c->id);
    if (!c->training)
        return;
    bool want[5] = {true, true, true, c->bias == FATTN_BIAS_POST_SCALE_BIAS,
                    c->softmax != FATTN_SOFTMAX_VANILLA};
    static const char *const grads[5] = {"dq", "dk", "dv", "d_bias", "d_softmax_offset"};
    for (int i = 0; i < 5; i++)
        ck_assert_msg((fh_h5_node_find(bwd, grads[i]) != NULL) == want[i], "%s: backward/%s",
                      c->id, grads[i]);
    int public = 0; /* an adapter's _impl group is its own */
    for (size_t i = 0; i < bwd->n_children; i++)
        public += strcmp(bwd->children[i]->name, "_impl") != 0;
    ck_assert_int_eq(public, want[3] + want[4] + 3);
}

/* The group `dir` ('/'-separated, e.g. "forward/aux") of a tree made here,
 * created as needed. */
static fh_h5_node *group_at(fh_h5_node *root, const char *dir)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", dir);
    fh_h5_node *g = root;
    for (char *part = strtok(buf, "/"); part; part = strtok(NULL, "/"))
        ck_assert_int_eq(fh_h5_node_group(g, part, &g), FATTN_OK);
    return g;
}

/* A recorded tensor and where the direct engine run left the same one. */
typedef struct probe {
    const char *dir, *name;
    const fattn_tensor *engine;
    bool on; /* defined for this case (not THD's zero-filled layout) */
} probe;

/* Both trees against the direct engine run: the probed datasets of each
 * tree, copied into a tree of their own, compare equal to the engine's
 * tensors at the same paths. */
static void check_against_engine(const tcase *c, tcase_buffers *b, fh_h5_node *const runs[2])
{
    bool q_thd = fattn_layout_q_format(c->layout) == FATTN_FORMAT_THD;
    bool kv_thd = fattn_layout_kv_format(c->layout) == FATTN_FORMAT_THD;
    const char *stats = fh_saved_name(FH_SAVED_softmax_stats);
    const probe probes[] = {
        {"forward", "out", &b->o, !q_thd},
        {"forward/aux", stats, &b->stats, true},
        {"save_ctx", stats, &b->stats, true},
        {"backward", "dq", &b->dq, c->training && !q_thd},
        {"backward", "dk", &b->dk, c->training && !kv_thd},
        {"backward", "dv", &b->dv, c->training && !kv_thd},
        {"backward", "d_bias", &b->d_bias, c->training},
        {"backward", "d_softmax_offset", &b->d_softmax_offset, c->training},
    };
    fh_h5_node *engine = NULL;
    ck_assert_int_eq(fh_h5_node_new_group(c->id, &engine), FATTN_OK);
    size_t n_engine = 0;
    for (int i = 0; i < FE_NROWS(probes); i++) {
        const probe *p = &probes[i];
        if (!p->on || fattn_tensor_is_empty(p->engine))
            continue;
        ck_assert_int_eq(
            fh_h5_node_add_tensor(group_at(engine, p->dir), p->name, p->engine, NULL),
            FATTN_OK);
        n_engine++;
    }
    for (int k = 0; k < 2; k++) {
        fh_h5_node *probed = NULL;
        ck_assert_int_eq(fh_h5_node_new_group(c->id, &probed), FATTN_OK);
        for (int i = 0; i < FE_NROWS(probes); i++) {
            const probe *p = &probes[i];
            char path[96];
            snprintf(path, sizeof path, "%s/%s", p->dir, p->name);
            const fh_h5_node *n = fh_h5_node_find(runs[k], path);
            if (p->on && n)
                ck_assert_int_eq(fh_h5_node_add_bytes(group_at(probed, p->dir), p->name,
                                                         n->dtype, n->ndim, n->shape, n->data,
                                                         n->nbytes, NULL),
                                 FATTN_OK);
        }
        expect_same_trees(c->id, k ? "split vs engine" : "legacy vs engine", probed, engine,
                          n_engine, false);
        fh_h5_node_free(probed);
    }
    fh_h5_node_free(engine);
}

/* Each run resumed by the runner's replay, from a state the other front
 * end (or the same one) recorded, gives the same tree again: the recorded
 * save_ctx is all either backward needs, and split rebuilds its save_ctx
 * from a recorded forward. */
static void check_replays(const tcase *c, fattn_engine *e, fh_h5_node *const runs[2])
{
    static const struct {
        int recorded;      /* index into runs: 0 legacy, 1 split */
        fh_state from;
        fh_impl impl;      /* also the run the replay must equal */
        const char *what;
    } rows[] = {
        {0, FH_STATE_SAVE_CTX, FH_IMPL_SPLIT, "split replaying legacy's save_ctx"},
        {1, FH_STATE_SAVE_CTX, FH_IMPL_LEGACY, "legacy replaying split's save_ctx"},
        {1, FH_STATE_FORWARD, FH_IMPL_SPLIT, "split replaying its forward"},
    };
    for (int i = 0; i < FE_NROWS(rows); i++) {
        fh_run_opts o = {.impl = rows[i].impl, .engine = e, .until = FH_STATE_BACKWARD,
                            .poison = FH_POISON_PATTERN};
        fh_h5_node *re = NULL;
        ck_assert_msg(fh_replay_case(runs[rows[i].recorded], rows[i].from, &o, &re) ==
                          FATTN_OK,
                      "%s: %s: %s", c->id, rows[i].what, fattn_last_error());
        int want = rows[i].impl == FH_IMPL_LEGACY ? 0 : 1;
        expect_same_trees(c->id, rows[i].what, re, runs[want], 1, true);
        fh_h5_node_free(re);
    }
}

START_TEST(case_row)
{
    const tcase *c = &tcase_table[_i];
    fattn_engine *e = engine2();
    fh_spec s = run_spec(c);
    fh_h5_node *runs[2] = {NULL, NULL};
    fattn_status lst = run_through(&s, FH_IMPL_LEGACY, e, &runs[0]);
    fattn_status sst = run_through(&s, FH_IMPL_SPLIT, e, &runs[1]);

    /* A case TE refuses: both runs refuse it alike. */
    fattn_support_query q = fe_case_query(c);
    fattn_status expect = fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL);
    ck_assert_msg(expect == (fe_case_te_invalid(c) ? FATTN_E_INVALID_CASE : FATTN_OK),
                  "%s: support says %s", c->id, fattn_status_name(expect));
    ck_assert_msg(lst == expect, "%s legacy: %s (%s)", c->id, fattn_status_name(lst),
                  fattn_last_error());
    ck_assert_msg(sst == expect, "%s split: %s (%s)", c->id, fattn_status_name(sst),
                  fattn_last_error());
    if (expect == FATTN_OK) {
        ck_assert(runs[0] && runs[1]);
        expect_same_trees(c->id, "legacy vs split", runs[0], runs[1], 1, false);
        check_recorded(c, &s, runs[0]);
        check_recorded(c, &s, runs[1]);
        check_replays(c, e, runs);

        /* The direct engine run, with the rng_state the front ends drew. */
        tcase_buffers b;
        ck_assert_msg(tcase_setup(c, &b) == FATTN_OK, "%s: %s", c->id, fattn_last_error());
        ck_assert_msg(tcase_run(c, &b, e) == FATTN_OK, "%s direct: %s", c->id,
                      fattn_last_error());
        check_against_engine(c, &b, runs);
        tcase_teardown(&b);
    } else {
        ck_assert(!runs[0] && !runs[1]);
    }
    fh_h5_node_free(runs[0]);
    fh_h5_node_free(runs[1]);
    fattn_engine_free(e);
    char id[160];
    snprintf(id, sizeof id, "frontends.%s", c->id);
    fattn_test_mark(id);
}
END_TEST

/* nm -u over a static library: fail on any undefined symbol of the other
 * front end, public (fattn_<bad>_) or library-internal (fattn__<bad>_). */
static void check_symbols(const char *lib, const char *bad, const char *need)
{
    char pub[64], internal[64];
    snprintf(pub, sizeof pub, "fattn_%s_", bad);
    snprintf(internal, sizeof internal, "fattn__%s_", bad);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "nm -u '%s' 2>/dev/null", lib);
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "cannot run nm on %s", lib);
    char line[512];
    int nsym = 0;
    bool saw_need = false;
    while (fgets(line, sizeof line, p)) {
        if (strstr(line, " U "))
            nsym++;
        ck_assert_msg(strstr(line, pub) == NULL && strstr(line, internal) == NULL,
                      "%s references %s", lib, line);
        if (strstr(line, need))
            saw_need = true;
    }
    int rc = pclose(p);
    ck_assert_msg(rc == 0, "nm failed on %s", lib);
    ck_assert_msg(nsym > 0 && saw_need, "nm listed nothing useful for %s", lib);
}

START_TEST(independence)
{
    check_symbols(FATTN_LEGACY_LIB, "split", "fattn_engine_fwd");
    check_symbols(FATTN_SPLIT_LIB, "legacy", "fattn_engine_fwd");
    fattn_test_mark("frontends.independence");
}
END_TEST

static void list_ids(void)
{
    for (int i = 0; i < tcase_count; i++)
        printf("frontends.%s\n", tcase_table[i].id);
    printf("frontends.independence\n");
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("frontends");
    TCase *tc = tcase_create("matrix");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, case_row, 0, tcase_count);
    suite_add_tcase(s, tc);
    TCase *ti = tcase_create("independence");
    tcase_set_timeout(ti, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(ti, independence);
    suite_add_tcase(s, ti);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
