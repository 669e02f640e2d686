/* Paged KV fixtures shared by the CPU, cuDNN-construct and cuDNN-GPU paged
 * suites: a table of paged cases, each a contiguous tcase (its layout the
 * paged one without "paged_kv_", its skv pages_per_seq * page) whose K and
 * V are then scattered into page containers the way TE's cache holds them
 * (fused_attn.cpp reads bshd containers as [num_pages, page_size, hg, d],
 * sbhd ones as [page_size, num_pages, hg, d]):
 *   - the table is a shuffle, never the identity, so a table ignored, read
 *     transposed or swapped with the other shows;
 *   - spare pages no table names, and the rows of a page past a sequence's
 *     length, hold PAGE_POISON, finite (as harness/model/inputs.c's) so that a
 *     kernel that multiplies a row it loads past a length by a zero
 *     probability still adds zero, yet large enough that a row read through
 *     a wrong table shows in O;
 *   - a row may give V its own table (TE's fused_attn_fwd takes two).
 */
#ifndef FATTN_TEST_PAGED_H
#define FATTN_TEST_PAGED_H

#include <stdbool.h>

#include "cases.h"

#define POISON_BITS UINT64_MAX /* 0xFF bytes: NaN in every io dtype (outputs) */
#define PAGE_POISON 1024.0f    /* the containers' rows no length reaches */

typedef struct paged_row {
    const char *id;
    const char *layout; /* a paged_kv_* name */
    int b, h, hg, sq, d, dv;
    int page, pages_per_seq, spare; /* spare: pages no table names */
    fattn_dtype dtype;
    fattn_mask_type mask;
    bool separate_v;    /* V gets its own shuffle */
    int seqlens_q[4], seqlens_kv[4];
} paged_row;

extern const paged_row paged_rows[];
extern const int paged_row_count;

/* One paged call's extra inputs. */
typedef struct paged_inputs {
    fattn_qkv_layout layout;
    fattn_tensor kc, vc;  /* page containers */
    fattn_tensor pt_k, pt_v;
} paged_inputs;

/* The row's contiguous case (c->id and the seqlens point into r). */
void paged_row_case(const paged_row *r, tcase *c);
/* Containers and tables from buf's contiguous K and V; identity: the
 * identity table instead of the shuffle. Returns FATTN_OK or an error. */
fattn_status paged_make(const paged_row *r, const tcase *c, const tcase_buffers *buf,
                        bool identity, paged_inputs *pi);
void paged_free(paged_inputs *pi);
/* The forward parameters of the paged call over buf's Q, O and lengths. */
fattn_fwd_params paged_params(const tcase *c, tcase_buffers *buf, const paged_inputs *pi);
/* TE's two calls over the Stats a contiguous run of buf allocated, O and
 * Stats poisoned first. */
fattn_status paged_run(const tcase *c, tcase_buffers *buf, const paged_inputs *pi,
                       fattn_engine *e);

#endif /* FATTN_TEST_PAGED_H */
