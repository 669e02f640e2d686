/* The CPU engine's worker scratch and its row loads and stores: every
 * element an item reads is widened to float32 here, and every element it
 * writes is rounded to the io dtype here, through the shared geometry's
 * offsets (core/geom.h). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "cpu/cpu.h"
#include "cpu/fmath.h"

/* Element counts of the scratch buffers for geometry g (ldk = skv + 8 key
 * columns, ldc = the larger head dim rounded up to 8), every product
 * checked: false when one overflows. */
typedef struct scratch_sizes {
    size_t ldk, ldc;
    size_t kt, kr, vt, rows_k, rows_c, acc, acc2, rnd;
} scratch_sizes;

static bool scratch_sizes_of(const fattn_geom *g, scratch_sizes *z)
{
    assert(g->skv > 0 && g->d > 0 && g->dv > 0);
    size_t skv = (size_t)g->skv, d = (size_t)g->d, dv = (size_t)g->dv;
    size_t dm = d > dv ? d : dv, acc_k, acc_r;
    if (!fattn_add_size(skv, 8, &z->ldk) || !fattn_add_size(dm, 7, &z->ldc))
        return false;
    z->ldc = z->ldc / 8 * 8;
    return fattn_mul_size(d, z->ldk, &z->kt) && fattn_mul_size(skv, z->ldc, &z->kr) &&
           fattn_mul_size(dv, z->ldk, &z->vt) && fattn_mul_size(CPU_ROWS, z->ldk, &z->rows_k) &&
           fattn_mul_size(CPU_ROWS, z->ldc, &z->rows_c) &&
           fattn_mul_size(2, z->ldc, &acc_k) && fattn_add_size(acc_k, 64, &acc_k) &&
           fattn_mul_size(skv, acc_k, &acc_r) && fattn_add_size(acc_r, z->rows_c, &z->acc) &&
           fattn_mul_size(skv, z->ldc, &z->acc2) && fattn_add_size(skv, 4, &z->rnd);
}

fattn_status fattn__cpu_scratch_init(cpu_scratch *s, const fattn_geom *g)
{
    memset(s, 0, sizeof *s);
    scratch_sizes z;
    if (!scratch_sizes_of(g, &z))
        return fattn_error(FATTN_E_OVERFLOW, "CPU engine: worker scratch for max_seqlen_kv "
                           "%lld and head dims %lld, %lld overflows", (long long)g->skv,
                           (long long)g->d, (long long)g->dv);
    s->ldk = (int64_t)z.ldk;
    s->ldc = (int64_t)z.ldc;
    s->kv_bi = s->kv_gk = -1;
    s->kt = calloc(z.kt, sizeof(float));
    s->kr = calloc(z.kr, sizeof(float));
    s->vr = calloc(z.kr, sizeof(float));
    s->vt = calloc(z.vt, sizeof(float));
    s->s = calloc(z.rows_k, sizeof(float));
    s->p = calloc(z.rows_k, sizeof(float));
    s->dp = calloc(z.rows_k, sizeof(float));
    s->ds = calloc(z.rows_k, sizeof(float));
    s->pd = calloc(z.rows_k, sizeof(float));
    s->t = calloc(z.rows_k, sizeof(float));
    s->qrow = calloc(z.rows_c, sizeof(float));
    s->dorow = calloc(z.rows_c, sizeof(float));
    s->orow = calloc(z.rows_c, sizeof(float));
    s->acc = calloc(z.acc, sizeof(float));
    s->acc2 = calloc(z.acc2, sizeof(float));
    s->acc3 = calloc(z.acc2, sizeof(float));
    s->rnd = calloc(z.rnd, sizeof(uint32_t));
    if (!s->kt || !s->kr || !s->vr || !s->vt || !s->s || !s->p || !s->dp || !s->ds || !s->pd ||
        !s->t || !s->qrow || !s->dorow || !s->orow || !s->acc || !s->acc2 || !s->acc3 ||
        !s->rnd) {
        fattn__cpu_scratch_free(s);
        return fattn_error(FATTN_E_NOMEM, "CPU engine: cannot allocate worker scratch");
    }
    return FATTN_OK;
}

void fattn__cpu_scratch_free(cpu_scratch *s)
{
    free(s->kt); free(s->kr); free(s->vr); free(s->vt);
    free(s->s); free(s->p); free(s->dp); free(s->ds); free(s->pd); free(s->t);
    free(s->qrow); free(s->dorow); free(s->orow);
    free(s->acc); free(s->acc2); free(s->acc3); free(s->rnd);
    memset(s, 0, sizeof *s);
}

/* Widen `width` elements at element offset o (stride sd) of an io buffer. */
static void load_strided(const void *data, fattn_dtype t, int64_t o, int64_t sd,
                         int64_t width, float *out)
{
    if (t == FATTN_DTYPE_BFLOAT16) {
        const uint16_t *p = (const uint16_t *)data + o;
        for (int64_t c = 0; c < width; c++)
            out[c] = fattn_cpu_f32_from_bits((uint32_t)p[c * sd] << 16);
    } else if (t == FATTN_DTYPE_FLOAT16) {
        const uint16_t *p = (const uint16_t *)data + o;
        for (int64_t c = 0; c < width; c++)
            out[c] = fattn_cpu_f16_to_f32(p[c * sd]);
    } else if (t == FATTN_DTYPE_FLOAT32) {
        const float *p = (const float *)data + o;
        for (int64_t c = 0; c < width; c++)
            out[c] = p[c * sd];
    } else {
        for (int64_t c = 0; c < width; c++)
            out[c] = fattn_load_f32(data, t, o + c * sd);
    }
}

void fattn__cpu_load_kv(const fattn_geom *g, cpu_scratch *scr, int64_t bi, int64_t gk, unsigned want)
{
    if (scr->kv_bi != bi || scr->kv_gk != gk) {
        scr->kv_have = 0;
        scr->kv_bi = bi;
        scr->kv_gk = gk;
    }
    want &= ~scr->kv_have;
    if (!want)
        return;
    int64_t d = g->d, dv = g->dv, len = g->len_kv[bi], ldk = scr->ldk, ldc = scr->ldc;
    int64_t ksd = g->k.strides[g->k.ndim - 1], vsd = g->v.strides[g->v.ndim - 1];
    if (want & (CPU_KT | CPU_KR)) {
        for (int64_t j = 0; j < len; j++) {
            int64_t ko = fattn__geom_k_offset(g, bi, j, gk);
            float *row = scr->kr + j * ldc;
            load_strided(g->k.data, g->io, ko, ksd, d, row);
            for (int64_t c = d; c < ldc; c++)
                row[c] = 0.0f;
        }
        scr->kv_have |= CPU_KR;
        if (want & CPU_KT) {
            for (int64_t c = 0; c < d; c++) {
                float *col = scr->kt + c * ldk;
                for (int64_t j = 0; j < len; j++)
                    col[j] = scr->kr[j * ldc + c];
                for (int64_t j = len; j < len + 8; j++)
                    col[j] = 0.0f;
            }
            scr->kv_have |= CPU_KT;
        }
    }
    if (want & (CPU_VR | CPU_VT)) {
        for (int64_t j = 0; j < len; j++) {
            int64_t vo = fattn__geom_v_offset(g, bi, j, gk);
            float *row = scr->vr + j * ldc;
            load_strided(g->v.data, g->io, vo, vsd, dv, row);
            for (int64_t c = dv; c < ldc; c++)
                row[c] = 0.0f;
        }
        scr->kv_have |= CPU_VR;
        if (want & CPU_VT) {
            for (int64_t c = 0; c < dv; c++) {
                float *col = scr->vt + c * ldk;
                for (int64_t j = 0; j < len; j++)
                    col[j] = scr->vr[j * ldc + c];
                for (int64_t j = len; j < len + 8; j++)
                    col[j] = 0.0f;
            }
            scr->kv_have |= CPU_VT;
        }
    }
}

void fattn__cpu_load_row(const fattn_tensor *t, fattn_qkv_format fmt, const int32_t *off,
                  int64_t bi, int64_t pos, int64_t n, int64_t width, float *out)
{
    int64_t o = fattn__geom_row_offset(t, fmt, off, bi, pos, n);
    int64_t sd = t->strides[t->ndim - 1];
    load_strided(t->data, t->dtype, o, sd, width, out);
}

void fattn__cpu_store_row(fattn_tensor *t, fattn_qkv_format fmt, const int32_t *off, int64_t bi,
                   int64_t pos, int64_t n, int64_t width, const float *in)
{
    int64_t o = fattn__geom_row_offset(t, fmt, off, bi, pos, n);
    int64_t sd = t->strides[t->ndim - 1];
    for (int64_t c = 0; c < width; c++)
        fattn_store_f32(t->data, t->dtype, o + c * sd, in[c]);
}

void fattn__cpu_round_io(fattn_dtype io, float *x, int64_t n)
{
    if (io == FATTN_DTYPE_BFLOAT16) {
        for (int64_t j = 0; j < n; j++)
            x[j] = fattn_cpu_round_bf16(x[j]);
    } else if (io == FATTN_DTYPE_FLOAT16) {
        for (int64_t j = 0; j < n; j++)
            x[j] = fattn_cpu_round_f16(x[j]);
    } else if (io != FATTN_DTYPE_FLOAT32) {
        for (int64_t j = 0; j < n; j++)
            x[j] = fattn_round_f32(io, x[j]);
    }
}
