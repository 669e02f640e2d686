/* harness/run/engine_call.h — the calls a front end makes to the engine,
 * recorded as the run file's engine_call/ groups (docs/run-files.md,
 * "Engine calls").
 *
 * A call log wraps an engine the way the test variants do
 * (harness/cli/test_variants.c): hand the front end the log's engine
 * (fh_call_log_engine) instead of the real one, and every executing
 * forward and backward call is noted with every argument the front end
 * handed the engine, before the real engine runs it:
 *   - scalars under the engine API's names (fattn/engine.h):
 *     max_seqlen_q, attn_scale, window_size_left, qkv_layout, ...;
 *   - tensors (q k v o cu_seqlens_* bias softmax_offset page_table_*
 *     rng_state d_o dq dk dv d_bias d_softmax_offset, aux[i] for the pack's
 *     i-th entry) as one string each:
 *       "<dtype> [<shape>] strides [<strides>] <source>[+<offset>] <digest>"
 *     where <digest> is the content as the engine was handed it (an output
 *     buffer's is its poison) and <source> the recorded tensor it lies in
 *     (fh_call_names), "unrecorded" when none; an empty slot (TE's None)
 *     is no attribute;
 *   - fp8.<field> for an FP8 call's scaling factors.
 * The first describing call of TE's forward protocol (aux->n == 0) carries
 * nothing the executing one does not, and is not noted; nor is a call the
 * dispatch refused before the engine ran.
 *
 * Then write one direction's calls under any group:
 *     <parent>/engine_call/forward      the first forward call
 *     <parent>/engine_call/forward.2    the second, and so on
 *     <parent>/engine_call/backward     (likewise)
 * The runner writes a case run's under the case group; a schedule step or
 * a context-parallel rank writes its own under its own group, with the
 * names of the tensors it recorded: open a log around the engine it runs,
 * hand the front end fh_call_log_engine(log), and after the step call
 * fh_call_log_write(log, FH_CALL_FORWARD, &names, step_group) (and
 * _BACKWARD likewise).
 */
#ifndef FH_HARNESS_ENGINE_CALL_H
#define FH_HARNESS_ENGINE_CALL_H

#include <stddef.h>

#include "fattn/engine.h"

#include "h5io.h"

typedef enum fh_call_dir { FH_CALL_FORWARD = 0, FH_CALL_BACKWARD = 1 } fh_call_dir;

/* The group name of a direction's calls ("forward", "backward"). */
const char *fh_call_dir_name(fh_call_dir dir);

/* The group engine calls are written under. */
#define FH_ENGINE_CALL_GROUP "engine_call"

/* The recorded tensors a call's tensors are named by, in the order they are
 * looked up: a tensor handed to the engine is named by the first of them
 * with the same data pointer, else by the first whose elements hold it
 * (with its element offset). The names are copied; the tensors are views
 * that must stay valid until the write. */
#define FH_CALL_NAMES_MAX 96
#define FH_CALL_NAME_LEN 64
typedef struct fh_call_names {
    int n;
    char name[FH_CALL_NAMES_MAX][FH_CALL_NAME_LEN];
    fattn_tensor t[FH_CALL_NAMES_MAX];
} fh_call_names;

/* Add `t` as `prefix` + `name` (an empty slot adds nothing). */
void fh_call_names_add(fh_call_names *n, const char *prefix, const char *name,
                          const fattn_tensor *t);
/* Add every dataset below recorded group g (nested names joined with '/'),
 * as prefix + its path below g: the tensors of a recorded state that a
 * front end loaded as views (a replay). */
void fh_call_names_add_group(fh_call_names *n, const char *prefix,
                                const fh_h5_node *g);

typedef struct fh_call_log fh_call_log;

/* A log around `inner` (borrowed: it outlives the log). The log's engine
 * answers every question and reports as `inner` does. */
fattn_status fh_call_log_open(fattn_engine *inner, fh_call_log **out);
/* The engine to hand the front end; valid until the log is freed. */
fattn_engine *fh_call_log_engine(fh_call_log *log);
/* Calls of `dir` noted and not yet written or discarded. */
size_t fh_call_log_pending(const fh_call_log *log, fh_call_dir dir);
/* Write the pending calls of `dir` under parent/engine_call/ (made when
 * needed), naming their tensors by `names` (NULL: none), and forget them.
 * A group of that name already there is an error. */
fattn_status fh_call_log_write(fh_call_log *log, fh_call_dir dir,
                                  const fh_call_names *names, fh_h5_node *parent);
/* Forget the pending calls of `dir` unwritten. */
void fh_call_log_discard(fh_call_log *log, fh_call_dir dir);
void fh_call_log_free(fh_call_log *log);

/* Copy the recorded calls of `dir` (engine_call/<dir>, <dir>.2, ...) of
 * case group `from` into case group `to` (a replay keeps the calls of the
 * states it copies). Nothing when `from` has none. */
fattn_status fh_call_copy(const fh_h5_node *from, fh_call_dir dir, fh_h5_node *to);

#endif /* FH_HARNESS_ENGINE_CALL_H */
