/* Suite "philox": Random123's known answers, fattn's element-to-counter
 * mapping, the [-1, 1] mapping and the dropout threshold.
 *
 * Note on the threshold: keep iff word >= round(p * 2^32) clamped to
 * 2^32 - 1, so p = 1 still keeps the single word 0xffffffff (probability
 * 2^-32), and round() takes ties away from zero (p = 2^-33 gives 1). */
#include <math.h>
#include <stdint.h>

#include "fattn/philox.h"
#include "fattn_test.h"

/* Only calls into Check on failure (ck_assert* records a mark point on every
 * success, which is slow in loops over a million draws). */
#define EXPECT(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond))                                                           \
            ck_abort_msg(__VA_ARGS__);                                         \
    } while (0)

/* ---- known-answer vectors ---------------------------------------------------- */

/* Random123 tests/kat_vectors L27-29 (DEShawResearch/random123), the
 * "philox4x32 10" lines: ctr[4] key[2] -> out[4], words in v[0], v[1], ...
 * order. */
typedef struct kat_row {
    uint32_t ctr[4];
    uint32_t key[2];
    uint32_t out[4];
} kat_row;

static const kat_row kat_rows[] = {
    {{0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u},
     {0x00000000u, 0x00000000u},
     {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
     {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

START_TEST(kat)
{
    const kat_row *r = &kat_rows[_i];
    uint32_t out[4] = {0, 0, 0, 0};
    fattn_philox4x32_10(r->ctr, r->key, out);
    for (int k = 0; k < 4; k++)
        ck_assert_msg(out[k] == r->out[k], "row %d word %d: %08x, want %08x", _i, k, out[k],
                      r->out[k]);
}
END_TEST

/* ---- element-to-counter mapping ------------------------------------------------ */

typedef struct map_row {
    uint64_t seed, stream, n;
} map_row;

static const map_row map_rows[] = {
    {0, 0, 0},
    {0, 0, 3},
    {1, 0, 4},
    {0x0123456789abcdefull, 0xfedcba9876543210ull, 7},
    {0xffffffffffffffffull, 0xffffffffffffffffull, 0xffffffffffffffffull},
    {42, 3, (1ull << 34) + 1}, /* hi32(n / 4) != 0 */
    {0x100000000ull, 0x100000000ull, 0x5555555555ull},
};

START_TEST(mapping)
{
    const map_row *r = &map_rows[_i];
    uint64_t blk = r->n / 4;
    const uint32_t ctr[4] = {(uint32_t)(blk & 0xffffffffu), (uint32_t)(blk >> 32),
                             (uint32_t)(r->stream & 0xffffffffu), (uint32_t)(r->stream >> 32)};
    const uint32_t key[2] = {(uint32_t)(r->seed & 0xffffffffu), (uint32_t)(r->seed >> 32)};
    uint32_t out[4];
    fattn_philox4x32_10(ctr, key, out);
    ck_assert_uint_eq(fattn_philox_u32(r->seed, r->stream, r->n), out[r->n % 4]);
}
END_TEST

/* With the all-zero seed and stream, element 0..3 are the first KAT row. */
START_TEST(mapping_kat)
{
    for (uint64_t n = 0; n < 4; n++)
        ck_assert_uint_eq(fattn_philox_u32(0, 0, n), kat_rows[0].out[n]);
    /* seed and stream all ones, n near 2^64: n / 4 = 0x3fffffffffffffff */
    uint32_t out[4];
    const uint32_t ctr[4] = {0xffffffffu, 0x3fffffffu, 0xffffffffu, 0xffffffffu};
    const uint32_t key[2] = {0xffffffffu, 0xffffffffu};
    fattn_philox4x32_10(ctr, key, out);
    for (uint64_t k = 0; k < 4; k++)
        ck_assert_uint_eq(fattn_philox_u32(UINT64_MAX, UINT64_MAX, 0xfffffffffffffffcull + k),
                          out[k]);
}
END_TEST

typedef struct fill_row {
    uint64_t first, count;
} fill_row;

static const fill_row fill_rows[] = {
    {0, 0}, {0, 1}, {0, 4}, {0, 8}, {1, 2}, {3, 1}, {3, 2}, {5, 23}, {6, 7},
    {(1ull << 34) + 3, 9}, {0xfffffffffffffff0ull, 15},
};

START_TEST(fill)
{
    const fill_row *r = &fill_rows[_i];
    uint32_t buf[32 + 2];
    const uint32_t canary = 0xdeadbeefu;
    for (size_t i = 0; i < 34; i++)
        buf[i] = canary;
    fattn_philox_fill_u32(0xabcdefull, 11, r->first, r->count, buf);
    for (uint64_t i = 0; i < r->count; i++)
        ck_assert_msg(buf[i] == fattn_philox_u32(0xabcdefull, 11, r->first + i),
                      "first %llu count %llu element %llu", (unsigned long long)r->first,
                      (unsigned long long)r->count, (unsigned long long)i);
    ck_assert_uint_eq(buf[r->count], canary); /* nothing written past count */
}
END_TEST

/* Different streams and seeds give different words (a smoke test of the
 * counter and key wiring). */
START_TEST(streams_differ)
{
    uint32_t a = fattn_philox_u32(1, 0, 0);
    ck_assert_uint_ne(a, fattn_philox_u32(2, 0, 0));
    ck_assert_uint_ne(a, fattn_philox_u32(1, 1, 0));
    ck_assert_uint_ne(a, fattn_philox_u32(1, 0, 4));
    ck_assert_uint_ne(a, fattn_philox_u32(1ull << 32 | 1, 0, 0));
    ck_assert_uint_ne(a, fattn_philox_u32(1, 1ull << 32, 0));
    ck_assert_uint_ne(a, fattn_philox_u32(1, 0, 1ull << 34));
}
END_TEST

/* ---- [-1, 1] -------------------------------------------------------------------- */

static double sym_exact(uint32_t w)
{
    int64_t s = (int64_t)w - (w >= 0x80000000u ? 4294967296ll : 0);
    return (double)s * 0x1p-31; /* exact in double */
}

START_TEST(sym_unit)
{
    ck_assert(fattn_philox_to_sym_unit(0) == 0.0f);
    ck_assert(fattn_philox_to_sym_unit(1) == 0x1p-31f);
    ck_assert(fattn_philox_to_sym_unit(0xffffffffu) == -0x1p-31f);
    ck_assert(fattn_philox_to_sym_unit(0x80000000u) == -1.0f);
    ck_assert(fattn_philox_to_sym_unit(0x40000000u) == 0.5f);
    ck_assert(fattn_philox_to_sym_unit(0xc0000000u) == -0.5f);
    /* (float) of 2^31 - 1 rounds to 2^31: the largest words give exactly 1 */
    ck_assert(fattn_philox_to_sym_unit(0x7fffffffu) == 1.0f);
    ck_assert(fattn_philox_to_sym_unit(0x7fffffc0u) == 1.0f); /* 2^31 - 64: tie, even */
    ck_assert(fattn_philox_to_sym_unit(0x7fffffbfu) == 1.0f - 0x1p-24f);
    /* |int32| < 2^24: exactly representable, the result is exact */
    for (uint32_t w = 0; w < (1u << 24); w += 4099) {
        EXPECT((double)fattn_philox_to_sym_unit(w) == sym_exact(w), "w %08x", w);
        uint32_t nw = 0u - w;
        EXPECT((double)fattn_philox_to_sym_unit(nw) == sym_exact(nw), "w %08x", nw);
    }
    /* everywhere: the float nearest (ties to even) to int32(w) * 2^-31, which
     * is one rounding of an exact double; always within [-1, 1] */
    for (uint64_t w = 0; w <= 0xffffffffu; w += 65521) {
        float f = fattn_philox_to_sym_unit((uint32_t)w);
        EXPECT(f == (float)sym_exact((uint32_t)w), "w %08llx", (unsigned long long)w);
        EXPECT(f >= -1.0f && f <= 1.0f, "w %08llx out of range", (unsigned long long)w);
    }
}
END_TEST

/* ---- dropout threshold --------------------------------------------------------- */

typedef struct thr_row {
    float p;
    uint32_t want;
} thr_row;

static const thr_row thr_rows[] = {
    {0.0f, 0u},                        /* p = 0 keeps every word */
    {-0.0f, 0u},
    {-0.5f, 0u},
    {0x1p-34f, 0u},                    /* 0.25 rounds to 0 */
    {0x1p-33f, 1u},                    /* 0.5: round() goes away from zero */
    {0x1.8p-32f, 2u},                  /* 1.5 -> 2 */
    {0.5f, 0x80000000u},
    {0.25f, 0x40000000u},
    {0.1f, 429496736u},                /* 0.1f = 13421773 * 2^-27, exactly */
    {0x1.fffffep-1f, 4294967040u},     /* 1 - 2^-24 */
    {1.0f, 0xffffffffu},               /* 2^32 clamps */
    {1.5f, 0xffffffffu},
};

START_TEST(threshold)
{
    const thr_row *r = &thr_rows[_i];
    ck_assert_msg(fattn_dropout_threshold(r->p) == r->want, "p=%a: %u, want %u", (double)r->p,
                  fattn_dropout_threshold(r->p), r->want);
}
END_TEST

/* p = 0 keeps all: no word is below threshold 0. */
START_TEST(threshold_keep_all)
{
    uint32_t t = fattn_dropout_threshold(0.0f);
    ck_assert_uint_eq(t, 0);
    uint32_t buf[1000];
    fattn_philox_fill_u32(99, 1, 0, 1000, buf);
    for (int i = 0; i < 1000; i++)
        EXPECT(buf[i] >= t, "word %d dropped at p=0", i);
}
END_TEST

/* Keep rate of 10^6 draws at p = 0.1 within 5 sigma of 0.9. */
START_TEST(keep_rate)
{
    const uint64_t n = 1000000;
    const float p = 0.1f;
    uint32_t t = fattn_dropout_threshold(p);
    enum { CHUNK = 4096 };
    uint32_t buf[CHUNK];
    uint64_t kept = 0;
    double sum = 0.0;
    for (uint64_t done = 0; done < n;) {
        uint64_t k = n - done < CHUNK ? n - done : CHUNK;
        fattn_philox_fill_u32(0x5eedull, 2, done, k, buf);
        for (uint64_t i = 0; i < k; i++) {
            kept += buf[i] >= t;
            sum += fattn_philox_to_sym_unit(buf[i]);
        }
        done += k;
    }
    double q = 1.0 - (double)p;
    double sigma = sqrt((double)n * q * (1.0 - q));
    double dev = fabs((double)kept - (double)n * q);
    ck_assert_msg(dev <= 5.0 * sigma, "kept %llu of %llu, |dev| %.1f > 5 sigma %.1f",
                  (unsigned long long)kept, (unsigned long long)n, dev, 5.0 * sigma);
    /* the [-1, 1] mapping has mean 0 and variance 1/3 */
    double mean_sigma = sqrt(1.0 / 3.0 / (double)n);
    ck_assert_msg(fabs(sum / (double)n) <= 5.0 * mean_sigma, "mean %g", sum / (double)n);
}
END_TEST

#define NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *make_suite(void)
{
    Suite *s = suite_create("philox");

    TCase *tc = tcase_create("kat");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, kat, 0, NROWS(kat_rows));
    suite_add_tcase(s, tc);

    tc = tcase_create("mapping");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, mapping, 0, NROWS(map_rows));
    tcase_add_test(tc, mapping_kat);
    tcase_add_loop_test(tc, fill, 0, NROWS(fill_rows));
    tcase_add_test(tc, streams_differ);
    suite_add_tcase(s, tc);

    tc = tcase_create("maps");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tc, sym_unit);
    tcase_add_loop_test(tc, threshold, 0, NROWS(thr_rows));
    tcase_add_test(tc, threshold_keep_all);
    tcase_add_test(tc, keep_rate);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, fattn_test_no_ids)
