/* xxh128: print the fattn digest (xxh3-128:<32 hex>) of stdin's bytes.
 * test_diff.py uses it to give an edited dataset a matching digest. */
#include <stdio.h>

#include "digest.h"

int main(void)
{
    fh_digest_state st;
    if (fh_digest_init(&st) != FATTN_OK)
        return 2;
    static unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0)
        fh_digest_update(&st, buf, n);
    char out[FH_DIGEST_LEN];
    if (ferror(stdin) || fh_digest_final(&st, out) != FATTN_OK)
        return 2;
    printf("%s\n", out);
    return 0;
}
