/* The state a schedule's steps share (module.h): DotProductAttention's FP8
 * recipe state and quantizers, InferenceParams' KV cache. */
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/kv_cache.h"

#include "fe.h"
#include "inputs.h"
#include "module.h"

/* The six quantizers get_attention_quantizers picks (fused_attn.py:167-172):
 * which object, which direction's state, which index. */
static const struct {
    size_t off;
    bool bwd;
    int idx;
} views[6] = {
    {offsetof(fattn_fp8_quantizers, QKV), false, 2}, /* META_QKV = GEMM1_OUTPUT */
    {offsetof(fattn_fp8_quantizers, O), false, 3},   /* META_O = GEMM2_INPUT */
    {offsetof(fattn_fp8_quantizers, S), false, 8},   /* META_S = GEMM3_OUTPUT */
    {offsetof(fattn_fp8_quantizers, dQKV), true, 0}, /* META_DQKV = GRAD_OUTPUT1 */
    {offsetof(fattn_fp8_quantizers, dO), true, 3},   /* META_DO = GRAD_INPUT2 */
    {offsetof(fattn_fp8_quantizers, dP), true, 5},   /* META_DP = GRAD_INPUT3 */
};

static fattn_fp8_quantizer *view_q(fh_module *m, int i)
{
    return (fattn_fp8_quantizer *)((char *)&m->qs + views[i].off);
}

static float *view_scale(fh_module *m, int i)
{
    return (views[i].bwd ? m->scale_bwd : m->scale_fwd) + views[i].idx;
}

static float *view_amax(fh_module *m, int i) /* amax_history[0][idx] */
{
    return (views[i].bwd ? m->hist_bwd : m->hist_fwd) + views[i].idx;
}

/* The objects' values into the arrays they are views of, and back. */
static void gather(fh_module *m)
{
    for (int i = 0; i < 6; i++) {
        *view_scale(m, i) = view_q(m, i)->scale;
        *view_amax(m, i) = view_q(m, i)->amax;
    }
}

static void scatter(fh_module *m)
{
    for (int i = 0; i < 6; i++) {
        view_q(m, i)->scale = *view_scale(m, i);
        view_q(m, i)->amax = *view_amax(m, i);
    }
}

static fattn_status cache_init(fh_module *m)
{
    const fh_spec *s = m->spec;
    fattn_status st = fh_spec_kv_plan(s, &m->plan);
    if (st != FATTN_OK)
        return st;
    m->kv = true;
    int64_t rows = s->paged ? s->num_pages : s->b, len = s->paged ? s->page_size : s->skv;
    int64_t ks[4] = {rows, len, s->hg, s->d_qk}, vs[4] = {rows, len, s->hg, s->d_v};
    if ((st = fattn_tensor_alloc(&m->k_cache, s->dtype, 4, ks)) != FATTN_OK ||
        (st = fattn_tensor_alloc(&m->v_cache, s->dtype, 4, vs)) != FATTN_OK)
        return st;
    /* torch.zeros (inference.py:448-463, 648-663) */
    memset(m->k_cache.data, 0, (size_t)fattn_tensor_numel(&m->k_cache) *
                                   fattn_dtype_size(s->dtype));
    memset(m->v_cache.data, 0, (size_t)fattn_tensor_numel(&m->v_cache) *
                                   fattn_dtype_size(s->dtype));
    return FATTN_OK;
}

fattn_status fh_module_init(fh_module *m, const fh_spec *spec)
{
    memset(m, 0, sizeof *m);
    m->spec = spec;
    if (spec->fp8)
        fh_fe_fp8_quantizers(spec, &m->qs);
    if (fh_schedule_is_cache(spec->schedule))
        return cache_init(m);
    if (!spec->fp8 || spec->fp8_recipe != FATTN_FP8_RECIPE_DELAYED)
        return FATTN_OK;
    int64_t len = spec->fp8_amax_history_len;
    m->hist_fwd = calloc((size_t)(len * FH_MODULE_FWD_N), sizeof *m->hist_fwd);
    m->hist_bwd = calloc((size_t)(len * FH_MODULE_BWD_N), sizeof *m->hist_bwd);
    if (!m->hist_fwd || !m->hist_bwd)
        return fattn_error(FATTN_E_NOMEM, "case %s: out of memory for the amax history",
                           spec->id);
    for (int i = 0; i < FH_MODULE_FWD_N; i++)
        m->scale_fwd[i] = 1.0f; /* torch.ones (quantization.py:1436) */
    for (int i = 0; i < FH_MODULE_BWD_N; i++)
        m->scale_bwd[i] = 1.0f;
    m->fp8 = true;
    gather(m); /* the harness's scales for the six, amaxes 0 */
    return FATTN_OK;
}

void fh_module_free(fh_module *m)
{
    free(m->hist_fwd);
    free(m->hist_bwd);
    fh_kv_plan_free(&m->plan);
    fattn_tensor_free(&m->k_cache);
    fattn_tensor_free(&m->v_cache);
    memset(m, 0, sizeof *m);
}

/* The four arrays of the state as float32 datasets of g. */
static fattn_status put_state(const fh_module *m, fh_h5_node *g)
{
    int64_t len = m->spec->fp8_amax_history_len;
    struct {
        const char *name;
        const float *data;
        int ndim;
        int64_t shape[2];
    } t[] = {
        {"scale_fwd", m->scale_fwd, 1, {FH_MODULE_FWD_N, 0}},
        {"amax_history_fwd", m->hist_fwd, 2, {len, FH_MODULE_FWD_N}},
        {"scale_bwd", m->scale_bwd, 1, {FH_MODULE_BWD_N, 0}},
        {"amax_history_bwd", m->hist_bwd, 2, {len, FH_MODULE_BWD_N}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        size_t n = (size_t)(t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1));
        fattn_status st = fh_h5_node_add_bytes(g, t[i].name, FATTN_DTYPE_FLOAT32, t[i].ndim,
                                               t[i].shape, t[i].data, n * sizeof(float), NULL);
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

fattn_status fh_module_update(fh_module *m, int update, fh_h5_node *g)
{
    assert(m->fp8);
    const fh_spec *s = m->spec;
    gather(m);
    fattn_status st = FATTN_OK;
    /* one process: the reduction buffer is torch.cat of the histories'
     * row 0 (quantization.py:676), no all-reduce */
    float reduced[FH_MODULE_FWD_N];
    struct {
        int bit, n;
        float *scale, *hist;
        fattn_dtype dtype; /* get_fp8_te_dtype under HYBRID: E4M3 forward, E5M2 backward */
    } dir[2] = {
        {FH_UPDATE_FORWARD, FH_MODULE_FWD_N, m->scale_fwd, m->hist_fwd,
         FATTN_DTYPE_FLOAT8_E4M3FN},
        {FH_UPDATE_BACKWARD, FH_MODULE_BWD_N, m->scale_bwd, m->hist_bwd,
         FATTN_DTYPE_FLOAT8_E5M2},
    };
    for (int d = 0; d < 2; d++) {
        if (!(update & dir[d].bit))
            continue;
        memcpy(reduced, dir[d].hist, (size_t)dir[d].n * sizeof *reduced);
        fattn_fp8_recipe_state rs = {s->fp8_amax_history_len, dir[d].n, dir[d].scale,
                                     dir[d].hist};
        st = fattn_fp8_delayed_update(&rs, reduced, s->fp8_amax_algo, dir[d].dtype,
                                      (int)s->fp8_margin);
        if (st != FATTN_OK)
            break;
    }
    /* even after a failed update: the forward's may have run before the
     * backward's failed, and the objects hold what the arrays do */
    scatter(m);
    if (st != FATTN_OK)
        return st;
    fh_h5_node *rg;
    if ((st = fh_h5_node_group(g, "recipe", &rg)) != FATTN_OK)
        return st;
    return put_state(m, rg);
}

/* set_extra_state's copies (module/base.py:1447-1453) from the recorded
 * checkpoint into the state, in place. */
static fattn_status load_state(fh_module *m, const fh_h5_node *x)
{
    float *dst[4] = {m->scale_fwd, m->hist_fwd, m->scale_bwd, m->hist_bwd};
    static const char *const names[4] = {"scale_fwd", "amax_history_fwd", "scale_bwd",
                                         "amax_history_bwd"};
    int64_t len = m->spec->fp8_amax_history_len;
    size_t want[4] = {FH_MODULE_FWD_N, (size_t)len * FH_MODULE_FWD_N, FH_MODULE_BWD_N,
                      (size_t)len * FH_MODULE_BWD_N};
    for (int i = 0; i < 4; i++) {
        const fh_h5_node *ds = fh_h5_node_find(x, names[i]);
        if (!ds || !ds->is_dataset || ds->dtype != FATTN_DTYPE_FLOAT32 ||
            ds->nbytes != want[i] * sizeof(float))
            return fattn_error(FATTN_E_INTERNAL, "extra_state: %s did not round-trip",
                               names[i]);
        memcpy(dst[i], ds->data, ds->nbytes);
    }
    return FATTN_OK;
}

fattn_status fh_module_extra_state(fh_module *m, fh_h5_node *g)
{
    assert(m->fp8);
    const fh_spec *s = m->spec;
    gather(m);
    fh_h5_node *x;
    fattn_status st;
    /* get_extra_state (module/base.py:1354-1417): the recipe, then the two
     * directions' scales and histories */
    if ((st = fh_h5_node_group(g, "extra_state", &x)) != FATTN_OK ||
        (st = put_state(m, x)) != FATTN_OK ||
        (st = fh_h5_node_set_string(x, "fp8_format", "HYBRID")) != FATTN_OK ||
        (st = fh_h5_node_set_int64(x, "amax_history_len", s->fp8_amax_history_len)) !=
            FATTN_OK ||
        (st = fh_h5_node_set_string(x, "amax_compute_algo",
                                       fattn_fp8_amax_algo_name(s->fp8_amax_algo))) !=
            FATTN_OK ||
        (st = fh_h5_node_set_int64(x, "margin", s->fp8_margin)) != FATTN_OK ||
        (st = load_state(m, x)) != FATTN_OK)
        return st;
    scatter(m);
    return FATTN_OK;
}

/* ---- cache steps ------------------------------------------------------------- */

static fattn_status cu_of(const int64_t *lens, int64_t b, int32_t **out)
{
    int32_t *cu = calloc((size_t)b + 1, sizeof *cu);
    if (!cu)
        return fattn_error(FATTN_E_NOMEM, "out of memory for a cache step's lengths");
    for (int64_t i = 0; i < b; i++)
        cu[i + 1] = cu[i] + (int32_t)lens[i];
    *out = cu;
    return FATTN_OK;
}

/* The step's new K and V: the step spec with q's format for all three,
 * whose k and v are those of q's tokens (its lengths for both). */
static fattn_status new_tokens(const fh_spec *step, fh_case_inputs *tok)
{
    static const char *const self[] = {[FATTN_FORMAT_BSHD] = "bshd_bshd_bshd",
                                       [FATTN_FORMAT_SBHD] = "sbhd_sbhd_sbhd",
                                       [FATTN_FORMAT_THD] = "thd_thd_thd"};
    fattn_qkv_format qf = fattn_layout_q_format(step->layout);
    assert(qf == FATTN_FORMAT_BSHD || qf == FATTN_FORMAT_SBHD || qf == FATTN_FORMAT_THD);
    fh_spec t = *step, own;
    t.paged = false;
    t.skv = step->sq;
    t.seqlens_kv = step->seqlens_q;
    fattn_status st;
    if ((st = fattn_layout_parse(self[qf], &t.layout)) != FATTN_OK ||
        (st = fh_spec_copy(&own, &t)) != FATTN_OK)
        return st;
    st = fh_inputs_make(&own, tok);
    fh_spec_free(&own);
    return st;
}

/* The step's new tokens into the cache. */
static fattn_status copy_tokens(fh_module *m, const fh_kv_step *kv, const fh_spec *step)
{
    const fh_spec *s = m->spec;
    fattn_qkv_format qf = fattn_layout_q_format(s->layout);
    fh_case_inputs tok;
    int32_t *cu_new = NULL, *cu_cached = NULL;
    fattn_status st = new_tokens(step, &tok);
    if (st != FATTN_OK)
        return st;
    if ((st = cu_of(kv->lens_q, kv->b, &cu_new)) != FATTN_OK ||
        (st = cu_of(kv->lens_kv, kv->b, &cu_cached)) != FATTN_OK)
        goto out;
    /* InferenceParams.step -> the manager's step -> copy_to_kv_cache
     * (inference.py:512-567, 773-834) */
    fattn_kv_cache_copy_args a = {
        .new_k = &tok.k, .new_v = &tok.v, .k_cache = &m->k_cache, .v_cache = &m->v_cache,
        .table = s->paged ? kv->page_table : kv->batch_indices,
        .table_rows = m->plan.max_batch, .cu_new_lens = cu_new, .cu_cached_lens = cu_cached,
        .format = qf, .b = kv->b, .max_ctx_len = qf == FATTN_FORMAT_THD ? 1 : step->sq,
        .max_seq_len = s->skv, .max_pages_per_seq = m->plan.pps,
        .reindex = !s->paged && kv->need_reindex};
    st = fattn_kv_cache_copy(&a);
out:
    free(cu_new);
    free(cu_cached);
    fh_inputs_free(&tok);
    return st;
}

fattn_status fh_module_cache_step(fh_module *m, int64_t k, const fh_spec *step,
                                     fh_case_inputs *in)
{
    const fh_spec *s = m->spec;
    const fh_kv_step *kv = &m->plan.steps[k - 1];
    fattn_status st = copy_tokens(m, kv, step);
    if (st != FATTN_OK)
        return st;
    /* FusedAttnFunc's k and v: the cache's first b rows (non-paged,
     * k_cache[:batch_size], inference.py:573-574) or the page containers;
     * the page table's first b rows for both */
    fattn_tensor_free(&in->storage[1]);
    fattn_tensor_free(&in->storage[2]);
    in->k = m->k_cache;
    in->v = m->v_cache;
    if (!s->paged) {
        in->k.shape[0] = kv->b;
        in->v.shape[0] = kv->b;
        return FATTN_OK;
    }
    int64_t pps = m->plan.pps;
    assert(in->page_table_k.shape[0] == kv->b && in->page_table_k.shape[1] == pps);
    memcpy(in->page_table_k.data, kv->page_table, (size_t)(kv->b * pps) * sizeof(int32_t));
    memcpy(in->page_table_v.data, kv->page_table, (size_t)(kv->b * pps) * sizeof(int32_t));
    return FATTN_OK;
}
