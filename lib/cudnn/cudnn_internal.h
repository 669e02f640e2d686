/* Internals of the cuDNN engine (not installed): the lazily loaded cuDNN and
 * CUDA runtime entry points, and plans lowered from a cg_graph.
 *
 * libfattn has no link-time dependency on libcudnn or libcudart: both are
 * dlopen'ed on first use (fattn__cudnn_api_load), so a CUDA-enabled build still runs
 * the CPU engine on a machine without them. The cuDNN and CUDA headers are
 * used for types and enum values only.
 */
#ifndef FATTN_CUDNN_INTERNAL_H
#define FATTN_CUDNN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include "cudnn/graph.h"
#include "fattn/status.h"

/* The softmax operation arrived in cuDNN 9.20's headers; against older ones
 * (the reference build's 9.19) its enum values, which a header release never
 * renumbers, come from cudnn_graph.h of 9.20 and later. The engine lowers it
 * only when the loaded library is >= 9.21 (fattn__cg_fwd_check_version). */
#if CUDNN_VERSION < 92000
#define CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR ((cudnnBackendDescriptorType_t)45)
#define CUDNN_ATTR_OPERATION_SOFTMAX_XDESC ((cudnnBackendAttributeName_t)3100)
#define CUDNN_ATTR_OPERATION_SOFTMAX_YDESC ((cudnnBackendAttributeName_t)3101)
#define CUDNN_ATTR_OPERATION_SOFTMAX_STATS_DESC ((cudnnBackendAttributeName_t)3102)
#define CUDNN_ATTR_OPERATION_SOFTMAX_MAX_DESC ((cudnnBackendAttributeName_t)3103)
#define CUDNN_ATTR_OPERATION_SOFTMAX_SINK_DESC ((cudnnBackendAttributeName_t)3105)
#endif

typedef struct cudnn_api {
    bool cudnn_loaded, cudart_loaded;
    char cudnn_path[512];
    char load_error[512];
    /* cuDNN */
    size_t (*GetVersion)(void);
    const char *(*GetErrorString)(cudnnStatus_t);
    void (*GetLastErrorString)(char *, size_t);
    cudnnStatus_t (*Create)(cudnnHandle_t *);
    cudnnStatus_t (*Destroy)(cudnnHandle_t);
    cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*BackendCreateDescriptor)(cudnnBackendDescriptorType_t,
                                             cudnnBackendDescriptor_t *);
    cudnnStatus_t (*BackendDestroyDescriptor)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*BackendFinalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*BackendSetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                         cudnnBackendAttributeType_t, int64_t, const void *);
    cudnnStatus_t (*BackendGetAttribute)(cudnnBackendDescriptor_t const,
                                         cudnnBackendAttributeName_t,
                                         cudnnBackendAttributeType_t, int64_t, int64_t *,
                                         void *);
    cudnnStatus_t (*BackendExecute)(cudnnHandle_t, cudnnBackendDescriptor_t,
                                    cudnnBackendDescriptor_t);
    /* CUDA runtime */
    cudaError_t (*cudaGetDeviceCount)(int *);
    cudaError_t (*cudaSetDevice)(int);
    cudaError_t (*cudaDeviceGetAttribute)(int *, enum cudaDeviceAttr, int);
    cudaError_t (*cudaGetDeviceProperties)(void *, int);
    cudaError_t (*cudaRuntimeGetVersion)(int *);
    cudaError_t (*cudaDriverGetVersion)(int *);
    cudaError_t (*cudaMalloc)(void **, size_t);
    cudaError_t (*cudaFree)(void *);
    cudaError_t (*cudaMemcpy)(void *, const void *, size_t, enum cudaMemcpyKind);
    cudaError_t (*cudaMemset)(void *, int, size_t);
    cudaError_t (*cudaDeviceSynchronize)(void);
    const char *(*cudaGetErrorString)(cudaError_t);
    cudaError_t (*cudaEventCreate)(cudaEvent_t *);
    cudaError_t (*cudaEventDestroy)(cudaEvent_t);
    cudaError_t (*cudaEventRecord)(cudaEvent_t, cudaStream_t);
    cudaError_t (*cudaEventSynchronize)(cudaEvent_t);
    cudaError_t (*cudaEventElapsedTime)(float *, cudaEvent_t, cudaEvent_t);
} cudnn_api;

/* Load libcudnn (and, if want_cudart, libcudart) once per process; the
 * result is cached. Search order for cuDNN: the path
 * fattn_cudnn_use_libraries named (the CLI's $FATTN_CUDNN_LIB), the build's
 * -Dcudnn_dir, then the loader's path ("libcudnn.so.9"); for the runtime its
 * named path, then libcudart.so, .so.13, .so.12. Returns NULL with
 * fattn_error set (FATTN_E_UNSUPPORTED) when a library is missing. */
const cudnn_api *fattn__cudnn_api_load(bool want_cudart);

/* "<status name>: <cudnnGetLastErrorString>" for messages. */
fattn_status fattn__cudnn_fail(const cudnn_api *api, cudnnStatus_t s, const char *what);

/* Revision of the lowering (lower.c): bump it whenever the descriptors
 * built for a given fattn__cg_dump change (an attribute set or dropped, an
 * alignment, a flag) without the dump changing. It is part of the plan
 * store's key (plan_store.h), so plans stored by an older lowering are not
 * restored. */
#define CUDNN_LOWERING_REVISION 1

/* A lowered graph: every backend descriptor it created stays alive until
 * fattn__cudnn_plan_free. Without a handle (no GPU) lowering stops after the
 * operation graph finalizes (plan == NULL). */
typedef struct cudnn_plan {
    const cudnn_api *api;
    cudnnBackendDescriptor_t *descs; /* all descriptors, destroyed in reverse */
    int ndescs, cap;
    cudnnBackendDescriptor_t tensors[CG_MAX_TENSORS];
    cudnnBackendDescriptor_t op_graph;
    cudnnBackendDescriptor_t plan;    /* NULL when not built */
    int64_t workspace;
    int configs;                      /* heuristics results */
    char tag[96];                     /* "eng2_k24=7" */
    double build_seconds;             /* build, or restore from the plan store */
    /* The engine carries CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION: its kernels
     * are compiled when the plan finalizes, and only such plans can be
     * serialized (fattn__cudnn_plan_serialize). */
    bool runtime_compiled;
    bool from_store;                  /* restored by fattn__cudnn_plan_deserialize */
} cudnn_plan;

/* Lower g to descriptors; with a handle also run heuristics mode A and keep
 * the first config whose plan finalizes. */
fattn_status fattn__cudnn_plan_build(const cudnn_api *api, cudnnHandle_t handle, const cg_graph *g,
                              cudnn_plan **out);
/* The same with heuristics `mode` and, for index >= 0, exactly config
 * `index` of its results (FATTN_E_UNSUPPORTED when there is none or it does
 * not finalize; p->configs says how many the mode offers); det_only skips
 * configs whose engine carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC. The
 * autotune mode's candidates (plans.c). */
fattn_status fattn__cudnn_plan_build_config(const cudnn_api *api, cudnnHandle_t handle,
                                     const cg_graph *g, cudnnBackendHeurMode_t mode, int index,
                                     bool det_only, cudnn_plan **out);
/* The plan of engine `engine` (its global index) with knobs types[i] (a
 * cudnnBackendKnobType_t's value) = values[i], made by hand without
 * heuristics: autotune's sweep of one knob beside the heuristics' configs,
 * and a graph's pinned config (cg_graph.pin). FATTN_E_UNSUPPORTED when cuDNN does not
 * finalize it (or, with det_only, the engine is noted non-deterministic).
 * With range non-NULL, also the range cuDNN declares for knob `range_of`
 * of that engine ({min, max, stride}; all 0 when it declares none), filled
 * even when the plan fails. */
fattn_status fattn__cudnn_plan_build_knobs(const cudnn_api *api, cudnnHandle_t handle,
                                    const cg_graph *g, int64_t engine, int nknobs,
                                    const int32_t *types, const int64_t *values,
                                    bool det_only, int64_t range_of, int64_t range[3],
                                    cudnn_plan **out);
void fattn__cudnn_plan_free(cudnn_plan *p);

/* The serialized form of a built plan: the bytes cuDNN returns for
 * CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION (CUDNN_TYPE_CHAR; count
 * query first), as given, in a malloc'd buffer. cuDNN serializes plans of
 * runtime-compiled engines only, so a plan without that behaviour note is
 * refused here without asking (FATTN_E_UNSUPPORTED), as is one cuDNN
 * refuses (FATTN_E_UNSUPPORTED with cuDNN's reason). A plan restored from
 * the store is not serialized again (FATTN_E_INVALID_ARG). */
fattn_status fattn__cudnn_plan_serialize(const cudnn_plan *p, unsigned char **out, size_t *len);

/* Restore a plan from fattn__cudnn_plan_serialize's bytes: a new execution-plan
 * descriptor with the bytes (JSON_REPRESENTATION) and the handle
 * (EXECUTION_PLAN_HANDLE: cuDNN compiles nothing, but needs the device),
 * finalized; no operation graph and no engine config are needed. The tag,
 * the behaviour note and the workspace are read back from the restored
 * plan, so the caller can compare them with what it expects. The plan has
 * no tensor or operation-graph descriptors (op_graph NULL); it executes
 * with the variant pack of the graph it was built for. FATTN_E_CUDNN when
 * cuDNN refuses the bytes (other version, other device, damaged). */
fattn_status fattn__cudnn_plan_deserialize(const cudnn_api *api, cudnnHandle_t handle,
                                    const void *blob, size_t len, cudnn_plan **out);

/* Plans execute through plans.c (fattn__cudnn_execute_plan), which keeps each
 * plan's variant pack. */

/* An engine tag ("eng6_k14=-1_k24=26", len bytes) without its knobs whose
 * value is -1, into out (cap bytes, NUL-terminated, truncated to fit): how
 * the plan store compares the tag of a restored plan with the one recorded
 * when it was built. */
void fattn__cudnn_tag_canonical(const char *tag, size_t len, char *out, size_t cap);

#endif /* FATTN_CUDNN_INTERNAL_H */
