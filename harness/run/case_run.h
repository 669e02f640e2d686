/* harness/run/case_run.h — one case run of one front end, state by state
 * (runner.h describes the states and what each records). Private to run/:
 * the runner drives one run through BEGIN -> BACKWARD; a schedule
 * (schedule_run.c) drives one per micro-batch or step, all recording into
 * groups of one case and sharing one generator and the module's FP8
 * quantizers. */
#ifndef FH_HARNESS_CASE_RUN_H
#define FH_HARNESS_CASE_RUN_H

#include "engine_call.h"
#include "fe.h"
#include "h5io.h"
#include "inputs.h"
#include "runner.h"

/* The datasets of inputs/, in the order they are recorded. */
#define CASE_INPUTS(X)                                                                         \
    X(q) X(k) X(v) X(attn_bias) X(softmax_offset) X(cu_seqlens_q) X(cu_seqlens_kv)             \
    X(cu_seqlens_q_padded) X(cu_seqlens_kv_padded) X(d_out) X(page_table_k) X(page_table_v)

typedef struct fh_case_run {
    const fh_spec *spec;
    const fh_run_opts *opts;
    const fh_fe_ops *ops; /* the front end's adapter */
    void *fe;                /* its state, once started */
    fh_fe_env env;           /* what it is handed; points into this struct */
    fh_state state;
    fh_case_inputs in;
    bool own_inputs;         /* made here; false: views into a recorded tree */
    fattn_rng_gen gen;       /* the run's generator (env.gen: it, or a schedule's) */
    fh_h5_node *node;        /* the group states are recorded into: /cases/<id>, or a
                              * schedule step's /cases/<id>/steps/<k> */
    /* the engine calls the front end makes (engine_call.h), written into
     * node as engine_call/, and what their tensors are named by: the
     * forward's outputs, the saved slots and the grads as the front end
     * handed them over (views it owns) */
    fh_call_log *calls;
    fattn_tensor fwd_t[2 + FH_SAVED_NAUX];
    fattn_tensor saved_t[FH_SAVED_COUNT];
    fattn_tensor grads_t[5];
} fh_case_run;

/* Set up a run of opts->impl for `spec` (nothing started: the front end's
 * state is made when the first state needs it). */
fattn_status fh_case_run_init(fh_case_run *r, const fh_spec *spec,
                                 const fh_run_opts *opts);
/* The front end's state and the inputs made here. */
void fh_case_run_free(fh_case_run *r);
fattn_status fh_case_run_fe_start(fh_case_run *r);
/* INPUTS from r->spec, recorded as inputs/. */
fattn_status fh_case_run_inputs(fh_case_run *r);
/* Record r->in (made by the caller) as inputs/. */
fattn_status fh_case_run_put_inputs(fh_case_run *r);
/* Views of a recorded inputs/ group into r->in. */
void fh_case_run_load_inputs(fh_case_run *r, const fh_h5_node *in);
fattn_status fh_case_run_forward(fh_case_run *r);
fattn_status fh_case_run_save_ctx(fh_case_run *r);
/* save_ctx/ again, into r->node, as the ctx holds it now (ops->saved; the
 * run stays at SAVE_CTX): a schedule's record at the backward's step. */
fattn_status fh_case_run_saved(fh_case_run *r);
fattn_status fh_case_run_backward(fh_case_run *r, const fattn_tensor *d_out);
/* Write the calls of `dir` the front end made under r->node/engine_call/,
 * their tensors named by the recorded ones they are (save_ctx and backward
 * do it themselves; a run that stops after the forward calls it). */
fattn_status fh_case_run_write_calls(fh_case_run *r, fh_call_dir dir);
/* inputs/_impl@<input>: each input's fingerprint now. */
fattn_status fh_case_run_inputs_after(fh_case_run *r);
/* A case group with its canonical spec. */
fattn_status fh_case_node_new(const fh_spec *s, fh_h5_node **out);
/* An expect_refusal case's refusal (the front end's status `refused` and
 * message, the state it happened in) as *node: the case group with the
 * refused_* attributes and no states (docs/cases.md). */
fattn_status fh_case_record_refusal(const fh_spec *spec, fh_h5_node **node,
                                       fattn_status refused, fh_state state);
/* The end of a case run: an engine's refusal (st FATTN_E_UNSUPPORTED)
 * becomes the recorded skip, another error names the case and `where`;
 * prov_te_route and the attribute digest are added. *node moves to *out on
 * success and is freed otherwise. */
fattn_status fh_case_finish(const fh_spec *spec, const fh_run_opts *opts,
                               fh_h5_node **node, fattn_status st, const char *where,
                               fh_h5_node **out);
/* fh_case_finish for run r (an expect_refusal case's refusal recorded
 * first), then fh_case_run_free. */
fattn_status fh_case_run_finish(fh_case_run *r, fattn_status st, fh_h5_node **out);

#endif /* FH_HARNESS_CASE_RUN_H */
