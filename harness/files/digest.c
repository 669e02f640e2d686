/* XXH3-128 digests (libxxhash), formatted as the run-file contract says. */
#include "digest.h"

#include <string.h>
#include <xxhash.h>

static void format_hash(XXH128_hash_t h, char out[FH_DIGEST_LEN])
{
    static const char hex[] = "0123456789abcdef";
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    memcpy(out, FH_DIGEST_PREFIX, 9);
    for (size_t i = 0; i < sizeof c.digest; i++) {
        out[9 + 2 * i] = hex[c.digest[i] >> 4];
        out[9 + 2 * i + 1] = hex[c.digest[i] & 15];
    }
    out[FH_DIGEST_LEN - 1] = '\0';
}

void fh_digest_bytes(const void *data, size_t n, char out[FH_DIGEST_LEN])
{
    static const unsigned char none = 0;
    format_hash(XXH3_128bits(n ? data : &none, n), out);
}

fattn_status fh_digest_init(fh_digest_state *st)
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

fattn_status fh_digest_update(fh_digest_state *st, const void *data, size_t n)
{
    if (!st->xxh)
        return fattn_error(FATTN_E_STATE, "digest: update without init");
    if (n == 0)
        return FATTN_OK;
    if (XXH3_128bits_update(st->xxh, data, n) != XXH_OK)
        return fattn_error(FATTN_E_INTERNAL, "digest: XXH3_128bits_update failed");
    return FATTN_OK;
}

fattn_status fh_digest_final(fh_digest_state *st, char out[FH_DIGEST_LEN])
{
    if (!st->xxh)
        return fattn_error(FATTN_E_STATE, "digest: final without init");
    format_hash(XXH3_128bits_digest(st->xxh), out);
    fh_digest_free(st);
    return FATTN_OK;
}

void fh_digest_free(fh_digest_state *st)
{
    if (st && st->xxh) {
        XXH3_freeState(st->xxh);
        st->xxh = NULL;
    }
}

bool fh_digest_is_valid(const char *s)
{
    if (!s || strncmp(s, FH_DIGEST_PREFIX, 9) != 0 || strlen(s) != FH_DIGEST_LEN - 1)
        return false;
    for (const char *p = s + 9; *p; p++) {
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    }
    return true;
}
