/* What running a case holds in memory (see case_mem.h). */
#include "case_mem.h"

#include "schedule.h"

void fh_case_memory(const fh_spec *s, fh_case_mem *m)
{
    double io = (double)fattn_dtype_size(s->dtype);
    double b = (double)s->b, sq = (double)s->sq, skv = (double)s->skv;
    double h = (double)s->h, hg = (double)s->hg, d = (double)s->d_qk, dv = (double)s->d_v;
    /* THD holds at most b * s tokens: the padded shapes bound it */
    double q = b * sq * h * d * io, k = b * skv * hg * d * io, v = b * skv * hg * dv * io;
    double o = b * sq * h * dv * io, stats = b * h * sq * 4.0;
    double bias = s->bias == FATTN_BIAS_POST_SCALE_BIAS || s->bias == FATTN_BIAS_PRE_SCALE_BIAS
                      ? b * h * sq * skv * io
                      : 0.0;
    double tables = 0.0;
    if (s->paged) {
        /* the page containers, made from the flat K and V the inputs start
         * as (inputs.h), and the two int32 tables [max_batch_size or b,
         * skv / page_size] */
        double pages = (double)s->num_pages * (double)s->page_size * hg;
        k += pages * d * io;
        v += pages * dv * io;
        double rows = s->max_batch_size > s->b ? (double)s->max_batch_size : b;
        tables = 2.0 * rows * (skv / (double)s->page_size) * 4.0;
    }
    /* inputs (q, k, v, bias, d_out as out), forward (out, stats),
     * save_ctx (q, k, v, out, stats, bias), backward (the grads) */
    double tree = 3.0 * (q + k + v) + 3.0 * o + 2.0 * stats + 3.0 * bias + 3.0 * tables;
    if (s->fp8) /* 1-byte codes of q, k, v, out, d_out and the grads, dequantised twins */
        tree += 3.0 * (q + k + v + o) * (1.0 / io + 1.0);
    double scratch = 8.0 * skv * (2.0 * (d + dv) + 64.0) * 4.0 * 4.0;
    double peak = 2.0 * tree + 2.0 * stats + scratch + b * h * sq * 4.0;
    /* a schedule (schedule.h) records every forward step's states in the
     * case's tree, and its live forwards keep their ctxs: each forward
     * after the first counts a tree and a ctx more */
    double forwards = s->schedule ? (double)fh_schedule_forwards(s->schedule) : 1.0;
    if (forwards < 1.0)
        forwards = 1.0;
    m->tree = forwards * tree;
    m->peak = peak + (forwards - 1.0) * 2.0 * tree;
}
