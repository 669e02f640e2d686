/* fattn/cudnn.h — the cuDNN engine.
 *
 * fattn_engine_init_cudnn returns an engine implementing the engine API
 * (fattn/engine.h) on an NVIDIA GPU through cuDNN's backend graph API: the
 * forward builds the composite graph cudnn-frontend 1.18 builds for
 * TransformerEngine's options (or the native SDPA_FWD op where PyTorch 2.11
 * uses it), caches one execution plan per graph, and runs it. Tensors are
 * host tensors: the engine copies inputs to the device, runs, and copies
 * back only the defined regions of the outputs (engine.h). The backward
 * builds the composite backward graph (frontend 1.18
 * CompositeSDPABackwardNode): by default PyTorch's graph with the FLOAT dQ
 * accumulator (fast; dQ is not bitwise repeatable at large sizes), with
 * fattn_bwd_params.deterministic the direct-dQ graph
 * (set_deterministic_algorithm). docs/determinism.md has the measurements.
 *
 * libcudnn.so.9 and libcudart are loaded lazily (dlopen) on first use: a
 * build with the engine runs the CPU engine on machines without them. In a
 * build without cuDNN headers (FATTN_HAVE_CUDNN 0) every function here
 * exists and reports FATTN_E_UNSUPPORTED. An engine is not thread-safe:
 * use one per thread. See docs/cudnn-engine.md.
 */
#ifndef FATTN_CUDNN_H
#define FATTN_CUDNN_H

#include <stdbool.h>
#include <stdint.h>

#include "fattn/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fattn_cudnn_options {
    int device; /* CUDA device ordinal */
    /* Run every backward as the deterministic (direct-dQ) graph, whatever
     * fattn_bwd_params.deterministic says: what `fattn verify` and `fattn
     * golden` use on cuDNN, so that a rerun can be compared bitwise
     * (docs/determinism.md). */
    bool force_deterministic_bwd;
    /* Directory of the on-disk plan store (docs/cudnn-engine.md, "Plan
     * store"): compiled plans of runtime-compiled cuDNN engines are written
     * there and restored by later engines and processes instead of being
     * compiled again. NULL: $FATTN_CUDNN_PLAN_DIR decides (unset or empty:
     * no store); "": no store, whatever the environment says. Created (mode
     * 0700) when missing. The engine keeps its own copy of the string. */
    const char *plan_dir;
} fattn_cudnn_options;

/* Provenance of the device and libraries. */
typedef struct fattn_cudnn_info {
    char device_name[256];
    int sm_count;
    int cc_major, cc_minor;
    int64_t cudnn_version;        /* cudnnGetVersion(), e.g. 91900 */
    int64_t cudnn_header_version; /* CUDNN_VERSION the engine was built with */
    int cuda_runtime_version;     /* cudaRuntimeGetVersion */
    int cuda_driver_version;      /* cudaDriverGetVersion */
    char cudnn_library[512];      /* what dlopen loaded */
} fattn_cudnn_info;

/* True when cuDNN and the CUDA runtime load and a CUDA device is present;
 * otherwise false with fattn_last_error() saying why. */
bool fattn_cudnn_available(void);

/* Whether libcudnn can be loaded (no GPU needed). */
bool fattn_cudnn_library_loadable(void);

fattn_status fattn_cudnn_get_info(int device, fattn_cudnn_info *out);

fattn_status fattn_engine_init_cudnn(fattn_engine **out, const fattn_cudnn_options *opt);

/* The engine tag ("eng2_k24=7") of the plan the last forward or backward
 * ran, "" if none; plans cached and the route of the last call ("composite" /
 * "native" forward, "bwd-dq-accum" / "bwd-direct-dq" backward).
 * For provenance; e must be a cuDNN engine. */
const char *fattn_cudnn_last_tag(const fattn_engine *e);
const char *fattn_cudnn_last_route(const fattn_engine *e);
int fattn_cudnn_plan_count(const fattn_engine *e);

/* Device bytes the last backward used besides its inputs and outputs: the
 * plan's workspace plus the caller-side Dsum (b*hq*sq*4) and, without
 * `deterministic`, dQ_accum (b*hq*sq*d*4) buffers. 0 before a backward. */
int64_t fattn_cudnn_last_workspace(const fattn_engine *e);

/* Whether e forces the deterministic backward (fattn_cudnn_options), and
 * changing it on an open engine (its plan cache is kept). */
bool fattn_cudnn_forces_deterministic(const fattn_engine *e);
fattn_status fattn_cudnn_set_force_deterministic(fattn_engine *e, bool on);

/* Test hook: the dropout keep-mask. With mask non-NULL, every later forward
 * with dropout runs a variant of its graph whose RNG output is a real
 * tensor instead of a virtual one, and copies it to mask: float32, C order
 * [b, hq, sq, skv] (sq, skv the max lengths), 1 where the logit is kept and
 * 0 where dropped, every element (also outside the sequences). count is the
 * capacity in floats; a forward whose mask does not fit fails with
 * FATTN_E_SHAPE. O and Stats are those of the production graph with the same
 * rng_state: only the mask's destination differs. NULL turns it off. For
 * the float64 oracle's dropout cases (tests/test_cudnn_gpu.c). */
fattn_status fattn_cudnn_capture_dropout_mask(fattn_engine *e, float *mask, int64_t count);

/* Benchmark timing. With iters > 0 every later forward and backward, after
 * its own execution, executes its plan iters more times on the same device
 * buffers, queued back to back with a CUDA event between consecutive
 * executions on the engine's stream (so the host's launch cost overlaps the
 * previous execution, as in a training loop); each execution's time is the
 * interval between its two events. The outputs are those of the last
 * execution: the same bits as the first's wherever the graph is
 * deterministic (not the accumulator backward's dQ). 0 turns it off. */
fattn_status fattn_cudnn_set_timing(fattn_engine *e, int iters);

typedef struct fattn_cudnn_timing {
    int iters;              /* timed executions (0: timing was off) */
    double gpu_ms_median;   /* plan execution, CUDA events */
    double gpu_ms_min;
    /* Host time of the call outside the copies and the GPU work: graph
     * description, plan-cache lookup (or build), variant pack, launch.
     * With a plan-cache hit this is the per-call host overhead. */
    double host_us;
    /* Its two parts: fattn's (validation, graph description, cache key and
     * lookup) and the execution call (variant pack and
     * cudnnBackendExecute, which launches the kernels). */
    double host_fattn_us;
    double host_execute_us;
    double plan_build_s;    /* 0 when the plan came from the cache; the
                               restore time when it came from the store */
    bool plan_cache_hit;
    bool plan_from_store;   /* restored from the plan store (not built) */
} fattn_cudnn_timing;

/* Timing of the last forward or backward. */
void fattn_cudnn_last_timing(const fattn_engine *e, fattn_cudnn_timing *out);

/* Where the plans of e came from (docs/cudnn-engine.md, "Plan store").
 * Counters are per engine, since fattn_engine_init_cudnn. */
typedef struct fattn_cudnn_plan_store_stats {
    bool store_enabled;     /* a plan store directory is in use */
    int64_t built;          /* plans built: heuristics + finalize (compiles) */
    int64_t loaded;         /* plans restored from the store instead */
    int64_t stored;         /* built plans written to the store */
    int64_t unserializable; /* built plans cuDNN cannot serialize (not written:
                               not runtime compiled, or cuDNN refused) */
    int64_t missing;        /* store lookups that found no file */
    int64_t rejected;       /* store files not used: unreadable, damaged, another
                               format, key or platform, or refused by cuDNN; the
                               plan was built instead and the file rewritten */
    int64_t write_failed;   /* plans that could not be written to the store */
    char last_note[512];    /* reason of the last rejection, unserializable
                               plan or failed write; "" if none */
} fattn_cudnn_plan_store_stats;

/* The plan-store counters of e. FATTN_E_INVALID_ARG if e is not a cuDNN
 * engine or out is NULL. */
fattn_status fattn_cudnn_plan_stats(const fattn_engine *e, fattn_cudnn_plan_store_stats *out);

/* The plan store directory e uses, "" when it has none. */
const char *fattn_cudnn_plan_store_dir(const fattn_engine *e);

/* Where the plan of the last forward or backward came from: "memory" (this
 * engine's cache), "store" (restored from the plan store), "built"; "" before
 * the first call. For provenance. */
const char *fattn_cudnn_last_plan_source(const fattn_engine *e);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_CUDNN_H */
