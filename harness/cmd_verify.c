/* fattn verify and fattn golden: the main job and its fixtures.
 *
 * verify, per case of the matrix, on one engine:
 *   1. legacy vs split, bitwise, every state;
 *   2. cross-wired replays: legacy's save_ctx into split's backward, split's
 *      into legacy's, split's forward into split's setup_ctx + backward —
 *      each bitwise equal to the straight run;
 *   3. determinism: the split run repeated, bitwise equal;
 *   4. the goldens of this platform (fixtures/<platform key>.h5), bitwise,
 *      inputs and save_ctx through their digests.
 * golden writes those fixtures, and refuses unless 1 and 3 hold.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>

#include "fattn/cudnn.h"
#include "fattn/engine.h"
#include "fattn_config.h"

#include "cli.h"
#include "compare.h"
#include "runfile.h"
#include "runner.h"

/* The platform key goldens are filed under: bitwise comparison against
 * goldens is only meaningful on an exact match. The engine knows it. */
static void platform_key(const fattn_engine *e, char *buf, size_t n)
{
    snprintf(buf, n, "%s", fattn_engine_last_report(e).platform);
}

/* Bitwise checks need a backward that repeats bitwise: engines that can
 * force the deterministic backward do so for verify and golden. */
static const fattn_engine_options deterministic_bwd = {.force_deterministic_bwd = true};

typedef struct case_check {
    const fattn_spec *spec;
    fattn_h5_node *legacy, *split; /* owned */
    const char *skipped;           /* reason, or NULL */
    char error[512];               /* non-empty: the case errored */
    fattn_compare_result cmp;      /* every check's differences together */
    char first_check[64];          /* which check found the first difference */
    size_t tensors;
    bool golden_missing;
    bool same_engine_only;         /* dropout, against another engine's goldens */
    size_t noisy_within;           /* non-deterministic tensors within their bound */
} case_check;

/* Tensors that are non-deterministic by construction on an engine even with
 * the deterministic backward (measured on the H200, docs/determinism.md):
 * compared within the io dtype's tolerance instead of bitwise. */
static const char *const cudnn_noisy[] = {"backward/d_softmax_offset", NULL};

/* A comparison result set up for this case's engine. */
static fattn_compare_result cmp_init(const case_check *c, fattn_engine *e)
{
    fattn_compare_result r = {0};
    if (fattn_engine_supports(e, FATTN_ENGINE_Q_NOISY_D_SOFTMAX_OFFSET)) {
        fattn_tol_profile p;
        fattn_tol_profile_builtin(&p);
        fattn_tol t = fattn_tol_profile_lookup(&p, "backward/d_softmax_offset", c->spec->dtype);
        fattn_tol_profile_free(&p);
        r.noisy = cudnn_noisy;
        r.noisy_rtol = t.rtol;
        r.noisy_atol = t.atol;
    }
    return r;
}

static void check_note(case_check *c, const char *check, const fattn_compare_result *r)
{
    c->tensors += r->tensors;
    c->noisy_within += r->noisy_within;
    for (size_t i = 0; i < r->differences; i++) {
        if (c->cmp.differences < FATTN_COMPARE_MAX_REPORTED && i < FATTN_COMPARE_MAX_REPORTED) {
            snprintf(c->cmp.paths[c->cmp.differences], sizeof c->cmp.paths[0], "%s: %s", check,
                     r->paths[i]);
            snprintf(c->cmp.why[c->cmp.differences], sizeof c->cmp.why[0], "%s", r->why[i]);
        }
        if (c->cmp.differences == 0)
            snprintf(c->first_check, sizeof c->first_check, "%s", check);
        c->cmp.differences++;
    }
}

/* Run a case; on failure retry with earlier --until so a difference in an
 * earlier state can still be found. *err gets the first failure. */
static fattn_h5_node *run_partial(const fattn_spec *s, fattn_impl impl, fattn_engine *e,
                                  char *err, size_t errn)
{
    static const fattn_state untils[] = {FATTN_STATE_BACKWARD, FATTN_STATE_SAVE_CTX,
                                         FATTN_STATE_FORWARD, FATTN_STATE_INPUTS};
    for (size_t i = 0; i < sizeof untils / sizeof untils[0]; i++) {
        fattn_run_opts o = {.impl = impl, .engine = e, .until = untils[i],
                            .poison = FATTN_POISON_PATTERN};
        fattn_h5_node *n = NULL;
        if (fattn_run_case(s, &o, &n) == FATTN_OK)
            return n;
        if (i == 0)
            snprintf(err, errn, "%s", fattn_last_error());
    }
    return NULL;
}

static const char *skipped_reason(const fattn_h5_node *n)
{
    const fattn_h5_attr *a = n ? fattn_h5_node_attr(n, "skipped") : NULL;
    return a && a->kind == FATTN_H5_ATTR_STRING ? a->s : NULL;
}

/* Checks 1-3 for one case. */
static void check_case(case_check *c, fattn_engine *e)
{
    char err_l[512] = "", err_s[512] = "";
    c->legacy = run_partial(c->spec, FATTN_IMPL_LEGACY, e, err_l, sizeof err_l);
    c->split = run_partial(c->spec, FATTN_IMPL_SPLIT, e, err_s, sizeof err_s);
    if (c->legacy && c->split) {
        const char *sl = skipped_reason(c->legacy), *ss = skipped_reason(c->split);
        if (sl && ss) {
            c->skipped = sl;
            return;
        }
        fattn_compare_result r = cmp_init(c, e);
        fattn_compare_cases(c->legacy, c->split, NULL, &r);
        check_note(c, "legacy vs split", &r);
    }
    if (err_l[0] || err_s[0] || !c->legacy || !c->split) {
        if (c->cmp.differences == 0)
            snprintf(c->error, sizeof c->error, "%s", err_l[0] ? err_l : err_s);
        return;
    }
    if (c->spec->is_training) {
        fattn_run_opts o = {.engine = e, .until = FATTN_STATE_BACKWARD,
                            .poison = FATTN_POISON_PATTERN};
        struct { const char *name; const fattn_h5_node *src; fattn_state from; fattn_impl impl; }
        replays[] = {
            {"replay legacy save_ctx -> split", c->legacy, FATTN_STATE_SAVE_CTX, FATTN_IMPL_SPLIT},
            {"replay split save_ctx -> legacy", c->split, FATTN_STATE_SAVE_CTX, FATTN_IMPL_LEGACY},
            {"replay split forward -> split", c->split, FATTN_STATE_FORWARD, FATTN_IMPL_SPLIT},
        };
        for (size_t i = 0; i < sizeof replays / sizeof replays[0]; i++) {
            o.impl = replays[i].impl;
            fattn_h5_node *x = NULL;
            if (fattn_replay_case(replays[i].src, replays[i].from, &o, &x) != FATTN_OK) {
                snprintf(c->error, sizeof c->error, "%s: %s", replays[i].name,
                         fattn_last_error());
                return;
            }
            fattn_compare_result r = cmp_init(c, e);
            fattn_compare_cases(replays[i].src, x, NULL, &r);
            check_note(c, replays[i].name, &r);
            fattn_h5_node_free(x);
        }
    }
    char err[512] = "";
    fattn_h5_node *again = run_partial(c->spec, FATTN_IMPL_SPLIT, e, err, sizeof err);
    if (!again || err[0]) {
        snprintf(c->error, sizeof c->error, "repeat: %s", err);
    } else {
        fattn_compare_result r = cmp_init(c, e);
        fattn_compare_cases(c->split, again, NULL, &r);
        check_note(c, "repeat", &r);
    }
    fattn_h5_node_free(again);
}

/* Against the goldens: bitwise on an exact platform-key match, else (tol
 * non-NULL) against CPU goldens within the tolerance profile. Dropout bits
 * are the engine's own, so dropout cases compare within one engine only. */
static void check_golden(case_check *c, const fattn_h5_node *goldens,
                         const fattn_tol_profile *tol, fattn_engine *e)
{
    if (!c->legacy || c->skipped || c->error[0])
        return;
    const fattn_h5_node *gc = goldens ? fattn_h5_node_find(goldens, "cases") : NULL;
    const fattn_h5_node *g = gc ? fattn_h5_node_find(gc, c->spec->id) : NULL;
    if (!g) {
        c->golden_missing = true;
        return;
    }
    fattn_compare_result r = cmp_init(c, e);
    if (!tol) {
        fattn_compare_cases(c->legacy, g, NULL, &r);
    } else if (c->spec->dropout_p > 0.0 && c->spec->is_training) {
        c->same_engine_only = true;
        return;
    } else {
        fattn_compare_cases_tol(c->legacy, g, tol, &r);
    }
    check_note(c, tol ? "golden (tolerance)" : "golden", &r);
}

/* The newest CPU goldens in dir (cpu-math-<N>.h5, highest N), for the
 * cross-platform comparison; 0 if none. */
static int newest_cpu_goldens(const char *dir, char *path, size_t n)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int best = -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        int v;
        char tail[8];
        if (sscanf(de->d_name, "cpu-math-%d.%7s", &v, tail) == 2 && !strcmp(tail, "h5") &&
            v > best)
            best = v;
    }
    closedir(d);
    if (best < 0)
        return 0;
    snprintf(path, n, "%s/cpu-math-%d.h5", dir, best);
    return 1;
}

static void states_str(const fattn_h5_node *n, char *buf)
{
    static const char *const st[] = {"inputs", "forward", "save_ctx", "backward"};
    static const char letters[] = "ifsb";
    for (int i = 0; i < 4; i++)
        buf[i] = n && fattn_h5_node_find(n, st[i]) ? letters[i] : '-';
    buf[4] = '\0';
}

static const char verify_help[] =
    "usage: fattn verify [--cases FILE] [--filter GLOB] [--backend auto|cpu|cudnn]\n"
    "                    [--fixtures DIR] [--json FILE] [--strict]\n"
    "\n"
    "The main job: is the refactor behaviour-neutral? For every case of the matrix, on one\n"
    "engine: legacy vs split bitwise for every state; cross-wired replays (legacy's save_ctx\n"
    "into split's backward, split's into legacy's, split's forward into setup_ctx) bitwise\n"
    "equal to the straight runs; each case run twice, bitwise; and everything against the\n"
    "goldens of this platform (DIR/<platform key>.h5), bitwise, inputs and save_ctx through\n"
    "their digests. Prints a table (case, states, tensors, result) and one verdict line.\n"
    "--fixtures defaults to the fixtures/ of the source tree fattn was built from:\n"
    "  " FATTN_SOURCE_ROOT "/fixtures\n"
    "Exit 0 behaviour-neutral, 1 a difference (or, with --strict, a skipped case or a case\n"
    "without golden), 2 usage error, missing fixtures directory, or an errored case.\n";

int fattn_cmd_golden(int argc, char **argv);

int fattn_cmd_verify(int argc, char **argv)
{
    const char *cases = NULL, *filter = NULL, *backend = "auto", *fixtures = NULL, *json = NULL;
    bool strict = false;
    cli_args a = {argc, argv, 1, "verify"};
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(verify_help, stdout);
            return FATTN_EXIT_OK;
        } else if (cli_flag(&a, "--strict")) {
            strict = true;
        } else if ((r = cli_opt(&a, "--cases", &cases)) || (r = cli_opt(&a, "--filter", &filter)) ||
                   (r = cli_opt(&a, "--backend", &backend)) ||
                   (r = cli_opt(&a, "--fixtures", &fixtures)) || (r = cli_opt(&a, "--json", &json))) {
            if (r < 0)
                return cli_fail("verify", "%s needs a value", argv[a.i]);
        } else {
            return cli_fail("verify", "unknown argument '%s' (see fattn verify --help)",
                            argv[a.i]);
        }
    }
    const char *fix_dir = fixtures ? fixtures : FATTN_SOURCE_ROOT "/fixtures";
    struct stat sb;
    if (stat(fix_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cli_fail("verify", "fixtures directory %s: %s", fix_dir,
                        errno ? strerror(errno) : "not a directory");
    cli_matrix m;
    if (cli_matrix_load("verify", cases, filter, NULL, &m) != FATTN_EXIT_OK)
        return FATTN_EXIT_ERROR;
    fattn_engine *e = NULL;
    const char *backend_name = NULL;
    if (cli_engine_open_opts("verify", backend, &deterministic_bwd, &e, &backend_name) !=
        FATTN_EXIT_OK) {
        cli_matrix_free(&m);
        return FATTN_EXIT_ERROR;
    }
    /* Bitwise checks need a backward that repeats bitwise: on cuDNN the
     * accumulator dQ does not (docs/determinism.md), so every case runs the
     * deterministic graph here, whatever its `deterministic` key says. */
    bool forced = fattn_engine_supports(e, FATTN_ENGINE_Q_FORCED_DETERMINISTIC_BWD);
    char key[128], gpath[4096];
    platform_key(e, key, sizeof key);
    snprintf(gpath, sizeof gpath, "%s/%s.h5", fix_dir, key);
    fattn_h5_node *goldens = NULL;
    const char *golden_note = "none for this platform";
    fattn_tol_profile profile, *tol = NULL;
    char note_buf[4300];
    bool exact = stat(gpath, &sb) == 0;
    if (!exact && newest_cpu_goldens(fix_dir, gpath, sizeof gpath)) {
        fattn_tol_profile_builtin(&profile);
        tol = &profile;
        snprintf(note_buf, sizeof note_buf,
                 "within tolerance (%s) on defined regions, because there are no goldens for "
                 "platform key %s", profile.version, key);
        golden_note = note_buf;
    }
    if (exact || tol) {
        if (fattn_runfile_load(gpath, &goldens) != FATTN_OK) {
            int rc = cli_fail("verify", "%s", fattn_last_error());
            if (tol)
                fattn_tol_profile_free(tol);
            cli_engine_close(e);
            cli_matrix_free(&m);
            return rc;
        }
        if (exact)
            golden_note = "bitwise (exact platform key match)";
    }
    printf("fattn verify: engine %s%s, platform key %s, goldens %s: %s\n", backend_name,
           forced ? " (deterministic backward forced)" : "", key,
           gpath, golden_note);
    printf("%-48s %-6s %7s  %s\n", "case", "states", "tensors", "result");

    size_t n_cases = m.n_sel, n_skip = 0, n_err = 0, n_diff = 0, n_nogold = 0, n_tensors = 0;
    size_t n_diff_objects = 0;
    json_t *jcases = json_array();
    case_check *first_bad = NULL;
    case_check *checks = calloc(m.n_sel ? m.n_sel : 1, sizeof *checks);
    for (size_t i = 0; i < m.n_sel; i++) {
        case_check *c = &checks[i];
        c->spec = m.sel[i];
        check_case(c, e);
        check_golden(c, goldens, tol, e);
        char states[8], result[600];
        states_str(c->split ? c->split : c->legacy, states);
        if (c->skipped) {
            n_skip++;
            snprintf(result, sizeof result, "skipped: %s", c->skipped);
        } else if (c->cmp.differences) {
            n_diff++;
            n_diff_objects += c->cmp.differences;
            snprintf(result, sizeof result, "DIFFERENT (%zu): %s %s", c->cmp.differences,
                     c->cmp.paths[0], c->cmp.why[0]);
            if (!first_bad)
                first_bad = c;
        } else if (c->error[0]) {
            n_err++;
            snprintf(result, sizeof result, "ERROR: %s", c->error);
        } else {
            snprintf(result, sizeof result, "ok%s%s",
                     c->golden_missing     ? " (no golden)"
                     : c->same_engine_only ? " (dropout: same-engine only)"
                                           : "",
                     c->noisy_within ? " (d_softmax_offset: non-deterministic on this engine, "
                                       "within its bound)"
                                     : "");
        }
        n_nogold += c->golden_missing;
        n_tensors += c->tensors;
        printf("%-48s %-6s %7zu  %s\n", c->spec->id, states, c->tensors, result);
        json_t *jd = json_array();
        for (size_t k = 0; k < c->cmp.differences && k < FATTN_COMPARE_MAX_REPORTED; k++)
            json_array_append_new(jd, json_pack("{s:s,s:s}", "path", c->cmp.paths[k], "why",
                                                c->cmp.why[k]));
        json_array_append_new(
            jcases, json_pack("{s:s,s:s,s:I,s:s,s:I,s:o,s:b}", "id", c->spec->id, "states", states,
                              "tensors", (json_int_t)c->tensors, "result",
                              c->skipped ? "skipped" : c->cmp.differences ? "different"
                                                       : c->error[0]    ? "error"
                                                                        : "ok",
                              "differences", (json_int_t)c->cmp.differences, "first", jd,
                              "golden", !c->golden_missing));
    }
    bool neutral = n_diff == 0 && n_err == 0;
    printf("behavior-neutral: %s (%zu cases, %zu tensors, %zu skipped, %zu differences%s%s)\n",
           neutral ? "yes" : "NO", n_cases, n_tensors, n_skip, n_diff_objects,
           n_err ? ", errors: " : "", n_err ? "yes" : "");
    if (n_err)
        printf("errored cases: %zu\n", n_err);
    if (n_nogold)
        printf("cases without golden on this platform: %zu\n", n_nogold);
    printf("FP8: not exercised\n");
    if (first_bad) {
        printf("first differences (%s, case %s):\n", first_bad->first_check, first_bad->spec->id);
        for (size_t k = 0; k < first_bad->cmp.differences && k < FATTN_COMPARE_MAX_REPORTED; k++)
            printf("  %s: %s\n", first_bad->cmp.paths[k], first_bad->cmp.why[k]);
    }
    int rc = n_err ? FATTN_EXIT_ERROR
                   : (n_diff || (strict && (n_skip || n_nogold))) ? FATTN_EXIT_DIFF
                                                                  : FATTN_EXIT_OK;
    if (json) {
        json_t *root = json_pack("{s:s,s:s,s:s,s:s,s:o,s:{s:I,s:I,s:I,s:I,s:I,s:I},s:s,s:i}",
                                 "schema", "fattn-verify/1", "engine", backend_name,
                                 "platform_key", key, "goldens", gpath, "cases", jcases,
                                 "summary", "cases", (json_int_t)n_cases, "tensors",
                                 (json_int_t)n_tensors, "skipped", (json_int_t)n_skip,
                                 "different_cases", (json_int_t)n_diff, "errors",
                                 (json_int_t)n_err, "without_golden", (json_int_t)n_nogold,
                                 "verdict", neutral ? "behavior-neutral" : "not behavior-neutral",
                                 "exit", rc);
        if (root)
            json_object_set_new(root, "forced_deterministic_bwd", json_boolean(forced));
        if (!root || json_dump_file(root, json, JSON_INDENT(1) | JSON_SORT_KEYS) != 0)
            rc = cli_fail("verify", "%s: cannot write the JSON report", json);
        json_decref(root);
    } else {
        json_decref(jcases);
    }
    for (size_t i = 0; i < m.n_sel; i++) {
        fattn_h5_node_free(checks[i].legacy);
        fattn_h5_node_free(checks[i].split);
    }
    free(checks);
    fattn_h5_node_free(goldens);
    if (tol)
        fattn_tol_profile_free(tol);
    cli_engine_close(e);
    cli_matrix_free(&m);
    return rc;
}

/* ---- golden ---------------------------------------------------------------- */

static const char golden_help[] =
    "usage: fattn golden [--cases FILE] [--backend auto|cpu|cudnn] [--force] -o DIR\n"
    "\n"
    "Regenerate the goldens of this platform as DIR/<platform key>.h5: forward and backward\n"
    "outputs in full, inputs and save_ctx as digests only, with provenance (version, git\n"
    "revision, platform key, SOURCE_DATE_EPOCH date). Refuses a non-empty DIR without\n"
    "--force, and refuses to write anything unless legacy == split and every case repeats\n"
    "bitwise in this same invocation. Prints what changed against the goldens it replaces.\n";

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

int fattn_cmd_golden(int argc, char **argv)
{
    const char *cases = NULL, *backend = "auto", *out = NULL;
    bool force = false;
    cli_args a = {argc, argv, 1, "golden"};
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(golden_help, stdout);
            return FATTN_EXIT_OK;
        } else if (cli_flag(&a, "--force")) {
            force = true;
        } else if ((r = cli_opt(&a, "--cases", &cases)) || (r = cli_opt(&a, "--backend", &backend)) ||
                   (r = cli_opt(&a, "-o", &out))) {
            if (r < 0)
                return cli_fail("golden", "%s needs a value", argv[a.i]);
        } else {
            return cli_fail("golden", "unknown argument '%s' (see fattn golden --help)",
                            argv[a.i]);
        }
    }
    if (!out)
        return cli_fail("golden", "-o DIR is required");
    bool exists;
    if (!dir_is_empty(out, &exists) && !force)
        return cli_fail("golden", "%s is not empty: pass --force to replace its goldens", out);
    if (!exists && mkdir(out, 0777) != 0)
        return cli_fail("golden", "cannot create %s: %s", out, strerror(errno));

    cli_matrix m;
    if (cli_matrix_load("golden", cases, NULL, NULL, &m) != FATTN_EXIT_OK)
        return FATTN_EXIT_ERROR;
    fattn_engine *e = NULL;
    const char *backend_name = NULL;
    if (cli_engine_open_opts("golden", backend, &deterministic_bwd, &e, &backend_name) !=
        FATTN_EXIT_OK) {
        cli_matrix_free(&m);
        return FATTN_EXIT_ERROR;
    }
    /* as verify runs them, so that verify can compare bitwise */
    bool forced = fattn_engine_supports(e, FATTN_ENGINE_Q_FORCED_DETERMINISTIC_BWD);
    char key[128], path[4096];
    platform_key(e, key, sizeof key);
    snprintf(path, sizeof path, "%s/%s.h5", out, key);

    fattn_h5_node *root = NULL, *cases_g = NULL;
    fattn_status st = fattn_h5_node_new_group("", &root);
    if (st == FATTN_OK)
        st = fattn_h5_node_group(root, "cases", &cases_g);
    if (st == FATTN_OK)
        st = fattn_runfile_set_provenance(root, "legacy", backend_name);
    if (st == FATTN_OK && forced)
        st = fattn_h5_node_set_uint8(root, "forced_deterministic_bwd", 1);
    if (st == FATTN_OK)
        st = fattn_h5_node_set_string(root, "platform_key", key);
    int rc = st == FATTN_OK ? FATTN_EXIT_OK : cli_fail("golden", "%s", fattn_last_error());
    size_t bad = 0;
    for (size_t i = 0; rc == FATTN_EXIT_OK && i < m.n_sel; i++) {
        case_check c;
        memset(&c, 0, sizeof c);
        c.spec = m.sel[i];
        check_case(&c, e);
        if (c.error[0]) {
            rc = cli_fail("golden", "case %s: %s", c.spec->id, c.error);
        } else if (c.cmp.differences) {
            fprintf(stderr, "fattn golden: case %s: %s %s (%s)\n", c.spec->id, c.cmp.paths[0],
                    c.cmp.why[0], c.first_check);
            bad++;
        } else {
            fattn_h5_node *g = NULL;
            st = fattn_compare_make_golden(c.legacy, &g);
            if (st == FATTN_OK)
                st = fattn_h5_node_adopt(cases_g, g);
            if (st != FATTN_OK)
                rc = cli_fail("golden", "%s", fattn_last_error());
        }
        fattn_h5_node_free(c.legacy);
        fattn_h5_node_free(c.split);
    }
    if (rc == FATTN_EXIT_OK && bad) {
        fprintf(stderr, "fattn golden: %zu case(s) differ between legacy and split or between "
                "repeats: nothing written\n", bad);
        rc = FATTN_EXIT_DIFF;
    }
    /* what changed against the goldens being replaced */
    if (rc == FATTN_EXIT_OK) {
        struct stat sb;
        fattn_h5_node *old = NULL;
        if (stat(path, &sb) == 0 && fattn_runfile_load(path, &old) == FATTN_OK) {
            const fattn_h5_node *oc = fattn_h5_node_find(old, "cases");
            size_t changed = 0, added = 0, removed = 0;
            for (size_t i = 0; i < cases_g->n_children; i++) {
                const fattn_h5_node *nc = cases_g->children[i];
                const fattn_h5_node *o = fattn_h5_node_find(oc, nc->name);
                if (!o) {
                    printf("golden: new case %s\n", nc->name);
                    added++;
                    continue;
                }
                fattn_compare_result r = {0};
                fattn_compare_cases(o, nc, NULL, &r);
                if (r.differences) {
                    printf("golden: case %s changed: %s %s\n", nc->name, r.paths[0], r.why[0]);
                    changed++;
                }
            }
            for (size_t i = 0; i < oc->n_children; i++)
                if (!fattn_h5_node_find(cases_g, oc->children[i]->name)) {
                    printf("golden: case %s removed\n", oc->children[i]->name);
                    removed++;
                }
            printf("golden: against the old %s: %zu changed, %zu new, %zu removed\n", path,
                   changed, added, removed);
            fattn_h5_node_free(old);
        } else {
            printf("golden: no previous goldens at %s\n", path);
        }
        if (fattn_h5_write_file(path, root, NULL, NULL) != FATTN_OK)
            rc = cli_fail("golden", "%s: %s", path, fattn_last_error());
        else
            printf("golden: wrote %zu cases to %s (platform key %s)\n", cases_g->n_children, path,
                   key);
    }
    fattn_h5_node_free(root);
    cli_engine_close(e);
    cli_matrix_free(&m);
    return rc;
}
