/* The CPU engine's test matrix (cases.h) and the code that turns a case into
 * buffers and engine parameters.
 *
 * Every case is small (b*h*sq*skv*max(d,dv) <= ~2e5) so that the float64
 * oracle and an -O0 sanitizer build run it in well under a second. Ids are
 * stable: "<fwd|bwd>.<feature>[.<detail>].<f16|bf16|f32>", "bwd" meaning the
 * case trains (forward + backward), "fwd" inference only. Every feature is in
 * the table in float16 and in bfloat16 (the PAIR macro), a few in float32 io.
 *
 * Only configurations TE accepts are listed: post_scale_bias never with a
 * padding mask (so never THD), alibi only with causal / causal_bottom_right,
 * THD always with a padding mask, bottom-right masks with sq <= skv unless
 * the mask pads, windows already normalised by check_set_window_size
 * (causal masks have right = 0), and bottom_right_diagonal resolved as DPA
 * does (false for causal / padding_causal, true otherwise).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "fattn/dtype.h"
#include "fattn/philox.h"
#include "fattn/te.h"

/* ------------------------------------------------------------------------ */
/* The table                                                                */
/* ------------------------------------------------------------------------ */

/* Philox stream ids of the inputs (numerics.md "Random numbers"). */
enum {
    STREAM_Q = 1,
    STREAM_K = 2,
    STREAM_V = 3,
    STREAM_BIAS = 4,
    STREAM_OFFSET = 5,
    STREAM_DO = 6,
    STREAM_SEQLEN_Q = 7,
    STREAM_SEQLEN_KV = 8,
    STREAM_GAP_Q = 9,
    STREAM_GAP_KV = 10
};

#define SHAPE(B, H, HG, SQ, SKV, D, DV)                                        \
    .b = B, .h = H, .hg = HG, .sq = SQ, .skv = SKV, .d = D, .dv = DV
#define LAYOUT(L) .layout = FATTN_LAYOUT_##L

/* Masks with their TE-normalised default window and DPA's diagonal. */
#define NO_MASK .mask = FATTN_MASK_NO_MASK, .window = {-1, -1}, .bottom_right = true
#define PADDING .mask = FATTN_MASK_PADDING, .window = {-1, -1}, .bottom_right = true
#define CAUSAL .mask = FATTN_MASK_CAUSAL, .window = {-1, 0}, .bottom_right = false
#define PADDING_CAUSAL                                                         \
    .mask = FATTN_MASK_PADDING_CAUSAL, .window = {-1, 0}, .bottom_right = false
#define CAUSAL_BR                                                              \
    .mask = FATTN_MASK_CAUSAL_BOTTOM_RIGHT, .window = {-1, 0}, .bottom_right = true
#define PADDING_CAUSAL_BR                                                      \
    .mask = FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT, .window = {-1, 0},           \
    .bottom_right = true
/* A mask with an explicit (normalised) window and alignment. */
#define WINDOW(M, L, R, BR)                                                    \
    .mask = FATTN_MASK_##M, .window = {L, R}, .bottom_right = BR

#define BIAS(BB, BH, BSQ)                                                      \
    .bias = FATTN_BIAS_POST_SCALE_BIAS, .bias_b = BB, .bias_h = BH, .bias_sq = BSQ
#define ALIBI .bias = FATTN_BIAS_ALIBI
#define OFF_BY_ONE .softmax = FATTN_SOFTMAX_OFF_BY_ONE
#define LEARNABLE .softmax = FATTN_SOFTMAX_LEARNABLE
#define TRAIN .training = true
#define SEQ(Q, KV) .seqlens_q = Q, .seqlens_kv = KV

/* One case in float16 and bfloat16 (and optionally float32 io). */
#define PAIR(ID, ...)                                                          \
    {.id = ID ".f16", .dtype = FATTN_DTYPE_FLOAT16, __VA_ARGS__},              \
    {.id = ID ".bf16", .dtype = FATTN_DTYPE_BFLOAT16, __VA_ARGS__}
#define TRIPLE(ID, ...)                                                        \
    PAIR(ID, __VA_ARGS__),                                                     \
    {.id = ID ".f32", .dtype = FATTN_DTYPE_FLOAT32, __VA_ARGS__}

/* Explicit sequence lengths. */
static const int sl_pc_q[] = {24, 9}, sl_pc_kv[] = {11, 30};
static const int sl_pcbr_q[] = {24, 12}, sl_pcbr_kv[] = {32, 20};
/* sq_b > skv_b under a bottom-right diagonal: rows i < sq_b - skv_b of batch
 * 0 keep no key at all. */
static const int sl_full_q[] = {20, 5}, sl_full_kv[] = {6, 30};
static const int sl_one_q[] = {1, 7, 1}, sl_one_kv[] = {1, 1, 9};
static const int sl_thd1_q[] = {1, 9, 1}, sl_thd1_kv[] = {1, 12, 5};

const tcase tcase_table[] = {
    /* ---- every QKV layout -------------------------------------------- */
    TRIPLE("bwd.nomask", SHAPE(2, 2, 2, 24, 40, 16, 16), LAYOUT(SBHD_SBHD_SBHD),
           NO_MASK, TRAIN, .seed = 101),
    PAIR("bwd.layout.bshd_bshd_bshd", SHAPE(2, 4, 2, 32, 32, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), CAUSAL, TRAIN, .seed = 102),
    PAIR("bwd.layout.bhsd_bhsd_bhsd", SHAPE(2, 2, 1, 20, 36, 16, 8),
         LAYOUT(BHSD_BHSD_BHSD), NO_MASK, TRAIN, .seed = 103),
    TRIPLE("bwd.layout.sb3hd", SHAPE(2, 2, 2, 24, 24, 16, 16), LAYOUT(SB3HD),
           CAUSAL, TRAIN, .seed = 104),
    PAIR("bwd.layout.sbh3d", SHAPE(2, 2, 2, 24, 24, 16, 16), LAYOUT(SBH3D),
         NO_MASK, TRAIN, .seed = 105),
    PAIR("bwd.layout.bs3hd", SHAPE(3, 2, 2, 24, 24, 16, 16), LAYOUT(BS3HD),
         PADDING, TRAIN, .seed = 106),
    PAIR("bwd.layout.bsh3d", SHAPE(2, 2, 2, 24, 24, 16, 16), LAYOUT(BSH3D),
         PADDING_CAUSAL, TRAIN, .seed = 107),
    PAIR("bwd.layout.sbhd_sb2hd", SHAPE(2, 4, 2, 16, 40, 16, 16),
         LAYOUT(SBHD_SB2HD), NO_MASK, TRAIN, .seed = 108),
    PAIR("bwd.layout.sbhd_sbh2d", SHAPE(2, 4, 2, 16, 40, 16, 16),
         LAYOUT(SBHD_SBH2D), CAUSAL_BR, TRAIN, .seed = 109),
    PAIR("bwd.layout.bshd_bs2hd", SHAPE(2, 2, 1, 20, 30, 16, 16),
         LAYOUT(BSHD_BS2HD), PADDING, TRAIN, .seed = 110),
    PAIR("bwd.layout.bshd_bsh2d", SHAPE(2, 2, 2, 20, 30, 16, 16),
         LAYOUT(BSHD_BSH2D), PADDING_CAUSAL_BR, TRAIN, .seed = 111),
    PAIR("bwd.layout.sbhd_bshd_bshd", SHAPE(2, 2, 2, 16, 24, 16, 8),
         LAYOUT(SBHD_BSHD_BSHD), CAUSAL, TRAIN, .seed = 112),
    PAIR("bwd.layout.bshd_sbhd_sbhd", SHAPE(2, 2, 2, 24, 16, 8, 16),
         LAYOUT(BSHD_SBHD_SBHD), PADDING, TRAIN, .seed = 113),
    TRIPLE("bwd.layout.thd_thd_thd", SHAPE(3, 2, 1, 24, 32, 16, 16),
           LAYOUT(THD_THD_THD), PADDING, TRAIN, .pad_between_seqs = true,
           .seed = 114),
    PAIR("bwd.layout.t3hd", SHAPE(3, 2, 2, 24, 24, 16, 16), LAYOUT(T3HD),
         PADDING_CAUSAL, TRAIN, .pad_between_seqs = true, .seed = 115),
    PAIR("bwd.layout.th3d", SHAPE(3, 2, 2, 24, 24, 16, 16), LAYOUT(TH3D),
         PADDING, TRAIN, .seed = 116),
    PAIR("bwd.layout.thd_t2hd", SHAPE(3, 4, 2, 16, 32, 16, 16),
         LAYOUT(THD_T2HD), PADDING_CAUSAL_BR, TRAIN, .pad_between_seqs = true,
         .seed = 117),
    PAIR("bwd.layout.thd_th2d", SHAPE(2, 2, 1, 20, 28, 16, 16),
         LAYOUT(THD_TH2D), PADDING, TRAIN, .pad_between_seqs = true,
         .seed = 118),
    PAIR("bwd.layout.thd_bshd_bshd", SHAPE(2, 2, 2, 16, 24, 16, 16),
         LAYOUT(THD_BSHD_BSHD), PADDING, TRAIN, .pad_between_seqs = true,
         .seed = 119),
    PAIR("bwd.layout.thd_sbhd_sbhd", SHAPE(2, 2, 2, 16, 24, 16, 16),
         LAYOUT(THD_SBHD_SBHD), PADDING_CAUSAL, TRAIN, .seed = 120),

    /* ---- the six masks ------------------------------------------------ */
    PAIR("bwd.causal", SHAPE(2, 2, 2, 32, 32, 16, 16), LAYOUT(BSHD_BSHD_BSHD),
         CAUSAL, TRAIN, .seed = 201),
    PAIR("bwd.causal.sq_gt_skv", SHAPE(2, 2, 2, 40, 16, 16, 16),
         LAYOUT(SBHD_SBHD_SBHD), CAUSAL, TRAIN, .seed = 202),
    PAIR("bwd.padding", SHAPE(3, 2, 2, 24, 40, 16, 16), LAYOUT(BSHD_BSHD_BSHD),
         PADDING, TRAIN, .seed = 203),
    PAIR("bwd.padding_causal", SHAPE(2, 2, 2, 24, 32, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), PADDING_CAUSAL, TRAIN, SEQ(sl_pc_q, sl_pc_kv),
         .seed = 204),
    PAIR("bwd.causal_bottom_right", SHAPE(2, 2, 2, 16, 40, 16, 16),
         LAYOUT(SBHD_SBHD_SBHD), CAUSAL_BR, TRAIN, .seed = 205),
    PAIR("bwd.padding_causal_bottom_right", SHAPE(2, 2, 2, 24, 32, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), PADDING_CAUSAL_BR, TRAIN,
         SEQ(sl_pcbr_q, sl_pcbr_kv), .seed = 206),
    PAIR("bwd.fully_masked_rows", SHAPE(2, 2, 2, 20, 32, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), PADDING_CAUSAL_BR, TRAIN,
         SEQ(sl_full_q, sl_full_kv), .seed = 207),

    /* ---- sliding windows, both alignments ----------------------------- */
    PAIR("bwd.swa.bottom_right", SHAPE(2, 2, 2, 24, 40, 16, 16),
         LAYOUT(SBHD_SBHD_SBHD), WINDOW(NO_MASK, 3, 2, true), TRAIN, .seed = 301),
    PAIR("bwd.swa.top_left", SHAPE(2, 2, 2, 24, 40, 16, 16),
         LAYOUT(SBHD_SBHD_SBHD), WINDOW(NO_MASK, 3, 2, false), TRAIN, .seed = 302),
    PAIR("bwd.swa.causal", SHAPE(2, 2, 2, 32, 32, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), WINDOW(CAUSAL, 2, 0, false), TRAIN, .seed = 303),
    PAIR("bwd.swa.causal_bottom_right", SHAPE(2, 2, 2, 16, 40, 16, 16),
         LAYOUT(SBHD_SBHD_SBHD), WINDOW(CAUSAL_BOTTOM_RIGHT, 2, 0, true), TRAIN,
         .seed = 304),
    PAIR("bwd.swa.diagonal", SHAPE(2, 2, 2, 16, 24, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), WINDOW(NO_MASK, 0, 0, true), TRAIN, .seed = 305),
    PAIR("bwd.swa.padding.top_left", SHAPE(3, 2, 2, 24, 32, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), WINDOW(PADDING, 3, 2, false), TRAIN, .seed = 306),
    PAIR("bwd.swa.left_ge_skv", SHAPE(2, 2, 2, 24, 40, 16, 16),
         LAYOUT(SBHD_SBHD_SBHD), WINDOW(NO_MASK, 50, 1, false), TRAIN, .seed = 307),
    PAIR("bwd.swa.padding_causal.left_ge_skv", SHAPE(2, 2, 2, 24, 32, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), WINDOW(PADDING_CAUSAL, 64, 0, false), TRAIN,
         SEQ(sl_pc_q, sl_pc_kv), .seed = 308),
    /* Top-left (3,1) with sq > skv: rows i >= skv + 3 keep no key. */
    PAIR("bwd.swa.empty_rows", SHAPE(2, 2, 2, 24, 16, 16, 16),
         LAYOUT(SBHD_SBHD_SBHD), WINDOW(NO_MASK, 3, 1, false), TRAIN, .seed = 309),
    PAIR("bwd.swa.thd.padding_causal_bottom_right", SHAPE(3, 2, 2, 24, 32, 16, 16),
         LAYOUT(THD_THD_THD), WINDOW(PADDING_CAUSAL_BOTTOM_RIGHT, 4, 0, true),
         TRAIN, .pad_between_seqs = true, .seed = 310),
    PAIR("bwd.swa.thd.padding", SHAPE(3, 2, 2, 24, 32, 16, 16),
         LAYOUT(THD_THD_THD), WINDOW(PADDING, 4, 4, true), TRAIN, .seed = 311),

    /* ---- post_scale_bias shapes and alibi ----------------------------- */
    TRIPLE("bwd.bias.1hss", SHAPE(2, 2, 2, 24, 40, 16, 16),
           LAYOUT(SBHD_SBHD_SBHD), NO_MASK, BIAS(1, 2, 24), TRAIN, .seed = 401),
    PAIR("bwd.bias.b1ss", SHAPE(2, 2, 2, 32, 32, 16, 16), LAYOUT(BSHD_BSHD_BSHD),
         CAUSAL, BIAS(2, 1, 32), TRAIN, .seed = 402),
    PAIR("bwd.bias.bhss", SHAPE(2, 2, 1, 20, 36, 16, 16), LAYOUT(BHSD_BHSD_BHSD),
         NO_MASK, BIAS(2, 2, 20), TRAIN, .seed = 403),
    PAIR("bwd.bias.11ss", SHAPE(2, 2, 2, 16, 40, 16, 16), LAYOUT(SBHD_SBHD_SBHD),
         CAUSAL_BR, BIAS(1, 1, 16), TRAIN, .seed = 404),
    /* 111s: cuDNN computes no dBias for it, so TE runs it forward only. */
    PAIR("fwd.bias.111s", SHAPE(2, 2, 2, 24, 40, 16, 16), LAYOUT(BSHD_BSHD_BSHD),
         NO_MASK, BIAS(1, 1, 1), .seed = 405),
    PAIR("bwd.alibi.causal", SHAPE(2, 4, 4, 32, 32, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), CAUSAL, ALIBI, TRAIN, .seed = 406),
    /* h = 6: two heads take the odd-k slopes of a non-power-of-two count. */
    PAIR("bwd.alibi.causal_bottom_right", SHAPE(1, 6, 3, 16, 40, 16, 16),
         LAYOUT(SBHD_SBHD_SBHD), CAUSAL_BR, ALIBI, TRAIN, .seed = 407),

    /* ---- dropout ------------------------------------------------------ */
    TRIPLE("bwd.dropout.p01", SHAPE(2, 2, 2, 24, 40, 16, 16),
           LAYOUT(SBHD_SBHD_SBHD), NO_MASK, .dropout = 0.1f, TRAIN, .seed = 501),
    PAIR("bwd.dropout.p05", SHAPE(2, 2, 2, 32, 32, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), CAUSAL, .dropout = 0.5f, TRAIN, .seed = 502),
    PAIR("bwd.dropout.thd", SHAPE(3, 2, 2, 24, 32, 16, 16), LAYOUT(THD_THD_THD),
         PADDING, .dropout = 0.1f, TRAIN, .pad_between_seqs = true, .seed = 503),

    /* ---- sink softmax ------------------------------------------------- */
    PAIR("bwd.softmax.off_by_one", SHAPE(2, 2, 2, 24, 40, 16, 16),
         LAYOUT(SBHD_SBHD_SBHD), NO_MASK, OFF_BY_ONE, TRAIN, .seed = 601),
    TRIPLE("bwd.softmax.learnable", SHAPE(2, 4, 2, 32, 32, 16, 16),
           LAYOUT(BSHD_BSHD_BSHD), CAUSAL, LEARNABLE, TRAIN, .seed = 602),
    PAIR("bwd.softmax.learnable.thd", SHAPE(3, 2, 2, 24, 32, 16, 16),
         LAYOUT(THD_THD_THD), PADDING_CAUSAL, LEARNABLE, TRAIN,
         .pad_between_seqs = true, .seed = 603),
    PAIR("bwd.softmax.off_by_one.swa", SHAPE(2, 2, 2, 32, 32, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), WINDOW(CAUSAL, 3, 0, false), OFF_BY_ONE, TRAIN,
         .seed = 604),
    PAIR("bwd.softmax.learnable.fully_masked_rows", SHAPE(2, 2, 2, 20, 32, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), PADDING_CAUSAL_BR, LEARNABLE, TRAIN,
         SEQ(sl_full_q, sl_full_kv), .seed = 605),

    /* ---- GQA / MQA, d != dv --------------------------------------------- */
    PAIR("bwd.gqa8", SHAPE(1, 16, 2, 16, 24, 16, 16), LAYOUT(BSHD_BSHD_BSHD),
         NO_MASK, TRAIN, .seed = 701),
    PAIR("bwd.mqa", SHAPE(2, 4, 1, 16, 32, 16, 16), LAYOUT(SBHD_SBHD_SBHD),
         CAUSAL_BR, TRAIN, .seed = 702),
    PAIR("bwd.dqk32_dv16", SHAPE(1, 2, 2, 16, 24, 32, 16),
         LAYOUT(BSHD_BSHD_BSHD), NO_MASK, TRAIN, .seed = 703),
    PAIR("bwd.dqk24_dv40", SHAPE(1, 2, 2, 16, 24, 24, 40),
         LAYOUT(SBHD_SBHD_SBHD), CAUSAL, TRAIN, .seed = 704),

    /* ---- return_max_logit, inference ----------------------------------- */
    PAIR("bwd.max_logit", SHAPE(2, 2, 2, 24, 40, 16, 16), LAYOUT(SBHD_SBHD_SBHD),
         NO_MASK, .return_max_logit = true, TRAIN, .seed = 801),
    PAIR("bwd.max_logit.thd", SHAPE(3, 2, 2, 24, 32, 16, 16),
         LAYOUT(THD_THD_THD), PADDING, .return_max_logit = true, TRAIN,
         .pad_between_seqs = true, .seed = 802),
    PAIR("fwd.max_logit.fully_masked_rows", SHAPE(2, 2, 2, 20, 32, 16, 16),
         LAYOUT(BSHD_BSHD_BSHD), PADDING_CAUSAL_BR, .return_max_logit = true,
         SEQ(sl_full_q, sl_full_kv), .seed = 803),
    PAIR("fwd.nomask", SHAPE(2, 2, 2, 24, 40, 16, 16), LAYOUT(SBHD_SBHD_SBHD),
         NO_MASK, .seed = 804),
    PAIR("fwd.thd.padding_causal", SHAPE(3, 2, 2, 24, 32, 16, 16),
         LAYOUT(THD_THD_THD), PADDING_CAUSAL, .pad_between_seqs = true,
         .seed = 805),

    /* ---- edges: sq = 1, odd skv, length-1 sequences ------------------ */
    PAIR("bwd.sq1", SHAPE(2, 4, 2, 1, 67, 16, 16), LAYOUT(BSHD_BSHD_BSHD),
         NO_MASK, TRAIN, .seed = 901),
    PAIR("bwd.sq1.causal_bottom_right", SHAPE(2, 4, 2, 1, 67, 16, 16),
         LAYOUT(SBHD_SBHD_SBHD), CAUSAL_BR, TRAIN, .seed = 902),
    PAIR("bwd.skv67", SHAPE(1, 2, 2, 20, 67, 16, 16), LAYOUT(BSHD_BSHD_BSHD),
         CAUSAL, TRAIN, .seed = 903),
    PAIR("bwd.skv130", SHAPE(1, 2, 2, 8, 130, 16, 16), LAYOUT(SBHD_SBHD_SBHD),
         NO_MASK, TRAIN, .seed = 904),
    PAIR("bwd.seqlen1", SHAPE(3, 2, 2, 8, 12, 16, 16), LAYOUT(BSHD_BSHD_BSHD),
         PADDING, TRAIN, SEQ(sl_one_q, sl_one_kv), .seed = 905),
    PAIR("bwd.thd.seqlen1", SHAPE(3, 2, 2, 12, 16, 16, 16), LAYOUT(THD_THD_THD),
         PADDING_CAUSAL, TRAIN, .pad_between_seqs = true,
         SEQ(sl_thd1_q, sl_thd1_kv), .seed = 906),
};

const int tcase_count = (int)(sizeof tcase_table / sizeof tcase_table[0]);

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

static fattn_status alloc_i32(fattn_tensor *t, int n, const int *vals)
{
    int64_t shape[1] = {n};
    fattn_status st = fattn_tensor_alloc(t, FATTN_DTYPE_INT32, 1, shape);
    if (st != FATTN_OK)
        return st;
    for (int i = 0; i < n; i++)
        ((int32_t *)t->data)[i] = vals[i];
    return FATTN_OK;
}

/* The three (or two, or one) storages of a q/k/v set in the layout group's
 * packing, as TE builds both the inputs and dQKV. */
static fattn_status alloc_qkv(const tcase *c, const tcase_buffers *buf,
                              fattn_tensor storage[3], fattn_tensor *q,
                              fattn_tensor *k, fattn_tensor *v)
{
    fattn_qkv_format qf = fattn_layout_q_format(c->layout);
    fattn_qkv_format kvf = fattn_layout_kv_format(c->layout);
    fattn_qkv_layout_group g = fattn_layout_group(c->layout);
    int64_t qs[4], ks[4], vs[4];
    int qn = fattn_format_shape(qf, c->b, c->sq, buf->t_q, c->h, c->d, qs);
    int kn = fattn_format_shape(kvf, c->b, c->skv, buf->t_kv, c->hg, c->d, ks);
    fattn_format_shape(kvf, c->b, c->skv, buf->t_kv, c->hg, c->dv, vs);
    fattn_tensor views[3];
    fattn_status st;
    switch (g) {
    case FATTN_LAYOUT_GROUP_3HD:
    case FATTN_LAYOUT_GROUP_H3D:
        st = fattn_tensor_alloc_packed(&storage[0], c->dtype, qn, qs, 3,
                          g == FATTN_LAYOUT_GROUP_3HD ? qn - 2 : qn - 1, views);
        if (st != FATTN_OK)
            return st;
        *q = views[0], *k = views[1], *v = views[2];
        return FATTN_OK;
    case FATTN_LAYOUT_GROUP_HD_2HD:
    case FATTN_LAYOUT_GROUP_HD_H2D:
        st = fattn_tensor_alloc_packed(&storage[0], c->dtype, qn, qs, 1, 0, views);
        if (st != FATTN_OK)
            return st;
        *q = views[0];
        st = fattn_tensor_alloc_packed(&storage[1], c->dtype, kn, ks, 2,
                          g == FATTN_LAYOUT_GROUP_HD_2HD ? kn - 2 : kn - 1, views);
        if (st != FATTN_OK)
            return st;
        *k = views[0], *v = views[1];
        return FATTN_OK;
    default:
        st = fattn_tensor_alloc_packed(&storage[0], c->dtype, qn, qs, 1, 0, views);
        if (st == FATTN_OK) {
            *q = views[0];
            st = fattn_tensor_alloc_packed(&storage[1], c->dtype, kn, ks, 1, 0, views);
        }
        if (st == FATTN_OK) {
            *k = views[0];
            st = fattn_tensor_alloc_packed(&storage[2], c->dtype, kn, vs, 1, 0, views);
        }
        if (st == FATTN_OK)
            *v = views[0];
        return st;
    }
}

static bool is_self_packed(const tcase *c)
{
    fattn_qkv_layout_group g = fattn_layout_group(c->layout);
    return g == FATTN_LAYOUT_GROUP_3HD || g == FATTN_LAYOUT_GROUP_H3D;
}

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

fattn_status tcase_setup(const tcase *c, tcase_buffers *buf)
{
    memset(buf, 0, sizeof *buf); /* every tensor the empty slot */
    fattn_status st = check_case(c);
    if (st != FATTN_OK)
        return st;
    fattn_qkv_format qf = fattn_layout_q_format(c->layout);
    fattn_qkv_format kvf = fattn_layout_kv_format(c->layout);
    bool thd = qf == FATTN_FORMAT_THD || kvf == FATTN_FORMAT_THD;
    bool padding = fattn_mask_has_padding(c->mask) || thd;

    /* Sequence lengths: explicit, or drawn from the seed in [1, max]. */
    for (int bi = 0; bi < c->b; bi++) {
        int lq = c->sq, lkv = c->skv;
        if (padding) {
            lq = c->seqlens_q ? c->seqlens_q[bi]
                              : 1 + (int)(fattn_philox_u32(c->seed, STREAM_SEQLEN_Q,
                                                           (uint64_t)bi) %
                                          (uint32_t)c->sq);
            lkv = c->seqlens_kv ? c->seqlens_kv[bi]
                                : 1 + (int)(fattn_philox_u32(c->seed, STREAM_SEQLEN_KV,
                                                             (uint64_t)bi) %
                                            (uint32_t)c->skv);
        }
        if (is_self_packed(c))
            lkv = lq; /* one token dim for q, k and v: self-attention */
        if (lq < 1 || lq > c->sq || lkv < 1 || lkv > c->skv)
            return fattn_error(FATTN_E_INVALID_ARG, "case %s: seqlen out of range",
                               c->id);
        buf->seqlens_q[bi] = lq;
        buf->seqlens_kv[bi] = lkv;
    }

    /* cu_seqlens and THD offsets (0..3 gap tokens after each sequence when
     * pad_between_seqs). */
    int cu_q[65], cu_kv[65], off_q[65], off_kv[65];
    cu_q[0] = cu_kv[0] = off_q[0] = off_kv[0] = 0;
    for (int bi = 0; bi < c->b; bi++) {
        int gq = 0, gkv = 0;
        if (c->pad_between_seqs) {
            gq = (int)(fattn_philox_u32(c->seed, STREAM_GAP_Q, (uint64_t)bi) % 4u);
            gkv = (int)(fattn_philox_u32(c->seed, STREAM_GAP_KV, (uint64_t)bi) % 4u);
        }
        if (is_self_packed(c))
            gkv = gq;
        cu_q[bi + 1] = cu_q[bi] + buf->seqlens_q[bi];
        cu_kv[bi + 1] = cu_kv[bi] + buf->seqlens_kv[bi];
        off_q[bi + 1] = off_q[bi] + buf->seqlens_q[bi] + gq;
        off_kv[bi + 1] = off_kv[bi] + buf->seqlens_kv[bi] + gkv;
    }
    for (int bi = 0; bi <= c->b; bi++) {
        buf->offs_q[bi] = qf == FATTN_FORMAT_THD ? off_q[bi] : cu_q[bi];
        buf->offs_kv[bi] = kvf == FATTN_FORMAT_THD ? off_kv[bi] : cu_kv[bi];
    }
    buf->t_q = qf == FATTN_FORMAT_THD ? off_q[c->b] : 0;
    buf->t_kv = kvf == FATTN_FORMAT_THD ? off_kv[c->b] : 0;

    st = alloc_i32(&buf->cu_q, c->b + 1, cu_q);
    if (st == FATTN_OK)
        st = alloc_i32(&buf->cu_kv, c->b + 1, cu_kv);
    /* As FusedAttention: padded offsets go with a padding mask (always for
     * THD); they equal cu_seqlens for a bshd/sbhd tensor. */
    if (st == FATTN_OK && padding)
        st = alloc_i32(&buf->cu_q_pad, c->b + 1, buf->offs_q);
    if (st == FATTN_OK && padding)
        st = alloc_i32(&buf->cu_kv_pad, c->b + 1, buf->offs_kv);
    if (st != FATTN_OK)
        goto fail;

    /* q, k, v in the layout's packing, then the other inputs. */
    st = alloc_qkv(c, buf, buf->qkv_storage, &buf->q, &buf->k, &buf->v);
    if (st != FATTN_OK)
        goto fail;
    fattn_philox_fill_tensor(&buf->q, c->seed, STREAM_Q, 0.5f);
    fattn_philox_fill_tensor(&buf->k, c->seed, STREAM_K, 0.5f);
    fattn_philox_fill_tensor(&buf->v, c->seed, STREAM_V, 1.0f);

    if (c->bias == FATTN_BIAS_POST_SCALE_BIAS) {
        int64_t bs[4] = {c->bias_b, c->bias_h, c->bias_sq, c->skv};
        st = fattn_tensor_alloc(&buf->bias, c->dtype, 4, bs);
        if (st != FATTN_OK)
            goto fail;
        fattn_philox_fill_tensor(&buf->bias, c->seed, STREAM_BIAS, 1.0f);
        if (c->training) {
            st = fattn_tensor_alloc(&buf->d_bias, c->dtype, 4, bs);
            if (st != FATTN_OK)
                goto fail;
        }
    }
    if (c->softmax != FATTN_SOFTMAX_VANILLA) {
        int64_t os[4] = {1, c->h, 1, 1};
        st = fattn_tensor_alloc(&buf->softmax_offset, FATTN_DTYPE_FLOAT32, 4, os);
        if (st != FATTN_OK)
            goto fail;
        if (c->softmax == FATTN_SOFTMAX_LEARNABLE)
            fattn_philox_fill_tensor(&buf->softmax_offset, c->seed, STREAM_OFFSET, 1.0f);
        else /* TE passes zeros for off-by-one */
            memset(buf->softmax_offset.data, 0, sizeof(float) * (size_t)c->h);
        if (c->training) {
            st = fattn_tensor_alloc(&buf->d_softmax_offset, FATTN_DTYPE_FLOAT32, 4, os);
            if (st != FATTN_OK)
                goto fail;
        }
    }
    {
        int64_t rs[1] = {2};
        st = fattn_tensor_alloc(&buf->rng_state, FATTN_DTYPE_INT64, 1, rs);
        if (st != FATTN_OK)
            goto fail;
        ((int64_t *)buf->rng_state.data)[0] = (int64_t)(c->seed + 7);
        ((int64_t *)buf->rng_state.data)[1] = 32;
    }

    /* O (q's format, head dim dv); dO and dQ/dK/dV for training. */
    int64_t os[4];
    int on = fattn_format_shape(qf, c->b, c->sq, buf->t_q, c->h, c->dv, os);
    st = fattn_tensor_alloc(&buf->o, c->dtype, on, os);
    if (st != FATTN_OK)
        goto fail;
    if (c->training) {
        st = fattn_tensor_alloc(&buf->d_o, c->dtype, on, os);
        if (st != FATTN_OK)
            goto fail;
        fattn_philox_fill_tensor(&buf->d_o, c->seed, STREAM_DO, 0.1f);
        fattn_tensor dst[3] = {fattn_tensor_empty(), fattn_tensor_empty(),
                               fattn_tensor_empty()};
        st = alloc_qkv(c, buf, dst, &buf->dq, &buf->dk, &buf->dv);
        buf->dq_storage = dst[0];
        buf->dk_storage = dst[1];
        buf->dv_storage = dst[2];
        if (st != FATTN_OK)
            goto fail;
    }
    poison_outputs(buf);
    return FATTN_OK;

fail:
    tcase_teardown(buf);
    return st;
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

static float case_scale(const tcase *c)
{
    return (float)(1.0 / sqrt((double)c->d));
}

fattn_fwd_params tcase_fwd_params(const tcase *c, tcase_buffers *buf)
{
    fattn_fwd_params p;
    memset(&p, 0, sizeof p);
    p.q = buf->q;
    p.k = buf->k;
    p.v = buf->v;
    p.bias = c->bias == FATTN_BIAS_POST_SCALE_BIAS ? buf->bias : fattn_tensor_empty();
    p.softmax_offset = c->softmax != FATTN_SOFTMAX_VANILLA ? buf->softmax_offset
                                                            : fattn_tensor_empty();
    p.o = buf->o;
    p.aux = &buf->aux_fwd;
    p.cu_seqlens_q = buf->cu_q;
    p.cu_seqlens_kv = buf->cu_kv;
    p.cu_seqlens_q_padded = buf->cu_q_pad;
    p.cu_seqlens_kv_padded = buf->cu_kv_pad;
    p.page_table_k = fattn_tensor_empty();
    p.page_table_v = fattn_tensor_empty();
    p.rng_state = buf->rng_state;
    p.max_seqlen_q = c->sq;
    p.max_seqlen_kv = c->skv;
    p.is_training = c->training;
    p.return_max_logit = c->return_max_logit;
    p.cuda_graph = false;
    p.attn_scale = case_scale(c);
    p.dropout = c->dropout;
    p.qkv_layout = c->layout;
    p.o_format = fattn_layout_q_format(c->layout);
    p.bias_type = c->bias;
    p.mask_type = c->mask;
    p.softmax_type = c->softmax;
    p.window_size_left = c->window[0];
    p.window_size_right = c->window[1];
    p.bottom_right_diagonal = c->bottom_right;
    return p;
}

fattn_bwd_params tcase_bwd_params(const tcase *c, tcase_buffers *buf)
{
    fattn_bwd_params p;
    memset(&p, 0, sizeof p);
    p.q = buf->q;
    p.k = buf->k;
    p.v = buf->v;
    p.o = buf->o;
    p.d_o = buf->d_o;
    p.aux = &buf->aux_bwd;
    p.dq = buf->dq;
    p.dk = buf->dk;
    p.dv = buf->dv;
    p.d_bias = buf->d_bias;
    p.d_softmax_offset = buf->d_softmax_offset;
    p.cu_seqlens_q = buf->cu_q;
    p.cu_seqlens_kv = buf->cu_kv;
    p.cu_seqlens_q_padded = buf->cu_q_pad;
    p.cu_seqlens_kv_padded = buf->cu_kv_pad;
    p.max_seqlen_q = c->sq;
    p.max_seqlen_kv = c->skv;
    p.attn_scale = case_scale(c);
    p.dropout = c->dropout;
    p.qkv_layout = c->layout;
    p.o_format = fattn_layout_q_format(c->layout);
    p.do_format = p.o_format;
    p.dqkv_layout = c->layout;
    p.bias_type = c->bias;
    p.mask_type = c->mask;
    p.softmax_type = c->softmax;
    p.window_size_left = c->window[0];
    p.window_size_right = c->window[1];
    p.bottom_right_diagonal = c->bottom_right;
    p.deterministic = true;
    p.cuda_graph = false;
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
    int want = 2 + (c->return_max_logit ? 1 : 0) +
               (c->bias == FATTN_BIAS_POST_SCALE_BIAS ? 1 : 0) +
               (c->softmax != FATTN_SOFTMAX_VANILLA ? 1 : 0);
    if (buf->aux_fwd.n != want)
        return fattn_error(FATTN_E_INTERNAL, "case %s: aux pack has %d entries, want %d",
                           c->id, buf->aux_fwd.n, want);

    /* Allocate Stats (and Max) as the engine asked, poisoned. */
    fattn_tensor *t0 = &buf->aux_fwd.t[0];
    st = fattn_tensor_alloc(&buf->stats, t0->dtype, t0->ndim, t0->shape);
    if (st != FATTN_OK)
        return st;
    fattn_tensor_fill_bits(&buf->stats, POISON);
    *t0 = buf->stats;
    if (c->return_max_logit) {
        fattn_tensor *t1 = &buf->aux_fwd.t[1];
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
        if (c->return_max_logit && i == 1)
            continue;
        buf->aux_bwd.t[buf->aux_bwd.n++] = buf->aux_fwd.t[i];
    }
    if (!c->training)
        return FATTN_OK;
    fattn_bwd_params bp = tcase_bwd_params(c, buf);
    return fattn_engine_bwd(e, &bp);
}
