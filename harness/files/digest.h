/* harness/files/digest.h — content digests of stored tensor bytes.
 *
 * A digest is "xxh3-128:" followed by the 32 lowercase hex digits of the
 * canonical (big-endian) form of XXH3-128 (seed 0) over the bytes, as
 * xxhsum -H2 prints it (docs/run-files.md). FH_DIGEST_LEN includes the NUL.
 */
#ifndef FH_HARNESS_DIGEST_H
#define FH_HARNESS_DIGEST_H

#include <stdbool.h>
#include <stddef.h>

#include "fattn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FH_DIGEST_PREFIX "xxh3-128:"
#define FH_DIGEST_LEN (9 + 32 + 1)

/* One-shot digest of n bytes (data may be NULL when n is 0). */
void fh_digest_bytes(const void *data, size_t n, char out[FH_DIGEST_LEN]);

/* Streaming: init, update any number of times, final. The state owns heap
 * memory (XXH3's state wants 64-byte alignment); final frees it, and
 * fh_digest_free releases an abandoned one. */
typedef struct fh_digest_state {
    void *xxh; /* XXH3_state_t * */
} fh_digest_state;

fattn_status fh_digest_init(fh_digest_state *st);
fattn_status fh_digest_update(fh_digest_state *st, const void *data, size_t n);
fattn_status fh_digest_final(fh_digest_state *st, char out[FH_DIGEST_LEN]);
void fh_digest_free(fh_digest_state *st);

/* True iff s has the digest syntax (prefix, 32 lowercase hex digits). */
bool fh_digest_is_valid(const char *s);

#ifdef __cplusplus
}
#endif
#endif /* FH_HARNESS_DIGEST_H */
