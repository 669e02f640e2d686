/* harness/model/schedule.h — a case's schedule (spec key `schedule`,
 * docs/cases.md "Schedules"): the steps one case runs through one front
 * end, in order, with the state TE carries between them.
 *
 * A step is one of
 *   F m      a forward of micro-batch m (training: its ctx stays alive
 *            until B m; inference: the ctx is dropped after it);
 *   B m      the backward of micro-batch m's live forward;
 *   U dir    the delayed-scaling recipe update of direction dir (forward,
 *            backward or both): FP8GlobalStateManager.
 *            reduce_and_update_fp8_tensors, quantization.py:656-700;
 *   X        a checkpoint round trip of the FP8 state: TE's
 *            get_extra_state, then set_extra_state on the same module
 *            (module/base.py:1354-1457);
 *   step     a KV-cache step: an ordered list of (sequence id, new length)
 *            pairs, TE's InferenceParams.pre_step(OrderedDict) followed by
 *            one DotProductAttention call whose InferenceParams.step appends
 *            the new K and V to the cache (inference.py).
 * Everything here is pure (no tensors): the syntax, its checks, and the
 * bookkeeping of TE's cache managers (fh_kv_plan), which decides each
 * cache step's batch, lengths, batch_indices and page table.
 */
#ifndef FH_HARNESS_SCHEDULE_H
#define FH_HARNESS_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "fattn/status.h"

typedef enum fh_step_kind {
    FH_STEP_F = 0,
    FH_STEP_B,
    FH_STEP_U,
    FH_STEP_X,
    FH_STEP_KV
} fh_step_kind;

/* U's directions (bits). */
#define FH_UPDATE_FORWARD 1
#define FH_UPDATE_BACKWARD 2
#define FH_UPDATE_BOTH 3

/* Sequence ids of cache steps are below this: TE's cache managers iterate
 * Python sets of them (inference.py: unfinished, finished and new
 * sequences), whose order decides the cache order and which pages a
 * sequence gets; CPython iterates a set of distinct ints below its table
 * size (at least 8) in ascending order, and fattn follows that order. */
#define FH_KV_MAX_SEQ_ID 7

typedef struct fh_step {
    fh_step_kind kind;
    int64_t mb;           /* F, B: the micro-batch */
    int update;           /* U: FH_UPDATE_* */
    int64_t n;            /* KV: entries */
    int64_t *seq, *len;   /* KV: n each, owned */
} fh_step;

typedef struct fh_schedule {
    int64_t n;
    fh_step *steps;       /* owned */
} fh_schedule;

#define FH_SCHEDULE_MAX_STEPS 4096
#define FH_SCHEDULE_MAX_MB (INT64_C(1) << 20)

void fh_schedule_free(fh_schedule *s); /* the struct too; NULL is fine */
fattn_status fh_schedule_copy(const fh_schedule *src, fh_schedule **dst);
bool fh_schedule_equal(const fh_schedule *a, const fh_schedule *b);
/* Its canonical JSON (docs/cases.md) appended by `put` (a string builder's
 * append; ctx is the builder). */
void fh_schedule_write(const fh_schedule *s, void (*put)(void *ctx, const char *text),
                          void *ctx);
/* One step as the messages and the summary name it: "F0", "B1", "U",
 * "U(forward)", "X", "step[0:5,1:1]" (truncated to n). */
void fh_step_name(const fh_step *st, char *buf, size_t n);
/* How many steps are forwards (F or cache steps): each advances the
 * generator. */
int64_t fh_schedule_forwards(const fh_schedule *s);
bool fh_schedule_is_cache(const fh_schedule *s);
/* The step (1-based) of the forward whose micro-batch the B at step k
 * ends: its case (seed, lengths) is the B's too. 0 when there is none. */
int64_t fh_schedule_forward_of(const fh_schedule *s, int64_t k);

/* ---- cache steps: TE's cache managers' bookkeeping -------------------------- */

/* One cache step as the FusedAttnFunc call and copy_to_kv_cache see it. */
typedef struct fh_kv_step {
    int64_t b_q;          /* the step's entries: len(step_dict), q's batch for bshd/sbhd */
    int64_t b;            /* the call's batch: b_q, or for a thd q max_batch_size (TE's
                           * cu_seqlens keep max_batch + 1 entries, backends.py:2431-2434) */
    int64_t sq;           /* max_seqlen_q: the step's longest new length */
    int64_t *lens_q;      /* b: the new lengths, 0 past b_q */
    int64_t *lens_kv;     /* b: the cached lengths after the step, 0 past b_q */
    int32_t *batch_indices; /* max_batch: NonPagedKVCacheManager's (non-paged) */
    bool need_reindex;    /* non-paged: the set of sequences changed */
    int32_t *page_table;  /* paged: [max_batch, pages per sequence] after pre_step */
} fh_kv_step;

typedef struct fh_kv_plan {
    int64_t n;            /* the schedule's steps; non-cache steps are zeroed */
    fh_kv_step *steps;
    int64_t max_batch, max_seq, pps; /* pps: pages per sequence (1 non-paged) */
    bool paged;
} fh_kv_plan;

/* The cache a schedule's steps run over: max_batch (the spec's b), max_seq
 * (skv), paged with page_size and num_pages (paged) or not, the q format
 * thd or not (its batch). Runs TE's pre_step bookkeeping over every cache
 * step. FATTN_E_INVALID_ARG with a message naming the step (1-based) for a
 * step TE's managers cannot take: a sequence id twice, a continuing
 * sequence with more than one new token (pre_step advances it by one,
 * inference.py:496, 760), entries not in the cache's order
 * (continuing ones in cache order, then new ones ascending: cu_seqlens_q
 * follows the step's order, cu_seqlens_kv the cache's, inference.py:
 * 291-300), more sequences than max_batch, a new length past `max_len`
 * (the spec's sq) or a cached one past max_seq, no free page ("KV cache is
 * full!", inference.py:725). */
fattn_status fh_kv_plan_make(const fh_schedule *s, int64_t max_batch, int64_t max_seq,
                                int64_t max_len, bool paged, int64_t page_size, bool thd_q,
                                fh_kv_plan *out);
void fh_kv_plan_free(fh_kv_plan *p);

#endif /* FH_HARNESS_SCHEDULE_H */
