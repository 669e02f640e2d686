/* fattn cases, fattn inspect and fattn merge: the commands about a matrix
 * or a file as a whole. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "case.h"
#include "cli.h"
#include "digest.h"
#include "escape.h"
#include "fileguard.h"
#include "h5read.h"
#include "h5write.h"
#include "isolate.h"
#include "runfile.h"
#include "runner.h"
#include "te_rules.h"

/* ---- cases ----------------------------------------------------------------- */

static const char cases_help[] =
    "usage: fattn cases [--cases FILE] [--filter GLOB] [-k SUBSTRING]\n"
    "                   [--te-rules " FATTN_TE_RULES_CHOICES "] [--resolved --json]\n"
    "\n"
    "Print one line per case of the matrix: its id, a tab, a summary. The summary ends\n"
    "with \"[DPA <release> would not route here: rule <id>, <file>:<line>]\" for a case that\n"
    "TE's DotProductAttention would not send to FusedAttention under the --te-rules\n"
    "release's rules (default: the newest; FusedAttnFunc, what fattn verifies, still\n"
    "runs it).\n"
    "Without --cases, the default matrix compiled in from golden/default_cases.json.\n"
    "-k SUBSTRING keeps the cases whose id contains it (with --filter, both must hold).\n"
    "--resolved --json prints instead one JSON array: for each selected case its\n"
    "canonical spec and every value fattn derives from it (window, diagonal, scale,\n"
    "sequence tables, tensor shapes, the features the contrast compares; docs/cases.md).\n";

/* Prints the selected cases of `m`, as lines or as the resolved model. */
static int print_cases(const cli_matrix *m, bool resolved, unsigned te_rules)
{
    if (!resolved) {
        for (size_t i = 0; i < m->n_sel; i++) {
            char summary[512], note[FH_TE_NOTE_MAX];
            fh_spec_summary(m->sel[i], summary, sizeof summary);
            fh_case_te_note(m->sel[i], te_rules, note, sizeof note);
            printf("%s\t%s%s%s%s\n", cli_vis(m->sel[i]->id), cli_vis(summary), note[0] ? " [" : "", note,
                   note[0] ? "]" : "");
        }
        return FH_EXIT_OK;
    }
    /* a case at a time (the array fh_case_list_json makes, byte for
     * byte): memory stays that of the matrix, not of its resolved model */
    fputs("[", stdout);
    for (size_t i = 0; i < m->n_sel; i++) {
        char *line = NULL;
        if (fh_case_json_line(m->sel[i], &line) != FATTN_OK) {
            fputs("\n", stdout);
            return cli_fail("cases", "%s", fattn_last_error());
        }
        printf("%s%s\n", line, i + 1 < m->n_sel ? "," : "");
        free(line);
    }
    fputs(m->n_sel ? "]\n" : "\n]\n", stdout);
    if (fflush(stdout) != 0 || ferror(stdout))
        return cli_fail("cases", "stdout: cannot write the resolved cases");
    return FH_EXIT_OK;
}

int fh_cmd_cases(int argc, char **argv)
{
    const char *cases = NULL, *filter = NULL, *te_rules_s = NULL, *keyword = NULL;
    bool resolved = false, json = false;
    cli_args a = {argc, argv, 1, "cases"};
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(cases_help, stdout);
            return FH_EXIT_OK;
        } else if (cli_flag(&a, "--resolved")) {
            resolved = true;
        } else if (cli_flag(&a, "--json")) {
            json = true;
        } else if ((r = cli_opt(&a, "--cases", &cases)) || (r = cli_opt(&a, "--filter", &filter)) ||
                   (r = cli_opt(&a, "--te-rules", &te_rules_s)) ||
                   (r = cli_opt(&a, "-k", &keyword))) {
            if (r < 0)
                return cli_fail("cases", "%s needs a value", argv[a.i]);
        } else {
            return cli_fail("cases", "unknown argument '%s' (see fattn cases --help)", argv[a.i]);
        }
    }
    if (resolved != json)
        return cli_fail("cases", "--resolved and --json go together (the resolved model is "
                                 "printed only as JSON)");
    unsigned te_rules;
    if (cli_parse_te_rules("cases", te_rules_s, &te_rules) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    cli_matrix m;
    if (cli_matrix_load("cases", cases, filter, NULL, &m) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    if (keyword && cli_matrix_keep_keyword("cases", &m, keyword, filter) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    int rc = print_cases(&m, resolved, te_rules);
    cli_matrix_free(&m);
    return rc;
}

/* ---- matrix digest and shard, for inspect and merge ---------------------- */

static int cmp_node_name(const void *x, const void *y)
{
    return strcmp((*(const fh_h5_node *const *)x)->name, (*(const fh_h5_node *const *)y)->name);
}

/* "I/N" with 1 <= I <= N <= CLI_SHARD_MAX in canonical decimal: what run
 * writes, so "01/3" or "1/03" (another spelling of a shard) is refused. */
static bool parse_shard_attr(const char *v, long *i, long *n)
{
    char *end;
    if (*v < '1' || *v > '9' || strlen(v) > 24)
        return false;
    *i = strtol(v, &end, 10);
    if (*end != '/' || end[1] < '1' || end[1] > '9')
        return false;
    *n = strtol(end + 1, &end, 10);
    return !*end && *i >= 1 && *i <= *n && *n <= CLI_SHARD_MAX;
}

/* matrix_digest as run computes it (cli_matrix_digest: each case's
 * canonical spec and a newline, in id order), fed one case group at a time
 * from a file, its spec checked as inspect checks it. */
static fattn_status digest_case_spec(fh_digest_state *d, const char *path,
                                     const fh_h5_node *c)
{
    fh_spec spec;
    fattn_status st = fh_runfile_case_spec(path, c, &spec);
    if (st != FATTN_OK)
        return st;
    char *json = NULL;
    if ((st = fh_spec_canonical(&spec, &json)) != FATTN_OK ||
        (st = fh_digest_update(d, json, strlen(json))) != FATTN_OK)
        goto out;
    st = fh_digest_update(d, "\n", 1);
out:
    free(json);
    fh_spec_free(&spec);
    return st;
}

/* Whether a file's (or a merged set's) n cases are the whole matrix its
 * matrix_digest names, so that the digest can be recomputed from them: no
 * shard, and matrix_cases equal to n (a --partial merge holds fewer). */
static bool digest_checkable(const fh_h5_node *root, size_t n)
{
    const fh_h5_attr *md = fh_h5_node_attr(root, "matrix_digest");
    const fh_h5_attr *mc = fh_h5_node_attr(root, "matrix_cases");
    return md && !fh_h5_node_attr(root, "shard") && mc && mc->kind == FH_H5_ATTR_INT64 &&
           mc->i64[0] == (int64_t)n;
}

/* The recomputed digest against the recorded one. */
static fattn_status digest_compare(const char *what, fh_digest_state *d,
                                   const fh_h5_node *root)
{
    char got[FH_DIGEST_LEN];
    fattn_status st = fh_digest_final(d, got);
    if (st != FATTN_OK)
        return st;
    const fh_h5_attr *md = fh_h5_node_attr(root, "matrix_digest");
    if (md->kind != FH_H5_ATTR_STRING || strcmp(md->s, got) != 0)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: matrix_digest is %s, but the specs of its "
                           "cases digest to %s: not the matrix it names (a matrix_digest copied "
                           "from another run?)", what,
                           md->kind == FH_H5_ATTR_STRING ? md->s : "not a string", got);
    return FATTN_OK;
}

/* A file's shard and matrix_digest, as merge would trust them: a `shard`
 * must be canonical I/N; a file holding its whole matrix (digest_checkable)
 * must hold the cases its matrix_digest names. */
static fattn_status check_matrix_attrs(const char *path, const fh_h5_node *root)
{
    const fh_h5_attr *sh = fh_h5_node_attr(root, "shard");
    long si, sn;
    if (sh && (sh->kind != FH_H5_ATTR_STRING || !parse_shard_attr(sh->s, &si, &sn)))
        return fattn_error(FATTN_E_INVALID_FILE, "%s: root attribute 'shard' is not I/N (1 <= "
                           "I <= N, plain decimal without leading zeros)", path);
    const fh_h5_node *cases = fh_h5_node_find(root, "cases");
    size_t n = cases ? cases->n_children : 0;
    if (!digest_checkable(root, n))
        return FATTN_OK;
    const fh_h5_node **by_id = calloc(n ? n : 1, sizeof *by_id);
    if (!by_id)
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++)
        by_id[i] = cases->children[i];
    qsort((void *)by_id, n, sizeof *by_id, cmp_node_name);
    fh_digest_state d;
    fattn_status st = fh_digest_init(&d);
    if (st != FATTN_OK)
        goto out;
    for (size_t i = 0; i < n; i++)
        if ((st = digest_case_spec(&d, path, by_id[i])) != FATTN_OK)
            goto out;
    st = digest_compare(path, &d, root);
out:
    free(by_id);
    fh_digest_free(&d); /* nothing left to free after the final or a failed init */
    return st;
}

/* ---- inspect ----------------------------------------------------------------- */

static const char inspect_help[] =
    "usage: fattn inspect [--max-memory BYTES] FILE.h5\n"
    "\n"
    "Print the file's tree (groups, datasets with dtype, shape and digest, attributes),\n"
    "then validate it fully: schema, digests, every case's spec, input shapes against the\n"
    "spec, cu_seqlens monotone and in bounds, save_ctx attributes in range.\n"
    "A file without an HDF5 signature is `not an HDF5 file`. The file is read first in a\n"
    "forked child (a libhdf5 crash on a malformed file is exit 2) with a CPU limit of 60 s\n"
    "and 1 s more per 16 MiB; after 5 s fattn says it is still reading.\n"
    "inspect holds the whole file: --max-memory (default half the RAM) refuses, from its\n"
    "metadata and before any data is read, a file whose datasets hold more bytes.\n"
    "Exit 0 if valid, 2 at the first violation (named on stderr).\n";

static void print_attr(const fh_h5_attr *a, int depth)
{
    printf("%*s@%s = ", depth * 2, "", cli_vis(a->name));
    switch (a->kind) {
    case FH_H5_ATTR_STRING: printf("\"%s\"\n", cli_vis(a->s)); break;
    case FH_H5_ATTR_INT64: printf("%lld\n", (long long)a->i64[0]); break;
    case FH_H5_ATTR_FLOAT32: printf("%.9g (float32)\n", (double)a->f32); break;
    case FH_H5_ATTR_UINT8: printf("%u (uint8)\n", a->u8); break;
    case FH_H5_ATTR_INT64_PAIR:
        printf("[%lld, %lld]\n", (long long)a->i64[0], (long long)a->i64[1]);
        break;
    }
}

static void print_tree(const fh_h5_node *n, int depth)
{
    if (n->is_dataset) {
        printf("%*s%s  %s [", depth * 2, "", cli_vis(n->name), fattn_dtype_name(n->dtype));
        for (int i = 0; i < n->ndim; i++)
            printf("%s%lld", i ? "," : "", (long long)n->shape[i]);
        printf("]  %s\n", cli_vis(n->digest));
    } else {
        printf("%*s%s/\n", depth * 2, "", depth == 0 ? "" : cli_vis(n->name));
    }
    for (size_t i = 0; i < n->n_attrs; i++) {
        if (n->is_dataset && (!strcmp(n->attrs[i].name, "dtype") ||
                              !strcmp(n->attrs[i].name, "digest")))
            continue;
        print_attr(&n->attrs[i], depth + 1);
    }
    for (size_t i = 0; i < n->n_children; i++)
        print_tree(n->children[i], depth + 1);
}

/* The lenient read of the isolated child, after the size bound (ctx, a
 * double) was checked from the metadata. */
static fattn_status read_lenient(const char *path, void *ctx)
{
    fh_h5_estimate e;
    fattn_status st = fh_runfile_check_size(path, *(const double *)ctx, true, &e);
    if (st != FATTN_OK)
        return st;
    fh_h5_node *root = NULL;
    fh_h5_read_opts lenient = {.allow_corrupt = true,
                                  .attr_text_max = fh_h5_estimate_attr_text(&e)};
    st = fh_h5_read_file(path, &lenient, &root);
    fh_h5_node_free(root);
    return st;
}

/* HDF5's signature: at offset 0, or after a user block at 512, 1024, 2048...
 * bytes (the places libhdf5 looks). */
static const unsigned char hdf5_signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

/* false: the file at path opens as a regular file and holds no HDF5
 * signature where libhdf5 looks, so it is not an HDF5 file (what cannot be
 * opened, a FIFO included, is left to the reader, which names the cause). */
static bool maybe_hdf5(const char *path)
{
    int fd;
    if (fh_fileguard_open_input(path, &fd) != FATTN_OK)
        return true;
    bool found = false, io_error = false;
    for (off_t off = 0; !found && off <= ((off_t)1 << 40); off = off ? off * 2 : 512) {
        unsigned char sig[8];
        ssize_t n = pread(fd, sig, sizeof sig, off);
        io_error = n < 0;
        if (n != (ssize_t)sizeof sig)
            break;
        found = memcmp(sig, hdf5_signature, sizeof sig) == 0;
    }
    close(fd);
    return found || io_error;
}

int fh_cmd_inspect(int argc, char **argv)
{
    const char *path = NULL, *maxmem_s = NULL;
    cli_args a = {argc, argv, 1, "inspect"};
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(inspect_help, stdout);
            return FH_EXIT_OK;
        } else if ((r = cli_opt(&a, "--max-memory", &maxmem_s))) {
            if (r < 0)
                return cli_fail("inspect", "--max-memory needs a value");
        } else if (argv[a.i][0] == '-' || path) {
            return cli_fail("inspect", "unexpected argument '%s' (see fattn inspect --help)",
                            argv[a.i]);
        } else {
            path = argv[a.i];
        }
    }
    if (!path)
        return cli_fail("inspect", "FILE.h5 is required");
    double max_mem;
    if (cli_max_memory_or_default("inspect", maxmem_s, &max_mem) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    /* Read leniently first so a corrupt dataset is still shown in the tree,
     * then validate strictly. */
    fh_h5_node *root = NULL;
    /* The same lenient read in a forked child first (isolate.h), so a crash
     * inside libhdf5 on a malformed file is exit 2, not fattn's death; the
     * estimate before it, in the child and here. */
    if (!maybe_hdf5(path))
        return cli_fail("inspect", "%s: not an HDF5 file (no HDF5 signature at offset 0, "
                        "512, 1024, ...: fattn inspect reads run files)", path);
    fh_h5_estimate e;
    if (fh_isolate_run(path, read_lenient, &max_mem, 0, 0) != FATTN_OK ||
        fh_runfile_check_size(path, max_mem, true, &e) != FATTN_OK)
        return cli_fail("inspect", "%s", fattn_last_error());
    fh_h5_read_opts lenient = {.allow_corrupt = true,
                                  .attr_text_max = fh_h5_estimate_attr_text(&e)};
    if (fh_h5_read_file(path, &lenient, &root) != FATTN_OK)
        return cli_fail("inspect", "%s", fattn_last_error());
    print_tree(root, 0);
    fflush(stdout);
    fh_h5_node_free(root);
    if (fh_runfile_load_bounded(path, max_mem, &root) != FATTN_OK)
        return cli_fail("inspect", "%s", fattn_last_error());
    fattn_status st = check_matrix_attrs(path, root);
    fh_h5_node_free(root);
    if (st != FATTN_OK)
        return cli_fail("inspect", "%s", fattn_last_error());
    fprintf(stderr, "fattn inspect: %s: valid\n", cli_vis(path));
    return FH_EXIT_OK;
}

static const char merge_help[] =
    "usage: fattn merge [--partial] [--progress] [--max-memory BYTES] -o OUT.h5 IN.h5...\n"
    "\n"
    "Join run files of disjoint shards of one matrix (fattn run --shard I/N) into one run\n"
    "file, bitwise equal under `fattn diff` to an unsharded run. Every input must carry the\n"
    "same provenance apart from created_utc and shard, and no case may appear twice.\n"
    "Shard files record `shard` (I/N) and `matrix_digest`: a mixed set (shards of another\n"
    "matrix or another N, sharded and unsharded files, a shard twice) is refused, and so\n"
    "is an incomplete set (the missing shards are named) unless --partial. Unsharded run\n"
    "files of disjoint cases merge as before. OUT.h5 is replaced atomically; exit 2 on any\n"
    "conflict (nothing written). --progress (the default when stderr is a terminal) prints\n"
    "`[3/63] CASE... ok` on stderr as each case is written. Each input is held whole while\n"
    "it is checked: --max-memory (default half the RAM) refuses, from its metadata and\n"
    "before any data is read, an input whose datasets hold more bytes.\n";

/* Root attributes that must agree between shards (all but created_utc). */
static int same_attr(const fh_h5_attr *a, const fh_h5_attr *b)
{
    if (a->kind != b->kind)
        return 0;
    switch (a->kind) {
    case FH_H5_ATTR_STRING: return !strcmp(a->s, b->s);
    case FH_H5_ATTR_FLOAT32: return a->f32 == b->f32;
    case FH_H5_ATTR_UINT8: return a->u8 == b->u8;
    default: return a->i64[0] == b->i64[0] && a->i64[1] == b->i64[1];
    }
}

/* Merging case by case. Each input is read and validated whole by the
 * isolated reader, one input at a time, and its cases are written to a
 * scratch run file of its own beside the output (".fattn-merge-<pid>-<i>",
 * fattn's own file, so reading it back needs no second validation). The
 * output is then written in id order from the scratch files, one case at a
 * time: merge holds the largest input plus one case, not the merged file.
 * The bytes are those of the merged tree written at once. */
typedef struct merge_case {
    char *id;
    int file; /* index of the input (and its scratch file) */
} merge_case;

typedef struct merge_state {
    const char *out;
    const char **ins;
    int n_in;
    fh_h5_node *root; /* the first input's root attributes */
    char **scratch;      /* per input; committed ones exist on disk */
    int *slot;           /* per input: its scratch file's signal-cleanup slot */
    int n_scratch;
    merge_case *cases;
    size_t n_cases, cap_cases;
    long *shard_i, *shard_n; /* per input, from its `shard` root attribute; 0: none */
    bool partial;            /* --partial: an incomplete set of shards is merged */
    bool progress;           /* a progress line per case written */
    bool mixed_matrices;     /* unsharded inputs of different matrix_digest */
    double max_mem;          /* --max-memory: the bytes an input may hold */
} merge_state;

static int cmp_merge_case(const void *x, const void *y)
{
    return strcmp(((const merge_case *)x)->id, ((const merge_case *)y)->id);
}

/* Root attributes each shard of one run has its own value of. */
static bool per_shard_attr(const char *name)
{
    return !strcmp(name, "created_utc") || !strcmp(name, "shard");
}

/* One root attribute onto dst, as it is. */
static fattn_status put_attr(fh_h5_node *dst, const fh_h5_attr *a)
{
    switch (a->kind) {
    case FH_H5_ATTR_STRING: return fh_h5_node_set_string(dst, a->name, a->s);
    case FH_H5_ATTR_INT64: return fh_h5_node_set_int64(dst, a->name, a->i64[0]);
    case FH_H5_ATTR_FLOAT32: return fh_h5_node_set_float32(dst, a->name, a->f32);
    case FH_H5_ATTR_UINT8: return fh_h5_node_set_uint8(dst, a->name, a->u8);
    default: return fh_h5_node_set_int64_pair(dst, a->name, a->i64);
    }
}

/* Input f's `shard` against the inputs before it: all shards or none, of
 * one N, no shard twice. */
static int merge_check_shard(merge_state *s, int f, const fh_h5_node *src)
{
    const fh_h5_attr *a = fh_h5_node_attr(src, "shard");
    if (a && (a->kind != FH_H5_ATTR_STRING ||
              !parse_shard_attr(a->s, &s->shard_i[f], &s->shard_n[f])))
        return cli_fail("merge", "%s: root attribute 'shard' is not I/N", s->ins[f]);
    if (f == 0)
        return FH_EXIT_OK;
    int sh = s->shard_n[f] ? f : 0, un = s->shard_n[f] ? 0 : f;
    if (!s->shard_n[f] != !s->shard_n[0])
        return cli_fail("merge", "mixed set: %s is shard %ld/%ld, %s is not a shard",
                        s->ins[sh], s->shard_i[sh], s->shard_n[sh], s->ins[un]);
    if (s->shard_n[f] != s->shard_n[0])
        return cli_fail("merge", "mixed set: %s is shard %ld/%ld, %s is shard %ld/%ld: not "
                        "shards of one run", s->ins[f], s->shard_i[f], s->shard_n[f],
                        s->ins[0], s->shard_i[0], s->shard_n[0]);
    for (int g = 0; s->shard_n[f] && g < f; g++)
        if (s->shard_i[g] == s->shard_i[f])
            return cli_fail("merge", "%s and %s are both shard %ld/%ld", s->ins[g], s->ins[f],
                            s->shard_i[f], s->shard_n[f]);
    return FH_EXIT_OK;
}

/* Input f's root attributes against the first input's (all but those of
 * each shard); the first input's become the output's. */
static int merge_check_root(merge_state *s, int f, const fh_h5_node *src)
{
    int rc = merge_check_shard(s, f, src);
    if (rc != FH_EXIT_OK)
        return rc;
    if (f == 0) {
        fattn_status st = fh_h5_node_new_group("", &s->root);
        if (st != FATTN_OK)
            return cli_fail("merge", "%s", fattn_last_error());
        for (size_t i = 0; i < src->n_attrs; i++)
            if (strcmp(src->attrs[i].name, "shard") != 0 &&
                (st = put_attr(s->root, &src->attrs[i])) != FATTN_OK)
                return cli_fail("merge", "%s", fattn_last_error());
        return FH_EXIT_OK;
    }
    size_t n = 0;
    for (size_t i = 0; i < src->n_attrs; i++) {
        const fh_h5_attr *x = &src->attrs[i];
        if (per_shard_attr(x->name))
            continue;
        n++;
        const fh_h5_attr *y = fh_h5_node_attr(s->root, x->name);
        bool digest = !strcmp(x->name, "matrix_digest") || !strcmp(x->name, "matrix_cases");
        /* unsharded runs of disjoint cases (two filters) merge as they
         * always did: their union is no one matrix, so it gets no digest */
        if (y && digest && !s->shard_n[0]) {
            s->mixed_matrices |= !same_attr(x, y);
            continue;
        }
        if (y && !same_attr(x, y) && digest)
            return cli_fail("merge", "mixed set: %s and %s are shards of different matrices "
                            "(%s differs)", s->ins[f], s->ins[0], x->name);
        if (!y || !same_attr(x, y))
            return cli_fail("merge", "%s: root attribute '%s' differs from %s: not shards of "
                            "one run", s->ins[f], x->name, s->ins[0]);
    }
    if (n + (fh_h5_node_attr(s->root, "created_utc") != NULL) != s->root->n_attrs)
        return cli_fail("merge", "%s: root attributes differ from %s", s->ins[f], s->ins[0]);
    return FH_EXIT_OK;
}

static int cmp_long(const void *x, const void *y)
{
    long a = *(const long *)x, b = *(const long *)y;
    return (a > b) - (a < b);
}

/* A set of shards must be all of them, unless --partial: the missing ones
 * are named (the first 10 and how many more). */
static int merge_check_complete(merge_state *s)
{
    long n = s->shard_n[0];
    const fh_h5_attr *mc = s->root ? fh_h5_node_attr(s->root, "matrix_cases") : NULL;
    /* all N shards of one digest, yet cases missing: shards of two listings
     * of one matrix, dealt differently */
    if (n && (long)s->n_in == n && mc && mc->kind == FH_H5_ATTR_INT64 &&
        mc->i64[0] != (int64_t)s->n_cases)
        return cli_fail("merge", "mixed set: the %ld shards hold %zu of the matrix's %lld cases "
                        "(shards of the matrix listed in different orders?)", n, s->n_cases,
                        (long long)mc->i64[0]);
    if (!n || (long)s->n_in == n)
        return FH_EXIT_OK;
    long *have = malloc((size_t)s->n_in * sizeof *have);
    if (!have)
        return cli_fail("merge", "out of memory");
    memcpy(have, s->shard_i, (size_t)s->n_in * sizeof *have);
    qsort(have, (size_t)s->n_in, sizeof *have, cmp_long);
    char list[512] = "";
    size_t used = 0;
    long shown = 0, next = 1;
    for (int k = 0; k <= s->n_in; k++) {
        long upto = k < s->n_in ? have[k] : n + 1;
        for (; next < upto && shown < 10; next++, shown++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%ld/%ld",
                                     shown ? ", " : "", next, n);
        next = upto + 1;
    }
    free(have);
    long missing = n - (long)s->n_in;
    char more[64] = "";
    if (missing > shown)
        snprintf(more, sizeof more, " and %ld more", missing - shown);
    if (s->partial) {
        fprintf(stderr, "fattn merge: --partial: %ld of %ld shards given; missing: %s%s\n",
                (long)s->n_in, n, list, more);
        return FH_EXIT_OK;
    }
    return cli_fail("merge", "incomplete set: %ld of %ld shards given; missing: %s%s (--partial "
                    "merges them anyway)", (long)s->n_in, n, list, more);
}

/* Input f's cases: names recorded (a duplicate id is a conflict) and the
 * trees written to its scratch file. */
static int merge_spill(merge_state *s, int f, const fh_h5_node *scases)
{
    for (size_t i = 0; i < scases->n_children; i++) {
        const char *id = scases->children[i]->name;
        for (size_t j = 0; j < s->n_cases; j++)
            if (!strcmp(s->cases[j].id, id))
                return cli_fail("merge", "%s: case %s is also in an earlier input", s->ins[f],
                                id);
        if (s->n_cases == s->cap_cases) {
            size_t cap = s->cap_cases ? 2 * s->cap_cases : 64;
            merge_case *c = realloc(s->cases, cap * sizeof *c);
            if (!c)
                return cli_fail("merge", "out of memory");
            s->cases = c;
            s->cap_cases = cap;
        }
        if (!(s->cases[s->n_cases].id = fh_runtree_strdup(id)))
            return cli_fail("merge", "out of memory");
        s->cases[s->n_cases++].file = f;
    }
    const char *slash = strrchr(s->out, '/');
    int dirlen = slash ? (int)(slash - s->out) + 1 : 0;
    size_t cap = (size_t)dirlen + 64;
    if (!(s->scratch[f] = malloc(cap)))
        return cli_fail("merge", "out of memory");
    snprintf(s->scratch[f], cap, "%.*s.fattn-merge-%ld-%d", dirlen, s->out, (long)getpid(), f);
    fh_h5_writer *w = NULL;
    fattn_status st = fh_h5_writer_open(s->scratch[f], &w);
    if (st != FATTN_OK)
        goto out;
    for (size_t i = 0; i < scases->n_children; i++)
        if ((st = fh_h5_writer_put(w, "/cases", scases->children[i])) != FATTN_OK)
            goto out;
    st = fh_h5_writer_commit(w);
    w = NULL; /* committed or, on failure, discarded by the commit */
    if (st != FATTN_OK)
        goto out;
    s->slot[f] = fh_fileguard_scratch_register(s->scratch[f]);
    s->n_scratch = f + 1;
out:
    fh_h5_writer_abort(w);
    return st != FATTN_OK ? cli_fail_at("merge", s->out) : FH_EXIT_OK;
}

/* The output: root attributes, then every case in id order, each read back
 * from its input's scratch file and written. */
static int merge_write(merge_state *s)
{
    qsort(s->cases, s->n_cases, sizeof *s->cases, cmp_merge_case);
    fh_h5_reader **r = calloc((size_t)s->n_in, sizeof *r);
    fh_h5_writer *w = NULL;
    fh_h5_node *root = s->root, *filtered = NULL, *c = NULL, *empty = NULL;
    size_t tensors = 0;
    fh_digest_state d = {0};
    bool check = !s->mixed_matrices && digest_checkable(s->root, s->n_cases);
    bool digest_bad = false;
    fattn_status st = r ? fh_h5_writer_open(s->out, &w)
                        : fattn_error(FATTN_E_NOMEM, "out of memory");
    if (st != FATTN_OK)
        goto out;
    if (s->mixed_matrices) {
        if ((st = fh_h5_node_new_group("", &filtered)) != FATTN_OK)
            goto out;
        for (size_t i = 0; i < s->root->n_attrs; i++)
            if (strcmp(s->root->attrs[i].name, "matrix_digest") != 0 &&
                strcmp(s->root->attrs[i].name, "matrix_cases") != 0 &&
                (st = put_attr(filtered, &s->root->attrs[i])) != FATTN_OK)
                goto out;
        root = filtered;
    }
    if ((st = fh_h5_writer_put(w, "/", root)) != FATTN_OK)
        goto out;
    /* a whole matrix: its matrix_digest recomputed from the merged cases'
     * specs, so a shard of another matrix carrying a copied digest is
     * refused (before the commit: nothing is written) */
    if (check && (st = fh_digest_init(&d)) != FATTN_OK)
        goto out;
    for (size_t i = 0; i < s->n_cases; i++) {
        int f = s->cases[i].file;
        char path[FH_SPEC_ID_MAX + 16];
        snprintf(path, sizeof path, "/cases/%s", s->cases[i].id);
        if ((!r[f] && (st = fh_h5_reader_open(s->scratch[f], &r[f])) != FATTN_OK) ||
            (st = fh_h5_reader_read(r[f], path, NULL, &c)) != FATTN_OK)
            goto out;
        tensors += cli_count_datasets(c);
        if (check && (st = digest_case_spec(&d, s->ins[f], c)) != FATTN_OK) {
            digest_bad = true;
            goto out;
        }
        if ((st = fh_h5_writer_put(w, "/cases", c)) != FATTN_OK)
            goto out;
        cli_progress_line(s->progress, i, s->n_cases, s->cases[i].id, "ok");
        fh_h5_node_free(c);
        c = NULL;
    }
    if (!s->n_cases && ((st = fh_h5_node_new_group("cases", &empty)) != FATTN_OK ||
                        (st = fh_h5_writer_put(w, "/", empty)) != FATTN_OK))
        goto out;
    /* every case is read: the inputs are closed before the commit */
    for (int f = 0; f < s->n_in; f++) {
        fh_h5_reader_close(r[f]);
        r[f] = NULL;
    }
    if (check && (st = digest_compare("the merged inputs", &d, s->root)) != FATTN_OK) {
        digest_bad = true;
        goto out;
    }
    st = fh_h5_writer_commit(w);
    w = NULL; /* committed or, on failure, discarded by the commit */
out:
    fh_h5_node_free(c);
    fh_h5_node_free(empty);
    fh_h5_node_free(filtered);
    for (int f = 0; r && f < s->n_in; f++)
        fh_h5_reader_close(r[f]);
    free(r);
    fh_digest_free(&d); /* nothing left to free after the final or a failed init */
    fh_h5_writer_abort(w);
    if (digest_bad)
        return cli_fail("merge", "mixed set: %s", fattn_last_error());
    if (st != FATTN_OK)
        return cli_fail_at("merge", s->out);
    printf("merge: wrote %zu case%s (%zu tensor%s) to %s\n", s->n_cases, cli_s(s->n_cases),
           tensors, cli_s(tensors), cli_vis(s->out));
    return FH_EXIT_OK;
}

/* Every input in turn: validated, checked against the first, spilled. */
static int merge_inputs(merge_state *s)
{
    for (int f = 0; f < s->n_in; f++) {
        fh_h5_node *src = NULL;
        if (fh_runfile_load_bounded(s->ins[f], s->max_mem, &src) != FATTN_OK)
            return cli_fail("merge", "%s", fattn_last_error());
        int rc = FH_EXIT_OK;
        if (fh_h5_node_find(src, "audit") || fh_h5_node_attr(src, "replayed_from"))
            rc = cli_fail("merge", "%s: audit results and replays are not merged", s->ins[f]);
        if (rc == FH_EXIT_OK)
            rc = merge_check_root(s, f, src);
        if (rc == FH_EXIT_OK)
            rc = merge_spill(s, f, fh_h5_node_find(src, "cases"));
        fh_h5_node_free(src);
        /* its cases are in merge's own scratch file now: its private copy
         * goes, so that one input's copy exists at a time */
        fh_fileguard_unpin(s->ins[f]);
        if (rc != FH_EXIT_OK)
            return rc;
    }
    return merge_check_complete(s);
}

static void merge_state_free(merge_state *s)
{
    for (int f = 0; s->scratch && f < s->n_in; f++) {
        if (f < s->n_scratch) {
            fh_fileguard_scratch_unregister(s->slot[f]);
            unlink(s->scratch[f]);
        }
        free(s->scratch[f]);
    }
    free(s->scratch);
    free(s->slot);
    for (size_t i = 0; i < s->n_cases; i++)
        free(s->cases[i].id);
    free(s->cases);
    free(s->shard_i);
    free(s->shard_n);
    fh_h5_node_free(s->root);
}

int fh_cmd_merge(int argc, char **argv)
{
    const char *out = NULL, *maxmem_s = NULL;
    const char **ins = calloc((size_t)argc, sizeof *ins);
    int n_in = 0;
    bool partial = false, progress = false;
    cli_args a = {argc, argv, 1, "merge"};
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(merge_help, stdout);
            free(ins);
            return FH_EXIT_OK;
        } else if (cli_flag(&a, "--partial")) {
            partial = true;
        } else if (cli_flag(&a, "--progress")) {
            progress = true;
        } else if ((r = cli_opt(&a, "-o", &out)) || (r = cli_opt(&a, "--max-memory", &maxmem_s))) {
            if (r < 0) {
                free(ins);
                return cli_fail("merge", "%s needs a value", argv[a.i]);
            }
        } else if (argv[a.i][0] == '-') {
            free(ins);
            return cli_fail("merge", "unknown argument '%s' (see fattn merge --help)", argv[a.i]);
        } else {
            ins[n_in++] = argv[a.i];
        }
    }
    if (!out || n_in == 0) {
        free(ins);
        return cli_fail("merge", "-o OUT.h5 and at least one IN.h5 are required");
    }
    double max_mem;
    if (cli_max_memory_or_default("merge", maxmem_s, &max_mem) != FH_EXIT_OK) {
        free(ins);
        return FH_EXIT_ERROR;
    }
    /* The output must be none of the inputs, refused before reading any. */
    if (fh_fileguard_check_distinct(out, ins, (size_t)n_in) != FATTN_OK ||
        fh_fileguard_check_output(out) != FATTN_OK) {
        free(ins);
        return cli_fail("merge", "-o %s", fattn_last_error());
    }
    fh_run_memory_policy();
    merge_state s = {.out = out, .ins = ins, .n_in = n_in, .partial = partial,
                     .progress = cli_progress_wanted(progress), .max_mem = max_mem};
    s.scratch = calloc((size_t)n_in, sizeof *s.scratch);
    s.slot = calloc((size_t)n_in, sizeof *s.slot);
    s.shard_i = calloc((size_t)n_in, sizeof *s.shard_i);
    s.shard_n = calloc((size_t)n_in, sizeof *s.shard_n);
    int rc = s.scratch && s.slot && s.shard_i && s.shard_n ? FH_EXIT_OK
                                                 : cli_fail("merge", "out of memory");
    if (rc == FH_EXIT_OK)
        rc = merge_inputs(&s);
    if (rc == FH_EXIT_OK)
        rc = merge_write(&s);
    merge_state_free(&s);
    free(ins);
    return rc;
}

/* ---- write-tree ----------------------------------------------------------- */

static const char write_tree_help[] =
    "usage: fattn write-tree MANIFEST.json DATA.bin -o OUT.h5\n"
    "\n"
    "Write the tree MANIFEST.json describes, its tensors' bytes taken from DATA.bin, as a\n"
    "file of fattn's run-file format: sorted order, timestamps off, libver bounds\n"
    "V18..V110, dtype and digest attributes on every dataset, OUT.h5 replaced atomically.\n"
    "For tools in other languages (tools/python/fattn_runfile.py); the manifest format is\n"
    "in docs/run-files.md. Exit 0 written, 2 usage error or a bad manifest (nothing\n"
    "written).\n";

/* The whole of a file, malloc'd (NUL-terminated for the JSON). */
static fattn_status read_all(const char *path, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    /* Regular files only: a FIFO would block, a device never end. */
    int fd;
    fattn_status ost = fh_fileguard_open_input(path, &fd);
    if (ost != FATTN_OK)
        return ost;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return fattn_error(FATTN_E_IO, "%s: cannot open", path);
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    fattn_status st = FATTN_OK;
    if (!buf) {
        st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
        goto out;
    }
    for (;;) {
        if (n == cap) {
            char *p = cap < ((size_t)1 << 40) ? realloc(buf, 2 * cap + 1) : NULL;
            if (!p) {
                st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
                goto out;
            }
            buf = p;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                st = fattn_error(FATTN_E_IO, "%s: read error", path);
                goto out;
            }
            break;
        }
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
out:
    fclose(f);
    if (st != FATTN_OK)
        free(buf);
    return st;
}

int fh_cmd_write_tree(int argc, char **argv)
{
    const char *out = NULL, *paths[2] = {NULL, NULL};
    int n_paths = 0;
    cli_args a = {argc, argv, 1, "write-tree"};
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(write_tree_help, stdout);
            return FH_EXIT_OK;
        } else if ((r = cli_opt(&a, "-o", &out))) {
            if (r < 0)
                return cli_fail("write-tree", "-o needs a value");
        } else if (argv[a.i][0] == '-' || n_paths == 2) {
            return cli_fail("write-tree", "unexpected argument '%s' (see fattn write-tree --help)",
                            argv[a.i]);
        } else {
            paths[n_paths++] = argv[a.i];
        }
    }
    if (!out || n_paths != 2)
        return cli_fail("write-tree", "MANIFEST.json, DATA.bin and -o OUT.h5 are required");
    if (fh_fileguard_check_distinct(out, paths, 2) != FATTN_OK ||
        fh_fileguard_check_output(out) != FATTN_OK)
        return cli_fail("write-tree", "-o %s", fattn_last_error());
    char *json = NULL, *blob = NULL;
    size_t json_len = 0, blob_len = 0;
    fh_h5_node *tree = NULL;
    fattn_status st;
    if ((st = read_all(paths[0], &json, &json_len)) != FATTN_OK ||
        (st = read_all(paths[1], &blob, &blob_len)) != FATTN_OK)
        goto out;
    if ((st = fh_runtree_from_manifest(json, json_len, blob, blob_len, &tree)) != FATTN_OK) {
        st = fattn_error(st, "%s: %s", paths[0], fattn_last_error());
        goto out;
    }
    st = fh_h5_write_file(out, tree, NULL, NULL);
out:
    fh_h5_node_free(tree);
    free(json);
    free(blob);
    if (st != FATTN_OK)
        return cli_fail("write-tree", "%s", fattn_last_error());
    return FH_EXIT_OK;
}
