/* harness/files/digest.h — content digests of stored tensor bytes.
 *
 * A digest is "xxh3-128:" followed by the 32 lowercase hex digits of the
 * canonical (big-endian) form of XXH3-128 (seed 0) over the bytes, as
 * xxhsum -H2 prints it (docs/run-files.md). FATTN_DIGEST_LEN includes the NUL.
 */
#ifndef FATTN_HARNESS_DIGEST_H
#define FATTN_HARNESS_DIGEST_H

#include <stdbool.h>
#include <stddef.h>

#include "fattn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FATTN_DIGEST_PREFIX "xxh3-128:"
#define FATTN_DIGEST_LEN (9 + 32 + 1)

/* One-shot digest of n bytes (data may be NULL when n is 0). */
void fattn_digest_bytes(const void *data, size_t n, char out[FATTN_DIGEST_LEN]);

/* Streaming: init, update any number of times, final. The state owns heap
 * memory (XXH3's state wants 64-byte alignment); final frees it, and
 * fattn_digest_free releases an abandoned one. */
typedef struct fattn_digest_state {
    void *xxh; /* XXH3_state_t * */
} fattn_digest_state;

fattn_status fattn_digest_init(fattn_digest_state *st);
fattn_status fattn_digest_update(fattn_digest_state *st, const void *data, size_t n);
fattn_status fattn_digest_final(fattn_digest_state *st, char out[FATTN_DIGEST_LEN]);
void fattn_digest_free(fattn_digest_state *st);

/* True iff s has the digest syntax (prefix, 32 lowercase hex digits). */
bool fattn_digest_is_valid(const char *s);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_HARNESS_DIGEST_H */
