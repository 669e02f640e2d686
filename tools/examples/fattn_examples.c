/* fattn-examples: run a few example cases through the CPU engine.
 *
 * Until `fattn verify` exists this is the README's main job: each example
 * runs forward and backward on Philox inputs, twice, and checks what can be
 * checked without an oracle — both runs bitwise identical, every defined
 * output finite, every output row of O inside the range of V (a convex
 * combination, no dropout here), and dSoftmaxOffset present where TE
 * returns it. Prints one line per case and a verdict; exit 0 iff all pass.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fattn/engine.h"
#include "fattn/philox.h"

typedef struct example {
    const char *id;
    int64_t b, h, hg, s, d;
    fattn_dtype dtype;
    fattn_mask_type mask;
    fattn_softmax_type softmax;
    int64_t window_left;
} example;

static const example examples[] = {
    {"bshd.nomask.bf16", 2, 4, 4, 128, 64, FATTN_DTYPE_BFLOAT16, FATTN_MASK_NO_MASK,
     FATTN_SOFTMAX_VANILLA, -1},
    {"bshd.causal.f16", 2, 4, 4, 96, 64, FATTN_DTYPE_FLOAT16, FATTN_MASK_CAUSAL,
     FATTN_SOFTMAX_VANILLA, -1},
    {"bshd.gqa8.causal.bf16", 1, 8, 1, 130, 32, FATTN_DTYPE_BFLOAT16, FATTN_MASK_CAUSAL,
     FATTN_SOFTMAX_VANILLA, -1},
    {"bshd.swa16.learnable.bf16", 2, 4, 2, 100, 64, FATTN_DTYPE_BFLOAT16, FATTN_MASK_CAUSAL,
     FATTN_SOFTMAX_LEARNABLE, 16},
};

typedef struct bufs {
    fattn_tensor q, k, v, o, d_o, dq, dk, dv, stats, offset, d_offset;
} bufs;

static void fill(fattn_tensor *t, uint64_t seed, uint64_t stream, float scale)
{
    int64_t n = fattn_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        fattn_store_f32(t->data, t->dtype, i,
                        scale * fattn_philox_to_sym_unit(fattn_philox_u32(seed, stream, (uint64_t)i)));
}

static int run_once(fattn_engine *e, const example *x, bufs *B)
{
    int64_t qs[4] = {x->b, x->s, x->h, x->d}, ks[4] = {x->b, x->s, x->hg, x->d};
    int64_t ss[4] = {x->b, x->h, x->s, 1}, os[4] = {1, x->h, 1, 1};
    fattn_dtype t = x->dtype;
    memset(B, 0, sizeof *B);
    if (fattn_tensor_alloc(&B->q, t, 4, qs) || fattn_tensor_alloc(&B->k, t, 4, ks) ||
        fattn_tensor_alloc(&B->v, t, 4, ks) || fattn_tensor_alloc(&B->o, t, 4, qs) ||
        fattn_tensor_alloc(&B->d_o, t, 4, qs) || fattn_tensor_alloc(&B->dq, t, 4, qs) ||
        fattn_tensor_alloc(&B->dk, t, 4, ks) || fattn_tensor_alloc(&B->dv, t, 4, ks) ||
        fattn_tensor_alloc(&B->stats, FATTN_DTYPE_FLOAT32, 4, ss) ||
        fattn_tensor_alloc(&B->offset, FATTN_DTYPE_FLOAT32, 4, os) ||
        fattn_tensor_alloc(&B->d_offset, FATTN_DTYPE_FLOAT32, 4, os))
        return -1;
    fill(&B->q, 7, 1, 0.5f);
    fill(&B->k, 7, 2, 0.5f);
    fill(&B->v, 7, 3, 1.0f);
    fill(&B->offset, 7, 5, 1.0f);
    fill(&B->d_o, 7, 6, 0.1f);
    fattn_tensor *outs[] = {&B->o, &B->dq, &B->dk, &B->dv, &B->stats, &B->d_offset};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        fattn_tensor_fill_bits(outs[i], 0xFFFFFFFFu);

    bool sink = x->softmax != FATTN_SOFTMAX_VANILLA;
    int64_t two = 2, rng[2] = {99, 16};
    fattn_aux_pack aux = {0};
    fattn_fwd_params fp = {
        .attn.q = B->q, .attn.k = B->k, .attn.v = B->v, .attn.o = B->o,
        .softmax_offset = sink ? B->offset : fattn_tensor_empty(), .aux = &aux,
        .rng_state = fattn_tensor_view(rng, FATTN_DTYPE_INT64, 1, &two),
        .attn.max_seqlen_q = x->s, .attn.max_seqlen_kv = x->s, .is_training = true,
        .attn.attn_scale = (float)(1.0 / sqrt((double)x->d)),
        .attn.qkv_layout = FATTN_LAYOUT_BSHD_BSHD_BSHD, .attn.o_format = FATTN_FORMAT_BSHD,
        .attn.bias_type = FATTN_BIAS_NO_BIAS, .attn.mask_type = x->mask,
            .attn.softmax_type = x->softmax,
        .attn.window_size_left = x->window_left,
        .attn.window_size_right = fattn_mask_has_causal(x->mask) ? 0 : -1,
        .attn.bottom_right_diagonal = fattn_bottom_right_default_fwd(x->mask),
    };
    if (fattn_engine_fwd(e, &fp) != FATTN_OK)
        return -1;
    aux.t[0] = B->stats;
    if (fattn_engine_fwd(e, &fp) != FATTN_OK)
        return -1;
    fattn_bwd_params bp = {
        .attn.q = B->q, .attn.k = B->k, .attn.v = B->v, .attn.o = B->o, .d_o = B->d_o, .aux = &aux,
        .dq = B->dq, .dk = B->dk, .dv = B->dv,
        .d_softmax_offset = sink ? B->d_offset : fattn_tensor_empty(),
        .attn.max_seqlen_q = x->s, .attn.max_seqlen_kv = x->s,
            .attn.attn_scale = fp.attn.attn_scale,
        .attn.qkv_layout = fp.attn.qkv_layout, .attn.o_format = fp.attn.o_format,
            .do_format = fp.attn.o_format,
        .dqkv_layout = fp.attn.qkv_layout, .attn.bias_type = fp.attn.bias_type,
            .attn.mask_type = fp.attn.mask_type,
        .attn.softmax_type = fp.attn.softmax_type,
            .attn.window_size_left = fp.attn.window_size_left,
        .attn.window_size_right = fp.attn.window_size_right,
        .attn.bottom_right_diagonal = fp.attn.bottom_right_diagonal,
    };
    return fattn_engine_bwd(e, &bp) == FATTN_OK ? 0 : -1;
}

static void free_bufs(bufs *B)
{
    fattn_tensor *all[] = {&B->q, &B->k, &B->v, &B->o, &B->d_o, &B->dq, &B->dk,
                           &B->dv, &B->stats, &B->offset, &B->d_offset};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fattn_tensor_free(all[i]);
}

static bool same_bytes(const fattn_tensor *a, const fattn_tensor *b)
{
    size_t n = (size_t)fattn_tensor_numel(a) * fattn_dtype_size(a->dtype);
    return memcmp(a->data, b->data, n) == 0;
}

static const char *check(const example *x, const bufs *A, const bufs *B)
{
    const fattn_tensor *pa[] = {&A->o, &A->dq, &A->dk, &A->dv, &A->stats, &A->d_offset};
    const fattn_tensor *pb[] = {&B->o, &B->dq, &B->dk, &B->dv, &B->stats, &B->d_offset};
    for (size_t i = 0; i < sizeof pa / sizeof pa[0]; i++)
        if (!same_bytes(pa[i], pb[i]))
            return "two runs differ";
    const fattn_tensor *fin[] = {&A->o, &A->dq, &A->dk, &A->dv, &A->stats};
    for (size_t i = 0; i < sizeof fin / sizeof fin[0]; i++)
        for (int64_t e = 0; e < fattn_tensor_numel(fin[i]); e++)
            if (!isfinite(fattn_load_f32(fin[i]->data, fin[i]->dtype, e)))
                return "non-finite output";
    if (x->softmax != FATTN_SOFTMAX_VANILLA &&
        !isfinite(fattn_load_f32(A->d_offset.data, FATTN_DTYPE_FLOAT32, 0)))
        return "dSoftmaxOffset not written";
    float vmax = 0.0f;
    for (int64_t e = 0; e < fattn_tensor_numel(&A->v); e++)
        vmax = fmaxf(vmax, fabsf(fattn_load_f32(A->v.data, A->v.dtype, e)));
    for (int64_t e = 0; e < fattn_tensor_numel(&A->o); e++)
        if (fabsf(fattn_load_f32(A->o.data, A->o.dtype, e)) > vmax * 1.01f)
            return "O outside the range of V";
    return NULL;
}

int main(void)
{
    fattn_engine *e = NULL;
    if (fattn_engine_init_cpu(&e, NULL) != FATTN_OK) {
        fprintf(stderr, "fattn-examples: %s\n", fattn_last_error());
        return 2;
    }
    int failed = 0, n = (int)(sizeof examples / sizeof examples[0]);
    for (int i = 0; i < n; i++) {
        const example *x = &examples[i];
        bufs a, b;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int ra = run_once(e, x, &a);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        int rb = run_once(e, x, &b);
        const char *why = ra || rb ? fattn_last_error() : check(x, &a, &b);
        double ms = 1e3 * (double)(t1.tv_sec - t0.tv_sec) + 1e-6 * (double)(t1.tv_nsec - t0.tv_nsec);
        printf("%-28s %-4s fwd+bwd %7.1f ms%s%s\n", x->id, why ? "FAIL" : "ok", ms,
               why ? "  " : "", why ? why : "");
        failed += why != NULL;
        free_bufs(&a);
        free_bufs(&b);
    }
    fattn_engine_free(e);
    printf("examples: %d passed, %d failed (CPU engine, math version %d)\n", n - failed, failed,
           FATTN_CPU_MATH_VERSION);
    return failed ? 1 : 0;
}
