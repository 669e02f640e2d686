/* The cuDNN engine's FP8 graphs (graph.h): per-tensor-scaled FP8 SDPA,
 * forward and backward, as cudnn-frontend lowers sdpa_fp8 and
 * sdpa_fp8_backward (include/cudnn_frontend/node/
 * scaled_dot_product_flash_attention.h: CompositeSDPANode::expand_node with
 * an FP8 mma_core_mode; node/matmul_fp8.h; node/sdpa_fp8_bwd.h:
 * SDPAFP8BackwardNode::expand_node). Facts only, no code copied;
 * docs/cudnn-engine.md, "FP8", writes the recipe down.
 *
 * The forward is the composite forward of graph_fwd.c with four additions
 * (cgb_fp8_*): descale_q and descale_k after the attn_scale multiply, amax_s
 * and the scale_s multiply (whose output is Q's FP8 type) after the softmax,
 * and bmm2 as a matmul_fp8 (descale_s, descale_v, scale_o, amax_o). Every
 * descale, scale and amax is a float32 [1,1,1,1] device tensor, as TE binds
 * them (fused_attn_fp8.cu): values reach the plan at execution, so one plan
 * serves every scaling. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "cudnn/graph_build.h"
#include "fattn/fp8.h"
#include "fattn/te.h"

bool fattn__cg_graph_is_fp8(const cg_graph *g)
{
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].dtype == CG_FP8_E4M3 || g->t[i].dtype == CG_FP8_E5M2)
            return true;
    return false;
}

/* ---- the builder's FP8 primitives ---------------------------------------- */

int fattn__cgb_fp8_scalar(builder *bd, cg_role role)
{
    if (bd->st != FATTN_OK)
        return 0;
    int64_t uid = CG_UID_FP8_FIRST + (role - CG_ROLE_DESCALE_Q);
    int have = fattn__cg_find_uid(bd->g, uid);
    if (have >= 0) /* one tensor per factor, however many ops read it */
        return have;
    return fattn__cgb_add_tensor(bd, fattn__cg_role_name(role), CG_F32, fattn__cgb_one4, fattn__cgb_one4, false, false, role,
                          uid);
}

void fattn__cgb_fp8_amax(builder *bd, const char *name, int x, cg_role role)
{
    int out = fattn__cgb_fp8_scalar(bd, role);
    fattn__cgb_red_into(bd, name, CG_RED_AMAX, x, out);
}

/* matmul_fp8.h: C = (A x B) [GQA head sum] * descale_a * descale_b, stored
 * times scale_c; amax_c of the product before scale_c. */
void fattn__cgb_fp8_matmul(builder *bd, const char *name, int a, int b, int c, cg_role descale_a,
                    cg_role descale_b, cg_role scale_c, cg_role amax_c, int m_ov, int n_ov,
                    int k_ov)
{
    if (bd->st != FATTN_OK)
        return;
    const cg_graph *g = bd->g;
    int64_t dims[4];
    for (int i = 0; i < 4; i++)
        dims[i] = g->t[c].dims[i];
    /* A and B with the same heads and C with a divisor of them: the
     * frontend sums the group's heads with a reduction before the descales. */
    int64_t ha = g->t[a].dims[1], hb = g->t[b].dims[1], hc = dims[1];
    bool gqa = ha == hb && ha != hc && ha % hc == 0;
    if (gqa)
        dims[1] = ha;
    char nm[40];
    snprintf(nm, sizeof nm, "%s", name);
    int acc = fattn__cgb_virt(bd, nm, CG_F32, dims);
    cg_op *mm = fattn__cgb_add_op(bd, CG_OP_MATMUL, nm);
    if (mm) {
        mm->in[0] = a, mm->in[1] = b, mm->out = acc;
        mm->m_override = m_ov, mm->n_override = n_ov, mm->k_override = k_ov;
    }
    if (gqa) {
        int64_t cd[4] = {dims[0], hc, dims[2], dims[3]};
        int red = fattn__cgb_virt(bd, "gqa_c", CG_F32, cd);
        fattn__cgb_red_into(bd, "gqa_c", CG_RED_ADD, acc, red);
        acc = red;
    }
    acc = fattn__cgb_pw(bd, "descale_a", CG_PW_MUL, CG_F32, -1, acc, fattn__cgb_fp8_scalar(bd, descale_a), -1,
                 CG_F32);
    acc = fattn__cgb_pw(bd, "descale_b", CG_PW_MUL, CG_F32, -1, acc, fattn__cgb_fp8_scalar(bd, descale_b), -1,
                 CG_F32);
    fattn__cgb_pw_into(bd, "scale_c", CG_PW_MUL, CG_F32, -1, acc, fattn__cgb_fp8_scalar(bd, scale_c), -1, c);
    fattn__cgb_fp8_amax(bd, "amax_c", acc, amax_c);
}

int fattn__cgb_fp8_descale_qk(builder *bd, int s)
{
    s = fattn__cgb_pw(bd, "descale_q", CG_PW_MUL, CG_F32, -1, s, fattn__cgb_fp8_scalar(bd, CG_ROLE_DESCALE_Q),
               -1, CG_F32);
    return fattn__cgb_pw(bd, "descale_k", CG_PW_MUL, CG_F32, -1, s,
                  fattn__cgb_fp8_scalar(bd, CG_ROLE_DESCALE_K), -1, CG_F32);
}

int fattn__cgb_fp8_quantize_p(builder *bd, const cg_fwd_desc *d, int p)
{
    fattn__cgb_fp8_amax(bd, "amax_s", p, CG_ROLE_AMAX_S);
    return fattn__cgb_pw(bd, "scale_s", CG_PW_MUL, CG_F32, -1, p, fattn__cgb_fp8_scalar(bd, CG_ROLE_SCALE_S),
                  -1, d->s_dt);
}

/* ---- descriptions ------------------------------------------------------------ */

/* An FP8 dtype, or with f16_ok float16/bfloat16 too, as a cg_dtype. */
static bool fp8_dtype(fattn_dtype t, bool f16_ok, cg_dtype *out)
{
    switch (t) {
    case FATTN_DTYPE_FLOAT8_E4M3FN: *out = CG_FP8_E4M3; return true;
    case FATTN_DTYPE_FLOAT8_E5M2: *out = CG_FP8_E5M2; return true;
    case FATTN_DTYPE_FLOAT16: *out = CG_F16; return f16_ok;
    case FATTN_DTYPE_BFLOAT16: *out = CG_BF16; return f16_ok;
    default: return false;
    }
}

/* What both directions cannot build (the backward's description goes
 * through the forward's): the options cudnn-frontend's FP8 SDPA does not
 * lower (sdpa_support_surface.h) or this engine does not implement for FP8.
 * Each is a support row the dispatch refuses before the engine runs (d_qk
 * != d_v is built: row fp8_mla_cudnn refuses it until a device measures it,
 * with the row lifted). Called
 * before the forward's options are resolved, so it reads bias and sink
 * from a. */
static void fp8_assert_options(const fattn_attn_common *a, const cg_fwd_desc *d)
{
    assert(a->bias_type == FATTN_BIAS_NO_BIAS);         /* row fp8_bias_engines */
    assert(a->softmax_type == FATTN_SOFTMAX_VANILLA);   /* row fp8_softmax_engines */
    assert(!d->ragged_q && !d->ragged_kv);              /* row fp8_thd_cudnn */
    assert(d->d % 16 == 0);                             /* row fp8_head_dim_cudnn */
    (void)a;
    (void)d;
}

fattn_status fattn__cg_fp8_fwd_desc(const fattn_attn_common *a, fattn_dtype s_dtype, cg_fwd_desc *d)
{
    const char *who = "cuDNN engine";
    d->fp8 = true;
    if (!fp8_dtype(a->q.dtype, false, &d->io))
        return fattn_error(FATTN_E_DTYPE, "%s: an FP8 call needs FP8 Q, got %s", who,
                           fattn_dtype_name(a->q.dtype));
    assert(a->k.dtype == a->q.dtype && a->v.dtype == a->q.dtype); /* geom checked */
    if (!fp8_dtype(a->o.dtype, true, &d->o_dt))
        return fattn_error(FATTN_E_DTYPE, "%s: FP8 attention's O must be FP8, float16 or "
                           "bfloat16, got %s", who, fattn_dtype_name(a->o.dtype));
    if (!fp8_dtype(s_dtype, false, &d->s_dt))
        return fattn_error(FATTN_E_DTYPE, "%s: FP8 attention's S dtype must be FP8, got %s",
                           who, fattn_dtype_name(s_dtype));
    /* The frontend gives bmm2's A (the quantised P) Q's dtype. */
    if (d->s_dt != d->io)
        return fattn_error(FATTN_E_UNSUPPORTED, "%s: FP8 S dtype %s differs from Q's %s: "
                           "cuDNN's FP8 SDPA quantises P to Q's type", who,
                           fattn_dtype_name(s_dtype), fattn_dtype_name(a->q.dtype));
    fp8_assert_options(a, d);
    return FATTN_OK;
}

fattn_status fattn__cg_fp8_bwd_desc(const fattn_bwd_params *p, cg_bwd_desc *d)
{
    const char *who = "cuDNN backward";
    const fattn_fp8_bwd *f = p->fp8;
    /* row fp8_descales_engines; the geometry: an FP8 call has FP8 Q */
    assert(f && d->f.fp8);
    struct {
        const fattn_tensor *t;
        const char *name;
        bool f16_ok;
        cg_dtype *out;
    } g[] = {{&p->d_o, "dO", false, &d->do_dt}, {&p->dq, "dQ", true, &d->dq_dt},
             {&p->dk, "dK", true, &d->dk_dt}, {&p->dv, "dV", true, &d->dv_dt}};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        if (!fp8_dtype(g[i].t->dtype, g[i].f16_ok, g[i].out))
            return fattn_error(FATTN_E_DTYPE, "%s: FP8 %s is %s, must be FP8%s", who, g[i].name,
                               fattn_dtype_name(g[i].t->dtype),
                               g[i].f16_ok ? ", float16 or bfloat16" : "");
    if (!fp8_dtype(f->dp_dtype, false, &d->dp_dt))
        return fattn_error(FATTN_E_DTYPE, "%s: FP8 dP dtype must be FP8, got %s", who,
                           fattn_dtype_name(f->dp_dtype));
    /* The frontend gives the quantised dP dO's dtype. */
    if (d->dp_dt != d->do_dt)
        return fattn_error(FATTN_E_UNSUPPORTED, "%s: FP8 dP dtype %s differs from dO's %s: "
                           "cuDNN's FP8 SDPA backward quantises dP to dO's type", who,
                           fattn_dtype_name(f->dp_dtype), fattn_dtype_name(p->d_o.dtype));
    return FATTN_OK;
}

bool fattn__cg_fp8_arch_builds(const cg_fwd_desc *d, int sm, bool backward)
{
    if (sm < 90)
        return false; /* row fp8_arch_cudnn */
    if (sm >= 100)
        return true;
    return !(d->has_right && d->bottom_right) &&                            /* row fp8_bottom_right_sm90_cudnn */
           (backward || d->o_dt == CG_FP8_E4M3 || d->o_dt == CG_FP8_E5M2) && /* fp8_o_f16_sm90_cudnn */
           !(d->dropout > 0.0f) &&                                           /* fp8_dropout_sm90_cudnn */
           (!backward || (d->d == 128 && d->dv == 128));                     /* fp8_bwd_head_dim_sm90_cudnn */
}
