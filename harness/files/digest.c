/* XXH3-128 digests (libxxhash), formatted as the run-file contract says. */
#include "digest.h"

#include <string.h>
#include <xxhash.h>

static void format_hash(XXH128_hash_t h, char out[FATTN_DIGEST_LEN])
{
    static const char hex[] = "0123456789abcdef";
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    memcpy(out, FATTN_DIGEST_PREFIX, 9);
    for (size_t i = 0; i < sizeof c.digest; i++) {
        out[9 + 2 * i] = hex[c.digest[i] >> 4];
        out[9 + 2 * i + 1] = hex[c.digest[i] & 15];
    }
    out[FATTN_DIGEST_LEN - 1] = '\0';
}

void fattn_digest_bytes(const void *data, size_t n, char out[FATTN_DIGEST_LEN])
{
    static const unsigned char none = 0;
    format_hash(XXH3_128bits(n ? data : &none, n), out);
}

fattn_status fattn_digest_init(fattn_digest_state *st)
{
    XXH3_state_t *x = XXH3_createState();
    if (!x) {
        st->xxh = NULL;
        return fattn_error(FATTN_E_NOMEM, "digest: cannot allocate an XXH3 state");
    }
    if (XXH3_128bits_reset(x) != XXH_OK) {
        XXH3_freeState(x);
        st->xxh = NULL;
        return fattn_error(FATTN_E_INTERNAL, "digest: XXH3_128bits_reset failed");
    }
    st->xxh = x;
    return FATTN_OK;
}

fattn_status fattn_digest_update(fattn_digest_state *st, const void *data, size_t n)
{
    if (!st->xxh)
        return fattn_error(FATTN_E_STATE, "digest: update without init");
    if (n == 0)
        return FATTN_OK;
    if (XXH3_128bits_update(st->xxh, data, n) != XXH_OK)
        return fattn_error(FATTN_E_INTERNAL, "digest: XXH3_128bits_update failed");
    return FATTN_OK;
}

fattn_status fattn_digest_final(fattn_digest_state *st, char out[FATTN_DIGEST_LEN])
{
    if (!st->xxh)
        return fattn_error(FATTN_E_STATE, "digest: final without init");
    format_hash(XXH3_128bits_digest(st->xxh), out);
    fattn_digest_free(st);
    return FATTN_OK;
}

void fattn_digest_free(fattn_digest_state *st)
{
    if (st && st->xxh) {
        XXH3_freeState(st->xxh);
        st->xxh = NULL;
    }
}

bool fattn_digest_is_valid(const char *s)
{
    if (!s || strncmp(s, FATTN_DIGEST_PREFIX, 9) != 0 || strlen(s) != FATTN_DIGEST_LEN - 1)
        return false;
    for (const char *p = s + 9; *p; p++) {
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    }
    return true;
}
