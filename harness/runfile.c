/* Run files: provenance, loading and full validation (see runfile.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/cudnn.h"
#include "fattn/engine.h"
#include "fattn_config.h"
#include "fattn_git_rev.h"

#include "inputs.h"
#include "isolate.h"
#include "runfile.h"

fattn_status fattn_runfile_set_provenance(fattn_h5_node *root, const char *impl,
                                          const char *backend, const fattn_engine *e)
{
    char created[32];
    fattn_status st = fattn_h5_created_utc(created);
    if (st != FATTN_OK)
        return st;
    bool cpu = !fattn_engine_supports(e, FATTN_ENGINE_Q_CUDA_DEVICE);
    /* The GPU, its SM count and the library versions decide whether bitwise
     * equality with another file can be expected (docs/run-files.md). */
    fattn_cudnn_info info;
    memset(&info, 0, sizeof info);
    char sm[32] = "n/a", cuda[32] = "n/a", cudnn[32] = "n/a", cudnn_h[32] = "n/a";
    if (!cpu && fattn_cudnn_get_info(0, &info) == FATTN_OK) {
        snprintf(sm, sizeof sm, "sm_%d%d", info.cc_major, info.cc_minor);
        snprintf(cuda, sizeof cuda, "%d", info.cuda_runtime_version);
        snprintf(cudnn, sizeof cudnn, "%lld", (long long)info.cudnn_version);
        snprintf(cudnn_h, sizeof cudnn_h, "%lld", (long long)info.cudnn_header_version);
    }
#define PUT(call)                                                                          \
    if ((st = (call)) != FATTN_OK)                                                         \
        return st;
    PUT(fattn_h5_node_set_string(root, "schema", FATTN_RUN_SCHEMA));
    PUT(fattn_h5_node_set_string(root, "impl", impl));
    PUT(fattn_h5_node_set_string(root, "backend", backend));
    PUT(fattn_h5_node_set_string(root, "fattn_version", FATTN_VERSION));
    PUT(fattn_h5_node_set_string(root, "git_rev", FATTN_GIT_REV));
    PUT(fattn_h5_node_set_string(root, "device", cpu ? "cpu"
                                                 : info.device_name[0] ? info.device_name
                                                                       : "unknown"));
    PUT(fattn_h5_node_set_string(root, "sm", sm));
    PUT(fattn_h5_node_set_int64(root, "sm_count", info.sm_count));
    PUT(fattn_h5_node_set_string(root, "cuda_version", cuda));
    PUT(fattn_h5_node_set_string(root, "cudnn_version", cudnn));
    PUT(fattn_h5_node_set_string(root, "cudnn_header_version", cudnn_h));
    PUT(fattn_h5_node_set_uint8(root, "forced_deterministic_bwd", 0));
    PUT(fattn_h5_node_set_int64(root, "cpu_math_version", FATTN_CPU_MATH_VERSION));
    PUT(fattn_h5_node_set_string(root, "poison", "0xff bytes"));
    PUT(fattn_h5_node_set_string(root, "created_utc", created));
#undef PUT
    return FATTN_OK;
}

static bool same_shape(const fattn_h5_node *n, const fattn_tensor *t)
{
    if (n->dtype != t->dtype || n->ndim != t->ndim)
        return false;
    for (int i = 0; i < t->ndim; i++)
        if (n->shape[i] != t->shape[i])
            return false;
    return true;
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* A recorded cu_seqlens array: int32 [b+1], starting at 0, non-decreasing,
 * last entry at most `limit`. */
static fattn_status check_cu(const char *path, const char *id, const fattn_h5_node *g,
                             const char *name, int64_t b, int64_t limit)
{
    const fattn_h5_node *n = fattn_h5_node_find(g, name);
    if (!n)
        return FATTN_OK;
    if (!n->is_dataset || n->dtype != FATTN_DTYPE_INT32 || n->ndim != 1 || n->shape[0] != b + 1)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s must be int32 [%lld]", path, id,
                           name, (long long)(b + 1));
    const int32_t *c = n->data;
    if (c[0] != 0)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s[0] is %d, not 0", path, id, name,
                           c[0]);
    for (int64_t i = 0; i < b; i++)
        if (c[i + 1] < c[i])
            return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s is not monotone at %lld",
                               path, id, name, (long long)i);
    if (c[b] > limit)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s ends at %d, past %lld", path, id,
                           name, c[b], (long long)limit);
    return FATTN_OK;
}

static fattn_status validate_case(const char *path, const fattn_h5_node *c)
{
    if (c->is_dataset)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: /cases/%s is a dataset, not a group", path,
                           c->name);
    const fattn_h5_attr *sa = fattn_h5_node_attr(c, "spec");
    if (!sa || sa->kind != FATTN_H5_ATTR_STRING)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: no spec attribute", path, c->name);
    fattn_spec spec;
    char source[512];
    snprintf(source, sizeof source, "%s: /cases/%s spec", path, c->name);
    fattn_status st = fattn_spec_parse_one(sa->s, strlen(sa->s), source, &spec);
    if (st != FATTN_OK)
        return fattn_error(FATTN_E_INVALID_FILE, "%s", fattn_last_error());
    if (strcmp(spec.id, c->name) != 0) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: spec id is '%s'", path, c->name,
                         spec.id);
        goto done;
    }
    if (fattn_h5_node_attr(c, "skipped")) {
        if (c->n_children)
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: skipped but has state groups",
                             path, c->name);
        goto done;
    }
    /* the inputs the spec makes: dtypes and shapes must match */
    fattn_case_inputs in;
    if ((st = fattn_inputs_make(&spec, &in)) != FATTN_OK) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s", path, c->name,
                         fattn_last_error());
        goto done;
    }
    const fattn_h5_node *g = fattn_h5_node_find(c, "inputs");
    if (!g) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: no inputs group", path, c->name);
        fattn_inputs_free(&in);
        goto done;
    }
    struct { const char *name; const fattn_tensor *t; } want[] = {
        {"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"attn_bias", &in.attn_bias},
        {"softmax_offset", &in.softmax_offset}, {"cu_seqlens_q", &in.cu_seqlens_q},
        {"cu_seqlens_kv", &in.cu_seqlens_kv}, {"cu_seqlens_q_padded", &in.cu_seqlens_q_padded},
        {"cu_seqlens_kv_padded", &in.cu_seqlens_kv_padded}, {"d_out", &in.d_out},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0] && st == FATTN_OK; i++) {
        const fattn_h5_node *n = fattn_h5_node_find(g, want[i].name);
        bool expect = !fattn_tensor_is_empty(want[i].t);
        char dname[96];
        snprintf(dname, sizeof dname, "digest:%s", want[i].name);
        const fattn_h5_attr *digest_only = fattn_h5_node_attr(g, dname);
        if (expect && !n && digest_only) /* a golden keeps it as its digest */
            continue;
        if (!expect && (n || digest_only))
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: inputs/%s should not exist",
                             path, c->name, want[i].name);
        else if (expect && !n)
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: inputs/%s is missing", path,
                             c->name, want[i].name);
        else if (expect && (!n->is_dataset || !same_shape(n, want[i].t))) {
            char a[96], b[96];
            shape_str(want[i].t->ndim, want[i].t->shape, a, sizeof a);
            shape_str(n->ndim, n->shape, b, sizeof b);
            st = fattn_error(FATTN_E_INVALID_FILE,
                             "%s: case %s: inputs/%s is %s %s, the spec makes %s %s", path,
                             c->name, want[i].name, fattn_dtype_name(n->dtype), b,
                             fattn_dtype_name(want[i].t->dtype), a);
        }
    }
    int64_t tq = in.t_q ? in.t_q : spec.b * spec.sq, tkv = in.t_kv ? in.t_kv : spec.b * spec.skv;
    fattn_inputs_free(&in);
    if (st != FATTN_OK)
        goto done;
    const char *cu_groups[] = {"inputs", "save_ctx"};
    for (int gi = 0; gi < 2 && st == FATTN_OK; gi++) {
        const fattn_h5_node *cg = fattn_h5_node_find(c, cu_groups[gi]);
        if (!cg)
            continue;
        if ((st = check_cu(path, c->name, cg, "cu_seqlens_q", spec.b, spec.b * spec.sq)) ||
            (st = check_cu(path, c->name, cg, "cu_seqlens_kv", spec.b, spec.b * spec.skv)) ||
            (st = check_cu(path, c->name, cg, "cu_seqlens_q_padded", spec.b, tq)) ||
            (st = check_cu(path, c->name, cg, "cu_seqlens_kv_padded", spec.b, tkv)))
            break;
    }
    if (st != FATTN_OK)
        goto done;
    const fattn_h5_node *sc = fattn_h5_node_find(c, "save_ctx");
    if (sc && (st = fattn_save_ctx_validate(sc)) != FATTN_OK) {
        st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s", path, c->name,
                         fattn_last_error());
        goto done;
    }
    /* a state, and forward/aux, must be a group */
    static const char *const groups[] = {"inputs", "forward", "save_ctx", "backward",
                                         "forward/aux"};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        const fattn_h5_node *n = fattn_h5_node_find(c, groups[i]);
        if (n && n->is_dataset) {
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: %s is a dataset where a group "
                             "belongs", path, c->name, groups[i]);
            goto done;
        }
    }
    /* states form a prefix of inputs -> forward -> save_ctx -> backward */
    static const char *const order[] = {"inputs", "forward", "save_ctx", "backward"};
    bool gap = false;
    for (int i = 0; i < 4; i++) {
        bool has = fattn_h5_node_find(c, order[i]) != NULL;
        if (has && gap) {
            st = fattn_error(FATTN_E_INVALID_FILE, "%s: case %s: state %s recorded without the "
                             "state before it", path, c->name, order[i]);
            break;
        }
        gap = gap || !has;
    }
done:
    fattn_spec_free(&spec);
    return st;
}

fattn_status fattn_runfile_validate(const char *path, const fattn_h5_node *root)
{
    const fattn_h5_attr *schema = fattn_h5_node_attr(root, "schema");
    if (!schema || schema->kind != FATTN_H5_ATTR_STRING)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: no schema attribute (not a fattn run file)",
                           path);
    if (strcmp(schema->s, FATTN_RUN_SCHEMA) != 0)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: schema is '%s', this fattn reads '%s'", path,
                           schema->s, FATTN_RUN_SCHEMA);
    const fattn_h5_node *cases = fattn_h5_node_find(root, "cases");
    if (!cases || cases->is_dataset)
        return fattn_error(FATTN_E_INVALID_FILE, "%s: no /cases group", path);
    for (size_t i = 0; i < cases->n_children; i++) {
        fattn_status st = validate_case(path, cases->children[i]);
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

/* The whole load, as the isolated child runs it. */
static fattn_status load_and_drop(const char *path, void *ctx)
{
    (void)ctx;
    fattn_h5_node *r = NULL;
    fattn_status st = fattn_h5_read_file(path, NULL, &r);
    if (st == FATTN_OK)
        st = fattn_runfile_validate(path, r);
    fattn_h5_node_free(r);
    return st;
}

fattn_status fattn_runfile_load(const char *path, fattn_h5_node **root)
{
    *root = NULL;
    /* An untrusted file is first read in a forked, resource-limited child,
     * so a crash inside libhdf5 becomes an error instead of ours. */
    fattn_status st = fattn_isolate_run(path, load_and_drop, NULL, 0, 300);
    if (st != FATTN_OK)
        return st == FATTN_E_NOMEM ? st : fattn_error(FATTN_E_INVALID_FILE, "%s",
                                                      fattn_last_error());
    fattn_h5_node *r = NULL;
    st = fattn_h5_read_file(path, NULL, &r);
    if (st != FATTN_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", fattn_last_error());
        return fattn_error(st == FATTN_E_NOMEM ? st : FATTN_E_INVALID_FILE, "%s", msg);
    }
    st = fattn_runfile_validate(path, r);
    if (st != FATTN_OK) {
        fattn_h5_node_free(r);
        return st;
    }
    *root = r;
    return FATTN_OK;
}
