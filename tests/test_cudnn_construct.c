/* Suite "cudnn-construct": the cuDNN engine's graph description, built
 * without a GPU, inspected op by op against the frontend-1.18 lowering
 * (reference/cudnn-sdpa-backend.md §4.2-4.3, docs/cudnn-engine.md); and,
 * when libcudnn.so.9 can be dlopen'ed, lowered to backend descriptors that
 * finalize up to the operation graph (no handle, no heuristics).
 *
 * The lowering tests are registered only when the library loads; with
 * FATTN_REQUIRE_CUDNN=1 a missing library is a failure instead.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_env.h"
#include "cases.h"
#include "core/engine_gaps.h"
#include "cudnn/graph.h"
#include "fattn/cudnn.h"
#include "fattn/support.h"
#include "fattn_config.h"
#include "fattn_test.h"
#if FATTN_HAVE_CUDNN
#include "cudnn/cudnn_internal.h"
#endif
#include "cudnn_desc.h"

/* The engine gaps not measured on a device yet (their rows cite the
 * measurement, tools/gpu/large-dims.sh): described and lowered here all the
 * same, as that measurement runs them with the rows lifted. */
static bool unmeasured_gap(fattn_status st)
{
    static const char *const rows[] = {"rule head_dim_large_cudnn:", "rule fp8_mla_cudnn:"};
    for (size_t i = 0; st == FATTN_E_UNSUPPORTED && i < sizeof rows / sizeof rows[0]; i++)
        if (!strncmp(fattn_last_error(), rows[i], strlen(rows[i])))
            return true;
    return false;
}

/* The dispatch's check of the cuDNN engine's gaps at cuDNN v on the
 * reference platform's sm_90. */
static fattn_status gaps_fwd(const fattn_fwd_params *p, unsigned engine, long v)
{
    return fattn__engine_gaps_fwd(p, engine, v, FATTN_SUPPORT_SM_REFERENCE);
}

static fattn_status gaps_bwd(const fattn_bwd_params *p, unsigned engine, long v)
{
    return fattn__engine_gaps_bwd(p, engine, v, FATTN_SUPPORT_SM_REFERENCE);
}

/* Build the description of one matrix case (host buffers, no GPU). */
static fattn_status describe(const tcase *c, cg_fwd_desc *d, cg_graph *g,
                             void (*tweak)(fattn_fwd_params *))
{
    tcase_buffers buf;
    ck_assert_int_eq(tcase_setup(c, &buf), FATTN_OK);
    fattn_fwd_params p = tcase_fwd_params(c, &buf);
    if (tweak)
        tweak(&p);
    /* as the dispatch does: the engine's gaps are the support table's rows;
     * at cuDNN 9.21, which builds every forward graph described here (the
     * return_max_logit ones need it: rule max_logit_cudnn, `refusals`) */
    fattn_status st = gaps_fwd(&p, FATTN_SUPPORT_ENGINE_CUDNN, 92100);
    if (unmeasured_gap(st))
        st = FATTN_OK;
    if (st == FATTN_OK)
        st = tdesc_fwd(&p, d);
    if (st == FATTN_OK)
        st = fattn__cg_build_fwd(g, d);
    tcase_teardown(&buf);
    return st;
}

/* Op names in order, space separated. */
static void signature(const cg_graph *g, char *out, size_t cap)
{
    out[0] = 0;
    for (int i = 0; i < g->nops; i++) {
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%s%s", i ? " " : "", g->ops[i].name);
    }
}

static const cg_op *find_op(const cg_graph *g, const char *name, int nth)
{
    for (int i = 0; i < g->nops; i++)
        if (!strcmp(g->ops[i].name, name) && nth-- == 0)
            return &g->ops[i];
    return NULL;
}

static const cg_tensor *by_uid(const cg_graph *g, int64_t uid)
{
    int i = fattn__cg_find_uid(g, uid);
    return i >= 0 ? &g->t[i] : NULL;
}

/* Structural invariants every graph must satisfy. */
static void check_invariants(const char *id, const cg_graph *g, const cg_fwd_desc *d)
{
    for (int i = 0; i < g->nt; i++) {
        for (int j = 0; j < i; j++)
            ck_assert_msg(g->t[i].uid != g->t[j].uid, "%s: uid %lld twice", id,
                          (long long)g->t[i].uid);
        const cg_tensor *t = &g->t[i];
        if (!t->is_virtual && !t->by_value)
            ck_assert_msg(t->role != CG_ROLE_NONE, "%s: %s unbound", id, t->name);
        if (t->by_value)
            ck_assert(!t->is_virtual);
        ck_assert_msg(t->ragged < i, "%s: ragged offset of %s created after it", id, t->name);
    }
    /* every op reads tensors produced earlier or non-virtual */
    bool produced[CG_MAX_TENSORS] = {false};
    for (int i = 0; i < g->nops; i++) {
        const cg_op *o = &g->ops[i];
        for (int k = 0; k < 3; k++) {
            int x = o->in[k];
            if (x >= 0)
                ck_assert_msg(!g->t[x].is_virtual || produced[x], "%s: op %s reads %s early", id,
                              o->name, g->t[x].name);
        }
        if (o->out >= 0) {
            ck_assert_msg(!produced[o->out], "%s: %s written twice", id, g->t[o->out].name);
            produced[o->out] = true;
        }
    }
    const cg_tensor *q = by_uid(g, CG_UID_Q), *o = by_uid(g, CG_UID_O), *st = by_uid(g, CG_UID_STATS);
    ck_assert(q && o && st && by_uid(g, CG_UID_K) && by_uid(g, CG_UID_V) && by_uid(g, CG_UID_SCALE));
    ck_assert(!st->is_virtual); /* TE always produces Stats */
    ck_assert(st->dtype == CG_F32);
    ck_assert(by_uid(g, CG_UID_SCALE)->by_value);
    ck_assert(fabsf(by_uid(g, CG_UID_SCALE)->value.f - d->attn_scale) == 0.0f);
    if (g->route == CG_ROUTE_NATIVE) {
        ck_assert_int_eq(g->nops, 1);
        ck_assert_int_eq(g->ops[0].kind, CG_OP_SDPA_FWD);
    } else {
        ck_assert_str_eq(g->ops[0].name, "bmm1");
        ck_assert_str_eq(g->ops[g->nops - 1].name, "bmm2");
        ck_assert_int_eq(g->ops[g->nops - 1].out, fattn__cg_find_uid(g, CG_UID_O));
        /* P, the second matmul's A, is io-typed */
        ck_assert(g->t[g->ops[g->nops - 1].in[0]].dtype == d->io);
    }
    char *dump = fattn__cg_dump(g, true);
    ck_assert_ptr_nonnull(dump);
    ck_assert_ptr_nonnull(strstr(dump, "name=Q"));
    free(dump);
}

/* return_max_logit's graph: composite, the softmax as one SOFTMAX op whose
 * Max output has Stats' dtype, dims, strides and ragged offset; without it
 * no Max and no SOFTMAX op. */
static void check_max(const char *id, const cg_graph *g, const cg_fwd_desc *d)
{
    const cg_tensor *mx = by_uid(g, CG_UID_MAX), *st = by_uid(g, CG_UID_STATS);
    const cg_op *sm = find_op(g, "softmax", 0);
    ck_assert_int_eq(d->max_output, mx != NULL);
    ck_assert_int_eq(d->max_output, sm != NULL);
    if (!d->max_output)
        return;
    ck_assert_msg(g->route == CG_ROUTE_COMPOSITE, "%s: max_logit on the native route", id);
    ck_assert(!find_op(g, "Max", 0) && !find_op(g, "log", 0) && !find_op(g, "div", 0));
    ck_assert(sm->kind == CG_OP_SOFTMAX && sm->in[0] >= 0 && sm->out >= 0);
    ck_assert_int_eq(sm->in[1], d->sink ? fattn__cg_find_uid(g, CG_UID_SINK) : -1);
    ck_assert_int_eq(sm->sdpa[CG_SDPA_STATS], fattn__cg_find_uid(g, CG_UID_STATS));
    ck_assert_int_eq(sm->sdpa[CG_SDPA_MAX], fattn__cg_find_uid(g, CG_UID_MAX));
    ck_assert(g->t[sm->in[0]].is_virtual && g->t[sm->in[0]].dtype == CG_F32);
    ck_assert(g->t[sm->out].dtype == (d->dropout > 0.0f ? CG_F32 : d->io));
    ck_assert(!mx->is_virtual && !mx->by_value && mx->dtype == CG_F32 && mx->role == CG_ROLE_MAX);
    ck_assert_int_eq(mx->ragged, st->ragged);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(mx->dims[i], st->dims[i]);
        ck_assert_int_eq(mx->strides[i], st->strides[i]);
    }
    ck_assert_int_eq(mx->dims[3], 1);
    char *dump = fattn__cg_dump(g, false);
    ck_assert_ptr_nonnull(strstr(dump, "OP"));
    ck_assert_msg(strstr(dump, " SOFTMAX name=softmax") && strstr(dump, "role=max"), "%s", dump);
    free(dump);
}

/* Every case of the CPU matrix: described, or refused as unsupported with a
 * reason (float32 io); return_max_logit with its Max output. */
START_TEST(matrix_describes)
{
    const tcase *c = &tcase_table[_i];
    cg_fwd_desc d;
    cg_graph *g = malloc(sizeof *g);
    fattn_status st = describe(c, &d, g, NULL);
    if (c->dtype == FATTN_DTYPE_FLOAT32) {
        ck_assert_msg(st == FATTN_E_UNSUPPORTED, "%s: %s", c->id, fattn_status_name(st));
    } else {
        ck_assert_msg(st == FATTN_OK, "%s: %s", c->id, fattn_last_error());
        ck_assert_int_eq(d.max_output, c->return_max_logit);
        check_invariants(c->id, g, &d);
        check_max(c->id, g, &d);
    }
    free(g);
    char id[128];
    snprintf(id, sizeof id, "cudnn.construct.%s", c->id);
    fattn_test_mark(id);
}
END_TEST

#define SOFTMAX " Max sub_M exp_sub_M sum log add div"
#define CAUSAL_TL " gen_row_index gen_col_index row_greater_than_col binary_select"
#define PADDING                                                                \
    " gen_row_idx_padding gen_col_idx_padding lt_row_sq_padding lt_col_skv_padding" \
    " and_row_col_padding select_padding"

static void to_bottom_right(fattn_fwd_params *p)
{
    p->attn.mask_type = FATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    p->attn.bottom_right_diagonal = true;
}

/* The window a direct fused_attn_fwd caller passes with a causal mask:
 * TE's C++ is causal from the mask type all the same. */
static void window_none(fattn_fwd_params *p)
{
    p->attn.window_size_left = p->attn.window_size_right = -1;
}

typedef struct seq_row {
    const char *case_id;
    void (*tweak)(fattn_fwd_params *);
    const char *route;
    const char *ops;
} seq_row;

static const seq_row seq_rows[] = {
    {"bwd.causal.bf16", NULL, "composite", "bmm1 attn_scale" CAUSAL_TL SOFTMAX " bmm2"},
    /* sq == skv: TE rewrites bottom-right to top-left */
    {"bwd.causal.bf16", to_bottom_right, "composite", "bmm1 attn_scale" CAUSAL_TL SOFTMAX " bmm2"},
    {"bwd.causal_bottom_right.f16", NULL, "composite",
     "bmm1 attn_scale gen_row_index gen_col_index row_idx_add_skv row_idx_add_skv_sub_sq "
     "row_greater_than_col binary_select" SOFTMAX " bmm2"},
    {"bwd.padding.f16", NULL, "composite", "bmm1 attn_scale" PADDING SOFTMAX " bmm2"},
    {"bwd.padding_causal.f16", NULL, "composite",
     "bmm1 attn_scale" PADDING CAUSAL_TL SOFTMAX " bmm2"},
    /* a causal mask with the window (-1,-1): the same graphs */
    {"bwd.causal.bf16", window_none, "composite", "bmm1 attn_scale" CAUSAL_TL SOFTMAX " bmm2"},
    {"bwd.causal_bottom_right.f16", window_none, "composite",
     "bmm1 attn_scale gen_row_index gen_col_index row_idx_add_skv row_idx_add_skv_sub_sq "
     "row_greater_than_col binary_select" SOFTMAX " bmm2"},
    {"bwd.padding_causal.f16", window_none, "composite",
     "bmm1 attn_scale" PADDING CAUSAL_TL SOFTMAX " bmm2"},
    {"bwd.padding_causal_bottom_right.f16", window_none, "composite",
     "bmm1 attn_scale" PADDING " gen_row_index gen_col_index row_idx_add_skv "
     "row_idx_add_skv_sub_sq row_greater_than_col binary_select" SOFTMAX " bmm2"},
    {"bwd.padding_causal_bottom_right.f16", NULL, "composite",
     "bmm1 attn_scale" PADDING " gen_row_index gen_col_index row_idx_add_skv "
     "row_idx_add_skv_sub_sq row_greater_than_col binary_select" SOFTMAX " bmm2"},
    {"bwd.layout.thd_thd_thd.bf16", NULL, "composite", "bmm1 attn_scale" PADDING SOFTMAX " bmm2"},
    {"bwd.swa.top_left.f16", NULL, "composite",
     "bmm1 attn_scale gen_row_index gen_col_index row_idx_add_right_bound row_greater_than_col "
     "binary_select gen_row_index gen_col_index col+window col+ws>row binary_select" SOFTMAX
     " bmm2"},
    {"bwd.swa.bottom_right.f16", NULL, "composite",
     "bmm1 attn_scale gen_row_index gen_col_index row_idx_add_skv row_idx_add_skv_sub_sq "
     "row_idx_add_right_bound row_greater_than_col binary_select gen_row_index gen_col_index "
     "col+window-skv+sq col+window-skv+sq>row binary_select" SOFTMAX " bmm2"},
    {"bwd.swa.thd.padding_causal_bottom_right.f16", NULL, "composite",
     "bmm1 attn_scale" PADDING " gen_row_index gen_col_index row_idx_add_skv "
     "row_idx_add_skv_sub_sq row_greater_than_col binary_select gen_row_index gen_col_index "
     "col+window col+window-skv col+window-skv+sq col+window-skv+sq>row binary_select" SOFTMAX
     " bmm2"},
    {"bwd.bias.1hss.f16", NULL, "composite", "bmm1 attn_scale bias_add" SOFTMAX " bmm2"},
    {"bwd.alibi.causal.f16", NULL, "composite",
     "bmm1 attn_scale gen_row_idx_alibi gen_col_idx_alibi sub_col_row_alibi mul_slope_alibi "
     "add_alibi" CAUSAL_TL SOFTMAX " bmm2"},
    {"bwd.dropout.p01.f16", NULL, "composite",
     "bmm1 attn_scale" SOFTMAX " rng dropout_mask_mul dropout_scale bmm2"},
    {"bwd.softmax.off_by_one.f16", NULL, "composite",
     "bmm1 attn_scale Max max_sink sub_M exp_sub_M sub_sink exp_sink sum add_sink log add div "
     "bmm2"},
    {"bwd.dqk24_dv40.f16", NULL, "composite", "bmm1 attn_scale" CAUSAL_TL SOFTMAX " bmm2"},
    {"bwd.gqa8.bf16", NULL, "native", "sdpa_fwd"},
    {"fwd.nomask.f16", NULL, "native", "sdpa_fwd"},
    {"fwd.thd.padding_causal.bf16", NULL, "composite",
     "bmm1 attn_scale" PADDING CAUSAL_TL SOFTMAX " bmm2"},
    /* return_max_logit: never native; the softmax is one op (cuDNN >= 9.21) */
    {"bwd.max_logit.f16", NULL, "composite", "bmm1 attn_scale softmax bmm2"},
    {"bwd.max_logit.thd.bf16", NULL, "composite", "bmm1 attn_scale" PADDING " softmax bmm2"},
    {"fwd.max_logit.fully_masked_rows.f16", NULL, "composite",
     "bmm1 attn_scale" PADDING " gen_row_index gen_col_index row_idx_add_skv "
     "row_idx_add_skv_sub_sq row_greater_than_col binary_select softmax bmm2"},
};

START_TEST(op_sequence)
{
    const seq_row *r = &seq_rows[_i];
    const tcase *c = tcase_find(r->case_id);
    ck_assert_msg(c != NULL, "no case %s", r->case_id);
    cg_fwd_desc d;
    cg_graph *g = malloc(sizeof *g);
    ck_assert_msg(describe(c, &d, g, r->tweak) == FATTN_OK, "%s", fattn_last_error());
    char sig[2048];
    signature(g, sig, sizeof sig);
    ck_assert_str_eq(g->route == CG_ROUTE_NATIVE ? "native" : "composite", r->route);
    ck_assert_msg(!strcmp(sig, r->ops), "%s:\n got  %s\n want %s", r->case_id, sig, r->ops);
    check_invariants(r->case_id, g, &d);
    free(g);
}
END_TEST

/* Attribute details of individual options. */
START_TEST(details)
{
    cg_fwd_desc d;
    cg_graph *g = malloc(sizeof *g);

    /* causal, bshd: Q [b,h,s,d] with bshd strides; K transposed; scale 1/sqrt(d) */
    ck_assert_int_eq(describe(tcase_find("bwd.causal.bf16"), &d, g, NULL), FATTN_OK);
    const cg_tensor *q = by_uid(g, CG_UID_Q), *k = by_uid(g, CG_UID_K);
    ck_assert(q->dtype == CG_BF16);
    ck_assert_int_eq(q->dims[0], 2); ck_assert_int_eq(q->dims[1], 2);
    ck_assert_int_eq(q->dims[2], 32); ck_assert_int_eq(q->dims[3], 16);
    ck_assert_int_eq(q->strides[2], 2 * 16); ck_assert_int_eq(q->strides[1], 16);
    ck_assert_int_eq(k->dims[2], 16); ck_assert_int_eq(k->dims[3], 32); /* KT */
    ck_assert_int_eq(k->strides[2], 1); ck_assert_int_eq(k->strides[3], 32);
    const cg_op *sel = find_op(g, "binary_select", 0);
    ck_assert(sel && sel->in[2] >= 0 && isinf(g->t[sel->in[1]].value.f) &&
              g->t[sel->in[1]].value.f < 0);
    const cg_op *gi = find_op(g, "gen_row_index", 0);
    ck_assert(gi->axis == 2 && g->t[gi->out].dtype == CG_I32);
    ck_assert(find_op(g, "row_greater_than_col", 0)->math == CG_BOOL);
    const cg_op *mx = find_op(g, "Max", 0);
    ck_assert(mx->kind == CG_OP_REDUCTION && mx->mode == CG_RED_MAX);
    ck_assert_int_eq(g->t[mx->out].dims[3], 1);
    ck_assert(g->t[find_op(g, "div", 0)->out].dtype == CG_BF16);
    ck_assert(by_uid(g, CG_UID_STATS)->strides[2] == 1);

    /* bottom-right fixed lengths: INT32 scalars skv, sq */
    ck_assert_int_eq(describe(tcase_find("bwd.causal_bottom_right.f16"), &d, g, NULL), FATTN_OK);
    const cg_op *add = find_op(g, "row_idx_add_skv", 0);
    ck_assert(g->t[add->in[1]].by_value && g->t[add->in[1]].dtype == CG_I32 &&
              g->t[add->in[1]].value.i == 40);
    ck_assert_int_eq(g->t[find_op(g, "row_idx_add_skv_sub_sq", 0)->in[1]].value.i, 16);

    /* padding: INT32 [b,1,1,1] lengths, GEMM overrides on both matmuls */
    ck_assert_int_eq(describe(tcase_find("bwd.padding.f16"), &d, g, NULL), FATTN_OK);
    const cg_op *b1 = find_op(g, "bmm1", 0), *b2 = find_op(g, "bmm2", 0);
    ck_assert_int_eq(g->t[b1->m_override].uid, CG_UID_SEQ_Q);
    ck_assert_int_eq(g->t[b1->n_override].uid, CG_UID_SEQ_KV);
    ck_assert_int_eq(g->t[b2->m_override].uid, CG_UID_SEQ_Q);
    ck_assert_int_eq(g->t[b2->k_override].uid, CG_UID_SEQ_KV);
    ck_assert(b1->k_override < 0 && b2->n_override < 0);
    ck_assert(by_uid(g, CG_UID_SEQ_Q)->dtype == CG_I32 && by_uid(g, CG_UID_SEQ_Q)->dims[0] == 3);

    /* THD: ragged offsets on Q, K, V, O, Stats; ragged stats strides */
    ck_assert_int_eq(describe(tcase_find("bwd.layout.thd_thd_thd.bf16"), &d, g, NULL), FATTN_OK);
    int64_t rag[][2] = {{CG_UID_Q, CG_UID_RAG_Q}, {CG_UID_K, CG_UID_RAG_K},
                        {CG_UID_V, CG_UID_RAG_V}, {CG_UID_O, CG_UID_RAG_O},
                        {CG_UID_STATS, CG_UID_RAG_STATS}};
    for (int i = 0; i < 5; i++) {
        const cg_tensor *t = by_uid(g, rag[i][0]);
        ck_assert(t->ragged >= 0 && g->t[t->ragged].uid == rag[i][1]);
        ck_assert_int_eq(g->t[t->ragged].dims[0], 4); /* b + 1 */
    }
    const cg_tensor *st = by_uid(g, CG_UID_STATS);
    ck_assert_int_eq(st->strides[1], 1); ck_assert_int_eq(st->strides[2], 2);
    ck_assert_int_eq(by_uid(g, CG_UID_Q)->dims[2], 24); /* max_seqlen_q */

    /* windows: TE's left + 1 as cuDNN's left bound */
    ck_assert_int_eq(describe(tcase_find("bwd.swa.top_left.f16"), &d, g, NULL), FATTN_OK);
    ck_assert(d.has_left && d.left_bound == 4 && d.has_right && d.right_bound == 2);
    const cg_op *w = find_op(g, "col+window", 0);
    ck_assert(w->axis == 3 && g->t[w->in[1]].value.f == 4.0f);
    ck_assert_int_eq(g->t[find_op(g, "row_idx_add_right_bound", 0)->in[1]].value.i, 2);
    ck_assert_int_eq(describe(tcase_find("bwd.swa.bottom_right.f16"), &d, g, NULL), FATTN_OK);
    ck_assert(g->t[find_op(g, "col+window-skv+sq", 0)->in[1]].value.f == (float)(4 - 40 + 24));

    /* bias dims/strides pass through; dropout RNG and scale */
    ck_assert_int_eq(describe(tcase_find("bwd.bias.1hss.f16"), &d, g, NULL), FATTN_OK);
    const cg_tensor *bias = by_uid(g, CG_UID_BIAS);
    ck_assert(bias && bias->dims[0] == 1 && bias->dims[1] == 2 && bias->dims[2] == 24 &&
              bias->dims[3] == 40 && bias->dtype == CG_F16);
    ck_assert_int_eq(describe(tcase_find("bwd.dropout.p01.f16"), &d, g, NULL), FATTN_OK);
    const cg_op *rng = find_op(g, "rng", 0);
    ck_assert(rng->kind == CG_OP_RNG && rng->bernoulli_p == 1.0 - (double)0.1f);
    ck_assert(g->t[rng->in[0]].uid == CG_UID_SEED && g->t[rng->in[0]].dtype == CG_I64);
    ck_assert(g->t[rng->in[1]].uid == CG_UID_OFFSET);
    ck_assert(g->t[find_op(g, "div", 0)->out].dtype == CG_F32);
    const cg_op *ds = find_op(g, "dropout_scale", 0);
    ck_assert(g->t[ds->out].dtype == CG_F16 && g->t[ds->in[1]].value.f == 1.0f / (1.0f - 0.1f));
    ck_assert(g->t[rng->out].is_virtual);
    ck_assert_int_eq(fattn__cg_find_uid(g, CG_UID_RNG_DUMP), -1);
    /* the test variant writes the keep-mask: same ops, the RNG output a
     * real FLOAT [b,h,sq,skv] tensor in C order; a different cache key */
    char *k_prod = fattn__cg_dump(g, false);
    d.rng_dump = true;
    ck_assert_int_eq(fattn__cg_build_fwd(g, &d), FATTN_OK);
    rng = find_op(g, "rng", 0);
    const cg_tensor *mt = &g->t[rng->out];
    ck_assert(!mt->is_virtual && mt->uid == CG_UID_RNG_DUMP && mt->role == CG_ROLE_RNG_DUMP &&
              mt->dtype == CG_F32);
    ck_assert(mt->dims[0] == d.b && mt->dims[1] == d.hq && mt->dims[2] == d.sq &&
              mt->dims[3] == d.skv);
    ck_assert(mt->strides[3] == 1 && mt->strides[2] == d.skv &&
              mt->strides[1] == d.sq * d.skv && mt->strides[0] == d.hq * d.sq * d.skv);
    char *k_dump = fattn__cg_dump(g, false);
    ck_assert_str_ne(k_prod, k_dump);
    free(k_prod), free(k_dump);

    /* sink: FLOAT [1,h,1,1] */
    ck_assert_int_eq(describe(tcase_find("bwd.softmax.learnable.f16"), &d, g, NULL), FATTN_OK);
    const cg_tensor *sink = by_uid(g, CG_UID_SINK);
    ck_assert(sink && sink->dims[1] == 4 && sink->dtype == CG_F32 && sink->role == CG_ROLE_SINK);

    /* GQA through the native op: K untransposed with hk heads */
    ck_assert_int_eq(describe(tcase_find("bwd.gqa8.bf16"), &d, g, NULL), FATTN_OK);
    ck_assert_int_eq(by_uid(g, CG_UID_K)->dims[1], 2);
    ck_assert_int_eq(by_uid(g, CG_UID_K)->dims[3], 16);
    ck_assert_int_eq(by_uid(g, CG_UID_Q)->dims[1], 16);

    /* inference without Stats (the frontend's virtual-Stats work-around):
     * LOG/ADD stay, Stats becomes virtual */
    ck_assert_int_eq(describe(tcase_find("bwd.causal.f16"), &d, g, NULL), FATTN_OK);
    d.stats_output = false;
    ck_assert_int_eq(fattn__cg_build_fwd(g, &d), FATTN_OK);
    ck_assert(find_op(g, "log", 0) && find_op(g, "add", 0));
    ck_assert(g->t[find_op(g, "add", 0)->out].is_virtual);
    ck_assert_int_eq(fattn__cg_find_uid(g, CG_UID_STATS), -1);

    /* dumps: the cache key ignores by-value values, the full dump does not */
    ck_assert_int_eq(describe(tcase_find("bwd.causal.f16"), &d, g, NULL), FATTN_OK);
    char *k1 = fattn__cg_dump(g, false), *v1 = fattn__cg_dump(g, true);
    d.attn_scale = 0.5f;
    ck_assert_int_eq(fattn__cg_build_fwd(g, &d), FATTN_OK);
    char *k2 = fattn__cg_dump(g, false), *v2 = fattn__cg_dump(g, true);
    ck_assert_str_eq(k1, k2);
    ck_assert_str_ne(v1, v2);
    free(k1), free(k2), free(v1), free(v2);
    free(g);
}
END_TEST

/* Unsupported and invalid parameters. */
START_TEST(refusals)
{
    cg_fwd_desc d;
    cg_graph *g = malloc(sizeof *g);
    ck_assert_int_eq(describe(tcase_find("bwd.nomask.f32"), &d, g, NULL), FATTN_E_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "float32"));
    /* return_max_logit: the support row refuses it below cuDNN 9.21 ... */
    tcase_buffers buf;
    const tcase *ml = tcase_find("bwd.max_logit.f16");
    ck_assert_int_eq(tcase_setup(ml, &buf), FATTN_OK);
    fattn_fwd_params p = tcase_fwd_params(ml, &buf);
    ck_assert_int_eq(gaps_fwd(&p, FATTN_SUPPORT_ENGINE_CUDNN, 91900),
                     FATTN_E_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "rule max_logit_cudnn"));
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), ">= 9.21"));
    ck_assert_int_eq(gaps_fwd(&p, FATTN_SUPPORT_ENGINE_CUDNN, 92002),
                     FATTN_E_UNSUPPORTED);
    ck_assert_int_eq(gaps_fwd(&p, FATTN_SUPPORT_ENGINE_CUDNN, 92100), FATTN_OK);
    ck_assert_int_eq(gaps_fwd(&p, FATTN_SUPPORT_ENGINE_CUDNN, 92801), FATTN_OK);
    ck_assert_int_eq(gaps_fwd(&p, FATTN_SUPPORT_ENGINE_CPU, 91900), FATTN_OK);
    /* the dispatch's query carries max_seqlen_q: a paged cache read by a THD
     * q of one token is refused below 9.28.1, two tokens are not */
    p.return_max_logit = false;
    p.is_training = false;
    p.attn.qkv_layout = FATTN_LAYOUT_PAGED_KV_THD_SBHD_SBHD;
    p.attn.max_seqlen_q = 1;
    ck_assert_int_eq(gaps_fwd(&p, FATTN_SUPPORT_ENGINE_CUDNN, 91900),
                     FATTN_E_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "rule thd_paged_decode_cudnn"));
    ck_assert_int_eq(gaps_fwd(&p, FATTN_SUPPORT_ENGINE_CUDNN, 92801), FATTN_OK);
    p.attn.max_seqlen_q = 2;
    ck_assert_int_eq(gaps_fwd(&p, FATTN_SUPPORT_ENGINE_CUDNN, 91900), FATTN_OK);
    tcase_teardown(&buf);
    /* ... and what the engine asserts of the graph agrees with the row */
    ck_assert_int_eq(describe(ml, &d, g, NULL), FATTN_OK);
    ck_assert(!fattn__cg_fwd_builds_at(&d, 91900));
    ck_assert(!fattn__cg_fwd_builds_at(&d, 92002));
    ck_assert(fattn__cg_fwd_builds_at(&d, 92100));
    ck_assert(fattn__cg_fwd_builds_at(&d, 92801));
    ck_assert_int_eq(describe(tcase_find("bwd.causal.f16"), &d, g, NULL), FATTN_OK);
    ck_assert(fattn__cg_fwd_builds_at(&d, 90000));
    free(g);
}
END_TEST

/* ---- backward ------------------------------------------------------------ */

/* Build the backward description of one training case: the aux pack is made
 * of views with the forward's shapes (no forward runs, no data is read). */
static fattn_status describe_bwd(const tcase *c, cg_bwd_desc *d, cg_graph *g,
                                 void (*tweak)(fattn_bwd_params *))
{
    tcase_buffers buf;
    ck_assert_int_eq(tcase_setup(c, &buf), FATTN_OK);
    fattn_aux_pack aux;
    memset(&aux, 0, sizeof aux);
    int64_t sshape[3] = {2, 2, 1};
    aux.t[aux.n++] = fattn_tensor_view(NULL, FATTN_DTYPE_FLOAT32, 3, sshape);
    aux.t[aux.n++] = buf.rng_state;
    if (c->bias == FATTN_BIAS_POST_SCALE_BIAS)
        aux.t[aux.n++] = buf.bias;
    if (c->softmax != FATTN_SOFTMAX_VANILLA)
        aux.t[aux.n++] = buf.softmax_offset;
    fattn_bwd_params p = tcase_bwd_params(c, &buf);
    p.aux = &aux;
    if (tweak)
        tweak(&p);
    /* as the dispatch does, at a cuDNN past the measured dSoftmaxOffset bug
     * (rule dsink_thd_cudnn, suite support) so that the THD sink graphs are
     * still built and checked here */
    fattn_status st = gaps_bwd(&p, FATTN_SUPPORT_ENGINE_CUDNN, 92000);
    if (st == FATTN_OK)
        st = tdesc_bwd(&p, d);
    if (st == FATTN_OK)
        st = fattn__cg_build_bwd(g, d);
    tcase_teardown(&buf);
    return st;
}

static void check_bwd_invariants(const char *id, const cg_graph *g, const cg_bwd_desc *d)
{
    for (int i = 0; i < g->nt; i++) {
        for (int j = 0; j < i; j++)
            ck_assert_msg(g->t[i].uid != g->t[j].uid, "%s: uid %lld twice", id,
                          (long long)g->t[i].uid);
        const cg_tensor *t = &g->t[i];
        if (!t->is_virtual && !t->by_value)
            ck_assert_msg(t->role != CG_ROLE_NONE, "%s: %s unbound", id, t->name);
        ck_assert_msg(t->ragged < i, "%s: ragged offset of %s created after it", id, t->name);
    }
    bool produced[CG_MAX_TENSORS] = {false};
    for (int i = 0; i < g->nops; i++) {
        const cg_op *o = &g->ops[i];
        for (int k = 0; k < 3; k++) {
            int x = o->in[k];
            if (x >= 0)
                ck_assert_msg(!g->t[x].is_virtual || produced[x], "%s: op %s reads %s early", id,
                              o->name, g->t[x].name);
        }
        if (o->out >= 0) {
            ck_assert_msg(!produced[o->out], "%s: %s written twice", id, g->t[o->out].name);
            produced[o->out] = true;
        }
    }
    /* every output written exactly once; inputs never written */
    int64_t outs[] = {CG_UID_DQ, CG_UID_DK, CG_UID_DV, CG_UID_DSUM};
    for (int i = 0; i < 4; i++) {
        int t = fattn__cg_find_uid(g, outs[i]);
        ck_assert_msg(t >= 0 && produced[t], "%s: uid %lld not produced", id, (long long)outs[i]);
    }
    int64_t ins[] = {CG_UID_Q, CG_UID_K, CG_UID_V, CG_UID_O, CG_UID_DO, CG_UID_STATS};
    for (int i = 0; i < 6; i++) {
        int t = fattn__cg_find_uid(g, ins[i]);
        ck_assert_msg(t >= 0 && !produced[t], "%s: input uid %lld", id, (long long)ins[i]);
    }
    ck_assert_int_eq(g->deterministic, d->deterministic);
    bool direct = (d->deterministic && !d->ordered_dq) || d->dbias;
    ck_assert_int_eq(fattn__cg_find_uid(g, CG_UID_DQ_ACCUM) >= 0, !direct);
    ck_assert_int_eq(fattn__cg_bwd_dq_accum_bytes(d) > 0, !direct);
    if (d->f.ragged_q) /* the frontend's max_total_seq_len_q: TH1 */
        ck_assert_int_eq(fattn__cg_bwd_dsum_bytes(d), d->max_total_q * d->f.hq * 4);
    else
        ck_assert_int_eq(fattn__cg_bwd_dsum_bytes(d), d->f.b * d->f.hq * d->f.sq * 4);
    ck_assert_int_eq(fattn__cg_find_uid(g, CG_UID_DBIAS) >= 0, d->dbias);
    ck_assert_int_eq(fattn__cg_find_uid(g, CG_UID_DSINK) >= 0, d->dsink);
    ck_assert_str_eq(g->ops[0].name, d->f.dropout > 0.0f ? "rng" : "mul_dO_O");
    ck_assert_str_eq(g->ops[g->nops - 1].name, direct ? "matmul_dS_K" : "identity_dQ");
    /* the matmuls' A operands of dV and dK are io-typed transposes */
    const cg_op *pv = find_op(g, "matmul_pT_dO", 0), *dsq = find_op(g, "matmul_dST_Q", 0);
    ck_assert(pv && dsq);
    ck_assert(g->t[pv->in[0]].dtype == d->f.io && g->t[dsq->in[0]].dtype == d->f.io);
    ck_assert_int_eq(g->t[pv->in[0]].strides[2], 1);
    ck_assert_int_eq(find_op(g, "red_dV_head", 0) != NULL, d->f.hq != d->f.hv);
    ck_assert_int_eq(find_op(g, "red_dK_head", 0) != NULL, d->f.hq != d->f.hk);
    char *dump = fattn__cg_dump(g, true);
    ck_assert_ptr_nonnull(dump);
    ck_assert_ptr_nonnull(strstr(dump, "name=dQ"));
    free(dump);
}

START_TEST(bwd_matrix_describes)
{
    const tcase *c = &tcase_table[_i];
    if (!c->training)
        return;
    cg_bwd_desc d;
    cg_graph *g = malloc(sizeof *g);
    fattn_status st = describe_bwd(c, &d, g, NULL);
    /* return_max_logit is the forward's business (Max never reaches the
     * backward) */
    if (c->dtype == FATTN_DTYPE_FLOAT32) {
        ck_assert_msg(st == FATTN_E_UNSUPPORTED, "%s: %s", c->id, fattn_status_name(st));
    } else {
        ck_assert_msg(st == FATTN_OK, "%s: %s", c->id, fattn_last_error());
        check_bwd_invariants(c->id, g, &d);
    }
    free(g);
    char id[128];
    snprintf(id, sizeof id, "cudnn.construct.bwd.%s", c->id);
    fattn_test_mark(id);
}
END_TEST

static void nondet(fattn_bwd_params *p)
{
    p->deterministic = false;
}

static void no_dbias(fattn_bwd_params *p)
{
    p->d_bias = fattn_tensor_empty();
    p->deterministic = false;
}

static void bwd_window_none(fattn_bwd_params *p)
{
    p->attn.window_size_left = p->attn.window_size_right = -1;
}

#define BWD_HEAD "mul_dO_O reduce_dO_o scale_dropout_inv matmul_Q_KT mul_s_attn_scale"
#define BWD_DV " exp_s reshape_p matmul_pT_dO"
#define BWD_DS " matmul_dO_VT sub_dP_softmax_sum mul_dP_exp_s"
#define BWD_TAIL " mul_dS_attn_scale reshape_dS matmul_dST_Q reshape_k matmul_dS_K"
#define BWD_PLAIN BWD_HEAD " sub_s_m" BWD_DV BWD_DS BWD_TAIL
/* reference/cudnn-sdpa-backend.md §4.4, B1-B18 */
#define B1_B18 BWD_PLAIN " identity_dQ"

typedef struct bwd_seq_row {
    const char *case_id;
    void (*tweak)(fattn_bwd_params *);
    const char *ops;
} bwd_seq_row;

static const bwd_seq_row bwd_seq_rows[] = {
    /* B1-B18, PyTorch's graph */
    {"bwd.nomask.f16", nondet, B1_B18},
    /* deterministic: B17 writes dQ, no B18 */
    {"bwd.nomask.f16", NULL, BWD_PLAIN},
    {"bwd.causal.bf16", nondet,
     BWD_HEAD " sub_s_m" CAUSAL_TL BWD_DV BWD_DS BWD_TAIL " identity_dQ"},
    {"bwd.padding.f16", NULL, BWD_HEAD PADDING " sub_s_m" BWD_DV BWD_DS BWD_TAIL},
    {"bwd.causal_bottom_right.f16", NULL,
     BWD_HEAD " sub_s_m gen_row_index gen_col_index row_idx_add_skv row_idx_add_skv_sub_sq "
     "row_greater_than_col binary_select" BWD_DV BWD_DS BWD_TAIL},
    /* a causal mask with the window (-1,-1): the same graphs */
    {"bwd.causal.bf16", bwd_window_none,
     BWD_HEAD " sub_s_m" CAUSAL_TL BWD_DV BWD_DS BWD_TAIL},
    {"bwd.causal_bottom_right.f16", bwd_window_none,
     BWD_HEAD " sub_s_m gen_row_index gen_col_index row_idx_add_skv row_idx_add_skv_sub_sq "
     "row_greater_than_col binary_select" BWD_DV BWD_DS BWD_TAIL},
    {"bwd.swa.top_left.f16", NULL,
     BWD_HEAD " sub_s_m gen_row_index gen_col_index row_idx_add_right_bound "
     "row_greater_than_col binary_select gen_row_index gen_col_index col+window col+ws>row "
     "binary_select" BWD_DV BWD_DS BWD_TAIL},
    {"bwd.gqa8.bf16", nondet,
     BWD_HEAD " sub_s_m" BWD_DV " red_dV_head" BWD_DS
     " mul_dS_attn_scale reshape_dS matmul_dST_Q red_dK_head reshape_k matmul_dS_K identity_dQ"},
    /* dBias: REDUCTION ADD of t3 (forces the direct-dQ graph) */
    {"bwd.bias.1hss.f16", NULL,
     BWD_HEAD " bias_add sub_s_m" BWD_DV BWD_DS " red_dP_dBias" BWD_TAIL},
    {"bwd.bias.1hss.f16", no_dbias,
     BWD_HEAD " bias_add sub_s_m" BWD_DV BWD_DS BWD_TAIL " identity_dQ"},
    {"bwd.alibi.causal.f16", NULL,
     BWD_HEAD " gen_row_idx_alibi gen_col_idx_alibi sub_col_row_alibi mul_slope_alibi "
     "add_alibi sub_s_m" CAUSAL_TL BWD_DV BWD_DS BWD_TAIL},
    /* dropout: the forward's mask regenerated first */
    {"bwd.dropout.p01.f16", NULL,
     "rng " BWD_HEAD " sub_s_m exp_s mul_p_dropout_mask mul_p_dropout_scale reshape_p "
     "matmul_pT_dO matmul_dO_VT dP_dropout_mask sub_dP_softmax_sum mul_dP_exp_s "
     "mul_dS_dropout_scale" BWD_TAIL},
    /* sink: dSink = reduce(exp(sink - Stats) * rowsum(dO*O)) */
    {"bwd.softmax.off_by_one.f16", NULL,
     "mul_dO_O reduce_dO_o sub_sink exp_sink mul_exp_sink_last_output reduce_per_token_grad "
     "scale_dropout_inv matmul_Q_KT mul_s_attn_scale sub_s_m" BWD_DV BWD_DS BWD_TAIL},
    /* THD with GQA (h 2, hg 1) */
    {"bwd.layout.thd_thd_thd.bf16", NULL,
     BWD_HEAD PADDING " sub_s_m" BWD_DV " red_dV_head" BWD_DS
     " mul_dS_attn_scale reshape_dS matmul_dST_Q red_dK_head reshape_k matmul_dS_K"},
};

START_TEST(bwd_op_sequence)
{
    const bwd_seq_row *r = &bwd_seq_rows[_i];
    const tcase *c = tcase_find(r->case_id);
    ck_assert_msg(c != NULL, "no case %s", r->case_id);
    cg_bwd_desc d;
    cg_graph *g = malloc(sizeof *g);
    ck_assert_msg(describe_bwd(c, &d, g, r->tweak) == FATTN_OK, "%s", fattn_last_error());
    char sig[4096];
    signature(g, sig, sizeof sig);
    ck_assert_msg(!strcmp(sig, r->ops), "%s:\n got  %s\n want %s", r->case_id, sig, r->ops);
    check_bwd_invariants(r->case_id, g, &d);
    free(g);
}
END_TEST

/* The ordered-dQ deterministic backward: where cuDNN has the config
 * (9.25+, sm_90, no dBias) it is the accumulator graph with the config
 * pinned, a graph of its own in the plan cache; the native op never serves
 * a deterministic backward. */
static const struct {
    const char *case_id;
    int64_t version;
    int cc;
    bool pinned;
} ordered_rows[] = {
    {"bwd.nomask.f16", 92500, 9, true},      {"bwd.nomask.f16", 91900, 9, false},
    {"bwd.nomask.f16", 92801, 10, false},    {"bwd.bias.1hss.f16", 92801, 9, false},
    {"bwd.causal.bf16", 92801, 9, true},     {"bwd.gqa8.bf16", 92801, 9, true},
    {"bwd.layout.thd_thd_thd.bf16", 92801, 9, true},
    {"bwd.layout.t3hd.bf16", 92801, 9, false}, /* packed THD Q: measured wrong */
    {"bwd.layout.th3d.f16", 92801, 9, false},
};

START_TEST(bwd_ordered_dq)
{
    const char *id = ordered_rows[_i].case_id;
    const tcase *c = tcase_find(id);
    ck_assert_msg(c != NULL, "no case %s", id);
    cg_bwd_desc d, acc;
    cg_graph *g = malloc(sizeof *g), *ga = malloc(sizeof *ga);
    ck_assert_int_eq(describe_bwd(c, &d, g, NULL), FATTN_OK);
    ck_assert(d.deterministic && !fattn__cg_bwd_is_native(&d));
    {
        /* a deterministic backward never shares the non-deterministic one's
         * plan, even where the graphs are alike (dBias: direct dQ on both) */
        cg_key_buf *kd = malloc(sizeof *kd), *kn = malloc(sizeof *kn);
        ck_assert_int_eq(describe_bwd(c, &acc, ga, nondet), FATTN_OK);
        fattn__cg_key(g, kd);
        fattn__cg_key(ga, kn);
        ck_assert(!fattn__cg_key_equal(kd, kn->b, kn->len, kn->hash));
        free(kd);
        free(kn);
    }
    bool pinned = fattn__cg_bwd_ordered_pin(&d, ordered_rows[_i].version, ordered_rows[_i].cc, &d.pin);
    ck_assert_int_eq(pinned, ordered_rows[_i].pinned);
    ck_assert_int_eq(d.pin.on, pinned);
    if (pinned) {
        ck_assert_int_eq(d.pin.engine, 6);
        bool stages4 = false;
        for (int i = 0; i < d.pin.n; i++)
            stages4 |= d.pin.type[i] == 14 && d.pin.value[i] == 4; /* STAGES */
        ck_assert(stages4);
        d.ordered_dq = true;
        ck_assert_int_eq(fattn__cg_build_bwd(g, &d), FATTN_OK);
        check_bwd_invariants(id, g, &d);
        ck_assert(g->pin.on && fattn__cg_find_uid(g, CG_UID_DQ_ACCUM) >= 0);
        ck_assert_int_gt(fattn__cg_bwd_dq_accum_bytes(&d), 0);
        /* the accumulator backward's graph with the pin (and the
         * deterministic mark): its own key, the same one without them, and
         * another pin another key */
        ck_assert_int_eq(describe_bwd(c, &acc, ga, nondet), FATTN_OK);
        cg_key_buf *k1 = malloc(sizeof *k1), *k2 = malloc(sizeof *k2);
        fattn__cg_key(g, k1);
        fattn__cg_key(ga, k2);
        ck_assert(!fattn__cg_key_equal(k1, k2->b, k2->len, k2->hash));
        cg_graph *bare = malloc(sizeof *bare);
        memcpy(bare, g, sizeof *g);
        memset(&bare->pin, 0, sizeof bare->pin);
        bare->deterministic = false;
        fattn__cg_key(bare, k1);
        ck_assert(fattn__cg_key_equal(k1, k2->b, k2->len, k2->hash));
        bare->pin = g->pin;
        bare->pin.value[bare->pin.n - 1]++;
        fattn__cg_key(bare, k2);
        fattn__cg_key(g, k1);
        ck_assert(!fattn__cg_key_equal(k1, k2->b, k2->len, k2->hash));
        free(bare);
        free(k1);
        free(k2);
        char *dump = fattn__cg_dump(g, false);
        ck_assert_ptr_nonnull(strstr(dump, "pin eng6_k40=2_k41=1_k24=2_k38=0_k27=0_k14=4\n"));
        free(dump);
    }
    free(g);
    free(ga);
}
END_TEST

/* Dims, strides, dtypes and UIDs of the backward (reference §4.4). */
START_TEST(bwd_details)
{
    cg_bwd_desc d;
    cg_graph *g = malloc(sizeof *g);

    /* nomask sbhd b2 h2 sq24 skv40 d16, accumulator graph */
    ck_assert_int_eq(describe_bwd(tcase_find("bwd.nomask.f16"), &d, g, nondet), FATTN_OK);
    const cg_op *b1 = find_op(g, "mul_dO_O", 0);
    const cg_tensor *t0 = &g->t[b1->out];
    ck_assert(t0->dtype == CG_F32 && t0->is_virtual);
    ck_assert_int_eq(t0->strides[0], 2 * 24 * 16); ck_assert_int_eq(t0->strides[1], 24 * 16);
    ck_assert_int_eq(t0->strides[2], 2 * 16); /* the frontend's hard-coded strides */
    const cg_tensor *dsum = by_uid(g, CG_UID_DSUM);
    ck_assert(dsum && !dsum->is_virtual && dsum->dtype == CG_F32 && dsum->role == CG_ROLE_DSUM);
    ck_assert_int_eq(dsum->dims[2], 24); ck_assert_int_eq(dsum->dims[3], 1);
    ck_assert_int_eq(dsum->strides[1], 24); ck_assert_int_eq(dsum->strides[2], 1);
    const cg_op *b3 = find_op(g, "scale_dropout_inv", 0);
    ck_assert(g->t[b3->in[1]].by_value && g->t[b3->in[1]].value.f == 1.0f);
    const cg_tensor *acc = by_uid(g, CG_UID_DQ_ACCUM);
    ck_assert(acc && acc->dtype == CG_F32 && !acc->is_virtual);
    ck_assert_int_eq(acc->strides[0], 2 * 24 * 16); ck_assert_int_eq(acc->strides[2], 16);
    ck_assert_int_eq(fattn__cg_bwd_dq_accum_bytes(&d), 2 * 2 * 24 * 16 * 4);
    const cg_tensor *vt = by_uid(g, CG_UID_V);
    ck_assert_int_eq(vt->dims[2], 16); ck_assert_int_eq(vt->dims[3], 40); /* VT */
    const cg_tensor *pT = &g->t[find_op(g, "reshape_p", 0)->out];
    ck_assert(pT->dtype == CG_F16 && pT->dims[2] == 40 && pT->dims[3] == 24);
    ck_assert_int_eq(pT->strides[2], 1); ck_assert_int_eq(pT->strides[3], 40);
    const cg_tensor *kv = &g->t[find_op(g, "reshape_k", 0)->out];
    ck_assert(kv->dtype == CG_F32 && kv->dims[2] == 40 && kv->dims[3] == 16);
    const cg_op *b17 = find_op(g, "matmul_dS_K", 0);
    ck_assert(g->t[b17->in[0]].dtype == CG_F32 && b17->out == fattn__cg_find_uid(g, CG_UID_DQ_ACCUM));
    ck_assert(find_op(g, "identity_dQ", 0)->out == fattn__cg_find_uid(g, CG_UID_DQ));
    ck_assert(find_op(g, "sub_s_m", 0)->in[1] == fattn__cg_find_uid(g, CG_UID_STATS));

    /* padding: the five matmuls' overrides */
    ck_assert_int_eq(describe_bwd(tcase_find("bwd.padding.f16"), &d, g, NULL), FATTN_OK);
    int sq_i = fattn__cg_find_uid(g, CG_UID_SEQ_Q), skv_i = fattn__cg_find_uid(g, CG_UID_SEQ_KV);
    const cg_op *m;
    m = find_op(g, "matmul_Q_KT", 0);
    ck_assert(m->m_override == sq_i && m->n_override == skv_i && m->k_override < 0);
    m = find_op(g, "matmul_pT_dO", 0);
    ck_assert(m->m_override == skv_i && m->k_override == sq_i && m->n_override < 0);
    m = find_op(g, "matmul_dO_VT", 0);
    ck_assert(m->m_override == sq_i && m->n_override == skv_i);
    m = find_op(g, "matmul_dST_Q", 0);
    ck_assert(m->m_override == skv_i && m->k_override == sq_i);
    m = find_op(g, "matmul_dS_K", 0);
    ck_assert(m->m_override == sq_i && m->k_override == skv_i);

    /* GQA: io full-head [b,hq,skv,d] then ADD reductions into hk heads */
    ck_assert_int_eq(describe_bwd(tcase_find("bwd.gqa8.bf16"), &d, g, nondet), FATTN_OK);
    const cg_op *rk = find_op(g, "red_dK_head", 0);
    ck_assert(rk->kind == CG_OP_REDUCTION && rk->mode == CG_RED_ADD);
    ck_assert(g->t[rk->in[0]].dtype == CG_BF16 && g->t[rk->in[0]].dims[1] == 16);
    ck_assert(rk->out == fattn__cg_find_uid(g, CG_UID_DK) && by_uid(g, CG_UID_DK)->dims[1] == 2);

    /* dBias: reduction into the bias' shape and dtype */
    ck_assert_int_eq(describe_bwd(tcase_find("bwd.bias.1hss.f16"), &d, g, nondet), FATTN_OK);
    ck_assert(d.dbias);
    const cg_op *rb = find_op(g, "red_dP_dBias", 0);
    const cg_tensor *db = by_uid(g, CG_UID_DBIAS);
    ck_assert(rb && rb->out == fattn__cg_find_uid(g, CG_UID_DBIAS) && db->dtype == CG_F16);
    ck_assert(db->dims[0] == 1 && db->dims[1] == 2 && db->dims[2] == 24 && db->dims[3] == 40);
    ck_assert_int_eq(fattn__cg_find_uid(g, CG_UID_DQ_ACCUM), -1); /* forced direct dQ */

    /* dropout: keep probability, 1/(1-p) and (1-p) scalars, seed/offset */
    ck_assert_int_eq(describe_bwd(tcase_find("bwd.dropout.p01.f16"), &d, g, NULL), FATTN_OK);
    const cg_op *rng = find_op(g, "rng", 0);
    ck_assert(rng->bernoulli_p == 1.0 - (double)0.1f && g->t[rng->in[0]].uid == CG_UID_SEED);
    ck_assert(g->t[find_op(g, "scale_dropout_inv", 0)->in[1]].value.f == 1.0f - 0.1f);
    ck_assert(g->t[find_op(g, "mul_p_dropout_scale", 0)->in[1]].value.f == 1.0f / (1.0f - 0.1f));

    /* sink: dSink [1,h,1,1] FLOAT */
    ck_assert_int_eq(describe_bwd(tcase_find("bwd.softmax.learnable.f16"), &d, g, NULL),
                     FATTN_OK);
    const cg_tensor *dsink = by_uid(g, CG_UID_DSINK);
    ck_assert(dsink && dsink->dtype == CG_F32 && dsink->dims[1] == 4 && dsink->dims[2] == 1);
    ck_assert(find_op(g, "reduce_per_token_grad", 0)->out == fattn__cg_find_uid(g, CG_UID_DSINK));

    /* THD: ragged offsets on every token tensor incl. dO, dQ, dK, dV */
    ck_assert_int_eq(describe_bwd(tcase_find("bwd.layout.thd_thd_thd.bf16"), &d, g, NULL),
                     FATTN_OK);
    int64_t rag[][2] = {{CG_UID_Q, CG_UID_RAG_Q},   {CG_UID_K, CG_UID_RAG_K},
                        {CG_UID_V, CG_UID_RAG_V},   {CG_UID_O, CG_UID_RAG_O},
                        {CG_UID_DO, CG_UID_RAG_DO}, {CG_UID_STATS, CG_UID_RAG_STATS},
                        {CG_UID_DQ, CG_UID_RAG_DQ}, {CG_UID_DK, CG_UID_RAG_DK},
                        {CG_UID_DV, CG_UID_RAG_DV}};
    for (int i = 0; i < 9; i++) {
        const cg_tensor *t = by_uid(g, rag[i][0]);
        ck_assert(t->ragged >= 0 && g->t[t->ragged].uid == rag[i][1]);
    }
    /* ragged Dsum with Stats' strides and offsets (max_total_seq_len_q) */
    const cg_tensor *rsum = by_uid(g, CG_UID_DSUM);
    ck_assert(rsum->ragged >= 0 && g->t[rsum->ragged].uid == CG_UID_RAG_STATS);
    ck_assert_int_eq(rsum->strides[2], 2); ck_assert_int_eq(rsum->strides[1], 1);
    ck_assert(d.max_total_q > 0 && d.max_total_q <= 24 * 3); /* THD Q tokens */
    ck_assert_int_eq(describe_bwd(tcase_find("bwd.layout.thd_thd_thd.bf16"), &d, g, nondet),
                     FATTN_OK);
    const cg_tensor *racc = by_uid(g, CG_UID_DQ_ACCUM);
    ck_assert(racc->ragged >= 0 && g->t[racc->ragged].uid == CG_UID_RAG_DQ);
    ck_assert_int_eq(racc->strides[2], by_uid(g, CG_UID_DQ)->strides[2]);
    ck_assert_int_eq(fattn__cg_bwd_dq_accum_bytes(&d), d.max_total_q * racc->strides[2] * 4);
    free(g);
}
END_TEST

#if FATTN_HAVE_CUDNN
/* The uid of the tensor a finalized descriptor of p holds under `attr`, read
 * back from cuDNN: only the SOFTMAX op answers the softmax attributes, so
 * the one descriptor that does is it. -1 when none does. An unset optional
 * attribute (or one set on no descriptor) shows here, not at finalize: the
 * operation graph finalizes with an orphan Max tensor. */
static int64_t lowered_uid(const cudnn_api *api, const cudnn_plan *p,
                           cudnnBackendAttributeName_t attr)
{
    int64_t uid = -1;
    for (int i = 0; i < p->ndescs && uid < 0; i++) {
        cudnnBackendDescriptor_t t = NULL;
        ck_assert_int_eq(api->BackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t),
                         CUDNN_STATUS_SUCCESS);
        int64_t n = 0;
        if (api->BackendGetAttribute(p->descs[i], attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                     &t) == CUDNN_STATUS_SUCCESS && n == 1) {
            /* Measured on cuDNN 9.28: the copy answers NOT_INITIALIZED until
             * a finalize call (which itself reports BAD_PARAM); an attribute
             * never set comes back as one element that stays so. */
            (void)api->BackendFinalize(t);
            if (api->BackendGetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1,
                                         &n, &uid) != CUDNN_STATUS_SUCCESS)
                uid = -1;
        }
        api->BackendDestroyDescriptor(t);
    }
    return uid;
}

/* Lowering to backend descriptors without a GPU: every tensor and op
 * descriptor and the operation graph finalize. */
START_TEST(lowering_finalizes)
{
    const tcase *c = &tcase_table[_i];
    if (c->dtype == FATTN_DTYPE_FLOAT32)
        return;
    const cudnn_api *api = fattn__cudnn_api_load(false);
    ck_assert_msg(api != NULL, "%s", fattn_last_error());
    cg_fwd_desc d;
    cg_graph *g = malloc(sizeof *g);
    ck_assert_int_eq(describe(c, &d, g, NULL), FATTN_OK);
    /* Max needs the SOFTMAX op: below 9.21 the engine refuses before lowering */
    int64_t ver = (int64_t)api->GetVersion();
    bool builds = fattn__cg_fwd_builds_at(&d, ver);
    ck_assert(builds == !(d.max_output && ver < 92100));
    if (!builds) {
        free(g);
        return;
    }
    cudnn_plan *p = NULL;
    fattn_status st = fattn__cudnn_plan_build(api, NULL, g, &p);
    ck_assert_msg(st == FATTN_OK, "%s: %s", c->id, fattn_last_error());
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(p->op_graph);
    ck_assert_ptr_null(p->plan);
    if (d.max_output) { /* the SOFTMAX op's operands, as cuDNN holds them */
        ck_assert_int_eq(lowered_uid(api, p, CUDNN_ATTR_OPERATION_SOFTMAX_MAX_DESC), CG_UID_MAX);
        ck_assert_int_eq(lowered_uid(api, p, CUDNN_ATTR_OPERATION_SOFTMAX_STATS_DESC),
                         CG_UID_STATS);
        int64_t x = g->t[find_op(g, "softmax", 0)->in[0]].uid;
        ck_assert_int_eq(lowered_uid(api, p, CUDNN_ATTR_OPERATION_SOFTMAX_XDESC), x);
        int64_t y = g->t[find_op(g, "softmax", 0)->out].uid;
        ck_assert_int_eq(lowered_uid(api, p, CUDNN_ATTR_OPERATION_SOFTMAX_YDESC), y);
        ck_assert_int_eq(lowered_uid(api, p, CUDNN_ATTR_OPERATION_SOFTMAX_SINK_DESC),
                         d.sink ? CG_UID_SINK : -1);
    }
    fattn__cudnn_plan_free(p);
    if (d.dropout > 0.0f) { /* the keep-mask variant finalizes too */
        d.rng_dump = true;
        ck_assert_int_eq(fattn__cg_build_fwd(g, &d), FATTN_OK);
        p = NULL;
        st = fattn__cudnn_plan_build(api, NULL, g, &p);
        ck_assert_msg(st == FATTN_OK, "%s (keep-mask variant): %s", c->id, fattn_last_error());
        fattn__cudnn_plan_free(p);
    }
    free(g);
    char id[128];
    snprintf(id, sizeof id, "cudnn.lower.%s", c->id);
    fattn_test_mark(id);
}
END_TEST
#endif

#if FATTN_HAVE_CUDNN
/* The backward graphs, both dQ variants, finalize up to the operation graph. */
START_TEST(bwd_lowering_finalizes)
{
    const tcase *c = &tcase_table[_i];
    if (!c->training || c->dtype == FATTN_DTYPE_FLOAT32)
        return;
    const cudnn_api *api = fattn__cudnn_api_load(false);
    ck_assert_msg(api != NULL, "%s", fattn_last_error());
    cg_bwd_desc d;
    cg_graph *g = malloc(sizeof *g);
    for (int det = 0; det < 2; det++) {
        ck_assert_int_eq(describe_bwd(c, &d, g, det ? NULL : nondet), FATTN_OK);
        cudnn_plan *p = NULL;
        fattn_status st = fattn__cudnn_plan_build(api, NULL, g, &p);
        ck_assert_msg(st == FATTN_OK, "%s (%s): %s", c->id, det ? "deterministic" : "accum",
                      fattn_last_error());
        ck_assert_ptr_nonnull(p->op_graph);
        fattn__cudnn_plan_free(p);
        /* the native SDPA_BWD op where it takes the case */
        if (!fattn__cg_bwd_is_native(&d))
            continue;
        ck_assert(!det);
        d.native = true;
        ck_assert_int_eq(fattn__cg_build_bwd(g, &d), FATTN_OK);
        ck_assert_int_eq(g->nops, 1);
        ck_assert_int_eq(g->ops[0].kind, CG_OP_SDPA_BWD);
        ck_assert_int_eq(g->route, CG_ROUTE_NATIVE);
        ck_assert_int_eq(fattn__cg_bwd_dsum_bytes(&d) + fattn__cg_bwd_dq_accum_bytes(&d), 0);
        for (int i = 0; i < CG_SDPA_MAX; i++) /* every operand, each a tensor of the graph */
            ck_assert(g->ops[0].sdpa[i] >= 0 && g->ops[0].sdpa[i] < g->nt);
        ck_assert_int_eq(g->ops[0].sdpa[CG_SDPA_MAX], -1); /* the SOFTMAX op's slot */
        char *dump = fattn__cg_dump(g, false);
        ck_assert_ptr_nonnull(strstr(dump, "SDPA_BWD"));
        free(dump);
        /* cuDNN 9.19's operation graph refuses the op (measured), 9.26's takes it */
        if (api->GetVersion() < 92600)
            continue;
        st = fattn__cudnn_plan_build(api, NULL, g, &p);
        ck_assert_msg(st == FATTN_OK, "%s (native): %s", c->id, fattn_last_error());
        fattn__cudnn_plan_free(p);
    }
    free(g);
    char id[128];
    snprintf(id, sizeof id, "cudnn.lower.bwd.%s", c->id);
    fattn_test_mark(id);
}
END_TEST
#endif

#if FATTN_HAVE_CUDNN
/* Engine tags compared by the plan store: knobs at -1 dropped, nothing else. */
static const struct {
    const char *tag, *canonical;
} tag_rows[] = {
    {"eng6_k24=26", "eng6_k24=26"},
    {"eng6_k14=-1_k24=26", "eng6_k24=26"},
    {"eng6_k24=26_k14=-1", "eng6_k24=26"},
    {"eng2_k14=-1_k15=-1", "eng2"},
    {"eng2_k14=-10_k24=7", "eng2_k14=-10_k24=7"},
    {"eng2_k14=-1x", "eng2_k14=-1x"},
    {"eng9", "eng9"},
    {"", ""},
};

START_TEST(tag_canonical)
{
    char out[96];
    fattn__cudnn_tag_canonical(tag_rows[_i].tag, strlen(tag_rows[_i].tag), out, sizeof out);
    ck_assert_str_eq(out, tag_rows[_i].canonical);
}
END_TEST
#endif

START_TEST(cudnn_required_but_missing)
{
    ck_abort_msg("FATTN_REQUIRE_CUDNN=1 but libcudnn.so.9 cannot be loaded: %s",
                 fattn_last_error());
}
END_TEST

/* ---- the plan cache's binary key (fattn__cg_key) --------------------------------- */

/* Each row changes one field of a graph, alone; the key must change. The
 * tensor rows change tensor 1 (Q's neighbour, a user tensor), the op rows
 * op 0: the key holds every field whatever the kind, so any op will do. */
typedef enum {
    KF_ROUTE, KF_NT, KF_NOPS,
    KF_T_UID, KF_T_DTYPE, KF_T_DIM0, KF_T_DIM1, KF_T_DIM2, KF_T_DIM3, KF_T_STRIDE0,
    KF_T_STRIDE1, KF_T_STRIDE2, KF_T_STRIDE3, KF_T_VIRTUAL, KF_T_BY_VALUE, KF_T_RAGGED,
    KF_T_ROLE,
    KF_O_KIND, KF_O_MODE, KF_O_MATH, KF_O_AXIS, KF_O_IN0, KF_O_IN1, KF_O_IN2, KF_O_OUT,
    KF_O_M_OVERRIDE, KF_O_N_OVERRIDE, KF_O_K_OVERRIDE, KF_O_BERNOULLI_P, KF_O_SDPA0,
    KF_O_SDPA1, KF_O_SDPA2, KF_O_SDPA3, KF_O_SDPA4, KF_O_SDPA5, KF_O_SDPA6, KF_O_SDPA7,
    KF_O_SDPA8, KF_O_SDPA9, KF_O_SDPA10,
    KF_DETERMINISTIC, KF_PIN_ON, KF_PIN_ENGINE, KF_PIN_N, KF_PIN_TYPE0, KF_PIN_VALUE0,
    KF_COUNT
} key_field;

static const char *const key_field_names[KF_COUNT] = {
    "route", "nt", "nops",
    "t.uid", "t.dtype", "t.dims[0]", "t.dims[1]", "t.dims[2]", "t.dims[3]", "t.strides[0]",
    "t.strides[1]", "t.strides[2]", "t.strides[3]", "t.is_virtual", "t.by_value", "t.ragged",
    "t.role",
    "op.kind", "op.mode", "op.math", "op.axis", "op.in[0]", "op.in[1]", "op.in[2]", "op.out",
    "op.m_override", "op.n_override", "op.k_override", "op.bernoulli_p", "op.sdpa[0]",
    "op.sdpa[1]", "op.sdpa[2]", "op.sdpa[3]", "op.sdpa[4]", "op.sdpa[5]", "op.sdpa[6]",
    "op.sdpa[7]", "op.sdpa[8]", "op.sdpa[9]", "op.sdpa[10]",
    "deterministic", "pin.on", "pin.engine", "pin.n", "pin.type[0]", "pin.value[0]",
};

static void key_mutate(cg_graph *g, key_field f)
{
    cg_tensor *t = &g->t[1];
    cg_op *o = &g->ops[0];
    switch (f) {
    case KF_ROUTE: g->route = g->route == CG_ROUTE_NATIVE ? CG_ROUTE_COMPOSITE : CG_ROUTE_NATIVE; break;
    case KF_NT: g->nt--; break;
    case KF_NOPS: g->nops--; break;
    case KF_T_UID: t->uid += 1000; break;
    case KF_T_DTYPE: t->dtype = t->dtype == CG_F16 ? CG_BF16 : CG_F16; break;
    case KF_T_DIM0: case KF_T_DIM1: case KF_T_DIM2: case KF_T_DIM3:
        t->dims[f - KF_T_DIM0]++;
        break;
    case KF_T_STRIDE0: case KF_T_STRIDE1: case KF_T_STRIDE2: case KF_T_STRIDE3:
        t->strides[f - KF_T_STRIDE0]++;
        break;
    case KF_T_VIRTUAL: t->is_virtual = !t->is_virtual; break;
    case KF_T_BY_VALUE: t->by_value = !t->by_value; break;
    case KF_T_RAGGED: t->ragged = t->ragged >= 0 ? -1 : 0; break;
    case KF_T_ROLE: t->role = t->role == CG_ROLE_K ? CG_ROLE_V : CG_ROLE_K; break;
    case KF_O_KIND: o->kind = o->kind == CG_OP_MATMUL ? CG_OP_POINTWISE : CG_OP_MATMUL; break;
    case KF_O_MODE: o->mode++; break;
    case KF_O_MATH: o->math = o->math == CG_F32 ? CG_BF16 : CG_F32; break;
    case KF_O_AXIS: o->axis++; break;
    case KF_O_IN0: case KF_O_IN1: case KF_O_IN2: o->in[f - KF_O_IN0]++; break;
    case KF_O_OUT: o->out++; break;
    case KF_O_M_OVERRIDE: o->m_override++; break;
    case KF_O_N_OVERRIDE: o->n_override++; break;
    case KF_O_K_OVERRIDE: o->k_override++; break;
    case KF_O_BERNOULLI_P: o->bernoulli_p = o->bernoulli_p == 0.5 ? 0.25 : 0.5; break;
    case KF_O_SDPA0: case KF_O_SDPA1: case KF_O_SDPA2: case KF_O_SDPA3: case KF_O_SDPA4:
    case KF_O_SDPA5: case KF_O_SDPA6: case KF_O_SDPA7: case KF_O_SDPA8: case KF_O_SDPA9:
    case KF_O_SDPA10:
        o->sdpa[f - KF_O_SDPA0]++;
        break;
    case KF_DETERMINISTIC: g->deterministic = !g->deterministic; break;
    case KF_PIN_ON: g->pin.on = !g->pin.on; break;
    case KF_PIN_ENGINE: g->pin.engine++; break;
    case KF_PIN_N: g->pin.n--; break;
    case KF_PIN_TYPE0: g->pin.type[0]++; break;
    case KF_PIN_VALUE0: g->pin.value[0]++; break;
    case KF_COUNT: break;
    }
}

static const tcase *first_case(bool want_native)
{
    for (int i = 0; i < tcase_count; i++) {
        const tcase *c = &tcase_table[i];
        if (c->dtype == FATTN_DTYPE_FLOAT32 || c->return_max_logit)
            continue;
        cg_fwd_desc d;
        cg_graph *g = malloc(sizeof *g);
        bool ok = describe(c, &d, g, NULL) == FATTN_OK &&
                  (g->route == CG_ROUTE_NATIVE) == want_native;
        free(g);
        if (ok)
            return c;
    }
    return NULL;
}

/* Every field alone changes the key, on a composite and on a native graph. */
START_TEST(key_each_field)
{
    for (int native = 0; native < 2; native++) {
        const tcase *c = first_case(native);
        ck_assert_msg(c, "no %s case in the matrix", native ? "native" : "composite");
        cg_fwd_desc d;
        cg_graph *g = malloc(sizeof *g), *m = malloc(sizeof *m);
        cg_key_buf *k0 = malloc(sizeof *k0), *k1 = malloc(sizeof *k1);
        ck_assert_int_eq(describe(c, &d, g, NULL), FATTN_OK);
        /* a pinned config (any graph may carry one), so that its fields count */
        g->pin = (cg_pin){.on = true, .engine = 6, .n = 2, .type = {24, 14}, .value = {2, 4}};
        fattn__cg_key(g, k0);
        memcpy(m, g, sizeof *g);
        key_mutate(m, (key_field)_i);
        fattn__cg_key(m, k1);
        ck_assert_msg(!fattn__cg_key_equal(k1, k0->b, k0->len, k0->hash), "%s (%s graph of %s): the "
                      "key did not change", key_field_names[_i], native ? "native" : "composite",
                      c->id);
        /* and the same graph gives the same key */
        fattn__cg_key(g, k1);
        ck_assert(fattn__cg_key_equal(k1, k0->b, k0->len, k0->hash));
        free(g);
        free(m);
        free(k0);
        free(k1);
    }
}
END_TEST

/* What the key leaves out on purpose: names (no descriptor reads them) and
 * by-value scalars' values (read at execution, as the dump without values
 * leaves them out). */
START_TEST(key_ignores_names_and_values)
{
    const tcase *c = first_case(false);
    cg_fwd_desc d;
    cg_graph *g = malloc(sizeof *g);
    cg_key_buf *k0 = malloc(sizeof *k0), *k1 = malloc(sizeof *k1);
    ck_assert_int_eq(describe(c, &d, g, NULL), FATTN_OK);
    fattn__cg_key(g, k0);
    int s = fattn__cg_find_uid(g, CG_UID_SCALE);
    ck_assert_int_ge(s, 0);
    g->t[s].value.f *= 2.0f;
    snprintf(g->t[0].name, sizeof g->t[0].name, "renamed");
    snprintf(g->ops[0].name, sizeof g->ops[0].name, "renamed");
    fattn__cg_key(g, k1);
    ck_assert(fattn__cg_key_equal(k1, k0->b, k0->len, k0->hash));
    free(g);
    free(k0);
    free(k1);
}
END_TEST

/* Over the whole matrix, forward and backward graphs: two graphs have the
 * same key exactly when they have the same text dump (the key the cache
 * had before), so the binary key shares a plan neither more nor less. */
START_TEST(key_matches_dump_over_matrix)
{
    int cap = 2 * tcase_count, n = 0;
    char **dumps = calloc((size_t)cap, sizeof *dumps);
    cg_key_buf **keys = calloc((size_t)cap, sizeof *keys);
    cg_graph *g = malloc(sizeof *g);
    for (int i = 0; i < tcase_count; i++)
        for (int bwd = 0; bwd < 2; bwd++) {
            const tcase *c = &tcase_table[i];
            fattn_status st;
            if (bwd) {
                cg_bwd_desc d;
                st = c->training ? describe_bwd(c, &d, g, NULL) : FATTN_E_UNSUPPORTED;
            } else {
                cg_fwd_desc d;
                st = describe(c, &d, g, NULL);
            }
            if (st != FATTN_OK)
                continue;
            dumps[n] = fattn__cg_dump(g, false);
            keys[n] = malloc(sizeof *keys[n]);
            ck_assert(dumps[n] && keys[n]);
            fattn__cg_key(g, keys[n]);
            n++;
        }
    ck_assert_int_gt(n, 20);
    int same = 0;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            bool dump_eq = !strcmp(dumps[a], dumps[b]);
            bool key_eq = fattn__cg_key_equal(keys[a], keys[b]->b, keys[b]->len, keys[b]->hash);
            ck_assert_msg(dump_eq == key_eq, "graphs %d and %d: dumps %s, keys %s", a, b,
                          dump_eq ? "equal" : "differ", key_eq ? "equal" : "differ");
            same += dump_eq;
        }
    /* the matrix has graphs that share a plan: the equal side is exercised */
    ck_assert_int_gt(same, 0);
    for (int i = 0; i < n; i++) {
        free(dumps[i]);
        free(keys[i]);
    }
    free(dumps);
    free(keys);
    free(g);
}
END_TEST

static void list_ids(void)
{
    for (int i = 0; i < tcase_count; i++)
        printf("cudnn.construct.%s\n", tcase_table[i].id);
    for (int i = 0; i < tcase_count; i++)
        if (tcase_table[i].training)
            printf("cudnn.construct.bwd.%s\n", tcase_table[i].id);
}

static Suite *make_suite(void)
{
    fattn_test_cudnn_libraries();
    Suite *s = suite_create("cudnn-construct");
    TCase *tc = tcase_create("construct");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, matrix_describes, 0, tcase_count);
    tcase_add_loop_test(tc, op_sequence, 0, (int)(sizeof seq_rows / sizeof seq_rows[0]));
    tcase_add_test(tc, details);
    tcase_add_test(tc, refusals);
    tcase_add_loop_test(tc, bwd_matrix_describes, 0, tcase_count);
    tcase_add_loop_test(tc, bwd_op_sequence, 0,
                        (int)(sizeof bwd_seq_rows / sizeof bwd_seq_rows[0]));
    tcase_add_test(tc, bwd_details);
    tcase_add_loop_test(tc, bwd_ordered_dq, 0,
                        (int)(sizeof ordered_rows / sizeof ordered_rows[0]));
    tcase_add_loop_test(tc, key_each_field, 0, KF_COUNT);
    tcase_add_test(tc, key_ignores_names_and_values);
    tcase_add_test(tc, key_matches_dump_over_matrix);
#if FATTN_HAVE_CUDNN
    tcase_add_loop_test(tc, tag_canonical, 0, (int)(sizeof tag_rows / sizeof tag_rows[0]));
#endif
    suite_add_tcase(s, tc);

    /* The lowering TCase exists only when it gets tests: an unused TCase is
     * never freed by Check and LeakSanitizer would fail every forked test. */
    const char *req = getenv("FATTN_REQUIRE_CUDNN");
    bool required = req && !strcmp(req, "1");
    bool loadable = fattn_cudnn_library_loadable();
    TCase *tl = NULL;
    if (loadable || required) {
        tl = tcase_create("lowering");
        tcase_set_timeout(tl, FATTN_TEST_TIMEOUT_SHORT);
    }
    if (loadable) {
#if FATTN_HAVE_CUDNN
        tcase_add_loop_test(tl, lowering_finalizes, 0, tcase_count);
        tcase_add_loop_test(tl, bwd_lowering_finalizes, 0, tcase_count);
#endif
        suite_add_tcase(s, tl);
    } else if (required) {
        tcase_add_test(tl, cudnn_required_but_missing);
        suite_add_tcase(s, tl);
    }
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
