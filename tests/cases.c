/* The CPU engine's test matrix (cases.h): spec rows, parsed by the harness's
 * spec parser and resolved by fh_case_resolve, and the code that turns a
 * case into buffers and engine parameters.
 *
 * Every case is small (b*h*sq*skv*max(d,dv) <= ~2e5) so that the float64
 * oracle and an -O0 sanitizer build run it in well under a second. Ids are
 * stable: "<fwd|bwd>.<feature>[.<detail>].<f16|bf16|f32>", "bwd" meaning the
 * case trains (forward + backward), "fwd" inference only. Every feature is in
 * the table in float16 and in bfloat16, a few in float32 io.
 *
 * A row is the keys of a case spec (docs/cases.md) in JSON, less `id` and
 * `dtype`: the row gives the id's stem and the dtypes it is listed in. Keys
 * left out take the spec defaults, so inference rows say
 * "is_training": false. Only configurations TE accepts are listed:
 * post_scale_bias never with a padding mask (so never THD), alibi only with
 * causal / causal_bottom_right, THD always with a padding mask, bottom-right
 * masks with sq <= skv unless the mask pads.
 *
 * Inputs come from harness/model/inputs.c (fh_inputs_make_from_case) over the
 * resolved case, so the tests see exactly the bits `fattn run` records for
 * the same spec; only the output buffers, the rng_state and the engine's
 * parameter blocks are made here.
 */
#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"
#include "cases.h"
#include "fattn/dtype.h"
#include "fattn/te.h"
#include "inputs.h"
#include "spec.h"

/* ------------------------------------------------------------------------ */
/* The table                                                                */
/* ------------------------------------------------------------------------ */

typedef struct spec_row {
    const char *stem;   /* the id without its dtype suffix */
    const char *dtypes; /* "f16 bf16 f32": the variants listed */
    const char *keys;   /* JSON members of the spec, less id and dtype */
} spec_row;

/* The keys are written as JSON in the source; # makes them a string. */
#define ROW(STEM, DTYPES, ...) {STEM, DTYPES, #__VA_ARGS__}

static const spec_row spec_rows[] = {
    /* ---- every QKV layout -------------------------------------------- */
    ROW("bwd.nomask", "f16 bf16 f32", "b": 2, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "seed": 101),
    ROW("bwd.layout.bshd_bshd_bshd", "f16 bf16", "b": 2, "h": 4, "hg": 2, "sq": 32, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "causal", "seed": 102),
    ROW("bwd.layout.bhsd_bhsd_bhsd", "f16 bf16", "b": 2, "h": 2, "hg": 1, "sq": 20, "skv": 36,
        "d_qk": 16, "d_v": 8, "layout": "bhsd_bhsd_bhsd", "seed": 103),
    ROW("bwd.layout.sb3hd", "f16 bf16 f32", "b": 2, "h": 2, "sq": 24, "d_qk": 16,
        "layout": "sb3hd", "mask": "causal", "seed": 104),
    ROW("bwd.layout.sbh3d", "f16 bf16", "b": 2, "h": 2, "sq": 24, "d_qk": 16, "layout": "sbh3d",
        "seed": 105),
    ROW("bwd.layout.bs3hd", "f16 bf16", "b": 3, "h": 2, "sq": 24, "d_qk": 16, "layout": "bs3hd",
        "mask": "padding", "seed": 106),
    ROW("bwd.layout.bsh3d", "f16 bf16", "b": 2, "h": 2, "sq": 24, "d_qk": 16, "layout": "bsh3d",
        "mask": "padding_causal", "seed": 107),
    ROW("bwd.layout.sbhd_sb2hd", "f16 bf16", "b": 2, "h": 4, "hg": 2, "sq": 16, "skv": 40,
        "d_qk": 16, "layout": "sbhd_sb2hd", "seed": 108),
    ROW("bwd.layout.sbhd_sbh2d", "f16 bf16", "b": 2, "h": 4, "hg": 2, "sq": 16, "skv": 40,
        "d_qk": 16, "layout": "sbhd_sbh2d", "mask": "causal_bottom_right", "seed": 109),
    ROW("bwd.layout.bshd_bs2hd", "f16 bf16", "b": 2, "h": 2, "hg": 1, "sq": 20, "skv": 30,
        "d_qk": 16, "layout": "bshd_bs2hd", "mask": "padding", "seed": 110),
    ROW("bwd.layout.bshd_bsh2d", "f16 bf16", "b": 2, "h": 2, "sq": 20, "skv": 30, "d_qk": 16,
        "layout": "bshd_bsh2d", "mask": "padding_causal_bottom_right", "seed": 111),
    ROW("bwd.layout.sbhd_bshd_bshd", "f16 bf16", "b": 2, "h": 2, "sq": 16, "skv": 24, "d_qk": 16,
        "d_v": 8, "layout": "sbhd_bshd_bshd", "mask": "causal", "seed": 112),
    ROW("bwd.layout.bshd_sbhd_sbhd", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 16, "d_qk": 8,
        "d_v": 16, "layout": "bshd_sbhd_sbhd", "mask": "padding", "seed": 113),
    ROW("bwd.layout.thd_thd_thd", "f16 bf16 f32", "b": 3, "h": 2, "hg": 1, "sq": 24, "skv": 32,
        "d_qk": 16, "layout": "thd_thd_thd", "mask": "padding", "pad_between_seqs": true,
        "seed": 114),
    ROW("bwd.layout.t3hd", "f16 bf16", "b": 3, "h": 2, "sq": 24, "d_qk": 16, "layout": "t3hd",
        "mask": "padding_causal", "pad_between_seqs": true, "seed": 115),
    ROW("bwd.layout.th3d", "f16 bf16", "b": 3, "h": 2, "sq": 24, "d_qk": 16, "layout": "th3d",
        "mask": "padding", "seed": 116),
    ROW("bwd.layout.thd_t2hd", "f16 bf16", "b": 3, "h": 4, "hg": 2, "sq": 16, "skv": 32,
        "d_qk": 16, "layout": "thd_t2hd", "mask": "padding_causal_bottom_right",
        "pad_between_seqs": true, "seed": 117),
    ROW("bwd.layout.thd_th2d", "f16 bf16", "b": 2, "h": 2, "hg": 1, "sq": 20, "skv": 28,
        "d_qk": 16, "layout": "thd_th2d", "mask": "padding", "pad_between_seqs": true,
        "seed": 118),
    ROW("bwd.layout.thd_bshd_bshd", "f16 bf16", "b": 2, "h": 2, "sq": 16, "skv": 24, "d_qk": 16,
        "layout": "thd_bshd_bshd", "mask": "padding", "pad_between_seqs": true, "seed": 119),
    ROW("bwd.layout.thd_sbhd_sbhd", "f16 bf16", "b": 2, "h": 2, "sq": 16, "skv": 24, "d_qk": 16,
        "layout": "thd_sbhd_sbhd", "mask": "padding_causal", "seed": 120),

    /* ---- the six masks ------------------------------------------------ */
    ROW("bwd.causal", "f16 bf16", "b": 2, "h": 2, "sq": 32, "d_qk": 16, "layout": "bshd_bshd_bshd",
        "mask": "causal", "seed": 201),
    ROW("bwd.causal.sq_gt_skv", "f16 bf16", "b": 2, "h": 2, "sq": 40, "skv": 16, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "mask": "causal", "seed": 202),
    ROW("bwd.padding", "f16 bf16", "b": 3, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "padding", "seed": 203),
    ROW("bwd.padding_causal", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 32, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "padding_causal", "seqlens_q": [24, 9],
        "seqlens_kv": [11, 30], "seed": 204),
    ROW("bwd.causal_bottom_right", "f16 bf16", "b": 2, "h": 2, "sq": 16, "skv": 40, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "mask": "causal_bottom_right", "seed": 205),
    ROW("bwd.padding_causal_bottom_right", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 32,
        "d_qk": 16, "layout": "bshd_bshd_bshd", "mask": "padding_causal_bottom_right",
        "seqlens_q": [24, 12], "seqlens_kv": [32, 20], "seed": 206),
    /* seqlens_q > seqlens_kv under a bottom-right diagonal: rows
     * i < sq_b - skv_b of batch 0 keep no key at all. */
    ROW("bwd.fully_masked_rows", "f16 bf16", "b": 2, "h": 2, "sq": 20, "skv": 32, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "padding_causal_bottom_right", "seqlens_q": [20, 5],
        "seqlens_kv": [6, 30], "seed": 207),

    /* ---- sliding windows, both alignments ----------------------------- */
    ROW("bwd.swa.bottom_right", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "window": [3, 2], "seed": 301),
    ROW("bwd.swa.top_left", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "window": [3, 2], "bottom_right_diagonal": false, "seed": 302),
    ROW("bwd.swa.causal", "f16 bf16", "b": 2, "h": 2, "sq": 32, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "causal", "window": [2, 0], "seed": 303),
    ROW("bwd.swa.causal_bottom_right", "f16 bf16", "b": 2, "h": 2, "sq": 16, "skv": 40, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "mask": "causal_bottom_right", "window": [2, 0], "seed": 304),
    ROW("bwd.swa.diagonal", "f16 bf16", "b": 2, "h": 2, "sq": 16, "skv": 24, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "window": [0, 0], "seed": 305),
    ROW("bwd.swa.padding.top_left", "f16 bf16", "b": 3, "h": 2, "sq": 24, "skv": 32, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "padding", "window": [3, 2],
        "bottom_right_diagonal": false, "seed": 306),
    ROW("bwd.swa.left_ge_skv", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "window": [50, 1], "bottom_right_diagonal": false,
        "seed": 307),
    ROW("bwd.swa.padding_causal.left_ge_skv", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 32,
        "d_qk": 16, "layout": "bshd_bshd_bshd", "mask": "padding_causal", "window": [64, 0],
        "seqlens_q": [24, 9], "seqlens_kv": [11, 30], "seed": 308),
    /* Top-left (3,1) with sq > skv: rows i >= skv + 3 keep no key. */
    ROW("bwd.swa.empty_rows", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 16, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "window": [3, 1], "bottom_right_diagonal": false, "seed": 309),
    ROW("bwd.swa.thd.padding_causal_bottom_right", "f16 bf16", "b": 3, "h": 2, "sq": 24, "skv": 32,
        "d_qk": 16, "layout": "thd_thd_thd", "mask": "padding_causal_bottom_right",
        "window": [4, 0], "pad_between_seqs": true, "seed": 310),
    ROW("bwd.swa.thd.padding", "f16 bf16", "b": 3, "h": 2, "sq": 24, "skv": 32, "d_qk": 16,
        "layout": "thd_thd_thd", "mask": "padding", "window": [4, 4], "seed": 311),
    /* A causal mask with the window (-1,-1), as a direct fused_attn_fwd
     * caller (TE's context-parallel code) passes it: causal all the same. */
    ROW("bwd.window_m1m1.causal", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "causal", "window": [-1, -1], "raw_func_args": true,
        "seed": 312),
    ROW("bwd.window_m1m1.causal_bottom_right", "f16 bf16", "b": 2, "h": 2, "sq": 16, "skv": 40,
        "d_qk": 16, "layout": "sbhd_sbhd_sbhd", "mask": "causal_bottom_right",
        "window": [-1, -1], "raw_func_args": true, "seed": 313),
    ROW("bwd.window_m1m1.thd.padding_causal", "f16 bf16", "b": 3, "h": 2, "sq": 24, "skv": 32,
        "d_qk": 16, "layout": "thd_thd_thd", "mask": "padding_causal", "window": [-1, -1],
        "pad_between_seqs": true, "raw_func_args": true, "seed": 314),
    ROW("bwd.window_m1m1.padding_causal_bottom_right", "f16 bf16", "b": 2, "h": 2, "sq": 24,
        "skv": 32, "d_qk": 16, "layout": "bshd_bshd_bshd", "mask": "padding_causal_bottom_right",
        "window": [-1, -1], "seqlens_q": [24, 10], "seqlens_kv": [32, 17], "raw_func_args": true,
        "seed": 315),

    /* ---- post_scale_bias shapes and alibi ----------------------------- */
    ROW("bwd.bias.1hss", "f16 bf16 f32", "b": 2, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "bias": "post_scale_bias", "seed": 401),
    ROW("bwd.bias.b1ss", "f16 bf16", "b": 2, "h": 2, "sq": 32, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "causal", "bias": "post_scale_bias",
        "bias_shape": "b1ss", "seed": 402),
    ROW("bwd.bias.bhss", "f16 bf16", "b": 2, "h": 2, "hg": 1, "sq": 20, "skv": 36, "d_qk": 16,
        "layout": "bhsd_bhsd_bhsd", "bias": "post_scale_bias", "bias_shape": "bhss", "seed": 403),
    ROW("bwd.bias.11ss", "f16 bf16", "b": 2, "h": 2, "sq": 16, "skv": 40, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "mask": "causal_bottom_right", "bias": "post_scale_bias",
        "bias_shape": "11ss", "seed": 404),
    /* 111s: cuDNN computes no dBias for it, so TE runs it forward only. */
    ROW("fwd.bias.111s", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "bias": "post_scale_bias", "bias_shape": "111s",
        "is_training": false, "seed": 405),
    ROW("bwd.alibi.causal", "f16 bf16", "b": 2, "h": 4, "sq": 32, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "causal", "bias": "alibi", "seed": 406),
    /* h = 6: two heads take the odd-k slopes of a non-power-of-two count. */
    ROW("bwd.alibi.causal_bottom_right", "f16 bf16", "b": 1, "h": 6, "hg": 3, "sq": 16, "skv": 40,
        "d_qk": 16, "layout": "sbhd_sbhd_sbhd", "mask": "causal_bottom_right", "bias": "alibi",
        "seed": 407),

    /* ---- dropout ------------------------------------------------------ */
    ROW("bwd.dropout.p01", "f16 bf16 f32", "b": 2, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "dropout_p": 0.1, "seed": 501),
    ROW("bwd.dropout.p05", "f16 bf16", "b": 2, "h": 2, "sq": 32, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "causal", "dropout_p": 0.5, "seed": 502),
    ROW("bwd.dropout.thd", "f16 bf16", "b": 3, "h": 2, "sq": 24, "skv": 32, "d_qk": 16,
        "layout": "thd_thd_thd", "mask": "padding", "dropout_p": 0.1, "pad_between_seqs": true,
        "seed": 503),

    /* ---- sink softmax ------------------------------------------------- */
    ROW("bwd.softmax.off_by_one", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "softmax": "off-by-one", "seed": 601),
    ROW("bwd.softmax.learnable", "f16 bf16 f32", "b": 2, "h": 4, "hg": 2, "sq": 32, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "causal", "softmax": "learnable", "seed": 602),
    ROW("bwd.softmax.learnable.thd", "f16 bf16", "b": 3, "h": 2, "sq": 24, "skv": 32, "d_qk": 16,
        "layout": "thd_thd_thd", "mask": "padding_causal", "softmax": "learnable",
        "pad_between_seqs": true, "seed": 603),
    ROW("bwd.softmax.off_by_one.swa", "f16 bf16", "b": 2, "h": 2, "sq": 32, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "causal", "window": [3, 0], "softmax": "off-by-one",
        "seed": 604),
    ROW("bwd.softmax.learnable.fully_masked_rows", "f16 bf16", "b": 2, "h": 2, "sq": 20, "skv": 32,
        "d_qk": 16, "layout": "bshd_bshd_bshd", "mask": "padding_causal_bottom_right",
        "softmax": "learnable", "seqlens_q": [20, 5], "seqlens_kv": [6, 30], "seed": 605),

    /* ---- GQA / MQA, d != dv --------------------------------------------- */
    ROW("bwd.gqa8", "f16 bf16", "b": 1, "h": 16, "hg": 2, "sq": 16, "skv": 24, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "seed": 701),
    ROW("bwd.mqa", "f16 bf16", "b": 2, "h": 4, "hg": 1, "sq": 16, "skv": 32, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "mask": "causal_bottom_right", "seed": 702),
    ROW("bwd.dqk32_dv16", "f16 bf16", "b": 1, "h": 2, "sq": 16, "skv": 24, "d_qk": 32, "d_v": 16,
        "layout": "bshd_bshd_bshd", "seed": 703),
    ROW("bwd.dqk24_dv40", "f16 bf16", "b": 1, "h": 2, "sq": 16, "skv": 24, "d_qk": 24, "d_v": 40,
        "layout": "sbhd_sbhd_sbhd", "mask": "causal", "seed": 704),

    /* ---- return_max_logit, inference ----------------------------------- */
    ROW("bwd.max_logit", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "return_max_logit": true, "seed": 801),
    ROW("bwd.max_logit.thd", "f16 bf16", "b": 3, "h": 2, "sq": 24, "skv": 32, "d_qk": 16,
        "layout": "thd_thd_thd", "mask": "padding", "return_max_logit": true,
        "pad_between_seqs": true, "seed": 802),
    ROW("fwd.max_logit.fully_masked_rows", "f16 bf16", "b": 2, "h": 2, "sq": 20, "skv": 32,
        "d_qk": 16, "layout": "bshd_bshd_bshd", "mask": "padding_causal_bottom_right",
        "is_training": false, "return_max_logit": true, "seqlens_q": [20, 5],
        "seqlens_kv": [6, 30], "seed": 803),
    ROW("fwd.nomask", "f16 bf16", "b": 2, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "is_training": false, "seed": 804),
    ROW("fwd.thd.padding_causal", "f16 bf16", "b": 3, "h": 2, "sq": 24, "skv": 32, "d_qk": 16,
        "layout": "thd_thd_thd", "mask": "padding_causal", "is_training": false,
        "pad_between_seqs": true, "seed": 805),

    /* ---- head dims above 256: TE's inference from cuDNN 9.10.2 ---------- */
    ROW("fwd.d512", "f16 bf16", "b": 1, "h": 2, "sq": 8, "skv": 24, "d_qk": 512,
        "layout": "bshd_bshd_bshd", "is_training": false, "seed": 811),
    ROW("fwd.d1024.sq1.padding.max_logit", "f16 bf16", "b": 2, "h": 2, "sq": 1, "skv": 24,
        "d_qk": 1024, "layout": "bshd_bshd_bshd", "mask": "padding", "is_training": false,
        "return_max_logit": true, "seqlens_kv": [24, 13], "seed": 812),
    ROW("fwd.dqk512_dv64.causal", "f16 bf16", "b": 1, "h": 2, "hg": 1, "sq": 8, "skv": 16,
        "d_qk": 512, "d_v": 64, "layout": "sbhd_sbhd_sbhd", "mask": "causal",
        "is_training": false, "seed": 813),

    /* ---- edges: sq = 1, odd skv, length-1 sequences ------------------ */
    ROW("bwd.sq1", "f16 bf16", "b": 2, "h": 4, "hg": 2, "sq": 1, "skv": 67, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "seed": 901),
    ROW("bwd.sq1.causal_bottom_right", "f16 bf16", "b": 2, "h": 4, "hg": 2, "sq": 1, "skv": 67,
        "d_qk": 16, "layout": "sbhd_sbhd_sbhd", "mask": "causal_bottom_right", "seed": 902),
    ROW("bwd.skv67", "f16 bf16", "b": 1, "h": 2, "sq": 20, "skv": 67, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "causal", "seed": 903),
    ROW("bwd.skv130", "f16 bf16", "b": 1, "h": 2, "sq": 8, "skv": 130, "d_qk": 16,
        "layout": "sbhd_sbhd_sbhd", "seed": 904),
    ROW("bwd.seqlen1", "f16 bf16", "b": 3, "h": 2, "sq": 8, "skv": 12, "d_qk": 16,
        "layout": "bshd_bshd_bshd", "mask": "padding", "seqlens_q": [1, 7, 1],
        "seqlens_kv": [1, 1, 9], "seed": 905),
    ROW("bwd.thd.seqlen1", "f16 bf16", "b": 3, "h": 2, "sq": 12, "skv": 16, "d_qk": 16,
        "layout": "thd_thd_thd", "mask": "padding_causal", "pad_between_seqs": true,
        "seqlens_q": [1, 9, 1], "seqlens_kv": [1, 12, 5], "seed": 906),
};

static const struct {
    const char *suffix;
    const char *dtype;
} row_dtypes[] = {{"f16", "float16"}, {"bf16", "bfloat16"}, {"f32", "float32"}};

static struct {
    pthread_once_t once;
    fh_spec_list specs; /* the parsed rows, one per case */
    tcase *cases;
    int n;
} table = {.once = PTHREAD_ONCE_INIT};

/* Append to a growing string; false when out of memory. */
static bool cat(char **buf, size_t *len, size_t *cap, const char *s)
{
    size_t n = strlen(s);
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap * 2 : 16384;
        while (c < *len + n + 1)
            c *= 2;
        char *p = realloc(*buf, c);
        if (!p)
            return false;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n + 1);
    *len += n;
    return true;
}

/* The rows as one spec file: a JSON array of case objects. */
static char *rows_json(void)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    bool ok = cat(&buf, &len, &cap, "[");
    bool first = true;
    for (size_t r = 0; ok && r < sizeof spec_rows / sizeof spec_rows[0]; r++) {
        for (size_t d = 0; ok && d < sizeof row_dtypes / sizeof row_dtypes[0]; d++) {
            const char *list = spec_rows[r].dtypes, *sfx = row_dtypes[d].suffix;
            size_t n = strlen(sfx);
            bool listed = false;
            for (const char *p = list; (p = strstr(p, sfx)) != NULL; p += n)
                listed |= (p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0');
            if (!listed)
                continue;
            char head[256];
            snprintf(head, sizeof head, "%s{\"id\":\"%s.%s\",\"dtype\":\"%s\",", first ? "" : ",",
                     spec_rows[r].stem, sfx, row_dtypes[d].dtype);
            ok = cat(&buf, &len, &cap, head) && cat(&buf, &len, &cap, spec_rows[r].keys) &&
                 cat(&buf, &len, &cap, "}");
            first = false;
        }
    }
    ok = ok && cat(&buf, &len, &cap, "]");
    if (!ok) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* A table row as the tests see it: the spec's values, with the window and
 * diagonal as the harness resolves them and the bias dims spelled out. */
static fattn_status row_case(const fh_spec *s, tcase *c)
{
    fh_case rc;
    fattn_status st = fh_case_resolve(s, &rc);
    if (st != FATTN_OK)
        return st;
    memset(c, 0, sizeof *c);
    c->id = s->id;
    c->b = (int)s->b, c->h = (int)s->h, c->hg = (int)s->hg;
    c->sq = (int)s->sq, c->skv = (int)s->skv, c->d = (int)s->d_qk, c->dv = (int)s->d_v;
    c->dtype = s->dtype;
    c->layout = s->layout;
    c->mask = s->mask;
    c->bias = s->bias;
    if (rc.t.attn_bias.present) {
        c->bias_b = (int)rc.t.attn_bias.shape[0];
        c->bias_h = (int)rc.t.attn_bias.shape[1];
        c->bias_sq = (int)rc.t.attn_bias.shape[2];
    }
    c->softmax = s->softmax;
    c->direct_call = s->raw_func_args;
    c->window[0] = rc.window[0];
    c->window[1] = rc.window[1];
    c->bottom_right = rc.bottom_right_diagonal;
    c->dropout = rc.dropout_p;
    c->training = s->is_training;
    c->return_max_logit = s->return_max_logit;
    c->pad_between_seqs = s->pad_between_seqs;
    c->seed = (uint64_t)s->seed;
    fh_case_free(&rc);
    int *lists[2] = {NULL, NULL};
    const int64_t *given[2] = {s->seqlens_q, s->seqlens_kv};
    for (int i = 0; i < 2; i++) {
        if (!given[i])
            continue;
        if (!(lists[i] = calloc((size_t)s->b, sizeof(int)))) {
            free(lists[0]);
            return fattn_error(FATTN_E_NOMEM, "case %s: seqlens", s->id);
        }
        for (int64_t j = 0; j < s->b; j++)
            lists[i][j] = (int)given[i][j];
    }
    c->seqlens_q = lists[0];
    c->seqlens_kv = lists[1];
    return FATTN_OK;
}

/* Built once; a row that does not parse or resolve is a broken test
 * binary, so it is reported and the process stops. The table lives as
 * long as the process. */
static void table_build(void)
{
    char *json = rows_json();
    fattn_status st = json ? fh_spec_parse_json(json, strlen(json), "tests/cases.c", &table.specs)
                           : fattn_error(FATTN_E_NOMEM, "tests/cases.c: the rows");
    free(json);
    if (st == FATTN_OK && !(table.cases = calloc(table.specs.count, sizeof *table.cases)))
        st = fattn_error(FATTN_E_NOMEM, "tests/cases.c: the table");
    for (size_t i = 0; st == FATTN_OK && i < table.specs.count; i++)
        st = row_case(&table.specs.items[i], &table.cases[i]);
    if (st != FATTN_OK) {
        fprintf(stderr, "tests/cases.c: the case table does not build: %s\n", fattn_last_error());
        abort();
    }
    table.n = (int)table.specs.count;
}

const tcase *tcase_table_get(void)
{
    pthread_once(&table.once, table_build);
    return table.cases;
}

int tcase_count_get(void)
{
    pthread_once(&table.once, table_build);
    return table.n;
}

const fh_spec *tcase_spec_of(const tcase *c)
{
    /* by identity: a suite's own tcase (not a table row) has no spec */
    for (int i = 0; i < tcase_count; i++)
        if (&tcase_table[i] == c) {
            assert((size_t)i < table.specs.count);
            return &table.specs.items[i];
        }
    return NULL;
}

const tcase *tcase_find(const char *id)
{
    for (int i = 0; i < tcase_count; i++)
        if (strcmp(tcase_table[i].id, id) == 0)
            return &tcase_table[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Buffers                                                                  */
/* ------------------------------------------------------------------------ */

#define POISON UINT64_MAX /* 0xFF bytes */

static fattn_status check_case(const tcase *c)
{
    if (c->b < 1 || c->b > 63 || c->h < 1 || c->hg < 1 || c->h % c->hg != 0 ||
        c->sq < 1 || c->skv < 1 || c->d < 1 || c->dv < 1)
        return fattn_error(FATTN_E_INVALID_ARG, "case %s: bad dims", c->id);
    fattn_qkv_layout_group g = fattn_layout_group(c->layout);
    if ((g == FATTN_LAYOUT_GROUP_3HD || g == FATTN_LAYOUT_GROUP_H3D) &&
        (c->sq != c->skv || c->h != c->hg || c->d != c->dv))
        return fattn_error(FATTN_E_INVALID_ARG,
                           "case %s: a qkv-packed layout needs sq == skv, h == hg, d == dv",
                           c->id);
    if ((g == FATTN_LAYOUT_GROUP_HD_2HD || g == FATTN_LAYOUT_GROUP_HD_H2D) &&
        c->d != c->dv)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "case %s: a kv-packed layout needs d == dv", c->id);
    return FATTN_OK;
}

/* The bias_shape whose dims are (bias_b, bias_h, bias_sq, skv); where two
 * name the same dims (b, h or sq of 1) either gives the same tensor. */
static fattn_status bias_shape_of(const tcase *c, fh_bias_shape *out)
{
    static const fh_bias_shape all[] = {FH_BIAS_SHAPE_1HSS, FH_BIAS_SHAPE_B1SS,
                                           FH_BIAS_SHAPE_BHSS, FH_BIAS_SHAPE_11SS,
                                           FH_BIAS_SHAPE_111S};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const char *n = fh_bias_shape_name(all[i]);
        if ((n[0] == 'b' ? c->b : 1) == c->bias_b && (n[1] == 'h' ? c->h : 1) == c->bias_h &&
            (n[2] == 's' ? c->sq : 1) == c->bias_sq) {
            *out = all[i];
            return FATTN_OK;
        }
    }
    return fattn_error(FATTN_E_INVALID_ARG, "case %s: bias [%d,%d,%d,skv] has no bias_shape",
                       c->id, c->bias_b, c->bias_h, c->bias_sq);
}

/* The spec of a case (a table row's, or a suite's own tcase): what the
 * harness needs to resolve and draw its inputs. The window and diagonal
 * are passed as given (the table's are already resolved, a fixed point). */
static fattn_status tcase_spec(const tcase *c, fh_spec *s)
{
    fh_spec_init(s);
    snprintf(s->id, sizeof s->id, "%s", c->id);
    s->b = c->b, s->h = c->h, s->hg = c->hg, s->sq = c->sq, s->skv = c->skv;
    s->d_qk = c->d, s->d_v = c->dv;
    s->dtype = c->dtype;
    s->layout = c->layout;
    s->mask = c->mask;
    s->bias = c->bias;
    s->softmax = c->softmax;
    s->window_set = true;
    s->raw_func_args = c->direct_call;
    s->window[0] = c->window[0];
    s->window[1] = c->window[1];
    s->bottom_right_diagonal = c->bottom_right ? FH_TRISTATE_TRUE : FH_TRISTATE_FALSE;
    s->dropout_p = c->dropout;
    s->is_training = c->training;
    s->return_max_logit = c->return_max_logit;
    s->pad_between_seqs = c->pad_between_seqs;
    s->seed = (int64_t)c->seed;
    fattn_status st = FATTN_OK;
    if (c->bias == FATTN_BIAS_POST_SCALE_BIAS || c->bias == FATTN_BIAS_PRE_SCALE_BIAS)
        st = bias_shape_of(c, &s->bias_shape);
    const int *given[2] = {c->seqlens_q, c->seqlens_kv};
    int64_t **lists[2] = {&s->seqlens_q, &s->seqlens_kv};
    for (int i = 0; st == FATTN_OK && i < 2; i++) {
        if (!given[i])
            continue;
        if (!(*lists[i] = calloc((size_t)c->b, sizeof(int64_t))))
            st = fattn_error(FATTN_E_NOMEM, "case %s: seqlens", c->id);
        for (int j = 0; *lists[i] && j < c->b; j++)
            (*lists[i])[j] = given[i][j];
    }
    if (st != FATTN_OK)
        fh_spec_free(s);
    return st;
}

/* Fill outputs with the poison (0xFF bytes), every element of every view
 * and storage. */
static void poison_outputs(tcase_buffers *buf)
{
    fattn_tensor *outs[] = {&buf->o,          &buf->stats,      &buf->max,
                            &buf->dq_storage, &buf->dk_storage, &buf->dv_storage,
                            &buf->d_bias,     &buf->d_softmax_offset};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        if (!fattn_tensor_is_empty(outs[i]))
            fattn_tensor_fill_bits(outs[i], POISON);
}

/* The inputs (harness/model/inputs.c) moved into buf, with the per-sequence
 * tables as ints. Every length is >= 1 in this matrix. */
static fattn_status take_inputs(const tcase *c, const fh_case *rc, tcase_buffers *buf)
{
    for (int bi = 0; bi < c->b; bi++) {
        if (rc->seqlens_q[bi] < 1 || rc->seqlens_kv[bi] < 1)
            return fattn_error(FATTN_E_INVALID_ARG, "case %s: seqlen out of range", c->id);
        buf->seqlens_q[bi] = (int)rc->seqlens_q[bi];
        buf->seqlens_kv[bi] = (int)rc->seqlens_kv[bi];
    }
    for (int bi = 0; bi <= c->b; bi++) {
        buf->offs_q[bi] = (int)rc->cu_seqlens_q_padded[bi];
        buf->offs_kv[bi] = (int)rc->cu_seqlens_kv_padded[bi];
    }
    fh_case_inputs in;
    fattn_status st = fh_inputs_make_from_case(rc, &in);
    if (st != FATTN_OK)
        return st;
    for (int i = 0; i < 3; i++)
        buf->qkv_storage[i] = in.storage[i];
    buf->q = in.q, buf->k = in.k, buf->v = in.v;
    buf->bias = in.attn_bias;
    buf->softmax_offset = in.softmax_offset;
    buf->cu_q = in.cu_seqlens_q, buf->cu_kv = in.cu_seqlens_kv;
    buf->cu_q_pad = in.cu_seqlens_q_padded, buf->cu_kv_pad = in.cu_seqlens_kv_padded;
    buf->d_o = in.d_out;
    buf->t_q = in.t_q, buf->t_kv = in.t_kv;
    buf->attn_scale = rc->attn_scale;
    return FATTN_OK;
}

/* O, the gradients and the rng_state, shaped as the resolved case says. */
static fattn_status alloc_outputs(const tcase *c, const fh_case *rc, tcase_buffers *buf)
{
    const fh_case_tensors *t = &rc->t;
    fattn_status st = fattn_tensor_alloc(&buf->o, t->out.dtype, t->out.ndim, t->out.shape);
    if (st == FATTN_OK && t->d_bias.present)
        st = fattn_tensor_alloc(&buf->d_bias, t->d_bias.dtype, t->d_bias.ndim, t->d_bias.shape);
    if (st == FATTN_OK && t->d_softmax_offset.present)
        st = fattn_tensor_alloc(&buf->d_softmax_offset, t->d_softmax_offset.dtype,
                                t->d_softmax_offset.ndim, t->d_softmax_offset.shape);
    if (st == FATTN_OK && c->training) {
        fattn_tensor dst[3];
        st = fh_inputs_alloc_qkv(rc, c->dtype, dst, &buf->dq, &buf->dk, &buf->dv);
        if (st == FATTN_OK) {
            buf->dq_storage = dst[0];
            buf->dk_storage = dst[1];
            buf->dv_storage = dst[2];
        }
    }
    int64_t rs[1] = {2};
    if (st == FATTN_OK)
        st = fattn_tensor_alloc(&buf->rng_state, FATTN_DTYPE_INT64, 1, rs);
    if (st == FATTN_OK) {
        ((int64_t *)buf->rng_state.data)[0] = (int64_t)(c->seed + 7);
        ((int64_t *)buf->rng_state.data)[1] = 32;
    }
    return st;
}

fattn_status tcase_setup(const tcase *c, tcase_buffers *buf)
{
    memset(buf, 0, sizeof *buf); /* every tensor the empty slot */
    fattn_status st = check_case(c);
    if (st != FATTN_OK)
        return st;
    fh_spec spec;
    if ((st = tcase_spec(c, &spec)) != FATTN_OK)
        return st;
    fh_case rc;
    if ((st = fh_case_resolve(&spec, &rc)) != FATTN_OK) {
        fh_spec_free(&spec);
        return st;
    }
    assert(rc.t.d_out.present == c->training);
    st = take_inputs(c, &rc, buf);
    if (st == FATTN_OK)
        st = alloc_outputs(c, &rc, buf);
    fh_case_free(&rc);
    fh_spec_free(&spec);
    if (st != FATTN_OK) {
        tcase_teardown(buf);
        return st;
    }
    poison_outputs(buf);
    return FATTN_OK;
}

void tcase_teardown(tcase_buffers *buf)
{
    fattn_tensor *own[] = {
        &buf->qkv_storage[0], &buf->qkv_storage[1], &buf->qkv_storage[2],
        &buf->bias,           &buf->softmax_offset, &buf->cu_q,
        &buf->cu_kv,          &buf->cu_q_pad,       &buf->cu_kv_pad,
        &buf->rng_state,      &buf->o,              &buf->d_o,
        &buf->stats,          &buf->max,            &buf->dq_storage,
        &buf->dk_storage,     &buf->dv_storage,     &buf->d_bias,
        &buf->d_softmax_offset};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        fattn_tensor_free(own[i]);
    memset(buf, 0, sizeof *buf);
}

/* ------------------------------------------------------------------------ */
/* Parameters and the run                                                   */
/* ------------------------------------------------------------------------ */

/* What the forward and backward calls of a case share (fattn_attn_common). */
static fattn_attn_common tcase_attn(const tcase *c, const tcase_buffers *buf)
{
    fattn_attn_common a;
    memset(&a, 0, sizeof a);
    a.q = buf->q;
    a.k = buf->k;
    a.v = buf->v;
    a.o = buf->o;
    a.cu_seqlens_q = buf->cu_q;
    a.cu_seqlens_kv = buf->cu_kv;
    a.cu_seqlens_q_padded = buf->cu_q_pad;
    a.cu_seqlens_kv_padded = buf->cu_kv_pad;
    a.max_seqlen_q = c->sq;
    a.max_seqlen_kv = c->skv;
    a.attn_scale = buf->attn_scale;
    a.dropout = c->dropout;
    a.qkv_layout = c->layout;
    a.o_format = fattn_layout_q_format(c->layout);
    a.bias_type = c->bias;
    a.mask_type = c->mask;
    a.softmax_type = c->softmax;
    a.window_size_left = c->window[0];
    a.window_size_right = c->window[1];
    a.bottom_right_diagonal = c->bottom_right;
    a.cuda_graph = false;
    return a;
}

fattn_fwd_params tcase_fwd_params(const tcase *c, tcase_buffers *buf)
{
    fattn_fwd_params p;
    memset(&p, 0, sizeof p);
    p.attn = tcase_attn(c, buf);
    p.bias = c->bias == FATTN_BIAS_POST_SCALE_BIAS ? buf->bias : fattn_tensor_empty();
    p.softmax_offset = c->softmax != FATTN_SOFTMAX_VANILLA ? buf->softmax_offset
                                                            : fattn_tensor_empty();
    p.aux = &buf->aux_fwd;
    p.page_table_k = fattn_tensor_empty();
    p.page_table_v = fattn_tensor_empty();
    p.rng_state = buf->rng_state;
    p.is_training = c->training;
    p.return_max_logit = c->return_max_logit;
    return p;
}

fattn_bwd_params tcase_bwd_params(const tcase *c, tcase_buffers *buf)
{
    fattn_bwd_params p;
    memset(&p, 0, sizeof p);
    p.attn = tcase_attn(c, buf);
    p.d_o = buf->d_o;
    p.aux = &buf->aux_bwd;
    p.dq = buf->dq;
    p.dk = buf->dk;
    p.dv = buf->dv;
    p.d_bias = buf->d_bias;
    p.d_softmax_offset = buf->d_softmax_offset;
    p.do_format = p.attn.o_format;
    p.dqkv_layout = c->layout;
    p.deterministic = true;
    return p;
}

fattn_status tcase_run(const tcase *c, tcase_buffers *buf, fattn_engine *e)
{
    /* A rerun on the same buffers starts from fresh poison and Stats. */
    fattn_tensor_free(&buf->stats);
    fattn_tensor_free(&buf->max);
    poison_outputs(buf);

    /* Forward, call 1: the engine fills the pack's shapes and dtypes. */
    memset(&buf->aux_fwd, 0, sizeof buf->aux_fwd);
    memset(&buf->aux_bwd, 0, sizeof buf->aux_bwd);
    fattn_fwd_params fp = tcase_fwd_params(c, buf);
    fattn_status st = fattn_engine_fwd(e, &fp);
    if (st != FATTN_OK)
        return st;
    fattn_aux_layout lay = fattn_aux_layout_fwd(c->bias, c->softmax, c->return_max_logit);
    int want = lay.n;
    if (buf->aux_fwd.n != want)
        return fattn_error(FATTN_E_INTERNAL, "case %s: aux pack has %d entries, want %d",
                           c->id, buf->aux_fwd.n, want);

    /* Allocate Stats (and Max) as the engine asked, poisoned. */
    fattn_tensor *t0 = &buf->aux_fwd.t[lay.stats];
    st = fattn_tensor_alloc(&buf->stats, t0->dtype, t0->ndim, t0->shape);
    if (st != FATTN_OK)
        return st;
    fattn_tensor_fill_bits(&buf->stats, POISON);
    *t0 = buf->stats;
    if (c->return_max_logit) {
        fattn_tensor *t1 = &buf->aux_fwd.t[lay.max];
        st = fattn_tensor_alloc(&buf->max, t1->dtype, t1->ndim, t1->shape);
        if (st != FATTN_OK)
            return st;
        fattn_tensor_fill_bits(&buf->max, POISON);
        *t1 = buf->max;
    }

    /* Forward, call 2: execute. */
    st = fattn_engine_fwd(e, &fp);
    if (st != FATTN_OK)
        return st;

    /* The backward's pack: Max stripped, as TE's Python wrapper does. */
    buf->aux_bwd.n = 0;
    for (int i = 0; i < buf->aux_fwd.n; i++) {
        if (i == lay.max)
            continue;
        buf->aux_bwd.t[buf->aux_bwd.n++] = buf->aux_fwd.t[i];
    }
    if (!c->training)
        return FATTN_OK;
    fattn_bwd_params bp = tcase_bwd_params(c, buf);
    return fattn_engine_bwd(e, &bp);
}
