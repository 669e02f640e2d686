/* fattn run and fattn replay. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fattn/support.h"

#include "case_mem.h"
#include "cli.h"
#include "digest.h"
#include "fileguard.h"
#include "isolate.h"
#include "ctx_fields.h"
#include "elemcmp.h"
#include "escape.h"
#include "h5estimate.h"
#include "runfile.h"
#include "runner.h"
#include "fattn_config.h"
#include "test_variants.h"
#include "treewalk.h"

static const char run_help[] =
    "usage: fattn run [--cases FILE] [--filter GLOB] [-k SUBSTRING] [--impl legacy|split]\n"
    "                 [--backend auto|cpu|cudnn] [--until forward|save_ctx|backward]\n"
    "                 [--shard I/N] [--repeat N] [--check-writes] [--max-memory BYTES]\n"
    "                 [--te-rules " FATTN_TE_RULES_CHOICES "] [--cp-reference] [--progress]\n"
    "                 -o RUN.h5\n"
    "\n"
    "Step every selected case through inputs -> forward -> save_ctx -> backward with one\n"
    "front end (default split) and write every tensor and attribute of every state to\n"
    "RUN.h5 (replaced atomically). Cases the engine cannot run are recorded as skipped\n"
    "with the reason. -k SUBSTRING keeps the cases whose id contains it (with --filter,\n"
    "both must hold). --shard I/N (1-based) runs every N-th case of the full matrix\n"
    "starting at the I-th; `fattn merge` joins the shards. --repeat N runs each case N\n"
    "times and records under /audit/<id>/<state>/<tensor> whether all repeats were bitwise\n"
    "identical and the most elements a repeat changed (max_differing); each tensor that\n"
    "moved is also named on stderr (exit stays 0). --check-writes runs each case again\n"
    "with a second poison pattern and records the elements no call wrote (count and\n"
    "logical indices). --max-memory refuses, before allocating, a case whose estimated\n"
    "peak is larger (default: half the RAM). --te-rules (default: the newest) names\n"
    "the TE release whose rules the root attribute te_rules records and each case's\n"
    "prov_te_route applies: the rules by which DotProductAttention would not route the case to\n"
    "FusedAttention (the front ends still run it, as FusedAttnFunc does). --progress (the\n"
    "default when stderr is a terminal) prints `[17/63] CASE... ok` on stderr as each case\n"
    "is done. A case with context parallelism (spec key cp) is recorded as skipped: it runs\n"
    "in several processes, through fattn-te (docs/te.md); --cp-reference runs it as the same\n"
    "case without context parallelism in one process instead (what fattn-te holds its ranks\n"
    "against). Prints `run: wrote N cases (M tensors) to RUN.h5` when done.\n"
    "Exit 0 when every case ran or was skipped; 2 on a usage error or an errored case\n"
    "(then RUN.h5 is not written).\n";

static size_t elem_size(const fh_h5_node *a)
{
    size_t esz = fattn_dtype_size(a->dtype);
    return esz ? esz : 1;
}

/* Elements of two equal-sized datasets whose bits differ. */
static int64_t differing_elements(const fh_h5_node *a, const fh_h5_node *b)
{
    assert(a->nbytes == b->nbytes && fattn_dtype_size(a->dtype) > 0);
    fh_elem_cmp rule = {.mode = FH_ELEM_BITWISE};
    fh_elem_stats s = {0};
    fh_walk_memory_state m;
    fh_walk_source src = fh_walk_memory(&m);
    if (fh_walk_compare_data(&src, a->name, a, b, &rule, false, &s, NULL, NULL) != FATTN_OK)
        assert(!"the in-memory source cannot fail");
    return (int64_t)s.bit_count;
}

/* The walk of one state of the first run against a repeat. */
typedef struct audit_ctx {
    fh_h5_node *state_audit;
    int repeats;
    const char *where; /* "<case>/<state>" */
    fattn_status st;
} audit_ctx;

/* One tensor of the first run (`at->a`) against the repeat's (`at->b`,
 * NULL if the repeat lacks it). */
static fattn_status audit_tensor(audit_ctx *c, const fh_walk_at *at)
{
    const fh_h5_node *t = at->a, *t2 = at->b;
    fh_h5_node *an;
    fattn_status st;
    if ((st = fh_h5_node_group(c->state_audit, at->path, &an)) != FATTN_OK)
        return st;
    const fh_h5_attr *prev = fh_h5_node_attr(an, "identical");
    const fh_h5_attr *prev_n = fh_h5_node_attr(an, "max_differing");
    bool comparable = t2 && t2->is_dataset && t2->nbytes == t->nbytes;
    int64_t diff = comparable ? differing_elements(t, t2) : -1;
    int64_t worst = prev_n ? prev_n->i64[0] : 0;
    if (diff < 0 || diff > worst)
        worst = diff < 0 ? (int64_t)(t->nbytes / elem_size(t)) : diff;
    bool same = (!prev || prev->u8) && diff == 0;
    if (diff != 0)
        fprintf(stderr, "fattn run: --repeat: %s/%s is not bitwise repeatable (%s%lld of "
                "%lld elements differ)\n", cli_vis(c->where), cli_vis(at->path), diff < 0 ? "shape changed; " : "",
                (long long)(diff < 0 ? worst : diff), (long long)(t->nbytes / elem_size(t)));
    if ((st = fh_h5_node_set_uint8(an, "identical", same)) != FATTN_OK ||
        (st = fh_h5_node_set_int64(an, "repeats", c->repeats)) != FATTN_OK ||
        (st = fh_h5_node_set_int64(an, "max_differing", worst)) != FATTN_OK)
        return st;
    return FATTN_OK;
}

static fh_walk_next audit_child(void *ctx, const fh_walk_at *at)
{
    audit_ctx *c = ctx;
    if (!at->a || !strcmp(at->name, "_impl"))
        return FH_WALK_SKIP; /* the first run's tensors are the audited ones */
    if (!at->a->is_dataset)
        return FH_WALK_DESCEND;
    c->st = audit_tensor(c, at);
    return FH_WALK_SKIP;
}

static bool audit_stop(void *ctx) { return ((audit_ctx *)ctx)->st != FATTN_OK; }

static const fh_walk_visitor audit_visitor = {.child = audit_child, .stop = audit_stop};

/* One state's datasets (recursively, "_impl" excluded), compared with the
 * same datasets of a repeat: /audit/<id>/<state>/<tensor> gets
 * `identical` (all repeats so far bitwise equal), `repeats` and
 * `max_differing` (the most elements any repeat changed). Nested names are
 * joined with '.' ("aux.softmax_stats"). A tensor that differs is also
 * reported on stderr, since non-determinism is what --repeat looks for;
 * `where` is "<case>/<state>". */
static fattn_status audit_walk(fh_h5_node *state_audit, const fh_h5_node *g,
                               const fh_h5_node *g2, int repeats, const char *where)
{
    audit_ctx c = {state_audit, repeats, where, FATTN_OK};
    fh_walk w = {&audit_visitor, &c, '.'};
    fh_walk_at root = fh_walk_root("", g, g2);
    fh_walk_group(&w, &root);
    return c.st;
}

/* Second poison for --check-writes: an element equal to the first poison
 * in the first run and to this one in the second was written by no call. */
#define FH_POISON_PATTERN_B 0xA5A5A5A5A5A5A5A5ULL

static bool all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return false;
    return true;
}

/* --check-writes for one output dataset: /audit/<id>/<state>/<tensor> gets
 * `unwritten` (count) and `unwritten_index` int64 [n, ndim] (the first
 * 4096 logical indices). */
static fattn_status audit_writes_tensor(fh_h5_node *state_audit, const char *name,
                                        const fh_h5_node *a, const fh_h5_node *b)
{
    if (!a || !b || !a->is_dataset || !b->is_dataset || a->nbytes != b->nbytes)
        return FATTN_OK;
    size_t esz = fattn_dtype_size(a->dtype);
    size_t n = esz ? a->nbytes / esz : 0, count = 0, cap = 4096;
    int64_t *idx = malloc(cap * (size_t)(a->ndim ? a->ndim : 1) * sizeof(int64_t));
    if (!idx)
        return fattn_error(FATTN_E_NOMEM, "--check-writes: index buffer");
    const unsigned char *pa = a->data, *pb = b->data;
    for (size_t e = 0; e < n; e++) {
        if (!all_bytes(pa + e * esz, esz, 0xFF) || !all_bytes(pb + e * esz, esz, 0xA5))
            continue;
        if (count < cap) {
            size_t rem = e;
            for (int d = a->ndim - 1; d >= 0; d--) {
                idx[count * (size_t)a->ndim + (size_t)d] = (int64_t)(rem % (size_t)a->shape[d]);
                rem /= (size_t)a->shape[d];
            }
        }
        count++;
    }
    fh_h5_node *an;
    fattn_status st;
    if ((st = fh_h5_node_group(state_audit, name, &an)) != FATTN_OK ||
        (st = fh_h5_node_set_int64(an, "unwritten", (int64_t)count)) != FATTN_OK)
        goto out;
    if (count) {
        int64_t shape[2] = {(int64_t)(count < cap ? count : cap), a->ndim};
        st = fh_h5_node_add_bytes(an, "unwritten_index", FATTN_DTYPE_INT64, 2, shape, idx,
                                     (size_t)(shape[0] * shape[1]) * sizeof(int64_t), NULL);
    }
out:
    free(idx);
    return st;
}

/* The audit group of one call of a case: /audit/<id>, or for a schedule's
 * step k /audit/<id>/steps/<k> (the steps are audited one by one). */
static fattn_status call_audit(fh_h5_node *case_audit, const char *step, fh_h5_node **out)
{
    fh_h5_node *g = case_audit;
    fattn_status st;
    if (step && ((st = fh_h5_node_group(case_audit, "steps", &g)) != FATTN_OK ||
                 (st = fh_h5_node_group(g, step, &g)) != FATTN_OK))
        return st;
    *out = g;
    return FATTN_OK;
}

/* --check-writes of one call (a case's, or a schedule step's). */
static fattn_status writes_call(fh_h5_node *call_audit_g, const fh_h5_node *first,
                                const fh_h5_node *second)
{
    static const struct { const char *state, *path, *name; } outs[] = {
        {"forward", "out", "out"},
        {"forward", "max_logit", "max_logit"},
        {"forward", "aux/softmax_stats", "aux.softmax_stats"},
        {"backward", "dq", "dq"},
        {"backward", "dk", "dk"},
        {"backward", "dv", "dv"},
        {"backward", "d_bias", "d_bias"},
        {"backward", "d_softmax_offset", "d_softmax_offset"},
    };
    for (size_t i = 0; second && i < sizeof outs / sizeof outs[0]; i++) {
        const fh_h5_node *ga = fh_h5_node_find(first, outs[i].state);
        const fh_h5_node *gb = fh_h5_node_find(second, outs[i].state);
        if (!ga || !gb)
            continue;
        const fh_h5_node *a = fh_h5_node_find(ga, outs[i].path);
        if (!a)
            continue;
        fh_h5_node *sa;
        fattn_status st;
        if ((st = fh_h5_node_group(call_audit_g, outs[i].state, &sa)) != FATTN_OK ||
            (st = audit_writes_tensor(sa, outs[i].name, a,
                                      fh_h5_node_find(gb, outs[i].path))) != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

/* --repeat of one call. */
static fattn_status repeat_call(fh_h5_node *call_audit_g, const fh_h5_node *first,
                                const fh_h5_node *again, int repeats, const char *where0)
{
    static const char *const states[] = {"forward", "save_ctx", "backward"};
    for (int i = 0; i < 3; i++) {
        const fh_h5_node *g = fh_h5_node_find(first, states[i]);
        if (!g)
            continue;
        fh_h5_node *sa;
        char where[320];
        snprintf(where, sizeof where, "%s/%s", where0, states[i]);
        fattn_status st;
        if ((st = fh_h5_node_group(call_audit_g, states[i], &sa)) != FATTN_OK ||
            (st = audit_walk(sa, g, again ? fh_h5_node_find(again, states[i]) : NULL, repeats,
                             where)) != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

/* One audit (`repeats` > 0: --repeat, else --check-writes) of a case's
 * calls: the case's, or each step of its schedule. */
static fattn_status audit_calls(fh_h5_node *audit, const fh_h5_node *first,
                                const fh_h5_node *other, int repeats)
{
    fh_h5_node *case_audit, *ca;
    fattn_status st = fh_h5_node_group(audit, first->name, &case_audit);
    if (st != FATTN_OK)
        return st;
    const fh_h5_node *sa = fh_h5_node_find(first, "steps");
    const fh_h5_node *sb = fh_h5_node_find(other, "steps");
    for (size_t k = 0; k < (sa ? sa->n_children : 1); k++) {
        const char *step = sa ? sa->children[k]->name : NULL;
        const fh_h5_node *a = sa ? sa->children[k] : first;
        const fh_h5_node *b = sa ? (sb ? fh_h5_node_find(sb, step) : NULL) : other;
        char where[300];
        snprintf(where, sizeof where, "%s%s%s", first->name, step ? "/steps/" : "",
                 step ? step : "");
        if ((st = call_audit(case_audit, step, &ca)) != FATTN_OK ||
            (st = repeats > 0 ? repeat_call(ca, a, b, repeats, where)
                              : writes_call(ca, a, b)) != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

/* --check-writes: compare the outputs of a run poisoned with 0xFF bytes and
 * one poisoned with 0xA5 bytes. */
static fattn_status audit_writes(fh_h5_node *audit, const fh_h5_node *first,
                                 const fh_h5_node *second)
{
    return audit_calls(audit, first, second, 0);
}

/* --repeat: compare one more run of a case with the first. */
static fattn_status audit_repeat(fh_h5_node *audit, const fh_h5_node *first,
                                 const fh_h5_node *again, int repeats)
{
    return audit_calls(audit, first, again, repeats);
}

/* Refuse the run before allocating when a case's estimated peak exceeds
 * --max-memory (case_mem.h). Cases are written to the file one at a time
 * (runner.h, fh_case_sink), so the largest case, not their sum, bounds
 * what a run holds; --repeat and --check-writes hold a second run of it
 * while the next one runs. */
static int check_max_memory(const cli_matrix *m, double max_mem, bool audited)
{
    for (size_t i = 0; i < m->n_sel; i++) {
        fh_case_mem cm;
        fh_case_memory(m->sel[i], &cm);
        double need = cm.peak + (audited ? cm.tree : 0.0);
        if (need > max_mem)
            return cli_fail("run", "case %s: estimated peak %.0f bytes exceeds --max-memory "
                            "%.0f", m->sel[i]->id, need, max_mem);
    }
    return FH_EXIT_OK;
}

/* --max-memory BYTES for run and replay: a positive byte count, default
 * half the RAM. */
static int parse_max_memory(const char *cmd, const char *s, double *out)
{
    return cli_max_memory_or_default(cmd, s, out);
}

/* Test-only engine variants (test_variants.h): only in a build with
 * -Dtesting=true; in any other FATTN_TEST_ENGINE_VARIANT means nothing. On
 * success *engine may be the variant wrapping the engine it was. */
static fattn_status run_test_variant(fattn_engine **engine, fh_h5_node *root)
{
#if FATTN_TESTING
    const char *variant = getenv("FATTN_TEST_ENGINE_VARIANT");
    if (!variant || !*variant)
        return FATTN_OK;
    fattn_engine *wrapped = NULL;
    fattn_status st = fh_test_variant_wrap(*engine, variant, &wrapped);
    if (st != FATTN_OK)
        return st;
    *engine = wrapped;
    fprintf(stderr, "fattn run: TEST-ONLY engine variant %s is active\n", cli_vis(variant));
    return fh_h5_node_set_string(root, "prov_test_variant", variant);
#else
    (void)engine;
    (void)root;
    return FATTN_OK;
#endif
}

static int cmp_spec_id(const void *x, const void *y)
{
    return strcmp((*(const fh_spec *const *)x)->id, (*(const fh_spec *const *)y)->id);
}

/* A recorded case as its progress line says it. */
static const char *case_result(const fh_h5_node *c)
{
    return fh_h5_node_attr(c, "skipped")             ? "skipped"
           : fh_h5_node_attr(c, "refused_status") ? "refused"
                                                      : "ok";
}

/* What fattn run does with each case. */
typedef struct run_plan {
    fh_run_opts opts;
    long repeat;
    bool check_writes, progress;
    fh_h5_node *audit; /* /audit, NULL without --repeat and --check-writes */
} run_plan;

/* One case: its run, then the repeats and the second-poison run it is
 * audited against (each freed as soon as compared). *node is the case's
 * tree, to be streamed out. */
static fattn_status run_one(const run_plan *p, const fh_spec *s, fh_h5_node **node)
{
    fh_h5_node *again = NULL, *second = NULL;
    fattn_status st = fh_run_case(s, &p->opts, node);
    if (st != FATTN_OK)
        goto out;
    for (long r = 1; r < p->repeat; r++) {
        if ((st = fh_run_case(s, &p->opts, &again)) != FATTN_OK ||
            (st = audit_repeat(p->audit, *node, again, (int)p->repeat)) != FATTN_OK)
            goto out;
        fh_h5_node_free(again);
        again = NULL;
    }
    if (p->check_writes) {
        fh_run_opts opts_b = p->opts;
        opts_b.poison = FH_POISON_PATTERN_B;
        if ((st = fh_run_case(s, &opts_b, &second)) != FATTN_OK ||
            (st = audit_writes(p->audit, *node, second)) != FATTN_OK)
            goto out;
    }
out:
    fh_h5_node_free(again);
    fh_h5_node_free(second);
    if (st != FATTN_OK) {
        fh_h5_node_free(*node);
        *node = NULL;
    }
    return st;
}

/* Every selected case, in id order, streamed to `out`; root holds the
 * provenance attributes. */
static int run_all(run_plan *p, const cli_matrix *m, const fh_h5_node *root, const char *out)
{
    fh_case_sink *k = NULL;
    fattn_status st = fh_case_sink_open(out, root, p->audit != NULL, &k);
    int rc = st != FATTN_OK ? cli_fail_at("run", out) : FH_EXIT_OK;
    size_t tensors = 0;
    for (size_t i = 0; i < m->n_sel && rc == FH_EXIT_OK; i++) {
        fh_h5_node *node = NULL;
        if ((st = run_one(p, m->sel[i], &node)) != FATTN_OK) {
            rc = cli_fail("run", "%s", fattn_last_error());
            break;
        }
        cli_progress_line(p->progress, i, m->n_sel, m->sel[i]->id, case_result(node));
        tensors += cli_count_datasets(node);
        st = fh_case_sink_put(k, node);
        fh_h5_node_free(node);
        if (st != FATTN_OK)
            rc = cli_fail_at("run", out);
    }
    if (rc == FH_EXIT_OK && (st = fh_case_sink_commit(k, p->audit)) != FATTN_OK)
        rc = cli_fail_at("run", out);
    if (rc == FH_EXIT_OK)
        printf("run: wrote %zu case%s (%zu tensor%s) to %s\n", m->n_sel, cli_s(m->n_sel),
               tensors, cli_s(tensors), cli_vis(out));
    fh_case_sink_free(k);
    return rc;
}

/* What merge needs to tell a complete set of shards of one matrix from an
 * incomplete or a mixed one (docs/run-files.md): `matrix_digest` and
 * `matrix_cases` always, `shard` ("I/N") for a --shard run. */
static fattn_status set_shard_attrs(fh_h5_node *root, const cli_matrix *m,
                                    const char *filter, bool sharded)
{
    char digest[FH_DIGEST_LEN], shard[48];
    size_t count = 0;
    fattn_status st;
    if ((st = cli_matrix_digest(m, filter, digest, &count)) != FATTN_OK ||
        (st = fh_h5_node_set_string(root, "matrix_digest", digest)) != FATTN_OK ||
        (st = fh_h5_node_set_int64(root, "matrix_cases", (int64_t)count)) != FATTN_OK)
        return st;
    snprintf(shard, sizeof shard, "%ld/%ld", m->shard_i, m->shard_n);
    return sharded ? fh_h5_node_set_string(root, "shard", shard) : FATTN_OK;
}

int fh_cmd_run(int argc, char **argv)
{
    const char *cases = NULL, *filter = NULL, *impl_s = "split", *backend = "auto";
    const char *until_s = "backward", *shard = NULL, *repeat_s = NULL, *maxmem_s = NULL;
    const char *out = NULL, *te_rules_s = NULL, *keyword = NULL;
    bool check_writes = false, progress = false, cp_reference = false;
    cli_args a = {argc, argv, 1, "run"};
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(run_help, stdout);
            return FH_EXIT_OK;
        } else if (cli_flag(&a, "--check-writes")) {
            check_writes = true;
        } else if (cli_flag(&a, "--progress")) {
            progress = true;
        } else if (cli_flag(&a, "--cp-reference")) {
            cp_reference = true;
        } else if ((r = cli_opt(&a, "--cases", &cases)) || (r = cli_opt(&a, "--filter", &filter)) ||
                   (r = cli_opt(&a, "--impl", &impl_s)) || (r = cli_opt(&a, "--backend", &backend)) ||
                   (r = cli_opt(&a, "--until", &until_s)) || (r = cli_opt(&a, "--shard", &shard)) ||
                   (r = cli_opt(&a, "--repeat", &repeat_s)) ||
                   (r = cli_opt(&a, "--max-memory", &maxmem_s)) || (r = cli_opt(&a, "-o", &out)) ||
                   (r = cli_opt(&a, "--te-rules", &te_rules_s)) ||
                   (r = cli_opt(&a, "-k", &keyword))) {
            if (r < 0)
                return cli_fail("run", "%s needs a value", argv[a.i]);
        } else {
            return cli_fail("run", "unknown argument '%s' (see fattn run --help)", argv[a.i]);
        }
    }
    if (!out)
        return cli_fail("run", "-o RUN.h5 is required");
    /* before any work: -o onto the case file would replace the matrix */
    const char *const run_inputs[] = {cases};
    if (fh_fileguard_check_distinct(out, run_inputs, 1) != FATTN_OK ||
        fh_fileguard_check_output(out) != FATTN_OK)
        return cli_fail("run", "-o %s", fattn_last_error());
    fh_impl impl;
    fh_state until;
    if (fh_impl_parse(impl_s, &impl) != FATTN_OK)
        return cli_fail("run", "--impl: %s", fattn_last_error());
    if (fh_state_parse(until_s, &until) != FATTN_OK || until < FH_STATE_FORWARD)
        return cli_fail("run", "--until '%s': expected forward, save_ctx or backward", until_s);
    long repeat = 1;
    if (repeat_s) {
        char *end = NULL;
        /* plain decimal: strtol would also take blanks and a sign */
        if (repeat_s[0] >= '0' && repeat_s[0] <= '9')
            repeat = strtol(repeat_s, &end, 10);
        if (!end || *end || repeat < 1 || repeat > 1000)
            return cli_fail("run", "--repeat '%s': expected 1..1000", repeat_s);
    }
    double max_mem;
    if (parse_max_memory("run", maxmem_s, &max_mem) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    unsigned te_rules;
    if (cli_parse_te_rules("run", te_rules_s, &te_rules) != FH_EXIT_OK)
        return FH_EXIT_ERROR;

    cli_matrix m;
    if (cli_matrix_load("run", cases, filter, shard, &m) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    if (keyword && cli_matrix_keep_keyword("run", &m, keyword, filter) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    if (check_max_memory(&m, max_mem, repeat > 1 || check_writes) != FH_EXIT_OK) {
        cli_matrix_free(&m);
        return FH_EXIT_ERROR;
    }
    /* the order the run file lists them in, so each can be written when done */
    if (m.n_sel > 1)
        qsort((void *)m.sel, m.n_sel, sizeof *m.sel, cmp_spec_id);
    fh_run_memory_policy();
    fattn_engine *engine = NULL;
    const char *backend_name = NULL;
    if (cli_engine_open("run", backend, &engine, &backend_name) != FH_EXIT_OK) {
        cli_matrix_free(&m);
        return FH_EXIT_ERROR;
    }
    run_plan p = {.opts = {.impl = impl, .engine = engine, .until = until,
                           .poison = FH_POISON_PATTERN, .te_rules = te_rules,
                           .cp_reference = cp_reference},
                  .repeat = repeat, .check_writes = check_writes,
                  .progress = cli_progress_wanted(progress)};
    fh_h5_node *root = NULL;
    int rc = FH_EXIT_OK;
    fattn_status st;
    if ((st = fh_h5_node_new_group("", &root)) != FATTN_OK ||
        ((repeat > 1 || check_writes) &&
         (st = fh_h5_node_new_group("audit", &p.audit)) != FATTN_OK) ||
        (st = run_test_variant(&engine, root)) != FATTN_OK)
        goto out;
    p.opts.engine = engine;
    if ((st = fh_runfile_set_provenance(root, fh_impl_name(impl), backend_name,
                                        engine)) != FATTN_OK ||
        (st = fh_h5_node_set_string(root, "te_rules",
                                    fattn_te_rules_name(te_rules))) != FATTN_OK ||
        (st = set_shard_attrs(root, &m, filter, shard != NULL)) != FATTN_OK)
        goto out;
    rc = run_all(&p, &m, root, out);
out:
    if (st != FATTN_OK)
        rc = cli_fail("run", "%s", fattn_last_error());
    fh_h5_node_free(p.audit);
    fh_h5_node_free(root);
    cli_engine_close(engine);
    cli_matrix_free(&m);
    return rc;
}

/* ---- replay ---------------------------------------------------------------- */

static const char replay_help[] =
    "usage: fattn replay RUN.h5 --from save_ctx|forward --impl legacy|split\n"
    "                    [--backend auto|cpu|cudnn] [--max-memory BYTES] [--progress]\n"
    "                    -o OUT.h5\n"
    "\n"
    "Resume every case of RUN.h5 from a stored state with the chosen front end.\n"
    "--from save_ctx loads the recorded backward-read set into that front end's backward\n"
    "(legacy: its ctx; split: its bwd args) and runs backward. --from forward (split only)\n"
    "loads inputs and forward outputs and runs setup_ctx and backward. OUT.h5 is a complete\n"
    "run file: states up to the boundary copied bit for bit, later ones recomputed; its\n"
    "root gains impl_forward, impl_backward and replayed_from. --max-memory refuses, before\n"
    "allocating, a case whose estimated peak is larger: RUN.h5 held whole (its datasets,\n"
    "its attributes' text, its private copy where $TMPDIR is in memory) and the case as\n"
    "fattn run estimates it, with the recorded save_ctx max_seqlen_q/kv where they exceed\n"
    "the spec's (default: half the RAM).\n"
    "--progress (the default when stderr is a terminal) prints `[3/63] CASE... ok` on\n"
    "stderr as each case is done.\n"
    "Exit 0 when every case replayed; 2 on a usage error, an invalid file or an errored case\n"
    "(then OUT.h5 is not written).\n";

/* The estimated peak of replaying recorded case `c` from `from`: the case's
 * (case_mem.h) for its spec, with sq and skv raised to the recorded
 * save_ctx's max_seqlen_q/kv (what the engine sizes backward by when
 * resuming there). 0 for a skipped or refused case, which allocates
 * nothing. */
static fattn_status replay_peak_bytes(const fh_h5_node *c, fh_state from, double *need,
                                      char *why, size_t why_n)
{
    *need = 0;
    why[0] = '\0';
    if (fh_h5_node_attr(c, "skipped") || fh_h5_node_attr(c, "refused_status"))
        return FATTN_OK;
    const fh_h5_attr *sa = fh_h5_node_attr(c, "spec");
    if (!sa || sa->kind != FH_H5_ATTR_STRING)
        return fattn_error(FATTN_E_INVALID_FILE, "case %s: no spec attribute", c->name);
    fh_spec spec;
    fattn_status st = fh_spec_parse_one(sa->s, strlen(sa->s), c->name, &spec);
    if (st != FATTN_OK)
        return st;
    const fh_h5_node *sc = fh_h5_node_find(c, "save_ctx");
    fh_ctx_record rec;
    if (from == FH_STATE_SAVE_CTX && sc && fh_ctx_record_read(sc, &rec) == FATTN_OK) {
        if (rec.max_seqlen_q > spec.sq || rec.max_seqlen_kv > spec.skv)
            snprintf(why, why_n, " (sized by save_ctx max_seqlen_q %lld, max_seqlen_kv %lld)",
                     (long long)rec.max_seqlen_q, (long long)rec.max_seqlen_kv);
        if (rec.max_seqlen_q > spec.sq)
            spec.sq = rec.max_seqlen_q;
        if (rec.max_seqlen_kv > spec.skv)
            spec.skv = rec.max_seqlen_kv;
    }
    fh_case_mem cm;
    fh_case_memory(&spec, &cm);
    *need = cm.peak;
    fh_spec_free(&spec);
    return FATTN_OK;
}

/* Every case of the run file within --max-memory, before any runs: replay
 * holds the file whole (`held`: its tree and the private copies of it in
 * memory) while it replays each case. */
static int replay_check_memory(const char *in, const fh_h5_node *cases, fh_state from,
                               double held, double max_mem)
{
    for (size_t i = 0; i < cases->n_children; i++) {
        const fh_h5_node *c = cases->children[i];
        double peak;
        char why[128];
        if (replay_peak_bytes(c, from, &peak, why, sizeof why) != FATTN_OK)
            return cli_fail_at("replay", in);
        if (held + peak > max_mem)
            return cli_fail("replay", "%s: case %s: estimated peak %.0f bytes (replaying the case "
                            "%.0f%s, the file held whole %.0f) exceeds --max-memory %.0f", in,
                            c->name, held + peak, peak, why, held, max_mem);
    }
    return FH_EXIT_OK;
}

/* The isolated child's part of the estimate: the file's attributes are
 * read only when a tree of them fits the bound (ctx, a double). */
static fattn_status read_metadata(const char *path, void *ctx)
{
    fh_h5_estimate e;
    fattn_status st = fh_runfile_check_size(path, *(const double *)ctx, false, &e);
    if (st != FATTN_OK)
        return st;
    fh_h5_node *n = NULL;
    fh_h5_read_opts o = {.allow_corrupt = true, .metadata_only = true,
                            .attr_text_max = fh_h5_estimate_attr_text(&e)};
    st = fh_h5_read_file(path, &o, &n);
    fh_h5_node_free(n);
    return st;
}

/* The estimate before the file is loaded: its structure, then its cases'
 * attributes read without their data (in the isolated child first), so
 * that a file too large to replay is refused before it is read whole. */
static int replay_check_memory_early(const char *in, fh_state from, double max_mem)
{
    fh_h5_node *meta = NULL;
    fh_h5_estimate e;
    if (fh_isolate_run(in, read_metadata, &max_mem, 0, 0) != FATTN_OK ||
        fh_runfile_check_size(in, max_mem, false, &e) != FATTN_OK)
        return cli_fail("replay", "%s", fattn_last_error());
    fh_h5_read_opts o = {.allow_corrupt = true, .metadata_only = true,
                            .attr_text_max = fh_h5_estimate_attr_text(&e)};
    if (fh_h5_read_file(in, &o, &meta) != FATTN_OK)
        return cli_fail("replay", "%s", fattn_last_error());
    const fh_h5_node *cases = fh_h5_node_find(meta, "cases");
    double held = fh_h5_estimate_tree(&e, true) + (double)fh_fileguard_pinned_memory();
    int rc = FH_EXIT_OK;
    if (cases)
        rc = replay_check_memory(in, cases, from, held, max_mem);
    else if (held > max_mem)
        rc = cli_fail("replay", "%s: estimated peak %.0f bytes (the file held whole) exceeds "
                      "--max-memory %.0f", in, held, max_mem);
    fh_h5_node_free(meta);
    return rc;
}

/* Every case of `src` replayed and streamed to `out`, one at a time. */
static int replay_all(const char *in, const fh_h5_node *cases, fh_state from,
                      const fh_run_opts *opts, const fh_h5_node *root, const char *out,
                      bool progress)
{
    fh_case_sink *k = NULL;
    fattn_status st = fh_case_sink_open(out, root, false, &k);
    int rc = st != FATTN_OK ? cli_fail_at("replay", out) : FH_EXIT_OK;
    size_t tensors = 0;
    for (size_t i = 0; rc == FH_EXIT_OK && i < cases->n_children; i++) {
        fh_h5_node *node = NULL;
        if ((st = fh_replay_case(cases->children[i], from, opts, &node)) != FATTN_OK) {
            rc = cli_fail_at("replay", in);
            break;
        }
        cli_progress_line(progress, i, cases->n_children, cases->children[i]->name,
                          case_result(node));
        tensors += cli_count_datasets(node);
        st = fh_case_sink_put(k, node);
        fh_h5_node_free(node);
        if (st != FATTN_OK)
            rc = cli_fail_at("replay", out);
    }
    if (rc == FH_EXIT_OK && (st = fh_case_sink_commit(k, NULL)) != FATTN_OK)
        rc = cli_fail_at("replay", out);
    if (rc == FH_EXIT_OK)
        printf("replay: wrote %zu case%s (%zu tensor%s) to %s\n", cases->n_children,
               cli_s(cases->n_children), tensors, cli_s(tensors), cli_vis(out));
    fh_case_sink_free(k);
    return rc;
}

int fh_cmd_replay(int argc, char **argv)
{
    const char *in = NULL, *from_s = NULL, *impl_s = NULL, *backend = "auto", *out = NULL;
    const char *maxmem_s = NULL;
    bool progress = false;
    cli_args a = {argc, argv, 1, "replay"};
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(replay_help, stdout);
            return FH_EXIT_OK;
        } else if (cli_flag(&a, "--progress")) {
            progress = true;
        } else if ((r = cli_opt(&a, "--from", &from_s)) || (r = cli_opt(&a, "--impl", &impl_s)) ||
                   (r = cli_opt(&a, "--backend", &backend)) ||
                   (r = cli_opt(&a, "--max-memory", &maxmem_s)) || (r = cli_opt(&a, "-o", &out))) {
            if (r < 0)
                return cli_fail("replay", "%s needs a value", argv[a.i]);
        } else if (argv[a.i][0] == '-' || in) {
            return cli_fail("replay", "unexpected argument '%s' (see fattn replay --help)",
                            argv[a.i]);
        } else {
            in = argv[a.i];
        }
    }
    if (!in || !from_s || !impl_s || !out)
        return cli_fail("replay", "RUN.h5, --from, --impl and -o are required");
    const char *const replay_inputs[] = {in};
    if (fh_fileguard_check_distinct(out, replay_inputs, 1) != FATTN_OK ||
        fh_fileguard_check_output(out) != FATTN_OK)
        return cli_fail("replay", "-o %s", fattn_last_error());
    fh_impl impl;
    fh_state from;
    double max_mem;
    if (fh_impl_parse(impl_s, &impl) != FATTN_OK)
        return cli_fail("replay", "--impl: %s", fattn_last_error());
    if (fh_state_parse(from_s, &from) != FATTN_OK ||
        (from != FH_STATE_SAVE_CTX && from != FH_STATE_FORWARD))
        return cli_fail("replay", "--from '%s': expected save_ctx or forward", from_s);
    if (fh_impl_resume_check(impl, from) != FATTN_OK)
        return cli_fail("replay", "%s", fattn_last_error());
    if (parse_max_memory("replay", maxmem_s, &max_mem) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    if (replay_check_memory_early(in, from, max_mem) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    fh_h5_node *src = NULL;
    fh_h5_estimate e;
    if (fh_runfile_load_bounded(in, max_mem, &src) != FATTN_OK ||
        fh_runfile_check_size(in, 0, true, &e) != FATTN_OK)
        return cli_fail("replay", "%s", fattn_last_error());
    const fh_h5_node *cases = fh_h5_node_find(src, "cases");
    assert(cases); /* a validated run file has /cases */
    double held = fh_h5_estimate_tree(&e, true) + (double)fh_fileguard_pinned_memory();
    if (replay_check_memory(in, cases, from, held, max_mem) != FH_EXIT_OK) {
        fh_h5_node_free(src);
        return FH_EXIT_ERROR;
    }
    fh_run_memory_policy();
    fattn_engine *engine = NULL;
    const char *backend_name = NULL;
    if (cli_engine_open("replay", backend, &engine, &backend_name) != FH_EXIT_OK) {
        fh_h5_node_free(src);
        return FH_EXIT_ERROR;
    }
    fh_run_opts opts = {.impl = impl, .engine = engine, .until = FH_STATE_BACKWARD,
                           .poison = FH_POISON_PATTERN};
    /* recomputed cases name the routing rules of the release the source recorded */
    const fh_h5_attr *src_rules = fh_h5_node_attr(src, "te_rules");
    if (src_rules && src_rules->kind == FH_H5_ATTR_STRING)
        (void)fattn_te_rules_parse(src_rules->s, &opts.te_rules);
    fh_h5_node *root = NULL;
    const fh_h5_attr *src_impl = fh_h5_node_attr(src, "impl");
    const char *impl_fwd = src_impl && src_impl->kind == FH_H5_ATTR_STRING ? src_impl->s : "?";
    int rc = FH_EXIT_OK;
    fattn_status st;
    /* the source's provenance, then what the replay changes */
    if ((st = fh_h5_node_new_group("", &root)) != FATTN_OK ||
        (st = fh_h5_node_copy_attrs(src, root)) != FATTN_OK ||
        (st = fh_runfile_set_provenance(root, fh_impl_name(impl), backend_name,
                                        engine)) != FATTN_OK ||
        (st = fh_h5_node_set_string(root, "impl_forward", impl_fwd)) != FATTN_OK ||
        (st = fh_h5_node_set_string(root, "impl_backward", fh_impl_name(impl))) != FATTN_OK ||
        (st = fh_h5_node_set_string(root, "replayed_from", fh_state_name(from))) != FATTN_OK)
        goto out;
    rc = replay_all(in, cases, from, &opts, root, out, cli_progress_wanted(progress));
out:
    if (st != FATTN_OK)
        rc = cli_fail("replay", "%s", fattn_last_error());
    fh_h5_node_free(root);
    fh_h5_node_free(src);
    cli_engine_close(engine);
    return rc;
}
