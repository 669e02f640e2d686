/* The two-tree walk (treewalk.h) and the element rules (elemcmp.h) that
 * diff, verify and the --repeat audit share. */
#include <math.h>
#include <string.h>

#include "elemcmp.h"
#include "fattn_test.h"
#include "treewalk.h"

/* ---- the walk ------------------------------------------------------------------ */

/* Every callback appends one line to a log, so a test states the order. */
typedef struct logger {
    char buf[4096];
    size_t len;
    bool descend_impl;
} logger;

static void log_line(logger *l, const char *what, const fh_walk_at *at, const char *extra)
{
    int n = snprintf(l->buf + l->len, sizeof l->buf - l->len, "%s %s%s%s%s d%d%s\n", what,
                     at->path, extra ? " " : "", extra ? extra : "",
                     !at->a ? " (B only)" : !at->b ? " (A only)" : "", at->depth,
                     at->priv ? " priv" : "");
    ck_assert(n > 0 && (size_t)n < sizeof l->buf - l->len);
    l->len += (size_t)n;
}

static void log_attr(void *ctx, const fh_walk_at *at, const fh_h5_attr *a,
                     const fh_h5_attr *b)
{
    char x[128];
    snprintf(x, sizeof x, "@%s%s", a ? a->name : b->name, !a ? "(B)" : !b ? "(A)" : "");
    log_line(ctx, "attr", at, x);
}

static void log_attrs_done(void *ctx, const fh_walk_at *at)
{
    log_line(ctx, "attrs_done", at, NULL);
}

static fh_walk_next log_child(void *ctx, const fh_walk_at *at)
{
    logger *l = ctx;
    log_line(l, "child", at, NULL);
    const fh_h5_node *n = at->a ? at->a : at->b;
    if (n->is_dataset || (!strcmp(at->name, "_impl") && !l->descend_impl))
        return FH_WALK_SKIP;
    return FH_WALK_DESCEND;
}

static void log_group_done(void *ctx, const fh_walk_at *at)
{
    log_line(ctx, "group_done", at, NULL);
}

static const fh_walk_visitor log_visitor = {
    .attr = log_attr,
    .attrs_done = log_attrs_done,
    .child = log_child,
    .group_done = log_group_done,
};

static void add_f32(fh_h5_node *g, const char *name, const float *v, int n)
{
    int64_t shape[1] = {n};
    ck_assert_int_eq(fh_h5_node_add_bytes(g, name, FATTN_DTYPE_FLOAT32, 1, shape, v,
                                             (size_t)n * sizeof *v, NULL),
                     FATTN_OK);
}

/* A: /@x /@y  f/out f/aux/stats f/_impl/s  only_a
 * B: /@y /@z  f/out f/aux/stats f/_impl/s  only_b (a group with one dataset) */
static void two_trees(fh_h5_node **a, fh_h5_node **b)
{
    float v[2] = {1, 2};
    fh_h5_node *t[2];
    for (int s = 0; s < 2; s++) {
        fh_h5_node *f, *aux, *impl;
        ck_assert_int_eq(fh_h5_node_new_group("", &t[s]), FATTN_OK);
        ck_assert_int_eq(fh_h5_node_set_int64(t[s], s ? "z" : "x", 1), FATTN_OK);
        ck_assert_int_eq(fh_h5_node_set_int64(t[s], "y", 2), FATTN_OK);
        ck_assert_int_eq(fh_h5_node_group(t[s], "f", &f), FATTN_OK);
        ck_assert_int_eq(fh_h5_node_group(f, "aux", &aux), FATTN_OK);
        ck_assert_int_eq(fh_h5_node_group(f, "_impl", &impl), FATTN_OK);
        add_f32(f, "out", v, 2);
        add_f32(aux, "stats", v, 2);
        add_f32(impl, "s", v, 2);
        if (s == 0) {
            add_f32(t[s], "only_a", v, 2);
        } else {
            fh_h5_node *g;
            ck_assert_int_eq(fh_h5_node_group(t[s], "only_b", &g), FATTN_OK);
            add_f32(g, "t", v, 2);
        }
    }
    *a = t[0];
    *b = t[1];
}

START_TEST(test_walk_order)
{
    fh_h5_node *a, *b;
    two_trees(&a, &b);
    logger l = {0};
    fh_walk w = {&log_visitor, &l, '/'};
    fh_walk_at root = fh_walk_root("/", a, b);
    fh_walk_group(&w, &root);
    static const char want[] =
        "attr / @x(A) d0\n"
        "attr / @y d0\n"
        "attr / @z(B) d0\n"
        "attrs_done / d0\n"
        "child /f d1\n"
        "attrs_done /f d1\n"
        "child /f/_impl d2 priv\n"
        "child /f/aux d2\n"
        "attrs_done /f/aux d2\n"
        "child /f/aux/stats d3\n"
        "group_done /f/aux d2\n"
        "child /f/out d2\n"
        "group_done /f d1\n"
        "child /only_a (A only) d1\n"
        "child /only_b (B only) d1\n"
        "attrs_done /only_b (B only) d1\n"
        "child /only_b/t (B only) d2\n"
        "group_done /only_b (B only) d1\n"
        "group_done / d0\n";
    ck_assert_str_eq(l.buf, want);
    fh_h5_node_free(a);
    fh_h5_node_free(b);
}
END_TEST

START_TEST(test_walk_paths_and_private)
{
    fh_h5_node *a, *b;
    two_trees(&a, &b);
    /* '.'-joined names from a bare root, as the audit names tensors; the
     * private flag covers an _impl group and what is below it */
    logger l = {.descend_impl = true};
    fh_walk w = {&log_visitor, &l, '.'};
    fh_walk_at root = fh_walk_root("", fh_h5_node_find(a, "f"),
                                         fh_h5_node_find(b, "f"));
    fh_walk_group(&w, &root);
    ck_assert_msg(strstr(l.buf, "child _impl.s d2 priv\n"), "%s", l.buf);
    ck_assert_msg(strstr(l.buf, "child aux.stats d2\n"), "%s", l.buf);
    ck_assert_msg(strstr(l.buf, "child out d1\n"), "%s", l.buf);
    /* attributes alone */
    l = (logger){0};
    fh_walk_at r2 = fh_walk_root("/", a, b);
    fh_walk_attrs(&w, &r2);
    ck_assert_str_eq(l.buf, "attr / @x(A) d0\nattr / @y d0\nattr / @z(B) d0\nattrs_done / d0\n");
    fh_h5_node_free(a);
    fh_h5_node_free(b);
}
END_TEST

/* ---- element rules ------------------------------------------------------------------ */

static fh_elem_stats run_rule(fh_elem_mode mode, const float *a, const float *b, size_t n,
                                 double rtol, double atol, uint64_t max_ulp, bool skip_poison)
{
    fh_elem_cmp c = {mode, max_ulp, {rtol, atol}, skip_poison, NULL};
    fh_elem_stats s = {0};
    bool want = false;
    fh_elem_compare_chunk(&c, FATTN_DTYPE_FLOAT32, (const unsigned char *)a,
                             (const unsigned char *)b, n, 0, &want, &s);
    return s;
}

START_TEST(test_rules)
{
    float one = 1.0f, next = nextafterf(1.0f, 2.0f);
    float nan_a, nan_b, pz = 0.0f, nz = -0.0f;
    uint32_t ba = 0x7fc00000u, bb = 0x7fc00001u;
    memcpy(&nan_a, &ba, 4);
    memcpy(&nan_b, &bb, 4);
    float a[5] = {one, next, nan_a, pz, 2.0f};
    float b[5] = {one, one, nan_b, nz, INFINITY};
    fh_elem_stats s = run_rule(FH_ELEM_BITWISE, a, b, 5, 0, 0, 0, false);
    ck_assert_uint_eq(s.bit_count, 4);
    ck_assert_uint_eq(s.fail_count, 4);
    ck_assert_uint_eq(s.nan_payloads, 1);
    ck_assert_uint_eq(s.class_changes, 1);
    ck_assert_uint_eq(s.max_ulp, 1);
    /* ULP: the 1-ulp pair passes at max_ulp 1, NaN payloads and zeros too;
     * the class change fails */
    s = run_rule(FH_ELEM_ULP, a, b, 5, 0, 0, 1, false);
    ck_assert_uint_eq(s.bit_count, 4);
    ck_assert_uint_eq(s.fail_count, 1);
    s = run_rule(FH_ELEM_ULP, a, b, 5, 0, 0, 0, false);
    ck_assert_uint_eq(s.fail_count, 2);
    /* TOL: |a-b| <= atol + rtol|b|; the failing element exceeding most is
     * the class change (+inf) */
    s = run_rule(FH_ELEM_TOL, a, b, 5, 1e-6, 0, 0, false);
    ck_assert_uint_eq(s.fail_count, 1);
    ck_assert_uint_eq(s.excess_index, 4);
    ck_assert(isinf(s.excess));
    s = run_rule(FH_ELEM_TOL, a, b, 4, 0, 0, 0, false);
    ck_assert_uint_eq(s.fail_count, 1); /* only the 1-ulp pair */
    ck_assert_uint_eq(s.excess_index, 1);
    /* NOISY: every element, NaN anywhere fails */
    s = run_rule(FH_ELEM_NOISY, a, b, 2, 1e-3, 1e-3, 0, false);
    ck_assert_uint_eq(s.fail_count, 0);
    s = run_rule(FH_ELEM_NOISY, a, b, 3, 1e-3, 1e-3, 0, false);
    ck_assert_uint_eq(s.fail_count, 1);
    /* equal buffers: nothing differs, whatever the rule */
    s = run_rule(FH_ELEM_BITWISE, a, a, 5, 0, 0, 0, false);
    ck_assert_uint_eq(s.bit_count, 0);
}
END_TEST

START_TEST(test_poison_and_ulp)
{
    /* elements whose reference bytes are all 0xFF are undefined: skipped */
    float a[2] = {1.0f, 3.0f}, b[2];
    uint32_t poison = 0xFFFFFFFFu;
    b[0] = 1.0f;
    memcpy(&b[1], &poison, 4);
    fh_elem_stats s = run_rule(FH_ELEM_TOL, a, b, 2, 0, 0, 0, true);
    ck_assert_uint_eq(s.bit_count, 0);
    ck_assert_uint_eq(s.fail_count, 0);
    s = run_rule(FH_ELEM_TOL, a, b, 2, 0, 0, 0, false);
    ck_assert_uint_eq(s.fail_count, 1);
    /* the lattice: +0 and -0 are 0 apart; across zero the distances add */
    ck_assert_uint_eq(fh_elem_ulp(FATTN_DTYPE_FLOAT32, 0x00000000u, 0x80000000u), 0);
    ck_assert_uint_eq(fh_elem_ulp(FATTN_DTYPE_FLOAT32, 0x00000001u, 0x80000001u), 2);
    ck_assert_uint_eq(fh_elem_ulp(FATTN_DTYPE_BFLOAT16, 0x3f80u, 0x3f81u), 1);
    ck_assert_uint_eq(fh_elem_ulp(FATTN_DTYPE_FLOAT8_E5M2, 0x01u, 0x81u), 2);
}
END_TEST

START_TEST(test_energy_cache)
{
    /* equal 16-bit chunks add B's energy through the caller's cache */
    fh_elem_sq_cache sq = {0};
    uint16_t a[2] = {0x3c00u, 0x4000u}; /* float16 1, 2 */
    fh_elem_cmp c = {FH_ELEM_BITWISE, 0, {0, 0}, false, &sq};
    fh_elem_stats s = {0};
    bool want = true;
    fh_elem_compare_chunk(&c, FATTN_DTYPE_FLOAT16, (const unsigned char *)a,
                             (const unsigned char *)a, 2, 0, &want, &s);
    ck_assert(s.signal == 5.0);
    ck_assert_ptr_nonnull(sq.tab[FATTN_DTYPE_FLOAT16]);
    fh_elem_sq_cache_free(&sq);
    ck_assert_ptr_null(sq.tab[FATTN_DTYPE_FLOAT16]);
}
END_TEST

/* A source that hands out a node's data two elements at a time, as the
 * streaming source of diff hands out bounded chunks. */
typedef struct pair_stream {
    const fh_h5_node *n;
    size_t at;
} pair_stream;

static pair_stream pair_streams[2];

static fattn_status pairs_open(void *ctx, int side, const char *path, const fh_h5_node *n,
                               void **stream)
{
    (void)ctx;
    (void)path;
    pair_streams[side] = (pair_stream){n, 0};
    *stream = &pair_streams[side];
    return FATTN_OK;
}

static fattn_status pairs_next(void *stream, const unsigned char **chunk, size_t *nbytes)
{
    pair_stream *p = stream;
    size_t left = p->n->nbytes - p->at, two = 2 * fattn_dtype_size(p->n->dtype);
    *chunk = (const unsigned char *)p->n->data + p->at;
    *nbytes = left < two ? left : two;
    p->at += *nbytes;
    return FATTN_OK;
}

static void pairs_close(void *stream) { (void)stream; }

START_TEST(test_sources)
{
    /* the same pair through the memory source (one chunk) and through
     * chunks of two elements: the same counts, the same flat indices */
    float va[5] = {1, 2, 3, 4, 5}, vb[5] = {1, 2.5f, 3, 4, -5};
    fh_h5_node *g;
    ck_assert_int_eq(fh_h5_node_new_group("", &g), FATTN_OK);
    add_f32(g, "a", va, 5);
    add_f32(g, "b", vb, 5);
    const fh_h5_node *a = fh_h5_node_find(g, "a"), *b = fh_h5_node_find(g, "b");
    fh_elem_cmp rule = {FH_ELEM_TOL, 0, {0.1, 0}, false, NULL};
    fh_walk_memory_state m;
    fh_walk_source mem = fh_walk_memory(&m);
    fh_walk_source two = {NULL, pairs_open, pairs_next, pairs_close};
    fh_elem_stats s1 = {0}, s2 = {0};
    char da[FH_DIGEST_LEN], db[FH_DIGEST_LEN], da2[FH_DIGEST_LEN];
    ck_assert_int_eq(fh_walk_compare_data(&mem, "x", a, b, &rule, false, &s1, da, db),
                     FATTN_OK);
    ck_assert_int_eq(fh_walk_compare_data(&two, "x", a, b, &rule, false, &s2, da2, NULL),
                     FATTN_OK);
    ck_assert_uint_eq(s1.bit_count, 2);
    ck_assert_uint_eq(s1.fail_count, 2);
    ck_assert_uint_eq(s2.bit_count, 2);
    ck_assert_uint_eq(s2.fail_count, 2);
    ck_assert_uint_eq(s1.excess_index, 4);
    ck_assert_uint_eq(s2.excess_index, 4);
    ck_assert_uint_eq(s1.worst[0].index, s2.worst[0].index);
    /* the digests are those of the bytes read, whatever the chunking */
    ck_assert_str_eq(da, a->digest);
    ck_assert_str_eq(db, b->digest);
    ck_assert_str_eq(da2, a->digest);
    fh_h5_node_free(g);
}
END_TEST

static void list_ids(void) {}

static Suite *make_suite(void)
{
    Suite *s = suite_create("treewalk");
    TCase *tc = tcase_create("walk");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tc, test_walk_order);
    tcase_add_test(tc, test_walk_paths_and_private);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("elements");
    tcase_set_timeout(te, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(te, test_rules);
    tcase_add_test(te, test_poison_and_ulp);
    tcase_add_test(te, test_energy_cache);
    tcase_add_test(te, test_sources);
    suite_add_tcase(s, te);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
