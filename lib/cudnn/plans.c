/* The cuDNN plan cache (fattn/cudnn.h): plans by graph key, the plan store
 * behind it, and executing a plan with the shared workspace and the
 * benchmark repeats. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn/engine_internal.h"

/* ---- plans ---------------------------------------------------------------- */

/* Record why the store was not used (the reason is in fattn_last_error)
 * and count it (counter may be NULL); the caller goes on without it. */
static void store_note(cudnn_engine *e, int64_t *counter)
{
    if (counter)
        (*counter)++;
    snprintf(e->pc->pstats.last_note, sizeof e->pc->pstats.last_note, "%s", fattn_last_error());
}

/* A restored plan lists knob choices its config holds at -1 (measured on
 * the H200 with cuDNN 9.19: "eng6_k14=-1_k24=26" for a plan built as
 * "eng6_k24=26"); tags are compared without them (cudnn_internal.h). */
void fattn__cudnn_tag_canonical(const char *tag, size_t len, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < cap;) {
        if (tag[i] == '_' && i + 1 < len && tag[i + 1] == 'k') {
            size_t j = i + 2;
            while (j < len && tag[j] >= '0' && tag[j] <= '9')
                j++;
            if (j > i + 2 && len - j >= 3 && tag[j] == '=' && tag[j + 1] == '-' &&
                tag[j + 2] == '1' && (j + 3 == len || tag[j + 3] == '_')) {
                i = j + 3;
                continue;
            }
        }
        out[o++] = tag[i++];
    }
    out[o] = 0;
}

static bool tags_match(const char *a, size_t alen, const char *b, size_t blen)
{
    char ca[160], cb[160];
    fattn__cudnn_tag_canonical(a, alen, ca, sizeof ca);
    fattn__cudnn_tag_canonical(b, blen, cb, sizeof cb);
    return strcmp(ca, cb) == 0;
}

/* The plan stored under key_text, restored, or NULL (no file, or a file
 * that is refused: counted and noted). A restored plan must report the
 * engine tag and workspace the file recorded at store time; otherwise it is
 * dropped, so the store can only ever save a build, never change a plan. */
static cudnn_plan *store_load(cudnn_engine *e, const char *key_text)
{
    ps_loaded l;
    if (fattn__ps_lookup(e->pc->store_dir, key_text, &l) != FATTN_OK) {
        store_note(e, &e->pc->pstats.rejected);
        return NULL;
    }
    if (!l.found) {
        e->pc->pstats.missing++;
        return NULL;
    }
    cudnn_plan *p = NULL;
    fattn_status st = fattn__cudnn_plan_deserialize(e->api, e->pc->handle, l.rec.blob, l.rec.blob_len, &p);
    if (st != FATTN_OK)
        goto out;
    if (!tags_match(p->tag, strlen(p->tag), l.rec.tag, l.rec.tag_len) ||
        p->workspace != l.rec.workspace) {
        fattn_error(FATTN_E_INVALID_FILE,
                    "plan store: restored plan is %s with %lld workspace bytes, the file "
                    "recorded %.*s with %lld",
                    p->tag, (long long)p->workspace, (int)l.rec.tag_len, l.rec.tag,
                    (long long)l.rec.workspace);
        fattn__cudnn_plan_free(p);
        p = NULL;
        st = FATTN_E_INVALID_FILE;
        goto out;
    }
    /* provenance names the plan as it was built */
    if (l.rec.tag_len < sizeof p->tag)
        snprintf(p->tag, sizeof p->tag, "%.*s", (int)l.rec.tag_len, l.rec.tag);
out:
    fattn__ps_loaded_free(&l);
    if (st != FATTN_OK) {
        store_note(e, &e->pc->pstats.rejected);
        return NULL;
    }
    e->pc->pstats.loaded++;
    return p;
}

/* Write a freshly built plan to the store when cuDNN can serialize it. A
 * failure costs only a rebuild in the next process: counted and noted. */
static void store_save(cudnn_engine *e, const char *key_text, const cudnn_plan *p)
{
    unsigned char *blob = NULL;
    size_t len = 0;
    if (fattn__cudnn_plan_serialize(p, &blob, &len) != FATTN_OK) {
        store_note(e, &e->pc->pstats.unserializable);
        return;
    }
    ps_record r = {p->tag, strlen(p->tag), key_text, strlen(key_text), p->workspace, blob, len};
    if (fattn__ps_store(e->pc->store_dir, &r) != FATTN_OK)
        store_note(e, &e->pc->pstats.write_failed);
    else
        e->pc->pstats.stored++;
    free(blob);
}

static uint64_t fnv1a(const unsigned char *b, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void entry_drop_vpack(const cudnn_api *api, plan_entry *pe)
{
    if (pe->vp)
        api->BackendDestroyDescriptor(pe->vp);
    pe->vp = NULL;
    pe->vp_n = 0;
}

static void entry_free(const cudnn_api *api, plan_entry *pe)
{
    entry_drop_vpack(api, pe);
    for (int i = 1; i < pe->ncand; i++)
        fattn__cudnn_plan_free(pe->cand[i]);
    free(pe->tune_key_text);
    fattn__cudnn_plan_free(pe->plan);
    free(pe->key);
    free(pe->desc);
    free(pe->g);
    free(pe);
}

/* The entry now stands for desc and its graph g (bindings by-value
 * scalars point into pe->g, so the old variant pack goes). */
static void entry_remember(const cudnn_api *api, plan_entry *pe, const void *desc, size_t len,
                           uint64_t hash, const cg_graph *g)
{
    assert(len <= sizeof(cg_bwd_desc));
    memcpy(pe->desc, desc, len);
    pe->desc_len = len;
    pe->desc_hash = hash;
    memcpy(pe->g, g, sizeof *g);
    entry_drop_vpack(api, pe);
}

static void note_hit(cudnn_engine *e)
{
    e->timing.plan_cache_hit = true;
    e->timing.plan_from_store = false;
    e->timing.plan_build_s = 0.0;
    e->last_plan_source = "memory";
}

/* p as candidate n unless a candidate of its engine tag is there already
 * (then p is freed): one per config. */
static void cand_add(cudnn_plan **cand, int *n, cudnn_plan *p)
{
    for (int k = 0; k < *n; k++)
        if (tags_match(cand[k]->tag, strlen(cand[k]->tag), p->tag, strlen(p->tag))) {
            fattn__cudnn_plan_free(p);
            return;
        }
    cand[(*n)++] = p;
}

/* CUDNN_KNOB_TYPE_KERNEL_CFG: the knob that picks the kernel variant. */
#define SWEEP_KNOB 24
/* At most this many values of it tried per graph. */
#define SWEEP_TRIES 64

/* Parse "eng<id>_k<type>=<value>..." (engine_tag's form): the engine and up
 * to cap knobs; false for another form. */
static bool parse_tag(const char *tag, int64_t *engine, int32_t *types, int64_t *values, int cap,
                      int *n)
{
    long long id, v;
    int type, used = 0;
    *n = 0;
    if (sscanf(tag, "eng%lld%n", &id, &used) != 1)
        return false;
    *engine = id;
    for (const char *p = tag + used; *p; p += used) {
        if (*n == cap || sscanf(p, "_k%d=%lld%n", &type, &v, &used) != 2)
            return false;
        types[*n] = type;
        values[(*n)++] = v;
    }
    return true;
}

/* FATTN_CUDNN_AUTOTUNE=knobs: cand[0]'s engine with each other value of its
 * KERNEL_CFG knob that cuDNN declares (the other knobs as cand[0] has them)
 * and that finalizes, added while there is room; heuristics offer only a
 * few of them (the deterministic backward at d = 64: two configs, one
 * engine). Failures are skipped: a variant cuDNN refuses is no candidate. */
static void sweep_knobs(cudnn_engine *e, const cg_graph *g, bool det_only, cudnn_plan **cand,
                        int *n)
{
    int64_t engine, values[CUDNN_KNOB_TYPE_COUNTS], range[3] = {0, 0, 0};
    int32_t types[CUDNN_KNOB_TYPE_COUNTS];
    int nk = 0, at = -1;
    char *note = e->tune.sweep, last[160] = "";
    size_t cap = sizeof e->tune.sweep;
    if (!parse_tag(cand[0]->tag, &engine, types, values, CUDNN_KNOB_TYPE_COUNTS, &nk)) {
        snprintf(note, cap, "%s: not an engine tag", cand[0]->tag);
        return;
    }
    for (int i = 0; i < nk; i++)
        at = types[i] == SWEEP_KNOB ? i : at;
    if (at < 0) {
        snprintf(note, cap, "%s: no k%d knob", cand[0]->tag, SWEEP_KNOB);
        return;
    }
    cudnn_plan *p = NULL; /* cand[0] again, for the range cuDNN declares */
    bool base_ok = fattn__cudnn_plan_build_knobs(e->api, e->pc->handle, g, engine, nk, types, values,
                                          det_only, SWEEP_KNOB, range, &p) == FATTN_OK;
    if (base_ok)
        fattn__cudnn_plan_free(p);
    else
        snprintf(last, sizeof last, "%s", fattn_last_error());
    int64_t base = values[at];
    int tried = 0, built = 0, before = *n;
    /* every value counts, refused or not: a wide declared range costs at
     * most SWEEP_TRIES builds (and v never steps past the range) */
    for (int64_t k = 0; range[2] > 0 && k <= (range[1] - range[0]) / range[2] &&
                        tried < SWEEP_TRIES && *n < CUDNN_AUTOTUNE_MAX;
         k++) {
        int64_t v = range[0] + k * range[2];
        if (v == base)
            continue;
        values[at] = v;
        tried++;
        fattn_status st = fattn__cudnn_plan_build_knobs(e->api, e->pc->handle, g, engine, nk, types,
                                                 values, det_only, 0, NULL, &p);
        if (st == FATTN_E_UNSUPPORTED) {
            snprintf(last, sizeof last, "%s", fattn_last_error());
            continue;
        }
        if (st != FATTN_OK) /* not a refusal: stop sweeping, keep what there is */
            break;
        built++;
        cand_add(cand, n, p);
    }
    snprintf(note, cap, "%.40s: k%d declared %lld..%lld step %lld; itself by hand: %s; %d "
             "tried, %d built, %d new%s%.100s",
             cand[0]->tag, SWEEP_KNOB, (long long)range[0], (long long)range[1],
             (long long)range[2], base_ok ? "built" : "refused", tried, built, *n - before,
             *last ? "; last refusal: " : "", last);
}

/* Autotune's candidates for g: configs 0..3 of heuristics modes A, B and
 * fallback that finalize, one per engine tag (canonical), in that order, so
 * cand[0] is the plan fattn__cudnn_plan_build would make; only deterministic ones
 * for the deterministic backward. 0 candidates: FATTN_E_UNSUPPORTED. */
static fattn_status build_candidates(cudnn_engine *e, const cg_graph *g, bool det_only,
                                     cudnn_plan **cand, int *n)
{
    static const cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B,
                                                   CUDNN_HEUR_MODE_FALLBACK};
    *n = 0;
    e->tune.sweep[0] = '\0';
    for (int m = 0; m < 3; m++)
        for (int i = 0; i < 4 && *n < CUDNN_AUTOTUNE_MAX; i++) {
            cudnn_plan *p = NULL;
            if (fattn__cudnn_plan_build_config(e->api, e->pc->handle, g, modes[m], i, det_only, &p) ==
                FATTN_OK)
                cand_add(cand, n, p);
        }
    if (*n == 0)
        return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN autotune: no candidate config of "
                           "heuristics modes A, B or fallback finalized a plan");
    if (e->pc->autotune_knobs)
        sweep_knobs(e, g, det_only, cand, n);
    e->pc->pstats.built += *n;
    return FATTN_OK;
}

/* A plan for g that is in no entry: the plan store (when enabled), else a
 * build (then written to the store). The store is keyed on the text dump,
 * made here only, on a miss. */
static fattn_status plan_for_miss(cudnn_engine *e, const cg_graph *g, bool det_only,
                                  cudnn_plan **cand, int *ncand, char **tune_key)
{
    cudnn_plan *p = NULL;
    char *key_text = NULL;
    *ncand = 0;
    *tune_key = NULL;
    if (e->pc->store_dir) {
        char *dump = fattn__cg_dump(g, false);
        /* a tuned plan is another choice than mode A's: its own key */
        char *full = dump && e->pc->autotune ? malloc(strlen(dump) + 16) : NULL;
        if (full) /* each mode's choice under a key of its own */
            snprintf(full, strlen(dump) + 16, "%s\n%s",
                     e->pc->autotune_knobs ? "autotune-knobs" : "autotune", dump);
        key_text = dump && (!e->pc->autotune || full)
                       ? fattn__ps_key_text(&e->pc->store_env, full ? full : dump)
                       : NULL;
        free(full);
        free(dump);
        if (!key_text) {
            fattn_error(FATTN_E_NOMEM, "plan store: no memory for the key; built instead");
            store_note(e, NULL);
        } else {
            p = store_load(e, key_text);
        }
    }
    fattn_status st = FATTN_OK;
    if (!p && e->pc->autotune && !g->pin.on) {
        st = build_candidates(e, g, det_only, cand, ncand);
        if (st != FATTN_OK)
            goto out;
        *tune_key = key_text; /* written once the winner is known */
        key_text = NULL;
        p = cand[0];
    } else if (!p) {
        /* A graph that names its config gets it: nothing to choose, and no
         * filter on cuDNN's non-determinism note either: the ordered dQ's
         * engine is the accumulator's, whatever it is noted, and its order
         * is what the pin buys (measured bitwise repeatable,
         * docs/determinism.md). */
        st = g->pin.on ? fattn__cudnn_plan_build_knobs(e->api, e->pc->handle, g, g->pin.engine, g->pin.n,
                                                g->pin.type, g->pin.value, false, 0, NULL, &p)
                       : fattn__cudnn_plan_build(e->api, e->pc->handle, g, &p);
        if (st != FATTN_OK)
            goto out;
        e->pc->pstats.built++;
        if (key_text)
            store_save(e, key_text, p);
    }
    if (*ncand == 0) {
        cand[0] = p;
        *ncand = 1;
    }
out:
    free(key_text);
    return st;
}

/* A new entry holding plan p, key kb, desc and graph g; p is freed on
 * failure. */
static fattn_status entry_add(cudnn_engine *e, cudnn_plan *p, const cg_key_buf *kb,
                              const void *desc, size_t len, uint64_t hash, const cg_graph *g,
                              plan_entry **out)
{
    plan_entry *pe = calloc(1, sizeof *pe);
    if (pe) {
        pe->key = malloc(kb->len);
        pe->desc = malloc(sizeof(cg_bwd_desc) > len ? sizeof(cg_bwd_desc) : len);
        pe->g = malloc(sizeof *pe->g);
    }
    if (!pe || !pe->key || !pe->desc || !pe->g) {
        if (pe) {
            free(pe->key);
            free(pe->desc);
            free(pe->g);
            free(pe);
        }
        fattn__cudnn_plan_free(p);
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: plan cache");
    }
    memcpy(pe->key, kb->b, kb->len);
    pe->key_len = kb->len;
    pe->key_hash = kb->hash;
    pe->plan = p;
    entry_remember(e->api, pe, desc, len, hash, g);
    pe->next = e->pc->plans;
    e->pc->plans = pe;
    e->pc->nplans++;
    *out = pe;
    return FATTN_OK;
}

fattn_status fattn__cudnn_get_plan(cudnn_engine *e, const void *desc, size_t desc_len,
                            cudnn_graph_builder build, plan_entry **out)
{
    assert(e->pc && e->pc->handle && desc_len <= sizeof(cg_bwd_desc));
    e->tune.tuned = false;
    uint64_t dh = fnv1a(desc, desc_len);
    for (plan_entry *pe = e->pc->plans; pe; pe = pe->next)
        if (pe->desc_hash == dh && pe->desc_len == desc_len && !memcmp(pe->desc, desc, desc_len)) {
            note_hit(e);
            *out = pe;
            return FATTN_OK;
        }
    cg_graph *g = e->scratch;
    fattn_status st = build(g, desc);
    if (st != FATTN_OK)
        return st;
    fattn__cg_key(g, e->kb);
    for (plan_entry *pe = e->pc->plans; pe; pe = pe->next)
        if (fattn__cg_key_equal(e->kb, pe->key, pe->key_len, pe->key_hash)) {
            entry_remember(e->api, pe, desc, desc_len, dh, g);
            note_hit(e);
            *out = pe;
            return FATTN_OK;
        }
    e->timing.plan_cache_hit = false;
    cudnn_plan *cand[CUDNN_AUTOTUNE_MAX];
    int ncand = 0;
    char *tune_key = NULL;
    bool det_only = desc_len == sizeof(cg_bwd_desc) && ((const cg_bwd_desc *)desc)->deterministic;
    if ((st = plan_for_miss(e, g, det_only, cand, &ncand, &tune_key)) != FATTN_OK)
        return st;
    cudnn_plan *p = cand[0];
    e->timing.plan_build_s = 0.0;
    for (int i = 0; i < ncand; i++)
        e->timing.plan_build_s += cand[i]->build_seconds;
    e->timing.plan_from_store = p->from_store;
    e->last_plan_source = p->from_store ? "store" : "built";
    st = entry_add(e, p, e->kb, desc, desc_len, dh, g, out);
    if (st != FATTN_OK)
        goto out;
    memcpy((*out)->cand, cand, (size_t)ncand * sizeof cand[0]);
    (*out)->ncand = ncand;
    if (tune_key && ncand == 1) {
        /* one candidate: nothing to time, it is the winner */
        store_save(e, tune_key, p);
        free(tune_key);
        tune_key = NULL;
    }
    (*out)->tune_key_text = tune_key;
out:
    if (st != FATTN_OK) { /* the entry did not take the other candidates and the key */
        for (int i = 1; i < ncand; i++)
            fattn__cudnn_plan_free(cand[i]);
        free(tune_key);
    }
    return st;
}

/* ---- executing ------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* pe's variant pack for ptrs and the workspace: the last one when they
 * are the pointers it was made with, else a new one (the old destroyed). */
static fattn_status entry_vpack(cudnn_engine *e, plan_entry *pe, void *const *ptrs)
{
    const cudnn_api *api = e->api;
    const cg_graph *g = pe->g;
    int64_t uids[CG_MAX_TENSORS];
    void *data[CG_MAX_TENSORS];
    int n = 0;
    for (int i = 0; i < g->nt; i++) {
        if (g->t[i].is_virtual)
            continue;
        if (!ptrs[i])
            return fattn_error(FATTN_E_INTERNAL, "cuDNN engine: tensor %s (uid %lld) unbound",
                               g->t[i].name, (long long)g->t[i].uid);
        uids[n] = g->t[i].uid;
        data[n++] = ptrs[i];
    }
    void *ws = e->pc->ws;
    if (pe->vp && pe->vp_n == n && pe->vp_ws == ws &&
        !memcmp(pe->vp_data, data, (size_t)n * sizeof data[0]))
        return FATTN_OK;
    entry_drop_vpack(api, pe);
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t s = api->BackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (s != CUDNN_STATUS_SUCCESS)
        return fattn__cudnn_fail(api, s, "variant pack");
    s = api->BackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api->BackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                     CUDNN_TYPE_VOID_PTR, n, data);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api->BackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                     &ws);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api->BackendFinalize(vp);
    if (s != CUDNN_STATUS_SUCCESS) {
        fattn_status st = fattn__cudnn_fail(api, s, "variant pack");
        api->BackendDestroyDescriptor(vp);
        return st;
    }
    pe->vp = vp;
    pe->vp_n = n;
    pe->vp_ws = ws;
    memcpy(pe->vp_data, data, (size_t)n * sizeof data[0]);
    return FATTN_OK;
}

static fattn_status entry_execute(cudnn_engine *e, plan_entry *pe)
{
    cudnnStatus_t s = e->api->BackendExecute(e->pc->handle, pe->plan->plan, pe->vp);
    return s == CUDNN_STATUS_SUCCESS ? FATTN_OK : fattn__cudnn_fail(e->api, s, "cudnnBackendExecute");
}

/* Timed re-executions (timing_iters): the same plan, variant pack and
 * buffers, queued back to back on the handle's (default) stream with an
 * event between consecutive executions, one wait at the end. */
static fattn_status time_plan(cudnn_engine *e, plan_entry *pe)
{
    const cudnn_api *api = e->api;
    int n = e->time_iters;
    double *ms = malloc((size_t)n * sizeof *ms);
    cudaEvent_t *ev = calloc((size_t)n + 1, sizeof *ev);
    fattn_status st = FATTN_OK;
    cudaError_t ce = cudaSuccess;
    int made = 0;
    if (!ms || !ev) {
        st = fattn_error(FATTN_E_NOMEM, "cuDNN engine: timing");
        goto out;
    }
    for (; made <= n && ce == cudaSuccess; made++)
        ce = api->cudaEventCreate(&ev[made]);
    if (ce != cudaSuccess) {
        made--;
        st = fattn__cudnn_cuda_fail(api, ce, "cudaEventCreate");
        goto out;
    }
    if ((ce = api->cudaEventRecord(ev[0], NULL)) != cudaSuccess) {
        st = fattn__cudnn_cuda_fail(api, ce, "cudaEventRecord");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        st = entry_execute(e, pe);
        if (st != FATTN_OK)
            goto out;
        if ((ce = api->cudaEventRecord(ev[i + 1], NULL)) != cudaSuccess) {
            st = fattn__cudnn_cuda_fail(api, ce, "cudaEventRecord");
            goto out;
        }
    }
    if ((ce = api->cudaEventSynchronize(ev[n])) != cudaSuccess) {
        st = fattn__cudnn_cuda_fail(api, ce, "cudaEventSynchronize");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        float t = 0.0f;
        if ((ce = api->cudaEventElapsedTime(&t, ev[i], ev[i + 1])) != cudaSuccess) {
            st = fattn__cudnn_cuda_fail(api, ce, "cudaEventElapsedTime");
            goto out;
        }
        ms[i] = t;
    }
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    e->timing.iters = n;
    e->timing.gpu_ms_min = ms[0];
    e->timing.gpu_ms_median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
out:
    for (int i = 0; i < made; i++)
        api->cudaEventDestroy(ev[i]);
    free(ev);
    free(ms);
    return st;
}

/* One untimed execution of pe, then n executions queued back to back
 * between the n + 1 events. */
static fattn_status queue_timed(cudnn_engine *e, plan_entry *pe, cudaEvent_t *ev, int n)
{
    const cudnn_api *api = e->api;
    cudaError_t ce;
    fattn_status st = entry_execute(e, pe);
    if (st != FATTN_OK)
        return st;
    if ((ce = api->cudaEventRecord(ev[0], NULL)) != cudaSuccess)
        return fattn__cudnn_cuda_fail(api, ce, "cudaEventRecord");
    for (int i = 0; i < n; i++) {
        st = entry_execute(e, pe);
        if (st != FATTN_OK)
            return st;
        if ((ce = api->cudaEventRecord(ev[i + 1], NULL)) != cudaSuccess)
            return fattn__cudnn_cuda_fail(api, ce, "cudaEventRecord");
    }
    return FATTN_OK;
}

/* Median of n executions of plan with pe's variant pack, queued back to
 * back between events (after one untimed). */
static fattn_status time_candidate(cudnn_engine *e, plan_entry *pe, cudnn_plan *plan, double *ms)
{
    enum { N = 5 };
    const cudnn_api *api = e->api;
    cudaEvent_t ev[N + 1];
    int made = 0;
    fattn_status st = FATTN_OK;
    cudaError_t ce = cudaSuccess;
    for (; made <= N; made++)
        if ((ce = api->cudaEventCreate(&ev[made])) != cudaSuccess) {
            st = fattn__cudnn_cuda_fail(api, ce, "cudaEventCreate");
            goto out;
        }
    cudnn_plan *keep = pe->plan;
    pe->plan = plan;
    st = queue_timed(e, pe, ev, N);
    pe->plan = keep;
    if (st != FATTN_OK)
        goto out;
    if ((ce = api->cudaEventSynchronize(ev[N])) != cudaSuccess) {
        st = fattn__cudnn_cuda_fail(api, ce, "cudaEventSynchronize");
        goto out;
    }
    double t[N];
    for (int i = 0; i < N; i++) {
        float f = 0.0f;
        if ((ce = api->cudaEventElapsedTime(&f, ev[i], ev[i + 1])) != cudaSuccess) {
            st = fattn__cudnn_cuda_fail(api, ce, "cudaEventElapsedTime");
            goto out;
        }
        t[i] = f;
    }
    qsort(t, N, sizeof t[0], cmp_double);
    *ms = t[N / 2];
out:
    for (int i = 0; i < made; i++)
        api->cudaEventDestroy(ev[i]);
    return st;
}

/* Autotune: time every candidate on this call's buffers, keep the fastest
 * (ties: the earlier, so mode A's first wins a tie), free the others, store
 * the winner. The workspace is already grown for the largest. */
static fattn_status choose_candidate(cudnn_engine *e, plan_entry *pe)
{
    int best = 0;
    double ms[CUDNN_AUTOTUNE_MAX];
    for (int i = 0; i < pe->ncand; i++) {
        fattn_status st = time_candidate(e, pe, pe->cand[i], &ms[i]);
        if (st != FATTN_OK)
            return st;
        if (ms[i] < ms[best])
            best = i;
    }
    e->tune.tuned = true;
    e->tune.candidates = pe->ncand;
    snprintf(e->tune.first, sizeof e->tune.first, "%s", pe->cand[0]->tag);
    snprintf(e->tune.winner, sizeof e->tune.winner, "%s", pe->cand[best]->tag);
    e->tune.first_ms = ms[0];
    e->tune.winner_ms = ms[best];
    for (int i = 0; i < pe->ncand; i++) {
        snprintf(e->tune.tag[i], sizeof e->tune.tag[i], "%s", pe->cand[i]->tag);
        e->tune.ms[i] = ms[i];
    }
    for (int i = 0; i < pe->ncand; i++)
        if (i != best)
            fattn__cudnn_plan_free(pe->cand[i]);
    pe->plan = pe->cand[0] = pe->cand[best];
    pe->ncand = 1;
    snprintf(e->last_tag, sizeof e->last_tag, "%s", pe->plan->tag);
    if (pe->tune_key_text) {
        store_save(e, pe->tune_key_text, pe->plan);
        free(pe->tune_key_text);
        pe->tune_key_text = NULL;
    }
    return FATTN_OK;
}

/* The variant pack of this call's buffers, then one execution. */
static fattn_status vpack_and_execute(cudnn_engine *e, plan_entry *pe, void *const *ptrs)
{
    fattn_status st = entry_vpack(e, pe, ptrs);
    if (st != FATTN_OK)
        return st;
    return entry_execute(e, pe);
}

/* Grow the shared workspace, execute; then the timed repeats. No wait:
 * the call's copies back wait for the execution (and report its errors). */
fattn_status fattn__cudnn_execute_plan(cudnn_engine *e, plan_entry *pe, void *const *ptrs,
                                double host_pre)
{
    const cudnn_api *api = e->api;
    size_t ws = 0;
    for (int i = 0; i < (pe->ncand > 1 ? pe->ncand : 1); i++) {
        const cudnn_plan *c = pe->ncand > 1 ? pe->cand[i] : pe->plan;
        ws = c->workspace > 0 && (size_t)c->workspace > ws ? (size_t)c->workspace : ws;
    }
    if (ws > e->pc->ws_size) {
        /* the workspace moves: every stored variant pack names the old one,
         * and the executions queued with it must finish before it goes */
        cudaError_t ce = api->cudaDeviceSynchronize();
        if (ce != cudaSuccess)
            return fattn__cudnn_cuda_fail(api, ce, "cudaDeviceSynchronize before the workspace grows");
        if (e->pc->ws)
            api->cudaFree(e->pc->ws);
        e->pc->ws = NULL;
        e->pc->ws_size = 0;
        ce = api->cudaMalloc(&e->pc->ws, ws);
        if (ce != cudaSuccess)
            return fattn__cudnn_cuda_fail(api, ce, "cudaMalloc workspace");
        e->pc->ws_size = ws;
    }
    fattn_status st = FATTN_OK;
    if (pe->ncand > 1 && ((st = entry_vpack(e, pe, ptrs)) != FATTN_OK ||
                          (st = choose_candidate(e, pe)) != FATTN_OK))
        return st;
    double t0 = fattn__cudnn_now_s();
    st = vpack_and_execute(e, pe, ptrs);
    e->timing.host_fattn_us = 1e6 * host_pre;
    e->timing.host_execute_us = 1e6 * (fattn__cudnn_now_s() - t0);
    e->timing.host_us = e->timing.host_fattn_us + e->timing.host_execute_us;
    if (st != FATTN_OK)
        return st;
    return e->time_iters > 0 ? time_plan(e, pe) : FATTN_OK;
}

/* ---- the cache object ------------------------------------------------------ */

fattn_status fattn_cudnn_plan_cache_init(fattn_cudnn_plan_cache **out, int device,
                                         const fattn_cudnn_settings *settings)
{
    if (!out)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_cudnn_plan_cache_init: out is NULL");
    *out = NULL;
    /* the settings' libraries, for a caller that loaded nothing before */
    fattn_status lst = fattn_cudnn_use_libraries(settings);
    if (lst != FATTN_OK)
        return lst;
    if (!fattn_cudnn_available())
        return fattn_error(FATTN_E_UNSUPPORTED, "%s", fattn_last_error());
    const cudnn_api *api = fattn__cudnn_api_load(true);
    cudaError_t ce = api->cudaSetDevice(device);
    if (ce != cudaSuccess)
        return fattn__cudnn_cuda_fail(api, ce, "cudaSetDevice");
    if (api->GetVersion() < 90000)
        return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: cuDNN %zu is older than 9.0",
                           api->GetVersion());
    fattn_cudnn_plan_cache *c = calloc(1, sizeof *c);
    if (!c)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: cannot allocate");
    cudnnStatus_t s = api->Create(&c->handle);
    if (s != CUDNN_STATUS_SUCCESS) {
        free(c);
        return fattn__cudnn_fail(api, s, "cudnnCreate");
    }
    c->api = api;
    c->device = device;
    c->arena[0].api = c->arena[1].api = api;
    fattn_cudnn_settings none;
    memset(&none, 0, sizeof none);
    const fattn_cudnn_settings *set = settings ? settings : &none;
    c->autotune = set->autotune != FATTN_CUDNN_AUTOTUNE_OFF;
    c->autotune_knobs = set->autotune == FATTN_CUDNN_AUTOTUNE_KNOBS;
    c->bwd_native = set->bwd_native;
    const char *det_tag = set->det_tag && *set->det_tag ? set->det_tag : NULL;
    c->det_ordered = set->det_ordered || det_tag;
    fattn_cudnn_settings_describe(set, c->settings_text, sizeof c->settings_text);
    if (det_tag) {
        if (!parse_tag(det_tag, &c->det_tag.engine, c->det_tag.type, c->det_tag.value,
                       CG_PIN_MAX_KNOBS, &c->det_tag.n)) {
            fattn_cudnn_plan_cache_free(c);
            return fattn_error(FATTN_E_INVALID_ARG, "cuDNN det_tag %s: not an engine tag "
                               "(eng<id>_k<type>=<value>..., at most %d knobs)", det_tag,
                               CG_PIN_MAX_KNOBS);
        }
        c->det_tag.on = true;
    }
    c->cudnn_version = (int64_t)api->GetVersion();
    api->cudaDeviceGetAttribute(&c->cc_major, cudaDevAttrComputeCapabilityMajor, device);
    api->cudaDeviceGetAttribute(&c->cc_minor, cudaDevAttrComputeCapabilityMinor, device);
    /* The plan store is an optimisation: a store that cannot be set up is
     * noted in the stats and the cache works without it. */
    const char *dir = fattn__ps_resolve_dir(set->plan_dir ? set->plan_dir : "", NULL);
    fattn_cudnn_info info;
    if (dir && fattn_cudnn_get_info(device, &info) != FATTN_OK) {
        snprintf(c->pstats.last_note, sizeof c->pstats.last_note,
                 "plan store off: device properties unavailable: %s", fattn_last_error());
    } else if (dir) {
        c->store_dir = strdup(dir);
        if (!c->store_dir) {
            fattn_cudnn_plan_cache_free(c);
            return fattn_error(FATTN_E_NOMEM, "cuDNN engine: plan store directory");
        }
        c->store_env.cudnn_version = info.cudnn_version;
        c->store_env.lowering_revision = CUDNN_LOWERING_REVISION;
        snprintf(c->store_env.device_name, sizeof c->store_env.device_name, "%s",
                 info.device_name);
        c->store_env.sm_count = info.sm_count;
        c->store_env.cc_major = info.cc_major;
        c->store_env.cc_minor = info.cc_minor;
        c->pstats.store_enabled = true;
    }
    *out = c;
    return FATTN_OK;
}

void fattn_cudnn_plan_cache_free(fattn_cudnn_plan_cache *c)
{
    if (!c)
        return;
    while (c->plans) {
        plan_entry *n = c->plans->next;
        entry_free(c->api, c->plans);
        c->plans = n;
    }
    fattn__cudnn_dev_free_all(&c->arena[0]);
    fattn__cudnn_dev_free_all(&c->arena[1]);
    if (c->ws)
        c->api->cudaFree(c->ws);
    if (c->handle)
        c->api->Destroy(c->handle);
    free(c->store_dir);
    free(c);
}

int fattn_cudnn_plan_cache_count(const fattn_cudnn_plan_cache *c)
{
    return c ? c->nplans : 0;
}

fattn_status fattn_cudnn_plan_cache_stats(const fattn_cudnn_plan_cache *c,
                                          fattn_cudnn_plan_store_stats *out)
{
    if (!c || !out)
        return fattn_error(FATTN_E_INVALID_ARG, "plan_cache_stats: %s",
                           !out ? "out is NULL" : "no plan cache");
    *out = c->pstats;
    return FATTN_OK;
}

const char *fattn_cudnn_plan_cache_store_dir(const fattn_cudnn_plan_cache *c)
{
    return c && c->store_dir ? c->store_dir : "";
}
