/* fattn-coverage: which cases of the default matrix see each row of the
 * backward's inputs and of the outputs (docs/coverage.md).
 *
 * usage: fattn-coverage [--check] DOC.md
 *   writes the table to DOC.md, or with --check compares it with DOC.md
 *   byte for byte; exit 1 on a difference or on a hole (a row no case sees
 *   that is not listed below as unreachable), 2 on an error.
 *
 * Measured by mutation, on the CPU engine: each training case runs through
 * the legacy front end; then for every row of the backward-read set
 * (FH_CTX_FIELDS) and every saved slot (FH_SAVED_SLOTS) the recorded
 * save_ctx is changed in that one row and replayed through the split's
 * backward. The case sees the row when a backward bit changes or the
 * backward refuses the changed context (verify reports both). The aux
 * slots and gradient positions are outputs recorded bitwise: a case sees
 * one when its run records it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/dtype.h"
#include "fattn/engine.h"
#include "fattn/te.h"

#include "compare.h"
#include "ctx_fields.h"
#include "h5io.h"
#include "runner.h"
#include "saved_slots.h"
#include "spec.h"

/* Rows no case of the matrix can show, with why: the FP8 branches read
 * them, or fattn's engines do not take them. */
static const struct {
    const char *row, *why;
} unreachable[] = {
    {"ctx@QKV_quantizer", "a quantizer object; None on the f16 path (FP8 model)"},
    {"ctx@O_quantizer", "a quantizer object; None on the f16 path (FP8 model)"},
    {"ctx@dQKV_quantizer", "a quantizer object; None on the f16 path (FP8 model)"},
    {"ctx@dO_quantizer", "a quantizer object; None on the f16 path (FP8 model)"},
    {"ctx@dP_quantizer", "a quantizer object; None on the f16 path (FP8 model)"},
    {"ctx@S_quantizer", "a quantizer object; None on the f16 path (FP8 model)"},
    {"ctx@qkv_type", "read only on FP8 paths"},
    {"ctx@qkv_scale_inv_format", "read only on FP8 paths"},
    {"ctx@is_input_fp8", "read only on FP8 paths"},
    {"ctx@bf16_backward", "read only on FP8 paths"},
    {"ctx@layer_number", "read only by FP8 debug printing (print_quantizers)"},
    {"ctx@fast_zero_fill", "handed to TE's C++ extension (fused_attn.py:623), which fattn's "
                           "engines do not model: a gap of the model, not of the matrix"},
    {"ctx@deterministic", "selects cuDNN's backward algorithm; the CPU engine, where this is "
                          "measured, is deterministic by construction (docs/determinism.md)"},
    {"saved/q_fp8", "saved only on FP8 paths"},
    {"saved/k_fp8", "saved only on FP8 paths"},
    {"saved/v_fp8", "saved only on FP8 paths"},
    {"saved/out_fp8", "saved only on FP8 paths"},
};

/* For each row, what the split returns or hands on there beyond the row
 * itself, and where verify records it (docs/verify.md): the answer to
 * "what could differ that no recorded bit shows?". Matched by exact name,
 * then by the longest prefix. */
static const struct {
    const char *row, *more;
} handed_on[] = {
    {"ctx@", "nothing more: save_ctx@ is copied from the bwd args the split's backward reads "
             "(straight and wrapper runs), not from what setup_ctx was asked to write"},
    {"ctx@layer_number", "nothing more (a debug label)"},
    {"ctx@QKV_quantizer", "the object DotProductAttention owns: save_ctx@ holds its state "
                          "after the forward (the amax the forward wrote included)"},
    {"ctx@O_quantizer", "the object DotProductAttention owns: save_ctx@ holds its state "
                        "after the forward (the amax the forward wrote included)"},
    {"ctx@S_quantizer", "with an FP8 backward under delayed scaling, a copy (backends.py:"
                        "1856-1858): save_ctx@ records the copy, DPA's live S quantizer is not "
                        "recorded; the copy is taken after the forward wrote S's amax into the "
                        "live one, so they agree unless one is taken for the other, and no "
                        "recorded bit depends on which (docs/verify.md)"},
    {"ctx@dO_quantizer", "the backward writes its amax: backward@dO_quantizer"},
    {"ctx@dP_quantizer", "the backward writes its amax: backward@dP_quantizer"},
    {"ctx@dQKV_quantizer", "the backward writes its amax: backward@dQKV_quantizer"},
    {"saved/", "what backward unpacked: backward/_impl@<slot>, a fingerprint taken after the "
               "backward, held against save_ctx by the seam check (an in-place write into a "
               "saved tensor shows there too); a caller's tensor saved by reference: "
               "inputs/_impl (the inputs check)"},
    {"saved/q_fp8", "as saved/ above, and its Float8Tensor's scale_inv: save_ctx/q_fp8@scale_inv"},
    {"saved/k_fp8", "as saved/ above, and its Float8Tensor's scale_inv: save_ctx/k_fp8@scale_inv"},
    {"saved/v_fp8", "as saved/ above, and its Float8Tensor's scale_inv: save_ctx/v_fp8@scale_inv"},
    {"saved/out_fp8", "as saved/ above, and its Float8Tensor's scale_inv: "
                      "save_ctx/out_fp8@scale_inv"},
    {"forward/out", "FusedAttnFunc.forward's return value, another tensor than the ctx's O "
                    "when FP8 converts it: returned/out (@scale_inv) in the wrapper run; the "
                    "to-save entries and their dedup sources as forward_impl hands them to "
                    "setup_ctx: forward/_impl (private; seen through save_ctx and the replay "
                    "from forward)"},
    {"forward/max_logit", "the wrapper's second return value: returned/max_logit"},
    {"forward/aux/", "the aux slots as forward_impl hands them to setup_ctx: forward/_impl "
                     "(private; seen through save_ctx and the replay from forward)"},
    {"forward/aux/rng_state", "the generator after the forward, which the next call draws "
                              "from: forward@rng_gen_seed, @rng_gen_offset"},
    {"backward/", "the wrapper's six outputs (the sixth, for the args, must be None: an "
                  "error otherwise); FP8 grads' scale_inv: backward/<grad>@scale_inv; a "
                  "second backward on the same ctx: backward/_impl@second_backward (must "
                  "refuse); the caller's tensors afterwards: inputs/_impl"},
    {"backward/d_bias", "the wrapper's fourth output (recorded from the wrapper in its run)"},
    {"backward/d_softmax_offset", "the wrapper's fifth output (recorded from the wrapper in "
                                  "its run); a buffer that is the caller's offset: "
                                  "inputs/_impl (mutant doffset_into_offset)"},
};

static const char *handed_on_for(const char *name)
{
    const char *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < sizeof handed_on / sizeof handed_on[0]; i++) {
        size_t n = strlen(handed_on[i].row);
        if (!strcmp(handed_on[i].row, name))
            return handed_on[i].more;
        if (handed_on[i].row[n - 1] == '/' || handed_on[i].row[n - 1] == '@')
            if (!strncmp(handed_on[i].row, name, n) && n > best_len)
                best = handed_on[i].more, best_len = n;
    }
    return best ? best : "";
}

/* The outputs a run records bitwise: seen by every case that records one. */
static const char *const outs[] = {"forward/out", "forward/max_logit",
                                   "forward/aux/softmax_stats", "forward/aux/rng_state",
                                   "forward/aux/aux_bias", "forward/aux/aux_softmax_offset",
                                   "backward/dq", "backward/dk", "backward/dv",
                                   "backward/d_bias", "backward/d_softmax_offset"};

#define MAX_ROWS 64
#define MAX_CASES 256

typedef struct row {
    char name[64];
    int n;                 /* cases that see it */
    int n_refused;         /* of those, by refusing the changed context */
    const char *first[3];  /* the first case ids */
} row;

static row rows[MAX_ROWS];
static int n_rows;

static row *row_get(const char *name)
{
    for (int i = 0; i < n_rows; i++)
        if (!strcmp(rows[i].name, name))
            return &rows[i];
    if (n_rows == MAX_ROWS)
        abort(); /* the tables have fewer rows */
    snprintf(rows[n_rows].name, sizeof rows[0].name, "%s", name);
    return &rows[n_rows++];
}

static void row_see(const char *name, const char *id, bool refused)
{
    row *r = row_get(name);
    if (r->n < 3)
        r->first[r->n] = id;
    r->n++;
    r->n_refused += refused;
}

/* The next valid value of an enum after v (names are the test). */
#define ENUM_NEXT(codec, type, v)                                                             \
    do {                                                                                       \
        for (int k_ = 1; k_ <= 64; k_++) {                                                     \
            int c_ = ((int)(v) + k_) % 64;                                                     \
            const char *n_ = fattn_##codec##_name((type)c_);                                   \
            if (n_ && strcmp(n_, "invalid")) {                                                 \
                (v) = (type)c_;                                                                \
                break;                                                                         \
            }                                                                                  \
        }                                                                                      \
    } while (0)

/* Change one row of a record: false when the row holds nothing to change. */
static bool mutate_row(fh_ctx_record *r, const char *name)
{
#define M_BOOL(f) r->f = !r->f
#define M_INT64(f) r->f += 1
#define M_FLOAT32(f) r->f = isnan(r->f) ? 0.2f : r->f == 0.0f ? 0.1f : r->f * 0.75f
#define M_TRIBOOL(f) r->f = r->f < 0 ? 1 : !r->f
#define M_PAIR(f) r->f[0] = r->f[0] < 0 ? 2 : r->f[0] + 1
#define M_STRING(f) r->f = r->f ? NULL : "delayed"
#define M_OPAQUE(f) return false
#define M_ENUM_dtype(f) ENUM_NEXT(dtype, fattn_dtype, r->f)
#define M_ENUM_layout(f) ENUM_NEXT(layout, fattn_qkv_layout, r->f)
#define M_ENUM_format(f) ENUM_NEXT(format, fattn_qkv_format, r->f)
#define M_ENUM_bias_type(f) ENUM_NEXT(bias_type, fattn_bias_type, r->f)
#define M_ENUM_mask_type(f) ENUM_NEXT(mask_type, fattn_mask_type, r->f)
#define M_ENUM_softmax_type(f) ENUM_NEXT(softmax_type, fattn_softmax_type, r->f)
/* fused_attn_bwd reads the backend only to raise on No_Backend (TE 2.20.2
 * fused_attn.py:603); the C++ side derives its own. */
#define M_ENUM_te_backend(f) r->f = FATTN_TE_BACKEND_NO_BACKEND
#define M_ENUM(f, codec) M_ENUM_##codec(f)
#define M_KIND_BOOL(f, c) M_BOOL(f)
#define M_KIND_INT64(f, c) M_INT64(f)
#define M_KIND_FLOAT32(f, c) M_FLOAT32(f)
#define M_KIND_TRIBOOL(f, c) M_TRIBOOL(f)
#define M_KIND_PAIR(f, c) M_PAIR(f)
#define M_KIND_STRING(f, c) M_STRING(f)
#define M_KIND_OPAQUE(f, c) M_OPAQUE(f)
#define M_KIND_QUANT(f, c) M_OPAQUE(f)
#define M_KIND_ENUM(f, c) M_ENUM(f, c)
#define ROW(fname, ctype, kind, codec, presence, role)                                         \
    if (!strcmp(name, #fname)) {                                                               \
        M_KIND_##kind(fname, codec);                                                           \
        return true;                                                                           \
    }
    FH_CTX_FIELDS(ROW)
#undef ROW
    return false;
}

/* Change every element of a recorded tensor: floats by a quarter of their
 * size and an offset, integers by one. */
static void mutate_dataset(fh_h5_node *d)
{
    size_t esz = fattn_dtype_size(d->dtype), n = esz ? d->nbytes / esz : 0;
    unsigned char *p = d->data;
    for (size_t i = 0; i < n; i++, p += esz) {
        if (d->dtype == FATTN_DTYPE_FLOAT32) {
            float x;
            memcpy(&x, p, 4);
            x = x + 0.25f * fabsf(x) + 0.125f;
            memcpy(p, &x, 4);
        } else if (d->dtype == FATTN_DTYPE_INT32) {
            int32_t x;
            memcpy(&x, p, 4);
            x += (i == 0) ? 0 : 1; /* keep cu_seqlens[0] at 0 */
            memcpy(p, &x, 4);
        } else if (d->dtype == FATTN_DTYPE_INT64) {
            int64_t x;
            memcpy(&x, p, 8);
            x += 1;
            memcpy(p, &x, 8);
        } else if (esz == 1) { /* FP8 codes: the low bit, never into a NaN code */
            unsigned m = p[0] & 0x7fu;
            m = m == 0x7eu ? 0x7du : (m ^ 0x01u);
            p[0] = (unsigned char)((p[0] & 0x80u) | m);
        } else { /* 16-bit floats: move the bit pattern, not the sign */
            uint16_t x;
            memcpy(&x, p, 2);
            x = (uint16_t)((x & 0x8000u) | (((x & 0x7fffu) + 0x0100u) & 0x7fffu));
            memcpy(p, &x, 2);
        }
    }
}

/* Replay `c` from its save_ctx through the split's backward after `change`
 * (which edits the copy's save_ctx): whether the backward differs from
 * c's or refuses. -1 when the change does not apply. */
typedef bool (*change_fn)(fh_h5_node *sc, const char *what);

static bool change_attr(fh_h5_node *sc, const char *what)
{
    fh_ctx_record r;
    if (fh_ctx_record_read(sc, &r) != FATTN_OK || !mutate_row(&r, what))
        return false;
    return fh_ctx_record_write(&r, sc) == FATTN_OK;
}

static bool change_slot(fh_h5_node *sc, const char *what)
{
    fh_h5_node *d = fh_h5_node_find(sc, what);
    if (!d || !d->is_dataset)
        return false;
    mutate_dataset(d);
    return true;
}

static int replay_differs(const fh_h5_node *c, fattn_engine *e, change_fn change,
                          const char *what, bool *refused)
{
    fh_h5_node *holder = NULL, *x = NULL;
    int res = -1;
    if (fh_h5_node_new_group("", &holder) != FATTN_OK ||
        fh_h5_node_copy(c, holder, NULL) != FATTN_OK)
        goto done;
    fh_h5_node *copy = fh_h5_node_find(holder, c->name);
    fh_h5_node *sc = copy ? fh_h5_node_find(copy, "save_ctx") : NULL;
    if (!sc || !change(sc, what))
        goto done;
    fh_run_opts o = {.impl = FH_IMPL_SPLIT, .engine = e, .until = FH_STATE_BACKWARD,
                        .poison = FH_POISON_PATTERN};
    *refused = fh_replay_case(copy, FH_STATE_SAVE_CTX, &o, &x) != FATTN_OK;
    if (*refused) {
        res = 1;
        goto done;
    }
    static const char *const bw[] = {"backward", NULL};
    fh_compare_result r = {0};
    fh_compare_cases(c, x, bw, &r);
    res = r.differences > 0;
done:
    fh_h5_node_free(x);
    fh_h5_node_free(holder);
    return res;
}

static void measure_case(const fh_h5_node *c, const char *id, fattn_engine *e)
{
    bool refused = false;
#define CTX_ROW(fname, ctype, kind, codec, presence, role)                                     \
    if (replay_differs(c, e, change_attr, #fname, &refused) == 1)                              \
        row_see("ctx@" #fname, id, refused);
    FH_CTX_FIELDS(CTX_ROW)
#undef CTX_ROW
    for (int i = 0; i < FH_SAVED_COUNT; i++) {
        const char *slot = fh_saved_name((fh_saved_slot)i);
        char name[64];
        snprintf(name, sizeof name, "saved/%s", slot);
        if (replay_differs(c, e, change_slot, slot, &refused) == 1)
            row_see(name, id, refused);
    }
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        if (fh_h5_node_find(c, outs[i]))
            row_see(outs[i], id, false);
}

static const char *unreachable_why(const char *name)
{
    for (size_t i = 0; i < sizeof unreachable / sizeof unreachable[0]; i++)
        if (!strcmp(unreachable[i].row, name))
            return unreachable[i].why;
    return NULL;
}

/* Every row of the tables, in order, seen or not. */
static void rows_declare(void)
{
#define CTX_NAME(fname, ctype, kind, codec, presence, role) row_get("ctx@" #fname);
    FH_CTX_FIELDS(CTX_NAME)
#undef CTX_NAME
    for (int i = 0; i < FH_SAVED_COUNT; i++) {
        char name[64];
        snprintf(name, sizeof name, "saved/%s", fh_saved_name((fh_saved_slot)i));
        row_get(name);
    }
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        row_get(outs[i]);
}

static char *render(int n_cases, int *holes)
{
    size_t cap = 1 << 17, len = 0;
    char *b = malloc(cap);
    if (!b)
        return NULL;
#define OUT(...) len += (size_t)snprintf(b + len, len < cap ? cap - len : 0, __VA_ARGS__)
    OUT("<!-- generated by fattn-coverage (tests/coverage.c); `meson test coverage` checks "
        "it -->\n# Coverage of the default matrix\n\n"
        "For every row of what the backward reads (the backward-read set `ctx@`, the saved "
        "tensors `saved/`) and of what is recorded (the forward's outputs and aux slots, the "
        "gradient positions), the cases of the default matrix in which a change to that row "
        "changes a recorded bit. Measured by mutation on the CPU engine over the %d training "
        "cases: the row is changed in the recorded save_ctx and the case is replayed through "
        "the split's backward; it counts when a backward bit changes or the backward refuses "
        "the changed context (both are differences verify reports; `refused` counts those). "
        "Outputs count in every case that records them. A row no case sees is a hole and "
        "fails `meson test coverage`, unless no case can show it (column: why).\n\n"
        "The last column answers, row by row, \"what does the split return or hand on "
        "there that the row does not show, and where does verify record it?\" (the checks: "
        "docs/verify.md). What it found is recorded since: FusedAttnFunc.forward's return "
        "value (`returned/`), a second backward on one ctx (`backward/_impl@second_backward`) "
        "and the caller's tensors after the run (`inputs/_impl`), each with a mutant that "
        "only it catches or names. Still not recorded: DotProductAttention's live S "
        "quantizer where the ctx holds its copy (row `ctx@S_quantizer`).\n\n"
        "| row | cases | refused | e.g. | why no case sees it | what else the split hands on "
        "there, and where verify records it |\n|---|--:|--:|---|---|---|\n",
        n_cases);
    *holes = 0;
    for (int i = 0; i < n_rows; i++) {
        const row *r = &rows[i];
        const char *why = unreachable_why(r->name);
        if (!r->n && !why)
            (*holes)++;
        OUT("| `%s` | %d | %d | ", r->name, r->n, r->n_refused);
        for (int k = 0; k < r->n && k < 3; k++)
            OUT("%s`%s`", k ? ", " : "", r->first[k]);
        OUT(" | %s | %s |\n", why ? why : (r->n ? "" : "**hole**"), handed_on_for(r->name));
    }
#undef OUT
    if (len >= cap) {
        free(b);
        return NULL;
    }
    return b;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap + 1);
    size_t got;
    while (b && (got = fread(b + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb, cap *= 2;
        }
    }
    fclose(f);
    if (b)
        b[len] = '\0';
    return b;
}

int main(int argc, char **argv)
{
    bool check = argc == 3 && !strcmp(argv[1], "--check");
    /* a DOC.md that looks like a flag (--help) is a usage error, not a
     * file to write */
    if ((argc != 2 && !check) || argv[argc - 1][0] == '-') {
        fprintf(stderr, "usage: fattn-coverage [--check] DOC.md\n");
        return argc == 2 && !strcmp(argv[1], "--help") ? 0 : 2;
    }
    const char *doc = argv[argc - 1];
    fh_spec_list l = {0};
    fattn_engine *e = NULL;
    fattn_cpu_options co = {.threads = 1};
    if (fh_spec_load_default(&l) != FATTN_OK || fattn_engine_init_cpu(&e, &co) != FATTN_OK) {
        fprintf(stderr, "fattn-coverage: %s\n", fattn_last_error());
        return 2;
    }
    rows_declare();
    int n_cases = 0;
    for (size_t i = 0; i < l.count; i++) {
        const fh_spec *s = &l.items[i];
        if (!fh_spec_has_backward(s) || s->expect_refusal)
            continue;
        fh_run_opts o = {.impl = FH_IMPL_LEGACY, .engine = e,
                            .until = FH_STATE_BACKWARD, .poison = FH_POISON_PATTERN};
        fh_h5_node *c = NULL;
        if (fh_run_case(s, &o, &c) != FATTN_OK) {
            fprintf(stderr, "fattn-coverage: case %s: %s\n", s->id, fattn_last_error());
            return 2;
        }
        if (!fh_h5_node_attr(c, "skipped")) {
            n_cases++;
            measure_case(c, s->id, e);
        }
        fh_h5_node_free(c);
    }
    int holes = 0;
    char *text = render(n_cases, &holes);
    if (!text) {
        fprintf(stderr, "fattn-coverage: out of memory\n");
        return 2;
    }
    int rc = 0;
    if (check) {
        char *old = slurp(doc);
        if (!old || strcmp(old, text)) {
            fprintf(stderr, "fattn-coverage: %s is not what the matrix gives today; regenerate "
                    "it with fattn-coverage %s\n", doc, doc);
            rc = 1;
        }
        free(old);
    } else {
        FILE *f = fopen(doc, "wb");
        if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "fattn-coverage: cannot write %s\n", doc);
            rc = 2;
        }
    }
    if (holes) {
        fprintf(stderr, "fattn-coverage: %d hole%s (rows no case sees):\n", holes,
                holes == 1 ? "" : "s");
        for (int i = 0; i < n_rows; i++)
            if (!rows[i].n && !unreachable_why(rows[i].name))
                fprintf(stderr, "  %s\n", rows[i].name);
        rc = rc ? rc : 1;
    }
    printf("fattn-coverage: %d cases, %d rows, %d hole%s\n", n_cases, n_rows, holes,
           holes == 1 ? "" : "s");
    free(text);
    fh_spec_list_free(&l);
    fattn_engine_free(e);
    return rc;
}
