/* The spec keys, as one table (docs/cases.md; spec.h says what each means).
 *
 * From FH_SPEC_KEYS come the fh_spec members, the defaults
 * (fh_spec_init), equality, copy and free, the list of known keys, the
 * parser (spec.c) and the canonical writer (spec_text.c). The rows are in
 * parse order: a row may read the rows above it (hg's default is h,
 * seqlens_q's bound is sq, rng_offset's bound the FP8 path's increment).
 * The canonical writer does not follow the rows: it sorts them by key with
 * strcmp, which for these ASCII keys is the order of Python's sort_keys, so
 * the written order is sorted whatever order the rows are in.
 *
 * A row is X(key, kind, ctype, a, b, dflt, post):
 *   key    the JSON key = the fh_spec member
 *   kind   how it is parsed, stored, compared and written:
 *            ID     string, required (char key[FH_SPEC_ID_MAX + 1])
 *            REQ    integer, required, in [a, b]
 *            INT    integer in [a, b], default dflt (read after the rows
 *                   above, so dflt may name them: s->h)
 *            NAME   string naming an enum value: a is its parser
 *                   (const char *, ctype *) -> fattn_status, b its namer
 *                   (ctype) -> const char * (NULL out of range)
 *            BOOL   true / false, default dflt, always written
 *            FLAG   true / false, default false, written only when true
 *                   (the keys added after run files existed: their bytes
 *                   stay for the cases without them)
 *            OINT   integer in [a, b] or absent (0), written only when set
 *                   (an integer key added after run files existed)
 *            PAIR   null | [int, int] each in [a, b]; members key_set, key[2]
 *            TRI    null | true | false (fh_tristate)
 *            REAL   a finite number, default dflt
 *            NREAL  null | a finite number; members key_set, key
 *            LIST   null | b integers, each in [a, b] (owned int64_t *)
 *            FP8    null | the fp8 object (spec.h); members below
 *            REFUSE null | {"rule", "status"}; members below
 *            PAGED  null | the paged object (spec.h); members below
 *            SCHED  null | the schedule (schedule.h); an owned pointer
 *            CP     null | the cp object (spec.h); members below
 *          (a, b, dflt are `_` where the kind does not read them)
 *   post   NONE, or CHECK: spec.c's spec_check_<key>(c, s) runs after the
 *          row is read (ranges that involve other keys or the float32 range)
 *
 * To add a key: add its row where the keys it depends on are already read;
 * the struct, defaults, equality, parser and writer follow. A key of a new
 * shape needs its kind's macros in spec.c (I_<kind> default, OWNED_ memory,
 * E_ equality, P_ parser, R_ required) and spec_text.c (W_<kind>) and its
 * member macro here. Document it in spec.h and docs/cases.md; if cases
 * without it must keep their bytes, make it a FLAG or write it only when set.
 */
#ifndef FH_HARNESS_SPEC_KEYS_H
#define FH_HARNESS_SPEC_KEYS_H

#define FH_SPEC_KEYS(X)                                                                        \
    X(id, ID, char, _, _, _, NONE)                                                             \
    X(b, REQ, int64_t, 1, FH_SPEC_MAX_B, _, NONE)                                              \
    X(h, REQ, int64_t, 1, FH_SPEC_MAX_H, _, NONE)                                              \
    X(sq, REQ, int64_t, 1, FH_SPEC_MAX_S, _, NONE)                                             \
    X(d_qk, REQ, int64_t, 1, FH_SPEC_MAX_D, _, NONE)                                           \
    X(hg, INT, int64_t, 1, FH_SPEC_MAX_H, s->h, CHECK)                                         \
    X(skv, INT, int64_t, 1, FH_SPEC_MAX_S, s->sq, NONE)                                        \
    X(d_v, INT, int64_t, 1, FH_SPEC_MAX_D, s->d_qk, CHECK)                                     \
    X(dtype, NAME, fattn_dtype, spec_dtype_parse, fattn_dtype_name,                      \
      FATTN_DTYPE_BFLOAT16, NONE)                                                              \
    X(layout, NAME, fattn_qkv_layout, fattn_layout_parse, fattn_layout_name,                   \
      FATTN_LAYOUT_BSHD_BSHD_BSHD, NONE)                                                       \
    X(mask, NAME, fattn_mask_type, fattn_mask_type_parse, fattn_mask_type_name,                \
      FATTN_MASK_NO_MASK, NONE)                                                                \
    X(bias, NAME, fattn_bias_type, fattn_bias_type_parse, fattn_bias_type_name,                \
      FATTN_BIAS_NO_BIAS, NONE)                                                                \
    X(bias_shape, NAME, fh_bias_shape, fh_bias_shape_parse, fh_bias_shape_name,                \
      FH_BIAS_SHAPE_1HSS, NONE)                                                                \
    X(softmax, NAME, fattn_softmax_type, fattn_softmax_type_parse, fattn_softmax_type_name,    \
      FATTN_SOFTMAX_VANILLA, NONE)                                                             \
    X(window, PAIR, int64_t, INT32_MIN, INT32_MAX, _, NONE)                                    \
    X(bottom_right_diagonal, TRI, fh_tristate, _, _, _, NONE)                                  \
    X(dropout_p, REAL, double, _, _, 0.0, CHECK)                                               \
    X(attn_scale, NREAL, double, _, _, _, CHECK)                                               \
    X(is_training, BOOL, bool, _, _, true, NONE)                                               \
    X(deterministic, BOOL, bool, _, _, true, NONE)                                             \
    X(return_max_logit, BOOL, bool, _, _, false, NONE)                                         \
    X(fast_zero_fill, BOOL, bool, _, _, true, NONE)                                            \
    X(pad_between_seqs, BOOL, bool, _, _, false, NONE)                                         \
    X(raw_func_args, FLAG, bool, _, _, _, NONE)                                                \
    X(no_grad, FLAG, bool, _, _, _, NONE)                                                      \
    X(inference_mode, FLAG, bool, _, _, _, NONE)                                               \
    X(cpu_offload, FLAG, bool, _, _, _, NONE)                                                  \
    X(bias_no_grad, FLAG, bool, _, _, _, CHECK)                                                \
    X(expect_refusal, REFUSE, _, _, _, _, NONE)                                                \
    X(fp8, FP8, _, _, _, _, NONE)                                                              \
    X(max_batch_size, OINT, int64_t, 1, FH_SPEC_MAX_B, _, NONE)                                \
    X(paged, PAGED, _, _, _, _, CHECK)                                                         \
    X(seqlens_q, LIST, int64_t, 0, s->sq, _, NONE)                                             \
    X(seqlens_kv, LIST, int64_t, 0, s->skv, _, NONE)                                           \
    X(cp, CP, _, _, _, _, NONE)                                                                \
    X(schedule, SCHED, _, _, _, _, CHECK)                                                      \
    X(seed, INT, int64_t, 0, INT64_MAX - fh_spec_steps(s), 1, NONE)                            \
    X(rng_seed, INT, int64_t, 0, INT64_MAX, 1234, NONE)                                        \
    X(rng_offset, INT, int64_t, 0, INT64_MAX - fh_spec_rng_advance(s), 0, NONE)

/* The members a row declares in fh_spec, by kind. */
#define FH_SPEC_M_ID(k, t) char k[FH_SPEC_ID_MAX + 1];
#define FH_SPEC_M_REQ(k, t) t k;
#define FH_SPEC_M_INT(k, t) t k;
#define FH_SPEC_M_NAME(k, t) t k;
#define FH_SPEC_M_BOOL(k, t) t k;
#define FH_SPEC_M_FLAG(k, t) t k;
#define FH_SPEC_M_OINT(k, t) t k; /* 0: absent */
#define FH_SPEC_M_PAIR(k, t)                                                                   \
    bool k##_set; /* false: null */                                                            \
    t k[2];
#define FH_SPEC_M_TRI(k, t) t k;
#define FH_SPEC_M_REAL(k, t) t k;
#define FH_SPEC_M_NREAL(k, t)                                                                  \
    bool k##_set; /* false: null */                                                            \
    t k;
#define FH_SPEC_M_LIST(k, t) t *k; /* NULL (null) or b entries, owned */
/* fp8 on: the key is an object; its members (defaults when fp8 is off) */
#define FH_SPEC_M_FP8(k, t)                                                                    \
    bool fp8;                                                                                  \
    fattn_fp8_recipe fp8_recipe;                                                               \
    bool fp8_input, fp8_output, fp8_dpa_bwd, fp8_o_in_f16, bf16_backward;                     \
    /* the DelayedScaling recipe's update parameters (TE's defaults 1024, */                   \
    /* "max", 0): read by a schedule's U steps */                                              \
    int64_t fp8_amax_history_len;                                                              \
    fattn_fp8_amax_algo fp8_amax_algo;                                                         \
    int64_t fp8_margin;                                                                        \
    /* DelayedScaling's reduce_amax (TE's default true): TE's FusedAttention */                \
    /* refuses false under context parallelism */                                              \
    bool fp8_reduce_amax;
/* the front ends must refuse the case with refusal_status and the support
 * table's rule refusal_rule */
#define FH_SPEC_M_REFUSE(k, t)                                                                 \
    bool expect_refusal;                                                                       \
    fattn_status refusal_status;                                                               \
    char refusal_rule[64];

/* paged on: K and V are a paged cache (a paged_kv_* layout) of num_pages
 * pages of page_size positions; V gets a table of its own when separate_v */
#define FH_SPEC_M_PAGED(k, t)                                                                  \
    bool paged;                                                                                \
    int64_t page_size, num_pages;                                                              \
    bool paged_separate_v;

/* cp on: TE's context parallelism over cp_size ranks; run by fattn-te
 * only, recorded as skipped by fattn's own runner */
#define FH_SPEC_M_CP(k, t)                                                                     \
    bool cp;                                                                                   \
    int64_t cp_size;                                                                           \
    fh_cp_comm cp_comm;                                                                        \
    fh_cp_balance cp_balance;

/* a schedule: the steps the case runs (NULL: the one call it is without) */
#define FH_SPEC_M_SCHED(k, t) struct fh_schedule *schedule;

#define FH_SPEC_MEMBER(key, kind, ctype, a, b, dflt, post) FH_SPEC_M_##kind(key, ctype)

#endif /* FH_HARNESS_SPEC_KEYS_H */
