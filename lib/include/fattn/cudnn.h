/* fattn/cudnn.h — the cuDNN engine.
 *
 * fattn_engine_init_cudnn returns an engine implementing the engine API
 * (fattn/engine.h) on an NVIDIA GPU through cuDNN's backend graph API: the
 * forward builds the composite graph cudnn-frontend 1.18 builds for
 * TransformerEngine's options (or the native SDPA_FWD op where PyTorch 2.11
 * uses it), caches one execution plan per graph, and runs it. Tensors are
 * host tensors (the engine copies inputs to the device, runs, and copies
 * back only the defined regions of the outputs, engine.h) or device
 * tensors (FATTN_ENGINE_Q_DEVICE_TENSORS): the plan then runs on the
 * caller's buffers, with no copy, no device allocation on a plan-cache hit
 * and no wait: the call returns once the work is queued on the default
 * stream, so the caller synchronises (or orders its own work on that
 * stream) before reading the outputs. Device calls take no padding mask and
 * no THD layout (FATTN_E_UNSUPPORTED: the kernels may write rows past a
 * sequence's length, which the host path never copies back); dropout,
 * sink and ALiBi still upload their few host-side bytes per call. The backward
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

#include "fattn/api.h"

#include <stdbool.h>
#include <stdint.h>

#include "fattn/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the cuDNN engine picks its plans and its backward route, and where it
 * loads cuDNN from: what the FATTN_CUDNN_AUTOTUNE, _BWD, _DET, _DET_TAG,
 * _PLAN_DIR, FATTN_CUDNN_LIB and FATTN_CUDART_LIB variables of the CLI set
 * (docs/cudnn-engine.md). The library reads no environment: the CLI (and
 * bench_cudnn, the tests, the TE bridge) read the variables and hand their
 * values to fattn_cudnn_settings_parse. All zero is the default:
 * heuristics' first plan, the switch's backward route, the direct-dQ
 * deterministic graph, no plan store, the libraries' default search. */
typedef enum fattn_cudnn_autotune {
    FATTN_CUDNN_AUTOTUNE_OFF = 0,
    FATTN_CUDNN_AUTOTUNE_ON,    /* time the heuristics' candidates, keep the fastest */
    FATTN_CUDNN_AUTOTUNE_KNOBS  /* and sweep the KERNEL_CFG knob of the winner */
} fattn_cudnn_autotune;

typedef struct fattn_cudnn_settings {
    fattn_cudnn_autotune autotune;
    bool bwd_native;  /* a backward the native SDPA_BWD op takes goes there */
    bool det_ordered; /* the deterministic backward through cuDNN's ordered dQ */
    /* An engine config to pin the deterministic backward to (implies
     * det_ordered), "eng<id>_k<type>=<value>...": borrowed, checked when
     * the plan cache is made; NULL: none. */
    const char *det_tag;
    /* Directory of the on-disk plan store; NULL or "": none. Borrowed. */
    const char *plan_dir;
    /* The libcudnn and libcudart to dlopen; NULL or "": the default search
     * (the build's cudnn_dir, then the loader's path). Borrowed. They are
     * loaded once per process, on first use: fattn_cudnn_use_libraries
     * names them before that (a plan cache made with these settings calls
     * it too, for the caller that loads nothing before). */
    const char *cudnn_lib, *cudart_lib;
} fattn_cudnn_settings;

/* The settings from the variables' values (each NULL when unset; "" is
 * unset): autotune "0" | "1" | "knobs", bwd "native", det "ordered", a
 * det_tag, a plan_dir and the two libraries' paths as given (borrowed).
 * Anything else is FATTN_E_INVALID_ARG naming the variable and the values
 * it takes. */
FATTN_API fattn_status fattn_cudnn_settings_parse(const char *autotune, const char *bwd, const char *det,
                                                  const char *det_tag, const char *plan_dir,
                                                  const char *cudnn_lib, const char *cudart_lib,
                                                  fattn_cudnn_settings *out);
/* One line for provenance, "autotune=off bwd=switch det=direct plan_store=off"
 * (det=ordered, or det=tag:<tag>; no path: plan_store=on), then
 * " cudnn_lib=named" and " cudart_lib=named" for a library named (no path
 * either; the default search adds nothing), truncated to fit n (n > 0). */
FATTN_API void fattn_cudnn_settings_describe(const fattn_cudnn_settings *s, char *buf, size_t n);

/* Name the libraries the cuDNN engine loads (s's cudnn_lib and cudart_lib;
 * NULL s, or a NULL or "" path: the default search) before anything loads
 * them: fattn_cudnn_available, _library_loadable, _get_info, a plan cache
 * or an engine. They are loaded once per process; naming a library after
 * it was loaded, from another path or by the default search, is
 * FATTN_E_STATE (naming the path it was loaded from, or none, is not). The
 * paths are copied. In a build without cuDNN: FATTN_OK, nothing to load. */
FATTN_API fattn_status fattn_cudnn_use_libraries(const fattn_cudnn_settings *s);

typedef struct fattn_cudnn_options {
    int device; /* CUDA device ordinal (a given plan_cache's device instead) */
    /* Run every backward as the deterministic (direct-dQ) graph, whatever
     * fattn_bwd_params.deterministic says: what `fattn verify` and `fattn
     * golden` use on cuDNN, so that a rerun can be compared bitwise
     * (docs/determinism.md). */
    bool force_deterministic_bwd;
    /* Benchmark timing. With timing_iters > 0 every forward and backward,
     * after its own execution, executes its plan timing_iters more times on
     * the same device buffers, queued back to back with a CUDA event between
     * consecutive executions on the engine's stream (so the host's launch
     * cost overlaps the previous execution, as in a training loop); each
     * execution's time is the interval between its two events
     * (fattn_engine_last_report's timing). The outputs are those of the last
     * execution: the same bits as the first's wherever the graph is
     * deterministic (not the accumulator backward's dQ). 0: off. */
    int timing_iters;
    /* How its own plan cache picks plans (ignored with a plan_cache, which
     * has its own); all zero: the defaults. */
    fattn_cudnn_settings settings;
    /* Plans to use and add to, owned by the caller and outliving the engine,
     * shared by the engines it is given to (one at a time). NULL: the engine
     * makes its own, freed with it. */
    fattn_cudnn_plan_cache *plan_cache;
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
FATTN_API bool fattn_cudnn_available(void);

/* Whether libcudnn can be loaded (no GPU needed). */
FATTN_API bool fattn_cudnn_library_loadable(void);

FATTN_API fattn_status fattn_cudnn_get_info(int device, fattn_cudnn_info *out);

FATTN_API fattn_status fattn_engine_init_cudnn(fattn_engine **out, const fattn_cudnn_options *opt);

/* The engine's last call, the plans it holds, its platform key: the
 * engine-neutral fattn_engine_last_report (fattn/engine.h); what it answers:
 * fattn_engine_supports. The report's workspace is the device bytes the last
 * backward used besides its inputs and outputs: the plan's workspace plus
 * the caller-side Dsum (b*hq*sq*4) and, without `deterministic`, dQ_accum
 * (b*hq*sq*d*4) buffers; 0 before a backward. Its route is "composite" /
 * "native" for a forward, "bwd-dq-accum" / "bwd-direct-dq" for a backward;
 * its plan_source "memory" (the plan cache), "store" (restored from the plan
 * store) or "built". */

/* Test hook: the dropout keep-mask. With mask non-NULL, every later forward
 * with dropout runs a variant of its graph whose RNG output is a real
 * tensor instead of a virtual one, and copies it to mask: float32, C order
 * [b, hq, sq, skv] (sq, skv the max lengths), 1 where the logit is kept and
 * 0 where dropped, every element (also outside the sequences). count is the
 * capacity in floats; a forward whose mask does not fit fails with
 * FATTN_E_SHAPE. O and Stats are those of the production graph with the same
 * rng_state: only the mask's destination differs. NULL turns it off. For
 * the float64 oracle's dropout cases (tests/test_cudnn_gpu.c). */
FATTN_API fattn_status fattn_cudnn_capture_dropout_mask(fattn_engine *e, float *mask, int64_t count);

/* Test hook: what cuDNN writes into Max. With dst non-NULL, every later
 * forward with return_max_logit copies its whole device Max buffer to dst
 * after execution: float32 in the graph's layout, [b, hq, sq] C order (sq
 * the max length), or TE's ragged [t, hq] for a THD Q — every row, also
 * those past a sequence's length, which the call itself never copies back.
 * With fill non-NULL every element of that buffer is first set to the bits
 * *fill (a NaN payload or a finite sentinel); with fill NULL it keeps what
 * the engine's device arena held, so a call like the previous one shows
 * what that call left there. count is dst's capacity in floats; a forward
 * whose Max does not fit fails with FATTN_E_SHAPE. The caller's Max gets
 * the defined rows as without the hook. NULL turns it off. For
 * `test_cudnn_gpu --max-rows` (tests/cudnn_max_rows.c). */
FATTN_API fattn_status fattn_cudnn_capture_max(fattn_engine *e, float *dst, int64_t count,
                                               const uint32_t *fill);

/* Where the plans of a cache came from (docs/cudnn-engine.md, "Plan
 * store"). Counters are per plan cache, since it was made. */
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

/* ---- plan caches ------------------------------------------------------- */

/* A plan cache: the cuDNN handle, the plans by graph, the workspace and the
 * plan store, made with `settings` (NULL: the defaults). Building a plan takes up
 * to seconds, executing one milliseconds: whoever runs several engines one
 * after another (commands of one process) makes one cache and gives it to
 * each (fattn_cudnn_options.plan_cache), so later engines find the plans
 * built. Not thread-safe; free after the last engine using it. */
FATTN_API fattn_status fattn_cudnn_plan_cache_init(fattn_cudnn_plan_cache **out, int device,
                                                   const fattn_cudnn_settings *settings);
/* The settings the engine's plan cache was made with, as
 * fattn_cudnn_settings_describe writes them; "" for an engine that is not
 * cuDNN's. For provenance. */
FATTN_API const char *fattn_cudnn_engine_settings(const fattn_engine *e);
FATTN_API void fattn_cudnn_plan_cache_free(fattn_cudnn_plan_cache *c);
/* Plans held (0 for NULL). */
FATTN_API int fattn_cudnn_plan_cache_count(const fattn_cudnn_plan_cache *c);
/* Its plan-store counters; FATTN_E_INVALID_ARG for NULL arguments. */
FATTN_API fattn_status fattn_cudnn_plan_cache_stats(const fattn_cudnn_plan_cache *c,
                                                    fattn_cudnn_plan_store_stats *out);
/* Its plan store directory, "" when it has none. */
FATTN_API const char *fattn_cudnn_plan_cache_store_dir(const fattn_cudnn_plan_cache *c);
/* The cache a cuDNN engine uses (its own or the one it was given); NULL if
 * e is not a cuDNN engine. */
FATTN_API fattn_cudnn_plan_cache *fattn_cudnn_engine_plan_cache(const fattn_engine *e);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_CUDNN_H */
