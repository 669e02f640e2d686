/* harness/run/case_run.h — one case run of one front end, state by state
 * (runner.h describes the states and what each records). Private to run/:
 * the runner drives one run through BEGIN -> BACKWARD; a schedule
 * (schedule_run.c) drives one per micro-batch or step, all recording into
 * groups of one case and sharing one generator and the module's FP8
 * quantizers. */
#ifndef FATTN_HARNESS_CASE_RUN_H
#define FATTN_HARNESS_CASE_RUN_H

#include "fe.h"
#include "h5io.h"
#include "inputs.h"
#include "runner.h"

/* The datasets of inputs/, in the order they are recorded. */
#define CASE_INPUTS(X)                                                                         \
    X(q) X(k) X(v) X(attn_bias) X(softmax_offset) X(cu_seqlens_q) X(cu_seqlens_kv)             \
    X(cu_seqlens_q_padded) X(cu_seqlens_kv_padded) X(d_out) X(page_table_k) X(page_table_v)

typedef struct fattn_case_run {
    const fattn_spec *spec;
    const fattn_run_opts *opts;
    const fattn_fe_ops *ops; /* the front end's adapter */
    void *fe;                /* its state, once started */
    fattn_fe_env env;        /* what it is handed; points into this struct */
    fattn_state state;
    fattn_case_inputs in;
    bool own_inputs;         /* made here; false: views into a recorded tree */
    fattn_rng_gen gen;       /* the run's generator (env.gen: it, or a schedule's) */
    fattn_h5_node *node;     /* the group states are recorded into: /cases/<id>, or a
                              * schedule step's /cases/<id>/steps/<k> */
} fattn_case_run;

/* Set up a run of opts->impl for `spec` (nothing started: the front end's
 * state is made when the first state needs it). */
fattn_status fattn_case_run_init(fattn_case_run *r, const fattn_spec *spec,
                                 const fattn_run_opts *opts);
/* The front end's state and the inputs made here. */
void fattn_case_run_free(fattn_case_run *r);
fattn_status fattn_case_run_fe_start(fattn_case_run *r);
/* INPUTS from r->spec, recorded as inputs/. */
fattn_status fattn_case_run_inputs(fattn_case_run *r);
/* Record r->in (made by the caller) as inputs/. */
fattn_status fattn_case_run_put_inputs(fattn_case_run *r);
/* Views of a recorded inputs/ group into r->in. */
void fattn_case_run_load_inputs(fattn_case_run *r, const fattn_h5_node *in);
fattn_status fattn_case_run_forward(fattn_case_run *r);
fattn_status fattn_case_run_save_ctx(fattn_case_run *r);
/* save_ctx/ again, into r->node, as the ctx holds it now (ops->saved; the
 * run stays at SAVE_CTX): a schedule's record at the backward's step. */
fattn_status fattn_case_run_saved(fattn_case_run *r);
fattn_status fattn_case_run_backward(fattn_case_run *r, const fattn_tensor *d_out);
/* inputs/_impl@<input>: each input's fingerprint now. */
fattn_status fattn_case_run_inputs_after(fattn_case_run *r);
/* A case group with its canonical spec. */
fattn_status fattn_case_node_new(const fattn_spec *s, fattn_h5_node **out);
/* An expect_refusal case's refusal (the front end's status `refused` and
 * message, the state it happened in) as *node: the case group with the
 * refused_* attributes and no states (docs/cases.md). */
fattn_status fattn_case_record_refusal(const fattn_spec *spec, fattn_h5_node **node,
                                       fattn_status refused, fattn_state state);
/* The end of a case run: an engine's refusal (st FATTN_E_UNSUPPORTED)
 * becomes the recorded skip, another error names the case and `where`;
 * prov_te_route and the attribute digest are added. *node moves to *out on
 * success and is freed otherwise. */
fattn_status fattn_case_finish(const fattn_spec *spec, const fattn_run_opts *opts,
                               fattn_h5_node **node, fattn_status st, const char *where,
                               fattn_h5_node **out);
/* fattn_case_finish for run r (an expect_refusal case's refusal recorded
 * first), then fattn_case_run_free. */
fattn_status fattn_case_run_finish(fattn_case_run *r, fattn_status st, fattn_h5_node **out);

#endif /* FATTN_HARNESS_CASE_RUN_H */
