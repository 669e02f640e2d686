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

void fh_run_memory_policy(void)
{
#if defined(__GLIBC__)
    /* a fixed threshold also turns off glibc's raising of it */
    (void)mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
}

/* ---- the backward-read set ------------------------------------------------ */

fattn_status fh_save_ctx_validate(const fh_h5_node *save_ctx)
{
    fh_ctx_record rec;
    return fh_ctx_record_read(save_ctx, &rec);
}

fattn_status fh_run_case(const fh_spec *spec, const fh_run_opts *opts,
                            fh_h5_node **out)
{
    *out = NULL;
    bool cp_skip = spec->cp && !opts->cp_reference; /* recorded as a skip, below */
    if (spec->schedule && !cp_skip)
        return fh_run_schedule(spec, opts, out);
    fh_case_run r;
    fattn_status st = fh_case_run_init(&r, spec, opts);
    if (st != FATTN_OK)
        return st;
    /* A fresh generator per case run (nothing carries over between case runs). */
    r.gen.seed = (uint64_t)spec->rng_seed;
    r.gen.offset = (uint64_t)spec->rng_offset;
    if ((st = fh_case_node_new(spec, &r.node)) != FATTN_OK) {
        fh_case_run_free(&r);
        return st;
    }
    if (cp_skip)
        return fh_case_run_finish(
            &r, fattn_error(FATTN_E_UNSUPPORTED, "cp: context parallelism over %lld ranks (%s) "
                            "runs through fattn-te only (tools/te/fattn-te run --cp-matrix); "
                            "fattn's runner is one process", (long long)spec->cp_size,
                            fh_cp_comm_name(spec->cp_comm)), out);
    if ((st = fh_case_run_inputs(&r)) != FATTN_OK ||
        (opts->until >= FH_STATE_FORWARD && (st = fh_case_run_forward(&r)) != FATTN_OK))
        goto out;
    if (opts->until >= FH_STATE_SAVE_CTX) {
        if ((st = fh_case_run_save_ctx(&r)) != FATTN_OK)
            goto out;
    } else if (opts->until == FH_STATE_FORWARD) {
        if ((st = fh_case_run_write_calls(&r, FH_CALL_FORWARD)) != FATTN_OK)
            goto out;
    }
    /* Inference cases, and forwards under no_grad / inference_mode, have no
     * backward group (TE saves the ctx either way). */
    if (opts->until >= FH_STATE_BACKWARD && fh_spec_has_backward(spec) &&
        (st = fh_case_run_backward(&r, &r.in.d_out)) != FATTN_OK)
        goto out;
    if (opts->inputs_after)
        st = fh_case_run_inputs_after(&r);
out:
    return fh_case_run_finish(&r, st, out);
}

/* ---- replay ---------------------------------------------------------------- */

/* A skipped case stays skipped, a refused one refused, copied as recorded. */
static fattn_status replay_skipped(const fh_h5_node *recorded, const fh_spec *spec,
                                   fh_h5_node **out)
{
    fh_h5_node *node = NULL;
    fattn_status st;
    if ((st = fh_case_node_new(spec, &node)) != FATTN_OK ||
        (st = fh_h5_node_copy_attrs(recorded, node)) != FATTN_OK ||
        (st = fh_h5_node_seal_attrs(node)) != FATTN_OK)
        goto out;
    *out = node;
    node = NULL;
out:
    fh_h5_node_free(node);
    return st;
}

/* Copy every recorded state before and at `from`, bit for bit, and enter
 * `from` through the adapter's load; from FORWARD, SAVE_CTX then runs. */
static fattn_status replay_resume(fh_case_run *r, const fh_h5_node *recorded, fh_state from)
{
    static const char *const groups[] = {"inputs", "forward", "save_ctx"};
    assert(from == FH_STATE_SAVE_CTX || from == FH_STATE_FORWARD);
    int upto = from == FH_STATE_SAVE_CTX ? 3 : 2;
    fattn_status st = FATTN_OK;
    for (int i = 0; i < upto; i++) {
        const fh_h5_node *g = fh_h5_node_find(recorded, groups[i]);
        if (!g) {
            st = fattn_error(FATTN_E_STATE,
                             "case %s: cannot resume from state %s: the file lacks state %s",
                             r->spec->id, fh_state_name(from), groups[i]);
            break;
        }
        if ((st = fh_h5_node_copy(g, r->node, NULL)) != FATTN_OK)
            break;
    }
    /* entered even when a copy failed: the error's message names the state */
    r->state = from;
    /* the recorded forward's engine calls: its state is copied, not rerun */
    if (st != FATTN_OK || (st = fh_call_copy(recorded, FH_CALL_FORWARD, r->node)) != FATTN_OK)
        return st;
    fh_case_run_load_inputs(r, fh_h5_node_find(recorded, "inputs"));
    if (from == FH_STATE_SAVE_CTX) {
        const fh_h5_node *sc = fh_h5_node_find(recorded, "save_ctx");
        /* the backward reads the recorded slots as views (load_save_ctx) */
        for (int i = 0; i < FH_SAVED_COUNT; i++)
            r->saved_t[i] = fh_fe_node_tensor(sc, fh_saved_name((fh_saved_slot)i));
        fh_ctx_record rec;
        if ((st = fh_ctx_record_read(sc, &rec)) != FATTN_OK ||
            (st = fh_case_run_fe_start(r)) != FATTN_OK)
            return st;
        return r->ops->load_save_ctx(r->fe, sc, &rec);
    }
    if ((st = fh_case_run_fe_start(r)) != FATTN_OK ||
        (st = r->ops->load_forward(r->fe, recorded)) != FATTN_OK)
        return st;
    return fh_case_run_save_ctx(r);
}

/* The states a replay runs: resumed at `from`, then the backward where the
 * case has one and --until reaches it. */
static fattn_status replay_states(fh_case_run *r, const fh_h5_node *recorded, fh_state from)
{
    fattn_status st = replay_resume(r, recorded, from);
    if (st != FATTN_OK || !fh_spec_has_backward(r->spec) || r->opts->until < FH_STATE_BACKWARD)
        return st;
    if (fattn_tensor_is_empty(&r->in.d_out))
        return fattn_error(FATTN_E_INVALID_FILE, "case %s: inputs/d_out missing", r->spec->id);
    return fh_case_run_backward(r, &r->in.d_out);
}

fattn_status fh_replay_case(const fh_h5_node *recorded, fh_state from,
                               const fh_run_opts *opts, fh_h5_node **out)
{
    *out = NULL;
    const fh_h5_attr *sa = fh_h5_node_attr(recorded, "spec");
    if (!sa || sa->kind != FH_H5_ATTR_STRING)
        return fattn_error(FATTN_E_INVALID_FILE, "case %s: no spec attribute", recorded->name);
    fh_spec spec;
    fattn_status st = fh_spec_parse_one(sa->s, strlen(sa->s), recorded->name, &spec);
    if (st != FATTN_OK)
        return st;
    fh_case_run r;
    if ((st = fh_case_run_init(&r, &spec, opts)) != FATTN_OK)
        goto out;
    if (fh_h5_node_attr(recorded, "skipped") || fh_h5_node_attr(recorded, "refused_status")) {
        st = replay_skipped(recorded, &spec, out);
        goto out;
    }
    if (from != FH_STATE_SAVE_CTX && from != FH_STATE_FORWARD) {
        st = fattn_error(FATTN_E_INVALID_ARG, "replay starts from save_ctx or forward, not %s",
                         fh_state_name(from));
        goto out;
    }
    if ((st = fh_impl_resume_check(opts->impl, from)) != FATTN_OK)
        goto out;
    if (spec.schedule) {
        st = fh_replay_schedule(recorded, &spec, from, opts, out);
        goto out;
    }
    if ((st = fh_case_node_new(&spec, &r.node)) != FATTN_OK)
        goto out;
    st = fh_case_run_finish(&r, replay_states(&r, recorded, from), out);
out:
    fh_case_run_free(&r); /* the early exits' (finish has freed it already) */
    fh_spec_free(&spec);
    return st;
}

/* ---- writing case by case ----------------------------------------------------- */

struct fh_case_sink {
    char *out;
    const fh_h5_node *root; /* root attributes, borrowed */
    fh_h5_writer *w;           /* the output, or the scratch file (audit) */
    char *scratch;             /* the scratch file's path; NULL without audit */
    bool scratch_done;         /* committed: it exists under its own name */
    int scratch_slot;          /* its signal-cleanup registration (fileguard.h) */
    char **ids;                /* audit: the cases put, in order, to read back */
    size_t cap_ids;
    size_t n_put;
};

fattn_status fh_case_sink_open(const char *out, const fh_h5_node *root, bool audit,
                                  fh_case_sink **sink)
{
    assert(root && !root->is_dataset && root->n_children == 0);
    *sink = NULL;
    fh_case_sink *k = calloc(1, sizeof *k);
    if (!k || !(k->out = fh_runtree_strdup(out))) {
        free(k);
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", out);
    }
    k->root = root;
    fattn_status st;
    if (!audit) {
        if ((st = fh_h5_writer_open(out, &k->w)) != FATTN_OK ||
            (st = fh_h5_writer_put(k->w, "/", root)) != FATTN_OK)
            goto out;
    } else {
        /* a short name of its own, so that an output name near NAME_MAX
         * still leaves room for the writer's temporary name of it */
        const char *slash = strrchr(out, '/');
        int dirlen = slash ? (int)(slash - out) + 1 : 0;
        size_t cap = (size_t)dirlen + 48;
        if (!(k->scratch = malloc(cap))) {
            st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", out);
            goto out;
        }
        snprintf(k->scratch, cap, "%.*s.fattn-cases-%ld", dirlen, out, (long)getpid());
        if ((st = fh_h5_writer_open(k->scratch, &k->w)) != FATTN_OK)
            goto out;
    }
    *sink = k;
out:
    if (st != FATTN_OK)
        fh_case_sink_free(k);
    return st;
}

fattn_status fh_case_sink_put(fh_case_sink *k, const fh_h5_node *case_node)
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
    fattn_status st = fh_h5_writer_put(k->w, "/cases", case_node);
    if (st != FATTN_OK)
        return st;
    if (k->scratch && !(k->ids[k->n_put] = fh_runtree_strdup(case_node->name)))
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", k->out);
    k->n_put++;
    return FATTN_OK;
}

/* An empty /cases for a file of no case (the schema has the group always). */
static fattn_status put_empty_cases(fh_h5_writer *w)
{
    fh_h5_node *cases = NULL;
    fattn_status st = fh_h5_node_new_group("cases", &cases);
    if (st != FATTN_OK)
        goto out;
    st = fh_h5_writer_put(w, "/", cases);
out:
    fh_h5_node_free(cases);
    return st;
}

/* One case read back from the scratch file and written to the output. */
static fattn_status copy_case(fh_case_sink *k, fh_h5_reader *r, const char *id)
{
    char *p = fh_runtree_path_join("/cases", id);
    if (!p)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", k->out);
    fh_h5_node *c = NULL;
    fattn_status st = fh_h5_reader_read(r, p, NULL, &c);
    if (st != FATTN_OK)
        goto out;
    st = fh_h5_writer_put(k->w, "/cases", c);
out:
    fh_h5_node_free(c);
    free(p);
    return st;
}

/* Audit: the scratch file committed, then the output: root attributes,
 * /audit, each case read back from the scratch file and written. */
static fattn_status copy_scratch(fh_case_sink *k, const fh_h5_node *audit)
{
    fattn_status st = fh_h5_writer_commit(k->w);
    k->w = NULL;
    if (st != FATTN_OK)
        return st;
    k->scratch_done = true;
    k->scratch_slot = fh_fileguard_scratch_register(k->scratch);
    fh_h5_reader *r = NULL;
    if ((st = fh_h5_writer_open(k->out, &k->w)) != FATTN_OK ||
        (st = fh_h5_writer_put(k->w, "/", k->root)) != FATTN_OK ||
        (st = fh_h5_writer_put(k->w, "/", audit)) != FATTN_OK ||
        (k->n_put && (st = fh_h5_reader_open(k->scratch, &r)) != FATTN_OK))
        goto out;
    for (size_t i = 0; i < k->n_put; i++)
        if ((st = copy_case(k, r, k->ids[i])) != FATTN_OK)
            goto out;
out:
    fh_h5_reader_close(r);
    return st;
}

fattn_status fh_case_sink_commit(fh_case_sink *k, const fh_h5_node *audit)
{
    assert((audit != NULL) == (k->scratch != NULL) && k->w);
    assert(!audit || !strcmp(audit->name, "audit"));
    fattn_status st;
    if ((audit && (st = copy_scratch(k, audit)) != FATTN_OK) ||
        (!k->n_put && (st = put_empty_cases(k->w)) != FATTN_OK))
        return st;
    st = fh_h5_writer_commit(k->w);
    k->w = NULL;
    return st;
}

void fh_case_sink_free(fh_case_sink *k)
{
    if (!k)
        return;
    fh_h5_writer_abort(k->w);
    if (k->scratch_done) {
        fh_fileguard_scratch_unregister(k->scratch_slot);
        unlink(k->scratch);
    }
    for (size_t i = 0; k->ids && i < k->n_put; i++)
        free(k->ids[i]);
    free(k->ids);
    free(k->scratch);
    free(k->out);
    free(k);
}
