/* Engine dispatch: the one place front ends call into an engine.
 *
 * TE's aux-pack protocol lives here once: the describing first forward call
 * (aux->n == 0), the entry count and Stats/Max shape checks of the executing
 * call, and the slot arithmetic. The geometry is validated here too
 * (core/geom.h), before any engine runs, so every engine starts from the
 * same checked parameters.
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "core/engine_gaps.h"
#include "core/geom.h"
#include "fattn/clock.h"
#include "fattn/engine.h"
#include "fattn/support.h"

/* What an engine cannot run is refused by the support table's rows for the
 * engine (status FATTN_E_UNSUPPORTED) before it sees the call: the engine's
 * gaps are rows, never checks of its own. The query holds what those rows
 * read. */
typedef struct gap_call {
    const fattn_attn_common *a; /* the options both calls share */
    bool training, max_logit, fp8, at_backward;
} gap_call;

/* A tensor's last dim (the head dim in every format); 0 for a tensor
 * without dims, which the geometry refuses after the gaps. */
static int64_t head_dim(const fattn_tensor *t)
{
    return t->ndim >= 1 && t->ndim <= FATTN_MAX_DIMS ? t->shape[t->ndim - 1] : 0;
}

static fattn_status engine_gaps(unsigned engine, long cudnn_version, int sm, const gap_call *c)
{
    fattn_support_query sq;
    fattn_support_query_init(&sq);
    const fattn_attn_common *a = c->a;
    sq.q_dtype = a->q.dtype;
    sq.kv_dtype = a->k.dtype;
    sq.o_dtype = a->o.dtype;
    sq.d_qk = head_dim(&a->q);
    sq.d_v = head_dim(&a->v);
    sq.bias_type = a->bias_type;
    sq.mask_type = a->mask_type;
    sq.layout = a->qkv_layout;
    sq.sq = a->max_seqlen_q;
    sq.skv = a->max_seqlen_kv;
    sq.softmax_type = a->softmax_type;
    sq.dropout = a->dropout;
    sq.window_left = a->window_size_left;
    sq.window_right = a->window_size_right;
    sq.bottom_right_diagonal = a->bottom_right_diagonal;
    sq.is_training = c->training;
    sq.return_max_logit = c->max_logit;
    sq.fp8 = c->fp8;
    sq.at_backward = c->at_backward;
    sq.cudnn_version = cudnn_version;
    sq.sm = sm;
    return fattn_support_check_engine(&sq, engine, NULL);
}

fattn_status fattn__engine_gaps_fwd(const fattn_fwd_params *p, unsigned engine,
                                    long cudnn_version, int sm)
{
    gap_call c = {.a = &p->attn, .training = p->is_training, .max_logit = p->return_max_logit,
                  .fp8 = p->fp8 != NULL, .at_backward = false};
    return engine_gaps(engine, cudnn_version, sm, &c);
}

fattn_status fattn__engine_gaps_bwd(const fattn_bwd_params *p, unsigned engine,
                                    long cudnn_version, int sm)
{
    gap_call c = {.a = &p->attn, .training = true, .max_logit = false, .fp8 = p->fp8 != NULL,
                  .at_backward = true};
    return engine_gaps(engine, cudnn_version, sm, &c);
}

long fattn_engine_cudnn_version(const fattn_engine *e)
{
    return e->ops->cudnn_version ? e->ops->cudnn_version(e) : FATTN_SUPPORT_CUDNN_REFERENCE;
}

int fattn_engine_sm(const fattn_engine *e)
{
    return e->ops->sm ? e->ops->sm(e) : FATTN_SUPPORT_SM_REFERENCE;
}

static bool aux_has_bias(fattn_bias_type bias)
{
    return bias == FATTN_BIAS_PRE_SCALE_BIAS || bias == FATTN_BIAS_POST_SCALE_BIAS;
}

fattn_aux_layout fattn_aux_layout_fwd(fattn_bias_type bias, fattn_softmax_type softmax,
                                      bool return_max_logit)
{
    fattn_aux_layout l = {.n = 0, .stats = -1, .max = -1, .rng_state = -1, .bias = -1,
                          .softmax_offset = -1};
    l.stats = l.n++;
    if (return_max_logit)
        l.max = l.n++;
    l.rng_state = l.n++;
    if (aux_has_bias(bias))
        l.bias = l.n++;
    if (softmax != FATTN_SOFTMAX_VANILLA)
        l.softmax_offset = l.n++;
    assert(l.n <= FATTN_AUX_MAX);
    return l;
}

fattn_aux_layout fattn_aux_layout_bwd(fattn_bias_type bias, fattn_softmax_type softmax)
{
    return fattn_aux_layout_fwd(bias, softmax, false);
}

static bool shape_is(const fattn_tensor *t, int ndim, const int64_t *shape)
{
    if (t->ndim != ndim)
        return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i])
            return false;
    return true;
}

/* What both calls' geometry takes from the options they share; the caller
 * fills bias, softmax_offset, rng_state, the page tables and apply_dropout. */
static void geom_args_common(const fattn_attn_common *c, bool fp8, const char *who,
                             fattn_geom_args *a)
{
    *a = (fattn_geom_args){
        .q = &c->q, .k = &c->k, .v = &c->v, .o = &c->o,
        .cu_q = &c->cu_seqlens_q, .cu_kv = &c->cu_seqlens_kv,
        .cu_q_pad = &c->cu_seqlens_q_padded, .cu_kv_pad = &c->cu_seqlens_kv_padded,
        .max_seqlen_q = c->max_seqlen_q, .max_seqlen_kv = c->max_seqlen_kv,
        .attn_scale = c->attn_scale, .dropout = c->dropout,
        .layout = c->qkv_layout, .o_format = c->o_format,
        .bias_type = c->bias_type, .mask_type = c->mask_type,
        .softmax_type = c->softmax_type,
        .win_left = c->window_size_left, .win_right = c->window_size_right,
        .bottom_right = c->bottom_right_diagonal,
        .fp8 = fp8,
        .who = who,
    };
}

/* The tensors the dispatch itself reads on the host (the geometry's
 * lengths, offsets, sink and dropout seed) must be host tensors whatever
 * engine runs: a device pointer there would be read as host memory. */
static fattn_status metadata_on_host(const fattn_tensor *const *t, const char *const *names,
                                     int n, const char *who)
{
    for (int i = 0; i < n; i++)
        if (!fattn_tensor_is_empty(t[i]) && t[i]->device != FATTN_DEVICE_HOST)
            return fattn_error(FATTN_E_INVALID_ARG, "%s: %s must be a host tensor (the "
                               "dispatch reads it on the host), even with device tensors",
                               who, names[i]);
    return FATTN_OK;
}

static const char *const metadata_names[] = {"cu_seqlens_q", "cu_seqlens_kv",
                                             "cu_seqlens_q_padded", "cu_seqlens_kv_padded",
                                             "rng_state", "softmax_offset",
                                             "page_table_k", "page_table_v"};

fattn_status fattn__geom_init_fwd(fattn_geom *g, const fattn_fwd_params *p, const char *who)
{
    fattn_geom_args a;
    geom_args_common(&p->attn, p->fp8 != NULL, who, &a);
    a.bias = &p->bias;
    a.softmax_offset = &p->softmax_offset;
    a.rng_state = &p->rng_state;
    a.page_table_k = &p->page_table_k;
    a.page_table_v = &p->page_table_v;
    a.apply_dropout = p->is_training && p->attn.dropout > 0.0f;
    const fattn_tensor *meta[] = {a.cu_q, a.cu_kv, a.cu_q_pad, a.cu_kv_pad, a.rng_state,
                                  a.softmax_offset, a.page_table_k, a.page_table_v};
    _Static_assert(sizeof meta / sizeof meta[0] ==
                       sizeof metadata_names / sizeof metadata_names[0],
                   "a name per metadata tensor");
    int nmeta = (int)(sizeof meta / sizeof meta[0]);
    fattn_status st = metadata_on_host(meta, metadata_names, nmeta, who);
    return st != FATTN_OK ? st : fattn__geom_init(g, &a);
}

/* nvte_fused_attn_bwd reads Bias, SoftmaxOffset and rng_state from the pack:
 * its entries in c (the layout checked), c->stats too. */
static fattn_status bwd_call_from_aux(const fattn_bwd_params *p, fattn_bwd_call *c)
{
    const fattn_aux_pack *aux = p->aux;
    if (!aux || aux->n < 2)
        return fattn_error(FATTN_E_INVALID_ARG, "backward: aux pack needs at least "
                           "[Stats, rng_state]");
    fattn_aux_layout l = fattn_aux_layout_bwd(p->attn.bias_type, p->attn.softmax_type);
    if (aux->n != l.n)
        return fattn_error(FATTN_E_INVALID_ARG, "backward: aux pack has %d entries, expected "
                           "%d ([Stats, rng_state%s%s])", aux->n, l.n,
                           l.bias >= 0 ? ", Bias" : "",
                           l.softmax_offset >= 0 ? ", SoftmaxOffset" : "");
    c->stats = aux->t[l.stats];
    c->rng_state = aux->t[l.rng_state];
    c->bias = l.bias >= 0 ? aux->t[l.bias] : fattn_tensor_empty();
    c->softmax_offset = l.softmax_offset >= 0 ? aux->t[l.softmax_offset] : fattn_tensor_empty();
    return FATTN_OK;
}

/* The backward's geometry over the pack entries c holds. */
static fattn_status geom_init_bwd_call(fattn_geom *g, const fattn_bwd_params *p,
                                       const fattn_bwd_call *c, const char *who)
{
    fattn_geom_args a;
    geom_args_common(&p->attn, p->fp8 != NULL, who, &a);
    a.bias = &c->bias;
    a.softmax_offset = &c->softmax_offset;
    a.rng_state = &c->rng_state;
    a.apply_dropout = p->attn.dropout > 0.0f;
    const fattn_tensor *meta[] = {a.cu_q, a.cu_kv, a.cu_q_pad, a.cu_kv_pad, a.rng_state,
                                  a.softmax_offset};
    /* the forward's first six: the backward has no page tables */
    _Static_assert(sizeof meta / sizeof meta[0] <=
                       sizeof metadata_names / sizeof metadata_names[0],
                   "a name per metadata tensor");
    int nmeta = (int)(sizeof meta / sizeof meta[0]);
    fattn_status st = metadata_on_host(meta, metadata_names, nmeta, who);
    return st != FATTN_OK ? st : fattn__geom_init(g, &a);
}

fattn_status fattn__geom_init_bwd(fattn_geom *g, const fattn_bwd_params *p, const char *who)
{
    fattn_bwd_call c;
    memset(&c, 0, sizeof c);
    fattn_status st = bwd_call_from_aux(p, &c);
    return st != FATTN_OK ? st : geom_init_bwd_call(g, p, &c, who);
}

/* The first call of TE's protocol: the pack's shapes and dtypes, no data. */
static void aux_describe(fattn_aux_pack *aux, const fattn_fwd_params *p, fattn_aux_layout l,
                         int sndim, const int64_t *sshape)
{
    assert(l.stats == 0 && l.rng_state > l.stats && l.n <= FATTN_AUX_MAX);
    assert(sndim >= 1 && sndim <= 4);
    aux->t[l.stats] = fattn_tensor_view(NULL, FATTN_DTYPE_FLOAT32, sndim, sshape);
    if (l.max >= 0)
        aux->t[l.max] = fattn_tensor_view(NULL, FATTN_DTYPE_FLOAT32, sndim, sshape);
    int64_t two = 2;
    aux->t[l.rng_state] = fattn_tensor_view(NULL, FATTN_DTYPE_INT64, 1, &two);
    if (l.bias >= 0) {
        aux->t[l.bias] = p->bias;
        aux->t[l.bias].data = NULL;
    }
    if (l.softmax_offset >= 0) {
        aux->t[l.softmax_offset] = p->softmax_offset;
        aux->t[l.softmax_offset].data = NULL;
    }
    aux->n = l.n;
}

fattn_status fattn_engine_fwd(fattn_engine *e, const fattn_fwd_params *p)
{
    if (!e || !e->ops || !p)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_engine_fwd: NULL engine or params");
    double t0 = fattn_now_s();
    if (!p->aux)
        return fattn_error(FATTN_E_INVALID_ARG, "forward: aux pack is NULL");
    if (p->fp8 && !fattn_engine_supports(e, FATTN_ENGINE_Q_FP8))
        return fattn_error(FATTN_E_UNSUPPORTED, "forward: the %s engine has no FP8 attention",
                           fattn_engine_name(e));
    fattn_status st =
        fattn__engine_gaps_fwd(p, fattn_engine_support_bit(e), fattn_engine_cudnn_version(e),
                               fattn_engine_sm(e));
    if (st != FATTN_OK)
        return st;
    fattn_geom g;
    st = fattn__geom_init_fwd(&g, p, e->ops->who_fwd ? e->ops->who_fwd : "forward");
    if (st != FATTN_OK)
        return st;
    fattn_aux_layout l = fattn_aux_layout_fwd(p->attn.bias_type, p->attn.softmax_type,
                                              p->return_max_logit);
    int sndim;
    int64_t sshape[4];
    fattn__geom_stats_shape(&g, &sndim, sshape);
    fattn_aux_pack *aux = p->aux;
    if (aux->n == 0) {
        aux_describe(aux, p, l, sndim, sshape);
        fattn__geom_free(&g);
        return FATTN_OK;
    }
    if (aux->n != l.n) {
        fattn__geom_free(&g);
        return fattn_error(FATTN_E_INVALID_ARG, "forward: aux pack has %d entries, expected %d",
                           aux->n, l.n);
    }
    assert(l.n >= 2 && l.n <= FATTN_AUX_MAX);
    fattn_fwd_call c = {.geom = &g, .stats = aux->t[l.stats], .max = fattn_tensor_empty(),
                        .t0 = t0};
    if (l.max >= 0)
        c.max = aux->t[l.max];
    const fattn_tensor *outs[2] = {&c.stats, &c.max};
    for (int i = 0; i < (l.max >= 0 ? 2 : 1); i++) {
        if (fattn_tensor_is_empty(outs[i]) || outs[i]->dtype != FATTN_DTYPE_FLOAT32 ||
            !shape_is(outs[i], sndim, sshape)) {
            fattn__geom_free(&g);
            return fattn_error(FATTN_E_SHAPE, "forward: aux %s must be a float32 tensor of "
                               "the shape the first call reported", i ? "Max" : "Stats");
        }
    }
    /* As TE does on the executing call, the pack's rng_state, Bias and
     * SoftmaxOffset entries become the inputs themselves. */
    aux->t[l.rng_state] = p->rng_state;
    if (l.bias >= 0)
        aux->t[l.bias] = p->bias;
    if (l.softmax_offset >= 0)
        aux->t[l.softmax_offset] = p->softmax_offset;
    assert(e->ops->fwd);
    st = e->ops->fwd(e, p, &c);
    fattn__geom_free(&g);
    return st;
}

fattn_status fattn_engine_bwd(fattn_engine *e, const fattn_bwd_params *p)
{
    if (!e || !e->ops || !p)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_engine_bwd: NULL engine or params");
    double t0 = fattn_now_s();
    if (p->fp8 && !fattn_engine_supports(e, FATTN_ENGINE_Q_FP8))
        return fattn_error(FATTN_E_UNSUPPORTED, "backward: the %s engine has no FP8 attention",
                           fattn_engine_name(e));
    fattn_status st =
        fattn__engine_gaps_bwd(p, fattn_engine_support_bit(e), fattn_engine_cudnn_version(e),
                               fattn_engine_sm(e));
    if (st != FATTN_OK)
        return st;
    fattn_bwd_call c = {.t0 = t0};
    if ((st = bwd_call_from_aux(p, &c)) != FATTN_OK)
        return st;
    fattn_geom g;
    st = geom_init_bwd_call(&g, p, &c, e->ops->who_bwd ? e->ops->who_bwd : "backward");
    if (st != FATTN_OK)
        return st;
    c.geom = &g;
    int sndim;
    int64_t sshape[4];
    fattn__geom_stats_shape(&g, &sndim, sshape);
    if (fattn_tensor_is_empty(&c.stats) || c.stats.dtype != FATTN_DTYPE_FLOAT32 ||
        !shape_is(&c.stats, sndim, sshape)) {
        fattn__geom_free(&g);
        return fattn_error(FATTN_E_SHAPE, "backward: Stats (aux[0]) must be float32 of the "
                           "forward's shape");
    }
    assert(e->ops->bwd);
    st = e->ops->bwd(e, p, &c);
    fattn__geom_free(&g);
    return st;
}

const char *fattn_engine_name(const fattn_engine *e)
{
    return (e && e->ops) ? e->ops->name : "none";
}

bool fattn_engine_supports(const fattn_engine *e, fattn_engine_query q)
{
    return e && e->ops && e->ops->supports && e->ops->supports(e, q);
}

unsigned fattn_engine_support_bit(const fattn_engine *e)
{
    return fattn_engine_supports(e, FATTN_ENGINE_Q_SUPPORT_RULES_CUDNN)
               ? FATTN_SUPPORT_ENGINE_CUDNN
               : FATTN_SUPPORT_ENGINE_CPU;
}

fattn_engine_report fattn_engine_last_report(const fattn_engine *e)
{
    fattn_engine_report r;
    memset(&r, 0, sizeof r);
    r.engine = fattn_engine_name(e);
    r.platform = r.tag = r.route = r.plan_source = "";
    if (e && e->ops && e->ops->report)
        e->ops->report(e, &r);
    return r;
}

void fattn_engine_free(fattn_engine *e)
{
    if (e && e->ops && e->ops->free)
        e->ops->free(e);
}
