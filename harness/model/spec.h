/* harness/model/spec.h — case specs (docs/cases.md): parse, default, canonical form.
 *
 * A spec file is a JSON array of case objects. Keys are fixed; an unknown
 * key, a wrong type, a value out of range, a duplicate key or a duplicate id
 * is an error whose message names the source, the case and the key:
 *   "cases.json: case 'fwd.x' (#3): key 'b': expected an integer, got string"
 *
 * The keys are the rows of FH_SPEC_KEYS (spec_keys.h), from which the
 * struct, defaults, equality, parser and canonical writer are made.
 * Keys, their types and defaults (R = required):
 *   id                     string, R. 1..FH_SPEC_ID_MAX chars of
 *                          [A-Za-z0-9._-], not "." or ".." (ids name HDF5
 *                          groups).
 *   b, h, sq, d_qk         integer, R.
 *   hg                     integer, default h; 1 <= hg <= h, h % hg == 0.
 *   skv                    integer, default sq.
 *   d_v                    integer, default d_qk.
 *   dtype                  "float16" | "bfloat16" | "float32"; default "bfloat16".
 *   layout                 a TE layout name (fattn_layout_parse); default
 *                          "bshd_bshd_bshd".
 *   mask                   a TE mask name; default "no_mask".
 *   bias                   a TE bias type name; default "no_bias".
 *   bias_shape             "1hss" | "b1ss" | "bhss" | "11ss" | "111s";
 *                          default "1hss" (only read with post_scale_bias).
 *   softmax                "vanilla" | "off-by-one" | "learnable"; default "vanilla".
 *   window                 null | [left, right] (integers); default null.
 *                          Stored as given; TE's normalisation
 *                          (fattn_window_normalize) happens at run time.
 *   bottom_right_diagonal  null | true | false; default null (TE's default
 *                          for the mask, resolved at run time).
 *   dropout_p              number in [0, 1); default 0.0.
 *   is_training            boolean; default true.
 *   deterministic          boolean; default true.
 *   return_max_logit       boolean; default false.
 *   fast_zero_fill         boolean; default true.
 *   attn_scale             null | finite number; default null (TE's default
 *                          (float)(1.0/sqrt((double)d_qk)) at run time).
 *   pad_between_seqs       boolean; default false.
 *   cpu_offload            boolean; default false. TE's CPU offload v1
 *                          state, which both front ends refuse.
 *   bias_no_grad           boolean; default false. true: the bias tensor
 *                          does not require grad (TE's
 *                          core_attention_bias.requires_grad False), so
 *                          DotProductAttention's routing rules that read it
 *                          (det_bias_grad, bias_111s_grad) do not trip;
 *                          FusedAttnFunc's own outputs are the same (its
 *                          backward computes dBias either way). Only with a
 *                          bias tensor; written to the canonical form only
 *                          when true.
 *   raw_func_args          boolean; default false. true: the front ends get
 *                          the values a direct FusedAttnFunc caller passes
 *                          (dropout_p as given, though not training)
 *                          instead of DotProductAttention's (0 when not
 *                          training); only with is_training false. The
 *                          canonical form writes it only when true.
 *   no_grad, inference_mode booleans; default false. The forward runs under
 *                          torch.no_grad() / torch.inference_mode(): the
 *                          module keeps is_training (its train()/eval()),
 *                          FusedAttnFunc's inputs are unchanged, autograd
 *                          keeps no graph, so the case has no backward
 *                          (fh_spec_has_backward). Both: the one nested
 *                          in the other.
 *                          Canonical form: written only when true.
 *   fp8                    null | {"recipe": "delayed" | "current" | "mxfp8" |
 *                          "block", "input_fp8": bool, "output_fp8": bool,
 *                          "dpa_bwd": bool, "o_in_f16": bool,
 *                          "bf16_backward": bool}; default null (the f16
 *                          path). Every member optional: recipe "delayed",
 *                          input_fp8 false (TE's is_input_fp8: q, k, v
 *                          handed in as Float8Tensors), output_fp8 false
 *                          (fp8_output), dpa_bwd true (NVTE_FP8_DPA_BWD),
 *                          o_in_f16 true (NVTE_DPA_FP8CS_O_in_F16),
 *                          bf16_backward false; reduce_amax true (the
 *                          DelayedScaling field; false only with the
 *                          delayed recipe). Only with dtype float16 or
 *                          bfloat16 (the nominal dtype). With input_fp8,
 *                          q, k, v are the case's values quantised to E4M3
 *                          by scales of their own, and d_out is an E5M2
 *                          Float8Tensor exactly where MultiheadAttention
 *                          hands one (output_fp8 under delayed scaling);
 *                          docs/cases.md. Canonical form: written only
 *                          when set, every member filled in.
 *   expect_refusal         null | {"status": "<FATTN_E_... name>", "rule":
 *                          "<support-table rule id>"}; default null. Both
 *                          front ends must refuse the case with that status
 *                          and that rule (fattn_support_check's message
 *                          "rule <id>: ..."). The status is any of
 *                          fh_spec_refusal_status (not FATTN_E_UNSUPPORTED:
 *                          an engine's refusal is a skip); the rule a row of
 *                          fattn_support_rules. Canonical form: written only
 *                          when set, as {"rule":...,"status":...}.
 *   paged                  null | {"page_size": P, "num_pages": N,
 *                          "separate_v": bool}; default null. K and V as a
 *                          paged KV cache; set exactly with a paged_kv_*
 *                          layout. P required, skv a multiple of P; N
 *                          (default b * skv / P) a multiple >= b of skv / P
 *                          (TE's InferenceParams); separate_v false (V
 *                          shares K's table, as FusedAttention passes it).
 *                          docs/cases.md "Paged KV". Canonical form:
 *                          written only when set, every member filled in.
 *   max_batch_size         absent | integer in [b, FH_SPEC_MAX_B]; only
 *                          with paged. The cache as TE's InferenceParams
 *                          (max_batch_size, is_paged) keeps it: a bshd
 *                          cache of num_pages = max_batch_size * skv / P
 *                          pages (its default), one page table
 *                          [max_batch_size, skv / P] for K and V, pages
 *                          handed out in TE's order, the rest zeros; the
 *                          lengths one prefill (seqlens_q = seqlens_kv) or
 *                          a decode step after one (seqlens_q all 1).
 *                          docs/cases.md "Paged KV". Canonical form:
 *                          written only when set.
 *   cp                     null | {"size": N, "comm": "p2p" | "all_gather" |
 *                          "a2a" | "a2a+p2p", "load_balancing":
 *                          "dual_chunk_swap" | "no_load_balance"}; default
 *                          null. TE's context parallelism over N ranks
 *                          (cp_comm_type, CPLoadBalancingStrategy): a case
 *                          fattn-te runs in N processes (docs/te.md,
 *                          "Context parallelism"); fattn's own runner
 *                          records it as skipped. With a THD format each
 *                          sequence's padded length is its length rounded
 *                          up to a multiple of 2N (TE's
 *                          pad_thd_sequences_for_cp) when pad_between_seqs
 *                          is set. Canonical form: written only when set,
 *                          every member filled in.
 *   seqlens_q, seqlens_kv  null | list of exactly b integers, each in
 *                          [0, sq] (resp. [0, skv]); default null (lengths
 *                          drawn from the seed at run time).
 *   seed                   integer >= 0 (the inputs' Philox seed); default 1.
 *   rng_seed               integer >= 0 (dropout); default 1234.
 *   rng_offset             integer in [0, INT64_MAX - fh_spec_rng_increment]
 *                          (16, or on the FP8 path ceil(sq^2/128) to a
 *                          multiple of 4) (dropout; the
 *                          generator after the forward, 16 on, is
 *                          recorded as int64); default 0.
 *
 * Bounds: b <= FH_SPEC_MAX_B, h <= FH_SPEC_MAX_H, sq and skv <=
 * FH_SPEC_MAX_S, d_qk and d_v <= FH_SPEC_MAX_D, all >= 1; every
 * tensor's element count (q, k, v, out, a bias of bhss, the b*h*sq*skv
 * score matrix) must fit in int64 with 8 bytes per element.
 *
 * Validity for TE (bias with padding masks, alibi without causal, ...) is
 * not checked here: that is the support table's job at run time.
 *
 * Statuses: FATTN_E_PARSE (syntax, types, unknown or duplicate keys, missing
 * keys, unknown names, bad ids, duplicate ids), FATTN_E_INVALID_ARG (values
 * out of range, inconsistent keys), FATTN_E_OVERFLOW (sizes overflow),
 * FATTN_E_IO (file unreadable), FATTN_E_NOMEM.
 *
 * Canonical form (fh_spec_canonical): one JSON object, every key written
 * with defaults filled in, keys sorted, separators "," and ":" without
 * whitespace, integers as integers, floats as Python's repr() writes them,
 * true/false/null, ASCII only — the bytes Python's
 *   json.dumps(obj, sort_keys=True, separators=(",", ":"))
 * writes for the same object. Parsing the canonical form gives an equal spec.
 */
#ifndef FH_HARNESS_SPEC_H
#define FH_HARNESS_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fattn/dtype.h"
#include "fattn/fp8.h"
#include "fattn/status.h"
#include "fattn/te.h"

#include "schedule.h"
#include "spec_keys.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FH_SPEC_ID_MAX 128
#define FH_SPEC_MAX_B 65536
#define FH_SPEC_MAX_H 4096
#define FH_SPEC_MAX_S (INT64_C(1) << 24)
#define FH_SPEC_MAX_D 4096
/* A spec file larger than this is refused before parsing. */
#define FH_SPEC_MAX_FILE_BYTES (64u << 20)

typedef enum fh_bias_shape {
    FH_BIAS_SHAPE_1HSS = 0,
    FH_BIAS_SHAPE_B1SS = 1,
    FH_BIAS_SHAPE_BHSS = 2,
    FH_BIAS_SHAPE_11SS = 3,
    FH_BIAS_SHAPE_111S = 4
} fh_bias_shape;

/* TE's context-parallel communication types (cp_comm_type) and load
 * balancing strategies (CPLoadBalancingStrategy, constants.py:14-21). */
typedef enum fh_cp_comm {
    FH_CP_P2P = 0,
    FH_CP_ALL_GATHER = 1,
    FH_CP_A2A = 2,
    FH_CP_A2A_P2P = 3
} fh_cp_comm;

typedef enum fh_cp_balance {
    FH_CP_DUAL_CHUNK_SWAP = 0,
    FH_CP_NO_LOAD_BALANCE = 1
} fh_cp_balance;

typedef enum fh_tristate {
    FH_TRISTATE_NULL = 0,
    FH_TRISTATE_FALSE = 1,
    FH_TRISTATE_TRUE = 2
} fh_tristate;

/* One case: a member (or a few, spec_keys.h) per row of FH_SPEC_KEYS. */
typedef struct fh_spec {
    FH_SPEC_KEYS(FH_SPEC_MEMBER)
} fh_spec;

typedef struct fh_spec_list {
    fh_spec *items;
    size_t count;
} fh_spec_list;

/* Whether `st` is a status a front end refuses a case's arguments with (a
 * refusal, recorded for an expect_refusal case): not FATTN_OK, not an
 * engine's skip (FATTN_E_UNSUPPORTED), not a failure of the machine (out of
 * memory, I/O, CUDA, cuDNN, an internal invariant). */
bool fh_spec_refusal_status(fattn_status st);

/* How far a forward of the case advances the generator's offset: 16 on the
 * f16 path, ceil(sq^2/128) rounded up to a multiple of 4 on the FP8 path
 * (fused_attn.py:356-364, docs/fp8-branches.md F4). */
int64_t fh_spec_rng_increment(const fh_spec *s);

/* The steps of the case's schedule (0 without one): step k (1-based) draws
 * its inputs with seed + k, which bounds seed. */
int64_t fh_spec_steps(const fh_spec *s);
/* How far the case run advances the generator's offset: the increment
 * times its forwards (one without a schedule), which bounds rng_offset. */
int64_t fh_spec_rng_advance(const fh_spec *s);

/* The cache steps of a schedule of them (fh_schedule_is_cache): TE's
 * cache managers' bookkeeping over the case's cache (b, skv, paged) and q
 * format (schedule.h). Errors as fh_kv_plan_make's. */
fattn_status fh_spec_kv_plan(const fh_spec *s, fh_kv_plan *out);
/* The spec step k (1-based) of s's schedule runs as, a case of its own
 * without a schedule: the seed + k; a cache step's batch, sq and lengths
 * from `plan` (fh_spec_kv_plan; NULL for other schedules). Free with
 * fh_spec_free. */
fattn_status fh_spec_step(const fh_spec *s, const fh_kv_plan *plan, int64_t k,
                             fh_spec *out);

/* TE's DelayedScaling amax_history_len default (common/recipe/__init__.py:254). */
#define FH_SPEC_FP8_HISTORY_DEFAULT 1024
#define FH_SPEC_FP8_HISTORY_MAX 65536

/* Whether the case has a backward: training, and the forward not under
 * no_grad or inference_mode (autograd keeps no graph there). */
bool fh_spec_has_backward(const fh_spec *s);

/* Every key at its default; id "" and b = h = sq = d_qk = 0 (required). */
void fh_spec_init(fh_spec *s);
/* Free the owned seqlens lists and reset *s with fh_spec_init. */
void fh_spec_free(fh_spec *s);
/* Deep copy; dst is overwritten (not freed first). */
fattn_status fh_spec_copy(fh_spec *dst, const fh_spec *src);
/* Every key equal; floats compared by their bits. */
bool fh_spec_equal(const fh_spec *a, const fh_spec *b);

/* Parse a spec file's text (a JSON array). `source` names it in messages
 * (a path, or "<default matrix>"). On failure *out is left empty. */
fattn_status fh_spec_parse_json(const char *text, size_t len, const char *source,
                                   fh_spec_list *out);
/* One case object (e.g. a run file's `spec` attribute). */
fattn_status fh_spec_parse_one(const char *text, size_t len, const char *source,
                                  fh_spec *out);
/* Read and parse a spec file. */
fattn_status fh_spec_load_file(const char *path, fh_spec_list *out);
/* The default matrix compiled in from golden/default_cases.json. */
const char *fh_spec_default_json(void);
fattn_status fh_spec_load_default(fh_spec_list *out);
void fh_spec_list_free(fh_spec_list *l);

/* The known keys (the rows of FH_SPEC_KEYS), i < fh_spec_key_count(),
 * in sorted order (the canonical form's); NULL past the end. */
size_t fh_spec_key_count(void);
const char *fh_spec_key_name(size_t i);

/* The canonical form, malloc'd, NUL-terminated (free with free()). */
fattn_status fh_spec_canonical(const fh_spec *s, char **out);
/* One line for `fattn cases` (no id, no newline), truncated to fit n. */
fattn_status fh_spec_summary(const fh_spec *s, char *buf, size_t n);
/* fnmatch(3) of an id against a glob (no flags). */
bool fh_spec_matches_glob(const char *id, const char *glob);

/* A finite double as Python's repr() writes it: the shortest digits that
 * read back to the same double, exponent form ("1e-05", "1.5e+16") when the
 * decimal exponent is < -4 or >= 16, else positional with ".0" when
 * integral. FATTN_E_INVALID_ARG for inf/NaN, FATTN_E_OVERFLOW if n is too
 * small (32 bytes always suffice). */
fattn_status fh_spec_format_double(double v, char *buf, size_t n);

/* TE's names: "p2p" "all_gather" "a2a" "a2a+p2p"; "dual_chunk_swap"
 * "no_load_balance". NULL / FATTN_E_INVALID_ARG for anything else. */
const char *fh_cp_comm_name(fh_cp_comm c);
fattn_status fh_cp_comm_parse(const char *s, fh_cp_comm *out);
const char *fh_cp_balance_name(fh_cp_balance b);
fattn_status fh_cp_balance_parse(const char *s, fh_cp_balance *out);
#define FH_SPEC_MAX_CP 1024 /* ranks */

const char *fh_bias_shape_name(fh_bias_shape s);
fattn_status fh_bias_shape_parse(const char *s, fh_bias_shape *out);

#ifdef __cplusplus
}
#endif
#endif /* FH_HARNESS_SPEC_H */
