/* Tolerance profiles: per-dtype (rtol, atol) plus per-path rules. See
 * tolerance.h and docs/diff.md. */
#include "tolerance.h"
#include "fileguard.h"

#include <errno.h>
#include <fnmatch.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void fh_tol_profile_builtin(fh_tol_profile *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->version, sizeof p->version, "%s", FH_TOL_BUILTIN_VERSION);
    static const struct {
        fattn_dtype t;
        double rtol, atol;
    } tab[] = {
        {FATTN_DTYPE_FLOAT32, 1.3e-6, 1e-5},
        {FATTN_DTYPE_FLOAT16, 1e-3, 1e-3},
        {FATTN_DTYPE_BFLOAT16, 1.5e-2, 1.5e-2},
        {FATTN_DTYPE_FLOAT8_E4M3FN, 0.125, 0.0675},
        {FATTN_DTYPE_FLOAT8_E5M2, 0.25, 0.125},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        p->dtype[tab[i].t] = (fh_tol){tab[i].rtol, tab[i].atol};
        p->have[tab[i].t] = true;
    }
}

void fh_tol_profile_free(fh_tol_profile *p)
{
    for (size_t i = 0; i < p->n_rules; i++)
        free(p->rules[i].glob);
    free(p->rules);
    p->rules = NULL;
    p->n_rules = p->cap_rules = 0;
}

static bool tol_ok(double rtol, double atol)
{
    return isfinite(rtol) && isfinite(atol) && rtol >= 0 && atol >= 0;
}

static fattn_status add_rule(fh_tol_profile *p, const char *glob, size_t glob_len,
                             fh_tol t)
{
    if (p->n_rules == p->cap_rules) {
        size_t cap = p->cap_rules ? 2 * p->cap_rules : 8;
        fh_tol_rule *nr = realloc(p->rules, cap * sizeof *nr);
        if (!nr)
            return fattn_error(FATTN_E_NOMEM, "tolerance rules: out of memory");
        p->rules = nr;
        p->cap_rules = cap;
    }
    char *g = malloc(glob_len + 1);
    if (!g)
        return fattn_error(FATTN_E_NOMEM, "tolerance rules: out of memory");
    memcpy(g, glob, glob_len);
    g[glob_len] = '\0';
    p->rules[p->n_rules++] = (fh_tol_rule){g, t};
    return FATTN_OK;
}

fattn_status fh_tol_profile_add_rule(fh_tol_profile *p, const char *spec)
{
    const char *eq = strrchr(spec, '=');
    if (!eq || eq == spec)
        return fattn_error(FATTN_E_INVALID_ARG, "--tol '%s': expected GLOB=RTOL,ATOL", spec);
    char *end;
    errno = 0;
    double rtol = strtod(eq + 1, &end);
    if (errno || end == eq + 1 || *end != ',')
        return fattn_error(FATTN_E_INVALID_ARG, "--tol '%s': expected GLOB=RTOL,ATOL", spec);
    const char *at = end + 1;
    double atol = strtod(at, &end);
    if (errno || end == at || *end != '\0' || !tol_ok(rtol, atol))
        return fattn_error(FATTN_E_INVALID_ARG,
                           "--tol '%s': expected GLOB=RTOL,ATOL with finite, non-negative "
                           "numbers",
                           spec);
    return add_rule(p, spec, (size_t)(eq - spec), (fh_tol){rtol, atol});
}

static fattn_status json_tol(const char *path, const char *what, json_t *o, fh_tol *t)
{
    json_t *r = json_object_get(o, "rtol"), *a = json_object_get(o, "atol");
    if (!json_is_number(r) || !json_is_number(a) || json_object_size(o) > 3 ||
        !tol_ok(json_number_value(r), json_number_value(a)))
        return fattn_error(FATTN_E_PARSE,
                           "%s: %s: want {\"rtol\": R, \"atol\": A} with finite, non-negative "
                           "numbers",
                           path, what);
    t->rtol = json_number_value(r);
    t->atol = json_number_value(a);
    return FATTN_OK;
}

fattn_status fh_tol_profile_load(const char *path, fh_tol_profile *p)
{
    json_error_t err;
    int fd;
    /* fileguard's open: a FIFO or a device as the profile is refused, not waited on */
    if (fh_fileguard_open_input(path, &fd) != FATTN_OK)
        return fattn_error(FATTN_E_IO, "%s", fattn_last_error());
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &err);
    close(fd);
    /* jansson gives every syntax error a message; an empty one is a failed allocation */
    if (!root && !err.text[0])
        return fattn_error(FATTN_E_NOMEM, "%s: out of memory parsing JSON", path);
    if (!root)
        return fattn_error(FATTN_E_PARSE, "%s:%d:%d: %s", path, err.line, err.column, err.text);
    fh_tol_profile np;
    memset(&np, 0, sizeof np);
    fattn_status st = FATTN_OK;
    json_t *ver = json_object_get(root, "version"), *dt = json_object_get(root, "dtypes");
    json_t *paths = json_object_get(root, "paths");
    const char *key;
    json_t *val;
    if (!json_is_object(root) || !json_is_string(ver) || !json_is_object(dt) ||
        (paths && !json_is_array(paths))) {
        st = fattn_error(FATTN_E_PARSE,
                         "%s: want {\"version\": S, \"dtypes\": {...}, \"paths\": [...]}", path);
        goto out;
    }
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "version") && strcmp(key, "dtypes") && strcmp(key, "paths") &&
            strcmp(key, "comment")) {
            st = fattn_error(FATTN_E_PARSE, "%s: unknown key \"%s\"", path, key);
            goto out;
        }
    }
    snprintf(np.version, sizeof np.version, "%s", json_string_value(ver));
    json_object_foreach(dt, key, val)
    {
        fattn_dtype t;
        if (fattn_dtype_parse(key, &t) != FATTN_OK || !fattn_dtype_is_float(t)) {
            st = fattn_error(FATTN_E_PARSE, "%s: dtypes: \"%s\" is not a float dtype", path, key);
            goto out;
        }
        if ((st = json_tol(path, key, val, &np.dtype[t])) != FATTN_OK)
            goto out;
        np.have[t] = true;
    }
    size_t i;
    json_array_foreach(paths, i, val)
    {
        json_t *g = json_object_get(val, "glob");
        fh_tol t;
        if (!json_is_string(g)) {
            st = fattn_error(FATTN_E_PARSE, "%s: paths[%zu]: want a \"glob\" string", path, i);
            goto out;
        }
        if ((st = json_tol(path, "paths[]", val, &t)) != FATTN_OK ||
            (st = add_rule(&np, json_string_value(g), strlen(json_string_value(g)), t)) !=
                FATTN_OK)
            goto out;
    }
    fh_tol_profile_free(p);
    *p = np;
    json_decref(root);
    return FATTN_OK;
out:
    fh_tol_profile_free(&np);
    json_decref(root);
    return st;
}

fh_tol fh_tol_profile_lookup(const fh_tol_profile *p, const char *path,
                                   fattn_dtype dtype)
{
    fh_tol t = p->have[dtype] ? p->dtype[dtype] : (fh_tol){0, 0};
    for (size_t i = 0; i < p->n_rules; i++)
        if (fnmatch(p->rules[i].glob, path, 0) == 0)
            t = p->rules[i].tol;
    return t;
}
