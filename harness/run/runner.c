/* The harness state machine and its observers (see runner.h): each state
 * is produced by a front end's adapter (fe.h) and recorded here, the same
 * way for every front end. */
#include <assert.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "fattn/cudnn.h"

#include "case_run.h"
#include "fe.h"
#include "fileguard.h"
#include "h5read.h"
#include "h5write.h"
#include "inputs.h"
#include "runner.h"
#include "te_rules.h"

/* ---- memory ------------------------------------------------------------------ */

void fattn_run_memory_policy(void)
{
#if defined(__GLIBC__)
    /* a fixed threshold also turns off glibc's raising of it */
    (void)mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
}

/* ---- the backward-read set ------------------------------------------------ */

fattn_status fattn_save_ctx_validate(const fattn_h5_node *save_ctx)
{
    fattn_ctx_record rec;
    return fattn_ctx_record_read(save_ctx, &rec);
}

fattn_status fattn_run_case(const fattn_spec *spec, const fattn_run_opts *opts,
                            fattn_h5_node **out)
{
    *out = NULL;
    bool cp_skip = spec->cp && !opts->cp_reference; /* recorded as a skip, below */
    if (spec->schedule && !cp_skip)
        return fattn_run_schedule(spec, opts, out);
    fattn_case_run r;
    fattn_status st = fattn_case_run_init(&r, spec, opts);
    if (st != FATTN_OK)
        return st;
    /* A fresh generator per case run (nothing carries over between case runs). */
    r.gen.seed = (uint64_t)spec->rng_seed;
    r.gen.offset = (uint64_t)spec->rng_offset;
    if ((st = fattn_case_node_new(spec, &r.node)) != FATTN_OK) {
        fattn_case_run_free(&r);
        return st;
    }
    if (cp_skip)
        return fattn_case_run_finish(
            &r, fattn_error(FATTN_E_UNSUPPORTED, "cp: context parallelism over %lld ranks (%s) "
                            "runs through fattn-te only (tools/te/fattn-te run --cp-matrix); "
                            "fattn's runner is one process", (long long)spec->cp_size,
                            fattn_cp_comm_name(spec->cp_comm)), out);
    st = fattn_case_run_inputs(&r);
    if (st == FATTN_OK && opts->until >= FATTN_STATE_FORWARD)
        st = fattn_case_run_forward(&r);
    if (st == FATTN_OK && opts->until >= FATTN_STATE_SAVE_CTX)
        st = fattn_case_run_save_ctx(&r);
    else if (st == FATTN_OK && opts->until == FATTN_STATE_FORWARD)
        st = fattn_case_run_write_calls(&r, FATTN_CALL_FORWARD);
    /* Inference cases, and forwards under no_grad / inference_mode, have no
     * backward group (TE saves the ctx either way). */
    if (st == FATTN_OK && opts->until >= FATTN_STATE_BACKWARD && fattn_spec_has_backward(spec))
        st = fattn_case_run_backward(&r, &r.in.d_out);
    if (st == FATTN_OK && opts->inputs_after)
        st = fattn_case_run_inputs_after(&r);
    return fattn_case_run_finish(&r, st, out);
}

/* ---- replay ---------------------------------------------------------------- */

/* A skipped case stays skipped, a refused one refused, copied as recorded. */
static fattn_status replay_skipped(const fattn_h5_node *recorded, const fattn_spec *spec,
                                   fattn_h5_node **out)
{
    fattn_h5_node *node = NULL;
    fattn_status st = fattn_case_node_new(spec, &node);
    if (st == FATTN_OK)
        st = fattn_h5_node_copy_attrs(recorded, node);
    if (st == FATTN_OK)
        st = fattn_h5_node_seal_attrs(node);
    if (st == FATTN_OK) {
        *out = node;
        node = NULL;
    }
    fattn_h5_node_free(node);
    return st;
}

/* Copy every recorded state before and at `from`, bit for bit, and enter
 * `from` through the adapter's load; from FORWARD, SAVE_CTX then runs. */
static fattn_status replay_resume(fattn_case_run *r, const fattn_h5_node *recorded, fattn_state from)
{
    static const char *const groups[] = {"inputs", "forward", "save_ctx"};
    assert(from == FATTN_STATE_SAVE_CTX || from == FATTN_STATE_FORWARD);
    int upto = from == FATTN_STATE_SAVE_CTX ? 3 : 2;
    fattn_status st = FATTN_OK;
    for (int i = 0; i < upto && st == FATTN_OK; i++) {
        const fattn_h5_node *g = fattn_h5_node_find(recorded, groups[i]);
        if (!g)
            st = fattn_error(FATTN_E_STATE,
                             "case %s: cannot resume from state %s: the file lacks state %s",
                             r->spec->id, fattn_state_name(from), groups[i]);
        else
            st = fattn_h5_node_copy(g, r->node, NULL);
    }
    r->state = from;
    /* the recorded forward's engine calls: its state is copied, not rerun */
    if (st == FATTN_OK)
        st = fattn_call_copy(recorded, FATTN_CALL_FORWARD, r->node);
    if (st != FATTN_OK)
        return st;
    fattn_case_run_load_inputs(r, fattn_h5_node_find(recorded, "inputs"));
    if (from == FATTN_STATE_SAVE_CTX) {
        const fattn_h5_node *sc = fattn_h5_node_find(recorded, "save_ctx");
        /* the backward reads the recorded slots as views (load_save_ctx) */
        for (int i = 0; i < FATTN_SAVED_COUNT; i++)
            r->saved_t[i] = fattn_fe_node_tensor(sc, fattn_saved_name((fattn_saved_slot)i));
        fattn_ctx_record rec;
        if ((st = fattn_ctx_record_read(sc, &rec)) == FATTN_OK && (st = fattn_case_run_fe_start(r)) == FATTN_OK)
            st = r->ops->load_save_ctx(r->fe, sc, &rec);
        return st;
    }
    if ((st = fattn_case_run_fe_start(r)) == FATTN_OK && (st = r->ops->load_forward(r->fe, recorded)) == FATTN_OK)
        st = fattn_case_run_save_ctx(r);
    return st;
}

fattn_status fattn_replay_case(const fattn_h5_node *recorded, fattn_state from,
                               const fattn_run_opts *opts, fattn_h5_node **out)
{
    *out = NULL;
    const fattn_h5_attr *sa = fattn_h5_node_attr(recorded, "spec");
    if (!sa || sa->kind != FATTN_H5_ATTR_STRING)
        return fattn_error(FATTN_E_INVALID_FILE, "case %s: no spec attribute", recorded->name);
    fattn_spec spec;
    fattn_status st = fattn_spec_parse_one(sa->s, strlen(sa->s), recorded->name, &spec);
    if (st != FATTN_OK)
        return st;
    fattn_case_run r;
    if ((st = fattn_case_run_init(&r, &spec, opts)) != FATTN_OK)
        goto done;
    if (fattn_h5_node_attr(recorded, "skipped") || fattn_h5_node_attr(recorded, "refused_status")) {
        st = replay_skipped(recorded, &spec, out);
        goto done;
    }
    if (from != FATTN_STATE_SAVE_CTX && from != FATTN_STATE_FORWARD) {
        st = fattn_error(FATTN_E_INVALID_ARG, "replay starts from save_ctx or forward, not %s",
                         fattn_state_name(from));
        goto done;
    }
    if ((st = fattn_impl_resume_check(opts->impl, from)) != FATTN_OK)
        goto done;
    if (spec.schedule) {
        st = fattn_replay_schedule(recorded, &spec, from, opts, out);
        goto done;
    }
    if ((st = fattn_case_node_new(&spec, &r.node)) != FATTN_OK)
        goto done;
    st = replay_resume(&r, recorded, from);
    if (st == FATTN_OK && fattn_spec_has_backward(&spec) && opts->until >= FATTN_STATE_BACKWARD) {
        if (fattn_tensor_is_empty(&r.in.d_out))
            st = fattn_error(FATTN_E_INVALID_FILE, "case %s: inputs/d_out missing", spec.id);
        else
            st = fattn_case_run_backward(&r, &r.in.d_out);
    }
    st = fattn_case_run_finish(&r, st, out);
done:
    fattn_case_run_free(&r); /* the early exits' (finish has freed it already) */
    fattn_spec_free(&spec);
    return st;
}

/* ---- writing case by case ----------------------------------------------------- */

struct fattn_case_sink {
    char *out;
    const fattn_h5_node *root; /* root attributes, borrowed */
    fattn_h5_writer *w;        /* the output, or the scratch file (audit) */
    char *scratch;             /* the scratch file's path; NULL without audit */
    bool scratch_done;         /* committed: it exists under its own name */
    int scratch_slot;          /* its signal-cleanup registration (fileguard.h) */
    char **ids;                /* audit: the cases put, in order, to read back */
    size_t cap_ids;
    size_t n_put;
};

fattn_status fattn_case_sink_open(const char *out, const fattn_h5_node *root, bool audit,
                                  fattn_case_sink **sink)
{
    assert(root && !root->is_dataset && root->n_children == 0);
    *sink = NULL;
    fattn_case_sink *k = calloc(1, sizeof *k);
    if (!k || !(k->out = fattn_runtree_strdup(out))) {
        free(k);
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", out);
    }
    k->root = root;
    fattn_status st = FATTN_OK;
    if (!audit) {
        if ((st = fattn_h5_writer_open(out, &k->w)) == FATTN_OK)
            st = fattn_h5_writer_put(k->w, "/", root);
    } else {
        /* a short name of its own, so that an output name near NAME_MAX
         * still leaves room for the writer's temporary name of it */
        const char *slash = strrchr(out, '/');
        int dirlen = slash ? (int)(slash - out) + 1 : 0;
        size_t cap = (size_t)dirlen + 48;
        if (!(k->scratch = malloc(cap)))
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", out);
        else {
            snprintf(k->scratch, cap, "%.*s.fattn-cases-%ld", dirlen, out, (long)getpid());
            st = fattn_h5_writer_open(k->scratch, &k->w);
        }
    }
    if (st != FATTN_OK) {
        fattn_case_sink_free(k);
        return st;
    }
    *sink = k;
    return FATTN_OK;
}

fattn_status fattn_case_sink_put(fattn_case_sink *k, const fattn_h5_node *case_node)
{
    assert(k->w && !case_node->is_dataset);
    if (k->scratch && k->n_put == k->cap_ids) {
        size_t cap = k->cap_ids ? 2 * k->cap_ids : 64;
        char **ids = realloc(k->ids, cap * sizeof *ids);
        if (!ids)
            return fattn_error(FATTN_E_NOMEM, "%s: out of memory", k->out);
        k->ids = ids;
        k->cap_ids = cap;
    }
    fattn_status st = fattn_h5_writer_put(k->w, "/cases", case_node);
    if (st == FATTN_OK && k->scratch &&
        !(k->ids[k->n_put] = fattn_runtree_strdup(case_node->name)))
        st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", k->out);
    if (st == FATTN_OK)
        k->n_put++;
    return st;
}

/* An empty /cases for a file of no case (the schema has the group always). */
static fattn_status put_empty_cases(fattn_h5_writer *w)
{
    fattn_h5_node *cases = NULL;
    fattn_status st = fattn_h5_node_new_group("cases", &cases);
    if (st == FATTN_OK)
        st = fattn_h5_writer_put(w, "/", cases);
    fattn_h5_node_free(cases);
    return st;
}

/* Audit: the scratch file committed, then the output: root attributes,
 * /audit, each case read back from the scratch file and written. */
static fattn_status copy_scratch(fattn_case_sink *k, const fattn_h5_node *audit)
{
    fattn_status st = fattn_h5_writer_commit(k->w);
    k->w = NULL;
    if (st != FATTN_OK)
        return st;
    k->scratch_done = true;
    k->scratch_slot = fattn_fileguard_scratch_register(k->scratch);
    fattn_h5_reader *r = NULL;
    if ((st = fattn_h5_writer_open(k->out, &k->w)) == FATTN_OK &&
        (st = fattn_h5_writer_put(k->w, "/", k->root)) == FATTN_OK)
        st = fattn_h5_writer_put(k->w, "/", audit);
    if (st == FATTN_OK && k->n_put)
        st = fattn_h5_reader_open(k->scratch, &r);
    for (size_t i = 0; st == FATTN_OK && i < k->n_put; i++) {
        char *p = fattn_runtree_path_join("/cases", k->ids[i]);
        fattn_h5_node *c = NULL;
        if (!p)
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", k->out);
        else if ((st = fattn_h5_reader_read(r, p, NULL, &c)) == FATTN_OK)
            st = fattn_h5_writer_put(k->w, "/cases", c);
        fattn_h5_node_free(c);
        free(p);
    }
    fattn_h5_reader_close(r);
    return st;
}

fattn_status fattn_case_sink_commit(fattn_case_sink *k, const fattn_h5_node *audit)
{
    assert((audit != NULL) == (k->scratch != NULL) && k->w);
    assert(!audit || !strcmp(audit->name, "audit"));
    fattn_status st = audit ? copy_scratch(k, audit) : FATTN_OK;
    if (st == FATTN_OK && !k->n_put)
        st = put_empty_cases(k->w);
    if (st == FATTN_OK) {
        st = fattn_h5_writer_commit(k->w);
        k->w = NULL;
    }
    return st;
}

void fattn_case_sink_free(fattn_case_sink *k)
{
    if (!k)
        return;
    fattn_h5_writer_abort(k->w);
    if (k->scratch_done) {
        fattn_fileguard_scratch_unregister(k->scratch_slot);
        unlink(k->scratch);
    }
    for (size_t i = 0; k->ids && i < k->n_put; i++)
        free(k->ids[i]);
    free(k->ids);
    free(k->scratch);
    free(k->out);
    free(k);
}
