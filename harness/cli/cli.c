/* The CLI's shared pieces: option scanning, failure messages, the case
 * matrix and the engines commands run on (cli.h). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "fattn/cudnn.h"
#include "fattn/support.h"

#include "cli.h"
#include "digest.h"
#include "fileguard.h"

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

const char *cli_s(size_t n) { return n == 1 ? "" : "s"; }

size_t cli_count_datasets(const fh_h5_node *n)
{
    if (n->is_dataset)
        return 1;
    size_t k = 0;
    for (size_t i = 0; i < n->n_children; i++)
        k += cli_count_datasets(n->children[i]);
    return k;
}

/* A decimal count of 1..CLI_SHARD_MAX digits only (no sign, no blanks,
 * no wrap: strtol saturates silently on overflow). *end is the first
 * character after the digits; false when there are none or too many. */
static bool parse_count(const char *s, const char **end, long *out)
{
    long v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (CLI_SHARD_MAX - (*p - '0')) / 10)
            return false;
        v = v * 10 + (*p - '0');
    }
    *end = p;
    *out = v;
    return p != s;
}

static int parse_shard(const char *cmd, const char *s, long *idx, long *count)
{
    const char *end;
    if (!parse_count(s, &end, idx) || *end != '/' || !parse_count(end + 1, &end, count) ||
        *end != '\0')
        return cli_fail(cmd, "--shard '%s': expected I/N, integers 1..%ld", s,
                        (long)CLI_SHARD_MAX);
    if (*count < 1 || *idx < 1 || *idx > *count)
        return cli_fail(cmd, "--shard '%s': need 1 <= I <= N", s);
    return FH_EXIT_OK;
}

int cli_parse_max_memory(const char *cmd, const char *s, double *bytes)
{
    char *end;
    errno = 0;
    /* plain decimal (an exponent allowed): strtod would also take blanks,
     * a sign and hex ("0x10") */
    bool plain = s[0] >= '0' && s[0] <= '9' && !strpbrk(s, "xXpP");
    double v = plain ? strtod(s, &end) : 0.0;
    /* inf, nan, 1e400 (ERANGE) and anything past 2^63 would switch the
     * guard off instead of setting it. */
    if (!plain || end == s || *end || errno == ERANGE || !isfinite(v) || !(v > 0) ||
        v > 0x1p63)
        return cli_fail(cmd, "--max-memory '%s': expected a positive, finite byte count "
                        "(at most 2^63)", s);
    *bytes = v;
    return FH_EXIT_OK;
}

double cli_default_max_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages <= 0 || page <= 0 ? 4.0 * (1 << 30) : 0.5 * (double)pages * (double)page;
}

int cli_max_memory_or_default(const char *cmd, const char *s, double *bytes)
{
    *bytes = cli_default_max_memory();
    int rc = s ? cli_parse_max_memory(cmd, s, bytes) : FH_EXIT_OK;
    /* the private copies of inputs count too where $TMPDIR is in memory */
    if (rc == FH_EXIT_OK)
        fh_fileguard_set_memory_bound(*bytes);
    return rc;
}

int cli_parse_count_arg(const char *cmd, const char *flag, const char *s, long lo, long hi,
                        long *out)
{
    const char *end;
    if (!parse_count(s, &end, out) || *end != '\0' || *out < lo || *out > hi)
        return cli_fail(cmd, "%s '%s': expected a whole number from %ld to %ld", flag, s, lo,
                        hi);
    return FH_EXIT_OK;
}

int cli_parse_te_rules(const char *cmd, const char *s, unsigned *rules)
{
    *rules = FATTN_TE_RULES_NEWEST;
    if (s && fattn_te_rules_parse(s, rules) != FATTN_OK)
        return cli_fail(cmd, "--te-rules '%s': expected one of " FATTN_TE_RULES_KNOWN, s);
    return FH_EXIT_OK;
}

/* The case file through fileguard's open (a FIFO or a device as --cases is
 * refused instead of blocking or reading forever), at most
 * FH_SPEC_MAX_FILE_BYTES, parsed as fh_spec_load_file would. */
static fattn_status cases_file_load(const char *path, fh_spec_list *out)
{
    int fd;
    fattn_status st = fh_fileguard_open_input(path, &fd);
    if (st != FATTN_OK)
        return st;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len == cap) {
            char *nb = cap >= FH_SPEC_MAX_FILE_BYTES ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                st = cap >= FH_SPEC_MAX_FILE_BYTES
                         ? fattn_error(FATTN_E_INVALID_ARG, "%s: larger than %u bytes", path,
                                       (unsigned)FH_SPEC_MAX_FILE_BYTES)
                         : fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + len, cap - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            st = fattn_error(FATTN_E_IO, "%s: read failed: %s", path, strerror(errno));
        else if (got == 0)
            st = fh_spec_parse_json(buf, len, path, out);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    if (!buf)
        st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
    free(buf);
    close(fd);
    return st;
}

/* A gate must never pass on nothing: a selection of zero cases is a usage
 * error, named by what emptied it. Frees what cli_matrix_load loaded. */
static int matrix_empty(const char *cmd, const char *cases_path, const char *filter,
                        const char *shard, cli_matrix *m)
{
    const char *src = cases_path ? cases_path : "the default matrix";
    size_t all = m->all.count;
    cli_matrix_free(m);
    memset(m, 0, sizeof *m);
    if (all == 0)
        return cli_fail(cmd, "%s holds no cases", src);
    if (filter)
        return cli_fail(cmd, "no case matches --filter '%s'%s%s (%zu case%s in %s; a filter is "
                        "a glob over whole case ids, e.g. '*thd*')", filter,
                        shard ? " in --shard " : "", shard ? shard : "", all, cli_s(all), src);
    return cli_fail(cmd, "--shard %s selects no case (%zu case%s in %s)", shard ? shard : "?",
                    all, cli_s(all), src);
}

int cli_matrix_load(const char *cmd, const char *cases_path, const char *filter,
                    const char *shard, cli_matrix *m)
{
    memset(m, 0, sizeof *m);
    long si = 1, sn = 1;
    if (shard && parse_shard(cmd, shard, &si, &sn) != FH_EXIT_OK)
        return FH_EXIT_ERROR;
    m->shard_i = si;
    m->shard_n = sn;
    fattn_status st = cases_path ? cases_file_load(cases_path, &m->all)
                                 : fh_spec_load_default(&m->all);
    if (st != FATTN_OK)
        return cli_fail(cmd, "%s", fattn_last_error());
    m->sel = calloc(m->all.count ? m->all.count : 1, sizeof *m->sel);
    if (!m->sel)
        return cli_fail(cmd, "out of memory");
    for (size_t k = 0; k < m->all.count; k++) {
        const fh_spec *s = &m->all.items[k];
        if ((long)(k % (size_t)sn) + 1 != si)
            continue;
        if (filter && !fh_spec_matches_glob(s->id, filter))
            continue;
        m->sel[m->n_sel++] = s;
    }
    if (m->n_sel == 0)
        return matrix_empty(cmd, cases_path, filter, shard, m);
    return FH_EXIT_OK;
}

int cli_matrix_keep_keyword(const char *cmd, cli_matrix *m, const char *keyword,
                            const char *filter)
{
    size_t kept = 0, before = m->n_sel;
    for (size_t i = 0; i < m->n_sel; i++)
        if (strstr(m->sel[i]->id, keyword))
            m->sel[kept++] = m->sel[i];
    m->n_sel = kept;
    m->keyword = keyword;
    if (kept)
        return FH_EXIT_OK;
    cli_matrix_free(m);
    return cli_fail(cmd, "no case id contains -k '%s' (%zu case%s selected%s; -k is a plain "
                    "substring of the id)", keyword, before, cli_s(before),
                    filter ? " by --filter" : "");
}

static int cmp_spec_ptr(const void *x, const void *y)
{
    return strcmp((*(const fh_spec *const *)x)->id, (*(const fh_spec *const *)y)->id);
}

fattn_status cli_matrix_digest(const cli_matrix *m, const char *filter, char *out,
                               size_t *count)
{
    const fh_spec **kept = calloc(m->all.count ? m->all.count : 1, sizeof *kept);
    if (!kept)
        return fattn_error(FATTN_E_NOMEM, "matrix digest: out of memory");
    size_t n = 0;
    for (size_t k = 0; k < m->all.count; k++)
        if ((!filter || fh_spec_matches_glob(m->all.items[k].id, filter)) &&
            (!m->keyword || strstr(m->all.items[k].id, m->keyword)))
            kept[n++] = &m->all.items[k];
    /* by id (ids are unique): a run's bytes do not depend on the listing order */
    qsort((void *)kept, n, sizeof *kept, cmp_spec_ptr);
    fh_digest_state d;
    char *json = NULL;
    fattn_status st = fh_digest_init(&d);
    if (st != FATTN_OK)
        goto out;
    for (size_t k = 0; k < n; k++) {
        if ((st = fh_spec_canonical(kept[k], &json)) != FATTN_OK ||
            (st = fh_digest_update(&d, json, strlen(json))) != FATTN_OK ||
            (st = fh_digest_update(&d, "\n", 1)) != FATTN_OK)
            goto out;
        free(json);
        json = NULL;
    }
    st = fh_digest_final(&d, out);
out:
    free(json);
    free(kept);
    *count = n;
    fh_digest_free(&d); /* nothing left to free after the final or a failed init */
    return st;
}

void cli_matrix_free(cli_matrix *m)
{
    free(m->sel);
    fh_spec_list_free(&m->all);
    memset(m, 0, sizeof *m);
}

/* ---- engines --------------------------------------------------------------- */

/* The plan cache of the cuDNN engines this process's commands open.
 * Building a plan takes up to seconds, executing one milliseconds, so a
 * second `verify` in the same process finds every plan built. It holds
 * plans only: every command's engine is new, with that command's options.
 * The engine registry makes it on the first cuDNN engine; whoever calls
 * commands frees it with cli_engines_shutdown. */
static fattn_cudnn_plan_cache *plan_cache;

/* The cuDNN engine's settings: the FATTN_CUDNN_* and FATTN_CUDART_LIB
 * variables, read here and nowhere in the library (docs/cudnn-engine.md).
 * The strings stay the environment's. */
static fattn_cudnn_settings cudnn_settings;

static fattn_status cudnn_settings_read(fattn_cudnn_settings *out)
{
    return fattn_cudnn_settings_parse(getenv("FATTN_CUDNN_AUTOTUNE"), getenv("FATTN_CUDNN_BWD"),
                                      getenv("FATTN_CUDNN_DET"), getenv("FATTN_CUDNN_DET_TAG"),
                                      getenv("FATTN_CUDNN_PLAN_DIR"), getenv("FATTN_CUDNN_LIB"),
                                      getenv("FATTN_CUDART_LIB"), out);
}

int cli_cudnn_libraries(const char *cmd)
{
    fattn_cudnn_settings libs;
    if (fattn_cudnn_settings_parse(NULL, NULL, NULL, NULL, NULL, getenv("FATTN_CUDNN_LIB"),
                                   getenv("FATTN_CUDART_LIB"), &libs) != FATTN_OK ||
        fattn_cudnn_use_libraries(&libs) != FATTN_OK)
        return cli_fail(cmd, "%s", fattn_last_error());
    return FH_EXIT_OK;
}

int cli_engine_open_opts(const char *cmd, const char *backend, const fattn_engine_options *opt,
                         fattn_engine **e, const char **backend_name)
{
    fattn_engine_options o = opt ? *opt : (fattn_engine_options){0};
    o.plan_cache = &plan_cache;
    if (cudnn_settings_read(&cudnn_settings) != FATTN_OK ||
        fattn_cudnn_use_libraries(&cudnn_settings) != FATTN_OK)
        return cli_fail(cmd, "%s", fattn_last_error());
    o.cudnn_settings = &cudnn_settings;
    bool want_auto = !backend || !strcmp(backend, "auto");
    if (!want_auto && !fattn_engine_kind_known(backend))
        return cli_fail(cmd, "--backend '%s': expected auto, cpu or cudnn", backend);
    if (!want_auto) {
        if (fattn_engine_open(backend, &o, e) != FATTN_OK)
            return cli_fail(cmd, "--backend %s: %s", backend, fattn_last_error());
        *backend_name = fattn_engine_name(*e);
        return FH_EXIT_OK;
    }
    /* auto: the cuDNN engine when a usable GPU is present, else the CPU */
    if (fattn_engine_open_auto(&o, e, backend_name) != FATTN_OK)
        return cli_fail(cmd, "%s", fattn_last_error());
    return FH_EXIT_OK;
}

int cli_engine_open(const char *cmd, const char *backend, fattn_engine **e,
                    const char **backend_name)
{
    return cli_engine_open_opts(cmd, backend, NULL, e, backend_name);
}

void cli_engine_close(fattn_engine *e)
{
    fattn_engine_free(e);
}

int cli_engine_cached_plans(void)
{
    return fattn_cudnn_plan_cache_count(plan_cache);
}

const fattn_cudnn_plan_cache *cli_plan_cache(void)
{
    return plan_cache;
}

/* The temporary plan store cli_plan_store_prepare made, and the process
 * that made it (a forked child inherits both and must leave the directory
 * to its parent). */
static char *temp_store;
static pid_t temp_store_owner;
static int temp_store_slot = -1; /* its signal-cleanup registration */

int cli_plan_store_prepare(const char *cmd)
{
    const char *env = getenv("FATTN_CUDNN_PLAN_DIR");
    if ((env && *env) || temp_store)
        return FH_EXIT_OK;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    size_t n = strlen(tmp) + sizeof "/fattn-plans-XXXXXX";
    char *dir = malloc(n);
    if (!dir)
        return cli_fail(cmd, "plan store: out of memory");
    snprintf(dir, n, "%s/fattn-plans-XXXXXX", tmp);
    if (!mkdtemp(dir)) {
        int rc = cli_fail(cmd, "plan store: cannot make a directory in %s: %s", tmp,
                          strerror(errno));
        free(dir);
        return rc;
    }
    if (setenv("FATTN_CUDNN_PLAN_DIR", dir, 1) != 0) {
        rmdir(dir);
        free(dir);
        return cli_fail(cmd, "plan store: setenv: %s", strerror(errno));
    }
    temp_store = dir;
    temp_store_owner = getpid();
    /* removed on SIGINT, SIGTERM, SIGHUP, SIGPIPE too (after the
     * plan-building children are killed: fileguard.h) */
    temp_store_slot = fh_fileguard_scratch_dir_register(dir);
    return FH_EXIT_OK;
}

/* Empties and removes the temporary store (its files are the store's own:
 * plans and the store's temporary names, no subdirectories). */
static void temp_store_remove(void)
{
    if (!temp_store)
        return;
    if (temp_store_owner == getpid()) {
        fh_fileguard_scratch_unregister(temp_store_slot);
        temp_store_slot = -1;
        DIR *d = opendir(temp_store);
        if (d) {
            int dfd = dirfd(d);
            for (struct dirent *ent; (ent = readdir(d)) != NULL;)
                if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, ".."))
                    unlinkat(dfd, ent->d_name, 0);
            closedir(d);
        }
        rmdir(temp_store);
        unsetenv("FATTN_CUDNN_PLAN_DIR");
    }
    free(temp_store);
    temp_store = NULL;
}

void cli_engines_shutdown(void)
{
    fattn_cudnn_plan_cache_free(plan_cache);
    plan_cache = NULL;
    temp_store_remove();
}
