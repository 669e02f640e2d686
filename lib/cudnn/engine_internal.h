/* Internals shared by the cuDNN engine's files (not installed).
 *
 * engine.c    the operation table, init/free, report, public getters
 * plans.c     the plan cache (fattn_cudnn_plan_cache) and plan store glue,
 *             executing a plan (workspace, benchmark repeats)
 * transfer.c  the device arena, uploads and the copies back
 * forward.c   one forward call; backward.c one backward call
 */
#ifndef FATTN_CUDNN_ENGINE_INTERNAL_H
#define FATTN_CUDNN_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/geom.h"
#include "cudnn/cudnn_internal.h"
#include "cudnn/plan_store.h"
#include "fattn/cudnn.h"

/* Device buffers of calls, kept between them: slot i holds the i-th buffer
 * a call asks for and is reused while it is large enough, so a cache hit
 * allocates and frees nothing (cudaFree also synchronises the device). One
 * arena for forwards, one for backwards; freed with the plan cache. */
#define MAX_ALLOCS 40
typedef struct dev_arena {
    const cudnn_api *api;
    void *p[MAX_ALLOCS];
    size_t cap[MAX_ALLOCS];
    int held; /* slots allocated */
    int n;    /* slots given to the current call */
} dev_arena;

/* A cached plan: the binary key of its graph (fattn__cg_key), the resolved
 * description that last produced that graph with the graph itself (a call
 * whose description matches byte for byte uses this graph and builds
 * none), and the variant pack of its last execution (reused while the
 * pointers are the same: cuDNN reads them at each execute). */
#define CUDNN_AUTOTUNE_MAX 24
typedef struct plan_entry {
    unsigned char *key;
    size_t key_len;
    uint64_t key_hash;
    unsigned char *desc;
    size_t desc_len;
    uint64_t desc_hash;
    cg_graph *g;
    cudnn_plan *plan;
    /* Autotune (FATTN_CUDNN_AUTOTUNE=1): the candidate plans not yet timed
     * (cand[0] is plan; ncand 0 or 1 once chosen) and the plan store key
     * the winner is written under once chosen (NULL: none). */
    cudnn_plan *cand[CUDNN_AUTOTUNE_MAX];
    int ncand;
    char *tune_key_text;
    cudnnBackendDescriptor_t vp; /* NULL: none yet */
    int vp_n;
    void *vp_ws;
    void *vp_data[CG_MAX_TENSORS];
    struct plan_entry *next;
} plan_entry;

/* What outlives an engine when its owner shares it: the handle plans were
 * built with, the plans by graph key, the workspace, the plan store. One
 * engine at a time uses it (an engine is not thread-safe, nor is this). */
struct fattn_cudnn_plan_cache {
    const cudnn_api *api;
    cudnnHandle_t handle;
    int device;
    plan_entry *plans;
    int nplans;
    void *ws;
    size_t ws_size;
    dev_arena arena[2]; /* forward, backward */
    /* FATTN_CUDNN_AUTOTUNE=1 when the cache was made: a missed graph gets
     * candidate plans from heuristics modes A, B and fallback, timed on its
     * first execution, the fastest kept (docs/cudnn-engine.md). */
    bool autotune;
    /* FATTN_CUDNN_AUTOTUNE=knobs: autotune, and besides the heuristics'
     * configs the first one's engine with every other KERNEL_CFG value
     * cuDNN declares for it (plans.c sweep_knobs). */
    bool autotune_knobs;
    /* FATTN_CUDNN_BWD=native: a backward the native SDPA_BWD op takes
     * (fattn__cg_bwd_is_native) is built as that op instead of the composite graph. */
    bool bwd_native;
    /* FATTN_CUDNN_DET=ordered: the deterministic backward through cuDNN's
     * ordered dQ accumulation where cuDNN has it (fattn__cg_bwd_ordered_pin), else
     * the direct-dQ graph; FATTN_CUDNN_DET_TAG=<engine tag> pins that config
     * instead (any cuDNN version: for probing). */
    bool det_ordered;
    cg_pin det_tag;
    /* cudnnGetVersion() and the device's compute capability, read once */
    int64_t cudnn_version;
    int cc_major, cc_minor;
    /* Plan store (plan_store.h): directory (NULL: none), what keys its files
     * besides the graph, counters since the cache was made. */
    char *store_dir;
    ps_env store_env;
    /* the settings it was made with, described (provenance) */
    char settings_text[224];
    fattn_cudnn_plan_store_stats pstats;
};

typedef struct cudnn_engine {
    fattn_engine base;
    const cudnn_api *api;
    fattn_cudnn_plan_cache *pc;
    bool own_pc;            /* pc was made for this engine: freed with it */
    char last_tag[96];
    char last_route[16];
    int64_t last_workspace; /* bytes of the last backward: engine + Dsum + dQ_accum */
    bool force_det;         /* every backward deterministic (fattn_cudnn_options) */
    float *mask_dst;        /* capture_dropout_mask: host destination, or NULL */
    int64_t mask_cap;       /* its capacity in floats */
    /* capture_max: the whole device Max buffer of each return_max_logit
     * forward, copied to max_dst (max_cap floats) after execution; before
     * it, with max_fill_on, every element set to the bits max_fill. */
    float *max_dst;
    int64_t max_cap;
    bool max_fill_on;
    uint32_t max_fill;
    int time_iters;         /* fattn_cudnn_options.timing_iters */
    double call_t0;         /* when the current forward/backward call began */
    cg_graph *scratch;      /* where a call that misses the description memo
                               builds its graph */
    cg_key_buf *kb;         /* and keys it */
    /* The last autotune choice this engine made (the call that timed the
     * candidates; tuned false on other calls): for benchmarks. */
    struct {
        bool tuned;
        int candidates;
        char first[96], winner[96]; /* mode A's first config, the fastest */
        double first_ms, winner_ms; /* their median execution times */
        char tag[CUDNN_AUTOTUNE_MAX][96]; /* every candidate, in timing order */
        double ms[CUDNN_AUTOTUNE_MAX];
        /* FATTN_CUDNN_AUTOTUNE=knobs: what the sweep of the KERNEL_CFG knob
         * found for the last plan autotune built ("" when none ran; kept
         * across cache hits) */
        char sweep[320];
    } tune;
    fattn_engine_timing timing;
    const char *last_plan_source; /* where the last plan came from */
    char platform[160];     /* the golden platform key (report) */
} cudnn_engine;

double fattn__cudnn_now_s(void);

/* ---- transfer.c ---------------------------------------------------------- */


/* Device pointer of every role a graph can bind (cg_role): one table for the
 * forward and the backward. */
typedef struct dev_bindings {
    void *p[CG_ROLE_COUNT];
} dev_bindings;

/* One ragged-offset array: role, whether the graph has it, the cu_seqlens
 * (and padded) tensors it comes from, and the element stride of a token. */
typedef struct ragged_src {
    cg_role role;
    bool on;
    const fattn_tensor *cu, *pad;
    int64_t mult;
} ragged_src;

fattn_status fattn__cudnn_cuda_fail(const cudnn_api *api, cudaError_t e, const char *what);
fattn_status fattn__cudnn_dev_alloc(dev_arena *a, size_t bytes, void **out);
fattn_status fattn__cudnn_dev_upload(dev_arena *a, const void *host, size_t bytes, void **out);
/* A call's start: every slot free for it again (nothing is freed). */
void fattn__cudnn_dev_reset(dev_arena *a);
void fattn__cudnn_dev_free_all(dev_arena *a);
/* Stats' element count in the graph's layout ([b,h,sq] or ragged [t_q,h])
 * and its float32 bytes, checked: the geometry bounds b*h*sq, not the bytes. */
fattn_status fattn__cudnn_stats_count(const fattn_geom *g, int64_t *n, size_t *bytes);
/* Bytes spanned by a view (its last element's offset + 1, times the size). */
size_t fattn__cudnn_view_bytes(const fattn_tensor *t);
int64_t fattn__cudnn_cu_at(const fattn_tensor *t, int64_t i);
void fattn__cudnn_bind_tensors(const cg_graph *g, const dev_bindings *d, void **ptrs);
fattn_status fattn__cudnn_upload_ragged(dev_arena *a, const ragged_src *rs, int n, int64_t b,
                                 cg_dtype dt, dev_bindings *d);
fattn_status fattn__cudnn_upload_common(dev_arena *a, const cg_fwd_desc *fd, const fattn_geom *geom,
                                 const int64_t rng[2], dev_bindings *d);
fattn_status fattn__cudnn_upload_view(dev_arena *a, const fattn_tensor *t, void **out);
void fattn__cudnn_copy_rows(fattn_tensor *dst, const char *dev_copy, fattn_qkv_format fmt,
                     const int32_t *off, const int32_t *len, int64_t b, int64_t heads,
                     int64_t width);
fattn_status fattn__cudnn_download(const cudnn_api *api, void *host, const void *dev, size_t bytes);

/* One tensor of a call, for fattn__cudnn_call_location: its name in messages and
 * whether the graph needs it contiguous when it is bound as it is. */
typedef struct cudnn_tensor_use {
    const fattn_tensor *t;
    const char *name;
    bool contiguous;
} cudnn_tensor_use;
/* Whether the call's tensors are device tensors (*device; use[0], Q, decides):
 * every non-empty one on the same side (FATTN_E_INVALID_ARG otherwise), and
 * device ones 16-byte aligned and, where asked, contiguous (FATTN_E_LAYOUT). */
fattn_status fattn__cudnn_call_location(const cudnn_tensor_use *use, int n, const char *who,
                                 bool *device);
/* FATTN_E_UNSUPPORTED for a device call whose outputs have undefined rows
 * (padding mask, THD). */
fattn_status fattn__cudnn_device_call_supported(const cg_fwd_desc *fd, const char *who);
/* A device call binds the caller's pointer; a host call uploads the view
 * (input) or takes an arena buffer of `bytes` (output). */
fattn_status fattn__cudnn_bind_input(dev_arena *a, const fattn_tensor *t, bool device, void **out);
fattn_status fattn__cudnn_bind_output(dev_arena *a, const fattn_tensor *t, bool device, size_t bytes,
                               void **out);

/* ---- plans.c ------------------------------------------------------------- */

/* The plan of the graph that desc (desc_len bytes, zero padding: the
 * cg_*_desc_from_geom output) describes, with that graph: the entry whose
 * description is desc (no graph built), else build(scratch, desc) and the
 * entry whose graph key it has (the entry then remembers desc and this
 * graph), else the plan store or a build into a new entry. Notes where the
 * plan came from in e's timing and last_plan_source. */
typedef fattn_status (*cudnn_graph_builder)(cg_graph *g, const void *desc);
fattn_status fattn__cudnn_get_plan(cudnn_engine *e, const void *desc, size_t desc_len,
                            cudnn_graph_builder build, plan_entry **out);
/* Grow the cache's workspace, execute pe's plan (its variant pack reused
 * when ptrs are those of the last execution); then e's timed repeats.
 * host_pre is the host time the call spent before its first copy. */
fattn_status fattn__cudnn_execute_plan(cudnn_engine *e, plan_entry *pe, void *const *ptrs,
                                double host_pre);

/* ---- forward.c, backward.c ----------------------------------------------- */

fattn_status fattn__cudnn_engine_fwd(fattn_engine *base, const fattn_fwd_params *p,
                              const fattn_fwd_call *c);
fattn_status fattn__cudnn_engine_bwd(fattn_engine *base, const fattn_bwd_params *p,
                              const fattn_bwd_call *c);

/* ---- fp8_run.c: FP8 calls (the dispatch's FP8 branch) --------------------- */

fattn_status fattn__cudnn_fp8_fwd(cudnn_engine *e, const fattn_fwd_params *p, const fattn_fwd_call *c);
fattn_status fattn__cudnn_fp8_bwd(cudnn_engine *e, const fattn_bwd_params *p, const fattn_bwd_call *c);

#endif /* FATTN_CUDNN_ENGINE_INTERNAL_H */
