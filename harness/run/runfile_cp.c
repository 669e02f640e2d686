/* A context-parallel case's ranks in a run file (runfile.h,
 * docs/run-files.md "Context parallelism"): fattn-te records, under
 * /cases/<id>/ranks/<r>/, each rank's inputs, forward and backward and the
 * engine calls TE's context-parallel code made, beside the same case run
 * without context parallelism (the case's own states). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runfile.h"

static fattn_status bad(const char *path, const char *id, const char *where, const char *what)
{
    return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: ranks/%s: %s", path, id, where, what);
}

/* A group holding datasets only. */
static fattn_status datasets_only(const char *path, const char *id, const char *where,
                                  const fh_h5_node *g)
{
    if (g->is_dataset)
        return bad(path, id, where, "a dataset where a group belongs");
    for (size_t i = 0; i < g->n_children; i++)
        if (!g->children[i]->is_dataset) {
            char w[256];
            snprintf(w, sizeof w, "%s/%s", where, g->children[i]->name);
            return bad(path, id, w, "a group where a dataset belongs");
        }
    return FATTN_OK;
}

/* engine_call/forward|backward/<NNN>: each call a group of datasets, the
 * calls numbered 000, 001, ... in call order. */
static fattn_status check_calls(const char *path, const char *id, const char *rank,
                                const fh_h5_node *ec)
{
    char w[256];
    snprintf(w, sizeof w, "%s/engine_call", rank);
    if (ec->is_dataset)
        return bad(path, id, w, "a dataset where a group belongs");
    for (size_t i = 0; i < ec->n_children; i++) {
        const fh_h5_node *k = ec->children[i];
        snprintf(w, sizeof w, "%s/engine_call/%s", rank, k->name);
        if (strcmp(k->name, "forward") != 0 && strcmp(k->name, "backward") != 0)
            return bad(path, id, w, "unknown object (forward and backward calls only)");
        if (k->is_dataset)
            return bad(path, id, w, "a dataset where a group belongs");
        for (size_t j = 0; j < k->n_children; j++) {
            char want[24];
            snprintf(want, sizeof want, "%03zu", j);
            if (strcmp(k->children[j]->name, want) != 0)
                return bad(path, id, w, "calls are not numbered 000, 001, ... in order");
            char wc[300];
            snprintf(wc, sizeof wc, "%s/%s", w, want);
            fattn_status st = datasets_only(path, id, wc, k->children[j]);
            if (st != FATTN_OK)
                return st;
        }
    }
    return FATTN_OK;
}

/* One rank: inputs, forward, backward (a training case's), engine_call and
 * fp8 (an FP8 case's: the rank's recipe state around the amax reduction
 * over the CP group, fattn_te/cp_fp8.py). */
static fattn_status check_rank(const char *path, const fh_spec *s, const fh_h5_node *r)
{
    static const char *const known[] = {"inputs", "forward", "backward", "engine_call", "fp8"};
    for (size_t i = 0; i < r->n_children; i++) {
        const fh_h5_node *ch = r->children[i];
        bool ok = false;
        for (int k = 0; k < 5; k++)
            ok = ok || strcmp(ch->name, known[k]) == 0;
        char w[256];
        snprintf(w, sizeof w, "%s/%s", r->name, ch->name);
        if (!ok)
            return bad(path, s->id, w, "unknown object (inputs, forward, backward, engine_call, "
                                       "fp8)");
        fattn_status st = strcmp(ch->name, "engine_call") == 0
                              ? check_calls(path, s->id, r->name, ch)
                              : datasets_only(path, s->id, w, ch);
        if (st != FATTN_OK)
            return st;
    }
    if (!fh_h5_node_find(r, "inputs") || !fh_h5_node_find(r, "forward") ||
        !fh_h5_node_find(r, "engine_call"))
        return bad(path, s->id, r->name, "inputs, forward and engine_call are required");
    if (s->fp8 != (fh_h5_node_find(r, "fp8") != NULL))
        return bad(path, s->id, r->name, s->fp8 ? "an FP8 case's rank has no fp8 state"
                                                : "fp8 state for a case without fp8");
    if (s->is_training != (fh_h5_node_find(r, "backward") != NULL))
        return bad(path, s->id, r->name, s->is_training ? "a training case's rank has no backward"
                                                         : "an inference case's rank has a backward");
    return FATTN_OK;
}

fattn_status fh_runfile_check_ranks(const char *path, const fh_spec *s,
                                       const fh_h5_node *ranks)
{
    if (!s->cp)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: ranks recorded for a spec "
                           "without cp", path, s->id);
    if (ranks->is_dataset)
        return bad(path, s->id, "", "a dataset where a group belongs");
    if ((int64_t)ranks->n_children != s->cp_size) {
        char w[96];
        snprintf(w, sizeof w, "%zu ranks recorded, cp size %lld", ranks->n_children,
                 (long long)s->cp_size);
        return bad(path, s->id, "", w);
    }
    for (int64_t r = 0; r < s->cp_size; r++) {
        char name[24];
        snprintf(name, sizeof name, "%lld", (long long)r);
        const fh_h5_node *g = fh_h5_node_find(ranks, name);
        if (!g)
            return bad(path, s->id, name, "missing (ranks are named 0 .. size - 1)");
        if (g->is_dataset)
            return bad(path, s->id, name, "a dataset where a group belongs");
        fattn_status st = check_rank(path, s, g);
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}
