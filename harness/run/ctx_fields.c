/* The backward-read set's writer and validating reader, generated from
 * FH_CTX_FIELDS (ctx_fields.h). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ctx_fields.h"

/* ---- writing ------------------------------------------------------------ */

/* PRESENT_<presence>(v, codec): whether a value is recorded. */
#define PRESENT_REQ(v, codec) true
#define PRESENT_OPT(v, codec) (!FH_CTX_IS_NONE_##codec(v))

/* W_<kind>(node, key, value, codec, presence) -> fattn_status */
#define W_BOOL(n, key, v, codec, pres) fh_h5_node_set_uint8(n, key, (v) ? 1 : 0)
#define W_INT64(n, key, v, codec, pres) fh_h5_node_set_int64(n, key, v)
#define W_FLOAT32(n, key, v, codec, pres)                                                      \
    (PRESENT_##pres(v, codec) ? fh_h5_node_set_float32(n, key, v) : FATTN_OK)
#define W_TRIBOOL(n, key, v, codec, pres)                                                      \
    (PRESENT_##pres(v, codec) ? fh_h5_node_set_uint8(n, key, (v) ? 1 : 0) : FATTN_OK)
#define W_PAIR(n, key, v, codec, pres) fh_h5_node_set_int64_pair(n, key, v)
#define W_ENUM(n, key, v, codec, pres)                                                         \
    (PRESENT_##pres(v, codec) ? fh_h5_node_set_string(n, key, fattn_##codec##_name(v))        \
                              : FATTN_OK)
#define W_STRING(n, key, v, codec, pres)                                                       \
    (PRESENT_##pres(v, codec) ? fh_h5_node_set_string(n, key, v) : FATTN_OK)
#define W_OPAQUE(n, key, v, codec, pres) ((void)(v), FATTN_OK)
#define W_QUANT(n, key, v, codec, pres) ((v) ? fh_ctx_quantizer_write(n, key, v) : FATTN_OK)

fattn_status fh_ctx_quantizer_write(fh_h5_node *n, const char *key,
                                       const fattn_fp8_quantizer *q)
{
    char buf[160];
    const char *recipe = fattn_fp8_recipe_name(q->kind);
    snprintf(buf, sizeof buf, "%s %s scale=%a amax=%a pow2=%d eps=%a", recipe ? recipe : "none",
             fattn_dtype_name(q->dtype), (double)q->scale, (double)fattn_fp8_quantizer_amax(q),
             q->force_pow_2_scales ? 1 : 0, (double)q->amax_epsilon);
    return fh_h5_node_set_string(n, key, buf);
}

fattn_status fh_ctx_record_write(const fh_ctx_record *r, fh_h5_node *n)
{
    assert(r && n && !n->is_dataset);
    fattn_status st;
#define WRITE_ROW(name, ctype, kind, codec, presence, role)                                   \
    if ((st = W_##kind(n, #name, r->name, codec, presence)) != FATTN_OK)                      \
        return st;
    FH_CTX_FIELDS(WRITE_ROW)
#undef WRITE_ROW
    return FATTN_OK;
}

/* ---- reading -------------------------------------------------------------- */

/* The attribute `name` of `n` if it has the type `kind`. A missing one is
 * *out = NULL and FATTN_OK when optional, else invalid. */
static fattn_status attr_get(const fh_h5_node *n, const char *name, fh_h5_attr_kind kind,
                             bool optional, const fh_h5_attr **out)
{
    const fh_h5_attr *a = fh_h5_node_attr(n, name);
    *out = a;
    if (!a)
        return optional ? FATTN_OK
                        : fattn_error(FATTN_E_INVALID_FILE, "save_ctx: attribute '%s' is missing",
                                      name);
    if (a->kind != kind)
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: attribute '%s' has the wrong type",
                           name);
    return FATTN_OK;
}

static fattn_status read_bool(const fh_h5_node *n, const char *name, bool *v)
{
    const fh_h5_attr *a;
    fattn_status st = attr_get(n, name, FH_H5_ATTR_UINT8, false, &a);
    if (st != FATTN_OK)
        return st;
    if (a->u8 > 1)
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: '%s' is %u, not a boolean", name,
                           a->u8);
    *v = a->u8 != 0;
    return FATTN_OK;
}

static fattn_status read_int64(const fh_h5_node *n, const char *name, int64_t *v)
{
    const fh_h5_attr *a;
    fattn_status st = attr_get(n, name, FH_H5_ATTR_INT64, false, &a);
    if (st != FATTN_OK)
        return st;
    *v = a->i64[0];
    return FATTN_OK;
}

/* An optional float32 reads as NaN (None) when absent; a recorded NaN is
 * invalid, since None is recorded by absence. */
static fattn_status read_float32(const fh_h5_node *n, const char *name, bool optional,
                                 float *v)
{
    const fh_h5_attr *a;
    fattn_status st = attr_get(n, name, FH_H5_ATTR_FLOAT32, optional, &a);
    if (st != FATTN_OK)
        return st;
    *v = a ? a->f32 : (float)NAN;
    if (a && optional && isnan(a->f32))
        return fattn_error(FATTN_E_INVALID_FILE,
                           "save_ctx: '%s' is NaN (TE's None is recorded by absence)", name);
    return FATTN_OK;
}

/* -1 (None) when absent, else a boolean 0 or 1. */
static fattn_status read_tribool(const fh_h5_node *n, const char *name, int *v)
{
    const fh_h5_attr *a;
    fattn_status st = attr_get(n, name, FH_H5_ATTR_UINT8, true, &a);
    if (st != FATTN_OK)
        return st;
    if (a && a->u8 > 1)
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: '%s' is %u, not a boolean", name,
                           a->u8);
    *v = a ? (int)a->u8 : -1;
    return FATTN_OK;
}

static fattn_status read_pair(const fh_h5_node *n, const char *name, int64_t v[2])
{
    const fh_h5_attr *a;
    fattn_status st = attr_get(n, name, FH_H5_ATTR_INT64_PAIR, false, &a);
    if (st != FATTN_OK)
        return st;
    v[0] = a->i64[0];
    v[1] = a->i64[1];
    return FATTN_OK;
}

/* A string attribute; *s = NULL when an optional one is absent. */
static fattn_status read_string(const fh_h5_node *n, const char *name, bool optional,
                                const char **s)
{
    const fh_h5_attr *a;
    *s = NULL;
    fattn_status st = attr_get(n, name, FH_H5_ATTR_STRING, optional, &a);
    if (st != FATTN_OK)
        return st;
    *s = a ? a->s : NULL;
    return FATTN_OK;
}

/* A parse failure as an invalid file naming the attribute. */
static fattn_status parsed(const char *name, fattn_status st)
{
    if (st != FATTN_OK)
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: attribute '%s': %s", name,
                           fattn_last_error());
    return FATTN_OK;
}

#define OPTIONAL_REQ false
#define OPTIONAL_OPT true

/* R_<kind>(node, key, lvalue, codec, presence) -> fattn_status; uses the
 * reader's locals `st` and `s`. */
#define R_BOOL(n, key, v, codec, pres) read_bool(n, key, &(v))
#define R_INT64(n, key, v, codec, pres) read_int64(n, key, &(v))
#define R_FLOAT32(n, key, v, codec, pres) read_float32(n, key, OPTIONAL_##pres, &(v))
#define R_TRIBOOL(n, key, v, codec, pres) read_tribool(n, key, &(v))
#define R_PAIR(n, key, v, codec, pres) read_pair(n, key, v)
#define R_ENUM(n, key, v, codec, pres) R_ENUM_##pres(n, key, v, codec)
#define R_ENUM_REQ(n, key, v, codec)                                                           \
    ((st = read_string(n, key, false, &s)) != FATTN_OK                                         \
         ? st                                                                                  \
         : parsed(key, fattn_##codec##_parse(s, &(v))))
#define R_ENUM_OPT(n, key, v, codec)                                                           \
    ((st = read_string(n, key, true, &s)) != FATTN_OK                                          \
         ? st                                                                                  \
         : (s ? parsed(key, fattn_##codec##_parse(s, &(v))) : ((v) = FH_CTX_NONE_##codec,     \
                                                               FATTN_OK)))
#define R_STRING(n, key, v, codec, pres) read_string(n, key, OPTIONAL_##pres, &(v))
#define R_OPAQUE(n, key, v, codec, pres) ((v) = NULL, FATTN_OK)
#define R_QUANT(n, key, v, codec, pres) read_quant(n, key, &r->quant_store[qi++], &(v))

/* A QUANT row: absent is None; else the string write_quant makes. */
static fattn_status read_quant(const fh_h5_node *n, const char *name, fattn_fp8_quantizer *store,
                               fattn_fp8_quantizer **v)
{
    const char *s = NULL;
    *v = NULL;
    fattn_status st = read_string(n, name, true, &s);
    if (st != FATTN_OK || !s)
        return st;
    char recipe[16], dtype[32];
    float scale, amax, eps;
    int pow2, used = 0;
    memset(store, 0, sizeof *store);
    if (sscanf(s, "%15s %31s scale=%a amax=%a pow2=%d eps=%a%n", recipe, dtype, &scale, &amax,
               &pow2, &eps, &used) != 6 || s[used] != '\0' || (pow2 != 0 && pow2 != 1) ||
        fattn_fp8_recipe_parse(recipe, &store->kind) != FATTN_OK ||
        fattn_dtype_parse(dtype, &store->dtype) != FATTN_OK || !fattn_dtype_is_fp8(store->dtype))
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: attribute '%s': \"%s\" is not a "
                           "quantizer (\"<recipe> <fp8 dtype> scale=%%a amax=%%a pow2=0|1 "
                           "eps=%%a\")", name, s);
    /* per-tensor scaling only: MXFP8 and block scaling keep a scale per
     * block (tensors of scales, no amax), which one number cannot hold */
    if (store->kind != FATTN_FP8_RECIPE_DELAYED && store->kind != FATTN_FP8_RECIPE_CURRENT)
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: attribute '%s': \"%s\": recipe %s "
                           "scales per block, not by the one scale and amax a quantizer record "
                           "holds (delayed and current scaling only)", name, s, recipe);
    /* TE's delayed-scaling Float8Quantizer has neither (float8_tensor.py) */
    if (store->kind == FATTN_FP8_RECIPE_DELAYED && (pow2 != 0 || eps != 0.0f))
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: attribute '%s': \"%s\": a delayed "
                           "quantizer has no pow2 scales and no amax epsilon (pow2=0 eps=0x0p+0)",
                           name, s);
    /* as a Float8Tensor's scale_inv is checked: a scale of inf or a NaN
     * amax would replay into NaN gradients with exit 0 */
    if (!isfinite(scale) || !(scale > 0.0f) || !isfinite(amax) || !(amax >= 0.0f) ||
        !isfinite(eps) || !(eps >= 0.0f))
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: attribute '%s': \"%s\": scale must "
                           "be finite and > 0, amax and eps finite and >= 0", name, s);
    store->scale = scale;
    store->amax = amax;
    store->force_pow_2_scales = pow2 == 1;
    store->amax_epsilon = eps;
    *v = store;
    return FATTN_OK;
}

/* The rules beyond each attribute's type. */
static fattn_status check_ranges(const fh_ctx_record *r)
{
    if (r->max_seqlen_q <= 0 || r->max_seqlen_kv <= 0)
        return fattn_error(FATTN_E_INVALID_FILE,
                           "save_ctx: max_seqlen_q/max_seqlen_kv (%lld, %lld) out of range "
                           "(must be positive)",
                           (long long)r->max_seqlen_q, (long long)r->max_seqlen_kv);
    /* Lengths are int32 in cu_seqlens and in every engine's tables. */
    if (r->max_seqlen_q > INT32_MAX || r->max_seqlen_kv > INT32_MAX)
        return fattn_error(FATTN_E_INVALID_FILE,
                           "save_ctx: max_seqlen_q/max_seqlen_kv (%lld, %lld) out of range "
                           "(past int32)",
                           (long long)r->max_seqlen_q, (long long)r->max_seqlen_kv);
    if (r->window_size[0] < -1 || r->window_size[1] < -1 || r->window_size[0] > INT32_MAX ||
        r->window_size[1] > INT32_MAX)
        return fattn_error(FATTN_E_INVALID_FILE,
                           "save_ctx: window_size (%lld, %lld) out of range [-1, int32]",
                           (long long)r->window_size[0], (long long)r->window_size[1]);
    if (!(r->dropout_p >= 0.0f && r->dropout_p < 1.0f))
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: dropout_p %g out of range [0, 1)",
                           (double)r->dropout_p);
    if (!isnan(r->attn_scale) && !isfinite(r->attn_scale)) /* NaN: None */
        return fattn_error(FATTN_E_INVALID_FILE, "save_ctx: attn_scale out of range (not finite)");
    return FATTN_OK;
}

fattn_status fh_ctx_record_read(const fh_h5_node *n, fh_ctx_record *r)
{
    assert(n && r);
    memset(r, 0, sizeof *r);
    fattn_status st = FATTN_OK;
    const char *s = NULL;
    int qi = 0;
#define READ_ROW(name, ctype, kind, codec, presence, role)                                    \
    if ((st = R_##kind(n, #name, r->name, codec, presence)) != FATTN_OK)                      \
        return st;
    FH_CTX_FIELDS(READ_ROW)
#undef READ_ROW
    (void)s;
    assert(qi == 6);
    return check_ranges(r);
}
