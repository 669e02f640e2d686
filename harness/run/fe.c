/* The front-end registry (FH_IMPLS) and what the adapters share. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fe.h"

#define FE_DECLARE(suffix, name) extern const fh_fe_ops fh_fe_##name;
FH_IMPLS(FE_DECLARE)
#undef FE_DECLARE

static const fh_fe_ops *const adapters[FH_IMPL_COUNT] = {
#define FE_ROW(suffix, name) [FH_IMPL_##suffix] = &fh_fe_##name,
    FH_IMPLS(FE_ROW)
#undef FE_ROW
};

const fh_fe_ops *fh_fe_get(fh_impl impl)
{
    if ((int)impl < 0 || impl >= FH_IMPL_COUNT)
        return NULL;
    assert(adapters[impl] && adapters[impl]->name);
    return adapters[impl];
}

const char *fh_impl_name(fh_impl i)
{
    const fh_fe_ops *ops = fh_fe_get(i);
    return ops ? ops->name : "?";
}

fattn_status fh_impl_parse(const char *s, fh_impl *out)
{
    char known[256] = "";
    for (int i = 0; i < FH_IMPL_COUNT; i++) {
        const char *name = fh_fe_get((fh_impl)i)->name;
        if (strcmp(s, name) == 0) {
            *out = (fh_impl)i;
            return FATTN_OK;
        }
        if (i > 0)
            strncat(known, ", ", sizeof known - strlen(known) - 1);
        strncat(known, name, sizeof known - strlen(known) - 1);
    }
    return fattn_error(FATTN_E_PARSE, "unknown implementation '%s' (%s)", s, known);
}

static bool can_resume(const fh_fe_ops *ops, fh_state from)
{
    if (from == FH_STATE_SAVE_CTX)
        return ops->load_save_ctx != NULL;
    if (from == FH_STATE_FORWARD)
        return ops->load_forward != NULL;
    return false;
}

fattn_status fh_impl_resume_check(fh_impl impl, fh_state from)
{
    const fh_fe_ops *ops = fh_fe_get(impl);
    if (ops && can_resume(ops, from))
        return FATTN_OK;
    char able[256] = "";
    for (int i = 0; i < FH_IMPL_COUNT; i++) {
        const fh_fe_ops *o = fh_fe_get((fh_impl)i);
        if (!can_resume(o, from))
            continue;
        if (able[0])
            strncat(able, ", ", sizeof able - strlen(able) - 1);
        strncat(able, o->name, sizeof able - strlen(able) - 1);
    }
    return fattn_error(FATTN_E_INVALID_ARG,
                       "replay --from %s is not possible with --impl %s (it exists for: %s)",
                       fh_state_name(from), fh_impl_name(impl), able[0] ? able : "none");
}

fattn_tensor fh_fe_node_tensor(const fh_h5_node *g, const char *name)
{
    const fh_h5_node *n = g ? fh_h5_node_find(g, name) : NULL;
    return (n && n->is_dataset) ? fh_h5_node_tensor(n) : fattn_tensor_empty();
}

fattn_status fh_fe_put_tensor(fh_h5_node *g, const char *name, const fattn_tensor *t)
{
    if (!t || fattn_tensor_is_empty(t))
        return FATTN_OK; /* an empty slot: its absence is data */
    assert(g && name);
    return fh_h5_node_add_tensor(g, name, t, NULL);
}

void fh_fe_fingerprint(const fh_h5_node *ds, char out[FH_FE_FINGERPRINT_LEN])
{
    assert(ds && ds->is_dataset);
    size_t n = FH_FE_FINGERPRINT_LEN;
    int at = snprintf(out, n, "%s [", fattn_dtype_name(ds->dtype));
    for (int i = 0; i < ds->ndim && at > 0 && (size_t)at < n; i++)
        at += snprintf(out + at, n - (size_t)at, "%s%lld", i ? "," : "", (long long)ds->shape[i]);
    if (at > 0 && (size_t)at < n)
        snprintf(out + at, n - (size_t)at, "] %s", ds->digest);
}

fattn_status fh_fe_put_fingerprint(fh_h5_node *g, const char *name, const fattn_tensor *t)
{
    if (!t || fattn_tensor_is_empty(t))
        return FATTN_OK;
    fh_h5_node *tmp = NULL; /* the tensor gathered once, then dropped */
    fattn_status st;
    if ((st = fh_h5_node_new_group("", &tmp)) != FATTN_OK ||
        (st = fh_h5_node_add_tensor(tmp, name, t, NULL)) != FATTN_OK)
        goto out;
    char fp[FH_FE_FINGERPRINT_LEN];
    fh_fe_fingerprint(fh_h5_node_find(tmp, name), fp);
    st = fh_h5_node_set_string(g, name, fp);
out:
    fh_h5_node_free(tmp);
    return st;
}

float fh_fe_attn_scale(const fh_spec *s)
{
    return fh_case_attn_scale_arg(s);
}

int fh_fe_bottom_right_diagonal(const fh_spec *s)
{
    return fh_case_bottom_right_diagonal_arg(s);
}

float fh_fe_dropout(const fh_spec *s)
{
    /* FusedAttention zeroes it for inference (2.20.2 backends.py:2603); a direct
     * FusedAttnFunc caller (raw_func_args) passes whatever it likes. */
    return (s->is_training || s->raw_func_args) ? (float)s->dropout_p : 0.0f;
}

void fh_fe_fp8_quantizers(const fh_spec *s, fattn_fp8_quantizers *qs)
{
    memset(qs, 0, sizeof *qs);
    /* QKV, O, S, dO, dP, dQKV: within range for the matrix's inputs (|x| of
     * a few units, P <= 1, dS and the grads below 100) */
    static const float scales[6] = {16.0f, 32.0f, 256.0f, 64.0f, 512.0f, 128.0f};
    fattn_fp8_quantizer *all[6] = {&qs->QKV, &qs->O, &qs->S, &qs->dO, &qs->dP, &qs->dQKV};
    for (int i = 0; i < 6; i++) {
        bool ds_half = all[i] == &qs->S || all[i] == &qs->dP;
        all[i]->kind = ds_half ? FATTN_FP8_RECIPE_DELAYED : s->fp8_recipe;
        all[i]->dtype = i < 3 ? FATTN_DTYPE_FLOAT8_E4M3FN : FATTN_DTYPE_FLOAT8_E5M2;
        all[i]->scale = scales[i];
    }
}

void fh_fe_fp8_meta(const fh_spec *s, fattn_fp8_meta *m)
{
    memset(m, 0, sizeof *m);
    if (!s->fp8)
        return;
    /* DPA20:1207-1223, 1290-1293: [CS, DS helper] for current scaling */
    m->autocast_recipe = s->fp8_recipe;
    m->local_recipes[m->n_local_recipes++] = s->fp8_recipe;
    if (s->fp8_recipe == FATTN_FP8_RECIPE_CURRENT)
        m->local_recipes[m->n_local_recipes++] = FATTN_FP8_RECIPE_DELAYED;
}

float fh_fe_node_scale_inv(const fh_h5_node *g, const char *name)
{
    const fh_h5_node *n = g ? fh_h5_node_find(g, name) : NULL;
    const fh_h5_attr *a = n ? fh_h5_node_attr(n, "scale_inv") : NULL;
    return (a && a->kind == FH_H5_ATTR_FLOAT32) ? a->f32 : 0.0f;
}

void fh_fe_own_quantizers(fh_ctx_record *rec, fattn_fp8_quantizer store[6])
{
    fattn_fp8_quantizer **q[6] = {&rec->QKV_quantizer, &rec->O_quantizer, &rec->dQKV_quantizer,
                                  &rec->dO_quantizer,  &rec->dP_quantizer, &rec->S_quantizer};
    for (int i = 0; i < 6; i++)
        if (*q[i]) {
            store[i] = **q[i];
            *q[i] = &store[i];
        }
}
