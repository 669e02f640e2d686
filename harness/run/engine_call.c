/* The engine calls a front end makes, noted by a wrapping engine and
 * written as engine_call/ groups (see engine_call.h). */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/fp8.h"

#include "digest.h"
#include "engine_call.h"

/* The most tensor arguments one call has (forward: 13 and a pack of 5). */
#define CALL_TENSORS_MAX 24

typedef struct noted_tensor {
    char name[24];                  /* the attribute */
    fattn_tensor t;                 /* as handed over (data for the naming) */
    char digest[FH_DIGEST_LEN];     /* its content then; "" for a device tensor */
} noted_tensor;

typedef struct noted_call {
    fh_call_dir dir;
    fh_h5_node *g;                  /* the scalars, set at the call */
    noted_tensor t[CALL_TENSORS_MAX];
    int n_t;
} noted_call;

struct fh_call_log {
    fattn_engine base;              /* what the front end is handed */
    fattn_engine_ops ops;           /* the inner engine's name, these operations */
    fattn_engine *inner;
    noted_call *calls;
    size_t n, cap;
};

const char *fh_call_dir_name(fh_call_dir dir)
{
    return dir == FH_CALL_FORWARD ? "forward" : "backward";
}

/* ---- names ---------------------------------------------------------------- */

void fh_call_names_add(fh_call_names *n, const char *prefix, const char *name,
                          const fattn_tensor *t)
{
    if (!t || fattn_tensor_is_empty(t) || n->n >= FH_CALL_NAMES_MAX)
        return;
    snprintf(n->name[n->n], sizeof n->name[0], "%s%s", prefix, name);
    n->t[n->n++] = *t;
}

static void names_add_below(fh_call_names *n, const char *prefix, const fh_h5_node *g)
{
    for (size_t i = 0; i < g->n_children; i++) {
        const fh_h5_node *c = g->children[i];
        if (!strcmp(c->name, "_impl"))
            continue;
        char p[FH_CALL_NAME_LEN];
        int w = snprintf(p, sizeof p, "%s%s%s", prefix, c->name, c->is_dataset ? "" : "/");
        if (w < 0 || (size_t)w >= sizeof p)
            continue; /* no recorded name is that long */
        if (c->is_dataset) {
            fattn_tensor t = fattn_tensor_view(c->data, c->dtype, c->ndim, c->shape);
            fh_call_names_add(n, "", p, &t);
        } else {
            names_add_below(n, p, c);
        }
    }
}

void fh_call_names_add_group(fh_call_names *n, const char *prefix,
                                const fh_h5_node *g)
{
    if (g)
        names_add_below(n, prefix, g);
}

/* The bytes a view's elements span: [lo, hi). */
static void span(const fattn_tensor *t, const char **lo, const char **hi)
{
    size_t esz = fattn_dtype_size(t->dtype);
    int64_t last = 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > 0 && t->strides[d] > 0)
            last += (t->shape[d] - 1) * t->strides[d];
    *lo = t->data;
    *hi = (const char *)t->data + (size_t)(last + 1) * esz;
}

/* "<source>[+<offset>]" of tensor t: the first name with its data
 * pointer, else the first whose elements hold it. */
static void source_of(const fh_call_names *names, const fattn_tensor *t, char *out, size_t n)
{
    snprintf(out, n, "unrecorded");
    if (!names || t->device != FATTN_DEVICE_HOST)
        return;
    for (int i = 0; i < names->n; i++)
        if (names->t[i].data == t->data) {
            snprintf(out, n, "%s", names->name[i]);
            return;
        }
    for (int i = 0; i < names->n; i++) {
        const char *lo, *hi, *p = t->data;
        span(&names->t[i], &lo, &hi);
        if (p > lo && p < hi) {
            size_t esz = fattn_dtype_size(names->t[i].dtype), off = (size_t)(p - lo);
            if (esz && off % esz == 0)
                snprintf(out, n, "%s+%zu", names->name[i], off / esz);
            else
                snprintf(out, n, "%s+%zuB", names->name[i], off);
            return;
        }
    }
}

static void dims_str(const int64_t *v, int nd, char *out, size_t n)
{
    int at = snprintf(out, n, "[");
    for (int i = 0; i < nd && at > 0 && (size_t)at < n; i++)
        at += snprintf(out + at, n - (size_t)at, "%s%lld", i ? "," : "", (long long)v[i]);
    if (at > 0 && (size_t)at < n)
        snprintf(out + at, n - (size_t)at, "]");
}

/* ---- noting a call -------------------------------------------------------- */

static noted_call *note_begin(fh_call_log *log, fh_call_dir dir)
{
    if (log->n == log->cap) {
        size_t cap = log->cap ? 2 * log->cap : 4;
        noted_call *c = realloc(log->calls, cap * sizeof *c);
        if (!c)
            return NULL;
        log->calls = c;
        log->cap = cap;
    }
    noted_call *c = &log->calls[log->n];
    memset(c, 0, sizeof *c);
    c->dir = dir;
    if (fh_h5_node_new_group(fh_call_dir_name(dir), &c->g) != FATTN_OK)
        return NULL;
    log->n++;
    return c;
}

/* A tensor argument: its descriptor now, its digest of the content the
 * engine is handed (gathered in C order, as the run file stores tensors). */
static fattn_status note_tensor(noted_call *c, const char *name, const fattn_tensor *t)
{
    if (fattn_tensor_is_empty(t))
        return FATTN_OK;
    assert(c->n_t < CALL_TENSORS_MAX);
    noted_tensor *x = &c->t[c->n_t++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->t = *t;
    x->digest[0] = '\0';
    if (t->device != FATTN_DEVICE_HOST)
        return FATTN_OK;
    size_t nb = (size_t)fattn_tensor_numel(t) * fattn_dtype_size(t->dtype);
    if (fattn_tensor_is_contiguous(t)) { /* C order already: no copy */
        fh_digest_bytes(t->data, nb, x->digest);
        return FATTN_OK;
    }
    void *buf = malloc(nb ? nb : 1);
    if (!buf)
        return fattn_error(FATTN_E_NOMEM, "engine call: out of memory for %s", name);
    fattn_tensor_gather(t, buf);
    fh_digest_bytes(buf, nb, x->digest);
    free(buf);
    return FATTN_OK;
}

static fattn_status note_common(noted_call *c, const fattn_attn_common *a)
{
    fh_h5_node *g = c->g;
    fattn_status st;
    if ((st = note_tensor(c, "q", &a->q)) != FATTN_OK ||
        (st = note_tensor(c, "k", &a->k)) != FATTN_OK ||
        (st = note_tensor(c, "v", &a->v)) != FATTN_OK ||
        (st = note_tensor(c, "o", &a->o)) != FATTN_OK ||
        (st = note_tensor(c, "cu_seqlens_q", &a->cu_seqlens_q)) != FATTN_OK ||
        (st = note_tensor(c, "cu_seqlens_kv", &a->cu_seqlens_kv)) != FATTN_OK ||
        (st = note_tensor(c, "cu_seqlens_q_padded", &a->cu_seqlens_q_padded)) != FATTN_OK ||
        (st = note_tensor(c, "cu_seqlens_kv_padded", &a->cu_seqlens_kv_padded)) != FATTN_OK)
        return st;
    if ((st = fh_h5_node_set_int64(g, "max_seqlen_q", a->max_seqlen_q)) != FATTN_OK ||
        (st = fh_h5_node_set_int64(g, "max_seqlen_kv", a->max_seqlen_kv)) != FATTN_OK ||
        (st = fh_h5_node_set_float32(g, "attn_scale", a->attn_scale)) != FATTN_OK ||
        (st = fh_h5_node_set_float32(g, "dropout", a->dropout)) != FATTN_OK ||
        (st = fh_h5_node_set_string(g, "qkv_layout", fattn_layout_name(a->qkv_layout))) !=
            FATTN_OK ||
        (st = fh_h5_node_set_string(g, "o_format", fattn_format_name(a->o_format))) !=
            FATTN_OK ||
        (st = fh_h5_node_set_string(g, "bias_type", fattn_bias_type_name(a->bias_type))) !=
            FATTN_OK ||
        (st = fh_h5_node_set_string(g, "mask_type", fattn_mask_type_name(a->mask_type))) !=
            FATTN_OK ||
        (st = fh_h5_node_set_string(g, "softmax_type",
                                       fattn_softmax_type_name(a->softmax_type))) != FATTN_OK ||
        (st = fh_h5_node_set_int64(g, "window_size_left", a->window_size_left)) != FATTN_OK ||
        (st = fh_h5_node_set_int64(g, "window_size_right", a->window_size_right)) != FATTN_OK ||
        (st = fh_h5_node_set_uint8(g, "bottom_right_diagonal", a->bottom_right_diagonal)) !=
            FATTN_OK)
        return st;
    return fh_h5_node_set_uint8(g, "cuda_graph", a->cuda_graph);
}

static fattn_status note_aux(noted_call *c, const fattn_aux_pack *aux)
{
    for (int i = 0; aux && i < aux->n && i < FATTN_AUX_MAX; i++) {
        char name[16];
        snprintf(name, sizeof name, "aux[%d]", i);
        fattn_status st = note_tensor(c, name, &aux->t[i]);
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

/* FP8 scaling factors as float32 attributes fp8.<name>; an amax the call
 * writes is an output: only that it is asked for is an argument. */
typedef struct fp8_field {
    const char *name;
    float v;
} fp8_field;

static fattn_status note_fp8(fh_h5_node *g, const fp8_field *f, size_t nf,
                             const float *const *amax, const char *const *amax_names, size_t na,
                             const char *const *dtype_names, const fattn_dtype *dtypes, size_t nd)
{
    fattn_status st;
    char name[48];
    for (size_t i = 0; i < nf; i++) {
        snprintf(name, sizeof name, "fp8.%s", f[i].name);
        if ((st = fh_h5_node_set_float32(g, name, f[i].v)) != FATTN_OK)
            return st;
    }
    for (size_t i = 0; i < na; i++) {
        snprintf(name, sizeof name, "fp8.%s", amax_names[i]);
        if ((st = fh_h5_node_set_uint8(g, name, amax[i] != NULL)) != FATTN_OK)
            return st;
    }
    for (size_t i = 0; i < nd; i++) {
        snprintf(name, sizeof name, "fp8.%s", dtype_names[i]);
        if ((st = fh_h5_node_set_string(g, name, fattn_dtype_name(dtypes[i]))) != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

static fattn_status note_fwd(fh_call_log *log, const fattn_fwd_params *p)
{
    noted_call *c = note_begin(log, FH_CALL_FORWARD);
    if (!c)
        return fattn_error(FATTN_E_NOMEM, "engine call: out of memory");
    fattn_status st;
    if ((st = note_common(c, &p->attn)) != FATTN_OK ||
        (st = note_tensor(c, "bias", &p->bias)) != FATTN_OK ||
        (st = note_tensor(c, "softmax_offset", &p->softmax_offset)) != FATTN_OK ||
        (st = note_tensor(c, "page_table_k", &p->page_table_k)) != FATTN_OK ||
        (st = note_tensor(c, "page_table_v", &p->page_table_v)) != FATTN_OK ||
        (st = note_tensor(c, "rng_state", &p->rng_state)) != FATTN_OK ||
        (st = note_aux(c, p->aux)) != FATTN_OK ||
        (st = fh_h5_node_set_uint8(c->g, "is_training", p->is_training)) != FATTN_OK ||
        (st = fh_h5_node_set_uint8(c->g, "return_max_logit", p->return_max_logit)) != FATTN_OK)
        return st;
    if (p->fp8) {
        const fattn_fp8_fwd *f = p->fp8;
        const fp8_field fs[] = {{"descale_q", f->descale_q}, {"descale_k", f->descale_k},
                                {"descale_v", f->descale_v}, {"descale_s", f->descale_s},
                                {"scale_s", f->scale_s},     {"scale_o", f->scale_o}};
        const float *const am[] = {f->amax_s, f->amax_o};
        static const char *const an[] = {"amax_s", "amax_o"}, *const dn[] = {"s_dtype"};
        return note_fp8(c->g, fs, 6, am, an, 2, dn, &f->s_dtype, 1);
    }
    return FATTN_OK;
}

static fattn_status note_bwd(fh_call_log *log, const fattn_bwd_params *p)
{
    noted_call *c = note_begin(log, FH_CALL_BACKWARD);
    if (!c)
        return fattn_error(FATTN_E_NOMEM, "engine call: out of memory");
    fattn_status st;
    if ((st = note_common(c, &p->attn)) != FATTN_OK ||
        (st = note_tensor(c, "d_o", &p->d_o)) != FATTN_OK ||
        (st = note_aux(c, p->aux)) != FATTN_OK ||
        (st = note_tensor(c, "dq", &p->dq)) != FATTN_OK ||
        (st = note_tensor(c, "dk", &p->dk)) != FATTN_OK ||
        (st = note_tensor(c, "dv", &p->dv)) != FATTN_OK ||
        (st = note_tensor(c, "d_bias", &p->d_bias)) != FATTN_OK ||
        (st = note_tensor(c, "d_softmax_offset", &p->d_softmax_offset)) != FATTN_OK ||
        (st = fh_h5_node_set_string(c->g, "do_format", fattn_format_name(p->do_format))) !=
            FATTN_OK ||
        (st = fh_h5_node_set_string(c->g, "dqkv_layout", fattn_layout_name(p->dqkv_layout))) !=
            FATTN_OK ||
        (st = fh_h5_node_set_uint8(c->g, "deterministic", p->deterministic)) != FATTN_OK)
        return st;
    if (p->fp8) {
        const fattn_fp8_bwd *f = p->fp8;
        const fp8_field fs[] = {
            {"descale_q", f->descale_q},   {"descale_k", f->descale_k},
            {"descale_v", f->descale_v},   {"descale_o", f->descale_o},
            {"descale_do", f->descale_do}, {"descale_s", f->descale_s},
            {"scale_s", f->scale_s},       {"descale_dp", f->descale_dp},
            {"scale_dp", f->scale_dp},     {"scale_dq", f->scale_dq},
            {"scale_dk", f->scale_dk},     {"scale_dv", f->scale_dv}};
        const float *const am[] = {f->amax_dp, f->amax_dq, f->amax_dk, f->amax_dv};
        static const char *const an[] = {"amax_dp", "amax_dq", "amax_dk", "amax_dv"};
        static const char *const dn[] = {"s_dtype", "dp_dtype"};
        const fattn_dtype dt[] = {f->s_dtype, f->dp_dtype};
        return note_fp8(c->g, fs, 12, am, an, 4, dn, dt, 2);
    }
    return FATTN_OK;
}

/* ---- the wrapping engine ---------------------------------------------------- */

static fh_call_log *log_of(const fattn_engine *e)
{
    return (fh_call_log *)e->impl;
}

/* The dispatch has validated and resolved the call: note it as the front
 * end handed it, then the inner engine runs it as it is (as the test
 * variants do). A note that cannot be made fails the call. */
static fattn_status log_fwd(fattn_engine *e, const fattn_fwd_params *p, const fattn_fwd_call *c)
{
    fh_call_log *log = log_of(e);
    fattn_status st = note_fwd(log, p);
    if (st != FATTN_OK)
        return st;
    return log->inner->ops->fwd(log->inner, p, c);
}

static fattn_status log_bwd(fattn_engine *e, const fattn_bwd_params *p, const fattn_bwd_call *c)
{
    fh_call_log *log = log_of(e);
    fattn_status st = note_bwd(log, p);
    if (st != FATTN_OK)
        return st;
    return log->inner->ops->bwd(log->inner, p, c);
}

static bool log_supports(const fattn_engine *e, fattn_engine_query q)
{
    return fattn_engine_supports(log_of(e)->inner, q);
}

static void log_report(const fattn_engine *e, fattn_engine_report *out)
{
    *out = fattn_engine_last_report(log_of(e)->inner);
}

static long log_cudnn_version(const fattn_engine *e)
{
    return fattn_engine_cudnn_version(log_of(e)->inner);
}

fattn_status fh_call_log_open(fattn_engine *inner, fh_call_log **out)
{
    assert(inner && inner->ops && out);
    fh_call_log *log = calloc(1, sizeof *log);
    if (!log)
        return fattn_error(FATTN_E_NOMEM, "engine call log: out of memory");
    log->inner = inner;
    log->ops = (fattn_engine_ops){.name = inner->ops->name, .who_fwd = inner->ops->who_fwd,
                                  .who_bwd = inner->ops->who_bwd, .fwd = log_fwd,
                                  .bwd = log_bwd, .supports = log_supports,
                                  .report = log_report, .free = NULL,
                                  .cudnn_version = log_cudnn_version};
    log->base.ops = &log->ops;
    log->base.impl = log;
    *out = log;
    return FATTN_OK;
}

fattn_engine *fh_call_log_engine(fh_call_log *log)
{
    return &log->base;
}

size_t fh_call_log_pending(const fh_call_log *log, fh_call_dir dir)
{
    size_t k = 0;
    for (size_t i = 0; i < log->n; i++)
        k += log->calls[i].dir == dir;
    return k;
}

/* Drop the calls of dir, keeping the others in order. */
static void drop(fh_call_log *log, fh_call_dir dir)
{
    size_t k = 0;
    for (size_t i = 0; i < log->n; i++) {
        if (log->calls[i].dir == dir)
            fh_h5_node_free(log->calls[i].g);
        else
            log->calls[k++] = log->calls[i];
    }
    log->n = k;
}

void fh_call_log_discard(fh_call_log *log, fh_call_dir dir)
{
    drop(log, dir);
}

/* The group name of the k-th call (0-based) of a direction. */
static void call_group_name(fh_call_dir dir, size_t k, char *out, size_t n)
{
    if (k == 0)
        snprintf(out, n, "%s", fh_call_dir_name(dir));
    else
        snprintf(out, n, "%s.%zu", fh_call_dir_name(dir), k + 1);
}

static fattn_status write_call(noted_call *c, const fh_call_names *names, fh_h5_node *ec,
                               const char *gname)
{
    for (int i = 0; i < c->n_t; i++) {
        const noted_tensor *x = &c->t[i];
        char shape[128], strides[160], src[FH_CALL_NAME_LEN + 24], v[512];
        dims_str(x->t.shape, x->t.ndim, shape, sizeof shape);
        dims_str(x->t.strides, x->t.ndim, strides, sizeof strides);
        source_of(names, &x->t, src, sizeof src);
        snprintf(v, sizeof v, "%s %s strides %s %s %s", fattn_dtype_name(x->t.dtype), shape,
                 strides, src, x->digest[0] ? x->digest : "device");
        fattn_status st = fh_h5_node_set_string(c->g, x->name, v);
        if (st != FATTN_OK)
            return st;
    }
    if (fh_h5_node_find(ec, gname))
        return fattn_error(FATTN_E_STATE, "engine calls: %s/%s written twice",
                           FH_ENGINE_CALL_GROUP, gname);
    free(c->g->name);
    if (!(c->g->name = fh_runtree_strdup(gname)))
        return fattn_error(FATTN_E_NOMEM, "engine calls: out of memory");
    fattn_status st = fh_h5_node_adopt(ec, c->g);
    if (st != FATTN_OK)
        return st;
    c->g = NULL; /* the tree owns it now */
    return FATTN_OK;
}

fattn_status fh_call_log_write(fh_call_log *log, fh_call_dir dir,
                                  const fh_call_names *names, fh_h5_node *parent)
{
    size_t k = 0;
    fattn_status st = FATTN_OK;
    fh_h5_node *ec = NULL;
    for (size_t i = 0; i < log->n; i++) {
        noted_call *c = &log->calls[i];
        if (c->dir != dir)
            continue;
        char gname[32];
        call_group_name(dir, k++, gname, sizeof gname);
        if (!ec && (st = fh_h5_node_group(parent, FH_ENGINE_CALL_GROUP, &ec)) != FATTN_OK)
            goto out;
        if ((st = write_call(c, names, ec, gname)) != FATTN_OK)
            goto out;
    }
out:
    drop(log, dir);
    return st;
}

void fh_call_log_free(fh_call_log *log)
{
    if (!log)
        return;
    for (size_t i = 0; i < log->n; i++)
        fh_h5_node_free(log->calls[i].g);
    free(log->calls);
    free(log);
}

fattn_status fh_call_copy(const fh_h5_node *from, fh_call_dir dir, fh_h5_node *to)
{
    const fh_h5_node *ec = fh_h5_node_find(from, FH_ENGINE_CALL_GROUP);
    fh_h5_node *dst = NULL;
    fattn_status st;
    for (size_t k = 0; ec; k++) {
        char gname[32];
        call_group_name(dir, k, gname, sizeof gname);
        const fh_h5_node *g = fh_h5_node_find(ec, gname);
        if (!g)
            break;
        if (!dst && (st = fh_h5_node_group(to, FH_ENGINE_CALL_GROUP, &dst)) != FATTN_OK)
            return st;
        if ((st = fh_h5_node_copy(g, dst, NULL)) != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}
