/* Lowering a cg_graph to cuDNN backend descriptors, planning, executing
 * (cudnn_internal.h). Loading the libraries is load.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fattn_config.h"
#include "cudnn/cudnn_internal.h"
#include "fattn/clock.h"

/* ---- lowering --------------------------------------------------------------- */

static cudnnDataType_t dt_of(cg_dtype t)
{
    switch (t) {
    case CG_F16: return CUDNN_DATA_HALF;
    case CG_BF16: return CUDNN_DATA_BFLOAT16;
    case CG_I32: return CUDNN_DATA_INT32;
    case CG_I64: return CUDNN_DATA_INT64;
    case CG_BOOL: return CUDNN_DATA_BOOLEAN;
    case CG_FP8_E4M3: return CUDNN_DATA_FP8_E4M3;
    case CG_FP8_E5M2: return CUDNN_DATA_FP8_E5M2;
    default: return CUDNN_DATA_FLOAT;
    }
}

static cudnnPointwiseMode_t pw_of(cg_pw_mode m)
{
    switch (m) {
    case CG_PW_ADD: return CUDNN_POINTWISE_ADD;
    case CG_PW_SUB: return CUDNN_POINTWISE_SUB;
    case CG_PW_MUL: return CUDNN_POINTWISE_MUL;
    case CG_PW_DIV: return CUDNN_POINTWISE_DIV;
    case CG_PW_MAX: return CUDNN_POINTWISE_MAX;
    case CG_PW_EXP: return CUDNN_POINTWISE_EXP;
    case CG_PW_LOG: return CUDNN_POINTWISE_LOG;
    case CG_PW_IDENTITY: return CUDNN_POINTWISE_IDENTITY;
    case CG_PW_CMP_GE: return CUDNN_POINTWISE_CMP_GE;
    case CG_PW_CMP_GT: return CUDNN_POINTWISE_CMP_GT;
    case CG_PW_CMP_LT: return CUDNN_POINTWISE_CMP_LT;
    case CG_PW_LOGICAL_AND: return CUDNN_POINTWISE_LOGICAL_AND;
    case CG_PW_BINARY_SELECT: return CUDNN_POINTWISE_BINARY_SELECT;
    default: return CUDNN_POINTWISE_GEN_INDEX;
    }
}

typedef struct lowering {
    const cudnn_api *api;
    cudnn_plan *p;
    fattn_status st;
    const char *what;
} lowering;

static cudnnBackendDescriptor_t mk(lowering *L, cudnnBackendDescriptorType_t type)
{
    if (L->st != FATTN_OK)
        return NULL;
    cudnn_plan *p = L->p;
    if (p->ndescs == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        void *n = realloc(p->descs, (size_t)cap * sizeof *p->descs);
        if (!n) {
            L->st = fattn_error(FATTN_E_NOMEM, "cuDNN engine: descriptor table");
            return NULL;
        }
        p->descs = n;
        p->cap = cap;
    }
    cudnnBackendDescriptor_t d = NULL;
    cudnnStatus_t s = L->api->BackendCreateDescriptor(type, &d);
    if (s != CUDNN_STATUS_SUCCESS) {
        L->st = fattn__cudnn_fail(L->api, s, "cudnnBackendCreateDescriptor");
        return NULL;
    }
    p->descs[p->ndescs++] = d;
    return d;
}

static void set(lowering *L, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t n, const void *v)
{
    if (L->st != FATTN_OK)
        return;
    cudnnStatus_t s = L->api->BackendSetAttribute(d, name, type, n, v);
    if (s != CUDNN_STATUS_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "SetAttribute %d (%s)", (int)name, L->what);
        L->st = fattn__cudnn_fail(L->api, s, what);
    }
}

static void fin(lowering *L, cudnnBackendDescriptor_t d)
{
    if (L->st != FATTN_OK)
        return;
    cudnnStatus_t s = L->api->BackendFinalize(d);
    if (s != CUDNN_STATUS_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "Finalize (%s)", L->what);
        L->st = fattn__cudnn_fail(L->api, s, what);
    }
}

static void set_desc(lowering *L, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                     cudnnBackendDescriptor_t v)
{
    set(L, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

static void lower_tensor(lowering *L, const cg_graph *g, int i)
{
    const cg_tensor *t = &g->t[i];
    L->what = t->name;
    cudnnBackendDescriptor_t d = mk(L, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    cudnnDataType_t dt = dt_of(t->dtype);
    int64_t align = 16;
    bool virt = t->is_virtual, byval = t->by_value;
    set(L, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    set(L, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t->dims);
    set(L, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t->strides);
    set(L, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t->uid);
    set(L, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    set(L, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    set(L, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval);
    if (t->ragged >= 0)
        set_desc(L, d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, L->p->tensors[t->ragged]);
    fin(L, d);
    L->p->tensors[i] = d;
}

/* cudnn-frontend's UnifiedSoftmaxNode: X, Y, and the optional sink, Stats
 * and Max. */
static cudnnBackendDescriptor_t lower_softmax(lowering *L, const cg_op *o)
{
    cudnnBackendDescriptor_t *T = L->p->tensors;
    cudnnBackendDescriptor_t op = mk(L, CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR);
    set_desc(L, op, CUDNN_ATTR_OPERATION_SOFTMAX_XDESC, T[o->in[0]]);
    set_desc(L, op, CUDNN_ATTR_OPERATION_SOFTMAX_YDESC, T[o->out]);
    if (o->in[1] >= 0)
        set_desc(L, op, CUDNN_ATTR_OPERATION_SOFTMAX_SINK_DESC, T[o->in[1]]);
    if (o->sdpa[CG_SDPA_STATS] >= 0)
        set_desc(L, op, CUDNN_ATTR_OPERATION_SOFTMAX_STATS_DESC, T[o->sdpa[CG_SDPA_STATS]]);
    if (o->sdpa[CG_SDPA_MAX] >= 0)
        set_desc(L, op, CUDNN_ATTR_OPERATION_SOFTMAX_MAX_DESC, T[o->sdpa[CG_SDPA_MAX]]);
    return op;
}

static cudnnBackendDescriptor_t lower_op(lowering *L, const cg_graph *g, const cg_op *o)
{
    cudnnBackendDescriptor_t *T = L->p->tensors;
    L->what = o->name;
    cudnnBackendDescriptor_t op = NULL;
    cudnnDataType_t math = dt_of(o->math);
    switch (o->kind) {
    case CG_OP_POINTWISE: {
        cudnnBackendDescriptor_t pwd = mk(L, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        cudnnPointwiseMode_t mode = pw_of((cg_pw_mode)o->mode);
        set(L, pwd, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
        set(L, pwd, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
        if (o->axis >= 0)
            set(L, pwd, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &o->axis);
        fin(L, pwd);
        op = mk(L, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        set_desc(L, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pwd);
        set_desc(L, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, T[o->in[0]]);
        if (o->in[1] >= 0)
            set_desc(L, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, T[o->in[1]]);
        if (o->in[2] >= 0)
            set_desc(L, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, T[o->in[2]]);
        set_desc(L, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, T[o->out]);
        break;
    }
    case CG_OP_REDUCTION: {
        cudnnBackendDescriptor_t rd = mk(L, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
        cudnnReduceTensorOp_t rop = o->mode == CG_RED_MAX    ? CUDNN_REDUCE_TENSOR_MAX
                                    : o->mode == CG_RED_AMAX ? CUDNN_REDUCE_TENSOR_AMAX
                                                             : CUDNN_REDUCE_TENSOR_ADD;
        bool det = false;
        set(L, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &rop);
        set(L, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math);
        set(L, rd, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &det);
        fin(L, rd);
        op = mk(L, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
        set_desc(L, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
        set_desc(L, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, T[o->in[0]]);
        set_desc(L, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, T[o->out]);
        break;
    }
    case CG_OP_MATMUL: {
        cudnnBackendDescriptor_t md = mk(L, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
        set(L, md, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math);
        fin(L, md);
        op = mk(L, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
        set_desc(L, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, T[o->in[0]]);
        set_desc(L, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, T[o->in[1]]);
        set_desc(L, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, T[o->out]);
        set_desc(L, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, md);
        if (o->m_override >= 0)
            set_desc(L, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, T[o->m_override]);
        if (o->n_override >= 0)
            set_desc(L, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, T[o->n_override]);
        if (o->k_override >= 0)
            set_desc(L, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, T[o->k_override]);
        break;
    }
    case CG_OP_RNG: {
        cudnnBackendDescriptor_t rd = mk(L, CUDNN_BACKEND_RNG_DESCRIPTOR);
        cudnnRngDistribution_t dist = CUDNN_RNG_DISTRIBUTION_BERNOULLI;
        set(L, rd, CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_TYPE_RNG_DISTRIBUTION, 1, &dist);
        set(L, rd, CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, CUDNN_TYPE_DOUBLE, 1,
            &o->bernoulli_p);
        fin(L, rd);
        op = mk(L, CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR);
        set_desc(L, op, CUDNN_ATTR_OPERATION_RNG_YDESC, T[o->out]);
        set_desc(L, op, CUDNN_ATTR_OPERATION_RNG_DESC, rd);
        set_desc(L, op, CUDNN_ATTR_OPERATION_RNG_SEED, T[o->in[0]]);
        set_desc(L, op, CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, T[o->in[1]]);
        break;
    }
    case CG_OP_PAGED_LOAD: /* cudnn-frontend's PagedCacheLoadNode */
        op = mk(L, CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR);
        set_desc(L, op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, T[o->in[0]]);
        set_desc(L, op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, T[o->in[2]]);
        set_desc(L, op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, T[o->in[1]]);
        set_desc(L, op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC, T[o->out]);
        break;
    case CG_OP_RESHAPE:
        op = mk(L, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
        set_desc(L, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, T[o->in[0]]);
        set_desc(L, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, T[o->out]);
        break;
    case CG_OP_SDPA_FWD: {
        static const cudnnBackendAttributeName_t names[CG_SDPA_DO] = {
            CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC,
            CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC,
            CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC};
        op = mk(L, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
        for (int i = 0; i < CG_SDPA_DO; i++)
            if (o->sdpa[i] >= 0)
                set_desc(L, op, names[i], T[o->sdpa[i]]);
        break;
    }
    case CG_OP_SDPA_BWD: {
        static const cudnnBackendAttributeName_t names[CG_SDPA_MAX] = {
            CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC,     CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC,
            CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC,     CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC,
            CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC,
            CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC,   CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC,
            CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC,    CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC};
        op = mk(L, CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR);
        for (int i = 0; i < CG_SDPA_MAX; i++)
            if (o->sdpa[i] >= 0)
                set_desc(L, op, names[i], T[o->sdpa[i]]);
        break;
    }
    case CG_OP_SOFTMAX:
        op = lower_softmax(L, o);
        break;
    }
    fin(L, op);
    (void)g;
    return op;
}

/* Up to one descriptor of `type` per knob type, to read a knob list into;
 * how many were made (the caller destroys them). */
static int make_descs(const cudnn_api *api, cudnnBackendDescriptorType_t type,
                      cudnnBackendDescriptor_t out[CUDNN_KNOB_TYPE_COUNTS])
{
    int made = 0;
    for (; made < CUDNN_KNOB_TYPE_COUNTS; made++)
        if (api->BackendCreateDescriptor(type, &out[made]) != CUDNN_STATUS_SUCCESS)
            break;
    return made;
}

/* "eng<id>_k<type>=<value>..." of a finalized engine config. */
static void engine_tag(lowering *L, cudnnBackendDescriptor_t cfg, char *tag, size_t cap)
{
    const cudnn_api *api = L->api;
    cudnnBackendDescriptor_t eng = NULL;
    int64_t n = 0, id = -1;
    snprintf(tag, cap, "eng?");
    if (api->BackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) !=
        CUDNN_STATUS_SUCCESS)
        return;
    if (api->BackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 1, &n, &eng) == CUDNN_STATUS_SUCCESS &&
        api->BackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                 &id) == CUDNN_STATUS_SUCCESS)
        snprintf(tag, cap, "eng%lld", (long long)id);
    api->BackendDestroyDescriptor(eng);
    cudnnBackendDescriptor_t knobs[CUDNN_KNOB_TYPE_COUNTS];
    int made = make_descs(api, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, knobs);
    int64_t nk = 0;
    if (api->BackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, made, &nk, knobs) ==
        CUDNN_STATUS_SUCCESS) {
        for (int64_t i = 0; i < nk && i < made; i++) {
            cudnnBackendKnobType_t type;
            int64_t value = 0, c = 0;
            if (api->BackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                         CUDNN_TYPE_KNOB_TYPE, 1, &c, &type) !=
                    CUDNN_STATUS_SUCCESS ||
                api->BackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                         CUDNN_TYPE_INT64, 1, &c, &value) != CUDNN_STATUS_SUCCESS)
                continue;
            size_t len = strlen(tag);
            snprintf(tag + len, cap - len, "_k%d=%lld", (int)type, (long long)value);
        }
    }
    for (int i = 0; i < made; i++)
        api->BackendDestroyDescriptor(knobs[i]);
}

/* Whether the engine of a finalized config carries note `note` of kind
 * `attr` (CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE or _NUMERICAL_NOTE, of type
 * `type`; both note enums are int-sized). False when cuDNN cannot say: the
 * store then treats the plan as not serializable (a rebuild in the next
 * process), and a deterministic search as not nondeterministic. */
static bool cfg_has_note(const cudnn_api *api, cudnnBackendDescriptor_t cfg,
                         cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type,
                         int note)
{
#define MAX_NOTES 64
    _Static_assert((int)CUDNN_BEHAVIOR_NOTE_TYPE_COUNT <= MAX_NOTES &&
                       (int)CUDNN_NUMERICAL_NOTE_TYPE_COUNT <= MAX_NOTES,
                   "room for every note");
    _Static_assert(sizeof(cudnnBackendBehaviorNote_t) == sizeof(int) &&
                       sizeof(cudnnBackendNumericalNote_t) == sizeof(int),
                   "notes read as ints");
    cudnnBackendDescriptor_t eng = NULL;
    if (api->BackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) !=
        CUDNN_STATUS_SUCCESS)
        return false;
    bool has = false;
    int64_t n = 0;
    int notes[MAX_NOTES];
    if (api->BackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 1, &n, &eng) == CUDNN_STATUS_SUCCESS &&
        api->BackendGetAttribute(eng, attr, type, MAX_NOTES, &n, notes) == CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < n && i < MAX_NOTES; i++)
            has = has || notes[i] == note;
    api->BackendDestroyDescriptor(eng);
    return has;
#undef MAX_NOTES
}

static bool cfg_runtime_compiled(const cudnn_api *api, cudnnBackendDescriptor_t cfg)
{
    return cfg_has_note(api, cfg, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                        CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION);
}

static bool cfg_nondeterministic(const cudnn_api *api, cudnnBackendDescriptor_t cfg)
{
    return cfg_has_note(api, cfg, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                        CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
}

/* Finalize the execution plan of one config into p (plan, tag, behaviour,
 * workspace); false when cuDNN refuses it (its reason in last). */
static bool finalize_config(lowering *L, cudnn_plan *p, cudnnBackendDescriptor_t cfg, char *last,
                            size_t cap)
{
    const cudnn_api *api = L->api;
    cudnnBackendDescriptor_t plan = NULL;
    if (api->BackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) !=
        CUDNN_STATUS_SUCCESS)
        return false;
    cudnnStatus_t s = api->BackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api->BackendFinalize(plan);
    if (s != CUDNN_STATUS_SUCCESS) {
        api->GetLastErrorString(last, cap);
        api->BackendDestroyDescriptor(plan);
        return false;
    }
    /* keep it (destroyed with the others) */
    if (p->ndescs == p->cap) {
        void *n = realloc(p->descs, (size_t)(p->cap + 1) * sizeof *p->descs);
        if (!n) {
            api->BackendDestroyDescriptor(plan);
            L->st = fattn_error(FATTN_E_NOMEM, "cuDNN engine: descriptor table");
            return false;
        }
        p->descs = n;
        p->cap++;
    }
    p->descs[p->ndescs++] = plan;
    p->plan = plan;
    engine_tag(L, cfg, p->tag, sizeof p->tag);
    p->runtime_compiled = cfg_runtime_compiled(api, cfg);
    int64_t ws = 0, c = 0;
    s = api->BackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                 1, &c, &ws);
    if (s != CUDNN_STATUS_SUCCESS)
        L->st = fattn__cudnn_fail(api, s, "plan workspace size");
    p->workspace = ws;
    return true;
}

/* Heuristics `mode` on the finalized operation graph, then the plan of
 * config `index` (-1: the first that finalizes); det_only skips configs
 * whose engine is noted non-deterministic. */
static void pick_config(lowering *L, cudnn_plan *p, cudnnBackendDescriptor_t og,
                        cudnnBackendHeurMode_t mode, int index, bool det_only)
{
    const cudnn_api *api = L->api;
    L->what = "heuristics";
    cudnnBackendDescriptor_t heur = mk(L, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    set_desc(L, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, og);
    set(L, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    fin(L, heur);
    int64_t count = 0;
    if (L->st == FATTN_OK) {
        cudnnStatus_t s = api->BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
        if (s != CUDNN_STATUS_SUCCESS)
            L->st = fattn__cudnn_fail(api, s, "heuristics result count");
    }
    p->configs = (int)count;
    char last[2048] = "";
    if (L->st == FATTN_OK && count <= index) {
        L->st = fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: heuristics mode %d has %lld "
                            "configs, no config %d", (int)mode, (long long)count, index);
        return;
    }
    if (L->st == FATTN_OK && count <= 0) {
        api->GetLastErrorString(last, sizeof last);
        L->st = fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: heuristics found no engine "
                            "for this graph%s%s", *last ? ": " : "", last);
        return;
    }
    cudnnBackendDescriptor_t *cfgs = L->st == FATTN_OK ? calloc((size_t)count, sizeof *cfgs) : NULL;
    if (L->st == FATTN_OK && !cfgs)
        L->st = fattn_error(FATTN_E_NOMEM, "cuDNN engine: configs");
    for (int64_t i = 0; i < count && L->st == FATTN_OK; i++)
        cfgs[i] = mk(L, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t got = 0;
    if (L->st == FATTN_OK) {
        cudnnStatus_t s = api->BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                                   cfgs);
        if (s != CUDNN_STATUS_SUCCESS)
            L->st = fattn__cudnn_fail(api, s, "heuristics results");
    }
    for (int64_t i = 0; i < got && L->st == FATTN_OK && !p->plan; i++) {
        if (index >= 0 && i != index)
            continue;
        if (det_only && cfg_nondeterministic(api, cfgs[i])) {
            snprintf(last, sizeof last, "config %lld is non-deterministic", (long long)i);
            continue;
        }
        finalize_config(L, p, cfgs[i], last, sizeof last);
    }
    free(cfgs);
    if (L->st == FATTN_OK && !p->plan)
        L->st = fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: %s of %lld engine configs "
                            "finalized a plan: %s", index >= 0 ? "not the chosen one" : "none",
                            (long long)got, last);
}

/* g's tensors and operations, and its finalized operation graph, into L's plan. */
static cudnnBackendDescriptor_t lower_graph(lowering *L, const cg_graph *g, cudnnHandle_t handle)
{
    for (int i = 0; i < g->nt && L->st == FATTN_OK; i++)
        lower_tensor(L, g, i);
    cudnnBackendDescriptor_t ops[CG_MAX_OPS];
    for (int i = 0; i < g->nops && L->st == FATTN_OK; i++)
        ops[i] = lower_op(L, g, &g->ops[i]);
    L->what = "operation graph";
    cudnnBackendDescriptor_t og = mk(L, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(L, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, ops);
    if (handle) /* required in practice for heuristics (prototype findings) */
        set(L, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    fin(L, og);
    L->p->op_graph = og;
    return og;
}

/* A new plan for api with g lowered into it (L's status says how that
 * went); NULL when out of memory. */
static cudnn_plan *plan_lowered(const cudnn_api *api, cudnnHandle_t handle, const cg_graph *g,
                                lowering *L, cudnnBackendDescriptor_t *og)
{
    cudnn_plan *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->api = api;
    *L = (lowering){api, p, FATTN_OK, ""};
    *og = lower_graph(L, g, handle);
    return p;
}

/* The end of a plan build: p (configs chosen) returned in *out with its build
 * time since t0, or freed when L failed. */
static fattn_status plan_finish(const lowering *L, cudnn_plan *p, double t0, cudnn_plan **out)
{
    if (L->st != FATTN_OK) {
        fattn__cudnn_plan_free(p);
        return L->st;
    }
    p->build_seconds = fattn_now_s() - t0;
    *out = p;
    return FATTN_OK;
}

fattn_status fattn__cudnn_plan_build_config(const cudnn_api *api, cudnnHandle_t handle,
                                     const cg_graph *g, cudnnBackendHeurMode_t mode, int index,
                                     bool det_only, cudnn_plan **out)
{
    *out = NULL;
    double t0 = fattn_now_s();
    lowering L;
    cudnnBackendDescriptor_t og;
    cudnn_plan *p = plan_lowered(api, handle, g, &L, &og);
    if (!p)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: plan");
    if (L.st == FATTN_OK && handle)
        pick_config(&L, p, og, mode, index, det_only);
    return plan_finish(&L, p, t0, out);
}

/* ---- engine configs made by hand (autotune's knob sweep) --------------------- */

/* The range cuDNN declares for knob `type` of the finalized engine `eng`;
 * false when it declares none. */
static bool knob_range(const cudnn_api *api, cudnnBackendDescriptor_t eng,
                       cudnnBackendKnobType_t type, int64_t range[3])
{
    cudnnBackendDescriptor_t info[CUDNN_KNOB_TYPE_COUNTS];
    int made = make_descs(api, CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, info);
    int64_t n = 0, c = 0;
    bool found = false;
    if (api->BackendGetAttribute(eng, CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 made, &n, info) == CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < n && i < made && !found; i++) {
            cudnnBackendKnobType_t t;
            found = api->BackendGetAttribute(info[i], CUDNN_ATTR_KNOB_INFO_TYPE,
                                             CUDNN_TYPE_KNOB_TYPE, 1, &c, &t) ==
                        CUDNN_STATUS_SUCCESS &&
                    t == type &&
                    api->BackendGetAttribute(info[i], CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE,
                                             CUDNN_TYPE_INT64, 1, &c, &range[0]) ==
                        CUDNN_STATUS_SUCCESS &&
                    api->BackendGetAttribute(info[i], CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE,
                                             CUDNN_TYPE_INT64, 1, &c, &range[1]) ==
                        CUDNN_STATUS_SUCCESS &&
                    api->BackendGetAttribute(info[i], CUDNN_ATTR_KNOB_INFO_STRIDE,
                                             CUDNN_TYPE_INT64, 1, &c, &range[2]) ==
                        CUDNN_STATUS_SUCCESS;
        }
    for (int i = 0; i < made; i++)
        api->BackendDestroyDescriptor(info[i]);
    return found && range[2] > 0 && range[1] >= range[0];
}

fattn_status fattn__cudnn_plan_build_knobs(const cudnn_api *api, cudnnHandle_t handle,
                                    const cg_graph *g, int64_t engine, int nknobs,
                                    const int32_t *types, const int64_t *values,
                                    bool det_only, int64_t range_of, int64_t range[3],
                                    cudnn_plan **out)
{
    *out = NULL;
    if (range)
        range[0] = range[1] = range[2] = 0;
    if (!handle || nknobs < 0 || nknobs > CUDNN_KNOB_TYPE_COUNTS)
        return fattn_error(FATTN_E_INVALID_ARG, "cuDNN engine: knobs: %d knobs, handle %p",
                           nknobs, (void *)handle);
    double t0 = fattn_now_s();
    lowering L;
    cudnnBackendDescriptor_t og;
    cudnn_plan *p = plan_lowered(api, handle, g, &L, &og);
    if (!p)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: plan");
    L.what = "engine";
    cudnnBackendDescriptor_t eng = mk(&L, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    set_desc(&L, eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, og);
    set(&L, eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &engine);
    fin(&L, eng);
    if (L.st == FATTN_OK && range)
        (void)knob_range(api, eng, (cudnnBackendKnobType_t)range_of, range);
    L.what = "knob choice";
    cudnnBackendDescriptor_t choice[CUDNN_KNOB_TYPE_COUNTS];
    for (int i = 0; i < nknobs; i++) {
        cudnnBackendKnobType_t type = (cudnnBackendKnobType_t)types[i];
        choice[i] = mk(&L, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
        set(&L, choice[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type);
        set(&L, choice[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &values[i]);
        fin(&L, choice[i]);
    }
    L.what = "engine config";
    cudnnBackendDescriptor_t cfg = mk(&L, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    set_desc(&L, cfg, CUDNN_ATTR_ENGINECFG_ENGINE, eng);
    if (nknobs > 0)
        set(&L, cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, nknobs,
            choice);
    char last[2048] = "";
    /* a knob value the engine does not take is refused here: unsupported,
     * not a failure of cuDNN */
    cudnnStatus_t s = L.st == FATTN_OK ? api->BackendFinalize(cfg) : CUDNN_STATUS_SUCCESS;
    if (s == CUDNN_STATUS_NOT_SUPPORTED) {
        api->GetLastErrorString(last, sizeof last);
        L.st = fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: eng%lld does not take these "
                           "knob values (engine config: CUDNN_STATUS_NOT_SUPPORTED)%s%s",
                           (long long)engine, *last ? ": " : "", last);
    } else if (s != CUDNN_STATUS_SUCCESS) {
        L.st = fattn__cudnn_fail(api, s, "Finalize (engine config)");
    }
    if (L.st == FATTN_OK && det_only &&
        cfg_nondeterministic(api, cfg))
        L.st = fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: eng%lld is non-deterministic",
                           (long long)engine);
    if (L.st == FATTN_OK && !finalize_config(&L, p, cfg, last, sizeof last) && L.st == FATTN_OK)
        L.st = fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: eng%lld with these knobs does "
                           "not finalize: %s", (long long)engine, last);
    p->configs = 1;
    return plan_finish(&L, p, t0, out);
}

fattn_status fattn__cudnn_plan_build(const cudnn_api *api, cudnnHandle_t handle, const cg_graph *g,
                              cudnn_plan **out)
{
    return fattn__cudnn_plan_build_config(api, handle, g, CUDNN_HEUR_MODE_A, -1, false, out);
}

void fattn__cudnn_plan_free(cudnn_plan *p)
{
    if (!p)
        return;
    for (int i = p->ndescs - 1; i >= 0; i--)
        p->api->BackendDestroyDescriptor(p->descs[i]);
    free(p->descs);
    free(p);
}

/* ---- serialized plans (the plan store) --------------------------------------- */

fattn_status fattn__cudnn_plan_serialize(const cudnn_plan *p, unsigned char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (!p->plan || p->from_store)
        return fattn_error(FATTN_E_INVALID_ARG, "cuDNN engine: serialize: %s",
                           p->from_store ? "plan came from the store" : "no plan was built");
    /* cuDNN documents serialization for runtime-compiled engines only
     * (cudnn-frontend: "Serialization is only supported on Runtime compiled
     * engines"); others have precompiled kernels and build fast anyway. */
    if (!p->runtime_compiled)
        return fattn_error(FATTN_E_UNSUPPORTED,
                           "cuDNN engine: %s is not a runtime-compiled engine; cuDNN serializes "
                           "only those",
                           p->tag);
    const cudnn_api *api = p->api;
    int64_t n = 0;
    cudnnStatus_t s = api->BackendGetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                               CUDNN_TYPE_CHAR, 0, &n, NULL);
    if (s != CUDNN_STATUS_SUCCESS) {
        fattn__cudnn_fail(api, s, "serialize plan (size)");
        return fattn_error(FATTN_E_UNSUPPORTED, "%s", fattn_last_error());
    }
    if (n <= 0)
        return fattn_error(FATTN_E_UNSUPPORTED, "cuDNN engine: %s serialized to %lld bytes",
                           p->tag, (long long)n);
    unsigned char *buf = malloc((size_t)n);
    if (!buf)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: %lld bytes of serialized plan",
                           (long long)n);
    int64_t got = 0;
    s = api->BackendGetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                 CUDNN_TYPE_CHAR, n, &got, buf);
    if (s != CUDNN_STATUS_SUCCESS || got <= 0 || got > n) {
        free(buf);
        if (s != CUDNN_STATUS_SUCCESS) {
            fattn__cudnn_fail(api, s, "serialize plan");
            return fattn_error(FATTN_E_UNSUPPORTED, "%s", fattn_last_error());
        }
        return fattn_error(FATTN_E_UNSUPPORTED,
                           "cuDNN engine: serialized plan of %lld bytes after announcing %lld",
                           (long long)got, (long long)n);
    }
    *out = buf;
    *len = (size_t)got;
    return FATTN_OK;
}

fattn_status fattn__cudnn_plan_deserialize(const cudnn_api *api, cudnnHandle_t handle,
                                    const void *blob, size_t len, cudnn_plan **out)
{
    *out = NULL;
    if (!handle || !blob || len == 0 || len > (size_t)INT64_MAX)
        return fattn_error(FATTN_E_INVALID_ARG, "cuDNN engine: deserialize: %s",
                           !handle ? "no handle" : "no bytes");
    cudnn_plan *p = calloc(1, sizeof *p);
    if (!p)
        return fattn_error(FATTN_E_NOMEM, "cuDNN engine: plan");
    p->api = api;
    double t0 = fattn_now_s();
    lowering L = {api, p, FATTN_OK, "plan from the store"};
    cudnnBackendDescriptor_t plan = mk(&L, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    set(&L, plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, (int64_t)len,
        blob);
    /* Deprecated in 9.x headers but what cuDNN reads when restoring a plan
     * (cudnn-frontend's loadFromJson sets exactly these two); the
     * alternative, EXECUTION_PLAN_DEVICEPROP, is for deviceless builds. */
    set(&L, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    fin(&L, plan);
    /* Read back what was restored: the caller compares tag and workspace
     * with the file's, so a plan of another engine is never used. */
    cudnnBackendDescriptor_t cfg = mk(&L, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (L.st == FATTN_OK) {
        int64_t n = 0;
        cudnnStatus_t s = api->BackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &cfg);
        if (s != CUDNN_STATUS_SUCCESS)
            L.st = fattn__cudnn_fail(api, s, "restored plan's engine config");
    }
    if (L.st == FATTN_OK) {
        engine_tag(&L, cfg, p->tag, sizeof p->tag);
        p->runtime_compiled = cfg_runtime_compiled(api, cfg);
        int64_t ws = 0, c = 0;
        cudnnStatus_t s = api->BackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                   CUDNN_TYPE_INT64, 1, &c, &ws);
        if (s != CUDNN_STATUS_SUCCESS)
            L.st = fattn__cudnn_fail(api, s, "restored plan's workspace size");
        p->workspace = ws;
    }
    if (L.st != FATTN_OK) {
        fattn__cudnn_plan_free(p);
        return L.st;
    }
    p->plan = plan;
    p->configs = 1;
    p->from_store = true;
    p->build_seconds = fattn_now_s() - t0;
    *out = p;
    return FATTN_OK;
}
