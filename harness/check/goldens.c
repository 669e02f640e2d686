/* Finding the goldens verify compares against (verify.h; docs/verify.md,
 * "Platform keys and goldens"): this platform's key, else a goldens file
 * of the same engine identity, else the newest CPU goldens within
 * tolerance. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compare.h"
#include "runfile.h"
#include "verify.h"

/* What decides the bits an engine computes, as a run file's root records
 * it (provenance): a goldens file of another device whose values of all
 * of these are this engine's computes the same bits where it ran the same
 * plans (the engine configs, checked case by case: prov_engine_tag). The
 * device's name is not among them: an H100 and an H200 of one sm, SM count
 * and cuDNN are the same engine. */
static const char *const identity_attrs[] = {"backend", "sm", "sm_count", "cudnn_version",
                                             "cpu_math_version", "forced_deterministic_bwd"};
#define N_IDENTITY (sizeof identity_attrs / sizeof identity_attrs[0])

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

/* This engine's identity: the provenance a golden of it would carry. */
static fattn_status own_identity(const fattn_engine *e, fh_h5_node **out)
{
    fattn_status st;
    if ((st = fh_h5_node_new_group("", out)) != FATTN_OK ||
        (st = fh_runfile_set_provenance(*out, "legacy", fattn_engine_name(e), e)) != FATTN_OK)
        return st;
    if (fattn_engine_supports(e, FATTN_ENGINE_Q_FORCED_DETERMINISTIC_BWD))
        return fh_h5_node_set_uint8(*out, "forced_deterministic_bwd", 1); /* as golden does */
    return FATTN_OK;
}

static bool same_attr(const fh_h5_node *a, const fh_h5_node *b, const char *name)
{
    const fh_h5_attr *x = fh_h5_node_attr(a, name), *y = fh_h5_node_attr(b, name);
    if (!x || !y)
        return false;
    char tx[256], ty[256];
    fh_compare_attr_text(x, tx, sizeof tx);
    fh_compare_attr_text(y, ty, sizeof ty);
    return !strcmp(tx, ty);
}

static int cmp_names(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* The first goldens file of dir (by name) other than `skip` whose root has
 * this engine's identity, loaded into *tree; its path into path. An error:
 * a file of that name that cannot be loaded. */
static fattn_status identity_goldens(const char *dir, const fattn_engine *e, double max_bytes,
                                     const char *skip,
                                     char *path, size_t n, fh_h5_node **tree)
{
    *tree = NULL;
    fh_h5_node *mine = NULL;
    char **names = NULL;
    size_t nn = 0, cap = 0;
    DIR *d;
    struct dirent *de;
    fattn_status st = own_identity(e, &mine);
    if (st != FATTN_OK)
        goto out;
    d = opendir(dir);
    while (d && (de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 3, ".h5") || !strcmp(de->d_name, skip))
            continue;
        if (nn == cap) {
            cap = cap ? 2 * cap : 8;
            char **nx = realloc(names, cap * sizeof *nx);
            if (!nx)
                break;
            names = nx;
        }
        if ((names[nn] = strdup(de->d_name)))
            nn++;
    }
    if (d)
        closedir(d);
    if (nn > 1)
        qsort(names, nn, sizeof *names, cmp_names);
    for (size_t i = 0; i < nn && !*tree; i++) {
        snprintf(path, n, "%s/%s", dir, names[i]);
        fh_h5_node *t = NULL;
        if ((st = fh_runfile_load_bounded(path, max_bytes, &t)) != FATTN_OK)
            goto out;
        bool same = true;
        for (size_t k = 0; k < N_IDENTITY && same; k++)
            same = same_attr(t, mine, identity_attrs[k]);
        if (same)
            *tree = t;
        else
            fh_h5_node_free(t);
    }
out:
    for (size_t i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    fh_h5_node_free(mine);
    return st;
}

/* "sm_90, 132 SMs, cuDNN 91900" (cuDNN) or "CPU math 1": what matched. */
static void identity_text(const fh_h5_node *t, char *buf, size_t n)
{
    char sm[64] = "", cnt[32] = "", cudnn[64] = "", math[32] = "";
    const fh_h5_attr *a;
    if ((a = fh_h5_node_attr(t, "sm")))
        fh_compare_attr_text(a, sm, sizeof sm);
    if ((a = fh_h5_node_attr(t, "sm_count")))
        fh_compare_attr_text(a, cnt, sizeof cnt);
    if ((a = fh_h5_node_attr(t, "cudnn_version")))
        fh_compare_attr_text(a, cudnn, sizeof cudnn);
    if ((a = fh_h5_node_attr(t, "cpu_math_version")))
        fh_compare_attr_text(a, math, sizeof math);
    if (strcmp(sm, "n/a") != 0 && sm[0])
        snprintf(buf, n, "%s, %s SMs, cuDNN %s", sm, cnt, cudnn);
    else
        snprintf(buf, n, "CPU math %s", math);
}

static fattn_status load_cpu_tolerance(const char *dir, double max_bytes,
                                      fh_verify_goldens *g)
{
    if (!newest_cpu_goldens(dir, g->cpu_path, sizeof g->cpu_path))
        return FATTN_OK;
    fh_tol_profile_builtin(&g->profile);
    g->profile_set = true;
    g->tolerance = true;
    return fh_runfile_load_bounded(g->cpu_path, max_bytes, &g->cpu_tree);
}

fattn_status fh_verify_goldens_open(const char *dir, const fattn_engine *e, double max_bytes,
                                       fh_verify_goldens *g)
{
    memset(g, 0, sizeof *g);
    fh_verify_platform_key(e, g->key, sizeof g->key);
    snprintf(g->path, sizeof g->path, "%s/%s.h5", dir, g->key);
    snprintf(g->note, sizeof g->note, "none for this platform");
    struct stat sb;
    char own[160];
    snprintf(own, sizeof own, "%s.h5", g->key);
    fattn_status st;
    g->exact = stat(g->path, &sb) == 0;
    if (g->exact) {
        if ((st = fh_runfile_load_bounded(g->path, max_bytes, &g->tree)) != FATTN_OK)
            goto out;
        snprintf(g->note, sizeof g->note, "bitwise (exact platform key match)");
    } else if ((st = identity_goldens(dir, e, max_bytes, own, g->path, sizeof g->path,
                                      &g->tree)) != FATTN_OK) {
        goto out;
    } else if (g->tree) {
        /* a case that ran other plans is compared as without goldens */
        g->identity = true;
        identity_text(g->tree, g->identity_text, sizeof g->identity_text);
        /* the note stands whatever the CPU goldens' load says; out: frees on failure */
        st = load_cpu_tolerance(dir, max_bytes, g);
        g->tolerance = false; /* the verdict rests on the identity goldens */
        snprintf(g->note, sizeof g->note, "bitwise (no goldens for platform key %s; same engine "
                 "identity: %s; each case's plans checked)", g->key, g->identity_text);
    } else if ((st = load_cpu_tolerance(dir, max_bytes, g)) != FATTN_OK) {
        goto out;
    } else if (g->tolerance) {
        snprintf(g->path, sizeof g->path, "%s", g->cpu_path);
        g->tree = g->cpu_tree;
        g->cpu_tree = NULL;
        snprintf(g->note, sizeof g->note,
                 "within tolerance (%s) on defined regions, because there are no goldens for "
                 "platform key %s", g->profile.version, g->key);
    }
out:
    if (st != FATTN_OK)
        fh_verify_goldens_free(g);
    return st;
}

void fh_verify_goldens_free(fh_verify_goldens *g)
{
    fh_h5_node_free(g->tree);
    fh_h5_node_free(g->cpu_tree);
    g->tree = g->cpu_tree = NULL;
    if (g->profile_set)
        fh_tol_profile_free(&g->profile);
    g->tolerance = g->identity = g->profile_set = false;
}
