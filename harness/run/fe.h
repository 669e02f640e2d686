/* Front ends behind one adapter, so that the state machine (runner.c)
 * knows none of them by name.
 *
 * An adapter turns its front end's own calls and structs into what the
 * runner records: the forward's outputs and aux slots, the saved tensors by
 * role and the backward-read set (fh_ctx_record), the five grads. It
 * keeps its front end's state between the calls of one case run and owns
 * what it allocates until `free`.
 *
 * A case run calls, in order,
 *   run:    init, forward, [record_private FORWARD], save_ctx,
 *           [record_private SAVE_CTX], [saved] (a schedule, before the
 *           backward), backward (training only),
 *           [record_private BACKWARD], [backward_again], free
 *   replay: init, load_save_ctx | load_forward then save_ctx (and its
 *           record_private), backward, free
 * stopping at the first error or at --until. `free` is called whenever
 * `init` succeeded.
 *
 * To add a front end: write its adapter (fe_<name>.c defining
 * fh_fe_<name>) and add its row to FH_IMPLS (impl.h).
 */
#ifndef FH_HARNESS_FE_H
#define FH_HARNESS_FE_H

#include "fattn/engine.h"
#include "fattn/rng.h"

#include "ctx_fields.h"
#include "h5io.h"
#include "impl.h"
#include "inputs.h"
#include "saved_slots.h"
#include "spec.h"

/* What the runner hands a front end for one case run; it outlives the
 * adapter. `in` holds the case's inputs: made from the spec (run) or views
 * into the recorded inputs/ (replay; there `window` and
 * `bottom_right_diagonal` are not set). */
typedef struct fh_fe_env {
    const fh_spec *spec;
    const fh_case_inputs *in;
    fattn_rng_gen *gen;     /* the case run's generator */
    fattn_engine *engine;   /* borrowed */
    uint64_t poison;        /* fill of outputs before each call (0 = none) */
    bool via_wrapper;       /* split: through fattn_split_func_forward /
                             * _backward (FusedAttnFunc.forward/backward)
                             * instead of the three helpers; no replays */
    /* FP8: the quantizer objects the forward is handed, the module's (a
     * schedule's, whose recipe updates reach whatever holds them); NULL:
     * the adapter makes its own (fh_fe_fp8_quantizers), one call's. */
    fattn_fp8_quantizers *quantizers;
} fh_fe_env;

/* FORWARD as recorded in forward/: views owned by the adapter. */
typedef struct fh_fe_forward {
    fattn_tensor out, max_logit;                /* empty max_logit: not returned */
    float out_scale_inv;                        /* out as a Float8Tensor; 0: not FP8 */
    fattn_tensor aux[FH_SAVED_NAUX];            /* the aux slots; empty = absent */
    /* What the forward call returned, where that call is not the one the
     * fields above come from (the split wrapper: FusedAttnFunc.forward's
     * return value, recorded as returned/). */
    bool returned;
    fattn_tensor ret_out, ret_max_logit;        /* empty max_logit: not returned */
    float ret_out_scale_inv;                    /* ret_out a Float8Tensor's; 0: not FP8 */
} fh_fe_forward;

/* SAVE_CTX as recorded in save_ctx/: the saved tensors by role (empty =
 * None) and the backward-read set. Views and strings owned by the adapter. */
typedef struct fh_fe_saved {
    fattn_tensor t[FH_SAVED_COUNT];
    float scale_inv[FH_SAVED_COUNT];            /* a Float8Tensor's; 0: not FP8 */
    fh_ctx_record rec;
} fh_fe_saved;

/* BACKWARD as recorded in backward/. */
typedef struct fh_fe_grads {
    fattn_tensor dq, dk, dv, d_bias, d_softmax_offset;
    float grads_scale_inv;                      /* FP8 dq, dk, dv: theirs; 0: F16 */
    /* FP8 backward: the quantizers its calls wrote amaxes into (NULL: none) */
    const fattn_fp8_quantizer *dO_quantizer, *dP_quantizer, *dQKV_quantizer;
} fh_fe_grads;

typedef struct fh_fe_ops {
    const char *name; /* the --impl value and the run file's impl */
    /* Start a case run: *fe gets the adapter's state. */
    fattn_status (*init)(void **fe, const fh_fe_env *env);
    void (*free)(void *fe);
    fattn_status (*forward)(void *fe, fh_fe_forward *out);
    fattn_status (*save_ctx)(void *fe, fh_fe_saved *out);
    /* The saved tensors and backward-read set as the ctx holds them now,
     * changing nothing (after save_ctx): a schedule records them again
     * when the backward runs, since what the ctx holds by reference (the
     * quantizers) may have changed since the forward. */
    fattn_status (*saved)(void *fe, fh_fe_saved *out);
    fattn_status (*backward)(void *fe, const fattn_tensor *d_out, fh_fe_grads *out);
    /* Add implementation-private objects (an _impl group) to the state's
     * group after the runner recorded the public ones. NULL: none. */
    fattn_status (*record_private)(void *fe, fh_state state, fh_h5_node *group);
    /* Resume at SAVE_CTX: take the recorded save_ctx group (its datasets)
     * and its validated backward-read set into the front end's backward. */
    fattn_status (*load_save_ctx)(void *fe, const fh_h5_node *save_ctx,
                                  const fh_ctx_record *rec);
    /* Resume at FORWARD from the recorded case group (inputs/, forward/,
     * save_ctx/): rebuild what forward hands the next state. NULL: the
     * front end cannot resume there (legacy: forward and save_ctx are one
     * call). */
    fattn_status (*load_forward)(void *fe, const fh_h5_node *recorded);
    /* Backward once more on the context the run's backward used, as
     * autograd does when a caller runs backward twice (retain_graph): both
     * TE versions raise. Returns the call's status; *applies = false when
     * the run has no such context (the split's helpers, which the harness
     * wires itself). NULL: never applies. */
    fattn_status (*backward_again)(void *fe, const fattn_tensor *d_out, bool *applies);
} fh_fe_ops;

/* The adapter of a front end; NULL outside the enum. */
const fh_fe_ops *fh_fe_get(fh_impl impl);

/* A dataset of group `g` as a view, or the empty slot when absent. */
fattn_tensor fh_fe_node_tensor(const fh_h5_node *g, const char *name);

/* Record tensor `t` as dataset `name` of `g`; an empty slot (TE's None) is
 * recorded by its absence. */
fattn_status fh_fe_put_tensor(fh_h5_node *g, const char *name, const fattn_tensor *t);

/* A recorded dataset's fingerprint, "<dtype> [<shape>] <digest>": what a
 * front end records instead of a second copy of a tensor it only needs to
 * show is unchanged (split's backward/_impl). FH_FE_FINGERPRINT_LEN
 * holds any. */
#define FH_FE_FINGERPRINT_LEN 256
void fh_fe_fingerprint(const fh_h5_node *ds, char out[FH_FE_FINGERPRINT_LEN]);
/* Record t's fingerprint as the string attribute `name` of g; an empty
 * slot (TE's None) is recorded by its absence. */
fattn_status fh_fe_put_fingerprint(fh_h5_node *g, const char *name,
                                      const fattn_tensor *t);

/* The case's attn_scale and bottom_right_diagonal as FusedAttnFunc gets
 * them (fh_case_attn_scale_arg / _bottom_right_diagonal_arg): resolved
 * as DotProductAttention does, or under raw_func_args None (NaN, -1) for a
 * null in the spec, which each front end resolves itself. */
float fh_fe_attn_scale(const fh_spec *s);
int fh_fe_bottom_right_diagonal(const fh_spec *s);
/* The quantizers DotProductAttention hands FusedAttnFunc for an FP8 case
 * (docs/cases.md, key fp8): the spec's recipe for QKV, O, dO, dQKV, delayed
 * S and dP (DPA's [CS, DS] pair), E4M3 forward and E5M2 backward (HYBRID),
 * delayed scales fixed powers of two, distinct per quantizer so that one
 * handed to the wrong place shows, amaxes zero. */
void fh_fe_fp8_quantizers(const fh_spec *s, fattn_fp8_quantizers *qs);
/* The fp8_meta DotProductAttention hands FusedAttnFunc for the case: on
 * the FP8 path local_recipes [DS] (delayed) or [CS, DS] (current) and the
 * spec's recipe as the autocast one; on the f16 path no local_recipes and
 * no autocast (TE's default recipe). */
void fh_fe_fp8_meta(const fh_spec *s, fattn_fp8_meta *m);
/* Repoint rec's quantizers (which point into a record read from a file)
 * at copies in store[6] that the caller owns for the case run. */
void fh_fe_own_quantizers(fh_ctx_record *rec, fattn_fp8_quantizer store[6]);
/* The scale_inv attribute of dataset `name` of g (0: none). */
float fh_fe_node_scale_inv(const fh_h5_node *g, const char *name);

/* The case's dropout as FusedAttention passes it: 0 when not training,
 * unless the spec asks for the raw FusedAttnFunc value (raw_func_args). */
float fh_fe_dropout(const fh_spec *s);

#endif /* FH_HARNESS_FE_H */
