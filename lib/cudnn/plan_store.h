/* The cuDNN engine's on-disk plan store (internal; docs/cudnn-engine.md,
 * "Plan store").
 *
 * Building an execution plan for a runtime-compiled cuDNN engine compiles
 * its kernels (0.5-0.9 s per plan on the H200), and every new process pays
 * that again. cuDNN can serialize such a finalized plan
 * (CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION) and restore it in another
 * process; this module keeps those bytes in files, one plan per file.
 *
 * What is here is plain C and POSIX, no cuDNN headers: the key, the file
 * format, reading and the atomic write. It is built in every configuration
 * so that the tests of suite cudnn-construct exercise it without a GPU.
 * Talking to cuDNN (serialize, deserialize) is lower.c's; deciding when to
 * use the store is engine.c's get_plan.
 *
 * Key. A plan is valid only for the graph it was built for, on the cuDNN
 * that built it, on the same kind of device. The key text is
 *
 *     fattn-cudnn-plan/<PS_FORMAT_VERSION>
 *     cudnn=<cudnnGetVersion()> lowering=<CUDNN_LOWERING_REVISION>
 *     device=<name> sm_count=<n> cc=<major>.<minor>
 *     <fattn__cg_dump(g, false)>
 *
 * The lowering revision stands for what the dump does not show: how
 * lower.c turns a dump into descriptors (alignment, flags it sets). A plan
 * stored by a build that lowered differently must not be restored.
 *
 * The file name is the 64-bit FNV-1a hash of that text in hex plus ".plan";
 * the file holds the whole text, and a file whose text differs from the
 * wanted one (a hash collision, or a hand-copied file) is refused.
 *
 * File (all integers little-endian, whatever the host):
 *
 *     0   8  magic "FATTNPLN"
 *     8   4  u32 format version (PS_FORMAT_VERSION)
 *     12  4  u32 tag length        (engine tag at store time, "eng2_k24=7")
 *     16  4  u32 key length        (the key text above)
 *     20  4  u32 reserved, 0
 *     24  8  i64 workspace bytes   (the plan's, at store time)
 *     32  8  u64 blob length       (cuDNN's serialized plan, as cuDNN gave it)
 *     40     tag, key, blob        (no terminators)
 *     end-8 8 u64 FNV-1a 64 of every byte before it
 *
 * The checksum catches truncation and accidental damage, not malice: the
 * blob holds compiled GPU code that cuDNN loads, so the store directory must
 * be writable only by people trusted to run code on the GPU.
 */
#ifndef FATTN_CUDNN_PLAN_STORE_H
#define FATTN_CUDNN_PLAN_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fattn/status.h"

/* Bump when the file layout or the key text changes: files of another
 * version are refused (and rewritten by the next build). */
#define PS_FORMAT_VERSION 1u

#define PS_MAGIC "FATTNPLN"
#define PS_HEADER_BYTES 40u
#define PS_TRAILER_BYTES 8u
/* "<16 hex digits>.plan" and its NUL. */
#define PS_NAME_LEN 22
/* Larger files are refused unread; a serialized SDPA plan is far smaller. */
#define PS_MAX_FILE_BYTES ((size_t)256 << 20)
#define PS_MAX_TAG_BYTES 95u
/* A plan's workspace above 1 TiB is refused (stored or read): no GPU has
 * that much memory (the H200 has 141 GB), so such a plan could never run,
 * and the bound keeps workspace sums far from int64 overflow. A serialized
 * SDPA plan asks for kilobytes to a few hundred megabytes. */
#define PS_MAX_WORKSPACE_BYTES ((int64_t)1 << 40)

/* Everything besides the graph that decides whether a stored plan may be
 * used: the cuDNN that built it and the kind of device it was built for. */
typedef struct ps_env {
    int64_t cudnn_version; /* cudnnGetVersion() */
    int lowering_revision; /* CUDNN_LOWERING_REVISION of the engine */
    char device_name[256];
    int sm_count;
    int cc_major, cc_minor;
} ps_env;

/* One stored plan. In a decoded record the pointers point into the file
 * image that was decoded (not NUL-terminated: use the lengths). */
typedef struct ps_record {
    const char *tag;
    size_t tag_len;
    const char *key;
    size_t key_len;
    int64_t workspace;
    const unsigned char *blob;
    size_t blob_len;
} ps_record;

/* 64-bit FNV-1a of n bytes. */
uint64_t fattn__ps_fnv1a64(const void *p, size_t n);

/* The key text for graph_key (a fattn__cg_dump without values) on env, as in the
 * header comment; control characters in the device name become '?'.
 * Returns a malloc'd string, NULL on allocation failure. */
char *fattn__ps_key_text(const ps_env *env, const char *graph_key);

/* The file name of a key text: 16 lowercase hex digits of its FNV-1a 64
 * and ".plan". */
void fattn__ps_file_name(const char *key_text, char out[PS_NAME_LEN]);

/* Which directory the store uses. opt_dir is fattn_cudnn_options.plan_dir,
 * env the value of $FATTN_CUDNN_PLAN_DIR (either may be NULL): opt_dir
 * wins when non-NULL, and "" (from either) means no store. Returns NULL
 * for no store, else one of the two pointers. */
const char *fattn__ps_resolve_dir(const char *opt_dir, const char *env);

/* Encode r into a new file image (malloc'd, *out; length *out_len).
 * FATTN_E_INVALID_ARG for a tag longer than PS_MAX_TAG_BYTES or holding a
 * control byte (below 0x20, or 0x7f: a tag is printed in provenance lines),
 * an empty key or blob, a workspace outside 0..PS_MAX_WORKSPACE_BYTES, or
 * an image over PS_MAX_FILE_BYTES; FATTN_E_NOMEM. */
fattn_status fattn__ps_encode(const ps_record *r, unsigned char **out, size_t *out_len);

/* Decode a file image: magic, format version, lengths that add up exactly,
 * checksum, a tag without control bytes, a workspace within
 * 0..PS_MAX_WORKSPACE_BYTES. On success *r points into buf.
 * FATTN_E_INVALID_FILE with the reason otherwise (buf is never read beyond
 * len). */
fattn_status fattn__ps_decode(const unsigned char *buf, size_t len, ps_record *r);

/* A file found for a key, read and checked. */
typedef struct ps_loaded {
    bool found;          /* false: no file for this key (not an error) */
    unsigned char *buf;  /* the file image, owned; free with fattn__ps_loaded_free */
    ps_record rec;       /* points into buf */
} ps_loaded;

/* Whether dir may hold plans (it holds GPU code that cuDNN loads): as ssh's
 * StrictModes and git's safe.directory do, FATTN_E_INVALID_ARG naming dir
 * and the cause when it is owned by a user other than this process' (its
 * effective uid) and root, or is writable by everyone without the sticky
 * bit (anyone could replace a plan). Group-writable is accepted: a group
 * may share a store on purpose. A missing dir is FATTN_OK (it is created
 * 0700 by the write). Only the directory itself is checked, not its
 * parents. fattn__ps_lookup and fattn__ps_write_atomic call it first. */
fattn_status fattn__ps_check_dir(const char *dir);

/* The same for a plan file found in the store (its fstat's st_uid and
 * st_mode): owned by another user than this process' and root, or writable
 * by everyone, it is refused (in a sticky directory such as /tmp another
 * user may still create a file under a plan's name first). */
fattn_status fattn__ps_check_file_owner(const char *path, unsigned uid, unsigned mode);

/* Look key_text up in dir. No file: FATTN_OK with out->found false. A file
 * that cannot be read (FATTN_E_IO), is not a valid plan file or holds
 * another key (FATTN_E_INVALID_FILE): an error with the reason, nothing
 * owned. Otherwise FATTN_OK, out->found true, the record checked against
 * key_text byte for byte. */
fattn_status fattn__ps_lookup(const char *dir, const char *key_text, ps_loaded *out);
void fattn__ps_loaded_free(ps_loaded *l);

/* Write buf as dir/name so that a reader sees either the old file or the
 * whole new one, never a part: a new temporary file in dir (O_EXCL, mode
 * 0600, a name no other process or thread uses), written, fsync'ed, renamed
 * over name, then the directory fsync'ed. Processes writing the same name
 * at once each rename a complete file; the last one stays. dir is created
 * (mode 0700, with its parents) when missing. On failure the temporary
 * file is removed and FATTN_E_IO says which step failed. */
fattn_status fattn__ps_write_atomic(const char *dir, const char *name, const void *buf, size_t len);

/* Encode r (whose key must be key_text) and write it as key_text's file in
 * dir: fattn__ps_encode + fattn__ps_file_name + fattn__ps_write_atomic. */
fattn_status fattn__ps_store(const char *dir, const ps_record *r);

#endif /* FATTN_CUDNN_PLAN_STORE_H */
