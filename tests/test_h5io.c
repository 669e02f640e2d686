/* Suite "h5io": digests, and the run-file layer over HDF5 1.10.8 — bit-exact
 * round trips of every dtype, attributes, sorted writing, atomic replace,
 * byte-reproducible files, validation of hostile files, error messages, and
 * trees from JSON manifests (fattn write-tree). */
#include <dirent.h>
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "digest.h"
#include "fattn_test.h"
#include "h5io.h"

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fattn-h5io-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    if (!d)
        return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
            unlink(p);
        }
    }
    closedir(d);
    rmdir(tmpdir);
}

static char *tpath(const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static int count_dir_entries(void)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    b[len] = '\0';
    fclose(f);
    *n = (size_t)len;
    return b;
}

#define OK(expr)                                                               \
    do {                                                                       \
        fattn_status ok_st_ = (expr);                                          \
        ck_assert_msg(ok_st_ == FATTN_OK, "%s: %s", #expr, fattn_last_error()); \
    } while (0)

/* ---- digests ---------------------------------------------------------- */

/* Published XXH3-128 (seed 0) vectors, canonical big-endian hex: xxHash's
 * own sanity table (empty input) and PHP's hash('xxh128') tests ("a",
 * "abc"). No xxhash CLI or Python module is installed here, so they are
 * hard-coded. */
START_TEST(test_digest_known)
{
    char d[FH_DIGEST_LEN];
    fh_digest_bytes(NULL, 0, d);
    ck_assert_str_eq(d, "xxh3-128:99aa06d3014798d86001c324468d497f");
    fh_digest_bytes("a", 1, d);
    ck_assert_str_eq(d, "xxh3-128:a96faf705af16834e6c632b61e964e1f");
    fh_digest_bytes("abc", 3, d);
    ck_assert_str_eq(d, "xxh3-128:06b05ab6733a618578af5f94892f3950");
    ck_assert(fh_digest_is_valid(d));
    ck_assert(!fh_digest_is_valid("xxh3-128:06B05AB6733A618578AF5F94892F3950"));
    ck_assert(!fh_digest_is_valid("xxh3-128:06b05ab6733a618578af5f94892f395"));
    ck_assert(!fh_digest_is_valid("xxh3-64:06b05ab6733a618578af5f94892f3950"));
    ck_assert(!fh_digest_is_valid(NULL));
}
END_TEST

START_TEST(test_digest_streaming)
{
    enum { N = 10000 };
    unsigned char *buf = malloc(N);
    for (int i = 0; i < N; i++)
        buf[i] = (unsigned char)(i * 131 + 7);
    char one[FH_DIGEST_LEN], chunked[FH_DIGEST_LEN];
    fh_digest_bytes(buf, N, one);
    static const size_t chunks[] = {1, 7, 64, 255, 1000, N};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        fh_digest_state st;
        OK(fh_digest_init(&st));
        for (size_t off = 0; off < N; off += chunks[c]) {
            size_t n = N - off < chunks[c] ? N - off : chunks[c];
            OK(fh_digest_update(&st, buf + off, n));
        }
        OK(fh_digest_final(&st, chunked));
        ck_assert_str_eq(chunked, one);
        ck_assert_ptr_null(st.xxh);
    }
    fh_digest_state st = {NULL};
    ck_assert_int_eq(fh_digest_update(&st, buf, 1), FATTN_E_STATE);
    fh_digest_free(&st);
    free(buf);
}
END_TEST

/* ---- round trips ------------------------------------------------------- */

typedef struct dtype_row {
    fattn_dtype dtype;
    const char *name;
} dtype_row;

static const dtype_row dtype_rows[] = {
    {FATTN_DTYPE_FLOAT32, "float32"},
    {FATTN_DTYPE_FLOAT16, "float16"},
    {FATTN_DTYPE_BFLOAT16, "bfloat16"},
    {FATTN_DTYPE_FLOAT8_E4M3FN, "float8_e4m3fn"},
    {FATTN_DTYPE_FLOAT8_E5M2, "float8_e5m2"},
    {FATTN_DTYPE_INT32, "int32"},
    {FATTN_DTYPE_INT64, "int64"},
    {FATTN_DTYPE_UINT8, "uint8"},
};
#define N_DTYPES ((int)(sizeof dtype_rows / sizeof dtype_rows[0]))

/* Fill n elements of `esize` bytes with special patterns first (NaN
 * payloads of both signs, signalling NaNs, -0, infinities, subnormals),
 * then a deterministic mix. */
static void fill_patterns(unsigned char *p, size_t n, size_t esize)
{
    static const uint32_t s32[] = {0x7fc00001u, 0xffa00000u, 0x7f800001u, 0x80000000u,
                                   0x7f800000u, 0xff800000u, 0x00000001u, 0x807fffffu};
    static const uint16_t s16[] = {0x7e01, 0xfc01, 0x7c01, 0x8000, 0x7c00, 0xfc00, 0x0001,
                                   0x83ff, 0x7f81, 0xff80};
    static const uint8_t s8[] = {0x7f, 0xff, 0x80, 0x7e, 0x01, 0x7c, 0xfd};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        unsigned char *e = p + i * esize;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(e, &x, esize);
        if (esize == 4 && i < sizeof s32 / sizeof s32[0])
            memcpy(e, &s32[i], 4);
        if (esize == 2 && i < sizeof s16 / sizeof s16[0])
            memcpy(e, &s16[i], 2);
        if (esize == 1 && i < sizeof s8 / sizeof s8[0])
            memcpy(e, &s8[i], 1);
    }
}

START_TEST(test_roundtrip_dtype)
{
    const dtype_row *r = &dtype_rows[_i];
    make_tmpdir();
    size_t es = fattn_dtype_size(r->dtype);
    /* A [4,3,5] storage viewed transposed as [5,3,4] (strided): the file
     * must hold the logical tensor in C order of its shape. */
    int64_t sshape[3] = {4, 3, 5};
    fattn_tensor storage;
    OK(fattn_tensor_alloc(&storage, r->dtype, 3, sshape));
    fill_patterns(storage.data, 60, es);
    fattn_tensor view = storage;
    view.shape[0] = 5;
    view.shape[1] = 3;
    view.shape[2] = 4;
    view.strides[0] = 1;
    view.strides[1] = 5;
    view.strides[2] = 15;
    unsigned char *want = malloc(60 * es);
    fattn_tensor_gather(&view, want);
    /* Plus every byte value for the 1-byte types, a scalar and an empty one. */
    unsigned char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    int64_t s256[1] = {256}, s0[2] = {3, 0};

    fh_h5_node *root, *g, *ds;
    OK(fh_h5_node_new_group("", &root));
    OK(fh_h5_node_group(root, "cases", &g));
    OK(fh_h5_node_add_tensor(g, "t", &view, &ds));
    ck_assert_int_eq(ds->ndim, 3);
    ck_assert_mem_eq(ds->data, want, 60 * es);
    if (es == 1)
        OK(fh_h5_node_add_bytes(g, "all", r->dtype, 1, s256, all, 256, NULL));
    OK(fh_h5_node_add_bytes(g, "empty", r->dtype, 2, s0, NULL, 0, NULL));
    OK(fh_h5_node_add_bytes(g, "scalar", r->dtype, 0, NULL, want, es, NULL));
    OK(fh_h5_write_file(tpath("rt.h5"), root, NULL, NULL));

    fh_h5_node *back;
    OK(fh_h5_read_file(tpath("rt.h5"), NULL, &back));
    const fh_h5_node *t = fh_h5_node_find(back, "cases/t");
    ck_assert_ptr_nonnull(t);
    ck_assert(t->is_dataset);
    ck_assert_int_eq(t->dtype, r->dtype);
    ck_assert_int_eq(t->ndim, 3);
    ck_assert(t->shape[0] == 5 && t->shape[1] == 3 && t->shape[2] == 4);
    ck_assert_uint_eq(t->nbytes, 60 * es);
    ck_assert_mem_eq(t->data, want, 60 * es);
    ck_assert_str_eq(t->digest, ds->digest);
    ck_assert_str_eq(t->stored_digest, ds->digest);
    ck_assert(!t->corrupt);
    ck_assert_uint_eq(t->n_attrs, 0); /* dtype and digest are not user attrs */
    if (es == 1) {
        const fh_h5_node *a = fh_h5_node_find(back, "cases/all");
        ck_assert_mem_eq(a->data, all, 256);
    }
    const fh_h5_node *e = fh_h5_node_find(back, "cases/empty");
    ck_assert(e && e->ndim == 2 && e->shape[1] == 0 && e->nbytes == 0);
    const fh_h5_node *sc = fh_h5_node_find(back, "cases/scalar");
    ck_assert(sc && sc->ndim == 0 && sc->nbytes == es);
    ck_assert_mem_eq(sc->data, want, es);
    fattn_tensor tv = fh_h5_node_tensor(t);
    ck_assert_int_eq(fattn_tensor_numel(&tv), 60);

    /* The dtype attribute names the dtype, read with plain HDF5. */
    hid_t f = H5Fopen(tpath("rt.h5"), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/cases/t", H5P_DEFAULT);
    hid_t a = H5Aopen(d, "dtype", H5P_DEFAULT);
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5T_CSET_UTF8);
    char *sval = NULL;
    ck_assert_int_ge(H5Aread(a, mt, &sval), 0);
    ck_assert_str_eq(sval, r->name);
    H5free_memory(sval);
    H5Tclose(mt);
    H5Aclose(a);
    H5Dclose(d);
    H5Fclose(f);

    fh_h5_node_free(back);
    fh_h5_node_free(root);
    fattn_tensor_free(&storage);
    free(want);
    remove_tmpdir();
}
END_TEST

START_TEST(test_file_types)
{
    hid_t t = (hid_t)fh_h5_file_type(FATTN_DTYPE_FLOAT16);
    ck_assert_int_ge(t, 0);
    size_t spos, epos, esize, mpos, msize;
    ck_assert_int_ge(H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize), 0);
    ck_assert(spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10);
    ck_assert_uint_eq(H5Tget_size(t), 2);
    ck_assert_uint_eq(H5Tget_precision(t), 16);
    ck_assert_uint_eq(H5Tget_ebias(t), 15);
    ck_assert_int_eq(H5Tget_order(t), H5T_ORDER_LE);
    H5Tclose(t);
    t = (hid_t)fh_h5_file_type(FATTN_DTYPE_BFLOAT16);
    ck_assert(H5Tequal(t, H5T_STD_U16LE) > 0);
    H5Tclose(t);
    t = (hid_t)fh_h5_file_type(FATTN_DTYPE_FLOAT8_E4M3FN);
    ck_assert(H5Tequal(t, H5T_STD_U8LE) > 0);
    H5Tclose(t);
    ck_assert_int_lt(fh_h5_file_type(FATTN_DTYPE_INVALID), 0);
}
END_TEST

START_TEST(test_attrs_roundtrip)
{
    make_tmpdir();
    fh_h5_node *root, *g, *ds;
    OK(fh_h5_node_new_group("", &root));
    OK(fh_h5_node_set_string(root, "schema", "fattn-run/1"));
    OK(fh_h5_node_set_string(root, "utf8", "h\xc3\xa9llo \xe2\x9c\x93"));
    OK(fh_h5_node_set_string(root, "empty", ""));
    OK(fh_h5_node_group(root, "g", &g));
    OK(fh_h5_node_set_int64(g, "i", INT64_MIN));
    OK(fh_h5_node_set_float32(g, "f", -0.0f));
    OK(fh_h5_node_set_float32(g, "nan", fattn_f32_from_bits(0x7fc00123u)));
    OK(fh_h5_node_set_uint8(g, "u", 255));
    int64_t pair[2] = {-1, INT64_MAX};
    OK(fh_h5_node_set_int64_pair(g, "window_size", pair));
    OK(fh_h5_node_set_int64(g, "replaced", 1));
    OK(fh_h5_node_set_int64(g, "replaced", 2));
    int64_t s1[1] = {1};
    int32_t one = 1;
    OK(fh_h5_node_add_bytes(g, "d", FATTN_DTYPE_INT32, 1, s1, &one, 4, &ds));
    OK(fh_h5_node_set_float32(ds, "scale", 2.0f));
    ck_assert_int_eq(fh_h5_node_set_string(ds, "dtype", "x"), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fh_h5_node_set_string(ds, "digest", "x"), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fh_h5_node_set_string(g, "bad", "\xff"), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fh_h5_node_set_int64(g, "a/b", 1), FATTN_E_INVALID_ARG);
    OK(fh_h5_write_file(tpath("a.h5"), root, NULL, NULL));

    fh_h5_node *b;
    OK(fh_h5_read_file(tpath("a.h5"), NULL, &b));
    const fh_h5_attr *a = fh_h5_node_attr(b, "utf8");
    ck_assert(a && a->kind == FH_H5_ATTR_STRING);
    ck_assert_str_eq(a->s, "h\xc3\xa9llo \xe2\x9c\x93");
    ck_assert_str_eq(fh_h5_node_attr(b, "empty")->s, "");
    ck_assert_str_eq(fh_h5_node_attr(b, "schema")->s, "fattn-run/1");
    const fh_h5_node *bg = fh_h5_node_find(b, "g");
    ck_assert(fh_h5_node_attr(bg, "i")->kind == FH_H5_ATTR_INT64);
    ck_assert(fh_h5_node_attr(bg, "i")->i64[0] == INT64_MIN);
    ck_assert_uint_eq(fattn_f32_bits(fh_h5_node_attr(bg, "f")->f32), 0x80000000u);
    ck_assert_uint_eq(fattn_f32_bits(fh_h5_node_attr(bg, "nan")->f32), 0x7fc00123u);
    ck_assert_int_eq(fh_h5_node_attr(bg, "u")->u8, 255);
    const fh_h5_attr *w = fh_h5_node_attr(bg, "window_size");
    ck_assert(w->kind == FH_H5_ATTR_INT64_PAIR && w->i64[0] == -1 && w->i64[1] == INT64_MAX);
    ck_assert(fh_h5_node_attr(bg, "replaced")->i64[0] == 2);
    const fh_h5_node *bd = fh_h5_node_find(b, "g/d");
    ck_assert_uint_eq(bd->n_attrs, 1);
    ck_assert(fh_h5_node_attr(bd, "scale")->f32 == 2.0f);
    /* Attributes come back sorted. */
    for (size_t i = 1; i < bg->n_attrs; i++)
        ck_assert_int_lt(strcmp(bg->attrs[i - 1].name, bg->attrs[i].name), 0);
    fh_h5_node_free(b);
    fh_h5_node_free(root);
    remove_tmpdir();
}
END_TEST

START_TEST(test_node_api)
{
    fh_h5_node *root, *g, *g2;
    OK(fh_h5_node_new_group("", &root));
    OK(fh_h5_node_group(root, "b", &g));
    OK(fh_h5_node_group(root, "a", &g2));
    OK(fh_h5_node_group(root, "b", &g2));
    ck_assert_ptr_eq(g, g2);
    ck_assert_uint_eq(root->n_children, 2);
    ck_assert_str_eq(root->children[0]->name, "a");
    int64_t s1[1] = {1};
    float v = 1.0f;
    OK(fh_h5_node_add_bytes(g, "x", FATTN_DTYPE_FLOAT32, 1, s1, &v, 4, NULL));
    ck_assert_int_eq(fh_h5_node_add_bytes(g, "x", FATTN_DTYPE_FLOAT32, 1, s1, &v, 4, NULL),
                     FATTN_E_STATE);
    ck_assert_int_eq(fh_h5_node_add_bytes(g, "y", FATTN_DTYPE_FLOAT32, 1, s1, &v, 3, NULL),
                     FATTN_E_SHAPE);
    ck_assert_int_eq(fh_h5_node_group(g, "x", &g2), FATTN_E_STATE);
    fattn_tensor empty = fattn_tensor_empty();
    ck_assert_int_eq(fh_h5_node_add_tensor(g, "e", &empty, NULL), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fh_h5_node_group(root, ".", &g2), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fh_h5_node_group(root, "", &g2), FATTN_E_INVALID_ARG);
    ck_assert_ptr_eq(fh_h5_node_find(root, "b/x"), g->children[0]);
    ck_assert_ptr_eq(fh_h5_node_find(root, "/b/x"), g->children[0]);
    ck_assert_ptr_null(fh_h5_node_find(root, "b/zz"));
    ck_assert_ptr_eq(fh_h5_node_find(root, ""), root);
    fh_h5_node_free(root);
}
END_TEST

/* ---- sorted writing ------------------------------------------------------ */

static fh_h5_node *small_group(const char *name)
{
    fh_h5_node *g;
    int64_t s[1] = {2};
    int16_t v[2] = {1, 2};
    ck_assert_int_eq(fh_h5_node_new_group(name, &g), FATTN_OK);
    ck_assert_int_eq(fh_h5_node_add_bytes(g, "v", FATTN_DTYPE_BFLOAT16, 1, s, v, 4, NULL),
                     FATTN_OK);
    return g;
}

START_TEST(test_writer_order)
{
    make_tmpdir();
    fh_h5_writer *w;
    fh_h5_node *a = small_group("a"), *b = small_group("b"), *c = small_group("c");
    fh_h5_node *attrs;
    OK(fh_h5_node_new_group("", &attrs));
    OK(fh_h5_node_set_string(attrs, "schema", "fattn-run/1"));

    /* In order: fine, creating /cases on the way; root attrs at any time. */
    OK(fh_h5_writer_open(tpath("o.h5"), &w));
    OK(fh_h5_writer_put(w, "/cases", a));
    OK(fh_h5_writer_put(w, "/cases", b));
    OK(fh_h5_writer_put(w, "/", attrs));
    OK(fh_h5_writer_put(w, "/cases/c", c)); /* /cases/c/c */
    OK(fh_h5_writer_commit(w));
    fh_h5_node *back;
    OK(fh_h5_read_file(tpath("o.h5"), NULL, &back));
    ck_assert_ptr_nonnull(fh_h5_node_find(back, "cases/c/c/v"));
    ck_assert_str_eq(fh_h5_node_attr(back, "schema")->s, "fattn-run/1");
    fh_h5_node_free(back);

    /* Out of order. */
    OK(fh_h5_writer_open(tpath("o2.h5"), &w));
    OK(fh_h5_writer_put(w, "/cases", b));
    ck_assert_int_eq(fh_h5_writer_put(w, "/cases", a), FATTN_E_STATE);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "sorted order"));
    /* Poisoned: nothing more, and commit refuses and cleans up. */
    ck_assert_int_eq(fh_h5_writer_put(w, "/cases", c), FATTN_E_STATE);
    ck_assert_int_eq(fh_h5_writer_commit(w), FATTN_E_STATE);
    ck_assert_int_eq(access(tpath("o2.h5"), F_OK), -1);

    /* Same name twice, and back into a closed group. */
    OK(fh_h5_writer_open(tpath("o3.h5"), &w));
    OK(fh_h5_writer_put(w, "/x/cases", a));
    OK(fh_h5_writer_put(w, "/y", b));
    ck_assert_int_eq(fh_h5_writer_put(w, "/x/cases", c), FATTN_E_STATE);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "closed"));
    fh_h5_writer_abort(w);

    OK(fh_h5_writer_open(tpath("o4.h5"), &w));
    OK(fh_h5_writer_put(w, "/", attrs));
    ck_assert_int_eq(fh_h5_writer_put(w, "/", attrs), FATTN_E_STATE);
    fh_h5_writer_abort(w);

    OK(fh_h5_writer_open(tpath("o5.h5"), &w));
    OK(fh_h5_writer_put(w, "/", a));
    ck_assert_int_eq(fh_h5_writer_put(w, "/", a), FATTN_E_STATE);
    fh_h5_writer_abort(w);

    /* Only o.h5 is left: aborts remove their temporary files. */
    ck_assert_int_eq(count_dir_entries(), 1);
    fh_h5_node_free(a);
    fh_h5_node_free(b);
    fh_h5_node_free(c);
    fh_h5_node_free(attrs);
    remove_tmpdir();
}
END_TEST

/* ---- atomic replace -------------------------------------------------------- */

static int fail_at_hook(void *ctx, const char *path)
{
    return strcmp(path, (const char *)ctx) == 0;
}

static fh_h5_node *two_case_tree(void)
{
    fh_h5_node *root, *cases;
    ck_assert_int_eq(fh_h5_node_new_group("", &root), FATTN_OK);
    ck_assert_int_eq(fh_h5_node_set_string(root, "schema", "fattn-run/1"), FATTN_OK);
    ck_assert_int_eq(fh_h5_node_group(root, "cases", &cases), FATTN_OK);
    ck_assert_int_eq(fh_h5_node_adopt(cases, small_group("a")), FATTN_OK);
    ck_assert_int_eq(fh_h5_node_adopt(cases, small_group("b")), FATTN_OK);
    return root;
}

START_TEST(test_atomic_failure)
{
    static const char *fail_points[] = {":commit", "/@schema", "/cases", "/cases/a/v",
                                        "/cases/b", "/cases/b/v@digest", "/cases/b/v@dtype"};
    make_tmpdir();
    fh_h5_node *root = two_case_tree();
    for (size_t i = 0; i < sizeof fail_points / sizeof fail_points[0]; i++) {
        write_text(tpath("run.h5"), "OLD CONTENT");
        fattn_status st = fh_h5_write_file(tpath("run.h5"), root, fail_at_hook,
                                              (void *)fail_points[i]);
        ck_assert_msg(st == FATTN_E_IO, "%s: %s", fail_points[i], fattn_status_name(st));
        ck_assert_ptr_nonnull(strstr(fattn_last_error(), fail_points[i]));
        ck_assert_ptr_nonnull(strstr(fattn_last_error(), tpath("run.h5")));
        size_t n;
        char *text = read_all(tpath("run.h5"), &n);
        ck_assert_str_eq(text, "OLD CONTENT");
        free(text);
        ck_assert_int_eq(count_dir_entries(), 1); /* no temporary file left */
    }
    /* Without the hook it replaces the old file. */
    OK(fh_h5_write_file(tpath("run.h5"), root, NULL, NULL));
    ck_assert_int_eq(count_dir_entries(), 1);
    fh_h5_node *back;
    OK(fh_h5_read_file(tpath("run.h5"), NULL, &back));
    ck_assert_ptr_nonnull(fh_h5_node_find(back, "cases/b/v"));
    fh_h5_node_free(back);
    /* A target in a missing directory fails cleanly. */
    ck_assert_int_eq(fh_h5_write_file(tpath("no/such/dir.h5"), root, NULL, NULL), FATTN_E_IO);
    fh_h5_node_free(root);
    remove_tmpdir();
}
END_TEST

/* ---- byte reproducibility ------------------------------------------------------ */

START_TEST(test_reproducible)
{
    make_tmpdir();
    setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
    char when[32];
    OK(fh_h5_created_utc(when));
    ck_assert_str_eq(when, "2023-11-14T22:13:20Z");
    const char *names[2] = {"first.h5", "second-with-a-longer-name.h5"};
    for (int k = 0; k < 2; k++) {
        fh_h5_node *root = two_case_tree();
        OK(fh_h5_created_utc(when));
        OK(fh_h5_node_set_string(root, "created_utc", when));
        OK(fh_h5_write_file(tpath(names[k]), root, NULL, NULL));
        fh_h5_node_free(root);
        if (k == 0)
            sleep(2); /* HDF5 timestamps have one-second resolution */
    }
    size_t n1, n2;
    char *a = read_all(tpath(names[0]), &n1);
    char *b = read_all(tpath(names[1]), &n2);
    ck_assert_uint_eq(n1, n2);
    ck_assert_msg(memcmp(a, b, n1) == 0, "files differ");
    free(a);
    free(b);
    unsetenv("SOURCE_DATE_EPOCH");
    remove_tmpdir();
}
END_TEST

START_TEST(test_created_utc_errors)
{
    static const char *bad[] = {"abc", "-1", "12x", " 5", "+5", "99999999999999999999"};
    char when[32];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("SOURCE_DATE_EPOCH", bad[i], 1);
        ck_assert_int_eq(fh_h5_created_utc(when), FATTN_E_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(fattn_last_error(), "SOURCE_DATE_EPOCH"));
    }
    setenv("SOURCE_DATE_EPOCH", "0", 1);
    OK(fh_h5_created_utc(when));
    ck_assert_str_eq(when, "1970-01-01T00:00:00Z");
    unsetenv("SOURCE_DATE_EPOCH");
    OK(fh_h5_created_utc(when));
    ck_assert_uint_eq(strlen(when), 20);
}
END_TEST

/* ---- validation of files not written by us -------------------------------------- */

static void set_str_attr(hid_t obj, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_int_ge(H5Awrite(a, t, &v), 0);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
}

/* A file with one dataset /d of `type` and `rank` dims of 2, whose dtype
 * attribute is `dtype` (NULL: none) and digest is correct (of zeros). */
static void hostile_file(const char *path, hid_t type, int rank, const char *dtype,
                         bool chunked)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_int_ge(f, 0);
    hsize_t dims[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    hid_t s = H5Screate_simple(rank, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunked)
        H5Pset_chunk(dcpl, rank, dims);
    hid_t d = H5Dcreate2(f, "d", type, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ck_assert_int_ge(d, 0);
    size_t n = (size_t)1 << rank;
    size_t bytes = n * H5Tget_size(type);
    unsigned char *zeros = calloc(bytes, 1);
    ck_assert_int_ge(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros), 0);
    char dg[FH_DIGEST_LEN];
    fh_digest_bytes(zeros, bytes, dg);
    free(zeros);
    if (dtype)
        set_str_attr(d, "dtype", dtype);
    set_str_attr(d, "digest", dg);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(s);
    H5Fclose(f);
}

static void expect_invalid(const char *path, const char *words)
{
    fh_h5_node *n = NULL;
    fattn_status st = fh_h5_read_file(path, NULL, &n);
    ck_assert_msg(st == FATTN_E_INVALID_FILE, "%s: got %s (%s)", words, fattn_status_name(st),
                  fattn_last_error());
    ck_assert_ptr_null(n);
    ck_assert_msg(strstr(fattn_last_error(), words) != NULL, "message lacks \"%s\": %s", words,
                  fattn_last_error());
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), path));
}

START_TEST(test_validation)
{
    make_tmpdir();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    const char *p = tpath("bad.h5");
    hostile_file(p, H5T_IEEE_F32LE, 1, "float16", false);
    expect_invalid(p, "storage type does not match dtype \"float16\"");
    hostile_file(p, H5T_STD_U16LE, 1, "float16", false);
    expect_invalid(p, "/d: storage type");
    hostile_file(p, H5T_IEEE_F32LE, 1, NULL, false);
    expect_invalid(p, "no dtype attribute");
    hostile_file(p, H5T_IEEE_F64LE, 1, "float64", false);
    expect_invalid(p, "unknown dtype \"float64\"");
    hostile_file(p, H5T_IEEE_F32LE, 6, "float32", false);
    expect_invalid(p, "rank <= 5");
    hostile_file(p, H5T_IEEE_F32LE, 2, "float32", true);
    expect_invalid(p, "contiguous");
    hostile_file(p, H5T_IEEE_F32BE, 1, "float32", false);
    expect_invalid(p, "storage type");
    /* A good one of the same shape reads. */
    hostile_file(p, H5T_IEEE_F32LE, 5, "float32", false);
    fh_h5_node *n;
    OK(fh_h5_read_file(p, NULL, &n));
    ck_assert_int_eq(fh_h5_node_find(n, "d")->ndim, 5);
    fh_h5_node_free(n);

    /* Soft links, unsupported attributes. */
    hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_soft("/nowhere", f, "s", H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(f);
    expect_invalid(p, "soft or external link");
    f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "dbl", H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    double one = 1.0;
    H5Awrite(a, H5T_NATIVE_DOUBLE, &one);
    H5Aclose(a);
    H5Sclose(s);
    H5Fclose(f);
    expect_invalid(p, "attribute \"dbl\": unsupported type");

    /* Not HDF5 at all: HDF5's error stack becomes one message. */
    write_text(p, "this is not an HDF5 file, just text that is long enough");
    expect_invalid(p, "H5Fopen");
    ck_assert_int_eq(fh_h5_read_file(tpath("missing.h5"), NULL, &n), FATTN_E_IO);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "missing.h5"));
    remove_tmpdir();
}
END_TEST

START_TEST(test_corrupt)
{
    make_tmpdir();
    const char *p = tpath("c.h5");
    fh_h5_node *root = two_case_tree();
    OK(fh_h5_write_file(p, root, NULL, NULL));
    fh_h5_node_free(root);
    /* Flip one data byte of /cases/b/v, found through HDF5. */
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/cases/b/v", H5P_DEFAULT);
    haddr_t off = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    ck_assert(off != HADDR_UNDEF);
    FILE *fp = fopen(p, "r+b");
    fseek(fp, (long)off, SEEK_SET);
    int byte = fgetc(fp);
    fseek(fp, (long)off, SEEK_SET);
    fputc(byte ^ 0x40, fp);
    fclose(fp);

    expect_invalid(p, "/cases/b/v: corrupt");
    fh_h5_read_opts opts = {.allow_corrupt = true};
    fh_h5_node *n;
    OK(fh_h5_read_file(p, &opts, &n));
    const fh_h5_node *v = fh_h5_node_find(n, "cases/b/v");
    ck_assert(v->corrupt);
    ck_assert_str_ne(v->digest, v->stored_digest);
    ck_assert(!fh_h5_node_find(n, "cases/a/v")->corrupt);
    fh_h5_node_free(n);
    remove_tmpdir();
}
END_TEST

START_TEST(test_reader)
{
    make_tmpdir();
    const char *p = tpath("r.h5");
    fh_h5_node *root = two_case_tree();
    OK(fh_h5_write_file(p, root, NULL, NULL));
    fh_h5_node_free(root);
    /* Two readers of one file (one shared access property list). */
    fh_h5_reader *r1, *r2;
    OK(fh_h5_reader_open(p, &r1));
    OK(fh_h5_reader_open(p, &r2));
    ck_assert(fh_h5_reader_exists(r1, "/cases/a/v"));
    ck_assert(fh_h5_reader_exists(r1, "/"));
    ck_assert(!fh_h5_reader_exists(r1, "/cases/zz/v"));
    fh_h5_node *a, *b;
    OK(fh_h5_reader_read(r1, "/cases/a", NULL, &a));
    OK(fh_h5_reader_read(r2, "/cases/b", NULL, &b));
    ck_assert_str_eq(a->name, "a");
    ck_assert_ptr_nonnull(fh_h5_node_find(a, "v"));
    ck_assert_str_eq(b->name, "b");
    fh_h5_node_free(a);
    fh_h5_node_free(b);
    ck_assert_int_eq(fh_h5_reader_read(r1, "/cases/zz", NULL, &a), FATTN_E_INVALID_FILE);
    ck_assert_ptr_null(a);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "/cases/zz"));
    fh_h5_reader_close(r1);
    fh_h5_reader_close(r2);
    remove_tmpdir();
}
END_TEST

/* ---- trees from manifests (runtree.h) ---------------------------------- */

/* A manifest gives the same tree, hence the same file bytes, as the API. */
START_TEST(test_manifest)
{
    make_tmpdir();
    static const int32_t vals[3] = {7, -1, 1 << 30};
    static const char man[] =
        "{\"schema\":\"fattn-tree/1\",\"root\":{"
        "\"attrs\":[{\"name\":\"schema\",\"kind\":\"string\",\"value\":\"fattn-run/1\"}],"
        "\"children\":{\"z\":{\"children\":{}},\"g\":{\"attrs\":["
        "{\"name\":\"i\",\"kind\":\"int64\",\"value\":-9223372036854775808},"
        "{\"name\":\"nan\",\"kind\":\"float32\",\"bits\":2143289635},"
        "{\"name\":\"u\",\"kind\":\"uint8\",\"value\":255},"
        "{\"name\":\"w\",\"kind\":\"int64_pair\",\"value\":[-1,0]}],"
        "\"children\":{\"d\":{\"dtype\":\"int32\",\"shape\":[3],\"offset\":4,\"nbytes\":12,"
        "\"attrs\":[{\"name\":\"s\",\"kind\":\"string\",\"value\":\"x\"}]}}}}}}";
    unsigned char blob[16] = {0xee, 0xee, 0xee, 0xee};
    memcpy(blob + 4, vals, sizeof vals);
    fh_h5_node *m;
    OK(fh_runtree_from_manifest(man, strlen(man), blob, sizeof blob, &m));

    fh_h5_node *root, *g, *z, *d;
    OK(fh_h5_node_new_group("", &root));
    OK(fh_h5_node_set_string(root, "schema", "fattn-run/1"));
    OK(fh_h5_node_group(root, "z", &z));
    OK(fh_h5_node_group(root, "g", &g));
    OK(fh_h5_node_set_int64(g, "i", INT64_MIN));
    OK(fh_h5_node_set_float32(g, "nan", fattn_f32_from_bits(0x7fc00123u)));
    OK(fh_h5_node_set_uint8(g, "u", 255));
    OK(fh_h5_node_set_int64_pair(g, "w", (int64_t[]){-1, 0}));
    OK(fh_h5_node_add_bytes(g, "d", FATTN_DTYPE_INT32, 1, (int64_t[]){3}, vals, 12, &d));
    OK(fh_h5_node_set_string(d, "s", "x"));
    OK(fh_h5_write_file(tpath("m.h5"), m, NULL, NULL));
    OK(fh_h5_write_file(tpath("api.h5"), root, NULL, NULL));
    size_t na, nb;
    char *a = read_all(tpath("m.h5"), &na), *b = read_all(tpath("api.h5"), &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert(memcmp(a, b, na) == 0);
    free(a);
    free(b);
    fh_h5_node_free(m);
    fh_h5_node_free(root);

    /* Malformed manifests: named, nothing built. */
    static const char *bad[][2] = {
        {"{\"schema\":\"x\",\"root\":{}}", "schema"},
        {"{\"schema\":\"fattn-tree/1\"}", "root"},
        {"{\"schema\":\"fattn-tree/1\",\"root\":{\"children\":{\"d\":{\"dtype\":\"int32\","
         "\"shape\":[3],\"offset\":8,\"nbytes\":12}}}}", "/d: \"offset\""},
        {"{\"schema\":\"fattn-tree/1\",\"root\":{\"children\":{\"d\":{\"dtype\":\"int9\","
         "\"shape\":[1],\"offset\":0,\"nbytes\":1}}}}", "/d: a dataset needs a known"},
        {"{\"schema\":\"fattn-tree/1\",\"root\":{\"attrs\":[{\"name\":\"f\",\"kind\":"
         "\"float32\",\"value\":1.5}]}}", "bits"},
        {"{\"schema\":\"fattn-tree/1\",\"root\":{\"attrs\":[{\"name\":\"u\",\"kind\":"
         "\"uint8\",\"value\":256}]}}", "do not fit"},
        {"{\"schema\":\"fattn-tree/1\",\"root\":{\"children\":{\"a\":{},\"a\":{}}}}", "line"},
        {"[", "line"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        m = (fh_h5_node *)1;
        ck_assert_int_eq(fh_runtree_from_manifest(bad[i][0], strlen(bad[i][0]), blob,
                                                     sizeof blob, &m), FATTN_E_PARSE);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(fattn_last_error(), bad[i][1]) != NULL, "#%zu: %s", i,
                      fattn_last_error());
    }
    /* The tree API's own rules still hold (reserved dataset attributes). */
    static const char reserved[] =
        "{\"schema\":\"fattn-tree/1\",\"root\":{\"children\":{\"d\":{\"dtype\":\"uint8\","
        "\"shape\":[1],\"offset\":0,\"nbytes\":1,\"attrs\":[{\"name\":\"digest\","
        "\"kind\":\"string\",\"value\":\"x\"}]}}}}";
    ck_assert_int_eq(fh_runtree_from_manifest(reserved, strlen(reserved), blob, sizeof blob,
                                                 &m), FATTN_E_INVALID_ARG);
    ck_assert_ptr_null(m);
    remove_tmpdir();
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("h5io");
    TCase *td = tcase_create("digest");
    tcase_set_timeout(td, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(td, test_digest_known);
    tcase_add_test(td, test_digest_streaming);
    suite_add_tcase(s, td);

    TCase *tr = tcase_create("roundtrip");
    tcase_set_timeout(tr, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tr, test_roundtrip_dtype, 0, N_DTYPES);
    tcase_add_test(tr, test_file_types);
    tcase_add_test(tr, test_attrs_roundtrip);
    tcase_add_test(tr, test_node_api);
    suite_add_tcase(s, tr);

    TCase *tw = tcase_create("write");
    tcase_set_timeout(tw, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tw, test_writer_order);
    tcase_add_test(tw, test_atomic_failure);
    tcase_add_test(tw, test_reproducible);
    tcase_add_test(tw, test_created_utc_errors);
    tcase_add_test(tw, test_manifest);
    suite_add_tcase(s, tw);

    TCase *tv = tcase_create("read");
    tcase_set_timeout(tv, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tv, test_validation);
    tcase_add_test(tv, test_corrupt);
    tcase_add_test(tv, test_reader);
    suite_add_tcase(s, tv);
    return s;
}

FATTN_TEST_MAIN(make_suite, fattn_test_no_ids)
