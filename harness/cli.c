/* The CLI's shared pieces: option scanning, failure messages, the case
 * matrix and the engines commands run on (cli.h). */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/cudnn.h"

#include "cli.h"

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

/* ---- engines --------------------------------------------------------------- */

/* The process-wide cuDNN engine. Its plan cache is what makes a second
 * command cheap (building a plan takes up to seconds, executing one
 * milliseconds), so the engine outlives the command: a second `verify` in
 * the same process finds every plan built. The CPU engine has no such state
 * and stays per command. */
static fattn_engine *shared_cudnn;

/* The shared cuDNN engine, created on first use, handed out with a fresh
 * engine's settings (each command sets what it needs): only the plan cache
 * carries over from an earlier command. */
static fattn_status open_shared_cudnn(fattn_engine **out)
{
    if (!shared_cudnn) {
        fattn_status st = fattn_engine_init_cudnn(&shared_cudnn, NULL);
        if (st != FATTN_OK)
            return st;
    }
    fattn_status st = fattn_cudnn_set_force_deterministic(shared_cudnn, false);
    if (st == FATTN_OK)
        st = fattn_cudnn_set_timing(shared_cudnn, 0);
    if (st == FATTN_OK)
        st = fattn_cudnn_capture_dropout_mask(shared_cudnn, NULL, 0);
    if (st == FATTN_OK)
        *out = shared_cudnn;
    return st;
}

int cli_engine_open(const char *cmd, const char *backend, fattn_engine **e,
                    const char **backend_name)
{
    bool want_auto = !backend || !strcmp(backend, "auto");
    if (!want_auto && strcmp(backend, "cpu") && strcmp(backend, "cudnn"))
        return cli_fail(cmd, "--backend '%s': expected auto, cpu or cudnn", backend);
    /* auto: the cuDNN engine when a usable GPU is present, else the CPU */
    if (!want_auto && !strcmp(backend, "cudnn")) {
        if (open_shared_cudnn(e) != FATTN_OK)
            return cli_fail(cmd, "--backend cudnn: %s", fattn_last_error());
        *backend_name = "cudnn";
        return FATTN_EXIT_OK;
    }
    if (want_auto && fattn_cudnn_available() && open_shared_cudnn(e) == FATTN_OK) {
        *backend_name = "cudnn";
        return FATTN_EXIT_OK;
    }
    if (fattn_engine_init_cpu(e, NULL) != FATTN_OK)
        return cli_fail(cmd, "%s", fattn_last_error());
    *backend_name = "cpu";
    return FATTN_EXIT_OK;
}

void cli_engine_close(fattn_engine *e)
{
    if (e != shared_cudnn)
        fattn_engine_free(e);
}

int cli_engine_cached_plans(void)
{
    return shared_cudnn ? fattn_cudnn_plan_count(shared_cudnn) : 0;
}

const fattn_engine *cli_engine_shared(void)
{
    return shared_cudnn;
}

void cli_engines_shutdown(void)
{
    fattn_engine_free(shared_cudnn);
    shared_cudnn = NULL;
}
