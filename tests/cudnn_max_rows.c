/* `test_cudnn_gpu --max-rows FILE`: what cuDNN writes into the rows of Max
 * past each sequence's length (padding in bshd/sbhd), which the engine
 * never copies back and TE's `fused_attn_fwd` amaxes all the same
 * (cpp_extensions/fused_attn.py: torch.amax over dims (0, 2, 3) of the
 * whole [b, h, sq, 1] Max, which its C++ allocates with torch::empty).
 *
 * Per case, three forwards on the cuDNN engine with the Max capture hook
 * (fattn_cudnn_capture_max): the device Max first filled with a NaN with a
 * payload, then with a finite sentinel, then not filled at all right after
 * the sentinel run (the same plan, the same arena slot: what the previous
 * call left). Each padded row is classified (the fill untouched, zero,
 * -inf, +inf, another NaN, a finite value), the defined rows are compared
 * with the CPU engine's Max, and TE's per-head amax over every row (NaN
 * when any row is NaN, as torch.amax) is set against fattn's amax over the
 * defined rows. One JSON line per run in FILE, a summary on stdout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "cudnn_max_rows.h"
#include "fattn/cudnn.h"

/* The default matrix's two padded bshd/sbhd max_logit cases
 * (golden/default_cases.json, same shapes, lengths and seeds; windows as
 * TE normalises them) and the CPU matrix's fully masked one. */
static const int sl_q1[] = {5, 9, 3}, sl_kv1[] = {7, 4, 11};
static const int sl_q2[] = {6, 12}, sl_kv2[] = {9, 14};
static const tcase cases[] = {
    {.id = "max_logit.padding.short_seqlens.bf16", .b = 3, .h = 2, .hg = 2, .sq = 32,
     .skv = 32, .d = 16, .dv = 16, .dtype = FATTN_DTYPE_BFLOAT16,
     .layout = FATTN_LAYOUT_BSHD_BSHD_BSHD, .mask = FATTN_MASK_PADDING, .window = {-1, -1},
     .training = true, .return_max_logit = true, .seqlens_q = sl_q1, .seqlens_kv = sl_kv1,
     .seed = 1094},
    {.id = "max_logit.padding_causal.short_seqlens.f16", .b = 2, .h = 2, .hg = 2, .sq = 40,
     .skv = 48, .d = 16, .dv = 16, .dtype = FATTN_DTYPE_FLOAT16,
     .layout = FATTN_LAYOUT_SBHD_SBHD_SBHD, .mask = FATTN_MASK_PADDING_CAUSAL,
     .window = {-1, 0}, .training = true, .return_max_logit = true, .seqlens_q = sl_q2,
     .seqlens_kv = sl_kv2, .seed = 1095},
};

enum { K_FILL, K_ZERO, K_NEG_INF, K_POS_INF, K_NAN, K_FINITE, K_COUNT };
static const char *const kind_names[K_COUNT] = {"fill", "zero", "-inf", "+inf", "nan",
                                                "finite"};

static int kind_of(float v, uint32_t fill, bool filled)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    if (filled && bits == fill)
        return K_FILL;
    if (v == 0.0f)
        return K_ZERO;
    if (isnan(v))
        return K_NAN;
    if (isinf(v))
        return v < 0 ? K_NEG_INF : K_POS_INF;
    return K_FINITE;
}

/* A float as JSON: a number, or "nan" / "inf" / "-inf" as strings. */
static void json_num(FILE *out, double v)
{
    if (isnan(v))
        fprintf(out, "\"nan\"");
    else if (isinf(v))
        fprintf(out, v < 0 ? "\"-inf\"" : "\"inf\"");
    else
        fprintf(out, "%.9g", v);
}

/* Forward only, two-call protocol, Stats and Max poisoned (0xFF). */
static fattn_status run_fwd(const tcase *c, tcase_buffers *buf, fattn_engine *e)
{
    fattn_status st = tcase_setup(c, buf);
    if (st != FATTN_OK)
        return st;
    memset(&buf->aux_fwd, 0, sizeof buf->aux_fwd);
    fattn_fwd_params fp = tcase_fwd_params(c, buf);
    if ((st = fattn_engine_fwd(e, &fp)) != FATTN_OK)
        return st;
    fattn_tensor *t0 = &buf->aux_fwd.t[0], *t1 = &buf->aux_fwd.t[1];
    if ((st = fattn_tensor_alloc(&buf->stats, t0->dtype, t0->ndim, t0->shape)) ||
        (st = fattn_tensor_alloc(&buf->max, t1->dtype, t1->ndim, t1->shape)))
        return st;
    fattn_tensor_fill_bits(&buf->stats, UINT64_MAX);
    fattn_tensor_fill_bits(&buf->max, UINT64_MAX);
    *t0 = buf->stats;
    *t1 = buf->max;
    return fattn_engine_fwd(e, &fp);
}

typedef struct run_spec {
    const char *name;
    bool fill;
    uint32_t bits;
} run_spec;

/* One run: classify, compare, amax; one JSON line. False on failure. */
static bool measure(FILE *out, const tcase *c, const run_spec *r, fattn_engine *gpu,
                    const float *cpu_max, float *dev, int64_t n)
{
    tcase_buffers buf;
    memset(&buf, 0, sizeof buf);
    fattn_status st = fattn_cudnn_capture_max(gpu, dev, n, r->fill ? &r->bits : NULL);
    if (st == FATTN_OK)
        st = run_fwd(c, &buf, gpu);
    fattn_cudnn_capture_max(gpu, NULL, 0, NULL);
    if (st != FATTN_OK) {
        printf("# %s %s: %s\n", c->id, r->name, fattn_last_error());
        tcase_teardown(&buf);
        return false;
    }
    long counts[K_COUNT] = {0};
    double worst = 0.0;
    int h = c->h;
    float te[64], fa[64];
    bool te_nan[64];
    for (int n_ = 0; n_ < h; n_++)
        te[n_] = fa[n_] = -INFINITY, te_nan[n_] = false;
    for (int bi = 0; bi < c->b; bi++)
        for (int n_ = 0; n_ < h; n_++)
            for (int i = 0; i < c->sq; i++) {
                float v = dev[((int64_t)bi * h + n_) * c->sq + i];
                bool defined = i < buf.seqlens_q[bi];
                if (isnan(v))
                    te_nan[n_] = true;
                else if (v > te[n_])
                    te[n_] = v;
                if (defined) {
                    float ref = cpu_max[((int64_t)bi * h + n_) * c->sq + i];
                    double dd = (isinf(ref) && ref == v) ? 0.0 : fabs((double)v - ref);
                    worst = dd > worst || isnan(dd) ? dd : worst;
                    if (ref > fa[n_])
                        fa[n_] = ref;
                } else {
                    counts[kind_of(v, r->bits, r->fill)]++;
                }
            }
    fprintf(out, "{\"case\":\"%s\",\"run\":\"%s\",\"fill\":\"%s0x%08x\",\"padded\":{",
            c->id, r->name, r->fill ? "" : "none/", r->bits);
    printf("# %-44s %-9s padded rows:", c->id, r->name);
    for (int k = 0; k < K_COUNT; k++) {
        fprintf(out, "%s\"%s\":%ld", k ? "," : "", kind_names[k], counts[k]);
        if (counts[k])
            printf(" %s %ld", kind_names[k], counts[k]);
    }
    fprintf(out, "},\"defined_max_abs_diff_vs_cpu\":");
    json_num(out, worst);
    fprintf(out, ",\"te_amax\":[");
    printf("; defined rows vs CPU %.3e; TE amax / fattn:", worst);
    for (int n_ = 0; n_ < h; n_++) {
        double tv = te_nan[n_] ? NAN : (double)te[n_];
        fprintf(out, "%s", n_ ? "," : "");
        json_num(out, tv);
        printf(" %.9g/%.9g", tv, (double)fa[n_]);
    }
    fprintf(out, "],\"fattn_amax\":[");
    for (int n_ = 0; n_ < h; n_++) {
        fprintf(out, "%s", n_ ? "," : "");
        json_num(out, fa[n_]);
    }
    fprintf(out, "]}\n");
    printf("\n");
    tcase_teardown(&buf);
    return true;
}

int cudnn_max_rows_run(fattn_engine *gpu, const char *path)
{
    FILE *out = fopen(path, "w");
    fattn_engine *cpu = NULL;
    if (!out || fattn_engine_init_cpu(&cpu, NULL) != FATTN_OK) {
        printf("Bail out! %s: %s\n", path, out ? fattn_last_error() : "cannot write");
        if (out)
            fclose(out);
        return 1;
    }
    /* a quiet NaN with a payload (not a canonical NaN), a finite sentinel */
    const run_spec runs[] = {{"nan-fill", true, 0x7fc0deadu},
                             {"sentinel", true, 0xc640e600u}, /* -12345.5f */
                             {"unfilled", false, 0xc640e600u}};
    const tcase *fm = tcase_find("fwd.max_logit.fully_masked_rows.bf16");
    const tcase *all[3] = {&cases[0], &cases[1], fm};
    bool ok = true;
    for (int ci = 0; ci < 3 && all[ci]; ci++) {
        const tcase *c = all[ci];
        tcase_buffers ref;
        memset(&ref, 0, sizeof ref);
        int64_t n = (int64_t)c->b * c->h * c->sq;
        float *dev = malloc((size_t)n * sizeof *dev);
        if (!dev || run_fwd(c, &ref, cpu) != FATTN_OK) {
            printf("# %s on the CPU engine: %s\n", c->id, fattn_last_error());
            free(dev);
            tcase_teardown(&ref);
            ok = false;
            continue;
        }
        /* the CPU Max in the graph's [b, h, sq] order (its own layout is
         * the aux pack's [b, h, sq, 1]: the same for bshd/sbhd) */
        const float *cpu_max = ref.max.data;
        for (int ri = 0; ri < 3; ri++)
            ok = measure(out, c, &runs[ri], gpu, cpu_max, dev, n) && ok;
        free(dev);
        tcase_teardown(&ref);
    }
    fattn_engine_free(cpu);
    fclose(out);
    return ok ? 0 : 1;
}
