/* Suite "cpu_engine": the CPU engine against the float64 oracle, case by case
 * over tests/cases.c.
 *
 * For every case: run the engine (two threads; forward with TE's two-call
 * protocol, then backward when the case trains), run the oracle on the same
 * inputs, and check
 *   - the aux pack the engine built (entries, shapes, aliasing of the inputs);
 *   - every output on its defined region (engine.h) against the oracle with
 *     |engine - oracle| <= atol + rtol * |oracle|, tolerances from the one
 *     table (oracle_check.c); defined values finite except Stats/Max of rows with no
 *     kept key, which must be exactly the oracle's -inf;
 *   - outside the defined regions, the 0xFF poison untouched (padded rows of
 *     bshd/sbhd, THD gap tokens, trailing THD tokens);
 *   - the inputs unchanged.
 * The backward is compared with an oracle backward *given the engine's own
 * O and Stats* (oracle_backward saved = true), which is what numerics.md
 * defines the backward as: a function of (q, k, v, O, dO, Stats).
 *
 * FATTN_TEST_REPORT=1 is the measuring mode behind the tolerance table: it
 * prints the worst error of every output of every case (absolute, as a
 * fraction of its allowance, and the atol the rtol share leaves needed) to
 * stderr, and makes tolerance misses non-fatal (poison, finiteness and aux
 * checks stay fatal).
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "cudnn_env.h"
#include "cases.h"
#include "fattn/bridge.h"
#include "fattn/cudnn.h"
#include "fattn/dtype.h"
#include "fattn/support.h"
#include "fattn/te.h"
#include "fattn_test.h"
#include "oracle.h"
#include "oracle_check.h"

/* ------------------------------------------------------------------------ */
/* Comparing one output                                                     */
/* ------------------------------------------------------------------------ */

static bool report_on(void)
{
    const char *r = getenv("FATTN_TEST_REPORT");
    return r && *r && strcmp(r, "0") != 0;
}

/* Check one output: poison, finiteness and infinities always fatal;
 * tolerance misses fatal unless measuring. */
static void check_output(const tcase *c, const tcase_buffers *buf, const check_out *k)
{
    check_report r;
    oracle_check_output(c, buf, k, &r);
    ck_assert_msg(r.fatal == 0, "%s", r.first_fatal);
    ck_assert_msg(r.out_of_tol == 0 || report_on(), "%s", r.first_tol);
    if (report_on())
        fprintf(stderr, "REPORT %s %s %s abs %.3e frac %.3f need_atol %.3e max_ref %.3e\n",
                c->id, fattn_dtype_name(c->dtype), k->name, r.worst_abs, r.worst_frac,
                r.worst_need, r.max_ref);
}

/* ------------------------------------------------------------------------ */
/* The per-case test                                                        */
/* ------------------------------------------------------------------------ */

/* Bytes of every input storage, to prove the engine left them alone. */
typedef struct snapshot {
    void *bytes[8];
    size_t size[8];
    const fattn_tensor *t[8];
    int n;
} snapshot;

static size_t storage_bytes(const fattn_tensor *t)
{
    return (size_t)fattn_tensor_numel(t) * fattn_dtype_size(t->dtype);
}

static void snapshot_take(snapshot *s, const tcase_buffers *buf)
{
    const fattn_tensor *in[] = {&buf->qkv_storage[0], &buf->qkv_storage[1],
                                &buf->qkv_storage[2], &buf->bias,
                                &buf->softmax_offset, &buf->d_o,
                                &buf->cu_q, &buf->rng_state};
    s->n = 0;
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        if (fattn_tensor_is_empty(in[i]))
            continue;
        s->t[s->n] = in[i];
        s->size[s->n] = storage_bytes(in[i]);
        s->bytes[s->n] = malloc(s->size[s->n]);
        ck_assert_ptr_nonnull(s->bytes[s->n]);
        memcpy(s->bytes[s->n], in[i]->data, s->size[s->n]);
        s->n++;
    }
}

static void snapshot_check(snapshot *s, const char *id)
{
    for (int i = 0; i < s->n; i++) {
        ck_assert_msg(memcmp(s->bytes[i], s->t[i]->data, s->size[i]) == 0,
                      "%s: the engine modified input %d", id, i);
        free(s->bytes[i]);
    }
}

static void check_aux(const tcase *c, const tcase_buffers *buf)
{
    const fattn_aux_pack *a = &buf->aux_fwd;
    bool thd = fattn_layout_q_format(c->layout) == FATTN_FORMAT_THD;
    int slot = 0;
    for (int m = 0; m < (c->return_max_logit ? 2 : 1); m++, slot++) {
        const fattn_tensor *st = &a->t[slot];
        ck_assert_int_eq(st->dtype, FATTN_DTYPE_FLOAT32);
        if (thd) {
            ck_assert_int_eq(st->ndim, 3);
            ck_assert_int_eq(st->shape[0], buf->t_q);
            ck_assert_int_eq(st->shape[1], c->h);
            ck_assert_int_eq(st->shape[2], 1);
        } else {
            ck_assert_int_eq(st->ndim, 4);
            ck_assert_int_eq(st->shape[0], c->b);
            ck_assert_int_eq(st->shape[1], c->h);
            ck_assert_int_eq(st->shape[2], c->sq);
            ck_assert_int_eq(st->shape[3], 1);
        }
    }
    ck_assert_msg(a->t[slot].data == buf->rng_state.data,
                  "%s: aux rng_state is not the input", c->id);
    ck_assert_int_eq(a->t[slot].dtype, FATTN_DTYPE_INT64);
    slot++;
    if (c->bias == FATTN_BIAS_POST_SCALE_BIAS) {
        ck_assert_msg(a->t[slot].data == buf->bias.data, "%s: aux bias is not the input",
                      c->id);
        slot++;
    }
    if (c->softmax != FATTN_SOFTMAX_VANILLA) {
        ck_assert_msg(a->t[slot].data == buf->softmax_offset.data,
                      "%s: aux softmax_offset is not the input", c->id);
        slot++;
    }
    ck_assert_int_eq(a->n, slot);
    ck_assert_int_eq(buf->aux_bwd.n, slot - (c->return_max_logit ? 1 : 0));
}

START_TEST(test_case)
{
    const tcase *c = &tcase_table[_i];
    const tolerance *tol = tolerance_for(c->dtype);
    ck_assert_msg(tol != NULL, "%s: no tolerance for dtype", c->id);

    tcase_buffers buf;
    fattn_status st = tcase_setup(c, &buf);
    ck_assert_msg(st == FATTN_OK, "%s: setup: %s", c->id, fattn_last_error());
    fattn_engine *e = NULL;
    ck_assert_int_eq(fattn_engine_init_cpu(&e, &(fattn_cpu_options){.threads = 2}),
                     FATTN_OK);

    snapshot snap;
    snapshot_take(&snap, &buf);
    st = tcase_run(c, &buf, e);
    ck_assert_msg(st == FATTN_OK, "%s: engine: %s (%s)", c->id, fattn_status_name(st),
                  fattn_last_error());
    snapshot_check(&snap, c->id);
    check_aux(c, &buf);

#define TOL(kind) .atol = tol->k[kind].atol, .rtol = tol->k[kind].rtol
    /* Forward. */
    oracle_result r = {0};
    ck_assert_int_eq(oracle_forward(c, &buf, NULL, &r), FATTN_OK);
    check_output(c, &buf, &(check_out){"O", ORACLE_O, &buf.o, r.o, TOL(TOL_O)});
    check_output(c, &buf, &(check_out){"Stats", ORACLE_STATS, &buf.stats, r.stats,
                                       TOL(TOL_STATS)});
    if (c->return_max_logit)
        check_output(c, &buf, &(check_out){"Max", ORACLE_MAX, &buf.max, r.max,
                                           TOL(TOL_STATS)});

    /* Backward, given the engine's O and Stats. */
    if (c->training) {
        ck_assert_int_eq(oracle_backward(c, &buf, NULL, true, &r), FATTN_OK);
        check_output(c, &buf, &(check_out){"dQ", ORACLE_DQ, &buf.dq, r.dq, TOL(TOL_DQK)});
        check_output(c, &buf, &(check_out){"dK", ORACLE_DK, &buf.dk, r.dk, TOL(TOL_DQK)});
        check_output(c, &buf, &(check_out){"dV", ORACLE_DV, &buf.dv, r.dv, TOL(TOL_DV)});
        if (c->bias == FATTN_BIAS_POST_SCALE_BIAS)
            check_output(c, &buf, &(check_out){"dBias", ORACLE_DBIAS, &buf.d_bias,
                                               r.d_bias, TOL(TOL_DBIAS)});
        if (c->softmax != FATTN_SOFTMAX_VANILLA)
            check_output(c, &buf, &(check_out){"dSoftmaxOffset", ORACLE_DOFFSET,
                                               &buf.d_softmax_offset,
                                               r.d_softmax_offset, TOL(TOL_DOFFSET)});
    }

    oracle_result_free(&r);
    fattn_engine_free(e);
    tcase_teardown(&buf);
    fattn_test_mark(c->id);
}
END_TEST

/* The table itself: ids unique and well formed, and every feature present
 * in float16 and in bfloat16. */
START_TEST(test_table)
{
    ck_assert_int_ge(tcase_count, 48);
    for (int i = 0; i < tcase_count; i++) {
        const tcase *c = &tcase_table[i];
        ck_assert_ptr_eq(tcase_find(c->id), c);
        ck_assert(strncmp(c->id, c->training ? "bwd." : "fwd.", 4) == 0);
        int64_t work = (int64_t)c->b * c->h * c->sq * c->skv * (c->d > c->dv ? c->d : c->dv);
        ck_assert_msg(work <= 200000, "%s: %lld > 2e5", c->id, (long long)work);
        if (!c->training)
            ck_assert(c->dropout == 0.0f);
    }
    ck_assert_ptr_null(tcase_find("no.such.case"));
    /* Every layout but the paged ones, in both 16-bit dtypes. */
    for (int l = 0; l < FATTN_LAYOUT_COUNT; l++) {
        if (fattn_layout_is_paged((fattn_qkv_layout)l))
            continue;
        int f16 = 0, bf16 = 0;
        for (int i = 0; i < tcase_count; i++) {
            if ((int)tcase_table[i].layout != l)
                continue;
            f16 += tcase_table[i].dtype == FATTN_DTYPE_FLOAT16;
            bf16 += tcase_table[i].dtype == FATTN_DTYPE_BFLOAT16;
        }
        ck_assert_msg(f16 > 0 && bf16 > 0, "layout %s missing",
                      fattn_layout_name((fattn_qkv_layout)l));
    }
    for (int m = 0; m <= FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT; m++) {
        int f16 = 0, bf16 = 0;
        for (int i = 0; i < tcase_count; i++) {
            if ((int)tcase_table[i].mask != m)
                continue;
            f16 += tcase_table[i].dtype == FATTN_DTYPE_FLOAT16;
            bf16 += tcase_table[i].dtype == FATTN_DTYPE_BFLOAT16;
        }
        ck_assert_msg(f16 > 0 && bf16 > 0, "mask %d missing", m);
    }
}
END_TEST

/* TE's slot order for every (bias, softmax, max_logit): [Stats, (Max),
 * rng_state, (Bias), (SoftmaxOffset)], Max absent from the backward's. */
START_TEST(test_aux_layout)
{
    const fattn_bias_type biases[] = {FATTN_BIAS_NO_BIAS, FATTN_BIAS_PRE_SCALE_BIAS,
                                      FATTN_BIAS_POST_SCALE_BIAS, FATTN_BIAS_ALIBI};
    const fattn_softmax_type softmaxes[] = {FATTN_SOFTMAX_VANILLA, FATTN_SOFTMAX_OFF_BY_ONE,
                                            FATTN_SOFTMAX_LEARNABLE};
    for (int bi = 0; bi < 4; bi++)
        for (int si = 0; si < 3; si++)
            for (int ml = 0; ml < 2; ml++) {
                bool bias = biases[bi] == FATTN_BIAS_PRE_SCALE_BIAS ||
                            biases[bi] == FATTN_BIAS_POST_SCALE_BIAS;
                bool sink = softmaxes[si] != FATTN_SOFTMAX_VANILLA;
                fattn_aux_layout f = fattn_aux_layout_fwd(biases[bi], softmaxes[si], ml);
                int k = 0;
                ck_assert_int_eq(f.stats, k++);
                ck_assert_int_eq(f.max, ml ? k++ : -1);
                ck_assert_int_eq(f.rng_state, k++);
                ck_assert_int_eq(f.bias, bias ? k++ : -1);
                ck_assert_int_eq(f.softmax_offset, sink ? k++ : -1);
                ck_assert_int_eq(f.n, k);
                ck_assert_int_le(f.n, FATTN_AUX_MAX);
                fattn_aux_layout b = fattn_aux_layout_bwd(biases[bi], softmaxes[si]);
                ck_assert_int_eq(b.n, f.n - (ml ? 1 : 0));
                ck_assert_int_eq(b.max, -1);
                ck_assert_int_eq(b.stats, 0);
                ck_assert_int_eq(b.rng_state, 1);
                ck_assert_int_eq(b.bias, bias ? 2 : -1);
                ck_assert_int_eq(b.softmax_offset, sink ? 2 + bias : -1);
            }
}
END_TEST

/* The registry opens engines by name; the CPU engine answers no query and
 * reports its platform key. */
START_TEST(test_registry)
{
    ck_assert(fattn_engine_kind_known("cpu"));
    ck_assert(fattn_engine_kind_known("cudnn"));
    ck_assert(!fattn_engine_kind_known("tpu"));
    ck_assert(!fattn_engine_kind_known(NULL));
    /* whether a kind may run on a device: its library, asked without a device */
    bool loads = fattn_cudnn_library_loadable();
    ck_assert(!fattn_engine_kind_may_use_device("cpu"));
    ck_assert(!fattn_engine_kind_may_use_device("tpu"));
    ck_assert(fattn_engine_kind_may_use_device("cudnn") == loads);
    ck_assert(fattn_engine_kind_may_use_device("auto") == loads);
    ck_assert(fattn_engine_kind_may_use_device(NULL) == loads);
    fattn_engine *e = NULL;
    ck_assert_int_eq(fattn_engine_open("tpu", NULL, &e), FATTN_E_INVALID_ARG);
    ck_assert_ptr_null(e);
    ck_assert_int_eq(fattn_engine_open("cpu", &(fattn_engine_options){.threads = 1}, &e),
                     FATTN_OK);
    ck_assert_str_eq(fattn_engine_name(e), "cpu");
    ck_assert_uint_eq(fattn_engine_support_bit(e), FATTN_SUPPORT_ENGINE_CPU);
    for (int q = FATTN_ENGINE_Q_SUPPORT_RULES_CUDNN; q <= FATTN_ENGINE_Q_FORCED_DETERMINISTIC_BWD;
         q++)
        ck_assert(!fattn_engine_supports(e, (fattn_engine_query)q));
    fattn_engine_report r = fattn_engine_last_report(e);
    ck_assert_str_eq(r.engine, "cpu");
    char key[32];
    snprintf(key, sizeof key, "cpu-math-%d", FATTN_CPU_MATH_VERSION);
    ck_assert_str_eq(r.platform, key);
    ck_assert_str_eq(r.tag, "");
    ck_assert_str_eq(r.route, "");
    ck_assert_str_eq(r.plan_source, "");
    ck_assert_int_eq(r.plans, 0);
    fattn_engine_free(e);
    ck_assert(!fattn_engine_supports(NULL, FATTN_ENGINE_Q_PLAN_TAG));
    ck_assert_str_eq(fattn_engine_last_report(NULL).engine, "none");
}
END_TEST

/* Device tensors (engine.h): the CPU engine refuses any with
 * FATTN_E_UNSUPPORTED naming it, and the tensors the dispatch reads on the
 * host are refused as device tensors for every engine with
 * FATTN_E_INVALID_ARG; either way before a byte of O or dQ is written.
 * The device tensor here is a host pointer marked FATTN_DEVICE_CUDA: it must
 * never be touched. */
typedef struct device_row {
    const char *case_id;
    bool bwd;
    const char *tensor; /* the one marked as a device tensor */
    fattn_status want;
} device_row;

static const device_row device_rows[] = {
    {"fwd.nomask.f16", false, "Q", FATTN_E_UNSUPPORTED},
    {"fwd.nomask.f16", false, "K", FATTN_E_UNSUPPORTED},
    {"fwd.nomask.f16", false, "V", FATTN_E_UNSUPPORTED},
    {"fwd.nomask.f16", false, "O", FATTN_E_UNSUPPORTED},
    {"fwd.nomask.f16", false, "Stats", FATTN_E_UNSUPPORTED},
    {"bwd.bias.1hss.f16", false, "Bias", FATTN_E_UNSUPPORTED},
    {"bwd.max_logit.f16", false, "Max", FATTN_E_UNSUPPORTED},
    {"bwd.dropout.p01.f16", false, "rng_state", FATTN_E_INVALID_ARG},
    {"bwd.padding.f16", false, "cu_seqlens_q", FATTN_E_INVALID_ARG},
    {"bwd.padding.f16", false, "cu_seqlens_kv", FATTN_E_INVALID_ARG},
    {"bwd.layout.thd_thd_thd.f16", false, "cu_seqlens_q_padded", FATTN_E_INVALID_ARG},
    {"bwd.softmax.off_by_one.f16", false, "softmax_offset", FATTN_E_INVALID_ARG},
    {"bwd.nomask.f16", true, "Q", FATTN_E_UNSUPPORTED},
    {"bwd.nomask.f16", true, "O", FATTN_E_UNSUPPORTED},
    {"bwd.nomask.f16", true, "dO", FATTN_E_UNSUPPORTED},
    {"bwd.nomask.f16", true, "Stats", FATTN_E_UNSUPPORTED},
    {"bwd.nomask.f16", true, "dQ", FATTN_E_UNSUPPORTED},
    {"bwd.nomask.f16", true, "dK", FATTN_E_UNSUPPORTED},
    {"bwd.nomask.f16", true, "dV", FATTN_E_UNSUPPORTED},
    {"bwd.bias.1hss.f16", true, "Bias", FATTN_E_UNSUPPORTED},
    {"bwd.bias.1hss.f16", true, "dBias", FATTN_E_UNSUPPORTED},
    {"bwd.softmax.off_by_one.f16", true, "dSoftmaxOffset", FATTN_E_UNSUPPORTED},
    {"bwd.softmax.off_by_one.f16", true, "softmax_offset", FATTN_E_INVALID_ARG},
    {"bwd.dropout.p01.f16", true, "rng_state", FATTN_E_INVALID_ARG},
    {"bwd.padding.f16", true, "cu_seqlens_kv", FATTN_E_INVALID_ARG},
};

static fattn_tensor *fwd_slot(fattn_fwd_params *p, const char *name)
{
    fattn_aux_layout l = fattn_aux_layout_fwd(p->attn.bias_type, p->attn.softmax_type,
                                              p->return_max_logit);
    struct { const char *n; fattn_tensor *t; } m[] = {
        {"Q", &p->attn.q}, {"K", &p->attn.k}, {"V", &p->attn.v}, {"O", &p->attn.o}, {"Bias",
            &p->bias},
        {"Stats", &p->aux->t[l.stats]}, {"Max", l.max >= 0 ? &p->aux->t[l.max] : NULL},
        {"rng_state", &p->rng_state}, {"cu_seqlens_q", &p->attn.cu_seqlens_q},
        {"cu_seqlens_kv", &p->attn.cu_seqlens_kv}, {"cu_seqlens_q_padded",
                                                    &p->attn.cu_seqlens_q_padded},
        {"softmax_offset", &p->softmax_offset},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (!strcmp(m[i].n, name))
            return m[i].t;
    return NULL;
}

static fattn_tensor *bwd_slot(fattn_bwd_params *p, fattn_aux_pack *aux, const char *name)
{
    fattn_aux_layout l = fattn_aux_layout_bwd(p->attn.bias_type, p->attn.softmax_type);
    struct { const char *n; fattn_tensor *t; } m[] = {
        {"Q", &p->attn.q}, {"O", &p->attn.o}, {"dO", &p->d_o}, {"dQ", &p->dq}, {"dK", &p->dk},
        {"dV", &p->dv}, {"dBias", &p->d_bias}, {"dSoftmaxOffset", &p->d_softmax_offset},
        {"Stats", &aux->t[l.stats]}, {"rng_state", &aux->t[l.rng_state]},
        {"Bias", l.bias >= 0 ? &aux->t[l.bias] : NULL},
        {"softmax_offset", l.softmax_offset >= 0 ? &aux->t[l.softmax_offset] : NULL},
        {"cu_seqlens_kv", &p->attn.cu_seqlens_kv},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (!strcmp(m[i].n, name))
            return m[i].t;
    return NULL;
}

START_TEST(test_device_refused)
{
    const device_row *row = &device_rows[_i];
    const tcase *c = tcase_find(row->case_id);
    ck_assert_msg(c != NULL, "no case %s", row->case_id);
    tcase_buffers buf;
    ck_assert_int_eq(tcase_setup(c, &buf), FATTN_OK);
    fattn_engine *e = NULL;
    ck_assert_int_eq(fattn_engine_init_cpu(&e, &(fattn_cpu_options){.threads = 1}), FATTN_OK);
    ck_assert(!fattn_engine_supports(e, FATTN_ENGINE_Q_DEVICE_TENSORS));
    ck_assert_int_eq(tcase_run(c, &buf, e), FATTN_OK); /* the packs, as a caller has them */
    fattn_tensor *out = row->bwd ? &buf.dq : &buf.o;
    fattn_tensor_fill_bits(out, 0xFFFFFFFFu);
    size_t bytes = storage_bytes(out);
    unsigned char *before = malloc(bytes);
    ck_assert_ptr_nonnull(before);
    memcpy(before, out->data, bytes);
    fattn_status st;
    if (row->bwd) {
        fattn_aux_pack aux = buf.aux_bwd;
        fattn_bwd_params bp = tcase_bwd_params(c, &buf);
        bp.aux = &aux;
        fattn_tensor *t = bwd_slot(&bp, &aux, row->tensor);
        ck_assert_msg(t && !fattn_tensor_is_empty(t), "%s: no %s", c->id, row->tensor);
        t->device = FATTN_DEVICE_CUDA;
        st = fattn_engine_bwd(e, &bp);
    } else {
        fattn_aux_pack aux = buf.aux_fwd;
        fattn_fwd_params fp = tcase_fwd_params(c, &buf);
        fp.aux = &aux;
        fattn_tensor *t = fwd_slot(&fp, row->tensor);
        ck_assert_msg(t && !fattn_tensor_is_empty(t), "%s: no %s", c->id, row->tensor);
        t->device = FATTN_DEVICE_CUDA;
        st = fattn_engine_fwd(e, &fp);
    }
    ck_assert_msg(st == row->want, "%s %s: %s, want %s (%s)", c->id, row->tensor,
                  fattn_status_name(st), fattn_status_name(row->want), fattn_last_error());
    ck_assert_msg(strstr(fattn_last_error(), row->tensor) != NULL, "%s: message '%s' names "
                  "no %s", c->id, fattn_last_error(), row->tensor);
    ck_assert_msg(memcmp(before, out->data, bytes) == 0, "%s %s: an output was written",
                  c->id, row->tensor);
    free(before);
    fattn_engine_free(e);
    tcase_teardown(&buf);
}
END_TEST

/* What no engine runs is the support table's (its rows for the engine), and
 * the dispatch refuses it before the geometry or the engine sees the call:
 * a bias case made pre_scale_bias is rule pre_scale_bias_engines, forward
 * and backward, and no output is written. */
START_TEST(test_gap_rows)
{
    const tcase *c = NULL;
    for (int i = 0; i < tcase_count && !c; i++)
        if (tcase_table[i].bias == FATTN_BIAS_POST_SCALE_BIAS && tcase_table[i].training)
            c = &tcase_table[i];
    ck_assert_ptr_nonnull(c);
    tcase_buffers buf;
    ck_assert_int_eq(tcase_setup(c, &buf), FATTN_OK);
    fattn_engine *e = NULL;
    ck_assert_int_eq(fattn_engine_init_cpu(&e, &(fattn_cpu_options){.threads = 1}), FATTN_OK);
    ck_assert_int_eq(tcase_run(c, &buf, e), FATTN_OK); /* the packs, as a caller has them */
    for (int bwd = 0; bwd < 2; bwd++) {
        fattn_tensor *out = bwd ? &buf.dq : &buf.o;
        fattn_tensor_fill_bits(out, 0xFFFFFFFFu);
        fattn_status st;
        if (bwd) {
            fattn_aux_pack aux = buf.aux_bwd;
            fattn_bwd_params bp = tcase_bwd_params(c, &buf);
            bp.aux = &aux;
            bp.attn.bias_type = FATTN_BIAS_PRE_SCALE_BIAS;
            st = fattn_engine_bwd(e, &bp);
        } else {
            fattn_aux_pack aux = buf.aux_fwd;
            fattn_fwd_params fp = tcase_fwd_params(c, &buf);
            fp.aux = &aux;
            fp.attn.bias_type = FATTN_BIAS_PRE_SCALE_BIAS;
            st = fattn_engine_fwd(e, &fp);
        }
        ck_assert_msg(st == FATTN_E_UNSUPPORTED, "%s: %s (%s)", c->id, fattn_status_name(st),
                      fattn_last_error());
        ck_assert_msg(!strncmp(fattn_last_error(), "rule pre_scale_bias_engines: ", 29), "%s",
                      fattn_last_error());
        const uint32_t *w = out->data;
        ck_assert_uint_eq(w[0], 0xFFFFFFFFu);
    }
    fattn_engine_free(e);
    tcase_teardown(&buf);
    fattn_test_mark("cpu_engine.gap_rows");
}
END_TEST

/* The bridge's mirror of fattn_tensor (tools/te/fattn_te/bridge.py) checks
 * these rows; the device field sits between dtype and ndim. */
START_TEST(test_tensor_layout)
{
    int64_t rows[64];
    int n = fattn_bridge_abi(rows, 64);
    ck_assert_int_ge(n, 4);
    ck_assert_int_eq(rows[0], (int64_t)sizeof(fattn_tensor));
    ck_assert_int_eq(rows[1], (int64_t)offsetof(fattn_tensor, dtype));
    ck_assert_int_eq(rows[2], (int64_t)offsetof(fattn_tensor, device));
    ck_assert_int_eq(rows[3], (int64_t)offsetof(fattn_tensor, shape));
    ck_assert_int_eq(offsetof(fattn_tensor, device), offsetof(fattn_tensor, dtype) + sizeof(int));
    ck_assert_int_eq(fattn_tensor_empty().device, FATTN_DEVICE_HOST);
    ck_assert_int_eq(FATTN_DEVICE_HOST, 0);
    ck_assert_int_eq(FATTN_DEVICE_CUDA, 1);
}
END_TEST

static void list_ids(void)
{
    for (int i = 0; i < tcase_count; i++)
        printf("%s\n", tcase_table[i].id);
}

static Suite *make_suite(void)
{
    fattn_test_cudnn_libraries();
    Suite *s = suite_create("cpu_engine");
    TCase *tc = tcase_create("vs_oracle");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_test(tc, test_table);
    tcase_add_loop_test(tc, test_case, 0, tcase_count);
    suite_add_tcase(s, tc);
    TCase *api = tcase_create("engine_api");
    tcase_add_test(api, test_aux_layout);
    tcase_add_test(api, test_registry);
    tcase_add_loop_test(api, test_device_refused, 0,
                        (int)(sizeof device_rows / sizeof device_rows[0]));
    tcase_add_test(api, test_tensor_layout);
    tcase_add_test(api, test_gap_rows);
    suite_add_tcase(s, api);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
