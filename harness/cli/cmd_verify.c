/* fattn verify and fattn golden: the command lines over verify.h, and
 * verify's table, verdict and JSON report (docs/verify.md). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>

#include "fattn/cudnn.h"
#include "fattn/engine.h"
#include "fattn_config.h"
#include "fattn_git_rev.h"

#include "cli.h"
#include "cmd_verify.h"
#include "escape.h"
#include "compare.h"
#include "contrast.h"
#include "fileguard.h"
#include "runfile.h"
#include "runner.h"
#include "te_rules.h"
#include "verify.h"

/* Bitwise checks need a backward that repeats bitwise: engines that can
 * force the deterministic backward do so for verify and golden. */
static const fattn_engine_options deterministic_bwd = {.force_deterministic_bwd = true};

static const char verify_help[] =
    "usage: fattn verify [--cases FILE] [--filter GLOB] [--backend auto|cpu|cudnn]\n"
    "                    [-k SUBSTRING] [--fixtures DIR] [--json FILE] [--junit FILE]\n"
    "                    [--strict] [-x|--exitfirst] [--progress] [--te-rules " FATTN_TE_RULES_CHOICES "]\n"
    "                    [-j|--jobs N] [--against [REPO@]REV] [--max-memory BYTES]\n"
    "\n"
    "The main job: is the refactor behaviour-neutral? For every case of the matrix, on one\n"
    "engine: legacy vs split bitwise for every state; cross-wired replays (legacy's save_ctx\n"
    "into split's backward, split's into legacy's, split's forward into setup_ctx) bitwise\n"
    "equal to the straight runs; each case run twice, bitwise; and everything against the\n"
    "goldens of this platform (DIR/<platform key>.h5), bitwise, inputs and save_ctx through\n"
    "their digests. Prints a table (case, states, tensors, result) and one verdict line.\n"
    "--fixtures defaults to the fixtures/ of the source tree fattn was built from:\n"
    "  " FATTN_SOURCE_ROOT "/fixtures\n"
    "-k SUBSTRING selects the cases whose id contains SUBSTRING (with --filter, both\n"
    "must hold; none selected is exit 2). -x/--exitfirst stops after the first case that\n"
    "differs or errors, and prints the report of the cases run so far.\n"
    "--progress (the default when stderr is a terminal) prints `[17/63] CASE... ok` on\n"
    "stderr as each case is done.\n"
    "--junit FILE writes JUnit XML for CI dashboards: one testcase per check of each case\n"
    "(classname fattn.verify.CASE, name the check; a failure element with its first\n"
    "differences), and one named `case` for a skipped or errored case; FILE = - writes it\n"
    "to stdout.\n"
    "--json FILE writes the report as JSON (schema fattn-verify/1); FILE = - writes it to\n"
    "stdout, and the table and verdict to stderr.\n"
    "Exit 0 behaviour-neutral, 1 a difference (or, with --strict, a skipped case or a case\n"
    "without golden), 2 usage error, missing fixtures directory, or an errored case.\n"
    "--te-rules (default: the newest): the TE release whose rules count the cases TE's\n"
    "DotProductAttention would not route to FusedAttention (reported after the verdict;\n"
    "`fattn cases` names the rules per case). The verdict does not depend on it.\n"
    "--against [REPO@]REV: this tree against another revision: REV of REPO (default: the\n"
    "source tree fattn was built from, " FATTN_SOURCE_ROOT ") is exported with\n"
    "git archive into a temporary directory and built there; its fattn runs the selected\n"
    "cases through both front ends and its own verify; each case's runs here are compared\n"
    "with its bitwise (checks 'against REV: legacy' and '...: split', with the earliest\n"
    "cause). This side is this fattn: the working tree as built, uncommitted changes\n"
    "included. Exit as verify's, REV's own verify counted too.\n"
    "-j/--jobs N (1 to 32; default: the online CPUs, at most 16): on the cuDNN engine, before the\n"
    "checks, N processes build the plans the matrix needs into the plan store\n"
    "($FATTN_CUDNN_PLAN_DIR, else a temporary one removed at exit), which this process\n"
    "then restores instead of compiling them one by one; the same plans, the same bits.\n"
    "1 builds them here as the checks meet them. The CPU engine ignores it.\n"
    "--max-memory (default half the RAM) refuses, before any case runs, cases whose\n"
    "estimate is larger (each case's two runs are kept for the report, as fattn run\n"
    "estimates a run), then goldens that do not fit in what is left.\n";

int fh_cmd_golden(int argc, char **argv);

int fh_cmd_verify_parse(int argc, char **argv, fh_cmd_verify_env *v, bool *done)
{
    memset(v, 0, sizeof *v);
    v->backend = "auto";
    v->te_rules = FATTN_TE_RULES_NEWEST;
    *done = false;
    const char *te_rules_s = NULL, *jobs_s = NULL, *maxmem_s = NULL;
    v->jobs = fh_cmd_verify_default_jobs();
    cli_args a = {argc, argv, 1, "verify"};
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(verify_help, stdout);
            *done = true;
            return FH_EXIT_OK;
        } else if (cli_flag(&a, "--strict")) {
            v->strict = true;
        } else if (cli_flag(&a, "--progress")) {
            v->progress = true;
        } else if (cli_flag(&a, "-x") || cli_flag(&a, "--exitfirst")) {
            v->exitfirst = true;
        } else if ((r = cli_opt(&a, "--jobs", &jobs_s)) || (r = cli_opt(&a, "-j", &jobs_s))) {
            if (r < 0)
                return cli_fail("verify", "%s needs a value", argv[a.i]);
            long j = 0;
            if (cli_parse_count_arg("verify", "--jobs", jobs_s, 1, FH_VERIFY_MAX_JOBS, &j) !=
                FH_EXIT_OK)
                return FH_EXIT_ERROR;
            v->jobs = (int)j;
        } else if ((r = cli_opt(&a, "--cases", &v->cases)) ||
                   (r = cli_opt(&a, "-k", &v->keyword)) ||
                   (r = cli_opt(&a, "--junit", &v->junit)) ||
                   (r = cli_opt(&a, "--against", &v->against)) ||
                   (r = cli_opt(&a, "--filter", &v->filter)) ||
                   (r = cli_opt(&a, "--backend", &v->backend)) ||
                   (r = cli_opt(&a, "--fixtures", &v->fixtures)) ||
                   (r = cli_opt(&a, "--json", &v->json)) ||
                   (r = cli_opt(&a, "--max-memory", &maxmem_s)) ||
                   (r = cli_opt(&a, "--te-rules", &te_rules_s))) {
            if (r < 0)
                return cli_fail("verify", "%s needs a value", argv[a.i]);
        } else {
            return cli_fail("verify", "unknown argument '%s' (see fattn verify --help)",
                            argv[a.i]);
        }
    }
    if (cli_is_stdout(v->json) && cli_is_stdout(v->junit))
        return cli_fail("verify", "--json - and --junit -: only one report can go to stdout");
    v->progress = cli_progress_wanted(v->progress);
    if (cli_max_memory_or_default("verify", maxmem_s, &v->max_mem) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    return cli_parse_te_rules("verify", te_rules_s, &v->te_rules);
}

int fh_cmd_verify_open(fh_cmd_verify_env *v)
{
    const char *fix_dir = v->fixtures ? v->fixtures : FATTN_SOURCE_ROOT "/fixtures";
    struct stat sb;
    if (stat(fix_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cli_fail("verify", "fixtures directory %s: %s", fix_dir,
                        errno ? strerror(errno) : "not a directory");
    if (cli_matrix_load("verify", v->cases, v->filter, NULL, &v->m) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    if (v->keyword &&
        cli_matrix_keep_keyword("verify", &v->m, v->keyword, v->filter) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    if (fh_cmd_verify_check_memory("verify", &v->m, true, v->max_mem, &v->cases_mem) !=
        FH_EXIT_OK) {
        cli_matrix_free(&v->m);
        return FH_EXIT_ERROR;
    }
    v->fix_dir = fix_dir;
    if (fh_cmd_verify_prebuild(v) != FH_EXIT_OK) {
        cli_matrix_free(&v->m);
        return FH_EXIT_ERROR;
    }
    return fh_cmd_verify_open_engine(v);
}

/* The case column's width: the longest selected id, at least 48, set with
 * the header so that every row lines up under it whatever the ids
 * (print_case keeps the callback signature bench/bench_verify.c uses). */
static int table_id_width = 48;

void fh_cmd_verify_print_header(FILE *f, const fh_cmd_verify_env *v)
{
    const fh_verify_goldens *g = &v->goldens;
    table_id_width = 48;
    for (size_t i = 0; i < v->m.n_sel; i++) {
        size_t n = strlen(v->m.sel[i]->id);
        if (n > (size_t)table_id_width && n < 4096)
            table_id_width = (int)n;
    }
    fprintf(f, "fattn verify: engine %s%s, platform key %s, goldens %s: %s\n", v->backend_name,
            v->forced ? " (deterministic backward forced)" : "", g->key, cli_vis(g->path),
            cli_vis(g->note));
    fprintf(f, "%-*s %-6s %7s  %s\n", table_id_width, "case", "states", "tensors", "result");
}

void fh_cmd_verify_print_case(void *ctx, const fh_verify_case *c)
{
    FILE *f = ctx;
    char result[3000];
    fh_cmd_verify_result_text(c, result, sizeof result);
    /* paths, reasons and messages can come from the goldens file: shown
     * visibly, so that none can start a line of its own (escape.h) */
    fprintf(f, "%-*s %-6s %7zu  %s\n", table_id_width, cli_vis(c->spec->id), c->states,
            c->tensors, cli_vis(result));
}

/* A case's result in one word, for progress lines. */
static const char *case_word(const fh_verify_case *c)
{
    return c->skipped ? "skipped" : c->cmp.differences ? "DIFFERENT" : c->error[0] ? "ERROR"
                                                                                  : "ok";
}

/* What verify does after each case: its table row, its progress line. */
typedef struct verify_out {
    FILE *table;
    bool progress, exitfirst;
    size_t done, n;
    fh_verify_result *r; /* the run's, to stop it (-x) */
} verify_out;

static void verify_on_case(void *ctx, const fh_verify_case *c)
{
    verify_out *o = ctx;
    fh_cmd_verify_print_case(o->table, c);
    cli_progress_line(o->progress, o->done++, o->n, c->spec->id, case_word(c));
    if (o->exitfirst && (c->cmp.differences || c->error[0]))
        o->r->stop = true;
}

int fh_cmd_verify_exit(const fh_verify_result *r, bool strict)
{
    return r->n_err ? FH_EXIT_ERROR
                    : (r->n_diff || (strict && (r->n_skip || r->n_nogold))) ? FH_EXIT_DIFF
                                                                              : FH_EXIT_OK;
}

/* The commands that show case b's first difference outside verify. */
static void print_repro(FILE *f, const fh_cmd_verify_env *v, const fh_verify_case *b)
{
    /* commands that run as pasted: this fattn by its path, paths quoted */
    char fx[1100], cases[1200] = "", backend[64] = "", id[300], gold[1100], q[1100];
    cli_sh_quote(cli_self_path(), fx, sizeof fx);
    if (v->cases)
        snprintf(cases, sizeof cases, " --cases %s", cli_sh_quote(v->cases, q, sizeof q));
    if (v->backend_name)
        snprintf(backend, sizeof backend, " --backend %s", v->backend_name);
    cli_sh_quote(b->spec->id, id, sizeof id);
    cli_sh_quote(v->goldens.path, gold, sizeof gold);
    const char *chk = b->first_check;
    fprintf(f, "reproduce:\n");
    if (!strncmp(chk, "golden", 6)) {
        fprintf(f, "  %s run --filter %s%s%s --impl legacy -o legacy.h5 && %s diff "
                "legacy.h5 %s\n", fx, id, cases, backend, fx, gold);
    } else if (!strncmp(chk, "replay ", 7)) {
        const char *src = strstr(chk, "replay legacy") ? "legacy" : "split";
        const char *from = strstr(chk, "forward ->") ? "forward" : "save_ctx";
        const char *to = strstr(chk, "-> legacy") ? "legacy" : "split";
        fprintf(f, "  %s run --filter %s%s%s --impl %s -o a.h5 && %s replay a.h5 --from "
                "%s --impl %s%s -o b.h5 && %s diff a.h5 b.h5\n", fx, id, cases, backend, src,
                fx, from, to, backend, fx);
    } else if (!strncmp(chk, "against ", 8)) {
        fprintf(f, "  %s verify --against %s -k %s%s%s  (both revisions' runs of the case)\n",
                fx, cli_sh_quote(v->against, q, sizeof q), id, cases, backend);
    } else if (!strstr(chk, "wrapper") && !strstr(chk, "seam") &&
               !strstr(chk, "second backward") && !strstr(chk, "inputs unchanged")) {
        fprintf(f, "  %s run --filter %s%s%s --impl legacy -o legacy.h5 && %s run "
                "--filter %s%s%s --impl split -o split.h5 && %s diff legacy.h5 split.h5\n",
                fx, id, cases, backend, fx, id, cases, backend, fx);
    }
    fprintf(f, "  %s verify -k %s%s%s  (every check of the case; the split wrapper, seam, "
            "second-backward and inputs checks run only here)\n", fx, id, cases, backend);
}

static void print_summary(FILE *f, const fh_verify_result *r)
{
    fprintf(f, "behavior-neutral: %s (%zu case%s, %zu tensor%s, %zu skipped, %zu difference%s"
               "%s%s)\n",
            r->neutral ? "yes" : "NO", r->n_cases, cli_s(r->n_cases), r->n_tensors,
            cli_s(r->n_tensors), r->n_skip, r->n_diff_objects, cli_s(r->n_diff_objects),
            r->n_err ? ", errors: " : "", r->n_err ? "yes" : "");
    if (r->n_err)
        fprintf(f, "errored cases: %zu\n", r->n_err);
    if (r->n_refused)
        fprintf(f, "refusals checked: %zu (both front ends refused with the expected status "
                "and rule)\n", r->n_refused);
    if (r->n_nogold)
        fprintf(f, "cases without golden on this platform: %zu\n", r->n_nogold);
    /* FP8 cases that ran (not skipped nor refused, and a forward recorded:
     * a case that differs, or errors after its forward, ran its FP8 path
     * all the same); refusals of FP8 cases are counted with the refusals */
    size_t n_fp8 = 0, n_fp8_refused = 0;
    for (size_t i = 0; i < r->n_cases; i++) {
        const fh_verify_case *c = &r->cases[i];
        if (!c->spec->fp8)
            continue;
        n_fp8_refused += c->refused;
        n_fp8 += !c->refused && !c->skipped && c->states[1] == 'f';
    }
    if (n_fp8)
        fprintf(f, "FP8: exercised (%zu case%s; %zu FP8 refusal%s checked)\n", n_fp8,
                cli_s(n_fp8), n_fp8_refused, cli_s(n_fp8_refused));
    else
        fprintf(f, "FP8: not exercised\n");
}

/* The JSON report (schema fattn-verify/1); 0, or -1 after a message. */
static int write_json(const char *path, const fh_cmd_verify_env *v,
                      const fh_verify_result *r, int rc, size_t routed,
                      const fh_contrast *contrast)
{
    json_t *root = json_pack("{s:s,s:s,s:s,s:s,s:o,s:{s:I,s:I,s:I,s:I,s:I,s:I},s:s,s:i}",
                             "schema", "fattn-verify/1", "engine", v->backend_name,
                             "platform_key", v->goldens.key, "goldens", v->goldens.path,
                             "cases", fh_cmd_verify_json_cases(r), "summary", "cases",
                             (json_int_t)r->n_cases, "tensors", (json_int_t)r->n_tensors,
                             "skipped", (json_int_t)r->n_skip, "different_cases",
                             (json_int_t)r->n_diff, "errors", (json_int_t)r->n_err,
                             "without_golden", (json_int_t)r->n_nogold, "verdict",
                             r->neutral ? "behavior-neutral" : "not behavior-neutral", "exit",
                             rc);
    if (root)
        json_object_set_new(root, "forced_deterministic_bwd", json_boolean(v->forced));
    if (root)
        json_object_set_new(root, "contrast", fh_cmd_verify_json_contrast(contrast));
    if (root && v->against)
        json_object_set_new(root, "against",
                            json_pack("{s:s,s:s,s:i,s:s}", "rev", v->against, "sha",
                                      v->against_sha, "verify_exit", v->against_verify_exit,
                                      "verify_verdict", v->against_verdict));
    json_t *summ = root ? json_object_get(root, "summary") : NULL;
    if (summ)
        json_object_set_new(summ, "refusals", json_integer((json_int_t)r->n_refused));
    if (summ)
        json_object_set_new(summ, "dpa_routes_elsewhere", json_integer((json_int_t)routed));
    if (root)
        json_object_set_new(root, "te_rules", json_string(fattn_te_rules_name(v->te_rules)));
    /* the run's side of the provenance (the goldens file holds the other) */
    if (root)
        json_object_set_new(root, "git_rev", json_string(FH_GIT_REV));
    if (root)
        json_object_set_new(root, "fattn_version", json_string(FATTN_VERSION));
    /* One atomic replace (fileguard.h): a full disk leaves the old report. */
    char *text = root ? json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    if (!text) {
        cli_fail("verify", "%s: cannot write the JSON report: out of memory", path);
        return -1;
    }
    int wrc = cli_write_report("verify", "JSON report", path, text);
    free(text);
    return wrc == FH_EXIT_OK ? 0 : -1;
}

/* The selected cases DotProductAttention would not route to FusedAttention
 * under v->te_rules (te_rules.h). */
static size_t dpa_routed_count(const fh_cmd_verify_env *v)
{
    size_t n = 0;
    for (size_t i = 0; i < v->m.n_sel; i++) {
        char note[FH_TE_NOTE_MAX];
        fh_case_te_note(v->m.sel[i], v->te_rules, note, sizeof note);
        n += note[0] != '\0';
    }
    return n;
}

/* Which golden comparison the verdict rests on, under the verdict: a GPU
 * runner with a cuDNN that has no goldens of its own is compared with the
 * CPU goldens within tolerance, and its log must say so where the verdict
 * is read (docs/verify.md, "Platform keys and goldens"). */
static void print_goldens_line(FILE *f, const fh_cmd_verify_env *v,
                               const fh_verify_result *r)
{
    const fh_verify_goldens *g = &v->goldens;
    const char *base = strrchr(g->path, '/');
    base = base ? base + 1 : g->path;
    size_t other = 0;
    for (size_t i = 0; i < r->n_cases; i++)
        other += r->cases[i].other_plans;
    const char *cbase = strrchr(g->cpu_path, '/');
    cbase = cbase ? cbase + 1 : g->cpu_path;
    if (g->exact)
        fprintf(f, "goldens: bitwise against %s (this platform's key)\n", base);
    else if (g->identity && !other)
        fprintf(f, "goldens: bitwise against %s (no goldens for platform key %s; the same "
                "engine identity: %s, the same plans)\n", base, g->key, g->identity_text);
    else if (g->identity)
        fprintf(f, "goldens: bitwise against %s (no goldens for platform key %s; the same "
                "engine identity: %s) where a case ran the same plans; %zu case%s ran other "
                "plans: %s\n", base, g->key, g->identity_text, other, cli_s(other),
                g->cpu_tree ? "within tolerance against the CPU goldens" : "without goldens");
    else if (g->tolerance)
        fprintf(f, "goldens: within tolerance against %s (no goldens for platform key %s; "
                "fattn golden --backend %s makes them)\n", base, g->key, v->backend_name);
    else
        fprintf(f, "goldens: none (no goldens for platform key %s and no CPU goldens)\n",
                g->key);
}

int fh_cmd_verify_finish(FILE *f, const fh_cmd_verify_env *v, const fh_verify_result *r)
{
    print_summary(f, r);
    fh_contrast contrast;
    fh_cmd_verify_contrast(r, &contrast);
    if (contrast.text[0])
        fprintf(f, "%s\n", contrast.text);
    if (r->first_bad)
        fh_cmd_verify_print_first(f, r->first_bad);
    print_goldens_line(f, v, r);
    if (v->against)
        fh_cmd_verify_against_print(f, v);
    if (r->first_bad)
        print_repro(f, v, r->first_bad);
    size_t routed = dpa_routed_count(v);
    fprintf(f, "TE %s rules: DotProductAttention would route %zu of %zu cases elsewhere "
            "(FusedAttnFunc runs them; fattn cases --te-rules %s names the rules)\n",
            fattn_te_rules_name(v->te_rules), routed, v->m.n_sel,
            fattn_te_rules_name(v->te_rules));
    if (r->stop)
        fprintf(f, "stopped after the first failing case (-x): %zu of %zu case%s run\n",
                r->n_cases, v->m.n_sel, cli_s(v->m.n_sel));
    int rc = fh_cmd_verify_exit(r, v->strict);
    /* --against: the other revision's own verify counts too */
    if (v->against && v->against_verify_exit > rc)
        rc = v->against_verify_exit <= FH_EXIT_ERROR ? v->against_verify_exit
                                                        : FH_EXIT_ERROR;
    if (v->json && write_json(v->json, v, r, rc, routed, &contrast) != 0)
        rc = FH_EXIT_ERROR;
    if (v->junit && fh_cmd_verify_write_junit(v->junit, v, r) != 0)
        rc = FH_EXIT_ERROR;
    return rc;
}

/* --json and --junit (when not stdout) against the inputs: the cases file
 * and `goldens` (NULL: not known yet), and where a file can be made. */
static int check_outputs(const fh_cmd_verify_env *v, const char *goldens)
{
    const char *inputs[2] = {goldens, v->cases};
    const char *outs[2][2] = {{"--json", v->json}, {"--junit", v->junit}};
    for (int k = 0; k < 2; k++) {
        const char *o = outs[k][1];
        if (o && !cli_is_stdout(o) &&
            (fh_fileguard_check_distinct(o, inputs, 2) != FATTN_OK ||
             fh_fileguard_check_output(o) != FATTN_OK))
            return cli_fail("verify", "%s %s", outs[k][0], fattn_last_error());
    }
    return FH_EXIT_OK;
}

int fh_cmd_verify(int argc, char **argv)
{
    fh_cmd_verify_env v;
    bool done;
    int rc = fh_cmd_verify_parse(argc, argv, &v, &done);
    if (rc != FH_EXIT_OK || done)
        return rc;
    /* The reports' paths are checked before any work (the plan-building
     * processes of a cold cuDNN verify included): a place no file can be
     * made, the matrix they are about, each other. */
    if (v.json && v.junit && !cli_is_stdout(v.json) && !strcmp(v.json, v.junit))
        return cli_fail("verify", "--json and --junit name the same file %s", v.json);
    if ((rc = check_outputs(&v, NULL)) != FH_EXIT_OK)
        return rc;
    if ((rc = fh_cmd_verify_open(&v)) != FH_EXIT_OK)
        return rc;
    if (v.against && (rc = fh_cmd_verify_against_prepare(&v)) != FH_EXIT_OK) {
        fh_cmd_verify_close(&v);
        return rc;
    }
    /* nor the goldens, known once they are opened */
    if ((rc = check_outputs(&v, v.goldens.exact || v.goldens.tolerance ? v.goldens.path
                                                                        : NULL)) !=
        FH_EXIT_OK) {
        fh_cmd_verify_close(&v);
        return rc;
    }
    /* with --json - or --junit -, stdout is the report alone and the table
     * goes to stderr */
    FILE *table = cli_is_stdout(v.json) || cli_is_stdout(v.junit) ? stderr : stdout;
    fh_cmd_verify_print_header(table, &v);
    fh_verify_result r;
    verify_out out = {table, v.progress, v.exitfirst, 0, v.m.n_sel, &r};
    if (fh_verify_run(v.m.sel, v.m.n_sel, v.e, &v.goldens, verify_on_case, &out, &r) !=
        FATTN_OK)
        rc = cli_fail("verify", "%s", fattn_last_error());
    else
        rc = fh_cmd_verify_finish(table, &v, &r);
    fh_verify_result_free(&r);
    fh_cmd_verify_close(&v);
    return rc;
}

/* ---- golden ---------------------------------------------------------------- */

static const char golden_help[] =
    "usage: fattn golden [--cases FILE] [--backend auto|cpu|cudnn] [--force] [--progress]\n"
    "                    [--te-rules " FATTN_TE_RULES_CHOICES "] [--allow-dirty]\n"
    "                    [--max-memory BYTES] -o DIR\n"
    "\n"
    "Regenerate the goldens of this platform as DIR/<platform key>.h5: forward and backward\n"
    "outputs in full, inputs and save_ctx as digests only, with provenance (version, git\n"
    "revision, platform key, SOURCE_DATE_EPOCH date). Refuses a non-empty DIR without\n"
    "--force, and refuses to write anything unless legacy == split and every case repeats\n"
    "bitwise in this same invocation. Prints what changed against the goldens it replaces.\n"
    "--te-rules (default: the newest): the release the root attribute te_rules and each case's\n"
    "prov_te_route name (as fattn run records them). --progress (the default when stderr\n"
    "is a terminal) prints `[17/63] CASE... ok` on stderr as each case is checked.\n"
    "A fattn built from a tree with uncommitted changes (its git_rev ends in -dirty), or\n"
    "whose revision is unknown (built without git or outside a checkout), refuses (exit 2),\n"
    "as the goldens would name no revision that holds the code that made them;\n"
    "--allow-dirty writes them anyway (scratch goldens, not for committing).\n"
    "--max-memory (default half the RAM) refuses, before any case runs, a case whose\n"
    "estimate is larger (its three runs, one case at a time); the old goldens are read for\n"
    "the changes only when they fit in what is left.\n";

static bool dir_is_empty(const char *path, bool *exists)
{
    DIR *d = opendir(path);
    *exists = d != NULL;
    if (!d)
        return true;
    struct dirent *de;
    bool empty = true;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            empty = false;
            break;
        }
    closedir(d);
    return empty;
}

/* What the new goldens change against the ones they replace, told case by
 * case as each is made and printed only once all are (nothing is printed
 * for goldens that are not written). */
typedef struct golden_changes {
    fh_h5_node *old;         /* the old goldens, NULL if none could be read */
    const fh_h5_node *oc; /* its /cases */
    FILE *log;               /* the lines so far (memory stream) */
    char *text;
    size_t len, changed, added;
    char *unreadable;        /* why an existing old file could not be read, else NULL */
} golden_changes;

static int golden_changes_init(golden_changes *g, const char *path, double max_bytes)
{
    struct stat sb;
    memset(g, 0, sizeof *g);
    if (stat(path, &sb) == 0) {
        if (fh_runfile_load_bounded(path, max_bytes, &g->old) == FATTN_OK)
            g->oc = fh_h5_node_find(g->old, "cases");
        else if (!(g->unreadable = strdup(fattn_last_error())))
            return cli_fail("golden", "out of memory");
    }
    /* The old goldens are read only to report the changes: they are what
     * this write replaces, not an input of it (fileguard.h). */
    fh_fileguard_unpin(path);
    if (!(g->log = open_memstream(&g->text, &g->len)))
        return cli_fail("golden", "out of memory");
    return FH_EXIT_OK;
}

/* One new golden case against the old goldens. */
static void golden_changes_case(golden_changes *g, const fh_h5_node *nc)
{
    if (!g->oc)
        return;
    const fh_h5_node *o = fh_h5_node_find(g->oc, nc->name);
    if (!o) {
        fprintf(g->log, "golden: new case %s\n", cli_vis(nc->name));
        g->added++;
        return;
    }
    fh_compare_result r = {0};
    fh_compare_cases(o, nc, NULL, &r);
    if (r.differences) {
        fprintf(g->log, "golden: case %s changed: %s %s\n", cli_vis(nc->name),
                cli_vis(r.paths[0]), cli_vis(r.why[0]));
        g->changed++;
    }
}

static int cmp_spec_ptr_id(const void *x, const void *y)
{
    return strcmp((*(const fh_spec *const *)x)->id, (*(const fh_spec *const *)y)->id);
}

/* Print what changed: the lines told, then the old cases that `sel` (the
 * new cases, sorted by id) lacks, then the counts. */
static void golden_changes_print(golden_changes *g, const char *path, const fh_spec **sel,
                                 size_t n)
{
    if (!g->oc && g->unreadable) {
        /* replaced all the same, but not called absent */
        printf("golden: the previous goldens at %s cannot be read, so their changes are not "
               "shown: %s\n", cli_vis(path), cli_vis(g->unreadable));
        return;
    }
    if (!g->oc) {
        printf("golden: no previous goldens at %s\n", cli_vis(path));
        return;
    }
    fflush(g->log);
    fwrite(g->text, 1, g->len, stdout);
    size_t removed = 0;
    for (size_t i = 0; i < g->oc->n_children; i++) {
        const char *name = g->oc->children[i]->name;
        bool found = false;
        for (size_t j = 0; j < n && !found; j++)
            found = strcmp(sel[j]->id, name) == 0;
        if (!found) {
            printf("golden: case %s removed\n", cli_vis(name));
            removed++;
        }
    }
    printf("golden: against the old %s: %zu changed, %zu new, %zu removed\n", cli_vis(path),
           g->changed, g->added, removed);
}

static void golden_changes_free(golden_changes *g)
{
    if (g->log)
        fclose(g->log);
    free(g->unreadable);
    free(g->text);
    fh_h5_node_free(g->old);
}

/* The golden's prov_te_route under the --te-rules release: the run it is
 * made from named the newest's. Every release has the same routing rows, so
 * a note is there under one release exactly when under the other; resealed,
 * as the attribute digest covers it. */
static fattn_status golden_te_note(fh_h5_node *g, const fh_spec *s, unsigned te_rules)
{
    char note[FH_TE_NOTE_MAX];
    fattn_status st = fh_case_te_note(s, te_rules, note, sizeof note);
    if (st != FATTN_OK || !note[0])
        return st;
    if ((st = fh_h5_node_set_string(g, "prov_te_route", note)) != FATTN_OK)
        return st;
    return fh_h5_node_seal_attrs(g);
}

/* One checked case's golden: made, told against the old goldens, written. */
static fattn_status golden_put(const fh_verify_case *c, unsigned te_rules, golden_changes *gc,
                               fh_case_sink *k)
{
    fh_h5_node *g = NULL;
    fattn_status st;
    if ((st = fh_compare_make_golden(c->legacy, &g)) != FATTN_OK ||
        (st = golden_te_note(g, c->spec, te_rules)) != FATTN_OK)
        goto out;
    golden_changes_case(gc, g);
    st = fh_case_sink_put(k, g);
out:
    fh_h5_node_free(g);
    return st;
}

/* Check every case and write each golden as soon as it is made (in id
 * order, through the case sink: one case held at a time). *bad counts the
 * cases whose checks differ; after the first nothing more is written, as
 * the sink will not be committed. */
static int golden_cases(const cli_matrix *m, fattn_engine *e, unsigned te_rules,
                        golden_changes *gc, fh_case_sink *k, size_t *bad, bool progress)
{
    for (size_t i = 0; i < m->n_sel; i++) {
        fh_verify_case c;
        memset(&c, 0, sizeof c);
        c.spec = m->sel[i];
        fh_verify_check_case(&c, e);
        cli_progress_line(progress, i, m->n_sel, c.spec->id, case_word(&c));
        int rc = FH_EXIT_OK;
        if (c.error[0]) {
            rc = cli_fail("golden", "case %s: %s", c.spec->id, c.error);
        } else if (c.cmp.differences) {
            fprintf(stderr, "fattn golden: case %s: %s %s (%s)\n", cli_vis(c.spec->id),
                    cli_vis(c.cmp.paths[0]), cli_vis(c.cmp.why[0]), c.first_check);
            (*bad)++;
        } else if (!*bad && golden_put(&c, te_rules, gc, k) != FATTN_OK) {
            rc = cli_fail("golden", "%s", fattn_last_error());
        }
        fh_verify_case_free(&c);
        if (rc != FH_EXIT_OK)
            return rc;
    }
    return FH_EXIT_OK;
}

/* The revision the goldens will record (git_rev); FATTN_TEST_GIT_REV
 * stands in for it in tests, as a test build cannot be made dirty. */
static const char *golden_git_rev(void)
{
#if FATTN_TESTING
    const char *e = getenv("FATTN_TEST_GIT_REV");
    if (e && *e)
        return e;
#endif
    return FH_GIT_REV;
}

/* Goldens are committed and name the revision that made them: from a
 * build of a tree with uncommitted changes (git describe --dirty) that
 * revision does not hold the code that made them. */
static int golden_check_clean(bool allow_dirty)
{
    const char *rev = golden_git_rev();
    size_t n = strlen(rev);
    if (!allow_dirty && (!strcmp(rev, "unknown") || !rev[0]))
        return cli_fail("golden", "fattn's git revision is unknown (built without git, or not "
                        "from a git checkout): goldens would name no revision; build from a "
                        "checkout with git installed, or pass --allow-dirty for goldens not to "
                        "be committed");
    if (allow_dirty || n < 6 || strcmp(rev + n - 6, "-dirty") != 0)
        return FH_EXIT_OK;
    return cli_fail("golden", "fattn was built from a tree with uncommitted changes (git_rev %s):"
                    " goldens would not name the code that made them; commit, rebuild and "
                    "rerun, or pass --allow-dirty for goldens not to be committed", rev);
}

/* The goldens' root: the provenance of a legacy run on e, and what verify
 * looks them up and runs them by. */
static fattn_status golden_root(fh_h5_node **root, const char *backend_name, fattn_engine *e,
                                bool forced, const char *key, unsigned te_rules)
{
    fattn_status st;
    if ((st = fh_h5_node_new_group("", root)) != FATTN_OK ||
        (st = fh_runfile_set_provenance(*root, "legacy", backend_name, e)) != FATTN_OK ||
        (forced && (st = fh_h5_node_set_uint8(*root, "forced_deterministic_bwd", 1)) != FATTN_OK) ||
        (st = fh_h5_node_set_string(*root, "platform_key", key)) != FATTN_OK)
        return st;
    return fh_h5_node_set_string(*root, "te_rules", fattn_te_rules_name(te_rules));
}

/* Run the matrix and write DIR/<platform key>.h5 (an exit code). */
static int golden_write(const char *cases, const char *backend, unsigned te_rules,
                        const char *out, bool progress, bool allow_dirty, double max_mem)
{
    cli_matrix m;
    if (cli_matrix_load("golden", cases, NULL, NULL, &m) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    double cases_mem;
    if (golden_check_clean(allow_dirty) != FH_EXIT_OK ||
        fh_cmd_verify_check_memory("golden", &m, false, max_mem, &cases_mem) != FH_EXIT_OK) {
        cli_matrix_free(&m);
        return FH_EXIT_ERROR;
    }
    fattn_engine *e = NULL;
    const char *backend_name = NULL;
    if (cli_engine_open_opts("golden", backend, &deterministic_bwd, &e, &backend_name) !=
        FH_EXIT_OK) {
        cli_matrix_free(&m);
        return FH_EXIT_ERROR;
    }
    /* as verify runs them, so that verify can compare bitwise */
    bool forced = fattn_engine_supports(e, FATTN_ENGINE_Q_FORCED_DETERMINISTIC_BWD);
    char key[128], path[4096];
    fh_verify_platform_key(e, key, sizeof key);
    snprintf(path, sizeof path, "%s/%s.h5", out, key);

    /* in the order the file lists them, so that each is written when made */
    if (m.n_sel > 1)
        qsort((void *)m.sel, m.n_sel, sizeof *m.sel, cmp_spec_ptr_id);
    fh_run_memory_policy();
    fh_h5_node *root = NULL;
    golden_changes gc;
    fh_case_sink *k = NULL;
    /* the old goldens (read to tell the changes) get what the cases leave;
     * the root is made after they are read, so that its error is the last */
    int rc = golden_changes_init(&gc, path, max_mem - cases_mem > 1.0 ? max_mem - cases_mem : 1.0);
    fattn_status st;
    if (rc == FH_EXIT_OK &&
        ((st = golden_root(&root, backend_name, e, forced, key, te_rules)) != FATTN_OK ||
         (st = fh_case_sink_open(path, root, false, &k)) != FATTN_OK))
        rc = cli_fail("golden", "%s", fattn_last_error());
    size_t bad = 0;
    if (rc == FH_EXIT_OK)
        rc = golden_cases(&m, e, te_rules, &gc, k, &bad, progress);
    if (rc == FH_EXIT_OK && bad) {
        fprintf(stderr, "fattn golden: %zu case%s differ%s between legacy and split or between "
                "repeats: nothing written\n", bad, cli_s(bad), bad == 1 ? "s" : "");
        rc = FH_EXIT_DIFF;
    }
    /* what changed against the goldens being replaced */
    if (rc == FH_EXIT_OK) {
        golden_changes_print(&gc, path, m.sel, m.n_sel);
        if (fh_case_sink_commit(k, NULL) != FATTN_OK)
            rc = cli_fail_at("golden", path);
        else
            printf("golden: wrote %zu case%s to %s (platform key %s)\n", m.n_sel,
                   cli_s(m.n_sel), cli_vis(path), cli_vis(key));
    }
    fh_case_sink_free(k);
    golden_changes_free(&gc);
    fh_h5_node_free(root);
    cli_engine_close(e);
    cli_matrix_free(&m);
    return rc;
}

int fh_cmd_golden(int argc, char **argv)
{
    const char *cases = NULL, *backend = "auto", *out = NULL, *te_rules_s = NULL;
    const char *maxmem_s = NULL;
    bool force = false, progress = false, allow_dirty = false;
    cli_args a = {argc, argv, 1, "golden"};
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(golden_help, stdout);
            return FH_EXIT_OK;
        } else if (cli_flag(&a, "--force")) {
            force = true;
        } else if (cli_flag(&a, "--progress")) {
            progress = true;
        } else if (cli_flag(&a, "--allow-dirty")) {
            allow_dirty = true;
        } else if ((r = cli_opt(&a, "--cases", &cases)) || (r = cli_opt(&a, "--backend", &backend)) ||
                   (r = cli_opt(&a, "-o", &out)) || (r = cli_opt(&a, "--te-rules", &te_rules_s)) ||
                   (r = cli_opt(&a, "--max-memory", &maxmem_s))) {
            if (r < 0)
                return cli_fail("golden", "%s needs a value", argv[a.i]);
        } else {
            return cli_fail("golden", "unknown argument '%s' (see fattn golden --help)",
                            argv[a.i]);
        }
    }
    if (!out)
        return cli_fail("golden", "-o DIR is required");
    unsigned te_rules;
    double max_mem;
    if (cli_parse_te_rules("golden", te_rules_s, &te_rules) != FH_EXIT_OK ||
        cli_max_memory_or_default("golden", maxmem_s, &max_mem) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    bool exists;
    struct stat sb;
    if (stat(out, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return cli_fail("golden", "-o %s: exists and is not a directory", out);
    if (!dir_is_empty(out, &exists) && !force)
        return cli_fail("golden", "%s is not empty: pass --force to replace its goldens", out);
    if (!exists && mkdir(out, 0777) != 0)
        return cli_fail("golden", "-o %s: cannot create the directory: %s", out, strerror(errno));
    int rc = golden_write(cases, backend, te_rules, out, cli_progress_wanted(progress),
                          allow_dirty, max_mem);
    /* A failed golden leaves no trace: the directory it made goes too
     * (empty, since nothing was written into it). */
    if (rc != FH_EXIT_OK && !exists)
        rmdir(out);
    return rc;
}
