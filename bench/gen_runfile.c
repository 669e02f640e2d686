/* gen_runfile: write a minimal fattn-run/1 file holding one large float32
 * dataset, for bench_diff.sh.
 *
 * usage: gen_runfile OUT.h5 MIB [FLIP_INDEX]
 *
 * /cases/big/forward/out is float32 [MIB*262144] of pseudo-random values
 * (a fixed LCG, so two calls write the same data); FLIP_INDEX, if given,
 * has its lowest mantissa bit flipped (a 1-ulp change). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5io.h"

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: gen_runfile OUT.h5 MIB [FLIP_INDEX]\n");
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10) * (uint64_t)262144;
    if (n == 0) {
        fprintf(stderr, "gen_runfile: MIB must be positive\n");
        return 2;
    }
    float *x = malloc(n * sizeof *x);
    if (!x) {
        fprintf(stderr, "gen_runfile: out of memory\n");
        return 2;
    }
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (uint64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        x[i] = (float)((double)(s >> 40) / (double)(1u << 24) * 2.0 - 1.0);
    }
    if (argc == 4) {
        uint64_t k = strtoull(argv[3], NULL, 10);
        if (k >= n) {
            fprintf(stderr, "gen_runfile: FLIP_INDEX out of range\n");
            return 2;
        }
        uint32_t u;
        memcpy(&u, &x[k], 4);
        u ^= 1u;
        memcpy(&x[k], &u, 4);
    }
    fh_h5_node *root = NULL, *g = NULL;
    int64_t shape[1] = {(int64_t)n};
    fattn_status st = fh_h5_node_new_group("", &root);
    if (st == FATTN_OK)
        st = fh_h5_node_set_string(root, "schema", "fattn-run/1");
    if (st == FATTN_OK)
        st = fh_h5_node_set_string(root, "impl", "bench");
    if (st == FATTN_OK)
        st = fh_h5_node_group(root, "cases", &g);
    if (st == FATTN_OK)
        st = fh_h5_node_group(g, "big", &g);
    if (st == FATTN_OK)
        st = fh_h5_node_group(g, "forward", &g);
    if (st == FATTN_OK)
        st = fh_h5_node_add_bytes(g, "out", FATTN_DTYPE_FLOAT32, 1, shape, x, n * sizeof *x,
                                     NULL);
    free(x);
    if (st == FATTN_OK)
        st = fh_h5_write_file(argv[1], root, NULL, NULL);
    fh_h5_node_free(root);
    if (st != FATTN_OK) {
        fprintf(stderr, "gen_runfile: %s\n", fattn_last_error());
        return 2;
    }
    return 0;
}
