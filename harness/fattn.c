/* fattn: the command-line tool. `fattn --help` lists the commands; each
 * command has its own --help. Messages go to stderr and name the file,
 * case, object and cause; exit codes are in cli.h. */
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fattn_config.h"

#include "cli.h"
#include "fattn/cudnn.h"

int cli_opt(cli_args *a, const char *name, const char **value)
{
    const char *arg = a->argv[a->i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0)
        return 0;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0')
        return 0;
    if (a->i + 1 >= a->argc)
        return -1;
    *value = a->argv[++a->i];
    return 1;
}

bool cli_flag(cli_args *a, const char *name) { return strcmp(a->argv[a->i], name) == 0; }

int cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fattn %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return FATTN_EXIT_ERROR;
}

static int parse_shard(const char *cmd, const char *s, long *idx, long *count)
{
    char *end;
    *idx = strtol(s, &end, 10);
    if (*end != '/')
        return cli_fail(cmd, "--shard '%s': expected I/N", s);
    *count = strtol(end + 1, &end, 10);
    if (*end != '\0' || *count < 1 || *idx < 1 || *idx > *count)
        return cli_fail(cmd, "--shard '%s': need 1 <= I <= N", s);
    return FATTN_EXIT_OK;
}

int cli_matrix_load(const char *cmd, const char *cases_path, const char *filter,
                    const char *shard, cli_matrix *m)
{
    memset(m, 0, sizeof *m);
    long si = 1, sn = 1;
    if (shard && parse_shard(cmd, shard, &si, &sn) != FATTN_EXIT_OK)
        return FATTN_EXIT_ERROR;
    fattn_status st = cases_path ? fattn_spec_load_file(cases_path, &m->all)
                                 : fattn_spec_load_default(&m->all);
    if (st != FATTN_OK)
        return cli_fail(cmd, "%s", fattn_last_error());
    m->sel = calloc(m->all.count ? m->all.count : 1, sizeof *m->sel);
    if (!m->sel)
        return cli_fail(cmd, "out of memory");
    for (size_t k = 0; k < m->all.count; k++) {
        const fattn_spec *s = &m->all.items[k];
        if ((long)(k % (size_t)sn) + 1 != si)
            continue;
        if (filter && !fattn_spec_matches_glob(s->id, filter))
            continue;
        m->sel[m->n_sel++] = s;
    }
    return FATTN_EXIT_OK;
}

void cli_matrix_free(cli_matrix *m)
{
    free(m->sel);
    fattn_spec_list_free(&m->all);
    memset(m, 0, sizeof *m);
}

int cli_engine_open(const char *cmd, const char *backend, fattn_engine **e,
                    const char **backend_name)
{
    bool want_auto = !backend || !strcmp(backend, "auto");
    if (!want_auto && strcmp(backend, "cpu") && strcmp(backend, "cudnn"))
        return cli_fail(cmd, "--backend '%s': expected auto, cpu or cudnn", backend);
    /* auto: the cuDNN engine when a usable GPU is present, else the CPU */
    if (!want_auto && !strcmp(backend, "cudnn")) {
        if (fattn_engine_init_cudnn(e, NULL) != FATTN_OK)
            return cli_fail(cmd, "--backend cudnn: %s", fattn_last_error());
        *backend_name = "cudnn";
        return FATTN_EXIT_OK;
    }
    if (want_auto && fattn_cudnn_available() && fattn_engine_init_cudnn(e, NULL) == FATTN_OK) {
        *backend_name = "cudnn";
        return FATTN_EXIT_OK;
    }
    if (fattn_engine_init_cpu(e, NULL) != FATTN_OK)
        return cli_fail(cmd, "%s", fattn_last_error());
    *backend_name = "cpu";
    return FATTN_EXIT_OK;
}

/* ---- cases ----------------------------------------------------------------- */

static const char cases_help[] =
    "usage: fattn cases [--cases FILE] [--filter GLOB]\n"
    "\n"
    "Print one line per case of the matrix: its id, a tab, a summary.\n"
    "Without --cases, the default matrix compiled in from golden/default_cases.json.\n";

int fattn_cmd_cases(int argc, char **argv)
{
    const char *cases = NULL, *filter = NULL;
    cli_args a = {argc, argv, 1, "cases"};
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(cases_help, stdout);
            return FATTN_EXIT_OK;
        } else if ((r = cli_opt(&a, "--cases", &cases)) || (r = cli_opt(&a, "--filter", &filter))) {
            if (r < 0)
                return cli_fail("cases", "%s needs a value", argv[a.i]);
        } else {
            return cli_fail("cases", "unknown argument '%s' (see fattn cases --help)", argv[a.i]);
        }
    }
    cli_matrix m;
    if (cli_matrix_load("cases", cases, filter, NULL, &m) != FATTN_EXIT_OK)
        return FATTN_EXIT_ERROR;
    for (size_t i = 0; i < m.n_sel; i++) {
        char summary[512];
        fattn_spec_summary(m.sel[i], summary, sizeof summary);
        printf("%s\t%s\n", m.sel[i]->id, summary);
    }
    cli_matrix_free(&m);
    return FATTN_EXIT_OK;
}

/* ---- main ------------------------------------------------------------------ */

static const char main_help[] =
    "usage: fattn COMMAND [OPTIONS]\n"
    "\n"
    "Prove refactors of TransformerEngine's fused attention behaviour-neutral, bit for bit.\n"
    "\n"
    "commands:\n"
    "  cases    list the cases of a matrix\n"
    "  run      step cases through inputs, forward, save_ctx, backward; write a run file\n"
    "  replay   resume every case of a run file from a stored state with another front end\n"
    "  inspect  print a run file's tree, then validate it fully\n"
    "  merge    join run files of disjoint shards of one matrix\n"
    "  diff     compare two run files: provenance, structure, bits, ULP or tolerance\n"
    "  verify   the main job: legacy vs split, replays, repeats and goldens -> one verdict\n"
    "  golden   regenerate this platform's goldens\n"
    "\n"
    "exit codes: 0 identical/valid/passed, 1 a difference, 2 usage error, invalid file or\n"
    "an errored case.\n"
    "`fattn COMMAND --help` describes each command.\n"
    "default fixtures: " FATTN_SOURCE_ROOT "/fixtures\n";

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(main_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? FATTN_EXIT_ERROR : FATTN_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("fattn %s\n", FATTN_VERSION);
        return FATTN_EXIT_OK;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {
        {"cases", fattn_cmd_cases}, {"run", fattn_cmd_run},       {"replay", fattn_cmd_replay},
        {"inspect", fattn_cmd_inspect}, {"merge", fattn_cmd_merge},
        {"diff", fattn_cmd_diff}, {"verify", fattn_cmd_verify}, {"golden", fattn_cmd_golden},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
    return cli_fail(argv[1], "unknown command (see fattn --help)");
}
