/* Suite "cudnn-construct" (cudnn_paged): the cuDNN engine's paged-KV graph,
 * built without a GPU from the paged fixtures (paged.c) and inspected against
 * cudnn-frontend's CompositeSDPANode: K and V enter as page containers
 * [pages, h, page, d]; one PAGED_CACHE_LOAD each (container, seq_kv as the
 * sequence, its page table [b, 1, pages_per_seq, 1] int32) gathers them into
 * the virtual K^T [b, hk, d, skv] that bmm1 reads and the virtual V
 * [b, hv, skv, dv] that bmm2 reads; the plan key differs from the contiguous
 * case's. Where libcudnn.so.9 loads, the graph is lowered to backend
 * descriptors up to the operation graph. Refusals: a table whose length is
 * not ceil(skv / page), a mask without padding, FP8.
 */
#include <stdlib.h>
#include <string.h>

#include "cudnn_env.h"
#include "cases.h"
#include "cudnn/graph.h"
#include "cudnn_desc.h"
#include "fattn/cudnn.h"
#include "fattn/te.h"
#include "fattn_config.h"
#include "fattn_test.h"
#include "paged.h"
#if FATTN_HAVE_CUDNN
#include "cudnn/cudnn_internal.h"
#endif

typedef struct built {
    tcase c;
    tcase_buffers buf;
    paged_inputs pi;
    fattn_fwd_params p;
    cg_fwd_desc d;
    cg_graph *g;
} built;

static fattn_status build(built *x, const paged_row *r)
{
    paged_row_case(r, &x->c);
    ck_assert_int_eq(tcase_setup(&x->c, &x->buf), FATTN_OK);
    ck_assert_int_eq(paged_make(r, &x->c, &x->buf, false, &x->pi), FATTN_OK);
    x->p = paged_params(&x->c, &x->buf, &x->pi);
    x->g = malloc(sizeof *x->g);
    ck_assert_ptr_nonnull(x->g);
    fattn_status st = tdesc_fwd(&x->p, &x->d);
    return st == FATTN_OK ? fattn__cg_build_fwd(x->g, &x->d) : st;
}

static void unbuild(built *x)
{
    free(x->g);
    paged_free(&x->pi);
    tcase_teardown(&x->buf);
}

static const cg_op *op_named(const cg_graph *g, const char *name)
{
    for (int i = 0; i < g->nops; i++)
        if (!strcmp(g->ops[i].name, name))
            return &g->ops[i];
    return NULL;
}

static int op_index(const cg_graph *g, const cg_op *o)
{
    return (int)(o - g->ops);
}

static void dims_are(const cg_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    ck_assert_msg(t->dims[0] == a && t->dims[1] == b && t->dims[2] == c && t->dims[3] == d,
                  "%s dims [%lld,%lld,%lld,%lld], want [%lld,%lld,%lld,%lld]", t->name,
                  (long long)t->dims[0], (long long)t->dims[1], (long long)t->dims[2],
                  (long long)t->dims[3], (long long)a, (long long)b, (long long)c, (long long)d);
}

START_TEST(paged_graph)
{
    const paged_row *r = &paged_rows[_i];
    if (r->dtype == FATTN_DTYPE_FLOAT32)
        return; /* the cuDNN engine refuses float32 io */
    built x;
    fattn_status st = build(&x, r);
    ck_assert_msg(st == FATTN_OK, "%s: %s", r->id, fattn_last_error());
    const cg_graph *g = x.g;
    int64_t b = r->b, pps = r->pages_per_seq, skv = (int64_t)r->page * pps;
    int64_t pages = b * pps + r->spare;
    ck_assert(x.d.paged && x.d.padding && g->route == CG_ROUTE_COMPOSITE);

    const cg_tensor *kc = &g->t[fattn__cg_find_uid(g, CG_UID_K)];
    const cg_tensor *vc = &g->t[fattn__cg_find_uid(g, CG_UID_V)];
    dims_are(kc, pages, r->hg, r->page, r->d);
    dims_are(vc, pages, r->hg, r->page, r->dv);
    /* the containers' strides are the caller's, seen in [pages, h, page, d] order */
    bool bshd = fattn_layout_kv_format(x.pi.layout) == FATTN_FORMAT_BSHD;
    const int64_t *ks = x.pi.kc.strides;
    ck_assert_int_eq(kc->strides[0], bshd ? ks[0] : ks[1]);
    ck_assert_int_eq(kc->strides[2], bshd ? ks[1] : ks[0]);
    ck_assert_int_eq(kc->strides[1], ks[2]);
    ck_assert(!kc->is_virtual && kc->role == CG_ROLE_K && vc->role == CG_ROLE_V);

    int ptk = fattn__cg_find_uid(g, CG_UID_PT_K), ptv = fattn__cg_find_uid(g, CG_UID_PT_V);
    ck_assert(ptk >= 0 && ptv >= 0);
    dims_are(&g->t[ptk], b, 1, pps, 1);
    ck_assert(g->t[ptk].dtype == CG_I32 && g->t[ptk].role == CG_ROLE_PT_K);
    ck_assert(g->t[ptv].dtype == CG_I32 && g->t[ptv].role == CG_ROLE_PT_V);
    ck_assert_int_eq(g->t[ptk].strides[2], 1);

    const cg_op *lk = op_named(g, "paged_k_cache_operation");
    const cg_op *lv = op_named(g, "paged_v_cache_operation");
    const cg_op *bmm1 = op_named(g, "bmm1"), *bmm2 = op_named(g, "bmm2");
    ck_assert(lk && lv && bmm1 && bmm2);
    ck_assert(lk->kind == CG_OP_PAGED_LOAD && lv->kind == CG_OP_PAGED_LOAD);
    int seq_kv = fattn__cg_find_uid(g, CG_UID_SEQ_KV);
    ck_assert(lk->in[0] == fattn__cg_find_uid(g, CG_UID_K) && lk->in[1] == seq_kv && lk->in[2] == ptk);
    ck_assert(lv->in[0] == fattn__cg_find_uid(g, CG_UID_V) && lv->in[1] == seq_kv && lv->in[2] == ptv);
    const cg_tensor *kt = &g->t[lk->out], *vt = &g->t[lv->out];
    ck_assert(kt->is_virtual && vt->is_virtual);
    dims_are(kt, b, r->hg, r->d, skv);
    ck_assert_int_eq(kt->strides[2], 1); /* K^T: transposed, as the frontend marks it */
    ck_assert_int_eq(kt->strides[3], r->d);
    dims_are(vt, b, r->hg, skv, r->dv);
    ck_assert_int_eq(vt->strides[3], 1);
    ck_assert(bmm1->in[1] == lk->out && bmm2->in[1] == lv->out);
    ck_assert(op_index(g, lk) < op_index(g, bmm1) && op_index(g, lv) < op_index(g, bmm2));

    char *dump = fattn__cg_dump(g, false);
    ck_assert_ptr_nonnull(dump);
    ck_assert_ptr_nonnull(strstr(dump, "PAGED_CACHE_LOAD"));
    ck_assert_ptr_nonnull(strstr(dump, "role=page_table_v"));
    free(dump);

    /* the contiguous case's graph has another key */
    cg_key_buf *k1 = malloc(sizeof *k1), *k2 = malloc(sizeof *k2);
    ck_assert(k1 && k2);
    fattn__cg_key(g, k1);
    fattn_fwd_params pc = tcase_fwd_params(&x.c, &x.buf);
    cg_fwd_desc dc;
    ck_assert_int_eq(tdesc_fwd(&pc, &dc), FATTN_OK);
    ck_assert_int_eq(fattn__cg_build_fwd(x.g, &dc), FATTN_OK);
    fattn__cg_key(x.g, k2);
    ck_assert(!fattn__cg_key_equal(k1, k2->b, k2->len, k2->hash));
    ck_assert_int_eq(fattn__cg_find_uid(x.g, CG_UID_PT_K), -1);
    free(k1);
    free(k2);
    unbuild(&x);
    char id[128];
    snprintf(id, sizeof id, "cudnn.paged.%s", r->id);
    fattn_test_mark(id);
}
END_TEST

typedef enum refusal {
    RF_TABLE_LONG,  /* one page more than ceil(skv / page) */
    RF_NO_PADDING,
    RF_TABLE_DTYPE,
    RF_COUNT
} refusal;

START_TEST(paged_refusals)
{
    static const fattn_status want[RF_COUNT] = {FATTN_E_SHAPE, FATTN_E_INVALID_CASE,
                                                FATTN_E_SHAPE};
    built x;
    ck_assert_int_eq(build(&x, &paged_rows[0]), FATTN_OK);
    fattn_fwd_params p = x.p;
    switch ((refusal)_i) {
    case RF_TABLE_LONG: p.page_table_k.shape[1] += 1; break;
    case RF_NO_PADDING: p.attn.mask_type = FATTN_MASK_CAUSAL_BOTTOM_RIGHT; break;
    case RF_TABLE_DTYPE: p.page_table_v.dtype = FATTN_DTYPE_INT64; break;
    default: ck_abort();
    }
    fattn_status st = tdesc_fwd(&p, &x.d);
    ck_assert_msg(st == want[_i], "refusal %d: %s (%s)", _i, fattn_status_name(st),
                  fattn_last_error());
    unbuild(&x);
}
END_TEST

#if FATTN_HAVE_CUDNN
/* Lowered to backend descriptors up to the operation graph (no GPU). */
START_TEST(paged_lowering_finalizes)
{
    const paged_row *r = &paged_rows[_i];
    if (r->dtype == FATTN_DTYPE_FLOAT32)
        return;
    const cudnn_api *api = fattn__cudnn_api_load(false);
    ck_assert_msg(api != NULL, "%s", fattn_last_error());
    built x;
    ck_assert_int_eq(build(&x, r), FATTN_OK);
    cudnn_plan *plan = NULL;
    fattn_status st = fattn__cudnn_plan_build(api, NULL, x.g, &plan);
    ck_assert_msg(st == FATTN_OK, "%s: %s", r->id, fattn_last_error());
    ck_assert_ptr_nonnull(plan);
    ck_assert_ptr_nonnull(plan->op_graph);
    fattn__cudnn_plan_free(plan);
    unbuild(&x);
    char id[128];
    snprintf(id, sizeof id, "cudnn.lower.%s", r->id);
    fattn_test_mark(id);
}
END_TEST
#endif

static void list_ids(void)
{
    for (int i = 0; i < paged_row_count; i++)
        if (paged_rows[i].dtype != FATTN_DTYPE_FLOAT32) {
            printf("cudnn.paged.%s\n", paged_rows[i].id);
            printf("cudnn.lower.%s\n", paged_rows[i].id);
        }
}

static Suite *make_suite(void)
{
    fattn_test_cudnn_libraries();
    Suite *s = suite_create("cudnn_paged");
    TCase *tc = tcase_create("graph");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, paged_graph, 0, paged_row_count);
    tcase_add_loop_test(tc, paged_refusals, 0, RF_COUNT);
    suite_add_tcase(s, tc);
#if FATTN_HAVE_CUDNN
    /* an unused TCase is never freed by Check: create it only with tests */
    if (fattn_cudnn_library_loadable()) {
        TCase *tl = tcase_create("lowering");
        tcase_set_timeout(tl, FATTN_TEST_TIMEOUT_SHORT);
        tcase_add_loop_test(tl, paged_lowering_finalizes, 0, paged_row_count);
        suite_add_tcase(s, tl);
    }
#endif
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
