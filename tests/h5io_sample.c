/* Writes a small run-file-shaped HDF5 file with the harness writer, for
 * tests/test_h5py_read.py to read with h5py. Usage: h5io_sample OUT.h5 */
#include <stdint.h>
#include <stdio.h>

#include "h5io.h"

static int fail(void)
{
    fprintf(stderr, "h5io_sample: %s\n", fattn_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: h5io_sample OUT.h5\n");
        return 2;
    }
    /* float16 bits: 1, -2, 65504, smallest subnormal, +inf, NaN, -0, 0.5 */
    uint16_t f16[8] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x7e00, 0x8000, 0x3800};
    /* bfloat16 bits: 1, -2, 0.5, -0 */
    uint16_t bf16[4] = {0x3f80, 0xc000, 0x3f00, 0x8000};
    float f32[2][3] = {{1.0f, -2.5f, 3.25f}, {0.0f, -0.0f, 1e-3f}};
    int32_t cu[3] = {0, 5, 12};
    int64_t s8[1] = {8};
    int64_t s4[1] = {4};
    int64_t s23[2] = {2, 3};
    int64_t s3[1] = {3};
    int64_t win[2] = {-1, 0};

    fh_h5_node *root, *g;
    if (fh_h5_node_new_group("", &root) != FATTN_OK)
        return fail();
    fattn_tensor t16 = fattn_tensor_view(f16, FATTN_DTYPE_FLOAT16, 1, s8);
    fattn_tensor tbf = fattn_tensor_view(bf16, FATTN_DTYPE_BFLOAT16, 1, s4);
    fattn_tensor t32 = fattn_tensor_view(f32, FATTN_DTYPE_FLOAT32, 2, s23);
    fattn_tensor tcu = fattn_tensor_view(cu, FATTN_DTYPE_INT32, 1, s3);
    if (fh_h5_node_set_string(root, "schema", "fattn-run/1") != FATTN_OK ||
        fh_h5_node_set_string(root, "note", "h\xc3\xa9llo") != FATTN_OK ||
        fh_h5_node_group(root, "t", &g) != FATTN_OK ||
        fh_h5_node_set_int64(g, "i64", -7) != FATTN_OK ||
        fh_h5_node_set_float32(g, "f32", 0.125f) != FATTN_OK ||
        fh_h5_node_set_uint8(g, "u8", 1) != FATTN_OK ||
        fh_h5_node_set_int64_pair(g, "window_size", win) != FATTN_OK ||
        fh_h5_node_add_tensor(g, "half", &t16, NULL) != FATTN_OK ||
        fh_h5_node_add_tensor(g, "bf", &tbf, NULL) != FATTN_OK ||
        fh_h5_node_add_tensor(g, "single", &t32, NULL) != FATTN_OK ||
        fh_h5_node_add_tensor(g, "cu", &tcu, NULL) != FATTN_OK)
        return fail();
    if (fh_h5_write_file(argv[1], root, NULL, NULL) != FATTN_OK)
        return fail();
    fh_h5_node_free(root);
    return 0;
}
