/* The backward-read set: the ctx fields TE's backward reads, as one table.
 *
 * TE's FusedAttnFunc.forward sets 33 ctx attributes (TE 2.19.0 backends.py:1657-1748).
 * Backward reads 29 of them; the other four are fp8_recipe, fp8_meta and
 * is_output_fp8 (set, never read) and tensor_objects (the saved tensors,
 * saved_slots.h). The 29 are FH_CTX_FIELDS below, in TE's order. From
 * this one table come the record struct (fh_ctx_record), the save_ctx
 * attribute writer, the validating reader (fh_ctx_record_read, also
 * fh_save_ctx_validate), and every copy between the record and a front
 * end's structs (fattn_legacy_ctx, fattn_bwd_args, fattn_split_ctx_attrs):
 * a struct member is named as its row, so a row missing from a front end's
 * struct is a compile error.
 *
 * A row is X(name, ctype, kind, codec, presence, role):
 *   name      TE's ctx attribute = the save_ctx attribute = the member name
 *   ctype     the record member's C type
 *   kind      how it is recorded (HDF5 attribute type):
 *               BOOL     uint8, 0 or 1
 *               INT64    int64
 *               FLOAT32  float32
 *               TRIBOOL  uint8, 0 or 1; the C value is -1 (None), 0 or 1
 *               PAIR     int64[2] (fh_ctx_pair)
 *               ENUM     UTF-8 string, TE's name; codec names the enum's
 *                        fattn_<codec>_name / fattn_<codec>_parse pair
 *               STRING   UTF-8 string (codec `str`)
 *               OPAQUE   an opaque pointer carried as data and not recorded
 *               QUANT    a quantizer (fattn_fp8_quantizer *), recorded as the
 *                        string "<recipe> <fp8 dtype> scale=<%a> amax=<%a>
 *                        pow2=<0|1> eps=<%a>" (C99 hex floats: exact);
 *                        absent is TE's None (the f16 path)
 *   codec     ENUM: the name/parse prefix; STRING: str; otherwise _
 *   presence  REQ: always recorded, missing is invalid; OPT: TE's None is
 *             recorded by absence (the None value is FH_CTX_NONE_<codec>)
 *   role      DERIVED: forward works it out and hands it to setup_ctx in
 *             fattn_split_ctx_attrs; ARG: setup_ctx copies it from the
 *             forward's args
 *
 * To add a field: add its row here (in TE's order) and the member of the
 * same name to fattn_legacy_ctx, fattn_bwd_args and, for DERIVED, to
 * fattn_split_ctx_attrs; the writer, reader and copies follow. A new kind of
 * value needs its W_/R_ macros in ctx_fields.c and its FH_CTX_COPY_ macro
 * below. Recording a quantizer (FP8) is a change of that row's kind from
 * OPAQUE to a kind that records it (QUANT). Range rules beyond the type (positive
 * lengths, dropout in [0, 1), ...) are in ctx_fields.c's range check.
 * Attribute order in a file does not follow the table: the writer sorts.
 */
#ifndef FH_HARNESS_CTX_FIELDS_H
#define FH_HARNESS_CTX_FIELDS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "fattn/fp8.h"
#include "fattn/te.h"
#include "fattn/tensor.h"

#include "h5io.h"

typedef int64_t fh_ctx_pair[2];

#define FH_CTX_FIELDS(X)                                                                       \
    X(fp8, bool, BOOL, _, REQ, DERIVED)                                                        \
    X(nominal_dtype, fattn_dtype, ENUM, dtype, REQ, DERIVED)                                   \
    X(is_input_fp8, bool, BOOL, _, REQ, DERIVED)                                               \
    X(bf16_backward, bool, BOOL, _, REQ, ARG)                                                  \
    X(layer_number, int64_t, INT64, _, REQ, ARG)                                               \
    X(QKV_quantizer, fattn_fp8_quantizer *, QUANT, _, OPT, DERIVED)                                    \
    X(O_quantizer, fattn_fp8_quantizer *, QUANT, _, OPT, DERIVED)                                      \
    X(dQKV_quantizer, fattn_fp8_quantizer *, QUANT, _, OPT, DERIVED)                                   \
    X(dO_quantizer, fattn_fp8_quantizer *, QUANT, _, OPT, DERIVED)                                     \
    X(dP_quantizer, fattn_fp8_quantizer *, QUANT, _, OPT, DERIVED)                                     \
    X(S_quantizer, fattn_fp8_quantizer *, QUANT, _, OPT, DERIVED)                                      \
    X(qkv_type, const char *, STRING, str, OPT, DERIVED)                                       \
    X(max_seqlen_q, int64_t, INT64, _, REQ, ARG)                                               \
    X(max_seqlen_kv, int64_t, INT64, _, REQ, ARG)                                              \
    X(attn_scale, float, FLOAT32, scale, OPT, ARG)                                             \
    X(dropout_p, float, FLOAT32, _, REQ, ARG)                                                  \
    X(fast_zero_fill, bool, BOOL, _, REQ, ARG)                                                 \
    X(qkv_layout, fattn_qkv_layout, ENUM, layout, REQ, DERIVED)                                \
    X(o_format, fattn_qkv_format, ENUM, format, REQ, DERIVED)                                  \
    X(qkv_scale_inv_format, fattn_qkv_format, ENUM, format, OPT, DERIVED)                      \
    X(dqkv_layout, fattn_qkv_layout, ENUM, layout, REQ, DERIVED)                               \
    X(attn_bias_type, fattn_bias_type, ENUM, bias_type, REQ, ARG)                              \
    X(attn_mask_type, fattn_mask_type, ENUM, mask_type, REQ, ARG)                              \
    X(softmax_type, fattn_softmax_type, ENUM, softmax_type, REQ, ARG)                          \
    X(window_size, fh_ctx_pair, PAIR, _, REQ, ARG)                                             \
    X(bottom_right_diagonal, int, TRIBOOL, tribool, OPT, ARG)                                      \
    X(fused_attention_backend, fattn_te_backend, ENUM, te_backend, REQ, DERIVED)               \
    X(use_FAv2_bwd, bool, BOOL, _, REQ, ARG)                                                   \
    X(deterministic, bool, BOOL, _, REQ, ARG)

/* TE's None for the OPT rows, by codec: the C value, and the test for it
 * (NaN is never equal to itself). attn_scale and bottom_right_diagonal are
 * None when a direct FusedAttnFunc caller passes None: both TE versions
 * keep it in the ctx and fused_attn_bwd resolves it (fused_attn.py:591-599). */
#define FH_CTX_NONE_format FATTN_FORMAT_NOT_SET
#define FH_CTX_NONE_str NULL
#define FH_CTX_NONE_scale ((float)NAN)
#define FH_CTX_NONE_tribool (-1)
#define FH_CTX_IS_NONE_format(v) ((v) == FATTN_FORMAT_NOT_SET)
#define FH_CTX_IS_NONE_str(v) ((v) == NULL)
#define FH_CTX_IS_NONE_scale(v) isnan(v)
#define FH_CTX_IS_NONE_tribool(v) ((v) < 0)

/* The backward-read set as values. Strings (qkv_type) are borrowed: from
 * the front end that filled the record, or from the node it was read from. */
typedef struct fh_ctx_record {
#define FH_CTX_MEMBER_(name, ctype, kind, codec, presence, role) ctype name;
    FH_CTX_FIELDS(FH_CTX_MEMBER_)
#undef FH_CTX_MEMBER_
    /* what the QUANT rows point at after fh_ctx_record_read */
    fattn_fp8_quantizer quant_store[6];
} fh_ctx_record;

/* Number of rows in the table. */
#define FH_CTX_COUNT_(name, ctype, kind, codec, presence, role) +1
enum { FH_CTX_NFIELDS = 0 FH_CTX_FIELDS(FH_CTX_COUNT_) };
#undef FH_CTX_COUNT_

/* Copy one member between two structs named as the table (d = s), by kind.
 * Plain assignment converts between bool and the int front ends use for
 * 0/1 values (split's bottom_right_diagonal). */
#define FH_CTX_COPY_BOOL(d, s) ((d) = (s))
#define FH_CTX_COPY_INT64(d, s) ((d) = (s))
#define FH_CTX_COPY_FLOAT32(d, s) ((d) = (s))
#define FH_CTX_COPY_TRIBOOL(d, s) ((d) = (s))
#define FH_CTX_COPY_ENUM(d, s) ((d) = (s))
#define FH_CTX_COPY_STRING(d, s) ((d) = (s))
#define FH_CTX_COPY_OPAQUE(d, s) ((d) = (s))
#define FH_CTX_COPY_QUANT(d, s) ((d) = (s))
#define FH_CTX_COPY_PAIR(d, s) ((d)[0] = (s)[0], (d)[1] = (s)[1])

/* X-macro bodies for a copy: inside a function whose parameters `dst` and
 * `src` point to structs with members named as the table (the record or a
 * front end's struct),
 *     FH_CTX_FIELDS(FH_CTX_COPY_FIELD)          copies every field,
 *     FH_CTX_FIELDS(FH_CTX_COPY_DERIVED)        copies the DERIVED ones. */
#define FH_CTX_COPY_FIELD(name, ctype, kind, codec, presence, role)                           \
    FH_CTX_COPY_##kind(dst->name, src->name);
#define FH_CTX_COPY_DERIVED(name, ctype, kind, codec, presence, role)                         \
    FH_CTX_IF_DERIVED_##role(FH_CTX_COPY_##kind(dst->name, src->name);)
#define FH_CTX_IF_DERIVED_DERIVED(x) x
#define FH_CTX_IF_DERIVED_ARG(x)

/* Record the backward-read set as attributes of the save_ctx group `n`:
 * REQ rows always, OPT rows unless TE's None, OPAQUE rows never. */
fattn_status fh_ctx_record_write(const fh_ctx_record *r, fh_h5_node *n);
/* One quantizer as a QUANT row records it, as the string attribute `key`. */
fattn_status fh_ctx_quantizer_write(fh_h5_node *n, const char *key,
                                       const fattn_fp8_quantizer *q);

/* Read and validate the backward-read set from the save_ctx group `n`:
 * every REQ attribute present, every present attribute of its row's type,
 * booleans 0 or 1, enum names known, then the ranges (max_seqlen_* > 0,
 * window_size >= -1, dropout_p in [0, 1), attn_scale finite when present). The first
 * violation is FATTN_E_INVALID_FILE naming the attribute (max_seqlen_* and
 * window_size also at most INT32_MAX: lengths are int32 everywhere). The
 * cross-check with the case's spec is runfile.c's. OPT rows absent
 * read as TE's None; OPAQUE rows read as NULL. */
fattn_status fh_ctx_record_read(const fh_h5_node *n, fh_ctx_record *r);

#endif /* FH_HARNESS_CTX_FIELDS_H */
