/* The harness state machine: one case, one front end, state by state.
 *
 *   BEGIN -> INPUTS -> FORWARD -> SAVE_CTX -> BACKWARD
 *
 * Each state is produced by one transition — INPUTS by the harness, the
 * others by the front end's adapter (fe.h) — and recorded by its observer
 * into the case's node tree (/cases/<id>/<state>/...), exactly as the
 * run-file schema lays it out (docs/run-files.md):
 *   inputs/    q k v attn_bias softmax_offset cu_seqlens_* d_out
 *              _impl@<input> (opts.inputs_after: its fingerprint after the
 *              run, as the front end left the caller's tensor)
 *   forward/   out max_logit aux/<aux slots> (saved_slots.h)
 *              _impl/ (split: to-save slots as the forward returned them,
 *              saved_from.<slot> attributes)
 *   save_ctx/  every saved tensor by role (saved_slots.h); attributes = the
 *              backward-read set (ctx_fields.h); _impl/ (legacy: is_output_fp8)
 *   backward/  dq dk dv d_bias d_softmax_offset
 *              _impl@second_backward* (opts.backward_again: the outcome of
 *              a second backward on the same context), _impl@first_backward*
 *              (opts.backward_after_failure: a first backward that failed)
 *   returned/  out max_logit: what the forward call returned, for a front
 *              end whose recorded forward is not that call's (the split
 *              wrapper); not a state
 * Every front end produces the same tree; only _impl (the adapter's
 * record_private) and returned/ differ. The state machine names no front
 * end.
 *
 * Resuming: a case can also enter SAVE_CTX (or FORWARD, for a front end
 * whose adapter loads a forward: split) from a stored tree — replay — and
 * continue to BACKWARD.
 */
#ifndef FH_HARNESS_RUNNER_H
#define FH_HARNESS_RUNNER_H

#include "fattn/engine.h"

#include "h5io.h"
#include "impl.h"
#include "spec.h"

/* Pattern every output buffer is filled with before each call: all bytes
 * 0xFF (a NaN in every float format; recorded in the run file). */
#define FH_POISON_PATTERN 0xFFFFFFFFFFFFFFFFULL

typedef struct fh_run_opts {
    fh_impl impl;
    fattn_engine *engine;   /* borrowed */
    fh_state until;         /* last state to produce */
    uint64_t poison;
    unsigned te_rules;      /* release whose routing rules prov_te_route names
                             * (FATTN_TE_RULES_*; 0: the newest) */
    bool via_wrapper;       /* split only: run FusedAttnFunc's forward and
                             * backward wrappers, not the helpers (fe.h) */
    bool backward_again;    /* after the backward, call it once more on the
                             * same context and record the outcome in
                             * backward/_impl (second_backward*) */
    bool backward_after_failure; /* a backward that fails is recorded, not an error:
                             * backward/_impl@first_backward(_error) get its status and
                             * message, and a second backward on the same context
                             * follows (second_backward*, as backward_again) */
    bool inputs_after;      /* after the last state, record the fingerprint of
                             * each input as the front end left it in
                             * inputs/_impl (an in-place write shows) */
    bool cp_reference;      /* a cp case runs as the same case without context
                             * parallelism, one process: what fattn-te holds
                             * its ranks against; otherwise it is recorded as
                             * skipped (fattn's runner is one process) */
    bool keep_partial;      /* a schedule that fails returns FATTN_OK with the
                             * steps it recorded up to the failure (the failing
                             * step's states up to the one that failed): what
                             * verify compares when one front end fails in a
                             * later step (a single case is cut by --until) */
} fh_run_opts;

/* Run one case from BEGIN to opts->until and return its group node (named
 * by the case id). A case the engine cannot run, and a cp case without
 * opts->cp_reference, is returned as a group with only `spec` and
 * `skipped` (the reason) and FATTN_OK. Every case node
 * gets `prov_te_route` when DotProductAttention would not route the case to
 * FusedAttention under opts->te_rules (te_rules.h; provenance, never
 * compared). Invalid cases (TE
 * refuses them) and failures return the status. */
fattn_status fh_run_case(const fh_spec *spec, const fh_run_opts *opts,
                            fh_h5_node **out);

/* fh_run_case of a case with a schedule (spec.h): every step recorded
 * under /cases/<id>/steps/<k>/ (docs/run-files.md "Schedules"); --until
 * runs every state of every step and records each step's up to it. */
fattn_status fh_run_schedule(const fh_spec *spec, const fh_run_opts *opts,
                                fh_h5_node **out);
/* fh_replay_case of a recorded schedule: the steps copied as recorded
 * but, for each B step, the backward recomputed from that step's save_ctx
 * (from SAVE_CTX), and for each forward of split the setup_ctx from its
 * recorded forward (from FORWARD). */
fattn_status fh_replay_schedule(const fh_h5_node *recorded, const fh_spec *spec,
                                   fh_state from, const fh_run_opts *opts,
                                   fh_h5_node **out);

/* Replay: take a recorded case group (with at least `from` recorded),
 * copy every state up to `from` and recompute later ones with opts->impl.
 * from = SAVE_CTX: load the backward-read set into the impl's backward.
 * from = FORWARD: split only — setup_ctx and backward from the recorded
 * inputs and forward outputs. */
fattn_status fh_replay_case(const fh_h5_node *recorded, fh_state from,
                               const fh_run_opts *opts, fh_h5_node **out);


/* Process-wide allocator policy for commands that run cases one after
 * another and free each case's tree before the next (run, replay, golden):
 * buffers of 1 MiB and more are mapped and unmapped one by one, so that
 * what a finished case freed goes back to the system. glibc's default
 * threshold rises with every large free, after which the next cases'
 * tensors come from the heap and its fragments stay resident: 16 cases of
 * 12 MB each held 120 MB of RSS instead of 37. No effect elsewhere (other C
 * libraries, the sanitizers' allocators). Call before the first case. */
void fh_run_memory_policy(void);

/* Writing a run file one case at a time. Each finished case's tree is put
 * into the file as soon as it is complete, and the caller frees it, so a
 * command holds one case however many it runs. The writer (h5write.h) takes
 * the objects in sorted order: cases must be put in increasing id order.
 * /audit sorts before /cases but is complete only after the last case: a
 * sink opened with `audit` puts the cases into a scratch run file beside the
 * output (".fattn-cases-<pid>") and, on commit, writes the root attributes,
 * /audit, then each case read back from the scratch file, again one at a
 * time. The bytes are those of the whole tree written at once. The output
 * appears (renamed over `out`) only on a successful commit; any failure and
 * fh_case_sink_free leave neither it, its temporary file nor the
 * scratch file. */
typedef struct fh_case_sink fh_case_sink;

/* Open a sink for run file `out`. `root` (borrowed until commit) holds the
 * root attributes and no children. */
fattn_status fh_case_sink_open(const char *out, const fh_h5_node *root, bool audit,
                                  fh_case_sink **sink);
/* Write one case group (named by its id, sorting after the previous one);
 * the caller keeps and frees it. */
fattn_status fh_case_sink_put(fh_case_sink *k, const fh_h5_node *case_node);
/* Finish and rename the file. `audit` is the /audit group (named "audit")
 * for a sink opened with audit, else NULL. An empty /cases if none was put.
 * The sink still needs fh_case_sink_free. */
fattn_status fh_case_sink_commit(fh_case_sink *k, const fh_h5_node *audit);
/* Discard whatever is not committed and free the sink (NULL is fine). */
void fh_case_sink_free(fh_case_sink *k);

/* Validate a recorded save_ctx group's attributes (types and ranges). */
fattn_status fh_save_ctx_validate(const fh_h5_node *save_ctx);

#endif /* FH_HARNESS_RUNNER_H */
