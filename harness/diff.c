/* fattn diff: compare two run files. See diff.h and docs/diff.md. */
#include "diff.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "h5io.h"
#include "isolate.h"

#define DIFF_WORST 5
#define DIFF_CHUNK_DEFAULT ((size_t)4 << 20)
#define RUN_SCHEMA "fattn-run/1"

/* ------------------------------------------------------------------------ */
/* Tolerance profiles                                                       */
/* ------------------------------------------------------------------------ */

void fattn_tol_profile_builtin(fattn_tol_profile *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->version, sizeof p->version, "%s", FATTN_TOL_BUILTIN_VERSION);
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
        p->dtype[tab[i].t] = (fattn_tol){tab[i].rtol, tab[i].atol};
        p->have[tab[i].t] = true;
    }
}

void fattn_tol_profile_free(fattn_tol_profile *p)
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

static fattn_status add_rule(fattn_tol_profile *p, const char *glob, size_t glob_len,
                             fattn_tol t)
{
    if (p->n_rules == p->cap_rules) {
        size_t cap = p->cap_rules ? 2 * p->cap_rules : 8;
        fattn_tol_rule *nr = realloc(p->rules, cap * sizeof *nr);
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
    p->rules[p->n_rules++] = (fattn_tol_rule){g, t};
    return FATTN_OK;
}

fattn_status fattn_tol_profile_add_rule(fattn_tol_profile *p, const char *spec)
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
    return add_rule(p, spec, (size_t)(eq - spec), (fattn_tol){rtol, atol});
}

static fattn_status json_tol(const char *path, const char *what, json_t *o, fattn_tol *t)
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

fattn_status fattn_tol_profile_load(const char *path, fattn_tol_profile *p)
{
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return fattn_error(FATTN_E_PARSE, "%s:%d:%d: %s", path, err.line, err.column, err.text);
    fattn_tol_profile np;
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
        fattn_tol t;
        if (!json_is_string(g)) {
            st = fattn_error(FATTN_E_PARSE, "%s: paths[%zu]: want a \"glob\" string", path, i);
            goto out;
        }
        if ((st = json_tol(path, "paths[]", val, &t)) != FATTN_OK ||
            (st = add_rule(&np, json_string_value(g), strlen(json_string_value(g)), t)) !=
                FATTN_OK)
            goto out;
    }
    fattn_tol_profile_free(p);
    *p = np;
    json_decref(root);
    return FATTN_OK;
out:
    fattn_tol_profile_free(&np);
    json_decref(root);
    return st;
}

fattn_tol fattn_tol_profile_lookup(const fattn_tol_profile *p, const char *path,
                                   fattn_dtype dtype)
{
    fattn_tol t = p->have[dtype] ? p->dtype[dtype] : (fattn_tol){0, 0};
    for (size_t i = 0; i < p->n_rules; i++)
        if (fnmatch(p->rules[i].glob, path, 0) == 0)
            t = p->rules[i].tol;
    return t;
}

/* ------------------------------------------------------------------------ */
/* Elements                                                                 */
/* ------------------------------------------------------------------------ */

static unsigned sign_shift(fattn_dtype t)
{
    switch (t) {
    case FATTN_DTYPE_FLOAT32: return 31;
    case FATTN_DTYPE_FLOAT16:
    case FATTN_DTYPE_BFLOAT16: return 15;
    default: return 7;
    }
}

uint64_t fattn_diff_ulp(fattn_dtype dtype, uint64_t a_bits, uint64_t b_bits)
{
    unsigned s = sign_shift(dtype);
    uint64_t mag_mask = ((uint64_t)1 << s) - 1;
    int64_t oa = (int64_t)(a_bits & mag_mask), ob = (int64_t)(b_bits & mag_mask);
    if ((a_bits >> s) & 1)
        oa = -oa;
    if ((b_bits >> s) & 1)
        ob = -ob;
    return oa > ob ? (uint64_t)(oa - ob) : (uint64_t)(ob - oa);
}

static uint64_t load_bits(const unsigned char *p, size_t esize)
{
    switch (esize) {
    case 1: return p[0];
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

static double decode(fattn_dtype t, uint64_t bits)
{
    switch (t) {
    case FATTN_DTYPE_FLOAT32: return (double)fattn_f32_from_bits((uint32_t)bits);
    case FATTN_DTYPE_FLOAT16: return (double)fattn_f16_to_f32((fattn_f16){(uint16_t)bits});
    case FATTN_DTYPE_BFLOAT16: return (double)fattn_bf16_to_f32((fattn_bf16){(uint16_t)bits});
    case FATTN_DTYPE_FLOAT8_E4M3FN: return (double)fattn_e4m3_to_f32((fattn_e4m3){(uint8_t)bits});
    case FATTN_DTYPE_FLOAT8_E5M2: return (double)fattn_e5m2_to_f32((fattn_e5m2){(uint8_t)bits});
    case FATTN_DTYPE_INT32: return (double)(int32_t)(uint32_t)bits;
    case FATTN_DTYPE_INT64: return (double)(int64_t)bits;
    default: return (double)(uint8_t)bits;
    }
}

/* 0 finite, 1 +inf, 2 -inf, 3 NaN */
static int fclass(double v)
{
    if (isnan(v))
        return 3;
    if (isinf(v))
        return v > 0 ? 1 : 2;
    return 0;
}

/* Squares of every 16- and 8-bit pattern (0 for non-finite), built once. */
static double *sq_tables[FATTN_DTYPE_COUNT];

static const double *sq_table(fattn_dtype t)
{
    if (sq_tables[t])
        return sq_tables[t];
    size_t n = (size_t)1 << (8 * fattn_dtype_size(t));
    double *tab = malloc(n * sizeof *tab);
    if (!tab)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        double v = decode(t, i);
        tab[i] = isfinite(v) ? v * v : 0.0;
    }
    sq_tables[t] = tab;
    return tab;
}

static void free_sq_tables(void)
{
    for (int i = 0; i < FATTN_DTYPE_COUNT; i++) {
        free(sq_tables[i]);
        sq_tables[i] = NULL;
    }
}

/* Sum of squares of the finite elements of a chunk (the signal energy). */
static double energy(fattn_dtype t, const unsigned char *p, size_t n)
{
    if (t == FATTN_DTYPE_FLOAT32) {
        double s[8] = {0};
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            float f[8];
            memcpy(f, p + 4 * i, sizeof f);
            for (int j = 0; j < 8; j++)
                s[j] += (double)f[j] * (double)f[j];
        }
        for (; i < n; i++) {
            float f;
            memcpy(&f, p + 4 * i, 4);
            s[0] += (double)f * (double)f;
        }
        double tot = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
        if (isfinite(tot))
            return tot;
        tot = 0;
        for (i = 0; i < n; i++) {
            float f;
            memcpy(&f, p + 4 * i, 4);
            if (isfinite(f))
                tot += (double)f * (double)f;
        }
        return tot;
    }
    const double *tab = sq_table(t);
    double tot = 0;
    if (!tab)
        return NAN;
    size_t es = fattn_dtype_size(t);
    for (size_t i = 0; i < n; i++)
        tot += tab[load_bits(p + es * i, es)];
    return tot;
}

/* ------------------------------------------------------------------------ */
/* Report entries                                                           */
/* ------------------------------------------------------------------------ */

typedef enum entry_status {
    ST_EQUAL = 0,
    ST_DIFFERENT,
    ST_MISSING_IN_A,
    ST_MISSING_IN_B,
    ST_CORRUPT,
    ST_STRUCTURE,
    ST_PRIVATE,
} entry_status;

static const char *status_name[] = {"equal",        "different", "missing_in_a", "missing_in_b",
                                    "corrupt",      "structure", "private"};

typedef struct worst_el {
    uint64_t index;
    uint64_t a_bits, b_bits;
    double a, b;
    uint64_t score; /* ranking: class change > ulp (float) or |a-b| (int) */
    uint64_t ulp;
    bool has_ulp;
} worst_el;

typedef struct dstats {
    uint64_t numel, bit_count, fail_count;
    uint64_t hist[6], sign_flips, class_changes, nan_payloads;
    uint64_t max_ulp;
    double max_abs, max_rel, sse, signal;
    uint64_t n_finite;
    bool signal_partial; /* equal chunks skipped before a difference showed */
    worst_el worst[DIFF_WORST];
    int n_worst;
} dstats;

typedef struct entry {
    char *path;         /* "/cases/x/forward/out" or "/cases/x@spec" */
    const char *kind;   /* dataset, digest, group, attribute */
    entry_status status;
    bool is_private;    /* under an _impl group */
    char *msg;          /* structure / corrupt / digest detail */
    /* datasets */
    bool has_data;
    fattn_dtype dtype;
    int ndim;
    int64_t shape[FATTN_MAX_DIMS];
    dstats st;
    fattn_tol tol;
    char digest_a[FATTN_DIGEST_LEN], digest_b[FATTN_DIGEST_LEN];
} entry;

typedef struct prov_item {
    char *path; /* "/@device", "/cases/x/forward@prov_engine" */
    char *a, *b; /* formatted values; NULL when absent */
    bool platform;
} prov_item;

/* A pending dataset comparison: the nodes on each side (NULL digest-only). */
typedef struct job {
    size_t entry;
    const fattn_h5_node *na, *nb;
    const char *dig_a, *dig_b; /* digest-only attribute values */
} job;

typedef struct diff_ctx {
    const fattn_diff_opts *o;
    const char *file_a, *file_b;
    fattn_h5_reader *ra, *rb;
    entry *e;
    size_t n_e, cap_e;
    prov_item *prov;
    size_t n_prov, cap_prov;
    job *jobs;
    size_t n_jobs, cap_jobs;
    unsigned char *buf_a, *buf_b;
    size_t chunk;
    bool audit_skipped;
    bool oom;
} diff_ctx;

static char *xstrdup(diff_ctx *c, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (!d) {
        c->oom = true;
        return NULL;
    }
    memcpy(d, s, n);
    return d;
}

static char *xprintf(diff_ctx *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static char *xprintf(diff_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        c->oom = true;
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (!s) {
        c->oom = true;
        return NULL;
    }
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static bool in_only(diff_ctx *c, const char *path)
{
    return !c->o->only || fnmatch(c->o->only, path, 0) == 0;
}

/* Add an entry (NULL when --only excludes it or on OOM). The path is taken
 * over (freed on exclusion). */
static entry *add_entry(diff_ctx *c, char *path, const char *kind, entry_status status,
                        bool is_private, char *msg)
{
    if (!path || !in_only(c, path)) {
        free(path);
        free(msg);
        return NULL;
    }
    if (c->n_e == c->cap_e) {
        size_t cap = c->cap_e ? 2 * c->cap_e : 64;
        entry *ne = realloc(c->e, cap * sizeof *ne);
        if (!ne) {
            c->oom = true;
            free(path);
            free(msg);
            return NULL;
        }
        c->e = ne;
        c->cap_e = cap;
    }
    entry *e = &c->e[c->n_e++];
    memset(e, 0, sizeof *e);
    e->path = path;
    e->kind = kind;
    e->status = status;
    e->is_private = is_private;
    e->msg = msg;
    return e;
}

static void add_job(diff_ctx *c, size_t entry_idx, const fattn_h5_node *na,
                    const fattn_h5_node *nb, const char *dig_a, const char *dig_b)
{
    if (c->n_jobs == c->cap_jobs) {
        size_t cap = c->cap_jobs ? 2 * c->cap_jobs : 64;
        job *nj = realloc(c->jobs, cap * sizeof *nj);
        if (!nj) {
            c->oom = true;
            return;
        }
        c->jobs = nj;
        c->cap_jobs = cap;
    }
    c->jobs[c->n_jobs++] = (job){entry_idx, na, nb, dig_a, dig_b};
}

static char *fmt_attr(diff_ctx *c, const fattn_h5_attr *a)
{
    if (!a)
        return NULL;
    switch (a->kind) {
    case FATTN_H5_ATTR_STRING: return xprintf(c, "\"%s\"", a->s);
    case FATTN_H5_ATTR_INT64: return xprintf(c, "%lld", (long long)a->i64[0]);
    case FATTN_H5_ATTR_FLOAT32: return xprintf(c, "%.9g (float32)", (double)a->f32);
    case FATTN_H5_ATTR_UINT8: return xprintf(c, "%u (uint8)", a->u8);
    default:
        return xprintf(c, "[%lld, %lld]", (long long)a->i64[0], (long long)a->i64[1]);
    }
}

static bool attr_equal(const fattn_h5_attr *a, const fattn_h5_attr *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case FATTN_H5_ATTR_STRING: return strcmp(a->s, b->s) == 0;
    case FATTN_H5_ATTR_INT64: return a->i64[0] == b->i64[0];
    case FATTN_H5_ATTR_FLOAT32: return memcmp(&a->f32, &b->f32, sizeof a->f32) == 0;
    case FATTN_H5_ATTR_UINT8: return a->u8 == b->u8;
    default: return a->i64[0] == b->i64[0] && a->i64[1] == b->i64[1];
    }
}

static char *join(diff_ctx *c, const char *parent, const char *name)
{
    return xprintf(c, "%s%s%s", parent, strcmp(parent, "/") ? "/" : "", name);
}

/* ------------------------------------------------------------------------ */
/* Structure                                                                */
/* ------------------------------------------------------------------------ */

static const char *platform_keys[] = {"backend",       "device",           "sm", "sm_count",
                                      "cuda_version",  "cudnn_version",   NULL};

static bool is_platform_key(const char *name)
{
    if (strncmp(name, "prov_", 5) == 0)
        return true;
    for (int i = 0; platform_keys[i]; i++)
        if (!strcmp(name, platform_keys[i]))
            return true;
    return false;
}

static void add_prov(diff_ctx *c, const char *objpath, const fattn_h5_attr *a,
                     const fattn_h5_attr *b)
{
    const char *name = a ? a->name : b->name;
    if (a && b && attr_equal(a, b))
        return;
    if (c->n_prov == c->cap_prov) {
        size_t cap = c->cap_prov ? 2 * c->cap_prov : 16;
        prov_item *np = realloc(c->prov, cap * sizeof *np);
        if (!np) {
            c->oom = true;
            return;
        }
        c->prov = np;
        c->cap_prov = cap;
    }
    prov_item *p = &c->prov[c->n_prov++];
    p->path = xprintf(c, "%s@%s", objpath, name);
    p->a = fmt_attr(c, a);
    p->b = fmt_attr(c, b);
    p->platform = is_platform_key(name);
}

static bool digest_attr(const fattn_h5_attr *a)
{
    return a && strncmp(a->name, "digest:", 7) == 0 && a->name[7];
}

/* Compare the attributes of two objects at objpath (either may be NULL
 * only for the digest:* scan). Digest-only tensors become jobs. */
static void compare_attrs(diff_ctx *c, const char *objpath, const fattn_h5_node *na,
                          const fattn_h5_node *nb, bool is_root, bool priv)
{
    size_t i = 0, j = 0;
    while (i < na->n_attrs || j < nb->n_attrs) {
        const fattn_h5_attr *a = i < na->n_attrs ? &na->attrs[i] : NULL;
        const fattn_h5_attr *b = j < nb->n_attrs ? &nb->attrs[j] : NULL;
        int cmp = !a ? 1 : !b ? -1 : strcmp(a->name, b->name);
        if (cmp < 0)
            b = NULL, i++;
        else if (cmp > 0)
            a = NULL, j++;
        else
            i++, j++;
        const char *name = a ? a->name : b->name;
        if (is_root && !strcmp(name, "schema"))
            continue;
        if (is_root || !strncmp(name, "prov_", 5)) {
            add_prov(c, objpath, a, b);
            continue;
        }
        if (!na->is_dataset && (digest_attr(a) || digest_attr(b))) {
            /* A digest-only tensor: the attribute without the dataset on
             * its side (with the dataset it is an ordinary attribute). */
            const char *tname = name + 7;
            const fattn_h5_node *sa = fattn_h5_node_find(na, tname);
            const fattn_h5_node *sb = fattn_h5_node_find(nb, tname);
            bool ad = digest_attr(a) && !sa, bd = digest_attr(b) && !sb;
            if (ad || bd) {
                if ((ad && sb) || (bd && sa))
                    continue; /* digest facing a dataset: the children pass */
                char *p = join(c, objpath, tname);
                if (ad && bd) {
                    entry *e = add_entry(c, p, "digest", ST_EQUAL, priv, NULL);
                    if (e)
                        add_job(c, (size_t)(e - c->e), NULL, NULL, a->s, b->s);
                } else {
                    add_entry(c, p, "digest", ad ? ST_MISSING_IN_B : ST_MISSING_IN_A, priv, NULL);
                }
                continue;
            }
        }
        char *p = xprintf(c, "%s@%s", objpath, name);
        if (!a || !b) {
            add_entry(c, p, "attribute", a ? ST_MISSING_IN_B : ST_MISSING_IN_A, priv, NULL);
        } else if (!attr_equal(a, b)) {
            char *va = fmt_attr(c, a), *vb = fmt_attr(c, b);
            add_entry(c, p, "attribute", ST_STRUCTURE, priv,
                      xprintf(c, "A=%s B=%s", va ? va : "?", vb ? vb : "?"));
            free(va);
            free(vb);
        } else {
            free(p);
        }
    }
}

/* Everything under a node present on one side only: one entry per dataset
 * or digest-only tensor, or the group itself when it holds none. */
static size_t list_missing(diff_ctx *c, const char *path, const fattn_h5_node *n,
                           entry_status st, bool priv)
{
    if (n->is_dataset) {
        add_entry(c, xstrdup(c, path), "dataset", st, priv, NULL);
        return 1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n->n_attrs; i++) {
        if (digest_attr(&n->attrs[i]) && !fattn_h5_node_find(n, n->attrs[i].name + 7)) {
            add_entry(c, join(c, path, n->attrs[i].name + 7), "digest", st, priv, NULL);
            k++;
        }
    }
    for (size_t i = 0; i < n->n_children; i++) {
        const fattn_h5_node *ch = n->children[i];
        char *cp = join(c, path, ch->name);
        if (!cp)
            return k;
        k += list_missing(c, cp, ch, st, priv || !strcmp(ch->name, "_impl"));
        free(cp);
    }
    if (k == 0) {
        add_entry(c, xstrdup(c, path), "group", st, priv, NULL);
        k = 1;
    }
    return k;
}

static bool same_shape(const fattn_h5_node *a, const fattn_h5_node *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

static void walk(diff_ctx *c, const char *path, const fattn_h5_node *na, const fattn_h5_node *nb,
                 bool priv)
{
    bool is_root = !strcmp(path, "/");
    compare_attrs(c, path, na, nb, is_root, priv);
    size_t i = 0, j = 0;
    while (!c->oom && (i < na->n_children || j < nb->n_children)) {
        const fattn_h5_node *a = i < na->n_children ? na->children[i] : NULL;
        const fattn_h5_node *b = j < nb->n_children ? nb->children[j] : NULL;
        int cmp = !a ? 1 : !b ? -1 : strcmp(a->name, b->name);
        if (cmp < 0)
            b = NULL, i++;
        else if (cmp > 0)
            a = NULL, j++;
        else
            i++, j++;
        const char *name = a ? a->name : b->name;
        char *cp = join(c, path, name);
        if (!cp)
            return;
        bool cpriv = priv || !strcmp(name, "_impl");
        if (is_root && !strcmp(name, "audit") && !c->o->audit) {
            c->audit_skipped = true;
        } else if (!a || !b) {
            const fattn_h5_node *ds = a ? a : b;
            char an[FATTN_H5_NAME_MAX + 16];
            snprintf(an, sizeof an, "digest:%s", name);
            const fattn_h5_attr *dg = fattn_h5_node_attr(a ? nb : na, an);
            if (ds->is_dataset && dg && dg->kind == FATTN_H5_ATTR_STRING) {
                /* a dataset facing a digest-only tensor */
                entry *e = add_entry(c, xstrdup(c, cp), "digest", ST_EQUAL, cpriv, NULL);
                if (e) {
                    e->dtype = ds->dtype;
                    e->ndim = ds->ndim;
                    memcpy(e->shape, ds->shape, sizeof e->shape);
                    if (a)
                        add_job(c, (size_t)(e - c->e), a, NULL, NULL, dg->s);
                    else
                        add_job(c, (size_t)(e - c->e), NULL, b, dg->s, NULL);
                }
            } else {
                list_missing(c, cp, ds, a ? ST_MISSING_IN_B : ST_MISSING_IN_A, cpriv);
            }
        } else if (a->is_dataset != b->is_dataset) {
            add_entry(c, xstrdup(c, cp), a->is_dataset ? "dataset" : "group", ST_STRUCTURE, cpriv,
                      xprintf(c, "a %s in A, a %s in B", a->is_dataset ? "dataset" : "group",
                              b->is_dataset ? "dataset" : "group"));
        } else if (!a->is_dataset) {
            walk(c, cp, a, b, cpriv);
        } else {
            compare_attrs(c, cp, a, b, false, cpriv);
            if (a->dtype != b->dtype || !same_shape(a, b)) {
                char sa[128], sb[128];
                fmt_shape(sa, sizeof sa, a->ndim, a->shape);
                fmt_shape(sb, sizeof sb, b->ndim, b->shape);
                add_entry(c, xstrdup(c, cp), "dataset", ST_STRUCTURE, cpriv,
                          xprintf(c, "%s %s in A, %s %s in B%s", fattn_dtype_name(a->dtype), sa,
                                  fattn_dtype_name(b->dtype), sb,
                                  a->dtype != b->dtype ? " (dtype differs)"
                                                       : " (shape differs)"));
            } else {
                entry *e = add_entry(c, xstrdup(c, cp), "dataset", ST_EQUAL, cpriv, NULL);
                if (e) {
                    e->has_data = true;
                    e->dtype = a->dtype;
                    e->ndim = a->ndim;
                    memcpy(e->shape, a->shape, sizeof e->shape);
                    add_job(c, (size_t)(e - c->e), a, b, NULL, NULL);
                }
            }
        }
        free(cp);
    }
}

/* ------------------------------------------------------------------------ */
/* Data                                                                     */
/* ------------------------------------------------------------------------ */

static void note_worst(dstats *s, worst_el w)
{
    int n = s->n_worst;
    if (n == DIFF_WORST && w.score <= s->worst[n - 1].score)
        return;
    int pos = n < DIFF_WORST ? n : n - 1;
    while (pos > 0 && s->worst[pos - 1].score < w.score) {
        if (pos < DIFF_WORST)
            s->worst[pos] = s->worst[pos - 1];
        pos--;
    }
    s->worst[pos] = w;
    if (n < DIFF_WORST)
        s->n_worst++;
}

static int hist_bucket(uint64_t u)
{
    return u == 0 ? 0 : u == 1 ? 1 : u <= 4 ? 2 : u <= 16 ? 3 : u <= 256 ? 4 : 5;
}

/* Compare n elements of a chunk starting at element `base`. */
static void compare_elements(const diff_ctx *c, entry *e, const unsigned char *pa,
                             const unsigned char *pb, size_t n, uint64_t base, bool want_signal)
{
    dstats *s = &e->st;
    size_t es = fattn_dtype_size(e->dtype);
    bool is_float = fattn_dtype_is_float(e->dtype);
    fattn_diff_mode mode = c->o->mode;
    for (size_t i = 0; i < n; i++) {
        uint64_t ua = load_bits(pa + i * es, es), ub = load_bits(pb + i * es, es);
        if (ua == ub) {
            if (is_float) {
                s->n_finite++;
                if (want_signal) {
                    double b = decode(e->dtype, ub);
                    if (isfinite(b))
                        s->signal += b * b;
                }
            }
            continue;
        }
        s->bit_count++;
        double a = decode(e->dtype, ua), b = decode(e->dtype, ub);
        worst_el w = {base + i, ua, ub, a, b, 0, 0, false};
        bool fail = true;
        if (!is_float) {
            double d = fabs(a - b);
            if (d > s->max_abs)
                s->max_abs = d;
            w.score = d >= 1.8e19 ? UINT64_MAX : (uint64_t)d;
        } else {
            int ca = fclass(a), cb = fclass(b);
            if (ca != cb) {
                s->class_changes++;
                w.score = UINT64_MAX;
            } else if (ca == 3) {
                s->nan_payloads++;
                fail = mode == FATTN_DIFF_BITWISE;
            } else { /* both finite (equal infinities have equal bits) */
                uint64_t u = fattn_diff_ulp(e->dtype, ua, ub);
                unsigned sh = sign_shift(e->dtype);
                bool both_zero = a == 0 && b == 0;
                if (!both_zero && ((ua >> sh) & 1) != ((ub >> sh) & 1))
                    s->sign_flips++;
                else
                    s->hist[hist_bucket(u)]++;
                if (u > s->max_ulp)
                    s->max_ulp = u;
                w.ulp = u;
                w.has_ulp = true;
                w.score = u;
                double d = fabs(a - b);
                if (d > s->max_abs)
                    s->max_abs = d;
                if (b != 0 && d / fabs(b) > s->max_rel)
                    s->max_rel = d / fabs(b);
                s->sse += d * d;
                s->signal += b * b;
                s->n_finite++;
                if (both_zero)
                    fail = mode == FATTN_DIFF_BITWISE;
                else if (mode == FATTN_DIFF_ULP)
                    fail = u > c->o->max_ulp;
                else if (mode == FATTN_DIFF_TOL)
                    fail = !(d <= e->tol.atol + e->tol.rtol * fabs(b));
            }
        }
        if (fail)
            s->fail_count++;
        note_worst(s, w);
    }
}

static fattn_status stream_digest(diff_ctx *c, fattn_h5_reader *r, const char *path,
                                  const fattn_h5_node *n, unsigned char *buf,
                                  char out[FATTN_DIGEST_LEN])
{
    fattn_h5_dstream *s;
    fattn_status st = fattn_h5_dstream_open(r, path, n, &s);
    if (st != FATTN_OK)
        return st;
    fattn_digest_state ds;
    if ((st = fattn_digest_init(&ds)) != FATTN_OK) {
        fattn_h5_dstream_close(s);
        return st;
    }
    size_t got;
    while ((st = fattn_h5_dstream_read(s, buf, c->chunk, &got)) == FATTN_OK && got)
        fattn_digest_update(&ds, buf, got);
    fattn_h5_dstream_close(s);
    if (st != FATTN_OK) {
        fattn_digest_free(&ds);
        return st;
    }
    return fattn_digest_final(&ds, out);
}

static fattn_status compare_pair(diff_ctx *c, entry *e, const fattn_h5_node *na,
                                 const fattn_h5_node *nb)
{
    const fattn_diff_opts *o = c->o;
    e->st.numel = 1;
    for (int i = 0; i < na->ndim; i++)
        e->st.numel *= (uint64_t)na->shape[i];
    if (o->mode == FATTN_DIFF_TOL && fattn_dtype_is_float(e->dtype))
        e->tol = fattn_tol_profile_lookup(o->tol, e->path, e->dtype);
    if (o->trust_digests && !strcmp(na->stored_digest, nb->stored_digest)) {
        memcpy(e->digest_a, na->stored_digest, FATTN_DIGEST_LEN);
        memcpy(e->digest_b, nb->stored_digest, FATTN_DIGEST_LEN);
        return FATTN_OK;
    }
    /* Energy of equal chunks is needed only if the dataset differs; the
     * stored digests say so in advance (a mismatch that shows up anyway is
     * corruption, and its NMSE is then marked partial). */
    bool want_signal = fattn_dtype_is_float(e->dtype) &&
                       strcmp(na->stored_digest, nb->stored_digest) != 0;
    fattn_h5_dstream *sa = NULL, *sb = NULL;
    fattn_digest_state da = {0}, db = {0};
    fattn_status st;
    if ((st = fattn_h5_dstream_open(c->ra, e->path, na, &sa)) != FATTN_OK ||
        (st = fattn_h5_dstream_open(c->rb, e->path, nb, &sb)) != FATTN_OK ||
        (st = fattn_digest_init(&da)) != FATTN_OK || (st = fattn_digest_init(&db)) != FATTN_OK)
        goto out;
    size_t es = fattn_dtype_size(e->dtype);
    uint64_t base = 0;
    for (;;) {
        size_t ga, gb;
        if ((st = fattn_h5_dstream_read(sa, c->buf_a, c->chunk, &ga)) != FATTN_OK ||
            (st = fattn_h5_dstream_read(sb, c->buf_b, c->chunk, &gb)) != FATTN_OK)
            goto out;
        if (ga != gb) { /* same shape and dtype: cannot happen */
            st = fattn_error(FATTN_E_INTERNAL, "%s: chunk sizes differ", e->path);
            goto out;
        }
        if (!ga)
            break;
        fattn_digest_update(&da, c->buf_a, ga);
        fattn_digest_update(&db, c->buf_b, gb);
        size_t n = ga / es;
        if (memcmp(c->buf_a, c->buf_b, ga) == 0) {
            if (want_signal)
                e->st.signal += energy(e->dtype, c->buf_b, n);
            if (fattn_dtype_is_float(e->dtype))
                e->st.n_finite += n; /* the mean of RMSE runs over equal elements too */
        } else {
            if (!want_signal && fattn_dtype_is_float(e->dtype)) {
                e->st.signal_partial = base > 0;
                want_signal = true;
            }
            compare_elements(c, e, c->buf_a, c->buf_b, n, base, want_signal);
        }
        base += n;
    }
    fattn_digest_final(&da, e->digest_a);
    fattn_digest_final(&db, e->digest_b);
out:
    fattn_digest_free(&da);
    fattn_digest_free(&db);
    fattn_h5_dstream_close(sa);
    fattn_h5_dstream_close(sb);
    return st;
}

static fattn_status run_job(diff_ctx *c, const job *jb)
{
    entry *e = &c->e[jb->entry];
    fattn_status st = FATTN_OK;
    if (jb->na && jb->nb) {
        if ((st = compare_pair(c, e, jb->na, jb->nb)) != FATTN_OK)
            return st;
        bool ca = strcmp(e->digest_a, jb->na->stored_digest) != 0;
        bool cb = strcmp(e->digest_b, jb->nb->stored_digest) != 0;
        if (ca || cb) {
            e->status = ST_CORRUPT;
            e->msg = xprintf(c, "%s%s%s%s%s%s%s%s%s", ca ? "A: stored " : "",
                             ca ? jb->na->stored_digest : "", ca ? ", data " : "",
                             ca ? e->digest_a : "", ca && cb ? "; " : "",
                             cb ? "B: stored " : "", cb ? jb->nb->stored_digest : "",
                             cb ? ", data " : "", cb ? e->digest_b : "");
        } else if (e->st.fail_count > 0) {
            e->status = ST_DIFFERENT;
        }
        return FATTN_OK;
    }
    /* digest-only on at least one side */
    const char *da = jb->dig_a, *db = jb->dig_b;
    if (jb->na) {
        da = jb->na->stored_digest;
        if (!c->o->trust_digests) {
            if ((st = stream_digest(c, c->ra, e->path, jb->na, c->buf_a, e->digest_a)) != FATTN_OK)
                return st;
            if (strcmp(e->digest_a, jb->na->stored_digest)) {
                e->status = ST_CORRUPT;
                e->msg = xprintf(c, "A: stored %s, data %s", jb->na->stored_digest, e->digest_a);
                return FATTN_OK;
            }
        }
    }
    if (jb->nb) {
        db = jb->nb->stored_digest;
        if (!c->o->trust_digests) {
            if ((st = stream_digest(c, c->rb, e->path, jb->nb, c->buf_b, e->digest_b)) != FATTN_OK)
                return st;
            if (strcmp(e->digest_b, jb->nb->stored_digest)) {
                e->status = ST_CORRUPT;
                e->msg = xprintf(c, "B: stored %s, data %s", jb->nb->stored_digest, e->digest_b);
                return FATTN_OK;
            }
        }
    }
    snprintf(e->digest_a, FATTN_DIGEST_LEN, "%s", da);
    snprintf(e->digest_b, FATTN_DIGEST_LEN, "%s", db);
    if (strcmp(da, db) != 0) {
        e->status = ST_DIFFERENT;
        e->msg = xprintf(c, "digest %s in A, %s in B (%s: elements cannot be counted)", da, db,
                         !jb->na && !jb->nb ? "digest only on both sides"
                         : !jb->na          ? "digest only in A"
                                            : "digest only in B");
    }
    return FATTN_OK;
}

/* ------------------------------------------------------------------------ */
/* Output                                                                   */
/* ------------------------------------------------------------------------ */

static bool counted(const entry *e) { return !e->is_private && e->status != ST_EQUAL; }

static void fmt_index(char *buf, size_t n, const entry *e, uint64_t idx)
{
    uint64_t m[FATTN_MAX_DIMS];
    for (int i = e->ndim - 1; i >= 0; i--) {
        uint64_t d = (uint64_t)e->shape[i];
        m[i] = d ? idx % d : 0;
        idx = d ? idx / d : 0;
    }
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < e->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRIu64, i ? "," : "", m[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

static int hex_width(fattn_dtype t) { return (int)(2 * fattn_dtype_size(t)); }

static void fmt_num(char *buf, size_t n, double v)
{
    if (isnan(v))
        snprintf(buf, n, "nan");
    else if (isinf(v))
        snprintf(buf, n, v > 0 ? "inf" : "-inf");
    else
        snprintf(buf, n, "%.3g", v);
}

static double nmse_of(const dstats *s) { return s->signal > 0 ? s->sse / s->signal : NAN; }

static void print_dataset(const diff_ctx *c, FILE *f, const entry *e, const char *label)
{
    const dstats *s = &e->st;
    bool is_float = fattn_dtype_is_float(e->dtype);
    char shape[160];
    fmt_shape(shape, sizeof shape, e->ndim, e->shape);
    uint64_t shown = c->o->mode == FATTN_DIFF_BITWISE ? s->bit_count : s->fail_count;
    fprintf(f, "%s: %s  %s %s  %" PRIu64 " of %" PRIu64 " differ (%.3g%%)", label, e->path,
            fattn_dtype_name(e->dtype), shape, shown, s->numel,
            s->numel ? 100.0 * (double)shown / (double)s->numel : 0.0);
    if (c->o->mode != FATTN_DIFF_BITWISE)
        fprintf(f, ", %" PRIu64 " in bits", s->bit_count);
    if (is_float) {
        char ma[32], mr[32], rm[32], nm[32], sn[32];
        double nmse = nmse_of(s);
        fmt_num(ma, sizeof ma, s->max_abs);
        fmt_num(mr, sizeof mr, s->max_rel);
        fmt_num(rm, sizeof rm, s->n_finite ? sqrt(s->sse / (double)s->n_finite) : 0.0);
        fmt_num(nm, sizeof nm, nmse);
        fmt_num(sn, sizeof sn, nmse > 0 ? -10.0 * log10(nmse) : nmse == 0 ? INFINITY : NAN);
        fprintf(f, "; max_ulp %" PRIu64 ", max_abs %s, max_rel %s, rmse %s, nmse %s%s, snr %s dB",
                s->max_ulp, ma, mr, rm, nm, s->signal_partial ? " (partial)" : "", sn);
        if (c->o->mode == FATTN_DIFF_TOL)
            fprintf(f, "; rtol %g, atol %g", e->tol.rtol, e->tol.atol);
        fprintf(f, "\n  ulp histogram: 0:%" PRIu64 " 1:%" PRIu64 " 2-4:%" PRIu64 " 5-16:%" PRIu64
                   " 17-256:%" PRIu64 " >256:%" PRIu64 "; sign flips %" PRIu64
                   ", class changes %" PRIu64 ", NaN payloads %" PRIu64 "\n",
                s->hist[0], s->hist[1], s->hist[2], s->hist[3], s->hist[4], s->hist[5],
                s->sign_flips, s->class_changes, s->nan_payloads);
    } else {
        char ma[32];
        fmt_num(ma, sizeof ma, s->max_abs);
        fprintf(f, "; max_abs %s (integers compare exactly)\n", ma);
    }
    for (int k = 0; k < s->n_worst; k++) {
        const worst_el *w = &s->worst[k];
        char idx[160];
        fmt_index(idx, sizeof idx, e, w->index);
        int hw = hex_width(e->dtype);
        fprintf(f, "  %s  A=%.9g (0x%0*" PRIx64 ")  B=%.9g (0x%0*" PRIx64 ")", idx, w->a, hw,
                w->a_bits, w->b, hw, w->b_bits);
        if (w->has_ulp)
            fprintf(f, "  ulp %" PRIu64, w->ulp);
        else if (is_float)
            fprintf(f, "  %s", w->score == UINT64_MAX ? "class change" : "NaN payload");
        fputc('\n', f);
    }
}

static json_t *jnum(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *jattrval(const char *s) { return s ? json_string(s) : json_null(); }

static int write_json(diff_ctx *c, int exit_code, const size_t *tally)
{
    const fattn_diff_opts *o = c->o;
    json_t *root = json_object(), *prov = json_array(), *paths = json_object();
    json_t *summ = json_object();
    if (!root || !prov || !paths || !summ)
        goto oom;
    static const char *modes[] = {"bitwise", "ulp", "tol"};
    json_object_set_new(root, "schema", json_string("fattn-diff/1"));
    json_object_set_new(root, "mode", json_string(modes[o->mode]));
    json_object_set_new(root, "reference", json_string("B"));
    json_object_set_new(root, "a", json_string(c->file_a));
    json_object_set_new(root, "b", json_string(c->file_b));
    if (o->mode == FATTN_DIFF_ULP)
        json_object_set_new(root, "max_ulp", json_integer((json_int_t)o->max_ulp));
    if (o->mode == FATTN_DIFF_TOL)
        json_object_set_new(root, "tol_profile", json_string(o->tol->version));
    json_object_set_new(root, "trust_digests", json_boolean(o->trust_digests));
    json_object_set_new(root, "audit", json_boolean(o->audit));
    if (o->only)
        json_object_set_new(root, "only", json_string(o->only));
    for (size_t i = 0; i < c->n_prov; i++) {
        json_t *p = json_object();
        json_object_set_new(p, "path", json_string(c->prov[i].path));
        json_object_set_new(p, "a", jattrval(c->prov[i].a));
        json_object_set_new(p, "b", jattrval(c->prov[i].b));
        json_object_set_new(p, "platform", json_boolean(c->prov[i].platform));
        json_array_append_new(prov, p);
    }
    for (size_t i = 0; i < c->n_e; i++) {
        const entry *e = &c->e[i];
        json_t *p = json_object();
        json_object_set_new(p, "status",
                            json_string(e->is_private && e->status != ST_EQUAL
                                            ? "private"
                                            : status_name[e->status]));
        json_object_set_new(p, "kind", json_string(e->kind));
        if (e->is_private)
            json_object_set_new(p, "private_status", json_string(status_name[e->status]));
        if (e->msg)
            json_object_set_new(p, "detail", json_string(e->msg));
        if (e->has_data) {
            const dstats *s = &e->st;
            json_t *shape = json_array();
            for (int k = 0; k < e->ndim; k++)
                json_array_append_new(shape, json_integer(e->shape[k]));
            json_object_set_new(p, "dtype", json_string(fattn_dtype_name(e->dtype)));
            json_object_set_new(p, "shape", shape);
            json_object_set_new(p, "numel", json_integer((json_int_t)s->numel));
            json_object_set_new(
                p, "count",
                json_integer((json_int_t)(o->mode == FATTN_DIFF_BITWISE ? s->bit_count
                                                                         : s->fail_count)));
            json_object_set_new(p, "bit_count", json_integer((json_int_t)s->bit_count));
            json_object_set_new(p, "max_abs", jnum(s->max_abs));
            if (e->digest_a[0])
                json_object_set_new(p, "digest_a", json_string(e->digest_a));
            if (e->digest_b[0])
                json_object_set_new(p, "digest_b", json_string(e->digest_b));
            if (fattn_dtype_is_float(e->dtype)) {
                double nmse = nmse_of(s);
                json_object_set_new(p, "max_ulp", json_integer((json_int_t)s->max_ulp));
                json_object_set_new(p, "max_rel", jnum(s->max_rel));
                json_object_set_new(
                    p, "rmse", jnum(s->n_finite ? sqrt(s->sse / (double)s->n_finite) : 0.0));
                json_object_set_new(p, "nmse", jnum(nmse));
                json_object_set_new(p, "snr_db", jnum(nmse > 0 ? -10.0 * log10(nmse) : NAN));
                json_object_set_new(p, "nmse_partial", json_boolean(s->signal_partial));
                json_t *h = json_object();
                static const char *hn[] = {"0", "1", "2-4", "5-16", "17-256", ">256"};
                for (int k = 0; k < 6; k++)
                    json_object_set_new(h, hn[k], json_integer((json_int_t)s->hist[k]));
                json_object_set_new(h, "sign_flips", json_integer((json_int_t)s->sign_flips));
                json_object_set_new(h, "class_changes",
                                    json_integer((json_int_t)s->class_changes));
                json_object_set_new(h, "nan_payloads", json_integer((json_int_t)s->nan_payloads));
                json_object_set_new(p, "ulp_histogram", h);
                if (o->mode == FATTN_DIFF_TOL) {
                    json_object_set_new(p, "rtol", json_real(e->tol.rtol));
                    json_object_set_new(p, "atol", json_real(e->tol.atol));
                }
            }
            json_t *wl = json_array();
            for (int k = 0; k < s->n_worst; k++) {
                const worst_el *w = &s->worst[k];
                json_t *we = json_object(), *ix = json_array();
                uint64_t idx = w->index, m[FATTN_MAX_DIMS];
                for (int d = e->ndim - 1; d >= 0; d--) {
                    uint64_t dd = (uint64_t)e->shape[d];
                    m[d] = dd ? idx % dd : 0;
                    idx = dd ? idx / dd : 0;
                }
                for (int d = 0; d < e->ndim; d++)
                    json_array_append_new(ix, json_integer((json_int_t)m[d]));
                char ha[24], hb[24];
                snprintf(ha, sizeof ha, "0x%0*" PRIx64, hex_width(e->dtype), w->a_bits);
                snprintf(hb, sizeof hb, "0x%0*" PRIx64, hex_width(e->dtype), w->b_bits);
                json_object_set_new(we, "index", ix);
                json_object_set_new(we, "a", jnum(w->a));
                json_object_set_new(we, "b", jnum(w->b));
                json_object_set_new(we, "a_bits", json_string(ha));
                json_object_set_new(we, "b_bits", json_string(hb));
                if (w->has_ulp)
                    json_object_set_new(we, "ulp", json_integer((json_int_t)w->ulp));
                json_array_append_new(wl, we);
            }
            json_object_set_new(p, "worst", wl);
        } else if (e->digest_a[0] || e->digest_b[0]) {
            json_object_set_new(p, "digest_a", json_string(e->digest_a));
            json_object_set_new(p, "digest_b", json_string(e->digest_b));
        }
        json_object_set_new(paths, e->path, p);
    }
    for (int k = 0; k <= ST_PRIVATE; k++)
        json_object_set_new(summ, status_name[k], json_integer((json_int_t)tally[k]));
    json_object_set_new(summ, "entries", json_integer((json_int_t)c->n_e));
    json_object_set_new(summ, "counted", json_integer((json_int_t)tally[ST_PRIVATE + 1]));
    json_object_set_new(summ, "audit_skipped", json_boolean(c->audit_skipped));
    json_object_set_new(root, "provenance_delta", prov);
    json_object_set_new(root, "paths", paths);
    json_object_set_new(root, "summary", summ);
    json_object_set_new(root, "exit", json_integer(exit_code));
    int rc = json_dump_file(root, o->json_path, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(root);
    if (rc != 0) {
        fprintf(stderr, "fattn diff: %s: cannot write the JSON report: %s\n", o->json_path,
                strerror(errno));
        return -1;
    }
    return 0;
oom:
    json_decref(root);
    json_decref(prov);
    json_decref(paths);
    json_decref(summ);
    fprintf(stderr, "fattn diff: out of memory\n");
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Driver                                                                   */
/* ------------------------------------------------------------------------ */

static int fail2(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

static int fail2(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fattn diff: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

/* What open_side and the comparison do to a file, in a forked child first
 * (isolate.h): a metadata-only lenient read, then every dataset streamed
 * once. A crash inside libhdf5 on a malformed file then becomes exit 2
 * instead of killing fattn diff (docs/reliability.md). */
static fattn_status probe_tree(fattn_h5_reader *r, const fattn_h5_node *n, char *path,
                               size_t len, size_t cap, unsigned char *buf, size_t bufcap)
{
    size_t nl = strlen(n->name);
    if (len + 1 + nl + 1 > cap)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: path too long", path);
    size_t at = len;
    if (nl) {
        if (len > 1)
            path[at++] = '/';
        memcpy(path + at, n->name, nl);
        at += nl;
        path[at] = '\0';
    }
    fattn_status st = FATTN_OK;
    if (n->is_dataset) {
        fattn_h5_dstream *ds;
        if ((st = fattn_h5_dstream_open(r, path, n, &ds)) != FATTN_OK)
            return st;
        size_t got;
        while ((st = fattn_h5_dstream_read(ds, buf, bufcap, &got)) == FATTN_OK && got)
            ;
        fattn_h5_dstream_close(ds);
    } else {
        for (size_t i = 0; i < n->n_children && st == FATTN_OK; i++)
            st = probe_tree(r, n->children[i], path, at, cap, buf, bufcap);
    }
    path[len] = '\0';
    return st;
}

static fattn_status probe_side(const char *path, void *ctx)
{
    (void)ctx;
    fattn_h5_reader *r = NULL;
    fattn_status st = fattn_h5_reader_open(path, &r);
    if (st != FATTN_OK)
        return st;
    fattn_h5_node *root = NULL;
    fattn_h5_read_opts opts = {.allow_corrupt = true, .metadata_only = true};
    st = fattn_h5_reader_read(r, "/", &opts, &root);
    enum { BUF = 1 << 16 };
    unsigned char *buf = st == FATTN_OK ? malloc(BUF) : NULL;
    if (st == FATTN_OK && !buf)
        st = fattn_error(FATTN_E_NOMEM, "%s: out of memory", path);
    if (st == FATTN_OK) {
        char p[4096] = "/";
        st = probe_tree(r, root, p, 1, sizeof p, buf, BUF);
    }
    free(buf);
    fattn_h5_node_free(root);
    fattn_h5_reader_close(r);
    return st;
}

static int open_side(const char *path, fattn_h5_reader **r, fattn_h5_node **root)
{
    if (fattn_isolate_run(path, probe_side, NULL, 0, 300) != FATTN_OK)
        return fail2("%s", fattn_last_error());
    if (fattn_h5_reader_open(path, r) != FATTN_OK)
        return fail2("%s", fattn_last_error());
    fattn_h5_read_opts opts = {.allow_corrupt = true, .metadata_only = true};
    if (fattn_h5_reader_read(*r, "/", &opts, root) != FATTN_OK)
        return fail2("%s", fattn_last_error());
    const fattn_h5_attr *s = fattn_h5_node_attr(*root, "schema");
    if (!s || s->kind != FATTN_H5_ATTR_STRING)
        return fail2("%s: no schema attribute at the root: not a fattn run file", path);
    if (strcmp(s->s, RUN_SCHEMA) != 0)
        return fail2("%s: schema \"%s\" is not a known run-file schema (want %s)", path, s->s,
                     RUN_SCHEMA);
    return 0;
}

static void print_provenance(const diff_ctx *c, FILE *f)
{
    if (c->n_prov == 0) {
        fprintf(f, "provenance: identical\n");
        fprintf(f, "  => same platform: bitwise equality is expected\n");
        return;
    }
    fprintf(f, "provenance delta (never counted):\n");
    bool platform = false;
    size_t plen = 0;
    char pl[512] = "";
    for (size_t i = 0; i < c->n_prov; i++) {
        const prov_item *p = &c->prov[i];
        fprintf(f, "  %s: A=%s B=%s\n", p->path, p->a ? p->a : "(absent)",
                p->b ? p->b : "(absent)");
        if (p->platform) {
            platform = true;
            const char *at = strrchr(p->path, '@');
            if (plen < sizeof pl)
                plen += (size_t)snprintf(pl + plen, sizeof pl - plen, "%s%s", plen ? ", " : "",
                                         at ? at + 1 : p->path);
        }
    }
    if (platform)
        fprintf(f,
                "  => different platforms (%s): bitwise equality is not expected; "
                "compare with --mode ulp or --mode tol%s\n",
                pl, c->o->mode == FATTN_DIFF_BITWISE ? " (this run: bitwise)" : "");
    else
        fprintf(f, "  => same platform (engine, device, SM count, library versions and engine "
                   "tags agree): bitwise equality is expected\n");
}

int fattn_diff_files(const char *a, const char *b, const fattn_diff_opts *o)
{
    diff_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.file_a = a;
    c.file_b = b;
    c.chunk = o->chunk_bytes ? o->chunk_bytes : DIFF_CHUNK_DEFAULT;
    FILE *f = o->out ? o->out : stdout;
    fattn_h5_node *ta = NULL, *tb = NULL;
    int rc = open_side(a, &c.ra, &ta);
    if (rc == 0)
        rc = open_side(b, &c.rb, &tb);
    if (rc != 0)
        goto out;
    c.buf_a = malloc(c.chunk);
    c.buf_b = malloc(c.chunk);
    if (!c.buf_a || !c.buf_b) {
        rc = fail2("out of memory (chunk buffers)");
        goto out;
    }
    walk(&c, "/", ta, tb, false);
    for (size_t i = 0; !c.oom && i < c.n_jobs; i++) {
        if (run_job(&c, &c.jobs[i]) != FATTN_OK) {
            rc = fail2("%s", fattn_last_error());
            goto out;
        }
    }
    if (c.oom) {
        rc = fail2("out of memory");
        goto out;
    }

    static const char *modes[] = {"bitwise", "ulp", "tol"};
    fprintf(f, "fattn diff: A=%s B=%s\n", a, b);
    print_provenance(&c, f);
    fprintf(f, "mode: %s", modes[o->mode]);
    if (o->mode == FATTN_DIFF_ULP)
        fprintf(f, " (an element passes within %" PRIu64 " ulp; NaN equals NaN, +0 equals -0, "
                   "class changes fail)",
                o->max_ulp);
    else if (o->mode == FATTN_DIFF_TOL)
        fprintf(f, " (|a-b| <= atol + rtol*|b|, B is the reference; profile %s; NaN equals NaN, "
                   "+0 equals -0, class changes fail)",
                o->tol->version);
    else
        fprintf(f, " (every stored bit counts: NaN payloads, +0/-0)");
    fprintf(f, "; integers compare exactly%s\n",
            o->trust_digests ? "; --trust-digests: equal stored digests skip the data" : "");
    /* order: structure, corrupt, different, private */
    size_t tally[ST_PRIVATE + 2] = {0};
    size_t n_data = 0;
    for (size_t i = 0; i < c.n_e; i++) {
        const entry *e = &c.e[i];
        if (e->has_data || !strcmp(e->kind, "digest"))
            n_data++;
        tally[e->is_private && e->status != ST_EQUAL ? ST_PRIVATE : e->status]++;
        if (counted(e))
            tally[ST_PRIVATE + 1]++;
        if (e->is_private || e->status == ST_EQUAL || e->status == ST_DIFFERENT ||
            e->status == ST_CORRUPT)
            continue;
        if (e->status == ST_MISSING_IN_A)
            fprintf(f, "missing in A: %s (%s)\n", e->path, e->kind);
        else if (e->status == ST_MISSING_IN_B)
            fprintf(f, "missing in B: %s (%s)\n", e->path, e->kind);
        else
            fprintf(f, "structure: %s: %s\n", e->path, e->msg ? e->msg : "differs");
    }
    for (size_t i = 0; i < c.n_e; i++) {
        const entry *e = &c.e[i];
        if (e->is_private)
            continue;
        if (e->status == ST_CORRUPT)
            fprintf(f, "corrupt: %s (%s)\n", e->path, e->msg ? e->msg : "");
        else if (e->status == ST_DIFFERENT && !e->has_data)
            fprintf(f, "different: %s: %s\n", e->path, e->msg ? e->msg : "");
        else if (e->status == ST_DIFFERENT)
            print_dataset(&c, f, e, "different");
        else if (e->status == ST_EQUAL && e->has_data && e->st.bit_count > 0)
            print_dataset(&c, f, e, o->mode == FATTN_DIFF_ULP ? "within ulp" : "within tol");
    }
    /* private entries, one line per _impl group (they come in walk order) */
    for (size_t i = 0; i < c.n_e;) {
        const entry *e = &c.e[i];
        if (!e->is_private || e->status == ST_EQUAL) {
            i++;
            continue;
        }
        const char *im = strstr(e->path, "/_impl");
        size_t plen = im ? (size_t)(im - e->path) + 6 : strlen(e->path);
        size_t k[ST_PRIVATE + 1] = {0};
        size_t j = i;
        for (; j < c.n_e; j++) {
            const entry *q = &c.e[j];
            if (!q->is_private || strncmp(q->path, e->path, plen) != 0 ||
                (q->path[plen] != '/' && q->path[plen] != '@' && q->path[plen] != '\0'))
                break;
            k[q->status]++;
        }
        fprintf(f, "private (_impl, not counted): %.*s:", (int)plen, e->path);
        const char *sep = " ";
        for (int s = ST_DIFFERENT; s < ST_PRIVATE; s++) {
            if (k[s]) {
                fprintf(f, "%s%zu %s", sep, k[s], status_name[s]);
                sep = ", ";
            }
        }
        fputc('\n', f);
        i = j;
    }
    if (c.audit_skipped)
        fprintf(f, "/audit: not compared (use --audit)\n");
    rc = tally[ST_PRIVATE + 1] ? 1 : 0;
    fprintf(f,
            "summary: %zu datasets compared, %zu counted differences (%zu different, %zu corrupt, "
            "%zu structure, %zu missing in A, %zu missing in B), %zu private; exit %d\n",
            n_data, tally[ST_PRIVATE + 1], tally[ST_DIFFERENT], tally[ST_CORRUPT],
            tally[ST_STRUCTURE], tally[ST_MISSING_IN_A], tally[ST_MISSING_IN_B],
            tally[ST_PRIVATE], rc);
    fflush(f);
    if (o->json_path && write_json(&c, rc, tally) != 0)
        rc = 2;
out:
    for (size_t i = 0; i < c.n_e; i++) {
        free(c.e[i].path);
        free(c.e[i].msg);
    }
    free(c.e);
    for (size_t i = 0; i < c.n_prov; i++) {
        free(c.prov[i].path);
        free(c.prov[i].a);
        free(c.prov[i].b);
    }
    free(c.prov);
    free(c.jobs);
    free(c.buf_a);
    free(c.buf_b);
    free_sq_tables();
    fattn_h5_node_free(ta);
    fattn_h5_node_free(tb);
    fattn_h5_reader_close(c.ra);
    fattn_h5_reader_close(c.rb);
    return rc;
}
