/* Suite "spec": case-spec parsing, defaults, canonical form, Python-repr
 * floats, named errors, the compiled-in default matrix, and the resolved
 * model of a case (case.h). */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "fattn_test.h"
#include "case.h"
#include "spec.h"

/* Canonical forms computed once with CPython 3.11:
 *   json.dumps(spec_with_defaults, sort_keys=True, separators=(",", ":")) */
static const char min_json[] = "{\"id\":\"min\",\"b\":1,\"h\":2,\"sq\":3,\"d_qk\":8}";
static const char min_canonical[] =
    "{\"attn_scale\":null,\"b\":1,\"bias\":\"no_bias\",\"bias_shape\":\"1hss\","
    "\"bottom_right_diagonal\":null,\"d_qk\":8,\"d_v\":8,\"deterministic\":true,"
    "\"dropout_p\":0.0,\"dtype\":\"bfloat16\",\"fast_zero_fill\":true,\"h\":2,\"hg\":2,"
    "\"id\":\"min\",\"is_training\":true,\"layout\":\"bshd_bshd_bshd\",\"mask\":\"no_mask\","
    "\"pad_between_seqs\":false,\"return_max_logit\":false,\"rng_offset\":0,"
    "\"rng_seed\":1234,\"seed\":1,\"seqlens_kv\":null,\"seqlens_q\":null,\"skv\":3,"
    "\"softmax\":\"vanilla\",\"sq\":3,\"window\":null}";

static const char full_json[] =
    "{\"id\": \"full-1.X_y\", \"b\": 2, \"h\": 4, \"hg\": 2, \"sq\": 5, \"skv\": 7, "
    "\"d_qk\": 16, \"d_v\": 8, \"dtype\": \"float16\", \"layout\": \"thd_t2hd\", "
    "\"mask\": \"padding_causal_bottom_right\", \"bias\": \"post_scale_bias\", "
    "\"bias_shape\": \"b1ss\", \"softmax\": \"off-by-one\", \"window\": [-1, 0], "
    "\"bottom_right_diagonal\": false, \"dropout_p\": 1e-05, \"is_training\": false, "
    "\"deterministic\": false, \"return_max_logit\": true, \"fast_zero_fill\": false, "
    "\"attn_scale\": 0.1, \"pad_between_seqs\": true, \"seqlens_q\": [5, 0], "
    "\"seqlens_kv\": [7, 3], \"seed\": 9007199254740993, \"rng_seed\": 0, \"rng_offset\": 16}";
static const char full_canonical[] =
    "{\"attn_scale\":0.1,\"b\":2,\"bias\":\"post_scale_bias\",\"bias_shape\":\"b1ss\","
    "\"bottom_right_diagonal\":false,\"d_qk\":16,\"d_v\":8,\"deterministic\":false,"
    "\"dropout_p\":1e-05,\"dtype\":\"float16\",\"fast_zero_fill\":false,\"h\":4,\"hg\":2,"
    "\"id\":\"full-1.X_y\",\"is_training\":false,\"layout\":\"thd_t2hd\","
    "\"mask\":\"padding_causal_bottom_right\",\"pad_between_seqs\":true,"
    "\"return_max_logit\":true,\"rng_offset\":16,\"rng_seed\":0,\"seed\":9007199254740993,"
    "\"seqlens_kv\":[7,3],\"seqlens_q\":[5,0],\"skv\":7,\"softmax\":\"off-by-one\",\"sq\":5,"
    "\"window\":[-1,0]}";

static void parse_one_ok(const char *json, fh_spec *s)
{
    fattn_status st = fh_spec_parse_one(json, strlen(json), "t", s);
    ck_assert_msg(st == FATTN_OK, "parse failed: %s", fattn_last_error());
}

START_TEST(test_defaults)
{
    fh_spec s;
    parse_one_ok(min_json, &s);
    ck_assert_str_eq(s.id, "min");
    ck_assert_int_eq(s.b, 1);
    ck_assert_int_eq(s.h, 2);
    ck_assert_int_eq(s.hg, 2);
    ck_assert_int_eq(s.sq, 3);
    ck_assert_int_eq(s.skv, 3);
    ck_assert_int_eq(s.d_qk, 8);
    ck_assert_int_eq(s.d_v, 8);
    ck_assert_int_eq(s.dtype, FATTN_DTYPE_BFLOAT16);
    ck_assert_int_eq(s.layout, FATTN_LAYOUT_BSHD_BSHD_BSHD);
    ck_assert_int_eq(s.mask, FATTN_MASK_NO_MASK);
    ck_assert_int_eq(s.bias, FATTN_BIAS_NO_BIAS);
    ck_assert_int_eq(s.bias_shape, FH_BIAS_SHAPE_1HSS);
    ck_assert_int_eq(s.softmax, FATTN_SOFTMAX_VANILLA);
    ck_assert(!s.window_set);
    ck_assert_int_eq(s.bottom_right_diagonal, FH_TRISTATE_NULL);
    ck_assert(s.dropout_p == 0.0 && !signbit(s.dropout_p));
    ck_assert(s.is_training && s.deterministic && !s.return_max_logit && s.fast_zero_fill);
    ck_assert(!s.attn_scale_set && !s.pad_between_seqs);
    ck_assert_ptr_null(s.seqlens_q);
    ck_assert_ptr_null(s.seqlens_kv);
    ck_assert_int_eq(s.seed, 1);
    ck_assert_int_eq(s.rng_seed, 1234);
    ck_assert_int_eq(s.rng_offset, 0);
    fh_spec_free(&s);
}
END_TEST

START_TEST(test_full)
{
    fh_spec s;
    parse_one_ok(full_json, &s);
    ck_assert_int_eq(s.hg, 2);
    ck_assert_int_eq(s.skv, 7);
    ck_assert_int_eq(s.d_v, 8);
    ck_assert_int_eq(s.dtype, FATTN_DTYPE_FLOAT16);
    ck_assert_int_eq(s.layout, FATTN_LAYOUT_THD_T2HD);
    ck_assert_int_eq(s.mask, FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT);
    ck_assert_int_eq(s.bias, FATTN_BIAS_POST_SCALE_BIAS);
    ck_assert_int_eq(s.bias_shape, FH_BIAS_SHAPE_B1SS);
    ck_assert_int_eq(s.softmax, FATTN_SOFTMAX_OFF_BY_ONE);
    ck_assert(s.window_set && s.window[0] == -1 && s.window[1] == 0);
    ck_assert_int_eq(s.bottom_right_diagonal, FH_TRISTATE_FALSE);
    ck_assert(s.dropout_p == 1e-05);
    ck_assert(!s.is_training && !s.deterministic && s.return_max_logit && !s.fast_zero_fill);
    ck_assert(s.attn_scale_set && s.attn_scale == 0.1);
    ck_assert(s.pad_between_seqs);
    ck_assert(s.seqlens_q && s.seqlens_q[0] == 5 && s.seqlens_q[1] == 0);
    ck_assert(s.seqlens_kv && s.seqlens_kv[0] == 7 && s.seqlens_kv[1] == 3);
    ck_assert(s.seed == INT64_C(9007199254740993));
    ck_assert_int_eq(s.rng_seed, 0);
    ck_assert_int_eq(s.rng_offset, 16);
    fh_spec_free(&s);
}
END_TEST

/* Canonical bytes equal Python's json.dumps, and parse back equal. */
START_TEST(test_canonical_python)
{
    const char *in[2] = {min_json, full_json};
    const char *want[2] = {min_canonical, full_canonical};
    for (int i = 0; i < 2; i++) {
        fh_spec s, t;
        parse_one_ok(in[i], &s);
        char *c = NULL;
        ck_assert_int_eq(fh_spec_canonical(&s, &c), FATTN_OK);
        ck_assert_str_eq(c, want[i]);
        parse_one_ok(c, &t);
        ck_assert(fh_spec_equal(&s, &t));
        char *c2 = NULL;
        ck_assert_int_eq(fh_spec_canonical(&t, &c2), FATTN_OK);
        ck_assert_str_eq(c2, c);
        free(c);
        free(c2);
        fh_spec_free(&s);
        fh_spec_free(&t);
    }
}
END_TEST

/* A spec with every key that is written only when set: the canonical form
 * has every key of the table, once each, sorted (Python's sort_keys), and
 * fh_spec_key_name lists the same keys in the same order. */
static const char every_key_json[] =
    "{\"id\":\"every\",\"b\":2,\"h\":2,\"sq\":4,\"d_qk\":8,\"dtype\":\"float16\","
    "\"is_training\":false,\"raw_func_args\":true,\"cpu_offload\":true,"
    "\"bias\":\"post_scale_bias\",\"bias_no_grad\":true,"
    "\"no_grad\":true,\"inference_mode\":true,\"max_batch_size\":3,"
    "\"window\":[2,0],\"attn_scale\":0.5,\"seqlens_q\":[4,1],\"seqlens_kv\":[3,4],"
    "\"bottom_right_diagonal\":true,\"fp8\":{\"recipe\":\"current\"},"
    "\"layout\":\"paged_kv_bshd_bshd_bshd\",\"mask\":\"padding\",\"paged\":{\"page_size\":2},"
    "\"cp\":{\"size\":4,\"comm\":\"a2a+p2p\"},"
    "\"schedule\":[{\"F\":0},{\"F\":0}],"
    "\"expect_refusal\":{\"status\":\"FATTN_E_NOT_MODELLED\",\"rule\":\"cpu_offload_v1\"}}";

/* The top-level keys of a JSON object without whitespace, in order. */
static size_t top_keys(const char *j, char keys[][32], size_t max)
{
    size_t n = 0;
    int depth = 0;
    for (const char *p = j; *p; p++) {
        if (*p == '"') {
            const char *q = strchr(p + 1, '"'); /* no escapes in keys or values here */
            ck_assert_ptr_nonnull(q);
            if (depth == 1 && q[1] == ':' && n < max)
                snprintf(keys[n++], sizeof keys[0], "%.*s", (int)(q - p - 1), p + 1);
            p = q;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            depth--;
        }
    }
    return n;
}

START_TEST(test_canonical_every_key_sorted)
{
    fh_spec s;
    parse_one_ok(every_key_json, &s);
    char *c = NULL;
    ck_assert_int_eq(fh_spec_canonical(&s, &c), FATTN_OK);
    char keys[64][32];
    size_t n = top_keys(c, keys, 64);
    ck_assert_uint_eq(n, fh_spec_key_count());
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(i == 0 || strcmp(keys[i - 1], keys[i]) < 0, "%s before %s in %s",
                      keys[i - 1], keys[i], c);
        ck_assert_str_eq(keys[i], fh_spec_key_name(i));
    }
    ck_assert_ptr_null(fh_spec_key_name(n));
    ck_assert_ptr_nonnull(strstr(c, "\"cpu_offload\":true,\"d_qk\":8,"));
    ck_assert_ptr_nonnull(strstr(c, "\"cp\":{\"comm\":\"a2a+p2p\",\"load_balancing\":"
                                    "\"dual_chunk_swap\",\"size\":4},"));
    fh_spec t;
    parse_one_ok(c, &t);
    ck_assert(fh_spec_equal(&s, &t));
    free(c);
    fh_spec_free(&s);
    fh_spec_free(&t);
}
END_TEST

START_TEST(test_integer_for_float_key)
{
    /* "dropout_p": 0 and "attn_scale": 1 are numbers; canonical writes floats. */
    const char *j = "{\"id\":\"i\",\"b\":1,\"h\":1,\"sq\":1,\"d_qk\":1,\"dropout_p\":0,"
                    "\"attn_scale\":1}";
    fh_spec s;
    parse_one_ok(j, &s);
    char *c = NULL;
    ck_assert_int_eq(fh_spec_canonical(&s, &c), FATTN_OK);
    ck_assert_ptr_nonnull(strstr(c, "\"attn_scale\":1.0,"));
    ck_assert_ptr_nonnull(strstr(c, "\"dropout_p\":0.0,"));
    free(c);
    fh_spec_free(&s);
}
END_TEST

START_TEST(test_equal_and_copy)
{
    fh_spec a, b, c;
    parse_one_ok(full_json, &a);
    ck_assert_int_eq(fh_spec_copy(&b, &a), FATTN_OK);
    ck_assert(fh_spec_equal(&a, &b));
    ck_assert_ptr_ne(a.seqlens_q, b.seqlens_q);
    b.seqlens_kv[1] = 4;
    ck_assert(!fh_spec_equal(&a, &b));
    parse_one_ok(min_json, &c);
    ck_assert(!fh_spec_equal(&a, &c));
    fh_spec_free(&a);
    fh_spec_free(&b);
    fh_spec_free(&c);
}
END_TEST

/* ---- floats as Python's repr (values computed once with CPython 3.11) ---- */

static const struct {
    uint64_t bits;
    const char *repr;
} float_table[] = {
    {0x0000000000000000ULL, "0.0"},
    {0x8000000000000000ULL, "-0.0"},
    {0x3fb999999999999aULL, "0.1"},
    {0x3fe0000000000000ULL, "0.5"},
    {0x3ff0000000000000ULL, "1.0"},
    {0xbff0000000000000ULL, "-1.0"},
    {0x4000000000000000ULL, "2.0"},
    {0x3ee4f8b588e368f1ULL, "1e-05"},
    {0x3f1a36e2eb1c432dULL, "0.0001"},
    {0x3f23a92a30553261ULL, "0.00015"},
    {0x3f33a92a30553262ULL, "0.00030000000000000003"},
    {0x4341c37937e08000ULL, "1e+16"},
    {0x430c6bf526340000ULL, "1000000000000000.0"},
    {0x434aa535d3d0c000ULL, "1.5e+16"},
    {0x4341c37937e07fffULL, "9999999999999998.0"},
    {0x437b69b4ba630f35ULL, "1.2345678901234568e+17"},
    {0x4480f0cf064dd592ULL, "1e+22"},
    {0x44b52d02c7e14af6ULL, "1e+23"},
    {0x0000000000000001ULL, "5e-324"},
    {0x0010000000000000ULL, "2.2250738585072014e-308"},
    {0x7fefffffffffffffULL, "1.7976931348623157e+308"},
    {0x3fd5555555555555ULL, "0.3333333333333333"},
    {0x3fe5555555555555ULL, "0.6666666666666666"},
    {0x3fc0000000000000ULL, "0.125"},
    {0x3fd3333333333334ULL, "0.30000000000000004"},
    {0x4059000000000000ULL, "100.0"},
    {0x40934a0000000000ULL, "1234.5"},
    {0x400921f9f01b866eULL, "3.14159"},
    {0x0010000000000000ULL, "2.2250738585072014e-308"},
    {0x43e0000000000000ULL, "9.223372036854776e+18"},
    {0x3e10000000000000ULL, "9.313225746154785e-10"},
    {0x3fefffffffffffffULL, "0.9999999999999999"},
    {0x4011666666666666ULL, "4.35"},
    {0x3fd3333333333333ULL, "0.3"},
    {0x3e7ad7f29abcaf48ULL, "1e-07"},
    {0x43e56a95319d63e1ULL, "1.2345678901234567e+19"},
    {0x3fbe35048e931040ULL, "0.11799648743459645"},
    {0x3fdae52d6bce4614ULL, "0.42023788001924456"},
    {0x3fe91e8535090aabULL, "0.7849756275030207"},
    {0x3fe2b10a67ade9e6ULL, "0.5841114068019209"},
    {0x3feb4c1f60f3cef5ULL, "0.8530423062897784"},
    {0x3fdb22314a8ae308ULL, "0.4239619472460139"},
    {0x3fc9df207f4b1b64ULL, "0.20212179389474294"},
    {0x3fdbcf623c438c64ULL, "0.4345326984895961"},
    {0x3fd83103aed0d8caULL, "0.37799160072189564"},
    {0x3fb3a5bf0b611598ULL, "0.07674783733189938"},
    {0x3fef346c71a9759cULL, "0.9751493663749673"},
    {0x3fec91e2552a2536ULL, "0.8928081191417394"},
    {0x3fea6f62fb6af88bULL, "0.8260970030312519"},
    {0x3fe2374e4a0ae6feULL, "0.5692511984009057"},
    {0x3fd58961c0678cbeULL, "0.33651012219906906"},
    {0x3fc068594a5240b4ULL, "0.12818447236032215"},
    {0x3fec3567c2d28c59ULL, "0.8815192036748939"},
    {0x3fe2c9c0790032dcULL, "0.5871279109283836"},
    {0x3fc0306bee683accULL, "0.126477710160961"},
    {0x3fee55b9820f63a4ULL, "0.9479644336926083"},
    {0x3fecd9e0553cf669ULL, "0.901596228104336"},
    {0x3fe2c8d4e2c0e7b8ULL, "0.5870155743389125"},
    {0x3fe1bc93d44d6ac0ULL, "0.5542697092563103"},
    {0x3fec1a89e78216c0ULL, "0.8782395860332244"},
    {0x3fe4eaa1a69aa1afULL, "0.6536415342316583"},
    {0x3fd7a7b2ea1423a6ULL, "0.3696105276035787"},
    {0x3fa78930da75af60ULL, "0.045968557994312986"},
    {0x3fefea8526528b79ULL, "0.9973779438481493"},
    {0x3fe207875b72c970ULL, "0.5634190355397504"},
    {0x3fcacf4e8764ae4cULL, "0.20945150004387114"},
    {0x3fa9cc84e566e850ULL, "0.050388482096835774"},
    {0x3fea83e249e7f76aULL, "0.8285991137961279"},
    {0x3fd0d4538a72d630ULL, "0.2629593708073541"},
    {0x3fca3d172167dd40ULL, "0.20498932963503513"},
    {0x3fd102a6811931e2ULL, "0.26578676802890133"},
    {0x3fccc5ef6a30354cULL, "0.22479050335861428"},
    {0x3feb28564263c05cULL, "0.8486739441559723"},
    {0x3fd5e0433b3e43b2ULL, "0.3418129042193484"},
    {0x3fee20cfb437cb46ULL, "0.94150529097383"},
    {0x3fda913cf51bf88aULL, "0.41511463104678425"},
    {0x4a7ce6e5f89c8d33ULL, "6.75843876005182e+50"},
    {0xa22fa1f725601b2fULL, "-5.066499894016898e-144"},
    {0x1b39320448410fe3ULL, "1.5544023441874205e-177"},
    {0x5043796d40618823ULL, "4.509945161717723e+78"},
    {0xc58718296e887807ULL, "-8.934206376953689e+26"},
    {0x1098d6a904943815ULL, "1.0239269122939286e-228"},
    {0x3a38b767352e4941ULL, "3.119650612955522e-28"},
    {0x9b19cdec60c9e347ULL, "-3.979936478258974e-178"},
    {0x780b86486a2a1812ULL, "1.8176331567502735e+270"},
    {0x8935b28fafb5454bULL, "-2.6916191680102057e-264"},
    {0xef8d8e8e32474e22ULL, "-2.2406033019642223e+229"},
    {0x17cde531518bd8abULL, "5.1191220706885394e-194"},
    {0x6d33ce50dcfe4bccULL, "1.0924257505679557e+218"},
    {0xcfc2ffe4ed2261f1ULL, "-1.718751453462524e+76"},
    {0x89e0b9583a589e65ULL, "-4.24887536492955e-261"},
    {0x3f0279a1abe7020eULL, "3.523850090259374e-05"},
    {0x46f6d2e1c91d6da3ULL, "7.406732842697646e+33"},
    {0xc10c2788a8e1f980ULL, "-230641.08246226236"},
    {0x9e5d4d25c8ec9febULL, "-2.0353077945140491e-162"},
    {0xd703d5b062c4a228ULL, "-1.4906461069017133e+111"},
    {0x7d3109bf6bd33d83ULL, "1.0881689946975821e+295"},
    {0xc8bd8770d23ad2d9ULL, "-2.572344376666327e+42"},
    {0x62f56763d5236ac1ULL, "5.048586880232952e+168"},
    {0x26b8e5ba2d10a9f2ULL, "3.766303194632279e-122"},
    {0x5439f75f10c01d5dULL, "5.546366806697518e+97"},
    {0xfd39265bb32e9ea1ULL, "-1.6062418535594396e+295"},
    {0x8ca4c608ef605abfULL, "-9.284634142654976e-248"},
    {0x616273cdd6a19e4fULL, "1.2971183612942818e+161"},
    {0x40fc275e69b5220dULL, "115317.90080750753"},
    {0xbb9d2ebef476092fULL, "-1.544914046103647e-21"},
    {0xc2d14e0a57e101e1ULL, "-76107514610695.52"},
    {0x2f62323b36225fadULL, "1.9182811083926818e-80"},
    {0x8564f1dc632417c4ULL, "-1.1268073132697686e-282"},
    {0x2e3d6a6340ed367eULL, "5.9147803353002586e-86"},
    {0x3a5f9ccdad9a6f2dULL, "1.596024059935851e-27"},
    {0x9713b93662cb4300ULL, "-1.6490982535525327e-197"},
    {0x248fcff28cc334f4ULL, "1.4005767696709742e-132"},
    {0x9e8c1878d5464ac5ULL, "-1.5612431716807163e-161"},
    {0x769799bacbebb741ULL, "1.857879539846099e+263"},
    {0x52bd78ee9ff29d16ULL, "3.7522700644430283e+90"},
    {0x0000000000000000ULL, "0.0"},
    {0x02dfffffffffffffULL, "7.828782656285049e-295"},
    {0x08efffffffffffffULL, "1.2405201291620118e-265"},
    {0x0effffffffffffffULL, "1.9656826079092812e-236"},
    {0x150fffffffffffffULL, "3.1147484222179895e-207"},
    {0x1b1fffffffffffffULL, "4.935515883730706e-178"},
    {0x212fffffffffffffULL, "7.820637090558987e-149"},
    {0x273fffffffffffffULL, "1.2392294127517817e-119"},
    {0x2d4fffffffffffffULL, "1.9636373861190904e-90"},
    {0x335fffffffffffffULL, "3.1115076389305705e-61"},
    {0x396fffffffffffffULL, "4.930380657631323e-32"},
    {0x3f7fffffffffffffULL, "0.007812499999999999"},
    {0x458fffffffffffffULL, "1.2379400392853801e+27"},
    {0x4b9fffffffffffffULL, "1.9615942923083375e+56"},
    {0x51afffffffffffffULL, "3.108270227561166e+85"},
    {0x57bfffffffffffffULL, "4.9252507745493094e+114"},
    {0x5dcfffffffffffffULL, "7.80437137578998e+143"},
    {0x63dfffffffffffffULL, "1.2366520073655225e+173"},
    {0x69efffffffffffffULL, "1.9595533242629368e+202"},
    {0x6fffffffffffffffULL, "3.1050361846014175e+231"},
    {0x760fffffffffffffULL, "4.920126228925448e+260"},
    {0x7c1fffffffffffffULL, "7.796251209119998e+289"},
};
#define N_FLOATS ((int)(sizeof float_table / sizeof float_table[0]))

START_TEST(test_float_repr)
{
    double v;
    memcpy(&v, &float_table[_i].bits, sizeof v);
    char buf[32];
    ck_assert_int_eq(fh_spec_format_double(v, buf, sizeof buf), FATTN_OK);
    ck_assert_msg(strcmp(buf, float_table[_i].repr) == 0, "0x%016" PRIx64 ": got %s want %s",
                  float_table[_i].bits, buf, float_table[_i].repr);
    double back = strtod(buf, NULL);
    ck_assert_mem_eq(&back, &v, sizeof v);
}
END_TEST

START_TEST(test_float_errors)
{
    char buf[32], small[3];
    ck_assert_int_eq(fh_spec_format_double(INFINITY, buf, sizeof buf), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fh_spec_format_double(NAN, buf, sizeof buf), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fh_spec_format_double(0.1, small, sizeof small), FATTN_E_OVERFLOW);
}
END_TEST

/* ---- errors: status and the words the message must contain ---- */

#define CASE_HEAD "{\"id\":\"x\",\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8"
static const struct {
    const char *json;
    fattn_status status;
    const char *must[3];
} error_table[] = {
    {"[" CASE_HEAD ",\"colour\":1}]", FATTN_E_PARSE, {"case 'x' (#1)", "key 'colour'", "unknown key"}},
#define PAGED_HEAD CASE_HEAD ",\"layout\":\"paged_kv_bshd_bshd_bshd\",\"mask\":\"padding\""
    {"[" PAGED_HEAD "}]", FATTN_E_INVALID_ARG, {"key 'paged'", "needs the key"}},
    {"[" CASE_HEAD ",\"paged\":{\"page_size\":2}}]", FATTN_E_INVALID_ARG, {"key 'paged'", "needs a paged_kv_* layout"}},
    {"[" PAGED_HEAD ",\"paged\":{\"page_size\":3}}]", FATTN_E_INVALID_ARG, {"key 'paged'", "multiple of page_size"}},
    {"[" PAGED_HEAD ",\"paged\":{\"page_size\":2,\"num_pages\":3}}]", FATTN_E_INVALID_ARG, {"key 'paged'", "num_pages 3"}},
    {"[" PAGED_HEAD ",\"paged\":{\"page_size\":2,\"pages\":3}}]", FATTN_E_PARSE, {"key 'paged'", "unknown member 'pages'"}},
    {"[" PAGED_HEAD ",\"paged\":{\"num_pages\":4}}]", FATTN_E_PARSE, {"key 'paged'", "page_size"}},
    {"[" PAGED_HEAD ",\"paged\":{\"page_size\":0}}]", FATTN_E_INVALID_ARG, {"key 'page_size'", "out of range"}},
    /* max_batch_size: the cache as TE's InferenceParams keeps it */
    {"[" CASE_HEAD ",\"max_batch_size\":2}]", FATTN_E_INVALID_ARG, {"key 'max_batch_size'", "needs paged"}},
    {"[" PAGED_HEAD ",\"paged\":{\"page_size\":2},\"max_batch_size\":0}]", FATTN_E_INVALID_ARG, {"key 'max_batch_size'", "out of range"}},
    {"[" PAGED_HEAD ",\"paged\":{\"page_size\":2,\"num_pages\":2},\"max_batch_size\":2}]", FATTN_E_INVALID_ARG, {"key 'max_batch_size'", "num_pages = max_batch_size"}},
    {"[" CASE_HEAD ",\"layout\":\"paged_kv_bshd_sbhd_sbhd\",\"mask\":\"padding\",\"paged\":{\"page_size\":2},\"max_batch_size\":2}]", FATTN_E_INVALID_ARG, {"key 'max_batch_size'", "bshd cache"}},
    {"[" PAGED_HEAD ",\"paged\":{\"page_size\":2,\"separate_v\":true},\"max_batch_size\":2}]", FATTN_E_INVALID_ARG, {"key 'max_batch_size'", "one page table"}},
    {"[" PAGED_HEAD ",\"paged\":{\"page_size\":2},\"max_batch_size\":true}]", FATTN_E_PARSE, {"key 'max_batch_size'", NULL}},
    {"[" CASE_HEAD ",\"cp\":{\"comm\":\"p2p\"}}]", FATTN_E_PARSE, {"key 'cp'", "with size"}},
    {"[" CASE_HEAD ",\"cp\":2}]", FATTN_E_PARSE, {"key 'cp'", "with size"}},
    {"[" CASE_HEAD ",\"cp\":{\"size\":1}}]", FATTN_E_INVALID_ARG, {"key 'size'", "out of range [2, 1024]"}},
    {"[" CASE_HEAD ",\"cp\":{\"size\":2,\"comm\":\"ring\"}}]", FATTN_E_PARSE, {"key 'cp'", "comm 'ring'"}},
    {"[" CASE_HEAD ",\"cp\":{\"size\":2,\"load_balancing\":\"none\"}}]", FATTN_E_PARSE, {"key 'cp'", "load_balancing 'none'"}},
    {"[" CASE_HEAD ",\"cp\":{\"size\":6,\"ranks\":2}}]", FATTN_E_PARSE, {"key 'cp'", "unknown member 'ranks'"}},
    {"[" CASE_HEAD ",\"cp\":{\"size\":3,\"comm\":\"a2a+p2p\"}}]", FATTN_E_INVALID_ARG, {"key 'cp'", "even size"}},
    {"[{\"id\":\"x\",\"b\":\"2\",\"h\":1,\"sq\":4,\"d_qk\":8}]", FATTN_E_PARSE, {"case 'x'", "key 'b'", "expected an integer, got a string"}},
    {"[{\"id\":\"x\",\"b\":2.0,\"h\":1,\"sq\":4,\"d_qk\":8}]", FATTN_E_PARSE, {"case 'x'", "key 'b'", "real number"}},
    {"[{\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8}]", FATTN_E_PARSE, {"case (#1)", "key 'id'", "missing"}},
    {"[{\"id\":\"x\",\"b\":1,\"h\":1,\"sq\":4}]", FATTN_E_PARSE, {"case 'x'", "key 'd_qk'", "missing"}},
    {"[{\"id\":\"a b\",\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8}]", FATTN_E_PARSE, {"key 'id'", "0x20", "[A-Za-z0-9._-]"}},
    {"[{\"id\":\"\\u00e9\",\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8}]", FATTN_E_PARSE, {"key 'id'", "0xc3", NULL}},
    {"[{\"id\":\".\",\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8}]", FATTN_E_PARSE, {"key 'id'", "cannot name a group", NULL}},
    {"[{\"id\":\"\",\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8}]", FATTN_E_PARSE, {"key 'id'", "empty", NULL}},
    {"[{\"id\":7,\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8}]", FATTN_E_PARSE, {"key 'id'", "expected a string", NULL}},
    {"[" CASE_HEAD "}," CASE_HEAD "}]", FATTN_E_PARSE, {"case 'x' (#2)", "key 'id'", "duplicate of case #1"}},
    {"[" CASE_HEAD ",\"b\":2}]", FATTN_E_PARSE, {"duplicate", "line 1", NULL}},
    {"[{\"id\":\"x\",\"b\":0,\"h\":1,\"sq\":4,\"d_qk\":8}]", FATTN_E_INVALID_ARG, {"case 'x'", "key 'b'", "out of range"}},
    {"[{\"id\":\"x\",\"b\":65537,\"h\":1,\"sq\":4,\"d_qk\":8}]", FATTN_E_INVALID_ARG, {"key 'b'", "65537", NULL}},
    {"[{\"id\":\"x\",\"b\":1,\"h\":1,\"sq\":-4,\"d_qk\":8}]", FATTN_E_INVALID_ARG, {"key 'sq'", "out of range", NULL}},
    {"[{\"id\":\"x\",\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8,\"skv\":16777217}]", FATTN_E_INVALID_ARG, {"key 'skv'", NULL, NULL}},
    {"[{\"id\":\"x\",\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8,\"d_v\":4097}]", FATTN_E_INVALID_ARG, {"key 'd_v'", NULL, NULL}},
    {"[{\"id\":\"huge\",\"b\":65536,\"h\":4096,\"sq\":16777216,\"d_qk\":4096}]", FATTN_E_OVERFLOW, {"case 'huge'", "overflows", "q (b*h*sq*d_qk)"}},
    {"[{\"id\":\"huge\",\"b\":65536,\"h\":4096,\"sq\":16777216,\"skv\":16777216,\"d_qk\":1}]", FATTN_E_OVERFLOW, {"case 'huge'", "scores", NULL}},
    {"[{\"id\":\"x\",\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8,\"b\":100000000000000000000}]", FATTN_E_PARSE, {"line 1", NULL, NULL}},
    {"[" CASE_HEAD ",\"h\":4,\"hg\":3}]", FATTN_E_PARSE, {"duplicate", NULL, NULL}},
    {"[{\"id\":\"x\",\"b\":1,\"h\":4,\"hg\":3,\"sq\":4,\"d_qk\":8}]", FATTN_E_INVALID_ARG, {"case 'x'", "key 'hg'", "does not divide h = 4"}},
    {"[{\"id\":\"x\",\"b\":1,\"h\":4,\"hg\":8,\"sq\":4,\"d_qk\":8}]", FATTN_E_INVALID_ARG, {"key 'hg'", NULL, NULL}},
    {"[" CASE_HEAD ",\"dtype\":\"float64\"}]", FATTN_E_PARSE, {"case 'x'", "key 'dtype'", "float64"}},
    {"[" CASE_HEAD ",\"dtype\":\"float8_e4m3fn\"}]", FATTN_E_PARSE, {"key 'dtype'", NULL, NULL}},
    {"[" CASE_HEAD ",\"layout\":\"bshd\"}]", FATTN_E_PARSE, {"case 'x'", "key 'layout'", "bshd"}},
    {"[" CASE_HEAD ",\"mask\":5}]", FATTN_E_PARSE, {"key 'mask'", "expected a string", NULL}},
    {"[" CASE_HEAD ",\"mask\":\"top_left\"}]", FATTN_E_PARSE, {"key 'mask'", "top_left", NULL}},
    {"[" CASE_HEAD ",\"bias\":\"post\"}]", FATTN_E_PARSE, {"key 'bias'", NULL, NULL}},
    {"[" CASE_HEAD ",\"bias_shape\":\"1h1s\"}]", FATTN_E_PARSE, {"key 'bias_shape'", "1h1s", NULL}},
    {"[" CASE_HEAD ",\"softmax\":\"off_by_one\"}]", FATTN_E_PARSE, {"key 'softmax'", NULL, NULL}},
    {"[" CASE_HEAD ",\"window\":[1]}]", FATTN_E_PARSE, {"key 'window'", "wrong length", NULL}},
    {"[" CASE_HEAD ",\"window\":{}}]", FATTN_E_PARSE, {"key 'window'", "an object", NULL}},
    {"[" CASE_HEAD ",\"window\":[1,\"a\"]}]", FATTN_E_PARSE, {"key 'window'", "element 1", NULL}},
    {"[" CASE_HEAD ",\"window\":[1,3000000000]}]", FATTN_E_INVALID_ARG, {"key 'window'", "int32", NULL}},
    {"[" CASE_HEAD ",\"bottom_right_diagonal\":1}]", FATTN_E_PARSE, {"key 'bottom_right_diagonal'", NULL, NULL}},
    {"[" CASE_HEAD ",\"dropout_p\":1.0}]", FATTN_E_INVALID_ARG, {"key 'dropout_p'", "[0, 1)", NULL}},
    {"[" CASE_HEAD ",\"dropout_p\":-0.1}]", FATTN_E_INVALID_ARG, {"key 'dropout_p'", NULL, NULL}},
    {"[" CASE_HEAD ",\"dropout_p\":\"0.1\"}]", FATTN_E_PARSE, {"key 'dropout_p'", "a number", NULL}},
    {"[" CASE_HEAD ",\"dropout_p\":null}]", FATTN_E_PARSE, {"key 'dropout_p'", NULL, NULL}},
    {"[" CASE_HEAD ",\"raw_func_args\":1}]", FATTN_E_PARSE, {"key 'raw_func_args'", "true or false", NULL}},
    {"[" CASE_HEAD ",\"cpu_offload\":\"yes\"}]", FATTN_E_PARSE, {"key 'cpu_offload'", "true or false", NULL}},
    {"[" CASE_HEAD ",\"bias_no_grad\":1}]", FATTN_E_PARSE, {"key 'bias_no_grad'", "true or false", NULL}},
    {"[" CASE_HEAD ",\"bias_no_grad\":true}]", FATTN_E_INVALID_ARG, {"key 'bias_no_grad'", "no bias tensor", NULL}},
    {"[" CASE_HEAD ",\"expect_refusal\":1}]", FATTN_E_PARSE, {"key 'expect_refusal'", "null or an object", NULL}},
    {"[" CASE_HEAD ",\"expect_refusal\":{\"status\":\"FATTN_E_INVALID_CASE\"}}]", FATTN_E_PARSE, {"key 'expect_refusal'", "required", NULL}},
    {"[" CASE_HEAD ",\"expect_refusal\":{\"status\":\"FATTN_E_INVALID_CASE\",\"rule\":\"alibi_mask\",\"x\":1}}]", FATTN_E_PARSE, {"key 'expect_refusal'", "unknown member 'x'", NULL}},
    {"[" CASE_HEAD ",\"expect_refusal\":{\"status\":\"E_BAD\",\"rule\":\"alibi_mask\"}}]", FATTN_E_PARSE, {"key 'expect_refusal'", "E_BAD", NULL}},
    {"[" CASE_HEAD ",\"expect_refusal\":{\"status\":\"FATTN_E_UNKNOWN\",\"rule\":\"alibi_mask\"}}]", FATTN_E_PARSE, {"key 'expect_refusal'", "FATTN_E_UNKNOWN", "not a fattn status name"}},
    {"[" CASE_HEAD ",\"expect_refusal\":{\"status\":\"FATTN_E_UNSUPPORTED\",\"rule\":\"max_logit_cudnn\"}}]", FATTN_E_INVALID_ARG, {"key 'expect_refusal'", "skip", NULL}},
    {"[" CASE_HEAD ",\"expect_refusal\":{\"status\":\"FATTN_E_INVALID_CASE\",\"rule\":\"no_such_rule\"}}]", FATTN_E_INVALID_ARG, {"key 'expect_refusal'", "no_such_rule", "support table"}},
    {"[" CASE_HEAD ",\"is_training\":1}]", FATTN_E_PARSE, {"key 'is_training'", "true or false", NULL}},
    {"[" CASE_HEAD ",\"deterministic\":null}]", FATTN_E_PARSE, {"key 'deterministic'", NULL, NULL}},
    {"[" CASE_HEAD ",\"return_max_logit\":\"yes\"}]", FATTN_E_PARSE, {"key 'return_max_logit'", NULL, NULL}},
    {"[" CASE_HEAD ",\"fast_zero_fill\":0}]", FATTN_E_PARSE, {"key 'fast_zero_fill'", NULL, NULL}},
    {"[" CASE_HEAD ",\"pad_between_seqs\":[]}]", FATTN_E_PARSE, {"key 'pad_between_seqs'", NULL, NULL}},
    {"[" CASE_HEAD ",\"attn_scale\":1e39}]", FATTN_E_INVALID_ARG, {"key 'attn_scale'", "float32", NULL}},
    {"[" CASE_HEAD ",\"attn_scale\":\"x\"}]", FATTN_E_PARSE, {"key 'attn_scale'", NULL, NULL}},
    {"[" CASE_HEAD ",\"seqlens_q\":[1,2]}]", FATTN_E_INVALID_ARG, {"key 'seqlens_q'", "expected b = 1", NULL}},
    {"[" CASE_HEAD ",\"seqlens_q\":[5]}]", FATTN_E_INVALID_ARG, {"key 'seqlens_q'", "out of range [0, 4]", NULL}},
    {"[" CASE_HEAD ",\"seqlens_kv\":[-1]}]", FATTN_E_INVALID_ARG, {"key 'seqlens_kv'", NULL, NULL}},
    {"[" CASE_HEAD ",\"seqlens_kv\":[1.5]}]", FATTN_E_PARSE, {"key 'seqlens_kv'", "element 0", NULL}},
    {"[" CASE_HEAD ",\"seqlens_q\":\"4\"}]", FATTN_E_PARSE, {"key 'seqlens_q'", NULL, NULL}},
    {"[" CASE_HEAD ",\"seed\":-1}]", FATTN_E_INVALID_ARG, {"key 'seed'", NULL, NULL}},
    {"[" CASE_HEAD ",\"rng_seed\":true}]", FATTN_E_PARSE, {"key 'rng_seed'", NULL, NULL}},
    {"[" CASE_HEAD ",\"rng_offset\":1.5}]", FATTN_E_PARSE, {"key 'rng_offset'", NULL, NULL}},
    {"{}", FATTN_E_PARSE, {"t:", "expected a JSON array", NULL}},
    {"[1]", FATTN_E_PARSE, {"case (#1)", "expected an object", NULL}},
    {"[" CASE_HEAD "},[]]", FATTN_E_PARSE, {"case (#2)", "an array", NULL}},
    {"[{", FATTN_E_PARSE, {"t:", "line 1", NULL}},
    {"[NaN]", FATTN_E_PARSE, {"line 1", NULL, NULL}},
    {"", FATTN_E_PARSE, {"t:", NULL, NULL}},
};
#define N_ERRORS ((int)(sizeof error_table / sizeof error_table[0]))

START_TEST(test_errors)
{
    fh_spec_list l = {(fh_spec *)1, 99};
    const char *j = error_table[_i].json;
    fattn_status st = fh_spec_parse_json(j, strlen(j), "t", &l);
    ck_assert_msg(st == error_table[_i].status, "row %d (%s): status %s, want %s; message: %s", _i,
                  j, fattn_status_name(st), fattn_status_name(error_table[_i].status),
                  fattn_last_error());
    ck_assert_ptr_null(l.items);
    ck_assert_uint_eq(l.count, 0);
    const char *msg = fattn_last_error();
    ck_assert_msg(strncmp(msg, "t: ", 3) == 0, "row %d: message does not name the source: %s", _i,
                  msg);
    for (int k = 0; k < 3; k++) {
        const char *w = error_table[_i].must[k];
        if (w)
            ck_assert_msg(strstr(msg, w) != NULL, "row %d: message lacks \"%s\": %s", _i, w, msg);
    }
}
END_TEST

START_TEST(test_id_length)
{
    char json[512];
    char id[FH_SPEC_ID_MAX + 2];
    memset(id, 'a', sizeof id - 1);
    id[FH_SPEC_ID_MAX] = '\0'; /* exactly the maximum: fine */
    snprintf(json, sizeof json, "[{\"id\":\"%s\",\"b\":1,\"h\":1,\"sq\":1,\"d_qk\":1}]", id);
    fh_spec_list l;
    ck_assert_int_eq(fh_spec_parse_json(json, strlen(json), "t", &l), FATTN_OK);
    ck_assert_uint_eq(strlen(l.items[0].id), FH_SPEC_ID_MAX);
    fh_spec_list_free(&l);
    id[FH_SPEC_ID_MAX] = 'a';
    id[FH_SPEC_ID_MAX + 1] = '\0';
    snprintf(json, sizeof json, "[{\"id\":\"%s\",\"b\":1,\"h\":1,\"sq\":1,\"d_qk\":1}]", id);
    ck_assert_int_eq(fh_spec_parse_json(json, strlen(json), "t", &l), FATTN_E_PARSE);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "longer than 128"));
}
END_TEST

/* ---- the default matrix ---- */

START_TEST(test_default_matrix)
{
    fh_spec_list l;
    fattn_status st = fh_spec_load_default(&l);
    ck_assert_msg(st == FATTN_OK, "%s", fattn_last_error());
    ck_assert_uint_ge(l.count, 40);
    bool seen_f16 = false, seen_bf16 = false, seen_inference = false, seen_thd_pad = false;
    for (size_t i = 0; i < l.count; i++) {
        const fh_spec *s = &l.items[i];
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(s->id, l.items[j].id);
        int64_t d = s->d_qk > s->d_v ? s->d_qk : s->d_v;
        /* FP8 cases need d = 128 (rule fp8_head_dim), and one crosses cuDNN's
         * 64-row tile (65 x 72): a larger bound for them, still small on the
         * CPU. */
        ck_assert_msg(s->b * s->h * s->sq * s->skv * d <= (s->fp8 ? 600000 : 200000),
                      "%s is too big", s->id);
        seen_f16 |= s->dtype == FATTN_DTYPE_FLOAT16;
        seen_bf16 |= s->dtype == FATTN_DTYPE_BFLOAT16;
        seen_inference |= !s->is_training;
        seen_thd_pad |= s->pad_between_seqs;
        /* Every case round-trips through its canonical form. */
        char *c = NULL;
        ck_assert_int_eq(fh_spec_canonical(s, &c), FATTN_OK);
        fh_spec t;
        parse_one_ok(c, &t);
        ck_assert_msg(fh_spec_equal(s, &t), "%s does not round-trip", s->id);
        fh_spec_free(&t);
        free(c);
        char line[512];
        ck_assert_int_eq(fh_spec_summary(s, line, sizeof line), FATTN_OK);
        ck_assert(line[0] && !strchr(line, '\n') && !strchr(line, '\t'));
    }
    ck_assert(seen_f16 && seen_bf16 && seen_inference && seen_thd_pad);
    fh_spec_list_free(&l);
}
END_TEST

START_TEST(test_summary)
{
    fh_spec s;
    parse_one_ok(full_json, &s);
    char line[512];
    ck_assert_int_eq(fh_spec_summary(&s, line, sizeof line), FATTN_OK);
    ck_assert_str_eq(line, "float16 thd_t2hd b=2 h=4 hg=2 sq=5 skv=7 d=16 d_v=8 "
                           "mask=padding_causal_bottom_right window=[-1,0] bottom_right=false "
                           "bias=post_scale_bias/b1ss softmax=off-by-one dropout=1e-05 scale=0.1 "
                           "pad_between_seqs seqlens=explicit max_logit nondeterministic "
                           "no_fast_zero_fill inference");
    char tiny[8];
    ck_assert_int_eq(fh_spec_summary(&s, tiny, sizeof tiny), FATTN_OK);
    ck_assert_str_eq(tiny, "float16");
    fh_spec_free(&s);
}
END_TEST

START_TEST(test_glob)
{
    ck_assert(fh_spec_matches_glob("layout.thd_thd_thd.padding.f16", "layout.*"));
    ck_assert(fh_spec_matches_glob("layout.thd_thd_thd.padding.f16", "*.f16"));
    ck_assert(fh_spec_matches_glob("mask.causal.bf16", "mask.?ausal.*"));
    ck_assert(fh_spec_matches_glob("a", "[abc]"));
    ck_assert(!fh_spec_matches_glob("mask.causal.bf16", "*.f16"));
    ck_assert(!fh_spec_matches_glob("x", ""));
}
END_TEST

START_TEST(test_load_file)
{
    char path[] = "/tmp/fattn-spec-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char *text = "[\n  " CASE_HEAD "},\n  {\"id\":\"y\",\"b\":2,\"h\":1,\"sq\":1,\"d_qk\":1}\n]\n";
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    fh_spec_list l;
    ck_assert_int_eq(fh_spec_load_file(path, &l), FATTN_OK);
    ck_assert_uint_eq(l.count, 2);
    ck_assert_str_eq(l.items[1].id, "y");
    fh_spec_list_free(&l);
    /* An error names the file. */
    FILE *f = fopen(path, "w");
    fputs("[{\"id\":\"z\",\"b\":1,\"h\":1,\"sq\":1,\"d_qk\":1,\"bogus\":0}]", f);
    fclose(f);
    ck_assert_int_eq(fh_spec_load_file(path, &l), FATTN_E_PARSE);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), path));
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "key 'bogus'"));
    unlink(path);
    ck_assert_int_eq(fh_spec_load_file(path, &l), FATTN_E_IO);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), path));
}
END_TEST

START_TEST(test_empty_array)
{
    fh_spec_list l;
    ck_assert_int_eq(fh_spec_parse_json("[]", 2, "t", &l), FATTN_OK);
    ck_assert_uint_eq(l.count, 0);
    fh_spec_list_free(&l);
}
END_TEST

static void *failing_malloc(size_t n)
{
    (void)n;
    return NULL;
}

/* jansson's parser out of memory: reported as such, not as a syntax error */
START_TEST(test_parse_out_of_memory)
{
    fh_spec_list l;
    json_set_alloc_funcs(failing_malloc, free);
    fattn_status st = fh_spec_parse_json(min_json, strlen(min_json), "t", &l);
    json_set_alloc_funcs(malloc, free);
    ck_assert_int_eq(st, FATTN_E_NOMEM);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "t: out of memory parsing JSON"));
}
END_TEST

START_TEST(test_bias_shape_names)
{
    static const char *names[] = {"1hss", "b1ss", "bhss", "11ss", "111s"};
    for (int i = 0; i < 5; i++) {
        fh_bias_shape s;
        ck_assert_int_eq(fh_bias_shape_parse(names[i], &s), FATTN_OK);
        ck_assert_int_eq(s, i);
        ck_assert_str_eq(fh_bias_shape_name(s), names[i]);
    }
    ck_assert_ptr_null(fh_bias_shape_name((fh_bias_shape)5));
}
END_TEST

/* ---- the resolved model (case.h) ------------------------------------------ */

static void shape_is(const fh_case_shape *t, fattn_dtype dt, int ndim, const int64_t *want)
{
    ck_assert(t->present);
    ck_assert_int_eq(t->dtype, dt);
    ck_assert_int_eq(t->ndim, ndim);
    for (int i = 0; i < ndim; i++)
        ck_assert_int_eq(t->shape[i], want[i]);
}

/* full_json: THD q and kv (t2hd packing), padding mask with explicit
 * lengths and gaps, b1ss bias, an off-by-one sink, inference, attn_scale 0.1. */
START_TEST(test_resolve_full)
{
    fh_spec s;
    parse_one_ok(full_json, &s);
    fh_case c;
    ck_assert_int_eq(fh_case_resolve(&s, &c), FATTN_OK);
    ck_assert_ptr_eq(c.spec, &s);
    ck_assert_int_eq(c.layout_group, FATTN_LAYOUT_GROUP_HD_2HD);
    ck_assert_int_eq(c.q_format, FATTN_FORMAT_THD);
    ck_assert_int_eq(c.kv_format, FATTN_FORMAT_THD);
    ck_assert(c.thd && c.padding && !c.self_packed);
    /* causal window (-1, 0) stays; bottom-right masks force the diagonal */
    ck_assert_int_eq(c.window[0], -1);
    ck_assert_int_eq(c.window[1], 0);
    ck_assert(c.bottom_right_diagonal);
    ck_assert(c.attn_scale == 0.1f);
    ck_assert(c.dropout_p == 0.0f); /* not training: FusedAttention passes 0 */
    int64_t want_q[2] = {5, 0}, want_kv[2] = {7, 3};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(c.seqlens_q[i], want_q[i]);
        ck_assert_int_eq(c.seqlens_kv[i], want_kv[i]);
    }
    ck_assert_int_eq(c.cu_seqlens_q[2], 5);
    ck_assert_int_eq(c.cu_seqlens_kv[2], 10);
    /* gaps of 0..3 tokens after each sequence make the padded offsets larger */
    ck_assert_int_ge(c.cu_seqlens_q_padded[2], 5);
    ck_assert_int_le(c.cu_seqlens_q_padded[2], 5 + 6);
    ck_assert_int_eq(c.t_q, c.cu_seqlens_q_padded[2]);
    ck_assert_int_eq(c.t_kv, c.cu_seqlens_kv_padded[2]);
    shape_is(&c.t.q, FATTN_DTYPE_FLOAT16, 3, (int64_t[]){c.t_q, 4, 16});
    shape_is(&c.t.k, FATTN_DTYPE_FLOAT16, 3, (int64_t[]){c.t_kv, 2, 16});
    shape_is(&c.t.v, FATTN_DTYPE_FLOAT16, 3, (int64_t[]){c.t_kv, 2, 8});
    shape_is(&c.t.out, FATTN_DTYPE_FLOAT16, 3, (int64_t[]){c.t_q, 4, 8});
    shape_is(&c.t.attn_bias, FATTN_DTYPE_FLOAT16, 4, (int64_t[]){2, 1, 5, 7});
    shape_is(&c.t.softmax_offset, FATTN_DTYPE_FLOAT32, 4, (int64_t[]){1, 4, 1, 1});
    ck_assert(!c.t.d_out.present && !c.t.dq.present && !c.t.d_bias.present);
    fh_case_free(&c);
    ck_assert_ptr_null(c.seqlens_q);
    fh_case_free(&c); /* twice is fine */
    fh_spec_free(&s);
}
END_TEST

/* min_json: every default; a dense case has no padded offsets, every
 * length is the maximum, the scale is TE's default. */
START_TEST(test_resolve_defaults)
{
    fh_spec s;
    parse_one_ok(min_json, &s);
    fh_case c;
    ck_assert_int_eq(fh_case_resolve(&s, &c), FATTN_OK);
    ck_assert(!c.thd && !c.padding);
    ck_assert_int_eq(c.window[0], -1);
    ck_assert_int_eq(c.window[1], -1);
    ck_assert(c.bottom_right_diagonal);
    ck_assert(c.attn_scale == (float)(1.0 / sqrt(8.0)));
    ck_assert_int_eq(c.seqlens_q[0], 3);
    ck_assert_int_eq(c.cu_seqlens_kv[1], 3);
    ck_assert_int_eq(c.t_q, 0);
    shape_is(&c.t.q, FATTN_DTYPE_BFLOAT16, 4, (int64_t[]){1, 3, 2, 8});
    shape_is(&c.t.dq, FATTN_DTYPE_BFLOAT16, 4, (int64_t[]){1, 3, 2, 8});
    shape_is(&c.t.d_out, FATTN_DTYPE_BFLOAT16, 4, (int64_t[]){1, 3, 2, 8});
    ck_assert(!c.t.attn_bias.present && !c.t.softmax_offset.present);
    fh_case_free(&c);
    fh_spec_free(&s);
}
END_TEST

/* raw_func_args: the front ends get inference's dropout as given and
 * TE's None for a null attn_scale / bottom_right_diagonal (the values
 * DotProductAttention would resolve), the forward then running with
 * fused_attn_fwd's defaults; the canonical form carries the key only when
 * set (and round-trips it). */
START_TEST(test_raw_func_args)
{
#define R_HEAD "{\"id\":\"r\",\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":16,\"dropout_p\":0.25,"
    static const struct {
        const char *json;
        float dropout;
        bool in_canonical;
        bool scale_none; /* attn_scale_arg NaN, else 0.25 (1/sqrt(16)) or the spec's */
        int brd_arg;     /* bottom_right_diagonal_arg */
        bool brd;        /* what the forward runs with */
    } rows[] = {
        {R_HEAD "\"is_training\":false,\"raw_func_args\":true}", 0.25f, true, true, -1, false},
        {R_HEAD "\"is_training\":false,\"raw_func_args\":false}", 0.0f, false, false, 1, true},
        {R_HEAD "\"is_training\":false}", 0.0f, false, false, 1, true},
        {R_HEAD "\"raw_func_args\":true}", 0.25f, true, true, -1, false},
        {R_HEAD "\"raw_func_args\":true,\"mask\":\"causal_bottom_right\"}", 0.25f, true, true,
         -1, true},
        {R_HEAD "\"raw_func_args\":true,\"mask\":\"causal\",\"bottom_right_diagonal\":true,"
         "\"attn_scale\":0.5}", 0.25f, true, false, 1, true},
        {R_HEAD "\"mask\":\"causal\",\"bottom_right_diagonal\":true}", 0.25f, false, false, 0,
         false},
    };
#undef R_HEAD
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fh_spec s;
        parse_one_ok(rows[i].json, &s);
        fh_case c;
        ck_assert_int_eq(fh_case_resolve(&s, &c), FATTN_OK);
        ck_assert_msg(c.dropout_p == rows[i].dropout, "row %zu: dropout %g", i,
                      (double)c.dropout_p);
        ck_assert_msg(isnan(c.attn_scale_arg) == rows[i].scale_none, "row %zu: scale arg %g", i,
                      (double)c.attn_scale_arg);
        if (!rows[i].scale_none)
            ck_assert(c.attn_scale_arg == c.attn_scale);
        ck_assert_msg(c.bottom_right_diagonal_arg == rows[i].brd_arg, "row %zu: brd arg %d", i,
                      c.bottom_right_diagonal_arg);
        ck_assert_msg(c.bottom_right_diagonal == rows[i].brd, "row %zu: brd", i);
        char *canon = NULL;
        ck_assert_int_eq(fh_spec_canonical(&s, &canon), FATTN_OK);
        ck_assert_msg((strstr(canon, "\"raw_func_args\":true,\"return_max_logit\"") != NULL) ==
                          rows[i].in_canonical, "row %zu: %s", i, canon);
        ck_assert(strstr(canon, "raw_func_args\":false") == NULL);
        fh_spec t;
        parse_one_ok(canon, &t);
        ck_assert(fh_spec_equal(&s, &t));
        t.raw_func_args = !t.raw_func_args;
        ck_assert(!fh_spec_equal(&s, &t));
        fh_spec_free(&t);
        free(canon);
        fh_case_free(&c);
        fh_spec_free(&s);
    }
}
END_TEST

/* What TE refuses is an error naming the case; nothing is left to free. */
START_TEST(test_resolve_errors)
{
    static const char *bad[] = {
        "{\"id\":\"w\",\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8,\"window\":[-2,3]}",
        "{\"id\":\"t\",\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8,\"layout\":\"thd_thd_thd\","
        "\"mask\":\"padding\",\"seqlens_q\":[0],\"seqlens_kv\":[0]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fh_spec s;
        parse_one_ok(bad[i], &s);
        fh_case c;
        ck_assert_int_eq(fh_case_resolve(&s, &c), FATTN_E_INVALID_CASE);
        ck_assert_msg(strstr(fattn_last_error(), s.id) != NULL, "%s", fattn_last_error());
        ck_assert_ptr_null(c.seqlens_q);
        fh_spec_free(&s);
    }
}
END_TEST

/* The JSON of `fattn cases --resolved --json`: one array, a case per line,
 * the canonical spec inside, an error entry for a case TE refuses. */
START_TEST(test_resolve_json)
{
    static const char text[] =
        "[{\"id\":\"a\",\"b\":2,\"h\":2,\"sq\":4,\"d_qk\":8,\"mask\":\"causal\"},"
        "{\"id\":\"w\",\"b\":1,\"h\":1,\"sq\":4,\"d_qk\":8,\"window\":[-2,3]}]";
    fh_spec_list l;
    ck_assert_int_eq(fh_spec_parse_json(text, strlen(text), "t", &l), FATTN_OK);
    const fh_spec *sel[2] = {&l.items[0], &l.items[1]};
    char *json = NULL;
    ck_assert_int_eq(fh_case_list_json(sel, 2, &json), FATTN_OK);
    ck_assert_msg(json[0] == '[' && json[strlen(json) - 1] == ']', "%s", json);
    ck_assert_ptr_nonnull(strstr(json, "{\"id\":\"a\",\"spec\":{\"attn_scale\":null,\"b\":2,"));
    ck_assert_ptr_nonnull(strstr(json, "\"window\":[-1,0],\"bottom_right_diagonal\":false,"));
    ck_assert_ptr_nonnull(strstr(json, "\"cu_seqlens_q\":[0,4,8],"));
    ck_assert_ptr_nonnull(strstr(json, "\"q\":{\"dtype\":\"bfloat16\",\"shape\":[2,4,2,8]}"));
    ck_assert_ptr_nonnull(strstr(json, "},\n{\"id\":\"w\",\"spec\":"));
    ck_assert_ptr_nonnull(strstr(json, "\"error\":\"case w: window:"));
    free(json);
    ck_assert_int_eq(fh_case_list_json(sel, 0, &json), FATTN_OK);
    ck_assert_str_eq(json, "[\n]");
    free(json);
    fh_spec_list_free(&l);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("spec");
    TCase *tc = tcase_create("parse");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_full);
    tcase_add_test(tc, test_canonical_python);
    tcase_add_test(tc, test_canonical_every_key_sorted);
    tcase_add_test(tc, test_integer_for_float_key);
    tcase_add_test(tc, test_equal_and_copy);
    tcase_add_test(tc, test_id_length);
    tcase_add_test(tc, test_summary);
    tcase_add_test(tc, test_glob);
    tcase_add_test(tc, test_load_file);
    tcase_add_test(tc, test_empty_array);
    tcase_add_test(tc, test_parse_out_of_memory);
    tcase_add_test(tc, test_bias_shape_names);
    suite_add_tcase(s, tc);

    TCase *tf = tcase_create("float_repr");
    tcase_set_timeout(tf, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tf, test_float_repr, 0, N_FLOATS);
    tcase_add_test(tf, test_float_errors);
    suite_add_tcase(s, tf);

    TCase *te = tcase_create("errors");
    tcase_set_timeout(te, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(te, test_errors, 0, N_ERRORS);
    suite_add_tcase(s, te);

    TCase *td = tcase_create("default_matrix");
    tcase_set_timeout(td, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(td, test_default_matrix);
    suite_add_tcase(s, td);

    TCase *tr = tcase_create("resolve");
    tcase_set_timeout(tr, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tr, test_resolve_full);
    tcase_add_test(tr, test_resolve_defaults);
    tcase_add_test(tr, test_raw_func_args);
    tcase_add_test(tr, test_resolve_errors);
    tcase_add_test(tr, test_resolve_json);
    suite_add_tcase(s, tr);
    return s;
}

FATTN_TEST_MAIN(make_suite, fattn_test_no_ids)
