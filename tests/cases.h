/* The CPU engine's test matrix: small cases covering every feature, written
 * as case-spec rows, and the code that turns one into engine parameters with
 * the harness's inputs.
 *
 * Shared by test_cpu_engine.c (engine vs float64 oracle) and test_cpu_bits.c
 * (bit identity across thread counts and optimisation levels).
 */
#ifndef FATTN_TEST_CASES_H
#define FATTN_TEST_CASES_H

#include <stdbool.h>
#include <stdint.h>

#include "fattn/engine.h"

#include "spec.h"

typedef struct tcase {
    const char *id;            /* stable, e.g. "fwd.causal.bf16" */
    int b, h, hg, sq, skv, d, dv;
    fattn_dtype dtype;         /* io dtype: FLOAT16, BFLOAT16 or FLOAT32 */
    fattn_qkv_layout layout;
    fattn_mask_type mask;
    fattn_bias_type bias;
    int bias_b, bias_h, bias_sq; /* bias dims: each 1 or b / h / sq (skv always) */
    fattn_softmax_type softmax;
    int64_t window[2];         /* what FusedAttnFunc gets (fh_case_window) */
    bool direct_call;          /* raw_func_args: a direct caller's window, as given */
    bool bottom_right;         /* resolved bottom_right_diagonal */
    float dropout;
    bool training;             /* run backward */
    bool return_max_logit;
    bool pad_between_seqs;     /* THD: gaps between sequences */
    const int *seqlens_q;      /* optional explicit per-batch lengths (b entries) */
    const int *seqlens_kv;
    uint64_t seed;
} tcase;

/* The matrix, built on first use from the spec rows in cases.c (parsed by
 * harness/model/spec.c and resolved by fh_case_resolve); it lives as long as
 * the process. The suites index it as tcase_table[i], i < tcase_count. */
const tcase *tcase_table_get(void);
int tcase_count_get(void);
#define tcase_table (tcase_table_get())
#define tcase_count (tcase_count_get())

/* Every buffer of one case, allocated and filled from the case seed. */
typedef struct tcase_buffers {
    fattn_tensor qkv_storage[3];   /* backing buffers (packed layouts use [0]) */
    fattn_tensor q, k, v;          /* views */
    fattn_tensor bias, softmax_offset;
    fattn_tensor cu_q, cu_kv, cu_q_pad, cu_kv_pad;
    fattn_tensor rng_state;
    fattn_tensor o, d_o, stats, max;
    fattn_tensor dq_storage, dk_storage, dv_storage;
    fattn_tensor dq, dk, dv, d_bias, d_softmax_offset;
    fattn_aux_pack aux_fwd;        /* after the forward */
    fattn_aux_pack aux_bwd;        /* Max stripped */
    int seqlens_q[64], seqlens_kv[64];
    int offs_q[64], offs_kv[64];   /* token offsets of each sequence (THD) */
    int64_t t_q, t_kv;             /* THD token counts */
    float attn_scale;              /* TE's default for the case (fh_case_resolve) */
} tcase_buffers;

/* Allocate and fill inputs (harness/model/inputs.c over the case's spec, resolved
 * by fh_case_resolve); outputs poisoned with 0xFF bytes. Works for any
 * tcase, not only the table's. */
fattn_status tcase_setup(const tcase *c, tcase_buffers *buf);
void tcase_teardown(tcase_buffers *buf);

/* Parameter blocks for this case over `buf`. */
fattn_fwd_params tcase_fwd_params(const tcase *c, tcase_buffers *buf);
fattn_bwd_params tcase_bwd_params(const tcase *c, tcase_buffers *buf);

/* Run forward (two-call protocol, allocating Stats/Max) and, if training,
 * backward on `e`. */
fattn_status tcase_run(const tcase *c, tcase_buffers *buf, fattn_engine *e);

/* Find a case by id; NULL if none. */
const tcase *tcase_find(const char *id);

/* The parsed spec a table row was made from (what `fattn run` would take
 * for the same case, defaults filled); NULL for a tcase not in the table.
 * It lives as long as the table. */
const fh_spec *tcase_spec_of(const tcase *c);

#endif /* FATTN_TEST_CASES_H */
