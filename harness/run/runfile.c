/* Run files: provenance and full validation (see runfile.h; loading: runfile_load.c). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/cudnn.h"
#include "fattn/engine.h"
#include "fattn_config.h"
#include "fattn_git_rev.h"

#include "case.h"
#include "ctx_fields.h"
#include "engine_call.h"
#include "fe.h"
#include "runfile.h"
#include "saved_slots.h"

fattn_status fh_runfile_set_provenance(fh_h5_node *root, const char *impl,
                                          const char *backend, const fattn_engine *e)
{
    char created[32];
    fattn_status st = fh_h5_created_utc(created);
    if (st != FATTN_OK)
        return st;
    bool cpu = !fattn_engine_supports(e, FATTN_ENGINE_Q_CUDA_DEVICE);
    /* The GPU, its SM count and the library versions decide whether bitwise
     * equality with another file can be expected (docs/run-files.md). */
    fattn_cudnn_info info;
    memset(&info, 0, sizeof info);
    char sm[32] = "n/a", cuda[32] = "n/a", cudnn[32] = "n/a", cudnn_h[32] = "n/a";
    if (!cpu && fattn_cudnn_get_info(0, &info) == FATTN_OK) {
        snprintf(sm, sizeof sm, "sm_%d%d", info.cc_major, info.cc_minor);
        snprintf(cuda, sizeof cuda, "%d", info.cuda_runtime_version);
        snprintf(cudnn, sizeof cudnn, "%lld", (long long)info.cudnn_version);
        snprintf(cudnn_h, sizeof cudnn_h, "%lld", (long long)info.cudnn_header_version);
    }
#define PUT(call)                                                                          \
    if ((st = (call)) != FATTN_OK)                                                         \
        return st;
    PUT(fh_h5_node_set_string(root, "schema", FH_RUN_SCHEMA));
    PUT(fh_h5_node_set_string(root, "impl", impl));
    PUT(fh_h5_node_set_string(root, "backend", backend));
    PUT(fh_h5_node_set_string(root, "fattn_version", FATTN_VERSION));
    PUT(fh_h5_node_set_string(root, "git_rev", FH_GIT_REV));
    PUT(fh_h5_node_set_string(root, "device", cpu ? "cpu"
                                                 : info.device_name[0] ? info.device_name
                                                                       : "unknown"));
    PUT(fh_h5_node_set_string(root, "sm", sm));
    PUT(fh_h5_node_set_int64(root, "sm_count", info.sm_count));
    PUT(fh_h5_node_set_string(root, "cuda_version", cuda));
    PUT(fh_h5_node_set_string(root, "cudnn_version", cudnn));
    PUT(fh_h5_node_set_string(root, "cudnn_header_version", cudnn_h));
    PUT(fh_h5_node_set_uint8(root, "forced_deterministic_bwd", 0));
    PUT(fh_h5_node_set_int64(root, "cpu_math_version", FATTN_CPU_MATH_VERSION));
    PUT(fh_h5_node_set_string(root, "poison", "0xff bytes"));
    PUT(fh_h5_node_set_string(root, "created_utc", created));
    /* How the cuDNN engine chose its plans and backward route (the CLI's
     * FATTN_CUDNN_* variables): decides which kernels ran. */
    if (!cpu)
        PUT(fh_h5_node_set_string(root, "prov_cudnn_settings", fattn_cudnn_engine_settings(e)));
#undef PUT
    return FATTN_OK;
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* A recorded cu_seqlens array: int32 [b+1] (the caller checked the shape),
 * starting at 0, non-decreasing, last entry at most `limit`. */
static fattn_status check_cu(const char *path, const char *id, const fh_h5_node *g,
                             const char *name, int64_t b, int64_t limit)
{
    const fh_h5_node *n = fh_h5_node_find(g, name);
    if (!n)
        return FATTN_OK;
    if (!n->is_dataset || n->dtype != FATTN_DTYPE_INT32 || n->ndim != 1 || n->shape[0] != b + 1)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s must be int32 [%lld]", path, id,
                           name, (long long)(b + 1));
    const int32_t *c = n->data;
    if (c[0] != 0)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s[0] is %d, not 0", path, id, name,
                           c[0]);
    for (int64_t i = 0; i < b; i++)
        if (c[i + 1] < c[i])
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s is not monotone at %lld",
                               path, id, name, (long long)i);
    if (c[b] > limit)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s ends at %d, past %lld", path, id,
                           name, c[b], (long long)limit);
    return FATTN_OK;
}

/* ---- the objects a case may hold ----------------------------------------- */

/* One dataset a state group may hold, with the dtype and shape the case
 * implies (present false: the case has no such tensor). */
typedef struct want_ds {
    const char *name;
    fh_case_shape shape;
} want_ds;

static fh_case_shape mk_shape(fattn_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2,
                                 int64_t d3)
{
    fh_case_shape s = {.present = true, .dtype = dt, .ndim = ndim,
                          .shape = {d0, d1, d2, d3}};
    assert(ndim >= 1 && ndim <= 4);
    return s;
}

/* A tensor of the case's shape `t` as FP8 E4M3 codes (TE's forward FP8
 * dtype under HYBRID), present only on the FP8 path. */
static fh_case_shape fp8_of(const fh_case *c, fh_case_shape t)
{
    t.present = t.present && c->spec->fp8;
    t.dtype = FATTN_DTYPE_FLOAT8_E4M3FN;
    return t;
}

/* t in the case's nominal dtype: the f16 slots hold FP8 inputs dequantised. */
static fh_case_shape nominal_of(const fh_case *c, fh_case_shape t)
{
    t.dtype = c->spec->dtype;
    return t;
}

/* The shape of saved role `slot` (save_ctx/<role>, forward/_impl/<role>).
 * The fp8 roles exist only on the FP8 path (E4M3 codes). cu_seqlens are int32 [b+1]; Stats float32 [b,h,sq,1] or, for a
 * THD q, [t_q,h,1]; rng_state int64 [2]. */
static fh_case_shape role_shape(const fh_case *c, int slot)
{
    const fh_spec *s = c->spec;
    fh_case_shape none = {.present = false};
    switch ((fh_saved_slot)slot) {
    case FH_SAVED_q_fp8: return fp8_of(c, c->t.q);
    case FH_SAVED_k_fp8: return fp8_of(c, c->t.k);
    case FH_SAVED_v_fp8: return fp8_of(c, c->t.v);
    case FH_SAVED_out_fp8: return fp8_of(c, c->t.out);
    case FH_SAVED_q: return nominal_of(c, c->t.q);
    case FH_SAVED_k: return nominal_of(c, c->t.k);
    case FH_SAVED_v: return nominal_of(c, c->t.v);
    case FH_SAVED_out: return c->t.out;
    case FH_SAVED_cu_seqlens_q:
    case FH_SAVED_cu_seqlens_kv:
    case FH_SAVED_cu_seqlens_q_padded:
    case FH_SAVED_cu_seqlens_kv_padded:
        return mk_shape(FATTN_DTYPE_INT32, 1, s->b + 1, 0, 0, 0);
    case FH_SAVED_softmax_stats:
        return c->q_format == FATTN_FORMAT_THD
                   ? mk_shape(FATTN_DTYPE_FLOAT32, 3, c->t_q, s->h, 1, 0)
                   : mk_shape(FATTN_DTYPE_FLOAT32, 4, s->b, s->h, s->sq, 1);
    case FH_SAVED_rng_state: return mk_shape(FATTN_DTYPE_INT64, 1, 2, 0, 0, 0);
    case FH_SAVED_aux_bias: return c->t.attn_bias;
    case FH_SAVED_aux_softmax_offset: return c->t.softmax_offset;
    default: return none;
    }
}

/* Every child of state group `g` (its path below the case: `where`) must
 * be one of want[0..n) as a dataset of the case's dtype and shape, or one
 * of the group names in subgroups (NULL-terminated) as a group; anything
 * else is an unknown object. A dataset named in want whose shape is not
 * present is one the case cannot have. */
static fattn_status check_children(const char *path, const char *id, const fh_h5_node *g,
                                   const char *where, const want_ds *want, size_t n,
                                   const char *const *subgroups)
{
    for (size_t i = 0; i < g->n_children; i++) {
        const fh_h5_node *ch = g->children[i];
        bool is_sub = false;
        for (size_t k = 0; subgroups && subgroups[k]; k++)
            is_sub = is_sub || strcmp(subgroups[k], ch->name) == 0;
        if (is_sub) {
            if (ch->is_dataset)
                return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s/%s is a dataset "
                                   "where a group belongs", path, id, where, ch->name);
            continue;
        }
        const want_ds *w = NULL;
        for (size_t k = 0; k < n && !w; k++)
            if (strcmp(want[k].name, ch->name) == 0)
                w = &want[k];
        if (!w)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s/%s: unknown object (the "
                               "schema has no %s there)", path, id, where, ch->name,
                               ch->is_dataset ? "such dataset" : "such group");
        if (!ch->is_dataset)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s/%s is a group where a "
                               "dataset belongs", path, id, where, ch->name);
        const fh_case_shape *e = &w->shape;
        if (!e->present)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s/%s should not exist (the "
                               "spec makes no such tensor)", path, id, where, ch->name);
        bool same = ch->dtype == e->dtype && ch->ndim == e->ndim;
        for (int d = 0; same && d < e->ndim; d++)
            same = ch->shape[d] == e->shape[d];
        if (!same) {
            char a[96], b[96];
            shape_str(e->ndim, e->shape, a, sizeof a);
            shape_str(ch->ndim, ch->shape, b, sizeof b);
            return fattn_error(FATTN_E_INVALID_FILE,
                               "%s: case %s: %s/%s is %s %s, the spec makes %s %s", path, id,
                               where, ch->name, fattn_dtype_name(ch->dtype), b,
                               fattn_dtype_name(e->dtype), a);
        }
    }
    return FATTN_OK;
}

/* The datasets names[0..n) of g that exist (a golden may keep them as
 * digests) are Float8Tensors: each carries a float32 scale_inv, finite and
 * above 0, or the file cannot be replayed. */
static fattn_status check_scale_invs(const char *path, const char *id, const fh_h5_node *g,
                                     const char *where, const char *const *names, int n)
{
    for (int i = 0; g && i < n; i++) {
        const fh_h5_node *ds = fh_h5_node_find(g, names[i]);
        const fh_h5_attr *a = ds && ds->is_dataset ? fh_h5_node_attr(ds, "scale_inv") : NULL;
        if (ds && ds->is_dataset &&
            (!a || a->kind != FH_H5_ATTR_FLOAT32 || !(a->f32 > 0.0f) || isinf(a->f32)))
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s/%s is FP8 but carries no "
                               "float32 scale_inv, finite and > 0 (its Float8Tensor's)", path,
                               id, where, names[i]);
    }
    return FATTN_OK;
}

static int cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* A paged case's recorded page table (int32 [rows, pages per sequence],
 * rows the batch or max_batch_size; its shape checked): every entry names
 * a page of the cache, [0, num_pages), and no page serves two places of
 * one sequence: the pages that hold sequence i's kv_len positions, the
 * first ceil(kv_len / page_size) of its row, are distinct (InferenceParams
 * gives each sequence pages of its own; no spec key shares them). The
 * rest of a row, and the rows past the batch, are slots TE's cache
 * manager leaves unused (zero). No engine reads a stored table, but
 * inspect calls the file valid and replay may hand it on. */
static fattn_status check_page_table(const char *path, const fh_case *c,
                                     const fh_h5_node *g, const char *name)
{
    const fh_spec *s = c->spec;
    const fh_h5_node *n = fh_h5_node_find(g, name);
    if (!n || !n->is_dataset || n->ndim != 2 || !n->data)
        return FATTN_OK; /* absent (a golden's digest) or refused by shape already */
    int64_t rows = n->shape[0], per = n->shape[1];
    const int32_t *t = n->data;
    for (int64_t k = 0; k < rows * per; k++)
        if (t[k] < 0 || t[k] >= s->num_pages)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: inputs/%s[%lld][%lld] is %d, "
                               "not a page of the cache [0, %lld)", path, s->id, name,
                               (long long)(k / per), (long long)(k % per), t[k],
                               (long long)s->num_pages);
    int32_t *row = malloc((size_t)(per ? per : 1) * sizeof *row);
    if (!row)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
    fattn_status st = FATTN_OK;
    for (int64_t i = 0; i < rows && i < s->b; i++) {
        int64_t len = c->seqlens_kv ? c->seqlens_kv[i] : s->skv;
        int64_t used = (len + s->page_size - 1) / s->page_size;
        used = used > per ? per : used;
        memcpy(row, t + i * per, (size_t)used * sizeof *row);
        qsort(row, (size_t)used, sizeof *row, cmp_i32);
        for (int64_t j = 1; j < used; j++)
            if (row[j] == row[j - 1]) {
                st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: inputs/%s: sequence %lld "
                                 "holds page %d twice among the %lld pages of its %lld positions "
                                 "(a page serves one place of one sequence)", path, s->id, name,
                                 (long long)i, row[j], (long long)used, (long long)len);
                goto out;
            }
    }
out:
    free(row);
    return st;
}

/* inputs/: every tensor the case has is there (or kept as its digest
 * only, in a golden), nothing else is. */
static fattn_status check_inputs(const char *path, const fh_case *c, const fh_h5_node *g)
{
    const char *id = c->spec->id;
    fh_case_shape cu = role_shape(c, FH_SAVED_cu_seqlens_q), none = {.present = false};
    want_ds want[] = {
        {"q", c->t.q}, {"k", c->t.k}, {"v", c->t.v}, {"attn_bias", c->t.attn_bias},
        {"softmax_offset", c->t.softmax_offset}, {"cu_seqlens_q", cu}, {"cu_seqlens_kv", cu},
        {"cu_seqlens_q_padded", c->padding ? cu : none},
        {"cu_seqlens_kv_padded", c->padding ? cu : none}, {"d_out", c->t.d_out},
        {"page_table_k", c->t.page_table_k}, {"page_table_v", c->t.page_table_v},
    };
    size_t n = sizeof want / sizeof want[0];
    fattn_status st = check_children(path, id, g, "inputs", want, n, NULL);
    if (st != FATTN_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        char dname[96];
        snprintf(dname, sizeof dname, "digest:%s", want[i].name);
        bool stored = fh_h5_node_find(g, want[i].name) || fh_h5_node_attr(g, dname);
        if (!want[i].shape.present && stored)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: inputs/%s should not exist",
                               path, id, want[i].name);
        else if (want[i].shape.present && !stored)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: inputs/%s is missing", path,
                               id, want[i].name);
    }
    static const char *const qkv[] = {"q", "k", "v"}, *const d_out[] = {"d_out"};
    if (c->fp8_inputs && (st = check_scale_invs(path, id, g, "inputs", qkv, 3)) != FATTN_OK)
        return st;
    if (c->fp8_d_out && (st = check_scale_invs(path, id, g, "inputs", d_out, 1)) != FATTN_OK)
        return st;
    if (c->spec->paged && ((st = check_page_table(path, c, g, "page_table_k")) != FATTN_OK ||
                           (st = check_page_table(path, c, g, "page_table_v")) != FATTN_OK))
        return st;
    return FATTN_OK;
}

/* forward/, forward/aux/, forward/_impl/, save_ctx/ (its _impl/ holds
 * attributes only), backward/ and backward/_impl/ (attributes only): each dataset of the case's dtype and
 * shape, no unknown object. */
static fattn_status check_outputs(const char *path, const fh_case *c, const fh_h5_node *cg)
{
    const fh_spec *s = c->spec;
    const char *id = s->id;
    want_ds roles[FH_SAVED_COUNT];
    for (int i = 0; i < FH_SAVED_COUNT; i++) {
        roles[i].name = fh_saved_name((fh_saved_slot)i);
        roles[i].shape = role_shape(c, i);
    }
    const want_ds *aux = roles + FH_SAVED_AUX_FIRST;
    want_ds fw[] = {{"out", (s->fp8 && s->fp8_output) ? fp8_of(c, c->t.out) : c->t.out},
                    {"max_logit", mk_shape(s->dtype, 1, s->h, 0, 0, 0)}};
    want_ds bw[] = {{"dq", c->t.dq}, {"dk", c->t.dk}, {"dv", c->t.dv}, {"d_bias", c->t.d_bias},
                    {"d_softmax_offset", c->t.d_softmax_offset}};
    static const char *const fw_groups[] = {"aux", "_impl", NULL};
    static const char *const sc_groups[] = {"_impl", NULL};
    static const char *const bw_groups[] = {"_impl", NULL};
    const fh_h5_node *g;
    fattn_status st = FATTN_OK;
    if ((g = fh_h5_node_find(cg, "forward")) &&
        (st = check_children(path, id, g, "forward", fw, 2, fw_groups)) != FATTN_OK)
        return st;
    const fh_h5_attr *osi = g ? fh_h5_node_attr(g, "out_scale_inv") : NULL;
    if (osi && (osi->kind != FH_H5_ATTR_FLOAT32 || !(osi->f32 > 0.0f) || isinf(osi->f32)))
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: forward@out_scale_inv is not a "
                           "float32 finite and > 0 (the FP8 out's scale_inv)", path, id);
    if ((g = fh_h5_node_find(cg, "forward/aux")) &&
        (st = check_children(path, id, g, "forward/aux", aux, FH_SAVED_NAUX, NULL)) != FATTN_OK)
        return st;
    if ((g = fh_h5_node_find(cg, "forward/_impl")) &&
        (st = check_children(path, id, g, "forward/_impl", roles, FH_SAVED_COUNT, NULL)) !=
            FATTN_OK)
        return st;
    if ((g = fh_h5_node_find(cg, "save_ctx")) &&
        (st = check_children(path, id, g, "save_ctx", roles, FH_SAVED_COUNT, sc_groups)) !=
            FATTN_OK)
        return st;
    if ((g = fh_h5_node_find(cg, "save_ctx/_impl")) &&
        (st = check_children(path, id, g, "save_ctx/_impl", NULL, 0, NULL)) != FATTN_OK)
        return st;
    if ((g = fh_h5_node_find(cg, "backward")) && !fh_spec_has_backward(s))
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: backward recorded for a case "
                           "without one (inference, no_grad or inference_mode)", path, id);
    if (g && (st = check_children(path, id, g, "backward", bw, 5, bw_groups)) != FATTN_OK)
        return st;
    static const char *const grads[] = {"dq", "dk", "dv"};
    if (g && c->fp8_grads &&
        (st = check_scale_invs(path, id, g, "backward", grads, 3)) != FATTN_OK)
        return st;
    static const char *const fp8_roles[] = {"q_fp8", "k_fp8", "v_fp8", "out_fp8"};
    if ((st = check_scale_invs(path, id, fh_h5_node_find(cg, "save_ctx"), "save_ctx",
                               fp8_roles, 4)) != FATTN_OK)
        return st;
    if ((g = fh_h5_node_find(cg, "backward/_impl")) &&
        (st = check_children(path, id, g, "backward/_impl", NULL, 0, NULL)) != FATTN_OK)
        return st;
    return FATTN_OK;
}

/* The recorded quantizers against the case's (fh_fe_fp8_quantizers):
 * each one present has the recipe and FP8 dtype of its role. TE's
 * get_attention_quantizers takes QKV, S and O from the forward recipe
 * state and dO, dP and dQKV from the backward one (utils.py 2.19.0:
 * 2723-2743, 2.20.2:3042-3062); a recipe state's quantizers get
 * get_fp8_te_dtype(recipe, forward) (quantization.py:290-296, 1431, 1480),
 * E4M3 forward and E5M2 backward under the HYBRID format both recipes
 * default to (recipe/__init__.py:254, 303); under current scaling S and dP
 * come from the delayed helper recipe (DPA's [CS, DS] pair). The f16 path
 * hands FusedAttnFunc no quantizer. */
static const char *check_quantizers(const fh_spec *s, const fh_ctx_record *r, char *bad,
                                    size_t n)
{
    fattn_fp8_quantizers want;
    fh_fe_fp8_quantizers(s, &want);
    const struct {
        const char *name;
        const fattn_fp8_quantizer *got, *want;
    } roles[] = {{"QKV_quantizer", r->QKV_quantizer, &want.QKV},
                 {"O_quantizer", r->O_quantizer, &want.O},
                 {"S_quantizer", r->S_quantizer, &want.S},
                 {"dO_quantizer", r->dO_quantizer, &want.dO},
                 {"dP_quantizer", r->dP_quantizer, &want.dP},
                 {"dQKV_quantizer", r->dQKV_quantizer, &want.dQKV}};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        const fattn_fp8_quantizer *g = roles[i].got, *w = roles[i].want;
        if (!g)
            continue;
        if (!s->fp8) {
            snprintf(bad, n, "%s (the f16 path has no quantizers)", roles[i].name);
            return bad;
        }
        if (g->kind != w->kind || g->dtype != w->dtype) {
            snprintf(bad, n, "%s (its role's quantizer is %s %s, as TE assigns it)",
                     roles[i].name, fattn_fp8_recipe_name(w->kind), fattn_dtype_name(w->dtype));
            return bad;
        }
    }
    return NULL;
}

/* The save_ctx attributes against the case: where the spec fixes a
 * field's value (the lengths, the window and scalars as the front ends
 * resolve them, the enums), the recorded one must be that value. This
 * bounds what replay --from save_ctx may compute by the case's own
 * tensors: max_seqlen is the spec's sq/skv, which the stored shapes match. */
static fattn_status check_ctx(const char *path, const fh_case *c, const fh_h5_node *sc)
{
    const fh_spec *s = c->spec;
    fh_ctx_record r;
    fattn_status st = fh_ctx_record_read(sc, &r);
    if (st != FATTN_OK)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s", path, s->id,
                           fattn_last_error());
    const char *bad = NULL;
    char why[160];
    if (r.max_seqlen_q != s->sq)
        bad = "max_seqlen_q (the spec's sq)";
    else if (r.max_seqlen_kv != s->skv)
        bad = "max_seqlen_kv (the spec's skv)";
    else if (r.window_size[0] != c->window[0] || r.window_size[1] != c->window[1])
        bad = "window_size (the spec's window as TE normalises it)";
    else if (isnan(c->attn_scale_arg) ? !isnan(r.attn_scale)
                                      : memcmp(&r.attn_scale, &c->attn_scale_arg, sizeof(float)))
        bad = "attn_scale (the spec's, else TE's default; absent (None) when null under "
              "raw_func_args)";
    else if (memcmp(&r.dropout_p, &c->dropout_p, sizeof(float)) != 0)
        bad = "dropout_p (the spec's dropout_p when training or raw_func_args, else 0)";
    else if (r.qkv_layout != s->layout || r.dqkv_layout != s->layout)
        bad = "qkv_layout/dqkv_layout (the spec's layout)";
    else if (r.o_format != c->q_format)
        bad = "o_format (the format of q)";
    else if (r.nominal_dtype != s->dtype || r.fp8 != (s->fp8 && s->fp8_dpa_bwd) ||
             r.is_input_fp8 != c->fp8_inputs)
        bad = "nominal_dtype/fp8/is_input_fp8 (the spec's dtype; fp8 is the spec's fp8 with "
              "dpa_bwd; is_input_fp8 its fp8.input_fp8)";
    else if (r.attn_bias_type != s->bias || r.attn_mask_type != s->mask ||
             r.softmax_type != s->softmax)
        bad = "attn_bias_type/attn_mask_type/softmax_type (the spec's bias, mask, softmax)";
    else if (r.bottom_right_diagonal != c->bottom_right_diagonal_arg)
        bad = "bottom_right_diagonal (as DotProductAttention resolves the spec's, or under "
              "raw_func_args the spec's, absent (None) when null)";
    else if (r.deterministic != s->deterministic || r.fast_zero_fill != s->fast_zero_fill)
        bad = "deterministic/fast_zero_fill (the spec's)";
    else
        bad = check_quantizers(s, &r, why, sizeof why);
    if (bad)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: save_ctx: attribute %s differs "
                           "from what the spec makes", path, s->id, bad);
    return FATTN_OK;
}

/* engine_call/ (engine_call.h): groups of attributes only, one per call,
 * named <direction>[.<k>], each direction's calls numbered from its first
 * without a gap and made by a state that is recorded (the backward's by
 * backward/, the forward's by forward/). */
static fattn_status check_engine_calls(const char *path, const char *id, const fh_h5_node *c,
                                       const fh_h5_node *ec)
{
    if (ec->is_dataset)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s is a dataset where a group "
                           "belongs", path, id, ec->name);
    for (size_t i = 0; i < ec->n_children; i++) {
        const fh_h5_node *g = ec->children[i];
        int dir = -1;
        unsigned long k = 1;
        for (int d = 0; d < 2 && dir < 0; d++) {
            const char *dn = fh_call_dir_name((fh_call_dir)d);
            size_t n = strlen(dn);
            char *end = NULL;
            if (!strcmp(g->name, dn))
                dir = d;
            else if (!strncmp(g->name, dn, n) && g->name[n] == '.' && g->name[n + 1] >= '2' &&
                     g->name[n + 1] <= '9' && (k = strtoul(g->name + n + 1, &end, 10)) >= 2 &&
                     end && !*end)
                dir = d;
        }
        if (dir < 0 || g->is_dataset || g->n_children)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s/%s: unknown object (the "
                               "schema has forward[.N] and backward[.N] groups of attributes "
                               "there)", path, id, ec->name, g->name);
        const char *dn = fh_call_dir_name((fh_call_dir)dir);
        char prev[32];
        if (k == 2)
            snprintf(prev, sizeof prev, "%s", dn);
        else
            snprintf(prev, sizeof prev, "%s.%lu", dn, k - 1);
        if (k >= 2 && !fh_h5_node_find(ec, prev))
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s/%s recorded without %s",
                               path, id, ec->name, g->name, prev);
        if (!fh_h5_node_find(c, dn))
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s/%s recorded without the "
                               "state %s", path, id, ec->name, g->name, dn);
    }
    return FATTN_OK;
}

/* The structure of a case that is not skipped: its states form a prefix
 * of inputs -> forward -> save_ctx -> backward, each a group, and its
 * engine calls are those of recorded states. */
static fattn_status check_states(const char *path, const fh_spec *s, const fh_h5_node *c)
{
    static const char *const order[] = {"inputs", "forward", "save_ctx", "backward"};
    for (size_t i = 0; i < c->n_children; i++) {
        const fh_h5_node *ch = c->children[i];
        if (!strcmp(ch->name, FH_ENGINE_CALL_GROUP)) {
            fattn_status st = check_engine_calls(path, c->name, c, ch);
            if (st != FATTN_OK)
                return st;
            continue;
        }
        if (strcmp(ch->name, "ranks") == 0) { /* fattn-te's CP ranks, a cp case's only */
            fattn_status st = fh_runfile_check_ranks(path, s, ch);
            if (st != FATTN_OK)
                return st;
            continue;
        }
        bool known = false;
        for (int k = 0; k < 4; k++)
            known = known || strcmp(ch->name, order[k]) == 0;
        if (!known)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s: unknown object (not a "
                               "state)", path, c->name, ch->name);
        if (ch->is_dataset)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s is a dataset where a group "
                               "belongs", path, c->name, ch->name);
    }
    bool gap = false;
    for (int i = 0; i < 4; i++) {
        bool has = fh_h5_node_find(c, order[i]) != NULL;
        if (has && gap)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: state %s recorded without the "
                               "state before it", path, c->name, order[i]);
        gap = gap || !has;
    }
    return FATTN_OK;
}

/* The states' contents: shapes, cu_seqlens, save_ctx (inputs/ required
 * when need_inputs: a schedule's B step records none). */
static fattn_status check_content(const char *path, const fh_case *c, const fh_h5_node *cg,
                                  bool need_inputs)
{
    const fh_spec *s = c->spec;
    fattn_status st;
    const fh_h5_node *g = fh_h5_node_find(cg, "inputs");
    if (!g && need_inputs)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: no inputs group", path, s->id);
    if ((g && (st = check_inputs(path, c, g)) != FATTN_OK) ||
        (st = check_outputs(path, c, cg)) != FATTN_OK)
        return st;
    int64_t tq = c->t_q ? c->t_q : s->b * s->sq, tkv = c->t_kv ? c->t_kv : s->b * s->skv;
    const char *cu_groups[] = {"inputs", "save_ctx"};
    for (int gi = 0; gi < 2; gi++) {
        const fh_h5_node *cgi = fh_h5_node_find(cg, cu_groups[gi]);
        if (!cgi)
            continue;
        if ((st = check_cu(path, s->id, cgi, "cu_seqlens_q", s->b, s->b * s->sq)) != FATTN_OK ||
            (st = check_cu(path, s->id, cgi, "cu_seqlens_kv", s->b, s->b * s->skv)) != FATTN_OK ||
            (st = check_cu(path, s->id, cgi, "cu_seqlens_q_padded", s->b, tq)) != FATTN_OK ||
            (st = check_cu(path, s->id, cgi, "cu_seqlens_kv_padded", s->b, tkv)) != FATTN_OK)
            return st;
    }
    const fh_h5_node *sc = fh_h5_node_find(cg, "save_ctx");
    if (sc && (st = check_ctx(path, c, sc)) != FATTN_OK)
        return st;
    return FATTN_OK;
}

/* Everything of a resolved case: states, shapes, cu_seqlens, save_ctx.
 * Nothing here allocates more than the case model's sequence tables: the
 * spec's shapes are compared before anything is built from them. */
static fattn_status check_resolved(const char *path, const fh_case *c, const fh_h5_node *cg)
{
    fattn_status st = check_states(path, c->spec, cg);
    return st != FATTN_OK ? st : check_content(path, c, cg, true);
}

/* ---- schedules: /cases/<id>/steps/<k>/ ------------------------------------- */

/* A U step's recipe/ or an X step's extra_state/: the module's state as
 * float32 arrays (harness/run/module.h), all four. */
static fattn_status check_recipe_group(const char *path, const fh_spec *s,
                                       const fh_h5_node *g, const char *where)
{
    int64_t len = s->fp8_amax_history_len;
    want_ds want[] = {
        {"scale_fwd", mk_shape(FATTN_DTYPE_FLOAT32, 1, 9, 0, 0, 0)},
        {"amax_history_fwd", mk_shape(FATTN_DTYPE_FLOAT32, 2, len, 9, 0, 0)},
        {"scale_bwd", mk_shape(FATTN_DTYPE_FLOAT32, 1, 6, 0, 0, 0)},
        {"amax_history_bwd", mk_shape(FATTN_DTYPE_FLOAT32, 2, len, 6, 0, 0)},
    };
    fattn_status st = check_children(path, s->id, g, where, want, 4, NULL);
    if (st != FATTN_OK)
        return st;
    for (int i = 0; i < 4; i++)
        if (!fh_h5_node_find(g, want[i].name))
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s/%s is missing", path,
                               s->id, where, want[i].name);
    return FATTN_OK;
}

/* The groups step group g holds: exactly `want` (NULL-terminated; those
 * after `optional` may be missing, as a prefix). */
static fattn_status check_step_children(const char *path, const char *id, const fh_h5_node *g,
                                        const char *const *want, int required)
{
    for (size_t i = 0; i < g->n_children; i++) {
        if (!strcmp(g->children[i]->name, FH_ENGINE_CALL_GROUP)) {
            fattn_status st = check_engine_calls(path, id, g, g->children[i]);
            if (st != FATTN_OK)
                return st;
            continue;
        }
        bool known = false;
        for (int k = 0; want[k]; k++)
            known = known || !strcmp(want[k], g->children[i]->name);
        if (!known || g->children[i]->is_dataset)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s: unknown object (not "
                               "what this step records)", path, id, g->children[i]->name);
    }
    bool gap = false;
    for (int k = 0; want[k]; k++) {
        bool has = fh_h5_node_find(g, want[k]) != NULL;
        if ((k < required && !has) || (has && gap))
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s missing", path, id,
                               gap ? want[k - 1] : want[k]);
        gap = gap || !has;
    }
    return FATTN_OK;
}

/* One step's group against the step's own case (fh_spec_step). */
static fattn_status check_step(const char *path, const fh_spec *s, const fh_kv_plan *plan,
                               int64_t k, const fh_h5_node *g)
{
    static const char *const fwd[] = {"inputs", "forward", "save_ctx", NULL};
    static const char *const bwd[] = {"save_ctx", "backward", NULL};
    static const char *const upd[] = {"recipe", NULL}, *const xs[] = {"extra_state", NULL};
    const fh_step *step = &s->schedule->steps[k - 1];
    fattn_status st;
    if (step->kind == FH_STEP_U || step->kind == FH_STEP_X) {
        const char *const *w = step->kind == FH_STEP_U ? upd : xs;
        if ((st = check_step_children(path, s->id, g, w, 1)) != FATTN_OK)
            return st;
        return check_recipe_group(path, s, fh_h5_node_find(g, w[0]), w[0]);
    }
    bool b = step->kind == FH_STEP_B;
    /* --until records a B step's states up to it: save_ctx, or nothing */
    if ((st = check_step_children(path, s->id, g, b ? bwd : fwd, b ? 0 : 1)) != FATTN_OK)
        return st;
    fh_spec one; /* a B's case is its forward's */
    int64_t of = b ? fh_schedule_forward_of(s->schedule, k) : k;
    if (of < 1)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: a B step without its forward",
                           path, s->id);
    if ((st = fh_spec_step(s, plan, of, &one)) != FATTN_OK)
        return st;
    fh_case rc;
    if ((st = fh_case_resolve(&one, &rc)) != FATTN_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", fattn_last_error());
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s", path, s->id, msg);
    } else
        st = check_content(path, &rc, g, !b);
    fh_case_free(&rc);
    fh_spec_free(&one);
    return st;
}

/* A schedule's case holds steps/ only, with a group per step recorded: 1
 * to m, m up to the schedule's length (a --until run stops early). */
static fattn_status check_schedule(const char *path, const fh_spec *s, const fh_h5_node *c)
{
    const fh_h5_node *steps = fh_h5_node_find(c, "steps");
    if (c->n_children != 1 || !steps || steps->is_dataset)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: a case with a schedule holds "
                           "the group steps/ and nothing else", path, s->id);
    int64_t m = 0;
    char name[32];
    for (; m < s->schedule->n; m++) {
        snprintf(name, sizeof name, "%lld", (long long)(m + 1));
        if (!fh_h5_node_find(steps, name))
            break;
    }
    if ((int64_t)steps->n_children != m)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: steps/ holds %zu objects, but "
                           "only steps 1..%lld of its %lld-step schedule are recorded in order",
                           path, s->id, steps->n_children, (long long)m,
                           (long long)s->schedule->n);
    fh_kv_plan plan;
    bool kv = fh_schedule_is_cache(s->schedule);
    fattn_status st = kv ? fh_spec_kv_plan(s, &plan) : FATTN_OK;
    if (st != FATTN_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", fattn_last_error());
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s", path, s->id, msg);
    }
    for (int64_t k = 1; k <= m; k++) {
        snprintf(name, sizeof name, "%lld", (long long)k);
        const fh_h5_node *g = fh_h5_node_find(steps, name);
        if (g->is_dataset) {
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: steps/%s is a dataset", path,
                             s->id, name);
            goto out;
        }
        if ((st = check_step(path, s, kv ? &plan : NULL, k, g)) != FATTN_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", fattn_last_error());
            st = fattn_error(st, "%s (in steps/%s)", msg, name);
            goto out;
        }
    }
out:
    if (kv)
        fh_kv_plan_free(&plan);
    return st;
}

/* A recorded refusal (docs/run-files.md): only a case that expects one,
 * its four string attributes, no states. */
static fattn_status check_refused(const char *path, const fh_spec *s, const fh_h5_node *c)
{
    static const char *const attrs[] = {"refused_status", "refused_rule", "refused_state",
                                        "refused_message"};
    if (!s->expect_refusal)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: a refusal recorded for a spec "
                           "without expect_refusal", path, c->name);
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        const fh_h5_attr *a = fh_h5_node_attr(c, attrs[i]);
        if (!a || a->kind != FH_H5_ATTR_STRING)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: attribute %s missing or not "
                               "a string", path, c->name, attrs[i]);
    }
    if (c->n_children || fh_h5_node_attr(c, "skipped"))
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: refused but has state groups or "
                           "a skip", path, c->name);
    return FATTN_OK;
}

fattn_status fh_runfile_case_spec(const char *path, const fh_h5_node *c, fh_spec *spec)
{
    if (c->is_dataset)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: /cases/%s is a dataset, not a group", path,
                           c->name);
    const fh_h5_attr *sa = fh_h5_node_attr(c, "spec");
    if (!sa || sa->kind != FH_H5_ATTR_STRING)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: no spec attribute", path, c->name);
    char source[512];
    snprintf(source, sizeof source, "%s: /cases/%s spec", path, c->name);
    fattn_status st = fh_spec_parse_one(sa->s, strlen(sa->s), source, spec);
    if (st != FATTN_OK)
        return fattn_error(FATTN_E_INVALID_FILE, "%s", fattn_last_error());
    bool intact = true;
    if ((st = fh_h5_node_attrs_intact(c, &intact)) != FATTN_OK) {
        /* out of memory: st as it is */
    } else if (!intact) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: attributes corrupt: they do not "
                         "match the case's %s", path, c->name, FH_H5_ATTRS_DIGEST);
    } else if (strcmp(spec->id, c->name) != 0) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: spec id is '%s'", path, c->name,
                         spec->id);
    }
    if (st != FATTN_OK)
        fh_spec_free(spec);
    return st;
}

static fattn_status validate_case(const char *path, const fh_h5_node *c)
{
    fh_spec spec;
    fattn_status st = fh_runfile_case_spec(path, c, &spec);
    if (st != FATTN_OK)
        return st;
    const fh_h5_attr *skipped = fh_h5_node_attr(c, "skipped");
    if (fh_h5_node_attr(c, "refused_status")) {
        st = check_refused(path, &spec, c);
    } else if (skipped) {
        if (skipped->kind != FH_H5_ATTR_STRING)
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: attribute skipped is not a "
                             "string (the reason)", path, c->name);
        else if (c->n_children)
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: skipped but has state groups",
                             path, c->name);
    } else if (spec.schedule) {
        st = check_schedule(path, &spec, c);
    } else {
        fh_case rc;
        if ((st = fh_case_resolve(&spec, &rc)) != FATTN_OK)
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s", path, c->name,
                             fattn_last_error());
        else
            st = check_resolved(path, &rc, c);
        fh_case_free(&rc);
    }
    fh_spec_free(&spec);
    return st;
}

fattn_status fh_runfile_validate(const char *path, const fh_h5_node *root)
{
    const fh_h5_attr *schema = fh_h5_node_attr(root, "schema");
    if (!schema || schema->kind != FH_H5_ATTR_STRING)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: no schema attribute (not a fattn run file)",
                           path);
    if (strcmp(schema->s, FH_RUN_SCHEMA) != 0)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: schema is '%s', this fattn reads '%s'", path,
                           schema->s, FH_RUN_SCHEMA);
    const fh_h5_node *cases = fh_h5_node_find(root, "cases");
    if (!cases || cases->is_dataset)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: no /cases group", path);
    for (size_t i = 0; i < root->n_children; i++) {
        const fh_h5_node *ch = root->children[i];
        if (strcmp(ch->name, "cases") != 0 && strcmp(ch->name, "audit") != 0)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: /%s: unknown object (a run file "
                               "holds /cases and /audit only)", path, ch->name);
        if (ch->is_dataset)
            return fattn_error(FATTN_E_INVALID_FILE, "%s: /%s is a dataset where a group "
                               "belongs", path, ch->name);
    }
    for (size_t i = 0; i < cases->n_children; i++) {
        fattn_status st = validate_case(path, cases->children[i]);
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}
