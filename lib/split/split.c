/* The split front end (fattn/split.h): TE's FusedAttnFunc after the
 * refactor — args structs, forward_impl / setup_ctx / backward_impl, fixed
 * aux slots, saved-tensor dedup, 5 grads + 1 empty.
 *
 * Uses only the engine API and core types. The legacy front end
 * (lib/legacy/) implements the same rules separately; code that looks alike
 * is marked "independent witness" and must not be unified.
 *
 * TE lines cited as file:line are at TE commit d0067d0:
 *   backends.py    transformer_engine/pytorch/attention/dot_product_attention/backends.py
 *   fused_attn.py  transformer_engine/pytorch/cpp_extensions/fused_attn.py
 *   attention.cpp  transformer_engine/pytorch/csrc/extensions/attention.cpp
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/dtype.h"
#include "fattn/split.h"
#include "fattn/support.h"

/* ------------------------------------------------------------------------ */
/* Names, init                                                              */
/* ------------------------------------------------------------------------ */

/* Self-test mutants (meson -Dself_test_mutants=true): named plumbing bugs
 * compiled into the split path, inert unless FATTN_MUTANT names one. They
 * exist to prove that `fattn verify` catches each kind of bug; see
 * docs/verify.md. A default build has none of them. */
#ifdef FATTN_SELF_TEST_MUTANTS
static bool sp_mutant(const char *name)
{
    const char *m = getenv("FATTN_MUTANT");
    return m && strcmp(m, name) == 0;
}
#else
#define sp_mutant(name) false
#endif

static const char *const slot_names[FATTN_SPLIT_NSLOTS] = {
    "q_fp8",         "k_fp8",        "v_fp8",
    "out_fp8",       "q",            "k",
    "v",             "out",          "cu_seqlens_q",
    "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded",
    "softmax_stats", "rng_state",    "aux_bias",
    "aux_softmax_offset"};

const char *fattn_split_slot_name(fattn_split_slot s)
{
    return ((int)s >= 0 && s < FATTN_SPLIT_NSLOTS) ? slot_names[s] : NULL;
}

const char *fattn_split_source_name(fattn_split_source s)
{
    switch (s) {
    case FATTN_SPLIT_SRC_Q: return "q";
    case FATTN_SPLIT_SRC_K: return "k";
    case FATTN_SPLIT_SRC_V: return "v";
    case FATTN_SPLIT_SRC_ATTN_BIAS: return "attn_bias";
    case FATTN_SPLIT_SRC_SOFTMAX_OFFSET: return "softmax_offset";
    case FATTN_SPLIT_SRC_OUT: return "out";
    default: return NULL;
    }
}

void fattn_fwd_args_init(fattn_fwd_args *a)
{
    memset(a, 0, sizeof *a);
    a->q = a->k = a->v = a->attn_bias = a->softmax_offset = fattn_tensor_empty();
    a->packed_qkv = a->packed_kv = fattn_tensor_empty();
    a->cu_seqlens_q = a->cu_seqlens_kv = fattn_tensor_empty();
    a->cu_seqlens_q_padded = a->cu_seqlens_kv_padded = fattn_tensor_empty();
    a->page_table_k = a->page_table_v = fattn_tensor_empty();
    a->max_seqlen_q = a->max_seqlen_kv = 0;
    a->is_training = -1;
    a->qkv_layout = FATTN_LAYOUT_NOT_SET;
    a->attn_bias_type = (fattn_bias_type)-1;
    a->attn_mask_type = (fattn_mask_type)-1;
    a->softmax_type = (fattn_softmax_type)-1;
    a->window_size[0] = a->window_size[1] = FATTN_SPLIT_WINDOW_UNSET;
    a->bottom_right_diagonal = -1;
    a->attn_scale = FATTN_SPLIT_SCALE_NONE;
    a->dropout_p = 0.0f;
    a->fast_zero_fill = true;
    a->fused_attention_backend = FATTN_TE_BACKEND_NO_BACKEND;
    a->fp8_save = FATTN_SPLIT_SAVE_F16;
    a->layer_number = 1;
}

void fattn_bwd_args_init(fattn_bwd_args *a)
{
    memset(a, 0, sizeof *a);
    fattn_tensor *ts[] = {&a->softmax_stats, &a->rng_state, &a->aux_bias,
                          &a->aux_softmax_offset, &a->q_fp8, &a->k_fp8, &a->v_fp8,
                          &a->out_fp8, &a->q, &a->k, &a->v, &a->out, &a->cu_seqlens_q,
                          &a->cu_seqlens_kv, &a->cu_seqlens_q_padded,
                          &a->cu_seqlens_kv_padded, &a->d_out};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        *ts[i] = fattn_tensor_empty();
    a->nominal_dtype = FATTN_DTYPE_INVALID;
    a->layer_number = 1;
    a->attn_scale = FATTN_SPLIT_SCALE_NONE;
    a->fast_zero_fill = true;
    a->qkv_layout = a->dqkv_layout = FATTN_LAYOUT_NOT_SET;
    a->o_format = a->qkv_scale_inv_format = FATTN_FORMAT_NOT_SET;
    a->attn_bias_type = (fattn_bias_type)-1;
    a->attn_mask_type = (fattn_mask_type)-1;
    a->softmax_type = (fattn_softmax_type)-1;
    a->window_size[0] = a->window_size[1] = FATTN_SPLIT_WINDOW_UNSET;
    a->bottom_right_diagonal = -1;
    a->fused_attention_backend = FATTN_TE_BACKEND_NO_BACKEND;
}

/* ------------------------------------------------------------------------ */
/* Helpers (independent witnesses of lib/legacy/legacy.c)                   */
/* ------------------------------------------------------------------------ */

static bool sp_none(const fattn_tensor *t)
{
    return !t || fattn_tensor_is_empty(t);
}

static fattn_tensor sp_opt(const fattn_tensor *t)
{
    return sp_none(t) ? fattn_tensor_empty() : *t;
}

/* independent witness: mirrors lib/legacy/legacy.c lg_heads_dim, do not unify. */
static int sp_heads_dim(fattn_qkv_format f)
{
    if (f == FATTN_FORMAT_THD)
        return 1;
    if (f == FATTN_FORMAT_BHSD)
        return 1;
    return 2;
}

/* independent witness: mirrors lib/legacy/legacy.c lg_support_engine, do not unify. */
static const char *sp_support_engine(const fattn_engine *e)
{
    return fattn_engine_support_column(e);
}

static fattn_status sp_alloc_out(uint64_t poison, fattn_tensor *t, fattn_dtype dt, int ndim,
                                 const int64_t *shape)
{
    fattn_status st = fattn_tensor_alloc(t, dt, ndim, shape);
    if (st == FATTN_OK && poison != 0)
        fattn_tensor_fill_bits(t, poison);
    return st;
}

/* independent witness: mirrors lib/legacy/legacy.c lg_alloc_packed, do not
 * unify. attention.cpp:398-452: `npack` tensors shaped like `like` in one
 * buffer, the pack dim at `at` (ndim-2 for 3hd/2hd, ndim-1 for h3d/h2d). */
static fattn_status sp_alloc_packed(uint64_t poison, fattn_tensor *storage, fattn_dtype dt,
                                    const fattn_tensor *like, int npack, int at,
                                    fattn_tensor *views)
{
    int nd = like->ndim;
    if (npack == 1) {
        fattn_status st = sp_alloc_out(poison, storage, dt, nd, like->shape);
        if (st == FATTN_OK)
            views[0] = *storage;
        return st;
    }
    if (nd + 1 > FATTN_MAX_DIMS)
        return fattn_error(FATTN_E_SHAPE, "split: %d dims cannot be packed", nd);
    int64_t shape[FATTN_MAX_DIMS];
    int s = 0;
    for (int a = 0; a <= nd; a++)
        shape[a] = (a == at) ? npack : like->shape[s++];
    fattn_status st = sp_alloc_out(poison, storage, dt, nd + 1, shape);
    if (st != FATTN_OK)
        return st;
    size_t esz = fattn_dtype_size(dt);
    for (int m = 0; m < npack; m++) {
        fattn_tensor w = fattn_tensor_empty();
        w.dtype = dt;
        w.device = storage->device;
        w.ndim = nd;
        s = 0;
        for (int a = 0; a <= nd; a++) {
            if (a == at)
                continue;
            w.shape[s] = storage->shape[a];
            w.strides[s] = storage->strides[a];
            s++;
        }
        w.data = (char *)storage->data + (size_t)m * (size_t)storage->strides[at] * esz;
        views[m] = w;
    }
    return FATTN_OK;
}

static float sp_amax_step(float m, float x)
{
    if (isnan(m))
        return m;
    if (isnan(x))
        return x;
    return x > m ? x : m;
}

/* independent witness: mirrors lib/legacy/legacy.c lg_max_logit, do not
 * unify. fused_attn.py:402-441: amax of Max over all dims but h, in O's
 * dtype, [h]; THD counts only tokens [start(b), start(b)+len(b)) (start from
 * cu_seqlens_q_padded when given); other formats with a padding mask only
 * rows i < len(b) (fattn: the rest is outside the defined region). */
static fattn_status sp_max_logit(const fattn_tensor *maxt, const fattn_tensor *cu_q,
                                 const fattn_tensor *cu_q_pad, bool padding, int64_t h,
                                 fattn_dtype odt, fattn_tensor *res)
{
    fattn_status st = fattn_tensor_alloc(res, odt, 1, &h);
    if (st != FATTN_OK)
        return st;
    const float *mx = maxt->data;
    const int32_t *cu = sp_none(cu_q) ? NULL : (const int32_t *)cu_q->data;
    const int32_t *pad = sp_none(cu_q_pad) ? NULL : (const int32_t *)cu_q_pad->data;
    int64_t nb = sp_none(cu_q) ? 0 : cu_q->shape[0] - 1;
    for (int64_t head = 0; head < h; head++) {
        float m = -INFINITY;
        int64_t ix[FATTN_MAX_DIMS] = {0};
        if (maxt->ndim == 3) { /* ragged [t_q, h, 1] */
            int64_t tq = maxt->shape[0];
            for (int64_t b = 0; b < nb; b++) {
                int64_t first = pad ? pad[b] : cu[b];
                int64_t stop = first + (cu[b + 1] - cu[b]);
                if (stop > tq)
                    stop = tq;
                if (first < 0)
                    first = 0;
                for (int64_t tok = first; tok < stop; tok++) {
                    ix[0] = tok;
                    ix[1] = head;
                    ix[2] = 0;
                    m = sp_amax_step(m, mx[fattn_tensor_offset(maxt, ix)]);
                }
            }
        } else { /* [b, h, sq, 1] */
            for (int64_t b = 0; b < maxt->shape[0]; b++) {
                int64_t rows = maxt->shape[2];
                if (padding && cu && b < nb && cu[b + 1] - cu[b] < rows)
                    rows = cu[b + 1] - cu[b];
                for (int64_t i = 0; i < rows; i++) {
                    ix[0] = b;
                    ix[1] = head;
                    ix[2] = i;
                    ix[3] = 0;
                    m = sp_amax_step(m, mx[fattn_tensor_offset(maxt, ix)]);
                }
            }
        }
        fattn_store_f32(res->data, odt, head, m);
    }
    return FATTN_OK;
}

/* ------------------------------------------------------------------------ */
/* Slots and dedup                                                          */
/* ------------------------------------------------------------------------ */

fattn_status fattn_split_fill_to_save(fattn_split_save_variant variant,
                                      const fattn_tensor fp8[4], const fattn_tensor f16[4],
                                      const fattn_tensor cu[4], const fattn_tensor aux[4],
                                      fattn_split_to_save *ts)
{
    if (!fp8 || !f16 || !cu || !aux || !ts)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_fill_to_save: NULL argument");
    for (int i = 0; i < FATTN_SPLIT_NSLOTS; i++)
        ts->t[i] = fattn_tensor_empty();
    /* backends.py (FP8 branch) and reference §1.2 step 7. */
    switch (variant) {
    case FATTN_SPLIT_SAVE_F16:
    case FATTN_SPLIT_SAVE_FP8_BWD_F16:
        for (int i = 0; i < 4; i++)
            ts->t[FATTN_SPLIT_SLOT_Q + i] = f16[i];
        break;
    case FATTN_SPLIT_SAVE_FP8_O_F16:
        for (int i = 0; i < 3; i++)
            ts->t[FATTN_SPLIT_SLOT_Q_FP8 + i] = fp8[i];
        ts->t[FATTN_SPLIT_SLOT_OUT] = f16[3];
        break;
    case FATTN_SPLIT_SAVE_FP8_O_FP8:
        for (int i = 0; i < 4; i++)
            ts->t[FATTN_SPLIT_SLOT_Q_FP8 + i] = fp8[i];
        break;
    default:
        return fattn_error(FATTN_E_INVALID_ARG, "split: unknown save variant %d", (int)variant);
    }
    for (int i = 0; i < 4; i++) {
        ts->t[FATTN_SPLIT_SLOT_CU_SEQLENS_Q + i] = cu[i];
        ts->t[FATTN_SPLIT_SLOT_SOFTMAX_STATS + i] = aux[i];
    }
    return FATTN_OK;
}

void fattn_split_dedup(fattn_split_to_save *ts, const fattn_tensor *q, const fattn_tensor *k,
                       const fattn_tensor *v, const fattn_tensor *attn_bias,
                       const fattn_tensor *softmax_offset, const fattn_tensor *out,
                       fattn_split_source saved_from[FATTN_SPLIT_NSLOTS])
{
    const fattn_tensor *src[6] = {q, k, v, attn_bias, softmax_offset, out};
    const fattn_split_source names[6] = {FATTN_SPLIT_SRC_Q, FATTN_SPLIT_SRC_K,
                                         FATTN_SPLIT_SRC_V, FATTN_SPLIT_SRC_ATTN_BIAS,
                                         FATTN_SPLIT_SRC_SOFTMAX_OFFSET, FATTN_SPLIT_SRC_OUT};
    for (int i = 0; i < FATTN_SPLIT_NSLOTS; i++) {
        saved_from[i] = FATTN_SPLIT_SRC_NONE;
        if (fattn_tensor_is_empty(&ts->t[i]))
            continue; /* an empty slot means "not needed", never a source */
        for (int j = 0; j < 6; j++) {
            if (sp_none(src[j]) || !fattn_tensor_same(&ts->t[i], src[j]))
                continue;
            saved_from[i] = names[j];
            ts->t[i] = fattn_tensor_empty();
            break;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Required fields                                                          */
/* ------------------------------------------------------------------------ */

#define MISSING(s, name) fattn_error(FATTN_E_MISSING_FIELD, "%s.%s is unset", s, name)

static fattn_status sp_check_fwd_args(const fattn_fwd_args *a)
{
    const char *s = "fattn_fwd_args";
    if (!a->engine)
        return MISSING(s, "engine");
    if (a->max_seqlen_q <= 0)
        return MISSING(s, "max_seqlen_q");
    if (a->max_seqlen_kv <= 0)
        return MISSING(s, "max_seqlen_kv");
    if (a->is_training != 0 && a->is_training != 1)
        return MISSING(s, "is_training");
    if (a->qkv_layout == FATTN_LAYOUT_NOT_SET || (int)a->qkv_layout < 0 ||
        (int)a->qkv_layout > FATTN_LAYOUT_NOT_SET)
        return MISSING(s, "qkv_layout");
    if ((int)a->attn_bias_type < 0)
        return MISSING(s, "attn_bias_type");
    if ((int)a->attn_mask_type < 0)
        return MISSING(s, "attn_mask_type");
    if ((int)a->softmax_type < 0)
        return MISSING(s, "softmax_type");
    if (a->window_size[0] == FATTN_SPLIT_WINDOW_UNSET ||
        a->window_size[1] == FATTN_SPLIT_WINDOW_UNSET)
        return MISSING(s, "window_size");
    if (a->fused_attention_backend == FATTN_TE_BACKEND_NO_BACKEND)
        return MISSING(s, "fused_attention_backend");
    if (!a->rng_gen)
        return MISSING(s, "rng_gen");
    if (a->bottom_right_diagonal < -1 || a->bottom_right_diagonal > 1)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "fattn_fwd_args.bottom_right_diagonal %d (use -1, 0 or 1)",
                           a->bottom_right_diagonal);
    return FATTN_OK;
}

static fattn_status sp_check_bwd_args(const fattn_bwd_args *a)
{
    const char *s = "fattn_bwd_args";
    if (!a->engine)
        return MISSING(s, "engine");
    if (fattn_tensor_is_empty(&a->d_out))
        return MISSING(s, "d_out");
    if (a->nominal_dtype == FATTN_DTYPE_INVALID)
        return MISSING(s, "nominal_dtype");
    if (a->max_seqlen_q <= 0)
        return MISSING(s, "max_seqlen_q");
    if (a->max_seqlen_kv <= 0)
        return MISSING(s, "max_seqlen_kv");
    if (isnan(a->attn_scale))
        return MISSING(s, "attn_scale");
    if (a->qkv_layout == FATTN_LAYOUT_NOT_SET)
        return MISSING(s, "qkv_layout");
    if (a->o_format == FATTN_FORMAT_NOT_SET)
        return MISSING(s, "o_format");
    if (a->dqkv_layout == FATTN_LAYOUT_NOT_SET)
        return MISSING(s, "dqkv_layout");
    if ((int)a->attn_bias_type < 0)
        return MISSING(s, "attn_bias_type");
    if ((int)a->attn_mask_type < 0)
        return MISSING(s, "attn_mask_type");
    if ((int)a->softmax_type < 0)
        return MISSING(s, "softmax_type");
    if (a->window_size[0] == FATTN_SPLIT_WINDOW_UNSET ||
        a->window_size[1] == FATTN_SPLIT_WINDOW_UNSET)
        return MISSING(s, "window_size");
    if (a->bottom_right_diagonal != 0 && a->bottom_right_diagonal != 1)
        return MISSING(s, "bottom_right_diagonal");
    if (a->fused_attention_backend == FATTN_TE_BACKEND_NO_BACKEND)
        return MISSING(s, "fused_attention_backend");
    if (fattn_tensor_is_empty(&a->softmax_stats))
        return MISSING(s, "softmax_stats");
    if (fattn_tensor_is_empty(&a->rng_state))
        return MISSING(s, "rng_state");
    bool tensor_bias = a->attn_bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
                       a->attn_bias_type == FATTN_BIAS_POST_SCALE_BIAS;
    if (tensor_bias && fattn_tensor_is_empty(&a->aux_bias))
        return MISSING(s, "aux_bias");
    if (a->softmax_type != FATTN_SOFTMAX_VANILLA && fattn_tensor_is_empty(&a->aux_softmax_offset))
        return MISSING(s, "aux_softmax_offset");
    if (!a->fp8) {
        if (fattn_tensor_is_empty(&a->q))
            return MISSING(s, "q");
        if (fattn_tensor_is_empty(&a->k))
            return MISSING(s, "k");
        if (fattn_tensor_is_empty(&a->v))
            return MISSING(s, "v");
        if (fattn_tensor_is_empty(&a->out))
            return MISSING(s, "out");
    }
    return FATTN_OK;
}

/* ------------------------------------------------------------------------ */
/* forward_impl                                                             */
/* ------------------------------------------------------------------------ */

void fattn_split_fwd_result_free(fattn_split_fwd_result *r)
{
    if (!r)
        return;
    fattn_tensor_free(&r->own_out);
    fattn_tensor_free(&r->own_max_logit);
    fattn_tensor_free(&r->own_stats);
    fattn_tensor_free(&r->own_max);
    fattn_tensor_free(&r->own_rng_state);
    memset(r, 0, sizeof *r);
}

void fattn_split_grads_free(fattn_split_grads *g)
{
    if (!g)
        return;
    for (int i = 0; i < 3; i++)
        fattn_tensor_free(&g->own_storage[i]);
    fattn_tensor_free(&g->own_d_bias);
    fattn_tensor_free(&g->own_d_softmax_offset);
    memset(g, 0, sizeof *g);
}

fattn_status fattn_split_forward_impl(const fattn_fwd_args *args, const fattn_tensor *q,
                                      const fattn_tensor *k, const fattn_tensor *v,
                                      const fattn_tensor *attn_bias,
                                      const fattn_tensor *softmax_offset,
                                      fattn_split_fwd_result *res)
{
    if (!args || !res)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_forward_impl: NULL args or res");
    memset(res, 0, sizeof *res);
    fattn_status st = sp_check_fwd_args(args);
    if (st != FATTN_OK)
        return st;
    if (sp_none(q) || sp_none(k) || sp_none(v))
        return fattn_error(FATTN_E_INVALID_ARG, "split forward: q, k and v are required");

    fattn_qkv_format qf = fattn_layout_q_format(args->qkv_layout);
    fattn_qkv_format kvf = fattn_layout_kv_format(args->qkv_layout);
    int64_t h = q->shape[sp_heads_dim(qf)];
    int64_t d_qk = q->shape[q->ndim - 1];
    int64_t d_v = v->shape[v->ndim - 1];

    /* The support table first (checked here independently of legacy). */
    fattn_support_query query;
    fattn_support_query_init(&query);
    query.q_dtype = q->dtype;
    query.kv_dtype = k->dtype;
    query.has_bias_tensor = !sp_none(attn_bias);
    query.bias_dtype = query.has_bias_tensor ? attn_bias->dtype : FATTN_DTYPE_INVALID;
    query.layout = args->qkv_layout;
    query.bias_type = args->attn_bias_type;
    query.mask_type = args->attn_mask_type;
    query.softmax_type = args->softmax_type;
    query.dropout = args->dropout_p;
    query.h = h;
    query.hg = k->shape[sp_heads_dim(kvf)];
    query.sq = args->max_seqlen_q;
    query.skv = args->max_seqlen_kv;
    query.d_qk = d_qk;
    query.d_v = d_v;
    query.window_left = args->window_size[0];
    query.window_right = args->window_size[1];
    query.is_training = args->is_training == 1;
    query.return_max_logit = args->return_max_logit;
    query.fp8 = args->fp8;
    st = fattn_support_check(&query, sp_support_engine(args->engine), NULL);
    if (st != FATTN_OK)
        return st;
    if (args->fused_attention_backend != FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN)
        return fattn_error(FATTN_E_INVALID_CASE,
                           "split forward: fused_attention_backend %d cannot run the f16 path "
                           "(TE transformer_engine/pytorch/cpp_extensions/fused_attn.py:348)",
                           (int)args->fused_attention_backend);

    /* fused_attn.py:325-333. */
    float scale = args->attn_scale;
    if (isnan(scale))
        scale = (float)(1.0 / sqrt((double)d_qk));
    if (sp_mutant("scale_sqrtf") && isnan(args->attn_scale))
        scale = 1.0f / sqrtf((float)d_qk);
    bool brd;
    if (args->bottom_right_diagonal == -1)
        brd = fattn_bottom_right_default_fwd(args->attn_mask_type);
    else
        brd = args->bottom_right_diagonal == 1;

    /* independent witness: mirrors lib/legacy/legacy.c (rng_state draw), do
     * not unify. attention.cpp:231-236: (seed, offset), then offset += 16. */
    int64_t two = 2;
    st = fattn_tensor_alloc(&res->own_rng_state, FATTN_DTYPE_INT64, 1, &two);
    if (st != FATTN_OK)
        return st;
    int64_t *rs = res->own_rng_state.data;
    rs[0] = (int64_t)args->rng_gen->seed;
    rs[1] = (int64_t)args->rng_gen->offset;
    if (!sp_mutant("rng_no_advance"))
        args->rng_gen->offset = args->rng_gen->offset + FATTN_RNG_F16_INCREMENT;

    /* O (attention.cpp:173-176: zeroed for a THD O). */
    int64_t oshape[FATTN_MAX_DIMS];
    memcpy(oshape, q->shape, sizeof oshape);
    oshape[q->ndim - 1] = d_v;
    st = sp_alloc_out(args->poison, &res->own_out, q->dtype, q->ndim, oshape);
    if (st != FATTN_OK)
        goto fail;
    if (qf == FATTN_FORMAT_THD)
        fattn_tensor_fill_bits(&res->own_out, 0);

    fattn_aux_pack pack;
    memset(&pack, 0, sizeof pack);
    fattn_fwd_params p;
    memset(&p, 0, sizeof p);
    p.q = *q;
    p.k = *k;
    p.v = *v;
    p.bias = sp_opt(attn_bias);
    p.softmax_offset = sp_opt(softmax_offset);
    p.o = res->own_out;
    p.aux = &pack;
    p.cu_seqlens_q = args->cu_seqlens_q;
    p.cu_seqlens_kv = args->cu_seqlens_kv;
    p.cu_seqlens_q_padded = args->cu_seqlens_q_padded;
    p.cu_seqlens_kv_padded = args->cu_seqlens_kv_padded;
    p.page_table_k = args->page_table_k;
    p.page_table_v = args->page_table_v;
    p.rng_state = res->own_rng_state;
    p.max_seqlen_q = args->max_seqlen_q;
    p.max_seqlen_kv = args->max_seqlen_kv;
    p.is_training = args->is_training == 1;
    p.return_max_logit = args->return_max_logit;
    p.cuda_graph = false;
    p.attn_scale = scale;
    p.dropout = args->dropout_p;
    p.qkv_layout = args->qkv_layout;
    p.o_format = qf;
    p.bias_type = args->attn_bias_type;
    p.mask_type = args->attn_mask_type;
    p.softmax_type = args->softmax_type;
    p.window_size_left = args->window_size[0];
    p.window_size_right = args->window_size[1];
    p.bottom_right_diagonal = brd;

    /* Engine boundary, two-call protocol. */
    st = fattn_engine_fwd(args->engine, &p);
    if (st != FATTN_OK)
        goto fail;
    int want = 2 + (args->return_max_logit ? 1 : 0) +
               ((args->attn_bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
                 args->attn_bias_type == FATTN_BIAS_POST_SCALE_BIAS)
                    ? 1
                    : 0) +
               (args->softmax_type != FATTN_SOFTMAX_VANILLA ? 1 : 0);
    if (pack.n != want) {
        st = fattn_error(FATTN_E_INTERNAL, "split forward: engine sized %d aux entries, want %d",
                         pack.n, want);
        goto fail;
    }
    st = sp_alloc_out(args->poison, &res->own_stats, pack.t[0].dtype, pack.t[0].ndim,
                      pack.t[0].shape);
    if (st != FATTN_OK)
        goto fail;
    pack.t[0] = res->own_stats;
    if (args->return_max_logit) {
        st = sp_alloc_out(args->poison, &res->own_max, pack.t[1].dtype, pack.t[1].ndim,
                          pack.t[1].shape);
        if (st != FATTN_OK)
            goto fail;
        pack.t[1] = res->own_max;
    }
    st = fattn_engine_fwd(args->engine, &p);
    if (st != FATTN_OK)
        goto fail;

    /* List -> fixed slots, right after the engine call. */
    fattn_tensor aux_slots[4] = {fattn_tensor_empty(), fattn_tensor_empty(),
                                 fattn_tensor_empty(), fattn_tensor_empty()};
    int at = 0;
    aux_slots[0] = pack.t[at++];
    if (args->return_max_logit)
        at++; /* Max: becomes max_logit, never saved */
    aux_slots[1] = pack.t[at++];
    if (args->attn_bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
        args->attn_bias_type == FATTN_BIAS_POST_SCALE_BIAS)
        aux_slots[2] = pack.t[at++];
    if (args->softmax_type != FATTN_SOFTMAX_VANILLA)
        aux_slots[3] = pack.t[at++];

    if (args->return_max_logit) {
        st = sp_max_logit(&res->own_max, &args->cu_seqlens_q, &args->cu_seqlens_q_padded,
                          fattn_mask_has_padding(args->attn_mask_type), h, q->dtype,
                          &res->own_max_logit);
        if (st != FATTN_OK)
            goto fail;
    }

    /* To-save tuple (f16 path) and dedup. */
    fattn_tensor none4[4] = {fattn_tensor_empty(), fattn_tensor_empty(), fattn_tensor_empty(),
                             fattn_tensor_empty()};
    fattn_tensor f16[4] = {*q, *k, *v, res->own_out};
    fattn_tensor cu[4] = {args->cu_seqlens_q, args->cu_seqlens_kv, args->cu_seqlens_q_padded,
                          args->cu_seqlens_kv_padded};
    st = fattn_split_fill_to_save(FATTN_SPLIT_SAVE_F16, none4, f16, cu, aux_slots,
                                  &res->to_save);
    if (st != FATTN_OK)
        goto fail;
    fattn_split_dedup(&res->to_save, q, k, v, attn_bias, softmax_offset, &res->own_out,
                      res->ctx_attrs.saved_from);
    if (sp_mutant("aux_swap")) {
        fattn_split_source *sf = res->ctx_attrs.saved_from;
        fattn_tensor tb = res->to_save.t[FATTN_SPLIT_SLOT_AUX_BIAS];
        fattn_split_source sb = sf[FATTN_SPLIT_SLOT_AUX_BIAS];
        res->to_save.t[FATTN_SPLIT_SLOT_AUX_BIAS] = res->to_save.t[FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET];
        sf[FATTN_SPLIT_SLOT_AUX_BIAS] = sf[FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET];
        res->to_save.t[FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET] = tb;
        sf[FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET] = sb;
    }

    /* ctx attributes (backends.py:1635-1726 without the three dropped). */
    fattn_split_ctx_attrs *ca = &res->ctx_attrs;
    ca->fp8 = false;
    ca->nominal_dtype = q->dtype;
    ca->is_input_fp8 = false;
    ca->qkv_type = NULL;
    ca->qkv_layout = args->qkv_layout;
    ca->dqkv_layout = args->qkv_layout;
    ca->o_format = qf;
    ca->qkv_scale_inv_format = FATTN_FORMAT_NOT_SET;
    ca->attn_scale = scale;
    ca->bottom_right_diagonal = brd;
    ca->fused_attention_backend = FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN;
    ca->QKV_quantizer = ca->O_quantizer = ca->dQKV_quantizer = ca->dO_quantizer =
        ca->dP_quantizer = ca->S_quantizer = NULL;

    res->out = res->own_out;
    res->max_logit = args->return_max_logit ? res->own_max_logit : fattn_tensor_empty();
    return FATTN_OK;

fail:
    fattn_split_fwd_result_free(res);
    return st;
}

/* ------------------------------------------------------------------------ */
/* setup_ctx                                                                */
/* ------------------------------------------------------------------------ */

fattn_status fattn_split_setup_ctx(fattn_bwd_args *bwd, const fattn_fwd_args *fwd,
                                   const fattn_tensor *out,
                                   const fattn_split_ctx_attrs *ca,
                                   const fattn_split_to_save *to_save)
{
    if (!bwd || !fwd || !ca || !to_save)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_setup_ctx: NULL argument");
    fattn_bwd_args_init(bwd);

    /* Put deduplicated tensors back. */
    fattn_tensor slot[FATTN_SPLIT_NSLOTS];
    for (int i = 0; i < FATTN_SPLIT_NSLOTS; i++) {
        slot[i] = to_save->t[i];
        const fattn_tensor *src = NULL;
        switch (ca->saved_from[i]) {
        case FATTN_SPLIT_SRC_NONE: break;
        case FATTN_SPLIT_SRC_Q: src = &fwd->q; break;
        case FATTN_SPLIT_SRC_K: src = &fwd->k; break;
        case FATTN_SPLIT_SRC_V: src = &fwd->v; break;
        case FATTN_SPLIT_SRC_ATTN_BIAS: src = &fwd->attn_bias; break;
        case FATTN_SPLIT_SRC_SOFTMAX_OFFSET: src = &fwd->softmax_offset; break;
        case FATTN_SPLIT_SRC_OUT: src = out; break;
        default:
            return fattn_error(FATTN_E_INVALID_ARG, "split setup_ctx: slot %s has source %d",
                               slot_names[i], (int)ca->saved_from[i]);
        }
        if (ca->saved_from[i] == FATTN_SPLIT_SRC_NONE)
            continue;
        if (sp_mutant("no_restore") && i == FATTN_SPLIT_SLOT_Q)
            continue;
        if (sp_none(src))
            return fattn_error(FATTN_E_MISSING_FIELD,
                               "split setup_ctx: slot %s was saved from %s, which is empty",
                               slot_names[i], fattn_split_source_name(ca->saved_from[i]));
        slot[i] = *src;
    }
    bwd->q_fp8 = slot[FATTN_SPLIT_SLOT_Q_FP8];
    bwd->k_fp8 = slot[FATTN_SPLIT_SLOT_K_FP8];
    bwd->v_fp8 = slot[FATTN_SPLIT_SLOT_V_FP8];
    bwd->out_fp8 = slot[FATTN_SPLIT_SLOT_OUT_FP8];
    bwd->q = slot[FATTN_SPLIT_SLOT_Q];
    bwd->k = slot[FATTN_SPLIT_SLOT_K];
    bwd->v = slot[FATTN_SPLIT_SLOT_V];
    bwd->out = slot[FATTN_SPLIT_SLOT_OUT];
    bwd->cu_seqlens_q = slot[FATTN_SPLIT_SLOT_CU_SEQLENS_Q];
    bwd->cu_seqlens_kv = slot[FATTN_SPLIT_SLOT_CU_SEQLENS_KV];
    bwd->cu_seqlens_q_padded = slot[FATTN_SPLIT_SLOT_CU_SEQLENS_Q_PADDED];
    bwd->cu_seqlens_kv_padded = slot[FATTN_SPLIT_SLOT_CU_SEQLENS_KV_PADDED];
    bwd->softmax_stats = slot[FATTN_SPLIT_SLOT_SOFTMAX_STATS];
    bwd->rng_state = slot[FATTN_SPLIT_SLOT_RNG_STATE];
    bwd->aux_bias = slot[FATTN_SPLIT_SLOT_AUX_BIAS];
    bwd->aux_softmax_offset = slot[FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET];
    if (sp_mutant("aux_swap")) { /* the swap undone, so only forward's record shows it */
        bwd->aux_bias = slot[FATTN_SPLIT_SLOT_AUX_SOFTMAX_OFFSET];
        bwd->aux_softmax_offset = slot[FATTN_SPLIT_SLOT_AUX_BIAS];
    }

    /* Configuration: what forward decided, then the args. */
    bwd->fp8 = ca->fp8;
    bwd->nominal_dtype = ca->nominal_dtype;
    bwd->is_input_fp8 = ca->is_input_fp8;
    bwd->bf16_backward = fwd->bf16_backward;
    bwd->layer_number = fwd->layer_number;
    bwd->QKV_quantizer = ca->QKV_quantizer;
    bwd->O_quantizer = ca->O_quantizer;
    bwd->dQKV_quantizer = ca->dQKV_quantizer;
    bwd->dO_quantizer = ca->dO_quantizer;
    bwd->dP_quantizer = ca->dP_quantizer;
    bwd->S_quantizer = ca->S_quantizer;
    bwd->qkv_type = ca->qkv_type;
    bwd->max_seqlen_q = fwd->max_seqlen_q;
    bwd->max_seqlen_kv = fwd->max_seqlen_kv;
    bwd->attn_scale = ca->attn_scale;
    bwd->dropout_p = fwd->dropout_p;
    bwd->fast_zero_fill = fwd->fast_zero_fill;
    bwd->qkv_layout = ca->qkv_layout;
    bwd->o_format = ca->o_format;
    bwd->qkv_scale_inv_format = ca->qkv_scale_inv_format;
    bwd->dqkv_layout = ca->dqkv_layout;
    bwd->attn_bias_type = fwd->attn_bias_type;
    bwd->attn_mask_type = fwd->attn_mask_type;
    bwd->softmax_type = fwd->softmax_type;
    bwd->window_size[0] = fwd->window_size[0];
    bwd->window_size[1] = fwd->window_size[1];
    if (sp_mutant("window_unnormalised") && fattn_mask_has_causal(fwd->attn_mask_type))
        bwd->window_size[1] = -1; /* causal's (left, 0) taken back to (left, -1) */
    bwd->bottom_right_diagonal = ca->bottom_right_diagonal ? 1 : 0;
    bwd->fused_attention_backend = ca->fused_attention_backend;
    bwd->use_FAv2_bwd = fwd->use_FAv2_bwd;
    bwd->deterministic = fwd->deterministic;
    bwd->engine = fwd->engine;
    bwd->poison = fwd->poison;
    return FATTN_OK;
}

/* ------------------------------------------------------------------------ */
/* backward_impl                                                            */
/* ------------------------------------------------------------------------ */

fattn_qkv_layout fattn_split_reload_layout(fattn_qkv_layout layout, bool offloaded)
{
    if (!offloaded)
        return layout;
    switch (layout) {
    case FATTN_LAYOUT_SB3HD:
    case FATTN_LAYOUT_SBH3D:
    case FATTN_LAYOUT_SBHD_SB2HD:
    case FATTN_LAYOUT_SBHD_SBH2D:
        return FATTN_LAYOUT_SBHD_SBHD_SBHD;
    case FATTN_LAYOUT_BS3HD:
    case FATTN_LAYOUT_BSH3D:
    case FATTN_LAYOUT_BSHD_BS2HD:
    case FATTN_LAYOUT_BSHD_BSH2D:
        return FATTN_LAYOUT_BSHD_BSHD_BSHD;
    case FATTN_LAYOUT_T3HD:
    case FATTN_LAYOUT_TH3D:
    case FATTN_LAYOUT_THD_T2HD:
    case FATTN_LAYOUT_THD_TH2D:
        return FATTN_LAYOUT_THD_THD_THD;
    default:
        return layout;
    }
}

fattn_status fattn_split_backward_impl(const fattn_bwd_args *bwd, fattn_split_grads *g)
{
    if (!bwd || !g)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_backward_impl: NULL argument");
    memset(g, 0, sizeof *g);
    fattn_status st = sp_check_bwd_args(bwd);
    if (st != FATTN_OK)
        return st;
    if (bwd->use_FAv2_bwd)
        return fattn_error(FATTN_E_UNSUPPORTED,
                           "split backward: use_FAv2_bwd (flash-attn v2 backward, "
                           "backends.py:1775) is not available in fattn");
    if (bwd->fp8)
        return fattn_error(FATTN_E_UNSUPPORTED,
                           "split backward: FP8 execution is not implemented");

    fattn_dtype dt = bwd->nominal_dtype;
    fattn_qkv_layout_group grp = fattn_layout_group(bwd->dqkv_layout);
    fattn_tensor views[3];
    g->dq = g->dk = g->dv = g->d_bias = g->d_softmax_offset = fattn_tensor_empty();

    /* attention.cpp:398-452: dQKV packed per the dqkv_layout group. */
    if (grp == FATTN_LAYOUT_GROUP_3HD || grp == FATTN_LAYOUT_GROUP_H3D) {
        int at = grp == FATTN_LAYOUT_GROUP_3HD ? bwd->q.ndim - 2 : bwd->q.ndim - 1;
        st = sp_alloc_packed(bwd->poison, &g->own_storage[0], dt, &bwd->q, 3, at, views);
        if (st == FATTN_OK) {
            g->dq = views[0];
            g->dk = views[1];
            g->dv = views[2];
        }
    } else if (grp == FATTN_LAYOUT_GROUP_HD_2HD || grp == FATTN_LAYOUT_GROUP_HD_H2D) {
        st = sp_alloc_packed(bwd->poison, &g->own_storage[0], dt, &bwd->q, 1, 0, views);
        if (st == FATTN_OK) {
            g->dq = views[0];
            int at = grp == FATTN_LAYOUT_GROUP_HD_2HD ? bwd->k.ndim - 2 : bwd->k.ndim - 1;
            st = sp_alloc_packed(bwd->poison, &g->own_storage[1], dt, &bwd->k, 2, at, views);
        }
        if (st == FATTN_OK) {
            g->dk = views[0];
            g->dv = views[1];
        }
    } else if (grp == FATTN_LAYOUT_GROUP_HD_HD_HD || grp == FATTN_LAYOUT_GROUP_SD_SD_SD) {
        const fattn_tensor *like[3] = {&bwd->q, &bwd->k, &bwd->v};
        fattn_tensor *dst[3] = {&g->dq, &g->dk, &g->dv};
        for (int i = 0; i < 3 && st == FATTN_OK; i++) {
            st = sp_alloc_packed(bwd->poison, &g->own_storage[i], dt, like[i], 1, 0, views);
            if (st == FATTN_OK)
                *dst[i] = views[0];
        }
    } else {
        st = fattn_error(FATTN_E_LAYOUT, "split backward: dqkv_layout %d not supported",
                         (int)bwd->dqkv_layout);
    }
    if (st != FATTN_OK)
        goto fail;
    /* attention.cpp:492-498: THD grads zero-filled. */
    if (fattn_layout_q_format(bwd->dqkv_layout) == FATTN_FORMAT_THD)
        fattn_tensor_fill_bits(&g->dq, 0);
    if (fattn_layout_kv_format(bwd->dqkv_layout) == FATTN_FORMAT_THD) {
        fattn_tensor_fill_bits(&g->dk, 0);
        fattn_tensor_fill_bits(&g->dv, 0);
    }

    /* Slots -> list, right before the engine call. */
    fattn_aux_pack pack;
    memset(&pack, 0, sizeof pack);
    pack.t[pack.n++] = bwd->softmax_stats;
    pack.t[pack.n++] = bwd->rng_state;
    bool tensor_bias = bwd->attn_bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
                       bwd->attn_bias_type == FATTN_BIAS_POST_SCALE_BIAS;
    if (tensor_bias)
        pack.t[pack.n++] = bwd->aux_bias;
    if (bwd->softmax_type != FATTN_SOFTMAX_VANILLA)
        pack.t[pack.n++] = bwd->aux_softmax_offset;

    /* attention.cpp:543-559: dBias shaped like the last pack entry (the
     * support table refused bias + sink, so that entry is the bias),
     * zero-filled for a THD layout. */
    if (tensor_bias) {
        const fattn_tensor *last = &pack.t[pack.n - 1];
        st = sp_alloc_out(bwd->poison, &g->own_d_bias, dt, last->ndim, last->shape);
        if (st != FATTN_OK)
            goto fail;
        if (fattn_layout_format(bwd->qkv_layout) == FATTN_FORMAT_THD)
            fattn_tensor_fill_bits(&g->own_d_bias, 0);
        g->d_bias = g->own_d_bias;
    }
    if (bwd->softmax_type != FATTN_SOFTMAX_VANILLA) {
        int64_t os[4] = {1, bwd->q.shape[sp_heads_dim(fattn_layout_q_format(bwd->qkv_layout))],
                         1, 1};
        st = sp_alloc_out(bwd->poison, &g->own_d_softmax_offset, FATTN_DTYPE_FLOAT32, 4, os);
        if (st != FATTN_OK)
            goto fail;
        g->d_softmax_offset = g->own_d_softmax_offset;
    }

    fattn_bwd_params p;
    memset(&p, 0, sizeof p);
    p.q = bwd->q;
    p.k = bwd->k;
    p.v = bwd->v;
    p.o = bwd->out;
    p.d_o = bwd->d_out;
    p.aux = &pack;
    p.dq = g->dq;
    p.dk = g->dk;
    p.dv = g->dv;
    p.d_bias = g->d_bias;
    p.d_softmax_offset = g->d_softmax_offset;
    p.cu_seqlens_q = bwd->cu_seqlens_q;
    p.cu_seqlens_kv = bwd->cu_seqlens_kv;
    p.cu_seqlens_q_padded = bwd->cu_seqlens_q_padded;
    p.cu_seqlens_kv_padded = bwd->cu_seqlens_kv_padded;
    p.max_seqlen_q = bwd->max_seqlen_q;
    p.max_seqlen_kv = bwd->max_seqlen_kv;
    p.attn_scale = bwd->attn_scale;
    p.dropout = bwd->dropout_p;
    p.qkv_layout = bwd->qkv_layout;
    p.o_format = bwd->o_format;
    p.do_format = bwd->o_format;
    p.dqkv_layout = bwd->dqkv_layout;
    p.bias_type = bwd->attn_bias_type;
    p.mask_type = bwd->attn_mask_type;
    p.softmax_type = bwd->softmax_type;
    p.window_size_left = bwd->window_size[0];
    p.window_size_right = bwd->window_size[1];
    p.bottom_right_diagonal = bwd->bottom_right_diagonal == 1;
    p.deterministic = bwd->deterministic;
    p.cuda_graph = false;
    st = fattn_engine_bwd(bwd->engine, &p);
    if (st != FATTN_OK)
        goto fail;
    if (sp_mutant("dbias_slot")) {
        fattn_tensor t = g->d_bias;
        g->d_bias = g->d_softmax_offset;
        g->d_softmax_offset = t;
    }
    return FATTN_OK;

fail:
    fattn_split_grads_free(g);
    return st;
}

/* ------------------------------------------------------------------------ */
/* The thin wrapper                                                         */
/* ------------------------------------------------------------------------ */

fattn_status fattn_split_func_ctx_init(fattn_split_func_ctx **out)
{
    if (!out)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_func_ctx_init: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return fattn_error(FATTN_E_NOMEM, "split: cannot allocate a ctx");
    fattn_bwd_args_init(&(*out)->bwd);
    return FATTN_OK;
}

void fattn_split_func_ctx_free(fattn_split_func_ctx *ctx)
{
    if (!ctx)
        return;
    fattn_split_fwd_result_free(&ctx->fwd);
    fattn_split_grads_free(&ctx->grads);
    free(ctx);
}

fattn_status fattn_split_func_forward(fattn_split_func_ctx *ctx, const fattn_tensor *q,
                                      const fattn_tensor *k, const fattn_tensor *v,
                                      const fattn_tensor *attn_bias,
                                      const fattn_tensor *softmax_offset,
                                      const fattn_fwd_args *args, fattn_tensor *out,
                                      fattn_tensor *max_logit)
{
    if (out)
        *out = fattn_tensor_empty();
    if (max_logit)
        *max_logit = fattn_tensor_empty();
    if (!ctx || !args || !out)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_func_forward: NULL argument");
    fattn_split_fwd_result_free(&ctx->fwd);
    fattn_split_grads_free(&ctx->grads);
    ctx->has_forward = false;
    fattn_status st = fattn_split_forward_impl(args, q, k, v, attn_bias, softmax_offset,
                                               &ctx->fwd);
    if (st != FATTN_OK)
        return st;
    /* setup_ctx reads the inputs from the args: the wrapper's are these. */
    fattn_fwd_args a = *args;
    a.q = sp_opt(q);
    a.k = sp_opt(k);
    a.v = sp_opt(v);
    a.attn_bias = sp_opt(attn_bias);
    a.softmax_offset = sp_opt(softmax_offset);
    st = fattn_split_setup_ctx(&ctx->bwd, &a, &ctx->fwd.out, &ctx->fwd.ctx_attrs,
                               &ctx->fwd.to_save);
    if (st != FATTN_OK) {
        fattn_split_fwd_result_free(&ctx->fwd);
        return st;
    }
    ctx->has_forward = true;
    *out = ctx->fwd.out;
    if (max_logit)
        *max_logit = ctx->fwd.max_logit;
    return FATTN_OK;
}

fattn_status fattn_split_func_backward(fattn_split_func_ctx *ctx, const fattn_tensor *d_out,
                                       fattn_tensor grads6[6])
{
    if (!ctx || !grads6)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_split_func_backward: NULL argument");
    for (int i = 0; i < 6; i++)
        grads6[i] = fattn_tensor_empty();
    if (!ctx->has_forward)
        return fattn_error(FATTN_E_STATE, "split backward: no forward in this ctx");
    fattn_split_grads_free(&ctx->grads);
    ctx->bwd.d_out = sp_opt(d_out);
    fattn_status st = fattn_split_backward_impl(&ctx->bwd, &ctx->grads);
    ctx->bwd.d_out = fattn_tensor_empty();
    if (st != FATTN_OK)
        return st;
    grads6[0] = ctx->grads.dq;
    grads6[1] = ctx->grads.dk;
    grads6[2] = ctx->grads.dv;
    grads6[3] = ctx->grads.d_bias;
    grads6[4] = ctx->grads.d_softmax_offset;
    grads6[5] = fattn_tensor_empty(); /* args */
    return FATTN_OK;
}
