/* A case's schedule (schedule.h): the steps as values, their canonical
 * JSON, and TE's cache managers' bookkeeping over the cache steps
 * (inference.py, the same file in TE 2.19.0 and 2.20.2). */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"

void fh_schedule_free(fh_schedule *s)
{
    if (!s)
        return;
    for (int64_t i = 0; s->steps && i < s->n; i++) {
        free(s->steps[i].seq);
        free(s->steps[i].len);
    }
    free(s->steps);
    free(s);
}

static int64_t *dup64(const int64_t *p, int64_t n)
{
    int64_t *q = p ? malloc((size_t)(n ? n : 1) * sizeof *q) : NULL;
    if (q)
        memcpy(q, p, (size_t)n * sizeof *q);
    return q;
}

fattn_status fh_schedule_copy(const fh_schedule *src, fh_schedule **dst)
{
    *dst = NULL;
    if (!src)
        return FATTN_OK;
    fh_schedule *d = calloc(1, sizeof *d);
    if (d)
        d->steps = calloc((size_t)(src->n ? src->n : 1), sizeof *d->steps);
    bool oom = !d || !d->steps;
    for (int64_t i = 0; !oom && i < src->n; i++) {
        const fh_step *a = &src->steps[i];
        fh_step *b = &d->steps[i];
        *b = *a;
        b->seq = b->len = NULL;
        d->n = i + 1;
        if (a->kind == FH_STEP_KV) {
            b->seq = dup64(a->seq, a->n);
            b->len = dup64(a->len, a->n);
            oom = !b->seq || !b->len;
        }
    }
    if (oom) {
        fh_schedule_free(d);
        return fattn_error(FATTN_E_NOMEM, "out of memory copying a schedule");
    }
    *dst = d;
    return FATTN_OK;
}

static bool same_step(const fh_step *a, const fh_step *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case FH_STEP_F:
    case FH_STEP_B: return a->mb == b->mb;
    case FH_STEP_U: return a->update == b->update;
    case FH_STEP_X: return true;
    case FH_STEP_KV:
        return a->n == b->n && !memcmp(a->seq, b->seq, (size_t)a->n * sizeof *a->seq) &&
               !memcmp(a->len, b->len, (size_t)a->n * sizeof *a->len);
    }
    return false;
}

bool fh_schedule_equal(const fh_schedule *a, const fh_schedule *b)
{
    if (!a || !b)
        return a == b;
    if (a->n != b->n)
        return false;
    for (int64_t i = 0; i < a->n; i++)
        if (!same_step(&a->steps[i], &b->steps[i]))
            return false;
    return true;
}

static const char *update_name(int u)
{
    return u == FH_UPDATE_FORWARD ? "forward" : u == FH_UPDATE_BACKWARD ? "backward"
                                                                             : "both";
}

void fh_schedule_write(const fh_schedule *s, void (*put)(void *ctx, const char *text),
                          void *ctx)
{
    char buf[96];
    put(ctx, "[");
    for (int64_t i = 0; i < s->n; i++) {
        const fh_step *st = &s->steps[i];
        put(ctx, i ? ",{" : "{");
        switch (st->kind) {
        case FH_STEP_F:
        case FH_STEP_B:
            snprintf(buf, sizeof buf, "\"%s\":%" PRId64, st->kind == FH_STEP_F ? "F" : "B",
                     st->mb);
            put(ctx, buf);
            break;
        case FH_STEP_U:
            snprintf(buf, sizeof buf, "\"U\":\"%s\"", update_name(st->update));
            put(ctx, buf);
            break;
        case FH_STEP_X: put(ctx, "\"X\":\"extra_state\""); break;
        case FH_STEP_KV:
            put(ctx, "\"step\":[");
            for (int64_t j = 0; j < st->n; j++) {
                snprintf(buf, sizeof buf, "%s[%" PRId64 ",%" PRId64 "]", j ? "," : "",
                         st->seq[j], st->len[j]);
                put(ctx, buf);
            }
            put(ctx, "]");
            break;
        }
        put(ctx, "}");
    }
    put(ctx, "]");
}

void fh_step_name(const fh_step *st, char *buf, size_t n)
{
    switch (st->kind) {
    case FH_STEP_F: snprintf(buf, n, "F%" PRId64, st->mb); return;
    case FH_STEP_B: snprintf(buf, n, "B%" PRId64, st->mb); return;
    case FH_STEP_U:
        snprintf(buf, n, st->update == FH_UPDATE_BOTH ? "U" : "U(%s)",
                 update_name(st->update));
        return;
    case FH_STEP_X: snprintf(buf, n, "X"); return;
    case FH_STEP_KV: break;
    }
    size_t at = (size_t)snprintf(buf, n, "step[");
    for (int64_t j = 0; j < st->n && at < n; j++)
        at += (size_t)snprintf(buf + at, n - at, "%s%" PRId64 ":%" PRId64, j ? "," : "",
                               st->seq[j], st->len[j]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

int64_t fh_schedule_forwards(const fh_schedule *s)
{
    int64_t k = 0;
    for (int64_t i = 0; s && i < s->n; i++)
        k += s->steps[i].kind == FH_STEP_F || s->steps[i].kind == FH_STEP_KV;
    return k;
}

int64_t fh_schedule_forward_of(const fh_schedule *s, int64_t k)
{
    assert(s && k >= 1 && k <= s->n && s->steps[k - 1].kind == FH_STEP_B);
    int64_t f = k - 1;
    while (f >= 1 &&
           !(s->steps[f - 1].kind == FH_STEP_F && s->steps[f - 1].mb == s->steps[k - 1].mb))
        f--;
    return f;
}

bool fh_schedule_is_cache(const fh_schedule *s)
{
    return s && s->n > 0 && s->steps[0].kind == FH_STEP_KV;
}

/* ---- TE's cache managers ---------------------------------------------------- */

/* What pre_step keeps between steps: the sequences in the cache's order
 * with their lengths; for a paged cache the free pages (a queue: pop(0),
 * append) and each sequence's pages in allocation order. */
typedef struct kv_sim {
    const fh_kv_plan *p;
    int64_t n_seq;
    int64_t id[FH_KV_MAX_SEQ_ID + 1], len[FH_KV_MAX_SEQ_ID + 1];
    int32_t *free_pages;   /* num_pages slots, a ring */
    int64_t free_head, free_n, num_pages;
    int32_t *pages;        /* [seq id][pps] */
    int64_t n_pages[FH_KV_MAX_SEQ_ID + 1];
    int32_t *page_table;   /* [max_batch][pps], rows past the sequences kept as they were */
} kv_sim;

static int64_t find_seq(const kv_sim *m, int64_t id)
{
    for (int64_t i = 0; i < m->n_seq; i++)
        if (m->id[i] == id)
            return i;
    return -1;
}

static bool in_step(const fh_step *st, int64_t id)
{
    for (int64_t j = 0; j < st->n; j++)
        if (st->seq[j] == id)
            return true;
    return false;
}

/* PagedKVCacheManager.allocate_page (inference.py:722-728). */
static bool allocate_page(kv_sim *m, int64_t id)
{
    if (m->free_n == 0)
        return false;
    int64_t pps = m->p->pps;
    assert(m->n_pages[id] < pps);
    m->pages[id * pps + m->n_pages[id]++] = m->free_pages[m->free_head];
    m->free_head = (m->free_head + 1) % m->num_pages;
    m->free_n--;
    return true;
}

/* deallocate_sequence (inference.py:738-744): its pages back at the end. */
static void deallocate(kv_sim *m, int64_t id)
{
    for (int64_t j = 0; j < m->n_pages[id]; j++) {
        m->free_pages[(m->free_head + m->free_n) % m->num_pages] = m->pages[id * m->p->pps + j];
        m->free_n++;
    }
    m->n_pages[id] = 0;
}

static void drop_seq(kv_sim *m, int64_t at)
{
    memmove(m->id + at, m->id + at + 1, (size_t)(m->n_seq - at - 1) * sizeof m->id[0]);
    memmove(m->len + at, m->len + at + 1, (size_t)(m->n_seq - at - 1) * sizeof m->len[0]);
    m->n_seq--;
}

/* pre_step of either manager (NonPaged inference.py:469-508, Paged
 * 746-771), ids iterated ascending (schedule.h). Fills kv's batch_indices,
 * need_reindex and page table. k is the step's 1-based number. */
static fattn_status pre_step(kv_sim *m, const fh_step *st, int64_t k, fh_kv_step *kv)
{
    const fh_kv_plan *p = m->p;
    int64_t prev_n = m->n_seq, prev_ids[FH_KV_MAX_SEQ_ID + 1];
    memcpy(prev_ids, m->id, sizeof prev_ids);
    /* batch_indices: unfinished, then finished (cache order), then the rest */
    int64_t bi = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < prev_n; i++)
            if (in_step(st, m->id[i]) == (pass == 0))
                kv->batch_indices[bi++] = (int32_t)i;
    for (int64_t i = prev_n; i < p->max_batch; i++)
        kv->batch_indices[bi++] = (int32_t)i;
    /* finished sequences leave, their pages freed (ascending ids) */
    for (int64_t id = 0; id <= FH_KV_MAX_SEQ_ID; id++) {
        int64_t at = find_seq(m, id);
        if (at >= 0 && !in_step(st, id)) {
            drop_seq(m, at);
            if (p->paged)
                deallocate(m, id);
        }
    }
    /* continuing sequences advance by one, a page when one fills */
    for (int64_t id = 0; id <= FH_KV_MAX_SEQ_ID; id++) {
        int64_t at = find_seq(m, id);
        if (at < 0)
            continue;
        if (p->paged && m->len[at] % (p->max_seq / p->pps) == 0 && m->len[at] < p->max_seq &&
            !allocate_page(m, id))
            return fattn_error(FATTN_E_INVALID_ARG, "step %" PRId64 ": no free page for "
                               "sequence %" PRId64 " (TE: \"KV cache is full!\", "
                               "inference.py:725)", k, id);
        m->len[at]++;
    }
    /* new sequences join at the end (ascending ids) with their pages */
    for (int64_t id = 0; id <= FH_KV_MAX_SEQ_ID; id++) {
        if (!in_step(st, id) || find_seq(m, id) >= 0)
            continue;
        int64_t len = 0;
        for (int64_t j = 0; j < st->n; j++)
            len = st->seq[j] == id ? st->len[j] : len;
        if (m->n_seq == p->max_batch)
            return fattn_error(FATTN_E_INVALID_ARG, "step %" PRId64 ": more sequences than "
                               "the cache's %" PRId64 " (b)", k, p->max_batch);
        m->id[m->n_seq] = id;
        m->len[m->n_seq++] = len;
        int64_t page = p->max_seq / p->pps;
        for (int64_t j = 0; p->paged && j < (len + page - 1) / page; j++)
            if (!allocate_page(m, id))
                return fattn_error(FATTN_E_INVALID_ARG, "step %" PRId64 ": no free page for "
                                   "sequence %" PRId64 " (TE: \"KV cache is full!\", "
                                   "inference.py:725)", k, id);
    }
    kv->need_reindex = m->n_seq != prev_n;
    for (int64_t i = 0; !kv->need_reindex && i < m->n_seq; i++) {
        bool was = false;
        for (int64_t j = 0; j < prev_n; j++)
            was = was || prev_ids[j] == m->id[i];
        kv->need_reindex = !was;
    }
    if (p->paged) { /* get_page_table (inference.py:710-720): rows of the sequences */
        for (int64_t i = 0; i < m->n_seq; i++)
            for (int64_t j = 0; j < p->pps; j++)
                m->page_table[i * p->pps + j] =
                    j < m->n_pages[m->id[i]] ? m->pages[m->id[i] * p->pps + j] : 0;
        memcpy(kv->page_table, m->page_table,
               (size_t)(p->max_batch * p->pps) * sizeof *kv->page_table);
    }
    return FATTN_OK;
}

/* The step against the cache after pre_step: its entries in the cache's
 * order, one new token for a continuing sequence, lengths in range. */
static fattn_status check_entries(const kv_sim *m, const fh_step *st, int64_t k,
                                  int64_t max_len, const bool was[FH_KV_MAX_SEQ_ID + 1])
{
    for (int64_t j = 0; j < st->n; j++) {
        if (st->len[j] > max_len)
            return fattn_error(FATTN_E_INVALID_ARG, "step %" PRId64 ": sequence %" PRId64
                               " has %" PRId64 " new tokens, more than sq = %" PRId64, k,
                               st->seq[j], st->len[j], max_len);
        if (was[st->seq[j]] && st->len[j] != 1)
            return fattn_error(FATTN_E_INVALID_ARG, "step %" PRId64 ": sequence %" PRId64
                               " continues with %" PRId64 " new tokens; TE's cache managers "
                               "advance a continuing sequence by one (inference.py:496, 760), "
                               "so it can only decode", k, st->seq[j], st->len[j]);
        if (m->id[j] != st->seq[j])
            return fattn_error(FATTN_E_INVALID_ARG, "step %" PRId64 ": entry %" PRId64 " is "
                               "sequence %" PRId64 ", but the cache holds sequence %" PRId64
                               " there: list continuing sequences in the cache's order, then "
                               "new ones by ascending id (cu_seqlens_q follows the step, "
                               "cu_seqlens_kv the cache, inference.py:291-300)", k, j + 1,
                               st->seq[j], m->id[j]);
        if (m->len[j] > m->p->max_seq)
            return fattn_error(FATTN_E_INVALID_ARG, "step %" PRId64 ": sequence %" PRId64
                               " would hold %" PRId64 " tokens, more than skv = %" PRId64, k,
                               st->seq[j], m->len[j], m->p->max_seq);
    }
    return FATTN_OK;
}

static fattn_status kv_step_alloc(fh_kv_step *kv, const fh_kv_plan *p, int64_t b)
{
    kv->lens_q = calloc((size_t)b, sizeof *kv->lens_q);
    kv->lens_kv = calloc((size_t)b, sizeof *kv->lens_kv);
    kv->batch_indices = calloc((size_t)p->max_batch, sizeof *kv->batch_indices);
    kv->page_table = calloc((size_t)(p->max_batch * p->pps), sizeof *kv->page_table);
    if (!kv->lens_q || !kv->lens_kv || !kv->batch_indices || !kv->page_table)
        return fattn_error(FATTN_E_NOMEM, "out of memory planning the cache steps");
    return FATTN_OK;
}

static fattn_status plan_step(kv_sim *m, const fh_step *st, int64_t k, int64_t max_len,
                              bool thd_q, fh_kv_step *kv)
{
    const fh_kv_plan *p = m->p;
    bool was[FH_KV_MAX_SEQ_ID + 1] = {false};
    for (int64_t i = 0; i < m->n_seq; i++)
        was[m->id[i]] = true;
    kv->b_q = st->n;
    kv->b = thd_q ? p->max_batch : st->n;
    fattn_status s;
    if ((s = kv_step_alloc(kv, p, kv->b)) != FATTN_OK ||
        (s = pre_step(m, st, k, kv)) != FATTN_OK ||
        (s = check_entries(m, st, k, max_len, was)) != FATTN_OK)
        return s;
    for (int64_t j = 0; j < st->n; j++) {
        kv->lens_q[j] = st->len[j];
        kv->lens_kv[j] = m->len[j];
        kv->sq = st->len[j] > kv->sq ? st->len[j] : kv->sq;
    }
    return FATTN_OK;
}

void fh_kv_plan_free(fh_kv_plan *p)
{
    for (int64_t i = 0; p && p->steps && i < p->n; i++) {
        free(p->steps[i].lens_q);
        free(p->steps[i].lens_kv);
        free(p->steps[i].batch_indices);
        free(p->steps[i].page_table);
    }
    if (p)
        free(p->steps);
    if (p)
        memset(p, 0, sizeof *p);
}

fattn_status fh_kv_plan_make(const fh_schedule *s, int64_t max_batch, int64_t max_seq,
                                int64_t max_len, bool paged, int64_t page_size, bool thd_q,
                                fh_kv_plan *out)
{
    memset(out, 0, sizeof *out);
    assert(s && max_batch >= 1 && max_seq >= 1 && (!paged || max_seq % page_size == 0));
    out->n = s->n;
    out->max_batch = max_batch;
    out->max_seq = max_seq;
    out->paged = paged;
    out->pps = paged ? max_seq / page_size : 1;
    out->steps = calloc((size_t)s->n, sizeof *out->steps);
    kv_sim m = {.p = out, .num_pages = paged ? max_batch * out->pps : 1};
    m.free_pages = calloc((size_t)m.num_pages, sizeof *m.free_pages);
    m.pages = calloc((size_t)((FH_KV_MAX_SEQ_ID + 1) * out->pps), sizeof *m.pages);
    m.page_table = calloc((size_t)(max_batch * out->pps), sizeof *m.page_table);
    fattn_status st = FATTN_OK;
    if (!out->steps || !m.free_pages || !m.pages || !m.page_table) {
        st = fattn_error(FATTN_E_NOMEM, "out of memory planning the cache steps");
        goto out;
    }
    for (int64_t i = 0; i < m.num_pages; i++)
        m.free_pages[i] = (int32_t)i;
    m.free_n = paged ? m.num_pages : 0;
    for (int64_t k = 0; k < s->n; k++)
        if (s->steps[k].kind == FH_STEP_KV &&
            (st = plan_step(&m, &s->steps[k], k + 1, max_len, thd_q, &out->steps[k])) !=
                FATTN_OK)
            goto out;
out:
    free(m.free_pages);
    free(m.pages);
    free(m.page_table);
    if (st != FATTN_OK)
        fh_kv_plan_free(out);
    return st;
}
